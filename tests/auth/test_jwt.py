"""JWTs and operator mode with the memory resolver: decoding and verification, user JWTs with
signed nonces, expiry, revocation, signing keys, limits, imports/exports between account JWTs,
nats-py with a .creds file; and the same configuration against nats-server."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time

import nats
import pytest
import trio

from natserver.auth import jwt as _jwt
from natserver.auth import nkeys as _nkeys
from natserver.auth.jwt import JWTError, OperatorTree, creds, decode, encode
from natserver.config.mapping import ConfigFileError, options_from_file
from tests.auth.test_auth_helpers import connect_line, exchange, info_shape, needs_nats_server, running

TIMEOUT = 20


def sig_for(key: _nkeys.KeyPair, nonce: str) -> str:
    return base64.urlsafe_b64encode(key.sign(nonce.encode())).rstrip(b"=").decode()


def jwt_connect(token: str, key: _nkeys.KeyPair | None, **extra):
    def make(info: dict) -> bytes:
        fields = {"jwt": token, **extra}
        if key is not None:
            fields["sig"] = sig_for(key, info["nonce"])
        return connect_line(**fields) + b"PING\r\n"

    return make


# -- JWTs ---------------------------------------------------------------------------------------


def test_encode_decode_and_tampering():
    account = _nkeys.create_account()
    user = _nkeys.create_user()
    token = encode({"sub": user.public_key.decode(), "name": "u", "nats": {"type": "user", "version": 2}}, account)
    claims = decode(token, expect="user")
    assert (claims.subject, claims.issuer, claims.name) == (user.public_key.decode(), account.public_key.decode(), "u")
    assert claims.time_error() is None
    header, payload, signature = token.split(".")
    forged = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged["name"] = "admin"
    forged_payload = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    bad = [
        f"{header}.{forged_payload}.{signature}",  # changed claims
        f"{header}.{payload}",  # two chunks
        f"{header}.{payload}.{signature[:-4]}",  # short signature
        f"{header}.{payload}.{signature}=",  # padding
        "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9." + payload + "." + signature,  # alg HS256
        "not a jwt",
        "",
        "a.b.c",
    ]
    for token_ in bad:
        with pytest.raises(JWTError):
            decode(token_, expect="user")
    with pytest.raises(JWTError, match="not an account claim"):
        decode(token, expect="account")
    # A user JWT issued by a user key (not an account) is refused.
    other = _nkeys.create_user()
    wrong_issuer = encode({"sub": user.public_key.decode(), "nats": {"type": "user", "version": 2}}, other)
    with pytest.raises(JWTError, match="issuer"):
        decode(wrong_issuer, expect="user")


def test_expiry_and_not_before():
    account, user = _nkeys.create_account(), _nkeys.create_user()
    now = int(time.time())
    expired = decode(encode({"sub": user.public_key.decode(), "exp": now - 10, "nats": {"type": "user", "version": 2}}, account))
    future = decode(encode({"sub": user.public_key.decode(), "nbf": now + 100, "nats": {"type": "user", "version": 2}}, account))
    assert expired.time_error() == "claim is expired"
    assert future.time_error() == "claim is not yet valid"


# -- operator mode ---------------------------------------------------------------------------------


@pytest.fixture
def tree():
    tree = OperatorTree()
    tree.account("A", exports=[{"subject": "pub.>", "type": "stream"}, {"subject": "svc", "type": "service"}],
                 revocations={})
    tree.account("B", imports=[{"subject": "pub.>", "account": None, "type": "stream", "local_subject": "a.>"},
                               {"subject": "svc", "account": None, "type": "service", "local_subject": "asvc"}],
                 limits={"conn": 2, "subs": 3, "payload": 16, "imports": -1, "exports": -1, "wildcards": True,
                         "data": -1, "leaf": -1})
    key_a = tree.accounts["A"][0].public_key.decode()
    for imp in tree.accounts["B"][1]["nats"]["imports"]:
        imp["account"] = key_a
    return tree


async def start_operator_server(start_server, tree, tmp_path, extra: str = ""):
    path = tmp_path / "op.conf"
    path.write_text(tree.config() + extra)
    options = options_from_file(path)
    return await start_server(trusted_operators=options.trusted_operators, resolver=options.resolver,
                              resolver_preload=options.resolver_preload)


async def jwt_client(raw_connect, server, token, key, **extra) -> tuple:
    client = await raw_connect(server)
    info = await client.read_info()
    await client.send(jwt_connect(token, key, **extra)(info))
    with trio.fail_after(5):
        data = await client.read_until(b"\r\n")
    return client, data


async def test_user_jwt_connects_and_bad_ones_are_refused(start_server, raw_connect, tree, tmp_path):
    server = await start_operator_server(start_server, tree, tmp_path)
    token, key = tree.user("A", "alice")
    now = int(time.time())
    client, data = await jwt_client(raw_connect, server, token, key)
    assert data == b"PONG\r\n"
    assert server.clients[max(server.clients)].account.name == tree.accounts["A"][0].public_key.decode()
    violation = b"-ERR 'Authorization Violation'\r\n"
    other = _nkeys.create_user()
    stranger = OperatorTree()
    stranger.account("X")
    stranger_token, stranger_key = stranger.user("X")
    expired, expired_key = tree.user("A", "old", exp=now - 5)
    early, early_key = tree.user("A", "early", nbf=now + 300)
    elsewhere, elsewhere_key = tree.user("A", "remote", src=["10.99.0.0/16"])
    cases = [
        (token, other),  # someone else's signature
        (token, None),  # no signature
        (expired, expired_key),
        (early, early_key),
        (stranger_token, stranger_key),  # an account this operator does not know
        (elsewhere, elsewhere_key),  # src networks
        ("eyJhbGciOiJub25lIn0.e30.", None),
        (token[:-10], key),
    ]
    for bad_token, bad_key in cases:
        client, data = await jwt_client(raw_connect, server, bad_token, bad_key)
        assert data == violation, bad_token
    client = await raw_connect(server)
    await client.read_info()
    await client.send(connect_line() + b"PING\r\n")  # no JWT at all
    assert await client.read_until(b"\r\n") == violation


async def test_expiry_while_connected(start_server, raw_connect, tree, tmp_path):
    server = await start_operator_server(start_server, tree, tmp_path)
    token, key = tree.user("A", "brief", exp=int(time.time()) + 2)  # (whole seconds: 1-2 s from now)
    client, data = await jwt_client(raw_connect, server, token, key)
    assert data == b"PONG\r\n"
    with trio.fail_after(4):
        assert await client.read_until_eof() == b"-ERR 'User Authentication Expired'\r\n"


async def test_revocation_bearer_tokens_and_signing_keys(start_server, raw_connect, tree, tmp_path):
    signer = _nkeys.create_account()
    scoped = _nkeys.create_account()
    key_a, claims_a, _ = tree.accounts["A"]
    claims_a["nats"]["signing_keys"] = [
        signer.public_key.decode(),
        {"kind": "user_scope", "key": scoped.public_key.decode(), "role": "r",
         "template": {"pub": {"allow": ["user.{{name()}}.>"]}, "sub": {"allow": ["user.{{name()}}.>"]},
                      "subs": -1, "payload": -1, "data": -1}},
    ]
    revoked_token, revoked_key = tree.user("A", "gone", iat=int(time.time()) - 100)
    revoked_subject = decode(revoked_token).subject
    claims_a["nats"]["revocations"] = {revoked_subject: int(time.time()) - 10}
    server = await start_operator_server(start_server, tree, tmp_path)
    _, data = await jwt_client(raw_connect, server, revoked_token, revoked_key)
    assert data == b"-ERR 'Authorization Violation'\r\n"
    bearer, _ = tree.user("A", "bearer", bearer_token=True)
    _, data = await jwt_client(raw_connect, server, bearer, None)
    assert data == b"PONG\r\n"
    by_signer, signer_user = tree.user("A", "delegate", signer=signer)
    _, data = await jwt_client(raw_connect, server, by_signer, signer_user)
    assert data == b"PONG\r\n"
    templated, templated_key = tree.user("A", "bob", signer=scoped, pub={}, sub={})
    client, data = await jwt_client(raw_connect, server, templated, templated_key)
    assert data == b"PONG\r\n"
    await client.send(b"SUB user.bob.x 1\r\nSUB user.eve.x 2\r\nPUB user.bob.x 1\r\n!\r\n")
    assert await client.ping() == (b"-ERR 'Permissions Violation for Subscription to \"user.eve.x\"'\r\n"
                                   b"MSG user.bob.x 1 1\r\n!\r\n")
    # A scoped signing key's users may not carry their own permissions.
    with_perms, with_perms_key = tree.user("A", "bob", signer=scoped, pub={"allow": [">"]})
    _, data = await jwt_client(raw_connect, server, with_perms, with_perms_key)
    assert data == b"-ERR 'Authorization Violation'\r\n"


async def test_permissions_limits_and_imports(start_server, raw_connect, tree, tmp_path):
    server = await start_operator_server(start_server, tree, tmp_path)
    a_token, a_key = tree.user("A", "producer", pub={"allow": ["pub.>", "_INBOX.>"]}, sub={"allow": ["svc"]},
                               resp={"max": 1, "ttl": 0})
    b_token, b_key = tree.user("B", "consumer")
    producer, data = await jwt_client(raw_connect, server, a_token, a_key)
    assert data == b"PONG\r\n"
    consumer, data = await jwt_client(raw_connect, server, b_token, b_key)
    assert data == b"PONG\r\n"
    await producer.send(b"SUB svc 1\r\nPUB other 0\r\n\r\n")
    assert await producer.ping() == b"-ERR 'Permissions Violation for Publish to \"other\"'\r\n"
    await consumer.send(b"SUB a.> 1\r\nSUB r 2\r\nPUB asvc r 3\r\nreq\r\n")
    await consumer.ping()
    got = await producer.ping()
    assert got.startswith(b"MSG svc 1 _R_.")  # (no headers: no Nats-Request-Info)
    reply = got.split(b" ")[3]
    await producer.send(b"PUB pub.x 2\r\nhi\r\nPUB " + reply + b" 2\r\nok\r\n")
    await producer.ping()
    assert await consumer.ping() == b"MSG a.x 1 2\r\nhi\r\nMSG r 2 2\r\nok\r\n"
    # Account B's limits: 3 subscriptions (2 used), 16 bytes of payload, 2 connections.
    await consumer.send(b"SUB s3 3\r\nSUB s4 4\r\n")
    assert await consumer.ping() == b"-ERR 'maximum subscriptions exceeded'\r\n"
    second, data = await jwt_client(raw_connect, server, b_token, b_key)
    assert data == b"PONG\r\n"
    _, data = await jwt_client(raw_connect, server, b_token, b_key)
    assert data == b"-ERR 'maximum account active connections exceeded'\r\n"
    await second.send(b"PUB x 17\r\n" + b"y" * 17 + b"\r\n")
    with trio.fail_after(5):
        assert await second.read_until_eof() == b"-ERR 'Maximum Payload Violation'\r\n"


async def test_account_jwt_mappings_apply(start_server, raw_connect, tree, tmp_path, caplog):
    tree.accounts["A"][1]["nats"]["mappings"] = {
        "foo": [{"subject": "bar", "weight": 100}],
        "old.*": [{"subject": "new.$1"}],  # no weight: 100, as the jwt library reads it
        "bad.*": [{"subject": "nowhere", "weight": 100}],  # skipped, as nats-server skips it
    }
    server = await start_operator_server(start_server, tree, tmp_path)
    token, key = tree.user("A")
    client, data = await jwt_client(raw_connect, server, token, key)
    assert data == b"PONG\r\n"
    await client.send(b"SUB > 1\r\nPUB foo 1\r\nx\r\nPUB old.y 1\r\ny\r\nPUB bad.z 1\r\nz\r\n")
    with trio.fail_after(5):
        await client.expect(b"MSG bar 1 1\r\nx\r\nMSG new.y 1 1\r\ny\r\nMSG bad.z 1 1\r\nz\r\n")
    assert any("mapping bad.* refused: invalid mapping destination" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "text, message",
    [
        ('resolver: URL("http://localhost:9090/jwt/v1/accounts/")', "supports only the MEMORY account resolver"),
        ("resolver: {type: full, dir: /tmp}", "supports only the MEMORY account resolver"),
        ("resolver_preload: { AXXX: notajwt }", "invalid account JWT"),
        ('operator: "/nonexistent/op.jwt"', "error parsing operator JWT: open /nonexistent/op.jwt"),
        ('trusted: "OXYZ"', 'trust key "OXYZ" required to be a valid public operator nkey'),
    ],
)
def test_operator_configuration_errors(tmp_path, text, message):
    path = tmp_path / "op.conf"
    path.write_text(text + "\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert any(message in error for error in info.value.errors), info.value.errors


def test_operator_needs_a_resolver(tmp_path, tree):
    path = tmp_path / "op.conf"
    path.write_text(f'operator: "{tree.operator_jwt}"\n')
    options = options_from_file(path)
    with pytest.raises(ValueError, match="operators require an account resolver to be configured"):
        options.validate()
    path.write_text(tree.config() + "authorization { users: [{user: a}] }\n")
    with pytest.raises(ValueError, match="operators do not allow users to be configured directly"):
        options_from_file(path).validate()


def test_nats_py_with_creds_file(threaded_server, tree, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nkeys", _nkeys)
    path = tmp_path / "op.conf"
    operator_file = tmp_path / "op.jwt"
    operator_file.write_text(tree.operator_jwt)
    path.write_text(tree.config(str(operator_file)))
    options = options_from_file(path)
    handle = threaded_server(trusted_operators=options.trusted_operators, resolver=options.resolver,
                             resolver_preload=options.resolver_preload)
    token, key = tree.user("A", "app")
    creds_file = tmp_path / "app.creds"
    creds_file.write_text(creds(token, key.seed))

    async def main():
        nc = await nats.connect(handle.url, user_credentials=str(creds_file), allow_reconnect=False,
                                connect_timeout=5)
        sub = await nc.subscribe("pub.hello")
        await nc.publish("pub.hello", b"jwt")
        assert (await sub.next_msg(timeout=5)).data == b"jwt"
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- against nats-server -------------------------------------------------------------------------


@needs_nats_server
def test_same_answers_as_nats_server(tmp_path, tree):
    now = int(time.time())
    good, good_key = tree.user("A", "alice", pub={"allow": ["pub.>"]})
    expired, expired_key = tree.user("A", "old", exp=now - 5)
    bearer, _ = tree.user("A", "bearer", bearer_token=True)
    b_token, b_key = tree.user("B", "bob")
    other = _nkeys.create_user()
    attempts = [
        jwt_connect(good, good_key),
        lambda i: jwt_connect(good, good_key)(i)[:-6] + b"PUB pub.x 0\r\n\r\nPUB nope 0\r\n\r\nPING\r\n",
        jwt_connect(good, other),
        jwt_connect(good, None),
        jwt_connect(expired, expired_key),
        jwt_connect(bearer, None),
        lambda i: connect_line(jwt=good, sig="%%%") + b"PING\r\n",
        lambda i: connect_line(jwt="garbage", sig="AAAA") + b"PING\r\n",
        lambda i: connect_line(user="a", **{"pass": "b"}) + b"PING\r\n",
        lambda i: jwt_connect(b_token, b_key)(i)[:-6] + b"SUB a.> 1\r\nSUB s2 2\r\nSUB s3 3\r\nSUB s4 4\r\nPING\r\n",
        lambda i: jwt_connect(b_token, b_key)(i)[:-6] + b"PUB x 17\r\n" + b"y" * 17 + b"\r\nPING\r\n",
    ]
    results = {}
    for kind in ("nats-server", "natserver"):
        with running(kind, tree.config(), tmp_path) as port:
            results[kind] = [(info_shape(info), data, eof)
                             for info, data, eof in (exchange(port, make, quiet=0.2) for make in attempts)]
    assert results["natserver"] == results["nats-server"]
    assert results["nats-server"][0][1] == b"PONG\r\n"
    assert json.dumps(_jwt.JWT_PREFIX) == '"eyJ"'
