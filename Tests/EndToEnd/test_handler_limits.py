"""Floods of notifications: at most
`[scheduler] max_concurrent_handlers` handlers run at once, the rest wait (surviving a crash), none
is dropped (not even when spawning runs out of descriptors), drowsed's threads stay bounded, and
`[notifications] max_per_hour` is counted from the store, so a restart hands out no fresh hour.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

from drowse_e2e import notify_topic, wait_until
from test_notification_delivery import age_budget, entries, fetch_starts, ids, notification_states, start_app, wait_ids


def limits(max_concurrent: int) -> str:
    """Config: a big hourly budget, and at most `max_concurrent` handlers at once (with start_app's
    handler_deadline=None, since this writes the [scheduler] table)."""
    return f'[notifications]\nmax_per_hour = 1000\n\n[scheduler]\nhandler_deadline = "10s"\nmax_concurrent_handlers = {max_concurrent}'


def payloads(prefix: str, n: int, priority: int = 10) -> list[bytes]:
    return [json.dumps({"aps": {"content-available": 1}, "id": f"{prefix}{i}", "priority": priority}).encode()
            for i in range(n)]


def peak_concurrency(log) -> int:
    running = peak = 0
    for kind, _ in entries(log):
        running += 1 if kind == "started" else -1 if kind == "done" else 0
        peak = max(peak, running)
    return peak


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


class ThreadSampler:
    """Samples drowsed's thread count every 20 ms while a flood runs (the test's own loop, not drowsed's)."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, thread_count(self.pid))
            time.sleep(0.02)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()


def test_a_flood_of_300_runs_each_once_with_bounded_handlers_and_threads(broker, make_drowse):
    d, log = start_app(broker, make_drowse, pause=0.1)  # default max_concurrent_handlers (8)
    idle_threads = thread_count(d.proc.pid)
    with ThreadSampler(d.proc.pid) as threads:
        broker.publish_many(notify_topic("news"), payloads("f", 300))
        wait_ids(log, {f"f{i}" for i in range(300)}, 90)
    print(f"[flood] drowsed threads: idle {idle_threads}, peak {threads.peak}; handlers at once: {peak_concurrency(log)}")
    done = ids(log)
    assert done == Counter({f"f{i}": 1 for i in range(300)}), f"not each exactly once: {[k for k, v in done.items() if v != 1]}"
    assert peak_concurrency(log) <= 8, f"{peak_concurrency(log)} handlers ran at once"
    assert threads.peak <= idle_threads + 8 + 4, f"drowsed grew from {idle_threads} to {threads.peak} threads"
    assert d.status()["queued_handlers"] == 0


def test_queued_notifications_survive_kill_9(broker, make_drowse):
    d, log = start_app(broker, make_drowse, pause=0.3, handler_deadline=None, extra_config=limits(1))
    broker.publish_many(notify_topic("news"), payloads("k", 20))
    # All 20 are acknowledged (recorded) long before the queue is through.
    wait_until(lambda: len(ids(log, "started")) >= 3, 20, what="3 handlers to start")
    assert len(ids(log, "done")) < 15
    d.stop(signal.SIGKILL)
    d.start()
    wait_ids(log, {f"k{i}" for i in range(20)}, 60)
    time.sleep(0.5)
    done = ids(log)
    # Only a run the kill interrupted may repeat (notifications are hints safe to repeat).
    assert [k for k, v in done.items() if v > 1] in ([], [k for k, v in ids(log, "started").items() if v > 1])
    assert sum(done.values()) <= 21, dict(done)


def test_spawn_failures_from_a_descriptor_shortage_are_retried_not_dropped(broker, make_drowse):
    d, log = start_app(broker, make_drowse, pause=0.5, handler_deadline=None, extra_config=limits(100),
                       prefix=["prlimit", "--nofile=150"])
    broker.publish_many(notify_topic("news"), payloads("e", 150))
    wait_ids(log, {f"e{i}" for i in range(150)}, 90)
    time.sleep(0.5)
    done = ids(log)
    assert done == Counter({f"e{i}": 1 for i in range(150)}), f"not each exactly once: {[k for k, v in done.items() if v != 1]}"
    assert "could not start" in d.stderr_text()  # the shortage did happen: this tested the retry


def test_the_hourly_budget_survives_a_restart(broker, make_drowse):
    d, log = start_app(broker, make_drowse, extra_config="[notifications]\nmax_per_hour = 3")
    broker.publish_many(notify_topic("news"), payloads("b", 3, priority=5))
    wait_ids(log, {"b0", "b1", "b2"}, 15)
    d.restart()
    broker.wait_subscribed(notify_topic("news"), count=2)
    broker.publish_many(notify_topic("news"), payloads("a", 2, priority=5))
    # Recorded and held back for the hour (a fresh hour would have run them instead).
    wait_until(lambda: notification_states(d)["deferred"] == 2, 10, what="the two over the budget to be deferred")
    assert ids(log) == Counter({"b0": 1, "b1": 1, "b2": 1}), f"a restart gave a fresh hour: {dict(ids(log))}"


def test_the_deferred_backlog_released_at_a_window_obeys_max_per_hour(broker, make_drowse):
    d, log = start_app(broker, make_drowse, extra_config="[notifications]\nmax_per_hour = 2", minimum_interval="3s")
    broker.publish_many(notify_topic("news"), payloads("w", 2, priority=5))
    wait_ids(log, {"w0", "w1"}, 10)
    broker.publish_many(notify_topic("news"), payloads("late", 5, priority=5))  # over the budget: deferred
    wait_until(lambda: notification_states(d)["deferred"] == 5, 5, what="5 deferred")
    assert set(ids(log)) == {"w0", "w1"}
    age_budget(d, 3600)  # the hour has passed: room for 2
    before = len(fetch_starts(d, "news"))
    wait_until(lambda: len(fetch_starts(d, "news")) >= before + 2, 20, what="two fetch windows")
    time.sleep(1)
    late = {k: v for k, v in ids(log).items() if k.startswith("late")}
    assert late == {"late0": 1, "late1": 1}, f"a window released more than the budget: {late}"


# nofile.sh OUT: writes the handler's soft and hard descriptor limits to OUT.
NOFILE_SH = r"""#!/bin/sh
echo "$(ulimit -Sn) $(ulimit -Hn)" > "$1"
"""


def test_drowsed_runs_with_the_units_descriptor_limit_and_handlers_with_1024(make_drowse):
    """deploy/drowsed.service raises drowsed's descriptor limit (LimitNOFILE); a handler still starts
    with the usual soft limit of 1024 (select()-based code expects it) under that hard limit."""
    from drowse_e2e import REPO
    unit = (REPO / "deploy" / "drowsed.service").read_text()
    limit = int(next(l.split("=", 1)[1] for l in unit.splitlines() if l.startswith("LimitNOFILE=")))
    assert limit >= 4096, f"LimitNOFILE={limit} leaves little room for transfers and API clients"
    d = make_drowse()
    out = d.out_dir("fd") / "nofile"
    d.add_app("fd", fetch=[str(d.write_script("nofile.sh", NOFILE_SH)), str(out)])
    d.prefix = ["prlimit", f"--nofile={limit}:{limit}", "--"]
    d.start()
    with open(f"/proc/{d.proc.pid}/limits") as f:
        row = next(l for l in f if l.startswith("Max open files")).split()
    assert (int(row[3]), int(row[4])) == (limit, limit), row
    assert d.json("fetch", "fd")["result"] == "new-data"
    assert out.read_text().split() == ["1024", str(limit)]
