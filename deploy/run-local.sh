#!/usr/bin/env bash
# Runs a whole Drowse agent from the checkout, without root and without touching the system's
# services: a loopback mosquitto on 127.0.0.1:18830 and drowsed in the foreground with
# deploy/local.toml and the example apps in deploy/apps.d (among them two resident apps: the Swift
# one built here and the Python one, run with DrowseKit for Python from Sources/drowsekit-python
# by deploy/apps/python-resident/run.sh). Everything it writes is under
# deploy/local/ (git-ignored). Ctrl-C stops both.
#
#   deploy/run-local.sh            keep state from the last run (transfers resume)
#   deploy/run-local.sh --reset    start from empty state
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

PORT=18830
LOCAL=deploy/local

case "${1:-}" in
    --reset) say "removing $LOCAL/state"; rm -rf "$LOCAL/state" ;;
    "") ;;
    *) die "usage: $0 [--reset]" ;;
esac

# python3: the Python resident example (deploy/apps.d/python-resident.toml) runs on the system's
# python3 (drowsed's environment is clean) with the library from the checkout, no pip install.
need_packages "${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}" python3
need_swift
say "swift build ${DROWSE_RELEASE_FLAGS[*]}"
swift build "${DROWSE_RELEASE_FLAGS[@]}"
BIN=.build/release        # swift build keeps this link pointing at the release products
link_drowsed "$BIN"       # drowsed is drowse under another name

BROKER_PID=
DAEMON_PID=
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    stop_pid "$DAEMON_PID" 35     # time for a graceful stop
    stop_pid "$BROKER_PID"
    if [ -n "$BROKER_PID" ]; then say "stopped the broker on 127.0.0.1:$PORT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$LOCAL"
start_broker "$LOCAL/mosquitto" "$PORT"
say "mosquitto listening on 127.0.0.1:$PORT (log: $LOCAL/mosquitto/mosquitto.log)"

cat <<EOF

Drowse is starting in the foreground (Ctrl-C stops it and the broker).
From another terminal, in $DROWSE_ROOT:

  $BIN/drowse --socket $LOCAL/drowse.sock status
  $BIN/drowse --socket $LOCAL/drowse.sock apps
  $BIN/drowse --socket $LOCAL/drowse.sock push --broker mqtt://127.0.0.1:$PORT --device pi-demo --app weather --silent -d content-id=42
  $BIN/drowse --socket $LOCAL/drowse.sock fetch weather
  $BIN/drowse --socket $LOCAL/drowse.sock transfer download https://deb.debian.org/debian/README --app updater --session updates
  $BIN/drowse --socket $LOCAL/drowse.sock transfers
  $BIN/drowse --socket $LOCAL/drowse.sock fetch resident       # the resident Swift app (DrowseKit)
  $BIN/drowse --socket $LOCAL/drowse.sock task run --app resident -- sleep 3
  $BIN/drowse --socket $LOCAL/drowse.sock fetch python-resident    # the resident Python app (drowsekit)
  $BIN/drowse --socket $LOCAL/drowse.sock push --broker mqtt://127.0.0.1:$PORT --device pi-demo --app python-resident --silent -d task=8
  curl --unix-socket $LOCAL/drowse.sock http://drowse/v1/status

(or: export DROWSE_SOCKET=$LOCAL/drowse.sock and leave out --socket)
The example apps write what they receive under $LOCAL/apps/.

EOF

# In the background plus `wait`, so that Ctrl-C or SIGTERM runs our trap at once, which stops
# drowsed with SIGTERM (a graceful stop), then the broker.
"$BIN/drowsed" --config deploy/local.toml &
DAEMON_PID=$!
status=0
wait "$DAEMON_PID" || status=$?
DAEMON_PID=
exit "$status"
