#!/usr/bin/env python3
"""A resident app for the lifecycle tests, run by drowsed as `[process] command`.

It reads its event stream (GET /v1/apps/$DROWSE_APP/events over $DROWSE_SOCKET, chunked
NDJSON), appends every line with the time it arrived to OUT/events.jsonl, completes events with
the result in OUT/result (default new-data; "none" leaves them uncompleted), and keeps a 100 Hz
timer (or the rate in argv[2]) ticking in a second thread, as a polling app would. It reconnects when the stream ends
(drowsed restarted). Each start appends its pid to OUT/starts; `exit N` in OUT/exit makes it exit
with status N right after connecting.
"""
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

OUT = Path(sys.argv[1])
HZ = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
APP = os.environ["DROWSE_APP"]
SOCK = os.environ["DROWSE_SOCKET"]
OUT.mkdir(parents=True, exist_ok=True)
with open(OUT / "starts", "a") as f:
    f.write(f"{os.getpid()}\n")

ticks = 0


def tick():
    global ticks
    while True:
        time.sleep(1 / HZ)
        ticks += 1


threading.Thread(target=tick, daemon=True).start()


def request(method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCK)
    data = json.dumps(body).encode() if body is not None else b""
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


def events():
    """Yields each NDJSON line of the app's event stream; returns when the stream ends."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCK)
    s.sendall(f"GET /v1/apps/{APP}/events HTTP/1.1\r\nHost: drowse\r\n\r\n".encode())
    f = s.makefile("rb")
    status = f.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"event stream refused: {status!r} {f.read(2000)!r}")
    chunked = False
    while True:
        line = f.readline()
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
        if line in (b"\r\n", b""):
            break
    pending = b""
    while True:
        if chunked:
            size_line = f.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            data = f.read(size)
            f.readline()
        else:
            data = f.readline()
            if not data:
                return
        pending += data
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            if line.strip():
                yield line


def record(obj: dict) -> None:
    with open(OUT / "events.jsonl", "a") as f:
        f.write(json.dumps(obj) + "\n")


while True:
    try:
        for raw in events():
            now = time.time()
            ev = json.loads(raw)
            record({"received_at": now, "pid": os.getpid(), "ticks": ticks, **ev})
            if ev.get("event") == "hello":
                exit_file = OUT / "exit"
                if exit_file.exists():
                    sys.exit(int(exit_file.read_text().strip() or "1"))
                continue
            if ev.get("event") in ("fetch", "notification", "transfers"):
                result_file = OUT / "result"
                result = result_file.read_text().strip() if result_file.exists() else "new-data"
                if result != "none":
                    status, body = request("POST", f"/v1/apps/{APP}/events/{ev['id']}/complete", {"result": result})
                    record({"completed": ev["id"], "status": status})
    except (ConnectionError, FileNotFoundError, OSError, RuntimeError) as e:
        record({"stream_error": str(e), "at": time.time()})
    time.sleep(0.2)
