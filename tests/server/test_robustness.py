"""Many clients sending garbage at once must not hurt the server or its healthy clients.

Garbage is random bytes mixed with protocol fragments and corrupted valid ops (so it reaches
deep parser states: split sizes, half payloads, bad JSON, wildcards), from fixed seeds so a
failure replays. Meanwhile a healthy publisher and subscriber must see every one of their
messages, in order; afterwards the server must still accept connections, and no connection
may have been closed by an internal error.
"""

from __future__ import annotations

import asyncio
import random

import nats
import pytest
import trio

N_GARBAGE_CLIENTS = 20
TIMEOUT = 30

FRAGMENTS = [
    b"PUB ", b"pub ", b"HPUB ", b"SUB ", b"sub ", b"UNSUB ", b"PING", b"PONG", b"CONNECT ", b"INFO ",
    b"+OK", b"-ERR ", b"MSG ", b"HMSG ", b"foo", b"foo.bar", b"*", b">", b".", b"..", b" ", b"\t",
    b"\r\n", b"\n", b"\r", b" 5", b" 0", b" 12 14", b" 999999", b" 99999999999", b"-1", b"{}",
    b'{"verbose":false,"pedantic":true,"headers":true,"no_responders":true}', b'{"echo":false}',
    b'{"verbose":1}', b'{"protocol":7}', b"NATS/1.0\r\n\r\n", b"hello", b"\x00", b"\xff\xfe",
    b"SUB > 1\r\n", b"SUB foo.* q 2\r\n", b"UNSUB 1 1\r\n", b"PUB foo r 2\r\nhi\r\n",
]
VALID_OPS = [
    b'CONNECT {"verbose":false,"headers":true}\r\n',
    b"SUB foo.* 1\r\n",
    b"SUB > q 2\r\n",
    b"PUB foo.bar 5\r\nhello\r\n",
    b"PUB foo.bar reply 0\r\n\r\n",
    b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
    b"UNSUB 1 3\r\n",
    b"PING\r\n",
]


def make_garbage(rng: random.Random) -> bytes:
    """Mostly valid ops (so the connection lives a while), with fragments, random bytes and
    corrupted ops mixed in: the first bad one ends the connection somewhere interesting."""
    parts = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.random()
        if kind < 0.1:
            parts.append(rng.randbytes(rng.randint(1, 48)))
        elif kind < 0.25:
            parts.append(rng.choice(FRAGMENTS))
        elif kind < 0.8:
            parts.append(rng.choice(VALID_OPS))
        else:
            op = bytearray(rng.choice(VALID_OPS))
            for _ in range(rng.randint(1, 2)):  # corrupt, drop or duplicate a byte
                i = rng.randrange(len(op))
                action = rng.random()
                if action < 0.4:
                    op[i] = rng.randrange(256)
                elif action < 0.7:
                    del op[i]
                else:
                    op.insert(i, op[i])
            parts.append(bytes(op))
    return b"".join(parts)


def chunks_of(rng: random.Random, data: bytes):
    i = 0
    while i < len(data):
        n = rng.choice([1, 2, 7, 64, 1000])
        yield data[i : i + n]
        i += n


async def garbage_client(port: int, seed: int, rounds: int = 4) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            continue
        try:
            data = make_garbage(rng)
            for chunk in chunks_of(rng, data):
                await stream.send_all(chunk)
                if rng.random() < 0.3:
                    await trio.sleep(0)
            # Read what the server says (INFO, -ERR, MSGs...) until it closes or goes quiet.
            with trio.move_on_after(0.2):
                while await stream.receive_some(65536):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the server closed us: fine
        finally:
            await trio.aclose_forcefully(stream)


def assert_no_internal_errors(server) -> None:
    reasons = [record["reason"] for record in server.closed_clients]
    assert "Internal Server Error" not in reasons


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_garbage_clients_do_not_disturb_healthy_ones(seed, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        subject = b"healthy.stream.%d" % seed
        sub = await raw_connect(server)
        await sub.read_info()
        await sub.send(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB ' + subject + b" 1\r\n")
        assert await sub.ping() == b""
        pub = await raw_connect(server)
        await pub.read_info()
        await pub.send(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        assert await pub.ping() == b""

        n = 300
        expected = b"".join(b"MSG %s 1 %d\r\n%d\r\n" % (subject, len(b"%d" % i), i) for i in range(n))
        received = bytearray()

        async def subscriber():
            received.extend(await sub.read_exactly(len(expected)))

        async def publisher():
            for i in range(n):
                await pub.send(b"PUB %s %d\r\n%d\r\n" % (subject, len(b"%d" % i), i))
                if i % 10 == 0:
                    await trio.sleep(0.001)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(subscriber)
            for k in range(N_GARBAGE_CLIENTS):
                nursery.start_soon(garbage_client, server.port, seed * 1000 + k)
            nursery.start_soon(publisher)

        assert bytes(received) == expected
        assert await pub.ping() == b""
        assert await sub.ping() == b""

        # Every garbage connection is gone; the server still accepts new ones.
        while len(server.clients) > 2:
            await trio.sleep(0.01)
        fresh = await raw_connect(server)
        await fresh.read_info()
        assert await fresh.ping() == b""
        assert_no_internal_errors(server)


def test_garbage_clients_with_natspy(threaded_server):
    handle = threaded_server()
    n = 200

    async def garbage(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
            except OSError:
                continue
            try:
                for chunk in chunks_of(rng, make_garbage(rng)):
                    writer.write(chunk)
                    await writer.drain()
                try:
                    await asyncio.wait_for(reader.read(), 0.2)
                except asyncio.TimeoutError:
                    pass
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

    async def main():
        sub_nc = await nats.connect(handle.url, allow_reconnect=False)
        sub = await sub_nc.subscribe("healthy.natspy")
        await sub_nc.flush()
        pub_nc = await nats.connect(handle.url, allow_reconnect=False)

        async def publish():
            for i in range(n):
                await pub_nc.publish("healthy.natspy", b"%d" % i)
                if i % 20 == 0:
                    await asyncio.sleep(0.001)
            await pub_nc.flush()

        await asyncio.gather(publish(), *(garbage(5000 + k) for k in range(N_GARBAGE_CLIENTS)))
        got = [(await sub.next_msg(timeout=5)).data for _ in range(n)]
        assert got == [b"%d" % i for i in range(n)]
        # New connections still work.
        fresh = await nats.connect(handle.url, allow_reconnect=False)
        await fresh.flush()
        for nc in (fresh, pub_nc, sub_nc):
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert_no_internal_errors(handle.server)
