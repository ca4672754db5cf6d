"""Broken configuration: bad app files are skipped and reported; a bad main config stops drowsed
with one clear line (docs/contract.md: "Programs", "App definition")."""

import json
import os
import subprocess
import time

import pytest

from drowse_e2e import DROWSED


def test_broken_app_files_are_reported_and_skipped(make_drowse):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    d.add_app("bad-syntax", raw='id = "bad-syntax"\n[fetch\ncommand = ["/bin/true"]\n')
    d.add_app("bad-type", raw='id = "bad-type"\n[fetch]\ncommand = "/bin/true"\nminimum_interval = 15\n')
    d.start()

    apps = {a["id"]: a for a in d.apps()}
    assert set(apps) >= {"good", "bad-syntax", "bad-type"}, apps
    assert apps["good"]["valid"] is True
    assert not apps["good"].get("error")
    for bad in ("bad-syntax", "bad-type"):
        assert apps[bad]["valid"] is False, apps[bad]
        assert isinstance(apps[bad]["error"], str) and apps[bad]["error"].strip(), apps[bad]
        assert f"{bad}.toml" in apps[bad]["error"], apps[bad]["error"]
    assert "command" in apps["bad-type"]["error"] or "minimum_interval" in apps["bad-type"]["error"]

    out = d.json("fetch", "good")
    assert out["result"] == "new-data", out
    assert len(d.runs("good")) == 1
    assert d.app_entry("good")["last_result"] == "new-data"

    r = d.cli("fetch", "bad-type")
    assert r.returncode != 0
    assert r.stderr.strip()


BAD_MAIN_CONFIGS = [
    ("mqtt-keepalive-not-duration", '[mqtt]\nurl = "mqtt://127.0.0.1:1"\nkeepalive = "abc"\n', "keepalive"),
    ("device-id-wrong-type", "device_id = 5\n", "device_id"),
    ("commit-interval-integer", "[transfers]\ncommit_interval = 3\n", "commit_interval"),
    ("unknown-key", '[scheduler]\nhandler_deadlin = "2s"\n', "handler_deadlin"),
]


@pytest.mark.parametrize("body,key", [(b, k) for _, b, k in BAD_MAIN_CONFIGS], ids=[i for i, _, _ in BAD_MAIN_CONFIGS])
def test_broken_main_config_exits_with_one_line(make_drowse, body, key):
    d = make_drowse(handler_deadline=None)
    d.add_app("good", fetch=d.recorder("good"))
    lines = [f'state_dir = "{d.state_dir}"', f'apps_dir = "{d.apps_dir}"', f'socket = "{d.socket}"']
    if not body.startswith("device_id"):
        lines.insert(0, 'device_id = "e2e-dev"')
    d.config.write_text("\n".join(lines) + "\n" + body)

    t0 = time.monotonic()
    proc = subprocess.Popen([str(DROWSED), "--config", str(d.config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=d.env(),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"drowsed kept running with a bad config; stderr:\n{err}")
    elapsed = time.monotonic() - t0

    assert proc.returncode != 0
    assert elapsed < 5, f"drowsed took {elapsed:.1f}s to refuse its config"
    err_lines = [l for l in err.splitlines() if l.strip()]
    assert len(err_lines) == 1, f"expected exactly one line on stderr, got {len(err_lines)}:\n{err}"
    assert str(d.config) in err_lines[0], err_lines[0]
    assert key in err_lines[0], err_lines[0]
    assert not d.socket.exists()


# ----------------------------------------------------------------------------- hostile config input

DEEP = 100_000
TOO_DEEP = "nested deeper than 64 levels"
NESTINGS = {"arrays": "a = " + "[" * DEEP, "inline-tables": "a = " + "{a=" * DEEP}


def check_config(d, timeout: float = 10):
    """`drowsed --check-config` on d's config: (returncode, stdout, stderr). A hang fails the test."""
    try:
        r = subprocess.run([str(DROWSED), "--config", str(d.config), "--check-config"], capture_output=True,
                           text=True, timeout=timeout, env=d.env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"drowsed --check-config still running after {timeout}s")
    return r.returncode, r.stdout, r.stderr


def start_fails(d, timeout: float = 10):
    """Starts drowsed on d's config expecting it to refuse: (returncode, stderr)."""
    proc = subprocess.Popen([str(DROWSED), "--config", str(d.config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=d.env(), start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"drowsed kept running with a bad config; stderr:\n{err}")
    return proc.returncode, err


def lines(text: str) -> list[str]:
    return [l for l in text.splitlines() if l.strip()]


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_deeply_nested_app_file_is_invalid_and_the_daemon_keeps_working(make_drowse, nesting):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    d.add_app("deep", raw=f'id = "deep"\n{NESTINGS[nesting]}\n')
    rc, out, err = check_config(d)
    assert rc == 78, f"--check-config exited {rc} (negative: killed by a signal)\n{err}"
    assert lines(err) == [f"{d.apps_dir}/deep.toml:2: {TOO_DEEP}"], err
    d.start()

    apps = {a["id"]: a for a in d.apps()}
    assert apps["deep"]["valid"] is False, apps["deep"]
    assert f"deep.toml:2: {TOO_DEEP}" in apps["deep"]["error"], apps["deep"]["error"]
    assert apps["good"]["valid"] is True
    assert d.json("fetch", "good")["result"] == "new-data"
    assert d.proc.poll() is None, d.exit_note()


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_deeply_nested_main_config_is_refused_with_a_message(make_drowse, nesting):
    d = make_drowse()
    d.config.write_text(d.config.read_text() + NESTINGS[nesting] + "\n")

    rc, out, err = check_config(d)
    assert rc == 78, f"--check-config exited {rc} (negative: killed by a signal)\n{err}"
    assert lines(err) == [f"drowsed: {d.config}:{d.config.read_text().count(chr(10))}: {TOO_DEEP}"], err

    rc, err = start_fails(d)
    assert rc == 78, f"drowsed exited {rc} (negative: killed by a signal)\n{err}"
    assert len(lines(err)) == 1 and TOO_DEEP in err and str(d.config) in err, err


def test_files_over_1_mib_are_refused_not_cut(make_drowse):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    # Valid TOML up to the cut: read in part, it used to pass as a good app.
    d.add_app("big", raw='id = "big"\n' + "# padding\n" * 110_000 + "bogus = 1\n")
    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert lines(err) == [f"{d.apps_dir}/big.toml: larger than 1 MiB ({(d.apps_dir / 'big.toml').stat().st_size} bytes); "
                          "refused rather than read in part"], err

    d.start()
    apps = {a["id"]: a for a in d.apps()}
    assert apps["big"]["valid"] is False and "larger than 1 MiB" in apps["big"]["error"], apps["big"]
    assert apps["good"]["valid"] is True
    d.stop()

    d.config.write_text(d.config.read_text() + "# padding\n" * 110_000)
    for rc, err in (check_config(d)[::2], start_fails(d)):
        assert rc == 78, err
        assert lines(err) == [f"drowsed: {d.config}: larger than 1 MiB ({d.config.stat().st_size} bytes); "
                              "refused rather than read in part"], err


def test_a_fifo_or_device_in_apps_dir_does_not_block_start_up(make_drowse):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    os.mkfifo(d.apps_dir / "pipe.toml")
    os.symlink("/dev/zero", d.apps_dir / "zero.toml")
    (d.apps_dir / "folder.toml").mkdir()
    # A symlink to a regular file is an ordinary app file (packages link theirs into apps.d).
    target = d.base / "linked-app.toml"
    target.write_text(f'id = "linked"\n[fetch]\ncommand = {json.dumps(d.recorder("linked"))}\n')
    os.symlink(target, d.apps_dir / "linked.toml")

    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert lines(err) == [
        f"{d.apps_dir}/folder.toml: not a regular file (a directory); only regular files are read",
        f"{d.apps_dir}/pipe.toml: not a regular file (a FIFO); only regular files are read",
        f"{d.apps_dir}/zero.toml: not a regular file (a character device); only regular files are read",
    ], err

    d.start(timeout=15)
    apps = {a["id"]: a for a in d.apps()}
    for bad in ("pipe", "zero", "folder"):
        assert apps[bad]["valid"] is False and "not a regular file" in apps[bad]["error"], apps[bad]
    assert apps["linked"]["valid"] is True
    assert d.json("fetch", "good")["result"] == "new-data"
    assert d.json("fetch", "linked")["result"] == "new-data"


def test_two_files_with_the_same_app_id_are_both_refused(make_drowse):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    a = d.add_app("weather-a", raw=f'id = "weather"\n[fetch]\ncommand = {json.dumps(d.recorder("weather"))}\n')
    b = d.add_app("weather-b", raw=f'# a stray copy\nid = "weather"\n[fetch]\ncommand = {json.dumps(d.recorder("weather"))}\n')

    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert [l.split(": ")[0] for l in lines(err)] == [f"{a}:1", f"{b}:2"], err

    d.start()
    apps = {x["id"]: x for x in d.apps()}
    assert "weather" not in apps, apps
    assert apps["weather-a"]["valid"] is False and str(b) in apps["weather-a"]["error"], apps["weather-a"]
    assert apps["weather-b"]["valid"] is False and str(a) in apps["weather-b"]["error"], apps["weather-b"]
    assert d.cli("fetch", "weather").returncode != 0
    assert d.runs("weather") == []
    assert d.json("fetch", "good")["result"] == "new-data"


def test_check_config_checks_every_app_file(make_drowse):
    d = make_drowse()
    d.add_app("good", fetch=d.recorder("good"))
    rc, out, err = check_config(d)
    assert rc == 0, (rc, out, err)
    assert lines(out) == [f"{d.config}: ok (device e2e-dev, 1 app)"], out
    assert err == ""

    d.add_app("bad-syntax", raw='id = "bad-syntax"\n[fetch\ncommand = ["/bin/true"]\n')
    d.add_app("bad-type", raw='id = "bad-type"\n[fetch]\ncommand = "/bin/true"\n')
    (d.apps_dir / "README").write_text("not an app file: ignored\n")
    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert lines(err) == [
        f"{d.apps_dir}/bad-syntax.toml:2: expected ']'",
        f"{d.apps_dir}/bad-type.toml:3: key 'fetch.command': expected an array of strings, found a string",
    ], err
    assert "ok" not in out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: apps run as another user")
def test_check_config_checks_what_the_apps_user_can_enter_and_execute(make_drowse):
    """As the app's user: its working directory can be entered, and each handler command
    exists and can be executed (else the first handler would fail at 3 a.m., not the deploy)."""
    d = make_drowse()
    os.chmod(d.base, 0o755)
    open_dir = d.base / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    closed = d.base / "closed"
    closed.mkdir(mode=0o700)
    good = open_dir / "fetch.sh"
    good.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(good, 0o755)
    private = open_dir / "private.sh"
    private.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(private, 0o700)
    d.add_app("ok", fetch=[str(good)], user="nobody", working_directory=str(open_dir))
    rc, out, err = check_config(d)
    assert rc == 0, (rc, out, err)

    d.add_app("cannot-enter", fetch=[str(good)], user="nobody", working_directory=str(closed))
    d.add_app("cannot-run", fetch=[str(private)], user="nobody", working_directory=str(open_dir))
    d.add_app("no-such", notification=["no-such-program-anywhere"], user="nobody", working_directory=str(open_dir))
    rc, out, err = check_config(d)
    assert rc == 78, (rc, out, err)
    assert lines(err) == [
        f"{d.apps_dir}/cannot-enter.toml: key 'working_directory': user 'nobody' cannot enter '{closed}'",
        f"{d.apps_dir}/cannot-run.toml: key 'fetch.command': user 'nobody' cannot execute '{private}'",
        f"{d.apps_dir}/no-such.toml: key 'notification.command': user 'nobody' cannot execute 'no-such-program-anywhere'"
        " in PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)",
    ], err
