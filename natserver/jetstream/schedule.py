"""Message schedules (nats-server 2.12's ``allow_msg_schedules``, as 2.15.1 does them).

A message published with ``Nats-Schedule: <pattern>`` on a stream with ``allow_msg_schedules``
is a schedule: it stays on its own subject (the stream adds ``Nats-Rollup: sub``, so a new
schedule on the subject replaces the old one) and, when the pattern comes due, the stream
stores a copy of it on ``Nats-Schedule-Target`` (stream.go, scheduler.go, cron.go):

* patterns: ``@at <RFC 3339 time>`` (once), ``@every <Go duration>`` (at least 1s), six-field
  cron (``sec min hour dom month dow``: numbers, names, ``*``/``?``, ranges, lists, steps) and
  ``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/``@midnight``/``@hourly``;
  ``Nats-Schedule-Time-Zone`` (cron only) names an IANA zone (Python's zoneinfo).
* the fired message: the schedule's headers and body (or, with ``Nats-Schedule-Source``, those
  of that subject's last message) without the ``Nats-Schedule*``, ``Nats-Expected-*``,
  ``Nats-Msg-Id``, ``Nats-TTL`` and ``Nats-Rollup`` headers, then ``Nats-Scheduler: <schedule
  subject>``, ``Nats-Schedule-Next: <next time, RFC 3339>`` (or ``purge`` for a schedule that
  does not repeat: storing the message purges the schedule's subject), ``Nats-TTL`` from
  ``Nats-Schedule-TTL`` and ``Nats-Rollup`` from ``Nats-Schedule-Rollup``.
* a repeating schedule that came due more than once (a restart) fires once and skips ahead.

:class:`Scheduler` keeps, per stream, each schedule subject's (sequence, due time) and a heap
of due times; a turn fires at most FIRE_BATCH schedules and comes back after the other tasks.
"""

from __future__ import annotations

import calendar
import heapq
import re
from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING

from ..protocol.gotext import parse_duration
from . import errors, gotime
from .errors import ApiError
from .ttl import InvalidTTL, parse_ttl
from .util import gen_header, is_valid_subject, subjects_collide

if TYPE_CHECKING:
    from .store import MemoryStore

# stream.go: the headers of a schedule ...
SCHEDULE = b"Nats-Schedule"  # JSSchedulePattern
TIME_ZONE = b"Nats-Schedule-Time-Zone"  # JSScheduleTimeZone
SCHEDULE_TTL = b"Nats-Schedule-TTL"  # JSScheduleTTL
SCHEDULE_ROLLUP = b"Nats-Schedule-Rollup"  # JSScheduleRollup
TARGET = b"Nats-Schedule-Target"  # JSScheduleTarget
SOURCE = b"Nats-Schedule-Source"  # JSScheduleSource
# ... and of a message it fires.
SCHEDULER = b"Nats-Scheduler"  # JSScheduler
NEXT = b"Nats-Schedule-Next"  # JSScheduleNext
NEXT_PURGE = b"purge"  # JSScheduleNextPurge: a schedule that does not repeat is purged
ROLLUP = b"Nats-Rollup"
ROLLUP_SUBJECT = b"sub"  # JSMsgRollupSubject
MSG_TTL = b"Nats-TTL"
MSG_ID = b"Nats-Msg-Id"

# scheduler.go parseMsgSchedule: "Only allow intervals of at least a second."
MIN_EVERY_NS = 1_000_000_000
# cron.go parseCron: "If no time is found within five years, return error."
CRON_YEAR_LIMIT = 5
# scheduler.go resetTimer: nats-server's timer fires at least 250 ms after it is set, so a
# schedule fires no sooner than that after it was stored (an @at in the past: 250 ms later).
MIN_FIRE_DELAY_NS = 250_000_000
# Schedules one turn of the firing task fires at most (per stream), then it lets the other
# tasks run: like ttl.py's EXPIRE_BATCH, bounded work on the one thread serving every client.
FIRE_BATCH = 1024

# Parsed zones and cron patterns kept (a stream's schedules mostly share a few).
_CACHE_MAX = 1024
_INT64_MAX = 2**63 - 1  # strconv.Atoi's range (a larger number does not parse)
_NS = 1_000_000_000
_EMPTY_HDR = len(b"NATS/1.0\r\n\r\n")

# scheduler.go: the predefined schedules, as six-field cron.
PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}


# -- headers (client.go's sliceHeader / removeHeaderIfPrefixPresent) ------------------------


def slice_header(key: bytes, hdr: bytes | None) -> bytes | None:
    """client.go sliceHeader: the value of the first line ``key:`` (spaces before the value
    skipped); None when there is none (b"": present, empty). Occurrences of ``key`` that do not
    start a line or are not followed by ':' (``Nats-Schedule`` in ``Nats-Schedule-Target``) are
    passed over."""
    if not hdr:
        return None
    index = _key_index(key, hdr)
    if index < 0:
        return None
    i, n = index + len(key) + 1, len(hdr)
    while i < n and hdr[i] == 32:
        i += 1
    end = hdr.find(b"\r\n", i)
    return hdr[i:] if end < 0 else hdr[i:end]


def remove_prefixed(hdr: bytes | None, prefix: bytes) -> bytes | None:
    """client.go removeHeaderIfPrefixPresent: every line starting with ``prefix`` goes (None
    when nothing is left)."""
    index = 0
    while hdr:
        if index >= len(hdr):
            return hdr
        start = hdr.find(prefix, index)
        if start < 0:
            return hdr
        index = start
        if index < 1 or hdr[index - 1] != 10:
            index += len(prefix)
            continue
        end = hdr.find(b"\r\n", index + len(prefix))
        if end < 0:
            return hdr
        hdr = hdr[:index] + hdr[end + 2 :]
        if len(hdr) <= _EMPTY_HDR:
            return None
    return hdr


def is_valid_publish_subject(subject: str) -> bool:
    """sublist.go IsValidPublishSubject: a valid subject without wildcards."""
    if not subject or not is_valid_subject(subject):
        return False
    return all(token not in ("*", ">") for token in subject.split("."))


# -- time zones -------------------------------------------------------------------------------


class _Invalid(Exception):
    """A pattern, time zone or value the schedule can not use."""


def load_location(hdr: bytes | None) -> tzinfo | None:
    """stream.go loadMessageScheduleLocation: the zone ``Nats-Schedule-Time-Zone`` names (None:
    no such header). An empty or unknown name raises ApiError 10223."""
    tz = slice_header(TIME_ZONE, hdr)
    if tz is None:
        return None
    if not tz:
        raise errors.message_schedules_time_zone_invalid()
    try:
        return _zone(tz.decode("utf-8", "surrogateescape"))
    except _Invalid:
        raise errors.message_schedules_time_zone_invalid() from None


_zones: dict[str, tzinfo] = {}


def _zone(name: str) -> tzinfo:
    """Go's time.LoadLocation (for a non-empty name) by Python's zoneinfo."""
    zone = _zones.get(name)
    if zone is not None:
        return zone
    if name == "UTC":
        zone = timezone.utc
    elif name == "Local":
        zone = _local_zone()
    else:
        if ".." in name or name[0] in "/\\":  # (Go's containsDotDot: errLocation)
            raise _Invalid(name)
        import zoneinfo  # (here: a server without schedules never loads the tz database)

        try:
            zone = zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
            raise _Invalid(name) from None
    if len(_zones) < _CACHE_MAX:
        _zones[name] = zone
    return zone


def _local_zone() -> tzinfo:
    """Go's time.Local: $TZ (a zone name), else /etc/localtime, else UTC."""
    import os
    import zoneinfo

    name = os.environ.get("TZ", "").lstrip(":")
    try:
        if name:
            return zoneinfo.ZoneInfo(name)
        with open("/etc/localtime", "rb") as f:
            return zoneinfo.ZoneInfo.from_file(f, key="Local")
    except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return timezone.utc


def _offset_at(seconds: int, loc: tzinfo) -> int:
    """The zone's UTC offset (seconds) at a Unix time."""
    offset = datetime.fromtimestamp(seconds, loc).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def offset_at(ns: int, loc: tzinfo | None) -> int:
    return 0 if loc is None or loc is timezone.utc else _offset_at(ns // _NS, loc)


# -- patterns (scheduler.go parseMsgSchedule) ---------------------------------------------------


def _round_second(ns: int) -> int:
    """Go's Time.Round(time.Second) (halfway values up)."""
    return (ns + _NS // 2) // _NS * _NS


def parse_schedule(pattern: bytes, loc: tzinfo | None, ts: int, now: int) -> tuple[int, bool]:
    """scheduler.go parseMsgSchedule: (when it fires next after ``ts``, ns; whether it
    repeats). ``now``: a repeating schedule whose next time is before it skips ahead (fires
    once). (0, False) for an empty pattern; raises _Invalid for one that is not a schedule."""
    if not pattern:
        return 0, False
    text = pattern.decode("utf-8", "surrogateescape")
    if text.startswith("@at "):
        if loc is not None:  # (a time zone is for cron patterns only)
            raise _Invalid(text)
        try:
            return gotime.parse(text[4:])[0], False
        except ValueError:
            raise _Invalid(text) from None
    if text.startswith("@every "):
        if loc is not None:
            raise _Invalid(text)
        try:
            every = round(parse_duration(text[7:]) * _NS)
        except ValueError:
            raise _Invalid(text) from None
        if every < MIN_EVERY_NS:
            raise _Invalid(text)
        nxt = _round_second(ts) + every
        if nxt < now:
            nxt = _round_second(now) + every
        return nxt, True
    text = PREDEFINED.get(text, text)
    cron = parse_cron_pattern(text)
    nxt = cron.next_after(ts, loc)
    if nxt < now:
        nxt = cron.next_after(_round_second(now), loc)
    return nxt, True


def check_schedule(hdr: bytes, now: int) -> int:
    """stream.go getMessageSchedule for a published message: when it first fires (0: not a
    schedule). Raises ApiError: 10223 (time zone), 10189 (pattern)."""
    loc = load_location(hdr)
    try:
        return parse_schedule(slice_header(SCHEDULE, hdr) or b"", loc, now, now)[0]
    except _Invalid:
        raise errors.message_schedules_pattern_invalid() from None


# -- cron (cron.go, after robfig/cron) ----------------------------------------------------------

_STAR = 1 << 63  # cron.go starBit: the field had a '*' or '?'
_INT = re.compile(r"[+-]?[0-9]+")  # strconv.Atoi's syntax
_MONTHS = {name: i + 1 for i, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (min, max, names) of each field: seconds, minutes, hours, day of month, month, day of week.
_BOUNDS = ((0, 59, None), (0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _DAYS))


def _number(expr: str, names: dict | None) -> int:
    if names is not None and expr.lower() in names:
        return names[expr.lower()]
    if not _INT.fullmatch(expr) or len(expr.lstrip("+-").lstrip("0")) > 19 or abs(int(expr)) > _INT64_MAX:
        raise _Invalid(f"failed to parse int from {expr}")
    value = int(expr)
    if value < 0:
        raise _Invalid(f"negative number ({value}) not allowed: {expr}")
    return value


def _range(expr: str, bounds: tuple) -> int:
    lo, hi, names = bounds
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    extra = 0
    if low_high[0] in ("*", "?"):
        start, end, extra = lo, hi, _STAR
    else:
        start = _number(low_high[0], names)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _number(low_high[1], names)
        else:
            raise _Invalid(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _number(range_and_step[1], None)
        if len(low_high) == 1:  # "N/step" is "N-max/step"
            end = hi
        if step > 1:
            extra = 0
    else:
        raise _Invalid(f"too many slashes: {expr}")
    if start < lo or end > hi or start > end or step == 0:
        raise _Invalid(expr)
    bits = 0
    for i in range(start, end + 1, step):
        bits |= 1 << i
    return bits | extra


class Cron:
    """A parsed six-field pattern: a bit set per field."""

    __slots__ = ("second", "minute", "hour", "dom", "month", "dow")

    def __init__(self, fields: list[int]) -> None:
        self.second, self.minute, self.hour, self.dom, self.month, self.dow = fields

    def _day_matches(self, day: int, weekday: int) -> bool:
        dom_match = bool(1 << day & self.dom)
        dow_match = bool(1 << weekday & self.dow)
        if self.dom & _STAR or self.dow & _STAR:
            return dom_match and dow_match
        return dom_match or dow_match

    def next_after(self, ts: int, loc: tzinfo | None) -> int:
        """cron.go parseCron: the first time after ``ts`` (ns, truncated to the second) the
        pattern matches, in ``loc`` (None: UTC). Raises _Invalid when there is none within
        five years."""
        zone = loc if loc is not None and loc is not timezone.utc else None
        t = ts // _NS + 1  # Unix seconds: the upcoming second

        def fields(t: int) -> tuple[int, int, int, int, int, int, int]:
            if zone is None:
                d = datetime.fromtimestamp(t, timezone.utc)
            else:
                d = datetime.fromtimestamp(t, zone)
            return d.year, d.month, d.day, d.hour, d.minute, d.second, (d.weekday() + 1) % 7

        def date(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int:
            # Go's time.Date: months and days out of range normalise; then the wall time's
            # offset as Go's lookup finds it (around a transition: the offset in effect at the
            # wall time taken as UTC, corrected once).
            y += (mo - 1) // 12
            mo = (mo - 1) % 12 + 1
            wall = calendar.timegm((y, mo, 1, h, mi, s)) + (d - 1) * 86400
            if zone is None:
                return wall
            off = _offset_at(wall, zone)
            if off == 0:
                return wall
            return wall - _offset_at(wall - off, zone)

        year, month, day, hour, minute, second, weekday = fields(t)
        year_limit = year + CRON_YEAR_LIMIT
        truncated = False
        while True:  # cron.go's WRAP
            year, month, day, hour, minute, second, weekday = fields(t)
            if year > year_limit:
                raise _Invalid("pattern exceeds maximum range")
            wrapped = False
            while not (1 << month & self.month):
                if not truncated:
                    truncated = True
                    t = date(year, month, 1, 0, 0, 0)
                year, month, day, hour, minute, second, weekday = fields(t)
                t = date(year, month + 1, day, hour, minute, second)
                year, month, day, hour, minute, second, weekday = fields(t)
                if month == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not self._day_matches(day, weekday):
                if not truncated:
                    truncated = True
                    t = date(year, month, day, 0, 0, 0)
                year, month, day, hour, minute, second, weekday = fields(t)
                t = date(year, month, day + 1, hour, minute, second)
                year, month, day, hour, minute, second, weekday = fields(t)
                if day == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << hour & self.hour):
                if not truncated:
                    truncated = True
                    t = date(year, month, day, hour, 0, 0)
                t += 3600
                year, month, day, hour, minute, second, weekday = fields(t)
                if hour == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << minute & self.minute):
                if not truncated:
                    truncated = True
                    t -= t % 60
                t += 60
                year, month, day, hour, minute, second, weekday = fields(t)
                if minute == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << second & self.second):
                truncated = True
                t += 1
                year, month, day, hour, minute, second, weekday = fields(t)
                if second == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            return t * _NS


_crons: dict[str, Cron] = {}


def parse_cron_pattern(text: str) -> Cron:
    """The six fields of a cron pattern (raises _Invalid)."""
    cron = _crons.get(text)
    if cron is not None:
        return cron
    parts = text.split()
    if len(parts) != 6:
        raise _Invalid(f"pattern requires 6 fields, got {len(parts)}")
    values = []
    for part, bounds in zip(parts, _BOUNDS):
        bits = 0
        for expr in part.split(","):
            if expr:  # (Go's FieldsFunc: empty items are skipped)
                bits |= _range(expr, bounds)
        values.append(bits)
    cron = Cron(values)
    if len(_crons) < _CACHE_MAX:
        _crons[text] = cron
    return cron


# -- publishing (stream.go processJetStreamMsg) -------------------------------------------------


def check_publish(allowed: bool, allow_ttl: bool, subjects: list[str], subject: bytes, hdr: bytes,
                  last_msg: Callable[[bytes], tuple[bytes, bytes] | None], now: int) -> bytes:
    """The schedule headers of a published message, in stream.go's order: returns the headers
    to store (a schedule gains ``Nats-Rollup: sub``). Raises ApiError: 10188 (schedules
    disabled), 10223, 10189, 10191 (TTL), 10192 (roll-up), 10166 (a TTL without TTLs), 10190
    (target), 10203 (source), 10212 (a client's Nats-Schedule-Next or Nats-Scheduler).
    ``last_msg(subject)``: the subject's last message (headers, body) or None."""
    try:
        due = check_schedule(hdr, now) if (SCHEDULE in hdr) else 0
    except ApiError:
        if not allowed:
            raise errors.message_schedules_disabled() from None
        raise
    if due:
        if not allowed:
            raise errors.message_schedules_disabled()
        ttl = slice_header(SCHEDULE_TTL, hdr)
        if ttl:
            try:
                parse_ttl(ttl)
            except InvalidTTL:
                raise errors.message_schedules_ttl_invalid() from None
        rollup = slice_header(SCHEDULE_ROLLUP, hdr)
        if rollup and rollup != ROLLUP_SUBJECT:
            raise errors.message_schedules_rollup_invalid()
        if ttl and not allow_ttl:
            raise errors.message_ttl_disabled()
        target = (slice_header(TARGET, hdr) or b"").decode("utf-8", "surrogateescape")
        subj = subject.decode("utf-8", "surrogateescape")
        if not target or not is_valid_publish_subject(target) or target == subj:
            raise errors.message_schedules_target_invalid()
        source = (slice_header(SOURCE, hdr) or b"").decode("utf-8", "surrogateescape")
        if source and (source == target or source == subj or not is_valid_publish_subject(source)):
            raise errors.message_schedules_source_invalid()
        if not any(subjects_collide(s, target) for s in subjects):
            raise errors.message_schedules_target_invalid()
        if source and not any(subjects_collide(s, source) for s in subjects):
            raise errors.message_schedules_source_invalid()
        rollup = slice_header(ROLLUP, hdr)
        if not rollup:
            hdr = gen_header(hdr, ROLLUP, ROLLUP_SUBJECT)
        elif rollup.lower() != ROLLUP_SUBJECT:  # (stream.go getRollup: lower case)
            raise errors.message_schedules_rollup_invalid()
    nxt = slice_header(NEXT, hdr)
    if nxt:
        if nxt != NEXT_PURGE:
            raise errors.message_schedules_scheduler_invalid()
        scheduler = slice_header(SCHEDULER, hdr)
        if not scheduler or scheduler == subject or not is_valid_publish_subject(scheduler.decode("utf-8", "surrogateescape")):
            raise errors.message_schedules_scheduler_invalid()
        if not allowed:
            raise errors.message_schedules_disabled()
        last = last_msg(scheduler)
        if last is not None and not slice_header(SCHEDULE, last[0]):
            raise errors.message_schedules_scheduler_invalid()
    elif slice_header(SCHEDULER, hdr):
        raise errors.message_schedules_scheduler_invalid()
    return hdr


# -- the scheduler (scheduler.go MsgScheduling) -------------------------------------------------


class Scheduler:
    """A stream's schedules: subject -> [sequence, due ns, when it fires ns] (due None: fired,
    its message not stored yet), and a heap of (fires, sequence) whose stale entries are
    skipped. A schedule fires at its due time, or MIN_FIRE_DELAY_NS after it was stored if
    that is later; the next time it says is counted from its due time."""

    __slots__ = ("schedules", "by_seq", "heap")

    def __init__(self) -> None:
        self.schedules: dict[bytes, list] = {}
        self.by_seq: dict[int, bytes] = {}
        self.heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.schedules)

    def _push(self, fire_at: int, seq: int) -> None:
        heapq.heappush(self.heap, (fire_at, seq))
        if len(self.heap) > 2 * len(self.schedules) + 1024:
            self.heap = [(f, s) for f, s in self.heap if self._live(f, s)]
            heapq.heapify(self.heap)

    def _live(self, fire_at: int, seq: int) -> bool:
        subj = self.by_seq.get(seq)
        entry = self.schedules.get(subj) if subj is not None else None
        return entry is not None and entry[0] == seq and entry[2] == fire_at

    def add(self, seq: int, subject: bytes, due: int, now: int) -> None:
        """A schedule stored at ``now`` (scheduler.go init): it replaces the subject's."""
        old = self.schedules.get(subject)
        if old is not None:
            self.by_seq.pop(old[0], None)
        fire_at = max(due, now + MIN_FIRE_DELAY_NS)
        self.schedules[subject] = [seq, due, fire_at]
        self.by_seq[seq] = subject
        self._push(fire_at, seq)

    def update(self, subject: bytes, due: int) -> None:
        """A fired message stored, saying when the schedule fires next."""
        entry = self.schedules.get(subject)
        if entry is not None:
            entry[1] = entry[2] = due
            self._push(due, entry[0])

    def remove_subject(self, subject: bytes) -> None:
        entry = self.schedules.pop(subject, None)
        if entry is not None:
            self.by_seq.pop(entry[0], None)

    def remove(self, seq: int) -> None:
        subject = self.by_seq.get(seq)
        if subject is not None:
            self.remove_subject(subject)

    def rearm(self) -> None:
        """The schedules whose fired message is in flight (``due`` handed it out) due again:
        a replicated stream's leader that lost the lead before its proposal was applied (the
        next leader fires them, or this one, leading again)."""
        for entry in self.schedules.values():
            if entry[2] is None:
                entry[2] = entry[1]
                self._push(entry[1], entry[0])

    def clear(self) -> None:
        self.schedules.clear()
        self.by_seq.clear()
        self.heap = []

    def stored(self, seq: int, subject: bytes, hdr: bytes | None, ts: int, now: int) -> None:
        """Every message the stream stores (filestore.go storeRawMsg): a schedule is added; any
        other message on a schedule's subject, but a fired one, ends the schedule; a fired
        message of a repeating schedule sets when it fires next."""
        if hdr and SCHEDULE in hdr:
            try:
                due = parse_schedule(slice_header(SCHEDULE, hdr) or b"", load_location(hdr), ts, now)[0]
            except (_Invalid, ApiError):
                due = 0
            if due:
                self.add(seq, subject, due, now)
                return
        scheduler = slice_header(SCHEDULER, hdr) if hdr else None
        if not scheduler:
            if subject in self.schedules:
                self.remove_subject(subject)
            return
        nxt = slice_header(NEXT, hdr)
        if nxt and nxt != NEXT_PURGE:
            try:
                due = gotime.parse(nxt)[0]
            except ValueError:
                return
            self.update(scheduler, due)

    def next_due(self) -> int | None:
        """When the earliest schedule fires (it may be a stale entry's time)."""
        return self.heap[0][0] if self.heap else None

    def due(self, now: int, store: MemoryStore, limit: int) -> tuple[list[tuple[bytes, bytes | None, bytes]], bool]:
        """scheduler.go getScheduledMessages: the messages (target, headers, body) of at most
        ``limit`` schedules due at ``now``, in sequence order, and whether more are due. A
        schedule whose message has gone or whose headers no longer make one is dropped."""
        heap = self.heap
        fired: list[tuple[int, bytes, bytes | None, bytes]] = []
        while heap and heap[0][0] <= now and len(fired) < limit:
            fire_at, seq = heapq.heappop(heap)
            if not self._live(fire_at, seq):
                continue
            subject = self.by_seq[seq]
            due = self.schedules[subject][1]
            sm = store.load_msg(seq)
            if sm is None:
                self.remove(seq)
                continue
            out = self._fire(seq, subject, sm.hdr, sm.data, due, now, store)
            if out is None:
                self.remove(seq)
                continue
            self.schedules[subject][2] = None  # in flight: its fired message sets the next time
            fired.append((seq, *out))
        fired.sort(key=lambda f: f[0])
        return [f[1:] for f in fired], bool(heap and heap[0][0] <= now)

    @staticmethod
    def _fire(seq: int, subject: bytes, hdr: bytes | None, data: bytes, due: int, now: int,
              store: MemoryStore) -> tuple[bytes, bytes | None, bytes] | None:
        pattern = slice_header(SCHEDULE, hdr)
        if not pattern:
            return None
        try:
            loc = load_location(hdr)
            nxt, repeat = parse_schedule(pattern, loc, due, now)
        except (_Invalid, ApiError):
            return None
        ttl = slice_header(SCHEDULE_TTL, hdr) or b""
        if ttl:
            try:
                parse_ttl(ttl)
            except InvalidTTL:
                return None
        target = slice_header(TARGET, hdr)
        if not target:
            return None
        rollup = slice_header(SCHEDULE_ROLLUP, hdr) or b""
        source = slice_header(SOURCE, hdr)
        if source:
            last = store.load_last_msg(source)
            if last is not None and last.subject == source:
                hdr, data = last.hdr, last.data
        out = remove_prefixed(hdr, SCHEDULE)  # (Nats-Schedule, Nats-Schedule-*, Nats-Scheduler)
        out = remove_prefixed(out, b"Nats-Expected-")
        for key in (MSG_ID, MSG_TTL, ROLLUP):
            out = _remove(out, key)
        out = gen_header(out, SCHEDULER, subject)
        if repeat:
            out = gen_header(out, NEXT, gotime.format(nxt, offset_at(nxt, loc)).encode())
        else:
            out = gen_header(out, NEXT, NEXT_PURGE)
        if ttl:
            out = gen_header(out, MSG_TTL, ttl)
        if rollup:
            out = gen_header(out, ROLLUP, rollup)
        return target, out, data


def _remove(hdr: bytes | None, key: bytes) -> bytes | None:
    """client.go removeHeaderIfPresent: every ``key:`` line goes (None when nothing is left)."""
    while hdr:
        start = _key_index(key, hdr)
        if start < 1:
            return hdr
        end = hdr.find(b"\r\n", start)
        if end < 0:
            return hdr
        hdr = hdr[:start] + hdr[end + 2 :]
        if len(hdr) <= _EMPTY_HDR:
            return None
    return hdr


def _key_index(key: bytes, hdr: bytes) -> int:
    """client.go getHeaderKeyIndex: where the first line ``key:`` starts (-1: none)."""
    n, klen, offset = len(hdr), len(key), 0
    while True:
        index = hdr.find(key, offset)
        if index < 2:
            return -1
        if index >= n - 1 or hdr[index - 1] != 10 or hdr[index - 2] != 13:
            offset = index + klen
            continue
        if index + klen >= n:
            return -1
        if hdr[index + klen] != 58:  # ':'
            offset = index + klen
            continue
        return index
