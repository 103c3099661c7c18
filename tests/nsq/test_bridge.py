"""The NSQ <-> NATS bridge with nats-py: NSQ topic T is NATS subject nsq.T, both ways,
without loops."""

from __future__ import annotations

import asyncio
import struct

import pytest

nats = pytest.importorskip("nats")

from tests.nsq.helpers import ThreadedServer  # noqa: E402

TIMEOUT = 15


class AsyncNsq:
    """A minimal V2 client on asyncio streams (nats-py's loop)."""

    async def connect(self, port):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer.write(b"  V2")
        return self

    async def cmd(self, line: bytes, body: bytes | None = None):
        data = line + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.writer.write(data)
        await self.writer.drain()

    async def frame(self):
        while True:
            size, kind = struct.unpack(">ii", await self.reader.readexactly(8))
            data = await self.reader.readexactly(size - 4)
            if data != b"_heartbeat_":
                return kind, data

    def close(self):
        self.writer.close()


@pytest.fixture
def server(tmp_path):
    srv = ThreadedServer(tmp_path, bridge=True).start()
    yield srv
    srv.stop()


def test_nsq_to_nats_and_back_without_loops(server):
    async def scenario():
        nc = await nats.connect(server.nats_url)
        seen = []

        async def on_message(msg):
            seen.append((msg.subject, msg.data))

        sub = await nc.subscribe("nsq.>", cb=on_message)
        await nc.flush()
        producer = await AsyncNsq().connect(server.tcp_port)
        await producer.cmd(b"PUB orders", b"from-nsq")
        assert await producer.frame() == (0, b"OK")
        mpub = struct.pack(">i", 2) + struct.pack(">i", 1) + b"a" + struct.pack(">i", 1) + b"b"
        await producer.cmd(b"MPUB orders", mpub)
        assert await producer.frame() == (0, b"OK")
        for _ in range(100):
            if len(seen) >= 3:
                break
            await asyncio.sleep(0.02)
        assert seen == [("nsq.orders", b"from-nsq"), ("nsq.orders", b"a"), ("nsq.orders", b"b")]

        # NATS -> NSQ: a consumer on topic "orders" gets what NATS publishes on nsq.orders,
        # and the NATS subscriber sees it once (no echo back through the bridge).
        consumer = await AsyncNsq().connect(server.tcp_port)
        await consumer.cmd(b"SUB orders archive")
        assert await consumer.frame() == (0, b"OK")
        await consumer.cmd(b"RDY 10")
        for _ in range(3):  # what the topic kept before the channel existed
            kind, _ = await consumer.frame()
            assert kind == 2
        await nc.publish("nsq.orders", b"from-nats")
        await nc.flush()
        kind, data = await consumer.frame()
        assert kind == 2 and data[26:] == b"from-nats"
        await asyncio.sleep(0.1)
        assert seen.count(("nsq.orders", b"from-nats")) == 1
        assert len(seen) == 4
        # invalid topic names and empty payloads are not bridged
        await nc.publish("nsq.bad!name", b"x")
        await nc.publish("nsq.orders", b"")
        await nc.publish("nsq.orders", b"marker")  # handled after the two before it
        kind, data = await consumer.frame()
        assert kind == 2 and data[26:] == b"marker"
        dropped = server.call(lambda: server.server.nsq.bridge.dropped)
        assert dropped == 2
        await sub.unsubscribe()
        producer.close()
        consumer.close()
        await nc.close()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))


def test_custom_prefix(tmp_path):
    srv = ThreadedServer(tmp_path, bridge="legacy.nsq").start()
    try:
        async def scenario():
            nc = await nats.connect(srv.nats_url)
            sub = await nc.subscribe("legacy.nsq.t")
            await nc.flush()
            producer = await AsyncNsq().connect(srv.tcp_port)
            await producer.cmd(b"PUB t", b"hi")
            assert await producer.frame() == (0, b"OK")
            msg = await sub.next_msg(timeout=5)
            assert msg.data == b"hi"
            producer.close()
            await nc.close()

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    finally:
        srv.stop()
