"""The NATS Streaming engine: clients, channels, subscriptions, durables, queue groups, acks,
maxInFlight, ackWait redelivery and heartbeats, as nats-streaming-server (v0.25.6) does them.

The engine is a client of a NATS server, as nats-streaming-server is: of natserver's own router
(:class:`~natserver.stan.transport.LocalTransport`) or, with ``-ns``, of another server over a
client connection (:class:`~natserver.stan.transport.NatsTransport`). It subscribes to the
discover, publish, subscribe, unsubscribe, sub-close and close subjects and to one ack inbox per
subscription, and answers with core NATS messages. Subscription callbacks run synchronously
while the publisher's chunk (or the connection's read) is handled, so the replies they queue go
out in one write after it; timer-driven sends (redelivery, heartbeats) flush once per round.

Bad input never gets further than the message it came in: every handler decodes with
:mod:`natserver.stan.pb` (which raises only DecodeError) and answers with nats-streaming-server's
error text where it would; an unexpected exception is logged and the message dropped.
"""

from __future__ import annotations

import heapq
import logging
import os
from typing import Literal, overload

import trio

from .. import clock
from ..config.stan import CLIENT_ID_RE, MAX_DELIVERIES_PER_EVENT, StanOptions
from ..server.log import TRACE
from . import errors as err
from . import pb
from .store import STATE_VERSION, STATE_WRITE_DELAY, ChannelStore, StanStore, StanStoreError
from .transport import LocalTransport, NatsConnectError, NatsTransport

__all__ = ["StanEngine", "CLIENT_ID_RE", "valid_channel"]

log = logging.getLogger("natserver.stan")  # -SD/-SV set its level (the core's -D/-V do not have to)

PROTOCOL_ONE = 1  # server.go protocolOne
# Subject prefixes (server.go Default*Prefix); each is followed by ".<cluster id>".
PUB_PREFIX = "_STAN.pub"
SUB_PREFIX = "_STAN.sub"
UNSUB_PREFIX = "_STAN.unsub"
SUB_CLOSE_PREFIX = "_STAN.subclose"
CLOSE_PREFIX = "_STAN.close"
INBOX_PREFIX = "_INBOX."  # nats.NewInbox(): ack inboxes and the engine's request replies
# server.go ensureRunningStandAlone: how long a start waits for another streaming server with
# the same cluster ID to answer on the discover subject.
STANDALONE_CHECK_TIMEOUT = 0.25
NO_RESPONDERS_STATUS = b"NATS/1.0 503"  # a server's answer for a request nobody took (2.2+)


def valid_channel(name: str) -> bool:
    """util.IsChannelNameValid(name, false): no empty token, no wildcard character, no '/'."""
    if not name or name[0] == "." or name[-1] == "." or ".." in name:
        return False
    return not ("*" in name or ">" in name or "/" in name)


def _nuid() -> str:
    return os.urandom(11).hex().upper()


class StanError(Exception):
    """A request refused with one of nats-streaming-server's error texts."""


class StanClient:
    __slots__ = ("id", "hb_inbox", "conn_id", "protocol", "ping_interval", "ping_max_out", "subs", "fhb",
                 "hb_scope", "hb_sleep", "closed")

    def __init__(self, id: str, hb_inbox: str, conn_id: bytes, protocol: int, ping_interval: int,
                 ping_max_out: int) -> None:
        self.id = id
        self.hb_inbox = hb_inbox
        self.conn_id = conn_id
        self.protocol = protocol
        self.ping_interval = ping_interval
        self.ping_max_out = ping_max_out
        self.subs: list[Sub] = []
        self.fhb = 0  # heartbeats failed in a row
        self.hb_scope: trio.CancelScope | None = None
        self.hb_sleep: trio.CancelScope | None = None  # the wait before the next heartbeat
        self.closed = False


class QueueGroup:
    __slots__ = ("name", "members", "last_sent", "shadow", "durable", "next", "rdlv")

    def __init__(self, name: str, last_sent: int, durable: bool) -> None:
        self.name = name  # "durable:group" for durable queue groups
        self.members: list[Sub] = []
        self.last_sent = last_sent
        self.shadow: Sub | None = None  # a durable group's state while it has no member
        self.durable = durable
        self.next = 0  # round robin start among equally loaded members
        self.rdlv: dict[int, int] = {}  # seq -> redeliveries (the group's, as server.go qstate.rdlvCount)


class Sub:
    __slots__ = ("id", "channel", "client_id", "inbox", "ack_inbox", "queue", "durable_name", "is_durable",
                 "max_in_flight", "ack_wait_secs", "last_sent", "pending", "ack_sub", "removed", "delivered", "key",
                 "timer_at", "rdlv")

    def __init__(self, id: int, channel: "Channel", client_id: str, inbox: str, ack_inbox: str, max_in_flight: int,
                 ack_wait_secs: int, durable_name: str = "", is_durable: bool = False, last_sent: int = 0) -> None:
        self.id = id
        self.channel = channel
        self.client_id = client_id  # "" while a durable (or durable queue group) is offline
        self.inbox = inbox
        self.ack_inbox = ack_inbox
        self.queue: QueueGroup | None = None
        self.durable_name = durable_name
        self.is_durable = is_durable
        self.max_in_flight = max_in_flight
        self.ack_wait_secs = ack_wait_secs
        self.last_sent = last_sent
        # seq -> ack deadline (trio clock); kept in deadline order (every send moves it last)
        self.pending: dict[int, float] = {}
        self.ack_sub = None
        self.removed = False
        self.delivered = 0
        self.key = ""  # a plain durable's key in Channel.durables (its client id is kept there)
        self.timer_at: float | None = None  # the deadline of its one live entry in the ack timer heap
        self.rdlv: dict[int, int] = {}  # seq -> redeliveries (not persisted, as in nats-streaming-server)

    @property
    def ack_wait(self) -> float:
        return float(self.ack_wait_secs)


class Channel:
    __slots__ = ("name", "store", "limits", "plain", "durables", "queues", "by_ack_inbox", "next_sub_id",
                 "in_msgs", "in_bytes", "last_activity")

    def __init__(self, name: str, store: ChannelStore, limits) -> None:
        self.name = name
        self.store = store
        self.limits = limits
        self.plain: list[Sub] = []  # active plain (non-queue) subscriptions, durables included
        self.durables: dict[str, Sub] = {}  # durable key -> sub (active or offline)
        self.queues: dict[str, QueueGroup] = {}
        self.by_ack_inbox: dict[str, Sub] = {}
        self.next_sub_id = 1
        self.in_msgs = 0
        self.in_bytes = 0
        self.last_activity = trio.current_time()

    def count_subs(self) -> int:
        return len(self.plain) + sum(len(q.members) for q in self.queues.values())

    def deletable(self) -> bool:
        """No subscription at all (an offline durable or durable queue group counts)."""
        return not self.plain and not self.durables and not self.queues


def durable_key(client_id: str, subject: str, durable: str) -> str:
    return f"{client_id}-{subject}-{durable}"  # server.go durableKey


class StanEngine:
    """One streaming server on top of ``server``. ``await nursery.start(engine.run)``."""

    def __init__(self, server, options: StanOptions, transport=None) -> None:
        options.validate()
        self.server = server
        # where NATS messages come from and go to: natserver's router, or (-ns) a NATS client
        # connection to another server (natserver.stan.transport)
        self.transport = transport if transport is not None else LocalTransport(server)
        self.options = options
        cid = options.cluster_id
        self.server_id = _nuid()
        self.discover_subject = f"{options.discover_prefix}.{cid}"
        self.ping_subject = self.discover_subject + ".pings"
        self.pub_prefix = f"{PUB_PREFIX}.{cid}"
        self.sub_subject = f"{SUB_PREFIX}.{cid}"
        self.unsub_subject = f"{UNSUB_PREFIX}.{cid}"
        self.sub_close_subject = f"{SUB_CLOSE_PREFIX}.{cid}"
        self.close_subject = f"{CLOSE_PREFIX}.{cid}"
        self.reply_prefix = INBOX_PREFIX + _nuid()
        self.clients: dict[str, StanClient] = {}
        self.by_conn_id: dict[bytes, StanClient] = {}
        self.channels: dict[str, Channel] = {}
        self.store = StanStore(server, options)
        self.start_time = clock.now()
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self._subs: list = []
        self._nursery: trio.Nursery | None = None
        self._dup_checks: set[str] = set()
        self._waiting: dict[bytes, trio.Event] = {}
        self._replies: dict[bytes, bytes] = {}  # request replies' payloads, until taken
        self._request_id = 0
        self._timers: list = []  # heap of (deadline, n, sub)
        self._timer_n = 0
        self._timer_scope: trio.CancelScope | None = None
        self._inactivity_scope: trio.CancelScope | None = None
        self._pub_acks: list = []  # (reply, payload) waiting for their file store's flush
        self._flush_wake = trio.Event()
        self._state_wake = trio.Event()
        self._state_dirty = False
        self.running = False
        self.stopping = False  # set by stop_taking_work(): requests are dropped from then on
        self._trace = False

    # -- life cycle ---------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        opts = self.options
        if not self.server.options.quiet and (opts.debug or opts.trace):
            log.setLevel(TRACE if opts.trace else logging.DEBUG)
        else:
            log.setLevel(logging.NOTSET)  # the core's level (-D, -V)
        self._trace = log.isEnabledFor(TRACE)
        log.info("STREAM: Starting nats-streaming-server[%s] version 0.25.6 (natserver)", opts.cluster_id)
        log.info("STREAM: ServerID: %s", self.server_id)
        for line in opts.warnings:
            log.warning("STREAM: %s", line)
        if self.store.jetstream_set_aside:
            log.warning("STREAM: JetStream runs in a cluster here: channels are kept in the streaming store "
                        "(%s), not as JetStream streams", opts.dir if self.store.file else "memory")
        self.store.notify = self._wake_flusher
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                sub = self.transport.subscribe
                self._subs = [sub(self.reply_prefix + ".*", self._on_reply)]
                await self._ensure_running_standalone()
                state = self.store.open()
                self._recover(state)
                self._subs += [
                    sub(self.discover_subject, self._guard(self._on_connect)),
                    sub(self.ping_subject, self._guard(self._on_ping)),
                    sub(self.pub_prefix + ".>", self._guard(self._on_publish)),
                    sub(self.sub_subject, self._guard(self._on_subscribe)),
                    sub(self.unsub_subject, self._guard(self._on_unsubscribe)),
                    sub(self.sub_close_subject, self._guard(self._on_sub_close)),
                    sub(self.close_subject, self._guard(self._on_close)),
                ]
                nursery.start_soon(self._ack_timer_loop)
                nursery.start_soon(self._flusher)
                nursery.start_soon(self._state_writer)
                nursery.start_soon(self._inactivity_loop)
                for client in self.clients.values():
                    nursery.start_soon(self._heartbeats, client)
                for channel in self.channels.values():
                    self._deliver_channel(channel)
                self.transport.flush()
                self.running = True
                log.info("STREAM: Message store is %s", "FILE" if self.store.file else "MEMORY")
                if self.store.file:
                    log.info("STREAM: Store location: %s", opts.dir)
                log.info("STREAM: Streaming Server is ready")
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self.running = False
            self._nursery = None
            for s in self._subs:
                self._unsubscribe(s)
            for channel in self.channels.values():
                for s in list(channel.by_ack_inbox.values()):
                    self._unsubscribe(s.ack_sub)
            try:
                self.store.write_state_now(self.snapshot())
            except OSError as exc:
                log.error("STREAM: writing the subscription state failed: %s", exc)
            self.store.close([c.store for c in self.channels.values()])

    def stop_taking_work(self) -> None:
        """Answer no request from now on (connect, publish, subscribe, unsubscribe, close).

        nats-streaming-server's Shutdown on SIGINT/SIGTERM first closes its NATS connections, so
        a request a client sends after the signal goes unanswered (node-nats-streaming's
        'subscribe emits timeout' counts on it). Safe to call from a signal handler: it only
        sets a flag the callbacks read."""
        self.stopping = True

    def _unsubscribe(self, sub) -> None:
        if sub is None:
            return
        try:
            self.transport.unsubscribe(sub)
        except Exception:  # the server may be half torn down already
            pass

    def _guard(self, handler):
        """A subscription callback that never lets an exception reach the router."""

        def callback(subject, reply, headers, payload):
            if self.stopping:
                return
            try:
                handler(reply.decode("utf-8", "surrogateescape") if reply else "", payload)
            except Exception:
                log.exception("STREAM: internal error handling a message on %r", subject)

        return callback

    # -- sending ------------------------------------------------------------------------------

    def _send(self, subject: str, payload: bytes, reply: str | None = None) -> bool | None:
        """Publish; False when nobody took it (natserver's own router knows: no responders),
        None when the transport cannot tell (a connection to another server)."""
        return self.transport.publish(subject, payload, reply)

    def _respond(self, reply: str, message: pb.Message) -> None:
        if reply:
            self._send(reply, message.encode())

    def _request(self, subject: str, payload: bytes = b"") -> tuple[bytes, trio.Event, bool]:
        self._request_id += 1
        token = b"%d" % self._request_id
        event = trio.Event()
        self._waiting[token] = event
        taken = self._send(subject, payload, self.reply_prefix + ".%d" % self._request_id) is not False
        self.transport.flush()
        return token, event, taken

    async def request(self, subject: str, timeout: float, payload: bytes = b"") -> bytes | None:
        """Send a request to ``subject``; the reply's payload when one came within ``timeout``
        (None at once when nobody took the request)."""
        token, event, taken = self._request(subject, payload)
        try:
            if taken:
                with trio.move_on_after(timeout):
                    await event.wait()
            return self._replies.pop(token, None)
        finally:
            self._waiting.pop(token, None)
            self._replies.pop(token, None)

    def _on_reply(self, subject, reply, headers, payload) -> None:
        token = subject.rpartition(b".")[2]
        event = self._waiting.pop(token, None)
        if event is not None:
            if not (headers and bytes(headers[:12]) == NO_RESPONDERS_STATUS):  # (through -ns: the 503)
                self._replies[token] = bytes(payload)
            event.set()

    async def _ensure_running_standalone(self) -> None:
        """server.go ensureRunningStandAlone: a streaming server already serving this cluster ID
        (another natserver of the NATS cluster, a nats-streaming-server on it) answers a
        connect request on the discover subject; then this one does not start (its connect
        undone with a close request), rather than serve the same channels apart."""
        cid = self.options.cluster_id
        connect = pb.ConnectRequest(clientID=cid, heartbeatInbox=INBOX_PREFIX + _nuid())
        answer = await self.request(self.discover_subject, STANDALONE_CHECK_TIMEOUT, connect.encode())
        if answer is None:
            log.debug("STREAM: Did not detect another server instance")
            return
        try:
            other = pb.ConnectResponse.decode(answer)
        except pb.DecodeError:
            raise RuntimeError("streaming: unmarshall error while detecting another server instance") from None
        if other.closeRequests:
            self._send(other.closeRequests, pb.CloseRequest(clientID=cid).encode(), self.reply_prefix + ".close")
            self.transport.flush()
        raise RuntimeError(f'streaming: discovered another streaming server with cluster ID "{cid}"')

    # -- connect, ping, close -----------------------------------------------------------------

    def _on_connect(self, reply: str, data: bytes) -> None:
        try:
            req = pb.ConnectRequest.decode(data)
        except pb.DecodeError:
            req = None
        if req is None or not req.heartbeatInbox:
            log.error("STREAM: [Client:?] Invalid conn request")
            return self._respond(reply, pb.ConnectResponse(error=err.INVALID_CONN_REQ))
        if not CLIENT_ID_RE.fullmatch(req.clientID):
            log.error("STREAM: [Client:%s] Invalid ClientID, only alphanumeric and `-` or `_` characters allowed",
                      req.clientID)
            return self._respond(reply, pb.ConnectResponse(error=err.INVALID_CLIENT_ID))
        old = self.clients.get(req.clientID)
        limit = self.options.max_clients
        if old is None and limit and len(self.clients) >= limit:
            log.error("STREAM: [Client:%s] Connect failed: maximum clients (%d) reached", req.clientID, limit)
            return self._respond(reply, pb.ConnectResponse(error=err.MAX_CLIENTS))
        if old is not None:
            if req.clientID in self._dup_checks:
                return self._respond(reply, pb.ConnectResponse(error=err.INVALID_CLIENT))
            self._dup_checks.add(req.clientID)
            assert self._nursery is not None  # requests are served while run() runs
            self._nursery.start_soon(self._check_duplicate, req, reply, old)
            return
        self._register(req, reply)

    async def _check_duplicate(self, req: pb.ConnectRequest, reply: str, old: StanClient) -> None:
        """server.go isDuplicateConnect: the old client answering its heartbeat inbox means a
        duplicate; silence means it is gone and the new one replaces it."""
        try:
            alive = await self.request(old.hb_inbox, self.options.dup_client_id_timeout) is not None
            if alive:
                log.debug("STREAM: [Client:%s] Connect failed; already connected", req.clientID)
                self._respond(reply, pb.ConnectResponse(error=err.INVALID_CLIENT))
            else:
                if self.clients.get(req.clientID) is old:
                    self._close_client(old)
                self._register(req, reply, replaced=True)
        finally:
            self._dup_checks.discard(req.clientID)
            self.transport.flush()

    def _register(self, req: pb.ConnectRequest, reply: str, replaced: bool = False) -> None:
        client = StanClient(req.clientID, req.heartbeatInbox, req.connID, req.protocol, req.pingInterval,
                            req.pingMaxOut)
        self.clients[client.id] = client
        if client.conn_id:
            self.by_conn_id[client.conn_id] = client
        assert self._nursery is not None  # requests are served while run() runs
        self._nursery.start_soon(self._heartbeats, client)
        log.debug("STREAM: [Client:%s] %s (Inbox=%s)", client.id, "Replaced old client" if replaced else "Connected",
                  client.hb_inbox)
        resp = pb.ConnectResponse(pubPrefix=self.pub_prefix, subRequests=self.sub_subject,
                                  unsubRequests=self.unsub_subject, closeRequests=self.close_subject,
                                  subCloseRequests=self.sub_close_subject, protocol=PROTOCOL_ONE)
        if req.protocol >= PROTOCOL_ONE:
            resp.pingRequests = self.ping_subject
            resp.pingInterval = req.pingInterval
            resp.pingMaxOut = req.pingMaxOut
        self._respond(reply, resp)
        self._changed()

    def _on_ping(self, reply: str, data: bytes) -> None:
        if not data:
            return
        try:
            ping = pb.Ping.decode(data)
        except pb.DecodeError:
            return
        client = self.by_conn_id.get(ping.connID)
        if client is not None:
            if client.fhb and client.hb_sleep is not None:
                client.hb_sleep.cancel()  # it is alive after all: heartbeat it now, to clear the failures
            self._respond(reply, pb.PingResponse())
        else:
            self._respond(reply, pb.PingResponse(error=err.PING_CLIENT_REPLACED))

    def _on_close(self, reply: str, data: bytes) -> None:
        try:
            req = pb.CloseRequest.decode(data)
        except pb.DecodeError:
            log.error("STREAM: Received invalid close request")
            return self._respond(reply, pb.CloseResponse(error=err.INVALID_CLOSE_REQ))
        client = self.clients.get(req.clientID)
        if client is None:
            log.error("STREAM: Unknown client %r in close request", req.clientID)
            return self._respond(reply, pb.CloseResponse(error=err.UNKNOWN_CLIENT))
        self._close_client(client)
        log.debug("STREAM: [Client:%s] Closed (Inbox=%s)", client.id, client.hb_inbox)
        self._respond(reply, pb.CloseResponse())

    def _close_client(self, client: StanClient) -> None:
        """Unregister the client: its plain subscriptions go, its durables are suspended."""
        if self.clients.get(client.id) is client:
            del self.clients[client.id]
        if self.by_conn_id.get(client.conn_id) is client:
            del self.by_conn_id[client.conn_id]
        client.closed = True
        if client.hb_scope is not None:
            client.hb_scope.cancel()
        for sub in list(client.subs):
            self._remove_sub(sub, unsubscribe=False)
        self._changed()

    async def _heartbeats(self, client: StanClient) -> None:
        opts = self.options
        with trio.CancelScope() as scope:
            client.hb_scope = scope
            if client.closed:
                return
            while True:
                with trio.CancelScope() as sleep:
                    client.hb_sleep = sleep
                    await trio.sleep(opts.hb_interval)
                client.hb_sleep = None
                alive = await self.request(client.hb_inbox, opts.hb_timeout) is not None
                if client.closed:
                    return
                if alive:
                    client.fhb = 0
                    continue
                client.fhb += 1
                if client.fhb > opts.hb_fail_count:
                    log.error("STREAM: [Client:%s] Timed out on heartbeats", client.id)
                    self._close_client(client)
                    self.transport.flush()
                    return

    # -- publish ------------------------------------------------------------------------------

    def _on_publish(self, reply: str, data: bytes) -> None:
        try:
            msg = pb.PubMsg.decode(data)
        except pb.DecodeError:
            log.error("STREAM: Unable to unmarshal PubMsg")
            return self._respond(reply, pb.PubAck(error=err.INVALID_PUB_REQ))
        self.in_msgs += 1
        self.in_bytes += len(data)
        if not msg.guid or not valid_channel(msg.subject):
            return self._respond(reply, pb.PubAck(guid=msg.guid, error=err.INVALID_PUB_REQ))
        if self._trace:
            log.log(TRACE, "STREAM: [Client:%s] Received message from publisher subj=%s guid=%s", msg.clientID,
                    msg.subject, msg.guid)
        client = self.clients.get(msg.clientID)
        if client is None or (msg.connID and msg.connID != client.conn_id):
            log.error("STREAM: Received invalid client publish message (client %r)", msg.clientID)
            return self._respond(reply, pb.PubAck(guid=msg.guid, error=err.INVALID_PUB_REQ))
        try:
            channel = self._channel(msg.subject)
            channel.store.add(msg.data, clock.now_ns())
        except (StanError, StanStoreError) as exc:
            return self._respond(reply, pb.PubAck(guid=msg.guid, error=str(exc)))
        except Exception as exc:  # StoreError (a closed store) and the like
            log.error("STREAM: storing a message on %r failed: %s", msg.subject, exc)
            return self._respond(reply, pb.PubAck(guid=msg.guid, error=str(exc)))
        channel.in_msgs += 1
        channel.in_bytes += len(msg.data)
        channel.last_activity = trio.current_time()
        if reply:
            ack = pb.PubAck(guid=msg.guid).encode()
            if channel.store.file_backed or self._pub_acks:
                self._pub_acks.append((reply, ack))
                self._wake_flusher()
            else:
                self._send(reply, ack)
        self._deliver_channel(channel)

    def _wake_flusher(self) -> None:
        if not self._flush_wake.is_set():
            self._flush_wake.set()

    async def _flusher(self) -> None:
        """PubAcks of file-backed channels go out once their messages are written and synced."""
        while True:
            await self._flush_wake.wait()
            self._flush_wake = trio.Event()
            acks, self._pub_acks = self._pub_acks, []
            try:
                await self.store.flush()
            except Exception:
                log.exception("STREAM: flushing the message stores failed")
                continue  # no acks: the publishers time out and retry
            for reply, payload in acks:
                self._send(reply, payload)
            self.transport.flush()

    def _channel(self, name: str, create: bool = True) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            if not create:
                raise StanError(err.UNKNOWN_CHANNEL)
            limit = self.options.max_channels
            if limit and len(self.channels) >= limit:
                raise StanError(err.TOO_MANY_CHANNELS)
            limits = self.options.limits_for(name)
            channel = Channel(name, self.store.create(name, limits), limits)
            self.channels[name] = channel
            log.debug("STREAM: Channel %r has been created", name)
            if limits.max_inactivity and self._inactivity_scope is not None:
                self._inactivity_scope.cancel()
            self._changed()
        return channel

    # -- subscribe ----------------------------------------------------------------------------

    def _on_subscribe(self, reply: str, data: bytes) -> None:
        try:
            req = pb.SubscriptionRequest.decode(data)
        except pb.DecodeError:
            return self._respond(reply, pb.SubscriptionResponse(error=err.INVALID_SUB_REQ))
        error = None
        if not req.clientID:
            error = err.MISSING_CLIENT
        elif req.ackWaitInSecs <= 0:
            error = err.INVALID_ACK_WAIT
        elif req.maxInFlight <= 0:
            error = err.INVALID_MAX_INFLIGHT
        elif not pb.NEW_ONLY <= req.startPosition <= pb.FIRST:
            error = err.INVALID_START
        elif not valid_channel(req.subject):
            error = err.INVALID_SUBJECT
        elif req.clientID not in self.clients:
            error = err.UNKNOWN_CLIENT
        if error is None:
            try:
                channel = self._channel(req.subject)
                sub, resumed = self._add_sub(channel, req)
            except (StanError, StanStoreError) as exc:
                error = str(exc)
        if error is not None:
            log.error("STREAM: [Client:%s] Unable to create subscription on %r: %s", req.clientID, req.subject, error)
            return self._respond(reply, pb.SubscriptionResponse(error=error))
        self._respond(reply, pb.SubscriptionResponse(ackInbox=sub.ack_inbox))
        if resumed and sub.pending:
            self._redeliver(sub, all_pending=True)
        if sub.queue is not None:
            self._deliver_group(sub.queue)
        else:
            self._deliver_sub(sub)
        self._changed()

    def _add_sub(self, channel: Channel, req: pb.SubscriptionRequest) -> tuple[Sub, bool]:
        """server.go processSub: a new subscription, a resumed durable, or a queue member."""
        qname = req.qGroup
        durable_name = req.durableName
        is_durable = False
        sub = None
        group = None
        set_start = True
        if qname:
            if durable_name:
                if ":" in durable_name:
                    raise StanError(err.INVALID_DUR_NAME)
                is_durable = True
                qname = f"{durable_name}:{qname}"
                durable_name = ""
            group = channel.queues.get(qname)
            if group is not None:
                set_start = False
                if group.shadow is not None:
                    sub, group.shadow = group.shadow, None
        elif durable_name:
            sub = channel.durables.get(durable_key(req.clientID, req.subject, durable_name))
            if sub is not None:
                if sub.client_id:
                    raise StanError(err.DUP_DURABLE)
                set_start = False
            is_durable = True
        if sub is None:
            limit = channel.limits.max_subs
            if limit and channel.count_subs() >= limit:
                raise StanError(err.TOO_MANY_SUBS)
        client = self.clients[req.clientID]
        ack_inbox = INBOX_PREFIX + _nuid()
        resumed = sub is not None
        if sub is not None:
            sub.ack_inbox = ack_inbox
            sub.client_id = req.clientID
            sub.inbox = req.inbox
            sub.max_in_flight = req.maxInFlight
            sub.ack_wait_secs = req.ackWaitInSecs
            sub.removed = False
        else:
            last_sent = self._start_sequence(channel.store, req) if set_start else 0
            sub = Sub(channel.next_sub_id, channel, req.clientID, req.inbox, ack_inbox, req.maxInFlight,
                      req.ackWaitInSecs, durable_name, is_durable, last_sent)
            channel.next_sub_id += 1
        if qname:
            if group is None:
                group = QueueGroup(qname, sub.last_sent, is_durable)
                channel.queues[qname] = group
            sub.queue = group
            group.members.append(sub)
        else:
            channel.plain.append(sub)
            if is_durable and not resumed:
                sub.key = durable_key(req.clientID, req.subject, durable_name)
                channel.durables[sub.key] = sub
        client.subs.append(sub)
        self._listen_acks(sub)
        return sub, resumed

    def _listen_acks(self, sub: Sub) -> None:
        channel = sub.channel
        channel.by_ack_inbox[sub.ack_inbox] = sub
        inbox = sub.ack_inbox

        def on_ack(subject, reply, headers, payload):
            try:
                self._on_ack(channel, inbox, payload)
            except Exception:
                log.exception("STREAM: internal error handling an ack on %r", inbox)

        sub.ack_sub = self.transport.subscribe(inbox, on_ack)

    @staticmethod
    def _start_sequence(store: ChannelStore, req: pb.SubscriptionRequest) -> int:
        """server.go setSubStartSequence: the last sent sequence a new subscription starts from."""
        position = req.startPosition
        if position == pb.NEW_ONLY:
            return store.last_seq
        if position == pb.LAST_RECEIVED:
            return max(store.last_seq - 1, 0) if store.msgs.msgs else store.last_seq
        if position == pb.TIME_DELTA_START:
            seq = store.seq_from_timestamp(clock.now_ns() - req.startTimeDelta)
            return seq - 1 if seq > 0 else 0
        if position == pb.SEQUENCE_START:
            first, last = store.first_seq, store.last_seq
            if req.startSequence < first:
                return first - 1
            if req.startSequence > last:
                return last
            return req.startSequence - 1 if req.startSequence > 0 else 0
        return store.first_seq - 1  # FIRST

    # -- unsubscribe, sub-close ---------------------------------------------------------------

    def _on_unsubscribe(self, reply: str, data: bytes) -> None:
        self._unsub_or_close(reply, data, close=False)

    def _on_sub_close(self, reply: str, data: bytes) -> None:
        self._unsub_or_close(reply, data, close=True)

    def _unsub_or_close(self, reply: str, data: bytes, close: bool) -> None:
        try:
            req = pb.UnsubscribeRequest.decode(data)
        except pb.DecodeError:
            return self._respond(reply, pb.SubscriptionResponse(error=err.INVALID_UNSUB_REQ))
        channel = self.channels.get(req.subject)
        if channel is None:
            return self._respond(reply, pb.SubscriptionResponse(error=err.UNKNOWN_CHANNEL))
        sub = channel.by_ack_inbox.get(req.inbox)
        if sub is None:
            sub = next((s for s in channel.by_ack_inbox.values() if s.inbox == req.inbox), None)
        if sub is None:
            return self._respond(reply, pb.SubscriptionResponse(error=err.INVALID_SUB))
        client = self.clients.get(req.clientID)
        if client is None or sub not in client.subs:
            return self._respond(reply, pb.SubscriptionResponse(error=err.UNKNOWN_CLIENT))
        self._remove_sub(sub, unsubscribe=not close)
        self._respond(reply, pb.SubscriptionResponse())

    def _remove_sub(self, sub: Sub, unsubscribe: bool) -> None:
        """Unsubscribe (the state goes) or close (a durable's state stays, offline)."""
        channel = sub.channel
        client = self.clients.get(sub.client_id)
        if client is not None and sub in client.subs:
            client.subs.remove(sub)
        else:
            for c in self.clients.values():
                if sub in c.subs:
                    c.subs.remove(sub)
        channel.by_ack_inbox.pop(sub.ack_inbox, None)
        self._unsubscribe(sub.ack_sub)
        sub.ack_sub = None
        group = sub.queue
        if group is not None:
            if sub in group.members:
                group.members.remove(sub)
            if not group.members:
                if group.durable and not unsubscribe:
                    sub.client_id = ""
                    group.shadow = sub  # keeps the pending messages for the next member
                    group.last_sent = max(group.last_sent, sub.last_sent)
                else:
                    sub.removed = True
                    channel.queues.pop(group.name, None)
            else:
                sub.removed = True
                pending, sub.pending = sub.pending, {}
                for seq in pending:  # the group's other members get them (flagged redelivered)
                    msg = channel.store.load(seq)
                    if msg is not None:
                        member = self._pick_member(group, force=True)
                        self._send_msg(member, msg, True)
                self._deliver_group(group)
        else:
            if sub in channel.plain:
                channel.plain.remove(sub)
            if sub.is_durable and not unsubscribe:
                sub.client_id = ""  # offline: pending and last sent kept for the resume
            else:
                sub.removed = True
                if sub.key:
                    channel.durables.pop(sub.key, None)
        channel.last_activity = trio.current_time()
        if channel.limits.max_inactivity and self._inactivity_scope is not None:
            self._inactivity_scope.cancel()  # recompute the next deadline
        self._changed()

    # -- acks and delivery --------------------------------------------------------------------

    def _on_ack(self, channel: Channel, inbox: str, data: bytes) -> None:
        sub = channel.by_ack_inbox.get(inbox)
        if sub is None:
            return
        try:
            ack = pb.Ack.decode(data)
        except pb.DecodeError:
            return
        if self._trace:
            log.log(TRACE, "STREAM: [Client:%s] Processing ack for subid=%d, subject=%s, seq=%d", sub.client_id,
                    sub.id, channel.name, ack.sequence)
        if sub.pending.pop(ack.sequence, None) is None:
            return
        rdlv = sub.queue.rdlv if sub.queue is not None else sub.rdlv
        if rdlv:
            rdlv.pop(ack.sequence, None)
        self._changed()
        if sub.queue is not None:
            self._deliver_group(sub.queue)
        elif len(sub.pending) < sub.max_in_flight:
            self._deliver_sub(sub)

    def _send_msg(self, sub: Sub, msg, redelivered: bool) -> None:
        count = 0
        if redelivered:
            rdlv = sub.queue.rdlv if sub.queue is not None else sub.rdlv
            count = rdlv[msg.seq] = rdlv.get(msg.seq, 0) + 1
        payload = pb.MsgProto(sequence=msg.seq, subject=sub.channel.name, data=msg.data, timestamp=msg.ts,
                              redelivered=redelivered, redeliveryCount=count).encode()
        self.transport.publish(sub.inbox, payload)
        if self._trace:
            log.log(TRACE, "STREAM: [Client:%s] %s msg to subid=%d, subject=%s, seq=%d", sub.client_id,
                    "Redelivering" if redelivered else "Delivering", sub.id, sub.channel.name, msg.seq)
        self.out_msgs += 1
        self.out_bytes += len(msg.data)
        sub.delivered += 1
        pending = sub.pending
        deadline = trio.current_time() + sub.ack_wait
        pending.pop(msg.seq, None)
        pending[msg.seq] = deadline
        self._schedule(sub, deadline)

    def _deliver_channel(self, channel: Channel) -> None:
        for sub in list(channel.plain):
            self._deliver_sub(sub)
        for group in list(channel.queues.values()):
            self._deliver_group(group)

    def _deliver_sub(self, sub: Sub) -> None:
        if not sub.client_id or sub.removed:
            return
        store = sub.channel.store
        pending = sub.pending
        sent = 0
        while len(pending) < sub.max_in_flight and sent < MAX_DELIVERIES_PER_EVENT:
            seq = store.next_seq(sub.last_sent)
            if not seq:
                break
            sub.last_sent = seq
            msg = store.load(seq)
            if msg is not None:
                self._send_msg(sub, msg, False)
                sent += 1
        if sent:
            self._changed()

    @overload
    def _pick_member(self, group: QueueGroup, force: Literal[True]) -> Sub: ...
    @overload
    def _pick_member(self, group: QueueGroup, force: bool = False) -> Sub | None: ...
    def _pick_member(self, group: QueueGroup, force: bool = False) -> Sub | None:
        """The member with the fewest unacknowledged messages and room for one more (any
        member with ``force``), rotating among equals."""
        members = group.members
        n = len(members)
        best = None
        for i in range(n):
            member = members[(group.next + i) % n]
            load = len(member.pending)
            if not force and load >= member.max_in_flight:
                continue
            if best is None or load < len(best.pending):
                best = member
        if best is not None:
            group.next = (members.index(best) + 1) % n
        return best

    def _deliver_group(self, group: QueueGroup) -> None:
        if not group.members:
            return
        store = group.members[0].channel.store
        sent = 0
        while sent < MAX_DELIVERIES_PER_EVENT:
            seq = store.next_seq(group.last_sent)
            if not seq:
                break
            member = self._pick_member(group)
            if member is None:
                break
            group.last_sent = seq
            member.last_sent = seq
            msg = store.load(seq)
            if msg is not None:
                self._send_msg(member, msg, False)
                sent += 1
        if sent:
            self._changed()

    def _redeliver(self, sub: Sub, all_pending: bool = False) -> None:
        """Send again (flagged) what waited longer than ackWait (everything with
        ``all_pending``: a resumed durable). Messages gone from the store are dropped."""
        now = trio.current_time()
        if sub.queue is None and not all_pending:
            client = self.clients.get(sub.client_id)
            if client is not None and client.fhb:
                # server.go: no redelivery to a client missing heartbeats; try again later
                self._schedule(sub, now + sub.ack_wait)
                return
        due = []
        for seq, deadline in sub.pending.items():
            if not all_pending and deadline > now:
                break
            due.append(seq)
        store = sub.channel.store
        group = sub.queue
        target = self._healthy_member(sub, group) if group is not None else sub
        for seq in due:
            msg = store.load(seq)
            if msg is None:
                sub.pending.pop(seq, None)
                continue
            if target is not sub:
                sub.pending.pop(seq, None)
            self._send_msg(target, msg, True)
        if sub.pending:
            self._schedule(sub, next(iter(sub.pending.values())))

    def _healthy_member(self, sub: Sub, group: QueueGroup) -> Sub:
        """Where a queue member's redeliveries go: the member itself, unless its client is
        failing heartbeats and another member's is not (server.go performAckExpirationRedelivery)."""
        client = self.clients.get(sub.client_id)
        if client is None or not client.fhb:
            return sub
        healthy = [m for m in group.members
                   if m is not sub and (c := self.clients.get(m.client_id)) is not None and not c.fhb]
        return min(healthy, key=lambda m: len(m.pending)) if healthy else sub

    def _schedule(self, sub: Sub, deadline: float) -> None:
        """Make sure the ack timer looks at ``sub`` by ``deadline``. One live heap entry per
        subscription (older ones are skipped when popped), so the heap stays as small as the
        number of subscriptions with pending messages."""
        if sub.timer_at is not None and sub.timer_at <= deadline:
            return
        sub.timer_at = deadline
        self._timer_n += 1
        heapq.heappush(self._timers, (deadline, self._timer_n, sub))
        scope = self._timer_scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

    async def _ack_timer_loop(self) -> None:
        timers = self._timers
        while True:
            now = trio.current_time()
            fired = False
            while timers and timers[0][0] <= now:
                at, _, sub = heapq.heappop(timers)
                if at != sub.timer_at:
                    continue  # superseded by an earlier entry
                sub.timer_at = None
                if sub.removed or not sub.client_id or not sub.pending:
                    continue  # gone, or offline (a durable's pending wait for its resume)
                try:
                    self._redeliver(sub)
                except Exception:
                    log.exception("STREAM: redelivery failed")
                fired = True
            if fired:
                self.transport.flush()
            with trio.CancelScope() as scope:
                if timers:
                    scope.deadline = timers[0][0]
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None

    # -- channel inactivity -------------------------------------------------------------------

    async def _inactivity_loop(self) -> None:
        """Delete channels with max_inactivity set that had no subscription and no new message
        for that long (server.go handleChannelDelete)."""
        while True:
            now = trio.current_time()
            deadline = None
            for channel in list(self.channels.values()):
                limit = channel.limits.max_inactivity
                if not limit or not channel.deletable():
                    continue
                due = channel.last_activity + limit
                if due <= now:
                    self._delete_channel(channel)
                elif deadline is None or due < deadline:
                    deadline = due
            with trio.CancelScope() as scope:
                self._inactivity_scope = scope
                if deadline is not None:
                    scope.deadline = deadline
                await trio.sleep_forever()  # or until a sub removal / new channel cancels it
            self._inactivity_scope = None

    def _delete_channel(self, channel: Channel) -> None:
        self.channels.pop(channel.name, None)
        try:
            self.store.delete(channel.store)
        except OSError as exc:
            log.error("STREAM: Error deleting channel %r: %s", channel.name, exc)
        log.info("STREAM: Channel %r has been deleted", channel.name)
        self._changed()

    # -- state --------------------------------------------------------------------------------

    def _changed(self) -> None:
        if self.store.file and not self._state_wake.is_set():
            self._state_wake.set()

    async def _state_writer(self) -> None:
        while True:
            await self._state_wake.wait()
            await trio.sleep(STATE_WRITE_DELAY)
            self._state_wake = trio.Event()
            try:
                await self.store.write_state(self.snapshot())
            except OSError as exc:
                log.error("STREAM: writing the subscription state failed: %s", exc)

    def snapshot(self) -> dict:
        clients = [{"id": c.id, "hb_inbox": c.hb_inbox, "conn_id": c.conn_id.hex(), "protocol": c.protocol,
                    "ping_interval": c.ping_interval, "ping_max_out": c.ping_max_out}
                   for c in self.clients.values()]
        channels = {}
        for name, channel in self.channels.items():
            subs = []
            seen = set()
            everything = list(channel.plain) + list(channel.durables.values())
            for group in channel.queues.values():
                everything += group.members
                if group.shadow is not None:
                    everything.append(group.shadow)
            for sub in everything:
                if id(sub) in seen or sub.removed:
                    continue
                seen.add(id(sub))
                subs.append({
                    "id": sub.id, "client_id": sub.client_id, "inbox": sub.inbox, "ack_inbox": sub.ack_inbox,
                    "queue": sub.queue.name if sub.queue is not None else "", "durable_name": sub.durable_name,
                    "is_durable": sub.is_durable, "max_in_flight": sub.max_in_flight,
                    "ack_wait": sub.ack_wait_secs, "last_sent": sub.last_sent, "pending": list(sub.pending),
                    "key": sub.key,
                })
            channels[name] = {"next_sub_id": channel.next_sub_id, "subs": subs,
                              "queues": {q.name: {"last_sent": q.last_sent, "durable": q.durable}
                                         for q in channel.queues.values()}}
        return {"version": STATE_VERSION, "cluster_id": self.options.cluster_id, "clients": clients,
                "channels": channels}

    def _recover(self, state: dict) -> None:
        for c in state.get("clients", []):
            client = StanClient(c["id"], c["hb_inbox"], bytes.fromhex(c.get("conn_id", "")), c.get("protocol", 0),
                                c.get("ping_interval", 0), c.get("ping_max_out", 0))
            self.clients[client.id] = client
            if client.conn_id:
                self.by_conn_id[client.conn_id] = client
        saved = state.get("channels", {})
        now = trio.current_time()
        for name in self.store.recovered_channel_names(state):
            try:
                channel = self._channel(name)
            except (StanError, StanStoreError) as exc:
                log.error("STREAM: can not recover channel %r: %s", name, exc)
                continue
            info = saved.get(name, {})
            channel.next_sub_id = info.get("next_sub_id", 1)
            for qname, q in info.get("queues", {}).items():
                channel.queues[qname] = QueueGroup(qname, q.get("last_sent", 0), q.get("durable", False))
            for s in info.get("subs", []):
                sub = Sub(s["id"], channel, s["client_id"], s["inbox"], s["ack_inbox"], s["max_in_flight"],
                          s["ack_wait"], s.get("durable_name", ""), s.get("is_durable", False), s["last_sent"])
                for seq in s.get("pending", []):
                    sub.pending[seq] = now + sub.ack_wait
                owner = self.clients.get(sub.client_id)
                if sub.client_id and owner is None:
                    if not sub.is_durable:
                        continue
                    sub.client_id = ""
                group = channel.queues.get(s.get("queue", ""))
                if s.get("queue"):
                    if group is None:
                        group = channel.queues[s["queue"]] = QueueGroup(s["queue"], sub.last_sent, sub.is_durable)
                    sub.queue = group
                    if sub.client_id:
                        group.members.append(sub)
                    else:
                        group.shadow = sub
                else:
                    if sub.client_id:
                        channel.plain.append(sub)
                    sub.key = s.get("key", "")
                    if sub.key:
                        channel.durables[sub.key] = sub
                if owner is not None:
                    owner.subs.append(sub)
                    self._listen_acks(sub)
                    if sub.pending:
                        self._schedule(sub, now + sub.ack_wait)
            for qname, group in list(channel.queues.items()):
                if not group.members and group.shadow is None:
                    del channel.queues[qname]
        if self.clients or self.channels:
            log.info("STREAM: Recovered %d channel(s), %d client(s)", len(self.channels), len(self.clients))

    # -- monitoring ---------------------------------------------------------------------------

    def channel_subs(self, channel: Channel) -> list[Sub]:
        subs = list(channel.plain)
        for durable in channel.durables.values():
            if durable not in subs:
                subs.append(durable)
        for group in channel.queues.values():
            subs += group.members
            if group.shadow is not None:
                subs.append(group.shadow)
        return subs


async def serve_stan(server, stan_options: StanOptions, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the streaming layer on ``server`` until cancelled; ``task_status.started(engine)``.
    With ``nats_server_url`` (``-ns``) the engine is a client of that NATS server; the first
    connection failing raises NatsConnectError (nats-streaming-server does not start either)."""
    if not stan_options.nats_server_url:
        engine = StanEngine(server, stan_options)
        server.stan = engine
        try:
            await engine.run(task_status=task_status)
        finally:
            server.stan = None
        return
    core = server.options
    # server.go createNatsClientConn: the command line's -user/-pass/-auth come first
    transport = NatsTransport(stan_options, name=f"_NSS-{stan_options.cluster_id}-general",
                              username=core.username or "", password=core.password or "",
                              token=core.authorization or "")
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(transport.run)
        except NatsConnectError as exc:
            log.critical("STREAM: Failed to start: %s", exc)  # nats-streaming-server's fatal line
            raise
        log.info("STREAM: Connected to NATS server at %s", transport.server_info.get("_url", ""))
        engine = StanEngine(server, stan_options, transport)
        server.stan = engine
        try:
            await engine.run(task_status=task_status)
        finally:
            server.stan = None
            nursery.cancel_scope.cancel()
