"""Route pooling and per-account routes (nats-server 2.10+ ``cluster { pool_size, accounts }``,
route.go): between servers that both pool, max(pool sizes) connections each carrying the
accounts computeRoutePoolIdx gives them, plus a dedicated route per pinned account (the system
account always among them); a peer without pooling (nats-server 2.9.10, ``pool_size: -1``) has
one route for everything. natserver against nats-server 2.15.1 both ways, against itself, and
against 2.9.10: the connections each side counts, and messages and queue groups in several
accounts crossing exactly once in both directions."""

from __future__ import annotations

import dataclasses

import pytest
import trio

import natserver
from natserver.cluster.routes import route_pool_index
from natserver.config.mapping import options_from_file, unsupported_warnings
from tests import reference
from tests.cluster.helpers import (
    STEP_TIMEOUT,
    NatsServerProcess,
    connect,
    free_port,
    read_msgs,
    route_url,
    start_node,
    wait_interest,
)
from tests.cluster.test_route_compression import Peer
from tests.conftest import RawClient

needs_reference = pytest.mark.skipif(reference.NATS_SERVER is None, reason="nats-server 2.15.1 not installed")

ACCOUNTS = "accounts { A { users [ {user: a, password: a} ] }, B { users [ {user: b, password: b} ] } }\n"
POLL = 0.02  # seconds between looks at another process's state (not a timing assertion)


@pytest.fixture
def peers(tmp_path):
    started: list[Peer] = []

    def start(cluster: str) -> Peer:
        peer = Peer(tmp_path, "listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n"
                              "cluster { name: c1, listen: 127.0.0.1:%(cluster)s, " + cluster + " }\n" + ACCOUNTS)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


async def start_ours(nursery, tmp_path, cluster: str = "") -> natserver.Server:
    """natserver from a configuration file like the peers' (the system account on)."""
    path = tmp_path / f"ours-{free_port()}.conf"
    path.write_text(f"listen: 127.0.0.1:{free_port()}\n"
                    f"cluster {{ name: c1, listen: 127.0.0.1:{free_port()}, {cluster} }}\n" + ACCOUNTS)
    options = dataclasses.replace(options_from_file(str(path)), quiet=True)
    return await nursery.start(natserver.serve, options)


async def until(predicate, what: str) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while not await predicate():
            await trio.sleep(POLL)


async def user_client(port: int, user: bytes) -> RawClient:
    client = RawClient(await trio.open_tcp_stream("127.0.0.1", port))
    await client.read_info()
    await client.send(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"user":"%s","pass":"%s"}\r\n'
                      % (user, user))
    await client.ping()
    await client.ping()  # (the connect_info INFO)
    return client


async def one_way(src: RawClient, dst: RawClient, tag: bytes) -> None:
    """``dst`` subscribes to t.<tag> and joins queue group q on w.<tag>; once its interest is
    across (a probe arrived), ``src`` publishes one plain and five queue messages: each
    arrives exactly once."""
    await dst.send(b"SUB w.%s q 2\r\nSUB t.%s 1\r\n" % (tag, tag))
    await dst.ping()
    got = b""
    with trio.fail_after(STEP_TIMEOUT):
        while b"MSG t.%s 1 5\r\nprobe" % tag not in got:
            await src.send(b"PUB t.%s 5\r\nprobe\r\n" % tag)
            got += await dst.nothing_within(0.05)
    await src.send(b"PUB t.%s 4\r\nreal\r\n" % tag + b"".join(b"PUB w.%s 2\r\nq%d\r\n" % (tag, i) for i in range(5)))
    await src.ping()
    msgs = [m for m in await read_msgs(dst, 6) if not m.endswith(b"probe\r\n")]
    while len(msgs) < 6:
        msgs += [m for m in await read_msgs(dst, 1) if not m.endswith(b"probe\r\n")]
    assert sorted(msgs) == sorted([b"MSG t.%s 1 4\r\nreal\r\n" % tag]
                                  + [b"MSG w.%s 2 2\r\nq%d\r\n" % (tag, i) for i in range(5)]), msgs
    rest = await dst.nothing_within(0.1)  # nothing twice (over another pool connection)
    assert b"real" not in rest and b"MSG w." not in rest, rest
    await dst.send(b"UNSUB 1\r\nUNSUB 2\r\n")


async def both_ways(port_a: int, port_b: int, users=(b"a", b"b")) -> None:
    """Messages and queue groups in every account, from a to b and from b to a."""
    for user in users:
        x, y = await user_client(port_a, user), await user_client(port_b, user)
        await one_way(x, y, user + b"1")
        await one_way(y, x, user + b"2")
        await x.aclose()
        await y.aclose()


def ours_routes(ours: natserver.Server) -> dict:
    return ours.cluster.routez()


async def wait_counts(ours: natserver.Server, peer, count: int) -> None:
    """Until natserver and the peer (a Peer, another natserver, or None) each count ``count``
    route connections."""
    async def ready() -> bool:
        if len(ours.cluster.route_conns) != count:
            return False
        if isinstance(peer, natserver.Server):
            return len(peer.cluster.route_conns) == count
        if peer is not None:
            return (await peer.get("/routez"))["num_routes"] == count
        return True
    await until(ready, f"{count} route connections")


# -- the pool index ------------------------------------------------------------------------------


def test_pool_index_is_fnv1a_modulo_the_pool_size():
    """route.go computeRoutePoolIdx: fnv.New32a of the name, modulo the size (0 for a size of 0
    or 1). FNV-1a 32 of "a" is 0xe40c292c; of "" the offset basis 0x811c9dc5."""
    assert route_pool_index(0xFFFFFFFF, b"a") == 0xE40C292C
    assert route_pool_index(0xFFFFFFFF, b"") == 0x811C9DC5
    assert route_pool_index(3, b"a") == 0xE40C292C % 3
    assert route_pool_index(1, b"A") == route_pool_index(0, b"B") == 0
    assert {route_pool_index(3, name) for name in (b"A", b"B", b"$G", b"$SYS", b"C", b"D")} == {0, 1, 2}


# -- natserver and nats-server 2.15.1 ------------------------------------------------------------


async def start_pair(nursery, tmp_path, peers, dialer: str, ours_cluster: str, peer_cluster: str):
    if dialer == "natserver":
        peer = peers(peer_cluster)
        await until(lambda: _listening(peer.cluster_port), "the peer")
        ours = await start_ours(nursery, tmp_path, f"routes: [\"nats://127.0.0.1:{peer.cluster_port}\"], "
                                                   + ours_cluster)
    else:
        ours = await start_ours(nursery, tmp_path, ours_cluster)
        peer = peers(f'routes: ["{route_url(ours)}"], ' + peer_cluster)
    return ours, peer


async def _listening(port: int) -> bool:
    try:
        await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
    except OSError:
        return False
    return True


@needs_reference
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
@pytest.mark.parametrize("ours_size, peer_size", [(None, None), (5, 2), (2, 4)])
async def test_pools_with_2151(nursery, tmp_path, peers, dialer, ours_size, peer_size):
    """Default pools (3 each, and the $SYS route: 4 connections), or sizes that differ
    (max of both, plus $SYS); every account works both ways; the peer's /routez shows the
    dedicated $SYS route with its account, as natserver's does."""
    ours_cluster = "" if ours_size is None else f"pool_size: {ours_size}"
    peer_cluster = "" if peer_size is None else f"pool_size: {peer_size}"
    ours, peer = await start_pair(nursery, tmp_path, peers, dialer, ours_cluster, peer_cluster)
    count = max(ours_size or 3, peer_size or 3) + 1
    await wait_counts(ours, peer, count)
    routez = await peer.get("/routez")
    assert sorted(r.get("account", "") for r in routez["routes"]) == [""] * (count - 1) + ["$SYS"]
    ours_z = ours_routes(ours)
    assert sorted(r.get("account", "") for r in ours_z["routes"]) == [""] * (count - 1) + ["$SYS"]
    assert {r["remote_id"] for r in ours_z["routes"]} == {routez["server_id"]}
    await both_ways(ours.port, peer.port)
    errors = [line for line in peer.log.read_text().splitlines() if "[ERR]" in line]
    assert not errors, errors
    assert ours.cluster.varz()["pool_size"] == (await peer.get("/varz"))["cluster"]["pool_size"] + (
        (ours_size or 3) - (peer_size or 3))


@needs_reference
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_pinned_accounts_with_2151(nursery, tmp_path, peers, dialer):
    """``accounts: [A]`` on both sides: A has its own route (lines without the account name),
    B and the others go over the pool."""
    ours, peer = await start_pair(nursery, tmp_path, peers, dialer, "accounts: [A]", "accounts: [A]")
    await wait_counts(ours, peer, 5)
    routez = await peer.get("/routez")
    assert sorted(r.get("account", "") for r in routez["routes"]) == ["", "", "", "$SYS", "A"]
    (dedicated,) = [r for r in ours.cluster.route_conns if r.route_account == b"A"]
    await both_ways(ours.port, peer.port)
    assert dedicated.in_msgs and dedicated.out_msgs  # A's messages went over its route
    assert all(account == b"A" for account, _, _ in dedicated.entries)


@needs_reference
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_no_pooling_against_a_pinning_2151(nursery, tmp_path, peers, dialer):
    """natserver with ``pool_size: -1`` is an old server to the peer: one route, which carries
    the peer's pinned account too (the peer refuses its dedicated route: "Not possible to have
    a dedicated route for account")."""
    ours, peer = await start_pair(nursery, tmp_path, peers, dialer, "pool_size: -1", "accounts: [A]")
    await wait_counts(ours, peer, 1)
    assert "route_pool_size" not in ours.cluster.route_info().decode()
    await both_ways(ours.port, peer.port)
    assert (await peer.get("/routez"))["num_routes"] == 1
    assert len(ours.cluster.route_conns) == 1


@needs_reference
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_dropped_pool_connection_comes_back_with_2151(nursery, tmp_path, peers, dialer):
    """The connection carrying account A's traffic is cut: the dialling side dials it again,
    the pool is full again and A's messages cross again."""
    ours, peer = await start_pair(nursery, tmp_path, peers, dialer, "", "")
    await wait_counts(ours, peer, 4)
    await both_ways(ours.port, peer.port, users=(b"a",))
    index = ours.cluster.pool_index(b"A")
    (victim,) = [r for r in ours.cluster.route_conns if r.pool_idx == index and r.route_account is None]
    victim.close("Client Closed")
    await until(lambda: _replaced(ours, victim, index), "the connection back")
    await wait_counts(ours, peer, 4)
    await both_ways(ours.port, peer.port)


async def _replaced(ours: natserver.Server, victim, index: int) -> bool:
    return any(r.pool_idx == index and r is not victim and r.route_account is None for r in ours.cluster.route_conns)


# -- natserver and natserver ---------------------------------------------------------------------


@pytest.mark.parametrize("sizes, pinned, count", [
    (("", ""), ("", ""), 4),
    (("pool_size: 2", "pool_size: 5"), ("", ""), 6),
    (("", ""), ("accounts: [A, B]", "accounts: [A, B]"), 6),
    (("pool_size: -1", ""), ("", "accounts: [A]"), 1),
])  # fmt: skip
async def test_pools_between_natservers(nursery, tmp_path, sizes, pinned, count):
    first = await start_ours(nursery, tmp_path, ", ".join(x for x in (sizes[0], pinned[0]) if x))
    second = await start_ours(nursery, tmp_path, ", ".join(
        x for x in (sizes[1], pinned[1], f'routes: ["{route_url(first)}"]') if x))
    await wait_counts(first, second, count)
    await both_ways(first.port, second.port)
    # Each account's interest goes over exactly one connection of the pool.
    keep = [await user_client(server.port, user) for server in (first, second) for user in (b"a", b"b")]
    for client in keep:
        await client.send(b"SUB keep 1\r\n")
        await client.ping()

    async def spread() -> bool:
        return all(sum(any(key[0] == account for key in r.entries) for r in server.cluster.route_conns) == 1
                   for server in (first, second) for account in (b"A", b"B"))
    await until(spread, "interest on one connection per account")


async def test_dropped_pool_connection_between_natservers(nursery, tmp_path):
    first = await start_ours(nursery, tmp_path)
    second = await start_ours(nursery, tmp_path, f'routes: ["{route_url(first)}"]')
    await wait_counts(first, second, 4)
    index = second.cluster.pool_index(b"B")
    (victim,) = [r for r in second.cluster.route_conns if r.pool_idx == index and r.route_account is None]
    victim.close("Client Closed")
    await until(lambda: _replaced(second, victim, index), "the connection back")
    await wait_counts(first, second, 4)
    await both_ways(first.port, second.port)


# -- natserver and nats-server 2.9.10 ------------------------------------------------------------


@reference.needs_nats_server_2_9
async def test_one_route_with_2910(nursery):
    """2.9.10 sends no route_pool_size: one route each way, carrying every account, and no
    dedicated route (natserver's system account is pinned, yet not possible with this peer).
    The distribution's 2.9.10 itself, whatever NATS_SERVER_BIN names for the other tests."""
    ours = await start_node(nursery, no_system_account=False)
    peer = NatsServerProcess(routes=[route_url(ours)], binary=reference.NATS_SERVER_2_9)
    try:
        await peer.wait_ready()
        await peer.wait_routes(1)
        await until(lambda: _count_is(ours, 1), "one route")
        (route,) = ours.cluster.route_conns
        assert route.no_pool
        x = await connect(ours.port)
        y = await connect(peer.port)
        await y.send(b"SUB p 1\r\n")
        await y.ping()
        await wait_interest(ours, b"p")
        await x.send(b"PUB p 2\r\nhi\r\n")
        assert await read_msgs(y, 1) == [b"MSG p 1 2\r\nhi\r\n"]
        assert (await peer.routez())["num_routes"] == 1
        assert len(ours.cluster.route_conns) == 1
    finally:
        peer.stop()


async def _count_is(ours: natserver.Server, count: int) -> bool:
    return len(ours.cluster.route_conns) == count


# -- configuration -------------------------------------------------------------------------------


def test_pool_size_and_accounts_are_options(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text("cluster { port: 6222, pool_size: 5, accounts: [A] }\n" + ACCOUNTS)
    options = options_from_file(str(path))
    assert options.cluster_pool_size == 5 and options.cluster_accounts == ["A"]
    assert not [w for w in unsupported_warnings(options) if "pool_size" in w or "accounts" in w]


@needs_reference
async def test_an_account_pinned_on_one_side_only_is_refused_as_2151_does(nursery, tmp_path, peers):
    """The peer pins A, natserver does not: its dedicated route for A gets nats-server's
    -ERR 'No route for account "A"' (2.15.1 pairs do the same, and the peer keeps trying);
    the pool and the other accounts work."""
    ours, peer = await start_pair(nursery, tmp_path, peers, "nats-server", "", "accounts: [A]")
    await wait_counts(ours, peer, 4)

    async def refused() -> bool:
        return "Route Error 'No route for account \"A\"'" in peer.log.read_text()
    await until(refused, "the peer told")
    assert not [r for r in ours.cluster.route_conns if r.route_account == b"A"]
    await both_ways(ours.port, peer.port, users=(b"b",))


@needs_reference
async def test_gossip_through_2151_forms_pools_between_natservers(nursery, tmp_path, peers):
    """Two natservers that know only a 2.15.1 seed learn of each other from its INFO gossip
    and form a pool and a $SYS route between themselves too: a full mesh of 4 connections per
    pair; account A crosses between the natservers directly."""
    peer = peers("")
    await until(lambda: _listening(peer.cluster_port), "the peer")
    seed = f'routes: ["nats://127.0.0.1:{peer.cluster_port}"]'
    first = await start_ours(nursery, tmp_path, seed)
    second = await start_ours(nursery, tmp_path, seed)

    async def meshed() -> bool:
        return (all(len(s.cluster.routes) == 2 and len(s.cluster.route_conns) == 8 for s in (first, second))
                and (await peer.get("/routez"))["num_routes"] == 8)
    await until(meshed, "a full mesh of pools")
    assert first.cluster.route_for(second.server_id, b"$SYS").route_account == b"$SYS"
    await both_ways(first.port, second.port, users=(b"a",))
    errors = [line for line in peer.log.read_text().splitlines() if "[ERR]" in line]
    assert not errors, errors


async def test_natservers_dialling_each_other_keep_one_pool(nursery, tmp_path):
    """Both sides configured with a route to the other: the connections each dials and the
    ones it accepts settle into one pool and one $SYS route (duplicates closed, the kept
    connection redialled if the other side closed it), and messages cross once."""
    ports = [free_port(), free_port()]
    servers = []
    for mine, other in ((ports[0], ports[1]), (ports[1], ports[0])):
        path = tmp_path / f"both-{mine}.conf"
        path.write_text(f"listen: 127.0.0.1:{free_port()}\n"
                        f'cluster {{ name: c1, listen: 127.0.0.1:{mine}, routes: ["nats://127.0.0.1:{other}"] }}\n'
                        + ACCOUNTS)
        servers.append(await nursery.start(natserver.serve, dataclasses.replace(options_from_file(str(path)),
                                                                                quiet=True)))
    first, second = servers
    await wait_counts(first, second, 4)
    await both_ways(first.port, second.port)
    assert len(first.cluster.route_conns) == len(second.cluster.route_conns) == 4
