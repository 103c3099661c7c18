"""The meta group's state machine: the committed meta entries and snapshots applied, in order,
to the table of stream and consumer assignments, as jetstream_cluster.go's applyMetaEntries
and applyMetaSnapshot apply them; what a server must then do comes back as events.

Idempotent as 2.15.1: an update of a stream the table does not have is dropped, an assignment
of a consumer whose stream is gone too; a removal of what is gone changes nothing and comes
back with ``known=False`` (2.15.1 then deletes a stream or consumer it recovered from disk only
if that one was created no later than the removal's assignment: the server's to check); a
consumer removal for another group of the same name (a recreated consumer) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...raft.wire import Entry, EntryType
from .entries import (
    ConsumerAssignment,
    EntryError,
    MetaOp,
    StreamAssignment,
    decode_entry,
    decode_snapshot,
    encode_snapshot,
)

__all__ = ["ConsumerEvent", "MetaState", "StreamEvent"]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """``kind``: "assigned" (new, or recreated), "updated" (config or group changed) or
    "removed". ``member``: this server is in the assignment's group (it runs the stream);
    for "assigned"/"updated" without it, a copy the server still has must go (re-assignment).
    ``known``: the table had the stream (a removal of an unknown one is still reported)."""

    kind: str
    account: str
    assignment: StreamAssignment
    member: bool
    known: bool = True

    @property
    def stream(self) -> str:
        return self.assignment.name


@dataclass(frozen=True, slots=True)
class ConsumerEvent:
    """``kind``: "assigned" (``existed``: an update of one the table had) or "removed"."""

    kind: str
    account: str
    assignment: ConsumerAssignment
    member: bool
    known: bool = True
    existed: bool = False

    @property
    def stream(self) -> str:
        return self.assignment.stream

    @property
    def consumer(self) -> str:
        return self.assignment.name


Event = StreamEvent | ConsumerEvent


def _same_incarnation(a: StreamAssignment | ConsumerAssignment, b: StreamAssignment | ConsumerAssignment) -> bool:
    """applyMetaSnapshot's test for "recreated": a different creation time and group name."""
    if a.created_ns == b.created_ns:
        return True
    return a.group is not None and b.group is not None and a.group.name == b.group.name


class MetaState:
    """The assignments table of one server (``self_id``, its RAFT node id): accounts ->
    stream name -> StreamAssignment (with its consumers)."""

    def __init__(self, self_id: str) -> None:
        self.self_id = self_id
        self.streams: dict[str, dict[str, StreamAssignment]] = {}
        self.applied = 0  # the index of the last entry or snapshot applied

    # -- lookups -------------------------------------------------------------------------------

    def stream(self, account: str, name: str) -> StreamAssignment | None:
        return self.streams.get(account, {}).get(name)

    def consumer(self, account: str, stream: str, name: str) -> ConsumerAssignment | None:
        sa = self.stream(account, stream)
        return None if sa is None else sa.consumers.get(name)

    def all_streams(self) -> list[StreamAssignment]:
        return [sa for streams in self.streams.values() for sa in streams.values()]

    def _member(self, assignment: StreamAssignment | ConsumerAssignment) -> bool:
        return assignment.group is not None and assignment.group.is_member(self.self_id)

    # -- applying ------------------------------------------------------------------------------

    def apply(self, index: int, entry: Entry) -> list[Event]:
        """One committed entry of the meta group (``index`` its log index). Peer entries are
        the RAFT layer's; EntryError for a Normal entry that does not decode (2.15.1 stops its
        meta layer then: the caller must too)."""
        events: list[Event] = []
        if entry.type == EntryType.SNAPSHOT:
            events = self.apply_snapshot(entry.data)
        elif entry.type == EntryType.NORMAL:
            op, assignment = decode_entry(entry.data)
            events = self.apply_op(op, assignment)
        self.applied = max(self.applied, index)
        return events

    def apply_op(self, op: MetaOp, assignment: StreamAssignment | ConsumerAssignment) -> list[Event]:
        if isinstance(assignment, StreamAssignment):
            if op == MetaOp.ASSIGN_STREAM:
                return self._assign_stream(assignment)
            if op == MetaOp.UPDATE_STREAM:
                return self._update_stream(assignment)
            if op == MetaOp.REMOVE_STREAM:
                return self._remove_stream(assignment)
        elif op in (MetaOp.ASSIGN_CONSUMER, MetaOp.ASSIGN_COMPRESSED_CONSUMER):
            return self._assign_consumer(assignment)
        elif op == MetaOp.REMOVE_CONSUMER:
            return self._remove_consumer(assignment)
        raise EntryError(f"op {op.name} with the wrong assignment")

    def _assign_stream(self, sa: StreamAssignment) -> list[Event]:
        """processStreamAssignment: set (a re-assignment keeps the consumers)."""
        account = sa.account
        old = self.streams.get(account, {}).get(sa.name)
        if old is not None and old is not sa:
            sa.consumers = old.consumers
        self.streams.setdefault(account, {})[sa.name] = sa
        return [StreamEvent("assigned", account, sa, self._member(sa))]

    def _update_stream(self, sa: StreamAssignment) -> list[Event]:
        """processUpdateStreamAssignment: only of a stream the table has."""
        account = sa.account
        old = self.streams.get(account, {}).get(sa.name)
        if old is None:
            return []
        sa.consumers = old.consumers
        self.streams[account][sa.name] = sa
        return [StreamEvent("updated", account, sa, self._member(sa))]

    def _remove_stream(self, sa: StreamAssignment) -> list[Event]:
        """processStreamRemoval."""
        account = sa.account
        streams = self.streams.get(account, {})
        known = streams.pop(sa.name, None) is not None
        if not streams:
            self.streams.pop(account, None)
        return [StreamEvent("removed", account, sa, self._member(sa), known)]

    def _assign_consumer(self, ca: ConsumerAssignment) -> list[Event]:
        """processConsumerAssignment: dropped when its stream is not in the table; a consumer
        state it carries is for the member creating it, not kept in the table."""
        account = ca.account
        sa = self.stream(account, ca.stream)
        if sa is None:
            return []
        existed = ca.name in sa.consumers
        sa.consumers[ca.name] = ca
        return [ConsumerEvent("assigned", account, ca, self._member(ca), existed=existed)]

    def _remove_consumer(self, ca: ConsumerAssignment) -> list[Event]:
        """processConsumerRemoval: only when the removal is for the group the table has."""
        account = ca.account
        sa = self.stream(account, ca.stream)
        old = None if sa is None else sa.consumers.get(ca.name)
        known = (old is not None and ca.group is not None and old.group is not None
                 and ca.group.name == old.group.name)
        if known and sa is not None:
            del sa.consumers[ca.name]
        return [ConsumerEvent("removed", account, ca, self._member(ca), known)]

    def apply_snapshot(self, data: bytes) -> list[Event]:
        """applyMetaSnapshot: the table becomes the snapshot's; the events are the difference,
        in 2.15.1's order: streams removed (or recreated: removed, then added), streams added
        with their consumers, the others updated, then their consumers removed (or recreated),
        then all their consumers assigned."""
        new: dict[str, dict[str, StreamAssignment]] = {}
        for sa in decode_snapshot(data):
            new.setdefault(sa.account, {})[sa.name] = sa
        removed, added, kept = [], [], []
        for account, streams in self.streams.items():
            for name, old in streams.items():
                nsa = new.get(account, {}).get(name)
                if nsa is None:
                    removed.append(old)
                elif not _same_incarnation(nsa, old):
                    removed.append(old)
                    added.append(nsa)
                else:
                    kept.append((old, nsa))
        for account, streams in new.items():
            for name, nsa in streams.items():
                if name not in self.streams.get(account, {}):
                    added.append(nsa)
        events: list[Event] = []
        events += [StreamEvent("removed", sa.account, sa, self._member(sa)) for sa in removed]
        for sa in added:
            events.append(StreamEvent("assigned", sa.account, sa, self._member(sa)))
            events += [ConsumerEvent("assigned", ca.account, ca, self._member(ca)) for ca in sa.consumers.values()]
        events += [StreamEvent("updated", nsa.account, nsa, self._member(nsa)) for _, nsa in kept]
        for old, nsa in kept:
            for name, oca in old.consumers.items():
                nca = nsa.consumers.get(name)
                if nca is None or not _same_incarnation(nca, oca):
                    events.append(ConsumerEvent("removed", oca.account, oca, self._member(oca)))
        for old, nsa in kept:
            events += [ConsumerEvent("assigned", ca.account, ca, self._member(ca), existed=ca.name in old.consumers)
                       for ca in nsa.consumers.values()]
        self.streams = new
        return events

    # -- the meta leader's snapshot ------------------------------------------------------------

    def snapshot(self) -> bytes:
        """What the meta leader installs as its snapshot (encodeMetaSnapshot)."""
        return encode_snapshot(self.all_streams())
