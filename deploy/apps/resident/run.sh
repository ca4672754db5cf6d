#!/bin/sh
# resident: starts the example resident app that deploy/run-local.sh builds (release, else debug),
# writing what it receives under deploy/local/apps/resident. drowsed gives it DROWSE_APP and
# DROWSE_SOCKET; DrowseKit reads them.
set -eu
root="$(cd "$(dirname "$0")/../../.." && pwd)"
mkdir -p "$root/deploy/local/apps/resident"
for bin in "$root/.build/release/drowse-resident-example" "$root/.build/debug/drowse-resident-example"; do
    if [ -x "$bin" ]; then
        exec "$bin" --dir "$root/deploy/local/apps/resident"
    fi
done
echo "resident: drowse-resident-example is not built (swift build -c release)" >&2
exit 1
