"""The blocking DrowseApp against a scripted server: the event stream across odd chunk
boundaries, cut connections and refusals; calls over kept-alive and closed connections, error
answers as exceptions; background tasks' expiration; transfer pages."""

from __future__ import annotations

import threading
import time

import pytest

from drowsekit import DrowseApp, DrowseConnectionError, DrowseError, Result
from scripted_server import Peer, chunk, line

HELLO = line({"event": "hello", "app": "py", "state": "background"})


def fetch(eid: str) -> bytes:
    return line({"event": "fetch", "id": eid, "deadline": 1764110430.0, "reason": "manual"})


def stream_of(*pieces: bytes, hold: bool = True):
    """A script: an event stream whose chunked body is `pieces` sent apart; then it is held open,
    or (hold=False) the connection is closed wherever the pieces ended."""
    def script(p: Peer):
        p.read_request()
        p.stream_head()
        for piece in pieces:
            p.send(piece, pause=0.05)
        if hold:
            p.hold()
    return script


def take(stream, n: int, timeout: float = 10.0) -> list:
    """The first n events of the stream, read on a thread (a stuck stream fails, not hangs)."""
    got: list = []
    error: list = []

    def run():
        try:
            for e in stream:
                got.append(e)
                if len(got) == n:
                    return
        except BaseException as ex:
            error.append(ex)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    stream.close()
    t.join(5)
    if error:
        raise error[0]
    assert len(got) == n, f"got {len(got)} of {n} events: {got}"
    return got


def test_events_split_mid_line_across_chunks_and_reads(server):
    def stream(p: Peer):
        p.read_request()
        p.stream_head()
        data = HELLO + fetch("e1") + fetch("e2") + line({"event": "notification", "id": "e3", "deadline": 2.0,
                                                         "payload": {"aps": {"content-available": 1}, "n": 42}})
        # Chunks of 5 bytes, each sent apart, and the chunk framing itself sent in 3-byte pieces.
        framed = b"".join(chunk(data[i:i + 5]) for i in range(0, len(data), 5))
        p.send_pieces(framed, 3, pause=0.001)
        p.hold()

    server.serve(stream)
    app = DrowseApp(app="py", socket=server.path)
    s = app.events()
    events = take(s, 3)
    assert [(e.kind, e.id) for e in events] == [("fetch", "e1"), ("fetch", "e2"), ("notification", "e3")]
    assert events[2].payload["n"] == 42 and events[0].deadline == 1764110430.0
    assert s.status.state == "background"
    assert server.requests[0].target == "/v1/apps/py/events"
    assert server.requests[0].headers["accept"] == "application/x-ndjson"


def test_a_stream_cut_mid_line_reconnects_and_drops_the_partial_line(server):
    server.serve(
        # A whole JSON object, but its line has no LF yet when the connection ends.
        stream_of(chunk(HELLO + fetch("e1") + fetch("partial-1")[:-1]), hold=False),
        # The connection ends inside a chunk (10 bytes announced) and inside a line.
        stream_of(chunk(HELLO) + b'a\r\n{"event":"f', hold=False),
        stream_of(chunk(HELLO + fetch("e2"))))
    s = DrowseApp(app="py", socket=server.path).events()
    assert [e.id for e in take(s, 2)] == ["e1", "e2"]
    assert server.connections == 3 and s.status.connections == 3


def test_a_stream_ended_cleanly_or_answered_5xx_is_retried(server):
    def unavailable(p: Peer):
        p.read_request()
        p.answer(503, {"error": {"code": "busy", "message": "too many"}}, headers={"Connection": "close"})

    # The first stream ends cleanly (a newer stream replaced it), the second is refused with a 503.
    server.serve(stream_of(chunk(HELLO + fetch("e1")) + b"0\r\n\r\n", hold=False), unavailable,
                 stream_of(chunk(HELLO + fetch("e2"))))
    t0 = time.monotonic()
    s = DrowseApp(app="py", socket=server.path).events()
    assert [e.id for e in take(s, 2)] == ["e1", "e2"]
    assert server.connections == 3
    assert time.monotonic() - t0 < 3  # backoff from 0.1 s, not seconds


def test_a_refused_stream_raises_with_the_code_and_is_not_retried(server):
    def refused(p: Peer):
        p.read_request()
        p.answer(404, {"error": {"code": "not_found", "message": "no app 'py'"}})

    server.serve(refused)
    with pytest.raises(DrowseError) as e:
        for _ in DrowseApp(app="py", socket=server.path).events():
            pass
    assert (e.value.status, e.value.code, e.value.message) == (404, "not_found", "no app 'py'")
    time.sleep(0.3)
    assert server.connections == 1


def test_the_stream_waits_for_drowsed_to_come_back(server, tmp_path):
    # No socket at first (drowsed restarting): the stream keeps trying, then reads.
    app = DrowseApp(app="py", socket=str(tmp_path / "later.sock"))
    s = app.events()
    got: list = []
    t = threading.Thread(target=lambda: got.extend([next(iter(s))]), daemon=True)
    t.start()
    time.sleep(0.5)
    assert not got

    server.serve(stream_of(chunk(HELLO + fetch("late"))))
    (tmp_path / "later.sock").symlink_to(server.path)
    t.join(10)
    s.close()
    assert [e.id for e in got] == ["late"]


def keep_alive(*answers):
    """A script answering several requests on one connection, in order."""
    def script(p: Peer):
        for status, body, kw in answers:
            if p.read_request() is None:
                return
            p.answer(status, body, **kw)
        p.hold(5)
    return script


def test_calls_reuse_a_kept_alive_connection_with_either_body_framing(server):
    server.serve(keep_alive((200, {"id": "e1", "recorded": True}, {}),
                            (200, {"id": "e2", "recorded": True}, {"chunked": True}),
                            (200, {"id": "py", "state": "suspended", "history": [{"event": "fetch", "result": "no-data"}]},
                             {"chunked": True})))
    app = DrowseApp(app="py", socket=server.path)
    app.complete("e1", Result.NEW_DATA)
    app.complete("e2", "failed")
    st = app.status()
    assert st.state == "suspended" and st.history[0]["result"] == "no-data"
    assert server.connections == 1
    assert [r.json() for r in server.requests[:2]] == [{"result": "new-data"}, {"result": "failed"}]
    assert [r.target for r in server.requests] == ["/v1/apps/py/events/e1/complete", "/v1/apps/py/events/e2/complete",
                                                   "/v1/apps/py"]


def test_connection_close_and_a_dropped_idle_connection_mean_a_new_connection(server):
    def then_drop(p: Peer):
        p.read_request()
        p.answer(200, {"id": "e2", "recorded": True})
        # The server closes the idle connection (no Connection: close said): the next call
        # meets EOF before any byte and goes again on a fresh one.

    # After "Connection: close" the server keeps the connection but answers nothing more: a
    # client that sent on it would wait out its timeout.
    server.serve(keep_alive((200, {"id": "e1", "recorded": True}, {"headers": {"Connection": "close"}})),
                 then_drop, keep_alive((200, {"id": "e3", "recorded": True}, {})))
    app = DrowseApp(app="py", socket=server.path, timeout=2)
    app.complete("e1", "new-data")
    app.complete("e2", "new-data")
    time.sleep(0.2)
    app.complete("e3", "new-data")
    assert server.connections == 3
    assert [r.connection for r in server.requests] == [1, 2, 3]


def test_a_close_delimited_body_is_read_to_the_end(server):
    def old_style(p: Peer):
        p.read_request()
        p.send(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"id": "e1", "recorded": true}')

    server.serve(old_style, keep_alive((200, {"id": "e2"}, {})))
    app = DrowseApp(app="py", socket=server.path)
    app.complete("e1", "no-data")
    app.complete("e2", "no-data")
    assert server.connections == 2


def test_4xx_and_5xx_answers_raise_with_code_and_status(server):
    server.serve(keep_alive((409, {"error": {"code": "no_background_time", "message": "used up"}}, {}),
                            (500, {"error": {"code": "internal", "message": "disk full"}}, {"chunked": True}),
                            (502, None, {"raw": b"<html>proxy</html>"})))
    app = DrowseApp(app="py", socket=server.path)
    with pytest.raises(DrowseError) as e:
        app.begin_background_task("sync")
    assert (e.value.status, e.value.code, e.value.message) == (409, "no_background_time", "used up")
    with pytest.raises(DrowseError) as e:
        app.transfer("00000000000000ff")
    assert (e.value.status, e.value.code) == (500, "internal")
    with pytest.raises(DrowseError) as e:
        app.status()
    assert (e.value.status, e.value.code) == (502, "http_502")
    assert server.connections == 1


def test_a_connection_cut_mid_answer_is_an_error_not_a_short_answer(server):
    def cut(p: Peer):
        p.read_request()
        p.send(b'HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n{"id": "t1"')

    server.serve(cut)
    with pytest.raises(DrowseError) as e:
        DrowseApp(app="py", socket=server.path).task("t1")
    assert e.value.code == "protocol"


def test_no_socket_is_a_connect_error(tmp_path):
    with pytest.raises(DrowseConnectionError) as e:
        DrowseApp(app="py", socket=str(tmp_path / "none.sock")).status()
    assert e.value.code == "connect" and e.value.status == 0


def test_socket_and_app_from_the_environment(monkeypatch, server):
    monkeypatch.setenv("DROWSE_SOCKET", server.path)
    monkeypatch.setenv("DROWSE_APP", "envapp")
    server.serve(keep_alive((200, {"id": "envapp", "state": "background"}, {})))
    app = DrowseApp()
    assert (app.app, app.socket) == ("envapp", server.path)
    assert app.status().id == "envapp"
    assert server.requests[0].target == "/v1/apps/envapp"


def task_server(time_remaining: float, warn: bool, warn_after_query: bool = False):
    """drowsed's task routes; with `warn`, the stream sends task-expiring for t1 when it is begun
    (with `warn_after_query`, once its time remaining has been asked)."""
    begun = threading.Event()
    queried = threading.Event()

    def api(p: Peer):
        while (r := p.read_request()) is not None:
            if r.method == "POST" and r.target.endswith("/tasks"):
                p.answer(200, {"id": "t1", "app": "py", "name": "sync", "state": "open", "expires_at": time.time() + 4,
                               "time_remaining": time_remaining})
                begun.set()
            elif r.target.endswith("/tasks/t1/end"):
                p.answer(200, {"id": "t1", "app": "py", "name": "sync", "state": "ended"})
            elif r.target.endswith("/tasks/t1"):
                p.answer(200, {"id": "t1", "app": "py", "state": "open", "time_remaining": 2.5})
                queried.set()
            else:
                p.answer(404, {"error": {"code": "not_found", "message": r.target}})

    def stream(p: Peer):
        p.read_request()
        p.stream_head()
        p.send(chunk(HELLO))
        if warn and (queried if warn_after_query else begun).wait(10):
            p.send(chunk(line({"event": "task-expiring", "id": "e9", "task": "t1", "time_remaining": 1.9})))
        p.hold()

    return api, stream


def test_task_expiring_on_the_stream_runs_the_callback_then_the_library_ends_the_task(server):
    api, stream = task_server(time_remaining=30, warn=True, warn_after_query=True)
    expired = threading.Event()
    app = DrowseApp(app="py", socket=server.path)
    server.serve(stream, default=api)
    s = app.events()
    got: list = []
    reader = threading.Thread(target=lambda: got.extend([next(iter(s))]), daemon=True)
    reader.start()
    time.sleep(0.2)
    task = app.begin_background_task("sync", on_expire=expired.set)
    assert task.id == "t1" and task.open and task.time_remaining == 30
    assert app.background_time_remaining() == 2.5
    reader.join(10)
    assert got and got[0].kind == "task-expiring" and got[0].task == "t1"
    assert expired.wait(5)
    ends = lambda: [r for r in server.requests if r.target == "/v1/apps/py/tasks/t1/end"]  # noqa: E731
    deadline = time.monotonic() + 5
    while not ends() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(ends()) == 1
    app.end_background_task(task)  # drowsed is asked again; the task is ended either way
    s.close()
    assert app.background_time_remaining() == 0.0


def test_without_a_stream_the_local_timer_runs_the_callback_before_the_end(server):
    api, _ = task_server(time_remaining=1.4, warn=False)
    server.serve(default=api)
    app = DrowseApp(app="py", socket=server.path, expiry_margin=1.0)
    expired = threading.Event()
    t0 = time.monotonic()
    app.begin_background_task("sync", on_expire=lambda: (expired.set(), app.end_background_task("t1")))
    assert expired.wait(5)
    took = time.monotonic() - t0
    assert 0.3 <= took < 1.4, took
    time.sleep(0.2)
    assert len([r for r in server.requests if r.target.endswith("/tasks/t1/end")]) == 1  # the callback's own end only


def test_a_task_ended_in_time_never_runs_its_callback(server):
    api, _ = task_server(time_remaining=1.2, warn=False)
    server.serve(default=api)
    app = DrowseApp(app="py", socket=server.path, expiry_margin=1.0)
    expired = threading.Event()
    with app.background_task("sync", on_expire=expired.set):
        pass
    assert not expired.wait(0.6)


def test_transfers_pages_and_waiting_for_one(server):
    def t(i: int, state: str = "completed") -> dict:
        return {"id": f"{i:016x}", "app": "py", "session": "s", "kind": "download", "state": state,
                "url": f"http://127.0.0.1/{i}", "bytes_done": 10, "bytes_total": 10, "location": f"/tmp/{i}"}

    def api(p: Peer):
        polls = 0
        while (r := p.read_request()) is not None:
            if r.target.startswith("/v1/transfers?"):
                after = int(r.target.split("after=")[1], 16) if "after=" in r.target else 0
                p.answer(200, [t(i) for i in range(after + 1, min(after + 2, 5) + 1)], chunked=True)
            elif r.method == "POST" and r.target == "/v1/transfers":
                p.answer(200, t(9, "waiting"))
            elif r.target.startswith(f"/v1/transfers/{9:016x}?wait="):  # answered at once: an older drowsed
                polls += 1
                p.answer(200, t(9, "running" if polls < 3 else "completed"))

    server.serve(default=api)
    app = DrowseApp(app="py", socket=server.path)
    assert [x.id for x in app.transfers(limit=2)] == [f"{1:016x}", f"{2:016x}"]
    assert [int(x.id, 16) for x in app.all_transfers(page_size=2)] == [1, 2, 3, 4, 5]
    targets = [r.target for r in server.requests]
    assert targets[1:4] == ["/v1/transfers?app=py&limit=2", f"/v1/transfers?app=py&limit=2&after={2:016x}",
                            f"/v1/transfers?app=py&limit=2&after={4:016x}"]
    new = app.download("http://127.0.0.1/9", to="/tmp/nine", session="s")
    assert new.state == "waiting" and not new.finished
    assert server.requests[-1].json() == {"kind": "download", "url": "http://127.0.0.1/9", "app": "py", "session": "s",
                                          "to": "/tmp/nine"}
    done = app.wait_transfer(new.id, timeout=10, interval=0.01)
    assert done.state == "completed" and done.location == "/tmp/9" and done.bytes_total == 10
