"""Helper of deploy/bench-scale.sh (stdlib only): how drowsed's costs grow with its work.

    bench-scale.py run BIN WORKDIR BROKER_PORT SERIES OUT_TSV [SVG_DIR]

For each point of each series a fresh drowsed (BIN/drowsed) on WORKDIR/<point>/, connected to the
broker on 127.0.0.1:BROKER_PORT, is started twice: once to make its state (apps, transfers,
notifications), and again to be measured on that state, as after a reboot:
  start-up      from the exec to its first answer on the API socket (GET /v1/status)
  RSS, PSS      /proc/PID/smaps_rollup, 5 s after it answered (idle: nothing due; MQTT configured)
  state.db      state.db and its WAL, once checkpointed at the stop
  status, transfers  the median time of 20 GET /v1/status and 20 GET /v1/transfers (one page,
                the API's default of 100) over the socket, from the connect to the last byte
Series (SERIES: a comma-separated subset of apps, transfers, notifications; sizes may follow a
colon, e.g. apps:1/10/100):
  apps          N apps, each with a fetch (minimum_interval 12h) and a notification handler
  transfers     N downloads stored, waiting (`discretionary` on an interface [conditions]
                metered_interfaces calls metered), one app ([transfers] max_per_app = 100000)
  notifications N handled notifications in state.db within the 7-day dedupe window, written into
                state.db while drowsed is stopped (as if handled over the week), one app; and
                the same N with three quarters older than the window, which drowsed prunes at start
Writes the table (TSV, bench-markdown.py's format) to OUT_TSV; with SVG_DIR, one SVG line plot
per measure there (bench-scale-<measure>.svg).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time

SERIES = {"apps": [1, 10, 100, 1000], "transfers": [10, 1000, 10000], "notifications": [10_000, 100_000, 1_000_000]}
UNIT = {"apps": "apps", "transfers": "stored transfers", "notifications": "handled notifications"}


def api(sock_path: str, method: str, target: str, body: dict | None = None, timeout: float = 30) -> tuple[int, bytes]:
    """One request on a connection of its own; (status, body)."""
    data = json.dumps(body).encode() if body is not None else b""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
        head = f"{method} {target} HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        s.sendall(head.encode() + b"\r\n" + data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    if b"transfer-encoding: chunked" in head.lower():
        out, i = b"", 0
        while True:
            j = rest.index(b"\r\n", i)
            n = int(rest[i:j], 16)
            if n == 0:
                break
            out += rest[j + 2:j + 2 + n]
            i = j + 2 + n + 2
        rest = out
    return status, rest


def default_interface() -> str:
    with open("/proc/net/route") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) > 2 and parts[1] == "00000000":
                return parts[0]
    return "lo"


class Drowsed:
    """drowsed on DIR/drowse.toml; started, measured, stopped."""

    def __init__(self, bin_dir: str, dir: str):
        self.bin = bin_dir
        self.dir = dir
        self.sock = os.path.join(dir, "drowse.sock")
        self.proc: subprocess.Popen | None = None
        self.startup = 0.0

    def start(self) -> None:
        log = open(os.path.join(self.dir, "drowsed.log"), "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen([os.path.join(self.bin, "drowsed"), "--config", os.path.join(self.dir, "drowse.toml")],
                                     stdout=log, stderr=log, cwd=self.dir)
        deadline = t0 + 300
        while True:
            try:
                if api(self.sock, "GET", "/v1/status", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                sys.exit(f"bench-scale: drowsed exited ({self.proc.returncode}); see {self.dir}/drowsed.log")
            if time.monotonic() > deadline:
                sys.exit(f"bench-scale: drowsed did not answer within 300 s; see {self.dir}/drowsed.log")
            time.sleep(0.005)
        self.startup = time.monotonic() - t0

    def memory(self) -> tuple[int, int]:
        """(RSS, PSS) in KiB."""
        rss = pss = 0
        with open(f"/proc/{self.proc.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
        return rss, pss

    def latency(self, target: str, n: int = 20) -> float:
        """Median milliseconds of n GET target."""
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            status, _ = api(self.sock, "GET", target)
            times.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                sys.exit(f"bench-scale: GET {target} answered {status}")
        return statistics.median(times)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def write_config(dir: str, port: int, apps: int, metered: bool = False) -> None:
    shutil.rmtree(dir, ignore_errors=True)
    os.makedirs(os.path.join(dir, "apps.d"))
    os.makedirs(os.path.join(dir, "inbox"))
    conf = (f'device_id = "scale"\nstate_dir = "state"\napps_dir = "apps.d"\nsocket = "drowse.sock"\n'
            f'[mqtt]\nurl = "mqtt://127.0.0.1:{port}"\n')
    if metered:
        conf += f'[conditions]\nmetered_interfaces = ["{default_interface()}", "lo"]\n[transfers]\nmax_per_app = 100000\n'
    with open(os.path.join(dir, "drowse.toml"), "w") as f:
        f.write(conf)
    for i in range(apps):
        with open(os.path.join(dir, "apps.d", f"app{i:04d}.toml"), "w") as f:
            f.write(f'id = "app{i:04d}"\n[fetch]\ncommand = ["/bin/true"]\nminimum_interval = "12h"\n'
                    f'[notification]\ncommand = ["/bin/true"]\n[transfers]\nevents_command = ["/bin/true"]\n')


def db_size(dir: str) -> int:
    state = os.path.join(dir, "state")
    return sum(os.path.getsize(os.path.join(state, n)) for n in ("state.db", "state.db-wal") if os.path.exists(os.path.join(state, n)))


def make_transfers(d: Drowsed, n: int) -> None:
    for i in range(n):
        status, body = api(d.sock, "POST", "/v1/transfers",
                           {"url": f"http://127.0.0.1:9/file{i}", "app": "app0000", "discretionary": True})
        if status != 201 and status != 200:
            sys.exit(f"bench-scale: creating transfer {i} answered {status}: {body[:200]!r}")


def insert_notifications(dir: str, n: int, old_share: float) -> None:
    """n handled notifications of app0000, spread over the last 7 days (old_share of them over
    the 21 days before), written while drowsed is stopped."""
    now = time.time()
    week = 7 * 86400
    db = sqlite3.connect(os.path.join(dir, "state", "state.db"))
    db.execute("PRAGMA journal_mode=WAL")
    old = int(n * old_share)
    rows = []
    for i in range(n):
        at = now - 3 * week * (i + 1) / (old + 1) - week if i < old else now - week * (i - old + 1) / (n - old + 1)
        rows.append(("app0000", f"id:scale-{i}", "", at, "new-data", at + 0.2, 0, None, at, 1))
        if len(rows) == 50_000:
            db.executemany("INSERT INTO notifications(app, dedupe_key, payload, received_at, state, handled_at, signed, collapse_id, budget_at, attempts)"
                           " VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            rows = []
    if rows:
        db.executemany("INSERT INTO notifications(app, dedupe_key, payload, received_at, state, handled_at, signed, collapse_id, budget_at, attempts)"
                       " VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def count_notifications(dir: str) -> int:
    db = sqlite3.connect(os.path.join(dir, "state", "state.db"))
    try:
        return db.execute("SELECT COUNT(*) FROM notifications").fetchone()[0]
    finally:
        db.close()


def point(bin_dir: str, work: str, port: int, series: str, n: int, variant: str = "") -> dict:
    dir = os.path.join(work, f"{series}-{n}{variant}")
    apps = n if series == "apps" else 1
    write_config(dir, port, apps, metered=series == "transfers")
    d = Drowsed(bin_dir, dir)
    d.start()
    if series == "transfers":
        make_transfers(d, n)
    d.stop()
    if series == "notifications":
        insert_notifications(dir, n, 0.75 if variant else 0.0)
    d.start()
    time.sleep(5)
    rss, pss = d.memory()
    row = {"series": series, "n": n, "variant": variant, "startup_ms": d.startup * 1000, "rss_kib": rss, "pss_kib": pss,
           "status_ms": d.latency("/v1/status"), "transfers_ms": d.latency("/v1/transfers")}
    d.stop()
    row["db_bytes"] = db_size(dir)
    if series == "notifications":
        row["kept"] = count_notifications(dir)
    shutil.rmtree(dir, ignore_errors=True)
    print(f"==> {series} {n}{variant}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                                                     if k not in ("series", "n", "variant")), file=sys.stderr, flush=True)
    return row


def human_bytes(b: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{int(b)} B"


def svg_plot(path: str, title: str, ylabel: str, lines: list[tuple[str, list[tuple[float, float]]]]) -> None:
    """A log-x line plot, one line per series (x: its size), plain SVG."""
    import math
    w, h, left, right, top, bottom = 600, 300, 70, 170, 30, 45
    xs = [x for _, pts in lines for x, _ in pts]
    ys = [y for _, pts in lines for _, y in pts]
    if not xs:
        return
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = max(ys) * 1.1 or 1
    px = lambda x: left + (math.log10(x) - x0) / (x1 - x0) * (w - left - right)
    py = lambda y: h - bottom - y / y1 * (h - top - bottom)
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="14" y="{(top + h - bottom) / 2}" transform="rotate(-90 14 {(top + h - bottom) / 2})" text-anchor="middle">{ylabel}</text>',
           f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">size of the series (log scale)</text>']
    for e in range(int(math.floor(x0)), int(math.ceil(x1)) + 1):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{h - bottom}" x2="{x:.1f}" y2="{h - bottom + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 16}" text-anchor="middle">{10 ** e:,}</text>')
    for k in range(5):
        y = y1 * k / 4
        out.append(f'<line x1="{left - 4}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" stroke="#ddd"/>')
        label = f"{y:,.0f}" if y >= 100 else f"{y:.1f}" if y >= 1 or y == 0 else f"{y:.2f}"
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{label}</text>')
    for i, (name, pts) in enumerate(lines):
        c = colours[i % len(colours)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="' + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts) + '"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<rect x="{w - right + 12}" y="{top + 16 * i}" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{w - right + 26}" y="{top + 16 * i + 9}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def growth(rows: list[dict]) -> list[str]:
    """Notes: each series' cost per unit between its smallest and largest point, and whether
    start-up grew at most linearly: the cost per unit of its last step at most 1.5 times that of
    the whole series (or the whole growth under 50 ms, within this machine's noise); for
    notifications, what the prune kept."""
    notes = []
    for name in SERIES:
        pts = sorted((r for r in rows if r["series"] == name and not r["variant"]), key=lambda r: r["n"])
        if len(pts) < 2:
            continue
        a, z = pts[0], pts[-1]
        dn = z["n"] - a["n"]
        y = pts[-2]
        overall = (z["startup_ms"] - a["startup_ms"]) / dn
        last = (z["startup_ms"] - y["startup_ms"]) / (z["n"] - y["n"])
        linear = z["startup_ms"] - a["startup_ms"] < 50 or last <= 1.5 * overall
        notes.append(f"# {UNIT[name].capitalize()}, {a['n']:,} to {z['n']:,}: start-up {(z['startup_ms'] - a['startup_ms']) / dn * 1000:+.2f} ms per 1,000"
                     f" (at most linear: {'met' if linear else 'NOT met'}), PSS {(z['pss_kib'] - a['pss_kib']) * 1024 / dn:+.0f} B each,"
                     f" state.db {(z['db_bytes'] - a['db_bytes']) / dn:+.0f} B each.")
    for r in rows:
        if r["variant"]:
            within = r["n"] - int(r["n"] * 0.75)
            notes.append(f"# {r['n']:,} handled notifications of which {r['n'] - within:,} older than the 7-day window: {r['kept']:,} rows kept after"
                         f" the prune at start ({'bounded by the window: met' if r['kept'] <= within else 'NOT bounded'}); the file keeps the freed pages for reuse.")
    return notes


def run(bin_dir: str, work: str, port: str, series_arg: str, out_tsv: str, svg_dir: str | None = None) -> None:
    rows = []
    for part in series_arg.split(","):
        name, _, sizes = part.partition(":")
        if name not in SERIES:
            sys.exit(f"bench-scale: no series '{name}' (apps, transfers, notifications)")
        for n in ([int(s) for s in sizes.split("/")] if sizes else SERIES[name]):
            rows.append(point(bin_dir, work, int(port), name, n))
            if name == "notifications":
                rows.append(point(bin_dir, work, int(port), name, n, variant="+old"))
    head = ["series", "size", "start-up", "idle RSS", "idle PSS", "state.db", "GET /v1/status", "GET /v1/transfers"]
    lines = ["\t".join(head)]
    for r in rows:
        size = f"{r['n']:,} {UNIT[r['series']]}"
        if r["variant"]:
            size += f", 3/4 older than 7 days ({r['kept']:,} kept)"
        lines.append("\t".join([r["series"], size, f"{r['startup_ms']:.0f} ms", human_bytes(r["rss_kib"] * 1024), human_bytes(r["pss_kib"] * 1024),
                                human_bytes(r["db_bytes"]), f"{r['status_ms']:.2f} ms", f"{r['transfers_ms']:.2f} ms"]))
    base = [r for r in rows if r["series"] == "apps" and r["n"] == min(x["n"] for x in rows if x["series"] == "apps")] if any(r["series"] == "apps" for r in rows) else []
    if base:
        b = base[0]
        lines.append(f"# Baseline, the smallest point ({b['n']} app): start-up {b['startup_ms']:.0f} ms, PSS {human_bytes(b['pss_kib'] * 1024)}, state.db {human_bytes(b['db_bytes'])}.")
    lines += growth(rows)
    with open(out_tsv, "w") as f:
        f.write("\n".join(lines) + "\n")
    if svg_dir:
        plain = [r for r in rows if not r["variant"]]
        for key, title, ylabel, scale in (("startup_ms", "drowsed's start-up", "milliseconds", 1), ("pss_kib", "idle PSS", "MiB", 1 / 1024),
                                          ("db_bytes", "state.db (and its WAL)", "MiB", 1 / (1 << 20)),
                                          ("status_ms", "GET /v1/status", "milliseconds", 1), ("transfers_ms", "GET /v1/transfers", "milliseconds", 1)):
            series = []
            for name in SERIES:
                pts = [(r["n"], r[key] * scale) for r in plain if r["series"] == name]
                if pts:
                    series.append((UNIT[name], pts))
            svg_plot(os.path.join(svg_dir, f"bench-scale-{key.split('_')[0]}.svg"), title, ylabel, series)


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "run":
        run(*sys.argv[2:8])
    else:
        sys.exit(__doc__)
