#!/bin/sh
# shell: transfer-events handler, run once every transfer of a session has finished. Standard
# input lists them: {"event":"transfers","app":"shell","session":"files","transfers":[...]}.
# A completed download without --to is in the app's inbox until this handler exits: copy it out
# now (here to deploy/local/apps/shell/). Exit 1 if any transfer failed.
set -eu
build="$(dirname "$0")/../../../.build/release"
if [ -x "$build/drowse" ]; then PATH="$build:$PATH"; fi

out="$(cd "$(dirname "$0")/../.." && pwd)/local/apps/shell"
mkdir -p "$out"
payload=$(cat)
failed=0
i=0
while :; do
    state=$(printf '%s' "$payload" | drowse payload "transfers.$i.state" --default end)
    [ "$state" = end ] && break
    if [ "$state" = completed ]; then
        cp "$(printf '%s' "$payload" | drowse payload "transfers.$i.location")" "$out/"
        echo "shell: copied $(printf '%s' "$payload" | drowse payload "transfers.$i.url")"
    else
        echo "shell: $(printf '%s' "$payload" | drowse payload "transfers.$i.url") $state: $(printf '%s' "$payload" | drowse payload "transfers.$i.reason")"
        failed=1
    fi
    i=$((i + 1))
done
exit "$failed"
