"""More consumers of replicated (R3) streams, three in-process natservers (issue #32; real
clocks, bounded polls, a hard timeout on each test):

- R3 consumers of workqueue and interest streams (consumer_group_runner.py ``_retain``): every
  server applies the consumers' replicated acks; the stream's leader proposes the removal of
  what every interested consumer acked, so every replica removes it; the consumer's or the
  stream's leader stopped, the new one goes on, nothing acked comes again, every replica's
  state the same; the workqueue rules (10099, 10100) and 10134 as 2.15.1 answers them;
- R1 consumers of an R3 stream (cluster.py ``_r1_consumer``), run on the server they are placed
  on over its replica: an ephemeral pull consumer, an ordered consumer and a KV watcher through
  nats-py, going on after the stream's leader steps down;
- a pause proposed by the meta leader in the consumer's assignment (2.15.1's), kept by a new leader;
- a nak with a delay and a ``+WPI`` proposed by a replicated consumer's leader (without a cluster).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import nats
import pytest
from nats.js.api import ConsumerConfig

from natserver.jetstream.consumer_group_runner import ConsumerGroups
from natserver.jetstream.replication.consumer_group import ConsumerApplier
from natserver.jetstream.replication.group_codec import Delivered, decode_consumer_op
from natserver.testing_cluster import NatsCluster

from .clients import clients, retried
from .test_cluster import REQUEST_TIMEOUT, STEP, api, cluster_options, meta_answers, until
from .test_r3_consumers import _leader, _loaded

TEST_TIMEOUT = 180.0  # seconds of real time for a whole test (the hard timeout)
ACCOUNT = "APP"
MESSAGES = 10
ACK_WAIT = 2_000_000_000  # ns: short, so that the test sees the unacked ones again after the failover
_T = "io.nats.jetstream.api.v1."


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def on(cluster: NatsCluster, i: int, fn):
    """fn(node i's JetStreamCluster), in its server's loop."""
    return cluster.servers[i]._call(lambda: fn(cluster.servers[i].server.jetstream.cluster))


def index_of(cluster: NatsCluster, name: str) -> int:
    return next(i for i, node in enumerate(cluster.servers) if node.options.server_name == name)


def store_state(cluster: NatsCluster, i: int, stream: str) -> tuple:
    """Node i's replica of ``stream``: (messages, first, last, the sequences it holds)."""
    def look(c):
        store = c.engines[ACCOUNT].streams[stream].store
        held = tuple(seq for seq in range(store.first_seq, store.last_seq + 1) if store.load_msg(seq) is not None)
        return store.msgs, store.first_seq, store.last_seq, held

    return on(cluster, i, look)


async def same_everywhere(cluster: NatsCluster, stream: str, nodes, want: tuple) -> None:
    """Every replica in ``nodes`` holds just the sequences ``want``."""
    states: list = []

    async def agreed():
        states[:] = [store_state(cluster, i, stream) for i in nodes]
        return all(s[3] == want and s[0] == len(want) for s in states)

    try:
        await until(agreed, f"{stream}'s replicas holding {want}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {states}") from None


async def r3_stream(nc, config: dict, count: int) -> None:
    """An R3 stream created (retried while its group elects), ``count`` messages published."""
    name = config["name"]

    async def created():
        answer = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {**config, "num_replicas": 3})
        return answer if "error" not in answer else None

    await until(created, f"the R3 stream {name} created")
    js = nc.jetstream()
    subject = config["subjects"][0].replace(">", "")
    for n in range(1, count + 1):
        ack = await retried(lambda n=n: js.publish(f"{subject}{n}", b"m%d" % n, timeout=REQUEST_TIMEOUT),
                            f"message {n} stored")
        assert ack.seq == n


async def durable(nc, stream: str, config: dict) -> dict:
    """A durable created (answered by its group's leader once elected)."""
    name = config["durable_name"]

    async def created():
        answer = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}",
                           {"stream_name": stream, "config": config})
        assert "error" not in answer, answer
        return answer

    return await until(created, f"consumer {name} created")


async def info_from(nc, stream: str, name: str, not_leader: str = "") -> dict:
    """CONSUMER.INFO once a leader (not ``not_leader``) answers."""
    async def answered():
        try:
            info = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}", timeout=1.0)
        except nats.errors.TimeoutError:
            return None
        leader = info.get("cluster", {}).get("leader")
        return info if leader and leader != not_leader else None

    return await until(answered, f"{name}'s info from a leader other than {not_leader!r}")


async def stream_info(nc, stream: str) -> dict:
    async def answered():
        try:
            info = await api(nc, f"$JS.API.STREAM.INFO.{stream}", timeout=1.0)
        except nats.errors.TimeoutError:
            return None
        return info if "error" not in info else None

    return await until(answered, f"{stream}'s info")


async def pull_until(psub, want: int) -> dict[int, int]:
    """Messages fetched and acked until ``want`` came: stream sequence -> deliveries (a
    sequence coming twice fails)."""
    seen: dict[int, int] = {}

    async def fetched():
        try:
            msgs = await psub.fetch(want - len(seen), timeout=1.0)
        except nats.errors.TimeoutError:
            return len(seen) >= want
        for m in msgs:
            assert m.metadata.sequence.stream not in seen, m.metadata
            seen[m.metadata.sequence.stream] = m.metadata.num_delivered
            await m.ack_sync(timeout=REQUEST_TIMEOUT)
        return len(seen) >= want

    await until(fetched, f"{want} messages fetched")
    return seen


def test_r3_workqueue_consumer_removes_acked_messages_on_every_replica(cluster):
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            nc = ncs[0]
            await r3_stream(nc, {"name": "W", "subjects": ["w.>"], "retention": "workqueue"}, MESSAGES)
            created = await durable(ncs[1], "W", {"durable_name": "WQ", "ack_policy": "explicit",
                                                   "ack_wait": ACK_WAIT, "filter_subject": "w.>"})
            assert created["cluster"]["raft_group"].startswith("C-R3F-") and len(created["cluster"]["replicas"]) == 2

            # The workqueue rules (jsClusteredConsumerRequest's pre-checks), 2.15.1's answers;
            # a consumer's replicas other than the stream's (checkConsumerCfg).
            unfiltered = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.W.U", {
                "stream_name": "W", "config": {"durable_name": "U", "ack_policy": "explicit"}})
            assert unfiltered == {"type": _T + "consumer_create_response", "error": {
                "code": 400, "err_code": 10099,
                "description": "multiple non-filtered consumers not allowed on workqueue stream"}}
            overlapping = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.W.O", {
                "stream_name": "W", "config": {"durable_name": "O", "ack_policy": "explicit", "filter_subject": "w.1"}})
            assert overlapping == {"type": _T + "consumer_create_response", "error": {
                "code": 400, "err_code": 10100, "description": "filtered consumer not unique on workqueue stream"}}
            r1 = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.W.R1", {
                "stream_name": "W", "config": {"durable_name": "R1", "ack_policy": "explicit", "num_replicas": 1,
                                               "filter_subject": "x.>"}})
            assert r1 == {"type": _T + "consumer_create_response", "error": {
                "code": 400, "err_code": 10134,
                "description": "consumer config replicas must match interest retention stream's replicas"}}

            # Five fetched, three acked: gone from every replica (the stream's leader proposed
            # their removal on the consumer group's acks).
            psub = await ncs[2].jetstream().pull_subscribe_bind("WQ", stream="W")
            got = await psub.fetch(5, timeout=REQUEST_TIMEOUT)
            assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
            for m in (got[0], got[1], got[3]):
                await m.ack_sync(timeout=REQUEST_TIMEOUT)
            await same_everywhere(cluster, "W", range(3), (3, 5, 6, 7, 8, 9, 10))
            before = await info_from(nc, "W", "WQ")
            assert before["num_ack_pending"] == 2 and before["num_pending"] == 5, before

            # The consumer's leader stopped: another goes on; nothing acked comes again; the
            # two not acked come after ack_wait; everything acked leaves every replica.
            old = before["cluster"]["leader"]
            stopped = index_of(cluster, old)
            cluster.stop(stopped)
            alive = [i for i in range(3) if i != stopped]
            nc = ncs[alive[0]]
            after = await info_from(nc, "W", "WQ", not_leader=old)
            assert after["num_ack_pending"] == 2 and after["ack_floor"]["stream_seq"] == 2, after
            psub = await nc.jetstream().pull_subscribe_bind("WQ", stream="W")
            seen = await pull_until(psub, 7)
            assert seen == {3: 2, 5: 2, 6: 1, 7: 1, 8: 1, 9: 1, 10: 1}, seen
            await same_everywhere(cluster, "W", alive, ())
            state = (await stream_info(nc, "W"))["state"]
            assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 11, 10), state

            # The stopped server back: its replica ends as the others (what it missed removed).
            cluster.restart(stopped)
            await same_everywhere(cluster, "W", range(3), ())
            infos = []
            for i in range(3):
                state = (await stream_info(ncs[i] if i != stopped else nc, "W"))["state"]
                infos.append((state["messages"], state["first_seq"], state["last_seq"]))
            assert infos == [(0, 11, 10)] * 3, infos

    run(main)


def test_r3_interest_stream_keeps_a_message_until_every_consumer_acked_it(cluster):
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            nc = ncs[0]
            await r3_stream(nc, {"name": "I", "subjects": ["i.>"], "retention": "interest"}, 0)
            for name in ("A", "B"):  # (an R3 group each: the stream's replicas)
                created = await durable(nc, "I", {"durable_name": name, "ack_policy": "explicit", "ack_wait": ACK_WAIT})
                assert len(created["cluster"]["replicas"]) == 2, created
            js = nc.jetstream()
            for n in range(1, 6):
                ack = await retried(lambda n=n: js.publish(f"i.{n}", b"m%d" % n, timeout=REQUEST_TIMEOUT),
                                    f"message {n} stored")
                assert ack.seq == n
            # Stored on every replica (their consumers' groups are interest on the followers too).
            await same_everywhere(cluster, "I", range(3), (1, 2, 3, 4, 5))

            # A acks everything: nothing goes (B has not); B acks 1-3: those go everywhere.
            a = await ncs[1].jetstream().pull_subscribe_bind("A", stream="I")
            assert sorted(await pull_until(a, 5)) == [1, 2, 3, 4, 5]
            b = await ncs[2].jetstream().pull_subscribe_bind("B", stream="I")
            got = await b.fetch(5, timeout=REQUEST_TIMEOUT)
            assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
            async def a_applied():  # (A's acks applied by every member of its group)
                return all((on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "I", "A")) or {}).get(
                    "ack_floor") == [5, 5] for i in range(3))

            await until(a_applied, "A's acks applied everywhere")
            await same_everywhere(cluster, "I", range(3), (1, 2, 3, 4, 5))
            for m in got[:3]:
                await m.ack_sync(timeout=REQUEST_TIMEOUT)
            await same_everywhere(cluster, "I", range(3), (4, 5))

            # The stream's leader stopped: the new one removes what B acks next, everywhere.
            leader = (await stream_info(nc, "I"))["cluster"]["leader"]
            stopped = index_of(cluster, leader)
            cluster.stop(stopped)
            alive = [i for i in range(3) if i != stopped]
            nc = ncs[alive[0]]

            async def new_leader():
                info = await stream_info(nc, "I")
                return info if info["cluster"].get("leader") not in (None, leader) else None

            await until(new_leader, "a new leader of I")
            b = await nc.jetstream().pull_subscribe_bind("B", stream="I")
            seen = await pull_until(b, 2)  # (again, after ack_wait)
            assert seen == {4: 2, 5: 2}, seen
            await same_everywhere(cluster, "I", alive, ())
            state = (await stream_info(nc, "I"))["state"]
            assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 6, 5), state
            for name in ("A", "B"):
                info = await info_from(nc, "I", name)
                assert info["ack_floor"]["stream_seq"] == 5 and info["num_ack_pending"] == 0, info

            # Two more, acked by A only: B's deletion takes them (cleanupNoInterestMessages).
            js = nc.jetstream()
            for n in (6, 7):
                await retried(lambda n=n: js.publish(f"i.{n}", b"m%d" % n, timeout=REQUEST_TIMEOUT), f"message {n}")
            a = await nc.jetstream().pull_subscribe_bind("A", stream="I")
            assert sorted(await pull_until(a, 2)) == [6, 7]
            await same_everywhere(cluster, "I", alive, (6, 7))
            await until(meta_answers(nc), "the meta group led again")  # (the stop may have taken it)
            deleted = await api(nc, "$JS.API.CONSUMER.DELETE.I.B")
            assert deleted == {"type": _T + "consumer_delete_response", "success": True}
            await same_everywhere(cluster, "I", alive, ())

    run(main)


def test_r1_consumers_of_an_r3_stream_through_nats_py(cluster):
    """An ephemeral pull consumer, an ordered consumer and a KV watcher: R1 (2.15.1's
    ConsumerConfig.replicas for ephemerals of a limits stream), each run by the server it
    is placed on, over its replica, from whichever server the client is on."""
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            await r3_stream(ncs[0], {"name": "S", "subjects": ["s.>"]}, MESSAGES)
            js = ncs[1].jetstream()

            # An ephemeral pull consumer (nats-py's pull_subscribe without a durable name).
            psub = await js.pull_subscribe("s.>", stream="S", config=ConsumerConfig(ack_wait=30))
            info = await psub.consumer_info()
            assert info.config.num_replicas in (0, None) and info.cluster is not None
            assert info.cluster.leader and not info.cluster.replicas, info.cluster
            assert sorted(await pull_until(psub, MESSAGES)) == list(range(1, MESSAGES + 1))
            info = await psub.consumer_info()
            assert info.ack_floor.stream_seq == MESSAGES and info.num_pending == 0
            for nc in ncs:  # (asked of every server: its server answers)
                answer = await api(nc, f"$JS.API.CONSUMER.INFO.S.{info.name}")
                assert answer["cluster"]["leader"] == info.cluster.leader, answer

            # An ordered consumer (push, flow control, heartbeats, memory).
            received: list[int] = []
            done = asyncio.Event()

            async def on_msg(msg):
                received.append(msg.metadata.sequence.stream)
                if len(received) >= MESSAGES + 2:
                    done.set()

            osub = await ncs[2].jetstream().subscribe("s.>", ordered_consumer=True, cb=on_msg, idle_heartbeat=1.0)

            # The stream's leader hands over: the consumers stay where they run, on their replica.
            leader = (await stream_info(ncs[0], "S"))["cluster"]["leader"]
            down = await api(ncs[0], "$JS.API.STREAM.LEADER.STEPDOWN.S")
            assert down == {"type": _T + "stream_leader_stepdown_response", "success": True}

            async def moved():
                info = await stream_info(ncs[0], "S")
                return info["cluster"].get("leader") not in (None, leader)

            await until(moved, "a new leader of S")
            pub = ncs[0].jetstream()
            for n in (MESSAGES + 1, MESSAGES + 2):
                await retried(lambda n=n: pub.publish(f"s.{n}", b"m%d" % n, timeout=REQUEST_TIMEOUT), f"message {n}")
            await asyncio.wait_for(done.wait(), STEP)
            assert received == list(range(1, MESSAGES + 3)), received
            await osub.unsubscribe()
            assert sorted(await pull_until(psub, 2)) == [MESSAGES + 1, MESSAGES + 2]

            # A KV bucket with 3 replicas, watched (an ordered consumer of its R3 stream).
            kv = await retried(lambda: ncs[0].jetstream().create_key_value(bucket="B", history=2, replicas=3),
                               "an R3 bucket")
            await retried(lambda: kv.put("k1", b"v1"), "k1 put")
            watched = await ncs[1].jetstream().key_value("B")
            watcher = await watched.watchall()
            first = await watcher.updates(timeout=STEP)
            assert (first.key, first.value) == ("k1", b"v1")
            assert await watcher.updates(timeout=STEP) is None  # (the initial values' end)
            await kv.put("k2", b"v2")
            await kv.delete("k1")
            nxt = await watcher.updates(timeout=STEP)
            assert (nxt.key, nxt.value) == ("k2", b"v2")
            gone = await watcher.updates(timeout=STEP)
            assert gone.key == "k1" and gone.operation == "DEL"
            await watcher.stop()

    run(main)



def test_a_pause_goes_through_the_meta_group_and_survives_a_failover(cluster):
    """jsConsumerPauseRequest in a cluster: the meta leader proposes the consumer's assignment
    with its pause_until and answers; the consumer's server (an R3 consumer's leader, an R1
    consumer's server) pauses it; an R3 consumer's new leader is paused too; a resume likewise."""
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            nc = ncs[0]
            await r3_stream(nc, {"name": "S", "subjects": ["s.>"]}, 2)
            await durable(nc, "S", {"durable_name": "P", "ack_policy": "explicit"})
            await durable(nc, "S", {"durable_name": "Q", "ack_policy": "explicit", "num_replicas": 1})
            until_text = "2100-01-01T00:00:00Z"
            for name in ("P", "Q"):
                paused = await api(ncs[1], f"$JS.API.CONSUMER.PAUSE.S.{name}", {"pause_until": until_text})
                assert paused["type"] == _T + "consumer_pause_response" and paused["paused"] is True, paused
                assert paused["pause_until"] == until_text and paused["pause_remaining"] > 0, paused

                async def applied(name=name):
                    info = await info_from(ncs[2], "S", name)
                    return info if info.get("paused") and info["config"].get("pause_until") == until_text else None

                await until(applied, f"{name} paused")
            missing = await api(nc, "$JS.API.CONSUMER.PAUSE.S.NONE", {"pause_until": until_text})
            assert missing == {"type": _T + "consumer_pause_response", "error": {
                "code": 404, "err_code": 10014, "description": "consumer not found"},
                "paused": False, "pause_until": "0001-01-01T00:00:00Z"}, missing

            # P's leader stopped: the new leader runs it paused (its assignment's pause_until).
            old = (await info_from(nc, "S", "P"))["cluster"]["leader"]
            stopped = index_of(cluster, old)
            cluster.stop(stopped)
            nc = ncs[next(i for i in range(3) if i != stopped)]
            after = await info_from(nc, "S", "P", not_leader=old)
            assert after["paused"] is True and after["config"]["pause_until"] == until_text, after
            psub = await nc.jetstream().pull_subscribe_bind("P", stream="S")
            with pytest.raises(nats.errors.TimeoutError):
                await psub.fetch(1, timeout=1.0)

            # Resumed: it delivers.
            await until(meta_answers(nc), "the meta group led again")  # (the stop may have taken it)
            resumed = await api(nc, "$JS.API.CONSUMER.PAUSE.S.P", {})
            assert resumed == {"type": _T + "consumer_pause_response", "paused": False,
                               "pause_until": "0001-01-01T00:00:00Z"}, resumed
            assert sorted(await pull_until(psub, 2)) == [1, 2]

    run(main)

def test_a_delayed_nak_and_a_progress_are_proposed_as_2_15_1_does():
    """consumer.go processNak with a delay and progressUpdate (+WPI): the message's delivery
    time moved (updateDeliveredOp), to ``now - ack_wait + delay`` for the nak; a new leader
    loading the follower's state redelivers the nak'd message once the delay is over, not
    before; a round with nothing changed proposes nothing."""
    rc, leader, group = _leader("explicit")  # (ack_wait 1000 ns)
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    follower = ConsumerApplier("explicit")
    leader.next_msg(100)
    leader.next_msg(100)
    groups.replicate(rc)
    for data in group.proposed:
        follower.apply_op(decode_consumer_op(data))
    group.proposed.clear()
    leader.nak(1, 5000, 200)
    leader.progress(2, 300)
    groups.replicate(rc)
    assert [decode_consumer_op(d) for d in group.proposed] == [Delivered(1, 1, 1, 200 + 5000 - 1000),
                                                                Delivered(2, 2, 1, 300)]
    for data in group.proposed:
        follower.apply_op(decode_consumer_op(data))
    group.proposed.clear()
    groups.replicate(rc)
    assert group.proposed == []
    loaded = _loaded(follower, leader)
    loaded.expire_acks(1299)
    assert loaded.rdq == []
    loaded.expire_acks(1300)
    assert loaded.rdq == [2]
    loaded.expire_acks(5199)
    assert loaded.rdq == [2]
    loaded.expire_acks(5200)
    assert loaded.rdq == [1, 2]
