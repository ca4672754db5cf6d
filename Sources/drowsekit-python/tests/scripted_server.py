"""A scripted HTTP/1.1 server on a Unix socket, standing in for drowsed: each connection runs
the next script (a function of a Peer), so a test decides byte by byte what the library gets."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Peer:
    """One accepted connection, as a script sees it."""

    def __init__(self, server: "ScriptedServer", sock: socket.socket, number: int) -> None:
        self.server, self.sock, self.number = server, sock, number
        self._buf = b""

    def read_request(self, timeout: float = 10.0) -> Optional[Request]:
        """The next request, or None when the client closed the connection."""
        self.sock.settimeout(timeout)
        while b"\r\n\r\n" not in self._buf:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return None
            if not data:
                return None
            self._buf += data
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(self._buf) < n:
            data = self.sock.recv(65536)
            if not data:
                return None
            self._buf += data
        body, self._buf = self._buf[:n], self._buf[n:]
        r = Request(method, target, headers, body, self.number)
        self.server.requests.append(r)
        return r

    def send(self, data: bytes, pause: float = 0.0) -> None:
        """Sends bytes; ``pause`` after them makes the client read them as a piece of their own."""
        self.sock.sendall(data)
        if pause:
            time.sleep(pause)

    def send_pieces(self, data: bytes, size: int, pause: float = 0.005) -> None:
        for i in range(0, len(data), size):
            self.send(data[i:i + size], pause)

    def answer(self, status: int, body: Any = None, headers: Optional[dict[str, str]] = None, chunked: bool = False,
               raw: Optional[bytes] = None) -> None:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", "Content-Type: application/json"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if chunked:
            head.append("Transfer-Encoding: chunked")
            payload = b"".join(chunk(data[i:i + 7]) for i in range(0, len(data), 7)) + b"0\r\n\r\n"
        else:
            head.append(f"Content-Length: {len(data)}")
            payload = data
        self.send(("\r\n".join(head) + "\r\n\r\n").encode() + payload)

    def stream_head(self) -> None:
        self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")

    def hold(self, timeout: float = 30.0) -> None:
        """Keeps the connection open until the client closes it (or the server stops)."""
        self.sock.settimeout(0.1)
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.server.stopping.is_set():
            try:
                if not self.sock.recv(65536):
                    return
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


Script = Callable[[Peer], None]


@dataclass
class ScriptedServer:
    path: str
    scripts: list[Script] = field(default_factory=list)
    #: Run for every connection past the scripts.
    default: Optional[Script] = None
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                s, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            s.settimeout(None)
            self.connections += 1
            n = self.connections
            script = self.scripts[n - 1] if n <= len(self.scripts) else self.default
            t = threading.Thread(target=self._run, args=(script, Peer(self, s, n)), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, script: Optional[Script], peer: Peer) -> None:
        try:
            if script is not None:
                script(peer)
        except BaseException as e:  # shown by the fixture: a script that broke is the test's fault
            if not self.stopping.is_set():
                self.errors.append(e)
        finally:
            peer.close()

    def serve(self, *scripts: Script, default: Optional[Script] = None) -> "ScriptedServer":
        self.scripts.extend(scripts)
        if default is not None:
            self.default = default
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()
        for t in self._threads:
            t.join(5)
