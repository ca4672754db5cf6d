"""`drowse push --group G --stages ... --abort-after N` (docs/fleets.md, "Staged rollouts") against
20 real drowsed on one mosquitto: the command reads the group's devices from their fleet statuses,
publishes each stage to its devices' own topics, and stops when a stage's devices report failures.

In the first test the device side of updates is simulated; in the last, real devices run the
updates app and report a real failure. A device's update report (`updates.<package>` in its status, matched by the push's id) is
published by this test with mosquitto_pub, retained, on the device's status topic, once the real
drowsed ran the push's handler: the first two devices to run it report `rolled-back` or `failed`
in the rollout meant to fail, every device reports `committed` in the one meant to succeed. The
simulated status is published again every half second (drowsed republishes its own when a run ends,
which would hide the report until the next one).
"""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from drowse_e2e import DROWSE, MOSQUITTO_PUB, wait_until
from rollout import notification_counts

GROUP = "canary"
APP = "upd"
N = 20


class Simulator:
    """Publishes each device's update report for push `nid` once its drowsed ran the push:
    `states(order)` gives the state of the device that ran it `order`-th (0-based)."""

    def __init__(self, broker, devices, nid, states):
        self.broker, self.devices, self.nid, self.states = broker, devices, nid, states
        self.reported: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def ran(self, d) -> bool:
        return any(r.json().get("id") == self.nid for r in d.runs(APP))

    def run(self):
        while not self.stop.is_set():
            for d in self.devices:
                if d.device_id not in self.reported and self.ran(d):
                    self.reported[d.device_id] = self.states(len(self.reported))
            for dev, state in list(self.reported.items()):
                status = {"online": True, "apps": [APP], "version": "sim", "groups": [GROUP], "time": time.time(),
                          "updates": {"demo-pkg": {"id": self.nid, "from": "1.0", "to": "1.1", "state": state,
                                                   "reason": "health check failed" if state != "committed" else None,
                                                   "times": {state: time.time()}}}}
                subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.broker.port), "-q", "1", "-r",
                                "-t", f"drowse/{dev}/status", "-m", json.dumps(status)], check=True, timeout=10)
            self.stop.wait(0.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def nothing_but_a_probe(d, app: str) -> None:
    """Checks that `d` received no notification until now, without sleeping: a probe published on
    its own topic after the rollout's publisher finished is delivered after anything the broker
    took before it (one session, in order), so once the probe is in, it is the only one."""
    d.push(app, "--id", f"probe-{d.device_id}")
    wait_until(lambda: notification_counts(d).get("received", 0) >= 1, 30, what=f"the probe at {d.device_id}")
    assert notification_counts(d).get("received", 0) == 1, f"{d.device_id} got a notification of the rollout"


def push_stages(broker, nid, *extra):
    return subprocess.run([str(DROWSE), "push", "--broker", broker.url, "--group", GROUP, "--app", APP, "--silent",
                           "--id", nid, "--stages", "20%,100%", "--stage-timeout", "40s", "--check-every", "1s", *extra],
                          capture_output=True, text=True, timeout=180)


def test_a_staged_rollout_stops_at_a_failing_first_stage_and_a_healthy_one_reaches_every_device(broker, make_drowse):
    devices = []
    for i in range(N):
        d = make_drowse(broker=broker, name=f"d{i:02d}", device_id=f"stage-{i:02d}", handler_deadline="10s")
        d.set_mqtt(groups=[GROUP])
        d.add_app(APP, notification=d.recorder(APP))
        devices.append(d)
    for d in devices:
        d.start(wait=False)
    for d in devices:
        d.wait_ready(timeout=60)
        d.wait_mqtt_connected(True, timeout=60)

    # 20%: the first stage is 4 devices; the first two of them to run the push report a failure.
    with Simulator(broker, devices, "bad-1", lambda k: ["rolled-back", "failed"][k] if k < 2 else "committed") as sim:
        r = push_stages(broker, "bad-1", "--abort-after", "2")
    print(f"\n[staged] bad-1: exit {r.returncode}\n{r.stdout}{r.stderr}")
    assert r.returncode != 0, r.stdout
    ran = [d for d in devices if sim.ran(d)]
    assert len(ran) == 4, f"the first stage (4 of 20) ran the push, got {[d.device_id for d in ran]}"
    assert "stopped at stage 1 of 2" in r.stderr and "16 devices received nothing" in r.stderr, r.stderr
    failed = sorted(dev for dev, s in sim.reported.items() if s != "committed")
    assert len(failed) == 2 and all(dev in r.stderr for dev in failed), (failed, r.stderr)
    # The second stage received nothing: no notification reached those daemons at all.
    for d in devices:
        if d not in ran:
            nothing_but_a_probe(d, APP)
            wait_until(lambda: len(d.runs(APP)) >= 1, 30, what=f"the probe's run at {d.device_id}")
            assert [x.json().get("id") for x in d.runs(APP)] == [f"probe-{d.device_id}"], d.device_id

    # A rollout whose first stage commits goes on to every device, each once.
    with Simulator(broker, devices, "good-1", lambda k: "committed") as sim:
        r = push_stages(broker, "good-1", "--abort-after", "1")
    print(f"[staged] good-1: exit {r.returncode}\n{r.stdout}{r.stderr}")
    assert r.returncode == 0, r.stderr
    assert "stage 2 of 2: published to 16 devices" in r.stdout, r.stdout
    for d in devices:
        assert [x.json().get("id") for x in d.runs(APP)].count("good-1") == 1, d.device_id


def test_a_rollout_stops_on_the_failures_real_devices_report(broker, nginx, make_drowse, workdir):
    """The same stop with nothing simulated: 10 drowsed run the updates app (deploy/apps/updates),
    and the signed update names a file whose sha256 is not the one given. Each device of the first
    stage downloads it, drowsed refuses it, and the device's own fleet status reports the update
    `failed`; the rollout stops there and the other devices receive nothing."""
    if os.geteuid() != 0:
        pytest.skip("the updates app runs as root, as installing packages needs")
    app_file = Path(__file__).resolve().parents[2] / "deploy" / "apps" / "updates" / "updates.toml"
    key = workdir / "updates.key"
    subprocess.run([str(DROWSE), "keygen", str(key)], check=True, capture_output=True)
    blob = nginx.www / "files" / "not-the-package.deb"
    blob.write_bytes(b"x" * 4096)
    blob.chmod(0o644)
    devices = []
    for i in range(10):
        d = make_drowse(broker=broker, name=f"r{i:02d}", device_id=f"real-{i:02d}", handler_deadline="10s")
        d.set_mqtt(groups=["real"])
        text = app_file.read_text().replace("REPLACE WITH THE CONTENTS OF updates.key.pub", (workdir / "updates.key.pub").read_text().strip())
        for handler in ("notified", "downloaded"):
            text = text.replace(f'"/usr/bin/drowse", "update", "{handler}"]', f'"{DROWSE}", "update", "{handler}", "--config", "{d.config}"]')
        d.add_app("updates", raw=text)
        devices.append(d)
    for d in devices:
        d.start(wait=False)
    for d in devices:
        d.wait_ready(timeout=60)
        d.wait_mqtt_connected(True, timeout=60)
    r = subprocess.run([str(DROWSE), "push", "--broker", broker.url, "--group", "real", "--app", "updates", "--silent",
                        "--sign", str(key), "--id", "real-1", "-d", f"url={nginx.url('/files/not-the-package.deb')}",
                        "-d", "sha256=" + "0" * 64, "-d", "package=demo", "--stages", "20%,100%", "--abort-after", "2",
                        "--stage-timeout", "60s", "--check-every", "1s"], capture_output=True, text=True, timeout=180)
    print(f"\n[staged] real-1: exit {r.returncode}\n{r.stdout}{r.stderr}")
    assert r.returncode != 0 and "stopped at stage 1 of 2" in r.stderr and "8 devices received nothing" in r.stderr, r.stdout + r.stderr
    updated = [d for d in devices if (Path(d.state_dir) / "updates" / "real-1").exists()]
    assert len(updated) == 2, [d.device_id for d in updated]
    for d in updated:
        state = json.loads((Path(d.state_dir) / "updates" / "real-1" / "state.json").read_text())
        assert state["report"]["state"] == "failed" and d.device_id in r.stderr, (d.device_id, state)
    for d in devices:
        if d not in updated:
            nothing_but_a_probe(d, "updates")
