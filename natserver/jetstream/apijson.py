"""A $JS.API request's JSON decoded as nats-server 2.15.1's unmarshalRequest decodes it: strict
(a field the request type does not have is refused), Go's error text after "invalid JSON: "
(ApiError 10025). Shared by the stream, consumer and snapshot APIs and the cluster's meta leader."""

from __future__ import annotations

from . import errors
from .gojson import GoDecodeError, check_known_fields, decode_struct, go_decode_request

_SHAPES: dict[int, dict] = {}  # id(fields) -> the strict check's shape of its request


def decode_request(payload: bytes, fields: dict, go_type: str, other_fields: tuple = ()) -> dict:
    """A request decoded as 2.15.1's unmarshalRequest does (strict: a field of none of
    ``fields`` and ``other_fields`` refused), Go's error after "invalid JSON: " (the stream and
    the consumer API's requests)."""
    shape = _SHAPES.get(id(fields))
    if shape is None:  # (fields are module constants, each always given with the same others)
        shape = _SHAPES[id(fields)] = dict.fromkeys([*fields, *other_fields])
    try:
        request = go_decode_request(payload, go_type, lambda value: check_known_fields(value, shape))
        return decode_struct(request, fields, {})
    except GoDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    except ValueError as exc:  # DecodeError is a ValueError too
        raise errors.invalid_json() from exc
