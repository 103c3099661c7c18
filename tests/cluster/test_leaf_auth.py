"""Authorization on natserver's leaf node listener (auth.go isLeafNodeAuthorized):
``leafnodes { authorization { user, password, account, timeout, users [...] } }`` binds each
leaf to an account; without it, the clients' authorization (users, operator JWTs) applies."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest
import trio

import natserver
from natserver.auth import jwt
from natserver.auth.users import User
from natserver.config.mapping import ConfigFileError, options_from_file
from tests.cluster.helpers import (
    STEP_TIMEOUT,
    connect,
    nats_server_leaf,
    skip_without_nats_server,
    wait_leaf,
)
from tests.cluster.test_leaf_credentials import connect_with_jwt
from tests.conftest import RawClient, make_options

LEAF_CONNECT = b'CONNECT {"server_id":"LEAF1","name":"leaf1","headers":true%s}\r\n'


def accounts_ab() -> tuple[list, list]:
    """Accounts A and B, each with a user (a/a, b/b), as a config file makes them."""
    options = _options_from_text("accounts { A { users [ {user: a, password: a} ] }, "
                                 "B { users [ {user: b, password: b} ] } }\n")
    return options.accounts, options.users


def _options_from_text(text: str, tmp=None) -> natserver.Options:
    fd, path = tempfile.mkstemp(suffix=".conf", dir=tmp)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        return options_from_file(path)
    finally:
        os.unlink(path)


async def start_hub(nursery, **changes) -> natserver.Server:
    accounts, users = accounts_ab()
    changes.setdefault("accounts", accounts)
    changes.setdefault("users", users)
    return await nursery.start(natserver.serve, make_options(
        leafnode_port=-1, leafnode_host="127.0.0.1", no_system_account=True, **changes))


async def leaf_dial(hub: natserver.Server) -> tuple[RawClient, dict]:
    client = RawClient(await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port))
    return client, await client.read_info()


async def connect_with_password(port: int, user: str, password: str) -> RawClient:
    client = RawClient(await trio.open_tcp_stream("127.0.0.1", port))
    await client.read_info()
    fields = {"verbose": False, "pedantic": False, "protocol": 1, "user": user, "pass": password}
    await client.send(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")
    assert b"-ERR" not in await client.ping()
    return client


async def wait_leaf_interest(hub: natserver.Server, account: bytes, subject: bytes) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while not any((account, subject, None) in leaf.entries for leaf in hub.cluster.leafs.values()):
            await trio.sleep(0.01)


# -- configuration --------------------------------------------------------------------------------


def test_leafnode_authorization_config(tmp_path):
    options = _options_from_text(
        "accounts { A { users [ {user: a, password: a} ] } }\n"
        "leafnodes { listen: 127.0.0.1:7422, authorization { user: lu, password: lp, account: A, timeout: 3 } }\n",
        tmp_path)
    assert (options.leafnode_username, options.leafnode_password, options.leafnode_account) == ("lu", "lp", "A")
    assert options.leafnode_auth_timeout == 3.0
    options = _options_from_text(
        "accounts { A { users [ {user: a, password: a} ] } }\n"
        "leafnodes { authorization { users [ {user: x, password: y, account: A}, {user: z, password: w} ] } }\n",
        tmp_path)
    assert options.leafnode_users == [User("x", "y", account="A"), User("z", "w")]


@pytest.mark.parametrize(("block", "error"), [
    ("authorization { user: u, password: p, users [ {user: x, password: y} ] }",
     "can not have a single user/pass and a users array"),
    ("authorization { users [ {user: x, password: y}, {user: x, password: z} ] }",
     'duplicate user "x" detected in leafnode authorization'),
    ("authorization { token: t }", 'unknown field "token"'),
    ("authorization { users [ {user: x, permissions: {}} ] }", 'unknown field "permissions"'),
])
def test_leafnode_authorization_config_errors(tmp_path, block, error):
    with pytest.raises(ConfigFileError, match=error):
        _options_from_text(f"leafnodes {{ {block} }}\n", tmp_path)


def test_leafnode_authorization_account_must_exist():
    with pytest.raises(ValueError, match='cannot find local account "NOPE" specified in leafnode authorization'):
        make_options(leafnode_username="u", leafnode_account="NOPE").validate()
    with pytest.raises(ValueError, match='cannot find local account "NOPE"'):
        make_options(leafnode_users=[User("u", "p", account="NOPE")]).validate()


# -- the hub's answers (the bytes nats-server 2.9.10 sends) -----------------------------------------


async def test_wrong_credentials_get_authorization_violation_and_eof(nursery):
    hub = await start_hub(nursery, leafnode_users=[User("lu", "lp", account="A")])
    for extra in (b',"user":"lu","pass":"bad"', b',"user":"who","pass":"lp"', b""):
        leaf, info = await leaf_dial(hub)
        assert info["auth_required"] is True and info["nonce"]
        await leaf.send(LEAF_CONNECT % extra)
        await leaf.expect_eof(b"-ERR 'Authorization Violation'\r\n")
    assert not hub.cluster.leafs


async def test_a_leaf_user_binds_the_leaf_to_its_account(nursery):
    hub = await start_hub(nursery, leafnode_users=[User("lu", "lp", account="A"), User("gu", "gp")])
    on_a = await connect_with_password(hub.port, "a", "a")
    on_b = await connect_with_password(hub.port, "b", "b")
    await on_a.send(b"SUB in.a 1\r\n")
    await on_b.send(b"SUB in.a 1\r\n")
    await on_a.ping()
    await on_b.ping()
    leaf, _ = await leaf_dial(hub)
    await leaf.send(LEAF_CONNECT % b',"user":"lu","pass":"lp"')
    info = json.loads((await leaf.read_line())[5:])
    assert info["remote_account"] == "A" and info["connect_info"] is True
    # Account A's interest (and not B's: its in.a is another subject space) reaches the leaf,
    # with A's loop detection subject.
    told = {await leaf.read_line(), await leaf.read_line()}
    assert b"LS+ in.a\r\n" in told
    assert any(line.startswith(b"LS+ $LDS.") for line in told)
    await leaf.send(b"LS+ out.a\r\nLMSG in.a 2\r\nhi\r\n")
    await wait_leaf_interest(hub, b"A", b"out.a")
    assert await on_a.read_line() == b"MSG in.a 1 2\r\n"
    assert await on_b.nothing_within(0.1) == b""
    await on_b.send(b"PUB out.a 1\r\nb\r\n")
    await on_a.send(b"PUB out.a 1\r\na\r\n")
    assert await leaf.read_line() == b"LMSG out.a 1\r\n"
    assert await leaf.read_line() == b"a\r\n"
    (record,) = hub.cluster.leafz()["leafs"]
    assert record["account"] == "A"


async def test_single_leaf_user_and_the_auth_timeout(nursery):
    hub = await start_hub(nursery, leafnode_username="lu", leafnode_password="lp", leafnode_account="B",
                          leafnode_auth_timeout=0.3)
    leaf, _ = await leaf_dial(hub)
    await leaf.send(LEAF_CONNECT % b',"user":"lu","pass":"lp"')
    assert json.loads((await leaf.read_line())[5:])["remote_account"] == "B"
    idle, _ = await leaf_dial(hub)
    with trio.fail_after(STEP_TIMEOUT):
        await idle.expect_eof(b"-ERR 'Authentication Timeout'\r\n")


async def test_without_leaf_authorization_the_client_users_apply(nursery):
    hub = await start_hub(nursery)
    leaf, _ = await leaf_dial(hub)
    await leaf.send(LEAF_CONNECT % b',"user":"b","pass":"b"')
    assert json.loads((await leaf.read_line())[5:])["remote_account"] == "B"
    wrong, _ = await leaf_dial(hub)
    await wrong.send(LEAF_CONNECT % b',"user":"b","pass":"x"')
    await wrong.expect_eof(b"-ERR 'Authorization Violation'\r\n")
    # nats-server 2.9.10 binds a leaf that names no user to leafnodes' account (here $G).
    anonymous, _ = await leaf_dial(hub)
    await anonymous.send((LEAF_CONNECT % b"").replace(b"LEAF1", b"LEAF2"))
    assert json.loads((await anonymous.read_line())[5:])["remote_account"] == "$G"


async def test_a_user_not_allowed_leaf_connections_is_refused(nursery):
    hub = await start_hub(nursery, users=[User("std", "p", connection_types=frozenset({"STANDARD"}))])
    leaf, _ = await leaf_dial(hub)
    await leaf.send(LEAF_CONNECT % b',"user":"std","pass":"p"')
    await leaf.expect_eof(b"-ERR 'Authorization Violation'\r\n")


async def test_a_client_at_the_leaf_port_is_told_so(nursery):
    hub = await start_hub(nursery)
    client, _ = await leaf_dial(hub)
    await client.send(b'CONNECT {"lang":"python","verbose":false}\r\n')
    await client.expect_eof(b"-ERR 'attempted to connect to leaf node port'\r\n")


async def test_natserver_leaf_with_url_credentials_of_a_natserver_hub(nursery):
    hub = await start_hub(nursery, leafnode_users=[User("lu", "lp", account="A")])
    leaf = await nursery.start(natserver.serve, make_options(leafnode_remotes=[
        {"urls": [f"nats://lu:lp@127.0.0.1:{hub.cluster.leaf_port}"], "account": ""}]))
    on_leaf = await connect(leaf.port)
    await on_leaf.send(b"SUB down 1\r\n")
    await on_leaf.ping()
    await wait_leaf_interest(hub, b"A", b"down")
    on_a = await connect_with_password(hub.port, "a", "a")
    await on_a.send(b"PUB down 2\r\nok\r\n")
    assert await on_leaf.read_line() == b"MSG down 1 2\r\n"


# -- nats-server 2.9.10 leaves --------------------------------------------------------------------


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_with_credentials_bound_to_an_account(nursery, tmp_path):
    hub = await start_hub(nursery, leafnode_users=[User("lu", "lp", account="A")])
    leaf, leaf_port = nats_server_leaf(tmp_path, f'url: "nats://lu:lp@127.0.0.1:{hub.cluster.leaf_port}"')
    try:
        await wait_leaf(hub)
        on_a = await connect_with_password(hub.port, "a", "a")
        on_b = await connect_with_password(hub.port, "b", "b")
        on_leaf = await connect(leaf_port)
        await on_a.send(b"SUB up 1\r\n")
        await on_b.send(b"SUB up 1\r\n")
        await on_a.ping()
        await on_b.ping()
        await on_leaf.send(b"SUB down 1\r\n")
        await on_leaf.ping()
        await wait_leaf_interest(hub, b"A", b"down")
        await on_b.send(b"PUB down 1\r\nb\r\n")
        await on_a.send(b"PUB down 1\r\na\r\n")
        assert await on_leaf.read_line() == b"MSG down 1 1\r\n"
        assert await on_leaf.read_line() == b"a\r\n"
        with trio.fail_after(STEP_TIMEOUT):
            got = b""
            while b"MSG up" not in got:
                await on_leaf.send(b"PUB up 3\r\nyes\r\n")
                got += await on_a.nothing_within(0.05)
        assert b"MSG up 1 3\r\nyes\r\n" in got
        assert await on_b.nothing_within(0.1) == b""
    finally:
        leaf.terminate()
        leaf.wait(5)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_with_wrong_credentials_is_refused(nursery, tmp_path):
    hub = await start_hub(nursery, leafnode_users=[User("lu", "lp", account="A")])
    leaf, _ = nats_server_leaf(tmp_path, f'url: "nats://lu:nope@127.0.0.1:{hub.cluster.leaf_port}"',
                               stderr=subprocess.PIPE)
    try:
        with trio.fail_after(STEP_TIMEOUT):
            log = b""
            while b"Authorization Violation" not in log:
                log += await trio.to_thread.run_sync(leaf.stderr.readline)
        assert not hub.cluster.leafs
    finally:
        leaf.terminate()
        leaf.wait(5)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_with_a_credentials_file_of_an_operator_mode_hub(nursery, tmp_path):
    tree = jwt.OperatorTree()
    tree.account("A")
    token, key = tree.user("A", "leaf")
    client_token, client_key = tree.user("A", "client")
    creds = tmp_path / "leaf.creds"
    creds.write_text(jwt.creds(token, key.seed))
    hub_conf = tmp_path / "hub.conf"
    hub_conf.write_text(tree.config())
    options = options_from_file(str(hub_conf))
    hub = await nursery.start(natserver.serve, make_options(
        trusted_operators=options.trusted_operators, resolver=options.resolver,
        resolver_preload=options.resolver_preload, leafnode_port=-1, leafnode_host="127.0.0.1",
        no_system_account=True))
    account_a = tree.accounts["A"][0].public_key
    leaf, leaf_port = nats_server_leaf(tmp_path, f'url: "nats://127.0.0.1:{hub.cluster.leaf_port}", credentials: "{creds}"')
    try:
        await wait_leaf(hub)
        (link,) = hub.cluster.leafs.values()
        assert link.leaf_account == account_a
        on_leaf = await connect(leaf_port)
        await on_leaf.send(b"SUB down 1\r\n")
        await on_leaf.ping()
        await wait_leaf_interest(hub, account_a, b"down")
        on_hub = await connect_with_jwt(hub.port, client_token, client_key)
        await on_hub.send(b"SUB up 1\r\n")
        await on_hub.ping()
        await on_hub.send(b"PUB down 2\r\nhi\r\n")
        assert await on_leaf.read_line() == b"MSG down 1 2\r\n"
        with trio.fail_after(STEP_TIMEOUT):
            got = b""
            while b"MSG up" not in got:
                await on_leaf.send(b"PUB up 3\r\nyes\r\n")
                got += await on_hub.nothing_within(0.05)
        assert b"MSG up 1 3\r\nyes\r\n" in got
    finally:
        leaf.terminate()
        leaf.wait(5)


async def test_operator_mode_hub_refuses_a_leaf_without_a_valid_signature(nursery, tmp_path):
    tree = jwt.OperatorTree()
    tree.account("A")
    token, _ = tree.user("A", "leaf")
    hub_conf = tmp_path / "hub.conf"
    hub_conf.write_text(tree.config())
    options = options_from_file(str(hub_conf))
    hub = await nursery.start(natserver.serve, make_options(
        trusted_operators=options.trusted_operators, resolver=options.resolver,
        resolver_preload=options.resolver_preload, leafnode_port=-1, leafnode_host="127.0.0.1",
        no_system_account=True))
    leaf, _ = await leaf_dial(hub)
    await leaf.send(LEAF_CONNECT % (b',"jwt":"%s","sig":"AAAA"' % token.encode()))
    await leaf.expect_eof(b"-ERR 'Authorization Violation'\r\n")
