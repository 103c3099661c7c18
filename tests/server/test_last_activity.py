"""A connection's ``last_activity`` in /connz (and so its ``idle``, and ``sort=last``/``idle``)
as nats-server 2.15.1 keeps it: a read that carries messages or subscription changes is
activity (client.go readLoop: ``c.in.msgs > 0 || c.in.subs > 0``), and so is a message
delivered to the connection (flushClients sets the receivers' ``last``); a PING, a PONG or
anything else read is not. Run against natserver and, when installed, against 2.15.1, with the
same script and the same assertions."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest

from tests.auth.test_auth_helpers import free_port, running
from tests.reference import HAVE_NATS_SERVER, NATS_SERVER

QUIET = 2.2  # seconds every connection stays silent before the messages: "2s" idle and more
TIMEOUT = 10.0  # seconds any one read may take


class Conn:
    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self.until(b"\r\n")  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"name":"%s"}\r\nPING\r\n' % name.encode())
        self.until(b"PONG\r\n")

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "closed"
            self.buf += chunk
        data, _, self.buf = self.buf.partition(marker)
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(data + b"PING\r\n")
        self.until(b"PONG\r\n")


def _idle_seconds(text: str) -> float:
    """nats-server's myUptime ("2s", "1m3s") in seconds."""
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 31536000}[ch]
            number = ""
    return total


def scenario(port: int, monitor: int) -> dict:
    subscriber = Conn(port, "subscriber")
    subscriber.send(b"SUB x 1\r\n")
    pinger = Conn(port, "pinger")
    publisher = Conn(port, "publisher")
    time.sleep(QUIET)
    publisher.send(b"PUB x 2\r\nhi\r\n")
    subscriber.until(b"hi\r\n")
    pinger.send(b"")  # (a PING and its PONG only)
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz?sort=cid", timeout=TIMEOUT) as answer:
        connz = json.loads(answer.read())
    return {c["name"]: _idle_seconds(c["idle"]) for c in connz["connections"]}


def _check(idle: dict) -> None:
    assert idle["publisher"] < 1, idle  # (it published)
    assert idle["subscriber"] < 1, idle  # (a message was delivered to it)
    assert idle["pinger"] >= 2, idle  # (its PING is not activity)


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=[
    pytest.mark.needs_nats_server,
    pytest.mark.skipif(not HAVE_NATS_SERVER, reason="nats-server 2.15.1 is not installed")])])
def test_messages_in_and_out_are_activity_pings_are_not(kind, tmp_path):
    monitor = free_port()
    options = {"binary": NATS_SERVER} if kind == "nats-server" else {}
    with running(kind, f"http: 127.0.0.1:{monitor}\n", tmp_path, **options) as port:
        _check(scenario(port, monitor))
