"""Replica changes by STREAM.UPDATE in a mixed cluster: one natserver (``n3``) and two
nats-server 2.15.1 (runs when the 2.15.1 binary is found, as the other live tests):

- with a 2.15.1 meta leader, an R1 stream scaled to R3 (the natserver among its servers: it
  applies 2.15.1's desired-state assignments, as the stream's leader or a follower) and back
  to R1, every acked message on the natserver's store while it holds the stream;
- with the natserver as the meta leader (a 2.15.1 leader hands over to it), another R1 stream
  scaled to R3 (its two 2.15.1 servers follow the natserver's desired state, reporting their
  steps to it when they lead) and back, every message in 2.15.1's MSG.GET answers.
"""

from __future__ import annotations

import base64
from pathlib import Path

import trio

import natserver
from tests.jetstream.cluster.test_live_mixed import (
    POLL,
    STEP,
    MixedCluster,
    bounded,
    natserver_options,
    request,
    sys_request,
    until_created,
)
from tests.raft.nrg_cluster import tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 240  # seconds for the whole test (2.15.1 elections take 4-9 s, a few of them)
SETTLE = 60  # seconds for a replica change to settle
MESSAGES = 5


async def info_of(port: int, name: str) -> dict:
    with trio.move_on_after(5):
        try:
            return await request(port, f"$JS.API.STREAM.INFO.{name}")
        except OSError:
            return {}
    return {}


async def settled(port: int, name: str, replicas: int) -> dict:
    """The stream's info once its group has no desired state and ``replicas`` current members."""
    last: dict = {}
    with trio.move_on_after(SETTLE):
        while True:
            last = await info_of(port, name)
            cluster = last.get("cluster") or {}
            reps = cluster.get("replicas") or []
            if (cluster.get("leader") and "desired" not in cluster and len(reps) == replicas - 1
                    and all(r.get("current") for r in reps)):
                return last
            await trio.sleep(POLL)
    raise AssertionError(f"{name} not settled at R{replicas} within {SETTLE} s: {last}")


async def publish(port: int, subject: str, n: int) -> dict:
    with trio.fail_after(STEP):
        while True:
            with trio.move_on_after(5):
                ack = await request(port, subject, {"n": n})
                if "error" not in ack:
                    return ack
            await trio.sleep(POLL)


def stored(server, name: str) -> list[tuple[int, bytes]]:
    stream = server.jetstream.streams.get(name)
    if stream is None:
        return []
    store = stream.store
    out = []
    for seq in range(store.first_seq, store.last_seq + 1):
        sm = store.load_msg(seq)
        if sm is not None:
            out.append((seq, bytes(sm.data)))
    return out


async def until_stored(server, name: str, expected: list[tuple[int, bytes]]) -> None:
    with trio.fail_after(SETTLE):
        while stored(server, name) != expected:
            await trio.sleep(POLL)


async def msg_gets(port: int, name: str, count: int) -> list[tuple[int, bytes]]:
    out = []
    for seq in range(1, count + 1):
        message = (await request(port, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq}))["message"]
        out.append((message["seq"], base64.b64decode(message.get("data", ""))))
    return out


def members(info: dict) -> list[str]:
    cluster = info["cluster"]
    return sorted([cluster["leader"]] + [r["name"] for r in cluster.get("replicas") or ()])


async def scale(port: int, name: str, config: dict, replicas: int) -> dict:
    with trio.move_on_after(STEP):
        while True:  # (10005 while the meta leader has not heard every server's STATSZ yet)
            answer = await request(port, f"$JS.API.STREAM.UPDATE.{name}", dict(config, num_replicas=replicas))
            if answer.get("error", {}).get("err_code") != 10005:
                break
            await trio.sleep(POLL)
    assert answer.get("config", {}).get("num_replicas") == replicas, answer
    assert "desired" in answer["cluster"], answer
    return await settled(port, name, replicas)


async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, py))
            meta = server.jetstream.cluster

            # A 2.15.1 meta leader scales an R1 stream to R3 (the natserver among them) and back.
            created = await until_created(go1.port, "$JS.API.STREAM.CREATE.GS", {"name": "GS", "subjects": ["gs.>"]})
            with trio.fail_after(STEP):
                while meta.group is None or not meta.group.node.leader:
                    await trio.sleep(POLL)
            if meta.is_leader:
                stepped = await sys_request(py.port, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "n1"}})
                assert stepped.get("success") is True, stepped
                with trio.fail_after(STEP):
                    while meta.is_leader or not meta.group.node.leader:
                        await trio.sleep(POLL)
            expected = []
            for n in range(MESSAGES):
                ack = await publish(py.port, "gs.a", n)
                expected.append((ack["seq"], b'{"n": %d}' % n))
            info = await scale(go2.port, "GS", created["config"], 3)
            assert members(info) == ["n1", "n2", "n3"], info
            await until_stored(server, "GS", expected)
            ack = await publish(go1.port, "gs.a", MESSAGES)
            expected.append((ack["seq"], b'{"n": %d}' % MESSAGES))
            await until_stored(server, "GS", expected)
            info = await scale(py.port, "GS", created["config"], 1)
            assert info["state"]["messages"] == MESSAGES + 1, info
            if info["cluster"]["leader"] == "n3":
                await until_stored(server, "GS", expected)
            else:
                with trio.fail_after(STEP):
                    while "GS" in server.jetstream.streams:  # (a removed member drops its copy)
                        await trio.sleep(POLL)
            report["go_meta"] = True

            # The natserver leads the meta group and scales another R1 stream to R3 and back.
            stepped = await sys_request(go1.port, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "n3"}})
            assert stepped.get("success") is True, stepped
            with trio.fail_after(STEP):
                while not meta.is_leader:
                    await trio.sleep(POLL)
            created = await until_created(go1.port, "$JS.API.STREAM.CREATE.PS", {"name": "PS", "subjects": ["ps.>"]})
            for n in range(MESSAGES):
                await publish(py.port, "ps.a", n)
            info = await scale(go1.port, "PS", created["config"], 3)
            assert members(info) == ["n1", "n2", "n3"], info
            expected = [(n + 1, b'{"n": %d}' % n) for n in range(MESSAGES)]
            await until_stored(server, "PS", expected)
            for port in (go1.port, go2.port):
                assert await msg_gets(port, "PS", MESSAGES) == expected
            info = await scale(go2.port, "PS", created["config"], 1)
            assert info["state"]["messages"] == MESSAGES, info
            assert await msg_gets(go1.port, "PS", MESSAGES) == expected
            report["natserver_meta"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_replica_changes_in_a_cluster_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report == {"go_meta": True, "natserver_meta": True}


