"""The RAFT node over a hostile network (hypothesis state machines of 3 and 5 nodes): messages
dropped, delayed, reordered, duplicated, partitions, nodes crashing and restarting from what
they persisted, proposals forwarded by followers, leaders handing over, snapshots taken at
random points (the log compacted; restarts start from them, laggards are sent them). Always: at most one leader per term, a committed entry never lost or changed,
every node applies the same committed sequence; once the network heals, a leader is elected
and a new entry commits everywhere."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from natserver.raft import NotLeader, Role, SnapshotError
from natserver.raft.node import MAX_ELECTION_TIMEOUT
from tests.raft.sim import Network, snapshot_of

# Simulated seconds the healed network is given to elect a leader and commit an entry.
HEAL_TIME = 30 * MAX_ELECTION_TIMEOUT
MAX_DELAY = 0.3  # seconds a message may be delivered late


class RaftNetwork(RuleBasedStateMachine):
    size = 3

    @initialize(seed=st.integers(0, 2**32))
    def start(self, seed):
        self.net = Network(self.size, seed=seed, max_delay=MAX_DELAY)
        self.proposed = 0
        self.snapshots = 0

    @rule(seconds=st.floats(0.01, 12))
    def advance(self, seconds):
        self.net.advance(seconds)

    @precondition(lambda self: self.net.in_flight)
    @rule(pick=st.integers(0, 2**16))
    def deliver_out_of_order(self, pick):
        self.net.deliver(self.net.in_flight[pick % len(self.net.in_flight)])

    @precondition(lambda self: self.net.in_flight)
    @rule(pick=st.integers(0, 2**16), count=st.integers(1, 20))
    def drop(self, pick, count):
        for i in range(min(count, len(self.net.in_flight))):
            del self.net.in_flight[(pick + i) % len(self.net.in_flight)]

    @precondition(lambda self: self.net.in_flight)
    @rule(pick=st.integers(0, 2**16))
    def duplicate(self, pick):
        item = self.net.in_flight[pick % len(self.net.in_flight)]
        self.net.seq += 1
        self.net.in_flight.append(type(item)(item.at + 0.5, self.net.seq, item.dest, item.message, item.sender))

    @rule(side=st.sets(st.integers(0, 4), min_size=1))
    def partition(self, side):
        ids = self.net.ids
        one = {ids[i % len(ids)] for i in side}
        self.net.blocked = {frozenset((a, b)) for a in one for b in ids if b not in one}

    @rule()
    def heal(self):
        self.net.blocked = set()

    @precondition(lambda self: len(self.net.down) < self.size // 2)
    @rule(pick=st.integers(0, 4))
    def crash(self, pick):
        self.net.down.add(self.net.ids[pick % self.size])

    @precondition(lambda self: self.net.down)
    @rule(pick=st.integers(0, 4))
    def restart(self, pick):
        down = sorted(self.net.down)
        nid = down[pick % len(down)]
        self.net.down.discard(nid)
        self.net.restart(nid)

    @rule(data=st.binary(min_size=1, max_size=8))
    def propose(self, data):
        for nid, node in self.net.nodes.items():
            if nid not in self.net.down and node.role is Role.LEADER:
                try:
                    node.propose(data)
                except NotLeader:
                    continue
                self.proposed += 1
                self.net.collect(nid)

    @rule(data=st.binary(min_size=1, max_size=8), pick=st.integers(0, 4))
    def forward(self, data, pick):
        nid = self.net.ids[pick % self.size]
        if nid not in self.net.down:
            self.net.nodes[nid].forward(data)
            self.net.collect(nid)

    @rule(pick=st.integers(0, 4))
    def hand_over(self, pick):
        for nid, node in self.net.nodes.items():
            if nid not in self.net.down and node.role is Role.LEADER:
                node.step_down(self.net.ids[pick % self.size])
                self.net.collect(nid)

    @rule(pick=st.integers(0, 4), back=st.integers(0, 3), force=st.booleans())
    def snapshot(self, pick, back, force):
        """A node's upper layer snapshots its state at an index it applied and the node
        compacts its log (raft.go InstallSnapshot); lagging peers are then sent the snapshot."""
        nid = self.net.ids[pick % self.size]
        if nid in self.net.down:
            return
        node = self.net.nodes[nid]
        self.net.collect(nid)  # (a node just restarted has its replay to hand over)
        applied = self.net.applied[nid]
        assert len(applied) == node.applied  # (collect took every committed entry)
        index = node.applied - back
        try:
            node.install_snapshot(snapshot_of(applied[:index]), index, force=force)
        except SnapshotError:
            return
        assert node.base_index == index and (not node.log or node.log[0].index == index + 1)
        self.snapshots += 1

    @invariant()
    def committed_logs_agree(self):
        self.net.check_logs()

    def teardown(self):
        net = self.net
        net.blocked = set()
        for nid in sorted(net.down):
            net.down.discard(nid)
            net.restart(nid)
        net.advance(HEAL_TIME)
        leader = net.leader()
        assert leader is not None, "no leader once the network healed"
        index = leader.propose(b"after healing")
        net.collect(leader.id)
        net.advance(10)
        for node in net.nodes.values():
            assert node.commit >= index, (node.id, node.role, node.commit, index)
        net.check_logs()


class RaftNetwork5(RaftNetwork):
    size = 5


SETTINGS = settings(max_examples=40, stateful_step_count=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
TestRaftNetwork3 = RaftNetwork.TestCase
TestRaftNetwork3.settings = SETTINGS
TestRaftNetwork5 = RaftNetwork5.TestCase
TestRaftNetwork5.settings = SETTINGS
