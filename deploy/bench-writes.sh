#!/usr/bin/env bash
# Bytes written: what drowsed makes its storage write (an SD card wears with every write), phase by
# phase, next to a shell baseline doing the same work in the same run, each on its own loop device.
#
#   sudo deploy/bench-writes.sh [--idle-minutes N] [--notifications N] [--markdown]
#       --idle-minutes N  how long the idle phase lasts (default 10; the goal is stated for an
#                         hour: 60 measures a whole one, shorter runs are scaled to an hour)
#       --notifications N how many notifications in each of the two notification phases (default 1000)
#       --markdown        also write the table and this command into docs/benchmarks.md
#                         (replacing only its section, "Bytes written")
#
# Setup: two ext4 images of 256 MiB in the temp dir (mkfs.ext4 with the inode tables and the
# journal initialised at once, so no background initialisation writes during the run), each on a
# loop device and mounted: A holds drowsed's state_dir and its download's destination, B the
# baseline's files. On 127.0.0.1: a private mosquitto and a private nginx (a 64 MiB file and a
# 1 KiB one). drowsed (stderr through a pipe, as under systemd, where journald writes the logs;
# its log lines are counted per phase) with three apps: "notify" (notification handler /bin/true),
# "fetcher" (fetch handler: curl of the 1 KiB file to /dev/null) and "dl" (a transfers events
# handler /bin/true), [notifications] max_per_hour = 10000 so nothing is deferred.
#
# Phases, one after the other; each starts and ends with `sync -f` on both mounts, and its figures
# are the differences of the counters between the two:
#   burst       1000 notifications (--notifications) to "notify" published back to back (QoS 1), until drowsed ran
#               the 1000 handlers; baseline: `mosquitto_sub -q 1 | xargs` on the same topic,
#               appending a line per message to a file on B
#   one-by-one  1000 notifications, each published once the one before was handled; the same baseline
#   fetch       100 × `drowse fetch fetcher`; baseline: a shell loop, curl of the same file to
#               /dev/null, then a log line on B
#   download    64 MiB through `drowse transfer download --to A/file`, until `drowse transfer wait`;
#               baseline: `curl -o B/file`
#   idle        N minutes with MQTT connected, nothing happening (30 s after the download);
#               baseline: `mosquitto_sub | xargs` connected, its log file on B
# Figures: "to the device" = sectors written (field 7 of /sys/block/loopN/stat) × 512: data,
# metadata and the ext4 journal, what the card would receive; write_bytes = /proc/PID/io of
# drowsed (its handlers and its spawn helper are its children: what they wrote counts once
# reaped), of xargs (with the processes it started), or of the shell that ran curl.
# Goals (printed met or not): 0 bytes in an idle hour; at most 12 KiB to the device per
# notification handled, in a burst and one at a time; at most 1.02× the file's bytes for a download.
#
# Needs root (loop devices, mounts; it runs in a mount namespace of its own); installs mosquitto, mosquitto-clients, nginx, curl, python3 and
# e2fsprogs when missing. Unmounts, detaches and stops everything it started on every exit,
# Ctrl-C included.
# Env: DROWSE_BIN_DIR  binaries to use instead of the release build
#      KEEP=1          keep the temp dir (logs, drowsed's state.db) and print where it is
#      TRACE=1         also strace drowsed's writes and syncs in each phase (which slows it down) and
#                      print, per phase and per unit, the bytes written and the syncs per file on A,
#                      and the WAL's frames (pages) and commits, with the table or index of each page
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"

ARGS=("$@")
usage() { sed -n '5,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
IDLE_MINUTES=10
N_NOTIFY=1000
MARKDOWN=
while [ $# -gt 0 ]; do
    case "$1" in
        --idle-minutes) IDLE_MINUTES=${2:-}; shift 2 ;;
        --idle-minutes=*) IDLE_MINUTES=${1#*=}; shift ;;
        --notifications) N_NOTIFY=${2:-}; shift 2 ;;
        --notifications=*) N_NOTIFY=${1#*=}; shift ;;
        --markdown) MARKDOWN=1; shift ;;
        -h|--help) usage ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
case "$IDLE_MINUTES" in ''|*[!0-9]*|0) die "--idle-minutes must be a whole number of minutes above 0, not '$IDLE_MINUTES'" ;; esac
case "$N_NOTIFY" in ''|*[!0-9]*|0) die "--notifications must be a whole number above 0, not '$N_NOTIFY'" ;; esac
[ "$N_NOTIFY" -le 5000 ] || die "--notifications: at most 5000 (both phases together within max_per_hour = 10000)"
[ "$(id -u)" -eq 0 ] || die "needs root: it makes loop devices and mounts them (run it with sudo)"
# In a mount namespace of its own: a namespace another program makes meanwhile (`ip netns exec`)
# would copy the mounts and keep the loop devices busy after the cleanup.
if [ -z "${DROWSE_BENCH_WRITES_NS:-}" ]; then
    need_packages util-linux
    DROWSE_BENCH_WRITES_NS=1 exec unshare --mount --propagation private "$0" "${ARGS[@]}"
fi
COMMAND="sudo deploy/bench-writes.sh --idle-minutes $IDLE_MINUTES"
[ "$N_NOTIFY" -eq 1000 ] || COMMAND+=" --notifications $N_NOTIFY"
COMMAND+="${MARKDOWN:+ --markdown}"
N_FETCH=100
DL_MIB=64
HELPER=$DROWSE_ROOT/deploy/bench-writes.py

need_packages mosquitto mosquitto-clients curl python3 e2fsprogs util-linux
[ "${TRACE:-}" != 1 ] || need_packages strace sqlite3
need_nginx
release_binaries   # sets BIN

# ---------------------------------------------------------------------------- temp dir, cleanup
TMP=$(mktemp -d /tmp/drowse-bench-writes.XXXXXX)
chmod 755 "$TMP"
BROKER_PID='' NGINX_PID='' DROWSED_PID='' BASE_PID='' LOOP_A='' LOOP_B='' TRACE_PID='' TRACED=''
cleanup() {
    trap - EXIT INT TERM
    stop_pid "$TRACE_PID"
    [ -n "$BASE_PID" ] && kill -TERM -- "-$BASE_PID" 2>/dev/null || true
    stop_pid "$DROWSED_PID" 35
    stop_pid "$NGINX_PID"
    stop_pid "$BROKER_PID"
    local m
    for m in "$TMP/a" "$TMP/b"; do
        mountpoint -q "$m" 2>/dev/null && { umount "$m" || umount -l "$m" || true; }
    done
    [ -n "$LOOP_A" ] && { losetup -d "$LOOP_A" || true; }
    [ -n "$LOOP_B" ] && { losetup -d "$LOOP_B" || true; }
    if [ "${KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------- the two devices
# make_device NAME: an ext4 image TMP/NAME.img on a loop device mounted on TMP/NAME; prints the device.
make_device() {
    local img=$TMP/$1.img dev
    truncate -s 256M "$img"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img"
    dev=$(losetup --find --show "$img")
    mkdir -p "$TMP/$1"
    mount -t ext4 "$dev" "$TMP/$1"
    echo "$dev"
}
LOOP_A=$(make_device a)
LOOP_B=$(make_device b)
A=$TMP/a B=$TMP/b

# counters MOUNT DEV: "BYTES WRITE_REQUESTS FLUSHES" of DEV after `sync -f` on MOUNT (fields 7, 5
# and 16 of its stat file; kernels before 5.5 have no field 16: no flushes shown).
counters() {
    sync -f "$1"
    awk '{ print $7 * 512, $5, ($16 == "" ? 0 : $16) }' "/sys/block/${2#/dev/}/stat"
}
# write_bytes PID: /proc/PID/io's write_bytes.
write_bytes() { awk '$1 == "write_bytes:" { print $2 }' "/proc/$1/io"; }

# ---------------------------------------------------------------------------- nginx, mosquitto
mkdir -p "$TMP/www" "$TMP/nginx/tmp" "$TMP/apps.d"
head -c $((DL_MIB * 1024 * 1024)) /dev/urandom >"$TMP/www/big.bin"
head -c 1024 /dev/urandom >"$TMP/www/small.bin"
HTTP_PORT=$(free_port)
cat >"$TMP/nginx/nginx.conf" <<EOF
# Written by deploy/bench-writes.sh: loopback only, serves $TMP/www.
user root;
daemon off;
master_process on;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    default_type application/octet-stream;
    types { }
    server { listen 127.0.0.1:$HTTP_PORT; location / { root $TMP/www; } }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" 2>>"$TMP/nginx/stderr" &
NGINX_PID=$!
wait_until 10 port_in_use "$HTTP_PORT" || { cat "$TMP/nginx/stderr" "$TMP/nginx/error.log" >&2; die "nginx did not start"; }
BIG_URL=http://127.0.0.1:$HTTP_PORT/big.bin
SMALL_URL=http://127.0.0.1:$HTTP_PORT/small.bin

PORT=$(free_port)
start_broker "$TMP/mqtt" "$PORT"

# ---------------------------------------------------------------------------- drowsed
DEVICE=bench
cat >"$TMP/drowse.toml" <<EOF
device_id = "$DEVICE"
state_dir = "$A/state"
apps_dir = "$TMP/apps.d"
socket = "$TMP/drowse.sock"

[mqtt]
url = "mqtt://127.0.0.1:$PORT"

[notifications]
max_per_hour = 10000
EOF
printf 'id = "notify"\n[notification]\ncommand = ["/bin/true"]\n' >"$TMP/apps.d/notify.toml"
printf 'id = "fetcher"\n[fetch]\ncommand = ["curl", "-sf", "-o", "/dev/null", "%s"]\nminimum_interval = "24h"\n' \
    "$SMALL_URL" >"$TMP/apps.d/fetcher.toml"
printf 'id = "dl"\n[transfers]\nevents_command = ["/bin/true"]\n' >"$TMP/apps.d/dl.toml"
DROWSE=("$BIN/drowse" --socket "$TMP/drowse.sock")
# stderr through a pipe, as to journald under systemd: the log's writes are not drowsed's.
"$BIN/drowsed" --config "$TMP/drowse.toml" 2> >(cat >>"$TMP/drowsed.log") &
DROWSED_PID=$!
mqtt_connected() {
    "${DROWSE[@]}" status --json 2>/dev/null |
        python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["mqtt"]["connected"] else 1)' 2>/dev/null
}
wait_until 20 mqtt_connected || { tail -n 20 "$TMP/drowsed.log" >&2; die "drowsed did not connect to the broker"; }

# ---------------------------------------------------------------------------- phases
RESULTS=$TMP/results.txt
: >"$RESULTS"
db_size() { cat "$A/state/state.db" "$A/state/state.db-wal" 2>/dev/null | wc -c; }
log_lines() { wc -l <"$TMP/drowsed.log"; }
# begin: counters at the start of a phase. end PHASE UNITS [BASE_DEV0 BASE_WB]: one line of RESULTS.
begin() {
    read -r A_DEV0 A_IO0 A_FL0 < <(counters "$A" "$LOOP_A")
    read -r B_DEV0 B_IO0 B_FL0 < <(counters "$B" "$LOOP_B")
    A_WB0=$(write_bytes "$DROWSED_PID")
    DB0=$(db_size)
    LOG0=$(log_lines)
    if [ "${TRACE:-}" = 1 ]; then
        strace -f -qq -y -xx -s 24 -e trace=write,pwrite64,writev,pwritev,fsync,fdatasync,sync_file_range,rename,unlink,ftruncate \
            -o "$TMP/trace.txt" -p "$DROWSED_PID" 2>/dev/null &
        TRACE_PID=$!
        sleep 1   # attached to every thread
    fi
}
# end PHASE UNITS BASE_WRITE_BYTES
end() {
    local a_dev a_io a_fl b_dev b_io b_fl a_wb
    if [ -n "$TRACE_PID" ]; then
        kill -INT "$TRACE_PID" 2>/dev/null || true
        wait "$TRACE_PID" 2>/dev/null || true
        TRACE_PID=''
        TRACED=1
    fi
    a_wb=$(write_bytes "$DROWSED_PID")
    read -r a_dev a_io a_fl < <(counters "$A" "$LOOP_A")
    read -r b_dev b_io b_fl < <(counters "$B" "$LOOP_B")
    echo "$1 $2 dev=$((a_dev - A_DEV0)) wb=$((a_wb - A_WB0)) wios=$((a_io - A_IO0)) flush=$((a_fl - A_FL0))" \
         "dbgrow=$(( $(db_size) - DB0 )) loglines=$(( $(log_lines) - LOG0 ))" \
         "bdev=$((b_dev - B_DEV0)) bwb=$3 bwios=$((b_io - B_IO0)) bflush=$((b_fl - B_FL0))" >>"$RESULTS"
    if [ -n "$TRACED" ]; then
        mv "$TMP/trace.txt" "$TMP/trace-$1.txt"
        echo "$1 $2" >>"$TMP/traced.txt"
        TRACED=''
    fi
    say "$(tail -n 1 "$RESULTS")"
}

# The notification baseline: mosquitto_sub | xargs appending "<time> <message>" to LOG (on B).
# Sets BASE_PID (its process group) and XARGS_PID.
start_baseline() {
    local topic=$1 log=$2
    : >"$log"
    setsid bash -c 'mosquitto_sub -h 127.0.0.1 -p "$1" -q 1 -t "$2" |
        xargs -d "\n" -n 1 sh -c '\''printf "%s %s\n" "$(date +%s.%N)" "$1" >>"$0"'\'' "$3" &
        echo $! >"$4"; wait' _ "$PORT" "$topic" "$log" "$TMP/xargs.pid" &
    BASE_PID=$!
    wait_until 10 test -s "$TMP/xargs.pid" || die "the baseline did not start"
    XARGS_PID=$(cat "$TMP/xargs.pid")
    rm -f "$TMP/xargs.pid"
}
stop_baseline() {
    kill -TERM -- "-$BASE_PID" 2>/dev/null || true
    wait "$BASE_PID" 2>/dev/null || true
    BASE_PID=''
}
lines_at_least() { [ "$(wc -l <"$2")" -ge "$1" ]; }
runs() { python3 "$HELPER" runs "$TMP/drowse.sock" "$@"; }

# notifications NAME: the burst or one at a time, with the baseline listening on the same topic.
SEQ=0
notifications() {
    local name=$1 topic="drowse/$DEVICE/apps/notify/notify" log=$B/notify-$1.log r0 x0
    start_baseline "$topic" "$log"
    # Warm-up, until both have handled one: the baseline's SUBSCRIBE is in place.
    r0=$(runs notify notification)
    local ok=''
    for _ in $(seq 1 40); do
        python3 "$HELPER" publish "$PORT" "$topic" 1 $((SEQ++))
        sleep 0.25
        if [ "$(runs notify notification)" -gt "$r0" ] && [ -s "$log" ]; then ok=1; break; fi
    done
    [ -n "$ok" ] || die "the warm-up notification did not reach both drowsed and the baseline"
    sleep 1
    local base_lines r1
    base_lines=$(wc -l <"$log")
    r1=$(runs notify notification)
    begin
    x0=$(write_bytes "$XARGS_PID")
    say "$name: $N_NOTIFY notifications"
    if [ "$name" = burst ]; then
        python3 "$HELPER" publish "$PORT" "$topic" "$N_NOTIFY" "$SEQ"
        python3 "$HELPER" wait-runs "$TMP/drowse.sock" notify notification $((r1 + N_NOTIFY)) 600 ||
            die "drowsed did not handle the $N_NOTIFY notifications within 10 minutes"
    else
        python3 "$HELPER" one-by-one "$PORT" "$topic" "$N_NOTIFY" "$SEQ" "$TMP/drowse.sock" notify
    fi
    SEQ=$((SEQ + N_NOTIFY))
    wait_until 120 lines_at_least $((base_lines + N_NOTIFY)) "$log" || die "the baseline did not log every notification"
    sleep 0.5   # its last handlers reaped
    end "$name" "$N_NOTIFY" $(( $(write_bytes "$XARGS_PID") - x0 ))
    stop_baseline
}

fetches() {
    local r0 i
    r0=$(runs fetcher fetch)
    "${DROWSE[@]}" fetch fetcher >/dev/null   # warm-up: the app's first run
    begin
    say "fetch: $N_FETCH × drowse fetch"
    for i in $(seq 1 "$N_FETCH"); do
        "${DROWSE[@]}" fetch fetcher >/dev/null || die "drowse fetch fetcher failed (run $i)"
    done
    # The baseline: the same handler from a shell loop, a log line per run (on B).
    local bwb
    bwb=$(bash -c 'for i in $(seq 1 "$1"); do curl -sf -o /dev/null "$2"; echo "$(date +%s.%N) fetch $i $?" >>"$3"; done
                   awk '\''$1 == "write_bytes:" { print $2 }'\'' /proc/$$/io' _ "$N_FETCH" "$SMALL_URL" "$B/fetch.log")
    end fetch "$N_FETCH" "$bwb"
    [ "$(runs fetcher fetch)" -ge $((r0 + N_FETCH + 1)) ] || die "drowsed did not run every fetch"
}

download() {
    local id bwb size=$((DL_MIB * 1024 * 1024))
    begin
    say "download: $DL_MIB MiB through drowsed, then with curl -o"
    id=$("${DROWSE[@]}" transfer download "$BIG_URL" --app dl --to "$A/big.bin")
    "${DROWSE[@]}" transfer wait "$id" --timeout 600s >/dev/null || die "drowse transfer $id did not complete"
    [ "$(stat -c %s "$A/big.bin")" -eq "$size" ] || die "drowsed's download has the wrong size"
    bwb=$(bash -c 'curl -sf -o "$2" "$1"; awk '\''$1 == "write_bytes:" { print $2 }'\'' /proc/$$/io' _ "$BIG_URL" "$B/big.bin")
    [ "$(stat -c %s "$B/big.bin")" -eq "$size" ] || die "curl's download has the wrong size"
    sleep 2     # the events handler's run
    end download "$size" "$bwb"
}

idle() {
    start_baseline "drowse/$DEVICE/apps/nobody/notify" "$B/idle.log"
    say "idle: 30 s to settle, then $IDLE_MINUTES minutes"
    sleep 30
    begin
    local x0
    x0=$(write_bytes "$XARGS_PID")
    sleep $((IDLE_MINUTES * 60))
    end idle "$IDLE_MINUTES" $(( $(write_bytes "$XARGS_PID") - x0 ))
    mqtt_connected || say "warning: drowsed's MQTT connection was down at the end of the idle phase"
    stop_baseline
}

say "drowsed $("${DROWSE[@]}" --version 2>/dev/null || echo '?') from $BIN; state on $LOOP_A ($A), baseline on $LOOP_B ($B); $(uname -m), $(nproc) CPU(s)"
notifications burst
notifications one-by-one
fetches
download
idle

python3 "$HELPER" report "$RESULTS" "$IDLE_MINUTES" "$COMMAND" ${MARKDOWN:+"$DROWSE_ROOT/docs/benchmarks.md"}
if [ "${TRACE:-}" = 1 ]; then
    # Which table each page of state.db belongs to, to sum the WAL's frames by table (read once
    # all is measured: the reader writes state.db-shm).
    sqlite3 -readonly "$A/state/state.db" "SELECT name, pageno FROM dbstat" 2>/dev/null | tr '|' ' ' >"$TMP/pages.txt" || true
    echo
    while read -r phase units; do
        python3 "$HELPER" trace "$TMP/trace-$phase.txt" "$phase" "$A" "$TMP/pages.txt" "$units"
    done <"$TMP/traced.txt"
fi
[ -z "$MARKDOWN" ] || say "wrote the section \"Bytes written\" into docs/benchmarks.md"
