"""Direct get (``$JS.API.DIRECT.GET.<stream>`` and ``...GET.<stream>.<subject>``) as nats-server
2.15.1 answers it (stream.go: processDirectGetRequest, processDirectGetLastBySubjectRequest,
getDirectRequest, getDirectMulti; the stores' GetSeqFromTime and MultiLastMsgs).

A request is one message (``seq``, ``last_by_subj``, ``next_by_subj``, ``start_time``), a batch
(``batch``, ``max_bytes``: each message with ``Nats-Num-Pending`` and ``Nats-Last-Sequence``, then
a ``204 EOB`` status with both) or the last message of each subject matching ``multi_last``
(with ``up_to_seq`` or ``up_to_time``, at most 1024 subjects, the EOB adding
``Nats-UpTo-Sequence``). Errors are statuses: ``408 Empty Request``, ``Malformed Request``, ``Bad
Request``; ``404 Message Not Found``, ``404 No Results``; ``413 Too Many Results``.

Bounded work: a batch's pending count from the middle of a stream covers :data:`COUNT_SEQS`
sequences a turn; a batch or a multi_last sends up to :data:`CHUNK_MSGS` messages (or
:data:`CHUNK_BYTES`) at once; the rest goes to :class:`DirectGets`, whose task sends it a chunk
at a time, with a checkpoint between chunks, so one request for a million messages never keeps
the other clients waiting. Batches queued there are answered in the order they came. A
multi_last with wildcards tests :data:`SELECT_SUBJECTS` of the stream's subjects a turn before it
sends (nats-server chooses them all at once, under the stream's lock: here a message of them
deleted before its chunk is sent is skipped, a subject new since the request may be missed).

Layer (README "Layers"): below ``api``, which routes DIRECT.GET here; what it needs of the
engine is ``DirectHost``.
"""

from __future__ import annotations

import collections
import datetime
import logging
import re
from typing import Any, Protocol

import trio

from .gojson import (
    INT64,
    UINT64,
    DecodeError,
    decode_bool,
    decode_int,
    decode_str,
    decode_strlist,
    decode_struct,
    go_unmarshal,
)
from .util import compile_filter, gen_header, has_wildcard, rfc3339nano

log = logging.getLogger("natserver")


class DirectHost(Protocol):
    """What direct gets need of the engine (``JetStream``): the server (its options and
    task nursery) and a way to send."""

    @property
    def server(self) -> Any: ...
    @property
    def client(self) -> Any: ...  # the internal client the engine publishes from
    @property
    def account(self) -> Any: ...  # None for $G
    @property
    def cluster(self) -> Any: ...  # None on a single server
    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None,
             reply: bytes | None = None) -> None: ...

# getDirectMulti's maxAllowedResponses: a multi_last covering more subjects gets 413.
MULTI_LAST_LIMIT = 1024
# natserver's own: how much of a batch one turn sends before a checkpoint (the rest follows
# from DirectGets' task). nats-server sends a whole batch at once, from the client's goroutine.
# Measured (a batch of 20 000 messages of 100 B, another client's single gets meanwhile):
# whole, they waited up to 550 ms; in chunks of 128, up to 16 ms (nats-server 2.15.1: 20 ms).
CHUNK_MSGS = 128
CHUNK_BYTES = 1 << 20
# natserver's own: how many sequences a batch's pending count covers a turn (about 10-20 ms).
COUNT_SEQS = 65536
# natserver's own: how many of a stream's subjects a multi_last with wildcards tests a turn
# (about 10 ms of matching).
SELECT_SUBJECTS = 16384

# natserver's own: the bytes of last-by-subject answers kept per store (Answers), and what an
# entry costs beyond its bytes (a dict slot, a tuple, two bytes objects' heads: ~150 B).
ANSWERS_BYTES = 1 << 20
ANSWER_OVERHEAD = 150

HDR_EMPTY = b"NATS/1.0 408 Empty Request\r\n\r\n"
HDR_MALFORMED = b"NATS/1.0 408 Malformed Request\r\n\r\n"
HDR_BAD = b"NATS/1.0 408 Bad Request\r\n\r\n"
HDR_NOT_FOUND = b"NATS/1.0 404 Message Not Found\r\n\r\n"
HDR_NO_RESULTS = b"NATS/1.0 404 No Results\r\n\r\n"
HDR_TOO_MANY = b"NATS/1.0 413 Too Many Results\r\n\r\n"
_EOB = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
_EOB_MULTI = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\nNats-UpTo-Sequence: %d\r\n\r\n"

# Go's RFC 3339 (time.Time's UnmarshalJSON): fractional seconds of any length, Z or an offset.
_RFC3339 = re.compile(rb'"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:(Z)|([+-])(\d\d):(\d\d))"')
_EPOCH = datetime.date(1970, 1, 1)


def go_time_ns(value) -> int:
    """A JSON time as Go's time.Time decodes it, in Unix nanoseconds as Go's UnixNano gives
    them: wrapped to int64 past the year 2262 (so a far-future time is in the past)."""
    if not isinstance(value, str):
        raise DecodeError("not a time")
    m = _RFC3339.fullmatch(b'"' + value.encode() + b'"')
    if m is None:
        raise DecodeError(f"not an RFC 3339 time: {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if hour > 23 or minute > 59 or second > 59:
        raise DecodeError(f"time out of range: {value!r}")
    try:
        if year:
            days = (datetime.date(year, month, day) - _EPOCH).days
        else:  # (year 0: the Gregorian calendar repeats every 400 years)
            days = (datetime.date(400, month, day) - datetime.date(2370, 1, 1)).days
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    offset = 0
    if m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise DecodeError(f"time zone out of range: {value!r}")
        offset = (oh * 60 + om) * 60 * (1 if m.group(9) == b"+" else -1)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    nanos = int(((m.group(7) or b"") + b"000000000")[:9])
    return ((seconds * 1_000_000_000 + nanos + (1 << 63)) % (1 << 64)) - (1 << 63)


_int = lambda v: decode_int(v, INT64)  # noqa: E731  (Go's int)
_uint = lambda v: decode_int(v, UINT64)  # noqa: E731

# JSApiMsgGetRequest
REQUEST = {
    "seq": _uint, "last_by_subj": decode_str, "next_by_subj": decode_str,
    "batch": _int, "max_bytes": _int, "start_time": go_time_ns,
    "multi_last": decode_strlist, "up_to_seq": _uint, "up_to_time": go_time_ns, "no_hdr": decode_bool,
}


_GO_TYPE = "server.JSApiMsgGetRequest"  # (json.Unmarshal's: invalid UTF-8 in a string taken, as Go does)


def parse_request(payload: bytes) -> dict | bytes:
    """``$JS.API.DIRECT.GET.<stream>``'s request, or the status that answers it."""
    if not payload:
        return HDR_EMPTY
    try:
        req = decode_struct(go_unmarshal(payload, _GO_TYPE), REQUEST, {})
    except ValueError:
        return HDR_MALFORMED
    seq, last_for, next_for = req.get("seq", 0), req.get("last_by_subj", ""), req.get("next_by_subj", "")
    multi, start = req.get("multi_last") or [], req.get("start_time")
    if not seq and not last_for and not next_for and not multi and start is None:
        return HDR_EMPTY
    if ((seq and last_for) or (seq and start is not None) or (start is not None and last_for)
            or (last_for and next_for) or (last_for and req.get("batch", 0) > 0) or (last_for and multi)
            or (next_for and multi) or (req.get("up_to_seq", 0) and req.get("up_to_time") is not None)):
        return HDR_BAD
    return req


def parse_last_by_subject(key: bytes, payload: bytes) -> dict | bytes:
    """``$JS.API.DIRECT.GET.<stream>.<subject>``: the body may only say ``no_hdr`` or
    ``max_bytes`` (which one message ignores)."""
    req: dict = {}
    if payload:
        try:
            req = decode_struct(go_unmarshal(payload, _GO_TYPE), REQUEST, {})
        except ValueError:
            return HDR_MALFORMED
    if not key:
        return HDR_BAD
    if (req.get("last_by_subj") or req.get("next_by_subj") or req.get("multi_last") or req.get("seq")
            or req.get("batch") or req.get("start_time") is not None or req.get("up_to_seq")
            or req.get("up_to_time") is not None):
        return HDR_BAD
    req["last_by_subj"] = key.decode("utf-8", "replace")
    return req


def seq_from_time(store, ts: int) -> int:
    """The stores' GetSeqFromTime: the first sequence stored at ``ts`` or later, else the one
    after the last."""
    return store.first_seq_at_time(ts) or store.last_seq + 1


# A stored message's headers in a direct get's answer, when it has none of its own (without
# the blank line that ends them: _batch_headers adds two more); _ONE_HDR: a single message's.
_HDR = b"NATS/1.0\r\nNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n"
_ONE_HDR = _HDR + b"\r\n"


def _headers(name: bytes, sm, ts: bytes) -> bytes:
    if not sm.hdr:
        return _HDR % (name, sm.subject, sm.seq, ts)
    hdr = gen_header(sm.hdr, b"Nats-Stream", name)
    hdr = gen_header(hdr, b"Nats-Subject", sm.subject)
    hdr = gen_header(hdr, b"Nats-Sequence", b"%d" % sm.seq)
    return gen_header(hdr, b"Nats-Time-Stamp", ts)[:-2]


def _batch_headers(name: bytes, sm, np: int, lseq: int) -> bytes:
    ts = rfc3339nano(sm.ts).encode()
    if not sm.hdr:
        return _headers(name, sm, ts) + b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n" % (np, lseq)
    hdr = _headers(name, sm, ts) + b"\r\n"
    hdr = gen_header(hdr, b"Nats-Num-Pending", b"%d" % np)
    return gen_header(hdr, b"Nats-Last-Sequence", b"%d" % lseq)


class _Batch:
    """getDirectRequest for a batch, a turn at a time: counting what matches from its start
    (``Nats-Num-Pending``; :data:`COUNT_SEQS` sequences a turn when the store's own count would
    scan), sending :data:`CHUNK_MSGS` a turn, and the ``204 EOB`` (counting again what is left
    when messages came meanwhile, as nats-server does past its count's validThrough)."""

    def __init__(self, js: DirectHost, stream, reply, req: dict, seq: int, max_bytes: int) -> None:
        self.js, self.stream, self.reply = js, stream, reply
        self.name = stream.name.encode()
        self.next_for = req.get("next_by_subj", "").encode()
        self.match = compile_filter(self.next_for)
        self.no_hdr = req.get("no_hdr", False)
        self.batch = req.get("batch", 0)
        self.seq = seq
        self.max_bytes = max_bytes
        store = stream.store
        self.valid_through = store.last_seq
        self.counting: list[int] | None = None  # [next sequence, last, count so far]
        self.np = 0
        self.ending = False  # (counting again for the EOB)
        self._count_from(store, seq)
        self.lseq = 0
        self.i = 0
        self.sent_bytes = 0

    def _count_from(self, store, seq: int) -> None:
        """The matching messages from ``seq`` on: at once from the store when that costs no
        scan of the sequences (from the first, or a short range), else a turn at a time."""
        lo = max(seq, store.first_seq)
        if lo <= store.first_seq or store.last_seq - lo < COUNT_SEQS:
            self.np = store.num_pending(seq, self.next_for)
        else:
            self.counting = [lo, store.last_seq, 0]

    def _count(self, store) -> bool:
        """Count the next COUNT_SEQS sequences; True when done (``np`` set)."""
        assert self.counting is not None
        lo, hi, n = self.counting
        end = min(hi, lo + COUNT_SEQS - 1)
        n += store.idx.count_match(self.match, lo, end)[0]
        if end < hi:
            self.counting = [end + 1, hi, n]
            return False
        self.counting = None
        self.np = n
        return True

    def step(self) -> bool:
        """Go on; True when the batch is done (its EOB or 404 sent)."""
        store = self.stream.store
        send = self.js.send
        if store.closed:  # (the stream went away between turns)
            send(self.reply, b"", _EOB % (self.np, self.lseq))
            return True
        if self.counting is not None and not self._count(store):
            return False
        if self.ending:
            send(self.reply, b"", _EOB % (self.np, self.lseq))
            return True
        chunk_msgs = chunk_bytes = 0
        while self.i < self.batch:
            if chunk_msgs >= CHUNK_MSGS or chunk_bytes >= CHUNK_BYTES:
                return False
            sm = store.load_next_msg(self.next_for, self.seq)
            if sm is None:
                if self.batch > 1 and self.i > 0:
                    break
                send(self.reply, b"", HDR_NOT_FOUND)
                return True
            self.seq = sm.seq + 1
            hdr = None
            if not self.no_hdr:
                if self.np > 0:
                    self.np -= 1
                hdr = _batch_headers(self.name, sm, self.np, self.lseq)
            self.lseq = sm.seq
            send(self.reply, sm.data, hdr)
            size = len(sm.subject) + len(sm.hdr) + len(sm.data)
            self.i += 1
            chunk_msgs += 1
            chunk_bytes += size
            self.sent_bytes += size
            if self.sent_bytes >= self.max_bytes:
                break
        self.ending = True
        if store.last_seq > self.valid_through:
            self._count_from(store, self.seq)
            if self.counting is not None:
                return False
        send(self.reply, b"", _EOB % (self.np, self.lseq))
        return True


class _Multi:
    """getDirectMulti, a chunk at a time: first choosing the subjects (MultiLastMsgs: the last
    sequence at or below ``up_to`` of each subject a filter matches), :data:`SELECT_SUBJECTS`
    of the stream's subjects a turn, then sending their messages in sequence order."""

    def __init__(self, js: DirectHost, stream, reply, req: dict, up_to: int, max_bytes: int) -> None:
        self.js, self.stream, self.reply = js, stream, reply
        self.name = stream.name.encode()
        self.up_to = up_to
        self.min_seq = req.get("seq", 0)
        self.batch = req.get("batch", 0)
        self.max_bytes = max_bytes
        self.found: dict[bytes, int] = {}  # subject -> its last sequence at or below up_to
        self.matchers: list = []  # the wildcard filters' (None: everything)
        self.subjects = None  # the stream's subjects still to test against them
        self.seqs: list[int] | None = None  # once chosen
        self.fresh = True  # (no turn since the request came)
        self.np = self.pos = self.lseq = self.sent = self.sent_bytes = 0
        store = stream.store
        # As nats-server's file store, an up_to outside the stream's sequences finds nothing.
        if not store.msgs or (store.kind != "memory" and not store.first_seq <= up_to <= store.last_seq):
            self.seqs = []
            return
        for text in req["multi_last"]:
            filter = text.encode()
            if has_wildcard(filter):
                self.matchers.append(compile_filter(filter))
            else:
                ss = store.fss.get(filter)
                if ss is not None:
                    self._take(store, filter, ss)
        if self.matchers:
            self.subjects = iter(list(store.fss))

    def _take(self, store, subj: bytes, ss) -> None:
        if subj in self.found:
            return
        if ss[2] <= self.up_to:
            self.found[subj] = ss[2]
        elif ss[1] <= self.up_to:  # (a message below the ceiling: the last of them)
            seq = store.idx.rfind(subj, self.up_to, ss[1])
            if seq:
                self.found[subj] = seq

    def _select(self, store) -> bool:
        """Test the next subjects; True once all are (or too many matched)."""
        if self.subjects is not None and not store.closed:
            fss, matchers, n = store.fss, self.matchers, 0
            for subj in self.subjects:
                ss = fss.get(subj)
                if ss is not None and any(m is None or m(subj) for m in matchers):
                    self._take(store, subj, ss)
                    if len(self.found) > MULTI_LAST_LIMIT:
                        break
                n += 1
                if n >= SELECT_SUBJECTS:
                    return False
        if len(self.found) <= MULTI_LAST_LIMIT:
            self.seqs = sorted(self.found.values())
            self.np = len(self.seqs)
        return True

    def step(self) -> bool:
        """Go on; True when the request is answered (EOB or an error status sent)."""
        try:
            return self._step()
        finally:
            self.fresh = False

    def _step(self) -> bool:
        store = self.stream.store
        send = self.js.send
        if self.seqs is None:
            if not self._select(store):
                return False
            if self.seqs is None:
                send(self.reply, b"", HDR_TOO_MANY)
                return True
        if not self.seqs:
            send(self.reply, b"", HDR_NO_RESULTS)
            return True
        chunk_msgs = chunk_bytes = 0
        while self.pos < len(self.seqs) and not store.closed:
            if chunk_msgs >= CHUNK_MSGS or chunk_bytes >= CHUNK_BYTES:
                return False
            seq = self.seqs[self.pos]
            self.pos += 1
            self.np -= 1
            if seq < self.min_seq:
                continue
            sm = store.load_msg(seq)
            if sm is None:
                if self.fresh:  # (nats-server folds a failed load into a 404)
                    send(self.reply, b"", HDR_NOT_FOUND)
                    return True
                continue  # (removed since the request came: skipped)
            send(self.reply, sm.data, _batch_headers(self.name, sm, self.np, self.lseq))
            self.lseq = seq
            size = len(sm.subject) + len(sm.hdr) + len(sm.data)
            chunk_msgs += 1
            chunk_bytes += size
            self.sent_bytes += size
            if self.sent_bytes >= self.max_bytes:
                break
            self.sent += 1
            if 0 < self.batch <= self.sent:
                break
        send(self.reply, b"", _EOB_MULTI % (self.np, self.lseq, self.up_to))
        return True


class Answers:
    """A store's last-by-subject answers (:meth:`DirectGets.last`), by sequence: the headers
    and the data sent, kept while they fit in :data:`ANSWERS_BYTES`, the oldest dropped first.
    A sequence's message never changes in a store (sequences are never used twice; a removed
    message's sequence is no longer any subject's last, so its entry is never read again): as
    nats-server's block cache marks a record whose checksum it checked once, a message is read
    and checked once, then answered from here."""

    __slots__ = ("msgs", "size")

    def __init__(self) -> None:
        self.msgs: dict[int, tuple[bytes, bytes]] = {}
        self.size = 0

    def add(self, seq: int, hdr: bytes, data: bytes) -> None:
        n = len(hdr) + len(data) + ANSWER_OVERHEAD
        if n > ANSWERS_BYTES:
            return
        msgs = self.msgs
        while msgs and self.size + n > ANSWERS_BYTES:
            old = msgs.pop(next(iter(msgs)))
            self.size -= len(old[0]) + len(old[1]) + ANSWER_OVERHEAD
        msgs[seq] = (hdr, data)
        self.size += n

    def drop(self, seq: int) -> None:
        """Forget ``seq`` (erased: its bytes are not to stay in memory)."""
        old = self.msgs.pop(seq, None)
        if old is not None:
            self.size -= len(old[0]) + len(old[1]) + ANSWER_OVERHEAD


class DirectGets:
    """Answers direct gets for one JetStream engine; batches too long for one turn go on from
    :meth:`run` (the engine's task)."""

    def __init__(self, js: DirectHost) -> None:
        self.js = js
        self.queue: collections.deque[_Batch | _Multi] = collections.deque()
        self._wake = trio.Event()

    # -- requests ---------------------------------------------------------------------------

    def request(self, stream, key: bytes | None, reply, payload: bytes) -> None:
        """A request to ``stream`` (one that allows direct gets), ``key`` the subject of the
        last-by-subject form (None for the JSON form)."""
        if not reply:
            return
        req = parse_request(payload) if key is None else parse_last_by_subject(key, payload)
        if isinstance(req, bytes):
            self.js.send(reply, b"", req)
            return
        if req.get("multi_last"):
            self._multi(stream, req, reply)
        else:
            self._get(stream, req, reply)

    def _max_bytes(self, req: dict) -> int:
        """max_bytes, else the server's max_pending (as nats-server's MaxPending)."""
        return req.get("max_bytes", 0) or self.js.server.options.max_pending

    def _get(self, stream, req: dict, reply) -> None:
        store = stream.store
        start = req.get("start_time")
        seq = seq_from_time(store, start) if start is not None else req.get("seq", 0)
        if req.get("batch", 0):
            self._start(_Batch(self.js, stream, reply, req, seq, self._max_bytes(req)))
            return
        next_for = req.get("next_by_subj", "")
        if seq > 0 and not next_for:
            sm = store.load_msg(seq)
        elif next_for:
            sm = store.load_next_msg(next_for.encode(), seq)
        else:
            sm = store.load_last_msg(req["last_by_subj"].encode())
        self._answer(stream, sm, reply, req.get("no_hdr", False))

    def last(self, stream, subject: bytes, reply: bytes) -> None:
        """``$JS.API.DIRECT.GET.<stream>.<subject>`` with no body, from a ``reply``, for a
        ``subject`` of ASCII: what :meth:`request` answers it with (a KV get, nats-py's
        ``kv.get`` and nats.go's), without decoding a request (api.Api.handle's fast path).
        A key read again while its last message is the same is answered from the store's
        :class:`Answers` (no read, no check of its record, no headers built)."""
        store = stream.store
        if subject.find(b"*") < 0 and subject.find(b">") < 0:  # (Store.last_seq_for's literal case)
            ss = store.fss.get(subject)
            seq = ss[2] if ss is not None else 0
        else:
            seq = store.last_seq_for(subject)
        answers = store.direct_answers
        if answers is None:
            answers = store.direct_answers = Answers()
        known = answers.msgs.get(seq)
        if known is not None:
            self._send_one(reply, known[0], known[1])
            return
        sm = store.load_msg(seq) if seq else None
        hdr = self._answer(stream, sm, reply, False)
        if sm is not None and hdr is not None:
            answers.add(seq, hdr, sm.data)

    def _answer(self, stream, sm, reply, no_hdr: bool) -> bytes | None:
        """Send ``sm`` (None: not found) to ``reply``; the headers it was sent with."""
        if sm is None:
            self.js.send(reply, b"", HDR_NOT_FOUND)
            return None
        if no_hdr:
            hdr = None
        elif not sm.hdr:  # (the usual KV value: one format)
            hdr = _ONE_HDR % (stream.name.encode(), sm.subject, sm.seq, rfc3339nano(sm.ts).encode())
        else:
            hdr = _headers(stream.name.encode(), sm, rfc3339nano(sm.ts).encode()) + b"\r\n"
        self._send_one(reply, hdr, sm.data)
        return hdr

    def _send_one(self, reply, hdr: bytes | None, data: bytes) -> None:
        # One message to the requester's inbox: straight into its buffer (Client.deliver_replies:
        # one plain subscription of a client, as the publish would deliver it), where js.send
        # went through the server's whole publish; anything deliver_replies does not take
        # (several subscribers, queue groups, callbacks, auto-unsubscribe, routes, a big
        # message, a publish hook) and the cluster's way of sending: js.send. An account's
        # publish is its internal client's (js.client) as $G's is the server's, but for its
        # guard against import cycles: inside an import (a depth), js.send.
        js = self.js
        if js.cluster is not None or (js.account is not None and js.server._import_depth):
            js.send(reply, data, hdr)
        else:
            js.client.deliver_replies([(reply, data, hdr, None)], js.send)

    def _multi(self, stream, req: dict, reply) -> None:
        """getDirectMulti: the last message of each subject matching multi_last, up to
        up_to_seq (or the last message stored before up_to_time), in sequence order."""
        store = stream.store
        send = self.js.send
        up_to = req.get("up_to_seq", 0)
        up_to_time = req.get("up_to_time")
        if up_to_time is not None:
            up_to = seq_from_time(store, up_to_time)
            if up_to <= store.first_seq:
                send(reply, b"", HDR_NO_RESULTS)
                return
            up_to -= 1
        if not up_to:
            up_to = store.last_seq
        self._start(_Multi(self.js, stream, reply, req, up_to, self._max_bytes(req)))

    def _start(self, job) -> None:
        """Answer ``job``'s first chunk now, the rest from :meth:`run`; behind the jobs that
        are going on already, if any."""
        if self.queue:
            self.queue.append(job)
        elif not job.step():
            self.queue.append(job)
            self._wake.set()

    # -- batches that go on -----------------------------------------------------------------

    async def run(self) -> None:
        """Send what the queued batches have left, a chunk at a time, with a checkpoint
        between chunks."""
        server = self.js.server
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self.queue:
                try:
                    if self.queue[0].step():
                        self.queue.popleft()
                except Exception:  # a bug must not stop the other batches
                    log.exception("JetStream: direct get batch failed")
                    self.queue.popleft()
                server.flush_touched()
                await trio.lowlevel.checkpoint()
