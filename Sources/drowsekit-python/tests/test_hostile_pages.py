"""Walking through transfer pages with a hostile peer: pages that go round end the walk with a
DrowseProtocolError instead of never ending, for both clients."""

from __future__ import annotations

from typing import Callable

import pytest

from drowsekit import DrowseApp, DrowseProtocolError
from drowsekit.aio import AsyncDrowseApp
from scripted_server import Peer
from test_aio import run


def transfer(i: int) -> dict:
    return {"id": f"{i:016x}", "app": "py", "session": "s", "kind": "download", "state": "completed",
            "url": f"http://127.0.0.1/{i}"}


#: Pages by the `after` asked with (None: the first): (pages, the ids handed out before the error).
CYCLES = {
    "pages that go round": ({None: [1, 2], 2: [3, 4], 4: [1, 2]}, [1, 2, 3, 4]),
    "the same page again": ({None: [1, 2], 2: [1, 2]}, [1, 2]),
    "a page ending before its cursor": ({None: [5, 6], 6: [7, 8], 8: [9, 6]}, [5, 6, 7, 8]),
}


def pager(pages: dict) -> Callable[[Peer], None]:
    def script(p: Peer) -> None:
        while (r := p.read_request()) is not None:
            after = int(r.target.split("after=")[1], 16) if "after=" in r.target else None
            p.answer(200, [transfer(i) for i in pages[after]])
    return script


def page_requests(server) -> int:
    return len([r for r in server.requests if r.target.startswith("/v1/transfers?")])


@pytest.mark.parametrize("name", list(CYCLES))
def test_a_walk_through_pages_that_go_round_ends_with_an_error(server, name):
    pages, before = CYCLES[name]
    server.serve(default=pager(pages))
    got: list = []
    with DrowseApp(app="py", socket=server.path) as app, pytest.raises(DrowseProtocolError) as e:
        for t in app.all_transfers(page_size=2):
            got.append(int(t.id, 16))
            assert len(got) < 100, f"the walk went round: {got[:12]}..."
    assert got == before
    assert page_requests(server) == len(pages)
    assert "page" in e.value.message


@pytest.mark.parametrize("name", list(CYCLES))
def test_an_async_walk_through_pages_that_go_round_ends_with_an_error(server, name):
    pages, before = CYCLES[name]
    server.serve(default=pager(pages))
    got: list = []

    async def main() -> None:
        async with AsyncDrowseApp(app="py", socket=server.path) as app:
            async for t in app.all_transfers(page_size=2):
                got.append(int(t.id, 16))
                assert len(got) < 100, f"the walk went round: {got[:12]}..."

    with pytest.raises(DrowseProtocolError):
        run(main())
    assert got == before
    assert page_requests(server) == len(pages)


def test_a_walk_with_a_short_last_page_ends_without_error(server):
    server.serve(default=pager({None: [1, 2], 2: [3, 4], 4: [5]}))
    with DrowseApp(app="py", socket=server.path) as app:
        assert [int(t.id, 16) for t in app.all_transfers(page_size=2)] == [1, 2, 3, 4, 5]
