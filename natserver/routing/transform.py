"""Subject transforms and subject mappings, as nats-server 2.9.10 applies them.

A **transform** rewrites a subject matching ``source`` into ``dest``: the source's ``*``
tokens are numbered from 1 and referred to in the destination as ``$1`` or by mapping
functions in double braces (``{{wildcard(1)}}``, ``{{partition(n,1,2)}}``,
``{{split(1,-)}}``, ``{{splitFromLeft(1,3)}}``, ``{{splitFromRight(1,3)}}``,
``{{sliceFromLeft(1,2)}}``, ``{{sliceFromRight(1,2)}}``); a trailing ``>`` carries the rest.

A **mapping** (``mappings {}`` at the top level of a config file, or in an account) sends
what a client publishes on ``source`` to one of its weighted destinations instead, picked at
random by weight; weights under 100 in total leave the rest on the original subject, unless
the original is listed itself (then the rest is dropped). Mappings are tried in order and
the first whose source matches wins (accounts.go selectMappedSubject). Only messages from
clients (and leaf nodes) are mapped, before permissions are checked and before routing.

Errors carry nats-server's texts (errors.go ErrInvalidMappingDestination and friends).

JetStream's transforms (a stream's ``subject_transform``, nats-server 2.10+) follow 2.10's
rules instead (``SubjectTransform(..., v2_10=True)``, ``validate_mapping``): the destination need
not use every wildcard, ``{{left(n,len)}}``, ``{{right(n,len)}}`` and ``{{random(n)}}`` are
known, ``{{partition(n)}}`` hashes the whole subject, a literal source takes only ``partition``
and ``random`` functions, and a malformed destination is "invalid transform".
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from .subjects import is_subset_match_tokens

__all__ = ["MappingError", "MapDest", "SubjectTransform", "SubjectMappings", "fnv32a", "validate_mapping"]

BAD_SUBJECT = "invalid subject"  # errors.go ErrBadSubject
_INVALID = "invalid mapping destination"
INVALID_DEST_SUBJECT = f"{_INVALID}: invalid subject"
NOT_USING_ALL_WILDCARDS = f"{_INVALID}: not using all of the token wildcard(s)"
UNKNOWN_FUNCTION = f"{_INVALID}: unknown function"
INDEX_OUT_OF_RANGE = f"{_INVALID}: wildcard index out of range"
NOT_ENOUGH_ARGUMENTS = f"{_INVALID}: not enough arguments passed to the function"
INVALID_ARGUMENT = f"{_INVALID}: function argument is invalid or in the wrong format"
TOO_MANY_ARGUMENTS = f"{_INVALID}: too many arguments passed to the function"
INVALID_TRANSFORM = f"{_INVALID}: invalid transform"  # 2.10+'s ErrInvalidMappingDestinationSubject
# How many mapped subjects a mapping remembers (a deterministic mapping only): published
# subjects repeat, and a transform costs far more than a dict lookup. Cleared when full.
MAPPED_CACHE_SIZE = 4096


class MappingError(ValueError):
    """A transform or mapping nats-server would refuse; ``str()`` is its text."""


def _function(name: str) -> re.Pattern:
    # accounts.go's expressions: the first letter of each word in either case, spaces around.
    pattern = "".join(f"[{c.lower()}{c.upper()}]" if c.isupper() or i == 0 else c for i, c in enumerate(name))
    return re.compile(r"{{\s*" + pattern + r"\s*\((.*)\)\s*}}")


# Tried in this order, as nats-server does (split last: "splitFromLeft(" is not "split(").
_WILDCARD, _PARTITION, _SPLIT_LEFT, _SPLIT_RIGHT, _SLICE_LEFT, _SLICE_RIGHT, _SPLIT, _RIGHT, _LEFT, _RANDOM = range(10)
_FUNCTIONS = (
    (_WILDCARD, _function("wildcard")),
    (_PARTITION, _function("partition")),
    (_SPLIT_LEFT, _function("splitFromLeft")),
    (_SPLIT_RIGHT, _function("splitFromRight")),
    (_SLICE_LEFT, _function("sliceFromLeft")),
    (_SLICE_RIGHT, _function("sliceFromRight")),
    (_SPLIT, _function("split")),
)
# nats-server 2.10+'s list (subject_transform.go indexPlaceHolders' order).
_FUNCTIONS_2_10 = _FUNCTIONS[:6] + (
    (_RIGHT, _function("right")),
    (_LEFT, _function("left")),
    (_SPLIT, _function("split")),
    (_RANDOM, _function("random")),
)
_MAX_INT32 = (1 << 31) - 1
_COMMA = re.compile(r",\s*")


def _is_function_token(token: str) -> bool:
    return len(token) > 4 and token.startswith("{{") and token.endswith("}}")


def _int(text: str) -> int:
    """Go's strconv.Atoi after trimming spaces: an optional sign and decimal digits only."""
    text = text.strip(" ")
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isdigit() or not digits.isascii():
        raise ValueError(text)
    return int(text)


def _placeholder(token: str, v2_10: bool = False) -> tuple[int, list[int], int, str] | None:
    """A destination token's function (kind, wildcard indexes, number, string), or None for a
    plain token (accounts.go indexPlaceHolders; ``v2_10``: subject_transform.go's)."""
    if len(token) > 1 and token[0] == "$":
        try:
            return _WILDCARD, [_int(token[1:])], -1, ""
        except ValueError:
            return None  # other things start with $ too: a plain token then
    if not _is_function_token(token):
        return None

    def fail(error: str):
        raise MappingError(f"{error} in {token}")

    for kind, expression in _FUNCTIONS_2_10 if v2_10 else _FUNCTIONS:
        found = expression.search(token)
        if found is None:
            continue
        args = _COMMA.split(found.group(1))
        try:
            if kind == _WILDCARD:
                if args == [""]:
                    fail(NOT_ENOUGH_ARGUMENTS)
                if len(args) > 1:
                    fail(TOO_MANY_ARGUMENTS)
                return kind, [_int(args[0])], -1, ""
            if kind == _PARTITION:
                if len(args) < (1 if v2_10 else 2):  # 2.10+: partition(n) hashes the subject
                    fail(NOT_ENOUGH_ARGUMENTS)
                number = _int(args[0])
                if number > _MAX_INT32:
                    fail(INVALID_ARGUMENT)
                return kind, [_int(a) for a in args[1:]], number, ""
            if kind == _RANDOM:
                if len(args) != 1:
                    fail(NOT_ENOUGH_ARGUMENTS)
                number = _int(args[0])
                if number > _MAX_INT32:
                    fail(INVALID_ARGUMENT)
                return kind, [], number, ""
            if len(args) < 2:
                fail(NOT_ENOUGH_ARGUMENTS)
            if len(args) > 2:
                fail(TOO_MANY_ARGUMENTS)
            if kind == _SPLIT:
                if " " in args[1] or "." in args[1]:
                    fail(INVALID_ARGUMENT)
                return kind, [_int(args[0])], -1, args[1]
            return kind, [_int(args[0])], _int(args[1]), ""
        except ValueError as exc:
            if isinstance(exc, MappingError):
                raise
            fail(INVALID_ARGUMENT)
    fail(UNKNOWN_FUNCTION)
    return None  # unreachable: fail raised


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """sublist.go subjectInfo: valid?, tokens, how many ``*``, ends in ``>``?"""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(".")
    stars = 0
    full = False
    for token in tokens:
        if not token or full:
            return False, [], 0, False
        if token == ">":
            full = True
        elif token == "*":
            stars += 1
    return True, tokens, stars, full


def validate_destination(subject: str, v2_10: bool = False) -> None:
    """sublist.go ValidateMappingDestination (``v2_10``: 2.10+'s ValidateMapping, its texts)."""
    after_full = False
    invalid = INVALID_TRANSFORM if v2_10 else INVALID_DEST_SUBJECT
    for token in subject.split("."):
        if not token or after_full:
            # (2.10+: an empty token is named by nothing, mappingDestinationErr.Error)
            raise MappingError(f"{invalid} in {token}" if token or not v2_10 else invalid)
        if _is_function_token(token):
            if not any(expression.search(token) for _, expression in (_FUNCTIONS_2_10 if v2_10 else _FUNCTIONS)):
                raise MappingError(f"{UNKNOWN_FUNCTION} in {token}")
            continue
        if token == ">":
            after_full = True
        elif any(c in token for c in "\t\n\f\r "):
            raise MappingError(invalid)


def validate_mapping(source: str, dest: str) -> "SubjectTransform | None":
    """nats-server 2.10+'s ValidateMapping then NewSubjectTransform: the transform (None when
    ``dest`` is empty: nothing is transformed), or MappingError with its text. An empty
    ``source`` is ``>``."""
    if not dest:
        return None
    validate_destination(dest, v2_10=True)
    return SubjectTransform(source or ">", dest, v2_10=True)


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits: the hash nats-server's partition() uses (hash/fnv)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


class SubjectTransform:
    """One transform from ``source`` to ``dest`` (accounts.go newTransform); MappingError if
    nats-server would refuse it."""

    __slots__ = ("source", "dest", "source_tokens", "dest_tokens", "steps", "literal", "identity", "cache")

    def __init__(self, source: str, dest: str, *, v2_10: bool = False) -> None:
        valid, source_tokens, stars, full = _subject_info(source)
        dest_valid, dest_tokens, dest_stars, dest_full = _subject_info(dest)
        if not valid or not dest_valid or dest_stars or full != dest_full:
            raise MappingError(BAD_SUBJECT)
        self.source, self.dest = source, dest
        self.source_tokens, self.dest_tokens = source_tokens, dest_tokens
        # subject_transform.go Match: from everything to everything leaves subjects alone.
        self.identity = v2_10 and source == ">" and dest == ">"
        # Per destination token: None (copied) or (kind, source token positions, number, string).
        self.steps: list = []
        if v2_10 and not (stars or full):
            # A literal source: only partition (of the whole subject) and random.
            for token in dest_tokens:
                found = _placeholder(token, True)
                if found is not None and found[0] not in (_PARTITION, _RANDOM):
                    raise MappingError(f"{INDEX_OUT_OF_RANGE} in {token}")
                self.steps.append(None if found is None else (found[0], [], found[2], ""))
        elif stars or full:
            star_positions = [i for i, token in enumerate(source_tokens) if token == "*"]
            used = 0
            for token in dest_tokens:
                found = _placeholder(token, v2_10)
                if found is None:
                    self.steps.append(None)
                    continue
                kind, indexes, number, text = found
                if kind == _RANDOM:
                    self.steps.append((kind, [], number, ""))
                    continue
                used += 1
                positions = []
                for index in indexes:
                    if index > stars:
                        raise MappingError(f"{INDEX_OUT_OF_RANGE} in {token}: [{index}]")
                    # Go reads a map here: index 0 or below finds position 0.
                    positions.append(star_positions[index - 1] if index >= 1 else 0)
                self.steps.append((kind, positions, number, text))
            if used < stars and not v2_10:  # (2.10+ asks it of import transforms only)
                raise MappingError(f"{NOT_USING_ALL_WILDCARDS} in {dest}")
        self.literal = not any(self.steps) and not full
        # 2.10+ transforms (a stream's, applied to every message it stores) remember what they
        # gave, as mappings do (MAPPED_CACHE_SIZE), unless random() makes each answer new.
        deterministic = not any(step and step[0] == _RANDOM for step in self.steps)
        self.cache: dict | None = {} if v2_10 and deterministic else None


    def matches(self, tokens: list[str]) -> bool:
        return self.source in ("", ">") or is_subset_match_tokens(
            [t.encode() for t in tokens], [t.encode() for t in self.source_tokens]
        )

    def apply(self, subject: str) -> str | None:
        """The transformed subject, or None when ``subject`` does not match the source."""
        tokens = subject.split(".")
        if not self.matches(tokens):
            return None
        return self.transform_tokens(tokens)

    def apply_bytes(self, subject: bytes) -> bytes | None:
        """``apply`` for a subject as the wire carries it (a 2.10+ transform from ``>`` to
        ``>`` leaves it alone, as subject_transform.go Match)."""
        if self.identity:
            return subject
        cache = self.cache
        if cache is not None:
            found = cache.get(subject, _UNKNOWN)
            if found is not _UNKNOWN:
                return found
        mapped = self.apply(subject.decode("utf-8", "surrogateescape"))
        out = None if mapped is None else mapped.encode("utf-8", "surrogateescape")
        if cache is not None:
            if len(cache) >= MAPPED_CACHE_SIZE:
                cache.clear()
            cache[subject] = out
        return out

    def transform_tokens(self, tokens: list[str]) -> str:
        """accounts.go transform: ``tokens`` are a subject known to match the source."""
        if self.literal:
            return self.dest
        out: list[str] = []
        for token, step in zip(self.dest_tokens, self.steps):
            if step is None:
                if token == ">":
                    break
                out.append(token)
                continue
            kind, positions, number, text = step
            value = tokens[positions[0]] if positions else ""
            if kind == _WILDCARD:
                out.append(value)
            elif kind == _PARTITION:
                # (2.10+ partition(n): the whole subject)
                key = ("".join(tokens[p] for p in positions) if positions else ".".join(tokens)).encode()
                out.append(str(fnv32a(key) % number) if number > 0 else "0")
            elif kind == _RANDOM:
                out.append(str(random.randrange(_MAX_INT32 + 1) % number) if number > 0 else "0")
            elif kind == _LEFT:
                out.append(value[:number] if 0 < number < len(value) else value)
            elif kind == _RIGHT:
                out.append(value[-number:] if 0 < number < len(value) else value)
            elif kind == _SPLIT_LEFT:
                out.append(f"{value[:number]}.{value[number:]}" if 0 < number < len(value) else value)
            elif kind == _SPLIT_RIGHT:
                out.append(f"{value[:-number]}.{value[-number:]}" if 0 < number < len(value) else value)
            elif kind == _SLICE_LEFT:
                out.append(".".join(value[i : i + number] for i in range(0, len(value), number)) if 0 < number < len(value) else value)
            elif kind == _SLICE_RIGHT:
                if 0 < number < len(value):
                    head = len(value) % number
                    parts = ([value[:head]] if head else []) + [value[i : i + number] for i in range(head, len(value), number)]
                    out.append(".".join(parts))
                else:
                    out.append(value)
            else:
                out.append(_split(value, text))
        if self.dest_tokens[-1] == ">":
            out.extend(tokens[len(self.source_tokens) - 1 :])
        return ".".join(out)


def _split(value: str, separator: str) -> str:
    """{{split(n,sep)}} as accounts.go writes it: empty pieces dropped, a dot before each
    piece that follows another, except after a leading empty piece ("--a" gives ".a")."""
    pieces = value.split(separator) if separator else list(value)
    out = []
    for j, piece in enumerate(pieces):
        out.append(piece)
        if j < len(pieces) - 1 and pieces[j + 1] and not (j == 0 and not piece):
            out.append(".")
    return "".join(out)


@dataclass(frozen=True)
class MapDest:
    """One weighted destination of a mapping (accounts.go MapDest)."""

    subject: str
    weight: int = 100
    cluster: str = ""


def _star_markers(subject: str) -> str:
    """accounts.go transformTokenize: ``foo.*.*`` -> ``foo.$1.$2``."""
    n = 0
    out = []
    for token in subject.split("."):
        if token == "*":
            n += 1
            token = f"${n}"
        out.append(token)
    return ".".join(out)


class _Mapping:
    __slots__ = ("source", "tokens", "wildcard", "dests", "cluster_dests", "cache")

    def __init__(self, source: str, dests: list[MapDest]) -> None:
        valid, tokens, stars, full = _subject_info(source)
        if not valid or any(c in source for c in "\t\n\f\r "):
            raise MappingError(BAD_SUBJECT)
        self.source, self.tokens, self.wildcard = source, [t.encode() for t in tokens], bool(stars or full)
        plain: list = []
        by_cluster: dict[str, list] = {}
        seen = set()
        total = 0
        for dest in dests:
            if dest.subject in seen:
                raise MappingError(f'duplicate entry for "{dest.subject}"')
            seen.add(dest.subject)
            if dest.weight > 100:
                raise MappingError("individual weights need to be <= 100")
            total += dest.weight
            if total > 100:
                raise MappingError("total weight needs to be <= 100")
            validate_destination(dest.subject)
            entry = [SubjectTransform(source, dest.subject), dest.weight]
            (by_cluster.setdefault(dest.cluster, []) if dest.cluster else plain).append(entry)
        self.dests = self._cumulative(plain, seen)
        self.cluster_dests = {name: self._cumulative(entries, seen) for name, entries in by_cluster.items()}
        # Remembered results, only when there is no choice to make.
        self.cache: dict | None = {} if len(self.dests) == 1 and self.dests[0][1] == 100 and not self.cluster_dests else None

    def _cumulative(self, entries: list, seen: set) -> list:
        total = sum(weight for _, weight in entries)
        if total != 100 and self.source not in seen:
            # The rest stays on the original subject.
            dest = _star_markers(self.source) if self.wildcard else self.source
            entries.append([SubjectTransform(self.source, dest), 100 - total if entries else 100])
        entries.sort(key=lambda entry: entry[1])
        running = 0
        for entry in entries:
            running += entry[1]
            entry[1] = running
        return [tuple(entry) for entry in entries]


_UNKNOWN = object()


class SubjectMappings:
    """An account's mappings, tried in order. ``select(subject)`` gives the subject to route a
    published message on: the mapped one, ``b""`` when the mapping drops it, or None when no
    mapping applies. ``cluster`` picks cluster-scoped destinations (MapDest.cluster)."""

    def __init__(self, mappings: list[tuple[str, list[MapDest]]], cluster: str = "", rng: random.Random | None = None) -> None:
        by_source: dict[str, _Mapping] = {}
        for source, dests in mappings:
            by_source[source] = _Mapping(source, dests)  # a later one replaces an earlier one
        self.mappings = list(by_source.values())
        self._which: dict = {}  # subject -> the mapping that applies (None: none), bounded
        self.cluster = cluster
        self.random = rng or random.Random()

    def __bool__(self) -> bool:
        return bool(self.mappings)

    def select(self, subject: bytes) -> bytes | None:
        which = self._which
        mapping = which.get(subject, _UNKNOWN)
        if mapping is _UNKNOWN:
            mapping = self._first_match(subject)
            if len(which) >= MAPPED_CACHE_SIZE:
                which.clear()
            which[subject] = mapping
        if mapping is None:
            return None
        cache = mapping.cache
        if cache is not None:
            found = cache.get(subject)
            if found is not None:
                return found
        dests = mapping.cluster_dests.get(self.cluster, mapping.dests) if mapping.cluster_dests else mapping.dests
        if len(dests) == 1 and dests[0][1] == 100:
            transform = dests[0][0]
        else:
            draw = self.random.randrange(100)
            transform = next((t for t, weight in dests if draw < weight), None)
            if transform is None:
                return b""  # the weights chose loss
        tokens = subject.decode("utf-8", "surrogateescape").split(".")
        mapped = transform.transform_tokens(tokens).encode("utf-8", "surrogateescape")
        if cache is not None:
            if len(cache) >= MAPPED_CACHE_SIZE:
                cache.clear()
            cache[subject] = mapped
        return mapped

    def _first_match(self, subject: bytes) -> _Mapping | None:
        tokens = subject.split(b".")
        for mapping in self.mappings:
            if mapping.wildcard:
                if is_subset_match_tokens(tokens, mapping.tokens):
                    return mapping
            elif mapping.tokens == tokens:
                return mapping
        return None
