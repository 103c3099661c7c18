"""Route and leaf node compression with nats-server 2.15.1 peers (2.10+ ``compression`` in
``cluster {}``, ``leafnodes {}`` and a remote, negotiated through the INFO ``compression``
field: server.go selectCompressionMode). natserver does not compress routes or leaf
connections: it leaves the field out of its INFO, which a 2.10+ peer takes as "not
supported", so whatever mode the peer is configured with, the connection forms, is
uncompressed both ways and carries messages. natserver's own ``compression`` keys are
accepted and warned about (not acted on)."""

from __future__ import annotations

import json
import subprocess

import pytest
import trio

import natserver
from tests import reference
from tests.cluster.helpers import (
    STEP_TIMEOUT,
    connect,
    free_port,
    read_msgs,
    route_url,
    start_node,
    wait_interest,
    wait_leaf,
    wait_routes,
)
from tests.conftest import make_options

pytestmark = [pytest.mark.needs_nats_server,
              pytest.mark.skipif(reference.NATS_SERVER is None, reason="nats-server 2.15.1 not installed")]

# Every mode nats-server 2.15.1 configures (validateAndNormalizeCompressionOption; "on" is s2_fast
# for routes, s2_auto for leaf nodes; s2_uncompressed is only what s2_auto may pick).
MODES = ["off", "accept", "on", "s2_fast", "s2_better", "s2_best", "s2_auto"]


class Peer:
    """nats-server 2.15.1 with ``conf`` (``%(port)s``, ``%(cluster)s``, ``%(leaf)s``, ``%(http)s``
    filled in with free ports)."""

    def __init__(self, tmp_path, conf: str) -> None:
        self.port, self.cluster_port, self.leaf_port, self.http_port = (free_port() for _ in range(4))
        path = tmp_path / f"peer-{self.port}.conf"
        path.write_text(conf % {"port": self.port, "cluster": self.cluster_port, "leaf": self.leaf_port,
                                "http": self.http_port})
        self.log = tmp_path / f"peer-{self.port}.log"
        self.proc = subprocess.Popen([reference.NATS_SERVER, "-c", str(path)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "wb"))

    async def get(self, path: str) -> dict:
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", self.http_port)
                    break
                except OSError:
                    await trio.sleep(0.02)
            await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
            await stream.aclose()
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def peers(tmp_path):
    started: list[Peer] = []

    def start(conf: str) -> Peer:
        peer = Peer(tmp_path, conf)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


async def _both_ways(ours: int, theirs: int, ready) -> None:
    """A message each way between a client of natserver and one of the peer (``ready()``:
    until the peer's interest reached natserver)."""
    on_ours, on_theirs = await connect(ours), await connect(theirs)
    await on_ours.send(b"SUB down 1\r\n")
    await on_ours.ping()
    await on_theirs.send(b"SUB up 1\r\n")
    await on_theirs.ping()
    await ready()
    await on_ours.send(b"PUB up 2\r\nhi\r\n")
    assert await read_msgs(on_theirs, 1) == [b"MSG up 1 2\r\nhi\r\n"]
    with trio.fail_after(STEP_TIMEOUT):  # (until the peer knows of natserver's interest)
        got = b""
        while b"MSG down" not in got:
            await on_theirs.send(b"PUB down 3\r\n" + b"yes" + b"\r\n")
            got += await on_ours.nothing_within(0.05)
    assert b"MSG down 1 3\r\nyes\r\n" in got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_routes_with_every_peer_mode(nursery, peers, mode, dialer):
    if dialer == "natserver":
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'cluster {{ name: c1, listen: 127.0.0.1:%(cluster)s, compression: {mode} }}\n')
        ours = await start_node(nursery, routes=[f"nats://127.0.0.1:{peer.cluster_port}"])
    else:
        ours = await start_node(nursery)
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'cluster {{ name: c1, listen: 127.0.0.1:%(cluster)s, compression: {mode}, '
                     f'routes: ["{route_url(ours)}"] }}\n')
    await wait_routes([ours], 1)

    async def ready():  # the route is up on the peer's side too, and the peer's interest is here
        with trio.fail_after(STEP_TIMEOUT):
            while not (await peer.get("/routez"))["routes"]:
                await trio.sleep(0.02)
        await wait_interest(ours, b"up")  # (over the pool connection carrying $G)

    await _both_ways(ours.port, peer.port, ready)
    routes = (await peer.get("/routez"))["routes"]
    # The peer saw no compression in natserver's INFO: "not supported" (off included).
    assert routes and {r["compression"] for r in routes} == {"not supported"}, routes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_leaf_nodes_with_every_peer_mode(nursery, peers, mode, dialer):
    if dialer == "natserver":  # natserver is the leaf of a 2.15.1 hub
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'leafnodes {{ listen: 127.0.0.1:%(leaf)s, compression: {mode} }}\n')
        with trio.fail_after(STEP_TIMEOUT):  # (until the hub listens)
            while True:
                try:
                    await (await trio.open_tcp_stream("127.0.0.1", peer.leaf_port)).aclose()
                    break
                except OSError:
                    await trio.sleep(0.02)
        ours = await nursery.start(natserver.serve, make_options(
            leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{peer.leaf_port}"], "account": ""}]))
    else:  # a 2.15.1 leaf of natserver
        ours = await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1"))
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{ours.cluster.leaf_port}", '
                     f'compression: {mode} }} ] }}\n')
    await wait_leaf(ours)

    async def ready():  # the peer's interest in "up" reached natserver
        (link,) = ours.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while (b"$G", b"up", None) not in link.entries:
                await trio.sleep(0.02)

    await _both_ways(ours.port, peer.port, ready)
    leafs = (await peer.get("/leafz"))["leafs"]
    assert leafs and {leaf["compression"] for leaf in leafs} == {"not supported"}, leafs


@pytest.mark.parametrize("block, warning", [
    ("cluster { port: 6222, compression: s2_fast }", 'Cluster option "compression"'),
    ("cluster { port: 6222, compression: { mode: s2_auto, rtt_thresholds: [10ms, 50ms] } }",
     'Cluster option "compression"'),
    ("leafnodes { port: 7422, compression: s2_auto }", 'Leaf node option "compression"'),
    ('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", compression: s2_best } ] }',
     'Leaf node option "remotes.compression"'),
])  # fmt: skip
def test_natservers_own_compression_keys_are_warned_about(tmp_path, block, warning):
    """Accepted (a file written for nats-server 2.10+ starts) and named in a warning: natserver
    does not compress."""
    from natserver.config.mapping import options_from_file, unsupported_warnings

    path = tmp_path / "c.conf"
    path.write_text(f"port: 4333\n{block}\n")
    assert f"{warning} is not supported by natserver and is ignored" in unsupported_warnings(options_from_file(str(path)))
