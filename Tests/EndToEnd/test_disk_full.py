"""A full disk pauses a download with a clear reason; it continues once space is freed, and
nothing is marked done that is not on disk."""

import os
import subprocess

import pytest

from drowse_e2e import sha256_file, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")


@pytest.fixture
def small_disk(workdir):
    mnt = workdir / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_pauses_then_continues_when_space_is_freed(nginx, make_drowse, small_disk, workdir):
    # The whole state (database, partial files) lives on a 12 MiB disk; 7 MiB of it are taken.
    filler = small_disk / "filler"
    filler.write_bytes(os.urandom(7 * 1024 * 1024))
    d = make_drowse(extra_config=f'''
        [transfers]
        commit_interval = "200ms"
        commit_bytes = 1048576
    ''')
    d.state_dir = small_disk / "state"
    d.write_config()
    d.config.write_text(d.config.read_text().replace(f'state_dir = "{d.base / "state"}"', f'state_dir = "{d.state_dir}"'))
    assert str(d.state_dir) in d.config.read_text()
    d.add_app("dl", fetch=d.recorder("dl"))
    d.start()

    url, sha, _ = nginx.add_file("big.bin", 8 * 1024 * 1024)
    dest = small_disk / "big.bin"
    tid = d.download(url, "dl", "--to", str(dest), "--sha256", sha)
    wait_until(lambda: d.transfer(tid)["state"] == "paused", 20, what="the download to pause on a full disk")
    t = d.transfer(tid)
    assert "disk full" in t["reason"], t
    assert not dest.exists(), "a file appeared at --to although the download could not finish"
    assert d.status()["version"]  # the daemon keeps serving

    filler.unlink()
    wait_until(lambda: d.transfer(tid)["state"] == "completed", 90, what="the download to continue once space is free")
    assert sha256_file(dest) == sha
