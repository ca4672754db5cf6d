#!/bin/sh
# news: fetch handler (also run for notifications: the app has no notification command).
# New headlines one time in three; otherwise exits 100 ("no new data"), which Drowse's usage
# learning takes into account, as iOS does with UIBackgroundFetchResultNoData.
set -eu
out="$(cd "$(dirname "$0")/../.." && pwd)/local/apps/news"
mkdir -p "$out"

cat >/dev/null     # the event's JSON; this example does not need it
n=$(od -An -N1 -tu1 /dev/urandom | tr -d ' ')
if [ $((n % 3)) -ne 0 ]; then
    echo "news: nothing new (${DROWSE_EVENT:-?})"
    exit 100
fi
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) headline #$n (${DROWSE_EVENT:-?})" >>"$out/headlines.log"
echo "news: new headline #$n"
exit 0
