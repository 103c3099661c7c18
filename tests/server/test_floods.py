"""Abusive clients do not hold up the others (issue 34): a PING flood is answered, PONG for
PING, in coalesced writes, and a healthy client's request/reply is served meanwhile."""

from __future__ import annotations

import time

import trio

TIMEOUT = 60  # seconds, for each test's I/O
Q = b'CONNECT {"verbose":false,"pedantic":false}\r\n'


async def _connected(raw_connect, server):
    client = await raw_connect(server)
    await client.read_info()
    await client.send(Q)
    return client


async def test_a_ping_flood_gets_every_pong(start_server, raw_connect):
    n = 300_000
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        flooder = await _connected(raw_connect, server)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flooder.send, b"PING\r\n" * n)
            data = await flooder.read_exactly(6 * n)
        assert data == b"PONG\r\n" * n
        assert await flooder.nothing_within(0.1) == b""
        assert server.clients and not server.slow_consumers


async def test_requests_are_answered_while_pings_flood(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        responder = await _connected(raw_connect, server)
        await responder.send(b"SUB svc 1\r\n")
        requester = await _connected(raw_connect, server)
        await requester.send(b"SUB reply 1\r\n")
        assert await requester.ping() == b"" and await responder.ping() == b""
        flooders = [await _connected(raw_connect, server) for _ in range(2)]
        burst = b"PING\r\n" * 200_000

        async def flood(client, reads: bool):
            while True:
                await client.send(burst)
                if reads:
                    await client.read_exactly(len(burst))

        worst = 0.0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood, flooders[0], True)
            nursery.start_soon(flood, flooders[1], False)
            for i in range(20):
                start = time.perf_counter()
                await requester.send(b"PUB svc reply 1\r\n%d\r\n" % (i % 10))
                line = await responder.read_line()
                assert line == b"MSG svc 1 reply 1\r\n"
                await responder.read_line()
                await responder.send(b"PUB reply 1\r\nk\r\n")
                assert await requester.read_line() == b"MSG reply 1 1\r\n"
                await requester.read_line()
                worst = max(worst, time.perf_counter() - start)
            nursery.cancel_scope.cancel()
        # Parsed one by one, each 1.2 MB burst held the loop ~1 s; as PingRuns ~a millisecond.
        assert worst < 0.5, f"a request took {worst * 1000:.0f} ms during the flood"


async def test_the_first_pong_of_a_run_still_brings_the_async_info(start_server, raw_connect):
    # client.go processPing: the first PONG after CONNECT is followed by INFO (protocol 1).
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false,"protocol":1}\r\n' + b"PING\r\n" * 5)
        assert await client.read_line() == b"PONG\r\n"
        assert (await client.read_line()).startswith(b"INFO ")
        assert await client.read_exactly(4 * 6) == b"PONG\r\n" * 4
        await client.send(b"PING\r\n" * 3)
        assert await client.read_exactly(3 * 6) == b"PONG\r\n" * 3
        assert await client.nothing_within(0.1) == b""
