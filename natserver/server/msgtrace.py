"""Message tracing (nats-server 2.11, as 2.15.1 does it: server/msgtrace.go).

A client publishes with the header ``Nats-Trace-Dest: <subject>`` (or, in an account with
``msg_trace { dest, sampling }``, with a sampled W3C ``traceparent``); the server then sends
to that subject, in the publisher's account, one JSON event telling what it did with the
message::

    {"server": {...}, "request": {"header": {...}, "msgsize": 52},
     "events": [{"type": "in", ...}, {"type": "sm", ...}, {"type": "eg", ...}, ...]}

``in`` the ingress (the publisher's kind, cid, name, account, subject, a refusal's error),
``sm`` a subject mapping, ``se`` a stream export (the importing account, the subject there),
``si`` a service import (the exporting account, the subject from and to), ``js`` a stream
(the subject it stores the message under, ``nointerest``, why it refused it), ``eg`` one per
subscription it went to (kind, cid, name, subscription, queue, why it was not delivered) and
per route or leaf node (kind, cid, server name, the hop, written into the copy's
``Nats-Trace-Hop``). With ``Nats-Trace-Only: true`` (or 1, on) the events are made but
nothing is delivered or stored. A trace does not go past an import: a service import's
requester gets its message with ``Nats-Trace-Dest: trace disabled`` (nats-server's
``allow_trace`` on exports and imports, which would carry it further, is not supported: the
configuration refuses it as an unknown field), as does a stream storing it. The header
``Nats-Trace-Origin-Account`` (of servers before 2.11) turns tracing off.

Only messages with headers can be traced, so the check for the header costs nothing to
messages without (the compiled delivery loop, _croute.c, never takes a message with headers):
``Client._process_ops`` asks :func:`wanted` of each message with headers and hands a traced
one to :func:`process`, which checks and routes it itself, recording what happens.

Across servers (natserver announces route protocol 3, nats-server's MsgTraceProto, to routes
and leaf nodes): each server the message reaches sends its own event. The copy a route or leaf
node gets carries ``Nats-Trace-Hop`` (1, 2... from the origin); the peer's event has an ingress
of kind ROUTER (1) or LEAF (4) with the hop's server name, and the copies it relays extend the
hop (1.1, 1.2...). Cluster.deliver (natserver.cluster) looks for the headers in each routed
message with headers (a ``traceparent`` only if an account has ``msg_trace``) and hands a
traced one to :func:`process_routed`. A trace-only message goes on to peers that trace (they
check it, deliver nothing); a peer that announced a lower
level (nats-server before 2.11) gets no trace-only message, and its egress says that no event
comes from there. Not supported: gateways (natserver has none), the event of a message
refused for its size (2.15.1 sends one with an ingress error before closing the connection),
a leaf node's permissions on the trace destination (msgtrace.go
allowedToPublishOnMsgTraceDest for a LEAF).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import orjson

from .. import clock
from ..protocol import errors
from ..protocol.gotext import go_time
from ..routing.accounts import GLOBAL_ACCOUNT, TRACE_DEST_DISABLED, TRACE_DEST_HEADER, set_header
from ..routing.sublist import SublistResult, is_valid_literal_subject, is_valid_subject, queue_seed
from .trace import log_prefix

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("natserver")

TRACE_DEST = TRACE_DEST_HEADER.encode()
TRACE_ONLY = "Nats-Trace-Only"
TRACE_HOP = "Nats-Trace-Hop"
TRACE_ORIGIN_ACCOUNT = "Nats-Trace-Origin-Account"
TRACE_PARENT = b"traceparent"  # W3C trace context, matched in any case
_TRACE_ONLY_VALUES = ("1", "true", "on")  # msgtrace.go initMsgTrace
_HEX_DIGITS = b"0123456789abcdefABCDEF"
HEADER_LINE = b"NATS/1.0"
# server.go MsgTraceProto: the server-to-server protocol level of servers that trace (2.11+).
MSG_TRACE_PROTO = 3
# server.go's connection kinds, as the events number them
CLIENT_KIND = 0
ROUTER_KIND = 1
LEAF_KIND = 4
# msgtrace.go's egress errors.
ERR_NO_ECHO = "Not delivered because of no echo"
ERR_SUB_DENY = "Not delivered because subscription denies this subject"
ERR_CLIENT_CLOSED = "Not delivered because client is closed"
ERR_TRACE_ONLY_NO_SUPPORT = "Not delivered because remote does not support message tracing"
ERR_NO_SUPPORT = "Message delivered but remote does not support message tracing so no trace event generated from there"
# msgtrace.go sample: a percentage outside 1-99 traces every message.
FULL_SAMPLING = 100


def wanted(client: Client, payload, header_size: int) -> bool:
    """Whether a message's headers may ask for a trace (a cheap look, no parsing)."""
    if payload.__class__ is bytes:  # (searched in place: no copy of the headers)
        if payload.find(TRACE_DEST, 0, header_size) >= 0:
            return True
    elif TRACE_DEST in bytes(payload[:header_size]):
        return True
    account = client.account
    config = account.config if account is not None else None
    return bool(config is not None and config.trace_dest and TRACE_PARENT in bytes(payload[:header_size]).lower())


def _headers(header: bytes) -> tuple[dict[str, list[str]], bool, bool]:
    """msgtrace.go genHeaderMapIfTraceHeadersPresent: the headers (names as written, values
    in order), and whether ``Nats-Trace-Dest`` (not disabled) or a sampled ``traceparent``
    is among them."""
    found_dest = found_parent = False
    headers: dict[str, list[str]] = {}
    if not header.startswith(HEADER_LINE):
        return headers, False, False
    for line in header.split(b"\r\n")[1:]:
        key, colon, value = line.partition(b":")
        value = value.strip(b" \t")
        if not colon or not key or not value:
            continue
        if not found_parent and key.lower() == TRACE_PARENT:
            parts = value.split(b"-")
            flags = parts[3] if len(parts) == 4 else b""
            digits = flags[1:] if flags[:1] in (b"+", b"-") else flags
            if len(flags) == 2 and digits and all(c in _HEX_DIGITS for c in digits):
                # (Go's strconv.ParseInt(flags, 16, 8): an int8, so 80-ff are refused)
                number = int(flags, 16)
                found_parent = number <= 0x7F and number & 1 == 1
        elif not found_dest and key == TRACE_DEST:
            if value == TRACE_DEST_DISABLED.encode():
                return {}, False, False
            found_dest = True
        headers.setdefault(key.decode(errors="replace"), []).append(value.decode(errors="replace"))
    return headers, found_dest, found_parent


class MsgTrace:
    """One traced message: its event, built while the message is routed, then sent."""

    __slots__ = ("account", "dest", "trace_only", "event", "events", "hops", "hop")

    def __init__(self, account: str, dest: str, trace_only: bool, event: dict, hop: str = "") -> None:
        self.account = account
        self.dest = dest
        self.trace_only = trace_only
        self.event = event
        self.events: list = event["events"]
        self.hops = 0  # the routes and leaf nodes it went to
        self.hop = hop  # the Nats-Trace-Hop it came with from a peer ("": from a client)

    def add(self, event_type: str, **fields) -> dict:
        entry = {"type": event_type, "ts": _now(), **fields}
        self.events.append(entry)
        return entry

    def egress(self, client, sub, error: str = "") -> None:
        entry = self.add("eg", kind=CLIENT_KIND, cid=client.cid)
        if client.name:
            entry["name"] = client.name
        account = _account_name(client)
        if account != self.account:
            entry["acc"] = account
        entry["sub"] = sub.subject.decode(errors="replace")
        if sub.queue:
            entry["queue"] = sub.queue.decode(errors="replace")
        if error:
            entry["error"] = error

    def peer_egress(self, peer, error: str) -> str:
        """A route's or leaf node's egress (the peer's server name, the hop it is, no
        subscription); returns the hop, for the copy's ``Nats-Trace-Hop`` (msgtrace.go
        setHopHeader)."""
        self.hops += 1
        hop = f"{self.hop}.{self.hops}" if self.hop else str(self.hops)
        leaf = peer.leaf_account is not None
        entry = self.add("eg", kind=LEAF_KIND if leaf else ROUTER_KIND, cid=peer.rid)
        if peer.remote_name:
            entry["name"] = peer.remote_name
        entry["hop"] = hop
        if leaf and peer.leaf_account_name != self.account:  # (msgtrace.go addEgressEvent)
            entry["acc"] = peer.leaf_account_name
        if error:
            entry["error"] = error
        return hop

    def send(self, client: Client) -> None:
        """The event to the destination, in the publisher's account (msgtrace.go sendEvent)."""
        self.send_in(client.server, client.account)

    def send_in(self, server, account) -> None:
        """The event to the destination, published in ``account`` (None: the global account)."""
        system = server.system
        if system is None:  # events.go sendInternalAccountSysMsg: no system account, no events
            return
        event = {"server": system.server_info(), "request": self.event["request"]}
        if self.hops:
            event["hops"] = self.hops
        event["events"] = self.events
        publisher = account.internal if account is not None else server.internal_client
        body = orjson.dumps(event)
        publisher.publish(self.dest.encode(), None, -1, b"%d" % len(body), body)


def _now() -> str:
    return go_time(clock.now())


def _account_name(client) -> str:
    return client.account.name if client.account is not None else GLOBAL_ACCOUNT


def start(client: Client, subject: bytes, header: bytes, size: int) -> tuple[bool, MsgTrace | None, bytes | None]:
    """msgtrace.go initMsgTrace: (skip the message, its trace, the header to route it with
    when it changes: tracing turned off by the origin-account header or sampling)."""

    def may_publish(dest: bytes) -> bool:
        if client.perms is not None and not client.perms.can_publish(dest, client._publish_allowed):
            client.queue(errors.permissions_violation("Publish", dest).wire)
            return False
        return True

    return _start(header, size, subject, client.account, _account_name(client), CLIENT_KIND, client.cid,
                  client.name, log_prefix(client), may_publish)


def start_routed(peer, account, account_name: str, subject: bytes, header: bytes,
                 size: int) -> tuple[bool, MsgTrace | None, bytes | None]:
    """:func:`start` for a message from a route or a leaf node (``peer``) in ``account``
    (None: the global account): its ingress says ROUTER or LEAF, the peer's cid and server
    name; it goes on from the hop its ``Nats-Trace-Hop`` names; a ``traceparent`` is not
    sampled again (the origin did)."""
    kind = ROUTER_KIND if peer.leaf_account is None else LEAF_KIND
    return _start(header, size, subject, account, account_name, kind, peer.rid, peer.remote_name, peer.label, None)


def _start(header: bytes, size: int, subject: bytes, account, account_name: str, kind: int, cid: int, name: str,
           label: str, may_publish) -> tuple[bool, MsgTrace | None, bytes | None]:
    headers, found_dest, found_parent = _headers(header)
    if not found_dest and not found_parent:
        return False, None, None
    external = not found_dest
    trace_only = False
    dest = ""
    if not external:
        only = headers.get(TRACE_ONLY)
        trace_only = only is not None and only[0].lower() in _TRACE_ONLY_VALUES
        dest = headers[TRACE_DEST.decode()][0]
    origin = headers.get(TRACE_ORIGIN_ACCOUNT)
    if origin is not None:
        log.error('%s - Message tracing disabled because of header "%s" with value="%s"', label,
                  TRACE_ORIGIN_ACCOUNT, origin[0])
        return trace_only, None, None if trace_only else _disabled(header)
    if external:
        config = account.config if account is not None else None
        if config is None or not config.trace_dest:
            return False, None, None
        dest = config.trace_dest
        sampling = config.trace_sampling
        if kind == CLIENT_KIND and 0 < sampling < FULL_SAMPLING and random.randrange(100) > sampling:
            return False, None, _disabled(header)
    dest_b = dest.encode()
    if not is_valid_subject(dest_b) or not is_valid_literal_subject(dest_b):
        log.error('%s - Destination "%s" is not valid, won\'t be able to trace events', label, dest)
        return trace_only, None, None
    if may_publish is not None and not may_publish(dest_b):
        return True, None, None
    ingress: dict = {"type": "in", "ts": _now(), "kind": kind, "cid": cid}
    if name:
        ingress["name"] = name
    ingress.update({"acc": account_name, "subj": subject.decode(errors="replace")})
    request: dict = {"header": dict(sorted(headers.items()))}
    if size:
        request["msgsize"] = size
    hop = headers.get(TRACE_HOP, [""])[0] if kind != CLIENT_KIND else ""
    return False, MsgTrace(account_name, dest, trace_only, {"request": request, "events": [ingress]}, hop), None


def _disabled(header: bytes) -> bytes:
    """The header with ``Nats-Trace-Dest: trace disabled`` (client.go setHeader)."""
    return set_header(header, TRACE_DEST_HEADER, TRACE_DEST_DISABLED)


def process(client: Client, subject: bytes, reply: bytes | None, header_size: int, payload, mappings) -> bool:
    """A published message whose headers may ask for a trace (:func:`wanted`): handled
    here, from the checks Client._process_ops makes on. False: it is not traced after all,
    and the caller goes on with it as with any message."""
    header = bytes(payload[:header_size])
    skip, trace, changed = start(client, subject, header, len(payload))
    if skip:
        return True
    if trace is None and changed is None:
        return False
    if changed is not None:  # routed, untraced, with the trace turned off in its header
        payload = changed + bytes(payload[header_size:])
        header_size = len(changed)
    if client.pedantic and not is_valid_literal_subject(subject):
        client.queue(errors.INVALID_PUBLISH_SUBJECT.wire)
    if mappings is not None:
        mapped = mappings.select(subject)
        if mapped is not None:
            subject = mapped  # b"" when the weights chose to drop it
            if trace is not None:
                trace.add("sm", to=subject.decode(errors="replace"))
    if client.perms is not None and not client.perms.can_publish(subject, client._publish_allowed):
        error = errors.permissions_violation("Publish", subject)
        client.queue(error.wire)
        if trace is not None:
            trace.events[0]["error"] = error.text
            trace.send(client)
        return True
    if client.verbose:
        client.queue(b"+OK\r\n")
    if trace is None:
        sizes = b"%d %d" % (header_size, len(payload))
        client.publish(subject, reply, header_size, sizes, payload)
    else:
        publish(client, trace, subject, reply, header_size, payload)
    return True


class _Plan:
    """What Client._route needs of a sublist result: the deliveries chosen, no queue groups."""

    __slots__ = ("plan", "qsubs")

    def __init__(self, plan: tuple) -> None:
        self.plan = plan
        self.qsubs = ()


def process_routed(client: Client, account, account_name: str, peer, subject: bytes, mapped: bytes | None,
                   reply: bytes | None, header_size: int, payload, queues: tuple,
                   relay: Callable[..., bool]) -> tuple[bool, bytes | None]:
    """A message from a route or a leaf node (``peer``) whose headers may ask for a trace
    (``Nats-Trace-Dest``, ``traceparent``), in ``account`` (``client`` delivers in its subject space; ``mapped``:
    the subject a leaf's message is mapped to, if it is). Traced: delivered here as
    Client.deliver_routed does (the queue groups named in ``queues``), relayed by ``relay``
    (subject, on_peer) to the peers that hear ``peer`` through this server, the event sent
    from this server (msgtrace.go: each server sends its own). Returns (handled, the header
    to go on with when it changed: tracing turned off by the origin-account header)."""
    header = bytes(payload[:header_size])
    skip, trace, changed = start_routed(peer, account, account_name, subject, header, len(payload))
    if skip:
        return True, None
    if trace is None:
        return False, changed
    if mapped is not None:  # (leafnode.go: a leaf's message is mapped as a client's)
        subject = mapped
        trace.add("sm", to=subject.decode(errors="replace"))
    result = client.sublist.match(subject)
    if result.qsubs:  # (as Client.deliver_routed: only the groups the sender chose this server for)
        groups = [group for group in result.qsubs if group[0].queue in queues] if queues else []
        filtered = SublistResult(result.psubs, groups)
        filtered.queue_state = [queue_seed() for _ in groups]
        result = filtered
    publish(client, trace, subject, reply, header_size, payload, result=result,
            forward=partial(relay, subject), account=account)
    return True, None


_PUBLISHER = object()  # publish's default account: the publishing client's


def publish(client: Client, trace: MsgTrace, subject: bytes, reply: bytes | None, header_size: int, payload, *,
            result=None, forward: Callable[..., bool] | None = None, account=_PUBLISHER) -> None:
    """Route a traced message as Client.publish does (subscribers, the cluster's peers,
    no-responders), recording an event for each subscription (client.go deliverMsg,
    processMsgResults), then send the trace event. A message from a peer server comes with
    its ``result`` (the subscriptions it goes to here), ``forward`` (to the peers it goes on
    to) and ``account`` (where the event is published)."""
    server = client.server
    if result is None:
        result = client.sublist.match(subject)
    payload = bytes(payload)
    header = payload[:header_size]
    body = payload[header_size:]
    echo = client.echo
    targets = []  # what is delivered as is
    calls = []  # (callback subscription, header, options): imports, with their header
    streams: list = []  # (subscription, stream, its event)
    prefix = b"MSG " + subject + b" "
    picked = [entry[0] for entry in client._queue_targets(result, subject)] if result.qsubs else []
    for sub in [*result.psubs, *picked]:
        subscriber = sub.client
        callback = sub.callback
        if callback is not None:
            owner = getattr(callback, "__self__", None)
            if owner is not None and hasattr(owner, "process_traced"):  # a stream (natserver.jetstream)
                # (its event filled in as it is processed, even trace-only: checked, not stored)
                stream_event = trace.add("js", stream=owner.name)
                streams.append((sub, owner, stream_event))
                continue
            call_header, options = _internal_event(trace, callback, subject, header)
            if not trace.trace_only:
                calls.append((sub, call_header, options))
            continue
        if subscriber is client and not echo:
            trace.egress(subscriber, sub, ERR_NO_ECHO)
            continue
        if subscriber.deliver_filter is not None and subscriber.deliver_filter.delivery_denied(subject, reply):
            trace.egress(subscriber, sub, ERR_SUB_DENY)
            continue
        if subscriber.closed:
            trace.egress(subscriber, sub, ERR_CLIENT_CLOSED)
            continue
        trace.egress(subscriber, sub)
        targets.append((sub, subscriber, prefix + sub.sid_part))
    delivered = 0
    took = False
    if not trace.trace_only:
        if targets:
            sizes = b"%d %d" % (header_size, len(payload))
            delivered = client._route(_Plan(tuple(targets)), subject, reply, header_size, sizes, payload)
    for sub, stream, stream_event in streams:
        server.callback_publisher = client
        sub.delivered += 1
        stored_header = header if trace.trace_only else _disabled(header)
        try:
            stream.process_traced(subject, reply, stored_header, body, stream_event, trace.trace_only)
        except Exception:
            log.exception("internal subscription on %r failed", sub.subject)
        took = True
    if not trace.trace_only:
        for sub, call_header, options in calls:
            server.callback_publisher = client
            sub.delivered += 1
            try:
                took = sub.callback(subject, reply, call_header, body, **options) is not False or took
            except Exception:
                log.exception("internal subscription on %r failed", sub.subject)
    forwarder = server._forwarder
    if forward is None and forwarder is not None and client.forwards:
        forward = partial(forwarder.forward, client, result, subject, reply, header_size, payload)
    if forward is not None:
        # Each peer's copy says which hop it is (Nats-Trace-Hop: 1, 2...; from a peer, the
        # hop it came as, a dot and ours: 1.1, 1.2...).
        def on_peer(peer) -> tuple[int, bytes] | None:
            # client.go deliverMsg: a peer that announced tracing (2.11+) gets even a
            # trace-only message, and traces it itself; to another, a trace-only message does
            # not go, and what does is said to go untraced.
            supported = peer.proto >= MSG_TRACE_PROTO
            error = "" if supported else ERR_TRACE_ONLY_NO_SUPPORT if trace.trace_only else ERR_NO_SUPPORT
            hop = trace.peer_egress(peer, error)
            if trace.trace_only and not supported:
                return None
            routed = set_header(header, TRACE_HOP, hop)
            return len(routed), routed + body

        if forward(on_peer=on_peer):
            delivered += 1
    if not trace.trace_only and not delivered and not took and reply is not None and client.no_responders:
        client._no_responders(subject, reply, result)
    trace.send_in(server, client.account if account is _PUBLISHER else account)


def _internal_event(trace: MsgTrace, callback, subject: bytes, header: bytes) -> tuple[bytes, dict]:
    """The event of a callback subscription (a stream import, a service import), the header
    it gets the message with and what else its call is told."""
    export = getattr(callback, "msg_trace_export", None)
    if export is not None:  # a stream import: the importing account, the subject there
        account, to = export(subject)
        trace.add("se", acc=account, to=to.decode(errors="replace"))
        return header, {}
    service = getattr(callback, "msg_trace_import", None)
    if service is not None:  # a service import: the exporting account, from and to
        account, to = service(subject)
        trace.add("si", acc=account, **{"from": subject.decode(errors="replace")}, to=to.decode(errors="replace"))
        return header, {"trace_disabled": True}  # (after the import's own header)
    return header, {}
