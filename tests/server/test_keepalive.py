"""Server PINGs, client PONGs and stale connections, on trio's autojumping mock clock.

nats-server (client.go processPingTimer, server.go firstClientPingInterval): the ping timer is
armed at accept with the full ping_interval; CONNECT re-arms it with the short first ping,
min(ping_interval, 2 s) plus up to 20 % jitter. When the timer fires the server sends PING
unless the client was active within the interval (once the RTT is known); when the PINGs
outstanding would exceed ping_max it sends -ERR 'Stale Connection' and closes.

Every test requests ``autojump_clock``: sleeps cost no real time, and ``trio.fail_after``
limits are in mock seconds (a hang on real I/O jumps straight to them).
"""

from __future__ import annotations

import trio

Q = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
TIMEOUT = 600  # mock seconds
STALE = b"-ERR 'Stale Connection'\r\n"


async def connect(raw_connect, server, connect_line: bytes | None = Q):
    client = await raw_connect(server)
    await client.read_info()
    if connect_line is not None:
        await client.send(connect_line)
    return client


async def test_first_ping_about_two_seconds_after_connect(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server()  # ping_interval: 2 min
        client = await connect(raw_connect, server, None)
        await trio.sleep(30)  # the CONNECT re-arms the timer, however late it comes
        await client.send(Q)
        start = trio.current_time()
        assert await client.nothing_within(1.999) == b""
        assert await client.read_line() == b"PING\r\n"
        elapsed = trio.current_time() - start
        assert 2.0 <= elapsed <= 2.4 + 1e-6
        await client.send(b"PONG\r\n")
        assert await client.ping() == b""


async def test_first_ping_uses_ping_interval_when_shorter(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=0.5)
        client = await connect(raw_connect, server)
        start = trio.current_time()
        assert await client.read_line() == b"PING\r\n"
        assert 0.5 <= trio.current_time() - start <= 0.6 + 1e-6


async def test_no_connect_first_ping_after_full_interval(autojump_clock, start_server, raw_connect):
    # Without CONNECT (telnet) the timer armed at accept runs: the full ping_interval.
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=10)
        start = trio.current_time()
        client = await connect(raw_connect, server, None)
        assert await client.nothing_within(9.9) == b""
        assert await client.read_line() == b"PING\r\n"
        assert trio.current_time() - start <= 10.1


async def test_client_answering_pongs_stays_connected(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server)
        pings = 0
        with trio.move_on_after(10):  # ten ping intervals
            while True:
                line = await client.read_line()
                assert line == b"PING\r\n"
                pings += 1
                await client.send(b"PONG\r\n")
        assert pings >= 1
        assert not client.eof
        assert await client.ping() == b""
        assert len(server.clients) == 1


async def test_silent_client_is_stale_after_ping_max_plus_one_intervals(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server)
        start = trio.current_time()
        data = await client.read_until_eof()
        elapsed = trio.current_time() - start
        assert data == b"PING\r\nPING\r\n" + STALE
        # First PING after 1-1.2 s, the second one interval later, then Stale one more later.
        assert 3.0 <= elapsed <= 3.2 + 1e-6
        assert server.clients == {}
        assert server.closed_clients[-1]["reason"] == "Stale Connection"


async def test_silent_telnet_client_is_stale_too(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server, None)
        assert await client.read_until_eof() == b"PING\r\nPING\r\n" + STALE


async def test_ping_max_counts_outstanding_pings(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=4)
        client = await connect(raw_connect, server)
        start = trio.current_time()
        assert await client.read_until_eof() == b"PING\r\n" * 4 + STALE
        assert 5.0 <= trio.current_time() - start <= 5.2 + 1e-6


async def test_client_that_goes_silent_after_answering_becomes_stale(autojump_clock, start_server, raw_connect):
    # The client answers the first PING (the server now knows the RTT), then never sends
    # anything again: with no activity, the server keeps pinging and declares it stale.
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server)
        assert await client.read_line() == b"PING\r\n"
        await client.send(b"PONG\r\n")
        with trio.move_on_after(20) as waited:  # twenty ping intervals
            data = await client.read_until_eof()
        assert not waited.cancelled_caught, "no Stale Connection within 20 ping intervals of silence"
        assert data.endswith(STALE)
        assert data[: -len(STALE)] == b"PING\r\n" * (len(data[: -len(STALE)]) // 6)


# -- activity delays the PING (client.go processPingTimer, lastIn) ------------------------------


async def _keeps_sending(client, line: bytes, seconds: float, every: float = 0.25) -> bytes:
    """Send ``line`` every ``every`` mock seconds for ``seconds``, never answering a PING;
    return everything the server sent meanwhile."""
    got = b""
    end = trio.current_time() + seconds
    while trio.current_time() < end and not client.eof:
        await client.send(line)
        got += await client.nothing_within(every)
    return got


async def test_publishing_client_that_never_answers_is_not_stale(autojump_clock, start_server, raw_connect):
    # nats-server 2.15.1 keeps it: once the RTT is known (CONNECT's estimate) and the first
    # PING has gone out, a message within the interval delays every later PING.
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server)
        got = await _keeps_sending(client, b"PUB x 1\r\na\r\n", 20)  # twenty intervals
        assert got == b"PING\r\n"  # the first one only (it measures the RTT)
        assert not client.eof and len(server.clients) == 1
        # ...and once it stops sending, the unanswered PINGs make it stale as usual
        assert (await client.read_until_eof()).endswith(STALE)
        assert server.closed_clients[-1]["reason"] == "Stale Connection"


async def test_client_pings_and_subscriptions_are_activity(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        pinger = await connect(raw_connect, server)
        subscriber = await connect(raw_connect, server)
        async with trio.open_nursery() as nursery:
            results = {}

            async def run(name, client, line):
                results[name] = await _keeps_sending(client, line, 20)

            nursery.start_soon(run, "ping", pinger, b"PING\r\n")
            nursery.start_soon(run, "sub", subscriber, b"SUB y 1\r\nUNSUB 1\r\n")
        assert results["ping"].replace(b"PONG\r\n", b"") == b"PING\r\n"
        assert results["sub"] == b"PING\r\n"
        assert len(server.clients) == 2


async def test_pongs_alone_do_not_delay_the_ping(autojump_clock, start_server, raw_connect):
    # Answering is not activity (lastIn moves on messages, SUB/UNSUB and PING only): a client
    # that only answers is PINGed every interval, as nats-server does.
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server)
        pings = 0
        with trio.move_on_after(10.5):
            while True:
                assert await client.read_line() == b"PING\r\n"
                pings += 1
                await client.send(b"PONG\r\n")
        assert pings == 10  # the first after 1-1.2 s, then one every interval


async def test_activity_without_a_known_rtt_does_not_delay_the_ping(autojump_clock, start_server, raw_connect):
    # A telnet client (no CONNECT, so no RTT estimate) that publishes but never answers is
    # PINGed anyway and goes stale: needRTT wins over activity.
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1, ping_max=2)
        client = await connect(raw_connect, server, None)
        got = await _keeps_sending(client, b"PUB x 1\r\na\r\n", 20)
        assert got.replace(b"+OK\r\n", b"") == b"PING\r\nPING\r\n" + STALE  # (verbose: no CONNECT)
        assert client.eof


# -- the timers' task (natserver.server.keepalive): one heap for the whole server -------------------


async def test_timers_of_closed_clients_do_not_pile_up(autojump_clock, start_server, raw_connect, monkeypatch):
    from natserver.server import keepalive as _keepalive

    monkeypatch.setattr(_keepalive, "_HEAP_SLACK", 8)
    with trio.fail_after(TIMEOUT):
        server = await start_server()  # ping_interval: 2 min, so no timer fires here
        keep = await connect(raw_connect, server)
        await keep.ping()
        heap = server.ping_timers._heap
        for _ in range(60):  # each connection arms twice (accept, CONNECT), then closes
            client = await connect(raw_connect, server)
            await client.ping()
            await client.aclose()
            # at most 2 clients live at once, so at most 3 * 2 + slack entries, plus the new one
            assert len(heap) <= 3 * 2 + 8 + 1
        # Closes alone (no arming after them) rebuild it too: 20 connections that leave
        # together do not stay in the heap (each entry holds its client, parser and socket).
        for _ in range(20):
            await (await connect(raw_connect, server)).ping()
        for other in [c for c in server.clients.values() if c.cid != min(server.clients)]:
            other.close("Client Closed")
        await trio.sleep(0.1)
        assert len(server.clients) == 1
        assert len(heap) <= 3 * 1 + 8  # (40 entries and more, were closes not checked)
        # and the timer of the connection that stayed still fires
        assert await keep.read_line() == b"PING\r\n"


async def test_a_failing_timer_closes_only_its_client(autojump_clock, start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(ping_interval=1)
        bad = await connect(raw_connect, server)
        await bad.ping()
        good = await connect(raw_connect, server)
        await good.ping()
        broken = server.clients[min(server.clients)]
        broken.rtt = None  # makes the timer check pings_out...
        broken.pings_out = None  # ...which then fails: a bug in the timer for this client
        assert b"PING" not in await bad.read_until_eof()
        for _ in range(3):  # the one task serving every timer lives on
            assert await good.read_line() == b"PING\r\n"
            await good.send(b"PONG\r\n")
        assert broken.closed and len(server.clients) == 1


async def test_auth_timeout_is_a_timer_of_the_shared_task(autojump_clock, start_server, raw_connect):
    """With authorization, a client that says nothing is cut off at auth_timeout exactly
    (nats-server's authTimer) by the server's one timer task: no task of its own waits for
    it, and a client that authenticates in time is left alone."""
    with trio.fail_after(TIMEOUT):
        server = await start_server(authorization="t", auth_timeout=3, ping_interval=60)
        silent = await connect(raw_connect, server, None)
        talker = await connect(raw_connect, server, b'CONNECT {"verbose":false,"auth_token":"t"}\r\n')
        assert await talker.ping() == b""
        for client in server.clients.values():
            assert not client._nursery.child_tasks  # (nor a writer: nothing waited to be sent)
        start = trio.current_time()
        assert await silent.read_until_eof() == b"-ERR 'Authentication Timeout'\r\n"
        assert 3.0 <= trio.current_time() - start <= 3.0 + 1e-6
        assert b"-ERR" not in await talker.ping()  # (the server's first PING may come first)
        assert [c["reason"] for c in server.closed_clients] == ["Authentication Timeout"]
