"""Durability of replicated streams (issue #32 item 5): real server processes killed with
SIGKILL during acknowledged publishing, restarted from their stores.

Three natserver processes (``python -m natserver -c <conf>``, or ``compacting_node``: the same
with earlier snapshots; file storage, ``cluster { routes }``), a nats-py publisher publishing with acks
all along (every acknowledged sequence and payload recorded; a publish that timed out is not
counted):

- an R3 stream: the stream leader's node killed, publishing goes on through the survivors,
  the node restarted; then a follower's node killed and restarted; both again, longer (past the
  snapshots the natservers take every COMPACT_ENTRIES entries); a follower killed again as it
  restarts; once the leader counts every replica current, every node stopped cleanly and each
  node's replica read from its own store files: every acknowledged message at its sequence with
  its payload, on all three; then all three killed at once, twice;
- a KV bucket (R3, history): puts, the bucket leader's node killed, puts go on, restarted:
  every revision on every replica;
- an R3 pull consumer: fetched and acked, its leader's node killed: the consumer carries on
  from the next message, nothing acknowledged delivered again.

Each replica is read from its files after a clean stop (the honest view of every replica: only
a stream's leader answers MSG.GET, and direct gets too in natserver). Slow (processes, real
elections): marked ``slow``; a hard timeout on each test.
"""

from __future__ import annotations

import asyncio
import base64
import time

import nats
import pytest

from tests.jetstream.cluster.durability import (
    Procs,
    Publisher,
    all_current,
    api,
    check_acked,
    connect,
    consumer_leader,
    created,
    each_leads_with_all,
    lead_with,
    read_replicas,
    stored,
    stream_leader,
    until,
)
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 300.0  # seconds of real time for a whole test
BATCH = 150  # acknowledged publishes between two steps
STREAM = {"name": "D", "subjects": ["d.>"], "num_replicas": 3, "storage": "file"}


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


# Snapshots every this many entries in the natservers (65536 by default): killed nodes restart
# from a snapshot and a log, and catch up from the leader's snapshot and $JSC.SYNC.
COMPACT_ENTRIES = 500
AGAIN_AFTER = 0.5  # seconds after a restart the last round kills the node again (not a timing assertion)


@pytest.fixture
def procs(tmp_path):
    cluster = Procs(tmp_path, ("py", "py", "py"), compact_entries=COMPACT_ENTRIES)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def start_all(procs: Procs) -> None:
    for node in procs.nodes:
        procs.start(node)


def test_kill_9_of_the_stream_leader_and_of_a_follower_loses_no_acked_message(procs):
    report: dict = {}

    async def main():
        start_all(procs)
        nc = await connect(procs.urls)
        await created(nc, "$JS.API.STREAM.CREATE.D", STREAM)
        publisher = Publisher(nc.jetstream(), "D", "d")
        task = asyncio.create_task(publisher.run())
        try:
            await publisher.more(BATCH, "before any kill")
            for round_, role in enumerate(("leader", "follower", "leader", "follower", "follower")):
                leader = await until(lambda: stream_leader(nc, "D"), "a stream leader")
                victim = procs.by_name(leader) if role == "leader" else \
                    next(n for n in procs.nodes if n.name != leader)
                killed_at, before = time.monotonic(), len(publisher.acked)
                procs.kill9(victim)
                # (more than COMPACT_ENTRIES while down: the leader's log compacted past it)
                await publisher.more(BATCH * (1 + 3 * min(round_ // 2, 1)), f"with the {role} killed")
                key = f"{round_}:{role}"
                report[f"{key} first ack after the kill"] = publisher.first_ack_after(killed_at)
                report[f"{key} acked while down"] = len(publisher.acked) - before
                procs.start(victim)
                if round_ == 4:  # killed again as it restarts (before or during its catch-up)
                    await asyncio.sleep(AGAIN_AFTER)
                    procs.kill9(victim)
                    procs.start(victim)
                restarted_at = time.monotonic()
                await until(lambda: all_current(nc, "D"), f"the {role} caught up")
                report[f"{key} current after"] = time.monotonic() - restarted_at
                await publisher.more(BATCH, f"the {role} back")
        finally:
            publisher.stopping = True
            await task
        await until(lambda: all_current(nc, "D"), "every replica current")
        info = await api(nc, "$JS.API.STREAM.INFO.D")
        await nc.close()
        report["acked"], report["failed"] = len(publisher.acked), publisher.failed
        report["last_seq"] = info["state"]["last_seq"]
        replicas, report["behind when stopped"] = await read_replicas(procs, "D", report["last_seq"])
        return publisher.acked, replicas

    acked, replicas = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    for name, replica in replicas.items():
        check_acked(acked, replica, name)
    # Every replica holds the same messages (what was stored without an ack included).
    first = next(iter(replicas.values()))
    assert all(replica == first for replica in replicas.values()), {k: len(v) for k, v in replicas.items()}
    assert len(acked) >= 15 * BATCH and acked[-1][0] <= report["last_seq"]
    print("durability:", report)


def test_kill_9_keeps_a_kv_buckets_history_on_every_replica(procs):
    async def main():
        start_all(procs)
        nc = await connect(procs.urls)
        await created(nc, "$JS.API.STREAM.CREATE.KV_H", {
            "name": "KV_H", "subjects": ["$KV.H.>"], "num_replicas": 3, "max_msgs_per_subject": 5,
            "allow_rollup_hdrs": True, "deny_delete": True, "allow_direct": True, "discard": "new",
            "duplicate_window": 120_000_000_000, "max_age": 0, "storage": "file"})
        kv = await nc.jetstream(timeout=5.0).key_value("H")
        puts: list[tuple[int, str, bytes]] = []

        async def put(key: str, value: bytes) -> None:
            async def attempt():
                try:
                    return await kv.put(key, value)
                except (nats.errors.Error, asyncio.TimeoutError):
                    return None  # (not acknowledged: put again, a new revision)
            puts.append((await until(attempt, f"{key} put"), f"$KV.H.{key}", value))

        for n in range(30):
            await put(f"k{n % 3}", b"v%d" % n)
        leader = await until(lambda: stream_leader(nc, "KV_H"), "a leader of the bucket")
        procs.kill9(procs.by_name(leader))
        for n in range(30, 60):
            await put(f"k{n % 3}", b"v%d" % n)
        procs.start(procs.by_name(leader))
        await until(lambda: all_current(nc, "KV_H"), "the bucket's replicas current")
        for n in range(60, 66):
            await put(f"k{n % 3}", b"v%d" % n)
        await until(lambda: all_current(nc, "KV_H"), "the bucket's replicas current")
        # history 5: each key's last 5 revisions, read back by revision (the leader answers;
        # an ordered consumer's kv.history() is an R1 consumer, not run on R3 streams yet)
        kept = [p for p in puts if p in [q for q in puts if q[1] == p[1]][-5:]]
        for rev, subject, value in kept:
            entry = await kv.get(subject.rsplit(".", 1)[1], revision=rev)
            assert (entry.revision, entry.value) == (rev, value)
        await nc.close()
        replicas, _ = await read_replicas(procs, "KV_H", max(rev for rev, _, _ in puts))
        return kept, replicas

    kept, replicas = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    for name, replica in replicas.items():
        assert [m for m in replica if m[1].startswith("$KV.H.")] == sorted(kept), name


def test_kill_9_of_a_consumer_leader_redelivers_nothing_acked(procs):
    async def main():
        start_all(procs)
        nc = await connect(procs.urls)
        await created(nc, "$JS.API.STREAM.CREATE.D", STREAM)
        js = nc.jetstream(timeout=5.0)
        for n in range(100):
            async def attempt(n=n):
                try:
                    return await js.publish(f"d.{n}", b"m%d" % n)
                except (nats.errors.Error, asyncio.TimeoutError):
                    return None
            assert (await until(attempt, "a publish")).seq == n + 1
        await created(nc, "$JS.API.CONSUMER.DURABLE.CREATE.D.C", {"stream_name": "D", "config": {
            "durable_name": "C", "ack_policy": "explicit", "ack_wait": 60_000_000_000}})
        sub = await js.pull_subscribe_bind("C", "D")
        got: list[int] = []
        while len(got) < 40:
            for msg in await sub.fetch(40 - len(got), timeout=5.0):
                await msg.ack_sync()
                got.append(msg.metadata.sequence.stream)
        assert got == list(range(1, 41))

        async def floor_replicated():  # (the leader's view; its proposals go every 10 ms)
            info = await api(nc, "$JS.API.CONSUMER.INFO.D.C")
            return info.get("ack_floor", {}).get("stream_seq") == 40
        await until(floor_replicated, "the ack floor at 40")
        await asyncio.sleep(1.0)  # (the followers apply the leader's last round of acks)
        leader = await until(lambda: consumer_leader(nc, "D", "C"), "a consumer leader")
        killed_at = time.monotonic()
        procs.kill9(procs.by_name(leader))

        async def next_batch():
            try:
                return await sub.fetch(10, timeout=2.0)
            except (nats.errors.Error, asyncio.TimeoutError):
                return None
        batch = await until(next_batch, "messages from the new consumer leader")
        failover = time.monotonic() - killed_at
        after = [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in batch]
        for m in batch:
            await m.ack_sync()
        assert after[0] == (41, 1), after
        assert all(seq > 40 for seq, _ in after), after
        new_leader = await until(lambda: consumer_leader(nc, "D", "C"), "a consumer leader")
        assert new_leader != leader
        procs.start(procs.by_name(leader))
        rest = []
        while len(rest) < 100 - 40 - len(after):
            batch = await until(next_batch, "the rest")
            for m in batch:
                await m.ack_sync()
                rest.append(m.metadata.sequence.stream)
        seen = [seq for seq, _ in after] + rest
        assert seen == list(range(41, 101)), seen
        await nc.close()
        print("durability: consumer failover", round(failover, 2), "s")

    run(main)


def test_kill_9_of_every_node_at_once_loses_no_acked_message(procs):
    """Beyond one node of three: all three killed at once mid-publishing (snapshots every
    COMPACT_ENTRIES entries), restarted: every acknowledged message is in each replica's log or
    store, and every replica ends up with all of them."""
    async def main():
        start_all(procs)
        nc = await connect(procs.urls)
        await created(nc, "$JS.API.STREAM.CREATE.D", STREAM)
        publisher = Publisher(nc.jetstream(), "D", "d")
        task = asyncio.create_task(publisher.run())
        try:
            for _ in range(2):
                await publisher.more(4 * BATCH, "before the kill")
                for node in procs.nodes:
                    procs.kill9(node)
                for node in procs.nodes:
                    procs.start(node)
                await publisher.more(BATCH, "after the restart")
        finally:
            publisher.stopping = True
            await task
        await until(lambda: all_current(nc, "D"), "every replica current")
        await nc.close()
        replicas, _ = await read_replicas(procs, "D", max(seq for seq, *_ in publisher.acked))
        return publisher.acked, replicas

    acked, replicas = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    for name, replica in replicas.items():
        check_acked(acked, replica, name)
    assert replicas["n1"] == replicas["n2"] == replicas["n3"]


# -- mixed kinds: one natserver, two nats-server 2.15.1 ------------------------------------------

async def msg_gets(nc: nats.NATS, stream: str, seqs: list[int]) -> list[tuple[int, str, bytes]]:
    """The leader's MSG.GET answer for each sequence."""
    out = []
    for seq in seqs:
        answer = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq}, timeout=5.0)
        message = answer["message"]
        out.append((message["seq"], message["subject"], base64.b64decode(message.get("data", ""))))
    return out


@needs_nats_server
def test_kill_9_in_a_mixed_cluster_loses_no_acked_message(tmp_path):
    """n1, n2: nats-server 2.15.1; n3: natserver. Killed with SIGKILL in turn, publishing all
    along: the natserver leading the stream, the natserver following, a 2.15.1 node (the
    leader). Every acknowledged message then on the natserver's files and, each 2.15.1 node
    leading in turn, in its MSG.GET answers."""
    assert NATS_SERVER
    procs = Procs(tmp_path, ("go", "go", "py"), NATS_SERVER, compact_entries=COMPACT_ENTRIES)
    report: dict = {}

    async def main():
        start_all(procs)
        nc = await connect(procs.urls)
        await created(nc, "$JS.API.STREAM.CREATE.D", STREAM)
        publisher = Publisher(nc.jetstream(), "D", "d", lanes=2)
        task = asyncio.create_task(publisher.run())
        try:
            await publisher.more(BATCH // 3, "before any kill")
            for case in ("natserver leading", "natserver following", "2.15.1 leading"):
                if case == "natserver leading":
                    await lead_with(nc, "D", "n3")
                    victim = procs.by_name("n3")
                elif case == "natserver following":
                    await lead_with(nc, "D", "n1")
                    victim = procs.by_name("n3")
                else:
                    await lead_with(nc, "D", "n2")
                    victim = procs.by_name("n2")
                killed_at = time.monotonic()
                procs.kill9(victim)
                await publisher.more(BATCH // 3, f"{case}, killed")
                report[f"{case}: first ack after the kill"] = publisher.first_ack_after(killed_at)
                procs.start(victim)
                restarted_at = time.monotonic()
                await until(lambda: all_current(nc, "D"), f"{case}: caught up")
                report[f"{case}: caught up after"] = time.monotonic() - restarted_at
                await publisher.more(BATCH // 3, f"{case}, back")
        finally:
            publisher.stopping = True
            await task
        await until(lambda: all_current(nc, "D"), "every replica current")
        seqs = [seq for seq, *_ in publisher.acked]
        await each_leads_with_all(nc, "D", ["n3"], max(seqs))
        expected = sorted((seq, subject, data) for seq, subject, data, *_ in publisher.acked)
        for go in ("n1", "n2"):
            await lead_with(nc, "D", go)
            assert await msg_gets(nc, "D", sorted(seqs)) == expected, go
        await nc.close()
        return publisher.acked

    try:
        acked = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
        procs.stop(procs.by_name("n3"))
        check_acked(acked, stored(procs.by_name("n3"), "D"), "n3")
    finally:
        procs.stop_all()
    print("durability (mixed):", report)
