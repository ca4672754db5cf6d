#!/usr/bin/env bash
# Builds Drowse and runs every test: the Swift unit tests, DrowseKit for Python's unit tests,
# then the end-to-end tests
# (Tests/EndToEnd, pytest), which start their own mosquitto, nginx and RabbitMQ nodes on loopback.
#
#   deploy/test.sh                 says what it will install, installs what is missing, then tests
#   deploy/test.sh --no-install    installs nothing and changes no service: stops at once, naming
#                                  what is missing, when anything is
#
# What it installs when missing: Debian packages (apt-get, through sudo unless root), stopping and
# disabling the nginx and rabbitmq-server services their packages start; schemathesis from PyPI
# into a venv ($DROWSE_VENV, else ~/.cache/drowse/venv); pytest and pytest-xdist from PyPI when
# python3 is not Debian's. The Swift toolchain it does not install. The last line printed is
# pytest's summary.
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

case "${1:-}" in
    "") ;;
    --no-install) export DROWSE_NO_INSTALL=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (deploy/test.sh [--no-install])" ;;
esac
[ $# -le 1 ] || die "one argument at most (deploy/test.sh [--no-install])"

# For the TLS tests (certificates), network-namespace tests and one fault-injection test;
# rsvg-convert renders the timeline SVGs to PNG (Tests/EndToEnd/test_timeline.py); tcpdump captures
# the wire benchmark's packets (Tests/EndToEnd/test_radio_bench.py); iptables makes the NAT of
# Tests/EndToEnd/test_keepalive_nat.py. The RabbitMQ cluster test
# (quorum queues under node failures, about 30 s) runs its own nodes.
test_packages=(openssl iproute2 iptables strace python3-prometheus-client librsvg2-bin tcpdump rabbitmq-server)
packages=("${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}" "${test_packages[@]}")
command -v nginx >/dev/null 2>&1 || packages+=("$(nginx_package)")
pytest_from_pypi=
if ! python3 -m pytest --version >/dev/null 2>&1; then
    # A `python3` that is not Debian's (pyenv, a venv) gets its own pytest.
    if [ "$(command -v python3)" = /usr/bin/python3 ]; then packages+=(python3-pytest); else pytest_from_pypi=1; fi
fi
# The end-to-end tests run in two workers (pytest-xdist) on a machine with two cores or more.
xdist_from_pypi=
if ! python3 -c "import xdist" >/dev/null 2>&1; then
    if [ "$(command -v python3)" = /usr/bin/python3 ]; then packages+=(python3-pytest-xdist); else xdist_from_pypi=1; fi
fi
schemathesis_dir=$(schemathesis_venv)
schemathesis_missing=
if [ ! -x "$schemathesis_dir/bin/schemathesis" ]; then
    schemathesis_missing=1
    python3 -c "import ensurepip" 2>/dev/null || packages+=(python3-venv)
fi

# Said before anything is installed: what is missing, and so what this run installs.
mapfile -t missing < <(missing_packages "${packages[@]}")
wanted=()
[ ${#missing[@]} -eq 0 ] || wanted+=("Debian packages (apt-get$([ "$(id -u)" -eq 0 ] || echo ', with sudo')): ${missing[*]}")
[ -z "$pytest_from_pypi" ] || wanted+=("pytest from PyPI (pip, for $(command -v python3))")
[ -z "$xdist_from_pypi" ] || wanted+=("pytest-xdist from PyPI (pip, for $(command -v python3))")
[ -z "$schemathesis_missing" ] || wanted+=("schemathesis $DROWSE_SCHEMATHESIS_VERSION from PyPI, into a venv in $schemathesis_dir")
if [ -z "${DROWSE_NO_INSTALL:-}" ]; then
    need_swift   # not installed by this script: stops before anything is
elif ! command -v swift >/dev/null 2>&1; then
    wanted+=("a Swift toolchain (this script does not install it: https://www.swift.org/install/linux/)")
fi
command -v dpkg-query >/dev/null 2>&1 || say "not Debian: cannot check for ${packages[*]} (or your system's equivalents)"
if [ ${#wanted[@]} -eq 0 ]; then
    say "everything the tests need is installed"
elif [ -n "${DROWSE_NO_INSTALL:-}" ]; then
    printf 'error: missing, and --no-install installs nothing (deploy/test.sh without it installs them):\n' >&2
    printf '  %s\n' "${wanted[@]}" >&2
    exit 1
else
    say "installing what the tests need and this machine lacks:"
    printf '      %s\n' "${wanted[@]}" >&2
    case " ${missing[*]} " in
        *" rabbitmq-server "*|*" nginx"*) say "and stopping and disabling the services those packages start (the tests run their own)" ;;
    esac
fi

need_packages "${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}" "${test_packages[@]}"
need_nginx
need_rabbitmq
if [ -n "$pytest_from_pypi" ]; then
    [ -z "${DROWSE_NO_INSTALL:-}" ] || die "missing: pytest for $(command -v python3)"
    say "pip install pytest (for $(command -v python3))"
    python3 -m pip install --quiet pytest
elif ! python3 -m pytest --version >/dev/null 2>&1; then
    need_packages python3-pytest
fi
if [ -n "$xdist_from_pypi" ]; then
    [ -z "${DROWSE_NO_INSTALL:-}" ] || die "missing: pytest-xdist for $(command -v python3)"
    say "pip install pytest-xdist (for $(command -v python3))"
    python3 -m pip install --quiet pytest-xdist
elif ! python3 -c "import xdist" >/dev/null 2>&1; then
    need_packages python3-pytest-xdist
fi
# schemathesis checks drowsed against docs/openapi.json (Tests/EndToEnd/test_openapi.py).
need_schemathesis

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
# Two workers where there are two cores (each test has its own daemons, brokers, ports and
# folders). Their temp folders go under a short base: a worker's own level would make the longest
# socket paths too long for a unix socket (107 bytes). The base is made afresh (mktemp: no name
# another user could take first) and removed after a run that passed; kept, with the failed
# tests' logs, after one that did not.
workers=0
[ "$(nproc)" -lt 2 ] || workers=2
base=$(mktemp -d "${TMPDIR:-/tmp}/drowse-e2e.XXXXXX")
say "end-to-end tests with DROWSE_BIN_DIR=$DROWSE_BIN_DIR, $workers workers, temp folders in $base"
status=0
python3 -m pytest Tests/EndToEnd -q -n "$workers" --basetemp "$base" || status=$?
[ "$status" -ne 0 ] || rm -rf "$base"
exit "$status"
