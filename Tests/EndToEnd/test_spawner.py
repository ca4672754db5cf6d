"""The spawn helper (Sources/CDrowseSys/spawner.c, Sources/drowse-spawner): handlers start into
their cgroups from a small process, as children of drowsed all the same; when the helper is killed
or stops answering, handlers still start (drowsed starts them itself) and a new helper takes over.
The helper is the drowse-spawner program beside drowse when it is there and trusted, else
drowse's own binary under the helper's name."""
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

import drowse_e2e
from drowse_e2e import wait_until


def helper_pid(d) -> int | None:
    return d.json("status")["lifecycle"].get("spawner_pid")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def fetch_ppid(d, app: str, out: Path) -> int:
    """Runs the app's fetch now; returns the parent pid its handler saw."""
    (out / "ppid").unlink(missing_ok=True)
    r = d.cli("fetch", app, "--json", timeout=20)
    assert r.returncode == 0, r.stderr
    return int((out / "ppid").read_text())


def test_handlers_start_from_the_helper_and_without_it(make_drowse):
    d = make_drowse(handler_deadline="10s")
    out = d.out_dir("sp")
    script = d.write_script("ppid.sh", f"""
        #!/bin/sh
        grep -q '/sp/' /proc/self/cgroup || exit 1     # in the app's cgroup leaf
        echo $PPID > {out}/ppid.tmp && mv {out}/ppid.tmp {out}/ppid
        """)
    d.add_app("sp", fetch=[str(script)], minimum_interval="1h")
    d.start()
    if d.json("status")["lifecycle"]["suspension"] != "cgroup-v2":
        import pytest
        pytest.skip("no writable cgroup v2 here: handlers start in-process, no helper")
    first = helper_pid(d)
    assert first and Path(f"/proc/{first}/comm").read_text().strip() == "drowse-spawner"
    assert parent_of(first) == d.proc.pid
    # The handler is drowsed's child (CLONE_PARENT), in its cgroup, and it ran.
    assert fetch_ppid(d, "sp", out) == d.proc.pid

    # Killed: the next handler still starts (drowsed starts it itself), and a new helper runs.
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{first}/comm").exists() or "Z" in Path(f"/proc/{first}/stat").read_text().split(")")[1][:3],
               5, what="the helper to die")
    assert fetch_ppid(d, "sp", out) == d.proc.pid
    second = wait_until(lambda: (lambda p: p if p and p != first else None)(helper_pid(d)), 10, what="a new helper")
    assert parent_of(second) == d.proc.pid
    assert fetch_ppid(d, "sp", out) == d.proc.pid

    # Stopped (it cannot answer): drowsed gives up on it after 2 s, starts the handler itself, and
    # replaces it.
    os.kill(second, signal.SIGSTOP)
    t0 = time.monotonic()
    assert fetch_ppid(d, "sp", out) == d.proc.pid
    assert time.monotonic() - t0 < 8
    third = wait_until(lambda: (lambda p: p if p and p not in (first, second) else None)(helper_pid(d)), 10, what="a third helper")
    assert fetch_ppid(d, "sp", out) == d.proc.pid
    assert not Path(f"/proc/{second}").exists() or "Z" in Path(f"/proc/{second}/stat").read_text().split(")")[1][:3]

    # drowsed's end: the helper goes with it.
    d.stop()
    wait_until(lambda: not Path(f"/proc/{third}").exists(), 5, what="the helper to end with drowsed")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def started_helper(make_drowse, out_name: str):
    d = make_drowse(handler_deadline="10s")
    out = d.out_dir(out_name)
    script = d.write_script("ppid.sh", f"""
        #!/bin/sh
        echo $PPID > {out}/ppid.tmp && mv {out}/ppid.tmp {out}/ppid
        """)
    d.add_app("sp", fetch=[str(script)], minimum_interval="1h")
    d.start()
    if d.json("status")["lifecycle"]["suspension"] != "cgroup-v2":
        pytest.skip("no writable cgroup v2 here: handlers start in-process, no helper")
    pid = wait_until(lambda: helper_pid(d), 5, what="the helper")
    # A handler started through it ran, as drowsed's child.
    assert fetch_ppid(d, "sp", out) == d.proc.pid
    return d, pid


def test_the_helper_is_the_small_program_beside_drowse_else_drowse_itself(make_drowse, tmp_path, monkeypatch):
    program = drowse_e2e.BIN_DIR / "drowse-spawner"
    if not program.is_file():
        pytest.skip(f"no {program} (deploy/common.sh build_spawner makes it)")
    d, pid = started_helper(make_drowse, "small")
    assert os.readlink(f"/proc/{pid}/exe") == str(program.resolve())
    small = rss_kib(pid)
    d.stop()

    # drowse alone in a folder: its own binary is the helper (the same loop, a bigger process).
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy2(drowse_e2e.BIN_DIR / "drowse", lone / "drowse")
    os.symlink("drowse", lone / "drowsed")
    monkeypatch.setattr(drowse_e2e, "DROWSED", lone / "drowsed")
    d, pid = started_helper(make_drowse, "lone")
    assert os.readlink(f"/proc/{pid}/exe") == str(lone / "drowse")
    assert small < rss_kib(pid), f"the program's RSS {small} KiB is not below drowse's as the helper"
    d.stop()

    # A program others may change is not run as root's helper: drowse itself is.
    shutil.copy2(program, lone / "drowse-spawner")
    os.chmod(lone / "drowse-spawner", 0o777)
    d, pid = started_helper(make_drowse, "open")
    assert os.readlink(f"/proc/{pid}/exe") == str(lone / "drowse")


def test_a_helper_whose_folder_was_opened_to_others_is_not_restarted(make_drowse, tmp_path, monkeypatch):
    """The helper is run as root again after it dies: its path is checked before every start, not
    only the first. A folder on the way that others may change (they could have swapped the
    program) is refused, logged and counted; handlers start in-process."""
    program = drowse_e2e.BIN_DIR / "drowse-spawner"
    if not program.is_file():
        pytest.skip(f"no {program} (deploy/common.sh build_spawner makes it)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(bin_dir, 0o755)
    shutil.copy2(drowse_e2e.BIN_DIR / "drowse", bin_dir / "drowse")
    shutil.copy2(program, bin_dir / "drowse-spawner")
    os.symlink("drowse", bin_dir / "drowsed")
    monkeypatch.setattr(drowse_e2e, "DROWSED", bin_dir / "drowsed")
    d, first = started_helper(make_drowse, "swap")
    assert os.readlink(f"/proc/{first}/exe") == str(bin_dir / "drowse-spawner")
    status = d.json("status")["lifecycle"]
    assert status["spawner_refused"] == 0 and status["spawner_fallbacks"] == 0, status

    # Someone opens the folder and swaps the program; the helper dies.
    marker = tmp_path / "swapped-program-ran"
    os.chmod(bin_dir, 0o777)
    (bin_dir / "drowse-spawner").unlink()
    (bin_dir / "drowse-spawner").write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    os.chmod(bin_dir / "drowse-spawner", 0o755)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{first}/comm").exists() or "Z" in Path(f"/proc/{first}/stat").read_text().split(")")[1][:3],
               5, what="the helper to die")
    out = d.out_dir("swap")
    for _ in range(3):
        assert fetch_ppid(d, "sp", out) == d.proc.pid  # handlers still run
    # A restart runs the program at once, before the handler it was wanted for.
    assert not marker.exists(), "the swapped program was run as the helper"
    status = d.json("status")["lifecycle"]
    assert status["spawner_pid"] is None, status
    assert status["spawner_refused"] >= 1, status
    assert status["spawner_fallbacks"] >= 3, status
    d.stop()


def test_spawn_helper_false_starts_every_handler_from_drowsed(make_drowse):
    """`[lifecycle] spawn_helper = false`: no helper process, handlers (in their cgroups all the
    same) start from drowsed itself."""
    d = make_drowse(handler_deadline="10s")
    out = d.out_dir("off")
    script = d.write_script("ppid.sh", f"""
        #!/bin/sh
        echo $PPID > {out}/ppid.tmp && mv {out}/ppid.tmp {out}/ppid
        """)
    d.add_app("sp", fetch=[str(script)], minimum_interval="1h")
    d.set_lifecycle(spawn_helper=False)
    d.start()
    if d.json("status")["lifecycle"]["suspension"] != "cgroup-v2":
        pytest.skip("no writable cgroup v2 here: handlers start in-process, no helper")
    assert fetch_ppid(d, "sp", out) == d.proc.pid
    assert helper_pid(d) is None
    children = Path(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children").read_text().split()
    assert not any(Path(f"/proc/{c}/comm").read_text().strip() == "drowse-spawner" for c in children if Path(f"/proc/{c}").exists())
