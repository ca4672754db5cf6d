"""The command-line tool's socket option (docs/contract.md: "`--socket PATH`, env DROWSE_SOCKET";
INTERFACE.md: "global option `--socket PATH`")."""

import json


def test_socket_option_after_subcommand(make_drowse):
    d = make_drowse()
    d.start()
    r = d.cli_with_socket_option("status", "--json", before_subcommand=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["device_id"] == d.device_id


def test_socket_option_before_subcommand(make_drowse):
    """`drowse --socket S status --json`: the form the INTERFACE calls a global option."""
    d = make_drowse()
    d.start()
    r = d.cli_with_socket_option("status", "--json", before_subcommand=True)
    assert r.returncode == 0, f"`drowse --socket S status --json` exited {r.returncode}: {r.stderr.strip()}"
    assert json.loads(r.stdout)["device_id"] == d.device_id


def test_status_json_keys(make_drowse):
    d = make_drowse()
    d.start()
    s = d.status()
    for key in ("version", "device_id", "mqtt", "conditions", "next_window"):
        assert key in s, s
    assert s["mqtt"]["configured"] is False
    assert s["mqtt"]["connected"] is False
