"""Counters (2.12+ ``allow_msg_counter``) on a replicated stream (issue #32, "everything on top
keeps working in a cluster"): the leader adds each increment to the subject's total, counting
the increments still in flight (jetstream_cluster.go processClusteredInboundMsg: many are
proposed before the first is applied), proposes the message with the total, and answers with
the total (PubAck ``val``) once applied; every replica stores the same totals.

- natserver only: three in-process servers; increments from clients on every server, many in
  flight at once, a leader step-down in the middle; the acks' totals, each replica's messages.
- mixed: one natserver and two nats-server 2.15.1 (when its binary is found); the increments
  through either leader kind, the natserver's stored totals equal to 2.15.1's.

Real clocks, bounded polls, a hard timeout on each test."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from natserver.testing import NatsServer
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, until
from tests.jetstream.cluster.test_live_mixed import MixedCluster, natserver_options
from tests.jetstream.cluster.test_r3_consumers_more import cluster, on, run  # noqa: F401 (cluster: a fixture)
from tests.raft.nrg_cluster import APP_USER, PASSWORD, tempdir
from tests.reference import NATS_SERVER, needs_nats_server

ACCOUNT = "APP"
STREAM = {"name": "C", "subjects": ["c.>"], "num_replicas": 3, "allow_msg_counter": True}
IN_FLIGHT = 20  # increments sent before any answer is awaited
MIXED_TIMEOUT = 180.0  # seconds for the mixed test (2.15.1's elections: 4-9 s, a few of them)


async def incr(nc, subject: str, value: str) -> dict:
    msg = await nc.request(subject, b"", headers={"Nats-Incr": value}, timeout=REQUEST_TIMEOUT)
    return json.loads(msg.data)


async def many(nc, subject: str, count: int) -> list[str]:
    """``count`` increments of 1 in flight together: their acks' totals, in order sent."""
    acks = await asyncio.gather(*(incr(nc, subject, "1") for _ in range(count)))
    assert all("error" not in ack for ack in acks), acks
    return [ack["val"] for ack in acks]


async def created(nc) -> dict:
    async def attempt():
        answer = await api(nc, "$JS.API.STREAM.CREATE.C", STREAM)
        return answer if "error" not in answer else None

    return await until(attempt, "the R3 counter stream created")


def totals(stored: list[tuple[str, bytes]]) -> dict[str, str]:
    """Each subject's last total in a replica's messages."""
    out: dict[str, str] = {}
    for subject, body in stored:
        out[subject] = json.loads(body)["val"]
    return out


def replica_messages(cluster, i: int) -> list[tuple[str, bytes]]:  # noqa: F811 (cluster: the fixture's value)
    def look(c):
        store = c.engines[ACCOUNT].streams["C"].store
        out = []
        for seq in range(store.first_seq, store.last_seq + 1):
            sm = store.load_msg(seq)
            if sm is not None:
                out.append((sm.subject.decode(), bytes(sm.data)))
        return out

    return on(cluster, i, look)


def test_increments_in_flight_on_an_r3_counter_stream_from_every_server(cluster):  # noqa: F811
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            info = await created(ncs[0])
            assert info["config"]["allow_msg_counter"] is True and len(info["cluster"]["replicas"]) == 2, info
            for i, nc in enumerate(ncs):  # (the leader's interest on its way to every server)
                async def warm(nc=nc):
                    try:
                        return "error" not in await incr(nc, "c.w", "0")
                    except nats.errors.NoRespondersError:
                        return False

                await until(warm, f"an increment through server {i}")
            first = await incr(ncs[1], "c.a", "5")
            assert first == {"stream": "C", "seq": 4, "val": "5"}, first  # (2.15.1's PubAck, field for field)
            assert (await incr(ncs[2], "c.a", "-7"))["val"] == "-2"
            vals = await many(ncs[0], "c.b", IN_FLIGHT)
            assert vals == [str(n) for n in range(1, IN_FLIGHT + 1)], vals

            # The leader steps down: the new one goes on from the stored totals.
            old = (await api(ncs[0], "$JS.API.STREAM.INFO.C"))["cluster"]["leader"]
            stepped = await api(ncs[0], "$JS.API.STREAM.LEADER.STEPDOWN.C")
            assert stepped.get("success") is True, stepped

            async def new_leader():
                leader = (await api(ncs[0], "$JS.API.STREAM.INFO.C")).get("cluster", {}).get("leader")
                return leader if leader not in (None, old) else None

            await until(new_leader, "a new leader of C")

            async def goes_on():
                try:
                    return (await incr(ncs[1], "c.a", "3"))["val"] == "1"
                except nats.errors.TimeoutError:  # (the new leader's subscription on its way)
                    return False

            await until(goes_on, "an increment through the new leader")
            vals = await many(ncs[2], "c.b", IN_FLIGHT)
            assert vals == [str(n) for n in range(IN_FLIGHT + 1, 2 * IN_FLIGHT + 1)], vals

            want = {"c.w": "0", "c.a": "1", "c.b": str(2 * IN_FLIGHT)}
            count = 2 * IN_FLIGHT + 6

            async def everywhere():
                seen = [replica_messages(cluster, i) for i in range(3)]
                return all(len(s) == count and totals(s) == want for s in seen) and seen[0] == seen[1] == seen[2]

            await until(everywhere, "the same totals on every replica")

    run(main)


def in_a_mixed_cluster(scenario) -> None:
    """``await scenario(nc, node)`` in a cluster of two nats-server 2.15.1 (n1, n2) and a
    natserver (n3, ``node``: a testing.NatsServer), ``nc`` an APP client of n1; a hard timeout."""
    assert NATS_SERVER
    with tempdir() as folder:
        mixed = MixedCluster.create(NATS_SERVER, Path(folder))
        go1, go2, py = mixed.nodes
        mixed.start(go1)
        mixed.start(go2)
        node = NatsServer(natserver_options(mixed, py))
        try:
            node.start()

            async def main():
                nc = await nats.connect(f"nats://127.0.0.1:{go1.port}", user=APP_USER, password=PASSWORD)
                try:
                    await scenario(nc, node)
                finally:
                    await nc.close()

            asyncio.run(asyncio.wait_for(main(), MIXED_TIMEOUT))
        finally:
            node.stop()
            mixed.stop_all()


@needs_nats_server
def test_an_r3_counter_stream_of_one_natserver_and_two_2_15_1_servers():
    """The natserver leads the increments (2.15.1 followers store its totals), then a 2.15.1
    server leads them (the natserver stores 2.15.1's): the same acks and totals either way."""
    async def scenario(nc, node):
        await created(nc)
        total = 0
        for wanted in ("n3", "n1", "n3"):
            await lead_with(nc, wanted)
            vals = await many(nc, "c.x", IN_FLIGHT)
            assert vals == [str(n) for n in range(total + 1, total + IN_FLIGHT + 1)], (wanted, vals)
            total += IN_FLIGHT
        got = await api(nc, "$JS.API.STREAM.MSG.GET.C", {"last_by_subj": "c.x"})
        assert got["message"]["seq"] == total, got

        def natservers():
            stream = node.server.jetstream.streams["C"]
            sm = stream.store.load_msg(stream.store.last_seq)
            return (stream.store.last_seq, bytes(sm.data)) if sm is not None else None

        async def stored():
            return node._call(natservers) == (total, b'{"val":"%d"}' % total)

        await until(stored, "the natserver's replica holding the last total")

    in_a_mixed_cluster(scenario)


async def lead_with(nc, wanted: str, stream: str = "C") -> None:
    """Step-downs, asking for ``wanted``, until it leads ``stream``."""
    async def leads():
        info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
        leader = info.get("cluster", {}).get("leader")
        if leader == wanted:
            return True
        if leader:
            await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", {"placement": {"preferred": wanted}})
        return False

    await until(leads, f"{wanted} leading {stream}")

