"""Staged rollouts with real daemons: N drowsed instances (distinct device ids, state folders and
sockets) on one mosquitto and one nginx, each sent one signed push-to-transfer at the same moment.
After the rounds a few instances are SIGKILLed and `drowse fleet` must list all N, the killed ones
offline (their last will) and the rest online with the right version (check_fleet).

The same on a 3-node RabbitMQ cluster with quorum queues (`cluster_fleet`, `NodeKill`): each device
lists the three nodes (its preferred one in turn), the push is published through the two nodes
that are not killed, and a third of the way into the spread the node holding the most sessions is
killed (-9); every device must still run the push exactly once (`exactly_once`).

Used by test_rollout.py and test_rabbitmq_cluster.py (CI-sized runs that assert) and by
deploy/bench-rollout.sh (`python3 rollout.py N SPREAD SIZE DIR [mosquitto|rabbitmq]`, which prints
the histograms, memory and the fleet listing). Standard library only.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drowse_e2e import DROWSE, MOSQUITTO_PUB, Broker, Drowse, Nginx, kill_strays, notify_topic, wait_until  # noqa: E402
from rabbitmq import RabbitCluster, fleet_per_node, retained_statuses  # noqa: E402
from raw_http import request  # noqa: E402

APP = "fw"
M64 = (1 << 64) - 1

# The events handler: hashes each downloaded file at its location (it is removed after the handler
# exits) and records the transfers and the hashes in OUT/events.<n>.json.
EVENTS_PY = r"""import hashlib, json, os, sys, time
out = sys.argv[1]
doc = json.load(sys.stdin)
sums = {}
for t in doc.get("transfers", []):
    loc = t.get("location")
    if loc and os.path.isfile(loc):
        with open(loc, "rb") as f:
            sums[t["url"]] = hashlib.sha256(f.read()).hexdigest()
n = "%d.%d" % (time.time_ns(), os.getpid())
with open(os.path.join(out, "events." + n + ".tmp"), "w") as f:
    json.dump({"doc": doc, "sha256": sums}, f)
os.rename(os.path.join(out, "events." + n + ".tmp"), os.path.join(out, "events." + n + ".json"))
"""


def rollout_delay(device_id: str, notification_id: str, spread: float) -> float:
    """The delay drowsed draws (DrowseCore's RolloutDelay): FNV-1a 64 of "device\\0id", one
    SplitMix64 step, the top 53 bits as a fraction of the spread."""
    if not spread > 0:
        return 0.0
    h = 0xCBF29CE484222325
    for b in device_id.encode() + b"\0" + notification_id.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    z = (h + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return min(spread, 86400.0) * ((z >> 11) * 2.0 ** -53)


def max_in_window(times: list[float], width: float = 1.0) -> int:
    """The most request starts in any `width`-second window (sliding, not aligned to seconds)."""
    ts = sorted(times)
    best = j = 0
    for i, t in enumerate(ts):
        while ts[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


def histogram(times: list[float], t0: float, seconds: int) -> list[int]:
    """Request starts per whole second after t0 (the last bucket takes anything later)."""
    h = [0] * seconds
    for t in times:
        h[min(seconds - 1, max(0, int(t - t0)))] += 1
    return h


def mqtt_status(d: Drowse) -> dict:
    """`mqtt` of the daemon's status, straight from its socket (no CLI process: quick enough to
    poll 50 daemons several times a second)."""
    code, body = request(d.socket, "GET", "/v1/status")
    assert code == 200, (d.device_id, code, body[:300])
    return json.loads(body)["mqtt"]


def notification_counts(d: Drowse) -> dict[str, int]:
    """The daemon's drowse_notifications_total by outcome (received, accepted, duplicate, spread, ...)
    since it started, from its socket's /v1/metrics."""
    code, body = request(d.socket, "GET", "/v1/metrics")
    assert code == 200, (d.device_id, code, body[:300])
    return {m[1]: int(float(m[2])) for m in re.finditer(r'^drowse_notifications_total\{outcome="(\w+)"\} (\S+)$',
                                                        body.decode(), re.M)}


class Fleet:
    """N drowsed instances, device ids `<prefix>-<i>`, each with the app `fw` that accepts signed
    notifications (one shared provider key) and allows their downloads. `broker` is a mosquitto
    (Broker) or, with a `make` that gives each device the nodes' URLs, a RabbitCluster."""

    def __init__(self, workdir: Path, broker: Broker, n: int, make=None, prefix: str = "roll"):
        self.workdir = workdir
        self.broker = broker
        self.n = n
        make = make or (lambda name, device_id: Drowse(workdir / name, broker=broker, device_id=device_id, handler_deadline="20s"))
        self.devices: list[Drowse] = [make(f"d{i:03d}", f"{prefix}-{i:03d}") for i in range(n)]
        self.republished = 0
        first = self.devices[0]
        self.key = workdir / "provider.key"
        first.cli_ok("keygen", str(self.key))
        pub = Path(str(self.key) + ".pub").read_text().strip()
        for d in self.devices:
            events = d.write_script("events.py", EVENTS_PY)
            out = d.out_dir(APP + "-events")
            d.add_app(APP, raw="\n".join([
                f'id = "{APP}"', "[notification]", f"public_key = \"{pub}\"", "allow_download = true",
                "[transfers]", f"events_command = {json.dumps([sys.executable, str(events), str(out)])}",
            ]) + "\n")

    def start(self) -> None:
        for d in self.devices:
            d.start(wait=False)
        for d in self.devices:
            d.wait_ready(timeout=60)
        for d in self.devices:  # the broker confirmed the subscriptions (SUBACK)
            wait_until(lambda: mqtt_status(d)["subscribed"], 60, interval=0.1, what=f"{d.device_id} subscribed")

    def payload(self, d: Drowse, nid: str, url: str, digest: str, size: int, spread: float) -> bytes:
        """The signed notification for one device, made by `drowse push --dry-run --spread`."""
        download = json.dumps({"url": f"{url}?dev={d.device_id}", "sha256": digest, "size": size, "session": nid})
        first = d.mqtt_options.get("url") or d.broker.url  # any URL: --dry-run connects to none
        first = first[0] if isinstance(first, list) else first
        argv = [str(DROWSE), "push", "--broker", first, "--device", d.device_id, "--app", APP, "--silent",
                "--dry-run", "--id", nid, "-d", f"download={download}", "--sign", str(self.key), "--spread", str(spread)]
        r = subprocess.run(argv, capture_output=True, timeout=30, env=d.env())
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def push_all(self, nid: str, url: str, digest: str, size: int, spread: float, port_of=None,
                 retry_for: float = 30.0) -> float:
        """Publishes one signed push-to-transfer to every device at (nearly) the same moment: the
        payloads are made first, then one mosquitto_pub (QoS 1: it waits for the PUBACK) per device
        runs in parallel, to the port `port_of(device)` (default: the mosquitto's). One that fails
        is published again, same payload and id, as a provider does, for up to `retry_for` s
        (counted in self.republished). Returns the time just before the first publish."""
        port_of = port_of or (lambda d: self.broker.port)
        left = [(d, self.payload(d, nid, url, digest, size, spread)) for d in self.devices]
        t0 = time.time()
        deadline = time.monotonic() + retry_for
        while True:
            procs = [subprocess.Popen([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port_of(d)), "-q", "1",
                                       "-t", notify_topic(APP, d.device_id), "-s"],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for d, _ in left]
            for p, (_, body) in zip(procs, left):
                p.stdin.write(body)
                p.stdin.close()
            failed = [(d, body, p.stderr.read()) for p, (d, body) in zip(procs, left) if p.wait(timeout=30) != 0]
            if not failed:
                return t0
            assert time.monotonic() < deadline, f"{len(failed)} publishes failed: {failed[0][2]!r}"
            self.republished += len(failed)
            left = [(d, body) for d, body, _ in failed]
            time.sleep(0.2)

    def sightings(self, url: str) -> dict[str, list[str]]:
        """device id -> the sha256 of each time its events handler saw a downloaded file of `url`
        (one entry per handler run; a device that ran the push twice has two)."""
        got: dict[str, list[str]] = {}
        for d in self.devices:
            for f in sorted(d.out_dir(APP + "-events").glob("events.*.json")):
                for u, digest in json.loads(f.read_text())["sha256"].items():
                    if u.split("?")[0] == url:
                        got.setdefault(d.device_id, []).append(digest)
        return got

    def results(self, url: str) -> dict[str, str]:
        """device id -> sha256 its events handler computed for `url` (only devices that got there)."""
        return {dev: sums[-1] for dev, sums in self.sightings(url).items()}

    def wait_all(self, url: str, timeout: float) -> dict[str, str]:
        return wait_until(lambda: (lambda g: g if len(g) == self.n else None)(self.results(url)), timeout,
                          interval=0.25, what=f"all {self.n} devices to finish downloading {url}")

    def transfer_states(self) -> dict[str, list[str]]:
        return {d.device_id: [t["state"] for t in d.json("transfers", "--app", APP)] for d in self.devices}

    def memory(self) -> list[dict]:
        return [d.memory() for d in self.devices]

    def running(self) -> list[Drowse]:
        return [d for d in self.devices if d.proc is not None and d.proc.poll() is None]

    def kill(self, indices: list[int]) -> list[Drowse]:
        """SIGKILLs the drowsed of these devices (no clean MQTT disconnect: the broker publishes
        their last will). Their folders stay; cleanup() still kills any handler left behind."""
        killed = [self.devices[i] for i in indices]
        for d in killed:
            d.stop(signal.SIGKILL, timeout=5)
        return killed

    def stop(self, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGTERMs every drowsed still running, all at once, and waits: device id -> exit status."""
        devs = self.running()
        for d in devs:
            d.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for d in devs:
            try:
                d.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        # Drowse.stop() only records an exit that already happened (SIGKILL after the timeout).
        return {d.device_id: d.stop(signal.SIGKILL, timeout=5) for d in devs}

    def cleanup(self) -> None:
        for d in self.devices:
            d.cleanup()


def requests_by_device(nginx: Nginx, uri: str) -> dict[str, list[float]]:
    """device id -> when each of its GETs of `uri` began (from the access log: msec - request_time)."""
    out: dict[str, list[float]] = {}
    for e in nginx.access_entries():
        if e.get("uri") != uri or e.get("method") != "GET" or not e.get("args", "").startswith("dev="):
            continue
        out.setdefault(e["args"][4:], []).append(Nginx.request_start(e))
    return out


def starts(nginx: Nginx, uri: str) -> dict[str, float]:
    """device id -> when its first GET of `uri` began."""
    return {dev: min(ts) for dev, ts in requests_by_device(nginx, uri).items()}


def run_round(fleet: Fleet, nginx: Nginx, name: str, size: int, spread: float, timeout: float,
              port_of=None, during=None) -> dict:
    """One push to every device (published to `port_of(device)`, see push_all); calls
    `during(t0)` right after the publishes (e.g. a NodeKill); waits for every download and returns
    what the log shows."""
    url, digest, _ = nginx.add_file(f"{name}.bin", size)
    uri = "/files/" + name + ".bin"
    t0 = fleet.push_all(name, url, digest, size, spread, port_of=port_of)
    if during is not None:
        during(t0)
    got = fleet.wait_all(url, timeout)
    wait_until(lambda: len(starts(nginx, uri)) >= fleet.n, 10, what=f"{fleet.n} logged requests for {uri}")
    return {"t0": t0, "url": url, "uri": uri, "digest": digest, "sha256": got, "starts": starts(nginx, uri), "spread": spread,
            "nid": name}


class FleetMismatch(AssertionError):
    """`drowse fleet` did not list what the fleet is."""


def kill_indices(n: int) -> list[int]:
    """Which devices to SIGKILL: every 10th (roll-000, roll-010, ...), at least 2 when n >= 2."""
    idx = list(range(0, n, 10))
    return idx if len(idx) >= 2 or n < 2 else [0, n - 1]


def run_fleet(broker: Broker, *args: str, timeout: float = 60.0) -> tuple[subprocess.CompletedProcess, float]:
    """`drowse fleet --broker URL ARGS`: the finished process and how long it took (s)."""
    t = time.monotonic()
    r = subprocess.run([str(DROWSE), "fleet", "--broker", broker.url, "--timeout", "20s", *args],
                       capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise FleetMismatch(f"drowse fleet {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r, took


def fleet_json(broker: Broker) -> tuple[list[dict], float]:
    r, took = run_fleet(broker, "--json")
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        raise FleetMismatch(f"drowse fleet --json printed no JSON: {r.stdout[:2000]!r}") from e
    if not isinstance(doc, list) or not all(isinstance(e, dict) and "device_id" in e for e in doc):
        raise FleetMismatch(f"drowse fleet --json is not an array of devices: {r.stdout[:2000]!r}")
    return doc, took


def drowse_version() -> str:
    r = subprocess.run([str(DROWSE), "--version"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        raise FleetMismatch(f"drowse --version exited {r.returncode}: {r.stderr}")
    return r.stdout.strip()


def wait_wills(broker: Broker, killed: list[Drowse], timeout: float = 30.0) -> float:
    """Polls `drowse fleet --json` until every killed device is listed offline (the broker has
    published its last will: at once on the closed socket, at the latest 1.5 keepalives later).
    Returns the seconds it took from the call."""
    t = time.monotonic()
    ids = {d.device_id for d in killed}

    def offline():
        doc, _ = fleet_json(broker)
        return all(e.get("online") is False for e in doc if e["device_id"] in ids) and \
            ids <= {e["device_id"] for e in doc}
    try:
        wait_until(offline, timeout, interval=0.2, what=f"the last wills of {sorted(ids)} in drowse fleet")
    except TimeoutError as e:
        raise FleetMismatch(str(e)) from None
    return time.monotonic() - t


def check_fleet(fleet: Fleet, killed: list[Drowse], version: str | None = None) -> dict:
    """One `drowse fleet --json` and one plain `drowse fleet`: exactly the fleet's devices, the
    killed ones offline, the others online with `version`. Raises FleetMismatch; returns a summary."""
    version = version or drowse_version()
    want = [d.device_id for d in fleet.devices]
    dead = {d.device_id for d in killed}
    doc, took = fleet_json(fleet.broker)
    problems = []
    ids = [e["device_id"] for e in doc]
    if sorted(ids) != sorted(want):
        extra, missing = sorted(set(ids) - set(want)), sorted(set(want) - set(ids))
        problems.append(f"listed {len(ids)} devices, expected {len(want)} (missing {missing}, extra {extra}, "
                        f"duplicates {sorted({i for i in ids if ids.count(i) > 1})})")
    keys = {"device_id", "online", "version", "last_seen", "last_window", "failed_apps", "groups", "app_count", "reports", "updates"}
    for e in doc:
        dev = e["device_id"]
        if set(e) != keys:
            problems.append(f"{dev}: keys {sorted(e)}")
        if dev in dead:
            if e.get("online") is not False:
                problems.append(f"{dev} was SIGKILLed but is listed online={e.get('online')!r}")
        elif e.get("online") is not True or e.get("version") != version:
            problems.append(f"{dev}: online={e.get('online')!r} version={e.get('version')!r} (want True, {version!r})")
    text, text_took = run_fleet(fleet.broker)
    lines = text.stdout.splitlines()
    rows = {l.split()[0]: l.split() for l in lines[1:] if l.strip()}
    if not lines or lines[0].split()[:2] != ["DEVICE", "STATE"]:
        problems.append(f"drowse fleet: no header line: {text.stdout[:500]!r}")
    if len(lines) - 1 != len(want) or sorted(rows) != sorted(want):
        problems.append(f"drowse fleet printed {len(lines) - 1} device lines, expected {len(want)}")
    for dev, cols in rows.items():
        state = "offline" if dev in dead else "online"
        if len(cols) < 2 or cols[1] != state:
            problems.append(f"drowse fleet line for {dev}: {' '.join(cols)!r}, expected {state}")
    if problems:
        raise FleetMismatch("drowse fleet does not match the fleet:\n  " + "\n  ".join(problems[:40]))
    online = sum(1 for e in doc if e["online"] is True)
    return {"listed": len(doc), "online": online, "offline": len(doc) - online, "seconds": took,
            "text_lines": len(lines) - 1, "text_seconds": text_took, "killed": sorted(dead), "version": version}


def kill_and_check_fleet(fleet: Fleet, will_timeout: float = 30.0) -> dict:
    """SIGKILLs every 10th instance (at least 2), waits for their last wills, then check_fleet.
    The summary also has "will_seconds" (from the kills until the listing showed them offline)."""
    killed = fleet.kill(kill_indices(fleet.n))
    waited = wait_wills(fleet.broker, killed, will_timeout)
    return {**check_fleet(fleet, killed), "will_seconds": waited}


# ----------------------------------------------------------------------------- a RabbitMQ cluster

def cluster_fleet(workdir: Path, cluster: RabbitCluster, n: int, new=None) -> Fleet:
    """A Fleet whose devices list every node of `cluster` in `[mqtt] url`, device i preferring
    node i mod 3 (the list rotated), keepalive 10 s. `new(name, device_id)` makes a Drowse with no
    broker (default: a plain Drowse under workdir)."""
    nodes = cluster.nodes
    new = new or (lambda name, device_id: Drowse(workdir / name, device_id=device_id, handler_deadline="20s"))

    def make(name: str, device_id: str) -> Drowse:
        i = int(device_id.rsplit("-", 1)[1]) % len(nodes)
        d = new(name, device_id)
        d.set_mqtt(url=[x.url for x in nodes[i:] + nodes[:i]], keepalive="10s")
        return d
    return Fleet(workdir, cluster, n, make=make)


def node_of(cluster: RabbitCluster, mqtt: dict):
    """The node a daemon's session is on (its status's mqtt.broker), or None."""
    broker = mqtt.get("broker") or ""
    return next((x for x in cluster.nodes if broker.endswith(f":{x.mqtt_port}")), None)


class NodeKill:
    """Mid-rollout, `at` seconds after the publish (run_round's `during`): kill -9 of the node that
    holds the most devices' sessions when this is made (not restarted: the rest of the rollout runs
    on two nodes). Publish through the other nodes with `port_of`. After the kill it polls the
    daemons that were on that node until each has its subscriptions confirmed on another one:
    `failover` is device id -> seconds from the kill (None: not within `timeout`)."""

    def __init__(self, fleet: Fleet, cluster: RabbitCluster, at: float, timeout: float = 60.0):
        self.fleet, self.cluster, self.at, self.timeout = fleet, cluster, at, timeout
        self.on = {d.device_id: node_of(cluster, mqtt_status(d)) for d in fleet.devices}
        held = Counter(x.name for x in self.on.values() if x is not None)
        self.node = max(cluster.nodes, key=lambda x: held[x.name])
        self.held = dict(held)
        self.others = [x for x in cluster.nodes if x is not self.node]
        self.failover: dict[str, float | None] = {}
        self.killed_at = 0.0

    def port_of(self, d: Drowse) -> int:
        """The nodes that are not killed, in turn."""
        return self.others[self.fleet.devices.index(d) % len(self.others)].mqtt_port

    def __call__(self, t0: float) -> None:
        time.sleep(max(0.0, t0 + self.at - time.time()))
        self.killed_at = time.time()
        self.node.kill()
        pending = {d.device_id: d for d in self.fleet.devices if self.on[d.device_id] is self.node}
        self.failover = {dev: None for dev in pending}
        deadline = time.monotonic() + self.timeout
        while pending and time.monotonic() < deadline:
            for dev, d in list(pending.items()):
                m = mqtt_status(d)
                if m["subscribed"] and node_of(self.cluster, m) not in (None, self.node):
                    self.failover[dev] = time.time() - self.killed_at
                    del pending[dev]
            time.sleep(0.05)

    def settle(self, margin: float = 2.0) -> None:
        """Waits until `margin` s after the last failover: what the cluster delivers again (its
        deliveries whose acknowledgement died with the node) comes as the session resumes. A copy
        that drowsed accepted instead of ignoring would wait for its own delay before running, so
        `accepted_not` (drowse_notifications_total), not the runs alone, is what catches it."""
        last = max([s for s in self.failover.values() if s is not None], default=0.0)
        time.sleep(max(0.0, self.killed_at + last + margin - time.time()))

    def summary(self) -> dict:
        took = sorted(s for s in self.failover.values() if s is not None)
        return {"node": self.node.name, "sessions_held": self.held, "on_node": len(self.failover),
                "moved": len(took), "not_moved": sorted(k for k, v in self.failover.items() if v is None),
                "seconds": (took[0], took[len(took) // 2], took[-1]) if took else None,
                "at": self.killed_at}


def accepted_not(fleet: Fleet, rounds: int) -> tuple[dict[str, dict], dict[str, int]]:
    """Each daemon's notification counts, and the devices whose accepted count is not `rounds`
    (each round sends one push per device: a copy delivered again must be a duplicate)."""
    counts = {d.device_id: notification_counts(d) for d in fleet.devices}
    return counts, {dev: c.get("accepted", 0) for dev, c in counts.items() if c.get("accepted", 0) != rounds}


def exactly_once(fleet: Fleet, nginx: Nginx, rnd: dict) -> dict:
    """Per device, how often the push of round `rnd` ran: events-handler sightings of the file
    (each must be exactly one, with the right sha256), drowsed's transfers of it, nginx's GETs.
    "ok" is False when any device's sightings or transfers are not exactly one or a hash is wrong."""
    seen = fleet.sightings(rnd["url"])
    runs = {d.device_id: len(seen.get(d.device_id, [])) for d in fleet.devices}
    transfers = {d.device_id: sum(1 for t in d.json("transfers", "--app", APP) if t["url"].split("?")[0] == rnd["url"])
                 for d in fleet.devices}
    gets = requests_by_device(nginx, rnd["uri"])
    out = {"devices": fleet.n, "ran_once": sum(1 for c in runs.values() if c == 1),
           "missed": sorted(k for k, c in runs.items() if c == 0), "doubled": sorted(k for k, c in runs.items() if c > 1),
           "wrong_sha256": sorted(k for k, v in seen.items() if any(x != rnd["digest"] for x in v)),
           "transfers_not_one": {k: c for k, c in transfers.items() if c != 1},
           "gets_per_device": dict(Counter(len(gets.get(d.device_id, [])) for d in fleet.devices))}
    out["ok"] = not (out["missed"] or out["doubled"] or out["wrong_sha256"] or out["transfers_not_one"])
    return out


# ----------------------------------------------------------------------------- the bench's report

def print_histograms(rounds: list[tuple[str, dict]], seconds: int) -> None:
    """Request starts per second after each round's publish, side by side, and the busiest second."""
    hs = [histogram(list(r["starts"].values()), r["t0"], seconds) for _, r in rounds]
    w = [max(9, len(label)) for label, _ in rounds]
    print("request starts per second after the publish (nginx $msec - $request_time)\n")
    print(f"{'second':>6}  " + "  ".join(f"{label:>{x}}" for (label, _), x in zip(rounds, w)))
    for i in range(seconds):
        print(f"{i:>6}  " + "  ".join(f"{h[i]:>{x}}" for h, x in zip(hs, w)))
    print(f"{'total':>6}  " + "  ".join(f"{sum(h):>{x}}" for h, x in zip(hs, w)))
    print("\nmax new requests in any 1 s window: " +
          ", ".join(f"{label} {max_in_window(list(r['starts'].values()))}" for label, r in rounds))
    print("max per whole second:               " + ", ".join(f"{label} {max(h)}" for (label, _), h in zip(rounds, hs)))
    for label, r in rounds:
        if r["spread"] > 0:
            off = sorted(t - r["t0"] - rollout_delay(dev, r["nid"], r["spread"]) for dev, t in r["starts"].items())
            print(f"start - publish - expected delay ({label}): min {off[0]:.3f} s, "
                  f"median {off[len(off) // 2]:.3f} s, max {off[-1]:.3f} s")


def print_memory(n: int, mem: list[dict], mem_after: list[dict]) -> None:
    def stats(key: str, ms: list[dict]) -> str:
        v = sorted(m[key] for m in ms)
        return f"min {v[0] / 1024:.1f}  median {v[len(v) // 2] / 1024:.1f}  max {v[-1] / 1024:.1f}  total {sum(v) / 1024:.1f}"

    print(f"\nper-instance memory with all {n} running side by side (MiB, /proc/PID/smaps_rollup)")
    print(f"  idle, before the pushes:  RSS {stats('rss', mem)}")
    print(f"                            PSS {stats('pss', mem)}")
    print(f"  after the rollouts:       RSS {stats('rss', mem_after)}")
    print(f"                            PSS {stats('pss', mem_after)}")


def write_table(path: Path, rounds: list[tuple[str, dict]], n: int, seconds: int, mem: list[dict],
                mem_after: list[dict], ran_once: dict[str, int] | None = None) -> None:
    """The bench's summary table, tab-separated, for deploy/bench-rollout.sh's bench_table: per round
    the busiest second and 1 s window of request starts, and how many devices got the file."""
    hs = [histogram(list(r["starts"].values()), r["t0"], seconds) for _, r in rounds]
    rows = [[f"{n} devices"] + [label for label, _ in rounds],
            ["new requests in the busiest whole second"] + [str(max(h)) for h in hs],
            ["new requests in any 1 s window"] + [str(max_in_window(list(r["starts"].values()))) for _, r in rounds]]
    if ran_once is None:
        rows.append(["downloads with the right sha256"]
                    + [f"{sum(1 for v in r['sha256'].values() if v == r['digest'])} / {n}" for _, r in rounds])
    else:
        rows.append(["devices that ran the push exactly once"] + [f"{ran_once[label]} / {n}" for label, _ in rounds])
    med = lambda key, ms: sorted(m[key] for m in ms)[len(ms) // 2] / 1024  # noqa: E731
    note = (f"# Each drowsed, all {n} running: RSS {med('rss', mem):.1f} MiB and PSS {med('pss', mem):.1f} MiB idle "
            f"(medians), RSS {med('rss', mem_after):.1f} MiB and PSS {med('pss', mem_after):.1f} MiB after the rollouts.")
    path.write_text("".join("\t".join(r) + "\n" for r in rows) + note + "\n")


def main_cluster(n: int, spread: float, size: int, workdir: Path, kill_at: float = 1 / 3) -> int:
    """The bench on a 3-node RabbitMQ cluster (quorum queues): rounds spread = 0, spread = SPREAD,
    and spread = SPREAD with the busiest node killed (-9) `kill_at` of the way in (0: as soon as
    the last publish is acknowledged, while the cluster is still delivering); each must run
    exactly once on every device. Returns the exit status."""
    cluster = RabbitCluster(workdir / "rmq", queue_type="quorum")
    nginx = Nginx(workdir / "nginx")
    fleet = None
    try:
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        t = time.monotonic()
        cluster.start()
        up = time.monotonic() - t
        nginx.start()
        say(f"cluster up in {up:.1f} s; starting {n} drowsed instances ...")
        fleet = cluster_fleet(workdir, cluster, n)
        fleet.start()
        time.sleep(1.0)
        mem = fleet.memory()
        kill = NodeKill(fleet, cluster, spread * kill_at)
        ids = [d.device_id for d in fleet.devices]
        exact_before = {x.name: retained_statuses(x.mqtt_port, ids) for x in cluster.nodes}
        rounds = []
        for label, name, s, during in (("spread=0", "fw-zero", 0.0, None),
                                       (f"spread={spread:g}", "fw-spread", spread, None),
                                       (f"spread={spread:g}+kill", "fw-kill", spread, kill)):
            say(f"{label}: pushing to {n} devices through {', '.join(x.name for x in kill.others)} ...")
            rounds.append((label, run_round(fleet, nginx, name, size, s, s + 120, port_of=kill.port_of, during=during)))
        kill.settle()
        mem_after = fleet.memory()
        checks = {label: exactly_once(fleet, nginx, r) for label, r in rounds}
        counts, not_accepted_once = accepted_not(fleet, len(rounds))
        total = Counter()
        for c in counts.values():
            total.update(c)
        k = kill.summary()
        print(f"\nrollout of one signed push-to-transfer ({size} bytes) to {n} drowsed instances, a 3-node RabbitMQ "
              f"cluster (quorum queues, cluster up in {up:.1f} s), one nginx, loopback; each device lists the three "
              f"nodes, preferred node in turn; published through {' and '.join(x.name for x in kill.others)}")
        print(f"sessions per node before the rounds: {k['sessions_held']}; {k['node']} killed (-9) "
              f"{k['at'] - rounds[2][1]['t0']:.1f} s into the last round, not restarted\n")
        print_histograms(rounds, max(1, int(spread) + 3))
        print("\nran the push (events handler saw the file; drowsed's transfers; nginx GETs per device):")
        for label, c in checks.items():
            print(f"  {label:>16}: devices {c['devices']}, ran once {c['ran_once']}, doubled {len(c['doubled'])}, "
                  f"missed {len(c['missed'])}, wrong sha256 {len(c['wrong_sha256'])}, transfers not one "
                  f"{len(c['transfers_not_one'])}, GETs per device {c['gets_per_device']}"
                  + ("" if c["ok"] else "  FAILED: " + json.dumps({x: c[x] for x in ("missed", "doubled", "wrong_sha256",
                                                                              "transfers_not_one")})))
        print(f"  notifications per device (drowse_notifications_total): accepted {len(rounds)} on "
              f"{n - len(not_accepted_once)} of {n}" + (f", other counts {not_accepted_once}" if not_accepted_once else "") +
              f"; in all received {total['received']}, accepted {total['accepted']}, ignored as duplicates "
              f"{total['duplicate']} (delivered again after the failover), held for their delay {total['spread']}")
        secs = k["seconds"]
        print(f"\nfailover: {k['moved']} of the {k['on_node']} devices on {k['node']} had their subscriptions confirmed on "
              f"another node " + (f"{secs[0]:.2f} / {secs[1]:.2f} / {secs[2]:.2f} s (min / median / max) after the kill"
                                  if secs else "(none)") + (f"; not moved within {kill.timeout:g} s: {k['not_moved']}"
                                                            if k["not_moved"] else ""))
        print(f"publishes repeated after a failed mosquitto_pub: {fleet.republished}")
        print_memory(n, mem, mem_after)
        listed = {name: len(devs) for name, devs in fleet_per_node([x for x in cluster.nodes if x.running()]).items()}
        print(f"\ndrowse fleet --json against each running node (docs/brokers.md: RabbitMQ 3.10 serves retained "
              f"statuses only to exact topics): devices listed {listed} (of {n})")
        exact = {x.name: retained_statuses(x.mqtt_port, ids) for x in cluster.nodes if x.running()}
        newest: dict[str, dict] = {}  # device id -> its newest status on any live node
        for statuses in exact.values():
            for dev, st in statuses.items():
                if dev not in newest or (st.get("time") or 0) > (newest[dev].get("time") or 0):
                    newest[dev] = st
        print(f"retained status by exact topic (<prefix>/<id>/status, the {n} ids in one SUBSCRIBE per node): before "
              f"the rounds {({k: len(v) for k, v in exact_before.items()})}, on some node "
              f"{len(set().union(*exact_before.values()))} of {n}; at the end {({k: len(v) for k, v in exact.items()})}, "
              f"on some live node {len(newest)} of {n} ({sum(1 for st in newest.values() if st.get('online') is True)} "
              f"online), of the {len(kill.failover)} that failed over {len(set(newest) & set(kill.failover))}")
        write_table(workdir / "table.tsv", rounds, n, max(1, int(spread) + 3), mem, mem_after,
                    {label: c["ran_once"] for label, c in checks.items()})
        ok = all(c["ok"] for c in checks.values()) and not k["not_moved"] and not not_accepted_once
        print("\n" + ("every device ran every push exactly once with the right sha256" if ok else "FAILED"))
        return 0 if ok else 1
    finally:
        if fleet is not None:
            fleet.cleanup()
        nginx.stop()
        cluster.stop()
        kill_strays(str(cluster.dir))


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 50
    spread = float(argv[2]) if len(argv) > 2 else 20.0
    size = int(argv[3]) if len(argv) > 3 else 1 << 20
    workdir = Path(argv[4]) if len(argv) > 4 else Path("/tmp")
    if len(argv) > 5 and argv[5] == "rabbitmq":
        return main_cluster(n, spread, size, workdir, float(argv[6]) if len(argv) > 6 else 1 / 3)
    assert len(argv) <= 5 or argv[5] == "mosquitto", f"broker: mosquitto or rabbitmq, not {argv[5]!r}"
    broker = Broker(workdir / "mqtt")
    nginx = Nginx(workdir / "nginx")
    fleet = None
    try:
        broker.start()
        nginx.start()
        print(f"starting {n} drowsed instances ...", file=sys.stderr, flush=True)
        fleet = Fleet(workdir, broker, n)
        fleet.start()
        time.sleep(1.0)
        mem = fleet.memory()
        print(f"spread = 0: pushing to {n} devices ...", file=sys.stderr, flush=True)
        zero = run_round(fleet, nginx, "fw-zero", size, 0, 120)
        print(f"spread = {spread:g}: pushing to {n} devices ...", file=sys.stderr, flush=True)
        spr = run_round(fleet, nginx, "fw-spread", size, spread, spread + 120)
        mem_after = fleet.memory()
        for r in (zero, spr):
            bad = {k: v for k, v in r["sha256"].items() if v != r["digest"]}
            if bad:
                print(f"WRONG sha256 for {r['uri']}: {bad}", file=sys.stderr)
                return 1
        print(f"\nrollout of one signed push-to-transfer ({size} bytes) to {n} drowsed instances, "
              f"one mosquitto, one nginx, loopback")
        print_histograms([("spread=0", zero), (f"spread={spread:g}", spr)], max(1, int(spread) + 3))
        print(f"every download completed with the right sha256: {n}/{n} and {n}/{n}")
        print_memory(n, mem, mem_after)
        write_table(workdir / "table.tsv", [("spread=0", zero), (f"spread={spread:g}", spr)], n,
                    max(1, int(spread) + 3), mem, mem_after)

        print(f"SIGKILLing {len(kill_indices(n))} instances, then drowse fleet ...", file=sys.stderr, flush=True)
        f = kill_and_check_fleet(fleet)
        print(f"\ndrowse fleet after SIGKILLing {len(f['killed'])} instances ({', '.join(f['killed'])}; "
              f"all listed offline by their last will {f['will_seconds']:.1f} s after the kills):")
        print(f"  --json: listed {f['listed']}, online {f['online']}, offline {f['offline']}, "
              f"{f['seconds']:.2f} s for {n} devices; text: {f['text_lines']} device lines, {f['text_seconds']:.2f} s")
        return 0
    finally:
        if fleet is not None:
            fleet.cleanup()
        nginx.stop()
        broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
