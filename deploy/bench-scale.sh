#!/usr/bin/env bash
# Curves: how drowsed's start-up, idle memory, state.db and API answers grow with its work.
#
#   deploy/bench-scale.sh [--series SERIES] [--markdown]
#       --series   a comma-separated subset of apps, transfers, notifications, each with its sizes
#                  after a colon if not the default (apps:1/10/100/1000, transfers:10/1000/10000,
#                  notifications:10000/100000/1000000)
#       --markdown also write the table into docs/benchmarks.md (its section "Costs as the work
#                  grows") and a plot of each measure into docs/bench-scale-*.svg
#
# Each point is a fresh drowsed (the release build, or DROWSE_BIN_DIR) in a temp dir, connected to
# a private mosquitto on 127.0.0.1: started once to make its state (N apps; N stored transfers
# waiting for an unmetered network, max_per_app raised; or, with it stopped, N handled notifications written into
# state.db), then started again on that state and measured: its start-up (exec to the first API
# answer), idle RSS and PSS after 5 s, the size of state.db, and the median of 20 GET /v1/status
# and 20 GET /v1/transfers. The notifications series runs each size twice: all N within the 7-day
# dedupe window, and three quarters of them older, which drowsed prunes (kept: the rows left).
# The smallest apps point (1 app) is the baseline the others are read against. deploy/bench-scale.py
# does the work. Env: DROWSE_BIN_DIR, KEEP=1 (keep the temp dir).
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"

usage() { sed -n '4,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
SERIES=apps,transfers,notifications
MARKDOWN=
while [ $# -gt 0 ]; do
    case "$1" in
        --series) SERIES=${2:-}; shift 2 ;;
        --series=*) SERIES=${1#*=}; shift ;;
        --markdown) MARKDOWN=1; shift ;;
        -h|--help) usage ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -n "$SERIES" ] || die "--series: name at least one of apps, transfers, notifications"
need_packages mosquitto python3
release_binaries

TMP=$(mktemp -d /tmp/drowse-bench-scale.XXXXXX)
BROKER_PID=
cleanup() {
    stop_pid "$BROKER_PID"
    if [ -n "${KEEP:-}" ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
PORT=$(free_port)
start_broker "$TMP/broker" "$PORT"

COMMAND="deploy/bench-scale.sh"
[ "$SERIES" = apps,transfers,notifications ] || COMMAND+=" --series $SERIES"
COMMAND+="${MARKDOWN:+ --markdown}"
python3 "$DROWSE_ROOT/deploy/bench-scale.py" run "$BIN" "$TMP" "$PORT" "$SERIES" "$TMP/table.tsv" ${MARKDOWN:+"$DROWSE_ROOT/docs"}
if [ -n "$MARKDOWN" ]; then
    for m in startup pss db status transfers; do
        [ -f "$DROWSE_ROOT/docs/bench-scale-$m.svg" ] && printf '# ![%s](bench-scale-%s.svg)\n' "$m" "$m" >>"$TMP/table.tsv"
    done
fi
BENCH_MARKDOWN=$MARKDOWN bench_table bench-scale "Costs as the work grows" "$COMMAND" "$TMP/table.tsv"
