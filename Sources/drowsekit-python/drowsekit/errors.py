"""The library's exceptions: every failure talking to drowsed is a DrowseError.

Text from the other end of the socket (an error message or code, a status line, a transfer's
state) is quoted as the drowse tool prints it: control characters escaped, and cut with the size
of what was left out, so it can neither rewrite a terminal or forge a log line nor fill one."""

from __future__ import annotations

import json

#: How much of a piece of the peer's text a message quotes (characters, after escaping).
QUOTE_LIMIT = 200
#: The longest message an error carries (characters, after escaping).
MESSAGE_LIMIT = 4 * QUOTE_LIMIT


def _escapes() -> dict[int, str]:
    points = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, 0x200E, 0x200F, 0x061C,
              *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)]
    table = {p: "\\u{%02X}" % p for p in points}
    table.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})
    return table


_ESCAPES = _escapes()


def escape(text: str) -> str:
    """``text`` with every control character written as ``\\n``, ``\\r``, ``\\t`` or ``\\u{XX}``: C0
    and C1 controls, DEL, line and paragraph separators, directional marks, bidi embeddings,
    overrides and isolates, and lone surrogates (which no terminal can be sent). Everything else,
    backslashes included, is left as it was."""
    return text.translate(_ESCAPES)


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` escaped and cut to ``limit`` characters, followed by ``…(N more bytes)``: the UTF-8
    size of the escaped text left out."""
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    kept = escaped[:limit]
    rest = len(escaped.encode()) - len(kept.encode())
    return f"{kept}…({rest} more bytes)"


class DrowseError(Exception):
    """A failure talking to drowsed.

    ``status`` is the HTTP status (0 when there was no answer) and ``code`` the API's error code
    (``not_found``, ``no_background_time``, ``busy``, ...; docs/api.md, "Errors") or a local one:
    ``connect`` (no connection), ``protocol`` (bytes that are not an answer) or ``no_app``. Both
    ``code`` and ``message`` are escaped and cut (``clip``) at 200 and 800 characters.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        code, message = clip(code, QUOTE_LIMIT), clip(message, MESSAGE_LIMIT)
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
