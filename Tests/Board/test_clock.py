"""A board without a real-time clock (a Pi has none): it boots with its clock far behind (here from
`-rtc base=` three years back; systemd moves it up to its own build time), a time
sync then sets it forward, an operator sets it back. drowsed's rule (docs/design.md, "Time on a
board without a real-time clock"): what it plans and records is on its own timeline, the boot
clock, so a step of the wall clock is not time passing. Nothing comes due early (no burst),
nothing waits longer (no stall); only the wall times it shows move with the clock.

Checked in the guest, on outcomes: the times `drowse` shows, fetch runs a handler wrote down,
notifications a handler received, a transfer's retry time and retry count."""

from __future__ import annotations

import datetime
import json
import time

import pytest

from board import HOST_IN_GUEST
from conftest import DEVICE, STATE_DB, figure
from test_power import integrity_ok, mqtt_connected, wait_for

pytestmark = pytest.mark.vm  # power cuts, the QEMU monitor or the RTC at boot: not on a board over ssh

YEAR = 365 * 86400
# Fetches every 2 minutes: the next window is 2-3 minutes after a fetch (50 % tolerance).
INTERVAL = 120


def guest_now(b) -> float:
    return float(b.sh("date +%s.%N"))


def set_clock(b, t: float) -> float:
    """Sets the guest's wall clock as a time sync does (a step); returns the step."""
    before = guest_now(b)
    b.sh(f"date -s @{t:.3f} >/dev/null")
    return t - before


def status(b) -> dict:
    return json.loads(b.sh("drowse status --json"))


def fetches(b) -> list[str]:
    rc, out, _ = b.run("cat /var/lib/clock-app/fetches 2>/dev/null")
    return out.split()


def notes(b) -> list[str]:
    rc, out, _ = b.run("cat /var/lib/clock-app/notes 2>/dev/null")
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


def transfer(b, tid: str) -> dict:
    return json.loads(b.sh(f"drowse transfer show {tid} --json"))


def near(a: float, b: float, slack: float = 5.0) -> bool:
    return abs(a - b) <= slack


def test_clock_far_behind_then_set_forward_and_back(configured, broker, nginx):
    b = configured
    # An app that fetches every 2 minutes and notes each notification; notifications may use the
    # radio once an hour, so a second one waits (deferred) for the hour or the next fetch window.
    b.sh("mkdir -p /var/lib/clock-app")
    b.write_file("/etc/drowse/apps.d/clockapp.toml",
                 'id = "clockapp"\n'
                 'working_directory = "/var/lib/clock-app"\n'
                 "[fetch]\n"
                 'command = ["/bin/sh", "-c", "date +%s >>fetches && sync fetches"]\n'
                 f'minimum_interval = "{INTERVAL}s"\n'
                 "[notification]\n"
                 'command = ["/bin/sh", "-c", "line=$(cat); printf \'%s\\\\n\' \\"$line\\" >>notes && sync notes"]\n'
                 "[transfers]\n"
                 'events_command = ["/bin/true"]\n')
    b.run("cat >>/etc/drowse/drowse.toml", check=True, input="\n[notifications]\nmax_per_hour = 1\n")
    b.sh("drowsed --check-config --config /etc/drowse/drowse.toml")
    b.sh("systemctl reload drowsed")
    wait_for(b, "clockapp to be loaded", lambda: b.run("drowse apps show clockapp --json")[0] == 0, 60)
    # Nothing may set the clock but this test: no time sync service, no saved clock.
    b.run("systemctl disable --now systemd-timesyncd 2>/dev/null; rm -f /var/lib/systemd/timesync/clock")

    # Something recorded at today's date: a small download, finished.
    (nginx.www / "files").mkdir(parents=True, exist_ok=True)
    (nginx.www / "files" / "clock-small").write_bytes(b"x" * 1000)
    small = b.sh(f"drowse transfer download http://{HOST_IN_GUEST}:{nginx.port}/files/clock-small "
                 "--app clockapp --to /var/lib/clock-app/small").strip()
    b.sh(f"drowse transfer wait {small}", timeout=120)

    # ---- A boot with the clock far behind the times state.db recorded.
    host_now = time.time()
    b.rtc_base = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=3 * 365)).strftime("%Y-%m-%dT%H:%M:%S")
    b.reboot()
    g0 = guest_now(b)
    # systemd never lets the clock start before its own build time (its clock epoch), so the
    # guest comes up months behind rather than three years: still far behind state.db's times.
    figure("clock test: guest clock behind the host at boot (days)", f"{(host_now - g0) / 86400:.0f}")
    assert g0 < host_now - 30 * 86400, f"the guest booted with its clock at {g0}, not far behind {host_now}"
    wait_for(b, "MQTT connected", lambda: mqtt_connected(b), 120)
    # The store's records were moved back with the clock: none is in the future, so intervals,
    # budgets and waits count from now rather than from years ahead.
    latest = float(b.sh(f"sqlite3 {STATE_DB} \"SELECT MAX(x) FROM (SELECT MAX(ended_at) AS x FROM runs "
                        f"UNION ALL SELECT MAX(received_at) FROM notifications UNION ALL SELECT MAX(finished_at) FROM transfers)\""))
    assert latest <= guest_now(b) + 60, f"a record at {latest} is in the future of the guest's clock"
    shown = transfer(b, small)
    assert shown["state"] == "completed" and shown["finished_at"] <= guest_now(b) + 60, shown

    # Its first fetch came before the reboot; the next one comes at its time after the boot.
    n0 = len(fetches(b))
    wait_for(b, "clockapp's fetch after the boot", lambda: len(fetches(b)) == n0 + 1, 300)
    n1 = n0 + 1
    topic = f"drowse/{DEVICE}/apps/clockapp/notify"
    broker.publish(topic, json.dumps({"aps": {"content-available": 1}, "id": "c1"}).encode())
    wait_for(b, "the first notification", lambda: notes(b) == ["c1"], 60)
    broker.publish(topic, json.dumps({"aps": {"content-available": 1}, "id": "c2"}).encode())
    # A download the server refuses for 10 minutes (503, Retry-After: 600): its retry is planned.
    url = f"http://{HOST_IN_GUEST}:{nginx.port}/unavailable/blob"
    tid = b.sh(f"drowse transfer download {url} --app clockapp --to /var/lib/clock-app/blob").strip()
    wait_for(b, "the retry to be planned", lambda: transfer(b, tid).get("next_retry_at"), 60)
    time.sleep(2)
    assert notes(b) == ["c1"], "the second notification should wait for the hour's budget"

    # ---- The time sync: the clock jumps forward by about three years.
    before = status(b)["next_window"]
    retry = transfer(b, tid)
    step = set_clock(b, time.time())
    figure("clock test: forward step (days)", f"{step / 86400:.0f}")
    time.sleep(2)
    after = status(b)["next_window"]
    assert before is not None and after is not None
    # The window keeps its wait: shown later by the step, not due now.
    assert near(after, before + step), (before, after, step)
    moved = transfer(b, tid)
    assert moved["retries"] == retry["retries"], (retry, moved)
    assert near(moved["next_retry_at"], retry["next_retry_at"] + step), (retry, moved, step)
    # No burst: no fetch, no deferred notification released, no retry, for a good while.
    time.sleep(15)
    assert len(fetches(b)) == n1, f"a fetch ran at the step: {fetches(b)}"
    assert notes(b) == ["c1"], f"the deferred notification ran at the step: {notes(b)}"
    assert transfer(b, tid)["retries"] == retry["retries"]
    # Shown in the wall time of the set clock: the window is ahead of it.
    assert status(b)["next_window"] > guest_now(b)

    # ---- An operator sets the clock back a year.
    before = status(b)["next_window"]
    back = set_clock(b, guest_now(b) - YEAR)
    time.sleep(2)
    after = status(b)["next_window"]
    assert near(after, before + back), (before, after, back)
    # No stall: the second fetch comes at its time, not a year later.
    start = time.monotonic()
    wait = max(0.0, after - guest_now(b))
    wait_for(b, "the next fetch at its planned time", lambda: len(fetches(b)) == n1 + 1, wait + 90)
    figure("clock test: next fetch after the backward step (s, planned in)", f"{time.monotonic() - start:.0f} / {wait:.0f}")
    # The hour's budget is the timeline's hour: neither step gave the deferred notification room.
    assert notes(b) == ["c1"], notes(b)

    # ---- Stopped, the clock set forward a year, started again in the same boot: the stored
    # times move with the clock exactly, so the next window keeps its wait.
    time.sleep(3)
    n = len(fetches(b))
    before = status(b)["next_window"]
    b.sh("systemctl stop drowsed")
    step = set_clock(b, guest_now(b) + YEAR)
    b.sh("systemctl start drowsed")
    wait_for(b, "drowsed to plan its next window", lambda: status(b)["next_window"] is not None, 60)
    after = status(b)["next_window"]
    assert near(after, before + step, 10), (before, after, step)
    time.sleep(10)
    assert len(fetches(b)) == n, "a fetch ran at the restart after the clock was set"
    integrity_ok(b)
