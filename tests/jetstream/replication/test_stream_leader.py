"""The stream leader's side of a publish: the proposals natserver's StreamLeader makes for the
publishes 2.15.1's leaders got are 2.15.1's proposals, byte for byte (the compressed ones: the
same message); a publish is acknowledged only once its entry is applied; a duplicate message
id is answered at once, never proposed."""

from __future__ import annotations

from pathlib import Path

import pytest

from natserver.jetstream.replication.group_codec import StreamMsg, decode_stream_op
from natserver.jetstream.replication.stream_group import StreamApplier, StreamLeader
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig
from natserver.raft.wire import Entry, EntryType
from tests.jetstream.replication.recorded import load, point
from tests.jetstream.replication.test_stream_group import _store


@pytest.mark.parametrize("name", ["S1", "S2", "S3"])
def test_the_leaders_proposals_are_2_15_1s(name: str, tmp_path: Path) -> None:
    """Replaying the group's committed entries in order (the leader applies each once
    committed), each publish the leader got (read back from its entry) is proposed as 2.15.1
    proposed it, and acknowledged with the sequence 2.15.1 gave it once applied."""
    rec = load()
    leader = StreamLeader(name, StreamApplier(_store(name, tmp_path)))
    entries = rec.groups[rec.names[name]].committed(point("killed")["frames"])
    proposed = 0
    batch_acks = []
    for entry in entries:
        op = decode_stream_op(entry.data) if entry.type == EntryType.NORMAL else None
        if isinstance(op, StreamMsg):
            made = leader.propose(op.subject, op.reply, op.hdr, op.msg, op.ts)
            assert made is not None
            assert made == entry.data if not op.compressed else decode_stream_op(made) == op
            assert leader.take_acks() == []  # not before it is applied
            proposed += 1
        leader.applier.apply(entry)
        if isinstance(op, StreamMsg):
            seq = leader.applier.store.last_seq
            assert leader.take_acks() == [(op.reply, b'{"stream":"%s","seq":%d}' % (name.encode(), seq))]
        else:
            batch_acks += leader.take_acks()
    assert proposed >= 6
    if name == "S1":  # the atomic batch: its commit answered with the batch's id and size
        assert [ack for _, ack in batch_acks] == [b'{"stream":"S1","seq":9,"batch":"batch-1","count":3}']


def test_a_duplicate_id_is_answered_at_once_and_not_proposed(tmp_path: Path) -> None:
    rec = load()
    leader = StreamLeader("S1", StreamApplier(_store("S1", tmp_path)))
    for entry in rec.groups[rec.names["S1"]].committed(point("published")["frames"]):
        leader.applier.apply(entry)
    leader.take_acks()
    hdr = b"NATS/1.0\r\nNats-Msg-Id: dedup-1\r\n\r\n"
    assert leader.propose(b"s1.c", b"_INBOX.dup", hdr, b"", leader.applier.store.last_ts + 1) is None
    assert leader.take_acks() == [(b"_INBOX.dup", b'{"stream":"S1","seq":4,"duplicate":true}')]


def test_an_id_in_flight_is_a_duplicate_too_and_the_sequences_go_on() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    leader = StreamLeader("X", applier)
    hdr = b"NATS/1.0\r\nNats-Msg-Id: m\r\n\r\n"
    first = leader.propose(b"a", b"r1", hdr, b"1", 10)
    second = leader.propose(b"a", b"r2", b"", b"2", 11)
    assert first is not None and second is not None
    assert [decode_stream_op(d).lseq for d in (first, second)] == [0, 1]  # proposed ahead of the applies
    assert leader.propose(b"a", b"r3", hdr, b"again", 12) is None
    assert leader.take_acks() == [(b"r3", b'{"stream":"X","seq":1,"duplicate":true}')]
    applier.apply(Entry(EntryType.NORMAL, first))
    applier.apply(Entry(EntryType.NORMAL, second))
    assert leader.take_acks() == [(b"r1", b'{"stream":"X","seq":1}'), (b"r2", b'{"stream":"X","seq":2}')]
    assert leader.inflight_ids == {}


def test_an_atomic_batch_is_proposed_as_2_15_1_proposed_it(tmp_path: Path) -> None:
    rec = load()
    leader = StreamLeader("S1", StreamApplier(_store("S1", tmp_path)))
    recorded: list[bytes] = []
    for entry in rec.groups[rec.names["S1"]].committed(point("atomic")["frames"]):
        if entry.type == EntryType.NORMAL and entry.data[0] in (16, 17):
            recorded.append(entry.data)
        else:
            leader.applier.apply(entry)
    batch = [decode_stream_op(d) for d in recorded]
    assert len(batch) == 3
    made = leader.propose_batch(b"batch-1", [(b.msg.subject, b.msg.reply, b.msg.hdr, b.msg.msg) for b in batch],
                                batch[0].msg.ts)
    assert made == recorded


def test_a_mirrors_proposals_carry_the_origins_sequences_and_skip_its_gaps() -> None:
    """stream.go processInboundMirrorMsg: a mirror's message goes with its origin sequence - 1
    as its last sequence and the origin's time; the origin's gaps before it as empty messages
    (skipMsgs), none into an empty mirror (it takes the first one's position); a sequence
    proposed already is not proposed again; applied, the store has the origin's sequences."""
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "M", "mirror": {"name": "O"}})))
    leader = StreamLeader("M", applier)
    first = leader.propose_mirrored(5, b"o.a", b"", b"five", 1000)
    assert [(op.lseq, op.subject, op.ts, op.sourced) for op in map(decode_stream_op, first)] == \
        [(4, b"o.a", 1000, True)]
    gap = leader.propose_mirrored(8, b"o.b", b"", b"eight", 2000)
    assert [(op.lseq, op.subject, op.ts) for op in map(decode_stream_op, gap)] == \
        [(5, b"", 0), (6, b"", 0), (7, b"o.b", 2000)]
    assert leader.propose_mirrored(8, b"o.b", b"", b"eight", 2000) == []  # (in flight already)
    lost = leader.propose_mirrored(10, b"", b"", b"", 0)  # (the origin no longer has 9 and 10)
    assert [decode_stream_op(d).lseq for d in lost] == [8, 9]
    for data in first + gap + lost:
        applier.apply(Entry(EntryType.NORMAL, data))
    store = applier.store
    assert (store.first_seq, store.last_seq, store.msgs) == (5, 10, 2)
    assert [(sm.subject, sm.data, sm.ts) for sm in (store.load_msg(5), store.load_msg(8))] == \
        [(b"o.a", b"five", 1000), (b"o.b", b"eight", 2000)]
    after = leader.propose_mirrored(11, b"o.c", b"", b"eleven", 3000)
    assert [decode_stream_op(d).lseq for d in after] == [10]
