"""The updates app (deploy/apps/updates, docs/updates.md) up to the install, on this machine: a
signed notification names a package; `drowse update notified`, run by drowsed as the app's
notification handler, records the update and has drowsed download the file as a transfer of
session update-<id>; `drowse update downloaded` takes the verified file in. Each step reaches the
retained fleet status under `updates`. Bad notifications are refused and leave nothing behind.

This machine has no systemd, so the install itself cannot start here: the update stays
`waiting` and `drowse update install` says why. The install, the health check, the rollback and
the maintenance window run in the board suite (Tests/Board/test_updates.py), under systemd."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from drowse_e2e import DROWSE, notify_topic, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the updates app runs as root, as installing packages needs")

APP_FILE = Path(__file__).resolve().parents[2] / "deploy" / "apps" / "updates" / "updates.toml"
PACKAGE = "drowse-e2e-hello"


def build_deb(workdir: Path, version: str) -> Path:
    root = workdir / f"pkg-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "opt" / PACKAGE).mkdir(parents=True)
    (root / "opt" / PACKAGE / "VERSION").write_text(version + "\n")
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PACKAGE}\nVersion: {version}\nArchitecture: all\nMaintainer: Drowse tests <tests@localhost>\n"
        f"Description: a package the Drowse end-to-end tests download\n")
    out = workdir / f"{PACKAGE}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


def fleet_updates(broker) -> dict:
    r = subprocess.run([str(DROWSE), "fleet", "--broker", broker.url, "--timeout", "3s", "--json"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    [device] = json.loads(r.stdout)
    return device.get("updates") or {}


def test_a_signed_update_is_downloaded_recorded_and_shown_to_the_fleet(broker, nginx, make_drowse, workdir):
    d = make_drowse(broker=broker, handler_deadline="30s")
    key, other = d.base / "updates.key", d.base / "other.key"
    d.cli_ok("keygen", str(key))
    d.cli_ok("keygen", str(other))
    text = APP_FILE.read_text().replace("REPLACE WITH THE CONTENTS OF updates.key.pub", (d.base / "updates.key.pub").read_text().strip())
    # The built drowse, told where this drowsed keeps its state.
    text = text.replace('"/usr/bin/drowse", "update", "notified"]', f'"{DROWSE}", "update", "notified", "--config", "{d.config}"]')
    text = text.replace('"/usr/bin/drowse", "update", "downloaded"]', f'"{DROWSE}", "update", "downloaded", "--config", "{d.config}"]')
    assert text.count(str(DROWSE)) == 2, text
    d.add_app("updates", raw=text)
    d.start()
    broker.wait_subscribed(notify_topic("updates"))

    deb = build_deb(workdir, "1.0")
    shutil.copyfile(deb, nginx.www / "files" / deb.name)
    os.chmod(nginx.www / "files" / deb.name, 0o644)
    url, sha = nginx.url(f"/files/{deb.name}"), hashlib.sha256(deb.read_bytes()).hexdigest()
    updates = Path(d.state_dir) / "updates"

    def push(note_id: str, signer: Path = key, **fields) -> None:
        args = ["--id", note_id, "--sign", str(signer)]
        for k, v in {"url": url, "sha256": sha, "package": PACKAGE, **fields}.items():
            if v is not None:
                args += ["-d", f"{k}={v}"]
        d.push("updates", *args)

    # Refused, leaving no update behind: another key's signature; a payload without a sha256; an
    # id that would name a directory elsewhere.
    push("forged", signer=other)
    push("no-sha", sha256=None)
    push("../escape")
    # A sha256 that is not the file's: downloaded, refused by drowsed, the update fails.
    push("bad-sha", sha256="0" * 64)
    wait_until(lambda: (fleet_updates(broker).get(PACKAGE) or {}).get("state") == "failed", 60, what="the bad-sha update failed")
    assert sorted(p.name for p in updates.iterdir()) == ["bad-sha"], list(updates.iterdir())
    failed = fleet_updates(broker)[PACKAGE]
    assert failed["id"] == "bad-sha" and "the download failed" in failed["reason"], failed

    # The good one, without `package`: downloading (under its id), then the verified file is the
    # update's, shown under the package it holds, waiting for its install.
    push("hello-1.0", health_for="5s", package=None)
    wait_until(lambda: (fleet_updates(broker).get(PACKAGE) or {}).get("id") == "hello-1.0"
               and fleet_updates(broker)[PACKAGE]["state"] == "waiting", 60, what="hello-1.0 waiting")
    u = fleet_updates(broker)[PACKAGE]
    assert set(u["times"]) == {"downloading", "waiting"} and u["times"]["downloading"] <= u["times"]["waiting"], u
    assert (u["from"], u["to"]) == (None, "1.0"), u
    assert hashlib.sha256((updates / "hello-1.0" / "package.deb").read_bytes()).hexdigest() == sha
    request = json.loads((updates / "hello-1.0" / "update.json").read_text())
    assert (request["package"], request["health_for"]) == (None, 5), request
    [t] = [t for t in d.json("transfers", "--app", "updates") if t["session"] == "update-hello-1.0"]
    assert t["state"] == "completed" and t["url"] == url, t
    listed = json.loads(d.cli_ok("update", "list", "--config", str(d.config), "--json").stdout)
    assert [(x["update"]["id"], x["update"]["state"]) for x in listed] == [("bad-sha", "failed"), ("hello-1.0", "waiting")], listed

    # The same notification again (a redelivery): deduplicated by drowsed, nothing new.
    transfers = len(d.json("transfers", "--app", "updates"))
    push("hello-1.0")
    d.wait_idle()
    assert len(d.json("transfers", "--app", "updates")) == transfers

    # The status after a restart reads the updates from their directories.
    d.restart()
    d.wait_mqtt_connected(True)
    assert fleet_updates(broker)[PACKAGE]["state"] == "waiting"

    # Without systemd an install cannot outlive drowsed: refused, saying why.
    r = d.cli("update", "install", str(deb), "--config", str(d.config), "--id", "by-hand")
    assert r.returncode != 0 and "systemd is not running" in r.stderr, r.stderr
