"""Helper of deploy/bench-writes.sh (stdlib only).

  publish PORT TOPIC N SEQ0                 N QoS 1 notifications back to back on one connection;
                                            returns once the broker acknowledged them all
  one-by-one PORT TOPIC N SEQ0 SOCKET APP   N QoS 1 notifications, each published once drowsed's
                                            count of APP's notification handler runs (GET
                                            /v1/metrics on SOCKET) shows the one before handled
  runs SOCKET APP EVENT                     prints drowse_handler_runs_total{app=APP,event=EVENT}
  wait-runs SOCKET APP EVENT N SECONDS      waits until that count reaches N (exit 1 on timeout)
  trace FILE PHASE MOUNT                     sums an strace of drowsed (-f -y) by file: write calls
                                            and bytes, fsync/fdatasync calls (TRACE=1)
  report RESULTS IDLE_MINUTES COMMAND [MARKDOWN_FILE]
                                            the side-by-side table from RESULTS (one line per
                                            phase, written by bench-writes.sh); with MARKDOWN_FILE,
                                            also its section there
"""
import importlib.util, json, os, re, socket, struct, sys, time

# ---------------------------------------------------------------------------- MQTT 3.1.1, QoS 1

def bench_radio():
    """deploy/bench-radio.py as a module: its MQTT client and its docs/benchmarks.md writer."""
    spec = importlib.util.spec_from_file_location("bench_radio", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-radio.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def connect(port):
    client = bench_radio().Client("127.0.0.1", int(port), f"bench-writes-{os.getpid()}", 600)
    client.sock.settimeout(None)
    return client


def publish_one(client, topic, seq):
    client.publish(topic, json.dumps({"aps": {"content-available": 1}, "id": f"w{seq}-{time.time():.6f}", "seq": seq},
                                     separators=(",", ":")).encode())


def wait_pubacks(client, n):
    got = 0
    while got < n:
        first, _ = client.read_packet_blocking()
        got += first >> 4 == 4


def publish(port, topic, n, seq0):
    client = connect(port)
    for i in range(int(n)):
        publish_one(client, topic, int(seq0) + i)
    wait_pubacks(client, int(n))
    client.stop()


# ---------------------------------------------------------------------------- drowsed's API

def metrics(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(b"GET /v1/metrics HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\n\r\n")
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return buf.decode(errors="replace")


def handler_runs(sock_path, app, event):
    total = 0
    for line in metrics(sock_path).splitlines():
        if line.startswith("drowse_handler_runs_total{") and f'app="{app}"' in line and f'event="{event}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def wait_runs(sock_path, app, event, n, seconds, step=0.2):
    deadline = time.monotonic() + float(seconds)
    while handler_runs(sock_path, app, event) < int(n):
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def one_by_one(port, topic, n, seq0, sock_path, app):
    client = connect(port)
    done = handler_runs(sock_path, app, "notification")
    for i in range(int(n)):
        publish_one(client, topic, int(seq0) + i)
        wait_pubacks(client, 1)
        if not wait_runs(sock_path, app, "notification", done + i + 1, 30, step=0.005):
            sys.exit(f"bench-writes.py: notification {i} was not handled within 30 s")
    client.stop()


# ---------------------------------------------------------------------------- TRACE=1

WRITES = {"write", "pwrite64", "writev", "pwritev"}
SYNCS = {"fsync", "fdatasync", "sync_file_range"}
CALL = re.compile(r"^(\d+)\s+(\w+)\((\d+)<([^>]*)>")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>.*= (-?\d+)")
RESULT = re.compile(r"= (-?\d+)(?: \w+ \(.*\))?$")
FRAME = re.compile(r'^\d+\s+pwrite64\(\d+<[^>]*>, "((?:\\x[0-9a-f]{2}){24})", 24,')


def unhex(s):
    """A string as `strace -xx` prints it: every byte as \\xNN."""
    return bytes.fromhex(s.replace("\\x", "")).decode(errors="replace") if s.startswith("\\x") else s


def trace(path, phase, mount, pages=None, units=None):
    """Sums an `strace -f -y -xx -s 24` of drowsed: per file on disk, write calls, bytes and syncs;
    for the WAL, its frames (a 24-byte header, then the page) by page and by table (PAGES: lines
    "TABLE PAGENO" from SQLite's dbstat), and its commits (frames whose header has the database's
    size)."""
    files = {}          # name -> [write calls, bytes, syncs]
    open_calls = {}     # pid -> (call, name) of an unfinished call
    frames, commits = {}, 0

    def name_of(target):
        if target.startswith(mount):
            return "A" + target[len(mount):]
        return None     # not on the measured device (pipes, sockets, cgroup files, /proc)

    def add(call, name, ret):
        if name is None:
            return
        f = files.setdefault(name, [0, 0, 0])
        if call in WRITES and ret > 0:
            f[0] += 1
            f[1] += ret
        elif call in SYNCS:
            f[2] += 1

    for line in open(path, errors="replace"):
        line = line.rstrip()
        m = RESUMED.match(line)
        if m:
            pid, call, ret = m.group(1), m.group(2), int(m.group(3))
            if pid in open_calls:
                c, name = open_calls.pop(pid)
                add(c, name, ret)
            continue
        m = CALL.match(line)
        if not m or m.group(2) not in WRITES | SYNCS:
            continue
        pid, call, target = m.group(1), m.group(2), unhex(m.group(4))
        f = FRAME.match(line)
        if f and target.endswith("-wal"):
            header = bytes.fromhex(f.group(1).replace("\\x", ""))
            page, size = struct.unpack("!II", header[:8])
            frames[page] = frames.get(page, 0) + 1
            commits += size != 0
        if line.endswith("<unfinished ...>"):
            open_calls[pid] = (call, name_of(target))
            continue
        r = RESULT.search(line)
        add(call, name_of(target), int(r.group(1)) if r else 0)
    per = f" (per unit: {units})" if units else ""
    print(f"{phase}: drowsed's writes and syncs by file on the device (strace){per}")
    print(f"  {'file':<34}{'write calls':>12}{'bytes':>14}{'syncs':>8}")
    n = float(units) if units else None
    for name, (calls, nbytes, syncs) in sorted(files.items(), key=lambda kv: -kv[1][1]):
        extra = f"   per unit: {calls / n:.1f} calls, {human(nbytes / n)}, {syncs / n:.2f} syncs" if n else ""
        print(f"  {name:<34}{calls:>12}{nbytes:>14}{syncs:>8}{extra}")
    if frames:
        total = sum(frames.values())
        print(f"  WAL: {total} frames (a page each) in {commits} commits: {total / max(commits, 1):.1f} pages a commit"
              + (f"; per unit {total / n:.1f} frames, {commits / n:.1f} commits" if n else ""))
        owner = {}
        if pages and os.path.exists(pages):
            for l in open(pages):
                parts = l.split()
                if len(parts) == 2:
                    owner[int(parts[1])] = parts[0]
        by_table = {}
        for page, k in frames.items():
            t = owner.get(page, "?" if page != 1 else "sqlite_schema (page 1)")
            by_table[t] = by_table.get(t, 0) + k
        for t, k in sorted(by_table.items(), key=lambda kv: -kv[1]):
            print(f"    {t:<40}{k:>8} frames ({100 * k / total:.0f} %)" + (f", {k / n:.1f} per unit" if n else ""))


# ---------------------------------------------------------------------------- the table

KIB = 1024
# phase -> (what one unit is, the goal: bytes to the device per unit, or a ratio for the download)
PHASES = {
    "idle": ("idle hour", 0),
    "burst": ("notification", 12 * KIB),
    "one-by-one": ("notification", 12 * KIB),
    "fetch": ("fetch", None),
    "download": ("downloaded byte", 1.02),
}
TITLES = {
    "idle": "idle, MQTT connected",
    "burst": "notifications, a burst (QoS 1)",
    "one-by-one": "notifications, one at a time",
    "fetch": "fetches (`drowse fetch`)",
    "download": "a download",
}
BASELINES = {
    "idle": "`mosquitto_sub \\| xargs`, connected",
    "burst": "`mosquitto_sub \\| xargs` appending a line",
    "one-by-one": "`mosquitto_sub \\| xargs` appending a line",
    "fetch": "a shell loop: curl, then a log line",
    "download": "`curl -o`",
}


def human(b):
    if b is None:
        return "—"
    if b >= 10 * 1024 * KIB:
        return f"{b / 1024 / KIB:.1f} MiB"
    if b >= 10 * KIB:
        return f"{b / KIB:.1f} KiB"
    return f"{b:.0f} B"


def read_results(path):
    """Lines "PHASE UNITS KEY=VALUE ...": units is how many notifications, fetches, bytes or
    minutes the phase had."""
    rows = []
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        row = {"phase": parts[0], "units": float(parts[1])}
        for kv in parts[2:]:
            k, v = kv.split("=", 1)
            row[k] = float(v)
        rows.append(row)
    return rows


def report(results, idle_minutes, command, markdown=None):
    rows = read_results(results)
    idle_minutes = float(idle_minutes)
    lines_txt, md, goals = [], [], []
    md += ["| phase | units | drowsed: to the device | drowsed: write_bytes | per unit (device / write_bytes) "
           "| baseline | baseline: to the device | baseline: write_bytes | per unit (device / write_bytes) | goal |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    hdr = f"{'phase':<14}{'units':>10}{'drowsed dev':>13}{'wbytes':>12}{'per unit':>22}{'baseline dev':>14}{'wbytes':>12}{'per unit':>22}  goal"
    lines_txt.append(hdr)
    for r in rows:
        unit, goal = PHASES[r["phase"]]
        n = r["units"]
        if r["phase"] == "idle":
            scale = 60 / idle_minutes          # to an hour
            per = lambda b: b * scale
            units = f"{idle_minutes:g} min"
        elif r["phase"] == "download":
            per = lambda b: b / n
            units = human(n)
        else:
            per = lambda b: b / n
            units = f"{n:.0f}"

        def per_s(dev, wb):
            if r["phase"] == "download":
                return f"{dev / n:.3f}× / {wb / n:.3f}×"
            return f"{human(per(dev))} / {human(per(wb))}"
        d_dev, d_wb = r["dev"], r["wb"]
        b_dev, b_wb = r.get("bdev"), r.get("bwb")
        if goal is None:
            verdict = "(no goal)"
        elif r["phase"] == "download":
            ok = d_dev / n <= goal
            verdict = f"≤ {goal}× the file: {'met' if ok else 'NOT met'} ({d_dev / n:.3f}×)"
            goals.append(ok)
        elif r["phase"] == "idle":
            ok = d_dev == 0
            verdict = f"0 B an idle hour: {'met' if ok else 'NOT met'} ({human(per(d_dev))} an hour, scaled from {idle_minutes:g} min)"
            goals.append(ok)
        else:
            ok = per(d_dev) <= goal
            verdict = f"≤ 12 KiB a notification: {'met' if ok else 'NOT met'} ({human(per(d_dev))})"
            goals.append(ok)
        base_per = per_s(b_dev, b_wb) if b_dev is not None else "—"
        lines_txt.append(f"{r['phase']:<14}{units:>10}{human(d_dev):>13}{human(d_wb):>12}{per_s(d_dev, d_wb):>22}"
                         f"{human(b_dev):>14}{human(b_wb):>12}{base_per:>22}  {verdict}")
        md.append(f"| {TITLES[r['phase']]} | {units} | {human(d_dev)} | {human(d_wb)} | {per_s(d_dev, d_wb)} "
                  f"| {BASELINES[r['phase']]} | {human(b_dev)} | {human(b_wb)} | {base_per} | {verdict} |")
    # What drowsed's device received besides the bytes: write requests and cache flushes (fsyncs).
    detail = ["", f"{'phase':<14}{'drowsed: write requests':>25}{'flushes':>10}{'state.db + WAL growth':>24}{'log lines':>11}"
                  f"{'baseline: write requests':>26}{'flushes':>10}"]
    md_detail = ["", "| phase | drowsed: write requests | flushes | log lines | baseline: write requests | flushes |",
                 "|---|---|---|---|---|---|"]
    for r in rows:
        detail.append(f"{r['phase']:<14}{r.get('wios', 0):>25.0f}{r.get('flush', 0):>10.0f}{human(r.get('dbgrow', 0)):>24}"
                      f"{r.get('loglines', 0):>11.0f}{r.get('bwios', 0):>26.0f}{r.get('bflush', 0):>10.0f}")
        md_detail.append(f"| {TITLES[r['phase']]} | {r.get('wios', 0):.0f} | {r.get('flush', 0):.0f} | {r.get('loglines', 0):.0f} "
                         f"| {r.get('bwios', 0):.0f} | {r.get('bflush', 0):.0f} |")
    print()
    print("\n".join(lines_txt + detail))
    print()
    print("to the device: sectors the loop device received × 512 (after `sync -f` on its mount);"
          " write_bytes: /proc/PID/io of the process (and the children it reaped)")
    print(f"goals: {sum(goals)} of {len(goals)} met")
    if markdown:
        scaled = "" if idle_minutes == 60 else f" (scaled from {idle_minutes:g} minutes)"
        body = [f"`{command}` on {time.strftime('%Y-%m-%d', time.gmtime())}, the phases one after the other: drowsed's "
                "state_dir on an ext4 image of its own (a loop device), the baseline's files on another; \"to the device\" "
                "is what the block device received (data, metadata, the ext4 journal), write_bytes what `/proc/PID/io` "
                "counted for the process. Per unit: per notification, per fetch, per downloaded byte (a ratio), "
                f"per idle hour{scaled}.",
                ""] + md + md_detail
        bench_radio().write_section(markdown, "## Bytes written", body)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "runs":
        print(handler_runs(*args))
    elif cmd == "wait-runs":
        sys.exit(0 if wait_runs(args[0], args[1], args[2], int(args[3]), float(args[4])) else 1)
    elif cmd == "trace":
        trace(*args)
    else:
        {"publish": publish, "one-by-one": one_by_one, "report": report}[cmd](*args)
