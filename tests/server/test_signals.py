"""SIGHUP (reload), SIGUSR1 (reopen the log), SIGUSR2 (lame duck mode), SIGINT/SIGTERM, on a
real ``python -m natserver`` process, as nats-server v2.9.10 handles them (server/signal.go).

Clients are nats-py (asyncio, run from sync tests) and raw sockets. Every wait is bounded and
every process is killed at the end of its test.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nats
import pytest
import trio

import natserver
from natserver.cli import CommandLine
from natserver.config.flags import build_options
from natserver.server import signals as _signals

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")


class NatProc:
    """``python -m natserver ARGS`` with stderr in a file."""

    def __init__(self, tmp_path: Path, *args: str, name: str = "server") -> None:
        self.log_path = tmp_path / f"{name}.stderr"
        self._stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "natserver", *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.port = int(self.wait_for(LISTENING).group(2))
        self.wait_for(re.compile(r"Server is ready"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:  # -l FILE: not created yet, or just rotated away
            return ""

    def wait_for(self, pattern: re.Pattern, timeout: float = START_TIMEOUT, text=None) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            found = pattern.search(text() if text else self.log())
            if found:
                return found
            if self.proc.poll() is not None and not text:
                raise AssertionError(f"natserver exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern.pattern!r} within {timeout}s:\n{self.log()}")
            time.sleep(0.02)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
        self._stderr.close()


@pytest.fixture
def natproc(tmp_path):
    started: list[NatProc] = []

    def start(*args: str, name: str = "server") -> NatProc:
        proc = NatProc(tmp_path, *args, name=name)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def run_async(coro, timeout: float = 20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def raw_info(port: int) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        line = sock.makefile("rb").readline()
    assert line.startswith(b"INFO ") and line.endswith(b" \r\n")
    return json.loads(line[5:-3])


# -- SIGHUP ------------------------------------------------------------------------------------


def test_sighup_reload_changes_max_payload_without_dropping_clients(tmp_path, natproc):
    conf = tmp_path / "nats.conf"
    conf.write_text("listen: 127.0.0.1:-1\nmax_payload: 1MB\n")
    server = natproc("-c", str(conf), "--max_connections", "100")
    assert raw_info(server.port)["max_payload"] == 1024 * 1024

    async def scenario():
        disconnects = []

        async def on_disconnect():
            disconnects.append(time.monotonic())

        nc = await nats.connect(server.url, disconnected_cb=on_disconnect, max_reconnect_attempts=0)
        sub = await nc.subscribe("reload.>")
        await nc.publish("reload.before", b"one")
        assert (await sub.next_msg(timeout=5)).data == b"one"

        conf.write_text("listen: 127.0.0.1:-1\nmax_payload: 2KB\nmax_connections: 50\n")
        server.signal(signal.SIGHUP)
        server.wait_for(re.compile(r"\[INF\] Reloaded server configuration"))
        log = server.log()
        assert "[INF] Reloaded: max_payload = 2048" in log
        # The command line still wins over the file (--max_connections 100).
        assert "max_connections" not in log

        # New connections see the new limit; the old client is still connected and working.
        assert raw_info(server.port)["max_payload"] == 2048
        await nc.publish("reload.after", b"two")
        assert (await sub.next_msg(timeout=5)).data == b"two"
        assert nc.is_connected and not disconnects

        # A bad file is reported and changes nothing.
        conf.write_text("listen: 127.0.0.1:-1\nmax_payload: 4KB\nfoo: 1\n")
        server.signal(signal.SIGHUP)
        failed = server.wait_for(re.compile(r"\[ERR\] Failed to reload server configuration: (.*)"))
        assert failed.group(1) == f'{conf}:3:1: unknown field "foo"'
        assert raw_info(server.port)["max_payload"] == 2048

        # So does a change nats-server cannot apply at run time.
        conf.write_text("listen: 127.0.0.1:-1\nmax_pending: 1MB\n")
        server.signal(signal.SIGHUP)
        server.wait_for(
            re.compile(r"Failed to reload server configuration: config reload not supported for MaxPending: "
                       r"old=67108864, new=1048576")
        )  # fmt: skip
        await nc.publish("reload.end", b"three")
        assert (await sub.next_msg(timeout=5)).data == b"three"
        assert nc.is_connected and not disconnects
        await nc.close()

    run_async(scenario())
    server.signal(signal.SIGINT)
    assert server.wait() == 0


async def test_reload_in_process_applies_limits_logging_and_auth(tmp_path):
    """The reload logic itself, on an in-process server (fast): which options change, the
    log lines, and what stays when the file is refused."""
    conf = tmp_path / "nats.conf"
    conf.write_text("listen: 127.0.0.1:-1\n")
    flags = {"config_file": str(conf), "ping_max": 7}
    options = build_options(flags).copy(quiet=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            server.command_line = CommandLine(flags)
            conf.write_text(
                textwrap.dedent(
                    """
                    listen: 127.0.0.1:-1
                    max_payload: 512
                    max_control_line: 1KB
                    ping_interval: "1m"
                    write_deadline: "3s"
                    authorization { user: u, password: p, timeout: 1.5 }
                    """
                )
            )
            lines = _signals.reload(server)
            assert lines == [
                "Reloaded: authorization username",
                "Reloaded: authorization password",
                "Reloaded: ping_interval = 1m0s",
                "Reloaded: authorization timeout = 1.5",
                "Reloaded: max_control_line = 1024",
                "Reloaded: max_payload = 512",
                "Reloaded: write_deadline = 3s",
            ]
            o = server.options
            assert (o.max_payload, o.max_control_line, o.ping_interval, o.write_deadline) == (512, 1024, 60.0, 3.0)
            assert (o.username, o.password, o.auth_timeout, o.quiet, o.ping_max) == ("u", "p", 1.5, True, 7)
            assert server.auth_required

            conf.write_text("listen: 127.0.0.1:5999\n")
            with pytest.raises(_signals.ReloadError, match=r"config reload not supported for Port: old=\d+, new=5999"):
                _signals.reload(server)
            conf.write_text("listen: 127.0.0.1:-1\nping_interval: 5\n")  # warnings fail a reload too
            with pytest.raises(_signals.ReloadError, match="should be converted to a duration"):
                _signals.reload(server)
            assert server.options is o

            server.command_line = None
            server.options = server.options.copy(config_file="")
            with pytest.raises(_signals.ReloadError, match="can only reload config when a file is provided"):
                _signals.reload(server)
            await server.shutdown()


async def test_reload_lowering_max_connections_closes_the_newest(tmp_path, raw_connect):
    conf = tmp_path / "nats.conf"
    conf.write_text("listen: 127.0.0.1:-1\n")
    options = build_options({"config_file": str(conf)}).copy(quiet=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            clients = []
            for _ in range(3):
                client = await raw_connect(server)
                await client.read_info()
                await client.send(b'CONNECT {"verbose":false}\r\n')
                assert await client.ping() == b""
                clients.append(client)
            conf.write_text("listen: 127.0.0.1:-1\nmax_connections: 2\nmax_payload: 100\n")
            _signals.reload(server)
            await clients[2].expect_eof(b"-ERR 'maximum connections exceeded'\r\n")
            # The others stay, with the new max_payload (nats-server updates every client).
            assert await clients[0].ping() == b""
            await clients[1].send(b"PUB x 101\r\n")
            assert (await clients[1].read_line()) == b"-ERR 'Maximum Payload Violation'\r\n"
            # New connections see the new INFO and the new limit.
            late = await raw_connect(server)
            assert (await late.read_info())["max_payload"] == 100
            await server.shutdown()


# -- SIGUSR1 -----------------------------------------------------------------------------------


def test_sigusr1_reopens_the_log_file_after_rotation(tmp_path, natproc):
    log_file = tmp_path / "natserver.log"
    server_stderr = tmp_path / "server.stderr"
    server = NatProc.__new__(NatProc)  # started below with the log in a file, not stderr
    server.log_path = log_file
    server._stderr = open(server_stderr, "wb")
    server.proc = subprocess.Popen(
        [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1", "-l", str(log_file)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=server._stderr,
    )
    try:
        server.port = int(server.wait_for(LISTENING).group(2))
        server.wait_for(re.compile("Server is ready"))
        rotated = tmp_path / "natserver.log.1"
        log_file.rename(rotated)
        server.signal(signal.SIGUSR1)
        server.wait_for(re.compile(r"\[INF\] File log re-opened"))
        assert "Server is ready" in rotated.read_text()
        assert "File log re-opened" not in rotated.read_text()
        # New lines keep going to the new file.
        server.signal(signal.SIGINT)
        assert server.wait() == 0
        assert "Server Exiting.." in log_file.read_text()
        assert "Server Exiting.." not in rotated.read_text()
        assert server_stderr.read_text() == ""
    finally:
        server.kill()


def test_sigusr1_without_a_log_file_is_ignored(natproc):
    server = natproc("-a", "127.0.0.1", "-p", "-1")
    server.signal(signal.SIGUSR1)
    server.wait_for(re.compile(r"\[INF\] File log re-open ignored, not a file logger"))
    assert raw_info(server.port)["port"] == server.port


# -- SIGUSR2 -----------------------------------------------------------------------------------

LDM_FLAGS = ("--lame_duck_duration", "1s", "--lame_duck_grace_period", "0.2s")


def test_sigusr2_lame_duck_mode(natproc):
    server = natproc("-a", "127.0.0.1", "-p", "-1", *LDM_FLAGS)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        first = json.loads(reader.readline()[5:-3])
        assert "ldm" not in first
        sock.sendall(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        assert reader.readline() == b"PONG\r\n"
        # 2.10+: the INFO a protocol-1 client gets after its first PONG (connect_info).
        assert json.loads(reader.readline()[5:-3])["connect_info"] is True

        started = time.monotonic()
        server.signal(signal.SIGUSR2)
        line = reader.readline()
        assert line.startswith(b"INFO ") and line.endswith(b" \r\n")
        info = json.loads(line[5:-3])
        assert info["ldm"] is True
        assert info["server_id"] == first["server_id"]
        # No new clients once in lame duck mode.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        # After the grace period the client is closed (possibly after a PING).
        rest = reader.read()
        assert rest in (b"", b"PING\r\n")
        assert time.monotonic() - started >= 0.15
    assert server.wait() == 0
    log = server.log()
    entering = log.index("[INF] Entering lame duck mode, stop accepting new clients")
    closing = log.index("[INF] Closing existing clients")
    exiting = log.index("[INF] Server Exiting..")
    assert entering < closing < exiting


def test_sigusr2_without_clients_exits_at_once(natproc):
    server = natproc("-a", "127.0.0.1", "-p", "-1", "--lame_duck_duration", "30s")
    server.signal(signal.SIGUSR2)
    assert server.wait(timeout=5) == 0
    assert "Entering lame duck mode" in server.log()


def test_sigterm_exits_1_and_sigint_exits_0_like_nats_server(natproc):
    a = natproc("-a", "127.0.0.1", "-p", "-1", name="a")
    b = natproc("-a", "127.0.0.1", "-p", "-1", "-D", name="b")
    a.signal(signal.SIGTERM)
    b.signal(signal.SIGINT)
    assert a.wait() == 1
    assert b.wait() == 0
    assert "[INF] Initiating Shutdown..." in a.log()
    assert '[DBG] Trapped "interrupt" signal' in b.log()


def test_nats_py_client_survives_lame_duck_by_reconnecting(natproc):
    a = natproc("-a", "127.0.0.1", "-p", "-1", *LDM_FLAGS, name="a")
    b = natproc("-a", "127.0.0.1", "-p", "-1", name="b")

    async def scenario():
        events = {"ldm": asyncio.Event(), "reconnected": asyncio.Event()}

        async def on_ldm():
            events["ldm"].set()

        async def on_reconnect():
            events["reconnected"].set()

        nc = await nats.connect(
            servers=[a.url, b.url],
            dont_randomize=True,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=20,
            lame_duck_mode_cb=on_ldm,
            reconnected_cb=on_reconnect,
        )
        assert nc.connected_url.port == a.port
        received: list[bytes] = []
        got = asyncio.Event()

        async def handler(msg):
            received.append(msg.data)
            got.set()

        await nc.subscribe("ldm.test", cb=handler)
        await nc.publish("ldm.test", b"via a")
        await asyncio.wait_for(got.wait(), 5)

        a.signal(signal.SIGUSR2)
        await asyncio.wait_for(events["ldm"].wait(), 5)
        await asyncio.wait_for(events["reconnected"].wait(), 10)
        assert nc.connected_url.port == b.port

        # The subscription was replayed on b: keep publishing until one comes back.
        got.clear()
        deadline = time.monotonic() + 5
        while b"via b" not in received:
            assert time.monotonic() < deadline, received
            await nc.publish("ldm.test", b"via b")
            await nc.flush(timeout=2)
            try:
                await asyncio.wait_for(got.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
        await nc.close()

    run_async(scenario())
    assert a.wait() == 0
    assert b.proc.poll() is None
    b.signal(signal.SIGINT)
    assert b.wait() == 0
