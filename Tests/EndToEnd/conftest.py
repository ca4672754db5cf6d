"""Fixtures for Drowse's end-to-end tests.

Run (after `swift build`):  cd <repo> && python3 -m pytest Tests/EndToEnd -q
Binaries come from $DROWSE_BIN_DIR (default <repo>/.build/debug). Everything listens on
127.0.0.1 only: a private mosquitto and nginx per test, a private drowsed per test.
Set DROWSE_E2E_KEEP=1 to keep every test's temp dir (failed tests always keep theirs).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__ for modules imported below

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drowse_e2e import (  # noqa: E402
    DEVICE_ID, DROWSED, DROWSE, MOSQUITTO, NGINX, Broker, Drowse, Nginx, binaries_present, kill_strays, make_tempdir,
)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    # On failure, show each daemon's stderr (and the brokers' logs) right in the failure report.
    if rep.failed and rep.when in ("setup", "call"):
        for d in getattr(item, "_drowse_instances", []):
            text = d.stderr_text()[-60000:] or "(empty)"
            rep.sections.append((f"drowsed stderr ({d.stderr_log})", text + "\n" + d.exit_note()))
        # Every broker the test used: the `broker` fixture, any other fixture that is a Broker
        # (e.g. a TLS one), and brokers a test registered in item._extra_brokers.
        funcargs = getattr(item, "funcargs", {}) or {}
        brokers = [v for v in funcargs.values() if isinstance(v, Broker)] + list(getattr(item, "_extra_brokers", []))
        seen = set()
        for b in brokers:
            if id(b) in seen:
                continue
            seen.add(id(b))
            rep.sections.append((f"mosquitto log ({b.log})", b.log_text()[-20000:]))
        hs = item.funcargs.get("hostile_server") if hasattr(item, "funcargs") else None
        if hs is not None:
            rep.sections.append((f"hostile server requests (127.0.0.1:{hs.port})", hs.log()[-20000:]))


def _failed(request) -> bool:
    node = request.node
    return any(getattr(getattr(node, "rep_" + w, None), "failed", False) for w in ("setup", "call"))


@pytest.fixture
def workdir(request):
    if not binaries_present():
        msg = f"drowse binaries not found ({DROWSED}, {DROWSE}); run `swift build` or set DROWSE_BIN_DIR"
        if os.environ.get("DROWSE_E2E_SKIP_MISSING"):
            pytest.skip(msg)
        pytest.fail(msg)
    d = make_tempdir("drowse-e2e-")
    yield d
    kill_strays(str(d))
    if _failed(request) or os.environ.get("DROWSE_E2E_KEEP"):
        print(f"\n[e2e] kept temp dir {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def broker(workdir):
    if not Path(MOSQUITTO).exists():
        pytest.skip("mosquitto is not installed")
    b = Broker(workdir / "mqtt")
    b.start()
    yield b
    if b.proc is not None:
        b.stop()


@pytest.fixture
def nginx(workdir):
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed")
    n = Nginx(workdir / "nginx")
    n.start()
    yield n
    n.stop()


@pytest.fixture
def hostile_server(workdir):
    """A scripted HTTP/1.1 server on 127.0.0.1 (hostile_server.py); configure its paths in the test."""
    from hostile_server import HostileServer
    s = HostileServer().start()
    yield s
    s.stop()
    (workdir / "hostile-requests.log").write_text(s.log() + "\n")  # kept with the temp dir on failure


@pytest.fixture
def make_drowse(workdir, request):
    """Factory: make_drowse(broker=None, handler_deadline="2s", extra_config="", name="drowse", device_id=None) -> Drowse.
    The daemon is not started; add apps, then call .start(). Several instances need distinct names
    (folders, sockets) and, on one broker, distinct device ids."""
    made: list[Drowse] = []

    def make(broker: Broker | None = None, handler_deadline: str | None = "2s", extra_config: str = "",
             name: str = "drowse", device_id: str = DEVICE_ID) -> Drowse:
        d = Drowse(workdir / name, broker=broker, handler_deadline=handler_deadline, extra_config=extra_config,
                   device_id=device_id)
        made.append(d)
        request.node._drowse_instances = made
        return d

    yield make
    for d in made:
        d.cleanup()
