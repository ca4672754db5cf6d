"""Metrics (`GET /v1/metrics`, `drowse metrics`, `[metrics] textfile`): the counters move by
exactly what happened, and the whole text passes a real Prometheus parser."""

import json
import os
import socket
import subprocess
import sys

from drowse_e2e import DROWSE, notify_topic, sha256_file, wait_until

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # `python3` is not Debian's (pyenv): the Debian package is where deploy/test.sh puts it
    sys.path.append("/usr/lib/python3/dist-packages")
    from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict:
    """Every sample by (name, sorted labels), after checking the whole text with the parser."""
    samples = {}
    families = list(text_string_to_metric_families(text))
    assert families, text
    for f in families:
        assert f.type in ("counter", "gauge"), (f.name, f.type)
        assert f.documentation, f"{f.name} has no HELP"
        for s in f.samples:
            assert s.name.startswith(("drowse_", "process_")), s.name
            if f.type == "counter":
                assert s.name.endswith("_total"), s.name
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"series twice: {key}"
            samples[key] = s.value
    return samples


def scrape(d) -> dict:
    return parse(d.cli_ok("metrics").stdout)


def get(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def http_get(path: str, sock: str) -> tuple[int, dict, bytes]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_counters_move_by_exactly_what_happened(broker, nginx, make_drowse, workdir):
    textfile_dir = workdir / "node-exporter"
    textfile_dir.mkdir()
    textfile = textfile_dir / "drowse.prom"
    d = make_drowse(broker=broker, handler_deadline="10s", extra_config=f'[metrics]\ntextfile = "{textfile}"\n')
    d.add_app("news", fetch=d.recorder("news", name="fetch"), notification=d.recorder("news", name="note"),
              events=d.recorder("news", name="events"))
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    d.wait_mqtt_connected(True)

    # The route answers the text format's content type; the command prints the same families.
    status, headers, body = http_get("/v1/metrics", str(d.socket))
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
    parse(body.decode())
    # The textfile is there from the start, before anything happened.
    wait_until(lambda: textfile.is_file(), 10, what="the metrics textfile")

    before = scrape(d)
    assert get(before, "drowse_mqtt_connects_total") == 1, before
    assert get(before, "drowse_mqtt_connected") == 1
    assert get(before, "process_resident_memory_bytes") > 1 << 20
    assert get(before, "process_cpu_seconds_total") > 0
    assert get(before, "drowse_apps") == 1

    # 1. a fetch
    out = d.json("fetch", "news", timeout=30)
    assert out["result"] == "new-data", out
    # The textfile follows the fetch's end (written once the turn that recorded it ends).
    def textfile_has_fetch():
        try:
            s = parse(textfile.read_text())
        except (OSError, ValueError, AssertionError):
            return None
        return s if get(s, "drowse_fetch_runs_total", app="news", result="new-data") == 1 else None
    wait_until(textfile_has_fetch, 10, what="the textfile to show the fetch")
    assert not [p for p in textfile_dir.iterdir() if p.name != "drowse.prom"], "a temporary file was left beside the textfile"

    # 2. a notification, 3. its duplicate, 4. a refused one (not JSON)
    d.push("news", "--id", "metrics-1", "-d", "content-id=1")
    d.wait_runs("note", 1, timeout=15)
    d.push("news", "--id", "metrics-1", "-d", "content-id=1")
    broker.publish(notify_topic("news"), b'{"aps": {"content-available": 1}, "content-id": ', qos=1)

    # 5. a download, whose end runs the events handler
    size = 300_000
    url, digest, _ = nginx.add_file("metrics.bin", size)
    dest = d.base / "downloads" / "metrics.bin"
    dest.parent.mkdir()
    tid = d.download(url, "news", "--sha256", digest, "--to", str(dest))
    r = d.cli("transfer", "wait", tid, "--timeout", "60s", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sha256_file(dest) == digest
    d.wait_runs("events", 1, timeout=15)

    def settled():
        s = scrape(d)
        done = (get(s, "drowse_notifications_total", outcome="refused") - get(before, "drowse_notifications_total", outcome="refused") >= 1
                and get(s, "drowse_notifications_total", outcome="duplicate") - get(before, "drowse_notifications_total", outcome="duplicate") >= 1
                and get(s, "drowse_handler_runs_total", app="news", event="transfers") >= 1)
        return s if done else None
    after = wait_until(settled, 15, what="the duplicate, the refusal and the events handler to be counted")
    d.wait_idle()  # anything counted twice would show by now
    after = scrape(d)

    def moved(name, **labels):
        return get(after, name, **labels) - get(before, name, **labels)

    assert moved("drowse_fetch_runs_total", app="news", result="new-data") == 1
    assert moved("drowse_fetch_runs_total", app="news", result="failed") == 0
    assert moved("drowse_handler_runs_total", app="news", event="fetch") == 1
    assert moved("drowse_handler_runs_total", app="news", event="notification") == 1
    assert moved("drowse_handler_runs_total", app="news", event="transfers") == 1
    assert 0 < moved("drowse_handler_seconds_total", app="news") < 30

    assert moved("drowse_notifications_total", outcome="received") == 3
    assert moved("drowse_notifications_total", outcome="accepted") == 1
    assert moved("drowse_notifications_total", outcome="duplicate") == 1
    assert moved("drowse_notifications_total", outcome="refused") == 1
    for outcome in ("ignored", "deferred", "collapsed", "expired"):
        assert moved("drowse_notifications_total", outcome=outcome) == 0, outcome
    assert moved("drowse_notifications_refused_total", reason="malformed") == 1
    for reason in ("unknown_app", "too_large", "bad_signature", "unsigned", "expired"):
        assert moved("drowse_notifications_refused_total", reason=reason) == 0, reason

    assert moved("drowse_transfer_bytes_total", app="news", direction="download") == size
    assert moved("drowse_transfer_bytes_total", app="news", direction="upload") == 0
    assert moved("drowse_transfer_resumes_total") == 0
    assert moved("drowse_transfer_retries_total") == 0
    for reason in ("http_4xx", "http_5xx", "checksum", "too_large", "network", "disk_full", "timeout", "other"):
        assert get(after, "drowse_transfer_failures_total", reason=reason) == 0, reason

    assert moved("drowse_mqtt_connects_total") == 0
    assert moved("drowse_mqtt_disconnects_total") == 0
    assert get(after, "drowse_running_handlers") == 0
    assert moved("process_cpu_seconds_total") >= 0

    # The textfile caught up with the last event too, and is valid as a whole.
    wait_until(lambda: (lambda s: s if s and get(s, "drowse_transfer_bytes_total", app="news", direction="download") == size else None)(
        parse(textfile.read_text())), 10, what="the textfile to show the download")


def test_a_failed_download_counts_its_reason(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl")
    d.start()
    url = nginx.url("/no-such-file.bin")
    tid = d.download(url, "dl")
    r = d.cli("transfer", "wait", tid, "--timeout", "30s", timeout=60)
    assert r.returncode != 0
    assert d.transfer(tid)["state"] == "failed"
    s = wait_until(lambda: (lambda s: s if get(s, "drowse_transfer_failures_total", reason="http_4xx") == 1 else None)(scrape(d)),
                   10, what="the failure to be counted")
    assert sum(get(s, "drowse_transfer_failures_total", reason=r) for r in
               ("http_5xx", "checksum", "too_large", "network", "disk_full", "timeout", "other")) == 0


def test_metrics_are_for_root_and_the_drowse_group(make_drowse):
    if os.geteuid() != 0:
        import pytest
        pytest.skip("needs root to act as another user (as anyone else, the caller is drowsed's own user, an admin)")
    d = make_drowse()
    d.start()
    os.chmod(d.base, 0o755)  # nobody must reach the socket's folder
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(DROWSE), "--socket", str(d.socket), "metrics"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "drowse group" in r.stderr, r.stderr
    assert "drowse_" not in r.stdout


def test_textfile_folder_writer_cannot_turn_root_into_a_file_writer(make_drowse, workdir):
    """Whoever may write the textfile's folder (here nobody, as the
    prometheus user often owns node-exporter's folder) plants symlinks at every name drowsed could
    use for its temporary file and at the final name; root must write through none of them. The
    textfile is readable by node_exporter (0644) even under the unit's umask 077."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("needs root to act as another user")
    nobody = 65534
    os.chmod(workdir, 0o755)
    folder = workdir / "node-exporter"
    folder.mkdir()
    os.chown(folder, nobody, nobody)
    vault = workdir / "vault"
    vault.mkdir(mode=0o700)
    target = vault / "root-only"
    target.write_bytes(b"root's file\n")
    os.chmod(target, 0o600)
    textfile = folder / "drowse.prom"
    d = make_drowse(extra_config=f'[metrics]\ntextfile = "{textfile}"\n')
    d.add_app("news", fetch=d.recorder("news"))
    old_umask = os.umask(0o077)
    try:
        d.start(wait=False)
    finally:
        os.umask(old_umask)
    pid = d.proc.pid
    # Names an older drowsed used (`<textfile>.tmp.<pid>`), planted as nobody for the pids around.
    for p in range(max(1, pid - 5), pid + 50):
        subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                        "ln", "-sf", str(target), f"{textfile}.tmp.{p}"], check=True)
    d.wait_ready()
    wait_until(lambda: textfile.is_file() and not textfile.is_symlink(), 10, what="the metrics textfile")
    # A link planted at the final name is replaced, not written through.
    subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                    "ln", "-sf", str(target), f"{textfile}.new"], check=True)
    subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                    "mv", "-f", f"{textfile}.new", str(textfile)], check=True)
    out = d.json("fetch", "news", timeout=30)
    assert out["result"] == "new-data", out

    def rewritten():
        return textfile.is_file() and not textfile.is_symlink() and "drowse_fetch_runs_total" in textfile.read_text()
    wait_until(rewritten, 10, what="the textfile rewritten after the fetch")
    assert target.read_bytes() == b"root's file\n", "root wrote through a planted link"
    st = target.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    assert textfile.stat().st_mode & 0o777 == 0o644, oct(textfile.stat().st_mode)
    parse(textfile.read_text())
