#!/bin/sh
# weather: fetch handler. Stands in for a real download by reading the board's temperature
# sensor, so the example needs no network. Exit 0 = new data, 100 = no new data, else failed.
set -eu
out="$(cd "$(dirname "$0")/../.." && pwd)/local/apps/weather"
mkdir -p "$out"

request=$(cat)      # {"event":"fetch","app":"weather","reason":"scheduled"|"manual"}
temp=unknown
if [ -r /sys/class/thermal/thermal_zone0/temp ]; then
    milli=$(cat /sys/class/thermal/thermal_zone0/temp)
    temp="$((milli / 1000)).$(( (milli % 1000) / 100 ))C"
fi
line="$(date -u +%Y-%m-%dT%H:%M:%SZ) temperature=$temp request=$request deadline=${DROWSE_DEADLINE:-?}"
echo "$line" >>"$out/observations.log"
echo "weather: $line"
exit 0
