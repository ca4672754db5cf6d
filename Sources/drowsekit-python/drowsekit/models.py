"""What drowsed sends, as typed values. Each keeps the whole JSON object in ``raw``."""

from __future__ import annotations

import enum
import json
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import DrowseProtocolError, clip

JSONObject = dict[str, Any]


class Result(str, enum.Enum):
    """The result of handling an event, as for a handler's exit status."""

    NEW_DATA = "new-data"
    NO_DATA = "no-data"
    FAILED = "failed"


FETCH = "fetch"
NOTIFICATION = "notification"
TRANSFERS = "transfers"
TASK_EXPIRING = "task-expiring"
#: The event kinds this version knows; lines of other kinds are skipped.
KINDS = (FETCH, NOTIFICATION, TRANSFERS, TASK_EXPIRING)
#: The states after which a transfer no longer changes.
FINISHED_STATES = ("completed", "failed", "cancelled")


def _num(v: Any) -> Optional[float]:
    """A finite number; None for anything else (a float cannot hold 1e400, NaN, Infinity)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


_PREVIEW = reprlib.Repr()
_PREVIEW.maxlevel, _PREVIEW.maxdict, _PREVIEW.maxlist, _PREVIEW.maxstring, _PREVIEW.maxother = 3, 6, 6, 60, 60


def preview(value: Any) -> str:
    """A JSON value as a message quotes it: a few levels and members of it, however big or deep,
    escaped and cut."""
    try:
        return clip(_PREVIEW.repr(value))
    except (RecursionError, ValueError):
        return f"a {type(value).__name__}"


@dataclass
class Transfer:
    """A background download or upload owned by drowsed (docs/api.md, "Transfers")."""

    id: str
    app: str
    session: str
    kind: Optional[str]
    state: Optional[str]
    url: str
    bytes_done: int
    bytes_total: Optional[int]
    reason: Optional[str]
    location: Optional[str]
    raw: JSONObject = field(repr=False)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @classmethod
    def from_json(cls, j: Any) -> "Transfer":
        if not isinstance(j, dict) or not isinstance(j.get("id"), str):
            raise DrowseProtocolError(f"a transfer without an id: {preview(j)}")
        total = _num(j.get("bytes_total"))
        return cls(id=j["id"], app=_str(j.get("app")) or "", session=_str(j.get("session")) or "default",
                   kind=_str(j.get("kind")), state=_str(j.get("state")), url=_str(j.get("url")) or "",
                   bytes_done=int(_num(j.get("bytes_done")) or 0),
                   bytes_total=None if total is None else int(total),
                   reason=_str(j.get("reason")), location=_str(j.get("location")), raw=j)


@dataclass
class BackgroundTask:
    """A finite background task (docs/api.md, "Background tasks")."""

    id: str
    app: str
    name: Optional[str]
    state: str
    expires_at: Optional[float]
    time_remaining: Optional[float]
    raw: JSONObject = field(repr=False)

    @property
    def open(self) -> bool:
        return self.state == "open"

    @classmethod
    def from_json(cls, j: Any) -> "BackgroundTask":
        if not isinstance(j, dict) or not isinstance(j.get("id"), str):
            raise DrowseProtocolError(f"a task without an id: {preview(j)}")
        return cls(id=j["id"], app=_str(j.get("app")) or "", name=_str(j.get("name")), state=_str(j.get("state")) or "",
                   expires_at=_num(j.get("expires_at")), time_remaining=_num(j.get("time_remaining")), raw=j)


@dataclass
class Event:
    """An event on the app's stream. ``kind`` is one of FETCH, NOTIFICATION, TRANSFERS, TASK_EXPIRING."""

    kind: str
    id: str
    deadline: Optional[float] = None
    reason: Optional[str] = None
    payload: Any = None
    session: Optional[str] = None
    transfers: list[Transfer] = field(default_factory=list)
    task: Optional[str] = None
    expires_at: Optional[float] = None
    time_remaining: Optional[float] = None
    raw: JSONObject = field(default_factory=dict, repr=False)

    @property
    def needs_completion(self) -> bool:
        """Whether drowsed waits for ``complete`` (every kind but task-expiring)."""
        return self.kind != TASK_EXPIRING


@dataclass
class Hello:
    """The stream's first line: it is open. Not handed to the app as an event."""

    app: Optional[str]
    state: Optional[str]


def parse_event_line(line: bytes) -> "Event | Hello | None":
    """One line of the stream; None for a line to skip (not JSON, not an event, an unknown kind)."""
    if not line.strip():
        return None
    try:
        j = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python's parser goes
        return None
    if not isinstance(j, dict) or not isinstance(j.get("event"), str):
        return None
    kind = j["event"]
    if kind == "hello":
        return Hello(app=_str(j.get("app")), state=_str(j.get("state")))
    if kind not in KINDS or not isinstance(j.get("id"), str):
        return None
    transfers = [Transfer.from_json(t) for t in _list(j.get("transfers")) if isinstance(t, dict) and isinstance(t.get("id"), str)]
    e = Event(kind=kind, id=j["id"], deadline=_num(j.get("deadline")), reason=_str(j.get("reason")), payload=j.get("payload"),
              session=_str(j.get("session")), transfers=transfers, task=_str(j.get("task")),
              expires_at=_num(j.get("expires_at")), time_remaining=_num(j.get("time_remaining")), raw=j)
    if kind == TASK_EXPIRING and e.task is None:
        return None
    return e


@dataclass
class AppStatus:
    """The app as drowsed sees it (``GET /v1/apps/ID``): state, last result and recent runs."""

    id: str
    state: Optional[str]
    state_reason: Optional[str]
    last_result: Optional[str]
    resident: bool
    history: list[JSONObject]
    raw: JSONObject = field(repr=False)

    @classmethod
    def from_json(cls, j: Any) -> "AppStatus":
        if not isinstance(j, dict) or not isinstance(j.get("id"), str):
            raise DrowseProtocolError(f"an app without an id: {preview(j)}")
        history = [h for h in _list(j.get("history")) if isinstance(h, dict)]
        return cls(id=j["id"], state=_str(j.get("state")), state_reason=_str(j.get("state_reason")),
                   last_result=_str(j.get("last_result")), resident=j.get("resident") is True, history=history, raw=j)
