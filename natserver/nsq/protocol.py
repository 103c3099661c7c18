"""nsqd's TCP protocol V2, sans-IO: a command parser and the frame encoders.

The parser follows h11's shape: ``feed(bytes)`` only buffers, ``next_command()`` returns a
:class:`Command` or :data:`NEED_DATA`, and raises :class:`NsqError` for input nsqd refuses.
It never does I/O. nsqd validates a body-carrying command's line (arity, topic name, state)
*before* it reads the body's length, and the length before the body, so does this parser: a
huge length prefix is refused from its four bytes, never allocated.

Client to server (protocol spec): the 4-byte magic ``"  V2"``, then lines ``VERB params\\n``
(a trailing ``\\r`` stripped, params split on single spaces); IDENTIFY, PUB, DPUB, AUTH are
followed by ``[int32 size][body]``, MPUB by ``[int32 size][int32 count]([int32 size][body])*``.

Server to client: ``[int32 size][int32 frame type][data]``; a message's data is
``int64 ns timestamp | uint16 attempts | 16-byte ASCII id | body``.
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass

from .errors import NsqError

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = [
    "NEED_DATA", "Command", "V2Parser", "MAGIC_V2", "FRAME_RESPONSE", "FRAME_ERROR", "FRAME_MESSAGE",
    "encode_frame", "encode_message", "response", "error_frame", "is_valid_name", "go_quote",
    "MSG_ID_LENGTH", "MAX_LINE", "HEARTBEAT", "OK", "OK_FRAME",
]

MAGIC_V2 = b"  V2"
FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2
MSG_ID_LENGTH = 16  # nsqd MsgIDLength: 16 hex characters
# nsqd reads command lines through a 16 KiB bufio.Reader (client_v2.go defaultBufferSize); a
# longer line fails ReadSlice and the connection closes without an error frame.
MAX_LINE = 16 * 1024
HEARTBEAT = b"_heartbeat_"
OK = b"OK"

_BODY_VERBS = {b"IDENTIFY", b"PUB", b"MPUB", b"DPUB", b"AUTH"}
_NAME_RE = re.compile(rb"[.a-zA-Z0-9_-]+(#ephemeral)?")  # internal/protocol/names.go
LENGTH_PREFIX = struct.Struct(">i")  # nsqd readLen: uint32 on the wire, read as int32
_HEADER = struct.Struct(">ii")
_MSG_HEADER = struct.Struct(">iiqH")


class _NeedData(enum.Enum):
    """More bytes are needed: one value, so that ``command is NEED_DATA`` narrows the type."""

    NEED_DATA = 0

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class Command:
    """One client command: ``verb`` (bytes, as sent), ``params`` (the words after it),
    ``body`` (IDENTIFY/PUB/DPUB/AUTH) and ``bodies`` (MPUB's messages)."""

    verb: bytes
    params: tuple = ()
    body: bytes | None = None
    bodies: tuple | None = None


_VALID_NAMES: dict = {}  # names already checked (bounded): PUB checks the same topic every time
_VALID_NAMES_MAX = 4096


def is_valid_name(name: bytes | str) -> bool:
    """nsqd's topic/channel name rule: ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1-64 characters."""
    known = _VALID_NAMES.get(name)
    if known is not None:
        return known
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name
    valid = 1 <= len(raw) <= 64 and _NAME_RE.fullmatch(raw) is not None
    if len(_VALID_NAMES) >= _VALID_NAMES_MAX:
        _VALID_NAMES.clear()
    _VALID_NAMES[name] = valid
    return valid


_GO_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v", 34: '\\"', 92: "\\\\"}


def go_quote(raw: bytes) -> str:
    """Go's ``%q`` of a string (strconv.Quote): how nsqd quotes a bad name in its errors."""
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code in _GO_ESCAPES:
            out.append(_GO_ESCAPES[code])
        elif ch.isprintable() and (code == 0x20 or not ch.isspace()):
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _raw(value: bytes) -> str:
    """Client bytes inside an error text, kept byte for byte (nsqd formats them with %s)."""
    return value.decode("utf-8", "surrogateescape")


def parse_base10(value: bytes) -> int | None:
    """nsqd's protocol.ByteToBase10: digits only (an empty string is 0), wrapping at 2**64."""
    if value and not value.isdigit():
        return None
    if not value:
        return 0
    try:
        return int(value) % (1 << 64)
    except ValueError:  # non-ASCII digits
        return None


def encode_frame(frame_type: int, data: bytes) -> bytes:
    return _HEADER.pack(len(data) + 4, frame_type) + data


def response(data: bytes) -> bytes:
    return _HEADER.pack(len(data) + 4, FRAME_RESPONSE) + data


OK_FRAME = response(OK)


def error_frame(error: NsqError) -> bytes:
    return encode_frame(FRAME_ERROR, error.wire)


def encode_message(msg_id: bytes, timestamp_ns: int, attempts: int, body: bytes) -> bytes:
    """A message frame (nsqd Message.WriteTo inside a FrameTypeMessage frame)."""
    return _MSG_HEADER.pack(len(body) + 30, FRAME_MESSAGE, timestamp_ns, attempts & 0xFFFF) + msg_id + body


# Parser states
_MAGIC, _LINE, _BODY, _MPUB_COUNT, _MPUB_MSG, _DEAD = range(6)


class V2Parser:
    """Incremental parser of one client's byte stream (see the module docstring).

    ``subscribed`` is set by the owner after a successful SUB: IDENTIFY and AUTH are refused
    from then on before their body is read, as nsqd does (stateInit check).
    """

    def __init__(self, *, max_msg_size: int, max_body_size: int, max_req_timeout_ms: int,
                 max_line: int = MAX_LINE, magic: bool = True) -> None:
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_req_timeout_ms = max_req_timeout_ms
        self.max_line = max_line
        self.subscribed = False
        self._buf = bytearray()
        self._pos = 0  # start of the unread data in _buf
        self._search = 0  # where the newline search resumes (h11's remembered offset)
        self._state = _MAGIC if magic else _LINE
        self._verb = b""
        self._params: tuple = ()
        self._need = 0  # body bytes expected in _BODY
        self._body_kind = b""
        self._mpub: list = []
        self._mpub_left = 0
        self._mpub_total = 0

    # -- input ----------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._search -= self._pos
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def _take(self, n: int) -> bytes | None:
        if len(self._buf) - self._pos < n:
            return None
        start = self._pos
        self._pos = start + n
        return bytes(self._buf[start : start + n])

    def _take_len(self) -> int | None:
        if len(self._buf) - self._pos < 4:
            return None
        (value,) = LENGTH_PREFIX.unpack_from(self._buf, self._pos)
        self._pos += 4
        return value

    def take_unread(self) -> bytes:
        """Remove and return the bytes buffered but not parsed (a stream about to be upgraded
        to TLS or compression: what follows must be decoded first)."""
        data = bytes(self._buf[self._pos :])
        self._buf.clear()
        self._pos = self._search = 0
        return data

    def _fail(self, code: str | None, text: str = "") -> NsqError:
        self._state = _DEAD
        return NsqError(code, text, fatal=True)

    # -- output ---------------------------------------------------------------------------

    def next_command(self) -> Command | _NeedData:
        """The next complete command, NEED_DATA, or raise NsqError (fatal: stop reading)."""
        state = self._state
        if state == _LINE:
            return self._next_line()
        if state == _BODY:
            return self._read_body()
        if state in (_MPUB_COUNT, _MPUB_MSG):
            return self._read_mpub()
        if state == _MAGIC:
            magic = self._take(4)
            if magic is None:
                return NEED_DATA
            if magic != MAGIC_V2:
                raise self._fail("E_BAD_PROTOCOL", "")
            self._state = _LINE
            self._search = self._pos
            return self._next_line()
        raise NsqError(None, "connection closed by a fatal error")

    def _next_line(self) -> Command | _NeedData:
        buf = self._buf
        end = buf.find(b"\n", max(self._search, self._pos))
        if end < 0:
            self._search = len(buf)
            if len(buf) - self._pos >= self.max_line:
                raise self._fail(None, "failed to read command - bufio: buffer full")
            return NEED_DATA
        if end + 1 - self._pos > self.max_line:
            raise self._fail(None, "failed to read command - bufio: buffer full")
        stop = end - 1 if end > self._pos and buf[end - 1] == 13 else end
        line = bytes(buf[self._pos : stop])
        self._pos = end + 1
        self._search = self._pos
        params = line.split(b" ")
        verb = params[0]
        if verb in _BODY_VERBS:
            return self._start_body(verb, tuple(params[1:]))
        return Command(verb, tuple(params[1:]))

    def _start_body(self, verb: bytes, params: tuple) -> Command | _NeedData:
        """The checks nsqd makes before it reads a body's size (protocol_v2.go)."""
        if verb == b"PUB" or verb == b"MPUB" or verb == b"DPUB":
            name = verb.decode()
            need = 2 if verb != b"DPUB" else 3
            if len(params) + 1 < need:
                raise self._fail("E_INVALID", f"{name} insufficient number of parameters")
            if not is_valid_name(params[0]):
                # nsqd's MPUB message repeats its code (protocol_v2.go)
                prefix = "E_BAD_TOPIC " if verb == b"MPUB" else ""
                raise self._fail("E_BAD_TOPIC", f"{prefix}{name} topic name {go_quote(params[0])} is not valid")
            if verb == b"DPUB":
                timeout = parse_base10(params[1])
                if timeout is None:
                    raise self._fail("E_INVALID", f"DPUB could not parse timeout {_raw(params[1])}")
                if timeout >= 1 << 63:
                    timeout -= 1 << 64  # Go's int64 conversion
                if timeout < 0 or timeout > self.max_req_timeout_ms:
                    raise self._fail("E_INVALID", f"DPUB timeout {timeout} out of range 0-{self.max_req_timeout_ms}")
        elif self.subscribed:  # IDENTIFY, AUTH
            raise self._fail("E_INVALID", f"cannot {verb.decode()} in current state")
        elif verb == b"AUTH" and len(params) != 0:
            raise self._fail("E_INVALID", "AUTH invalid number of parameters")
        self._verb, self._params = verb, params
        self._state = _BODY
        self._need = -1
        return self._read_body()

    def _read_body(self) -> Command | _NeedData:
        verb = self._verb
        if self._need < 0:
            size = self._take_len()
            if size is None:
                return NEED_DATA
            if verb == b"PUB" or verb == b"DPUB":
                name = verb.decode()
                if size <= 0:
                    raise self._fail("E_BAD_MESSAGE", f"{name} invalid message body size {size}")
                if size > self.max_msg_size:
                    raise self._fail("E_BAD_MESSAGE", f"{name} message too big {size} > {self.max_msg_size}")
            elif verb == b"MPUB":
                if size <= 0:
                    raise self._fail("E_BAD_BODY", f"MPUB invalid body size {size}")
                if size > self.max_body_size:
                    raise self._fail("E_BAD_BODY", f"MPUB body too big {size} > {self.max_body_size}")
                self._state = _MPUB_COUNT
                self._mpub = []
                self._mpub_total = 4
                return self._read_mpub()
            else:  # IDENTIFY, AUTH: the size limit is checked first (protocol_v2.go)
                name = verb.decode()
                if size > self.max_body_size:
                    raise self._fail("E_BAD_BODY", f"{name} body too big {size} > {self.max_body_size}")
                if size <= 0:
                    raise self._fail("E_BAD_BODY", f"{name} invalid body size {size}")
            self._need = size
        body = self._take(self._need)
        if body is None:
            return NEED_DATA
        self._state = _LINE
        self._search = self._pos
        return Command(verb, self._params, body)

    def _read_mpub(self) -> Command | _NeedData:
        if self._state == _MPUB_COUNT:
            count = self._take_len()
            if count is None:
                return NEED_DATA
            # 4 == total num, 5 == length + min 1 (nsqd readMPUB's bound on the count)
            if count <= 0 or count > (self.max_body_size - 4) // 5:
                raise self._fail("E_BAD_BODY", f"MPUB invalid message count {count}")
            self._mpub_left = count
            self._state = _MPUB_MSG
            self._need = -1
        messages = self._mpub
        while self._mpub_left:
            if self._need < 0:
                size = self._take_len()
                if size is None:
                    return NEED_DATA
                index = len(messages)
                if size <= 0:
                    raise self._fail("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
                if size > self.max_msg_size:
                    raise self._fail("E_BAD_MESSAGE", f"MPUB message too big {size} > {self.max_msg_size}")
                self._mpub_total += 4 + size
                # nsqd reads as many messages as the count says whatever the body size said;
                # we also stop at max_body_size so that one MPUB's memory stays bounded.
                if self._mpub_total > self.max_body_size:
                    raise self._fail("E_BAD_BODY", f"MPUB body too big {self._mpub_total} > {self.max_body_size}")
                self._need = size
            body = self._take(self._need)
            if body is None:
                return NEED_DATA
            messages.append(body)
            self._need = -1
            self._mpub_left -= 1
        self._mpub = []
        self._state = _LINE
        self._search = self._pos
        return Command(b"MPUB", self._params, None, tuple(messages))

