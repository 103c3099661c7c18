"""A natserver node in a live nats-server 2.15.1 cluster's meta group, its MetaState then
equal to what 2.15.1 reports.

A 3-node 2.15.1 cluster (tagged as record_meta.py's) gets streams and consumers, some updated
and deleted; a meta follower is killed, more changes are made (each answered by a server that
is up: an R3 stream, a stream pinned by tag to the meta leader's server), the meta leader steps down
(the new leader snapshots its state as it takes over). A natserver RAFT node (driven over a raw
NATS connection in the system account, as tests/raft/test_live_interop.py drives one) takes the
killed server's place in ``_meta_`` under its node id, with an empty log: it is caught up (the
new leader's meta snapshot, then entries), and the MetaState it applies the committed entries
to must then hold what 2.15.1 lists (``$JS.API.STREAM.LIST`` and ``CONSUMER.LIST``: names,
configs, creation times, RAFT groups). Then the other 2.15.1 follower is killed too: the meta
leader commits a new stream's assignment only with the natserver node's acknowledgement (the
create is answered), and the natserver node's MetaState has that stream, on the leader's server.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import trio

from natserver.jetstream.replication.state import MetaState
from natserver.raft import EntryType, MemoryStorage, Node, node_id
from tests.jetstream.replication.record_meta import TAGS, TaggedCluster, meta_leader
from tests.raft.nrg_cluster import SYS_USER, Client, app_request, tempdir, wait_meta_leader
from tests.raft.test_live_interop import Driver, until
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 150  # seconds for the whole test (2.15.1 elections take 4-9 s, twice)
STEP = 30  # seconds for one step
SETTLE = 1.0  # seconds for an applied meta entry to reach every server


def stream(name: str, replicas: int, **extra) -> bytes:
    return json.dumps({"name": name, "subjects": [f"{name.lower()}.>"], "num_replicas": replicas,
                       "storage": "file", **extra}).encode()


async def api(port: int, subject: str, body: bytes | dict = b"") -> dict:
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    answer = await app_request(port, subject, payload)
    assert "error" not in answer, (subject, answer)
    return answer


async def listed(port: int) -> tuple[dict, set]:
    """2.15.1's view: stream name -> (config, created, raft group, {consumer: (config, created)}),
    and the names of the streams it lists as missing (on a server that is down)."""
    out = {}
    answer = await api(port, "$JS.API.STREAM.LIST")
    for info in answer["streams"]:
        name = info["config"]["name"]
        consumers = await api(port, f"$JS.API.CONSUMER.LIST.{name}")
        assert not consumers.get("missing"), consumers
        out[name] = (_static(info["config"]), info["created"], info.get("cluster", {}).get("raft_group"),
                     {c["name"]: (_static(c["config"]), c["created"]) for c in consumers["consumers"]})
    return out, set(answer.get("missing") or ())


def _static(config: dict) -> dict:
    """A config as an info shows it, less the dynamic metadata the stored one has not."""
    metadata = {k: v for k, v in (config.get("metadata") or {}).items() if k not in ("_nats.ver", "_nats.level")}
    return {**config, "metadata": metadata}


def held(state: MetaState) -> dict:
    return {sa.name: (_static(sa.config), sa.created, sa.group.name if len(sa.group.peers) > 1 else None,
                      {c.name: (_static(c.config), c.created) for c in sa.consumers.values()})
            for sa in state.all_streams()}


async def scenario(binary: str, folder: Path) -> dict:
    cluster = TaggedCluster.create(binary, folder)
    cluster.start_all()
    report: dict = {}
    try:
        await trio.sleep(0.5)
        await wait_meta_leader(cluster.nodes)
        port = cluster.nodes[0].port
        await api(port, "$JS.API.STREAM.CREATE.ONE", stream("ONE", 1))
        await api(port, "$JS.API.STREAM.CREATE.THREE", stream("THREE", 3))
        await api(port, "$JS.API.STREAM.CREATE.GONE", stream("GONE", 3))
        await api(port, "$JS.API.STREAM.UPDATE.THREE", stream("THREE", 3, max_msgs=100))
        await api(port, "$JS.API.CONSUMER.CREATE.THREE.D", {"stream_name": "THREE", "config": {
            "durable_name": "D", "ack_policy": "explicit"}})
        await api(port, "$JS.API.CONSUMER.CREATE.THREE.X", {"stream_name": "THREE", "config": {
            "durable_name": "X", "ack_policy": "explicit"}})
        await api(port, "$JS.API.CONSUMER.CREATE.ONE.E", {"stream_name": "ONE", "config": {"durable_name": "E"}})
        await api(port, "$JS.API.STREAM.DELETE.GONE")
        await api(port, "$JS.API.CONSUMER.DELETE.THREE.X")
        leader = cluster.by_name(await meta_leader(cluster))
        # A stream on the meta leader's server (its tag), whose changes it answers itself.
        pin = stream("PIN", 1, placement={"tags": [TAGS[leader.name][0]]})
        await api(port, "$JS.API.STREAM.CREATE.PIN", pin)
        await api(port, "$JS.API.CONSUMER.CREATE.PIN.P", {"stream_name": "PIN", "config": {"durable_name": "P"}})
        killed, other = [n for n in cluster.nodes if n is not leader]
        cluster.kill(killed)
        # Changes the killed server misses (an R3 stream: placed with a quorum of live ones).
        await api(leader.port, "$JS.API.STREAM.CREATE.LATER", stream("LATER", 3))
        await api(leader.port, "$JS.API.STREAM.UPDATE.PIN", {**json.loads(pin), "description": "later"})
        await api(leader.port, "$JS.API.CONSUMER.DELETE.PIN.P")
        # The new meta leader snapshots as it takes over: the catch-up starts with it.
        with trio.fail_after(STEP):
            while True:
                from_sys = await _stepdown(leader.port)
                if from_sys.get("success"):
                    break
                await trio.sleep(0.5)
        await wait_meta_leader([n for n in cluster.nodes if n.process is not None])

        ids = [node_id(n.name) for n in cluster.nodes]
        node = Node(node_id(killed.name), "_meta_", ids, MemoryStorage(), rng=random.Random(7))
        state = MetaState(node.id)
        driver = Driver(node)
        await driver.attach(other.port)
        applied: list = []

        def apply_committed() -> None:
            while driver.committed:
                c = driver.committed.pop(0)
                applied.append(c.entry.type)
                state.apply(c.index, c.entry)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver.run)
            want, missing = await listed(other.port)

            def same() -> bool:
                apply_committed()
                mine = held(state)
                return set(mine) == set(want) | missing and all(mine[n] == want[n] for n in want)

            await until(same, "caught up to 2.15.1's state", driver)
            report["streams"] = sorted(set(want) | missing)
            report["entry_types"] = sorted(set(applied))
            report["caught_up_from"] = driver.received.get("CR", 0)

            # Only the meta leader and the natserver node are left: the meta leader commits
            # with the natserver node's acknowledgement, or not at all.
            new_leader = cluster.by_name(await meta_leader(cluster))
            for n in cluster.nodes:
                if n is not new_leader and n.process is not None:
                    cluster.kill(n)
                    if n is other:
                        await driver.attach(new_leader.port)
            tag = TAGS[new_leader.name][0]
            created = await api(new_leader.port, "$JS.API.STREAM.CREATE.QUORUM",
                                stream("QUORUM", 1, placement={"tags": [tag]}))
            report["quorum_create"] = created["cluster"]["leader"]
            await until(lambda: (apply_committed(), state.stream("APP", "QUORUM") is not None)[1],
                        "the new stream applied", driver)
            report["quorum_peers"] = state.stream("APP", "QUORUM").group.peers
            report["leader_id"] = node_id(new_leader.name)
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


async def _stepdown(port: int) -> dict:
    client = await Client.open(port, SYS_USER)
    try:
        with trio.fail_after(STEP):
            return json.loads(await client.request("$JS.API.META.LEADER.STEPDOWN"))
    finally:
        await client.stream.aclose()


@needs_nats_server
def test_a_natserver_node_in_the_meta_group_holds_2_15_1s_assignments():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: _bounded(scenario(NATS_SERVER, Path(folder))))
    assert report["streams"] == ["LATER", "ONE", "PIN", "THREE"]
    assert report["caught_up_from"] > 0
    # The catch-up started with the new meta leader's snapshot (an EntrySnapshot applied).
    assert EntryType.SNAPSHOT in report["entry_types"], report
    assert report["quorum_create"] and report["quorum_peers"] == [report["leader_id"]]


async def _bounded(coro):
    with trio.fail_after(TEST_TIMEOUT):
        return await coro
