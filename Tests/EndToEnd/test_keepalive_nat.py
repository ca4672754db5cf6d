"""The adaptive keepalive (`[mqtt] keepalive`, `max_keepalive`) behind a real NAT: drowsed in a
network namespace whose only way out is a second namespace that masquerades it, with conntrack's
established-TCP timeout made short, and mosquitto beyond, in a third namespace that has no route
back to drowsed's addresses. drowsed finds the longest interval the NAT holds within a bounded
number of reconnects, no notification published while the NAT has forgotten the connection is lost
or run twice, and what was learned survives a restart.

    dev (drowsed)                 nat                                   wan (mosquitto)
    up0 10.77.1.2 ---- nv0 10.77.1.1 | masquerade out of nw0 10.77.2.1 ---- bw0 10.77.2.2:1883
    default via 10.77.1.1            | tcp_timeout_established = NAT_TIMEOUT

How the learner moves here ([mqtt] keepalive 5 s, max_keepalive 60 s, a NAT that forgets a
connection idle for NAT_TIMEOUT = 17 s): each interval pinged at twice with an answer doubles,
5, 5, 10, 10, then 20, whose ping the NAT drops; after min(20/2, 30) = 10 s without an answer the
link counts as dead, and the reconnect comes up at once, so 20 failed. The search goes on between
the longest interval that held (10, held twice again) and the shortest that failed: 15, which
holds twice, and 20 - 15 is within the resolution max(5 s, 10 % of 15): it stops at 15. So one
failure (two connections through the NAT) and 15 s. In general the interval it stops at held
(h <= NAT_TIMEOUT) and the shortest failure f is past the timeout (f > NAT_TIMEOUT) with
f - h <= max(5, h / 10): below 50 s that is NAT_TIMEOUT - 5 <= h <= NAT_TIMEOUT.

NAT_TIMEOUT sits 2 s from 15 and 3 s from 20, the intervals tried next to it: a ping goes a
little (the timer's 50 ms) after a whole interval of silence, and the NAT's clock starts at the
last packet through it.

Only outcomes are asserted: connections at the broker (its log: each CONNECT, from the NAT's
address), the pings it received (the UNSUBSCRIBEs of drowsed's keepalive topic, with the broker's
timestamps, whole seconds: compared give or take one), `drowse status --json` (mqtt.ping_interval,
ping_learned_on, max_keepalive) and the notification handler's runs per id. About 2.5 minutes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from drowse_e2e import DEVICE_ID, MOSQUITTO, MOSQUITTO_PUB, Broker, netns_unusable, notify_topic, stop_process, wait_until
from test_notification_delivery import BIG_BUDGET, ids, note_log

NAT_TIMEOUT = 17
KEEPALIVE = 5
MAX_KEEPALIVE = 60
APP = "news"
DEV_IF = "up0"
NAT_INSIDE, NAT_OUTSIDE, BROKER_ADDR = "10.77.1.1", "10.77.2.1", "10.77.2.2"
CLIENT_ID = f"drowse-{DEVICE_ID}"


def unusable() -> str | None:
    why = netns_unusable()
    if why:
        return why
    if shutil.which("iptables") is None:
        return "no iptables to masquerade between the namespaces (deploy/test.sh installs it)"
    return None


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


class Topology:
    """The three namespaces, named uniquely; `delete` removes them with their links."""

    def __init__(self):
        tag = uuid.uuid4().hex[:8]
        self.dev, self.nat, self.wan = (f"drowse-{n}-{tag}" for n in ("dev", "nat", "wan"))
        self.made: list[str] = []

    def make(self) -> None:
        for ns in (self.dev, self.nat, self.wan):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            # No IPv6: its autoconfiguration sends packets and route messages of its own.
            self.exec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", check=False)
            self.exec(ns, "ip", "link", "set", "lo", "up")
        # Each veth is made with its ends already in their namespaces (no name on the host).
        sh("ip", "link", "add", DEV_IF, "netns", self.dev, "type", "veth", "peer", "name", "nv0", "netns", self.nat)
        sh("ip", "link", "add", "nw0", "netns", self.nat, "type", "veth", "peer", "name", "bw0", "netns", self.wan)
        for ns, dev, addr in ((self.dev, DEV_IF, "10.77.1.2/24"), (self.nat, "nv0", f"{NAT_INSIDE}/24"),
                              (self.nat, "nw0", f"{NAT_OUTSIDE}/24"), (self.wan, "bw0", f"{BROKER_ADDR}/24")):
            self.exec(ns, "ip", "addr", "add", addr, "dev", dev)
            self.exec(ns, "ip", "link", "set", dev, "up")
        self.exec(self.dev, "ip", "route", "add", "default", "via", NAT_INSIDE, "dev", DEV_IF)
        # The NAT. A packet of a connection conntrack has forgotten must be dropped, as by a
        # router whose mapping expired: with tcp_loose (the default) conntrack would take a
        # mid-stream packet up as a new connection and the old one would live on. Dropped in
        # INPUT too: the broker's packets for a forgotten mapping are addressed to the NAT itself.
        for rule in (["-t", "nat", "-A", "POSTROUTING", "-o", "nw0", "-j", "MASQUERADE"],
                     ["-A", "FORWARD", "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"],
                     ["-A", "INPUT", "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]):
            self.exec(self.nat, "iptables", *rule)
        self.exec(self.nat, "sysctl", "-qw", "net.ipv4.ip_forward=1",
                  f"net.netfilter.nf_conntrack_tcp_timeout_established={NAT_TIMEOUT}",
                  "net.netfilter.nf_conntrack_tcp_loose=0")

    def exec(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def delete(self) -> None:
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)

    def idle_ms(self) -> int | None:
        """How long drowsed's connection to the broker has carried nothing either way (ms, the
        kernel's figures in the dev namespace), or None without one established connection."""
        out = self.exec(self.dev, "ss", "-Htni", "state", "established", "dst", BROKER_ADDR).stdout
        figures = [int(v) for v in re.findall(r"\blast(?:snd|rcv|ack):(\d+)", out)]
        return min(figures) if len(figures) == 3 else None


class WanBroker(Broker):
    """mosquitto in the wan namespace, on BROKER_ADDR:1883."""

    def __init__(self, workdir: Path, topo: Topology):
        super().__init__(workdir, port=1883)
        self.topo = topo

    @property
    def url(self) -> str:
        return f"mqtt://{BROKER_ADDR}:{self.port}"

    def listener_lines(self) -> list[str]:
        return [f"listener {self.port} {BROKER_ADDR}", "allow_anonymous true"]

    def start(self, timeout: float = 10.0) -> None:
        self.conf.write_text("\n".join(l for l in self.config_lines() if l) + "\n")
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.topo.wan, MOSQUITTO, "-c", str(self.conf)],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: self.proc.poll() is not None
                   or self.topo.exec(self.topo.wan, "ss", "-Hltn", "sport", "=", f":{self.port}").stdout.strip(),
                   timeout, interval=0.1, what="mosquitto to listen in the wan namespace")
        if self.proc.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {self.proc.returncode}:\n{self.out.read_text(errors='replace')}")

    def stop(self, sig=None) -> None:
        stop_process(self.proc)
        self.proc = None

    def publish_note(self, nid: str) -> None:
        """A QoS 1 notification for APP with id `nid`; returns once the broker has it (PUBACK)."""
        payload = json.dumps({"aps": {"content-available": 1}, "id": nid}).encode()
        subprocess.run(["ip", "netns", "exec", self.topo.wan, MOSQUITTO_PUB, "-h", BROKER_ADDR, "-p", str(self.port),
                        "-q", "1", "-t", notify_topic(APP), "-s"], input=payload, check=True, timeout=15, capture_output=True)

    def sessions(self) -> list[list[int]]:
        """drowsed's connections through the NAT, in order, each as when (the broker's clock, whole
        seconds) it connected and then when each of its keepalive pings (UNSUBSCRIBE) arrived."""
        out: list[list[int]] = []
        connected = re.compile(rf"(\d+): New client connected from {re.escape(NAT_OUTSIDE)}:\d+ as {re.escape(CLIENT_ID)} ")
        ping = re.compile(rf"(\d+): Received UNSUBSCRIBE from {re.escape(CLIENT_ID)}$")
        for line in self.log_text().splitlines():
            if m := connected.match(line):
                out.append([int(m[1])])
            elif (m := ping.match(line)) and out:
                out[-1].append(int(m[1]))
        return out

    def connections(self) -> int:
        return len(self.sessions())

    def ping_gaps(self, session: int) -> list[int]:
        """Seconds from that connection to its first ping, and between each ping and the next."""
        times = self.sessions()[session]
        return [b - a for a, b in zip(times, times[1:])]


def near(got: list[int], want: list[int]) -> bool:
    """The same intervals, give or take the second the broker's whole-second clock may add."""
    return len(got) == len(want) and all(abs(g - w) <= 1 for g, w in zip(got, want))


@pytest.mark.skipif(unusable() is not None, reason=unusable() or "")
def test_behind_a_nat_the_keepalive_finds_its_timeout_and_loses_no_notification(workdir, make_drowse, request):
    began = time.monotonic()
    topo = Topology()
    broker = None
    d = None
    try:
        topo.make()
        broker = WanBroker(workdir / "mqtt", topo)
        request.node._extra_brokers = [broker]
        broker.start()
        d = make_drowse(broker=broker, handler_deadline="10s", extra_config=BIG_BUDGET)
        d.set_mqtt(keepalive=f"{KEEPALIVE}s", max_keepalive=f"{MAX_KEEPALIVE}s")
        d.prefix = ["ip", "netns", "exec", topo.dev]
        argv, log = note_log(d, APP)
        d.add_app(APP, notification=argv)
        d.start()
        broker.wait_subscribed(notify_topic(APP))
        status = d.status()["mqtt"]
        assert status["max_keepalive"] == MAX_KEEPALIVE, status

        def ping_interval() -> int:
            return d.status()["mqtt"]["ping_interval"]

        # 5 and 10 held twice each: 20 is tried, which the NAT does not hold.
        wait_until(lambda: ping_interval() == 20, 60, interval=0.5, what="the ping interval to reach 20 s")
        assert broker.connections() == 1, broker.sessions()
        # The NAT has forgotten the idle connection (its timeout has passed since the last packet
        # either way): what the broker sends now cannot reach drowsed until it reconnects.
        wait_until(lambda: (topo.idle_ms() or 0) >= (NAT_TIMEOUT + 1) * 1000, 30, interval=0.2,
                   what=f"{NAT_TIMEOUT + 1} s without traffic on drowsed's connection")
        assert broker.connections() == 1, broker.sessions()
        sent = [f"forgotten-{i}" for i in range(3)]
        for nid in sent:
            broker.publish_note(nid)

        # None runs before drowsed has reconnected: the NAT dropped them. (The runs are read
        # before the connections: a run seen with one connection logged came before the second.)
        early: list[int] = []

        def reconnected():
            runs, conns = sum(ids(log, "started").values()), broker.connections()
            if runs and conns < 2:
                early.append(runs)
            return conns >= 2
        wait_until(reconnected, 30, interval=0.2, what="drowsed to find the link dead and reconnect")
        assert not early, f"{early[0]} handler runs before drowsed reconnected: the NAT let the notifications through"
        wait_until(lambda: set(sent) <= set(ids(log)), 20, what=f"the runs of {sent} (have {dict(ids(log))})")

        # The search: 10 again (twice), then 15 (twice), which holds.
        def searched():
            g = broker.ping_gaps(1)
            # Done, or gone wrong (another reconnect, a longer interval): the asserts below say which.
            return near(g[2:4], [15, 15]) or broker.connections() > 2 or max(g, default=0) > 16
        wait_until(searched, 60, interval=0.5, what="two answered pings 15 s apart after the reconnect")
        learned = d.status()["mqtt"]
        print(f"\n[nat] pings, s apart: {broker.ping_gaps(0)}, then the NAT dropped the connection; after the reconnect "
              f"{broker.ping_gaps(1)}; connections through the NAT: {broker.connections()}; "
              f"ping_interval {learned['ping_interval']} s on {learned['ping_learned_on']}; {time.monotonic() - began:.0f} s so far")
        assert broker.connections() == 2, f"one failure (20 s) expected: {broker.sessions()}"
        assert near(broker.ping_gaps(0), [5, 5, 10, 10]), broker.sessions()
        assert near(broker.ping_gaps(1)[:4], [10, 10, 15, 15]), broker.sessions()
        assert learned["ping_learned_on"] == DEV_IF, learned
        assert NAT_TIMEOUT - 5 <= learned["ping_interval"] <= NAT_TIMEOUT, learned

        # Kept across a restart (state.db): the interval is known at once, and the first pings go
        # at it, answered, with no new failure.
        assert d.stop() == 0, d.exit_note()
        d.start()
        wait_until(lambda: broker.connections() == 3, 20, what="drowsed to connect again after the restart")
        again = d.status()["mqtt"]
        assert again["ping_interval"] == learned["ping_interval"] and again["ping_learned_on"] == DEV_IF, again
        wait_until(lambda: len(broker.ping_gaps(2)) >= 2 or broker.connections() > 3,
                   2 * NAT_TIMEOUT + 10, interval=0.5, what="two pings after the restart")
        took = time.monotonic() - began
        print(f"[nat] after the restart: pings {broker.ping_gaps(2)} s apart, connections {broker.connections()}; {took:.0f} s in all")
        assert broker.connections() == 3, broker.sessions()
        assert near(broker.ping_gaps(2), [learned["ping_interval"]] * 2), broker.sessions()
        assert d.status()["mqtt"]["ping_interval"] == learned["ping_interval"]

        d.wait_idle()
        assert ids(log) == Counter({nid: 1 for nid in sent}), f"runs per id: {dict(ids(log))}"
        assert ids(log, "started") == ids(log)
    finally:
        if d is not None and d.proc is not None:
            d.stop()
        if broker is not None and broker.proc is not None:
            broker.stop()
        topo.delete()
