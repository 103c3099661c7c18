"""Pull consumers through nats-py (js.pull_subscribe + fetch) on natserver and, when it is
installed, nats-server -js: every ack kind, redelivery after ack_wait, max_deliver, the
consumer info counters, and the raw MSG.NEXT statuses."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from tests.jetstream.test_jetstream import connect, run, target  # noqa: F401 (fixture)


async def _setup(url: str, n: int = 5, **consumer):
    nc = await connect(url)
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.>"])
    for i in range(n):
        await js.publish(f"p.{i % 2}", b"m%d" % i)
    return nc, js


def test_fetch_ack_and_info_counters(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url)
        sub = await js.pull_subscribe("p.>", "work")
        msgs = await sub.fetch(3, timeout=2)
        assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
        assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3]
        assert msgs[2].metadata.num_pending == 2 and msgs[0].metadata.num_delivered == 1
        await msgs[0].ack()
        await msgs[1].ack_sync()
        info = await js.consumer_info("P", "work")
        assert info.delivered.consumer_seq == 3 and info.delivered.stream_seq == 3
        assert info.ack_floor.consumer_seq == 2 and info.ack_floor.stream_seq == 2
        assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (1, 2, 0)
        await msgs[2].ack()
        rest = await sub.fetch(5, timeout=1)
        assert [m.data for m in rest] == [b"m3", b"m4"]
        for m in rest:
            await m.ack_sync()
        info = await js.consumer_info("P", "work")
        assert (info.num_ack_pending, info.num_pending) == (0, 0)
        assert info.ack_floor.stream_seq == 5
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        await nc.close()

    run(main())


def test_nak_term_and_redelivery(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url, n=3)
        sub = await js.pull_subscribe("p.>", "redo", config=ConsumerConfig(ack_wait=0.5, max_deliver=2))
        first = await sub.fetch(3, timeout=2)
        await first[0].nak()
        await first[1].term()
        again = await sub.fetch(1, timeout=2)
        assert again[0].data == b"m0" and again[0].metadata.num_delivered == 2
        await again[0].ack()
        # m2 was never acked: redelivered after ack_wait, then dropped after max_deliver (2).
        late = await sub.fetch(1, timeout=3)
        assert late[0].data == b"m2" and late[0].metadata.num_delivered == 2
        await asyncio.sleep(0.8)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        info = await js.consumer_info("P", "redo")
        assert info.num_pending == 0
        await nc.close()

    run(main())


def test_in_progress_and_ack_none(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url, n=2)
        sub = await js.pull_subscribe("p.0", "one", config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        msgs = await sub.fetch(5, timeout=1)
        assert [m.data for m in msgs] == [b"m0"]
        info = await js.consumer_info("P", "one")
        assert info.ack_floor.stream_seq == 1 and info.num_ack_pending == 0
        sub2 = await js.pull_subscribe("p.1", "two")
        got = await sub2.fetch(1, timeout=1)
        await got[0].in_progress()
        info = await js.consumer_info("P", "two")
        assert info.num_ack_pending == 1
        await got[0].ack()
        await nc.close()

    run(main())


def test_raw_next_statuses(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url, n=1)
        await js.add_consumer("P", ConsumerConfig(durable_name="raw", ack_policy=AckPolicy.EXPLICIT,
                                                  max_waiting=1))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.raw", b'{"batch":2,"no_wait":true}', reply=inbox)
        msg = await sub.next_msg(timeout=2)
        # Delivered on the request's inbox, with the message's own subject on the MSG line.
        assert (msg.subject, msg.data) == ("p.0", b"m0") and msg.reply.startswith("$JS.ACK.P.raw.1.1.1.")
        assert msg.reply.endswith(".0")  # nothing pending after it
        status = await sub.next_msg(timeout=2)
        # The end of a no_wait request that got part of its batch: 404 since nats-server 2.10
        # (the reference, 2.15.1), 408 with the pending counts in 2.9.
        go_version = nc._server_info["version"] if target.kind != "natserver" else ""
        if go_version.startswith("2.9."):
            assert status.headers == {"Status": "408", "Description": "Request Timeout",
                                      "Nats-Pending-Messages": "1", "Nats-Pending-Bytes": "0"}
        else:
            assert status.headers == {"Status": "404", "Description": "No Messages"}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.raw", b'{"batch":1,"no_wait":true}', reply=inbox)
        status = await sub.next_msg(timeout=2)
        assert status.headers == {"Status": "404", "Description": "No Messages"}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.raw", b'{"batch":1,"expires":300000000}', reply=inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.raw", b'{"batch":1,"expires":300000000}', reply=inbox)
        status = await sub.next_msg(timeout=2)
        assert status.headers["Status"] == "409" and status.headers["Description"] == "Exceeded MaxWaiting"
        status = await sub.next_msg(timeout=2)
        assert status.headers["Status"] == "408"
        assert status.headers["Nats-Pending-Messages"] == "1"
        await nc.close()

    run(main())


def test_workqueue_and_interest_retention(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="WQ", subjects=["wq"], retention="workqueue")
        await js.add_stream(name="IN", subjects=["in"], retention="interest")
        wq = await js.pull_subscribe("wq", "wqc")
        a = await js.pull_subscribe("in", "a")
        b = await js.pull_subscribe("in", "b")
        for _ in range(3):
            await js.publish("wq", b"job")
            await js.publish("in", b"event")
        for m in await wq.fetch(3, timeout=2):
            await m.ack_sync()
        assert (await js.stream_info("WQ")).state.messages == 0
        for m in await a.fetch(3, timeout=2):
            await m.ack_sync()
        assert (await js.stream_info("IN")).state.messages == 3  # b has not acked yet
        got = await b.fetch(3, timeout=2)
        await got[0].ack_sync()
        assert (await js.stream_info("IN")).state.messages == 2
        await nc.close()

    run(main())


def test_ephemeral_goes_after_inactive_threshold(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="E", subjects=["e"])
        info = await js.add_consumer("E", ConsumerConfig(inactive_threshold=0.3))
        assert info.config.inactive_threshold == 0.3
        for _ in range(50):
            if not await js.consumers_info("E"):
                break
            await asyncio.sleep(0.1)
        assert await js.consumers_info("E") == []
        await nc.close()

    run(main())


def test_durable_survives_restart(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url, n=4)
        sub = await js.pull_subscribe("p.>", "keep", config=ConsumerConfig(ack_wait=1))
        msgs = await sub.fetch(3, timeout=2)
        await msgs[0].ack_sync()
        await msgs[2].ack_sync()
        await nc.close()
        target.restart()
        nc = await connect(target.url)
        js = nc.jetstream()
        info = await js.consumer_info("P", "keep")
        assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (3, 1, 1)
        sub = await js.pull_subscribe("p.>", "keep")
        got = set()
        for _ in range(4):
            for m in await sub.fetch(1, timeout=3):
                await m.ack_sync()  # else ack_wait (1s) brings it again
                got.add(m.data)
            if len(got) >= 2:
                break
        # m1 (never acked) comes again after ack_wait, m3 for the first time.
        assert got == {b"m1", b"m3"}
        await nc.close()

    run(main())


def test_pull_request_idle_heartbeat(target):  # noqa: F811
    async def main():
        nc, js = await _setup(target.url, n=0)
        await js.add_consumer("P", ConsumerConfig(durable_name="hb", ack_policy=AckPolicy.EXPLICIT))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.hb", b'{"batch":1,"expires":1000000000,'
                         b'"idle_heartbeat":600000000}', reply=inbox)
        status = await sub.next_msg(timeout=2)
        assert status.headers == {"Status": "400", "Description": "Bad Request - heartbeat value too large"}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.hb", b'{"batch":1,"expires":1500000000,'
                         b'"idle_heartbeat":500000000}', reply=inbox)
        beat = await sub.next_msg(timeout=2)
        assert beat.headers == {"Status": "100", "Description": "Idle Heartbeat",
                                "Nats-Last-Consumer": "0", "Nats-Last-Stream": "0"}
        await nc.close()

    run(main())
