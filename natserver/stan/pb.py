"""The NATS Streaming protocol messages (stan.go's ``pb/protocol.proto``, proto3), encoded and
decoded by a small codec of our own.

The schema has scalars only (varints and length-delimited strings/bytes; no nesting, no
repeated fields), so a table-driven codec is ~100 lines and needs no ``protobuf`` at run time.
``tests/stan/test_stan_pb.py`` checks it byte for byte against Google's library (stan.py's own
generated module) in both directions.

Encoding follows proto3: fields in number order, default values (0, "", b"", False) left out.
Decoding accepts what Google's parsers accept: fields in any order, repeats (last wins),
unknown fields of every wire type (skipped). Anything else raises :class:`DecodeError`.
Strings are kept as ``str`` decoded with ``surrogateescape`` so that any bytes a Go client
sends (Go does not check UTF-8 here) round-trip unchanged.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = [
    "DecodeError", "PubMsg", "PubAck", "MsgProto", "Ack", "ConnectRequest", "ConnectResponse", "Ping",
    "PingResponse", "SubscriptionRequest", "SubscriptionResponse", "UnsubscribeRequest", "CloseRequest",
    "CloseResponse", "NEW_ONLY", "LAST_RECEIVED", "TIME_DELTA_START", "SEQUENCE_START", "FIRST",
]

# enum StartPosition
NEW_ONLY = 0
LAST_RECEIVED = 1
TIME_DELTA_START = 2
SEQUENCE_START = 3
FIRST = 4

# Field kinds: how a value is checked, encoded and decoded.
STRING, BYTES, UINT64, INT64, UINT32, INT32, BOOL, ENUM = range(8)
_VARINT_KINDS = {UINT64, INT64, UINT32, INT32, BOOL, ENUM}
_MASK64 = (1 << 64) - 1


class DecodeError(ValueError):
    """Bytes that are not a valid encoding of the message."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        if shift < 64:
            result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:  # more than 10 bytes
            raise DecodeError("varint too long")


def _from_varint(kind: int, raw: int):
    """A decoded varint as the field's type (Go's casts: truncation, sign)."""
    if kind == BOOL:
        return raw != 0
    if kind == INT64:
        return raw - (1 << 64) if raw >> 63 else raw
    if kind in (INT32, ENUM):
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw >> 31 else raw
    if kind == UINT32:
        return raw & 0xFFFFFFFF
    return raw


_SMALL = [bytes([i]) for i in range(128)]  # one-byte varints


_M = TypeVar("_M", bound="Message")


class Message:
    """Base of the messages: slotted, with keyword construction and proto3 defaults."""

    __slots__ = ()
    FIELDS: tuple = ()  # (number, name, kind), in number order
    _BY_NUMBER: dict = {}
    _DEFAULTS: dict = {}
    _DEFAULT_ITEMS: tuple = ()
    _ENCODE: tuple = ()
    _ONE_BYTE_KEYS: dict = {}

    def __init_subclass__(cls) -> None:
        cls._BY_NUMBER = {number: (name, kind) for number, name, kind in cls.FIELDS}
        cls._DEFAULTS = {name: _default(kind) for _, name, kind in cls.FIELDS}
        cls._DEFAULT_ITEMS = tuple(cls._DEFAULTS.items())
        # (name, kind, tag bytes) for encoding; the tag of a varint or a length-delimited field
        cls._ENCODE = tuple((name, kind, _varint(number << 3 | (2 if kind in (STRING, BYTES) else 0)))
                            for number, name, kind in cls.FIELDS)
        # first byte of the key -> (name, kind, wire) for fields whose key is one byte
        cls._ONE_BYTE_KEYS = {number << 3 | (2 if kind in (STRING, BYTES) else 0): (name, kind)
                              for number, name, kind in cls.FIELDS if number < 16}

    def __init__(self, **values) -> None:
        for name, default in self._DEFAULT_ITEMS:
            object.__setattr__(self, name, values.pop(name, default))
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(values)}")

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self._DEFAULTS)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n, d in self._DEFAULTS.items() if getattr(self, n) != d)
        return f"{type(self).__name__}({shown})"

    def encode(self) -> bytes:
        out = []
        for name, kind, tag in self._ENCODE:
            value = getattr(self, name)
            if not value:
                continue
            if kind == STRING:
                raw = value.encode("utf-8", "surrogateescape")
            elif kind == BYTES:
                raw = bytes(value)
            else:
                value = int(value) & _MASK64
                out.append(tag + (_SMALL[value] if value < 128 else _varint(value)))
                continue
            n = len(raw)
            out.append(tag + (_SMALL[n] if n < 128 else _varint(n)))
            out.append(raw)
        return b"".join(out)

    @classmethod
    def decode(cls: type[_M], data: bytes) -> _M:
        """Parse ``data``; raises DecodeError when it is not a valid encoding."""
        obj = object.__new__(cls)
        setattr_ = object.__setattr__
        for name, default in cls._DEFAULT_ITEMS:
            setattr_(obj, name, default)
        one_byte = cls._ONE_BYTE_KEYS
        pos = 0
        end = len(data)
        while pos < end:
            key = data[pos]
            fast = one_byte.get(key)
            if fast is not None:  # the common case: a known field with a one-byte key
                pos += 1
                name, kind = fast
                if pos < end and data[pos] < 0x80:
                    raw = data[pos]
                    pos += 1
                else:
                    raw, pos = _read_varint(data, pos, end)
                if kind == STRING or kind == BYTES:
                    if raw > end - pos:
                        raise DecodeError("truncated field")
                    chunk = bytes(data[pos : pos + raw])
                    pos += raw
                    setattr_(obj, name, chunk.decode("utf-8", "surrogateescape") if kind == STRING else chunk)
                else:
                    setattr_(obj, name, _from_varint(kind, raw))
                continue
            pos = cls._decode_slow(obj, data, pos, end)
        return obj

    @classmethod
    def _decode_slow(cls, obj, data: bytes, pos: int, end: int) -> int:
        """One field the fast path does not know: a long key, an unknown field, a bad one."""
        key, pos = _read_varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0 or number > 0x1FFFFFFF:
            raise DecodeError("invalid field number")
        field = cls._BY_NUMBER.get(number)
        if wire == 0:
            raw, pos = _read_varint(data, pos, end)
            if field is not None:
                if field[1] not in _VARINT_KINDS:
                    raise DecodeError(f"wrong wire type for {field[0]}")
                object.__setattr__(obj, field[0], _from_varint(field[1], raw))
        elif wire == 2:
            length, pos = _read_varint(data, pos, end)
            if length > end - pos:
                raise DecodeError("truncated field")
            chunk = bytes(data[pos : pos + length])
            pos += length
            if field is not None:
                if field[1] == STRING:
                    object.__setattr__(obj, field[0], chunk.decode("utf-8", "surrogateescape"))
                elif field[1] == BYTES:
                    object.__setattr__(obj, field[0], chunk)
                else:
                    raise DecodeError(f"wrong wire type for {field[0]}")
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if size > end - pos:
                raise DecodeError("truncated field")
            pos += size
            if field is not None:
                raise DecodeError(f"wrong wire type for {field[0]}")
        else:  # groups (3, 4) and the unused 6, 7: not in proto3
            raise DecodeError(f"unsupported wire type {wire}")
        return pos


def _default(kind: int):
    return "" if kind == STRING else b"" if kind == BYTES else False if kind == BOOL else 0


def _slots(fields: tuple) -> tuple[str, ...]:
    """A message's slots: its fields' names."""
    return tuple(name for _, name, _ in fields)


class PubMsg(Message):
    FIELDS = (
        (1, "clientID", STRING), (2, "guid", STRING), (3, "subject", STRING), (4, "reply", STRING), (5, "data", BYTES),
        (6, "connID", BYTES), (10, "sha256", BYTES),
    )
    __slots__ = _slots(FIELDS)
    clientID: str
    guid: str
    subject: str
    reply: str
    data: bytes
    connID: bytes
    sha256: bytes


class PubAck(Message):
    FIELDS = ((1, "guid", STRING), (2, "error", STRING))
    __slots__ = _slots(FIELDS)
    guid: str
    error: str


# redeliveryCount (7) came with stan.go v0.6 / nats-streaming-server v0.17; stan.py's 2018
# generated module predates it (and, as any proto3 parser, skips it).
class MsgProto(Message):
    FIELDS = (
        (1, "sequence", UINT64), (2, "subject", STRING), (3, "reply", STRING), (4, "data", BYTES), (5, "timestamp",
        INT64), (6, "redelivered", BOOL), (7, "redeliveryCount", UINT32), (10, "CRC32", UINT32),
    )
    __slots__ = _slots(FIELDS)
    sequence: int
    subject: str
    reply: str
    data: bytes
    timestamp: int
    redelivered: bool
    redeliveryCount: int
    CRC32: int


class Ack(Message):
    FIELDS = ((1, "subject", STRING), (2, "sequence", UINT64))
    __slots__ = _slots(FIELDS)
    subject: str
    sequence: int


class ConnectRequest(Message):
    FIELDS = (
        (1, "clientID", STRING), (2, "heartbeatInbox", STRING), (3, "protocol", INT32), (4, "connID", BYTES), (5,
        "pingInterval", INT32), (6, "pingMaxOut", INT32),
    )
    __slots__ = _slots(FIELDS)
    clientID: str
    heartbeatInbox: str
    protocol: int
    connID: bytes
    pingInterval: int
    pingMaxOut: int


class ConnectResponse(Message):
    FIELDS = (
        (1, "pubPrefix", STRING), (2, "subRequests", STRING), (3, "unsubRequests", STRING), (4, "closeRequests",
        STRING), (5, "error", STRING), (6, "subCloseRequests", STRING), (7, "pingRequests", STRING), (8, "pingInterval",
        INT32), (9, "pingMaxOut", INT32), (10, "protocol", INT32), (100, "publicKey", STRING),
    )
    __slots__ = _slots(FIELDS)
    pubPrefix: str
    subRequests: str
    unsubRequests: str
    closeRequests: str
    error: str
    subCloseRequests: str
    pingRequests: str
    pingInterval: int
    pingMaxOut: int
    protocol: int
    publicKey: str


class Ping(Message):
    FIELDS = ((1, "connID", BYTES),)
    __slots__ = _slots(FIELDS)
    connID: bytes


class PingResponse(Message):
    FIELDS = ((1, "error", STRING),)
    __slots__ = _slots(FIELDS)
    error: str


class SubscriptionRequest(Message):
    FIELDS = (
        (1, "clientID", STRING), (2, "subject", STRING), (3, "qGroup", STRING), (4, "inbox", STRING), (5, "maxInFlight",
        INT32), (6, "ackWaitInSecs", INT32), (7, "durableName", STRING), (10, "startPosition", ENUM), (11,
        "startSequence", UINT64), (12, "startTimeDelta", INT64),
    )
    __slots__ = _slots(FIELDS)
    clientID: str
    subject: str
    qGroup: str
    inbox: str
    maxInFlight: int
    ackWaitInSecs: int
    durableName: str
    startPosition: int
    startSequence: int
    startTimeDelta: int


class SubscriptionResponse(Message):
    FIELDS = ((2, "ackInbox", STRING), (3, "error", STRING))
    __slots__ = _slots(FIELDS)
    ackInbox: str
    error: str


class UnsubscribeRequest(Message):
    FIELDS = ((1, "clientID", STRING), (2, "subject", STRING), (3, "inbox", STRING), (4, "durableName", STRING))
    __slots__ = _slots(FIELDS)
    clientID: str
    subject: str
    inbox: str
    durableName: str


class CloseRequest(Message):
    FIELDS = ((1, "clientID", STRING),)
    __slots__ = _slots(FIELDS)
    clientID: str


class CloseResponse(Message):
    FIELDS = ((1, "error", STRING),)
    __slots__ = _slots(FIELDS)
    error: str


MESSAGES = (PubMsg, PubAck, MsgProto, Ack, ConnectRequest, ConnectResponse, Ping, PingResponse,
            SubscriptionRequest, SubscriptionResponse, UnsubscribeRequest, CloseRequest, CloseResponse)
