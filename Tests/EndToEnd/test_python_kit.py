"""DrowseKit for Python (Sources/drowsekit-python) against a real drowsed: the example resident
app in Python (deploy/apps/python-resident, started by its run.sh as run-local.sh starts it)
gets its events and completes them with its own result, stops its background task when warned,
queues a download whose transfers event reaches it, keeps its stream across a kill -9 and
restart of drowsed, and is frozen while suspended and thawed by a delivery. The test process
also uses the library's blocking interface, as any process of the app's user may."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from drowse_e2e import REPO, cgroup2_mount, cgroup_unusable, notify_topic, wait_until

RUN_SH = REPO / "deploy" / "apps" / "python-resident" / "run.sh"
sys.path.insert(0, str(REPO / "Sources" / "drowsekit-python"))
from drowsekit import DrowseApp  # noqa: E402

MOUNT = cgroup2_mount()
NO_CGROUP = cgroup_unusable()
APP = "py"


def add_example(d, always_active: bool = False) -> Path:
    """The example as an app of d, run by its run.sh with out/py as its output folder."""
    out = d.out_dir(APP)
    process = {"command": [str(RUN_SH), str(out)], "always_active": always_active}
    d.add_app(APP, raw=f'id = "{APP}"\n\n[process]\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in process.items()))
    return out


def start_suspended(d, **lifecycle: str) -> Path:
    """Starts drowsed with the example (suspended after 1 s idle) and waits until it is suspended."""
    d.set_lifecycle(suspend_after="1s", **lifecycle)
    out = add_example(d)
    d.start()
    wait_state(d, "suspended")
    return out


def pending_signals(pid: int) -> int:
    """The signals sent to the process (ShdPnd) or its main thread (SigPnd) and not yet taken."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)


def lines(p: Path) -> list[str]:
    return p.read_text().splitlines() if p.exists() else []


def events(out: Path, kind: str) -> list[str]:
    return [l for l in lines(out / "events.log") if l.startswith(kind + " ")]


def pid_of(out: Path) -> int:
    return int(wait_until(lambda: lines(out / "starts"), 20, what="the example to start")[-1])


def status_file(out: Path, pid: int, after: float, timeout: float) -> dict:
    """Asks the example for status.json (SIGUSR1) and waits for one written after `after` and
    after this request: an answer to an earlier request, written late, is not taken for it."""
    after = max(after, time.time())
    os.kill(pid, signal.SIGUSR1)

    def fresh():
        p = out / "status.json"
        if not p.exists():
            return None
        s = json.loads(p.read_text())
        return s if s["written_at"] > after else None
    return wait_until(fresh, timeout, what="status.json after SIGUSR1")


def wait_state(d, want: str, timeout: float = 20) -> dict:
    return wait_until(lambda: (lambda a: a if a["state"] == want else None)(d.app(APP)), timeout, what=f"{APP} to be {want}")


def cgroup_frozen(d) -> int:
    text = (MOUNT / d.cgroup / "apps" / APP / "cgroup.events").read_text()
    return dict(line.split() for line in text.splitlines())["frozen"] == "1"


def test_events_are_completed_with_the_apps_own_result(broker, make_drowse):
    d = make_drowse(broker=broker)
    out = start_suspended(d)
    (out / "fetch-result").write_text("no-data\n")
    assert d.json("fetch", APP, timeout=30)["result"] == "no-data"
    (out / "fetch-result").unlink()
    assert d.json("fetch", APP, timeout=30)["result"] == "new-data"
    assert (out / "last-fetch").exists() and len(events(out, "fetch")) == 2
    broker.wait_subscribed(notify_topic(APP))
    d.push(APP, "--id", "n-1", "-d", "content-id=42")
    note = wait_until(lambda: [h for h in d.app(APP)["history"] if h["event"] == "notification"], 20,
                      what="the notification's run")[0]
    assert note["result"] == "new-data" and note["ending"] == "completed: new-data", note
    fetches = [h for h in d.app(APP)["history"] if h["event"] == "fetch"]
    assert [h["result"] for h in fetches] == ["new-data", "no-data"], fetches  # newest first
    assert json.loads(events(out, "notification")[0].split(" ", 2)[2])["content-id"] == 42
    # The blocking interface, from another process of the app's user: the same history.
    with DrowseApp(app=APP, socket=str(d.socket)) as app:
        st = app.status()
    assert st.resident and [h["result"] for h in st.history if h["event"] == "fetch"] == ["new-data", "no-data"]


def test_a_background_task_expires_and_its_callback_stops_the_work(broker, make_drowse):
    d = make_drowse(broker=broker)
    out = start_suspended(d, background_task_time="4s", task_expiry_warning="2s")
    broker.wait_subscribed(notify_topic(APP))
    d.push(APP, "--id", "long", "-d", "task=10")  # 10 s of work in a 4 s allowance
    expired = wait_until(lambda: [l for l in lines(out / "tasks.log") if " expired " in l], 20,
                         what="the callback to stop the work")
    took = float(expired[0].split()[-1])
    assert 1.5 <= took <= 3.2, expired
    task = expired[0].split()[2]
    assert any(json.loads(l.split(" ", 2)[2]) == {"task": task} for l in events(out, "task-expiring"))
    assert not any(" done " in l for l in lines(out / "tasks.log"))
    # Ended by the app before the allowance ran out: it rests (suspended after the grace), and no
    # overrun is recorded. That none comes later, when the allowance would have run out, is the
    # lifecycle's time rule, checked on a manual clock (Tests/DrowseAgentTests/
    # AgentLifecycleTimingTests.swift).
    wait_state(d, "suspended")
    history = d.app(APP)["history"]
    assert not any(h["trigger"] == "task-overrun" for h in history), history
    assert [h["result"] for h in history if h["event"] == "notification"] == ["new-data"]


def test_a_download_finishes_and_its_transfers_event_arrives(broker, nginx, make_drowse):
    url, digest, _ = nginx.add_file("py.bin", 300_000)
    d = make_drowse(broker=broker)
    out = start_suspended(d)
    broker.wait_subscribed(notify_topic(APP))
    d.push(APP, "--id", "dl", "-d", f"url={url}", "-d", f"sha256={digest}")
    queued = wait_until(lambda: [l for l in lines(out / "transfers.log") if l.startswith("queued ")], 20,
                        what="the app to queue the download")
    tid = queued[0].split()[1]
    ev = wait_until(lambda: events(out, "transfers"), 30, what="the transfers event")
    assert [t["id"] for t in json.loads(ev[0].split(" ", 2)[2])] == [tid]
    assert f"{tid} completed {digest}" in lines(out / "transfers.log")
    assert hashlib.sha256((out / "downloads" / tid).read_bytes()).hexdigest() == digest
    runs = wait_until(lambda: [h for h in d.app(APP)["history"] if h["event"] == "transfers"], 15, what="the run recorded")
    assert runs[0]["result"] == "new-data" and runs[0]["ending"] == "completed: new-data"
    # The blocking interface sees the same transfer, in its session, finished.
    with DrowseApp(app=APP, socket=str(d.socket)) as app:
        done = app.wait_transfer(tid, timeout=10)
        listed = list(app.all_transfers(page_size=1))
    assert done.state == "completed" and done.session == "python" and done.bytes_done == 300_000
    assert [t.id for t in listed] == [tid]


@pytest.mark.skipif(NO_CGROUP is not None, reason=NO_CGROUP or "")
def test_the_stream_reconnects_after_drowsed_is_killed_and_restarted(make_drowse):
    d = make_drowse()
    out = add_example(d, always_active=True)  # never frozen: only the stream is in question
    d.start()
    pid = pid_of(out)
    first = wait_until(lambda: (lambda s: s if s["connections"] >= 1 else None)(status_file(out, pid, 0, 5)), 20,
                       what="the stream to open")
    d.stop(signal.SIGKILL)
    assert os.path.exists(f"/proc/{pid}")
    d.start()  # adopts the running process; its stream reconnects
    assert d.json("fetch", APP, timeout=30)["result"] == "new-data"
    assert lines(out / "starts") == [str(pid)], "the app was started again instead of reconnecting"
    # The app counts the event once drowsed has answered its completion, a moment after the
    # fetch above returned: asked again until it has.
    again = wait_until(lambda: (lambda s: s if s["handled"] >= 1 else None)(status_file(out, pid, first["written_at"], 5)),
                       10, what="the app to count the fetch")
    assert again["connections"] >= 2 and again["handled"] == 1, again
    assert len(events(out, "fetch")) == 1


@pytest.mark.skipif(NO_CGROUP is not None, reason=NO_CGROUP or "")
def test_suspension_freezes_the_python_process_and_a_delivery_thaws_it(make_drowse):
    d = make_drowse()
    out = start_suspended(d)
    pid = pid_of(out)
    wait_until(lambda: cgroup_frozen(d), 5, what="the app's cgroup to be frozen")
    asked = time.time()
    os.kill(pid, signal.SIGUSR1)
    # Frozen: the signal waits, pending in the kernel, its handler has not run. A running process
    # takes a signal within milliseconds of its sending; 0.3 s of it still pending shows the freeze.
    time.sleep(0.3)
    assert pending_signals(pid) & (1 << (signal.SIGUSR1 - 1)), "the signal was taken by a suspended app"
    assert not (out / "status.json").exists(), "a suspended app ran its signal handler"
    assert cgroup_frozen(d) and d.app(APP)["state"] == "suspended"
    # A delivery thaws it: the fetch is completed, and the pending signal is handled.
    assert d.json("fetch", APP, timeout=30)["result"] == "new-data"
    st = wait_until(lambda: (out / "status.json").exists() and json.loads((out / "status.json").read_text()), 10,
                    what="the signal handled once thawed")
    assert st["pid"] == pid and st["written_at"] > asked
    wait_state(d, "suspended")
    wait_until(lambda: cgroup_frozen(d), 5, what="frozen again")
    assert lines(out / "starts") == [str(pid)]
