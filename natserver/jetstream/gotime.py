"""Go's ``time.Time`` in JSON, as nats-server reads and writes it: RFC 3339 parsed by Go's
``time.Parse(time.RFC3339, ...)`` (what ``Time.UnmarshalJSON`` falls back to, with its error
texts: ``parsing time "soon" as "2006-01-02T15:04:05Z07:00": cannot parse "soon" as "2006"``,
``parsing time "...": month out of range``), and written back as ``MarshalJSON`` does (RFC 3339
with nanoseconds, trailing zeros trimmed, in the offset it was given: ``Z`` for UTC).

A time is kept as its Go text (:func:`canonical`); :func:`parse` gives Unix nanoseconds and the
offset. Years 0-9999, proleptic Gregorian, as Go's.
"""

from __future__ import annotations

from .gojson import GoDecodeError

RFC3339 = "2006-01-02T15:04:05Z07:00"
ZERO = "0001-01-01T00:00:00Z"  # Go's time.Time{}
_DAY = 86_400
_NS = 1_000_000_000


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, 0 and below too)."""
    year -= month <= 2
    era = year // 400  # (floor division: Hinnant's algorithm without its C adjustment)
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _quote(raw: bytes) -> str:
    """Go's time.quote: printable ASCII as is (with ``"`` and ``\\`` escaped), other bytes as
    ``\\xNN``."""
    out = ['"']
    for b in raw:
        if b < 0x20 or b >= 0x80:
            out.append(f"\\x{b:02x}")
        else:
            c = chr(b)
            out.append("\\" + c if c in '"\\' else c)
    out.append('"')
    return "".join(out)


class _Bad(Exception):
    """Go's errBad / a range error inside one layout element."""


def _digit(s: bytes, i: int) -> bool:
    return i < len(s) and 0x30 <= s[i] <= 0x39


def _getnum(s: bytes, fixed: bool) -> tuple[int, bytes]:
    if not _digit(s, 0):
        raise _Bad
    if not _digit(s, 1):
        if fixed:
            raise _Bad
        return s[0] - 48, s[1:]
    return (s[0] - 48) * 10 + s[1] - 48, s[2:]


# RFC3339's layout as Go's nextStdChunk cuts it: (literal prefix, element) pairs.
_LAYOUT = (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"), ("", "Z07:00"))


def parse(text: str | bytes) -> tuple[int, int]:
    """``time.Parse(time.RFC3339, text)``: (Unix nanoseconds, offset in seconds). GoDecodeError
    with Go's text when it does not parse."""
    raw = text.encode() if isinstance(text, str) else text
    quoted = _quote(raw)

    def cannot(value: bytes, elem: str) -> GoDecodeError:
        return GoDecodeError(f"parsing time {quoted} as {_quote(RFC3339.encode())}: cannot parse {_quote(value)} as {_quote(elem.encode())}")

    def out_of_range(what: str) -> GoDecodeError:
        return GoDecodeError(f"parsing time {quoted}: {what} out of range")

    value = raw
    year = month = day = hour = minute = sec = nsec = offset = 0
    for prefix, elem in _LAYOUT:
        if prefix:
            if not value.startswith(prefix.encode()):
                raise cannot(value, prefix)
            value = value[len(prefix):]
        hold = value
        rng = ""
        try:
            if elem == "2006":
                if len(value) < 4 or not all(_digit(value, i) for i in range(4)):
                    raise _Bad
                year, value = int(value[:4]), value[4:]
            elif elem == "01":
                month, value = _getnum(value, True)
                if not 1 <= month <= 12:
                    rng = "month"
            elif elem == "02":
                day, value = _getnum(value, True)
            elif elem == "15":
                hour, value = _getnum(value, False)
                if hour >= 24:
                    rng = "hour"
            elif elem == "04":
                minute, value = _getnum(value, True)
                if minute >= 60:
                    rng = "minute"
            elif elem == "05":
                sec, value = _getnum(value, True)
                if sec >= 60:
                    rng = "second"
                elif len(value) >= 2 and value[:1] in (b".", b",") and _digit(value, 1):
                    # a fraction the layout does not have: taken (Go's parseNanoseconds)
                    n = 2
                    while _digit(value, n):
                        n += 1
                    digits = value[1:min(n, 10)]
                    nsec = int(digits) * 10 ** (9 - len(digits))
                    value = value[n:]
            else:  # Z07:00
                if value[:1] == b"Z":
                    value = value[1:]
                else:
                    if len(value) < 6 or value[3:4] != b":":
                        raise _Bad
                    sign, hh, mm, value = value[:1], value[1:3], value[4:6], value[6:]
                    bad = False
                    hr = mi = 0
                    try:
                        hr, _ = _getnum(hh, True)
                        mi, _ = _getnum(mm, True)
                    except _Bad:
                        bad = True
                    # (range errors before bad digits or a bad sign, as Go checks them)
                    if hr > 24:
                        rng = "time zone offset hour"
                    if mi > 60:
                        rng = "time zone offset minute"
                    if bad or sign not in (b"+", b"-"):
                        raise _Bad
                    offset = (hr * 60 + mi) * 60 * (-1 if sign == b"-" else 1)
        except _Bad:
            if rng:
                raise out_of_range(rng) from None
            raise cannot(hold, elem) from None
        if rng:
            raise out_of_range(rng)
    if value:
        raise GoDecodeError(f"parsing time {quoted}: extra text: {_quote(value)}")
    if day < 1 or day > _days_in(month, year):
        raise out_of_range("day")
    seconds = _days_from_civil(year, month, day) * _DAY + hour * 3600 + minute * 60 + sec - offset
    return seconds * _NS + nsec, offset


def format(ns: int, offset: int = 0) -> str:  # noqa: A001 (Go's name)
    """``MarshalJSON``: RFC 3339 with nanoseconds (trailing zeros trimmed) in ``offset``."""
    seconds, frac = divmod(ns, _NS)
    local = seconds + offset
    days, rest = divmod(local, _DAY)
    year, month, day = _civil_from_days(days)
    hour, rest = divmod(rest, 3600)
    minute, sec = divmod(rest, 60)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{sec:02d}"
    if frac:
        text += f".{frac:09d}".rstrip("0")
    if offset == 0:
        return text + "Z"
    sign = "-" if offset < 0 else "+"
    hh, mm = divmod(abs(offset) // 60, 60)
    return f"{text}{sign}{hh:02d}:{mm:02d}"


def canonical(text: str) -> str:
    """What nats-server writes back for a time it read as ``text``."""
    return format(*parse(text))


def utc(text: str) -> str:
    """``t.UTC()`` of a time kept as its Go text."""
    return format(parse(text)[0])


def nanos(text: str) -> int:
    return parse(text)[0]


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def decoder(field_path: str):
    """A decode_struct field decoder for a ``time.Time`` field: its canonical text; a value
    that is not a string fails as Go's Unmarshal fails, naming ``field_path`` (e.g.
    ``JSApiConsumerPauseRequest.pause_until``)."""

    def decode(value) -> str:
        if not isinstance(value, str):
            raise GoDecodeError(f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
                                f"{field_path} of type time.Time")
        return canonical(value)

    return decode
