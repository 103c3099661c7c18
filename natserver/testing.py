"""In-process NATS servers for tests: start in milliseconds, inspect, inject faults.

::

    from natserver.testing import NatsServer

    with NatsServer() as server:              # a thread runs the server; blocks until ready
        nc = await nats.connect(server.url)   # any client, any event loop, any thread
        ...
        server.wait_for_message("orders.>")   # what the clients published
        server.close_client("billing")        # faults a real server cannot produce on demand

A :class:`NatsServer` runs a :class:`natserver.Server` either in a daemon thread of its own
(``start()``, ``with``, ``async with``: usable from plain, asyncio and trio code) or in a trio
nursery of the caller (``await server.start_async(nursery)``: trio-native, no thread). Every
method can be called from any thread; calls that act on connections are run inside the
server's trio loop.

Everything here is built on two hooks of :class:`natserver.Server`: ``publish_hook`` (every
message a client publishes, before routing) and ``connection_hook`` (the stages of a new
connection). Both are uninstalled when nothing records or injects, so a server that is only
used as a server runs exactly the normal code path.

The pytest fixtures built on this (``nats_server``, ``nats_url``, ``nats_server_session``,
``trio_nats_server``) are in :mod:`natserver.pytest_plugin`; the guide is docs/testing.md.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Literal

import outcome
import trio
import trio.testing

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from . import clock as server_clock
from . import testing_inspect as inspect
from .app import Server
from .config.options import Options
from .routing.accounts import GLOBAL_ACCOUNT
from .server.client import DELIVER, DROP, NO_RESPONDERS, ClosedRecord, unpack_subs
from .testing_inspect import (
    DEFAULT_MAX_SNAPSHOT_MESSAGES,
    ConsumerState,
    NsqTopicState,
    StanChannelState,
    StoredMessage,
    StreamState,
)
from .testing_inspect import parse_headers as _parse_headers

__all__ = [
    "ClientInfo",
    "ConsumerState",
    "Counters",
    "Fault",
    "Message",
    "NatsServer",
    "NsqTopicState",
    "StanChannelState",
    "StoredMessage",
    "StreamState",
    "SubscriptionInfo",
    "subject_matches",
]

Stage = Literal["before_info", "after_info", "after_connect", "after_ping"]

# How long a connection closed by a fault reads and drops what its client still sends.
CLOSE_FAULT_LINGER = 1.0
# Our stage names -> the stage names of Server.connection_hook.
_STAGES = {"before_info": "accept", "after_info": "info", "after_connect": "connect", "after_ping": "ping"}
# Keyword spellings the pytest marker accepts besides Options' own field names.
_ALIASES = {"user": "username", "token": "authorization"}
_ACTION_NAMES = {DELIVER: "deliver", DROP: "drop", NO_RESPONDERS: "no_responders"}

# Every fault acts once unless told otherwise: count=N for the next N, count=None until cancelled
# (one rule for drop, delay, no_responders and close_connections).
DEFAULT_FAULT_COUNT = 1

DEFAULT_MAX_MESSAGES = 10_000

# advance(): the clock jumps from one timer's deadline to the next, letting the server run
# in between, so timers fire in deadline order and a timer armed by another sees its own
# deadline. A timer that re-arms itself at a short interval (NSQ's queue scan every 100 ms)
# would make a long jump take many steps: after this many the rest is jumped at once.
MAX_ADVANCE_STEPS = 20_000
# How far past a deadline a step lands: floating point must not leave the clock a hair
# before the deadline it jumped to (the timer would then not fire).
ADVANCE_OVERSHOOT = 1e-9
# Clients cannot act while the clock jumps, yet the server's keepalives expect answers (a PONG
# to nats-server's PING, a NOP to nsqd's heartbeat, STAN's heartbeat replies). So once per
# ADVANCE_SETTLE_EVERY seconds of jumped time the server waits until it has been idle for
# ADVANCE_SETTLE real seconds, long enough for a client on this machine to answer.
ADVANCE_SETTLE_EVERY = 1.0
ADVANCE_SETTLE = 0.002
Clock = Literal["real", "manual"]
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def check_option_names(changes: dict) -> None:
    """A misspelt option (``max_paylod=``, in a marker too) says what was meant."""
    known = {f.name for f in dataclasses.fields(Options)} | set(_ALIASES)
    for key in changes:
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"unknown natserver option {key!r}{hint}")


# -- subjects ---------------------------------------------------------------------------------


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a literal ``subject`` matches ``pattern`` (``*`` one token, ``>`` the rest)."""
    if pattern == subject:
        return True
    return _Pattern(pattern).match_text(subject)


class _Pattern:
    """A subject pattern, tokenized once (str for recorded messages, bytes for the hot path)."""

    __slots__ = ("text", "raw", "literal", "tokens", "raw_tokens")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError(f"invalid subject {text!r}")
        self.text = text
        self.raw = text.encode()
        self.tokens = text.split(".")
        self.raw_tokens = self.raw.split(b".")
        if any(not t for t in self.tokens) or (">" in self.tokens and self.tokens.index(">") != len(self.tokens) - 1):
            raise ValueError(f"invalid subject {text!r}")
        self.literal = "*" not in self.tokens and ">" not in self.tokens

    def match(self, subject: bytes) -> bool:
        if self.literal:
            return subject == self.raw
        return _match_tokens(self.raw_tokens, subject.split(b"."), b"*", b">")

    def match_text(self, subject: str) -> bool:
        if self.literal:
            return subject == self.text
        return _match_tokens(self.tokens, subject.split("."), "*", ">")


def _match_tokens(pattern: list, tokens: list, pwc, fwc) -> bool:
    n = len(tokens)
    for i, p in enumerate(pattern):
        if p == fwc:
            return n > i
        if i >= n or (p != pwc and p != tokens[i]):
            return False
    return len(pattern) == n


def _pattern(subject: str | None) -> _Pattern | None:
    return None if subject is None else _Pattern(subject)


# -- records ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message as a client published it (before any subscriber got it).

    ``action`` is what the server did with it: ``"deliver"`` (routed normally, whether or not
    anyone was subscribed), ``"drop"``, ``"delay"`` or ``"no_responders"`` (a fault).
    """

    subject: str
    reply: str | None
    data: bytes
    raw_headers: bytes | None  # the complete "NATS/1.0 ..." block of an HPUB, else None
    client: str  # the publisher's CONNECT name ("" if it gave none or for server publishes)
    cid: int  # the publisher's connection id (0 for NatsServer.publish)
    time: float  # time.time() when the server received it
    action: str = "deliver"

    @property
    def headers(self) -> dict[str, str] | None:
        """The headers as a dict (the last value of a repeated key), or None."""
        if self.raw_headers is None:
            return None
        return _parse_headers(self.raw_headers)


def _encode_headers(headers: dict[str, str] | bytes | None) -> bytes | None:
    if headers is None or isinstance(headers, (bytes, bytearray)):
        return bytes(headers) if headers is not None else None
    lines = ["NATS/1.0"] + [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    cid: int
    client: str  # the subscriber's CONNECT name
    subject: str
    queue: str | None
    sid: str


@dataclasses.dataclass(frozen=True, slots=True)
class ClientInfo:
    """A snapshot of one connection (like an entry of /connz): an open one
    (``connections()``), or a closed one (``closed_connections()``) with the reason it was
    closed, as /connz?state=closed says it (``"Client Closed"``, ``"Slow Consumer (Write
    Deadline)"``, ``"Authentication Timeout"``...)."""

    cid: int
    name: str
    lang: str
    version: str
    ip: str
    port: int
    user: str
    subscriptions: tuple[str, ...]
    pending_bytes: int
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    reading_stopped: bool
    writing_stopped: bool
    close_reason: str = ""  # "" while open


@dataclasses.dataclass(frozen=True, slots=True)
class Counters:
    """Server totals (like /varz): messages and bytes in/out, connections, slow consumers."""

    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    slow_consumers: int
    total_connections: int
    connections: int
    subscriptions: int


class Fault:
    """An injected fault, as returned by the fault methods; ``cancel()`` ends it early.

    ``hits`` counts how often it acted. A fault with a ``count`` ends by itself after acting
    that many times; ``count=None`` lasts until cancelled (or ``reset()``).
    """

    __slots__ = ("kind", "target", "count", "hits", "_remaining", "_owner", "_pattern", "_stage", "_name", "seconds")

    def __init__(self, owner: NatsServer, kind: str, target: str, count: int | None, *, pattern: _Pattern | None = None,
                 stage: str | None = None, name: str | None = None, seconds: float = 0.0) -> None:
        if count is not None and count < 1:
            raise ValueError("count must be at least 1 (or None: until cancelled)")
        self.kind = kind
        self.target = target
        self.count = count
        self.hits = 0
        self.seconds = seconds
        self._remaining = math.inf if count is None else count
        self._owner = owner
        self._pattern = pattern
        self._stage = stage
        self._name = name

    @property
    def active(self) -> bool:
        return self._remaining > 0

    def cancel(self) -> None:
        self._remaining = 0
        self._owner._remove_fault(self)

    def _fire(self) -> None:
        # Only the server's trio thread calls this.
        self.hits += 1
        self._remaining -= 1
        if self._remaining <= 0:
            self._owner._remove_fault(self)

    def __repr__(self) -> str:
        left = "∞" if self._remaining == math.inf else int(self._remaining)
        return f"<Fault {self.kind} {self.target!r} hits={self.hits} remaining={left}>"


class _ServerFault(Fault):
    """A fault that wraps a method of one running engine object (natserver.testing_inspect's
    JetStream faults): unwrapped in the server's thread once spent or cancelled."""

    __slots__ = ("_undo",)

    def __init__(self, owner: NatsServer, kind: str, target: str, count: int | None) -> None:
        super().__init__(owner, kind, target, count)
        self._undo: Callable[[], None] | None = None

    def _fire(self) -> None:
        super()._fire()
        if self._remaining <= 0:
            self._unwrap()

    def cancel(self) -> None:
        super().cancel()
        owner = self._owner
        if owner.running:
            try:
                owner._call(self._unwrap)
            except RuntimeError:
                pass  # stopped meanwhile: nothing is wrapped any more

    def _unwrap(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()


class _Waiter:
    __slots__ = ("pattern", "count", "found", "notify")

    def __init__(self, pattern: _Pattern | None, count: int, found: list, notify: Callable[[], None]) -> None:
        self.pattern = pattern
        self.count = count
        self.found = found
        self.notify = notify


def _nsq_data_path(nsq) -> str:
    """The data_path of an ``nsq {}`` block (a dict) or of NsqOptions; "" when not set."""
    return (nsq.get("data_path") if isinstance(nsq, dict) else nsq.data_path) or ""


def _closed_client_info(record: Mapping[str, Any]) -> ClientInfo:
    """A closed connection's ClientInfo from what the server kept of it (connection_record,
    packed into a ClosedRecord: read back once)."""
    record = record.unpacked() if isinstance(record, ClosedRecord) else record
    subjects = tuple(detail["subject"] for detail in unpack_subs(record.get("subs_packed") or "", record["cid"]))
    return ClientInfo(
        cid=record["cid"], name=record.get("name") or "", lang=record.get("lang") or "",
        version=record.get("version") or "", ip=record["ip"], port=record["port"], user=record.get("user") or "",
        subscriptions=subjects, pending_bytes=record["pending_bytes"], in_msgs=record["in_msgs"],
        out_msgs=record["out_msgs"], in_bytes=record["in_bytes"], out_bytes=record["out_bytes"],
        reading_stopped=False, writing_stopped=False, close_reason=record.get("reason") or "",
    )


def _current_async_library() -> str | None:
    import sniffio

    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None


def _single(exc: BaseException) -> BaseException:
    """The one real error inside (nested) single-exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# -- the server -------------------------------------------------------------------------------


class NatsServer:
    """A natserver for tests, on 127.0.0.1 and a random free port by default.

    ``options`` (an :class:`natserver.Options`) and keyword arguments set the server's options
    (``max_payload=``, ``user=``/``password=``, ``token=``, ``max_pending=``, ...). ``record``
    turns the message recorder on or off; at most ``max_messages`` messages and
    ``max_message_bytes`` payload bytes are kept (the oldest go first).

    ``clock`` is the server's time: ``"real"`` (default) runs at real speed and ``advance()``
    jumps it ahead; ``"manual"`` stands still until ``advance()`` moves it.
    """

    def __init__(self, options: Options | None = None, *, record: bool = True,
                 max_messages: int = DEFAULT_MAX_MESSAGES, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 clock: Clock = "real", **changes: Any) -> None:
        if clock not in ("real", "manual"):
            raise ValueError(f"clock must be 'real' or 'manual', not {clock!r}")
        self.clock: Clock = clock
        self._timebase: server_clock.Timebase | None = None  # the server thread's time (see now())
        self._wall_offset_ns = 0  # how far ahead of time.time() the server's clock was when it stopped
        base = options if options is not None else Options(host="127.0.0.1", port=-1, quiet=True)
        changes = {_ALIASES.get(key, key): value for key, value in changes.items()}
        check_option_names(changes)
        if options is None and ("debug" in changes or "trace" in changes) and "quiet" not in changes:
            changes["quiet"] = False
        self.options: Options = base.copy(**changes) if changes else base.copy()
        self.options.validate()
        self.server: Server | None = None  # the running natserver.Server (the last one once stopped)
        self._port: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._trio_thread: int | None = None  # thread id of the trio loop the server runs in
        self._thread: threading.Thread | None = None
        self._nursery: trio.Nursery | None = None  # trio-native mode: the caller's nursery
        self._aux: trio.Nursery | None = None  # our tasks next to the server (delays, lame duck)
        self._finished = threading.Event()
        self._finished.set()
        self._finished_trio: trio.Event | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        # Recording
        self._record = record
        self._records: collections.deque[Message] = collections.deque()
        self._record_bytes = 0
        self.max_messages = max_messages
        self.max_message_bytes = max_message_bytes
        self._waiters: list[_Waiter] = []
        # Faults (tuples replaced as a whole under the lock: the hooks read them lock-free)
        self._subject_faults: tuple[Fault, ...] = ()
        self._stage_faults: tuple[Fault, ...] = ()
        self._refuse_until = 0.0
        self._reinjecting = False
        self._delayed: list[tuple] = []  # heap of (due, seq, subject, reply, headers, body)
        self._delay_seq = 0
        self._delay_wakeup = trio.Event()
        self._server_faults: list[_ServerFault] = []  # JetStream faults (reset() cancels them)
        # cid -> (client, its max_pending, its stall mark) for clients we stopped
        self._gated: dict[int, tuple] = {}
        # jetstream=True without a store_dir: a private store in a temporary directory, kept
        # across restarts, removed by stop() (not the shared <tmp>/nats/jetstream)
        self._private_store: str | None = None
        # the NSQ front-end's data path, private the same way (not the working directory nsqd uses)
        self._private_nsq_path: str | None = None
        self._discard_store_when_done = False

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return not self._finished.is_set()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has not been started")
        return self._port

    @property
    def host(self) -> str:
        host = self.options.host
        return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>`` (credentials are not included)."""
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        """Start the server in a daemon thread; returns (self) once it accepts connections."""
        if self.running:
            raise RuntimeError("the server is already running")
        self._nursery = None
        self._start_thread(self._options_for_start(), timeout)
        return self

    def _options_for_start(self) -> Options:
        """The options, with a private JetStream store directory when JetStream is on and no
        store_dir was given, and a private NSQ data path when NSQ is on and its block has no
        data_path (each created on the first start, kept across restarts)."""
        if self.options.jetstream and not self.options.store_dir:
            self._private_store = tempfile.mkdtemp(prefix="natserver-jetstream-")
            self.options = self.options.copy(store_dir=self._private_store)
        nsq = self.options.nsq
        if nsq is not None and not _nsq_data_path(nsq):
            self._private_nsq_path = tempfile.mkdtemp(prefix="natserver-nsq-")
            nsq = {**nsq, "data_path": self._private_nsq_path} if isinstance(nsq, dict) \
                else nsq.copy(data_path=self._private_nsq_path)
            self.options = self.options.copy(nsq=nsq)
        self._discard_store_when_done = False
        return self.options

    def _discard_private_store(self) -> None:
        """After the final stop: remove the private store (the next start gets a new one)."""
        if self.running:  # trio-native stop() from the server's thread: when the task ends
            self._discard_store_when_done = True
            return
        path, self._private_store = self._private_store, None
        self._discard_store_when_done = False
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
            if self.options.store_dir == path:
                self.options = self.options.copy(store_dir="")
        nsq_path, self._private_nsq_path = self._private_nsq_path, None
        if nsq_path is not None:
            shutil.rmtree(nsq_path, ignore_errors=True)
            nsq = self.options.nsq
            if nsq is not None and _nsq_data_path(nsq) == nsq_path:
                nsq = {**nsq, "data_path": ""} if isinstance(nsq, dict) else nsq.copy(data_path="")
                self.options = self.options.copy(nsq=nsq)

    @property
    def store_dir(self) -> str:
        """The JetStream store directory in use ("" without JetStream); streams are under
        ``<store_dir>/jetstream``."""
        if not self.options.jetstream:
            return ""
        return self.options.store_dir

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: every client is closed ("Server Shutdown"), the port is released,
        a private JetStream store is removed.

        Blocks until the server's thread has ended. In trio-native mode, called from the trio
        thread, it only initiates the stop (use ``await stop_async()`` to wait for it).
        """
        try:
            self._stop(timeout)
        finally:
            self._discard_private_store()

    def _stop(self, timeout: float) -> None:
        if self.running:
            try:
                self._call(self._running_server().stop)
            except RuntimeError:
                pass  # finished on its own meanwhile
            if not self._in_server_thread():
                self._finished.wait(timeout)
        if self._thread is not None and not self._in_server_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("the natserver thread did not stop")
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError("the natserver thread failed") from error

    def restart(self, down_for: float = 0.0, timeout: float = 10.0, *, skip: float = 0.0) -> None:
        """Stop, stay down ``down_for`` seconds, start again on the same port (a new server
        id; recorded messages and faults carry over). Clients see a disconnect, then their
        reconnects succeed: the reconnect test. ``skip``: the server's clock comes back that
        many seconds later than it stopped, without waiting (time that passed while it was
        down, e.g. timers that came due meanwhile)."""
        if self._nursery is not None:
            raise RuntimeError("a trio-native server restarts with `await restart_async()`")
        port = self.port
        self._stop(timeout)
        self._wall_offset_ns += int(skip * 1e9)
        if down_for > 0:
            time.sleep(down_for)
        self._start_thread(self.options.copy(port=port), timeout)

    async def start_async(self, nursery: trio.Nursery | None = None) -> NatsServer:
        """Start from async code. With a trio ``nursery`` the server runs as a task in it
        (trio-native: no thread); otherwise as ``start()`` does (asyncio, trio or other)."""
        if nursery is None:
            return self.start()
        if self.running:
            raise RuntimeError("the server is already running")
        if self.clock == "manual" and not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
            # trio-native: the server runs on the caller's clock, which only a MockClock lets stand still
            raise ValueError("clock='manual' in trio-native mode needs the trio run's clock to be a "
                             "trio.testing.MockClock (pytest-trio's mock_clock fixture)")
        self._nursery = nursery
        try:
            await nursery.start(self._run, self._options_for_start())
        except BaseException:
            self._nursery = None
            raise
        return self

    async def stop_async(self) -> None:
        """``stop()`` for async code: in trio-native mode waits until the server task ended."""
        await self._stop_async()
        self._discard_private_store()

    async def _stop_async(self) -> None:
        if self._nursery is not None and self._in_server_thread():
            if self.running:
                self._running_server().stop()
                assert self._finished_trio is not None  # _run made it before running
                await self._finished_trio.wait()
            return
        self._stop(10.0)

    async def restart_async(self, down_for: float = 0.0) -> None:
        """``restart()`` for async code (sleeps with the caller's event loop)."""
        port = self.port
        await self._stop_async()
        if down_for > 0:
            await _sleep(down_for)
        if self._nursery is not None:
            await self._nursery.start(self._run, self.options.copy(port=port))
        else:
            self._start_thread(self.options.copy(port=port), 10.0)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> NatsServer:
        return await self.start_async()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop_async()

    def __repr__(self) -> str:
        state = f"running on {self.url}" if self.running else "stopped"
        return f"<NatsServer {state}>"

    def _start_thread(self, options: Options, timeout: float) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._run, options)
                ready.set()

        def target() -> None:
            try:
                trio.run(main, clock=self._new_trio_clock())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                if ready.is_set():
                    self._error = _single(exc)
                else:
                    failure.append(_single(exc))
            finally:
                self._finished.set()
                ready.set()

        self._error = None
        self._finished.clear()
        thread = threading.Thread(target=target, name="natserver", daemon=True)
        self._thread = thread
        thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"natserver did not start within {timeout}s")
        if failure:
            thread.join()
            self._thread = None
            raise failure[0]
        thread.name = f"natserver:{self._port}"

    async def _run(self, options: Options, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The server and our helper tasks, in one nursery (thread and native mode alike)."""
        trio_clock = trio.lowlevel.current_clock()
        # A test clock (ours in thread mode; pytest-trio's mock_clock in trio-native mode):
        # the server's wall time follows it, so advance() moves timestamps and timers alike.
        # A restart goes on from the time the server had (what was advanced stays advanced).
        timebase = None
        if isinstance(trio_clock, trio.testing.MockClock):
            timebase = server_clock.install(trio_clock, self._wall_offset_ns)
        self._timebase = timebase
        server = Server(options)
        self.server = server
        self._install_hooks()
        self._finished.clear()
        self._finished_trio = trio.Event()
        try:
            async with trio.open_nursery() as nursery:

                async def run_server(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
                    try:
                        await server.run(task_status=task_status)
                    finally:
                        nursery.cancel_scope.cancel()

                self._delayed.clear()  # what was delayed on a previous run died with it
                self._token = trio.lowlevel.current_trio_token()
                self._trio_thread = threading.get_ident()
                self._aux = nursery
                await nursery.start(run_server)
                nursery.start_soon(self._delivery_loop)
                self._port = server.port
                task_status.started(self)
        finally:
            if timebase is not None:
                self._wall_offset_ns = timebase.now_ns() - time.time_ns()
                server_clock.uninstall(timebase)
            self._aux = None
            self._token = None
            self._gated.clear()
            self._finished.set()
            self._finished_trio.set()
            if self._discard_store_when_done:
                self._discard_private_store()

    # -- the server's clock ----------------------------------------------------------------------

    def _new_trio_clock(self) -> trio.testing.MockClock:
        # A MockClock at rate 1 is trio's clock plus whatever the test jumped; at rate 0 it
        # only moves when jumped. (It never autojumps: only advance() skips time.)
        return trio.testing.MockClock(rate=1.0 if self.clock == "real" else 0.0)

    def now(self) -> float:
        """The server's wall time (``time.time()`` plus every ``advance()`` so far; with
        ``clock="manual"`` it stands still in between)."""
        timebase = self._timebase
        return time.time() if timebase is None else timebase.now()

    def advance(self, seconds: float, timeout: float = 10.0) -> None:
        """Move the server's clock ``seconds`` ahead now: every server-side timer that falls
        due on the way fires, in deadline order, as if the time had passed (JetStream ack
        waits, max_age, KV TTLs, duplicate windows, NSQ msg_timeout, STAN ack waits, pings,
        ``delay()`` faults...). Returns when the server has done what became due.

        Clients' own timers (nats-py's request timeout) stay on real time. Clients get a
        moment of real time to answer the server's keepalives (PING, NSQ and STAN
        heartbeats) on the way, so their connections survive long jumps; a client whose
        event loop is blocked meanwhile cannot answer: from async code, ``await
        advance_async()``."""
        if seconds < 0:
            raise ValueError("time cannot go back")
        if self._in_server_thread():
            raise RuntimeError("this would block the server's own trio loop: use `await advance_async()`")
        done = threading.Event()
        result: list = []

        async def job() -> None:
            try:
                result.append(await outcome.acapture(self._advance, seconds))
            finally:
                done.set()

        self._call(self._spawn, job)
        if not done.wait(timeout):
            raise TimeoutError(f"the server did not advance its clock within {timeout}s")
        result[0].unwrap()

    async def advance_async(self, seconds: float) -> None:
        """``advance()`` for asyncio or trio code: the caller's loop keeps running (its
        clients can answer the server meanwhile)."""
        if seconds < 0:
            raise ValueError("time cannot go back")
        library = _current_async_library()
        if library == "trio" and self._in_server_thread():
            await self._advance(seconds)
        elif library == "trio":
            await trio.to_thread.run_sync(self.advance, seconds)
        elif library == "asyncio":
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, self.advance, seconds)
        else:
            raise RuntimeError(f"unsupported async library {library!r} (use the blocking advance)")

    def _spawn(self, job: Callable[[], Any]) -> None:
        if self._aux is None:
            raise RuntimeError("the server is not running")
        self._aux.start_soon(job)

    async def _advance(self, seconds: float) -> None:
        """In the server's trio run: jump from deadline to deadline up to ``seconds`` ahead,
        letting every task run until it blocks after each jump."""
        trio_clock = trio.lowlevel.current_clock()
        if not isinstance(trio_clock, trio.testing.MockClock):
            raise RuntimeError("advance() needs the trio run's clock to be a trio.testing.MockClock "
                               "(trio-native mode: use pytest-trio's mock_clock fixture)")
        timebase = server_clock.installed()
        jump = trio_clock.jump if timebase is None else timebase.jump
        jumped = 0.0  # exactly `seconds` in all: real time passing meanwhile comes on top
        settled = 0.0  # jumped when the clients were last given time to answer
        for _ in range(MAX_ADVANCE_STEPS):
            if jumped - settled >= ADVANCE_SETTLE_EVERY:
                await trio.testing.wait_all_tasks_blocked(ADVANCE_SETTLE)
                settled = jumped
            else:
                await trio.testing.wait_all_tasks_blocked()
            step = max(trio.lowlevel.current_statistics().seconds_to_next_deadline, 0.0) + ADVANCE_OVERSHOOT
            if jumped + step > seconds:
                break
            jump(step)
            jumped += step
        if seconds > jumped:
            jump(seconds - jumped)
        await trio.testing.wait_all_tasks_blocked(ADVANCE_SETTLE)

    # -- running code in the server's trio loop ----------------------------------------------

    def _in_server_thread(self) -> bool:
        return self._trio_thread is not None and threading.get_ident() == self._trio_thread

    def _refuse_inside_event_loop(self, method: str) -> None:
        """A blocking wait called from async code would stop that event loop, and with it the
        clients the test is waiting on (they could not send): it would only time out. Say so
        at once, and what to call instead."""
        if self._in_server_thread():
            raise RuntimeError(f"{method}() would block the server's own trio loop: use `await {method}_async()`")
        library = _current_async_library()
        if library is not None:
            raise RuntimeError(f"{method}() blocks, and it was called inside a running {library} event loop, "
                               f"which it would stop (its clients could not send): use `await {method}_async()`")

    def _running_server(self) -> Server:
        """The Server (the last one once stopped): RuntimeError before the first start."""
        server = self.server
        if server is None:
            raise RuntimeError("the server is not running")
        return server

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float = 10.0) -> Any:
        """Run ``fn(*args)`` in the server's trio loop (directly if we are in it) and return
        its result. Works from any other thread, including another trio loop's (which
        ``trio.from_thread.run_sync`` refuses)."""
        token = self._token
        if not self.running or token is None:
            raise RuntimeError("the server is not running")
        if self._in_server_thread():
            return fn(*args)
        done = threading.Event()
        result: list = []

        def job() -> None:
            try:
                result.append(outcome.capture(fn, *args))
            finally:
                done.set()

        try:
            token.run_sync_soon(job)
        except trio.RunFinishedError:
            raise RuntimeError("the server is not running") from None
        if not done.wait(timeout):
            raise TimeoutError(f"the server did not run {getattr(fn, '__name__', fn)} within {timeout}s")
        return result[0].unwrap()

    # -- hooks ----------------------------------------------------------------------------------

    def _install_hooks(self) -> None:
        server = self.server
        if server is None:
            return
        server.publish_hook = self._publish_hook if (self._record or self._subject_faults) else None
        refusing = self._refuse_until > time.monotonic()
        server.connection_hook = self._connection_hook if (self._stage_faults or refusing) else None

    def _publish_hook(self, client, subject: bytes, reply: bytes | None, header_size: int, payload) -> int:
        if self._reinjecting:
            return DELIVER
        action = DELIVER
        delay = 0.0
        for fault in self._subject_faults:
            pattern = fault._pattern  # (a subject fault always has one)
            if fault._remaining > 0 and pattern is not None and pattern.match(subject):
                if fault.kind == "no_responders" and reply is None:
                    continue
                fault._fire()
                if fault.kind == "delay":
                    action = DROP
                    delay = fault.seconds
                elif fault.kind == "drop":
                    action = DROP
                else:
                    action = NO_RESPONDERS
                break
        if delay:
            raw = bytes(payload)  # payload may be a view of the receive buffer
            headers = raw[:header_size] if header_size > 0 else None
            body = raw[header_size:] if header_size > 0 else raw
            self._delay_seq += 1
            heapq.heappush(self._delayed, (trio.current_time() + delay, self._delay_seq, bytes(subject),
                                           None if reply is None else bytes(reply), headers, body))
            self._delay_wakeup.set()
        if self._record:
            self._record_message(client, subject, reply, header_size, payload, "delay" if delay else _ACTION_NAMES[action])
        return action

    async def _delivery_loop(self) -> None:
        """Publish delayed messages when due, in due order (equal delays keep their order)."""
        delayed = self._delayed
        while True:
            self._delay_wakeup = trio.Event()
            if not delayed:
                await self._delay_wakeup.wait()
                continue
            if delayed[0][0] > trio.current_time():
                with trio.move_on_at(delayed[0][0]):
                    await self._delay_wakeup.wait()
                continue
            _, _, subject, reply, headers, body = heapq.heappop(delayed)
            server = self._running_server()
            if server.shutting_down:
                return
            self._reinjecting = True
            try:
                server.publish(subject, body, reply, headers)
            finally:
                self._reinjecting = False

    def _connection_hook(self, client, stage: str) -> bool:
        if stage == "accept" and self._refuse_until:
            if time.monotonic() < self._refuse_until:
                return True
            self._refuse_until = 0.0
            self._install_hooks()
        for fault in self._stage_faults:
            if fault._stage == stage and fault._remaining > 0 and (fault._name is None or fault._name == client.name):
                fault._fire()
                # The client sees EOF, never a reset for the bytes it sent after the close
                # (its handshake PING): a reset makes nats-py give up instead of reconnecting.
                client.linger_on_close = CLOSE_FAULT_LINGER
                return True
        return False

    # -- recording ------------------------------------------------------------------------------

    def _record_message(self, client, subject: bytes, reply: bytes | None, header_size: int, payload, action: str) -> None:
        raw = bytes(payload)
        if header_size > 0:
            headers, data = raw[:header_size], raw[header_size:]
        else:
            headers, data = None, raw
        message = Message(
            subject.decode("utf-8", "replace"),
            None if reply is None else reply.decode("utf-8", "replace"),
            data,
            headers,
            client.name,
            client.cid,
            server_clock.now(),
            action,
        )
        ready = None
        with self._lock:
            records = self._records
            records.append(message)
            self._record_bytes += len(raw)
            while len(records) > self.max_messages or (self._record_bytes > self.max_message_bytes and len(records) > 1):
                old = records.popleft()
                self._record_bytes -= len(old.data) + len(old.raw_headers or b"")
            if self._waiters:
                for waiter in self._waiters:
                    if waiter.pattern is None or waiter.pattern.match_text(message.subject):
                        waiter.found.append(message)
                        if len(waiter.found) >= waiter.count:
                            ready = ready or []
                            ready.append(waiter)
                if ready:
                    self._waiters = [w for w in self._waiters if w not in ready]
        if ready:
            for waiter in ready:
                waiter.notify()

    @property
    def recording(self) -> bool:
        return self._record

    @recording.setter
    def recording(self, on: bool) -> None:
        """Turn the recorder on or off (off: the publish hook is gone unless a fault needs it)."""
        self._record = bool(on)
        self._install_hooks()

    def messages(self, subject: str | None = None) -> list[Message]:
        """Recorded messages (oldest first) since the last ``clear()``, optionally only those
        whose subject matches ``subject`` (wildcards allowed)."""
        pattern = _pattern(subject)
        with self._lock:
            records = list(self._records)
        if pattern is None:
            return records
        return [m for m in records if pattern.match_text(m.subject)]

    def clear(self) -> None:
        """Forget the recorded messages."""
        with self._lock:
            self._records.clear()
            self._record_bytes = 0

    def _register(self, subject: str | None, count: int, notify: Callable[[], None]) -> tuple[list[Message], _Waiter | None]:
        if not self._record:
            raise RuntimeError("recording is off (NatsServer(record=False)): nothing to wait for")
        if count < 1:
            raise ValueError("count must be at least 1")
        pattern = _pattern(subject)
        with self._lock:
            found = [m for m in self._records if pattern is None or pattern.match_text(m.subject)]
            if len(found) >= count:
                return found[:count], None
            waiter = _Waiter(pattern, count, found, notify)
            self._waiters.append(waiter)
            return found, waiter

    def _unregister(self, waiter: _Waiter) -> None:
        with self._lock:
            self._waiters = [w for w in self._waiters if w is not waiter]

    def _timeout(self, subject: str | None, count: int, got: int, timeout: float) -> TimeoutError:
        subjects = sorted({m.subject for m in self.messages()})
        what = "any subject" if subject is None else repr(subject)
        return TimeoutError(
            f"{got} of {count} message(s) on {what} within {timeout}s; "
            f"recorded subjects: {subjects[:20]}{' ...' if len(subjects) > 20 else ''}"
        )

    def wait_for_messages(self, subject: str | None = None, count: int = 1, timeout: float = 5.0) -> list[Message]:
        """Block until ``count`` messages matching ``subject`` were recorded since the last
        ``clear()`` (those already recorded count); returns the first ``count``. Raises
        ``TimeoutError``. From async code use ``wait_for_messages_async``: blocking the event
        loop would keep its client from sending."""
        self._refuse_inside_event_loop("wait_for_messages")
        event = threading.Event()
        found, waiter = self._register(subject, count, event.set)
        if waiter is None:
            return found
        if not event.wait(timeout):
            self._unregister(waiter)
            if len(waiter.found) < count:
                raise self._timeout(subject, count, len(waiter.found), timeout)
        return waiter.found[:count]

    def wait_for_message(self, subject: str | None = None, timeout: float = 5.0) -> Message:
        """Block until a message matching ``subject`` is recorded (or was, since the last
        ``clear()``); returns the first such message. Raises ``TimeoutError``."""
        self._refuse_inside_event_loop("wait_for_message")
        return self.wait_for_messages(subject, 1, timeout)[0]

    async def wait_for_messages_async(self, subject: str | None = None, count: int = 1, timeout: float = 5.0) -> list[Message]:
        """``wait_for_messages`` for asyncio or trio code (the loop keeps running)."""
        library = _current_async_library()
        if library == "trio":
            event = trio.Event()
            if self._in_server_thread():
                notify = event.set
            else:
                token = trio.lowlevel.current_trio_token()

                def notify() -> None:
                    try:
                        token.run_sync_soon(event.set)
                    except trio.RunFinishedError:
                        pass

            found, waiter = self._register(subject, count, notify)
            if waiter is None:
                return found
            with trio.move_on_after(timeout):
                await event.wait()
        elif library == "asyncio":
            import asyncio

            loop = asyncio.get_running_loop()
            future = loop.create_future()

            def wake() -> None:
                if not future.done():
                    future.set_result(None)

            def notify() -> None:
                try:
                    loop.call_soon_threadsafe(wake)
                except RuntimeError:  # loop closed
                    pass

            found, waiter = self._register(subject, count, notify)
            if waiter is None:
                return found
            try:
                await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:
                pass
        else:
            raise RuntimeError(f"unsupported async library {library!r} (use the blocking wait_for_messages)")
        self._unregister(waiter)
        if len(waiter.found) < count:
            raise self._timeout(subject, count, len(waiter.found), timeout)
        return waiter.found[:count]

    async def wait_for_message_async(self, subject: str | None = None, timeout: float = 5.0) -> Message:
        """``wait_for_message`` for asyncio or trio code."""
        return (await self.wait_for_messages_async(subject, 1, timeout))[0]

    # -- inspection -----------------------------------------------------------------------------

    def connections(self, name: str | None = None) -> list[ClientInfo]:
        """The open client connections (optionally only those with CONNECT name ``name``)."""
        if not self.running:
            return []
        return self._call(self._snapshot_clients, name)

    def _snapshot_clients(self, name: str | None) -> list[ClientInfo]:
        result = []
        for client in list(self._running_server().clients.values()):
            if client.closed or (name is not None and client.name != name):
                continue
            result.append(ClientInfo(
                cid=client.cid,
                name=client.name,
                lang=client.lang,
                version=client.version,
                ip=client.ip,
                port=client.port,
                user=client.user,
                subscriptions=tuple(sub.subject.decode("utf-8", "replace") for sub in client.subs.values()),
                pending_bytes=client.pending,
                in_msgs=client.in_msgs,
                out_msgs=client.out_msgs,
                in_bytes=client.in_bytes,
                out_bytes=client.out_bytes,
                reading_stopped=client.read_gate is not None,
                writing_stopped=client.write_gate is not None,
            ))
        return result

    def closed_connections(self, name: str | None = None) -> list[ClientInfo]:
        """The connections closed since the server started (optionally only those with
        CONNECT name ``name``), oldest first, each with its ``close_reason``: the last
        ``max_closed_clients`` (10 000 by default), as /connz?state=closed keeps them.
        Their subscriptions are those they had when they closed."""
        server = self.server
        if server is None:
            return []
        records = self._call(list, server.closed_clients) if self.running else list(server.closed_clients)
        infos = (_closed_client_info(record) for record in records)
        return [info for info in infos if name is None or info.name == name]

    def subscriptions(self, subject: str | None = None) -> list[SubscriptionInfo]:
        """Current subscriptions, optionally only those whose subject *matches* the literal
        ``subject`` (so ``"greet.joe"`` finds a ``greet.*`` subscription)."""
        if not self.running:
            return []
        return self._call(self._snapshot_subscriptions, subject)

    def _snapshot_subscriptions(self, subject: str | None) -> list[SubscriptionInfo]:
        result = []
        for client in list(self._running_server().clients.values()):
            if client.closed:
                continue
            for sub in list(client.subs.values()):
                text = sub.subject.decode("utf-8", "replace")
                if subject is not None and not subject_matches(text, subject):
                    continue
                result.append(SubscriptionInfo(
                    cid=client.cid,
                    client=client.name,
                    subject=text,
                    queue=None if sub.queue is None else sub.queue.decode("utf-8", "replace"),
                    sid=sub.sid.decode("utf-8", "replace"),
                ))
        return result

    def counters(self) -> Counters:
        """Server totals since it (re)started."""
        server = self.server
        if server is None:
            raise RuntimeError("the server has not been started")
        if self.running:
            return self._call(self._snapshot_counters)
        return self._snapshot_counters()

    def _snapshot_counters(self) -> Counters:
        s = self._running_server()
        return Counters(
            in_msgs=s.in_msgs,
            out_msgs=s.out_msgs,
            in_bytes=s.in_bytes,
            out_bytes=s.out_bytes,
            slow_consumers=s.slow_consumers,
            total_connections=s.total_connections,
            connections=len(s.clients),
            subscriptions=s.sublist.count,
        )

    def wait_for_client(self, name: str | None = None, timeout: float = 5.0, *, count: int = 1) -> list[ClientInfo]:
        """Block until at least ``count`` connections (named ``name``) are open."""
        self._refuse_inside_event_loop("wait_for_client")
        return _poll_sync(lambda: _enough(self.connections(name), count), timeout,
                          lambda: f"{count} connection(s) named {name!r}" if name else f"{count} connection(s)")

    async def wait_for_client_async(self, name: str | None = None, timeout: float = 5.0, *, count: int = 1) -> list[ClientInfo]:
        return await _poll_async(lambda: _enough(self.connections(name), count), timeout,
                                 lambda: f"{count} connection(s) named {name!r}" if name else f"{count} connection(s)")

    def wait_for_subscription(self, subject: str, timeout: float = 5.0) -> list[SubscriptionInfo]:
        """Block until some subscription matches the literal ``subject`` (e.g. a service
        started in the background is ready)."""
        self._refuse_inside_event_loop("wait_for_subscription")
        return _poll_sync(lambda: self.subscriptions(subject), timeout, lambda: f"a subscription matching {subject!r}")

    async def wait_for_subscription_async(self, subject: str, timeout: float = 5.0) -> list[SubscriptionInfo]:
        return await _poll_async(lambda: self.subscriptions(subject), timeout, lambda: f"a subscription matching {subject!r}")

    # -- publishing -----------------------------------------------------------------------------

    def publish(self, subject: str, payload: bytes | str = b"", reply: str | None = None,
                headers: dict[str, str] | bytes | None = None) -> None:
        """Publish a message from the server itself (recorded with cid 0, client "")."""
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        self._call(self._running_server().publish, subject, data, reply, _encode_headers(headers))

    # -- faults: clients ------------------------------------------------------------------------

    def _select(self, name: str | None, cid: int | None, what: str) -> list:
        if name is None and cid is None:
            raise TypeError(f"{what}: give a client name or cid= (or use the *_all variant)")
        server = self._running_server()
        clients = [
            c for c in list(server.clients.values())
            if not c.closed and (name is None or c.name == name) and (cid is None or c.cid == cid)
        ]
        if not clients:
            names = sorted({(c.cid, c.name) for c in server.clients.values()})
            raise LookupError(f"{what}: no open connection with name={name!r} cid={cid!r}; open: {names}")
        return clients

    def close_client(self, name: str | None = None, *, cid: int | None = None) -> int:
        """Close the connection(s) of client ``name`` (CONNECT name) or ``cid`` now, without
        a word, as nats-server's kick does; returns how many. The client sees the socket
        close: a disconnect, then a reconnect. Raises ``LookupError`` if none matches."""
        return self._call(self._close_clients, name, cid, True)

    def close_all_clients(self) -> int:
        """Close every client connection now; returns how many."""
        if not self.running:
            return 0
        return self._call(self._close_clients, None, None, False)

    def _close_clients(self, name: str | None, cid: int | None, select: bool) -> int:
        server = self._running_server()
        if select:
            clients = self._select(name, cid, "close_client")
        else:
            clients = [c for c in list(server.clients.values()) if not c.closed]
        for client in clients:
            client.close("Kicked", flush=False)
        server.flush_touched()
        return len(clients)

    def stop_reading(self, name: str | None = None, *, cid: int | None = None) -> int:
        """The server stops reading what the client sends (after the chunk being read): its
        PINGs go unanswered, its flush() times out, its publishes go nowhere (yet)."""
        return self._call(self._gate, name, cid, "read_gate", None)

    def stop_writing(self, name: str | None = None, *, cid: int | None = None, max_pending: int | None = None) -> int:
        """The server stops sending to the client, as if the client did not read its socket:
        messages for it pile up, and once more than ``max_pending`` bytes (default: the
        server's max_pending) are pending the server closes it as a slow consumer, exactly as
        nats-server does. ``resume()`` delivers the backlog at once (a burst)."""
        return self._call(self._gate, name, cid, "write_gate", max_pending)

    def resume(self, name: str | None = None, *, cid: int | None = None) -> int:
        """Undo ``stop_reading`` and ``stop_writing`` for these clients (all if neither a
        name nor a cid is given)."""
        if not self.running:
            return 0
        return self._call(self._ungate, name, cid)

    def _gate(self, name: str | None, cid: int | None, which: str, max_pending: int | None) -> int:
        clients = self._select(name, cid, "stop_reading" if which == "read_gate" else "stop_writing")
        for client in clients:
            if client.cid not in self._gated:
                self._gated[client.cid] = (client, client.max_pending, client.stall_at)
            if getattr(client, which) is None:
                setattr(client, which, trio.Event())
            if max_pending is not None:
                # Closed as soon as it is over the limit; producers are not stalled first
                # (the stall mark is the limit), so a test gets its slow consumer at once.
                client.set_max_pending(max_pending, stall_at=max_pending)
        self._running_server().flush_touched()
        return len(clients)

    def _ungate(self, name: str | None, cid: int | None) -> int:
        n = 0
        for client, max_pending, stall_at in list(self._gated.values()):
            if (name is not None and client.name != name) or (cid is not None and client.cid != cid):
                continue
            del self._gated[client.cid]
            n += 1
            client.set_max_pending(max_pending, stall_at=stall_at)
            for which in ("read_gate", "write_gate"):
                gate = getattr(client, which)
                if gate is not None:
                    setattr(client, which, None)
                    gate.set()
            if client.out:
                client.wake_writer()
        return n

    # -- faults: messages -----------------------------------------------------------------------

    def _add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            if fault._stage is None:
                self._subject_faults = self._subject_faults + (fault,)
            else:
                self._stage_faults = self._stage_faults + (fault,)
        self._install_hooks()
        return fault

    def _remove_fault(self, fault: Fault) -> None:
        with self._lock:
            self._subject_faults = tuple(f for f in self._subject_faults if f is not fault)
            self._stage_faults = tuple(f for f in self._stage_faults if f is not fault)
        self._install_hooks()

    def drop(self, subject: str, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """Drop the next ``count`` messages published on ``subject`` (wildcards allowed;
        default 1; ``None``: all until cancelled). Subscribers never get them; a request
        times out."""
        return self._add_fault(Fault(self, "drop", subject, count, pattern=_Pattern(subject)))

    def delay(self, subject: str, seconds: float, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """Deliver the next ``count`` messages on ``subject`` ``seconds`` late (default 1;
        ``None``: all until cancelled). Each is published again by the server after the
        delay, to whoever is subscribed by then."""
        if seconds <= 0:
            raise ValueError("seconds must be positive")
        return self._add_fault(Fault(self, "delay", subject, count, pattern=_Pattern(subject), seconds=seconds))

    def no_responders(self, subject: str, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """Answer the next ``count`` requests on ``subject`` (default 1; ``None``: all until
        cancelled) as if nobody were subscribed, even if a responder is: the requester gets
        the 503 no-responders status (nats-py: ``NoRespondersError``). Plain publishes (no
        reply subject) are not affected and not counted."""
        return self._add_fault(Fault(self, "no_responders", subject, count, pattern=_Pattern(subject)))

    # -- faults: connections --------------------------------------------------------------------

    def close_connections(self, stage: Stage, count: int | None = DEFAULT_FAULT_COUNT, *,
                          name: str | None = None) -> Fault:
        """Close the next ``count`` connections (default 1; ``None``: all until cancelled) at
        ``stage`` of their handshake:

        ``"before_info"``: right after accept, before the server says anything;
        ``"after_info"``: after sending INFO, before CONNECT is read;
        ``"after_connect"``: after CONNECT is processed (before +OK/PONG);
        ``"after_ping"``: when the client's next PING arrives, instead of the PONG (for a
        connecting client that is the handshake PING; for a connected one its next flush).

        ``name`` (the CONNECT name) limits it to one client; only possible from
        ``after_connect`` on, the name is unknown before CONNECT.
        """
        if stage not in _STAGES:
            raise ValueError(f"stage must be one of {sorted(_STAGES)}, not {stage!r}")
        if name is not None and stage in ("before_info", "after_info"):
            raise ValueError(f"the client's name is not known at {stage!r} (CONNECT carries it)")
        return self._add_fault(Fault(self, "close", stage, count, stage=_STAGES[stage], name=name))

    def refuse_connections(self, seconds: float | None = None) -> None:
        """For ``seconds`` (``None``: until ``accept_connections()``) close every new
        connection at once, before INFO: clients see a failed connect and retry."""
        self._refuse_until = math.inf if seconds is None else time.monotonic() + seconds
        self._install_hooks()

    def accept_connections(self) -> None:
        """End ``refuse_connections()`` early."""
        self._refuse_until = 0.0
        self._install_hooks()

    def reset(self) -> None:
        """Cancel every fault, resume stopped clients, accept connections, forget messages."""
        with self._lock:
            faults = self._subject_faults + self._stage_faults
            self._subject_faults = ()
            self._stage_faults = ()
        for fault in faults:
            fault._remaining = 0
        self._refuse_until = 0.0
        self._install_hooks()
        server_faults, self._server_faults = self._server_faults, []
        for fault in server_faults:
            fault.cancel()
        self.resume()
        self.clear()

    # -- inside JetStream, NSQ and STAN ------------------------------------------------------
    # Snapshots are taken in the server's thread (natserver.testing_inspect): frozen, they
    # stay as they were while the server goes on.

    def streams(self, account: str = GLOBAL_ACCOUNT) -> list[StreamState]:
        """The JetStream streams of ``account`` (by name), as they are now."""
        return self._call(inspect.streams, self.server, account, self)

    def stream(self, name: str, account: str = GLOBAL_ACCOUNT) -> StreamState:
        """One stream (``LookupError`` if it does not exist); ``.messages(subject=,
        start_seq=)`` reads its messages."""
        return self._call(lambda: inspect.stream_state(inspect.find_stream(self.server, account, name), self))

    def stream_messages(self, name: str, subject: str | None = None, start_seq: int = 1,
                        limit: int = DEFAULT_MAX_SNAPSHOT_MESSAGES, account: str = GLOBAL_ACCOUNT) -> list[StoredMessage]:
        """The messages stream ``name`` holds now, from ``start_seq``, on subjects matching
        ``subject`` (wildcards allowed), at most ``limit``."""
        pattern = _pattern(subject)
        match = pattern.match_text if pattern is not None else None
        return self._call(lambda: inspect.stream_messages(inspect.find_stream(self.server, account, name), match,
                                                          start_seq, limit))

    def consumer(self, stream: str, name: str, account: str = GLOBAL_ACCOUNT) -> ConsumerState:
        """A consumer's state now: delivered, ack floor, pending acks, redelivery counts,
        waiting pull requests."""
        return self._call(lambda: inspect.consumer_state(inspect.find_consumer(self.server, account, stream, name)))

    def kv(self, bucket: str, account: str = GLOBAL_ACCOUNT) -> dict[str, bytes]:
        """A KV bucket as a dict: its live keys and their latest values."""
        return self._call(inspect.kv_bucket, self.server, account, bucket, DEFAULT_MAX_SNAPSHOT_MESSAGES)

    def nsq_topics(self) -> dict[str, NsqTopicState]:
        """The NSQ topics by name, each with its channels (depth, in flight, deferred...)."""
        return {topic.name: topic for topic in self._call(inspect.nsq_topics, self.server)}

    def stan_channels(self) -> dict[str, StanChannelState]:
        """The NATS Streaming channels by name, each with its subscriptions."""
        return {channel.name: channel for channel in self._call(inspect.stan_channels, self.server)}

    def wait_for_ack(self, stream: str, consumer: str, seq: int, timeout: float = 5.0) -> ConsumerState:
        """Block until stream sequence ``seq`` was delivered to ``consumer`` and acked."""
        return _poll_sync(lambda: self._acked(stream, consumer, seq), timeout,
                          lambda: f"ack of {stream} sequence {seq} by {consumer!r}")[0]

    async def wait_for_ack_async(self, stream: str, consumer: str, seq: int, timeout: float = 5.0) -> ConsumerState:
        return (await _poll_async(lambda: self._acked(stream, consumer, seq), timeout,
                                  lambda: f"ack of {stream} sequence {seq} by {consumer!r}"))[0]

    def wait_for_consumer_pending(self, stream: str, consumer: str, count: int = 0,
                                  timeout: float = 5.0) -> ConsumerState:
        """Block until ``consumer`` has ``count`` messages left to deliver (num_pending) and
        none delivered but unacknowledged: ``count=0`` is "the consumer is done"."""
        return _poll_sync(lambda: self._pending_is(stream, consumer, count), timeout,
                          lambda: f"{count} pending on {stream} > {consumer}")[0]

    async def wait_for_consumer_pending_async(self, stream: str, consumer: str, count: int = 0,
                                              timeout: float = 5.0) -> ConsumerState:
        return (await _poll_async(lambda: self._pending_is(stream, consumer, count), timeout,
                                  lambda: f"{count} pending on {stream} > {consumer}"))[0]

    def _acked(self, stream: str, consumer: str, seq: int) -> list[ConsumerState]:
        state = self.consumer(stream, consumer)
        return [state] if state.acked(seq) else []

    def _pending_is(self, stream: str, consumer: str, count: int) -> list[ConsumerState]:
        state = self.consumer(stream, consumer)
        return [state] if state.num_pending == count and not state.pending_acks else []

    # -- faults: JetStream ------------------------------------------------------------------------

    def fail_stores(self, stream: str, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """The next ``count`` messages for ``stream`` are not stored: the publisher gets
        JetStream's store error (503, err_code 10077), as when nats-server's store fails a
        write. Acts on the running server (a restart ends it)."""
        fault = _ServerFault(self, "fail_stores", stream, count)

        def install() -> None:
            found = inspect.find_stream(self.server, GLOBAL_ACCOUNT, stream)
            fault._undo = inspect.fail_stores(found, fault).remove

        return self._add_server_fault(fault, install)

    def drop_acks(self, stream: str, consumer: str, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """Drop the next ``count`` acks (and naks, progress, term) clients send to
        ``consumer``: the server never sees them, the message is redelivered after
        ack_wait (``advance()`` gets there at once)."""
        return self.drop(f"$JS.ACK.{stream}.{consumer}.>", count)

    def expire_pull_requests(self, stream: str, consumer: str, count: int | None = DEFAULT_FAULT_COUNT) -> Fault:
        """The next ``count`` pull requests to ``consumer`` end at once with 408 Request
        Timeout and no messages, as if their ``expires`` had passed (nats-py's ``fetch``
        raises its TimeoutError)."""
        fault = _ServerFault(self, "expire_pull_requests", f"{stream} > {consumer}", count)

        def install() -> None:
            fault._undo = inspect.expire_pulls(self.server, GLOBAL_ACCOUNT, stream, consumer, fault).remove

        return self._add_server_fault(fault, install)

    def _add_server_fault(self, fault: _ServerFault, install: Callable[[], None]) -> Fault:
        self._call(install)
        self._server_faults.append(fault)
        return fault

    # -- lame duck ------------------------------------------------------------------------------

    def lame_duck(self, duration: float | None = None, grace_period: float | None = None) -> None:
        """Enter lame duck mode as nats-server does (signal ldm): stop listening, tell the
        clients (INFO with ``"ldm": true``: nats-py calls its ``lame_duck_mode_cb``), wait
        ``grace_period``, close the clients spread over the rest of ``duration``, stop.
        Defaults: the server's lame_duck_duration / lame_duck_grace_period options.
        Returns at once; ``running`` turns False when the server has stopped."""
        duration = self.options.lame_duck_duration if duration is None else duration
        grace_period = self.options.lame_duck_grace_period if grace_period is None else grace_period
        if grace_period < 0 or duration < 0:
            raise ValueError("durations cannot be negative")
        self._call(self._enter_lame_duck, duration, grace_period)

    def _enter_lame_duck(self, duration: float, grace_period: float) -> None:
        server = self._running_server()
        if server.lame_duck or server.shutting_down:
            return
        server.lame_duck = True
        for listener in server.listeners:
            listener.socket.close()  # the accept loop ends; new connections are refused
        for hook in server.lame_duck_hooks:  # the routes tell their peers ("ldm")
            hook()
        for client in list(server.clients.values()):
            if not client.closed and client.connect_received and client.protocol >= 1:
                client.queue(server.info_for(client))
        server.flush_touched()
        assert self._aux is not None  # (run through _call: the server is running)
        self._aux.start_soon(self._lame_duck_closer, duration, grace_period)

    async def _lame_duck_closer(self, duration: float, grace_period: float) -> None:
        server = self._running_server()
        await trio.sleep(grace_period)
        clients = [c for c in server.clients.values() if not c.closed]
        spread = max(duration - grace_period, 0.0)
        interval = spread / len(clients) if clients else 0.0
        for i, client in enumerate(clients):
            if i and interval:
                await trio.sleep(interval)
            if not client.closed:
                client.close("Server Shutdown", flush=False)
                server.flush_touched()
        server.stop()


def _enough(items: list, count: int) -> list:
    return items if len(items) >= count else []


async def _sleep(seconds: float) -> None:
    library = _current_async_library()
    if library == "trio":
        await trio.sleep(seconds)
    elif library == "asyncio":
        import asyncio

        await asyncio.sleep(seconds)
    else:
        raise RuntimeError(f"unsupported async library {library!r}")


def _poll_sync(check: Callable[[], list], timeout: float, what: Callable[[], str]) -> list:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {what()} within {timeout}s")
        time.sleep(0.005)


async def _poll_async(check: Callable[[], list], timeout: float, what: Callable[[], str]) -> list:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {what()} within {timeout}s")
        await _sleep(0.005)
