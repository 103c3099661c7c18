"""The errors of the Spark data source: each names one problem in one line.

They are raised on the driver while the query is planned where possible (bad options, server
unreachable, stream missing), else in a task (a message lost before it was read, a publish the
server refused). Spark wraps them in its own exceptions; the first line of our message stays
readable in the middle of Spark's text because it starts with ``nats:``.
"""

from __future__ import annotations


class NatsSparkError(Exception):
    """Base class: ``str(exc)`` is one line starting with ``nats:``."""

    def __init__(self, message: str) -> None:
        message = " ".join(str(message).split())  # one line, whatever the cause said
        if not message.startswith("nats:"):
            message = "nats: " + message
        super().__init__(message)


class OptionError(NatsSparkError, ValueError):
    """A bad or missing option (or a DataFrame that does not fit the sink)."""


class ConnectError(NatsSparkError, ConnectionError):
    """No server in ``servers`` could be reached, or it refused us (authorization)."""


class NatsTimeout(NatsSparkError, TimeoutError):
    """A request got no answer in time."""


class JetStreamError(NatsSparkError):
    """An error answer of the JetStream API (``code``/``err_code`` as the server sent them)."""

    def __init__(self, message: str, code: int = 0, err_code: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.err_code = err_code


class JetStreamNotEnabled(JetStreamError):
    """Nothing answers ``$JS.API``: the server runs without ``-js``."""


class StreamNotFound(JetStreamError):
    """The stream does not exist."""


class DataLossError(NatsSparkError):
    """Messages the query must read are gone (limits, purge, deleted or re-created stream)."""


class PublishError(NatsSparkError):
    """A publish was refused or not acknowledged."""
