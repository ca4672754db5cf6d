"""`systemctl reload drowsed` (SIGHUP) re-reads drowse.toml and the app files without dropping
work: the same process goes on, a running download is not interrupted, an added app is
scheduled and subscribed, a removed one is gone, and a broken drowse.toml refuses the reload
while the daemon keeps serving with what it had."""

from __future__ import annotations

import signal

from drowse_e2e import notify_topic, sha256_file, wait_until

MiB = 1 << 20


def hup(d) -> None:
    d.proc.send_signal(signal.SIGHUP)


def app_ids(d) -> list[str]:
    return sorted(a["id"] for a in d.apps())


def test_reload_adds_and_removes_apps_without_touching_a_running_download(broker, nginx, make_drowse):
    d = make_drowse(broker=broker, extra_config='[transfers]\ncommit_interval = "200ms"')
    d.add_app("dl", events=d.recorder("dl"))
    old = d.add_app("old", fetch=d.recorder("old"))
    d.start()
    broker.wait_subscribed(notify_topic("old"))
    pid = d.proc.pid

    size = 24 * MiB
    url, digest, _ = nginx.add_file("big.bin", size, slow=True)  # ~6 s at 4 MB/s
    dest = d.base / "downloads" / "big.bin"
    dest.parent.mkdir()
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    wait_until(lambda: (d.transfer(tid).get("bytes_done") or 0) > 2 * MiB, 20, interval=0.1, what="2 MiB downloaded")

    # An app added, one removed, then the reload.
    d.add_app("new", fetch=d.recorder("new", name="fetch"), notification=d.recorder("new", name="note"))
    old.unlink()
    hup(d)
    wait_until(lambda: app_ids(d) == ["dl", "new"], 10, interval=0.1, what="the reloaded app list")
    assert d.proc.poll() is None and d.proc.pid == pid, "SIGHUP ended drowsed"

    # The new app is a full app: subscribed (a notification runs its handler) and fetchable.
    broker.wait_subscribed(notify_topic("new"))
    broker.publish(notify_topic("new"), b'{"aps": {"content-available": 1}, "id": "r1"}')
    wait_until(lambda: d.runs("note"), 15, what="the new app's notification handler")
    out = d.json("fetch", "new", timeout=30)
    assert out["result"] == "new-data", out
    # The removed app is unknown, and its topic was unsubscribed at the broker (the persistent
    # session would otherwise keep queueing its notifications for good).
    assert d.cli("fetch", "old").returncode != 0
    wait_until(lambda: "Received UNSUBSCRIBE" in broker.log_text(), 10, what="an UNSUBSCRIBE at the broker")

    # The download went on in the same attempt: one request, the whole file, the right bytes.
    t = wait_until(lambda: (t := d.transfer(tid))["state"] in ("completed", "failed") and t, 60, interval=0.2,
                   what="the download to finish")
    assert t["state"] == "completed", t
    assert sha256_file(dest) == digest
    entries = [e for e in nginx.access_entries() if e["uri"] == "/slow/big.bin"]
    assert len(entries) == 1 and entries[0]["body_bytes"] == size, entries


def test_broken_config_refuses_the_reload_and_the_daemon_goes_on(make_drowse):
    d = make_drowse()
    d.add_app("a", fetch=d.recorder("a"))
    d.start()
    pid = d.proc.pid
    good = d.config.read_text()
    d.config.write_text(good + "\n[scheduler\n")  # not TOML
    d.add_app("b", fetch=d.recorder("b"))
    hup(d)
    # Nothing was reloaded: app b did not appear, and the daemon still answers.
    wait_until(lambda: "reload refused" in d.stderr_text(), 10, what="the refusal")
    assert app_ids(d) == ["a"]
    assert d.json("fetch", "a", timeout=30)["result"] == "new-data"
    # Fixed, the next reload takes b.
    d.config.write_text(good)
    hup(d)
    wait_until(lambda: app_ids(d) == ["a", "b"], 10, interval=0.1, what="b after the good reload")
    assert d.proc.pid == pid and d.proc.poll() is None
