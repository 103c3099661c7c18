"""The pytest plugin (natserver.pytest_plugin): its fixtures from plain, asyncio and trio tests,
the marker, the session server, and that nothing is left behind: no thread, no socket, no port.

The fixtures come from the pytest11 entry point (natserver installed), not from a conftest.
"""

from __future__ import annotations

import ast
import asyncio
import gc
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import nats
import nats.errors
import pytest
import trio

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def sockets_on(port: int) -> list[str]:
    """Sockets with local port ``port`` that the server has not closed: listening, established
    or waiting for its close (the FIN_WAIT/TIME_WAIT states after a close are the kernel's)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state = fields[1], fields[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state in ("01", "08", "0A"):
                found.append(row)
    return found


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            pass
        else:
            return False
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
    return True


class LeakCheck:
    def __init__(self) -> None:
        self.ports: list[int] = []
        self.threads = set(threading.enumerate())
        self.fds = open_fds()

    def check(self) -> None:
        extra = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        assert extra == [], f"threads left behind: {extra}"
        for port in self.ports:
            assert port_is_free(port), f"port {port} still in use"
            assert sockets_on(port) == [], f"sockets left on port {port}"
        gc.collect()  # a client that failed to connect may leave its socket to the GC (nats-py)
        assert open_fds() - self.fds == set(), "file descriptors left open"


@pytest.fixture
def no_leaks():
    """Request it *before* the natserver fixture: its check runs after that one's teardown."""
    leaks = LeakCheck()
    yield leaks
    leaks.check()


def read_info(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def test_the_plugin_is_registered_by_its_entry_point(request):
    plugin = request.config.pluginmanager.get_plugin("natserver")
    assert plugin is not None and plugin.__name__ == "natserver.pytest_plugin"
    markers = request.config.getini("markers")
    assert any(line.startswith("nats_server(**options)") for line in markers)


def test_the_plugin_imports_nothing_heavy_and_starts_nothing():
    # Loaded in every pytest run wherever natserver is installed: at import it only defines
    # fixtures; natserver.testing (and the server) are imported when a fixture is used.
    source = (ROOT / "natserver" / "pytest_plugin.py").read_text()
    top_level = [node for node in ast.parse(source).body if isinstance(node, (ast.Import, ast.ImportFrom))]
    imported = {alias.name for node in top_level for alias in node.names}
    assert imported <= {"annotations", "pytest", "TYPE_CHECKING"}, imported  # (typing: for annotations only)
    code = "import threading, natserver.pytest_plugin; print(threading.active_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "1", out.stderr


# -- the fixtures, from each kind of test ---------------------------------------------------------


def test_nats_server_from_a_plain_test(no_leaks, nats_server, nats_url):
    no_leaks.ports.append(nats_server.port)
    assert nats_url == nats_server.url == f"nats://127.0.0.1:{nats_server.port}"
    assert read_info(nats_server.port).startswith(b"INFO ")
    new = [t.name for t in threading.enumerate() if t not in no_leaks.threads]
    assert new == [f"natserver:{nats_server.port}"]


def test_nats_server_from_asyncio_code(no_leaks, nats_server, nats_url):
    no_leaks.ports.append(nats_server.port)

    async def main():
        nc = await nats.connect(nats_url, name="asyncio-test")
        try:
            sub = await nc.subscribe("ping")
            await nc.flush()
            await nc.flush()
            await nc.publish("ping", b"pong")
            assert (await sub.next_msg(timeout=2)).data == b"pong"
        finally:
            await nc.close()

    run(main())
    assert nats_server.messages("ping")[0].client == "asyncio-test"


async def test_nats_server_from_a_trio_test(no_leaks, nats_server):
    no_leaks.ports.append(nats_server.port)
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", nats_server.port)
        assert (await stream.receive_some(4096)).startswith(b"INFO ")
        await stream.send_all(b'CONNECT {"verbose":false,"name":"trio"}\r\nPUB t 2\r\nok\r\n')
        message = await nats_server.wait_for_message_async("t")
        assert (message.data, message.client) == (b"ok", "trio")
        await stream.aclose()


@pytest.mark.nats_server(max_payload=1024, user="alice", password="secret")
def test_marker_sets_the_options(no_leaks, nats_server):
    no_leaks.ports.append(nats_server.port)
    info = read_info(nats_server.port)
    assert b'"max_payload":1024' in info and b'"auth_required":true' in info

    with socket.create_connection(("127.0.0.1", nats_server.port), timeout=2) as sock:
        sock.recv(4096)  # INFO
        sock.sendall(b'CONNECT {"user":"alice","pass":"wrong","verbose":false}\r\nPING\r\n')
        assert sock.recv(4096).startswith(b"-ERR 'Authorization Violation'")

    async def main():
        nc = await nats.connect(nats_server.url, user="alice", password="secret")
        try:
            with pytest.raises(nats.errors.MaxPayloadError):
                await nc.publish("big", b"x" * 2000)
        finally:
            await nc.close()

    run(main())


@pytest.mark.nats_server(max_payload=2048, server_name="outer")
class TestMarkerOnAClass:
    @pytest.mark.nats_server(max_payload=4096)
    def test_the_closest_marker_wins_per_keyword(self, nats_server):
        assert (nats_server.options.max_payload, nats_server.options.server_name) == (4096, "outer")

    def test_the_class_marker_applies(self, nats_server):
        assert nats_server.options.max_payload == 2048


@pytest.mark.nats_server(max_payload=3000)
async def test_trio_native_fixture(no_leaks, trio_nats_server):
    no_leaks.ports.append(trio_nats_server.port)
    # No thread: the server is a task in this test's nursery.
    assert set(threading.enumerate()) <= no_leaks.threads
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", trio_nats_server.port)
        assert b'"max_payload":3000' in await stream.receive_some(4096)
        await stream.send_all(b'CONNECT {"verbose":false,"name":"native"}\r\nPUB n 1\r\n1\r\n')
        assert (await trio_nats_server.wait_for_message_async("n")).client == "native"
        assert [c.name for c in trio_nats_server.connections()] == ["native"]
        trio_nats_server.close_client("native")
        while await stream.receive_some(4096):
            pass
        await stream.aclose()
        port = trio_nats_server.port
        await trio_nats_server.restart_async()
        assert trio_nats_server.port == port


# The session server: the same across tests, faults and records reset between them.
_session = {}


def test_session_server_first(nats_server_session):
    _session["port"] = nats_server_session.port
    nats_server_session.publish("left.over", "x")
    nats_server_session.drop(">", count=None)
    assert nats_server_session.server.publish_hook is not None


def test_session_server_second(nats_server_session):
    assert nats_server_session.port == _session.get("port", nats_server_session.port)
    assert nats_server_session.messages() == []  # reset before this test
    nats_server_session.publish("fresh", "y")
    assert nats_server_session.messages("fresh")[0].action == "deliver"  # the drop is gone


# -- whole sessions -------------------------------------------------------------------------------

INNER_TESTS = '''
import asyncio, socket, threading
import nats, pytest, trio

def test_sync(nats_server):
    with socket.create_connection(("127.0.0.1", nats_server.port), timeout=2) as s:
        assert s.recv(5) == b"INFO "

def test_asyncio(nats_server, nats_url):
    async def main():
        nc = await nats.connect(nats_url, name="inner")
        await nc.publish("a", b"1")
        await nc.flush()
        await nc.close()
    asyncio.run(asyncio.wait_for(main(), 10))
    assert nats_server.wait_for_message("a", timeout=2).client == "inner"

@pytest.mark.nats_server(max_payload=512)
def test_marker(nats_server):
    assert nats_server.options.max_payload == 512

@pytest.mark.nats_server(max_payload=1)
def test_failing_test_still_cleans_up(nats_server):
    raise RuntimeError("boom")

@pytest.mark.trio
async def test_trio_native(trio_nats_server):
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", trio_nats_server.port)
        assert (await stream.receive_some(4096)).startswith(b"INFO ")
        await stream.aclose()

def test_session_a(nats_server_session):
    nats_server_session.publish("s", "1")

def test_session_b(nats_server_session, nats_server):
    assert nats_server_session.messages() == []
    assert nats_server_session.port != nats_server.port
'''


def test_a_whole_session_leaves_nothing_behind(pytester):
    pytester.makepyfile(test_inner=INNER_TESTS)
    leaks = LeakCheck()
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: boom*"])
    leaks.check()


def test_works_without_pytest_trio(pytester):
    pytester.makepyfile(test_inner=INNER_TESTS)
    leaks = LeakCheck()
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:trio", "-q", "-k", "not trio")
    result.assert_outcomes(passed=5, failed=1, deselected=1)
    leaks.check()


def test_the_example_app_passes_in_a_fresh_project(pytester):
    """examples/greeter copied into an empty project (no conftest, no config, no async pytest
    plugin): its tests pass with nothing but the plugin."""
    for name in ("greeter.py", "test_greeter.py"):
        shutil.copy(ROOT / "examples" / "greeter" / name, pytester.path / name)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:trio", "-q", timeout=60)
    result.assert_outcomes(passed=8)
