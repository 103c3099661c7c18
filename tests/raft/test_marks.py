"""Replays and catch-ups reported in the committed stream (``Node(marks=True)``), as raft.go tells
its upper layer: a restart replays its log's committed entries (after its snapshot) and then
ends the replay (raft.go's nil entry); a follower caught up by the leader gets an EntryCatchup
marker before the catch-up's committed entries and an end once it follows the leader's appends."""

from __future__ import annotations

import random

from natserver.raft import AppendEntry, Entry, EntryType, FileStorage, MemoryStorage, Node, PeerState
from natserver.raft.node import MAX_ELECTION_TIMEOUT, Committed, Mark
from tests.raft.sim import GROUP, Clock, Network
from tests.raft.test_node import A, B, C, sent

LEADER_INBOX = "$NRG.R.leaderB1"


def stream(items: list[Committed]) -> list:
    """Markers by name, entries by (index, data)."""
    return [c.mark.name if c.mark else (c.index, c.entry.data) for c in items]


def follower(storage, clock=None, **kw) -> Node:
    return Node(A, GROUP, [A, B, C], storage, rng=random.Random(1), now=clock or Clock(), **kw)


def feed(node: Node, count: int, commit_lag: int = 2) -> None:
    """Entries 1..count from leader B in term 1, each frame carrying a commit ``commit_lag`` behind."""
    for i in range(1, count + 1):
        ae = AppendEntry(B, 1, max(0, i - 1 - commit_lag), 1 if i > 1 else 0, i - 1, (Entry(0, b"e%d" % i),))
        node.receive(node.append_subject, LEADER_INBOX, ae.encode())


def test_a_restart_replays_its_committed_entries_between_replay_marks(tmp_path):
    node = follower(FileStorage(tmp_path), marks=True)
    assert stream(node.take_committed()) == ["REPLAY_START", "REPLAY_END"]  # an empty log: nothing between
    feed(node, 6)
    assert node.commit == 3
    assert stream(node.take_committed()) == [(i, b"e%d" % i) for i in range(1, 4)]
    again = follower(FileStorage(tmp_path), marks=True)
    # The commit stored with the last entry (3): what was committed is applied again, no further.
    assert again.commit == again.applied == 3 and again.last_index == 6
    assert stream(again.take_committed()) == ["REPLAY_START", (1, b"e1"), (2, b"e2"), (3, b"e3"), "REPLAY_END"]
    # Without marks the same entries, unmarked (what natserver.nrg's host is given).
    assert stream(follower(FileStorage(tmp_path)).take_committed()) == [(i, b"e%d" % i) for i in range(1, 4)]


def test_a_leaders_own_commit_is_replayed_too():
    net = Network(3, seed=3, marks=True)
    net.advance(2 * MAX_ELECTION_TIMEOUT)
    leader = net.leader()
    assert leader is not None
    for i in range(4):
        leader.propose(b"p%d" % i)
        net.collect(leader.id)
        net.advance(0.1)
    committed_before = leader.commit
    net.restart(leader.id)
    replay = net.stream[leader.id]
    net.collect(leader.id)
    assert replay[0].mark is Mark.REPLAY_START and replay[-1].mark is Mark.REPLAY_END
    # Each proposal was stored with the commit of the ones before it: all but the last replayed.
    assert [c.index for c in replay[1:-1]] == list(range(1, committed_before))


def test_a_lagging_follower_is_told_where_its_catchup_starts_and_ends():
    net = Network(3, seed=5, marks=True)
    net.advance(2 * MAX_ELECTION_TIMEOUT)
    leader = net.leader()
    assert leader is not None
    lagging = next(i for i in net.ids if i != leader.id)
    net.down.add(lagging)
    for i in range(100):
        leader.propose(b"m%d" % i)
    net.collect(leader.id)
    net.advance(2)
    net.down.discard(lagging)
    net.restart(lagging)
    net.advance(5)
    node = net.nodes[lagging]
    assert node.commit == leader.commit and not node.catchup_inbox
    got = net.stream[lagging]
    marks = [(n, c.mark) for n, c in enumerate(got) if c.mark]
    assert [m for _, m in marks] == [Mark.REPLAY_START, Mark.REPLAY_END, Mark.CATCHUP_START, Mark.CATCHUP_END]
    (_, _), (end_replay, _), (start, _), (end, _) = marks
    caught_up = [c.index for c in got[start + 1:end]]
    # The catch-up's entries are the ones the leader streamed (more than one batch), in order.
    assert len(caught_up) > 64 and caught_up == list(range(end_replay, end_replay + len(caught_up)))
    assert all(c.mark is None for c in got[end:][1:])  # after the end: the leader's appends, unmarked
    net.check_logs()


def test_a_snapshot_from_the_leader_opens_the_catchup_before_it_when_it_is_the_first():
    node = follower(MemoryStorage(), marks=True)
    node.take_committed()
    node.receive(node.append_subject, LEADER_INBOX, AppendEntry(B, 3, 5, 3, 5, ()).encode())
    [ask] = sent(node)
    peers = PeerState((A, B, C), 3).encode()
    snap = AppendEntry(B, 3, 5, 3, 5, (Entry(EntryType.SNAPSHOT, b"state"), Entry(EntryType.PEER_STATE, peers)))
    node.receive(ask.reply, LEADER_INBOX, snap.encode())
    node.receive(ask.reply, "$NRG.CP.leaderB1", AppendEntry(B, 3, 6, 3, 5, (Entry(0, b"six"),), lterm=3).encode())
    node.receive(node.append_subject, LEADER_INBOX, AppendEntry(B, 3, 6, 3, 6, ()).encode())
    assert stream(node.take_committed()) == ["CATCHUP_START", (5, b"state"), (6, b"six"), "CATCHUP_END"]
    # A later snapshot (one was installed already) goes before the catch-up's start (raft.go).
    node.receive(node.append_subject, LEADER_INBOX, AppendEntry(B, 4, 20, 4, 20, ()).encode())
    [ask] = sent(node)[-1:]
    snap = AppendEntry(B, 4, 20, 4, 20, (Entry(EntryType.SNAPSHOT, b"later"), Entry(EntryType.PEER_STATE, peers)))
    node.receive(ask.reply, LEADER_INBOX, snap.encode())
    node.receive(node.append_subject, LEADER_INBOX, AppendEntry(B, 4, 20, 4, 20, ()).encode())
    assert stream(node.take_committed()) == [(20, b"later"), "CATCHUP_START", "CATCHUP_END"]
