"""The protocol without I/O: the response parser and the event stream decoder fed every split of
the same bytes give the same answer, and a cut answer is never taken for a whole one."""

from __future__ import annotations

import json
import random

import pytest

from drowsekit import DrowseError, DrowseProtocolError
from drowsekit.models import Transfer
from drowsekit.protocol import (EventStreamDecoder, LineSplitter, ResponseParser, Routes, TransferWait, answer_json,
                                answer_timeout, request_bytes, seconds_text)
from scripted_server import chunk, line

STREAM = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
          + chunk(line({"event": "hello", "app": "py", "state": "background"}) + b'{"event":"fetch","id":"e1",')
          + chunk(b'"deadline":1764110430.0,"reason":"scheduled"}\n{"event":"notif')
          + chunk(b'ication","id":"e2","deadline":1.5,"payload":{"task":3}}\r\n')
          + chunk(line({"event": "task-expiring", "id": "e3", "task": "t1", "expires_at": 9.0, "time_remaining": 4.5})
                  + line({"event": "someday", "id": "e4"}) + b"not json\n")
          + b"0\r\n\r\n")


def decode(pieces: list[bytes]) -> list:
    expiring: list[str] = []
    d = EventStreamDecoder(on_expiring=expiring.append)
    out = []
    for p in pieces:
        out += d.feed(p)
    assert d.http.complete
    assert (d.status.state, d.status.connections, expiring) == ("background", 1, ["t1"])
    return out


def test_every_split_of_a_chunked_stream_gives_the_same_events():
    whole = decode([STREAM])
    events = whole
    assert [(e.kind, e.id) for e in events] == [("fetch", "e1"), ("notification", "e2"), ("task-expiring", "e3")]
    assert events[0].deadline == 1764110430.0 and events[0].reason == "scheduled"
    assert events[1].payload == {"task": 3}
    assert events[2].task == "t1" and events[2].time_remaining == 4.5 and not events[2].needs_completion
    for i in range(1, len(STREAM)):
        assert decode([STREAM[:i], STREAM[i:]]) == whole, f"split at {i}"
    assert decode([STREAM[i:i + 1] for i in range(len(STREAM))]) == whole


def test_a_cut_stream_never_gives_its_partial_line():
    cut = STREAM.index(b'"deadline":1.5')
    d = EventStreamDecoder()
    assert [e.id for e in d.feed(STREAM[:cut])] == ["e1"]
    with pytest.raises(DrowseProtocolError):
        d.http.eof()


@pytest.mark.parametrize("answer, body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 123}\n", b'{"a": 123}\n'),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n{\"a\r\n8\r\n\": 123}\n\r\n0\r\nX-Trailer: 1\r\n\r\n",
     b'{"a": 123}\n'),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", b""),
])
def test_bodies_by_length_and_chunked_in_any_split(answer, body):
    for i in range(len(answer) + 1):
        p = ResponseParser("POST")
        got = p.feed(answer[:i]) + p.feed(answer[i:])
        assert p.complete and got == body and p.keep_alive, i


def test_keep_alive_follows_the_connection_header_and_the_version():
    def parsed(raw: bytes) -> ResponseParser:
        p = ResponseParser()
        p.feed(raw)
        return p
    assert not parsed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").keep_alive
    assert not parsed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive
    assert parsed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").keep_alive
    # A body that runs to the end of the connection: complete only at EOF, never reused.
    p = parsed(b"HTTP/1.1 200 OK\r\n\r\n{}")
    assert not p.complete
    p.eof()
    assert p.complete and not p.keep_alive


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}",
    b"",
])
def test_an_answer_cut_short_is_an_error(raw):
    p = ResponseParser()
    p.feed(raw)
    with pytest.raises(DrowseProtocolError):
        p.eof()


@pytest.mark.parametrize("raw", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"])
def test_bytes_that_are_not_an_answer_are_a_protocol_error(raw):
    with pytest.raises(DrowseProtocolError) as e:
        ResponseParser().feed(raw)
    assert e.value.code == "protocol" and e.value.status == 0


def test_lines_longer_than_the_limit_are_dropped_whole():
    s = LineSplitter(max_line=8)
    assert s.feed(b"short\n0123456789abcdef") == [b"short"]
    assert s.feed(b"ghij\nnext\r\n") == [b"next"]


def test_an_error_answer_keeps_the_code_and_status():
    e = DrowseError.from_answer(409, json.dumps({"error": {"code": "no_background_time", "message": "used up"}}).encode())
    assert (e.status, e.code, e.message) == (409, "no_background_time", "used up")
    assert "HTTP 409" in str(e)
    plain = DrowseError.from_answer(502, b"<html>bad gateway</html>")
    assert (plain.status, plain.code) == (502, "http_502")


def test_requests_and_routes():
    r = Routes("my app")
    method, target, body = r.complete("e/1", "no-data")
    assert (method, target, body) == ("POST", "/v1/apps/my%20app/events/e%2F1/complete", {"result": "no-data"})
    with pytest.raises(ValueError):
        r.complete("e1", "maybe")
    assert r.transfers(50, "00ff")[1] == "/v1/transfers?app=my%20app&limit=50&after=00ff"
    assert r.download("http://x/y", None, None, "s", {"discretionary": True})[2] == \
        {"kind": "download", "url": "http://x/y", "app": "my app", "session": "s", "discretionary": True}
    with pytest.raises(DrowseError) as e:
        Routes("").status()
    assert e.value.code == "no_app"
    raw = request_bytes("POST", "/v1/x", {"a": 1})
    assert raw.startswith(b"POST /v1/x HTTP/1.1\r\n") and raw.endswith(b'\r\nContent-Length: 8\r\n\r\n{"a": 1}')
    assert b"Content-Length: 0" in request_bytes("POST", "/v1/x")


def test_a_transfer_route_asks_a_wait_in_seconds_rounded_down():
    r = Routes("py")
    assert r.transfer("t/9") == ("GET", "/v1/transfers/t%2F9", None)
    assert r.transfer("t/9", 30.0)[1] == "/v1/transfers/t%2F9?wait=30"
    assert [seconds_text(s) for s in (0, 1.25, 0.29, 0.0004, 9.9999, -3, float("nan"))] == \
        ["0", "1.25", "0.29", "0", "9.999", "0", "0"]
    assert answer_timeout(30.0, 30.0) == 60.0 and answer_timeout(None, 30.0) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(state: str = "running") -> Transfer:
    return Transfer.from_json({"id": "t1", "state": state})


def test_transfer_wait_asks_at_most_30_s_and_the_time_left():
    clock = Clock()
    w = TransferWait(None, 0.2, clock)
    assert w.ask() == 30.0
    clock.now += 30
    assert w.delay(running()) == 0.0  # held the whole wait: ask again at once
    assert w.delay(running("completed")) is None and w.delay(running("cancelled")) is None

    w = TransferWait(45.0, 0.2, clock)
    assert w.ask() == 30.0
    clock.now += 30
    assert w.delay(running()) == 0.0
    assert w.ask() == 15.0
    clock.now += 14.9996
    assert w.delay(running()) == 0.0
    assert w.ask() == 0.0  # 0.4 ms left: rounded down, never past the deadline
    clock.now += 0.001
    with pytest.raises(TimeoutError):
        w.delay(running())

    w = TransferWait(-1.0, 0.2, clock)
    assert w.ask() == 0.0


def test_transfer_wait_spaces_early_answers_by_the_interval():
    clock = Clock()
    w = TransferWait(None, 0.2, clock)
    delays = []
    for _ in range(12):
        w.ask()
        clock.now += 0.05  # answered at once, without the end
        delays.append(round(w.delay(running()), 6))
        clock.now += delays[-1]
    assert delays[:3] == [0.15, 0.25, 0.4] and max(delays) == pytest.approx(1.95)
    w = TransferWait(0.3, 0.5, clock)
    w.ask()
    clock.now += 0.05
    assert w.delay(running()) == pytest.approx(0.25)  # the interval, up to the deadline only
    w = TransferWait(None, 5.0, clock)  # an interval over 2 s is kept, not cut
    w.ask()
    assert w.delay(running()) == 5.0
    w.ask()
    assert w.delay(running()) == 5.0


ANSWERS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 123}\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n{\"a\r\n8\r\n\": 123}\n\r\n0\r\nX-Trailer: 1\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.0 200 OK\r\n\r\n[1, 2]",
    STREAM,
]
#: What a mutation puts in: digits of other scripts, signs, prefixes, separators, controls.
PIECES = [b"\xb2", b"\xb9", b"-", b"+", b"0x", b"_", b" ", b"\r\n", b"\r\n\r\n", b":", b";", b"\x00", b"\x1b", b"\xff",
          b"9" * 30, b"f" * 30, b"[" * 3000, b"{\"event\": " * 2000, b"\"", b"1e999", b"NaN"]


def mutated(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(data) + 1)
        op = rng.random()
        if op < 0.5:
            data[i:i] = rng.choice(PIECES)
        elif op < 0.8:
            del data[i:i + rng.randint(1, 8)]
        else:
            data[i:i + 1] = bytes([rng.randrange(256)])
    return bytes(data)


def test_any_bytes_are_an_answer_or_a_protocol_error():
    rng = random.Random(7)
    for n in range(4000):
        raw = mutated(rng, rng.choice(ANSWERS))
        cut = rng.randrange(len(raw) + 1)
        for parser in (ResponseParser("GET"), EventStreamDecoder()):
            try:
                body = parser.feed(raw[:cut]) + parser.feed(raw[cut:])
                http = parser.http if isinstance(parser, EventStreamDecoder) else parser
                http.eof()
                if isinstance(body, bytes) and http.status is not None:
                    answer_json(http.status, body)
            except DrowseError:
                pass
            except Exception as e:  # noqa: BLE001 - the test is which exceptions come out
                pytest.fail(f"{type(e).__name__}: {e} for {raw[:200]!r} split at {cut} (case {n})")
