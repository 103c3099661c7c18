"""Requests about streams whose servers are down, in a cluster of five in-process natservers,
against 2.15.1's answers (data/offline_nats_server_2.15.1.json, recorded by
``python -m tests.jetstream.cluster.record_offline`` from a 5-node 2.15.1 cluster in the same
layout): an R1 stream ``S1`` and its durable ``C`` on the fifth server, an R3 stream ``R3`` on
the last three; the last two stopped (the meta group keeps its quorum, S1 has no server, R3 no
quorum). STREAM.INFO and CONSUMER.INFO of S1 answer "offline" (10118, 10119); a publish, a
direct get get no responders, MSG.GET times out; STREAM.LIST and CONSUMER.LIST list the offline
ones from their assignments (Go's zero state, the replicas offline) and name them ``missing``;
R3's info comes from its remaining member once its group has been leaderless a while.
"""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, cluster_options, connect, until
from tests.jetstream.cluster.test_r3_streams import CREATE_TIMEOUT, run

DATA = Path(__file__).parent / "data" / "offline_nats_server_2.15.1.json"
SIZE = 5
# record_offline.py's layout: each server's name as a tag, "b" on the three that hold R3.
TAGS = [["n1"], ["n2"], ["n3", "b"], ["n4", "b"], ["n5", "b"]]
STOPPED = (3, 4)
LIST_WAIT = 12.0  # a list waits 4 s for the infos; R3's comes once its group was leaderless 10 s


def recorded() -> dict:
    """The recorded answers with every server down by request subject, 'down' label."""
    data = json.loads(DATA.read_text())
    return {r["subject"]: r["response"] for r in data["requests"] if r["label"] == "down"}


@pytest.fixture
def cluster():
    c = NatsCluster(SIZE, jetstream=True, **cluster_options())
    for node, tags in zip(c.servers, TAGS):
        node.options.server_tags = list(tags)
    with c:
        yield c


def meta_leader(cluster: NatsCluster) -> int | None:
    for i, node in enumerate(cluster.servers):
        if node.running and node.server is not None and node.server.jetstream is not None:
            js_cluster = node.server.jetstream.cluster
            if js_cluster is not None and js_cluster.is_leader and len(js_cluster.peers) >= SIZE - 1:
                return i
    return None


def stable(info: dict) -> dict:
    """An info less what differs between two clusters: times, ids, server and group names."""
    info = json.loads(json.dumps(info))
    for key in ("created", "ts"):
        info.pop(key, None)
    cluster = info.get("cluster", {})
    cluster.pop("raft_group", None)
    cluster.pop("name", None)
    for replica in cluster.get("replicas", ()):
        replica.pop("peer")
        replica.pop("name")
    info.get("config", {}).pop("placement", None)
    return info


def test_requests_about_streams_whose_servers_are_down_answer_as_2_15_1(cluster):
    theirs = recorded()

    async def main():
        async def leader():
            i = meta_leader(cluster)
            return None if i is None else i + 1
        await until(leader, "a meta leader that knows every server")
        nc = await connect(cluster.urls[0])
        try:
            configs = {"S1": {"name": "S1", "subjects": ["s1.>"], "num_replicas": 1, "allow_direct": True,
                              "placement": {"tags": ["n5"]}},
                       "R3": {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3, "allow_direct": True,
                              "placement": {"tags": ["b"]}}}
            for name, config in configs.items():
                async def create(name=name, config=config):
                    created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", config, CREATE_TIMEOUT)
                    return "error" not in created and created
                await until(create, f"{name} created")
                created = await api(nc, f"$JS.API.CONSUMER.CREATE.{name}.{'C' if name == 'S1' else 'D'}", {
                    "stream_name": name, "config": {"durable_name": "C" if name == "S1" else "D",
                                                    "ack_policy": "explicit"}}, CREATE_TIMEOUT)
                assert "error" not in created, created
            for subject in ("s1.a", "r3.a"):
                await nc.jetstream().publish(subject, b'{"x": 1}', timeout=CREATE_TIMEOUT)

            for i in STOPPED:
                cluster.stop(i)
            await until(leader, "a meta leader among the three left")

            for subject in ("$JS.API.STREAM.INFO.S1", "$JS.API.CONSUMER.INFO.S1.C", "$JS.API.STREAM.NAMES"):
                assert await api(nc, subject) == theirs[subject], subject
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("$JS.API.STREAM.MSG.GET.S1", b'{"seq": 1}', timeout=REQUEST_TIMEOUT)
            for subject in ("$JS.API.DIRECT.GET.S1", "s1.b"):
                assert theirs[subject] == {"no_responders": True}
                with pytest.raises(nats.errors.NoRespondersError):
                    await nc.request(subject, b'{"seq": 1}', timeout=REQUEST_TIMEOUT)

            # The lists: the offline ones made from their assignments, and named missing.
            consumers = await api(nc, "$JS.API.CONSUMER.LIST.S1", timeout=LIST_WAIT)
            expected = theirs["$JS.API.CONSUMER.LIST.S1"]
            assert consumers["missing"] == expected["missing"] == ["C"]
            assert [stable(c) for c in consumers["consumers"]] == [stable(c) for c in expected["consumers"]]
            assert list(consumers) == list(expected)
            assert (await api(nc, "$JS.API.CONSUMER.NAMES.S1")) == theirs["$JS.API.CONSUMER.NAMES.S1"]

            async def listed():
                streams = await api(nc, "$JS.API.STREAM.LIST", timeout=LIST_WAIT)
                names = [s["config"]["name"] for s in streams["streams"]]
                # (R3's leader, if it has not stepped down yet for its lost quorum, answers first)
                return streams if names == ["R3", "S1"] and "leader" not in streams["streams"][0]["cluster"] else None
            streams = await until(listed, "R3's info from its member left, leaderless, S1's from its assignment")
            expected = theirs["$JS.API.STREAM.LIST"]
            assert list(streams) == list(expected) and streams["missing"] == expected["missing"] == ["S1"]
            assert stable(streams["streams"][1]) == stable(expected["streams"][1])
            r3 = streams["streams"][0]
            assert "leader" not in r3["cluster"] and r3["state"]["messages"] == 1, r3
            # (leaderless: its own server among the replicas, the two stopped ones offline)
            def offline_flags(info: dict) -> list:
                return sorted(r.get("offline", False) for r in info["cluster"]["replicas"])
            assert offline_flags(r3) == offline_flags(expected["streams"][0]) == [False, True, True]
            # Its info, from its member left (jsStreamInfoRequest: a leaderless group's members answer).
            info = await api(nc, "$JS.API.STREAM.INFO.R3")
            assert "leader" not in info["cluster"] and info["state"]["messages"] == 1, info
            assert list(info) == list(theirs["$JS.API.STREAM.INFO.R3"]), info

            # The account info: the assignments' counts; no "tiers" (2.15.1 shows them only for
            # accounts with tiered limits, which config-file accounts can not have).
            info = await api(nc, "$JS.API.INFO")
            assert (info["streams"], info["consumers"]) == (2, 2) == (theirs["$JS.API.INFO"]["streams"],
                                                                      theirs["$JS.API.INFO"]["consumers"])
            assert list(info) == list(theirs["$JS.API.INFO"]), info
        finally:
            await nc.close()

    run(main)
