#!/usr/bin/env bash
# The C spawn code (Sources/CDrowseSpawn, the spawn parts of Sources/CDrowseSys, and the
# drowse-spawner program as deploy/common.sh's build_spawner makes it) built for ARCH, with its
# test Tests/SpawnC/spawn_test.c, and run: natively, or under qemu-user for aarch64 on another
# machine. What qemu-user cannot emulate is skipped, each with a line saying why.
# docs/architecture.md, "Starting a handler". Needs root for the user switch and a writable
# cgroup2 for the cgroup paths (else those checks are skipped). The last line printed is
# "N passed, N failed".
#
#   deploy/test-spawn-arch.sh                 # this machine's architecture (uname -m)
#   ARCH=aarch64 deploy/test-spawn-arch.sh    # a Raspberry Pi's, cross-built, under qemu-aarch64
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

host=$(uname -m)
ARCH=${ARCH:-$host}
case $ARCH in
    arm64) ARCH=aarch64 ;;
    amd64) ARCH=x86_64 ;;
esac

emulator=
if [ "$ARCH" = "$host" ]; then
    cc=${CC:-$(command -v cc || command -v clang || true)}
    if [ -z "$cc" ]; then
        need_packages gcc libc6-dev
        cc=cc
    fi
    static=()
elif [ "$ARCH" = aarch64 ]; then
    need_packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross
    cc=aarch64-linux-gnu-gcc
    # Static: qemu-user then needs no aarch64 libraries, and drowse-spawner is linked so anyway.
    static=(-static)
    emulator=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
    if [ -z "$emulator" ]; then
        need_packages qemu-user
        emulator=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
        [ -n "$emulator" ] || die "qemu-user is installed but has no qemu-aarch64"
    fi
else
    die "ARCH=$ARCH: this script builds for this machine ($host) or, cross, for aarch64"
fi

out=$(mktemp -d /tmp/drowse-spawn-arch.XXXXXX)
trap 'rm -rf "$out"' EXIT

say "building the spawn code and its test for $ARCH with $cc"
# drowse-spawner exactly as the deploy scripts build it.
CC=$cc build_spawner "$out"
inc=(-ISources/CDrowseSpawn/include -ISources/CDrowseSys/include -ISources/CDrowseSys)
"$cc" -O2 -Wall -pthread "${static[@]}" "${inc[@]}" -o "$out/spawn_test" Tests/SpawnC/spawn_test.c \
    Sources/CDrowseSpawn/*.c Sources/CDrowseSys/shim.c Sources/CDrowseSys/spawner.c

if [ -n "$emulator" ]; then
    say "running it under $emulator ($("$emulator" --version | head -n 1))"
    "$emulator" "$out/spawn_test" --spawner "$out/drowse-spawner" --emulator "$emulator"
else
    say "running it on this $host machine"
    "$out/spawn_test" --spawner "$out/drowse-spawner"
fi
