#!/usr/bin/env bash
# Measures how quiet an idle drowsed is: wakeups per second (context switches of all its
# threads), resident memory (RSS, PSS and private dirty) and threads, and how big the binaries
# (as built and stripped) and the Debian package are.
#
#   deploy/measure-idle.sh [SECONDS]            start a private broker and drowsed on loopback
#                                               (temp config, 2 apps with long intervals, MQTT
#                                               connected), give it a little work (below), wait
#                                               AFTER seconds, then measure for SECONDS (default 60)
#   deploy/measure-idle.sh --no-activity [SECONDS]   the same without the work: idle from the start
#   deploy/measure-idle.sh --pid PID [SECONDS]  measure a running process instead, e.g. the
#                                               installed agent: --pid "$(pidof drowsed)" (as root)
#
# Env: MAX_WAKEUPS_PER_S  fail (exit 1) above this many wakeups per second (deploy/test.sh uses it)
#      DROWSE_BIN_DIR  use the binaries there instead of building a release
#      SETTLE          with --no-activity, seconds to wait after MQTT is connected, before
#                      measuring (default 33: longer than the local API's 10 s idle timeout, whose
#                      timer, armed by the script's own `drowse status` calls, still fires once
#                      after they closed, and than [lifecycle] release_code_after, 30 s, after
#                      which drowsed gives back its code pages)
#      DEB             also print the size of this .deb and its Installed-Size (deploy/build-deb.sh)
#      DETAIL=1        also list the mappings holding the most private dirty memory (a malloc
#                      arena is an anonymous mapping starting on a 64 MiB boundary), and Pss, Rss
#                      and private dirty by file (those with 64 kB resident or more)
#      AFTER           seconds between the end of the work and the measurement (default 60)
#
# The work (what an idle agent still does now and then; the memory it leaves behind is what this
# measures): one fetch (`drowse fetch weather`), NOTIFICATIONS silent notifications (default 5, at
# most 12: the app's max_per_hour; QoS 1, mosquitto_pub), one download of DOWNLOAD_MIB (default 4; 0: none) from a loopback HTTP
# server (python3 http.server; this loads libcurl, which stays loaded; DOWNLOADS of them, default 1)
# and a metrics scrape (`drowse metrics`).
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

PID=
ACTIVITY=1
if [ "${1:-}" = --no-activity ]; then
    ACTIVITY=
    shift
fi
if [ "${1:-}" = --pid ]; then
    PID=${2:?usage: $0 --pid PID [SECONDS]}
    shift 2
fi
DURATION=${1:-60}
SETTLE=${SETTLE:-33}
AFTER=${AFTER:-60}
NOTIFICATIONS=${NOTIFICATIONS:-5}
DOWNLOAD_MIB=${DOWNLOAD_MIB:-4}
DOWNLOADS=${DOWNLOADS:-1}
case "$DURATION" in ''|*[!0-9]*|0) die "SECONDS must be a positive whole number, not '$DURATION'" ;; esac
case "$AFTER$NOTIFICATIONS$DOWNLOAD_MIB$DOWNLOADS" in *[!0-9]*) die "AFTER, NOTIFICATIONS, DOWNLOAD_MIB and DOWNLOADS are whole numbers" ;; esac

# snapshot PID: one line per thread: "TID SWITCHES NAME", where SWITCHES is voluntary plus
# nonvoluntary context switches. Every switch of an idle thread is a wakeup.
snapshot() {
    local f tid
    for f in /proc/"$1"/task/*/status; do
        tid=${f%/status}; tid=${tid##*/}
        awk -v tid="$tid" '
            /^Name:/ { sub(/^Name:[ \t]*/, ""); gsub(/[ \t]/, "_"); name = $0 }
            /^voluntary_ctxt_switches:/ { v = $2 }
            /^nonvoluntary_ctxt_switches:/ { n = $2 }
            END { if (name != "") print tid, v + n, name }' "$f" 2>/dev/null || true   # thread gone: skip
    done
}

rollup_field() {    # rollup_field PID KEY: KEY's kB in /proc/PID/smaps_rollup (empty if unreadable)
    awk -v k="$2:" '$1 == k { print $2; exit }' "/proc/$1/smaps_rollup" 2>/dev/null || true
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# sizes: the binaries in $BIN (when set) as built and stripped (a stripped copy, as the package
# holds them), and the package $DEB (when set).
sizes() {
    local b tmp
    if [ -n "${BIN:-}" ] && command -v strip >/dev/null 2>&1; then
        tmp=$(mktemp -d "${TMPDIR:-/tmp}/drowse-sizes.XXXXXX")
        # One multi-call program: drowsed is a link to drowse.
        strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$tmp/drowse" "$BIN/drowse"
        printf '%-10s %s as built, %s stripped (drowsed is a link to it)\n' "drowse:" \
            "$(mib "$(stat -c %s "$BIN/drowse")")" "$(mib "$(stat -c %s "$tmp/drowse")")"
        rm -rf "$tmp"
    fi
    if [ -n "${DEB:-}" ]; then
        [ -f "$DEB" ] || die "DEB=$DEB: no such file"
        printf '%-10s %s (%s), Installed-Size %s\n' ".deb:" "$(mib "$(stat -c %s "$DEB")")" "$(basename "$DEB")" \
            "$(mib $(( $(dpkg-deb -f "$DEB" Installed-Size) * 1024 )))"
    fi
}

status_field() {    # status_field PID KEY: the value of KEY in /proc/PID/status
    awk -v k="$2:" '$1 == k { print $2; exit }' "/proc/$1/status"
}

measure() {
    local pid=$1 secs=$2
    local -A before=()
    local tid count name total=0 born=0 gone=0 woke=()
    [ -r "/proc/$pid/status" ] || die "no process $pid (or /proc/$pid is not readable: try as root)"
    while read -r tid count name; do before[$tid]=$count; done < <(snapshot "$pid")
    say "measuring $(cat "/proc/$pid/comm") (pid $pid) for $secs s; keep the machine otherwise quiet"
    sleep "$secs"
    kill -0 "$pid" 2>/dev/null || die "process $pid exited during the measurement"
    local -A seen=()
    while read -r tid count name; do
        seen[$tid]=1
        if [ -n "${before[$tid]+x}" ]; then
            count=$(( count - before[$tid] ))
        else
            born=$(( born + 1 ))        # started during the window: all its switches count
        fi
        total=$(( total + count ))
        [ "$count" -gt 0 ] && woke+=("${name}[$tid]:$count")
    done < <(snapshot "$pid")
    for tid in "${!before[@]}"; do [ -n "${seen[$tid]+x}" ] || gone=$(( gone + 1 )); done

    local rss hwm threads
    rss=$(status_field "$pid" VmRSS)
    hwm=$(status_field "$pid" VmHWM)
    threads=$(status_field "$pid" Threads)
    echo
    awk -v t="$total" -v s="$secs" 'BEGIN { printf "wakeups/s: %.3f   (%d context switches in %d s, all threads)\n", t / s, t, s }'
    awk -v r="$rss" -v h="$hwm" 'BEGIN { printf "RSS:       %.1f MiB (VmRSS; peak VmHWM %.1f MiB)\n", r / 1024, h / 1024 }'
    local pss pdirty
    # A program file written lately (a build, a copy, order-text.sh's relink) is still dirty in
    # the page cache, and smaps counts every resident page of its code as Private_Dirty: about
    # 9 MB that is neither private nor the daemon's (a copy of the release measured 12.5 MiB
    # unsynced, 2.4 MiB a second after `sync FILE`). Written back first, as on a board, and
    # right before reading: a --pid process's file, or one replaced during the run, too.
    sync "/proc/$pid/exe" 2>/dev/null || sync
    pss=$(rollup_field "$pid" Pss)
    pdirty=$(rollup_field "$pid" Private_Dirty)
    [ -z "$pss" ] || awk -v p="$pss" 'BEGIN { printf "PSS:       %.1f MiB (Pss of smaps_rollup: shared pages divided among their users)\n", p / 1024 }'
    [ -z "$pdirty" ] || awk -v p="$pdirty" 'BEGIN { printf "private dirty: %.1f MiB (Private_Dirty of smaps_rollup: memory only this process holds)\n", p / 1024 }'
    echo "threads:   $threads"
    if [ "${DETAIL:-}" = 1 ]; then
        echo "private dirty by mapping (kB, the largest):"
        awk '/^[0-9a-f]+-[0-9a-f]+ / { r = $1 " " $2 " " ($6 == "" ? "[anon]" : $6) }
             /^Private_Dirty:/ { if ($2 >= 32) print "  " $2, r }' "/proc/$pid/smaps" | sort -rn | head -n 12
        echo "by file (kB: Pss, Rss, private dirty; [anon] is every anonymous mapping, the heap and stacks):"
        awk '/^[0-9a-f]+-[0-9a-f]+ / { n = ($6 == "" ? "[anon]" : $6); sub(/.*\//, "", n); next }
             /^Rss:/ { r[n] += $2 } /^Pss:/ { p[n] += $2 } /^Private_Dirty:/ { d[n] += $2 }
             END { for (n in p) if (r[n] >= 64) printf "  %6d %6d %6d %s\n", p[n], r[n], d[n], n }' \
            "/proc/$pid/smaps" | sort -rn
    fi
    [ ${#woke[@]} -eq 0 ] || echo "woke:      ${woke[*]}   (name[tid]:switches)"
    [ "$born" -eq 0 ] || echo "note: $born thread(s) started during the window"
    [ "$gone" -eq 0 ] || echo "note: $gone thread(s) ended during the window; their switches are not counted"
    if [ -n "${MAX_WAKEUPS_PER_S:-}" ] && awk -v t="$total" -v s="$secs" -v m="$MAX_WAKEUPS_PER_S" 'BEGIN { exit !(t / s > m) }'; then
        die "idle drowsed woke more than MAX_WAKEUPS_PER_S=$MAX_WAKEUPS_PER_S times per second"
    fi
}

if [ -n "$PID" ]; then
    measure "$PID" "$DURATION"
    [ -z "${DROWSE_BIN_DIR:-}" ] || BIN=$DROWSE_BIN_DIR
    sizes
    exit 0
fi

# A private agent on loopback.
need_packages mosquitto mosquitto-clients python3
if [ -n "${DROWSE_BIN_DIR:-}" ]; then
    BIN=$DROWSE_BIN_DIR
else
    need_swift
    say "swift build ${DROWSE_RELEASE_FLAGS[*]}"
    swift build "${DROWSE_RELEASE_FLAGS[@]}"
    BIN=$(swift build "${DROWSE_RELEASE_FLAGS[@]}" --show-bin-path)
fi
link_drowsed "$BIN"
[ -x "$BIN/drowsed" ] && [ -x "$BIN/drowse" ] || die "no drowsed and drowse in $BIN"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/drowse-measure.XXXXXX")
BROKER_PID=
DAEMON_PID=
HTTP_PID=
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    stop_pid "$HTTP_PID"
    stop_pid "$DAEMON_PID" 15
    stop_pid "$BROKER_PID"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

PORT=$(free_port)
start_broker "$TMP/broker" "$PORT"

write_quiet_agent "$TMP" "$PORT" measure

"$BIN/drowsed" --config "$TMP/drowse.toml" 2>"$TMP/drowsed.log" &
DAEMON_PID=$!

mqtt_connected() {
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -n 20 "$TMP/drowsed.log" >&2; die "drowsed exited"; }
    "$BIN/drowse" --socket "$TMP/drowse.sock" status --json 2>/dev/null |
        python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["mqtt"]["connected"] else 1)' 2>/dev/null
}
if ! wait_until 30 mqtt_connected; then
    tail -n 20 "$TMP/drowsed.log" >&2
    die "drowsed did not report mqtt.connected = true within 30 s"
fi
cli() { "$BIN/drowse" --socket "$TMP/drowse.sock" "$@"; }

# activity: one fetch, NOTIFICATIONS notifications, a download from loopback, a metrics scrape.
activity() {
    local i
    say "work: a fetch, $NOTIFICATIONS notifications, a $DOWNLOAD_MIB MiB download from loopback, a metrics scrape"
    cli fetch weather >/dev/null
    for i in $(seq 1 "$NOTIFICATIONS"); do
        mosquitto_pub -h 127.0.0.1 -p "$PORT" -q 1 -t "drowse/measure/apps/weather/notify" \
            -m "{\"aps\": {\"content-available\": 1}, \"id\": \"measure-$i\"}"
    done
    if [ "$DOWNLOAD_MIB" -gt 0 ]; then
        for i in $(seq 1 "$DOWNLOADS"); do download "$i"; done
    fi
    # The scrape, once every notification's handler (/bin/true) has run.
    wait_until 20 notifications_handled || die "not all $NOTIFICATIONS notifications were handled within 20 s"
}
download() {
    local http_port id state
    mkdir -p "$TMP/www"
    head -c $((DOWNLOAD_MIB * 1024 * 1024)) /dev/urandom >"$TMP/www/file.bin"
    http_port=$(free_port)
    python3 -m http.server --bind 127.0.0.1 --directory "$TMP/www" "$http_port" >"$TMP/http.log" 2>&1 &
    HTTP_PID=$!
    wait_until 10 port_in_use "$http_port" || die "the loopback HTTP server did not start"
    rm -f "$TMP/file.bin"
    id=$(cli transfer download "http://127.0.0.1:$http_port/file.bin?$1" --app news --to "$TMP/file.bin")
    state=
    for _ in $(seq 1 300); do
        [ -e "$TMP/file.bin" ] && break
        state=$(cli transfer show "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
        case "$state" in failed|cancelled) tail -n 20 "$TMP/drowsed.log" >&2; die "the download $state" ;; esac
        sleep 0.1
    done
    cmp -s "$TMP/file.bin" "$TMP/www/file.bin" || die "the download did not arrive intact (state: ${state:-?})"
    stop_pid "$HTTP_PID"; HTTP_PID=
}
notifications_handled() {
    cli metrics | awk -v n="$NOTIFICATIONS" '
        /^drowse_handler_runs_total\{/ && /app="weather"/ && /event="notification"/ { c += $NF }
        END { exit !(c >= n) }'
}

if [ -n "$ACTIVITY" ]; then
    activity
    # The wait also outlasts the local API's 10 s idle timer and the code release (see SETTLE).
    say "work done; waiting $AFTER s before measuring"
    sleep "$AFTER"
else
    say "drowsed is up and connected to mqtt://127.0.0.1:$PORT; settling for $SETTLE s"
    sleep "$SETTLE"
fi
measure "$DAEMON_PID" "$DURATION"
sizes
