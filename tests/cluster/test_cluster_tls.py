"""TLS on routes (``cluster { tls {} }``) and leaf nodes (``leafnodes { tls {} }``, a remote's
``tls {}``), in nats-server 2.9.10's handshake order: a route's TLS handshake comes first on
both sides; a hub sends its leaf INFO in plain text, then shakes hands."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import trio

import natserver
from natserver.auth.tls import TLSConfig
from natserver.config.mapping import ConfigFileError, options_from_file
from tests.cluster.helpers import (
    NATS_SERVER,
    STEP_TIMEOUT,
    ClusterCerts,
    connect,
    free_port,
    route_url,
    skip_without_nats_server,
    start_node,
    wait_interest,
    wait_routes,
)
from tests.conftest import RawClient, make_options


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return ClusterCerts(tmp_path_factory.mktemp("cluster-certs"))


async def start_hub(nursery, tls) -> natserver.Server:
    return await nursery.start(natserver.serve, make_options(
        leafnode_port=-1, leafnode_host="127.0.0.1", leafnode_tls=tls, no_system_account=True))


async def start_leaf(nursery, hub_port: int, tls, scheme: str = "nats") -> natserver.Server:
    remote = {"urls": [f"{scheme}://127.0.0.1:{hub_port}"], "account": ""}
    if tls is not None:
        remote["tls"] = tls
    return await nursery.start(natserver.serve, make_options(leafnode_remotes=[remote], no_system_account=True))


async def wait_leaf(server: natserver.Server) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while not server.cluster.leafs:
            await trio.sleep(0.01)


async def wait_leaf_interest(server: natserver.Server, subject: bytes) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while not any((b"$G", subject, None) in leaf.entries for leaf in server.cluster.leafs.values()):
            await trio.sleep(0.01)


async def exchange(sender: RawClient, receiver: RawClient, subject: bytes) -> None:
    """``receiver`` (subscribed) gets what ``sender`` publishes, once interest has crossed."""
    with trio.fail_after(STEP_TIMEOUT):
        got = b""
        while b"MSG " + subject not in got:
            await sender.send(b"PUB %s 2\r\nhi\r\n" % subject)
            got += await receiver.nothing_within(0.05)
    assert b"MSG %s 1 2\r\nhi\r\n" % subject in got


def nats_server(conf_path, text: str) -> subprocess.Popen:
    conf_path.write_text(text)
    return subprocess.Popen([NATS_SERVER, "-c", str(conf_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- configuration --------------------------------------------------------------------------------


def test_tls_blocks_config(tmp_path, certs):
    conf = tmp_path / "n.conf"
    conf.write_text(f"cluster {{ listen: 127.0.0.1:6222, {certs.block(verify=False)} }}\n"
                    f"leafnodes {{ listen: 127.0.0.1:7422, {certs.block()}, remotes [ {{ url: "
                    f'"nats://127.0.0.1:7423", {certs.block(verify=False)} }} ] }}\n')
    options = options_from_file(str(conf))
    assert options.cluster_tls.verify is True  # routes always verify (opts.go getTLSConfig)
    assert options.leafnode_tls.verify is True and options.leafnode_tls.ca_file == certs.ca
    assert options.leafnode_remotes[0]["tls"].cert_file == certs.cert


@pytest.mark.parametrize(("block", "error"), [
    ('leafnodes { tls { cert_file: "/nope.pem", key_file: "/nope-key.pem" } }',
     "error parsing X509 certificate/key pair"),
    ('leafnodes { tls { verify_and_map: true } }',
     '"leafnodes tls verify_and_map" (certificate user mapping) is not supported by natserver'),
    ('cluster { port: 6222, tls { verify_and_map: true } }',
     '"cluster tls verify_and_map" (certificate user mapping) is not supported by natserver'),
    ('leafnodes { remotes [ { url: "nats://h:1", tls { bogus: 1 } } ] }', 'unknown field ["bogus"]'),
    # nats-server 2.9.10 -t says the same for both.
    ('cluster { port: 6222, tls { ca_file: "/ca.pem" } }', "2:23: open /ca.pem: no such file or directory"),
    ('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", tls { ca_file: "/ca.pem" } } ] }',
     "2:55: open /ca.pem: no such file or directory"),
])
def test_tls_block_errors(tmp_path, block, error):
    conf = tmp_path / "n.conf"
    conf.write_text("port: 4333\n" + block + "\n")
    with pytest.raises(ConfigFileError, match=re.escape(error)):
        options_from_file(str(conf))


# -- leaf nodes -----------------------------------------------------------------------------------


async def test_hub_sends_info_in_plain_text_then_tls(nursery, certs):
    hub = await start_hub(nursery, certs.tls(verify=True))
    stream = await trio.open_tcp_stream("127.0.0.1", hub.cluster.leaf_port)
    with trio.fail_after(STEP_TIMEOUT):
        data = b""
        while not data.endswith(b"\r\n"):
            data += await stream.receive_some(65536)
    info = json.loads(data[5:])
    assert info["tls_required"] is True and info["tls_verify"] is True
    await stream.aclose()


async def test_natserver_leaf_and_hub_over_tls(nursery, certs):
    hub = await start_hub(nursery, certs.tls(verify=True))
    leaf = await start_leaf(nursery, hub.cluster.leaf_port, certs.tls())
    await wait_leaf(hub)
    await wait_leaf(leaf)
    (link,) = leaf.cluster.leafs.values()
    assert link.tls
    on_hub, on_leaf = await connect(hub.port), await connect(leaf.port)
    await on_leaf.send(b"SUB down 1\r\n")
    await on_hub.send(b"SUB up 1\r\n")
    await on_leaf.ping()
    await on_hub.ping()
    await exchange(on_hub, on_leaf, b"down")
    await exchange(on_leaf, on_hub, b"up")


async def test_a_leaf_without_a_certificate_when_the_hub_does_not_ask_for_one(nursery, certs):
    hub = await start_hub(nursery, certs.tls())
    leaf = await start_leaf(nursery, hub.cluster.leaf_port, TLSConfig(ca_file=certs.ca))
    await wait_leaf(hub)
    assert next(iter(leaf.cluster.leafs.values())).tls


async def test_the_hubs_tls_required_alone_makes_a_leaf_shake_hands(nursery, certs, caplog):
    hub = await start_hub(nursery, certs.tls())
    await start_leaf(nursery, hub.cluster.leaf_port, None)  # no tls {}: the system's roots
    with trio.fail_after(STEP_TIMEOUT):
        while "TLS leafnode handshake error: x509" not in caplog.text:
            await trio.sleep(0.01)
    assert not hub.cluster.leafs


async def test_a_leaf_with_a_certificate_of_another_ca_is_refused(nursery, certs):
    hub = await start_hub(nursery, certs.tls(verify=True))
    await start_leaf(nursery, hub.cluster.leaf_port, certs.tls(rogue=True))
    await trio.sleep(0.5)  # a refused handshake (and the leaf's retry a second later)
    assert not hub.cluster.leafs


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_nats_server_leaf_of_a_natserver_tls_hub(nursery, tmp_path, certs):
    hub = await start_hub(nursery, certs.tls(verify=True))
    leaf_port = free_port()
    proc = nats_server(tmp_path / "leaf.conf", f"listen: 127.0.0.1:{leaf_port}\nleafnodes {{ remotes [ {{ "
                       f'url: "nats://127.0.0.1:{hub.cluster.leaf_port}", {certs.block(verify=False)} }} ] }}\n')
    try:
        await wait_leaf(hub)
        (link,) = hub.cluster.leafs.values()
        assert link.tls
        on_hub, on_leaf = await connect(hub.port), await connect(leaf_port)
        await on_leaf.send(b"SUB down 1\r\n")
        await on_hub.send(b"SUB up 1\r\n")
        await on_leaf.ping()
        await on_hub.ping()
        await wait_leaf_interest(hub, b"down")
        await exchange(on_hub, on_leaf, b"down")
        await exchange(on_leaf, on_hub, b"up")
    finally:
        stop(proc)


@pytest.mark.needs_nats_server
@skip_without_nats_server
async def test_natserver_leaf_of_a_nats_server_tls_hub(nursery, tmp_path, certs):
    hub_port, hub_leaf_port = free_port(), free_port()
    proc = nats_server(tmp_path / "hub.conf", f"listen: 127.0.0.1:{hub_port}\n"
                       f"leafnodes {{ listen: 127.0.0.1:{hub_leaf_port}, {certs.block()} }}\n")
    try:
        leaf = await start_leaf(nursery, hub_leaf_port, certs.tls())
        await wait_leaf(leaf)
        on_leaf = await connect(leaf.port)
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    on_hub = await connect(hub_port)
                    break
                except OSError:
                    await trio.sleep(0.05)
        await on_leaf.send(b"SUB down 1\r\n")
        await on_hub.send(b"SUB up 1\r\n")
        await on_leaf.ping()
        await on_hub.ping()
        (link,) = leaf.cluster.leafs.values()
        assert link.tls
        await exchange(on_hub, on_leaf, b"down")
        await exchange(on_leaf, on_hub, b"up")
    finally:
        stop(proc)


# -- routes ---------------------------------------------------------------------------------------


async def test_natserver_routes_over_tls(nursery, certs):
    tls = certs.tls(verify=True)
    a = await start_node(nursery, cluster_tls=tls)
    b = await start_node(nursery, routes=[route_url(a)], cluster_tls=tls)
    await wait_routes([a, b], 1)
    assert all(route.tls for route in a.cluster.routes.values())
    on_a, on_b = await connect(a.port), await connect(b.port)
    await on_b.send(b"SUB x 1\r\n")
    await on_b.ping()
    await wait_interest(a, b"x")
    await exchange(on_a, on_b, b"x")


async def test_a_route_with_a_certificate_of_another_ca_is_refused(nursery, certs):
    a = await start_node(nursery, cluster_tls=certs.tls(verify=True))
    b = await start_node(nursery, routes=[route_url(a)], cluster_tls=certs.tls(rogue=True, verify=True))
    await trio.sleep(0.5)
    assert not a.cluster.routes and not b.cluster.routes


@pytest.mark.needs_nats_server
@skip_without_nats_server
@pytest.mark.parametrize("natserver_dials", [True, False])
async def test_routes_over_tls_with_nats_server(nursery, tmp_path, certs, natserver_dials):
    port, cluster_port = free_port(), free_port()
    node = await start_node(nursery, cluster_tls=certs.tls(verify=True),
                            routes=[f"nats://127.0.0.1:{cluster_port}"] if natserver_dials else [])
    routes = "" if natserver_dials else f", routes: [{route_url(node)}]"
    proc = nats_server(tmp_path / "route.conf", f"listen: 127.0.0.1:{port}\ncluster {{ name: c1, "
                       f"listen: 127.0.0.1:{cluster_port}{routes}, {certs.block()} }}\n")
    try:
        await wait_routes([node], 1)
        assert all(route.tls for route in node.cluster.routes.values())
        on_node = await connect(node.port)
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    on_theirs = await connect(port)
                    break
                except OSError:
                    await trio.sleep(0.05)
        await on_node.send(b"SUB mine 1\r\n")
        await on_theirs.send(b"SUB theirs 1\r\n")
        await on_node.ping()
        await on_theirs.ping()
        await exchange(on_theirs, on_node, b"mine")
        await exchange(on_node, on_theirs, b"theirs")
    finally:
        stop(proc)
