"""Test-local fixtures: in-process natservers and a raw NATS protocol client.

* ``start_server`` (trio): ``server = await start_server(max_payload=64)`` runs a natserver in
  the test's nursery on a random localhost port; ``server`` is the same with default options.
* ``raw_connect`` (trio): ``client = await raw_connect(server)`` is a :class:`RawClient`, a TCP
  connection with helpers to read protocol lines; the INFO line is left for the test to read.
* ``threaded_server`` (sync): ``handle = threaded_server(max_pending=...)`` runs a natserver
  in a background thread with its own ``trio.run``, for asyncio clients (nats-py).

Everything listens on 127.0.0.1 with ``port=-1`` (a free port chosen by the OS).
"""

from __future__ import annotations

import json
import threading

import pytest
import trio

import natserver

# -- the slow suites ---------------------------------------------------------------------------

# Files left out of the default run (`python -m pytest -q`) to keep it near 9 minutes on two
# cores; they carry the ``slow`` marker. `-m slow` runs only them, `--run-slow` everything, and
# naming a file or test on the command line runs it whatever its marker. CI runs them all.
# Seconds are one run's, on the 2-core machine the suite is sized for.
SLOW_FILES = {
    "tests/spark/test_spark.py": "PySpark on local[2], a Java start per session (82 s)",
    "tests/nsq/test_gnsq_suite.py": "gnsq's own test suite against the NSQ front-end (59 s)",
    "tests/test_packaging.py": "builds wheels and sdists, installs into fresh venvs (31 s)",
    "tests/jetstream/test_nats_py_suite.py": "nats-py's JetStream tests against natserver (28 s)",
    "tests/stan/test_stan_pb.py": "every STAN protocol buffer round trip through a live server (27 s)",
    "tests/jetstream/test_jetstream_full_disk.py": "a full disk at every write of a store (17 s)",
    "tests/jetstream/test_jetstream_crash.py": "kill -9 at every step of a stream's life (16 s)",
    "tests/jetstream/test_jetstream_store_index.py": "a million-message index, rebuilt (16 s)",
    "tests/jetstream/test_jetstream_consumer_crash.py": "kill -9 at every step of a consumer's (13 s)",
    "tests/test_typing.py": "mypy over the public API's examples (13 s)",
    "tests/jetstream/test_mirror_sources_crash.py": "kill -9 while mirroring and sourcing (9 s)",
    "tests/stan/test_stan_crash.py": "kill -9 of a STAN server with subscribers (5 s)",
    "tests/jetstream/cluster/test_durability.py": "kill -9 of cluster node processes, 2.15.1 among them (5 min)",
    "tests/jetstream/cluster/test_partition.py": "a node cut off past raft.go's lost quorum, twice (55 s)",
}


def pytest_addoption(parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run the slow suites too (tests/conftest.py SLOW_FILES)")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0] in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    explicit = [str(arg) for arg in config.args] != [str(path) for path in config.getini("testpaths")]
    if config.option.markexpr or config.getoption("--run-slow") or explicit:
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = kept


# Limits for waiting on one protocol exchange and for a whole threaded-server start/stop.
READ_TIMEOUT = 5.0
THREAD_TIMEOUT = 10.0


def make_options(**changes) -> natserver.Options:
    changes.setdefault("host", "127.0.0.1")
    changes.setdefault("port", -1)
    changes.setdefault("quiet", True)
    return natserver.Options(**changes)


# -- trio side -------------------------------------------------------------------------------


@pytest.fixture
async def start_server(nursery):
    servers: list[natserver.Server] = []

    async def start(**changes) -> natserver.Server:
        server = await nursery.start(natserver.serve, make_options(**changes))
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.shutdown()


@pytest.fixture
async def server(start_server) -> natserver.Server:
    return await start_server()


class RawClient:
    """One TCP connection speaking raw NATS protocol bytes."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.eof = False
        self.reset = False  # the peer reset the connection instead of closing it

    async def _receive(self) -> bool:
        """Read more into ``buf``; False at EOF (or reset)."""
        if self.eof:
            return False
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            self.reset = True
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not await self._receive():
                raise EOFError(f"EOF after {bytes(self.buf)!r}, wanted {n} bytes")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    async def read_until(self, marker: bytes) -> bytes:
        """Everything up to and including ``marker``."""
        start = 0
        while True:
            i = self.buf.find(marker, start)
            if i >= 0:
                return await self.read_exactly(i + len(marker))
            start = max(0, len(self.buf) - len(marker) + 1)
            if not await self._receive():
                raise EOFError(f"EOF before {marker!r}; got {bytes(self.buf)!r}")

    async def read_line(self) -> bytes:
        return await self.read_until(b"\r\n")

    async def expect(self, expected: bytes) -> None:
        got = await self.read_exactly(len(expected))
        assert got == expected

    async def read_info(self) -> dict:
        line = await self.read_line()
        assert line.startswith(b"INFO ")
        assert line.endswith(b" \r\n")
        return json.loads(line[5:-3])

    async def read_until_eof(self) -> bytes:
        """All remaining bytes; EOF or a reset both count as the end."""
        while await self._receive():
            pass
        data = bytes(self.buf)
        self.buf.clear()
        return data

    async def expect_eof(self, expected: bytes = b"") -> None:
        """Exactly ``expected`` arrives, then the server closes the connection."""
        assert await self.read_until_eof() == expected

    async def nothing_within(self, seconds: float) -> bytes:
        """Whatever arrives within ``seconds`` (tests assert it is empty)."""
        with trio.move_on_after(seconds):
            while await self._receive():
                pass
        data = bytes(self.buf)
        self.buf.clear()
        return data

    async def ping(self) -> bytes:
        """Send PING; return everything received before the PONG (a round trip flush)."""
        await self.send(b"PING\r\n")
        data = await self.read_until(b"PONG\r\n")
        return data[: -len(b"PONG\r\n")]

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


@pytest.fixture
async def raw_connect():
    clients: list[RawClient] = []

    async def connect(server: natserver.Server) -> RawClient:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        client = RawClient(stream)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        await client.aclose()


# -- natserver in a thread, for asyncio clients ---------------------------------------------


class ThreadedServer:
    """A natserver running in its own thread and trio run."""

    def __init__(self, options: natserver.Options) -> None:
        self.options = options
        self.server: natserver.Server | None = None
        self.error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="natserver", daemon=True)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _main(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                self.server = await nursery.start(natserver.serve, self.options)
                self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by stop(): the server crashed
            self.error = exc
        finally:
            self._ready.set()

    def start(self) -> "ThreadedServer":
        self._thread.start()
        if not self._ready.wait(THREAD_TIMEOUT):
            raise TimeoutError("natserver thread did not start")
        if self.error is not None:
            raise RuntimeError("natserver failed to start") from self.error
        return self

    def stop(self) -> None:
        if self._thread.is_alive() and self.server is not None:
            try:
                trio.from_thread.run_sync(self.server.stop, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(THREAD_TIMEOUT)
        assert not self._thread.is_alive(), "natserver thread did not stop"
        if self.error is not None:
            raise AssertionError("natserver crashed") from self.error


@pytest.fixture
def threaded_server():
    handles: list[ThreadedServer] = []

    def start(**changes) -> ThreadedServer:
        handle = ThreadedServer(make_options(**changes)).start()
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()
