"""A consumer group's follower side, sans-IO: its committed entries applied to the consumer's
replicated state, as jetstream_cluster.go applyConsumerEntries and filestore.go's
consumerFileStore (UpdateDelivered, UpdateAcks, UpdateStarting, Reset) apply them; its
snapshot taken and installed; the state written into natserver's Consumer (consumer.py), as
consumer_store.py loads a durable's saved state.

:class:`ConsumerApplier` keeps what the consumer store keeps (delivered and ack floor, each a
consumer and a stream sequence; the pending messages with their consumer sequence and
delivery time; the redelivery counts, nats-server's ``Redelivered``: deliveries after the
first) and the pull requests a leader announced (``pending_requests``, consumer.go ``prm``).
"""

from __future__ import annotations

from ...raft.wire import Entry, EntryType
from ..consumer import Consumer
from .group_codec import (
    Acked,
    ConsumerState,
    Delivered,
    PendingRequest,
    Reset,
    Skipped,
    decode_consumer_op,
)

__all__ = ["ConsumerApplier"]

ACK_NONE = "none"  # consumer.go AckNone
ACK_ALL = "all"  # consumer.go AckAll
ACK_FLOW_CONTROL = "flow_control"  # 2.14+ AckFlowControl: acks as AckAll


class ConsumerApplier:
    """Applies a consumer group's committed entries (``ack_policy`` and ``max_deliver`` from
    its configuration: they change what the store records)."""

    def __init__(self, ack_policy: str = "explicit", max_deliver: int = -1) -> None:
        self.ack_policy = ack_policy
        self.max_deliver = max_deliver
        self.delivered = [0, 0]  # consumer, stream
        self.ack_floor = [0, 0]
        self.pending: dict[int, list[int]] = {}  # stream seq -> [consumer seq, delivery time ns]
        self.redelivered: dict[int, int] = {}  # stream seq -> deliveries after the first
        self.pending_requests: set[bytes] = set()

    def apply(self, entry: Entry) -> None:
        if entry.type == EntryType.NORMAL:
            self.apply_op(decode_consumer_op(entry.data))
        elif entry.type == EntryType.SNAPSHOT:
            self.install_snapshot(ConsumerState.decode(entry.data))

    def apply_op(self, op: Delivered | Acked | Skipped | PendingRequest | Reset) -> None:
        if isinstance(op, Delivered):
            self.update_delivered(op.dseq, op.sseq, op.dc, op.ts)
        elif isinstance(op, Acked):
            self.update_acks(op.dseq, op.sseq)
        elif isinstance(op, Skipped):
            self.update_starting(op.sseq - 1)
        elif isinstance(op, PendingRequest):
            if op.add:
                self.pending_requests.add(op.reply)
            else:
                self.pending_requests.discard(op.reply)
        else:
            self.reset(op.sseq - 1)

    # -- consumerFileStore --------------------------------------------------------------------

    def update_starting(self, sseq: int) -> None:
        """UpdateStarting (updateSkipOp carries the next sequence: the store starts after it
        less one). The consumer sequence stays (applyConsumerEntries sets o.dseq to 1 only in
        the consumer, not in its store)."""
        if sseq > self.delivered[1]:
            self.delivered[1] = sseq
            if self.ack_policy == ACK_NONE:
                self.ack_floor[1] = sseq

    def reset(self, sseq: int) -> None:
        """Reset: the state emptied, then SetStarting(sseq)."""
        self.delivered, self.ack_floor = [0, sseq], [0, sseq]
        self.pending, self.redelivered = {}, {}

    def update_delivered(self, dseq: int, sseq: int, dc: int, ts: int) -> None:
        if dc != 1 and self.ack_policy == ACK_NONE:
            return  # ErrNoAckPolicy
        if dseq <= self.ack_floor[0]:
            return
        if self.ack_policy != ACK_NONE:
            if sseq <= self.delivered[1]:
                if (p := self.pending.get(sseq)) is not None:
                    p[1] = ts
            else:
                self.pending[sseq] = [dseq, ts]
            self.delivered[0] = max(self.delivered[0], dseq)
            self.delivered[1] = max(self.delivered[1], sseq)
            if dc > 1:
                if self.max_deliver > 0 and dc > self.max_deliver:
                    self.pending.pop(sseq, None)
                if self.redelivered.get(sseq, 0) < dc - 1:
                    self.redelivered[sseq] = dc - 1
        else:
            if dseq > self.delivered[0]:
                self.delivered[0] = self.ack_floor[0] = dseq
            if sseq > self.delivered[1]:
                self.delivered[1] = self.ack_floor[1] = sseq

    def update_acks(self, dseq: int, sseq: int) -> None:
        if self.ack_policy == ACK_NONE:
            return
        self.redelivered.pop(sseq, None)
        if dseq <= self.ack_floor[0] or sseq not in self.pending:
            return
        if self.ack_policy in (ACK_ALL, ACK_FLOW_CONTROL):
            self.ack_floor = [dseq, sseq]
            for seq in [s for s in self.pending if s <= sseq]:
                del self.pending[seq]
                self.redelivered.pop(seq, None)
            return
        p = self.pending.pop(sseq)
        if dseq > p[0] > 0:
            dseq = p[0]  # the original delivery's sequence
        if not self.pending:
            self.ack_floor = list(self.delivered)
        elif dseq == self.ack_floor[0] + 1:
            self.ack_floor = [dseq, sseq]
            if self.delivered[0] > dseq:
                for seq in range(sseq + 1, self.delivered[1] + 1):
                    if (q := self.pending.get(seq)) is not None:
                        if q[0] > 0:
                            self.ack_floor = [q[0] - 1, seq - 1]
                        break

    def needs(self, sseq: int) -> bool:
        """consumer.go needAck from the store's state (a follower's): is message ``sseq`` still
        to be acknowledged (the filter aside)?"""
        if self.ack_policy == ACK_NONE or self.ack_policy in (ACK_ALL, ACK_FLOW_CONTROL):
            return sseq > self.ack_floor[1]
        if sseq <= self.ack_floor[1]:
            return False
        return sseq > self.delivered[1] or sseq in self.pending

    def stream_purged(self, first_seq: int) -> None:
        """What the consumer's leader does, locally and unreplicated, when its stream is purged
        up to ``first_seq`` (consumer.go purge, not wider): nothing below it is delivered or
        pending any more. Followers' states only change by the acks the leader proposes for the
        pending messages purged; a follower that becomes leader applies its own purges."""
        if first_seq - 1 > self.delivered[1]:
            self.delivered[1] = first_seq - 1
        if self.ack_floor[1] < first_seq:
            self.ack_floor[1] = first_seq - 1
            for seq in [s for s in self.pending if s < first_seq]:
                dseq = self.pending.pop(seq)[0]
                self.redelivered.pop(seq, None)
                self.ack_floor[0] = max(self.ack_floor[0], dseq)
                self.delivered[0] = max(self.delivered[0], self.ack_floor[0])
        if not self.pending:
            self.redelivered = {}
            self.ack_floor = list(self.delivered)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, now_s: int) -> ConsumerState:
        """encodeConsumerState's content (``now_s``: the base time, now rounded to a second)."""
        pending = tuple((seq, p[0], p[1]) for seq, p in sorted(self.pending.items()))
        return ConsumerState(tuple(self.ack_floor), tuple(self.delivered), pending,  # type: ignore[arg-type]
                             tuple(sorted(self.redelivered.items())), now_s if pending else 0)

    def install_snapshot(self, state: ConsumerState) -> None:
        """The leader's state replaces this one (the consumer's ForceUpdate)."""
        self.ack_floor = list(state.ack_floor)
        self.delivered = list(state.delivered)
        self.pending = {seq: [dseq, ts] for seq, dseq, ts in state.pending}
        self.redelivered = dict(state.redelivered)

    # -- natserver's consumer -----------------------------------------------------------------

    def seed_from(self, consumer: Consumer) -> None:
        """load_into's reverse: an R1 consumer's state taken into a group being created for it
        (a scale up: the group's first snapshot carries it to the new peers)."""
        self.delivered = [consumer.delivered_cseq, max(consumer.delivered_sseq, consumer.state_sseq)]
        self.ack_floor = [consumer.ack_floor_cseq, consumer.ack_floor_sseq]
        self.pending = {seq: [dseq, ts] for seq, (dseq, ts) in consumer.pending.items()}
        self.redelivered = {seq: n - 1 for seq, n in consumer.rdc.items() if n > 1}

    def load_into(self, consumer: Consumer) -> None:
        """Write the state into natserver's Consumer, as consumer_store.load_all does with a
        durable's saved state (natserver counts deliveries, nats-server deliveries after the
        first: ``rdc`` holds the count)."""
        consumer.delivered_cseq, consumer.delivered_sseq = self.delivered
        consumer.state_sseq = consumer.delivered_sseq
        consumer.ack_floor_cseq, consumer.ack_floor_sseq = self.ack_floor
        # (in delivery time order, as the Consumer keeps them: a +WPI or a delayed nak moves one)
        consumer.pending = {seq: [dseq, ts] for seq, (dseq, ts) in sorted(self.pending.items(), key=lambda p: p[1][1])}
        consumer.rdc = {seq: n + 1 for seq, n in self.redelivered.items()}
