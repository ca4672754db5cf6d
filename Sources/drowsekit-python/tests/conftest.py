"""Fixtures for DrowseKit's unit tests: the package from the checkout (no pip install needed)
and a scripted server per test (scripted_server.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_server import ScriptedServer  # noqa: E402


@pytest.fixture
def server():
    d = tempfile.mkdtemp(prefix="drowsekit-")
    s = ScriptedServer(str(Path(d) / "drowse.sock"))
    yield s
    s.stop()
    Path(s.path).unlink(missing_ok=True)
    Path(d).rmdir()
    assert not s.errors, s.errors
