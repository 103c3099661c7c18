"""Atomic batch publishing (nats-server 2.12+, as 2.15.1 does it: jetstream_batching.go and
stream.go processJetStreamAtomicBatchMsg): a stream with ``allow_atomic`` stores a batch of
published messages all or nothing.

A client publishes each message of a batch with ``Nats-Batch-Id: <id>`` (at most 64 bytes) and
``Nats-Batch-Sequence: <n>`` (1, 2, ...); the last one also carries ``Nats-Batch-Commit: 1``
(it is part of the batch) or ``Nats-Batch-Commit: eob`` ("end of batch": that message only
ends the batch and is not stored). Until the commit, the server keeps the messages aside and
answers each one that has a reply subject with an empty message; at the commit it checks the
whole batch against the stream (the ``Nats-Expected-*`` headers, ``Nats-Msg-Id``, roll-ups,
counters, TTLs, discard-new limits), as if its messages were stored one after the other, and
then either stores every message (with consecutive sequences, nothing else in between) and
acknowledges the commit with ``{"stream":"S", "seq":<last>,"batch":"<id>","count":<n>}``, or
stores none and answers the error. Stored messages keep their batch headers (the eob form's
last message gets ``Nats-Batch-Commit: 1``).

Limits (nats-server's defaults, stream.go): 1000 messages a batch, 50 batches in flight per
stream, 1000 per server; a batch that gets no message for 10 s is abandoned (on the server's
clock, ``clock.py``; the engine's expirer task wakes for it). A gap, a repeated or missing
sequence, an unknown commit value or anything refused abandons the batch; an abandoned batch
(a gap, too large, timed out, a required API level not met) is announced on
``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>``. Staged messages live in memory only:
nothing of an uncommitted batch survives a restart (nats-server stages a file stream's batches
on disk and removes them at start).

The stream is reached through a small interface (:class:`BatchStream`): its configuration,
store, name, engine, deduplication window, counter totals, input transform, ``reject`` and
``store_checked`` (the publish path after its checks).
"""

from __future__ import annotations

from typing import Any, Protocol

from .. import clock
from . import advisories, counter, errors
from .errors import ApiError
from .ttl import MSG_TTL, InvalidTTL, parse_ttl
from .util import REQUIRED_API_LEVEL, dumps, gen_header, get_header, level_supported, parse_uint


class BatchEngine(Protocol):
    """What the server-wide count of batches needs of the engine (``JetStream``): the first of
    the server's engines (one per account) keeps it."""

    @property
    def engines(self) -> list[Any]: ...

BATCH_ID = b"Nats-Batch-Id"  # stream.go JSBatchId
BATCH_SEQ = b"Nats-Batch-Sequence"  # JSBatchSeq
BATCH_COMMIT = b"Nats-Batch-Commit"  # JSBatchCommit
BATCH_PREFIX = b"Nats-Batch-"  # what mirrors and sources strip (stream.go)
COMMIT_ONE, COMMIT_EOB = b"1", b"eob"  # the two commit values nats-server knows

# nats-server 2.15.1's defaults (stream.go streamDefault*; JetStreamLimits can lower them there,
# natserver has no such options yet).
MAX_BATCH_SIZE = 1000  # streamDefaultMaxAtomicBatchSize: messages in one batch (eob not counted)
MAX_INFLIGHT_PER_STREAM = 50  # streamDefaultMaxAtomicBatchInflightPerStream
MAX_INFLIGHT_TOTAL = 1000  # streamDefaultMaxAtomicBatchInflightTotal (every stream of the server)
BATCH_TIMEOUT_NS = 10 * 1_000_000_000  # streamDefaultMaxBatchTimeout: 10 s without a message
MAX_BATCH_ID_LEN = 64  # processJetStreamAtomicBatchMsg: "Batch ID is too long"
MAX_HEADER_SIZE = 65535  # the stored header length is a u16 (checkMsgHeadersPreClusteredProposal)
_MAX_UINT64 = 2**64 - 1  # a batch sequence is a Go uint64

# jetstream_events.go: JSStreamBatchAbandonedAdvisory and its reasons.
ABANDONED_TYPE = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
TIMEOUT, LARGE, INCOMPLETE, UNSUPPORTED = "timeout", "large", "incomplete", "unsupported"

_EXPECTED_STREAM = b"Nats-Expected-Stream"
_EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
_EXPECTED_LAST_SUBJ_SEQ = b"Nats-Expected-Last-Subject-Sequence"
_EXPECTED_LAST_SUBJ_SEQ_SUBJ = b"Nats-Expected-Last-Subject-Sequence-Subject"
_EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
_MSG_ID = b"Nats-Msg-Id"
_ROLLUP = b"Nats-Rollup"


class BatchStream(Protocol):
    """What of a stream the batches use."""

    cfg: Any
    store: Any
    name: str
    engine: Any
    counter_totals: counter.Totals

    def transformed(self, subject: bytes) -> bytes: ...

    def is_duplicate(self, msg_id: bytes, now: int) -> bool: ...

    def max_payload(self) -> int: ...

    def reject(self, reply, error: ApiError) -> None: ...

    def store_checked(self, subject: bytes, reply: bytes | None, hdr: bytes, msg: bytes, now: int,
                      batch_ack: tuple[bytes, int] | None = None) -> bool: ...

    def store_batch(self, batch_id: bytes, items: list, now: int) -> bool: ...


class _Batch:
    """One batch in flight: its staged messages and when it is abandoned."""

    __slots__ = ("msgs", "deadline")

    def __init__(self, deadline: int) -> None:
        self.msgs: list[tuple[bytes, bytes, bytes]] = []  # (subject as published, header, body)
        self.deadline = deadline


class _StagedTotals:
    """A counter stream's totals while a batch is checked: the batch's own increments first
    (they are not stored yet), else the stream's (counter.Totals duck type)."""

    __slots__ = ("real", "staged")

    def __init__(self, real: counter.Totals) -> None:
        self.real = real
        self.staged: dict[bytes, tuple[counter.Number, bytes]] = {}

    def last(self, store, subject: bytes):
        staged = self.staged.get(subject)
        return staged if staged is not None else self.real.last(store, subject)

    def keep(self, subject: bytes, seq: int, total, sources: bytes) -> None:
        self.staged[subject] = (total, sources)


def _inflight_total(engine: BatchEngine) -> list[int]:
    """The server's count of atomic batches in flight (globalInflightAtomicBatches), kept by
    the first engine for all of them."""
    return engine.engines[0].atomic_batches_inflight


class Batches:
    """A stream's atomic batches in flight (created with the stream; idle when it has none)."""

    __slots__ = ("stream", "atomic")

    def __init__(self, stream: BatchStream) -> None:
        self.stream = stream
        self.atomic: dict[bytes, _Batch] = {}

    # -- lifetime ------------------------------------------------------------------------------

    def _drop(self, batch_id: bytes) -> None:
        if self.atomic.pop(batch_id, None) is not None:
            _inflight_total(self.stream.engine)[0] -= 1

    def _abandon(self, batch_id: bytes, reason: str) -> None:
        self._drop(batch_id)
        stream = self.stream
        name = stream.name
        advisories.publish(stream.engine, f"{advisories.ADVISORY_PREFIX}STREAM.BATCH_ABANDONED.{name}",
                           lambda: {"type": ABANDONED_TYPE, "stream": name,
                                    "batch": batch_id.decode("utf-8", "replace"), "reason": reason})

    def clear(self) -> None:
        """The stream is deleted, stopped, or no longer allows atomic batches: every batch in
        flight goes (deleteAtomicBatches, without advisories)."""
        for batch_id in list(self.atomic):
            self._drop(batch_id)

    def expire(self, now: int) -> int | None:
        """Abandon the batches idle for BATCH_TIMEOUT_NS (their timers, on the server's clock);
        the next deadline (None: no batch in flight). Called by the engine's expirer."""
        nxt = None
        for batch_id, batch in list(self.atomic.items()):
            if batch.deadline <= now:
                self._abandon(batch_id, TIMEOUT)
            elif nxt is None or batch.deadline < nxt:
                nxt = batch.deadline
        return nxt

    # -- publishing ----------------------------------------------------------------------------

    def process(self, batch_id: bytes, subject: bytes, reply: bytes | None, hdr: bytes, msg: bytes) -> None:
        """A published message with a Nats-Batch-Id (processJetStreamAtomicBatchMsg), in its
        order of checks."""
        stream = self.stream
        cfg, engine = stream.cfg, stream.engine
        reject = stream.reject
        if cfg.sealed:
            reject(reply, errors.stream_sealed())
            return
        if engine.over_limit(stream.store.kind):
            reject(reply, errors.insufficient_resources())
            return
        if cfg.max_msg_size >= 0 and len(hdr) + len(msg) > cfg.max_msg_size:
            reject(reply, errors.message_exceeds_maximum())
            return
        if not cfg.allow_atomic:
            reject(reply, errors.atomic_publish_disabled())
            return
        if len(batch_id) > MAX_BATCH_ID_LEN:
            reject(reply, errors.atomic_publish_invalid_batch_id())
            return
        raw_seq = get_header(BATCH_SEQ, hdr)
        seq = int(raw_seq) if raw_seq.isdigit() else -1  # (b"".isdigit() is False)
        if not 0 <= seq <= _MAX_UINT64:  # Go's parseUint64 refuses what overflows
            reject(reply, errors.atomic_publish_missing_seq())
            return
        commit_value = get_header(BATCH_COMMIT, hdr) if BATCH_COMMIT in hdr else b""
        # (Go's sliceHeader: an empty value is a commit header too, and not a valid one.)
        commit = commit_value != b"" or _has_header(BATCH_COMMIT, hdr)
        eob = commit_value == COMMIT_EOB
        now = clock.now_ns()
        batch = self.atomic.get(batch_id)
        if batch is not None and batch.deadline <= now:
            self._abandon(batch_id, TIMEOUT)  # its timer fired first
            batch = None
        if batch is None:
            if seq != 1:
                if _size(seq, eob) > MAX_BATCH_SIZE:
                    reject(reply, errors.atomic_publish_too_large_batch(MAX_BATCH_SIZE))
                else:
                    reject(reply, errors.atomic_publish_incomplete_batch())
                return
            self.expire(now)
            if len(self.atomic) + 1 > MAX_INFLIGHT_PER_STREAM:
                reject(reply, errors.atomic_publish_too_many_inflight())
                return
            total = _inflight_total(engine)
            if total[0] + 1 > MAX_INFLIGHT_TOTAL:
                reject(reply, errors.atomic_publish_too_many_inflight())
                return
            total[0] += 1
            batch = self.atomic[batch_id] = _Batch(now + BATCH_TIMEOUT_NS)
            engine.schedule_expiry(batch.deadline)
        if commit and commit_value not in (COMMIT_ONE, COMMIT_EOB):
            self._drop(batch_id)
            reject(reply, errors.atomic_publish_invalid_batch_commit())
            return
        if REQUIRED_API_LEVEL in hdr and _has_header(REQUIRED_API_LEVEL, hdr):
            if not level_supported(hdr):
                self._abandon(batch_id, UNSUPPORTED)
                reject(reply, errors.required_api_level())
                return
            hdr = _remove_all(hdr, REQUIRED_API_LEVEL)
        batch.deadline = now + BATCH_TIMEOUT_NS
        if len(batch.msgs) + 1 != seq or (seq == 1 and eob):
            self._abandon(batch_id, INCOMPLETE)
            reject(reply, errors.atomic_publish_incomplete_batch())
            return
        if _size(seq, eob) > MAX_BATCH_SIZE:
            self._abandon(batch_id, LARGE)
            reject(reply, errors.atomic_publish_too_large_batch(MAX_BATCH_SIZE))
            return
        batch.msgs.append((subject, hdr, msg))
        if not commit:
            if reply and not cfg.no_ack:
                engine.respond(reply, b"", stream)  # staged: an empty answer
            return
        self._drop(batch_id)
        msgs = batch.msgs[:-1] if eob else batch.msgs
        self._commit(batch_id, msgs, reply, eob, now)

    def _commit(self, batch_id: bytes, msgs: list, reply: bytes | None, eob: bool, now: int) -> None:
        """Check the whole batch against the stream, then store all of it or nothing."""
        stream = self.stream
        checked = []
        check = _Check(stream)
        for subject, hdr, msg in msgs:
            if _has_header(_EXPECTED_LAST_MSG_ID, hdr) and get_header(_EXPECTED_LAST_MSG_ID, hdr):
                stream.reject(reply, errors.atomic_publish_unsupported_header(_EXPECTED_LAST_MSG_ID.decode()))
                return
            try:
                hdr, msg = check.message(stream.transformed(subject), hdr, msg, now)
            except ApiError as exc:
                stream.reject(reply, exc)
                return
            checked.append((subject, hdr, msg))
        count = len(checked)
        items = []
        for i, (subject, hdr, msg) in enumerate(checked, 1):
            last = i == count
            if last and eob:
                hdr = gen_header(hdr, BATCH_COMMIT, COMMIT_ONE)
            items.append((subject, reply if last else None, hdr, msg, (batch_id, i) if last else None))
        stream.store_batch(batch_id, items, now)


class _Check:
    """checkMsgHeadersPreClusteredProposal for one batch: each message is checked against the
    stream as it will be once the batch's earlier messages are stored (the staged diff)."""

    __slots__ = ("stream", "msg_ids", "inflight", "expected", "totals", "index", "size")

    def __init__(self, stream: BatchStream) -> None:
        self.stream = stream
        self.msg_ids: set[bytes] = set()
        self.inflight: dict[bytes, list[int]] = {}  # subject -> [bytes, messages] in this batch
        self.expected: dict[bytes, int] = {}  # expected-per-subject checks done: subject -> its last
        self.totals = _StagedTotals(stream.counter_totals)
        self.index = 0  # messages checked so far (the clustered sequence runs ahead by it)
        self.size = 0  # their stored size

    def message(self, subject: bytes, hdr: bytes, msg: bytes, now: int) -> tuple[bytes, bytes]:
        stream = self.stream
        cfg, store = stream.cfg, stream.store
        if len(hdr) > MAX_HEADER_SIZE:
            raise errors.header_exceeds_maximum()
        incr = counter.check_publish(cfg.allow_msg_counter, hdr, msg)
        expected = get_header(_EXPECTED_STREAM, hdr)
        if expected and expected.decode("utf-8", "replace") != stream.name:
            raise errors.stream_not_match()
        if MSG_TTL in hdr and _has_header(MSG_TTL, hdr):
            try:
                ttl = parse_ttl(get_header(MSG_TTL, hdr))
                bad = False
            except InvalidTTL:
                ttl, bad = 0, True
            if ttl != 0 or bad:
                if not cfg.allow_msg_ttl:
                    raise errors.message_ttl_disabled()
                if bad:
                    raise errors.message_ttl_invalid()
        msg_id = get_header(_MSG_ID, hdr)
        if msg_id:
            if msg_id in self.msg_ids or stream.is_duplicate(msg_id, now):
                raise errors.atomic_publish_duplicate_message()
            self.msg_ids.add(msg_id)
        if counter.SOURCE_HEADER in hdr and get_header(counter.SOURCE_HEADER, hdr):
            raise errors.message_source_hdr_not_allowed()
        if cfg.allow_msg_counter:
            if incr is None:
                raise errors.message_incr_missing()
            hdr, msg, _ = counter.apply(store, self.totals, subject, hdr, msg, incr,  # type: ignore[arg-type]
                                        stream.max_payload())
        value = get_header(_EXPECTED_LAST_SEQ, hdr)
        if value:
            last = store.last_seq + self.index  # (Go: mset.clseq, which each message moves on)
            if _go_uint(value) != last:
                raise errors.stream_wrong_last_sequence(last)
            if self.inflight:  # only the first message may expect a last sequence
                raise errors.stream_wrong_last_sequence_constant()
        value = get_header(_EXPECTED_LAST_SUBJ_SEQ, hdr)
        if value:
            seq = parse_uint(value)
            seq_subject = get_header(_EXPECTED_LAST_SUBJ_SEQ_SUBJ, hdr) or subject
            if seq_subject in self.inflight:
                raise errors.stream_wrong_last_sequence_constant()
            last = self.expected.get(seq_subject)
            if last is None:
                last = store.last_seq_for(seq_subject)
                if seq != last:
                    raise errors.stream_wrong_last_sequence(last)
                self.expected[seq_subject] = last
            elif seq != last:
                raise errors.stream_wrong_last_sequence(last)
        elif get_header(_EXPECTED_LAST_SUBJ_SEQ_SUBJ, hdr):
            raise errors.expected_last_seq_per_subject_invalid()
        rollup = get_header(_ROLLUP, hdr).lower()
        if rollup:
            if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                raise errors.stream_rollup_failed("rollup not permitted")
            if rollup == b"sub":
                if subject in self.inflight:
                    raise errors.stream_rollup_failed("batch rollup sub invalid")
            elif rollup == b"all":
                if self.inflight:
                    raise errors.stream_rollup_failed("batch rollup all invalid")
            else:
                raise errors.stream_rollup_failed(f"rollup value invalid: {_go_q(rollup)}")
        size = store.msg_size(subject, hdr, msg)
        entry = self.inflight.get(subject)
        if entry is None:
            entry = self.inflight[subject] = [0, 0]
        entry[0] += size
        entry[1] += 1
        self.index += 1
        self.size += size
        if cfg.discard == "new":
            if cfg.max_msgs > 0 or cfg.max_bytes > 0:
                if cfg.max_msgs > 0 and store.msgs + self.index > cfg.max_msgs:
                    raise errors.stream_store_failed("maximum messages exceeded")
                if cfg.max_bytes > 0 and store.bytes + self.size > cfg.max_bytes:
                    raise errors.stream_store_failed("maximum bytes exceeded")
            if cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0 and not _has_header(_ROLLUP, hdr):
                ss = store.fss.get(subject)
                if (ss[0] if ss else 0) + entry[1] > cfg.max_msgs_per_subject:
                    raise errors.stream_store_failed("maximum messages per subject exceeded")
        return hdr, msg


def _size(seq: int, eob: bool) -> int:
    """The batch's size at ``seq``: the eob message does not count (a uint64 in Go, so an eob
    at sequence 0 is a huge batch: "too large")."""
    return (seq - 1) & _MAX_UINT64 if eob else seq


def _has_header(key: bytes, hdr: bytes) -> bool:
    """Go's sliceHeader found the key (its value may be empty)."""
    i = hdr.find(b"\r\n" + key + b":")
    return i >= 0


def _remove_all(hdr: bytes, key: bytes) -> bytes:
    lines = hdr.split(b"\r\n")
    prefix = key.lower() + b":"
    return b"\r\n".join(line for line in lines if not line.lower().startswith(prefix))


def _go_uint(value: bytes) -> int:
    """uint64(parseInt64(v)) of Go: digits only, else -1 as a uint64 (never a sequence)."""
    return int(value) if value.isdigit() else -1


def _go_q(value: bytes) -> str:
    return dumps(value.decode("utf-8", "replace")).decode()


def strip_batch_headers(hdr: bytes) -> bytes:
    """A mirrored or sourced message loses its Nats-Batch-* headers (stream.go:
    removeHeaderIfPrefixPresent), so that it is not taken for a batch of the follower."""
    lines = hdr.split(b"\r\n")
    kept = [line for line in lines if not line.startswith(BATCH_PREFIX)]
    return b"\r\n".join(kept) if len(kept) != len(lines) else hdr

