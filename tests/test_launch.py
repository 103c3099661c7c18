"""The command's early listener (natserver/launch.py, issue #17): a plain command line gets its
port opened before the server is imported, and the server then serves on that very socket;
anything else is left to the full command line parser."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from natserver import launch
from natserver.cli import _early_sockets
from natserver.config.flags import build_options, parse_args
from natserver.protocol import const

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
