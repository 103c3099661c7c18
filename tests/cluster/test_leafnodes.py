"""natserver as a leaf node of a nats-server 2.9.10 hub: interest and messages both ways."""

from __future__ import annotations

import subprocess

import pytest
import trio

import natserver
from natserver.cluster.protocol import RemoteSub, RoutedMsg, RouteParser, ls_minus, ls_plus, rmsg_head
from natserver.config.mapping import options_from_file
from natserver.routing.transform import MapDest
from tests.cluster.helpers import (
    NATS_SERVER,
    STEP_TIMEOUT,
    connect,
    free_port,
    nats_server_leaf,
    read_msgs,
    skip_without_nats_server,
    wait_leaf,
)
from tests.conftest import make_options


def test_leaf_lines():
    parser = RouteParser(1024, leaf_account=b"ACC")
    parser.feed(b"LS+ foo\r\nLS+ bar g 2\r\nLMSG foo + r g 2\r\nhi\r\nHMSG foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    ops = []
    while (op := parser.next_op()) is not None:
        ops.append(op)
    assert ops == [
        RemoteSub(b"ACC", b"foo", None, 0),
        RemoteSub(b"ACC", b"bar", b"g", 2),
        RoutedMsg(b"ACC", b"foo", b"r", (b"g",), -1, b"hi"),
        RoutedMsg(b"ACC", b"foo", None, (), 12, b"NATS/1.0\r\n\r\nhi"),
    ]
    assert ls_plus(b"foo", b"g", 3) == b"LS+ foo g 3\r\n"
    assert ls_minus(b"foo", None) == b"LS- foo\r\n"
    assert rmsg_head(None, b"foo", None, [b"g"], -1, 2) == b"LMSG foo | g 2\r\n"


def test_leafnodes_remotes_config(tmp_path):
    conf = tmp_path / "leaf.conf"
    conf.write_text('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", account: "A" } ] }\n'
                    'accounts { A { users [ { user: a, password: a } ] } }\n')
    options = options_from_file(str(conf))
    assert options.leafnode_remotes == [{"urls": ["nats://127.0.0.1:7422"], "account": "A"}]


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_natserver_leaf_of_a_nats_server_hub(nursery, tmp_path):
    hub_port, leaf_port = free_port(), free_port()
    conf = tmp_path / "hub.conf"
    conf.write_text(f"listen: 127.0.0.1:{hub_port}\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n")
    hub = subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        leaf = await nursery.start(natserver.serve, make_options(
            leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{leaf_port}"], "account": ""}]))
        with trio.fail_after(STEP_TIMEOUT):
            while not leaf.cluster.leafs:
                await trio.sleep(0.01)
        on_leaf = await connect(leaf.port)
        on_hub = await connect(hub_port)
        await on_leaf.send(b"SUB down.> 1\r\n")
        await on_leaf.ping()
        await on_hub.send(b"SUB up 1\r\n")
        await on_hub.ping()
        (link,) = leaf.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while (b"$G", b"up", None) not in link.entries:
                await trio.sleep(0.01)
        await on_leaf.send(b"PUB up r 2\r\nhi\r\n")
        assert await read_msgs(on_hub, 1) == [b"MSG up 1 r 2\r\nhi\r\n"]
        # The hub knows of the leaf's interest once it forwards; retry until it does.
        with trio.fail_after(STEP_TIMEOUT):
            got = b""
            while b"MSG down.x" not in got:
                await on_hub.send(b"PUB down.x 3\r\nyes\r\n")
                got += await on_leaf.nothing_within(0.05)
        assert b"MSG down.x 1 3\r\nyes\r\n" in got
    finally:
        hub.terminate()
        hub.wait(5)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_of_a_natserver_hub(nursery, tmp_path):
    hub = await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1", http_port=-1))
    leaf, leaf_port = nats_server_leaf(tmp_path, f'url: "nats://127.0.0.1:{hub.cluster.leaf_port}"')
    try:
        await wait_leaf(hub)
        on_hub = await connect(hub.port)
        on_leaf = await connect(leaf_port)
        await on_hub.send(b"SUB down 1\r\n")
        await on_hub.ping()
        await on_leaf.send(b"SUB up.* 1\r\n")
        await on_leaf.ping()
        (link,) = hub.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while (b"$G", b"up.*", None) not in link.entries:
                await trio.sleep(0.01)
        await on_hub.send(b"PUB up.x 2\r\nhi\r\n")
        assert await read_msgs(on_leaf, 1) == [b"MSG up.x 1 2\r\nhi\r\n"]
        with trio.fail_after(STEP_TIMEOUT):
            got = b""
            while b"MSG down" not in got:
                await on_leaf.send(b"PUB down 3\r\nyes\r\n")
                got += await on_hub.nothing_within(0.05)
        assert b"MSG down 1 3\r\nyes\r\n" in got
        leafz = hub.cluster.leafz(True)
        assert leafz["leafnodes"] == 1 and "up.*" in leafz["leafs"][0]["subscriptions_list"]
    finally:
        leaf.terminate()
        leaf.wait(5)


async def test_a_leaf_of_one_cluster_node_reaches_the_other_node(nursery):
    a = await nursery.start(natserver.serve, make_options(
        cluster_port=-1, cluster_name="c1", cluster_host="127.0.0.1", leafnode_port=-1, leafnode_host="127.0.0.1"))
    b = await nursery.start(natserver.serve, make_options(
        cluster_port=-1, cluster_name="c1", cluster_host="127.0.0.1", routes=[f"nats://127.0.0.1:{a.cluster.port}"]))
    leaf = await nursery.start(natserver.serve, make_options(
        leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{a.cluster.leaf_port}"], "account": ""}]))
    with trio.fail_after(STEP_TIMEOUT):
        while not (a.cluster.routes and b.cluster.route_for(a.server_id, b"$G") and leaf.cluster.leafs
                   and a.cluster.leafs):
            await trio.sleep(0.01)
    on_b = await connect(b.port)
    on_leaf = await connect(leaf.port)
    await on_b.send(b"SUB from.leaf 1\r\n")
    await on_b.ping()
    await on_leaf.send(b"SUB from.b 1\r\n")
    await on_leaf.ping()
    b_route = b.cluster.route_for(a.server_id, b"$G")  # (the pool connection carrying $G)
    (leaf_link,) = leaf.cluster.leafs.values()
    with trio.fail_after(STEP_TIMEOUT):
        # b's interest reaches the leaf through a; the leaf's reaches b through a.
        while (b"$G", b"from.leaf", None) not in leaf_link.entries or (b"$G", b"from.b", None) not in b_route.entries:
            await trio.sleep(0.01)
    await on_leaf.send(b"PUB from.leaf 2\r\nup\r\n")
    await on_b.send(b"PUB from.b 4\r\ndown\r\n")
    assert await read_msgs(on_b, 1) == [b"MSG from.leaf 1 2\r\nup\r\n"]
    assert await read_msgs(on_leaf, 1) == [b"MSG from.b 1 4\r\ndown\r\n"]
    # The leaf's client leaves: b hears the interest withdrawn.
    await on_leaf.stream.aclose()
    with trio.fail_after(STEP_TIMEOUT):
        while (b"$G", b"from.b", None) in b_route.entries:
            await trio.sleep(0.01)


async def test_what_a_leaf_connection_brings_is_mapped_as_a_clients_publish(nursery):
    """nats-server applies subject mappings to messages from leaf connections (parser.go: kind
    CLIENT or LEAF), never to a route's: the leaf maps what the hub sends it."""
    hub = await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1"))
    leaf = await nursery.start(natserver.serve, make_options(
        leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{hub.cluster.leaf_port}"], "account": ""}],
        mappings=[("in.*", [MapDest("out.$1")])]))
    with trio.fail_after(STEP_TIMEOUT):
        while not (leaf.cluster.leafs and hub.cluster.leafs):
            await trio.sleep(0.01)
    on_leaf = await connect(leaf.port)
    await on_leaf.send(b"SUB > 1\r\n")
    await on_leaf.ping()
    (hub_link,) = hub.cluster.leafs.values()
    with trio.fail_after(STEP_TIMEOUT):
        while (b"$G", b">", None) not in hub_link.entries:
            await trio.sleep(0.01)
    on_hub = await connect(hub.port)
    await on_hub.send(b"PUB in.x 2\r\nhi\r\nPUB other 0\r\n\r\n")
    assert await read_msgs(on_leaf, 2) == [b"MSG out.x 1 2\r\nhi\r\n", b"MSG other 1 0\r\n\r\n"]
