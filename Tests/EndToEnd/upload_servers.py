"""Upload test servers for Drowse's end-to-end tests (standard library only, 127.0.0.1 only).

Three server kinds, one per UploadServer instance, so that `--protocol auto` can be tested:

- "tus":  tus 1.0.0 core + creation + termination + checksum (creation-with-upload is accepted but only
          advertised with advertise_creation_with_upload=True). Creation URL: any path (e.g. /files/);
          upload resources live at /files/<id>.
- "ietf": draft-ietf-httpbis-resumable-upload, chosen per request by Upload-Draft-Interop-Version:
          3 = draft -01 (iOS 17, `Upload-Incomplete`), 4..8 = `Upload-Complete` (8 = drafts -09..-12);
          interop >= 6 requires `Content-Type: application/partial-upload` on PATCH. `versions` limits what
          the server accepts (e.g. {3} = an iOS-17-era server, {8} = current-draft-only). Creation: POST or
          PUT with the completion header to any path outside /uploads/; resources live at /uploads/<id>.
          A POST/PUT without a (valid) completion header is an ordinary, non-resumable upload.
- "put":  plain PUT to any path stores the body (201 new / 204 replaced); no resumability at all.

Each server records every request (UploadServer.requests) and keeps every upload's bytes
(UploadServer.uploads), so tests can check what went over the wire and the sha256 of what was stored.

Fault injection (see Fault): cut the connection after N bytes of a data-carrying request (optionally
keeping fewer bytes than received = server-side data loss), acknowledge fewer bytes than received (tus),
corrupt a chunk before checksum verification (tus), and a global slow read rate.

Standalone:  python3 upload_servers.py tus|ietf|put [--port P] [--versions 3,8] [--rate BYTES_PER_S]
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field

TUS_VERSION = "1.0.0"
TUS_CHECKSUMS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "md5": hashlib.md5}
IETF_CURRENT = 8  # drafts -09 .. -12
IETF_IOS17 = 3  # draft -01
IETF_ALL = (3, 4, 5, 6, 7, 8)
PROBLEM = "https://iana.org/assignments/http-problem-types#"
INTERRUPTED = ("dropped", "aborted", "eof")  # outcomes of a body that was not fully received


class _Interrupted(Exception):
    def __init__(self, outcome: str):
        super().__init__(outcome)
        self.outcome = outcome


@dataclass
class Fault:
    """One injected fault, consumed by the next matching data-carrying request.

    kind:
      "drop"      read `after` bytes of the body, keep `keep` of them (default: all `after`), then reset the
                  connection without a response. keep < after simulates data the server lost.
      "short_ack" (tus) read the whole body, store only `keep` bytes, answer 204 with the short offset.
      "corrupt"   (tus) flip a byte of the body before checksum verification (-> 460 if a checksum is sent).
    methods: the request methods it applies to (None = any data-carrying request).
    """
    kind: str
    after: int = 0
    keep: int | None = None
    methods: tuple[str, ...] | None = None
    times: int = 1
    fired: int = 0


@dataclass
class Upload:
    id: str
    path: str  # resource path (/files/<id>, /uploads/<id>, or the PUT path)
    protocol: str  # "tus", "ietf", "plain" (non-resumable POST/PUT on the ietf server), "put"
    version: int | None = None  # ietf interop version used at creation
    length: int | None = None
    data: bytearray = field(default_factory=bytearray)
    complete: bool = False
    deleted: bool = False
    metadata: str | None = None
    created_seq: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    active: "Handler | None" = None  # the request currently appending to it

    @property
    def offset(self) -> int:
        return len(self.data)

    def sha256(self) -> str:
        return hashlib.sha256(bytes(self.data)).hexdigest()


class UploadServer:
    def __init__(self, kind: str, versions=IETF_ALL, port: int = 0, send_104: bool = True,
                 relative_location: bool = False, advertise_creation_with_upload: bool = False,
                 tus_checksum: bool = True, tus_head_content_length: bool = False,
                 tus_require_metadata: tuple[str, ...] = (),
                 max_size: int = 1 << 30, rcvbuf: int = 64 * 1024):
        assert kind in ("tus", "ietf", "put"), kind
        self.kind = kind
        self.versions = tuple(sorted(set(versions)))
        self.send_104 = send_104
        self.relative_location = relative_location
        self.advertise_creation_with_upload = advertise_creation_with_upload
        self.tus_checksum = tus_checksum  # advertise the checksum extension (it is verified either way)
        # As some real tus servers do: a HEAD announces the upload's size as its Content-Length, and
        # a HEAD of an upload created without these Upload-Metadata keys is answered 400.
        self.tus_head_content_length = tus_head_content_length
        self.tus_require_metadata = tuple(tus_require_metadata)
        self.head_status: int | None = None  # set by a test: every HEAD of an existing upload gets this status
        self.max_size = max_size
        self.read_rate: float | None = None  # bytes per second for request bodies, None = unlimited
        self.requests: list[dict] = []
        self.uploads: dict[str, Upload] = {}
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self._seq = 0
        self._rcvbuf = rcvbuf
        self._port = port
        self.httpd: http.server.ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    # ---- lifecycle

    def start(self) -> "UploadServer":
        server = self

        class _HTTPD(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 64

            def server_bind(self):
                # Small receive buffers (inherited by accepted sockets) so a slow reader really slows the
                # client down and offsets at a kill are not hidden in megabytes of kernel buffers.
                if server._rcvbuf:
                    self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, server._rcvbuf)
                super().server_bind()

        self.httpd = _HTTPD(("127.0.0.1", self._port), Handler)
        self.httpd.upload_server = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       name=f"upload-server-{self.kind}", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self) -> int:
        assert self.httpd is not None
        return self.httpd.server_address[1]

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # ---- test API

    def add_fault(self, kind: str, after: int = 0, keep: int | None = None, methods=None, times: int = 1) -> Fault:
        f = Fault(kind=kind, after=after, keep=keep, methods=tuple(methods) if methods else None, times=times)
        with self.lock:
            self.faults.append(f)
        return f

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def set_read_rate(self, bytes_per_second: float | None) -> None:
        self.read_rate = bytes_per_second

    def log(self, method: str | None = None, path: str | None = None) -> list[dict]:
        with self.lock:
            return [dict(r) for r in self.requests
                    if (method is None or r["method"] == method) and (path is None or r["path"] == path)]

    def resumable_uploads(self) -> list[Upload]:
        with self.lock:
            return [u for u in self.uploads.values() if u.protocol in ("tus", "ietf")]

    def completed(self, protocol: str | None = None) -> list[Upload]:
        with self.lock:
            return [u for u in self.uploads.values()
                    if u.complete and not u.deleted and (protocol is None or u.protocol == protocol)]

    def bytes_seen(self, method: str | None = None) -> int:
        """Request-body bytes read off the wire so far (stored or not: tus checksummed chunks are only
        stored once complete, plain PUT bodies only when whole)."""
        with self.lock:
            return sum(r["body_len"] for r in self.requests if method is None or r["method"] == method)

    def received(self) -> int:
        """Bytes currently stored across all uploads (for waiting on progress)."""
        with self.lock:
            return sum(len(u.data) for u in self.uploads.values())

    # ---- internals

    def _next_seq(self) -> int:
        with self.lock:
            self._seq += 1
            return self._seq

    def _take_fault(self, method: str, kinds: tuple[str, ...]) -> Fault | None:
        with self.lock:
            for f in self.faults:
                if f.kind in kinds and f.fired < f.times and (f.methods is None or method in f.methods):
                    f.fired += 1
                    return f
        return None


def _sf_bool(v: str | None) -> bool | None:
    """Structured-field Boolean item (`?1` / `?0`, parameters ignored); anything else is None."""
    if v is None:
        return None
    v = v.strip().split(";", 1)[0].strip()
    return {"?1": True, "?0": False}.get(v)


def _sf_int(v: str | None) -> int | None:
    """Structured-field non-negative Integer item (at most 15 digits); anything else is None."""
    if v is None:
        return None
    v = v.strip().split(";", 1)[0].strip()
    return int(v) if re.fullmatch(r"\d{1,15}", v) else None


def _plain_int(v: str | None) -> int | None:
    if v is None:
        return None
    v = v.strip()
    return int(v) if re.fullmatch(r"\d{1,18}", v) else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "drowse-e2e-upload/1"
    timeout = 60  # seconds without progress on a socket before we give up on it

    @property
    def srv(self) -> UploadServer:
        return self.server.upload_server  # type: ignore[attr-defined]

    def log_message(self, fmt, *args):  # quiet
        pass

    # ---- plumbing

    def _record(self, body_expected: int | None) -> dict:
        rec = {
            "seq": self.srv._next_seq(),
            "time": time.time(),
            "method": self.command,
            "path": self.path.split("?", 1)[0],
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "content_length": body_expected,
            "body_len": 0,
            "status": None,
            "outcome": None,
            "upload": None,
            "offset_before": None,
            "offset_after": None,
            "response_headers": {},
        }
        with self.srv.lock:
            self.srv.requests.append(rec)
        self.rec = rec
        return rec

    def _send(self, status: int, headers: dict | None = None, body: bytes = b"", reason: str | None = None):
        headers = dict(headers or {})
        if self.srv.kind == "tus":
            headers.setdefault("Tus-Resumable", TUS_VERSION)
        self.send_response(status, reason)
        length = headers.pop("Content-Length", len(body))  # a HEAD may announce another length
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.rec["status"] = status
        self.rec["outcome"] = self.rec["outcome"] or "ok"
        self.rec["response_headers"] = {k.lower(): str(v) for k, v in headers.items()}

    def _send_interim(self, status: int, reason: str, headers: dict):
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        self.rec.setdefault("interim", []).append({"status": status, **{k.lower(): v for k, v in headers.items()}})

    def _json(self, status: int, doc, headers: dict | None = None, ctype: str = "application/json"):
        h = dict(headers or {})
        h["Content-Type"] = ctype
        self._send(status, h, json.dumps(doc).encode())

    def _reset_connection(self):
        """Abort the TCP connection (RST), no response."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    def _body_length(self) -> int | None:
        """Content-Length, or None for chunked; -1 if the framing is invalid."""
        te = self.headers.get("Transfer-Encoding")
        if te is not None:
            return None if te.strip().lower() == "chunked" else -1
        cl = self.headers.get("Content-Length")
        if cl is None:
            return 0
        n = _plain_int(cl)
        return -1 if n is None else n

    def _raw_reader(self, total: int | None):
        """Yields body chunks (Content-Length `total`, or chunked if None), honouring the read rate."""
        def timed_read(n: int) -> bytes:
            rate = self.srv.read_rate
            if rate:
                n = min(n, max(1024, int(rate / 20)))
            t0 = time.monotonic()
            b = self.rfile.read1(n) if hasattr(self.rfile, "read1") else self.rfile.read(n)
            if rate and b:
                wait = len(b) / rate - (time.monotonic() - t0)
                if wait > 0:
                    time.sleep(wait)
            return b

        if total is not None:
            left = total
            while left > 0:
                b = timed_read(min(left, 64 * 1024))
                if not b:
                    raise _Interrupted("eof")
                left -= len(b)
                yield b
            return
        while True:  # chunked
            line = self.rfile.readline(1024)
            if not line:
                raise _Interrupted("eof")
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers
                    t = self.rfile.readline(8192)
                    if not t or t in (b"\r\n", b"\n"):
                        return
            left = size
            while left > 0:
                b = timed_read(min(left, 64 * 1024))
                if not b:
                    raise _Interrupted("eof")
                left -= len(b)
                yield b
            self.rfile.readline(16)

    def _read_body(self, total: int | None, sink, fault: Fault | None, upload: Upload | None = None) -> int:
        """Reads the body into `sink(bytes)`, applying a "drop" fault. Returns bytes read.
        Raises _Interrupted when the body did not arrive completely (the sink keeps what came)."""
        n = 0
        try:
            for chunk in self._raw_reader(total):
                if upload is not None and upload.active is not self:
                    raise _Interrupted("aborted")
                if fault is not None and fault.kind == "drop" and n + len(chunk) >= fault.after:
                    chunk = chunk[: fault.after - n]
                    n += len(chunk)
                    self.rec["body_len"] = n
                    sink(chunk, final_drop=fault)
                    self._reset_connection()
                    raise _Interrupted("dropped")
                n += len(chunk)
                self.rec["body_len"] = n
                sink(chunk)
        except (ConnectionError, socket.timeout, OSError, ValueError) as e:
            if isinstance(e, _Interrupted):
                raise
            raise _Interrupted("aborted" if upload is not None and upload.active is not self else "eof")
        if fault is not None and fault.kind == "drop":  # body shorter than `after`: drop at the end
            self._reset_connection()
            raise _Interrupted("dropped")
        return n

    def _appender(self, upload: Upload, start: int):
        """A sink that appends to `upload`, dropping the tail on a lossy "drop" fault."""
        def sink(chunk: bytes, final_drop: Fault | None = None):
            with upload.lock:
                if upload.deleted or upload.active is not self:
                    return
                upload.data += chunk
                if final_drop is not None and final_drop.keep is not None:
                    del upload.data[start + final_drop.keep:]
        return sink

    def _claim(self, upload: Upload):
        """Become the only request working on `upload`: terminate an in-flight append first (the
        resumable-upload draft's RECOMMENDED concurrency handling), so offsets we report are final."""
        with upload.lock:
            old = upload.active
            if old is not None and old is not self:
                upload.active = None  # the old reader sees this and stops appending
        if old is not None and old is not self:
            try:
                old.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            old._append_done.wait(5)

    def _begin_append(self, upload: Upload):
        self._claim(upload)
        self._append_done = threading.Event()
        with upload.lock:
            upload.active = self

    def _end_append(self, upload: Upload):
        with upload.lock:
            if upload.active is self:
                upload.active = None
        done = getattr(self, "_append_done", None)
        if done is not None:
            done.set()

    def _find(self, prefix: str) -> Upload | None:
        m = re.fullmatch(re.escape(prefix) + r"([A-Za-z0-9_-]+)", self.path.split("?", 1)[0])
        if not m:
            return None
        with self.srv.lock:
            u = self.srv.uploads.get(m.group(1))
        if u is not None:
            self.rec["upload"] = u.id
        return u

    def _new_upload(self, protocol: str, path_prefix: str, **kw) -> Upload:
        uid = uuid.uuid4().hex
        u = Upload(id=uid, path=path_prefix + uid, protocol=protocol, created_seq=self.rec["seq"], **kw)
        with self.srv.lock:
            self.srv.uploads[uid] = u
        self.rec["upload"] = uid
        return u

    def _location(self, u: Upload) -> str:
        return u.path if self.srv.relative_location else f"http://127.0.0.1:{self.srv.port}{u.path}"

    # ---- dispatch

    def _dispatch(self):
        total = self._body_length()
        self._record(total)
        if total == -1:
            self.close_connection = True
            return self._send(400, {"Connection": "close"}, b"bad request framing\n")
        try:
            getattr(self, f"_{self.srv.kind}_{self.command.lower()}", self._not_allowed)(total)
        except _Interrupted as e:
            self.rec["outcome"] = e.outcome
            self.rec["status"] = None
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.rec["outcome"] = self.rec["outcome"] or "eof"
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch

    def _not_allowed(self, total):
        allow = {"tus": "OPTIONS, POST, HEAD, PATCH, DELETE", "ietf": "OPTIONS, POST, PUT, HEAD, PATCH, DELETE",
                 "put": "OPTIONS, GET, HEAD, PUT"}[self.srv.kind]
        h = {"Allow": allow}
        self._finish_body(total, h)
        self._send(405, h)

    def _drain(self, total):
        if total is None or (total and total > 0):
            try:
                for _ in self._raw_reader(total):
                    pass
            except _Interrupted:
                self.close_connection = True

    def _bad(self, status: int, msg: str, headers: dict | None = None, total=0):
        self._finish_body(total, headers := dict(headers or {}))
        self._send(status, {**headers, "Content-Type": "text/plain"}, (msg + "\n").encode())

    def _finish_body(self, total, headers: dict):
        """Before an early (error) response: read a small body, or close the connection after a big one."""
        if total is not None and 0 <= total <= 64 * 1024:
            self._drain(total)
        elif total != 0:
            headers["Connection"] = "close"
            self.close_connection = True

    # ================================================================== tus 1.0.0

    def _tus_options(self, total):
        self._drain(total)
        ext = ["creation", "termination"]
        if self.srv.advertise_creation_with_upload:
            ext.insert(1, "creation-with-upload")
        h = {"Tus-Version": TUS_VERSION, "Tus-Max-Size": self.srv.max_size}
        if self.srv.tus_checksum:
            ext.append("checksum")
            h["Tus-Checksum-Algorithm"] = ",".join(TUS_CHECKSUMS)
        h["Tus-Extension"] = ",".join(ext)
        self._send(204, h)

    def _tus_version_ok(self, total) -> bool:
        if self.headers.get("Tus-Resumable") != TUS_VERSION:
            self._bad(412, "Tus-Resumable: 1.0.0 required", {"Tus-Version": TUS_VERSION}, total)
            return False
        return True

    def _tus_post(self, total):
        if not self._tus_version_ok(total):
            return
        if self.headers.get("Upload-Defer-Length") is not None:
            return self._bad(400, "creation-defer-length is not supported", total=total)
        length = _plain_int(self.headers.get("Upload-Length"))
        if length is None:
            return self._bad(400, "Upload-Length required", total=total)
        if length > self.srv.max_size:
            return self._bad(413, "upload too large", total=total)
        u = self._new_upload("tus", "/files/", length=length, metadata=self.headers.get("Upload-Metadata"))
        headers = {"Location": self._location(u)}
        if total is None or total > 0:  # creation-with-upload
            if self.headers.get("Content-Type") != "application/offset+octet-stream":
                return self._bad(415, "Content-Type must be application/offset+octet-stream", total=total)
            self._tus_append(u, 0, total, created_headers=headers)
            return
        self._send(201, headers)

    def _tus_head(self, total):
        if not self._tus_version_ok(total):
            return
        u = self._find("/files/")
        if u is None or u.deleted:
            return self._send(404, {"Cache-Control": "no-store"})
        self._claim(u)
        if self.srv.head_status is not None:
            return self._bad(self.srv.head_status, "this upload cannot be resumed here", total=total)
        keys = {item.strip().split(" ")[0] for item in (u.metadata or "").split(",") if item.strip()}
        missing = [k for k in self.srv.tus_require_metadata if k not in keys]
        if missing:
            return self._bad(400, f"Upload-Metadata lacks {', '.join(missing)}", total=total)
        with u.lock:
            self.rec["offset_after"] = u.offset
            h = {"Upload-Offset": u.offset, "Cache-Control": "no-store"}
            if self.srv.tus_head_content_length and u.length is not None:
                h["Content-Length"] = u.length
            if u.length is not None:
                h["Upload-Length"] = u.length
            if u.metadata is not None:
                h["Upload-Metadata"] = u.metadata
        self._send(200, h)

    def _tus_patch(self, total):
        if not self._tus_version_ok(total):
            return
        u = self._find("/files/")
        if u is None or u.deleted:
            return self._bad(404, "no such upload", total=total)
        if self.headers.get("Content-Type") != "application/offset+octet-stream":
            return self._bad(415, "Content-Type must be application/offset+octet-stream", total=total)
        offset = _plain_int(self.headers.get("Upload-Offset"))
        if offset is None:
            return self._bad(400, "Upload-Offset required", total=total)
        self._tus_append(u, offset, total)

    def _tus_append(self, u: Upload, offset: int, total, created_headers: dict | None = None):
        checksum = self.headers.get("Upload-Checksum")
        algo = digest = None
        if checksum is not None:
            parts = checksum.strip().split(" ")
            if len(parts) != 2 or parts[0] not in TUS_CHECKSUMS:
                return self._bad(400, "unsupported checksum algorithm", total=total)
            algo = parts[0]
            try:
                digest = base64.b64decode(parts[1], validate=True)
            except ValueError:
                return self._bad(400, "bad checksum encoding", total=total)
        self._begin_append(u)
        try:
            with u.lock:
                current = u.offset
                self.rec["offset_before"] = current
                err = None
                if offset != current:
                    err = (409, "Upload-Offset does not match")
                elif total is not None and u.length is not None and offset + total > u.length:
                    err = (400, "body exceeds Upload-Length")
            if err:
                self._end_append(u)
                return self._bad(*err, total=total)
            fault = self.srv._take_fault(self.command, ("drop", "short_ack", "corrupt"))
            drop = fault if fault is not None and fault.kind == "drop" else None
            if algo is not None:
                # Verify the whole chunk before storing any of it (a dropped chunk is therefore discarded).
                buf = bytearray()
                self._read_body(total, lambda c, final_drop=None: buf.extend(c), drop, u)
                if fault is not None and fault.kind == "corrupt" and buf:
                    buf[len(buf) // 2] ^= 0xFF
                if TUS_CHECKSUMS[algo](bytes(buf)).digest() != digest:
                    self.rec["checksum"] = "mismatch"
                    return self._send(460, {"Upload-Offset": offset}, b"checksum mismatch\n", "Checksum Mismatch")
                self.rec["checksum"] = "ok"
                self._appender(u, offset)(bytes(buf))
            else:
                self._read_body(total, self._appender(u, offset), drop, u)
            with u.lock:
                if fault is not None and fault.kind == "short_ack":
                    del u.data[offset + (fault.keep or 0):]
                if u.length is not None and u.offset > u.length:
                    del u.data[u.length:]
                if u.length is not None and u.offset == u.length:
                    u.complete = True
                self.rec["offset_after"] = u.offset
                h = {"Upload-Offset": u.offset}
            if created_headers is not None:
                return self._send(201, {**created_headers, **h})
            self._send(204, h)
        finally:
            self._end_append(u)
            self.rec["offset_after"] = u.offset if self.rec["offset_after"] is None else self.rec["offset_after"]

    def _tus_delete(self, total):
        if not self._tus_version_ok(total):
            return
        u = self._find("/files/")
        self._drain(total)
        if u is None or u.deleted:
            return self._send(404)
        self._claim(u)
        with u.lock:
            u.deleted = True
        self._send(204)

    # ================================================================== IETF resumable uploads

    def _ietf_version(self, total) -> int | None:
        """The request's interop version; None if absent. Sends 400 and returns -1 if unsupported."""
        raw = self.headers.get("Upload-Draft-Interop-Version")
        if raw is None:
            return None
        v = _sf_int(raw)
        if v is None or v not in self.srv.versions:
            self._bad(400, f"unsupported Upload-Draft-Interop-Version {raw!r}; supported: "
                           f"{','.join(map(str, self.srv.versions))}",
                      {"Upload-Draft-Interop-Version": max(self.srv.versions)}, total)
            return -1
        return v

    def _ietf_complete_flag(self, v: int) -> bool | None:
        if v == 3:
            inc = _sf_bool(self.headers.get("Upload-Incomplete"))
            return None if inc is None else not inc
        return _sf_bool(self.headers.get("Upload-Complete"))

    @staticmethod
    def _ietf_state_headers(v: int, u: Upload) -> dict:
        h = {"Upload-Draft-Interop-Version": v}
        if v == 3:
            h["Upload-Incomplete"] = "?0" if u.complete else "?1"
        else:
            h["Upload-Complete"] = "?1" if u.complete else "?0"
        return h

    def _ietf_limit(self, v: int) -> dict:
        return {"Upload-Limit": f"max-size={self.srv.max_size}"} if v >= 6 else {}

    def _ietf_options(self, total):
        self._drain(total)
        v = self._ietf_version(0)
        if v == -1:
            return
        h = {"Allow": "OPTIONS, POST, PUT", "Accept-Patch": "application/partial-upload",
             "Upload-Limit": f"max-size={self.srv.max_size}"}
        if v is not None:
            h["Upload-Draft-Interop-Version"] = v
        self._send(204, h)

    def _ietf_post(self, total):
        if self.path.startswith("/uploads/"):
            return self._bad(405, "POST is not allowed on an upload resource", total=total)
        v = self._ietf_version(total)
        if v == -1:
            return
        complete = self._ietf_complete_flag(v) if v is not None else None
        if v is None or complete is None:
            return self._ietf_plain_upload(total)
        if total == -1:
            return self._bad(400, "bad framing", total=0)
        ulen_raw = self.headers.get("Upload-Length")
        ulen = _sf_int(ulen_raw) if v >= 5 else None
        if ulen_raw is not None and v >= 5 and ulen is None:
            return self._bad(400, "bad Upload-Length", total=total)
        length = ulen
        if complete and total is not None:
            if length is not None and length != total:
                return self._ietf_problem(400, "inconsistent-upload-length", "inconsistent length values", v, total)
            length = total
        if length is not None and length > self.srv.max_size:
            return self._bad(413, "too large", self._ietf_limit(v), total)
        u = self._new_upload("ietf", "/uploads/", version=v, length=length)
        loc = self._location(u)
        if self.srv.send_104:
            self._send_interim(104, "Upload Resumption Supported",
                               {"Location": loc, "Upload-Draft-Interop-Version": v, **self._ietf_limit(v)})
        self._ietf_receive(u, v, 0, total, complete, creation_location=loc)

    _ietf_put = _ietf_post

    def _ietf_plain_upload(self, total):
        """A POST/PUT without resumable-upload fields: an ordinary, non-resumable upload."""
        if total == -1:
            return self._bad(400, "bad framing", total=0)
        u = self._new_upload("plain", "/plain/")
        self._begin_append(u)
        try:
            self._read_body(total, self._appender(u, 0), None, u)
        finally:
            self._end_append(u)
        u.complete = True
        u.length = u.offset
        self._json(200, {"id": u.id, "size": u.offset, "sha256": u.sha256()})

    def _ietf_head(self, total):
        v = self._ietf_version(total)
        if v == -1:
            return
        u = self._find("/uploads/")
        if u is None or u.deleted or u.protocol != "ietf":
            return self._send(404, {"Cache-Control": "no-store", **({"Upload-Draft-Interop-Version": v} if v else {})})
        if v is None:
            return self._bad(400, "Upload-Draft-Interop-Version required", total=total)
        self._claim(u)
        with u.lock:
            h = {**self._ietf_state_headers(v, u), "Upload-Offset": u.offset, "Cache-Control": "no-store"}
            if u.length is not None and v >= 5:
                h["Upload-Length"] = u.length
            h.update(self._ietf_limit(v))
            self.rec["offset_after"] = u.offset
        self._send(204, h)

    def _ietf_patch(self, total):
        v = self._ietf_version(total)
        if v == -1:
            return
        u = self._find("/uploads/")
        if u is None or u.deleted or u.protocol != "ietf":
            return self._bad(404, "no such upload", total=total)
        if v is None:
            return self._bad(400, "Upload-Draft-Interop-Version required", total=total)
        if v >= 6 and (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/partial-upload":
            return self._bad(415, "Content-Type must be application/partial-upload", total=total)
        offset = _sf_int(self.headers.get("Upload-Offset"))
        if offset is None:
            return self._bad(400, "Upload-Offset required", total=total)
        complete = self._ietf_complete_flag(v)
        if complete is None:
            if v >= 4:
                return self._bad(400, "Upload-Complete required", total=total)
            complete = True  # draft -01: no Upload-Incomplete means this request ends the upload
        if total == -1:
            return self._bad(400, "bad framing", total=0)
        self._claim(u)
        err = None
        with u.lock:
            self.rec["offset_before"] = u.offset
            if u.complete:
                err = ("problem", 400, "completed-upload", "upload is already completed")
            elif offset != u.offset:
                err = ("conflict", {**self._ietf_state_headers(v, u), "Upload-Offset": u.offset}, u.offset)
            else:
                ulen = _sf_int(self.headers.get("Upload-Length")) if v >= 5 else None
                new_len = offset + total if (complete and total is not None) else None
                for cand in (ulen, new_len):
                    if cand is not None and u.length is not None and cand != u.length:
                        err = ("problem", 400, "inconsistent-upload-length", "inconsistent length values")
                if err is None:
                    u.length = u.length if u.length is not None else (ulen if ulen is not None else new_len)
                    if total is not None and u.length is not None and offset + total > u.length:
                        err = ("problem", 400, "inconsistent-upload-length", "append exceeds the length")
        if err and err[0] == "problem":
            return self._ietf_problem(err[1], err[2], err[3], v, total)
        if err:
            h = err[1]
            self._finish_body(total, h)
            if v >= 4:
                return self._json(409, {"type": PROBLEM + "mismatching-upload-offset",
                                        "title": "offset from request does not match offset of resource",
                                        "expected-offset": err[2], "provided-offset": offset},
                                  h, "application/problem+json")
            return self._send(409, h)
        self._ietf_receive(u, v, offset, total, complete)

    def _ietf_receive(self, u: Upload, v: int, offset: int, total, complete: bool, creation_location=None):
        self._begin_append(u)
        try:
            fault = self.srv._take_fault(self.command, ("drop",))
            self._read_body(total, self._appender(u, offset), fault, u)
            with u.lock:
                if u.length is not None and u.offset > u.length:
                    del u.data[u.length:]
                inconsistent = complete and u.length is not None and u.offset != u.length
                if complete and not inconsistent:
                    u.complete = True
                    if u.length is None:
                        u.length = u.offset
                self.rec["offset_after"] = u.offset
                h = {**self._ietf_state_headers(v, u), "Upload-Offset": u.offset}
            if creation_location is not None:
                h["Location"] = creation_location
            if inconsistent:
                return self._ietf_problem(400, "inconsistent-upload-length", "fewer bytes than the length", v, 0)
            if complete:
                # The response of the targeted resource once it has the whole representation.
                self._json(200, {"id": u.id, "size": u.offset, "sha256": u.sha256()}, h)
            elif creation_location is not None:
                self._send(201, {**h, **self._ietf_limit(v)})
            else:
                self._send(204, h)
        finally:
            self._end_append(u)

    def _ietf_problem(self, status: int, ptype: str, title: str, v: int, total):
        h = {"Upload-Draft-Interop-Version": v}
        self._finish_body(total, h)
        if v >= 4:
            return self._json(status, {"type": PROBLEM + ptype, "title": title}, h, "application/problem+json")
        return self._send(status, h)

    def _ietf_delete(self, total):
        v = self._ietf_version(total)
        if v == -1:
            return
        u = self._find("/uploads/")
        self._drain(total)
        if u is None or u.deleted or u.protocol != "ietf":
            return self._send(404)
        self._claim(u)
        with u.lock:
            u.deleted = True
        self._send(204, {"Upload-Draft-Interop-Version": v} if v else {})

    # ================================================================== plain PUT

    def _put_options(self, total):
        self._drain(total)
        self._send(204, {"Allow": "OPTIONS, GET, HEAD, PUT"})

    def _put_put(self, total):
        if total == -1:
            return self._bad(400, "bad framing", total=0)
        path = self.path.split("?", 1)[0]
        self.rec["upload"] = path
        buf = bytearray()
        fault = self.srv._take_fault("PUT", ("drop",))
        self._read_body(total, lambda c, final_drop=None: buf.extend(c), fault)  # partial bodies are discarded
        with self.srv.lock:
            existing = self.srv.uploads.get(path)
            u = Upload(id=path, path=path, protocol="put", length=len(buf), data=buf, complete=True,
                       created_seq=self.rec["seq"])
            self.srv.uploads[path] = u
        self.rec["upload"] = path
        self.rec["offset_after"] = len(buf)
        self._send(204 if existing else 201, {} if existing else {"Location": path})

    def _put_get(self, total):
        with self.srv.lock:
            u = self.srv.uploads.get(self.path.split("?", 1)[0])
        if u is None:
            return self._send(404)
        self._send(200, {"Content-Type": "application/octet-stream"}, bytes(u.data))

    def _put_head(self, total):
        with self.srv.lock:
            u = self.srv.uploads.get(self.path.split("?", 1)[0])
        if u is None:
            return self._send(404)
        self.send_response(200)
        self.send_header("Content-Length", str(len(u.data)))
        self.end_headers()
        self.rec["status"] = 200
        self.rec["outcome"] = "ok"


# ---------------------------------------------------------------------- helpers for tests

def interrupted(rec: dict) -> bool:
    return rec.get("outcome") in INTERRUPTED


def data_requests(log: list[dict], upload_id: str) -> list[dict]:
    """Requests that carried (or were meant to carry) data into upload `upload_id`."""
    return [r for r in log if r.get("upload") == upload_id and r["method"] in ("POST", "PUT", "PATCH")]


def resume_problems(log: list[dict], upload_id: str) -> list[str]:
    """How a client resumed upload `upload_id` wrongly. After a data request on it was interrupted (no
    response) or got a 5xx, the next PATCH must follow a successful HEAD of the upload and start at exactly
    the offset that HEAD reported. After a 409/460, the next PATCH must start at the offset the server gave
    (that response's Upload-Offset, or a later HEAD's). Returns a list of problems (empty = fine)."""
    problems = []
    on = [r for r in log if r.get("upload") == upload_id]
    for i, r in enumerate(on):
        if r["method"] not in ("POST", "PUT", "PATCH"):
            continue
        status = r.get("status") or 0
        lost = interrupted(r) or status >= 500
        rejected = status in (409, 460)
        if not (lost or rejected):
            continue
        later = on[i + 1:]
        nxt = next((x for x in later if x["method"] == "PATCH"), None)
        if nxt is None:
            continue
        heads = [x for x in later if x["method"] == "HEAD" and x["seq"] < nxt["seq"] and x.get("status") in (200, 204)]
        sent = _sf_int(nxt["headers"].get("upload-offset"))
        if heads:
            if sent != heads[-1]["offset_after"]:
                problems.append(f"PATCH #{nxt['seq']} sent Upload-Offset {sent}, "
                                f"HEAD #{heads[-1]['seq']} said {heads[-1]['offset_after']}")
        elif lost:
            problems.append(f"PATCH #{nxt['seq']} resumed without a HEAD after #{r['seq']} "
                            f"({r['method']}: {r['outcome']}, status {r['status']})")
        else:
            given = _sf_int(r.get("response_headers", {}).get("upload-offset"))
            if given is None or sent != given:
                problems.append(f"PATCH #{nxt['seq']} sent Upload-Offset {sent} after a {status} "
                                f"(#{r['seq']}) without asking the server (it said {given})")
    return problems


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["tus", "ietf", "put"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--versions", default=",".join(map(str, IETF_ALL)))
    p.add_argument("--rate", type=float, default=None)
    p.add_argument("--no-104", action="store_true")
    a = p.parse_args(argv)
    s = UploadServer(a.kind, versions=[int(x) for x in a.versions.split(",")], port=a.port, send_104=not a.no_104)
    s.set_read_rate(a.rate)
    import signal

    def _stop(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _stop)
    s.start()
    print(f"{a.kind} upload server on {s.url('/')}", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    for r in s.requests:
        print(r["seq"], r["method"], r["path"], r["status"], r["outcome"], r["body_len"], r["offset_after"])
    for u in s.uploads.values():
        print(u.protocol, u.path, u.offset, u.length, "complete" if u.complete else "", "deleted" if u.deleted else "",
              u.sha256())


if __name__ == "__main__":
    main()
