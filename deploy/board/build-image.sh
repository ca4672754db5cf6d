#!/usr/bin/env bash
# Builds (or finds in the cache) the board image: a Debian bookworm root file system with systemd
# as PID 1, the kernel and initrd to boot it directly, and what the board suite uses in the guest.
#
#   deploy/board/build-image.sh           prints the image's folder: base.img (raw ext4),
#                                         vmlinuz, initrd.img
#
# The image is cached under $BOARD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/drowse-board) by a
# hash of its inputs (the package lists, the setup hooks, ARCH, the mirror, the size), so a second
# run reuses it and a change to any input builds a new one.
#
# Env: ARCH          Debian architecture of the guest (default amd64; arm64 needs an aarch64 drowse)
#      BOARD_CACHE   cache folder
#      BOARD_MIRROR  Debian mirror (default http://deb.debian.org/debian)
#      BOARD_SIZE    image size (default 2G)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=deploy/common.sh
. "$HERE/../common.sh"

ARCH=${ARCH:-amd64}
MIRROR=${BOARD_MIRROR:-http://deb.debian.org/debian}
SIZE=${BOARD_SIZE:-2G}
CACHE=${BOARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/drowse-board}
case "$ARCH" in
    amd64) KERNEL_PKG=linux-image-amd64 ;;
    arm64) KERNEL_PKG=linux-image-arm64 ;;
    *) die "ARCH=$ARCH: only amd64 and arm64 are supported" ;;
esac
# What the guest has before the .deb goes in: the .deb's Depends must all be here, because the
# guest has no route to a mirror (apt install ./drowse_*.deb resolves them offline).
PACKAGES=(systemd systemd-sysv udev dbus "$KERNEL_PKG" initramfs-tools qemu-guest-agent
          libcurl4 libmosquitto1 libsqlite3-0 libssl3 ca-certificates
          mosquitto-clients python3 sqlite3 curl procps iproute2 kmod openssh-server
          hostapd wpasupplicant iw)
# Only to build the test_power module (not in Debian's kernel; drives AC and battery with real
# power_supply uevents): removed again once the module is built.
MODULE_BUILD=(linux-source-6.1 "linux-headers-$ARCH" gcc make)

# The guest's setup, done inside the chroot once its packages are in:
#  - a static address on qemu's user-mode network (no DHCP, no DNS: nothing to ask the outside)
#  - root on /dev/vda, no password prompts (the suite drives the guest with the guest agent)
#  - sshd installed but not started: the ssh driver's own test starts it (key login only)
#  - no timers that would run in the middle of a measurement (apt, man-db, fstrim, e2scrub), no
#    time sync (it would ask the outside), no gettys
# $1 is the root file system; the kernel and initrd are copied beside it for qemu's -kernel/-initrd.
HOOKS=(
    'echo drowse-board >"$1/etc/hostname"'
    'printf "127.0.0.1 localhost\n127.0.1.1 drowse-board\n" >"$1/etc/hosts"'
    'printf "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n" >"$1/etc/fstab"'
    'mkdir -p "$1/etc/systemd/network" && printf "[Match]\nName=en* eth*\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n" >"$1/etc/systemd/network/10-user.network"'
    'chroot "$1" systemctl enable systemd-networkd qemu-guest-agent'
    'chroot "$1" sh -c "systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer fstrim.timer e2scrub_all.timer systemd-tmpfiles-clean.timer systemd-timesyncd.service serial-getty@ttyS0.service getty@tty1.service 2>/dev/null || true"'
    'chroot "$1" passwd -d root'
    'chroot "$1" systemctl disable ssh.service'
    # The Wi-Fi tests start hostapd and wpa_supplicant themselves, on mac80211_hwsim's radios.
    'chroot "$1" systemctl mask hostapd.service wpa_supplicant.service'
    # test_power, built out of tree against the image's own kernel headers, in updates/ so that
    # `modprobe test_power` finds it.
    'chroot "$1" sh -ec "kver=\$(ls /lib/modules); d=\$(mktemp -d); cd \$d;
        tar -xJf /usr/src/linux-source-6.1.tar.xz --strip-components=4 linux-source-6.1/drivers/power/supply/test_power.c;
        echo obj-m := test_power.o >Kbuild; make -s -C /lib/modules/\$kver/build M=\$d modules;
        install -D -m 0644 test_power.ko /lib/modules/\$kver/updates/test_power.ko; depmod \$kver; cd /; rm -rf \$d"'
    # The kernel's own headers package is never autoremoved (apt's NeverAutoRemove): named here.
    "chroot \"\$1\" sh -c 'apt-get purge -y -q --autoremove ${MODULE_BUILD[*]} linux-headers-\$(ls /lib/modules)'"
    'mkdir -p "$1/mnt/host"'
    'cp "$1"/boot/vmlinuz-* "$1/../vmlinuz" && cp "$1"/boot/initrd.img-* "$1/../initrd.img"'
)

# The cache key: everything that goes into the image, and nothing else (comments and the
# build's own plumbing can change without a rebuild).
KEY=$(printf '%s\n' "bookworm" "$ARCH" "$MIRROR" "$SIZE" "${PACKAGES[@]}" "${MODULE_BUILD[@]}" "${HOOKS[@]}" | sha256sum | cut -c1-16)
OUT=$CACHE/$ARCH-$KEY
if [ -s "$OUT/base.img" ] && [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ]; then
    say "board image: cached in $OUT"
    echo "$OUT"; exit 0
fi
need_packages mmdebstrap e2fsprogs
HOST_ARCH=$(dpkg --print-architecture)
if [ "$ARCH" != "$HOST_ARCH" ]; then
    # A foreign root file system: its maintainer scripts run under qemu-user.
    need_packages qemu-user-static binfmt-support
fi
mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
say "board image: mmdebstrap bookworm/$ARCH (${PACKAGES[*]})"
ROOTFS=$WORK/rootfs
hook_args=()
for h in "${HOOKS[@]}"; do hook_args+=(--customize-hook="$h"); done
nice -n 10 mmdebstrap --variant=minbase --architectures="$ARCH" \
    --include="$(IFS=,; echo "${PACKAGES[*]},${MODULE_BUILD[*]}")" "${hook_args[@]}" \
    bookworm "$ROOTFS" "deb $MIRROR bookworm main" >&2
# mmdebstrap writes to a directory as root; mkfs.ext4 -d copies it into the image.
say "board image: mkfs.ext4 -d ($SIZE)"
truncate -s "$SIZE" "$WORK/base.img"
mkfs.ext4 -q -F -L drowse-board -d "$ROOTFS" "$WORK/base.img" >&2
chmod 0644 "$WORK/vmlinuz" "$WORK/initrd.img"
rm -rf "$OUT"
mkdir -p "$OUT"
mv "$WORK/base.img" "$WORK/vmlinuz" "$WORK/initrd.img" "$OUT/"
say "board image: built in $(( $(date +%s) - start )) s into $OUT"
echo "$OUT"
