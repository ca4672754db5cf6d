"""Updates a fleet can trust, on the board (docs/updates.md): the updates app of
deploy/apps/updates installed as its header says, notifications signed on the host and published
through the host's broker, packages on the host's nginx.

- drowse updates itself (N -> N+1) from a notification: drowsed downloads the .deb, the install
  runs in a unit of its own through drowsed's restart, the health check passes and the fleet
  status shows every step;
- a drowse whose daemon does not start is rolled back to the version before it by that unit;
- a package whose service fails, and one whose check command fails, are rolled back to the
  version kept on the device (the first one rebuilt from dpkg's database);
- a maintenance window holds the install (not the download) until it opens, and a notification's
  install_by overrides it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import hashlib
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from board import HOST_IN_GUEST
from conftest import DEVICE, REPO, figure
from test_power import wait_for

APP = "updates"
APP_FILE = REPO / "deploy" / "apps" / "updates" / "updates.toml"
SVC = "drowse-board-svc"
STATUS = f"drowse/{DEVICE}/status"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def build_svc(workdir: Path, version: str, exec_start: str, restart: str = "Restart=on-failure\nRestartSec=1\n") -> Path:
    """A package with a systemd service (started by its postinst, as Debian's packages are)."""
    root = workdir / f"svc-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    unit = root / "usr" / "lib" / "systemd" / "system" / f"{SVC}.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(f"[Unit]\nDescription=Drowse board test service {version}\nStartLimitIntervalSec=0\n[Service]\n"
                    f"ExecStart={exec_start}\n{restart}[Install]\nWantedBy=multi-user.target\n")
    (root / "usr" / "share" / SVC).mkdir(parents=True)
    (root / "usr" / "share" / SVC / "VERSION").write_text(version + "\n")
    (root / "DEBIAN" / "control").write_text(
        f"Package: {SVC}\nVersion: {version}\nArchitecture: all\nMaintainer: Drowse tests <tests@localhost>\n"
        "Description: a service the Drowse board tests update and roll back\n")
    postinst = root / "DEBIAN" / "postinst"
    postinst.write_text(f"#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then systemctl daemon-reload; "
                        f"systemctl enable {SVC}.service; systemctl restart {SVC}.service || true; fi\nexit 0\n")
    postinst.chmod(0o755)
    prerm = root / "DEBIAN" / "prerm"
    prerm.write_text(f"#!/bin/sh\nset -e\n[ \"$1\" = remove ] && systemctl stop {SVC}.service || true\nexit 0\n")
    prerm.chmod(0o755)
    out = workdir / f"{SVC}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


# A maintainer script that finds this file stops itself there, after saying so in STOPPED: the
# host then cuts the power at that exact step of the install.
CUT = "/run/drowse-test-cut-{}"
STOPPED = "/run/drowse-test-stopped"


def stop_here(step: str) -> str:
    return f'if [ -e {CUT.format(step)} ]; then echo {step} >{STOPPED}; kill -STOP $$; fi\n'


def reversion(deb: Path, workdir: Path, version: str, broken: bool = False) -> Path:
    """The drowse package under another version; `broken`: its drowsed.service cannot start.
    Its preinst (the unpack's first step) and postinst (the configuration's) can stop for a cut."""
    root = workdir / f"drowse-{version}"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(root)], check=True, capture_output=True)
    preinst = root / "DEBIAN" / "preinst"
    if not preinst.exists():
        preinst.write_text("#!/bin/sh\nset -e\nexit 0\n")
    preinst.chmod(0o755)
    for script, step in ((preinst, "unpacking"), (root / "DEBIAN" / "postinst", "configuring")):
        head, _, rest = script.read_text().partition("\n")
        script.write_text(head + "\n" + stop_here(step) + rest)
    control = root / "DEBIAN" / "control"
    control.write_text("".join(f"Version: {version}\n" if line.startswith("Version:") else line
                               for line in control.read_text().splitlines(keepends=True)))
    if broken:
        unit = root / "usr" / "lib" / "systemd" / "system" / "drowsed.service"
        unit.write_text(unit.read_text().replace("ExecStart=/usr/bin/drowsed", "ExecStart=/bin/false /usr/bin/drowsed"))
    arch = subprocess.run(["dpkg-deb", "-f", str(deb), "Architecture"], check=True, capture_output=True, text=True).stdout.strip()
    out = workdir / f"drowse_{version}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


class StatusLog:
    """Every status the board publishes, as the fleet sees them (a live subscription)."""

    def __init__(self, port: int):
        self.lines: list[dict] = []
        self.proc = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", STATUS],
                                     stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                pass

    def states(self, package: str, update_id: str) -> list[str]:
        """The states of one update, in the order the statuses showed them (repeats folded)."""
        out: list[str] = []
        for s in self.lines:
            u = (s.get("updates") or {}).get(package)
            if u and u.get("id") == update_id and (not out or out[-1] != u["state"]):
                out.append(u["state"])
        return out

    def report(self, package: str) -> dict | None:
        for s in reversed(self.lines):
            u = (s.get("updates") or {}).get(package)
            if u:
                return u
        return None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Provider:
    """The update server's side: the key, the packages on nginx, the signed push."""

    def __init__(self, broker, nginx):
        self.key = Ed25519PrivateKey.generate()
        self.public = base64.b64encode(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
        self.broker, self.nginx = broker, nginx

    def offer(self, deb: Path) -> tuple[str, str]:
        shutil.copyfile(deb, self.nginx.www / "files" / deb.name)
        (self.nginx.www / "files" / deb.name).chmod(0o644)
        return f"http://{HOST_IN_GUEST}:{self.nginx.port}/files/{deb.name}", hashlib.sha256(deb.read_bytes()).hexdigest()

    def push(self, update_id: str, deb: Path, **fields) -> None:
        url, sha = self.offer(deb)
        self.push_payload(update_id, url, sha, **fields)

    def push_payload(self, update_id: str, url: str, sha: str, **fields) -> None:
        """As `drowse push --silent --priority 10 --sign KEY --id ID -d url=… -d sha256=…` does: a compact
        JWS (EdDSA). Priority 10 runs at once: the suite sends the app more than the 12 an hour
        that priority 5 may wake it for ([notifications] max_per_hour)."""
        payload = json.dumps({"aps": {"content-available": 1}, "id": update_id, "priority": 10, "url": url, "sha256": sha, **fields})
        signing_input = b64url(b'{"alg":"EdDSA","typ":"JWT"}') + "." + b64url(payload.encode())
        jws = signing_input + "." + b64url(self.key.sign(signing_input.encode()))
        self.broker.publish(f"drowse/{DEVICE}/apps/{APP}/notify", jws.encode())


def installed(b, package: str) -> str | None:
    rc, out, _ = b.run(f"dpkg-query -W -f '${{db:Status-Abbrev}} ${{Version}}' {package}")
    status, _, version = out.partition(" ")
    return version.strip() if rc == 0 and status.startswith("ii") else None


def audit_clean(b) -> None:
    """dpkg's database is consistent: nothing half-installed or half-configured."""
    rc, out, err = b.run("dpkg --audit")
    assert rc == 0 and not out.strip(), out + err


def diagnose(b, log: StatusLog, update_id: str) -> None:
    """What the board says of an update that did not get where a test waited for it."""
    print("statuses seen:", json.dumps([s.get("updates") for s in log.lines][-8:]))
    print(b.run(f"drowse update list; tail -n 5 /etc/drowse/drowse.toml; systemctl list-timers --all --no-pager | grep drowse; "
                f"journalctl -u drowse-update-{update_id} --no-pager | tail -n 40; journalctl -u drowsed --no-pager | tail -n 40")[1])


def waiting_for(b, log: StatusLog, update_id: str, what: str, pred, timeout: float):
    try:
        return wait_for(b, what, pred, timeout)
    except AssertionError:
        diagnose(b, log, update_id)
        raise


def final(log: StatusLog, b, package: str, update_id: str, timeout: float) -> dict:
    def done():
        u = log.report(package)
        return u if u and u["id"] == update_id and u["state"] in ("committed", "rolled-back", "failed") else None
    return waiting_for(b, log, update_id, f"update {update_id} over", done, timeout)


@pytest.fixture
def updates(configured, broker, nginx, workdir):
    b = configured
    provider = Provider(broker, nginx)
    toml = APP_FILE.read_text().replace("REPLACE WITH THE CONTENTS OF updates.key.pub", provider.public)
    assert provider.public in toml
    b.write_file(f"/etc/drowse/apps.d/{APP}.toml", toml)
    b.sh("sync && systemctl reload drowsed")
    broker.wait_subscribed(f"drowse/{DEVICE}/apps/{APP}/notify", timeout=60)
    log = StatusLog(broker.port)
    d = workdir / "updates"
    d.mkdir(exist_ok=True)
    yield b, provider, log, d
    log.close()


def test_a_broken_drowse_rolls_back_and_a_good_one_updates_itself(updates):
    b, provider, log, d = updates
    base = Path(os.environ["BOARD_DEB"])
    before = installed(b, "drowse")
    assert before

    # First a drowse whose daemon cannot start: the unit of its own rolls it back to the version
    # apt installed, whose package it rebuilt from dpkg's database before installing.
    broken = reversion(base, d, before + "+up1", broken=True)
    start = time.monotonic()
    provider.push("drowse-up1", broken, package="drowse", health_for=10, check_within=40)
    u = final(log, b, "drowse", "drowse-up1", 400)
    assert (u["state"], u["from"], u["to"]) == ("rolled-back", before, before + "+up1"), u
    assert "drowsed.service was not active for 10 s within 40 s" in u["reason"], u
    assert installed(b, "drowse") == before
    wait_for(b, "drowsed active again", lambda: b.run("systemctl is-active drowsed")[1].strip() == "active", 60)
    assert "ExecStart=/usr/bin/drowsed" in b.sh("systemctl cat drowsed")
    audit_clean(b)
    figure("self-update to a drowse that cannot start: notification to rolled back (s)", f"{time.monotonic() - start:.0f}")

    # Then N -> N+1: drowsed downloads it, the install outlives drowsed's restart, the check passes.
    pid = b.sh("systemctl show -p MainPID --value drowsed").strip()
    good = reversion(base, d, before + "+up2")
    start = time.monotonic()
    provider.push("drowse-up2", good, package="drowse", health_for=10, check_within=120)
    u = final(log, b, "drowse", "drowse-up2", 400)
    assert (u["state"], u["from"], u["to"]) == ("committed", before, before + "+up2"), u
    assert installed(b, "drowse") == before + "+up2"
    assert b.sh("systemctl is-active drowsed").strip() == "active"
    assert b.sh("systemctl show -p MainPID --value drowsed").strip() != pid, "drowsed was not restarted on the new version"
    states = log.states("drowse", "drowse-up2")
    assert states[0] == "downloading" and states[-2:] == ["checking", "committed"], states
    assert set(u["times"]) >= {"downloading", "waiting", "installing", "checking", "committed"}, u
    audit_clean(b)
    # The kept package is the version now installed: the next update's rollback.
    assert b.sh("ls /var/lib/drowse/updates/kept/").split() == [f"drowse_{before}+up2.deb".replace(":", "%3a")]
    figure("self-update N -> N+1: notification to committed (s)", f"{time.monotonic() - start:.0f}")


def test_a_failing_service_or_check_rolls_back_to_the_kept_version(updates):
    b, provider, log, d = updates
    good = build_svc(d, "1.0", "/bin/sleep infinity")
    provider.push("svc-1", good, health_for=5, check_within=60, service=f"{SVC}.service")
    u = final(log, b, SVC, "svc-1", 240)
    assert (u["state"], u["from"], u["to"]) == ("committed", None, "1.0"), u
    assert b.sh(f"systemctl is-active {SVC}").strip() == "active"

    # 2.0's service exits at once: not active for 5 s within 20 s.
    bad = build_svc(d, "2.0", "/bin/false")
    provider.push("svc-2", bad, health_for=5, check_within=20, service=f"{SVC}.service")
    u = final(log, b, SVC, "svc-2", 240)
    assert (u["state"], u["from"], u["to"]) == ("rolled-back", "1.0", "2.0"), u
    assert f"{SVC}.service was not active for 5 s within 20 s" in u["reason"], u
    assert installed(b, SVC) == "1.0"
    assert b.sh(f"cat /usr/share/{SVC}/VERSION") == "1.0\n"
    wait_for(b, f"{SVC} active on 1.0", lambda: b.run(f"systemctl is-active {SVC}")[1].strip() == "active", 30)

    # 2.5's service crashes every 2.5 s and systemd restarts it within 0.1 s: active at nearly
    # every look a second apart, but never for 5 s in one run.
    crashy = build_svc(d, "2.5", "/bin/sh -c 'sleep 2.5; exit 1'", restart="Restart=always\nRestartSec=100ms\n")
    provider.push("svc-25", crashy, health_for=5, check_within=15, service=f"{SVC}.service")
    u = final(log, b, SVC, "svc-25", 240)
    assert (u["state"], u["from"], u["to"]) == ("rolled-back", "1.0", "2.5"), u
    assert re.search(r"stops? seen", u["reason"]), u
    assert installed(b, SVC) == "1.0"
    wait_for(b, f"{SVC} active on 1.0", lambda: b.run(f"systemctl is-active {SVC}")[1].strip() == "active", 30)

    # 3.0 runs, but the update's own check fails.
    checked = build_svc(d, "3.0", "/bin/sleep infinity")
    provider.push("svc-3", checked, health_for=3, check_within=30, service=f"{SVC}.service",
                  check=f"grep -q 4.0 /usr/share/{SVC}/VERSION")
    u = final(log, b, SVC, "svc-3", 240)
    assert (u["state"], u["to"]) == ("rolled-back", "3.0"), u
    assert "the check command exited 1" in u["reason"], u
    assert installed(b, SVC) == "1.0"
    audit_clean(b)
    b.run(f"dpkg --purge {SVC}")


def test_the_window_holds_the_install_until_a_clock_step_reaches_it_and_install_by_overrides_it(updates):
    """[updates] window holds the install, not the download. On a board without a real-time clock
    the wall clock jumps when a time sync sets it: a step of the clock into the window starts the
    install (systemd's timer follows the wall clock). Outside the window, install_by wins."""
    b, provider, log, d = updates
    # A window two hours ahead of the guest's clock: only a step of the clock brings it.
    opens = (int(b.sh("date +%s")) + 7200) // 60 * 60
    hm = lambda t: b.sh(f"date -d @{t} +%H:%M").strip()
    b.sh(f"printf '\\n[updates]\\nwindow = [\"{hm(opens)}-{hm(opens + 3600)}\"]\\n' >>/etc/drowse/drowse.toml")
    try:
        first = build_svc(d, "5.0", "/bin/sleep infinity")
        provider.push("svc-5", first, health_for=3, check_within=30)
        waiting_for(b, log, "svc-5", "svc-5 downloaded and waiting", lambda: (log.report(SVC) or {}).get("state") == "waiting"
                    and log.report(SVC)["id"] == "svc-5", 120)
        assert installed(b, SVC) != "5.0"
        assert b.run("systemctl is-active drowse-update-svc-5.timer")[1].strip() == "active"
        # The timer waits for the window's opening, on the wall clock.
        elapse = b.sh("systemctl show -P NextElapseUSecRealtime drowse-update-svc-5.timer").strip()   # "Wed 2026-12-02 17:57:00 UTC"
        next_s = int(b.sh(f"date -d '{elapse.split(' ', 1)[-1]}' +%s"))
        assert abs(next_s - opens) <= 1, (elapse, next_s, opens)
        # A time sync's step into the window.
        stepped = opens + 5
        b.sh(f"date -s @{stepped} >/dev/null")
        u = final(log, b, SVC, "svc-5", 180)
        assert u["state"] == "committed", u
        assert u["times"]["waiting"] < opens <= u["times"]["installing"], (u, opens)
        figure("window: seconds from a clock step into the window to the install", f"{u['times']['installing'] - stepped:.1f}")
        # Back to the host's time for what follows (the guest has no time sync).
        b.sh(f"date -s @{time.time():.3f} >/dev/null")

        # Outside the window (two hours ahead again), install_by wins.
        later = (int(b.sh("date +%s")) + 7200) // 60 * 60
        b.sh(f"sed -i 's/^window = .*/window = [\"{hm(later)}-{hm(later + 60)}\"]/' /etc/drowse/drowse.toml")
        by = int(b.sh("date +%s")) + 30
        second = build_svc(d, "6.0", "/bin/sleep infinity")
        provider.push("svc-6", second, health_for=3, check_within=30, install_by=by)
        waiting_for(b, log, "svc-6", "svc-6 waiting", lambda: (log.report(SVC) or {}).get("id") == "svc-6"
                    and log.report(SVC)["state"] == "waiting", 120)
        u = final(log, b, SVC, "svc-6", 180)
        assert u["state"] == "committed", u
        assert u["times"]["installing"] >= by - 1, (u, by)
        assert installed(b, SVC) == "6.0"
    finally:
        b.sh(f"date -s @{time.time():.3f} >/dev/null")
        b.sh("sed -i '/^\\[updates\\]$/,$d' /etc/drowse/drowse.toml")
        b.run(f"dpkg --purge {SVC}")


@pytest.mark.vm  # power cuts: not on a board over ssh
def test_power_cuts_at_each_step_of_a_self_update(updates, broker):
    """A power cut while drowsed downloads the package, while dpkg unpacks it, while it configures
    it, while drowsed restarts on it, during the health check, and during a rollback: each ends
    with a working drowsed, one version installed and dpkg's database consistent."""
    b, provider, log, d = updates
    base = Path(os.environ["BOARD_DEB"])
    # drowsed's start can stop for a cut too (as root, outside its sandbox: "+").
    b.sh("mkdir -p /etc/systemd/system/drowsed.service.d")
    # systemd reads "$$" as "$". Synced: a file written just before a power cut can come back empty.
    b.write_file("/etc/systemd/system/drowsed.service.d/cut.conf",
                 f"[Service]\nExecStartPre=+/bin/sh -c '{stop_here('restarting').strip().replace('$', '$$')}'\n")
    b.sh("sync && systemctl daemon-reload")
    stages = [("downloading", False), ("unpacking", False), ("configuring", False), ("restarting", False), ("checking", False),
              ("rolling back", True)]
    # BOARD_UPDATE_CUTS=restarting,checking: only those (all by default).
    chosen = os.environ.get("BOARD_UPDATE_CUTS")
    if chosen:
        stages = [s for s in stages if s[0] in chosen.split(",")]
    seen: list[str] = []

    def step_of(update_id: str) -> str | None:
        rc, out, _ = b.run(f"cat /var/lib/drowse/updates/{update_id}/state.json")
        return json.loads(out)["step"] if rc == 0 and out.strip() else None

    def cut_and_boot() -> None:
        b.power_cut()
        b.boot()

    try:
        for n, (stage, broken) in enumerate(stages):
            before = installed(b, "drowse")
            version = f"{before.split('+')[0]}+cut{n}"
            uid = f"drowse-cut{n}-{stage.split()[0]}"
            deb = reversion(base, d, version, broken=broken)
            start = time.monotonic()
            if stage in ("unpacking", "configuring", "restarting"):
                b.sh(f"touch {CUT.format(stage)}")
            if stage == "downloading":
                # From /slow/ (384 KiB/s): the download is under way for seconds.
                slow = provider.nginx.www / "slow" / deb.name
                shutil.copyfile(deb, slow)
                slow.chmod(0o644)
                url = f"http://{HOST_IN_GUEST}:{provider.nginx.port}/slow/{deb.name}"
                sha = hashlib.sha256(deb.read_bytes()).hexdigest()
                provider.push_payload(uid, url, sha, package="drowse", health_for=5, check_within=120)

                def running():
                    ts = json.loads(b.sh(f"drowse transfers --app {APP} --json"))
                    return any(t["session"] == f"update-{uid}" and t["state"] == "running" and (t["bytes_done"] or 0) > 0 for t in ts)
                waiting_for(b, log, uid, "the download under way", running, 120)
            else:
                provider.push(uid, deb, package="drowse", health_for=5, check_within=40 if broken else 120)
                if stage in ("unpacking", "configuring", "restarting"):
                    waiting_for(b, log, uid, f"the install stopped at {stage}", lambda: b.run(f"cat {STOPPED}")[1].strip() == stage, 240)
                elif stage == "checking":
                    waiting_for(b, log, uid, "the check under way", lambda: step_of(uid) == "check", 240)
                else:
                    waiting_for(b, log, uid, "the rollback under way", lambda: step_of(uid) == "rollback", 300)
            cut_and_boot()
            u = final(log, b, "drowse", uid, 400)
            want = ("rolled-back", before) if broken else ("committed", version)
            assert (u["state"], installed(b, "drowse")) == want, (stage, u, installed(b, "drowse"))
            wait_for(b, "drowsed active", lambda: b.run("systemctl is-active drowsed")[1].strip() == "active", 90)
            audit_clean(b)
            assert b.sh("dpkg-query -W -f '${Version}\\n' drowse").split() == [want[1]]
            rc, out, _ = b.run("sqlite3 /var/lib/drowse/state.db 'pragma integrity_check'")
            assert (rc, out.strip()) == (0, "ok"), out
            seen.append(f"{stage}: {u['state']} in {time.monotonic() - start:.0f} s")
    finally:
        b.run(f"rm -f /etc/systemd/system/drowsed.service.d/cut.conf {CUT.format('*')} {STOPPED}; systemctl daemon-reload")
        figure("self-update power cuts (stage: outcome, seconds from push)", "; ".join(seen))
