"""An idle drowsed on the board sleeps: no context switch in 60 s with MQTT connected."""

from __future__ import annotations

import json
import os
import time

from conftest import figure

IDLE_SECONDS = float(os.environ.get("BOARD_IDLE_SECONDS", "60"))
SAMPLE_EVERY = 5.0

# Per thread of drowsed's main process: "tid comm switches" (voluntary + nonvoluntary).
THREADS = ("pid=$(systemctl show -p MainPID --value drowsed); echo $pid; "
           "for t in /proc/$pid/task/*; do "
           "printf '%s %s %s\\n' ${t##*/} \"$(tr ' ' _ <$t/comm)\" "
           "$(awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {n += $2} END {print n}' $t/status); done")


def sample(b) -> tuple[str, dict[str, tuple[str, int]]]:
    lines = b.sh(THREADS).split("\n")
    threads = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) == 3:   # fewer: the thread exited while it was read
            threads[fields[0]] = (fields[1], int(fields[2]))
    return lines[0].strip(), threads


def changes(prev: dict, now: dict) -> list[str]:
    """What drowsed's threads did between two samples: switches, and threads that started or
    exited (their switches leave the per-thread sum, so an exit counts as activity)."""
    out = []
    for tid, (comm, n) in now.items():
        d = n - prev.get(tid, (comm, 0))[1]
        if d or tid not in prev:
            out.append(f"thread {tid} ({comm}): +{d}{' (new)' if tid not in prev else ''}")
    out += [f"thread {tid} ({comm}) exited" for tid, (comm, _) in prev.items() if tid not in now]
    return out


def test_idle_drowsed_does_not_wake_and_its_pss(configured):
    b = configured
    rc, out, err = b.run("drowse status --json")
    assert rc == 0, err
    assert json.loads(out)["mqtt"]["connected"] is True, out
    # The status request itself woke drowsed: let it settle before the first sample, and say
    # when it last ran after the request (a deferred close or timer shows up here). The last is
    # the release of its code pages, [lifecycle] release_code_after (30 s) after the request.
    pid0, first = sample(b)
    settle_start, last_wake = time.monotonic(), 0.0
    while time.monotonic() - settle_start < 33:
        time.sleep(1)
        _, now = sample(b)
        if c := changes(first, now):
            last_wake = time.monotonic() - settle_start
            print(f"  after the status request, t={last_wake:.0f}s: {c}")
        first = now
    figure("last wake after a status request (s, sampled each 1 s; 0 = none after the first second)",
           f"{last_wake:.0f}")
    # Samples along the way (read by the guest agent, not by drowsed) say when and which
    # thread woke, if one did.
    woke: list[str] = []
    prev, start = first, time.monotonic()
    while time.monotonic() - start < IDLE_SECONDS:
        time.sleep(min(SAMPLE_EVERY, max(0.0, IDLE_SECONDS - (time.monotonic() - start))))
        pid, now = sample(b)
        assert pid == pid0, "drowsed restarted during the idle measurement"
        woke += [f"t={time.monotonic() - start:.0f}s {c}" for c in changes(prev, now)]
        prev = now
    switches = sum(n - first.get(tid, (c, 0))[1] for tid, (c, n) in prev.items())
    rollup = b.sh(f"cat /proc/{pid0}/smaps_rollup")
    pss_kb = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    rss_kb = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Rss:"))
    figure(f"idle context switches in {IDLE_SECONDS:.0f} s (MQTT connected)", switches)
    figure("idle threads", len(prev))
    figure("idle PSS KiB", pss_kb)
    figure("idle RSS KiB", rss_kb)
    for w in woke:
        print("  woke:", w)
    # Still connected at the end: the quiet was not a dead connection.
    rc, out, _ = b.run("drowse status --json")
    assert rc == 0 and json.loads(out)["mqtt"]["connected"] is True, out
    # The spawn helper is the packaged program (a few pages), not drowse's own binary again.
    if spawner := json.loads(out)["lifecycle"].get("spawner_pid"):
        assert b.sh(f"readlink /proc/{spawner}/exe").strip() == "/usr/libexec/drowse/drowse-spawner"
        helper = b.sh(f"cat /proc/{spawner}/smaps_rollup")
        figure("spawn helper PSS KiB", next(int(line.split()[1]) for line in helper.splitlines() if line.startswith("Pss:")))
    assert switches == 0 and not woke, f"drowsed woke {switches} times in {IDLE_SECONDS} s while idle: {woke}"
