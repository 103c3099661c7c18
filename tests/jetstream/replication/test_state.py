"""MetaState: the recorded 2.15.1 meta entries applied in order give the table the meta
snapshot 2.15.1 sent (and the snapshot applied gives it too); each server's "member" streams
and consumers are those 2.15.1 ran on that server (its JSZ); the idempotent cases of
applyMetaEntries; the snapshot's events as applyMetaSnapshot orders them."""

from __future__ import annotations

import copy

import pytest

from natserver.jetstream.replication.entries import (
    ConsumerAssignment,
    EntryError,
    MetaOp,
    RaftGroup,
    StreamAssignment,
    decode_entry,
    decode_snapshot,
    encode_entry,
    encode_snapshot,
)
from natserver.jetstream.replication.state import ConsumerEvent, MetaState, StreamEvent
from natserver.raft.wire import Entry, EntryType
from tests.jetstream.replication.recording import meta_entries, meta_snapshot, peer_ids, recording

ENTRIES = meta_entries()
IDS = peer_ids()


def table(state: MetaState) -> dict:
    """What a table says: streams with config and group, consumers with config and group."""
    return {(acc, name): (sa.config, sa.group.to_json(), sa.created, {
        cn: (ca.config, ca.group.to_json(), ca.created) for cn, ca in sa.consumers.items()})
        for acc, streams in state.streams.items() for name, sa in streams.items()}


def replayed(self_id: str = "") -> tuple[MetaState, list]:
    state = MetaState(self_id)
    events = []
    for index, entry in ENTRIES:
        events += state.apply(index, entry)
    return state, events


def test_entries_replayed_give_the_snapshot_2_15_1_sent():
    index, data = meta_snapshot()
    state, _ = replayed()
    assert state.applied == ENTRIES[-1][0] and index >= state.applied
    from_snapshot = MetaState("")
    from_snapshot.apply(index, Entry(EntryType.SNAPSHOT, data))
    assert from_snapshot.applied == index
    assert table(from_snapshot) == table(state)
    # The snapshot the table builds is that one again.
    again = MetaState("")
    again.apply_snapshot(state.snapshot())
    assert table(again) == table(state)


@pytest.mark.parametrize("server", ["n1", "n2", "n3"])
def test_member_assets_are_those_2_15_1_ran_on_each_server(server):
    """Applied by a server with that id, the events leave "member" set on exactly the streams
    and consumers 2.15.1's JSZ lists on that server."""
    state, events = replayed(IDS[server])
    running: dict = {}
    for ev in events:
        if isinstance(ev, StreamEvent):
            if ev.kind == "removed" or not ev.member:
                running.pop(ev.stream, None)
            else:
                running.setdefault(ev.stream, set())
        elif isinstance(ev, ConsumerEvent) and ev.stream in running:
            if ev.kind == "removed" or not ev.member:
                running[ev.stream].discard(ev.consumer)
            else:
                running[ev.stream].add(ev.consumer)
    jsz = next(j for j in recording()["jsz"] if j["server"]["name"] == server)
    detail = jsz["data"]["account_details"][0]["stream_detail"]
    assert running == {s["name"]: {c["name"] for c in s.get("consumer_detail", [])} for s in detail}


def test_idempotent_cases():
    state, _ = replayed()
    _, r3b = decode_entry(next(e.data for _, e in ENTRIES if b'"R3B"' in e.data))
    # An update of a stream the table does not have is dropped.
    ghost = copy.deepcopy(r3b)
    ghost.config = dict(ghost.config, name="GHOST")
    assert state.apply_op(MetaOp.UPDATE_STREAM, ghost) == []
    assert state.stream("APP", "GHOST") is None
    # A removal of what is gone: reported, not known; the table unchanged.
    before = table(state)
    [ev] = state.apply_op(MetaOp.REMOVE_STREAM, ghost)
    assert (ev.kind, ev.known) == ("removed", False) and table(state) == before
    # A consumer of a stream that is gone is dropped.
    _, d2 = decode_entry(next(e.data for _, e in ENTRIES if b'"name":"D2"' in e.data))
    orphan = copy.deepcopy(d2)
    orphan.stream = "GHOST"
    assert state.apply_op(MetaOp.ASSIGN_CONSUMER, orphan) == []
    # A consumer removal for another group (a recreated consumer) is ignored.
    other = copy.deepcopy(d2)
    other.group = RaftGroup("C-R3F-zzzzzzzz", other.group.peers, "file")
    [ev] = state.apply_op(MetaOp.REMOVE_CONSUMER, other)
    assert not ev.known and state.consumer("APP", "R3B", "D2") is not None
    # The same assignment twice: the second reports an update of what existed.
    [ev] = state.apply_op(MetaOp.ASSIGN_CONSUMER, d2)
    assert ev.existed and table(state) == before
    # A stream re-assigned keeps its consumers.
    [ev] = state.apply_op(MetaOp.ASSIGN_STREAM, copy.deepcopy(state.stream("APP", "R3B")))
    assert ev.kind == "assigned" and set(state.stream("APP", "R3B").consumers) == set(before[("APP", "R3B")][3])
    # Removed twice: known once.
    sa = state.stream("APP", "BIG2")
    assert [e.known for e in state.apply_op(MetaOp.REMOVE_STREAM, sa)] == [True]
    assert [e.known for e in state.apply_op(MetaOp.REMOVE_STREAM, sa)] == [False]


def test_bad_entries_stop_the_meta_layer():
    state = MetaState("")
    with pytest.raises(EntryError):
        state.apply(1, Entry(EntryType.NORMAL, b""))
    with pytest.raises(EntryError):
        state.apply(1, Entry(EntryType.NORMAL, b"\x11{}"))
    # Peer entries are the RAFT layer's: nothing here.
    assert state.apply(2, Entry(EntryType.PEER_STATE, b"\0" * 10)) == []
    assert state.applied == 2


def test_snapshot_events_are_the_difference_in_2_15_1_order():
    """A server that applied the first half of the log is sent the snapshot: removals first,
    then additions with their consumers, updates, consumer removals, consumer assignments."""
    half = MetaState(IDS["n1"])
    for index, entry in ENTRIES[:12]:
        half.apply(index, entry)
    # A stream the snapshot's state recreated: same name, another group and creation time.
    inc = half.stream("APP", "INC")
    inc.created = "2020-01-01T00:00:00Z"
    inc.group = RaftGroup("S-R3F-oldoldol", inc.group.peers, "file")
    index, data = meta_snapshot()
    events = half.apply(index, Entry(EntryType.SNAPSHOT, data))
    full, _ = replayed()
    assert table(half) == table(full)
    kinds = [(type(e).__name__[0], e.kind, e.stream if isinstance(e, StreamEvent) else f"{e.stream}>{e.consumer}")
             for e in events]
    streams_removed = [k for k in kinds if k[:2] == ("S", "removed")]
    assert sorted(k[2] for k in streams_removed) == ["HDD", "INC", "TAGS2"]
    order = [k[:2] for k in kinds]
    first_update = order.index(("S", "updated"))
    assert all(k == ("S", "removed") for k in order[:len(streams_removed)])
    assert ("S", "assigned") in order[:first_update] and ("S", "assigned") not in order[first_update:]
    added = {k[2] for k in kinds if k[:2] == ("S", "assigned")}
    assert added == {"INC", "LATE", "LATE3"}
    consumers_removed = {k[2] for k in kinds if k[:2] == ("C", "removed")}
    assert consumers_removed == {"R3B>D1"}
    assert all(order.index(("C", "removed")) < i for i, k in enumerate(order) if k == ("C", "assigned")
               and kinds[i][2].startswith("R3B") and i > first_update)


def test_meta_leader_snapshot_round_trips():
    state, _ = replayed()
    data = state.snapshot()
    assert {sa.name for sa in decode_snapshot(data)} == {"R1A", "R3B", "LATE", "INC", "BIG2", "LATE3"}
    assert MetaState("").snapshot() == b""
    assert encode_snapshot(decode_snapshot(data)) == data


def test_compressed_consumer_assignment_applies_without_its_state():
    state, _ = replayed()
    _, d2 = decode_entry(next(e.data for _, e in ENTRIES if b'"name":"D2"' in e.data))
    moved = ConsumerAssignment(d2.client, d2.created, "RESTORED", "R3B", dict(d2.config, durable_name="RESTORED"),
                               d2.group, state={"delivered": {"consumer_seq": 1, "stream_seq": 1}})
    [ev] = state.apply(99, Entry(EntryType.NORMAL, encode_entry(MetaOp.ASSIGN_COMPRESSED_CONSUMER, moved)))
    assert ev.kind == "assigned" and ev.assignment.state == moved.state
    assert state.consumer("APP", "R3B", "RESTORED") is not None
    assert isinstance(state.stream("APP", "R3B"), StreamAssignment)


def test_a_replay_applies_its_net_effect_at_the_end():
    """The recorded log replayed in recovery (a restart, a catch-up): nothing changes until
    end_recovery; then the table is the one applying gives, and a stream or consumer added
    and removed within the replay is never assigned (only its removal is reported, unknown:
    a copy recovered from disk goes)."""
    state = MetaState(IDS["n1"])
    state.begin_recovery()
    for index, entry in ENTRIES:
        assert state.apply(index, entry) == []
    assert state.recovering and state.streams == {} and state.applied == ENTRIES[-1][0]
    events = state.end_recovery()
    full, _ = replayed()
    assert table(state) == table(full) and not state.recovering
    assigned = {e.stream for e in events if isinstance(e, StreamEvent) and e.kind == "assigned"}
    assert assigned == {"R1A", "R3B", "INC", "BIG2", "LATE", "LATE3"}
    removed = {(e.stream, e.known) for e in events if isinstance(e, StreamEvent) and e.kind == "removed"}
    assert removed == {("TAGS2", False), ("HDD", False)}
    consumers_removed = {(e.consumer, e.known) for e in events if isinstance(e, ConsumerEvent) and e.kind == "removed"}
    assert consumers_removed == {("GONE", False), ("D1", False)}
    # Removals come first, consumer assignments last.
    kinds = [e.kind for e in events]
    assert kinds.index("assigned") > max(i for i, k in enumerate(kinds) if k == "removed")
    assert isinstance(events[-1], ConsumerEvent)
    assert state.end_recovery() == []  # (nothing staged any more)


def test_a_snapshot_in_a_replay_drops_what_it_no_longer_has():
    """applyMetaSnapshot while recovering: staged additions of streams the snapshot does not
    have are dropped (a deleted stream must not come back), its own difference is staged."""
    index, data = meta_snapshot()
    state = MetaState("")
    state.begin_recovery()
    for i, entry in ENTRIES[:4]:  # R1A, R3B, TAGS2, HDD staged as additions
        state.apply(i, entry)
    state.apply(index, Entry(EntryType.SNAPSHOT, data))
    assert state.streams == {}
    events = state.end_recovery()
    full, _ = replayed()
    assert table(state) == table(full)
    assert "TAGS2" not in {e.stream for e in events} and "HDD" not in {e.stream for e in events}
    # A consumer the snapshot has is assigned once, with its stream's addition before it.
    order = [(type(e).__name__[0], e.kind, e.stream) for e in events]
    assert order.index(("S", "assigned", "R3B")) < order.index(("C", "assigned", "R3B"))


def test_a_replay_of_a_consumer_removed_after_its_stream_came_from_a_snapshot():
    """Recovery: the snapshot adds R3B with its consumers; a later removal of one of them in
    the replay wins (the snapshot's consumers are staged one by one, not kept on the stream)."""
    index, data = meta_snapshot()
    state = MetaState("")
    state.begin_recovery()
    state.apply(index, Entry(EntryType.SNAPSHOT, data))
    _, d2 = decode_entry(next(e.data for _, e in ENTRIES if b'"name":"D2"' in e.data))
    assert state.apply_op(MetaOp.REMOVE_CONSUMER, d2) == []
    state.end_recovery()
    assert state.consumer("APP", "R3B", "D2") is None and state.consumer("APP", "R3B", "R1C") is not None
