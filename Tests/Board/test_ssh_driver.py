"""The ssh driver (ssh_board.py), which runs this suite on a real board, checked against the VM's
own sshd: the same calls the tests make (`run`, `sh`, `write_file`), root through ssh with exit
statuses and standard input, and the reverse forwards that let the board reach the test broker on
this machine's loopback. The VM's sshd is reached through qemu's hostfwd on 127.0.0.1 only."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import DEVICE
from ssh_board import SSHBoard
from test_systemd import wait_active

pytestmark = pytest.mark.vm  # drives the VM's sshd: on a real board the whole suite is this driver


@pytest.fixture
def over_ssh(configured, broker, workdir):
    vm = configured
    if vm.run("command -v sshd")[0] != 0:
        pytest.fail("the board image has no sshd (deploy/board/build-image.sh installs openssh-server)")
    key = workdir / "ssh-key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    vm.write_file("/root/.ssh/authorized_keys", (workdir / "ssh-key.pub").read_text(), mode="0600")
    vm.sh("chmod 700 /root/.ssh && systemctl start ssh")
    b = SSHBoard("root@127.0.0.1", port=vm.ssh_port, key=str(key), guest_ports=(broker.port,),
                 known_hosts=str(workdir / "known_hosts"))
    b.boot(timeout=60)
    yield b
    b.close()


def test_the_ssh_driver_runs_the_suites_commands(over_ssh, configured, broker):
    b = over_ssh
    assert b.run("exit 7") == (7, "", "")
    assert b.sh("id -u").strip() == "0"
    assert b.run("cat | tr a-z A-Z", input="stdin\n")[1] == "STDIN\n"
    b.write_file("/tmp/ssh-driver-file", b"\x00\x01binary\n", mode="0600")
    assert configured.sh("stat -c %a /tmp/ssh-driver-file && sha256sum /tmp/ssh-driver-file").split()[:2] == \
        ["600", subprocess.run(["sha256sum"], input=b"\x00\x01binary\n", capture_output=True).stdout.decode().split()[0]]
    # A suite helper, unchanged, over ssh: it sees what the guest agent sees.
    assert wait_active(b)["MainPID"] == wait_active(configured)["MainPID"]
    assert json.loads(b.sh("drowse status --json"))["device_id"] == DEVICE
    # The reverse forward: the board's own 127.0.0.1:<broker port> is the test broker (an MQTT
    # CONNECT answered by a CONNACK, 0x20).
    connect = "printf '\\020\\014\\000\\004MQTT\\004\\002\\000\\074\\000\\000'"
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{broker.port}; {connect} >&3; head -c 1 <&3 | od -An -tx1"
    assert b.sh(f"bash -c \"{probe}\"").strip() == "20"
