"""The asyncio interface: ``AsyncDrowseApp``, the same calls as ``DrowseApp`` awaited."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import Any, AsyncIterator, Callable, Optional, Union

from . import protocol as P
from .errors import DrowseConnectionError, DrowseError, DrowseProtocolError
from .models import AppStatus, BackgroundTask, Event, Result, Transfer

ResultLike = Union[Result, str]
#: An expiration callback: a plain function, or a coroutine function (run as a task).
ExpirationHandler = Callable[[], Any]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    @classmethod
    async def open(cls, path: str) -> "_Connection":
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=1 << 16)
        except OSError as e:
            raise DrowseConnectionError(f"cannot connect to {path}: {e.strerror or e}") from None
        return cls(reader, writer)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class AsyncDrowseApp:
    """An app's connection to drowsed, for asyncio. Parameters as for ``DrowseApp``::

        app = AsyncDrowseApp()
        async for event in app.events():
            ...
            await app.complete(event, Result.NEW_DATA)
    """

    def __init__(self, app: Optional[str] = None, socket: Optional[str] = None, timeout: float = 30.0,
                 expiry_margin: float = 1.0) -> None:
        self.app = P.app_id(app)
        self.socket = P.socket_path(socket)
        self.timeout = timeout
        self.expiry_margin = expiry_margin
        self._routes = P.Routes(self.app)
        self._tasks = P.TaskBook()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[asyncio.Task[Any]] = set()
        self._idle: list[_Connection] = []

    # ---- plumbing

    async def call(self, method: str, target: str, body: Any = None) -> Any:
        """One API call; the answer's JSON, or DrowseError with the API's code and HTTP status."""
        return await self._call(method, target, body)

    async def _call(self, method: str, target: str, body: Any = None, wait: float = 0.0) -> Any:
        """``call`` for a request drowsed may hold up to ``wait`` seconds before answering."""
        request = P.request_bytes(method, target, body)
        limit = P.answer_timeout(self.timeout, wait)
        while True:
            reused = False
            c: Optional[_Connection] = None
            while self._idle and c is None:
                c = self._idle.pop()
                if time.monotonic() - c.idle_since >= P.IDLE_REUSE:
                    c.close()
                    c = None
            if c is None:
                c = await _Connection.open(self.socket)
            else:
                reused = True
            parser = P.ResponseParser(method)
            data = bytearray()
            try:
                c.writer.write(request)
                await asyncio.wait_for(c.writer.drain(), self.timeout)
                while not parser.complete:
                    chunk = await asyncio.wait_for(c.reader.read(65536), limit)
                    if not chunk:
                        parser.eof()
                        break
                    data += parser.feed(chunk)
            except asyncio.TimeoutError:
                c.close()
                raise DrowseConnectionError(f"{method} {target}: no answer in {limit}s") from None
            except (OSError, DrowseProtocolError) as e:
                c.close()
                P.retry_or_raise(e, reused, parser, f"{method} {target}")
                continue
            except BaseException:
                c.close()  # cancelled mid-call: the connection's state is unknown
                raise
            if parser.keep_alive:
                c.idle_since = time.monotonic()
                self._idle.append(c)
            else:
                c.close()
            assert parser.status is not None
            return P.answer_json(parser.status, bytes(data))

    async def aclose(self) -> None:
        """Closes kept-alive connections and cancels the local expiry timers."""
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    async def __aenter__(self) -> "AsyncDrowseApp":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---- the app

    async def status(self) -> AppStatus:
        return AppStatus.from_json(await self.call(*self._routes.status()))

    def events(self) -> "AsyncEventStream":
        """The app's event stream (``async for``); reconnects as ``DrowseApp.events`` does."""
        return AsyncEventStream(self)

    async def complete(self, event: Union[Event, str], result: ResultLike) -> None:
        await self.call(*self._routes.complete(event.id if isinstance(event, Event) else event, result))

    # ---- background tasks

    async def begin_background_task(self, name: Optional[str] = None,
                                    on_expire: Optional[ExpirationHandler] = None) -> BackgroundTask:
        """As ``DrowseApp.begin_background_task``; ``on_expire`` runs in the event loop (a
        coroutine function as a task of its own)."""
        task = BackgroundTask.from_json(await self.call(*self._routes.begin_task(name)))
        early = self._tasks.add(task.id, on_expire)
        delay = P.local_expiry_delay(task.time_remaining, self.expiry_margin)
        if delay is not None:
            self._timers[task.id] = asyncio.get_running_loop().call_later(delay, self._expiring, task.id)
        if early:
            self._expiring(task.id)
        return task

    async def end_background_task(self, task: Union[BackgroundTask, str]) -> None:
        tid = task.id if isinstance(task, BackgroundTask) else task
        if self._tasks.known(tid) and not self._tasks.claim_end(tid):
            return
        await self._end(tid)

    async def _end(self, tid: str) -> None:
        error = None
        try:
            await self.call(*self._routes.end_task(tid))
        except DrowseError as e:
            error = e
        self._tasks.end_answered(tid, error)
        timer = self._timers.pop(tid, None)
        if timer is not None:
            timer.cancel()

    @contextlib.asynccontextmanager
    async def background_task(self, name: Optional[str] = None,
                              on_expire: Optional[ExpirationHandler] = None) -> AsyncIterator[BackgroundTask]:
        task = await self.begin_background_task(name, on_expire)
        try:
            yield task
        finally:
            await self.end_background_task(task)

    async def task(self, task_id: str) -> BackgroundTask:
        return BackgroundTask.from_json(await self.call(*self._routes.task(task_id)))

    async def background_time_remaining(self) -> float:
        for tid in self._tasks.open_ids():
            try:
                answer: "BackgroundTask | DrowseError" = await self.task(tid)
            except DrowseError as e:
                answer = e
            left = self._tasks.time_left(tid, answer)
            if left is not None:
                return left
        return 0.0

    def _expiring(self, tid: str) -> None:
        run, handler = self._tasks.expiring(tid)
        if run:
            job = asyncio.get_running_loop().create_task(self._run_expiration(tid, handler))
            self._running.add(job)
            job.add_done_callback(self._running.discard)

    async def _run_expiration(self, tid: str, handler: Optional[ExpirationHandler]) -> None:
        try:
            if handler is not None:
                r = handler()
                if inspect.isawaitable(r):
                    await r
        finally:
            if self._tasks.claim_end(tid):
                with contextlib.suppress(DrowseError):
                    await self._end(tid)

    # ---- transfers

    async def download(self, url: str, to: Optional[str] = None, sha256: Optional[str] = None, session: str = "default",
                       **options: Any) -> Transfer:
        return Transfer.from_json(await self.call(*self._routes.download(url, to, sha256, session, options)))

    async def upload(self, file: str, url: str, session: str = "default", **options: Any) -> Transfer:
        return Transfer.from_json(await self.call(*self._routes.upload(file, url, session, options)))

    async def transfer(self, transfer_id: str) -> Transfer:
        return Transfer.from_json(await self.call(*self._routes.transfer(transfer_id)))

    async def cancel_transfer(self, transfer_id: str) -> Transfer:
        return Transfer.from_json(await self.call(*self._routes.cancel_transfer(transfer_id)))

    async def transfers(self, limit: Optional[int] = None, after: Optional[str] = None) -> list[Transfer]:
        page = await self.call(*self._routes.transfers(limit, after))
        if not isinstance(page, list):
            raise DrowseProtocolError("the transfer list is not an array")
        return [Transfer.from_json(t) for t in page]

    async def all_transfers(self, page_size: int = 500) -> AsyncIterator[Transfer]:
        """As ``DrowseApp.all_transfers``."""
        walk = P.PageWalk(page_size)
        while True:
            page = await self.transfers(page_size, walk.after)
            more = walk.follow(page)
            for t in page:
                yield t
            if not more:
                return

    async def wait_transfer(self, transfer_id: str, timeout: Optional[float] = None, interval: float = 0.2) -> Transfer:
        """As ``DrowseApp.wait_transfer``: long polls (``?wait=``), asked again at most every
        ``interval`` when drowsed answers sooner without the transfer's end."""
        wait = P.TransferWait(timeout, interval)
        while True:
            seconds = wait.ask()
            t = Transfer.from_json(await self._call(*self._routes.transfer(transfer_id, seconds), wait=seconds))
            delay = wait.delay(t)
            if delay is None:
                return t
            await asyncio.sleep(delay)


class AsyncEventStream:
    """An open event stream for ``async for``; ``aclose()`` or cancelling the consumer ends it."""

    def __init__(self, app: AsyncDrowseApp) -> None:
        self._app = app
        self._target = app._routes.events()
        self._closed: Optional[asyncio.Event] = None
        self._conn: Optional[_Connection] = None
        self._gen: Optional[AsyncIterator[Event]] = None
        #: What the stream said: ``status.state`` (from its hello line), ``status.connections``.
        self.status = P.StreamStatus()

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    def _closed_event(self) -> asyncio.Event:
        if self._closed is None:
            self._closed = asyncio.Event()
        return self._closed

    async def aclose(self) -> None:
        """Ends the stream, also while another task waits in ``async for`` (which then ends)."""
        self._closed_event().set()
        if self._conn is not None:
            self._conn.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _run(self) -> AsyncIterator[Event]:
        backoff = P.Backoff()
        loop = asyncio.get_running_loop()
        closed = self._closed_event()
        while not closed.is_set():
            started = loop.time()
            delivered = False
            once = self._connect_once()
            try:
                async for event in once:
                    delivered = True
                    yield event
            finally:
                await once.aclose()  # type: ignore[attr-defined]
            if delivered or loop.time() - started >= P.HEALTHY_AFTER:
                backoff.reset()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(closed.wait(), backoff.next())

    async def _connect_once(self) -> AsyncIterator[Event]:
        try:
            c = await _Connection.open(self._app.socket)
        except DrowseConnectionError:
            return
        if self._closed_event().is_set():
            c.close()
            return
        self._conn = c
        decoder = P.EventStreamDecoder(self.status, self._app._expiring)
        try:
            c.writer.write(P.request_bytes("GET", self._target, accept="application/x-ndjson"))
            await c.writer.drain()
            while not decoder.http.complete:
                data = await c.reader.read(65536)
                if not data:
                    break
                for event in decoder.feed(data):
                    yield event
        except (OSError, DrowseProtocolError):
            pass
        finally:
            self._conn = None
            c.close()
        refused = decoder.refusal()
        if refused is not None:
            raise refused
