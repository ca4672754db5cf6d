#!/usr/bin/env bash
# Builds Drowse and runs every test: the Swift unit tests, DrowseKit for Python's unit tests,
# then the end-to-end tests
# (Tests/EndToEnd, pytest), which start their own mosquitto, nginx and RabbitMQ nodes on loopback.
# Installs the Debian packages it needs when they are missing. The last line printed is
# pytest's summary.
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

# For the TLS tests (certificates), network-namespace tests and one fault-injection test;
# rsvg-convert renders the timeline SVGs to PNG (Tests/EndToEnd/test_timeline.py); tcpdump captures
# the wire benchmark's packets (Tests/EndToEnd/test_radio_bench.py).
test_packages=(openssl iproute2 iptables strace python3-prometheus-client librsvg2-bin tcpdump)
need_packages "${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}" "${test_packages[@]}"
need_nginx

# The RabbitMQ cluster test (quorum queues under node failures, about 30 s) runs its own nodes.
need_rabbitmq

if ! python3 -m pytest --version >/dev/null 2>&1; then
    need_packages python3-pytest
    if ! python3 -m pytest --version >/dev/null 2>&1; then
        # `python3` is not Debian's (pyenv, a venv): give that interpreter its own pytest.
        say "pip install pytest (for $(command -v python3))"
        python3 -m pip install --quiet pytest
    fi
fi
# schemathesis checks drowsed against docs/openapi.json (Tests/EndToEnd/test_openapi.py).
need_schemathesis
need_swift

say "swift build"
swift build
link_drowsed "$(swift build --show-bin-path)"
say "swift test"
# The simulator's tests run multi-day simulations, CPU-bound for seconds in a debug build: run
# beside the rest on Swift concurrency's pool (two threads on two cores) they starved the tests
# that time real processes (ProcessLauncher). So they run on their own, after the others.
swift test --skip DrowseSimulationTests
swift test --skip-build --filter DrowseSimulationTests

# The deployed build (release, static Swift runtime) must sleep when idle: a regression here
# (a 1 Hz libdispatch timer, a polling loop) fails the tests.
say "idle check of the release build"
swift build "${DROWSE_RELEASE_FLAGS[@]}"
link_drowsed "$(swift build "${DROWSE_RELEASE_FLAGS[@]}" --show-bin-path)"
DROWSE_BIN_DIR=$(swift build "${DROWSE_RELEASE_FLAGS[@]}" --show-bin-path) MAX_WAKEUPS_PER_S=0.1 SETTLE=11 \
    deploy/measure-idle.sh 15

say "DrowseKit for Python: unit tests (a scripted server, no drowsed)"
python3 -m pytest -q Sources/drowsekit-python/tests

# The e2e tests' fixed sleeps stay under 20 s in all: a wait FOR something polls, a time rule
# is checked on a manual clock (Tests/DrowseAgentTests). A new fixed sleep that breaks the
# budget fails here, before the run.
say "fixed sleeps of the end-to-end tests (at most 20 s in all)"
python3 Tests/EndToEnd/sleep_budget.py --max 20

DROWSE_BIN_DIR=$(swift build --show-bin-path)
export DROWSE_BIN_DIR
say "end-to-end tests with DROWSE_BIN_DIR=$DROWSE_BIN_DIR"
exec python3 -m pytest Tests/EndToEnd -q
