"""A natserver RAFT node in a live nats-server 2.15.1 cluster's stream group.

A 3-node 2.15.1 JetStream cluster has an R3 stream; one follower is killed and the natserver
node (natserver.raft.Node, driven over a raw NATS connection in the system account) takes its
place under its node id (the hash of its server name), with an empty log. It must be caught
up by the 2.15.1 leader ($NRG.CR. catch-up, acknowledged on $NRG.CP.), then carry the quorum:
with the other 2.15.1 follower killed too, the stream's publishes are acknowledged only if the
leader counts the natserver node's append responses. Then the other follower is restarted
(and caught up by the leader) and the leader killed: the 2.15.1 server and the natserver node
must elect a leader between them over $NRG.V. and commit that leader's first entry (its
peer state) with the other's append response: once with the natserver node campaigning first
(the 2.15.1 server votes for it and follows it), once with it an observer (it votes for the
2.15.1 server and follows it).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import trio

from natserver import clock
from natserver.raft import EntryType, MemoryStorage, Node, node_id
from tests.raft.nrg_cluster import (
    SYS_USER,
    Client,
    Cluster,
    app_request,
    tempdir,
    wait_meta_leader,
    wait_stream_leader,
)
from tests.reference import NATS_SERVER, needs_nats_server

STREAM = "LIVE"
TEST_TIMEOUT = 120  # seconds for the whole test (2.15.1 elections take 4-9 s)
STEP = 30  # seconds for one step


class Driver:
    """Runs a sans-IO node over a raw NATS connection: received messages in, due timers
    ticked, its subscriptions kept in step (before what it sends), its messages published."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.client: Client | None = None
        self.sids: dict[str, int] = {}
        self.committed: list = []
        self.received: dict[str, int] = {}  # frames received, by subject kind

    async def attach(self, port: int) -> None:
        self.client = await Client.open(port, SYS_USER)
        self.sids = {}
        await self._sync()

    async def _sync(self) -> None:
        assert self.client is not None
        wanted = set(self.node.subscriptions)
        for subject in [s for s in self.sids if s not in wanted]:
            await self.client.send(f"UNSUB {self.sids.pop(subject)}\r\n".encode())
        for subject in sorted(wanted - set(self.sids)):
            self.sids[subject] = await self.client.sub(subject)
        for message in self.node.take_outgoing():
            await self.client.pub(message.subject, message.payload, message.reply)
        self.committed += self.node.take_committed()

    async def run(self) -> None:
        while True:
            client = self.client
            assert client is not None
            wait = max(0.0, self.node.next_deadline() - clock.monotonic())
            with trio.move_on_after(wait):
                try:
                    subject, reply, payload = await client.next_msg()
                except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                    await trio.sleep(0.05)  # detached: a new connection comes with attach()
                    continue
                kind = subject.split(".")[1]
                self.received[kind] = self.received.get(kind, 0) + 1
                self.node.receive(subject, reply, payload)
            self.node.tick()
            await self._sync()


async def publish(port: int, subject: str, payload: bytes) -> dict:
    return await app_request(port, subject, payload)


async def wait_current(port: int, name: str) -> None:
    """Until the stream's leader reports replica ``name`` current."""
    with trio.fail_after(STEP):
        while True:
            with trio.move_on_after(2):
                info = await app_request(port, f"$JS.API.STREAM.INFO.{STREAM}")
                replicas = info.get("cluster", {}).get("replicas", [])
                if any(r.get("name") == name and r.get("current") for r in replicas):
                    return
            await trio.sleep(0.2)


async def learn_group(port: int) -> str:
    """The stream group's name, from its leader's heartbeats on $NRG.AE.S-<...>."""
    client = await Client.open(port, SYS_USER)
    await client.sub("$NRG.AE.*")
    while not (subject := (await client.next_msg())[0]).startswith("$NRG.AE.S-"):
        pass
    await client.stream.aclose()
    return subject.split(".", 2)[2]


async def until(predicate, what: str, driver: Driver | None = None) -> None:
    with trio.move_on_after(STEP):
        while not predicate():
            await trio.sleep(0.05)
        return
    node = driver.node if driver else None
    state = (f"{node.role.name} term {node.term} leader {node.leader} log {node.last_index}/{node.last_term} "
             f"commit {node.commit} catchup {node.catchup_inbox!r} received {driver.received}") if node and driver else ""
    raise AssertionError(f"not {what} in {STEP} s: {state}")


async def scenario(binary: str, folder: Path, natserver_leads: bool) -> dict:
    cluster = Cluster.create(binary, folder)
    cluster.start_all()
    report: dict = {}
    try:
        await trio.sleep(0.5)
        await wait_meta_leader(cluster.nodes)
        first = cluster.nodes[0].port
        config = {"name": STREAM, "subjects": ["live.>"], "num_replicas": 3, "storage": "file"}
        created = await app_request(first, f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(config).encode())
        assert "error" not in created, created
        leader_name = await wait_stream_leader(cluster.nodes, STREAM)
        leader = cluster.by_name(leader_name)
        follower, other = [n for n in cluster.nodes if n is not leader]
        for i in range(3):
            assert (await publish(leader.port, f"live.{i}", b"before %d" % i))["seq"] == i + 1
        with trio.fail_after(STEP):
            group = await learn_group(leader.port)
        report["group"] = group

        # The natserver node replaces the follower, under its id, with an empty log.
        cluster.kill(follower)
        ids = [node_id(n.name) for n in cluster.nodes]
        node = Node(node_id(follower.name), group, ids, MemoryStorage(), rng=random.Random(5))
        driver = Driver(node)
        await driver.attach(leader.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver.run)
            await until(lambda: b"before 2" in b"".join(e.entry.data for e in node.log), "caught up", driver)
            report["caught_up_to"] = node.last_index
            report["snapshot_installed"] = node.snapshot is not None
            assert node.leader == node_id(leader.name)
            assert driver.received.get("CR", 0) > 0  # the leader's catch-up frames

            # The other 2.15.1 follower goes: the leader has a quorum only with the natserver node.
            cluster.kill(other)
            for i in range(3, 6):
                ack = await publish(leader.port, f"live.{i}", b"quorum %d" % i)
                assert ack.get("seq") == i + 1, ack
            await until(lambda: b"quorum 5" in b"".join(e.entry.data for e in driver.committed), "committed", driver)
            report["acked_with_natserver_quorum"] = 3

            # The other follower comes back and is caught up; then the leader goes: the 2.15.1
            # server and the natserver node elect a leader between them.
            cluster.start(other)
            await wait_current(leader.port, other.name)
            if natserver_leads:
                node.campaign()  # within 100-800 ms: before 2.15.1's 4-9 s election timeout
            else:
                node.observer = True  # never campaigns: it must vote for the 2.15.1 server
            cluster.kill(leader)
            with trio.fail_after(STEP):
                await driver.attach(other.port)
            term_before = node.term
            await until(lambda: node.term > term_before and node.leader in (node.id, node_id(other.name)),
                        "a new leader", driver)
            new_leader = node.leader

            def first_entry_of_new_term_committed() -> bool:
                return any(c.term == node.term and c.entry.type == EntryType.PEER_STATE for c in driver.committed)

            await until(first_entry_of_new_term_committed, "the new leader's first entry committed", driver)
            report["new_leader"] = "natserver" if new_leader == node.id else other.name
            report["role"] = node.role.name
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
@pytest.mark.parametrize("natserver_leads", [True, False], ids=["natserver-elected", "2.15.1-elected"])
def test_a_natserver_node_serves_in_a_2_15_1_stream_group(natserver_leads):
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: _bounded(scenario(NATS_SERVER, Path(folder), natserver_leads)))
    assert report["acked_with_natserver_quorum"] == 3
    if natserver_leads:  # the 2.15.1 server voted for it and acknowledged its append
        assert (report["new_leader"], report["role"]) == ("natserver", "LEADER")
    else:  # it voted for the 2.15.1 server, whose first entry its acknowledgement committed
        assert report["new_leader"] in ("n1", "n2", "n3") and report["role"] == "FOLLOWER"


async def _bounded(coro):
    with trio.fail_after(TEST_TIMEOUT):
        return await coro

