"""Fixtures of the board suite: one VM for the session (booted once, rebooted only by the power-cut
tests), the Drowse .deb installed in it as a board owner would, and a mosquitto and an nginx on
the host's loopback that the guest reaches at board.HOST_IN_GUEST.

Env: BOARD_DEB        the drowse_*.deb to install (deploy/test-board.sh builds it)
     BOARD_SSH        user@host: run the suite on a real board over ssh (ssh_board.py) instead of
                      the VM; tests marked `vm` (power cuts, carrier loss, the RTC) are skipped
     BOARD_IMAGE_DIR  the image (else deploy/board/build-image.sh builds or finds it)
     ARCH             guest architecture (default amd64)
     BOARD_RESULTS    where the figures are written (default <tmp>/board-results.txt)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "Tests" / "EndToEnd"))

from board import HOST_IN_GUEST, Board  # noqa: E402
from drowse_e2e import Broker, Nginx, free_port  # noqa: E402

DEVICE = "board"
STATE_DB = "/var/lib/drowse/state.db"


def figure(name: str, value) -> None:
    """Prints a measured figure and appends it to the results file (the suite's summary)."""
    line = f"BOARD {name}: {value}"
    print(line, flush=True)
    path = Path(os.environ.get("BOARD_RESULTS", str(Path(tempfile.gettempdir()) / "board-results.txt")))
    with open(path, "a") as f:
        f.write(line + "\n")


@pytest.fixture(scope="session")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="drowse-board-", dir="/tmp"))
    yield d
    if os.environ.get("BOARD_KEEP") != "1":
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def broker(workdir):
    b = Broker(workdir / "mosquitto")
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def nginx(workdir):
    # 384 KiB/s per connection: a download of a few MiB is under way for a good many seconds.
    n = Nginx(workdir / "nginx", slow_rate="384k")
    n.start()
    yield n
    n.stop()


def install_deb(b, name: str) -> None:
    """As a board owner would: apt installs /root/<name> and its Depends."""
    start = time.monotonic()
    b.run(f"cd /root && DEBIAN_FRONTEND=noninteractive apt-get install -y ./{name}", check=True, timeout=300)
    figure("apt install seconds", f"{time.monotonic() - start:.1f}")


@pytest.fixture(scope="session")
def board(workdir, broker, nginx):
    deb = os.environ.get("BOARD_DEB")
    if not deb or not Path(deb).is_file():
        pytest.fail("set BOARD_DEB to a drowse_*.deb (deploy/test-board.sh does)")
    if os.environ.get("BOARD_SSH"):
        from ssh_board import SSHBoard
        b = SSHBoard(os.environ["BOARD_SSH"], port=int(os.environ.get("BOARD_SSH_PORT", "22")),
                     key=os.environ.get("BOARD_SSH_KEY"), guest_ports=(broker.port, nginx.port))
        try:
            b.boot()
            figure("accelerator", "ssh (a real board)")
            b.write_file(f"/root/{Path(deb).name}", Path(deb).read_bytes())
            install_deb(b, Path(deb).name)
            yield b
        finally:
            b.close()
        return
    image = os.environ.get("BOARD_IMAGE_DIR")
    if not image:
        image = subprocess.run([str(REPO / "deploy" / "board" / "build-image.sh")], check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
    share = workdir / "share"
    share.mkdir()
    shutil.copy(deb, share / Path(deb).name)
    b = Board(Path(image), workdir / "vm", share, arch=os.environ.get("ARCH", "amd64"),
              guest_ports=(broker.port, nginx.port), ssh_port=free_port())
    b.make_overlay()
    try:
        boot_s = b.boot()
        figure("accelerator", b.accel)
        figure("boot seconds (first boot)", f"{boot_s:.1f}")
        # The package's Depends are all in the image.
        b.run(f"cp /mnt/host/{Path(deb).name} /root/", check=True)
        install_deb(b, Path(deb).name)
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def installed(board):
    """The state right after `apt install`, before the suite configures anything."""
    return board


@pytest.fixture(scope="session")
def configured(board, broker):
    """drowsed connected to the host's broker, with the suite's app, restarted once under systemd."""
    # A top-level key goes before the config's first table; [mqtt] is a table of its own.
    board.sh(f"sed -i '1i device_id = \"{DEVICE}\"' /etc/drowse/drowse.toml")
    board.run("cat >>/etc/drowse/drowse.toml", check=True,
              input=f'\n[mqtt]\nurl = "mqtt://{HOST_IN_GUEST}:{broker.port}"\n')
    board.sh("mkdir -p /var/lib/board-app /var/lib/board-dl")
    board.write_file("/etc/drowse/apps.d/boardapp.toml",
                     'id = "boardapp"\n'
                     'working_directory = "/var/lib/board-app"\n'
                     "[notification]\n"
                     # One line per run, the payload and its newline in one append (handlers run
                     # side by side: two writes each interleaved), flushed to disk.
                     'command = ["/bin/sh", "-c", "line=$(cat); printf \'%s\\\\n\' \\"$line\\" >>notes && sync notes"]\n'
                     "[transfers]\n"
                     'events_command = ["/bin/true"]\n')
    board.sh("drowsed --check-config --config /etc/drowse/drowse.toml")
    board.sh("systemctl restart drowsed")
    broker.wait_subscribed(f"drowse/{DEVICE}/apps/boardapp/notify", timeout=60)
    return board


# One VM for the whole session: the install check first, then the tests that only read, the
# power cuts (which reboot it) last: test_power's, then the clock's reboot.
ORDER = ("test_systemd", "test_idle", "test_link", "test_ssh_driver", "test_conditions", "test_lifecycle", "test_getting_started",
         "test_updates",
         "test_power", "test_power_streams", "test_clock")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: ORDER.index(item.module.__name__) if item.module.__name__ in ORDER else len(ORDER))
    if os.environ.get("BOARD_SSH"):
        skip = pytest.mark.skip(reason="needs the VM (a power cut, the QEMU monitor or the RTC at boot)")
        for item in items:
            if "vm" in item.keywords:
                item.add_marker(skip)
