"""Broken configuration: bad app files are skipped and reported; a bad main config stops drowsed
with one clear line (SPEC: "Programs", "App definition")."""

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
