"""Decoding JSON the way Go's encoding/json does (nats-server's request structs): integers in
their Go type's range, strings, booleans, lists and maps of strings, enums, and struct fields
matched by name as Go matches them. Used by the stream, consumer and API request decoders."""

from __future__ import annotations

import json

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
    """What Go's UnmarshalTypeError calls a JSON value unmarshalled into ``go_type``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and value.is_integer():  # (past 64 bits the parser gave a float)
            value = int(value)
        return f"number {value}" if go_type in _GO_NUMBERS else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


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
    folded = {k.lower(): k for k in shape}
    for key, value in obj.items():
        name = key if key in shape else folded.get(key.lower())
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
                raise go_type_error(value, f"{where}.{name}", go_types[name]) from None
            raise
    return target
