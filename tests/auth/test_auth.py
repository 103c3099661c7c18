"""Authentication and permissions with nats-py and raw clients: tokens, users, bcrypt, the
--user/--pass/--auth flags, no_auth_user, auth_timeout, allow_responses, bad input, reload;
and the same configurations against nats-server (see also conformance/cases.py)."""

from __future__ import annotations

import asyncio
import logging

import bcrypt
import nats
import nats.errors
import pytest
import trio

import natserver
from natserver.auth.users import Permissions, User, check_password
from natserver.cli import CommandLine
from natserver.config.flags import build_options, parse_args
from natserver.server import signals as _signals
from tests.auth.test_auth_helpers import connect_line, exchange, info_shape, needs_nats_server, running

TIMEOUT = 20
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


async def nconnect(url: str, **kwargs):
    kwargs.setdefault("allow_reconnect", False)
    kwargs.setdefault("connect_timeout", 3)
    kwargs.setdefault("max_reconnect_attempts", 0)

    async def quiet(_):
        pass

    kwargs.setdefault("error_cb", quiet)
    return await nats.connect(url, **kwargs)


async def refused(url: str, **kwargs) -> str:
    with pytest.raises(Exception) as info:
        nc = await nconnect(url, **kwargs)
        await nc.close()
    return str(info.value)


# -- who gets in ----------------------------------------------------------------------------------


def test_check_password():
    assert check_password("s3cret", HASH) and not check_password("nope", HASH)
    assert check_password("plain", "plain") and not check_password("plai", "plain")
    assert not check_password("x" * 100_000, "x" * 100_000)  # absurdly long: refused
    assert not check_password("x", "$2a$04$broken")
    assert not check_password(None, "x")


@pytest.mark.parametrize(
    "server_args, good, bad",
    [
        ({"authorization": "tok3n"}, {"token": "tok3n"}, [{"token": "tok3"}, {"user": "tok3n", "password": "x"}, {}]),
        ({"username": "u", "password": "p"}, {"user": "u", "password": "p"},
         [{"user": "u", "password": "P"}, {"user": "U", "password": "p"}, {"token": "p"}]),
        ({"users": [User("alice", HASH), User("bob", "plain")]}, {"user": "alice", "password": "s3cret"},
         [{"user": "alice", "password": HASH}, {"user": "bob", "password": "s3cret"}, {"user": "carol", "password": "x"}]),
        ({"authorization": HASH}, {"token": "s3cret"}, [{"token": HASH}]),
    ],
)
def test_credentials_with_nats_py(threaded_server, server_args, good, bad):
    handle = threaded_server(**server_args)

    async def main():
        nc = await nconnect(handle.url, **good)
        sub = await nc.subscribe("x")
        await nc.publish("x", b"in")
        assert (await sub.next_msg(timeout=5)).data == b"in"
        await nc.close()
        for creds in bad:
            assert "authorization violation" in (await refused(handle.url, **creds)).lower()

    run(main())


def test_command_line_flags(tmp_path):
    options = build_options(parse_args(["--user", "u", "--pass", "p"]))
    assert (options.username, options.password) == ("u", "p")
    assert build_options(parse_args(["--auth", "t"])).authorization == "t"
    # Flags win over the file, as in nats-server.
    conf = tmp_path / "a.conf"
    conf.write_text("authorization { user: f, password: g }\n")
    options = build_options(parse_args(["-c", str(conf), "--user", "u", "--pass", "p"]))
    assert (options.username, options.password) == ("u", "p")


async def test_secrets_are_never_logged(start_server, raw_connect):
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("natserver")
    handler = Keep(level=logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    server = await start_server(users=[User("alice", "topsecret-pw")])
    logger.setLevel(logging.DEBUG)
    try:
        for password in ("topsecret-pw", "wrong-guess-pw"):
            client = await raw_connect(server)
            await client.read_info()
            await client.send(connect_line(user="alice", **{"pass": password}) + b"PING\r\n")
            await client.read_until(b"\r\n")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = "\n".join(records)
    assert 'authentication error - User "alice"' in text
    assert "topsecret" not in text and "wrong-guess" not in text


# -- auth timeout ----------------------------------------------------------------------------------


async def test_auth_timeout_cuts_a_silent_client(start_server, raw_connect):
    server = await start_server(authorization="t", auth_timeout=0.3)
    client = await raw_connect(server)
    start = trio.current_time()
    await client.read_info()
    with trio.fail_after(3):
        assert await client.read_until_eof() == b"-ERR 'Authentication Timeout'\r\n"
    assert 0.25 < trio.current_time() - start < 1.5
    assert server.closed_clients[-1]["reason"] == "Authentication Timeout"
    # A client that authenticates in time is not cut.
    client = await raw_connect(server)
    await client.read_info()
    await client.send(connect_line(auth_token="t"))
    assert await client.nothing_within(0.5) == b""
    assert await client.ping() == b""


def test_default_auth_timeout_is_two_seconds():
    options = build_options(parse_args(["--auth", "t"]))
    assert options.auth_timeout == 2.0


# -- no_auth_user --------------------------------------------------------------------------------


def test_no_auth_user_with_nats_py(threaded_server):
    users = [User("guest", "", Permissions({"publish": ["public.>"], "subscribe": ["public.>", "_INBOX.>"]})),
             User("admin", "pw")]
    handle = threaded_server(users=users, no_auth_user="guest")

    async def main():
        guest = await nconnect(handle.url)  # no credentials at all
        admin = await nconnect(handle.url, user="admin", password="pw")
        sub = await guest.subscribe("public.news")
        await guest.flush(timeout=5)
        await admin.publish("public.news", b"hello")
        await admin.flush(timeout=5)
        assert (await sub.next_msg(timeout=5)).data == b"hello"
        guest2 = await nconnect(handle.url)
        await guest2.publish("private", b"x")
        for _ in range(50):
            if guest2.last_error is not None:
                break
            await asyncio.sleep(0.02)
        # (nats-py closes the connection on a permissions error, with nats-server too)
        assert 'permissions violation for publish to "private"' in str(guest2.last_error).lower()
        assert "authorization violation" in (await refused(handle.url, user="admin", password="bad")).lower()
        for nc in (guest, guest2, admin):
            await nc.close()

    run(main())


async def test_no_auth_user_must_exist(start_server):
    # auth.go validateNoAuthUser, 2.10+ wording (a user or an nkey).
    with pytest.raises(ValueError, match='no_auth_user: "x" present, but users/nkeys are not defined'):
        natserver.Options(no_auth_user="x").validate()
    with pytest.raises(ValueError, match="not present as user or nkey in authorization block or account configuration"):
        natserver.Options(no_auth_user="x", users=[User("y", "p")]).validate()


# -- permissions --------------------------------------------------------------------------------


def test_permissions_with_nats_py(threaded_server):
    users = [
        User("svc", "pw", Permissions({"subscribe": {"allow": ["req.*"]}, "publish": {"deny": [">"]},
                                        "allow_responses": {"max": 1}})),
        User("client", "pw", Permissions({"publish": ["req.>"], "subscribe": {"allow": [">"], "deny": ["req.secret"]}})),
    ]
    handle = threaded_server(users=users)

    async def last_error(nc):
        for _ in range(50):
            if nc.last_error is not None:
                return str(nc.last_error)
            await asyncio.sleep(0.02)
        return ""

    async def main():
        svc = await nconnect(handle.url, user="svc", password="pw")

        async def respond(msg):
            await msg.respond(b"answer")

        await svc.subscribe("req.help", cb=respond)
        await svc.flush()
        client = await nconnect(handle.url, user="client", password="pw")
        for _ in range(3):  # each request opens the reply subject for one response
            reply = await client.request("req.help", b"?", timeout=5)
            assert reply.data == b"answer"
        await client.subscribe("req.secret.more", queue="workers")  # allowed
        await client.flush(timeout=5)
        assert client.last_error is None
        # (nats-py closes the connection on a permissions error, with nats-server too)
        await svc.publish("anything", b"x")
        assert 'permissions violation for publish to "anything"' in (await last_error(svc)).lower()
        await client.subscribe("req.secret")
        assert 'permissions violation for subscription to "req.secret"' in (await last_error(client)).lower()
        await svc.close()
        await client.close()

    run(main())


async def test_allow_responses_counts_and_expiry(start_server, raw_connect):
    users = [
        User("req", "pw"),
        User("rsp", "pw", Permissions({"subscribe": ["svc"], "allow_responses": {"max": 2, "expires": "300ms"}})),
    ]
    server = await start_server(users=users)
    rsp = await raw_connect(server)
    await rsp.read_info()
    await rsp.send(connect_line(user="rsp", **{"pass": "pw"}) + b"SUB svc 1\r\n")
    await rsp.ping()
    req = await raw_connect(server)
    await req.read_info()
    await req.send(connect_line(user="req", **{"pass": "pw"}) + b"SUB r.* 1\r\nPUB svc r.1 0\r\n\r\n"
                   b"PUB svc r.2 0\r\n\r\n")
    await req.ping()
    assert await rsp.ping() == b"MSG svc 1 r.1 0\r\n\r\nMSG svc 1 r.2 0\r\n\r\n"
    await rsp.send(b"PUB r.1 1\r\na\r\nPUB r.1 1\r\nb\r\nPUB r.1 1\r\nc\r\n")
    assert await rsp.ping() == b"-ERR 'Permissions Violation for Publish to \"r.1\"'\r\n"
    await trio.sleep(0.4)  # r.2 expired
    await rsp.send(b"PUB r.2 1\r\nd\r\n")
    assert await rsp.ping() == b"-ERR 'Permissions Violation for Publish to \"r.2\"'\r\n"
    assert await req.ping() == b"MSG r.1 1 1\r\na\r\nMSG r.1 1 1\r\nb\r\n"


async def test_permission_checks_cost_nothing_without_permissions(start_server, raw_connect):
    server = await start_server(users=[User("free", "pw"), User("ltd", "pw", Permissions({"publish": ["a"]}))])
    for name, expect_perms in (("free", False), ("ltd", True)):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(connect_line(user=name, **{"pass": "pw"}))
        await client.ping()
        conn = server.clients[max(server.clients)]
        assert (conn.perms is not None) is expect_perms
        assert conn.deliver_filter is None


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"CONNECT {not json}\r\nPING\r\n", b""),
        (b'CONNECT {"user": 5, "pass": "p"}\r\nPING\r\n', b""),
        (b'CONNECT {"user": "u", "pass": ["p"]}\r\nPING\r\n', b""),
        (b'CONNECT {"auth_token": {"a": 1}}\r\nPING\r\n', b""),
        (b'CONNECT {"user": "u\\u0000", "pass": "p"}\r\nPING\r\n', b"-ERR 'Authorization Violation'\r\n"),
        (b'CONNECT {"user": "' + b"u" * 4000 + b'", "pass": "p"}\r\nPING\r\n', b"-ERR 'Authorization Violation'\r\n"),
        (b'CONNECT {"pass": "' + b"p" * 10000 + b'"}\r\nPING\r\n', b"-ERR 'maximum control line exceeded'\r\n"),
        (b"PUB foo 0\r\n\r\n", b"-ERR 'Authorization Violation'\r\n"),
        (b"\x00\x01\x02\r\n", b"-ERR 'Authorization Violation'\r\n"),
    ],
)
async def test_bad_connect_is_refused_and_nothing_else_is_affected(start_server, raw_connect, data, expected):
    server = await start_server(username="u", password="p")
    good = await raw_connect(server)
    await good.read_info()
    await good.send(connect_line(user="u", **{"pass": "p"}) + b"SUB x 1\r\n")
    await good.ping()
    bad = await raw_connect(server)
    await bad.read_info()
    await bad.send(data)
    with trio.fail_after(5):
        assert await bad.read_until_eof() == expected
    await good.send(b"PUB x 2\r\nok\r\n")
    assert await good.ping() == b"MSG x 1 2\r\nok\r\n"


# -- reload ------------------------------------------------------------------------------------


async def test_reload_applies_users_and_permissions(tmp_path, raw_connect):
    conf = tmp_path / "auth.conf"
    conf.write_text('listen: 127.0.0.1:-1\nauthorization { users: [ {user: a, password: a}, '
                    '{user: b, password: b, permissions: {publish: "x"}} ] }\n')
    flags = {"config_file": str(conf)}
    options = build_options(flags).copy(quiet=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            server.command_line = CommandLine(flags)
            a = await raw_connect(server)
            await a.read_info()
            await a.send(connect_line(user="a", **{"pass": "a"}))
            assert await a.ping() == b""
            b = await raw_connect(server)
            await b.read_info()
            await b.send(connect_line(user="b", **{"pass": "b"}) + b"PUB y 0\r\n\r\n")
            assert await b.ping() == b"-ERR 'Permissions Violation for Publish to \"y\"'\r\n"
            # a goes away, b may now publish to y only, c appears.
            conf.write_text('listen: 127.0.0.1:-1\nauthorization { users: [ {user: c, password: c}, '
                            '{user: b, password: b, permissions: {publish: "y"}} ] }\n')
            _signals.reload(server)
            assert await a.read_until_eof() == b"-ERR 'Authorization Violation'\r\n"
            await b.send(b"PUB y 0\r\n\r\nPUB x 0\r\n\r\n")
            assert await b.ping() == b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
            c = await raw_connect(server)
            await c.read_info()
            await c.send(connect_line(user="c", **{"pass": "c"}))
            assert await c.ping() == b""
            a2 = await raw_connect(server)
            await a2.read_info()
            await a2.send(connect_line(user="a", **{"pass": "a"}))
            assert await a2.read_until_eof() == b"-ERR 'Authorization Violation'\r\n"
            await server.shutdown()


# -- against nats-server ---------------------------------------------------------------------------


@needs_nats_server
def test_single_user_permissions_are_ignored_as_in_nats_server(tmp_path):
    config = 'authorization { user: a, password: b, permissions { publish: "x" } }\n'
    results = {}
    for kind in ("nats-server", "natserver"):
        with running(kind, config, tmp_path) as port:
            info, data, eof = exchange(port, connect_line(user="a", **{"pass": "b"}) + b"PUB y 1\r\nx\r\nPING\r\n")
            results[kind] = (info_shape(info), data, eof)
    assert results["natserver"] == results["nats-server"]
    assert results["nats-server"][1] == b"PONG\r\n"


@needs_nats_server
def test_bcrypt_users_and_tokens_as_nats_server(tmp_path):
    token_hash = bcrypt.hashpw(b"tok", bcrypt.gensalt(rounds=4)).decode()
    configs = [
        f'authorization {{ users: [ {{user: alice, password: "{HASH}"}}, {{user: bob, password: plain}} ] }}\n',
        f'authorization {{ token: "{token_hash}" }}\n',
    ]
    attempts = [
        connect_line(user="alice", **{"pass": "s3cret"}),
        connect_line(user="alice", **{"pass": HASH}),
        connect_line(user="bob", **{"pass": "plain"}),
        connect_line(user="carol", **{"pass": "plain"}),
        connect_line(auth_token="tok"),
        connect_line(auth_token=token_hash),
        connect_line(),
    ]
    for config in configs:
        results = {}
        for kind in ("nats-server", "natserver"):
            with running(kind, config, tmp_path) as port:
                results[kind] = [exchange(port, line + b"PING\r\n", quiet=0.2)[1:] for line in attempts]
        assert results["natserver"] == results["nats-server"]


def test_startup_errors_as_nats_server(tmp_path):
    from tests.auth.test_auth_helpers import HAVE_NATS_SERVER, start_error

    configs = [
        "authorization { user: a, token: t }\n",
        "authorization { users: [ {user: a} ], token: t }\n",
        "authorization { users: [ {password: x} ] }\n",
        'authorization { users: [ {user: a, permissions: {publish: {allow: "a", nope: "b"}}} ] }\n',
        'authorization { users: [ {user: a, permissions: {publish: "a..b"}} ] }\n',
        'authorization { users: [ {user: a, permissions: {bogus: "x"}} ] }\n',
        "authorization { users: [ {user: a}, {user: b} ] }\nno_auth_user: c\n",
        "authorization { user: a, password: b }\nno_auth_user: a\n",
    ]
    for config in configs:
        ours = start_error("natserver", config, tmp_path).replace("natserver: ", "").split(": ", 1)[-1]
        if HAVE_NATS_SERVER:
            theirs = start_error("nats-server", config, tmp_path).replace("nats-server: ", "").split(": ", 1)[-1]
            assert ours == theirs, config
        else:
            assert ours
