"""Real clients' own JetStream-cluster tests, redone as nats-py scenarios (issue #32: "real
clients' own cluster tests ... run against natserver clusters and nats-server clusters side by
side"). Each scenario does the client-visible steps of one test of nats.js or nats.go (named in
its comment: repository, file, test) and runs twice with the same assertions: against three
in-process natservers (NatsCluster(3, jetstream=True)) and against three nats-server 2.15.1
processes (when the 2.15.1 binary is found: $NATS_SERVER_REFERENCE, tests.reference). The
comparison is the test. Real clocks, bounded polls, a hard timeout on each scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import tempfile
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig, KeyValueConfig

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.test_cluster import (
    POLL,
    REQUEST_TIMEOUT,
    api,
    cluster_options,
    connect,
    meta_leader,
    until,
)
from tests.raft.nrg_cluster import Cluster as ReferenceCluster
from tests.reference import HAVE_NATS_SERVER, NATS_SERVER

SCENARIO_TIMEOUT = 150.0  # seconds of real time for a scenario, the cluster's start included
# nats-server's clients wait for JetStream after a cluster starts (nats.go's testservice
# WaitForJetStream, nats.js' jetstreamCluster): 2.15.1's first meta election takes 4-9 s.
READY_TIMEOUT = 60.0
CONNECT_RETRY = 0.1  # seconds between two connection attempts to a process still starting
FETCH_TIMEOUT = 5.0  # nats.go newTesterCtx(t, 5*time.Second): what a fetch may wait for
NO_WAIT_QUIET = 0.5  # seconds a no-wait fetch's empty answer is awaited (nats.go sleeps 100 ms)
TEST_MSGS = [b"m1", b"m2", b"m3", b"m4", b"m5"]  # nats.go pull_test.go testMsgs


class Backend:
    """A running 3-node JetStream cluster, natserver's or 2.15.1's: client URLs, cluster name."""

    kind = ""
    cluster_name = ""
    urls: list[str]

    def stop(self) -> None:
        raise NotImplementedError

    def stop_node(self, i: int) -> None:
        raise NotImplementedError

    def start_node(self, i: int) -> None:
        raise NotImplementedError


class NatserverBackend(Backend):
    kind = "natserver"

    def __init__(self) -> None:
        self.cluster = NatsCluster(3, jetstream=True, **cluster_options()).start()
        self.cluster_name = self.cluster.name
        self.urls = self.cluster.urls

    def stop(self) -> None:
        self.cluster.stop_all()

    def stop_node(self, i: int) -> None:
        self.cluster.stop(i)

    def start_node(self, i: int) -> None:
        self.cluster.restart(i)


class ReferenceBackend(Backend):
    """Three nats-server 2.15.1 processes (tests/raft/nrg_cluster's configuration: the same
    accounts and users as cluster_options)."""

    kind = "nats-server"

    def __init__(self) -> None:
        assert NATS_SERVER is not None
        self.folder = tempfile.TemporaryDirectory(prefix="natserver-suite-")
        self.cluster = ReferenceCluster.create(NATS_SERVER, Path(self.folder.name))
        self.cluster.start_all()
        self.cluster_name = self.cluster.name
        self.urls = [f"nats://127.0.0.1:{node.port}" for node in self.cluster.nodes]

    def stop(self) -> None:
        self.cluster.stop_all()
        self.folder.cleanup()

    def stop_node(self, i: int) -> None:
        """A shutdown, as nats.go's StopServer (SIGINT: nats-server flushes its stores)."""
        node = self.cluster.nodes[i]
        assert node.process is not None
        node.process.send_signal(signal.SIGINT)
        node.process.wait(timeout=READY_TIMEOUT)
        node.process = None

    def start_node(self, i: int) -> None:
        self.cluster.start(self.cluster.nodes[i])


BACKENDS = [
    pytest.param(NatserverBackend, id="natserver"),
    pytest.param(ReferenceBackend, id="nats-server-2.15.1", marks=[
        pytest.mark.skipif(not HAVE_NATS_SERVER, reason="nats-server 2.15.1 is not installed"),
        pytest.mark.needs_nats_server]),
]


@pytest.fixture(params=BACKENDS)
def backend(request):
    started = request.param()
    try:
        yield started
    finally:
        started.stop()


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT))


async def dial(url: str, user: str = "app") -> nats.NATS:
    """A client of a server that may still be starting (a 2.15.1 process: not listening yet)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            return await connect(url, user)
        except (OSError, nats.errors.NoServersError):
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(CONNECT_RETRY)


@contextlib.asynccontextmanager
async def ready(backend: Backend):
    """(an APP client of each server, a SYS client of the first) once a meta leader every
    server agrees on is known, as the clients' test harnesses wait before a test."""
    ncs = [await dial(url) for url in backend.urls]
    sys_nc = await dial(backend.urls[0], "sys")
    try:
        await until(lambda: meta_leader(sys_nc), "a meta leader every server agrees on", READY_TIMEOUT)
        yield ncs, sys_nc
    finally:
        for nc in [*ncs, sys_nc]:
            with contextlib.suppress(nats.errors.Error):
                await nc.close()


async def until_ok(call, what: str, timeout: float = READY_TIMEOUT):
    """``await call()`` again while the cluster is forming (nats.go withClusterAndStream retries
    the stream's create "while cluster settles"); its result."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError,
                nats.js.errors.NoStreamResponseError) as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"not {what} within {timeout} s: {exc!r}") from exc
        await asyncio.sleep(POLL)


async def publish_all(js, subject: str, payloads: list[bytes]) -> list[int]:
    return [(await until_ok(lambda p=p: js.publish(subject, p), "published")).seq for p in payloads]


# -- nats.js --------------------------------------------------------------------------------


def test_kv_replicas(backend):
    """nats-io/nats.js jetstream/tests (kv_test.ts and jetstream_cluster tests) "kv - replicas":
    a bucket with 3 replicas, its stream's info says 3; updated to 1 replica, the answer says 1."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            js = ncs[0].jetstream(timeout=REQUEST_TIMEOUT)
            kv = await until_ok(lambda: js.create_key_value(KeyValueConfig(bucket="a", replicas=3)), "created")
            status = await kv.status()
            info = await js.stream_info(status.stream_info.config.name)
            assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
            config = info.config
            config.num_replicas = 1
            updated = await js.update_stream(config)
            assert updated.config.num_replicas == 1

    run(scenario)


# (nats.js expects all four refused, but its check is inside its own try: 2.15.1 takes the
# retention and max_consumers changes; the others are refused with these codes)
UPDATES_REFUSED = [({"name": "nn"}, 10056), ({"retention": "interest"}, True), ({"storage": "memory"}, 10052),
                   ({"max_consumers": 5}, True)]
UPDATES_TAKEN = [
    {"subjects": ["subj", "a"]}, {"description": "xx"}, {"max_msgs_per_subject": 5}, {"max_msgs": 100},
    {"max_age": 45_000_000_000}, {"max_bytes": 10240}, {"max_msg_size": 10240}, {"discard": "new"},
    {"no_ack": True}, {"duplicate_window": 15_000_000_000}, {"allow_rollup_hdrs": True},
    {"allow_rollup_hdrs": False}, {"num_replicas": 3}, {"num_replicas": 1}, {"deny_delete": True},
    {"deny_purge": True}, {"sources": [{"name": "a"}]}, {"sealed": True},
]


def test_jsm_stream_update_properties(backend):
    """nats-io/nats.js jetstream/tests/jsm_test.ts "jsm - stream update properties": an R1
    stream's config updated one property at a time (each change in the answer), the properties
    that cannot change refused, a sealed stream not unsealed, a mirror not re-pointed."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = ncs[0]
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.a",
                                          {"name": "a", "storage": "file", "subjects": ["x"]}), "created")
            config = (await api_ok(nc, "$JS.API.STREAM.CREATE.n", {
                "name": "n", "storage": "file", "subjects": ["subj"], "duplicate_window": 30_000_000_000}))["config"]
            outcomes = []
            for change in [c for c, _ in UPDATES_REFUSED] + UPDATES_TAKEN + [{"sealed": False}]:
                answer = await api(nc, "$JS.API.STREAM.UPDATE.n", {**config, **change}, timeout=FETCH_TIMEOUT)
                if "error" in answer:
                    outcomes.append((change, answer["error"]["err_code"]))
                    continue
                config = answer["config"]
                outcomes.append((change, all(config.get(k) == v or (k == "sources" and config[k][0]["name"] == "a")
                                             for k, v in change.items())))
            assert outcomes == [*UPDATES_REFUSED, *((c, True) for c in UPDATES_TAKEN), ({"sealed": False}, 10052)]
            mirror = await api_ok(nc, "$JS.API.STREAM.CREATE.m", {"name": "m", "mirror": {"name": "a"}})
            repointed = await api(nc, "$JS.API.STREAM.UPDATE.m", {**mirror["config"], "mirror": {"name": "nn"}})
            assert "error" in repointed, repointed

    run(scenario)


async def api_ok(nc, subject: str, body: dict) -> dict:
    """A JetStream API request whose answer is no error (raised as ServiceUnavailableError
    while the cluster has no meta leader yet, so that until_ok retries it)."""
    answer = await api(nc, subject, body)
    if answer.get("error", {}).get("err_code") == 10008:  # JSClusterNotAvailErr
        raise nats.js.errors.ServiceUnavailableError
    assert "error" not in answer, answer
    return answer




@pytest.mark.parametrize("through_other_server", [False, True], ids=["streams-mirrors", "mirror-alternates"])
def test_streams_mirrors_and_mirror_alternates(backend, through_other_server):
    """nats-io/nats.js jetstream/tests/streams_test.ts "streams - mirrors" (a stream and its
    mirror placed in the cluster by name, the stream's info lists both as alternates, an
    unknown stream is "stream not found") and jetstream/tests (jetstream_test.ts) "jetstream -
    mirror alternates" (the mirror created through another server, the stream found by
    subject, its info with 2 alternates)."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc, other = ncs[0], ncs[1] if through_other_server else ncs[0]
            placement = {} if through_other_server else {"placement": {"cluster": backend.cluster_name}}
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.src",
                                          {"name": "src", "subjects": ["src.*"], **placement}), "created")
            await api_ok(other, "$JS.API.STREAM.CREATE.mirror", {"name": "mirror", "mirror": {"name": "src"},
                                                                 **placement})
            names = await api(other, "$JS.API.STREAM.NAMES", {"subject": "src.a"})
            assert names["streams"] == ["src"], names
            info = await api(other, "$JS.API.STREAM.INFO.src")
            assert sorted(a["name"] for a in info.get("alternates", [])) == ["mirror", "src"], info
            assert all(a["cluster"] == backend.cluster_name for a in info["alternates"]), info
            missing = await api(nc, "$JS.API.STREAM.INFO.another")
            assert missing["error"]["err_code"] == 10059 and missing["error"]["description"] == "stream not found"

    run(scenario)


# -- nats.go --------------------------------------------------------------------------------


async def pulled(nc, stream: str, consumer: str, batch: int, no_wait: bool = False,
                 quiet: float = FETCH_TIMEOUT) -> list:
    """One pull request (CONSUMER.MSG.NEXT) and what it brought before ``quiet`` passed with
    nothing more: messages (subject, data, reply) and status answers ("404 No Messages")."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    request = {"batch": batch, **({"no_wait": True} if no_wait else {"expires": int(quiet * 1e9)})}
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(request).encode(), reply=inbox)
    got: list = []
    try:
        while len([g for g in got if g[0] != "status"]) < batch:
            msg = await sub.next_msg(timeout=quiet)
            status = (msg.headers or {}).get("Status")
            got.append(("status", status, (msg.headers or {}).get("Description")) if status else
                       (msg.subject, msg.data, msg.reply))
            if status:
                break
    except nats.errors.TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    return got


CLUSTER_STREAM = {"name": "cluster", "subjects": ["FOO.*"]}  # nats.go pull_test.go's stream


def test_pull_consumer_fetch_with_cluster(backend):
    """nats-io/nats.go jetstream/test/pull_test.go TestPullConsumerFetch_WithCluster: "no options"
    (an R1 stream, an ephemeral explicit-ack consumer, five messages published then fetched in
    order) and "with no wait, no messages at the time of request" (nothing: 404 No Messages)."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = ncs[0]
            js = nc.jetstream(timeout=REQUEST_TIMEOUT)
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.cluster", {**CLUSTER_STREAM, "num_replicas": 1}),
                           "created")
            early = await js.add_consumer("cluster", ConsumerConfig(ack_policy="explicit"))
            empty = await pulled(nc, "cluster", early.name, 5, no_wait=True)
            assert empty == [("status", "404", "No Messages")], empty
            consumer = await js.add_consumer("cluster", ConsumerConfig(ack_policy="explicit"))
            assert await publish_all(js, "FOO.123", TEST_MSGS) == [1, 2, 3, 4, 5]
            got = await pulled(nc, "cluster", consumer.name, 5)
            assert [data for _, data, _ in got] == TEST_MSGS, got

    run(scenario)


@pytest.mark.parametrize("replicas", [1, 3])
def test_pull_consumer_consume_with_cluster(backend, replicas):
    """nats-io/nats.go jetstream/test/pull_test.go TestPullConsumerConsume_WithCluster, "num
    replicas: N, no options" and "subscribe, cancel subscription, then subscribe again": an
    ephemeral explicit-ack consumer of an R1 / R3 stream consumed (pulls, each message acked),
    stopped, consumed again: ten messages in publish order, none twice."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = ncs[0]
            js = nc.jetstream(timeout=REQUEST_TIMEOUT)
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.cluster",
                                          {**CLUSTER_STREAM, "num_replicas": replicas}), "created")
            consumer = await js.add_consumer("cluster", ConsumerConfig(ack_policy="explicit"))
            psub = await js.pull_subscribe_bind(consumer.name, "cluster")
            received = []
            for _ in range(2):
                await publish_all(js, "FOO.123", TEST_MSGS)
                deadline = time.monotonic() + FETCH_TIMEOUT * 2
                while len(received) % len(TEST_MSGS) or len(received) < len(TEST_MSGS) * (_ + 1):
                    assert time.monotonic() < deadline, received
                    with contextlib.suppress(nats.errors.TimeoutError):
                        for msg in await psub.fetch(len(TEST_MSGS), timeout=FETCH_TIMEOUT):
                            await msg.ack_sync(timeout=REQUEST_TIMEOUT)
                            received.append(msg.data)
            await psub.unsubscribe()
            assert received == TEST_MSGS * 2, received
            info = await js.consumer_info("cluster", consumer.name)
            assert (info.num_ack_pending, info.num_pending, info.delivered.stream_seq) == (0, 0, 10)

    run(scenario)


RESTARTED = (0, 1)  # nats.go stops servers 0 and 1, then starts both again
PULL_EXPIRY = 1.0  # nats.go PullExpiry(1*time.Second)


@pytest.mark.parametrize("replicas", [1, 3])
def test_pull_consumer_consume_recovers_after_server_restart(backend, replicas):
    """nats-io/nats.go jetstream/test/pull_test.go TestPullConsumerConsume_WithCluster, "num
    replicas: N, recover consume after server restart": a client of every server consumes an
    ephemeral consumer (inactive threshold 10 s) with 1 s pulls, acking each message; two of
    the three servers are stopped and started again; once the stream answers again, five more
    messages are published and consumed: ten in all, in order."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = await nats.connect(backend.urls, user="app", password="pw", max_reconnect_attempts=-1,
                                    reconnect_time_wait=CONNECT_RETRY, connect_timeout=REQUEST_TIMEOUT)
            js = nc.jetstream(timeout=REQUEST_TIMEOUT)
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.cluster",
                                          {**CLUSTER_STREAM, "num_replicas": replicas}), "created")
            consumer = await js.add_consumer("cluster", ConsumerConfig(ack_policy="explicit",
                                                                       inactive_threshold=10.0))
            psub = await js.pull_subscribe_bind(consumer.name, "cluster")
            received: list[bytes] = []
            log: list[str] = []

            async def consume():
                while True:
                    try:
                        for msg in await psub.fetch(len(TEST_MSGS), timeout=PULL_EXPIRY):
                            received.append(msg.data)
                            log.append(f"{msg.data!r} {msg.metadata.sequence} {msg.metadata.num_delivered}")
                            await msg.ack_sync(timeout=REQUEST_TIMEOUT)
                    except (nats.errors.Error, asyncio.TimeoutError) as exc:
                        log.append(repr(exc))
                        await asyncio.sleep(POLL)

            async def until_received(count: int) -> None:
                deadline = time.monotonic() + READY_TIMEOUT
                while len(received) < count:
                    assert time.monotonic() < deadline, received
                    await asyncio.sleep(POLL)

            consuming = asyncio.create_task(consume())
            try:
                await publish_all(js, "FOO.123", TEST_MSGS)
                await until_received(len(TEST_MSGS))
                for i in RESTARTED:
                    await asyncio.to_thread(backend.stop_node, i)
                for i in RESTARTED:
                    await asyncio.to_thread(backend.start_node, i)
                await until(lambda: stream_answers(nc), "the stream answering again", READY_TIMEOUT)
                await publish_all(js, "FOO.123", TEST_MSGS)
                await until_received(2 * len(TEST_MSGS))
            finally:
                consuming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await consuming
                await nc.close()
            assert received == TEST_MSGS * 2, "\n".join(log)

    run(scenario)


async def stream_answers(nc) -> bool:
    """nats.go waitForStream: STREAM.INFO answered without error."""
    try:
        return "error" not in await api(nc, "$JS.API.STREAM.INFO.cluster", timeout=FIRST_ANSWER_TIMEOUT)
    except nats.errors.Error:
        return False


def test_cluster_multiple_subscribe(backend):
    """nats-io/nats.go test/js_test.go TestJetStream_ClusterMultipleSubscribe ("qsub n=3 r=1",
    "psub n=3 r=3"): five queue subscribers of one durable push consumer, and five pull
    subscribers of one durable pull consumer of an R3 stream; ten messages reach more than one."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = ncs[0]
            js = nc.jetstream(timeout=REQUEST_TIMEOUT)
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.QS", {"name": "QS", "subjects": ["qs"]}), "created")
            await api_ok(nc, "$JS.API.STREAM.CREATE.PS", {"name": "PS", "subjects": ["ps"], "num_replicas": 3})
            # (nats.go's QueueSubscribeSync: a durable push consumer with the queue as its
            # deliver group, and the queue's members on its deliver subject)
            await api_ok(nc, "$JS.API.CONSUMER.CREATE.QS.shared", {"stream_name": "QS", "config": {
                "durable_name": "shared", "deliver_subject": "qs.deliver", "deliver_group": "wq",
                "ack_policy": "explicit"}})
            qsubs = [await nc.subscribe("qs.deliver", queue="wq") for _ in range(5)]
            psubs = [await js.pull_subscribe("ps", "shared") for _ in range(5)]
            await publish_all(js, "qs", [b"test"] * 10)
            await publish_all(js, "ps", [b"test"] * 10)
            await asyncio.sleep(NO_WAIT_QUIET)
            assert sum(sub.pending_msgs > 0 for sub in qsubs) >= 2, [sub.pending_msgs for sub in qsubs]
            assert sum(sub.pending_msgs for sub in qsubs) == 10
            fetched = 0
            for psub in psubs:
                with contextlib.suppress(nats.errors.TimeoutError):
                    fetched += len(await psub.fetch(1, timeout=FETCH_TIMEOUT))
            assert fetched == 5

    run(scenario)


def test_consumer_config_replicas_and_mem_storage(backend):
    """nats-io/nats.go test/js_test.go TestJetStreamConsumerConfigReplicasAndMemStorage: an R3
    stream's durable push consumer asked for 1 replica and memory storage: its info has no
    other replicas (and the request carried mem_storage)."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            nc = ncs[0]
            await until_ok(lambda: api_ok(nc, "$JS.API.STREAM.CREATE.CR",
                                          {"name": "CR", "subjects": ["foo"], "num_replicas": 3}), "created")
            created = await api_ok(nc, "$JS.API.CONSUMER.CREATE.CR.dur", {"stream_name": "CR", "config": {
                "durable_name": "dur", "deliver_subject": "bar", "num_replicas": 1, "mem_storage": True}})
            assert created["config"]["num_replicas"] == 1 and created["config"]["mem_storage"] is True
            assert not created["cluster"].get("replicas"), created["cluster"]
            assert created["cluster"]["leader"], created["cluster"]

    run(scenario)


def test_management_get_msg(backend):
    """nats-io/nats.go test/js_test.go TestJetStreamManagement_GetMsg, "3-node": an R1 stream's
    messages (with headers) read back by sequence and as the last of a subject, through a
    server that may not host it; a missing sequence is "no message found"."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            js = [nc.jetstream(timeout=REQUEST_TIMEOUT) for nc in ncs]
            await until_ok(lambda: api_ok(ncs[0], "$JS.API.STREAM.CREATE.foo",
                                          {"name": "foo", "subjects": ["foo.A", "foo.B", "foo.C"]}), "created")
            for i in range(5):
                await until_ok(lambda i=i: js[0].publish("foo.A", b"A:%d" % i, headers={
                    "X-NATS-Key": "123", "X-Nats-Test-Data": "A:%d" % i}), "published")
                await until_ok(lambda i=i: js[1].publish("foo.B", b"B:%d" % i), "published")
            for j in js:
                msg = await j.get_msg("foo", 9)
                assert (msg.subject, msg.data, msg.seq, msg.headers) == (
                    "foo.A", b"A:4", 9, {"X-NATS-Key": "123", "X-Nats-Test-Data": "A:4"})
                last = await j.get_last_msg("foo", "foo.B")
                assert (last.data, last.seq) == (b"B:4", 10)
                with pytest.raises(nats.js.errors.NotFoundError):
                    await j.get_msg("foo", 11)
                with pytest.raises(nats.js.errors.NotFoundError):
                    await j.get_last_msg("foo", "foo.C")

    run(scenario)


# -- nats-py and the clients' harnesses ------------------------------------------------------

KV_ROUNDS = 5  # buckets created and watched at once (the consumer-info race is intermittent)


def test_kv_watchall_right_after_an_r3_bucket_is_created(backend):
    """nats-py's KeyValue.watchall on an R3 bucket just created (the lead saw its CONSUMER.INFO,
    sent right after the ordered consumer's create was answered, get 10014 consumer not
    found): each watcher gets the end of the (empty) initial values, then every put."""
    async def scenario():
        async with ready(backend) as (ncs, _):
            for round_ in range(KV_ROUNDS):
                js = ncs[round_ % 3].jetstream(timeout=REQUEST_TIMEOUT)
                kv = await until_ok(lambda js=js, r=round_: js.create_key_value(
                    KeyValueConfig(bucket=f"W{r}", replicas=3)), "created")
                watcher = await kv.watchall()
                assert await watcher.updates(timeout=REQUEST_TIMEOUT) is None
                assert await until_ok(lambda kv=kv: kv.put("k", b"v"), "put") == 1
                update = await watcher.updates(timeout=REQUEST_TIMEOUT)
                assert (update.key, update.value, update.revision) == ("k", b"v", 1)
                await watcher.stop()

    run(scenario)


ORDERED_ROUNDS = 150  # ephemeral consumers created and asked for (the race lost ~1 in 100)
STEPDOWN_TRIES = 10  # stream leader step-downs until its leader is not the meta leader


def test_consumer_info_right_after_an_ordered_consumer_is_created(backend):
    """The steps of nats-py's watchall / ordered consumer (js.subscribe(ordered_consumer=True)):
    CONSUMER.CREATE of an R1 memory consumer of an R3 stream, then CONSUMER.INFO through the
    same server as soon as the create is answered, the stream's leader another server than the
    meta leader's. Every info finds the consumer (natserver's stream leader answered "consumer
    not found" when the create's answer came first from the server running the consumer)."""
    async def scenario():
        async with ready(backend) as (ncs, sys_nc):
            await until_ok(lambda: api_ok(ncs[0], "$JS.API.STREAM.CREATE.O",
                                          {"name": "O", "subjects": ["o"], "num_replicas": 3}), "created")
            meta = await meta_leader(sys_nc)
            for _ in range(STEPDOWN_TRIES):
                info = await api(ncs[0], "$JS.API.STREAM.INFO.O")
                if info.get("cluster", {}).get("leader") not in (None, meta):
                    break
                await api(ncs[0], "$JS.API.STREAM.LEADER.STEPDOWN.O")
                await asyncio.sleep(POLL * 10)
            assert info["cluster"]["leader"] != meta, info["cluster"]
            missing = []
            for i in range(ORDERED_ROUNDS):
                nc = ncs[i % 3]
                created = await api_ok(nc, "$JS.API.CONSUMER.CREATE.O", {"stream_name": "O", "config": {
                    "ack_policy": "none", "num_replicas": 1, "mem_storage": True, "deliver_policy": "all",
                    "inactive_threshold": 5_000_000_000}})
                info = await api(nc, f"$JS.API.CONSUMER.INFO.O.{created['name']}")
                if "error" in info:
                    missing.append((i, created["cluster"].get("leader"), info["error"]))
            assert missing == []
            unknown = await api(ncs[1], "$JS.API.CONSUMER.INFO.O.nope")
            assert unknown["error"] == {"code": 404, "err_code": 10014, "description": "consumer not found"}

    run(scenario)


FIRST_ANSWER_TIMEOUT = 1.0  # seconds a client waits for one $JS.API.INFO answer while polling


def test_jetstream_api_right_after_the_cluster_starts(backend):
    """nats.go's testservice WaitForJetStream and nats.js' jetstreamCluster: right after three
    servers start, $JS.API.INFO is asked again until answered. Before the meta group has a
    leader a server says nothing (2.15.1 jsAccountInfoRequest answers 10008 only once the group
    has been leaderless for lostQuorumInterval), then the account info comes, from each server."""
    async def scenario():
        ncs = [await dial(url) for url in backend.urls]
        try:
            seen = []
            for nc in ncs:
                deadline = time.monotonic() + READY_TIMEOUT
                while True:
                    try:
                        answer = await api(nc, "$JS.API.INFO", timeout=FIRST_ANSWER_TIMEOUT)
                    except nats.errors.TimeoutError:
                        seen.append("timeout")
                    else:
                        seen.append(answer.get("error", {}).get("err_code", "info"))
                        if "error" not in answer:
                            assert answer["streams"] == 0 and answer["type"] == "io.nats.jetstream.api.v1.account_info_response"
                            break
                    assert time.monotonic() < deadline, seen
            assert set(seen) <= {"timeout", 10008, "info"} and seen.count("info") == 3, seen
        finally:
            for nc in ncs:
                await nc.close()

    run(scenario)
