"""Issue #28 item 6, "timers follow one clock": every JetStream timer runs on the server's clock
(natserver/clock.py: wall time through ``clock.now_ns()``, waits on trio's clock, which the test
double moves with ``advance``), so a test that moves the clock sees each timer's effect at once.

The audit of natserver/jetstream/ found no direct read of ``time``: max_age and TTL expiry,
message schedules (``_expirer``, ``_schedules``), every consumer timer (ack wait, backoff,
inactive threshold, pause, pin timeout, push idle heartbeats, pull request expiry and
heartbeats: delivery.py's one timer loop), the duplicate window and the sources' heartbeats
read ``clock.now_ns()``/``clock.monotonic()`` or wait with trio. Tests of the timers already
covered elsewhere: ack wait, KV TTL, max_age, duplicate window, inactive threshold
(tests/testing/test_clock.py), per-message TTLs (test_message_ttl.py), pause
(test_consumer_pause.py), pin timeout (test_priority_groups.py), schedules
(test_message_schedules.py). Here: backoff, a pull request's expiry and its heartbeats, a push
consumer's idle heartbeats. Each test moves a standing clock (``clock="manual"``) by minutes
and finishes in well under a second of real time.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from natserver.testing import NatsServer

TIMEOUT = 10  # hard limit on one test's I/O
FAST = 5.0  # real seconds a test may take (minutes of server time are jumped)


def _run(main, clock: str = "manual") -> None:
    started = time.monotonic()
    with NatsServer(jetstream=True, clock=clock) as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))
    assert time.monotonic() - started < FAST


async def _nothing(sub, wait: float = 0.1) -> None:
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=wait)


def test_backoff_redelivers_at_each_step():
    """backoff [10s, 60s]: the unacknowledged message comes back 10 s, then 60 s later."""

    async def main(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"job")
        sub = await js.pull_subscribe("s", "C", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, backoff=[10, 60],
                                                                      max_deliver=4))
        (first,) = await sub.fetch(1, timeout=2)
        assert first.metadata.num_delivered == 1
        await server.advance_async(9)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.2)
        await server.advance_async(2)
        (second,) = await sub.fetch(1, timeout=2)
        assert second.metadata.num_delivered == 2
        await server.advance_async(58)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.2)
        await server.advance_async(3)
        (third,) = await sub.fetch(1, timeout=2)
        assert third.metadata.num_delivered == 3
        await third.ack()
        await nc.close()

    _run(main)


def test_push_backoff_and_ack_wait_count_from_the_delivery():
    """A push consumer's redelivery timer is set by the delivery itself: the clock moved right
    after it (the timer task had nothing to wait for before) still redelivers at the backoff
    steps. (The timer task used to learn of the new ack deadline only from the next event.)"""

    async def main(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        sub = await nc.subscribe("deliver")
        await js.add_consumer("S", ConsumerConfig(durable_name="C", deliver_subject="deliver", ack_policy=AckPolicy.EXPLICIT,
                                                  backoff=[10, 60], max_deliver=4))
        await js.publish("s", b"job")
        assert (await sub.next_msg(timeout=2)).metadata.num_delivered == 1
        await server.advance_async(11)
        assert (await sub.next_msg(timeout=2)).metadata.num_delivered == 2
        await server.advance_async(58)
        await _nothing(sub)
        await server.advance_async(3)
        third = await sub.next_msg(timeout=2)
        assert third.metadata.num_delivered == 3
        await third.ack()
        await nc.close()

    _run(main, clock="real")  # (the clock runs: the 58 s step must not pass the 60 s)


def test_a_pull_request_expires_and_beats_on_the_moved_clock():
    """A pull request with expires 60 s and idle_heartbeat 5 s: a heartbeat each 5 s of the
    server's clock, then 408 Request Timeout at 60 s."""

    async def main(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        request = {"batch": 1, "expires": 60_000_000_000, "idle_heartbeat": 5_000_000_000}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", json.dumps(request).encode(), reply=inbox)
        await nc.flush()
        await _nothing(sub)
        await server.advance_async(5.5)
        beat = await sub.next_msg(timeout=2)
        assert beat.headers and beat.headers.get("Status") == "100"
        await server.advance_async(5)
        beat = await sub.next_msg(timeout=2)
        assert beat.headers.get("Status") == "100"
        await server.advance_async(50)
        statuses = []
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except nats.errors.TimeoutError:
                break
            statuses.append(msg.headers.get("Status"))
        assert statuses[-1] == "408" and set(statuses[:-1]) <= {"100"}
        await nc.close()

    _run(main)


def test_push_idle_heartbeats_follow_the_moved_clock():
    """A push consumer with idle_heartbeat 30 s: nothing before, a heartbeat after, each 30 s."""

    async def main(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        sub = await nc.subscribe("hb")
        await js.add_consumer("S", ConsumerConfig(durable_name="C", deliver_subject="hb", idle_heartbeat=30))
        await _nothing(sub)
        await server.advance_async(29)
        await _nothing(sub)
        await server.advance_async(2)
        beat = await sub.next_msg(timeout=2)
        assert beat.headers.get("Status") == "100" and beat.headers.get("Description") == "Idle Heartbeat"
        await server.advance_async(30)
        beat = await sub.next_msg(timeout=2)
        assert beat.headers.get("Status") == "100"
        await nc.close()

    _run(main)
