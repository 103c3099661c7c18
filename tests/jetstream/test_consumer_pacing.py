"""Consumers' pacing (issue #13): ``replay_policy: original`` keeps the stored spacing between
messages until the consumer has caught up with the stream as it was at its start, for push and
pull consumers alike, and a push consumer's ``rate_limit_bps`` is a token bucket as large as
the largest message (consumer.go loopAndGatherMsgs, setRateLimit). The pacing rule is checked
on its own with made-up times (no clocks in tests), a pull request is served at the stored
spacing with made-up times too; nats-py then gets every message, in order, through each."""

from __future__ import annotations

import asyncio

import nats
from nats.js.api import ConsumerConfig, ReplayPolicy

from natserver.jetstream.consumer import Consumer
from natserver.jetstream.consumer import ConsumerConfig as OurConfig
from natserver.jetstream.delivery import Delivery, PullRequest
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig

MS = 1_000_000
TIMEOUT = 20


class _Store:
    last_seq = 3
    first_seq = 1

    def last_seq_for(self, subject):
        return 0


class _Stream:
    name = "S"
    store = _Store()


def _consumer(**cfg) -> Consumer:
    config = OurConfig(durable_name="C", deliver_subject="d", **cfg)
    return Consumer(_Stream(), "C", config, 0)


def test_replay_original_keeps_the_stored_spacing_until_caught_up():
    c = _consumer(replay_policy="original")
    t0 = 1_000 * MS
    assert c.pace(1, 5_000 * MS, 10, t0, 1 << 20) == 0  # the first goes at once
    # Stored 300 ms after the first: not before 300 ms after the first went out.
    assert c.pace(2, 5_300 * MS, 10, t0 + 100 * MS, 1 << 20) == t0 + 300 * MS
    assert c.pace(2, 5_300 * MS, 10, t0 + 300 * MS, 1 << 20) == 0
    # Under a millisecond apart: no wait.
    assert c.pace(3, 5_300 * MS + 500_000, 10, t0 + 300 * MS, 1 << 20) == 0
    # Caught up with the stream's last message at the start: instant from now on.
    assert not c.replaying
    assert c.pace(4, 9_000 * MS, 10, t0 + 301 * MS, 1 << 20) == 0


def test_instant_replay_never_waits():
    c = _consumer()
    assert not c.replaying
    assert c.pace(1, 1, 10, 5, 100) == 0 and c.pace(2, 10**12, 10, 6, 100) == 0


def test_rate_limit_is_a_token_bucket_of_the_largest_message():
    c = _consumer(rate_limit_bps=8_000)  # 1000 bytes a second
    now = 10**12
    burst = 1500
    assert c.pace(1, 0, 1000, now, burst) == 0  # a full bucket: 1500 bytes
    assert c.pace(2, 0, 500, now, burst) == 0  # 500 left
    later = c.pace(3, 0, 400, now, burst)  # empty: 400 bytes take 0.4 s
    assert later == now + 400 * MS + 1
    assert c.pace(3, 0, 400, later, burst) == 0
    # The bucket never holds more than the burst, however long the consumer waited.
    assert c.pace(4, 0, 1500, later + 10**12, burst) == 0
    assert c.pace(5, 0, 1, later + 10**12, burst) > later + 10**12


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def test_nats_py_gets_every_message_in_order(threaded_server, tmp_path):
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path))

    async def main():
        nc = await nats.connect(handle.url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="P", subjects=["p.*"])
            for i in range(5):
                await js.publish(f"p.{i}", b"x" * 100)
                await asyncio.sleep(0.02)  # stored 20 ms apart: replayed so
            got = {}
            for name, config in (
                ("original", ConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL)),
                ("limited", ConsumerConfig(rate_limit_bps=80_000)),  # 10 KB/s: ~15 ms a message
            ):
                sub = await js.subscribe("p.*", durable=name, config=config, manual_ack=True)
                subjects = []
                for _ in range(5):
                    msg = await sub.next_msg(timeout=5)
                    subjects.append(msg.subject)
                    await msg.ack()
                got[name] = subjects
                info = await js.consumer_info("P", name)
                assert info.num_pending == 0 and info.delivered.stream_seq == 5
            assert got == {name: [f"p.{i}" for i in range(5)] for name in ("original", "limited")}
        finally:
            await nc.close()

    _run(main())


class _Engine:
    """What Delivery.serve uses of the engine: the replies it sends, recorded."""

    def __init__(self) -> None:
        self.sent = []
        self.server = None
        self.client = self

    def send(self, subject, data, hdr=None):
        self.sent.append((subject, hdr))

    def deliver_as(self, dsubj, subject, reply, hdr, data):
        self.sent.append((dsubj, subject))
        return 1

    def has_interest(self, subject):  # (the requester still listens)
        return True


class _PullStream:
    name = "S"

    def __init__(self) -> None:
        self.store = MemoryStore(StreamConfig(name="S", subjects=["p.*"]))


def test_pull_request_is_served_at_the_stored_spacing():
    """A pull consumer replaying ``original``: a batch request gets the first message at
    once, the next ones only when their stored spacing has passed (the timer's retry_at),
    and nothing is taken back or lost on the way."""
    stream = _PullStream()
    t0 = 10**15
    for i, at in enumerate((0, 300 * MS, 300 * MS + 1000, 900 * MS)):
        stream.store.store_msg(b"p.%d" % i, b"", b"x", t0 + at)
    consumer = Consumer(stream, "C", OurConfig(durable_name="C", replay_policy="original", ack_policy="explicit"), 0)
    consumer.num_pending()
    delivery = Delivery.__new__(Delivery)
    delivery.js = _Engine()
    delivery.poke = lambda: None
    delivery._queue_save = lambda consumer: None
    request = PullRequest(b"_INBOX.r", 4, 0, False, 0)
    request.account = delivery.js  # whom serve asks whether the requester still listens
    consumer.waiting.append(request)
    now = 5 * 10**15
    delivery.serve(consumer, now)
    assert [s for _, s in delivery.js.sent] == [b"p.0"]
    assert consumer.retry_at == now + 300 * MS
    delivery.serve(consumer, now + 100 * MS)  # too early: nothing
    assert len(delivery.js.sent) == 1 and consumer.retry_at == now + 300 * MS
    delivery.serve(consumer, now + 300 * MS)  # p.1, and p.2 stored under 1 ms after it
    assert [s for _, s in delivery.js.sent] == [b"p.0", b"p.1", b"p.2"]
    assert consumer.retry_at == now + 900 * MS - 1000  # 600 ms after p.2 was stored
    delivery.serve(consumer, now + 900 * MS - 1000)
    assert [s for _, s in delivery.js.sent] == [b"p.0", b"p.1", b"p.2", b"p.3"]
    assert not consumer.waiting and not consumer.replaying and consumer.retry_at == 0
    assert consumer.delivered_sseq == 4 and sorted(consumer.pending) == [1, 2, 3, 4]


def test_nats_py_pull_replays_original_in_order(threaded_server, tmp_path):
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path))

    async def main():
        nc = await nats.connect(handle.url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="Q", subjects=["q.*"])
            for i in range(4):
                await js.publish(f"q.{i}", b"y")
                await asyncio.sleep(0.02)
            psub = await js.pull_subscribe("q.*", durable="orig",
                                           config=ConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL))
            got = []
            while len(got) < 4:
                for msg in await psub.fetch(4 - len(got), timeout=5):
                    got.append(msg.subject)
                    await msg.ack()
            assert got == [f"q.{i}" for i in range(4)]
            info = await js.consumer_info("Q", "orig")
            assert info.num_pending == 0 and info.num_ack_pending == 0
        finally:
            await nc.close()

    _run(main())
