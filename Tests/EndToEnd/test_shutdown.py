"""Shutdown in the ServiceGroup's reverse order: the local API is the first service in the
group's list, so it is the last to stop. A handler still running when SIGTERM arrives finishes,
and while it does, it (and anyone else) can still use the API."""
import json
import signal
import subprocess

from drowse_e2e import DROWSE, wait_until


def test_the_api_answers_handlers_that_finish_during_shutdown(make_drowse):
    d = make_drowse(handler_deadline="20s")
    out = d.out_dir("late")
    script = d.write_script("late.sh", f"""
        #!/bin/sh
        touch {out}/started
        while [ ! -e {out}/go ]; do sleep 0.05; done
        # drowsed is stopping by now: these go over the socket it was given (DROWSE_SOCKET).
        {DROWSE} status --json > {out}/status.json 2> {out}/status.err
        echo $? > {out}/status.rc
        {DROWSE} used late > {out}/used.out 2>&1
        echo $? > {out}/used.rc
        exit 0
        """)
    d.add_app("late", fetch=[str(script)], minimum_interval="1h")
    d.start()
    fetch = subprocess.Popen([str(DROWSE), "fetch", "late", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**d.env(), "DROWSE_SOCKET": str(d.socket)})
    try:
        wait_until(lambda: (out / "started").exists(), 10, what="the fetch handler to start")
        d.proc.send_signal(signal.SIGTERM)
        # drowsed is draining: it still runs, and its API still answers.
        def draining():
            r = d.cli("status", "--json", timeout=5)
            return r.returncode == 0 and json.loads(r.stdout)["running_handlers"] == 1
        wait_until(draining, 5, what="`drowse status` to answer while the handler drains")
        assert d.proc.poll() is None, "drowsed exited with a handler still running"
        # A new run is refused while stopping; the running one goes on.
        refused = d.cli("fetch", "late", "--json", timeout=10)
        assert refused.returncode != 0, refused.stdout
        (out / "go").touch()
        rc = d.proc.wait(timeout=20)
        assert rc == 0, f"drowsed exited {rc}\n{d.stderr_text()[-3000:]}"
        # The handler's own calls, made after SIGTERM, were answered.
        assert (out / "status.rc").read_text().strip() == "0", (out / "status.err").read_text()
        status = json.loads((out / "status.json").read_text())
        assert status["running_handlers"] == 1
        assert (out / "used.rc").read_text().strip() == "0", (out / "used.out").read_text()
        # And the caller that waited for the fetch got its outcome before the socket closed.
        stdout, stderr = fetch.communicate(timeout=10)
        assert fetch.returncode == 0, stderr
        assert json.loads(stdout)["result"] == "new-data"
    finally:
        if fetch.poll() is None:
            fetch.kill()
        d.stop()

    # The run counts as handled: after the restart it is in the app's history once.
    d.start()
    history = d.app("late")["history"]
    assert [h["event"] for h in history] == ["fetch"], history


def test_a_stopped_drowsed_leaves_no_cgroup_folders(make_drowse):
    """The app cgroups drowsed made (its configured subtree, each app's folder, the runs'
    leaves) are removed when it stops, not left behind for the next one to find."""
    from drowse_e2e import cgroup2_mount
    import pytest
    d = make_drowse()
    d.add_app("a", fetch=["/bin/true"], minimum_interval="1h")
    d.add_app("b", fetch=["/bin/true"], minimum_interval="1h")
    d.start()
    if d.json("status")["lifecycle"]["suspension"] != "cgroup-v2":
        pytest.skip("no writable cgroup v2 here")
    top = cgroup2_mount() / d.cgroup
    d.cli_ok("fetch", "a")
    d.cli_ok("fetch", "b")
    assert (top / "apps" / "a").is_dir() and (top / "apps" / "b").is_dir()
    assert d.stop(signal.SIGTERM) == 0
    left = sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_dir()) if top.exists() else []
    assert not top.exists(), f"left behind under {top}: {left}"
