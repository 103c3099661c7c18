"""Issue 29 item 2: looking inside JetStream, NSQ and STAN from a test, waits, JetStream faults.

nats-py (asyncio) as the client, each body under a hard timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses

import nats
import pytest
import trio
from nats.js.api import ConsumerConfig

from natserver.stan import StanOptions
from natserver.testing import NatsServer
from tests.nsq.helpers import FRAME_MESSAGE, RawClient, nsq_options
from tests.stan import stan_client as S

TIMEOUT = 10  # hard limit on one test's I/O


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


async def orders(nats_server, *messages: bytes, ack_wait: float = 30):
    """A connection, its JetStream context, stream ORDERS with ``messages`` and a pull
    consumer "worker"."""
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.*"])
    for i, data in enumerate(messages):
        await js.publish("orders.new" if i % 2 == 0 else "orders.paid", data)
    sub = await js.pull_subscribe("orders.*", "worker", config=ConsumerConfig(ack_wait=ack_wait))
    return nc, js, sub


@pytest.mark.nats_server(jetstream=True)
def test_streams_and_their_messages(nats_server):
    async def main():
        nc, js, _ = await orders(nats_server, b"1", b"2", b"3")
        await js.publish("orders.new", b"4", headers={"Trace": "t-1"})
        (state,) = nats_server.streams()
        assert (state.name, state.messages_count, state.first_seq, state.last_seq) == ("ORDERS", 4, 1, 4)
        assert state.config["subjects"] == ["orders.*"] and state.consumer_names == ("worker",)
        assert [m.data for m in state.messages()] == [b"1", b"2", b"3", b"4"]
        assert [m.seq for m in state.messages(subject="orders.new")] == [1, 3, 4]
        assert [m.seq for m in nats_server.stream("ORDERS").messages(start_seq=3)] == [3, 4]
        last = state.messages(start_seq=4)[0]
        assert last.headers == {"Trace": "t-1"} and abs(last.time - nats_server.now()) < 5
        with pytest.raises(dataclasses.FrozenInstanceError):
            state.name = "X"
        with pytest.raises(LookupError, match="no stream 'NOPE'"):
            nats_server.stream("NOPE")
        await nc.close()

    run(main())


@pytest.mark.nats_server(jetstream=True)
def test_consumer_state_acks_redeliveries_and_waits(nats_server):
    async def main():
        nc, js, sub = await orders(nats_server, b"1", b"2")
        state = nats_server.consumer("ORDERS", "worker")
        assert (state.num_pending, state.pending_acks, state.delivered_stream_seq) == (2, (), 0)
        first, second = await sub.fetch(2, timeout=2)
        state = nats_server.consumer("ORDERS", "worker")
        assert state.pending_acks == (1, 2) and state.delivered_consumer_seq == 2 and state.num_pending == 0
        await first.ack()
        await nats_server.wait_for_ack_async("ORDERS", "worker", 1)
        state = nats_server.consumer("ORDERS", "worker")
        assert state.acked(1) and not state.acked(2) and state.ack_floor_stream_seq == 1
        await nats_server.advance_async(31)  # ack_wait: 2 comes again
        (again,) = await sub.fetch(1, timeout=2)
        assert nats_server.consumer("ORDERS", "worker").redelivery_counts == {2: 2}
        await again.ack()
        done = await nats_server.wait_for_consumer_pending_async("ORDERS", "worker", 0)
        assert done.ack_floor_stream_seq == 2 and done.pending_acks == ()
        # A pull request waiting for messages is seen too.
        waiting = asyncio.ensure_future(sub.fetch(1, timeout=2))
        await _until(lambda: nats_server.consumer("ORDERS", "worker").waiting_pulls == 1)
        await js.publish("orders.new", b"3")
        (third,) = await waiting
        await third.ack()
        await nc.close()

    run(main())
    with pytest.raises(TimeoutError, match="ack of ORDERS sequence 9"):
        nats_server.wait_for_ack("ORDERS", "worker", 9, timeout=0.1)


async def _until(check, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met"
        await asyncio.sleep(0.005)


@pytest.mark.nats_server(jetstream=True)
def test_kv_bucket_as_a_dict(nats_server):
    async def main():
        nc = await nats.connect(nats_server.url)
        kv = await nc.jetstream().create_key_value(bucket="config")
        await kv.put("color", b"red")
        await kv.put("size", b"L")
        await kv.put("color", b"blue")
        await kv.delete("size")
        assert nats_server.kv("config") == {"color": b"blue"}
        await nc.close()

    run(main())


@pytest.mark.nats_server(jetstream=True)
def test_fail_the_next_store(nats_server):
    async def main():
        nc, js, _ = await orders(nats_server)
        fault = nats_server.fail_stores("ORDERS")
        with pytest.raises(nats.js.errors.APIError) as failed:
            await js.publish("orders.new", b"lost")
        assert failed.value.err_code == 10077 and "injected" in failed.value.description
        assert fault.hits == 1 and not fault.active
        assert (await js.publish("orders.new", b"kept")).seq == 1  # one only
        assert [m.data for m in nats_server.stream("ORDERS").messages()] == [b"kept"]
        await nc.close()

    run(main())


@pytest.mark.nats_server(jetstream=True)
def test_drop_the_next_ack(nats_server):
    async def main():
        nc, js, sub = await orders(nats_server, b"1")
        nats_server.drop_acks("ORDERS", "worker")
        (msg,) = await sub.fetch(1, timeout=2)
        await msg.ack()  # lost on the way
        await nats_server.wait_for_message_async("$JS.ACK.ORDERS.worker.>")
        assert nats_server.consumer("ORDERS", "worker").pending_acks == (1,)
        await nats_server.advance_async(31)
        (again,) = await sub.fetch(1, timeout=2)
        assert again.metadata.num_delivered == 2
        await again.ack()
        await nats_server.wait_for_ack_async("ORDERS", "worker", 1)
        await nc.close()

    run(main())


@pytest.mark.nats_server(jetstream=True)
def test_expire_the_next_pull_request(nats_server):
    async def main():
        nc, js, sub = await orders(nats_server, b"1")
        fault = nats_server.expire_pull_requests("ORDERS", "worker")
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=2)  # answered 408 at once although a message is there
        assert fault.hits == 1
        (msg,) = await sub.fetch(1, timeout=2)  # the next one is served
        assert msg.data == b"1"
        await nc.close()

    run(main())


@pytest.mark.nats_server(jetstream=True)
def test_reset_cancels_the_jetstream_faults(nats_server):
    async def main():
        nc, js, _ = await orders(nats_server)
        fault = nats_server.fail_stores("ORDERS", count=None)
        nats_server.reset()
        assert not fault.active
        assert (await js.publish("orders.new", b"stored")).seq == 1
        await nc.close()

    run(main())


async def test_nsq_topics_and_channels_from_trio(tmp_path):
    server = NatsServer(nsq=nsq_options(tmp_path))
    await server.start_async()
    try:
        with trio.fail_after(TIMEOUT):
            port = server.server.nsq.tcp_port
            consumer = await RawClient.connect(port)
            await consumer.cmd(b"SUB orders billing")
            assert await consumer.frame() == (0, b"OK")
            producer = await RawClient.connect(port)
            await producer.cmd(b"MPUB orders", b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x01b")
            assert await producer.frame() == (0, b"OK")
            channel = server.nsq_topics()["orders"].channels["billing"]
            assert (channel.depth, channel.in_flight, channel.clients) == (2, 0, 1)
            await consumer.cmd(b"RDY 1")
            kind, _ = await consumer.frame()
            assert kind == FRAME_MESSAGE
            channel = server.nsq_topics()["orders"].channels["billing"]
            assert (channel.depth, channel.in_flight) == (1, 1)
            await consumer.aclose()
            await producer.aclose()
    finally:
        await server.stop_async()


def test_stan_channels_and_subscriptions():
    with NatsServer(stan=StanOptions()) as server:

        async def main():
            sc = await S.connect(server.url, "worker")
            inbox: asyncio.Queue = asyncio.Queue()

            async def on_message(msg):
                await inbox.put(msg)

            await sc.subscribe("work", cb=on_message, manual_acks=True, ack_wait=30, durable_name="d")
            await sc.publish("work", b"job")
            await asyncio.wait_for(inbox.get(), 2)
            channel = server.stan_channels()["work"]
            assert (channel.first_seq, channel.last_seq, channel.messages_count) == (1, 1, 1)
            (sub,) = channel.subscriptions
            assert (sub.client_id, sub.durable_name, sub.pending_acks, sub.ack_wait) == ("worker", "d", (1,), 30.0)
            await server.advance_async(31)
            await asyncio.wait_for(inbox.get(), 2)
            assert server.stan_channels()["work"].subscriptions[0].redeliveries == {1: 1}
            await S.close(sc)

        run(main())


def test_inspection_without_the_subsystem_says_so(nats_server):
    assert nats_server.streams() == []
    with pytest.raises(LookupError, match="NSQ is not enabled"):
        nats_server.nsq_topics()
    with pytest.raises(LookupError, match="JetStream is not enabled"):
        nats_server.consumer("ORDERS", "worker")
