"""The values behind the fields nats-server 2.15.1 added to the system account's answers (issue
#27 item 7; test_system.py checks their shape): $SYS.REQ.USER.INFO and IDZ, statsz's
from-clients/to-clients counters, an account's statz with its name and per-kind counts, the
server block's feature_flags and flags. Each runs against natserver and against the reference
nats-server (skipped when its binary is missing) and must give the same numbers; the per-kind
route counts are checked on a two-node natserver cluster."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from natserver.server.monitor import FEATURE_FLAGS
from tests.auth.test_auth_helpers import running
from tests.cluster.helpers import connect, read_msgs, route_url, start_node, wait_interest, wait_routes
from tests.reference import NATS_SERVER

TIMEOUT = 30
CONFIG = """
server_name: srv1
accounts {
  SYS { users [
    {user: sys, password: sys, permissions: {publish: {allow: ["$SYS.>", "_INBOX.>"], deny: ["$SYS.REQ.ACCOUNT.>"]},
                                             subscribe: {allow: ["_INBOX.>"], deny: ["_INBOX.none"]}}}
    {user: plain, password: plain}
  ] }
  A { users [{user: a, password: a}] }
}
system_account: SYS
"""


@pytest.fixture(params=["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def server(request, tmp_path):
    """(kind, port) of a server running CONFIG."""
    if request.param == "nats-server" and NATS_SERVER is None:
        pytest.skip("nats-server 2.15.1 is not installed")
    with running(request.param, CONFIG, tmp_path, binary=NATS_SERVER or "") as port:
        yield request.param, port


async def _request(nc, subject: str, body: bytes = b"") -> dict:
    return json.loads((await nc.request(subject, body, timeout=5)).data)


def _run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_user_info_names_the_requester_and_its_permissions(server):
    kind, port = server

    async def main():
        restricted = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
        plain = await nats.connect(f"nats://plain:plain@127.0.0.1:{port}")
        try:
            answer = await _request(restricted, "$SYS.REQ.USER.INFO")
            assert answer["data"] == {
                "user": "sys", "account": "SYS", "account_name": "SYS",
                "permissions": {"publish": {"allow": ["$SYS.>", "_INBOX.>"], "deny": ["$SYS.REQ.ACCOUNT.>"]},
                                "subscribe": {"allow": ["_INBOX.>"], "deny": ["_INBOX.none"]}},
            }
            assert list(answer) == ["server", "data"]
            answer = await _request(plain, "$SYS.REQ.USER.INFO")
            assert answer["data"] == {"user": "plain", "account": "SYS", "account_name": "SYS"}
        finally:
            await restricted.close()
            await plain.close()

    _run(main)


def test_idz_is_the_servers_name_host_and_id(server):
    kind, port = server

    async def main():
        nc = await nats.connect(f"nats://plain:plain@127.0.0.1:{port}")
        try:
            idz = await _request(nc, "$SYS.REQ.SERVER.PING.IDZ")
            assert list(idz) == ["name", "host", "id"]
            assert (idz["name"], idz["host"]) == ("srv1", "127.0.0.1") and idz["id"] == nc._server_info["server_id"]
            assert await _request(nc, f"$SYS.REQ.SERVER.{idz['id']}.IDZ") == idz
        finally:
            await nc.close()

    _run(main)


def test_statsz_counts_client_traffic_and_account_statz_per_kind(server):
    kind, port = server

    async def main():
        account = await nats.connect(f"nats://a:a@127.0.0.1:{port}")
        system = await nats.connect(f"nats://plain:plain@127.0.0.1:{port}")
        try:
            sub = await account.subscribe("data")
            await account.flush()
            for _ in range(3):
                await account.publish("data", b"12345")
            for _ in range(3):
                await sub.next_msg(timeout=5)
            ping = await _request(system, "$SYS.REQ.SERVER.PING")
            block, statsz = ping["server"], ping["statsz"]
            assert block["feature_flags"].keys() == FEATURE_FLAGS.keys()
            if kind == "natserver":
                assert block["feature_flags"] == FEATURE_FLAGS
            assert (block["jetstream"], block["flags"]) == (False, 0)
            # Three 5-byte publishes and the request (no payload) came from clients; the three
            # messages went to one. The request's delivery to the server itself is no client's.
            assert statsz["received_from_clients"] == statsz["received"] == {"msgs": 4, "bytes": 15}
            assert statsz["sent_to_clients"] == {"msgs": 3, "bytes": 15}
            assert statsz["gomaxprocs"] >= 1 and statsz["connections"] == 2
            for key in ("slow_consumer_stats", "stale_connections", "stalled_clients"):
                assert key not in statsz, key  # (only when not zero)

            statz = (await _request(system, "$SYS.REQ.ACCOUNT.PING.STATZ"))["data"]["account_statz"]
            (stat,) = [s for s in statz if s["acc"] == "A"]
            none = {"msgs": 0, "bytes": 0}
            assert stat["name"] == "A" and (stat["conns"], stat["total_conns"], stat["leafnodes"]) == (1, 1, 0)
            assert stat["received"] == {"msgs": 3, "bytes": 15, "gateways": none, "routes": none, "leafs": none}
            assert stat["sent"] == {"msgs": 3, "bytes": 15, "gateways": none, "routes": none, "leafs": none}
            if kind == "natserver":  # (nats-server counts its internal service imports' too)
                assert stat["num_subscriptions"] == 1

            health = (await _request(system, "$SYS.REQ.SERVER.PING.HEALTHZ"))["data"]
            assert health == {"status": "ok", "status_code": 200}
        finally:
            await account.close()
            await system.close()

    _run(main)


async def test_account_statz_counts_route_traffic_per_kind(nursery):
    """accounts.go stats.rt: what an account sent to and received from routes."""
    a = await start_node(nursery, no_system_account=False)
    b = await start_node(nursery, routes=[route_url(a)], no_system_account=False)
    await wait_routes([a, b], 1)
    subscriber, publisher = await connect(a.port), await connect(b.port)
    await subscriber.send(b"SUB x 1\r\n")
    await subscriber.ping()
    await wait_interest(b, b"x")
    await publisher.send(b"PUB x 3\r\nabc\r\nPUB x 4\r\nabcd\r\n")
    await publisher.ping()
    assert len(await read_msgs(subscriber, 2)) == 2
    sent = b.system.account_stat(b.accounts.global_account)["sent"]
    received = a.system.account_stat(a.accounts.global_account)["received"]
    assert sent["routes"] == received["routes"] == {"msgs": 2, "bytes": 7}
    assert sent["leafs"] == received["leafs"] == sent["gateways"] == {"msgs": 0, "bytes": 0}
    await subscriber.aclose()
    await publisher.aclose()
