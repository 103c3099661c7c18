"""Route and leaf node compression (2.10+ ``compression`` in ``cluster {}``, ``leafnodes {}``
and a remote, negotiated through the INFO ``compression`` field: server.go
selectCompressionMode, route.go negotiateRouteCompression, leafnode.go
negotiateLeafCompression), against nats-server 2.15.1 peers configured with every mode, either
side dialling, natserver with natserver, and a 2.9.10 peer (no compression). Messages cross
both ways over the S2 stream, and both sides' /routez and /leafz report the level each side
writes with (compression is asymmetric)."""

from __future__ import annotations

import json
import subprocess

import orjson
import pytest
import trio

import natserver
from natserver.config.compression import CompressionOpts
from natserver.protocol import s2
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
# What s2_auto may pick (selectS2AutoModeBasedOnRTT: on loopback, uncompressed unless the
# machine is slow enough for the handshake to take over 10 ms).
AUTO_LEVELS = {"s2_uncompressed", "s2_fast", "s2_better", "s2_best"}


class Peer:
    """nats-server 2.15.1 with ``conf`` (``%(port)s``, ``%(cluster)s``, ``%(leaf)s``, ``%(http)s``
    filled in with free ports)."""

    def __init__(self, tmp_path, conf: str, binary: str | None = None) -> None:
        self.port, self.cluster_port, self.leaf_port, self.http_port = (free_port() for _ in range(4))
        path = tmp_path / f"peer-{self.port}.conf"
        path.write_text(conf % {"port": self.port, "cluster": self.cluster_port, "leaf": self.leaf_port,
                                "http": self.http_port})
        self.log = tmp_path / f"peer-{self.port}.log"
        self.proc = subprocess.Popen([binary or reference.NATS_SERVER, "-c", str(path)], stdout=subprocess.DEVNULL,
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

    def start(conf: str, binary: str | None = None) -> Peer:
        peer = Peer(tmp_path, conf, binary)
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


# With natserver at its default ("accept" for routes): (what the peer writes with, what we do).
ROUTE_EXPECTED = {
    "off": ("off", "off"), "accept": ("off", "off"), "on": ("s2_fast", "s2_fast"),
    "s2_fast": ("s2_fast", "s2_fast"), "s2_better": ("s2_better", "s2_better"),
    "s2_best": ("s2_best", "s2_best"), "s2_auto": ("auto", "s2_fast"),
}


def _matches(got: set, expected: str) -> bool:
    """``expected``, or "auto": a level s2_auto picks (each connection of a pool its own)."""
    return bool(got) and got <= AUTO_LEVELS if expected == "auto" else got == {expected}


async def _route_with_peer(nursery, peers, peer_conf: str, dialer: str, **ours_changes):
    """natserver and a 2.15.1 peer (``peer_conf``: the cluster block's extra members) routed,
    messages checked both ways; (natserver, peer)."""
    if dialer == "natserver":
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'cluster {{ name: c1, listen: 127.0.0.1:%(cluster)s {peer_conf} }}\n')
        ours = await start_node(nursery, routes=[f"nats://127.0.0.1:{peer.cluster_port}"], **ours_changes)
    else:
        ours = await start_node(nursery, **ours_changes)
        peer = peers('listen: 127.0.0.1:%(port)s\nhttp: 127.0.0.1:%(http)s\n'
                     f'cluster {{ name: c1, listen: 127.0.0.1:%(cluster)s {peer_conf}, '
                     f'routes: ["{route_url(ours)}"] }}\n')
    await wait_routes([ours], 1)

    async def ready():  # the route is up on the peer's side too, and the peer's interest is here
        with trio.fail_after(STEP_TIMEOUT):
            while not (await peer.get("/routez"))["routes"]:
                await trio.sleep(0.02)
        await wait_interest(ours, b"up")  # (over the pool connection carrying $G)

    await _both_ways(ours.port, peer.port, ready)
    return ours, peer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_routes_with_every_peer_mode(nursery, peers, mode, dialer):
    ours, peer = await _route_with_peer(nursery, peers, f", compression: {mode}", dialer)
    theirs_expected, ours_expected = ROUTE_EXPECTED[mode]
    routes = (await peer.get("/routez"))["routes"]
    assert routes and _matches({r["compression"] for r in routes}, theirs_expected), routes
    assert {r["compression"] for r in ours.cluster.routez()["routes"]} == {ours_expected}


@pytest.mark.parametrize("ours_mode, theirs_expected, ours_expected", [
    ("off", "off", "off"),
    ("s2_best", "s2_best", "s2_best"),
    ("s2_auto", "s2_fast", "auto"),
])  # fmt: skip
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_natservers_route_modes_with_a_default_peer(nursery, peers, ours_mode, theirs_expected, ours_expected,
                                                         dialer):
    """natserver configured, the 2.15.1 peer at its default (accept)."""
    ours, peer = await _route_with_peer(nursery, peers, "", dialer, cluster_compression=CompressionOpts(ours_mode))
    routes = (await peer.get("/routez"))["routes"]
    assert routes and {r["compression"] for r in routes} == {theirs_expected}, routes
    assert _matches({r["compression"] for r in ours.cluster.routez()["routes"]}, ours_expected)


async def _leaf_with_peer(nursery, peers, mode: str | None, dialer: str, binary: str | None = None, **ours_changes):
    """natserver and a 2.15.1 peer (``mode``: its compression, None: not configured; or
    ``binary``) as leaf and hub, messages checked both ways; (natserver, peer)."""
    setting = "" if mode is None else f", compression: {mode}"
    http = "http: 127.0.0.1:%(http)s\n" if binary is None else ""
    if dialer == "natserver":  # natserver is the leaf of a 2.15.1 hub
        peer = peers('listen: 127.0.0.1:%(port)s\n' + http +
                     f'leafnodes {{ listen: 127.0.0.1:%(leaf)s {setting} }}\n', binary)
        with trio.fail_after(STEP_TIMEOUT):  # (until the hub listens)
            while True:
                try:
                    await (await trio.open_tcp_stream("127.0.0.1", peer.leaf_port)).aclose()
                    break
                except OSError:
                    await trio.sleep(0.02)
        ours = await nursery.start(natserver.serve, make_options(
            leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{peer.leaf_port}"], "account": "", **ours_changes}]))
    else:  # a 2.15.1 leaf of natserver
        ours = await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1",
                                                                 **ours_changes))
        peer = peers('listen: 127.0.0.1:%(port)s\n' + http +
                     f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{ours.cluster.leaf_port}" '
                     f'{setting} }} ] }}\n', binary)
    await wait_leaf(ours)

    async def ready():  # the peer's interest in "up" reached natserver
        (link,) = ours.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while (b"$G", b"up", None) not in link.entries:
                await trio.sleep(0.02)

    await _both_ways(ours.port, peer.port, ready)
    return ours, peer


# natserver at its leaf default (s2_auto): (what the peer writes with, what we do).
LEAF_EXPECTED = {
    "off": ("off", "off"), "accept": ("s2_fast", "auto"), "on": ("auto", "auto"), "s2_fast": ("s2_fast", "auto"),
    "s2_better": ("s2_better", "auto"), "s2_best": ("s2_best", "auto"), "s2_auto": ("auto", "auto"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_leaf_nodes_with_every_peer_mode(nursery, peers, mode, dialer):
    ours, peer = await _leaf_with_peer(nursery, peers, mode, dialer)
    theirs_expected, ours_expected = LEAF_EXPECTED[mode]
    leafs = (await peer.get("/leafz"))["leafs"]
    assert leafs and _matches({leaf["compression"] for leaf in leafs}, theirs_expected), leafs
    assert _matches({leaf["compression"] for leaf in ours.cluster.leafz()["leafs"]}, ours_expected)


@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_natservers_leaf_mode_with_a_peer_that_compresses(nursery, peers, dialer):
    """natserver's own leaf setting (a remote's, or leafnodes {}'s) against a 2.15.1 s2_best."""
    changes = ({"compression": CompressionOpts("s2_better")} if dialer == "natserver"
               else {"leafnode_compression": CompressionOpts("s2_better")})
    ours, peer = await _leaf_with_peer(nursery, peers, "s2_best", dialer, **changes)
    assert {leaf["compression"] for leaf in (await peer.get("/leafz"))["leafs"]} == {"s2_best"}
    assert {leaf["compression"] for leaf in ours.cluster.leafz()["leafs"]} == {"s2_better"}


async def test_natserver_with_natserver(nursery):
    """Route: s2_best one side, accept the other; leaf: both at the default (s2_auto)."""
    first = await start_node(nursery, cluster_compression=CompressionOpts("s2_best"))
    second = await start_node(nursery, routes=[route_url(first)])
    await wait_routes([first, second], 1)
    await wait_interest(first, b"none", 0)

    async def route_ready():
        await wait_interest(first, b"up")

    await _both_ways(first.port, second.port, route_ready)
    assert {r["compression"] for r in first.cluster.routez()["routes"]} == {"s2_best"}
    assert {r["compression"] for r in second.cluster.routez()["routes"]} == {"s2_best"}
    hub = await nursery.start(natserver.serve, make_options(leafnode_port=-1, leafnode_host="127.0.0.1"))
    leaf = await nursery.start(natserver.serve, make_options(
        leafnode_remotes=[{"urls": [f"nats://127.0.0.1:{hub.cluster.leaf_port}"], "account": ""}]))
    await wait_leaf(hub)

    async def leaf_ready():
        (link,) = leaf.cluster.leafs.values()
        with trio.fail_after(STEP_TIMEOUT):
            while (b"$G", b"up", None) not in link.entries:
                await trio.sleep(0.02)

    await _both_ways(leaf.port, hub.port, leaf_ready)
    for server in (hub, leaf):
        assert _matches({r["compression"] for r in server.cluster.leafz()["leafs"]}, "auto")


@pytest.mark.skipif(reference.NATS_SERVER_2_9 is None, reason="nats-server 2.9.10 not installed")
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_a_2910_peer_keeps_working(nursery, peers, dialer):
    """2.9.10 sends no compression in its INFO: "not supported", plain routes."""
    ours_changes = {"cluster_compression": CompressionOpts("s2_fast"), "cluster_pool_size": -1}
    if dialer == "natserver":
        peer = peers('listen: 127.0.0.1:%(port)s\n'
                     'cluster { name: c1, listen: 127.0.0.1:%(cluster)s }\n', reference.NATS_SERVER_2_9)
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    await (await trio.open_tcp_stream("127.0.0.1", peer.cluster_port)).aclose()
                    break
                except OSError:
                    await trio.sleep(0.02)
        ours = await start_node(nursery, routes=[f"nats://127.0.0.1:{peer.cluster_port}"], **ours_changes)
    else:
        ours = await start_node(nursery, **ours_changes)
        peer = peers('listen: 127.0.0.1:%(port)s\n'
                     f'cluster {{ name: c1, listen: 127.0.0.1:%(cluster)s, routes: ["{route_url(ours)}"] }}\n',
                     reference.NATS_SERVER_2_9)
    await wait_routes([ours], 1)
    assert {r["compression"] for r in ours.cluster.routez()["routes"]} == {"not supported"}

    async def ready():
        await wait_interest(ours, b"up")

    await _both_ways(ours.port, peer.port, ready)


@pytest.mark.skipif(reference.NATS_SERVER_2_9 is None, reason="nats-server 2.9.10 not installed")
@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_a_2910_leaf_or_hub_keeps_working(nursery, peers, dialer):
    """natserver at its leaf default (s2_auto) with 2.9.10: no compression in its INFO (nor a
    compress_mode in its CONNECT): "not supported", plain."""
    ours, _ = await _leaf_with_peer(nursery, peers, None, dialer, reference.NATS_SERVER_2_9)
    assert {leaf["compression"] for leaf in ours.cluster.leafz()["leafs"]} == {"not supported"}


# -- a peer that misbehaves: a raw connection speaking the route protocol -----------------------


async def _raw_route(port: int, mode: str):
    """Dial ``port`` as a route peer: read its INFO, send CONNECT and an INFO with ``mode``."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    with trio.fail_after(STEP_TIMEOUT):
        while b"\r\n" not in data:
            data += await stream.receive_some(65536)
    info = orjson.loads(data.split(b"\r\n", 1)[0][5:])
    connect = {"echo": False, "verbose": False, "pedantic": False, "tls_required": False, "headers": True,
               "name": "NFAKEPEER", "cluster": "c1", "dynamic": False, "lnoc": True}
    mine = {"server_id": "NFAKEPEER", "server_name": "fake", "version": "2.15.1", "proto": 3, "host": "127.0.0.1",
            "port": 1, "headers": True, "cluster": "c1", "compression": mode}
    await stream.send_all(b"CONNECT " + orjson.dumps(connect) + b"\r\nINFO " + orjson.dumps(mine) + b"\r\n")
    return stream, info


async def _until_closed(stream) -> bytes:
    got = b""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return got
            if not chunk:
                return got
            got += chunk


async def test_an_unknown_mode_is_refused_as_2151_does(nursery, peers):
    peer = peers('listen: 127.0.0.1:%(port)s\ncluster { name: c1, listen: 127.0.0.1:%(cluster)s, '
                 'compression: s2_fast }\n')
    ours = await start_node(nursery, cluster_compression=CompressionOpts("s2_fast"))
    answers = []
    for port in (ours.cluster.port, peer.cluster_port):
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    stream, info = await _raw_route(port, "s2_weird")
                    break
                except OSError:
                    await trio.sleep(0.02)
        assert info["compression"] == "s2_fast"
        answers.append(await _until_closed(stream))
    assert answers[0] == answers[1] == b"-ERR 'unsupported route compression mode \"s2_weird\"'\r\n"


async def test_a_broken_compressed_stream_closes_that_route_only(nursery, caplog):
    ours = await start_node(nursery)  # accept: it compresses because the peer asks
    other = await start_node(nursery, routes=[route_url(ours)])
    await wait_routes([ours, other], 1)
    stream, info = await _raw_route(ours.cluster.port, "s2_fast")
    assert info["compression"] == "accept"
    # natserver's INFO, now S2 (it writes s2_fast too: accept takes the peer's level)
    decoder = s2.StreamDecoder()
    with trio.fail_after(STEP_TIMEOUT):
        while (chunk := decoder.next_chunk()) is None:
            decoder.feed(await stream.receive_some(65536))
    assert chunk.startswith(b"INFO ") and b'"compression":"s2_fast"' in chunk
    await stream.send_all(s2.STREAM_IDENTIFIER + b"\x00\x09\x00\x00\0\0\0\0\x08\x10\x02\x00\x00")
    await _until_closed(stream)
    assert "s2: corrupt input" in caplog.text
    assert len(ours.cluster.routes) == 1 and len(other.cluster.routes) == 1  # the real route stays
    on_ours, on_other = await connect(ours.port), await connect(other.port)
    await on_other.send(b"SUB x 1\r\n")
    await on_other.ping()
    await wait_interest(ours, b"x")
    await on_ours.send(b"PUB x 1\r\n!\r\n")
    assert await read_msgs(on_other, 1) == [b"MSG x 1 1\r\n!\r\n"]


@pytest.mark.parametrize("block", [
    "cluster { port: 6222, compression: s2_fast }",
    "cluster { port: 6222, compression: { mode: s2_auto, rtt_thresholds: [10ms, 50ms] } }",
    "leafnodes { port: 7422, compression: s2_auto }",
    'leafnodes { remotes [ { url: "nats://127.0.0.1:7422", compression: s2_best } ] }',
])  # fmt: skip
def test_compression_keys_are_not_warned_about(tmp_path, block):
    from natserver.config.mapping import options_from_file, unsupported_warnings

    path = tmp_path / "c.conf"
    path.write_text(f"port: 4333\n{block}\n")
    options = options_from_file(str(path))
    options.validate()
    assert not [line for line in unsupported_warnings(options) if "compression" in line]


@pytest.mark.parametrize("block, error", [
    ("cluster { port: 6222, compression: bogus }", 'unsupported compression mode "bogus"'),
    ("leafnodes { port: 7422, compression: { mode: s2_auto, rtt_thresholds: [50ms, 10ms] } }",
     "RTT threshold values [50ms 10ms] should be in ascending order"),
    ("cluster { port: 6222, compression: { mode: auto, rtt_thresholds: ['0s', '0s'] } }",
     'compression mode "auto" requires at least one RTT threshold'),
    ("cluster { port: 6222, compression: { mode: s2_auto, rtt_thresholds: [1ms, 2ms, 3ms, 4ms, 5ms] } }",
     'compression mode "s2_auto" should have no more than 4 RTT thresholds: [1ms 2ms 3ms 4ms 5ms]'),
])  # fmt: skip
def test_bad_modes_stop_the_server_as_2151_does(tmp_path, block, error):
    """nats-server -t accepts the file (the mode is checked by NewServer); starting fails."""
    from natserver.config.mapping import options_from_file

    path = tmp_path / "c.conf"
    path.write_text(f"port: -1\n{block}\n")
    options = options_from_file(str(path))
    with pytest.raises(ValueError) as caught:
        options.validate()
    assert str(caught.value) == error
    run = subprocess.run([reference.NATS_SERVER, "-c", str(path)], capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and run.stderr.strip() == f"nats-server: {error}"


class _S2Peer:
    """A raw route peer that negotiated compression: reads natserver's S2 stream (noting the
    chunk types it came in) and writes its own."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.decoder = s2.StreamDecoder()
        self.encoder = s2.StreamEncoder()
        self.plain = b""
        self.kinds: list[int] = []  # the data chunks' types, as they came (0 compressed, 1 not)

    async def read_until(self, needle: bytes) -> None:
        while needle not in self.plain:
            data = await self.stream.receive_some(65536)
            assert data, self.plain[-300:]
            self._note_kinds(data)
            self.decoder.feed(data)
            while (chunk := self.decoder.next_chunk()) is not None:
                self.plain += chunk

    def _note_kinds(self, data: bytes) -> None:  # (every read here holds whole chunks: small writes)
        at = 0
        while at + 4 <= len(data):
            kind, size = data[at], int.from_bytes(data[at + 1 : at + 4], "little")
            if kind in (0, 1):
                self.kinds.append(kind)
            at += 4 + size

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(self.encoder.encode(data))


async def test_s2_auto_follows_the_rtt_of_the_pings(nursery):
    """client.go updateS2AutoCompressionLevel: at the handshake the RTT is the time since the
    connection started (well under the first threshold, 1 s: s2_uncompressed); a PONG to a
    PING sent 3.5 s earlier (the PING's time is set back rather than waited for) makes it
    s2_best (above the last threshold), what natserver then writes with."""
    thresholds = (1.0, 2.0, 3.0)
    ours = await start_node(nursery, cluster_compression=CompressionOpts("s2_auto", thresholds), cluster_pool_size=-1)
    with trio.fail_after(STEP_TIMEOUT):
        stream, info = await _raw_route(ours.cluster.port, "s2_fast")
        assert info["compression"] == "s2_auto"
        peer = _S2Peer(stream)
        await peer.read_until(b"\r\n")  # natserver's INFO, compressed
        assert peer.plain.startswith(b"INFO ") and b'"compression":"s2_auto"' in peer.plain
        mine = {"server_id": "NFAKEPEER", "server_name": "fake", "version": "2.15.1", "proto": 3,
                "host": "127.0.0.1", "port": 1, "headers": True, "cluster": "c1", "compression": "s2_fast"}
        await peer.send(b"INFO " + orjson.dumps(mine) + b"\r\n")  # registers the route
        await wait_routes([ours], 1)
        (route,) = ours.cluster.route_conns
        assert route.compression == "s2_uncompressed"
        client = await connect(ours.port)  # interest natserver tells the peer: RS+ lines, compressible
        await client.send(b"".join(b"SUB early.%d.created %d\r\n" % (i, i) for i in range(100)))
        await client.ping()
        await peer.read_until(b"RS+ $G early.99.created\r\n")
        assert set(peer.kinds) == {1}  # uncompressed chunks so far
        route.rtt_start = trio.current_time() - 3.5  # (a PING "sent" 3.5 s ago)
        await peer.send(b"PONG\r\n")
        while route.compression == "s2_uncompressed":
            await trio.sleep(0.01)
        assert route.rtt >= 3.5
        assert ours.cluster.routez()["routes"][0]["compression"] == "s2_best"
        before = len(peer.kinds)
        await client.send(b"".join(b"SUB orders.%d.created %d\r\n" % (i, 100 + i) for i in range(100)))
        await client.ping()
        await peer.read_until(b"RS+ $G orders.99.created\r\n")
        assert peer.kinds[before:] and set(peer.kinds[before:]) == {0}  # compressed now


async def test_decoding_is_bounded_per_turn(nursery, monkeypatch):
    """A compressed read that decodes to more than DECODE_PER_TURN is handled over several
    turns (other tasks run in between), and all of it is."""
    from natserver.cluster import routes

    monkeypatch.setattr(routes, "DECODE_PER_TURN", 1000)
    turns = 0
    process = routes.Route._process

    def counting(self):
        nonlocal turns
        turns += 1
        return process(self)

    monkeypatch.setattr(routes.Route, "_process", counting)
    ours = await start_node(nursery, cluster_pool_size=-1)
    with trio.fail_after(STEP_TIMEOUT):
        stream, _ = await _raw_route(ours.cluster.port, "s2_fast")
        peer = _S2Peer(stream)
        await peer.read_until(b"\r\n")
        mine = {"server_id": "NFAKEPEER", "server_name": "fake", "version": "2.15.1", "proto": 3,
                "host": "127.0.0.1", "port": 1, "headers": True, "cluster": "c1", "compression": "s2_fast"}
        await peer.send(b"INFO " + orjson.dumps(mine) + b"\r\n")
        await wait_routes([ours], 1)
        turns = 0
        # ten chunks of 600 interest lines in one write, then a PING
        subs = [b"".join(b"RS+ $G s.%d.%d\r\n" % (i, j) for j in range(600)) for i in range(10)]
        await stream.send_all(b"".join(peer.encoder.encode(part) for part in subs) + peer.encoder.encode(b"PING\r\n"))
        await peer.read_until(b"PONG\r\n")
    (route,) = ours.cluster.route_conns
    assert len(route.entries) == 6000
    assert turns >= 10


@pytest.mark.parametrize("dialer", ["natserver", "nats-server"])
async def test_large_messages_cross_compressed(nursery, peers, dialer):
    """Three 900 KB payloads each way at once (flushes of more than one S2 chunk: 2.15.1's
    writer cuts 1 MiB blocks, ours 64 KiB)."""
    ours, peer = await _route_with_peer(nursery, peers, ", compression: s2_best", dialer)
    on_ours, on_theirs = await connect(ours.port), await connect(peer.port)
    payloads = [(b"%d-0123456789abcdef" % i) * 50_000 for i in range(3)]
    await on_theirs.send(b"SUB big 1\r\n")
    await on_theirs.ping()
    await wait_interest(ours, b"big")
    await on_ours.send(b"".join(b"PUB big %d\r\n%s\r\n" % (len(p), p) for p in payloads))
    assert [m.split(b"\r\n")[1] for m in await read_msgs(on_theirs, 3)] == payloads
    await on_ours.send(b"SUB back 1\r\n")
    await on_ours.ping()
    with trio.fail_after(STEP_TIMEOUT):  # (until the peer knows of natserver's interest)
        while b"MSG back" not in await on_ours.nothing_within(0.05):
            await on_theirs.send(b"PUB back 1\r\n.\r\n")
    await on_theirs.send(b"".join(b"PUB back %d\r\n%s\r\n" % (len(p), p) for p in payloads))
    got: list = []
    while len(got) < 3:  # (probes still on their way come first)
        got += [m.split(b"\r\n")[1] for m in await read_msgs(on_ours, 1) if not m.endswith(b" 1\r\n.\r\n")]
    assert got == payloads
