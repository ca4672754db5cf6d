"""A 3-node RabbitMQ cluster (Debian's rabbitmq-server 3.10 and its MQTT plugin) as the fleet's
broker: drowsed lists the three nodes (`[mqtt] url = [...]`), nodes die, and every notification the
cluster acknowledged to its publisher runs exactly once (docs/brokers.md).

The CI tests are the quorum core: `mqtt.durable_queue_type = quorum`, the device's node killed (-9)
while drowsed is online and again while it is stopped, every publish to another node; and a staged
rollout to 10 daemons with the busiest node killed a third of the way into the spread (the small
version of `BROKER=rabbitmq deploy/bench-rollout.sh`). The full
scenario (a rolling restart of all three nodes, and the same failures with RabbitMQ's default
classic queues, which lose notifications) runs with DROWSE_E2E_RABBITMQ_FULL=1:
deploy/test-rabbitmq.sh. Each test prints its counts (published / acknowledged / ran / doubled per
phase) and the nodes' start times.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from drowse_e2e import MOSQUITTO_PUB, notify_topic, wait_until
from rabbitmq import RabbitCluster, fleet_per_node, publish_qos1, rabbitmq_installed, subscribe_result
from rollout import NodeKill, accepted_not, cluster_fleet, exactly_once, max_in_window, rollout_delay, run_round
from test_notification_delivery import BIG_BUDGET, ids, note_log

APP = "news"
MOSQUITTO_SUB = str(Path(MOSQUITTO_PUB).with_name("mosquitto_sub"))
FULL = bool(os.environ.get("DROWSE_E2E_RABBITMQ_FULL"))

pytestmark = pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed")


class Run:
    """A cluster, a drowsed that lists its nodes, and the books: which ids were published in
    which phase and which of them the cluster acknowledged."""

    def __init__(self, workdir, make_drowse, queue_type: str):
        self.cluster = RabbitCluster(workdir / "rmq", queue_type=queue_type)
        t = time.monotonic()
        try:
            self.cluster.start()
        except BaseException:
            (workdir / "rabbitmq-logs.txt").write_text(self.cluster.logs())
            self.cluster.stop()
            raise
        self.cluster_start = time.monotonic() - t
        self.d = make_drowse(handler_deadline="10s", extra_config=BIG_BUDGET)
        self.d.set_mqtt(url=[n.url for n in self.cluster.nodes], keepalive="10s", groups=["eu"])
        argv, self.log = note_log(self.d, APP)
        self.d.add_app(APP, notification=argv)
        self.phases: dict[str, dict[str, list[str]]] = {}
        self.notes: dict[str, float] = {}

    def session(self) -> dict:
        return self.d.status()["mqtt"]

    def device_node(self):
        """The node drowsed's session is on (`drowse status`: mqtt.broker)."""
        broker = self.session()["broker"]
        return next(n for n in self.cluster.nodes if broker and broker.endswith(f":{n.mqtt_port}"))

    def wait_subscribed(self, not_on=None, timeout: float = 60.0) -> float:
        """Waits until drowsed's subscriptions are confirmed (on a node other than `not_on`);
        returns how long that took."""
        t = time.monotonic()

        def up():
            m = self.session()
            return m.get("subscribed") and (not_on is None or not m["broker"].endswith(f":{not_on.mqtt_port}"))
        wait_until(up, timeout, interval=0.1, what="drowsed subscribed" + (f" off {not_on.name}" if not_on else ""))
        return time.monotonic() - t

    def publish(self, phase: str, node, n: int, group: bool = False, retry_for: float = 30.0) -> list[str]:
        """n notifications with ids <phase>-<i>, QoS 1 to `node`, as a provider publishes: one
        not acknowledged (RabbitMQ 3.10 closes the publisher's connection instead of a PUBACK
        while a quorum queue has no leader) is published again, with the same id, on a new
        connection, for up to `retry_for` seconds. Returns the acknowledged ids."""
        book = self.phases.setdefault(phase, {"published": [], "acked": [], "attempts": 0, "refused": 0})
        start = len(book["published"])
        nids = [f"{phase}-{start + i:02d}" for i in range(n)]
        topic = f"drowse/groups/eu/apps/{APP}/notify" if group else notify_topic(APP, self.d.device_id)
        book["published"] += nids
        left, deadline = list(nids), time.monotonic() + retry_for
        while left:
            payloads = [json.dumps({"aps": {"content-available": 1}, "id": nid}).encode() for nid in left]
            acked = publish_qos1(node.mqtt_port, topic, payloads)
            book["attempts"] += 1
            book["acked"] += [nid for nid, ok in zip(left, acked) if ok]
            left = [nid for nid, ok in zip(left, acked) if not ok]
            if left:
                book["refused"] += 1
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        return [nid for nid in nids if nid in book["acked"]]

    def acked(self) -> set[str]:
        return {nid for b in self.phases.values() for nid in b["acked"]}

    def published(self) -> set[str]:
        return {nid for b in self.phases.values() for nid in b["published"]}

    def wait_ran(self, nids, timeout: float = 60.0) -> None:
        want = set(nids)
        wait_until(lambda: want <= set(ids(self.log)), timeout,
                   what=f"runs of {sorted(want - set(ids(self.log)))}")

    def counts(self) -> dict:
        done = ids(self.log)
        out = {}
        for phase, b in self.phases.items():
            out[phase] = {"published": len(b["published"]), "acknowledged": len(b["acked"]),
                          "connections_closed_without_puback": b["refused"],
                          "ran": sum(1 for nid in b["published"] if done[nid] >= 1),
                          "acknowledged_and_lost": sum(1 for nid in b["acked"] if done[nid] == 0),
                          "doubled": sum(1 for nid in b["published"] if done[nid] > 1)}
        return out

    def report(self, title: str) -> None:
        starts = {n.name: [round(s, 1) for s in n.start_seconds] for n in self.cluster.nodes}
        print(f"\n[rabbitmq] {title}: cluster up in {self.cluster_start:.1f} s; node starts (s): {starts}")
        print(f"[rabbitmq] {title}: {json.dumps({k: round(v, 2) for k, v in self.notes.items()})}")
        for phase, c in self.counts().items():
            print(f"[rabbitmq] {title}: {phase}: {json.dumps(c)}")

    def fleet_view(self) -> dict[str, object]:
        """What `drowse fleet` shows for the device on each node: its "online" or "absent"."""
        out = {}
        for name, devices in fleet_per_node(self.cluster.nodes).items():
            mine = [e for e in devices if e.get("device_id") == self.d.device_id]
            out[name] = mine[0].get("online") if mine else "absent"
        return out

    def restart(self, node) -> None:
        node.start()
        node.wait_started()

    def stop(self) -> None:
        self.cluster.stop()


@pytest.fixture
def run_factory(workdir, make_drowse, request):
    made: list[Run] = []

    def make(queue_type: str) -> Run:
        r = Run(workdir, make_drowse, queue_type)
        made.append(r)
        return r

    yield make
    for r in made:
        failed = getattr(getattr(request.node, "rep_call", None), "failed", False)
        if failed:
            (workdir / "rabbitmq-logs.txt").write_text(r.cluster.logs())
        r.d.cleanup()
        r.stop()


def retained_status(node, device_id: str) -> dict | None:
    """The retained status a subscription to the device's exact status topic gets from `node`."""
    r = subprocess.run([MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(node.mqtt_port), "-t", f"drowse/{device_id}/status",
                        "-C", "1", "-W", "3"], capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def kill_online(r: Run, phase: str) -> None:
    """The device's node dies (-9) while drowsed is connected to it; publishes go to another node
    before, during and after the failover."""
    x = r.device_node()
    y = next(n for n in r.cluster.nodes if n is not x and n.running())
    r.wait_ran(r.publish(phase + "-before", y, 5))
    x.kill()
    t = time.monotonic()
    r.publish(phase + "-down", y, 10)           # at once: drowsed is still finding out
    r.notes[phase + "_all_acknowledged_s"] = time.monotonic() - t  # from the kill
    r.wait_subscribed(not_on=x)
    r.notes[phase + "_failover_s"] = time.monotonic() - t  # from the kill to the subscriptions confirmed elsewhere
    r.publish(phase + "-down", y, 5, group=True)  # a group push, while the node is still down
    r.wait_ran(r.acked())
    r.restart(x)


def kill_offline(r: Run, phase: str) -> None:
    """drowsed stops; its node dies (-9); notifications are published to another node before and
    after the kill; then drowsed starts again."""
    x = r.device_node()
    y = next(n for n in r.cluster.nodes if n is not x and n.running())
    assert r.d.stop(signal.SIGTERM) == 0, r.d.exit_note()
    r.publish(phase + "-queued", y, 5)           # queued in the session while its node is up
    x.kill()
    t = time.monotonic()
    r.publish(phase + "-down", y, 5)             # the session's node is down
    r.notes[phase + "_all_acknowledged_s"] = time.monotonic() - t  # from the kill
    t = time.monotonic()
    r.d.start()
    r.wait_subscribed(not_on=x)
    r.notes[phase + "_subscribed_after_start_s"] = time.monotonic() - t
    r.restart(x)


def assert_exactly_once(r: Run) -> None:
    r.wait_ran(r.acked())
    r.d.wait_idle()
    done, started = ids(r.log), ids(r.log, "started")
    lost = sorted(r.acked() - set(done))
    doubled = {k: v for k, v in done.items() if v > 1}
    assert not lost and not doubled, f"acknowledged but never ran: {lost}; ran more than once: {doubled}; " \
                                     f"counts: {r.counts()}"
    assert set(done) <= r.published(), f"runs of ids nobody published: {set(done) - r.published()}"
    assert started == done, f"started: {dict(started)}"


def test_quorum_cluster_node_deaths_online_and_offline_lose_and_repeat_nothing(run_factory):
    r = run_factory("quorum")
    r.d.start()
    r.wait_subscribed(timeout=60)
    home = r.device_node()
    fleet_first = r.fleet_view()
    kill_online(r, "online-kill")
    r.wait_subscribed()
    kill_offline(r, "offline-kill")
    assert_exactly_once(r)
    fleet_last = r.fleet_view()
    r.report("quorum")
    print(f"[rabbitmq] quorum: drowse fleet per node, device on {home.name}: {fleet_first}; at the end, "
          f"device on {r.device_node().name}: {fleet_last}")
    # RabbitMQ 3.10 answers a subscription with retained messages only for its exact topic (and
    # from the node's own store): `drowse fleet`, which subscribes to <prefix>/+/status, finds no
    # device on any node (docs/brokers.md). Should this fail, RabbitMQ serves them now: update the page.
    assert set(fleet_first.values()) == {"absent"} and set(fleet_last.values()) == {"absent"}, (fleet_first, fleet_last)
    for b in r.phases.values():
        assert b["acked"] == b["published"], f"the cluster refused publishes with a node down: {r.counts()}"


ROLLOUT_N = 10
ROLLOUT_SPREAD = 6.0


def test_quorum_cluster_rollout_with_the_busiest_node_killed_runs_each_push_once(workdir, nginx, make_drowse):
    """A staged rollout at fleet scale: 10 daemons, each listing the three nodes (preferred node in turn),
    each sent one signed push to transfer, published through the two nodes that will live: first
    with spread 0, then with spread 6 s and the node holding the most sessions killed (-9) 2 s in,
    not restarted. Every device's events handler sees its file exactly once with the right
    sha256 (and drowsed has one transfer of it), every device of the dead node is subscribed on
    another, and the downloads start at the delays the spread gives, not in one burst."""
    cluster = RabbitCluster(workdir / "rmq", queue_type="quorum")
    try:
        cluster.start()
        fleet = cluster_fleet(workdir, cluster, ROLLOUT_N, new=lambda name, device_id: make_drowse(
            handler_deadline="20s", name=name, device_id=device_id))
        fleet.start()
        kill = NodeKill(fleet, cluster, ROLLOUT_SPREAD / 3, timeout=30)
        zero = run_round(fleet, nginx, "fw-zero", 64 * 1024, 0, 60, port_of=kill.port_of)
        rnd = run_round(fleet, nginx, "fw-kill", 64 * 1024, ROLLOUT_SPREAD, ROLLOUT_SPREAD + 60,
                        port_of=kill.port_of, during=kill)
        kill.settle()
        once = {"spread=0": exactly_once(fleet, nginx, zero), "spread+kill": exactly_once(fleet, nginx, rnd)}
        counts, not_accepted_twice = accepted_not(fleet, 2)
        k = kill.summary()
        z, s = list(zero["starts"].values()), list(rnd["starts"].values())
        listed = {name: len(devs) for name, devs in fleet_per_node([x for x in cluster.nodes if x.running()]).items()}
        print(f"\n[rabbitmq] rollout: {json.dumps(once)}\n[rabbitmq] rollout: kill {json.dumps(k)}; max starts in 1 s: "
              f"spread=0 {max_in_window(z)}, spread={ROLLOUT_SPREAD:g}+kill {max_in_window(s)}; republished "
              f"{fleet.republished}; duplicates ignored {sum(c.get('duplicate', 0) for c in counts.values())}; "
              f"drowse fleet lists {listed}")
    except BaseException:
        (workdir / "rabbitmq-logs.txt").write_text(cluster.logs())
        raise
    finally:
        cluster.stop()

    for label, c in once.items():
        assert c["ok"] and c["ran_once"] == ROLLOUT_N, (label, c)
    # A copy delivered again after the failover is ignored, not accepted to run after its own delay.
    assert not not_accepted_twice, counts
    # The busiest node held at least its share of sessions, and each of them moved to a live node.
    assert k["on_node"] >= ROLLOUT_N // 3 and k["moved"] == k["on_node"], k
    # Mid-rollout: downloads started on both sides of the kill.
    assert min(s) < k["at"] < max(s), (k["at"] - rnd["t0"], sorted(t - rnd["t0"] for t in s))
    # Without a spread every device asks at once; with it (and the kill), each at its own delay.
    assert max(z) - zero["t0"] < 3.0 and max_in_window(z) >= ROLLOUT_N * 3 // 4, sorted(t - zero["t0"] for t in z)
    assert max_in_window(s) <= ROLLOUT_N // 2 < max_in_window(z), sorted(t - rnd["t0"] for t in s)
    for dev, started in rnd["starts"].items():
        expected = rollout_delay(dev, rnd["nid"], ROLLOUT_SPREAD)
        assert expected - 0.1 <= started - rnd["t0"] <= expected + 3.0, (dev, expected, started - rnd["t0"])


@pytest.mark.skipif(not FULL, reason="the full cluster scenario: deploy/test-rabbitmq.sh")
def test_quorum_cluster_rolling_restart_loses_and_repeats_nothing(run_factory):
    r = run_factory("quorum")
    r.d.start()
    r.wait_subscribed(timeout=60)
    for i, node in enumerate(r.cluster.nodes):
        y = next(n for n in r.cluster.nodes if n is not node)
        r.publish(f"rolling-{i + 1}", y, 5)
        node.stop()                                  # a clean stop, as an upgrade does
        r.publish(f"rolling-{i + 1}", y, 5)
        r.restart(node)
        r.publish(f"rolling-{i + 1}", y, 5)
        r.wait_subscribed()
    assert_exactly_once(r)
    r.report("quorum rolling restart")


@pytest.mark.skipif(not FULL, reason="the full cluster scenario: deploy/test-rabbitmq.sh")
def test_classic_queues_lose_what_is_published_while_the_session_node_is_down(run_factory):
    """RabbitMQ's default: a session's queue lives on the node it was declared on. With that
    node down, publishes to another node are acknowledged and dropped, and the other nodes refuse
    the device's session. This is the loss that makes quorum queues a requirement."""
    r = run_factory("classic")
    r.d.start()
    r.wait_subscribed(timeout=60)
    x = r.device_node()
    y = next(n for n in r.cluster.nodes if n is not x)
    r.wait_ran(r.publish("classic-before", y, 5))
    # The device's retained status, asked for by its exact topic, is on the node it published to only.
    retained = {n.name: retained_status(n, r.d.device_id) for n in r.cluster.nodes}
    print(f"[rabbitmq] classic: retained status by exact topic per node (device on {x.name}): {retained}")
    assert retained[x.name] is not None and retained[x.name].get("online") is True, retained
    assert all(v is None for k, v in retained.items() if k != x.name), retained
    assert r.d.stop(signal.SIGTERM) == 0, r.d.exit_note()
    r.publish("classic-queued", y, 5)
    x.kill()
    r.publish("classic-down", y, 5)
    r.d.start()
    # The session cannot come up anywhere while its home node is down: drowsed is refused and
    # backs off (drowse status: failed_attempts).
    wait_until(lambda: r.session()["failed_attempts"] >= 2, 60, what="two refused sessions")
    subscribed_while_down = r.session().get("subscribed")
    r.notes["classic_subscribed_while_home_node_down"] = float(bool(subscribed_while_down))
    r.restart(x)
    r.wait_subscribed()
    r.wait_ran(r.phases["classic-before"]["acked"] + r.phases["classic-queued"]["acked"])
    r.d.wait_idle()

    # The same with drowsed online: its node dies, the other nodes refuse its session, and what is
    # published to them meanwhile is acknowledged and dropped. The session's queue lives on the
    # node it was declared on (x, the first in `url`), whichever node drowsed came back through:
    # a restart puts drowsed on x again (every node is up, x is its preferred).
    assert r.d.stop(signal.SIGTERM) == 0, r.d.exit_note()
    r.d.start()
    r.wait_subscribed()
    assert r.device_node() is x, f"drowsed is on {r.device_node().name}, its session's node is {x.name}"
    refused = r.session()["failed_attempts"]
    x.kill()
    r.publish("classic-online-down", y, 5)
    wait_until(lambda: r.session()["failed_attempts"] >= refused + 2, 60, what="two refused sessions")
    subscribed_online_while_down = r.session().get("subscribed")
    r.restart(x)
    r.wait_subscribed()
    r.d.wait_idle()
    r.report("classic")
    c = r.counts()
    for phase in ("classic-down", "classic-online-down"):
        assert c[phase]["acknowledged"] == 5 and c[phase]["acknowledged_and_lost"] == 5, \
            f"classic queues kept what was published while the session's node was down ({phase}): {c}"
    assert not subscribed_while_down and not subscribed_online_while_down, \
        "another node took the classic session while its home node was down"


@pytest.mark.skipif(not FULL, reason="the full cluster scenario: deploy/test-rabbitmq.sh")
def test_per_device_credentials_and_topic_permissions(workdir, make_drowse):
    """A device user that may use its own session queue and read its own and its groups' notify
    topics (docs/brokers.md's recipe, one RabbitMQ node): drowsed logs in with [mqtt] username and
    password_file and receives its own and its group's notifications; the same login is refused
    another device's topic; a wrong password is refused."""
    dev = "e2e-dev"
    q = f"^mqtt-subscription-drowse-{dev}qos[01]$"
    user = {"name": dev, "password": "s3cret-e2e",
            "permissions": (q, rf"^(amq\.topic|mqtt-subscription-drowse-{dev}qos[01])$",
                            rf"^(amq\.topic|mqtt-subscription-drowse-{dev}qos[01])$"),
            "topic": (rf"^drowse\.{dev}\.status$", rf"^drowse\.({dev}|groups\.eu)\.apps\.[^.]+\.notify$")}
    cluster = RabbitCluster(workdir / "rmq", n=1, queue_type="quorum", users=[user])
    try:
        cluster.start()
        node = cluster.nodes[0]
        d = make_drowse(handler_deadline="10s", extra_config=BIG_BUDGET, device_id=dev)
        pw = workdir / "device.password"
        pw.write_text("s3cret-e2e\n")
        d.set_mqtt(url=node.url, groups=["eu"], username=dev, password_file=str(pw))
        argv, log = note_log(d, APP)
        d.add_app(APP, notification=argv)
        d.start()
        wait_until(lambda: d.status()["mqtt"].get("subscribed"), 60, what="drowsed subscribed with its login")
        payload = lambda nid: json.dumps({"aps": {"content-available": 1}, "id": nid}).encode()  # noqa: E731
        assert publish_qos1(node.mqtt_port, notify_topic(APP, dev), [payload("own")]) == [True]
        assert publish_qos1(node.mqtt_port, f"drowse/groups/eu/apps/{APP}/notify", [payload("group")]) == [True]
        wait_until(lambda: {"own", "group"} <= set(ids(log)), 30, what="the device's own and group notifications")
        assert d.stop(signal.SIGTERM) == 0, d.exit_note()
        seen = {
            "own topic": subscribe_result(node.mqtt_port, notify_topic(APP, dev), f"drowse-{dev}", dev, "s3cret-e2e"),
            "another device's topic": subscribe_result(node.mqtt_port, notify_topic(APP, "pi-other"), f"drowse-{dev}",
                                                      dev, "s3cret-e2e"),
            "another group's topic": subscribe_result(node.mqtt_port, f"drowse/groups/us/apps/{APP}/notify",
                                                     f"drowse-{dev}", dev, "s3cret-e2e"),
            "wrong password": subscribe_result(node.mqtt_port, notify_topic(APP, dev), f"drowse-{dev}", dev, "wrong"),
        }
        print(f"\n[rabbitmq] credentials: {seen}")
        assert seen["own topic"] == "granted 1", seen
        assert seen["another device's topic"] in ("failure (0x80)", "connection closed"), seen
        assert seen["another group's topic"] in ("failure (0x80)", "connection closed"), seen
        assert seen["wrong password"].startswith("refused login"), seen

        # A device configured for a group its user may not read: RabbitMQ closes the connection
        # at that SUBSCRIBE, so the device gets no session at all (mosquitto grants it and
        # delivers nothing there) and backs off, the reason in `drowse status`.
        d.set_mqtt(groups=["eu", "us"])
        d.start()
        wait_until(lambda: d.status()["mqtt"]["failed_attempts"] >= 2, 60, what="two refused sessions")
        m = d.status()["mqtt"]
        print(f"[rabbitmq] credentials: a group not permitted: subscribed={m['subscribed']}, "
              f"failed_attempts={m['failed_attempts']}, last_error={m['last_error']!r}")
        assert m["subscribed"] is False, m
    finally:
        cluster.stop()
