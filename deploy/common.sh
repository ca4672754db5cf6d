# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source this
# Helpers shared by the deploy/ scripts. Sourced, not run: `. "$(dirname "$0")/common.sh"`.
# Needs bash (the scripts that source it run under `set -euo pipefail`).

# The checkout's root, whatever the caller's working directory.
DROWSE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# What building and running Drowse needs from Debian / Raspberry Pi OS. The Swift toolchain
# itself is not a Debian package: install it from swift.org (or with swiftly) first.
DROWSE_BUILD_PACKAGES=(libcurl4-openssl-dev libmosquitto-dev libsqlite3-dev libssl-dev libc6-dev pkg-config
                       git ca-certificates)
DROWSE_RUN_PACKAGES=(mosquitto mosquitto-clients curl)

# Release builds link the Swift runtime statically, so an installed drowsed does not depend on
# the toolchain's folder, and measurements match what is deployed. For a small footprint:
# optimised for size (-Osize: 7% less code than -O; drowsed spends its time waiting, not
# computing), one section per function so deploy/order-text.sh can put the code an idle daemon
# runs together, and no dynamic symbol table of every Swift function (-export-dynamic is
# swiftc's default for executables; nothing here looks symbols up at run time): 1.6 MB.
DROWSE_RELEASE_FLAGS=(-c release --static-swift-stdlib -Xswiftc -Osize
                      -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections
                      -Xlinker --no-export-dynamic)

# mosquitto and nginx live in /usr/sbin, which is not on a normal user's PATH on Debian.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin ;; esac

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root for: $* (run as root or install sudo)"
    fi
}

# DROWSE_NO_INSTALL=1: the need_* functions below install nothing and change no service; one
# that finds something missing stops the script, naming it.

# schemathesis (API testing from docs/openapi.json), from PyPI, pinned, into a venv of its own so
# neither Debian's Python nor its packages change. Exports DROWSE_SCHEMATHESIS, its path.
DROWSE_SCHEMATHESIS_VERSION=4.32.5
schemathesis_venv() { echo "${DROWSE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/drowse/venv}"; }
need_schemathesis() {
    local venv
    venv=$(schemathesis_venv)
    if [ ! -x "$venv/bin/schemathesis" ]; then
        [ -z "${DROWSE_NO_INSTALL:-}" ] || die "missing: schemathesis (no $venv/bin/schemathesis)"
        python3 -c "import ensurepip" 2>/dev/null || need_packages python3-venv
        say "pip install schemathesis==$DROWSE_SCHEMATHESIS_VERSION into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "schemathesis==$DROWSE_SCHEMATHESIS_VERSION"
    fi
    export DROWSE_SCHEMATHESIS="$venv/bin/schemathesis"
}

# missing_packages PKG...: prints, one a line, those of the Debian packages PKG that are not
# installed (nothing where there is no dpkg).
missing_packages() {
    command -v dpkg-query >/dev/null 2>&1 || return 0
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

# need_packages PKG...: installs the Debian packages that are not installed yet (apt-get update
# first). Does nothing, and needs no root, when all are there.
need_packages() {
    local missing=()
    if ! command -v dpkg-query >/dev/null 2>&1; then
        say "not Debian: make sure these (or your system's equivalents) are installed: $*"
        return 0
    fi
    mapfile -t missing < <(missing_packages "$@")
    [ ${#missing[@]} -eq 0 ] && return 0
    [ -z "${DROWSE_NO_INSTALL:-}" ] || die "missing Debian packages: ${missing[*]}"
    command -v apt-get >/dev/null 2>&1 || die "missing packages: ${missing[*]} (and no apt-get here)"
    say "installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# need_nginx: installs nginx when it is missing (nginx-light where the release still has it: the
# scripts and tests run their own nginx on loopback), and stops and disables the service the
# package starts on port 80 on install.
nginx_package() {
    if apt-cache show nginx-light >/dev/null 2>&1; then echo nginx-light; else echo nginx; fi
}
need_nginx() {
    command -v nginx >/dev/null 2>&1 && return 0
    need_packages "$(nginx_package)"
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
        say "stopping and disabling the nginx service the package just started (the scripts run their own)"
        as_root systemctl disable --now nginx || true
    fi
}

# run_python SCRIPT ARGS...: runs a python3 script that stops what it started in its `finally`
# blocks, so that those run on every exit: in the background (where the caller's trap can act
# while it runs; a trap of a script waiting for a foreground child runs only after the child
# ended), with SIGTERM and SIGINT raising KeyboardInterrupt in it. Sets PY_PID while it runs, for
# the caller's cleanup: `stop_pid "$PY_PID" 60`. Returns its exit status.
PY_PID=
run_python() {
    local rc=0
    python3 -c 'import os, runpy, signal, sys
signal.signal(signal.SIGTERM, signal.default_int_handler)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))   # as `python3 SCRIPT` has it
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except KeyboardInterrupt:
    sys.exit(130)' "$@" &
    PY_PID=$!
    wait "$PY_PID" || rc=$?
    PY_PID=
    return "$rc"
}

need_swift() {
    command -v swift >/dev/null 2>&1 && return 0
    die "no Swift toolchain on PATH: install one from https://www.swift.org/install/linux/ (Debian 12 and arm64 are supported), then run this again"
}

# port_in_use PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: prints a loopback TCP port nobody listens on (there is a small race until it is bound).
free_port() {
    local port
    for _ in $(seq 1 50); do
        port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000 ))
        port_in_use "$port" || { echo "$port"; return 0; }
    done
    die "found no free port"
}

# wait_until SECONDS COMMAND...: retries COMMAND every 0.2 s until it succeeds or time runs out.
wait_until() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# start_broker DIR PORT: starts a private mosquitto on 127.0.0.1:PORT with its config, data and
# log in DIR (never the system's broker service). Sets BROKER_PID; the caller stops it.
start_broker() {
    local dir=$1 port=$2
    command -v mosquitto >/dev/null 2>&1 || die "mosquitto is not installed"
    port_in_use "$port" && die "port $port on 127.0.0.1 is already in use (an old broker still running?)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    cat >"$dir/mosquitto.conf" <<EOF
# Written by deploy/common.sh: a loopback-only broker for trying Drowse out.
listener $port 127.0.0.1
allow_anonymous true
persistence true
persistence_location $dir/
log_dest file $dir/mosquitto.log
# Started as root, mosquitto would switch to the 'mosquitto' user and lose write access to $dir.
user $(id -un)
EOF
    mosquitto -c "$dir/mosquitto.conf" 2>>"$dir/mosquitto.stderr" &
    BROKER_PID=$!
    if ! wait_until 10 port_in_use "$port"; then
        tail -n 5 "$dir/mosquitto.stderr" "$dir/mosquitto.log" >&2 2>/dev/null || true
        die "mosquitto did not start listening on 127.0.0.1:$port"
    fi
}

# stop_pid PID [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 5); waits for it.
# Safe to call with an empty or finished PID.
stop_pid() {
    local pid=$1 secs=${2:-5}
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((secs * 5))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# write_quiet_agent DIR PORT DEVICE_ID: DIR/drowse.toml and DIR/apps.d/ for a drowsed connected to
# the broker on 127.0.0.1:PORT, with two apps like the examples but with fetch intervals long
# enough that nothing runs unless asked (deploy/measure-idle.sh, deploy/order-text.sh). Paths in
# the config are relative to DIR.
write_quiet_agent() {
    local dir=$1 port=$2 device=$3
    mkdir -p "$dir/apps.d"
    cat >"$dir/drowse.toml" <<EOF
device_id = "$device"
state_dir = "state"
apps_dir  = "apps.d"
socket    = "drowse.sock"
[mqtt]
url = "mqtt://127.0.0.1:$port"
EOF
    cat >"$dir/apps.d/weather.toml" <<EOF
id = "weather"
[fetch]
command = ["/bin/true"]
minimum_interval = "12h"
[notification]
command = ["/bin/true"]
EOF
    cat >"$dir/apps.d/news.toml" <<EOF
id = "news"
[fetch]
command = ["/bin/sh", "-c", "exit 100"]
minimum_interval = "24h"
[transfers]
events_command = ["/bin/true"]
EOF
}

# link_drowsed DIR: drowse is one multi-call program; run as `drowsed` it is the daemon.
# SwiftPM builds only `drowse`, so the `drowsed` name is a relative symbolic link beside it.
link_drowsed() {
    [ -x "$1/drowse" ] || return 0
    if [ ! -L "$1/drowsed" ] || [ "$(readlink "$1/drowsed")" != drowse ]; then
        ln -sfn drowse "$1/drowsed"
    fi
    build_spawner "$1"
}

# build_spawner DIR: the spawn helper program, DIR/drowse-spawner, from Sources/drowse-spawner and
# Sources/CDrowseSpawn (C only), linked statically: cloning a handler from it copies a few pages
# (docs/architecture.md, "Starting a handler"). Not a SwiftPM product: SwiftPM links every
# executable through swiftc, which puts the Swift runtime (8 MiB) into it. Without this program
# beside drowse, drowsed runs its own binary as the helper. Rebuilt when its sources are newer.
build_spawner() {
    local dir=$1 out=$1/drowse-spawner cc inc=$DROWSE_ROOT/Sources/CDrowseSpawn/include
    local src=("$DROWSE_ROOT"/Sources/drowse-spawner/*.c "$DROWSE_ROOT"/Sources/CDrowseSpawn/*.c)
    if [ -x "$out" ] && [ -z "$(find "$DROWSE_ROOT/Sources/drowse-spawner" "$DROWSE_ROOT/Sources/CDrowseSpawn" -newer "$out" -print -quit)" ]; then
        return 0
    fi
    cc=${CC:-$(command -v cc || command -v clang || true)}
    [ -n "$cc" ] || die "a C compiler (cc, or the Swift toolchain's clang) is needed for drowse-spawner"
    if [ ! -w "$dir" ]; then
        say "cannot write $dir: no drowse-spawner there (drowsed runs its own binary as the spawn helper)"
        return 0
    fi
    # Static where libc.a is installed (libc6-dev), else linked to libc. Each script builds into a
    # name of its own and renames it into place: two benches started at once both succeed.
    "$cc" -O2 -Wall -static -I"$inc" -o "$out.new.$$" "${src[@]}" 2>/dev/null ||
        "$cc" -O2 -Wall -I"$inc" -o "$out.new.$$" "${src[@]}" || { rm -f "$out.new.$$"; die "cannot build drowse-spawner with $cc"; }
    mv -f "$out.new.$$" "$out"
}

# release_binaries: sets BIN to $DROWSE_BIN_DIR, or to the release build, (re)building it when it
# is missing or older than anything in Sources/. Build output goes to stderr.
release_binaries() {
    if [ -n "${DROWSE_BIN_DIR:-}" ]; then
        BIN=$DROWSE_BIN_DIR
    else
        BIN=$DROWSE_ROOT/.build/release
        if [ ! -x "$BIN/drowse" ] ||
           [ -n "$(find "$DROWSE_ROOT/Sources" -newer "$BIN/drowse" -print -quit)" ]; then
            need_swift
            say "swift build ${DROWSE_RELEASE_FLAGS[*]}"
            (cd "$DROWSE_ROOT" && swift build "${DROWSE_RELEASE_FLAGS[@]}") >&2
        else
            say "using the release build in $BIN (newer than everything in Sources/)"
        fi
    fi
    link_drowsed "$BIN"
    [ -x "$BIN/drowsed" ] && [ -x "$BIN/drowse" ] || die "no drowsed and drowse in $BIN"
}

# RabbitMQ (Debian's rabbitmq-server, with its MQTT plugin) for the cluster tests
# (Tests/EndToEnd/test_rabbitmq_cluster.py), which start their own nodes on loopback. The package
# starts a system broker on install (systemd, or its init script without systemd): stop it, and
# keep it from starting at boot.
need_rabbitmq() {
    need_packages rabbitmq-server
    if [ -n "${DROWSE_NO_INSTALL:-}" ]; then
        if pgrep -u rabbitmq beam.smp >/dev/null 2>&1; then
            say "warning: the rabbitmq-server service runs (left as it is): the tests' own nodes may not start; stop it with: systemctl disable --now rabbitmq-server"
        fi
    elif command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet rabbitmq-server 2>/dev/null; then
        say "stopping and disabling the rabbitmq-server service (the tests run their own nodes)"
        as_root systemctl disable --now rabbitmq-server || true
    # Not the init script's `status`: it runs rabbitmqctl, which leaves an epmd daemon behind.
    elif [ -x /etc/init.d/rabbitmq-server ] && pgrep -u rabbitmq beam.smp >/dev/null 2>&1; then
        say "stopping the rabbitmq-server service (the tests run their own nodes)"
        as_root /etc/init.d/rabbitmq-server stop || true
        command -v update-rc.d >/dev/null 2>&1 && { as_root update-rc.d rabbitmq-server disable || true; }
    fi
}

# The bench scripts' summary tables (deploy/bench-markdown.py). bench_markdown_args "$@": sets
# BENCH_ARGS to the arguments without --markdown, and BENCH_MARKDOWN=1 when it was among them.
bench_markdown_args() {
    local a
    BENCH_MARKDOWN=
    BENCH_ARGS=()
    for a in "$@"; do
        if [ "$a" = --markdown ]; then BENCH_MARKDOWN=1; else BENCH_ARGS+=("$a"); fi
    done
}

# bench_table KEY TITLE COMMAND TSV: prints the table in TSV; with BENCH_MARKDOWN, also writes it,
# with COMMAND, the date and the machine, into docs/benchmarks.md (or $BENCHMARKS_MD), in place of
# KEY's block there, or as a new section "## TITLE".
bench_table() {
    echo
    python3 "$DROWSE_ROOT/deploy/bench-markdown.py" print "$4"
    if [ -n "${BENCH_MARKDOWN:-}" ]; then
        local md=${BENCHMARKS_MD:-$DROWSE_ROOT/docs/benchmarks.md} cmd=$3
        if [ -n "${DROWSE_BIN_DIR:-}" ]; then   # other binaries than the release build: said
            case "$cmd" in
                "sudo "*) cmd="sudo DROWSE_BIN_DIR=$DROWSE_BIN_DIR ${cmd#sudo }" ;;
                *) cmd="DROWSE_BIN_DIR=$DROWSE_BIN_DIR $cmd" ;;
            esac
        fi
        python3 "$DROWSE_ROOT/deploy/bench-markdown.py" write "$md" "$1" "$2" "$cmd" "$4"
        say "wrote the table and its command into $md"
    fi
}
