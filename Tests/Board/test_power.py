"""Reboots and power cuts of the board: notifications sent while it is off, downloads cut by a
SIGKILL of qemu (cache=none: the disk keeps only what the guest had flushed)."""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from board import HOST_IN_GUEST
from conftest import DEVICE, STATE_DB, figure
from drowse_e2e import write_random_file

pytestmark = pytest.mark.vm  # power cuts, the QEMU monitor or the RTC at boot: not on a board over ssh

POWER_CUTS = int(os.environ.get("BOARD_POWER_CUTS", "5"))
SEED = int(os.environ.get("BOARD_SEED", str(int(time.time()))))
BLOB_SIZE = 6 * 1024 * 1024   # 16 s at nginx's 384 KiB/s


def integrity_ok(b) -> None:
    rc, out, err = b.run(f"sqlite3 {STATE_DB} 'pragma integrity_check'")
    assert (rc, out.strip()) == (0, "ok"), out + err


def wait_for(b, what: str, pred, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(1)


def mqtt_connected(b) -> bool:
    rc, out, _ = b.run("drowse status --json")
    return rc == 0 and json.loads(out)["mqtt"]["connected"] is True


def notes(b) -> list[str]:
    rc, out, _ = b.run("cat /var/lib/board-app/notes 2>/dev/null")
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


def test_notifications_sent_while_off_run_exactly_once_after_boot(configured, broker):
    b = configured
    topic = f"drowse/{DEVICE}/apps/boardapp/notify"
    for round_, how in enumerate(("poweroff", "power cut")):
        wait_for(b, "MQTT connected", lambda: mqtt_connected(b), 60)
        before = notes(b)
        if how == "poweroff":
            b.poweroff()
        else:
            b.sh("sync")
            b.power_cut()
        ids = [f"r{round_}-n{i}" for i in range(5)]
        for i, nid in enumerate(ids):
            broker.publish(topic, json.dumps({"aps": {"content-available": 1}, "id": nid, "n": i}).encode())
        boot_s = b.boot()
        figure(f"boot seconds (after {how})", f"{boot_s:.1f}")
        wait_for(b, f"the 5 notifications sent while off ({how})",
                 lambda: set(ids) <= set(notes(b)), 120)
        time.sleep(5)  # a duplicate would come within this
        got = notes(b)
        assert got[:len(before)] == before, "an earlier run's line was lost"
        counts = {nid: got.count(nid) for nid in ids}
        assert counts == {nid: 1 for nid in ids}, f"after {how}: {counts}"
        assert len(got) == len(before) + len(ids), got
        integrity_ok(b)


def test_downloads_resume_after_power_cuts(configured, nginx):
    b = configured
    rng = random.Random(SEED)
    figure("power-cut seed (BOARD_SEED)", SEED)
    expected: dict[str, tuple[str, str]] = {}   # transfer id -> (final path, sha256)

    def start_download() -> str:
        k = len(expected)
        sha = write_random_file(nginx.www / "slow" / f"blob{k}", BLOB_SIZE)
        url = f"http://{HOST_IN_GUEST}:{nginx.port}/slow/blob{k}"
        path = f"/var/lib/board-dl/blob{k}"
        tid = b.sh(f"drowse transfer download {url} --app boardapp --to {path} --sha256 {sha}").strip()
        expected[tid] = (path, sha)
        return tid

    def show(tid: str) -> dict:
        return json.loads(b.sh(f"drowse transfer show {tid} --json"))

    def final_files_whole() -> None:
        # A file at a final path is the whole file: never a short or torn one.
        for tid, (path, sha) in expected.items():
            rc, out, _ = b.run(f"test -e {path} && sha256sum {path}")
            if rc == 0:
                assert out.split()[0] == sha, f"{path} is at its final path but its sha256 is wrong"

    current = start_download()
    start = time.monotonic()
    for cut in range(POWER_CUTS):
        st = show(current)
        assert st["state"] not in ("failed", "cancelled"), st
        if st["state"] == "completed":
            current = start_download()
        # A random moment: before the download got going, mid-way, or at a commit.
        time.sleep(rng.uniform(0.2, 8.0))
        done = show(current)["bytes_done"] or 0
        b.power_cut()
        print(f"power cut {cut + 1}/{POWER_CUTS} at {done} bytes of {current}", flush=True)
        b.boot()
        integrity_ok(b)
        final_files_whole()
    for tid, (path, sha) in expected.items():
        rc, out, err = b.run(f"drowse transfer wait {tid}", timeout=180)
        st = show(tid)
        assert st["state"] == "completed", (st, out, err)
        assert b.sh(f"sha256sum {path}").split()[0] == sha
    integrity_ok(b)
    figure(f"power cuts survived ({len(expected)} downloads)", POWER_CUTS)
    figure("power-cut loop seconds", f"{time.monotonic() - start:.0f}")
    # Resumed, not started again: some request asked for a Range from a byte past 0.
    ranges = [json.loads(line)["range"] for line in nginx.access_log.read_text().splitlines()
              if "/slow/blob" in line]
    resumed = [r for r in ranges if r.startswith("bytes=") and not r.startswith("bytes=0-")]
    figure("download requests / resumed with a Range", f"{len(ranges)} / {len(resumed)}")
    assert resumed, f"no download resumed from where it was cut: {ranges}"
