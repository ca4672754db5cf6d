"""Untrusted text never reaches a terminal raw, and config checks.

URLs, task names, app ids taken from file names, errors quoting bad files and what other devices
publish to the broker hold ESC, CR and LF here. What the CLI and `drowsed --check-config` print
must hold no raw control character (C0 but the line ends, DEL, C1, Unicode line separators, bidi
controls) and no forged line; an error quoting a 500 KB key must stay short.
"""

from __future__ import annotations

import json
import re
import subprocess

from drowse_e2e import DROWSE, DROWSED, wait_until

# What must never be printed raw: C0 but LF (the line end), DEL, C1, line/paragraph separators,
# directional marks and bidi embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")
EVIL = "x\x1b[2J\x1b]0;owned\x07\r\npi-fake online\u202e\x85y"


def assert_clean(text: str, what: str) -> None:
    m = UNSAFE.search(text)
    assert m is None, f"{what} printed a raw control character {m.group()!r} at {m.start()}: {text!r}"
    forged = [line for line in text.splitlines() if line.startswith("pi-fake")]
    assert not forged, f"{what} printed a forged line: {forged!r} in {text!r}"


def check_config(d, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([str(DROWSED), "--config", str(d.config), "--check-config"], capture_output=True,
                          text=True, timeout=timeout, env=d.env(), stdin=subprocess.DEVNULL)


def test_transfer_url_and_reason_are_escaped(make_drowse):
    d = make_drowse()
    d.add_app("dl")
    d.start()
    # Nothing listens on port 9: the transfer fails or retries with a reason, its URL shown as given.
    url = "http://127.0.0.1:9/f" + EVIL
    r = d.cli("transfer", "download", url, "--app", "dl")
    assert_clean(r.stdout + r.stderr, "drowse transfer download")
    if r.returncode == 0:
        tid = r.stdout.strip()
        shown = d.cli_ok("transfer", "show", tid)
        assert_clean(shown.stdout, "drowse transfer show")
        assert "pi-fake online" in shown.stdout, f"the URL should be shown, escaped: {shown.stdout!r}"
        listing = d.cli_ok("transfers")
        assert_clean(listing.stdout, "drowse transfers")
        # --json stays JSON, with the very same text in it.
        assert d.transfer(tid)["url"] == url
    else:
        # Refused: the error says why, escaped, on one line.
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_task_name_is_escaped(make_drowse):
    d = make_drowse()
    d.add_app("t")
    d.start()
    tid = d.cli_ok("task", "begin", "--app", "t", "--name", "job" + EVIL).stdout.strip()
    shown = d.cli_ok("task", "show", "--app", "t", tid)
    assert_clean(shown.stdout, "drowse task show")
    assert "name:" in shown.stdout and "pi-fake online" in shown.stdout, shown.stdout
    assert json.loads(d.cli_ok("task", "show", "--app", "t", tid, "--json").stdout)["name"] == "job" + EVIL


def test_bad_app_file_name_is_escaped_in_apps_and_check_config(make_drowse):
    d = make_drowse()
    d.add_app("good")
    (d.apps_dir / ("bad" + EVIL + ".toml")).write_text("id = 3\n")
    d.start()
    r = d.cli_ok("apps")
    assert_clean(r.stdout, "drowse apps")
    assert "INVALID" in r.stdout, r.stdout
    c = check_config(d)
    assert c.returncode == 78, c
    assert_clean(c.stdout + c.stderr, "drowsed --check-config")
    assert len(c.stderr.strip().splitlines()) == 1, c.stderr


def test_fleet_status_from_another_device_cannot_forge_a_line(broker):
    forged = {"online": True, "version": "1.0\r\npi-fake   online   9.9", "apps": ["a"], "app_count": 1,
              "failed_apps": ["x\x1b[31m\npi-fake"], "groups": [], "time": 1.0}
    broker.publish("drowse/pi-real/status", json.dumps(forged).encode(), retain=True)
    # MQTT refuses C0 and C1 controls in topics, not bidi overrides or line separators.
    broker.publish("drowse/pi\u202eevil\u2028pi-fake/status", json.dumps({"online": False}).encode(), retain=True)
    r = subprocess.run([str(DROWSE), "fleet", "--broker", broker.url, "--timeout", "5s"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert_clean(r.stdout, "drowse fleet")
    assert "pi-real" in r.stdout, r.stdout
    # The device that sent the forgery is one line, the one with a bidi override in its id another.
    assert len(r.stdout.strip().splitlines()) == 3, r.stdout


def test_500kb_key_gives_a_short_error(make_drowse):
    d = make_drowse()
    big = "k" * 500_000
    d.extra_config = f'"{big}\\u001b[2J" = 1\n'
    d.write_config()
    c = check_config(d)
    assert c.returncode == 78, c.stderr[:300]
    assert len(c.stderr.encode()) < 1024, f"--check-config's error is {len(c.stderr)} bytes: {c.stderr[:300]!r}"
    assert "unknown key" in c.stderr and "more bytes" in c.stderr, c.stderr[:600]
    assert_clean(c.stdout + c.stderr, "drowsed --check-config")

    # The same key in an app file: `drowse apps` shows the app invalid, in under 1 KB a line.
    d.extra_config = ""
    d.write_config()
    d.add_app("big", raw=f'id = "big"\n"{big}" = 1\n')
    d.start()
    out = d.cli_ok("apps").stdout
    assert "INVALID" in out and max(len(line.encode()) for line in out.splitlines()) < 1024, out[:600]
    # An error answered by drowsed and printed by the CLI is cut too.
    r = d.cli("apps", "show", "k" * 100_000)
    assert r.returncode != 0 and len(r.stderr.encode()) < 1024, r.stderr[:300]


def test_check_config_reports_missing_user_and_working_directory(make_drowse):
    d = make_drowse()
    d.add_app("nouser", user="no-such-user-drowse-e2e")
    d.add_app("nodir", working_directory=str(d.base / "missing"))
    (d.base / "a-file").write_text("")
    d.add_app("filedir", working_directory=str(d.base / "a-file"))
    d.add_app("fine", user="nobody", working_directory=str(d.base))
    c = check_config(d)
    assert c.returncode == 78, c
    lines = c.stderr.strip().splitlines()
    assert len(lines) == 3, c.stderr
    assert any("nouser.toml" in l and "key 'user'" in l and "no-such-user-drowse-e2e" in l for l in lines), lines
    assert any("nodir.toml" in l and "key 'working_directory'" in l and "not a folder" in l for l in lines), lines
    assert any("filedir.toml" in l and "not a folder" in l for l in lines), lines
    assert not any("fine.toml" in l for l in lines), lines


INVALID_UTF8 = {
    "bad-continuation": b"\xc3\x28",
    "overlong-slash": b"\xc0\xaf",
    "overlong-3-byte": b"\xe0\x80\xaf",
    "surrogate": b"\xed\xa0\x80",
    "above-10ffff": b"\xf4\x90\x80\x80",
    "lone-continuation": b"\x80",
}


def test_invalid_utf8_in_toml_strings_is_refused(make_drowse):
    d = make_drowse()
    for name, bad in INVALID_UTF8.items():
        (d.apps_dir / f"{name}.toml").write_bytes(b'id = "' + name.encode() + b'"\nuser = "a' + bad + b'b"\n')
    c = check_config(d)
    assert c.returncode == 78, c
    for name in INVALID_UTF8:
        assert any(f"{name}.toml:2: " in l and "not valid UTF-8" in l for l in c.stderr.splitlines()), (name, c.stderr)
    d.start()
    apps = {a["id"]: a for a in d.apps()}
    for name in INVALID_UTF8:
        assert apps[name]["valid"] is False and "UTF-8" in apps[name]["error"], apps[name]

    # In the main config (a comment counts too: the whole file must be UTF-8).
    d.stop()
    d.config.write_bytes(d.config.read_bytes() + b"# caf\xc3\x28\n")
    c = check_config(d)
    assert c.returncode == 78 and "not valid UTF-8" in c.stderr, c


def test_api_errors_quote_long_input_cut(make_drowse):
    """An API error message that quotes what the caller sent (here a 200 KB app id) is cut, so
    the answer (and any log line made of it) stays small, for scripts that call the API directly."""
    import socket as _socket
    d = make_drowse()
    d.start()
    body = json.dumps({"kind": "download", "url": "http://127.0.0.1:9/x", "app": "a" * 200_000}).encode()
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(d.socket))
    s.sendall(b"POST /v1/transfers HTTP/1.1\r\nHost: drowse\r\nConnection: close\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, answer = data.partition(b"\r\n\r\n")
    assert b" 404 " in head.split(b"\r\n")[0], head
    assert len(answer) < 2048, f"{len(answer)} bytes of error"
    assert json.loads(answer)["error"]["code"] == "not_found"
