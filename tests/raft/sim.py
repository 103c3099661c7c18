"""A simulated network of sans-IO RAFT nodes: messages in flight, a clock the test moves,
partitions, and restarts from what each node persisted."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from natserver.raft import Entry, EntryType, MemoryStorage, Node, Role, Timeouts, node_id
from natserver.raft.node import Committed, Message

GROUP = "S-R3F-testgrp0"
DEFAULT_TIMEOUTS = Timeouts()  # raft.go's


def snapshot_of(applied: list[Committed]) -> bytes:
    """The simulated upper layer's state (every entry it applied) as snapshot data."""
    return json.dumps([[c.index, c.term, c.entry.type, c.entry.data.hex()] for c in applied]).encode()


def restore(data: bytes) -> list[Committed]:
    return [Committed(i, t, Entry(k, bytes.fromhex(d))) for i, t, k, d in json.loads(data)]


@dataclass
class Clock:
    t: float = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass(order=True)
class InFlight:
    at: float
    seq: int
    dest: str = field(compare=False)
    message: Message = field(compare=False)
    sender: str = field(compare=False, default="")


class Network:
    def __init__(self, size: int, seed: int = 0, timeouts: Timeouts = DEFAULT_TIMEOUTS, max_delay: float = 0.0,
                 marks: bool = False) -> None:
        self.clock = Clock()
        self.marks = marks  # the nodes report replays and catch-ups (Node(marks=True))
        self.stream: dict[str, list[Committed]] = {}  # this incarnation's committed stream, markers too
        self.max_delay = max_delay  # each message is delivered up to this many seconds late
        self.rng = random.Random(seed)
        self.timeouts = timeouts
        self.ids = [node_id(f"server-{i}") for i in range(size)]
        self.storage = {i: MemoryStorage() for i in self.ids}
        self.nodes: dict[str, Node] = {}
        self.applied: dict[str, list[Committed]] = {}  # this incarnation's committed entries
        for i in self.ids:
            self.start(i)
        self.nodes[self.ids[0]].campaign()  # the meta layer's preferred peer for a new group
        self.in_flight: list[InFlight] = []
        self.seq = 0
        self.blocked: set[frozenset[str]] = set()  # pairs that cannot talk
        self.down: set[str] = set()
        # Every committed entry ever reported, by index: (term, entry); never to change.
        self.committed: dict[int, tuple[int, bytes, int]] = {}
        self.leaders: dict[int, str] = {}  # term -> the one leader seen in it

    def start(self, nid: str) -> None:
        self.nodes[nid] = Node(nid, GROUP, self.ids, self.storage[nid], rng=random.Random(self.rng.random()),
                               now=self.clock, timeouts=self.timeouts, marks=self.marks)
        self.applied[nid] = []
        self.stream[nid] = []

    def restart(self, nid: str) -> None:
        self.start(nid)

    def _targets(self, sender: str, subject: str) -> list[str]:
        return [nid for nid, node in self.nodes.items()
                if nid not in self.down and subject in node.subscriptions
                and frozenset((sender, nid)) not in self.blocked and (nid != sender or subject.startswith("$NRG.R"))]

    def collect(self, nid: str) -> None:
        """Put what ``nid`` sent in flight and record what it committed."""
        node = self.nodes[nid]
        for message in node.take_outgoing():
            for dest in self._targets(nid, message.subject):
                self.seq += 1
                delay = self.rng.random() * self.max_delay
                self.in_flight.append(InFlight(self.clock.t + delay, self.seq, dest, message, nid))
        for done in node.take_committed():
            self.stream[nid].append(done)
            if done.mark is not None:
                continue
            if done.entry.type == EntryType.SNAPSHOT:  # the upper layer restores its state from it
                state = restore(done.entry.data)
                assert len(state) == done.index, (nid, done.index, len(state))
                for item in state:
                    key = (item.term, item.entry.data, item.entry.type)
                    assert self.committed.setdefault(item.index, key) == key, (nid, "snapshot", item.index)
                self.applied[nid] = state
                continue
            self.applied[nid].append(done)
            key = (done.term, done.entry.data, done.entry.type)
            assert self.committed.setdefault(done.index, key) == key, (
                f"{nid} committed {key} at {done.index}, where {self.committed[done.index]} was committed")
        if node.role is Role.LEADER:
            assert self.leaders.setdefault(node.term, nid) == nid, f"two leaders in term {node.term}"

    def deliver(self, item: InFlight) -> None:
        self.in_flight.remove(item)
        if item.dest in self.down or item.dest not in self.nodes:
            return
        if frozenset((item.dest, item.sender)) in self.blocked:
            return
        node = self.nodes[item.dest]
        if item.message.subject in node.subscriptions:
            node.receive(item.message.subject, item.message.reply, item.message.payload)
        self.collect(item.dest)

    def tick_all(self) -> None:
        for nid, node in self.nodes.items():
            if nid in self.down:
                continue
            if node.next_deadline() <= self.clock.t:
                node.tick()
            self.collect(nid)

    def advance(self, seconds: float) -> None:
        """Move time ``seconds`` ahead, delivering what falls due on the way, in order."""
        end = self.clock.t + seconds
        while True:
            due = [f.at for f in self.in_flight]
            due += [n.next_deadline() for nid, n in self.nodes.items() if nid not in self.down]
            nxt = min([d for d in due if d <= end], default=None)
            if nxt is None:
                break
            self.clock.t = max(self.clock.t, nxt)
            ready = sorted(f for f in self.in_flight if f.at <= self.clock.t)
            for item in ready:
                if item in self.in_flight:
                    self.deliver(item)
            self.tick_all()
        self.clock.t = end

    def leader(self) -> Node | None:
        leaders = [n for nid, n in self.nodes.items() if nid not in self.down and n.role is Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: n.term)

    def check_logs(self) -> None:
        """Every node's log up to its commit is the committed sequence."""
        for nid, node in self.nodes.items():
            for item in node.log[:node.commit - node.base_index]:
                assert self.committed.get(item.index) == (item.term, item.entry.data, item.entry.type), nid
            got = [(c.index, c.term, c.entry.data) for c in self.applied[nid]]
            assert got == [(i, self.committed[i][0], self.committed[i][1]) for i in range(1, len(got) + 1)], nid
