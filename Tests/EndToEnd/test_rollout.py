"""Staged rollouts (docs/fleets.md): a notification's `spread` makes each device act at its own
delay in [0, spread), drawn from its device id and the notification id, so a fleet's downloads
arrive flat over the window; the delay survives a restart; downloads honour Retry-After on 429/503;
`drowse fleet` lists the whole fleet, SIGKILLed devices offline by their last will.
Everything on 127.0.0.1: one mosquitto, one nginx (or the scripted server), real drowsed instances.
"""

from __future__ import annotations

import email.utils
import json
import subprocess
import random
import signal
import time

from drowse_e2e import DROWSE, notify_topic, sha256_file, wait_until
from hostile_server import error, serve
from rollout import Fleet, fleet_json, kill_and_check_fleet, kill_indices, max_in_window, rollout_delay, run_round

N = 12
SPREAD = 6.0


def test_a_spread_rollout_spreads_the_downloads_over_the_window(broker, nginx, make_drowse, workdir):
    fleet = Fleet(workdir, broker, N, make=lambda name, device_id: make_drowse(
        broker=broker, handler_deadline="20s", name=name, device_id=device_id))
    fleet.start()

    zero = run_round(fleet, nginx, "fw-zero", 256 * 1024, 0, 60)
    spread = run_round(fleet, nginx, "fw-spread", 256 * 1024, SPREAD, SPREAD + 60)

    for r in (zero, spread):
        assert r["sha256"] == {d.device_id: r["digest"] for d in fleet.devices}, r["sha256"]
        assert len(r["starts"]) == N, r["starts"]
    states = fleet.transfer_states()
    assert all(s == ["completed", "completed"] for s in states.values()), states

    z = list(zero["starts"].values())
    s = list(spread["starts"].values())
    # Without a spread every device asks at once; with it, each asks at its own delay.
    assert max(z) - zero["t0"] < 3.0, sorted(t - zero["t0"] for t in z)
    assert max_in_window(z) >= N * 3 // 4, sorted(t - zero["t0"] for t in z)
    assert max_in_window(s) <= N // 2, sorted(t - spread["t0"] for t in s)
    assert max_in_window(s) < max_in_window(z)
    # Each device started at the delay drawn from its id and the notification id (reproducible),
    # never before it, and within the window.
    for d in fleet.devices:
        expected = rollout_delay(d.device_id, "fw-spread", SPREAD)
        started = spread["starts"][d.device_id] - spread["t0"]
        assert expected - 0.1 <= started <= expected + 2.5, (d.device_id, expected, started)
    assert max(s) - spread["t0"] < SPREAD + 2.5

    # SIGKILL every 10th (roll-000, roll-010): `drowse fleet` lists all 12, those two offline by
    # their last will, the others online with this build's version; --json parses.
    version = subprocess.run([str(DROWSE), "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    killed = [f"roll-{i:03d}" for i in kill_indices(N)]
    assert killed == ["roll-000", "roll-010"]
    f = kill_and_check_fleet(fleet)
    assert f["killed"] == killed and f["version"] == version, f
    assert (f["listed"], f["online"], f["offline"], f["text_lines"]) == (N, N - 2, 2, N), f
    assert f["will_seconds"] < 20 and f["seconds"] < 10, f
    doc, _ = fleet_json(broker)
    by_id = {e["device_id"]: e for e in doc}
    assert len(doc) == N and set(by_id) == {d.device_id for d in fleet.devices}, doc
    for dev, e in by_id.items():
        assert e["online"] is (dev not in killed), e
        if dev not in killed:
            assert e["version"] == version and e["app_count"] == 1 and e["failed_apps"] == [], e
    assert [d.device_id for d in fleet.running()] == sorted(set(by_id) - set(killed))

    # The others still stop cleanly, and then say so themselves (offline, kept retained).
    rcs = fleet.stop()
    assert sorted(rcs) == sorted(set(by_id) - set(killed)) and set(rcs.values()) == {0}, rcs
    doc = wait_until(lambda: (lambda d: d if all(e["online"] is False for e in d) else None)(fleet_json(broker)[0]), 20,
                     interval=0.3, what="every device offline after the stop")
    assert len(doc) == N, doc


def test_a_notification_waiting_for_its_delay_survives_a_restart_and_runs_at_its_time(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="5s", device_id="roll-restart")
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed(notify_topic("news", d.device_id))
    # An id whose delay leaves time to restart the daemon before it is due.
    nid = next(f"r{i}" for i in range(1000) if 6.0 <= rollout_delay(d.device_id, f"r{i}", 12) <= 9.0)
    delay = rollout_delay(d.device_id, nid, 12)

    t0 = time.time()
    d.push("news", "--id", nid, "--spread", "12", "-d", "content-id=7")
    wait_until(lambda: "rollout delay" in d.stderr_text(), 10, what="the notification to wait for its rollout delay")
    assert d.runs("news") == []
    d.stop(signal.SIGKILL)
    time.sleep(1.0)
    d.start()
    [run] = d.wait_runs("news", 1, timeout=delay + 15)
    assert run.json()["content-id"] == 7 and run.json()["spread"] == 12
    # At its time, counted from when it was received (not redrawn from the restart).
    assert delay - 0.2 <= run.start - t0 <= delay + 3.0, (delay, run.start - t0)
    d.wait_idle()
    assert len(d.runs("news")) == 1


def test_a_spread_that_is_not_a_sane_number_of_seconds_is_refused(broker, make_drowse):
    d = make_drowse(broker=broker, device_id="roll-bad")
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed(notify_topic("news", d.device_id))
    for bad in ("-1", "86401", "1e308", '"5"'):
        broker.publish(notify_topic("news", d.device_id), f'{{"aps":{{"content-available":1}},"spread":{bad}}}'.encode())
    d.push("news", "--id", "ok", "-d", "spread=0")
    [run] = d.wait_runs("news", 1, timeout=15)
    assert run.json()["id"] == "ok"
    d.wait_idle()  # the bad ones came before it (MQTT keeps order): one wrongly accepted has run
    assert len(d.runs("news")) == 1
    assert d.status()["mqtt"]["refused_notifications"] >= 4
    assert "key 'spread' must be a number of seconds" in d.stderr_text()
    r = d.cli("push", "--broker", broker.url, "--device", d.device_id, "--app", "news", "--spread", "-3", "--dry-run")
    assert r.returncode != 0


def test_retry_after_on_503_and_429_holds_the_retry_back(hostile_server, make_drowse, workdir):
    body = random.Random(13).randbytes(100_000)
    hostile_server.script("/a", [error(503, [("Retry-After", "3")])], then=serve(body))
    # An HTTP-date 4 s ahead, in whole seconds. drowsed's start and its first request take a
    # variable while, so what is checked is the date itself: no retry before it.
    when_epoch = float(int(time.time() + 4))
    when = email.utils.formatdate(when_epoch, usegmt=True)
    hostile_server.script("/b", [error(429, [("Retry-After", when)])], then=serve(body))
    # Garbage is ignored: the transfer's own backoff (0.5-1 s) applies.
    hostile_server.script("/c", [error(503, [("Retry-After", "soon")])], then=serve(body))
    d = make_drowse()
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    dest = {p: workdir / f"out-{p}.bin" for p in "abc"}
    ids = {p: d.download(hostile_server.url(f"/{p}"), "dl", "--to", str(dest[p])) for p in "abc"}
    for p, tid in ids.items():
        t = wait_until(lambda: (lambda t: t if t["state"] in ("completed", "failed") else None)(d.transfer(tid)), 30,
                       what=f"transfer {p}")
        assert t["state"] == "completed", (t, hostile_server.log())
        assert sha256_file(dest[p]) == sha256_file_bytes(body)
    gap = {p: (lambda rs: rs[1].at - rs[0].at)(hostile_server.requests_for(f"/{p}")) for p in "abc"}
    assert gap["a"] >= 3.0, gap
    # The server's clock for request times is monotonic: the retry's wall time is derived.
    wall = time.time() - time.monotonic()
    retry_b = hostile_server.requests_for("/b")[1].at + wall
    assert retry_b >= when_epoch - 0.1, (gap, when, retry_b - when_epoch)
    assert gap["c"] < 2.5, gap


def sha256_file_bytes(b: bytes) -> str:
    import hashlib
    return hashlib.sha256(b).hexdigest()


def test_a_fetch_window_inside_the_delay_carries_the_notification_early(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="5s", device_id="roll-window")
    d.add_app("ticker", fetch=d.recorder("ticker"), minimum_interval="4s")
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed(notify_topic("news", d.device_id))
    nid = next(f"w{i}" for i in range(1000) if rollout_delay(d.device_id, f"w{i}", 120) >= 60)
    t0 = time.time()
    d.push("news", "--id", nid, "--spread", "120")
    [run] = d.wait_runs("news", 1, timeout=20)
    assert run.start - t0 < 15, "it waited for its delay instead of riding a window"
    # It rode a window: a ticker fetch started within a moment of it.
    ticks = [r.start for r in d.wait_runs("ticker", 1)]
    assert min(abs(run.start - t) for t in ticks) < 1.0, (run.start, ticks)


def test_one_that_expires_while_it_waits_never_runs(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="5s", device_id="roll-expire")
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed(notify_topic("news", d.device_id))
    nid = next(f"e{i}" for i in range(1000) if rollout_delay(d.device_id, f"e{i}", 60) >= 20)
    d.push("news", "--id", nid, "--spread", "60", "--expiration", str(int(time.time()) + 3))
    wait_until(lambda: "notification dropped: expired" in d.stderr_text(), 15, what="the waiting notification to expire")
    assert d.runs("news") == []


def test_a_retry_after_wait_survives_a_restart(hostile_server, make_drowse, workdir):
    body = random.Random(14).randbytes(50_000)
    hostile_server.script("/r", [error(503, [("Retry-After", "6")])], then=serve(body))
    d = make_drowse()
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    dest = workdir / "out-r.bin"
    tid = d.download(hostile_server.url("/r"), "dl", "--to", str(dest))
    wait_until(lambda: d.transfer(tid).get("next_retry_at"), 10, what="the retry to be planned")
    d.restart()
    t = wait_until(lambda: (lambda t: t if t["state"] in ("completed", "failed") else None)(d.transfer(tid)), 30,
                   what="the transfer to finish")
    assert t["state"] == "completed", (t, hostile_server.log())
    reqs = hostile_server.requests_for("/r")
    assert reqs[1].at - reqs[0].at >= 6.0, hostile_server.log()
    assert sha256_file(dest) == sha256_file_bytes(body)
