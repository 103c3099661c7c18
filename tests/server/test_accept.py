"""The client listener's accept loop (Server.accept_loop): a storm of connects waiting at once is
taken in batches, every one served; out of descriptors it backs off and logs as nats-server
does, and serves again once descriptors are free; lame duck stops it.

Also the writer task each connection starts only when it needs one (Client.wake_writer).
"""

from __future__ import annotations

import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from natserver.server.signals import lame_duck_mode

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0


async def _handshake(port: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    while b"\r\n" not in data:
        data += await stream.receive_some(4096)
    assert data.startswith(b"INFO ")
    await stream.send_all(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
    data = b""
    while b"PONG\r\n" not in data:
        chunk = await stream.receive_some(4096)
        assert chunk, "closed before PONG"
        data += chunk
    return stream


async def test_a_storm_of_waiting_connects_is_served(server):
    """Connects queued in the backlog all at once (more than one batch) each get INFO and
    PONG, and all of them can then exchange messages."""
    n = 300
    with trio.fail_after(TIMEOUT):
        socks = [socket.socket() for _ in range(n)]
        for sock in socks:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", server.port))
        streams = []
        async with trio.open_nursery() as nursery:
            async def finish(sock):
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
                data = b""
                while b"\r\n" not in data:
                    data += await stream.receive_some(4096)
                assert data.startswith(b"INFO ")
                await stream.send_all(b'CONNECT {"verbose":false}\r\nSUB storm 1\r\nPING\r\n')
                while b"PONG\r\n" not in data:
                    chunk = await stream.receive_some(4096)
                    assert chunk
                    data += chunk
                streams.append(stream)

            for sock in socks:
                nursery.start_soon(finish, sock)
        assert len(streams) == n
        assert len(server.clients) == n
        await streams[0].send_all(b"PUB storm 2\r\nhi\r\n")
        for stream in streams:
            data = b""
            while b"MSG storm 1 2\r\nhi\r\n" not in data:
                data += await stream.receive_some(4096)
        for stream in streams:
            await stream.aclose()


async def test_writer_task_starts_only_when_the_socket_is_full(server):
    """A subscriber that reads nothing gets its backlog through the writer task (started on
    demand when the socket stops taking bytes), and receives it all once it reads."""
    with trio.fail_after(TIMEOUT):
        sub = await _handshake(server.port)
        await sub.send_all(b"SUB big 1\r\nPING\r\n")
        data = b""
        while b"PONG\r\n" not in data:
            data += await sub.receive_some(4096)
        client = max(server.clients.values(), key=lambda c: c.cid)
        assert not client._writer_started  # INFO and PONGs went out in place
        assert client._stream is None  # (and no trio stream was built for them)
        pub = await _handshake(server.port)
        payload = b"x" * 60000
        count = 200  # 12 MB: more than the socket buffers take
        await pub.send_all(b"".join(b"PUB big %d\r\n%s\r\n" % (len(payload), payload) for _ in range(count)))
        while client.pending < 1_000_000:  # routed, and mostly still queued: the socket is full
            await trio.sleep(0.01)
        assert client._writer_started
        assert isinstance(client._stream, trio.SocketStream)  # built for the writer's send_all
        head = b"MSG big 1 %d\r\n" % len(payload)
        want = (head + payload + b"\r\n") * count
        got = bytearray()
        while len(got) < len(want):
            chunk = await sub.receive_some(65536)
            assert chunk
            got += chunk
        assert bytes(got) == want
        await sub.aclose()
        await pub.aclose()


async def test_plain_clients_are_served_through_their_descriptor(server):
    """The listener hands a plain client over as its stdlib socket (non-blocking, TCP_NODELAY,
    as trio's SocketStream would set it), which INFO, PONGs and MSGs go through without a trio
    stream ever being built; the socket is closed when the client goes."""
    with trio.fail_after(TIMEOUT):
        conn = await _handshake(server.port)
        client = max(server.clients.values(), key=lambda c: c.cid)
        sock = client._sock
        assert isinstance(sock, socket.socket) and client._fd == sock.fileno()
        assert not sock.getblocking()
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await conn.send_all(b"SUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n")
        data = b""
        while b"PONG\r\n" not in data:
            data += await conn.receive_some(4096)
        assert data == b"MSG a 1 2\r\nhi\r\nPONG\r\n"
        assert client._stream is None
        await conn.aclose()
        while sock.fileno() != -1:
            await trio.sleep(0.01)
        assert client.closed and client.cid not in server.clients


async def test_lame_duck_stops_accepting(start_server, nursery):
    """Lame duck closes the listener under the accept loop, which ends: a new connect is
    refused while the connected client is told to move (INFO with ldm) and served on."""
    server = await start_server(lame_duck_duration=30, lame_duck_grace_period=10)
    with trio.fail_after(TIMEOUT):
        first = await _handshake(server.port)
        nursery.start_soon(lame_duck_mode, server)
        data = b""
        while b'"ldm":true' not in data:
            data += await first.receive_some(4096)
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", server.port)
        await first.send_all(b"PING\r\n")
        while b"PONG\r\n" not in data:
            data += await first.receive_some(4096)
        await first.aclose()


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))


@pytest.mark.skipif(sys.platform != "linux", reason="descriptor limits as on Linux")
def test_out_of_descriptors_backs_off_and_recovers(tmp_path):
    """With 48 descriptors the server runs out while accepting: it logs nats-server's
    'Temporary Client Accept Error' line, sleeps, and once the clients go away serves a new
    one; no connection is dropped for lack of a retry."""
    log_path = tmp_path / "server.stderr"
    with open(log_path, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1"],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            preexec_fn=_limit_descriptors,
        )
    socks: list[socket.socket] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (found := re.search(r"Listening for client connections on \S+:(\d+)", log_path.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.02)
        port = int(found.group(1))
        for _ in range(60):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        while "Temporary Client Accept Error" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.02)
        assert "Too many open files" in log_path.read_text()
        for sock in socks:
            sock.close()
        socks.clear()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.settimeout(5)
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                assert chunk, log_path.read_text()
                data += chunk
            assert data.startswith(b"INFO ")
            sock.sendall(b"PING\r\n")
            while b"PONG" not in data:
                data += sock.recv(4096)
        assert proc.poll() is None
    finally:
        for sock in socks:
            sock.close()
        proc.kill()
        proc.wait(timeout=10)


# -- CONNECT's field types (client._check_connect_types): the check of the fields sent --------

_TYPED_FIELDS = ("verbose", "pedantic", "tls_required", "echo", "headers", "no_responders", "protocol", "name",
                 "lang", "version", "user", "pass", "auth_token", "jwt", "sig", "nkey")


def _reference_check(options: dict) -> dict:
    """The check as it was, one look-up per typed field in a fixed order (before issue #33's
    per-field-sent loop): what the fast check must equal, error message included."""
    from natserver.protocol import errors
    from natserver.protocol.parser import ProtocolError
    from natserver.server.client import _GO_FOLDS

    opts = {}
    for key, value in options.items():
        opts[key.lower() if key.isascii() else key.translate(_GO_FOLDS).lower()] = value
    for key in _TYPED_FIELDS[:6]:
        value = opts.get(key)
        if value is not None and not isinstance(value, bool):
            raise ProtocolError(errors.SILENT_CLOSE, f"CONNECT {key} is not a boolean")
    value = opts.get("protocol")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ProtocolError(errors.SILENT_CLOSE, "CONNECT protocol is not an integer")
    for key in _TYPED_FIELDS[7:]:
        value = opts.get(key)
        if value is not None and not isinstance(value, str):
            raise ProtocolError(errors.SILENT_CLOSE, f"CONNECT {key} is not a string")
    return opts


def _outcome(check, options):
    try:
        return "ok", check(options)
    except Exception as exc:  # noqa: BLE001 (the error itself is compared)
        return type(exc).__name__, str(exc), getattr(exc, "error", None)


def test_connect_field_types_are_checked_as_before():
    """Any JSON object's keys (typed fields in any case, folded ones, others) and values of
    every JSON type: the same options or the same error as the reference's, which field it
    names included."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from natserver.server.client import _check_connect_types

    names = st.sampled_from(_TYPED_FIELDS).flatmap(
        lambda name: st.sampled_from([name, name.upper(), name.title(), name.replace("s", "\u017f")]))
    keys = st.one_of(names, st.sampled_from(["account", "new_account", "Kelvin\u212a", "x"]), st.text(max_size=4))
    values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3),
                       st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))

    @settings(max_examples=500, deadline=None)
    @given(st.dictionaries(keys, values, max_size=8))
    def check(options):
        assert _outcome(_check_connect_types, options) == _outcome(_reference_check, options)

    check()
