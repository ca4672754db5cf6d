"""`drowsed --log-level` and DROWSE_LOG_LEVEL decide what reaches drowsed's log, as
docs/configuration.md ("The daemon's command line") says: the option wins over the variable, a
name that is no level means info, and handler output, logged at info, is left out from warning
up. What is asserted is the log's content, since that is all a log level changes."""
from __future__ import annotations

import pytest

MARK = "handler-output-7f3a"


@pytest.mark.parametrize("env, args, logged", [
    ({}, [], True),                                                    # the default: info
    ({"DROWSE_LOG_LEVEL": "warning"}, [], False),
    ({"DROWSE_LOG_LEVEL": "warning"}, ["--log-level", "info"], True),  # the option wins
    ({}, ["--log-level", "error"], False),
    ({"DROWSE_LOG_LEVEL": "no-such-level"}, [], True),                # another name means info
])
def test_the_log_level_decides_whether_handler_output_is_logged(make_drowse, env, args, logged):
    d = make_drowse()
    d.daemon_env.update(env)
    d.daemon_args = args
    d.add_app("talker", fetch=["/bin/sh", "-c", f"echo {MARK}"], minimum_interval="1h")
    d.start()
    r = d.cli_ok("fetch", "talker")
    assert "new-data" in r.stdout
    # A run's output is logged before `drowse fetch` returns: the cases that log it check at once.
    assert (MARK in d.stderr_text()) == logged, d.stderr_text()[-2000:]
