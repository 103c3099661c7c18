"""The shortcuts of JetStream's hot paths (issue 33) answer as the long ways they skip: the ack
floor found by looking up from the last one (consumer.py, FLOOR_SCAN), next_seq's answer
when the start sequence matches (store.py), and the file store's read-ahead block
(FileStore._read_ahead) after erases, removals and new segments."""

from __future__ import annotations

import random

import pytest

from natserver.jetstream import consumer as consumer_mod
from natserver.jetstream.consumer import Consumer, ConsumerConfig, set_defaults
from natserver.jetstream.store import READ_AHEAD, FileStore, MemoryStore
from natserver.jetstream.stream import StreamConfig, check_stream_config


def _cfg() -> StreamConfig:
    return check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {})


class _Stream:
    def __init__(self) -> None:
        self.name = "S"
        self.cfg = _cfg()
        self.store = MemoryStore(self.cfg)


def _floor(c: Consumer) -> tuple[int, int]:
    """The ack floor as min() over every pending sequence says it."""
    if not c.pending:  # (the stored state's delivered, which a look past the end leaves)
        return c.delivered_cseq, c.state_sseq
    first = min(c.pending)
    return c.pending[first][0] - 1, first - 1


def test_ack_floor_with_gaps_out_of_order_acks_and_a_replaced_pending():
    """A filtered consumer (gaps of more than FLOOR_SCAN between its messages), acks in a
    random order, a redelivery and a purge between: after every ack the floor is min()'s."""
    stream = _Stream()
    rng = random.Random(33)
    for i in range(3000):
        wanted = rng.random() < 0.3 or i % 200 == 0
        stream.store.store_msg(b"s.a" if wanted else b"s.b", b"", b"x", 1)
        if not wanted and i % 500 == 7:  # runs of other subjects past FLOOR_SCAN
            for _ in range(consumer_mod.FLOOR_SCAN + 5):
                stream.store.store_msg(b"s.b", b"", b"x", 1)
    cfg = ConsumerConfig(durable_name="d", ack_policy="explicit", filter_subject="s.a", max_ack_pending=100)
    set_defaults(cfg)
    c = Consumer(stream, "d", cfg, 1)
    acks = 0
    while True:
        got = c.next_msg(2)
        if got is None:
            if not c.pending:
                break
        pending = list(c.pending)
        if got is None or rng.random() < 0.4:
            seq = rng.choice(pending) if rng.random() < 0.7 else min(pending)
            assert c.ack(seq, 0, 3) == [seq]
            assert (c.ack_floor_cseq, c.ack_floor_sseq) == _floor(c)
            acks += 1
        if acks == 200:  # a purge past everything delivered halfway: every pending ack goes
            c.purged(c.delivered_sseq + 1, stream.store.last_seq)
            assert c.pending == {}
            acks += 1
    assert acks > 500 and c.ack_floor_sseq == c.state_sseq


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_next_seq_is_the_first_match_at_or_after_start(kind, tmp_path):
    store = MemoryStore(_cfg()) if kind == "memory" else FileStore(str(tmp_path), _cfg(), segment_size=4096)
    try:
        rng = random.Random(7)
        subjects = [b"s.%d.x" % rng.randrange(8) for _ in range(400)]
        for subj in subjects:
            store.store_msg(subj, b"", b"y" * rng.randrange(40), 1)
        for seq in rng.sample(range(1, 401), 60):
            store.remove_msg(seq)
        live = {seq: subjects[seq - 1] for seq in range(1, 401) if store.load_msg(seq) is not None}
        for filt, match in ((b"s.3.x", lambda s: s == b"s.3.x"), (b"s.*.x", lambda s: True),
                            (b"s.>", lambda s: True), (b"s.5.*", lambda s: s == b"s.5.x"), (b"t.>", lambda s: False)):
            for start in range(1, 402):
                want = next((seq for seq in range(start, 401) if seq in live and match(live[seq])), 0)
                assert store.next_seq(filt, start) == want, (filt, start)
    finally:
        store.stop()


def test_read_ahead_never_serves_what_changed(tmp_path):
    """Messages read through the read-ahead block are those stored; after an erase in place
    the erased one is gone and the others still read right; across segments and after the
    oldest segments went."""
    store = FileStore(str(tmp_path), _cfg(), segment_size=READ_AHEAD // 2)
    try:
        bodies = {}
        for i in range(1, 1201):
            bodies[i] = b"%d-" % i + b"z" * (i % 97)
            assert store.store_msg(b"s.%d" % (i % 5), b"", bodies[i], i) == i
        store.flush()
        for i in range(1, 1201):
            assert store.load_msg(i).data == bodies[i]
        assert store.load_msg(600).data == bodies[600]  # (its block is the one read last)
        assert store.remove_msg(601, erase=True)
        assert store.load_msg(601) is None
        for i in (598, 599, 600, 602, 603):
            assert store.load_msg(i).data == bodies[i]
        for i in range(1, 500):  # the oldest segments go; reads go on from the newer ones
            store.remove_msg(i)
        store.flush()
        for i in range(500, 1201):
            msg = store.load_msg(i)
            assert (msg is None) if i == 601 else (msg.data == bodies[i]), i
        for i in range(1201, 1301):  # more, read back before and after the flush
            bodies[i] = b"%d" % i
            store.store_msg(b"s.x", b"", bodies[i], i)
            assert store.load_msg(i).data == bodies[i]
        store.flush()
        assert [store.load_msg(i).data for i in range(1190, 1301)] == [bodies[i] for i in range(1190, 1301)]
    finally:
        store.stop()
