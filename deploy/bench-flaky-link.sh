#!/usr/bin/env bash
# Downloads over a link that resets every TCP connection after RESET_BYTES (default 8000000):
# drowse against `curl --retry 20 --retry-all-errors -C -`, and each against the same download on
# a clean link, in the same run.
#
#   deploy/bench-flaky-link.sh [ROUNDS] [SIZE_MIB] [--markdown]
#       interleaved rounds (default 9) of one SIZE_MIB file (default 64); --markdown also writes
#       the summary table and the command into docs/benchmarks.md (its block there only)
#
# A drowse round takes 0.2-0.6 s, and on a shared 2-core machine single rounds varied 4x (clean
# 0.15-0.57 s, flaky 0.28-1.26 s): with 3 rounds the flaky/clean ratio of the medians came out
# 1.25, 1.70 and 2.73 in three runs (the last beside a compiler), with 9 rounds 1.30. Hence 9.
#
# Everything runs inside a network namespace this script makes (all traffic on its loopback): nginx
# listens there on two ports, and an iptables rule in that namespace answers the client's packets
# of a connection on the "flaky" port with a TCP reset once the server has sent RESET_BYTES on it
# (`-m connbytes --connbytes RESET_BYTES: --connbytes-dir reply -j REJECT --reject-with tcp-reset`).
# The other port is the clean link. drowsed runs in the namespace with default [transfers]
# settings; its time is from `drowse transfer download --to FILE` until FILE is in place (polled
# every 10 ms); curl's is its wall time. Every result's sha256 is checked. The goals it prints met
# or not: drowse on the flaky link ≤ 1.5× drowse on the clean link, and no slower than curl on the
# flaky link.
#
# Needs root (ip netns, iptables); installs iproute2, iptables, nginx, curl and python3 when missing.
# Stops everything it started, on every exit: each process in its namespace, then the namespace.
# Env: DROWSE_BIN_DIR  binaries to use instead of the release build
#      BENCH_CACHE     where the test file is kept (default /tmp/drowse-bench-cache)
#      RESET_BYTES     bytes per connection before the reset (default 8000000)
#      KEEP=1          keep the temp dir (logs) and print where it is
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

bench_markdown_args "$@"
set -- "${BENCH_ARGS[@]}"
ROUNDS=${1:-9}
SIZE_MIB=${2:-64}
RESET_BYTES_GIVEN=${RESET_BYTES:-}
RESET_BYTES=${RESET_BYTES:-8000000}
case "$ROUNDS" in ''|*[!0-9]*|0) die "ROUNDS must be a positive whole number, not '$ROUNDS'" ;; esac
case "$SIZE_MIB" in ''|*[!0-9]*|0) die "SIZE_MIB must be a positive whole number, not '$SIZE_MIB'" ;; esac
[ "$(id -u)" -eq 0 ] || die "needs root (network namespace and iptables)"
need_packages iproute2 iptables curl python3
need_nginx
SIZE=$(( SIZE_MIB * 1024 * 1024 ))
BENCH_CACHE=${BENCH_CACHE:-/tmp/drowse-bench-cache}

release_binaries   # sets BIN

NAME=bench-${SIZE_MIB}MiB.bin
DATA=$BENCH_CACHE/$NAME
mkdir -p "$BENCH_CACHE"
chmod 755 "$BENCH_CACHE"
if [ ! -f "$DATA" ] || [ ! -f "$DATA.sha256" ] || [ "$(stat -c %s "$DATA")" -ne "$SIZE" ]; then
    say "generating $DATA ($SIZE_MIB MiB of random bytes, once)"
    head -c "$SIZE" /dev/urandom >"$DATA.tmp"
    sha256sum "$DATA.tmp" | awk '{ print $1 }' >"$DATA.sha256"
    mv "$DATA.tmp" "$DATA"
fi
SHA=$(cat "$DATA.sha256")

TMP=$(mktemp -d "${TMPDIR:-/tmp}/drowse-flaky.XXXXXX")
chmod 755 "$TMP"
NS=drowse-flaky-$$
NGINX_PID=
DAEMON_PID=
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    stop_pid "$DAEMON_PID" 15
    stop_pid "$NGINX_PID"
    # Whatever else still runs in the namespace (nginx's worker, a curl) was started here too.
    local pid
    for pid in $(ip netns pids "$NS" 2>/dev/null); do stop_pid "$pid" 2; done
    ip netns del "$NS" 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$NS"
inns() { ip netns exec "$NS" "$@"; }
inns ip link set lo up
# drowsed starts transfers only with a network behind a default route: a veth pair inside the
# namespace gives it one (an "ethernet" link). All traffic stays on the namespace's loopback.
inns ip link add v0 type veth peer name v1
inns ip addr add 10.213.0.2/24 dev v0
inns ip link set v0 up
inns ip link set v1 up
inns ip route add default via 10.213.0.1 dev v0
CLEAN_PORT=8080
FLAKY_PORT=8081
inns iptables -A OUTPUT -p tcp --dport "$FLAKY_PORT" -m connbytes --connbytes "$RESET_BYTES": \
    --connbytes-dir reply --connbytes-mode bytes -j REJECT --reject-with tcp-reset

mkdir -p "$TMP/nginx/tmp" "$TMP/out" "$TMP/apps.d"
cat >"$TMP/nginx/nginx.conf" <<EOF
user root;
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 64; }
http {
    log_format bench '\$server_port \$request_uri \$status \$body_bytes_sent "\$http_range"';
    access_log $TMP/nginx/access.log bench;
    sendfile on;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    default_type application/octet-stream;
    types { }
    server {
        listen 127.0.0.1:$CLEAN_PORT;
        listen 127.0.0.1:$FLAKY_PORT;
        location /files/ { alias $BENCH_CACHE/; }
    }
}
EOF
# `ip netns exec` itself, not the inns function: run in the background, a function is a subshell,
# and its pid (what stop_pid stops) would not be nginx's: nginx and drowsed outlived the script
# and held the caller's output pipe open.
ip netns exec "$NS" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" 2>>"$TMP/nginx/stderr" &
NGINX_PID=$!
wait_until 10 inns curl -sf -o /dev/null "http://127.0.0.1:$CLEAN_PORT/files/$NAME.sha256" ||
    { cat "$TMP/nginx/stderr" "$TMP/nginx/error.log" >&2; die "nginx did not start"; }

cat >"$TMP/drowse.toml" <<EOF
device_id = "bench"
state_dir = "state"
apps_dir  = "apps.d"
socket    = "drowse.sock"
EOF
echo 'id = "bench"' >"$TMP/apps.d/bench.toml"
DROWSE=("$BIN/drowse" --socket "$TMP/drowse.sock")
ip netns exec "$NS" "$BIN/drowsed" --config "$TMP/drowse.toml" 2>>"$TMP/drowsed.log" &
DAEMON_PID=$!
wait_until 20 "${DROWSE[@]}" status >/dev/null 2>&1 || { tail -n 20 "$TMP/drowsed.log" >&2; die "drowsed did not answer"; }

now() { date +%s.%N; }
check_sha() {
    local got
    got=$(sha256sum "$1" | awk '{ print $1 }')
    [ "$got" = "$SHA" ] || die "$2: $1 has sha256 $got, expected $SHA"
}
requests() { awk -v p="$1" '$1 == p { n++ } END { printf "%d\n", n }' "$TMP/nginx/access.log"; }

RESULTS=$TMP/results
: >"$RESULTS"
run_curl() {   # run_curl LABEL PORT [loop]
    # Without "loop": the retrying baseline, curl --retry 20 --retry-all-errors -C - (bounded to
    # 120 s). curl 7.88 restarts a retried transfer from the size the file had when curl started,
    # so over this link it never gets past one connection's bytes: recorded as "dnf".
    # With "loop": `until curl -C - ...; do sleep 1; done`, which resumes from the file's size
    # each time, with a 1 s pause like drowse's first backoff step (at most 60 tries).
    local out="$TMP/out/curl-$1" t0 t1 before ok=no tries=0
    rm -f "$out"
    before=$(requests "$2")
    t0=$(now)
    if [ "${3:-}" = loop ]; then
        until inns curl -s -C - -o "$out" "http://127.0.0.1:$2/files/$NAME"; do
            tries=$((tries + 1))
            [ "$tries" -lt 60 ] || break
            sleep 1
        done
    else
        inns curl -s --retry 20 --retry-all-errors --retry-max-time 120 -C - -o "$out" \
            "http://127.0.0.1:$2/files/$NAME" || true
    fi
    t1=$(now)
    if [ -f "$out" ] && [ "$(sha256sum "$out" | awk '{ print $1 }')" = "$SHA" ]; then ok=yes; fi
    rm -f "$out"
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" "BEGIN { printf \"%.3f\", b - a }")
    [ "$ok" = yes ] || secs=dnf
    # Requests as nginx logged them (a reset one may be logged late or not at all).
    echo "curl-$1 $secs $(( $(requests "$2") - before ))" >>"$RESULTS"
}
run_drowse() {   # run_drowse LABEL PORT
    local out="$TMP/out/drowse-$1" t0 t1 id info
    rm -f "$out"
    t0=$(now)
    id=$("${DROWSE[@]}" transfer download "http://127.0.0.1:$2/files/$NAME" --app bench --to "$out")
    while [ ! -e "$out" ]; do
        state=$("${DROWSE[@]}" transfer show "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
        case "$state" in failed|cancelled) die "drowse $1: transfer $state" ;; esac
        sleep 0.01
    done
    t1=$(now)
    check_sha "$out" "drowse $1"
    rm -f "$out"
    info=$("${DROWSE[@]}" transfer show "$id" --json | python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["attempts"])')
    # For drowse: its own count of attempts.
    echo "drowse-$1 $(awk -v a="$t0" -v b="$t1" "BEGIN { printf \"%.3f\", b - a }") $info" >>"$RESULTS"
}

say "$ROUNDS rounds of $SIZE_MIB MiB; the flaky link resets each connection after $RESET_BYTES bytes"
for r in $(seq 1 "$ROUNDS"); do
    say "round $r"
    run_curl clean "$CLEAN_PORT"
    run_drowse clean "$CLEAN_PORT"
    run_curl flaky-loop "$FLAKY_PORT" loop
    run_drowse flaky "$FLAKY_PORT"
    [ "$r" -eq 1 ] && run_curl flaky-retry "$FLAKY_PORT"   # once: it cannot finish (see run_curl)
done

python3 - "$RESULTS" "$TMP/table.tsv" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for name, secs, conns in rows:
    by.setdefault(name, []).append((None if secs == "dnf" else float(secs), int(conns)))
def med(k):
    v = [s for s, _ in by[k]]
    return None if None in v else statistics.median(v)
fmt = lambda x: "dnf" if x is None else f"{x:.2f}"
print(f"{'':18}{'median s':>10}  {'all rounds (s)':<{6 * len(by['curl-clean'])}}  requests")
for k in ("curl-clean", "drowse-clean", "curl-flaky-loop", "drowse-flaky", "curl-flaky-retry"):
    v = by[k]
    runs = ' '.join(f"{fmt(s):>5}" for s, _ in v)
    print(f"{k:18}{fmt(med(k)):>10}  {runs:<{6 * len(by['curl-clean'])}}  {' '.join(str(c) for _, c in v)}")
a = med("drowse-flaky") / med("drowse-clean")
print(f"drowse flaky / drowse clean = {a:.2f}  (goal <= 1.5)  {'met' if a <= 1.5 else 'NOT met'}")
b = med("drowse-flaky") / med("curl-flaky-loop")
print(f"drowse flaky / curl -C - loop flaky = {b:.2f}  (goal <= 1.0)  {'met' if b <= 1.0 else 'NOT met'}")
r = med("curl-flaky-retry")
print("curl --retry 20 --retry-all-errors -C - on the flaky link: " + ("did not finish (each retry restarts from byte 0)" if r is None else f"{r:.2f} s"))
with open(sys.argv[2], "w") as f:   # the summary table (bench_table)
    f.write("median s\tclean link\tflaky link\n")
    f.write(f"drowse\t{fmt(med('drowse-clean'))}\t{fmt(med('drowse-flaky'))} ({a:.2f}x its clean time)\n")
    f.write(f"`until curl -C - …; do sleep 1; done`\t{fmt(med('curl-clean'))}\t{fmt(med('curl-flaky-loop'))}\n")
    f.write(f"`curl --retry 20 --retry-all-errors -C -` (1 round)\t\t{'did not finish' if r is None else fmt(r)}\n")
    f.write(f"# Goals: drowse on the flaky link within 1.5x its clean time ({'met' if a <= 1.5 else 'not met'}: {a:.2f}), "
            f"no slower than the `curl -C -` loop there ({'met' if b <= 1.0 else 'not met'}: {b:.2f}).\n")
EOF
bench_table bench-flaky-link.sh "A link that resets every connection" \
    "sudo ${RESET_BYTES_GIVEN:+RESET_BYTES=$RESET_BYTES }deploy/bench-flaky-link.sh $ROUNDS $SIZE_MIB" "$TMP/table.tsv"
