"""Decoding JSON the way Go's encoding/json does (nats-server's request structs): integers in
their Go type's range, strings, booleans, lists and maps of strings, enums, and struct fields
matched by name as Go matches them. Used by the stream, consumer and API request decoders."""

from __future__ import annotations

import json

import orjson

# The ranges of Go's int64, int32 and uint64 fields (decode_int's bounds)
INT64 = (-(1 << 63), (1 << 63) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)
UINT64 = (0, (1 << 64) - 1)


class DecodeError(ValueError):
    """The request is not what Go's json.Unmarshal would accept ("invalid JSON")."""


class GoDecodeError(DecodeError):
    """A DecodeError whose text is the error nats-server's Unmarshal gives (shown after
    "invalid JSON: ")."""



def decode_int(value, bounds):
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise DecodeError(f"not an integer in range: {value!r}")
    return value


def decode_str(value):
    if not isinstance(value, str):
        raise DecodeError(f"not a string: {value!r}")
    return value


def decode_bool(value):
    if not isinstance(value, bool):
        raise DecodeError(f"not a boolean: {value!r}")
    return value


def decode_strlist(value):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DecodeError(f"not a list of strings: {value!r}")
    return list(value)


def decode_metadata(value):
    """metadata: map[string]string (streams and consumers, 2.10+)."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise DecodeError("metadata: not an object of strings")
    return dict(value)


def decode_object(value):
    if not isinstance(value, dict):
        raise DecodeError(f"not an object: {value!r}")
    return value


def decode_enum(*allowed, fold=False):
    def convert(value):
        if isinstance(value, str):
            key = value.lower() if fold else value
            if key in allowed:
                return key
        raise DecodeError(f"can not unmarshal {value!r}")

    convert.enum = True  # type: ignore[attr-defined]
    return convert


_FOLDED: dict[int, dict] = {}  # id(fields) -> lower-cased key -> key (fields are module constants)

# Go's numeric field types: a JSON number they cannot hold is named with its literal
# ("number -1"), any other value by its kind alone.
_GO_NUMBERS = ("int", "int32", "int64", "uint64", "time.Duration")


def json_kind(value, go_type: str) -> str:
    """What Go's UnmarshalTypeError calls a JSON value unmarshalled into ``go_type`` (a number
    by its text as sent when loads_keeping_literals read it: "number 1e3")."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        literal = getattr(value, "literal", None)
        if literal is not None:
            value = literal
        elif isinstance(value, float) and value.is_integer():  # (past 64 bits the parser gave a float)
            value = int(value)
        return f"number {value}" if go_type in _GO_NUMBERS else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _IntLiteral(int):
    literal: str


class _FloatLiteral(float):
    literal: str


def _int_literal(text: str) -> int:
    value = _IntLiteral(text)
    value.literal = text
    return value


def _float_literal(text: str) -> float:
    value = _FloatLiteral(text)
    value.literal = text
    return value


def loads_keeping_literals(data: bytes):
    """``data`` (valid JSON) parsed with each number remembering its text, for the error of a
    value of the wrong type, where Go names a number as it was written ("number 1e3"): the slow
    parse of a request already refused."""
    return json.loads(data, parse_int=_int_literal, parse_float=_float_literal)


def with_literals(decode, data: bytes, error: GoDecodeError) -> GoDecodeError:
    """The type error ``decode`` gives for ``data`` read by loads_keeping_literals (a number
    named as it was written, as Go names it), else ``error`` (the fast parse's)."""
    if not str(error).startswith("json: cannot unmarshal number "):
        return error  # (no number named in it: nothing to write again)
    try:
        decode(loads_keeping_literals(data))
    except GoDecodeError as exc:
        return exc
    except ValueError:  # (text Python's json refuses: keep the first error)
        pass
    return error


def go_type_error(value, path: str, go_type: str) -> GoDecodeError:
    """Go's json error for ``value`` in the struct field at ``path`` (``StreamConfigRequest.
    max_msgs``) of ``go_type``: for a list or map of the right shape, the element that is
    wrong (a list's element is named without "Go struct field", as Go does)."""
    if go_type.startswith("[]") and isinstance(value, list):
        element = go_type[2:]
        for i, item in enumerate(value):
            kind = json_kind(item, element)
            if not (element == "string" and isinstance(item, str)) and not (
                    element in _GO_NUMBERS and isinstance(item, int) and not isinstance(item, bool)):
                return GoDecodeError(f"json: cannot unmarshal {kind} into {path}.{i} of type {element}")
    if go_type == "map[string]string" and isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(item, str):
                return GoDecodeError(f"json: cannot unmarshal {json_kind(item, 'string')} into Go struct field "
                                     f"{path}.{key} of type string")
    return GoDecodeError(f"json: cannot unmarshal {json_kind(value, go_type)} into Go struct field {path} of type {go_type}")


def check_known_fields(obj, shape: dict) -> None:
    """jetstream_api.go unmarshalRequest decodes with DisallowUnknownFields (2.11+ strict mode,
    the default): a key no struct field matches (exactly, else case-insensitively) is refused
    with Go's error. ``shape``: key -> None (a value not checked further), a dict (an object's
    shape) or a one-element list (each element's shape)."""
    if not isinstance(obj, dict):
        return
    folded = None  # (made only for a key not matched exactly: rare)
    for key, value in obj.items():
        if key in shape:
            name = key
        else:
            if folded is None:
                folded = {k.lower(): k for k in shape}
            name = folded.get(key.lower())
        if name is None:
            raise GoDecodeError(f"json: unknown field {go_quote_text(key)}")
        inner = shape[name]
        if isinstance(inner, dict):
            check_known_fields(value, inner)
        elif isinstance(inner, list) and isinstance(value, list):
            for item in value:
                check_known_fields(item, inner[0])


def decode_pedantic(request, where: str) -> bool:
    """A request's "pedantic" (2.11+: defaults refused rather than applied), a Go bool."""
    value = request.get("pedantic") if isinstance(request, dict) else None
    if value is None:
        return False
    if not isinstance(value, bool):
        raise go_type_error(value, f"{where}.pedantic", "bool")
    return value


def go_quote_text(text: str) -> str:
    """Go's %q of a string (JSON's escapes are the same for what keys hold)."""
    return json.dumps(text, ensure_ascii=False)


def decode_struct(obj, fields: dict, target: dict, where: str = "", go_types: dict | None = None) -> dict:
    """Fill ``target`` from a JSON object: keys matched as Go matches struct tags (exactly,
    else case-insensitively), unknown keys ignored, ``null`` leaving a field alone (but an
    error for enums, whose UnmarshalJSON rejects it), wrong types an error: Go's text
    (GoDecodeError) for an enum and for a field of ``go_types`` (its Go type) at ``where``
    (the Go path of the struct, e.g. ``StreamConfigRequest``)."""
    if obj is None:
        return target
    if not isinstance(obj, dict):
        raise DecodeError("not a JSON object")
    folded = _FOLDED.get(id(fields))
    if folded is None:
        folded = _FOLDED[id(fields)] = {k.lower(): k for k in fields}
    for key, value in obj.items():
        name = key if key in fields else folded.get(key.lower())
        if name is None:
            continue
        convert = fields[name]
        if value is None:
            null_error = getattr(convert, "null_error", None)
            if null_error:  # (a type whose UnmarshalJSON refuses null with its own error)
                raise GoDecodeError(null_error)
            if getattr(convert, "takes_null", False):  # (a type whose UnmarshalJSON decides)
                target[name] = convert(value)
                continue
            if getattr(convert, "enum", False):
                raise DecodeError(f"can not unmarshal null into {name}")
            if convert in (decode_strlist, decode_object):
                target[name] = None
            continue
        try:
            target[name] = convert(value)
        except GoDecodeError:
            raise
        except DecodeError:
            if getattr(convert, "enum", False):  # (the enum's UnmarshalJSON: %q of the JSON)
                raise GoDecodeError(f"can not unmarshal {go_quote_text(json.dumps(value, separators=(',', ':')))}") from None
            if go_types and name in go_types:
                raise go_type_error(value, f"{where}.{key}", go_types[name]) from None  # (Go names the key as sent)
            raise
    return target


# -- Go's syntax errors ------------------------------------------------------------------------
# The texts of the encoding/json nats-server 2.15.1 was built with (go1.27.2, as its binary
# says; recorded in tests/jetstream/data/malformed_json_nats_server_2.15.1.json): found at the
# byte where Go's scanner stops, as its scanner.go states do.

_SPACE = b" \t\r\n"  # scanner.go isSpace
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'bfnrt\\/"')
_GO_CHAR_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v", 0x5C: "\\\\",
                    0x27: "\\'"}


class _Syntax(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class _End(Exception):
    """The input ended inside a value."""


def _go_char(data: bytes, at: int) -> tuple[str, int]:
    """Go's quoteChar of the character at ``at`` (a rune; an invalid UTF-8 byte as ``\\xHH``)
    and the offset just past it."""
    for size in (1, 2, 3, 4):
        try:
            text = data[at:at + size].decode()
        except UnicodeDecodeError:
            continue
        code = ord(text)
        if code in _GO_CHAR_ESCAPES:
            return f"'{_GO_CHAR_ESCAPES[code]}'", at + size
        if code < 0x20 or code == 0x7F:
            return f"'\\x{code:02x}'", at + size
        if text == " " or text.isprintable():
            return f"'{text}'", at + size
        return (f"'\\u{code:04x}'" if code < 0x10000 else f"'\\U{code:08x}'"), at + size
    return f"'\\x{data[at]:02x}'", at + 1


def _invalid(data: bytes, at: int, context: str) -> _Syntax:
    char, end = _go_char(data, at)
    return _Syntax(f"invalid character {char} {context}", end)


def _skip(data: bytes, at: int) -> int:
    while at < len(data) and data[at] in _SPACE:
        at += 1
    return at


def _byte(data: bytes, at: int) -> int:
    if at >= len(data):
        raise _End
    return data[at]


def _scan_value(data: bytes, at: int) -> int:
    """The end of the JSON value starting at ``at`` (spaces before it skipped)."""
    at = _skip(data, at)
    c = _byte(data, at)
    if c == 0x7B:  # {
        at = _skip(data, at + 1)
        if _byte(data, at) == 0x7D:
            return at + 1
        while True:
            if _byte(data, at) != 0x22:
                raise _invalid(data, at, "looking for beginning of object key string")
            at = _skip(data, _scan_string(data, at))
            if _byte(data, at) != 0x3A:
                raise _invalid(data, at, "after object key")
            at = _skip(data, _scan_value(data, at + 1))
            c = _byte(data, at)
            if c == 0x7D:
                return at + 1
            if c != 0x2C:
                raise _invalid(data, at, "after object key:value pair")
            at = _skip(data, at + 1)
    if c == 0x5B:  # [
        at = _skip(data, at + 1)
        if _byte(data, at) == 0x5D:
            return at + 1
        while True:
            at = _skip(data, _scan_value(data, at))
            c = _byte(data, at)
            if c == 0x5D:
                return at + 1
            if c != 0x2C:
                raise _invalid(data, at, "after array element")
            at += 1
    if c == 0x22:
        return _scan_string(data, at)
    if c == 0x2D or 0x30 <= c <= 0x39:
        return _scan_number(data, at)
    for literal in (b"true", b"false", b"null"):
        if c == literal[0]:
            for i, expected in enumerate(literal[1:], 1):
                if _byte(data, at + i) != expected:
                    raise _invalid(data, at + i, f"in literal {literal.decode()} (expecting '{chr(expected)}')")
            return at + len(literal)
    raise _invalid(data, at, "looking for beginning of value")


def _scan_string(data: bytes, at: int) -> int:
    at += 1
    while True:
        c = _byte(data, at)
        if c == 0x22:
            return at + 1
        if c == 0x5C:
            e = _byte(data, at + 1)
            if e in _ESCAPES:
                at += 2
                continue
            size = 6 if e == 0x75 else 2  # (\uXXXX: the whole escape is named)
            if size == 6:
                _byte(data, at + 5)
                if all(h in _HEX for h in data[at + 2:at + 6]):
                    at += 6
                    continue
            seq = data[at:at + size].decode("utf-8", "replace")
            raise _Syntax(f"invalid escape sequence `{seq}` in string", at + size)
        if c < 0x20:
            raise _invalid(data, at, "in string")
        at += 1


def _digits(data: bytes, at: int) -> int:
    if not 0x30 <= _byte(data, at) <= 0x39:
        raise _invalid(data, at, "in numeric literal")
    while at < len(data) and 0x30 <= data[at] <= 0x39:
        at += 1
    return at


def _scan_number(data: bytes, at: int) -> int:
    if data[at] == 0x2D:
        at += 1
    at = at + 1 if _byte(data, at) == 0x30 else _digits(data, at)
    if at < len(data) and data[at] == 0x2E:
        at = _digits(data, at + 1)
    if at < len(data) and data[at] in b"eE":
        at += 1
        if _byte(data, at) in b"+-":
            at += 1
        at = _digits(data, at)
    return at


def _parse(data: bytes):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # (Go takes invalid UTF-8 in strings as U+FFFD; big numbers)
        return json.loads(data.decode("utf-8", "replace"), parse_int=_orjson_int)


def _orjson_int(text: str):
    """An integer as orjson gives it: past 64 bits (int64's low end, uint64's high end) a float."""
    value = int(text)
    return value if INT64[0] <= value <= UINT64[1] else float(text)


def _top_level(value, go_type: str):
    if value is not None and not isinstance(value, dict):
        raise GoDecodeError(f"json: cannot unmarshal {json_kind(value, '')} into Go value of type {go_type}")
    return value


def go_unmarshal(data: bytes, go_type: str):
    """``json.Unmarshal(data, &v)`` into a struct named ``go_type`` (``server.JSApiConsumerUnpinRequest``):
    the JSON object (None: ``null``), or GoDecodeError with Go's text (the whole input is checked
    first: a syntax error anywhere wins over the value's type)."""
    try:  # (what orjson parses Go takes too: the scan below only for what it refuses)
        return _top_level(orjson.loads(data), go_type)
    except orjson.JSONDecodeError:
        pass
    error = go_syntax_error(data)
    if error is not None:
        raise GoDecodeError(error)
    return _top_level(_parse(data), go_type)


def go_syntax_error(data: bytes) -> str | None:
    """json.Unmarshal's syntax error for ``data`` (its checkValid), None when it is one JSON
    value (invalid UTF-8 in strings is taken, as Go takes it)."""
    try:
        end = _skip(data, _scan_value(data, 0))
        if end < len(data):
            raise _invalid(data, end, "after top-level value")
    except _End:
        return "unexpected end of JSON input"
    except _Syntax as exc:
        return exc.message
    return None


def go_decode_request(data: bytes, go_type: str, check=None):
    """jetstream_api.go unmarshalRequest: a json.Decoder reading one value after another into
    one struct named ``go_type`` until the input ends (none at all: no request, None). Each
    object is passed to ``check`` (the strict decoder's field checks) before the next is read,
    as Go decodes each before scanning on; a syntax error says where (``at offset N``: the byte
    past the one refused), an input ending inside a value is "unexpected EOF". The objects'
    fields are merged as Go's decoding into the same struct does at the top level."""
    try:  # (one value orjson parses: the common case, without scanning it in Python)
        value = _top_level(orjson.loads(data), go_type)
    except orjson.JSONDecodeError:
        pass
    else:
        if value is not None and check is not None:
            check(value)
        return value
    merged = None
    at = _skip(data, 0)
    while at < len(data):
        try:
            end = _scan_value(data, at)
        except _End:
            raise GoDecodeError("unexpected EOF") from None
        except _Syntax as exc:
            raise GoDecodeError(f"{exc.message} at offset {exc.offset}") from None
        value = _top_level(_parse(data[at:end]), go_type)
        if value is not None:
            if check is not None:
                check(value)
            merged = value if merged is None else {**merged, **value}
        at = _skip(data, end)
    return merged
