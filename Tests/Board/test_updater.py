"""A remote-triggered update on the board, end to end, with the example app
deploy/apps/package-updater installed as its header says: a notification signed on the host (the
provider's side) and published through the host's broker names a .deb on the host's nginx; the app
downloads it as a discretionary transfer, installs it with `dpkg -i` in a background task and
reports the version, which the board publishes in its retained fleet status. The second update is
cut by a power cut in the middle of its download and must still end installed, once."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from board import HOST_IN_GUEST
from conftest import DEVICE, REPO, figure
from test_power import integrity_ok, mqtt_connected, wait_for

pytestmark = pytest.mark.vm  # a power cut in the middle of the download

APP = "package-updater"
EXAMPLE = REPO / "deploy" / "apps" / APP
PACKAGE = "drowse-board-hello"
# Each install (postinst configure) appends its version here and syncs: how many times each
# version was really installed. /var/lib, because the handlers' dpkg runs under drowsed.service's
# ProtectSystem=strict (ReadWritePaths: /opt, /var/lib, ...), where /var/log/dpkg.log is read-only.
INSTALLS = f"/var/lib/{PACKAGE}.installs"
PAYLOAD = 4 * 1024 * 1024   # 11 s from /slow/ at nginx's 384 KiB/s


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def build_deb(workdir: Path, version: str) -> Path:
    root = workdir / f"pkg-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "opt" / PACKAGE).mkdir(parents=True)
    (root / "opt" / PACKAGE / "VERSION").write_text(version + "\n")
    (root / "opt" / PACKAGE / "payload").write_bytes(os.urandom(PAYLOAD))
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PACKAGE}\nVersion: {version}\nArchitecture: all\nMaintainer: Drowse tests <tests@localhost>\n"
        f"Description: a package the Drowse board tests install and purge\n")
    postinst = root / "DEBIAN" / "postinst"
    postinst.write_text(f'#!/bin/sh\nset -e\n[ "$1" = configure ] && echo {version} >>{INSTALLS} && sync {INSTALLS}\nexit 0\n')
    postinst.chmod(0o755)
    out = workdir / f"{PACKAGE}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "-Znone", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


class Provider:
    """The update server's side: the signing key, the packages on nginx, the push."""

    def __init__(self, workdir: Path, broker, nginx):
        self.key = Ed25519PrivateKey.generate()
        self.public = base64.b64encode(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
        self.broker, self.nginx = broker, nginx
        self.urls: dict[str, tuple[str, str]] = {}
        d = workdir / "updates"
        d.mkdir(exist_ok=True)
        for version, folder in (("1.0", "files"), ("2.0", "slow")):
            deb = build_deb(d, version)
            shutil.copyfile(deb, nginx.www / folder / deb.name)
            (nginx.www / folder / deb.name).chmod(0o644)
            self.urls[version] = (f"http://{HOST_IN_GUEST}:{nginx.port}/{folder}/{deb.name}",
                                  hashlib.sha256(deb.read_bytes()).hexdigest())

    def push(self, version: str) -> None:
        """As `drowse push --silent --sign KEY -d url=… -d sha256=…` does: a compact JWS (EdDSA)."""
        url, sha = self.urls[version]
        payload = json.dumps({"aps": {"content-available": 1}, "id": f"board-v{version}", "url": url, "sha256": sha})
        signing_input = b64url(b'{"alg":"EdDSA","typ":"JWT"}') + "." + b64url(payload.encode())
        jws = signing_input + "." + b64url(self.key.sign(signing_input.encode()))
        self.broker.publish(f"drowse/{DEVICE}/apps/{APP}/notify", jws.encode())

    def fleet_version(self) -> str | None:
        """The version in the board's retained status, as the fleet sees it."""
        r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(self.broker.port), "-t", f"drowse/{DEVICE}/status",
                            "-C", "1", "-W", "5"], capture_output=True, text=True, timeout=15)
        if r.returncode != 0 or not r.stdout.strip():
            return None
        return ((json.loads(r.stdout).get("reports") or {}).get(APP) or {}).get("version")


def installed(b) -> str | None:
    rc, out, _ = b.run(f"dpkg-query -W -f '${{db:Status-Abbrev}} ${{Version}}' {PACKAGE}")
    status, _, version = out.partition(" ")
    return version.strip() if rc == 0 and status.startswith("ii") else None


def installs(b) -> list[str]:
    return b.run(f"cat {INSTALLS} 2>/dev/null")[1].split()


@pytest.fixture
def updater(configured, broker, nginx, workdir):
    b = configured
    provider = Provider(workdir, broker, nginx)
    for name in ("on-notify.py", "on-transfers.py"):
        b.write_file(f"/opt/drowse-{APP}/{name}", (EXAMPLE / name).read_bytes(), mode="0755")
    toml = (EXAMPLE / f"{APP}.toml").read_text().replace("REPLACE WITH THE CONTENTS OF updates.key.pub", provider.public)
    assert provider.public in toml
    b.write_file(f"/etc/drowse/apps.d/{APP}.toml", toml)
    # On disk before the power cut below: a file written seconds before one comes back empty
    # (ext4's delayed allocation), and drowsed then skips the app ("key 'id': missing").
    b.sh("sync")
    # A restart, not the reload the app's header says: a reload does not tell the transfer
    # lifecycle about an added app's events_command (TransferLifecycle.apps is set at start-up
    # only), so the finished download would never reach on-transfers.py.
    b.sh("systemctl restart drowsed")
    broker.wait_subscribed(f"drowse/{DEVICE}/apps/{APP}/notify", timeout=60)
    yield provider
    b.run(f"rm -f /etc/drowse/apps.d/{APP}.toml && systemctl reload drowsed; dpkg --purge {PACKAGE}; rm -f {INSTALLS}")


def test_signed_update_installs_and_survives_a_power_cut_mid_download(updater, configured):
    b, provider = configured, updater
    assert installed(b) is None
    start = time.monotonic()
    provider.push("1.0")
    wait_for(b, "1.0 installed", lambda: installed(b) == "1.0", 120)
    wait_for(b, "1.0 in the fleet status", lambda: provider.fleet_version() == "1.0", 30)
    assert b.sh(f"cat /opt/{PACKAGE}/VERSION") == "1.0\n"
    figure("update 1.0: notification to installed and reported (s)", f"{time.monotonic() - start:.0f}")

    # 2.0 comes from /slow/: cut the power while it is being downloaded.
    url2 = provider.urls["2.0"][0]

    def download2() -> dict | None:
        ts = [t for t in json.loads(b.sh(f"drowse transfers --app {APP} --json")) if t["url"] == url2]
        return ts[0] if ts else None

    start = time.monotonic()
    provider.push("2.0")
    wait_for(b, "the 2.0 download under way", lambda: (lambda t: t and t["state"] == "running" and (t["bytes_done"] or 0) > 0)(download2()), 60)
    time.sleep(3)
    done = download2()["bytes_done"]
    b.power_cut()
    b.boot()
    integrity_ok(b)
    assert installs(b) == ["1.0"], "2.0 was installed before its download had finished"
    wait_for(b, "2.0 installed after the power cut", lambda: installed(b) == "2.0", 180)
    wait_for(b, "MQTT connected", lambda: mqtt_connected(b), 60)
    wait_for(b, "2.0 in the fleet status", lambda: provider.fleet_version() == "2.0", 30)
    figure("update 2.0, power cut mid-download: bytes at the cut / to installed and reported (s)",
           f"{done} / {time.monotonic() - start:.0f}")
    time.sleep(5)  # a second delivery of the download or the notification would install again by now
    assert installs(b) == ["1.0", "2.0"], installs(b)
    assert b.sh(f"cat /opt/{PACKAGE}/VERSION") == "2.0\n"
    assert [t["state"] for t in json.loads(b.sh(f"drowse transfers --app {APP} --json")) if t["url"] == url2] == ["completed"]
