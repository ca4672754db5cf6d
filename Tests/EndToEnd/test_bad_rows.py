"""A stored row that cannot be valid is refused, not trusted:
drowsed starts with such rows in state.db, answers, and shows the bad transfers as failed
with a reason, where it used to crash on every start (a crash loop until someone edited the
database)."""

from __future__ import annotations

import json
import sqlite3
import time

from drowse_e2e import pid_alive
from raw_http import request

COLUMNS = ("id, app, session, kind, state, url, bytes_done, bytes_total, created_at, finished_at, timeout_at, "
           "owner_uid, delivered")


def insert_transfer(db, tid, **over):
    row = {"id": tid, "app": "br", "session": "s-" + tid, "kind": "download", "state": "waiting",
           "url": "http://127.0.0.1:9/x", "bytes_done": 0, "bytes_total": None, "created_at": time.time(),
           "finished_at": None, "timeout_at": time.time() + 3600, "owner_uid": None, "delivered": 0}
    row.update(over)
    names = [c.strip() for c in COLUMNS.split(",")]
    db.execute(f"INSERT INTO transfers({COLUMNS}) VALUES ({','.join('?' * len(names))})", [row[n] for n in names])


BAD_TRANSFERS = {
    "t-timeout-1e300": {"timeout_at": 1e300},
    "t-timeout-inf": {"timeout_at": float("inf")},
    "t-timeout-neg-inf": {"timeout_at": float("-inf")},
    "t-bytes-1e300": {"bytes_done": 1e300},  # REAL in an INTEGER column
    "t-bytes-negative": {"bytes_done": -5, "bytes_total": -1},
    "t-bytes-huge": {"bytes_done": 2**63 - 1, "bytes_total": 2**63 - 1},
    "t-state-unknown": {"state": "exploded"},
    "t-kind-unknown": {"kind": "teleport"},
    "t-created-inf": {"created_at": float("-inf"), "finished_at": 1e308, "state": "completed"},
    "t-owner-negative": {"owner_uid": -1},
    "t-url-not-http": {"url": 42},  # TEXT affinity stores '42'
    "t-url-file": {"url": "file:///etc/shadow"},
}


def test_drowsed_starts_with_invalid_rows_and_refuses_them(make_drowse):
    d = make_drowse()
    d.add_app("br", fetch=d.recorder("br"), minimum_interval="15m")
    d.start()
    d.stop()

    db = sqlite3.connect(d.state_dir / "state.db")
    for tid, over in BAD_TRANSFERS.items():
        insert_transfer(db, tid, **over)
    insert_transfer(db, "t-good")
    db.execute("INSERT INTO transfers(id, app, session, kind, state, url, created_at) VALUES (X'00ff41', 'br', 's', 'download', 'failed', 'http://x/', 1)")
    # The app's bookkeeping: times and counters the planner computes with.
    db.execute("INSERT OR REPLACE INTO apps(id, registered_at, last_fetch, consecutive_failures, last_used, consecutive_no_data) "
               "VALUES ('br', -1e300, 1e300, 9223372036854775807, ?, 9223372036854775807)", (float("inf"),))
    db.executemany("INSERT INTO usage(app, at) VALUES ('br', ?)", [(1e300,), (float("inf"),), (-1e300,), (time.time(),)])
    db.execute("INSERT INTO runs(app, event, result, ending, started_at, ended_at) VALUES ('br', 'fetch', 'new-data', 'x', ?, 1e300)",
               (time.time() - 10,))
    db.execute("INSERT INTO notifications(app, dedupe_key, payload, received_at, state) VALUES ('br', 'k', '{not json', ?, 'pending')",
               (float("inf"),))
    db.commit()
    db.close()

    d.start()
    pid = d.proc.pid
    # Timers armed at start from a bad value (a timeout at 1e300 or -inf, a fetch window from a
    # last fetch at 1e300) would be due at once, or never: the ones due at once fire within
    # milliseconds, and a crash from them would show in this half second.
    time.sleep(0.5)
    assert d.proc.poll() is None and pid_alive(pid), d.exit_note()
    status, body = request(d.socket, "GET", "/v1/status")
    assert status == 200, body

    transfers = {t["id"]: t for t in d.json("transfers")}
    for tid in BAD_TRANSFERS:
        t = transfers[tid]
        assert t["state"] == "failed", t
        assert t["reason"].startswith("refused: the stored transfer is invalid"), t
        assert t["timeout_at"] is None and t["bytes_done"] >= 0, t
    assert "refused" not in (transfers["t-good"]["reason"] or ""), transfers["t-good"]
    assert "timeout_at" in transfers["t-timeout-1e300"]["reason"]
    assert "bytes_done" in transfers["t-bytes-1e300"]["reason"]
    assert "exploded" in transfers["t-state-unknown"]["reason"]

    # The app's status works from sanitised bookkeeping.
    app = d.app("br")
    assert app["id"] == "br"
    assert d.cli("apps", "--json").returncode == 0

    # And the daemon starts again with the same database (the refused rows may have been rewritten as failed).
    d.stop()
    d.start()
    time.sleep(0.3)  # the same start-up timers, from the rewritten rows
    assert d.proc.poll() is None, d.exit_note()
    assert request(d.socket, "GET", "/v1/status")[0] == 200
    assert json.loads(d.cli_ok("transfer", "show", "t-timeout-inf", "--json").stdout)["state"] == "failed"
