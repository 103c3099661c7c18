"""Lame duck mode across a cluster, as nats-server 2.9.10 (server.go sendLDMToRoutes and
sendLDMToClients, route.go processRouteInfo): the node entering it tells its routes with an
INFO carrying "ldm", and they take its client URL out of their clients' INFO (an updated INFO
to protocol-1 clients); its own clients get an INFO with "ldm" listing only the other nodes.
So clients everywhere stop being sent to the node going away. Checked natserver with
natserver, and both ways with a nats-server 2.9.10 node."""

from __future__ import annotations

import json
import signal

import trio

from natserver.server.signals import lame_duck_mode
from tests.cluster.helpers import (
    STEP_TIMEOUT,
    NatsServerProcess,
    connect,
    needs_nats_server,
    route_url,
    skip_without_nats_server,
    start_node,
    wait_routes,
)

# Long enough that the clients are still connected while the test looks.
LAME_DUCK = {"lame_duck_duration": 60, "lame_duck_grace_period": 30}


async def _next_info(client) -> dict:
    """The next INFO a connected client gets (PINGs answered on the way)."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            line = await client.read_line()
            if line.startswith(b"INFO "):
                return json.loads(line[5:])
            if line == b"PING\r\n":
                await client.send(b"PONG\r\n")


async def _first_info_urls(port: int) -> list:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    while b"\r\n" not in data:
        data += await stream.receive_some(65536)
    await stream.aclose()
    return json.loads(data.split(b"\r\n")[0][5:]).get("connect_urls") or []


async def test_a_node_in_lame_duck_leaves_the_other_nodes_connect_urls(nursery):
    a = await start_node(nursery, **LAME_DUCK)
    b = await start_node(nursery, routes=[route_url(a)], **LAME_DUCK)
    await wait_routes([a, b], 1)
    url_a, url_b = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
    on_a = await connect(a.port, "on-a")
    on_b = await connect(b.port, "on-b")
    with trio.fail_after(STEP_TIMEOUT):
        while sorted(b._info_base.get("connect_urls") or ()) != sorted([url_a, url_b]):
            await trio.sleep(0.01)
    nursery.start_soon(lame_duck_mode, a)
    told_a = await _next_info(on_a)
    assert told_a["ldm"] is True
    assert told_a["connect_urls"] == [url_b]  # only the other node
    told_b = await _next_info(on_b)
    assert "ldm" not in told_b
    assert told_b["connect_urls"] == [url_b]  # a's URL is gone for b's clients
    # b keeps it out even when a's next INFO (any reason) no longer says "ldm".
    route = next(iter(b.cluster.routes.values()))
    assert route.lame_duck
    b.cluster.update_client_urls()
    assert b._info_base["connect_urls"] == [url_b]


@needs_nats_server
@skip_without_nats_server
async def test_nats_server_in_lame_duck_leaves_natserver_connect_urls(nursery, tmp_path):
    config = tmp_path / "ldm.conf"
    config.write_text("lame_duck_duration: 60s\nlame_duck_grace_period: 30s\n")
    ns = NatsServerProcess(extra=["-c", str(config)])
    try:
        await ns.wait_ready()
        ours = await start_node(nursery, routes=[ns.route_url])
        await wait_routes([ours], 1)
        await ns.wait_routes(1)
        url_ns, url_ours = f"127.0.0.1:{ns.port}", f"127.0.0.1:{ours.port}"
        client = await connect(ours.port, "watcher")
        with trio.fail_after(STEP_TIMEOUT):
            while url_ns not in (ours._info_base.get("connect_urls") or ()):
                await trio.sleep(0.01)
        keep = await trio.open_tcp_stream("127.0.0.1", ns.port)  # a client, so lame duck goes on
        await keep.send_all(b'CONNECT {"protocol":1}\r\nPING\r\n')
        await keep.receive_some(65536)
        ns.proc.send_signal(signal.SIGUSR2)
        while True:
            info = await _next_info(client)
            if url_ns not in info["connect_urls"]:
                break
        assert info["connect_urls"] == [url_ours]
        await keep.aclose()
    finally:
        ns.stop()


@needs_nats_server
@skip_without_nats_server
async def test_natserver_in_lame_duck_leaves_nats_server_connect_urls(nursery):
    ours = await start_node(nursery, **LAME_DUCK)
    ns = NatsServerProcess(routes=[route_url(ours)])
    try:
        await ns.wait_ready()
        await ns.wait_routes(1)
        await wait_routes([ours], 1)
        url_ns, url_ours = f"127.0.0.1:{ns.port}", f"127.0.0.1:{ours.port}"
        with trio.fail_after(STEP_TIMEOUT):
            while url_ours not in await _first_info_urls(ns.port):
                await trio.sleep(0.05)
        their_client = await connect(ns.port, "on-nats-server")
        our_client = await connect(ours.port, "on-natserver")
        nursery.start_soon(lame_duck_mode, ours)
        told = await _next_info(our_client)
        assert told["ldm"] is True and told["connect_urls"] == [url_ns]
        while True:
            info = await _next_info(their_client)
            if url_ours not in (info.get("connect_urls") or ()):
                break
        assert info["connect_urls"] == [url_ns]
    finally:
        ns.stop()


async def test_nats_py_is_told_and_moves_to_the_other_node(nursery):
    from tests.cluster.natspy_helper import lame_duck_moves

    a = await start_node(nursery, lame_duck_duration=1.5, lame_duck_grace_period=0.2)
    b = await start_node(nursery, routes=[route_url(a)])
    await wait_routes([a, b], 1)
    with trio.fail_after(STEP_TIMEOUT):
        while len(a._info_base.get("connect_urls") or ()) < 2:
            await trio.sleep(0.01)

    def enter_lame_duck() -> None:
        trio.from_thread.run_sync(nursery.start_soon, lame_duck_mode, a)

    with trio.fail_after(40):
        result = await trio.to_thread.run_sync(lame_duck_moves, a.port, b.port, enter_lame_duck)
    assert result["discovered"] == [b.port]
    assert result["connected_port"] == b.port
    assert result["got"] == b"still here"
