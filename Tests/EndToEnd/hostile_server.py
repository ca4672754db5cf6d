"""A small scripted HTTP/1.1 server on 127.0.0.1 for the hostile-server tests.

Raw sockets and one thread per connection, so a test controls every byte: the status line,
the headers, how much of the body is sent, whether the connection is then closed, left stalled
or fed more bytes than announced. Standard library only.

    srv = HostileServer(); srv.start()
    srv.script("/f", [cut(A, 300_000), serve(A)], then=serve(A))   # request 0 is cut, the rest behave
    ... srv.requests_for("/f") -> [Request(method, path, range, if_range, status, bytes_sent, outcome), ...]
    srv.stop()

A handler is any callable taking an `Exchange`; the builders below (serve, cut, partial, ...) make
the usual ones. `Exchange.index` is how many requests for that path came before this one.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

Handler = Callable[["Exchange"], None]

REASONS = {200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found", 304: "Not Modified",
           404: "Not Found", 416: "Range Not Satisfiable", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Request:
    """One request as the server saw it, plus what the server did with it."""
    method: str
    target: str
    path: str
    version: str
    headers: dict[str, str]
    index: int                    # how many earlier requests had the same path
    at: float                     # time.monotonic() when its head was read
    status: int | None = None     # status the server answered with
    bytes_sent: int = 0           # body bytes written to the socket
    outcome: str = "open"         # done | closed-by-server | client-gone | stalled | server-stopped
    ended_at: float | None = None

    @property
    def range(self) -> str | None:
        return self.headers.get("range")

    @property
    def if_range(self) -> str | None:
        return self.headers.get("if-range")

    def range_start(self) -> int | None:
        """N of `Range: bytes=N-` (None without a Range header)."""
        r = self.range
        if r is None:
            return None
        spec = r.split("=", 1)[1] if "=" in r else r
        first = spec.split(",")[0].strip()
        a = first.split("-", 1)[0]
        return int(a) if a.isdigit() else None

    def short(self) -> str:
        return (f"#{self.index} {self.method} {self.target} range={self.range!r} if-range={self.if_range!r} "
                f"-> {self.status} sent={self.bytes_sent} {self.outcome}")


class ClientGone(Exception):
    pass


class Exchange:
    """One request being answered. Handlers write the response through it."""

    def __init__(self, server: "HostileServer", conn: socket.socket, req: Request):
        self.server = server
        self.conn = conn
        self.request = req
        self.keep_alive = req.headers.get("connection", "").lower() != "close"
        self.closed = False

    # --- request shortcuts
    @property
    def index(self) -> int:
        return self.request.index

    @property
    def headers(self) -> dict[str, str]:
        return self.request.headers

    # --- writing
    def _write(self, data: bytes) -> None:
        try:
            self.conn.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as e:
            raise ClientGone() from e

    def head(self, status: int, headers: list[tuple[str, str | int]] | None = None, reason: str | None = None) -> None:
        """Sends the status line and headers (exactly those given, plus nothing)."""
        self.request.status = status
        lines = [f"HTTP/1.1 {status} {reason or REASONS.get(status, 'Whatever')}"]
        for k, v in headers or []:
            lines.append(f"{k}: {v}")
            if k.lower() == "connection" and str(v).lower() == "close":
                self.keep_alive = False
        self._write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def body(self, data: bytes) -> None:
        self._write(data)
        self.request.bytes_sent += len(data)

    def body_slowly(self, data: bytes, chunk: int, delay: float) -> None:
        """Sends `data` in `chunk`-byte pieces with `delay` seconds between them (stops with the server)."""
        for i in range(0, len(data), chunk):
            if self.server.stopping.is_set():
                raise ClientGone()
            self.body(data[i:i + chunk])
            time.sleep(delay)

    def chunk(self, data: bytes) -> None:
        """One chunk of a `Transfer-Encoding: chunked` body (b"" is the last one)."""
        self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.request.bytes_sent += len(data)

    def stall(self, seconds: float) -> None:
        """Keeps the connection open without sending anything (until the server stops or the client leaves)."""
        self.request.outcome = "stalled"
        deadline = time.monotonic() + seconds
        self.conn.settimeout(0.1)
        while time.monotonic() < deadline and not self.server.stopping.is_set():
            try:
                if self.conn.recv(65536) == b"":  # the client closed its end
                    raise ClientGone()
            except socket.timeout:
                pass
            except OSError as e:
                raise ClientGone() from e

    def close(self) -> None:
        """Ends the connection now (a FIN after whatever was sent), e.g. in the middle of a body."""
        if self.closed:
            return
        self.closed = True
        self.keep_alive = False
        try:
            self.conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class HostileServer:
    def __init__(self, host: str = "127.0.0.1"):
        assert host == "127.0.0.1"
        self.host = host
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))  # a free port, chosen by the kernel: no race with other tests
        self.port = self.sock.getsockname()[1]
        self.routes: dict[str, Handler] = {}
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.conns: set[socket.socket] = set()
        self.thread: threading.Thread | None = None

    # --- configuration
    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def route(self, path: str, handler: Handler) -> str:
        """Answers every request for `path` with `handler`; returns the URL."""
        self.routes[path] = handler
        return self.url(path)

    def script(self, path: str, steps: list[Handler], then: Handler | None = None) -> str:
        """Request i for `path` is answered by steps[i]; later ones by `then` (default: 500)."""
        def handler(ex: Exchange) -> None:
            h = steps[ex.index] if ex.index < len(steps) else (then or error(500))
            h(ex)
        return self.route(path, handler)

    # --- inspection
    def requests_for(self, path: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def log(self) -> str:
        with self.lock:
            lines = [r.short() for r in self.requests]
        return "\n".join(lines + [f"server error: {e}" for e in self.errors]) or "(no requests)"

    # --- running
    def start(self) -> "HostileServer":
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept_loop, name=f"hostile-{self.port}", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread:
            self.thread.join(5)
        self.sock.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.conns.add(conn)
            threading.Thread(target=self._serve_conn, args=(conn,), daemon=True).start()

    def _read_head(self, conn: socket.socket, buf: bytearray) -> bytes | None:
        conn.settimeout(0.2)
        while b"\r\n\r\n" not in buf:
            if self.stopping.is_set():
                return None
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return None
            if not data:
                return None
            buf += data
            if len(buf) > 65536:
                return None
        end = buf.index(b"\r\n\r\n")
        head = bytes(buf[:end])
        del buf[:end + 4]
        return head

    def _serve_conn(self, conn: socket.socket) -> None:
        buf = bytearray()
        try:
            while not self.stopping.is_set():
                head = self._read_head(conn, buf)
                if head is None:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = (lines[0].split(" ") + ["", ""])[:3]
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                path = target.split("?", 1)[0]
                with self.lock:
                    index = sum(1 for r in self.requests if r.path == path)
                    req = Request(method, target, path, version, headers, index, time.monotonic())
                    self.requests.append(req)
                ex = Exchange(self, conn, req)
                handler = self.routes.get(path, error(404))
                conn.settimeout(None)
                try:
                    handler(ex)
                    if req.outcome == "open":
                        req.outcome = "closed-by-server" if ex.closed else "done"
                except ClientGone:
                    req.outcome = "server-stopped" if self.stopping.is_set() else "client-gone"
                    return
                except Exception as e:  # a bug in a handler: show it in the log, drop the connection
                    self.errors.append(f"{req.short()}: {e!r}")
                    return
                finally:
                    req.ended_at = time.monotonic()
                if not ex.keep_alive:
                    return
        finally:
            with self.lock:
                self.conns.discard(conn)
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            # Drain briefly so that close() sends a FIN, not a RST that could eat data the client has not read.
            try:
                conn.settimeout(0.2)
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            conn.close()


# ----------------------------------------------------------------------------- handler builders

def _validators(etag: str | None, last_modified: str | None) -> list[tuple[str, str]]:
    h = []
    if etag is not None:
        h.append(("ETag", etag))
    if last_modified is not None:
        h.append(("Last-Modified", last_modified))
    return h


def serve(content: bytes, etag: str | None = None, last_modified: str | None = None,
          ranges: bool = True, if_range: bool = True) -> Handler:
    """A well-behaved static file: honours `Range: bytes=N-` (206) and `If-Range` (200 on a mismatch).
    ranges=False: ignores Range and always answers 200 with the whole file."""
    def h(ex: Exchange) -> None:
        start = ex.request.range_start() if ranges else None
        if start is not None and if_range and ex.request.if_range is not None:
            if ex.request.if_range not in (etag, last_modified):
                start = None  # the validator does not match: the whole (new) file
        hdrs = _validators(etag, last_modified)
        if start is not None and 0 < start < len(content):
            ex.head(206, [("Content-Length", len(content) - start),
                          ("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}"),
                          ("Accept-Ranges", "bytes"), *hdrs])
            ex.body(content[start:])
        elif start is not None and start >= len(content) > 0:
            ex.head(416, [("Content-Range", f"bytes */{len(content)}"), ("Content-Length", 0), *hdrs])
        else:
            ex.head(200, [("Content-Length", len(content)), ("Accept-Ranges", "bytes" if ranges else "none"), *hdrs])
            ex.body(content)
    return h


def cut(content: bytes, n: int, status: int = 200, etag: str | None = None, last_modified: str | None = None) -> Handler:
    """200 announcing the whole `content` (Content-Length), then only its first `n` bytes, then close."""
    def h(ex: Exchange) -> None:
        ex.head(status, [("Content-Length", len(content)), ("Accept-Ranges", "bytes"), *_validators(etag, last_modified)])
        ex.body(content[:n])
        time.sleep(0.05)  # let the bytes reach the client before the FIN
        ex.close()
    return h


def cut_range(content: bytes, n: int, etag: str | None = None, last_modified: str | None = None) -> Handler:
    """A correct 206 for the requested `bytes=S-`, announcing the rest of the file, but only `n` bytes of it, then close."""
    def h(ex: Exchange) -> None:
        start = ex.request.range_start() or 0
        ex.head(206, [("Content-Length", len(content) - start),
                      ("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}"),
                      ("Accept-Ranges", "bytes"), *_validators(etag, last_modified)])
        ex.body(content[start:start + n])
        time.sleep(0.05)
        ex.close()
    return h


def partial(content_range: str, body: bytes, headers: list[tuple[str, str]] | None = None,
            content_length: int | None = None, chunked: bool = False) -> Handler:
    """A raw 206 with exactly the Content-Range and body given (whatever was asked for)."""
    def h(ex: Exchange) -> None:
        hdrs: list[tuple[str, str | int]] = [("Content-Range", content_range)]
        if chunked:
            hdrs.append(("Transfer-Encoding", "chunked"))
        else:
            hdrs.append(("Content-Length", len(body) if content_length is None else content_length))
        ex.head(206, hdrs + list(headers or []))
        if chunked:
            for i in range(0, len(body), 64 * 1024):
                ex.chunk(body[i:i + 64 * 1024])
            ex.chunk(b"")
        else:
            ex.body(body)
    return h


def overflow(content: bytes, extra: bytes, headers: list[tuple[str, str]] | None = None) -> Handler:
    """200 with Content-Length: len(content), then content + extra (more than announced), then close."""
    def h(ex: Exchange) -> None:
        ex.head(200, [("Content-Length", len(content)), *(headers or [])])
        ex.body(content)
        for i in range(0, len(extra), 64 * 1024):
            ex.body(extra[i:i + 64 * 1024])
        ex.close()
    return h


def stall_after(content: bytes, n: int, seconds: float, etag: str | None = None) -> Handler:
    """200 announcing the whole `content`, sends `n` bytes, then sends nothing more for `seconds` (connection open)."""
    def h(ex: Exchange) -> None:
        ex.head(200, [("Content-Length", len(content)), ("Accept-Ranges", "bytes"), *_validators(etag, None)])
        ex.body(content[:n])
        ex.stall(seconds)
        ex.close()
    return h


def slow(content: bytes, chunk: int, delay: float, etag: str | None = None) -> Handler:
    """200 with the whole `content`, sent `chunk` bytes every `delay` seconds."""
    def h(ex: Exchange) -> None:
        ex.head(200, [("Content-Length", len(content)), *_validators(etag, None)])
        ex.body_slowly(content, chunk, delay)
    return h


def error(status: int, headers: list[tuple[str, str]] | None = None) -> Handler:
    def h(ex: Exchange) -> None:
        body = f"{status} {REASONS.get(status, '')}\n".encode()
        ex.head(status, [("Content-Length", len(body)), ("Content-Type", "text/plain"), *(headers or [])])
        ex.body(body)
    return h


def redirect(location: str, status: int = 302) -> Handler:
    def h(ex: Exchange) -> None:
        ex.head(status, [("Location", location), ("Content-Length", 0)])
    return h
