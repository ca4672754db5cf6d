#!/usr/bin/env bash
# Suspension: what freezing idle resident apps saves, and what thawing one for an event costs.
#
#   deploy/bench-lifecycle.sh [SECONDS] [EVENTS] [--markdown]
#       SECONDS  how long the apps' context switches are counted in each phase (default 60)
#       EVENTS   events delivered to a suspended app for the latency figures (default 200)
#       --markdown  also write the summary table and the command into docs/benchmarks.md (its
#                block there only)
#
# Setup (run as root: drowsed makes a cgroup subtree; everything in a temp dir):
#   - a private drowsed with three resident apps, each Tests/EndToEnd/resident_app.py with a 10 Hz
#     timer (a thread that wakes every 100 ms, as a polling app does) besides its event stream;
#   - phase "unsuspended": the same three apps with `always_active = true` (never frozen);
#   - phase "suspended": `suspend_after = "1s"`: they are frozen once idle.
# Context switches = the sum over every thread of the apps' processes of
# voluntary_ctxt_switches + nonvoluntary_ctxt_switches (/proc/PID/task/*/status), over SECONDS.
# Then, with `suspend_after = "0s"` (frozen again as soon as an event is completed), EVENTS times:
# wait until the app's cgroup says `frozen 1`, note the time, `POST /v1/apps/ID/fetch` on the API
# socket, and take the time the app read the event from its stream (it stamps each line as it
# arrives): delivery latency = thaw + the event on its stream. Percentiles are nearest-rank.
#
# Goals, printed beside the figures: >= 100x fewer context switches while suspended; delivery p99 <= 5 ms.
#
# Env: DROWSE_BIN_DIR  use the binaries there instead of the release build
#      KEEP=1          keep the temp dir and print where it is
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

bench_markdown_args "$@"
set -- "${BENCH_ARGS[@]}"
SECONDS_PER_PHASE=${1:-60}
EVENTS=${2:-200}
case "$SECONDS_PER_PHASE$EVENTS" in ''|*[!0-9]*) die "SECONDS and EVENTS are whole numbers" ;; esac
[ "$(id -u)" = 0 ] || die "run as root: drowsed needs to make cgroups"
need_packages python3

release_binaries   # sets BIN

TMP=$(mktemp -d /tmp/drowse-bench-lifecycle.XXXXXX)
chmod 755 "$TMP"
cleanup() {
    stop_pid "$PY_PID" 60    # its finally blocks stop drowsed (and so the apps) and remove the cgroups
    if [ "${KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$TMP/bench.py" <<'EOF'
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path

BIN, TMP = Path(os.environ["BIN"]), Path(os.environ["TMP"])
SECS, EVENTS = int(os.environ["SECONDS_PER_PHASE"]), int(os.environ["EVENTS"])
RESIDENT = os.environ["RESIDENT"]
APPS = ["poll1", "poll2", "poll3"]


def mount():
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ")[0] == "cgroup2":
            return Path(left.split(" ")[4])
    sys.exit("no cgroup2 mount")


CG = f"drowse-bench-{os.getpid()}"
SOCK = TMP / "drowse.sock"


def api(method, path, body=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(SOCK))
    data = json.dumps(body).encode() if body is not None else b""
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    buf = b""
    while chunk := s.recv(65536):
        buf += chunk
    s.close()
    return json.loads(buf.partition(b"\r\n\r\n")[2] or b"null")


def run_daemon(phase, always_active, suspend_after):
    base = TMP / phase
    (base / "apps.d").mkdir(parents=True)
    (base / "drowse.toml").write_text(
        f'device_id = "bench"\nstate_dir = "{base}/state"\napps_dir = "{base}/apps.d"\nsocket = "{SOCK}"\n\n'
        f'[lifecycle]\ncgroup = "{CG}-{phase}"\nsuspend_after = "{suspend_after}"\n')
    for app in APPS:
        out = base / "out" / app
        (base / "apps.d" / f"{app}.toml").write_text(
            f'id = "{app}"\n\n[process]\ncommand = ["{sys.executable}", "{RESIDENT}", "{out}", "10"]\n'
            + ("always_active = true\n" if always_active else ""))
    log = open(base / "drowsed.log", "wb")
    p = subprocess.Popen([str(BIN / "drowsed"), "--config", str(base / "drowse.toml")], stdout=log, stderr=log,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    return p, base


def wait(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    sys.exit(f"timed out waiting for {what}")


def pids(base):
    return [int((base / "out" / a / "starts").read_text().split()[-1]) for a in APPS]


def switches(pid_list):
    total = 0
    for pid in pid_list:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(40)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def streams_open(base):
    return all((base / "out" / a / "events.jsonl").exists() for a in APPS)


def state(app):
    return api("GET", f"/v1/apps/{app}")["state"]


results = {}
for phase, active in (("unsuspended", True), ("suspended", False)):
    p, base = run_daemon(phase, active, "1s")
    try:
        wait(lambda: streams_open(base), 30, "the apps' streams")
        want = "active" if active else "suspended"
        wait(lambda: all(state(a) == want for a in APPS), 30, f"the apps to be {want}")
        time.sleep(1)
        ps = pids(base)
        c0, t0 = switches(ps), time.monotonic()
        time.sleep(SECS)
        c1, t1 = switches(ps), time.monotonic()
        results[phase] = (c1 - c0) / (t1 - t0)
    finally:
        stop(p)

p, base = run_daemon("latency", False, "0s")
lat = []
try:
    # With no grace an app is frozen as soon as its stream is open (its hello line unread):
    # suspended means connected.
    wait(lambda: state("poll1") == "suspended", 30, "poll1 to connect and be suspended")
    events_file = base / "out" / "poll1" / "events.jsonl"
    frozen = mount() / f"{CG}-latency" / "apps" / "poll1" / "cgroup.events"
    for i in range(EVENTS):
        wait(lambda: "frozen 1" in frozen.read_text(), 10, "the app to be frozen")
        seen = len(events_file.read_text().splitlines()) if events_file.exists() else 0
        t = time.time()
        r = api("POST", "/v1/apps/poll1/fetch")
        assert r["result"] == "new-data", r
        lines = [json.loads(l) for l in events_file.read_text().splitlines()[seen:]]
        got = [l for l in lines if l.get("event") == "fetch"]
        lat.append((got[0]["received_at"] - t) * 1000)
finally:
    stop(p)

# Leave no cgroups behind (drowsed removes its apps' leaves, not the tree it was given).
for phase in ("unsuspended", "suspended", "latency"):
    top = mount() / f"{CG}-{phase}"
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
        try:
            d.rmdir()
        except OSError:
            pass

lat.sort()
def pct(q):
    return lat[min(len(lat) - 1, max(0, int(round(q / 100 * len(lat))) - 1))]

u, s = results["unsuspended"], results["suspended"]
print(f"context switches/s of 3 apps polling at 10 Hz, over {SECS} s:")
print(f"  unsuspended (always_active)   {u:10.2f}")
print(f"  suspended by drowse           {s:10.2f}")
print(f"  ratio                         {('inf' if s == 0 else f'{u / s:.0f}x'):>10}   (goal >= 100x)")
print(f"event delivery to a suspended app (thaw + event on its stream), {len(lat)} events, ms:")
print(f"  p50 {pct(50):.2f}  p90 {pct(90):.2f}  p99 {pct(99):.2f}  max {lat[-1]:.2f}   (goal p99 <= 5 ms)")
with open(TMP / "table.tsv", "w") as f:   # the summary table (bench_table)
    f.write(f"3 resident apps with a 10 Hz timer\tcontext switches per second, over {SECS} s\n")
    f.write(f"never frozen (`always_active = true`)\t{u:.2f}\n")
    f.write(f"suspended by drowsed\t{s:.2f}" + (" (none)" if s == 0 else f" ({u / s:.0f}x fewer)") + "\n")
    f.write(f"# Delivery of an event to a suspended app (the thaw included), {len(lat)} events: p50 {pct(50):.2f} ms, "
            f"p90 {pct(90):.2f} ms, p99 {pct(99):.2f} ms, max {lat[-1]:.2f} ms. Goals: at least 100x fewer switches "
            f"({'met' if s == 0 or u / s >= 100 else 'not met'}), p99 at most 5 ms ({'met' if pct(99) <= 5 else 'not met'}).\n")
EOF
BIN="$BIN" TMP="$TMP" SECONDS_PER_PHASE="$SECONDS_PER_PHASE" EVENTS="$EVENTS" \
RESIDENT="$DROWSE_ROOT/Tests/EndToEnd/resident_app.py" run_python "$TMP/bench.py"
bench_table bench-lifecycle.sh Suspension "sudo deploy/bench-lifecycle.sh $SECONDS_PER_PHASE $EVENTS" "$TMP/table.tsv"
