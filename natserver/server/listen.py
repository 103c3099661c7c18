"""Why a listener could not be opened, as nats-server says it (``listen tcp HOST:PORT: bind:
address already in use``): the client listener and the monitor both fail this way."""

from __future__ import annotations

from ..protocol.gotext import go_listen_error

__all__ = ["ListenError", "listen_error"]


class ListenError(OSError):
    """A listener could not be opened (port in use, address not available): ``str()`` is
    nats-server's text for it, already logged at [FTL] level."""

    def __str__(self) -> str:
        return self.strerror or ""


def listen_error(host: str, port: int, exc: OSError) -> ListenError:
    return ListenError(exc.errno, go_listen_error(host, port, exc))
