"""A leaf remote's ``deny_imports`` and ``deny_exports`` as nats-server 2.9.10 applies them
(leafnode.go newLeafNodeCfg, sendLeafNodeSubUpdate, processLeafSub, the CONNECT's deny_pub
and mergeDenyPermissions; client.go deliverMsg):

* ``deny_exports``: the leaf sends the hub no message on those subjects (and ignores the hub's
  interest in them);
* ``deny_imports``: the leaf does not tell the hub of its interest in those subjects, and
  names them in its CONNECT (``deny_pub``) so that the hub sends none of them, not even to a
  wider wildcard subscription.

The same traffic runs through every pairing of hub and leaf, natserver and nats-server; each
must deliver exactly what two nats-servers deliver (without nats-server installed, the
natserver pair is checked against that same expectation)."""

from __future__ import annotations

import subprocess

import pytest
import trio

import natserver
from natserver.config.mapping import options_from_file
from tests.cluster.helpers import (
    NATS_SERVER,
    STEP_TIMEOUT,
    connect,
    free_port,
    nats_server_leaf,
    skip_without_nats_server,
    wait_leaf,
)
from tests.conftest import make_options

DENY_IMPORTS = ["imp.denied", "imp.wild.*"]
DENY_EXPORTS = ["exp.denied"]
# What two nats-server 2.9.10 deliver (recorded from the nats-server pair, which the live
# tests below check again).
EXPECTED = {
    "leaf got": [b"imp.ok2 1", b"imp.end 1"],
    "hub got": [b"exp.ok2 1", b"exp.end 1"],
}


def _deny_conf() -> str:
    quote = lambda subjects: ", ".join(f'"{s}"' for s in subjects)  # noqa: E731
    return f"deny_imports: [{quote(DENY_IMPORTS)}], deny_exports: [{quote(DENY_EXPORTS)}]"


async def _collect(client, until: bytes, skip: bytes) -> list[bytes]:
    """Subject and sid of each MSG up to the one on ``until`` (``skip``'s left out)."""
    got: list[bytes] = []
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            line = await client.read_line()
            if line == b"PING\r\n":
                await client.send(b"PONG\r\n")
                continue
            if not line.startswith(b"MSG "):
                continue
            parts = line.split()
            await client.read_exactly(int(parts[-1]) + 2)
            if parts[1] != skip:
                got.append(parts[1] + b" " + parts[2])
            if parts[1] == until:
                return got


async def _until_delivered(sender, receiver, subject: bytes) -> None:
    """Publish ``subject`` until the receiver gets it: interest has crossed."""
    with trio.fail_after(STEP_TIMEOUT):
        got = b""
        while b"MSG " + subject + b" " not in got:
            await sender.send(b"PUB %s 1\r\nx\r\n" % subject)
            got += await receiver.nothing_within(0.05)


async def _wait_port(port: int) -> None:
    """Until a server (a child process just started) accepts on ``port``."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            try:
                await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
                return
            except OSError:
                await trio.sleep(0.02)


async def traffic(hub_port: int, leaf_port: int) -> dict:
    await _wait_port(hub_port)
    await _wait_port(leaf_port)
    on_leaf = await connect(leaf_port)
    on_hub = await connect(hub_port)
    await on_leaf.send(b"SUB imp.> 1\r\nSUB imp.denied 2\r\n")
    await on_leaf.ping()
    await on_hub.send(b"SUB exp.> 1\r\n")
    await on_hub.ping()
    await _until_delivered(on_hub, on_leaf, b"imp.ok")
    await _until_delivered(on_leaf, on_hub, b"exp.ok")
    await on_hub.send(b"".join(b"PUB %s 1\r\nx\r\n" % s for s in (b"imp.denied", b"imp.wild.x", b"imp.ok2", b"imp.end")))
    leaf_got = await _collect(on_leaf, b"imp.end", b"imp.ok")
    await on_leaf.send(b"".join(b"PUB %s 1\r\nx\r\n" % s for s in (b"exp.denied", b"exp.ok2", b"exp.end")))
    hub_got = await _collect(on_hub, b"exp.end", b"exp.ok")
    return {"leaf got": leaf_got, "hub got": hub_got}


def _nats_server_hub(tmp_path) -> tuple[subprocess.Popen, int, int]:
    port, leaf_port = free_port(), free_port()
    conf = tmp_path / "hub.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
    return subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL), port, leaf_port


async def _natserver_leaf(nursery, hub_leaf_port: int):
    leaf = await nursery.start(natserver.serve, make_options(leafnode_remotes=[{
        "urls": [f"nats://127.0.0.1:{hub_leaf_port}"], "account": "",
        "deny_imports": DENY_IMPORTS, "deny_exports": DENY_EXPORTS}]))
    await wait_leaf(leaf)
    return leaf


async def _natserver_hub(nursery):
    return await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1"))


def test_remote_deny_lists_config(tmp_path):
    conf = tmp_path / "leaf.conf"
    conf.write_text('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", deny_imports: "a.>", '
                    'deny_exports: ["b", "c.*"] } ] }\n')
    assert options_from_file(str(conf)).leafnode_remotes == [{
        "urls": ["nats://127.0.0.1:7422"], "account": "", "deny_imports": ["a.>"], "deny_exports": ["b", "c.*"]}]


async def test_natserver_leaf_of_a_natserver_hub(nursery):
    hub = await _natserver_hub(nursery)
    leaf = await _natserver_leaf(nursery, hub.cluster.leaf_port)
    await wait_leaf(hub)
    assert await traffic(hub.port, leaf.port) == EXPECTED
    (link,) = hub.cluster.leafs.values()
    assert link.perms is not None  # the CONNECT's deny_pub, applied by the hub


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_two_nats_servers_deliver_the_expectation(tmp_path):
    hub, port, hub_leaf_port = _nats_server_hub(tmp_path)
    leaf, leaf_port = nats_server_leaf(tmp_path, f'url: "nats://127.0.0.1:{hub_leaf_port}", {_deny_conf()}')
    try:
        assert await traffic(port, leaf_port) == EXPECTED
    finally:
        for proc in (leaf, hub):
            proc.terminate()
            proc.wait(5)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_natserver_leaf_of_a_nats_server_hub(nursery, tmp_path):
    hub, port, hub_leaf_port = _nats_server_hub(tmp_path)
    try:
        leaf = await _natserver_leaf(nursery, hub_leaf_port)
        assert await traffic(port, leaf.port) == EXPECTED
    finally:
        hub.terminate()
        hub.wait(5)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_of_a_natserver_hub(nursery, tmp_path):
    hub = await _natserver_hub(nursery)
    leaf, leaf_port = nats_server_leaf(tmp_path, f'url: "nats://127.0.0.1:{hub.cluster.leaf_port}", {_deny_conf()}')
    try:
        await wait_leaf(hub)
        assert await traffic(hub.port, leaf_port) == EXPECTED
    finally:
        leaf.terminate()
        leaf.wait(5)


async def test_a_hub_cuts_off_a_leaf_subscribing_where_it_may_not_deliver(nursery):
    """A leaf that asked for no imp.denied (deny_pub) and then sends interest in it: a
    subscription violation on the hub, as nats-server's processLeafSub."""
    hub = await _natserver_hub(nursery)
    stream = await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port)
    with trio.fail_after(STEP_TIMEOUT):
        data = b""
        while b"\r\n" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(b'CONNECT {"server_id":"L1","name":"l1","headers":true,"deny_pub":["imp.denied"]}\r\n'
                              b"PING\r\n")
        while b"PONG" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(b"LS+ imp.denied\r\n")
        while chunk := await stream.receive_some(65536):
            data += chunk
    assert b"-ERR 'Permissions Violation for Subscription to \"imp.denied\"'\r\n" in data


def test_an_invalid_deny_subject_is_a_config_error(tmp_path):
    from natserver.config.mapping import ConfigFileError

    conf = tmp_path / "leaf.conf"
    conf.write_text('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", deny_exports: ["ok", "a..b"] } ] }\n')
    with pytest.raises(ConfigFileError) as info:
        options_from_file(str(conf))
    assert 'subject "a..b" is not a valid subject' in str(info.value)


def test_leafnodes_reconnect_config(tmp_path):
    conf = tmp_path / "leaf.conf"
    conf.write_text('leafnodes { reconnect: 7, remotes [ { url: "nats://127.0.0.1:7422" } ] }\n')
    assert options_from_file(str(conf)).leafnode_reconnect == 7.0
    conf.write_text('leafnodes { reconnect: "7s", remotes [ { url: "nats://127.0.0.1:7422" } ] }\n')
    with pytest.raises(Exception, match="reconnect"):
        options_from_file(str(conf))


async def test_a_leaf_waits_leafnodes_reconnect_before_redialling(nursery):
    hub = await _natserver_hub(nursery)
    leaf = await nursery.start(natserver.serve, make_options(leafnode_reconnect=7.0, leafnode_remotes=[{
        "urls": [f"nats://127.0.0.1:{hub.cluster.leaf_port}"], "account": ""}]))
    await wait_leaf(leaf)
    (link,) = leaf.cluster.leafs.values()
    assert link.reconnect_delay == 7.0  # what _leaf_loop sleeps after this connection ends
