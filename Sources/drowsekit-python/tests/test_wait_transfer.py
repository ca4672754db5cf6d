"""wait_transfer's long polls against a scripted drowsed, blocking and asyncio: each request asks
``?wait=`` and the answer is held until the transfer ends; the wait asked never passes the
caller's timeout; a drowsed that ignores ``wait`` is asked at most every ``interval``; the read
timeout of a call covers the wait it asked for."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Optional
from urllib.parse import parse_qs, urlsplit

import pytest

from drowsekit import DrowseApp
from drowsekit.aio import AsyncDrowseApp
from scripted_server import Peer

TID = "t/9"
TARGET = "/v1/transfers/t%2F9"


def transfer(state: str) -> dict:
    return {"id": TID, "app": "py", "session": "s", "kind": "download", "state": state, "url": "http://127.0.0.1/9",
            "bytes_done": 10, "bytes_total": 10, "location": "/tmp/9"}


class Drowsed:
    """GET /v1/transfers/t%2F9: the transfer runs until ``done_at`` (monotonic), then is completed.
    With ``honour_wait`` an answer is held as drowsed holds it (until the end or ``wait`` seconds,
    but at most ``hold_cap``); without, it comes at once, as from a drowsed that ignores ``wait``.
    ``asks`` records (when the request came, the wait it asked, or None)."""

    def __init__(self, done_in: float, honour_wait: bool = True, hold_cap: float = math.inf) -> None:
        self.done_at = time.monotonic() + done_in
        self.honour_wait = honour_wait
        self.hold_cap = hold_cap
        self.asks: list[tuple[float, Optional[float]]] = []

    def __call__(self, p: Peer) -> None:
        while (r := p.read_request()) is not None:
            now = time.monotonic()
            url = urlsplit(r.target)
            assert url.path == TARGET, r.target
            waits = parse_qs(url.query).get("wait")
            wait = float(waits[0]) if waits else None
            self.asks.append((now, wait))
            if self.honour_wait and wait is not None:
                assert 0 <= wait <= 60, wait
                end = min(now + wait, self.done_at, now + self.hold_cap)
                if p.server.stopping.wait(max(0.0, end - now)):
                    return
            p.answer(200, transfer("completed" if time.monotonic() >= self.done_at - 0.001 else "running"))

    def waits(self) -> list[Optional[float]]:
        return [w for _, w in self.asks]


def wait_sync(server, timeout: Optional[float], interval: float = 0.2, app_timeout: float = 30.0):
    with DrowseApp(app="py", socket=server.path, timeout=app_timeout) as app:
        return app.wait_transfer(TID, timeout=timeout, interval=interval)


def wait_async(server, timeout: Optional[float], interval: float = 0.2, app_timeout: float = 30.0):
    async def main():
        async with AsyncDrowseApp(app="py", socket=server.path, timeout=app_timeout) as app:
            return await app.wait_transfer(TID, timeout=timeout, interval=interval)
    return asyncio.run(asyncio.wait_for(main(), 20))


WAITERS = {"sync": wait_sync, "async": wait_async}


@pytest.mark.parametrize("client", WAITERS)
@pytest.mark.parametrize("timeout", [None, 100.0])
def test_a_held_answer_ends_the_wait_in_one_request(server, client, timeout):
    drowsed = Drowsed(done_in=1.0)
    server.serve(default=drowsed)
    t0 = time.monotonic()
    t = WAITERS[client](server, timeout)
    took = time.monotonic() - t0
    assert t.state == "completed" and t.id == TID
    assert drowsed.waits() == [30.0]  # the old polling made ~5 requests without ?wait=
    assert 0.9 < took < 2.0


@pytest.mark.parametrize("client", WAITERS)
def test_the_wait_asked_never_passes_the_timeout(server, client):
    drowsed = Drowsed(done_in=math.inf)
    server.serve(default=drowsed)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        WAITERS[client](server, 1.5)
    took = time.monotonic() - t0
    assert 1.4 < took < 2.5
    first = drowsed.asks[0][0]
    for at, wait in drowsed.asks:
        assert wait is not None and wait <= 1.5 - (at - first) + 0.05, drowsed.asks
    assert drowsed.waits()[0] > 1.3
    assert len(drowsed.asks) <= 3, drowsed.asks


@pytest.mark.parametrize("client", WAITERS)
def test_a_drowsed_ignoring_wait_is_asked_at_most_every_interval(server, client):
    drowsed = Drowsed(done_in=1.0, honour_wait=False)
    server.serve(default=drowsed)
    t = WAITERS[client](server, 10.0, interval=0.2)
    assert t.state == "completed"
    times = [at for at, _ in drowsed.asks]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # Seen by the server: the client's spacing plus the jitter of each request's way there (up to
    # tens of ms on a busy machine); a client that did not wait would show gaps near 0.
    assert all(g >= 0.15 for g in gaps), gaps
    assert 2 <= len(times) <= 7, gaps
    assert all(w is not None for w in drowsed.waits())


@pytest.mark.parametrize("client", WAITERS)
def test_early_answers_despite_wait_are_not_asked_again_sooner_than_interval(server, client):
    drowsed = Drowsed(done_in=1.5, hold_cap=0.05)  # e.g. too many requests waiting: held 50 ms only
    server.serve(default=drowsed)
    t = WAITERS[client](server, 10.0, interval=0.3)
    assert t.state == "completed"
    times = [at for at, _ in drowsed.asks]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # Held 50 ms each: a client that asked again at once would show gaps near 0.05 s.
    assert all(g >= 0.24 for g in gaps), gaps
    assert len(times) <= 6, gaps


@pytest.mark.parametrize("client", WAITERS)
def test_a_call_waits_for_its_answer_beyond_the_wait_it_asked(server, client):
    drowsed = Drowsed(done_in=1.0)
    server.serve(default=drowsed)
    t = WAITERS[client](server, 10.0, app_timeout=0.4)  # held 1 s: longer than the app's timeout
    assert t.state == "completed"
    [wait] = drowsed.waits()
    assert wait is not None and 9.9 < wait <= 10.0  # the time left, in whole milliseconds
