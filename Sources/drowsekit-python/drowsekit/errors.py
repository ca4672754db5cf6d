"""The library's exceptions: every failure talking to drowsed is a DrowseError."""

from __future__ import annotations

import json


class DrowseError(Exception):
    """A failure talking to drowsed.

    ``status`` is the HTTP status (0 when there was no answer) and ``code`` the API's error code
    (``not_found``, ``no_background_time``, ``busy``, ...; docs/api.md, "Errors") or a local one:
    ``connect`` (no connection), ``protocol`` (bytes that are not an answer) or ``no_app``.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        if self.status:
            return f"drowsed: {self.message} (HTTP {self.status}, {self.code})"
        return f"drowsed: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"

    @classmethod
    def from_answer(cls, status: int, body: bytes) -> "DrowseError":
        """The error an answer carries (``{"error": {"code", "message"}}``), or a plain one."""
        code, message = f"http_{status}", f"HTTP {status}"
        try:
            err = json.loads(body)["error"]
            if isinstance(err.get("code"), str):
                code = err["code"]
            if isinstance(err.get("message"), str):
                message = err["message"]
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            pass
        return cls(status, code, message)


class DrowseConnectionError(DrowseError):
    """No answer: the socket is missing, refused, or the connection broke (code ``connect``)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "connect", message)


class DrowseProtocolError(DrowseError):
    """drowsed's bytes were not a valid answer (code ``protocol``)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "protocol", message)
