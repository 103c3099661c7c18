"""replica.StreamReplica without a cluster: its group and the system account faked, trio's
MockClock for the catch-up's timers. The leader's publish turned into a proposal and acked only
once applied (2.15.1's PubAck bytes, a duplicate in flight's too); purge and delete applied on
every replica, answered by the leader; snapshots after COMPACT_ENTRIES entries; a follower that
installs a snapshot ahead of its store catches up from a leader over $JSC.SYNC (delete ranges,
skips, a window of unacknowledged messages) and applies the entries held meanwhile.
"""

from __future__ import annotations

import fnmatch
import math
import random
from types import SimpleNamespace

import trio
import trio.testing

from natserver import clock
from natserver.jetstream import replica as replica_module
from natserver.jetstream.replica import StreamReplica
from natserver.jetstream.replication.group_codec import JsonOp, Op, StreamMsg, StreamState
from natserver.jetstream.store import FileStore, MemoryStore
from natserver.jetstream.stream import Stream, StreamConfig, check_stream_config
from natserver.raft import Committed, Entry, EntryType, Mark

TEST_TIMEOUT = 60  # virtual seconds (MockClock)
_T = "io.nats.jetstream.api.v1."


class System:
    """The system account: subscriptions by subject (``*`` a token), publishes delivered at
    once, or (``pump``) in order by a task, one a scheduling pass, as routes would."""

    name = "SYS"

    def __init__(self) -> None:
        self.subs: list[tuple[str, object]] = []
        self.published: list[tuple[bytes, bytes | None, bytes]] = []
        self.queue: trio.MemorySendChannel | None = None

    async def pump(self) -> None:
        send, receive = trio.open_memory_channel(math.inf)
        self.queue = send
        async for message in receive:
            self._deliver(*message)
            await trio.sleep(0)

    def subscribe(self, subject: str, callback):
        sub = (subject, callback)
        self.subs.append(sub)
        return sub

    def unsubscribe(self, sub) -> None:
        self.subs.remove(sub)

    def has_interest(self, subject: bytes) -> bool:
        return False  # (advisories: nobody listens)

    def publish(self, subject: bytes, reply, headers, body: bytes) -> None:
        self.published.append((bytes(subject), reply, bytes(body)))
        if self.queue is not None:
            self.queue.send_nowait((subject, reply, headers, body))
        else:
            self._deliver(subject, reply, headers, body)

    def _deliver(self, subject: bytes, reply, headers, body: bytes) -> None:
        for pattern, callback in list(self.subs):
            if fnmatch.fnmatchcase(subject.decode(), pattern.replace("*", "[!.]*")):
                callback(subject, reply, headers, body)


class Node:
    def __init__(self, me: str, peers: list[str]) -> None:
        self.leader = ""
        self.peers = peers
        self.term = 1
        self.last_index = 0
        self.commit = 0
        self.base_index = 0
        self._seen: dict = {}
        self._match: dict = {}
        self.snapshots: list[tuple[bytes, int]] = []
        self.me = me
        self.id = me
        self.created = 0.0

    def now(self) -> float:
        return 0.0

    def has_quorum(self) -> bool:
        return True

    def install_snapshot(self, data: bytes, index: int) -> None:
        self.snapshots.append((data, index))
        self.base_index = index


class Group:
    """natserver.nrg.Group as the replica uses it: proposals kept, committed by the test."""

    def __init__(self, me: str, peers: list[str]) -> None:
        self.node = Node(me, peers)
        self.proposed: list[bytes] = []
        self.folder = "/nonexistent"
        self.on_leader_change = None
        self.is_leader = False

    @property
    def leader(self) -> bool:
        return self.is_leader

    def propose(self, data: bytes) -> None:
        self.proposed.append(data)
        self.node.last_index += 1

    propose_soon = propose  # (the real one waits for the end of the pass: one append entry)

    def step_down(self) -> None:
        self.is_leader = False

    def campaign(self) -> None:
        pass


class Host:
    def __init__(self, me: str, system: System, nursery) -> None:
        self.name = "C"
        self.node_id = me
        self.names = {me: f"server-{me}"}
        self.system = system
        self.rng = random.Random(me)
        self.nursery = nursery
        self.groups: list[Group] = []
        self.resets: list = []  # the replicas that asked to be reset
        self.nrg = SimpleNamespace(create_group=self._create_group, stop_group=lambda name: None)

    def _create_group(self, name, peers, apply, **options) -> Group:
        group = Group(self.node_id, peers)
        self.groups.append(group)
        return group

    def spawn(self, fn, *args) -> None:
        self.nursery.start_soon(fn, *args)

    def flush(self) -> None:
        pass

    def has_group_consumers(self, account: str, stream: str) -> bool:
        return False

    def assigned_consumers(self, account: str, stream: str) -> int:
        return 0

    def check_interest(self, engine, stream) -> None:
        pass

    def serve_direct(self, engine, stream) -> None:
        pass

    def reset_replica(self, replica) -> None:
        self.resets.append(replica)

    def peer_offline(self, peer: str) -> bool:
        return False


class Engine:
    """The engine as a Stream and a replica use it."""

    account_name = "APP"
    domain = ""
    cluster_block = None
    client = SimpleNamespace(has_interest=lambda subject: False)  # (advisories: nobody listens)

    def __init__(self) -> None:
        self.responses: list[tuple[bytes, bytes]] = []
        self.sent: list[tuple[bytes, dict]] = []
        self.api = SimpleNamespace(_send=lambda reply, response, **kw: self.sent.append((reply, response)),
                                   _fail=lambda reply, rtype, exc, **kw: self.sent.append((reply, exc.to_json())))
        self.subscribed: list = []
        self.delivery = SimpleNamespace(stream_changed=lambda stream: None)

    def respond(self, reply: bytes, payload: bytes, stream) -> None:
        self.responses.append((reply, payload))

    def persist(self, stream) -> None:
        pass

    def subscribe(self, subject, callback):
        self.subscribed.append(subject)
        return SimpleNamespace(subject=subject, callback_run=None)  # (as a Subscription: a stream sets its run)

    def unsubscribe(self, sub) -> None:
        self.subscribed.remove(sub.subject)

    def schedule_expiry(self, deadline_ns: int) -> None:
        pass

    def over_limit(self, kind: str) -> bool:
        return False


def make(me: str, system: System, nursery) -> tuple[StreamReplica, Stream, Engine, Group]:
    cfg = check_stream_config(StreamConfig.from_json({"name": "R3", "subjects": ["r3.>"], "num_replicas": 3,
                                                      "storage": "memory"}), {})
    engine = Engine()
    stream = Stream(engine, cfg, MemoryStore(cfg), 0)
    stream.replicated = True
    host = Host(me, system, nursery)
    replica = StreamReplica(host, engine, stream, "S-R3M-test", ["aaaaaaaa", "bbbbbbbb", "cccccccc"], "$JSC.SYNC.t")
    return replica, stream, engine, host.groups[0]


def lead(replica: StreamReplica, group: Group) -> None:
    group.is_leader = True
    group.node.leader = group.node.me
    replica._leader_changed(True)


def commit(replica: StreamReplica, group: Group, entries: list[bytes], start: int) -> int:
    replica._apply([Committed(start + i, 1, Entry(EntryType.NORMAL, data)) for i, data in enumerate(entries)])
    return start + len(entries)


def run(main) -> None:
    async def bounded():
        timebase = clock.install(trio.lowlevel.current_clock())
        try:
            with trio.fail_after(TEST_TIMEOUT):
                async with trio.open_nursery() as nursery:
                    await main(nursery)
                    nursery.cancel_scope.cancel()
        finally:
            clock.uninstall(timebase)
    trio.run(bounded, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_leader_proposes_acks_once_applied_and_answers_duplicates_in_flight():
    async def main(nursery):
        system = System()
        replica, stream, engine, group = make("aaaaaaaa", system, nursery)
        assert engine.subscribed == []  # (a follower: no subscriptions)
        lead(replica, group)
        assert replica.leading and engine.subscribed == ["r3.>"]
        stream.process_msg(b"r3.a", b"_INBOX.1", None, b"one")
        stream.process_msg(b"r3.a", b"_INBOX.2", b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n", b"two")
        stream.process_msg(b"r3.a", b"_INBOX.3", b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n", b"two")  # in flight
        assert len(group.proposed) == 2 and stream.store.msgs == 0
        assert engine.responses == [(b"_INBOX.3", b'{"stream":"R3","seq":2,"duplicate": true}')]
        assert replica.proposed_last() == 2
        stream.process_msg(b"r3.a", b"_INBOX.4", b"NATS/1.0\r\nNats-Expected-Last-Sequence: 2\r\n\r\n", b"three")
        assert len(group.proposed) == 3  # (the expected sequence counts the proposals in flight)
        engine.responses.clear()
        commit(replica, group, group.proposed, 1)
        assert [(seq, sm.data) for seq in (1, 2, 3) if (sm := stream.store.load_msg(seq))] == [
            (1, b"one"), (2, b"two"), (3, b"three")]
        assert engine.responses == [(b"_INBOX.1", b'{"stream":"R3","seq":1}'), (b"_INBOX.2", b'{"stream":"R3","seq":2}'),
                                    (b"_INBOX.4", b'{"stream":"R3","seq":3}')]
        # Purge and delete: proposed, applied, answered by the leader.
        replica.delete_msg(2, False, b"_R_.del")
        replica.purge({"filter": "r3.a", "keep": 1}, b"_R_.purge")
        commit(replica, group, group.proposed[3:], 4)
        assert engine.sent == [(b"_R_.del", {"type": _T + "stream_msg_delete_response", "success": True}),
                               (b"_R_.purge", {"type": _T + "stream_purge_response", "success": True, "purged": 1})]
        assert stream.store.msgs == 1 and stream.store.last_seq == 3
        # Leadership lost: the subscriptions go, nothing is proposed.
        group.is_leader = False
        replica._leader_changed(False)
        assert not replica.leading and engine.subscribed == []
        assert replica.propose(b"r3.a", b"r", b"", b"x", 0) is False

    run(main)


def test_snapshots_after_compact_entries(monkeypatch):
    monkeypatch.setattr(replica_module, "COMPACT_ENTRIES", 4)

    async def main(nursery):
        replica, stream, engine, group = make("bbbbbbbb", System(), nursery)
        entries = [StreamMsg.proposal(b"r3.a", b"", b"", b"m%d" % i, i, 1000 + i).encode() for i in range(10)]
        commit(replica, group, entries, 1)  # (one pass: one snapshot at its end)
        assert [index for _, index in group.node.snapshots] == [10] and replica.snapshots == 1
        commit(replica, group, [StreamMsg.proposal(b"r3.a", b"", b"", b"x", 10, 2000).encode()], 11)
        assert replica.snapshots == 1  # (fewer than COMPACT_ENTRIES since)

    run(main)


def test_a_follower_behind_a_snapshot_catches_up_over_jsc_sync(monkeypatch):
    monkeypatch.setattr(replica_module, "CATCHUP_WINDOW", 3)  # (the window fills and drains)

    async def main(nursery):
        system = System()
        nursery.start_soon(system.pump)
        await trio.sleep(0)
        leader, lstream, _, lgroup = make("aaaaaaaa", system, nursery)
        lead(leader, lgroup)
        for i in range(12):
            lstream.process_msg(b"r3.%d" % (i % 2), None, None, b"m%d" % i)
        index = commit(leader, lgroup, lgroup.proposed, 1)
        for seq in (3, 4, 5, 9):  # (a run: one delete range; a lone one: a skip)
            lstream.store.remove_msg(seq)
        snapshot = leader.applier.snapshot().encode()

        follower, fstream, _, fgroup = make("cccccccc", system, nursery)
        fstream.store.store_msg(b"r3.0", b"", b"m0", 1)
        follower._apply([Committed(index - 1, 1, Entry(EntryType.SNAPSHOT, snapshot))])
        assert follower._catching_up
        later = StreamMsg.proposal(b"r3.z", b"", b"", b"later", 12, 5000).encode()
        follower._apply([Committed(index, 1, Entry(EntryType.NORMAL, later))])  # (held)
        assert fstream.store.last_seq == 1
        while follower._catching_up:
            await trio.sleep(0.01)
        requests = [body for subject, _, body in system.published if subject == b"$JSC.SYNC.t"]
        assert requests == [b'{"peer":"cccccccc","first_seq":2,"last_seq":12,"delete_ranges":true,"min_applied":%d}'
                            % (index - 1)]
        want = [(seq, sm.subject, sm.data) for seq in range(1, 13) if (sm := lstream.store.load_msg(seq))]
        got = [(seq, sm.subject, sm.data) for seq in range(1, 14) if (sm := fstream.store.load_msg(seq))]
        assert got == want + [(13, b"r3.z", b"later")]
        assert fstream.store.deleted() == [3, 4, 5, 9] and follower.catchups == 1 and leader.catchups_served == 1
        answers = [(reply, body) for subject, reply, body in system.published if subject.startswith(b"$JSC.R.")]
        assert answers[-1] == (None, b"")  # (the end)
        assert [b"$JSC.ACK" in (reply or b"") for reply, _ in answers[:-1]] == [True, False, True, True, True, True,
                                                                               True, True, True]  # (the range: none)

    run(main)


def test_an_empty_store_behind_a_proposal_takes_its_position_a_gap_resets_the_replica():
    async def main(nursery):
        replica, stream, _, group = make("bbbbbbbb", System(), nursery)
        stream.store.store_msg(b"r3.a", b"", b"old", 1)
        stream.store.purge()  # (no messages, last sequence 1)
        ahead = StreamMsg.proposal(b"r3.a", b"", b"", b"ahead", 40, 1000).encode()
        commit(replica, group, [ahead], 1)  # (no messages: takes the leader's position)
        assert stream.store.last_seq == 41 and stream.store.load_msg(41).data == b"ahead"
        gap = StreamMsg.proposal(b"r3.a", b"", b"", b"gap", 50, 2000).encode()
        commit(replica, group, [gap], 2)  # (not empty: the replica is reset, resetClusteredState)
        assert stream.store.last_seq == 41 and replica.mismatches == 1 and replica.resetting
        assert replica.host.resets == [replica]
        nxt = StreamMsg.proposal(b"r3.a", b"", b"", b"next", 41, 3000).encode()
        commit(replica, group, [nxt], 3)  # (nothing more applied: its replacement catches up)
        assert stream.store.last_seq == 41 and replica.applied == 2

    run(main)


def test_the_store_is_written_before_a_snapshot_compacts_the_log(tmp_path, monkeypatch):
    """What a kill -9 at the moment the log is compacted leaves: every applied message in the
    store's files (jetstream_cluster.go monitorStream flushes pending writes first)."""
    monkeypatch.setattr(replica_module, "COMPACT_ENTRIES", 4)
    cfg = check_stream_config(StreamConfig.from_json({"name": "R3", "subjects": ["r3.>"], "num_replicas": 3}), {})
    at_compaction: list[list[bytes]] = []

    def on_disk() -> list[bytes]:
        store = FileStore(str(tmp_path), cfg)  # (another reader of the files, as a restart)
        try:
            return [sm.data for seq in range(store.first_seq, store.last_seq + 1) if (sm := store.load_msg(seq))]
        finally:
            store.stop()

    async def main(nursery):
        engine = Engine()
        stream = Stream(engine, cfg, FileStore(str(tmp_path), cfg), 0)
        stream.replicated = True
        host = Host("bbbbbbbb", System(), nursery)
        replica = StreamReplica(host, engine, stream, "S-R3F-test", ["aaaaaaaa", "bbbbbbbb", "cccccccc"], "$JSC.S")
        group = host.groups[0]
        compact = group.node.install_snapshot

        def install_snapshot(data: bytes, index: int) -> None:
            at_compaction.append(on_disk())
            compact(data, index)
        group.node.install_snapshot = install_snapshot
        entries = [StreamMsg.proposal(b"r3.a", b"", b"", b"m%d" % i, i, 1000 + i).encode() for i in range(10)]
        commit(replica, group, entries, 1)
        assert replica.snapshots == 1
        stream.store.stop()

    run(main)
    assert at_compaction == [[b"m%d" % i for i in range(10)]]


def test_purges_replayed_after_a_restart_keep_what_was_stored_after_them():
    """A restart (kill -9: no snapshot) replays the log's committed entries on a store that
    applied them already. A purge is applied as jetstream_cluster.go applyStreamEntries does:
    without a sequence, below the leader's last sequence when it was proposed (so the messages
    stored after it stay); one that keeps messages is not applied while replaying."""
    async def main(nursery):
        replica, stream, _, group = make("bbbbbbbb", System(), nursery)

        def msgs(first: int, n: int, subject: bytes = b"r3.a") -> list[bytes]:
            return [StreamMsg.proposal(subject, b"", b"", b"m%d" % (first + i), first + i - 1, 1000 + first + i).encode()
                    for i in range(n)]

        def purge(last_seq: int, request: dict | None = None) -> bytes:
            body: dict = {"stream": "R3", "last_seq": last_seq}
            if request:
                body["request"] = request
            return JsonOp(Op.PURGE_STREAM, body).encode()

        log = [*msgs(1, 5), purge(5), *msgs(6, 3), *msgs(9, 2, b"r3.b"), purge(10, {"filter": "r3.b"}),
               *msgs(11, 2, b"r3.b"), purge(12, {"filter": "r3.b", "keep": 1}), *msgs(13, 1, b"r3.b")]
        commit(replica, group, log, 1)
        before = [(seq, sm.subject, sm.data) for seq in range(1, 14) if (sm := stream.store.load_msg(seq))]
        assert before == [(6, b"r3.a", b"m6"), (7, b"r3.a", b"m7"), (8, b"r3.a", b"m8"),
                          (12, b"r3.b", b"m12"), (13, b"r3.b", b"m13")]
        # The restart's replay: the same entries between the replay markers.
        replica._apply([Committed.marker(Mark.REPLAY_START)])
        commit(replica, group, log, 1)
        replica._apply([Committed.marker(Mark.REPLAY_END)])
        after = [(seq, sm.subject, sm.data) for seq in range(1, 14) if (sm := stream.store.load_msg(seq))]
        assert after == before
        # Live again: a purge that keeps messages is applied.
        commit(replica, group, [purge(13, {"filter": "r3.b", "keep": 1})], len(log) + 1)
        assert stream.store.load_msg(12) is None and stream.store.load_msg(13) is not None

    run(main)


def test_a_failed_proposal_is_followed_by_a_snapshot():
    """A proposal that fails on apply (here a duplicate the leader did not see in flight) is
    counted in clfs, which only a snapshot keeps: monitorStream snapshots once it grew, so that
    a restart does not replay the entries around it (a replay skips the failed entry, by its
    last sequence, and would store the next message again)."""
    async def main(nursery):
        replica, stream, _, group = make("bbbbbbbb", System(), nursery)
        hdr = b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n"
        first = StreamMsg.proposal(b"r3.a", b"", hdr, b"one", 0, 1000).encode()
        commit(replica, group, [first], 1)
        assert group.node.snapshots == []
        dup = StreamMsg.proposal(b"r3.a", b"", hdr, b"one again", 1, 2000).encode()
        after = StreamMsg.proposal(b"r3.a", b"", b"", b"two", 2, 3000).encode()
        commit(replica, group, [dup, after], 2)
        assert replica.applier.clfs == 1 and stream.store.last_seq == 2
        assert [index for _, index in group.node.snapshots] == [3]
        assert StreamState.decode(group.node.snapshots[0][0]).failed == 1
        commit(replica, group, [StreamMsg.proposal(b"r3.a", b"", b"", b"three", 3, 4000).encode()], 4)
        assert len(group.node.snapshots) == 1  # (no failure since)

    run(main)
