#!/bin/sh
# updater: notification handler. When the payload has a "url" (http or https), queues a
# download in the "updates" session through the local API ($DROWSE_SOCKET) and exits: the
# download goes on inside drowsed, and on-transfers.sh is launched when it has finished.
set -eu
payload=$(cat)
# A string without quotes or backslashes is enough for this example (no JSON parser in sh).
url=$(printf '%s\n' "$payload" | sed -n 's/.*"url"[[:space:]]*:[[:space:]]*"\([^"\\]*\)".*/\1/p')
case "$url" in
    http://*|https://*) ;;
    "") echo "updater: notification without a url, nothing to do"; exit 100 ;;
    *) echo "updater: refusing url '$url' (only http and https)"; exit 1 ;;
esac
command -v curl >/dev/null 2>&1 || { echo "updater: curl is not installed"; exit 1; }
body=$(printf '{"kind":"download","url":"%s","app":"updater","session":"updates"}' "$url")
echo "updater: queueing $url"
curl -fsS --max-time 10 --unix-socket "$DROWSE_SOCKET" \
     -H 'Content-Type: application/json' -d "$body" http://drowse/v1/transfers
echo
exit 0
