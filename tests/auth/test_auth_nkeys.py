"""nkey users: the INFO nonce, Ed25519 signatures, the nkey encoding, and nats-py with nkeys."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys

import nats
import pytest
import trio

from natserver.auth import nkeys as _nkeys
from natserver.auth.users import NkeyUser, Permissions, User, decode_signature
from tests.auth.test_auth_helpers import SERVERS, connect_line, exchange, info_shape, needs_nats_server, running

TIMEOUT = 20


def sign(kp: _nkeys.KeyPair, nonce: str, urlsafe: bool = True) -> str:
    raw = kp.sign(nonce.encode())
    if urlsafe:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return base64.b64encode(raw).decode()


@pytest.fixture(scope="module")
def alice():
    return _nkeys.create_user()


# -- the encoding --------------------------------------------------------------------------------


def test_nkey_encoding_round_trip():
    for create, letter in ((_nkeys.create_user, "U"), (_nkeys.create_account, "A"), (_nkeys.create_operator, "O")):
        kp = create()
        public, seed = kp.public_key.decode(), kp.seed.decode()
        assert len(public) == 56 and public[0] == letter
        assert len(seed) == 58 and seed[:2] == "S" + letter
        again = _nkeys.from_seed(seed)
        assert again.public_key == kp.public_key
        assert _nkeys.is_valid_public_key(public, letter)
        assert not _nkeys.is_valid_public_key(public, "U" if letter != "U" else "A")
        signature = kp.sign(b"nonce")
        assert _nkeys.verify(public, b"nonce", signature)
        assert not _nkeys.verify(public, b"other", signature)
        assert _nkeys.from_public_key(public).verify(b"nonce", signature)


@pytest.mark.parametrize(
    "bad",
    ["", "U", "u" * 56, "UABC", "=" * 56, "U" + "A" * 55, "Ü" * 56, "U" * 200],
)
def test_bad_public_keys(bad):
    assert not _nkeys.is_valid_public_key(bad)
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_public_key(bad)


def test_checksum_and_prefix_are_checked():
    public = _nkeys.create_user().public_key.decode()
    flipped = public[:10] + ("A" if public[10] != "A" else "B") + public[11:]
    assert not _nkeys.is_valid_public_key(flipped)
    seed = _nkeys.create_user().seed
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_seed(public)  # a public key is not a seed
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_public_key(seed)


@pytest.mark.parametrize(
    "sig, ok",
    [("AAAA", True), ("AAAA====", False), ("A", False), ("!!!", False), ("a-_b", True), ("ab+/", True), ("", False),
     ("x" * 2000, False)],
)
def test_signature_decoding(sig, ok):
    assert (decode_signature(sig) is not None) == ok


def test_signature_length_is_checked(alice):
    signature = alice.sign(b"nonce")
    public = alice.public_key
    assert _nkeys.verify(public, b"nonce", signature)
    for wrong in (signature[:63], signature + b"\0", b"", signature[:32]):
        assert not _nkeys.verify(public, b"nonce", wrong)


# -- the server -----------------------------------------------------------------------------------


async def test_info_carries_a_fresh_nonce(start_server, raw_connect, alice):
    server = await start_server(nkeys=[NkeyUser(alice.public_key.decode())])
    nonces = set()
    for _ in range(3):
        client = await raw_connect(server)
        info = await client.read_info()
        assert re.fullmatch(r"[A-Za-z0-9_-]{15}", info["nonce"])
        # server.go Info: client_id, client_ip, nonce, then (2.11+) api_lvl and the xkey last.
        assert list(info)[-5:] == ["client_id", "client_ip", "nonce", "api_lvl", "xkey"]
        nonces.add(info["nonce"])
    assert len(nonces) == 3
    plain = await start_server(authorization="tok")
    client = await raw_connect(plain)
    assert "nonce" not in await client.read_info()


async def connect_nkey(raw_connect, server, make_connect) -> bytes:
    client = await raw_connect(server)
    info = await client.read_info()
    await client.send(make_connect(info["nonce"]) + b"PING\r\n")
    with trio.fail_after(5):
        return await _until_pong_or_eof(client)


async def _until_pong_or_eof(client) -> bytes:
    data = b""
    while not data.endswith(b"PONG\r\n"):
        if not await client._receive():
            data += bytes(client.buf)
            client.buf.clear()
            return data + b"<EOF>"
        data += bytes(client.buf)
        client.buf.clear()
    return data


async def test_signed_nonce_connects_and_bad_ones_are_refused(start_server, raw_connect, alice):
    public = alice.public_key.decode()
    other = _nkeys.create_user()
    server = await start_server(nkeys=[NkeyUser(public)], users=[User("bob", "pw")])
    violation = b"-ERR 'Authorization Violation'\r\n<EOF>"
    cases = [
        (lambda n: connect_line(nkey=public, sig=sign(alice, n)), b"PONG\r\n"),
        (lambda n: connect_line(nkey=public, sig=sign(alice, n, urlsafe=False)), b"PONG\r\n"),
        (lambda n: connect_line(user="bob", **{"pass": "pw"}), b"PONG\r\n"),
        (lambda n: connect_line(nkey=public), violation),  # no signature
        (lambda n: connect_line(nkey=public, sig=sign(other, n)), violation),  # someone else's key
        (lambda n: connect_line(nkey=public, sig=sign(alice, n + "x")), violation),  # another nonce
        (lambda n: connect_line(nkey=public, sig=base64.b64encode(alice.sign(n.encode())[:40]).decode()), violation),
        (lambda n: connect_line(nkey=public, sig=base64.b64encode(alice.sign(n.encode()) + b"\0").decode()), violation),
        (lambda n: connect_line(nkey=public, sig="!!not base64!!"), violation),
        (lambda n: connect_line(nkey=other.public_key.decode(), sig=sign(other, n)), violation),  # unknown nkey
        (lambda n: connect_line(nkey="U" + "A" * 3000, sig=sign(alice, n)), violation),  # long nkey
        (lambda n: connect_line(nkey=public, sig="A" * 3000), violation),  # long signature
        # Huge ones never get that far: the CONNECT line is over max_control_line.
        (lambda n: connect_line(nkey=public, sig="A" * 100_000), b"-ERR 'maximum control line exceeded'\r\n<EOF>"),
        (lambda n: connect_line(nkey=public, sig=sign(alice, n), user="bob", **{"pass": "pw"}), b"PONG\r\n"),
        (lambda n: connect_line(user="bob", **{"pass": "no"}), violation),
    ]
    for make, expected in cases:
        assert await connect_nkey(raw_connect, server, make) == expected
    # Nothing else was disturbed: a good client still works.
    assert await connect_nkey(raw_connect, server, cases[0][0]) == b"PONG\r\n"


async def test_nkey_user_permissions(start_server, raw_connect, alice):
    public = alice.public_key.decode()
    server = await start_server(nkeys=[NkeyUser(public, Permissions({"publish": ["ok.>"], "subscribe": ["ok.>"]}))])
    client = await raw_connect(server)
    info = await client.read_info()
    await client.send(connect_line(nkey=public, sig=sign(alice, info["nonce"])) + b"SUB ok.1 1\r\nSUB no 2\r\n"
                      b"PUB ok.1 1\r\nx\r\nPUB no 1\r\ny\r\n")
    assert await client.ping() == (b"-ERR 'Permissions Violation for Subscription to \"no\"'\r\n"
                                   b"MSG ok.1 1 1\r\nx\r\n-ERR 'Permissions Violation for Publish to \"no\"'\r\n")
    assert server.clients[max(server.clients)].user == public


def test_nats_py_with_nkeys_seed(threaded_server, monkeypatch, alice):
    # nats-py signs with the ``nkeys`` package; natserver.auth.nkeys speaks its API.
    monkeypatch.setitem(sys.modules, "nkeys", _nkeys)
    handle = threaded_server(nkeys=[NkeyUser(alice.public_key.decode())])

    async def main():
        nc = await nats.connect(handle.url, nkeys_seed_str=alice.seed.decode(), allow_reconnect=False,
                                connect_timeout=5)
        sub = await nc.subscribe("x")
        await nc.publish("x", b"signed")
        assert (await sub.next_msg(timeout=5)).data == b"signed"
        await nc.close()
        with pytest.raises(Exception):  # noqa: B017 (nats-py raises several kinds for a refused handshake)
            await nats.connect(handle.url, nkeys_seed_str=_nkeys.create_user().seed.decode(), allow_reconnect=False,
                               connect_timeout=2, max_reconnect_attempts=0)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_config_nkey_users(tmp_path, alice):
    from natserver.config.mapping import ConfigFileError, options_from_file

    public = alice.public_key.decode()
    path = tmp_path / "n.conf"
    path.write_text(f'authorization {{ users: [ {{nkey: "{public}", permissions: {{publish: "a"}}}}, '
                    '{user: bob, password: pw} ] }\n')
    options = options_from_file(path)
    assert [u.nkey for u in options.nkeys] == [public]
    assert [u.username for u in options.users] == ["bob"]
    for entry, message in (
        ('{nkey: "UABC"}', "Not a valid public nkey for a user"),
        (f'{{nkey: "{_nkeys.create_account().public_key.decode()}"}}', "Not a valid public nkey for a user"),
        (f'{{nkey: "{public}", user: x}}', "Nkey users do not take usernames or passwords"),
        ("{password: x}", "User entry requires a user"),
    ):
        path.write_text(f"authorization {{ users: [ {entry} ] }}\n")
        with pytest.raises(ConfigFileError, match=re.escape(message)):
            options_from_file(path)


# -- against nats-server ----------------------------------------------------------------------------


def _transcripts(port: int, alice, other) -> list:
    public = alice.public_key.decode()
    out = []
    for make in (
        lambda i: connect_line(nkey=public, sig=sign(alice, i["nonce"])) + b"PING\r\n",
        lambda i: connect_line(nkey=public, sig=sign(alice, i["nonce"], urlsafe=False)) + b"PING\r\n",
        lambda i: connect_line(nkey=public) + b"PING\r\n",
        lambda i: connect_line(nkey=public, sig=sign(other, i["nonce"])) + b"PING\r\n",
        lambda i: connect_line(nkey=public, sig=base64.b64encode(alice.sign(i["nonce"].encode())[:63]).decode())
        + b"PING\r\n",
        lambda i: connect_line(nkey=public, sig="%%%") + b"PING\r\n",
        lambda i: connect_line(nkey="UABC", sig="AAAA") + b"PING\r\n",
        lambda i: connect_line(nkey=public, sig=sign(alice, i["nonce"])) + b"SUB p.1 1\r\nPUB p.1 1\r\nx\r\nPUB q 0\r\n"
        b"\r\nSUB q 2\r\nPING\r\n",
        lambda i: connect_line(user="bob", **{"pass": "pw"}) + b"PING\r\n",
        lambda i: b'CONNECT {"nkey": 5}\r\nPING\r\n',
        lambda i: b"CONNECT {bad json\r\nPING\r\n",
        lambda i: b"PING\r\n",
    ):
        info, data, eof = exchange(port, make)
        out.append((info_shape(info), data, eof))
    return out


@needs_nats_server
def test_same_answers_as_nats_server(tmp_path, alice):
    public = alice.public_key.decode()
    other = _nkeys.create_user()
    config = (f'authorization {{ users: [ {{nkey: "{public}", permissions: {{publish: ["p.>"], subscribe: "p.>"}}}}'
              ", {user: bob, password: pw} ] }\n")
    results = {}
    for kind in SERVERS:
        with running(kind, config, tmp_path) as port:
            results[kind] = _transcripts(port, alice, other)
    assert results["natserver"] == results["nats-server"]
    assert json.dumps(results["nats-server"][0][1].decode()) == '"PONG\\r\\n"'


async def test_no_auth_user_may_name_an_nkey(start_server, raw_connect, alice):
    """nats-server 2.10+ (auth.go validateNoAuthUser): a client with no credentials becomes the
    nkey user no_auth_user names, without signing the nonce; a wrong signature of another key
    still fails."""
    public = alice.public_key.decode()
    server = await start_server(nkeys=[NkeyUser(public)], no_auth_user=public)
    client = await raw_connect(server)
    info = await client.read_info()
    assert "auth_required" not in info
    await client.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
    with trio.fail_after(5):
        assert await _until_pong_or_eof(client) == b"PONG\r\n"
    assert [c.nkey for c in server.clients.values()] == [public]


def test_no_auth_user_must_name_a_user_or_an_nkey():
    import natserver

    with pytest.raises(ValueError, match='not present as user or nkey in authorization block'):
        natserver.Options(nkeys=[NkeyUser("UABC")], no_auth_user="nobody").validate()
