"""What a stream group and a consumer group replicate, byte for byte as nats-server 2.15.1
writes it (server/jetstream_cluster.go, stream.go, consumer.go, store.go, filestore.go,
avl/seqset.go); sans-IO. Recorded from a live 2.15.1 cluster in
tests/jetstream/replication/data/.

A RAFT entry (natserver.raft.wire.Entry) of type Normal carries one op: its first byte is an
:class:`Op` (jetstream_cluster.go entryOp, in its order), the rest the op's body. A Snapshot
entry carries the group's state: :class:`StreamState` (the stream's binary state) or
:class:`ConsumerState`.

Stream ops: :class:`StreamMsg` (streamMsgOp, and compressedStreamMsgOp: the same body as one
S2 block, written when subject, reply, headers and payload are over 8 KiB together and the
block is smaller), :class:`BatchMsg` (batchMsgOp / batchCommitMsgOp: a message of an atomic
batch), and the JSON ops (purgeStreamOp, deleteMsgOp, deleteRangeOp, updateStreamOp):
:class:`JsonOp`, its object kept in the order it came so that it encodes to the same bytes
(Go's json.Encoder: compact, HTML-safe, a newline at the end).

Consumer ops: :class:`Delivered` (updateDeliveredOp), :class:`Acked` (updateAcksOp),
:class:`Skipped` (updateSkipOp), :class:`PendingRequest` (addPendingRequest /
removePendingRequest: a pull request's reply subject), :class:`Reset` (resetSeqOp).

Every decode raises :class:`CodecError` (a ValueError) on bytes it cannot read, never an
IndexError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import cramjam

from ...protocol import s2
from ...protocol.const import MAX_PENDING_SIZE
from ...protocol.varint import uvarint
from ..util import dumps, loads

__all__ = [
    "Acked", "BatchMsg", "CodecError", "ConsumerState", "DeleteBlock", "Delivered", "JsonOp", "Op",
    "PendingRequest", "Reset", "SeqSetNode", "Skipped", "StreamMsg", "StreamState",
    "decode_consumer_op", "decode_snapshot_file", "decode_stream_op",
]

COMPRESS_THRESHOLD = 8192  # jetstream_cluster.go compressThreshold: body sizes above it are compressed
# The most a compressed stream message may decode to: a payload up to MAX_PENDING_SIZE (const.go:
# the most a connection may have pending, above any max_payload) plus subject, reply and
# headers (u16 lengths each). S2's 4 MiB applies to its framed streams, not to one block.
MAX_DECODED_MSG = MAX_PENDING_SIZE + 3 * 0xFFFF + 64
MSG_FLAG_SOURCED = 1  # jetstream_cluster.go msgFlagFromSourceOrMirror
STREAM_STATE_MAGIC = 42  # store.go streamStateMagic
STREAM_STATE_VERSION = 1  # store.go streamStateVersion
STREAM_STATE_VERSION_SOURCES = 2  # store.go streamStateVersionSources (2.14+: sources' positions)
RUN_LENGTH_MAGIC = 33  # store.go runLengthMagic: a DeleteRange (first, count)
SEQ_SET_MAGIC = 22  # store.go seqSetMagic = avl/seqset.go magic: an encoded SequenceSet
SEQ_SET_VERSION = 2  # avl/seqset.go version
SEQ_SET_BUCKETS = 32  # avl/seqset.go numBuckets (of 64 bits each) per node
CONSUMER_STATE_MAGIC = 22  # filestore.go magic (the consumer state's header)
CONSUMER_STATE_VERSION = 2  # encodeConsumerState writes version 2
SNAPSHOT_FILE_HASH_LEN = 8  # raft.go encodeSnapshot: a snapshot file ends with its highwayhash.Size64 sum

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class CodecError(ValueError):
    """Bytes that are not the op or state they should be (jetstream_cluster.go errBadStreamMsg
    and its kin)."""


class Op(IntEnum):
    """jetstream_cluster.go entryOp, in its order ("ONLY ADD TO THE END")."""

    ASSIGN_STREAM = 0
    ASSIGN_CONSUMER = 1
    REMOVE_STREAM = 2
    REMOVE_CONSUMER = 3
    STREAM_MSG = 4
    PURGE_STREAM = 5
    DELETE_MSG = 6
    UPDATE_DELIVERED = 7
    UPDATE_ACKS = 8
    ASSIGN_COMPRESSED_CONSUMER = 9
    UPDATE_SKIP = 10
    UPDATE_STREAM = 11
    ADD_PENDING_REQUEST = 12
    REMOVE_PENDING_REQUEST = 13
    COMPRESSED_STREAM_MSG = 14
    DELETE_RANGE = 15
    BATCH_MSG = 16
    BATCH_COMMIT_MSG = 17
    RESET_SEQ = 18


# -- varints (Go's encoding/binary) -----------------------------------------------------------

def varint(value: int) -> bytes:
    """binary.PutVarint: zig-zag."""
    return uvarint((value << 1) ^ (value >> 63) if value < 0 else value << 1)


def read_uvarint(buf: bytes, at: int) -> tuple[int, int]:
    """(value, the index after it); CodecError when cut short or over 64 bits."""
    value = shift = 0
    for i in range(at, min(len(buf), at + 10)):
        byte = buf[i]
        if byte < 0x80:
            if i - at == 9 and byte > 1:
                break
            return value | (byte << shift), i + 1
        value |= (byte & 0x7F) << shift
        shift += 7
    raise CodecError("bad uvarint")


def read_varint(buf: bytes, at: int) -> tuple[int, int]:
    ux, at = read_uvarint(buf, at)
    return (~(ux >> 1) if ux & 1 else ux >> 1), at


def _take(buf: bytes, at: int, size: int) -> tuple[bytes, int]:
    if size < 0 or at + size > len(buf):
        raise CodecError("jetstream cluster bad replicated stream msg")
    return bytes(buf[at:at + size]), at + size


def _unpack(fmt: struct.Struct, buf: bytes, at: int) -> tuple[int, int]:
    if at + fmt.size > len(buf):
        raise CodecError("jetstream cluster bad replicated stream msg")
    return fmt.unpack_from(buf, at)[0], at + fmt.size


# -- stream ops -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StreamMsg:
    """streamMsgOp's body (decodeStreamMsg): the stream's last sequence when the leader
    proposed it (``lseq``: the message gets lseq + 1 when applied), the time in ns, subject,
    reply, headers, payload and flags (MSG_FLAG_SOURCED). ``compressed``: it came (and goes)
    as compressedStreamMsgOp."""

    subject: bytes
    reply: bytes
    hdr: bytes
    msg: bytes
    lseq: int
    ts: int
    flags: int = 0
    compressed: bool = False

    @property
    def sourced(self) -> bool:
        return bool(self.flags & MSG_FLAG_SOURCED)

    def body(self) -> bytes:
        """The uncompressed body (after the op byte)."""
        return b"".join((
            _U64.pack(self.lseq), _U64.pack(self.ts & 0xFFFFFFFFFFFFFFFF),
            _U16.pack(len(self.subject)), self.subject, _U16.pack(len(self.reply)), self.reply,
            _U16.pack(len(self.hdr)), self.hdr, _U32.pack(len(self.msg)), self.msg, uvarint(self.flags)))

    def encode(self) -> bytes:
        """The entry's data: streamMsgOp and the body, or compressedStreamMsgOp and the body
        as one S2 block (a snappy block, which S2 reads: the bytes differ from Go's s2.Encode,
        the message they decode to does not)."""
        body = self.body()
        if self.compressed:
            return bytes((Op.COMPRESSED_STREAM_MSG,)) + bytes(cramjam.snappy.compress_raw(body))
        return bytes((Op.STREAM_MSG,)) + body

    @classmethod
    def proposal(cls, subject: bytes, reply: bytes, hdr: bytes, msg: bytes, lseq: int, ts: int,
                 sourced: bool = False) -> StreamMsg:
        """What a stream leader proposes (encodeStreamMsgAllowCompress): compressed when
        subject, reply, headers and payload are over COMPRESS_THRESHOLD together and the
        block comes out smaller."""
        plain = cls(subject, reply, hdr, msg, lseq, ts, MSG_FLAG_SOURCED if sourced else 0)
        if len(subject) + len(reply) + len(hdr) + len(msg) <= COMPRESS_THRESHOLD:
            return plain
        body = plain.body()
        if len(cramjam.snappy.compress_raw(body)) + 1 < 1 + len(body):
            return cls(subject, reply, hdr, msg, lseq, ts, plain.flags, compressed=True)
        return plain

    @classmethod
    def decode_body(cls, buf: bytes, compressed: bool = False) -> StreamMsg:
        if compressed:
            try:
                buf = s2.decode_block(buf, MAX_DECODED_MSG)
            except s2.S2Error as exc:
                raise CodecError(str(exc)) from None
        if len(buf) < 26:
            raise CodecError("jetstream cluster bad replicated stream msg")
        lseq, ts = struct.unpack_from("<QQ", buf)
        at = 16
        size, at = _unpack(_U16, buf, at)
        subject, at = _take(buf, at, size)
        size, at = _unpack(_U16, buf, at)
        reply, at = _take(buf, at, size)
        size, at = _unpack(_U16, buf, at)
        hdr, at = _take(buf, at, size)
        size, at = _unpack(_U32, buf, at)
        msg, at = _take(buf, at, size)
        flags = 0
        if at < len(buf):
            flags, at = read_uvarint(buf, at)
        if at != len(buf):
            raise CodecError("bytes after a stream msg's flags")
        if ts >= 1 << 63:
            ts -= 1 << 64
        return cls(subject, reply, hdr, msg, lseq, ts, flags, compressed)


@dataclass(frozen=True, slots=True)
class BatchMsg:
    """batchMsgOp / batchCommitMsgOp (decodeBatchMsg): a message of an atomic batch, its id and
    sequence in the batch; the commit is the batch's last. ``msg`` is a StreamMsg (compressed
    or not)."""

    batch_id: bytes
    batch_seq: int
    commit: bool
    msg: StreamMsg

    def encode(self) -> bytes:
        op = Op.BATCH_COMMIT_MSG if self.commit else Op.BATCH_MSG
        return bytes((op,)) + _U16.pack(len(self.batch_id)) + self.batch_id + uvarint(self.batch_seq) + self.msg.encode()


@dataclass(frozen=True, slots=True)
class JsonOp:
    """An op whose body is JSON (purgeStreamOp: streamPurge; deleteMsgOp: streamMsgDelete;
    deleteRangeOp: DeleteRange; updateStreamOp: a stream assignment). ``body`` keeps the
    object's order (Go's struct order), so that it encodes to the same bytes."""

    op: Op
    body: dict

    def encode(self) -> bytes:
        return bytes((self.op,)) + dumps(self.body) + b"\n"


_JSON_OPS = (Op.PURGE_STREAM, Op.DELETE_MSG, Op.DELETE_RANGE, Op.UPDATE_STREAM)

StreamOp = StreamMsg | BatchMsg | JsonOp


def decode_stream_op(data: bytes) -> StreamOp:
    """A stream group's Normal entry."""
    if not data:
        raise CodecError("jetstream cluster bad replicated entry")
    op = data[0]
    if op in (Op.STREAM_MSG, Op.COMPRESSED_STREAM_MSG):
        return StreamMsg.decode_body(data[1:], op == Op.COMPRESSED_STREAM_MSG)
    if op in (Op.BATCH_MSG, Op.BATCH_COMMIT_MSG):
        size, at = _unpack(_U16, data, 1)
        batch_id, at = _take(data, at, size)
        batch_seq, at = read_uvarint(data, at)
        if at >= len(data) or data[at] not in (Op.STREAM_MSG, Op.COMPRESSED_STREAM_MSG):
            raise CodecError("jetstream cluster bad replicated stream msg")
        inner = StreamMsg.decode_body(data[at + 1:], data[at] == Op.COMPRESSED_STREAM_MSG)
        return BatchMsg(batch_id, batch_seq, op == Op.BATCH_COMMIT_MSG, inner)
    if op in _JSON_OPS:
        try:
            body = loads(data[1:])
        except ValueError:
            raise CodecError("jetstream cluster bad replicated entry") from None
        if not isinstance(body, dict):
            raise CodecError("jetstream cluster bad replicated entry")
        return JsonOp(Op(op), body)
    raise CodecError(f"unknown stream entry op type: {op}")


# -- consumer ops -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Delivered:
    """updateDeliveredOp: consumer and stream sequence delivered, its delivery count, the time."""

    dseq: int
    sseq: int
    dc: int
    ts: int

    def encode(self) -> bytes:
        return bytes((Op.UPDATE_DELIVERED,)) + uvarint(self.dseq) + uvarint(self.sseq) + uvarint(self.dc) + varint(self.ts)


@dataclass(frozen=True, slots=True)
class Acked:
    """updateAcksOp: the consumer and stream sequence acknowledged."""

    dseq: int
    sseq: int

    def encode(self) -> bytes:
        return bytes((Op.UPDATE_ACKS,)) + uvarint(self.dseq) + uvarint(self.sseq)


@dataclass(frozen=True, slots=True)
class Skipped:
    """updateSkipOp: the stream sequence the consumer starts after (a filtered consumer's
    first match, a new consumer's start): its next is sseq."""

    sseq: int

    def encode(self) -> bytes:
        return bytes((Op.UPDATE_SKIP,)) + _U64.pack(self.sseq)


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """addPendingRequest / removePendingRequest: a pull request's reply subject, kept by the
    followers so that a new leader can tell the requesters (consumer.go prm)."""

    reply: bytes
    add: bool

    def encode(self) -> bytes:
        return bytes((Op.ADD_PENDING_REQUEST if self.add else Op.REMOVE_PENDING_REQUEST,)) + self.reply


@dataclass(frozen=True, slots=True)
class Reset:
    """resetSeqOp (CONSUMER.RESET, 2.14+): the stream sequence the consumer starts again
    from, and the reply subject of the request."""

    sseq: int
    reply: bytes

    def encode(self) -> bytes:
        return bytes((Op.RESET_SEQ,)) + _U64.pack(self.sseq) + self.reply


ConsumerOp = Delivered | Acked | Skipped | PendingRequest | Reset


def decode_consumer_op(data: bytes) -> ConsumerOp:
    """A consumer group's Normal entry (jetstream_cluster.go applyConsumerEntries)."""
    if not data:
        raise CodecError("jetstream cluster bad replicated entry")
    op, body = data[0], data[1:]
    if op == Op.UPDATE_DELIVERED:
        dseq, at = read_uvarint(body, 0)
        sseq, at = read_uvarint(body, at)
        dc, at = read_uvarint(body, at)
        ts, at = read_varint(body, at)
        if at != len(body):
            raise CodecError("jetstream cluster bad replicated delivered update")
        return Delivered(dseq, sseq, dc, ts)
    if op == Op.UPDATE_ACKS:
        dseq, at = read_uvarint(body, 0)
        sseq, at = read_uvarint(body, at)
        if at != len(body):
            raise CodecError("jetstream cluster bad replicated ack update")
        return Acked(dseq, sseq)
    if op == Op.UPDATE_SKIP:
        if len(body) != 8:
            raise CodecError("jetstream cluster bad replicated skip update")
        return Skipped(_U64.unpack(body)[0])
    if op in (Op.ADD_PENDING_REQUEST, Op.REMOVE_PENDING_REQUEST):
        return PendingRequest(bytes(body), op == Op.ADD_PENDING_REQUEST)
    if op == Op.RESET_SEQ:
        if len(body) < 8:
            raise CodecError("jetstream cluster bad replicated reset update")
        return Reset(_U64.unpack_from(body)[0], bytes(body[8:]))
    raise CodecError(f"unknown consumer entry op type: {op}")


# -- the stream's state snapshot --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SeqSetNode:
    """One node of an encoded avl.SequenceSet: its base, 32 buckets of 64 bits, its height."""

    base: int
    bits: tuple[int, ...]
    height: int

    def seqs(self) -> list[int]:
        out = []
        for i, word in enumerate(self.bits):
            while word:
                low = word & -word
                out.append(self.base + i * 64 + low.bit_length() - 1)
                word ^= low
        return out


@dataclass(frozen=True, slots=True)
class DeleteBlock:
    """One block of deleted sequences in a stream state: a run (store.go DeleteRange: first,
    count) or a set (avl.SequenceSet: nodes in the order Encode walks them, its size)."""

    first: int = 0
    count: int = 0
    nodes: tuple[SeqSetNode, ...] | None = None
    size: int = 0

    def seqs(self) -> list[int]:
        if self.nodes is None:
            return list(range(self.first, self.first + self.count))
        return sorted(seq for node in self.nodes for seq in node.seqs())

    def encode(self) -> bytes:
        if self.nodes is None:
            return bytes((RUN_LENGTH_MAGIC,)) + uvarint(self.first) + uvarint(self.count)
        parts = [bytes((SEQ_SET_MAGIC, SEQ_SET_VERSION)), _U32.pack(len(self.nodes)), _U32.pack(self.size)]
        for node in self.nodes:
            parts.append(_U64.pack(node.base) + struct.pack(f"<{SEQ_SET_BUCKETS}Q", *node.bits) + _U16.pack(node.height))
        return b"".join(parts)


@dataclass(frozen=True, slots=True)
class StreamState:
    """A stream group's snapshot (filestore.go/memstore.go EncodedStreamState, store.go
    DecodeStreamState): counts, first and last sequence, the leader's clfs (``failed``), the
    sources' positions (version 2), the number of deleted sequences and their blocks."""

    msgs: int
    total_bytes: int  # Go's Bytes
    first_seq: int
    last_seq: int
    failed: int
    num_deleted: int
    deleted: tuple[DeleteBlock, ...] = ()
    sources: tuple[tuple[bytes, int, bytes], ...] | None = None  # (name, seq, identity)

    def deleted_seqs(self) -> list[int]:
        return sorted(seq for block in self.deleted for seq in block.seqs())

    def encode(self) -> bytes:
        version = STREAM_STATE_VERSION if self.sources is None else STREAM_STATE_VERSION_SOURCES
        parts = [bytes((STREAM_STATE_MAGIC, version)), uvarint(self.msgs), uvarint(self.total_bytes),
                 uvarint(self.first_seq), uvarint(self.last_seq), uvarint(self.failed)]
        if self.sources is not None:
            parts.append(uvarint(len(self.sources)))
            for name, seq, ident in self.sources:
                parts += [uvarint(len(name)), name, uvarint(seq), uvarint(len(ident)), ident]
        parts.append(uvarint(self.num_deleted))
        parts += [block.encode() for block in self.deleted]
        return b"".join(parts)

    @classmethod
    def decode(cls, buf: bytes) -> StreamState:
        if len(buf) < 2 or buf[0] != STREAM_STATE_MAGIC or buf[1] not in (STREAM_STATE_VERSION, STREAM_STATE_VERSION_SOURCES):
            raise CodecError("bad stream state encoding")
        at = 2
        values = []
        for _ in range(5):
            value, at = read_uvarint(buf, at)
            values.append(value)
        sources = None
        if buf[1] == STREAM_STATE_VERSION_SOURCES:
            count, at = read_uvarint(buf, at)
            items = []
            for _ in range(count):
                size, at = read_uvarint(buf, at)
                name, at = _take(buf, at, size)
                seq, at = read_uvarint(buf, at)
                size, at = read_uvarint(buf, at)
                ident, at = _take(buf, at, size)
                items.append((name, seq, ident))
            sources = tuple(items)
        num_deleted, at = read_uvarint(buf, at)
        blocks = []
        while num_deleted and at < len(buf):
            if buf[at] == RUN_LENGTH_MAGIC:
                first, at = read_uvarint(buf, at + 1)
                count, at = read_uvarint(buf, at)
                blocks.append(DeleteBlock(first, count))
            elif buf[at] == SEQ_SET_MAGIC:
                block, at = _decode_seq_set(buf, at)
                blocks.append(block)
            else:
                raise CodecError("corrupt stream state")
        if at != len(buf):
            raise CodecError("corrupt stream state")
        msgs, nbytes, first, last, failed = values
        return cls(msgs, nbytes, first, last, failed, num_deleted, tuple(blocks), sources)


def _decode_seq_set(buf: bytes, at: int) -> tuple[DeleteBlock, int]:
    """avl.Decode, version 2 (what 2.10+ writes)."""
    if len(buf) - at < 10 or buf[at + 1] != SEQ_SET_VERSION:
        raise CodecError("ss: bad encoding")
    count, size = struct.unpack_from("<II", buf, at + 2)
    at += 10
    per_node = 8 + SEQ_SET_BUCKETS * 8 + 2
    if at + count * per_node > len(buf):
        raise CodecError("ss: bad encoding")
    nodes = []
    for _ in range(count):
        base = _U64.unpack_from(buf, at)[0]
        words = struct.unpack_from(f"<{SEQ_SET_BUCKETS}Q", buf, at + 8)
        height = _U16.unpack_from(buf, at + 8 + SEQ_SET_BUCKETS * 8)[0]
        nodes.append(SeqSetNode(base, words, height))
        at += per_node
    return DeleteBlock(nodes=tuple(nodes), size=size), at


# -- the consumer's state snapshot ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A consumer group's snapshot (store.go encodeConsumerState, filestore.go
    decodeConsumerState): ack floor and delivered (consumer and stream sequences), the
    pending messages (stream sequence -> consumer sequence, delivery time in ns: written in
    seconds from ``base_ts``, the encoder's now rounded to a second) and the redelivery counts.
    ``pending`` and ``redelivered`` keep the order they came in (Go's map order)."""

    ack_floor: tuple[int, int]  # (consumer, stream)
    delivered: tuple[int, int]
    pending: tuple[tuple[int, int, int], ...] = ()  # (sseq, dseq, ts ns)
    redelivered: tuple[tuple[int, int], ...] = ()  # (sseq, count)
    base_ts: int = 0  # seconds (mints)
    version: int = CONSUMER_STATE_VERSION

    def encode(self) -> bytes:
        adflr, asflr = self.ack_floor
        parts = [bytes((CONSUMER_STATE_MAGIC, CONSUMER_STATE_VERSION)), uvarint(adflr), uvarint(asflr),
                 uvarint(self.delivered[0]), uvarint(self.delivered[1]), uvarint(len(self.pending))]
        if self.pending:
            parts.append(varint(self.base_ts))
            for sseq, dseq, ts in self.pending:
                parts += [uvarint(sseq - asflr), uvarint(dseq - adflr), varint(self.base_ts - _go_div(ts, 1_000_000_000))]
        parts.append(uvarint(len(self.redelivered)))
        for sseq, count in self.redelivered:
            parts += [uvarint(sseq - asflr), uvarint(count)]
        return b"".join(parts)

    @classmethod
    def decode(cls, buf: bytes) -> ConsumerState:
        if len(buf) < 2 or buf[0] != CONSUMER_STATE_MAGIC:
            raise CodecError("consumer state: bad magic")
        version = buf[1]
        if version not in (1, 2):
            raise CodecError("consumer state: unsupported version")
        at = 2
        adflr, at = read_uvarint(buf, at)
        asflr, at = read_uvarint(buf, at)
        dcons, at = read_uvarint(buf, at)
        dstream, at = read_uvarint(buf, at)
        if version == 1:
            if adflr > 1:
                dcons += adflr - 1
            if asflr > 1:
                dstream += asflr - 1
        if (asflr | dstream) >> 63:
            raise CodecError("corrupt state")
        count, at = read_uvarint(buf, at)
        pending = []
        base = 0
        if count:
            base, at = read_varint(buf, at)
            for _ in range(count):
                sseq, at = read_uvarint(buf, at)
                dseq = 0
                if version == 2:
                    dseq, at = read_uvarint(buf, at)
                ts, at = read_varint(buf, at)
                sseq += asflr
                if sseq == 0:
                    raise CodecError("corrupt state")
                if version == 2:
                    dseq += adflr
                secs = ts + base if version == 1 else base - ts
                pending.append((sseq, dseq, secs * 1_000_000_000))
        count, at = read_uvarint(buf, at)
        redelivered = []
        for _ in range(count):
            sseq, at = read_uvarint(buf, at)
            n, at = read_uvarint(buf, at)
            redelivered.append((sseq + asflr, n))
        if at != len(buf):
            raise CodecError("corrupt state")
        return cls((adflr, asflr), (dcons, dstream), tuple(pending), tuple(redelivered), base, version)


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# -- a snapshot file on disk ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """raft.go's snapshot file (``snapshots/snap.<term>.<index>``): last term and index, the
    peer state, the group's state, a highwayhash of it all (kept, not checked: natserver
    writes its own files, natserver.raft.storage)."""

    term: int
    index: int
    peer_state: bytes
    data: bytes
    digest: bytes = field(repr=False, default=b"")


def decode_snapshot_file(buf: bytes) -> SnapshotFile:
    """raft.go encodeSnapshot: lastTerm, lastIndex (u64), peerstate length (u32), peerstate,
    data, then the hash."""
    if len(buf) < 20 + SNAPSHOT_FILE_HASH_LEN:
        raise CodecError("raft: snapshot corrupt")
    term, index, size = struct.unpack_from("<QQI", buf)
    peer_state, at = _take(buf, 20, size)
    end = len(buf) - SNAPSHOT_FILE_HASH_LEN
    if at > end:
        raise CodecError("raft: snapshot corrupt")
    return SnapshotFile(term, index, peer_state, bytes(buf[at:end]), bytes(buf[end:]))
