"""Text a hostile peer wrote, quoted back in an exception: escaped and cut as the drowse tool
prints untrusted text (control characters as ``\\u{1B}``, ``\\n``, ...; at most 800 characters,
then ``…(N more bytes)``), for both clients."""

from __future__ import annotations

import json
from typing import Callable

import pytest

from drowsekit import DrowseApp, DrowseError, DrowseProtocolError
from drowsekit.aio import AsyncDrowseApp
from scripted_server import Peer
from test_aio import run
from test_hostile_answers import http, replier


def refusing(message: str, code: str = "no_background_time", status: int = 409) -> Callable[[Peer], None]:
    def script(p: Peer) -> None:
        while p.read_request() is not None:
            p.answer(status, {"error": {"code": code, "message": message}})
    return script


#: (drowsed's message, the message the error carries): escaped and cut as the drowse tool does.
MESSAGES = {
    "5 MB behind a terminal escape": ("\x1b[31m" + "A" * 5_000_000, "\\u{1B}[31m" + "A" * 790 + "…(4999210 more bytes)"),
    "every kind of control": ("a\nb\tc\r\u202e\u009b\u2028\u2029\u200e\u200f\u061c\u2066\x7f\x00\ud800 \\ ok",
                              "a\\nb\\tc\\r\\u{202E}\\u{9B}\\u{2028}\\u{2029}\\u{200E}\\u{200F}\\u{61C}\\u{2066}\\u{7F}"
                              "\\u{00}\\u{D800} \\ ok"),
    "escapes counted after escaping": ("\x07" * 1000, "\\u{07}" * 133 + "\\u" + f"…({6000 - 800} more bytes)"),
    "bytes counted in UTF-8": ("é" * 1000, "é" * 800 + "…(400 more bytes)"),
    "800 characters are not cut": ("x" * 800, "x" * 800),
}


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_message_from_drowsed_is_escaped_and_cut(server, name):
    sent, shown = MESSAGES[name]
    server.serve(default=refusing(sent))
    with DrowseApp(app="py", socket=server.path) as app, pytest.raises(DrowseError) as e:
        app.begin_background_task("sync")
    assert (e.value.status, e.value.code) == (409, "no_background_time")
    assert e.value.message == shown
    assert str(e.value) == f"drowsed: {shown} (HTTP 409, no_background_time)"


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_message_from_drowsed_is_escaped_and_cut_for_asyncio(server, name):
    sent, shown = MESSAGES[name]
    server.serve(default=refusing(sent))

    async def main() -> None:
        async with AsyncDrowseApp(app="py", socket=server.path) as app:
            await app.begin_background_task("sync")

    with pytest.raises(DrowseError) as e:
        run(main())
    assert e.value.message == shown


def test_an_error_code_from_drowsed_is_escaped_and_cut(server):
    server.serve(default=refusing("no", code="\x1b]0;owned\x07" + "c" * 1000))
    with DrowseApp(app="py", socket=server.path) as app, pytest.raises(DrowseError) as e:
        app.status()
    assert e.value.code == "\\u{1B}]0;owned\\u{07}" + "c" * 180 + "…(820 more bytes)"


def test_a_refused_stream_s_message_is_escaped_and_cut(server):
    server.serve(refusing("\x1b[2J" + "z" * 50_000, code="forbidden", status=403))
    with pytest.raises(DrowseError) as e:
        for _ in DrowseApp(app="py", socket=server.path).events():
            pass
    assert e.value.message == "\\u{1B}[2J" + "z" * 791 + f"…({50_000 - 791} more bytes)"


@pytest.mark.parametrize("raw, quoted", [
    (b"HTTP/1.1 2\x1b[2J0 OK\r\n\r\n", "HTTP/1.1 2\\u{1B}[2J0 OK"),
    (b"HTTP/1.1 200 OK\r\nX-\x9b" + b"h" * 1000 + b"\r\n\r\n", "X-\\u{9B}" + "h" * 192 + "…(808 more bytes)"),
], ids=["a status line", "a header line"])
def test_a_protocol_error_quotes_the_bytes_escaped_and_cut(server, raw, quoted):
    current = [raw]
    server.serve(default=replier(current))
    with DrowseApp(app="py", socket=server.path) as app, pytest.raises(DrowseProtocolError) as e:
        app.status()
    assert quoted in e.value.message
    assert "\x1b" not in e.value.message and "\x9b" not in e.value.message


def test_waiting_for_a_transfer_quotes_its_state_escaped_and_cut(server):
    current = [http(json.dumps({"id": "t9", "state": "\x1b[2J" + "r" * 100_000}).encode())]
    server.serve(default=replier(current))
    with DrowseApp(app="py", socket=server.path) as app, pytest.raises(TimeoutError) as e:
        app.wait_transfer("t9", timeout=0.05, interval=0.01)
    message = str(e.value)
    assert "\\u{1B}[2J" in message and "\x1b" not in message
    assert len(message) < 1000 and "more bytes)" in message
