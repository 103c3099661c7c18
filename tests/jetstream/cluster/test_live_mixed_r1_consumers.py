"""R1 consumers of an R3 stream in a mixed cluster: one natserver (``n3``) and two nats-server
2.15.1 (runs when the 2.15.1 binary is found, as the other live tests). 2.15.1's meta leader
places R1 durables (``num_replicas: 1``) on one of the stream's servers at random
(createGroupForConsumer); R1 consumers are created until one is placed on the natserver, which
runs it over its replica of the stream: its messages pulled and acked through a 2.15.1 client,
its CONSUMER.INFO (answered by the natserver) through another; one placed on a 2.15.1 server
is pulled through the natserver's client (the natserver stays silent, 2.15.1 answers).
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
from tests.raft.nrg_cluster import APP_USER, Client, tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 180  # seconds for the whole test (2.15.1 elections take 4-9 s, a few of them)
MESSAGES = 5
# R1 consumers created at most until one is placed on the natserver and one on a 2.15.1 server
# (each lands on the natserver with probability 1/3: the chance that none of 24 does is below 1e-4).
TRIES = 24
STREAM = {"name": "M3", "subjects": ["m3.>"], "num_replicas": 3}


def consumer(name: str) -> dict:
    return {"stream_name": "M3", "config": {"durable_name": name, "ack_policy": "explicit", "num_replicas": 1}}


async def info(port: int, name: str) -> dict:
    """CONSUMER.INFO once its server answers."""
    with trio.fail_after(STEP):
        while True:
            with trio.move_on_after(3):
                answer = await request(port, f"$JS.API.CONSUMER.INFO.M3.{name}")
                if answer.get("cluster", {}).get("leader"):
                    return answer
            await trio.sleep(POLL)


async def pull_all(port: int, name: str) -> list[int]:
    """Every message pulled through a client of the server at ``port`` and acked (each ack
    answered by the consumer's server): their stream sequences."""
    client = await Client.open(port, APP_USER)
    seqs = []
    try:
        with trio.fail_after(STEP):
            await client.sub("_INBOX.pull")
            await client.pub(f"$JS.API.CONSUMER.MSG.NEXT.M3.{name}", b'{"batch": %d}' % MESSAGES, "_INBOX.pull")
            replies = []
            while len(replies) < MESSAGES:
                _, reply, _ = await client.next_msg()
                assert reply.startswith(f"$JS.ACK.M3.{name}."), reply
                replies.append(reply)
            for reply in replies:
                seqs.append(int(reply.split(".")[-4]))
                await client.request(reply, b"+ACK")
    finally:
        await client.stream.aclose()
    return seqs


async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, py))
            await until_created(go1.port, "$JS.API.STREAM.CREATE.M3", STREAM)
            for n in range(MESSAGES):
                ack = await publish(py.port, f"m3.{n}", n)
                assert ack == {"stream": "M3", "seq": n + 1}, ack
            jsc = server.jetstream.cluster
            with trio.fail_after(STEP):  # (2.15.1's meta leader places them: the natserver hands over)
                while jsc.is_leader or jsc.leaderless():
                    if jsc.is_leader:
                        with trio.move_on_after(3):
                            await sys_request(py.port, "$JS.API.META.LEADER.STEPDOWN")
                    await trio.sleep(POLL)
            placed: dict[str, str] = {}  # consumer -> the server running it
            for n in range(TRIES):
                name = f"R{n}"
                assert not jsc.is_leader
                created = await until_created(go1.port, f"$JS.API.CONSUMER.DURABLE.CREATE.M3.{name}", consumer(name))
                assert "replicas" not in created["cluster"], created
                placed[name] = created["cluster"]["leader"]
                if "n3" in placed.values() and set(placed.values()) != {"n3"}:
                    break
            ours = next(name for name, where in placed.items() if where == "n3")
            report["placed"] = True

            # The natserver runs it: pulled and acked through a 2.15.1 client; its info,
            # asked through the other 2.15.1 server, is the natserver's.
            assert await pull_all(go1.port, ours) == list(range(1, MESSAGES + 1))
            answer = await info(go2.port, ours)
            assert answer["cluster"] == {"name": cluster.name, "leader": "n3"}, answer
            assert (answer["delivered"]["stream_seq"], answer["ack_floor"]["stream_seq"], answer["num_pending"],
                    answer["num_ack_pending"]) == (MESSAGES, MESSAGES, 0, 0), answer
            report["natserver_ran"] = True

            # One that 2.15.1 runs, used through the natserver's client.
            theirs = next(name for name, where in placed.items() if where != "n3")
            assert await pull_all(py.port, theirs) == list(range(1, MESSAGES + 1))
            other = await info(py.port, theirs)
            assert other["cluster"]["leader"] == placed[theirs] and other["num_ack_pending"] == 0, other
            # (the same answer's shape: 2.15.1's and the natserver's)
            assert list(answer) == list(other) and list(answer["cluster"]) == list(other["cluster"]), (answer, other)
            report["2.15.1_ran"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_r1_consumers_of_an_r3_stream_placed_by_2_15_1_on_the_natserver():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report == {"placed": True, "natserver_ran": True, "2.15.1_ran": True}


