"""Apps under systemd's delegation on a pure cgroup v2 tree: `systemctl reload` takes a new app
without a restart, and an app's [limits] are held by its cgroup (pids.max, memory.max) with the
controllers the unit's delegated subtree gives drowsed."""

from __future__ import annotations

import json
import time

from conftest import figure
from test_systemd import show, wait_active

BOMB = """
import os, time
# Tries to start 200 children that sleep; counts how many started (a refused fork raises).
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
with open("/var/lib/board-limits/started", "w") as f:
    f.write(str(n))
    f.flush()
    os.fsync(f.fileno())
"""


def app_cgroup(board, app: str) -> str:
    cg = show(board, "ControlGroup")["ControlGroup"]
    return f"/sys/fs/cgroup{cg}/apps/{app}"


def test_reload_takes_a_new_app_and_limits_are_held_by_the_app_cgroup(configured):
    b = configured
    before = wait_active(b)
    b.sh("mkdir -p /var/lib/board-limits && chown nobody:nogroup /var/lib/board-limits")
    b.write_file("/var/lib/board-limits/bomb.py", BOMB)
    b.write_file("/var/lib/board-limits/hog.py", "x = bytearray(256 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\n")
    b.write_file("/etc/drowse/apps.d/bomb.toml",
                 'id = "bomb"\nuser = "nobody"\nworking_directory = "/var/lib/board-limits"\n'
                 '[fetch]\ncommand = ["/usr/bin/python3", "/var/lib/board-limits/bomb.py"]\n'
                 '[limits]\nprocesses = 20\n')
    b.write_file("/etc/drowse/apps.d/hog.toml",
                 'id = "hog"\nuser = "nobody"\nworking_directory = "/var/lib/board-limits"\n'
                 '[fetch]\ncommand = ["/usr/bin/python3", "/var/lib/board-limits/hog.py"]\n'
                 '[limits]\nmemory = "64M"\n')
    b.sh("systemctl reload drowsed")
    deadline = time.monotonic() + 30
    while True:
        apps = {a["id"] for a in json.loads(b.sh("drowse apps --json"))}
        if {"bomb", "hog"} <= apps:
            break
        assert time.monotonic() < deadline, f"the reload did not add the apps: {apps}"
        time.sleep(0.5)
    after = wait_active(b)
    assert after["MainPID"] == before["MainPID"], "systemctl reload restarted drowsed"

    bomb = json.loads(b.sh("drowse apps show bomb --json"))["limits"]
    hog = json.loads(b.sh("drowse apps show hog --json"))["limits"]
    figure("limits enforced by", f"processes: {bomb.get('processes_enforced_by')}, memory: {hog.get('memory_enforced_by')}")
    assert bomb["processes_enforced_by"] == "cgroup", bomb
    assert hog["memory_enforced_by"] == "cgroup", hog

    out = json.loads(b.sh("drowse fetch bomb --json", timeout=120))
    started = int(b.sh("cat /var/lib/board-limits/started").strip())
    figure("fork bomb under processes = 20", f"{started} of 200 children started ({out['result']})")
    assert started <= 20, started
    assert b.sh(f"cat {app_cgroup(b, 'bomb')}/pids.max").strip() == "20"
    assert int(b.sh(f"grep max {app_cgroup(b, 'bomb')}/pids.events").split()[1]) > 0

    out = json.loads(b.sh("drowse fetch hog --json", timeout=120))
    assert out["result"] == "failed", out
    assert b.sh(f"cat {app_cgroup(b, 'hog')}/memory.max").strip() == str(64 * 1024 * 1024)
    figure("256 MiB allocation under memory = 64M", f"{out['result']} ({out['ending']})")
    b.sh("rm -f /etc/drowse/apps.d/bomb.toml /etc/drowse/apps.d/hog.toml && systemctl reload drowsed")
