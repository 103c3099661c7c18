"""A stream's replicas changed by STREAM.UPDATE, as nats-server 2.15.1 changes them (desired.py:
the meta leader records the target as the group's desired state, the stream group's leader
drives it there step by step over $SYS.JSC.STREAM.ASSIGNMENT.RECONCILE), in clusters of
in-process natservers (real clocks, bounded polls, a hard timeout on each test): R1 -> R3 ->
R1 -> R3 on three servers and R3 -> R5 -> R3 on five, then STREAM.PEER.REMOVE of a follower and
of the leader (each replaced by a free server), each answer compared with a 5-node 2.15.1
cluster's (data/scale_nats_server_2.15.1.json, ``python -m tests.jetstream.cluster.record_scale``),
the placement that results, every acked message on every new replica, publishing going on,
removed servers without their copy; and what is not built yet refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, cluster_options, connect, run, same_shape, until
from tests.jetstream.cluster.test_r3_streams import contents, publish

DATA = Path(__file__).parent / "data" / "scale_nats_server_2.15.1.json"
_T = "io.nats.jetstream.api.v1."
SETTLE = 60.0  # seconds for a replica change to settle (an election or two, catch-ups)
CONFIG = {"name": "S", "subjects": ["s.>"]}


def recorded(name: str):
    return json.loads(DATA.read_text())[name]


def step(replicas: int, index: int = 0) -> dict:
    return [s for s in recorded("steps") if s["replicas"] == replicas][index]


def members(info: dict) -> list[str]:
    cluster = info.get("cluster") or {}
    return sorted([cluster.get("leader", "")] + [r["name"] for r in cluster.get("replicas") or ()])


def holders(cluster: NatsCluster) -> list[int]:
    return [i for i, node in enumerate(cluster.servers)
            if node.running and node.server is not None and node.server.jetstream is not None
            and "S" in node.server.jetstream.streams]


async def settled(nc, replicas: int) -> dict:
    """The stream's info once its group has no desired state left and lists ``replicas`` current members."""
    async def check():
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        cluster = info.get("cluster") or {}
        reps = cluster.get("replicas") or []
        if (cluster.get("leader") and "desired" not in cluster and len(reps) == replicas - 1
                and all(r.get("current") for r in reps)):
            return info
        return None
    return await until(check, f"S settled at R{replicas}", SETTLE)


async def settled_without(nc, gone: str) -> dict:
    """The stream's info once it settled at R3 without ``gone``."""
    async def check():
        info = await settled(nc, 3)
        return info if gone not in members(info) else None
    return await until(check, f"S settled without {gone}", SETTLE)


async def everywhere(cluster: NatsCluster, expected: list) -> None:
    """Every server holding the stream holds exactly ``expected`` (seq, subject, payload)."""
    async def check():
        views = [contents(cluster, i, "S") for i in holders(cluster)]
        return all(v == expected for v in views) or None
    await until(check, "every acked message on every replica", SETTLE)


async def as_async(value):
    return value


def check_update(answer: dict, replicas: int, recorded_step: dict) -> None:
    theirs = recorded_step["update"]
    assert answer["type"] == _T + "stream_update_response", answer
    assert answer["config"]["num_replicas"] == replicas
    assert list(answer) == list(theirs)
    desired = answer["cluster"].get("desired")
    assert desired is not None and desired["origin"] == theirs["cluster"]["desired"]["origin"]
    assert ("replicas" in desired) == ("replicas" in theirs["cluster"]["desired"])


def test_scale_r1_to_r3_and_back(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            created = await api(ncs[0], "$JS.API.STREAM.CREATE.S", CONFIG)
            assert created["config"]["num_replicas"] == 1
            expected = []
            for n in range(5):
                ack = await publish(ncs[n % 3], "s.a", b"m%d" % n)
                expected.append((ack.seq, b"s.a", b"m%d" % n))
            cfg = dict(created["config"])

            cfg["num_replicas"] = 3
            answer = await api(ncs[1], "$JS.API.STREAM.UPDATE.S", cfg)
            check_update(answer, 3, step(3))
            info = await settled(ncs[2], 3)
            assert list(info) == list(step(3)["info"])
            same_shape(info["cluster"], step(3)["info"]["cluster"])
            assert members(info) == sorted(n.options.server_name for n in cluster.servers)
            assert sorted(holders(cluster)) == [0, 1, 2]
            await everywhere(cluster, expected)
            for n in range(5, 10):
                ack = await publish(ncs[n % 3], "s.a", b"m%d" % n)
                expected.append((ack.seq, b"s.a", b"m%d" % n))
            await everywhere(cluster, expected)

            cfg["num_replicas"] = 1
            answer = await api(ncs[0], "$JS.API.STREAM.UPDATE.S", cfg)
            check_update(answer, 1, step(1))
            info = await settled(ncs[1], 1)
            assert info["cluster"] == {"name": cluster.name, "leader": info["cluster"]["leader"]}
            assert info["state"]["messages"] == 10
            await until(lambda: as_async(len(holders(cluster)) == 1), "the removed servers without their copy", SETTLE)
            await everywhere(cluster, expected)
            ack = await publish(ncs[2], "s.a", b"m10")
            assert ack.seq == 11
            expected.append((11, b"s.a", b"m10"))
            await everywhere(cluster, expected)

            cfg["num_replicas"] = 3  # (again: the settled group of one starts a new RAFT group)
            check_update(await api(ncs[2], "$JS.API.STREAM.UPDATE.S", cfg), 3, step(3))
            await settled(ncs[0], 3)
            await everywhere(cluster, expected)
            assert sorted(holders(cluster)) == [0, 1, 2]

    run(main)


def test_a_move_is_refused(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            created = await api(ncs[0], "$JS.API.STREAM.CREATE.S", CONFIG)
            moved = await api(ncs[1], "$JS.API.STREAM.UPDATE.S", dict(created["config"], placement={"tags": ["x"]}))
            assert moved["error"] == {"code": 500, "err_code": 10069, "description":
                                      "natserver does not support moving a clustered stream yet"}
            moved = await api(ncs[1], "$JS.API.STREAM.UPDATE.S", dict(created["config"], placement={"tags": ["x"]},
                                                                          num_replicas=3))
            assert moved["error"]["err_code"] == 10123
            info = await api(ncs[2], "$JS.API.STREAM.INFO.S")
            assert info["config"]["num_replicas"] == 1 and "desired" not in info["cluster"]

    run(main)


@pytest.fixture
def five():
    with NatsCluster(5, jetstream=True, **cluster_options()) as c:
        yield c


async def meta_of_all(sys_nc, size: int) -> str | None:
    """The meta leader once all ``size`` servers agree on it and the group has them all."""
    inbox = sys_nc.new_inbox()
    sub = await sys_nc.subscribe(inbox)
    await sys_nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
    views = []
    try:
        while len(views) < size:
            views.append(json.loads((await sub.next_msg(timeout=1.0)).data)["data"].get("meta_cluster", {}))
    except nats.errors.TimeoutError:
        return None
    finally:
        await sub.unsubscribe()
    leaders = {v.get("leader") for v in views}
    if len(leaders) == 1 and None not in leaders and {v.get("cluster_size") for v in views} == {size}:
        return leaders.pop()
    return None


def test_scale_r3_to_r5_and_back_on_five_servers(five):
    async def main():
        ncs = [await connect(url) for url in five.urls]
        sys_nc = await connect(five.urls[0], "sys")
        try:
            await until(lambda: meta_of_all(sys_nc, 5), "a meta leader of five servers")
            created = await until(lambda: created_r3(ncs[0]), "S created with 3 replicas")
            first = members(await settled(ncs[1], 3))
            expected = []
            for n in range(6):
                ack = await publish(ncs[n % 5], "s.a", b"m%d" % n)
                expected.append((ack.seq, b"s.a", b"m%d" % n))
            cfg = dict(created["config"], num_replicas=5)
            answer = await api(ncs[3], "$JS.API.STREAM.UPDATE.S", cfg)
            check_update(answer, 5, step(5))
            info = await settled(ncs[4], 5)
            same_shape(info["cluster"], step(5)["info"]["cluster"])
            assert members(info) == sorted(n.options.server_name for n in five.servers)
            await everywhere(five, expected)
            assert len(holders(five)) == 5

            cfg["num_replicas"] = 3
            answer = await api(ncs[2], "$JS.API.STREAM.UPDATE.S", cfg)
            check_update(answer, 3, step(3, 1))
            info = await settled(ncs[0], 3)
            same_shape(info["cluster"], step(3, 1)["info"]["cluster"])
            kept = members(info)
            assert len(kept) == 3 and info["cluster"]["leader"] in kept
            await until(lambda: as_async(sorted(five.servers[i].options.server_name for i in holders(five)) == kept),
                        "the removed servers without their copy", SETTLE)
            await everywhere(five, expected)
            for n in range(6, 9):
                ack = await publish(ncs[n % 5], "s.a", b"m%d" % n)
                expected.append((ack.seq, b"s.a", b"m%d" % n))
            await everywhere(five, expected)
            assert first  # (the first placement: three of the five)

            # STREAM.PEER.REMOVE of a follower, then of the leader: each replaced by a free
            # server, its copy dropped, every message on the new replicas.
            for victim in (info["cluster"]["replicas"][0]["name"], None):
                if victim is None:
                    victim = (await settled(ncs[0], 3))["cluster"]["leader"]
                removed = await api(ncs[4], "$JS.API.STREAM.PEER.REMOVE.S", {"peer": victim})
                assert removed == recorded("peer_remove")
                info = await settled_without(ncs[1], victim)
                assert len(members(info)) == 3
                await until(lambda: as_async(victim not in [five.servers[i].options.server_name
                                                            for i in holders(five)]),
                            f"{victim} without its copy", SETTLE)
                await everywhere(five, expected)
                ack = await publish(ncs[1], "s.a", b"after-%s" % victim.encode())
                expected.append((ack.seq, b"s.a", b"after-%s" % victim.encode()))
                await everywhere(five, expected)
        finally:
            for nc in [*ncs, sys_nc]:
                await nc.close()

    run(main)


async def created_r3(nc) -> dict | None:
    answer = await api(nc, "$JS.API.STREAM.CREATE.S", dict(CONFIG, num_replicas=3), timeout=15)
    return answer if "error" not in answer else None
