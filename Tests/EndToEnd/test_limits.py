"""Bounded transfers: a byte cap on downloads whose length is
unknown, and a cap on the unfinished transfers of one app."""

from __future__ import annotations

import json

from drowse_e2e import wait_until

MiB = 1 << 20
FINISHED = ("completed", "failed", "cancelled")


def endless_chunked(total: int):
    """200 with a chunked body and no length: `total` bytes (a stand-in for a body without end)."""
    def h(ex):
        ex.head(200, [("Transfer-Encoding", "chunked")])
        block = b"x" * (64 * 1024)
        for _ in range(total // len(block)):
            ex.chunk(block)
        ex.chunk(b"")
    return h


def test_download_of_unknown_length_stops_at_the_cap(make_drowse, hostile_server):
    d = make_drowse(extra_config="[transfers]\nmax_unknown_size = 1048576\n")
    d.add_app("dl")
    d.start()
    url = hostile_server.route("/endless", endless_chunked(16 * MiB))
    dest = d.base / "big.bin"
    tid = d.download(url, "dl", "--to", str(dest))
    t = wait_until(lambda: (x := d.transfer(tid))["state"] in FINISHED and x, 30, what="the capped download to end")
    assert t["state"] == "failed", t
    assert "max_unknown_size" in t["reason"], t
    assert not dest.exists()
    assert not any(p.name.endswith(".drowse-part") for p in d.base.iterdir()), "the part file was left behind"
    # A permanent failure: no retry asked for the body again.
    assert len(hostile_server.requests_for("/endless")) == 1


def test_unfinished_transfers_per_app_are_capped(make_drowse, hostile_server):
    d = make_drowse(extra_config="[transfers]\nmax_per_app = 3\n")
    d.add_app("dl")
    d.add_app("other")
    d.start()
    # Nothing listens on this path's server for long: the transfers stay unfinished (waiting to retry).
    url = hostile_server.route("/hold", lambda ex: ex.stall(30))
    ids = [d.download(url, "dl") for _ in range(3)]
    r = d.cli("transfer", "download", url, "--app", "dl")
    assert r.returncode != 0
    assert "max_per_app" in r.stderr, r.stderr
    # Another app is not affected, and a finished transfer frees a place.
    d.download(url, "other")
    d.cli_ok("transfer", "cancel", ids[0])
    d.download(url, "dl")
    listed = [t for t in json.loads(d.cli_ok("transfers", "--app", "dl", "--json").stdout) if t["state"] not in FINISHED]
    assert len(listed) == 3


def test_control_characters_from_a_server_never_reach_the_log_raw(make_drowse, hostile_server):
    """A server's refusal text is part of a transfer's failure reason, which drowsed logs: a newline
    or an ESC in it must not forge a log line or drive the operator's terminal."""
    evil = b"nope\x1b[31m red\rFAKE drowsed: all good\n"

    def refuse(ex):
        ex.head(403, [("Content-Length", len(evil)), ("Content-Type", "text/plain")])
        ex.body(evil)
        ex.close()

    url = hostile_server.route("/up.bin", refuse)
    d = make_drowse()
    d.add_app("up")
    d.start()
    src = d.base / "small.bin"
    src.write_bytes(b"0123456789")
    tid = d.cli_ok("transfer", "upload", str(src), url, "--app", "up", "--protocol", "put").stdout.strip()
    t = wait_until(lambda: (x := d.transfer(tid))["state"] in FINISHED and x, 20, what="the refused upload")
    assert t["state"] == "failed" and "nope" in t["reason"], t
    log = d.stderr_text()
    assert "nope" in log, "the failure was not logged at all"
    assert "\x1b" not in log and "\r" not in log
    assert not any(line.startswith("FAKE") for line in log.splitlines())
