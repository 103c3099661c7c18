"""The values behind the fields nats-server 2.15.1 added to the system account's answers (issue
#27 item 7; test_system.py checks their shape): $SYS.REQ.USER.INFO and IDZ, statsz's
from-clients/to-clients counters, an account's statz with its name and per-kind counts, the
server block's feature_flags and flags. Each runs against natserver and against the reference
nats-server (skipped when its binary is missing) and must give the same numbers; the per-kind
route counts are checked on a two-node natserver cluster."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import urllib.error
import urllib.request

import nats
import pytest

import natserver
from natserver.auth import nkeys
from natserver.auth.jwt import OperatorTree, creds
from natserver.server.monitor import FEATURE_FLAGS
from tests.auth.test_auth_helpers import running
from tests.cluster.helpers import connect, read_msgs, route_url, start_node, wait_interest, wait_routes
from tests.conftest import make_options
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
            for lists in answer["data"]["permissions"].values():  # (nats-server lists a sublist's
                for name in lists:                                 # subjects in no fixed order)
                    lists[name] = sorted(lists[name])
            assert answer["data"] == {
                "user": "sys", "account": "SYS", "account_name": "SYS",
                "permissions": {"publish": {"allow": ["$SYS.>", "_INBOX.>"], "deny": ["$SYS.REQ.ACCOUNT.>"]},  # sorted
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
            # (nats-server's send queue races its read loop's count of the request: 3 or 4.)
            received = statsz["received_from_clients"]
            assert received == statsz["received"] and received["bytes"] == 15
            assert received["msgs"] == 4 if kind == "natserver" else received["msgs"] in (3, 4)
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
            health = (await _request(system, "$SYS.REQ.SERVER.PING.HEALTHZ", b'{"stream": "S"}'))["data"]
            assert health == {"status": "error", "status_code": 400,
                              "error": '"account" must not be empty when checking stream health'}
            health = (await _request(system, "$SYS.REQ.SERVER.PING.HEALTHZ", b'{"consumer": "C", "details": true}'))
            assert health["data"] == {"status": "error", "status_code": 400, "errors": [
                {"type": "BAD_REQUEST", "error": '"stream" must not be empty when checking consumer health'}]}
        finally:
            await account.close()
            await system.close()

    _run(main)


async def test_account_statz_counts_route_traffic_per_kind(nursery):
    """accounts.go stats.rt: what an account sent to and received from routes; the statsz's
    per-route counts."""
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
    assert (sent["msgs"], sent["bytes"], received["msgs"], received["bytes"]) == (2, 7, 2, 7)  # part of the totals
    # /varz: what the route brought in and took out is in in_msgs/out_msgs, not in the clients' counts
    publishing, subscribing = b.system.monitor.varz(), a.system.monitor.varz()
    assert (publishing["in_msgs"], publishing["in_client_msgs"], publishing["out_msgs"], publishing["out_client_msgs"]) == (
        2, 2, 2, 0)
    assert (subscribing["in_msgs"], subscribing["in_client_msgs"], subscribing["out_msgs"],
            subscribing["out_client_msgs"], subscribing["out_bytes"]) == (2, 0, 2, 2, 7)
    assert sent["leafs"] == received["leafs"] == sent["gateways"] == {"msgs": 0, "bytes": 0}
    # events.go RouteStat: each route connection of the server in its statsz (with pooling,
    # 2.10+: the pool's and the system account's own); the account's traffic went over one.
    routes = b.system.statsz()["routes"]
    assert len(routes) == len(b.cluster.route_conns) > 1
    for route in routes:
        assert list(route) == ["rid", "name", "sent", "received", "pending"] and route["name"] == a.server_name
        assert route["pending"] >= 0
    assert [route["sent"] for route in routes if route["sent"]["msgs"]] == [{"msgs": 2, "bytes": 7}]
    received = [route["received"] for route in a.system.statsz()["routes"] if route["received"]["msgs"]]
    assert received == [{"msgs": 2, "bytes": 7}]
    await subscriber.aclose()
    await publisher.aclose()


def test_account_statz_for_one_account_or_the_unused_ones(server):
    kind, port = server

    async def main():
        account = await nats.connect(f"nats://a:a@127.0.0.1:{port}")
        system = await nats.connect(f"nats://plain:plain@127.0.0.1:{port}")
        try:
            one = (await _request(system, "$SYS.REQ.ACCOUNT.A.STATZ"))["data"]["account_statz"]
            assert [stat["acc"] for stat in one] == ["A"]
            chosen = await _request(system, "$SYS.REQ.ACCOUNT.PING.STATZ", b'{"accounts": ["A", "NOPE"]}')
            assert [stat["acc"] for stat in chosen["data"]["account_statz"]] == ["A"]
            every = await _request(system, "$SYS.REQ.ACCOUNT.PING.STATZ", b'{"include_unused": true}')
            assert sorted(stat["acc"] for stat in every["data"]["account_statz"]) == ["$G", "A", "SYS"]
            await account.close()
            await asyncio.sleep(0.2)  # (the server sees the close)
            with pytest.raises(nats.errors.TimeoutError):  # no account of those in use: no answer
                await system.request("$SYS.REQ.ACCOUNT.A.STATZ", b"", timeout=0.5)
        finally:
            await system.close()

    _run(main)


def test_monitoring_accstatz_and_leaf_objects(tmp_path):
    """/accstatz lists the accounts in use (every one with unused=1), /varz's leaf object
    describes the leafnode listener, and its cluster object stays empty without a cluster,
    /accountz marks the system account: the same from natserver and from nats-server."""
    config = CONFIG + "leafnodes { host: 127.0.0.1, port: -1 }\n"
    kinds = ["natserver", *(["nats-server"] if NATS_SERVER is not None else [])]
    seen = {}
    for kind in kinds:
        http = _free_port()
        with running(kind, config, tmp_path, args=("-m", str(http)), binary=NATS_SERVER or "") as port:

            async def main():
                account = await nats.connect(f"nats://a:a@127.0.0.1:{port}")
                try:
                    return (await _http_json(http, "/accstatz"), await _http_json(http, "/accstatz?unused=1"),
                            await _http_json(http, "/varz"), await _http_json(http, "/accountz?acc=SYS"),
                            await _http_json(http, "/accountz?acc=A"), await _http_json(http, "/connz?auth=1"))
                finally:
                    await account.close()

            used, every, varz, system, other, connz = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
        (connection,) = connz["connections"]
        assert list(connection)[-3:] == ["authorized_user", "account", "name_tag"] and connection["name_tag"] == "A"
        assert system["account_detail"]["is_system"] is True and "is_system" not in other["account_detail"]
        assert list(system["account_detail"])[:3] == ["account_name", "update_time", "is_system"]
        assert [stat["acc"] for stat in used["account_statz"]] == ["A"]
        assert sorted(stat["acc"] for stat in every["account_statz"]) == ["$G", "A", "SYS"]
        assert list(used["account_statz"][0]) == ["acc", "name", "conns", "leafnodes", "total_conns",
                                                  "num_subscriptions", "sent", "received", "slow_consumers"]
        assert varz["cluster"] == {} and varz["leaf"].pop("port") > 0
        seen[kind] = varz["leaf"]
    assert seen["natserver"] == {"host": "127.0.0.1", "auth_timeout": 2, "tls_timeout": 2}
    assert seen.get("nats-server", seen["natserver"]) == seen["natserver"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _http_json(port: int, path: str) -> dict:
    """GET a monitoring endpoint (its port may open a moment after the client port)."""
    def get():
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                    return json.loads(answer.read())
            except urllib.error.URLError as exc:
                if not isinstance(exc.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    return await asyncio.get_running_loop().run_in_executor(None, get)


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_account_name_tags_in_operator_mode(kind, tmp_path, monkeypatch):
    """Accounts named by their public keys show the name their JWT gives them as name_tag,
    account_name (USER.INFO) and an account statz's name (accounts.go getNameTag)."""
    if kind == "nats-server" and NATS_SERVER is None:
        pytest.skip("nats-server 2.15.1 is not installed")
    monkeypatch.setitem(sys.modules, "nkeys", nkeys)  # nats-py signs with the nkeys package's API
    tree = OperatorTree()
    tree.operator_fields["system_account"] = tree.account("SYS").public_key.decode()
    tree.account("A")
    sys_key, a_key = (tree.accounts[name][0].public_key.decode() for name in ("SYS", "A"))
    config = "\n".join([f'operator: "{tree.operator_jwt}"', "resolver: MEMORY", "resolver_preload: {",
                        f"  {sys_key}: {tree.account_jwt('SYS')}", f"  {a_key}: {tree.account_jwt('A')}", "}", ""])
    paths = {}
    for account in ("SYS", "A"):
        token, key = tree.user(account, account.lower())
        paths[account] = tmp_path / f"{account}.creds"
        paths[account].write_text(creds(token, key.seed))
    with running(kind, config, tmp_path, binary=NATS_SERVER or "") as port:

        async def main():
            system = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=str(paths["SYS"]))
            try:
                connects = await system.subscribe(f"$SYS.ACCOUNT.{a_key}.CONNECT")
                await system.flush()
                member = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=str(paths["A"]))
                try:
                    client = json.loads((await connects.next_msg(timeout=5)).data)["client"]
                    assert (client["acc"], client["name_tag"]) == (a_key, "A")
                    info = (await _request(system, "$SYS.REQ.USER.INFO"))["data"]
                    assert (info["account"], info["account_name"]) == (sys_key, "SYS")
                    statz = (await _request(system, "$SYS.REQ.ACCOUNT.PING.STATZ"))["data"]["account_statz"]
                    assert sorted((stat["acc"], stat["name"]) for stat in statz) == sorted([(sys_key, "SYS"), (a_key, "A")])
                finally:
                    await member.close()
            finally:
                await system.close()

        _run(main)


async def test_server_block_flags_with_jetstream(nursery, tmp_path):
    """events.go ServerInfo: JetStreamEnabled is the capability natserver has (nats-server 2.15.1
    also sets BinaryStreamSnapshot and AccountNRG, clustered JetStream's, for 7)."""
    server = await nursery.start(natserver.serve, make_options(jetstream=True, store_dir=str(tmp_path),
                                                               no_system_account=False))
    block = server.system.server_info()
    assert (block["jetstream"], block["flags"], block["feature_flags"]) == (True, 1, FEATURE_FLAGS)
    assert list(block) == ["name", "host", "id", "ver", "feature_flags", "jetstream", "flags", "seq", "time"]
    statsz = server.system.statsz()
    assert list(statsz["jetstream"]) == ["config", "stats"] and statsz["jetstream"]["stats"]["api"]["level"] >= 0


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_jsz_account_detail_names_the_jwt_account(kind, tmp_path, monkeypatch):
    """monitor.go accountDetail: name is the account JWT's name, id the account (its key)."""
    if kind == "nats-server" and NATS_SERVER is None:
        pytest.skip("nats-server 2.15.1 is not installed")
    monkeypatch.setitem(sys.modules, "nkeys", nkeys)  # nats-py signs with the nkeys package's API
    tree = OperatorTree()
    unlimited = {"subs": -1, "conn": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "data": -1,
                 "leaf": -1}
    key = tree.account("J", limits={**unlimited, "mem_storage": 1 << 20, "disk_storage": 1 << 20, "streams": -1,
                                    "consumer": -1}).public_key.decode()
    system = tree.account("SYS").public_key.decode()
    token, seed = tree.user("J")
    path = tmp_path / "j.creds"
    path.write_text(creds(token, seed.seed))
    config = tree.config() + f'system_account: {system}\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
    http = _free_port()
    with running(kind, config, tmp_path, args=("-m", str(http)), binary=NATS_SERVER or "") as port:

        async def main():
            nc = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=str(path))
            try:
                await nc.jetstream().add_stream(name="S", subjects=["s"], storage="memory", max_bytes=1024)
                return await _http_json(http, "/jsz?accounts=true")
            finally:
                await nc.close()

        jsz = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert [(detail["name"], detail["id"]) for detail in jsz["account_details"]] == [("J", key)]
