"""Replicated streams (num_replicas 3) in a cluster of three in-process natservers (real clocks,
bounded polls, a hard timeout on each test): the stream's RAFT group on every node, its leader
taking the publishes and acknowledging each once a quorum stored it, every acked message on
every replica's store; duplicates and expected-sequence headers; STREAM.INFO's cluster block in
2.15.1's shape (data/r3_nats_server_2.15.1.json, recorded from a 3-node 2.15.1 cluster by
``python -m tests.jetstream.cluster.record_r3``); purge and delete through the group; the
leader's step-down; its node stopped (a new leader, publishing goes on) and restarted (caught
up); a minority that does not acknowledge; a follower behind the leader's snapshot caught up
over $JSC.SYNC; a KV bucket with 3 replicas; the stream's deletion.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import nats
import pytest

from natserver.jetstream import replica as replica_module
from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.test_cluster import (
    POLL,
    REQUEST_TIMEOUT,
    STEP,
    api,
    cluster_options,
    connect,
    meta_leader,
    same_shape,
    until,
)

DATA = Path(__file__).parent / "data" / "r3_nats_server_2.15.1.json"
TEST_TIMEOUT = 180.0  # seconds of real time for a whole test (elections: 4-9 s, a few of them)
CREATE_TIMEOUT = 15.0  # a replicated stream's create is answered by its leader, once elected
# A memory stream whose servers all restarted elects a leader of its new group (4-9 s, twice at most).
MEMORY_RECOVERY = 60.0
MINORITY_WAIT = 3.0  # seconds a publish to a minority waits for an ack that must not come
_T = "io.nats.jetstream.api.v1."
R3 = {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3}


def recorded(name: str) -> dict:
    return json.loads(DATA.read_text())[name]


PEER_INFO = ["name", "current", "offline", "active", "lag", "peer"]  # stream.go PeerInfo (offline, lag omitted)


def same_info_shape(ours: dict, theirs: dict) -> None:
    """2.15.1's shape, the replicas' keys in PeerInfo's order (a replica's lag is there or not)."""
    ours, theirs = json.loads(json.dumps(ours)), json.loads(json.dumps(theirs))
    replicas = ours["cluster"].pop("replicas")
    theirs["cluster"].pop("replicas")
    same_shape(ours, theirs)
    assert len(replicas) == 2
    for replica in replicas:
        assert list(replica) == [k for k in PEER_INFO if k in replica] and set(PEER_INFO) - {"lag", "offline"} <= set(replica)


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def engine(cluster: NatsCluster, i: int):
    return cluster.servers[i].server.jetstream


def stream_on(cluster: NatsCluster, i: int, name: str = "R3"):
    node = cluster.servers[i]
    if not node.running or node.server is None or node.server.jetstream is None:
        return None
    return node.server.jetstream.streams.get(name)


def contents(cluster: NatsCluster, i: int, name: str = "R3") -> list | None:
    """Node i's stored messages (seq, subject, payload), read from its store."""
    stream = stream_on(cluster, i, name)
    if stream is None:
        return None
    store = stream.store
    try:
        out = []
        for seq in range(store.first_seq, store.last_seq + 1):
            sm = store.load_msg(seq)
            if sm is not None:
                out.append((seq, bytes(sm.subject), bytes(sm.data)))
        return out
    except (RuntimeError, KeyError, IndexError, ValueError):  # (read while its thread writes)
        return None


async def same_everywhere(cluster: NatsCluster, nodes: list[int], name: str = "R3", step: float = STEP) -> list:
    async def check():
        views = [contents(cluster, i, name) for i in nodes]
        if all(v is not None for v in views) and all(v == views[0] for v in views):
            return views[0] or [None]
        return None
    found = await until(check, f"the same messages on nodes {nodes}", step)
    return [] if found == [None] else found


def leader_index(cluster: NatsCluster, name: str = "R3") -> int | None:
    for i in range(3):
        stream = stream_on(cluster, i, name)
        if stream is not None and stream.replica is not None and stream.replica.leading:
            return i
    return None


async def wait_leader(cluster: NatsCluster, name: str = "R3", other_than: int | None = None) -> int:
    async def check():
        i = leader_index(cluster, name)
        return None if i is None or i == other_than else i + 1
    return await until(check, f"a leader of {name}") - 1


async def publish(nc, subject: str, data: bytes, headers: dict | None = None, step: float = STEP):
    """A publish acknowledged (retried while the leader changes or its interest travels)."""
    async def attempt():
        try:
            return await nc.jetstream().publish(subject, data, timeout=REQUEST_TIMEOUT, headers=headers)
        except nats.js.errors.NoStreamResponseError:
            return None
    return await until(attempt, f"{subject} acknowledged", step)


async def create_r3(nc, config: dict = R3) -> dict:
    async def attempt():
        try:
            answer = await api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config, timeout=CREATE_TIMEOUT)
        except nats.errors.TimeoutError:
            return None
        assert "error" not in answer, answer
        return answer
    return await until(attempt, f"{config['name']} created")


def test_an_r3_stream_replicates_fails_over_and_catches_up(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        await until(lambda: meta_leader(sys_nc), "a meta leader")

        created = await create_r3(ncs[0])
        same_info_shape(created, recorded("create"))
        assert created["did_create"] is True and created["config"]["num_replicas"] == 3
        block = created["cluster"]
        names = {n.server.server_name for n in cluster.servers}
        assert block["leader"] in names and block["raft_group"].startswith("S-R3F-"), block
        assert sorted(r["name"] for r in block["replicas"]) == sorted(names - {block["leader"]})
        lead = await wait_leader(cluster)
        for i in range(3):  # a group node and the stream (no subscriptions but the leader's) everywhere
            stream = stream_on(cluster, i)
            assert stream is not None and stream.replica is not None
            assert bool(stream.subs) == (i == lead)
            assert os.path.isdir(stream.replica.group.folder)

        # Published through each node, every ack a promise: the message on every replica.
        acks = []
        for n in range(30):
            acks.append(await publish(ncs[n % 3], f"r3.{n % 3}", b"m%d" % n))
        assert [a.seq for a in acks] == list(range(1, 31)) and {a.stream for a in acks} == {"R3"}
        stored = await same_everywhere(cluster, [0, 1, 2])
        assert [(seq, data) for seq, _, data in stored] == [(n + 1, b"m%d" % n) for n in range(30)]

        # Duplicates and expected-sequence headers, checked by the leader.
        first = await publish(ncs[1], "r3.d", b"dup", {"Nats-Msg-Id": "id-1"})
        again = await publish(ncs[2], "r3.d", b"dup", {"Nats-Msg-Id": "id-1"})
        assert first.seq == 31 and again.seq == 31 and again.duplicate is True and not first.duplicate
        raw = await ncs[0].request("r3.d", b"dup", headers={"Nats-Msg-Id": "id-1"}, timeout=REQUEST_TIMEOUT)
        assert raw.data == recorded("dup_acks")[1].replace('"seq":4', '"seq":31').encode(), raw.data
        with pytest.raises(nats.js.errors.APIError) as wrong:
            await ncs[0].jetstream().publish("r3.e", b"x", headers={"Nats-Expected-Last-Sequence": "5"},
                                             timeout=REQUEST_TIMEOUT)
        assert wrong.value.err_code == 10071
        right = await publish(ncs[0], "r3.e", b"x", {"Nats-Expected-Last-Sequence": "31"})
        assert right.seq == 32

        # STREAM.INFO and MSG.GET from the leader, through any node; delete and purge proposed.
        info = await api(ncs[2], "$JS.API.STREAM.INFO.R3")
        same_info_shape(info, recorded("info"))
        assert info["state"]["messages"] == 32 and info["cluster"]["leader"] == cluster.servers[lead].server.server_name

        async def all_current():  # (a replica may be an entry behind for a moment)
            replicas = (await api(ncs[2], "$JS.API.STREAM.INFO.R3"))["cluster"]["replicas"]
            return all(r["current"] and "lag" not in r for r in replicas)
        await until(all_current, "every replica current")
        listed = await api(ncs[1], "$JS.API.STREAM.LIST")  # (the leader answers $JSC.SI)
        assert [i["config"]["name"] for i in listed["streams"]] == ["R3"] and "missing" not in listed, listed
        assert listed["streams"][0]["cluster"]["raft_group"] == block["raft_group"]
        got = await api(ncs[1], "$JS.API.STREAM.MSG.GET.R3", {"seq": 4})
        assert got["message"]["subject"] == "r3.0" and got["message"]["seq"] == 4
        deleted = await api(ncs[1], "$JS.API.STREAM.MSG.DELETE.R3", {"seq": 2})
        assert deleted == recorded("delete"), deleted
        missing = await api(ncs[1], "$JS.API.STREAM.MSG.DELETE.R3", {"seq": 2})
        assert missing == recorded("delete_again"), missing
        purged = await api(ncs[0], "$JS.API.STREAM.PURGE.R3", {"filter": "r3.1"})
        assert purged == {"type": _T + "stream_purge_response", "success": True, "purged": 9}, purged
        stored = await same_everywhere(cluster, [0, 1, 2])
        assert len(stored) == 32 - 10 and all(subject != b"r3.1" for _, subject, _ in stored)
        assert 2 not in [seq for seq, _, _ in stored]

        # The leader steps down: another takes the lead, publishing goes on.
        stepdown = await api(ncs[0], "$JS.API.STREAM.LEADER.STEPDOWN.R3")
        assert stepdown == recorded("stepdown"), stepdown
        lead = await wait_leader(cluster, other_than=lead)
        ack = await publish(ncs[0], "r3.0", b"after stepdown")
        assert ack.seq == 33

        # The leader's node stops: a new leader, acks go on through the other nodes.
        survivors = [i for i in range(3) if i != lead]
        cluster.stop(lead)
        new_lead = await wait_leader(cluster, other_than=lead)
        assert new_lead in survivors
        for n in range(10):
            ack = await publish(ncs[survivors[n % 2]], "r3.2", b"down %d" % n)
            assert ack.seq == 34 + n
        await same_everywhere(cluster, survivors)

        # Restarted from its store: caught up with the others.
        cluster.restart(lead)
        stored = await same_everywhere(cluster, [0, 1, 2])
        assert stored[-1] == (43, b"r3.2", b"down 9") and len(stored) == 22 + 1 + 10

        # A minority (one node alone) acknowledges nothing.
        alone = lead
        ncs[alone] = await connect(cluster.urls[alone])
        for i in range(3):
            if i != alone:
                cluster.stop(i)
        with pytest.raises((nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError)):
            await ncs[alone].jetstream().publish("r3.0", b"lost", timeout=MINORITY_WAIT)
        assert contents(cluster, alone)[-1][0] == 43
        for nc in [ncs[alone], sys_nc]:
            await nc.close()

    run(main)


def test_a_follower_behind_the_snapshot_catches_up_over_jsc_sync(cluster, monkeypatch):
    monkeypatch.setattr(replica_module, "COMPACT_ENTRIES", 8)  # (a snapshot every 8 entries)

    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        await until(lambda: meta_leader(sys_nc), "a meta leader")
        await create_r3(ncs[0], {**R3, "storage": "memory"})
        await create_r3(ncs[0], {"name": "F3", "subjects": ["f3.>"], "num_replicas": 3})
        lead = await wait_leader(cluster)
        follower = (lead + 1) % 3
        client = (lead + 2) % 3
        for n in range(5):
            await publish(ncs[client], "f3.a", b"before %d" % n)
        await same_everywhere(cluster, [0, 1, 2], "F3")
        cluster.stop(follower)
        f3_lead = await wait_leader(cluster, "F3")
        for n in range(40):
            await publish(ncs[client], f"f3.{n % 4}", b"while down %d" % n)
        deleted = await api(ncs[client], "$JS.API.STREAM.MSG.DELETE.F3", {"seq": 20})
        assert deleted.get("success") is True, deleted
        leader_replica = stream_on(cluster, f3_lead, "F3").replica
        assert leader_replica.snapshots >= 1
        assert leader_replica.group.node.base_index > 5  # (the log compacted past the follower)
        cluster.restart(follower)
        stored = await same_everywhere(cluster, [0, 1, 2], "F3")
        assert len(stored) == 44 and stored[-1][2] == b"while down 39" and 20 not in [s for s, _, _ in stored]
        lead_now = leader_index(cluster, "F3")
        assert stream_on(cluster, lead_now, "F3").replica.catchups_served >= 1 or lead_now == follower
        # ... and the group goes on with the caught-up follower in it.
        ack = await publish(ncs[client], "f3.z", b"after")
        assert ack.seq == 46
        await same_everywhere(cluster, [0, 1, 2], "F3")
        for n in range(5):
            await publish(ncs[client], "r3.m", b"memory %d" % n)
        await same_everywhere(cluster, [0, 1, 2])
        for nc in [*ncs, sys_nc]:
            await nc.close()

    async def after_restart():
        ncs = [await connect(url) for url in cluster.urls]
        ack = await publish(ncs[1], "f3.z", b"after the restart")
        assert ack.seq == 47
        stored = await same_everywhere(cluster, [0, 1, 2], "F3")
        assert len(stored) == 46 and stored[-1][2] == b"after the restart"
        # A memory stream keeps its group's log in memory too (createRaftGroup's memory WAL):
        # with every server restarted it starts again from sequence 1, as 2.15.1's does
        # (measured: 5 messages, the three servers restarted, the next publish acked as 1).
        ack = await publish(ncs[2], "r3.m", b"memory after", step=MEMORY_RECOVERY)
        assert ack.seq == 1

        async def everywhere():
            views = [contents(cluster, i) for i in range(3)]
            return all(v == [(1, b"r3.m", b"memory after")] for v in views)
        await until(everywhere, "the memory stream's new message everywhere", MEMORY_RECOVERY)
        for nc in ncs:
            await nc.close()

    run(main)
    # The whole cluster stopped and started again: every stream back, a leader, acks.
    for i in range(3):
        cluster.stop(i)
    for i in range(3):
        cluster.restart(i)
    run(after_restart)


def test_kv_with_three_replicas_an_r1_consumer_and_the_stream_deleted(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        await until(lambda: meta_leader(sys_nc), "a meta leader")

        async def bucket():
            try:
                return await ncs[1].jetstream(timeout=CREATE_TIMEOUT).create_key_value(bucket="B", history=2,
                                                                                         replicas=3)
            except nats.errors.TimeoutError:
                return None
        kv = await until(bucket, "the bucket created")
        lead = await wait_leader(cluster, "KV_B")

        async def put():
            try:
                return await kv.put("k", b"v1")
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                return None
        assert await until(put, "a put") == 1
        assert await kv.put("k", b"v2") == 2
        entry = await ncs[(lead + 1) % 3].jetstream().key_value("B")
        assert (await entry.get("k")).value == b"v2"
        await same_everywhere(cluster, [0, 1, 2], "KV_B")

        # An R1 consumer of a replicated stream runs on the server it is placed on (no group:
        # no replicas in its cluster block; test_r3_consumers_more.py); the stream goes with its
        # groups.
        await create_r3(ncs[0])
        created = await api(ncs[2], "$JS.API.CONSUMER.CREATE.R3.D", {"stream_name": "R3", "config": {
            "durable_name": "D", "ack_policy": "explicit", "num_replicas": 1}})
        assert created["name"] == "D" and created["cluster"]["leader"] and "replicas" not in created["cluster"], created
        folders = [stream_on(cluster, i).replica.group.folder for i in range(3)]
        deleted = await api(ncs[1], "$JS.API.STREAM.DELETE.R3")
        assert deleted == {"type": _T + "stream_delete_response", "success": True}

        async def gone():
            return all(stream_on(cluster, i) is None and not os.path.exists(folders[i]) for i in range(3))
        await until(gone, "the stream and its groups removed everywhere")
        await sys_nc.close()
        for nc in ncs:
            await nc.close()

    run(main)


__all__ = ["POLL", "STEP"]
