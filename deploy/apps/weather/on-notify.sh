#!/bin/sh
# weather: notification handler. Standard input is the notification's JSON payload, e.g.
# {"aps":{"content-available":1},"content-id":42}. Prints it (it goes to drowsed's log,
# tagged app.id=weather) and keeps it in deploy/local/apps/weather/notifications.log.
set -eu
out="$(cd "$(dirname "$0")/../.." && pwd)/local/apps/weather"
mkdir -p "$out"

payload=$(cat)
echo "weather: notification $payload"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $payload" >>"$out/notifications.log"
exit 0
