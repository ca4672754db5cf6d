"""libcurl is loaded by the first transfer, not at start (README: "Footprint"): an idle drowsed
does not map libcurl and its dependencies; a download loads it and works as before, and a
restart with a transfer to resume loads it again."""

from drowse_e2e import sha256_file

MiB = 1 << 20


def mapped_libcurl(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any("libcurl" in line for line in f)


def test_idle_drowsed_maps_no_libcurl_until_a_transfer(nginx, make_drowse):
    d = make_drowse()
    d.add_app("dl")
    d.start()
    d.json("status")
    d.json("apps")
    assert not mapped_libcurl(d.proc.pid), "libcurl is mapped before any transfer"

    url, digest, _ = nginx.add_file("lazy.bin", 2 * MiB + 7)
    dest = d.base / "lazy.bin"
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
    r = d.cli("transfer", "wait", tid, "--timeout", "60s", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sha256_file(dest) == digest
    assert mapped_libcurl(d.proc.pid), "a download ran without libcurl mapped?"

    # A restart with nothing to resume stays without libcurl.
    d.restart()
    d.json("status")
    assert not mapped_libcurl(d.proc.pid)
