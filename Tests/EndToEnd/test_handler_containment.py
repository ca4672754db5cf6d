"""Handlers stay contained: a handler's child that calls setsid does not outlive
the run, whether the handler is killed at its deadline or exits normally; nothing is left as a
zombie of drowsed either."""

from __future__ import annotations

import os
import time

from drowse_e2e import notify_topic, wait_until

# escape.sh DIR MODE: starts a child in its own session that records its pid and sleeps, then
# either overstays the deadline (MODE=hang) or exits at once (MODE=exit).
ESCAPE_SH = r"""#!/bin/sh
setsid sh -c 'echo $$ > "$0/escaped.pid"; exec sleep 300' "$1" &
while [ ! -s "$1/escaped.pid" ]; do sleep 0.01; done
[ "$2" = hang ] && sleep 60
exit 0
"""


def gone(pid: int) -> bool:
    """Not running and reaped: no /proc entry at all (a zombie of drowsed would still have one)."""
    return not os.path.exists(f"/proc/{pid}")


def run_escape(broker, make_drowse, mode: str) -> int:
    d = make_drowse(broker=broker, handler_deadline="2s")
    out = d.out_dir("esc")
    d.add_app("esc", notification=[str(d.write_script("escape.sh", ESCAPE_SH)), str(out), mode])
    d.start()
    broker.wait_subscribed(notify_topic("esc"))
    d.push("esc", "--id", "one")
    pid = wait_until(lambda: (out / "escaped.pid").exists() and (out / "escaped.pid").read_text().strip(), 10,
                     what="the escaped child's pid")
    wait_until(lambda: [h for h in d.app("esc").get("history", []) if h["event"] == "notification"], 15,
               what="the handler's run to be recorded")
    return int(pid)


def test_a_setsid_child_is_killed_at_the_deadline(broker, make_drowse):
    pid = run_escape(broker, make_drowse, "hang")
    assert wait_until(lambda: gone(pid), 5, what=f"the setsid'd child {pid} to be killed and reaped")


def test_a_setsid_child_is_killed_when_its_handler_exits(broker, make_drowse):
    pid = run_escape(broker, make_drowse, "exit")
    assert wait_until(lambda: gone(pid), 5, what=f"the setsid'd child {pid} to be killed and reaped")
