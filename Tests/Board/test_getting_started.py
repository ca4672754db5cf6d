"""docs/getting-started.md, "On a board", run as written on the board image: the package is the one
the suite installed with apt (the page's `deploy/build-deb.sh` and `apt install` lines are what the
suite's fixture did), then "A first app" pasted whole into the board's shell, then the page's
provider-side `drowse push` to the app, with the suite's broker in place of the page's. The page
runs its commands with `sudo`; the suite's shell is root already (the image has no sudo), so
`sudo` is a function that runs its arguments.

What it checks is what the page says happens: the app's user, folder and handler are made, the
config check passes, a reload adds the app without a restart, `drowse apps` lists it, `drowse
fetch hello` prints "hello: new-data (exit status 0)", the handler wrote its line (with the event
JSON the page's comment gives) into the app user's $HOME as that user, its run is in the journal,
and a silent notification to an app without a notification handler runs its fetch command with
the notification's payload."""

from __future__ import annotations

import json
import re
import shlex
import time

from conftest import DEVICE
from test_systemd import wait_active

from board import HOST_IN_GUEST
from drowse_e2e import REPO

PAGE = REPO / "docs" / "getting-started.md"
SUDO = 'sudo() { "$@"; }\n'


def section(title: str) -> str:
    """The page's text under the heading `title`, to the next heading (a `#` line inside a code
    block is not one)."""
    out: list[str] | None = None
    fenced = False
    for line in PAGE.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#+ ", line):
            if out is not None:
                break
            if line.rstrip("\n").split(" ", 1)[1] == title:
                out = []
                continue
        if out is not None:
            out.append(line)
    assert out is not None, f"docs/getting-started.md has no section {title!r}"
    return "".join(out)


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def comment_quote(line: str) -> str | None:
    m = re.search(r'#.*?"([a-z-]+: [^"]+)"', line)
    return m.group(1) if m else None


def fetch_lines(b) -> list[str]:
    rc, out, _ = b.run("cat /opt/hello/fetches.log")
    return out.splitlines() if rc == 0 else []


def test_the_first_app_of_getting_started_runs_as_written_on_the_board(configured, broker):
    b = configured
    before = wait_active(b)

    # "On a board": the .deb is built and installed (by the suite); the page's next line answers.
    board_block = sh_blocks(section("On a board"))[0].splitlines()
    assert any(l.startswith("deploy/build-deb.sh") for l in board_block), board_block
    assert any(l.startswith("sudo apt install /tmp/deb/drowse_") for l in board_block), board_block
    status = next(l for l in board_block if l.startswith("sudo drowse status"))
    b.sh(SUDO + status.split("#")[0])

    # "A first app", pasted whole.
    blocks = sh_blocks(section("A first app"))
    assert len(blocks) == 1, blocks
    script = blocks[0]
    # The page's quoted output of `drowse fetch hello`, read from the page, not from this test.
    quoted = {l.split("#")[0].strip(): q for l in script.splitlines() if (q := comment_quote(l))}
    fetch_cmd = next(c for c in quoted if "drowse fetch hello" in c)
    try:
        rc, out, err = b.run("set -e\n" + SUDO + script, timeout=180)
        assert rc == 0, f"the page's block failed ({rc}):\n{out}\n{err}"

        # The app's user and folder, and the handler as the page wrote it.
        assert b.sh("stat -c %U /opt/hello").strip() == "hello"
        assert b.sh("stat -c %a /opt/hello/fetch.sh").strip() == "755"
        # `drowse apps` listed hello (in the block's output), and the reload took it without a restart.
        assert re.search(r"^\s*hello\b", out, re.M), out
        assert wait_active(b)["MainPID"] == before["MainPID"], "the page's reload restarted drowsed"
        # `drowse fetch hello` printed what the page says it prints.
        assert quoted[fetch_cmd] in out, (quoted[fetch_cmd], out)
        # The handler ran as hello, with hello's $HOME, and got the event the page's comment names.
        lines = fetch_lines(b)
        assert len(lines) == 1, lines
        assert b.sh("stat -c %U /opt/hello/fetches.log").strip() == "hello"
        event = json.loads(lines[0][lines[0].index("{"):])
        assert event == {"event": "fetch", "app": "hello", "reason": "manual"}, event
        # `journalctl -u drowsed -g app.id=hello` showed the app's run.
        assert "app.id=hello" in out, out

        # "Silent notifications": the provider's push, to this board's broker and device id.
        push = next(l for l in sh_blocks(section("Silent notifications"))[0].splitlines() if l.startswith("drowse push"))
        device = json.loads(b.sh("drowse status --json"))["device_id"]
        assert device == DEVICE
        push = push.replace("mqtts://mqtt.example.org:8883", f"mqtt://{HOST_IN_GUEST}:{broker.port}")
        push = push.replace("DEVICE_ID", shlex.quote(device))
        broker.wait_subscribed(f"drowse/{DEVICE}/apps/hello/notify", timeout=60)
        b.sh(push)
        deadline = time.monotonic() + 60
        while len(fetch_lines(b)) < 2:
            assert time.monotonic() < deadline, f"the push did not run hello's fetch command: {fetch_lines(b)}"
            time.sleep(0.5)
        # The fetch command got the notification's payload (docs/handlers.md, "notification").
        payload = json.loads((line := fetch_lines(b)[1])[line.index("{"):])
        assert payload["content-id"] == 42 and payload["aps"] == {"content-available": 1}, payload
    finally:
        b.run("rm -f /etc/drowse/apps.d/hello.toml && systemctl reload drowsed")
