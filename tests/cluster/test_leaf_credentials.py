"""A natserver leaf dials a nats-server hub in operator (JWT) mode with a remote's
``credentials`` file: the hub's nonce is signed with the file's nkey seed."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
import trio

import natserver
from natserver.auth import jwt, nkeys
from natserver.cluster.protocol import RouteProtocolError
from natserver.cluster.routes import leaf_credentials
from natserver.config.mapping import options_from_file
from tests.cluster.helpers import NATS_SERVER, STEP_TIMEOUT, connect, free_port, read_msgs, skip_without_nats_server
from tests.conftest import RawClient, make_options


async def connect_with_jwt(port: int, token: str, key: nkeys.KeyPair) -> RawClient:
    """A raw client authenticated by user JWT and signed nonce."""
    client = RawClient(await trio.open_tcp_stream("127.0.0.1", port))
    info = await client.read_info()
    sig = base64.urlsafe_b64encode(key.sign(info["nonce"].encode())).rstrip(b"=").decode()
    connect_fields = {"verbose": False, "pedantic": False, "protocol": 1, "jwt": token, "sig": sig}
    await client.send(b"CONNECT " + json.dumps(connect_fields).encode() + b"\r\n")
    assert b"-ERR" not in await client.ping()
    return client


def test_remote_credentials_config(tmp_path):
    conf = tmp_path / "leaf.conf"
    conf.write_text('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", credentials: "/x.creds" } ] }\n')
    options = options_from_file(str(conf))
    assert options.leafnode_remotes == [{"urls": ["nats://127.0.0.1:7422"], "account": "", "credentials": "/x.creds"}]


def test_leaf_credentials_sign_the_nonce(tmp_path):
    tree = jwt.OperatorTree()
    tree.account("A")
    token, key = tree.user("A", "leaf")
    path = tmp_path / "leaf.creds"
    path.write_text(jwt.creds(token, key.seed))
    fields = leaf_credentials(str(path), "abcNONCE")
    assert fields["jwt"] == token
    padded = fields["sig"] + "=" * (-len(fields["sig"]) % 4)
    assert nkeys.verify(key.public_key, b"abcNONCE", base64.urlsafe_b64decode(padded))
    with pytest.raises(RouteProtocolError):
        leaf_credentials(str(tmp_path / "missing.creds"), "n")


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_natserver_leaf_with_credentials_of_an_operator_mode_hub(nursery, tmp_path):
    tree = jwt.OperatorTree()
    tree.account("A")
    token, key = tree.user("A", "leaf")
    client_token, client_key = tree.user("A", "client")
    creds = tmp_path / "leaf.creds"
    creds.write_text(jwt.creds(token, key.seed))
    hub_port, leaf_port = free_port(), free_port()
    conf = tmp_path / "hub.conf"
    conf.write_text(f"listen: 127.0.0.1:{hub_port}\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n" + tree.config())
    hub = subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        leaf = await nursery.start(natserver.serve, make_options(
            leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{leaf_port}"], "account": "", "credentials": str(creds)}]))
        with trio.fail_after(STEP_TIMEOUT):
            while not leaf.cluster.leafs:
                await trio.sleep(0.01)
        on_leaf = await connect(leaf.port)
        await on_leaf.send(b"SUB down 1\r\n")
        await on_leaf.ping()
        # A client of account A on the hub: its messages reach the leaf, bound to A there.
        on_hub = await connect_with_jwt(hub_port, client_token, client_key)
        with trio.fail_after(STEP_TIMEOUT):
            got = b""
            while b"MSG down" not in got:
                await on_hub.send(b"PUB down 3\r\nyes\r\n")
                got += await on_leaf.nothing_within(0.05)
        assert b"MSG down 1 3\r\nyes\r\n" in got
        await on_hub.send(b"SUB up 1\r\n")
        await on_hub.ping()
        (link,) = leaf.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while not any(entry[1] == b"up" for entry in link.entries):
                await trio.sleep(0.01)
        await on_leaf.send(b"PUB up 2\r\nhi\r\n")
        assert await read_msgs(on_hub, 1) == [b"MSG up 1 2\r\nhi\r\n"]
    finally:
        hub.terminate()
        hub.wait(5)
