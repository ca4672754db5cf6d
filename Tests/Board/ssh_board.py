"""Drives a real board (a Raspberry Pi running Raspberry Pi OS or Debian with systemd) over ssh,
for the same suite that runs against the VM: `BOARD_SSH=root@pi.local deploy/test-board.sh DEB`.

The interface is the VM driver's (`run`, `sh`, `write_file`, `reboot`, `boot`, `close`); what only
a VM can do (a power cut, a carrier loss from the monitor, the RTC at boot) is not there, and the
tests that need it are marked `vm` and skipped (conftest.py).

The board reaches the test broker and nginx, which listen on this machine's loopback only, through
ssh's reverse forwarding: port P on the board's 127.0.0.1 is port P on this machine's 127.0.0.1.
Nothing listens on a LAN address, and the only traffic is the ssh connection itself.

Env: BOARD_SSH       user@host of the board (root, or a user with passwordless sudo: commands
                     run as root through `sudo -n` when the user is not root)
     BOARD_SSH_PORT  its ssh port (default 22)
     BOARD_SSH_KEY   an identity file (default: ssh's own choice)
"""

from __future__ import annotations

import getpass
import shlex
import subprocess
import time

from board import BoardError, GuestShell


class SSHBoard(GuestShell):
    """A board reached over ssh. `guest_ports`: loopback ports of this machine the board reaches
    at the same port on its own loopback."""

    accel = "ssh"

    def __init__(self, target: str, port: int = 22, key: str | None = None,
                 guest_ports: tuple[int, ...] = (), known_hosts: str | None = None):
        self.target = target
        self.port = port
        self.key = key
        self.guest_ports = guest_ports
        self.known_hosts = known_hosts
        self.tunnel: subprocess.Popen | None = None
        user = target.split("@")[0] if "@" in target else getpass.getuser()
        self.sudo = "" if user == "root" else "sudo -n "
        self.boots = 0
        self.last_boot_s = 0.0

    def _ssh(self, *extra: str) -> list[str]:
        argv = ["ssh", "-p", str(self.port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=accept-new"]
        if self.key:
            argv += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        return argv + list(extra) + [self.target]

    def run(self, cmd: str, input: bytes | str | None = None, timeout: float = 120.0,
            check: bool = False) -> tuple[int, str, str]:
        """Runs `sh -c cmd` as root on the board. Returns (exit status, stdout, stderr)."""
        data = input.encode() if isinstance(input, str) else input
        remote = f"{self.sudo}sh -c {shlex.quote(cmd)}"
        try:
            p = subprocess.run(self._ssh() + [remote], input=data if data is not None else b"",
                               capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"board command timed out after {timeout}s: {cmd}")
        if p.returncode == 255:
            raise BoardError(f"ssh to {self.target} failed: {p.stderr.decode(errors='replace')}")
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if check and p.returncode != 0:
            raise BoardError(f"board command failed ({p.returncode}): {cmd}\n{out}\n{err}")
        return p.returncode, out, err

    def _reachable(self) -> bool:
        try:
            return subprocess.run(self._ssh() + ["true"], capture_output=True, timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _open_tunnel(self) -> None:
        self._close_tunnel()
        if not self.guest_ports:
            return
        forwards: list[str] = []
        for p in self.guest_ports:
            forwards += ["-R", f"127.0.0.1:{p}:127.0.0.1:{p}"]
        self.tunnel = subprocess.Popen(self._ssh("-N", "-o", "ExitOnForwardFailure=yes", *forwards),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, start_new_session=True)
        # Up once the board's end of the first forward accepts connections.
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{self.guest_ports[0]}"
        deadline = time.monotonic() + 30
        while self.run(f"bash -c {shlex.quote(probe)}", timeout=20)[0] != 0:
            if self.tunnel.poll() is not None:
                raise BoardError(f"ssh -R failed: {self.tunnel.stderr.read().decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise BoardError("the reverse forwards did not come up in 30 s")
            time.sleep(0.5)

    def _close_tunnel(self) -> None:
        if self.tunnel is not None:
            self.tunnel.terminate()
            try:
                self.tunnel.wait(10)
            except subprocess.TimeoutExpired:
                self.tunnel.kill()
            self.tunnel = None

    def boot(self, timeout: float = 240.0) -> float:
        """The board is on already: waits for ssh and systemd, then opens the forwards."""
        start = time.monotonic()
        deadline = start + timeout
        while not self._reachable():
            if time.monotonic() > deadline:
                raise BoardError(f"{self.target} not reachable over ssh in {timeout}s")
            time.sleep(2)
        while self.run("systemctl is-system-running --wait", timeout=timeout)[1].strip() not in ("running", "degraded"):
            if time.monotonic() > deadline:
                raise BoardError("systemd did not finish starting")
            time.sleep(2)
        self._open_tunnel()
        self.boots += 1
        self.last_boot_s = time.monotonic() - start
        return self.last_boot_s

    def reboot(self, clean: bool = True) -> float:
        if not clean:
            raise BoardError("a power cut needs the VM (tests that need one are marked `vm`)")
        self._close_tunnel()
        self.run("systemctl reboot --no-block", timeout=20)
        deadline = time.monotonic() + 120
        while self._reachable():  # until it has gone down
            if time.monotonic() > deadline:
                raise BoardError("the board did not go down for its reboot")
            time.sleep(1)
        return self.boot()

    def close(self) -> None:
        self._close_tunnel()
