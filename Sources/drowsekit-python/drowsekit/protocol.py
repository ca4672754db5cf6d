"""The protocol without I/O, shared by the blocking and the asyncio clients: requests as bytes,
an HTTP/1.1 response parser fed with whatever the socket gave (chunked, Content-Length or
close-delimited bodies, keep-alive), the event stream cut into lines, the reconnection backoff,
the bookkeeping of background tasks and the long polls waiting for a transfer."""

from __future__ import annotations

import json
import math
import os
import random
import re
import socket
import threading
import time
from typing import Any, Callable, Optional
from urllib.parse import quote

from .errors import DrowseConnectionError, DrowseError, DrowseProtocolError, clip
from .models import TASK_EXPIRING, BackgroundTask, Event, Hello, Transfer, parse_event_line

DEFAULT_SOCKET = "/run/drowse/drowse.sock"
#: The largest answer read into memory (a transfer list page is well under this).
MAX_BODY = 16 * 1024 * 1024
#: The most an answer's heads take: its own, interim (1xx) ones before it, and chunked trailers.
MAX_HEAD = 64 * 1024
#: A stream line longer than this is dropped whole (drowsed's lines are far shorter).
MAX_LINE = 1 << 20
#: An idle kept-alive connection older than this is not reused (drowsed closes them after 10 s).
IDLE_REUSE = 5.0


def socket_path(socket: Optional[str]) -> str:
    """The socket: the argument, else ``DROWSE_SOCKET`` (drowsed sets it for its processes), else the default."""
    return socket or os.environ.get("DROWSE_SOCKET") or DEFAULT_SOCKET


def app_id(app: Optional[str]) -> str:
    """The app id: the argument, else ``DROWSE_APP``; "" when neither is set."""
    return app or os.environ.get("DROWSE_APP") or ""


def segment(s: str) -> str:
    """A path segment, percent-encoded beyond RFC 3986's unreserved characters."""
    return quote(s, safe="")


def request_bytes(method: str, target: str, body: Optional[Any] = None, accept: str = "application/json") -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {target} HTTP/1.1", "Host: drowse", f"Accept: {accept}"]
    if body is not None:
        head.append("Content-Type: application/json")
    if body is not None or method in ("POST", "PUT", "DELETE"):
        head.append(f"Content-Length: {len(data)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data


_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")


class ResponseParser:
    """One HTTP/1.1 response, fed in pieces of any size; ``feed`` returns the body bytes decoded
    so far. Whatever the bytes, it raises nothing but DrowseProtocolError."""

    def __init__(self, method: str = "GET", max_body: Optional[int] = MAX_BODY) -> None:
        self._method = method
        self._buf = bytearray()
        self._mode = "head"
        self._left = 0
        self._max_body = max_body
        self._body_size = 0
        self._head_size = 0
        self.status: Optional[int] = None
        self.reason = ""
        self.version = ""
        self.headers: dict[str, str] = {}
        self.complete = False
        self.received_any = False

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this complete answer."""
        if not self.complete or self._mode == "close" or self._buf:
            return False
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn

    def feed(self, data: bytes) -> bytes:
        if data:
            self.received_any = True
        self._buf += data
        out = bytearray()
        while not self.complete:
            if self._mode == "head":
                if not self._head():
                    break
            elif self._mode in ("length", "chunk-data"):
                if not self._buf:
                    break
                take = min(self._left, len(self._buf))
                out += self._buf[:take]
                del self._buf[:take]
                self._left -= take
                if self._left == 0:
                    if self._mode == "length":
                        self.complete = True
                    else:
                        self._mode = "chunk-end"
            elif self._mode == "chunk-size":
                i = self._buf.find(b"\r\n")
                if i < 0:
                    if len(self._buf) > 1024:
                        raise DrowseProtocolError("a chunk size line over 1 KiB")
                    break
                line = bytes(self._buf[:i]).split(b";", 1)[0].strip()
                del self._buf[:i + 2]
                if not _CHUNK_SIZE.fullmatch(line):
                    raise DrowseProtocolError(f"a bad chunk size '{clip(line.decode('latin-1'))}'")
                size = int(line, 16)
                self._mode, self._left = ("trailers", 0) if size == 0 else ("chunk-data", size)
                self._count(size)
            elif self._mode == "chunk-end":
                if len(self._buf) < 2:
                    break
                if self._buf[:2] != b"\r\n":
                    raise DrowseProtocolError("a chunk not followed by CRLF")
                del self._buf[:2]
                self._mode = "chunk-size"
            elif self._mode == "trailers":
                i = self._buf.find(b"\r\n")
                if i < 0:
                    self._count_head(len(self._buf), taken=False)
                    break
                self._count_head(i + 2)
                empty = i == 0
                del self._buf[:i + 2]
                if empty:
                    self.complete = True
            else:  # "close": the body runs to the end of the connection
                out += self._buf
                self._count(len(self._buf))
                self._buf.clear()
                break
        return bytes(out)

    def eof(self) -> None:
        """The connection closed. Raises DrowseProtocolError when the answer was cut short."""
        if self._mode == "close":
            self.complete = True
        if not self.complete:
            raise DrowseProtocolError("the connection closed in the middle of the answer" if self.received_any
                                      else "the connection closed without an answer")

    def _count(self, n: int) -> None:
        self._body_size += n
        if self._max_body is not None and self._body_size > self._max_body:
            raise DrowseProtocolError(f"an answer over {self._max_body} bytes")

    def _count_head(self, n: int, taken: bool = True) -> None:
        """``n`` more bytes of heads or trailers: taken, or (``taken=False``) waiting for their end."""
        if self._head_size + n > MAX_HEAD:
            raise DrowseProtocolError("answer heads and trailers over 64 KiB")
        if taken:
            self._head_size += n

    def _head(self) -> bool:
        i = self._buf.find(b"\r\n\r\n")
        if i < 0:
            self._count_head(len(self._buf), taken=False)
            return False
        self._count_head(i + 4)
        lines = bytes(self._buf[:i]).decode("latin-1").split("\r\n")
        del self._buf[:i + 4]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isascii() and parts[1].isdigit()) \
                or len(parts[1]) != 3:
            raise DrowseProtocolError(f"not an HTTP/1.x status line: '{clip(lines[0])}'")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise DrowseProtocolError(f"a bad header line: '{clip(line)}'")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        if 100 <= status < 200:  # an interim answer: the real one follows
            return True
        self.version, self.status, self.reason, self.headers = parts[0], status, parts[2] if len(parts) > 2 else "", headers
        if self._method == "HEAD" or status in (204, 304):
            self.complete = True
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunk-size"
        elif "content-length" in headers:
            if not _CONTENT_LENGTH.fullmatch(headers["content-length"]):
                raise DrowseProtocolError(f"a bad Content-Length '{clip(headers['content-length'])}'")
            self._left = int(headers["content-length"])
            self._count(self._left)
            self._mode = "length"
            self.complete = self._left == 0
        else:
            self._mode = "close"
        return True


def retry_or_raise(error: Exception, reused: bool, parser: ResponseParser, what: str) -> None:
    """A call's connection failed. Returns (go again on a fresh connection) only when a
    kept-alive connection ended before any byte of the answer: drowsed had closed it as idle, so
    the request was not read. Otherwise raises the error as a DrowseError."""
    if reused and not parser.received_any and not isinstance(error, (TimeoutError, socket.timeout)):
        return
    if isinstance(error, DrowseError):
        raise error
    raise DrowseConnectionError(f"{what}: {error}") from None


def answer_json(status: int, body: bytes) -> Any:
    """The answer's JSON for a 2xx; otherwise the API's error, raised."""
    if not 200 <= status < 300:
        raise DrowseError.from_answer(status, body)
    try:
        return json.loads(body)
    except ValueError as e:
        raise DrowseProtocolError(f"the answer is not JSON: {e}") from None
    except RecursionError:
        raise DrowseProtocolError("the answer is JSON nested too deep to read") from None


class LineSplitter:
    """Cuts a byte stream into LF-ended lines (a CR before the LF is dropped). What follows the
    last LF waits for more bytes: a line cut off by the end of the connection is never returned."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._partial = bytearray()
        self._discarding = False
        self.max_line = max_line

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self._discarding:
                self._discarding = False
            else:
                self._partial += data[start:nl]
                if self._partial.endswith(b"\r"):
                    del self._partial[-1:]
                if len(self._partial) <= self.max_line:
                    lines.append(bytes(self._partial))
            self._partial.clear()
            start = nl + 1
        if not self._discarding:
            self._partial += data[start:]
            if len(self._partial) > self.max_line + 1:
                self._partial.clear()
                self._discarding = True
        return lines


class StreamStatus:
    """What an app's stream has said across its connections."""

    def __init__(self) -> None:
        #: The state the last ``hello`` line gave (``background``, ``active``, ...).
        self.state: Optional[str] = None
        #: How many times the stream was opened (1 + reconnections).
        self.connections = 0


class EventStreamDecoder:
    """The bytes of one ``GET /v1/apps/ID/events`` connection in, events out. ``hello`` lines
    update ``status``; a ``task-expiring`` event calls ``on_expiring`` with its task before it
    is handed on."""

    def __init__(self, status: Optional[StreamStatus] = None, on_expiring: Optional[Callable[[str], None]] = None) -> None:
        self.http = ResponseParser("GET", max_body=None)
        self.status = status or StreamStatus()
        self._on_expiring = on_expiring
        self._lines = LineSplitter()
        self._error_body = bytearray()

    def feed(self, data: bytes) -> list[Event]:
        body = self.http.feed(data)
        if self.http.status is None:
            return []
        if self.http.status != 200:
            self._error_body += body[:65536 - len(self._error_body)]
            return []
        out = []
        for line in self._lines.feed(body):
            item = parse_event_line(line)
            if isinstance(item, Hello):
                self.status.state = item.state
                self.status.connections += 1
            elif item is not None:
                if item.kind == TASK_EXPIRING and item.task and self._on_expiring is not None:
                    self._on_expiring(item.task)
                out.append(item)
        return out

    def refusal(self) -> Optional[DrowseError]:
        """The error to give up with: a 4xx answer (but 408 and 429, which may pass). Other
        endings (5xx, a closed connection) are retried."""
        s = self.http.status
        if s is not None and 400 <= s < 500 and s not in (408, 429):
            return DrowseError.from_answer(s, bytes(self._error_body))
        return None


class Backoff:
    """Reconnection delays: ``base`` doubling up to ``cap``, each with jitter (50-100 %)."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap = base, cap
        self._next = base

    def reset(self) -> None:
        self._next = self.base

    def next(self) -> float:
        d = self._next
        self._next = min(self.cap, self._next * 2)
        return d * (0.5 + random.random() / 2)


#: A connection that delivered an event or lasted this long resets the backoff.
HEALTHY_AFTER = 5.0


class Routes:
    """The API calls an app makes: (method, target, body) for each."""

    def __init__(self, app: str) -> None:
        self.app = app

    def _app(self) -> str:
        if not self.app:
            raise DrowseError(0, "no_app", "no app id: pass app= or set DROWSE_APP")
        return f"/v1/apps/{segment(self.app)}"

    def status(self) -> tuple[str, str, Any]:
        return "GET", self._app(), None

    def events(self) -> str:
        return self._app() + "/events"

    def complete(self, event_id: str, result: Any) -> tuple[str, str, Any]:
        value = result.value if hasattr(result, "value") else result
        if value not in ("new-data", "no-data", "failed"):
            raise ValueError(f"result must be new-data, no-data or failed, not {result!r}")
        return "POST", f"{self._app()}/events/{segment(event_id)}/complete", {"result": value}

    def begin_task(self, name: Optional[str]) -> tuple[str, str, Any]:
        return "POST", self._app() + "/tasks", ({} if name is None else {"name": name})

    def task(self, task_id: str) -> tuple[str, str, Any]:
        return "GET", f"{self._app()}/tasks/{segment(task_id)}", None

    def end_task(self, task_id: str) -> tuple[str, str, Any]:
        return "POST", f"{self._app()}/tasks/{segment(task_id)}/end", None

    def download(self, url: str, to: Optional[str], sha256: Optional[str], session: str,
                 options: dict[str, Any]) -> tuple[str, str, Any]:
        self._app()
        body = {"kind": "download", "url": url, "app": self.app, "session": session, "to": to, "sha256": sha256, **options}
        return "POST", "/v1/transfers", {k: v for k, v in body.items() if v is not None}

    def upload(self, file: str, url: str, session: str, options: dict[str, Any]) -> tuple[str, str, Any]:
        self._app()
        body = {"kind": "upload", "url": url, "app": self.app, "session": session, "file": file, **options}
        return "POST", "/v1/transfers", {k: v for k, v in body.items() if v is not None}

    def transfer(self, transfer_id: str, wait: Optional[float] = None) -> tuple[str, str, Any]:
        """``GET /v1/transfers/ID``; with ``wait`` (seconds), drowsed answers once the transfer is
        completed, failed or cancelled, or after that long, whichever comes first."""
        query = "" if wait is None else f"?wait={seconds_text(wait)}"
        return "GET", f"/v1/transfers/{segment(transfer_id)}{query}", None

    def cancel_transfer(self, transfer_id: str) -> tuple[str, str, Any]:
        return "POST", f"/v1/transfers/{segment(transfer_id)}/cancel", None

    def transfers(self, limit: Optional[int], after: Optional[str]) -> tuple[str, str, Any]:
        query = f"?app={segment(self.app)}" if self.app else "?"
        if limit is not None:
            query += f"&limit={int(limit)}"
        if after is not None:
            query += f"&after={segment(after)}"
        return "GET", "/v1/transfers" + query.replace("?&", "?").rstrip("?"), None


class TaskBook:
    """Which background tasks are open and who ends each: the app, or the library after the
    task's expiration callback. Thread-safe; the same book serves both clients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handlers: dict[str, Optional[Callable[[], Any]]] = {}
        self._fired: set[str] = set()
        self._ending: set[str] = set()
        self._early: set[str] = set()

    def add(self, task_id: str, handler: Optional[Callable[[], Any]]) -> bool:
        """Records a task just begun; True when its warning already came (run ``expiring`` now)."""
        with self._lock:
            self._handlers[task_id] = handler
            if task_id in self._early:
                self._early.discard(task_id)
                return True
            return False

    def expiring(self, task_id: str) -> tuple[bool, Optional[Callable[[], Any]]]:
        """The task's time runs out: (run, handler). ``run`` is False when the callback already ran,
        the task is ending, or the task is not (yet) known: a warning that came before
        ``begin_background_task`` had the id back is kept for ``add``."""
        with self._lock:
            if task_id not in self._handlers:
                if len(self._early) < 256:
                    self._early.add(task_id)
                return False, None
            if task_id in self._fired or task_id in self._ending:
                return False, None
            self._fired.add(task_id)
            return True, self._handlers[task_id]

    def claim_end(self, task_id: str) -> bool:
        """Marks the task as being ended; False when it is ended or being ended already (or unknown)."""
        with self._lock:
            if task_id not in self._handlers or task_id in self._ending:
                return False
            self._ending.add(task_id)
            return True

    def end_failed(self, task_id: str) -> None:
        with self._lock:
            self._ending.discard(task_id)

    def ended(self, task_id: str) -> None:
        """The task is ended: forget it (an ``end`` of it later asks drowsed, which answers it ended)."""
        with self._lock:
            self._handlers.pop(task_id, None)
            self._fired.discard(task_id)
            self._ending.discard(task_id)

    def end_answered(self, task_id: str, error: Optional[DrowseError]) -> None:
        """drowsed answered ``POST …/end``: the task is ended (also when drowsed no longer knows it,
        404); otherwise it stays open, ``error`` is raised and the app may end it again."""
        if error is not None and error.status != 404:
            self.end_failed(task_id)
            raise error
        self.ended(task_id)

    def time_left(self, task_id: str, answer: "BackgroundTask | DrowseError") -> Optional[float]:
        """The time remaining ``GET …/tasks/ID`` says for an open task; None (and the task
        forgotten) when it is no longer open; an error other than 404 is raised."""
        if isinstance(answer, DrowseError):
            if answer.status != 404:
                raise answer
        elif answer.open:
            return max(0.0, answer.time_remaining or 0.0)
        self.ended(task_id)
        return None

    def known(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._handlers

    def open_ids(self) -> list[str]:
        with self._lock:
            return sorted(t for t in self._handlers if t not in self._ending)


class PageWalk:
    """One walk through the transfer pages: the ``after`` of each page. Each page's last id moves
    the walk on; one the walk had already (pages that go round) ends it with a DrowseProtocolError."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        #: The ``after`` of the page to ask for next (None: the first).
        self.after: Optional[str] = None
        self._seen: set[str] = set()

    def follow(self, page: list[Transfer]) -> bool:
        """Whether a page follows ``page`` (then ``after`` is its cursor); raises, before the
        page is handed out, when its cursor came before in this walk."""
        if len(page) < self.page_size or not page:
            return False
        cursor = page[-1].id
        if cursor == self.after or cursor in self._seen:
            raise DrowseProtocolError(f"the transfer pages go round: the page after {clip(self.after or '')} ends "
                                      f"with {clip(cursor)}, which came before")
        self._seen.add(cursor)
        self.after = cursor
        return True


def seconds_text(seconds: float) -> str:
    """Seconds for a query: at most 3 decimals, rounded down, never below 0 (``30``, ``1.25``, ``0``)."""
    ms = max(0, math.floor(round(seconds * 1000, 6))) if math.isfinite(seconds) else 0
    return f"{ms // 1000}.{ms % 1000:03d}".rstrip("0").rstrip(".")


def answer_timeout(timeout: Optional[float], wait: float) -> Optional[float]:
    """How long a call that asked drowsed to hold its answer ``wait`` seconds waits for it: the
    client's ``timeout`` beyond the wait (None: no limit)."""
    return None if timeout is None else timeout + max(0.0, wait)


#: The longest ``wait`` one request of ``wait_transfer`` asks for (drowsed takes up to 60 s).
TRANSFER_WAIT = 30.0


class TransferWait:
    """Waiting for a transfer to finish with long polls: each ``GET /v1/transfers/ID?wait=S``
    (``ask`` gives S) asks drowsed to answer once the transfer is completed, failed or cancelled,
    or after S seconds: at most 30, and no longer than the time left before the deadline. A
    drowsed that answers sooner without the end (one that ignores ``wait``, one stopping, or one
    with too many requests waiting) is asked again no sooner than ``interval`` after the previous
    ask, the interval growing by half up to 2 s (or ``interval`` itself, when longer)."""

    def __init__(self, timeout: Optional[float], interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self.deadline = None if timeout is None else clock() + timeout
        self.interval = interval
        self._cap = max(interval, 2.0)
        self._asked_at: Optional[float] = None

    def ask(self) -> float:
        """The ``wait`` for the next request, which starts now (in seconds, 3 decimals at most)."""
        now = self._clock()
        self._asked_at = now
        wait = TRANSFER_WAIT if self.deadline is None else min(TRANSFER_WAIT, self.deadline - now)
        return float(seconds_text(wait))

    def delay(self, t: Transfer) -> Optional[float]:
        """The answer to the last ask came: None when ``t`` has finished, else how long to wait
        before asking again; TimeoutError past the deadline."""
        if t.finished:
            return None
        now = self._clock()
        left = None if self.deadline is None else self.deadline - now
        if left is not None and left <= 0:
            raise TimeoutError(f"transfer {clip(t.id)} is still {clip(str(t.state))} after {self.timeout}s")
        since = 0.0 if self._asked_at is None else now - self._asked_at
        d = max(0.0, self.interval - since)
        self.interval = min(self.interval * 1.5, self._cap)
        return d if left is None else min(d, left)


def local_expiry_delay(time_remaining: Optional[float], margin: float) -> Optional[float]:
    """Seconds until the local expiration timer of a task just begun (``margin`` before its end)."""
    if time_remaining is None:
        return None
    return min(max(0.0, time_remaining - margin), threading.TIMEOUT_MAX)
