"""drowsed under a real systemd (PID 1, pure cgroup v2), installed from the .deb with apt."""

from __future__ import annotations

import re
import time

from conftest import STATE_DB, figure


def show(board, *props: str) -> dict[str, str]:
    out = board.sh(f"systemctl show drowsed -p {','.join(props)}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_active(board, timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        p = show(board, "ActiveState", "SubState", "MainPID", "Type", "Result", "NRestarts")
        if p["ActiveState"] == "active" and p["SubState"] == "running" and p["MainPID"] != "0":
            return p
        assert time.monotonic() < deadline, f"drowsed not active after {timeout}s: {p}"
        time.sleep(0.5)


def test_apt_install_starts_the_service_through_type_notify(installed):
    b = installed
    rc, out, _ = b.run("systemctl is-active drowsed")
    assert (rc, out.strip()) == (0, "active")
    rc, out, _ = b.run("systemctl is-enabled drowsed")
    assert (rc, out.strip()) == (0, "enabled")
    p = show(b, "Type", "ActiveState", "SubState", "NotifyAccess", "StatusErrno")
    # Type=notify: systemd moved it to active only on READY=1 (a start that never sends it times out).
    assert (p["Type"], p["ActiveState"], p["SubState"]) == ("notify", "active", "running"), p
    # And the daemon answers on its socket.
    rc, out, err = b.run("drowse status --json")
    assert rc == 0, err
    # The package's unit is the one running, from /usr/bin.
    assert "/usr/bin/drowsed" in b.sh("systemctl show drowsed -p ExecStart")


def test_kill_9_of_the_main_pid_is_restarted(configured):
    b = configured
    before = wait_active(b)
    b.sh(f"kill -9 {before['MainPID']}")
    # Restart=on-failure, RestartSec=5s: a new process, active again through READY=1.
    time.sleep(1)
    after = wait_active(b, timeout=60)
    assert after["MainPID"] != before["MainPID"]
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
    rc, _, err = b.run("drowse status --json")
    assert rc == 0, err


def test_journal_priority_warning_shows_warnings_only(configured):
    b = configured
    since = b.sh("date '+%Y-%m-%d %H:%M:%S'").strip()
    # A bad app file: drowsed reports it and skips the app (a warning), the rest keeps working.
    b.write_file("/etc/drowse/apps.d/broken.toml", 'id = "broken"\n[fetch]\ncommand = 42\n')
    try:
        b.sh("systemctl restart drowsed")
        wait_active(b)
        time.sleep(1)
        rc, warn, _ = b.run(f"journalctl -u drowsed --since '{since}' -p warning -o json --no-pager")
        assert rc == 0
        import json
        entries = [json.loads(line) for line in warn.splitlines() if line.strip()]
        drowsed = [e for e in entries if e.get("_COMM") in ("drowsed", "drowse")]
        assert drowsed, f"no warning from drowsed about the bad app file:\n{warn}"
        assert any("broken" in str(e.get("MESSAGE", "")) for e in drowsed), drowsed
        # Every line that -p warning shows has a priority of warning (4) or worse.
        assert all(int(e["PRIORITY"]) <= 4 for e in entries), entries
        # drowsed's info lines exist (journalctl without -p) but -p warning hides them: the
        # daemon's priorities reach the journal instead of everything being one level.
        rc, allout, _ = b.run(f"journalctl -u drowsed --since '{since}' -o json --no-pager")
        every = [json.loads(line) for line in allout.splitlines() if line.strip()]
        infos = [e for e in every if e.get("_COMM") in ("drowsed", "drowse") and int(e["PRIORITY"]) > 4]
        assert infos, "drowsed logged no info lines at all after a restart"
        assert not [e for e in drowsed if int(e["PRIORITY"]) > 4]
        rc, apps, _ = b.run("drowse apps --json")
        assert rc == 0 and '"broken"' in apps and '"boardapp"' in apps
    finally:
        b.sh("rm -f /etc/drowse/apps.d/broken.toml && systemctl restart drowsed")
        wait_active(b)


def test_systemd_analyze_security_exposure(installed):
    rc, out, err = installed.run("systemd-analyze security drowsed --no-pager")
    m = re.search(r"Overall exposure level for drowsed\.service:\s*([\d.]+)\s+(\w+)", out)
    assert m, out + err
    figure("systemd-analyze security exposure", f"{m.group(1)} {m.group(2)}")
    print(out)


def test_systemctl_stop_is_clean_and_keeps_the_state(configured):
    b = configured
    wait_active(b)
    b.sh("systemctl stop drowsed")
    p = show(b, "ActiveState", "SubState", "Result", "ExecMainStatus", "ExecMainCode")
    # Result=success: it stopped on SIGTERM within TimeoutStopSec, not killed, no failure status.
    assert (p["ActiveState"], p["Result"]) == ("inactive", "success"), p
    assert p["ExecMainStatus"] in ("0", "15"), p
    rc, out, _ = b.run(f"sqlite3 {STATE_DB} 'pragma integrity_check'")
    assert (rc, out.strip()) == (0, "ok")
    rc, _, _ = b.run("pgrep -x drowsed")
    assert rc == 1, "a drowsed process outlived systemctl stop"
    b.sh("systemctl start drowsed")
    wait_active(b)
