"""A hypothesis state machine over the sans-IO consumer (consumer.py): deliveries, acks,
naks, terms and time passing (ack_wait redelivery, max_deliver) checked against a simple
model of what is pending, what the ack floor is and what may be delivered next."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from natserver.jetstream.consumer import Consumer, ConsumerConfig, set_defaults
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig

ACK_WAIT = 1_000  # ns, small: time is an integer the machine advances
MAX_DELIVER = 3


class _Stream:
    def __init__(self) -> None:
        self.name = "S"
        self.cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory")
        self.store = MemoryStore(self.cfg)


class ConsumerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stream = _Stream()
        cfg = ConsumerConfig(durable_name="d", ack_policy="explicit", ack_wait=ACK_WAIT, max_deliver=MAX_DELIVER,
                             max_ack_pending=4)
        set_defaults(cfg)
        self.now = 1
        self.consumer = Consumer(self.stream, "d", cfg, self.now)
        # The model: per stream sequence, deliveries so far and the time of the last one.
        self.stored: list[int] = []
        self.pending: dict[int, list] = {}  # seq -> [deliveries, delivered at]
        self.done: set[int] = set()  # acked, termed or out of deliveries
        self.next_new = 1

    @rule(n=st.integers(1, 3))
    def publish(self, n):
        for _ in range(n):
            seq = self.stream.store.store_msg(b"s.x", b"", b"x", self.now)
            self.stored.append(seq)

    @rule()
    def deliver(self):
        got = self.consumer.next_msg(self.now)
        if got is None:
            # Nothing due again, and nothing new or max_ack_pending (4) reached.
            assert not [s for s in self.consumer.rdq if s in self.pending]
            assert self.next_new > len(self.stored) or len(self.pending) >= 4
            return
        msg, count = got
        if msg.seq in self.pending:  # a redelivery: only once its ack_wait passed or after a nak
            entry = self.pending[msg.seq]
            assert count == entry[0] + 1
            entry[0], entry[1] = count, self.now
        else:
            assert msg.seq == self.next_new and count == 1
            self.next_new += 1
            self.pending[msg.seq] = [1, self.now]

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def ack(self, data):
        seq = data.draw(st.sampled_from(sorted(self.pending)))
        assert self.consumer.ack(seq, 0, self.now) == [seq]
        del self.pending[seq]
        self.done.add(seq)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def term(self, data):
        seq = data.draw(st.sampled_from(sorted(self.pending)))
        assert self.consumer.term(seq, self.now)
        del self.pending[seq]
        self.done.add(seq)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def nak(self, data):
        seq = data.draw(st.sampled_from(sorted(self.pending)))
        self.consumer.nak(seq, 0, self.now)
        assert seq in self.consumer.rdq

    @rule(dt=st.integers(1, 2 * ACK_WAIT))
    def tick(self, dt):
        self.now += dt
        exhausted = self.consumer.expire_acks(self.now)
        for seq in exhausted:
            entry = self.pending.pop(seq)
            assert entry[0] >= MAX_DELIVER and entry[1] + ACK_WAIT <= self.now
            self.done.add(seq)
        for seq, (count, at) in self.pending.items():
            if at + ACK_WAIT <= self.now and count < MAX_DELIVER:
                assert seq in self.consumer.rdq  # due again

    @invariant()
    def matches_model(self):
        c = self.consumer
        assert set(c.pending) == set(self.pending)
        assert c.delivered_sseq == self.next_new - 1
        # The ack floor: everything at or below it is done, the next one is not.
        if self.pending:
            assert c.ack_floor_sseq == min(self.pending) - 1
        else:
            assert c.ack_floor_sseq == c.delivered_sseq
        assert all(s in self.done for s in range(1, c.ack_floor_sseq + 1))
        assert len(self.stored) - c.delivered_sseq == c.num_pending()
        assert c.info_json()["num_ack_pending"] == len(self.pending)


ConsumerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestConsumerModel = ConsumerMachine.TestCase
