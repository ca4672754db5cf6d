"""Real conditions on the board: AC and battery from the test_power kernel module (real
power_supply uevents), a carrier loss (QMP set_link), and Wi-Fi (mac80211_hwsim with hostapd and
wpa_supplicant, a real WPA2 association) with `[conditions] metered_interfaces` acting on it.
Each test puts the guest back as it found it (module unloaded, link up, drowse.toml restored)."""

from __future__ import annotations

import json
import time

import pytest

from board import HOST_IN_GUEST
from conftest import figure
from drowse_e2e import write_random_file
from test_link import network
from test_power import mqtt_connected, wait_for

pytestmark = pytest.mark.vm  # the test_power module, hwsim radios and the QEMU monitor

BLOB_SIZE = 6 * 1024 * 1024   # 16 s at nginx's 384 KiB/s
TEST_POWER = "/sys/module/test_power/parameters"


def show(b, tid: str) -> dict:
    return json.loads(b.sh(f"drowse transfer show {tid} --json"))


def conditions(b) -> dict:
    return json.loads(b.sh("drowse conditions --json"))


def slow_download(b, nginx, name: str, *flags: str) -> tuple[str, str, str]:
    """Queues a download of a new random file from the host's /slow/; returns (id, path, sha256)."""
    sha = write_random_file(nginx.www / "slow" / name, BLOB_SIZE)
    path = f"/var/lib/board-dl/{name}"
    tid = b.sh(f"drowse transfer download http://{HOST_IN_GUEST}:{nginx.port}/slow/{name} --app boardapp "
               f"--to {path} --sha256 {sha} {' '.join(flags)}").strip()
    return tid, path, sha


def wait_running(b, tid: str) -> None:
    wait_for(b, f"{tid} to be under way", lambda: show(b, tid)["state"] == "running" and (show(b, tid)["bytes_done"] or 0) > 0, 60)


def assert_stands_still(b, tid: str, seconds: float = 3.0) -> dict:
    """The transfer is paused or waiting and its byte count does not move."""
    first = show(b, tid)
    time.sleep(seconds)
    st = show(b, tid)
    assert st["state"] in ("paused", "waiting") and st["bytes_done"] == first["bytes_done"], (first, st)
    return st


def finishes_whole(b, tid: str, path: str, sha: str) -> None:
    rc, out, err = b.run(f"drowse transfer wait {tid}", timeout=180)
    st = show(b, tid)
    assert st["state"] == "completed", (st, out, err)
    assert b.sh(f"sha256sum {path}").split()[0] == sha


def resumed_with_range(nginx, name: str) -> bool:
    ranges = [json.loads(line)["range"] for line in nginx.access_log.read_text().splitlines() if f"/slow/{name}" in line]
    return any(r.startswith("bytes=") and not r.startswith("bytes=0-") for r in ranges)


def change_and_wait(b, tid: str, writes: list[tuple[str, str]], want: tuple[str, ...]) -> float:
    """Writes test_power's parameters in the guest, then asks drowsed until the transfer's state is
    one of `want`; returns the seconds from the last write to that answer, measured in the guest
    (the guest agent's own round trips are not in it)."""
    script = (
        "import json, pathlib, subprocess, sys, time\n"
        f"writes, tid, want = {writes!r}, {tid!r}, {want!r}\n"
        "for name, value in writes:\n"
        f"    pathlib.Path({TEST_POWER!r}, name).write_text(value)\n"
        "t0 = time.monotonic()\n"
        "while time.monotonic() - t0 < 20:\n"
        "    r = subprocess.run(['drowse', 'transfer', 'show', tid, '--json'], capture_output=True, text=True)\n"
        "    if r.returncode == 0 and json.loads(r.stdout)['state'] in want:\n"
        "        print(time.monotonic() - t0); sys.exit(0)\n"
        "sys.exit(1)\n")
    rc, out, err = b.run("python3 -", input=script, timeout=60)
    assert rc == 0, f"{tid} never reached {want} within 20 s of {writes}: {show(b, tid)} {err}"
    return float(out.strip())


def test_discretionary_transfer_follows_ac_through_uevents(configured, nginx):
    """AC off with the battery under the low mark pauses a discretionary download at once (the
    power_supply uevent, not a poll: drowsed reads power at fetch windows, minutes apart, and on
    these events); AC back resumes it, and it ends whole."""
    b = configured
    b.sh("modprobe test_power")
    try:
        # test_power's USB supply is online too: off, so that AC is the only external power. The
        # battery is low (10 % < battery_low_percent 20), which only matters without AC.
        for name, value in (("usb_online", "off"), ("battery_capacity", "10"), ("battery_status", "charging")):
            b.sh(f"echo {value} >{TEST_POWER}/{name}")
        wait_for(b, "drowsed to see AC and the battery at 10 %",
                 lambda: (lambda c: c["power_source"] == "ac" and c["battery_percent"] == 10)(conditions(b)), 10)
        tid, path, sha = slow_download(b, nginx, "ac-blob", "--discretionary")
        wait_running(b, tid)

        off_s = change_and_wait(b, tid, [("battery_status", "discharging"), ("ac_online", "off")], ("paused",))
        figure("AC off -> discretionary transfer paused (s, in the guest)", f"{off_s:.2f}")
        assert off_s < 2.0, f"paused {off_s:.2f} s after AC went off: not driven by the uevent"
        c = conditions(b)
        assert (c["power_source"], c["battery_percent"]) == ("battery", 10), c
        st = assert_stands_still(b, tid)
        assert st["state"] == "paused" and st["reason"] == "paused: battery low (10%)", st
        [listed] = [t for t in json.loads(b.sh("drowse transfers --app boardapp --json")) if t["id"] == tid]
        assert listed["reason"] == st["reason"], listed
        line = next(line for line in b.sh("drowse transfers --app boardapp").splitlines() if tid in line)
        assert "battery low (10%)" in line, line

        on_s = change_and_wait(b, tid, [("battery_status", "charging"), ("ac_online", "on")], ("running", "completed"))
        figure("AC on -> discretionary transfer resumed (s, in the guest)", f"{on_s:.2f}")
        assert on_s < 2.0, f"resumed {on_s:.2f} s after AC came back: not driven by the uevent"
        finishes_whole(b, tid, path, sha)
        assert resumed_with_range(nginx, "ac-blob"), "the download started again from byte 0"
    finally:
        b.run("rmmod test_power")
    # No power supply at all is a board on mains, as before the module was loaded.
    wait_for(b, "power back to 'ac' without test_power",
             lambda: json.loads(b.sh("drowse conditions --refresh --json"))["power_source"] == "ac", 10)


def test_transfer_pauses_on_carrier_loss_and_resumes(configured, nginx):
    b = configured
    tid, path, sha = slow_download(b, nginx, "link-blob")
    wait_running(b, tid)
    b.set_link(False)
    try:
        wait_for(b, "the transfer to pause with the link down", lambda: show(b, tid)["state"] == "paused", 30)
        st = assert_stands_still(b, tid)
        assert st["reason"] == "paused: no network", st
    finally:
        b.set_link(True)
    wait_for(b, "the transfer to go on with the link back", lambda: show(b, tid)["state"] in ("running", "completed"), 60)
    finishes_whole(b, tid, path, sha)
    assert resumed_with_range(nginx, "link-blob"), "the download started again from byte 0"


# The access point's radio lives in a network namespace of its own with a small web server, so the
# station's traffic really crosses hwsim's air (two radios in one namespace would talk over lo).
AP_NS = "drowse-ap"
WIFI_UP = r"""
set -e
modprobe mac80211_hwsim radios=2
ip netns add drowse-ap
iw phy "$(cat /sys/class/net/wlan0/phy80211/name)" set netns name drowse-ap
mkdir -p /run/hwsim /srv/hwsim
cat >/run/hwsim/hostapd.conf <<EOF
interface=wlan0
driver=nl80211
ssid=drowse-board
hw_mode=g
channel=6
wpa=2
wpa_key_mgmt=WPA-PSK
rsn_pairwise=CCMP
wpa_passphrase=drowse-board-psk
EOF
{ echo ctrl_interface=/run/hwsim/wpa; wpa_passphrase drowse-board drowse-board-psk; } >/run/hwsim/wpa.conf
ip netns exec drowse-ap ip link set lo up
systemd-run -q --unit=hwsim-hostapd ip netns exec drowse-ap hostapd /run/hwsim/hostapd.conf
systemd-run -q --unit=hwsim-wpa wpa_supplicant -i wlan1 -c /run/hwsim/wpa.conf
for i in $(seq 60); do
    [ "$(wpa_cli -p /run/hwsim/wpa -i wlan1 status 2>/dev/null | sed -n 's/^wpa_state=//p')" = COMPLETED ] && break
    sleep 0.5
done
ip netns exec drowse-ap ip addr add 192.168.77.1/24 dev wlan0
# The access point is a router without an uplink that says so (ICMP unreachable, every time),
# rather than a black hole: drowsed's MQTT connect to the host's broker fails at once instead of
# hanging in connect(), which held `systemctl restart drowsed` for TimeoutStopSec (45 s), then
# SIGKILL.
ip netns exec drowse-ap sysctl -qw net.ipv4.ip_forward=1 net.ipv4.icmp_ratelimit=0
ip netns exec drowse-ap ip route add unreachable default
ip addr add 192.168.77.2/24 dev wlan1
head -c 3M /dev/urandom >/srv/hwsim/blob
systemd-run -q --unit=hwsim-http ip netns exec drowse-ap python3 -m http.server 8080 --bind 192.168.77.1 --directory /srv/hwsim
wpa_cli -p /run/hwsim/wpa -i wlan1 status
"""
WIFI_DOWN = r"""
systemctl stop hwsim-http hwsim-wpa hwsim-hostapd 2>/dev/null
ip netns del drowse-ap 2>/dev/null
for i in $(seq 20); do rmmod mac80211_hwsim 2>/dev/null && break; sleep 0.5; done
rm -rf /run/hwsim /srv/hwsim
"""
CONFIG = "/etc/drowse/drowse.toml"


def test_wifi_metered_rules(configured):
    b = configured
    b.sh(f"cp {CONFIG} /root/drowse.toml.before-wifi")
    start = time.monotonic()
    try:
        status = b.sh(WIFI_UP, timeout=120)
        assert "wpa_state=COMPLETED" in status and "key_mgmt=WPA2-PSK" in status, status
        figure("hwsim WPA2 association and setup seconds", f"{time.monotonic() - start:.1f}")
        b.set_link(False)
        wait_for(b, "the wired network to go", lambda: network(b) == "none", 30)
        b.sh("ip route add default via 192.168.77.1 dev wlan1")
        wait_for(b, "drowsed to see the Wi-Fi", lambda: network(b) == "wifi", 30)
        assert "wifi" in b.sh("drowse conditions")
        c = conditions(b)
        assert (c["interface"], c["metered"]) == ("wlan1", False), c
        # The access point's SSID, read from nl80211: the network the keepalive is learned for.
        assert c["ssid"] == "drowse-board", c
        wait_for(b, "the keepalive to follow the Wi-Fi network",
                 lambda: json.loads(b.sh("drowse status --json"))["mqtt"]["ping_learned_on"] == "wlan1/drowse-board", 30)

        # The Wi-Fi is metered by config: [conditions] is read at start.
        b.sh(f"sed -i '/^\\[conditions\\]/a metered_interfaces = [\"wlan1\"]' {CONFIG} && systemctl restart drowsed")
        c = conditions(b)
        assert (c["network"], c["interface"], c["metered"]) == ("wifi", "wlan1", True), c
        sha = b.sh("sha256sum /srv/hwsim/blob").split()[0]
        path = "/var/lib/board-dl/wifi-blob"
        tid = b.sh(f"drowse transfer download http://192.168.77.1:8080/blob --app boardapp --to {path} "
                   f"--sha256 {sha} --discretionary").strip()
        st = assert_stands_still(b, tid)
        assert (st["state"], st["reason"], st["bytes_done"] or 0) == ("waiting", "waiting: metered network", 0), st
        assert b.run(f"test -e {path}")[0] != 0

        # Not metered any more: does a reload apply it, or only a restart?
        b.sh(f"sed -i 's/^metered_interfaces = .*/metered_interfaces = []/' {CONFIG} && systemctl reload drowsed")
        if json.loads(b.sh("drowse conditions --refresh --json"))["metered"]:
            figure("[conditions] metered_interfaces applied by", "restart (a reload keeps the old value)")
            b.sh("systemctl restart drowsed")
        else:
            figure("[conditions] metered_interfaces applied by", "reload")
        assert conditions(b)["metered"] is False
        finishes_whole(b, tid, path, sha)
    finally:
        # drowsed stops while the access point still answers (an MQTT connect in flight when wlan1
        # goes would hold the stop), and starts again with the wired link back.
        b.run("systemctl stop drowsed")
        b.run(WIFI_DOWN, timeout=60)
        b.run(f"cp /root/drowse.toml.before-wifi {CONFIG}")
        b.set_link(True)
        b.run("systemctl start drowsed")
    wait_for(b, "the wired network back", lambda: network(b) == "ethernet", 60)
    assert conditions(b)["metered"] is False
    wait_for(b, "MQTT connected again", lambda: mqtt_connected(b), 120)
    figure("Wi-Fi test seconds", f"{time.monotonic() - start:.0f}")
