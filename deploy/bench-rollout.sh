#!/usr/bin/env bash
# Staged rollout: N drowsed instances side by side, each sent one signed push to transfer at the
# same moment, first with spread = 0, then with spread = SPREAD, in the same run; prints the
# per-second histogram of download starts for both side by side, the most starts in any one
# second for each, and each instance's memory while all N run. Then it SIGKILLs every 10th instance
# (at least 2) and checks `drowse fleet`: all N listed, the killed ones offline (their last will),
# the others online with this build's version, --json parses; prints listed/online/offline and how
# long `drowse fleet` took for N devices. A mismatch fails the run (non-zero exit).
#
# With BROKER=rabbitmq the broker is a 3-node RabbitMQ cluster with quorum queues (docs/brokers.md)
# instead of the mosquitto: each device lists the three nodes' MQTT ports, its preferred node in
# turn; three rounds, spread = 0, spread = SPREAD, and spread = SPREAD again with the node that
# holds the most sessions killed (-9) a third of the way into the spread and not restarted; every
# push is published through the two other nodes. Printed: the three histograms side by side, per
# round how many devices ran the push once, twice or never (events-handler sightings of the file,
# drowsed's transfers, nginx GETs), how many devices failed over and how long that took (from the
# kill until each was subscribed on another node, polled on its socket), memory, and what
# `drowse fleet` lists on each running node (none on RabbitMQ 3.10: reported, not a failure). A
# device that ran a push twice or never, a wrong sha256, or a device of the dead node that got no
# session elsewhere within 60 s fails the run. No SIGKILL of daemons in this mode.
# KILL_AT=0 kills the node as soon as the last publish is acknowledged, while the cluster is still
# delivering the push (default 0.333: a third of the way into the spread).
#
#   deploy/bench-rollout.sh [N] [SPREAD] [--markdown]
#   BROKER=rabbitmq deploy/bench-rollout.sh [N] [SPREAD] [--markdown]
#       N       drowsed instances (default 50)
#       SPREAD  seconds (default 20)
#       --markdown  also write the summary table and the command into docs/benchmarks.md (the
#               block of this BROKER there only)
#
# Setup (everything on 127.0.0.1, in a temp dir), from Tests/EndToEnd/rollout.py and the e2e
# helpers in drowse_e2e.py (the same code test_rollout.py runs):
#   - one private mosquitto and one nginx on free ports; nginx logs `$msec` and `$request_time`, so
#     a request's start is msec - request_time;
#   - N drowsed instances, device ids roll-000 ... with their own state folder and socket, each with
#     the app "fw": notification.public_key (one provider key for all), allow_download = true, and an
#     events handler that hashes the downloaded file;
#   - each round: the signed payloads are made with `drowse push --dry-run --sign --spread`, then one
#     mosquitto_pub per device runs in parallel; the round ends when every device's events handler
#     has seen its file with the right sha256 (a wrong one fails the run).
#   - after both rounds (and the memory readings), the SIGKILLs; `drowse fleet --json` is polled
#     until the killed ones are offline (bounded: 30 s), then run once more with --json and once
#     without, both timed, and compared with the fleet.
# Per-instance memory: RSS and PSS of each drowsed from /proc/PID/smaps_rollup, idle before the
# pushes and again after both rounds (PSS shares the binary's pages among the N instances).
#
# Env: BROKER          mosquitto (default) or rabbitmq (installs rabbitmq-server, stops its service)
#      KILL_AT         with BROKER=rabbitmq: when the node dies, as a fraction of SPREAD (default 0.333)
#      SIZE            bytes per download (default 1048576)
#      DROWSE_BIN_DIR  use the binaries there instead of the release build (built with
#                      `swift build -c release --static-swift-stdlib` when missing or older than Sources/)
#      KEEP=1          keep the temp dir (logs of every daemon, nginx's access log) and print where it is
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

bench_markdown_args "$@"
set -- "${BENCH_ARGS[@]}"
N=${1:-50}
SPREAD=${2:-20}
SIZE_GIVEN=${SIZE:-} KILL_AT_GIVEN=${KILL_AT:-}
SIZE=${SIZE:-1048576}
KILL_AT=${KILL_AT:-0.333}
case "$N" in ''|*[!0-9]*) die "N must be a whole number, not '$N'" ;; esac
case "$SPREAD" in ''|*[!0-9.]*|*.*.*) die "SPREAD must be a number of seconds, not '$SPREAD'" ;; esac
case "$SIZE" in ''|*[!0-9]*) die "SIZE must be a whole number of bytes, not '$SIZE'" ;; esac
case "$KILL_AT" in ''|*[!0-9.]*|*.*.*) die "KILL_AT must be a fraction of SPREAD, not '$KILL_AT'" ;; esac
[ "$N" -ge 2 ] && [ "$N" -le 500 ] || die "N must be 2 to 500"
BROKER=${BROKER:-mosquitto}
case "$BROKER" in mosquitto|rabbitmq) ;; *) die "BROKER must be mosquitto or rabbitmq, not '$BROKER'" ;; esac
need_packages mosquitto mosquitto-clients python3
need_nginx
if [ "$BROKER" = rabbitmq ]; then need_rabbitmq; fi

# ---------------------------------------------------------------------------- binaries
release_binaries   # sets BIN

# ---------------------------------------------------------------------------- temp dir, cleanup
TMP=$(mktemp -d /tmp/drowse-bench-rollout.XXXXXX)
chmod 755 "$TMP"
cleanup() {
    stop_pid "$PY_PID" 60    # rollout.py's finally stops every drowsed, nginx and mosquitto
    if [ "${KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "$N instances, spread $SPREAD s, $SIZE bytes each, broker $BROKER, binaries from $BIN"
# rollout.py stops every daemon, nginx and broker (node) it started, also on an error.
DROWSE_BIN_DIR=$BIN run_python "$DROWSE_ROOT/Tests/EndToEnd/rollout.py" "$N" "$SPREAD" "$SIZE" "$TMP" "$BROKER" "$KILL_AT"
if [ "$BROKER" = rabbitmq ]; then
    bench_table "bench-rollout.sh BROKER=rabbitmq" "Staged rollout on a RabbitMQ cluster, a node killed" \
        "BROKER=rabbitmq${KILL_AT_GIVEN:+ KILL_AT=$KILL_AT}${SIZE_GIVEN:+ SIZE=$SIZE} deploy/bench-rollout.sh $N $SPREAD" "$TMP/table.tsv"
else
    bench_table bench-rollout.sh "Staged rollout" "${SIZE_GIVEN:+SIZE=$SIZE }deploy/bench-rollout.sh $N $SPREAD" "$TMP/table.tsv"
fi
