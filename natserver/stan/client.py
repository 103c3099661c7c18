"""A small NATS Streaming (STAN) client for asyncio on nats-py: publish with acknowledgement,
subscribe (start positions, durables, queue groups, manual acks, maxInFlight, ackWait), ack,
unsubscribe, close. It talks to any STAN server (natserver ``--stan``, nats-streaming-server).

Python has no maintained STAN client: stan.py (``asyncio-nats-streaming`` 0.4.0, 2019) needs
protobuf <= 3.20.3 and asyncio-nats-client 0.x, and passes ``loop=`` to asyncio calls that
Python 3.10 removed. This module is natserver's own, on nats-py (the ``stan`` extra) and the
protocol codec of :mod:`natserver.stan.pb` (no protobuf)::

    import nats
    from natserver.stan.client import connect

    nc = await nats.connect("nats://127.0.0.1:4222")
    sc = await connect(nc, "test-cluster", "client-1")
    await sc.publish("orders", b"hello")                # returns once the server stored it

    async def handler(msg):                             # msg.seq, .data, .timestamp, .redelivered
        print(msg.seq, msg.data)

    sub = await sc.subscribe("orders", handler, start="first", durable_name="audit")
    ...
    await sub.close()                                   # keeps the durable; unsubscribe() drops it
    await sc.close()                                    # then nc.close(): the connection is yours

Errors are :class:`StanError` with the server's text (``stan: unknown clientID``) or stan.go's
timeout texts (``stan: subscribe request timeout``...). Defaults are stan.go's (``stan.go``,
``sub.go``): ackWait 30 s, maxInFlight 1024, connect/request wait 2 s, publish ack wait 30 s.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

from . import pb

if TYPE_CHECKING:
    from nats.aio.subscription import Subscription as NatsSubscription

__all__ = ["connect", "StanClient", "Subscription", "Msg", "StanError"]

DEFAULT_DISCOVER_PREFIX = "_STAN.discover"  # stan.go DefaultDiscoverPrefix
DEFAULT_CONNECT_WAIT = 2.0  # stan.go DefaultConnectWait: connect, subscribe, unsubscribe, close requests
DEFAULT_PUB_ACK_WAIT = 30.0  # stan.go DefaultPubAckWait
DEFAULT_ACK_WAIT = 30  # seconds; stan.go DefaultAckWait
DEFAULT_MAX_INFLIGHT = 1024  # stan.go DefaultMaxInflight
DEFAULT_PING_INTERVAL = 5  # seconds; stan.go DefaultPingInterval (sent in the connect request)
DEFAULT_PING_MAX_OUT = 88  # stan.go DefaultPingMaxOut
PROTOCOL_ONE = 1  # stan.go protocolOne: the server answers pings and checks connection ids

# stan.go's error texts
CONNECT_TIMEOUT = "stan: connect request timeout"  # ErrConnectReqTimeout
SUBSCRIBE_TIMEOUT = "stan: subscribe request timeout"  # ErrSubReqTimeout
UNSUBSCRIBE_TIMEOUT = "stan: unsubscribe request timeout"  # ErrUnsubReqTimeout
CLOSE_TIMEOUT = "stan: close request timeout"  # ErrCloseReqTimeout
PUBLISH_TIMEOUT = "stan: publish ack timeout"  # ErrTimeout
CONNECTION_CLOSED = "stan: connection closed"  # ErrConnectionClosed
BAD_SUBSCRIPTION = "stan: invalid subscription"  # ErrBadSubscription

# start= values and their protocol positions
_STARTS = {"new": pb.NEW_ONLY, "last": pb.LAST_RECEIVED, "first": pb.FIRST, "sequence": pb.SEQUENCE_START,
           "time_delta": pb.TIME_DELTA_START}


class StanError(Exception):
    """A request the server refused (its error text) or that timed out (stan.go's text)."""


def _nuid() -> str:
    return os.urandom(11).hex()


@dataclass
class Msg:
    """A delivered message (MsgProto)."""

    seq: int
    subject: str
    data: bytes
    timestamp: int  # ns since the epoch, the server's time of publication
    redelivered: bool
    redelivery_count: int
    sub: "Subscription"


class Subscription:
    """A subscription; ``await sub.unsubscribe()`` (a durable is removed) or ``await
    sub.close()`` (a durable is kept for the next subscribe with its name)."""

    def __init__(self, client: "StanClient", subject: str, inbox: str, durable_name: str, manual_acks: bool) -> None:
        self.client = client
        self.subject = subject
        self.inbox = inbox
        self.durable_name = durable_name
        self.manual_acks = manual_acks
        self.ack_inbox = ""
        self._nats_sub: NatsSubscription | None = None

    async def unsubscribe(self) -> None:
        await self._end(self.client._conn.unsubRequests, UNSUBSCRIBE_TIMEOUT)

    async def close(self) -> None:
        await self._end(self.client._conn.subCloseRequests, UNSUBSCRIBE_TIMEOUT)

    async def _end(self, subject: str, timeout_text: str) -> None:
        if self._nats_sub is None:
            raise StanError(BAD_SUBSCRIPTION)
        nats_sub, self._nats_sub = self._nats_sub, None
        await nats_sub.unsubscribe()
        self.client._subs.pop(self.inbox, None)
        req = pb.UnsubscribeRequest(clientID=self.client.client_id, subject=self.subject, inbox=self.ack_inbox,
                                    durableName=self.durable_name)
        resp = pb.SubscriptionResponse.decode(await self.client._request(subject, req.encode(), timeout_text))
        if resp.error:
            raise StanError(resp.error)


class StanClient:
    """A connection to a STAN cluster over a nats-py connection; made by :func:`connect`."""

    def __init__(self, nc, cluster_id: str, client_id: str, *, connect_wait: float, pub_ack_wait: float) -> None:
        self.nc = nc
        self.cluster_id = cluster_id
        self.client_id = client_id
        self.connect_wait = connect_wait
        self.pub_ack_wait = pub_ack_wait
        self.conn_id = os.urandom(12)
        self._conn = pb.ConnectResponse()
        self._acks: dict[str, asyncio.Future] = {}
        self._ack_subject = f"_STAN.acks.{_nuid()}"
        self._subs: dict[str, Subscription] = {}
        self._nats_subs: list = []
        self.closed = False

    async def _connect(self, discover_prefix: str) -> None:
        hb_inbox = self.nc.new_inbox()

        async def heartbeat(msg) -> None:  # the server's heartbeat: an empty reply says we are alive
            if msg.reply:
                await self.nc.publish(msg.reply, b"")

        self._nats_subs.append(await self.nc.subscribe(hb_inbox, cb=heartbeat))
        self._nats_subs.append(await self.nc.subscribe(self._ack_subject, cb=self._on_pub_ack))
        req = pb.ConnectRequest(clientID=self.client_id, heartbeatInbox=hb_inbox, protocol=PROTOCOL_ONE,
                                connID=self.conn_id, pingInterval=DEFAULT_PING_INTERVAL,
                                pingMaxOut=DEFAULT_PING_MAX_OUT)
        try:
            data = await self._request(f"{discover_prefix}.{self.cluster_id}", req.encode(), CONNECT_TIMEOUT)
            resp = pb.ConnectResponse.decode(data)
            if resp.error:
                raise StanError(resp.error)
        except BaseException:
            await self._drop_nats_subs()
            raise
        self._conn = resp

    async def _request(self, subject: str, payload: bytes, timeout_text: str) -> bytes:
        if self.closed:
            raise StanError(CONNECTION_CLOSED)
        try:
            msg = await self.nc.request(subject, payload, timeout=self.connect_wait)
        except Exception as exc:  # nats-py's timeout and no-responders errors
            raise StanError(timeout_text) from exc
        return msg.data

    async def _on_pub_ack(self, msg) -> None:
        try:
            ack = pb.PubAck.decode(msg.data)
        except pb.DecodeError:
            return
        future = self._acks.pop(ack.guid, None)
        if future is not None and not future.done():
            if ack.error:
                future.set_exception(StanError(ack.error))
            else:
                future.set_result(ack.guid)

    async def publish(self, subject: str, data: bytes) -> str:
        """Publish and wait for the server's acknowledgement; returns the message's guid."""
        return await self.publish_async(subject, data)

    def publish_async(self, subject: str, data: bytes) -> Awaitable[str]:
        """Publish without waiting: a task that gives the guid once acknowledged (StanError on
        an error or after the publish ack wait). Many may be in flight."""
        if self.closed:
            raise StanError(CONNECTION_CLOSED)
        guid = _nuid()
        future = asyncio.get_running_loop().create_future()
        self._acks[guid] = future
        msg = pb.PubMsg(clientID=self.client_id, guid=guid, subject=subject, data=bytes(data), connID=self.conn_id)

        async def wait() -> str:
            try:
                await self.nc.publish(f"{self._conn.pubPrefix}.{subject}", msg.encode(), reply=self._ack_subject)
                return await asyncio.wait_for(future, self.pub_ack_wait)
            except asyncio.TimeoutError:
                raise StanError(PUBLISH_TIMEOUT) from None
            finally:
                self._acks.pop(guid, None)

        return asyncio.ensure_future(wait())

    async def subscribe(self, subject: str, cb: Callable[[Msg], Awaitable[None]], *, queue: str = "",
                        durable_name: str = "", start: str = "new", start_sequence: int = 0,
                        start_time_delta: float = 0.0, max_inflight: int = DEFAULT_MAX_INFLIGHT,
                        ack_wait: int = DEFAULT_ACK_WAIT, manual_acks: bool = False) -> Subscription:
        """Subscribe; ``cb(msg)`` is awaited for each message (acknowledged after it returns,
        unless ``manual_acks``). ``start``: "new" (default), "last", "first", "sequence"
        (``start_sequence``) or "time_delta" (``start_time_delta`` seconds back); a durable
        that exists resumes where it was instead."""
        if start not in _STARTS:
            raise ValueError(f"start must be one of {sorted(_STARTS)}")
        inbox = self.nc.new_inbox()
        sub = Subscription(self, subject, inbox, durable_name, manual_acks)

        async def deliver(nats_msg) -> None:
            try:
                proto = pb.MsgProto.decode(nats_msg.data)
            except pb.DecodeError:
                return
            msg = Msg(proto.sequence, proto.subject, proto.data, proto.timestamp, proto.redelivered,
                      proto.redeliveryCount, sub)
            await cb(msg)
            if not manual_acks:
                await self.ack(msg)

        sub._nats_sub = nats_sub = await self.nc.subscribe(inbox, cb=deliver)
        req = pb.SubscriptionRequest(clientID=self.client_id, subject=subject, qGroup=queue, inbox=inbox,
                                     maxInFlight=max_inflight, ackWaitInSecs=ack_wait, durableName=durable_name,
                                     startPosition=_STARTS[start], startSequence=start_sequence,
                                     startTimeDelta=int(start_time_delta * 1e9))
        try:
            resp = pb.SubscriptionResponse.decode(await self._request(self._conn.subRequests, req.encode(),
                                                                      SUBSCRIBE_TIMEOUT))
            if resp.error:
                raise StanError(resp.error)
        except BaseException:
            await nats_sub.unsubscribe()
            raise
        sub.ack_inbox = resp.ackInbox
        self._subs[inbox] = sub
        return sub

    async def ack(self, msg: Msg) -> None:
        """Acknowledge a message (needed with ``manual_acks``)."""
        await self.nc.publish(msg.sub.ack_inbox, pb.Ack(subject=msg.subject, sequence=msg.seq).encode())

    async def close(self) -> None:
        """Close the STAN connection (durables are kept); the NATS connection stays open."""
        if self.closed:
            return
        try:
            data = await self._request(self._conn.closeRequests, pb.CloseRequest(clientID=self.client_id).encode(),
                                       CLOSE_TIMEOUT)
            resp = pb.CloseResponse.decode(data)
        finally:
            self.closed = True
            for sub in list(self._subs.values()):
                if sub._nats_sub is not None:
                    await sub._nats_sub.unsubscribe()
                    sub._nats_sub = None
            self._subs.clear()
            await self._drop_nats_subs()
            for future in self._acks.values():
                if not future.done():
                    future.set_exception(StanError(CONNECTION_CLOSED))
        if resp.error:
            raise StanError(resp.error)

    async def _drop_nats_subs(self) -> None:
        for nats_sub in self._nats_subs:
            try:
                await nats_sub.unsubscribe()
            except Exception:  # the NATS connection may be closed already
                pass
        self._nats_subs.clear()


async def connect(nc, cluster_id: str, client_id: str, *, discover_prefix: str = DEFAULT_DISCOVER_PREFIX,
                  connect_wait: float = DEFAULT_CONNECT_WAIT, pub_ack_wait: float = DEFAULT_PUB_ACK_WAIT) -> StanClient:
    """Connect ``client_id`` to the STAN cluster ``cluster_id`` over ``nc`` (a connected
    nats-py client). StanError with the server's text, or ``stan: connect request timeout``."""
    client = StanClient(nc, cluster_id, client_id, connect_wait=connect_wait, pub_ack_wait=pub_ack_wait)
    await client._connect(discover_prefix)
    return client
