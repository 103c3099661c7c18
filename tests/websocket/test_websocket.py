"""The WebSocket listener (issue #18 item 6): nats-py's websocket transport against natserver,
the HTTP upgrade checked as nats-server 2.9.10 checks it (recorded answers, and a live
comparison when nats-server is installed), frames split anywhere, compression, wss://."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import nats
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

import natserver
from natserver.config.mapping import ConfigFileError, options_from_file, unsupported_warnings
from natserver.config.options import WebsocketOptions
from natserver.websocket.handshake import HandshakeReader, OriginPolicy, Refusal, Upgrade, accept_key
from natserver.websocket.stream import WebSocketStream
from tests.auth.test_auth_helpers import HAVE_NATS_SERVER, free_port, needs_nats_server, running, start_error
from tests.auth.test_tls import Certs
from tests.conftest import make_options

TIMEOUT = 20
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
UPGRADE = f"Host: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"

# What nats-server 2.9.10 answers (status line, body) to each request; the Date header varies.
REQUESTS = {
    "post": (f"POST / HTTP/1.1\r\n{UPGRADE}\r\n", "HTTP/1.1 405 Method Not Allowed", "Method Not Allowed\n"),
    "no upgrade header": (
        f"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "HTTP/1.1 400 Bad Request", "Bad Request\n"),
    "no connection header": (
        f"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "HTTP/1.1 400 Bad Request", "Bad Request\n"),
    "no key": (
        "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "HTTP/1.1 400 Bad Request", "Bad Request\n"),
    "version 12": (
        f"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 12\r\n\r\n",
        "HTTP/1.1 400 Bad Request", "Bad Request\n"),
    "not http": ("hello\r\n\r\n", "HTTP/1.1 400 Bad Request", "400 Bad Request"),
    "no host": (
        f"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "HTTP/1.1 400 Bad Request: missing required Host header", "400 Bad Request: missing required Host header"),
    "good": (f"GET / HTTP/1.1\r\n{UPGRADE}\r\n", "HTTP/1.1 101 Switching Protocols", None),
}


def _status_and_body(response: bytes) -> tuple[str, str | None]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode()
    return status, None if status.startswith("HTTP/1.1 101") else body.decode()


def _decide(raw: str, **policy) -> Upgrade | Refusal:
    reader = HandshakeReader(OriginPolicy(policy.get("same_origin", False), policy.get("allowed", [])),
                             policy.get("compression", False), policy.get("tls", False))
    decision = reader.feed(raw.encode())
    assert decision is not None
    return decision


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_handshake_answers_as_nats_server(name):
    raw, status, body = REQUESTS[name]
    decision = _decide(raw)
    assert _status_and_body(decision.response) == (status, body)
    if name == "good":
        assert decision.response == (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        )
    else:
        assert isinstance(decision, Refusal)


def test_accept_key_is_rfc_6455s_example():
    assert accept_key(KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_a_request_in_pieces_waits_for_the_end():
    reader = HandshakeReader(OriginPolicy(False, []), False, False)
    raw = f"GET / HTTP/1.1\r\n{UPGRADE}\r\n".encode()
    for i in range(len(raw) - 1):
        assert reader.feed(raw[i : i + 1]) is None
    assert isinstance(reader.feed(raw[-1:]), Upgrade)


@pytest.mark.parametrize(("policy", "origin", "allowed"), [
    ({"same_origin": True}, "http://h", True),
    ({"same_origin": True}, "http://h:80", True),
    ({"same_origin": True}, "https://h", False),  # port 443 is not the request's 80
    ({"same_origin": True}, "http://evil.example", False),
    ({"allowed": ["http://good.example"]}, "http://good.example", True),
    ({"allowed": ["http://good.example"]}, "https://good.example", False),
    ({"allowed": ["http://good.example:8080"]}, "http://good.example", False),
    ({"same_origin": True, "allowed": ["http://h"]}, "http://h", True),
    ({"same_origin": True}, "", True),  # no Origin: not a browser, accepted
])  # fmt: skip
def test_origin_rules(policy, origin, allowed):
    raw = f"GET / HTTP/1.1\r\n{UPGRADE}" + (f"Origin: {origin}\r\n" if origin else "") + "\r\n"
    decision = _decide(raw, **policy)
    assert isinstance(decision, Upgrade) == allowed
    if not allowed:
        assert decision.response.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert decision.reason.startswith("origin not allowed: ")


def test_compression_only_when_configured_and_offered():
    offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    with_offer = f"GET / HTTP/1.1\r\n{UPGRADE}{offer}\r\n"
    assert _decide(with_offer, compression=True).compress
    assert b"permessage-deflate; server_no_context_takeover; client_no_context_takeover" in _decide(with_offer, compression=True).response
    assert not _decide(with_offer).compress
    assert not _decide(f"GET / HTTP/1.1\r\n{UPGRADE}\r\n", compression=True).compress


# -- frames ------------------------------------------------------------------------------------


def _client_frames(payloads: list[bytes]) -> bytes:
    client = FrameProtocol(client=True, extensions=[])
    return b"".join(bytes(client.send_data(p, fin=True)) for p in payloads)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=8), st.data())
def test_frames_split_anywhere_give_the_same_bytes(payloads, data):
    wire = _client_frames(payloads) + bytes(FrameProtocol(client=True, extensions=[]).ping(b"p"))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)])]

    async def main():
        ours, theirs = trio.testing.memory_stream_pair()
        ws = WebSocketStream(ours, compress=False)
        got = b""
        async with trio.open_nursery() as nursery:
            async def feed():
                for chunk in chunks:
                    await theirs.send_all(chunk)
                await theirs.aclose()
            nursery.start_soon(feed)
            while True:
                piece = await ws.receive_some()
                if not piece:
                    break
                got += piece
        assert got == b"".join(payloads)

    trio.run(main)


async def test_pings_closes_and_protocol_errors():
    ours, theirs = trio.testing.memory_stream_pair()
    ws = WebSocketStream(ours, compress=False)
    client = FrameProtocol(client=True, extensions=[])
    await theirs.send_all(bytes(client.ping(b"hello")) + bytes(client.send_data(b"PING\r\n", fin=True)))
    with trio.fail_after(5):
        assert await ws.receive_some() == b"PING\r\n"
        client.receive_bytes(await theirs.receive_some())
        (pong,) = list(client.received_frames())
        assert (pong.opcode, pong.payload) == (Opcode.PONG, b"hello")
        await ws.send_all(b"PONG\r\n")
        client.receive_bytes(await theirs.receive_some())
        (frame,) = list(client.received_frames())
        assert (frame.opcode, frame.payload) == (Opcode.BINARY, b"PONG\r\n")
        # An unmasked frame from a client is a protocol error: a close frame, then EOF.
        await theirs.send_all(b"\x82\x02hi")
        assert await ws.receive_some() == b""
        client.receive_bytes(await theirs.receive_some())
        (close,) = list(client.received_frames())
        assert close.opcode is Opcode.CLOSE and close.payload[0] == 1002


# -- end to end ---------------------------------------------------------------------------------


def _ws_options(**changes) -> WebsocketOptions:
    return WebsocketOptions(**{"host": "127.0.0.1", "port": -1, "no_tls": True, **changes})


async def _interest(handle, subject: bytes) -> None:
    """Wait until the server has a subscriber on ``subject``. (nats-py's websocket transport
    sends what two tasks flush concurrently in either order, so a PING may overtake a SUB and
    ``flush()`` return before the subscription exists: seen 1 run in 4.)"""
    for _ in range(500):
        result = handle.server.sublist.match(subject)
        if result.psubs or result.qsubs:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no subscriber on {subject!r}")


def _run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


@pytest.mark.parametrize("compression", [False, True])
def test_nats_py_over_websocket_talks_to_tcp_clients(threaded_server, compression):
    handle = threaded_server(websocket=_ws_options(compression=compression))
    ws_port = handle.server.websocket.port

    async def main():
        ws = await nats.connect(f"ws://127.0.0.1:{ws_port}")
        tcp = await nats.connect(handle.url)
        try:
            got = []
            done = asyncio.Event()

            async def collect(msg):
                got.append((msg.subject, msg.data))
                if len(got) == 500:
                    done.set()

            await ws.subscribe("events.*", cb=collect)
            await _interest(handle, b"events.0")
            sent = [(f"events.{i % 7}", os.urandom(i % 400)) for i in range(500)]
            for subject, payload in sent:
                await tcp.publish(subject, payload)
            await tcp.flush()
            await asyncio.wait_for(done.wait(), 10)
            assert got == sent

            async def answer(msg):
                await msg.respond(b"ws:" + msg.data)

            await ws.subscribe("svc", cb=answer)
            await _interest(handle, b"svc")
            assert (await tcp.request("svc", b"q", timeout=5)).data == b"ws:q"
            big = os.urandom(600_000)  # many frames' worth, and over TCP segments
            box = asyncio.get_running_loop().create_future()

            async def big_cb(msg):
                box.set_result(msg.data)

            await tcp.subscribe("big", cb=big_cb)
            await tcp.flush()
            await ws.publish("big", big)
            await ws.flush()
            assert await asyncio.wait_for(box, 10) == big
        finally:
            await ws.close()
            await tcp.close()

    _run(main())


def test_wss_with_tls(threaded_server, tmp_path):
    certs = Certs(tmp_path)
    handle = threaded_server(websocket=_ws_options(no_tls=False, tls=certs.tls()))
    ws_port = handle.server.websocket.port

    async def main():
        nc = await nats.connect(f"wss://localhost:{ws_port}", tls=certs.client_context())
        try:
            sub = await nc.subscribe("x")
            await _interest(handle, b"x")
            await nc.publish("x", b"secure")
            msg = await sub.next_msg(timeout=5)
            assert msg.data == b"secure"
        finally:
            await nc.close()

    _run(main())


async def test_refused_handshakes_leave_the_server_serving(nursery):
    server = await nursery.start(natserver.serve, make_options(websocket=_ws_options(same_origin=True)))
    port = server.websocket.port
    with trio.fail_after(TIMEOUT):
        for raw, status, body in REQUESTS.values():
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(raw.replace("\r\n\r\n", "\r\nOrigin: http://evil.example\r\n\r\n", 1).encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                if not chunk:
                    break
                data += chunk
            expected = "HTTP/1.1 403 Forbidden" if status.startswith("HTTP/1.1 101") else status
            assert _status_and_body(data)[0] == expected, raw
            await stream.aclose()
        # A connection that never finishes its request is dropped after the handshake timeout
        # (here 0.2 s), and the listener still upgrades the next one.
        server.options.websocket.handshake_timeout = 0.2
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        await idle.send_all(b"GET / HTTP/1.1\r\n")
        assert await idle.receive_some() == b""
        good = await trio.open_tcp_stream("127.0.0.1", port)
        await good.send_all(f"GET / HTTP/1.1\r\n{UPGRADE}\r\n".encode())
        assert (await good.receive_some()).startswith(b"HTTP/1.1 101 Switching Protocols\r\n")


def test_config_block_and_refusals(tmp_path):
    path = tmp_path / "ws.conf"
    path.write_text(
        'websocket { listen: "127.0.0.1:-1", no_tls: true, same_origin: true, allowed_origins: ["http://a.example"],\n'
        '  compression: true, handshake_timeout: "3s", advertise: "ws.example:443" }\n'
    )
    options = options_from_file(path)
    assert options.websocket == WebsocketOptions(
        host="127.0.0.1", port=-1, no_tls=True, same_origin=True, allowed_origins=["http://a.example"],
        handshake_timeout=3.0, compression=True, advertise="ws.example:443")
    assert 'Websocket option "advertise" is not supported by natserver and is ignored' in unsupported_warnings(options)
    for text, error in [
        ("websocket { port: 1, no_tls: true, authorization { user: a, password: b } }", '"websocket.authorization" (websocket authentication) is not supported'),
        ("websocket { port: 1, no_tls: true, no_auth_user: a }", '"websocket.no_auth_user" (websocket authentication) is not supported'),
        ("websocket { port: 1, no_tls: true, bogus: 1 }", 'unknown field "bogus"'),
        ("websocket { port: 1, handshake_timeout: true }", "error parsing handshake timeout: unsupported type bool"),
    ]:
        path.write_text(text + "\n")
        with pytest.raises(ConfigFileError) as caught:
            options_from_file(path)
        assert error in str(caught.value), (text, str(caught.value))


def test_websocket_without_tls_or_no_tls_is_refused_as_nats_server_refuses(tmp_path):
    with pytest.raises(ValueError, match="^websocket requires TLS configuration$"):
        make_options(websocket=WebsocketOptions(port=4333)).validate()
    make_options(websocket=WebsocketOptions(port=4333, no_tls=True)).validate()
    config = f"websocket {{ port: {free_port()} }}\n"
    assert start_error("natserver", config, tmp_path) == "natserver: websocket requires TLS configuration"
    if HAVE_NATS_SERVER:
        assert start_error("nats-server", config, tmp_path) == "nats-server: websocket requires TLS configuration"


def test_varz_and_startup_lines(threaded_server):
    http_port = free_port()
    handle = threaded_server(websocket=_ws_options(same_origin=True, compression=True), http_port=http_port)
    varz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=5).read())
    assert varz["websocket"] == {"host": "127.0.0.1", "port": handle.server.websocket.port, "no_tls": True,
                                 "same_origin": True, "compression": True}


# -- against nats-server ----------------------------------------------------------------------------


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        data = b""
        deadline = time.monotonic() + 5
        while b"\r\n\r\n" not in data or (data.startswith(b"HTTP/1.1 101") and b"INFO " not in data):
            assert time.monotonic() < deadline
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


@needs_nats_server
def test_upgrade_answers_and_info_as_nats_server(tmp_path):
    results = {}
    for kind in ("nats-server", "natserver"):
        ws_port = free_port()
        config = f"websocket {{ port: {ws_port}, no_tls: true, same_origin: true }}\n"
        with running(kind, config, tmp_path):
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", ws_port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            answers = {name: _status_and_body(_exchange(ws_port, raw.encode())) for name, (raw, _, _) in REQUESTS.items()}
            answers["evil origin"] = _status_and_body(_exchange(ws_port, f"GET / HTTP/1.1\r\n{UPGRADE}Origin: http://x\r\n\r\n".encode()))
            upgraded = _exchange(ws_port, f"GET / HTTP/1.1\r\n{UPGRADE}\r\n".encode())
            head, _, frames = upgraded.partition(b"\r\n\r\n")
            client = FrameProtocol(client=True, extensions=[])
            client.receive_bytes(frames)
            info_frame = next(iter(client.received_frames()))
            info = json.loads(bytes(info_frame.payload)[5:-3])
            answers["upgrade head"] = head
            answers["info frame opcode"] = info_frame.opcode
            answers["info keys"] = sorted(k for k in info if k not in ("go", "connect_urls", "api_lvl"))
            results[kind] = answers
    assert results["natserver"] == results["nats-server"]
    assert results["natserver"]["evil origin"][0] == "HTTP/1.1 403 Forbidden"


# -- nats.ws, the browser client ------------------------------------------------------------------

NATS_WS_VERSION = "1.30.3"
WS_VERSION = "8.18.0"  # the browser's WebSocket, in node
SCENARIO = os.path.join(os.path.dirname(__file__), "natsws", "scenario.js")


@pytest.fixture(scope="session")
def natsws_modules(tmp_path_factory):
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    directory = tmp_path_factory.mktemp("natsws")
    result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                             f"nats.ws@{NATS_WS_VERSION}", f"ws@{WS_VERSION}"],
                            cwd=directory, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.skip(f"npm could not install nats.ws: {result.stderr[-300:]}")
    return str(directory / "node_modules")


@pytest.mark.parametrize("compression", [False, True])
def test_nats_ws_browser_client(threaded_server, natsws_modules, compression):
    handle = threaded_server(websocket=_ws_options(compression=compression))
    env = dict(os.environ, NODE_PATH=natsws_modules)
    result = subprocess.run(["node", SCENARIO, f"ws://127.0.0.1:{handle.server.websocket.port}"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"seen": [["greet.a", "hi a"], ["greet.b", "hi b"], ["greet.c", "hi c"]], "reply": "re:q",
                       "server_id": handle.server.server_id}
