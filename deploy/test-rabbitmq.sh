#!/usr/bin/env bash
# The full RabbitMQ cluster scenario (docs/brokers.md): a 3-node RabbitMQ cluster on loopback
# (Debian's rabbitmq-server, MQTT plugin) under a debug drowsed that lists the three nodes.
#   - quorum queues: the device's node killed while drowsed is online and while it is stopped
#     (the part CI runs with deploy/test.sh), and a rolling restart of all three nodes;
#   - a staged rollout to 10 daemons with the busiest node killed mid-spread (also in CI; the
#     50-device version is `BROKER=rabbitmq deploy/bench-rollout.sh`);
#   - RabbitMQ's default classic queues: what is published while the session's node is down is
#     acknowledged to the publisher and lost, and no other node takes the session;
#   - where the device's retained status lives (the node it published to; exact topic only).
# Every test prints its counts (published / acknowledged / ran / doubled per phase) and the
# nodes' start times. About 2 minutes on 2 cores. Installs what it needs; run as root or with sudo.
# Extra arguments go to pytest (e.g. -k classic).
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

need_packages "${DROWSE_BUILD_PACKAGES[@]}" "${DROWSE_RUN_PACKAGES[@]}"
need_rabbitmq
python3 -m pytest --version >/dev/null 2>&1 || need_packages python3-pytest
need_swift

say "swift build"
swift build
DROWSE_BIN_DIR=$(swift build --show-bin-path)
link_drowsed "$DROWSE_BIN_DIR"
export DROWSE_BIN_DIR DROWSE_E2E_RABBITMQ_FULL=1
say "RabbitMQ cluster tests with DROWSE_BIN_DIR=$DROWSE_BIN_DIR"
exec python3 -m pytest Tests/EndToEnd/test_rabbitmq_cluster.py -q -s "$@"
