"""Listeners on every interface as nats-server's (issue 30 items 7 and 16): one dual-stack
socket, so a client that dials localhost and gets ::1 first connects (the client, WebSocket,
monitoring, route and leafnode listeners alike), peers named as Go names them (127.0.0.1, not
::ffff:127.0.0.1), and the ports file listing every interface's address for each listener,
the WebSocket one included, as nats-server 2.15.1 writes it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import nats
import pytest
import trio

import natserver
from natserver.config.options import WebsocketOptions
from natserver.server.binding import bind_sockets, peer_ip
from natserver.server.listen import interface_addresses, listener_urls
from tests.conftest import make_options

TIMEOUT = 10
REFERENCE = "/opt/nats-server-2.15.1/nats-server"  # the reference nats-server (the brief's 2.15.1)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")


async def _first_bytes(host: str, port: int, send: bytes = b"") -> bytes:
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            if send:
                await stream.send_all(send)
            return await stream.receive_some(4096)


@needs_ipv6
async def test_every_wildcard_listener_takes_ipv6_and_ipv4(nursery):
    options = make_options(host="0.0.0.0", http_port=-1, cluster_port=-1, leafnode_port=-1,
                           websocket=WebsocketOptions(host="0.0.0.0", port=-1, no_tls=True))
    server = await nursery.start(natserver.serve, options)
    try:
        for host, seen in (("::1", "::1"), ("127.0.0.1", "127.0.0.1")):
            info = json.loads((await _first_bytes(host, server.port))[5:])
            assert info["client_ip"] == seen  # not ::ffff:127.0.0.1
            http = await _first_bytes(host, server.monitor.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert http.startswith(b"HTTP/1.1 200")
            route = await _first_bytes(host, server.cluster.port)
            assert route.startswith(b"INFO ")
            leaf = await _first_bytes(host, server.cluster.leaf_port)
            assert leaf.startswith(b"INFO ")
            upgrade = (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            ws = await _first_bytes(host, server.websocket.port, upgrade)
            assert ws.startswith(b"HTTP/1.1 101")
    finally:
        await server.shutdown()


@needs_ipv6
def test_nats_py_connects_over_ipv6_to_the_default_host(threaded_server):
    handle = threaded_server(host="0.0.0.0")
    port = handle.server.port

    async def main():
        nc = await nats.connect(f"nats://[::1]:{port}", connect_timeout=TIMEOUT)
        try:
            sub = await nc.subscribe("v6")
            await nc.publish("v6", b"over ::1")
            assert (await sub.next_msg(timeout=TIMEOUT)).data == b"over ::1"
            assert nc._server_info["client_ip"] == "::1"
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_named_host_listens_on_one_address():
    [sock] = bind_sockets("localhost", 0)
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1"  # Go prefers the name's IPv4 address
    [sock] = bind_sockets("127.0.0.1", 0)
    with sock:
        assert sock.family == socket.AF_INET


def test_peer_ip_unmaps_ipv4():
    assert (peer_ip("::ffff:10.1.2.3"), peer_ip("::1"), peer_ip("fd00::2"), peer_ip("10.1.2.3")) == (
        "10.1.2.3", "::1", "fd00::2", "10.1.2.3")


def test_listener_urls():
    assert listener_urls("ws", "127.0.0.1", 80) == ["ws://127.0.0.1:80"]
    assert listener_urls("tls", "::1", 4222) == ["tls://[::1]:4222"]
    addresses = interface_addresses()
    if sys.platform.startswith("linux"):
        assert addresses[:1] == ["127.0.0.1"]  # lo is interface 1
    assert listener_urls("nats", "0.0.0.0", 1) == [f"nats://[{a}]:1" if ":" in a else f"nats://{a}:1"
                                                   for a in addresses or ["127.0.0.1"]]


WEBSOCKET_CONFIG = """
listen: 0.0.0.0:-1
http: 0.0.0.0:-1
websocket { port: -1, no_tls: true }
cluster { port: -1 }
"""


@contextlib.contextmanager
def _ports_file(argv: list[str], directory):
    """The ports file a server started with ``argv`` writes into ``directory`` (while it runs)."""
    proc = subprocess.Popen([*argv, "-ports_file_dir", str(directory)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not any(name.endswith(".ports") and (directory / name).stat().st_size for name in os.listdir(directory)):
            assert time.monotonic() < deadline, "no ports file"
            time.sleep(0.02)
        [name] = [name for name in os.listdir(directory) if name.endswith(".ports")]
        yield json.loads((directory / name).read_text())
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)


def _hosts(urls: list[str]) -> list[str]:
    return [url.rsplit(":", 1)[0] for url in urls]


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_ports_file_lists_every_interface_and_the_websocket_listener(kind, tmp_path):
    if kind == "nats-server" and not os.path.exists(REFERENCE):
        pytest.skip("nats-server 2.15.1 not installed")
    config = tmp_path / "ws.conf"
    config.write_text(WEBSOCKET_CONFIG)
    directory = tmp_path / "ports"
    directory.mkdir()
    argv = [REFERENCE] if kind == "nats-server" else [sys.executable, "-m", "natserver"]
    with _ports_file([*argv, "-c", str(config)], directory) as ports:
        assert list(ports) == ["nats", "monitoring", "cluster", "websocket"]
        addresses = [f"[{a}]" if ":" in a else a for a in interface_addresses()]
        expected = {"nats": "nats", "monitoring": "http", "cluster": "nats", "websocket": "ws"}
        for key, scheme in expected.items():
            assert _hosts(ports[key]) == [f"{scheme}://{a}" for a in addresses], key
            assert len({url.rsplit(":", 1)[1] for url in ports[key]}) == 1  # one port for all
        if _has_ipv6_loopback():  # and each is reached there
            for key in expected:
                port = int(ports[key][0].rsplit(":", 1)[1])
                socket.create_connection(("::1", port), timeout=TIMEOUT).close()


@needs_ipv6
async def test_a_tls_listener_on_every_interface_is_reached_over_ipv6_and_listed_as_tls(nursery, tmp_path):
    """The issue's case: a client that dials localhost, gets ::1 first, and must reach the TLS
    handshake (to see the certificate error it expects, or to succeed)."""
    from natserver.server.files import write_ports_file
    from tests.auth.test_tls import Certs

    (tmp_path / "certs").mkdir()
    certs = Certs(tmp_path / "certs")
    options = make_options(host="0.0.0.0", tls=certs.tls(), ports_file_dir=str(tmp_path))
    server = await nursery.start(natserver.serve, options)
    try:
        with trio.fail_after(TIMEOUT):
            stream = await trio.open_tcp_stream("::1", server.port)
            info = json.loads((await stream.receive_some(4096))[5:])
            assert info["tls_required"] is True and info["client_ip"] == "::1"
            tls = trio.SSLStream(stream, certs.client_context(), server_hostname="localhost")
            await tls.do_handshake()  # the certificate names localhost: the handshake completes
            await tls.send_all(b"CONNECT {}\r\nPING\r\n")
            assert b"PONG" in await tls.receive_some(4096)
            await tls.aclose()
        with open(write_ports_file(options, server, None)) as f:
            ports = json.load(f)
        assert ports["nats"] == listener_urls("tls", "0.0.0.0", server.port)
        assert all(url.startswith("tls://") for url in ports["nats"])
    finally:
        await server.shutdown()


@needs_ipv6
def test_the_early_bound_client_port_takes_ipv6(tmp_path):
    """A plain command line binds the client port before the imports (natserver.launch): the
    same one dual-stack socket."""
    directory = tmp_path / "ports"
    directory.mkdir()
    with _ports_file([sys.executable, "-m", "natserver", "-p", "-1"], directory) as ports:
        port = int(ports["nats"][0].rsplit(":", 1)[1])
        for host in ("::1", "127.0.0.1"):
            with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
                info = sock.makefile("rb").readline()
                assert json.loads(info[5:])["client_ip"] == host
