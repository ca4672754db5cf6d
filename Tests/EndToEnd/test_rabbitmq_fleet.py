"""`drowse fleet --roll-call` on the 3-node RabbitMQ quorum cluster (docs/brokers.md, "Listing the
fleet"): RabbitMQ 3.10 keeps retained messages per node and hands them to exact-topic subscriptions
only, so the listing asks the online devices (`[mqtt] roll_call = true`) to publish their status
again, and must list every one of them, through every node, with the node that held the most
sessions killed (-9).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from drowse_e2e import DROWSE
from rabbitmq import RabbitCluster, fleet_per_node, rabbitmq_installed
from rollout import NodeKill, cluster_fleet, drowse_version

pytestmark = pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed")

N = 10


def fleet_roll_call(node) -> tuple[list[dict], float]:
    t = time.monotonic()
    r = subprocess.run([str(DROWSE), "fleet", "--broker", node.url, "--roll-call", "--json", "--timeout", "20s"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), time.monotonic() - t


def test_fleet_with_a_roll_call_lists_every_device_on_the_quorum_cluster_with_a_node_killed(workdir, make_drowse):
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
        kill = NodeKill(fleet, cluster, 0, timeout=60)
        kill(time.time())
        assert all(s is not None for s in kill.failover.values()), kill.summary()
        after = {n.name: fleet_roll_call(n) for n in kill.others}
        print(f"\n[rabbitmq] fleet: without a roll call each node lists {without}; killed {kill.node.name} "
              f"(held {kill.held}); with one: before {({k: (len(v[0]), round(v[1], 1)) for k, v in before.items()})}, "
              f"after {({k: (len(v[0]), round(v[1], 1)) for k, v in after.items()})}")
    except BaseException:
        (workdir / "rabbitmq-logs.txt").write_text(cluster.logs())
        raise
    finally:
        cluster.stop()

    for label, views in (("before the kill", before), ("after the kill", after)):
        for node, (doc, _) in views.items():
            assert sorted(e["device_id"] for e in doc) == want, (label, node, doc)
            for e in doc:
                assert e["online"] is True and e["version"] == version and e["groups"] == ["eu"], (label, node, e)
