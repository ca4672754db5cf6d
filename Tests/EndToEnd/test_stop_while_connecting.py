"""A broker address that drops packets (a link that loses everything, a firewall that drops SYNs)
must not hold drowsed: the MQTT connect is non-blocking, so SIGTERM stops drowsed at once
instead of after the kernel's SYN retries (about two minutes, past systemd's stop timeout)."""
import signal
import subprocess
import time
import uuid

import pytest

from drowse_e2e import netns_unusable, wait_until


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


@pytest.mark.skipif(netns_unusable() is not None, reason=netns_unusable() or "")
def test_sigterm_stops_drowsed_while_it_connects_to_a_silent_broker(make_drowse):
    ns = "drowse-syn-" + uuid.uuid4().hex[:8]
    sh("ip", "netns", "add", ns)
    try:
        # A veth pair whose far end takes no frame addressed to the broker's (made-up) MAC: the
        # SYN leaves and is neither answered nor refused.
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                    ["ip", "addr", "add", "10.9.9.1/24", "dev", "v0"], ["ip", "link", "set", "v0", "up"],
                    ["ip", "link", "set", "v1", "up"], ["ip", "route", "add", "default", "via", "10.9.9.2"],
                    ["ip", "neigh", "add", "10.9.9.2", "lladdr", "02:00:00:00:09:02", "dev", "v0"]):
            sh("ip", "netns", "exec", ns, *cmd)
        d = make_drowse()
        d.set_mqtt(url="mqtt://10.9.9.2:1883", keepalive="60s")
        d.prefix = ["ip", "netns", "exec", ns]
        d.add_app("a", fetch=["/bin/true"], minimum_interval="1h")
        d.start()
        status = d.json("status")
        assert status["mqtt"]["configured"] and not status["mqtt"]["connected"]
        # The connect attempt is under way: its SYN sent and unanswered.
        def syn_sent():
            r = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tn", "state", "syn-sent"], capture_output=True, text=True)
            return "10.9.9.2:1883" in r.stdout
        wait_until(syn_sent, 10, what="drowsed's SYN to the silent broker")
        # drowsed still answers while it connects.
        assert d.cli("status", "--json", timeout=5).returncode == 0
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        rc = d.proc.wait(timeout=60)
        took = time.monotonic() - t0
        assert rc == 0, d.stderr_text()[-2000:]
        assert took < 5, f"drowsed took {took:.1f} s to stop while connecting"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
