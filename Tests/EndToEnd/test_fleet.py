"""Fleets over real mosquitto brokers on loopback (docs/fleets.md): groups across a bridged edge
broker, cross-route dedupe, failover to a second broker and back, and `drowse fleet`."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from drowse_e2e import DROWSE, DROWSED, MOSQUITTO_PUB, REPO, Broker, notify_topic, wait_until


def run_cli(*args, timeout=60):
    return subprocess.run([str(DROWSE), *args], capture_output=True, text=True, timeout=timeout)


def content_ids(d, app="news"):
    return sorted(r.json().get("content-id") for r in d.runs(app))


def start_device(make_drowse, broker, device_id, groups, keepalive="10s", url=None):
    d = make_drowse(broker=broker, name=device_id, device_id=device_id)
    d.set_mqtt(groups=groups, keepalive=keepalive, **({"url": url} if url is not None else {}))
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    return d


def wait_subscribed_all(broker, devices_groups, app="news"):
    """Until `broker` has each device's own subscription and, per group, one subscription per device in it."""
    for dev in devices_groups:
        broker.wait_subscribed(notify_topic(app, device=dev))
    wanted = {}
    for gs in devices_groups.values():
        for g in gs:
            wanted[g] = wanted.get(g, 0) + 1

    def done():
        filters = broker.subscription_filters()
        return all(filters.count(f"drowse/groups/{g}/apps/{app}/notify") >= n for g, n in wanted.items())
    wait_until(done, 20, what=f"group subscriptions {wanted}")


def fenced_content_ids(d, fence: int, app="news"):
    """The content ids a device ran before the fence (content id `fence`) it ran last."""
    ids = [r.json().get("content-id") for r in d.runs(app)]
    return sorted(i for i in ids if i != fence)


def fleet(broker, *args):
    r = run_cli("fleet", "--broker", broker.url, "--timeout", "10s", *args)
    assert r.returncode == 0, f"drowse fleet exited {r.returncode}: {r.stderr}"
    return r.stdout


def test_groups_across_bridge_dedupe_and_fleet(workdir, request, make_drowse):
    central = Broker(workdir / "central")
    edge = Broker(workdir / "edge")
    edge.bridge_to(central)
    request.node._extra_brokers = [central, edge]
    central.start()
    try:
        edge.start()
        wait_until(lambda: edge.bridge_subscribed(central), 20, what="the edge's bridge to subscribe on the central broker")

        groups = {"a1": ["eu"], "a2": ["eu", "beta"], "a3": ["us"], "b1": ["eu"], "b2": ["beta"]}
        devices = {}
        for dev, gs in groups.items():
            b = central if dev.startswith("a") else edge
            devices[dev] = start_device(make_drowse, b, dev, gs)
        wait_subscribed_all(central, {k: v for k, v in groups.items() if k.startswith("a")})
        wait_subscribed_all(edge, {k: v for k, v in groups.items() if k.startswith("b")})
        for d in devices.values():
            d.wait_mqtt_connected(True)
        # a1's handler fails from now on: its status must say so.
        (devices["a1"].out_dir("news") / "exit_code").write_text("1\n")

        # One group push on the central broker reaches every device in eu, on both brokers, once.
        devices["a1"].push_group("eu", "news", "--id", "g-1", "-d", "content-id=1", broker=central)
        for dev in ("a1", "a2", "b1"):
            devices[dev].wait_runs("news", 1, timeout=20)
        # By its own topic and by a group, with the same id: once. And to a device on the edge by a group.
        devices["a2"].push("news", "--id", "both-1", "-d", "content-id=2")
        devices["a2"].push_group("beta", "news", "--id", "both-1", "-d", "content-id=2", broker=central)
        devices["b2"].wait_runs("news", 1, timeout=20)
        devices["a2"].wait_runs("news", 2, timeout=20)
        # A fence instead of a wait: pushed after, by the same routes (each group's topic on the
        # central broker, a3's own), it reaches each device after any duplicate or stray copy of
        # the pushes above (a broker keeps the order of what it sends one session). Once a device
        # ran its fence, a duplicate or stray run would be there.
        devices["a1"].push_group("eu", "news", "--id", "fence-eu", "-d", "content-id=100", broker=central)
        devices["a2"].push_group("beta", "news", "--id", "fence-beta", "-d", "content-id=100", broker=central)
        devices["a3"].push("news", "--id", "fence-a3", "-d", "content-id=100")
        for dev, n in (("a1", 2), ("a2", 4), ("a3", 1), ("b1", 2), ("b2", 2)):
            devices[dev].wait_runs("news", n, timeout=20)
        assert fenced_content_ids(devices["a1"], 100) == [1]
        assert fenced_content_ids(devices["a2"], 100) == [1, 2]
        assert fenced_content_ids(devices["a3"], 100) == []
        assert fenced_content_ids(devices["b1"], 100) == [1]
        assert fenced_content_ids(devices["b2"], 100) == [2]
        assert all(content_ids(devices[dev]).count(100) == n for dev, n in (("a1", 1), ("a2", 2), ("a3", 1), ("b1", 1), ("b2", 1)))

        # drowse fleet on the central broker: every device, those on the edge through the bridge.
        def listing():
            doc = json.loads(fleet(central, "--json"))
            by_id = {e["device_id"]: e for e in doc}
            ok = set(by_id) == set(groups) and by_id["a1"]["failed_apps"] == ["news"]
            return by_id if ok else None
        by_id = wait_until(listing, 30, interval=0.5, what="every device's status, a1 failing, in drowse fleet --json")
        for dev, e in by_id.items():
            assert set(e) == {"device_id", "online", "version", "last_seen", "last_window", "failed_apps", "groups", "app_count", "reports", "updates"}, e
            assert e["online"] is True, e
            assert e["version"] == "0.1.0" and e["app_count"] == 1, e
            assert e["groups"] == groups[dev], e
            assert isinstance(e["last_seen"], (int, float)) and abs(e["last_seen"] - time.time()) < 120, e
            if dev != "a1":
                assert e["failed_apps"] == [], e

        # A SIGKILLed device: its last will marks it offline.
        devices["a3"].stop(signal.SIGKILL)
        by_id = wait_until(lambda: (lambda m: m if m["a3"]["online"] is False else None)(
            {e["device_id"]: e for e in json.loads(fleet(central, "--json"))}), 20, interval=0.5, what="a3 offline")
        assert all(by_id[d]["online"] for d in groups if d != "a3")

        # The will replaced a3's retained status, and still says what a listing by group needs.
        assert by_id["a3"]["version"] == "0.1.0" and by_id["a3"]["groups"] == ["us"], by_id["a3"]
        us = json.loads(fleet(central, "--json", "--group", "us"))
        assert [(e["device_id"], e["online"]) for e in us] == [("a3", False)], us
        eu = json.loads(fleet(central, "--json", "--group", "eu"))
        assert sorted(e["device_id"] for e in eu) == ["a1", "a2", "b1"]
        text = fleet(central)
        lines = {l.split()[0]: l for l in text.splitlines()[1:]}
        assert set(lines) == set(groups), text
        assert " offline " in lines["a3"] and " online " in lines["a1"] and lines["a1"].rstrip().endswith("news"), text
    finally:
        edge.stop()
        central.stop()


def test_failover_to_second_broker_and_back(workdir, request, make_drowse):
    first = Broker(workdir / "first")
    second = Broker(workdir / "second")
    request.node._extra_brokers = [first, second]
    first.start()
    second.start()
    try:
        d = start_device(make_drowse, first, "fo", [], keepalive="5s", url=[first.url, second.url])
        first.wait_subscribed(notify_topic("news", device="fo"))
        d.wait_mqtt_connected(True)
        assert d.status()["mqtt"]["broker"] == f"127.0.0.1:{first.port}"

        first.stop()
        second.wait_subscribed(notify_topic("news", device="fo"), timeout=30)
        wait_until(lambda: d.status()["mqtt"]["connected"] and d.status()["mqtt"]["broker"] == f"127.0.0.1:{second.port}",
                   30, interval=0.2, what="the device on the second broker")
        r = run_cli("push", "--broker", second.url, "--device", "fo", "--app", "news", "--silent", "--id", "on-second",
                    "-d", "content-id=1")
        assert r.returncode == 0, r.stderr
        d.wait_runs("news", 1, timeout=20)

        first.start()  # same port, same persistence
        # Back on the preferred broker at a keepalive after failbackAt (a keepalive of 5 s here).
        wait_until(lambda: d.status()["mqtt"]["connected"] and d.status()["mqtt"]["broker"] == f"127.0.0.1:{first.port}",
                   120, interval=0.5, what="the device back on the first broker")
        first.wait_subscribed(notify_topic("news", device="fo"), timeout=20, count=2)
        r = run_cli("push", "--broker", first.url, "--device", "fo", "--app", "news", "--silent", "--id", "on-first",
                    "-d", "content-id=2")
        assert r.returncode == 0, r.stderr
        d.wait_runs("news", 2, timeout=20)
        # A fence on the broker it is on now: once it ran, a duplicate (a message delivered again
        # by the first broker after the failback) would have run too.
        r = run_cli("push", "--broker", first.url, "--device", "fo", "--app", "news", "--silent", "--id", "fence",
                    "-d", "content-id=100")
        assert r.returncode == 0, r.stderr
        d.wait_runs("news", 3, timeout=20)
        assert content_ids(d) == [1, 2, 100]
    finally:
        second.stop()
        if first.proc is not None:
            first.stop()


def test_push_needs_device_or_group(workdir):
    r = run_cli("push", "--broker", "mqtt://127.0.0.1:1", "--app", "news", "--silent")
    assert r.returncode != 0 and "--device" in r.stderr
    r = run_cli("push", "--broker", "mqtt://127.0.0.1:1", "--app", "news", "--device", "x", "--group", "eu")
    assert r.returncode != 0
    r = run_cli("push", "--broker", "mqtt://127.0.0.1:1", "--app", "news", "--group", "eu/west")
    assert r.returncode != 0 and "--group" in r.stderr
    # A whole payload goes as given: --spread would be silently lost, so it is refused.
    r = run_cli("push", "--broker", "mqtt://127.0.0.1:1", "--app", "news", "--device", "x", "--payload", "{}", "--spread", "5")
    assert r.returncode != 0 and "--spread" in r.stderr


def test_bad_groups_and_urls_are_config_errors(make_drowse):
    for key, value, words in [("groups", ["eu", "a/b"], "mqtt.groups"), ("url", ["mqtt://127.0.0.1:1", "http://x"], "mqtt.url")]:
        d = make_drowse(name=f"bad-{key}")
        d.set_mqtt(**{key: value})
        r = subprocess.run([str(DROWSED), "--config", str(d.config), "--check-config"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, r
        assert words in r.stderr + r.stdout and str(d.config) in r.stderr + r.stdout, r


class AclBroker(Broker):
    """A broker with user names and passwords and the ACL deploy/mosquitto/make-acl.sh generates."""

    def __init__(self, workdir, inventory: str, users: list[str]):
        super().__init__(workdir)
        self.passwd = self.dir / "passwd"
        self.acl = self.dir / "acl"
        for i, u in enumerate(users):
            subprocess.run(["mosquitto_passwd", *(["-c"] if i == 0 else []), "-b", str(self.passwd), u, f"pw-{u}"],
                           check=True, capture_output=True, timeout=30)
        r = subprocess.run([str(REPO / "deploy" / "mosquitto" / "make-acl.sh")], input=inventory, capture_output=True,
                           text=True, check=True, timeout=30)
        self.acl.write_text(r.stdout)

    def listener_lines(self):
        return [f"listener {self.port} 127.0.0.1", "allow_anonymous false",
                f"password_file {self.passwd}", f"acl_file {self.acl}"]


def test_generated_acl_gives_a_device_its_groups_only(workdir, request, make_drowse):
    # Both devices say they are in eu; the inventory (and so the ACL) puts only acl-in there.
    b = AclBroker(workdir / "acl-broker", "acl-in eu\nacl-out beta\n", ["provider", "acl-in", "acl-out"])
    request.node._extra_brokers = [b]
    b.start()
    try:
        devices = {}
        for dev in ("acl-in", "acl-out"):
            pw = workdir / f"{dev}.pw"
            pw.write_text(f"pw-{dev}\n")
            devices[dev] = start_device(make_drowse, b, dev, ["eu"])
            devices[dev].stop()
            devices[dev].set_mqtt(username=dev, password_file=str(pw))
            devices[dev].start()
        wait_subscribed_all(b, {"acl-in": ["eu"], "acl-out": ["eu"]})
        for d in devices.values():
            d.wait_mqtt_connected(True)
        ppw = workdir / "provider.pw"
        ppw.write_text("pw-provider\n")
        creds = ["--username", "provider", "--password-file", str(ppw)]
        r = run_cli("push", "--broker", b.url, *creds, "--group", "eu", "--app", "news", "--silent", "--id", "g", "-d", "content-id=1")
        assert r.returncode == 0, r.stderr
        # Its own topic still reaches acl-out: the ACL withholds only the group it is not in.
        r = run_cli("push", "--broker", b.url, *creds, "--device", "acl-out", "--app", "news", "--silent", "-d", "content-id=2")
        assert r.returncode == 0, r.stderr
        devices["acl-in"].wait_runs("news", 1, timeout=20)
        devices["acl-out"].wait_runs("news", 1, timeout=20)
        # A fence to each device's own topic, after the group push: once acl-out ran it, the group
        # push the ACL withheld would have run before it.
        for dev in ("acl-in", "acl-out"):
            r = run_cli("push", "--broker", b.url, *creds, "--device", dev, "--app", "news", "--silent", "--id", f"fence-{dev}",
                        "-d", "content-id=100")
            assert r.returncode == 0, r.stderr
            devices[dev].wait_runs("news", 2, timeout=20)
        assert fenced_content_ids(devices["acl-in"], 100) == [1]
        assert fenced_content_ids(devices["acl-out"], 100) == [2]
        # The provider reads every status; the ACL lets each device write its own.
        listed = {e["device_id"] for e in json.loads(run_cli("fleet", "--broker", b.url, *creds, "--json").stdout)}
        assert listed == {"acl-in", "acl-out"}
    finally:
        b.stop()


def retained_status(broker, device_id):
    """The retained status the broker keeps for the device (mosquitto_sub, first message)."""
    sub = str(Path(MOSQUITTO_PUB).with_name("mosquitto_sub"))
    r = subprocess.run([sub, "-h", "127.0.0.1", "-p", str(broker.port), "-t", f"drowse/{device_id}/status", "-C", "1",
                        "-W", "10"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_status_and_the_will_carry_the_run_and_a_roll_call_gets_the_status_again(broker, make_drowse):
    """Every status and the last will carry `started` (newest wins across copies, docs/fleets.md);
    with [mqtt] roll_call a message on <prefix>/rollcall makes the device publish its status again,
    live, and `drowse fleet --roll-call` lists it."""
    d = make_drowse(broker=broker, name="rc", device_id="rc-dev")
    d.set_mqtt(groups=["eu"], roll_call=True)
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    broker.wait_subscribed("drowse/rollcall")
    first = wait_until(lambda: (lambda s: s if s.get("online") else None)(retained_status(broker, "rc-dev")), 20,
                       what="the online status")
    assert isinstance(first.get("started"), (int, float)) and first["started"] <= first["time"], first

    sub = str(Path(MOSQUITTO_PUB).with_name("mosquitto_sub"))
    # The look at the retained status above subscribed too: the live one is the next.
    earlier = broker.subscription_count("drowse/rc-dev/status")
    # -R: only what is published from now on, not the retained copy.
    live = subprocess.Popen([sub, "-h", "127.0.0.1", "-p", str(broker.port), "-t", "drowse/rc-dev/status", "-R", "-C", "1",
                             "-W", "20"], stdout=subprocess.PIPE, text=True)
    try:
        broker.wait_subscribed("drowse/rc-dev/status", count=earlier + 1)
        # Its `time` is later than the first status's: times are fractional seconds.
        broker.publish("drowse/rollcall", b"roll call")
        answer = json.loads(live.communicate(timeout=30)[0])
    finally:
        live.kill()
    assert answer["online"] is True and answer["started"] == first["started"] and answer["time"] > first["time"], answer

    r = run_cli("fleet", "--broker", broker.url, "--roll-call", "--json", "--timeout", "10s")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [(e["device_id"], e["online"]) for e in listed] == [("rc-dev", True)], listed
    assert listed[0]["last_seen"] > first["time"], listed

    d.stop(signal.SIGKILL)
    will = wait_until(lambda: (lambda s: s if not s.get("online") else None)(retained_status(broker, "rc-dev")), 30,
                      what="the last will")
    assert will["started"] == first["started"] and will["groups"] == ["eu"] and "time" not in will, will


def test_a_fleet_session_keeps_what_the_broker_no_longer_has_until_forgotten(broker, workdir, make_drowse):
    """`drowse fleet --session` (docs/fleets.md, "A listing that remembers"): the broker queues the
    device's will for the listing's persistent session while no listing runs, and this machine
    keeps the newest status seen, so the device is still listed, offline, after its retained
    status is cleared; `--forget` drops it; a bad name, a memory of another prefix and a memory
    that is not one are refused and left as they were."""
    env = {**os.environ, "XDG_STATE_HOME": str(workdir / "provider")}
    memory = workdir / "provider" / "drowse" / "fleet" / "ops.json"

    def cli(*extra):
        return subprocess.run([str(DROWSE), "fleet", "--broker", broker.url, "--json", "--timeout", "10s", *extra],
                              capture_output=True, text=True, timeout=60, env=env)

    def listing(*extra):
        r = cli("--session", "ops", *extra)
        assert r.returncode == 0, r.stderr
        return {e["device_id"]: e for e in json.loads(r.stdout)}

    d = make_drowse(broker=broker, name="gone", device_id="gone-dev")
    d.set_mqtt(groups=["eu"])
    d.add_app("news", notification=d.recorder("news"))
    d.start()
    wait_until(lambda: retained_status(broker, "gone-dev").get("online"), 20, what="the online status")
    assert listing()["gone-dev"]["online"] is True
    assert oct(memory.stat().st_mode & 0o777) == "0o600"

    d.stop(signal.SIGKILL)
    wait_until(lambda: not retained_status(broker, "gone-dev").get("online"), 30, what="the last will")
    # An operator clears the retained status (an empty retained message).
    subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1", "-t", "drowse/gone-dev/status", "-n", "-r"],
                   check=True, timeout=30)
    plain = cli()
    assert plain.returncode == 0 and json.loads(plain.stdout) == [], plain.stdout
    seen = listing()
    assert list(seen) == ["gone-dev"] and seen["gone-dev"]["online"] is False, seen
    assert seen["gone-dev"]["groups"] == ["eu"] and seen["gone-dev"]["app_count"] == 1, seen

    assert listing("--forget", "gone-dev") == {}
    assert listing() == {}

    for args, says in ((["--session", "a/b"], "letters"), (["--forget", "x"], "need --session"),
                       (["--end-session"], "need --session")):
        r = cli(*args)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)
    for text, says in (('{"prefix": "other", "devices": {}}', "--prefix 'other'"), ("not json", "cannot read session")):
        memory.write_text(text)
        r = cli("--session", "ops")
        assert r.returncode != 0 and says in r.stderr, r.stderr
        assert memory.read_text() == text
