"""The nsqd- and nsqlookupd-compatible command lines (natserver.nsq.cli), driven the way
client test suites drive the real binaries: start with random ports, read the ports from
``TCP: listening on`` / ``HTTP: listening on`` on stderr, check ``--version``; nsqd
registers its topics and channels with nsqlookupd over TCP V1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from natserver.nsq.cli import _NSQD_FLAGS, UsageError, parse_flags

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 20
LISTENING = re.compile(r"(?P<protocol>[A-Z]+): listening on (?P<address>(?:[0-9]{1,3}\.){3}[0-9]{1,3}):(?P<port>[0-9]+)")
VERSION = re.compile(r"(?P<name>[a-z]+) v(?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?:-[a-z]+)? \(built w\/(?P<go>[a-z0-9.-]+)\)")


def command(*args) -> list[str]:
    return [sys.executable, "-m", "natserver.nsq", *args]


class Process:
    def __init__(self, *args, protocols=("TCP", "HTTP")):
        env = dict(os.environ, PYTHONPATH=REPO)
        self.proc = subprocess.Popen(command(*args), env=env, stderr=subprocess.PIPE, text=True)
        self.ports = {}
        deadline = time.monotonic() + TIMEOUT
        while len(self.ports) < len(protocols) and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError("exited before listening")
            match = LISTENING.search(line)
            if match:
                self.ports[match.group("protocol")] = int(match.group("port"))
        assert set(self.ports) == set(protocols)

    def stop(self) -> str:
        self.proc.terminate()
        rest = self.proc.stderr.read()
        self.proc.wait(TIMEOUT)
        return rest


def get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT) as response:
        return json.loads(response.read())


def post(port: int, path: str, body: bytes = b""):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return response.read()


@pytest.mark.parametrize("name", ["nsqd", "nsqlookupd"])
def test_version(name):
    out = subprocess.run(command(name, "--version"), env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
                         text=True, timeout=TIMEOUT)
    match = VERSION.match(out.stdout)
    assert match and match.group("name") == name and match.group("version") == "1.3.0"


def test_flags():
    values, host = parse_flags(["--tcp-address", "127.0.0.1:0", "-http-address=127.0.0.1:4151", "--snappy=false",
                                "--msg-timeout", "30s", "--lookupd-tcp-address", "a:1", "--lookupd-tcp-address=b:2"],
                               _NSQD_FLAGS)
    assert values == {"port": -1, "http_port": 4151, "snappy": False, "msg_timeout": 30.0,
                      "lookupd_tcp_addresses": ["a:1", "b:2"]}
    assert host == "127.0.0.1"
    with pytest.raises(UsageError, match="flag provided but not defined: -nope"):
        parse_flags(["--nope"], _NSQD_FLAGS)
    with pytest.raises(UsageError, match="tls-required is not supported"):
        parse_flags(["--tls-required", "true"], _NSQD_FLAGS)
    assert parse_flags(["--auth-http-address", "127.0.0.1:1"], _NSQD_FLAGS)[0] == {
        "auth_http_addresses": ["127.0.0.1:1"]}
    with pytest.raises(UsageError, match="invalid value"):
        parse_flags(["--max-rdy-count", "x"], _NSQD_FLAGS)


def test_nsqd_registers_with_nsqlookupd(tmp_path):
    lookupd = Process("nsqlookupd", "--broadcast-address", "127.0.0.1", "--tcp-address", "127.0.0.1:0",
                      "--http-address", "127.0.0.1:0")
    nsqd = None
    try:
        assert get(lookupd.ports["HTTP"], "/nodes") == {"producers": []}
        nsqd = Process("nsqd", "--broadcast-address", "127.0.0.1", "--tcp-address", "127.0.0.1:0", "--http-address",
                       "127.0.0.1:0", "--data-path", str(tmp_path), "--lookupd-tcp-address",
                       f"127.0.0.1:{lookupd.ports['TCP']}")
        deadline = time.monotonic() + TIMEOUT
        while not get(lookupd.ports["HTTP"], "/nodes")["producers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        node = get(lookupd.ports["HTTP"], "/nodes")["producers"][0]
        assert (node["tcp_port"], node["http_port"], node["version"]) == (nsqd.ports["TCP"], nsqd.ports["HTTP"], "1.3.0")
        post(nsqd.ports["HTTP"], "/topic/create?topic=reg")
        post(nsqd.ports["HTTP"], "/channel/create?topic=reg&channel=ch")
        while "reg" not in get(lookupd.ports["HTTP"], "/topics")["topics"] and time.monotonic() < deadline:
            time.sleep(0.05)
        while not get(lookupd.ports["HTTP"], "/channels?topic=reg")["channels"] and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = get(lookupd.ports["HTTP"], "/lookup?topic=reg")
        assert answer["channels"] == ["ch"]
        assert answer["producers"][0]["tcp_port"] == nsqd.ports["TCP"]
        post(nsqd.ports["HTTP"], "/channel/delete?topic=reg&channel=ch")
        # UNREGISTER removes nsqd as the channel's producer; nsqlookupd keeps the
        # registration itself (only #ephemeral ones go), as the real one does
        while get(lookupd.ports["HTTP"], "/debug").get("channel:reg:ch") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(lookupd.ports["HTTP"], "/debug")["channel:reg:ch"] == []
        nsqd.stop()
        nsqd = None
        while get(lookupd.ports["HTTP"], "/nodes")["producers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(lookupd.ports["HTTP"], "/nodes") == {"producers": []}
        with pytest.raises(urllib.error.HTTPError) as info:
            get(lookupd.ports["HTTP"], "/lookup?topic=nothing")
        assert info.value.code == 404
    finally:
        if nsqd is not None:
            nsqd.stop()
        lookupd.stop()


def test_nsqd_log_format_and_clean_exit(tmp_path):
    nsqd = Process("--tcp-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", "--data-path", str(tmp_path))
    post(nsqd.ports["HTTP"], "/pub?topic=kept", b"still here")
    nsqd.stop()
    assert nsqd.proc.returncode == 0
    assert (tmp_path / "nsqd.dat").exists()  # metadata saved on SIGTERM, like nsqd
    again = Process("--tcp-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", "--data-path", str(tmp_path))
    try:
        stats = get(again.ports["HTTP"], "/stats?format=json&topic=kept")
        assert stats["topics"][0]["depth"] == 1
    finally:
        again.stop()


def test_lookupd_tcp_protocol_errors(tmp_path):
    import socket
    import struct

    lookupd = Process("nsqlookupd", "--tcp-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0")
    try:
        def exchange(data: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", lookupd.ports["TCP"]), timeout=TIMEOUT) as sock:
                sock.sendall(b"  V1" + data)
                out = b""
                while True:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return out
                    out += chunk
                    size = struct.unpack(">i", out[:4])[0] if len(out) >= 4 else -1
                    if data.endswith(b"PING\n") and len(out) >= 4 + size >= 4:
                        return out

        def framed(text: bytes) -> bytes:
            return struct.pack(">i", len(text)) + text

        assert exchange(b"REGISTER t\n") == framed(b"E_INVALID client must IDENTIFY")
        assert exchange(b"PING\n") == framed(b"OK")
        assert exchange(b"BOGUS\n") == framed(b"E_INVALID invalid command BOGUS")
        body = b'{"broadcast_address":"x"}'
        assert exchange(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body) == framed(
            b"E_BAD_BODY IDENTIFY missing fields")
    finally:
        lookupd.stop()
