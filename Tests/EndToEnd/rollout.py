"""Staged rollouts with real daemons: N drowsed instances (distinct device ids, state folders and
sockets) on one mosquitto and one nginx, each sent one signed push-to-transfer at the same moment.
After the rounds a few instances are SIGKILLed and `drowse fleet` must list all N, the killed ones
offline (their last will) and the rest online with the right version (check_fleet).
Used by test_rollout.py (a CI-sized run that asserts) and by deploy/bench-rollout.sh (`python3
rollout.py N SPREAD`, which prints the histograms, memory and the fleet listing). Standard library only.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drowse_e2e import DROWSE, MOSQUITTO_PUB, Broker, Drowse, Nginx, notify_topic, wait_until  # noqa: E402

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


class Fleet:
    """N drowsed instances, device ids `<prefix>-<i>`, each with the app `fw` that accepts signed
    notifications (one shared provider key) and allows their downloads."""

    def __init__(self, workdir: Path, broker: Broker, n: int, make=None, prefix: str = "roll"):
        self.workdir = workdir
        self.broker = broker
        self.n = n
        make = make or (lambda name, device_id: Drowse(workdir / name, broker=broker, device_id=device_id, handler_deadline="20s"))
        self.devices: list[Drowse] = [make(f"d{i:03d}", f"{prefix}-{i:03d}") for i in range(n)]
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
        for d in self.devices:
            self.broker.wait_subscribed(notify_topic(APP, d.device_id), timeout=60)

    def payload(self, d: Drowse, nid: str, url: str, digest: str, size: int, spread: float) -> bytes:
        """The signed notification for one device, made by `drowse push --dry-run --spread`."""
        download = json.dumps({"url": f"{url}?dev={d.device_id}", "sha256": digest, "size": size, "session": nid})
        argv = [str(DROWSE), "push", "--broker", self.broker.url, "--device", d.device_id, "--app", APP, "--silent",
                "--dry-run", "--id", nid, "-d", f"download={download}", "--sign", str(self.key), "--spread", str(spread)]
        r = subprocess.run(argv, capture_output=True, timeout=30, env=d.env())
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def push_all(self, nid: str, url: str, digest: str, size: int, spread: float) -> float:
        """Publishes one signed push-to-transfer to every device at (nearly) the same moment: the
        payloads are made first, then one mosquitto_pub per device runs in parallel. Returns the
        time just before the first publish."""
        payloads = [(d, self.payload(d, nid, url, digest, size, spread)) for d in self.devices]
        t0 = time.time()
        procs = [subprocess.Popen([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.broker.port), "-q", "1",
                                   "-t", notify_topic(APP, d.device_id), "-s"],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for d, _ in payloads]
        for p, (_, body) in zip(procs, payloads):
            p.stdin.write(body)
            p.stdin.close()
        for p in procs:
            assert p.wait(timeout=30) == 0, p.stderr.read()
        return t0

    def results(self, url: str) -> dict[str, str]:
        """device id -> sha256 its events handler computed for `url` (only devices that got there)."""
        got = {}
        for d in self.devices:
            for f in d.out_dir(APP + "-events").glob("events.*.json"):
                for u, digest in json.loads(f.read_text())["sha256"].items():
                    if u.split("?")[0] == url:
                        got[d.device_id] = digest
        return got

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


def starts(nginx: Nginx, uri: str) -> dict[str, float]:
    """device id -> when its first GET of `uri` began (from the access log: msec - request_time)."""
    out: dict[str, float] = {}
    for e in nginx.access_entries():
        if e.get("uri") != uri or e.get("method") != "GET" or not e.get("args", "").startswith("dev="):
            continue
        dev = e["args"][4:]
        t = Nginx.request_start(e)
        out[dev] = min(out.get(dev, t), t)
    return out


def run_round(fleet: Fleet, nginx: Nginx, name: str, size: int, spread: float, timeout: float) -> dict:
    """One push to every device; waits for every download and returns what the log shows."""
    url, digest, _ = nginx.add_file(f"{name}.bin", size)
    uri = "/files/" + name + ".bin"
    t0 = fleet.push_all(name, url, digest, size, spread)
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
    keys = {"device_id", "online", "version", "last_seen", "last_window", "failed_apps", "groups", "app_count", "reports"}
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


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 50
    spread = float(argv[2]) if len(argv) > 2 else 20.0
    size = int(argv[3]) if len(argv) > 3 else 1 << 20
    workdir = Path(argv[4]) if len(argv) > 4 else Path("/tmp")
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
        secs = max(1, int(spread) + 3)
        hz = histogram(list(zero["starts"].values()), zero["t0"], secs)
        hs = histogram(list(spr["starts"].values()), spr["t0"], secs)
        print(f"\nrollout of one signed push-to-transfer ({size} bytes) to {n} drowsed instances, "
              f"one mosquitto, one nginx, loopback")
        print(f"request starts per second after the publish (nginx $msec - $request_time)\n")
        print(f"{'second':>6}  {'spread=0':>9}  {'spread=' + format(spread, 'g'):>10}")
        for i in range(secs):
            print(f"{i:>6}  {hz[i]:>9}  {hs[i]:>10}")
        print(f"{'total':>6}  {sum(hz):>9}  {sum(hs):>10}")
        mz, ms = max_in_window(list(zero["starts"].values())), max_in_window(list(spr["starts"].values()))
        print(f"\nmax new requests in any 1 s window: spread=0 {mz}, spread={spread:g} {ms}")
        print(f"max per whole second:               spread=0 {max(hz)}, spread={spread:g} {max(hs)}")
        off = [spr["starts"][d.device_id] - spr["t0"] - rollout_delay(d.device_id, spr["nid"], spread) for d in fleet.devices]
        print(f"start - publish - expected delay:   min {min(off):.3f} s, median {sorted(off)[len(off) // 2]:.3f} s, "
              f"max {max(off):.3f} s")
        print(f"every download completed with the right sha256: {n}/{n} and {n}/{n}")

        def stats(key: str, ms: list[dict]) -> str:
            v = sorted(m[key] for m in ms)
            return f"min {v[0] / 1024:.1f}  median {v[len(v) // 2] / 1024:.1f}  max {v[-1] / 1024:.1f}  total {sum(v) / 1024:.1f}"

        print(f"\nper-instance memory with all {n} running side by side (MiB, /proc/PID/smaps_rollup)")
        print(f"  idle, before the pushes:  RSS {stats('rss', mem)}")
        print(f"                            PSS {stats('pss', mem)}")
        print(f"  after both rollouts:      RSS {stats('rss', mem_after)}")
        print(f"                            PSS {stats('pss', mem_after)}")

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
