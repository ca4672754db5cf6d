"""App lifecycle (docs/handlers.md, "App states"): a resident app run by drowsed moves between
states, is frozen in its cgroup v2 when it has no reason to run (and gets no CPU then), is thawed
for each event, is restarted after a crash, is adopted after a kill -9 of drowsed, and has finite
background tasks; the SIGSTOP fallback does the same without cgroups. Real processes, the real
cgroup tree. The tests that look into the cgroup tree need to make cgroups at the top of the
cgroup2 mount (root, in practice) and skip, saying why, where they cannot; the others run on
either kind of suspension."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drowse_e2e import cgroup2_mount, cgroup_unusable, ctx_switches, notify_topic, wait_until

RESIDENT = Path(__file__).with_name("resident_app.py")
MOUNT = cgroup2_mount()


def add_resident(d, app: str = "res", always_active: bool = False) -> Path:
    out = d.out_dir(app)
    text = f'id = "{app}"\n\n[process]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(RESIDENT))}, {json.dumps(str(out))}]\n'
    if always_active:
        text += "always_active = true\n"
    (d.apps_dir / f"{app}.toml").write_text(text)
    return out


def state(d, app: str = "res") -> tuple[str, str]:
    a = d.json("apps", "show", app)
    return a["state"], a["state_reason"]


def wait_state(d, want: str, app: str = "res", timeout: float = 20) -> dict:
    return wait_until(lambda: (lambda a: a if a["state"] == want else None)(d.json("apps", "show", app)), timeout,
                      interval=0.05, what=f"{app} to be {want}")


def events(out: Path) -> list[dict]:
    p = out / "events.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def resident_pid(out: Path) -> int:
    return int(wait_until(lambda: (out / "starts").exists() and (out / "starts").read_text().split(), 20,
                          what="the resident process to start")[-1])


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15)


def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def app_cgroup(d, app: str = "res") -> Path:
    return MOUNT / d.cgroup / "apps" / app


def cgroup_events(d, app: str = "res") -> dict[str, int]:
    text = (app_cgroup(d, app) / "cgroup.events").read_text()
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


def hello_count(out: Path) -> int:
    return sum(1 for e in events(out) if e.get("event") == "hello")


NO_CGROUP = cgroup_unusable()
needs_cgroup = pytest.mark.skipif(NO_CGROUP is not None, reason=NO_CGROUP or "")


@needs_cgroup
def test_resident_states_freezing_and_events(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s")
    out = add_resident(d)
    d.start()
    assert d.status()["lifecycle"]["suspension"] == "cgroup-v2"
    pid = resident_pid(out)
    wait_until(lambda: hello_count(out) >= 1, 20, what="the resident app's stream to open")
    # No reason to run: suspended after the grace, its cgroup frozen.
    first = wait_state(d, "suspended")
    assert first["state_reason"] == "idle"
    wait_until(lambda: cgroup_events(d)["frozen"] == 1, 5, what="cgroup.events frozen 1")
    # A 100 Hz timer gets no CPU while frozen: in 0.3 s it would have switched in about 30 times.
    before = cpu_ticks(pid), sum(ctx_switches(pid).values())
    time.sleep(0.3)
    assert (cpu_ticks(pid), sum(ctx_switches(pid).values())) == before, "a frozen app ran"
    assert cgroup_events(d)["frozen"] == 1
    # An event thaws it; its completion is the fetch's result.
    r = d.json("fetch", "res", timeout=30)
    assert r["result"] == "new-data", r
    fetches = [e for e in events(out) if e.get("event") == "fetch"]
    assert len(fetches) == 1 and fetches[0]["deadline"] > fetches[0]["received_at"]
    assert any(e.get("completed") == fetches[0]["id"] and e["status"] == 200 for e in events(out))
    # Background while the event ran (its state_since moved), then suspended again.
    again = wait_state(d, "suspended")
    assert again["state_since"] > first["state_since"]
    wait_until(lambda: cgroup_events(d)["frozen"] == 1, 5, what="frozen again")
    leaves = [p for p in app_cgroup(d).iterdir() if p.is_dir() and p.name.startswith("resident-")]
    assert len(leaves) == 1 and (leaves[0] / "cgroup.procs").read_text().split()[0] == str(pid)
    runs = [h for h in d.app("res")["history"] if h["event"] == "fetch"]
    assert runs and runs[0]["result"] == "new-data" and runs[0]["ending"] == "completed: new-data"


def test_an_event_never_completed_counts_as_failed(make_drowse):
    d = make_drowse(handler_deadline="2s")
    d.set_lifecycle(suspend_after="1s")
    out = add_resident(d)
    (out / "result").write_text("none")
    d.start()
    wait_until(lambda: hello_count(out) >= 1, 20, what="the stream")
    r = d.json("fetch", "res", timeout=30)
    assert r["result"] == "failed", r
    runs = [h for h in d.app("res")["history"] if h["event"] == "fetch"]
    assert runs[0]["ending"] == "killed at its deadline"


def test_a_crashed_resident_is_restarted_and_its_waiting_events_delivered(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s")
    out = add_resident(d)
    (out / "exit").write_text("3")
    d.start()
    # It exits right after connecting, again and again, with a growing delay between starts.
    wait_until(lambda: len((out / "starts").read_text().split()) >= 3 if (out / "starts").exists() else False, 30,
               what="three starts")
    a = d.json("apps", "show", "res")
    assert a["state"] in ("not-running", "background")
    # Each start ran (a restarted process gets a fresh cgroup leaf; a reused, killed one would
    # kill it at its clone), and the leaves of the ended ones are gone.
    assert all(int(pid) > 0 for pid in (out / "starts").read_text().split())
    # An event that arrives while it is down waits for it.
    (out / "exit").unlink()
    r = d.json("fetch", "res", timeout=40)
    assert r["result"] == "new-data"
    fetches = [e for e in events(out) if e.get("event") == "fetch"]
    assert len(fetches) == 1


@needs_cgroup
def test_kill9_of_drowsed_adopts_the_resident_and_leaves_nothing_frozen(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s")
    out = add_resident(d)
    d.start()
    pid = resident_pid(out)
    wait_state(d, "suspended")
    wait_until(lambda: cgroup_events(d)["frozen"] == 1, 5, what="frozen")
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(10)
    # The app stays frozen while no drowsed runs ...
    assert cgroup_events(d)["frozen"] == 1
    d.set_lifecycle(suspend_after="4s")
    d.start()
    # ... the new drowsed thaws it (no reason known yet), adopts the same process, which
    # reconnects its stream, and suspends it again only after the grace.
    wait_until(lambda: cgroup_events(d)["frozen"] == 0, 5, what="the adopted app to be thawed")
    wait_until(lambda: hello_count(out) >= 2, 20, what="the adopted process to reconnect")
    assert d.json("apps", "show", "res")["state"] == "background"
    assert Path(out / "starts").read_text().split() == [str(pid)], "the resident was started again instead of adopted"
    wait_state(d, "suspended", timeout=20)
    r = d.json("fetch", "res", timeout=30)
    assert r["result"] == "new-data"
    assert os.path.exists(f"/proc/{pid}")


@needs_cgroup
def test_activated_and_always_active_apps_are_not_suspended(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s")
    add_resident(d, "res")
    add_resident(d, "logger", always_active=True)
    d.start()
    wait_state(d, "suspended", "res")
    r = d.json("activate", "res")
    assert r["state"] == "active" and r["state_reason"] == "activated"
    assert cgroup_events(d, "res")["frozen"] == 0
    assert state(d, "logger") == ("active", "always active")
    # That an activated or always-active app stays unfrozen past the grace, however long, is the
    # lifecycle's time rule: checked on a manual clock (Tests/DrowseAgentTests/
    # AgentLifecycleTimingTests.swift). Here: the real cgroups of both are thawed.
    assert cgroup_events(d, "res")["frozen"] == 0 and cgroup_events(d, "logger")["frozen"] == 0
    d.json("deactivate", "res")
    wait_state(d, "suspended", "res")
    assert state(d, "logger") == ("active", "always active")


@needs_cgroup
def test_a_task_past_its_allowance_is_warned_then_suspended(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s", background_task_time="3s", task_expiry_warning="1s")
    out = add_resident(d)
    d.start()
    wait_until(lambda: hello_count(out) >= 1, 20, what="the stream")
    wait_state(d, "suspended")
    t = d.json("task", "begin", "--app", "res", "--name", "sync")
    assert t["state"] == "open" and 2 < t["time_remaining"] <= 3
    assert state(d) == ("background", "task")
    assert cgroup_events(d)["frozen"] == 0
    warned = wait_until(lambda: [e for e in events(out) if e.get("event") == "task-expiring"], 10, what="task-expiring")
    assert warned[0]["task"] == t["id"] and warned[0]["time_remaining"] <= 1.01
    wait_state(d, "suspended", timeout=10)
    assert d.json("task", "show", "--app", "res", t["id"])["state"] == "expired"
    assert time.time() >= t["expires_at"] - 0.05
    # The overrun counts against the app like a deadline kill.
    runs = d.app("res")["history"]
    assert any(h["trigger"] == "task-overrun" and h["result"] == "failed" for h in runs)
    # Used up until it has rested: it was suspended, so a new allowance is granted.
    assert d.json("task", "begin", "--app", "res")["state"] == "open"


def test_sigstop_fallback_without_cgroups(make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s", cgroup="off")
    out = add_resident(d)
    d.start()
    assert d.status()["lifecycle"]["suspension"] == "sigstop"
    pid = resident_pid(out)
    wait_until(lambda: hello_count(out) >= 1, 20, what="the stream")
    wait_state(d, "suspended")
    wait_until(lambda: proc_state(pid) == "T", 5, what="the process to be stopped")
    before = cpu_ticks(pid), sum(ctx_switches(pid).values())
    time.sleep(0.3)  # a running 100 Hz timer would switch in about 30 times
    assert (cpu_ticks(pid), sum(ctx_switches(pid).values())) == before, "a stopped app ran"
    r = d.json("fetch", "res", timeout=30)
    assert r["result"] == "new-data"
    wait_until(lambda: proc_state(pid) == "T", 10, what="stopped again")


def memory_v1() -> Path | None:
    """A writable cgroup v1 memory hierarchy (hybrid systems), to cause real memory stall."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        f = right.split(" ")
        if f[0] == "cgroup" and "memory" in f[2].split(","):
            p = Path(left.split(" ")[4])
            return p if os.access(p, os.W_OK) else None
    return None


@needs_cgroup
@pytest.mark.skipif(memory_v1() is None, reason="no cgroup v1 memory hierarchy this user may write to, to cause real memory stall with")
def test_memory_pressure_ends_the_least_recently_used_suspended_app_first(make_drowse, tmp_path):
    """Real pressure: a process in a 16 MiB memory cgroup reads a 64 MiB file over and over (each
    read reclaims the last one's page cache, which PSI counts as memory stall), against a
    lowered trigger (1 ms of stall in 2 s)."""
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s", memory_pressure="some 1000 2000000")
    outs = {app: add_resident(d, app) for app in ("old", "new")}
    outs["keep"] = add_resident(d, "keep", always_active=True)
    d.start()
    assert d.status()["lifecycle"]["memory_pressure"] == "psi"
    pids = {app: resident_pid(out) for app, out in outs.items()}
    wait_until(lambda: hello_count(outs["new"]) >= 1, 20, what="the stream of new")
    wait_state(d, "suspended", "old")
    # An event makes "new" the more recently used of the two suspended apps.
    assert d.json("fetch", "new", timeout=30)["result"] == "new-data"
    wait_state(d, "suspended", "new")
    cg = memory_v1() / f"drowse-e2e-stall-{os.getpid()}"
    cg.mkdir()
    big = Path("/var/tmp") / f"drowse-e2e-stall-{os.getpid()}.bin"
    thrash = None
    try:
        (cg / "memory.limit_in_bytes").write_text(str(16 << 20))
        with open(big, "wb") as f:
            for i in range(64):
                f.write(bytes([i]) * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        thrash = subprocess.Popen(["/bin/sh", "-c", f'echo $$ > {cg}/cgroup.procs; while :; do cat {big} > /dev/null; done'],
                                  start_new_session=True)
        first = wait_until(lambda: [a for a in ("old", "new") if state(d, a) == ("not-running", "memory pressure")], 30,
                           interval=0.02, what="an app ended under memory pressure")
        assert first == ["old"], f"the most recently used app went first: {first}"
        wait_until(lambda: not os.path.exists(f"/proc/{pids['old']}"), 10, what="the old app's process to end")
        # The next event in pressure goes to the other suspended app; the active one is never chosen.
        wait_until(lambda: state(d, "new") == ("not-running", "memory pressure"), 30, what="the second app ended")
        # That an active app is never chosen, however long the pressure lasts, is checked on a
        # manual clock (AppLifecycleTests); here the pressure goes on a moment past the second end.
        time.sleep(0.5)
        assert state(d, "keep") == ("active", "always active")
        assert os.path.exists(f"/proc/{pids['keep']}")
    finally:
        if thrash is not None:
            os.killpg(thrash.pid, signal.SIGKILL)
            thrash.wait()
        big.unlink(missing_ok=True)
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    # Not restarted on its own; an event starts it again.
    assert state(d, "old") == ("not-running", "memory pressure")
    r = d.json("fetch", "old", timeout=40)
    assert r["result"] == "new-data"


def test_a_notification_cut_short_by_a_stop_is_delivered_again_after_the_restart(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="20s")
    out = add_resident(d)
    (out / "result").write_text("none")  # read, never completed
    d.start()
    wait_until(lambda: hello_count(out) >= 1, 20, what="the stream")
    broker.wait_subscribed(notify_topic("res"))
    d.push("res", "--id", "n-1")
    wait_until(lambda: [e for e in events(out) if e.get("event") == "notification"], 15, what="the notification")
    d.stop()
    (out / "result").write_text("new-data")
    d.start()
    again = wait_until(lambda: [e for e in events(out) if e.get("event") == "notification"][1:], 30,
                       what="the notification delivered again after the restart")
    assert again[0]["payload"]["id"] == "n-1"
    wait_until(lambda: [h for h in d.app("res")["history"] if h["event"] == "notification" and h["result"] == "new-data"], 15,
               what="its completion recorded")


def test_a_finished_transfer_session_is_an_event_on_the_resident_stream(nginx, make_drowse):
    d = make_drowse()
    d.set_lifecycle(suspend_after="1s")
    out = add_resident(d)
    url, digest, _ = nginx.add_file("resident.bin", 200_000)
    d.start()
    wait_until(lambda: hello_count(out) >= 1, 20, what="the stream")
    wait_state(d, "suspended")
    tid = d.download(url, "res", "--session", "sync", "--sha256", digest)
    ev = wait_until(lambda: [e for e in events(out) if e.get("event") == "transfers"], 30, what="the transfers event")[0]
    assert ev["session"] == "sync"
    assert [t["id"] for t in ev["transfers"]] == [tid] and ev["transfers"][0]["state"] == "completed"
    assert any(e.get("completed") == ev["id"] and e["status"] == 200 for e in events(out))
    runs = wait_until(lambda: [h for h in d.app("res")["history"] if h["event"] == "transfers"], 15, what="the run recorded")
    assert runs[0]["ending"] == "completed: new-data"
    wait_state(d, "suspended")
