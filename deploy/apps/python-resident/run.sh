#!/bin/sh
# python-resident: starts the example resident app in Python (resident.py, on DrowseKit for
# Python from this checkout: PYTHONPATH, no pip install needed), writing what it receives under
# deploy/local/apps/python-resident. drowsed gives it DROWSE_APP and DROWSE_SOCKET; the library
# reads them. drowsed's environment is clean, so python3 is the system's (PATH /usr/bin...).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:-$root/deploy/local/apps/python-resident}"
mkdir -p "$out"
PYTHONPATH="$root/Sources/drowsekit-python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# -u: unbuffered output, so drowsed logs each line as it is printed.
exec python3 -u "$here/resident.py" --dir "$out"
