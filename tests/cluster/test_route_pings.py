"""Route keep-alive (client.go processPingTimer for ROUTER): a route is PINGed every interval
(at most 30 s) whatever it sends, unlike a client, whose activity delays the PING; the first
PING comes within about 1 s; PINGs unanswered past ping_max close it as a Stale Connection.
On trio's autojumping mock clock: ``trio.fail_after`` limits are mock seconds."""

from __future__ import annotations

import trio

from natserver.cluster.routes import ROUTE_MAX_PING_INTERVAL, Route

from .helpers import start_cluster, start_node

TIMEOUT = 600  # mock seconds
STALE = b"-ERR 'Stale Connection'\r\n"


async def _raw_route_peer(server):
    stream = await trio.open_tcp_stream("127.0.0.1", server.cluster.port)
    return stream


async def _read_until_eof(stream, answer_every: float | None = None) -> bytes:
    """Everything the server sends until it closes; with ``answer_every``, a PING (never a
    PONG) is sent that often meanwhile: activity that would delay a client's PING."""
    data = b""
    while True:
        with trio.move_on_after(answer_every if answer_every else 3600):
            chunk = await stream.receive_some(65536)
            if not chunk:
                return data
            data += chunk
            continue
        await stream.send_all(b"PING\r\n")


async def test_a_route_peer_that_never_answers_is_stale_even_when_it_talks(autojump_clock, nursery):
    with trio.fail_after(TIMEOUT):
        server = await start_node(nursery, ping_interval=1, ping_max=2)
        quiet = await _raw_route_peer(server)
        chatty = await _raw_route_peer(server)
        start = trio.current_time()
        async with trio.open_nursery() as both:
            got = {}

            async def run(name, stream, every):
                got[name] = await _read_until_eof(stream, every)

            both.start_soon(run, "quiet", quiet, None)
            both.start_soon(run, "chatty", chatty, 0.25)
        for data in got.values():
            lines = [line for line in data.split(b"\r\n") if line and not line.startswith(b"INFO ")]
            lines = [line for line in lines if line != b"PONG"]  # (the answers to its PINGs)
            assert lines == [b"PING", b"PING", STALE[:-2]], data
        # first PING after 1-1.2 s, the second one interval later, Stale one more later
        assert 3.0 <= trio.current_time() - start <= 3.2 + 1e-6


async def test_routed_servers_ping_each_other_and_stay(autojump_clock, nursery):
    with trio.fail_after(TIMEOUT):
        servers = await start_cluster(nursery, 2, ping_interval=1, ping_max=2)
        routes = [route for s in servers for route in s.cluster.routes.values()]
        assert len(routes) == 2
        await trio.sleep(20)  # twenty intervals: a PING each way every second, all answered
        assert [route for s in servers for route in s.cluster.routes.values()] == routes
        assert all(not route.closed and route._ponged and route.pings_out <= 1 for route in routes)


def test_a_route_ping_interval_is_capped_at_30_seconds():
    assert ROUTE_MAX_PING_INTERVAL == 30.0

    class _Options:
        ping_interval = 120.0

    class _Server:
        options = _Options()

    class _Cluster:
        server = _Server()

    route = Route.__new__(Route)
    route.cluster = _Cluster()
    route.leaf_account = None
    assert route._ping_interval() == 30.0
    route.leaf_account = b"$G"  # a leaf connection keeps the server's interval
    assert route._ping_interval() == 120.0
