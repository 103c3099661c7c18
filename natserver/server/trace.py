"""Protocol tracing (``-V``, ``-VV``, ``-DV``, ``trace: true``) in nats-server's words.

nats-server (client.go traceInOp/traceOutOp/traceMsg, parser.go) logs, per client::

    [TRC] 127.0.0.1:54321 - cid:5 - "v2.6.0:python:nats.py" - <<- [SUB foo 1]
    [TRC] ... - <<- MSG_PAYLOAD: ["hello"]
    [TRC] ... - ->> [MSG foo 1 5]
    [TRC] ... - ->> [-ERR Invalid Subject]
    [TRC] ... - <-> [DELSUB 1]
    [ERR] ... - Client parser ERROR, state=0, i=18: proto='"FOO bar\\r"...'

The ``"v<version>:<lang>:<name>"`` tag appears once CONNECT has named the client, in debug
lines too. Tracing is chosen per received chunk (Client._read_loop): with it off the message
path runs exactly as without this module, so it costs nothing then.

Known differences: nats-server traces each op's arguments as the client wrote them, natserver
rebuilds them from the parsed op (single spaces between arguments); the parser ERROR line's
``i`` counts from the start of natserver's read (up to 64 KiB), nats-server's reads start at
512 bytes and grow.
"""

from __future__ import annotations

import logging

import orjson

from ..protocol.ops import Connect, Ping, Pong, Pub, Sub, Unsub
from ..routing.sublist import is_valid_literal_subject
from .log import TRACE, log_fast

log = logging.getLogger("natserver")

# parser.go PROTO_SNIPPET_SIZE: how much of the bad input the parser ERROR line shows.
PROTO_SNIPPET_SIZE = 32

# parser.go's parser states (the iota order of its const block), for the parser ERROR line.
OP_START = 0
MSG_END_R = 41
MSG_END_N = 42
# The state after each letter of each verb a client may send: OP_P (29), OP_PU, OP_PUB...
_VERB_STATES = {
    b"PUB": (29, 30, 31),
    b"PING": (29, 34, 35, 36),
    b"PONG": (29, 37, 38, 39),
    b"SUB": (43, 44, 45),
    b"UNSUB": (59, 60, 61, 62, 63),
    b"HPUB": (18, 19, 20, 21),
    b"CONNECT": (10, 11, 12, 13, 14, 15, 16),
    b"INFO": (71, 72, 73, 74),
    b"+OK": (1, 2, 3),
    b"-ERR": (4, 5, 6, 7),
}
_NEEDS_BLANK = (b"PUB", b"SUB", b"UNSUB", b"HPUB", b"-ERR")

_GO_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v", 34: '\\"', 92: "\\\\"}


def go_quote(data) -> str:
    """Go's ``%q`` of a byte slice (strconv.Quote): printable UTF-8 as is, the usual
    backslash escapes, ``\\xNN`` for other control bytes and bytes that are not UTF-8."""
    data = bytes(data)
    if data.isascii():
        text = data.decode("ascii")
        if text.isprintable() and '"' not in text and "\\" not in text:
            return f'"{text}"'
    out = ['"']
    for char in data.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if code in _GO_ESCAPES:
            out.append(_GO_ESCAPES[code])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif char.isprintable() or char == " ":
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def client_tag(client) -> str:
    """client.go's ncs: ``"v<version>:<lang>:<name>"`` (the parts CONNECT gave), or ""."""
    parts = []
    if client.version:
        parts.append("v" + client.version)
    if client.lang:
        parts.append(client.lang)
    if client.name:
        parts.append(client.name)
    return go_quote(":".join(parts).encode()) if parts else ""


def log_prefix(client) -> str:
    """``ip:port - cid:N`` and, once CONNECT named the client, ``- "tag"``: how nats-server
    starts every log line about a client."""
    tag = client_tag(client) if client.connect_received else ""
    prefix = f"{client.ip}:{client.port} - cid:{client.cid}"
    return f"{prefix} - {tag}" if tag else prefix


def trace_in(client, op, mapped: bytes | None = None) -> bool:
    """``<<- [OP args]`` (and ``<<- MSG_PAYLOAD: [...]``) for an op about to be handled;
    ``mapped``: the subject a PUB's subject mapping chose (``<<- [MAPPING foo -> bar]``).
    Returns True when the payload line must wait until the -ERR it precedes in nats-server
    (a pedantic client's bad subject: that -ERR comes from the control line)."""
    cls = op.__class__
    if cls is Pub:
        subject, reply, header_size, sizes, payload = op
        verb = "PUB" if header_size < 0 else "HPUB"
        args = [subject] if reply is None else [subject, reply]
        if header_size >= 0 and b" " not in sizes:  # HPUB with an empty header block
            args.append(b"0")
        args.append(sizes)
        _trace(client, "<<-", verb, b" ".join(args))
        if mapped is not None:  # parser.go: after the control line, before the payload
            _trace(client, "<<-", "MAPPING", subject + b" -> " + mapped)
        if client.pedantic and not is_valid_literal_subject(subject):
            client.trace_payload_due = (payload, header_size)
            return True
        trace_payload(client, payload, header_size)
    elif cls is Sub:
        subject, queue, sid = op
        _trace(client, "<<-", "SUB", b" ".join([subject, sid] if queue is None else [subject, queue, sid]))
    elif cls is Unsub:
        sid, max_msgs = op
        _trace(client, "<<-", "UNSUB", sid if max_msgs < 0 else sid + b" %d" % max_msgs)
    elif cls is Ping:
        _trace(client, "<<-", "PING", None)
    elif cls is Pong:
        _trace(client, "<<-", "PONG", None)
    elif cls is Connect:
        # The tag is not set yet: nats-server traces CONNECT before processing it. The JSON
        # as orjson writes it back: the compact form clients send.
        arg = orjson.dumps(op.options).decode()
        log.log(TRACE, "%s - <<- [CONNECT %s]", log_prefix(client), arg)
    return False


def trace_payload(client, payload, header_size: int = -1, direction: str = "<<-") -> None:
    """client.go traceMsgInternal (2.10+): the payload quoted, its first max_traced_msg_len
    bytes then "..." when longer; nothing for an empty one; with trace_headers only the header
    block (without its blank line), and nothing for a message without headers. ``direction``
    is "->>" for a delivery (traceMsgDelivery)."""
    options = client.server.options
    if options.trace_headers:
        if header_size <= 0:
            return
        payload = payload[: header_size - 4]  # the block less its final CRLF CRLF
    if not payload:
        return
    limit = options.max_traced_msg_len
    if limit > 0 and len(payload) > limit:
        text = go_quote(payload[:limit])[:-1] + '..."'
    else:
        text = go_quote(payload)
    log.log(TRACE, "%s - %s MSG_PAYLOAD: [%s]", log_prefix(client), direction, text)


def trace_out(client, data: bytes) -> None:
    """``->> [...]`` for protocol bytes queued to ``client`` (not INFO: nats-server does not
    trace it). -ERR is traced with its text unquoted, as sendErr does."""
    line = bytes(data[: data.find(b"\r\n")]) if b"\r\n" in data[:4096] else bytes(data[:4096])
    if line.startswith(b"INFO"):
        return
    if line.startswith(b"-ERR "):
        text = line[5:]
        if text[:1] == b"'" and text[-1:] == b"'":
            text = text[1:-1]
        line = b"-ERR " + text
    elif line == b"+OK":
        line = b"OK"
    log.log(TRACE, "%s - ->> [%s]", log_prefix(client), line.decode("utf-8", "replace"))
    due = client.trace_payload_due
    if due is not None:
        client.trace_payload_due = None
        trace_payload(client, *due)


def trace_deliveries(before: dict, payload=b"", header_size: int = -1) -> None:
    """``->> [MSG ...]`` and its ``->> MSG_PAYLOAD`` on each receiver, for what routing
    appended to its output since ``before`` ({client: len(client.out)}) was taken; ``payload``
    is the message delivered (client.go deliverMsg traces both, 2.10+)."""
    for client, length in before.items():
        out = client.out
        if len(out) <= length:
            continue
        for piece in out[length:]:
            if piece[:4] == b"MSG " or piece[:5] == b"HMSG ":
                end = piece.find(b"\r\n")
                log.log(TRACE, "%s - ->> [%s]", log_prefix(client), bytes(piece[:end]).decode("utf-8", "replace"))
                trace_payload(client, payload, header_size, "->>")


def receivers(client, subject: bytes) -> dict:
    """{client: len(client.out)} for everyone a message on ``subject`` may go to."""
    result = client.sublist.match(subject)
    before = {}
    for sub in result.psubs:
        before[sub.client] = len(sub.client.out)
    for group in result.qsubs:
        for sub in group:
            before[sub.client] = len(sub.client.out)
    return before


def trace_delsub(client, sid: bytes) -> None:
    """``<-> [DELSUB sid]``: a subscription removed (UNSUB, auto-unsubscribe, close)."""
    _trace(client, "<->", "DELSUB", sid)


def _trace(client, direction: str, verb: str, arg) -> None:
    if arg is None:
        log.log(TRACE, "%s - %s [%s]", log_prefix(client), direction, verb)
    else:
        log.log(TRACE, "%s - %s [%s %s]", log_prefix(client), direction, verb, bytes(arg).decode("utf-8", "replace"))


def parser_stop(client, buf: bytes, pos: int) -> tuple[int, int]:
    """For an unknown-op error in the op at ``buf[pos:]``: (state, index) where nats-server's
    byte-by-byte parser would have stopped. A PUB whose payload ends wrong has its control
    line traced here, as nats-server handles it before the payload arrives (and before -ERR)."""
    state, index, control = _go_parser_stop(buf, pos)
    if control is not None and client.server.options.trace:
        verb, arg = control
        _trace(client, "<<-", verb, arg)
    return state, index


def log_parser_error(client, buf: bytes, stop: tuple[int, int], chunk_start: int) -> None:
    """``Client parser ERROR, state=S, i=I: proto='...'``, logged at ERR as nats-server does
    (traced or not); ``i`` counts from the start of the read (``chunk_start`` in ``buf``)."""
    state, index = stop
    log_fast(
        log, logging.ERROR, "%s - Client parser ERROR, state=%d, i=%d: proto='%s...'",
        log_prefix(client), state, max(index - chunk_start, 0), _proto_snippet(buf, index),
    )


def _proto_snippet(buf: bytes, start: int) -> str:
    """parser.go protoSnippet: up to 32 bytes from ``start``, never the buffer's last byte."""
    stop = start + PROTO_SNIPPET_SIZE
    if start >= len(buf):
        return '""'
    if stop > len(buf):
        stop = len(buf) - 1
    return go_quote(buf[start:stop])


def _go_parser_stop(buf: bytes, pos: int):
    """(state, index, traced control line or None) where parser.go gives up on the op at
    ``pos``: a byte no verb continues with, a verb without its blank, or a payload that is
    not followed by CR LF."""
    upper = buf[pos : pos + 8].upper()
    for verb, states in _VERB_STATES.items():
        if not upper.startswith(verb[:1]):
            continue
        # The longest prefix of this verb that matches.
        matched = 0
        while matched < len(verb) and matched < len(upper) and upper[matched] == verb[matched]:
            matched += 1
        if matched < len(verb):
            # Another verb with the same first letter may match further (PUB / PING / PONG).
            others = [v for v in _VERB_STATES if v[:1] == verb[:1] and upper.startswith(v[: matched + 1])]
            if others and others[0] != verb:
                continue
            return states[matched - 1], pos + matched, None
        if verb in _NEEDS_BLANK and buf[pos + matched : pos + matched + 1] not in (b" ", b"\t"):
            return states[-1], pos + matched, None
        if verb in (b"PUB", b"HPUB"):
            nl = buf.find(b"\n", pos)
            if nl >= 0:
                arg = buf[pos + matched : nl].strip()
                args = arg.split()
                if args and args[-1].isdigit():
                    end = nl + 1 + int(args[-1])
                    control = (verb.decode(), b" ".join(args))
                    if end < len(buf) and buf[end] != 13:
                        return MSG_END_R, end, control
                    return MSG_END_N, end + 1, control
        return states[-1], pos + matched, None
    return OP_START, pos, None
