"""AsyncDrowseApp against the scripted server: the same protocol, awaited."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from drowsekit import DrowseError, Result
from drowsekit.aio import AsyncDrowseApp
from scripted_server import Peer, chunk, line
from test_client import HELLO, fetch, keep_alive, task_server


def run(coro, timeout: float = 15.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_a_stream_cut_mid_line_reconnects_and_drops_the_partial_line(server):
    def cut(p: Peer):
        p.read_request()
        p.stream_head()
        data = chunk(HELLO + fetch("e1")) + chunk(fetch("partial")[:-1])  # no LF: the line is not whole
        p.send_pieces(data, 4, pause=0.001)

    def second(p: Peer):
        p.read_request()
        p.stream_head()
        p.send(chunk(HELLO[:10]) + chunk(HELLO[10:] + fetch("e2")[:7]) + chunk(fetch("e2")[7:]))
        p.hold()

    server.serve(cut, second)

    async def main():
        app = AsyncDrowseApp(app="py", socket=server.path)
        got = []
        stream = app.events()
        async for e in stream:
            got.append(e.id)
            if len(got) == 2:
                break
        await stream.aclose()
        return got, stream.status.connections

    assert run(main()) == (["e1", "e2"], 2)


def test_aclose_from_another_task_ends_a_waiting_stream(server):
    def quiet(p: Peer):
        p.read_request()
        p.stream_head()
        p.send(chunk(HELLO))
        p.hold()

    server.serve(quiet)

    async def main():
        stream = AsyncDrowseApp(app="py", socket=server.path).events()

        async def consume():
            return [e async for e in stream]

        job = asyncio.ensure_future(consume())
        await asyncio.sleep(0.3)
        await stream.aclose()
        return await asyncio.wait_for(job, 5)

    assert run(main()) == []


def test_a_refused_stream_raises_with_the_code(server):
    def refused(p: Peer):
        p.read_request()
        p.answer(403, {"error": {"code": "forbidden", "message": "not yours"}}, chunked=True)

    server.serve(refused)

    async def main():
        async for _ in AsyncDrowseApp(app="py", socket=server.path).events():
            pass

    with pytest.raises(DrowseError) as e:
        run(main())
    assert (e.value.status, e.value.code) == (403, "forbidden")


def test_calls_keep_alive_close_and_errors(server):
    server.serve(keep_alive((200, {"id": "e1", "recorded": True}, {"chunked": True}),
                            (200, {"id": "e2", "recorded": True}, {"headers": {"Connection": "close"}})),
                 keep_alive((404, {"error": {"code": "not_found", "message": "no event 'e3'"}}, {}),
                            (503, {"error": {"code": "busy", "message": "stopping"}}, {"chunked": True})))

    async def main():
        app = AsyncDrowseApp(app="py", socket=server.path)
        await app.complete("e1", Result.NEW_DATA)
        await app.complete("e2", Result.NO_DATA)
        errors = []
        for eid in ("e3", "e4"):
            try:
                await app.complete(eid, Result.FAILED)
            except DrowseError as e:
                errors.append((e.status, e.code))
        await app.aclose()
        return errors

    assert run(main()) == [(404, "not_found"), (503, "busy")]
    assert server.connections == 2
    assert [r.connection for r in server.requests] == [1, 1, 2, 2]


def test_a_coroutine_expiration_callback_runs_on_the_warning(server):
    api, stream = task_server(time_remaining=30, warn=True)
    server.serve(stream, default=api)

    async def main():
        app = AsyncDrowseApp(app="py", socket=server.path)
        expired = asyncio.Event()

        async def on_expire():
            await app.end_background_task("t1")
            expired.set()

        events = app.events()
        it = events.__aiter__()
        first = asyncio.ensure_future(it.__anext__())
        await asyncio.sleep(0.2)
        task = await app.begin_background_task("sync", on_expire=on_expire)
        warning = await first
        await asyncio.wait_for(expired.wait(), 5)
        await events.aclose()
        return task.id, warning.kind, warning.task

    assert run(main()) == ("t1", "task-expiring", "t1")
    time.sleep(0.1)
    assert len([r for r in server.requests if r.target.endswith("/tasks/t1/end")]) == 1


def test_the_local_timer_runs_a_plain_callback_and_the_library_ends_the_task(server):
    api, _ = task_server(time_remaining=1.3, warn=False)
    server.serve(default=api)
    ran = threading.Event()

    async def main():
        app = AsyncDrowseApp(app="py", socket=server.path, expiry_margin=1.0)
        await app.begin_background_task("sync", on_expire=ran.set)
        for _ in range(100):
            if any(r.target.endswith("/tasks/t1/end") for r in server.requests):
                return True
            await asyncio.sleep(0.05)
        return False

    assert run(main()) and ran.is_set()
