"""One scheduler: drowsed and `drowse simulate`
drive the same FetchScheduler. A real drowsed run is traced (`--scheduler-trace`): every event it
fed the scheduler, with its time, and the actions it got back. `drowse simulate --replay` feeds
those events through the simulator's driver and must get the same actions at the same times; it
also checks that drowsed honoured every timer the scheduler set. The run mixes everything the
scheduler hears about: shared windows, new data, no data, failures, a deadline kill, a manual
fetch, a notification waking the radio, a use of an app's data and a restart."""

from __future__ import annotations

import json
import subprocess

from drowse_e2e import DROWSE, notify_topic, wait_until


def replay(path):
    r = subprocess.run([str(DROWSE), "simulate", "--replay", str(path), "--json"], capture_output=True, text=True, timeout=60)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def traced(path):
    """What a trace holds so far: its event types, its scheduled windows and their fetches, and
    the apps whose handler was killed at its deadline."""
    kinds, windows, fetches, timed_out = set(), 0, 0, set()
    lines = path.read_text().splitlines()[1:] if path.exists() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a line being written
            continue
        event = entry["event"]
        kinds.add(event["type"])
        if event["type"] == "handler_ended" and (event.get("fetch") or {}).get("timed_out"):
            timed_out.add(event["app"])
        for a in entry["actions"]:
            if a["type"] == "start_fetch" and a["trigger"] == "scheduled":
                windows += 1
                fetches += len(a["apps"])
    return {"kinds": kinds, "windows": windows, "window_fetches": fetches, "timed_out": timed_out}


def test_a_traced_drowsed_run_replays_to_the_same_actions(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="2s", extra_config='[radio]\nmodel = "lte"\n')
    d.add_app("fresh", fetch=d.recorder("fresh"), minimum_interval="2s")
    d.add_app("quiet", fetch=["/bin/sh", "-c", "exit 100"], minimum_interval="3s")
    d.add_app("flaky", fetch=["/bin/sh", "-c", "exit 1"], minimum_interval="2s")
    d.add_app("slow", fetch=["/bin/sh", "-c", "sleep 5"], minimum_interval="4s")
    d.add_app("news", fetch=d.recorder("news"), minimum_interval="5s", notification=d.recorder("news-note"))
    trace = d.base / "scheduler.trace"
    d.daemon_args = ["--scheduler-trace", str(trace)]
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    # Windows have opened (the first takes every new app) before the API and MQTT events come.
    wait_until(lambda: traced(trace)["windows"] >= 2, 15, what="two scheduled windows in the trace")
    d.push("news", "-d", "content-id=1")
    d.cli_ok("used", "fresh")
    d.cli("fetch", "quiet", timeout=10)
    # Until the trace holds every kind of event, the slow handler's deadline kill and more windows.
    kinds = {"started", "handler_ended", "radio_used", "used", "fetch_requested", "timer_fired"}
    wait_until(lambda: (lambda t: kinds <= t["kinds"] and "slow" in t["timed_out"] and t["windows"] >= 4
                        and t["window_fetches"] > t["windows"])(traced(trace)) and d.runs("news-note"), 20,
               what="a trace of every kind of event, a deadline kill and four windows")
    d.stop()

    code, report, err = replay(trace)
    assert code == 0 and report is not None and report["identical"], (code, err, report)
    # A trace of real work: windows opened, most of them shared, and timers honoured promptly.
    assert report["windows"] >= 4 and report["window_fetches"] > report["windows"], report
    assert report["timer_firings"] >= report["windows"] and not report["bad_firings"], report
    assert report["max_timer_lateness_seconds"] < 1.0, report
    events = [json.loads(line)["event"]["type"] for line in trace.read_text().splitlines()[1:]]
    for kind in ("started", "handler_ended", "radio_used", "used", "fetch_requested", "timer_fired"):
        assert kind in events, f"no {kind} event in the trace: {sorted(set(events))}"

    # After a restart the scheduler starts from what the store remembers; that replays too.
    trace2 = d.base / "scheduler-2.trace"
    d.daemon_args = ["--scheduler-trace", str(trace2)]
    d.start()
    # The stated rule, per app: due by eligible_at + tolerance (50 % of the 5 s interval).
    news = d.json("apps", "show", "news")
    assert news["tolerance_seconds"] == 2.5, news
    if news["eligible_at"] is not None:
        assert abs(news["due_by"] - news["eligible_at"] - 2.5) < 1e-6, news
    wait_until(lambda: traced(trace2)["windows"] >= 1 and "handler_ended" in traced(trace2)["kinds"], 15,
               what="a window after the restart")
    d.stop()
    code, report2, err = replay(trace2)
    assert code == 0 and report2["identical"] and report2["windows"] >= 1, (code, err, report2)
    started = json.loads(trace2.read_text().splitlines()[1])["event"]
    records = {a["id"]: a["record"] for a in started["apps"]}
    assert records["quiet"]["last_result"] == "no-data" and records["quiet"]["consecutive_no_data"] >= 1, records
    assert records["flaky"]["consecutive_failures"] >= 1 and records["slow"]["last_timed_out"], records

    # The check can fail: a trace whose recorded answer differs from the scheduler's is caught.
    lines = trace.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '"set_timer"' in line)
    entry = json.loads(lines[k])
    for a in entry["actions"]:
        if a["type"] == "set_timer":
            a["at"] += 5
    lines[k] = json.dumps(entry)
    tampered = d.base / "tampered.trace"
    tampered.write_text("\n".join(lines) + "\n")
    code, report, _ = replay(tampered)
    assert code == 1 and report is not None and not report["identical"] and report["mismatches"][0]["line"] == k + 1, report
