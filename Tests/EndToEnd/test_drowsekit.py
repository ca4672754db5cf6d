"""DrowseKit against a real drowsed: the example resident app (Swift, Sources/drowse-resident-example)
gets its events on its stream, completes them, works inside a background task and stops when
drowsed warns that the time runs out; `drowse task run` runs a command inside a task and ends it
when the command exits, or stops it when the allowance is used up."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from drowse_e2e import BIN_DIR, notify_topic, wait_until

EXAMPLE = BIN_DIR / "drowse-resident-example"


def add_example(d, app: str = "kit") -> Path:
    assert EXAMPLE.is_file(), f"{EXAMPLE} is not built (swift build builds it with drowsed)"
    out = d.out_dir(app)
    (d.apps_dir / f"{app}.toml").write_text(
        f'id = "{app}"\n\n[process]\ncommand = [{json.dumps(str(EXAMPLE))}, "--dir", {json.dumps(str(out))}]\n')
    return out


def lines(p: Path) -> list[str]:
    return p.read_text().splitlines() if p.exists() else []


def test_the_example_app_completes_events_and_works_inside_a_task(broker, make_drowse):
    d = make_drowse(broker=broker)
    d.set_lifecycle(suspend_after="1s", background_task_time="4s", task_expiry_warning="2s")
    out = add_example(d)
    d.start()
    wait_until(lambda: d.json("apps", "show", "kit")["state"] == "suspended", 20, what="the app to be suspended")
    r = d.json("fetch", "kit", timeout=30)
    assert r["result"] == "new-data", r
    assert (out / "last-fetch").exists()
    assert any(l.startswith("fetch ") for l in lines(out / "events.log"))
    # A notification asking for 1 s of work: begun and done inside a task.
    broker.wait_subscribed(notify_topic("kit"))
    d.push("kit", "--id", "short", "-d", "task=1")
    done = wait_until(lambda: [l for l in lines(out / "tasks.log") if " done " in l], 20, what="the short task to be done")
    assert len(done) == 1
    ended_at = float(done[0].split()[0])
    wait_until(lambda: (lambda a: a["state"] == "suspended" and a["state_since"] > ended_at)(d.json("apps", "show", "kit")), 20,
               what="suspended after the task (a rest: the next task gets a fresh allowance)")
    # 10 s of work in a 4 s allowance: the app is warned (2 s before the end) and stops in time.
    d.push("kit", "--id", "long", "-d", "task=10")
    expired = wait_until(lambda: [l for l in lines(out / "tasks.log") if " expired " in l], 20,
                         what="the app to stop its task when warned")
    step = int(expired[0].split()[-1])
    assert step <= 3, expired
    notifications = [h for h in d.app("kit")["history"] if h["event"] == "notification"]
    assert len(notifications) == 2 and all(h["result"] == "new-data" for h in notifications)
    # It ended its own task before the allowance ran out: it rests, and no overrun is counted
    # (that none comes when the allowance would have run out is checked on a manual clock:
    # Tests/DrowseAgentTests/AgentLifecycleTimingTests.swift).
    stopped_at = float(expired[0].split()[0])
    wait_until(lambda: (lambda a: a["state"] == "suspended" and a["state_since"] > stopped_at)(d.json("apps", "show", "kit")), 20,
               what="the app to rest after its task")
    assert not any(h["trigger"] == "task-overrun" for h in d.app("kit")["history"])


def test_task_run_ends_the_task_with_the_command(make_drowse):
    d = make_drowse()
    d.set_lifecycle(background_task_time="3s", task_expiry_warning="1s")
    (d.apps_dir / "job.toml").write_text('id = "job"\n')
    d.start()
    r = d.cli("task", "run", "--app", "job", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    assert d.json("apps", "show", "job")["state"] == "not-running"
    # A command that outlives the allowance is stopped: SIGTERM to its group, exit 124.
    pidfile = d.base / "sleep.pid"
    t0 = time.monotonic()
    r = d.cli("task", "run", "--app", "job", "--", "sh", "-c", f"echo $$ > {pidfile}; exec sleep 100", timeout=30)
    took = time.monotonic() - t0
    assert r.returncode == 124, (r.returncode, r.stderr)
    assert 2.5 <= took < 10, took
    assert not os.path.exists(f"/proc/{pidfile.read_text().strip()}")
