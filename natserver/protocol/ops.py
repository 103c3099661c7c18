"""The client operations the parser produces.

Each op is a small immutable value. They are ``NamedTuple`` subclasses: frozen, with empty
``__slots__``, and the cheapest Python objects to build after a plain tuple, which matters
because one is built per message on the publish path.
"""

from __future__ import annotations

from typing import NamedTuple, Union

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Connect", "Pub", "PubRun", "Sub", "Unsub", "Ping", "PingRun", "Pong", "PING", "PONG", "NEED_DATA", "NeedData", "Op"]


class NeedData:
    """Sentinel: the parser needs more bytes before it can produce the next op."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


class Connect(NamedTuple):
    """``CONNECT {json}``: ``options`` is the decoded JSON object."""

    options: dict


class Pub(NamedTuple):
    """``PUB`` (``header_size == -1``) or ``HPUB``.

    ``payload`` is the whole message body after the control line, headers included for HPUB
    (``payload[:header_size]`` is the header block). It is a bytes-like object: a memoryview
    slice of the received chunk for large payloads (no copy), ``bytes`` for small ones.
    """

    subject: bytes
    reply: bytes | None
    header_size: int
    # The size argument(s) exactly as the client wrote them (b"5", or b"12 14" for HPUB):
    # nats-server echoes these digits in MSG/HMSG rather than re-formatting the number.
    sizes: bytes
    payload: bytes | memoryview


class PubRun(NamedTuple):
    """``count`` consecutive plain PUBs on ``subject``, as their raw wire bytes ``data``, each
    starting with ``prefix`` (b"PUB <subject><blanks>") followed by exactly "[reply ]size".
    ``size`` is the sum of their payload sizes; ``uniform`` says all payloads have the same
    size (so a share of the run has a known byte count); ``replies`` says some of them have a
    reply subject.

    Only ``Parser.parse()`` with ``coalesce`` set returns these. A router delivers the whole
    run with ``data.replace(prefix, b"MSG <subject> <sid> ")``, which is exact when the prefix
    occurs exactly ``count`` times, once per message: a payload may hold it too, and then the
    router must deliver the messages one by one. ``Parser.expand(data)`` gives the individual
    ``Pub`` ops back. Like a Pub's payload, ``data`` is bytes-like: a memoryview slice of the
    received chunk for long runs (no copy), ``bytes`` for short ones.
    """

    subject: bytes
    count: int  # type: ignore[assignment]  # (a field named like tuple.count: public since PubRun exists)
    size: int
    uniform: bool
    replies: bool
    data: bytes | memoryview
    prefix: bytes


class Sub(NamedTuple):
    """``SUB <subject> [queue] <sid>``."""

    subject: bytes
    queue: bytes | None
    sid: bytes


class Unsub(NamedTuple):
    """``UNSUB <sid> [max]``; ``max_msgs`` is -1 when absent or not a number (unsubscribe now)."""

    sid: bytes
    max_msgs: int


class Ping(NamedTuple):
    """``PING``."""


class Pong(NamedTuple):
    """``PONG``."""


class PingRun(NamedTuple):
    """``count`` (two or more) ``PING`` lines in a row, as one op: only from a parser asked to
    coalesce (the server's), which answers them with one write of PONGs. Parsed one by one a
    flood of PINGs cost 5 us each (57 ms a 64 KiB read) while every other client waited."""

    count: int  # type: ignore[assignment]  # (a field named like tuple.count, as PubRun's)


PING = Ping()
PONG = Pong()

Op = Union[Connect, Pub, PubRun, Sub, Unsub, Ping, PingRun, Pong]
