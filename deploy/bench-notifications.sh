#!/usr/bin/env bash
# Notification latency: from the moment a provider publishes a silent notification to the moment
# the app's handler starts, through drowsed, next to a shell baseline
# (`mosquitto_sub | xargs` starting the same handler), on loopback, in the same run.
#
#   deploy/bench-notifications.sh [N_FAST] [N_SLOW] [N_BURST] [--markdown]
#       N_FAST  notifications 30 ms apart (default 1000)
#       N_SLOW  notifications 1 s apart   (default 1000, i.e. ~17 minutes; e.g. 60 for a quick run)
#       N_BURST notifications published back to back, to 20 apps in turn (default 1000; 0: none).
#               The baseline is `mosquitto_sub | xargs -P 8` (drowsed runs at most 8 handlers at
#               once by default, [scheduler] max_concurrent_handlers): handlers started per second
#               and the time from the first publish until the last handler started. Then the
#               same burst to the durable floor (deploy/bench-floor.c, built here with cc and
#               libsqlite3) beside the same baseline: what a consumer that keeps drowsed's
#               promises (records committed before each start, ends committed, cgroup leaves,
#               payload and output on pipes) does in C with nothing else.
#       --markdown  also write the summary table and the command into docs/benchmarks.md (the
#               block of this HANDLER there only)
#
# Setup (everything on 127.0.0.1, in a temp dir):
#   - a private mosquitto on a free port;
#   - a private drowsed with two apps, "fast" and "slow", whose notification handler is the handler
#     below, and [notifications] max_per_hour = 10000 (the highest allowed) so nothing is deferred;
#   - the baseline: `mosquitto_sub -q 1 -t TOPIC | xargs -d '\n' -n 1 HANDLER OUT`, subscribed to the
#     same topic, so both get every message at the same moment (and share the CPU);
#   - the handler, the same for both (HANDLER=stamp or HANDLER=sh):
#       stamp (default): a 20-line C program, built here with cc, whose first call reads the clock:
#                        "handler start" is the moment the handler's process begins;
#       sh:              a shell script whose first line is `t=$(date +%s.%N)`: the start of a
#                        typical shell handler, plus the fork and exec of date;
#     either then takes the payload (stdin from drowsed, the argument from xargs) and appends
#     "<seq> <start>" to its file;
#   - the publisher: a small MQTT 3.1.1 client in python3 (stdlib only) on one persistent connection,
#     QoS 1, one notification every SPACING on a fixed schedule, each {"aps": {"content-available": 1},
#     "id", "seq", "t"} where t is the wall-clock time right before the PUBLISH is written to the socket.
# Latency = handler start - t. Each run also prints drowsed's start minus the baseline's for the
# same notification (both get it at the same moment): its percentiles leave out the stalls that
# hit both. Percentiles are nearest-rank; a notification whose handler never
# started counts as missing (and is left out of the percentiles). The line "floor" is the
# handler started by a minimal C posix_spawn loop (no MQTT at all): its own start, which no
# consumer avoids.
# "storage" is what drowsed pays and the baseline does not: an fdatasync of 4 KiB in the state
# folder, 200 times 30 ms apart (drowsed commits each record before its handler starts).
#
# Goals, printed met or not for each run: drowsed's p50 and p99 at or below the
# baseline's, and drowsed's p50 within 1 ms of the floor's. drowsed records each notification in
# state.db (WAL) before its handler starts; the baseline records nothing.
#
# Env: HANDLER         stamp (default) or sh
#      CC              the C compiler for the stamp handler and the floor (default: cc, else clang)
#      DROWSE_BIN_DIR  use the binaries there instead of the release build (built with
#                      `swift build -c release --static-swift-stdlib` when missing or older than Sources/)
#      KEEP=1          keep the temp dir (logs, raw timings) and print where it is
#      NO_FLOOR=1      the burst against drowsed only, not again against the durable floor (for
#                      a profile of drowsed's burst alone)
#      BURST_RUNS      bursts to run, each against drowsed then the floor (default 1): with more,
#                      the goal "drowsed's starts/s against xargs at 0.9 of the floor's or more"
#                      is read on the median of the runs' ratios
#      RELEASE_CODE_AFTER  drowsed's [lifecycle] release_code_after (default: drowsed's, 30 s); e.g.
#                      500ms with N_SLOW: each notification then finds drowsed's code given back
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

bench_markdown_args "$@"
set -- "${BENCH_ARGS[@]}"
N_FAST=${1:-1000}
N_SLOW=${2:-1000}
N_BURST=${3:-1000}
BURST_RUNS=${BURST_RUNS:-1}
case "$BURST_RUNS" in ''|*[!0-9]*|0) die "BURST_RUNS must be a whole number of 1 or more, not '$BURST_RUNS'" ;; esac
BURST_APPS=20
case "$N_FAST" in ''|*[!0-9]*) die "N_FAST must be a whole number, not '$N_FAST'" ;; esac
case "$N_SLOW" in ''|*[!0-9]*) die "N_SLOW must be a whole number, not '$N_SLOW'" ;; esac
case "$N_BURST" in ''|*[!0-9]*) die "N_BURST must be a whole number, not '$N_BURST'" ;; esac
[ "$N_FAST" -le 10000 ] && [ "$N_SLOW" -le 10000 ] && [ "$N_BURST" -le 10000 ] || die "at most 10000 per run (max_per_hour's limit)"
need_packages mosquitto mosquitto-clients python3

# ---------------------------------------------------------------------------- binaries
release_binaries   # sets BIN

# ---------------------------------------------------------------------------- temp dir, cleanup
TMP=$(mktemp -d /tmp/drowse-bench-notify.XXXXXX)
chmod 755 "$TMP"
BROKER_PID='' DROWSED_PID='' BASE_PID='' FLOOR_PID='' FLOOR_CGROUPS=-
cleanup() {
    [ -n "$BASE_PID" ] && kill -TERM -- "-$BASE_PID" 2>/dev/null || true
    [ -n "$FLOOR_PID" ] && kill -TERM -- "-$FLOOR_PID" 2>/dev/null || true
    if [ "$FLOOR_CGROUPS" != - ]; then
        rmdir "$FLOOR_CGROUPS"/burst* "$FLOOR_CGROUPS" 2>/dev/null || true
    fi
    stop_pid "$DROWSED_PID"
    stop_pid "$BROKER_PID"
    if [ "${KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(free_port)
DEVICE=bench
mkdir -p "$TMP/apps.d" "$TMP/state" "$TMP/out"

# ---------------------------------------------------------------------------- the handler
HANDLER=${HANDLER:-stamp}
CC=${CC:-$(command -v cc || command -v clang || true)}
[ -n "$CC" ] || die "a C compiler is needed for the stamp handler and the floor (cc, or the Swift toolchain's clang)"
case "$HANDLER" in
stamp)
    cat >"$TMP/stamp.c" <<'EOF'
/* stamp OUT [PAYLOAD]: appends "<seq> <start>" to OUT, where start is read before anything else
   and seq comes from the payload (the argument, else standard input). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static char buf[65536];
    const char *p = argc > 2 ? argv[2] : buf;
    if (argc <= 2) {
        size_t n = 0;
        ssize_t r;
        while (n < sizeof buf - 1 && (r = read(0, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
        buf[n] = 0;
    }
    const char *s = strstr(p, "\"seq\":");
    long seq = s ? strtol(s + 6, NULL, 10) : -999999;
    FILE *f = argc > 1 ? fopen(argv[1], "a") : NULL;
    if (!f) return 1;
    fprintf(f, "%ld %lld.%09ld\n", seq, (long long)ts.tv_sec, ts.tv_nsec);
    return fclose(f) == 0 ? 0 : 1;
}
EOF
    "$CC" -O2 -static -o "$TMP/handler" "$TMP/stamp.c" 2>/dev/null ||
        "$CC" -O2 -o "$TMP/handler" "$TMP/stamp.c" || die "cannot build the stamp handler with $CC"
    ;;
sh)
    cat >"$TMP/handler" <<'EOF'
#!/bin/sh
# handler OUT [PAYLOAD]: the time it started, then the payload's "seq", appended to OUT as "<seq> <start>".
t=$(date +%s.%N)
p=${2-$(cat)}
s=${p#*\"seq\":}
s=${s%%[,\}]*}
echo "$s $t" >> "$1"
EOF
    chmod 755 "$TMP/handler"
    ;;
*) die "HANDLER must be stamp or sh, not '$HANDLER'" ;;
esac

# The baseline: one subscriber, xargs starting one handler per line, one after the other (or up
# to PARALLEL at once: the burst).
cat >"$TMP/baseline.sh" <<'EOF'
#!/bin/sh
# baseline.sh PORT TOPIC OUT [PARALLEL]
mosquitto_sub -h 127.0.0.1 -p "$1" -q 1 -t "$2" | xargs -d '\n' -n 1 -P "${4:-1}" "${0%/*}/handler" "$3"
EOF
chmod 755 "$TMP/baseline.sh"

# ---------------------------------------------------------------------------- the publisher
cat >"$TMP/pub.py" <<'EOF'
"""pub.py PORT TOPICS N SPACING SENT_FILE [SEQ0]: N QoS 1 notifications on one connection, SPACING s
apart on a fixed schedule (0: back to back), to the comma-separated TOPICS in turn; writes
"<seq> <t>" per message to SENT_FILE. MQTT 3.1.1, stdlib only."""
import json, os, socket, struct, sys, threading, time

port, topic, n, spacing, sent_file = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
seq0 = int(sys.argv[6]) if len(sys.argv) > 6 else 0

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

def read_exact(sock, k):
    buf = b""
    while len(buf) < k:
        chunk = sock.recv(k - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf

def read_packet(sock):
    first = read_exact(sock, 1)[0]
    mult, length = 1, 0
    while True:
        b = read_exact(sock, 1)[0]
        length += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
    return first, read_exact(sock, length)

sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
client_id = f"bench-pub-{os.getpid()}"
sock.sendall(packet(0x10, mqtt_str("MQTT") + bytes([4, 0x02]) + struct.pack("!H", 60) + mqtt_str(client_id)))
first, body = read_packet(sock)
if first >> 4 != 2 or body[1] != 0:
    sys.exit(f"pub.py: CONNACK refused: {body!r}")

acked = 0
done = threading.Event()
def reader():
    global acked
    try:
        while acked < n:
            first, body = read_packet(sock)
            if first >> 4 == 4:
                acked += 1
    except Exception as e:
        print(f"pub.py: {e}", file=sys.stderr)
    done.set()
threading.Thread(target=reader, daemon=True).start()
if n == 0:
    done.set()

topics_b = [mqtt_str(t) for t in topic.split(",")]
sent = []
start = time.monotonic() + 0.2
for i in range(n):
    target = start + i * spacing
    delay = target - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    seq = seq0 + i
    pid = i % 65535 + 1
    t = time.time()
    payload = json.dumps({"aps": {"content-available": 1}, "id": f"b{seq}-{t:.6f}", "seq": seq, "t": t},
                         separators=(",", ":")).encode()
    sock.sendall(packet(0x32, topics_b[i % len(topics_b)] + struct.pack("!H", pid) + payload))
    sent.append(f"{seq} {t:.6f}\n")
if not done.wait(30 + n * 0.01):
    print(f"pub.py: only {acked} of {n} PUBACKs arrived", file=sys.stderr)
sock.sendall(b"\xe0\x00")
sock.close()
with open(sent_file, "a") as f:
    f.writelines(sent)
EOF

# ---------------------------------------------------------------------------- broker and drowsed
start_broker "$TMP/mqtt" "$PORT"
cat >"$TMP/drowse.toml" <<EOF
device_id = "$DEVICE"
state_dir = "$TMP/state"
apps_dir = "$TMP/apps.d"
socket = "$TMP/drowse.sock"

[mqtt]
url = "mqtt://127.0.0.1:$PORT"

[notifications]
max_per_hour = 10000
EOF
if [ -n "${RELEASE_CODE_AFTER:-}" ]; then
    printf '\n[lifecycle]\nrelease_code_after = "%s"\n' "$RELEASE_CODE_AFTER" >>"$TMP/drowse.toml"
fi
# The burst's 20 apps share one output file (the handler appends a line: O_APPEND).
for app in fast slow $(seq -f 'burst%02g' 0 $((BURST_APPS - 1))); do
    printf 'id = "%s"\n[notification]\ncommand = ["%s", "%s"]\n' \
        "$app" "$TMP/handler" "$TMP/out/drowse-${app%%[0-9]*}.txt" >"$TMP/apps.d/$app.toml"
done
"$BIN/drowsed" --config "$TMP/drowse.toml" 2>"$TMP/drowsed.log" &
DROWSED_PID=$!
mqtt_connected() {
    "$BIN/drowse" --socket "$TMP/drowse.sock" status --json 2>/dev/null |
        python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["mqtt"]["connected"] else 1)' 2>/dev/null
}
wait_until 20 mqtt_connected || { tail -n 20 "$TMP/drowsed.log" >&2; die "drowsed did not connect to the broker"; }

# ---------------------------------------------------------------------------- one run
# run NAME N SPACING: publishes N notifications to app NAME, with the baseline listening too.
run() {
    local name=$1 n=$2 spacing=$3
    local topic="drowse/$DEVICE/apps/$name/notify"
    local d_out="$TMP/out/drowse-$name.txt" b_out="$TMP/out/base-$name.txt" sent="$TMP/out/sent-$name.txt"
    : >"$d_out"; : >"$b_out"; : >"$sent"
    setsid "$TMP/baseline.sh" "$PORT" "$topic" "$b_out" &
    BASE_PID=$!
    # Warm-up (seq -1), until both have seen one: the baseline's SUBSCRIBE is in place.
    local ok=''
    for _ in $(seq 1 40); do
        python3 "$TMP/pub.py" "$PORT" "$topic" 1 0 /dev/null -1
        sleep 0.25
        if grep -q '^-1 ' "$d_out" && grep -q '^-1 ' "$b_out"; then ok=1; break; fi
    done
    [ -n "$ok" ] || die "the warm-up notification did not reach both handlers (see ${KEEP:+$TMP/}drowsed.log)"
    say "run '$name': $n notifications, ${spacing}s apart (about $(python3 -c "print(round($n * $spacing))") s)"
    python3 "$TMP/pub.py" "$PORT" "$topic" "$n" "$spacing" "$sent"
    # Wait for the stragglers (up to 30 s).
    wait_until 30 both_have $(( n + 1 )) "$d_out" "$b_out" || true
    stop_baseline
}

# cpu_ticks PID...: the user and system time those processes used so far, in clock ticks (their
# own threads, not their reaped children: a handler's time is the handler's, for both consumers).
cpu_ticks() {
    local pid total=0
    for pid in "$@"; do
        total=$(( total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
    done
    echo "$total"
}

# both_have N FILE1 FILE2: both files have N lines or more.
both_have() { [ "$(wc -l <"$2")" -ge "$1" ] && [ "$(wc -l <"$3")" -ge "$1" ]; }
stop_baseline() {
    kill -TERM -- "-$BASE_PID" 2>/dev/null || true
    wait "$BASE_PID" 2>/dev/null || true
    BASE_PID=''
}

# burst WHO N: N notifications back to back to the apps burst00..burst19 in turn; the baseline
# subscribes to all of them and runs up to 8 handlers at once. WHO is the consumer beside it:
#   drowse  drowsed (topics drowse/DEVICE/apps/burstNN/notify);
#   floor   the durable floor, deploy/bench-floor.c: each record committed before its handler
#           starts, the handler in its app's cgroup leaf (clone3) with its payload and output on
#           pipes, its end committed, 8 at once, in one C thread on one epoll. Its topics are not
#           drowsed's (floor/DEVICE/apps/burstNN/notify): drowsed sits idle meanwhile.
burst() {
    local who=$1 n=$2 i topics='' prefix=drowse
    [ "$who" = floor ] && prefix=floor
    local d_out="$TMP/out/$who-burst.txt" b_out="$TMP/out/base-$who-burst.txt" sent="$TMP/out/sent-$who-burst.txt"
    : >"$d_out"; : >"$b_out"; : >"$sent"
    for i in $(seq -f 'burst%02g' 0 $((BURST_APPS - 1))); do topics+=${topics:+,}$prefix/$DEVICE/apps/$i/notify; done
    setsid "$TMP/baseline.sh" "$PORT" "$prefix/$DEVICE/apps/+/notify" "$b_out" 8 &
    BASE_PID=$!
    if [ "$who" = floor ]; then
        rm -f "$TMP/state/floor.db"*
        setsid sh -c 'mosquitto_sub -h 127.0.0.1 -p "$1" -q 1 -v -t "$2" | "$3" "$4" "$5" 8 "$6" "$7"' sh \
            "$PORT" "$prefix/$DEVICE/apps/+/notify" "$TMP/bench-floor" "$TMP/state/floor.db" "$FLOOR_CGROUPS" \
            "$TMP/handler" "$d_out" &
        FLOOR_PID=$!
    fi
    # Warm-up: one notification per app (seq -1000 and up), until both ran all: the baseline's
    # SUBSCRIBE is in place and each app has run once (its cgroup exists).
    local ok=''
    for _ in $(seq 1 20); do
        : >"$d_out"; : >"$b_out"
        python3 "$TMP/pub.py" "$PORT" "$topics" "$BURST_APPS" 0 /dev/null -1000
        if wait_until 5 both_have "$BURST_APPS" "$d_out" "$b_out"; then ok=1; break; fi
    done
    [ -n "$ok" ] || die "the burst's warm-up did not reach both consumers ($who)"
    sleep 1
    : >"$d_out"; : >"$b_out"
    say "burst: $n notifications back to back to $BURST_APPS apps, $who beside the baseline"
    # What each consumer itself spends on the burst: drowsed with its spawn helper (or the floor
    # with its mosquitto_sub); the baseline's mosquitto_sub and xargs.
    local mine theirs d0 b0
    if [ "$who" = floor ]; then
        mine=$(pgrep -s "$FLOOR_PID" -x 'mosquitto_sub|bench-floor' | tr '\n' ' ')
    else
        mine="$DROWSED_PID $(pgrep -P "$DROWSED_PID" | tr '\n' ' ')"
    fi
    theirs=$(pgrep -s "$BASE_PID" -x 'mosquitto_sub|xargs' | tr '\n' ' ')
    # shellcheck disable=SC2086
    d0=$(cpu_ticks $mine); b0=$(cpu_ticks $theirs)
    python3 "$TMP/pub.py" "$PORT" "$topics" "$n" 0 "$sent"
    wait_until 120 both_have "$n" "$d_out" "$b_out" || true
    # Until the last ends are recorded: the consumer is idle again.
    sleep 1
    # shellcheck disable=SC2086
    echo "$(( $(cpu_ticks $mine) - d0 )) $(( $(cpu_ticks $theirs) - b0 )) $(getconf CLK_TCK)" >"$TMP/out/$who-burst-cpu.txt"
    stop_baseline
    if [ "$who" = floor ]; then
        kill -TERM -- "-$FLOOR_PID" 2>/dev/null || true
        wait "$FLOOR_PID" 2>/dev/null || true
        FLOOR_PID=''
        return
    fi
    # What the burst left behind in drowsed, once its last handler has been reaped.
    sleep 5
    awk '$1 == "Pss:" || $1 == "Private_Dirty:" { printf "%s %s\n", $1, $2 }' "/proc/$DROWSED_PID/smaps_rollup" \
        >"$TMP/out/burst-memory.txt" 2>/dev/null || true
}

# The durable floor's cgroup leaves: a folder beside this shell's own cgroup on the cgroup2 mount,
# when it can be made (as root); else "-", and the floor starts its handlers without one.
floor_cgroups() {
    local mount own dir
    mount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    dir="$mount${own%/}/drowse-bench-floor.$$"
    if [ -n "$mount" ] && [ -n "$own" ] && mkdir "$dir" 2>/dev/null; then echo "$dir"; else echo -; fi
}

say "drowsed $("$BIN/drowse" --version 2>/dev/null || echo '?') from $BIN; mosquitto on 127.0.0.1:$PORT; $(nproc) CPU(s); HANDLER=$HANDLER"
[ "$N_FAST" -gt 0 ] && run fast "$N_FAST" 0.030
[ "$N_SLOW" -gt 0 ] && run slow "$N_SLOW" 1
# keep_burst WHO R: the burst's files, kept as run R's.
keep_burst() {
    local f
    for f in "$1-burst" "base-$1-burst" "sent-$1-burst" "$1-burst-cpu"; do
        [ -e "$TMP/out/$f.txt" ] && mv "$TMP/out/$f.txt" "$TMP/out/$f.$2.txt"
    done
    return 0
}
if [ "$N_BURST" -gt 0 ]; then
    if [ -z "${NO_FLOOR:-}" ]; then
        "$CC" -O2 -o "$TMP/bench-floor" deploy/bench-floor.c -lsqlite3 -lpthread ||
            die "cannot build deploy/bench-floor.c with $CC (libsqlite3-dev)"
        FLOOR_CGROUPS=$(floor_cgroups)
    fi
    for r in $(seq 1 "$BURST_RUNS"); do
        burst drowse "$N_BURST"
        keep_burst drowse "$r"
        if [ -z "${NO_FLOOR:-}" ]; then
            burst floor "$N_BURST"
            keep_burst floor "$r"
        fi
    done
fi

# The floor: the handler started by a minimal C loop (clock, posix_spawn with the payload as its
# argument, wait), 200 times 30 ms apart: what starting the handler costs any consumer.
say "floor: the handler started directly, 200 times"
cat >"$TMP/spawner.c" <<'EOF'
/* spawner HANDLER OUT SENT N: starts HANDLER OUT {"seq":i} N times, 30 ms apart; SENT gets "<i> <t>". */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    FILE *sent = fopen(argv[3], "w");
    if (!sent) return 1;
    for (int i = 0, n = atoi(argv[4]); i < n; i++) {
        char payload[64];
        snprintf(payload, sizeof payload, "{\"seq\":%d}", i);
        char *args[] = {argv[1], argv[2], payload, NULL};
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        pid_t pid;
        int status;
        if (posix_spawn(&pid, argv[1], NULL, NULL, args, environ) == 0) waitpid(pid, &status, 0);
        fprintf(sent, "%d %lld.%09ld\n", i, (long long)ts.tv_sec, ts.tv_nsec);
        usleep(30000);
    }
    return fclose(sent) == 0 ? 0 : 1;
}
EOF
"$CC" -O2 -o "$TMP/spawner" "$TMP/spawner.c" || die "cannot build the floor's spawner with $CC"
"$TMP/spawner" "$TMP/handler" "$TMP/out/floor.txt" "$TMP/out/sent-floor.txt" 200

# The storage's part: drowsed commits each notification's record (an fdatasync of the WAL) before
# its handler starts, which the baseline does not. 200 fdatasyncs of a 4 KiB write, 30 ms apart,
# in the folder that holds state.db: what that commit costs on this disk.
say "storage: 200 fdatasyncs of 4 KiB in the state folder, 30 ms apart"
python3 - "$TMP/state/fsync-probe" "$TMP/out/fsync.txt" 200 <<'EOF'
import os, sys, time
path, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
with open(out, "w") as f:
    for i in range(n):
        os.pwrite(fd, b"x" * 4096, (i % 64) * 4096)
        t = time.perf_counter()
        os.fdatasync(fd)
        f.write(f"{(time.perf_counter() - t) * 1000:.4f}\n")
        time.sleep(0.03)
os.close(fd)
os.unlink(path)
EOF

# ---------------------------------------------------------------------------- results
python3 - "$TMP/out" "$N_FAST" "$N_SLOW" "$N_BURST" "$BURST_RUNS" <<'EOF'
import math, os, sys
out, n_fast, n_slow, n_burst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
burst_runs = int(sys.argv[5])
import statistics
table = [["run", "consumer", "handled", "missing", "p50 ms", "p99 ms", "max ms"]]   # the summary (bench_table)
notes = []

def read(path):
    d = {}
    try:
        for line in open(path):
            parts = line.split()
            if len(parts) == 2 and parts[0].lstrip("-").isdigit():
                d.setdefault(int(parts[0]), []).append(float(parts[1]))
    except FileNotFoundError:
        pass
    return d

def pct(xs, p):
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]

floor_sent = {s: ts[0] for s, ts in read(f"{out}/sent-floor.txt").items()}
floor_starts = read(f"{out}/floor.txt")
floor_lat = sorted((min(floor_starts[s]) - t) * 1000 for s, t in floor_sent.items() if s in floor_starts)

print()
print(f"{'run':<22}{'consumer':<26}{'handled':>9}{'missing':>9}{'twice':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
ratios = []
for name, n, spacing in (("fast", n_fast, "30 ms"), ("slow", n_slow, "1 s")):
    if n == 0:
        continue
    sent = {s: ts[0] for s, ts in read(f"{out}/sent-{name}.txt").items() if s >= 0}
    p99, p50, first = {}, {}, {}
    for who, label in (("drowse", "drowsed"), ("base", "mosquitto_sub | xargs")):
        starts = read(f"{out}/{who}-{name}.txt")
        first[who] = {s: min(ts) for s, ts in starts.items() if s in sent}
        lat = sorted((min(starts[s]) - t) * 1000 for s, t in sent.items() if s in starts)
        twice = sum(1 for s, ts in starts.items() if s >= 0 and len(ts) > 1)
        missing = len(sent) - len(lat)
        if lat:
            p99[who], p50[who] = pct(lat, 99), pct(lat, 50)
            print(f"{(name + f' ({n} x {spacing})') if who == 'drowse' else '':<22}{label:<26}{len(lat):>9}{missing:>9}"
                  f"{twice:>7}{pct(lat, 50):>9.1f}{pct(lat, 99):>9.1f}{lat[-1]:>9.1f}")
            table.append([f"{n} at {spacing}", label, str(len(lat)), str(missing),
                          f"{pct(lat, 50):.1f}", f"{pct(lat, 99):.1f}", f"{lat[-1]:.1f}"])
        else:
            print(f"{name:<22}{label:<26}{0:>9}{missing:>9}{twice:>7}{'-':>9}{'-':>9}{'-':>9}")
    if "drowse" in p99 and "base" in p99 and p99["base"] > 0:
        r = p99["drowse"] / p99["base"]
        ratios.append(r)
        goals = [("p50 <= baseline", p50["drowse"] <= p50["base"]), ("p99 <= baseline", p99["drowse"] <= p99["base"])]
        if floor_lat:
            goals.append(("p50 <= floor + 1 ms", p50["drowse"] <= pct(floor_lat, 50) + 1.0))
        print(f"{'':<22}p99 drowsed / baseline = {r:.2f}; goals: "
              + ", ".join(f"{g} {'met' if ok else 'NOT met'}" for g, ok in goals))
        notes.append(f"{n} at {spacing}, drowsed's goals: " + ", ".join(f"{g} {'met' if ok else 'not met'}" for g, ok in goals) + ".")
        # Both consumers get each notification at the same moment: the difference per
        # notification leaves out what slowed both (the broker, the machine), which on a busy
        # machine decides the tails of each.
        paired = sorted((first["drowse"][s] - first["base"][s]) * 1000 for s in sent if s in first["drowse"] and s in first["base"])
        if paired:
            print(f"{'':<22}drowsed - baseline, per notification: p50 {pct(paired, 50):.2f}, p90 {pct(paired, 90):.2f}, "
                  f"p99 {pct(paired, 99):.2f} ms")
            notes.append(f"{n} at {spacing}, drowsed minus the baseline for the same notification: p50 {pct(paired, 50):.2f}, "
                         f"p90 {pct(paired, 90):.2f}, p99 {pct(paired, 99):.2f} ms.")
if floor_lat:
    print(f"{'floor (200 x 30 ms)':<22}{'handler spawned directly':<26}{len(floor_lat):>9}{len(floor_sent) - len(floor_lat):>9}{0:>7}"
          f"{pct(floor_lat, 50):>9.1f}{pct(floor_lat, 99):>9.1f}{floor_lat[-1]:>9.1f}")
    table.append(["200 at 30 ms (floor)", "a C posix_spawn loop", str(len(floor_lat)), str(len(floor_sent) - len(floor_lat)),
                  f"{pct(floor_lat, 50):.1f}", f"{pct(floor_lat, 99):.1f}", f"{floor_lat[-1]:.1f}"])
if os.path.exists(f"{out}/fsync.txt"):
    syncs = sorted(float(l) for l in open(f"{out}/fsync.txt") if l.strip())
    if syncs:
        print(f"storage: an fdatasync of 4 KiB in the state folder (each record's commit before its handler starts): "
              f"p50 {pct(syncs, 50):.2f}, p99 {pct(syncs, 99):.2f}, max {syncs[-1]:.2f} ms ({len(syncs)} x 30 ms)")
        notes.append(f"An fdatasync of 4 KiB in the state folder (each record's commit before its handler starts): "
                     f"p50 {pct(syncs, 50):.2f}, p99 {pct(syncs, 99):.2f}, max {syncs[-1]:.2f} ms.")
burst_ratios = []   # per burst run: (drowsed's starts/s against its xargs, the floor's against its xargs)
for r in range(1, burst_runs + 1) if n_burst else ():
    rates = {}
    run_note = f" (run {r} of {burst_runs})" if burst_runs > 1 else ""
    for who, name in (("drowse", "drowsed (8 at once)"), ("floor", "durable floor in C (8 at once)")):
        sent = {s: ts[0] for s, ts in read(f"{out}/sent-{who}-burst.{r}.txt").items() if s >= 0}
        if not sent:
            continue
        t0 = min(sent.values())
        print()
        print(f"burst{run_note}: {n_burst} notifications back to back to 20 apps, {name} beside the baseline "
              f"(publishing took {(max(sent.values()) - t0) * 1000:.0f} ms)")
        print(f"{'consumer':<34}{'handled':>9}{'missing':>9}{'twice':>7}{'first ms':>10}{'last ms':>10}{'starts/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
        for f, label in ((who, name), (f"base-{who}", "mosquitto_sub | xargs -P 8")):
            starts = read(f"{out}/{f}-burst.{r}.txt")
            got = {s: min(ts) for s, ts in starts.items() if s in sent}
            twice = sum(1 for s, ts in starts.items() if s >= 0 and len(ts) > 1)
            if not got:
                print(f"{label:<34}{0:>9}{len(sent):>9}{twice:>7}")
                continue
            first, last = min(got.values()) - t0, max(got.values()) - t0
            lat = sorted((got[s] - sent[s]) * 1000 for s in got)
            rates[f] = len(got) / last
            print(f"{label:<34}{len(got):>9}{len(sent) - len(got):>9}{twice:>7}{first * 1000:>10.1f}{last * 1000:>10.1f}"
                  f"{len(got) / last:>10.0f}{pct(lat, 50):>9.1f}{pct(lat, 99):>9.1f}")
            notes.append(f"A burst of {n_burst} to 20 apps{run_note}, {label}{' beside ' + name if f.startswith('base') else ''}: "
                         f"{len(got)} handled, {len(got) / last:.0f} handlers started per second, the last {last:.2f} s "
                         f"after the first publish, p99 start latency {pct(lat, 99):.0f} ms.")
        print("first/last: from the first publish until the first/last handler started; starts/s: handled / last")
        if os.path.exists(f"{out}/{who}-burst-cpu.{r}.txt"):
            d, b, hz = (int(x) for x in open(f"{out}/{who}-burst-cpu.{r}.txt").read().split())
            own = "drowsed with its spawn helper" if who == "drowse" else "the floor with its mosquitto_sub"
            line = (f"CPU per notification, the consumer's own (not its handlers'): {own} "
                    f"{d * 1000 / hz / n_burst:.2f} ms, mosquitto_sub and xargs {b * 1000 / hz / n_burst:.2f} ms")
            print(line)
            notes.append(line + ".")
    if rates.get("base-drowse") and rates.get("base-floor") and "drowse" in rates and "floor" in rates:
        burst_ratios.append((rates['drowse'] / rates['base-drowse'], rates['floor'] / rates['base-floor']))
        line = (f"starts/s against the baseline in the same burst{run_note}: drowsed {burst_ratios[-1][0]:.2f}x, "
                f"the durable floor {burst_ratios[-1][1]:.2f}x")
        print(line)
        notes.append(line + ".")
if burst_ratios:
    # The machine's speed wanders between bursts; each ratio is against the xargs that shared the
    # cores with it, and the goal is read on the median of the runs.
    d, f = statistics.median(x for x, _ in burst_ratios), statistics.median(y for _, y in burst_ratios)
    line = (f"median of {len(burst_ratios)} burst run(s), starts/s against xargs: drowsed {d:.2f}x, the durable floor {f:.2f}x; "
            f"goal, drowsed at 0.9 of the floor's or more: {'met' if d >= 0.9 * f else 'not met'} ({d / f:.2f})")
    print(line)
    notes.append(line + ".")
if n_burst:
    mem = dict(l.split() for l in open(f"{out}/burst-memory.txt")) if os.path.exists(f"{out}/burst-memory.txt") else {}
    if mem:
        print(f"drowsed 5 s after the burst: private dirty {int(mem['Private_Dirty:']) / 1024:.1f} MiB, PSS {int(mem['Pss:']) / 1024:.1f} MiB")
print()
with open(f"{out}/table.tsv", "w") as f:
    f.write("".join("\t".join(r) + "\n" for r in table) + "".join(f"# {n}\n" for n in notes))
sys.exit(0)
EOF
# The command as run: with its real-time priority (chrt) and handler, when they are not the defaults.
command="deploy/bench-notifications.sh $N_FAST $N_SLOW $N_BURST"
prio=$(chrt -p $$ 2>/dev/null | sed -n 's/.*priority: *\([0-9]*\)$/\1/p' | tail -n 1)
chrt -p $$ 2>/dev/null | grep -q SCHED_FIFO && command="chrt -f $prio $command"
[ "$HANDLER" = stamp ] || command="HANDLER=$HANDLER $command"
[ "$BURST_RUNS" = 1 ] || command="BURST_RUNS=$BURST_RUNS $command"
key=bench-notifications.sh
[ "$HANDLER" = stamp ] || key="$key HANDLER=$HANDLER"
bench_table "$key" "Notification latency" "$command" "$TMP/out/table.tsv"
