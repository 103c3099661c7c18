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

from dataclasses import dataclass, field

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


def _consumer_gone(new: dict[str, dict[str, StreamAssignment]], key: tuple[str, str], name: str) -> bool:
    sa = new.get(key[0], {}).get(key[1])
    return sa is None or name not in sa.consumers


def _same_incarnation(a: StreamAssignment | ConsumerAssignment, b: StreamAssignment | ConsumerAssignment) -> bool:
    """applyMetaSnapshot's test for "recreated": a different creation time and group name."""
    if a.created_ns == b.created_ns:
        return True
    return a.group is not None and b.group is not None and a.group.name == b.group.name


@dataclass(slots=True)
class _Staged:
    """jetstream_cluster.go recoveryUpdates: what a replay stages, by account and name, so that
    only its net effect is applied (a stream added and removed within it is never started)."""

    remove_streams: dict[tuple[str, str], StreamAssignment] = field(default_factory=dict)
    add_streams: dict[tuple[str, str], StreamAssignment] = field(default_factory=dict)
    update_streams: dict[tuple[str, str], StreamAssignment] = field(default_factory=dict)
    remove_consumers: dict[tuple[str, str], dict[str, ConsumerAssignment]] = field(default_factory=dict)
    update_consumers: dict[tuple[str, str], dict[str, ConsumerAssignment]] = field(default_factory=dict)

    def remove_stream(self, sa: StreamAssignment) -> None:
        key = (sa.account, sa.name)
        self.remove_streams[key] = sa
        for staged in (self.add_streams, self.update_streams, self.update_consumers, self.remove_consumers):
            staged.pop(key, None)

    def add_stream(self, sa: StreamAssignment) -> None:
        key = (sa.account, sa.name)
        self.add_streams[key] = sa
        self.update_streams.pop(key, None)  # a fresh add supersedes an earlier update

    def update_stream(self, sa: StreamAssignment) -> None:
        self.update_streams[(sa.account, sa.name)] = sa

    def remove_consumer(self, ca: ConsumerAssignment) -> None:
        key = (ca.account, ca.stream)
        self.remove_consumers.setdefault(key, {})[ca.name] = ca
        self.update_consumers.get(key, {}).pop(ca.name, None)

    def add_or_update_consumer(self, ca: ConsumerAssignment) -> None:
        self.update_consumers.setdefault((ca.account, ca.stream), {})[ca.name] = ca


class MetaState:
    """The assignments table of one server (``self_id``, its RAFT node id): accounts ->
    stream name -> StreamAssignment (with its consumers).

    Replaying (``begin_recovery`` .. ``end_recovery``: the server's own log at startup, or a
    catch-up), entries and snapshots are staged as 2.15.1 stages them and nothing changes
    until ``end_recovery`` applies their net effect and returns its events."""

    def __init__(self, self_id: str) -> None:
        self.self_id = self_id
        self.streams: dict[str, dict[str, StreamAssignment]] = {}
        self.applied = 0  # the index of the last entry or snapshot applied
        self._staged: _Staged | None = None

    @property
    def recovering(self) -> bool:
        return self._staged is not None

    def begin_recovery(self) -> None:
        if self._staged is None:
            self._staged = _Staged()

    def end_recovery(self) -> list[Event]:
        """The replay is over (2.15.1: the nil entry after it): removals of consumers, then of
        streams, stream additions, updates, then consumer assignments, each as when applied."""
        staged, self._staged = self._staged, None
        if staged is None:
            return []
        events: list[Event] = []
        for consumers in staged.remove_consumers.values():
            for ca in consumers.values():
                events += self._remove_consumer(ca)
        for sa in staged.remove_streams.values():
            events += self._remove_stream(sa)
        for sa in staged.add_streams.values():
            events += self._assign_stream(sa)
        for sa in staged.update_streams.values():
            events += self._update_stream(sa)
        for consumers in staged.update_consumers.values():
            for ca in consumers.values():
                events += self._assign_consumer(ca)
        return events

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
        if self._staged is not None:
            self._stage(self._staged, op, assignment)
            return []
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

    @staticmethod
    def _stage(staged: _Staged, op: MetaOp, assignment: StreamAssignment | ConsumerAssignment) -> None:
        if isinstance(assignment, StreamAssignment):
            if op == MetaOp.ASSIGN_STREAM:
                staged.add_stream(assignment)
            elif op == MetaOp.UPDATE_STREAM:
                staged.update_stream(assignment)
            elif op == MetaOp.REMOVE_STREAM:
                staged.remove_stream(assignment)
            else:
                raise EntryError(f"op {op.name} with the wrong assignment")
        elif op in (MetaOp.ASSIGN_CONSUMER, MetaOp.ASSIGN_COMPRESSED_CONSUMER):
            staged.add_or_update_consumer(assignment)
        elif op == MetaOp.REMOVE_CONSUMER:
            staged.remove_consumer(assignment)
        else:
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
        if self._staged is not None:
            self._stage_snapshot(self._staged, new, removed, added, kept)
            return []
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

    @staticmethod
    def _stage_snapshot(staged: _Staged, new: dict[str, dict[str, StreamAssignment]], removed: list,
                        added: list, kept: list) -> None:
        """applyMetaSnapshot while recovering: what was staged and the snapshot no longer has is
        dropped (a deleted stream must not come back), then the snapshot's difference staged."""
        def gone(account: str, stream: str) -> bool:
            return stream not in new.get(account, {})

        for key in [k for k in staged.add_streams if gone(*k)]:
            for table in (staged.add_streams, staged.update_streams, staged.update_consumers,
                          staged.remove_consumers):
                table.pop(key, None)
        for key in [k for k in staged.update_streams if gone(*k)]:
            for table in (staged.update_streams, staged.update_consumers, staged.remove_consumers):
                table.pop(key, None)
        for key, pending in list(staged.update_consumers.items()):
            for name in [n for n in pending if _consumer_gone(new, key, n)]:
                del pending[name]
            if not pending:
                del staged.update_consumers[key]
        for sa in removed:
            staged.remove_stream(sa)
        for sa in added:
            # Its consumers are staged one by one: a later removal in the replay must win.
            theirs, sa.consumers = list(sa.consumers.values()), {}
            staged.add_stream(sa)
            for ca in theirs:
                staged.add_or_update_consumer(ca)
        for _, nsa in kept:
            staged.update_stream(nsa)
        for old, nsa in kept:
            for name, oca in old.consumers.items():
                nca = nsa.consumers.get(name)
                if nca is None or not _same_incarnation(nca, oca):
                    staged.remove_consumer(oca)
        for _, nsa in kept:
            for ca in nsa.consumers.values():
                staged.add_or_update_consumer(ca)

    # -- the meta leader's snapshot ------------------------------------------------------------

    def snapshot(self) -> bytes:
        """What the meta leader installs as its snapshot (encodeMetaSnapshot)."""
        return encode_snapshot(self.all_streams())
