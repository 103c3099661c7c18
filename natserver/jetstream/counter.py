"""Counters (nats-server 2.12's ``allow_msg_counter``, as 2.15.1 does them).

A counter stream keeps one running total per subject. A publish carries no payload and the
header ``Nats-Incr: <delta>`` (a decimal integer of any size, signed); the stream stores
``{"val":"<total>"}`` on the subject (the previous total, from the subject's last message,
plus the delta), the header kept as published, and acknowledges with the total:
``{"stream":"C","seq":5,"val":"8"}``. Reading the value back is reading the subject's last
message (``STREAM.MSG.GET`` with ``last_by_subj``, ``DIRECT.GET.<stream>.<subject>``).

The refusals, in stream.go processJetStreamMsg's order: an increment that is not an integer
(10171, on any stream), an increment on a stream without counters (10168), with a payload
(10170) or with a roll-up or an expected-* header (10171), and, after the deduplication and
the other header checks, a message without an increment on a counter stream (10169).
Configuration (checkStreamCfg): no discard new, TTLs, schedules, other retention than
limits, nor a mirror (10173); an update can not switch counters on or off.

Sourced counters: a counter stream that sources a counter stream stores the origin's total
for each (origin, subject) in ``Nats-Counter-Sources: {"<origin>":{"<subject>":"<total>"}}``
and adds to its own total the difference from the origin's previous total (written back into
``Nats-Incr``), so that several origins, and local increments, add up. A mirror of a counter
stream, and a plain stream sourcing one, store its messages as they are.

Layer (README "Layers"): below ``stream``, which calls it; what it reads of a stream's
configuration is ``CounterConfig``.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable
from typing import Protocol, Union

import orjson

from . import errors
from .util import dumps, gen_header, get_header

INCR = b"Nats-Incr"  # stream.go JSMessageIncr
COUNTER_SOURCES = b"Nats-Counter-Sources"  # stream.go JSMessageCounterSources
SOURCE_HEADER = b"Nats-Stream-Source"  # stream.go JSStreamSource
# Headers an increment may not come with (stream.go processJetStreamMsg: a roll-up, or a
# consistency check that can not hold for a message the server writes itself).
INCOMPATIBLE = (
    b"Nats-Rollup",
    b"Nats-Expected-Stream",
    b"Nats-Expected-Last-Msg-Id",
    b"Nats-Expected-Last-Subject-Sequence-Subject",
    b"Nats-Expected-Last-Sequence",
    b"Nats-Expected-Last-Subject-Sequence",
)
# Go's big.Int SetString(s, 10): an optional sign, then decimal digits (no spaces, no "_").
_INTEGER = re.compile(rb"[+-]?[0-9]+")
# Totals and increments have any number of digits (Go's big.Int). Python's int() and str()
# refuse more than 4300 digits and take quadratic time near that; decimal.Decimal converts and
# adds decimal digits in linear time (1 000 000 digits: 40 ms), exactly with this context. Short
# numbers (the usual ones) stay ints, which are faster.
_FAST_DIGITS = 4000
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                         traps=[decimal.Inexact, decimal.InvalidOperation])
Number = Union[int, decimal.Decimal]


class CounterConfig(Protocol):
    """What the counter rules read of a stream's configuration (stream.StreamConfig)."""

    @property
    def discard(self) -> str: ...
    @property
    def allow_msg_ttl(self) -> bool: ...
    @property
    def retention(self) -> str: ...
    @property
    def allow_msg_schedules(self) -> bool: ...


def check_counter_config(cfg: CounterConfig) -> None:
    """checkStreamCfg's rules for a counter stream (10052, its texts and order)."""
    invalid = errors.stream_invalid_config
    if cfg.discard == "new":
        raise invalid("counter stream cannot use discard new")
    if cfg.allow_msg_ttl:
        raise invalid("counter stream cannot use message TTLs")
    if cfg.allow_msg_schedules:
        raise invalid("counter stream cannot use message schedules")
    if cfg.retention != "limits":
        raise invalid("counter stream can only use limits retention")


def _number(digits: bytes) -> Number:
    """A decimal integer (already matched by _INTEGER)."""
    if len(digits) <= _FAST_DIGITS:
        return int(digits)
    return decimal.Decimal(digits.decode())


def _add(a: Number, b: Number) -> Number:
    if a.__class__ is int and b.__class__ is int:
        total = a + b
        if -_INT_LIMIT < total < _INT_LIMIT:
            return total
    return _EXACT.add(_decimal(a), _decimal(b))


def _decimal(value: Number) -> decimal.Decimal:
    # (an int here is below _INT_LIMIT: converted in a moment)
    return value if isinstance(value, decimal.Decimal) else decimal.Decimal(value)


_INT_LIMIT = 10 ** _FAST_DIGITS


def _text(value: Number) -> str:
    """big.Int's String(): digits with a "-" when negative, "0" for zero."""
    if isinstance(value, int):
        return str(value)
    return str(value) if value else "0"  # (Decimal keeps a "-0")


def _negate(value: Number) -> Number:
    return -value if isinstance(value, int) else _EXACT.minus(value)


def parse_value(text: str) -> Number:
    """A stored total (big.Int SetString, whose failure leaves the total at 0 here)."""
    raw = text.encode()
    return _number(raw) if _INTEGER.fullmatch(raw) else 0


def parse_incr(hdr: bytes) -> Number | None:
    """The message's increment (None: it has none), or ApiError (10171) when it is not an
    integer: all that is checked of a sourced message, stored as the origin has it."""
    value = get_header(INCR, hdr)
    if not value:
        return None
    if value.isdigit() and len(value) <= _FAST_DIGITS:  # (the usual one: ASCII digits only)
        return int(value)
    if not _INTEGER.fullmatch(value):
        raise errors.message_incr_invalid()
    return _number(value)


def check_publish(allow_counter: bool, hdr: bytes, msg: bytes) -> Number | None:
    """The increment of a published message (None: it has none), or ApiError: the checks
    processJetStreamMsg makes first, before any other header's."""
    incr = parse_incr(hdr)
    if incr is None:
        return None
    if not allow_counter:
        raise errors.message_incr_disabled()
    if msg:
        raise errors.message_incr_payload()
    if b"Nats-Expected-" in hdr or b"Nats-Rollup" in hdr:
        for key in INCOMPATIBLE:
            if get_header(key, hdr):
                raise errors.message_incr_invalid()
    return incr


def _counter_value(body: bytes) -> str:
    """Go's json.Unmarshal of a body into CounterValue{Value string `json:"val"`}: the
    ``val`` string ("" when absent or null); anything else is a broken counter (10172)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.message_counter_broken() from None
    if doc is None:
        return ""
    if not isinstance(doc, dict):
        raise errors.message_counter_broken()
    value = doc.get("val")
    if value is None:  # Go matches a field name without regard to case, the exact one first
        value = next((v for k, v in doc.items() if k.lower() == "val"), None)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise errors.message_counter_broken()
    return value


def _counter_sources(raw: bytes) -> dict:
    """Nats-Counter-Sources as Go's map[string]map[string]string (else 10172)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise errors.message_counter_broken() from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise errors.message_counter_broken()
    for subjects in doc.values():
        if subjects is not None and not (
                isinstance(subjects, dict) and all(v is None or isinstance(v, str) for v in subjects.values())):
            raise errors.message_counter_broken()
    return {k: {s: v or "" for s, v in (subjects or {}).items()} for k, subjects in doc.items()}


def set_header(hdr: bytes, key: bytes, value: bytes) -> bytes:
    """nats-server's setHeader: the first ``key`` line's value replaced (in its place), or
    the header appended."""
    i = 0
    while True:
        i = hdr.find(key, i)
        if i < 0:
            return gen_header(hdr or None, key, value)
        end = i + len(key)
        if i >= 2 and hdr[i - 2 : i] == b"\r\n" and hdr[end : end + 1] == b":":
            start = end + 1
            if hdr[start : start + 1] == b" ":
                start += 1
            stop = hdr.find(b"\r", start)
            if stop < 0:
                return hdr
            return hdr[:start] + value + hdr[stop:]
        i = end


class Totals:
    """A counter stream's last totals, so that an increment need not read and parse its
    subject's last message: subject -> (the sequence the message was to get, total, its
    Nats-Counter-Sources). An entry counts only while that sequence is still the subject's
    last (a message refused after ``apply``, deleted or purged leaves a stale entry, which
    the store then replaces); at most MAX_TOTALS subjects are kept."""

    MAX_TOTALS = 10_000

    __slots__ = ("by_subject",)

    def __init__(self) -> None:
        self.by_subject: dict[bytes, tuple[int, Number, bytes]] = {}

    def last(self, store, subject: bytes) -> tuple[Number, bytes]:
        """The subject's total and its Nats-Counter-Sources (b"": none)."""
        seq = store.last_seq_for(subject)
        if not seq:
            return 0, b""
        cached = self.by_subject.get(subject)
        if cached is not None and cached[0] == seq:
            return cached[1], cached[2]
        last = store.load_msg(seq)
        if last is None:
            return 0, b""
        total = parse_value(_counter_value(last.data))
        return total, (get_header(COUNTER_SOURCES, last.hdr) if last.hdr and COUNTER_SOURCES in last.hdr else b"")

    def keep(self, subject: bytes, seq: int, total: Number, sources: bytes) -> None:
        if len(self.by_subject) >= self.MAX_TOTALS and subject not in self.by_subject:
            self.by_subject.clear()
        self.by_subject[subject] = (seq, total, sources)


class InflightTotals(Totals):
    """A replicated counter stream's leader (jetstream_cluster.go processClusteredInboundMsg's
    clusteredCounterTotal): the total of a subject whose increment is proposed and not yet
    applied is the proposal's, not the store's. ``next_seq()`` is the sequence the next
    proposal takes and ``applied()`` the last one applied, both counted as the leader counts
    its proposals (its clseq: failed proposals included); an entry whose proposal is applied,
    or failed, gives way to the store's total."""

    __slots__ = ("inflight", "next_seq", "applied")

    def __init__(self, next_seq: Callable[[], int], applied: Callable[[], int]) -> None:
        super().__init__()
        self.inflight: dict[bytes, tuple[int, Number, bytes]] = {}
        self.next_seq = next_seq
        self.applied = applied

    def last(self, store, subject: bytes) -> tuple[Number, bytes]:
        entry = self.inflight.get(subject)
        if entry is not None:
            if entry[0] > self.applied():
                return entry[1], entry[2]
            del self.inflight[subject]
        return super().last(store, subject)

    def keep(self, subject: bytes, seq: int, total: Number, sources: bytes) -> None:
        if len(self.inflight) >= self.MAX_TOTALS and subject not in self.inflight:
            applied = self.applied()
            self.inflight = {k: v for k, v in self.inflight.items() if v[0] > applied}
        self.inflight[subject] = (self.next_seq(), total, sources)


_INCR_ONLY = b"NATS/1.0\r\n" + INCR + b":"  # a header block whose first line is the increment
_INCR_VALUE_AT = len(_INCR_ONLY)


def simple_increment(store, totals: Totals, subject: bytes, hdr: bytes, msg: bytes) -> tuple[bytes, bytes] | None:
    """The usual increment, as clients send it, in one step: a header block of the Nats-Incr
    line alone, no payload, a non-negative integer of up to _FAST_DIGITS digits, on a subject
    whose total Totals holds and has no Nats-Counter-Sources. Returns (the body to store,
    the total's digits), or None for anything else, which process_msg's checks and ``apply``
    then take (every refusal is theirs: this only says yes). The same result as ``apply``:
    tests/jetstream/test_counters.py runs both on the same increments."""
    end = len(hdr) - 4
    if msg or not hdr.startswith(_INCR_ONLY) or hdr.find(b"\r\n", _INCR_VALUE_AT) != end \
            or not hdr.endswith(b"\r\n\r\n"):
        return None
    value = hdr[_INCR_VALUE_AT:end].lstrip(b" ")
    if not value.isdigit() or len(value) > _FAST_DIGITS:
        return None
    by_subject = totals.by_subject
    cached = by_subject.get(subject)
    if cached is None or cached[2]:
        return None
    # The subject's last sequence (store.last_seq_for, for a subject without wildcards).
    ss = store.fss.get(subject)
    # (find, not `in`: see util.has_wildcard)
    if ss is None or cached[0] != ss[2] or subject.find(b"*") >= 0 or subject.find(b">") >= 0:
        return None
    total = cached[1]
    if total.__class__ is not int:
        return None
    total += int(value)
    if total >= _INT_LIMIT:
        return None
    digits = b"%d" % total
    # (Totals.keep, for the message's sequence-to-be; the subject is already there)
    by_subject[subject] = (store.last_seq + 1, total, b"")
    return b'{"val":"' + digits + b'"}', digits


def apply(store, totals: Totals, subject: bytes, hdr: bytes, msg: bytes, incr: Number,
          max_payload: int) -> tuple[bytes, bytes, bytes]:
    """What a counter stream stores for an increment of ``subject``: (header, body, total).
    A sourced message (``hdr`` has Nats-Stream-Source, ``msg`` is the origin's body) counts
    the origin's new total less its previous one. Raises ApiError (a broken counter, a
    message over ``max_payload``)."""
    total, raw = totals.last(store, subject)
    sources = _counter_sources(raw) if raw else {}
    source = get_header(SOURCE_HEADER, hdr) if SOURCE_HEADER in hdr else b""
    if source:
        # stream.go: the origin is the header's first field, its subject the fifth (2.10+'s
        # form; natserver writes 2.9's "<origin> <sequence>": the subject is the same).
        fields = source.decode("utf-8", "replace").split(" ")
        origin = fields[0]
        origin_subject = fields[4] if len(fields) >= 5 else subject.decode("utf-8", "replace")
        now = parse_value(_counter_value(msg))
        per_subject = sources.setdefault(origin, {})
        before = parse_value(per_subject.get(origin_subject, ""))
        per_subject[origin_subject] = _text(now)
        incr = _add(now, _negate(before))
        hdr = set_header(hdr, INCR, _text(incr).encode())
    total = _add(total, incr)
    text = _text(total).encode()
    body = b'{"val":"' + text + b'"}'
    if sources:
        ordered = {k: dict(sorted(v.items())) for k, v in sorted(sources.items())}  # Go sorts map keys
        hdr = set_header(hdr, COUNTER_SOURCES, dumps(ordered))
    if len(hdr) > max_payload or len(body) > max_payload - len(hdr):
        raise errors.message_exceeds_maximum()
    # The message gets the store's next sequence, unless something refuses it (then the
    # entry is stale at once: see Totals).
    kept = get_header(COUNTER_SOURCES, hdr) if COUNTER_SOURCES in hdr else b""
    totals.keep(subject, store.last_seq + 1, total, kept)
    return hdr, body, text
