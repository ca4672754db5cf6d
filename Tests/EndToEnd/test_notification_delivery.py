"""Delivery guarantees of notifications over a real mosquitto (docs/contract.md: "Notifications over MQTT"):
nothing lost across daemon and broker restarts, nothing run twice, an interrupted run redone after
kill -9, the rate budget (priority, deferral, collapse-id, expiration), push to transfer, and a
dead link found by the keepalive.

Each notification handler here appends "started <payload>" and "done <payload>" (one line each,
the payload on one line) to a log file, so a test can count how often each notification ran.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from drowse_e2e import notify_topic, stray_pids, wait_until

# note-log.sh LOG [PAUSE]: one line when it starts, one when it is done (PAUSE seconds later).
NOTE_LOG_SH = r"""#!/bin/sh
log="$1"
p="$(tr -d '\n')"
printf 'started %s\n' "$p" >> "$log"
printf 'attempt%s %s\n' "${DROWSE_ATTEMPT:-0}" "$p" >> "$log"
if [ "${2:-0}" != 0 ]; then sleep "$2"; fi
printf 'done %s\n' "$p" >> "$log"
"""

# events.sh OUTDIR: a transfers-events handler that keeps its input and the sha256 of every file at a
# transfer's "location" (Drowse removes those files once the handler exits).
EVENTS_SH = r"""#!/bin/sh
out="$1"
n="$(date +%s%N).$$"
cat > "$out/events.$n.in"
exec "@PYTHON@" - "$out" "$n" <<'EOF'
import hashlib, json, os, sys
out, n = sys.argv[1], sys.argv[2]
doc = json.load(open(os.path.join(out, "events." + n + ".in")))
sums = {}
for t in doc.get("transfers", []):
    loc = t.get("location")
    if loc and os.path.isfile(loc):
        with open(loc, "rb") as f:
            sums[loc] = hashlib.sha256(f.read()).hexdigest()
env = {k: v for k, v in os.environ.items() if k.startswith("DROWSE_")}
tmp = os.path.join(out, "events." + n + ".tmp")
with open(tmp, "w") as f:
    json.dump({"doc": doc, "sha256": sums, "env": env}, f)
os.rename(tmp, os.path.join(out, "events." + n + ".json"))
EOF
"""


# ----------------------------------------------------------------------------- helpers

def note_log(d, app: str, pause: float = 0) -> tuple[list[str], Path]:
    """argv of a note-log.sh handler for `app`, and its log file."""
    script = d.bin / "note-log.sh"
    if not script.exists():
        d.write_script("note-log.sh", NOTE_LOG_SH)
    log = d.out_dir(app) / "notes.log"
    argv = [str(script), str(log)] + ([str(pause)] if pause else [])
    return argv, log


def entries(log: Path) -> list[tuple[str, dict]]:
    """[(kind, payload)] in log order; kind is "started" or "done"."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        try:
            doc = json.loads(rest)
        except ValueError:
            doc = {"unparsed": rest}
        out.append((kind, doc))
    return out


def ids(log: Path, kind: str = "done") -> Counter:
    """How many times each notification id (or the whole payload, when it has none) reached `kind`."""
    c = Counter()
    for k, doc in entries(log):
        if k == kind:
            c[doc.get("id") or json.dumps(doc, sort_keys=True)] += 1
    return c


def wait_ids(log: Path, expected: set[str], timeout: float, kind: str = "done") -> Counter:
    return wait_until(lambda: (lambda c: c if expected <= set(c) else None)(ids(log, kind)), timeout,
                      what=f"{kind} lines for {sorted(expected)} in {log} (have: {dict(ids(log, kind))})")


# Room for every notification of a test to run at once (the default budget is 12 an hour).
BIG_BUDGET = "[notifications]\nmax_per_hour = 1000"


def start_app(broker, make_drowse, app="news", pause: float = 0, handler_deadline="10s", extra_config=BIG_BUDGET,
              minimum_interval: str | None = None, raw_notification: str = "", prefix: list[str] | None = None):
    """A started daemon with one app whose notification handler is note-log.sh (drowsed run
    under `prefix`, e.g. prlimit, when given)."""
    d = make_drowse(broker=broker, handler_deadline=handler_deadline, extra_config=extra_config)
    d.prefix = prefix or []
    argv, log = note_log(d, app, pause)
    lines = [f'id = "{app}"']
    if minimum_interval:
        lines += ["[fetch]", f"command = {json.dumps(d.recorder(app, name=app + '-fetch'))}",
                  f'minimum_interval = "{minimum_interval}"']
    lines += ["[notification]", f"command = {json.dumps(argv)}"]
    if raw_notification:
        lines.append(raw_notification)
    d.add_app(app, raw="\n".join(lines) + "\n")
    d.start()
    broker.wait_subscribed(notify_topic(app))
    return d, log


def fetch_starts(d, app: str) -> list[float]:
    return [r.start for r in d.runs(app + "-fetch")]


def notification_states(d) -> Counter:
    """How many recorded notifications are in each state (state.db, read beside the daemon)."""
    db = sqlite3.connect(str(d.state_dir / "state.db"), timeout=10)
    try:
        return Counter(dict(db.execute("SELECT state, count(*) FROM notifications GROUP BY state").fetchall()))
    finally:
        db.close()


def age_budget(d, seconds: float) -> None:
    """Moves every recorded use of an app's hourly budget `seconds` into the past: for
    max_per_hour, that much time has passed (the budget is counted from the store)."""
    db = sqlite3.connect(str(d.state_dir / "state.db"), timeout=10)
    with db:
        db.execute("UPDATE notifications SET budget_at = budget_at - ? WHERE budget_at IS NOT NULL", (seconds,))
    db.close()


# ----------------------------------------------------------------------------- (a) daemon down

def test_notifications_published_while_the_daemon_is_stopped_run_once_after_restart(broker, make_drowse):
    d, log = start_app(broker, make_drowse)
    d.push("news", "--id", "before")
    wait_ids(log, {"before"}, 15)

    assert d.stop(signal.SIGTERM) == 0, d.exit_note()
    sent = [f"offline-{i:02d}" for i in range(20)]
    for i, nid in enumerate(sent):
        d.push("news", "--id", nid, "-d", f"n={i}")  # QoS 1, PUBACKed by the broker: queued in the session
    d.start()

    wait_ids(log, set(sent), 30)
    d.wait_idle()  # a second run, of what was received, would have run by now
    done, started = ids(log, "done"), ids(log, "started")
    assert done == Counter({nid: 1 for nid in sent + ["before"]}), f"runs per id: {dict(done)}"
    assert started == done, f"started: {dict(started)}"


def test_sigterm_while_a_handler_runs_does_not_run_it_twice(broker, make_drowse):
    d, log = start_app(broker, make_drowse, pause=2)
    d.push("news", "--id", "running")
    wait_ids(log, {"running"}, 10, kind="started")
    assert d.stop(signal.SIGTERM) == 0, d.exit_note()
    d.push("news", "--id", "while-down")
    # A handler left running finishes on its own (2 s): wait until no process of this daemon is left.
    wait_until(lambda: not stray_pids(str(d.base)), 10, what="the handler left running to end")
    d.start()
    wait_ids(log, {"running", "while-down"}, 20)
    # A rerun of "running" would be started by the restarted daemon: it is done once no handler
    # runs or waits.
    wait_until(lambda: (lambda st: st["running_handlers"] == 0 and st["queued_handlers"] == 0)(d.status()), 10,
               what="no handler running or queued")
    done = ids(log, "done")
    # Either outcome is fine: the daemon waits for the handler (one run) or stops it and runs the
    # notification again after the restart (one completed run). Two completed runs are not.
    assert done == Counter({"running": 1, "while-down": 1}), f"completed runs per id: {dict(done)}"


# ----------------------------------------------------------------------------- (b) broker restart

def test_broker_restart_mid_stream_loses_and_repeats_nothing(broker, make_drowse):
    d, log = start_app(broker, make_drowse)
    d.wait_mqtt_connected(True)
    first = [f"a-{i:02d}" for i in range(10)]
    second = [f"b-{i:02d}" for i in range(10)]
    for nid in first:
        d.push("news", "--id", nid)
    broker.stop()   # SIGTERM right away: some of the first ten may be in flight; mosquitto saves its sessions
    broker.start()  # same port and persistence dir
    for nid in second:  # possibly before drowsed is back: its persistent session queues them
        d.push("news", "--id", nid)

    wait_ids(log, set(first + second), 30)
    d.wait_idle()
    done = ids(log, "done")
    assert done == Counter({nid: 1 for nid in first + second}), f"runs per id: {dict(done)}"
    assert ids(log, "started") == done
    d.wait_mqtt_connected(True, timeout=15)


# ----------------------------------------------------------------------------- (c) kill -9 mid-run

def test_kill_9_during_a_handler_reruns_that_notification_but_not_a_finished_one(broker, make_drowse):
    d, log = start_app(broker, make_drowse, pause=3, handler_deadline="10s")
    d.push("news", "--id", "finished-1")
    wait_ids(log, {"finished-1"}, 15)

    d.push("news", "--id", "cut-2")
    wait_ids(log, {"cut-2"}, 15, kind="started")
    rc = d.stop(signal.SIGKILL)  # the handler of cut-2 is sleeping: recorded, not handled
    assert rc == -signal.SIGKILL, d.exit_note()
    assert ids(log, "done")["cut-2"] == 0, "the handler finished before the kill: the test's timing is off"
    d.start()

    # Handled again after the restart (at least once for an interrupted run). The orphaned first run
    # may still finish on its own, so count the starts.
    wait_until(lambda: ids(log, "started")["cut-2"] >= 2, 20, what="cut-2 to be started again after the restart")
    wait_until(lambda: ids(log, "done")["cut-2"] >= 1, 10, what="cut-2's rerun to finish")
    d.wait_idle()
    started = ids(log, "started")
    assert started["cut-2"] == 2, f"cut-2 should run exactly once more after the restart: {dict(started)}"
    assert started["finished-1"] == 1, f"a notification handled before the kill ran again: {dict(started)}"
    # The rerun says it may be a repeat (DROWSE_ATTEMPT): its first start was recorded, its end was not.
    assert ids(log, "attempt1") == Counter({"finished-1": 1, "cut-2": 1}), dict(ids(log, "attempt1"))
    assert ids(log, "attempt2") == Counter({"cut-2": 1}), dict(ids(log, "attempt2"))


# timed-log.sh LOG: "started <unix time> <payload>" when it starts, "done <unix time> <payload>" at its end.
TIMED_LOG_SH = r"""#!/bin/sh
p="$(tr -d '\n')"
printf 'started %s %s\n' "$(date +%s.%N)" "$p" >> "$1"
printf 'done %s %s\n' "$(date +%s.%N)" "$p" >> "$1"
"""


def start_logging_app(broker, make_drowse, script: str, text: str):
    """A started daemon whose app "news" runs `script` (written from `text`) with a log file as its
    argument: the daemon and that log (news/<script>.log)."""
    d = make_drowse(broker=broker, extra_config=BIG_BUDGET)
    d.write_script(script, text)
    log = d.out_dir("news") / (script.removesuffix(".sh") + ".log")
    d.add_app("news", raw=f'id = "news"\n[notification]\ncommand = {json.dumps([str(d.bin / script), str(log)])}\n')
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    return d, log


def test_kill_9_at_random_moments_loses_nothing_and_repeats_only_interrupted_runs(broker, make_drowse):
    """60 notifications published 0.1 s apart while drowsed is killed with SIGKILL 6 times at seeded
    random moments (and restarted 0.1-0.6 s later): each is handled, and a handler starts again only
    for a run a kill interrupted: between two starts of one notification there is always a kill."""
    rng = random.Random(6)
    d, log = start_logging_app(broker, make_drowse, "timed-log.sh", TIMED_LOG_SH)
    wanted = [f"k-{i:02d}" for i in range(60)]
    kills = []  # (just before SIGKILL, once drowsed is gone)
    stop = threading.Event()

    def killer():
        t0 = time.monotonic()
        for at in sorted(rng.uniform(0.3, 5.7) for _ in range(6)):
            if stop.wait(max(0, t0 + at - time.monotonic())):
                return
            before = time.time()
            rc = d.stop(signal.SIGKILL)
            kills.append((before, time.time(), rc))
            time.sleep(rng.uniform(0.1, 0.6))
            d.start(wait=False)

    k = threading.Thread(target=killer)
    k.start()
    try:
        for nid in wanted:
            d.push("news", "--id", nid)
            time.sleep(0.1)
    finally:
        stop.set()
        k.join(30)
    assert kills and all(rc == -signal.SIGKILL for _, _, rc in kills), kills
    d.wait_ready()

    def runs(kind):
        out = {}
        for line in (log.read_text(errors="replace") if log.exists() else "").splitlines():
            what, t, payload = line.split(" ", 2)
            if what == kind:
                out.setdefault(json.loads(payload)["id"], []).append(float(t))
        return out

    wait_until(lambda: set(wanted) <= set(runs("done")), 60, what="every notification to be handled")
    d.wait_idle()
    starts = runs("started")
    assert set(starts) == set(wanted), f"unexpected ids: {set(starts) ^ set(wanted)}"
    # A handler stamps its start after sh and date have run: one that the killed drowsed started
    # just before the SIGKILL (its payload already in its pipe) may stamp a few ms after the kill.
    late = 0.25
    for nid, ts in starts.items():
        ts.sort()
        for first, second in zip(ts, ts[1:]):
            assert any(first < gone + late and before < second for before, gone, _ in kills), \
                f"{nid} started at {first:.3f} and again at {second:.3f} with no kill in between: {kills}"


# burst-log.sh LOG: "started <unix time> <DROWSE_ATTEMPT> <payload>", 50 ms of work, then "done …".
BURST_LOG_SH = r"""#!/bin/sh
p="$(tr -d '\n')"
printf 'started %s %s %s\n' "$(date +%s.%N)" "${DROWSE_ATTEMPT:-0}" "$p" >> "$1"
sleep 0.05
printf 'done %s %s %s\n' "$(date +%s.%N)" "${DROWSE_ATTEMPT:-0}" "$p" >> "$1"
"""


def test_kill_9_in_the_middle_of_a_burst_loses_nothing_and_repeats_no_finished_run(broker, make_drowse):
    """400 notifications published back to back (most wait for one of the 8 handler slots, their
    starts counted and synced in groups), drowsed killed with SIGKILL once a quarter are done, then
    restarted: every one is handled; one that starts again does so with DROWSE_ATTEMPT 2 or more; and
    none whose run had ended (its end logged well before the kill) runs again."""
    d, log = start_logging_app(broker, make_drowse, "burst-log.sh", BURST_LOG_SH)
    wanted = [f"b-{i:03d}" for i in range(400)]

    def runs(kind):
        out = {}
        for line in (log.read_text(errors="replace") if log.exists() else "").splitlines():
            what, t, attempt, payload = line.split(" ", 3)
            if what == kind:
                out.setdefault(json.loads(payload)["id"], []).append((float(t), int(attempt)))
        return out

    broker.publish_many(notify_topic("news"),
                        [json.dumps({"aps": {"content-available": 1}, "id": nid}).encode() for nid in wanted])
    wait_until(lambda: len(runs("done")) >= 100, 60, what="a quarter of the burst to be handled")
    killed_at = time.time()
    rc = d.stop(signal.SIGKILL)
    assert rc == -signal.SIGKILL, d.exit_note()
    done_before = runs("done")
    assert len(done_before) < len(wanted), "the whole burst was handled before the kill: the test's timing is off"
    d.start()
    wait_until(lambda: set(wanted) <= set(runs("done")), 120, what="every notification of the burst to be handled")
    d.wait_idle()
    starts = runs("started")
    assert set(starts) == set(wanted), f"unexpected ids: {set(starts) ^ set(wanted)}"
    repeated = {nid: ts for nid, ts in starts.items() if len(ts) > 1}
    for nid, ts in repeated.items():
        assert all(attempt >= 2 for _, attempt in sorted(ts)[1:]), f"{nid} started again without DROWSE_ATTEMPT >= 2: {ts}"
    # A run's end is written to the WAL as the handler is reaped: one that ended well before the
    # kill is on record, and is not run again.
    ended_early = {nid for nid, ts in done_before.items() if min(t for t, _ in ts) < killed_at - 0.5}
    assert ended_early, "no run ended well before the kill: the test's timing is off"
    again = sorted(nid for nid in ended_early if len(starts[nid]) > 1)
    assert not again, f"runs that had ended before the kill ran again: {again}"
    print(f"\nburst kill -9: {len(done_before)} of {len(wanted)} handled before the kill, "
          f"{len(repeated)} started again after it (all with DROWSE_ATTEMPT >= 2)")


STRACE = shutil.which("strace")


def warmed_up(broker, make_drowse):
    """A started app that has handled one notification, whose PUBACK the broker has; with counters
    of PUBACKs from drowsed and of PUBLISHes the broker sent it (from the broker's log)."""
    d, log = start_app(broker, make_drowse)
    d.push("news", "--id", "warm-up")
    wait_ids(log, {"warm-up"}, 10)
    acks = lambda: broker.log_text().count(f"Received PUBACK from drowse-{d.device_id}")  # noqa: E731
    sends = lambda: broker.log_text().count(f"Sending PUBLISH to drowse-{d.device_id}")  # noqa: E731
    # The warm-up's PUBACK leaves after its record is synced, which may be after its handler ran.
    wait_until(lambda: acks() >= 1, 10, what="the warm-up's PUBACK")
    return d, log, acks, sends


def fault_pwrite(d, inject: str) -> subprocess.Popen:
    """strace on every thread of drowsed, injecting `inject` (e.g. error=ENOSPC) into each pwrite64."""
    tracer = subprocess.Popen([STRACE, "-f", "-qq", "-p", str(d.proc.pid), "-e", "trace=pwrite64",
                               "-e", f"inject=pwrite64:{inject}", "-o", "/dev/null"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # strace attaches to every thread: each shows it as its tracer.
    def attached():
        tracers = [line.split()[1] for task in Path(f"/proc/{d.proc.pid}/task").glob("*")
                   for line in (task / "status").read_text().splitlines() if line.startswith("TracerPid:")]
        return tracer.poll() is not None or (tracers and all(t == str(tracer.pid) for t in tracers))
    wait_until(attached, 10, what="strace to attach to every thread")
    if tracer.poll() is not None:
        pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode(errors='replace')}")
    return tracer


@pytest.mark.skipif(STRACE is None, reason="needs strace (fault injection: delayed pwrite64)")
def test_a_crash_between_receipt_and_record_does_not_lose_the_notification(broker, make_drowse):
    d, log, acks, sends = warmed_up(broker, make_drowse)
    acks0, sends0 = acks(), sends()

    # Hold every pwrite64 of drowsed (SQLite's WAL writes) for 5 s from now on.
    tracer = fault_pwrite(d, "delay_enter=5000000")
    try:
        d.push("news", "--id", "in-the-gap")
        # The PUBLISH reached drowsed (the broker logs sending it); its PUBACK must wait for the record.
        wait_until(lambda: sends() > sends0, 5, what="the broker to send the notification")
        time.sleep(1.0)  # a PUBACK sent on receipt would have reached the broker in milliseconds
        assert acks() == acks0, "the broker got a PUBACK although the record was still held"
        assert ids(log, "started")["in-the-gap"] == 0, "the handler ran although the record was held"
        d.stop(signal.SIGKILL)
    finally:
        tracer.kill()
        tracer.wait(timeout=10)
    d.start()
    # Redelivered by the broker (not acknowledged) or found in the store: handled either way.
    wait_ids(log, {"in-the-gap"}, 10)


@pytest.mark.skipif(STRACE is None, reason="needs strace (fault injection: pwrite64 fails with ENOSPC)")
def test_a_notification_that_cannot_be_recorded_is_left_to_the_broker_and_handled_once_later(broker, make_drowse):
    d, log, acks, sends = warmed_up(broker, make_drowse)
    acks0, sends0 = acks(), sends()

    # The disk is "full": every pwrite64 of drowsed (SQLite's writes) fails with ENOSPC.
    tracer = fault_pwrite(d, "error=ENOSPC")
    try:
        d.push("news", "--id", "while-full")
        # Delivered, not recorded, so not acknowledged: drowsed drops the connection instead and the
        # broker delivers it again on every reconnect.
        wait_until(lambda: sends() >= sends0 + 2, 15, what="the broker to deliver the notification again")
        assert acks() == acks0, "the broker got a PUBACK for a notification that was never recorded"
        assert ids(log, "started")["while-full"] == 0, "the handler ran without a record"
        assert d.status()["version"], "the daemon stops serving its API"
    finally:
        tracer.kill()
        tracer.wait(timeout=10)
    # Space again: the next redelivery is recorded, acknowledged and handled, once.
    wait_ids(log, {"while-full"}, 90)
    wait_until(lambda: acks() > acks0, 10, what="the PUBACK after the record")
    d.push("news", "--id", "after")
    wait_ids(log, {"after"}, 10)
    d.wait_idle()
    started = ids(log, "started")
    assert started["while-full"] == 1 and started["warm-up"] == 1, dict(started)


# ----------------------------------------------------------------------------- (d) duplicates

def test_duplicates_by_id_and_by_identical_payload_run_once(broker, make_drowse):
    d, log = start_app(broker, make_drowse)
    for _ in range(3):
        d.push("news", "--id", "same-id", "-d", "content-id=1")
    for _ in range(2):
        d.push("news", "-d", "content-id=2")  # no id: the same topic and payload twice
    d.push("news", "--id", "marker")  # published last: everything before it has arrived when it ran

    wait_ids(log, {"same-id", "marker"}, 15)
    wait_until(lambda: sum(ids(log).values()) >= 3, 10, what="the payload without id to run")
    d.wait_idle()  # each duplicate was received before the marker: one not dropped would have run
    runs = [doc for kind, doc in entries(log) if kind == "done"]
    assert sorted(doc.get("content-id", 0) for doc in runs) == [0, 1, 2], f"handler runs: {runs}"


# ----------------------------------------------------------------------------- (e) collapse-id

BUDGET_1 = "[notifications]\nmax_per_hour = 1"


def test_deferred_notifications_with_one_collapse_id_keep_only_the_newest(broker, make_drowse):
    d, log = start_app(broker, make_drowse, app="col", extra_config=BUDGET_1, minimum_interval="3s")
    d.push("col", "--id", "first")  # within the budget (1 per hour): runs now
    wait_ids(log, {"first"}, 10, kind="started")
    # Right after a fetch window, so that the next one (≥ 3 s later) comes after all three; they go
    # over one connection in a fraction of a second.
    before = len(fetch_starts(d, "col"))
    wait_until(lambda: len(fetch_starts(d, "col")) > before, 15, what="a fetch window")
    t_push = time.time()
    broker.publish_many(notify_topic("col"), [
        json.dumps({"aps": {"content-available": 1}, "id": f"c{n}", "collapse-id": "score", "n": n}).encode()
        for n in (1, 2, 3)])  # over the budget: deferred, each collapsing the one before
    pushed = time.time()
    between = [t for t in fetch_starts(d, "col") if t_push <= t <= pushed + 0.1]
    assert not between, f"a fetch window opened while the notifications were being published ({between}, " \
                        f"published {t_push:.3f}..{pushed:.3f}): timing is off"
    wait_until(lambda: notification_states(d)["collapsed"] == 2 and notification_states(d)["deferred"] == 1, 5,
               what="c1 and c2 collapsed into the deferred c3")
    # An hour passes for the budget: the next window has room for one (and releases no more).
    age_budget(d, 3600)

    wait_ids(log, {"c3"}, 15)
    d.wait_idle()  # the window released what it released at once
    done = ids(log)
    assert done == Counter({"first": 1, "c3": 1}), f"runs per id: {dict(done)}"
    # It ran because a window opened.
    wait_until(lambda: [t for t in fetch_starts(d, "col") if t > pushed], 5, what="a fetch window after the pushes")


# ----------------------------------------------------------------------------- (f) expiration

def test_expired_notifications_never_run_on_receipt_or_after_deferral(broker, make_drowse):
    d, log = start_app(broker, make_drowse, app="exp", extra_config=BUDGET_1, minimum_interval="5s")
    refused0 = d.status()["mqtt"]["refused_notifications"]
    # Expired on receipt, while the budget still has room: it would run at once if not checked.
    d.push("exp", "--id", "stale", "--expiration", str(int(time.time()) - 60))
    d.push("exp", "--id", "first")  # uses up the budget
    wait_ids(log, {"first"}, 10, kind="started")

    # Right after a fetch window: the next one is ≥ 5 s away.
    before = len(fetch_starts(d, "exp"))
    wait_until(lambda: len(fetch_starts(d, "exp")) > before, 15, what="a fetch window")
    window1 = max(fetch_starts(d, "exp"))
    expires = time.time() + 2
    broker.publish_many(notify_topic("exp"), [
        # deferred (budget spent), and expired by the next window
        json.dumps({"aps": {"content-available": 1}, "id": "short-lived", "expiration": round(expires, 3)}).encode(),
        # deferred too, without an expiration: shows that the window flushed the deferred ones
        json.dumps({"aps": {"content-available": 1}, "id": "keeper"}).encode(),
    ])
    assert time.time() < window1 + 3, "publishing took too long for this test's timing"
    wait_until(lambda: notification_states(d)["deferred"] == 2, 5, what="both deferred")
    age_budget(d, 3600)  # an hour passes for the budget: the next window has room again

    wait_ids(log, {"keeper"}, 20)
    # The window's fetch runs alongside the flushed notification: its record may land a moment later.
    ran_at = wait_until(lambda: [t for t in fetch_starts(d, "exp") if t > window1], 5, what="the next fetch window")
    assert min(ran_at) > expires, f"the next window ({ran_at}) did not come after the expiry ({expires})"
    d.wait_idle()  # the window flushed the deferred ones at once
    started = ids(log, "started")
    assert started == Counter({"first": 1, "keeper": 1}), f"runs per id: {dict(started)}"
    assert d.status()["mqtt"]["refused_notifications"] >= refused0 + 1


# ----------------------------------------------------------------------------- (g) priority 10

def test_priority_10_runs_at_once_when_the_budget_is_spent(broker, make_drowse):
    d, log = start_app(broker, make_drowse, extra_config=BUDGET_1)  # no fetch interval: no windows
    d.push("news", "--id", "first")
    wait_ids(log, {"first"}, 10)
    d.push("news", "--id", "normal", "--priority", "5")  # over budget: deferred
    t0 = time.monotonic()
    d.push("news", "--id", "urgent", "--priority", "10")
    wait_ids(log, {"urgent"}, 5, kind="started")
    assert time.monotonic() - t0 < 3, "priority 10 did not run at once"
    # The other stays deferred (no fetch interval: no window releases it).
    wait_until(lambda: notification_states(d)["deferred"] == 1, 5, what="the normal one to be deferred")
    d.wait_idle()
    assert ids(log, "started") == Counter({"first": 1, "urgent": 1}), dict(ids(log, "started"))


# ----------------------------------------------------------------------------- (h) push to transfer

def test_signed_notification_with_download_runs_the_events_handler_with_the_file(broker, nginx, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="10s")
    key = d.base / "provider.key"
    d.cli_ok("keygen", str(key))
    pub = (d.base / "provider.key.pub").read_text().strip()
    events = d.write_script("events.sh", EVENTS_SH.replace("@PYTHON@", sys.executable))

    def app(name: str, public_key: bool, allow_download: bool):
        argv, log = note_log(d, name)
        out = d.out_dir(name + "-events")
        lines = [f'id = "{name}"', "[notification]", f"command = {json.dumps(argv)}"]
        if public_key:
            lines.append(f'public_key = "{pub}"')
        if allow_download:
            lines.append("allow_download = true")
        lines += ["[transfers]", f"events_command = {json.dumps([str(events), str(out)])}"]
        d.add_app(name, raw="\n".join(lines) + "\n")
        return log, out

    dl_log, dl_out = app("dl", public_key=True, allow_download=True)
    nokey_log, nokey_out = app("nokey", public_key=False, allow_download=True)
    noallow_log, noallow_out = app("noallow", public_key=True, allow_download=False)
    d.start()
    for a in ("dl", "nokey", "noallow"):
        broker.wait_subscribed(notify_topic(a))

    files = {name: nginx.add_file(f"{name}.bin", 300_000) for name in ("pos", "unsigned", "unverified", "noallow")}

    def payload(nid: str, name: str) -> str:
        url, digest, _ = files[name]
        return json.dumps({"aps": {"content-available": 1}, "id": nid,
                           "download": {"url": url, "sha256": digest, "size": 300_000, "session": "push-s"}})

    # The real thing: signed, to an app with the key and allow_download.
    d.push("dl", "--payload", payload("dl-1", "pos"), "--sign", str(key))
    # Not allowed: unsigned to an app with allow_download but no key; signed (so unverifiable) to the same
    # app; signed and verified to an app without allow_download.
    d.push("nokey", "--payload", payload("nk-1", "unsigned"))
    d.push("nokey", "--payload", payload("nk-2", "unverified"), "--sign", str(key))
    d.push("noallow", "--payload", payload("na-1", "noallow"), "--sign", str(key))

    result_file = wait_until(lambda: sorted(dl_out.glob("events.*.json")), 30, what="the events handler of 'dl'")[0]
    result = json.loads(result_file.read_text())
    doc = result["doc"]
    assert doc.get("event") == "transfers" and doc.get("app") == "dl", doc
    assert doc.get("session") == "push-s", doc
    assert result["env"].get("DROWSE_EVENT") == "transfers", result["env"]
    [t] = doc["transfers"]
    url, digest, _ = files["pos"]
    assert t["url"] == url and t["state"] == "completed" and t["kind"] == "download", t
    assert t["bytes_done"] == 300_000, t
    assert result["sha256"].get(t["location"]) == digest, f"file at location {t['location']!r}: {result['sha256']}"
    assert [e for e in nginx.access_entries() if e["uri"] == "/files/pos.bin" and e["status"] in (200, 206)]

    # The others ran their notification handler like any notification, and downloaded nothing.
    wait_ids(nokey_log, {"nk-1", "nk-2"}, 15)
    wait_ids(noallow_log, {"na-1"}, 15)
    d.wait_idle()
    # A download is a transfer from the notification's receipt on: none was made for them.
    for name in ("nokey", "noallow"):
        assert d.json("transfers", "--app", name) == [], f"{name} got a transfer: {d.json('transfers', '--app', name)}"
    requested = {e["uri"] for e in nginx.access_entries()}
    for name in ("unsigned", "unverified", "noallow"):
        assert f"/files/{name}.bin" not in requested, f"{name}.bin was downloaded: {nginx.access_entries()}"
    for name in ("nokey", "noallow"):
        assert d.json("transfers", "--app", name) == [], f"{name} got a transfer"
    assert not list(nokey_out.glob("events.*")) and not list(noallow_out.glob("events.*"))
    assert ids(nokey_log) == Counter({"nk-1": 1, "nk-2": 1}) and ids(noallow_log) == Counter({"na-1": 1})


# ----------------------------------------------------------------------------- (i) dead link

def test_dead_link_is_noticed_within_one_and_a_half_keepalives_and_recovered(broker, make_drowse):
    keepalive = 5.0
    d = make_drowse(broker=broker, handler_deadline="5s")
    d.set_mqtt(keepalive="5s")
    argv, log = note_log(d, "news")
    d.add_app("news", notification=argv)
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    d.wait_mqtt_connected(True)

    d.push("news", "--id", "before")  # traffic: the daemon's PUBACK is its last packet before the stop
    wait_ids(log, {"before"}, 10)
    broker.pause()
    stopped = time.monotonic()
    try:
        limit = 1.5 * keepalive + 3
        d.wait_mqtt_connected(False, timeout=limit + 5)
        noticed = time.monotonic() - stopped
        assert noticed <= limit, f"the dead link was noticed after {noticed:.1f}s (limit {limit}s)"
        assert d.status()["mqtt"]["connected"] is False
    finally:
        broker.resume()
    d.wait_mqtt_connected(True, timeout=30)
    d.push("news", "--id", "after")
    wait_ids(log, {"after"}, 15)
    print(f"dead link noticed {noticed:.2f}s after SIGSTOP (keepalive {keepalive}s)")


def insert_pending(d, app: str, nid: str) -> None:
    """A notification recorded as pending before a crash (state.db, beside a stopped daemon)."""
    db = sqlite3.connect(str(d.state_dir / "state.db"), timeout=10)
    with db:
        db.execute("INSERT INTO notifications(app, dedupe_key, payload, received_at, state) VALUES (?, ?, ?, ?, 'pending')",
                   (app, nid, json.dumps({"aps": {"content-available": 1}, "id": nid}), time.time()))
    db.close()


def test_notifications_for_an_app_whose_file_cannot_be_used_are_held_until_it_can(broker, make_drowse):
    """An app file emptied (a power cut after an unsynced write, an edit in progress): the
    notifications recorded before and those arriving meanwhile are kept, not acknowledged and
    dropped, and run once each when the file is valid again (a reload). An app whose file is gone
    gets its notifications refused."""
    d, log = start_app(broker, make_drowse)
    app_file = d.apps_dir / "news.toml"
    good = app_file.read_text()
    d.push("news", "--id", "before-1")
    wait_ids(log, {"before-1"}, 15)

    # A restart finds the file empty, with a notification still pending from before.
    d.stop(signal.SIGKILL)
    insert_pending(d, "news", "pending-2")
    app_file.write_text("")
    d.start()
    wait_until(lambda: d.status()["mqtt"].get("subscribed"), 20, what="the session")
    for n in ("held-3", "held-4"):
        d.push("news", "--id", n)
    wait_until(lambda: notification_states(d)["held"] == 2 and notification_states(d)["held-checked"] == 1, 30,
               what=f"three held notifications (states: {dict(notification_states(d))})")
    assert ids(log, "started") == Counter({"before-1": 1})

    app_file.write_text(good)
    d.proc.send_signal(signal.SIGHUP)
    wait_ids(log, {"pending-2", "held-3", "held-4"}, 30)
    d.wait_idle()
    assert ids(log, "started") == Counter({"before-1": 1, "pending-2": 1, "held-3": 1, "held-4": 1}), dict(ids(log, "started"))
    assert notification_states(d)["held"] == 0 and notification_states(d)["held-checked"] == 0

    # An app with no file at all is gone: what it had pending is dropped, not held.
    d.stop(signal.SIGTERM)
    insert_pending(d, "gone", "gone-5")
    d.start()
    wait_until(lambda: notification_states(d)["dropped"] == 1, 15, what=f"the gone app's notification dropped ({dict(notification_states(d))})")
    assert notification_states(d)["held"] == 0 and notification_states(d)["held-checked"] == 0
