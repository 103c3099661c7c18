"""An R3 workqueue stream and its R3 consumer in a mixed cluster: one natserver (``n3``) and two
nats-server 2.15.1 (runs when the 2.15.1 binary is found, as the other live tests):

- a 2.15.1 server leads the stream: what is pulled and acked leaves every replica, the
  natserver's too (2.15.1's streamMsgDelete applied);
- the natserver leads the stream and a 2.15.1 server the consumer: the natserver applies
  2.15.1's replicated acks and proposes the removals, which the 2.15.1 replicas apply (their
  STREAM.INFO once one of them leads again).
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
    lead_with,
    natserver_options,
    request,
    until_created,
)
from tests.jetstream.cluster.test_live_mixed_r3 import publish
from tests.jetstream.cluster.test_live_mixed_r3_consumers import pull
from tests.raft.nrg_cluster import tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 240  # seconds for the whole test (2.15.1 elections take 4-9 s, a few of them)
MESSAGES = 6
STREAM = {"name": "WQ", "subjects": ["wq.>"], "num_replicas": 3, "retention": "workqueue"}
CONSUMER = {"stream_name": "WQ", "config": {"durable_name": "C", "ack_policy": "explicit", "num_replicas": 3}}




async def stream_state(port: int, want: tuple[int, int, int]) -> tuple[int, int, int]:
    """The stream's (messages, first, last) as the server at ``port`` reports it, once it is
    ``want`` (or after STEP: the acks' removals are applied after the acks are answered, by
    2.15.1 too)."""
    state = (-1, -1, -1)
    with trio.move_on_after(STEP):
        while state != want:
            with trio.move_on_after(3):
                info = await request(port, "$JS.API.STREAM.INFO.WQ")
                if "state" in info:
                    got = info["state"]
                    state = got["messages"], got["first_seq"], got["last_seq"]
                    if state == want:
                        break
            await trio.sleep(POLL)
    return state




async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, py))
            await until_created(go1.port, "$JS.API.STREAM.CREATE.WQ", STREAM)
            for n in range(MESSAGES):
                ack = await publish(py.port, f"wq.{n}", n)
                assert ack == {"stream": "WQ", "seq": n + 1}, ack
            await until_created(go1.port, "$JS.API.CONSUMER.DURABLE.CREATE.WQ.C", CONSUMER)
            store = server.jetstream.cluster.engines["APP"].streams["WQ"].store

            async def natserver_holds(want: tuple[int, int, int]) -> None:
                with trio.move_on_after(STEP):
                    while (store.msgs, store.first_seq, store.last_seq) != want:
                        await trio.sleep(POLL)
                assert (store.msgs, store.first_seq, store.last_seq) == want

            # 2.15.1 leads the stream: three pulled and acked, gone from the natserver's replica.
            await lead_with(go1.port, "$JS.API.STREAM.INFO.WQ", "$JS.API.STREAM.LEADER.STEPDOWN.WQ", {"n1", "n2"})
            assert await pull(go2.port, 3, stream="WQ") == [1, 2, 3]
            assert await stream_state(go1.port, (3, 4, MESSAGES)) == (3, 4, MESSAGES)
            await natserver_holds((3, 4, MESSAGES))
            report["2.15.1_removed"] = True

            # The natserver leads the stream, 2.15.1 the consumer: its acks, the natserver's removals.
            await lead_with(go1.port, "$JS.API.STREAM.INFO.WQ", "$JS.API.STREAM.LEADER.STEPDOWN.WQ", {"n3"})
            await lead_with(go1.port, "$JS.API.CONSUMER.INFO.WQ.C", "$JS.API.CONSUMER.LEADER.STEPDOWN.WQ.C",
                            {"n1", "n2"})
            assert await pull(py.port, 3, stream="WQ") == [4, 5, 6]
            await natserver_holds((0, MESSAGES + 1, MESSAGES))
            assert await stream_state(go2.port, (0, MESSAGES + 1, MESSAGES)) == (0, MESSAGES + 1, MESSAGES)
            await lead_with(go1.port, "$JS.API.STREAM.INFO.WQ", "$JS.API.STREAM.LEADER.STEPDOWN.WQ", {"n1", "n2"})
            assert await stream_state(go2.port, (0, MESSAGES + 1, MESSAGES)) == (0, MESSAGES + 1, MESSAGES)
            report["natserver_removed"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_an_r3_workqueue_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report == {"2.15.1_removed": True, "natserver_removed": True}


