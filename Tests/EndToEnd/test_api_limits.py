"""Limits on the local API: a cap on open connections, idle
connections closed, bounded headers, and no busy accept loop when file descriptors run out
(seen: 100 % CPU, and MQTT unable to reconnect for want of a descriptor)."""

from __future__ import annotations

import socket
import time

from drowse_e2e import pid_alive, wait_until
from raw_http import connect, cpu_seconds, open_fds, read_response, request, send_all

MAX_CONNECTIONS = 64  # APIServer.maxConnections
IDLE_TIMEOUT = 10  # APIServer.idleTimeout, seconds


def open_idle(path, n: int) -> list[socket.socket]:
    """n connections that send nothing (fewer if the backlog stays full for a second)."""
    socks = []
    for _ in range(n):
        deadline = time.monotonic() + 1
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(path))
                break
            except BlockingIOError:  # the backlog is full until the server accepts some
                s.close()
                if time.monotonic() > deadline:
                    return socks
                time.sleep(0.02)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket, timeout: float) -> bool:
    s.setblocking(True)
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def test_connections_beyond_the_cap_wait_until_one_closes(make_drowse):
    d = make_drowse()
    d.start()
    pid = d.proc.pid
    before = open_fds(pid)
    idle = open_idle(d.socket, 100)
    assert len(idle) == 100
    # Accepted up to the cap (polled), and no more: the rest stay in the kernel's backlog.
    wait_until(lambda: open_fds(pid) - before >= MAX_CONNECTIONS - 2, 5, interval=0.05, what="drowsed to accept up to its cap")
    time.sleep(0.2)
    held = open_fds(pid) - before
    assert MAX_CONNECTIONS - 2 <= held <= MAX_CONNECTIONS + 2, f"drowsed holds {held} more descriptors for 100 connections"

    # The 101st client waits in the backlog until an idle connection times out.
    started = time.monotonic()
    with connect(d.socket, timeout=5) as s:
        send_all(s, b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\n\r\n")
        status, _ = read_response(s, started + IDLE_TIMEOUT + 10)
    waited = time.monotonic() - started
    assert status == 200
    assert waited > 1, f"answered after {waited:.1f} s although {MAX_CONNECTIONS} connections were open"
    for s in idle:
        s.close()
    # Once clients go, the API answers at once.
    wait_until(lambda: request(d.socket, "GET", "/v1/status", timeout=2)[0] == 200, 5, what="the API after the clients left")
    assert d.proc.pid == pid and pid_alive(pid)


def test_idle_and_slow_connections_are_closed(make_drowse):
    d = make_drowse()
    d.start()
    silent = connect(d.socket)
    partial = connect(d.socket)
    send_all(partial, b"GET /v1/status HTTP/1.1\r\nHost: dr")  # and never the rest
    kept = connect(d.socket)
    send_all(kept, b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\n\r\n")  # keep-alive
    assert read_response(kept, time.monotonic() + 5)[0] == 200
    started = time.monotonic()
    for name, s in (("silent", silent), ("partial request", partial), ("idle keep-alive", kept)):
        left = started + IDLE_TIMEOUT + 5 - time.monotonic()
        assert closed_by_server(s, max(left, 0.1)), f"the {name} connection was still open after {IDLE_TIMEOUT + 5} s"
        s.close()
    assert time.monotonic() - started >= IDLE_TIMEOUT - 2, "closed before the idle timeout"


def test_headers_are_bounded(make_drowse):
    d = make_drowse()
    d.start()
    pid = d.proc.pid
    for size, ok in ((4 * 1024, True), (20 * 1024, False), (200 * 1024, False)):
        with connect(d.socket) as s:
            send_all(s, b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
            status, _ = read_response(s, time.monotonic() + 5)
        if ok:
            assert status == 200
        else:
            assert status is None or 400 <= status < 500, f"a {size}-byte header was answered {status}"
    many = b"".join(b"X-%d: v\r\n" % i for i in range(500))
    with connect(d.socket) as s:
        send_all(s, b"GET /v1/status HTTP/1.1\r\nHost: drowse\r\n" + many + b"\r\n")
        status, _ = read_response(s, time.monotonic() + 5)
    assert status is None or 400 <= status < 500, f"500 headers were answered {status}"
    assert d.proc.poll() is None and pid_alive(pid)
    assert request(d.socket, "GET", "/v1/status")[0] == 200


def test_no_busy_accept_loop_when_descriptors_run_out(make_drowse):
    d = make_drowse()
    # Few descriptors: clients exhaust them before the connection cap is reached.
    d.prefix = ["prlimit", "--nofile=48:48", "--"]
    d.start()
    pid = d.proc.pid
    clients = open_idle(d.socket, 60)
    assert len(clients) == 60
    wait_until(lambda: open_fds(pid) >= 46, 5, what="drowsed to run out of descriptors")
    time.sleep(0.2)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(1.0)  # a busy accept loop takes a core: close to a second of CPU, even on a shared machine a good part of one
    used = cpu_seconds(pid) - cpu0
    print(f"\n[emfile] drowsed used {used:.2f} s of CPU in {time.monotonic() - t0:.1f} s with descriptors exhausted")
    assert used < 0.15, f"drowsed spent {used:.2f} s of CPU in 1 s while out of descriptors (a busy accept loop)"
    assert d.proc.poll() is None and pid_alive(pid)
    for s in clients:
        s.close()
    wait_until(lambda: request(d.socket, "GET", "/v1/status", timeout=2)[0] == 200, 10,
               what="the API to answer once clients closed")


def test_a_chunked_body_is_cut_at_the_same_limit(make_drowse):
    """A chunked request body is refused (413) and its connection closed as soon as it passes
    256 KiB, as a body with a Content-Length is: it cannot stream on for ever."""
    d = make_drowse()
    d.start()
    s = connect(d.socket, timeout=10)
    assert send_all(s, b"POST /v1/apps/x/report HTTP/1.1\r\nHost: drowse\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
    sent = 0
    # Up to 16 MiB; the server must answer and close long before.
    while sent < 16 << 20 and send_all(s, chunk):
        sent += 65536
        if sent >= 320 << 10:
            break
    status, body = read_response(s, time.monotonic() + 10)
    assert status == 413, (status, body[:200])
    assert closed_by_server(s, 5)
    s.close()
    assert d.status()["version"]  # still serving
