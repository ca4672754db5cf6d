"""Raw HTTP/1.1 over the local API's Unix socket, for tests that must send what no
well-behaved client would (bad request lines, broken framing, half-closed sockets).
Standard library only."""

from __future__ import annotations

import socket
import time
from pathlib import Path


def connect(path: Path | str, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def read_response(s: socket.socket, deadline: float) -> tuple[int | None, bytes]:
    """Reads one response: (status, body), or (None, what arrived) when the server closed or
    the deadline passed before a whole response came. Never raises on a closed socket."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = _recv(s, deadline)
        if not chunk:
            return None, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise AssertionError(f"not an HTTP status line: {lines[0]!r}")
    status = int(parts[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:  # read to the close
        while True:
            chunk = _recv(s, deadline)
            if not chunk:
                return status, rest
            rest += chunk
    while len(rest) < length:
        chunk = _recv(s, deadline)
        if not chunk:
            return None, rest
        rest += chunk
    return status, rest[:length]


def _recv(s: socket.socket, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        return b""
    s.settimeout(left)
    try:
        return s.recv(65536)
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        return b""


def send_all(s: socket.socket, data: bytes) -> bool:
    """False when the server closed first (it may refuse a request before reading all of it)."""
    try:
        s.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        return False


def request(path: Path | str, method: str, target: str, body: bytes | None = None,
            timeout: float = 5.0) -> tuple[int | None, bytes]:
    """One well-formed request on its own connection (Connection: close)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with connect(path, timeout) as s:
        send_all(s, head.encode() + b"\r\n" + (body or b""))
        return read_response(s, time.monotonic() + timeout)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/PID/stat."""
    import os
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))
