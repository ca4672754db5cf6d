#!/usr/bin/env bash
# Lays out the release binary so that the code an idle drowsed runs sits together:
#
#   deploy/order-text.sh            build the release (if stale), profile it, relink it in place
#
# Why: the kernel maps a program's code in 64 KiB runs around every page it touches
# (fault-around), and the code drowsed runs to start, connect and serve the API (about 1.3 MB)
# lies scattered over the whole 13 MB of text. Idle, nearly all of it was resident: 12 MB of
# the 20 MB PSS. Packed together, a few MB of it are.
#
# How: the release is built with one section per function (DROWSE_RELEASE_FLAGS). drowsed runs
# here under valgrind's callgrind, which lists every function it executes, for a short life on
# loopback: start with two apps and a private broker, the API (status, apps, metrics), a fetch
# with its handler, a notification, a graceful stop. Those functions' sections, in that order,
# become the linker's --section-ordering-file, and `swift build` relinks (the objects stay).
# Code that only runs later (a download, a resident app) faults in as before.
#
# Without valgrind (or when the profile fails) it says so and leaves the binary as it is:
# correct, only laid out by the compiler. deploy/build-deb.sh installs valgrind and runs this;
# deploy/install.sh runs it when valgrind is there. Env: ORDER_FILE  keep the ordering file
# there (default: a temporary file, removed).
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

release_binaries
command -v valgrind >/dev/null 2>&1 ||
    { say "no valgrind (apt-get install valgrind): the release binary keeps the compiler's layout"; exit 0; }
command -v mosquitto >/dev/null 2>&1 ||
    { say "no mosquitto for the profile's broker: the release binary keeps the compiler's layout"; exit 0; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/drowse-order.XXXXXX")
BROKER_PID=
DAEMON_PID=
cleanup() {
    stop_pid "$DAEMON_PID" 60
    stop_pid "$BROKER_PID"
    rm -rf "$TMP"
}
trap cleanup EXIT

# valgrind 3.19 cannot read the DWARF 5 that swiftc writes: profile a copy without debug info,
# run under the daemon's name.
strip --strip-debug -o "$TMP/drowse" "$BIN/drowse"
ln -s drowse "$TMP/drowsed"

PORT=$(free_port)
start_broker "$TMP/broker" "$PORT"
write_quiet_agent "$TMP" "$PORT" order
cat >>"$TMP/drowse.toml" <<EOF
[metrics]
textfile = "$TMP/metrics.prom"
EOF

say "profiling drowsed under callgrind (about a minute)"
valgrind --tool=callgrind --demangle=no --dump-instr=no --callgrind-out-file="$TMP/callgrind.out" \
    "$TMP/drowsed" --config "$TMP/drowse.toml" 2>"$TMP/drowsed.log" &
DAEMON_PID=$!
cli() { "$TMP/drowse" --socket "$TMP/drowse.sock" "$@"; }
connected() {
    kill -0 "$DAEMON_PID" 2>/dev/null || return 2
    cli status --json 2>/dev/null | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["mqtt"]["connected"] else 1)' 2>/dev/null
}
for _ in $(seq 1 240); do         # valgrind is slow: up to 2 minutes
    rc=0; connected || rc=$?
    [ "$rc" -eq 1 ] || break
    sleep 0.5
done
if [ "$rc" -ne 0 ]; then
    tail -n 20 "$TMP/drowsed.log" >&2
    say "warning: drowsed under valgrind did not connect: the release binary keeps the compiler's layout"
    exit 0
fi
cli apps --json >/dev/null
cli conditions --json >/dev/null
cli metrics >/dev/null
cli fetch weather >/dev/null || true
cli fetch news >/dev/null || true
mosquitto_pub -h 127.0.0.1 -p "$PORT" -q 1 -t "drowse/order/apps/weather/notify" \
    -m '{"aps": {"content-available": 1}, "id": "order-1"}' 2>/dev/null || true
sleep 5
cli apps --json >/dev/null
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=

ORDER=${ORDER_FILE:-$TMP/text-order}
# callgrind names each function once as "fn=(id) name" (later mentions are "(id)" alone).
sed -n -E 's/^c?fn=\([0-9]+\) (.+)$/.text.\1/p' "$TMP/callgrind.out" | awk '!seen[$0]++' >"$ORDER"
n=$(wc -l <"$ORDER")
[ "$n" -gt 1000 ] || { say "warning: the profile found only $n functions: the release binary keeps the compiler's layout"; exit 0; }
say "relinking with $n functions first (--section-ordering-file)"
if ! swift build "${DROWSE_RELEASE_FLAGS[@]}" -Xlinker "--section-ordering-file=$ORDER" >&2; then
    # A linker without the option (lld; GNU ld before 2.43): keep the compiler's layout.
    say "warning: the relink with the ordering failed: the release binary keeps the compiler's layout"
    swift build "${DROWSE_RELEASE_FLAGS[@]}" >&2
fi
