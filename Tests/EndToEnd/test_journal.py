"""Under systemd, drowsed's standard error is the journal: each line starts with its syslog
priority (<4> warning, <6> info, sd-daemon(3)) so `journalctl -p warning -u drowsed` filters by
level, and lines about an app keep its id. systemd says so with JOURNAL_STREAM=device:inode of
the stream; here the stream is the test's log file, named the same way."""

from __future__ import annotations

import os
import re


def test_lines_carry_their_priority_when_stderr_is_the_journal(make_drowse):
    d = make_drowse()
    d.stderr_log.touch()
    st = os.stat(d.stderr_log)
    d.daemon_env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    d.add_app("bad", fetch=d.recorder("bad", code=1))
    d.start()
    assert d.json("fetch", "bad")["result"] == "failed"
    d.stop()
    lines = [l for l in d.stderr_log.read_text().splitlines() if l and not l.startswith("=====")]
    assert lines, "drowsed logged nothing"
    bad = [l for l in lines if not re.match(r"^<[2-7]>", l)]
    assert not bad, f"lines without a priority prefix: {bad[:3]}"
    warning = [l for l in lines if "fetch handler finished: failed" in l]
    assert warning and warning[0].startswith("<4>app.id=bad "), warning
    assert any(l.startswith("<6>") and "app.id=bad" in l and "launched fetch handler" in l for l in lines)
    # No time stamp of its own: the journal has one.
    assert not any(re.match(r"^<\d>\d{4}-\d\d-\d\d", l) for l in lines)


def test_a_journal_stream_that_is_not_stderr_is_ignored(make_drowse):
    d = make_drowse()
    d.daemon_env["JOURNAL_STREAM"] = "1:2"  # inherited from elsewhere: stderr is a file here
    d.start()
    d.stop()
    lines = [l for l in d.stderr_log.read_text().splitlines() if l and not l.startswith("=====")]
    assert lines and not any(l.startswith("<") for l in lines)
