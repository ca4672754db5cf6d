"""Bounded transfers (issue "Security first", item 3): a byte cap on downloads whose length is
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
