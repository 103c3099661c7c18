"""Per-message TTLs (nats-server 2.11+): the ``Nats-TTL`` header, the schedule of expiries and
the subject delete markers a stream with ``subject_delete_marker_ttl`` leaves behind.

A message published with ``Nats-TTL`` (on a stream with ``allow_msg_ttl``) goes at its own
time: its timestamp plus the TTL, read on the server's clock (natserver/clock.py). ``never``
exempts it from the stream's ``max_age`` (stream.go parseMessageTTL, memstore.go expireMsgs).
:class:`TtlSchedule` keeps what is due as a heap of ``(expires, seq)``: adding is O(log n),
finding what is due looks only at what is due, and a message removed some other way leaves a
stale entry that is skipped when it comes up (and dropped by :meth:`TtlSchedule.compact` when
stale entries outnumber live ones).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from ..protocol.gotext import go_duration, parse_duration
from .util import get_header

MSG_TTL = b"Nats-TTL"  # stream.go JSMessageTTL
MARKER_REASON = b"Nats-Marker-Reason"  # stream.go JSMarkerReason
MARKER_REASON_MAX_AGE = b"MaxAge"  # stream.go JSMarkerReasonMaxAge
_KV_OPERATION = b"KV-Operation"  # a Key-Value purge is a delete marker too (sdm.go)
_KV_PURGE = b"PURGE"

TTL_NEVER = -1  # parse_ttl's "never": the message never expires, max_age spares it
MIN_TTL_SECONDS = 1  # stream.go parseMessageTTL: a duration under 1s is invalid
# stream.go checkStreamCfg: "subject delete marker TTL must be at least 1 second".
MIN_MARKER_TTL_NS = 1_000_000_000
_NS = 1_000_000_000
_INT64 = 1 << 64
_INT64_LIMIT = 1 << 63


class InvalidTTL(ValueError):
    """The ``Nats-TTL`` value is not a TTL (10165 "invalid per-message TTL")."""


def _int64(value: int) -> int:
    """Go's int64 arithmetic wraps around."""
    value &= _INT64 - 1
    return value - _INT64 if value >= 1 << 63 else value


def parse_ttl(value: bytes) -> int:
    """nats-server's parseMessageTTL: seconds (> 0), TTL_NEVER for ``never`` (any case), 0 for
    an empty value (no TTL). A Go duration under one second, a negative or malformed number
    raise InvalidTTL; a duration counts whole seconds (``1.5s`` is 1), a plain number is
    seconds (digits only, wrapping around as Go's int64 does)."""
    if not value:
        return 0
    if value.isdigit() and value != b"0":  # (Go's ParseDuration takes only "0" without a unit)
        seconds = _int64(int(value))
        if seconds < 0:
            raise InvalidTTL(value.decode())
        return seconds
    ttl = _parsed.get(value)
    if ttl is None:
        ttl = _parse_ttl(value)
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[value] = ttl
    return ttl


# Parsed TTL values (a stream's messages mostly carry a few): value -> seconds.
_parsed: dict[bytes, int] = {}
_PARSED_MAX = 1024


def _parse_ttl(value: bytes) -> int:
    text = value.decode("utf-8", "replace")
    if text.lower() == "never":
        return TTL_NEVER
    try:
        seconds = parse_duration(text)
    except ValueError:
        pass
    else:
        if seconds < MIN_TTL_SECONDS:
            raise InvalidTTL(text)
        return int(seconds)
    if not value.isdigit():
        raise InvalidTTL(text)  # (Go's parseInt64 gives -1: "a parse failure")
    seconds = _int64(int(value))
    if seconds < 0:
        raise InvalidTTL(text)
    return seconds


def header_ttl(hdr: bytes | None) -> int:
    """The TTL a stored message's headers carry (0: none, or not a valid one)."""
    if not hdr or MSG_TTL not in hdr:
        return 0
    try:
        return parse_ttl(get_header(MSG_TTL, hdr))
    except InvalidTTL:
        return 0


def expires_at(ts: int, ttl: int) -> int:
    """When a message stored at ``ts`` (ns) with ``ttl`` seconds expires (filestore.go:
    ``time.Duration(ts) + time.Second*time.Duration(ttl)``, int64 arithmetic)."""
    expires = ts + ttl * _NS
    return expires if 0 <= expires < _INT64_LIMIT else _int64(ts + _int64(ttl * _NS))


def is_marker(hdr: bytes | None) -> bool:
    """sdm.go isSubjectDeleteMarker: a server's marker, or a Key-Value purge."""
    if not hdr:
        return False
    return bool(get_header(MARKER_REASON, hdr)) or get_header(_KV_OPERATION, hdr) == _KV_PURGE


def marker_header(marker_ttl_ns: int) -> bytes:
    """The headers of the message nats-server stores when max_age or a TTL removes the last
    message of a subject (memstore.go/filestore.go handleRemovalOrSdm): the reason, the
    marker's own TTL as Go prints a duration of whole seconds, and a subject roll-up that
    removes what it replaces."""
    seconds = marker_ttl_ns // _NS
    return b"NATS/1.0\r\n%s: %s\r\n%s: %s\r\nNats-Rollup: sub\r\n\r\n" % (
        MARKER_REASON, MARKER_REASON_MAX_AGE, MSG_TTL, go_duration(seconds).encode())


class TtlSchedule:
    """The messages with a TTL: a heap of ``(expires ns, seq)``, and the messages that never
    expire (``never``: exempt from max_age)."""

    __slots__ = ("heap", "never")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int]] = []
        self.never: set[int] = set()

    def add(self, seq: int, ts: int, ttl: int) -> None:
        if ttl > 0:
            heapq.heappush(self.heap, (expires_at(ts, ttl), seq))
        elif ttl < 0:
            self.never.add(seq)

    def add_many(self, entries: list[tuple[int, int]]) -> None:
        """``(expires, seq)`` entries at once (recovery): one heapify."""
        self.heap += entries
        heapq.heapify(self.heap)

    def clear(self) -> None:
        self.heap = []
        self.never = set()

    def next_expiry(self) -> int | None:
        """When the earliest entry is due (ns; it may be stale: then nothing goes then)."""
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: int) -> int:
        """The sequence of an entry due at ``now`` (0: none due)."""
        heap = self.heap
        if heap and heap[0][0] <= now:
            return heapq.heappop(heap)[1]
        return 0

    def compact(self, live: Callable[[int], bool], messages: int) -> None:
        """Drop entries of messages that are gone, once they outnumber the live messages
        (amortised: each rebuild at least halves the entries)."""
        if len(self.heap) > 2 * messages + 1024:
            self.heap = [e for e in self.heap if live(e[1])]
            heapq.heapify(self.heap)
        if len(self.never) > 2 * messages + 1024:
            self.never = {seq for seq in self.never if live(seq)}
