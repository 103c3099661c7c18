"""A replicated consumer in a mixed cluster: one natserver (``n3``) and two nats-server 2.15.1
(runs when the 2.15.1 binary is found, as the other live tests). An R3 stream and an R3 durable
pull consumer on all three:

- led by 2.15.1: messages pulled and acked through a 2.15.1 client; the natserver, a follower,
  applies 2.15.1's entries (its replicated state is 2.15.1's CONSUMER.INFO); after a step-down
  to it, its CONSUMER.INFO (answered to a 2.15.1 client) has 2.15.1's delivered, ack floor and
  pending counts, and it delivers what 2.15.1 had not;
- led by the natserver: the rest pulled and acked; after a step-down back to 2.15.1, 2.15.1's
  CONSUMER.INFO is the natserver's (2.15.1 applied the natserver's entries).
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
    leader_info,
    natserver_options,
    until_created,
)
from tests.jetstream.cluster.test_live_mixed_r3 import publish
from tests.raft.nrg_cluster import APP_USER, Client, tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 180  # seconds for the whole test (2.15.1 elections take 4-9 s, a few of them)
STREAM = {"name": "M3", "subjects": ["m3.>"], "num_replicas": 3}
CONSUMER = {"stream_name": "M3", "config": {"durable_name": "C", "ack_policy": "explicit", "num_replicas": 3}}
INFO = "$JS.API.CONSUMER.INFO.M3.C"


async def consumer_leader(port: int) -> dict:
    """CONSUMER.INFO once a leader answers it."""
    return await leader_info(port, INFO)


async def lead_consumer_with(port: int, wanted: set[str]) -> dict:
    """Step-downs until one of ``wanted`` leads the consumer: its CONSUMER.INFO."""
    return await lead_with(port, INFO, "$JS.API.CONSUMER.LEADER.STEPDOWN.M3.C", wanted)


async def pull(port: int, count: int, ack: set[int] | None = None, stream: str = "M3") -> list[int]:
    """``count`` messages of ``stream``'s consumer C pulled through a client of the server at
    ``port``; those whose stream sequence is in ``ack`` (all, without it) acked, each ack
    answered by the leader. Their sequences."""
    client = await Client.open(port, APP_USER)
    seqs = []
    try:
        with trio.fail_after(STEP):
            await client.sub("_INBOX.pull")
            await client.pub(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.C", b'{"batch": %d}' % count, "_INBOX.pull")
            replies = []
            while len(replies) < count:
                _, reply, _ = await client.next_msg()
                assert reply.startswith(f"$JS.ACK.{stream}.C."), reply
                replies.append(reply)
            for reply in replies:
                seq = int(reply.split(".")[-4])
                seqs.append(seq)
                if ack is None or seq in ack:
                    await client.request(reply, b"+ACK")
    finally:
        await client.stream.aclose()
    return seqs


def progress(info: dict) -> tuple:
    return (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"], info["ack_floor"]["consumer_seq"],
            info["ack_floor"]["stream_seq"], info["num_ack_pending"], info["num_pending"])


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
            for n in range(10):
                ack = await publish(py.port, f"m3.{n}", n)
                assert ack == {"stream": "M3", "seq": n + 1}, ack
            created = await until_created(go1.port, "$JS.API.CONSUMER.DURABLE.CREATE.M3.C", CONSUMER)
            assert len(created["cluster"]["replicas"]) == 2, created

            # 2.15.1 leads: five pulled, three acked (its proposals go as batches: several
            # entries at one log index); the natserver follows its entries.
            await lead_consumer_with(go1.port, {"n1", "n2"})
            assert await pull(go2.port, 5, {1, 2, 4}) == [1, 2, 3, 4, 5]
            groups = server.jetstream.cluster.consumer_groups
            want = {"delivered": [5, 5], "ack_floor": [2, 2], "num_ack_pending": 2}

            def mine() -> dict:
                return {k: v for k, v in (groups.state("APP", "M3", "C") or {}).items() if k in want}

            with trio.move_on_after(STEP):
                while mine() != want:
                    await trio.sleep(POLL)
            assert mine() == want, groups.state("APP", "M3", "C")
            theirs = await consumer_leader(go1.port)
            assert progress(theirs) == (5, 5, 2, 2, 2, 5), theirs
            report["followed"] = True

            # The natserver leads: 2.15.1's state, the same info's shape; it delivers the rest.
            ours = await lead_consumer_with(go2.port, {"n3"})
            assert progress(ours) == progress(theirs), (ours, theirs)
            assert list(ours) == list(theirs) and list(ours["cluster"]) == list(theirs["cluster"]), (ours, theirs)
            assert sorted(r["name"] for r in ours["cluster"]["replicas"]) == ["n1", "n2"], ours
            assert await pull(go1.port, 5, {6, 7, 8, 9, 10}) == [6, 7, 8, 9, 10]
            ours = await consumer_leader(go2.port)
            assert ours["cluster"]["leader"] == "n3" and progress(ours) == (10, 10, 2, 2, 2, 0), ours
            report["natserver_led"] = True

            # 2.15.1 leads again, from the natserver's entries.
            theirs = await lead_consumer_with(go1.port, {"n1", "n2"})
            assert progress(theirs) == progress(ours), (theirs, ours)
            report["went_back"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_an_r3_consumer_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report == {"followed": True, "natserver_led": True, "went_back": True}


