"""The minority rule (issue #32 item 5): an R3 stream in three in-process natservers
(``NatsCluster.partition`` cuts routes; real clocks, bounded polls, a hard timeout), one node
cut off from the other two, publishing all along through a client of each node.

- The isolated node acknowledges nothing. Its client sees what a nats-server 2.15.1 client
  sees (asked below, the test of three 2.15.1 processes): while the isolated node still leads
  (until it notices it lost its quorum, raft.go lostQuorumInterval, 10 s), a publish waits for
  a commit that does not come and times out; once it follows, nobody in its reach listens on
  the stream's subjects: no responders (nats-py's NoStreamResponseError).
- The majority elects a leader (if it lost it) and goes on acknowledging.
- Healed, the isolated node catches up: every node stores the same messages, every
  acknowledged one among them, and none of those the isolated leader appended to its log
  without a quorum (truncated, never applied).

Both cases: the stream leader cut off, and a follower. Slow (elections of 4-9 s, the lost
quorum's 10 s): marked ``slow``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import nats
import pytest

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster import durability
from tests.jetstream.cluster.test_cluster import STEP, cluster_options, connect, until
from tests.jetstream.cluster.test_r3_streams import contents, create_r3, leader_index, publish, stream_on
from tests.jetstream.cluster.test_torn_tails import every_server_placeable
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 240.0  # seconds of real time for the whole test
PUBLISH_TIMEOUT = 1.0  # a publish not acknowledged by then counts as not acknowledged
ISOLATED_FOR = 14.0  # seconds the node stays cut off: past raft.go's lostQuorumInterval (10 s)
STREAM = {"name": "P", "subjects": ["p.>"], "num_replicas": 3}


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


async def settled(cluster) -> int | None:
    """The stream leader's index + 1 once every replica follows it in the same term (a healed
    node's higher term may still depose a leader before that)."""
    nodes = [stream_on(cluster, i, "P").replica.group.node for i in range(3)]
    lead = leader_index(cluster, "P")
    if lead is None or len({(n.term, n.leader) for n in nodes}) != 1:
        return None
    return lead + 1


async def attempt(nc, subject: str, payload: bytes):
    """One publish: its ack, or the exception's class name."""
    try:
        return await nc.jetstream().publish(subject, payload, timeout=PUBLISH_TIMEOUT)
    except (nats.errors.Error, asyncio.TimeoutError) as exc:
        return type(exc).__name__


def test_an_isolated_node_acks_nothing_and_catches_up_once_healed(cluster):
    report: dict = {}

    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        await every_server_placeable(cluster)
        await create_r3(ncs[0], STREAM)
        acked: list[tuple[int, bytes]] = []
        for n in range(10):
            ack = await publish(ncs[n % 3], "p.a", b"before %d" % n)
            acked.append((ack.seq, b"before %d" % n))
        for case in ("leader", "follower"):
            lead = await until(lambda: settled(cluster), "one leader every replica follows, in one term") - 1
            alone = lead if case == "leader" else (lead + 1) % 3
            others = [i for i in range(3) if i != alone]
            for other in others:
                cluster.partition(alone, other)
            cut_at = time.monotonic()
            minority: list[tuple[float, bytes, object]] = []
            n = 0
            new_leader_at = None
            while time.monotonic() - cut_at < ISOLATED_FOR:
                payload = b"%s alone %d" % (case.encode(), n)
                minority.append((time.monotonic() - cut_at, payload, await attempt(ncs[alone], "p.m", payload)))
                payload = b"%s majority %d" % (case.encode(), n)
                ack = await attempt(ncs[others[n % 2]], "p.a", payload)
                if not isinstance(ack, str):
                    acked.append((ack.seq, payload))
                    new_leader_at = new_leader_at or time.monotonic() - cut_at
                n += 1
            # Nothing acknowledged on the isolated side: timeouts while it led, then no
            # responders (and a follower: no responders from the start).
            outcomes = [outcome for _, _, outcome in minority]
            assert all(isinstance(o, str) for o in outcomes), outcomes
            report[f"{case}: minority saw"] = sorted(set(outcomes))
            report[f"{case}: majority acked again after"] = new_leader_at
            if case == "leader":
                assert "TimeoutError" in outcomes, outcomes
                assert outcomes[-1] == "NoStreamResponseError", outcomes
                # (the isolated leader stepped down after losing its quorum)
                assert not stream_on(cluster, alone, "P").replica.leading
            else:
                assert set(outcomes) == {"NoStreamResponseError"}, outcomes
            assert new_leader_at is not None
            majority_leader = leader_index(cluster, "P")
            assert majority_leader in others
            healed_at = time.monotonic()
            for other in others:
                cluster.heal(alone, other)

            async def same():
                views = [contents(cluster, i, "P") for i in range(3)]
                return views[0] if views[0] and all(v == views[0] for v in views) else None
            stored = await until(same, f"the {case} caught up once healed", STEP)
            report[f"{case}: caught up after healing"] = time.monotonic() - healed_at
            by_seq = {seq: data for seq, _, data in stored}
            assert all(by_seq.get(seq) == data for seq, data in acked), "an acknowledged message lost"
            assert not [d for _, _, d in stored if b"alone" in d], "a message without a quorum survived"
            assert [seq for seq, _, _ in stored] == list(range(1, len(stored) + 1))
            # The group goes on with all three.
            ack = await publish(ncs[alone], "p.a", b"%s healed" % case.encode())
            acked.append((ack.seq, b"%s healed" % case.encode()))
        for nc in ncs:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    print("partition:", report)


# Routes of stopped peers go after ~3 s without an answer to their pings (nats-server's
# ping_interval and ping_max): a partition as the isolated node sees it.
QUICK_PINGS = 'ping_interval: "1s"\nping_max: 2'
# 2.15.1's isolated leader gives up its leadership at its first lost-quorum check past 10 s
# without its peers (raft.go lostQuorumCheck, every 10 s): 20 s here; natserver's after 10 s.
REFERENCE_ISOLATED_FOR = 30.0


@needs_nats_server
def test_what_a_client_of_an_isolated_2_15_1_leader_sees(tmp_path):
    """The reference for the outcomes above: three nats-server 2.15.1 processes, the other two
    stopped (SIGSTOP) so that the stream leader is alone (its routes to them close as stale);
    its client's publishes time out, then, its leadership given up, find no responders."""
    assert NATS_SERVER
    procs = durability.Procs(tmp_path, ("go", "go", "go"), NATS_SERVER, extra=QUICK_PINGS)

    async def main():
        for node in procs.nodes:
            procs.start(node)
        nc = await durability.connect(procs.urls)
        await durability.created(nc, "$JS.API.STREAM.CREATE.P", STREAM)

        async def acked():
            return await nc.jetstream().publish("p.a", b"x", timeout=PUBLISH_TIMEOUT)
        await durability.until(acked, "a publish acknowledged")
        leader = procs.by_name(await durability.until(lambda: durability.stream_leader(nc, "P"), "a leader"))
        await nc.close()
        alone = await nats.connect(leader.url, user="app", password=durability.PASSWORD, allow_reconnect=False)
        others = [n for n in procs.nodes if n is not leader]
        for node in others:
            node.process.send_signal(signal.SIGSTOP)

        async def stopped():
            return all(Path(f"/proc/{n.process.pid}/stat").read_text().split(") ")[1][0] == "T" for n in others)
        await durability.until(stopped, "the other two stopped")
        try:
            cut_at = time.monotonic()
            outcomes = []
            while time.monotonic() - cut_at < REFERENCE_ISOLATED_FOR:
                outcomes.append(await attempt(alone, "p.m", b"alone"))
                await asyncio.sleep(0.2)
        finally:
            for node in others:
                node.process.send_signal(signal.SIGCONT)
        await alone.close()
        return outcomes

    try:
        outcomes = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    finally:
        procs.stop_all()
    assert all(isinstance(o, str) for o in outcomes), outcomes
    assert "TimeoutError" in outcomes and outcomes[-1] == "NoStreamResponseError", outcomes
    print("2.15.1, isolated leader:", [o for i, o in enumerate(outcomes) if i == 0 or outcomes[i - 1] != o])
