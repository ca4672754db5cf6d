"""One oversized MQTT message must not take a board's memory (docs/architecture.md, "The MQTT
inbound gate"): a 200 MB PUBLISH to a device's and to a group's notify topic moves drowsed's
peak resident memory by less than 2 MiB, is refused once (acknowledged, not delivered again),
and the notifications after it run. Over MQTT 5 (mosquitto) the session announced the bound as
its Maximum Packet Size, so the broker never sends the message at all: drowsed reads less than
2 MB while it is published. RabbitMQ 3.10 speaks 3.1.1 only: the session falls back to it and
the inbound gate reads the message and drops it as it arrives."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drowse_e2e import MOSQUITTO_PUB, notify_topic, wait_until
from rabbitmq import RabbitCluster, publish_qos1, rabbitmq_installed
from test_notification_delivery import BIG_BUDGET, ids, note_log

APP = "news"
GROUP = "eu"


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def bytes_read(pid: int) -> int:
    """What the process has read with read(2) and its kin (sockets included)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def big_file(workdir: Path, size: int) -> Path:
    p = workdir / f"big-{size}"
    with open(p, "wb") as f:
        f.truncate(size)  # zeros: as heavy on the wire as any other bytes
    return p


def note(nid: str) -> bytes:
    return json.dumps({"aps": {"content-available": 1}, "id": nid}).encode()


def oversized_round(d, log: Path, port: int, topics: list[str], size: int, workdir: Path) -> tuple[list[int], list[int]]:
    """Publishes `size` bytes to each topic, each followed by a small notification; returns
    drowsed's peak resident memory growth (KiB) and the bytes it read, for each."""
    growth, read = [], []
    pid = d.proc.pid
    for i, topic in enumerate(topics):
        reset_peak(pid)
        before = peak_kib(pid)
        read_before = bytes_read(pid)
        subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", topic,
                        "-f", str(big_file(workdir, size))], check=True, timeout=300)
        assert publish_qos1(port, topic, [note(f"after-{i}")]) == [True]
        wait_until(lambda: ids(log).get(f"after-{i}") == 1, 120, what=f"the notification after the big one on {topic}")
        growth.append(peak_kib(pid) - before)
        read.append(bytes_read(pid) - read_before)
    return growth, read


def check(d, log: Path, growth: list[int], topics: list[str]) -> None:
    print(f"\n[oversized] peak resident memory growth (KiB) per topic: {dict(zip(topics, growth))}")
    assert all(g < 2048 for g in growth), growth
    status = d.status()
    assert status["mqtt"]["connected"] is True, status
    assert status["mqtt"]["inbound_gate"] is True, status
    # Refused, not delivered again: a restart of drowsed's session gets nothing more.
    d.stop()
    d.start()
    wait_until(lambda: d.status()["mqtt"].get("subscribed"), 60, what="the session again")
    assert publish_qos1(d.test_port, topics[0], [note("last")]) == [True]
    wait_until(lambda: ids(log).get("last") == 1, 60, what="a notification after the restart")
    d.wait_idle()
    got = ids(log)
    assert set(got) == {f"after-{i}" for i in range(len(topics))} | {"last"}, got
    assert all(n == 1 for n in got.values()), got


def start(make_drowse, url: str, port: int):
    d = make_drowse(handler_deadline="10s", extra_config=BIG_BUDGET)
    d.set_mqtt(url=url, groups=[GROUP])
    argv, log = note_log(d, APP)
    d.add_app(APP, notification=argv)
    d.start()
    d.test_port = port
    return d, log


def test_200_mb_publish_on_mosquitto_device_and_group_topics(broker, make_drowse, workdir):
    d, log = start(make_drowse, broker.url, broker.port)
    topics = [notify_topic(APP), f"drowse/groups/{GROUP}/apps/{APP}/notify"]
    for t in topics:
        broker.wait_subscribed(t)
    assert d.status()["mqtt"]["protocol"] == "5"
    growth, read = oversized_round(d, log, broker.port, topics, 200 * 1000 * 1000, workdir)
    print(f"\n[oversized] bytes read by drowsed per topic (MQTT 5): {dict(zip(topics, read))}")
    # The broker dropped it: it never crossed the link.
    assert all(r < 2_000_000 for r in read), read
    check(d, log, growth, topics)


@pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed")
def test_large_publish_on_rabbitmq_device_and_group_topics(make_drowse, workdir):
    # RabbitMQ refuses messages over its max_message_size (128 MiB by default): 100 MB.
    cluster = RabbitCluster(workdir / "rmq", n=1, queue_type="quorum")
    try:
        cluster.start()
        node = cluster.nodes[0]
        d, log = start(make_drowse, node.url, node.mqtt_port)
        wait_until(lambda: d.status()["mqtt"].get("subscribed"), 60, what="drowsed subscribed")
        topics = [notify_topic(APP), f"drowse/groups/{GROUP}/apps/{APP}/notify"]
        assert d.status()["mqtt"]["protocol"] == "3.1.1"
        growth, read = oversized_round(d, log, node.mqtt_port, topics, 100 * 1000 * 1000, workdir)
        # Read and dropped as it arrived (the gate), never held.
        assert all(r >= 100 * 1000 * 1000 for r in read), read
        check(d, log, growth, topics)
    finally:
        cluster.stop()
