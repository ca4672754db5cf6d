"""Drives the board VM: a Debian bookworm guest with systemd as PID 1, booted by qemu from a qcow2
overlay over the cached base image (deploy/board/build-image.sh).

- QMP (the QEMU monitor) over a unix socket: link up/down, quit.
- The qemu guest agent over a virtio-serial port (a unix socket chardev here): `run(cmd)` runs a
  shell command in the guest with standard input and returns (status, stdout, stderr).
- boot / poweroff (clean, from systemd) / power_cut (SIGKILL of qemu: the disk is cache=none, so
  what the guest had not written is lost as on a real board) / reboot.
- Networking: qemu's user-mode network with restrict=on, so the guest reaches nothing but the host
  ports forwarded to it with `guest_ports` (guestfwd: 10.0.2.100:PORT in the guest is
  127.0.0.1:PORT on the host). No packet leaves the host.

Only the standard library is used.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

# What the guest calls the host's forwarded ports: qemu's guestfwd address in the VM; over ssh
# (BOARD_SSH, ssh_board.py) the board's own loopback, where ssh's reverse forwards listen.
HOST_IN_GUEST = "127.0.0.1" if os.environ.get("BOARD_SSH") else "10.0.2.100"


class BoardError(RuntimeError):
    pass


# Under KVM the guest agent answers within seconds of the start (under TCG, a minute or more).
KVM_SILENT_S = 60.0


class QemuExited(BoardError):
    pass


def _kvm_usable(arch: str) -> bool:
    """KVM only for a guest of the host's own architecture and when /dev/kvm opens; the caller still
    falls back to TCG if qemu refuses (a paravirtual /dev/kvm a stock kernel cannot use)."""
    host = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine())
    if host != arch or os.environ.get("BOARD_ACCEL", "") == "tcg":
        return False
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


class JsonSocket:
    """Newline-delimited JSON over a unix socket (QMP and the guest agent both speak it)."""

    def __init__(self, path: Path, timeout: float):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def send(self, obj) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self, timeout: float):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        # guest-sync-delimited answers after a 0xFF byte that resets the parser.
        line = line.rsplit(b"\xff", 1)[-1].strip()
        if not line:
            return self.recv(max(0.01, deadline - time.monotonic()))
        return json.loads(line)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class GuestShell:
    """What the tests use of a board, over any transport: `run` is the driver's own."""

    def run(self, cmd: str, input: bytes | str | None = None, timeout: float = 120.0,
            check: bool = False) -> tuple[int, str, str]:
        raise NotImplementedError

    def sh(self, cmd: str, **kw) -> str:
        """run(..., check=True), stdout only."""
        return self.run(cmd, check=True, **kw)[1]

    def write_file(self, path: str, data: bytes | str, mode: str = "0644") -> None:
        self.run(f"install -D -m {mode} /dev/stdin {shlex.quote(path)}", input=data, check=True)


class Board(GuestShell):
    def __init__(self, image_dir: Path, workdir: Path, share: Path, arch: str = "amd64",
                 memory_mb: int = 1024, cpus: int = 2, guest_ports: tuple[int, ...] = (), ssh_port: int | None = None):
        self.image_dir = Path(image_dir)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.share = Path(share)
        self.arch = arch
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.guest_ports = guest_ports
        # The guest's sshd on this host's 127.0.0.1:ssh_port (hostfwd), for the ssh driver's test.
        self.ssh_port = ssh_port
        self.overlay = self.dir / "overlay.qcow2"
        self.qmp_path = self.dir / "qmp.sock"
        self.qga_path = self.dir / "qga.sock"
        self.console = self.dir / "console.log"
        self.proc: subprocess.Popen | None = None
        self.qga: JsonSocket | None = None
        self.accel = "kvm" if _kvm_usable(arch) else "tcg"
        self.boots = 0
        self.last_boot_s = 0.0
        # The RTC at the next boot (qemu's `-rtc base=`): None is the host's UTC time; a date such as
        # "2020-01-01T00:00:00" boots a board whose clock is far behind, as a Pi without an RTC does.
        self.rtc_base: str | None = None

    # ------------------------------------------------------------------ qemu

    def make_overlay(self) -> None:
        """A fresh qcow2 overlay: the base image stays clean, everything the guest writes is here."""
        self.overlay.unlink(missing_ok=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.image_dir / "base.img"),
                        "-F", "raw", str(self.overlay)], check=True, timeout=60)

    def _qemu_argv(self, accel: str) -> list[str]:
        fwd = "".join(f",guestfwd=tcp:{HOST_IN_GUEST}:{p}-cmd:nc 127.0.0.1 {p}" for p in self.guest_ports)
        if self.ssh_port:
            fwd += f",hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22"
        if self.arch == "amd64":
            binary, machine, console = "qemu-system-x86_64", "q35", "ttyS0"
        else:  # arm64: needs an aarch64 drowse in the .deb; these machines cannot build one.
            binary, machine, console = "qemu-system-aarch64", "virt", "ttyAMA0"
        cpu = ["-cpu", "host"] if accel == "kvm" else ["-cpu", "max"]
        accel_arg = "kvm" if accel == "kvm" else "tcg,thread=multi"
        return [
            "nice", "-n", "10", binary,
            "-machine", machine, "-accel", accel_arg, *cpu,
            "-smp", str(self.cpus), "-m", str(self.memory_mb),
            "-nodefaults", "-display", "none", "-no-user-config",
            "-kernel", str(self.image_dir / "vmlinuz"), "-initrd", str(self.image_dir / "initrd.img"),
            "-append", f"root=/dev/vda rw console={console} quiet systemd.show_status=0 net.ifnames=0",
            # cache=none: no host page cache between the guest and the disk, so SIGKILL of qemu loses
            # exactly what the guest had not flushed, as a power cut does.
            "-drive", f"file={self.overlay},if=virtio,format=qcow2,cache=none,aio=threads",
            "-netdev", f"user,id=n0,restrict=on{fwd}",
            "-device", "virtio-net-pci,netdev=n0",
            "-virtfs", f"local,path={self.share},mount_tag=host,security_model=none,id=host",
            "-chardev", f"socket,path={self.qga_path},server=on,wait=off,id=qga0",
            "-device", "virtio-serial",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
            "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
            "-serial", f"file:{self.console}",
            "-rtc", f"base={self.rtc_base or 'utc'},clock=host",
        ]

    def boot(self, timeout: float = 240.0) -> float:
        """Starts qemu and waits until systemd says the system is up. Returns the boot time (s)."""
        assert self.proc is None, "already running"
        if not self.overlay.exists():
            self.make_overlay()
        for p in (self.qmp_path, self.qga_path):
            p.unlink(missing_ok=True)
        start = time.monotonic()
        self.boot_timeout = timeout
        log = open(self.dir / "qemu.log", "ab")
        self.proc = subprocess.Popen(self._qemu_argv(self.accel), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        try:
            self._connect_agent(deadline=start + timeout)
        except QemuExited:
            self.proc = None
            if self.accel != "kvm":
                raise
            # A /dev/kvm that opens but cannot run this guest (a paravirtual one that a stock
            # kernel's KVM setup trips on): TCG from now on.
            self.accel = "tcg"
            return self.boot(timeout)
        self.boots += 1
        # The agent starts early; wait for the rest of the boot (multi-user.target reached).
        left = max(5.0, start + timeout - time.monotonic())
        rc, out, _ = self.run("systemctl is-system-running --wait", timeout=left)
        state = out.strip()
        if state not in ("running", "degraded"):
            raise BoardError(f"the guest did not come up: is-system-running = {state!r}")
        if state == "degraded":
            _, failed, _ = self.run("systemctl --failed --no-legend")
            raise BoardError(f"the guest came up degraded:\n{failed}")
        self.run("mountpoint -q /mnt/host || mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host",
                 check=True)
        self.last_boot_s = time.monotonic() - start
        return self.last_boot_s

    def _connect_agent(self, deadline: float) -> None:
        """Connects to the guest agent and syncs (guest-sync-delimited drops stale answers)."""
        sync_id = 0
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise QemuExited(f"qemu exited while booting:\n{self._tail('qemu.log')}")
            # A /dev/kvm that opens but runs nothing (the guest hangs before its agent starts):
            # qemu does not exit, so give it up here and boot again under TCG.
            if self.accel == "kvm" and time.monotonic() > deadline - self.boot_timeout + KVM_SILENT_S:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self._reap(30)
                raise QemuExited(f"the guest agent did not answer under KVM within {KVM_SILENT_S:.0f} s")
            if time.monotonic() > deadline:
                raise BoardError(f"the guest agent did not answer in time; console:\n{self._tail('console.log')}")
            try:
                if self.qga is None:
                    self.qga = JsonSocket(self.qga_path, 2.0)
                sync_id += 1
                token = (os.getpid() << 16) + sync_id
                self.qga.send({"execute": "guest-sync-delimited", "arguments": {"id": token}})
                while True:
                    msg = self.qga.recv(2.0)
                    if msg.get("return") == token:
                        return
            except (TimeoutError, ValueError):
                pass  # the agent in the guest is not reading yet: sync again on this connection
            except (OSError, ConnectionError):
                if self.qga is not None:  # qemu's socket not there yet, or it closed
                    self.qga.close()
                self.qga = None
                time.sleep(0.5)

    def _tail(self, name: str, n: int = 4000) -> str:
        try:
            return (self.dir / name).read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    def qmp(self, command: str, **arguments):
        """One QMP command on a fresh connection (greeting, qmp_capabilities, command)."""
        s = JsonSocket(self.qmp_path, 5.0)
        try:
            s.recv(5.0)  # greeting
            s.send({"execute": "qmp_capabilities"})
            s.recv(5.0)
            s.send({"execute": command, "arguments": arguments})
            while True:
                msg = s.recv(10.0)
                if "return" in msg:
                    return msg["return"]
                if "error" in msg:
                    raise BoardError(f"QMP {command}: {msg['error']}")
        finally:
            s.close()

    def set_link(self, up: bool) -> None:
        """A real carrier change on the guest's network card."""
        self.qmp("set_link", name="n0", up=up)

    def _reap(self, timeout: float) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.qga is not None:
                self.qga.close()
            self.qga = None
            self.proc = None

    def power_cut(self) -> None:
        """SIGKILL of qemu: the board loses power (the disk has what the guest had flushed)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self._reap(30)

    def poweroff(self, timeout: float = 120.0) -> None:
        """A clean shutdown by systemd (services stopped, file systems unmounted)."""
        assert self.proc is not None
        try:
            self.run("systemctl poweroff --no-block", timeout=10)
        except (BoardError, TimeoutError, OSError):
            pass
        try:
            self._reap(timeout)
        except subprocess.TimeoutExpired:
            self.power_cut()
            raise BoardError("the guest did not power off in time (power cut instead)")

    def reboot(self, clean: bool = True) -> float:
        if clean:
            self.poweroff()
        else:
            self.power_cut()
        return self.boot()

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.poweroff(timeout=60)
            except Exception:
                if self.proc is not None:
                    self.power_cut()

    # ------------------------------------------------------------------ guest agent

    def _agent(self, command: str, arguments: dict | None = None, timeout: float = 30.0):
        if self.qga is None:
            raise BoardError("the guest agent is not connected")
        msg = {"execute": command}
        if arguments is not None:
            msg["arguments"] = arguments
        self.qga.send(msg)
        answer = self.qga.recv(timeout)
        if "error" in answer:
            raise BoardError(f"guest agent {command}: {answer['error']}")
        return answer.get("return")

    def run(self, cmd: str, input: bytes | str | None = None, timeout: float = 120.0,
            check: bool = False) -> tuple[int, str, str]:
        """Runs `sh -c cmd` as root in the guest. Returns (exit status, stdout, stderr)."""
        args = {"path": "/bin/sh", "arg": ["-c", cmd], "capture-output": True}
        if input is not None:
            data = input.encode() if isinstance(input, str) else input
            args["input-data"] = base64.b64encode(data).decode()
        pid = self._agent("guest-exec", args)["pid"]
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            st = self._agent("guest-exec-status", {"pid": pid})
            if st.get("exited"):
                break
            if time.monotonic() > deadline:
                self._agent("guest-exec", {"path": "/bin/kill", "arg": ["-9", str(pid)]})
                raise TimeoutError(f"guest command timed out after {timeout}s: {cmd}")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
        err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
        rc = st.get("exitcode", -st.get("signal", 0) or -1)
        if check and rc != 0:
            raise BoardError(f"guest command failed ({rc}): {cmd}\n{out}\n{err}")
        return rc, out, err
