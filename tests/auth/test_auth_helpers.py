"""Helpers the security tests share (test_auth*.py, test_accounts.py, test_jwt.py): running
nats-server and natserver as subprocesses with the same configuration, and a raw client that
can answer the INFO nonce. Differential tests compare what a client sees from both."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from tests import reference

# The reference nats-server (2.15.1): see tests/reference.py.
NATS_SERVER = reference.NATS_SERVER or "nats-server"  # the default of running(); unused when missing
HAVE_NATS_SERVER = reference.HAVE_NATS_SERVER
needs_nats_server = reference.needs_nats_server


SERVERS = ("nats-server", "natserver")


# Seconds a server process gets to accept connections (a loaded 2-core machine running the
# suite on two workers can take several to start Python and import natserver).
START_TIMEOUT = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(kind: str, config: str, tmp_path, args: tuple = (), binary: str = NATS_SERVER, port: int = 0):
    """A server process (``kind`` "nats-server", run from ``binary``, or "natserver") with
    ``config``, on ``port`` (0: a free one, as for a restart on the same address); yields its port."""
    port = port or free_port()
    path = tmp_path / f"{kind}-{port}.conf"
    path.write_text(config)
    argv = [binary] if kind == "nats-server" else [sys.executable, "-m", "natserver"]
    argv += ["-a", "127.0.0.1", "-p", str(port), "-c", str(path), *args]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()  # (a server still starting would keep stderr open: read() never returned)
                    _, err = proc.communicate(timeout=10)
                    raise RuntimeError(f"{kind} did not start: {err.decode(errors='replace')}") from None
                time.sleep(0.03)
        yield port
    finally:
        proc.kill()
        proc.wait(5)
        proc.stderr.close()


def start_error(kind: str, config: str, tmp_path) -> str:
    """The first line a server prints when it refuses ``config`` (and exits)."""
    path = tmp_path / f"{kind}-bad.conf"
    path.write_text(config)
    argv = [NATS_SERVER] if kind == "nats-server" else [sys.executable, "-m", "natserver"]
    proc = subprocess.run([*argv, "-a", "127.0.0.1", "-p", str(free_port()), "-c", str(path)],
                          capture_output=True, timeout=10)
    assert proc.returncode != 0
    text = (proc.stderr or proc.stdout).decode(errors="replace")
    return text.strip().splitlines()[-1] if text.strip() else ""


def read_info(sock) -> dict:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError(data)
        data += chunk
    return json.loads(data[5:-3])


def exchange(port: int, send, quiet: float = 0.3, timeout: float = 3.0) -> tuple[dict, bytes, bool]:
    """Connect, read INFO, send ``send`` (bytes, or a function of the INFO dict returning
    bytes), then collect until EOF or ``quiet`` seconds without data. (INFO, bytes, EOF?)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        info = read_info(sock)
        data = send(info) if callable(send) else send
        if data:
            sock.sendall(data)
        got = b""
        sock.settimeout(quiet)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return info, got, False
            except ConnectionResetError:
                return info, got, True
            if not chunk:
                return info, got, True
            got += chunk
        return info, got, False


def connect_line(**fields) -> bytes:
    fields.setdefault("verbose", False)
    fields.setdefault("pedantic", False)
    return b"CONNECT " + json.dumps(fields).encode() + b"\r\n"


def info_shape(info: dict) -> list[str]:
    """INFO keys in order (values vary between servers). ``api_lvl`` is left out: natserver
    announces the JetStream API level it implements (tests/server/test_info_215.py)."""
    return [k for k in info if k != "api_lvl"]


def test_helpers_work(tmp_path):
    with running("natserver", "port: 4222\n", tmp_path) as port:
        info, got, eof = exchange(port, b"PING\r\n")
    assert got == b"PONG\r\n" and not eof and "server_id" in info
