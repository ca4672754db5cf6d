"""libcurl is loaded by the first transfer, not at start (docs/deploy.md, "What makes the build small"): an idle drowsed
does not map libcurl and its dependencies; a download loads it and works as before, and a
restart with a transfer to resume loads it again."""

import re

from drowse_e2e import notify_topic, sha256_file, wait_until

MiB = 1 << 20


def mapped_libcurl(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any("libcurl" in line for line in f)


def resident_code_kb(pid: int, library: str) -> int:
    """Rss (kB) of the executable mappings of the library whose file name starts with `library`."""
    total, current = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                current = len(fields) >= 6 and "x" in fields[1] and fields[5].rsplit("/", 1)[-1].startswith(library)
            elif current and fields[0] == "Rss:":
                total += int(fields[1])
    return total


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


def test_library_code_is_given_back_after_transfers_and_faults_back(nginx, make_drowse):
    """After release_code_after without a transfer, the shared libraries' code pages
    (libcurl's, libssl's, libcrypto's) are no longer resident in drowsed; a download right after
    works and brings them back. The engine thread's own wait (curl_multi_poll) faults a little
    of libcurl back at once (64 kB around each page it runs), so libcurl's is only smaller."""
    d = make_drowse(extra_config='[transfers]\nrelease_code_after = "4s"')
    d.add_app("dl")
    d.start()
    libraries = ("libcurl.so", "libssl.so", "libcrypto.so")

    def resident():
        return {lib: resident_code_kb(d.proc.pid, lib) for lib in libraries}

    def released(before) -> bool:
        now = resident()
        # libssl and libcrypto: nothing but the page a code segment may share with its neighbour.
        return now["libcurl.so"] <= before["libcurl.so"] // 2 and now["libssl.so"] + now["libcrypto.so"] <= 16

    url, digest, _ = nginx.add_file("release.bin", 3 * MiB + 11)
    for round_ in (1, 2):
        dest = d.base / f"release-{round_}.bin"
        tid = d.download(url, "dl", "--sha256", digest, "--to", str(dest))
        r = d.cli("transfer", "wait", tid, "--timeout", "60s", timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert sha256_file(dest) == digest
        # Before the release (4 s after the transfer ended): the code the download ran is resident.
        before = resident()
        assert before["libcurl.so"] >= 128 and before["libcrypto.so"] >= 256, before
        wait_until(lambda: released(before), timeout=30,
                   what=f"the libraries' code pages given back (round {round_}; before: {before} kB)")
    assert d.proc.poll() is None


def test_drowseds_own_code_is_given_back_after_a_quiet_spell_and_faults_back(broker, make_drowse):
    """[lifecycle] release_code_after (docs/configuration.md): that long after the last work, the
    resident pages of drowse's own code leave drowsed (an API request alone brings back megabytes
    of them); a request and a notification after it are served, faulting back what they run, and
    the next quiet spell gives them back again."""
    d = make_drowse(broker=broker)
    d.set_lifecycle(release_code_after="2s")
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    d.json("status")
    pid = d.proc.pid
    before = resident_code_kb(pid, "drowse")
    assert before >= 1024, before
    wait_until(lambda: resident_code_kb(pid, "drowse") <= before // 4, timeout=30,
               what=f"drowse's code pages given back (before: {before} kB)")
    released = resident_code_kb(pid, "drowse")

    assert d.json("status")["mqtt"]["connected"] is True
    broker.publish(notify_topic("news"), b'{"aps": {"content-available": 1}, "id": "after-release"}')
    wait_until(lambda: any(r.json().get("id") == "after-release" for r in d.runs("news")), timeout=30,
               what="the notification's run after the release")
    worked = resident_code_kb(pid, "drowse")
    assert worked >= released + 256, (released, worked)
    wait_until(lambda: resident_code_kb(pid, "drowse") <= worked // 2, timeout=30,
               what=f"given back again after the next quiet spell (after the work: {worked} kB)")
    assert d.proc.poll() is None
