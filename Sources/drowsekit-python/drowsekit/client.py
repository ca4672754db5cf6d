"""The blocking interface: ``DrowseApp``. Calls may come from any thread."""

from __future__ import annotations

import contextlib
import socket as _socket
import threading
import time
from typing import Any, Callable, Iterator, Optional, Union

from . import protocol as P
from .errors import DrowseConnectionError, DrowseError, DrowseProtocolError
from .models import AppStatus, BackgroundTask, Event, Result, Transfer

ResultLike = Union[Result, str]


class _Connection:
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise DrowseConnectionError(f"cannot connect to {path}: {e.strerror or e}") from None
        self.idle_since = time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class DrowseApp:
    """An app's connection to drowsed (the local API over its Unix socket).

    ::

        app = DrowseApp()                     # DROWSE_APP and DROWSE_SOCKET, as drowsed sets them
        for event in app.events():
            ...
            app.complete(event, Result.NEW_DATA)

    ``timeout`` bounds each wait for drowsed's answer to a call (beyond the time a
    ``wait_transfer`` request asks drowsed to hold its answer; not the event stream, which is
    quiet between events). ``expiry_margin``: a task's expiration callback runs at the latest this
    long before the task's end even when no ``task-expiring`` warning came on the stream.
    """

    def __init__(self, app: Optional[str] = None, socket: Optional[str] = None, timeout: float = 30.0,
                 expiry_margin: float = 1.0) -> None:
        self.app = P.app_id(app)
        self.socket = P.socket_path(socket)
        self.timeout = timeout
        self.expiry_margin = expiry_margin
        self._routes = P.Routes(self.app)
        self._tasks = P.TaskBook()
        self._timers: dict[str, threading.Timer] = {}
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []

    # ---- plumbing

    def _checkout(self) -> tuple[_Connection, bool]:
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                if time.monotonic() - c.idle_since < P.IDLE_REUSE:
                    return c, True
                c.close()
        return _Connection(self.socket, self.timeout), False

    def _checkin(self, c: _Connection) -> None:
        c.idle_since = time.monotonic()
        with self._lock:
            self._idle.append(c)

    def call(self, method: str, target: str, body: Any = None) -> Any:
        """One API call; the answer's JSON, or DrowseError with the API's code and HTTP status."""
        return self._call(method, target, body)

    def _call(self, method: str, target: str, body: Any = None, wait: float = 0.0) -> Any:
        """``call`` for a request drowsed may hold up to ``wait`` seconds before answering."""
        request = P.request_bytes(method, target, body)
        while True:
            c, reused = self._checkout()
            parser = P.ResponseParser(method)
            data = bytearray()
            try:
                c.sock.settimeout(P.answer_timeout(self.timeout, wait))
                c.sock.sendall(request)
                while not parser.complete:
                    chunk = c.sock.recv(65536)
                    if not chunk:
                        parser.eof()
                        break
                    data += parser.feed(chunk)
            except (OSError, DrowseProtocolError) as e:
                c.close()
                P.retry_or_raise(e, reused, parser, f"{method} {target}")
                continue
            if parser.keep_alive:
                self._checkin(c)
            else:
                c.close()
            assert parser.status is not None
            return P.answer_json(parser.status, bytes(data))

    def close(self) -> None:
        """Closes kept-alive connections and cancels the local expiry timers."""
        with self._lock:
            idle, self._idle = self._idle, []
            timers, self._timers = list(self._timers.values()), {}
        for c in idle:
            c.close()
        for t in timers:
            t.cancel()

    def __enter__(self) -> "DrowseApp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the app

    def status(self) -> AppStatus:
        """The app as drowsed sees it: state, last result, the last runs (``history``)."""
        return AppStatus.from_json(self.call(*self._routes.status()))

    def events(self) -> "EventStream":
        """The app's event stream (iterate it). Opening it replaces any other stream of the app;
        it reconnects when drowsed goes away and raises DrowseError only when refused (4xx)."""
        return EventStream(self)

    def complete(self, event: Union[Event, str], result: ResultLike) -> None:
        """Records the result of a fetch, notification or transfers event (by its deadline)."""
        self.call(*self._routes.complete(event.id if isinstance(event, Event) else event, result))

    # ---- background tasks

    def begin_background_task(self, name: Optional[str] = None,
                              on_expire: Optional[Callable[[], Any]] = None) -> BackgroundTask:
        """Begins a finite background task. ``on_expire`` runs (on a thread of its own) when the
        time runs out: on the stream's ``task-expiring`` warning, or ``expiry_margin`` before the
        end; the library ends the task after it unless it did. DrowseError ``no_background_time``
        when the allowance is used up."""
        task = BackgroundTask.from_json(self.call(*self._routes.begin_task(name)))
        early = self._tasks.add(task.id, on_expire)
        delay = P.local_expiry_delay(task.time_remaining, self.expiry_margin)
        if delay is not None:
            timer = threading.Timer(delay, self._expiring, (task.id,))
            timer.daemon = True
            with self._lock:
                self._timers[task.id] = timer
            timer.start()
        if early:
            self._expiring(task.id)
        return task

    def end_background_task(self, task: Union[BackgroundTask, str]) -> None:
        """Ends a task. Ending one the library is ending (after its callback) does nothing."""
        tid = task.id if isinstance(task, BackgroundTask) else task
        if self._tasks.known(tid) and not self._tasks.claim_end(tid):
            return
        self._end(tid)

    def _end(self, tid: str) -> None:
        error = None
        try:
            self.call(*self._routes.end_task(tid))
        except DrowseError as e:
            error = e
        self._tasks.end_answered(tid, error)
        with self._lock:
            timer = self._timers.pop(tid, None)
        if timer is not None:
            timer.cancel()

    @contextlib.contextmanager
    def background_task(self, name: Optional[str] = None,
                        on_expire: Optional[Callable[[], Any]] = None) -> Iterator[BackgroundTask]:
        """``with app.background_task("sync", on_expire=stop.set) as task: ...``: ended on leaving."""
        task = self.begin_background_task(name, on_expire)
        try:
            yield task
        finally:
            self.end_background_task(task)

    def task(self, task_id: str) -> BackgroundTask:
        return BackgroundTask.from_json(self.call(*self._routes.task(task_id)))

    def background_time_remaining(self) -> float:
        """Seconds of background time left to the app's open tasks; 0 when none is open."""
        for tid in self._tasks.open_ids():
            try:
                answer: "BackgroundTask | DrowseError" = self.task(tid)
            except DrowseError as e:
                answer = e
            left = self._tasks.time_left(tid, answer)
            if left is not None:
                return left
        return 0.0

    def _expiring(self, tid: str) -> None:
        run, handler = self._tasks.expiring(tid)
        if run:
            threading.Thread(target=self._run_expiration, args=(tid, handler), daemon=True,
                             name=f"drowsekit-expire-{tid}").start()

    def _run_expiration(self, tid: str, handler: Optional[Callable[[], Any]]) -> None:
        try:
            if handler is not None:
                handler()
        finally:
            if self._tasks.claim_end(tid):
                with contextlib.suppress(DrowseError):  # drowsed ends it at its end anyway
                    self._end(tid)

    # ---- transfers

    def download(self, url: str, to: Optional[str] = None, sha256: Optional[str] = None, session: str = "default",
                 **options: Any) -> Transfer:
        """Queues a background download; ``to`` is an absolute path (default: the app's inbox).
        ``options``: any other member of docs/api.md's transfer request (``discretionary=True``, ...).
        When the session's transfers have all finished, a ``transfers`` event arrives."""
        return Transfer.from_json(self.call(*self._routes.download(url, to, sha256, session, options)))

    def upload(self, file: str, url: str, session: str = "default", **options: Any) -> Transfer:
        """Queues a background upload of ``file`` (an absolute path) to ``url``."""
        return Transfer.from_json(self.call(*self._routes.upload(file, url, session, options)))

    def transfer(self, transfer_id: str) -> Transfer:
        return Transfer.from_json(self.call(*self._routes.transfer(transfer_id)))

    def cancel_transfer(self, transfer_id: str) -> Transfer:
        return Transfer.from_json(self.call(*self._routes.cancel_transfer(transfer_id)))

    def transfers(self, limit: Optional[int] = None, after: Optional[str] = None) -> list[Transfer]:
        """One page of the app's transfers in creation order: ``after`` is the last id of the
        previous page; a page shorter than ``limit`` (default 100) is the last."""
        page = self.call(*self._routes.transfers(limit, after))
        if not isinstance(page, list):
            raise DrowseProtocolError("the transfer list is not an array")
        return [Transfer.from_json(t) for t in page]

    def all_transfers(self, page_size: int = 500) -> Iterator[Transfer]:
        """Every transfer of the app, following the pages; DrowseProtocolError when drowsed's pages
        go round (a page ends where an earlier one did)."""
        walk = P.PageWalk(page_size)
        while True:
            page = self.transfers(page_size, walk.after)
            more = walk.follow(page)
            yield from page
            if not more:
                return

    def wait_transfer(self, transfer_id: str, timeout: Optional[float] = None, interval: float = 0.2) -> Transfer:
        """The transfer once it is completed, failed or cancelled; TimeoutError after ``timeout``.
        Each request asks drowsed to hold its answer until then (``?wait=``, at most 30 s and the
        time left); a drowsed that answers sooner anyway is asked again at most every ``interval``
        (growing to 2 s)."""
        wait = P.TransferWait(timeout, interval)
        while True:
            seconds = wait.ask()
            t = Transfer.from_json(self._call(*self._routes.transfer(transfer_id, seconds), wait=seconds))
            delay = wait.delay(t)
            if delay is None:
                return t
            time.sleep(delay)


class EventStream:
    """An open event stream: iterate it for events; ``close()`` (from any thread) ends it."""

    def __init__(self, app: DrowseApp) -> None:
        self._app = app
        self._target = app._routes.events()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sock: Optional[_socket.socket] = None
        #: What the stream said: ``status.state`` (from its hello line), ``status.connections``.
        self.status = P.StreamStatus()

    def __iter__(self) -> Iterator[Event]:
        backoff = P.Backoff()
        while not self._closed.is_set():
            started = time.monotonic()
            delivered = False
            for event in self._connect_once():
                delivered = True
                yield event
            if delivered or time.monotonic() - started >= P.HEALTHY_AFTER:
                backoff.reset()
            self._closed.wait(backoff.next())

    def _connect_once(self) -> Iterator[Event]:
        try:
            c = _Connection(self._app.socket, None)
        except DrowseConnectionError:
            return
        with self._lock:
            if self._closed.is_set():
                c.close()
                return
            self._sock = c.sock
        decoder = P.EventStreamDecoder(self.status, self._app._expiring)
        try:
            c.sock.sendall(P.request_bytes("GET", self._target, accept="application/x-ndjson"))
            while not decoder.http.complete:
                data = c.sock.recv(65536)
                if not data:
                    break
                for event in decoder.feed(data):
                    yield event
        except (OSError, DrowseProtocolError):
            pass
        finally:
            with self._lock:
                self._sock = None
            c.close()
        refused = decoder.refusal()
        if refused is not None:
            raise refused

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(_socket.SHUT_RDWR)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
