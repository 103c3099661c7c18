"""AUTH against an HTTP auth server (nsqd --auth-http-address): the query nsqd sends, the
answers, and every auth error text (E_AUTH_FIRST, E_AUTH_FAILED, E_UNAUTHORIZED, AUTH
already set), with a small auth server written here; and pynsq's auth_secret."""

from __future__ import annotations

import functools
import urllib.parse

import h11
import orjson
import pytest
import trio

from natserver.nsq.auth import AuthError, AuthState
from tests.nsq.helpers import FRAME_ERROR, FRAME_RESPONSE, RawClient, start_nsq

TIMEOUT = 10
GRANTS = {
    "open": {"ttl": 3600, "identity": "alice", "identity_url": "https://id/alice",
             "authorizations": [{"topic": "^orders$", "channels": [".*"], "permissions": ["publish", "subscribe"]},
                                {"topic": "logs", "channels": ["^audit$"], "permissions": ["subscribe"]}]},
    "nothing": {"ttl": 60, "identity": "bob", "authorizations": []},
    "badttl": {"ttl": 0, "authorizations": []},
}


class AuthServer:
    def __init__(self):
        self.queries = []

    async def handle(self, stream):
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                    continue
                if isinstance(event, h11.Request):
                    request = event
                if isinstance(event, h11.EndOfMessage):
                    break
            path, _, query = request.target.decode().partition("?")
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            self.queries.append((path, params))
            grant = GRANTS.get(params.get("secret"))
            status, body = (200, orjson.dumps(grant)) if grant is not None else (403, b'{"message":"NOT_AUTHORIZED"}')
            await stream.send_all(conn.send(h11.Response(status_code=status, headers=[("Content-Length", str(len(body)))]))
                                  + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        finally:
            await stream.aclose()


@pytest.fixture
async def auth_server(nursery):
    server = AuthServer()
    listeners = await nursery.start(functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
    server.address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    return server


@pytest.fixture
async def front(nursery, tmp_path, auth_server):
    return await start_nsq(nursery, tmp_path, auth_http_addresses=[auth_server.address])


async def authed(front, secret: bytes):
    c = await RawClient.connect(front.tcp_port)
    kind, data = await c.identify(feature_negotiation=True)
    assert orjson.loads(data)["auth_required"] is True
    await c.cmd(b"AUTH", secret)
    return c, await c.frame()


async def test_auth_required_first(front):
    with trio.fail_after(TIMEOUT):
        for command, body, error in ((b"PUB orders", b"x", b"E_AUTH_FIRST AUTH required before PUB"),
                                     (b"SUB orders ch", None, b"E_AUTH_FIRST AUTH required before SUB")):
            c = await RawClient.connect(front.tcp_port)
            await c.cmd(command, body)
            assert await c.frame() == (FRAME_ERROR, error)
            assert await c.closed()


async def test_auth_grants_and_refusals(front, auth_server):
    with trio.fail_after(TIMEOUT):
        c, answer = await authed(front, b"open")
        assert answer == (FRAME_RESPONSE, b'{"identity":"alice","identity_url":"https://id/alice","permission_count":2}')
        path, params = auth_server.queries[-1]
        assert path == "/auth"
        assert params == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "open", "tls": "false"}
        await c.cmd(b"PUB orders", b"ok")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"AUTH", b"open")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID AUTH already set")
        assert await c.closed()
        c, _ = await authed(front, b"open")
        await c.cmd(b"PUB orders_v2", b"no")  # ^orders$ is anchored by the grant itself
        assert await c.frame() == (FRAME_ERROR, b'E_UNAUTHORIZED AUTH failed for PUB on "orders_v2" ""')
        assert await c.closed()
        c, _ = await authed(front, b"open")
        await c.cmd(b"SUB mylogs audit")  # "logs" matches anywhere, as Go's MatchString does
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        c, _ = await authed(front, b"open")
        await c.cmd(b"SUB logs other")
        assert await c.frame() == (FRAME_ERROR, b'E_UNAUTHORIZED AUTH failed for SUB on "logs" "other"')
        c, _ = await authed(front, b"open")
        await c.cmd(b"PUB logs", b"x")  # subscribe-only grant
        assert await c.frame() == (FRAME_ERROR, b'E_UNAUTHORIZED AUTH failed for PUB on "logs" ""')


async def test_auth_failures(front):
    with trio.fail_after(TIMEOUT):
        c, answer = await authed(front, b"wrong")
        assert answer == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")
        assert await c.closed()
        c, answer = await authed(front, b"nothing")
        assert answer == (FRAME_ERROR, b"E_UNAUTHORIZED AUTH no authorizations found")
        c, answer = await authed(front, b"badttl")
        assert answer == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")


async def test_expired_auth_is_queried_again(front, auth_server):
    with trio.fail_after(TIMEOUT):
        c, _ = await authed(front, b"open")
        before = len(auth_server.queries)
        (client,) = [cl for cl in front.clients.values() if cl.auth is not None]
        client.auth.expires = 0.0
        await c.cmd(b"PUB orders", b"x")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        assert len(auth_server.queries) == before + 1


async def test_unreachable_auth_server(nursery, tmp_path):
    front = await start_nsq(nursery, tmp_path, auth_http_addresses=["127.0.0.1:1"])
    with trio.fail_after(TIMEOUT):
        c, answer = await authed(front, b"open")
        assert answer == (FRAME_ERROR, b"E_AUTH_FAILED AUTH failed")


async def test_auth_disabled(nursery, tmp_path):
    front = await start_nsq(nursery, tmp_path)
    with trio.fail_after(TIMEOUT):
        c = await RawClient.connect(front.tcp_port)
        await c.cmd(b"AUTH", b"secret")
        assert await c.frame() == (FRAME_ERROR, b"E_AUTH_DISABLED AUTH disabled")


def test_auth_state_validation():
    with pytest.raises(AuthError, match="invalid TTL"):
        AuthState({"ttl": -1}, 0.0)
    with pytest.raises(AuthError, match="unknown permission"):
        AuthState({"ttl": 1, "authorizations": [{"topic": ".*", "channels": [], "permissions": ["admin"]}]}, 0.0)
    with pytest.raises(AuthError, match="unable to compile"):
        AuthState({"ttl": 1, "authorizations": [{"topic": "(", "channels": [], "permissions": []}]}, 0.0)
    state = AuthState({"ttl": 10, "authorizations": [{"topic": "t", "channels": [], "permissions": ["publish"]}]}, 5.0)
    assert not state.is_allowed("t", "")  # publishing needs a channel pattern matching ""
    assert not state.expired(15.0) and state.expired(15.1)
