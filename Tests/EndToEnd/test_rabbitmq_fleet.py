"""`drowse fleet --roll-call` on the 3-node RabbitMQ quorum cluster (docs/brokers.md, "Listing the
fleet"): RabbitMQ 3.10 keeps retained messages per node and hands them to exact-topic subscriptions
only, so the listing asks the online devices (`[mqtt] roll_call = true`) to publish their status
again, and must list every one of them, through every node, with the node that held the most
sessions killed (-9). With `--session`, the listing's persistent session (a quorum queue) keeps
the last wills of devices that died meanwhile, so the dead ones are listed too, offline.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from drowse_e2e import DROWSE, wait_until
from rabbitmq import RabbitCluster, fleet_per_node, rabbitmq_installed
from rollout import NodeKill, cluster_fleet, drowse_version

pytestmark = pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed")

N = 10


def fleet_roll_call(node, *extra: str, env: dict | None = None, roll_call: bool = True) -> tuple[list[dict], float]:
    t = time.monotonic()
    r = subprocess.run([str(DROWSE), "fleet", "--broker", node.url, *(["--roll-call"] if roll_call else []), "--json",
                        "--timeout", "20s", *extra], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), time.monotonic() - t


def test_fleet_with_a_roll_call_lists_every_device_on_the_quorum_cluster_with_a_node_killed(workdir, make_drowse):
    env = {**os.environ, "XDG_STATE_HOME": str(workdir / "provider-state")}
    memory = workdir / "provider-state" / "drowse" / "fleet" / "ops.json"
    cluster = RabbitCluster(workdir / "rmq", queue_type="quorum")
    try:
        cluster.start()

        def new(name, device_id):
            d = make_drowse(handler_deadline="20s", name=name, device_id=device_id)
            d.set_mqtt(roll_call=True, groups=["eu"])
            return d
        fleet = cluster_fleet(workdir, cluster, N, new=new)
        fleet.start()
        want = sorted(d.device_id for d in fleet.devices)
        version = drowse_version()
        without = {name: len(devs) for name, devs in fleet_per_node(cluster.nodes, timeout="3s").items()}

        before = {n.name: fleet_roll_call(n) for n in cluster.nodes}
        # The provider's session starts here: its first listing sees the online devices.
        first, _ = fleet_roll_call(cluster.nodes[0], "--session", "ops", env=env)
        kill = NodeKill(fleet, cluster, 0, timeout=60)
        kill(time.time())
        assert all(s is not None for s in kill.failover.values()), kill.summary()
        after = {n.name: fleet_roll_call(n) for n in kill.others}
        # Three devices die (kill -9): their nodes publish their wills, which no node hands to a
        # wildcard listing later; the session's queue (replicated, its first node killed) has them.
        dead = sorted(d.device_id for d in fleet.kill([1, 4, 7]))

        def offline_in_session():
            doc, _ = fleet_roll_call(kill.others[0], "--session", "ops", env=env, roll_call=False)
            return doc if sorted(e["device_id"] for e in doc if not e["online"]) == dead else None
        remembered = wait_until(offline_in_session, 30, what="the dead devices' wills in the session")
        # A listing through the other node: the session's memory on this machine, its queue drained.
        again, _ = fleet_roll_call(kill.others[1], "--session", "ops", env=env, roll_call=False)
        without_session, _ = fleet_roll_call(kill.others[1])
        kept = json.loads(memory.read_text())
        ended = subprocess.run([str(DROWSE), "fleet", "--broker", kill.others[1].url, "--session", "ops", "--end-session"],
                               capture_output=True, text=True, timeout=60, env=env)
        print(f"\n[rabbitmq] fleet: without a roll call each node lists {without}; killed {kill.node.name} "
              f"(held {kill.held}); with one: before {({k: (len(v[0]), round(v[1], 1)) for k, v in before.items()})}, "
              f"after {({k: (len(v[0]), round(v[1], 1)) for k, v in after.items()})}")
    except BaseException:
        (workdir / "rabbitmq-logs.txt").write_text(cluster.logs())
        raise
    finally:
        cluster.stop()

    assert sorted(e["device_id"] for e in first) == want and all(e["online"] for e in first), first
    for label, doc in (("session", remembered), ("session, the other node", again)):
        assert sorted(e["device_id"] for e in doc) == want, (label, doc)
        for e in doc:
            # An offline device still shows what it said online: version and groups.
            assert e["online"] is (e["device_id"] not in dead), (label, e)
            assert e["version"] == version and e["groups"] == ["eu"], (label, e)
    # Without the session, the dead devices are not listed (their wills are on one node only).
    assert sorted(e["device_id"] for e in without_session) == sorted(set(want) - set(dead)), without_session
    assert kept["prefix"] == "drowse" and sorted(kept["devices"]) == want, kept
    assert ended.returncode == 0 and not memory.exists(), ended.stderr
    for label, views in (("before the kill", before), ("after the kill", after)):
        for node, (doc, _) in views.items():
            assert sorted(e["device_id"] for e in doc) == want, (label, node, doc)
            for e in doc:
                assert e["online"] is True and e["version"] == version and e["groups"] == ["eu"], (label, node, e)
