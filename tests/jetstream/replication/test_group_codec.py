"""The stream and consumer groups' entries and snapshots, as 2.15.1 writes them (recorded by
record_groups.py): each decodes and encodes back to the same bytes."""

from __future__ import annotations

import pytest

from natserver.jetstream.replication.group_codec import (
    COMPRESS_THRESHOLD,
    Acked,
    BatchMsg,
    CodecError,
    ConsumerState,
    DeleteBlock,
    Delivered,
    JsonOp,
    Op,
    PendingRequest,
    Reset,
    SeqSetNode,
    Skipped,
    StreamMsg,
    StreamState,
    decode_consumer_op,
    decode_snapshot_file,
    decode_stream_op,
)
from natserver.raft.wire import AppendEntry, EntryType
from tests.jetstream.replication.recorded import load


def _entries(prefix: str) -> list[bytes]:
    rec = load()
    return [e.data for name, g in rec.groups.items() if name.startswith(prefix)
            for _, es in g.entries.values() for e in es if e.type == EntryType.NORMAL]


def _catchup_snapshots() -> list[bytes]:
    """The Snapshot entries 2.15.1's leaders sent a lagging follower ($NRG.CR.)."""
    out = []
    for frame in load().raw["frames"]:
        if frame["subject"].startswith("$NRG.CR."):
            out += [e.data for e in AppendEntry.decode(bytes.fromhex(frame["data"])).entries
                    if e.type == EntryType.SNAPSHOT]
    return out


def test_every_stream_entry_decodes_and_encodes_to_the_same_bytes() -> None:
    kinds = set()
    for data in _entries("S-"):
        op = decode_stream_op(data)
        inner = op.msg if isinstance(op, BatchMsg) else op
        if isinstance(inner, StreamMsg) and inner.compressed:
            # Go's s2.Encode is not reproduced: natserver's block (snappy's, which S2 reads)
            # decodes to the same message, and so does Go's
            assert decode_stream_op(op.encode()) == op
            assert op.encode() != data
        else:
            assert op.encode() == data
        kinds.add((type(op).__name__, data[0]))
    assert kinds >= {("StreamMsg", Op.STREAM_MSG), ("StreamMsg", Op.COMPRESSED_STREAM_MSG),
                     ("BatchMsg", Op.BATCH_MSG), ("BatchMsg", Op.BATCH_COMMIT_MSG),
                     ("JsonOp", Op.PURGE_STREAM), ("JsonOp", Op.DELETE_MSG)}


def test_recorded_stream_messages_carry_what_was_published() -> None:
    msgs = [decode_stream_op(d) for d in _entries("S-")]
    plain = [m for m in msgs if isinstance(m, StreamMsg)]
    with_hdr = [m for m in plain if m.hdr]
    assert any(m.hdr == b"NATS/1.0\r\nX-Test: yes\r\nX-Other: 1\r\n\r\n" and m.msg == b"three" for m in with_hdr)
    assert any(b"Nats-Msg-Id: dedup-1" in m.hdr for m in with_hdr)
    big = [m for m in plain if m.compressed]
    assert big and all(len(m.msg) == 10_000 and m.subject.endswith(b".big") for m in big)
    batch = [m for m in msgs if isinstance(m, BatchMsg)]
    assert [(m.batch_id, m.batch_seq, m.commit) for m in batch] == [
        (b"batch-1", 1, False), (b"batch-1", 2, False), (b"batch-1", 3, True)]
    # the leader proposes each with the last sequence it knew: consecutive
    assert [m.msg.lseq for m in batch] == [6, 7, 8]


def test_the_leaders_proposal_is_what_2_15_1_proposed() -> None:
    """StreamMsg.proposal (encodeStreamMsgAllowCompress): the same bytes for what 2.15.1 sent
    uncompressed, and compressed exactly when 2.15.1 compressed."""
    for data in _entries("S-"):
        op = decode_stream_op(data)
        if not isinstance(op, StreamMsg):
            continue
        made = StreamMsg.proposal(op.subject, op.reply, op.hdr, op.msg, op.lseq, op.ts, op.sourced)
        assert made.compressed == op.compressed
        assert made == op
        if not op.compressed:
            assert made.encode() == data
    small = StreamMsg.proposal(b"a", b"", b"", b"x" * (COMPRESS_THRESHOLD - 1), 0, 1)
    assert not small.compressed


def test_every_consumer_entry_decodes_and_encodes_to_the_same_bytes() -> None:
    kinds = set()
    for data in _entries("C-"):
        op = decode_consumer_op(data)
        assert op.encode() == data
        kinds.add(type(op) if not isinstance(op, PendingRequest) else (PendingRequest, op.add))
    assert kinds >= {Delivered, Acked, Skipped, (PendingRequest, True), (PendingRequest, False)}


def test_consumer_ops_not_recorded_encode_as_consumer_go_writes_them() -> None:
    reset = Reset(42, b"_INBOX.x")
    assert reset.encode() == bytes((18,)) + (42).to_bytes(8, "little") + b"_INBOX.x"
    assert decode_consumer_op(reset.encode()) == reset
    redelivered = Delivered(3, 7, 2, -5)  # a negative time is zig-zag (binary.PutVarint)
    assert redelivered.encode() == bytes((7, 3, 7, 2, 9))
    assert decode_consumer_op(redelivered.encode()) == redelivered


def test_snapshots_sent_and_written_decode_and_encode_to_the_same_bytes() -> None:
    sent = _catchup_snapshots()
    streams = [StreamState.decode(d) for d in sent if d[0] == 42]
    consumers = [ConsumerState.decode(d) for d in sent if d[0] == 22]
    assert streams and consumers
    for data in sent:
        if data[0] == 42:
            assert StreamState.decode(data).encode() == data
        elif data[0] == 22:
            assert ConsumerState.decode(data).encode() == data
    files = load().raw["snapshots"]
    seen = {42: 0, 22: 0}
    for path, hexdata in files.items():
        snap = decode_snapshot_file(bytes.fromhex(hexdata))
        assert path.endswith(f"snap.{snap.term}.{snap.index}")
        if "/S-" in path:
            assert StreamState.decode(snap.data).encode() == snap.data
            seen[42] += 1
        elif "/C-" in path:
            assert ConsumerState.decode(snap.data).encode() == snap.data
            seen[22] += 1
    assert seen[42] >= 3 and seen[22] >= 2


def test_the_recorded_s1_snapshot_says_what_stream_info_said() -> None:
    snap = next(StreamState.decode(d) for d in _catchup_snapshots() if d[0] == 42)
    assert (snap.msgs, snap.total_bytes, snap.first_seq, snap.last_seq, snap.failed, snap.num_deleted) == (5, 213, 10, 14, 0, 0)


def test_deleted_blocks_runs_and_sequence_sets() -> None:
    bits = [0] * 32
    bits[0] = 0b1010  # 1 and 3 above the base
    bits[1] = 1  # 64 above the base
    state = StreamState(10, 1000, 1, 200, 2, 7, (DeleteBlock(5, 4), DeleteBlock(nodes=(SeqSetNode(100, tuple(bits), 1),), size=3)))
    data = state.encode()
    assert data[:2] == bytes((42, 1))
    assert StreamState.decode(data) == state
    assert state.deleted_seqs() == [5, 6, 7, 8, 101, 103, 164]
    sourced = StreamState(1, 2, 3, 4, 0, 0, (), ((b"ORIGIN", 9, b"id"),))
    assert sourced.encode()[1] == 2
    assert StreamState.decode(sourced.encode()) == sourced


def test_json_ops_keep_their_order() -> None:
    purge = JsonOp(Op.PURGE_STREAM, {"stream": "S", "last_seq": 3, "subject": "x", "reply": "y", "request": {"filter": "a.>"}})
    data = purge.encode()
    assert data == b'\x05{"stream":"S","last_seq":3,"subject":"x","reply":"y","request":{"filter":"a.\\u003e"}}\n'
    assert decode_stream_op(data) == purge


@pytest.mark.parametrize("prefix", ["S-", "C-"])
def test_every_truncated_entry_is_a_codec_error(prefix: str) -> None:
    decode = decode_stream_op if prefix == "S-" else decode_consumer_op
    for data in _entries(prefix)[:40]:
        if prefix == "C-" and data[0] in (Op.ADD_PENDING_REQUEST, Op.REMOVE_PENDING_REQUEST, Op.RESET_SEQ):
            continue  # a subject of any length
        for cut in range(0, len(data) - 1, max(1, len(data) // 16)):
            try:
                op = decode(data[:cut])
            except CodecError:
                continue
            # a shorter body that still parses must not claim the whole entry
            assert op.encode() != data


def test_bad_snapshots_are_codec_errors() -> None:
    for data in _catchup_snapshots():
        if data[0] not in (42, 22):
            continue
        with pytest.raises(CodecError):
            (StreamState if data[0] == 42 else ConsumerState).decode(data[:-1] if data[0] == 42 else data[:3])
    with pytest.raises(CodecError):
        decode_snapshot_file(b"\0" * 10)


def test_a_compressed_message_over_s2s_stream_block_size_decodes() -> None:
    """A block of one message over 4 MiB (S2's framed-stream limit, not a block's)."""
    big = StreamMsg.proposal(b"big", b"", b"", bytes(range(256)) * (5 << 12), 7, 1)
    assert big.compressed and len(big.msg) > 4 << 20
    assert decode_stream_op(big.encode()) == big
