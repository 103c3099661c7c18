"""A stream's replicas changed while it has consumers, as nats-server 2.15.1 changes them
(jetstream_cluster.go remapConsumerAssignments, runConsumerMigration: consumers whose replicas
follow the stream's are scaled with it through their groups' own desired state; the stream's
leader removes none of its peers while a consumer is still on them), in clusters of three
in-process natservers (real clocks, bounded polls, a hard timeout on each test): R3 -> R1 -> R3
with a durable pull and a durable push consumer, each keeping its delivered sequences, ack
floor and pending messages on every replica, the pull consumer fetching on without getting an
acked message again; a consumer's own replica count changed by an update; STREAM.PEER.REMOVE
of a stream with a consumer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, cluster_options, connect, until
from tests.jetstream.cluster.test_r3_consumers import ACCOUNT, on
from tests.jetstream.cluster.test_r3_streams import publish
from tests.jetstream.cluster.test_scale import meta_of_all, settled

DATA = Path(__file__).parent / "data" / "scale_consumers_nats_server_2.15.1.json"
TEST_TIMEOUT = 240.0  # seconds of real time for a whole test (the hard timeout)
SETTLE = 60.0  # seconds for a replica change to settle (elections, catch-ups, each consumer's turn)
ACK_WAIT = 60_000_000_000  # ns: nothing delivered and not acked comes again during a test
MESSAGES = 20
PULL = {"durable_name": "P", "ack_policy": "explicit", "ack_wait": ACK_WAIT}
PUSH = {"durable_name": "Q", "ack_policy": "explicit", "ack_wait": ACK_WAIT, "deliver_subject": "q.deliver"}
PENDING = 10_000  # messages pending a consumer's ack in the timed scale up (as recorded)
_T = "io.nats.jetstream.api.v1."


def recorded(name: str):
    """2.15.1's answers (``python -m tests.jetstream.cluster.record_scale_consumers``)."""
    return json.loads(DATA.read_text())[name]


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


def progress(info: dict) -> dict:
    """What a consumer keeps through a replica change: delivered, ack floor, acks pending."""
    return {"delivered": [info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]],
            "ack_floor": [info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]],
            "num_ack_pending": info["num_ack_pending"]}


def held(cluster, i: int, name: str) -> dict | None:
    """Server i's state of consumer ``name``: its group's applied state, or the R1 consumer it runs."""
    def read(c):
        state = c.consumer_groups.state(ACCOUNT, "S", name)
        if state is not None:
            return {k: state[k] for k in ("delivered", "ack_floor", "num_ack_pending")} | {"group": True}
        stream = c.engines[ACCOUNT].streams.get("S")
        consumer = stream.consumers.get(name) if stream is not None else None
        if consumer is None:
            return None
        return {"delivered": [consumer.delivered_cseq, consumer.state_sseq],
                "ack_floor": [consumer.ack_floor_cseq, consumer.ack_floor_sseq],
                "num_ack_pending": len(consumer.pending), "group": False}
    return on(cluster, i, read)


async def kept_on(cluster, name: str, want: dict, replicas: int) -> None:
    """``want`` on exactly ``replicas`` servers (a group's members, or the one running an R1
    consumer), no other server holding the consumer."""
    states: list = []

    async def check():
        states[:] = [held(cluster, i, name) for i in range(len(cluster.servers))]
        holding = [s for s in states if s is not None]
        return (len(holding) == replicas and all({k: s[k] for k in want} == want for s in holding)
                and all(s["group"] == (replicas > 1) for s in holding))

    try:
        await until(check, f"{name}'s state on {replicas} servers", SETTLE)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {states} (want {want})") from None


async def consumer_info(nc, name: str, replicas: int) -> dict:
    """CONSUMER.INFO once the consumer's group lists ``replicas`` members and no desired state."""
    async def check():
        try:
            info = await api(nc, f"$JS.API.CONSUMER.INFO.S.{name}", timeout=1.0)
        except nats.errors.TimeoutError:
            return None
        cluster = info.get("cluster") or {}
        if "error" in info or not cluster.get("leader") or "desired" in cluster:
            return None
        return info if len(cluster.get("replicas") or ()) == replicas - 1 else None
    return await until(check, f"{name} at R{replicas}", SETTLE)


async def created(nc, subject: str, body: dict) -> dict:
    async def attempt():
        answer = await api(nc, subject, body)
        return answer if "error" not in answer else None
    return await until(attempt, f"{subject} answered")


async def fetched(sub, count: int) -> list:
    """``count`` messages of the pull subscription (fetched again until that many came)."""
    out: list = []
    deadline = time.monotonic() + SETTLE
    while len(out) < count and time.monotonic() < deadline:
        try:
            out += await sub.fetch(count - len(out), timeout=2.0)
        except nats.errors.TimeoutError:
            pass
    assert len(out) == count, f"{len(out)} of {count} fetched"
    return out


SIX_FOUR = {"delivered": [6, 6], "ack_floor": [4, 4], "num_ack_pending": 2}  # six_fetched_four_acked's state


async def six_fetched_four_acked(ncs, config: dict):
    """The R3 stream S with 10 messages, consumer P (``config``): 6 fetched, 4 acked; its pull
    subscription."""
    await created(ncs[0], "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "num_replicas": 3})
    for n in range(1, 11):
        assert (await publish(ncs[n % len(ncs)], f"s.{n}", b"m%d" % n)).seq == n
    await created(ncs[1], "$JS.API.CONSUMER.DURABLE.CREATE.S.P", {"stream_name": "S", "config": config})
    pull = await ncs[2].jetstream().pull_subscribe_bind("P", "S")
    got = await fetched(pull, 6)
    for m in got[:4]:
        await m.ack_sync(timeout=5)
    return pull


def test_stream_scaled_down_and_up_with_a_pull_and_a_push_consumer(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            created_s = await created(ncs[0], "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                                              "num_replicas": 3})
            for n in range(1, MESSAGES + 1):
                assert (await publish(ncs[n % 3], f"s.{n}", b"m%d" % n)).seq == n
            await created(ncs[1], "$JS.API.CONSUMER.DURABLE.CREATE.S.P", {"stream_name": "S", "config": PULL})
            await created(ncs[1], "$JS.API.CONSUMER.DURABLE.CREATE.S.Q", {"stream_name": "S", "config": PUSH})
            js = ncs[2].jetstream()
            pull = await js.pull_subscribe_bind("P", "S")
            first = await fetched(pull, 10)
            assert [m.metadata.sequence.stream for m in first] == list(range(1, 11))
            for m in first[:6]:
                await m.ack_sync(timeout=5)
            pushed: asyncio.Queue = asyncio.Queue()
            push_sub = await ncs[0].subscribe("q.deliver", cb=pushed.put)
            got = [await asyncio.wait_for(pushed.get(), SETTLE) for _ in range(MESSAGES)]
            for m in got[:15]:
                await ncs[0].request(m.reply, b"+ACK", timeout=5)
            await push_sub.unsubscribe()  # (nothing more is pushed while the group moves)
            p_before = progress(await consumer_info(ncs[0], "P", 3))
            q_before = progress(await consumer_info(ncs[0], "Q", 3))
            assert p_before == {"delivered": [10, 10], "ack_floor": [6, 6], "num_ack_pending": 4}
            for step in recorded("steps"):  # (2.15.1 kept the same through R1 and back)
                assert progress(step["pull"]) == p_before
            assert q_before == {"delivered": [20, 20], "ack_floor": [15, 15], "num_ack_pending": 5}

            down = await api(ncs[1], "$JS.API.STREAM.UPDATE.S", dict(created_s["config"], num_replicas=1))
            theirs = recorded("steps")[0]["update"]
            desired = {k: v for k, v in down["cluster"]["desired"].items() if k != "status"}
            # (natserver's stream leader took its first step before answering: its status)
            assert list(down) == list(theirs) and desired == {
                "created": desired["created"], "name": cluster.name, "origin": {"replicas": 3}}
            assert list(theirs["cluster"]["desired"]) == ["created", "name", "origin"]
            started = time.monotonic()
            await settled(ncs[2], 1)
            assert progress(await consumer_info(ncs[2], "P", 1)) == p_before
            assert progress(await consumer_info(ncs[2], "Q", 1)) == q_before
            await kept_on(cluster, "P", p_before, 1)
            await kept_on(cluster, "Q", q_before, 1)
            scaled_down = time.monotonic() - started

            # The pull consumer goes on: the next ones, none acked before.
            more = await fetched(pull, 10)
            assert [m.metadata.sequence.stream for m in more] == list(range(11, 21)) == recorded("fetched_after")
            for m in more:
                await m.ack_sync(timeout=5)
            p_r1 = progress(await consumer_info(ncs[0], "P", 1))
            assert p_r1 == {"delivered": [20, 20], "ack_floor": [6, 6], "num_ack_pending": 4}

            up = await api(ncs[0], "$JS.API.STREAM.UPDATE.S", dict(created_s["config"], num_replicas=3))
            assert "error" not in up, up
            await settled(ncs[1], 3)
            assert progress(await consumer_info(ncs[1], "P", 3)) == p_r1
            assert progress(await consumer_info(ncs[1], "Q", 3)) == q_before
            await kept_on(cluster, "P", p_r1, 3)
            await kept_on(cluster, "Q", q_before, 3)
            for n in range(MESSAGES + 1, MESSAGES + 6):
                assert (await publish(ncs[n % 3], f"s.{n}", b"m%d" % n)).seq == n
            last = await fetched(pull, 5)
            assert [m.metadata.sequence.stream for m in last] == list(range(21, 26))
            print(f"R3 -> R1 with two consumers settled in {scaled_down:.1f} s")

    run(main)


def test_a_consumers_own_replicas_changed_by_an_update(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            config = dict(PULL, num_replicas=1)
            pull = await six_fetched_four_acked(ncs, config)
            want = SIX_FOUR
            assert progress(await consumer_info(ncs[0], "P", 1)) == want

            # More replicas than the stream's: 2.15.1's 10126.
            refused = await api(ncs[0], "$JS.API.CONSUMER.DURABLE.CREATE.S.P",
                                {"stream_name": "S", "config": dict(config, num_replicas=5)})
            theirs = recorded("consumer_steps")
            assert refused == theirs[2]["update"]
            # An R3 stream on three servers: no replacement for a peer (its consumer or not).
            assert await api(ncs[1], "$JS.API.STREAM.PEER.REMOVE.S", {"peer": cluster.servers[0].options.server_name}) \
                == recorded("peer_remove_r3")

            for replicas in (3, 1, 3):
                answer = await api(ncs[replicas % 3], "$JS.API.CONSUMER.DURABLE.CREATE.S.P",
                                   {"stream_name": "S", "config": dict(config, num_replicas=replicas)}, timeout=10)
                assert answer["type"] == _T + "consumer_create_response" and "error" not in answer, answer
                assert answer["config"]["num_replicas"] == replicas
                recorded_answer = theirs[0 if replicas == 1 else 1]["update"]
                assert list(answer) == list(recorded_answer)
                if replicas == 1:  # (a scale down's answer: desired state, the peers still to be chosen)
                    desired = answer["cluster"]["desired"]
                    assert list(desired) == list(recorded_answer["cluster"]["desired"]) == ["created", "name"]
                info = await consumer_info(ncs[0], "P", replicas)
                assert info["config"]["num_replicas"] == replicas and progress(info) == want
                await kept_on(cluster, "P", want, replicas)
            more = await fetched(pull, 4)
            assert [m.metadata.sequence.stream for m in more] == [7, 8, 9, 10]

    run(main)


def test_a_kv_watcher_goes_on_through_its_buckets_replica_changes(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            js = ncs[0].jetstream()

            async def bucket():
                try:
                    return await js.create_key_value(bucket="B", replicas=3)
                except nats.js.errors.APIError:
                    return None

            kv = await until(bucket, "the R3 bucket created")

            async def put(n: int):
                try:
                    return await kv.put(f"k{n}", b"v%d" % n)
                except (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError):
                    return None

            await until(lambda: put(0), "k0 put")
            watcher = await ncs[1].jetstream().key_value("B")
            watch = await watcher.watchall()
            first = await watch.updates(timeout=SETTLE)
            assert (first.key, first.value) == ("k0", b"v0")
            assert await watch.updates(timeout=SETTLE) is None  # (the end of the initial values)
            config = (await api(ncs[0], "$JS.API.STREAM.INFO.KV_B"))["config"]
            for n, replicas in enumerate((1, 3), start=1):
                answer = await api(ncs[2], "$JS.API.STREAM.UPDATE.KV_B", dict(config, num_replicas=replicas))
                assert "error" not in answer, answer

                async def kv_settled(replicas=replicas):
                    info = await api(ncs[2], "$JS.API.STREAM.INFO.KV_B")
                    cluster_info = info.get("cluster") or {}
                    return ("desired" not in cluster_info and cluster_info.get("leader")
                            and len(cluster_info.get("replicas") or ()) == replicas - 1)

                await until(kv_settled, f"KV_B at R{replicas}", SETTLE)
                await until(lambda n=n: put(n), f"k{n} put")
                update = await watch.updates(timeout=SETTLE)
                assert (update.key, update.value) == (f"k{n}", b"v%d" % n)
            await watch.stop()

    run(main)


@pytest.fixture
def five():
    with NatsCluster(5, jetstream=True, **cluster_options()) as c:
        yield c


def test_stream_peer_remove_moves_its_consumer_with_its_state(five):
    async def main():
        ncs = [await connect(url) for url in five.urls]
        sys_nc = await connect(five.urls[0], "sys")
        try:
            await until(lambda: meta_of_all(sys_nc, 5), "a meta leader of five servers", SETTLE)
            pull = await six_fetched_four_acked(ncs, PULL)
            want = SIX_FOUR
            info = await consumer_info(ncs[0], "P", 3)
            assert progress(info) == want
            victim = info["cluster"]["leader"]  # (the consumer's leader: its group elects another)
            removed = await api(ncs[4], "$JS.API.STREAM.PEER.REMOVE.S", {"peer": victim})
            assert removed == {"type": _T + "stream_remove_peer_response", "success": True}

            async def moved():
                info = await consumer_info(ncs[3], "P", 3)
                names = [info["cluster"]["leader"]] + [r["name"] for r in info["cluster"]["replicas"]]
                return info if victim not in names else None

            info = await until(moved, f"P moved off {victim}", SETTLE)
            assert progress(info) == want
            await kept_on(five, "P", want, 3)
            stream = await settled(ncs[1], 3)
            assert victim not in [stream["cluster"]["leader"]] + [r["name"] for r in stream["cluster"]["replicas"]]
            more = await fetched(pull, 4)
            assert [m.metadata.sequence.stream for m in more] == [7, 8, 9, 10]
        finally:
            for nc in [*ncs, sys_nc]:
                await nc.close()

    run(main)


def test_a_scale_up_with_10000_messages_pending_an_ack(cluster):
    """R1 -> R3 of a stream whose consumer has PENDING messages delivered and not acked: every
    member gets them all (the group's first snapshot), timed against 2.15.1's recording."""
    async def main():
        async with clients(cluster) as (ncs, _, _):
            created_s = await created(ncs[0], "$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big.>"]})
            for _ in range(PENDING - 1):
                await ncs[1].publish("big.a", b"x")
            await ncs[1].flush()
            assert (await publish(ncs[1], "big.a", b"last")).seq == PENDING
            await created(ncs[0], "$JS.API.CONSUMER.DURABLE.CREATE.BIG.D", {"stream_name": "BIG", "config": dict(
                PULL, durable_name="D", max_ack_pending=-1)})
            pull = await ncs[2].jetstream().pull_subscribe_bind("D", "BIG")
            got = 0
            while got < PENDING:
                got += len(await fetched(pull, min(1000, PENDING - got)))
            want = {"delivered": [PENDING, PENDING], "ack_floor": [0, 0], "num_ack_pending": PENDING}

            async def big_info(replicas: int) -> dict:
                async def check():
                    try:
                        info = await api(ncs[0], "$JS.API.CONSUMER.INFO.BIG.D", timeout=2.0)
                    except nats.errors.TimeoutError:
                        return None
                    c = info.get("cluster") or {}
                    ok = c.get("leader") and "desired" not in c and len(c.get("replicas") or ()) == replicas - 1
                    return info if ok else None
                return await until(check, f"D at R{replicas}", SETTLE)

            assert progress(await big_info(1)) == want
            started = time.monotonic()
            answer = await api(ncs[1], "$JS.API.STREAM.UPDATE.BIG", dict(created_s["config"], num_replicas=3))
            assert "error" not in answer, answer
            async def stream_at_r3():
                info = await api(ncs[2], "$JS.API.STREAM.INFO.BIG")
                c = info.get("cluster") or {}
                return c.get("leader") and "desired" not in c and len(c.get("replicas") or ()) == 2
            await until(stream_at_r3, "BIG at R3", SETTLE)
            assert progress(await big_info(3)) == want
            seconds = time.monotonic() - started
            states: list = []

            async def everywhere():
                states[:] = [on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "BIG", "D")) for i in range(3)]
                return all(s is not None and s["num_ack_pending"] == PENDING and s["delivered"] == [PENDING, PENDING]
                           for s in states)

            await until(everywhere, "the pending messages on every member", SETTLE)
            theirs = recorded("big")
            assert theirs["after"]["num_ack_pending"] == PENDING
            print(f"R1 -> R3 with {PENDING} pending settled in {seconds:.2f} s (2.15.1: {theirs['seconds']} s)")

    run(main)
