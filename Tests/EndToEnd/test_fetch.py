"""Fetch handlers: results, deadlines, scheduling, users, state across restarts
(docs/contract.md: "Handler protocol", "Other commands")."""

import json
import os
import pwd
import signal
import time

import pytest

from drowse_e2e import pid_alive, wait_until


def fetch_json(d, app):
    out = d.json("fetch", app, timeout=30)
    assert out.get("id") == app, out
    return out


def test_fetch_exit_status_sets_last_result(make_drowse):
    d = make_drowse()
    d.add_app("weather", fetch=d.recorder("weather"))
    d.start()

    assert d.app_entry("weather")["valid"] is True
    assert d.app_entry("weather")["last_result"] is None

    code_file = d.out_dir("weather") / "exit_code"
    for n, (code, expected) in enumerate([(0, "new-data"), (100, "no-data"), (3, "failed")], start=1):
        code_file.write_text(str(code))
        out = fetch_json(d, "weather")
        assert out["result"] == expected, out
        assert len(d.runs("weather")) == n
        assert d.app_entry("weather")["last_result"] == expected
        shown = d.app("weather")
        assert shown["id"] == "weather"
        assert shown["last_result"] == expected
        assert shown["last_fetch"], shown

    history = d.app("weather").get("history")
    assert [h["result"] for h in history][:3] == ["failed", "no-data", "new-data"], history

    # Plain output: exit 0 whenever the handler ran, whatever its result.
    code_file.write_text("3")
    r = d.cli("fetch", "weather")
    assert r.returncode == 0, r.stderr
    assert "failed" in r.stdout

    for run in d.runs("weather"):
        assert run.env.get("DROWSE_EVENT") == "fetch"
        assert run.env.get("DROWSE_APP") == "weather"
        assert run.env.get("DROWSE_SOCKET") == str(d.socket)
        assert float(run.env["DROWSE_DEADLINE"]) > run.start
        doc = run.json()
        assert doc.get("event") == "fetch" and doc.get("app") == "weather" and doc.get("reason") == "manual", doc


def test_fetch_unknown_app_fails(make_drowse):
    d = make_drowse()
    d.add_app("weather", fetch=d.recorder("weather"))
    d.start()
    r = d.cli("fetch", "no-such-app")
    assert r.returncode != 0
    assert r.stderr.strip()


def test_handler_environment_is_clean(make_drowse):
    d = make_drowse()
    d.daemon_env["DROWSE_E2E_CANARY"] = "leaked"
    d.add_app("weather", fetch=d.recorder("weather"))
    d.start()
    fetch_json(d, "weather")
    [run] = d.runs("weather")
    assert "DROWSE_E2E_CANARY" not in run.env, "the daemon's own environment leaked into the handler"
    assert run.env.get("PATH")


OVERRUN_SH = r"""#!/bin/sh
# Overruns its deadline; a child in the same process group does too.
out="$1"
{trap}
sleep 60 &
echo $! > "$out/child.pid"
echo $$ > "$out/pid"
sleep 60
"""


@pytest.mark.parametrize("ignores_term", [False, True], ids=["default-term", "ignores-term"])
def test_overrunning_handler_is_killed_and_failed(make_drowse, ignores_term):
    d = make_drowse(handler_deadline="2s")
    out = d.out_dir("slow")
    script = d.write_script("overrun.sh", OVERRUN_SH.replace("{trap}", "trap '' TERM" if ignores_term else ""))
    d.add_app("slow", fetch=[str(script), str(out)])
    d.start()

    t0 = time.monotonic()
    r = d.cli("fetch", "slow", "--json", timeout=20)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"] == "failed", r.stdout
    # deadline 2 s, then SIGTERM, then SIGKILL 2 s later at the latest
    assert elapsed < 6.5, f"drowse fetch took {elapsed:.1f}s"
    if ignores_term:
        assert elapsed >= 3.5, f"SIGKILL should come 2 s after SIGTERM, fetch returned after {elapsed:.1f}s"

    pid = int((out / "pid").read_text())
    child = int((out / "child.pid").read_text())
    assert not pid_alive(pid), f"handler {pid} still alive after drowse fetch returned"
    wait_until(lambda: not pid_alive(child), 1.0, what=f"the handler's child {child} to be gone")

    assert d.app_entry("slow")["last_result"] == "failed"
    assert d.app("slow")["last_result"] == "failed"


def test_scheduled_fetches_share_a_window_and_never_means_never(make_drowse):
    """Real scheduled runs: handlers launched together in one window, told it is a scheduled
    fetch. The timing rules (minimum intervals, tolerance, no extra fetch, `never`, a manual
    fetch restarting the interval) are checked on a manual clock: AgentTimingTests.swift."""
    d = make_drowse(handler_deadline="2s")
    d.add_app("three", fetch=d.recorder("three"), minimum_interval="3s")
    d.add_app("four", fetch=d.recorder("four"), minimum_interval="4s")
    d.add_app("never", fetch=d.recorder("never"), minimum_interval="never")
    d.start()
    three = d.wait_runs("three", 1, timeout=10)[0]
    four = d.wait_runs("four", 1, timeout=10)[0]
    d.stop()

    assert abs(three.start - four.start) <= 0.5, f"no shared wake window: the two apps ran {abs(three.start - four.start):.2f}s apart"
    # Its window opened with the others': an app scheduled never was not launched in it.
    assert d.runs("never") == []
    for run in d.runs("three") + d.runs("four"):
        assert run.env.get("DROWSE_EVENT") == "fetch"
        assert run.json().get("reason") == "scheduled", run.stdin


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_handler_runs_as_app_user(make_drowse):
    nobody = pwd.getpwnam("nobody")
    d = make_drowse()
    shared = d.base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    d.add_app("nob", fetch=d.recorder("nob"), user="nobody", working_directory=str(shared))
    d.start()

    out = fetch_json(d, "nob")
    assert out["result"] == "new-data", out
    [run] = d.runs("nob")
    assert run.uid == nobody.pw_uid == 65534
    assert run.gid == nobody.pw_gid
    assert 0 not in run.groups, f"root's groups leaked into the handler: {run.groups}"
    assert run.cwd == str(shared)


def test_restart_keeps_last_result(make_drowse):
    d = make_drowse()
    d.add_app("weather", fetch=d.recorder("weather", code=100))
    d.start()
    assert fetch_json(d, "weather")["result"] == "no-data"
    before = d.app("weather")
    assert before["last_result"] == "no-data"

    rc = d.restart(signal.SIGTERM)
    after = d.app("weather")
    assert after["last_result"] == "no-data", after
    assert after["last_fetch"] == before["last_fetch"]
    assert d.app_entry("weather")["last_result"] == "no-data"
    assert rc == 0, f"drowsed exited {rc} on SIGTERM"
