"""A real carrier loss (QMP set_link on the guest's network card): drowsed sees the link go and
come back, and a notification sent while the link was down runs once when it is back."""

from __future__ import annotations

import json
import time

import pytest

from conftest import DEVICE
from test_power import mqtt_connected, notes, wait_for

pytestmark = pytest.mark.vm  # power cuts, the QEMU monitor or the RTC at boot: not on a board over ssh


def network(b) -> str:
    rc, out, _ = b.run("drowse conditions --json")
    return json.loads(out)["network"] if rc == 0 else ""


def test_carrier_loss_and_back(configured, broker):
    b = configured
    wait_for(b, "MQTT connected", lambda: mqtt_connected(b), 60)
    assert network(b) == "ethernet"
    before = notes(b)
    b.set_link(False)
    try:
        wait_for(b, "drowsed to see no network", lambda: network(b) == "none", 30)
        broker.publish(f"drowse/{DEVICE}/apps/boardapp/notify",
                       json.dumps({"aps": {"content-available": 1}, "id": "link-1"}).encode())
        time.sleep(3)
        assert notes(b) == before, "a notification arrived with the link down"
    finally:
        b.set_link(True)
    wait_for(b, "drowsed to see the network back", lambda: network(b) == "ethernet", 30)
    wait_for(b, "MQTT connected again", lambda: mqtt_connected(b), 120)
    wait_for(b, "the notification sent while the link was down", lambda: "link-1" in notes(b), 120)
    time.sleep(3)
    got = notes(b)
    assert got.count("link-1") == 1 and got[:len(before)] == before, got
