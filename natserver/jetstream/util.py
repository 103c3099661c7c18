"""Helpers shared by the JetStream modules: Go-shaped JSON, RFC 3339 times, NATS headers
and subject matching (all on bytes, as subjects come off the wire)."""

from __future__ import annotations

import time

import orjson

from ..protocol.const import JS_API_LEVEL
from ..protocol.gotext import GO_JSON_ESCAPES

DEFAULT_SYNC_INTERVAL = 120.0  # nats-server's default sync_interval (2 minutes)

# -- encryption at rest: what a start needs without importing crypto.py (and cryptography) ----

KEY_FILE = "key.enc"  # an encrypted stream's keys, in its directory (crypto.py writes it)


class EncryptionKeyError(Exception):
    """A store that can not be opened with the configured key (wrong key, no key, a plain
    store under a key). Stops the server: serving without it would look like data loss."""

    fatal_startup = True  # the CLI prints it as one line (natserver: ...) and exits 1


# -- JSON, the way Go's encoding/json writes it ------------------------------------------------

_GO_ESCAPES = tuple((raw.encode(), escaped.encode()) for raw, escaped in GO_JSON_ESCAPES)


def dumps(obj) -> bytes:
    """JSON bytes as nats-server sends them: compact, with Go's HTML-safe escapes of ``<``,
    ``>`` and ``&`` (stream subjects such as ``orders.>`` come back as ``orders.\\u003e``).
    The escaped characters can only occur inside strings, so a plain replace is exact."""
    data = orjson.dumps(obj)
    # (find, not `in`: see has_wildcard)
    if data.find(b">") >= 0 or data.find(b"<") >= 0 or data.find(b"&") >= 0 or data.find(b"\xe2\x80") >= 0:
        for raw, escaped in _GO_ESCAPES:
            data = data.replace(raw, escaped)
    return data


def loads(data: bytes):
    """Parse a request body; raises ValueError on anything that is not JSON."""
    return orjson.loads(data)


# -- time ------------------------------------------------------------------------------------

ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's time.Time{} in RFC 3339
_second_cache: list = [None, ""]


def rfc3339nano(ns: int) -> str:
    """Go's ``time.Unix(0, ns).UTC().Format(time.RFC3339Nano)``: trailing zeros of the
    fraction trimmed, no fraction at all when it is zero; 0 is Go's zero time."""
    if not ns:
        return ZERO_TIME
    seconds, frac = divmod(ns, 1_000_000_000)
    if _second_cache[0] != seconds:
        _second_cache[0] = seconds
        _second_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if frac:
        return f"{_second_cache[1]}.{frac:09d}".rstrip("0") + "Z"
    return _second_cache[1] + "Z"


def go_quote(text: str) -> str:
    """Go's %q for the plain strings we quote (subjects): a JSON string is the same."""
    return orjson.dumps(text).decode()


# -- headers ---------------------------------------------------------------------------------


def get_header(key: bytes, hdr: bytes | None) -> bytes:
    """nats-server's getHeader: the first occurrence of ``key`` must start a line and be
    followed by ':'; leading spaces of the value are skipped. b"" when absent."""
    if not hdr:
        return b""
    i = hdr.find(key)
    if i < 2 or hdr[i - 1] != 10 or hdr[i - 2] != 13:
        return b""
    i += len(key)
    if i >= len(hdr) or hdr[i] != 58:  # ':'
        return b""
    i += 1
    n = len(hdr)
    while i < n and hdr[i] == 32:
        i += 1
    j = hdr.find(b"\r\n", i)
    return hdr[i:] if j < 0 else hdr[i:j]


REQUIRED_API_LEVEL = b"Nats-Required-Api-Level"  # jetstream_versioning.go JSRequiredApiLevel


def level_supported(hdr: bytes) -> bool:
    """nats-server's errorOnRequiredApiLevel, inverted: no Nats-Required-Api-Level header, or
    one naming a level natserver has (JS_API_LEVEL); not a number is refused too."""
    value = get_header(REQUIRED_API_LEVEL, hdr)
    if not value:
        return True
    try:
        return int(value) <= JS_API_LEVEL
    except ValueError:
        return False


def parse_uint(value: bytes) -> int:
    """nats-server's parseInt64 for the Expected-* headers: digits only, else -1 (which, as a
    Go uint64, never equals a real sequence)."""
    if not value or not value.isdigit():
        return -1
    return int(value)


def remove_header(hdr: bytes, key: bytes) -> bytes | None:
    """nats-server's removeHeaderIfPresent (used for Nats-Request-Info)."""
    start = hdr.find(key)
    if start < 1 or hdr[start - 1] != 10:
        return hdr
    index = start + len(key)
    if index >= len(hdr) or hdr[index] != 58:
        return hdr
    end = hdr.find(b"\r\n", start)
    if end < 0:
        return hdr
    hdr = hdr[:start] + hdr[end + 2 :]
    return None if len(hdr) <= len(b"NATS/1.0\r\n\r\n") - 2 else hdr


def gen_header(hdr: bytes | None, key: bytes, value: bytes) -> bytes:
    """nats-server's genHeader: append ``key: value`` to a header block (or start one)."""
    if hdr and len(hdr) > 2:
        base = hdr[:-2]
    else:
        base = b"NATS/1.0\r\n"
    value = value.replace(b"\r", b" ").replace(b"\n", b" ").strip(b" \t")
    return base + key + b": " + value + b"\r\n\r\n"


# -- subjects --------------------------------------------------------------------------------

_PWC = b"*"
_FWC = b">"


def has_wildcard(subject: bytes) -> bool:
    # (most subjects: no split, no loop) find, not `in`: CPython 3.11's bytes.__contains__
    # tries the needle as an int first and raises and clears a TypeError (callgrind: ~1.8k
    # instructions a test, two of them in every KV get)
    if subject.find(b"*") < 0 and subject.find(b">") < 0:
        return False
    for token in subject.split(b"."):
        if token == _PWC or token == _FWC:
            return True
    return False


def is_valid_subject(subject: str) -> bool:
    """nats-server's IsValidSubject (used for stream subjects): no empty tokens, '>' last,
    no whitespace in a token."""
    if not subject:
        return False
    full = False
    for token in subject.split("."):
        if not token or full:
            return False
        if len(token) > 1:
            if any(c in token for c in "\t\n\f\r "):
                return False
            continue
        if token == ">":
            full = True
        elif token in (" ", "\t", "\n", "\r", "\f"):
            return False
    return True


def is_subset_match(subject: str, test: str) -> bool:
    """nats-server's subjectIsSubsetMatch: is every subject ``subject`` matches also matched
    by ``test``? (Both may have wildcards.)"""
    tokens = subject.split(".")
    for i, t2 in enumerate(test.split(".")):
        if i >= len(tokens):
            return False
        if not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if t2 != "*":
                return False
            continue
        if t2 != "*" and t1 != t2:
            return False
    return len(tokens) == len(test.split("."))


def subjects_collide(a: str, b: str) -> bool:
    """nats-server's SubjectsCollide: could one literal subject match both?"""
    if a == b:
        return True
    ta, tb = a.split("."), b.split(".")
    pa, fa = "*" in ta, ">" in ta
    pb, fb = "*" in tb, ">" in tb
    la, lb = not (pa or fa), not (pb or fb)
    if la and lb:
        return False
    if la:
        return is_subset_match(a, b)
    if lb:
        return is_subset_match(b, a)
    if not fa and not fb and len(ta) != len(tb):
        return False
    if len(ta) != len(tb) and (len(ta) < len(tb) and not fa or len(tb) < len(ta) and not fb):
        return False
    for x, y in zip(ta, tb):
        if not x or not y:
            return False
        if x[0] in "*>" or y[0] in "*>":
            continue
        if x != y:
            return False
    return True


def compile_filters(filters) -> object:
    """compile_filter for a consumer's filters (2.10+ filter_subjects, bytes): a message
    matches when any filter does; None means "everything"."""
    matches = [compile_filter(f) for f in filters]
    if not matches or any(m is None for m in matches):
        return None
    if len(matches) == 1:
        return matches[0]
    return lambda subject: any(m(subject) for m in matches)


def compile_filter(filter: bytes):
    """A predicate for literal subjects (bytes): does ``filter`` (which may have wildcards;
    b"" and b">" mean everything) match? None means "everything" so callers can skip it."""
    if not filter or filter == _FWC:
        return None
    tokens = filter.split(b".")
    if _PWC not in tokens and _FWC not in tokens:
        return filter.__eq__
    n = len(tokens)
    full = tokens[-1] == _FWC
    if full:
        tokens = tokens[:-1]
    positions = [(i, t) for i, t in enumerate(tokens) if t != _PWC]
    cache: dict[bytes, bool] = {}

    def match(subject: bytes) -> bool:
        hit = cache.get(subject)
        if hit is not None:
            return hit
        parts = subject.split(b".")
        if full:
            ok = len(parts) >= n
        else:
            ok = len(parts) == n
        if ok:
            for i, t in positions:
                if parts[i] != t:
                    ok = False
                    break
        if len(cache) < 65536:
            cache[subject] = ok
        return ok

    return match


def is_empty_request(payload: bytes) -> bool:
    """nats-server's isEmptyRequest: nothing, ``{}``, or a JSON object without keys."""
    if not payload or payload == b"{}":
        return True
    try:
        value = loads(payload)
    except ValueError:
        return False
    return isinstance(value, dict) and not value


def is_json_object_or_array(payload: bytes) -> bool:
    """jetstream_api.go isJSONObjectOrArray (2.10+): the info, names and list requests read a
    body only when it starts (after whitespace) with ``{`` or ``[``; anything else is none."""
    return payload.lstrip(b" \t\r\n")[:1] in (b"{", b"[")
