#!/usr/bin/env bash
# Installs Drowse on a real board (Debian / Raspberry Pi OS with systemd) and starts it:
#   /usr/local/bin/drowse, drowsed (a link to it)      release build, Swift runtime linked in
#   /etc/systemd/system/drowsed.service                 deploy/drowsed.service
#   /etc/drowse/drowse.toml                             deploy/drowse.toml, only if absent
#   /etc/drowse/apps.d/                                 app definitions (left as they are)
#   group "drowse"                                      its members may use the whole local API
# Run it as your normal user (it builds as you and uses sudo to install), or as root.
set -euo pipefail
# shellcheck source=deploy/common.sh
. "$(dirname "$0")/common.sh"
cd "$DROWSE_ROOT"

command -v systemctl >/dev/null 2>&1 || die "systemd is required (systemctl not found)"
need_packages "${DROWSE_BUILD_PACKAGES[@]}"
if [ -n "${SUDO_USER:-}" ] && ! command -v swift >/dev/null 2>&1; then
    die "swift is not on root's PATH under sudo: run deploy/install.sh as $SUDO_USER (it uses sudo itself)"
fi
need_swift

say "swift build ${DROWSE_RELEASE_FLAGS[*]}"
swift build "${DROWSE_RELEASE_FLAGS[@]}"
deploy/order-text.sh          # the idle daemon's code together (when valgrind is installed)
BIN=$(swift build "${DROWSE_RELEASE_FLAGS[@]}" --show-bin-path)

say "installing into /usr/local/bin, /etc/drowse and /etc/systemd/system"
as_root install -d -m 0755 /usr/local/bin /etc/drowse /etc/drowse/apps.d /usr/local/share/doc/drowse
as_root install -m 0755 "$BIN/drowse" /usr/local/bin/
# One multi-call program: drowsed is drowse under another name (replaces an older separate binary).
as_root ln -sfn drowse /usr/local/bin/drowsed
# The spawn helper program (drowsed finds it in ../libexec/drowse/ from its own binary).
link_drowsed "$BIN"
as_root install -d -m 0755 /usr/local/libexec/drowse
as_root install -m 0755 "$BIN/drowse-spawner" /usr/local/libexec/drowse/
as_root install -m 0644 deploy/drowsed.service /etc/systemd/system/drowsed.service
as_root install -m 0644 README.md /usr/local/share/doc/drowse/README.md
if as_root test -e /etc/drowse/drowse.toml; then
    say "keeping the existing /etc/drowse/drowse.toml (the new example: deploy/drowse.toml)"
else
    as_root install -m 0644 deploy/drowse.toml /etc/drowse/drowse.toml
fi

# Root and members of "drowse" see and change every app over the local API; an app's user
# only its own app.
getent group drowse >/dev/null || as_root groupadd --system drowse

as_root systemctl daemon-reload
as_root systemctl enable drowsed
# restart, not start: a re-install must replace a running older binary.
as_root systemctl restart drowsed
as_root systemctl --no-pager --lines=5 status drowsed || true

me=${SUDO_USER:-$(id -un)}
cat <<EOF

Drowse is installed and running (journalctl -u drowsed -f shows its log).
  drowse status                     # as root, or as a member of the drowse group:
  sudo usermod -aG drowse $me      # then log in again
Add apps as /etc/drowse/apps.d/<id>.toml (examples: deploy/apps.d), then: sudo systemctl reload drowsed
Configure MQTT in /etc/drowse/drowse.toml, then: sudo systemctl restart drowsed (a reload applies apps only)
EOF
