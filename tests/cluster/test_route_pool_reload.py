"""A configuration reload that changes ``cluster { pool_size, accounts }``, as nats-server 2.15.1
does it (reload.go clusterOption, diffPoolAndAccounts, reloadClusterPoolAndAccounts): a new
pool size closes every pool connection and the pool is made again at the new size; an account
pinned tells the peer over the connection that carried it (an INFO with route_account and
route_acc_add_reqid, answered once the peer dropped its interest there) and gets its dedicated
route; an account unpinned loses its route and goes over the pool again. Reloaded by SIGHUP's
path and by the system account's ``$SYS.REQ.SERVER.<id>.RELOAD``; between natservers and with a
2.15.1 peer (reloaded first or second): /routez shows the new pool and dedicated routes on both
sides, and messages (plain and queue groups, every account, the pinned one too) cross exactly
once both ways."""

from __future__ import annotations

import json
import signal

import pytest
import trio

import natserver
from natserver.cli import CommandLine
from natserver.config.flags import build_options
from natserver.server import signals
from tests import reference
from tests.cluster.helpers import free_port
from tests.cluster.test_route_compression import Peer
from tests.cluster.test_route_pooling import both_ways, until, user_client, wait_counts

needs_reference = pytest.mark.skipif(reference.NATS_SERVER is None, reason="nats-server 2.15.1 not installed")

# Two user accounts and a system account with a user (for the RELOAD request).
ACCOUNTS = ("accounts { A { users [ {user: a, password: a} ] }, B { users [ {user: b, password: b} ] },\n"
            "  SYS { users [ {user: sys, password: sys} ] } }\nsystem_account: SYS\n")
TEST_TIMEOUT = 60  # the whole of one test (each step has STEP_TIMEOUT)


class Ours:
    """natserver from a configuration file it reloads (as ``natserver -c``)."""

    def __init__(self, tmp_path, cluster: str) -> None:
        self.port, self.cluster_port = free_port(), free_port()
        self.path = tmp_path / f"ours-{self.port}.conf"
        self.write(cluster)
        self.server: natserver.Server | None = None

    def write(self, cluster: str) -> None:
        self.path.write_text(f"listen: 127.0.0.1:{self.port}\n"
                             f"cluster {{ name: c1, listen: 127.0.0.1:{self.cluster_port}, {cluster} }}\n" + ACCOUNTS)

    async def start(self, nursery) -> natserver.Server:
        flags = {"config_file": str(self.path)}
        self.server = await nursery.start(natserver.serve, build_options(flags).copy(quiet=True))
        self.server.command_line = CommandLine(flags)
        return self.server


def route_accounts(routez: dict) -> list[str]:
    return sorted(r.get("account", "") for r in routez["routes"])


async def reload_by_request(server: natserver.Server) -> dict:
    """``$SYS.REQ.SERVER.<id>.RELOAD`` from a system account user: its answer."""
    client = await user_client(server.port, b"sys")
    await client.send(b"SUB _R.reload 1\r\nPUB $SYS.REQ.SERVER.%s.RELOAD _R.reload 0\r\n\r\n"
                      % server.server_id.encode())
    head = await client.read_until(b"\r\n")
    assert head.startswith(b"MSG _R.reload 1 "), head
    body = await client.read_exactly(int(head.split()[-1]) + 2)
    await client.aclose()
    return json.loads(body[:-2])


def dedicated(server: natserver.Server, account: bytes) -> list:
    assert server.cluster is not None
    return [r for r in server.cluster.route_conns if r.route_account == account]


async def routed_pair(nursery, tmp_path):
    """Two natservers routed to each other with the default pools, the second dialling: their
    Ours and their servers, once both count the 4 connections (3 pooled and the SYS route)."""
    first = Ours(tmp_path, "")
    await first.start(nursery)
    second = Ours(tmp_path, f'routes: ["nats://127.0.0.1:{first.cluster_port}"]')
    await second.start(nursery)
    one, two = first.server, second.server
    assert one is not None and two is not None and one.cluster is not None and two.cluster is not None
    await wait_counts(one, two, 4)
    return first, second, one, two


async def test_pool_and_pinned_accounts_reloaded_between_natservers(nursery, tmp_path):
    """Default pools (3 and the SYS route) become ``pool_size: 5, accounts: [A]`` (one side by
    SIGHUP's reload, the other by the RELOAD request): 7 connections, A's traffic on its own
    route; then ``pool_size: 2`` without A: 3 connections, A back on the pool."""
    with trio.fail_after(TEST_TIMEOUT):
        first, second, one, two = await routed_pair(nursery, tmp_path)

        first.write("pool_size: 5, accounts: [A]")
        second.write(f'routes: ["nats://127.0.0.1:{first.cluster_port}"], pool_size: 5, accounts: [A]')
        assert "Reloaded: cluster" in signals.reload(one)
        answer = await reload_by_request(two)
        assert "error" not in answer, answer
        await wait_counts(one, two, 7)
        for server in (one, two):
            assert server.cluster is not None
            assert route_accounts(server.cluster.routez()) == [""] * 5 + ["A", "SYS"]
            assert server.cluster.varz()["pool_size"] == 5
        (route_a,) = dedicated(one, b"A")
        await both_ways(one.port, two.port)
        assert route_a.in_msgs and route_a.out_msgs  # A's messages went over its route
        assert all(account == b"A" for account, _, _ in route_a.entries)
        assert not any(account == b"A" for r in one.cluster.route_conns if r is not route_a for account, _, _ in r.entries)

        first.write("pool_size: 2")
        second.write(f'routes: ["nats://127.0.0.1:{first.cluster_port}"], pool_size: 2')
        answer = await reload_by_request(one)
        assert "error" not in answer, answer
        signals.reload(two)
        await wait_counts(one, two, 3)
        for server in (one, two):
            assert server.cluster is not None
            assert route_accounts(server.cluster.routez()) == ["", "", "SYS"]
        await both_ways(one.port, two.port)
        assert not dedicated(one, b"A") and not dedicated(two, b"A")


async def test_only_accounts_change_keeps_the_pool(nursery, tmp_path):
    """Pinning B alone (same pool size): the pool connections stay (the same objects), B's
    interest leaves the one that carried it and B gets its route; unpinning it sends B's
    interest over the pool again."""
    with trio.fail_after(TEST_TIMEOUT):
        first, second, one, two = await routed_pair(nursery, tmp_path)
        pool = [r for r in one.cluster.route_conns if r.route_account is None]

        first.write("accounts: [B]")
        second.write(f'routes: ["nats://127.0.0.1:{first.cluster_port}"], accounts: [B]')
        signals.reload(two)
        signals.reload(one)
        await wait_counts(one, two, 5)
        assert [r for r in one.cluster.route_conns if r.route_account is None] == pool
        await both_ways(one.port, two.port)
        (route_b,) = dedicated(one, b"B")
        assert route_b.in_msgs and route_b.out_msgs

        first.write("")
        second.write(f'routes: ["nats://127.0.0.1:{first.cluster_port}"]')
        signals.reload(one)
        signals.reload(two)
        await wait_counts(one, two, 4)
        assert [r for r in one.cluster.route_conns if r.route_account is None] == pool
        await both_ways(one.port, two.port)


async def test_pinning_an_unknown_account_fails_the_reload(nursery, tmp_path):
    """reload.go: an account to pin must exist; the reload fails with 2.15.1's message and
    changes nothing."""
    with trio.fail_after(TEST_TIMEOUT):
        ours = Ours(tmp_path, "pool_size: 2")
        server = await ours.start(nursery)
        assert server.cluster is not None
        ours.write("pool_size: 4, accounts: [Z]")
        with pytest.raises(signals.ReloadError,
                           match='^unable to add account "Z" to the list of dedicated routes: account missing$'):
            signals.reload(server)
        assert server.cluster.pool_size == 2 and server.options.cluster_pool_size == 2


@needs_reference
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
@pytest.mark.parametrize("first", ["natserver", "nats-server"])
async def test_pool_and_pinned_accounts_reloaded_with_2151(nursery, tmp_path, dialer, first):
    """natserver and a 2.15.1 peer (either dialling, default pools) are both reloaded to
    ``pool_size: 4, accounts: [A]``, either first: 6 connections on both sides (4, SYS, A),
    every account's messages cross once both ways, and the peer logs no error; then both to
    ``pool_size: 2`` without A: 3 connections, messages again."""
    ours = Ours(tmp_path, "")
    routes = ""
    if dialer == "nats-server":  # (natserver listens first: the peer's first dial finds it)
        server = await ours.start(nursery)
        routes = f'routes: ["nats://127.0.0.1:{ours.cluster_port}"], '
    peer_conf = ("listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n"
                 "cluster { name: c1, listen: 127.0.0.1:%(cluster)s, " + routes + "CLUSTER }\n" + ACCOUNTS)
    peer = Peer(tmp_path, peer_conf.replace("CLUSTER", ""))
    try:
        with trio.fail_after(TEST_TIMEOUT):
            if dialer == "natserver":
                routes = f'routes: ["nats://127.0.0.1:{peer.cluster_port}"], '
                ours.write(routes)
                server = await ours.start(nursery)
            assert server.cluster is not None
            await wait_counts(server, peer, 4)

            ports = {"port": peer.port, "http": peer.http_port, "cluster": peer.cluster_port}
            (tmp_path / f"peer-{peer.port}.conf").write_text(
                peer_conf.replace("CLUSTER", "pool_size: 4, accounts: [A]") % ports)
            ours.write((routes if dialer == "natserver" else "") + "pool_size: 4, accounts: [A]")
            if first == "natserver":
                signals.reload(server)
                peer.proc.send_signal(signal.SIGHUP)
            else:
                peer.proc.send_signal(signal.SIGHUP)

                async def peer_reloaded() -> bool:  # (its /varz keeps the pool size it started with)
                    return "Reloaded server configuration" in peer.log.read_text()
                await until(peer_reloaded, "the peer's reload")
                signals.reload(server)
            await wait_counts(server, peer, 6)

            async def settled() -> bool:
                return (route_accounts(await peer.get("/routez")) == ["", "", "", "", "A", "SYS"]
                        and route_accounts(server.cluster.routez()) == ["", "", "", "", "A", "SYS"])
            await until(settled, "the new pool and A's route on both sides")
            await both_ways(server.port, peer.port)
            (route_a,) = dedicated(server, b"A")
            assert route_a.in_msgs and route_a.out_msgs
            errors = [line for line in peer.log.read_text().splitlines() if "[ERR]" in line]
            assert not errors, errors
            assert "Reloaded: cluster" in peer.log.read_text()

            # Back to a pool of 2 without A, in the same order: 3 connections (2, SYS).
            (tmp_path / f"peer-{peer.port}.conf").write_text(peer_conf.replace("CLUSTER", "pool_size: 2") % ports)
            ours.write((routes if dialer == "natserver" else "") + "pool_size: 2")
            reloads = peer.log.read_text().count("Reloaded server configuration")
            if first == "natserver":
                signals.reload(server)
                peer.proc.send_signal(signal.SIGHUP)
            else:
                peer.proc.send_signal(signal.SIGHUP)

                async def peer_reloaded_again() -> bool:
                    return peer.log.read_text().count("Reloaded server configuration") > reloads
                await until(peer_reloaded_again, "the peer's second reload")
                signals.reload(server)

            async def back() -> bool:
                return (route_accounts(await peer.get("/routez")) == ["", "", "SYS"]
                        and route_accounts(server.cluster.routez()) == ["", "", "SYS"])
            await until(back, "a pool of 2 and no route for A on both sides")
            await both_ways(server.port, peer.port)
            # (while only one side has unpinned A, the other's dial of A's route is refused;
            # and a dialling 2.15.1 that shrinks its pool while it redials may offer an index
            # of the old pool, refused: both happen between two 2.15.1 servers reloaded alike)
            errors = [line for line in peer.log.read_text().splitlines() if "[ERR]" in line
                      and "No route for account" not in line and "Invalid route pool index" not in line]
            assert not errors, errors
    finally:
        peer.stop()
