"""Backoff that rewards progress.

A link that drops every connection after a few hundred KiB: every attempt moves the download
forward, so every retry must come about a second after the drop (the first step of the backoff),
not after longer and longer waits. `transfer show --json` counts attempts and retries and says
when the next retry runs. A server that moves nothing still sees growing waits."""

from __future__ import annotations

import random
import time

from drowse_e2e import sha256_file, wait_until
from hostile_server import cut, cut_range, error

KiB = 1 << 10
FINISHED = ("completed", "failed", "cancelled")
CONFIG = """
[transfers]
commit_interval = "100ms"
commit_bytes = 65536
"""


def test_every_attempt_that_moves_bytes_retries_after_about_a_second(make_drowse, hostile_server):
    data = random.Random(5).randbytes(7 * 256 * KiB)
    etag = '"e1"'
    steps = [cut(data, 256 * KiB, etag=etag)] + [cut_range(data, 256 * KiB, etag=etag)] * 6
    url = hostile_server.script("/flaky.bin", steps)  # 7 requests, each cut after 256 KiB: the 7th ends the file
    d = make_drowse(extra_config=CONFIG)
    d.add_app("dl")
    d.start()
    dest = d.base / "flaky.bin"
    tid = d.download(url, "dl", "--to", str(dest))
    seen_next = []

    def done():
        t = d.transfer(tid)
        if t.get("next_retry_at") is not None:
            seen_next.append((time.time(), t["next_retry_at"]))
        return t if t["state"] in FINISHED else None

    t = wait_until(done, 60, interval=0.05, what="the flaky download")
    assert t["state"] == "completed", t
    assert sha256_file(dest) == __import__("hashlib").sha256(data).hexdigest()
    assert (t["attempts"], t["retries"]) == (7, 6), t
    reqs = hostile_server.requests_for("/flaky.bin")
    assert len(reqs) == 7, hostile_server.log()
    gaps = [b.at - a.ended_at for a, b in zip(reqs, reqs[1:])]
    # The first step of the backoff is 0.5–1 s; without the reset the 6th wait would be 16–32 s.
    assert max(gaps) < 1.8, f"waits between attempts: {[round(g, 2) for g in gaps]}"
    # Judged when each retry time is first seen (polled every 50 ms after the failure is stored):
    # a later poll may land after that time but before the actor has started the attempt.
    first_seen = {}
    for now, at in seen_next:
        first_seen.setdefault(at, now)
    assert first_seen and all(0 < at - now <= 1.2 for at, now in first_seen.items()), first_seen


def test_attempts_that_move_nothing_still_back_off(make_drowse, hostile_server):
    url = hostile_server.route("/down.bin", error(503))
    d = make_drowse(extra_config=CONFIG)
    d.add_app("dl")
    d.start()
    tid = d.download(url, "dl")
    wait_until(lambda: len(hostile_server.requests_for("/down.bin")) >= 4, 30, what="four attempts")
    reqs = hostile_server.requests_for("/down.bin")
    gaps = [b.at - a.at for a, b in zip(reqs, reqs[1:])]
    # Waits of [0.5, 1], [1, 2], [2, 4] s: the third is longer than the first could ever be.
    assert gaps[2] > 1.9 and gaps[2] > gaps[0], [round(g, 2) for g in gaps]
    t = d.transfer(tid)
    assert t["attempts"] >= 4 and t["retries"] >= 3 and t["next_retry_at"] > time.time() - 1, t
    d.cli_ok("transfer", "cancel", tid)
    assert d.transfer(tid)["next_retry_at"] is None
