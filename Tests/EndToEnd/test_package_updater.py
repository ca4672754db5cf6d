"""A remote-triggered update, end to end, with the example app deploy/apps/package-updater: a
signed notification names a .deb by URL and sha256; the app queues it as a discretionary
download, installs it with dpkg inside a background task and reports the installed version,
which the device publishes in its retained fleet status. Real dpkg, a real package (installed
and purged again by this test), nginx, mosquitto and drowsed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from drowse_e2e import DROWSE, notify_topic, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("dpkg-deb"),
                                reason="installs a package: needs root and dpkg")

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "apps" / "package-updater"
PACKAGE = "drowse-e2e-hello"


def build_deb(workdir: Path, version: str) -> Path:
    root = workdir / f"pkg-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "opt" / PACKAGE).mkdir(parents=True)
    (root / "opt" / PACKAGE / "VERSION").write_text(version + "\n")
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PACKAGE}\nVersion: {version}\nArchitecture: all\nMaintainer: Drowse tests <tests@localhost>\n"
        f"Description: a package the Drowse end-to-end tests install and purge\n")
    out = workdir / f"{PACKAGE}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


def installed_version() -> str | None:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", PACKAGE], capture_output=True, text=True)
    status, _, version = r.stdout.partition(" ")
    return version.strip() if r.returncode == 0 and status.startswith("ii") else None


@pytest.fixture
def purge():
    subprocess.run(["dpkg", "--purge", PACKAGE], capture_output=True)
    yield
    subprocess.run(["dpkg", "--purge", PACKAGE], capture_output=True)


def fleet_reports(broker) -> dict:
    r = subprocess.run([str(DROWSE), "fleet", "--broker", broker.url, "--timeout", "5s", "--json"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    [device] = json.loads(r.stdout)
    return device.get("reports") or {}


def test_signed_notification_installs_the_package_and_the_fleet_sees_its_version(broker, nginx, make_drowse, workdir, purge):
    d = make_drowse(broker=broker, handler_deadline="30s")
    key = d.base / "updates.key"
    d.cli_ok("keygen", str(key))
    other = d.base / "other.key"
    d.cli_ok("keygen", str(other))
    pub = (d.base / "updates.key.pub").read_text().strip()
    # The example app file, with the test's key, the checkout's handlers and the built drowse on PATH.
    path = f"PATH={DROWSE.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    text = (EXAMPLE / "package-updater.toml").read_text()
    text = text.replace('working_directory = "/opt/drowse-package-updater"', f'working_directory = "{EXAMPLE}"')
    text = text.replace('REPLACE WITH THE CONTENTS OF updates.key.pub', pub)
    text = text.replace('command = ["/usr/bin/python3"', f'command = ["/usr/bin/env", "{path}", "/usr/bin/python3"')
    assert text.count("/usr/bin/env") == 2, text
    d.add_app("package-updater", raw=text)
    d.start()
    broker.wait_subscribed(notify_topic("package-updater"))

    debs = {v: build_deb(workdir, v) for v in ("1.0", "2.0")}
    urls = {}
    for v, deb in debs.items():
        dest = nginx.www / "files" / deb.name
        shutil.copyfile(deb, dest)
        os.chmod(dest, 0o644)
        urls[v] = (nginx.url(f"/files/{deb.name}"), hashlib.sha256(deb.read_bytes()).hexdigest())

    def push(version: str, signer: Path = key, digest: str | None = None, note_id: str | None = None):
        url, sha = urls[version]
        d.push("package-updater", "-d", f"url={url}", "-d", f"sha256={digest or sha}", "-d", f"id={note_id or 'v' + version}",
               "--sign", str(signer))

    # Refused: signed by another key; a wrong sha256 downloads but never reaches dpkg.
    push("1.0", signer=other, note_id="forged")
    push("1.0", digest="0" * 64, note_id="bad-sha")
    wait_until(lambda: any(t["state"] == "failed" for t in d.json("transfers", "--app", "package-updater")), 30,
               what="the download with the wrong sha256 to fail")
    assert installed_version() is None

    push("1.0")
    wait_until(lambda: installed_version() == "1.0", 60, what="version 1.0 installed")
    wait_until(lambda: d.app("package-updater").get("report", {}).get("version") == "1.0", 20, what="1.0 reported")
    wait_until(lambda: fleet_reports(broker).get("package-updater", {}).get("version") == "1.0", 20,
               what="1.0 in the fleet status")
    assert Path(f"/opt/{PACKAGE}/VERSION").read_text() == "1.0\n"

    push("2.0")
    wait_until(lambda: installed_version() == "2.0", 60, what="version 2.0 installed")
    wait_until(lambda: fleet_reports(broker).get("package-updater", {}).get("version") == "2.0", 20,
               what="2.0 in the fleet status")
    # The same notification again (a redelivery) installs nothing twice: deduplicated by id.
    runs_before = len([t for t in d.json("transfers", "--app", "package-updater")])
    duplicates = lambda: sum(int(float(line.split()[-1])) for line in d.cli_ok("metrics").stdout.splitlines()  # noqa: E731
                             if line.startswith('drowse_notifications_total{outcome="duplicate"'))
    dup0 = duplicates()
    push("2.0")
    push("1.0", note_id="v1.0")  # the old one again: deduplicated, no downgrade
    wait_until(lambda: duplicates() >= dup0 + 2, 20, what="both to be received as duplicates")
    d.wait_idle()
    assert len(d.json("transfers", "--app", "package-updater")) == runs_before
    assert installed_version() == "2.0"
    # The report survives a restart and is published again.
    d.restart()
    d.wait_mqtt_connected(True)
    assert d.app("package-updater")["report"] == {"package": PACKAGE, "version": "2.0"}
