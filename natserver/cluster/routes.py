"""Routes: natserver as a member of a nats-server cluster (a full mesh of routes).

The cluster sits on the core through three hooks (see natserver.server.server.Server):
each account's ``Sublist.watcher`` tells it when local interest changes (it sends RS+/RS- with
queue weights); ``Server.set_forwarder`` hands it every locally published message (it sends an
RMSG to each route whose interest matches, choosing one server for each queue group, a local
member first); and ``Client.deliver_routed`` delivers what a route brings to local subscribers
only, so a message crosses at most one route.

Route pooling (nats-server 2.10+, route.go): between two servers that both pool there are
max(pool sizes) connections, each carrying the interest and messages of the accounts whose
computeRoutePoolIdx is its index, and one dedicated connection per pinned account
(``cluster { accounts }``, the system account included) whose lines name no account. A peer
without pooling (nats-server 2.9, or ``pool_size: -1``) gets one route carrying everything.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import random
import sys
import urllib.parse
from collections.abc import Callable
from functools import partial

import orjson
import trio

from ..auth import nkeys
from ..auth.jwt import parse_decorated
from ..auth.tls import DEFAULT_TLS_TIMEOUT, TLSConfig, client_handshake, handshake
from ..auth.users import LEAFNODE, AccountLimitError, Permissions, check_password, new_nonce
from ..config import compression
from ..config.compression import CompressionOpts
from ..protocol import const, errors
from ..protocol.gotext import go_duration
from ..protocol.s2 import MAX_BLOCK_SIZE, S2Error, StreamDecoder, StreamEncoder
from ..routing.accounts import system_account_name
from ..routing.sublist import Sublist, is_valid_literal_subject
from ..server import msgtrace
from ..server.binding import peer_ip
from ..server.client import Client
from ..server.listen import open_listeners
from .protocol import (
    Connect,
    Err,
    Info,
    Ok,
    Ping,
    Pong,
    RemoteSub,
    RemoteUnsub,
    RoutedMsg,
    RouteParser,
    RouteProtocolError,
    ls_minus,
    ls_plus,
    rmsg_head,
    rs_minus,
    rs_plus,
)

log = logging.getLogger("natserver")

__all__ = ["Cluster", "enable_cluster"]

# server/const.go DEFAULT_ROUTE_CONNECT (1 s between attempts) and opts.go's
# DEFAULT_ROUTE_RECONNECT; we back off from the first up to the cap.
ROUTE_CONNECT_DELAY = 1.0
ROUTE_CONNECT_MAX_DELAY = 30.0
# How long a dialled peer has to send its INFO (nats-server: the auth timeout, 2 s; doubled).
ROUTE_HANDSHAKE_TIMEOUT = 4.0
# route.go reConnectToRoute: up to 100 ms of random delay before a route is dialled again.
ROUTE_RETRY_JITTER = 0.1
# Bytes a route may have queued before it is cut off as a slow consumer (nats-server gives
# routes a larger max_pending than clients: 2x MAX_PENDING_SIZE is our bound).
ROUTE_MAX_PENDING = 2 * const.MAX_PENDING_SIZE
# Interest entries one route may hold per account before it is cut off (an interest flood).
ROUTE_MAX_INTEREST = 1_000_000
# server.go firstPingInterval: the first PING on a route or leaf connection, at most this soon
# (plus up to 20 % jitter, setFirstPingTimer); route.go defaultRouteMaxPingInterval: a route's
# ping interval never exceeds this (adjustPingInterval).
FIRST_ROUTE_PING_INTERVAL = 1.0
FIRST_PING_JITTER = 0.2
ROUTE_MAX_PING_INTERVAL = 30.0
READ_SIZE = 65536
# A compressed connection's decoded data handled before other tasks run: one S2 chunk at most
# (s2.go maxBlockSize), however much a few compressed bytes expand to.
DECODE_PER_TURN = MAX_BLOCK_SIZE
# const.go DEFAULT_LEAFNODE_INFO_WAIT: how long a leaf waits for the hub's first INFO.
LEAF_INFO_WAIT = 1.0
# leafnode.go leafNodeLoopDetectionSubjectPrefix: each account tells its leaf connections of
# interest in $LDS.<unique>; if that interest comes back over a leaf connection, the leaves
# form a loop.
LOOP_DETECTION_PREFIX = b"$LDS."
# leafnode.go leafNodeReconnectDelayAfterLoopDetected and ...AfterClusterNameSame: a leaf
# that closed for a loop, or for having the hub's cluster name, waits this long to redial.
LEAF_LOOP_RECONNECT_DELAY = 30.0
LOOP_DETECTED = "Loop detected"
# reload.go reloadClusterPoolAndAccounts: how long a reload that pins accounts waits for the
# peers to confirm (their answer to the route_acc_add_reqid INFO) before it goes on.
ACC_ADDED_CONFIRM_TIMEOUT = 2.0
# natserver's bound on how long such a reload waits for the connections it closed to be gone
# before it makes the new pool (nats-server closes them synchronously).
ROUTE_CLOSE_WAIT = 2.0
ROUTE_REMOVED = "Route Removed"  # closeConnection(RouteRemoved)'s reason
# FNV-1a 32 (Go's hash/fnv New32a), which route.go computeRoutePoolIdx hashes account names with.
FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193
# server.go getServerProto: the server-to-server protocol level announced to routes and leaf
# nodes (route and leaf INFO "proto", a leaf's CONNECT "protocol"): nats-server 2.11+'s
# MsgTraceProto, 3 (RouteProtoInfo, 1: takes INFO updates; RouteProtoV2, 2: named only, nothing
# checks it). natserver traces what comes from its peers (server/msgtrace.py).
SERVER_PROTO = msgtrace.MSG_TRACE_PROTO
TRACE_DEST = msgtrace.TRACE_DEST
TRACE_PARENT = msgtrace.TRACE_PARENT


def route_pool_index(pool_size: int, account: bytes) -> int:
    """route.go computeRoutePoolIdx: the pool connection an account's traffic goes over."""
    if pool_size <= 1:
        return 0
    h = FNV32_OFFSET
    for byte in account:
        h = ((h ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return h % pool_size
SAME_CLUSTER_NAME = "remote leafnode has same cluster name"


class _LeafCredentials:
    """A leaf node's CONNECT as natserver.auth sees a client's: the same checks (user JWT and
    nonce signature, nkeys, users) run on it, with the LEAFNODE connection type, and the
    account they register it in is the one the leaf is bound to."""

    connection_type = LEAFNODE

    def __init__(self, leaf: Route) -> None:
        self.ip, self.port, self.cid = leaf.ip, leaf.port, leaf.rid
        self.nonce = leaf.nonce
        self.tls_stream = None
        self.subs: dict = {}
        self.sublist = None
        self.account = None
        self.user = self.nkey = self.perms = self.deliver_filter = None
        self._publish_allowed: dict = {}
        self._auth_error = None
        self.auth_expires = None
        self.user_max_subs = self.user_max_payload = -1
# jsAckPre: only replies under it may carry a delivery's subject after an "@".
JS_ACK_PREFIX = b"$JS.ACK."


class _RemoteInterest:
    """One route's interest in a subject (with a queue group's weight), as a Sublist entry."""

    __slots__ = ("subject", "queue", "weight")

    def __init__(self, subject: bytes, queue: bytes | None, weight: int) -> None:
        self.subject = subject
        self.queue = queue
        self.weight = weight


def pool_settings(options, server) -> tuple[int, list[str]]:
    """The pool size and pinned accounts ``options`` give (opts.go setBaselineOptions: 0 is
    the default size; with pooling on, the system account is pinned too; negative: neither)."""
    pool_size = options.cluster_pool_size or const.DEFAULT_ROUTE_POOL_SIZE
    pinned: list[str] = []
    if pool_size > 0:
        pinned = list(dict.fromkeys(options.cluster_accounts))
        if not options.no_system_account:
            name = system_account_name(options, server)
            if name not in pinned:
                pinned.append(name)
    return pool_size, pinned


def _checks_perms(subject: bytes) -> bool:
    """Leaf permissions leave out the loop detection and gateway reply subjects."""
    return not subject.startswith((LOOP_DETECTION_PREFIX, b"$GR.", b"_GR_."))


def _parse_route_url(url: str) -> tuple[str, int, str, str]:
    parts = urllib.parse.urlsplit(url if "://" in url else "nats-route://" + url)
    return (parts.hostname or "127.0.0.1", parts.port or const.DEFAULT_PORT + 2000,
            urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))


def leaf_credentials(path: str, nonce: str) -> dict:
    """CONNECT's ``jwt`` and ``sig`` for a remote's ``credentials`` file (leafnode.go
    sendLeafConnect: the user JWT, and the nonce signed with the file's nkey seed). A missing or
    malformed file ends this attempt; the loop retries after its delay, as nats-server does."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise RouteProtocolError(f"error reading leafnode credentials {path!r}: {exc.strerror or exc}") from None
    lines = [line.strip() for line in text.splitlines()]
    seed = next((value for i, line in enumerate(lines) if line.startswith("-----BEGIN") and "SEED" in line.upper()
                 for value in lines[i + 1:] if value and not value.startswith("---")), "")
    try:
        keypair = nkeys.from_seed(seed.encode())
    except ValueError as exc:
        raise RouteProtocolError(f"bad nkey seed in leafnode credentials {path!r}: {exc}") from None
    signature = base64.urlsafe_b64encode(keypair.sign(nonce.encode())).rstrip(b"=").decode()
    return {"jwt": parse_decorated(text), "sig": signature}


class Route:
    """One route connection (dialled or accepted)."""

    def __init__(self, cluster: Cluster, stream: trio.SocketStream, rid: int, solicited: bool, url: str = "",
                 leaf_account: bytes | None = None) -> None:
        self.cluster = cluster
        # A leaf node connection (natserver dialled a hub) is bound to this local account.
        self.leaf_account = leaf_account
        # The remote's credentials file (a solicited leaf): signs the hub's nonce in CONNECT.
        self.credentials = ""
        self.nonce = b""  # the nonce an accepted leaf's INFO carried (signed in its CONNECT)
        self.tls_config: TLSConfig | None = None  # a solicited leaf's remote tls {}
        # A leaf connection's permissions (leafnode.go: a remote's deny_exports as its publish
        # deny list, deny_imports as its subscribe deny list; on a hub, the leaf's CONNECT
        # deny_pub as the publish deny list).
        self.perms: Permissions | None = None
        self.deny_imports: list = []  # a solicited leaf's remote deny_imports (sent as deny_pub)
        self.tls = False  # the connection went over to TLS
        self.reconnect_delay = cluster.server.options.leafnode_reconnect  # before a solicited leaf redials
        self.remote_cluster = ""  # an accepted leaf's CONNECT cluster
        self.stream: trio.abc.Stream = stream  # an SSLStream over it once TLS is on
        self.rid = rid
        self.solicited = solicited
        self.url = url
        try:
            self.ip, self.port = stream.socket.getpeername()[:2]
            self.ip = peer_ip(self.ip)
        except OSError:
            self.ip, self.port = "", 0
        self.remote_id = ""
        self.peer_id = ""  # the id the peer's INFO gave, even when not registered
        # Pooling: the connection's index in the peer's pool (-1: not placed), whether the peer
        # has no pooling (this one route carries every account), the account a dedicated route
        # is for, whether its first PONG is to start the next pool connection, and whether it
        # must not be redialled (a dedicated route the peer cannot have).
        self.pool_idx = -1
        self.no_pool = False
        self.remote_pool_size = 0  # the peer's route_pool_size (0: none)
        self.route_account: bytes | None = None
        self.start_next_on_pong = False
        self.no_redial = False
        # Dial this URL again when the connection drops and the peer has no other (set when a
        # duplicate was closed in its favour: route.go's retry).
        self.retry_url = ""
        self.remote_name = ""
        self.proto = 0  # the server-to-server protocol level the peer announced (INFO or CONNECT "proto")
        self.remote_info: dict = {}
        self.lame_duck = False  # the peer said it is in lame duck mode (route INFO "ldm")
        self.registered = False
        self.headers = True
        self.parser = RouteParser(max_payload=max(cluster.server.options.max_payload, const.MAX_PAYLOAD_SIZE),
                                  leaf_account=leaf_account)
        self.interest: dict[bytes, Sublist] = {}  # account -> the remote's subscriptions
        self.entries: dict[tuple, _RemoteInterest] = {}  # (account, subject, queue) -> entry
        self.out: list = []
        self.pending = 0
        self.closed = False
        self.close_reason = ""
        self._wake = trio.Event()
        # Writing in place (flush): the socket's descriptor once the connection is set up over
        # plain TCP (-1: through the writer task only: before, with TLS, over a WebSocket), the
        # writer mid-send (then it goes first), and whether flush_touched will come to us.
        self._fd = -1
        self._sending = False
        self._touched = False
        self._flush_then_close = False
        self._scope: trio.CancelScope | None = None
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.start = trio.current_time()
        # What we told this peer: (account, subject, queue) -> the weight (plain: 1).
        self.told: dict[tuple, int] = {}
        self.done: trio.Event | None = None  # set when closed (a dialler waits on it)
        self.gone = trio.Event()  # set once the cluster forgot it (route_closed)
        # The ping timer (_ping_loop): PINGs unanswered, whether a PONG ever came (client.go's
        # rtt != 0), and when the peer last sent a message, interest or a PING (lastIn).
        self.pings_out = 0
        self._ponged = False
        self._active_at = float("-inf")
        # client.go rtt: the last PING's round trip (its start: rttStart), for s2_auto.
        self.rtt = 0.0
        self.rtt_start: float | None = None
        # S2 compression (route.go negotiateRouteCompression, leafnode.go
        # negotiateLeafCompression): the mode settings, the level negotiated (what /routez and
        # /leafz report; empty until the peer's first INFO), the writer and the reader once
        # the connection switched. ``_raw_out`` is what goes before the compressed part (the
        # INFO a dialling side sends just before it switches).
        self.compression_opts: CompressionOpts = compression.ROUTE_DEFAULT
        self.compression = ""
        self.compression_negotiated = False
        self._encoder: StreamEncoder | None = None
        self._decoder: StreamDecoder | None = None
        self._raw_out: list = []
        self._inflate_after_op = False
        self._decode_more = False  # a turn's decoding budget ran out with chunks left

    @property
    def leaf_account_name(self) -> str:
        """A leaf connection's account (a route has none: "")."""
        return (self.leaf_account or b"").decode(errors="replace")

    @property
    def label(self) -> str:
        return f"{self.ip}:{self.port} - {'lid' if self.leaf_account is not None else 'rid'}:{self.rid}"

    def send(self, data: bytes) -> None:
        if self.closed or self._flush_then_close:
            return
        self.out.append(data)
        self.pending += len(data)
        if self.pending > ROUTE_MAX_PENDING:
            log.info("%s - Slow Consumer Detected: MaxPending of %d Exceeded", self.label, ROUTE_MAX_PENDING)
            self.close("Slow Consumer (Pending Bytes)")
            return
        if not self._touched:
            self._touched = True
            self.cluster.server.touched_routes.append(self)
        # Written in place by the server's next flush_touched (the end of the chunk or pass
        # that sent it); the writer is woken too, for a sender that never flushes (a timer):
        # it finds nothing left when the flush came first.
        self._wake.set()

    def flush(self) -> None:
        """Write what is queued straight to the socket when the writer task is idle (as
        Client.flush: no wake-up and send_all per message between servers); what the socket
        does not take, the writer sends, with its write deadline."""
        self._touched = False
        fd = self._fd
        if fd < 0 or self._sending or self._raw_out or not self.out or self.closed:
            return
        out, self.out = self.out, []
        data = out[0] if len(out) == 1 else b"".join(out)
        size = len(data)
        if self._encoder is not None:
            data = self._encoder.encode(data, uncompressed=self.compression == compression.S2_UNCOMPRESSED)
        try:
            written = os.write(fd, data)
        except OSError:  # EAGAIN, or an error the writer meets and handles
            written = 0
        self.pending -= size
        if written < len(data):  # (already encoded: the writer sends it as it is, first)
            rest = data[written:]
            self._raw_out = [rest]
            self.pending += len(rest)  # (which the writer takes off once sent)
            self._wake.set()

    def start_compression(self, info: bytes) -> None:
        """The switch to S2 (route.go negotiateRouteCompression): a dialling side sends its
        INFO plain then writes compressed, the accepting side writes that INFO compressed;
        either reads compressed after the INFO just handled."""
        if self.solicited:
            self.send(info)
        self._raw_out += self.out
        self.out = []
        self._encoder = StreamEncoder()
        if not self.solicited:
            self.send(info)
        self._inflate_after_op = True

    def close(self, reason: str, flush: bool = False) -> None:
        """Close the route; with ``flush`` what is queued (an -ERR) is sent first."""
        if self.closed:
            return
        self.closed = True
        self._fd = -1  # never written in place again (the number may soon be another socket's)
        self.close_reason = reason
        if flush and self.out:
            self._flush_then_close = True
            self._wake.set()
        elif self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        cluster = self.cluster
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                if self.closed:
                    scope.cancel()
                if await cluster.secure(self):
                    stream = self.stream
                    if type(stream) is trio.SocketStream:  # (not TLS, not a WebSocket)
                        self._fd = stream.socket.fileno()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._write_loop)
                        nursery.start_soon(self._ping_loop)
                        if self.leaf_account is None:  # a leaf waits for the hub's INFO
                            if self.solicited:
                                self.send(cluster.connect_proto(self.url))
                            if not cluster.delays_info(self):
                                self.send(cluster.route_info(cluster.account_info(self)))
                        await self._read_loop()
                        if not self._flush_then_close:
                            nursery.cancel_scope.cancel()
        except Exception:
            log.exception("%s - internal error on route; closing it", self.label)
            self.close("Internal Server Error")
        finally:
            if not self.closed:
                self.close("Client Closed")
            cluster.route_closed(self)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    def _ping_interval(self) -> float:
        interval = self.cluster.server.options.ping_interval
        if self.leaf_account is None:
            interval = min(interval, ROUTE_MAX_PING_INTERVAL)
        return interval

    async def _ping_loop(self) -> None:
        """client.go processPingTimer for routes and leaf nodes: a route, and a leaf connection
        this server dialled (a spoke), is PINGed every interval whatever it sends; a leaf that
        dialled us (on the hub) is not while it was active within the interval, once a PONG
        came. When the PINGs outstanding would exceed ping_max: -ERR 'Stale Connection' and
        close. The first PING comes at most 1 s after the connection (setFirstPingTimer)."""
        delay = min(self._ping_interval(), FIRST_ROUTE_PING_INTERVAL)
        await trio.sleep(delay + delay * FIRST_PING_JITTER * random.random())
        while not self.closed:
            interval = self._ping_interval()
            delays = self.leaf_account is not None and not self.solicited
            now = trio.current_time()
            if not delays or not self._ponged or now - self._active_at >= interval:
                if self.pings_out + 1 > self.cluster.server.options.ping_max:
                    log.debug("%s - Stale Client Connection - Closing", self.label)
                    self.send(errors.STALE_CONNECTION.wire)
                    self.close(errors.STALE_CONNECTION.close_reason, flush=True)
                    return
                self.pings_out += 1
                self.rtt_start = trio.current_time()
                self.send(b"PING\r\n")
            await trio.sleep(interval)

    async def _write_loop(self) -> None:
        deadline = self.cluster.server.options.write_deadline
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self.out or self._raw_out:
                raw = b"".join(self._raw_out)
                data = b"".join(self.out)
                self._raw_out = []
                self.out = []
                size = len(raw) + len(data)
                if self._encoder is not None and data:
                    data = self._encoder.encode(data, uncompressed=self.compression == compression.S2_UNCOMPRESSED)
                self._sending = True
                with trio.move_on_after(deadline) as timeout:
                    try:
                        await self.stream.send_all(raw + data if raw else data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        self.close("Write Error")
                        return
                    finally:
                        self._sending = False
                if timeout.cancelled_caught:
                    self.close("Slow Consumer (Write Deadline)")
                    return
                self.pending -= size
            if self._flush_then_close:
                assert self._scope is not None  # set before the write loop runs
                self._scope.cancel()
                return

    async def _read_loop(self) -> None:
        server = self.cluster.server
        handshake = trio.move_on_after(self.cluster.handshake_timeout(self))
        with handshake:
            if not self._process():  # the hub's INFO a leaf read before TLS
                return
            while not self.registered and not self.closed:
                if not await self._read_once():
                    return
        if handshake.cancelled_caught:
            kind = "Leafnode" if self.leaf_account is not None else "Route"
            log.error("%s - %s Error 'Authentication Timeout'", self.label, kind)
            if self.leaf_account is not None and not self.solicited:
                self.send(errors.AUTH_TIMEOUT.wire)  # client.go authTimeout
            self.close("Authentication Timeout", flush=True)
            return
        while not self.closed:
            if not await self._read_once():
                return
            server.flush_touched()

    async def _read_once(self) -> bool:
        try:
            data = await self.stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if not data:
            self.close("Client Closed")
            return False
        if self._decoder is not None:
            self._decoder.feed(data)
        else:
            self.parser.feed(data)
        in_msgs = self.in_msgs
        alive = self._process()
        while alive and self._decode_more:
            # more S2 chunks than one turn decodes: let the other tasks run first
            self.cluster.server.flush_touched()
            await trio.sleep(0)
            alive = self._process()
        if self.in_msgs != in_msgs:  # messages are activity for the ping timer (lastIn)
            self._active_at = trio.current_time()
        return alive

    def _process(self) -> bool:
        """Handle what the parser holds, and on a compressed connection what the S2 chunks
        received decode to, DECODE_PER_TURN bytes at most (False: the connection is done)."""
        budget = DECODE_PER_TURN
        self._decode_more = False
        try:
            while not self.closed:
                op = self.parser.next_op()
                if op is None:
                    if self._decoder is None:
                        break
                    if budget <= 0:
                        self._decode_more = True
                        break
                    chunk = self._decoder.next_chunk()
                    if chunk is None:
                        break
                    budget -= len(chunk)
                    self.parser.feed(chunk)
                    continue
                self._handle(op)
                if self._inflate_after_op:  # what follows the INFO just handled is S2
                    self._inflate_after_op = False
                    self._decoder = StreamDecoder()
                    self._decoder.feed(self.parser.take_buffer())
        except RouteProtocolError as exc:
            log.error("%s - Route Error '%s'", self.label, exc)
            self.send(exc.wire)
            self.close("Protocol Violation", flush=True)
            self.cluster.server.flush_touched()
            return False
        except S2Error as exc:  # client.go readLoop: a read error closes the connection
            log.error("%s - Read error: %s", self.label, exc)
            self.close("Read Error")
            return False
        return not self.closed

    def _handle(self, op) -> None:
        cluster = self.cluster
        if op.__class__ is RoutedMsg:
            if not self.registered:
                raise RouteProtocolError("Unknown Protocol Operation")
            self.in_msgs += 1
            self.in_bytes += len(op.payload)
            cluster.in_msgs += 1
            cluster.in_bytes += len(op.payload)
            cluster.deliver(op, self)
        elif op.__class__ is RemoteSub:
            if not self.registered:
                raise RouteProtocolError("Unknown Protocol Operation")
            if (self.leaf_account is not None and op.subject.startswith(LOOP_DETECTION_PREFIX)
                    and op.subject == cluster.loop_subject(op.account)):
                self.leaf_loop(send_error=True)
                return
            if self.perms is not None and not self.leaf_sub_allowed(op.subject):
                return
            if (op.account in cluster.transitioning and self.route_account is None and not self.no_pool
                    and self.leaf_account is None):
                return  # route.go processRemoteSub: the account is moving to its dedicated route
            self.add_interest(op.account, op.subject, op.queue, op.weight)
            self._active_at = trio.current_time()
        elif op.__class__ is RemoteUnsub:
            if not self.registered:
                raise RouteProtocolError("Unknown Protocol Operation")
            self.remove_interest(op.account, op.subject, op.queue)
            self._active_at = trio.current_time()
        elif op.__class__ is Ping:
            self._active_at = trio.current_time()
            self.send(b"PONG\r\n")
        elif op.__class__ is Pong:
            self.pings_out = 0
            self._ponged = True
            if self.rtt_start is not None:  # client.go processPong: the RTT, and s2_auto's level
                self.rtt = trio.current_time() - self.rtt_start
                self.rtt_start = None
                cluster.update_auto_compression(self)
            if self.start_next_on_pong:  # route.go: the next pool connection after the first PONG
                self.start_next_on_pong = False
                cluster.dial_pool(self)
        elif op.__class__ is Ok:
            pass
        elif op.__class__ is Err:
            if self.leaf_account is None:
                log.error("%s - Route Error '%s'", self.label, op.text)
                return
            # client.go processErr / leafnode.go leafProcessErr: a leaf stays open on -ERR,
            # but a loop or a cluster name clash the other side found delays the redial.
            log.error("%s - Leafnode Error '%s'", self.label, op.text)
            if SAME_CLUSTER_NAME in op.text:
                if self.solicited:
                    self.reconnect_delay = LEAF_LOOP_RECONNECT_DELAY
                log.error("%s - Leafnode connection dropped with same cluster name error. Delaying attempt to "
                          "reconnect for %s", self.label, go_duration(self.reconnect_delay))
            elif LOOP_DETECTED in op.text:
                self.leaf_loop(send_error=False)
        elif op.__class__ is Connect:
            if self.leaf_account is not None:
                cluster.process_leaf_connect(self, op.options)
            else:
                cluster.check_connect(self, op.options)
        elif op.__class__ is Info:
            if self.leaf_account is not None:
                cluster.process_leaf_info(self, op.info)
            else:
                cluster.process_info(self, op.info)

    def leaf_sub_allowed(self, subject: bytes) -> bool:
        """leafnode.go processLeafSub: interest in a literal subject we may not send on is
        ignored by a leaf that dialled (the hub told it its permissions) and is a
        subscription violation on a hub (-ERR, close)."""
        if not _checks_perms(subject) or not is_valid_literal_subject(subject):
            return True
        perms = self.perms
        if perms is None or perms.publish_allowed(subject):
            return True
        if not self.solicited:
            self.send(errors.subscription_violation(subject, None).wire)
            log.error("%s - Subscription Violation on \"%s\" - Check other side configuration", self.label,
                      subject.decode(errors="replace"))
            self.close("Protocol Violation", flush=True)
        return False

    def leaf_loop(self, send_error: bool) -> None:
        """leafnode.go handleLeafNodeLoop: our loop detection subject came back (then the
        other side is told), or the other side found a loop; a leaf that dialled waits
        LEAF_LOOP_RECONNECT_DELAY before it tries again."""
        delay = LEAF_LOOP_RECONNECT_DELAY
        if self.solicited:
            self.reconnect_delay = delay
        text = (f'Loop detected for leafnode account="{self.leaf_account_name}". '
                f"Delaying attempt to reconnect for {go_duration(delay)}")
        if send_error:
            self.send(errors.ServerError(text, True).wire)
        log.error("%s - %s", self.label, text)
        self.close("Protocol Violation", flush=True)

    def add_interest(self, account: bytes, subject: bytes, queue: bytes | None, weight: int) -> None:
        if not subject:
            raise RouteProtocolError("processRemoteSub Parse Error")
        key = (account, subject, queue)
        entry = self.entries.get(key)
        if entry is not None:
            entry.weight = weight  # a new queue weight
            self.cluster.propagate(self, account, subject, queue)
            return
        if len(self.entries) >= ROUTE_MAX_INTEREST:
            raise RouteProtocolError("Maximum Subscriptions Exceeded")
        entry = _RemoteInterest(subject, queue, weight)
        self.entries[key] = entry
        sublist = self.interest.get(account)
        if sublist is None:
            sublist = self.interest[account] = Sublist()
        try:
            sublist.insert(entry)
        except Exception:
            del self.entries[key]
            raise RouteProtocolError("processRemoteSub Parse Error") from None
        self.cluster.propagate(self, account, subject, queue)

    def drop_account(self, account: bytes) -> None:
        """route.go removeRemoteSubsForAcc: ``account``'s traffic leaves this connection (it
        moves to a dedicated route): forget the interest the peer told for it, and what we
        told it (the peer forgets that on its side)."""
        gone = [key for key in self.entries if key[0] == account]
        for key in gone:
            del self.entries[key]
        self.interest.pop(account, None)
        self.told = {key: weight for key, weight in self.told.items() if key[0] != account}
        for _, subject, queue in gone:
            self.cluster.propagate(self, account, subject, queue)

    def remove_interest(self, account: bytes, subject: bytes, queue: bytes | None) -> None:
        entry = self.entries.pop((account, subject, queue), None)
        if entry is not None:
            self.interest[account].remove(entry)
            self.cluster.propagate(self, account, subject, queue)

    def record(self, subs: bool = False) -> dict:
        """/routez's entry for this route (monitor.go RouteInfo)."""
        record = {
            "rid": self.rid,
            "remote_id": self.remote_id,
            "remote_name": self.remote_name,
            "did_solicit": self.solicited,
            "is_configured": self.solicited and self.url in self.cluster.configured,
            "ip": self.ip,
            "port": self.port,
            "pending_size": self.pending,
            "in_msgs": self.in_msgs,
            "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "subscriptions": len(self.entries),
        }
        if subs:
            record["subscriptions_list"] = sorted(
                subject.decode(errors="replace") + ("" if queue is None else " " + queue.decode(errors="replace"))
                for _, subject, queue in self.entries
            )
        if self.route_account is not None:
            record["account"] = self.route_account.decode(errors="replace")
        if self.compression:
            record["compression"] = self.compression
        return record

    def statsz(self) -> dict:
        """events.go RouteStat: this route in a statsz's routes list."""
        stat: dict = {"rid": self.rid}
        if self.remote_name:
            stat["name"] = self.remote_name
        stat.update({"sent": {"msgs": self.out_msgs, "bytes": self.out_bytes},
                     "received": {"msgs": self.in_msgs, "bytes": self.in_bytes}, "pending": self.pending})
        return stat


def _go_quote(name: bytes) -> str:
    """Go's %q of an account name."""
    return orjson.dumps(name.decode(errors="replace")).decode()


def _go_seconds(seconds: float):
    """A float64 of seconds as Go's JSON writes it: 2, not 2.0."""
    return int(seconds) if float(seconds).is_integer() else seconds


def _tls_varz(varz: dict, tls) -> None:
    """ClusterOptsVarz/LeafNodeOptsVarz tls_timeout (the default without a tls block, as
    nats-server's options carry it), and tls_required/tls_verify with one."""
    varz["tls_timeout"] = _go_seconds(tls.timeout if tls is not None and tls.timeout else DEFAULT_TLS_TIMEOUT)
    if tls is not None:
        varz["tls_required"] = True
        if tls.verify:
            varz["tls_verify"] = True


class AccountTraffic:
    """One account's messages and bytes received from and sent to routes and to leaf nodes."""

    __slots__ = ("routes_in", "leafs_in", "routes_out", "leafs_out")

    def __init__(self) -> None:
        self.routes_in, self.leafs_in, self.routes_out, self.leafs_out = [0, 0], [0, 0], [0, 0], [0, 0]

    def received(self, peer: Route, size: int) -> None:
        counts = self.routes_in if peer.leaf_account is None else self.leafs_in
        counts[0] += 1
        counts[1] += size

    def sent(self, peer: Route, size: int) -> None:
        counts = self.routes_out if peer.leaf_account is None else self.leafs_out
        counts[0] += 1
        counts[1] += size


class Cluster:
    """This server's routes: the listener, the dialled routes, interest and forwarding."""

    def __init__(self, server) -> None:
        options = server.options
        self.server = server
        self.name = options.cluster_name or server.server_id[:22]
        self.dynamic_name = not options.cluster_name
        self.routes: dict[str, Route] = {}  # remote server id -> its first registered route
        # Every registered route connection (pools and dedicated routes; what messages go to),
        # the pool of each peer (remote id -> a slot per index; one slot for a peer without
        # pooling) and the dedicated routes (pinned account -> remote id -> route).
        self.route_conns: list[Route] = []
        self.pools: dict[str, list[Route | None]] = {}
        # cluster { pool_size } (opts.go: 0 is the default; negative: no pooling) and the
        # accounts pinned to dedicated routes (with pooling on, the system account among them);
        # a reload may change both (reload_pool).
        pool_size, pinned = pool_settings(options, server)
        self.pool_size = pool_size
        self.pooling = pool_size > 0
        self.local_pool_size = pool_size if pool_size > 0 else 1  # server.go routesPoolSize
        self.acc_routes: dict[bytes, dict[str, Route]] = {name.encode(): {} for name in pinned}
        self.pinned = pinned  # as configured (a peer's reload may pin more in acc_routes)
        self._pool_indexes: dict[bytes, int] = {}
        # A peer's reload pinned these accounts (its route_acc_add_reqid INFO): until their
        # dedicated route is up, interest for them arriving over a pool connection is ignored
        # (accTransitioningToDedicatedRoute).
        self.transitioning: set[bytes] = set()
        # A reload of the pool under way: new route connections are turned away
        # (s.routesReject), and the confirmations of the peers it told of pinned accounts
        # (the request id and where they go).
        self.rejecting = False
        self._repool_lock = trio.Lock()  # one reload's changes at a time
        self._acc_reqid = ""
        self._acc_confirms: trio.MemorySendChannel | None = None
        # Server ids whose routes are closed at their INFO: a network partition made by a test
        # (natserver.testing_cluster); nats-server has no such thing.
        self.refused_peers: set[str] = set()
        server.lame_duck_hooks.append(self.enter_lame_duck)
        # rid -> leaf node connection, either way (nats-server keys them by connection: two
        # servers may be leaves of each other, a loop that $LDS interest then detects)
        self.leafs: dict[int, Route] = {}
        # account name -> what crossed routes and leaf connections for it (accounts.go
        # stats.rt/stats.ln): the per-kind counts of the system account's account statz. Only
        # accounts this server has get an entry.
        self.account_traffic: dict[bytes, AccountTraffic] = {}
        # what every route and leaf connection, closed ones included, brought in and took out:
        # the part of /varz in_msgs and out_msgs (server.go inMsgs, outMsgs) clients do not make
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.leaf_port = 0
        self.all_routes: set[Route] = set()
        # compression {} of cluster {} and leafnodes {} (server.go
        # validateAndNormalizeCompressionOption: "on" is s2_fast for routes, s2_auto for leaves)
        self.route_compression = compression.normalize(options.cluster_compression, compression.ROUTE_ON)
        self.leaf_compression = compression.normalize(options.leafnode_compression, compression.LEAF_ON)
        self.configured = list(options.routes)
        self.port = 0
        self.host = options.cluster_host
        self._next_rid = 0
        self._nursery: trio.Nursery | None = None
        self._dialing: set[str] = set()  # route URLs being dialled
        self._dialing_accounts: set[tuple[str, bytes]] = set()  # (URL, pinned account) being dialled
        # account name -> {(subject, queue): local subscription count}
        self.local: dict[bytes, dict[tuple, int]] = {}
        # Of those, the subscriptions routes are not told of (a service import's: each server
        # has its own, and nats-server tells leaf nodes of it, not routes).
        self.leaf_only: dict[bytes, dict[tuple, int]] = {}
        self._sublist_accounts: dict[int, bytes] = {}
        self._delivery_clients: dict[bytes, Client] = {}
        self._loop_subjects: dict[bytes, bytes] = {}  # account -> its $LDS.<unique> subject

    # -- setup --------------------------------------------------------------------------------

    def loop_subject(self, account: bytes) -> bytes:
        """The account's leaf loop detection subject (leafnode.go: $LDS. and a nuid, made
        once per account)."""
        subject = self._loop_subjects.get(account)
        if subject is None:
            subject = self._loop_subjects[account] = LOOP_DETECTION_PREFIX + base64.urlsafe_b64encode(
                random.randbytes(16)).rstrip(b"=").replace(b"-", b"A").replace(b"_", b"B")
        return subject

    def watch_accounts(self) -> None:
        """Hook every account's subject space, and count what it already holds."""
        server = self.server
        spaces = {b"$G": server.sublist}
        if server.accounts is not None:
            for name, account in server.accounts.by_name.items():
                spaces[name.encode()] = account.sublist
        for name, sublist in spaces.items():
            self._sublist_accounts[id(sublist)] = name
            for sub in sublist.subscriptions():
                self._count_local(name, sub, 1)
            sublist.watcher = (lambda sub, added, _name=name: self.interest_changed(_name, sub, added))

    def delays_info(self, route: Route) -> bool:
        """route.go createRoute delayInfo: a dialled connection sends its INFO once the peer's
        came when compression is to be negotiated, or when it is a pool connection (it then
        knows its index in the pool: routeShouldDelayInfo)."""
        return route.solicited and (compression.needs_compression(self.route_compression.mode)
                                    or (self.pooling and route.route_account is None))

    @staticmethod
    def account_info(route: Route) -> dict | None:
        """A dedicated route's INFO names its account."""
        if route.route_account is None:
            return None
        return {"route_account": route.route_account.decode(errors="replace")}

    def pool_index(self, account: bytes) -> int:
        """The pool connection ``account`` goes over (-1: its dedicated route)."""
        index = self._pool_indexes.get(account)
        if index is None:
            index = -1 if account in self.acc_routes else route_pool_index(self.local_pool_size, account)
            self._pool_indexes[account] = index
        return index

    def carries(self, route: Route, account: bytes) -> bool:
        """Whether ``account``'s interest goes over this route connection (route.go
        updateRouteSubscriptionMap, sendSubsToRoute)."""
        if route.route_account is not None:
            return route.route_account == account
        return route.no_pool or self.pool_index(account) == route.pool_idx

    def route_info(self, extra: dict | None = None, route: Route | None = None) -> bytes:
        """The INFO a route peer gets (route.go routeInfo); its ``compression`` is our mode
        until ``route`` negotiated one, then that level (s2_auto said as such)."""
        server = self.server
        info = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": const.SERVER_VERSION,
            "proto": SERVER_PROTO,
            "go": f"{const.GO_VERSION_FIELD}{sys.version.split()[0]}",
            "host": self.host,
            "port": self.port,
            "headers": True,
            **self._tls_info(server.options.cluster_tls),
            "max_payload": server.options.max_payload,
            "ip": f"nats-route://{self._advertise_host()}:{self.port}/",
            "connect_urls": [] if server.options.cluster_no_advertise else [self.client_url()],
            "cluster": self.name,
            "lnoc": True,
        }
        if server.options.cluster_username:
            info["auth_required"] = True
        if self.dynamic_name:
            info["cluster_dynamic"] = True
        if self.pooling:
            info["route_pool_size"] = self.pool_size
        mode = self.route_compression.mode
        if mode != compression.NOT_SUPPORTED:
            if route is not None and route.compression:
                mode = compression.mode_for_info(self.route_compression, route.compression)
            info["compression"] = mode
        if extra:
            info.update(extra)
        return b"INFO " + orjson.dumps(info) + b"\r\n"

    @staticmethod
    def _tls_info(config) -> dict:
        """INFO's tls_required and tls_verify (with a client certificate asked for)."""
        if config is None:
            return {}
        return {"tls_required": True, "tls_verify": True} if config.verify else {"tls_required": True}

    def _advertise_host(self) -> str:
        return "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host

    def client_url(self) -> str:
        host = self.server.options.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        return f"{host}:{self.server.port}"

    def connect_proto(self, url: str) -> bytes:
        _, _, user, password = _parse_route_url(url) if url else ("", 0, "", "")
        connect = {
            "echo": False, "verbose": False, "pedantic": False,
            "user": user or None, "pass": password or None,
            "tls_required": self.server.options.cluster_tls is not None, "headers": True,
            "name": self.server.server_id, "cluster": self.name,
            "dynamic": self.dynamic_name, "lnoc": True,
        }
        connect = {k: v for k, v in connect.items() if v is not None}
        return b"CONNECT " + orjson.dumps(connect) + b"\r\n"

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        options = self.server.options
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            listeners = []
            if options.cluster_port:
                port = 0 if options.cluster_port == -1 else options.cluster_port
                host = None if options.cluster_host in ("", "0.0.0.0") else options.cluster_host
                listeners = await open_listeners(host, port)  # every address: dual-stack
                self.port = listeners[0].socket.getsockname()[1]
                log.info("Cluster name is %s", self.name)
                if self.dynamic_name:
                    log.warning("Cluster name was dynamically generated, consider setting one")
                log.info("Listening for route connections on %s:%d", options.cluster_host, self.port)
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener)
            self.watch_accounts()
            self.server.set_forwarder(self)
            for url in self.configured:
                self.dial(url, configured=True)
            for account in self.acc_routes:
                for url in self.configured:
                    self.dial_account(url, account, configured=True)
            for remote in options.leafnode_remotes:
                nursery.start_soon(self._leaf_loop, remote)
            if options.leafnode_port:
                port = 0 if options.leafnode_port == -1 else options.leafnode_port
                host = None if options.leafnode_host in ("", "0.0.0.0") else options.leafnode_host
                leaf_listeners = await open_listeners(host, port)
                self.leaf_port = leaf_listeners[0].socket.getsockname()[1]
                log.info("Listening for leafnode connections on %s:%d", options.leafnode_host, self.leaf_port)
                for listener in leaf_listeners:
                    nursery.start_soon(self._accept_leafs, listener)
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                self.server.set_forwarder(None)
                for route in list(self.all_routes):
                    route.close("Server Shutdown")

    async def _accept_loop(self, listener) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except (OSError, trio.ClosedResourceError):
                    return
                self._start_route(stream, solicited=False)

    def _start_route(self, stream, solicited: bool, url: str = "", account: bytes | None = None) -> Route:
        self._next_rid += 1
        route = Route(self, stream, self._next_rid, solicited, url)
        route.compression_opts = self.route_compression
        if account is not None:
            route.route_account = route.parser.route_account = account
        self.all_routes.add(route)
        log.info("%s - Route connection created", route.label)
        assert self._nursery is not None  # routes start while run() runs
        self._nursery.start_soon(route.run)
        return route

    def dial(self, url: str, configured: bool) -> None:
        if url in self._dialing or self._nursery is None:
            return
        self._dialing.add(url)
        self._nursery.start_soon(self._dial_loop, url, configured)

    def dial_account(self, url: str, account: bytes, configured: bool) -> None:
        """Keep ``account``'s dedicated route to ``url``."""
        if (url, account) in self._dialing_accounts or self._nursery is None:
            return
        self._dialing_accounts.add((url, account))
        self._nursery.start_soon(self._dial_loop, url, configured, account)

    def dial_pool(self, route: Route) -> None:
        """The next connection of a peer's pool (route.go addRoute: after the first PONG)."""
        if self._nursery is not None and not route.closed and not self.server.shutting_down:
            self._nursery.start_soon(self._dial_loop, route.url, route.url in self.configured, None, True)

    async def _dial_loop(self, url: str, configured: bool, account: bytes | None = None,
                         extra: bool = False) -> None:
        """Keep a route to ``url`` (back-off between attempts); an implicit (gossiped) route is
        not redialled once it dropped, as nats-server does. ``account``: the dedicated route
        of a pinned account; ``extra``: a pool connection after the first."""
        host, port, _, _ = _parse_route_url(url)
        delay = ROUTE_CONNECT_DELAY
        attempts = 0
        retries = self.server.options.cluster_connect_retries
        try:
            while True:
                if account is not None and account not in self.acc_routes or extra and not self.pooling:
                    return  # (a reload took the account's route, or the pool, away)
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError as exc:
                    attempts += 1
                    log.debug("Error trying to connect to route (attempt %d): %s", attempts, exc)
                    if not configured and attempts > 1 or retries and attempts > retries:
                        return
                    await trio.sleep(delay)
                    delay = min(delay * 2, ROUTE_CONNECT_MAX_DELAY)
                    continue
                route = self._start_route(stream, solicited=True, url=url, account=account)
                route.done = trio.Event()
                await route.done.wait()
                if route.no_redial:
                    return
                if route.close_reason == "Duplicate Route":
                    # Both sides dialled at once and each kept another connection (or the pool
                    # is full): check after a random pause that one route survived, else dial
                    # again.
                    await trio.sleep(random.uniform(0.05, 0.3))
                    if route.peer_id == self.server.server_id:
                        return
                    if route.peer_id in self.routes:
                        if extra or account is not None or not configured:
                            return
                        # A configured route: dial again once the peer's routes are all gone.
                        while route.peer_id in self.routes and not self.server.shutting_down:
                            await trio.sleep(ROUTE_CONNECT_DELAY)
                    continue
                if route.retry_url and route.peer_id not in self.routes and not self.server.shutting_down:
                    await trio.sleep(random.uniform(0, ROUTE_RETRY_JITTER))  # (client.go reconnect)
                    continue
                if not configured or self.server.shutting_down:
                    return
                attempts = 0
                delay = ROUTE_CONNECT_DELAY
                await trio.sleep(delay)
        finally:
            if account is not None:
                self._dialing_accounts.discard((url, account))
            elif not extra:
                self._dialing.discard(url)

    async def _leaf_loop(self, remote: dict) -> None:
        """Keep a leaf node connection to one of ``remote``'s hub URLs (leafnode.go
        connectToRemoteLeafNode: the URLs in turn, reconnecting after a delay)."""
        urls = list(remote.get("urls") or ())
        account = (remote.get("account") or "$G").encode()
        attempt = 0
        while urls:
            url = urls[attempt % len(urls)]
            attempt += 1
            host, port, _, _ = _parse_route_url(url)
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                log.debug("Error trying to connect as leafnode to remote server %s: %s", url, exc)
                await trio.sleep(self.server.options.leafnode_reconnect)
                continue
            self._next_rid += 1
            leaf = Route(self, stream, self._next_rid, True, url, leaf_account=account)
            leaf.credentials = remote.get("credentials") or ""
            leaf.compression_opts = compression.normalize(remote.get("compression") or compression.LEAF_DEFAULT,
                                                          compression.LEAF_ON)
            leaf.tls_config = remote.get("tls")
            leaf.deny_imports = list(remote.get("deny_imports") or ())
            if remote.get("deny_exports") or remote.get("deny_imports"):
                leaf.perms = Permissions({"publish": {"deny": list(remote.get("deny_exports") or ())},
                                          "subscribe": {"deny": leaf.deny_imports}})
            leaf.done = trio.Event()
            self.all_routes.add(leaf)
            log.info("%s - Leafnode connection created for account: %s", leaf.label, account.decode())
            assert self._nursery is not None  # leafs start while run() runs
            self._nursery.start_soon(leaf.run)
            await leaf.done.wait()
            await trio.sleep(leaf.reconnect_delay)

    async def _accept_leafs(self, listener) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except (OSError, trio.ClosedResourceError):
                    return
                self._next_rid += 1
                # Bound to $G until its CONNECT says otherwise (authorize_leaf).
                leaf = Route(self, stream, self._next_rid, False, leaf_account=b"$G")
                leaf.nonce = new_nonce()
                leaf.compression_opts = self.leaf_compression
                self.all_routes.add(leaf)
                log.info("%s - Leafnode connection created", leaf.label)
                leaf.send(self.leaf_info(leaf))
                assert self._nursery is not None  # leafs start while run() runs
                self._nursery.start_soon(leaf.run)

    def handshake_timeout(self, peer: Route) -> float:
        """How long a connection has to register: an accepted leaf has the leaf
        authorization timeout (opts.go getDefaultAuthTimeout: 2 s, with TLS the TLS timeout
        plus 1 s); the others ROUTE_HANDSHAKE_TIMEOUT."""
        if peer.leaf_account is not None and not peer.solicited:
            return self.leaf_auth_timeout()
        return ROUTE_HANDSHAKE_TIMEOUT

    def leaf_auth_timeout(self) -> float:
        options = self.server.options
        if options.leafnode_auth_timeout:
            return options.leafnode_auth_timeout
        if options.leafnode_tls is not None:
            return (options.leafnode_tls.timeout or DEFAULT_TLS_TIMEOUT) + 1.0
        return const.DEFAULT_AUTH_TIMEOUT

    async def secure(self, peer: Route) -> bool:
        """TLS in nats-server 2.9.10's order, before the protocol loops start: on a route
        both sides shake hands first (route.go createRoute); a hub sends its leaf INFO in plain
        text, then shakes hands (leafnode.go createLeafNode); a leaf reads that INFO, then
        upgrades when its remote has tls {} (or a tls:// URL) or the INFO says tls_required.
        False: the connection failed (and is closed)."""
        options = self.server.options
        kind = "leafnode" if peer.leaf_account is not None else "route"
        try:
            if peer.leaf_account is None:
                if options.cluster_tls is None:
                    return True
                if peer.solicited:
                    stream, error = await client_handshake(peer.stream, options.cluster_tls,
                                                           _parse_route_url(peer.url)[0])
                else:
                    stream, error = await handshake(peer.stream, options.cluster_tls)
            elif not peer.solicited:
                if options.leafnode_tls is None:
                    return True
                # The INFO (tls_required) goes out before the handshake, in plain text.
                data = b"".join(peer.out)
                peer.out.clear()
                peer.pending = 0
                await peer.stream.send_all(data)
                stream, error = await handshake(peer.stream, options.leafnode_tls)
            else:
                info = await self._read_hub_info(peer)
                if info is None:
                    return False
                wanted = peer.tls_config is not None or peer.url.startswith("tls://") or info.get("tls_required")
                if not wanted:
                    return True
                stream, error = await client_handshake(peer.stream, peer.tls_config, _parse_route_url(peer.url)[0])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            peer.close("Write Error")
            return False
        if stream is None:
            log.error("%s - TLS %s handshake error: %s", peer.label, kind, error)
            peer.close("TLS Handshake Failure")
            return False
        log.debug("%s - TLS handshake complete", peer.label)
        peer.stream = stream
        peer.tls = True
        return True

    async def _read_hub_info(self, leaf: Route) -> dict | None:
        """A solicited leaf's first INFO, in plain text (fed to its parser, which handles it
        as usual once the loops run); None if none came within LEAF_INFO_WAIT."""
        data = b""
        with trio.move_on_after(LEAF_INFO_WAIT):
            while b"\r\n" not in data:
                chunk = await leaf.stream.receive_some(READ_SIZE)
                if not chunk:
                    break
                data += chunk
        line = data.partition(b"\r\n")[0]
        if not line.startswith(b"INFO "):
            log.error("%s - Leafnode Error 'attempted to connect to wrong port'", leaf.label)
            leaf.close("Wrong Port" if data else "Read Error")
            return None
        leaf.parser.feed(data)
        try:
            info = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            info = None
        return info if isinstance(info, dict) else {}

    def leaf_info(self, leaf: Route, after_connect: bool = False, mode: str = "") -> bytes:
        """The INFO a leaf node that dials us gets (leafnode.go's hub INFO) with our
        compression mode (``mode``: the level negotiated, in the INFO that switches); after
        its CONNECT a second one says so (``connect_info``), which is when a nats-server leaf
        sends its interest. A leaf that dials sends this shape too when it switches to S2."""
        server = self.server
        host = self._advertise_host()
        info = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": const.SERVER_VERSION,
            "proto": SERVER_PROTO,
            "go": f"{const.GO_VERSION_FIELD}{sys.version.split()[0]}",
            "host": self.server.options.leafnode_host,
            "port": self.leaf_port,
            "headers": True,
            "auth_required": True,  # nats-server always asks a leaf for CONNECT
            **self._tls_info(server.options.leafnode_tls),
            "max_payload": server.options.max_payload,
            "ip": f"{host}:{self.leaf_port}",
            "client_id": leaf.rid,
        }
        if leaf.nonce and not after_connect:
            info["nonce"] = leaf.nonce.decode()  # nats-server sends every leaf one (createLeafNode)
        if not after_connect and leaf.compression_opts.mode != compression.NOT_SUPPORTED:
            info["compression"] = mode or leaf.compression_opts.mode
        info["info_on_connect"] = True
        if after_connect:
            info["connect_info"] = True
        info["leafnode_urls"] = [f"{host}:{self.leaf_port}"]
        if after_connect:
            info["remote_account"] = leaf.leaf_account_name
        return b"INFO " + orjson.dumps(info) + b" \r\n"

    def process_leaf_connect(self, leaf: Route, options: dict) -> None:
        """A leaf node's CONNECT (leafnode.go processLeafnodeConnect): register it and send
        it our interest."""
        if leaf.registered:
            return
        if options.get("lang"):  # a client at the leaf node port: leaves send no lang
            self._refuse_leaf(leaf, "attempted to connect to leaf node port", "Wrong Port")
            return
        cluster_name = options.get("cluster")
        if cluster_name and self.server.options.clustered and cluster_name == self.name:
            self._refuse_leaf(leaf, "remote leafnode has same cluster name", "Cluster Names Identical")
            return
        remote_id = options.get("server_id") or options.get("name") or f"leaf-{leaf.rid}"
        if not isinstance(remote_id, str):
            raise RouteProtocolError("Unknown Protocol Operation")
        account = self.authorize_leaf(leaf, options)
        if account is None:
            leaf.send(errors.AUTH_VIOLATION.wire)  # client.go authViolation
            leaf.close(errors.AUTH_VIOLATION.close_reason, flush=True)
            return
        leaf.leaf_account = leaf.parser.leaf_account = account.encode()
        deny_pub = options.get("deny_pub")
        if isinstance(deny_pub, list) and deny_pub:
            # leafnode.go mergeDenyPermissions: what the leaf will not import is not sent to it.
            leaf.perms = Permissions({"publish": {"deny": [str(s) for s in deny_pub]}})
        if not leaf.compression:  # leafnode.go processLeafnodeConnect: no INFO negotiated it
            mode = options.get("compress_mode")
            leaf.compression = mode if isinstance(mode, str) and mode else compression.NOT_SUPPORTED
        leaf.remote_id = leaf.peer_id = remote_id
        leaf.remote_name = str(options.get("name", ""))
        leaf.proto = _proto(options, "protocol")  # (leafnode.go leafConnectInfo: not "proto" there)
        leaf.remote_cluster = str(options.get("cluster") or "")
        leaf.headers = bool(options.get("headers"))
        # leafnode.go addLeafNodeConnection: an accepted leaf from the same server, cluster and
        # account is a stale connection: the new one replaces it.
        for old in list(self.leafs.values()):
            if (not old.solicited and old.remote_name == leaf.remote_name and old.leaf_account == leaf.leaf_account
                    and old.remote_cluster == leaf.remote_cluster and leaf.remote_name):
                old.send(b"-ERR 'Duplicate Remote LeafNode Connection'\r\n")
                old.close("Duplicate Remote LeafNode Connection", flush=True)
                log.warning("%s - Replacing connection from same server", leaf.label)
        leaf.registered = True
        self.leafs[leaf.rid] = leaf
        log.info("%s - Leafnode connection registered with %s", leaf.label, remote_id)
        leaf.send(self.leaf_info(leaf, after_connect=True))
        self.send_interest(leaf)

    @staticmethod
    def _refuse_leaf(leaf: Route, text: str, reason: str) -> None:
        """client.go sendErrAndErr, then close."""
        log.error("%s - %s", leaf.label, text)
        leaf.send(errors.ServerError(text, True).wire)
        leaf.close(reason, flush=True)

    def authorize_leaf(self, leaf: Route, options: dict) -> str | None:
        """auth.go isLeafNodeAuthorized: the account a leaf's CONNECT binds it to, or None
        (refused, logged as client.go authViolation does). ``leafnodes { authorization }``'s
        user, or its users, take precedence; without them the clients' authorization applies
        (natserver.auth, on a stand-in with the LEAFNODE connection type)."""
        opts = self.server.options
        user = options.get("user") or ""
        password = options.get("pass") or ""
        if not isinstance(user, str) or not isinstance(password, str):
            user = password = ""
        account: str | None = None
        if opts.leafnode_username or opts.leafnode_users:
            if opts.leafnode_username:
                known = [(opts.leafnode_username, opts.leafnode_password, opts.leafnode_account)]
            else:
                known = [(u.username, u.password, u.account or "") for u in opts.leafnode_users]
            for name, secret, bound in known:
                if name == user and check_password(password, secret):
                    account = self._existing_account(leaf, user, bound or "$G")
            if account is None:
                log.error('%s - authentication error - User "%s"', leaf.label, user)
            return account
        auth = self.server.auth
        stand_in = _LeafCredentials(leaf)
        try:
            ok = auth is None or auth.authenticate_leaf(stand_in, options, opts.leafnode_account or None)
        except AccountLimitError:
            ok = False
        if not ok:
            log.error("%s - %s", leaf.label, auth.failure_detail(options) if auth is not None else "authentication error")
            return None
        if stand_in.account is None:
            return opts.leafnode_account or "$G"
        self.server.accounts.unregister(stand_in)  # a leaf is not one of the account's clients
        return stand_in.account.name

    def _existing_account(self, leaf: Route, user: str, name: str) -> str | None:
        """auth.go registerLeafWithAccount: the account must exist here."""
        if self._account_sublist(name.encode()) is None:
            log.error('%s - authentication of user "%s" failed, unable to lookup account "%s": account not found',
                      leaf.label, user, name)
            return None
        return name

    def process_leaf_info(self, leaf: Route, info: dict) -> None:
        """The hub's INFO: the first one is answered with CONNECT and our interest, once
        compression is negotiated (leafnode.go processLeafnodeInfo). On the hub, a leaf's INFO
        before its CONNECT is its side of that negotiation."""
        if leaf.registered:
            return
        if not leaf.compression_negotiated and self._negotiate_leaf(leaf, info):
            return  # the next INFO, compressed, goes on
        if not leaf.solicited:
            return
        remote_id = info.get("server_id")
        if not isinstance(remote_id, str) or not remote_id:
            raise RouteProtocolError("Unknown Protocol Operation")
        _, _, user, password = _parse_route_url(leaf.url)
        connect = {"name": self.server.server_name, "server_id": self.server.server_id, "headers": True,
                   "version": const.SERVER_VERSION, "tls_required": leaf.tls, "protocol": SERVER_PROTO}
        if leaf.compression:
            connect["compress_mode"] = leaf.compression  # leafnode.go leafConnectInfo
        if user:
            connect.update(user=user, **{"pass": password})
        if leaf.credentials:
            connect.update(leaf_credentials(leaf.credentials, str(info.get("nonce", ""))))
        if leaf.deny_imports:
            connect["deny_pub"] = leaf.deny_imports  # the hub then sends us none of those
        leaf.send(b"CONNECT " + orjson.dumps(connect) + b"\r\n")
        leaf.remote_id = leaf.peer_id = remote_id
        leaf.remote_name = str(info.get("server_name", ""))
        leaf.proto = _proto(info)
        leaf.remote_info = info
        leaf.headers = bool(info.get("headers"))
        leaf.registered = True
        self.leafs[leaf.rid] = leaf
        log.info("%s - Leafnode connection registered with %s", leaf.label, remote_id)
        self.send_interest(leaf)

    # -- handshake ----------------------------------------------------------------------------

    def check_connect(self, route: Route, options: dict) -> None:
        """route.go processRouteConnect: route authorization and the cluster name."""
        opts = self.server.options
        if opts.cluster_username and (options.get("user") != opts.cluster_username
                                      or options.get("pass") != opts.cluster_password):
            log.error("%s - authentication error - User %r", route.label, options.get("user", ""))
            route.send(errors.AUTH_VIOLATION.wire)
            route.close(errors.AUTH_VIOLATION.close_reason, flush=True)
            return
        name = options.get("cluster", "")
        if name and name != self.name and not options.get("dynamic") and not self.dynamic_name:
            log.error("%s - Rejecting connection, cluster name %r does not match %r", route.label, name, self.name)
            route.send(b"-ERR 'Cluster Name Conflict'\r\n")
            route.close("Cluster Name Conflict", flush=True)
            return
        if name and self.dynamic_name and not options.get("dynamic"):
            self.adopt_name(name)

    def adopt_name(self, name: str) -> None:
        log.info("Cluster name updated to %s", name)
        self.name = name
        self.dynamic_name = False

    def process_info(self, route: Route, info: dict) -> None:
        """route.go processRouteInfo: the first INFO registers the route; a later one from a
        peer about another server is gossip (an implicit route to dial)."""
        reqid = info.get("route_acc_add_reqid")
        if route.registered and isinstance(reqid, str) and reqid:
            self._account_moving(route, info, reqid)
            return
        remote_id = info.get("server_id")
        if not isinstance(remote_id, str) or not remote_id:
            raise RouteProtocolError("Unknown Protocol Operation")
        if route.registered:
            if remote_id != route.remote_id:
                self.implicit(info)
            else:
                # route.go processRouteInfo: a peer entering lame duck mode ("ldm") takes its
                # client URLs out of our clients' INFO for good.
                for conn in self.connections_of(remote_id):
                    conn.remote_info = info
                    conn.lame_duck = conn.lame_duck or bool(info.get("ldm"))
                self.update_client_urls()
            return
        if remote_id == self.server.server_id:
            log.debug("%s - Detected route to self, ignoring", route.label)
            route.peer_id = remote_id  # (so its dial loop stops: route.go keeps routesToSelf)
            route.close("Duplicate Route")
            self.configured = [u for u in self.configured if u != route.url]
            return
        name = info.get("cluster", "")
        if isinstance(name, str) and name and name != self.name:
            if self.dynamic_name and not info.get("cluster_dynamic"):
                self.adopt_name(name)
            elif not info.get("cluster_dynamic"):
                log.error("%s - Rejecting connection, cluster name %r does not match %r", route.label, name, self.name)
                route.close("Cluster Name Conflict")
                return
        if remote_id in self.refused_peers:
            route.close("Partitioned")
            return
        if self.rejecting:  # (a reload is remaking the pool: the peer dials again)
            route.close(ROUTE_REMOVED)
            return
        if not route.compression_negotiated and self._negotiate_route(route, info):
            return  # the next INFO (compressed) registers the route
        route.peer_id = remote_id
        if not self._place(route, remote_id, info):
            return
        route.remote_id = remote_id
        route.remote_name = str(info.get("server_name", ""))
        route.proto = _proto(info)
        route.remote_info = info
        route.headers = bool(info.get("headers"))
        route.registered = True
        self.route_conns.append(route)
        first = remote_id not in self.routes
        if first:
            self.routes[remote_id] = route
        if route.route_account is not None:
            log.info("%s - Route connection registered with %s for account %s", route.label, remote_id,
                     route.route_account.decode(errors="replace"))
        else:
            log.info("%s - Route connection registered with %s", route.label, remote_id)
        self.send_interest(route)
        if not first:
            return
        # Gossip (route.go forwardNewRouteInfoToKnownServers): the peers we have learn about
        # the new one and dial it; the new one is not told about them, so no pair dials both
        # ways at once.
        for other in self.routes.values():
            if other is not route:
                other.send(self.gossip_info(route))
        self.update_client_urls()
        system = getattr(self.server, "system", None)
        if system is not None:
            system.route_up()  # (its STATSZ to the new server soon: natserver.system)

    def _negotiate_leaf(self, leaf: Route, info: dict) -> bool:
        """leafnode.go negotiateLeafCompression on the first INFO: the leaf that dials sends
        its INFO plain and switches, the hub answers with its INFO compressed (True: what
        follows waits for that exchange)."""
        opts = leaf.compression_opts
        return self._negotiate(leaf, info, lambda mode: self.leaf_info(leaf, mode=compression.mode_for_info(opts, mode)))

    def _negotiate_route(self, route: Route, info: dict) -> bool:
        """route.go processRouteInfo's first INFO and negotiateRouteCompression: the level
        this side writes with, and the switch when there is compression (True: the route
        waits for the peer's next INFO, now compressed, to register)."""
        return self._negotiate(route, info, lambda mode: self.route_info(self.account_info(route), route))

    def _negotiate(self, peer: Route, info: dict, compressed_info: Callable[[str], bytes]) -> bool:
        """What a route and a leaf connection negotiate alike: the mode (an older server says
        nothing: "not supported", and so does a side configured so), and with compression the
        switch, starting with ``compressed_info(mode)``, this side's INFO."""
        peer.compression_negotiated = True
        opts = peer.compression_opts
        if not compression.needs_compression(opts.mode):
            old = not info.get("compression") or opts.mode == compression.NOT_SUPPORTED
            peer.compression = compression.NOT_SUPPORTED if old else compression.OFF
            return False
        mode = self._select_compression(peer, opts, info)
        if mode is None:
            return True
        peer.compression = mode
        if not compression.needs_compression(mode):
            return False
        peer.start_compression(compressed_info(mode))
        return True

    def _select_compression(self, peer: Route, opts: CompressionOpts, info: dict) -> str | None:
        """server.go selectCompressionMode, then for s2_auto the level of the RTT so far
        (client.go: the time since the connection started); None: the peer's mode is unknown
        (-ERR, closed)."""
        try:
            mode = compression.select_mode(opts.mode, info.get("compression"))
        except ValueError as exc:
            if peer.leaf_account is None:
                self._refuse_route(peer, str(exc))
            else:
                self._refuse_leaf(peer, str(exc), "Protocol Violation")
            return None
        if mode == compression.S2_AUTO:
            if peer.rtt_start is None and not peer.rtt:
                peer.rtt = trio.current_time() - peer.start
            mode = compression.select_auto_by_rtt(peer.rtt, opts.rtt_thresholds)
        return mode

    @staticmethod
    def update_auto_compression(peer: Route) -> None:
        """client.go updateS2AutoCompressionLevel: with s2_auto, a new RTT may change the
        level this side writes with."""
        opts = peer.compression_opts
        if opts.mode == compression.S2_AUTO and compression.needs_compression(peer.compression):
            peer.compression = compression.select_auto_by_rtt(peer.rtt, opts.rtt_thresholds)

    def _refuse_route(self, route: Route, text: str) -> bool:
        """client.go sendErrAndErr, then close (a protocol violation): False."""
        log.error("%s - %s", route.label, text)
        route.send(errors.ServerError(text, True).wire)
        route.close("Protocol Violation", flush=True)
        return False

    def _place(self, route: Route, remote_id: str, info: dict) -> bool:
        """route.go addRoute: the connection's place, in the peer's pool (at the index the
        dialling side chose), as its one route (a peer without pooling) or as an account's
        dedicated route; False when it has none (a duplicate, a full pool, an error)."""
        pool_size = info.get("route_pool_size")
        pool_size = pool_size if isinstance(pool_size, int) and not isinstance(pool_size, bool) else 0
        route.remote_pool_size = pool_size
        index = info.get("route_pool_idx")
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        if not route.solicited:
            named = info.get("route_account")
            if isinstance(named, str) and named:
                route.route_account = route.parser.route_account = named.encode()
        account = route.route_account
        effective = max(self.local_pool_size, pool_size)
        if pool_size <= 0 or not self.pooling:
            if account is not None:
                route.no_redial = True
                return self._refuse_route(route, f"Not possible to have a dedicated route for account "
                                                 f"{_go_quote(account)} between those servers")
        elif route.solicited:
            if index != 0:
                return self._refuse_route(route, f"Route pool index should not be set but is set to {index}")
        elif index < 0 or index >= effective:
            return self._refuse_route(route, f"Invalid route pool index: {index} - pool size is {pool_size}")
        if account is not None:
            conns = self.acc_routes.get(account)
            if conns is None:
                return self._refuse_route(route, f"No route for account {_go_quote(account)}")
            if remote_id in conns:
                return self._duplicate(route, conns[remote_id])
            conns[remote_id] = route
            self.transitioning.discard(account)
            if route.solicited and compression.needs_compression(self.route_compression.mode):
                route.send(self.route_info(self.account_info(route), route))  # (its INFO was delayed)
            return True
        pool = self.pools.get(remote_id)
        if pool_size <= 0 or not self.pooling:
            if pool is not None:
                return self._duplicate(route, next((conn for conn in pool if conn is not None), None))
            route.pool_idx, route.no_pool = 0, True
            self.pools[remote_id] = [route]
            if self.delays_info(route):
                route.send(self.route_info(route=route))
            return True
        if pool is None:
            pool = self.pools[remote_id] = [None] * effective
        elif len(pool) < effective:
            pool.extend([None] * (effective - len(pool)))
        if not route.solicited:
            if pool[index] is not None:
                return self._duplicate(route, pool[index])
        else:
            index = next((i for i, conn in enumerate(pool) if conn is None), -1)
            if index < 0:
                log.debug("%s - Route pool size reached, closing extra connection to %s", route.label, remote_id)
                route.close("Duplicate Route")
                return False
        route.pool_idx = index
        pool[index] = route
        if route.solicited:
            # The delayed INFO (route.go addRoute sendDelayedInfo), with our index, and the
            # next pool connection once a PING is answered, until the pool is full.
            route.send(self.route_info({"route_pool_idx": index} if index else None, route))
            if any(conn is None for conn in pool):
                route.start_next_on_pong = True
                route.send(b"PING\r\n")
        return True

    def route_for(self, remote_id: str, account: bytes) -> Route | None:
        """The connection to one peer that carries ``account``'s interest and messages."""
        return next((conn for conn in self.connections_of(remote_id) if self.carries(conn, account)), None)

    @staticmethod
    def _duplicate(route: Route, kept: Route | None) -> bool:
        """route.go handleDuplicateRoute: close ``route``; the connection kept in its place
        is redialled if it drops (both sides may each keep the connection the other closes)."""
        log.debug("%s - Detected duplicate remote route %s", route.label, route.peer_id)
        if kept is not None:
            kept.retry_url = kept.url if kept.solicited else route.url
        route.close("Duplicate Route")
        return False

    def connections_of(self, remote_id: str) -> list[Route]:
        """Every registered route connection to one peer."""
        return [conn for conn in self.route_conns if conn.remote_id == remote_id]

    def close_peer(self, remote_id: str, reason: str) -> None:
        """Close every route connection to one peer."""
        for conn in self.connections_of(remote_id):
            conn.close(reason)

    def gossip_info(self, about: Route) -> bytes:
        info = {k: v for k, v in about.remote_info.items() if k not in ("route_pool_idx", "route_account")}
        return b"INFO " + orjson.dumps(info) + b"\r\n"

    def implicit(self, info: dict) -> None:
        remote_id = info.get("server_id")
        url = info.get("ip")
        if remote_id in self.routes or remote_id == self.server.server_id or not isinstance(url, str) or not url:
            return
        if url in self._dialing:
            return
        self.dial(url, configured=False)
        pool_size = info.get("route_pool_size")
        if self._nursery is not None and isinstance(pool_size, int) and pool_size > 0:
            for account in self.acc_routes:
                self.dial_account(url, account, configured=False)

    def route_closed(self, route: Route) -> None:
        """A route or leaf connection ended: forget it, and withdraw its interest from the
        peers it had been relayed to."""
        self.all_routes.discard(route)
        was_route = False
        if route.registered and route.leaf_account is None and route in self.route_conns:
            self.route_conns.remove(route)
            pool = self.pools.get(route.remote_id)
            if pool is not None and 0 <= route.pool_idx < len(pool) and pool[route.pool_idx] is route:
                pool[route.pool_idx] = None
                if not any(pool):
                    del self.pools[route.remote_id]
            if route.route_account is not None:
                conns = self.acc_routes.get(route.route_account)
                if conns is not None and conns.get(route.remote_id) is route:
                    del conns[route.remote_id]
            if self.routes.get(route.remote_id) is route:
                others = self.connections_of(route.remote_id)
                if others:
                    self.routes[route.remote_id] = others[0]
                else:
                    del self.routes[route.remote_id]
                    was_route = True
                    if route.retry_url and not route.solicited and not self.server.shutting_down:
                        self.dial(route.retry_url, configured=route.retry_url in self.configured)
                    if route.no_pool and route.solicited and route.url in self.configured:
                        # route.go removeRoute: the peer had no pooling; it may have now (an
                        # upgrade), so its pinned accounts' routes are dialled again.
                        for account in self.acc_routes:
                            self.dial_account(route.url, account, configured=True)
        if self.leafs.get(route.rid) is route:
            del self.leafs[route.rid]
        route.gone.set()
        gone = list(route.entries)
        route.entries.clear()
        for account, subject, queue in gone:
            self.propagate(route, account, subject, queue)
        if route.leaf_account is not None:
            log.info("%s - Leafnode connection closed: %s", route.label, route.close_reason)
        else:
            if was_route:
                self.update_client_urls()
            log.info("%s - Router connection closed: %s", route.label, route.close_reason)
        if route.done is not None:
            route.done.set()

    def enter_lame_duck(self) -> None:
        """This server enters lame duck mode (a Server.lame_duck_hooks entry): the routes are
        told with an INFO carrying "ldm" (server.go sendLDMToRoutes), and our own URL leaves
        the connect_urls of the INFO our clients are about to get."""
        info = self.route_info({"ldm": True})
        for route in self.routes.values():
            route.send(info)
        server = self.server
        if not server.options.cluster_no_advertise and server._info_base:
            server._info_base["connect_urls"] = [
                url for url in server._info_base.get("connect_urls") or () if url != self.client_url()
            ]

    def update_client_urls(self) -> None:
        """INFO connect_urls for clients, and an updated INFO to those that take it (protocol
        1 clients), unless no_advertise."""
        server = self.server
        if server.options.cluster_no_advertise or not server._info_base:
            return
        # In lame duck mode our own URL goes (server.go sendLDMToClients), and so do those of
        # peers in lame duck mode.
        urls = [] if server.lame_duck else [self.client_url()]
        for route in self.routes.values():
            if route.lame_duck:
                continue
            for url in route.remote_info.get("connect_urls") or ():
                if isinstance(url, str) and url not in urls:
                    urls.append(url)
        if server._info_base.get("connect_urls") == urls:
            return
        server._info_base["connect_urls"] = urls
        for client in list(server.clients.values()):
            if client.protocol >= 1 and client.connect_received and not client.closed:
                client.queue(server.info_for(client))
        server.flush_touched()

    # -- reloading the pool and the pinned accounts -------------------------------------------

    def pool_change(self, options) -> tuple[int, list[str], bool, list[str], list[str]]:
        """What a reload to ``options`` changes (reload.go diffPoolAndAccounts): the new pool
        size and pinned accounts, whether the size changed, the accounts pinned and unpinned."""
        pool_size, pinned = pool_settings(options, self.server)
        added = [name for name in pinned if name not in self.pinned]
        removed = [name for name in self.pinned if name not in pinned]
        return pool_size, pinned, pool_size != self.pool_size, added, removed

    def reload_pool(self, options) -> bool:
        """Apply a reload's ``cluster { pool_size, accounts }`` (reload.go
        reloadClusterPoolAndAccounts), in the background: whether anything changes."""
        pool_size, pinned, changed, added, removed = self.pool_change(options)
        if not (changed or added or removed) or self._nursery is None:
            return False
        self.pinned = pinned
        self._nursery.start_soon(self._repool, pool_size, changed, [a.encode() for a in added],
                                 [a.encode() for a in removed])
        return True

    async def _repool(self, pool_size: int, changed: bool, added: list[bytes], removed: list[bytes]) -> None:
        """The peers are told of the accounts that get a dedicated route (an INFO naming the
        account and a request id, which each answers once it dropped the account's interest
        from its pool), the routes that go are closed (the unpinned accounts' dedicated ones;
        every pool connection when the size changed), then the new pool and dedicated routes
        are dialled (the configured routes; a peer that dialled us dials again)."""
        async with self._repool_lock:
            try:
                await self._repool_locked(pool_size, changed, added, removed)
            except Exception:  # (the cluster's other tasks go on)
                log.exception("Error reloading the route pool")

    async def _repool_locked(self, pool_size: int, changed: bool, added: list[bytes], removed: list[bytes]) -> None:
        self.rejecting = True
        try:
            if added:
                await self._pin(added)
            closing = []
            for account in removed:
                for conn in self.acc_routes.get(account, {}).values():
                    conn.no_redial = True
                    closing.append(conn)
            if changed:
                closing += [conn for conn in self.route_conns if conn.route_account is None]
            for conn in closing:
                conn.close(ROUTE_REMOVED)
            with trio.move_on_after(ROUTE_CLOSE_WAIT):
                for conn in closing:
                    await conn.gone.wait()
            for account in removed:
                self.acc_routes.pop(account, None)
            self.pool_size = pool_size
            self.pooling = pool_size > 0
            self.local_pool_size = pool_size if pool_size > 0 else 1
            self._pool_indexes.clear()
            if not changed:
                # The unpinned accounts' interest goes over the pool again.
                for account in removed:
                    index = self.pool_index(account)
                    for conn in self.route_conns:
                        if conn.route_account is None and (conn.no_pool or conn.pool_idx == index):
                            self.send_interest(conn, account)
        finally:
            self.rejecting = False
        if changed or added:
            for url in self.configured:
                self.dial(url, configured=True)
                for account in added:
                    self.dial_account(url, account, configured=True)

    async def _pin(self, added: list[bytes]) -> None:
        """reload.go: each added account leaves the pool connection that carried it, the peer
        at the other end told with the INFO it answers; up to ACC_ADDED_CONFIRM_TIMEOUT for
        the answers."""
        self._acc_reqid = reqid = base64.urlsafe_b64encode(random.randbytes(16)).rstrip(b"=").decode()
        send, receive = trio.open_memory_channel[None](len(self.pools) * len(added) + 1)
        self._acc_confirms = send
        sent = 0
        for account in added:
            # (a peer's reload may have pinned it here already: the pool connection that
            # carried it is told all the same)
            index = route_pool_index(self.local_pool_size, account)
            self.acc_routes.setdefault(account, {})
            self._pool_indexes[account] = -1
            self.transitioning.discard(account)
            info = b"INFO " + orjson.dumps({"route_pool_size": self.local_pool_size,
                                            "route_account": account.decode(errors="replace"),
                                            "route_acc_add_reqid": reqid}) + b"\r\n"
            for pool in self.pools.values():
                conn = pool[index] if index < len(pool) else None
                if conn is None or conn.no_pool:
                    continue
                if conn.remote_pool_size and conn.remote_pool_size != self.local_pool_size:
                    other = pool[route_pool_index(conn.remote_pool_size, account)] if conn.remote_pool_size <= len(
                        pool) else None
                    if other is not None:
                        other.drop_account(account)  # (its interest came over the peer's index)
                conn.drop_account(account)
                conn.send(info)
                sent += 1
        with trio.move_on_after(ACC_ADDED_CONFIRM_TIMEOUT) as waiting:
            for _ in range(sent):
                await receive.receive()
        if waiting.cancelled_caught:
            log.warning("Timed out waiting for confirmation from all routes regarding per-account routes changes")
        self._acc_reqid, self._acc_confirms = "", None

    def _account_moving(self, route: Route, info: dict, reqid: str) -> None:
        """route.go processRouteInfo, an INFO with route_acc_add_reqid: with an account, the
        peer's reload gave it a dedicated route: it is pinned here too (its interest over the
        pool ignored until that route is up), the interest the peer told for it over the pool
        is dropped, and the INFO goes back without the account; without one, it is a peer's
        answer to ours."""
        name = info.get("route_account")
        if not isinstance(name, str) or not name:
            if reqid == self._acc_reqid and self._acc_confirms is not None:
                try:
                    self._acc_confirms.send_nowait(None)
                except trio.WouldBlock:
                    pass
            return
        account = name.encode()
        if self._account_sublist(account) is None:
            log.error("Error looking up account %r: account missing", name)
            return
        index = self.pool_index(account)
        if account not in self.acc_routes:
            self.acc_routes[account] = {}
            self._pool_indexes[account] = -1
            self.transitioning.add(account)
        size = info.get("route_pool_size")
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        if index <= 0 or size != self.local_pool_size:
            index = route_pool_index(size, account)
        for conn in self.route_conns:
            if conn.route_account is None and not conn.no_pool and conn.pool_idx == index:
                conn.drop_account(account)
        route.send(b"INFO " + orjson.dumps({k: v for k, v in info.items() if k != "route_account"}) + b"\r\n")

    # -- interest -----------------------------------------------------------------------------

    def send_interest(self, peer: Route, only: bytes | None = None) -> None:
        """All interest this peer is to know of, on a new route or leaf (route.go
        sendSubsToRoute, leafnode.go sendAllLeafSubs); ``only``: one account's."""
        keys: set = set()
        for account, counts in self.local.items():
            if only is None or account == only:
                keys.update((account, subject, queue) for subject, queue in counts)
        for other in self.all_peers():
            if other is not peer and self._relays(other, peer):
                keys.update(key for key in other.entries if only is None or key[0] == only)
        if peer.leaf_account is not None:
            keys.add((peer.leaf_account, self.loop_subject(peer.leaf_account), None))
        for account, subject, queue in keys:
            self._tell(peer, account, subject, queue)

    def all_peers(self) -> list:
        return [*self.route_conns, *self.leafs.values()]

    @staticmethod
    def _relays(source: Route, target: Route) -> bool:
        """Whether interest (and messages) from ``source`` go on to ``target``: a route's to
        leaves only; a leaf's to routes and other leaves (nats-server's rules)."""
        return target.leaf_account is not None or source.leaf_account is not None

    def _weight_for(self, target: Route, account: bytes, subject: bytes, queue) -> int:
        """The interest ``target`` is to be told of: local subscriptions plus what the peers
        it may hear through this server have (a plain subject counts 1)."""
        if target.leaf_account is not None and target.leaf_account != account:
            return 0
        if target.leaf_account is not None and subject == self._loop_subjects.get(account):
            return 1  # our loop detection subject, told to every leaf (never withdrawn)
        total = self.local.get(account, {}).get((subject, queue), 0)
        if target.leaf_account is None:
            total -= self.leaf_only.get(account, {}).get((subject, queue), 0)
        for other in self.all_peers():
            if other is target or not self._relays(other, target):
                continue
            entry = other.entries.get((account, subject, queue))
            if entry is not None:
                total += max(entry.weight, 1)
        if queue is None:
            return 1 if total else 0
        return total

    def _tell(self, target: Route, account: bytes, subject: bytes, queue) -> None:
        if target.perms is not None and target.solicited and _checks_perms(subject) and not target.perms.can_subscribe(
                subject, queue):
            return  # leafnode.go sendLeafNodeSubUpdate: a spoke keeps interest it may not import to itself
        leaf = target.leaf_account is not None
        if not leaf and not self.carries(target, account):
            return
        key = (account, subject, queue)
        weight = self._weight_for(target, account, subject, queue)
        if target.told.get(key, 0) == weight:
            return
        named = b"" if target.route_account is not None else account
        if weight:
            target.told[key] = weight
            target.send(ls_plus(subject, queue, weight) if leaf else rs_plus(named, subject, queue, weight))
        else:
            target.told.pop(key, None)
            target.send(ls_minus(subject, queue) if leaf else rs_minus(named, subject, queue))

    def propagate(self, source: Route | None, account: bytes, subject: bytes, queue) -> None:
        """Interest changed (locally, or a peer's): tell every other registered peer."""
        for target in self.all_peers():
            if target is not source and target.registered:
                self._tell(target, account, subject, queue)

    def interest_changed(self, account: bytes, sub, added: bool) -> None:
        self._count_local(account, sub, 1 if added else -1)
        self.propagate(None, account, sub.subject, sub.queue)

    def _count_local(self, account: bytes, sub, change: int) -> None:
        key = (sub.subject, sub.queue)
        tables = [self.local]
        if getattr(sub.callback, "route_interest", True) is False:
            tables.append(self.leaf_only)
        for table in tables:
            counts = table.setdefault(account, {})
            count = counts.get(key, 0) + change
            if count > 0:
                counts[key] = count
            else:
                counts.pop(key, None)

    # -- messages -----------------------------------------------------------------------------

    def forward(self, client, result, subject: bytes, reply, header_size: int, payload, *, on_peer=None) -> bool:
        """A message published here: to each route with matching interest, at most once per
        route; each remote queue group with no local member gets it on one route (chosen by
        the groups' weights). A traced message (server/msgtrace.py) has ``on_peer(peer)``
        give its header size and payload for each peer (None: not sent there)."""
        if not self.routes and not self.leafs:
            return False
        account = self._sublist_accounts.get(id(client.sublist), b"$G")
        local_queues = {group[0].queue for group in result.qsubs} if result.qsubs else ()
        # (what a stream import republishes stays on this server for routes: each server's
        # import republishes what the route brought it, in the exporting account)
        routes = self.route_conns if client.forwards_to_routes else ()
        peers = [*routes, *(leaf for leaf in self.leafs.values() if leaf.leaf_account == account)]
        return self._send_to_peers(peers, account, local_queues, None, subject, reply, header_size, payload,
                                   on_peer)

    def has_interest(self, client, subject: bytes) -> bool:
        """Whether a route, or a leaf of the client's account, listens on ``subject``."""
        account = self._sublist_accounts.get(id(client.sublist), b"$G")
        for route in [*self.route_conns, *(leaf for leaf in self.leafs.values() if leaf.leaf_account == account)]:
            interest = route.interest.get(account)
            if interest is not None:
                match = interest.match(subject)
                if match.psubs or match.qsubs:
                    return True
        return False

    def _send_to_peers(self, peers: list, account: bytes, local_queues, allowed_queues, subject: bytes, reply,
                       header_size: int, payload, on_peer=None) -> bool:
        """The message to each of ``peers`` with plain interest, and each of their queue groups
        (no local member; among ``allowed_queues`` unless None) to one peer, by weight."""
        plain: list[Route] = []
        candidates: dict[bytes, list] = {}
        for route in peers:
            interest = route.interest.get(account)
            if interest is None:
                continue
            if route.perms is not None and not route.perms.publish_allowed(subject):
                continue  # client.go deliverMsg: not permitted to deliver to a leaf
            match = interest.match(subject)
            if match.psubs:
                plain.append(route)
            for group in match.qsubs:
                queue = group[0].queue
                if queue in local_queues or (allowed_queues is not None and queue not in allowed_queues):
                    continue
                weight = sum(entry.weight for entry in group) or 1
                candidates.setdefault(queue, []).append((route, weight))
        chosen: dict[Route, list] = {}
        for queue, options in candidates.items():
            if len(options) == 1:
                route = options[0][0]
            else:
                route = random.choices([o[0] for o in options], weights=[o[1] for o in options])[0]
            chosen.setdefault(route, []).append(queue)
        if not plain and not chosen:
            return False
        payload = bytes(payload)
        size = len(payload)
        traced = on_peer is not None
        for route in {*plain, *chosen}:
            if traced:
                copy = on_peer(route)
                if copy is None:
                    continue
                header_size, payload = copy
                size = len(payload)
            queues = chosen.get(route, [])
            # leaf lines name no account, nor do a dedicated route's
            named = None if route.leaf_account is not None else b"" if route.route_account is not None else account
            if header_size > 0 and not route.headers:
                body = payload[header_size:]
                data = rmsg_head(named, subject, reply, queues, -1, len(body)) + body + b"\r\n"
            else:
                data = rmsg_head(named, subject, reply, queues, header_size, size) + payload + b"\r\n"
            route.out_msgs += 1
            route.out_bytes += size
            self.out_msgs += 1
            self.out_bytes += size
            self.traffic(account).sent(route, size)
            route.send(data)
        return True

    def traffic(self, account: bytes) -> AccountTraffic:
        traffic = self.account_traffic.get(account)
        if traffic is None:
            traffic = self.account_traffic[account] = AccountTraffic()
        return traffic

    def deliver(self, msg: RoutedMsg, origin: Route | None = None) -> None:
        """A message from a route or a leaf: to local subscribers, then on to the peers that
        hear ``origin`` through us (a route's messages to leaves; a leaf's to routes and
        other leaves), never back to a route: a message crosses at most one route."""
        client = self._delivery_clients.get(msg.account)
        if client is None:
            sublist = self._account_sublist(msg.account)
            if sublist is None:
                return  # an account this server does not have: nobody here is interested
            client = self.server.make_internal_client(sublist)
            client.forwards = False
            self._delivery_clients[msg.account] = client
        if origin is not None:
            self.traffic(msg.account).received(origin, len(msg.payload))
        mappings = client.sublist.mappings
        # (nats-server maps what leaves publish as what clients publish, never a route's)
        if msg.header_size > 0:
            # Message tracing (server/msgtrace.py): only messages with headers are looked at, for
            # a traceparent only if an account has msg_trace { dest }.
            accounts = self.server.accounts
            if origin is not None and (msg.payload.find(TRACE_DEST, 0, msg.header_size) >= 0 or (
                    accounts is not None and accounts.trace_parents
                    and TRACE_PARENT in msg.payload[:msg.header_size].lower())):
                traced = self._trace(msg, origin, client, mappings)
                if traced is None:
                    return
                msg = traced
            elif mappings is not None and origin is not None and origin.leaf_account is not None:
                msg = _leaf_mapped(msg, mappings)
            header_size = msg.header_size
            size = len(msg.payload)
            sizes = b"%d %d" % (header_size, size)
        else:
            if mappings is not None and origin is not None and origin.leaf_account is not None:
                msg = _leaf_mapped(msg, mappings)
            header_size = -1
            size = len(msg.payload)
            sizes = b"%d" % size
        reply = msg.reply or b""
        at = reply.rfind(b"@") if reply.startswith(JS_ACK_PREFIX) else -1
        if 0 <= at < len(reply) - 1:
            # A JetStream push delivery (nats-server's processMsgResults): routed by its deliver
            # subject, ``<ack reply>@<stored subject>`` carries the subject its MSG shows.
            payload = bytes(msg.payload)
            hdr = payload[:header_size] if header_size > 0 else None
            body = payload[header_size:] if header_size > 0 else payload
            client.deliver_as(msg.subject, reply[at + 1:], reply[:at], hdr, body)
        else:
            client.deliver_routed(msg.subject, msg.reply, header_size, sizes, msg.payload, msg.queues)
        if origin is None or not self.leafs:
            return
        peers = [peer for peer in self.all_peers()
                 if peer is not origin and self._relays(origin, peer)
                 and (peer.leaf_account is None or peer.leaf_account == msg.account)]
        if peers:
            result = client.sublist.match(msg.subject)
            local_queues = {group[0].queue for group in result.qsubs} if result.qsubs else ()
            self._send_to_peers(peers, msg.account, local_queues, set(msg.queues), msg.subject, msg.reply,
                                header_size, msg.payload)

    def _trace(self, msg: RoutedMsg, origin: Route, client, mappings) -> RoutedMsg | None:
        """A message from a peer whose headers may ask for a trace: traced (None), or the
        message to go on with as any (mapped as a leaf's is, its tracing maybe turned off)."""
        mapped = None
        if mappings is not None and origin.leaf_account is not None:
            mapped = mappings.select(msg.subject)
        account = self._account(msg.account)
        handled, changed = msgtrace.process_routed(
            client, account, msg.account.decode(errors="replace"), origin, msg.subject, mapped, msg.reply,
            msg.header_size, msg.payload, msg.queues, partial(self._relay, origin, msg, client))
        if handled:
            return None
        if changed is not None:  # tracing turned off (the origin-account header)
            msg = dataclasses.replace(msg, header_size=len(changed),
                                      payload=changed + bytes(msg.payload[msg.header_size:]))
        if mapped is not None:
            msg = dataclasses.replace(msg, subject=mapped)
        return msg

    def _relay(self, origin: Route, msg: RoutedMsg, client, subject: bytes, *, on_peer) -> bool:
        """A traced message from ``origin`` on to the peers that hear it through us (as
        deliver does), each copy from ``on_peer``."""
        if not self.leafs:
            return False
        peers = [peer for peer in self.all_peers()
                 if peer is not origin and self._relays(origin, peer)
                 and (peer.leaf_account is None or peer.leaf_account == msg.account)]
        if not peers:
            return False
        result = client.sublist.match(subject)
        local_queues = {group[0].queue for group in result.qsubs} if result.qsubs else ()
        return self._send_to_peers(peers, msg.account, local_queues, set(msg.queues), subject, msg.reply,
                                   msg.header_size, msg.payload, on_peer)

    def _account(self, account: bytes):
        """The account named in a routed message (None: the global account, or none here)."""
        accounts = self.server.accounts
        return accounts.by_name.get(account.decode(errors="replace")) if accounts is not None else None

    def _account_sublist(self, account: bytes):
        server = self.server
        if account == b"$G":
            return server.sublist
        if server.accounts is None:
            return None
        found = server.accounts.by_name.get(account.decode(errors="replace"))
        return found.sublist if found is not None else None

    # -- monitoring ---------------------------------------------------------------------------

    def leafz(self, subs: bool = False) -> dict:
        """/leafz's body (monitor.go Leafz) without the server id and time."""
        leafs = []
        for leaf in self.leafs.values():
            record = {"name": leaf.remote_name, "is_spoke": leaf.solicited,
                      "account": leaf.leaf_account_name,
                      "ip": leaf.ip, "port": leaf.port, "rtt": "0s",
                      "in_msgs": leaf.in_msgs, "out_msgs": leaf.out_msgs,
                      "in_bytes": leaf.in_bytes, "out_bytes": leaf.out_bytes,
                      "subscriptions": len(leaf.entries)}
            if subs:
                record["subscriptions_list"] = sorted(
                    subject.decode(errors="replace") for _, subject, _ in leaf.entries)
            if leaf.compression:
                record["compression"] = leaf.compression
            leafs.append(record)
        return {"leafnodes": len(leafs), "leafs": leafs}

    def routez(self, subs: bool = False) -> dict:
        """/routez's body (monitor.go Routez) without the server id and time."""
        return {"num_routes": len(self.route_conns), "routes": [r.record(subs) for r in self.route_conns]}

    def varz(self) -> dict:
        """/varz's cluster object (monitor.go ClusterOptsVarz)."""
        varz = {"name": self.name, "addr": self.host, "cluster_port": self.port,
                "auth_timeout": int(ROUTE_HANDSHAKE_TIMEOUT / 2)}
        if self.configured:
            varz["urls"] = [urllib.parse.urlsplit(u).netloc.rpartition("@")[2] for u in self.configured]
        _tls_varz(varz, self.server.options.cluster_tls)
        varz["pool_size"] = self.pool_size
        return varz

    def leaf_varz(self) -> dict:
        """/varz's leaf object (monitor.go LeafNodeOptsVarz) for the leafnode listener: its
        address, the authorization and TLS timeouts, whether TLS is required and verified."""
        if not self.leaf_port:
            return {}
        options = self.server.options
        varz: dict = {"host": options.leafnode_host, "port": self.leaf_port,
                      "auth_timeout": _go_seconds(self.leaf_auth_timeout())}
        _tls_varz(varz, options.leafnode_tls)
        return varz


def _leaf_mapped(msg: RoutedMsg, mappings) -> RoutedMsg:
    """A leaf's message with the account's subject mapping applied."""
    mapped = mappings.select(msg.subject)
    return msg if mapped is None else dataclasses.replace(msg, subject=mapped)


def _proto(info: dict, key: str = "proto") -> int:
    proto = info.get(key, 0)
    return proto if isinstance(proto, int) and not isinstance(proto, bool) else 0


async def enable_cluster(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The Subsystem entry (natserver.app): run this server's routes."""
    cluster = Cluster(server)
    await cluster.serve(task_status=task_status)
