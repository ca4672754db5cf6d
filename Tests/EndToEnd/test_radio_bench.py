"""The wire benchmark's machinery (deploy/bench-radio.sh) on a tiny scenario: two apps and a push
schedule, half an hour of scenario time at K = 40 for drowsed and for naive timers, in network
namespaces; what is asserted comes from the captures, through `drowse radio`. The full runs are
benchmarks (docs/benchmarks.md), not this test."""

import json
import os
import shutil
import subprocess

import pytest

from drowse_e2e import BIN_DIR, DROWSE, REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(t) is None for t in ("ip", "tcpdump", "nginx", "mosquitto", "curl")),
    reason="needs root (network namespaces), iproute2, tcpdump, nginx, mosquitto and curl")

K = 40

SCENARIO = """\
name = "radio-e2e"
duration = "30m"
seed = 5
radio = "lte"

[[app]]
id = "meter"
interval = "5m"
duration = "1s-2s"
size = "2K"

[[app]]
id = "news"
interval = "10m"
duration = "1s-3s"
results = ["new", "no"]
size = "40K"

[[notification]]
app = "news"
every = "8m"
jitter = "2m"
"""


def radio(pcap):
    out = subprocess.run([str(DROWSE), "radio", str(pcap), "--compress", str(K), "--json", "--wakes"],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_drowse_wakes_the_radio_less_than_naive_timers_on_the_wire(workdir):
    scenario = workdir / "radio-e2e.toml"
    scenario.write_text(SCENARIO)
    pcaps, results = workdir / "pcaps", workdir / "results.json"
    env = dict(os.environ, DROWSE_BIN_DIR=str(BIN_DIR))
    run = subprocess.run(
        [str(REPO / "deploy" / "bench-radio.sh"), str(scenario), "--compress", str(K), "--strategies", "drowse,naive",
         "--keep-pcap", str(pcaps), "--results", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    res = json.loads(results.read_text())
    d, n = res["strategies"]["drowse"], res["strategies"]["naive"]
    for name, r in (("drowse", d), ("naive", n)):
        print(f"\n[radio] {name}: {r['wakes']} wakes, {r['keepalive_wakes']} keepalive-only, {r['radio_on_s']:.0f} s radio-on, "
              f"{r['fetches']} fetches, {r['notifications_handled']}/{r['notifications_sent']} notifications")

    # What the table says is what the captures say.
    dr, nr = radio(pcaps / "drowse.pcap"), radio(pcaps / "naive.pcap")
    assert (dr["wakes"], dr["keepalive_wakes"]) == (d["wakes"], d["keepalive_wakes"])
    assert (nr["wakes"], nr["keepalive_wakes"]) == (n["wakes"], n["keepalive_wakes"])
    for r in (dr, nr):
        assert r["link_type"] == "Ethernet" and r["skipped_not_ip"] == 0, r  # IPv6 off, static neighbours: IP only
        assert 30 * 60 * 0.75 <= r["span_seconds"] <= 30 * 60 * 1.05, r  # about the whole run, scaled back by K
        assert len(r["wake_list"]) == r["wakes"]
        assert sum(w["keepalive_only"] for w in r["wake_list"]) == r["keepalive_wakes"]

    # Both strategies did the work: fetches of both apps, every notification handled.
    assert d["fetches"] >= 4 and n["fetches"] >= 8, (d, n)
    assert d["notifications_sent"] >= 3
    assert d["notifications_handled"] == d["notifications_sent"] and n["notifications_handled"] == n["notifications_sent"]

    # The naive push connection pings every 60 s of scenario time: most of its pings are wakes of
    # their own, counted apart, and they cost radio time.
    assert n["keepalive_wakes"] >= 10, n
    assert 0 < n["keepalive_radio_on_s"] < n["radio_on_s"]
    keepalive_only = [w for w in nr["wake_list"] if w["keepalive_only"]]
    assert all(w["packets"] <= 6 for w in keepalive_only), keepalive_only  # PINGREQ, PINGRESP and ACKs
    # drowsed's keepalive is 240 s of scenario time and rides its windows: far fewer.
    assert d["keepalive_wakes"] < n["keepalive_wakes"] / 2, (d, n)

    # The claim, on the wire: fewer wakes, less radio-on time, less energy.
    assert d["wakes"] < n["wakes"], (d, n)
    assert d["radio_on_s"] < n["radio_on_s"] and d["joules"] < n["joules"], (d, n)
    assert res["ratios_to_drowse"]["naive"]["wakes"] > 1.5, res["ratios_to_drowse"]
