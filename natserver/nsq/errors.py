"""Every error nsqd sends, as one exception type carrying the wire text and whether it closes.

nsqd (``nsqd/protocol_v2.go``) answers a bad command with an error frame whose body is
``CODE description``; a *fatal* error (``protocol.FatalClientErr``) is followed by closing
the connection, a plain one (``protocol.ClientErr``) is not. Only FIN, REQ and TOUCH on a
message that is not in flight are non-fatal.
"""

from __future__ import annotations

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqError", "NON_FATAL_CODES", "HttpError"]

# The codes nsqd sends as non-fatal ClientErr (protocol_v2.go FIN/REQ/TOUCH); everything else closes.
NON_FATAL_CODES = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class NsqError(Exception):
    """An error frame: ``code`` (``E_INVALID``...), ``text`` and whether the connection closes.

    ``code`` None means the connection closes without an error frame (nsqd's "failed to read
    command" cases, such as a command line longer than its read buffer).
    """

    def __init__(self, code: str | None, text: str = "", *, fatal: bool | None = None) -> None:
        super().__init__(f"{code} {text}" if code else text)
        self.code = code
        self.text = text
        self.fatal = (code not in NON_FATAL_CODES) if fatal is None else fatal

    @property
    def wire(self) -> bytes:
        """The error frame's body (raw client bytes quoted by nsqd come back as they were)."""
        text = f"{self.code} {self.text}" if self.text else str(self.code)
        return text.encode("utf-8", "surrogateescape")

    @property
    def logged(self) -> str:
        """The error for a log line: raw client bytes (kept as surrogates for the wire) shown
        backslash-escaped, since a log line must be valid text for every handler."""
        message = str(self) if self.code else self.text
        return message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class HttpError(Exception):
    """An HTTP API error: nsqd answers ``{"message": "<MESSAGE>"}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
