"""Power and network awareness against real links in a network namespace the test makes, a fake
power_supply tree and a real nginx."""

import hashlib
import json
import os
import shutil
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from drowse_e2e import NGINX, ctx_switches, sha256_file, wait_until, write_random_file

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 to make a network namespace")


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


class Namespace:
    """A network namespace with lo and a veth pair: v0 (10.213.0.2/24) and v1 (10.214.0.2/24).
    No default route until the test adds one."""

    def __init__(self):
        self.name = "drowse-" + uuid.uuid4().hex[:8]
        sh("ip", "netns", "add", self.name)
        # No IPv6: its address autoconfiguration would keep sending route messages for seconds.
        self.exec("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", check=False)
        self.exec("ip", "link", "set", "lo", "up")
        self.exec("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        for dev, net in (("v0", "10.213.0.2/24"), ("v1", "10.214.0.2/24")):
            self.exec("ip", "link", "set", dev, "up")
            self.exec("ip", "addr", "add", net, "dev", dev)

    def exec(self, *args, check=True):
        return sh("ip", "netns", "exec", self.name, *args, check=check)

    def default_via(self, dev):
        gw = {"v0": "10.213.0.1", "v1": "10.214.0.1"}[dev]
        self.exec("ip", "route", "replace", "default", "via", gw, "dev", dev)

    def no_default(self):
        self.exec("ip", "route", "del", "default", check=False)

    def delete(self):
        sh("ip", "netns", "del", self.name, check=False)


class NsNginx:
    """nginx inside the namespace, on its own 127.0.0.1, with a rate-limited /slow/."""

    def __init__(self, ns: Namespace, workdir: Path, rate="2m"):
        self.ns, self.dir, self.port = ns, workdir, 8080
        (workdir / "www" / "slow").mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        conf = workdir / "nginx.conf"
        conf.write_text(textwrap.dedent(f"""\
            user root; daemon off; worker_processes 1; pid {workdir}/nginx.pid;
            error_log {workdir}/error.log;
            events {{ worker_connections 64; }}
            http {{
                access_log {workdir}/access.log;
                client_body_temp_path {workdir}/tmp/b; proxy_temp_path {workdir}/tmp/p;
                fastcgi_temp_path {workdir}/tmp/f; uwsgi_temp_path {workdir}/tmp/u; scgi_temp_path {workdir}/tmp/s;
                server {{ listen 127.0.0.1:{self.port}; root {workdir}/www;
                         location /slow/ {{ limit_rate {rate}; }} }}
            }}
            """))
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns.name, NGINX, "-p", str(workdir), "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: ns.exec("curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{self.port}/", check=False).returncode == 0,
                   10, what="nginx in the namespace")

    def add(self, name, size):
        return write_random_file(self.dir / "www" / "slow" / name, size)

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/slow/{name}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def fake_sysfs(base: Path, ac_online: int, battery: int, status="Discharging") -> Path:
    root = base / "sys"
    ps = root / "class" / "power_supply"
    (ps / "AC").mkdir(parents=True, exist_ok=True)
    (ps / "BAT0").mkdir(parents=True, exist_ok=True)
    (ps / "AC" / "type").write_text("Mains\n")
    (ps / "AC" / "online").write_text(f"{ac_online}\n")
    (ps / "BAT0" / "type").write_text("Battery\n")
    (ps / "BAT0" / "capacity").write_text(f"{battery}\n")
    (ps / "BAT0" / "status").write_text(status + "\n")
    # A malformed supply must not disturb anything.
    (ps / "junk").mkdir(exist_ok=True)
    (ps / "junk" / "type").write_text("\x00\xff")
    (ps / "junk" / "capacity").write_text("lots")
    net = root / "class" / "net"
    if not net.exists():
        net.symlink_to("/sys/class/net")  # inside `ip netns exec`, the namespace's own links
    return root


@pytest.fixture
def ns():
    n = Namespace()
    yield n
    n.delete()


@pytest.fixture
def ns_nginx(ns, workdir):
    n = NsNginx(ns, workdir / "nginx-ns")
    yield n
    n.stop()


def start_in_ns(make_drowse, ns, workdir, ac_online=1, battery=80, metered=("v0",)):
    sysfs = fake_sysfs(workdir, ac_online, battery)
    d = make_drowse(extra_config=f"""
        [conditions]
        sysfs_root = "{sysfs}"
        metered_interfaces = {json.dumps(list(metered))}
        battery_low_percent = 20
        [transfers]
        commit_interval = "200ms"
    """)
    d.prefix = ["ip", "netns", "exec", ns.name]
    d.add_app("dl", fetch=d.recorder("dl"))
    d.start()
    return d


def state(d, tid):
    return d.transfer(tid)


def test_transfers_wait_for_a_link_pause_without_one_and_resume(ns, ns_nginx, make_drowse, workdir):
    d = start_in_ns(make_drowse, ns, workdir)
    assert d.json("conditions")["network"] == "none"
    sha = ns_nginx.add("a.bin", 12 * 1024 * 1024)  # ~6 s at 2 MiB/s
    dest = workdir / "a.bin"
    tid = d.download(ns_nginx.url("a.bin"), "dl", "--to", str(dest))
    t = state(d, tid)
    assert t["state"] == "waiting" and "no network" in (t["reason"] or ""), t

    ns.default_via("v1")  # an unmetered link appears: the netlink event starts the work
    wait_until(lambda: state(d, tid)["state"] == "running" and state(d, tid)["bytes_done"] > 0, 3,
               what="the transfer to start once a default route exists")
    c = d.json("conditions")
    assert c["network"] == "ethernet" and c["interface"] == "v1" and c["metered"] is False, c

    ns.no_default()
    wait_until(lambda: state(d, tid)["state"] == "paused", 3, what="the transfer to pause without a link")
    t = state(d, tid)
    assert "no network" in t["reason"], t
    held = t["bytes_done"]
    time.sleep(0.3)  # at 2 MiB/s a transfer still moving would add about 600 KiB
    assert state(d, tid)["bytes_done"] == held, "a paused transfer kept moving"
    assert not dest.exists()

    ns.default_via("v1")
    wait_until(lambda: state(d, tid)["state"] == "completed", 20, what="the transfer to finish")
    assert sha256_file(dest) == sha
    # It resumed rather than starting over: the log holds a ranged request answered 206.
    log = (ns_nginx.dir / "access.log").read_text()
    assert '" 206 ' in log, log


def test_discretionary_and_no_cellular_wait_for_the_right_network(ns, ns_nginx, make_drowse, workdir):
    d = start_in_ns(make_drowse, ns, workdir)
    sha = ns_nginx.add("b.bin", 2 * 1024 * 1024)
    ns.default_via("v0")  # metered (metered_interfaces)
    wait_until(lambda: d.json("conditions")["metered"] is True, 3, what="the metered link to be seen")
    plain = d.download(ns_nginx.url("b.bin"), "dl", "--to", str(workdir / "plain.bin"))
    disc = d.download(ns_nginx.url("b.bin"), "dl", "--to", str(workdir / "disc.bin"), "--discretionary")
    wait_until(lambda: state(d, plain)["state"] == "completed", 10, what="the ordinary download on a metered link")
    t = state(d, disc)
    assert t["state"] == "waiting" and "metered network" in t["reason"], t
    assert not (workdir / "disc.bin").exists()

    ns.default_via("v1")  # unmetered
    wait_until(lambda: state(d, disc)["state"] == "completed", 10, what="the discretionary download once unmetered")
    assert sha256_file(workdir / "disc.bin") == sha


def test_requires_power_waits_for_external_power(ns, ns_nginx, make_drowse, workdir):
    d = start_in_ns(make_drowse, ns, workdir, ac_online=0, battery=15)
    ns.default_via("v1")
    c = d.json("conditions", "--refresh")
    assert c["power_source"] == "battery" and c["battery_percent"] == 15, c
    sha = ns_nginx.add("c.bin", 1024 * 1024)
    tid = d.download(ns_nginx.url("c.bin"), "dl", "--to", str(workdir / "c.bin"), "--requires-power")
    disc = d.download(ns_nginx.url("c.bin"), "dl", "--to", str(workdir / "d.bin"), "--discretionary")
    time.sleep(0.3)  # a 1 MiB download that started would be under way (or done) by now on loopback
    assert state(d, tid)["state"] == "waiting" and "battery" in state(d, tid)["reason"], state(d, tid)
    assert "battery low" in state(d, disc)["reason"], state(d, disc)

    (workdir / "sys/class/power_supply/AC/online").write_text("1\n")  # plugged in (no uevents from a fake tree)
    (workdir / "sys/class/power_supply/BAT0/status").write_text("Charging\n")
    c = d.json("conditions", "--refresh")
    assert c["power_source"] == "ac" and c["charging"] is True, c
    wait_until(lambda: state(d, tid)["state"] == "completed" and state(d, disc)["state"] == "completed", 10,
               what="both downloads on external power")
    assert sha256_file(workdir / "c.bin") == sha == sha256_file(workdir / "d.bin")


def woke(before, after):
    """Wakeups of the threads that lived through the whole interval (libdispatch's start-up
    workers exit a few seconds after start; their exit is not an idle wakeup)."""
    return sum(after[t] - before[t] for t in after if t in before)


def test_daemon_sleeps_while_nothing_changes_and_wakes_at_a_change(ns, make_drowse, workdir):
    d = start_in_ns(make_drowse, ns, workdir)
    pid = int(sh("pgrep", "-f", f"drowsed --config {d.config}").stdout.split()[0])
    time.sleep(0.5)  # let start-up settle (threads that exit meanwhile are not counted: see woke)
    before = ctx_switches(pid)
    time.sleep(3.0)  # a 1 Hz poller would show 3 here, over the 2 allowed
    quiet = woke(before, ctx_switches(pid))
    after = ctx_switches(pid)
    names = {t: Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() for t in after}
    assert quiet <= 2, f"{quiet} context switches in 3 s of nothing: " + str({names[t]: after[t] - before[t] for t in after if t in before})

    before = ctx_switches(pid)
    ns.default_via("v1")
    # No --refresh: only the kernel's netlink message can have told the daemon.
    wait_until(lambda: d.json("conditions")["network"] == "ethernet", 2, what="the new route to be noticed")
    assert woke(before, ctx_switches(pid)) > 0
