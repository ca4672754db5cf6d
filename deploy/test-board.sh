#!/usr/bin/env bash
# The board acceptance suite: Drowse's .deb installed in a real Debian bookworm VM with systemd
# as PID 1 (qemu), driven by pytest from the host (Tests/Board).
#
#   deploy/test-board.sh [DEB]      DEB: a drowse_*.deb to test (default: deploy/build-deb.sh builds one)
#
# Steps: installs what it needs (apt), builds the board image or takes it from the cache
# (deploy/board/build-image.sh), builds the .deb unless given, then runs
# `python3 -m pytest Tests/Board -q -s`, which boots the VM from a fresh overlay, installs the .deb
# with `apt install ./drowse_*.deb` in the guest and tests systemd, idle, reboots and power cuts.
# Only loopback and qemu's user-mode network (restrict=on): nothing leaves the machine.
#
# Env: ARCH              guest architecture (default: this machine's; arm64 needs an aarch64 .deb)
#      BOARD_SSH         user@host: run the suite on that real board over ssh instead of the VM
#                        (no image; tests that need the VM are skipped; see Tests/Board/ssh_board.py)
#      BOARD_CACHE       image cache (default ${XDG_CACHE_HOME:-~/.cache}/drowse-board)
#      BOARD_POWER_CUTS  power cuts in the download test (default 5)
#      BOARD_SEED        the random moments of the power cuts (default: the time; printed)
#      BOARD_IDLE_SECONDS  length of the idle measurement (default 60)
#      BOARD_ACCEL=tcg   never try KVM
#      BOARD_KEEP=1      keep the VM's folder (console.log, qemu.log, overlay) under /tmp
#      PYTEST_ADDOPTS    extra pytest arguments, as pytest reads them (e.g. "-k 'idle or power'")
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"
export DEBIAN_FRONTEND=noninteractive

ARCH=${ARCH:-$(dpkg --print-architecture)}
export ARCH
case "$ARCH" in
    amd64) QEMU_PKG=qemu-system-x86 ;;
    arm64) QEMU_PKG=qemu-system-arm ;;
    *) die "ARCH=$ARCH: only amd64 and arm64" ;;
esac
nginx=nginx-light
apt-cache show nginx-light >/dev/null 2>&1 || nginx=nginx
need_packages mosquitto mosquitto-clients "$nginx" python3 python3-pytest python3-cryptography

t0=$(date +%s)
IMAGE=
if [ -z "${BOARD_SSH:-}" ]; then
    need_packages mmdebstrap "$QEMU_PKG" qemu-utils e2fsprogs netcat-openbsd
    IMAGE=$("$DROWSE_ROOT/deploy/board/build-image.sh" | tail -n 1)
else
    # A real board over ssh (Tests/Board/ssh_board.py): no image, no qemu.
    need_packages openssh-client
fi
t_image=$(( $(date +%s) - t0 ))

DEB=${1:-}
t_deb=0
if [ -z "$DEB" ]; then
    t1=$(date +%s)
    DEB=$(nice -n 10 "$DROWSE_ROOT/deploy/build-deb.sh" "$DROWSE_ROOT/.build/deb" | tail -n 1)
    t_deb=$(( $(date +%s) - t1 ))
fi
[ -f "$DEB" ] || die "no .deb at '$DEB'"
deb_arch=$(dpkg-deb -f "$DEB" Architecture)
if [ -n "${BOARD_SSH:-}" ]; then
    ARCH=$deb_arch   # the board's apt refuses a package of another architecture
else
    [ "$deb_arch" = "$ARCH" ] || die "$DEB is for $deb_arch, the board is $ARCH"
fi

RESULTS=$(mktemp "${TMPDIR:-/tmp}/board-results.XXXXXX")
export BOARD_DEB=$DEB BOARD_IMAGE_DIR=$IMAGE BOARD_RESULTS=$RESULTS
say "board suite: $(basename "$DEB") on ${BOARD_SSH:-$IMAGE}"
t2=$(date +%s)
rc=0
# A hang guard above the suite (about 30 minutes under TCG: five stream power cuts take 12).
# Each test's time is printed after the summary: where the suite's half hour goes.
timeout 2400 python3 -m pytest Tests/Board -q -s --durations=0 || rc=$?
t_suite=$(( $(date +%s) - t2 ))
echo
echo "== board figures"
cat "$RESULTS"
echo "image build/cache seconds: $t_image"
echo ".deb build seconds: $t_deb"
echo "suite seconds: $t_suite"
echo "total seconds: $(( $(date +%s) - t0 ))"
rm -f "$RESULTS"
exit "$rc"
