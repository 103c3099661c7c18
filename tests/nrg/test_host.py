"""NrgHost: RAFT groups inside natservers, over the system account and its routes.

Three in-process natservers in one cluster (one trio run, MockClock: the 4-9 s election
timeouts and 1 s heartbeats pass as the clock jumps) each host a node of one test group: a
leader is elected over $NRG.V., proposals from any server commit on all three in the same
order, the leader's server stopped leaves the two others to elect a new leader, and restarted
it resumes from its files and is caught up; a leader cut off by a partition of its routes
steps down and commits nothing, and follows once healed. Then the host's own rules: a failed storage write
stops the group and is logged, a burst of $NRG traffic is taken in bounded batches, stop_group
drops the group's interest.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import natserver
from natserver import clock
from natserver.nrg import MAX_BATCH, NrgHost, run_nrg
from natserver.nrg import host as host_module
from natserver.raft import EntryType, FileStorage, NotLeader, Role, StorageError, node_id
from tests.cluster.helpers import free_port
from tests.conftest import make_options

GROUP = "S-R3F-NrgTest1"
CLUSTER = "nrg"
REAL_TIME_LIMIT = 120.0  # seconds of real time for a whole test (the hard timeout)
STEP = 120.0  # seconds of server time for one step (elections take 4-9 s, retries more)


@pytest.fixture
def autojump_clock():
    # Jumps as soon as every task waits (the servers' routes are loopback sockets of this
    # one process: what one server writes is readable before the run goes idle).
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def server_clock():
    """The servers' clock (natserver.clock: the nodes' timers) follows the MockClock, as
    natserver.testing installs it for its servers. (pytest-trio takes the run's clock from
    a fixture the test itself asks for: every test asks for autojump_clock too.)"""
    timebase = clock.install(trio.lowlevel.current_clock())
    yield timebase
    clock.uninstall(timebase)


@contextmanager
def real_time_limit(seconds: float):
    """A hard timeout in real time (the MockClock only moves when every task waits: a busy
    loop would never reach a virtual deadline)."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(seconds, lambda: token.run_sync_soon(scope.cancel))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise TimeoutError(f"not done within {seconds} s of real time")


class Member:
    """One natserver of the cluster with its NrgHost and its node of the test group."""

    def __init__(self, index: int, folder: Path, cluster_ports: list[int]) -> None:
        self.name = f"nrg-{index}"
        self.id = node_id(self.name)
        self.store = str(folder / self.name)
        self.cluster_port = cluster_ports[index]
        self.routes = [f"nats://127.0.0.1:{p}" for i, p in enumerate(cluster_ports) if i != index]
        self.server: natserver.Server | None = None
        self.host: NrgHost | None = None
        self.applied: list = []
        self.scope: trio.CancelScope | None = None

    async def start(self, nursery, peers: list[str]) -> None:
        self.applied = []
        self.scope = None
        await nursery.start(self._run, peers)

    async def _run(self, peers: list[str], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        options = make_options(server_name=self.name, cluster_name=CLUSTER, cluster_host="127.0.0.1",
                               cluster_port=self.cluster_port, routes=self.routes)
        with trio.CancelScope() as scope:
            self.scope = scope
            async with trio.open_nursery() as nursery:
                self.server = await nursery.start(natserver.serve, options)
                self.host = await nursery.start(run_nrg, self.server, self.store)
                self.host.create_group(GROUP, peers, self.applied.extend)
                task_status.started()

    def stop(self) -> None:
        assert self.scope is not None
        self.scope.cancel()
        self.server = self.host = None

    @property
    def group(self):
        assert self.host is not None
        return self.host.groups[GROUP]

    def normal(self) -> list[bytes]:
        return [c.entry.data for c in self.applied if c.entry.type == EntryType.NORMAL]


async def until(predicate, what: str, members: list[Member] = ()) -> None:  # type: ignore[assignment]
    with trio.move_on_after(STEP):
        while not predicate():
            await trio.sleep(0.05)
        return
    states = [f"{m.name}: {m.host.groups[GROUP]!r} received {m.host.received}" for m in members if m.host]
    raise AssertionError(f"not {what} within {STEP} s of server time {states}")


def leaders(members: list[Member]) -> list[Member]:
    return [m for m in members if m.host is not None and m.group.node.role is Role.LEADER]


def one_leader_known(members: list[Member]) -> bool:
    running = [m for m in members if m.host is not None]
    found = leaders(running)
    return len(found) == 1 and all(m.group.node.leader == found[0].id for m in running if m is not found[0])


async def routes_up(members: list[Member]) -> None:
    running = [m for m in members if m.server is not None]
    await until(lambda: all(len(m.server.cluster.routes) == len(running) - 1 for m in running), "routes formed")


async def test_three_natservers_elect_replicate_fail_over_and_catch_up(nursery, tmp_path, autojump_clock, server_clock):
    ports = [free_port() for _ in range(3)]
    members = [Member(i, tmp_path, ports) for i in range(3)]
    peers = [m.id for m in members]
    with real_time_limit(REAL_TIME_LIMIT):
        for m in members:
            await m.start(nursery, peers)
        await routes_up(members)
        # The group's files, where nats-server keeps them.
        assert all(Path(m.store, "jetstream", "$SYS", "_js_", GROUP).is_dir() for m in members)

        await until(lambda: one_leader_known(members), "one leader known to all", members)
        leader = leaders(members)[0]

        # Proposals from every server (followers forward them on $NRG.P.) commit everywhere,
        # in one order.
        sent = []
        for round_ in range(3):
            for m in members:
                data = b"%s:%d" % (m.name.encode(), round_)
                sent.append(data)
                m.group.propose(data)
                await trio.sleep(0.01)
        await until(lambda: all(sorted(m.normal()) == sorted(sent) for m in members), "all proposals applied", members)
        order = members[0].normal()
        assert all(m.normal() == order for m in members)
        assert all([c.index for c in m.applied] == sorted({c.index for c in m.applied}) for m in members)

        # The leader's server goes: the other two elect a new leader and commit without it.
        gone_index = leader.group.node.last_index
        leader.stop()
        rest = [m for m in members if m is not leader]
        await until(lambda: one_leader_known(rest), "a new leader", members)
        new_leader = leaders(rest)[0]
        assert new_leader is not leader and new_leader.group.node.term > 1
        more = [b"after:%d" % i for i in range(5)]
        for data in more:
            rest[0].group.propose(data)
        await until(lambda: all(m.normal()[-5:] == more for m in rest), "proposals without the old leader")

        # Restarted, it resumes from its files and is caught up.
        await leader.start(nursery, peers)
        assert leader.group.node.last_index >= gone_index  # its log, read back from disk
        assert leader.group.node.log[0].index == 1
        await routes_up(members)
        await until(lambda: leader.normal() == rest[0].normal(), "the restarted server caught up", members)
        assert leader.normal() == order + more
        assert leaders(members) == [new_leader]
        for m in members:
            m.stop()


def cut(a: Member, b: Member, cut: bool = True) -> None:
    """Partition a and b (each refuses the other's routes, as NatsCluster.partition does), or heal."""
    assert a.server is not None and b.server is not None
    for me, other in ((a, b), (b, a)):
        assert me.server is not None and other.server is not None
        peers = me.server.cluster.refused_peers
        if cut:
            peers.add(other.server.server_id)
            me.server.cluster.close_peer(other.server.server_id, "Partitioned")
        else:
            peers.discard(other.server.server_id)


async def test_an_isolated_leader_steps_down_and_follows_once_healed(nursery, tmp_path, autojump_clock, server_clock):
    ports = [free_port() for _ in range(3)]
    members = [Member(i, tmp_path, ports) for i in range(3)]
    peers = [m.id for m in members]
    with real_time_limit(REAL_TIME_LIMIT):
        for m in members:
            await m.start(nursery, peers)
        await routes_up(members)
        await until(lambda: one_leader_known(members), "one leader known to all", members)
        old = leaders(members)[0]
        rest = [m for m in members if m is not old]
        old.group.propose(b"before")
        await until(lambda: all(m.normal() == [b"before"] for m in members), "applied everywhere", members)

        for m in rest:  # the leader's routes are cut: it is a minority of one
            cut(old, m)
        term = old.group.node.term
        await until(lambda: one_leader_known(rest) and leaders(rest)[0].group.node.term > term, "a new majority leader",
                    members)
        # Without a quorum for 10 s (raft.go lostQuorumInterval) the old leader steps down:
        # a minority commits nothing.
        await until(lambda: old.group.node.role is not Role.LEADER, "the isolated leader stepped down", members)
        old.group.propose(b"lost in the minority")  # forwarded to nobody: never committed
        rest[0].group.propose(b"majority")
        await until(lambda: all(m.normal() == [b"before", b"majority"] for m in rest), "committed by the majority",
                    members)
        assert old.normal() == [b"before"]

        for m in rest:
            cut(old, m, False)
        await routes_up(members)
        await until(lambda: one_leader_known(members) and old.normal() == [b"before", b"majority"],
                    "the healed server following", members)
        assert all(m.normal() == [b"before", b"majority"] for m in members)
        for m in members:
            m.stop()


async def test_a_failed_write_stops_the_group_and_is_logged(nursery, tmp_path, autojump_clock, server_clock, caplog,
                                                            monkeypatch):
    server = await nursery.start(natserver.serve, make_options(server_name="solo"))
    with real_time_limit(REAL_TIME_LIMIT):
        host = await nursery.start(run_nrg, server, str(tmp_path))
        applied: list = []
        group = host.create_group("S-R1F-solo", [host.node_id], applied.extend)
        await until(lambda: group.leader, "a leader of one")
        group.propose(b"kept")
        await until(lambda: any(c.entry.data == b"kept" for c in applied), "applied")

        def full_disk(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full_disk)  # the pass's one sync of its appends fails
        caplog.set_level(logging.ERROR, logger="natserver")
        group.propose(b"lost")
        await until(lambda: group.stopped, "stopped")
        assert "S-R1F-solo" not in host.groups
        assert isinstance(group.error, StorageError) and group.node.write_error is group.error
        assert not any(c.entry.data == b"lost" for c in applied)  # committed alone, never synced
        assert not group.subs
        assert not server.accounts.get("$SYS").sublist.match(b"$NRG.AE.S-R1F-solo").psubs
        assert "Critical write error" in caplog.text and "No space left on device" in caplog.text
        assert f"RAFT [{host.node_id} - S-R1F-solo]" in caplog.text


async def test_a_burst_is_taken_in_bounded_batches(nursery, tmp_path, autojump_clock, server_clock):
    server = await nursery.start(natserver.serve, make_options(server_name="burst"))
    with real_time_limit(REAL_TIME_LIMIT):
        host = await nursery.start(run_nrg, server, str(tmp_path))
        other = node_id("another")
        group = host.create_group("S-R3F-burst", [host.node_id, other, node_id("third")], [].extend,
                                  storage=FileStorage(tmp_path / "g"))
        account = server.accounts.get("$SYS")
        ticks: list[int] = []

        count = 3 * MAX_BATCH

        async def watch() -> None:  # another task: it must get turns during the burst
            while host.received < count:
                ticks.append(host.received)
                await trio.lowlevel.checkpoint()

        await trio.testing.wait_all_tasks_blocked()
        passes = host.passes
        for _ in range(count):  # malformed vote requests: each dropped by the node
            account.publish(b"$NRG.V.S-R3F-burst", b"$NRG.R.reply123", None, b"junk")
        nursery.start_soon(watch)
        assert host.received == 0  # only queued by the subscription's callback
        await until(lambda: host.received == count, "the burst handled")
        assert host.passes - passes >= count // MAX_BATCH
        assert any(0 < t < count for t in ticks)  # the other task ran between batches
        assert group.node.role is Role.FOLLOWER


async def test_stop_group_drops_its_interest_and_keeps_its_files(nursery, tmp_path, autojump_clock, server_clock):
    server = await nursery.start(natserver.serve, make_options(server_name="stopper"))
    with real_time_limit(REAL_TIME_LIMIT):
        host = await nursery.start(run_nrg, server, str(tmp_path))
        account = server.accounts.get("$SYS")
        group = host.create_group("S-R1F-stop", [host.node_id], [].extend)
        await until(lambda: group.leader, "a leader of one")
        assert account.sublist.match(b"$NRG.P.S-R1F-stop").psubs  # a leader takes forwarded proposals
        group.propose(b"x")
        host.stop_group("S-R1F-stop")
        assert not account.sublist.match(b"$NRG.V.S-R1F-stop").psubs
        assert group.stopped and not host.groups
        again = host.create_group("S-R1F-stop", [host.node_id], [].extend)
        assert again.node.last_index == group.node.last_index >= 2  # resumed from its files


async def test_an_apply_that_fails_stops_its_group_only(nursery, tmp_path, autojump_clock, server_clock, caplog):
    server = await nursery.start(natserver.serve, make_options(server_name="applier"))
    with real_time_limit(REAL_TIME_LIMIT):
        host = await nursery.start(run_nrg, server, str(tmp_path))
        applied: list = []

        def apply(committed: list) -> None:
            if any(c.entry.data == b"poison" for c in committed):
                raise ValueError("cannot apply poison")

        bad = host.create_group("S-R1F-bad", [host.node_id], apply)
        good = host.create_group("S-R1F-good", [host.node_id], applied.extend)
        await until(lambda: bad.leader and good.leader, "two leaders of one")
        caplog.set_level(logging.ERROR, logger="natserver")
        bad.propose(b"poison")
        good.propose(b"fine")
        await until(lambda: bad.stopped and any(c.entry.data == b"fine" for c in applied), "the bad group stopped")
        assert list(host.groups) == ["S-R1F-good"] and isinstance(bad.error, ValueError)
        assert f"RAFT [{host.node_id} - S-R1F-bad] Apply failed: cannot apply poison" in caplog.text


async def test_a_passs_proposals_go_as_one_append_entry(nursery, tmp_path, autojump_clock, server_clock, monkeypatch):
    # raft.go runAsLeader: the proposals queued meanwhile go as one append entry (one index),
    # split at MAX_APPEND_ENTRIES (made 4 here) or MAX_APPEND_BYTES.
    monkeypatch.setattr(host_module, "MAX_APPEND_ENTRIES", 4)
    ports = [free_port() for _ in range(3)]
    members = [Member(i, tmp_path, ports) for i in range(3)]
    peers = [m.id for m in members]
    with real_time_limit(REAL_TIME_LIMIT):
        for m in members:
            await m.start(nursery, peers)
        await routes_up(members)
        await until(lambda: one_leader_known(members), "one leader known to all", members)
        leader = leaders(members)[0]
        await trio.testing.wait_all_tasks_blocked()
        before = leader.group.node.last_index
        sent = [b"p%d" % i for i in range(6)]
        for data in sent:  # one pass: nothing is proposed until the host's loop runs
            leader.group.propose_soon(data)
        assert leader.group.node.last_index == before
        await until(lambda: all(m.normal()[-6:] == sent for m in members), "the batch applied everywhere", members)
        assert leader.group.node.last_index == before + 2  # 4 entries at one index, then 2 at the next
        indexes = [c.index for c in leader.applied if c.entry.type == EntryType.NORMAL][-6:]
        assert indexes == [before + 1] * 4 + [before + 2] * 2
        follower = next(m for m in members if m is not leader)
        with pytest.raises(NotLeader):
            follower.group.propose_soon(b"not here")
