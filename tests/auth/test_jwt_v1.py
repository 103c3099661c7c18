"""Version 1 JWTs (issue #19): nats-io/jwt, the library nats-server 2.9.10 uses, takes a
claim's version from the claims (a top-level ``type`` is version 1, otherwise
``nats.version``), and a version 1 signature covers the payload chunk only. Tokens here are
made by a version 1 signer written for the test (the 2019 format: ``"alg":"ed25519"``, top-level
``type``, ``issuer_account`` and ``tags``, ``src`` as one comma-separated string)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
import time

import nats
import pytest

from natserver.auth import nkeys as _nkeys
from natserver.auth.jwt import JWTError, creds, decode, encode
from natserver.config.mapping import ConfigFileError, options_from_file
from tests.auth.test_auth_helpers import exchange, info_shape, needs_nats_server, running
from tests.auth.test_jwt import jwt_connect

TIMEOUT = 20


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def encode_v1(claims: dict, signer: _nkeys.KeyPair, *, sign_header_too: bool = False) -> str:
    """A version 1 JWT, as nats-io/jwt v1 (2019) wrote them: the signature covers the
    payload chunk alone (``sign_header_too`` makes a wrongly signed one)."""
    body = dict(claims)
    body.setdefault("iat", int(time.time()))
    body["iss"] = signer.public_key.decode()
    body["jti"] = base64.b32encode(hashlib.sha256(json.dumps(body).encode()).digest()).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "jwt", "alg": "ed25519"}).encode())
    payload = _b64(json.dumps(body).encode())
    signed = f"{header}.{payload}" if sign_header_too else payload
    return f"{header}.{payload}.{_b64(signer.sign(signed.encode()))}"


class V1Tree:
    """An operator, two accounts (A exports a stream, B imports it) and their users, all v1."""

    def __init__(self) -> None:
        self.operator = _nkeys.create_operator()
        self.a, self.b = _nkeys.create_account(), _nkeys.create_account()
        self.a_signing = _nkeys.create_account()

    @property
    def operator_jwt(self) -> str:
        return encode_v1({"sub": self.operator.public_key.decode(), "name": "OP2019", "type": "operator",
                          "nats": {"signing_keys": []}}, self.operator)

    def account_jwt(self, key, name: str, **nats_fields) -> str:
        nats_claims = {"limits": {"subs": -1, "conn": -1, "leaf": -1, "imports": -1, "exports": -1, "data": -1,
                                  "payload": -1, "wildcards": True}, **nats_fields}
        return encode_v1({"sub": key.public_key.decode(), "name": name, "type": "account", "nats": nats_claims},
                         self.operator)

    def preload(self) -> dict:
        a = self.account_jwt(self.a, "A", exports=[{"name": "news", "subject": "news.>", "type": "stream"}],
                             signing_keys=[self.a_signing.public_key.decode()])
        b = self.account_jwt(self.b, "B", imports=[{"name": "news", "subject": "news.>", "account":
                                                    self.a.public_key.decode(), "type": "stream"}])
        return {self.a.public_key.decode(): a, self.b.public_key.decode(): b}

    def user(self, account, *, signer=None, **nats_fields) -> tuple[str, _nkeys.KeyPair]:
        key = _nkeys.create_user()
        claims = {"sub": key.public_key.decode(), "name": "u", "type": "user",
                  "nats": {"pub": {}, "sub": {}, **nats_fields}}
        if signer is not None:
            claims["issuer_account"] = account.public_key.decode()  # top level in version 1
        return encode_v1(claims, signer or account), key

    def config(self) -> str:
        lines = [f'operator: "{self.operator_jwt}"', "resolver: MEMORY", "resolver_preload: {"]
        lines += [f"  {k}: {v}" for k, v in self.preload().items()]
        return "\n".join(lines + ["}"]) + "\n"


@pytest.fixture
def tree() -> V1Tree:
    return V1Tree()


# -- decoding --------------------------------------------------------------------------------------


def test_v1_claims_decode_into_version_2_shape(tree):
    operator = decode(tree.operator_jwt, expect="operator")
    assert (operator.version, operator.type, operator.subject) == (1, "operator", tree.operator.public_key.decode())
    account = decode(tree.preload()[tree.a.public_key.decode()], expect="account")
    assert account.nats["exports"][0]["subject"] == "news.>" and account.type == "account"
    token, _ = tree.user(tree.a, signer=tree.a_signing, src="127.0.0.1/32, 10.0.0.0/8")
    user = decode(token, expect="user")
    assert user.nats["issuer_account"] == tree.a.public_key.decode()  # moved from the top level
    assert user.nats["src"] == "127.0.0.1/32, 10.0.0.0/8"
    activation = decode(encode_v1({"sub": tree.b.public_key.decode(), "type": "activation",
                                   "nats": {"subject": "news.>", "type": "stream"}}, tree.a), expect="activation")
    assert (activation.type, activation.nats["kind"]) == ("activation", "stream")


def test_signature_covers_what_the_version_says(tree):
    wrong = encode_v1({"sub": tree.operator.public_key.decode(), "type": "operator", "nats": {}}, tree.operator,
                      sign_header_too=True)
    with pytest.raises(JWTError, match="^claim failed V1 signature verification$"):
        decode(wrong)
    # A version 2 claim signed over the payload alone fails as version 2.
    key = _nkeys.create_operator()
    good = encode({"sub": key.public_key.decode(), "nats": {"type": "operator", "version": 2}}, key)
    header, payload, _ = good.split(".")
    bad = f"{header}.{payload}.{_b64(key.sign(payload.encode()))}"
    with pytest.raises(JWTError, match="^claim failed V2 signature verification$"):
        decode(bad)
    # The version comes from the claims, not the header's algorithm.
    v2_with_old_alg = encode({"sub": key.public_key.decode(), "nats": {"type": "operator", "version": 2}}, key)
    old_header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519"}).encode())
    body = v2_with_old_alg.split(".")[1]
    token = f"{old_header}.{body}.{_b64(key.sign(f'{old_header}.{body}'.encode()))}"
    assert decode(token).version == 2


@pytest.mark.parametrize("nats_fields, message", [
    ({"type": "user"}, "library supports version 2 or less - received 0"),
    ({"type": "account", "version": 0}, "library supports version 2 or less - received 0"),
    ({"type": "user", "version": 3}, "JWT was generated by a newer version "),
])  # fmt: skip
def test_claims_without_a_version_are_refused(nats_fields, message):
    account, user = _nkeys.create_account(), _nkeys.create_user()
    token = encode({"sub": user.public_key.decode(), "nats": nats_fields}, account)
    with pytest.raises(JWTError) as info:
        decode(token)
    assert str(info.value) == message


def test_v1_configuration_loads(tmp_path, tree):
    path = tmp_path / "v1.conf"
    path.write_text(tree.config())
    options = options_from_file(path)
    assert len(options.resolver_preload) == 2
    key = _nkeys.create_operator()
    unversioned = encode({"sub": key.public_key.decode(), "nats": {"type": "operator"}}, key)
    path.write_text(f'operator: "{unversioned}"\nresolver: MEMORY\n')
    with pytest.raises(ConfigFileError, match="error parsing operator JWT: library supports version 2 or less"):
        options_from_file(path)


# -- end to end ------------------------------------------------------------------------------------


def _nats_py_round_trip(url: str, creds_file: str, importer_creds: str, attempts: int = 1) -> list[bytes]:
    """The first message each of the two subscribers gets. With ``attempts`` the message is
    published again (half a second apart) until both have one: in one CI run of many,
    nats-server 2.9.10 left one of the two without the first message for 5 s (right after
    the connects), so its side of the test tries up to 5 times; natserver must deliver the
    first."""

    async def main() -> list[bytes]:
        publisher = await nats.connect(url, user_credentials=creds_file, allow_reconnect=False, connect_timeout=5)
        importer = await nats.connect(url, user_credentials=importer_creds, allow_reconnect=False, connect_timeout=5)
        own = await publisher.subscribe("news.today")
        imported = await importer.subscribe("news.>")
        await importer.flush()
        got: list = [None, None]
        for attempt in range(attempts):
            await publisher.publish("news.today", b"v1")
            wait = 5 if attempt == attempts - 1 else 0.5
            for k, sub in enumerate((own, imported)):
                if got[k] is None:
                    try:
                        got[k] = (await sub.next_msg(timeout=wait)).data
                    except nats.errors.TimeoutError:
                        if attempt == attempts - 1:
                            raise
            if None not in got:
                break
        await publisher.close()
        await importer.close()
        return got

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_nats_py_with_v1_creds(tmp_path, tree, monkeypatch):
    _check_nats_py_with_v1_creds(tmp_path, tree, "natserver", monkeypatch)


@needs_nats_server
def test_nats_py_with_v1_creds_against_nats_server(tmp_path, tree, monkeypatch):
    _check_nats_py_with_v1_creds(tmp_path, tree, "nats-server", monkeypatch)


def _check_nats_py_with_v1_creds(tmp_path, tree, kind, monkeypatch):
    monkeypatch.setitem(sys.modules, "nkeys", _nkeys)  # nats-py signs the nonce with the nkeys package
    publisher, publisher_key = tree.user(tree.a, signer=tree.a_signing, pub={"allow": ["news.>"]})
    importer, importer_key = tree.user(tree.b)
    (tmp_path / "a.creds").write_text(creds(publisher, publisher_key.seed))
    (tmp_path / "b.creds").write_text(creds(importer, importer_key.seed))
    with running(kind, tree.config(), tmp_path) as port:
        got = _nats_py_round_trip(
            f"nats://127.0.0.1:{port}", str(tmp_path / "a.creds"), str(tmp_path / "b.creds"),
            attempts=5 if kind == "nats-server" else 1,
        )
    assert got == [b"v1", b"v1"]


@needs_nats_server
def test_same_answers_as_nats_server(tmp_path, tree):
    good, good_key = tree.user(tree.a, pub={"allow": ["news.>"]}, src="127.0.0.1/32,10.0.0.0/8")
    elsewhere, elsewhere_key = tree.user(tree.a, src="10.1.0.0/16")
    wrong = encode_v1({"sub": _nkeys.create_user().public_key.decode(), "type": "user", "nats": {}}, tree.a,
                      sign_header_too=True)
    attempts = [
        jwt_connect(good, good_key),
        lambda i: jwt_connect(good, good_key)(i)[:-6] + b"PUB news.x 0\r\n\r\nPUB nope 0\r\n\r\nPING\r\n",
        jwt_connect(elsewhere, elsewhere_key),
        jwt_connect(wrong, _nkeys.create_user()),
    ]
    results = {}
    for kind in ("nats-server", "natserver"):
        with running(kind, tree.config(), tmp_path) as port:
            results[kind] = [(info_shape(info), data, eof)
                             for info, data, eof in (exchange(port, make, quiet=0.2) for make in attempts)]
    assert results["natserver"] == results["nats-server"]
    assert results["nats-server"][0][1] == b"PONG\r\n"
