"""Root never follows an app user's path.

drowsed runs as root and writes `--to` files and reads upload sources for API callers. The caller
owns those paths, so it can swap them between two attempts of a transfer. Each test here is an
attack by a non-root user (`nobody`): the request is made as nobody, the swap is done as nobody
while the first attempt is held open by a scripted server, and the server then cuts the attempt so
that drowsed retries through the swapped path. What is judged is what an attacker would gain: a file
that appeared in, or changed in, a folder only root may write, or root's secret on the upload server.
The last tests show that honest transfers by a non-root caller still complete.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import threading

import pytest

from drowse_e2e import DROWSE, sha256_file, wait_until
from hostile_server import serve
from upload_servers import UploadServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

NOBODY = 65534
KiB = 1 << 10
FINISHED = ("completed", "failed", "cancelled")
CONFIG = """
[transfers]
commit_interval = "100ms"
commit_bytes = 65536
"""


def as_nobody(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd],
                       capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    if check:
        assert r.returncode == 0, f"{cmd} as nobody: {r.stderr}"
    return r


def cli_as_nobody(d, *args: str) -> str:
    """Runs `drowse ARGS` as nobody; returns the single line it prints (a transfer id)."""
    r = as_nobody(str(DROWSE), "--socket", str(d.socket), *args)
    return r.stdout.strip()


def cli_as(queuer: str, d, *args: str) -> str:
    """`drowse ARGS` as the app's user (nobody) or as root acting for the app (root's request must
    touch the app's paths with the app's rights, not root's)."""
    if queuer == "nobody":
        return cli_as_nobody(d, *args)
    r = d.cli_ok(*args)
    return r.stdout.strip()


# Who queues the transfer for app "dl" (which runs as nobody); the attacker is always nobody.
QUEUERS = pytest.mark.parametrize("queuer", ["nobody", "root"])


def show_as_root(d, tid: str) -> dict:
    return d.transfer(tid)


def wait_final(d, tid: str, timeout: float = 30.0) -> dict:
    return wait_until(lambda: (t := d.transfer(tid))["state"] in FINISHED and t, timeout, interval=0.1,
                      what=f"transfer {tid} to finish")


@pytest.fixture
def world(make_drowse):
    """A drowsed as root, an app that runs as nobody, nobody's home folder and a root-only vault
    (standing in for /etc) holding a root-only secret."""
    d = make_drowse(extra_config=CONFIG)
    os.chmod(d.base, 0o755)  # nobody must reach the socket and its home below
    home = d.base / "home"
    (home / "dl").mkdir(parents=True)
    for p in (home, home / "dl"):
        os.chown(p, NOBODY, NOBODY)
    vault = d.base / "vault"
    vault.mkdir(mode=0o755)
    secret = vault / "secret"
    secret.write_bytes(b"root's secret\n" * 4681)  # 65534 bytes
    os.chmod(secret, 0o600)
    d.add_app("dl", events=d.recorder("dl"), user="nobody", working_directory=str(home))
    d.start()
    return d, home, vault, secret


def held_then_cut(data: bytes, first: int, gate: threading.Event, etag: str):
    """Request 0: sends `first` bytes, waits for the test's swap, then drops the connection."""
    def h(ex):
        ex.head(200, [("Content-Length", len(data)), ("Accept-Ranges", "bytes"), ("ETag", etag)])
        ex.body(data[:first])
        gate.wait(20)
        ex.close()
    return h


def vault_state(vault):
    return sorted((p.name, p.stat().st_uid, p.stat().st_mode, sha256_file(p)) for p in vault.iterdir())


def start_held_download(d, hostile_server, home, name: str, queuer: str = "nobody"):
    data = random.Random(name).randbytes(512 * KiB)
    gate = threading.Event()
    etag = '"v1"'
    url = hostile_server.script("/" + name, [held_then_cut(data, 200 * KiB, gate, etag)], then=serve(data, etag=etag))
    dest = home / "dl" / name
    tid = cli_as(queuer, d, "transfer", "download", url, "--app", "dl", "--to", str(dest))
    part = home / "dl" / f".{name}.{tid}.drowse-part"
    # The first attempt has written (and committed) part of the file and is now held open.
    wait_until(lambda: part.exists() and part.stat().st_size > 0 and d.transfer(tid)["bytes_done"] > 0, 15,
               what="the first attempt's bytes in the part file")
    return tid, dest, part, gate, data


@QUEUERS
def test_download_folder_swapped_for_symlink_to_root_folder(world, hostile_server, queuer):
    d, home, vault, secret = world
    before = vault_state(vault)
    tid, dest, part, gate, data = start_held_download(d, hostile_server, home, "f.bin", queuer)
    # As nobody: move the download folder away and put a symlink to the root-only folder in its place.
    as_nobody("sh", "-c", f"mv '{home}/dl' '{home}/dl-old' && ln -s '{vault}' '{home}/dl'")
    gate.set()
    t = wait_final(d, tid)
    assert vault_state(vault) == before, f"root wrote into a folder only root may write: {list(vault.iterdir())}"
    assert t["state"] == "failed", t
    assert not (home / "dl-old" / "f.bin").exists()


@QUEUERS
def test_part_file_swapped_for_symlink_to_root_file(world, hostile_server, queuer):
    d, home, vault, secret = world
    before = vault_state(vault)
    tid, dest, part, gate, data = start_held_download(d, hostile_server, home, "g.bin", queuer)
    as_nobody("sh", "-c", f"rm -f '{part}' && ln -s '{secret}' '{part}'")
    gate.set()
    t = wait_final(d, tid)
    assert vault_state(vault) == before, "root overwrote or handed over a root-only file through a symlink"
    st = secret.stat()
    assert (st.st_uid, st.st_gid) == (0, 0)
    assert t["state"] == "failed", t
    # No link planted by the attacker ends up at the final path either.
    assert not dest.exists() or not dest.is_symlink()


@QUEUERS
def test_upload_source_swapped_for_symlink_to_root_file(world, queuer):
    d, home, vault, secret = world
    src = home / "out.bin"
    src.write_bytes(random.Random(7).randbytes(secret.stat().st_size))  # same size as the secret
    os.chown(src, NOBODY, NOBODY)
    os.chmod(src, 0o600)
    server = UploadServer("put").start()
    try:
        server.set_read_rate(64 * KiB)  # the first attempt takes ~1 s: time to swap while it runs
        server.add_fault("drop", after=48 * KiB, methods=["PUT"])
        tid = cli_as(queuer, d, "transfer", "upload", str(src), server.url("/up/out.bin"), "--app", "dl",
                     "--protocol", "put")
        wait_until(lambda: server.log(method="PUT"), 15, what="the first PUT")
        as_nobody("sh", "-c", f"rm -f '{src}' && ln -s '{secret}' '{src}'")
        t = wait_final(d, tid)
        secret_sha = hashlib.sha256(secret.read_bytes()).hexdigest()
        stored = [u.sha256() for u in server.uploads.values()]
        assert secret_sha not in stored, "root uploaded a file the caller cannot read"
        assert t["state"] == "failed", t
    finally:
        server.stop()


def test_nobody_downloads_and_uploads_its_own_files(world, nginx):
    """The identity switch must not break honest transfers: files made as the caller, owned by it."""
    d, home, vault, secret = world
    url, digest, _ = nginx.add_file("ok.bin", 300 * KiB)
    dest = home / "dl" / "ok.bin"
    tid = cli_as_nobody(d, "transfer", "download", url, "--app", "dl", "--to", str(dest), "--sha256", digest)
    t = wait_final(d, tid)
    assert t["state"] == "completed", t
    assert sha256_file(dest) == digest
    assert (dest.stat().st_uid, dest.stat().st_gid) == (NOBODY, NOBODY)
    assert [p.name for p in (home / "dl").iterdir()] == ["ok.bin"], "a part file was left behind"

    src = home / "mine.bin"
    src.write_bytes(random.Random(3).randbytes(100 * KiB))
    os.chown(src, NOBODY, NOBODY)
    os.chmod(src, 0o600)  # only nobody (and root) can read it
    server = UploadServer("put").start()
    try:
        tid = cli_as_nobody(d, "transfer", "upload", str(src), server.url("/up/mine.bin"), "--app", "dl",
                            "--protocol", "put")
        t = wait_final(d, tid)
        assert t["state"] == "completed", t
        assert [u.sha256() for u in server.completed()] == [sha256_file(src)]
    finally:
        server.stop()


def test_nobody_cannot_upload_root_file_or_write_root_folder(world):
    """Checked up front too: a path the caller could not use itself is refused at once."""
    d, home, vault, secret = world
    r = as_nobody(str(DROWSE), "--socket", str(d.socket), "transfer", "upload", str(secret),
                  "http://127.0.0.1:9/x", "--app", "dl", check=False)
    assert r.returncode != 0 and "read" in r.stderr, r.stderr
    r = as_nobody(str(DROWSE), "--socket", str(d.socket), "transfer", "download", "http://127.0.0.1:9/x",
                  "--app", "dl", "--to", str(vault / "x"), check=False)
    assert r.returncode != 0, r.stdout
    assert sorted(p.name for p in vault.iterdir()) == ["secret"]


def test_a_closed_folder_answers_alike_whether_what_is_inside_exists(world):
    """In a folder the caller cannot search, a missing folder and an existing one it cannot write
    get the same answer (no oracle for what root's folders hold); where the caller can look
    itself, a missing folder is named as missing."""
    d, home, vault, secret = world
    closed = d.base / "closed"
    (closed / "exists").mkdir(parents=True)
    os.chmod(closed, 0o700)

    def answer(to: str) -> str:
        r = as_nobody(str(DROWSE), "--socket", str(d.socket), "transfer", "download", "http://127.0.0.1:9/x",
                      "--app", "dl", "--to", to, check=False)
        assert r.returncode != 0, r.stdout
        return r.stderr.replace(to, "PATH")

    there = answer(str(closed / "exists" / "f"))
    missing = answer(str(closed / "missing" / "f"))
    assert there == missing, (there, missing)
    assert "does not exist" not in there
    # nobody's own home: it can see for itself that the folder is missing, and is told so.
    assert "does not exist" in answer(str(home / "no-such-folder" / "f"))
