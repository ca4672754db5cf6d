#!/usr/bin/env bash
# The long run of the API test from docs/openapi.json: schemathesis against a real drowsed, as
# root and as nobody, with more examples per operation than the test suite's 100.
#
#   sudo deploy/test-api.sh [EXAMPLES]     default 1000 examples per operation and caller
#
# Builds drowse (debug) when needed; installs schemathesis into a venv (deploy/common.sh).
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"
need_packages "${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}" iproute2 util-linux
need_swift
need_schemathesis
swift build
link_drowsed "$(swift build --show-bin-path)"
DROWSE_BIN_DIR=$(swift build --show-bin-path) DROWSE_SCHEMATHESIS_EXAMPLES="${1:-1000}" \
    exec python3 -m pytest -q -s Tests/EndToEnd/test_openapi.py
