"""A replicated stream's and consumer's new leader announces itself as nats-server 2.15.1's does
(jetstream_cluster.go sendStreamLeaderElectAdvisory / sendConsumerLeaderElectAdvisory):
``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>`` and ``CONSUMER.LEADER_ELECTED.<stream>.
<consumer>`` in the stream's account, and the same event naming the account in the system
account; every peer of the group in ``replicas``; the meta group's new leader on
``$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED`` in the system account; a leader left without a
quorum says so (QUORUM_LOST). Compared with a 3-node 2.15.1 recording
(record_leader_advisories.py): the fields, their order, the replicas' fields."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from natserver.testing_cluster import NatsCluster

from .test_cluster import api, cluster_options, connect, until

DATA = Path(__file__).parent / "data" / "leader_advisories_nats_server_2.15.1.json"
TEST_TIMEOUT = 120.0  # seconds of real time for the whole test (the hard timeout)
_T = "io.nats.jetstream.api.v1."


def _shape(doc: dict) -> list:
    """The fields in order, with the replicas' fields (each entry's, lag left out: it comes and
    goes with the moment)."""
    shape: list = []
    for key, value in doc.items():
        if key == "replicas":
            shape.append(("replicas", sorted({tuple(k for k in entry if k != "lag") for entry in value})))
        else:
            shape.append(key)
    return shape


def _recorded(kind: str, where: str) -> dict:
    advisories = json.loads(DATA.read_text())["advisories"]
    return next(a["data"] for a in advisories if f".{kind}.LEADER_ELECTED" in a["subject"] and a["where"] == where)


def test_leader_elected_advisories_in_the_account_and_the_system_account():
    with NatsCluster(3, jetstream=True, **cluster_options()) as cluster:
        asyncio.run(asyncio.wait_for(_leaders_announced(cluster), TEST_TIMEOUT))


async def _leaders_announced(cluster: NatsCluster) -> None:
    nc = await connect(cluster.urls[0])
    sys_nc = await connect(cluster.urls[1], "sys")
    got: list[tuple[str, str, dict]] = []

    def keep(where: str):
        async def on(msg) -> None:
            got.append((where, msg.subject, json.loads(msg.data)))
        return on

    try:
        await nc.subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>", cb=keep("APP"))
        await sys_nc.subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>", cb=keep("SYS"))
        await nc.flush()
        await sys_nc.flush()

        async def created():
            answer = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "num_replicas": 3})
            return answer if answer.get("type") == _T + "stream_create_response" and "error" not in answer else None

        info = await until(created, "the R3 stream created (a meta leader elected)")
        durable = {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}}
        consumer = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.D", durable)
        assert "error" not in consumer, consumer
        names = sorted(node.options.server_name for node in cluster.servers)

        async def announced(kind: str, leader: str, count: int = 1):
            async def enough():
                found = [(w, s, d) for w, s, d in got if f".{kind}.LEADER_ELECTED." in s and d["leader"] == leader]
                return found if len(found) >= 2 * count else None
            return await until(enough, f"the {kind} leader {leader} announced in both accounts")

        for kind, subject, leader in (("STREAM", "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.S",
                                       info["cluster"]["leader"]),
                                      ("CONSUMER", "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.S.D",
                                       consumer["cluster"]["leader"])):
            found = await announced(kind, leader)
            by_account = {where: data for where, subj, data in found if subj == subject}
            app, system = by_account["APP"], by_account["SYS"]
            assert _shape(app) == _shape(_recorded(kind, "APP"))
            assert _shape(system) == _shape(_recorded(kind, "SYS"))
            assert system["account"] == "APP" and "account" not in app
            assert (app["id"], app["timestamp"]) == (system["id"], system["timestamp"])  # (one event)
            assert app["stream"] == "S" and app.get("consumer", "D") == "D"
            assert sorted(entry["name"] for entry in app["replicas"]) == names
            assert next(e for e in app["replicas"] if e["name"] == leader)["current"] is True

        # A step-down: the new leader announces itself.
        old = info["cluster"]["leader"]
        stepdown = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.S")
        assert stepdown == {"type": _T + "stream_leader_stepdown_response", "success": True}

        async def new_leader():
            for where, subject, data in got:
                if where == "APP" and ".STREAM." in subject and data["leader"] != old:
                    return data["leader"]
            return None

        leader = await until(new_leader, "the new stream leader announced")
        now = (await api(nc, "$JS.API.STREAM.INFO.S"))["cluster"]["leader"]
        assert leader == now != old

        # The meta group's new leader: DOMAIN.LEADER_ELECTED in the system account, by peer id.
        await sys_nc.subscribe("$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED", cb=keep("SYS"))
        await sys_nc.flush()
        stepped = await api(sys_nc, "$JS.API.META.LEADER.STEPDOWN")
        assert stepped.get("success") is True, stepped

        async def domain():
            return next((d for w, s, d in got if s.endswith(".DOMAIN.LEADER_ELECTED")), None)

        event = await until(domain, "the new meta leader announced")
        assert _shape(event) == _shape(_recorded("DOMAIN", "SYS"))
        assert event["cluster"] == cluster.name
        peers = {entry["peer"]: entry["name"] for entry in event["replicas"]}
        assert sorted(peers.values()) == names and event["leader"] in peers
    finally:
        await nc.close()
        await sys_nc.close()


STEPDOWNS = 3  # consumer step-downs asked at most until its leader is the stream leader's server


def test_a_leader_left_without_a_quorum_says_so():
    """The other two servers stopped: the stream's and the consumer's leader steps down when it
    has heard from no quorum for raft.go's lostQuorumInterval (10 s), and says so in both
    accounts (STREAM.QUORUM_LOST, CONSUMER.QUORUM_LOST), as 2.15.1's leaders do."""
    with NatsCluster(3, jetstream=True, **cluster_options()) as cluster:
        asyncio.run(asyncio.wait_for(_quorum_lost(cluster), TEST_TIMEOUT))


async def _quorum_lost(cluster: NatsCluster) -> None:
    ncs = [await connect(url) for url in cluster.urls]
    got: list[tuple[str, str, dict]] = []
    sys_nc = None
    try:
        async def created():
            answer = await api(ncs[0], "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                                  "num_replicas": 3})
            return answer if "error" not in answer else None

        leader = (await until(created, "the R3 stream created"))["cluster"]["leader"]
        at = next(i for i, node in enumerate(cluster.servers) if node.options.server_name == leader)
        nc = ncs[at]
        consumer = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
                             {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        for _ in range(STEPDOWNS):  # (the consumer's leader on the same server)
            if consumer["cluster"]["leader"] == leader:
                break
            await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.D", {"placement": {"preferred": leader}})

            async def moved(old=consumer["cluster"]["leader"]):
                info = await api(nc, "$JS.API.CONSUMER.INFO.S.D")
                return info if info.get("cluster", {}).get("leader") not in (None, old) else None

            consumer = await until(moved, "the consumer's new leader")
        assert consumer["cluster"]["leader"] == leader

        sys_nc = await connect(cluster.urls[at], "sys")

        def keep(where: str):
            async def on(msg) -> None:
                got.append((where, msg.subject, json.loads(msg.data)))
            return on

        await nc.subscribe("$JS.EVENT.ADVISORY.*.QUORUM_LOST.>", cb=keep("APP"))
        await sys_nc.subscribe("$JS.EVENT.ADVISORY.*.QUORUM_LOST.>", cb=keep("SYS"))
        await nc.flush()
        await sys_nc.flush()
        for i in range(3):
            if i != at:
                cluster.stop(i)

        async def both():
            kinds = {(w, s) for w, s, _ in got}
            wanted = {(w, s) for w in ("APP", "SYS") for s in ("$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.S",
                                                                "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.S.D")}
            return wanted <= kinds or None

        await until(both, "the quorum lost, said in both accounts", step=40)
        for where, subject, data in got:
            consumer_kind = ".CONSUMER." in subject
            head = ["type", "id", "timestamp", *(["account"] if where == "SYS" else []), "stream",
                    *(["consumer"] if consumer_kind else []), "replicas"]
            assert list(data) == head, data
            assert data["type"] == "io.nats.jetstream.advisory.v1.%s_quorum_lost" % (
                "consumer" if consumer_kind else "stream")
            assert sorted(e["name"] for e in data["replicas"]) == sorted(n.options.server_name for n in cluster.servers)
    finally:
        for client in [*ncs, *([sys_nc] if sys_nc else [])]:
            if not client.is_closed:
                await client.close()
