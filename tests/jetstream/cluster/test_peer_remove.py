"""STREAM.PEER.REMOVE and SERVER.REMOVE in a cluster of three in-process natservers (real
clocks, bounded polls, a hard timeout on each test), their answers compared with a 5-node
2.15.1 cluster's (data/scale_nats_server_2.15.1.json, ``python -m
tests.jetstream.cluster.record_scale``): the meta leader answers both; PEER.REMOVE's errors
(bad request, stream not found, peer not a member) as 2.15.1's, a member replaced (an R1
stream's server by another; an R3 stream's on three servers refused: no replacement); SERVER.REMOVE's errors (bad request,
invalid JSON, not a member) as 2.15.1's, a server removed from the meta group (answered once the removal is applied, gone from every /jsz,
nothing placed on it after, not taken back when it is heard from again), its R1 streams moved to
other servers and an R3 stream it was in shrunk to the two others with every message.
"""

from __future__ import annotations

import json
from pathlib import Path

from natserver.raft import node_id
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, jsz_all, run, until
from tests.jetstream.cluster.test_r3_streams import publish

DATA = Path(__file__).parent / "data" / "scale_nats_server_2.15.1.json"
_T = "io.nats.jetstream.api.v1."
ASSETLESS_STREAMS = 4  # R1 streams created after a removal (none may land on the removed server)
SETTLE = 60.0  # seconds for a peer's replacement to settle


async def created_r3(nc) -> dict | None:
    answer = await api(nc, "$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3},
                       timeout=15)
    return answer if "error" not in answer else None


def recorded(name: str) -> dict:
    return json.loads(DATA.read_text())[name]


def test_stream_peer_remove_answers_as_2_15_1(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            created = await api(ncs[0], "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            host = created["cluster"]["leader"]
            others = [n.options.server_name for n in cluster.servers if n.options.server_name != host]
            for nc in ncs:  # (the meta leader answers, whichever server the client is on)
                assert await api(nc, "$JS.API.STREAM.PEER.REMOVE.S", {"peer": "nope"}) == recorded(
                    "peer_remove_unknown")
            assert await api(ncs[1], "$JS.API.STREAM.PEER.REMOVE.S", {}) == recorded("peer_remove_empty")
            assert await api(ncs[1], "$JS.API.STREAM.PEER.REMOVE.S") == recorded("peer_remove_no_body")
            assert await api(ncs[2], "$JS.API.STREAM.PEER.REMOVE.X", {"peer": host}) == recorded(
                "peer_remove_missing_stream")
            # An R1 stream's other servers are not members (2.15.1: peer_remove_r1 names one).
            assert await api(ncs[2], "$JS.API.STREAM.PEER.REMOVE.S", {"peer": others[0]}) == recorded(
                "peer_remove_unknown")
            # An R3 stream on three servers: no replacement keeps its replicas (10075).
            r3 = await until(lambda: created_r3(ncs[0]), "R3 created")
            follower = r3["cluster"]["replicas"][0]["name"]
            assert await api(ncs[1], "$JS.API.STREAM.PEER.REMOVE.R3", {"peer": follower}) == {
                "type": _T + "stream_remove_peer_response",
                "error": {"code": 503, "err_code": 10075, "description": "peer remap failed"}}
            # An R1 stream's only server, by peer id: moved to another server (2.15.1: the
            # stream starts there afresh, its messages stay behind), the old one drops its copy.
            await publish(ncs[1], "s.a", b"x")
            moved = await api(ncs[1], "$JS.API.STREAM.PEER.REMOVE.S", {"peer": node_id(host)})
            assert moved == recorded("peer_remove")

            async def elsewhere():
                info = await api(ncs[2], "$JS.API.STREAM.INFO.S")
                leader = (info.get("cluster") or {}).get("leader")
                return info if leader and leader != host and "desired" not in info["cluster"] else None

            info = await until(elsewhere, "S moved off its server", SETTLE)
            assert info["cluster"]["leader"] in others and info["state"]["messages"] == 0
            hosts = [n.options.server_name for n in cluster.servers if "S" in n.server.jetstream.streams]
            assert hosts == [info["cluster"]["leader"]]
            ack = await publish(ncs[0], "s.a", b"y")
            assert ack.seq == 1

    run(main)


def test_server_remove_moves_its_streams_elsewhere(cluster):
    async def main():
        async with clients(cluster) as (ncs, sys_nc, leader):
            names = [n.options.server_name for n in cluster.servers]
            assert await api(sys_nc, "$JS.API.SERVER.REMOVE") == recorded("server_remove_empty")
            assert await api(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": "nope"}) == recorded("server_remove_unknown")
            assert await api(sys_nc, "$JS.API.SERVER.REMOVE", {"peer_id": "nope"}) == recorded(
                "server_remove_by_id_unknown")
            bad = await api(sys_nc, "$JS.API.SERVER.REMOVE", "x")
            theirs = recorded("server_remove_bad_json")
            assert bad["type"] == theirs["type"] and bad["error"]["err_code"] == theirs["error"]["err_code"] == 10025
            # An account's request is not the system account's: nobody answers it.
            inbox = ncs[0].new_inbox()
            quiet = await ncs[0].subscribe(inbox)
            await ncs[0].publish("$JS.API.SERVER.REMOVE", json.dumps({"peer": names[1]}).encode(), reply=inbox)
            await ncs[0].flush()

            # A server (not the meta leader) running an R1 stream (moved there off its first
            # server by STREAM.PEER.REMOVE: placement may favour one) and a member of an R3 one.
            made = await api(ncs[0], "$JS.API.STREAM.CREATE.T0", {"name": "T0", "subjects": ["t0"]})
            first_host = made["cluster"]["leader"]
            if first_host == leader:
                assert (await api(ncs[0], "$JS.API.STREAM.PEER.REMOVE.T0", {"peer": first_host}))["success"]

            async def off_leader():
                info = await api(ncs[0], "$JS.API.STREAM.INFO.T0")
                now = (info.get("cluster") or {}).get("leader")
                return now if now and now != leader and "desired" not in info["cluster"] else None

            victim = await until(off_leader, "T0 off the meta leader's server", SETTLE)
            on_victim, made_t = ["T0"], 1
            r3 = await until(lambda: created_r3(ncs[1]), "R3 created")
            assert victim in members_of(r3)
            for n in range(3):
                await publish(ncs[n], "r3.a", b"m%d" % n)
            meta = next(n.server.jetstream.cluster for n in cluster.servers if n.options.server_name == leader)
            await until(lambda: as_async(node_id(victim) in meta.usage.get("APP", {})), "the victim's usage counted")
            removed = await api(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": victim})
            assert removed == recorded("server_remove")
            assert await api(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": victim}) == recorded("server_remove_again")

            async def without_it():
                views = await jsz_all(sys_nc)
                rest = [views.get(n, {}).get("meta_cluster", {}) for n in names if n != victim]
                if all(m.get("cluster_size") == 2 and [r["name"] for r in m.get("replicas", ())] != []
                       and victim not in [r["name"] for r in m["replicas"]] for m in rest):
                    return rest
                return None

            metas = await until(without_it, f"{victim} gone from the meta group")
            assert all(m["leader"] == leader and m["quorum_needed"] == 2 for m in metas)

            # Its R1 streams on another server (afresh, as 2.15.1 moves them), the R3 stream on
            # the two others (no replacement: the group shrinks) with every message.
            for name in on_victim:
                async def moved(name=name):
                    info = await api(ncs[0], f"$JS.API.STREAM.INFO.{name}")
                    leader_now = (info.get("cluster") or {}).get("leader")
                    return info if leader_now and leader_now != victim and "desired" not in info["cluster"] else None
                await until(moved, f"{name} moved off {victim}", SETTLE)

            async def shrunk():
                info = await api(ncs[0], "$JS.API.STREAM.INFO.R3")
                cluster_info = info.get("cluster") or {}
                if cluster_info.get("leader") and "desired" not in cluster_info and \
                        members_of(info) == sorted(n for n in names if n != victim):
                    return info
                return None

            info = await until(shrunk, "R3 on the two other servers", SETTLE)
            assert info["state"]["messages"] == 3 and info["config"]["num_replicas"] == 3
            ack = await publish(ncs[0], "r3.a", b"m3")
            assert ack.seq == 4
            for i in range(ASSETLESS_STREAMS):  # (placement: the meta group's peers only)
                made = await api(ncs[i % 3], f"$JS.API.STREAM.CREATE.U{i}", {"name": f"U{i}", "subjects": [f"u{i}"]})
                assert made["cluster"]["leader"] in names and made["cluster"]["leader"] != victim, made
            info = await api(ncs[1], "$JS.API.INFO")
            assert info["streams"] == 1 + made_t + ASSETLESS_STREAMS
            # The removed server's usage is no longer the account's ($JSC.ARU: it sends none, and
            # what it sent before is dropped).
            assert node_id(victim) not in meta.usage.get("APP", {})
            # The removed server still answers the leader's heartbeats: it is not taken back.
            views = await jsz_all(sys_nc)
            assert views[leader]["meta_cluster"]["cluster_size"] == 2
            assert quiet.pending_msgs == 0

    run(main)


async def as_async(value):
    return value


def members_of(info: dict) -> list[str]:
    cluster = info.get("cluster") or {}
    return sorted([cluster.get("leader", "")] + [r["name"] for r in cluster.get("replicas") or ()])


def test_server_remove_of_a_member_of_an_r3_stream_with_a_consumer(cluster):
    """SERVER.REMOVE of a server in an R3 stream's group and its R3 durable's (2.15.1 moves a
    removed server's streams and their consumers, removePeerFromStreamLocked): on three servers
    there is no replacement, both groups shrink to the two others; the consumer keeps its
    state there (delivered, ack floor) and a pull goes on from the next message."""
    async def main():
        async with clients(cluster) as (ncs, sys_nc, leader):
            names = [n.options.server_name for n in cluster.servers]
            await until(lambda: created_r3(ncs[0]), "R3 created")
            for n in range(6):
                await publish(ncs[n % 3], "r3.a", b"m%d" % n)
            made = await api(ncs[0], "$JS.API.CONSUMER.DURABLE.CREATE.R3.D",
                             {"stream_name": "R3", "config": {"durable_name": "D", "ack_policy": "explicit"}})
            assert "error" not in made and len(made["cluster"]["replicas"]) == 2, made
            sub = await ncs[1].jetstream().pull_subscribe_bind("D", stream="R3")
            first = await sub.fetch(3, timeout=5)
            for m in first:
                await m.ack_sync(timeout=5)
            victim = next(n for n in names if n != leader)
            removed = await api(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": victim})
            assert removed == recorded("server_remove"), removed
            rest = sorted(n for n in names if n != victim)

            async def shrunk():
                info = await api(ncs[0], "$JS.API.STREAM.INFO.R3")
                consumer = await api(ncs[0], "$JS.API.CONSUMER.INFO.R3.D")
                done = all(members_of(x) == rest and "desired" not in (x.get("cluster") or {})
                           for x in (info, consumer))
                return consumer if done else None

            consumer = await until(shrunk, "R3 and D on the two other servers", SETTLE)
            assert consumer["delivered"]["stream_seq"] == 3 and consumer["ack_floor"]["stream_seq"] == 3, consumer
            client = ncs[names.index(rest[0])]
            sub = await client.jetstream().pull_subscribe_bind("D", stream="R3")
            more = await sub.fetch(3, timeout=5)
            assert [m.metadata.sequence.stream for m in more] == [4, 5, 6]
            assert all(m.metadata.num_delivered == 1 for m in more)

    run(main)
