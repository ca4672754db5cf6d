#!/usr/bin/env bash
# The radio claim on real packets: a scenario's apps run three ways over identical links and
# brokers — drowsed, naive per-app timers, Android-style batched alarms — with time compressed K
# times, and `drowse radio` prices each capture with the radio model `drowse simulate` uses.
#
#   deploy/bench-radio.sh SCENARIO [--compress K] [--keep-pcap DIR] [--markdown]
#                         [--strategies LIST] [--results FILE] [--sequential]
#       SCENARIO        a deploy/scenarios/*.toml file: its apps (interval, handler durations and
#                       results, `size` fetched per run, default 20 KiB) and its [[notification]]
#                       schedules (deploy/scenarios/twenty-apps-lte-push.toml has some)
#       --compress K    time runs K times faster (default 24: one scenario day in one hour); every
#                       figure is given back at the scenario's scale
#       --keep-pcap DIR leave DIR/drowse.pcap, DIR/naive.pcap, DIR/android.pcap
#       --markdown      also write the table and this command into docs/benchmarks.md (replacing
#                       the section for this scenario and K only)
#       --strategies    comma-separated, from drowse,naive,android (default all three, in that order)
#       --results FILE  also write the figures as JSON to FILE
#       --sequential    run the strategies one after the other on one link (default: at once,
#                       each on its own link and server, so the bench takes duration / K)
#
# Setup: two network namespaces joined by a veth pair. "device" has the veth as its only link
# (IPv6 off, static neighbour entries, ACKs at once: nothing but the strategies' own traffic crosses it);
# "server" holds nginx (a file of each app's size) and mosquitto on TCP 1883. tcpdump on the
# device's end of the veth writes one pcap per strategy. The strategies run at the same time, each
# in its own pair of namespaces with its own server (--sequential: one after the other on one
# pair), each for the scenario's duration / K:
#   drowse   the real drowsed in the device namespace, the scenario's apps as app files, every
#            duration divided by K through drowsed's own keys ([mqtt] keepalive, [scheduler],
#            [notifications] max_per_hour, [radio] tail); what no key scales is printed, and
#            written with the table;
#   naive    each app on its own timer (a random phase, then every interval: the simulator's naive
#            schedule, from `drowse simulate --plan`), and a push connection with mosquitto_sub's
#            default keepalive (60 s / K) starting the notification handler;
#   android  inexact repeating alarms batched as the simulator's Android baseline does (each may be
#            delivered within 75 % of its interval after its time; overlapping windows go
#            together), and a push connection with a 28-minute heartbeat (/ K).
# The same handler serves all three (deploy/bench-handler.c, one process: its first packet leaves
# about a millisecond after its start): it stamps its start, GETs the app's file from nginx, sleeps the k-th run's duration (/ K, the simulator's draws) and exits with the k-th
# result (exit 100: no data). Notifications are published on the scenario's schedule from the
# server's side on one MQTT connection; latency is from the PUBLISH to the handler's start.
# The baselines' push connection is a small Python MQTT 3.1.1 client (deploy/bench-radio.py)
# with libmosquitto's keepalive rule: mosquitto_sub takes only whole keepalives of 5 s or more.
# Under its table it prints what `drowse simulate SCENARIO --compress K` predicted for the same
# run (Sources/DrowseSimulation/WireScaling.swift: what the bench gives drowsed at K).
#
# Needs root (network namespaces); installs iproute2, tcpdump, mosquitto, mosquitto-clients,
# python3, gcc and nginx when missing. Stops everything it started on every exit, Ctrl-C included.
# Env: DROWSE_BIN_DIR  binaries to use instead of the release build
#      KEEP=1          keep the temp dir (logs, captures) and print where it is
set -euo pipefail
# The whole script is one block, read before any of it runs: a run takes up to hours, and bash
# reads a script as it goes, so an edit of this file meanwhile would break the run at its end.
# Functions here run through wait_until and traps, which shellcheck cannot follow in a block.
# shellcheck disable=SC2317
{
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"

usage() { sed -n '5,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
SCENARIO=
K=24
PCAP_DIR=
MARKDOWN=
STRATEGIES=drowse,naive,android
RESULTS=
SEQUENTIAL=
INTO=
while [ $# -gt 0 ]; do
    case "$1" in
        --compress) K=${2:-}; shift 2 ;;
        --compress=*) K=${1#*=}; shift ;;
        --keep-pcap) PCAP_DIR=${2:-}; shift 2 ;;
        --keep-pcap=*) PCAP_DIR=${1#*=}; shift ;;
        --markdown) MARKDOWN=1; shift ;;
        --strategies) STRATEGIES=${2:-}; shift 2 ;;
        --strategies=*) STRATEGIES=${1#*=}; shift ;;
        --results) RESULTS=${2:-}; shift 2 ;;
        --results=*) RESULTS=${1#*=}; shift ;;
        --sequential) SEQUENTIAL=1; shift ;;
        # Internal: run one strategy and leave its files in DIR (the parent's, for its report).
        --into) INTO=${2:-}; shift 2 ;;
        -h|--help) usage ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$SCENARIO" ] || die "one scenario only"; SCENARIO=$1; shift ;;
    esac
done
[ -n "$SCENARIO" ] || usage
[ -f "$SCENARIO" ] || die "no scenario file $SCENARIO"
python3 -c "import sys; k = float(sys.argv[1]); sys.exit(0 if 1 <= k <= 1000 else 1)" "$K" 2>/dev/null ||
    die "--compress must be a number from 1 to 1000, not '$K'"
for s in ${STRATEGIES//,/ }; do
    case "$s" in drowse|naive|android) ;; *) die "--strategies: '$s' is not drowse, naive or android" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "needs root: it makes network namespaces (run it with sudo)"
COMMAND="deploy/bench-radio.sh $SCENARIO --compress $K${PCAP_DIR:+ --keep-pcap $PCAP_DIR}${MARKDOWN:+ --markdown}"
[ "$STRATEGIES" = drowse,naive,android ] || COMMAND+=" --strategies $STRATEGIES"
[ -z "$SEQUENTIAL" ] || COMMAND+=" --sequential"
[ -z "${DROWSE_BIN_DIR:-}" ] || COMMAND="DROWSE_BIN_DIR=$DROWSE_BIN_DIR $COMMAND"
SCENARIO=$(cd "$(dirname "$SCENARIO")" && pwd)/$(basename "$SCENARIO")
[ -z "$RESULTS" ] || RESULTS=$(cd "$(dirname "$RESULTS")" && pwd)/$(basename "$RESULTS")
if [ -n "$PCAP_DIR" ]; then mkdir -p "$PCAP_DIR"; PCAP_DIR=$(cd "$PCAP_DIR" && pwd); fi
cd "$DROWSE_ROOT"

need_packages iproute2 tcpdump mosquitto mosquitto-clients python3 gcc libc6-dev
need_nginx
release_binaries   # sets BIN
HELPER=$DROWSE_ROOT/deploy/bench-radio.py

TMP=$(mktemp -d "${TMPDIR:-/tmp}/drowse-radio.XXXXXX")
chmod 755 "$TMP"
# What the table says it measured: the checkout now, not when the report is written (a run at
# K = 72 takes an hour, and commits may land meanwhile). With DROWSE_BIN_DIR the binaries are
# whatever that folder holds: the command line in the table says so.
git -C "$DROWSE_ROOT" describe --always --dirty >"$TMP/commit" 2>/dev/null || echo "a checkout without git" >"$TMP/commit"
DEV=drowse-rdev-$$
SRV=drowse-rsrv-$$
DEV_IP=10.214.0.2
SRV_IP=10.214.0.1
HTTP_PORT=8080
MQTT_PORT=1883
PIDS=()
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    local pid ns
    for pid in "${PIDS[@]}"; do stop_pid "$pid" 10; done
    # Whatever else still runs in the namespaces (handlers, nginx's worker) was started here too.
    for ns in "$DEV" "$SRV"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do stop_pid "$pid" 2; done
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ -n "${KEEP:-}" ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------- the plan
"$BIN/drowse" simulate "$SCENARIO" --plan >"$TMP/plan.json" || die "drowse simulate --plan $SCENARIO failed"
"$BIN/drowse" simulate "$SCENARIO" --compress "$K" --json >"$TMP/sim.json" || die "drowse simulate $SCENARIO --compress $K failed"
read -r DURATION RADIO NOTIFICATIONS < <(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))
print(p["duration"], p["radio"], len(p["notifications"]))' "$TMP/plan.json")
[ "$RADIO" != ethernet ] || die "the scenario's radio is ethernet, which has no radio states to measure (use lte, 3g or wifi)"
RUN_SECONDS=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.3f}')" "$DURATION" "$K")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 10 else 1)" "$RUN_SECONDS" ||
    die "the scenario's duration / K is $RUN_SECONDS s: too short to measure (at least 10 s)"
python3 "$HELPER" prepare "$TMP/plan.json" "$K" "$TMP" "$SRV_IP" "$HTTP_PORT" | while read -r l; do say "$l"; done
while read -r l; do say "not scaled: $l"; done <"$TMP/notes.txt"
# The handler, for this machine's architecture (the apps' files are symlinks to it).
gcc -O2 -Wall -Werror -o "$TMP/h/bench-handler" "$DROWSE_ROOT/deploy/bench-handler.c" || die "could not compile deploy/bench-handler.c"
N_STRAT=$(echo "${STRATEGIES//,/ }" | wc -w)
say "$(basename "$SCENARIO"): $(python3 -c "print(f'{float(\"$DURATION\") / 3600:g}')") h of scenario, $NOTIFICATIONS notifications;" \
    "each strategy runs $RUN_SECONDS s (K = $K); about $(python3 -c "print(round(${SEQUENTIAL:+$N_STRAT *} ($RUN_SECONDS + 15) / 60))") min in all"

report_results() {
    python3 "$HELPER" report "$TMP" "$K" "$SCENARIO" "$STRATEGIES" "$COMMAND" ${MARKDOWN:+"$DROWSE_ROOT/docs/benchmarks.md"}
    [ -z "$RESULTS" ] || cp "$TMP/results.json" "$RESULTS"
    [ -z "$MARKDOWN" ] || say "wrote the section into docs/benchmarks.md"
}

# ---------------------------------------------------------------------------- at once
# Each strategy in an invocation of its own (its namespaces, server and capture), all started
# together; their files come back into this run's folder for one report.
if [ -z "$SEQUENTIAL" ] && [ "$N_STRAT" -gt 1 ]; then
    CHILDREN=()
    for s in ${STRATEGIES//,/ }; do
        mkdir -p "$TMP/$s"
        "$0" "$SCENARIO" --compress "$K" --strategies "$s" --into "$TMP/$s" >"$TMP/$s.log" 2>&1 &
        PIDS+=($!)
        CHILDREN+=("$s:$!")
    done
    failed=
    for c in "${CHILDREN[@]}"; do
        wait "${c#*:}" || { failed+=" ${c%%:*}"; tail -n 20 "$TMP/${c%%:*}.log" >&2; }
    done
    [ -z "$failed" ] || die "failed:$failed (their output is above)"
    for s in ${STRATEGIES//,/ }; do
        grep "^==> $s: [0-9]" "$TMP/$s.log" >&2 || true
        [ -z "$PCAP_DIR" ] || cp "$TMP/$s/$s.pcap" "$PCAP_DIR/$s.pcap"
    done
    report_results
    exit 0
fi

# ---------------------------------------------------------------------------- the link
ip netns add "$DEV"
ip netns add "$SRV"
indev() { ip netns exec "$DEV" "$@"; }
insrv() { ip netns exec "$SRV" "$@"; }
ip link add rdev netns "$DEV" type veth peer name rsrv netns "$SRV"
for ns in "$DEV" "$SRV"; do
    # No IPv6: no router solicitations, MLD reports or neighbour discovery on the link.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip netns exec "$ns" ip link set lo up
done
indev ip addr add "$DEV_IP/24" dev rdev
insrv ip addr add "$SRV_IP/24" dev rsrv
indev ip link set rdev up
insrv ip link set rsrv up
# drowsed is online only with a default route. Every route acknowledges at once (quickack): the
# kernel's 40 ms delayed ACK is real time that compressing by K would stretch into seconds of
# scenario after each exchange (a real day's 40 ms are nothing against an 11.6 s tail).
indev ip route add default via "$SRV_IP" dev rdev quickack 1
indev ip route change 10.214.0.0/24 dev rdev proto kernel scope link src "$DEV_IP" quickack 1
insrv ip route change 10.214.0.0/24 dev rsrv proto kernel scope link src "$SRV_IP" quickack 1
# Static neighbours: no ARP on the link (a cellular link has none).
indev ip neigh replace "$SRV_IP" lladdr "$(insrv cat /sys/class/net/rsrv/address)" dev rdev nud permanent
insrv ip neigh replace "$DEV_IP" lladdr "$(indev cat /sys/class/net/rdev/address)" dev rsrv nud permanent

# ---------------------------------------------------------------------------- the server
mkdir -p "$TMP/nginx/tmp" "$TMP/mqtt"
cat >"$TMP/nginx/nginx.conf" <<EOF
user root;
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 256; }
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
    server {
        listen $SRV_IP:$HTTP_PORT;
        location /f/ { alias $TMP/www/f/; }
    }
}
EOF
# `ip netns exec` itself in the background, not a function: $! must be the process to stop.
ip netns exec "$SRV" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" 2>>"$TMP/nginx/stderr" &
PIDS+=($!)
cat >"$TMP/mqtt/mosquitto.conf" <<EOF
# Written by deploy/bench-radio.sh: the server namespace's broker.
listener $MQTT_PORT 0.0.0.0
allow_anonymous true
persistence false
max_keepalive 65535
log_dest file $TMP/mqtt/mosquitto.log
user root
EOF
ip netns exec "$SRV" mosquitto -c "$TMP/mqtt/mosquitto.conf" 2>>"$TMP/mqtt/stderr" &
PIDS+=($!)
srv_up() { indev bash -c "exec 3<>/dev/tcp/$SRV_IP/$MQTT_PORT && exec 4<>/dev/tcp/$SRV_IP/$HTTP_PORT" 2>/dev/null; }
wait_until 10 srv_up || { cat "$TMP/nginx/stderr" "$TMP/mqtt/stderr" >&2; die "nginx or mosquitto did not start in the server namespace"; }

# ---------------------------------------------------------------------------- one strategy
now() { date +%s.%N; }
plus() { python3 -c "import sys; print(f'{float(sys.argv[1]) + float(sys.argv[2]):.3f}')" "$1" "$2"; }
mqtt_connected() {
    "$BIN/drowse" --socket "$TMP/drowse/drowse.sock" status --json 2>/dev/null |
        python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["mqtt"]["connected"] else 1)' 2>/dev/null
}

run_strategy() {   # run_strategy NAME
    local name=$1 out=$TMP/$1 t0 end tcpdump_pid pids_before=${#PIDS[@]} keepalive
    mkdir -p "$out"
    : >"$out/starts.txt"; : >"$out/runs.txt"; : >"$out/sent.txt"
    ip netns exec "$DEV" tcpdump -i rdev -n -s 200 -U -Z root -w "$out/$name.pcap" 2>"$out/tcpdump.log" &
    tcpdump_pid=$!
    PIDS+=("$tcpdump_pid")
    wait_until 10 grep -q "listening on" "$out/tcpdump.log" || { cat "$out/tcpdump.log" >&2; die "tcpdump did not start"; }
    t0=$(now)
    end=$(plus "$t0" "$RUN_SECONDS")
    say "$name: from $(date -d "@${t0%.*}" +%T) to $(date -d "@${end%.*}" +%T)"
    case "$name" in
    drowse)
        rm -rf "$TMP/drowse/state"
        ip netns exec "$DEV" "$BIN/drowsed" --config "$TMP/drowse/drowse.toml" 2>>"$out/drowsed.log" &
        PIDS+=($!)
        wait_until 20 mqtt_connected || { tail -n 20 "$out/drowsed.log" >&2; die "drowsed did not connect to the broker"; }
        ;;
    naive|android)
        [ "$name" = naive ] && keepalive=60 || keepalive=1680
        keepalive=$(python3 -c "import sys; print(float(sys.argv[1]) / float(sys.argv[2]))" "$keepalive" "$K")
        ip netns exec "$DEV" python3 "$HELPER" drive "$name" "$TMP/plan.json" "$K" "$TMP" "$t0" "$end" "$SRV_IP" "$MQTT_PORT" \
            "$keepalive" 2>>"$out/driver.log" &
        PIDS+=($!)
        ;;
    esac
    ip netns exec "$SRV" python3 "$HELPER" publish "$TMP/plan.json" "$K" "$TMP" "$t0" "$end" "$MQTT_PORT" bench "$out/sent.txt" \
        2>>"$out/publisher.log" &
    PIDS+=($!)
    # Until the end (in the background: `wait` lets the INT and TERM traps run at once).
    sleep "$(python3 -c "import sys, time; print(f'{max(0.0, float(sys.argv[1]) - time.time()):.3f}')" "$end")" &
    wait $! || true
    # The capture ends first: what stopping the strategy sends is not part of it.
    stop_pid "$tcpdump_pid" 10
    local i
    for (( i = ${#PIDS[@]} - 1; i >= pids_before; i-- )); do stop_pid "${PIDS[$i]}" 20; done
    PIDS=("${PIDS[@]:0:$pids_before}")
    for pid in $(ip netns pids "$DEV" 2>/dev/null); do stop_pid "$pid" 2; done
    [ -s "$out/$name.pcap" ] || die "$name: tcpdump wrote no capture"
    "$BIN/drowse" radio "$out/$name.pcap" --model "$RADIO" --compress "$K" --broker-port "$MQTT_PORT" --json >"$out/radio.json" ||
        die "drowse radio could not read $out/$name.pcap"
    [ -z "$PCAP_DIR" ] || cp "$out/$name.pcap" "$PCAP_DIR/$name.pcap"
    say "$name: $(python3 "$HELPER" summary "$out/radio.json")"
}

for s in ${STRATEGIES//,/ }; do run_strategy "$s"; done
if [ -n "$INTO" ]; then
    cp -a "$TMP/$STRATEGIES/." "$INTO/"
    exit 0
fi

# ---------------------------------------------------------------------------- results
report_results
exit
}
