"""Fast batch publishing (nats-server 2.14's ``allow_batched``, as 2.15.1 does it on a single
server: server/jetstream_batching.go, stream.go processJetStreamFastBatchMsg).

A publisher sends a batch's messages to the stream's subjects without waiting for each ack.
The batch travels in the reply subject, ``<prefix>.<batch id>.<flow>.<gap mode>.<batch
seq>.<op>.$FI``: ``flow`` the most messages the publisher lets go unacknowledged (0 or not a
number: 10, at most 65535), ``gap mode`` ``fail`` (a lost message ends the batch) or ``ok``,
``batch seq`` 1, 2, ... and ``op`` 0 start (seq 1), 1 append (seq > 1), 2 commit (this message
is the last), 3 commit without a message (end of batch, seq > 1), 4 ping (ask again for the
flow state). Each message is stored as it comes (a fast batch is not atomic); the stream
answers on the message's reply subject with:

* ``{"type":"ack","seq":N,"msgs":M}``: the first message gets ``seq`` 0 and the ack interval;
  then every ``M`` stored messages, ``N`` the batch sequence stored up to. ``M`` starts at
  ``min(500, flow)`` (1 when the stream has other batches in flight) and doubles or halves
  towards ``500 / batches in flight`` (at most ``flow``) at each ack.
* ``{"type":"gap","last_seq":E,"seq":S}``: message ``S`` came where ``E`` was expected. In
  gap mode ``fail`` the batch ends there (committed up to what was stored: the PubAck below).
* ``{"type":"err","seq":S,"error":{...}}``: message ``S`` was refused (the checks of a plain
  publish: expected-* headers, TTLs, counters, limits...); in gap mode ``fail`` the batch ends.
  A refused first message in gap mode ``fail`` gets the plain publish error instead.
* the PubAck at the end, ``{"stream":"S","seq":<last stored>,"batch":"<id>","count":<n>}``.

Refused before anything else, as plain publish errors: a sealed stream, the server's storage
limit, ``max_msg_size``, a stream without ``allow_batched`` (10205), a reply that is not the
pattern (10206), an id over 64 bytes (10207), an unknown batch that does not start at 1
(10208), more than 1000 batches in flight on the stream or 50 000 on the server (10211), a
``Nats-Required-Api-Level`` natserver does not have (10185). A batch with no message for 10 s
is forgotten (then 10208). Duplicates (``Nats-Msg-Id``) are skipped without a word.

One thread serves every client, and natserver stores a message as it arrives (nats-server's
single-server path too), so nothing is ever pending between two messages: what nats-server
tracks as persisted (``pseq``) follows the last sequence at once. The answers go through the
engine's ack queue, so that an ack never comes before the write of what it acknowledges.
"""

from __future__ import annotations

from typing import Any, Protocol

from .. import clock
from . import errors
from .errors import ApiError
from .util import dumps, go_quote, level_supported, loads, remove_header


class Stream(Protocol):
    """What fast batches use of a stream (stream.Stream, which calls ``publish``): its
    configuration, store and engine (loosely typed: they are the stream's own), its batches
    in flight, and storing a message through the plain publish path with the answers caught."""

    name: str
    fast_batches: dict
    answer_sink: list | None
    _ack_prefix: bytes

    @property
    def cfg(self) -> Any: ...
    @property
    def store(self) -> Any: ...
    @property
    def engine(self) -> Any: ...
    def process_msg(self, subject: bytes, reply: bytes | None, hdr: bytes | None, msg: bytes) -> None: ...

SUFFIX = b".$FI"  # stream.go FastBatchSuffix
GAP_FAIL = b"fail"  # stream.go FastBatchGapFail
GAP_OK = b"ok"  # stream.go FastBatchGapOk
OP_START, OP_APPEND, OP_COMMIT, OP_COMMIT_EOB, OP_PING = range(5)  # stream.go FastBatchOp*
DEFAULT_FLOW = 10  # stream.go getFastBatch: the flow when the reply's is 0 or not a number
MAX_FLOW = 65535  # math.MaxUint16: a larger flow is taken as this
MAX_ACK_MESSAGES = 500  # jetstream_batching.go fastBatchInit / checkFlowControl: at most 500
MAX_ID_LEN = 64  # stream.go processJetStreamFastBatchMsg: a longer batch id is refused
MAX_INFLIGHT_PER_STREAM = 1000  # stream.go streamDefaultMaxFastBatchInflightPerStream
MAX_INFLIGHT_TOTAL = 50_000  # stream.go streamDefaultMaxFastBatchInflightTotal
BATCH_TIMEOUT = 10.0  # seconds; stream.go streamDefaultMaxBatchTimeout (reset by every message)
_MAX_UINT64 = (1 << 64) - 1
_REQUIRED_API_LEVEL = b"Nats-Required-Api-Level"  # (api.py's REQUIRED_API_LEVEL)
_EMPTY_HEADER = b"NATS/1.0\r\n\r\n"


class FastBatch:
    """One batch in flight (jetstream_batching.go fastBatch, without what only a cluster
    needs)."""

    __slots__ = ("lseq", "sseq", "pseq", "fseq", "ack_messages", "max_ack_messages", "gap_ok", "commit",
                 "deadline")

    def __init__(self, gap_ok: bool, max_ack_messages: int, deadline: float) -> None:
        self.lseq = 0  # the highest batch sequence seen
        self.sseq = 0  # the stream sequence of the last message stored
        self.pseq = 0  # the last batch sequence stored
        self.fseq = 0  # the batch sequence of the last flow ack
        self.ack_messages = 0  # an ack every this many messages
        self.max_ack_messages = max_ack_messages  # the publisher's flow
        self.gap_ok = gap_ok
        self.commit = False
        self.deadline = deadline  # clock.monotonic() after which the batch is forgotten


class Request:
    """What a reply subject says (stream.go FastBatch)."""

    __slots__ = ("id", "seq", "flow", "op", "gap_ok")

    def __init__(self, batch_id: bytes, seq: int, flow: int, op: int, gap_ok: bool) -> None:
        self.id = batch_id
        self.seq = seq
        self.flow = flow
        self.op = op
        self.gap_ok = gap_ok


def _int64(token: bytes) -> int:
    """util.go parseInt64: decimal digits only (else -1), wrapping as Go's int64 does."""
    if not token.isdigit():  # (bytes: ASCII digits only; False when empty)
        return -1
    n = int(token)
    if n < 1 << 63:
        return n
    n &= _MAX_UINT64
    return n - (1 << 64) if n >= 1 << 63 else n


_OPS = {b"%d" % op: op for op in range(OP_START, OP_PING + 1)}


def parse_reply(reply: bytes) -> Request | None:
    """stream.go getFastBatch for a reply ending in ``.$FI``: None when it is not the pattern
    (``<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI``, the prefix not empty of dots)."""
    tokens = reply.rsplit(b".", 6)
    if len(tokens) != 7:
        return None
    _prefix, batch_id, flow_t, gap_t, seq_t, op_t, _suffix = tokens
    op = _OPS.get(op_t)
    if op is None:
        op = _int64(op_t)
        if op < OP_START or op > OP_PING:
            return None
    if not seq_t.isdigit():
        return None
    seq = int(seq_t)
    if seq == 0 or seq >= _MAX_UINT64:
        return None
    if (seq == 1 and op == OP_COMMIT_EOB) or (op == OP_START and seq != 1) or (op == OP_APPEND and seq <= 1):
        return None
    if gap_t != GAP_FAIL and gap_t != GAP_OK:
        return None
    flow = _int64(flow_t)
    if flow <= 0:
        flow = DEFAULT_FLOW
    elif flow > MAX_FLOW:
        flow = MAX_FLOW
    return Request(batch_id, seq, flow, op, gap_t == GAP_OK)


# -- the answers ------------------------------------------------------------------------------


def _send(stream: Stream, reply: bytes, payload: bytes) -> None:
    stream.engine.respond(reply, payload, stream)


def _flow_ack(stream: Stream, reply: bytes, seq: int, msgs: int) -> None:
    _send(stream, reply, b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, msgs))


def _gap(stream: Stream, reply: bytes, expected: int, seq: int) -> None:
    _send(stream, reply, b'{"type":"gap","last_seq":%d,"seq":%d}' % (expected, seq))


def _pub_ack(stream: Stream, reply: bytes, seq: int, batch_id: bytes, count: int) -> None:
    quoted = go_quote(batch_id.decode("utf-8", "replace")).encode()
    _send(stream, reply, b'%s%d,"batch":%s,"count":%d}' % (stream._ack_prefix, seq, quoted, count))


def _pub_error(stream: Stream, reply: bytes, error: ApiError) -> None:
    """A refusal as a plain publish's (JSPubAckResponse), unless the stream says no_ack."""
    if not stream.cfg.no_ack:
        _send(stream, reply, dumps({"error": error.to_json(), "stream": stream.name, "seq": 0}))


# -- the batches ------------------------------------------------------------------------------


def _in_flight(stream: Stream, now: float) -> int:
    """The stream's batches still alive (the ones past their time are forgotten here: nats-
    server's timers remove them)."""
    batches = stream.fast_batches
    expired = [key for key, b in batches.items() if b.deadline <= now]
    for key in expired:
        del batches[key]
    return len(batches)


def _total_in_flight(stream: Stream, now: float) -> int:
    """Every batch of the server's streams (nats-server counts them per process); the
    forgotten ones are looked for only when the count without them reaches the limit."""
    streams = [other for engine in stream.engine.engines for other in engine.streams.values() if other.fast_batches]
    total = sum(len(other.fast_batches) for other in streams)
    if total < MAX_INFLIGHT_TOTAL:
        return total
    return sum(_in_flight(other, now) for other in streams)


def _init_flow(stream: Stream, b: FastBatch) -> None:
    """jetstream_batching.go fastBatchInit: what the publisher allows, or 1 beside others."""
    b.ack_messages = 1 if len(stream.fast_batches) > 1 else min(MAX_ACK_MESSAGES, b.max_ack_messages)


def _check_flow(stream: Stream, b: FastBatch, reply: bytes, now: float) -> bool:
    """jetstream_batching.go checkFlowControl: an ack when another ``ack_messages`` messages
    are stored, the interval moved towards this publisher's share. True when one was sent."""
    am = b.ack_messages
    if b.pseq < b.fseq + am:
        return False
    b.fseq += (b.pseq - b.fseq) // am * am
    share = max(1, MAX_ACK_MESSAGES // max(1, _in_flight(stream, now)))
    share = min(share, b.max_ack_messages)
    if b.ack_messages < share:
        b.ack_messages = min(b.ack_messages * 2, share)
    elif b.ack_messages > share:
        b.ack_messages = max(b.ack_messages // 2, share)
    _flow_ack(stream, reply, b.fseq, b.ack_messages)
    return True


def _commit(stream: Stream, batch_id: bytes, b: FastBatch, reply: bytes) -> bool:
    """jetstream_batching.go fastBatchCommit: the batch ends; when all it has is stored (always,
    on one server, but after a refused message in gap mode ok) the PubAck goes now and the
    batch is gone (True)."""
    b.commit = True
    if b.lseq != b.pseq:
        return False
    stream.fast_batches.pop(batch_id, None)
    _pub_ack(stream, reply, b.sseq, batch_id, b.lseq)
    return True


def publish(stream: Stream, subject: bytes, reply: bytes, hdr: bytes | None, msg: bytes) -> None:
    """A message whose reply subject ends in ``.$FI`` (stream.go processJetStreamFastBatchMsg
    for a standalone server, then processJetStreamMsgWithBatch's registration)."""
    cfg = stream.cfg
    engine = stream.engine
    if cfg.sealed:
        _pub_error(stream, reply, errors.stream_sealed())
        return
    if engine.over_limit(stream.store.kind):
        _pub_error(stream, reply, errors.insufficient_resources())
        return
    hlen = len(hdr) if hdr else 0
    if cfg.max_msg_size >= 0 and (hlen > cfg.max_msg_size or len(msg) > cfg.max_msg_size - hlen):
        _pub_error(stream, reply, errors.message_exceeds_maximum())
        return
    if not cfg.allow_batched:
        _pub_error(stream, reply, errors.batch_publish_disabled())
        return
    req = parse_reply(reply)
    if req is None:
        _pub_error(stream, reply, errors.batch_publish_invalid_pattern())
        return
    if len(req.id) > MAX_ID_LEN:
        _pub_error(stream, reply, errors.batch_publish_invalid_id())
        return
    now = clock.monotonic()
    batches = stream.fast_batches
    b: FastBatch | None = batches.get(req.id)
    if b is not None and b.deadline <= now:
        del batches[req.id]  # (its timer would have removed it)
        b = None
    if b is None:
        if req.seq != 1 or req.op == OP_PING:  # (2.15.1: a ping does not start a batch)
            _pub_error(stream, reply, errors.batch_publish_unknown_id())
            return
        if _in_flight(stream, now) + 1 > MAX_INFLIGHT_PER_STREAM or \
                _total_in_flight(stream, now) + 1 > MAX_INFLIGHT_TOTAL:
            _pub_error(stream, reply, errors.batch_publish_too_many_inflight())
            return
        b = batches[req.id] = FastBatch(req.gap_ok, req.flow, now + BATCH_TIMEOUT)
        _init_flow(stream, b)
    if hdr and _REQUIRED_API_LEVEL in hdr:
        if not level_supported(hdr):
            batches.pop(req.id, None)
            _pub_error(stream, reply, errors.required_api_level())
            return
        hdr = remove_header(hdr, _REQUIRED_API_LEVEL)
        if hdr == _EMPTY_HEADER:
            hdr = None  # (nats-server's removeHeaderIfPresent: no header left)
    b.deadline = now + BATCH_TIMEOUT
    seq = req.seq

    if req.op == OP_PING:  # the flow state again; a gap when the publisher is ahead
        send = True
        if seq > b.lseq:
            _gap(stream, reply, b.lseq + 1, seq + 1)
            if b.gap_ok:
                b.lseq = b.pseq = seq
                send = not _check_flow(stream, b, reply, now)
            elif _commit(stream, req.id, b, reply):
                send = False
        if send:
            _flow_ack(stream, reply, b.fseq, b.ack_messages)
        return
    if b.commit:  # ending already: what comes after is dropped
        return

    b.lseq += 1
    if b.lseq != seq:
        _gap(stream, reply, b.lseq, seq)  # (2.15.1: for a message again too, not only ahead)
        if b.gap_ok and seq > b.lseq:
            b.lseq = seq
        else:  # a gap in mode fail, or a message again: the batch ends before it
            b.lseq -= 1
            _commit(stream, req.id, b, reply)
            return

    commit = req.op in (OP_COMMIT, OP_COMMIT_EOB)
    if commit:
        if req.op == OP_COMMIT_EOB:  # no message: the batch ends with the one before
            b.lseq -= 1
            b.pseq = b.lseq
            _commit(stream, req.id, b, reply)
            return
        _commit(stream, req.id, b, reply)  # (acknowledged once this message is stored)
    elif seq == 1 and not cfg.no_ack:
        _flow_ack(stream, reply, 0, b.ack_messages)

    # Store it, with a plain publish's checks; its answer comes back here.
    sink: list = []
    stream.answer_sink = sink
    try:
        stream.process_msg(subject, reply, hdr, msg)
    finally:
        stream.answer_sink = None
    answer = sink[0] if sink else b""
    if answer.startswith(b'{"error"'):
        error = loads(answer)["error"]
        if not b.gap_ok and b.lseq == 1:
            batches.pop(req.id, None)
            _send(stream, reply, answer)
            return
        _send(stream, reply, b'{"type":"err","seq":%d,"error":%s}' % (seq, dumps(error)))
        if b.gap_ok and not commit:
            return
        b.lseq -= 1
        b.pseq = b.lseq
        _commit(stream, req.id, b, reply)
        return
    if not answer:
        return  # not written (a failing disk): no answer, as nats-server
    if b'"duplicate"' in answer:  # skipped
        b.pseq = seq
        _check_flow(stream, b, reply, now)
        if not commit:
            return
        if not b.gap_ok and b.lseq == 1:
            batches.pop(req.id, None)
            dup = loads(answer)["seq"]
            quoted = go_quote(req.id.decode("utf-8", "replace")).encode()
            _send(stream, reply, b'%s%d,"duplicate": true,"batch":%s,"count":%d}' % (
                stream._ack_prefix, dup, quoted, seq))
            return
        _commit(stream, req.id, b, reply)
        return
    # Stored (jetstream_batching.go fastBatchRegisterSequences).
    if req.id not in batches:
        return  # (committed already)
    b.sseq = stream.store.last_seq
    b.pseq = b.lseq
    if b.commit:
        batches.pop(req.id, None)
        _pub_ack(stream, reply, b.sseq, req.id, b.lseq)
        return
    _check_flow(stream, b, reply, now)
