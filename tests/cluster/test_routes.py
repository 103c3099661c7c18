"""Clusters of natservers (routes): interest, messages, queue groups, gossip, bad peers."""

from __future__ import annotations

import json

import pytest
import trio

import natserver
from natserver.config.flags import build_options, parse_args
from natserver.config.mapping import options_from_file
from natserver.protocol.const import DEFAULT_ROUTE_POOL_SIZE
from tests.cluster.helpers import (
    STEP_TIMEOUT,
    connect,
    free_port,
    read_msgs,
    route_url,
    start_cluster,
    start_node,
    wait_interest,
    wait_routes,
)
from tests.conftest import RawClient, make_options


async def test_two_nodes_message_both_ways_with_reply_and_headers(nursery):
    a, b = await start_cluster(nursery, 2)
    ca, cb = await connect(a.port), await connect(b.port)
    await ca.send(b"SUB foo.* 1\r\n")
    await ca.ping()
    await cb.send(b"SUB bar 9\r\n")
    await cb.ping()
    await wait_interest(b, b"foo.x")
    await wait_interest(a, b"bar")
    await cb.send(b"PUB foo.x _INBOX.r 2\r\nhi\r\nHPUB foo.y 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    await ca.send(b"PUB bar 3\r\nyes\r\n")
    assert await read_msgs(ca, 2) == [b"MSG foo.x 1 _INBOX.r 2\r\nhi\r\n", b"HMSG foo.y 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"]
    assert await read_msgs(cb, 1) == [b"MSG bar 9 3\r\nyes\r\n"]


async def test_interest_is_withdrawn_on_unsub_and_close(nursery):
    a, b = await start_cluster(nursery, 2)
    ca = await connect(a.port)
    await ca.send(b"SUB foo 1\r\nSUB foo 2\r\n")
    await ca.ping()
    await wait_interest(b, b"foo")
    (route,) = [b.cluster.route_for(remote_id, b"$G") for remote_id in b.cluster.routes]
    assert len(route.entries) == 1  # plain interest is sent once per subject
    await ca.send(b"UNSUB 1\r\n")
    await ca.ping()
    await ca.send(b"UNSUB 2\r\n")
    await ca.ping()
    with trio.fail_after(STEP_TIMEOUT):
        while route.entries:
            await trio.sleep(0.01)
    cq = await connect(a.port)
    await cq.send(b"SUB bar g 1\r\nSUB bar g 2\r\n")
    await cq.ping()
    await wait_interest(b, b"bar")
    with trio.fail_after(STEP_TIMEOUT):
        while route.entries.get((b"$G", b"bar", b"g")).weight != 2:
            await trio.sleep(0.01)
    await cq.stream.aclose()
    with trio.fail_after(STEP_TIMEOUT):
        while route.entries:
            await trio.sleep(0.01)


async def test_three_nodes_form_a_full_mesh_from_one_seed_and_messages_cross_once(nursery):
    a, b, c = await start_cluster(nursery, 3)  # b and c know only a: gossip makes b-c
    assert {s.server_id for s in (a, c)} == set(b.cluster.routes)
    subs = [await connect(s.port) for s in (a, b, c)]
    for sub in subs:
        await sub.send(b"SUB news.> 1\r\n")
        await sub.ping()
    for server in (a, b, c):
        await wait_interest(server, b"news.x", count=2)
    pub = await connect(b.port)
    for i in range(5):
        await pub.send(b"PUB news.%d 1\r\n%d\r\n" % (i, i))
    await pub.ping()
    for sub in subs:
        msgs = await read_msgs(sub, 5)
        assert msgs == [b"MSG news.%d 1 1\r\n%d\r\n" % (i, i) for i in range(5)]
        assert await sub.ping() == b""  # nothing twice


async def test_queue_group_prefers_local_member_and_delivers_once(nursery):
    a, b, c = await start_cluster(nursery, 3)
    qa, qb = await connect(a.port), await connect(b.port)
    await qa.send(b"SUB work g 1\r\n")
    await qa.ping()
    await qb.send(b"SUB work g 1\r\n")
    await qb.ping()
    await wait_interest(c, b"work", count=2)
    await wait_interest(a, b"work")
    pa = await connect(a.port)
    for i in range(20):
        await pa.send(b"PUB work 2\r\n%02d\r\n" % i)
    await pa.ping()
    assert len(await read_msgs(qa, 20)) == 20  # a local member is preferred
    pc = await connect(c.port)
    for i in range(40):
        await pc.send(b"PUB work 2\r\n%02d\r\n" % i)
    await pc.send(b"PUB done 0\r\n\r\n")
    await pc.ping()
    got = []
    for q in (qa, qb):
        got += [m.split(b"\r\n")[1] for m in await read_msgs_until_quiet(q)]
    assert sorted(got) == [b"%02d" % i for i in range(40)]  # each exactly once


async def read_msgs_until_quiet(client: RawClient) -> list[bytes]:
    data = await client.nothing_within(0.5)
    lines = data.split(b"\r\n")
    return [b"\r\n".join(lines[i:i + 2]) for i, line in enumerate(lines) if line.startswith(b"MSG ")]


async def test_clients_learn_the_cluster_urls(nursery):
    a = await start_node(nursery)
    ca = await connect(a.port)
    b = await start_node(nursery, routes=[route_url(a)])
    await wait_routes([a, b], 1)
    with trio.fail_after(STEP_TIMEOUT):
        line = await ca.read_line()
    info = json.loads(line[5:])
    assert sorted(info["connect_urls"]) == sorted([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
    fresh = RawClient(await trio.open_tcp_stream("127.0.0.1", b.port))
    assert len((await fresh.read_info())["connect_urls"]) == 2


async def test_no_advertise_keeps_urls_from_clients(nursery):
    a = await start_node(nursery, cluster_no_advertise=True)
    b = await start_node(nursery, routes=[route_url(a)], cluster_no_advertise=True)
    await wait_routes([a, b], 1)
    fresh = RawClient(await trio.open_tcp_stream("127.0.0.1", a.port))
    assert "connect_urls" not in await fresh.read_info()


async def test_garbage_on_a_route_cuts_off_that_route_alone(nursery):
    a, b = await start_cluster(nursery, 2)
    client = await connect(a.port)
    bad = RawClient(await trio.open_tcp_stream("127.0.0.1", a.cluster.port))
    assert (await bad.read_line()).startswith(b"INFO ")
    await bad.send(b"HELLO THERE\r\n")
    with trio.fail_after(STEP_TIMEOUT):
        assert await bad.read_until_eof() == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert await client.ping() == b""
    assert len(a.cluster.routes) == 1


async def test_interest_before_registration_is_refused(nursery):
    a = await start_node(nursery)
    bad = RawClient(await trio.open_tcp_stream("127.0.0.1", a.cluster.port))
    await bad.read_line()
    await bad.send(b"RS+ $G foo\r\n")
    with trio.fail_after(STEP_TIMEOUT):
        assert await bad.read_until_eof() == b"-ERR 'Unknown Protocol Operation'\r\n"


async def test_route_authorization(nursery):
    a = await start_node(nursery, cluster_username="ru", cluster_password="rp")
    bad = await start_node(nursery, routes=[route_url(a)])
    good = await start_node(nursery, routes=[f"nats://ru:rp@127.0.0.1:{a.cluster.port}"])
    await wait_routes([good, a], 1)  # (each side registers the route on the other's INFO)
    assert list(a.cluster.routes) == [good.server_id]
    assert bad.cluster.routes == {}


async def test_duplicate_routes_are_dropped(nursery):
    a = await start_node(nursery)
    b = await start_node(nursery, routes=[route_url(a)])
    c = await start_node(nursery, routes=[route_url(a), route_url(b)])
    await wait_routes([a, b, c], 2)
    await trio.sleep(0.3)  # let any duplicate handshake finish, then check none survived
    for server in (a, b, c):  # a pool of connections to each of the two others
        assert len(server.cluster.routes) == 2
        assert len(server.cluster.all_routes) == len(server.cluster.route_conns) == 2 * DEFAULT_ROUTE_POOL_SIZE


async def test_a_restarted_node_rejoins(nursery):
    a = await start_node(nursery)
    b_port = route_url(a)
    b = await start_node(nursery, routes=[b_port])
    await wait_routes([a, b], 1)
    await b.shutdown()
    with trio.fail_after(STEP_TIMEOUT):
        while a.cluster.routes:
            await trio.sleep(0.01)
    c = await start_node(nursery, routes=[route_url(a)])
    await wait_routes([a, c], 1)
    assert list(a.cluster.routes) == [c.server_id]


def test_jetstream_with_a_cluster_needs_a_server_name_as_nats_server(tmp_path):
    with pytest.raises(ValueError, match="jetstream cluster requires `server_name` to be set"):
        natserver.Server(make_options(jetstream=True, cluster_port=-1, store_dir=str(tmp_path)))


def test_cluster_block_and_flags(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("""
        cluster {
          name: c9
          listen: 127.0.0.1:6333
          routes: [nats://127.0.0.1:6334, "nats-route://u:p@127.0.0.1:6335"]
          authorization { user: ru, password: rp }
          no_advertise: true
          connect_retries: 3
          pool_size: 3
        }
    """)
    options = options_from_file(str(conf))
    assert (options.cluster_name, options.cluster_host, options.cluster_port) == ("c9", "127.0.0.1", 6333)
    assert options.routes == ["nats://127.0.0.1:6334", "nats-route://u:p@127.0.0.1:6335"]
    assert (options.cluster_username, options.cluster_password) == ("ru", "rp")
    assert options.cluster_no_advertise and options.cluster_connect_retries == 3
    assert options.clustered
    flags = build_options(parse_args([
        "--cluster", "nats://a:b@127.0.0.1:7000", "--routes", "nats://127.0.0.1:7001,nats://127.0.0.1:7002",
        "--cluster_name", "zz", "--no_advertise",
    ]))
    assert (flags.cluster_host, flags.cluster_port, flags.cluster_name) == ("127.0.0.1", 7000, "zz")
    assert (flags.cluster_username, flags.cluster_password) == ("a", "b")
    assert flags.routes == ["nats://127.0.0.1:7001", "nats://127.0.0.1:7002"]
    assert flags.cluster_no_advertise
    assert not build_options(parse_args([])).clustered


async def test_global_account_interest_is_sent_as_dollar_g(nursery):
    a, b = await start_cluster(nursery, 2)
    ca, cb = await connect(a.port), await connect(b.port)
    await ca.send(b"SUB x 1\r\n")
    await ca.ping()
    await wait_interest(b, b"x", account=b"$G")
    (route,) = [b.cluster.route_for(remote_id, b"$G") for remote_id in b.cluster.routes]
    assert list(route.interest) == [b"$G"]
    await cb.send(b"PUB x 1\r\n1\r\n")
    assert await read_msgs(ca, 1) == [b"MSG x 1 1\r\n1\r\n"]


async def test_routez_and_varz(nursery):
    a, b = await start_cluster(nursery, 2, http_port=-1)
    ca = await connect(a.port)
    await ca.send(b"SUB foo 1\r\nSUB bar g 2\r\n")
    await ca.ping()
    await wait_interest(b, b"bar")
    await wait_interest(b, b"foo")

    async def get(server, path):
        stream = await trio.open_tcp_stream("127.0.0.1", server.monitor.port)
        await stream.send_all(b"GET " + path + b" HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    routez = await get(b, b"/routez?subs=1")
    assert routez["num_routes"] == DEFAULT_ROUTE_POOL_SIZE  # the pool (route.go)
    assert {route["remote_id"] for route in routez["routes"]} == {a.server_id}
    (route,) = [route for route in routez["routes"] if route.get("subscriptions_list")]  # $G's connection
    assert route["subscriptions_list"] == ["bar g", "foo"]
    varz = await get(b, b"/varz")
    assert varz["cluster"]["name"] == "c1"
    assert varz["cluster"]["cluster_port"] == b.cluster.port
    assert varz["routes"] == DEFAULT_ROUTE_POOL_SIZE
    assert sorted(varz["connect_urls"]) == sorted([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
    keys = list(varz)  # monitor.go Varz: connect_urls right before max_connections (2.15.1's order)
    assert keys.index("connect_urls") + 1 == keys.index("max_connections")
    assert list(varz["cluster"]) == ["name", "addr", "cluster_port", "auth_timeout", "urls", "tls_timeout", "pool_size"]
    assert varz["cluster"]["pool_size"] == DEFAULT_ROUTE_POOL_SIZE


async def test_a_configured_route_is_redialled_when_its_node_comes_back(nursery):
    port = free_port()
    b = await start_node(nursery, cluster_port=port)
    a = await start_node(nursery, routes=[f"nats://127.0.0.1:{port}"])
    await wait_routes([a, b], 1)
    await b.shutdown()
    with trio.fail_after(STEP_TIMEOUT):
        while a.cluster.routes:
            await trio.sleep(0.01)
    b2 = await start_node(nursery, cluster_port=port)
    await wait_routes([a, b2], 1)  # a's dialler backs off and reconnects
    assert list(a.cluster.routes) == [b2.server_id]


async def test_a_route_info_without_a_server_id_is_cut_off(nursery):
    a, b = await start_cluster(nursery, 2)
    client = await connect(a.port)
    liar = RawClient(await trio.open_tcp_stream("127.0.0.1", a.cluster.port))
    await liar.read_line()
    await liar.send(b'CONNECT {"cluster":"c1"}\r\nINFO {"cluster":"c1"}\r\n')
    with trio.fail_after(STEP_TIMEOUT):
        assert await liar.read_until_eof() == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert await client.ping() == b""
    assert list(a.cluster.routes) == [b.server_id]


async def test_a_route_of_another_cluster_is_refused(nursery):
    a = await start_node(nursery)
    other = await start_node(nursery, cluster_name="c2", routes=[route_url(a)])
    with trio.fail_after(STEP_TIMEOUT):  # until a has accepted and closed one attempt
        while not (a.cluster._next_rid >= 1 and not a.cluster.all_routes):
            await trio.sleep(0.01)
    assert a.cluster.routes == {} and other.cluster.routes == {}


async def test_a_route_to_itself_is_dialled_once(nursery):
    """A node whose routes list its own cluster URL (nats.py's cluster tests give every node
    the same three URLs) finds itself once and stops dialling it, as route.go's routesToSelf:
    it used to dial itself again every 50-300 ms for as long as it ran."""
    port = free_port()
    a = await start_node(nursery, routes=[f"nats://127.0.0.1:{port}"], cluster_port=port)
    await trio.sleep(1.5)
    # One connection dialled to itself and the one it accepted from itself, both closed.
    assert a.cluster._next_rid == 2
    assert not a.cluster.routes
