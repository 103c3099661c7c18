"""Decoding JSON the way Go's encoding/json does (nats-server's request structs): integers in
their Go type's range, strings, booleans, lists and maps of strings, enums, and struct fields
matched by name as Go matches them. Used by the stream, consumer and API request decoders."""

from __future__ import annotations

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


def decode_struct(obj, fields: dict, target: dict) -> dict:
    """Fill ``target`` from a JSON object: keys matched as Go matches struct tags (exactly,
    else case-insensitively), unknown keys ignored, ``null`` leaving a field alone (but an
    error for enums, whose UnmarshalJSON rejects it), wrong types an error."""
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
        target[name] = convert(value)
    return target
