"""Tests for natserver.server.monitor, the monitoring HTTP server (/varz, /connz, /subsz, /healthz, /).

Traffic comes from raw sockets so that every byte the counters must show is known; the HTTP
side is spoken with h11 as a client. The differential test runs nats-server -m with the same
traffic and compares the documents.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import time

import h11
import orjson
import pytest
import trio

import natserver
from natserver.protocol import const
from natserver.server import monitor as _monitor
from natserver.server.monitor import go_duration, go_rtt, go_time, match_literal, my_uptime, serve_monitor
from tests.reference import NATS_SERVER, needs_nats_server

TIMEOUT = 10  # hard limit on every I/O test

VARZ_KEYS = [  # nats-server 2.15.1's, in its order
    "server_id", "server_name", "version", "proto", "git_commit", "go", "host", "port", "max_connections",
    "ping_interval", "ping_max", "http_host", "http_port", "http_base_path", "https_port",
    "auth_timeout", "max_control_line", "max_payload", "max_pending", "cluster", "gateway", "leaf",
    "mqtt", "websocket", "jetstream", "tls_timeout", "write_deadline", "start", "now", "uptime",
    "mem", "cores", "gomaxprocs", "cpu", "connections", "total_connections", "routes", "remotes",
    "leafnodes", "in_msgs", "in_bytes", "in_client_msgs", "in_client_bytes", "out_msgs", "out_bytes",
    "out_client_msgs", "out_client_bytes", "slow_consumers", "stale_connections", "stalled_clients",
    "subscriptions", "http_req_stats", "config_load_time", "config_digest", "feature_flags", "system_account",
    "slow_consumer_stats", "stale_connection_stats", "disk_io_wait_stats",
]
CONNZ_KEYS = ["server_id", "now", "num_connections", "total", "offset", "limit", "connections"]
CONN_KEYS = [
    "cid", "kind", "type", "ip", "port", "start", "last_activity", "rtt", "uptime", "idle",
    "pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions",
]
STATS_KEYS = ["num_subscriptions", "num_cache", "num_inserts", "num_removes", "num_matches",
              "cache_hit_rate", "max_fanout", "avg_fanout"]
SUBSZ_KEYS = ["server_id", "now", *STATS_KEYS, "total", "offset", "limit"]  # 2.15.1: with or without a list
GO_TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)\Z")
UPTIME = re.compile(r"\A(\d+y)?(\d+d)?(\d+h)?(\d+m)?\d+s\Z")


# -- helpers ------------------------------------------------------------------------------------


def options(**changes) -> natserver.Options:
    base = dict(host="127.0.0.1", port=-1, http_port=-1, http_host="127.0.0.1", quiet=True)
    base.update(changes)
    return natserver.Options(**base)


async def start(nursery, **changes):
    server = await nursery.start(natserver.serve, options(**changes))
    monitor = await nursery.start(serve_monitor, server)
    return server, monitor


def system_subs(server) -> int:
    """The system account's own subscriptions (its request handlers), which /varz counts."""
    return server.system.account.sublist.count if server.system is not None else 0


@pytest.fixture
async def monitored(nursery):
    server, monitor = await start(nursery)
    yield server, monitor
    await server.shutdown()


class Http:
    """A keep-alive HTTP/1.1 client on h11, for one monitoring port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stream = None
        self.conn = None

    async def __aenter__(self):
        self.stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        self.conn = h11.Connection(h11.CLIENT)
        return self

    async def __aexit__(self, *exc):
        await self.stream.aclose()

    async def request(self, path: str, method: str = "GET", headers=(), body: bytes = b""):
        conn = self.conn
        if conn.our_state is h11.DONE:
            conn.start_next_cycle()
        hdrs = [("Host", f"127.0.0.1:{self.port}"), *headers]
        if body:
            hdrs.append(("Content-Length", str(len(body))))
        data = conn.send(h11.Request(method=method, target=path, headers=hdrs))
        if body:
            data += conn.send(h11.Data(data=body))
        data += conn.send(h11.EndOfMessage())
        await self.stream.send_all(data)
        response, chunks = None, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        headers = {k.decode().lower(): v.decode() for k, v in response.headers}
        return response.status_code, headers, b"".join(chunks)


async def http(monitor_or_port, path: str, method: str = "GET"):
    port = monitor_or_port if isinstance(monitor_or_port, int) else monitor_or_port.port
    with trio.fail_after(TIMEOUT):
        async with Http(port) as client:
            return await client.request(path, method)


async def get_json(monitor_or_port, path: str) -> dict:
    status, headers, body = await http(monitor_or_port, path)
    assert status == 200, (path, status, body)
    assert headers["content-type"] == "application/json"
    return json.loads(body)


class Raw:
    """A NATS client on a raw socket: we know every byte it sends."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def connect(cls, port: int, connect: dict | None = None, rcvbuf: int | None = None) -> "Raw":
        with trio.fail_after(TIMEOUT):
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            await sock.connect(("127.0.0.1", port))
            raw = cls(trio.SocketStream(sock))
            await raw.read_until(b"\r\n")  # INFO
            opts = {"verbose": False, "pedantic": False}
            opts.update(connect or {})
            await raw.send(b"CONNECT " + orjson.dumps(opts) + b"\r\n")
            await raw.ping()
            return raw

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_until(self, marker: bytes) -> bytes:
        with trio.fail_after(TIMEOUT):
            while marker not in self.buffer:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError(self.buffer[-200:])
                self.buffer += data
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    async def ping(self) -> None:
        """Round trip: everything sent before it has been processed by the server."""
        await self.send(b"PING\r\n")
        await self.read_until(b"PONG\r\n")

    async def close(self) -> None:
        await self.stream.aclose()


async def wait_for(predicate, what: str, timeout: float = TIMEOUT):
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def pub(subject: str, payload: bytes) -> bytes:
    return f"PUB {subject} {len(payload)}\r\n".encode() + payload + b"\r\n"


# -- Go formatting ----------------------------------------------------------------------------


def test_go_duration():
    assert go_duration(0) == "0s"
    assert go_duration(120 * 10**9) == "2m0s"
    assert go_duration(10 * 10**9) == "10s"
    assert go_duration(3723 * 10**9 + 500_000_000) == "1h2m3.5s"
    assert go_duration(437_000) == "437µs"
    assert go_duration(1_234_567) == "1.234567ms"
    assert go_duration(999) == "999ns"
    assert go_duration(1_500) == "1.5µs"
    assert go_duration(-2 * 10**9) == "-2s"


def test_my_uptime_and_rtt():
    assert my_uptime(0.9) == "0s"
    assert my_uptime(62) == "1m2s"
    assert my_uptime(3723) == "1h2m3s"
    assert my_uptime(93784) == "1d2h3m4s"
    assert my_uptime(366 * 86400 + 1) == "1y1d0h0m1s"
    assert go_rtt(None) == "0s"
    assert go_rtt(0.000437123) == "437µs"  # truncated to µs under a millisecond
    assert go_rtt(0.0015) == "1.5ms"


def test_go_time():
    assert go_time(1700000000.555216) == "2023-11-14T22:13:20.555216Z"
    assert go_time(1700000000.5) == "2023-11-14T22:13:20.5Z"
    assert go_time(1700000000.0) == "2023-11-14T22:13:20Z"
    assert GO_TIME.match(go_time(time.time(), local=True))


def test_match_literal():
    lit = b"foo.bar".split(b".")
    assert match_literal(lit, b"foo.bar")
    assert match_literal(lit, b"foo.*")
    assert match_literal(lit, b">")
    assert match_literal(lit, b"foo.>")
    assert not match_literal(lit, b"foo.bar.>")
    assert not match_literal(lit, b"foo")
    assert not match_literal(lit, b"*.baz")


# -- HTTP behaviour -----------------------------------------------------------------------------


async def test_healthz_headers_keepalive_head(monitored):
    server, monitor = monitored
    assert monitor.url == f"http://127.0.0.1:{monitor.port}"
    with trio.fail_after(TIMEOUT):
        async with Http(monitor.port) as client:
            status, headers, body = await client.request("/healthz")
            assert (status, body) == (200, b'{"status":"ok"}')
            assert headers["content-type"] == "application/json"
            assert headers["access-control-allow-origin"] == "*"
            assert headers["content-length"] == str(len(body))
            assert "date" in headers
            # same connection: keep-alive
            status, headers, body = await client.request("/varz", method="HEAD")
            assert status == 200 and body == b""
            assert int(headers["content-length"]) > 500
            status, _, body = await client.request("/nope")
            assert (status, body) == (404, b"404 page not found\n")
            status, _, body = await client.request("/varz/")
            assert status == 404
            # nats-server answers any method the same way (no 405)
            status, _, body = await client.request("/healthz", method="POST", body=b"x" * 100)
            assert (status, body) == (200, b'{"status":"ok"}')
            status, headers, body = await client.request("/healthz?callback=cb")
            assert (status, body) == (200, b'cb({"status":"ok"})')
            assert headers["content-type"] == "application/javascript"
            status, _, body = await client.request("/healthz?js-enabled-only=maybe")
            assert status == 400
    varz = await get_json(monitor, "/varz")
    assert varz["http_req_stats"] == {"/healthz": 4, "/varz": 2}  # HEAD counted; 404s not


async def test_bad_requests_do_not_kill_the_server(monitored, monkeypatch):
    server, monitor = monitored
    with trio.fail_after(TIMEOUT):
        # garbage instead of HTTP: 400 then close
        stream = await trio.open_tcp_stream("127.0.0.1", monitor.port)
        await stream.send_all(b"this is not http\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 400 ")
        await stream.aclose()
        # an oversized request head: 431 then close
        stream = await trio.open_tcp_stream("127.0.0.1", monitor.port)
        await stream.send_all(b"GET /varz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (_monitor.MAX_REQUEST_HEAD + 10))
        data = b""
        try:
            while chunk := await stream.receive_some(4096):
                data += chunk
        except trio.BrokenResourceError:
            pass
        assert data.startswith(b"HTTP/1.1 431 ")
        await stream.aclose()
        # a body over the limit: 413
        async with Http(monitor.port) as client:
            status, _, _ = await client.request("/varz", method="POST", body=b"x" * (_monitor.MAX_REQUEST_BODY + 1))
            assert status == 413

    # a handler that blows up: 500, and the next request is served
    def boom(self, query):
        raise RuntimeError("boom")

    monkeypatch.setattr(_monitor.Monitor, "handle_varz", boom)
    status, _, body = await http(monitor, "/varz")
    assert (status, body) == (500, b"500 Internal Server Error")
    monkeypatch.undo()
    status, _, _ = await http(monitor, "/varz")
    assert status == 200


async def test_root_index_and_stubs(monitored):
    server, monitor = monitored
    status, headers, body = await http(monitor, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    for link in ("varz", "connz", "subsz", "routez", "healthz", "jsz", "accountz", "leafz", "gatewayz"):
        assert f"href=./{link}".encode() in body
        status, _, _ = await http(monitor, f"/{link}")
        assert status == 200, link
    routez = await get_json(monitor, "/routez")
    assert list(routez) == ["server_id", "server_name", "now", "num_routes", "routes"] and routez["routes"] == []
    assert routez["server_name"] == server.server_name
    assert list(await get_json(monitor, "/subscriptionsz")) == SUBSZ_KEYS


# -- /varz --------------------------------------------------------------------------------------


async def test_varz_fields(monitored):
    server, monitor = monitored
    varz = await get_json(monitor, "/varz")
    assert list(varz) == VARZ_KEYS
    assert varz["system_account"] == "$SYS"  # nats-server's default system account
    o = server.options
    assert varz["server_id"] == server.server_id and varz["server_id"].startswith("N")
    assert varz["version"] == "2.15.1" and varz["proto"] == 1
    assert (varz["host"], varz["port"]) == ("127.0.0.1", server.port)
    assert (varz["http_host"], varz["http_port"]) == ("127.0.0.1", -1)
    assert varz["ping_interval"] == 120_000_000_000 and varz["write_deadline"] == 10_000_000_000
    assert varz["auth_timeout"] == 2 and isinstance(varz["auth_timeout"], int)
    assert varz["max_payload"] == o.max_payload and varz["max_pending"] == o.max_pending
    assert varz["max_connections"] == 65536 and varz["max_control_line"] == 4096
    for key in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
        assert varz[key] == {}
    for key in ("start", "now", "config_load_time"):
        assert GO_TIME.match(varz[key]), varz[key]
    assert UPTIME.match(varz["uptime"])
    assert varz["mem"] > 1_000_000 and varz["cores"] >= 1 and varz["cpu"] >= 0
    assert varz["http_req_stats"] == {"/varz": 1}  # this very request is counted
    assert varz["git_commit"] == const.GIT_COMMIT_FIELD and varz["config_digest"] == ""  # (no config file)
    assert varz["feature_flags"] == _monitor.FEATURE_FLAGS
    for key in ("slow_consumer_stats", "stale_connection_stats"):
        assert varz[key] == {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}, key
    assert varz["disk_io_wait_stats"] == {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
    for key in ("connections", "total_connections", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "in_client_msgs",
                "in_client_bytes", "out_client_msgs", "out_client_bytes", "slow_consumers", "stale_connections",
                "stalled_clients", "routes", "remotes", "leafnodes"):
        assert varz[key] == 0, key
    # Every account's subscriptions, as nats-server counts them: here the system account's own.
    assert varz["subscriptions"] == system_subs(server) > 0
    await get_json(monitor, "/connz")
    assert (await get_json(monitor, "/varz"))["http_req_stats"] == {"/connz": 1, "/varz": 2}


# -- counters -----------------------------------------------------------------------------------


async def test_counters_per_server_and_per_connection(monitored):
    server, monitor = monitored
    sub = await Raw.connect(server.port, {"name": "subber", "lang": "raw", "version": "1.0"})
    await sub.send(b"SUB foo 1\r\nSUB foo q 2\r\nSUB bar.* 3\r\n")
    await sub.ping()
    publisher = await Raw.connect(server.port)
    payloads = [b"hello", b"x" * 1000, b""]
    await publisher.send(b"".join(pub("foo", p) for p in payloads) + pub("bar.baz", b"abc") + pub("nobody", b"12345"))
    await publisher.ping()
    # foo: 3 msgs to 2 subs (plain + queue), bar.baz: 1 to 1, nobody: 0
    sent = sum(map(len, payloads)) + 3 + 5
    received = 2 * sum(map(len, payloads)) + 3
    varz = await get_json(monitor, "/varz")
    assert (varz["in_msgs"], varz["in_bytes"]) == (5, sent)
    assert (varz["out_msgs"], varz["out_bytes"]) == (7, received)
    assert (varz["connections"], varz["total_connections"], varz["subscriptions"]) == (2, 2, 3 + system_subs(server))

    connz = await get_json(monitor, "/connz")
    assert list(connz) == CONNZ_KEYS
    assert (connz["num_connections"], connz["total"], connz["offset"], connz["limit"]) == (2, 2, 0, 1024)
    s, p = connz["connections"]
    assert list(s) == CONN_KEYS + ["name", "lang", "version"]
    assert list(p) == CONN_KEYS  # no name/lang/version: omitted like Go's omitempty
    assert (s["cid"], s["kind"], s["type"], s["ip"]) == (1, "Client", "nats", "127.0.0.1")
    assert (s["name"], s["lang"], s["version"]) == ("subber", "raw", "1.0")
    assert (s["in_msgs"], s["in_bytes"], s["out_msgs"], s["out_bytes"], s["subscriptions"]) == (0, 0, 7, received, 3)
    assert (p["in_msgs"], p["in_bytes"], p["out_msgs"], p["out_bytes"], p["subscriptions"]) == (5, sent, 0, 0, 0)
    assert s["port"] == sub.stream.socket.getsockname()[1]
    for key in ("start", "last_activity"):
        assert GO_TIME.match(s[key])
    assert UPTIME.match(s["uptime"]) and UPTIME.match(s["idle"])
    assert s["rtt"].endswith("s") and s["pending_bytes"] >= 0

    connz = await get_json(monitor, "/connz?subs=1")
    assert sorted(connz["connections"][0]["subscriptions_list"]) == ["bar.*", "foo", "foo"]
    assert "subscriptions_list" not in connz["connections"][1]  # none: omitted
    connz = await get_json(monitor, "/connz?subs=detail")
    detail = connz["connections"][0]["subscriptions_list_detail"]
    assert sorted((d["subject"], d.get("qgroup", ""), d["sid"], d["cid"], d["msgs"]) for d in detail) == [
        ("bar.*", "", "3", 1, 1), ("foo", "", "1", 1, 3), ("foo", "q", "2", 1, 3)]
    assert all(list(d) == ["subject", "sid", "msgs", "cid"] or list(d) == ["subject", "qgroup", "sid", "msgs", "cid"]
               for d in detail)

    # /subsz: stats, the list, and test= filtering
    # Every account's subscriptions, the system account's own included (as nats-server counts).
    subsz = await get_json(monitor, "/subsz")
    assert list(subsz) == SUBSZ_KEYS
    assert subsz["num_subscriptions"] == server.subscriptions > 3
    subsz = await get_json(monitor, "/subsz?acc=%24G")  # the clients' account alone
    assert (subsz["num_subscriptions"], subsz["num_inserts"], subsz["num_removes"]) == (3, 3, 0)
    assert subsz["num_matches"] >= 1 and subsz["max_fanout"] == 2
    subsz = await get_json(monitor, "/subsz?subs=1&acc=%24G")
    assert list(subsz) == [*SUBSZ_KEYS, "subscriptions_list"]
    assert subsz["total"] == 3 and {d["account"] for d in subsz["subscriptions_list"]} == {"$G"}
    everyone = await get_json(monitor, "/subsz?subs=1")
    assert {d["account"] for d in everyone["subscriptions_list"]} == {"$G", "$SYS"}
    subsz = await get_json(monitor, "/subsz?subs=1&test=foo")
    assert sorted((d["subject"], d["sid"]) for d in subsz["subscriptions_list"]) == [("foo", "1"), ("foo", "2")]
    subsz = await get_json(monitor, "/subsz?subs=1&test=bar.x")
    assert [d["subject"] for d in subsz["subscriptions_list"]] == ["bar.*"]
    subsz = await get_json(monitor, "/subsz?subs=1&test=zzz")
    assert list(subsz) == SUBSZ_KEYS and subsz["total"] == 0  # nothing matched: no list, as nats-server 2.15.1
    subsz = await get_json(monitor, "/subsz?subs=1&acc=%24G&offset=1&limit=1")
    assert (subsz["offset"], subsz["limit"], subsz["total"], len(subsz["subscriptions_list"])) == (1, 1, 1, 1)
    status, _, body = await http(monitor, "/subsz?subs=1&test=foo.*")
    assert (status, body) == (400, b"invalid test subject, must be valid publish subject: foo.*")
    await sub.close()
    await publisher.close()


async def test_connz_sort_paging_cid_and_errors(monitored):
    server, monitor = monitored
    clients = []
    for n_subs, n_msgs in ((1, 3), (3, 1), (2, 2)):
        c = await Raw.connect(server.port)
        await c.send(b"".join(f"SUB s.{i} {i}\r\n".encode() for i in range(n_subs)))
        await c.send(b"".join(pub("nowhere", b"m" * 10) for _ in range(n_msgs)))
        await c.ping()
        clients.append(c)

    async def cids(query: str) -> list[int]:
        return [c["cid"] for c in (await get_json(monitor, "/connz?" + query))["connections"]]

    assert await cids("") == [1, 2, 3]
    assert await cids("sort=start") == [1, 2, 3]
    assert await cids("sort=subs") == [2, 3, 1]
    assert await cids("sort=msgs_from") == [1, 3, 2]
    assert await cids("sort=bytes_from") == [1, 3, 2]
    assert await cids("sort=uptime") == [3, 2, 1]
    assert await cids("offset=1&limit=1") == [2]
    assert await cids("offset=5") == []
    connz = await get_json(monitor, "/connz?cid=2")
    assert [c["cid"] for c in connz["connections"]] == [2]
    assert (connz["limit"], connz["num_connections"], connz["total"]) == (1, 1, 3)  # sic, like Go
    assert await cids("cid=99") == []
    assert await cids("limit=0") == [1, 2, 3]
    for query, message in [
        ("sort=bogus", "invalid sorting option: bogus"),
        ("sort=stop", "sort by stop only valid on closed connections"),
        ("sort=reason&state=all", "sort by reason only valid on closed connections"),
        ("state=bogus", "Error decoding state for bogus"),
        ("limit=abc", "Error decoding int for 'limit': strconv.Atoi: parsing \"abc\": invalid syntax"),
        ("cid=-1", "Error decoding uint64 for 'cid': strconv.ParseUint: parsing \"-1\": invalid syntax"),
        ("subs=maybe", "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"maybe\": invalid syntax"),
    ]:
        status, headers, body = await http(monitor, "/connz?" + query)
        assert (status, body.decode()) == (400, message)
        assert headers["content-type"] == "text/plain; charset=utf-8"
    for c in clients:
        await c.close()


async def test_closed_connections_are_remembered(monitored):
    server, monitor = monitored
    stay = await Raw.connect(server.port)
    leave = await Raw.connect(server.port, {"name": "leaver"})
    await leave.send(b"SUB gone.* 7\r\n" + pub("x", b"12345678"))
    await leave.ping()
    await leave.close()

    async def closed():
        return (await get_json(monitor, "/connz?state=closed"))["connections"]

    (record,) = await wait_for(closed, "the closed connection")
    assert (record["cid"], record["name"], record["reason"]) == (2, "leaver", "Client Closed")
    assert list(record)[:9] == ["cid", "kind", "type", "ip", "port", "start", "last_activity", "stop", "reason"]
    assert GO_TIME.match(record["stop"])
    assert (record["in_msgs"], record["in_bytes"], record["subscriptions"]) == (1, 8, 1)
    open_ = await get_json(monitor, "/connz")
    assert [c["cid"] for c in open_["connections"]] == [1]
    assert "stop" not in open_["connections"][0] and "reason" not in open_["connections"][0]
    both = await get_json(monitor, "/connz?state=all")
    assert [c["cid"] for c in both["connections"]] == [1, 2] and both["total"] == 2
    assert [c["cid"] for c in (await get_json(monitor, "/connz?state=any&cid=2"))["connections"]] == [2]
    by_stop = await get_json(monitor, "/connz?state=closed&sort=stop")
    assert [c["cid"] for c in by_stop["connections"]] == [2]
    subs = await get_json(monitor, "/connz?state=closed&subs=1")
    assert subs["connections"][0]["subscriptions_list"] == ["gone.*"]
    detail = await get_json(monitor, "/connz?state=closed&subs=detail")
    assert detail["connections"][0]["subscriptions_list_detail"][0]["subject"] == "gone.*"
    varz = await get_json(monitor, "/varz")
    assert (varz["connections"], varz["total_connections"], varz["subscriptions"]) == (1, 2, system_subs(server))
    await stay.close()


async def test_closed_record_with_subscription_details(monitored):
    """Records that keep each subscription's details (sid, queue, msgs, max) show them all."""
    server, monitor = monitored
    now = time.time()
    server.closed_clients.append({
        "cid": 77, "ip": "10.0.0.1", "port": 4000, "start": now - 3725, "stop": now - 5,
        "last_activity": now - 65, "rtt": 0.0015, "pending_bytes": 0, "in_msgs": 1, "out_msgs": 2,
        "in_bytes": 3, "out_bytes": 4, "subscriptions": 2, "name": "",
        "lang": "go", "version": "1.2", "user": "alice", "reason": "Stale Connection",
        "subs_packed": "a  1 5 0\tb g 2 1 9",  # (client.pack_subs: subject queue sid msgs max)
    })
    (info,) = (await get_json(monitor, "/connz?state=closed&subs=detail&auth=1"))["connections"]
    assert (info["rtt"], info["uptime"], info["idle"], info["reason"]) == ("1.5ms", "1h2m0s", "1m0s", "Stale Connection")
    assert info["authorized_user"] == "alice" and "name" not in info
    assert info["subscriptions_list_detail"] == [
        {"account": "$G", "subject": "a", "sid": "1", "msgs": 5, "cid": 77},
        {"account": "$G", "subject": "b", "qgroup": "g", "sid": "2", "msgs": 1, "max": 9, "cid": 77}]
    (info,) = (await get_json(monitor, "/connz?state=closed&subs=1&user=alice&auth=true"))["connections"]
    assert info["subscriptions_list"] == ["a", "b"]
    assert (await get_json(monitor, "/connz?state=closed&user=bob"))["connections"] == []
    assert (await get_json(monitor, "/connz?state=closed&acc=$G"))["connections"] == []  # sic
    assert (await get_json(monitor, "/connz?acc=other"))["connections"] is None  # sic


async def test_slow_consumer_counted_and_reported(nursery):
    server, monitor = await start(nursery, max_pending=64 * 1024, max_payload=8 * 1024)
    slow = await Raw.connect(server.port, {"name": "slow"}, rcvbuf=4096)
    await slow.send(b"SUB big 1\r\n")
    await slow.ping()  # ... and never reads again
    publisher = await Raw.connect(server.port)
    # 8 KB messages: past half of max_pending every delivery to the stuck subscriber stalls the
    # publisher for 100 ms or more (nats-server's stall gate), so few, big messages keep it short.
    chunk = pub("big", b"x" * 8000) * 32  # 256 KB
    chunks = 0
    try:
        with trio.fail_after(TIMEOUT):
            # until the kernel buffers (a few MB) and then max_pending are full: at most 32 MB
            while server.slow_consumers == 0 and chunks < 128:
                await publisher.send(chunk)
                await publisher.ping()
                chunks += 1
    except trio.BrokenResourceError:
        reasons = [c.get("reason") for c in (await get_json(monitor, "/connz?state=closed"))["connections"]]
        raise AssertionError(f"the server dropped the publisher, not the slow subscriber: {reasons}") from None

    async def slow_consumers():
        return (await get_json(monitor, "/varz"))["slow_consumers"]

    assert await wait_for(slow_consumers, "a slow consumer") == 1
    closed = (await get_json(monitor, "/connz?state=closed"))["connections"]
    assert [(c["name"], c["reason"]) for c in closed] == [("slow", "Slow Consumer (Pending Bytes)")]
    varz = await get_json(monitor, "/varz")
    assert varz["in_msgs"] == chunks * 32 and varz["in_bytes"] == chunks * 32 * 8000
    assert varz["connections"] == 1
    assert varz["slow_consumer_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}
    assert varz["stalled_clients"] >= 1  # the publisher waited for the stuck subscriber
    await publisher.close()
    await slow.close()
    await server.shutdown()


async def test_stale_connections_counted(nursery):
    """A client that answers no PING is closed as stale (server.go staleConnections)."""
    server, monitor = await start(nursery, ping_interval=0.05, ping_max=1)
    silent = await Raw.connect(server.port, {"name": "silent"})  # and never answers a PING

    async def stale():
        return (await get_json(monitor, "/varz"))["stale_connections"]

    assert await wait_for(stale, "a stale connection") == 1
    varz = await get_json(monitor, "/varz")
    assert varz["stale_connection_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}
    closed = (await get_json(monitor, "/connz?state=closed"))["connections"]
    assert [(c["name"], c["reason"]) for c in closed] == [("silent", "Stale Connection")]
    await silent.close()
    await server.shutdown()


async def test_monitor_stops_with_the_server():
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server, monitor = await start(nursery)
            await server.shutdown()
        # the nursery exited: the monitor stopped by itself
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", monitor.port)


async def test_logs_starting_http_monitor(nursery):
    server = await nursery.start(natserver.serve, options())
    logger = logging.getLogger("natserver")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # quiet=True silenced it
    try:
        monitor = await nursery.start(serve_monitor, server)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", f"Starting http monitor on 127.0.0.1:{monitor.port}")]
    await server.shutdown()


# -- against nats-server ---------------------------------------------------------------------------


async def same_traffic(port: int) -> tuple[Raw, Raw]:
    """One subscriber, one publisher, 50 messages of 100 bytes plus one of 0 on a queue group."""
    sub = await Raw.connect(port, {"name": "sub", "lang": "raw", "version": "0"})
    await sub.send(b"SUB data 1\r\nSUB data workers 2\r\nSUB other.> 3\r\n")
    await sub.ping()
    publisher = await Raw.connect(port, {"name": "pub"})
    await publisher.send(b"".join(pub("data", bytes([65 + i % 26]) * 100) for i in range(50)) + pub("other.x", b""))
    await publisher.ping()
    return sub, publisher


async def observe(port: int) -> dict:
    """What we compare: the same requests in the same order on both servers."""
    paths = ["/varz", "/connz", "/connz?subs=1", "/connz?subs=detail", "/subsz", "/subsz?subs=1", "/healthz", "/routez"]
    docs = {path: await get_json(port, path) for path in paths}
    docs["/varz#2"] = await get_json(port, "/varz")
    return docs


@needs_nats_server
async def test_differential_against_nats_server(nursery, tmp_path):
    binary = NATS_SERVER
    conf = tmp_path / "ref.conf"
    # no_sys_acc: no $SYS account, hence no internal subscriptions and no system_account key.
    conf.write_text("host: 127.0.0.1\nport: -1\nhttp_port: -1\nno_sys_acc: true\n")
    proc = subprocess.Popen([binary, "-c", str(conf), "--ports_file_dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ports_file = tmp_path / f"nats-server_{proc.pid}.ports"

        async def ports():
            return ports_file.exists() and ports_file.stat().st_size and json.loads(ports_file.read_text())

        ref_ports = await wait_for(ports, "nats-server's ports file")
        ref_nats = int(ref_ports["nats"][0].rsplit(":", 1)[1])
        ref_http = int(ref_ports["monitoring"][0].rsplit(":", 1)[1])
        server, monitor = await start(nursery, no_system_account=True)

        ref_clients = await same_traffic(ref_nats)
        our_clients = await same_traffic(server.port)
        ref, ours = await observe(ref_http), await observe(monitor.port)

        for path in ref:
            assert list(ours[path]) == list(ref[path]), path  # same keys, same order
        for key in ("in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions", "connections",
                    "total_connections", "slow_consumers", "http_req_stats", "max_payload", "max_pending",
                    "ping_interval", "write_deadline", "auth_timeout", "proto", "in_client_msgs",
                    "in_client_bytes", "out_client_msgs", "out_client_bytes", "stale_connections", "stalled_clients",
                    "slow_consumer_stats", "stale_connection_stats", "disk_io_wait_stats", "version"):
            assert ours["/varz#2"][key] == ref["/varz#2"][key], key
        assert ours["/varz"]["feature_flags"].keys() == ref["/varz"]["feature_flags"].keys()
        assert ours["/varz"]["http_req_stats"] == ref["/varz"]["http_req_stats"] == {"/varz": 1}
        for path in ("/connz", "/connz?subs=1", "/connz?subs=detail"):
            assert ours[path]["total"] == ref[path]["total"] == 2
            for mine, theirs in zip(ours[path]["connections"], ref[path]["connections"], strict=True):
                assert list(mine) == list(theirs)
                for key in ("in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions", "pending_bytes",
                            "name", "lang", "version", "kind", "type", "ip"):
                    assert mine.get(key) == theirs.get(key), (path, key)
        subs = ours["/connz?subs=1"]["connections"][0]["subscriptions_list"]
        assert sorted(subs) == sorted(ref["/connz?subs=1"]["connections"][0]["subscriptions_list"])
        for key in ("num_subscriptions", "num_inserts", "num_removes", "max_fanout"):
            assert ours["/subsz"][key] == ref["/subsz"][key], key
        assert ours["/healthz"] == ref["/healthz"] == {"status": "ok"}

        def strip(detail):
            return sorted((d.get("account"), d["subject"], d.get("qgroup", ""), d["sid"], d["msgs"]) for d in detail)

        assert strip(ours["/subsz?subs=1"]["subscriptions_list"]) == strip(ref["/subsz?subs=1"]["subscriptions_list"])
        assert ours["/subsz?subs=1"]["total"] == ref["/subsz?subs=1"]["total"] == 3
        mine, theirs = (docs["/connz?subs=detail"]["connections"][0]["subscriptions_list_detail"] for docs in (ours, ref))
        assert strip(mine) == strip(theirs)

        # the publisher leaves: both remember it with the same reason and counters
        for client in (ref_clients[1], our_clients[1]):
            await client.close()

        async def closed(port):
            return (await get_json(port, "/connz?state=closed"))["connections"]

        (ref_closed,) = await wait_for(lambda: closed(ref_http), "nats-server's closed connection")
        (our_closed,) = await wait_for(lambda: closed(monitor.port), "our closed connection")
        assert list(our_closed) == list(ref_closed)
        for key in ("reason", "in_msgs", "in_bytes", "out_msgs", "out_bytes", "subscriptions", "name"):
            assert our_closed[key] == ref_closed[key], key
        for client in (ref_clients[0], our_clients[0]):
            await client.close()
        await server.shutdown()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
