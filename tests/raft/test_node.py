"""The sans-IO RAFT node, message by message and over a simulated network (sim.py): elections
as raft.go times them, vote rules, appends, truncation, commit on quorum, catch-up, observers,
membership entries, restarts from what was persisted, and no answer without a durable write."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from natserver.raft import (
    CATCHUP_BATCH,
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    FileStorage,
    MemoryStorage,
    Node,
    NotLeader,
    PeerState,
    Role,
    StorageError,
    VoteRequest,
    VoteResponse,
    node_id,
)
from natserver.raft.node import (
    HEARTBEAT_INTERVAL,
    MAX_CAMPAIGN_TIMEOUT,
    MAX_ELECTION_TIMEOUT,
    MIN_ELECTION_TIMEOUT,
    PEER_REMOVE_TIMEOUT,
)
from natserver.raft.storage import LogEntry
from tests.raft.sim import GROUP, Clock, Network

A, B, C = node_id("a"), node_id("b"), node_id("c")
RECORDING = Path(__file__).parent / "data" / "nrg_traffic_nats_server_2.15.1.json"


def lone(storage=None, peers=(A, B, C), clock=None, **kw) -> Node:
    return Node(A, GROUP, list(peers), storage or MemoryStorage(), rng=random.Random(7), now=clock or Clock(), **kw)


def sent(node: Node) -> list:
    return node.take_outgoing()


def elect(net: Network, seconds: float = 2 * MAX_ELECTION_TIMEOUT) -> Node:
    net.advance(seconds)
    leader = net.leader()
    assert leader is not None
    return leader


def test_a_new_groups_preferred_peer_is_elected_within_the_campaign_timeout():
    net = Network(3, seed=1)
    preferred = net.nodes[net.ids[0]]  # told to campaign (sim.Network: the meta layer's choice)
    net.advance(MAX_CAMPAIGN_TIMEOUT + 0.01)
    assert net.leader() is preferred
    leader = net.leader()
    assert leader is not None and leader.term == 1
    net.advance(0.5)
    assert sorted(n.role.name for n in net.nodes.values()) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    assert all(n.leader == leader.id for n in net.nodes.values())
    # The new leader's first entry is its peer state, committed by the quorum.
    assert leader.log[0].entry.type == EntryType.PEER_STATE
    assert PeerState.decode(leader.log[0].entry.data).known_peers == tuple(net.ids)
    assert leader.commit == 1
    net.advance(HEARTBEAT_INTERVAL)  # followers learn the commit from the next append
    assert all(n.commit == 1 for n in net.nodes.values())


@pytest.mark.parametrize("seed", range(20))
def test_election_timeouts_are_drawn_as_raft_go_draws_them(seed):
    storage = MemoryStorage()
    storage.save_term_vote(1, "")  # not a fresh group: the election timeout, not the campaign's
    clock = Clock()
    node = Node(A, GROUP, [A, B, C], storage, rng=random.Random(seed), now=clock)
    wait = node.next_deadline() - clock.t
    assert MIN_ELECTION_TIMEOUT <= wait < MAX_ELECTION_TIMEOUT
    clock.t += wait - 0.001
    node.tick()
    assert node.role is Role.FOLLOWER and sent(node) == []
    clock.t += 0.001
    node.tick()
    assert node.role is Role.CANDIDATE and node.term == 2 and node.vote == A
    [request] = sent(node)
    assert request.subject == f"$NRG.V.{GROUP}" and request.reply == node.vote_inbox
    assert VoteRequest.decode(request.payload) == VoteRequest(2, 0, 0, A)
    assert storage.state.term == 2 and storage.state.vote == A


def test_heartbeats_every_interval_keep_followers_from_campaigning():
    net = Network(3, seed=2)
    leader = elect(net)
    terms = {n.id: n.term for n in net.nodes.values()}
    net.advance(10 * MAX_ELECTION_TIMEOUT)
    assert net.leader() is leader and {n.id: n.term for n in net.nodes.values()} == terms
    assert leader.next_deadline() - net.clock.t <= HEARTBEAT_INTERVAL


def test_votes_go_to_up_to_date_logs_once_a_term():
    node = lone()
    node.storage.append([LogEntry(1, 1, Entry(0, b"a")), LogEntry(2, 2, Entry(0, b"b"))])
    node = lone(node.storage)
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(3, 1, 5, B).encode())  # older last term
    [answer] = sent(node)
    assert answer.subject == "$NRG.R.cand0001"
    assert VoteResponse.decode(answer.payload) == VoteResponse(3, A, False, False)
    assert node.term == 3 and node.vote == ""
    node.receive(node.vote_subject, "$NRG.R.cand0002", VoteRequest(3, 2, 1, C).encode())  # shorter log
    assert VoteResponse.decode(sent(node)[0].payload).granted is False
    node.receive(node.vote_subject, "$NRG.R.cand0002", VoteRequest(3, 2, 2, C).encode())
    assert VoteResponse.decode(sent(node)[0].payload) == VoteResponse(3, A, True, False)
    assert node.storage.state.vote == C
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(3, 5, 9, B).encode())  # already voted
    assert VoteResponse.decode(sent(node)[0].payload).granted is False
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(2, 5, 9, B).encode())  # an old term
    assert VoteResponse.decode(sent(node)[0].payload) == VoteResponse(3, A, False, False)
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(4, 2, 2, B).encode())  # a new term
    assert VoteResponse.decode(sent(node)[0].payload) == VoteResponse(4, A, True, False)


def test_an_empty_log_says_so_in_its_vote():
    node = lone()
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(1, 0, 0, B).encode())
    assert VoteResponse.decode(sent(node)[0].payload) == VoteResponse(1, A, True, True)


def test_a_higher_term_makes_a_leader_step_down():
    net = Network(3, seed=3)
    leader = elect(net)
    term = leader.term
    leader.receive(leader.append_inbox, "", AppendEntryResponse(term + 1, 0, B, False).encode())
    assert leader.role is Role.FOLLOWER and leader.term == term + 1 and leader.vote == ""
    with pytest.raises(NotLeader):
        leader.propose(b"x")


def test_commit_needs_a_quorum():
    net = Network(3, seed=4)
    leader = elect(net)
    a, b = (i for i in net.ids if i != leader.id)
    net.blocked = {frozenset((leader.id, a))}
    index = leader.propose(b"with one follower")
    net.collect(leader.id)
    net.advance(1)
    assert leader.commit == index and net.nodes[b].commit >= index - 1
    net.blocked = {frozenset((leader.id, a)), frozenset((leader.id, b))}
    alone = leader.propose(b"alone")
    net.collect(leader.id)
    net.advance(5)
    assert leader.commit == alone - 1 and leader.last_index == alone
    # Lost quorum for lostQuorumInterval: the leader steps down, the entry is not committed.
    net.advance(10)
    assert leader.role is not Role.LEADER
    assert alone not in net.committed or net.committed[alone][1] != b"alone"


def test_a_conflicting_uncommitted_entry_is_truncated():
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"one"),)).encode())
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 1, 1, (Entry(0, b"stale"),)).encode())
    assert [e.entry.data for e in node.log] == [b"one", b"stale"]
    ack = sent(node)[-1]
    assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, 2, A, True)
    # C leads term 2 with a different entry 2: ours goes, C's is appended.
    node.receive(node.append_subject, "$NRG.R.leaderC1", AppendEntry(C, 2, 1, 1, 1, (Entry(0, b"two"),)).encode())
    assert [(e.term, e.entry.data) for e in node.log] == [(1, b"one"), (2, b"two")]
    assert node.storage.state.log == node.log
    assert [c.entry.data for c in node.take_committed()] == [b"one"]


def test_an_append_entrys_entries_share_one_index(tmp_path):
    """raft.go storeToWAL: an append entry is one log index (pindex + 1), whatever the number
    of entries it carries (a 2.15.1 leader sends the proposals queued together as one): they
    are acknowledged as that index, committed together in order, and read back from a file log
    as one index; the next append entry's pindex is that index."""
    storage = FileStorage(tmp_path / "g")
    node = lone(storage=storage)
    batch = (Entry(0, b"a"), Entry(0, b"b"), Entry(0, b"c"))
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, batch).encode())
    [ack] = sent(node)
    assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, 1, A, True)
    assert node.last_index == 1 and node.log[0].entries == batch
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 1, 1, 1, (Entry(0, b"d"),)).encode())
    [ack] = sent(node)
    assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, 2, A, True)
    assert [(c.index, c.entry.data) for c in node.take_committed()] == [(1, b"a"), (1, b"b"), (1, b"c")]
    again = FileStorage(tmp_path / "g").load()
    assert [(e.index, e.entries) for e in again.log] == [(1, batch), (2, (Entry(0, b"d"),))]


def test_a_stale_or_duplicated_append_changes_nothing():
    node = lone()
    first = AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"one"),)).encode()
    node.receive(node.append_subject, "$NRG.R.leaderB1", first)
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 1, 1, 1, (Entry(0, b"two"),)).encode())
    node.receive(node.append_subject, "$NRG.R.leaderB1", first)  # delivered again, late
    assert [e.entry.data for e in node.log] == [b"one", b"two"]
    node.receive(node.append_subject, "$NRG.R.leaderC1", AppendEntry(C, 2, 0, 1, 2, ()).encode())
    sent(node)
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 2, 2, 1, (Entry(0, b"x"),)).encode())
    [refusal] = sent(node)  # an older term's leader is told the newer term
    assert AppendEntryResponse.decode(refusal.payload) == AppendEntryResponse(2, 2, A, False)
    assert [e.entry.data for e in node.log] == [b"one", b"two"]


def test_a_follower_that_missed_entries_asks_for_a_catchup():
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 1, 5, ()).encode())
    [request] = sent(node)
    assert request.subject == "$NRG.R.leaderB1" and request.reply.startswith("$NRG.CR.")
    assert AppendEntryResponse.decode(request.payload) == AppendEntryResponse(0, 0, A, False)
    assert request.reply in node.subscriptions
    # The leader's catch-up frames arrive on that inbox, each acknowledged to its $NRG.CP. reply.
    for i in range(1, 6):
        ae = AppendEntry(B, 1, 5, 1 if i > 1 else 0, i - 1, (Entry(0, b"e%d" % i),), lterm=1)
        node.receive(request.reply, "$NRG.CP.leaderB1", ae.encode())
        [ack] = sent(node)
        assert ack.subject == "$NRG.CP.leaderB1"
        assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, i, A, True)
    assert [c.entry.data for c in node.take_committed()] == [b"e%d" % i for i in range(1, 6)]


def test_a_restarted_follower_catches_up_from_its_index_in_batches():
    net = Network(3, seed=5)
    leader = elect(net)
    lagging = next(i for i in net.ids if i != leader.id)
    net.down.add(lagging)
    count = 3 * CATCHUP_BATCH + 5
    for i in range(count):
        leader.propose(b"m%d" % i)
    net.collect(leader.id)
    net.advance(2)
    have = net.nodes[lagging].last_index
    net.down.discard(lagging)
    net.restart(lagging)
    catchups = []
    original = net.collect

    def spy(nid):
        catchups.extend(m for m in net.nodes[nid]._out if m.subject.startswith("$NRG.CR."))
        original(nid)

    net.collect = spy
    net.advance(5)
    node = net.nodes[lagging]
    assert node.last_index == leader.last_index and node.commit == leader.commit
    first = AppendEntry.decode(catchups[0].payload)
    assert first.pindex == have and first.lterm == leader.term
    assert len(catchups) == leader.last_index - have
    net.check_logs()


def test_an_observer_never_campaigns_but_replicates():
    clock = Clock()
    storage = MemoryStorage()
    storage.save_term_vote(1, "")
    node = Node(A, GROUP, [A, B, C], storage, observer=True, rng=random.Random(1), now=clock)
    clock.t += 10 * MAX_ELECTION_TIMEOUT
    node.tick()
    assert node.role is Role.FOLLOWER and sent(node) == []
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"x"),)).encode())
    assert AppendEntryResponse.decode(sent(node)[0].payload).success


def test_peers_are_added_and_removed_by_entries():
    net = Network(3, seed=6)
    leader = elect(net)
    new = node_id("d")
    net.ids.append(new)
    net.storage[new] = MemoryStorage()
    net.start(new)
    leader.add_peer(new)
    with pytest.raises(NotLeader):  # one membership change at a time
        leader.add_peer(node_id("e"))
    net.collect(leader.id)
    net.advance(3)
    assert all(len(n.peers) == 4 for n in net.nodes.values())
    assert net.nodes[new].commit == leader.commit and leader.quorum == 3
    assert net.nodes[new].log[-1].entry == Entry(EntryType.ADD_PEER, new.encode())
    leader.remove_peer(leader.id)
    net.collect(leader.id)
    net.advance(2)
    assert leader.role is Role.FOLLOWER and leader.removed  # removed by a committed entry
    net.advance(3 * MAX_ELECTION_TIMEOUT)
    successor = net.leader()
    assert successor is not None and successor is not leader and leader.id not in successor.peers
    net.check_logs()


def test_an_uncommitted_membership_change_is_undone_by_truncation():
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1",
                 AppendEntry(B, 1, 0, 0, 0, (Entry(EntryType.REMOVE_PEER, C.encode()),)).encode())
    assert node.peers == [A, B]
    node.receive(node.append_subject, "$NRG.R.leaderC1", AppendEntry(C, 2, 0, 0, 0, (Entry(0, b"x"),)).encode())
    assert node.peers == [A, B, C]


def test_a_node_restarts_with_its_persisted_term_vote_and_log(tmp_path):
    net = Network(3, seed=8)
    leader = elect(net)
    for i in range(3):
        leader.propose(b"p%d" % i)
    net.collect(leader.id)
    net.advance(2)
    storage = FileStorage(tmp_path)
    node = Node(A, GROUP, [A, B, C], storage, rng=random.Random(1), now=net.clock)
    for item in leader.log:
        ae = AppendEntry(B, item.term, 0, node.last_term, node.last_index, (item.entry,))
        node.receive(node.append_subject, "$NRG.R.leaderB1", ae.encode())
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(9, 9, 9, C).encode())
    again = Node(A, GROUP, [], FileStorage(tmp_path), rng=random.Random(2), now=net.clock)
    assert (again.term, again.vote) == (9, C)
    assert [(e.index, e.term, e.entry) for e in again.log] == [(e.index, e.term, e.entry) for e in leader.log]
    assert again.peers == net.ids and again.commit == 0  # the peer state entry in the log


class FailingStorage(MemoryStorage):
    def save_term_vote(self, term: int, vote: str) -> None:
        raise StorageError("disk full")


def test_no_vote_is_granted_that_was_not_persisted():
    node = lone(FailingStorage())
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(1, 0, 0, B).encode())
    assert sent(node) == [] and node.write_error is not None
    node.receive(node.vote_subject, "$NRG.R.cand0001", VoteRequest(2, 0, 0, B).encode())
    assert sent(node) == []


def test_no_append_is_acknowledged_that_was_not_persisted():
    class NoAppend(MemoryStorage):
        def append(self, entries, commit=0):
            raise StorageError("disk full")

    node = lone(NoAppend())
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"x"),)).encode())
    assert sent(node) == [] and node.log == []


def test_no_append_is_acknowledged_before_a_deferred_sync():
    class UnsyncedAppends(MemoryStorage):
        def sync(self):
            raise StorageError("disk full")

    node = lone(UnsyncedAppends())
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"x"),)).encode())
    node.sync()  # (what the caller does before publishing what the node sends)
    assert sent(node) == [] and node.write_error is not None


def test_malformed_frames_are_dropped():
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1", b"garbage")
    node.receive(node.vote_subject, "$NRG.R.cand0001", b"\0" * 5)
    assert sent(node) == [] and node.term == 0


def test_a_follower_acknowledges_only_what_matches_the_leader():
    """Entries past the leader's pindex may be another term's: the answer is the matched index."""
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 0, 0, (Entry(0, b"a"),)).encode())
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 0, 1, 1, (Entry(0, b"b"),)).encode())
    sent(node)
    node.receive(node.append_subject, "$NRG.R.leaderC1", AppendEntry(C, 2, 0, 1, 1, ()).encode())
    [ack] = sent(node)
    assert AppendEntryResponse.decode(ack.payload) == AppendEntryResponse(1, 1, A, True)  # entry 1's term
    assert node.commit == 0


def test_a_leader_never_commits_an_earlier_terms_entry_by_counting_replicas():
    """Raft's figure 8 with three nodes: A wrote X at index 1 in term 2 and nobody has it; B led
    term 3 (Y at index 1, nobody has it). A, leader again in term 4, catches C up with X: two of
    three now hold X, but committing it would be wrong (B could still be elected and overwrite
    it), so only A's own term's entry, once a quorum holds it, commits X with it."""
    storage = MemoryStorage()
    storage.save_term_vote(3, "")
    storage.append([LogEntry(1, 2, Entry(0, b"X"))])
    clock = Clock()
    node = Node(A, GROUP, [A, B, C], storage, rng=random.Random(3), now=clock)
    clock.t = node.next_deadline()
    node.tick()
    assert node.role is Role.CANDIDATE and node.term == 4
    sent(node)
    node.receive(node.vote_inbox, "", VoteResponse(4, C, True).encode())
    assert node.role is Role.LEADER
    [append] = sent(node)
    assert AppendEntry.decode(append.payload).entries[0].type == EntryType.PEER_STATE
    # C (empty log) asks to be caught up; A streams X and its peer state entry.
    node.receive(node.append_inbox, "$NRG.CR.catchupC", AppendEntryResponse(0, 0, C, False).encode())
    frames = [AppendEntry.decode(m.payload) for m in sent(node)]
    assert [(f.pindex, f.term, f.lterm) for f in frames] == [(0, 2, 4), (1, 4, 4)]
    node.receive(node.progress_inbox, "", AppendEntryResponse(2, 1, C, True).encode())
    # An acknowledgement naming another term's entry at index 2 is not ours: not counted.
    node.receive(node.append_inbox, "", AppendEntryResponse(3, 2, C, True).encode())
    assert node.commit == 0  # X is on two of three, but of term 2
    node.receive(node.progress_inbox, "", AppendEntryResponse(4, 2, C, True).encode())
    assert node.commit == 2
    assert [c.entry.data for c in node.take_committed()][0] == b"X"


def test_2_15_1s_recorded_catchup_is_followed_byte_for_byte():
    """Replays the recording's catch-up (record_traffic.py: the killed leader n3 restarted with
    its log at term 1 index 6): the leader's heartbeat, then on our catch-up inbox its snapshot
    and peer state and three entries. A node in n3's place asks for the catch-up and
    acknowledges each entry with exactly the bytes n3 sent."""
    frames = json.loads(RECORDING.read_text())["frames"]
    heartbeat = frames[106]
    request, snapshot, *entries = frames[108:113]
    acks = frames[113:116]
    assert request["reply"].startswith("$NRG.CR.") and snapshot["subject"] == request["reply"]
    storage = MemoryStorage()
    storage.save_term_vote(1, "")
    storage.append([LogEntry(i, 1, Entry(0, b"before")) for i in range(1, 7)])
    n3 = node_id("n3")
    node = Node(n3, "S-R3F-uU7E7s3J", [n3, node_id("n1"), node_id("n2")], storage, rng=random.Random(1), now=Clock())
    node.receive(heartbeat["subject"], heartbeat["reply"], bytes.fromhex(heartbeat["data"]))
    [ask] = sent(node)
    assert (ask.subject, ask.payload.hex()) == (heartbeat["reply"], request["data"])
    inbox = ask.reply
    for frame in [snapshot, *entries]:
        node.receive(inbox, frame["reply"], bytes.fromhex(frame["data"]))
    assert [(m.subject, m.payload.hex()) for m in sent(node)] == [(a["subject"], a["data"]) for a in acks]
    assert node.snapshot is not None and (node.snapshot.term, node.snapshot.index) == (2, 7)
    assert node.last_index == 10 and node.commit == 9
    committed = node.take_committed()
    assert [c.entry.type for c in committed] == [EntryType.SNAPSHOT, 0, 0]
    assert b"order 5" in committed[1].entry.data


def test_a_snapshot_survives_a_restart_and_is_sent_on(tmp_path):
    node = Node(A, GROUP, [A, B, C], FileStorage(tmp_path), rng=random.Random(1), now=Clock())
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 3, 5, 3, 5, ()).encode())
    [ask] = sent(node)
    peers = PeerState((A, B, C), 3).encode()
    snapshot = AppendEntry(B, 3, 5, 3, 5, (Entry(EntryType.SNAPSHOT, b"state"), Entry(EntryType.PEER_STATE, peers)))
    node.receive(ask.reply, "$NRG.R.leaderB1", snapshot.encode())
    node.receive(ask.reply, "$NRG.CP.leaderB1", AppendEntry(B, 3, 5, 3, 5, (Entry(0, b"six"),), lterm=3).encode())
    again = Node(A, GROUP, [A, B, C], FileStorage(tmp_path), rng=random.Random(2), now=Clock())
    assert (again.snapshot.index, again.snapshot.term, again.snapshot.data) == (5, 3, b"state")
    assert [(e.index, e.entry.data) for e in again.log] == [(6, b"six")] and again.commit == 5
    # Leader in term 4 (votes of B), it sends C its snapshot first, then entry 6 and its own.
    again.campaign()
    again.now.t = again.next_deadline()  # type: ignore[attr-defined]
    again.tick()
    again.receive(again.vote_inbox, "", VoteResponse(again.term, B, True).encode())
    assert again.role is Role.LEADER
    sent(again)
    again.receive(again.append_inbox, "$NRG.CR.catchupC", AppendEntryResponse(0, 0, C, False).encode())
    frames = [AppendEntry.decode(m.payload) for m in sent(again)]
    assert [e.type for e in frames[0].entries] == [EntryType.SNAPSHOT, EntryType.PEER_STATE]
    assert (frames[0].pterm, frames[0].pindex, frames[0].entries[0].data) == (3, 5, b"state")
    assert [(f.pindex, f.entries[0].data) for f in frames[1:2]] == [(5, b"six")]
    assert frames[2].entries[0].type == EntryType.PEER_STATE and len(frames) == 3


def test_a_leader_hands_over_to_a_preferred_peer():
    net = Network(3, seed=9)
    leader = elect(net)
    net.advance(2 * HEARTBEAT_INTERVAL)  # every follower heard from lately
    preferred = next(n for n in net.nodes.values() if n is not leader)
    term = leader.term
    assert leader.step_down(preferred.id) == preferred.id
    assert leader.role is Role.FOLLOWER
    assert leader.log[-1].entry == Entry(EntryType.LEADER_TRANSFER, preferred.id.encode())
    net.collect(leader.id)
    net.advance(0.1)  # the named peer campaigns at once (raft.go xferCampaign), not after 4-9 s
    assert net.leader() is preferred and preferred.term == term + 1
    with pytest.raises(NotLeader):
        leader.step_down()


def test_a_stepdown_skips_a_peer_not_heard_from():
    net = Network(3, seed=10)
    leader = elect(net)
    gone, other = (n for n in net.nodes.values() if n is not leader)
    net.down.add(gone.id)
    net.advance(4 * HEARTBEAT_INTERVAL)
    assert leader.step_down(gone.id) == other.id
    net.collect(leader.id)
    net.advance(0.1)
    assert net.leader() is other


def test_followers_forward_proposals_and_peer_removals_to_the_leader():
    net = Network(3, seed=11)
    leader = elect(net)
    follower, other = (n for n in net.nodes.values() if n is not leader)
    assert f"$NRG.P.{GROUP}" in leader.subscriptions and f"$NRG.P.{GROUP}" not in follower.subscriptions
    follower.forward(b"forwarded")
    [message] = follower.take_outgoing()
    assert (message.subject, message.payload) == (f"$NRG.P.{GROUP}", b"forwarded")
    follower._out.append(message)
    net.collect(follower.id)
    net.advance(2 * HEARTBEAT_INTERVAL)
    assert all(n.log[-1].entry.data == b"forwarded" and n.commit == n.last_index for n in net.nodes.values())
    follower.forward_remove_peer(other.id)
    net.collect(follower.id)
    net.advance(2 * HEARTBEAT_INTERVAL)
    assert other.id not in leader.peers and other.id not in follower.peers and other.removed
    net.check_logs()


def test_entries_already_in_a_snapshot_are_skipped():
    node = lone()
    node.receive(node.append_subject, "$NRG.R.leaderB1", AppendEntry(B, 1, 3, 1, 3, ()).encode())
    [ask] = sent(node)
    peers = PeerState((A, B, C), 3).encode()
    node.receive(ask.reply, "", AppendEntry(B, 1, 3, 1, 3, (Entry(EntryType.SNAPSHOT, b"s"),
                                                             Entry(EntryType.PEER_STATE, peers))).encode())
    assert (node.base_index, node.commit) == (3, 3)
    # The same leader's first append, late, then its next: what the snapshot holds is skipped.
    for i in range(1, 6):  # (one index each)
        late = AppendEntry(B, 1, 0, 1 if i > 1 else 0, i - 1, (Entry(0, b"e%d" % i),))
        node.receive(node.append_subject, "$NRG.R.leaderB1", late.encode())
    assert node.write_error is None
    assert [(e.index, e.entry.data) for e in node.log] == [(4, b"e4"), (5, b"e5")]
    assert AppendEntryResponse.decode(sent(node)[-1].payload) == AppendEntryResponse(1, 5, A, True)


@pytest.mark.parametrize("seed", range(8))
def test_an_unmanaged_group_bootstrapped_knowing_only_itself_grows_to_every_peer(seed):
    """The meta group as jetstream_cluster.go setupMetaGroup starts it: each server knows only
    itself and expects at least two (raft.go bootstrapRaftNode); votes from unknown peers count
    while the set is smaller than that (shouldCountVoteFromPeer), and the leader adds each peer
    it hears from (trackPeer: an EntryAddPeer, one change at a time) until all three are in."""
    net = Network(3, seed=seed)
    for nid in net.ids:
        net.storage[nid] = MemoryStorage()
        net.nodes[nid] = Node(nid, GROUP, [nid], net.storage[nid], rng=random.Random(seed + ord(nid[0])),
                              now=net.clock, managed=False, cluster_size=2)
        assert net.nodes[nid].quorum == 2  # (alone it can not elect itself)
    net.nodes[net.ids[0]].campaign()
    leader = elect(net)
    net.advance(4 * HEARTBEAT_INTERVAL)
    assert sorted(leader.peers) == sorted(net.ids)
    assert all(sorted(n.peers) == sorted(net.ids) and n.cluster_size == 3 and n.quorum == 2
               for n in net.nodes.values())
    added = [e for e in leader.log if e.entry.type == EntryType.ADD_PEER]
    assert len(added) == 2
    leader.propose(b"after")
    net.advance(2 * HEARTBEAT_INTERVAL)
    assert all(any(c.entry.data == b"after" for c in net.applied[nid]) for nid in net.ids)


def test_a_managed_group_does_not_add_the_peers_it_hears_from():
    """raft.go trackPeer adds peers only to unmanaged groups (the meta group): a stream's
    group keeps the peers the meta layer gave it."""
    clock = Clock()
    node = Node(A, GROUP, [A, B], MemoryStorage(), rng=random.Random(1), now=clock)
    node.campaign()
    clock.t += MAX_CAMPAIGN_TIMEOUT
    node.tick()
    node.receive(node.vote_inbox, "", VoteResponse(node.term, B, True, True).encode())
    assert node.role is Role.LEADER
    node.receive(node.append_inbox, "", AppendEntryResponse(node.term, node.last_index, C, True).encode())
    assert not [e for e in node.log if e.entry.type == EntryType.ADD_PEER] and node.peers == [A, B]


def test_an_unmanaged_group_does_not_take_a_removed_peer_back_before_the_timeout():
    """raft.go removePeer / trackPeer: a peer an EntryRemovePeer took out of an unmanaged group
    (SERVER.REMOVE of the meta group) is not added back when the leader hears from it again,
    until PEER_REMOVE_TIMEOUT has passed."""
    clock = Clock()
    node = Node(A, GROUP, [A], MemoryStorage(), rng=random.Random(3), now=clock, managed=False)
    node.campaign()
    clock.t += MAX_CAMPAIGN_TIMEOUT
    node.tick()
    assert node.role is Role.LEADER
    node.receive(node.append_inbox, "", AppendEntryResponse(node.term, 0, B, True).encode())
    assert node.peers == [A, B]  # (trackPeer: B added)
    node.receive(node.append_inbox, "", AppendEntryResponse(node.term, node.last_index, B, True).encode())
    node.remove_peer(B)
    assert node.peers == [A] and B in node.removed_peers
    node.receive(node.append_inbox, "", AppendEntryResponse(node.term, node.last_index, B, True).encode())
    assert node.peers == [A]  # (heard from again: not taken back)
    clock.t += PEER_REMOVE_TIMEOUT
    node.receive(node.append_inbox, "", AppendEntryResponse(node.term, node.last_index, B, True).encode())
    assert node.peers == [A, B]  # (after the timeout it may rejoin)


def test_propose_many_appends_one_append_entry_at_one_index():
    """raft.go ProposeMulti: a leader's several entries go out as one append entry, one index,
    committed together in order (a group of one commits at once)."""
    clock = Clock()
    node = Node(A, GROUP, [A], MemoryStorage(), rng=random.Random(7), now=clock)
    node.campaign()
    clock.t += MAX_CAMPAIGN_TIMEOUT
    node.tick()
    assert node.role is Role.LEADER
    sent(node)
    node.take_committed()
    index = node.propose_many([b"a", b"b", b"c"])
    assert index == node.last_index and [e.data for e in node.log[-1].entries] == [b"a", b"b", b"c"]
    [append] = [m for m in sent(node) if m.subject == node.append_subject]
    assert [e.data for e in AppendEntry.decode(append.payload).entries] == [b"a", b"b", b"c"]
    assert [(c.index, c.entry.data) for c in node.take_committed()] == [(index, b"a"), (index, b"b"), (index, b"c")]
    with pytest.raises(NotLeader):
        lone().propose_many([b"x"])


def _appends_to(net: Network, leader: Node) -> list[AppendEntry]:
    """The append entries ``leader`` has put in flight (one per follower: the first's copies)."""
    follower = next(nid for nid in net.ids if nid != leader.id)
    return [AppendEntry.decode(f.message.payload) for f in net.in_flight
            if f.sender == leader.id and f.dest == follower and f.message.subject == leader.append_subject]


def test_a_commit_is_heard_by_the_next_append_entry_or_else_by_a_heartbeat():
    """raft.go processAppendEntryResponse sends a heartbeat for a commit only when no proposal
    waits ("committed && n.prop.len() == 0"): with one proposed before take_outgoing, its append
    entry carries the commit alone; with none, an empty one goes."""
    net = Network(3, seed=3)
    leader = elect(net)
    net.advance(0.5)
    assert net.in_flight == []  # (quiet)
    index = leader.propose(b"one")
    net.collect(leader.id)
    for item in sorted(net.in_flight):  # the followers store it and answer
        net.deliver(item)
    answers = sorted(f for f in net.in_flight if f.dest == leader.id)
    assert len(answers) == 2
    first = answers[0]
    net.in_flight.remove(first)
    leader.receive(first.message.subject, first.message.reply, first.message.payload)
    assert leader.commit == index
    leader.propose(b"two")  # (a proposal waiting: raft.go's n.prop)
    net.collect(leader.id)
    appends = _appends_to(net, leader)
    assert [(len(a.entries), a.commit) for a in appends] == [(1, index)]  # no empty heartbeat
    for item in sorted(net.in_flight):
        net.deliver(item)
    net.tick_all()
    before = len(_appends_to(net, leader))
    second = sorted(f for f in net.in_flight if f.dest == leader.id)[0]
    net.in_flight.remove(second)
    leader.receive(second.message.subject, second.message.reply, second.message.payload)
    assert leader.commit == index + 1
    net.collect(leader.id)  # nothing proposed: the heartbeat
    appends = _appends_to(net, leader)
    assert [(len(a.entries), a.commit) for a in appends[before:]] == [(0, index + 1)]
