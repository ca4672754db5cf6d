"""The local API authorizes by SO_PEERCRED: root sees everything, an app's user only its app
(docs/contract.md: "Local API")."""

import json
import os
import subprocess

import pytest

from drowse_e2e import DROWSE


def as_nobody(d, *args):
    """Runs the drowse CLI as user nobody (uid/gid 65534, no supplementary groups)."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(DROWSE), "--socket", str(d.socket), *args],
        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})


def curl_as_nobody(d, method, path):
    r = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "curl", "-s", "-o", "-", "-w", "\n%{http_code}",
         "-X", method, "--unix-socket", str(d.socket), f"http://drowse{path}"],
        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_app_user_sees_and_changes_only_its_own_app(make_drowse):
    d = make_drowse()
    shared = d.base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    os.chmod(d.base, 0o755)  # nobody must reach the socket's folder
    d.add_app("mine", fetch=d.recorder("mine"), user="nobody", working_directory=str(shared))
    d.add_app("other", fetch=d.recorder("other"))
    d.start()

    # Root sees both.
    assert {a["id"] for a in d.apps()} == {"mine", "other"}

    r = as_nobody(d, "apps", "--json")
    assert r.returncode == 0, r.stderr
    assert [a["id"] for a in json.loads(r.stdout)] == ["mine"]

    r = as_nobody(d, "fetch", "other")
    assert r.returncode != 0
    assert d.runs("other") == [], "nobody ran another app's handler"

    r = as_nobody(d, "fetch", "mine", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"] == "new-data"
    assert len(d.runs("mine")) == 1

    # The same over raw HTTP, with the contract's error shape.
    # Another user's app answers like a missing one: nobody learns which apps exist.
    code, body = curl_as_nobody(d, "GET", "/v1/apps/other")
    assert code == 404, body
    assert json.loads(body)["error"] == {"code": "not_found", "message": "no app 'other'"}
    code, body = curl_as_nobody(d, "POST", "/v1/apps/other/fetch")
    assert code == 404, body
    code, body = curl_as_nobody(d, "GET", "/v1/apps/mine")
    assert code == 200, body
