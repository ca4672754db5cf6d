"""The helper of deploy/bench-radio.sh, which runs it (python3 stdlib only):

  prepare PLAN K TMP SERVER_IP HTTP_PORT   files, handlers and drowsed's config, scaled by K;
                                           prints what cannot be scaled
  drive STRATEGY PLAN K TMP T0 END HOST PORT KEEPALIVE
                                           naive or android (in the device namespace): the
                                           baseline's run starts from the plan, and its push
                                           connection starting notification handlers
  publish PLAN K TMP T0 END PORT DEVICE OUT
                                           the notifications (in the server namespace), each
                                           stamped with the moment its PUBLISH was written
  report TMP K SCENARIO STRATEGIES COMMAND [MARKDOWN_FILE]
                                           the table, results.json, and the section of
                                           docs/benchmarks.md
  summary RADIO_JSON                       one line of `drowse radio --json`'s figures

Times in the plan are seconds of the scenario; on the wire they run K times faster.
"""

from __future__ import annotations

import json
import math
import os
import platform
import select
import socket
import struct
import subprocess
import sys
import threading
import time

# A fetch's size when the scenario gives none.
DEFAULT_SIZE = 20 * 1024
# drowsed's defaults that the bench scales (docs/configuration.md).
KEEPALIVE = 240.0
MAX_PER_HOUR = 12
# The baselines' push connections: mosquitto_sub's default keepalive, and the heartbeat of
# Android's push channel on mobile networks.
NAIVE_KEEPALIVE = 60.0
ANDROID_HEARTBEAT = 28 * 60.0
# drowsed's limits on those keys.
MIN_KEEPALIVE = 1.0
MIN_MAX_KEEPALIVE = 5.0
MIN_DEADLINE = 1.0
# Radio tails of `[radio] model` (Sources/DrowseCore/RadioModel.swift): drowsed plans with the
# scenario's divided by K (`[radio] tail`, whole milliseconds).
TAILS = {"lte": 11.576, "3g": 8.912, "wifi": 0.238, "ethernet": 0.0}
# The planner's longest tolerance (FetchPlanner.maxTolerance); not a config key.
MAX_TOLERANCE = 1800.0
# Real seconds a handler run may cost beyond its scaled duration (exec, connect, the GET, waking
# from its sleep): a few milliseconds on a 2-core x86 machine, with room for a loaded one or a
# slow board. It does not shrink with K.
HANDLER_OVERHEAD = 0.1


def load(path):
    with open(path) as f:
        return json.load(f)


def ms(seconds: float) -> str:
    """A duration for drowsed's config, in whole milliseconds."""
    return f"{max(1, round(seconds * 1000))}ms"


# ---------------------------------------------------------------------------- prepare

def prepare(plan_path, k, tmp, server_ip, http_port):
    plan = load(plan_path)
    k = float(k)
    notes = []
    sched = plan["scheduler"]
    deadline = sched["handler_deadline"] / k
    if deadline < MIN_DEADLINE:
        notes.append(f"handler_deadline {sched['handler_deadline']:g} s / {k:g} = {deadline:.3g} s is under drowsed's minimum: "
                     f"{MIN_DEADLINE:g} s ({MIN_DEADLINE * k:g} s of scenario time)")
        deadline = MIN_DEADLINE
    # `drowse simulate --compress K` applies the same rules (Sources/DrowseSimulation/WireScaling.swift).
    scenario_keepalive = plan.get("mqtt_keepalive", KEEPALIVE)
    keepalive = scenario_keepalive / k
    if keepalive < MIN_KEEPALIVE:
        notes.append(f"[mqtt] keepalive {scenario_keepalive:g} s / {k:g} = {keepalive:.3g} s is under drowsed's minimum: {MIN_KEEPALIVE:g} s "
                     f"({MIN_KEEPALIVE * k:g} s of scenario time)")
        keepalive = MIN_KEEPALIVE
    # The adaptive keepalive's ceiling is the keepalive asked for in CONNECT: whole seconds, 5 or more.
    scenario_max = plan.get("mqtt_max_keepalive", max(5.0, math.ceil(scenario_keepalive * 7)))
    max_keepalive = max(MIN_MAX_KEEPALIVE, math.ceil(scenario_max / k))
    if max_keepalive != scenario_max / k:
        notes.append(f"[mqtt] max_keepalive {scenario_max:g} s / {k:g} = {scenario_max / k:.3g} s: whole seconds of at least "
                     f"{MIN_MAX_KEEPALIVE:g}, so {max_keepalive:g} s ({max_keepalive * k:g} s of scenario time)")
    # drowsed counts a run's real time against the budget, start-up included, which K does not
    # shrink: the scaled budget gets that start-up for each run the busiest app can make in a day.
    # Its 24 hours are real ones: they hold this many days of the scenario.
    days = max(1.0, min(plan["duration"], 86400 * k) / 86400)
    runs_per_day = max([86400 / a["interval"] for a in plan["apps"] if a["interval"]] or [0])
    budget = max(MIN_DEADLINE, days * (sched["daily_budget"] / k + HANDLER_OVERHEAD * runs_per_day))
    notes.append(f"daily_budget {sched['daily_budget']:g} s / {k:g} = {sched['daily_budget'] / k:.3g} s, plus {HANDLER_OVERHEAD:g} s "
                 f"for each of the {runs_per_day:.0f} runs a day of the busiest app"
                 + (f", times the {days:.3g} scenario days in 24 real hours" if days > 1 else "") + f": {budget:.3g} s. "
                 "A run's start-up (exec, connect) takes real time that K does not shrink, and drowsed counts it against the budget")
    minimum = max(MIN_DEADLINE, sched["minimum_interval"] / k)
    per_hour = min(10000, round(plan.get("max_per_hour", MAX_PER_HOUR) * k))
    tail = TAILS[plan["radio"]] if plan["radio"] in TAILS else TAILS["lte"]
    model = plan["radio"] if plan["radio"] in TAILS else "lte"
    tail_ms = round(tail / k * 1000)
    long_apps = [a["id"] for a in plan["apps"] if a["interval"] and a["interval"] * (sched["tolerance"] or 0.5) > MAX_TOLERANCE]
    if long_apps:
        notes.append(f"the planner's 30 min cap on a fetch's tolerance is not a key and stays 30 min of real time: "
                     f"{len(long_apps)} apps with long intervals ({', '.join(long_apps)}) get their full "
                     f"{round((sched['tolerance'] or 0.5) * 100)} % of the interval")
    notes.append("no key at all for: the 2 s from SIGTERM to SIGKILL after a handler's deadline; the planner's 5 min usage lead "
                 "(the bench replays no uses of the apps' data, so it does not matter here)")
    if plan["network_changes"] or plan["power_changes"]:
        notes.append("the scenario's [[network]] and [[power]] changes are not replayed: the link stays up and the board on AC")

    www = os.path.join(tmp, "www", "f")
    os.makedirs(www, exist_ok=True)
    hdir = os.path.join(tmp, "h")
    os.makedirs(hdir, exist_ok=True)
    for app in plan["apps"]:
        size = app["size"] if app["size"] is not None else DEFAULT_SIZE
        body = os.path.join(www, f"{size}.bin")
        if not os.path.exists(body):
            with open(body, "wb") as f:
                f.write(os.urandom(size))
        # The k-th run: seconds under a baseline, under drowsed, and the exit status. A timeout
        # runs the deadline under a baseline (as the simulator has it) and outlives drowsed's
        # deadline, which kills it.
        with open(os.path.join(hdir, app["id"] + ".runs"), "w") as f:
            for d, outcome in app["runs"]:
                code = {"new": 0, "no": 100, "failed": 1, "timeout": 1}[outcome]
                if outcome == "timeout":
                    f.write(f"{sched['handler_deadline'] / k:.4f} {deadline + 5:.4f} {code}\n")
                else:
                    f.write(f"{d / k:.4f} {d / k:.4f} {code}\n")
        # deploy/bench-handler.c serves every app: the symlink's name says which, its .conf where
        # the app's file is and the runs to replay. bench-radio.sh compiles it into h/bench-handler.
        with open(os.path.join(hdir, app["id"] + ".conf"), "w") as f:
            f.write(f"{server_ip} {http_port} /f/{size}.bin {os.path.join(hdir, app['id'] + '.runs')}\n")
        path = os.path.join(hdir, app["id"])
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink("bench-handler", path)

    # drowsed: the scenario's apps as app files, every duration divided by K.
    d = os.path.join(tmp, "drowse")
    apps_d = os.path.join(d, "apps.d")
    os.makedirs(apps_d, exist_ok=True)
    tol = f'tolerance = "{sched["tolerance"] * 100:g}%"\n' if sched["tolerance"] is not None else ""
    with open(os.path.join(d, "drowse.toml"), "w") as f:
        f.write(f"""# Written by deploy/bench-radio.sh: the scenario's settings, durations divided by {k:g}.
device_id = "bench"
state_dir = "{d}/state"
apps_dir  = "{apps_d}"
socket    = "{d}/drowse.sock"

[mqtt]
url = "mqtt://{server_ip}:1883"
keepalive = "{keepalive:g}s"
max_keepalive = "{max_keepalive:g}s"

[scheduler]
handler_deadline = "{ms(deadline)}"
minimum_interval = "{ms(minimum)}"
daily_budget = "{ms(budget)}"
{tol}
[notifications]
max_per_hour = {per_hour}

[radio]
model = "{model}"
tail = "{tail_ms}ms"
""")
    for app in plan["apps"]:
        h = os.path.join(hdir, app["id"])
        text = f'id = "{app["id"]}"\n'
        if app["interval"]:
            text += f'[fetch]\ncommand = ["{h}", "fetch", "drowse", "{d}"]\nminimum_interval = "{ms(app["interval"] / k)}"\n'
        if app["notified"]:
            text += f'[notification]\ncommand = ["{h}", "notify", "drowse", "{d}"]\n'
        with open(os.path.join(apps_d, app["id"] + ".toml"), "w") as f:
            f.write(text)
    with open(os.path.join(tmp, "notes.txt"), "w") as f:
        f.writelines(n + "\n" for n in notes)
    print(f"drowsed: [mqtt] keepalive {keepalive:g} s, handler_deadline {deadline:.3g} s, max_per_hour {per_hour}, [radio] model {model}, tail {tail_ms} ms")


# ---------------------------------------------------------------------------- MQTT 3.1.1

def remaining_length(n):
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(first, body):
    return bytes([first]) + remaining_length(len(body)) + body


def mqtt_str(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


class Client:
    """One MQTT 3.1.1 connection with libmosquitto's keepalive rule: PINGREQ once `keepalive`
    seconds have passed since the last packet out or the last packet in (then both clocks
    restart). mosquitto_sub would do, but it takes only whole keepalives of 5 s or more, and a
    baseline's keepalive divided by K is neither."""

    def __init__(self, host, port, client_id, keepalive, on_publish=None):
        self.keepalive = keepalive
        self.on_publish = on_publish
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.lock = threading.Lock()
        self.buf = b""
        self.stopping = False
        self.pid = 0
        self.acked = 0
        flags = 0x02  # clean session
        self.send(packet(0x10, mqtt_str("MQTT") + bytes([4, flags]) + struct.pack("!H", max(1, math.ceil(keepalive)))
                         + mqtt_str(client_id)))
        first, body = self.read_packet_blocking()
        if first >> 4 != 2 or body[1] != 0:
            raise SystemExit(f"CONNACK refused: {body!r}")
        self.last_in = time.monotonic()

    def send(self, data):
        with self.lock:
            self.sock.sendall(data)
            self.last_out = time.monotonic()

    def read_packet_blocking(self):
        while True:
            p = self.take_packet()
            if p:
                return p
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.buf += chunk

    def take_packet(self):
        if len(self.buf) < 2:
            return None
        mult, length, i = 1, 0, 1
        while True:
            if i >= len(self.buf):
                return None
            b = self.buf[i]
            length += (b & 0x7F) * mult
            mult *= 128
            i += 1
            if not b & 0x80:
                break
        if len(self.buf) < i + length:
            return None
        first, body = self.buf[0], self.buf[i:i + length]
        self.buf = self.buf[i + length:]
        return first, body

    def subscribe(self, topics):
        self.pid += 1
        body = struct.pack("!H", self.pid) + b"".join(mqtt_str(t) + b"\x01" for t in topics)
        self.send(packet(0x82, body))

    def publish(self, topic, payload):
        self.pid = self.pid % 65535 + 1
        self.send(packet(0x32, mqtt_str(topic) + struct.pack("!H", self.pid) + payload))

    def loop(self):
        """Reads and pings until stop()."""
        self.sock.settimeout(None)
        while not self.stopping:
            now = time.monotonic()
            due = min(self.last_out, self.last_in) + self.keepalive
            if now >= due:
                self.send(b"\xc0\x00")
                self.last_in = self.last_out
                continue
            r, _, _ = select.select([self.sock], [], [], min(due - now, 0.5))
            if not r:
                continue
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            self.last_in = time.monotonic()
            self.buf += chunk
            while (p := self.take_packet()) is not None:
                first, body = p
                kind = first >> 4
                if kind == 3:
                    n = struct.unpack("!H", body[:2])[0]
                    topic = body[2:2 + n].decode(errors="replace")
                    rest = body[2 + n:]
                    if (first >> 1) & 3:
                        pid, rest = rest[:2], rest[2:]
                        self.send(b"\x40\x02" + pid)
                    if self.on_publish:
                        self.on_publish(topic, rest)
                elif kind == 4:
                    self.acked += 1

    def stop(self):
        self.stopping = True
        try:
            self.send(b"\xe0\x00")
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------- drive

def sleep_until(t):
    while True:
        d = t - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 1.0))


def drive(strategy, plan_path, k, tmp, t0, end, host, port, keepalive):
    plan = load(plan_path)
    k, t0, end, keepalive = float(k), float(t0), float(end), float(keepalive)
    out = os.path.join(tmp, strategy)
    hdir = os.path.join(tmp, "h")
    children = []
    notified = [a["id"] for a in plan["apps"] if a["notified"]]
    client = None
    if notified:
        def on_publish(topic, payload):
            app = topic.split("/")[-2]
            children.append(subprocess.Popen([os.path.join(hdir, app), "notify", strategy, out, payload.decode(errors="replace")]))
        client = Client(host, int(port), f"bench-{strategy}", keepalive, on_publish)
        client.subscribe([f"drowse/bench/apps/{a}/notify" for a in notified])
        threading.Thread(target=client.loop, daemon=True).start()
    running = {}
    skipped = 0
    starts = sorted((t0 + s["at"] / k, s["app"]) for s in plan[strategy])
    try:
        for when, app in starts:
            if when >= end:
                break
            sleep_until(when)
            p = running.get(app)
            if p is not None and p.poll() is None:
                skipped += 1
                continue
            running[app] = subprocess.Popen([os.path.join(hdir, app), "fetch", strategy, out])
        sleep_until(end)
    finally:
        if client:
            client.stop()
        for p in list(running.values()) + children:
            if p.poll() is None:
                p.terminate()
        for p in list(running.values()) + children:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    if skipped:
        print(f"{strategy}: {skipped} run(s) skipped: the app's previous run was still going", file=sys.stderr)


# ---------------------------------------------------------------------------- publish

def publish(plan_path, k, tmp, t0, end, port, device, sent_path):
    plan = load(plan_path)
    k, t0, end = float(k), float(t0), float(end)
    events = [(t0 + n["at"] / k, n["app"]) for n in plan["notifications"]]
    if not events:
        return
    # One connection in the server's namespace (its loopback: nothing of it crosses the
    # device's link), so the stamp is the moment the PUBLISH is written, not a client's start.
    client = Client("127.0.0.1", int(port), "bench-publisher", 3600.0)
    threading.Thread(target=client.loop, daemon=True).start()
    with open(sent_path, "a") as sent:
        try:
            for seq, (when, app) in enumerate(events):
                if when >= end:
                    break
                sleep_until(when)
                t = time.time()
                payload = json.dumps({"aps": {"content-available": 1}, "id": f"n{seq}", "seq": seq, "t": t}, separators=(",", ":"))
                client.publish(f"drowse/{device}/apps/{app}/notify", payload.encode())
                sent.write(f"{seq} {t:.6f} {app}\n")
                sent.flush()
            sleep_until(end)
        finally:
            client.stop()


# ---------------------------------------------------------------------------- report

def pct(xs, p):
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)] if xs else None


def read_lines(path):
    try:
        with open(path) as f:
            return [l.split() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def fmt(x, d=0):
    if x is None:
        return "—"
    return f"{x:,.{d}f}".replace(",", " ")


def report(tmp, k, scenario, strategies, command, markdown=None):
    k = float(k)
    strategies = strategies.split(",")
    rows = {}
    for s in strategies:
        r = load(os.path.join(tmp, s, "radio.json"))
        sent = {int(l[0]): float(l[1]) for l in read_lines(os.path.join(tmp, s, "sent.txt"))}
        starts = {}
        for l in read_lines(os.path.join(tmp, s, "starts.txt")):
            if l[0].lstrip("-").isdigit():
                starts.setdefault(int(l[0]), float(l[1]))
        lat = sorted((starts[q] - t) * k for q, t in sent.items() if q in starts)
        rows[s] = {
            "fetches": len(read_lines(os.path.join(tmp, s, "runs.txt"))),
            "notifications_sent": len(sent), "notifications_handled": len(lat),
            "latency_median_s": pct(lat, 50), "latency_max_s": lat[-1] if lat else None,
            "latency_median_real_ms": pct(lat, 50) / k * 1000 if lat else None,
            "wakes": r["wakes"], "keepalive_wakes": r["keepalive_wakes"],
            "radio_on_s": r["radio_on_seconds"], "keepalive_radio_on_s": r["keepalive_radio_on_seconds"],
            "joules": r["joules"], "keepalive_joules": r["keepalive_joules"], "packets": r["ip_packets"],
            "span_s": r["span_seconds"], "model": r["model"],
        }
    ratios = {}
    if "drowse" in rows:
        d = rows["drowse"]
        for s in strategies:
            if s == "drowse":
                continue
            ratios[s] = {key: (rows[s][key] / d[key] if d[key] else None) for key in ("wakes", "radio_on_s", "joules")}
    notes = [l.rstrip("\n") for l in open(os.path.join(tmp, "notes.txt"))] if os.path.exists(os.path.join(tmp, "notes.txt")) else []
    sim = load(os.path.join(tmp, "sim.json")) if os.path.exists(os.path.join(tmp, "sim.json")) else None
    # The checkout as it was when the run began (written by bench-radio.sh), not at the report.
    try:
        with open(os.path.join(tmp, "commit")) as f:
            commit = f.read().strip() or "?"
    except OSError:
        commit = "?"
    results = {"scenario": scenario, "compress": k, "command": command, "commit": commit, "strategies": rows,
               "ratios_to_drowse": ratios, "notes": notes}
    if sim:
        results["simulate"] = {s: {"wakes": sim[s]["promotions"], "radio_on_s": sim[s]["radio_on_seconds"], "joules": sim[s]["energy_joules"],
                                   "keepalive_wakes": sim[s].get("push", {}).get("keepalive_wakes"),
                                   "keepalive_radio_on_s": sim[s].get("push", {}).get("keepalive_radio_on_seconds")}
                               for s in ("drowse", "naive", "android") if s in sim}
    with open(os.path.join(tmp, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    lines = table(results)
    print("\n".join(lines))
    if markdown:
        write_section(markdown, f"## Radio on the wire: {results_name(scenario)}, time compressed {k:g}×",
                      section(results, lines))


def results_name(scenario):
    base = os.path.basename(scenario)
    return base[:-5] if base.endswith(".toml") else base


def table(res):
    rows, k = res["strategies"], res["compress"]
    head = ["strategy", "fetches", "notif. handled", "wakes", "keepalive-only wakes", "radio-on s", "keepalive-only radio-on s",
            "energy J", "latency median s", "latency max s"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s, r in rows.items():
        share = f" ({100 * r['keepalive_radio_on_s'] / r['radio_on_s']:.1f} %)" if r["radio_on_s"] else ""
        out.append("| " + " | ".join([
            s, str(r["fetches"]), f"{r['notifications_handled']}/{r['notifications_sent']}", str(r["wakes"]),
            str(r["keepalive_wakes"]), fmt(r["radio_on_s"]), fmt(r["keepalive_radio_on_s"]) + share, fmt(r["joules"]),
            fmt(r["latency_median_s"], 2), fmt(r["latency_max_s"], 2)]) + " |")
    out.append("")
    for s, q in res["ratios_to_drowse"].items():
        out.append(f"- {s} / drowse: wakes {fmt(q['wakes'], 2)}×, radio-on {fmt(q['radio_on_s'], 2)}×, energy {fmt(q['joules'], 2)}×")
    if "drowse" in rows:
        d = rows["drowse"]
        if d["wakes"] and d["radio_on_s"] and d["joules"]:
            out.append(f"- drowsed's keepalive alone: {d['keepalive_wakes']} of its {d['wakes']} wakes "
                       f"({fmt(100 * d['keepalive_wakes'] / d['wakes'], 1)} %) are keepalive-only, "
                       f"{fmt(100 * d['keepalive_radio_on_s'] / d['radio_on_s'], 1)} % of its radio-on time, "
                       f"{fmt(100 * d['keepalive_joules'] / d['joules'], 1)} % of its energy")
            rest = d["radio_on_s"] - d["keepalive_radio_on_s"]
            if rest > 0:
                out.append("- were those wakes free (the most that carrying the keepalive in fetch windows could save): "
                           + ", ".join(f"{s} / drowse radio-on {fmt(rows[s]['radio_on_s'] / rest, 2)}×" for s in rows if s != "drowse"))
    lat = [f"{s} {fmt(r['latency_median_real_ms'], 1)} ms" for s, r in rows.items() if r["latency_median_real_ms"] is not None]
    if lat:
        out.append("- notification latency, median, in real (compressed) time: " + ", ".join(lat)
                   + f"; the table's latencies are these × {k:g}")
    sim = res.get("simulate")
    if sim and "drowse" in sim:
        d = sim["drowse"]
        parts = [f"{s} / drowse radio-on {fmt(sim[s]['radio_on_s'] / d['radio_on_s'], 2)}×, wakes {fmt(sim[s]['wakes'] / d['wakes'], 2)}×"
                 for s in ("naive", "android") if s in sim and d["radio_on_s"] and d["wakes"]]
        ka = f" ({d['keepalive_wakes']} keepalive-only)" if d.get("keepalive_wakes") is not None else ""
        out.append(f"- `drowse simulate SCENARIO --compress {k:g}` (its prediction of this run): drowse {fmt(d['wakes'])} wakes{ka}, "
                   f"{fmt(d['radio_on_s'])} s radio-on; " + "; ".join(parts))
    return out


def section(res, lines):
    rows = res["strategies"]
    k = res["compress"]
    any_row = next(iter(rows.values()))
    text = [f"`{res['command']}`", "",
            f"Measured {time.strftime('%Y-%m-%d')} with the checkout at {res['commit']} when the run began, {os.cpu_count()} CPUs, Linux {platform.release()}; "
            f"{fmt(any_row['span_s'] / 3600, 1)} h of scenario time per strategy, each run in {fmt(any_row['span_s'] / k / 60, 1)} min; "
            f"radio model {any_row['model']} on the device side of the veth, every IP packet an instant of activity. "
            "Seconds, joules and latencies are of the uncompressed run (the capture's times × K). "
            "Keepalive-only wakes: wakes whose packets are only MQTT PINGREQ/PINGRESP and their ACKs; their share of radio-on "
            "in brackets.", ""]
    text += lines
    if res["notes"]:
        text += ["", "What the bench could not scale by K:", ""] + [f"- {n}" for n in res["notes"]]
    return text


def write_section(path, heading, body):
    """Replaces the section under `heading` (to the next `## `), or appends it."""
    intro = ["# Drowse — benchmarks", "",
             "Written by the bench scripts in deploy/: each section is a table and the command that produced it. "
             "A script replaces only its own section.", ""]
    try:
        with open(path) as f:
            old = f.read().split("\n")
    except FileNotFoundError:
        old = intro
    out, i, done = [], 0, False
    while i < len(old):
        if old[i] == heading:
            out += [heading, ""] + body + [""]
            done = True
            i += 1
            while i < len(old) and not old[i].startswith("## "):
                i += 1
            continue
        out.append(old[i])
        i += 1
    if not done:
        while out and out[-1] == "":
            out.pop()
        out += ["", heading, ""] + body + [""]
    while out and out[-1] == "":
        out.pop()
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def summary(radio_json):
    r = load(radio_json)
    print(f"{r['wakes']} wakes ({r['keepalive_wakes']} keepalive-only), {r['radio_on_seconds']:.0f} s radio-on, {r['joules']:.0f} J")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"prepare": prepare, "drive": drive, "publish": publish, "report": report, "summary": summary}[cmd](*args)
