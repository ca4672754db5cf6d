"""The local API under hostile local users.

- A client cannot make drowsed hold unbounded memory: one that pipelines requests and never reads
  the answers stops being read, then is closed; listings come a page at a time.
- One uid cannot stall the API for the others: its connections over `[api]
  max_connections_per_uid` are answered 429 and closed at once, so root and other users are
  answered while it holds its connections open.
- Smaller leaks: broker credentials in an MQTT URL are refused; a user's status shows only its
  own apps; another user's app (or its transfers and tasks) answers exactly like a missing one.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from drowse_e2e import DROWSE, DROWSED, wait_until
from raw_http import connect, open_fds, read_response, request, send_all

NOBODY = 65534
STRANGER = 23456  # a uid with no account and no app
MiB_kB = 1024

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")


def vm_rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def as_uid(uid: int, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd],
                          capture_output=True, text=True, timeout=timeout, env={"PATH": "/usr/bin:/bin"})


def curl_as(uid: int, d, method: str, path: str, body: str | None = None, timeout: float = 10) -> tuple[int, dict | None, float]:
    """(HTTP status, JSON body or None, seconds taken) of one request made as `uid`."""
    cmd = ["curl", "-s", "-m", str(timeout), "-o", "-", "-w", "\n%{http_code}", "-X", method,
           "--unix-socket", str(d.socket), f"http://drowse{path}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data", body]
    started = time.monotonic()
    r = as_uid(uid, *cmd, timeout=timeout + 5)
    took = time.monotonic() - started
    text, _, code = r.stdout.rpartition("\n")
    try:
        doc = json.loads(text) if text else None
    except json.JSONDecodeError:
        doc = None
    return int(code or 0), doc, took


def timed_status(d) -> float:
    started = time.monotonic()
    r = subprocess.run([str(DROWSE), "--socket", str(d.socket), "status", "--json"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return time.monotonic() - started


# ---- memory


def test_a_pipelining_client_that_never_reads_cannot_grow_drowsed(make_drowse):
    d = make_drowse()
    d.add_app("a", fetch=d.recorder("a"))
    d.start()
    pid = d.proc.pid
    for _ in range(50):
        assert request(d.socket, "GET", "/v1/apps")[0] == 200
    fds = open_fds(pid)
    before = vm_rss_kb(pid)
    peak = before
    s = connect(d.socket)
    s.setblocking(False)
    burst = b"GET /v1/apps HTTP/1.1\r\nHost: drowse\r\n\r\n" * 200
    sent = 0
    others: list[float] = []
    started = time.monotonic()
    next_probe = started + 1
    while time.monotonic() < started + 8:
        try:
            sent += s.send(burst)
        except BlockingIOError:
            time.sleep(0.005)
        except (BrokenPipeError, ConnectionResetError):
            break
        peak = max(peak, vm_rss_kb(pid))
        if time.monotonic() > next_probe:  # another client is still answered, and promptly
            t0 = time.monotonic()
            assert request(d.socket, "GET", "/v1/status", timeout=5)[0] == 200
            others.append(time.monotonic() - t0)
            next_probe = time.monotonic() + 1
    grown = peak - before
    print(f"\n[never-reads] sent {sent / 1e6:.1f} MB of requests in 8 s; drowsed RSS {before} kB -> peak {peak} kB (+{grown} kB); "
          f"other clients answered in {max(others):.2f} s at worst")
    assert grown < 20 * MiB_kB, f"drowsed grew by {grown} kB for a client that reads nothing"
    assert others and max(others) < 2
    # The client reads nothing: it is closed (write timeout), and its buffers go with it.
    closed_at = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            s.send(b"GET /v1/apps HTTP/1.1\r\nHost: drowse\r\n\r\n")
            time.sleep(0.1)
        except BlockingIOError:
            time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic()
            break
    assert closed_at is not None, "a connection whose client read nothing for 20 s is still open"
    s.close()
    wait_until(lambda: open_fds(pid) <= fds, 5, what="drowsed to let go of the connection")
    assert d.proc.poll() is None


TRANSFER_COLUMNS = ("id", "app", "session", "kind", "state", "url", "bytes_done", "bytes_total", "created_at",
                    "finished_at", "timeout_at", "delivered")


def insert_finished_transfers(d, app: str, n: int) -> list[str]:
    """n completed transfers of `app`, written into state.db while drowsed is stopped (quicker
    than n downloads); about 600 bytes of JSON each."""
    db = sqlite3.connect(d.state_dir / "state.db")
    now = time.time()
    ids = [f"{i:016x}" for i in range(n)]
    rows = [(tid, app, "s", "download", "completed", f"http://127.0.0.1:9/{'x' * 300}/{tid}", 10, 10, now - n + i, now, now + 3600, 1)
            for i, tid in enumerate(ids)]
    db.executemany(f"INSERT INTO transfers({', '.join(TRANSFER_COLUMNS)}) VALUES ({', '.join('?' * len(TRANSFER_COLUMNS))})", rows)
    db.commit()
    db.close()
    return ids


def test_big_listings_come_in_pages_and_pipelining_them_is_bounded(make_drowse):
    d = make_drowse()
    d.add_app("big", fetch=d.recorder("big"))
    d.start()
    d.stop()
    ids = insert_finished_transfers(d, "big", 3000)
    d.start()
    pid = d.proc.pid

    # The default answer is one page; `after` continues it; the CLI follows every page.
    status, body = request(d.socket, "GET", "/v1/transfers")
    assert status == 200
    first = json.loads(body)
    assert [t["id"] for t in first] == ids[:100]
    assert {"id", "app", "session", "kind", "state", "url", "bytes_done", "bytes_total", "reason", "location"} <= set(first[0])
    status, body = request(d.socket, "GET", f"/v1/transfers?limit=7&after={ids[100]}")
    assert status == 200 and [t["id"] for t in json.loads(body)] == ids[101:108]
    status, body = request(d.socket, "GET", f"/v1/transfers?after={ids[-1]}")
    assert status == 200 and json.loads(body) == []
    for bad in ("?limit=0", "?limit=501", "?limit=x", "?after=nope"):
        assert request(d.socket, "GET", "/v1/transfers" + bad)[0] == 400, bad
    listed = d.json("transfers")
    assert [t["id"] for t in listed] == ids
    assert [t["id"] for t in d.json("transfers", "--app", "big")] == ids
    table = d.cli_ok("transfers").stdout
    assert all(tid in table for tid in (ids[0], ids[1500], ids[-1]))

    # 200 pipelined listings, never read.
    for _ in range(5):
        request(d.socket, "GET", "/v1/transfers")
    before = vm_rss_kb(pid)
    s = connect(d.socket)
    s.setblocking(False)
    pending = b"GET /v1/transfers HTTP/1.1\r\nHost: drowse\r\n\r\n" * 200
    peak = before
    t_end = time.monotonic() + 6
    while time.monotonic() < t_end:
        if pending:
            try:
                pending = pending[s.send(pending):]
            except BlockingIOError:
                pass
        peak = max(peak, vm_rss_kb(pid))
        time.sleep(0.02)
    grown = peak - before
    print(f"\n[big listing] 200 pipelined GET /v1/transfers (3000 transfers): drowsed RSS {before} kB -> peak {peak} kB (+{grown} kB)")
    assert grown < 20 * MiB_kB, f"drowsed grew by {grown} kB for 200 unread listings"
    t0 = time.monotonic()
    assert request(d.socket, "GET", "/v1/status", timeout=5)[0] == 200
    assert time.monotonic() - t0 < 2
    s.close()
    assert d.proc.poll() is None


# ---- one uid cannot stall the API

HOLDER = r"""
import json, socket, sys, time
path, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = []
for _ in range(n):
    deadline = time.monotonic() + 2
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
            socks.append(s)
            break
        except BlockingIOError:  # the backlog is full until drowsed accepts (and refuses) some
            s.close()
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
time.sleep(0.5)
refused = 0
for s in socks:
    try:
        data = s.recv(4096)
    except BlockingIOError:
        continue
    if data.startswith(b"HTTP/1.1 429"):
        refused += 1
print(json.dumps({"connected": len(socks), "refused": refused}), flush=True)
time.sleep(hold)
"""


@needs_root
def test_one_uid_holding_connections_does_not_stall_the_others(make_drowse):
    d = make_drowse()
    os.chmod(d.base, 0o755)  # other users must reach the socket's folder
    d.add_app("a", fetch=d.recorder("a"))
    d.start()
    pid = d.proc.pid
    baseline = open_fds(pid)
    holder = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", HOLDER, str(d.socket), "120", "30"],
        stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    try:
        line = holder.stdout.readline()
        counts = json.loads(line)
        print(f"\n[per-uid] nobody opened {counts['connected']} connections, {counts['refused']} answered 429 at once")
        assert counts["connected"] == 120
        assert counts["refused"] == 120 - 8, counts  # [api] max_connections_per_uid defaults to 8
        samples = []
        for _ in range(5):
            samples.append(open_fds(pid) - baseline)
            time.sleep(0.1)
        print(f"[per-uid] descriptors held for nobody: {samples}")
        held = samples[-1]
        assert held <= 8 + 2, f"drowsed holds {held} descriptors for nobody's connections"
        # Root, and a user with no app, are answered at once while nobody holds its connections.
        took = [timed_status(d) for _ in range(3)]
        code, _, stranger = curl_as(STRANGER, d, "GET", "/v1/status")
        assert code == 200
        print(f"[per-uid] root's drowse status took {max(took):.2f} s at worst, uid {STRANGER}'s request {stranger:.2f} s")
        assert max(took) < 2 and stranger < 2
        # nobody's own next connection: a short, clear refusal, not a wait.
        code, doc, took_nobody = curl_as(NOBODY, d, "GET", "/v1/status")
        assert code == 429 and doc["error"]["code"] == "too_many_connections", doc
        assert took_nobody < 2
    finally:
        holder.kill()
        holder.wait()
    wait_until(lambda: curl_as(NOBODY, d, "GET", "/v1/status")[0] == 200, 5, what="nobody to get a place again")


FLOODER = r"""
import collections, socket, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
kept = collections.deque()
end = time.monotonic() + seconds
while time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
        s.send(b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\n\r\n")
    except OSError:
        s.close()
        time.sleep(0.001)
        continue
    kept.append(s)  # never read; the newest 30 stay open
    if len(kept) > 30:
        kept.popleft().close()
"""


@needs_root
def test_a_reconnecting_flood_of_one_uid_does_not_shut_out_the_others(make_drowse):
    """Six processes of nobody's reconnect as fast as they can, never reading. Refusals free their
    places at once past a few lingering ones, so drowsed keeps accepting at full speed, and
    another user's `drowse status` and root's (blocking connects, as the CLI and DrowseKit make)
    get in. (A non-blocking connect may still find the kernel's listen backlog full while the
    flood lasts: the kernel has no per-uid fairness there.)"""
    d = make_drowse()
    os.chmod(d.base, 0o755)
    d.start()
    flooders = [subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
                                  FLOODER, str(d.socket), "10"], env={"PATH": "/usr/bin:/bin"}) for _ in range(6)]
    try:
        # The flood is under way once nobody's places are taken: nobody's own request is refused.
        wait_until(lambda: curl_as(NOBODY, d, "GET", "/v1/status", timeout=2)[0] == 429, 8, interval=0.1,
                   what="the flood to take nobody's places")
        results = []
        for _ in range(5):
            started = time.monotonic()
            r = as_uid(STRANGER, str(DROWSE), "--socket", str(d.socket), "status", "--json", timeout=30)
            stranger = time.monotonic() - started
            results.append((r.returncode, round(stranger, 2), round(timed_status(d), 2)))
            time.sleep(0.1)
        print(f"\n[flood] (stranger's exit status, its seconds, root's seconds) for drowse status: {results}")
        assert all(rc == 0 for rc, _, _ in results), results
        assert all(a < 2 and b < 2 for _, a, b in results), results
    finally:
        for f in flooders:
            f.kill()
            f.wait()
    assert d.proc.poll() is None


@needs_root
def test_max_connections_per_uid_is_read_from_config(make_drowse):
    d = make_drowse(extra_config="[api]\nmax_connections_per_uid = 2\n")
    os.chmod(d.base, 0o755)
    d.start()
    holder = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", HOLDER, str(d.socket), "10", "5"],
        stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    try:
        counts = json.loads(holder.stdout.readline())
        assert counts == {"connected": 10, "refused": 8}, counts
    finally:
        holder.kill()
        holder.wait()


# ---- smaller leaks


def test_broker_credentials_in_a_url_are_refused(make_drowse, tmp_path):
    d = make_drowse()
    d.set_mqtt(url="mqtt://alice:s3cret@127.0.0.1:1883")
    r = subprocess.run([str(DROWSED), "--config", str(d.config), "--check-config"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "username" in r.stderr and "password_file" in r.stderr, r.stderr
    assert "s3cret" not in r.stderr + r.stdout
    r = subprocess.run([str(DROWSED), "--config", str(d.config)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "s3cret" not in r.stderr + r.stdout
    for cmd in (["push", "--broker", "mqtt://alice:s3cret@127.0.0.1:1", "--device", "x", "--app", "y", "--silent", "--dry-run"],
                ["fleet", "--broker", "mqtt://alice:s3cret@127.0.0.1:1", "--timeout", "1s"]):
        r = subprocess.run([str(DROWSE), *cmd], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, cmd
        assert "--username" in r.stderr and "--password-file" in r.stderr, r.stderr
        assert "s3cret" not in r.stderr + r.stdout


@needs_root
def test_status_shows_a_user_only_its_own_apps(make_drowse):
    d = make_drowse()
    shared = d.base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    os.chmod(d.base, 0o755)
    d.add_app("mine", fetch=d.recorder("mine"), user="nobody", working_directory=str(shared), minimum_interval="1h")
    d.add_app("other", fetch=d.recorder("other"), minimum_interval="1h")
    d.start()
    wait_until(lambda: {"mine", "other"} <= set(d.status().get("next_window_apps") or []), 20,
               what="a planned window with both apps")
    code, doc, _ = curl_as(NOBODY, d, "GET", "/v1/status")
    assert code == 200
    assert doc["next_window_apps"] == ["mine"], doc["next_window_apps"]
    code, doc, _ = curl_as(STRANGER, d, "GET", "/v1/status")
    assert code == 200 and doc["next_window_apps"] == []


@needs_root
def test_another_users_app_answers_like_a_missing_one(make_drowse):
    d = make_drowse()
    shared = d.base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    os.chmod(d.base, 0o755)
    d.add_app("mine", fetch=d.recorder("mine"), user="nobody", working_directory=str(shared))
    d.add_app("other", fetch=d.recorder("other"))
    d.add_app("broken", raw='id = "broken"\n[fetch]\nminimum_interval = "never-ever"\n')
    d.start()
    status, body = request(d.socket, "POST", "/v1/transfers",
                           json.dumps({"url": "http://127.0.0.1:9/x", "app": "other", "discretionary": True}).encode())
    assert status == 200, body
    theirs = json.loads(body)["id"]
    status, body = request(d.socket, "POST", "/v1/apps/other/tasks", b"{}")
    assert status == 200, body
    task = json.loads(body)["id"]

    routes = [
        ("GET", "/v1/apps/{app}", None),
        ("POST", "/v1/apps/{app}/fetch", None),
        ("POST", "/v1/apps/{app}/used", None),
        ("POST", "/v1/apps/{app}/quit", None),
        ("POST", "/v1/apps/{app}/activate", None),
        ("POST", "/v1/apps/{app}/deactivate", None),
        ("POST", "/v1/apps/{app}/tasks", "{}"),
        ("GET", "/v1/apps/{app}/tasks/{task}", None),
        ("DELETE", "/v1/apps/{app}/tasks/{task}", None),
        ("POST", "/v1/apps/{app}/tasks/{task}/end", None),
        ("POST", "/v1/apps/{app}/events/e1/complete", '{"result": "no-data"}'),
        ("GET", "/v1/apps/{app}/events", None),
        ("POST", "/v1/transfers", '{"url": "http://127.0.0.1:9/y", "app": "{app}"}'),
    ]
    for method, path, body in routes:
        answers = {}
        for app in ("other", "missing", "broken"):
            code, doc, _ = curl_as(NOBODY, d, method, path.format(app=app, task=task),
                                   body.replace("{app}", app) if body else None, timeout=5)
            answers[app] = (code, doc and doc["error"]["code"], doc and doc["error"]["message"].replace(app, "ID"))
        assert answers["other"][0] == 404, (method, path, answers)
        assert answers["other"] == answers["missing"] == answers["broken"], (method, path, answers)
    for method, path in (("GET", "/v1/transfers/{t}"), ("POST", "/v1/transfers/{t}/cancel"), ("DELETE", "/v1/transfers/{t}")):
        a = curl_as(NOBODY, d, method, path.format(t=theirs))[:2]
        b = curl_as(NOBODY, d, method, path.format(t="0123456789abcdef"))[:2]
        assert a[0] == b[0] == 404
        assert a[1]["error"]["message"].replace(theirs, "ID") == b[1]["error"]["message"].replace("0123456789abcdef", "ID")
    assert d.transfer(theirs)["state"] != "cancelled"
    assert d.runs("other") == []
