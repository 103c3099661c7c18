"""Replica changes of a stream with a durable consumer in a mixed cluster: one natserver (``n3``)
and two nats-server 2.15.1 (runs when the 2.15.1 binary is found, as the other live tests). An
R3 stream and a durable pull consumer whose replicas follow it; five pulled, three acked; then
R3 -> R1 -> R3:

- with a 2.15.1 meta leader (the natserver's consumer group member applies 2.15.1's desired
  state for the consumer and, when it leads the consumer's group, reports its steps to it);
- with the natserver as the meta leader (2.15.1's consumer leaders report to it);

each time the consumer's delivered sequences, ack floor and pending count are the same after
each change (CONSUMER.INFO from either kind of server, and the natserver's own state while it
holds the consumer), and pulling goes on with the next messages, never an acked one.
"""

from __future__ import annotations

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
from tests.jetstream.cluster.test_live_mixed_r3 import publish
from tests.jetstream.cluster.test_live_mixed_r3_consumers import pull
from tests.jetstream.cluster.test_live_mixed_scale import settled
from tests.raft.nrg_cluster import tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 400  # seconds for the whole test (2.15.1 elections take 4-9 s, many of them)
SETTLE = 90  # seconds for a consumer's replica change to settle (after its stream's)
ACK_WAIT = 120_000_000_000  # ns: nothing delivered and not acked comes again during the test


async def consumer_at(port: int, stream: str, replicas: int) -> dict:
    """CONSUMER.INFO of ``stream``'s consumer C once its group has ``replicas`` members and no desired state."""
    last: dict = {}
    with trio.move_on_after(SETTLE):
        while True:
            with trio.move_on_after(3):
                last = await request(port, f"$JS.API.CONSUMER.INFO.{stream}.C")
                cluster = last.get("cluster") or {}
                if (cluster.get("leader") and "desired" not in cluster
                        and len(cluster.get("replicas") or ()) == replicas - 1):
                    return last
            await trio.sleep(POLL)
    raise AssertionError(f"{stream}'s C not at R{replicas} within {SETTLE} s: {last}")


def progress(info: dict) -> dict:
    return {"delivered": [info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]],
            "ack_floor": [info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]],
            "num_ack_pending": info["num_ack_pending"]}


def ours(server, stream: str) -> dict | None:
    """The natserver's state of C: its group member's, or the R1 consumer it runs."""
    js = server.jetstream
    state = js.cluster.consumer_groups.state("APP", stream, "C")
    if state is not None:
        return {k: state[k] for k in ("delivered", "ack_floor", "num_ack_pending")}
    local = js.streams.get(stream)
    consumer = local.consumers.get("C") if local is not None else None
    if consumer is None:
        return None
    return {"delivered": [consumer.delivered_cseq, consumer.state_sseq],
            "ack_floor": [consumer.ack_floor_cseq, consumer.ack_floor_sseq], "num_ack_pending": len(consumer.pending)}


async def ours_is(server, stream: str, want: dict | None) -> None:
    with trio.move_on_after(SETTLE):
        while ours(server, stream) != want:
            await trio.sleep(POLL)
    assert ours(server, stream) == want, (ours(server, stream), want)


async def scale(port: int, stream: str, config: dict, replicas: int) -> dict:
    with trio.move_on_after(STEP):
        while True:  # (10005 while the meta leader has not heard every server's STATSZ yet)
            answer = await request(port, f"$JS.API.STREAM.UPDATE.{stream}", dict(config, num_replicas=replicas))
            if answer.get("error", {}).get("err_code") != 10005:
                break
            await trio.sleep(POLL)
    assert answer.get("config", {}).get("num_replicas") == replicas, answer
    return await settled(port, stream, replicas)


async def round_trip(server, ports: list[int], stream: str) -> None:
    """The stream (R3) with consumer C: five pulled, three acked, then R1 and R3 again, the
    consumer's state the same after each, pulling going on."""
    go1, go2, py = ports
    created = await until_created(go1, f"$JS.API.STREAM.CREATE.{stream}",
                                  {"name": stream, "subjects": [f"{stream.lower()}.>"], "num_replicas": 3})
    for n in range(15):
        await publish(py, f"{stream.lower()}.{n}", n)
    await until_created(go2, f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.C", {"stream_name": stream, "config": {
        "durable_name": "C", "ack_policy": "explicit", "ack_wait": ACK_WAIT}})
    assert await pull(go1, 5, {1, 2, 4}, stream) == [1, 2, 3, 4, 5]
    want = {"delivered": [5, 5], "ack_floor": [2, 2], "num_ack_pending": 2}
    assert progress(await consumer_at(py, stream, 3)) == want
    await ours_is(server, stream, want)

    info = await scale(go2, stream, created["config"], 1)
    assert progress(await consumer_at(go1, stream, 1)) == want
    assert progress(await consumer_at(py, stream, 1)) == want
    await ours_is(server, stream, want if info["cluster"]["leader"] == "n3" else None)
    assert await pull(py, 5, {6, 7, 8, 9, 10}, stream) == [6, 7, 8, 9, 10]
    want = {"delivered": [10, 10], "ack_floor": [2, 2], "num_ack_pending": 2}
    assert progress(await consumer_at(go2, stream, 1)) == want

    await scale(py, stream, created["config"], 3)
    assert progress(await consumer_at(go1, stream, 3)) == want
    await ours_is(server, stream, want)
    assert await pull(go2, 5, set(), stream) == [11, 12, 13, 14, 15]


async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    ports = [go1.port, go2.port, py.port]
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, py))
            meta = server.jetstream.cluster
            await until_created(go1.port, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"]})
            with trio.fail_after(STEP):
                while meta.group is None or not meta.group.node.leader:
                    await trio.sleep(POLL)
            if meta.is_leader:
                stepped = await sys_request(py.port, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "n1"}})
                assert stepped.get("success") is True, stepped
                with trio.fail_after(STEP):
                    while meta.is_leader or not meta.group.node.leader:
                        await trio.sleep(POLL)
            await round_trip(server, ports, "GM")
            report["go_meta"] = True

            stepped = await sys_request(go1.port, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": "n3"}})
            assert stepped.get("success") is True, stepped
            with trio.fail_after(STEP):
                while not meta.is_leader:
                    await trio.sleep(POLL)
            await round_trip(server, ports, "PM")
            report["natserver_meta"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_replica_changes_with_a_consumer_in_a_cluster_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report == {"go_meta": True, "natserver_meta": True}
