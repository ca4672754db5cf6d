"""A bounded notification backlog: whoever can publish to the device's topic
may send thousands of distinct priority-5 notifications; each app keeps at most
`[notifications] max_deferred` of them waiting (the oldest go, counted as `evicted`), drowsed's
memory does not grow with the flood, the newest ones run at the next window, and priority 10
still runs at once.
"""

from __future__ import annotations

import json
import subprocess
import time

from drowse_e2e import MOSQUITTO_PUB, notify_topic, wait_until
from test_notification_delivery import age_budget, ids, notification_states, start_app, wait_ids

N = 3000
KEEP = 16


def vm_rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def flood(broker, topic: str, payloads: list[bytes], timeout: float = 120) -> None:
    """publish_many with room for a slow receiver (QoS 1: drowsed acknowledges each after its record)."""
    args = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1", "-t", topic, "-l"]
    subprocess.run(args, input=b"\n".join(payloads) + b"\n", check=True, timeout=timeout, capture_output=True)


def test_a_flood_of_priority_5_notifications_keeps_max_deferred_per_app_and_runs_the_newest(broker, make_drowse):
    # max_per_hour = max_deferred: the first KEEP - 1 run at once (the warm-up used one), the newest
    # KEEP wait, and once the hour has passed one window has room for all of them.
    d, log = start_app(broker, make_drowse, app="flood", minimum_interval="3s",
                       extra_config=f"[notifications]\nmax_per_hour = {KEEP}\nmax_deferred = {KEEP}")
    d.push("flood", "--id", "warm-up", "--priority", "10")  # code paths and caches in use before the baseline
    wait_ids(log, {"warm-up"}, 10)
    time.sleep(0.5)
    rss0 = vm_rss_kb(d.proc.pid)

    t0 = time.monotonic()
    # In batches: mosquitto queues at most 1000 messages for a subscriber (max_queued_messages)
    # and drops the rest, so a publisher faster than drowsed's records must wait for them.
    for start in range(0, N, 500):
        flood(broker, notify_topic("flood"), [json.dumps({"aps": {"content-available": 1}, "id": f"n{i}", "pad": "x" * 400}).encode()
                                              for i in range(start, min(N, start + 500))])
        wait_until(lambda: sum(notification_states(d).values()) >= min(N, start + 500) + 1, 60,
                   what=f"notifications up to n{start + 499} recorded")
    took = time.monotonic() - t0
    time.sleep(1)
    states = notification_states(d)
    rss1 = vm_rss_kb(d.proc.pid)
    print(f"flood of {N}: {took:.1f} s, drowsed VmRSS {rss0} -> {rss1} kB")
    assert states["deferred"] == KEEP, f"state.db holds {states['deferred']} deferred, not max_deferred: {dict(states)}"
    assert states["evicted"] == N - (KEEP - 1) - KEEP, dict(states)
    assert rss1 - rss0 < 20 * 1024, f"drowsed's RSS grew {(rss1 - rss0) / 1024:.1f} MiB over {N} notifications " \
                                     f"({rss0} -> {rss1} kB; {took:.1f} s)"
    # Counted where an operator looks: drowse_notifications_total{outcome="evicted"}.
    text = d.cli_ok("metrics").stdout
    assert f'drowse_notifications_total{{outcome="evicted"}} {N - (KEEP - 1) - KEEP}' in text, \
        [line for line in text.splitlines() if "outcome" in line]

    # Priority 10 still runs at once, backlog or not.
    t_urgent = time.monotonic()
    d.push("flood", "--id", "urgent", "--priority", "10")
    wait_ids(log, {"urgent"}, 5, kind="started")
    assert time.monotonic() - t_urgent < 3, "priority 10 did not run at once"

    # The hour passes for the budget: the next window runs the newest KEEP, and none of the evicted.
    age_budget(d, 3600)
    newest = {f"n{i}" for i in range(N - KEEP, N)}
    wait_ids(log, newest, 20)
    d.wait_idle()  # the window released what it released at once
    ran = set(ids(log))
    first = {f"n{i}" for i in range(KEEP - 1)}
    assert ran == first | newest | {"warm-up", "urgent"}, f"unexpected runs: {sorted(ran - first - newest)[:10]}"
    assert notification_states(d)["deferred"] == 0
