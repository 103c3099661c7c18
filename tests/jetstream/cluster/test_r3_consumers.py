"""Replicated (R3) consumers in a cluster of three in-process natservers (issue #32; real clocks,
bounded polls, a hard timeout on each test): a durable pull consumer and a durable push
consumer, each its own consumer group (natserver/jetstream/consumer_group_runner.py), fetched
or received and acked through nats-py; the consumer's leader stopped or stepped down; the
consumer goes on from another node without delivering again what was acked, CONSUMER.INFO's
delivered, ack floor and num_pending the same before and after; what was delivered and not
acked comes again after ack_wait; the stopped server restarted, its replicated state caught up.

The stream under the consumers is a replicated (R3) stream (replica.py, merged from branch
h-r3s): each server applies its group's entries into its own copy, from which the consumer's
leader, wherever it is, delivers. A randomized unit test checks the leader's proposals
against a follower's state without a cluster.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from types import SimpleNamespace

import nats
import pytest
import trio

from natserver import clock
from natserver.jetstream import consumer_group_runner as runner
from natserver.jetstream.consumer import Consumer, ConsumerConfig
from natserver.jetstream.consumer_group_runner import ConsumerGroups, Replicated
from natserver.jetstream.replication.consumer_group import ConsumerApplier
from natserver.jetstream.replication.entries import ConsumerAssignment
from natserver.jetstream.replication.group_codec import Acked, Delivered, PendingRequest, decode_consumer_op
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig
from natserver.raft import Committed, EntryType
from natserver.raft.wire import Entry
from natserver.testing_cluster import NatsCluster

from .test_cluster import (
    REQUEST_TIMEOUT,
    STEP,
    api,
    cluster_options,
    connect,
    meta_answers,
    meta_leader,
    same_shape,
    until,
)

DATA = Path(__file__).parents[1] / "replication" / "data" / "groups_nats_server_2.15.1.json"
TEST_TIMEOUT = 180.0  # seconds of real time for a whole test (the hard timeout)
ACCOUNT = "APP"
MESSAGES = 10
ACK_WAIT = 2_000_000_000  # ns: short, so that the test sees a redelivery after the failover
# ns: the push consumer's, longer (what it pushed must not come again before the subscribers
# are gone: they would take it)
PUSH_ACK_WAIT = 5_000_000_000
_T = "io.nats.jetstream.api.v1."


def recorded_consumer_info() -> dict:
    """2.15.1's CONSUMER.INFO of an R3 pull consumer (the stream-group recording)."""
    points = json.loads(DATA.read_text())["points"]
    return next(p["consumers"]["PULL"] for p in points if "cluster" in p["consumers"].get("PULL", {}))


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def jsc(cluster: NatsCluster, i: int):
    """Node i's JetStreamCluster."""
    return cluster.servers[i].server.jetstream.cluster


def on(cluster: NatsCluster, i: int, fn):
    """fn(node i's JetStreamCluster), in its server's loop."""
    return cluster.servers[i]._call(lambda: fn(jsc(cluster, i)))


def index_of(cluster: NatsCluster, name: str) -> int:
    return next(i for i, node in enumerate(cluster.servers) if node.options.server_name == name)


async def r3_stream(cluster: NatsCluster, sys_nc, ncs) -> None:
    """The R3 stream S (subjects s.>, its group on the three servers), MESSAGES messages
    published, stored on every server."""
    await until(lambda: meta_leader(sys_nc), "a meta leader elected")

    async def created():
        answer = await api(ncs[0], "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "num_replicas": 3})
        return answer if "error" not in answer else None

    await until(created, "the R3 stream created")
    js = ncs[0].jetstream()
    for n in range(1, MESSAGES + 1):
        async def published(n=n):
            try:
                return await js.publish(f"s.{n}", b"m%d" % n, timeout=REQUEST_TIMEOUT)
            except nats.js.errors.NoStreamResponseError:
                return None

        ack = await until(published, f"message {n} stored")
        assert ack.seq == n

    async def same_messages():
        return all(on(cluster, i, lambda c: c.engines[ACCOUNT].streams["S"].store.last_seq) == MESSAGES
                   for i in range(3))

    await until(same_messages, "the messages on every server")


async def create_consumer(nc, config: dict) -> dict:
    """A durable R3 consumer, created through the meta leader; answered by its group's leader
    once elected (asked again while the election takes longer than the request's timeout)."""
    name = config["durable_name"]

    async def created():
        answer = await api(nc, f"$JS.API.CONSUMER.DURABLE.CREATE.S.{name}", {"stream_name": "S", "config": config})
        assert "error" not in answer, answer
        return answer

    return await until(created, f"consumer {name} created")


async def info_from(nc, name: str, not_leader: str = "") -> dict:
    """CONSUMER.INFO once a leader (not ``not_leader``) answers."""
    async def answered():
        try:
            info = await api(nc, f"$JS.API.CONSUMER.INFO.S.{name}", timeout=1.0)
        except nats.errors.TimeoutError:
            return None
        leader = info.get("cluster", {}).get("leader")
        return info if leader and leader != not_leader else None

    return await until(answered, f"{name}'s info from a leader other than {not_leader!r}")


def progress(info: dict) -> tuple:
    return (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"], info["ack_floor"]["consumer_seq"],
            info["ack_floor"]["stream_seq"], info["num_pending"], info["num_ack_pending"])


async def replicated_everywhere(cluster: NatsCluster, name: str, info: dict, nodes) -> None:
    """Every member in ``nodes`` has applied the leader's state (delivered, ack floor, pending)."""
    want = {"delivered": [info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]],
            "ack_floor": [info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]],
            "num_ack_pending": info["num_ack_pending"]}

    states: list = []

    async def applied():
        states[:] = [on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "S", name)) for i in nodes]
        return all(s is not None and {k: s[k] for k in want} == want for s in states)

    try:
        await until(applied, f"{name}'s state applied on {list(nodes)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {states} (want {want})") from None


def test_r3_pull_consumer_fails_over_and_catches_up(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            await r3_stream(cluster, sys_nc, ncs)
            created = await create_consumer(ncs[1], {"durable_name": "PULL", "ack_policy": "explicit",
                                                     "ack_wait": ACK_WAIT})
            assert created["type"] == _T + "consumer_create_response" and created["num_pending"] == MESSAGES
            block = created["cluster"]
            names = sorted(node.options.server_name for node in cluster.servers)
            assert block["name"] == cluster.name and block["raft_group"].startswith("C-R3F-")
            assert sorted([block["leader"]] + [r["name"] for r in block["replicas"]]) == names
            info = await info_from(ncs[2], "PULL")
            same_shape(info, recorded_consumer_info())
            listed = await api(ncs[0], "$JS.API.CONSUMER.LIST.S")  # (the meta leader asks the leader: $JSC.CI)
            assert [c["name"] for c in listed["consumers"]] == ["PULL"] and "missing" not in listed, listed
            assert listed["consumers"][0]["cluster"]["leader"] == block["leader"]
            # Both groups' folders, as 2.15.1 names them, on every server.
            group = block["raft_group"]
            for node in cluster.servers:
                assert (Path(node.options.store_dir) / "jetstream" / "SYS" / "_js_" / group).is_dir()

            # Five fetched, three acked (the first, second and fourth).
            psub = await ncs[2].jetstream().pull_subscribe_bind("PULL", stream="S")
            got = await psub.fetch(5, timeout=REQUEST_TIMEOUT)
            assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
            for m in (got[0], got[1], got[3]):
                await m.ack_sync(timeout=REQUEST_TIMEOUT)
            before = await info_from(ncs[0], "PULL")
            assert progress(before) == (5, 5, 2, 2, 5, 2)
            await replicated_everywhere(cluster, "PULL", before, range(3))

            # The consumer's leader stopped: another takes over, from the replicated state.
            old = before["cluster"]["leader"]
            stopped = index_of(cluster, old)
            cluster.stop(stopped)
            alive = [i for i in range(3) if i != stopped]
            nc = ncs[alive[0]]
            after = await info_from(nc, "PULL", not_leader=old)
            assert progress(after) == progress(before)
            assert after["cluster"]["leader"] != old

            # What comes next: the five not delivered and the two not acked (again, once their
            # ack_wait from the first delivery is over); never the three acked.
            psub = await nc.jetstream().pull_subscribe_bind("PULL", stream="S")
            seen: dict[int, int] = {}
            deadline = time.monotonic() + STEP
            while len(seen) < 7 and time.monotonic() < deadline:
                try:
                    msgs = await psub.fetch(7 - len(seen), timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    assert m.metadata.sequence.stream not in seen, m.metadata
                    seen[m.metadata.sequence.stream] = m.metadata.num_delivered
                    await m.ack_sync(timeout=REQUEST_TIMEOUT)
            assert seen == {3: 2, 5: 2, 6: 1, 7: 1, 8: 1, 9: 1, 10: 1}, seen
            done = await info_from(nc, "PULL", not_leader=old)
            assert done["ack_floor"]["stream_seq"] == MESSAGES and done["num_ack_pending"] == 0
            assert done["num_pending"] == 0

            # The stopped server back: its node replays its log and is caught up.
            cluster.restart(stopped)
            await replicated_everywhere(cluster, "PULL", done, range(3))

            # A pull request waiting (nothing left to deliver) is replicated; after a leader
            # step-down the new leader tells it 409 Leadership Change and answers from then on,
            # with the same state.
            inbox = nc.new_inbox()
            waiting = await nc.subscribe(inbox)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.PULL", b'{"batch": 1, "expires": 60000000000}',
                             reply=inbox)

            async def request_replicated():
                states = [on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "S", "PULL")) for i in range(3)]
                return all(s is not None and s["pending_requests"] == 1 for s in states)

            await until(request_replicated, "the waiting pull request replicated")
            stepdown = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.PULL")
            assert stepdown == {"type": _T + "consumer_leader_stepdown_response", "success": True}
            told = await waiting.next_msg(timeout=STEP)
            assert (told.headers or {}).get("Status") == "409" and told.headers.get("Description") == "Leadership Change"
            moved = await info_from(nc, "PULL", not_leader=done["cluster"]["leader"])
            assert progress(moved) == progress(done) and moved["num_waiting"] == 0

            # Deleted: the group's folder goes on every server.
            deleted = await api(nc, "$JS.API.CONSUMER.DELETE.S.PULL")
            assert deleted == {"type": _T + "consumer_delete_response", "success": True}

            async def folders_gone():
                return not any((Path(node.options.store_dir) / "jetstream" / "SYS" / "_js_" / group).exists()
                               for node in cluster.servers)

            await until(folders_gone, "the group's folders removed")
            assert all(on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "S", "PULL")) is None
                       for i in range(3))
        finally:
            for nc in [*ncs, sys_nc]:
                if not nc.is_closed:
                    await nc.close()

    run(main)


def test_r3_push_consumer_goes_on_after_its_leader_steps_down_and_stops(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            await r3_stream(cluster, sys_nc, ncs)
            await create_consumer(ncs[0], {"durable_name": "PUSH", "ack_policy": "explicit", "ack_wait": PUSH_ACK_WAIT,
                                           "deliver_subject": "push.in", "max_ack_pending": 4})
            received: dict[tuple[int, int], object] = {}  # (stream seq, delivery count) -> message

            async def on_msg(m):
                received.setdefault((m.metadata.sequence.stream, m.metadata.num_delivered), m)

            subs = [await nc.subscribe("push.in", cb=on_msg) for nc in ncs]  # (wherever the leader is)

            async def four():
                return {seq for seq, _ in received} == {1, 2, 3, 4}

            await until(four, "four pushed (max_ack_pending 4)")
            for sub in subs:  # (nobody listens: the consumer's state stays as it is)
                await sub.unsubscribe()

            async def unbound():  # (the leader has seen every unsubscribe cross the routes)
                return not (await info_from(ncs[0], "PUSH")).get("push_bound")

            await until(unbound, "the push consumer unbound")
            for seq in (1, 2, 3):
                await received[(seq, 1)].ack_sync(timeout=REQUEST_TIMEOUT)
            before = await info_from(ncs[1], "PUSH")
            assert progress(before) == (4, 4, 3, 3, MESSAGES - 4, 1)
            await replicated_everywhere(cluster, "PUSH", before, range(3))

            # A step-down: the new leader has the same state.
            old = before["cluster"]["leader"]
            stepdown = await api(ncs[2], "$JS.API.CONSUMER.LEADER.STEPDOWN.S.PUSH")
            assert stepdown == {"type": _T + "consumer_leader_stepdown_response", "success": True}
            after = await info_from(ncs[2], "PUSH", not_leader=old)
            assert progress(after) == progress(before)

            # The new leader stopped: the third member goes on from the same state, and pushes
            # everything but the three acked (4 again, its ack_wait over).
            stopped = index_of(cluster, after["cluster"]["leader"])
            cluster.stop(stopped)
            alive = [i for i in range(3) if i != stopped]
            nc = ncs[alive[0]]
            later = await info_from(nc, "PUSH", not_leader=after["cluster"]["leader"])
            assert progress(later) == progress(before)
            received.clear()
            acked: set[int] = set()

            async def on_again(m):
                seq = m.metadata.sequence.stream
                received.setdefault((seq, m.metadata.num_delivered), m)
                if seq not in acked:
                    acked.add(seq)
                    await m.ack()

            await nc.subscribe("push.in", cb=on_again)

            async def all_acked():
                info = await api(nc, "$JS.API.CONSUMER.INFO.S.PUSH")
                return info if info["ack_floor"]["stream_seq"] == MESSAGES else None

            final = await until(all_acked, "every message pushed and acked")
            assert final["num_ack_pending"] == 0 and final["num_pending"] == 0
            assert {seq for seq, _ in received} == set(range(4, MESSAGES + 1)), sorted(received)
            assert received.get((4, 2)) is not None, sorted(received)

            # The stream deleted: the consumer's group goes with it (its folder on the members up).
            group = final["cluster"]["raft_group"]
            # The stopped node may have led the meta group too: its election (4-9 s, raft.go's
            # timeouts) is its own, and the consumer's may have ended first. Until the meta
            # group has a leader a delete goes unanswered, with 2.15.1 too: wait for it, as a
            # client retrying would.
            await until(meta_answers(nc), "the meta group led again")
            deleted = await api(nc, "$JS.API.STREAM.DELETE.S")
            assert deleted == {"type": _T + "stream_delete_response", "success": True}

            async def gone():
                return all(on(cluster, i, lambda c: c.consumer_groups.state(ACCOUNT, "S", "PUSH")) is None
                           and not (Path(cluster.servers[i].options.store_dir) / "jetstream" / "SYS" / "_js_"
                                    / group).exists() for i in alive)

            await until(gone, "the consumer's group removed with its stream")
        finally:
            for nc in [*ncs, sys_nc]:
                if not nc.is_closed:
                    await nc.close()

    run(main)


def test_a_consumer_with_more_replicas_than_its_stream_is_refused(cluster):
    """consumer.go checkConsumerCfg: 10126, as 2.15.1 answers it (an R1 stream here), and 10134
    (an R1 consumer of an R3 interest stream)."""
    async def main():
        nc = await connect(cluster.urls[0])
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            await until(lambda: meta_leader(sys_nc), "a meta leader elected")
            created = await api(nc, "$JS.API.STREAM.CREATE.R1", {"name": "R1", "subjects": ["r1.>"]})
            assert "error" not in created, created
            answer = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.R1.D", {
                "stream_name": "R1", "config": {"durable_name": "D", "num_replicas": 3}})
            assert answer == {"type": _T + "consumer_create_response", "error": {
                "code": 400, "err_code": 10126, "description": "consumer config replica count exceeds parent stream"}}
            # An interest stream's consumers have its replicas (checkConsumerCfg: 10134).
            async def interest_stream():
                created = await api(nc, "$JS.API.STREAM.CREATE.I", {"name": "I", "subjects": ["i.>"],
                                                                    "retention": "interest", "num_replicas": 3})
                return created if "error" not in created else None

            await until(interest_stream, "an R3 interest stream created")
            refused = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.I.D", {"stream_name": "I", "config": {
                "durable_name": "D", "ack_policy": "explicit", "num_replicas": 1}})
            assert refused == {"type": _T + "consumer_create_response", "error": {
                "code": 400, "err_code": 10134,
                "description": "consumer config replicas must match interest retention stream's replicas"}}
        finally:
            await nc.close()
            await sys_nc.close()

    run(main)




# -- the leader's proposals, without a cluster ----------------------------------------------------


class _Group:
    """A consumer group's node that takes the leader's proposals (committed as proposed)."""

    def __init__(self) -> None:
        self.proposed: list[bytes] = []
        self.leader = True

    def propose_many(self, items: list[bytes]) -> None:
        self.proposed.extend(items)


def _leader(ack_policy: str, max_deliver: int = -1, filter_subject: str = ""):
    store = MemoryStore(StreamConfig(name="S", subjects=["s.>"]))
    for n in range(1, 41):
        store.store_msg(b"s.%d" % (n % 3), b"", b"m%d" % n, n)
    stream = SimpleNamespace(name="S", store=store, consumers={})
    config = {"durable_name": "D", "ack_policy": ack_policy, "max_deliver": max_deliver, "ack_wait": 1000,
              "filter_subject": filter_subject}
    consumer = Consumer(stream, "D", ConsumerConfig.from_json(config), 0)
    stream.consumers["D"] = consumer
    group = _Group()
    ca = ConsumerAssignment(None, "", "D", "S", config, None, "", "")
    rc = Replicated(None, "A", ca, group, ConsumerApplier(ack_policy, max_deliver))  # type: ignore[arg-type]
    rc.consumer, rc.shadow = consumer, ConsumerApplier(ack_policy, max_deliver)
    return rc, consumer, group


def _loaded(applier: ConsumerApplier, like: Consumer) -> Consumer:
    """What a new leader would run: the follower's state in a new Consumer."""
    consumer = Consumer(like.stream, "D", like.cfg, 0)
    applier.load_into(consumer)
    return consumer


def _state(c: Consumer) -> tuple:
    """What a new leader must go on from: delivered, pending and their delivery counts."""
    return (c.delivered_cseq, c.state_sseq, sorted(c.pending),
            sorted((s, n) for s, n in c.rdc.items() if s in c.pending and n > 1))


def _same_floor(follower: Consumer, leader: Consumer) -> None:
    """The ack floor as 2.15.1's store keeps it (moved by the ack of the message just above
    it, consumer.go moveAckFloor) is never above the leader's (natserver's Consumer puts it
    just below the first pending message at each ack) nor above a pending message, and is
    the leader's once nothing is pending."""
    assert follower.ack_floor_sseq <= leader.ack_floor_sseq
    assert all(seq > follower.ack_floor_sseq for seq in follower.pending)
    if not leader.pending:
        assert (follower.ack_floor_cseq, follower.ack_floor_sseq) == (leader.ack_floor_cseq, leader.ack_floor_sseq)


@pytest.mark.parametrize(("ack_policy", "filter_subject", "max_deliver", "seed"), [
    ("explicit", "", -1, 1), ("explicit", "", -1, 2), ("explicit", "s.1", -1, 3), ("all", "", -1, 4),
    ("none", "", -1, 5), ("explicit", "", 2, 6), ("all", "s.2", -1, 7), ("explicit", "s.1", 3, 8), ("all", "", 2, 9)])
def test_a_follower_of_the_leaders_proposals_has_the_leaders_state(ack_policy, filter_subject, max_deliver, seed):
    """Random deliveries, acks (several between two rounds of proposals, or none),
    redeliveries after ack_wait: after each round a follower applying the proposed entries
    (2.15.1's encoding, decoded) loads into a Consumer with the leader's delivered, pending
    and redelivery counts, and an ack floor that acknowledges nothing still pending."""
    rng = random.Random(seed)
    rc, leader, group = _leader(ack_policy, max_deliver, filter_subject)
    follower = ConsumerApplier(ack_policy, max_deliver)
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    now = 0
    for _ in range(60):
        now += rng.randrange(1, 400)
        for _ in range(rng.randrange(0, 4)):
            leader.next_msg(now)
        if ack_policy != "none":
            for seq in list(leader.pending):
                if rng.random() < 0.3 and seq in leader.pending:  # (AckAll: gone with a later one)
                    leader.ack(seq, leader.pending[seq][0], now)
            leader.expire_acks(now)  # (max_deliver: dropped from pending)
        if rng.random() < 0.7:
            groups.replicate(rc)
            for data in group.proposed:
                follower.apply_op(decode_consumer_op(data))
            group.proposed.clear()
            loaded = _loaded(follower, leader)
            assert _state(loaded) == _state(leader)
            _same_floor(loaded, leader)
    assert leader.delivered_cseq >= 10


def test_a_new_leaders_pull_requests_and_an_unchanged_consumer():
    """A waiting pull request is proposed (addPendingRequest) and its end too; a round with
    nothing changed proposes nothing."""
    rc, leader, group = _leader("explicit")
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    leader.waiting.append(SimpleNamespace(reply=b"_INBOX.r1"))
    groups.replicate(rc)
    assert [decode_consumer_op(d) for d in group.proposed] == [PendingRequest(b"_INBOX.r1", True)]
    group.proposed.clear()
    groups.replicate(rc)
    assert group.proposed == []
    leader.waiting.clear()
    groups.replicate(rc)
    assert [decode_consumer_op(d) for d in group.proposed] == [PendingRequest(b"_INBOX.r1", False)]


def test_a_member_snapshots_its_state_after_enough_entries():
    """monitorConsumer's rule: a snapshot of the applied state (encodeConsumerState) once
    COMPACT_NUM_MIN entries were applied and MIN_SNAP_DELTA has passed since the last one;
    another member installing it has the same state."""
    snapshots: list[tuple[bytes, int]] = []
    node = SimpleNamespace(install_snapshot=lambda data, index: snapshots.append((data, index)))
    group = SimpleNamespace(node=node, leader=False, name="C-R3F-test")
    ca = ConsumerAssignment(None, "", "D", "S", {"durable_name": "D", "ack_policy": "explicit"}, None, "", "")
    rc = Replicated(SimpleNamespace(streams={}), "A", ca, group, ConsumerApplier("explicit"))  # type: ignore[arg-type]
    rc.snapshot_at = clock.monotonic() - runner.MIN_SNAP_DELTA
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    ops = []
    for seq in range(1, runner.COMPACT_NUM_MIN + 1):
        ops.append(Delivered(seq, seq, 1, seq * 1_000_000_000))
        if seq % 3:
            ops.append(Acked(seq, seq))
    entries = [Committed(i + 1, 1, Entry(EntryType.NORMAL, op.encode())) for i, op in enumerate(ops)]
    groups._apply(rc, entries[:runner.COMPACT_NUM_MIN - 1])
    assert snapshots == []
    groups._apply(rc, entries[runner.COMPACT_NUM_MIN - 1:])
    assert [index for _, index in snapshots] == [len(entries)]
    other = ConsumerApplier("explicit")
    other.apply(Entry(EntryType.SNAPSHOT, snapshots[0][0]))
    assert (other.delivered, other.ack_floor, sorted(other.pending)) == (
        rc.applier.delivered, rc.applier.ack_floor, sorted(rc.applier.pending))
    assert sorted(other.pending) == list(range(3, runner.COMPACT_NUM_MIN + 1, 3))


async def test_a_server_leading_no_consumer_runs_no_replication_rounds(autojump_clock):
    """No timer every REPLICATE_INTERVAL on a server whose consumers all follow (it cost each
    clustered server ~5 % of a core, idle); the leadership arriving starts the rounds."""
    rc, leader, group = _leader("explicit")
    group.leader = False
    group.node = SimpleNamespace(last_index=0)
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    groups.consumers[("A", "S", "D")] = rc
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups.run)
        await trio.sleep(10)
        assert groups.rounds == 0
        group.leader = True
        rc.consumer = None  # (what _start_leading makes: the test's Consumer is there already)
        groups._start_leading = lambda rc: setattr(rc, "consumer", leader)  # type: ignore[method-assign]
        groups._leader_changed(rc, True)
        await trio.sleep(1)
        assert groups.rounds >= 50 and rc.consumer is leader
        group.leader = False
        await trio.sleep(1)
        rounds = groups.rounds
        await trio.sleep(10)
        assert groups.rounds == rounds
        nursery.cancel_scope.cancel()


def test_ack_replies_wait_for_their_commit():
    """consumer.go addAckReply: an AckSync's reply from a replicated consumer's leader goes
    once the group committed the round that carries the ack (a leader change before that
    leaves it unanswered: the acker retries, nothing is promised and lost)."""
    rc, leader, group = _leader("explicit")
    group.node = SimpleNamespace(last_index=7)  # (this round's proposal)
    sent: list[bytes] = []
    rc.engine = SimpleNamespace(send=lambda reply, payload: sent.append(reply),
                                server=SimpleNamespace(flush_touched=lambda: None))
    groups = ConsumerGroups(SimpleNamespace())  # type: ignore[arg-type]
    rc.applied = 6
    leader.held_ack_replies = [b"_INBOX.a1"]
    groups._hold_ack_replies(rc)
    assert sent == [] and leader.held_ack_replies == []
    rc.applied = 7
    groups._answer_acks(rc)
    assert sent == [b"_INBOX.a1"]
    leader.held_ack_replies = [b"_INBOX.a2"]  # (nothing proposed is uncommitted: at once)
    groups._hold_ack_replies(rc)
    assert sent == [b"_INBOX.a1", b"_INBOX.a2"]
    leader.held_ack_replies = [b"_INBOX.a3"]
    group.node.last_index = 9
    groups._hold_ack_replies(rc)
    groups._stop_leading(rc)
    rc.applied = 9
    groups._answer_acks(rc)
    assert sent == [b"_INBOX.a1", b"_INBOX.a2"] and leader.held_ack_replies is None
