"""Protocol tracing (issue #18 item 4): ``-DV`` prints what nats-server 2.9.10 prints.

The same byte scripts go to ``python -m natserver -DV`` and to ``nats-server -DV``; each
client's log lines (ports, cids and times masked) must be the ones recorded from nats-server
in ``trace_nats_server.json`` (``python -m tests.server.test_trace`` records them again), and
a live nats-server, when installed, must still print exactly the recorded lines.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from natserver.server.trace import go_quote
from tests import reference

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).with_name("trace_nats_server.json")
TIMEOUT = 15.0
NATS_SERVER = reference.NATS_SERVER  # nats-server 2.15.1 (tests/reference.py)

# One byte script per connection, run in this order, each on its own connection. Every script
# ends with a PING the driver waits for (so the lines are all in), unless it ends the connection.
SESSIONS = {
    "default": [
        b'CONNECT {"verbose":true,"pedantic":true,"lang":"python3","version":"2.6.0","name":"nm",'
        b'"headers":true,"protocol":1}\r\nSUB foo 1\r\nSUB bar q 2\r\nPUB foo 5\r\nhello\r\n'
        b"PUB foo rep 3\r\nabc\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nUNSUB 1\r\nUNSUB 2 5\r\n"
        b'PUB bar 4\r\n\x00\x01"\\\r\nPUB foo.* 1\r\nx\r\nSUB a..b 3\r\nPUB bar 7\r\n\xc3\xa9\xff\tz\x7f\x02\r\nPING\r\n',
        b'CONNECT {"verbose":false,"name":"","lang":"go","version":"1.2"}\r\nSUB x.> 9\r\nPING\r\n',
        b'CONNECT {"verbose":false,"lang":"nats.js"}\r\nPUB x.y _INBOX.1 2\r\nhi\r\nPING\r\n',
        b"CONNECT {}\r\nPONG\r\nFOO bar\r\n",
        b'CONNECT {"verbose":false}\r\nPUB x 3\r\nabcd\r\n',
        b'CONNECT {"verbose":false}\r\nPUB x 3\r\nabc\rX',
        b'CONNECT {"verbose":false}\r\nPUBx\r\n',
        b'CONNECT {"verbose":false}\r\nSUB\tfoo 1\r\nSUBfoo 1\r\n',
        b"+OX\r\n",
        b'CONNECT {"verbose":false}\r\nPONX\r\n',
    ],
    "max_traced_msg_len_5": [
        b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 9\r\nab\r\ncdefg\r\nPUB a 3\r\nxyz\r\n'
        b"PUB a 7\r\n\xc3\xa9\xc3\xa9\x01xy\r\nPING\r\n",
    ],
    # A subject mapping: <<- [MAPPING a.b -> mapped.b] between the PUB and its payload.
    "mappings": [
        b'CONNECT {"verbose":false}\r\nSUB > 1\r\nPUB a.b 2\r\nhi\r\nPUB plain 0\r\n\r\nPING\r\n',
    ],
    # trace_headers (2.11+): only the header block is traced, nothing for a plain PUB.
    "trace_headers": [
        b'CONNECT {"verbose":false,"headers":true}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\n'
        b"HPUB a 22 26\r\nNATS/1.0\r\nK: value\r\n\r\nbody\r\nHPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n",
    ],
}
ARGS = {
    "default": ["-DV"],
    "max_traced_msg_len_5": ["-V", "--max_traced_msg_len", "5"],
    "mappings": ["-V", "-c", str(Path(__file__).with_name("trace_mappings.conf"))],
    "trace_headers": ["-V", "-c", str(Path(__file__).with_name("trace_headers.conf"))],
}

_LINE = re.compile(r"^\[\d+\] \S+ \S+ (\[(?:TRC|ERR|DBG)\]) (.*)$")
_CLIENT = re.compile(r"127\.0\.0\.1:(\d+) - cid:\d+")


class _Server:
    """A server process whose stderr is read line by line in a thread."""

    def __init__(self, argv: list[str]) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(
            [*argv, "-a", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env,
        )
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def connect(self) -> socket.socket:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                return socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None, self.lines[-5:]
                time.sleep(0.01)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(TIMEOUT)
        self._thread.join(TIMEOUT)
        self.proc.stderr.close()


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def record(argv: list[str], scripts: list[bytes]) -> list[list[str]]:
    """Each script's connection's log lines, masked: ``[TRC] C - <<- [SUB foo 1]``."""
    server = _Server(argv)
    try:
        ports = []
        for script in scripts:
            sock = server.connect()
            port = sock.getsockname()[1]
            ports.append(port)
            _read_until(sock, b"\r\n")  # INFO
            sock.sendall(script)
            if script.endswith(b"PING\r\n"):
                _read_until(sock, b"PONG\r\n")
            else:
                _read_until(sock, b"never")  # the server closes it
            sock.close()
            if "-V" not in argv:  # with -D: the close line (-V alone has none)
                _wait_closed(server, port)
        _settle(server)  # -V alone: the last close's DELSUB lines, before SIGTERM races them
    finally:
        server.stop()
    per_client: dict[int, list[str]] = {port: [] for port in ports}
    for line in server.lines:
        match = _LINE.match(line)
        if match is None:
            continue
        level, text = match.groups()
        client = _CLIENT.search(text)
        if client is None or int(client.group(1)) not in per_client:
            continue
        text = _CLIENT.sub("C", text)
        if "Ping Timer" in text or text.endswith("->> [PING]"):
            continue  # the keep-alive timer: when it fires depends on the machine
        per_client[int(client.group(1))].append(f"{level} {text}")
    return [per_client[port] for port in ports]


def _settle(server: _Server, quiet: float = 0.3) -> None:
    """Wait until the server has logged nothing for ``quiet`` seconds (at most TIMEOUT)."""
    deadline = time.monotonic() + TIMEOUT
    count, since = len(server.lines), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.02)
        if len(server.lines) != count:
            count, since = len(server.lines), time.monotonic()


def _wait_closed(server: _Server, port: int) -> None:
    # Each connection is over before the next one starts (the lines that follow the close
    # line are read by the time the server has stopped).
    deadline = time.monotonic() + TIMEOUT
    while not any(f":{port} - cid:" in line and "Client connection closed" in line for line in server.lines):
        assert time.monotonic() < deadline, server.lines[-5:]
        time.sleep(0.01)


def _natserver(name: str) -> list[str]:
    return [sys.executable, "-m", "natserver", *ARGS[name]]


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_natserver_traces_as_nats_server(name):
    recorded = json.loads(RECORDED.read_text())[name]
    got = record(_natserver(name), SESSIONS[name])
    for index, (mine, theirs) in enumerate(zip(got, recorded)):
        assert mine == theirs, f"session {index}: {SESSIONS[name][index]!r}"
    assert len(got) == len(recorded)


@pytest.mark.needs_nats_server
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")
@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_the_recorded_lines_are_what_nats_server_prints(name):
    recorded = json.loads(RECORDED.read_text())[name]
    assert record([NATS_SERVER, *ARGS[name]], SESSIONS[name]) == recorded


def test_no_trace_lines_without_trace():
    lines = record([sys.executable, "-m", "natserver", "-D"], SESSIONS["default"][:2])
    assert lines[0] and not any("[TRC]" in line for session in lines for line in session)
    # The debug lines carry the client's tag once CONNECT named it.
    assert '[DBG] C - "v2.6.0:python3:nm" - Client connection closed: Client Closed' in lines[0]


@pytest.mark.parametrize(
    "data, quoted",
    [
        (b"hello", '"hello"'),
        (b'a"b\\c', '"a\\"b\\\\c"'),
        (b"\x00\x07\x08\t\n\x0b\x0c\r\x1b\x7f", '"\\x00\\a\\b\\t\\n\\v\\f\\r\\x1b\\x7f"'),
        ("é€😀".encode(), '"é€😀"'),
        (b"\xff\xc3", '"\\xff\\xc3"'),
        ("\u200b\u00a0".encode(), '"\\u200b\\u00a0"'),  # not printable for Go either
    ],
)
def test_go_quote(data, quoted):
    assert go_quote(data) == quoted


if __name__ == "__main__":  # record nats-server's lines again
    assert NATS_SERVER, "nats-server is not installed"
    data = {name: record([NATS_SERVER, *ARGS[name]], scripts) for name, scripts in SESSIONS.items()}
    RECORDED.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {RECORDED}")
