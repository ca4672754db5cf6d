"""The simulator against the wire: deploy/scenarios/push-check.toml (three apps that fetch, two that
get silent notifications, two hours) run by the real drowsed at K = 60 in network namespaces
(deploy/bench-radio.sh, its drowse strategy only: two minutes), and `drowse simulate --compress 60`
on the same scenario. The capture, priced by `drowse radio`, and the prediction must agree on radio
wakes and radio-on seconds within 10 %. Pings matter here: the scenario's windows are far enough
apart that the keepalive wakes the radio on its own, so a simulator without the push channel's
pings misses by more than that."""

import json
import os
import shutil
import subprocess

import pytest

from drowse_e2e import BIN_DIR, DROWSE, REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(t) is None for t in ("ip", "tcpdump", "nginx", "mosquitto", "curl")),
    reason="needs root (network namespaces), iproute2, tcpdump, nginx, mosquitto and curl")

K = 60
SCENARIO = REPO / "deploy" / "scenarios" / "push-check.toml"
AGREE = 0.10


def close(measured, predicted):
    return abs(predicted - measured) <= AGREE * measured


def test_the_simulator_predicts_radio_wakes_and_radio_on_time_on_the_wire(workdir):
    results = workdir / "results.json"
    env = dict(os.environ, DROWSE_BIN_DIR=str(BIN_DIR))
    run = subprocess.run(
        [str(REPO / "deploy" / "bench-radio.sh"), str(SCENARIO), "--compress", str(K), "--strategies", "drowse",
         "--keep-pcap", str(workdir / "pcaps"), "--results", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    wire = json.loads(results.read_text())["strategies"]["drowse"]
    out = subprocess.run([str(DROWSE), "simulate", str(SCENARIO), "--compress", str(K), "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    sim = json.loads(out.stdout)["drowse"]
    push = sim["push"]
    print(f"\n[agreement] wire: {wire['wakes']} wakes ({wire['keepalive_wakes']} keepalive-only), {wire['radio_on_s']:.0f} s radio-on, "
          f"{wire['notifications_handled']}/{wire['notifications_sent']} notifications; simulate: {sim['promotions']:.0f} wakes "
          f"({push['keepalive_wakes']} keepalive-only), {sim['radio_on_seconds']:.0f} s radio-on, "
          f"{push['notifications_handled']}/{push['notifications_published']} notifications")

    # The run did what the scenario asks: every notification reached its handler, on both sides.
    assert wire["notifications_sent"] == push["notifications_published"] > 0
    assert wire["notifications_handled"] == wire["notifications_sent"] and push["notifications_handled"] == push["notifications_published"]

    # The claim: the prediction is the capture, within 10 %.
    assert close(wire["wakes"], sim["promotions"]), (wire, sim)
    assert close(wire["radio_on_s"], sim["radio_on_seconds"]), (wire, sim)

    # And the comparison can tell: the keepalive wakes the radio on its own on both sides, and a
    # prediction without those wakes would miss by more than 10 %.
    assert wire["keepalive_wakes"] > 0 and push["keepalive_wakes"] > 0, (wire, push)
    assert not close(wire["wakes"], sim["promotions"] - push["keepalive_wakes"]), (wire, sim)
    assert not close(wire["radio_on_s"], sim["radio_on_seconds"] - push["keepalive_radio_on_seconds"]), (wire, sim)
