"""Background downloads from a real nginx (docs/contract.md: "Transfers")."""

import json
import os
import re
import signal
from pathlib import Path

import shutil
import subprocess
import time

import pytest

from drowse_e2e import DROWSE, sha256_file, wait_until
from raw_http import request

MiB = 1 << 20

COPY_LOCATION_PY = r"""#!/usr/bin/python3
# Events handler: saves its stdin and a copy of every transfer's file at "location".
import json, os, re, shutil, sys
out = sys.argv[1]
data = sys.stdin.buffer.read()
doc = json.loads(data)
for t in doc.get("transfers", []):
    loc = t.get("location")
    if loc:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(t.get("id")))
        shutil.copyfile(loc, os.path.join(out, name + ".copy.tmp"))
        os.rename(os.path.join(out, name + ".copy.tmp"), os.path.join(out, name + ".copy"))
with open(os.path.join(out, "stdin.json.tmp"), "wb") as f:
    f.write(data)
os.rename(os.path.join(out, "stdin.json.tmp"), os.path.join(out, "stdin.json"))
"""


def wait_transfer(d, tid, timeout="60s"):
    return d.cli("transfer", "wait", tid, "--timeout", timeout, timeout=90)


def test_download_to_path_lands_with_sha256_and_runs_events_handler(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    size = 3 * MiB + 123
    url, digest, _ = nginx.add_file("payload.bin", size)
    dest = d.base / "downloads" / "payload.bin"
    dest.parent.mkdir()

    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    r = wait_transfer(d, tid)
    assert r.returncode == 0, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"

    assert dest.is_file()
    assert sha256_file(dest) == digest
    t = d.transfer(tid)
    assert t["id"] == tid
    assert t["app"] == "dl"
    assert t["kind"] == "download"
    assert t["state"] == "completed", t
    assert t["url"] == url
    assert t["bytes_done"] == size
    assert t["bytes_total"] in (size, None)
    assert tid in [x["id"] for x in d.json("transfers")]
    assert tid in [x["id"] for x in d.json("transfers", "--app", "dl")]

    [run] = d.wait_runs("dl", 1, timeout=15)
    assert run.env.get("DROWSE_EVENT") == "transfers"
    assert run.env.get("DROWSE_APP") == "dl"
    doc = run.json()
    ids = [x["id"] for x in doc["transfers"]]
    assert tid in ids, doc
    [mine] = [x for x in doc["transfers"] if x["id"] == tid]
    assert mine["state"] == "completed", mine
    # --to was given: the file stays after the handler.
    assert sha256_file(dest) == digest


def test_download_without_to_is_at_location_during_events_handler(nginx, make_drowse):
    d = make_drowse()
    out = d.out_dir("dl")
    script = d.write_script("copy_location.py", COPY_LOCATION_PY)
    d.add_app("dl", events=[str(script), str(out)])
    d.start()
    url, digest, _ = nginx.add_file("inbox.bin", 1 * MiB + 7)

    tid = d.download(url, "dl", "--sha256", digest)
    r = wait_transfer(d, tid)
    assert r.returncode == 0, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"

    stdin_file = wait_until(lambda: (out / "stdin.json").exists() and out / "stdin.json", 15,
                            what="the events handler to run")
    doc = json.loads(stdin_file.read_bytes())
    [mine] = [x for x in doc["transfers"] if x["id"] == tid]
    location = mine.get("location")
    assert location, mine
    copies = list(out.glob("*.copy"))
    assert len(copies) == 1, copies
    assert sha256_file(copies[0]) == digest
    # Without --to the file is removed once the handler has exited.
    wait_until(lambda: not os.path.exists(location), 10, what=f"{location} to be removed after the handler")


def test_non_http_urls_are_refused(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl", events=d.recorder("dl"))
    d.start()

    r = d.cli("transfer", "download", "file:///etc/passwd", "--app", "dl")
    assert r.returncode != 0, r.stdout
    assert r.stderr.strip()
    assert d.json("transfers") == []

    # A harmless http redirect is followed...
    url, digest, _ = nginx.add_file("ok.bin", 64 * 1024)
    ok_dest = d.base / "ok.bin"
    tid_ok = d.download(nginx.url("/redirect-to-files/ok.bin"), "dl", "--to", str(ok_dest))
    assert wait_transfer(d, tid_ok).returncode == 0
    assert sha256_file(ok_dest) == digest

    # ...but a redirect to file:// is not.
    dest = d.base / "passwd-copy"
    tid = d.download(nginx.url("/redirect-to-file"), "dl", "--to", str(dest))
    r = wait_transfer(d, tid, timeout="30s")
    assert r.returncode == 1, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    t = d.transfer(tid)
    assert t["state"] == "failed", t
    assert isinstance(t["reason"], str) and t["reason"].strip(), t
    assert not dest.exists()
    assert any(e["uri"] == "/redirect-to-file" and e["status"] == 302 for e in nginx.access_entries())
    # /etc/passwd's bytes must not have been copied anywhere under the daemon's directories.
    passwd = Path("/etc/passwd").read_bytes()
    for root, _, files in os.walk(d.base):
        for f in files:
            p = Path(root) / f
            if p.is_file() and p.stat().st_size == len(passwd):
                assert p.read_bytes() != passwd, f"{p} holds a copy of /etc/passwd"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_restart_mid_download_resumes_with_range(nginx, make_drowse, sig):
    d = make_drowse(extra_config='[transfers]\ncommit_interval = "200ms"')
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    size = 24 * MiB
    url, digest, _ = nginx.add_file("big.bin", size, slow=True)  # served at 4 MB/s
    dest = d.base / "downloads" / "big.bin"
    dest.parent.mkdir()

    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    wait_until(lambda: (d.transfer(tid).get("bytes_done") or 0) > 4 * MiB, 20, interval=0.1,
               what="more than 4 MiB downloaded")
    rc = d.stop(sig)
    assert not dest.exists(), "the final file appeared before the download finished"

    d.start()
    r = wait_transfer(d, tid)
    assert r.returncode == 0, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    assert sha256_file(dest) == digest
    t = d.transfer(tid)
    assert t["state"] == "completed" and t["bytes_done"] == size, t

    entries = [e for e in nginx.access_entries() if e["uri"] == "/slow/big.bin"]
    resumed = []
    for e in entries:
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", e["range"])
        if m and int(m.group(1)) > 0 and e["status"] == 206:
            resumed.append(int(m.group(1)))
    assert resumed, f"no ranged (bytes=N-, N > 0) request answered 206: {entries}"
    assert all(n < size for n in resumed)
    # The last request is the resumed one and it carried the rest of the file.
    last = entries[-1]
    assert last["status"] == 206 and last["body_bytes"] == size - resumed[-1], entries
    if sig == signal.SIGTERM:
        assert rc == 0, f"drowsed exited {rc} on SIGTERM (expected a graceful stop)"


def test_sha256_mismatch_fails_without_file(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    url, digest, _ = nginx.add_file("wrong.bin", 256 * 1024)
    dest = d.base / "wrong.bin"
    tid = d.download(url, "dl", "--sha256", "0" * 64, "--to", str(dest))
    r = wait_transfer(d, tid, timeout="30s")
    assert r.returncode == 1, f"transfer wait exited {r.returncode}: {r.stdout} {r.stderr}"
    t = d.transfer(tid)
    assert t["state"] == "failed", t
    assert isinstance(t["reason"], str) and t["reason"].strip(), t
    assert not dest.exists()


def write_calls(pid: int) -> int:
    """write(2)-family system calls the process made so far (syscw of /proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscw:"))


def test_body_is_written_in_large_writes(nginx, make_drowse):
    """libcurl hands the body over 16 KiB at a time; drowsed gathers it into 256 KiB writes
    (Download.writeSize): a 16 MiB download is about 64 write calls, not 1024, and arrives whole."""
    d = make_drowse()
    d.add_app("dl")
    d.start()
    size = 16 * (1 << 20) + 12345  # not a multiple of the gathering size: the tail is written at the end
    url, digest, _ = nginx.add_file("gathered.bin", size)
    warm = d.download(url + "?warm", "dl", "--to", str(d.base / "warm.bin"))  # loads libcurl first
    assert d.cli("transfer", "wait", warm, "--timeout", "60s", timeout=90).returncode == 0
    before = write_calls(d.proc.pid)
    dest = d.base / "gathered.bin"
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    r = d.cli("transfer", "wait", tid, "--timeout", "60s", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    writes = write_calls(d.proc.pid) - before
    assert sha256_file(dest) == digest and dest.stat().st_size == size
    # 65 body writes, and the API's answers, the log and the database's: well under the 1024
    # that one write per 16 KiB would take.
    assert writes < 400, f"{writes} write calls for a 16 MiB download"


def cli_connects(d, out: Path, *args: str, timeout: float = 90):
    """Runs `drowse ARGS` under strace; returns it and how many times it connected to drowsed's socket."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (deploy/test.sh installs it)")
    start = time.monotonic()
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(out), str(DROWSE), *args],
                       capture_output=True, text=True, timeout=timeout, env={**d.env(), "DROWSE_SOCKET": str(d.socket)})
    took = time.monotonic() - start
    return r, sum(1 for line in out.read_text().splitlines() if str(d.socket) in line), took


def test_transfer_wait_asks_drowsed_once_for_the_end_not_four_times_a_second(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl")
    d.start()
    url, digest, _ = nginx.add_file("waited.bin", 12 * MiB, slow=True)  # 3 s at 4 MiB/s
    dest = d.base / "waited.bin"
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    r, connects, took = cli_connects(d, d.base / "wait.strace", "transfer", "wait", tid, "--timeout", "60s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sha256_file(dest) == digest
    assert took >= 1.5, f"the download took {took:.1f} s: too fast to tell a long poll from polling"
    # Polling 4 times a second made 12 or more requests here; drowsed now answers at the end.
    assert connects == 1, f"{connects} requests in {took:.1f} s"

    # A timeout: asked once, answered when the time is up, exit 2.
    url2, _, _ = nginx.add_file("slower.bin", 40 * MiB, slow=True)
    tid2 = d.download(url2, "dl")
    r, connects, took = cli_connects(d, d.base / "timeout.strace", "transfer", "wait", tid2, "--timeout", "1s")
    assert r.returncode == 2, r.stdout + r.stderr
    assert 0.9 <= took < 5 and connects <= 2, (took, connects)
    # A wait beyond 60 s, or not a number, is refused; 0 answers at once.
    for bad in ("61", "-1", "soon", "nan"):
        assert request(d.socket, "GET", f"/v1/transfers/{tid2}?wait={bad}")[0] == 400, bad
    status, body = request(d.socket, "GET", f"/v1/transfers/{tid2}?wait=0")
    assert status == 200 and json.loads(body)["id"] == tid2
