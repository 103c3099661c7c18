"""One client connection: its reader, its writer, its subscriptions and message delivery.

Each connection runs in its own trio nursery: the reader (this file's ``_read_loop``, which
parses whole receive chunks and routes every op in them synchronously) and, started only once
the socket does not take what is written in place (or for TLS), one writer that drains the
outbound buffer with coalesced sends. Its ping and auth timers are entries of the server's one
timer task (natserver.server.keepalive).

Delivery never blocks the publisher: a message is appended to the subscriber's outbound list
and the subscriber is marked "touched"; after the publisher's whole chunk is processed every
touched client is flushed once (nats-server's pcd/flushClients): written in place when its
writer is idle, else handed to its writer. A subscriber whose pending bytes exceed
max_pending, or whose send stalls past write_deadline, is a slow consumer and is closed
without a word, as nats-server does, while everyone else carries on. A producer that feeds a
subscriber past half of its max_pending waits for it a little (the stall gate).
"""

from __future__ import annotations

import collections
import logging
import marshal
import os
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import trio

from .. import clock
from ..auth.users import authenticate_connect
from ..protocol import errors
from ..protocol.const import (
    DEFAULT_RTT_MEASUREMENT_INTERVAL,
    FIRST_PING_INTERVAL,
    FIRST_PING_JITTER,
    READ_SIZE,
    STALL_FRACTION,
    STALL_MAX_WAIT,
    STALL_MIN_WAIT,
)
from ..protocol.errors import ProtocolError, ServerError
from ..protocol.ops import PING, Connect, Ping, PingRun, Pong, Pub, PubRun, Sub, Unsub
from ..protocol.parser import Parser, compiled, restride
from ..routing.accounts import GLOBAL_ACCOUNT
from ..routing.sublist import (
    EMPTY_RESULT,
    SublistResult,
    is_valid_literal_subject,
    is_valid_subject,
    queue_pick,
    queue_seed,
)
from . import msgtrace, trace

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("natserver")

# What a publish hook (server.publish_hook, used by natserver.testing) tells routing to do.
DELIVER = 0
DROP = 1  # the message vanishes (the hook may re-inject it later: delayed delivery)
NO_RESPONDERS = 2  # route as if nobody were subscribed

CRLF = b"\r\n"
OK = b"+OK\r\n"
PING_PROTO = b"PING\r\n"
PONG_PROTO = b"PONG\r\n"
SP = b" "
MSG_ = b"MSG "
HMSG_ = b"HMSG "
# Backlogs up to this size are written in place by Client.flush; bigger ones go to the writer.
# Above a grown read's deliveries to one subscriber (GROWN_READ_SIZE of PUBs, their MSG lines a
# little longer), which the writer task would otherwise take at the cost of a wake-up each.
EAGER_WRITE_MAX = 1024 * 1024
# Client.flush hands the pieces to os.writev, not joined, when there are at most this many
# (Linux's IOV_MAX, 1024, is writev's limit) averaging at least WRITEV_MIN_PIECE bytes: each
# iovec costs the kernel about 40 ns, a joined byte 0.07 ns (measured on loopback TCP, 256 KiB
# in 1 KiB pieces: writev 69 us, join and write 86 us; in 256 B pieces 111 against 83 us).
WRITEV_MAX_PIECES = 1024
WRITEV_MIN_PIECE = 512
# A read shorter than this most likely emptied the socket (see Client._read_loop).
SMALL_READ = 4096
# What a read asks for after one that got at least READ_SIZE (64 KiB): the socket holds more,
# so a producer outpacing us is read in chunks of up to this, back to READ_SIZE after a shorter
# read. Each chunk costs a trio wake-up, a parse and a write per subscriber whatever its size
# (about 60 us of Python). nats-server's read buffer grows the same way (client.go readLoop, to
# 64 KiB; its cost per read is Go's). Under glibc's 128 KiB mmap threshold: the read's buffer and
# the chunk-sized copies made from it come from the heap; at 256 KiB they were fresh pages each
# time (0.1-0.2 page faults a message, 1 -> 1 16-512 B slower than with 64 KiB reads). Server CPU
# a message with 120 KiB, against 64 KiB (own raw driver, three runs, medians): 1 -> 1 1 KiB 1.81
# -> 1.36 us, 16-512 B 0.86 -> 0.61 us.
GROWN_READ_SIZE = 120 * 1024
# Payloads at least this big are queued by reference instead of joined into the MSG bytes.
BIG_PAYLOAD = 16 * 1024
# deliver_batch's allowance per message for its MSG line's bytes besides subject, reply and sid
# ("HMSG ", two sizes, spaces and CRLFs: at most 53).
BATCH_LINE_SLACK = 64
# client.go processInboundClientMsg (2.10+): the no-responders status a requester gets names
# the subject nobody answered on: "NATS/1.0 503\r\nNats-Subject: <subject>\r\n\r\n" (32 bytes
# and the subject), then an empty payload.
NO_RESPONDERS_STATUS = b"NATS/1.0 503\r\nNats-Subject: "
NO_RESPONDERS_HEADER_SIZE = len(NO_RESPONDERS_STATUS) + 4  # the subject's CRLF and the blank line

# The compiled twin of the delivery loop's common case (_croute.c), or None (not built, or
# NATSERVER_NO_EXTENSIONS set: this module's Python path does everything). Small plain PUBs
# delivered in C: with subjects changing every message this Python work was most of a
# message's cost (README, "Compiled or pure Python").
_route_pubs = compiled("route_pubs", module="natserver.server._croute")
DELIVERY_IMPLEMENTATION = "python" if _route_pubs is None else "compiled"  # the startup log says

# CONNECT fields nats-server decodes into typed Go fields: a JSON value of another type makes
# json.Unmarshal fail, which closes the connection silently. Go matches keys case-insensitively.
_BOOL_FIELDS = ("verbose", "pedantic", "tls_required", "echo", "headers", "no_responders")
_INT_FIELDS = ("protocol",)
_STR_FIELDS = ("name", "lang", "version", "user", "pass", "auth_token", "jwt", "sig", "nkey")


class Subscription:
    """A client's interest in a subject. ``sid_part`` is ``b"<sid> "``, pre-encoded once
    because it goes into every MSG line this subscription receives."""

    __slots__ = ("client", "subject", "queue", "sid", "sid_part", "max_msgs", "delivered", "limited", "callback",
                 "callback_run", "took")

    def __init__(self, client: Client, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_part = sid + b" "
        self.max_msgs = 0  # 0: no auto-unsubscribe
        self.delivered = 0
        # True when delivery needs the careful path (auto-unsubscribe, permission filter), so
        # the hot loop tests one attribute for both.
        self.limited = client.deliver_filter is not None
        # Internal subscriptions (server.subscribe_internal) get messages through this.
        self.callback = None
        # Optional, set by the callback's owner: ``callback_run(pubs, size)`` takes a run of
        # messages without headers, ``pubs`` a list of ``(subject, reply, payload)`` in order,
        # ``size`` their subjects' and payloads' bytes, each handled as ``callback`` would
        # handle it alone and all taken (a stream's publishes: Client._callback_pubs).
        self.callback_run = None
        # A callback subscription: whether its callback took the last message it was given (a
        # service import whose exporting account had nobody to take it says no).
        self.took = True

    def __repr__(self) -> str:
        return f"<Subscription cid={self.client.cid} sid={self.sid!r} subject={self.subject!r}>"


# Go's encoding/json matches keys with Unicode simple case folding: these two fold onto ASCII.
_GO_FOLDS = str.maketrans({"\u017f": "s", "\u212a": "k"})  # long s, Kelvin sign


# Each typed field's type, for the check of the fields a CONNECT sent (a few of the 16).
_CONNECT_FIELD_TYPES = {**dict.fromkeys(_BOOL_FIELDS, bool), **dict.fromkeys(_INT_FIELDS, int),
                        **dict.fromkeys(_STR_FIELDS, str)}


def _check_connect_types(options: dict) -> dict:
    """Fold the keys as Go's json does and enforce the types nats-server's decoder enforces."""
    opts = {}
    odd = False
    types = _CONNECT_FIELD_TYPES
    for key, value in options.items():
        key = key.lower() if key.isascii() else key.translate(_GO_FOLDS).lower()
        opts[key] = value
        # A look-up per field sent rather than one per typed field (16); a value not of its
        # field's exact type sends the folded fields to the ordered checks, which say which
        # field they find first (or accept them: an int subclass, which JSON never gives).
        if value is not None and value.__class__ is not types.get(key, value.__class__):
            odd = True
    if odd:
        _check_connect_field_types(opts)
    return opts


def _check_connect_field_types(opts: dict) -> None:
    for key in _BOOL_FIELDS:
        value = opts.get(key)
        if value is not None and not isinstance(value, bool):
            raise ProtocolError(errors.SILENT_CLOSE, f"CONNECT {key} is not a boolean")
    for key in _INT_FIELDS:
        value = opts.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ProtocolError(errors.SILENT_CLOSE, f"CONNECT {key} is not an integer")
    for key in _STR_FIELDS:
        value = opts.get(key)
        if value is not None and not isinstance(value, str):
            raise ProtocolError(errors.SILENT_CLOSE, f"CONNECT {key} is not a string")



async def _linger(sock: socket.socket, seconds: float) -> None:
    """Half-close ``sock`` and read (dropping it) until the peer closes or ``seconds`` pass."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return
    with trio.move_on_after(seconds):
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                if not sock.recv(65536):
                    return
            except BlockingIOError:
                continue
            except OSError:
                return

class Client:
    """Server-side state of one client connection."""

    # The attributes __init__ sets, as slots (issue #33, scenario h): an instance dict of 67
    # keys, beyond the 30 a class's instances share, made Client() cost 20.7 us where it now
    # costs 12.2 (timeit, loaded machine), and 1.6 KiB a connection where the slots take 0.6.
    # "__dict__" keeps room for what other modules attach to a client (JWT expiry, heartbeats,
    # a per-instance hook in tests), and "__weakref__" for weak references.
    __slots__ = (
        "server", "closed", "forwards", "forwards_to_routes", "_sock", "_stream", "_fd", "cid", "ip", "port",
        "parser", "verbose", "pedantic", "echo", "headers", "no_responders", "protocol", "connect_received",
        "_first_pong_sent", "name", "lang", "version", "user", "connect_opts", "account", "nonce", "nkey",
        "tls_stream", "max_subs", "_nursery", "perms", "_publish_allowed", "deliver_filter", "sublist", "subs",
        "out", "pending", "max_pending", "_stall_at", "_drained", "stalled_on", "_writer_lot", "_writer_started",
        "announced", "_sending", "_read_small", "close_reason", "_flush_before_close", "_scope", "in_msgs",
        "in_bytes", "out_msgs", "out_bytes", "start", "stop", "last_activity", "_seen_out_msgs", "_active_at", "_ping_sent_at",
        "pings_out", "rtt", "_rtt_start", "ping_due", "auth_due", "_first_ping", "trace_payload_due",
        "read_gate", "write_gate", "__dict__", "__weakref__",
    )

    # The connection (see the stream property): the accepted stdlib socket until a trio stream
    # is needed, the trio stream, and the descriptor flush writes to in place (-1: none).
    _sock: socket.socket | None
    _stream: trio.abc.Stream | None
    _fd: int
    # Why authentication refused the client, when it is not a wrong credential (auth/users.py
    # authenticate_connect sets it, Server.authenticate to a full account's error).
    _auth_error: errors.ServerError | None
    # Seconds close_transport half-closes and reads before it closes (0: it closes at once,
    # as nats-server does). The test double's close faults set it (testing.py).
    linger_on_close: float = 0.0

    def __init__(self, server: Server, stream: trio.abc.Stream | socket.socket | None, cid: int, ip: str,
                 port: int) -> None:
        options = server.options
        self.server = server
        self.closed = False
        # False for the clients through which messages from peer servers are delivered: what
        # they publish is never forwarded to peers again (see Server.set_forwarder).
        self.forwards = True
        # False while an account's internal client republishes what a stream import brought
        # (routing.accounts): leaf nodes get it, routes do not (their servers import it too).
        self.forwards_to_routes = True
        self.stream = stream
        self.cid = cid
        self.ip = ip
        self.port = port
        self.parser = Parser(
            max_control_line=options.max_control_line,
            max_payload=options.max_payload,
            headers=False,  # until CONNECT says the client supports them
            auth_pending=server.auth_required,
        )
        self.parser.coalesce = True  # PubRun ops: see _route_run
        # nats-server's defaultOpts: verbose, pedantic and echo are on until CONNECT says
        # otherwise, which is why a telnet user gets +OK.
        self.verbose = True
        self.pedantic = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.protocol = 0
        self.connect_received = False
        self._first_pong_sent = False  # client.go's firstPongSent flag
        self.name = ""
        self.lang = ""
        self.version = ""
        self.user = ""
        self.connect_opts: dict | None = None
        # Security (auth/users.py, routing/accounts.py, auth/tls.py): the account this client is in, the INFO
        # nonce it must sign (nkeys/JWT), its nkey, its TLS stream, and limits its account or
        # user JWT set (None: the server's).
        self.account = None
        self.nonce = b""
        self.nkey = ""
        self.tls_stream: trio.SSLStream | None = None
        self.max_subs: int | None = None
        self._nursery: trio.Nursery | None = None
        # Permissions of the authenticated user (None: everything allowed), the cache of its
        # publish decisions, and the delivery filter set once a wildcard subscription overlaps
        # a subscribe deny entry (nats-server's mperms).
        self.perms = None
        self._publish_allowed: dict = {}
        self.deliver_filter = None
        # The subject space this client publishes and subscribes in: its account's (the
        # server's global one until accounts assign another at authentication).
        self.sublist = server.sublist
        self.subs: dict[bytes, Subscription] = {}
        # Outbound: pieces waiting for the writer, and their byte count plus whatever the
        # writer is sending right now (nats-server's pb), bounded by max_pending.
        self.out: list = []
        self.pending = 0
        self.max_pending = options.max_pending
        self._stall_at = int(options.max_pending * STALL_FRACTION)
        self._drained: trio.Event | None = None  # set by the writer when below _stall_at
        self.stalled_on: Client | None = None  # a subscriber this producer must wait for
        # The writer's, made with it (wake_writer): most connections never start one, and a
        # ParkingLot (with its OrderedDict) cost 1 us and two collected objects a connect.
        self._writer_lot: trio.lowlevel.ParkingLot | None = None
        self._writer_started = False  # the writer task starts on first need (wake_writer)
        self.announced = False  # connection_observers were told of this client's CONNECT
        # Whether the writer task has a send under way (then it goes first, see flush).
        self._sending = False
        self._read_small = True  # the last read was small: wait for the socket before the next
        self.close_reason = ""
        self._flush_before_close = False
        self._scope: trio.CancelScope | None = None
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.start = clock.now()
        self.stop: float | None = None
        self.last_activity = self.start  # wall clock, for monitoring
        self._seen_out_msgs = 0  # out_msgs when a flush last found messages delivered (Server.flush_touched)
        # The keepalive timer's view of the client, on trio's clock (so MockClock tests work):
        # when it last sent a message, a SUB or UNSUB, or a PING (client.go lastIn: bytes of
        # anything else, PONGs included, are not activity), and when the server last sent it a
        # PING (client.go rttStart; -inf like Go's zero time, "never").
        self._active_at = float("-inf")
        self._ping_sent_at = float("-inf")
        self.pings_out = 0
        self.rtt: float | None = None
        self._rtt_start = 0.0  # when the PING we time the round trip of was sent (monotonic)
        # Ping timer (natserver.server.keepalive): when it fires next, on trio's clock (None: not
        # armed), and whether that is still the timer armed at accept, which CONNECT brings
        # forward (server.go firstClientPingInterval).
        self.ping_due: float | None = None
        self.auth_due: float | None = None  # the auth timer (keepalive.PingTimers.arm_auth)
        self._first_ping = False
        # Protocol tracing (server/trace.py): a payload whose trace line waits for an -ERR.
        self.trace_payload_due = None
        # Fault injection (natserver.testing): while set, the reader or writer waits here.
        self.read_gate: trio.Event | None = None
        self.write_gate: trio.Event | None = None

    @classmethod
    def internal(cls, server: Server, sublist) -> Client:
        """A connection-less client of the server's own (cid 0): it publishes what the server
        sends and owns callback subscriptions, in ``sublist``'s subject space."""
        client = cls(server, None, 0, "", 0)
        client.headers = True
        client.verbose = client.pedantic = False
        client.sublist = sublist
        return client

    def subscribe_callback(self, subject: bytes, callback, sid: bytes, queue: bytes | None = None) -> Subscription:
        """A subscription whose messages go to ``callback(subject, reply, headers, payload)``
        instead of a socket (see Server.subscribe_internal)."""
        sub = Subscription(self, subject, queue, sid)
        sub.callback = callback
        sub.limited = True  # delivery takes the careful path, which calls the callback
        self.subs[sid] = sub
        self.sublist.insert(sub)
        return sub

    @property
    def stream(self) -> trio.abc.Stream:
        """The connection as a trio stream. A plain TCP client arrives as a stdlib socket
        (Server.accept_loop) and is read and written through its descriptor; the trio
        SocketStream is built only when something needs one (the writer task, TLS): most
        connections never do, and building it cost 5 us of a connect's 140."""
        stream = self._stream
        if stream is None:
            sock = self._sock
            assert sock is not None, "an internal client has no connection"
            stream = self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        return stream

    @stream.setter
    def stream(self, stream: trio.abc.Stream | socket.socket | None) -> None:
        # Writes in place (flush) go to the socket's descriptor, so only a plain TCP stream has
        # one: a TLS stream (even one started over this socket) must write through trio.
        self._sock = None
        if isinstance(stream, socket.socket):
            self._sock, self._stream = stream, None
            self._fd = -1 if self.closed else stream.fileno()
            return
        self._stream = stream
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) and not self.closed else -1

    def _close_socket_now(self) -> bool:
        """close_transport's common case, which has nothing to wait for: a plain socket closed
        at once. False when close_transport must run (a stream, TLS, a linger): then the
        caller shields it, a cancel scope that the common case spares a connection."""
        sock = self._sock
        if self._stream is not None or sock is None or self.linger_on_close > 0:
            return False
        if sock.fileno() >= 0:
            trio.lowlevel.notify_closing(sock)  # (nobody waits on it: the reader has left)
            sock.close()
        return True

    async def close_transport(self) -> None:
        """Close the connection's socket (or stream) at once, without a goodbye; or, when
        ``linger_on_close`` is set, with one: the peer gets EOF and what it still sends is
        read and dropped for that long, so that it does not meet a reset instead (a socket
        closed with unread data, or data arriving after, answers with RST)."""
        if self._close_socket_now():
            return
        sock = self._sock
        if self._stream is None and sock is not None:
            if sock.fileno() >= 0:
                await _linger(sock, self.linger_on_close)  # (linger_on_close > 0 here)
                trio.lowlevel.notify_closing(sock)
                sock.close()
            return
        if self.tls_stream is not None:
            await _close_tls(self.tls_stream)
        await trio.aclose_forcefully(self.stream)

    # -- life cycle ---------------------------------------------------------------------------

    async def run(self, info: bytes) -> None:
        """Serve the connection until it closes. Never raises (but trio.Cancelled)."""
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                if self.closed:  # closed before it started (e.g. server shutting down)
                    nursery.cancel_scope.cancel()
                if info:  # (with TLS the INFO went out in plain text before the handshake)
                    self.queue(info)
                hook = self.server.connection_hook
                if hook is not None and hook(self, "info"):
                    self.close("Client Closed", flush=True)
                # No writer task yet: flush() writes in place and starts one only when the
                # socket does not take everything (or for TLS). Spawning and parking a writer
                # for every connection cost 30 of its 128 us of CPU in a connect storm.
                self.flush()
                self._first_ping = True
                self.server.ping_timers.arm(self, self.server.options.ping_interval)
                if self.server.auth_required:
                    self.server.ping_timers.arm_auth(self, self.server.options.auth_timeout)
                await self._read_loop()
        except Exception:
            log.exception("cid:%d - internal error; closing this client", self.cid)
            self.close("Internal Server Error", flush=False)
        finally:
            self.close("Client Closed", flush=False)
            if not self._close_socket_now():
                with trio.CancelScope(shield=True):
                    await self.close_transport()

    def close(self, reason: str, flush: bool = False) -> None:
        """Close the connection; with ``flush`` the writer sends what is queued first."""
        if self.closed:
            return
        if flush and self.out and self._fd >= 0:
            # The goodbye (a closing -ERR) written in place when the socket takes it, as any
            # flush: no writer task, trio stream and forced close for a connection that ends
            # on a protocol error (a fuzzing client's storm: ~15 % of the server's CPU).
            self.flush()
        self.closed = True
        self._fd = -1  # never write in place to a closed connection's (reusable) descriptor
        self.close_reason = reason
        self.stop = clock.now()
        self.server.client_closed(self)
        tracing = self.server.options.trace and self.cid
        for sub in self.subs.values():
            self.sublist.remove(sub)
            if tracing:
                trace.trace_delsub(self, sub.sid)
        if flush and self._scope is not None and (self.out or self._sending):
            # The writer drains what is queued (bounded by write_deadline), then cancels us.
            self._flush_before_close = True
            self.wake_writer()
        else:
            self.out = []
            if self._scope is not None:
                self._scope.cancel()

    def protocol_error(self, error: ServerError) -> None:
        if error.wire:
            self.queue(error.wire)
        if error.closes:
            self.close(error.close_reason, flush=True)

    # -- reading ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        # A plain TCP socket is read here, through its descriptor, with less overhead per read
        # than trio's receive_some (the per-hop cost of a request/reply): park in wait_readable
        # when it is empty, and yield once when data was there at once, so that a client that
        # keeps the socket full cannot starve the others (PING/PONG round trip, p50, Python
        # client: 83 -> 75 us). After a small read the socket is almost always empty, so the
        # next read waits first instead of failing with EAGAIN (a system call and an exception
        # saved on every hop of a request/reply). Inline, not a coroutine of its own: a call and
        # a coroutine level less each hop. Other transports (TLS, WebSocket) use receive_some;
        # trio types it as giving bytes | bytearray, every transport here gives bytes, which
        # the parser keeps by reference.
        receive_some: Callable[[int], Awaitable[bytes]] | None = (
            None if self._fd >= 0 else self.stream.receive_some)  # type: ignore[assignment]
        wait_readable = trio.lowlevel.wait_readable
        server = self.server
        feed = self.parser.feed
        # The run's clock itself: trio.current_time() reaches it through three more calls
        # (0.5 us a chunk). Under a MockClock in tests this is the MockClock.
        clock_now = trio.lowlevel.current_clock().current_time
        read_size = READ_SIZE
        while not self.closed:
            if self.read_gate is not None:
                await self.read_gate.wait()
            try:
                if receive_some is None:
                    wait = self._read_small
                    while True:
                        if wait:
                            if self._fd < 0:
                                data = b""
                                break
                            await wait_readable(self._fd)
                        fd = self._fd
                        if fd < 0:
                            data = b""
                            break
                        try:
                            data = os.read(fd, read_size)
                        except BlockingIOError:
                            wait = True
                            continue
                        self._read_small = len(data) < SMALL_READ
                        if not wait:
                            await trio.lowlevel.checkpoint()
                        break
                else:
                    data = await receive_some(read_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            read_size = GROWN_READ_SIZE if len(data) >= READ_SIZE else READ_SIZE
            if not data:
                # nats-server still sends what it owes (MSGs, PONGs) to a half-closed client.
                self.close("Client Closed", flush=True)
                return
            if self.read_gate is not None:
                # Paused while this chunk was on its way (natserver.testing.stop_reading): hold it.
                await self.read_gate.wait()
            read_at = clock.now()  # (monitoring's last_activity, if the read carries messages)
            in_msgs = self.in_msgs
            feed(data)
            while True:
                try:
                    # Tracing is chosen per chunk, so with it off the message path is untouched.
                    if server.options.trace:
                        traced = _TracedOps(self)
                        try:
                            self._process_ops(traced.parse)
                        finally:
                            traced.finish()
                    else:
                        self._process_ops()
                except ProtocolError as exc:
                    if exc.error is errors.AUTH_VIOLATION and self._use_no_auth_user():
                        continue  # parse the same bytes again, as the no_auth_user
                    if exc.error.text is None:
                        log.debug("cid:%d - closing: %s", self.cid, exc)
                    if exc.error is errors.UNKNOWN_OP:
                        # nats-server's "Client parser ERROR" line (and traces), see trace.py.
                        buf, pos = self.parser.failed_at()
                        stop = trace.parser_stop(self, buf, pos)
                        self.queue(exc.error.wire)  # -ERR, the ERR line, then the close
                        trace.log_parser_error(self, buf, stop, max(len(buf) - len(data), 0))
                        self.close(exc.error.close_reason, flush=True)
                    else:
                        self.protocol_error(exc.error)
                server.flush_touched()
                stalled_on = self.stalled_on
                if stalled_on is None or self.closed:
                    break
                # A subscriber we deliver to is more than half full: wait for its writer to
                # drain it before handling the rest of the chunk (nats-server's stall gate).
                self.stalled_on = None
                await stalled_on.wait_drained()
            if self.in_msgs != in_msgs:  # messages are activity (client.go readLoop's last, lastIn)
                self._active_at = clock_now()
                self.last_activity = read_at

    def _process_ops(self, parse=None) -> None:
        """Handle every complete op that has been fed. Synchronous: one chunk, no checkpoint.
        ``parse``: where the ops come from (default: the parser; tracing: _TracedOps)."""
        # Subject mappings are applied here, or by the tracer (which traces the mapping).
        traced = parse is not None
        if parse is None:
            parse = self.parser.parse
        sublist = self.sublist
        mappings = None if traced else sublist.mappings
        if not traced:
            # Mapped PUBs are handled one by one: runs would only be parsed to be taken apart.
            self.parser.coalesce = mappings is None
        cache = sublist.cache
        match = sublist.match_uncached  # lookups and misses are counted here, in bulk
        n_msgs = 0
        n_bytes = 0
        n_hits = 0
        n_misses = 0
        skip = backoff = 0  # the compiled loop's back-off after calls that took nothing
        try:
            while not self.closed:
                ops = parse()
                if not ops:
                    return
                # Read once per batch, not per message: verbose and pedantic change only at a
                # CONNECT, which ends a batch; permissions and the hook change between chunks.
                checked = self.pedantic or self.verbose or self.perms is not None or mappings is not None
                hooked = self.server.publish_slow  # a publish hook or a cluster forwarder
                # The compiled loop takes what it can of ops[i:] (every Pub it is sure of), the
                # loop below the op it stopped at; it is off where each PUB has a rule to apply.
                fast = None if (traced or checked or hooked or cache is None) else _route_pubs
                i = 0
                n_ops = len(ops)
                while i < n_ops:
                    if skip:
                        skip -= 1
                    elif fast is not None:
                        i, taken, taken_bytes, deliveries, delivered_bytes, misses, stop_missed = fast(
                            ops, i, cache, match, self, self.echo, self.server.touched, Pub, BIG_PAYLOAD
                        )
                        # It matched the op it stopped at (a miss, now cached): the lookup below
                        # finds it and counts a hit, which was a miss.
                        n_misses += stop_missed
                        n_hits -= stop_missed
                        if not taken:
                            # It took nothing (queue groups, headers, most often): after each such
                            # call in a row, leave twice as many ops (up to 32) to Python before
                            # the next one, so traffic it never takes pays little for the call.
                            skip = backoff
                            backoff = min(backoff * 2, 32) or 1
                        else:
                            backoff = 0
                            n_msgs += taken
                            n_bytes += taken_bytes
                            n_hits += taken - misses
                            n_misses += misses
                            server = self.server
                            server.out_msgs += deliveries
                            server.out_bytes += delivered_bytes
                            if self.stalled_on is not None:
                                self.parser.unread(ops[i:])
                                return
                            if self.closed:
                                return
                        if i >= n_ops:
                            break
                    op = ops[i]
                    i += 1
                    if op.__class__ is Pub:
                        subject, reply, header_size, sizes, payload = op
                        n_msgs += 1
                        n_bytes += len(payload)
                        # Message tracing (msgtrace.py): only messages with headers are looked at.
                        if header_size > 0 and msgtrace.wanted(self, payload, header_size) and msgtrace.process(
                            self, subject, reply, header_size, payload, mappings
                        ):
                            if self.stalled_on is not None:
                                self.parser.unread(ops[i:])
                                return
                            continue
                        if checked:
                            if self.pedantic and not is_valid_literal_subject(subject):
                                self.queue(errors.INVALID_PUBLISH_SUBJECT.wire)
                            if mappings is not None:
                                # nats-server maps after the pedantic check, before permissions.
                                mapped = mappings.select(subject)
                                if mapped is not None:
                                    subject = mapped  # b"" when the weights chose to drop it
                            if self.perms is not None and not self.perms.can_publish(subject, self._publish_allowed):
                                self.queue(errors.permissions_violation("Publish", subject).wire)
                                continue
                            if self.verbose:
                                self.queue(OK)
                        # The cache lookup inlined: a method call costs a tenth of a message.
                        result = cache.get(subject) if cache is not None else None
                        if result is None:
                            result = match(subject)
                            n_misses += 1
                        else:
                            n_hits += 1
                        psubs = result.psubs
                        if hooked:
                            self.publish(subject, reply, header_size, sizes, payload)
                        elif len(psubs) == 1 and psubs[0].callback is not None and not result.qsubs:
                            # One server callback (a stream's subject, the JetStream API): what
                            # _route would do for it alone, without its plan and MSG bytes.
                            sub = psubs[0]
                            self._may_deliver(sub, subject, reply, header_size, payload)
                            if not sub.took and reply is not None and self.no_responders:
                                self._no_responders(subject, reply, result)
                            if i < n_ops and ops[i].__class__ is Pub and ops[i][2] <= 0 and cache is not None \
                                    and self.stalled_on is None \
                                    and not (self.verbose or self.perms is not None or mappings is not None):
                                # The Pubs after it for the same callback, in one loop of their own.
                                i, taken, taken_bytes, misses, stop_missed = self._callback_pubs(
                                    ops, i, sub, cache, match)
                                n_msgs += taken
                                n_bytes += taken_bytes
                                # (the op it stopped at was a miss, now cached: the loop's lookup
                                # finds it and counts a hit, which was a miss)
                                n_hits += taken - misses - stop_missed
                                n_misses += misses + stop_missed
                        elif (psubs or result.qsubs) and self._route(
                            result, subject, reply, header_size, sizes, payload
                        ):
                            pass
                        elif reply is not None and self.no_responders:
                            self._no_responders(subject, reply, result)
                        if self.stalled_on is not None:
                            self.parser.unread(ops[i:])
                            return
                    elif op.__class__ is PubRun:
                        if not self._route_run(op):
                            # A per-message rule applies: handle the run as single Pubs, next
                            # in this batch (given back to the parser, the rest of a read's ops
                            # went through its deque each time: a queue group refuses every run
                            # of mixed sizes; callgrind, scenario o: 2 % of a message).
                            ops[i:i] = self.parser.expand(op.data)
                            n_ops = len(ops)
                            continue
                        n_msgs += op.count
                        n_bytes += op.size
                        if self.stalled_on is not None:
                            self.parser.unread(ops[i:])
                            return
                    elif op.__class__ is Sub:
                        self._process_sub(op)
                        self._active_at = trio.current_time()
                        self.last_activity = clock.now()  # (interest changes are activity)
                    elif op.__class__ is Unsub:
                        self._process_unsub(op)
                        self._active_at = trio.current_time()
                        self.last_activity = clock.now()
                    elif op.__class__ is Ping:
                        self._active_at = trio.current_time()
                        if self.server.connection_hook is not None and self.server.connection_hook(self, "ping"):
                            self.close("Client Closed", flush=True)
                            return
                        self.queue(PONG_PROTO)
                        if not self._first_pong_sent and self.connect_received:
                            # client.go processPing: the first PONG after CONNECT is followed,
                            # for clients that take async INFO, by the server's INFO again.
                            self._first_pong_sent = True
                            if self.protocol >= 1:
                                self.queue(self.server.info_for(self, connect_info=True))
                    elif op.__class__ is PingRun:  # a PING flood: its PONGs in one piece
                        if self.server.connection_hook is not None:
                            # One by one: fault injection sees every PING.
                            self.parser.unread([PING] * op.count + ops[i:])
                            break
                        if not self._first_pong_sent and self.connect_received:
                            # The first PING alone: its PONG may bring an INFO (see above).
                            rest = PING if op.count == 2 else PingRun(op.count - 1)
                            self.parser.unread([PING, rest, *ops[i:]])
                            break
                        self._active_at = trio.current_time()
                        self.queue(PONG_PROTO * op.count)
                    elif op.__class__ is Pong:
                        self.pings_out = 0
                        if self._rtt_start:
                            self.rtt = time.monotonic() - self._rtt_start
                            self._rtt_start = 0.0
                    elif op.__class__ is Connect:
                        self._process_connect(op.options)
                        # Authentication may have moved the client into another account.
                        sublist.matches += n_hits + n_misses
                        sublist.misses += n_misses
                        n_hits = n_misses = 0
                        sublist = self.sublist
                        cache = sublist.cache
                        match = sublist.match_uncached
                        mappings = None if traced else sublist.mappings
                        if not traced:
                            self.parser.coalesce = mappings is None
                    if self.closed:
                        return
        finally:
            self.in_msgs += n_msgs
            self.in_bytes += n_bytes
            server = self.server
            server.in_msgs += n_msgs
            server.in_bytes += n_bytes
            if server.poller_parked and n_msgs:
                server.wake_poller()
            sublist.matches += n_hits + n_misses
            sublist.misses += n_misses

    # -- delivery -----------------------------------------------------------------------------

    def publish(self, subject: bytes, reply: bytes | None, header_size: int, sizes: bytes, payload) -> bool:
        """Route one message published by this client, through the publish hook if any.
        Says whether anybody took it (a subscriber, a server callback, a route)."""
        server = self.server
        result = self.sublist.match(subject)
        hook = server.publish_hook
        if hook is not None:
            action = hook(self, subject, reply, header_size, payload)
            if action == DROP:
                return True
            if action == NO_RESPONDERS:
                result = EMPTY_RESULT
        delivered = (result.psubs or result.qsubs) and self._route(result, subject, reply, header_size, sizes, payload)
        forwarder = server._forwarder
        if forwarder is not None and self.forwards:
            if forwarder.forward(self, result, subject, reply, header_size, payload):
                delivered = True
        if delivered or _callback_took(result):
            return True
        if reply is not None and self.no_responders:
            self._no_responders(subject, reply, result)
        return False

    def deliver_routed(self, subject: bytes, reply: bytes | None, header_size: int, sizes: bytes, payload,
                       queues: tuple = ()) -> int:
        """Deliver a message that came from a peer server (a route) to this server's own
        subscribers only, never forwarding it again (a message crosses at most one route).
        Of the queue groups, only those named in ``queues`` get it (the sender chose this
        server for them); each picks one member, from a random start."""
        result = self.sublist.match(subject)
        if result.qsubs:
            groups = [group for group in result.qsubs if group[0].queue in queues] if queues else []
            filtered = SublistResult(result.psubs, groups)
            filtered.plan = result.plan
            filtered.queue_state = [queue_seed() for _ in groups]
            result = filtered
        if not result.psubs and not result.qsubs:
            return 0
        return self._route(result, subject, reply, header_size, sizes, payload)

    def _route(self, result, subject: bytes, reply: bytes | None, header_size: int, sizes: bytes, payload) -> int:
        """Queue one message to every plain match and one member of each queue group;
        returns how many subscriptions got it. The per-message hot loop.

        Each cached result keeps the ``MSG <subject> <sid> `` head of every plain subscription
        (its ``plan``, built once per subject) and each message builds its tail
        (``[reply ]size CRLF payload CRLF``) once, so a delivery is one concatenation
        (callgrind, 1->1 16 B: 23.9k -> 22.5k instructions a message). An HMSG head is the MSG
        head with an ``H`` in front; subscribers without header support get the MSG without
        the headers; big payloads are queued by reference, never copied per subscriber.
        """
        plan = result.plan
        if plan is None:
            psubs = result.psubs
            if len(psubs) == 1 and not result.qsubs and psubs[0].callback is not None:
                # One server callback on a subject not seen before (a JetStream ack: each one's
                # subject is new): what the loops below do with it, without a plan to build.
                sub = psubs[0]
                if self.echo or sub.client is not self:
                    self._may_deliver(sub, subject, reply, header_size, payload)  # (False: no MSG)
                return 0
            plan = _make_plan(result, subject)
        targets = plan
        if result.qsubs:
            targets = [*plan, *self._queue_targets(result, subject)]
        size = len(payload)
        big = size >= BIG_PAYLOAD
        simple = header_size <= 0 and not big
        touched = self.server.touched
        echo = self.echo
        delivered = 0
        if simple:
            # The common case, a small message without headers, in a loop of its own: no
            # per-delivery branch on the message's kind, no byte count but one per message
            # (callgrind, 1 -> 4 wildcards, 64 subjects, 32-256 B: see benchmarks/README.md).
            if reply is None:
                tail = b"".join((sizes, CRLF, payload, CRLF))  # one allocation, not three
            else:
                tail = b"".join((reply, SP, sizes, CRLF, payload, CRLF))
            for sub, client, head in targets:
                if sub.limited or (not echo and client is self):
                    # auto-unsubscribe, a permission filter, a callback, no echo: careful path
                    if (not echo and client is self) or not self._may_deliver(sub, subject, reply, header_size, payload):
                        continue
                else:
                    # nats-server counts every delivery (sub.nm), so a later UNSUB max sees them.
                    sub.delivered += 1
                data = head + tail
                out = client.out
                if not out:  # a non-empty list is already due to be flushed
                    touched.add(client)
                out.append(data)
                pending = client.pending + len(data)
                client.pending = pending
                client.out_msgs += 1
                client.out_bytes += size
                delivered += 1
                if pending > client._stall_at:
                    self._over_stall_mark(client)
            if delivered:
                server = self.server
                server.out_msgs += delivered
                server.out_bytes += size * delivered
            return delivered
        reply_part = b"" if reply is None else reply + SP
        if header_size > 0:  # HMSG line tail for header-aware clients, MSG for others
            body = payload[header_size:]
            line_tail = reply_part + sizes + CRLF
            plain_line_tail = reply_part + str(size - header_size).encode() + CRLF
        else:
            line_tail = reply_part + sizes + CRLF
        out_bytes = 0
        for sub, client, head in targets:
            if client is self and not echo:
                continue
            if sub.limited:  # auto-unsubscribe, a permission filter, a callback: careful path
                if not self._may_deliver(sub, subject, reply, header_size, payload):
                    continue
            else:
                # nats-server counts every delivery (sub.nm), so a later UNSUB max sees them.
                sub.delivered += 1
            out = client.out
            if not out:  # a non-empty list is already due to be flushed
                touched.add(client)
            if header_size <= 0:
                line, data, body_len = head + line_tail, payload, size
            elif client.headers:
                line, data, body_len = b"H" + head + line_tail, payload, size
            else:
                line, data, body_len = head + plain_line_tail, body, size - header_size
            if big:
                out.extend((line, data, CRLF))
            else:
                out.append(b"".join((line, data, CRLF)))
            pending = client.pending + len(line) + body_len + 2
            client.pending = pending
            client.out_msgs += 1
            client.out_bytes += body_len
            out_bytes += body_len
            delivered += 1
            if pending > client._stall_at:
                self._over_stall_mark(client)
        if delivered:
            server = self.server
            server.out_msgs += delivered
            server.out_bytes += out_bytes
        return delivered

    def _route_run(self, run: PubRun) -> bool:
        """Deliver a PubRun whole (see PubRun): one ``bytes.replace`` per plain subscriber
        turns its PUBs into MSGs; a queue group's members get the run dealt round robin from a
        random member, each share joined in one call. Returns False, having changed nothing, when a per-message rule
        applies (hooks, auto-unsubscribe or filters, verbose, pedantic errors, permission
        checks, no subscribers); the caller then handles the run's Pubs one by one.

        Measured with callgrind on 1->1 16 B messages: 22.4k -> 9.0k instructions a message.
        """
        subject, count, size, uniform, replies, data, pattern = run
        server = self.server
        if self.verbose or server.publish_slow or self.perms is not None or self.sublist.mappings is not None:
            return False
        if self.pedantic and not is_valid_literal_subject(subject):
            return False
        sublist = self.sublist
        result = sublist.cache.get(subject) if sublist.cache is not None else None
        if result is None:
            result = sublist.match(subject)
        else:
            sublist.matches += 1
        if not result.psubs and not result.qsubs:
            # Nobody listens: nothing to do, unless requests need no-responders replies.
            return not (replies and self.no_responders)
        if result.qsubs and not uniform:
            return False  # a member's share would not have a known byte count
        plan = result.plan
        if plan is None:
            plan = _make_plan(result, subject)
        echo = self.echo
        # Everything that could refuse the run is checked before anything is delivered.
        # A run whose MSG bytes could take a subscriber past its stall mark goes message by
        # message, so that the stall gate (or the slow-consumer cut) comes at the message it
        # would come at there: a read of up to GROWN_READ_SIZE would otherwise land in one
        # piece (a reading subscriber with max_pending 256 KiB was cut off as slow).
        receivers = []
        for sub, client, head in plan:
            if sub.limited:
                return False
            if client is not self or echo:
                if client.pending + len(data) + count * len(head) > client._stall_at:
                    return False
                receivers.append(client)
        groups = []
        for group in result.qsubs:
            members = [m for m in group if m.client is not self or echo]
            for member in members:
                if member.limited:
                    return False
                client = member.client
                if client.pending + len(data) + count * (len(subject) + len(member.sid_part) + 5) > client._stall_at:
                    return False
                receivers.append(client)
            groups.append(members)
        if len(set(receivers)) < len(receivers):
            # A client with two matching subscriptions gets each message on both before the
            # next message (nats-server's order); one block per subscription would reorder.
            return False
        shares: list = []  # (sub, client, MSG bytes, messages)
        # One size and no replies: every message has one length, so the compiled restride
        # rewrites them by stride, exactly, without replace's search (see _cscan.c).
        by_stride = restride is not None and uniform and not replies
        # A long run is a view of the read (see PubRun): restride takes it as it is, replace and
        # split want bytes (bytes() of a bytes object is that object).
        whole = bytes(data) if groups or not by_stride else b""
        for sub, client, head in plan:
            if client is not self or echo:
                if by_stride:
                    shares.append((sub, client, restride(data, count, len(pattern), head), count))
                    continue
                out = whole.replace(pattern, head)
                # The rewrite is exact only if the prefix occurs once per message, not also
                # inside a payload: the first replace's length tells (or, when the head is no
                # longer than the prefix, a count).
                if not shares and (
                    len(out) - len(whole) != count * (len(head) - len(pattern))
                    if len(head) != len(pattern)
                    else whole.count(pattern) != count
                ):
                    return False
                shares.append((sub, client, out, count))
        if groups:
            pieces = whole.split(pattern)[1:]  # each message after its prefix
            if len(pieces) != count:
                return False  # the prefix is inside a payload too
            for index, members in enumerate(groups):
                if not members:
                    continue
                k = len(members)
                # A run is dealt round robin from a random member (one draw a run, not a message).
                result.queue_state[index], first = queue_pick(result.queue_state[index], k)
                for j, member in enumerate(members):
                    share = pieces[(j - first) % k :: k]
                    if share:
                        head = MSG_ + subject + SP + member.sid_part
                        shares.append((member, member.client, head + head.join(share), len(share)))
        if not shares:
            # Only the publisher itself matched, with echo off: nothing was changed, and any
            # requests among the messages may need their no-responders replies one by one.
            return not (replies and self.no_responders)
        touched = server.touched
        delivered = 0
        for sub, client, out, n in shares:
            sub.delivered += n
            if not client.out:
                touched.add(client)
            client.out.append(out)
            pending = client.pending + len(out)
            client.pending = pending
            client.out_msgs += n
            client.out_bytes += size * n // count
            delivered += n
            if pending > client._stall_at:
                self._over_stall_mark(client)
        server.out_msgs += delivered
        server.out_bytes += size * delivered // count
        return True

    def _over_stall_mark(self, client: Client) -> None:
        """A subscriber past half of its max_pending: cut it off once over the limit (slow
        consumer), else make this producer wait for it after the current op (stall gate)."""
        if client.pending > client.max_pending:
            client.slow_consumer()
        elif client is not self and self.stalled_on is None:
            self.stalled_on = client
            self.server.stalled_clients += 1

    def deliver_as(self, match_subject: bytes, subject: bytes, reply: bytes | None, hdr: bytes | None, data: bytes) -> int:
        """Deliver to the subscribers of ``match_subject`` a message with ``subject`` on its
        MSG line (JetStream push consumers deliver stored messages to their deliver subject
        this way): every plain subscriber and one member per queue group. Returns how many got
        it. Part of the core's interface to what is built on it."""
        result = self.sublist.match(match_subject)
        subs = list(result.psubs)
        if result.qsubs:
            subs += [entry[0] for entry in self._queue_targets(result, match_subject)]
        server = self.server
        forwarder = server._forwarder
        forwarded = 0
        if forwarder is not None and self.forwards:
            # Peers get it by the deliver subject, the stored subject after an "@" in the reply
            # (nats-server's processMsgResults), and route it as Cluster.deliver does.
            body = (hdr or b"") + data
            fwd_reply = reply + b"@" + subject if reply and subject != match_subject else reply
            if forwarder.forward(self, result, match_subject, fwd_reply, len(hdr) if hdr else -1, body):
                forwarded = 1
        if not subs:
            return forwarded
        prefix = MSG_ + subject + SP
        plan = _DeliveryPlan(tuple((sub, sub.client, prefix + sub.sid_part) for sub in subs))
        body = (hdr or b"") + data
        if hdr:
            sizes, header_size = b"%d %d" % (len(hdr), len(body)), len(hdr)
        else:
            sizes, header_size = b"%d" % len(body), -1
        # An internal subscription (a stream import) takes the message in its callback, which
        # _route does not count: it got it if the callback says it took it.
        delivering, server.delivering = server.delivering, match_subject
        try:
            routed = self._route(plan, subject, reply, header_size, sizes, body)
        finally:
            server.delivering = delivering
        return routed + sum(1 for sub in subs if sub.callback is not None and sub.took) + forwarded

    def deliver_batch(self, match_subject: bytes, msgs: list) -> bool:
        """deliver_as for a series of messages, each ``(subject, reply, hdr, data)`` (reply b""
        for none), to the subscribers of one subject (a JetStream consumer's batch, a direct
        get's answer), in one piece per subscriber: done when each message is sure to reach
        every subscriber, as deliver_as would deliver it, with the same counts: plain
        subscriptions only (no queue groups, no auto-unsubscribe, permission filter, callback
        or no-echo to apply), no peer server to forward to, and room for the whole batch below
        every subscriber's stall mark. Otherwise nothing is done and False returned: the caller
        delivers one by one (or publishes), and that delivery counts the subject's lookup (a
        miss is counted here: the subject is in the cache now). Part of the core's interface
        to what is built on it."""
        sublist = self.sublist
        result = sublist.match(match_subject)
        psubs = result.psubs
        if not psubs or result.qsubs or (self.server._forwarder is not None and self.forwards):
            sublist.matches -= 1
            return False
        # (an upper bound of what the batch adds to a subscriber's pending bytes)
        total = 0
        for subject, reply, hdr, data in msgs:
            total += len(subject) + len(reply) + len(hdr or b"") + len(data)
        n = len(msgs)
        for sub in psubs:
            client = sub.client
            if sub.limited or (client is self and not self.echo) \
                    or client.pending + total + n * (BATCH_LINE_SLACK + len(sub.sid_part)) > client._stall_at:
                sublist.matches -= 1
                return False
        touched = self.server.touched
        out_bytes = 0
        for sub in psubs:
            client = sub.client
            head = sub.sid_part
            parts: list[bytes] = []
            add = parts.append
            body_bytes = 0
            for subject, reply, hdr, data in msgs:
                if not reply:  # (b"": no reply, the sid then the sizes)
                    if hdr and client.headers:
                        hl = len(hdr)
                        add(b"%s%s %s%d %d\r\n%s%s\r\n" % (HMSG_, subject, head, hl, hl + len(data), hdr, data))
                        body_bytes += hl + len(data)
                    else:
                        add(b"%s%s %s%d\r\n%s\r\n" % (MSG_, subject, head, len(data), data))
                        body_bytes += len(data)
                    continue
                if hdr:
                    if client.headers:
                        hl = len(hdr)
                        add(b"%s%s %s%s %d %d\r\n%s%s\r\n" % (HMSG_, subject, head, reply, hl, hl + len(data), hdr, data))
                        body_bytes += hl + len(data)
                        continue
                add(b"%s%s %s%s %d\r\n%s\r\n" % (MSG_, subject, head, reply, len(data), data))
                body_bytes += len(data)
            data = b"".join(parts)
            out = client.out
            if not out:  # a non-empty list is already due to be flushed
                touched.add(client)
            out.append(data)
            sub.delivered += n
            client.pending += len(data)
            client.out_msgs += n
            client.out_bytes += body_bytes
            out_bytes += body_bytes
        server = self.server
        server.out_msgs += n * len(psubs)
        server.out_bytes += out_bytes
        return True

    def deliver_replies(self, replies: list, publish: Callable[..., object]) -> None:
        """For each ``(subject, payload, hdr, tag)`` of ``replies`` in turn (``hdr``: headers or
        None; the tag is the caller's, not looked at: a JetStream ack's stream), what
        ``Server.publish(subject, payload, flush=False, headers=hdr)`` (or an account's
        publish) does for a small message without reply (a JetStream ack, a direct get's
        answer): done here without its layers when ``subject`` has one subscriber and it is a
        plain subscription of another client (a publisher's own inbox): no queue group,
        auto-unsubscribe, permission filter or callback, no publish hook or peer server;
        anything else is given to ``publish(subject, payload, hdr)`` at its turn. One call a
        round of acks: the lookups and the server's counts are added up once, and a run of
        replies to one client (a publisher's window of acks, whatever their subjects) goes to
        its outbound list as one piece with its counts when the run ends (another client, a
        reply published, a stall mark passed, the last reply). Part of the core's interface."""
        server = self.server
        sublist = self.sublist
        misses = 0
        run: Client | None = None  # the client of the run, its MSG bytes, its payloads' bytes
        pieces: list[bytes] = []
        run_bytes = pending = 0
        try:
            for subject, payload, hdr, _ in replies:
                if server.publish_slow:  # (a publish hook or a peer server: publish's own way)
                    pieces, run_bytes = self._end_run(run, pieces, run_bytes)
                    run = None  # (the publish may add to any client's pending: read it again)
                    publish(subject, payload, hdr)
                    continue
                cache = sublist.cache
                cached = cache.get(subject) if cache is not None else None
                missed = cached is None
                # (a miss counted below: once, as publish counts it)
                result = sublist.match_uncached(subject) if cached is None else cached
                psubs = result.psubs
                size = len(payload)
                hl = len(hdr) if hdr else 0
                if len(psubs) != 1 or result.qsubs or psubs[0].limited \
                        or psubs[0].client is self or size + hl >= BIG_PAYLOAD:
                    # publish matches it again, and finds it cached now: its miss is counted here.
                    if missed and cache is not None:
                        misses += 1
                    pieces, run_bytes = self._end_run(run, pieces, run_bytes)
                    run = None
                    publish(subject, payload, hdr)
                    continue
                misses += missed
                sub = psubs[0]
                client = sub.client
                if client is not run:
                    if pieces:
                        pieces, run_bytes = self._end_run(run, pieces, run_bytes)
                    run = client
                    pending = client.pending
                plan = result.plan
                # (the MSG line's start: the result's plan's, else made here, with no plan made
                # for a result most often used once, a reply subject new each time)
                if hl and client.headers:  # (as _route: an HMSG, the sizes counting the headers)
                    size += hl
                    head = plan[0][2] if plan is not None else b"MSG %s %s" % (subject, sub.sid_part)
                    data = b"H%s%d %d\r\n%s%s\r\n" % (head, hl, size, hdr, payload)
                elif plan is not None:  # (the bytes _route's simple loop makes, and a client without headers gets)
                    data = b"%s%d\r\n%s\r\n" % (plan[0][2], size, payload)
                else:
                    data = b"MSG %s %s%d\r\n%s\r\n" % (subject, sub.sid_part, size, payload)
                sub.delivered += 1
                pieces.append(data)
                run_bytes += size
                pending += len(data)
                if pending > client._stall_at:
                    pieces, run_bytes = self._end_run(run, pieces, run_bytes)
                    self._over_stall_mark(client)
                    pending = client.pending
        finally:
            if pieces:
                self._end_run(run, pieces, run_bytes)
            sublist.misses += misses

    def _end_run(self, client: Client | None, pieces: list[bytes], size: int) -> tuple[list[bytes], int]:
        """A run of deliver_replies' MSGs for ``client`` queued in one piece, counted as that
        many messages of ``size`` payload bytes (the client's, the server's, and the sublist's
        lookups); returns a new run's (no pieces, no bytes)."""
        if pieces:
            assert client is not None
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            out = client.out
            server = self.server
            if not out:  # a non-empty list is already due to be flushed
                server.touched.add(client)
            out.append(data)
            n = len(pieces)
            client.pending += len(data)
            client.out_msgs += n
            client.out_bytes += size
            server.out_msgs += n
            server.out_bytes += size
            self.sublist.matches += n
            return [], 0
        return pieces, 0

    def has_interest(self, subject: bytes) -> bool:
        """Whether anyone, here or (through the forwarder) on a peer server, listens on
        ``subject`` in this client's account. Part of the core's interface."""
        result = self.sublist.match(subject)
        if result.qsubs:
            return True
        for sub in result.psubs:
            # A callback subscription may say whether it listens (a stream import: only while
            # the importing account does).
            interest = getattr(sub.callback, "interest", None)
            if interest is None or interest(subject):
                return True
        forwarder = self.server._forwarder
        return forwarder is not None and self.forwards and forwarder.has_interest(self, subject)

    def _queue_targets(self, result, subject: bytes) -> list:
        """One member of each queue group, looked for from a random start (queue_pick), skipping
        members that cannot take the message, as (sub, client, MSG head) like a plan's entries: the heads are built once
        per result (its ``qplan``), not per message (callgrind, micro 1 -> queue group of 4,
        64 subjects: see benchmarks/README.md)."""
        qplan = result.qplan
        if qplan is None:
            prefix = MSG_ + subject + SP
            qplan = result.qplan = tuple(
                tuple([(sub, sub.client, prefix + sub.sid_part) for sub in group]) for group in result.qsubs
            )
        echo = self.echo
        queue_state = result.queue_state
        picked = []
        for index, members in enumerate(qplan):
            n = len(members)
            state, start = queue_pick(queue_state[index], n)
            for step in range(n):
                entry = members[(start + step) % n]
                sub = entry[0]
                if (entry[1] is self and not echo) or (sub.max_msgs and sub.delivered >= sub.max_msgs):
                    continue
                queue_state[index] = state
                picked.append(entry)
                break
        return picked

    def _may_deliver(self, sub: Subscription, subject: bytes, reply, header_size: int, payload) -> bool:
        """For a ``limited`` subscription: the subscriber's permission filter (deny entries a
        wildcard subscription overlaps), then the delivery count and auto-unsubscribe (UNSUB
        sid max): the max-th delivery goes out and removes the subscription. An internal
        subscription's callback gets the message here (and nothing is queued)."""
        client = sub.client
        if client.deliver_filter is not None and client.deliver_filter.delivery_denied(subject, reply):
            return False
        sub.delivered += 1
        if sub.callback is not None:
            self.server.callback_publisher = self
            headers = bytes(payload[:header_size]) if header_size > 0 else None
            body = bytes(payload[header_size:]) if header_size > 0 else bytes(payload)
            sub.took = True
            try:
                sub.took = sub.callback(subject, reply, headers, body) is not False
            except Exception:
                log.exception("internal subscription on %r failed", sub.subject)
            self.server.out_msgs += 1
            self.server.internal_out_msgs += 1
            return False
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            client.remove_subscription(sub)
            return sub.delivered == sub.max_msgs
        return True

    def _callback_pubs(self, ops: list, i: int, sub: Subscription, cache: dict,
                       match: Callable) -> tuple[int, int, int, int, int]:
        """_process_ops' Pubs from ``ops[i]`` on whose result is ``sub`` alone, a server
        callback (a publisher's window into one stream, its subjects changing or not; a
        consumer's acks, each subject new: looked up with ``match``, the sublist's
        match_uncached), each given to it as _may_deliver gives it, without the loop's per-op
        steps (a server callback: 1.7 -> 1.1 us a message before the stream's own work), or
        all of them in one list to its ``callback_run`` when it has one (a stream's: its
        checks once a run). Not for a verbose client, permissions or mappings; a pedantic
        client's subjects are checked as the loop checks them. Stops at anything else
        (headers: message tracing looks at those; a subject pedantic refuses), a stall, a
        close. Returns where it stopped, the messages, their payload bytes, the misses among
        them, and whether the op it stopped at was looked up (a miss, now cached)."""
        n_ops = len(ops)
        callback = sub.callback
        assert callback is not None
        client = sub.client
        server = self.server
        no_responders = self.no_responders
        pedantic = self.pedantic
        run = sub.callback_run
        pubs: list | None = [] if run is not None else None
        start = i
        n_bytes = misses = run_size = 0
        stop_missed = False
        while i < n_ops:
            op = ops[i]
            if op.__class__ is not Pub or op[2] > 0 or client.deliver_filter is not None:
                break
            subject, reply, _, _, payload = op
            if pedantic and not is_valid_literal_subject(subject):
                break
            result = cache.get(subject)
            missed = result is None
            if missed:
                result = match(subject)
            if result.qsubs or len(result.psubs) != 1 or result.psubs[0] is not sub:
                stop_missed = missed
                break
            misses += missed
            i += 1
            n_bytes += len(payload)
            if pubs is not None:  # (given to callback_run below, in one call)
                pubs.append((subject, reply, bytes(payload)))
                run_size += len(subject)
                continue
            sub.delivered += 1
            server.callback_publisher = self
            sub.took = True
            try:
                sub.took = callback(subject, reply, None, bytes(payload)) is not False
            except Exception:
                log.exception("internal subscription on %r failed", sub.subject)
            if not sub.took and reply is not None and no_responders:
                self._no_responders(subject, reply, result)
            if self.stalled_on is not None or self.closed:
                break
        if pubs:
            assert run is not None
            sub.delivered += len(pubs)
            server.callback_publisher = self
            sub.took = True  # (a run's callback takes every message: no no-responders status)
            try:
                run(pubs, run_size + n_bytes)
            except Exception:
                log.exception("internal subscription on %r failed", sub.subject)
        server.out_msgs += i - start
        server.internal_out_msgs += i - start
        return i, i - start, n_bytes, misses, stop_missed

    def _no_responders(self, subject: bytes, reply: bytes, result=None) -> None:
        """nats-server 2.10+: a 503 HMSG naming ``subject`` to the requester's own subscription
        on ``reply``."""
        if result is not None and _callback_took(result):
            return  # a server callback (e.g. JetStream's API) took it: delivered
        for sub in self.sublist.match(reply).psubs:
            if sub.client is self:
                size = b"%d" % (NO_RESPONDERS_HEADER_SIZE + len(subject))
                self.queue(b"".join((HMSG_, reply, b" ", sub.sid, b" ", size, b" ", size, b"\r\n",
                                     NO_RESPONDERS_STATUS, subject, b"\r\n\r\n\r\n")))
                return

    def queue(self, data: bytes) -> None:
        """Queue protocol bytes for this client (flushed after the current chunk)."""
        if self.server.options.trace and self.cid:
            trace.trace_out(self, data)
        self.out.append(data)
        self.pending += len(data)
        self.server.touched.add(self)

    def slow_consumer(self) -> None:
        """Over max_pending: nats-server counts it, logs it and closes without flushing."""
        if self.closed:
            return
        self.server.note_slow_consumer(self, f"MaxPending of {self.max_pending} Exceeded")
        self.close("Slow Consumer (Pending Bytes)", flush=False)

    # -- other ops ----------------------------------------------------------------------------

    def _process_connect(self, options: dict) -> None:
        opts = _check_connect_types(options)
        self.connect_opts = opts  # kept so a config reload can re-check the credentials
        server = self.server
        if server.auth_required or self.parser.auth_pending:
            authenticate_connect(self, opts)
            self.parser.auth_pending = False
        if opts.get("account") or opts.get("new_account"):
            # client.go processConnect: an account designation is an error now.
            raise ProtocolError(errors.AUTH_VIOLATION, "CONNECT names an account")
        for key in ("verbose", "pedantic", "echo", "headers", "no_responders"):
            value = opts.get(key)
            if value is not None:
                setattr(self, key, value)
        self.name = opts.get("name") or self.name
        self.lang = opts.get("lang") or self.lang
        self.version = opts.get("version") or self.version
        protocol = opts.get("protocol")
        if protocol is not None:
            self.protocol = protocol
        if self.protocol < 0 or self.protocol > 1:
            raise ProtocolError(errors.INVALID_PROTOCOL, f"protocol {self.protocol}")
        self.headers = bool(self.headers) and server.options.headers
        self.parser.headers = self.headers
        if self.no_responders and not self.headers:
            raise ProtocolError(errors.NO_RESPONDERS_NEEDS_HEADERS, "no_responders without headers")
        self.connect_received = True
        self.auth_due = None  # authenticated: the auth timer has nothing left to do
        now = clock.now()
        self.last_activity = now
        if self.rtt is None:  # nats-server's first estimate: accept to CONNECT
            self.rtt = max(now - self.start, 1e-9)
        if server.connection_hook is not None and server.connection_hook(self, "connect"):
            self.close("Client Closed", flush=True)
            return
        if not self.announced and server.connection_observers:
            self.announced = True
            for observer in server.connection_observers:
                observer.client_connected(self)
        if self.verbose:
            self.queue(OK)
        # server.go firstClientPingInterval: the first PING comes soon after CONNECT.
        if self._first_ping and not self.closed:
            interval = min(server.options.ping_interval, FIRST_PING_INTERVAL)
            interval += interval * FIRST_PING_JITTER * random.random()
            server.ping_timers.arm(self, interval)

    def _process_sub(self, op: Sub) -> None:
        subject, queue, sid = op
        perms = self.perms
        if perms is not None:
            if not perms.can_subscribe(subject, queue):
                self.queue(errors.subscription_violation(subject, queue).wire)
                return
            if self.deliver_filter is None and perms.needs_delivery_filter(subject):
                self.deliver_filter = perms
                for existing in self.subs.values():
                    existing.limited = True
        if not is_valid_subject(subject):
            self.queue(errors.INVALID_SUBJECT.wire)
            return
        max_subs = self.max_subs  # set by account/user limits (0: none allowed)
        if max_subs is None:
            max_subs = self.server.options.max_subscriptions or -1  # 0: unlimited
        if max_subs >= 0 and len(self.subs) >= max_subs:
            self.queue(errors.MAX_SUBSCRIPTIONS.wire)
            return
        if sid not in self.subs:  # a reused sid keeps the first subscription (client.go)
            sub = Subscription(self, subject, queue, sid)
            self.subs[sid] = sub
            self.sublist.insert(sub)
        if self.verbose:
            self.queue(OK)

    def _process_unsub(self, op: Unsub) -> None:
        sid, max_msgs = op
        if self.verbose:  # (before the removal: nats-server's trace has the OK first)
            self.queue(OK)
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs > 0 and max_msgs > sub.delivered:
                sub.max_msgs = max_msgs
                sub.limited = True
            else:
                self.remove_subscription(sub)

    def drop_forbidden_subscriptions(self) -> None:
        """client.go processSubsOnConfigReload: after a reload changed this client's
        permissions, each subscription they no longer allow is removed and the client told
        (-ERR naming its sid; the connection stays), so a requester that lost its reply
        subject hears it instead of getting responses it may no longer have."""
        perms = self.perms
        if perms is None:
            return
        forbidden = [sub for sub in self.subs.values() if not perms.can_subscribe(sub.subject, sub.queue)]
        for sub in forbidden:
            self.remove_subscription(sub)
            self.queue(errors.removed_subscription_violation(sub.subject, sub.queue, sub.sid).wire)
            using = f" using queue {trace.go_quote(sub.queue)}" if sub.queue is not None else ""
            log.info("Removed sub %s%s (sid %s) for %s - not authorized", trace.go_quote(sub.subject), using,
                     trace.go_quote(sub.sid), self.auth_user_label())

    def auth_user_label(self) -> str:
        """client.go getAuthUser: who the client authenticated as, for log lines."""
        connect = getattr(self, "connect_opts", None) or {}
        if connect.get("nkey"):
            return f'Nkey {trace.go_quote(str(connect["nkey"]).encode())}'
        if connect.get("user"):
            return f'User {trace.go_quote(str(connect["user"]).encode())}'
        if connect.get("jwt"):
            return f'JWT User {trace.go_quote((self.user or "").encode())}'
        if connect.get("auth_token"):
            return 'Token "[REDACTED]"'
        return 'User "N/A"'

    def remove_subscription(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.sublist.remove(sub)
            if self.server.options.trace and self.cid:
                trace.trace_delsub(self, sub.sid)

    # -- writing ------------------------------------------------------------------------------

    def wake_writer(self) -> None:
        """Hand the outbound buffer to the writer task, starting it the first time."""
        if self._writer_started:
            lot = self._writer_lot
            if lot:
                lot.unpark()
            return
        if self._nursery is None or (self.closed and not self._flush_before_close):
            return
        self._writer_started = True
        self._writer_lot = trio.lowlevel.ParkingLot()
        try:
            self._nursery.start_soon(self._write_loop)
        except RuntimeError:  # the connection's nursery has closed: nobody is left to write to
            pass

    def flush(self) -> None:
        """Send what is queued: straight to the socket when the writer task is idle and the
        backlog is small, else through the writer task.

        Writing in place saves the writer's wake-up and trio's send_all (nats-server's reader
        flushes in place too); whatever the socket does not take at once goes to the writer
        task, which owns waiting and the write deadline. TLS streams always use the writer.
        """
        out = self.out
        if not out:
            return
        if self._fd >= 0 and not self._sending and self.write_gate is None and self.pending <= EAGER_WRITE_MAX:
            n_out = len(out)
            if 1 < n_out <= WRITEV_MAX_PIECES and self.pending >= n_out * WRITEV_MIN_PIECE:
                # Big pieces (a run's MSGs, 1 KiB messages) go out as they are, not joined
                # into one more copy first: nats-server's writev (client.go flushOutbound).
                try:
                    written = os.writev(self._fd, out)
                except OSError:  # as below
                    written = 0
                total = sum(map(len, out))
                if written == total:
                    self.out = []
                    self._sent(written)
                    return
                if written:
                    self._sent(written)
                    self.out = _unsent(out, written)
                self.wake_writer()
                return
            data = out[0] if n_out == 1 else b"".join(out)
            try:
                written = os.write(self._fd, data)
            except OSError:  # EAGAIN, or an error the writer task will meet and handle
                written = 0
            if written:
                if written == len(data):
                    self.out = []
                    # _sent inline (a call less on each hop of a request/reply): emptied, so a
                    # producer stalled on us, if any, is released.
                    self.pending -= written
                    if self._drained is not None:
                        self._sent(0)
                    return
                self._sent(written)
                data = memoryview(data)[written:]  # (a slice of bytes copied the rest: up to a grown read's MSGs)
            self.out = [data]
        self.wake_writer()

    def _sent(self, n: int) -> None:
        """``n`` bytes reached the socket: release a producer stalled on us once we are below
        the stall mark or empty."""
        self.pending -= n
        if self._drained is not None and (self.pending <= self._stall_at or not self.out):
            self._drained.set()
            self._drained = None

    async def _write_loop(self) -> None:
        """The only task that writes to the socket: coalesces everything queued into one send."""
        send_all = self.stream.send_all
        lot = self._writer_lot
        assert lot is not None  # (made by wake_writer, which starts this task)
        try:
            while True:
                if not self.out:
                    if self._flush_before_close:
                        break
                    await lot.park()
                    continue
                if self.write_gate is not None:
                    await self.write_gate.wait()
                    continue
                out = self.out
                self.out = []
                # One piece goes as it is (join copies a memoryview, flush's unsent rest).
                data = out[0] if len(out) == 1 else b"".join(out)
                # Read live: a config reload changes it for existing clients, as in nats-server.
                self._sending = True
                try:
                    with trio.move_on_after(self.server.options.write_deadline) as timer:
                        await send_all(data)
                finally:
                    self._sending = False
                if timer.cancelled_caught:
                    self._write_deadline_exceeded(len(out), len(data))
                    return
                self._sent(len(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close("Write Error" if not self.closed else self.close_reason)
        if self._scope is not None:
            self._scope.cancel()

    def _write_deadline_exceeded(self, chunks: int, size: int) -> None:
        self.server.note_slow_consumer(
            self, f"WriteDeadline of {_go_duration(self.server.options.write_deadline)} exceeded with {chunks} chunks of {size} total bytes."
        )
        if not self.closed:
            self.close("Slow Consumer (Write Deadline)", flush=False)
        if self._scope is not None:
            self._scope.cancel()

    def set_max_pending(self, limit: int, stall_at: int | None = None) -> None:
        """Change this client's max_pending (and the stall mark, half of it by default); a
        client already over the new limit is closed as a slow consumer."""
        self.max_pending = limit
        self._stall_at = int(limit * STALL_FRACTION) if stall_at is None else stall_at
        if self.pending > limit:
            self.slow_consumer()

    @property
    def stall_at(self) -> int:
        return self._stall_at

    async def wait_drained(self) -> None:
        """Wait (bounded as nats-server's stallDuration) until this client's pending bytes
        fall below the stall mark."""
        if self.pending <= self._stall_at or self.closed:
            return
        if self._drained is None:
            self._drained = trio.Event()
        with trio.move_on_after(stall_duration(self.pending, self.max_pending)):
            await self._drained.wait()

    # -- timers -------------------------------------------------------------------------------

    def ping_timer_fired(self) -> None:
        """The ping timer (client.go processPingTimer): PING the client unless it sent a
        message, a SUB/UNSUB or a PING within the interval and an RTT is known (from CONNECT)
        and was asked for by a PING within DEFAULT_RTT_MEASUREMENT_INTERVAL; or, when the
        PINGs outstanding would exceed ping_max, send -ERR 'Stale Connection' and close; then
        re-arm. So a client that keeps publishing is never stale, even if it never answers a
        PING. Called by the server's timer task (natserver.server.keepalive), which flushes
        afterwards."""
        self._first_ping = False
        try:
            options = self.server.options  # live: a reload changes ping_interval and ping_max
            now = trio.current_time()
            need_rtt = self.rtt is None or now - self._ping_sent_at > DEFAULT_RTT_MEASUREMENT_INTERVAL
            interval = options.ping_interval
            if need_rtt or now - self._active_at >= interval:
                if self.pings_out + 1 > options.ping_max:
                    self.server.stale_connections += 1
                    self.queue(errors.STALE_CONNECTION.wire)
                    self.close(errors.STALE_CONNECTION.close_reason, flush=True)
                    return
                self.pings_out += 1
                self._ping_sent_at = now
                if not self._rtt_start:
                    self._rtt_start = time.monotonic()
                self.queue(PING_PROTO)
            self.server.ping_timers.arm(self, interval)
        except Exception:  # the timer task serves every client: this one alone pays
            log.exception("cid:%d - internal error in the ping timer; closing this client", self.cid)
            self.close("Internal Server Error", flush=False)

    def _use_no_auth_user(self) -> bool:
        """A first op other than CONNECT with no_auth_user set: the client becomes that user."""
        if self.connect_received or self.connect_opts is not None or not self.parser.auth_pending:
            return False  # (a CONNECT that failed authentication is no telnet demo)
        auth = self.server.auth
        if auth is None or not auth.use_no_auth_user(self):
            return False
        self.parser.auth_pending = False
        self.connect_received = True
        self.auth_due = None  # authenticated: the auth timer has nothing left to do
        return True

    def auth_timer_fired(self) -> None:
        """auth_timeout has passed (the server's timer task, natserver.server.keepalive, which
        flushes afterwards): a client still without a CONNECT is cut off."""
        if not self.connect_received and not self.closed:
            self.queue(errors.AUTH_TIMEOUT.wire)
            self.close(errors.AUTH_TIMEOUT.close_reason, flush=True)


class _TracedOps:
    """The parse function of a traced chunk (Client._process_ops(parse)): hands out one op at a
    time, tracing it first (``<<- [...]``) and, before the next, the MSGs it caused on each
    receiver (``->> [MSG ...]``). One Pub per message: no runs while tracing."""

    __slots__ = ("client", "before", "payload", "header_size")

    def __init__(self, client: Client) -> None:
        self.client = client
        self.before: dict | None = None
        self.payload: bytes | memoryview = b""  # the traced Pub's, for its deliveries' MSG_PAYLOAD lines
        self.header_size = -1
        client.parser.coalesce = False

    def finish(self) -> None:
        self.done()
        self.client.parser.coalesce = True

    def parse(self) -> list:
        client = self.client
        self.done()
        ops = client.parser.parse()
        if not ops:
            return ops
        op = ops[0]
        if len(ops) > 1:
            client.parser.unread(ops[1:])
        if op.__class__ is PubRun:  # parsed before tracing was turned on: one by one
            client.parser.unread(client.parser.expand(op.data))
            return self.parse()
        mapped = None
        if op.__class__ is Pub and client.sublist.mappings is not None and op.subject:
            mapped = client.sublist.mappings.select(op.subject)
        trace.trace_in(client, op, mapped)
        if op.__class__ is Pub:
            if mapped is not None:
                op = op._replace(subject=mapped)
            self.before = trace.receivers(client, op.subject)
            self.payload, self.header_size = op.payload, op.header_size
        return [op]

    def done(self) -> None:
        if self.before is not None:
            trace.trace_deliveries(self.before, self.payload, self.header_size)
            self.before = None
        client = self.client
        if client.trace_payload_due is not None:  # no -ERR came after all
            due, client.trace_payload_due = client.trace_payload_due, None
            trace.trace_payload(client, *due)


def _unsent(out: list, written: int) -> list:
    """What is left of the pieces ``out`` after the first ``written`` bytes were sent."""
    for i, piece in enumerate(out):
        if written < len(piece):
            rest = out[i:]
            if written:
                rest[0] = memoryview(piece)[written:]  # (not a copy of the rest)
            return rest
        written -= len(piece)
    return []


def _make_plan(result, subject: bytes) -> tuple:
    """A cached result's delivery plan: (subscription, client, ``MSG <subject> <sid> ``) for
    each plain subscription, built once per subject (see Client._route). A loop, not a
    comprehension: that is one more frame, on every cache miss."""
    psubs = result.psubs
    if len(psubs) == 1:  # most results: no comprehension frame, no list
        sub = psubs[0]
        plan = result.plan = ((sub, sub.client, MSG_ + subject + SP + sub.sid_part),)
        return plan
    prefix = MSG_ + subject + SP
    plan = result.plan = tuple([(sub, sub.client, prefix + sub.sid_part) for sub in psubs])
    return plan


def _callback_took(result) -> bool:
    """Whether a server callback among ``result``'s subscriptions took the message just routed
    (client.go deliverMsg: a service import counts only if its exporting account delivered)."""
    for sub in result.psubs:  # (loops, not any(): no generator frame on every request)
        if sub.callback is not None and sub.took:
            return True
    for group in result.qsubs:
        for sub in group:
            if sub.callback is not None and sub.took:
                return True
    return False


async def _close_tls(stream) -> None:
    """Go's tls.Conn.Close sends a close_notify alert: do the same, briefly."""
    with trio.move_on_after(0.5):
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass


def stall_duration(pending: int, max_pending: int) -> float:
    """nats-server stallDuration: 100 ms, plus 100 ms per 5 % of max_pending above half,
    1 s once full."""
    if pending >= max_pending:
        return STALL_MAX_WAIT
    half = max_pending // 2
    if pending > half:
        return STALL_MIN_WAIT * (1 + (pending - half) // max(half // 10, 1))
    return STALL_MIN_WAIT


def _go_duration(seconds: float) -> str:
    """Format seconds the way Go prints a time.Duration (10s, 2m0s, 250ms)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    minutes, secs = divmod(seconds, 60)
    if minutes:
        hours, minutes = divmod(int(minutes), 60)
        text = f"{minutes}m{secs:g}s"
        return f"{hours}h{text}" if hours else text
    return f"{secs:g}s"


def connection_record(client: Client, keep_subs: bool = True) -> dict:
    """What /connz reports about a connection, kept for closed ones (``keep_subs``: with their
    subscriptions, packed by pack_subs; an open one's are read live)."""
    return {
        "cid": client.cid,
        "ip": client.ip,
        "port": client.port,
        "start": client.start,
        "stop": client.stop,
        "last_activity": client.last_activity,
        "rtt": client.rtt,
        "pending_bytes": client.pending,
        "in_msgs": client.in_msgs,
        "out_msgs": client.out_msgs,
        "in_bytes": client.in_bytes,
        "out_bytes": client.out_bytes,
        "subscriptions": len(client.subs),
        "subs_packed": pack_subs(client) if keep_subs else "",
        "name": client.name,
        "lang": client.lang,
        "version": client.version,
        "user": client.user,
        # ConnInfo.account: named only for accounts other than the global one (monitor.go).
        "account": client.account.name if client.account is not None and client.account.name != GLOBAL_ACCOUNT else "",
        "reason": client.close_reason,
    }


class ClosedRecord(Mapping):
    """A closed connection's connection_record as /connz?state=closed keeps it (server
    closed_clients, 10 000 by default): its values marshalled into one bytes object, read back
    whole on demand (``unpacked``). As a dict of 20 entries and their values a record took
    ~1.8 KiB, 18 MB for a full ring, scattered over the allocator's arenas; packed ~200 B."""

    __slots__ = ("_keys", "_packed")
    _key_tuples: dict[tuple, tuple] = {}  # one shared tuple of keys for every record

    def __init__(self, record: dict) -> None:
        keys = tuple(record)
        self._keys = self._key_tuples.setdefault(keys, keys)
        self._packed = marshal.dumps(tuple(record.values()))

    def unpacked(self) -> dict:
        return dict(zip(self._keys, marshal.loads(self._packed)))

    def __getitem__(self, key: str):
        return self.unpacked()[key]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class ClosedRing:
    """The last ``maxlen`` ClosedRecords (server.closed_clients), as a deque of them would keep
    them, but packed: each record is its keys' shape and its marshalled values, appended to
    one bytearray, which is sealed CLOSED_CHUNK records at a time into one bytes object.
    A record alone is two small objects (~260 B) that the allocator places among the closing
    connection's own objects, so 10 000 of them, made during a storm of closes, kept most of
    CPython's 1 MiB arenas from being given back once the storm had gone (bench_hostile's
    memory round: RSS 110 MB 30 s after 10 000 connections closed, 71 MB with no records kept
    at all). So the ring keeps no small object per record or per chunk either (a chunk was
    a ``(count, bytes)`` tuple, 156 of them for a full ring, each one left in a storm's arena):
    a chunk (~13 KiB) and the bytearray's buffer come from malloc, outside those arenas.
    Reading gives ClosedRecords back."""

    __slots__ = ("maxlen", "_chunks", "_open", "_open_count", "_skip", "_count", "_keys", "_key_ids")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._chunks: collections.deque[bytes] = collections.deque()  # CLOSED_CHUNK records each
        self._open = bytearray()  # the newest records, not sealed yet
        self._open_count = 0
        self._skip = 0  # records of the oldest chunk already out of the ring
        self._count = 0  # records in the ring
        self._keys: list[tuple] = []  # each record's keys, one shared tuple per shape
        self._key_ids: dict[tuple, int] = {}

    def append(self, record: Mapping) -> None:
        if self.maxlen <= 0:
            return
        if not isinstance(record, ClosedRecord):
            record = ClosedRecord(dict(record))
        key_id = self._key_ids.get(record._keys)
        if key_id is None:
            key_id = self._key_ids[record._keys] = len(self._keys)
            self._keys.append(record._keys)
        self._open += _CLOSED_HEAD.pack(key_id, len(record._packed))
        self._open += record._packed
        self._open_count += 1
        self._count += 1
        if self._open_count >= CLOSED_CHUNK:
            self._chunks.append(bytes(self._open))
            self._open.clear()
            self._open_count = 0
        while self._count > self.maxlen:
            if self._chunks:
                drop = min(self._count - self.maxlen, CLOSED_CHUNK - self._skip)
                self._skip += drop
                self._count -= drop
                if self._skip == CLOSED_CHUNK:
                    self._chunks.popleft()
                    self._skip = 0
            else:
                drop = self._count - self.maxlen
                at = 0
                for _ in range(drop):
                    at += _CLOSED_HEAD.size + _CLOSED_HEAD.unpack_from(self._open, at)[1]
                del self._open[:at]
                self._open_count -= drop
                self._count -= drop

    @staticmethod
    def _unpack(chunk: bytes | bytearray, n: int, skip: int):
        """The (key id, packed values) of records ``skip`` to ``n`` of ``chunk``."""
        head = _CLOSED_HEAD.size
        at = 0
        for index in range(n):
            key_id, size = _CLOSED_HEAD.unpack_from(chunk, at)
            at += head
            if index >= skip:
                yield key_id, bytes(chunk[at:at + size])
            at += size

    def _entries(self):
        skip = self._skip
        for chunk in self._chunks:
            yield from self._unpack(chunk, CLOSED_CHUNK, skip)
            skip = 0
        yield from self._unpack(bytes(self._open), self._open_count, 0)

    def _record(self, key_id: int, packed: bytes) -> ClosedRecord:
        record = ClosedRecord.__new__(ClosedRecord)
        record._keys = self._keys[key_id]
        record._packed = packed
        return record

    def __iter__(self):
        return (self._record(key_id, packed) for key_id, packed in self._entries())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, index: int) -> ClosedRecord:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("closed connection index out of range")
        sealed = self._count - self._open_count
        if index >= sealed:
            chunk: bytes | bytearray = bytes(self._open)
            index -= sealed
        else:
            position, index = divmod(index + self._skip, CLOSED_CHUNK)
            chunk = self._chunks[position]
        return self._record(*next(self._unpack(chunk, index + 1, index)))


# How many closed records are sealed into one chunk (~13 KiB), and each one's header in it:
# its keys' shape and its length.
CLOSED_CHUNK = 64
_CLOSED_HEAD = struct.Struct("<HI")


# A closed connection's subscriptions, as /connz?state=closed shows them, are kept as one string
# (pack_subs) instead of a dict and a list entry per subscription: a client that subscribed
# 50 000 times and left retained 786 B a subscription as dicts (nats-server's SubDetails: 286).
# Subjects, queues and sids never hold a space or a tab (the parser splits SUB on both).
_PACKED_FIELD = " "
_PACKED_SUB = "\t"


def pack_subs(client: Client) -> str:
    """Every subscription of ``client`` as ``subject queue sid msgs max`` (queue empty when none),
    tab-separated: what unpack_subs turns back into /connz SubDetails."""
    if not client.subs:
        return ""
    return _PACKED_SUB.encode().join(
        b"%s %s %s %d %d" % (sub.subject, sub.queue or b"", sub.sid, sub.delivered, sub.max_msgs)
        for sub in client.subs.values()
    ).decode("utf-8", "replace")


def unpack_subs(packed: str, cid: int) -> list[dict]:
    """pack_subs' string as /connz?subs=detail's entries (nats-server SubDetail, no account)."""
    details = []
    for entry in packed.split(_PACKED_SUB) if packed else ():
        subject, queue, sid, msgs, max_msgs = entry.split(_PACKED_FIELD)
        detail: dict[str, str | int] = {"subject": subject}
        if queue:
            detail["qgroup"] = queue
        detail["sid"] = sid
        detail["msgs"] = int(msgs)
        if max_msgs != "0":
            detail["max"] = int(max_msgs)
        detail["cid"] = cid
        details.append(detail)
    return details


class _DeliveryPlan:
    """What _route needs of a sublist result: a delivery plan already chosen, no queue groups."""

    __slots__ = ("plan", "qsubs")

    def __init__(self, plan: tuple) -> None:
        self.plan = plan
        self.qsubs = ()
