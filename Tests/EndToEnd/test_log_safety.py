"""What reaches drowsed's own log, judged on the log file a
real drowsed writes: a handler's flood of output stays small (1 GB of stdout once became a 1.7 GB
log), and control characters in a caller's URL never reach it raw (a newline would forge a log line,
an ESC drive the operator's terminal). The unit tests (ProcessLauncherTests, LogTextTests) check the
pieces; these check the daemon as wired."""

from __future__ import annotations

import json

from drowse_e2e import wait_until
from raw_http import request

MB = 1_000_000

# flood.sh: 20 MB of stdout in 100-byte lines, as fast as the pipe takes it, then exit 0 (new data).
FLOOD_SH = r"""#!/bin/sh
head -c 20000000 /dev/zero | tr '\0' x | fold -w 100
exit 0
"""


def test_a_handlers_flood_of_output_stays_small_in_the_log(make_drowse):
    d = make_drowse()
    d.add_app("loud", fetch=[str(d.write_script("flood.sh", FLOOD_SH))])
    d.start()
    before = len(d.stderr_text())
    assert d.json("fetch", "loud", timeout=120)["result"] == "new-data"
    log = d.stderr_text()[before:]
    flood = [l for l in log.splitlines() if "xxxxxxxxxx" in l]
    assert flood, "none of the handler's output was logged"
    # The bucket lets a burst of 256 KiB through, then 8 KiB/s: far below the 20 MB printed.
    print(f"\n[flood] 20 MB of handler output became {len(log)} bytes of log ({len(flood)} lines)")
    assert len(log) < 2 * MB, f"{len(log)} bytes of log for one handler run"
    assert "not logged (rate limit)" in log, "output was dropped without saying so"
    assert d.proc.poll() is None


def test_control_characters_in_a_url_never_reach_the_log_raw(make_drowse):
    d = make_drowse()
    d.add_app("dl")
    d.start()
    # Nothing listens on port 9: the transfer is queued (and logged, with its URL), then retried.
    url = "http://127.0.0.1:9/a\x1b[31mred\rb\nFAKE drowsed: all good\u2028c"
    body = json.dumps({"url": url, "app": "dl", "timeout_resource": 60}).encode()
    status, raw = request(d.socket, "POST", "/v1/transfers", body)
    assert status == 200, raw
    tid = json.loads(raw)["id"]
    assert d.transfer(tid)["url"] == url, "the URL was changed, not just its logging"
    wait_until(lambda: "FAKE" in d.stderr_text(), 10, what="the URL in the log")
    d.cli_ok("transfer", "cancel", tid)
    log = d.stderr_text()
    assert "\x1b" not in log and "\r" not in log and "\u2028" not in log, "a control character reached the log raw"
    assert not any(line.startswith("FAKE") for line in log.splitlines()), "the URL forged a log line"
    assert r"\u{1B}[31mred\rb\nFAKE" in log, "the URL is not in the log in escaped form"
