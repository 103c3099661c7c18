"""How Go reads and prints durations. nats-server's config values are Go duration strings and
its messages print durations and parse errors the way Go's ``time`` package does, so every
layer that reads or reports a duration uses these."""

from __future__ import annotations

import datetime
import math
import re

__all__ = ["parse_duration", "go_duration", "go_duration_error", "go_errno_text", "go_listen_error", "go_type_name", "GO_JSON_ESCAPES"]

_INT64_MAX = 2**63 - 1

_DURATION_UNIT_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART_RE = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_duration(value) -> float:
    """Seconds in a Go duration string ("250ms", "1h30m", "1.5s") or a number.

    A number is taken as seconds, as nats-server does (with a warning) for
    durations written without a unit.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '2s', not the boolean {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected a finite duration, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as '2s', got {value!r}")

    # The grammar of Go's time.ParseDuration: [-+] then one or more
    # <decimal number><unit>, or a lone "0".
    rest = value
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"invalid duration {value!r}")
    # Exact decimal fractions, as Go's integer arithmetic; imported here, not at the top, as
    # fractions (and decimal, numbers) cost a plain start that parses no duration ~4 ms.
    from fractions import Fraction

    units = ", ".join(name for name in _DURATION_UNIT_NANOSECONDS if name.isascii())
    nanoseconds = Fraction(0)
    while rest:
        part = _DURATION_PART_RE.match(rest)
        assert part is not None  # the pattern matches any text (every part is optional)
        whole, fraction, unit = part.group(1), part.group(2) or "", part.group(3)
        if not whole and not fraction:
            raise ValueError(f"invalid duration {value!r}")
        if not unit:
            raise ValueError(f"invalid duration {value!r}: missing unit (one of {units})")
        if unit not in _DURATION_UNIT_NANOSECONDS:
            raise ValueError(f"invalid duration {value!r}: unknown unit {unit!r} (expected one of {units})")
        number = int(whole or "0") + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
        nanoseconds += number * _DURATION_UNIT_NANOSECONDS[unit]
        rest = rest[part.end() :]
    # Go keeps whole nanoseconds in an int64.
    whole_nanoseconds = int(nanoseconds)
    if whole_nanoseconds > _INT64_MAX:
        raise ValueError(f"invalid duration {value!r}: out of range")
    return (-whole_nanoseconds if negative else whole_nanoseconds) / 1_000_000_000


def go_duration_error(value: str) -> str:
    """The text of Go's time.ParseDuration error for ``value``."""
    try:
        parse_duration(value)
    except ValueError as exc:
        text = str(exc)
        quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        unit = re.search(r"unknown unit '(.*?)'", text) or re.search(r'unknown unit "(.*?)"', text)
        if unit:
            return f'time: unknown unit "{unit.group(1)}" in duration {quoted}'
        if "missing unit" in text:
            return f"time: missing unit in duration {quoted}"
        return f"time: invalid duration {quoted}"
    return ""


def go_duration(seconds: float) -> str:
    """Format seconds as Go's time.Duration.String() does: "2m0s", "1.5s", "250ms", "0s"."""
    nanos = round(seconds * 1_000_000_000)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size or unit == "ns":
                return sign + _trim_fraction(nanos, size) + unit
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim_fraction(rest, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim_fraction(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")


def go_errno_text(exc: OSError) -> str:
    """A system error as Go's syscall.Errno prints it: the C text, lower case first
    ("address already in use")."""
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def go_listen_error(host: str, port: int, exc: OSError) -> str:
    """Go's net.Listen error for a failed bind: ``listen tcp 0.0.0.0:4222: bind: address
    already in use`` (host:port as net.JoinHostPort writes it)."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"listen tcp {address}: bind: {go_errno_text(exc)}"


def go_type_name(value) -> str:
    """Go's %T of a configuration value as nats-server's parser holds it (int64, float64,
    string, bool, map[string]interface {}, []interface {})."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return type(value).__name__


# encoding/json's HTML-safe escapes, which Python's json and orjson do not make: what Go
# writes for these characters inside strings (both JetStream's answers and the config digest).
GO_JSON_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def go_time(ts: float, local: bool = False) -> str:
    """A Unix time as Go's encoding/json writes a time.Time: RFC 3339 with the fraction's
    trailing zeros cut, "Z" for UTC. Our clocks are floats, so we keep microseconds."""
    us = round(ts * 1_000_000)
    secs, frac = divmod(us, 1_000_000)
    if local:
        dt = datetime.datetime.fromtimestamp(secs).astimezone()
    else:
        dt = datetime.datetime.fromtimestamp(secs, datetime.timezone.utc)
    out = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        out += "." + f"{frac:06d}".rstrip("0")
    offset = dt.utcoffset()
    if not offset:
        return out + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{out}{sign}{minutes // 60:02d}:{minutes % 60:02d}"
