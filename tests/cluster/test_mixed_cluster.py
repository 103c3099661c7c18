"""natserver and nats-server 2.9.10 in one cluster: routes both ways, interest, queue groups,
and nats-py clients that discover the cluster and fail over."""

from __future__ import annotations

import pytest
import trio

from tests.cluster.helpers import (
    STEP_TIMEOUT,
    NatsServerProcess,
    connect,
    read_msgs,
    route_url,
    skip_without_nats_server,
    start_node,
    wait_interest,
    wait_routes,
)

pytestmark = [pytest.mark.needs_nats_server, skip_without_nats_server]


@pytest.fixture
def nats_servers():
    started: list[NatsServerProcess] = []

    def start(**kwargs) -> NatsServerProcess:
        process = NatsServerProcess(**kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


async def test_nats_server_dials_natserver(nursery, nats_servers):
    a = await start_node(nursery)
    ns = nats_servers(routes=[route_url(a)])
    await ns.wait_ready()
    await wait_routes([a], 1)
    await ns.wait_routes(1)
    ca, cn = await connect(a.port), await connect(ns.port)
    await ca.send(b"SUB foo 1\r\n")
    await ca.ping()
    await cn.send(b"SUB bar 1\r\n")
    await cn.ping()
    await ns.wait_remote_interest("foo")
    await wait_interest(a, b"bar")
    await cn.send(b"PUB foo r 2\r\nhi\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    await ca.send(b"PUB bar 3\r\nyes\r\n")
    assert await read_msgs(ca, 2) == [b"MSG foo 1 r 2\r\nhi\r\n", b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"]
    assert await read_msgs(cn, 1) == [b"MSG bar 1 3\r\nyes\r\n"]
    routez = await ns.routez()
    # one route with 2.9.10; with 2.15.1 its pool's connections (route_pool_size, 2.10+)
    assert routez["routes"] and {route["remote_id"] for route in routez["routes"]} == {a.server_id}


async def test_natserver_dials_nats_server_and_unsub_withdraws(nursery, nats_servers):
    ns = nats_servers()
    await ns.wait_ready()
    a = await start_node(nursery, routes=[ns.route_url])
    await wait_routes([a], 1)
    ca, cn = await connect(a.port), await connect(ns.port)
    await ca.send(b"SUB foo 1\r\n")
    await ca.ping()
    await ns.wait_remote_interest("foo")
    await ca.send(b"UNSUB 1\r\n")
    await ca.ping()
    with trio.fail_after(STEP_TIMEOUT):
        # (natserver's own $SYS account's subscriptions stay, as nats-server's do.)
        while [s for s in (await ns.routez())["routes"][0].get("subscriptions_list") or [] if not s.startswith("$SYS.")]:
            await trio.sleep(0.05)
    await cn.send(b"SUB x.> 1\r\n")
    await cn.ping()
    await wait_interest(a, b"x.y")
    await cn.stream.aclose()
    (route,) = a.cluster.routes.values()
    with trio.fail_after(STEP_TIMEOUT):
        # (nats-server also tells of its own $SYS account's subscriptions: those stay.)
        while any(account == b"$G" for account, _, _ in route.entries):
            await trio.sleep(0.01)


async def test_three_mixed_nodes_gossip_and_deliver_once(nursery, nats_servers):
    ns1 = nats_servers()
    await ns1.wait_ready()
    a = await start_node(nursery, routes=[ns1.route_url])
    ns2 = nats_servers(routes=[ns1.route_url])  # learns of the natserver by gossip
    await ns2.wait_ready()
    await wait_routes([a], 2)
    await ns1.wait_routes(2)
    await ns2.wait_routes(2)
    clients = [await connect(port) for port in (a.port, ns1.port, ns2.port)]
    for client in clients:
        await client.send(b"SUB s.* 1\r\nSUB q g 2\r\n")
        await client.ping()
    await wait_interest(a, b"s.x", count=2)
    await ns1.wait_remote_interest("s.*", count=2)
    await ns2.wait_remote_interest("s.*", count=2)
    for i, client in enumerate(clients):
        await client.send(b"PUB s.%d 1\r\n%d\r\n" % (i, i))
    for client in clients:
        got = await read_msgs(client, 3)
        assert sorted(got) == [b"MSG s.%d 1 1\r\n%d\r\n" % (i, i) for i in range(3)]
    # Queue group g has one member per node: a publisher's local member takes all.
    for i in range(10):
        await clients[0].send(b"PUB q 1\r\n%d\r\n" % i)
    assert len(await read_msgs(clients[0], 10)) == 10
    for client in clients[1:]:
        assert b"MSG" not in await client.ping()


async def test_queue_group_across_nats_server_delivers_each_once(nursery, nats_servers):
    ns = nats_servers()
    await ns.wait_ready()
    a = await start_node(nursery, routes=[ns.route_url])
    b = await start_node(nursery, routes=[ns.route_url])
    await wait_routes([a, b], 2)
    qa, qb = await connect(a.port), await connect(b.port)
    for q in (qa, qb):
        await q.send(b"SUB work g 1\r\n")
        await q.ping()
    await ns.wait_remote_interest("work", count=2)
    pub = await connect(ns.port)
    for i in range(30):
        await pub.send(b"PUB work 2\r\n%02d\r\n" % i)
    await pub.ping()
    got = []
    for q in (qa, qb):
        data = await q.nothing_within(0.5)
        got += [line for line in data.split(b"\r\n") if len(line) == 2]
    assert sorted(got) == [b"%02d" % i for i in range(30)]


async def test_nats_py_discovers_and_fails_over(nursery, nats_servers):
    nats = pytest.importorskip("nats")
    del nats
    from tests.cluster.natspy_helper import discover_and_failover

    ns = nats_servers()
    await ns.wait_ready()
    a = await start_node(nursery, routes=[ns.route_url])
    await wait_routes([a], 1)
    result = await trio.to_thread.run_sync(discover_and_failover, a.port, ns.port, ns)
    assert result["discovered"] == f"nats://127.0.0.1:{ns.port}"
    assert result["received"] == [b"over-the-route", b"after-failover"]
