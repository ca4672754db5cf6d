"""Per-app limits: `[limits] processes` and `[limits] memory` in an app file,
defaults under `[limits]` in drowse.toml, held by the app's cgroup (pids.max, memory.max) where its
tree has those controllers, else by rlimits (RLIMIT_NPROC, per user; RLIMIT_DATA). A fork bomb is
capped and cleaned up, a memory hog fails, and drowsed and the other apps are unaffected.
"""

from __future__ import annotations

import json
import os
import pwd
import time

import pytest

from drowse_e2e import wait_until
from test_config import check_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run handlers as nobody")

# bomb.py OUT MARKER: tries to start 2000 `sleep MARKER` children; writes how many it started.
BOMB_PY = r"""#!/usr/bin/python3
import os, sys
out, marker = sys.argv[1], sys.argv[2]
n = 0
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", marker])
        finally:
            os._exit(127)
    n += 1
with open(os.path.join(out, "forked"), "w") as f:
    f.write(str(n))
"""

# hog.py OUT: allocates and touches 1 GiB; writes "allocated" only if that worked.
HOG_PY = r"""#!/usr/bin/python3
import os, sys
b = bytearray(1 << 30)
for i in range(0, len(b), 4096):
    b[i] = 1
open(os.path.join(sys.argv[1], "allocated"), "w").write("yes")
"""

MARKER = "30.%d" % (os.getpid() % 1000)


def sleepers(marker: str) -> list[int]:
    """Pids of running `sleep MARKER` processes."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                    out.append(int(p))
        except OSError:
            pass
    return out


def vm_rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def app_file(d, app: str, argv: list[str], limits: str = "") -> None:
    shared = d.out_dir(app)
    lines = [f'id = "{app}"', 'user = "nobody"', f'working_directory = "{shared}"',
             "[fetch]", f"command = {json.dumps(argv)}"]
    if limits:
        lines += ["[limits]", limits]
    (d.apps_dir / f"{app}.toml").write_text("\n".join(lines) + "\n")


def fetch(d, app: str) -> dict:
    r = d.cli("fetch", app, "--json", timeout=60)
    return json.loads(r.stdout)


def test_a_fork_bomb_is_capped_at_its_process_limit_and_cleaned_up(make_drowse):
    pwd.getpwnam("nobody")
    d = make_drowse(handler_deadline="10s", extra_config="[limits]\nprocesses = 64")
    bomb = d.write_script("bomb.py", BOMB_PY)
    app_file(d, "bomb", [str(bomb), str(d.out_dir("bomb")), MARKER], limits="processes = 20")
    d.add_app("other", fetch=d.recorder("other"))
    d.start()

    show = d.json("apps", "show", "bomb")["limits"]
    assert show["processes"] == 20 and show["memory"] is None, show
    assert show["processes_enforced_by"] in ("cgroup", "rlimit"), show
    assert d.json("apps", "show", "other")["limits"]["processes"] == 64  # drowse.toml's default

    out = fetch(d, "bomb")
    assert out["result"] == "new-data", out
    forked = int((d.out_dir("bomb") / "forked").read_text())
    held = d.json("apps", "show", "bomb")["limits"]["processes_enforced_by"]
    assert held == show["processes_enforced_by"], "apps show said one holder before the run and another after"
    print(f"bomb: started {forked} of 2000 children (limit held by {held})")
    # The handler itself is one of its 20 (and, with RLIMIT_NPROC, other processes of nobody count too).
    assert forked <= 19, f"the bomb started {forked} children past processes = 20"
    # The run is over: whatever it left running is killed.
    wait_until(lambda: not sleepers(MARKER), 10, what="the bomb's sleepers to be gone")

    # drowsed and the other app keep working.
    assert fetch(d, "other")["result"] == "new-data"
    assert d.cli_ok("status", "--json")


def test_a_memory_hog_fails_within_its_memory_limit_and_drowsed_is_unaffected(make_drowse):
    d = make_drowse(handler_deadline="10s")
    hog = d.write_script("hog.py", HOG_PY)
    app_file(d, "hog", [str(hog), str(d.out_dir("hog"))], limits='memory = "64M"')
    d.add_app("other", fetch=d.recorder("other"))
    d.start()
    show = d.json("apps", "show", "hog")["limits"]
    assert show["memory"] == 64 << 20 and show["memory_text"] == "64M", show
    assert show["processes"] == 256, show  # the built-in default
    rss0 = vm_rss_kb(d.proc.pid)

    out = fetch(d, "hog")
    assert out["result"] == "failed", out
    assert not (d.out_dir("hog") / "allocated").exists(), "the hog allocated 1 GiB past memory = 64M"
    print(f"hog: drowsed VmRSS {rss0} -> {vm_rss_kb(d.proc.pid)} kB (limit held by {show['memory_enforced_by']})")
    assert vm_rss_kb(d.proc.pid) - rss0 < 5 * 1024
    assert fetch(d, "other")["result"] == "new-data"
    [run] = [r for r in d.json("apps", "show", "hog")["history"] if r["event"] == "fetch"]
    assert run["result"] == "failed"


@pytest.mark.parametrize("where,body,key", [
    ("main", '[limits]\nmemory = "lots"\n', "limits.memory"),
    ("main", "[limits]\nprocesses = 1\n", "limits.processes"),
    ("main", "[limits]\nprocesses = \"many\"\n", "limits.processes"),
    ("main", "[limits]\nmemory = \"1K\"\n", "limits.memory"),
    ("app", "[limits]\nmemory = \"12X\"\n", "limits.memory"),
    ("app", "[limits]\nthreads = 3\n", "limits.threads"),
])
def test_bad_limits_are_refused_by_check_config(make_drowse, where, body, key):
    d = make_drowse(extra_config=body if where == "main" else "")
    d.add_app("a", raw='id = "a"\n[fetch]\ncommand = ["/bin/true"]\n' + (body if where == "app" else ""))
    rc, out, err = check_config(d)
    assert rc != 0, f"--check-config accepted {body!r}: {out}{err}"
    assert key in out + err, out + err
