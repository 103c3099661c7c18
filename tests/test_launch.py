"""The command's early listener (natserver/launch.py, issue #17): a plain command line gets its
port opened before the server is imported, and the server then serves on that very socket;
anything else is left to the full command line parser."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from natserver import launch
from natserver.app import build_server
from natserver.cli import _early_sockets
from natserver.config.flags import build_options, parse_args
from natserver.protocol import const
from natserver.server.early import EarlyGreeter, make_identity

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 15.0


@pytest.mark.parametrize(
    "argv, address",
    [
        ([], (None, const.DEFAULT_PORT)),
        (["-p", "4333"], (None, 4333)),
        (["-a", "127.0.0.1", "-p", "-1"], ("127.0.0.1", 0)),
        (["--addr=127.0.0.1", "--port=4335", "-DV"], ("127.0.0.1", 4335)),
        (["-net", "0.0.0.0", "-p", "0"], (None, const.DEFAULT_PORT)),  # -p 0: the default port
        (["-p", "4333", "-js", "-sd", "/tmp/x", "-D=true", "-m", "8222"], (None, 4333)),
        # node-nats-streaming's harness: nats-streaming-server's flags
        (["-p", "4336", "-SDV", "-log", "/tmp/stan.log", "--store", "FILE", "--dir", "/tmp/d"], (None, 4336)),
        (["-p", "4337", "--stan", "-cid", "c1", "-mm", "100", "-ma", "1h", "-hbi", "1s"], (None, 4337)),
    ],
)
def test_plain_command_lines_are_bound_early(argv, address):
    assert launch.early_address(argv) == address
    # ... at the address the options will ask for, so the server takes the early socket.
    options = build_options(parse_args(argv))
    host = None if options.host in ("", "0.0.0.0") else options.host
    assert address == (host, 0 if options.port == const.RANDOM_PORT else options.port)


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "server.conf"],  # a config file may say another port
        ["-p", "010"],  # octal for Go
        ["-p", "0x10"],
        ["-p", "70000"],
        ["-p"],
        ["-sl", "reload"],
        ["-t", "-c", "x.conf"],
        ["-v"],
        ["version"],
        ["--tls", "-p", "4333"],
        ["-D=maybe"],
        ["--unknown"],
        ["-p", "4333", "-ns", "nats://127.0.0.1:4222"],  # -ns: no client listener at all
        ["-p", "4333", "-sc", "stan.conf"],
    ],
)
def test_anything_else_is_left_to_the_full_parser(argv):
    assert launch.early_address(argv) is None


def test_bind_early_listens_and_a_port_in_use_is_left_to_the_server():
    early = launch.bind_early(["-a", "127.0.0.1", "-p", "-1"])
    assert early is not None
    (host, port), sockets = early
    try:
        assert host == "127.0.0.1" and port == 0 and len(sockets) == 1
        bound = sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", bound), timeout=TIMEOUT):
            pass  # the kernel accepts into the backlog: nobody has called accept() yet
        assert launch.bind_early(["-a", "127.0.0.1", "-p", str(bound)]) is None
    finally:
        for sock in sockets:
            sock.close()


def test_the_early_sockets_are_dropped_when_the_options_listen_elsewhere():
    early = launch.bind_early(["-a", "127.0.0.1", "-p", "-1"])
    assert early is not None
    options = build_options(parse_args(["-a", "127.0.0.1", "-p", "-1"]))
    assert _early_sockets(early, options) == early[1]
    options.port = 4999
    assert _early_sockets(early, options) is None
    assert all(sock.fileno() == -1 for sock in early[1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_command_serves_on_the_early_socket(tmp_path):
    port = _free_port()
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
    )
    try:
        # Connect as soon as the port takes connections (possibly before the server runs):
        # the INFO still comes, on the same connection, once it does.
        for _ in range(int(TIMEOUT * 100)):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                subprocess.run(["sleep", "0.01"], check=True)
        with sock:
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                assert chunk, "closed before INFO"
                data += chunk
            assert data.startswith(b"INFO {")
            sock.sendall(b"CONNECT {}\r\nPING\r\n")
            while b"PONG\r\n" not in data:
                chunk = sock.recv(4096)
                assert chunk
                data += chunk
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
        proc.stderr.close()


# -- the early greeting (server/early.py): the INFO on the wire before trio is imported --------


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def _info(line: bytes) -> dict:
    assert line.startswith(b"INFO ") and line.endswith(b" \r\n"), line
    return json.loads(line[5:-3])


@pytest.mark.parametrize(
    "argv",
    [
        ["-a", "127.0.0.1", "-p", "-1"],
        ["-p", "4333", "-n", "edge-1", "-js", "-sd", "/tmp/x", "--max_payload", "2048", "-DV"],
        ["--addr=127.0.0.1", "--server_name=a", "--name", "b", "-m", "8222"],
        ["-p", "4333", "--jetstream=false"],
    ],
)
def test_the_greeting_is_the_info_the_server_builds(argv):
    """launch.greeting_base, from the command line alone, equals the INFO fields the server
    builds from the options (else the server would close the greeted connections)."""
    identity = make_identity()
    base = launch.greeting_base(argv, identity.server_id, 4333)
    assert base is not None
    server = build_server(build_options(parse_args(argv)))
    server.adopt_early(EarlyGreeter([], identity, base))
    server.port = 4333
    assert server._make_info_base() == base
    assert list(server._make_info_base()) == list(base)  # Go's field order too


@pytest.mark.parametrize(
    "argv",
    [
        ["-p", "4333", "--max_payload", "1MB"],  # units: left to the options' parser
        ["-p", "4333", "--max_connections", "1"],  # the server answers over-limit connections
        ["-p", "4333", "--stan", "-cid", "c1"],
        ["-c", "server.conf"],
    ],
)
def test_no_greeting_where_the_command_line_does_not_say_it_all(argv):
    assert launch.greeting_base(argv, make_identity().server_id, 4333) is None


def test_the_greeter_greets_until_the_handover():
    early = launch.bind_early(["-a", "127.0.0.1", "-p", "-1"])
    assert early is not None
    sockets = early[1]
    port = sockets[0].getsockname()[1]
    greeter = launch.start_greeter(["-a", "127.0.0.1", "-p", "-1"], sockets)
    assert greeter is not None
    clients = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(3)]
    try:
        infos = [_info(_read_line(sock)) for sock in clients]
        assert [info["client_id"] for info in infos] == [1, 2, 3]
        assert {info["server_id"] for info in infos} == {greeter.identity.server_id}
        assert all(info["xkey"] == greeter.identity.xkey and info["port"] == port for info in infos)
        greeted = greeter.handover()
        assert [(cid, ip) for _, cid, ip, _ in greeted] == [(1, "127.0.0.1"), (2, "127.0.0.1"), (3, "127.0.0.1")]
        assert all(not conn.getblocking() for conn, *_ in greeted)
        # The listener stays non-blocking (the flag is its descriptor's, which the server's
        # accept loop shares and accepts on until EAGAIN: blocking, it froze the server).
        assert all(not sock.getblocking() for sock in sockets)
        assert greeter.handover() == []
        # After the handover a new connection waits for the server, greeted by nobody.
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as late:
            late.settimeout(0.2)
            with pytest.raises(socket.timeout):
                late.recv(1)
        for conn, *_ in greeted:
            conn.close()
    finally:
        for sock in clients + sockets:
            sock.close()


def test_the_command_serves_the_greeted_clients_as_its_own(tmp_path):
    """A client that connects before the server runs gets the INFO from the greeter, then is
    served by the server under the same client id and server identity as later clients."""
    port = _free_port()
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(port), "-m", "-1", "-D"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
    )
    try:
        for _ in range(int(TIMEOUT * 1000)):
            try:
                first = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.001)
        with first:
            early_info = _info(_read_line(first))
            first.sendall(b"CONNECT {\"verbose\":false}\r\nSUB greeted 1\r\nPING\r\n")
            assert _read_line(first) == b"PONG\r\n"
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as second:
                later_info = _info(_read_line(second))
                second.sendall(b"CONNECT {\"verbose\":false}\r\nPUB greeted 2\r\nhi\r\nPING\r\n")
                assert _read_line(second) == b"PONG\r\n"
            data = b""
            while b"hi\r\n" not in data:
                chunk = first.recv(4096)
                assert chunk
                data += chunk
            assert data == b"MSG greeted 1 2\r\nhi\r\n"
        assert early_info["client_id"] == 1 and later_info["client_id"] == 2
        same = lambda info: {k: v for k, v in info.items() if k != "client_id"}  # noqa: E731
        assert same(early_info) == same(later_info)
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
        log = proc.stderr.read().decode()
        proc.stderr.close()
    # The first client was greeted before the server ran (it polled from the spawn on).
    assert "Serving 1 connections greeted before the start" in log, log

