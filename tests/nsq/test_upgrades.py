"""IDENTIFY upgrades on the wire: TLS (with the extra OK frame sent over TLS), deflate
(raw, sync-flushed) and snappy (framed, a new stream per client write as pynsq does), and
their combinations; pynsq over TLS."""

from __future__ import annotations

import ssl
import zlib

import cramjam
import orjson
import pytest
import trio

from tests.nsq.helpers import FRAME_MESSAGE, FRAME_RESPONSE, RawClient, parse_message, self_signed_cert, start_nsq

TIMEOUT = 10


class Codec:
    def __init__(self, kind):
        self.kind = kind
        if kind == "deflate":
            self.c = zlib.compressobj(6, zlib.DEFLATED, -15)
            self.d = zlib.decompressobj(-15)
        self.pending = b""

    def encode(self, data):
        if self.kind == "deflate":
            return self.c.compress(data) + self.c.flush(zlib.Z_SYNC_FLUSH)
        return bytes(cramjam.snappy.compress(data))  # a whole framed stream each time, like pynsq

    def decode(self, data):
        if self.kind == "deflate":
            return self.d.decompress(data)
        # framed snappy from the server: decode whole chunks as they complete
        self.pending += data
        out, pos = b"", 0
        while len(self.pending) - pos >= 4:
            length = int.from_bytes(self.pending[pos + 1 : pos + 4], "little")
            if len(self.pending) - pos - 4 < length:
                break
            chunk = self.pending[pos : pos + 4 + length]
            if chunk[0] != 0xFF:
                out += bytes(cramjam.snappy.decompress(b"\xff\x06\x00\x00sNaPpY" + chunk))
            pos += 4 + length
        self.pending = self.pending[pos:]
        return out


class WrappedStream:
    """A trio stream seen through a Codec (for RawClient)."""

    def __init__(self, stream, codec):
        self.stream, self.codec = stream, codec

    async def send_all(self, data):
        await self.stream.send_all(self.codec.encode(data))

    async def receive_some(self, n):
        while True:
            data = await self.stream.receive_some(n)
            if not data:
                return b""
            out = self.codec.decode(data)
            if out:
                return out

    async def aclose(self):
        await self.stream.aclose()


@pytest.fixture
def cert(tmp_path):
    return self_signed_cert(tmp_path)


async def negotiate(front, cert_paths=None, **fields):
    c = await RawClient.connect(front.tcp_port)
    kind, data = await c.identify(feature_negotiation=True, **fields)
    assert kind == FRAME_RESPONSE
    answer = orjson.loads(data)
    if answer["tls_v1"]:
        context = ssl.create_default_context(cafile=cert_paths[0])
        c.stream = trio.SSLStream(c.stream, context, server_hostname="localhost")
        await c.stream.do_handshake()
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
    if answer["deflate"] or answer["snappy"]:
        codec = Codec("deflate" if answer["deflate"] else "snappy")
        if c.buf:
            c.buf = bytearray(codec.decode(bytes(c.buf)))
        c.stream = WrappedStream(c.stream, codec)
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
    return c, answer


async def round_trip(c, topic: bytes):
    big = b"0123456789" * 3000
    await c.cmd(b"PUB " + topic, big)
    assert await c.frame() == (FRAME_RESPONSE, b"OK")
    await c.cmd(b"SUB " + topic + b" ch")
    assert await c.frame() == (FRAME_RESPONSE, b"OK")
    await c.cmd(b"RDY 1")
    kind, data = await c.frame()
    assert kind == FRAME_MESSAGE and parse_message(data)[3] == big


@pytest.mark.parametrize("fields", [{"deflate": True, "deflate_level": 9}, {"snappy": True}])
async def test_compression(nursery, tmp_path, fields):
    front = await start_nsq(nursery, tmp_path)
    with trio.fail_after(TIMEOUT):
        c, answer = await negotiate(front, **fields)
        if "deflate" in fields:
            assert (answer["deflate"], answer["deflate_level"], answer["max_deflate_level"]) == (True, 6, 6)
        else:
            assert answer["snappy"] is True
        await round_trip(c, b"compressed")


async def test_compression_not_offered_when_disabled(nursery, tmp_path):
    front = await start_nsq(nursery, tmp_path, deflate=False, snappy=False)
    with trio.fail_after(TIMEOUT):
        c, answer = await negotiate(front, deflate=True)
        assert (answer["deflate"], answer["snappy"], answer["tls_v1"]) == (False, False, False)
        await round_trip(c, b"plain")


@pytest.mark.parametrize("fields", [{}, {"deflate": True}, {"snappy": True}])
async def test_tls_and_tls_with_compression(nursery, tmp_path, cert, fields):
    front = await start_nsq(nursery, tmp_path, tls_cert=cert[0], tls_key=cert[1])
    with trio.fail_after(TIMEOUT):
        c, answer = await negotiate(front, cert, tls_v1=True, **fields)
        assert answer["tls_v1"] is True
        await round_trip(c, b"secure")
        assert all(client.tls for client in front.clients.values())


async def test_tls_not_offered_without_a_certificate(nursery, tmp_path):
    front = await start_nsq(nursery, tmp_path)
    with trio.fail_after(TIMEOUT):
        c, answer = await negotiate(front, tls_v1=True)
        assert answer["tls_v1"] is False
        await round_trip(c, b"clear")


async def test_broken_compressed_stream_closes_only_that_client(nursery, tmp_path):
    front = await start_nsq(nursery, tmp_path)
    with trio.fail_after(TIMEOUT):
        c, _ = await negotiate(front, deflate=True)
        await c.stream.stream.send_all(b"\xff\xff\xff\xff garbage")
        assert await c.closed()
        healthy, _ = await negotiate(front, snappy=True)
        await healthy.stream.stream.send_all(b"\x00\xff\xff\xff")  # a chunk longer than allowed
        assert await healthy.closed()
        c, _ = await negotiate(front)
        await round_trip(c, b"after")


def test_pynsq_over_tls(tmp_path, cert):
    nsq = pytest.importorskip("nsq")
    import tornado.concurrent
    import tornado.ioloop

    from tests.nsq.helpers import ThreadedServer

    server = ThreadedServer(tmp_path, tls_cert=cert[0], tls_key=cert[1]).start()
    try:
        async def scenario():
            tls = {"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": cert[0]}
            writer = nsq.Writer([f"localhost:{server.tcp_port}"], tls_v1=True, tls_options=tls)
            import tornado.gen

            while not writer.conns:
                await tornado.gen.sleep(0.01)
            future = tornado.concurrent.Future()
            writer.pub("tls_topic", b"secret", callback=lambda conn, data: future.set_result(data))
            assert await future == b"OK"
            got = tornado.concurrent.Future()
            reader = nsq.Reader(topic="tls_topic", channel="c", nsqd_tcp_addresses=[f"localhost:{server.tcp_port}"],
                                message_handler=lambda m: got.set_result(m.body) or True, tls_v1=True,
                                tls_options=tls)
            assert await got == b"secret"
            reader.close()

        loop = tornado.ioloop.IOLoop()
        try:
            loop.run_sync(scenario, timeout=20)
        finally:
            loop.close(all_fds=True)
    finally:
        server.stop()


async def test_repeated_identify_does_not_upgrade_twice(nursery, tmp_path, cert):
    front = await start_nsq(nursery, tmp_path, tls_cert=cert[0], tls_key=cert[1])
    with trio.fail_after(TIMEOUT):
        c, answer = await negotiate(front, cert, tls_v1=True, deflate=True)
        kind, data = await c.identify(feature_negotiation=True, tls_v1=True, deflate=True)
        again = orjson.loads(data)
        assert (again["tls_v1"], again["deflate"], again["snappy"]) == (False, False, False)
        await round_trip(c, b"twice")
