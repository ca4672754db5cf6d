"""A handler leads a session of its own with no controlling terminal, so it cannot type into
the terminal drowsed was started from (TIOCSTI); one not run as root starts with no_new_privs
unless its app sets `[process] allow_privilege_gain` (docs/handlers.md, "The handler's process")."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from drowse_e2e import wait_until

HERE = Path(__file__).resolve().parent

PROBE = """#!/bin/sh
out="$1/$DROWSE_APP"
{
  set -- $(cat /proc/self/stat | sed 's/^.*) //')
  # fields after the name: state ppid pgrp session tty_nr ...
  echo "pid=$$ pgrp=$3 session=$4 tty=$5"
  if (: </dev/tty) 2>/dev/null; then echo "devtty=opened"; else echo "devtty=refused"; fi
  grep '^NoNewPrivs:' /proc/self/status | tr -d ' \\t'
} > "$out.tmp" && mv "$out.tmp" "$out"
"""


def probe(d, shared: Path, app: str) -> dict[str, str]:
    d.cli_ok("fetch", app)
    f = shared / app
    wait_until(f.exists, 20, what=f"the probe of {app}")
    fields = {}
    for line in f.read_text().split():
        k, _, v = line.partition("=")
        fields[k] = v
    for line in f.read_text().splitlines():
        if line.startswith("NoNewPrivs:"):
            fields["NoNewPrivs"] = line.split(":")[1]
    return fields


def test_handlers_have_no_terminal_and_no_new_privileges(make_drowse, workdir):
    shared = Path(f"/tmp/drowse-e2e-session-{os.getpid()}")
    shared.mkdir(mode=0o777, exist_ok=True)
    os.chmod(shared, 0o777)
    try:
        script = shared / "probe.sh"
        script.write_text(PROBE)
        os.chmod(script, 0o755)
        d = make_drowse()
        d.prefix = [sys.executable, str(HERE / "with_tty.py")]
        d.add_app("plain", fetch=[str(script), str(shared)], working_directory=str(shared))
        root = os.geteuid() == 0
        if root:
            d.add_app("other", fetch=[str(script), str(shared)], user="nobody", working_directory=str(shared))
            d.add_app("gains", raw=f'id = "gains"\nuser = "nobody"\nworking_directory = "{shared}"\n'
                                  f'[fetch]\ncommand = {json_list([str(script), str(shared)])}\n'
                                  f'[process]\nallow_privilege_gain = true\n')
        d.start()
        # drowsed itself has the terminal: what its handlers must not reach.
        tty = os.stat(f"/proc/{d.proc.pid}/fd/0")
        assert os.major(tty.st_rdev) in (136, 137, 138, 139, 140, 141, 142, 143), "drowsed has no pty as stdin"
        p = probe(d, shared, "plain")
        assert p["session"] == p["pid"] and p["pgrp"] == p["pid"], p
        assert p["tty"] == "0", p
        assert p["devtty"] == "refused", p
        assert p["NoNewPrivs"] == ("0" if root else "1"), p
        if root:
            o = probe(d, shared, "other")
            assert o["devtty"] == "refused" and o["NoNewPrivs"] == "1", o
            g = probe(d, shared, "gains")
            assert g["NoNewPrivs"] == "0", g
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def json_list(items: list[str]) -> str:
    import json
    return json.dumps(items)
