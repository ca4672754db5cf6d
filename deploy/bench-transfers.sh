#!/usr/bin/env bash
# Compares downloads through drowsed with plain curl, on loopback, from a private nginx:
# throughput and CPU-seconds per GiB, what --sha256 verification costs, and how many bytes are
# fetched twice when the downloader is killed (kill -9) halfway and resumed.
#
#   deploy/bench-transfers.sh [ROUNDS] [SIZE_MIB] [--markdown]
#       ROUNDS interleaved curl/drowse rounds (default 3) of one SIZE_MIB file (default 1024);
#       --markdown also writes the summary table and the command into docs/benchmarks.md (its
#       block there only)
#
# What is measured:
#   curl    `curl -s -o FILE URL`: wall time, and user+sys CPU of the curl process (/usr/bin/time).
#           Also the time of a `sync` right after, since curl leaves its file unsynced while drowsed
#           fsyncs as it goes (shown as "curl + sync").
#   drowse  from `drowse transfer download --to FILE` until FILE is in place (drowsed renames it there
#           once it is complete and fsynced), polled every 2 ms; CPU = the change in drowsed's
#           utime+stime (/proc/PID/stat, all threads) from before the download until
#           `drowse transfer wait` has returned. `transfer wait` itself polls every 250 ms, so its own
#           finish time is shown separately, and so is the time from nginx's last byte ($msec in its
#           access log) to the file in place (fsync, and sha256 when asked, then rename).
#           Every result's sha256 is checked, outside the timing. One extra drowse run with --sha256
#           shows what verification costs.
#   all CPUs  busy CPU-seconds of the whole machine (/proc/stat) over each measurement (for curl,
#           including its sync). drowsed's fdatasync does the page-cache writeback in drowsed's own
#           thread and is charged to it; curl leaves writeback to the kernel's flusher threads
#           (kworkers), charged to nobody's process: this column counts both, and nginx too.
#           Only meaningful on an otherwise idle machine.
#   kill at 50%  from a rate-limited location: drowse is `kill -9`ed when bytes_done ≥ 50 %, restarted
#           and waited for; curl is `kill -9`ed when its file holds 50 %, then `curl -C - -o FILE`.
#           Re-fetched = body bytes nginx sent for that run (its access log) − the file's size.
#
# drowsed runs with a temp config and the default [transfers] settings (commit every 2 s or 8 MiB).
# Everything listens on 127.0.0.1 only. The test file is generated once into BENCH_CACHE and reused.
#
# Env: DROWSE_BIN_DIR  use the binaries there instead of the release build (built when missing or
#                      older than the newest file in Sources/)
#      BENCH_CACHE     where the test file is kept (default /tmp/drowse-bench-cache; not in the repo)
#      TMPDIR          where the private nginx, drowsed and the downloaded copies live (default /tmp;
#                      each copy is deleted once checked)
#      SLOW_RATE_MIB   nginx limit_rate for the kill-at-50% runs, in MiB/s (default SIZE_MIB/10,
#                      so each of those downloads takes about 10 s)
#      KEEP=1          keep the temp dir (nginx and drowsed logs, state) and print where it is
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

bench_markdown_args "$@"
set -- "${BENCH_ARGS[@]}"
ROUNDS=${1:-3}
SIZE_MIB=${2:-1024}
case "$ROUNDS" in ''|*[!0-9]*|0) die "ROUNDS must be a positive whole number, not '$ROUNDS'" ;; esac
case "$SIZE_MIB" in ''|*[!0-9]*|0) die "SIZE_MIB must be a positive whole number, not '$SIZE_MIB'" ;; esac
SIZE=$(( SIZE_MIB * 1024 * 1024 ))
SLOW_RATE_MIB=${SLOW_RATE_MIB:-$(( SIZE_MIB / 10 > 0 ? SIZE_MIB / 10 : 1 ))}
case "$SLOW_RATE_MIB" in ''|*[!0-9]*|0) die "SLOW_RATE_MIB must be a positive whole number" ;; esac
BENCH_CACHE=${BENCH_CACHE:-/tmp/drowse-bench-cache}
need_packages curl time python3
need_nginx

# ---------------------------------------------------------------------------- binaries
release_binaries   # sets BIN

# ---------------------------------------------------------------------------- the test file
NAME=bench-${SIZE_MIB}MiB.bin
DATA=$BENCH_CACHE/$NAME
mkdir -p "$BENCH_CACHE"
chmod 755 "$BENCH_CACHE"
# Room: the cached file (unless it is there already) in BENCH_CACHE, and one downloaded copy at a
# time (each is deleted after its check) in TMPDIR; both on one file system when they share one.
out_dir=${TMPDIR:-/tmp}
cache_kib=0
[ -f "$DATA" ] && [ "$(stat -c %s "$DATA")" -eq "$SIZE" ] || cache_kib=$(( SIZE / 1024 ))
out_kib=$(( SIZE / 1024 + 65536 ))
avail_kib() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }
if [ "$(stat -c %d "$BENCH_CACHE")" = "$(stat -c %d "$out_dir")" ]; then
    [ "$(avail_kib "$out_dir")" -ge $(( cache_kib + out_kib )) ] ||
        die "$out_dir has $(( $(avail_kib "$out_dir") / 1024 )) MiB free, this needs $(( (cache_kib + out_kib) / 1024 )) MiB (set BENCH_CACHE and TMPDIR)"
else
    [ "$(avail_kib "$BENCH_CACHE")" -ge "$cache_kib" ] || die "$BENCH_CACHE has no room for $SIZE_MIB MiB (set BENCH_CACHE)"
    [ "$(avail_kib "$out_dir")" -ge "$out_kib" ] || die "$out_dir has no room for $SIZE_MIB MiB (set TMPDIR)"
fi
if [ ! -f "$DATA" ] || [ ! -f "$DATA.sha256" ] || [ "$(stat -c %s "$DATA")" -ne "$SIZE" ]; then
    say "generating $DATA ($SIZE_MIB MiB of random bytes, once)"
    rm -f "$DATA" "$DATA.sha256"
    head -c "$SIZE" /dev/urandom >"$DATA.tmp"
    sha256sum "$DATA.tmp" | awk '{ print $1 }' >"$DATA.sha256.tmp"
    mv "$DATA.tmp" "$DATA"
    mv "$DATA.sha256.tmp" "$DATA.sha256"
    chmod 644 "$DATA" "$DATA.sha256"
fi
SHA=$(cat "$DATA.sha256")
cat "$DATA" >/dev/null  # into the page cache: nginx serves it from memory in every round

# ---------------------------------------------------------------------------- private nginx and drowsed
TMP=$(mktemp -d "${TMPDIR:-/tmp}/drowse-bench.XXXXXX")
chmod 755 "$TMP"
NGINX_PID=
DAEMON_PID=
BG_PID=
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    [ -n "$BG_PID" ] && kill -KILL "$BG_PID" 2>/dev/null || true
    stop_pid "$DAEMON_PID" 15
    stop_pid "$NGINX_PID"
    if [ -n "${KEEP:-}" ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

PORT=$(free_port)
mkdir -p "$TMP/nginx/tmp" "$TMP/out" "$TMP/apps.d"
cat >"$TMP/nginx/nginx.conf" <<EOF
# Written by deploy/bench-transfers.sh: loopback only, serves $BENCH_CACHE.
$( [ "$(id -u)" -eq 0 ] && echo "user root;" )
daemon off;
master_process on;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 64; }
http {
    log_format bench '\$request_uri \$status \$body_bytes_sent \$msec "\$http_range" "\$http_if_range"';
    access_log $TMP/nginx/access.log bench;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    default_type application/octet-stream;
    types { }
    server {
        listen 127.0.0.1:$PORT;
        location /files/ { alias $BENCH_CACHE/; }
        location /slow/ { alias $BENCH_CACHE/; limit_rate ${SLOW_RATE_MIB}m; }
    }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" 2>>"$TMP/nginx/stderr" &
NGINX_PID=$!
wait_until 10 port_in_use "$PORT" || { cat "$TMP/nginx/stderr" "$TMP/nginx/error.log" >&2; die "nginx did not start"; }
FAST_URL=http://127.0.0.1:$PORT/files/$NAME
SLOW_URL=http://127.0.0.1:$PORT/slow/$NAME

cat >"$TMP/drowse.toml" <<EOF
device_id = "bench"
state_dir = "state"
apps_dir  = "apps.d"
socket    = "drowse.sock"
EOF
echo 'id = "bench"' >"$TMP/apps.d/bench.toml"
DROWSE=("$BIN/drowse" --socket "$TMP/drowse.sock")

start_daemon() {
    "$BIN/drowsed" --config "$TMP/drowse.toml" 2>>"$TMP/drowsed.log" &
    DAEMON_PID=$!
    if ! wait_until 20 "${DROWSE[@]}" status >/dev/null 2>&1; then
        tail -n 20 "$TMP/drowsed.log" >&2
        die "drowsed did not answer within 20 s"
    fi
}
start_daemon

# ---------------------------------------------------------------------------- helpers
now() { date +%s.%N; }
# cpu_ticks PID: utime + stime of all the process's threads, in clock ticks.
cpu_ticks() {
    local f
    read -r -a f < <(sed 's/^.*) //' "/proc/$1/stat")
    echo $(( f[11] + f[12] ))
}
TICK=$(getconf CLK_TCK)
# busy_ticks: busy time of all CPUs (user nice system irq softirq), in clock ticks.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat; }
# thread_ticks PID: "NAME TICKS" (utime + stime) for each live thread of PID.
thread_ticks() {
    python3 -c '
import os, sys
task = f"/proc/{sys.argv[1]}/task"
for tid in os.listdir(task):
    try:
        s = open(f"{task}/{tid}/stat").read()
    except OSError:
        continue
    name = s[s.index("(") + 1:s.rindex(")")].replace(" ", "_")
    f = s[s.rindex(")") + 2:].split()
    print(name, int(f[11]) + int(f[12]))' "$1"
}
check_sha() {   # check_sha FILE WHAT
    local got
    got=$(sha256sum "$1" | awk '{ print $1 }')
    [ "$got" = "$SHA" ] || die "$2: $1 has sha256 $got, expected $SHA"
}
# served PATTERN: body bytes nginx sent for requests whose URI (with query) contains PATTERN.
served() {
    awk -v p="$1" 'index($1, p) { s += $3 } END { printf "%d\n", s }' "$TMP/nginx/access.log"
}
requests() { awk -v p="$1" 'index($1, p) { n++ } END { printf "%d\n", n }' "$TMP/nginx/access.log"; }
# await_file PATH: in the background, prints the time PATH appears (2 ms polling).
await_file() {
    python3 -c '
import os, sys, time
p = sys.argv[1]
while not os.path.exists(p):
    time.sleep(0.002)
print(repr(time.time()))' "$1"
}
json_field() {  # json_field KEY < JSON
    python3 -c 'import json, sys; v = json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else v)' "$1"
}

# run_curl I: one curl download; appends "wall cpu sync_wall all_cpus" to $TMP/curl.txt
run_curl() {
    local out=$TMP/out/curl.bin t0 t1 t2 cpu b0 b1
    sync
    b0=$(busy_ticks)
    t0=$(now)
    /usr/bin/time -f '%U %S' -o "$TMP/time.txt" curl -s -o "$out" "$FAST_URL?curl=$1" ||
        die "curl failed: $(cat "$TMP/time.txt")"
    t1=$(now)
    sync
    t2=$(now)
    b1=$(busy_ticks)
    cpu=$(tail -n 1 "$TMP/time.txt" | awk '{ print $1 + $2 }')
    check_sha "$out" "curl round $1"
    rm -f "$out"
    echo "$t0 $t1 $t2 $cpu $b0 $b1 $TICK" |
        awk '{ printf "%.6f %.3f %.6f %.3f\n", $2 - $1, $4, $3 - $2, ($6 - $5) / $7 }' >>"$TMP/curl.txt"
}

# run_drowse TAG [--sha256 HEX]: one download through drowsed; appends
# "TAG t0 t_file t_wait cpu all_cpus" to $TMP/drowse.txt
run_drowse() {
    local tag=$1 out=$TMP/out/drowse.bin t0 tf tw c0 c1 b0 b1 id
    shift
    sync
    await_file "$out" >"$TMP/appeared.txt" &
    BG_PID=$!
    sleep 0.2   # let the poller start
    b0=$(busy_ticks)
    c0=$(cpu_ticks "$DAEMON_PID")
    t0=$(now)
    id=$("${DROWSE[@]}" transfer download "$FAST_URL?drowse=$tag" --app bench --to "$out" "$@")
    wait "$BG_PID"
    BG_PID=
    "${DROWSE[@]}" transfer wait "$id" --timeout 600s >/dev/null || die "drowse transfer $id did not complete"
    tw=$(now)
    c1=$(cpu_ticks "$DAEMON_PID")
    b1=$(busy_ticks)
    tf=$(cat "$TMP/appeared.txt")
    check_sha "$out" "drowse $tag"
    rm -f "$out"
    echo "$tag $t0 $tf $tw $c0 $c1 $b0 $b1 $TICK" |
        awk '{ printf "%s %.6f %.6f %.6f %.3f %.3f\n", $1, $2, $3, $4, ($6 - $5) / $9, ($8 - $7) / $9 }' >>"$TMP/drowse.txt"
}

# ---------------------------------------------------------------------------- rounds
say "$ROUNDS rounds of $SIZE_MIB MiB from 127.0.0.1:$PORT (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
# How busy the machine is without us: other work skews both the timing and the all-CPUs column.
b0=$(busy_ticks); sleep 2; b1=$(busy_ticks)
IDLE_BUSY=$(awk -v b="$(( b1 - b0 ))" -v t="$TICK" -v n="$(nproc)" 'BEGIN { printf "%.0f", 100 * b / t / 2 / n }')
[ "$IDLE_BUSY" -le 10 ] ||
    say "warning: the machine is ${IDLE_BUSY}% busy before we start; CPU and throughput figures will be noisy"
: >"$TMP/curl.txt"
: >"$TMP/drowse.txt"
thread_ticks "$DAEMON_PID" >"$TMP/threads.before"
for r in $(seq 1 "$ROUNDS"); do
    if [ $(( r % 2 )) -eq 1 ]; then run_curl "$r"; run_drowse "$r"; else run_drowse "$r"; run_curl "$r"; fi
    say "round $r: curl $(tail -n 1 "$TMP/curl.txt" | awk '{ print $1 " s, " $2 " CPU s" }')," \
        "drowse $(tail -n 1 "$TMP/drowse.txt" | awk '{ print $3 - $2 " s, " $5 " CPU s" }')"
done
thread_ticks "$DAEMON_PID" >"$TMP/threads.after"
run_drowse sha --sha256 "$SHA"
say "with --sha256: $(tail -n 1 "$TMP/drowse.txt" | awk '{ print $3 - $2 " s, " $5 " CPU s" }')"
# What hashing the file costs by itself, with the same library drowsed uses (OpenSSL), from the page cache.
HASH_CPU=
if command -v openssl >/dev/null 2>&1; then
    /usr/bin/time -f '%e %U %S' -o "$TMP/time.txt" openssl dgst -sha256 "$DATA" >/dev/null &&
        HASH_CPU=$(tail -n 1 "$TMP/time.txt")
fi

# ---------------------------------------------------------------------------- kill at 50 %
half=$(( SIZE / 2 ))
say "kill -9 at 50 % from /slow/ (limit_rate $SLOW_RATE_MIB MiB/s): drowse"
out=$TMP/out/drowse-kill.bin
id=$("${DROWSE[@]}" transfer download "$SLOW_URL?run=drowse-kill" --app bench --to "$out")
bytes_done() { "${DROWSE[@]}" transfer show "$id" --json | json_field bytes_done; }
reached_half() { local b; b=$(bytes_done); [ "${b:-0}" -ge "$half" ]; }
wait_until $(( SIZE_MIB / SLOW_RATE_MIB * 3 + 60 )) reached_half || die "drowse never reached 50 %"
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
# A --to download gathers its bytes in a hidden file beside the destination.
part=$(find "$(dirname "$out")" -maxdepth 1 -name ".$(basename "$out").$id.drowse-part" -printf '%s\n' 2>/dev/null || true)
committed=$(python3 -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(db.execute("SELECT bytes_done FROM transfers WHERE id = ?", (sys.argv[2],)).fetchone()[0])' \
    "$TMP/state/state.db" "$id")
start_daemon
"${DROWSE[@]}" transfer wait "$id" --timeout 600s >/dev/null || die "drowse transfer $id did not complete after the restart"
check_sha "$out" "drowse after kill -9"
rm -f "$out"
sleep 0.5   # nginx logs the killed request when it notices the dead connection
drowse_served=$(served run=drowse-kill)
drowse_requests=$(requests run=drowse-kill)

say "kill -9 at 50 % from /slow/: curl"
out=$TMP/out/curl-kill.bin
curl -s -o "$out" "$SLOW_URL?run=curl-kill" &
BG_PID=$!
file_half() { [ -f "$out" ] && [ "$(stat -c %s "$out")" -ge "$half" ]; }
wait_until $(( SIZE_MIB / SLOW_RATE_MIB * 3 + 60 )) file_half || die "curl never reached 50 %"
kill -KILL "$BG_PID"
wait "$BG_PID" 2>/dev/null || true
BG_PID=
curl_at_kill=$(stat -c %s "$out")
curl -s -C - -o "$out" "$SLOW_URL?run=curl-kill" || die "curl -C - failed"
check_sha "$out" "curl -C - after kill -9"
rm -f "$out"
sleep 0.5
curl_served=$(served run=curl-kill)
curl_requests=$(requests run=curl-kill)

# ---------------------------------------------------------------------------- report
echo
echo "bench-transfers: $SIZE_MIB MiB file, $ROUNDS interleaved rounds, loopback nginx $(nginx -v 2>&1 | sed 's/.*\///'), $(curl --version | head -n 1 | cut -d' ' -f1-2)"
echo "drowsed: $BIN/drowsed, default [transfers] (commit every 2 s or 8 MiB); $(nproc) CPUs, ${IDLE_BUSY}% busy before the rounds"
python3 - "$TMP" "$SIZE_MIB" "$HASH_CPU" "$TICK" <<'EOF'
import collections, statistics, sys
tmp, size_mib, hash_cpu, tick = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
gib = size_mib / 1024
med = statistics.median
curl = [[float(x) for x in l.split()] for l in open(f"{tmp}/curl.txt") if l.strip()]
drowse = {}
for l in open(f"{tmp}/drowse.txt"):
    tag, *v = l.split()
    drowse[tag] = [float(x) for x in v]           # t0 t_file t_wait cpu all_cpus
last_byte = {}                                    # drowse TAG -> when nginx logged the request ($msec)
for l in open(f"{tmp}/nginx/access.log"):
    f = l.split()
    if "?drowse=" in f[0]:
        last_byte[f[0].split("?drowse=")[1]] = float(f[3])
sha = drowse.pop("sha", None)
rounds = [drowse[k] for k in sorted(drowse, key=int)]
c_wall, c_cpu, c_sync, c_all = ([r[i] for r in curl] for i in range(4))
d_wall = [r[1] - r[0] for r in rounds]
d_wait = [r[2] - r[0] for r in rounds]
d_cpu, d_all = [r[3] for r in rounds], [r[4] for r in rounds]
d_tail = [drowse[k][1] - last_byte[k] for k in sorted(drowse, key=int) if k in last_byte]
print()
print(f"{'per round':<10}{'curl s':>8}{'CPU s':>7}{'+sync s':>8}{'all CPUs':>9}  |{'drowse s':>9}{'CPU s':>7}{'all CPUs':>9}"
      f"{'wait s':>8}{'tail s':>8}")
for i in range(len(rounds)):
    print(f"{'round ' + str(i + 1):<10}{c_wall[i]:>8.3f}{c_cpu[i]:>7.2f}{c_sync[i]:>8.3f}{c_all[i]:>9.2f}  |{d_wall[i]:>9.3f}"
          f"{d_cpu[i]:>7.2f}{d_all[i]:>9.2f}{d_wait[i]:>8.3f}{d_tail[i] if i < len(d_tail) else float('nan'):>8.3f}")
print("(tail: from nginx's last byte to the file in place at --to; wait: until `drowse transfer wait` returned)")
print()
tp_c, tp_d = size_mib / med(c_wall), size_mib / med(d_wall)
tp_cs = size_mib / med([a + b for a, b in zip(c_wall, c_sync)])
cpu_c, cpu_d = med(c_cpu) / gib, med(d_cpu) / gib
all_c, all_d = med(c_all) / gib, med(d_all) / gib
print(f"{'median of ' + str(len(rounds)) + ' rounds':<34}{'curl':>10}{'drowse':>10}{'drowse/curl':>13}")
print(f"{'throughput MiB/s':<34}{tp_c:>10.1f}{tp_d:>10.1f}{tp_d / tp_c:>13.2f}")
print(f"{'CPU s per GiB (the process)':<34}{cpu_c:>10.3f}{cpu_d:>10.3f}{cpu_d / cpu_c if cpu_c else float('nan'):>13.2f}")
print(f"{'CPU s per GiB (all CPUs, +sync)':<34}{all_c:>10.3f}{all_d:>10.3f}{all_d / all_c if all_c else float('nan'):>13.2f}")
print(f"{'throughput, curl + sync':<34}{tp_cs:>10.1f}{tp_d:>10.1f}{tp_d / tp_cs:>13.2f}")
ratios = sorted(d / c for d, c in zip(d_cpu, c_cpu) if c)
with open(f"{tmp}/table.tsv", "w") as f:   # the summary table (bench_table)
    f.write(f"median of {len(rounds)} rounds\tcurl -o\tdrowse\tdrowse / curl\n")
    f.write(f"CPU s per GiB (the process)\t{cpu_c:.2f}\t{cpu_d:.2f}\t{cpu_d / cpu_c if cpu_c else float('nan'):.2f}"
            + (f" (rounds {ratios[0]:.2f}–{ratios[-1]:.2f})" if ratios else "") + "\n")
    f.write(f"CPU s per GiB (all CPUs, curl + sync)\t{all_c:.2f}\t{all_d:.2f}\t{all_d / all_c if all_c else float('nan'):.2f}\n")
    f.write(f"throughput MiB/s\t{tp_c:.0f}\t{tp_d:.0f}\t{tp_d / tp_c:.2f}\n")
    if sha:
        f.write(f"CPU s per GiB with --sha256 (1 run)\t(curl does not hash)\t{sha[3] / gib:.2f}\t\n")
print(f"throughput range over the rounds: curl {size_mib / max(c_wall):.0f}..{size_mib / min(c_wall):.0f}, "
      f"drowse {size_mib / max(d_wall):.0f}..{size_mib / min(d_wall):.0f} MiB/s; "
      f"drowse until `transfer wait` returned: {size_mib / med(d_wait):.1f} MiB/s")
# CPU time on a shared 2-core machine moves with what else runs (caches, frequency, other
# processes' interrupts): the spread says how far one round's figure can be trusted.
print(f"CPU s per GiB over the rounds: curl {min(c_cpu) / gib:.3f}..{max(c_cpu) / gib:.3f}, "
      f"drowse {min(d_cpu) / gib:.3f}..{max(d_cpu) / gib:.3f}; drowse/curl per round "
      + (f"{ratios[0]:.2f}..{ratios[-1]:.2f} (median {med(ratios):.2f})" if ratios else "n/a"))
if sha:
    s_wall, s_cpu = sha[1] - sha[0], sha[3]
    s_tail = sha[1] - last_byte["sha"] if "sha" in last_byte else float("nan")
    print(f"drowse --sha256 (1 run): {size_mib / s_wall:.1f} MiB/s, {s_cpu / gib:.3f} CPU s per GiB; "
          f"tail after the last byte {s_tail:.3f} s vs {med(d_tail):.3f} s without: "
          f"verification costs {(s_tail - med(d_tail)) / gib:.3f} s per GiB "
          f"(whole run: {s_wall - med(d_wall):+.3f} s, {s_cpu - med(d_cpu):+.2f} CPU s)")
if len(hash_cpu) == 3:
    e, u, s = map(float, hash_cpu)
    print(f"for scale: `openssl dgst -sha256` of the file from the page cache takes {e / gib:.3f} s and "
          f"{(u + s) / gib:.3f} CPU s per GiB")
def threads(name):
    t = collections.Counter()
    for l in open(f"{tmp}/{name}"):
        n, v = l.rsplit(None, 1)
        t[n] += int(v)
    return t
b, a = threads("threads.before"), threads("threads.after")
by = sorted(((a[n] - b.get(n, 0), n) for n in a if a[n] - b.get(n, 0) > 0), reverse=True)
if by:
    print("drowsed CPU by thread over the rounds (live threads): " +
          ", ".join(f"{n} {t / tick:.2f} s" for t, n in by[:5]))
EOF
awk -v size="$SIZE" -v ds="$drowse_served" -v dr="$drowse_requests" -v cs="$curl_served" -v cr="$curl_requests" \
    -v part="${part:-0}" -v committed="$committed" -v ck="$curl_at_kill" -v rate="$SLOW_RATE_MIB" \
    -v table="$TMP/table.tsv" 'BEGIN {
    M = 1048576
    printf "\nkill -9 at 50 %% (limit_rate %d MiB/s)   %12s %10s %14s\n", rate, "re-fetched", "requests", "at the kill"
    printf "%-38s %8.2f MiB %10d   %s\n", "drowse: kill drowsed, restart", (ds - size) / M, dr, \
        sprintf("%.1f MiB on disk, %.1f committed", part / M, committed / M)
    printf "%-38s %8.2f MiB %10d   %s\n", "curl: kill curl, curl -C - -o FILE", (cs - size) / M, cr, \
        sprintf("%.1f MiB on disk (never fsynced)", ck / M)
    printf "MiB fetched again after a kill -9 at 50 %%\t%.2f\t%.2f\t\n", (cs - size) / M, (ds - size) / M >>table
}'
bench_table bench-transfers.sh Downloads "deploy/bench-transfers.sh $ROUNDS $SIZE_MIB" "$TMP/table.tsv"
