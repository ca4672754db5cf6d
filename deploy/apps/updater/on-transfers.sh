#!/bin/sh
# updater: transfer-events handler. Standard input:
#   {"event":"transfers","app":"updater","session":"updates","transfers":[{"id":..,"state":..,"url":..,"location":..},..]}
# Lists the finished transfers and copies each completed download out of its "location"
# (Drowse removes that file when this handler exits) into deploy/local/apps/updater/downloads/.
set -eu
out="$(cd "$(dirname "$0")/../.." && pwd)/local/apps/updater"
mkdir -p "$out/downloads"

events=$(cat)
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $events" >>"$out/events.log"
if ! command -v python3 >/dev/null 2>&1; then
    echo "updater: finished transfers: $events"
    exit 0
fi
printf '%s' "$events" | python3 -c '
import json, os, shutil, sys
out = sys.argv[1]
doc = json.load(sys.stdin)
for t in doc.get("transfers", []):
    total = t.get("bytes_total")
    line = "updater: %s %s %s %s/%s bytes" % (t.get("id"), t.get("state"), t.get("url"),
                                            t.get("bytes_done"), "?" if total is None else total)
    loc = t.get("location")
    if t.get("state") == "completed" and loc and os.path.isfile(loc):
        name = "%s-%s" % (t.get("id"), os.path.basename(t.get("url") or "download") or "download")
        shutil.copyfile(loc, os.path.join(out, name))
        line += " -> downloads/" + name
    elif t.get("reason"):
        line += " (%s)" % t.get("reason")
    print(line)
' "$out/downloads"
exit 0
