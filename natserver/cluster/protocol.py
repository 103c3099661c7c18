"""The route protocol of nats-server 2.9.10, sans-IO: ``feed(bytes)`` then ``next_op()``.

What a route peer sends (client.go processRoutedMsgArgs / processRemoteSub, parser.go):

    INFO {json}                       CONNECT {json}          PING / PONG / +OK / -ERR 'text'
    RS+ <account> <subject> [<queue> <weight>]                interest added (or a new weight)
    RS- <account> <subject> [<queue>]                         interest removed
    RMSG <account> <subject> [reply] <size>                   a message, then <payload>\\r\\n
    RMSG <account> <subject> + <reply> <queue>... <size>      ... for these queue groups
    RMSG <account> <subject> | <queue>... <size>              ... without a reply
    HMSG (the same forms with <header size> before <size>)

On a route dedicated to one account (nats-server 2.10+ ``cluster { accounts [...] }``) the
RS+, RS- and RMSG lines name no account (route.go's c.route.accName): ``route_account``.

The parser never does I/O; a malformed line raises RouteProtocolError (the caller closes the
route alone with nats-server's error).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

__all__ = [
    "RouteProtocolError", "RouteParser", "Info", "Connect", "Ping", "Pong", "Ok", "Err",
    "RemoteSub", "RemoteUnsub", "RoutedMsg", "rs_plus", "rs_minus", "rmsg_head", "ls_plus", "ls_minus",
]

# nats-server's MAX_CONTROL_LINE_SIZE (const.go) bounds route control lines too.
MAX_ROUTE_CONTROL_LINE = 4096
CRLF = b"\r\n"


class RouteProtocolError(Exception):
    """A peer sent something that is not the route protocol; ``wire`` is the -ERR to send."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.wire = b"-ERR '" + text.encode() + b"'\r\n"


@dataclass(frozen=True, slots=True)
class Info:
    info: dict


@dataclass(frozen=True, slots=True)
class Connect:
    options: dict


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    text: str


@dataclass(frozen=True, slots=True)
class RemoteSub:
    account: bytes
    subject: bytes
    queue: bytes | None
    weight: int


@dataclass(frozen=True, slots=True)
class RemoteUnsub:
    account: bytes
    subject: bytes
    queue: bytes | None


@dataclass(frozen=True, slots=True)
class RoutedMsg:
    account: bytes
    subject: bytes
    reply: bytes | None
    queues: tuple
    header_size: int  # -1: RMSG (no headers)
    payload: bytes  # headers and body


_LEAF_VERBS = {b"LS+": b"RS+", b"LS-": b"RS-", b"LMSG": b"RMSG"}
_ORIGIN_VERBS = {b"LS+": b"RS+", b"LS-": b"RS-", b"LMSG": b"HMSG"}
_PING = Ping()
_PONG = Pong()
_OK = Ok()


def _interest(verb: bytes, rest: bytes) -> RemoteSub | RemoteUnsub:
    """An RS+ or RS- line's op (``rest``: account, subject[, queue[, weight]])."""
    args = rest.split()
    if verb == b"RS+":
        if len(args) == 2:
            return RemoteSub(args[0], args[1], None, 0)
        if len(args) == 4:
            return RemoteSub(args[0], args[1], args[2], _size(args[3]))
        raise RouteProtocolError("processRemoteSub Parse Error")
    if len(args) == 2:
        return RemoteUnsub(args[0], args[1], None)
    if len(args) == 3:
        return RemoteUnsub(args[0], args[1], args[2])
    raise RouteProtocolError("processRemoteUnsub Parse Error")


def _size(token: bytes) -> int:
    if not token.isdigit():
        raise RouteProtocolError("Unknown Protocol Operation")
    return int(token)


class RouteParser:
    """Incremental parser of what a route peer sends."""

    def __init__(self, max_payload: int, max_control_line: int = MAX_ROUTE_CONTROL_LINE,
                 leaf_account: bytes | None = None) -> None:
        self.max_payload = max_payload
        # A leaf node connection is bound to one account: its LS+/LS-/LMSG lines name none
        # (leafnode.go), so they are parsed as the route forms of this account.
        self.leaf_account = leaf_account
        # A route dedicated to one account: its RS+/RS-/RMSG/HMSG lines name none.
        self.route_account: bytes | None = None
        self.max_control_line = max_control_line
        self._buffer = bytearray()
        self._pending: tuple | None = None  # a parsed RMSG/HMSG line waiting for its payload

    def feed(self, data: bytes | bytearray) -> None:
        self._buffer += data

    def take_buffer(self) -> bytes:
        """What was fed and not parsed yet (a connection switching to compression: the
        bytes after its INFO are S2), leaving the parser empty."""
        assert self._pending is None  # (the switch comes right after an INFO line)
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def next_op(self):
        """The next complete op, or None when more bytes are needed."""
        buffer = self._buffer
        if self._pending is not None:
            account, subject, reply, queues, header_size, size = self._pending
            if len(buffer) < size + 2:
                return None
            if buffer[size:size + 2] != CRLF:
                raise RouteProtocolError("Unknown Protocol Operation")
            payload = bytes(buffer[:size])
            del buffer[:size + 2]
            self._pending = None
            return RoutedMsg(account, subject, reply, queues, header_size, payload)
        end = buffer.find(b"\n")
        if end < 0:
            if len(buffer) > self.max_control_line:
                raise RouteProtocolError("Maximum Control Line Exceeded")
            return None
        line = bytes(buffer[:end]).rstrip(b"\r")
        del buffer[:end + 1]
        verb, _, rest = line.partition(b" ")
        verb = verb.upper()
        if self.leaf_account is not None:
            leaf_verb = _LEAF_VERBS.get(verb)
            if leaf_verb is None:
                if verb in (b"RS+", b"RS-", b"RMSG"):
                    raise RouteProtocolError("Unknown Protocol Operation")
            else:
                verb = leaf_verb
            if verb in (b"RS+", b"RS-", b"RMSG", b"HMSG"):
                rest = self.leaf_account + b" " + rest
        elif self.route_account is not None and verb in (b"RS+", b"RS-", b"RMSG", b"HMSG"):
            rest = self.route_account + b" " + rest
        if verb == b"RMSG" or verb == b"HMSG":
            self._pending = self._msg_args(rest.split(), verb == b"HMSG")
            return self.next_op()
        if verb == b"RS+" or verb == b"RS-":
            return _interest(verb, rest)
        if verb == b"PING":
            return _PING
        if verb == b"PONG":
            return _PONG
        if verb == b"+OK":
            return _OK
        if verb == b"-ERR":
            return Err(rest.decode(errors="replace").strip().strip("'"))
        if verb == b"INFO" or verb == b"CONNECT":
            try:
                value = orjson.loads(rest)
            except orjson.JSONDecodeError:
                raise RouteProtocolError("Unknown Protocol Operation") from None
            if not isinstance(value, dict):
                raise RouteProtocolError("Unknown Protocol Operation")
            return Info(value) if verb == b"INFO" else Connect(value)
        if self.leaf_account is None and verb in _ORIGIN_VERBS:
            # route.go (INFO "lnoc"): interest and messages a peer has from a leaf node name
            # the leaf's cluster first (not LS-: natserver announces no "lnocu"), an LMSG always
            # with a header size: read as RS+, RS- and HMSG, the origin dropped. (Here, after
            # the common ops, so that an RMSG costs no more for them.)
            if verb != b"LS-":
                rest = rest.lstrip(b" \t").partition(b" ")[2]
            verb = _ORIGIN_VERBS[verb]
            if self.route_account is not None:
                rest = self.route_account + b" " + rest
            if verb == b"HMSG":
                self._pending = self._msg_args(rest.split(), True)
                return self.next_op()
            return _interest(verb, rest)
        raise RouteProtocolError("Unknown Protocol Operation")

    def _msg_args(self, args: list, headers: bool) -> tuple:
        numbers = 2 if headers else 1
        if len(args) < 2 + numbers:
            raise RouteProtocolError("processRoutedMsgArgs Parse Error")
        account, subject = args[0], args[1]
        middle = args[2:len(args) - numbers]
        reply = None
        queues: tuple = ()
        if middle:
            if middle[0] == b"+" and len(middle) >= 2:
                reply, queues = middle[1], tuple(middle[2:])
            elif middle[0] == b"|":
                queues = tuple(middle[1:])
            elif len(middle) == 1:
                reply = middle[0]
            else:
                raise RouteProtocolError("processRoutedMsgArgs Parse Error")
        size = _size(args[-1])
        header_size = _size(args[-2]) if headers else -1
        if size > self.max_payload or header_size > size:
            raise RouteProtocolError("Maximum Payload Violation")
        return account, subject, reply, queues, header_size, size


# -- what we send ----------------------------------------------------------------------------

def rs_plus(account: bytes, subject: bytes, queue: bytes | None, weight: int) -> bytes:
    """RS+ (``account`` empty: on a route dedicated to the account, which names none)."""
    if not account:
        return b"RS+ %s\r\n" % subject if queue is None else b"RS+ %s %s %d\r\n" % (subject, queue, weight)
    if queue is None:
        return b"RS+ %s %s\r\n" % (account, subject)
    return b"RS+ %s %s %s %d\r\n" % (account, subject, queue, weight)


def rs_minus(account: bytes, subject: bytes, queue: bytes | None) -> bytes:
    if not account:
        return b"RS- %s\r\n" % subject if queue is None else b"RS- %s %s\r\n" % (subject, queue)
    if queue is None:
        return b"RS- %s %s\r\n" % (account, subject)
    return b"RS- %s %s %s\r\n" % (account, subject, queue)


def ls_plus(subject: bytes, queue: bytes | None, weight: int) -> bytes:
    return b"LS+ %s\r\n" % subject if queue is None else b"LS+ %s %s %d\r\n" % (subject, queue, weight)


def ls_minus(subject: bytes, queue: bytes | None) -> bytes:
    return b"LS- %s\r\n" % subject if queue is None else b"LS- %s %s\r\n" % (subject, queue)


def rmsg_head(account: bytes | None, subject: bytes, reply: bytes | None, queues: list, header_size: int,
              size: int) -> bytes:
    """The RMSG (or route HMSG) line for one message, CRLF included; with ``account`` None,
    the leaf node form (LMSG, or HMSG without an account); empty, a dedicated route's (RMSG or
    HMSG without an account)."""
    if account is None:
        parts = [b"HMSG" if header_size > 0 else b"LMSG", subject]
    elif not account:
        parts = [b"HMSG" if header_size > 0 else b"RMSG", subject]
    else:
        parts = [b"HMSG" if header_size > 0 else b"RMSG", account, subject]
    if queues:
        if reply is not None:
            parts += [b"+", reply]
        else:
            parts.append(b"|")
        parts += queues
    elif reply is not None:
        parts.append(reply)
    if header_size > 0:
        parts.append(b"%d" % header_size)
    parts.append(b"%d" % size)
    return b" ".join(parts) + CRLF
