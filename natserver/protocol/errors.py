"""The one table of nats-server's client-visible errors.

Each error is a ``ServerError`` carrying the exact text nats-server sends in ``-ERR '<text>'``
and whether the connection is closed after it. ``text=None`` means nats-server closes without
sending anything (bad arity, bad size, bad CONNECT JSON ...): we do the same.
"""

from __future__ import annotations

__all__ = ["ServerError", "ProtocolError"]


class ServerError:
    __slots__ = ("text", "closes", "wire", "close_reason")

    def __init__(self, text: str | None, closes: bool, close_reason: str = "Protocol Violation"):
        self.text = text
        self.closes = closes
        self.wire = b"" if text is None else f"-ERR '{text}'\r\n".encode()
        # The reason /connz reports for a closed connection (nats-server monitor.go ClosedState).
        self.close_reason = close_reason

    def __repr__(self) -> str:
        return f"ServerError({self.text!r}, closes={self.closes})"


class ProtocolError(Exception):
    """Raised by the parser and op handlers; the client task answers with ``error.wire``."""

    def __init__(self, error: ServerError, detail: str = ""):
        super().__init__(detail or error.text or "protocol violation")
        self.error = error


# parser.go:1253; the parser does not understand the op (also MSG/INFO sent by a client).
UNKNOWN_OP = ServerError("Unknown Protocol Operation", True)
# client.go:2551; PUB/HPUB size above max_payload, checked at the control line.
MAX_PAYLOAD = ServerError("Maximum Payload Violation", True, "Maximum Payload Exceeded")
# parser.go:1288 / errors.go:46
MAX_CONTROL_LINE = ServerError("maximum control line exceeded", True, "Maximum Control Line Exceeded")
AUTH_VIOLATION = ServerError("Authorization Violation", True, "Authentication Failure")
AUTH_TIMEOUT = ServerError("Authentication Timeout", True, "Authentication Timeout")
# client.go authExpired: a user JWT expired while connected.
AUTH_EXPIRED = ServerError("User Authentication Expired", True, "Authentication Expired")
# client.go accountAuthExpired: the account's JWT expired while the client was connected.
ACCOUNT_AUTH_EXPIRED = ServerError("Account Authentication Expired", True, "Authentication Expired")
# client.go maxAccountConnExceeded (an account's max_connections / JWT limits.conn).
MAX_ACCOUNT_CONNECTIONS = ServerError(
    "maximum account active connections exceeded", True, "Maximum Account Connections Exceeded"
)
STALE_CONNECTION = ServerError("Stale Connection", True, "Stale Connection")
# server.go:3354/3381: sent after INFO, then the connection is closed.
MAX_CONNECTIONS = ServerError("maximum connections exceeded", True, "Maximum Connections Exceeded")
INVALID_PROTOCOL = ServerError("invalid client protocol", True)
NO_RESPONDERS_NEEDS_HEADERS = ServerError("no responders requires headers support", True)
# These keep the connection open.
INVALID_SUBJECT = ServerError("Invalid Subject", False)
INVALID_PUBLISH_SUBJECT = ServerError("Invalid Publish Subject", False)
MAX_SUBSCRIPTIONS = ServerError("maximum subscriptions exceeded", False)
# Argument errors nats-server answers by closing without a word (parser.go processPub & co).
SILENT_CLOSE = ServerError(None, True)


def _go_quote(value: bytes) -> str:
    """Go's %q for the subjects in permission errors."""
    text = value.decode("utf-8", "replace")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def permissions_violation(kind: str, subject: bytes) -> ServerError:
    """client.go pubPermissionViolation; kind is "Publish"; the connection stays."""
    return ServerError(f"Permissions Violation for {kind} to {_go_quote(subject)}", False)


def subscription_violation(subject: bytes, queue: bytes | None) -> ServerError:
    """client.go subPermissionViolation; the connection stays."""
    text = f"Permissions Violation for Subscription to {_go_quote(subject)}"
    if queue is not None:
        text += f" using queue {_go_quote(queue)}"
    return ServerError(text, False)


def removed_subscription_violation(subject: bytes, queue: bytes | None, sid: bytes) -> ServerError:
    """client.go processSubsOnConfigReload: a subscription the reloaded permissions no longer
    allow is removed, with its sid named; the connection stays."""
    text = f"Permissions Violation for Subscription to {_go_quote(subject)}"
    if queue is not None:
        text += f" using queue {_go_quote(queue)}"
    return ServerError(f"{text} (sid {_go_quote(sid)})", False)

# A client sent -ERR: nats-server logs it and closes the connection (reason "Parse Error").
CLIENT_ERROR = ServerError(None, True, "Parse Error")
