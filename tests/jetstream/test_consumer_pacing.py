"""Push consumers' pacing (issue #13): ``replay_policy: original`` keeps the stored spacing
between messages until the consumer has caught up with the stream as it was at its start, and
``rate_limit_bps`` is a token bucket as large as the largest message (consumer.go
loopAndGatherMsgs, setRateLimit). The pacing rule is checked on its own with made-up times (no
clocks in tests); nats-py then gets every message, in order, through both."""

from __future__ import annotations

import asyncio

import nats
from nats.js.api import ConsumerConfig, ReplayPolicy

from natserver.jetstream.consumer import Consumer
from natserver.jetstream.consumer import ConsumerConfig as OurConfig

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
