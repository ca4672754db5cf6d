"""A hostile peer on the socket, for both clients: whatever its bytes, a call fails with a
DrowseError and nothing else (malformed or deeply nested JSON, members of the wrong type, numbers
no float holds, bad framing, answers that never end), and an event stream skips the lines it
cannot read and goes on."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import pytest

from drowsekit import DrowseApp, DrowseError, DrowseProtocolError
from drowsekit.aio import AsyncDrowseApp
from scripted_server import Peer, chunk
from test_aio import run
from test_client import HELLO, fetch

#: Nested past any recursion limit, and valid JSON otherwise.
DEEP = b"[" * 20_000 + b"]" * 20_000

#: JSON texts to put where drowsed sends a member: wrong types, numbers no float holds, deep nesting.
VALUES = {"null": b"null", "true": b"true", "-1": b"-1", "1e999": b"1e999", "-Infinity": b"-Infinity", "NaN": b"NaN",
          "10**400": b"1" + b"0" * 400, "ESC and a lone surrogate": b'"\\u001b[2J\\ud800"', "[]": b"[]", "{}": b"{}",
          "a list of an object": b'[{"id": 1}]', "400 deep": b"[" * 400 + b"]" * 400, "20000 deep": DEEP}

#: The members each answer has, by the call that reads it.
MEMBERS = {
    "transfer": ["id", "app", "session", "kind", "state", "url", "bytes_done", "bytes_total", "reason", "location"],
    "task": ["id", "app", "name", "state", "expires_at", "time_remaining"],
    "status": ["id", "state", "state_reason", "last_result", "resident", "history"],
}


def http(body: bytes, status: int = 200) -> bytes:
    """An answer with `body` as it is, framed by its Content-Length."""
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(body)) + body


def with_member(name: str, value: bytes) -> bytes:
    """An object with an id and `name` set to `value` (or only `name`, when it is the id)."""
    return b'{%s"%s": %s}' % (b"" if name == "id" else b'"id": "x1", ', name.encode(), value)


def member_cases(call: str) -> list[tuple[str, bytes]]:
    cases = [(f"the whole answer {k}", http(v)) for k, v in VALUES.items()]
    cases += [(f"an error answer holding {k}", http(b'{"error": %s}' % v, 500)) for k, v in VALUES.items()]
    for name in MEMBERS[call]:
        cases += [(f"{name}={k}", http(with_member(name, v))) for k, v in VALUES.items()]
    return cases


def page_cases() -> list[tuple[str, bytes]]:
    cases = [(f"the page {k}", http(v)) for k, v in VALUES.items()]
    cases += [(f"a page holding {k}", http(b"[%s]" % v)) for k, v in VALUES.items()]
    return cases + [(f"a transfer with {n}={k}", http(b"[%s]" % with_member(n, v)))
                    for n in MEMBERS["transfer"] for k, v in VALUES.items()]


def framing_cases() -> list[tuple[str, bytes]]:
    ok = b'{"id": "x1"}'
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return [
        ("a status code in other digits", b"HTTP/1.1 \xb200 OK\r\nContent-Length: 2\r\n\r\n{}"),
        ("a status code of superscripts", b"HTTP/1.1 \xb2\xb3\xb9 OK\r\nContent-Length: 2\r\n\r\n{}"),
        ("a Content-Length with a sign", b"HTTP/1.1 200 OK\r\nContent-Length: +12\r\n\r\n" + ok),
        ("a Content-Length with an underscore", b"HTTP/1.1 200 OK\r\nContent-Length: 1_2\r\n\r\n" + ok),
        ("a Content-Length of 5000 digits", b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n"),
        ("two Content-Lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Length: 13\r\n\r\n" + ok),
        ("a chunk size with 0x", chunked + b"0xc\r\n" + ok + b"\r\n0\r\n\r\n"),
        ("a chunk size with a sign", chunked + b"+c\r\n" + ok + b"\r\n0\r\n\r\n"),
        ("a chunk size with an underscore", chunked + b"0_c\r\n" + ok + b"\r\n0\r\n\r\n"),
        ("a chunk size of 200 digits", chunked + b"1" * 200 + b"\r\n" + ok),
        ("a chunk not ended by CRLF", chunked + b"c\r\n" + ok + b"XX0\r\n\r\n"),
        ("a body over 16 MiB", b"HTTP/1.1 200 OK\r\nContent-Length: 16777217\r\n\r\n" + ok),
        ("a chunked body over 16 MiB", chunked + b"1000001\r\n" + ok),
        ("an answer cut short", b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + ok),
        ("not HTTP", b"SSH-2.0-OpenSSH_9.6\r\n\r\n"),
        ("a body that is not UTF-8", http(b'{"id": "\xff\xfe"}')),
        ("a body that is not JSON", http(b'{"id": "x1"')),
    ]


def endless_cases() -> list[tuple[str, bytes]]:
    """Answers that never end by themselves: the client has to stop reading (the server then holds
    the connection open, so waiting for more would last until the call's timeout)."""
    return [
        ("endless trailers", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"X-T: 1\r\n" * 10_000),
        ("an endless trailer line", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: " + b"x" * 100_000),
        ("endless interim answers", b"HTTP/1.1 100 Continue\r\n\r\n" * 4000),
    ]


def replier(current: list[bytes], then: str = "next") -> Callable[[Peer], None]:
    """A script answering every request on its connection with `current[0]`; after each answer it
    reads the `next` request, or it `close`s the connection, or it `hold`s it open and silent."""
    def script(p: Peer) -> None:
        while p.read_request() is not None:
            p.send(current[0])
            if then == "hold":
                p.hold(15)
            if then != "next":
                return
    return script


CALLS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "status": ("status", ()),
    "transfer": ("transfer", ("x1",)),
    "task": ("task", ("x1",)),
    "transfers": ("transfers", (10,)),
}


def sync_outcomes(server, call: str, cases: list[tuple[str, bytes]], timeout: float = 30.0,
                  then: str = "next") -> list[tuple[str, Optional[BaseException]]]:
    current = [b""]
    server.serve(default=replier(current, then))
    app = DrowseApp(app="py", socket=server.path, timeout=timeout)
    name, args = CALLS[call]
    out = []
    for case, raw in cases:
        current[0] = raw
        try:
            getattr(app, name)(*args)
            out.append((case, None))
        except Exception as e:  # noqa: BLE001 - which exception is what the test checks
            out.append((case, e))
    app.close()
    return out


def async_outcomes(server, call: str, cases: list[tuple[str, bytes]], timeout: float = 30.0,
                   then: str = "next") -> list[tuple[str, Optional[BaseException]]]:
    current = [b""]
    server.serve(default=replier(current, then))

    async def main() -> list[tuple[str, Optional[BaseException]]]:
        app = AsyncDrowseApp(app="py", socket=server.path, timeout=timeout)
        name, args = CALLS[call]
        out = []
        for case, raw in cases:
            current[0] = raw
            try:
                await getattr(app, name)(*args)
                out.append((case, None))
            except Exception as e:  # noqa: BLE001
                out.append((case, e))
        await app.aclose()
        return out

    return run(main(), timeout=120)


OUTCOMES = {"sync": sync_outcomes, "async": async_outcomes}


def not_drowse_errors(outcomes: list[tuple[str, Optional[BaseException]]]) -> list[str]:
    return [f"{case}: {type(e).__name__}: {str(e)[:100]}" for case, e in outcomes
            if e is not None and not isinstance(e, DrowseError)]


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("call", ["status", "transfer", "task"])
def test_any_answer_to_a_call_is_a_value_or_a_drowse_error(server, client, call):
    outcomes = OUTCOMES[client](server, call, member_cases(call))
    assert not_drowse_errors(outcomes) == []
    deep = dict(outcomes)["the whole answer 20000 deep"]
    assert isinstance(deep, DrowseProtocolError)
    deep_error = dict(outcomes)["an error answer holding 20000 deep"]
    assert isinstance(deep_error, DrowseError) and (deep_error.status, deep_error.code) == (500, "http_500")


@pytest.mark.parametrize("client", ["sync", "async"])
def test_any_transfer_page_is_a_list_of_transfers_or_a_drowse_error(server, client):
    assert not_drowse_errors(OUTCOMES[client](server, "transfers", page_cases())) == []


@pytest.mark.parametrize("client", ["sync", "async"])
def test_bad_framing_is_a_protocol_error(server, client):
    outcomes = OUTCOMES[client](server, "transfer", framing_cases(), then="close")
    assert [(case, type(e).__name__) for case, e in outcomes if not isinstance(e, DrowseProtocolError)] == []


@pytest.mark.parametrize("client", ["sync", "async"])
def test_an_answer_that_never_ends_is_a_protocol_error_not_a_wait(server, client):
    t0 = time.monotonic()
    outcomes = OUTCOMES[client](server, "transfer", endless_cases(), timeout=3.0, then="hold")
    assert [(case, type(e).__name__) for case, e in outcomes if not isinstance(e, DrowseProtocolError)] == []
    assert time.monotonic() - t0 < 3.0


def test_a_huge_time_remaining_leaves_the_local_timer_running(server, monkeypatch):
    died: list = []
    monkeypatch.setattr(threading, "excepthook", died.append)

    def api(p: Peer) -> None:
        while (r := p.read_request()) is not None:
            if r.target.endswith("/tasks"):
                p.send(http(b'{"id": "t1", "state": "open", "time_remaining": 1e308}'))
            else:
                p.send(http(b'{"id": "t1", "state": "ended"}'))

    server.serve(default=api)
    app = DrowseApp(app="py", socket=server.path)
    task = app.begin_background_task("sync")
    time.sleep(0.3)
    assert task.time_remaining == 1e308 and died == []
    app.end_background_task(task)
    app.close()


# ---- the event stream

def hostile_lines() -> list[bytes]:
    base = {"fetch": b'"id": "h", "deadline": 1.0', "transfers": b'"id": "h", "session": "s"',
            "task-expiring": b'"id": "h", "task": "t1"'}
    out = [DEEP + b"\n", b'{"event": %s}\n' % DEEP]
    members = ["id", "deadline", "reason", "payload", "session", "transfers", "task", "expires_at", "time_remaining"]
    for kind, rest in base.items():
        for name in members:
            for v in VALUES.values():
                out.append(b'{"event": "%s", %s, "%s": %s}\n' % (kind.encode(), rest, name.encode(), v))
                out.append(b'{"event": "%s", %s, "transfers": [%s]}\n' % (kind.encode(), rest, with_member(name, v)))
    return out


def hostile_stream(p: Peer) -> None:
    p.read_request()
    p.stream_head()
    for piece in [HELLO, *hostile_lines(), fetch("last")]:
        p.send(chunk(piece))
    p.hold()


def test_lines_the_stream_cannot_read_are_skipped_and_the_stream_goes_on(server):
    server.serve(hostile_stream)
    s = DrowseApp(app="py", socket=server.path).events()
    got: list = []
    error: list = []

    def read() -> None:
        try:
            for e in s:
                got.append(e)
                if e.id == "last":
                    return
        except BaseException as ex:  # noqa: BLE001
            error.append(ex)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    s.close()
    assert [f"{type(e).__name__}: {str(e)[:100]}" for e in error] == []
    assert got and got[-1].id == "last"
    assert server.connections == 1


def test_lines_the_async_stream_cannot_read_are_skipped_and_the_stream_goes_on(server):
    server.serve(hostile_stream)

    async def main() -> list:
        stream = AsyncDrowseApp(app="py", socket=server.path).events()
        got = []
        async for e in stream:
            got.append(e)
            if e.id == "last":
                break
        await stream.aclose()
        return got

    got = run(main(), timeout=30)
    assert got and got[-1].id == "last"
    assert server.connections == 1
