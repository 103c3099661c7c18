"""Consumer delivery on the wire: pull requests ($JS.API.CONSUMER.MSG.NEXT), acks on
``$JS.ACK.>``, ack_wait redelivery and request expiry on one timer task, advisories.
The per-consumer rules are in consumer.py (sans-IO); this module does the sending.

Layer (README "Layers"): the top of the state tier, beside ``sourcing``; what it needs of the
engine (the package's ``JetStream``) is ``DeliveryHost``.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .. import clock
from ..protocol.gotext import go_duration
from . import advisories, consumer_store
from .advisories import AdvisoryHost
from .gojson import (
    INT64,
    GoDecodeError,
    decode_bool,
    decode_int,
    decode_str,
    decode_struct,
    go_unmarshal,
    with_literals,
)
from .util import loads

if TYPE_CHECKING:
    from .consumer import Consumer
    from .stream import Stream

log = logging.getLogger("natserver")

_HDR_FLOW_CONTROL = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
_HDR_NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
_HDR_MAX_WAITING = b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"
_HDR_REQUESTS_PENDING = b"NATS/1.0 408 Requests Pending\r\n\r\n"
_HDR_PUSH_BASED = b"NATS/1.0 409 Consumer is push based\r\n\r\n"
_HDR_HEARTBEAT_TOO_LARGE = b"NATS/1.0 400 Bad Request - heartbeat value too large\r\n\r\n"
_HDR_BAD_REQUEST = b"NATS/1.0 400 Bad Request\r\n\r\n"
_PULL_GO_TYPE = "server.JSApiConsumerGetNextRequest"  # (named in no error: the body starts with "{")
_ATOI = re.compile(rb"[+-]?[0-9]+")  # what Go's strconv.Atoi reads (within int64)
_ADVISORY = b"$JS.EVENT.ADVISORY.CONSUMER."
_PULL_REQUEST = {"batch": lambda v: decode_int(v, INT64), "expires": lambda v: decode_int(v, INT64),
                 "no_wait": decode_bool, "max_bytes": lambda v: decode_int(v, INT64),
                 "idle_heartbeat": lambda v: decode_int(v, INT64),
                 # 2.11's priority group fields (consumer.go PriorityGroup, embedded in the request)
                 "group": decode_str, "min_pending": lambda v: decode_int(v, INT64),
                 "min_ack_pending": lambda v: decode_int(v, INT64), "id": decode_str,
                 "priority": lambda v: decode_int(v, INT64)}
# Their Go types, named in Go's error for a value of another type ("json: cannot unmarshal string
# into Go struct field .batch of type int": consumer.go nextReqFromMsg's anonymous struct path).
_PULL_GO_TYPES = {"batch": "int", "expires": "time.Duration", "no_wait": "bool", "max_bytes": "int",
                  "idle_heartbeat": "time.Duration", "group": "string", "min_pending": "int64",
                  "min_ack_pending": "int64", "id": "string", "priority": "int"}


def _decode_pull(request) -> dict:
    return decode_struct(request, _PULL_REQUEST, {}, "", _PULL_GO_TYPES)


MAX_REQUEST_PRIORITY = 9  # processNextMsgRequest: a request's priority is 0..9
NO_PRIORITY = 2**31 - 1  # insertAtPosition: a request naming no group comes last (math.MaxInt32)
_PIN_HEADER = b"Nats-Pin-Id"  # JSPullRequestNatsPinId


PUSH_BURST = 1024  # messages a push consumer sends in one go before yielding to the timer task
FLOW_CONTROL_BYTES = 512 * 1024  # a push consumer with flow_control asks after this much data
NO_INTEREST_RETRY = 50_000_000  # ns; how often a push consumer without subscribers looks again
MAX_IMPORT_HOPS = 8  # service imports a pull request's reply is followed back through (a bound, not a rule)


def _heartbeat_header(consumer) -> bytes:
    return (b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n"
            % (consumer.delivered_cseq, consumer.delivered_sseq))


def _timeout_header(batch: int, max_bytes: int, why: bytes = b"Request Timeout") -> bytes:
    return (b"NATS/1.0 408 %s\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n"
            % (why, batch, max_bytes))


def _wrong_pin_header(batch: int, max_bytes: int) -> bytes:
    return (b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n"
            % (batch, max_bytes))


def _bad_request(why: str) -> bytes:
    return b"NATS/1.0 400 Bad Request - %s\r\n\r\n" % why.encode()


def _with_pin(hdr: bytes | None, pin_id: str) -> bytes:
    """client.go genHeader: the message's headers with ``Nats-Pin-Id`` added last."""
    head = hdr[:-2] if hdr and len(hdr) > 2 else b"NATS/1.0\r\n"
    return head + b"%s: %s\r\n\r\n" % (_PIN_HEADER, pin_id.encode())


def _too_big_header(batch: int, max_bytes: int) -> bytes:
    return (b"NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: %d\r\n"
            b"Nats-Pending-Bytes: %d\r\n\r\n" % (batch, max_bytes))


class PullRequest:
    __slots__ = ("account", "batch", "expires", "group", "heartbeat", "interest", "last_beat", "max_bytes",
                 "min_ack_pending", "min_pending", "no_wait", "pin_id", "priority", "reply", "sent")

    def __init__(self, reply: bytes, batch: int, max_bytes: int, no_wait: bool, expires: int) -> None:
        self.reply = reply
        self.batch = batch  # messages still wanted
        self.max_bytes = max_bytes  # bytes still allowed (0: no limit)
        self.no_wait = no_wait
        self.expires = expires  # ns deadline, 0: none
        self.sent = 0
        self.heartbeat = 0  # ns between idle heartbeats while the request waits (0: none)
        self.last_beat = 0
        # Who must still listen for the request to stay (Delivery._track_interest): the client
        # of the account to ask and the subject, ``reply`` unless it came through an import.
        self.account = None
        self.interest = reply
        # Priority groups (2.11): a JSON request's group ("" when it names none; None for a
        # request that is a number or empty: nats-server's nil PriorityGroup), overflow's
        # thresholds, the pin id it was given or brings, and its priority (prioritized: lower
        # first).
        self.group: str | None = None
        self.min_pending = 0
        self.min_ack_pending = 0
        self.pin_id = ""
        self.priority = NO_PRIORITY


def _insert_by_priority(waiting: list, req: PullRequest) -> None:
    """consumer.go insertAtPosition: after every request of the same or a higher priority
    (a lower number)."""
    at = len(waiting)
    for i, other in enumerate(waiting):
        if other.priority > req.priority:
            at = i
            break
    waiting.insert(at, req)


def deliver(client, dsubj: bytes, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> int:
    """Send a stored message to the subscribers of ``dsubj`` with its own ``subject`` on the
    MSG line (as nats-server delivers consumer messages); one member per queue group.
    ``client``: the JetStream account's internal client."""
    return client.deliver_as(dsubj, subject, reply, hdr, data)


def _headers_only(hdr: bytes | None, data: bytes) -> tuple[bytes, bytes]:
    """A headers_only consumer's delivery: the headers with the payload's size added, no payload."""
    return (hdr or b"NATS/1.0\r\n\r\n")[:-2] + b"Nats-Msg-Size: %d\r\n\r\n" % len(data), b""


def ack_reply(consumer: Consumer, msg, count: int) -> bytes:
    """The reply subject of a delivery next_msg just recorded (2.9's shape):
    ``$JS.ACK.<stream>.<consumer>.<deliveries>.<stream seq>.<consumer seq>.<ts>.<pending>``."""
    return b"$JS.ACK.%s.%s.%d.%d.%d.%d.%d" % (
        consumer.stream.name.encode(), consumer.name.encode(), count, msg.seq, consumer.delivered_cseq,
        msg.ts, consumer.cached_num_pending())


def batch_items(consumer: Consumer, msgs: list, headers_only: bool = False) -> list:
    """(subject, ack reply, headers, data) of Consumer.peek_batch's messages, as ack_reply and
    the delivery loops make them one by one (``headers_only``: a push consumer's)."""
    prefix = b"$JS.ACK.%s.%s.1." % (consumer.stream.name.encode(), consumer.name.encode())
    cseq = consumer.delivered_cseq
    npc = consumer.cached_num_pending()  # (max(npc - 1 - i, 0) either way)
    items = []
    for msg in msgs:
        cseq += 1
        npc -= 1
        hdr, data = msg.hdr or None, msg.data
        if headers_only:
            hdr, data = _headers_only(hdr, data)
        items.append((msg.subject, b"%s%d.%d.%d.%d" % (prefix, msg.seq, cseq, msg.ts, npc if npc > 0 else 0),
                      hdr, data))
    return items


class ConsumerRemover(Protocol):
    """consumer_api.ConsumerApi as deliveries use it: to delete a consumer gone inactive."""

    def remove(self, consumer: Consumer) -> None: ...


class _ApiConsumers(Protocol):
    @property
    def consumers(self) -> ConsumerRemover: ...


class DeliveryHost(AdvisoryHost, Protocol):
    """What deliveries need of the engine (``JetStream``)."""

    @property
    def streams(self) -> dict[str, Stream]: ...
    @property
    def account(self) -> Any: ...  # the engine's account, None for $G
    @property
    def api(self) -> _ApiConsumers: ...
    def subscribe(self, subject: str, callback) -> Any: ...
    def unsubscribe(self, sub) -> None: ...
    def stream_path(self, stream: Stream) -> str: ...
    def _store_dirty(self, store) -> None: ...
    @property
    def cluster_block(self) -> dict | None: ...  # None on a single server


class Delivery:
    """Owned by the engine: the ack subscription and the timer task."""

    def __init__(self, js: DeliveryHost) -> None:
        self.js = js
        self.server = js.server
        self._wake = trio.Event()
        self._ack_sub = None
        self._fc_sub = None
        self._due: dict[Consumer, None] = {}  # consumers to deliver for at the end of the chunk (in order)
        # The last ack subject's head (``$JS.ACK.<stream>.<consumer>``, what comes before its
        # last five tokens) and the names read from it: a run of acks is one consumer's.
        self._ack_head = b""
        self._ack_names = ("", "")

    def start(self) -> None:
        sub = self._ack_sub = self.js.subscribe("$JS.ACK.>", self.on_ack)
        sub.callback_run = self.on_ack_run
        self._fc_sub = self.js.subscribe("$JS.FC.>", self.on_flow_control)

    def on_flow_control(self, subject: bytes, reply, hdr, payload: bytes) -> None:
        """A client answered a flow control request: its consumer may go on."""
        tokens = subject.split(b".")
        if len(tokens) < 5:
            return
        stream = self.js.streams.get(tokens[2].decode("utf-8", "replace"))
        consumer = stream.consumers.get(tokens[3].decode("utf-8", "replace")) if stream else None
        if consumer is not None and consumer.fc_reply == subject:
            consumer.fc_reply = b""
            consumer.fc_bytes = 0
            self.push(consumer, clock.now_ns())

    def stop(self) -> None:
        if self._ack_sub is not None:
            try:
                self.js.unsubscribe(self._ack_sub)
                self.js.unsubscribe(self._fc_sub)
            except Exception:  # noqa: BLE001 (the server may be half torn down already)
                log.debug("ack subscription already gone")
            self._ack_sub = None

    def poke(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    # -- pull requests ------------------------------------------------------------------------

    def pull(self, consumer: Consumer, reply, payload: bytes) -> None:
        if not reply:
            return
        if consumer.cfg.is_push:
            self.js.send(reply, b"", _HDR_PUSH_BASED)
            return
        now = clock.now_ns()
        batch, expires, no_wait, max_bytes, heartbeat = 1, 0, False, 0, 0
        req: dict | None = None  # a JSON request (its priority group fields)
        body = payload.strip()
        if body:
            try:
                if body[:1] == b"{":
                    try:
                        req = _decode_pull(go_unmarshal(body, _PULL_GO_TYPE))
                    except GoDecodeError as exc:
                        raise with_literals(_decode_pull, body, exc) from None
                    batch = req.get("batch", 1)
                    expires = req.get("expires", 0)
                    no_wait = req.get("no_wait", False)
                    max_bytes = req.get("max_bytes", 0)
                    heartbeat = req.get("idle_heartbeat", 0)
                elif _ATOI.fullmatch(body) and INT64[0] <= int(body) <= INT64[1]:
                    batch = int(body)
                # (else: consumer.go nextReqFromMsg takes what strconv.Atoi refuses as a batch of 1)
            except GoDecodeError as exc:  # (a syntax error: Go's text)
                self.js.send(reply, b"", _bad_request(str(exc)))
                return
            except ValueError:
                self.js.send(reply, b"", _HDR_BAD_REQUEST)
                return
        if batch <= 0:
            batch = 1
        if heartbeat > 0 and heartbeat * 2 > expires:
            self.js.send(reply, b"", _HDR_HEARTBEAT_TOO_LARGE)
            return
        # consumer.go processNextMsgRequest: the consumer's request limits, in this order.
        cfg = consumer.cfg
        if cfg.max_batch > 0 and batch > cfg.max_batch:
            self.js.send(reply, b"", b"NATS/1.0 409 Exceeded MaxRequestBatch of %d\r\n\r\n" % cfg.max_batch)
            return
        if expires > 0 and cfg.max_expires > 0 and expires > cfg.max_expires:
            limit = go_duration(cfg.max_expires / 1e9).encode()
            self.js.send(reply, b"", b"NATS/1.0 409 Exceeded MaxRequestExpires of %s\r\n\r\n" % limit)
            return
        if max_bytes > 0 and cfg.max_bytes > 0 and max_bytes > cfg.max_bytes:
            self.js.send(reply, b"", b"NATS/1.0 409 Exceeded MaxRequestMaxBytes of %d\r\n\r\n" % cfg.max_bytes)
            return
        if req is not None:
            refusal = self._check_priority(consumer, req, now)
            if refusal:
                self.js.send(reply, b"", refusal)
                return
        consumer.active_at = now
        self.process_waiting(consumer, now, False)
        if no_wait:
            # consumer.go processNextMsgRequest: a request that may not wait is answered at
            # once when nothing is there (unless it gave expires: then it waits for the first
            # messages and ends after them) or when the requests before it take everything.
            available = consumer.cached_num_pending() + len(consumer.rdq)
            if available == 0 and expires <= 0:
                self.js.send(reply, b"", _HDR_NO_MESSAGES)
                return
            if available and available < sum(req.batch for req in consumer.waiting):
                self.js.send(reply, b"", _HDR_REQUESTS_PENDING)
                return
        if len(consumer.waiting) >= max(consumer.cfg.max_waiting, 1):
            if not heartbeat:  # (nats-server: a client with heartbeats waits for them instead)
                self.js.send(reply, b"", _HDR_MAX_WAITING)
            return
        request = PullRequest(reply, batch, max_bytes, no_wait, now + expires if expires > 0 else 0)
        request.heartbeat, request.last_beat = max(heartbeat, 0), now
        request.account, request.interest = self._track_interest(reply)
        if req is not None:
            request.group = req.get("group", "")
            request.min_pending = req.get("min_pending", 0)
            request.min_ack_pending = req.get("min_ack_pending", 0)
            request.pin_id = req.get("id", "")
            request.priority = req.get("priority", 0)
        if cfg.priority_policy == "prioritized":
            _insert_by_priority(consumer.waiting, request)
        else:
            consumer.waiting.append(request)
        self.serve(consumer, now)
        if consumer.waiting and consumer.waiting[-1].expires:
            self.poke()

    def _check_priority(self, consumer: Consumer, req: dict, now: int) -> bytes:
        """processNextMsgRequest's priority group rules for a JSON request, in its order: the
        status to answer with (b"" when the request may wait). A request with the pinned
        client's id keeps the pin for another priority_timeout."""
        cfg = consumer.cfg
        policy = cfg.priority_policy
        group, pin_id = req.get("group", ""), req.get("id", "")
        if (req.get("min_pending", 0) or req.get("min_ack_pending", 0)) and policy != "overflow":
            return _bad_request("Not a Overflow Priority consumer")
        if pin_id and policy != "pinned_client":
            return _bad_request("Not a Pinned Client Priority consumer")
        if not 0 <= req.get("priority", 0) <= MAX_REQUEST_PRIORITY:
            return _bad_request(f"Priority must be between 0 and {MAX_REQUEST_PRIORITY}")
        if policy == "none":
            return b""
        if not group:
            return _bad_request("Priority Group missing")
        if group not in (cfg.priority_groups or ()):
            return _bad_request("Invalid Priority Group")
        if consumer.pin_id:
            if pin_id == consumer.pin_id:
                consumer.pin_expires = now + cfg.priority_timeout
            elif pin_id:
                return b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"
        return b""

    def _track_interest(self, reply: bytes):
        """consumer.go trackDownAccountAndInterest: a reply that came in through a service
        import (``_R_.``) stands for the importing account's own reply; a waiting request
        lives as long as someone there listens on it. (The client to ask, the subject.)"""
        accounts = self.server.accounts
        account = self.js.account or (accounts.global_account if accounts is not None else None)
        client, subject = self.js.client, reply
        for _ in range(MAX_IMPORT_HOPS):
            if account is None or not subject.startswith(b"_R_."):
                break
            route = account.response_route(subject)
            if route is None:
                break
            account, subject = route
            client = account.internal
        return client, subject

    def _next_waiting(self, consumer: Consumer, size: int, now: int, fresh: bool = False) -> PullRequest | None:
        """consumer.go nextWaiting: the first waiting request that can take a message of
        ``size`` bytes; those expired, too small (max_bytes) or with nobody listening any
        more are told so and leave the list. Priority groups: with ``pinned_client`` only the
        pinned client's requests are served (the first request without an id gets a new pin
        when there is none; one with another id is told 423 and leaves; those without wait at
        the back); with ``overflow`` a request with ``min_pending``/``min_ack_pending`` waits
        at the back until the consumer has that many messages pending or unacknowledged
        (``fresh``: the message is a first delivery already counted as unacknowledged, which
        nats-server counts only once sent)."""
        waiting = consumer.waiting
        send = self.js.send
        cfg = consumer.cfg
        policy = cfg.priority_policy
        need_pin = policy == "pinned_client" and not consumer.pin_id
        cycled = 0
        while waiting:
            req = waiting[0]
            if req.expires and req.expires <= now:
                waiting.pop(0)
                send(req.reply, b"", _timeout_header(req.batch, req.max_bytes))
                continue
            assigned = False
            if need_pin or consumer.pin_id:
                if need_pin and not req.pin_id:
                    if req.group:  # (assignNewPinId: a request that names no group gets none)
                        pin = consumer.assign_pin(req.group, now)
                        req.pin_id = pin
                        advisories.consumer_pinned(self.js, consumer.stream.name, consumer.name, req.group, pin)
                        self.poke()  # (the pin's timer)
                    assigned = True
                elif not need_pin and not req.pin_id:
                    waiting.append(waiting.pop(0))  # (the waitQueue's cycle)
                    cycled += 1
                    if cycled >= len(waiting):
                        return None
                    continue
                elif need_pin or req.pin_id != consumer.pin_id:
                    waiting.pop(0)  # an old pin id
                    send(req.reply, b"", _wrong_pin_header(req.batch, req.max_bytes))
                    continue
            if policy == "overflow" and req.group is not None and (req.min_pending > 0 or req.min_ack_pending > 0):
                # (the count is taken after this message's delivery was recorded: one more)
                if not (0 < req.min_pending <= consumer.cached_num_pending() + 1
                        or 0 < req.min_ack_pending <= len(consumer.pending) - fresh):
                    waiting.append(waiting.pop(0))
                    cycled += 1
                    if cycled >= len(waiting):
                        return None
                    continue
            if req.max_bytes:
                if size > req.max_bytes:
                    waiting.pop(0)
                    send(req.reply, b"", _too_big_header(req.batch, req.max_bytes))
                    if assigned:
                        consumer.unassign_pin()
                    continue
                req.max_bytes -= size
                if req.max_bytes == 0:
                    req.batch = 1  # this one fills it: the last the request gets
            if req.account.has_interest(req.interest):
                return req
            waiting.pop(0)
            if req.interest != req.reply:
                send(req.reply, b"", _timeout_header(req.batch, req.max_bytes, b"Interest Expired"))
        return None

    def serve(self, consumer: Consumer, now: int) -> None:
        """Deliver to waiting pull requests while there is something for them (with
        ``replay_policy: original``, at the stored spacing: the timer comes back for the rest)."""
        waiting = consumer.waiting
        consumer.retry_at = 0
        end_of_stream = False
        prioritized = consumer.cfg.priority_policy == "prioritized"
        if len(waiting) == 1 and consumer.cfg.priority_policy == "none" and not consumer.replaying:
            self._serve_batch(consumer, waiting, now)
        while waiting:
            got = consumer.next_msg(now)
            if got is None:
                end_of_stream = not consumer.blocked()  # (max_ack_pending: not the end)
                break
            msg, count = got
            ack = self.ack_reply(consumer, msg, count)
            # consumer.go: what max_bytes counts, the ack reply included (not the inbox).
            size = len(msg.subject) + len(ack) + len(msg.hdr or b"") + len(msg.data)
            req = self._next_waiting(consumer, size, now, count == 1 and consumer.cfg.ack_policy != "none")
            if req is None:
                consumer.undo(msg.seq, count)
                break
            # (pull consumers have no rate_limit_bps: refused, 10086)
            if consumer.replaying and self._held_back(consumer, msg, count, size, now, 0):
                break
            hdr = msg.hdr or None
            if consumer.cfg.priority_policy == "pinned_client":
                hdr = _with_pin(hdr, consumer.pin_id)
            deliver(self.js.client, req.reply, msg.subject, ack, hdr, msg.data)
            req.batch -= 1
            req.sent += 1
            if req.batch <= 0:
                waiting.remove(req)
            elif len(waiting) > 1 and waiting[0] is req:
                waiting.pop(0)
                if prioritized:  # waitQueue.popAndRequeue: behind the others of its priority
                    _insert_by_priority(waiting, req)
                else:  # waitQueue.pop (2.10+): behind the others, so waiting requests take turns
                    waiting.append(req)
        self._queue_save(consumer)
        self.process_waiting(consumer, now, end_of_stream)

    def _serve_batch(self, consumer: Consumer, waiting: list, now: int) -> None:
        """serve's loop for the usual request, the only one waiting, without max_bytes or
        priority groups, in one step: what the loop would deliver to it before meeting a
        rule of its own (a redelivery, the end of the stream, max_ack_pending) goes out as
        one batch (Consumer.peek_batch, Client.deliver_batch) with the same ack replies; the
        loop goes on from there. Nothing happens when the batch can not be delivered so."""
        req = waiting[0]
        if req.max_bytes or (req.expires and req.expires <= now) or not req.account.has_interest(req.interest):
            return  # (the loop tells the request or drops it)
        msgs = consumer.peek_batch(now, req.batch)
        if not msgs:
            return
        if not self.js.client.deliver_batch(req.reply, batch_items(consumer, msgs)):
            return
        consumer.record_batch(msgs, now)
        req.batch -= len(msgs)
        req.sent += len(msgs)
        if req.batch <= 0:
            waiting.pop(0)

    def _held_back(self, consumer: Consumer, msg, count: int, size: int, now: int, burst: int) -> bool:
        """Pacing (Consumer.pace) holds ``msg`` back: the delivery just recorded is taken
        back and the timer task comes again when it may go."""
        at = consumer.pace(msg.seq, msg.ts, size, now, burst)
        if not at:
            return False
        consumer.undo(msg.seq, count)
        consumer.retry_at = at
        self.poke()
        return True

    def ack_reply(self, consumer: Consumer, msg, count: int) -> bytes:
        return ack_reply(consumer, msg, count)

    def process_waiting(self, consumer: Consumer, now: int, end_of_stream: bool) -> None:
        """consumer.go processWaiting: expired requests are told (408) and leave, so do those
        nobody listens to any more (silently); at the end of the stream (nothing more to
        deliver, not held back by max_ack_pending) a request that may not wait ends: 404,
        unless it gave expires and has had nothing yet."""
        waiting = consumer.waiting
        if not waiting:
            return
        keep = []
        send = self.js.send
        for req in waiting:
            expired = req.expires and req.expires <= now
            if expired:
                send(req.reply, b"", _timeout_header(req.batch, req.max_bytes))
            elif end_of_stream and req.no_wait and (not req.expires or req.sent):
                send(req.reply, b"", _HDR_NO_MESSAGES)
            elif req.account.has_interest(req.interest):
                keep.append(req)
        waiting[:] = keep

    # -- new messages -------------------------------------------------------------------------

    def stream_changed(self, stream) -> None:
        now = clock.now_ns()
        for consumer in stream.consumers.values():
            if consumer.cfg.deliver_subject:
                self.push(consumer, now)
            elif consumer.waiting:
                self.serve(consumer, now)

    def push(self, consumer: Consumer, now: int) -> None:
        """Deliver to a push consumer's deliver subject while it has subscribers (one member
        of a deliver_group each time), at most PUSH_BURST at a time."""
        dsubj = consumer.cfg.deliver_subject.encode()
        server = self.server
        client = self.js.client
        if not client.has_interest(dsubj):  # here, or on a route or leaf connection
            consumer.retry_at = now + NO_INTEREST_RETRY
            self.poke()
            return
        consumer.retry_at = 0
        if consumer.fc_reply:
            return  # waiting for the client's flow control answer
        headers_only = consumer.cfg.headers_only
        flow_control = consumer.cfg.flow_control
        paced = consumer.replaying or consumer.cfg.rate_limit_bps > 0
        if paced:  # rate_limit_bps's bucket holds the largest message (consumer.go setRateLimit)
            max_msg_size = consumer.stream.cfg.max_msg_size
            burst = max_msg_size if max_msg_size > 0 else server.options.max_payload
        sent = False
        burst_left = PUSH_BURST
        if not paced and not flow_control:
            # The messages the loop below would send before meeting a rule of its own, as one
            # batch (see _serve_batch); the loop goes on from there.
            msgs = consumer.peek_batch(now, PUSH_BURST)
            if msgs and client.deliver_batch(dsubj, batch_items(consumer, msgs, headers_only)):
                consumer.record_batch(msgs, now)
                consumer.last_push = now
                sent = True
                burst_left -= len(msgs)
        for _ in range(burst_left):
            got = consumer.next_msg(now)
            if got is None:
                if sent and consumer.pending:
                    self.poke()  # new ack deadlines: the timer task takes them into account
                return
            sent = True
            msg, count = got
            hdr, data = msg.hdr or None, msg.data
            if headers_only:
                hdr, data = _headers_only(hdr, data)
            ack_reply = self.ack_reply(consumer, msg, count)
            if paced:
                size = len(msg.subject) + len(ack_reply) + len(hdr or b"") + len(data)
                if self._held_back(consumer, msg, count, size, now, burst):
                    return
            if not deliver(self.js.client, dsubj, msg.subject, ack_reply, hdr, data):
                consumer.undo(msg.seq, count)
                consumer.retry_at = now + NO_INTEREST_RETRY
                self.poke()
                return
            consumer.last_push = now
            if flow_control:
                consumer.fc_bytes += len(data) + len(hdr or b"")
                if consumer.fc_bytes >= FLOW_CONTROL_BYTES:
                    consumer.fc_count += 1
                    consumer.fc_reply = b"$JS.FC.%s.%s.%d" % (
                        consumer.stream.name.encode(), consumer.name.encode(), consumer.fc_count)
                    deliver(self.js.client, dsubj, dsubj, consumer.fc_reply, _HDR_FLOW_CONTROL, b"")
                    return
        consumer.retry_at = now  # more to send: the timer task goes on at once
        self.poke()

    # -- acks ---------------------------------------------------------------------------------

    def on_ack(self, subject: bytes, reply, hdr, payload: bytes) -> None:
        # One frame for the whole of an ack (every delivered message's comes here): the
        # plain +ACK's steps after the consumer's are _deliver_later's and _queue_save's,
        # written out.
        try:
            # The stream and consumer are the 3rd and 4th tokens of 9 or more, the numbers the
            # 5th to 3rd last: the head before the last five tokens is split and decoded only
            # when it is not the last ack's.
            parts = subject.rsplit(b".", 5)
            if len(parts) != 6:
                return
            head = parts[0]
            if head == self._ack_head:
                stream_name, consumer_name = self._ack_names
            else:
                tokens = head.split(b".")
                if len(tokens) < 4:
                    return
                stream_name = tokens[2].decode("utf-8", "replace")
                consumer_name = tokens[3].decode("utf-8", "replace")
                self._ack_head, self._ack_names = head, (stream_name, consumer_name)
            stream = self.js.streams.get(stream_name)
            if stream is None:
                return
            consumer = stream.consumers.get(consumer_name)
            if consumer is None:
                return
            try:
                count, sseq, cseq = int(parts[1]), int(parts[2]), int(parts[3])
            except ValueError:
                return
            now = clock.now_ns()
            kind = payload[:4]
            if not payload or kind == b"+ACK":
                acked = consumer.ack(sseq, cseq, now)
                if acked and stream.cfg.retention != "limits":
                    self._retain(consumer, acked)
                if not reply:
                    due = self._due
                    if not due:
                        self.server.before_flush.append(self._deliver_due)
                    due[consumer] = None
                    if consumer.dirty and not consumer.save_queued and consumer.cfg.durable_name \
                            and consumer.stream.file_backed:
                        consumer.save_queued = True
                        self.poke()
                    return
            elif kind == b"-NAK":
                delay = 0
                rest = payload[4:].strip()
                if rest:
                    try:
                        delay = int(loads(rest).get("delay", 0))
                    except (ValueError, AttributeError, TypeError):
                        delay = 0
                consumer.nak(sseq, delay, now)
                if delay:
                    self.poke()
            elif kind == b"+WPI":
                consumer.progress(sseq, now)
                self.poke()
                return  # nats-server answers no progress ack
            elif kind == b"+NXT":
                self._retain(consumer, consumer.ack(sseq, cseq, now))
                if reply:
                    self.pull(consumer, reply, payload[4:].strip())
                    reply = None
            elif payload[:5] == b"+TERM":
                if consumer.term(sseq, now):
                    self._retain(consumer, [sseq])
                    self._advisory(b"MSG_TERMINATED", consumer, {
                        "type": "io.nats.jetstream.advisory.v1.terminated",
                        "consumer_seq": cseq, "stream_seq": sseq, "deliveries": count})
            else:
                return
            if reply:
                held = consumer.held_ack_replies
                if held is not None:
                    held.append(reply)  # (answered once its group committed the ack)
                else:
                    self.js.send(reply, b"")
            self._deliver_later(consumer)
            self._queue_save(consumer)
        except Exception:  # a bug must not take the acker's connection down
            log.exception("ack on %r failed", subject)

    def on_ack_run(self, acks: list, size: int) -> None:
        """A run of acks (``(subject, reply, payload)`` in order: a client's chunk of them,
        Client._callback_pubs), each as on_ack takes it: a plain +ACK without a reply (an
        empty payload or "+ACK") to the last ack's consumer in this loop, the clock read
        once a run; anything else through on_ack."""
        head = None  # (the consumer of the last ack's head, looked up again after on_ack)
        consumer = None
        now = clock.now_ns()
        due = self._due
        for subject, reply, payload in acks:
            try:
                if reply or (payload and payload[:4] != b"+ACK"):
                    head = None
                    self.on_ack(subject, reply, None, payload)
                    continue
                parts = subject.rsplit(b".", 5)
                if len(parts) != 6 or parts[0] != head:
                    head = None
                    if len(parts) != 6 or parts[0] != self._ack_head:
                        self.on_ack(subject, reply, None, payload)  # (a new head: on_ack reads it)
                        continue
                    stream_name, consumer_name = self._ack_names
                    stream = self.js.streams.get(stream_name)
                    consumer = stream.consumers.get(consumer_name) if stream is not None else None
                    if consumer is None:
                        continue  # (as on_ack: no such consumer)
                    assert stream is not None
                    head = parts[0]
                    retained = stream.cfg.retention != "limits"
                    saved = bool(consumer.cfg.durable_name) and consumer.stream.file_backed
                    due = self._due
                try:
                    int(parts[1])
                    sseq, cseq = int(parts[2]), int(parts[3])
                except ValueError:
                    continue
                assert consumer is not None
                acked = consumer.ack(sseq, cseq, now)
                if acked and retained:
                    self._retain(consumer, acked)
                if not due:
                    self.server.before_flush.append(self._deliver_due)
                due[consumer] = None
                if consumer.dirty and saved and not consumer.save_queued:
                    consumer.save_queued = True
                    self.poke()
            except Exception:  # a bug must not take the acker's connection down
                head = None
                log.exception("ack on %r failed", subject)

    def _deliver_later(self, consumer: Consumer) -> None:
        """Deliver what an ack made room for once the chunk being handled is done (the
        server runs _deliver_due before it writes the chunk's output): a client acks in
        chunks, and one delivery after them all sends the messages they let go as one batch
        where a delivery after each ack sent them one by one."""
        due = self._due
        if not due:
            self.server.before_flush.append(self._deliver_due)
        due[consumer] = None

    def _deliver_due(self) -> None:
        due, self._due = self._due, {}
        now = clock.now_ns()
        streams = self.js.streams
        for consumer in due:
            live = streams.get(consumer.stream.name)
            if live is None or live is not consumer.stream or live.consumers.get(consumer.name) is not consumer:
                continue  # deleted meanwhile
            try:
                if consumer.cfg.deliver_subject:
                    self.push(consumer, now)
                else:
                    self.serve(consumer, now)
                self._queue_save(consumer)
            except Exception:  # a bug must not take the acker's connection down
                log.exception("JetStream consumer %s > %s: delivery failed", live.name, consumer.name)

    def _queue_save(self, consumer: Consumer) -> None:
        """A durable's state changed: make sure the timer task plans a snapshot."""
        if consumer.dirty and not consumer.save_queued and consumer.cfg.durable_name and consumer.stream.file_backed:
            consumer.save_queued = True
            self.poke()

    def _retain(self, consumer: Consumer, acked: list) -> None:
        """Interest and workqueue retention: an acknowledged message goes once no consumer
        needs it any more (workqueue: at once, one consumer per message)."""
        stream = consumer.stream
        policy = stream.cfg.retention
        if not acked or policy == "limits" or stream.replicated:
            return  # (a replicated stream's leader removes them through its group: consumer_group_runner)
        store = stream.store
        removed = False
        for seq in acked:
            if policy == "interest":
                msg = store.load_msg(seq)
                if msg is None or not all(c.is_done_with(seq, msg.subject) for c in stream.consumers.values()):
                    continue
            removed = store.remove_msg(seq) or removed
        if removed:
            self.js._store_dirty(store)

    def _advisory(self, kind: bytes, consumer: Consumer, fields: dict) -> None:
        advisories.publish(self.js, f"{_ADVISORY.decode()}{kind.decode()}.{consumer.stream.name}.{consumer.name}",
                           lambda: {"type": fields.pop("type"), "stream": consumer.stream.name,
                                    "consumer": consumer.name, **fields})

    # -- the timer ----------------------------------------------------------------------------

    def _next_deadline(self) -> int | None:
        best = None
        for stream in self.js.streams.values():
            for consumer in stream.consumers.values():
                d = consumer.next_deadline()
                if consumer.dirty and consumer.cfg.durable_name and stream.file_backed:
                    save_at = consumer.saved_at + consumer_store.SNAPSHOT_INTERVAL
                    if d is None or save_at < d:
                        d = save_at
                if consumer.cfg.inactive_threshold:  # (durables too, as nats-server 2.10+)
                    gone = consumer.active_at + consumer.cfg.inactive_threshold
                    if d is None or gone < d:
                        d = gone
                if consumer.retry_at and (d is None or consumer.retry_at < d):
                    d = consumer.retry_at
                if consumer.unpause_at and (d is None or consumer.unpause_at < d):
                    d = consumer.unpause_at
                if consumer.pin_expires and (d is None or consumer.pin_expires < d):
                    d = consumer.pin_expires
                if consumer.cfg.idle_heartbeat:
                    beat = consumer.last_push + consumer.cfg.idle_heartbeat
                    if d is None or beat < d:
                        d = beat
                for req in consumer.waiting:
                    if req.expires and (d is None or req.expires < d):
                        d = req.expires
                    if req.heartbeat and (d is None or req.last_beat + req.heartbeat < d):
                        d = req.last_beat + req.heartbeat
                if d is not None and (best is None or d < best):
                    best = d
        return best

    async def run(self) -> None:
        while True:
            deadline = self._next_deadline()
            self._wake = trio.Event()
            if deadline is None:
                await self._wake.wait()
            else:
                delay = max(0.0, (deadline - clock.now_ns()) / 1e9) + 0.001
                with trio.move_on_after(delay):
                    await self._wake.wait()
            now = clock.now_ns()
            for stream in list(self.js.streams.values()):
                for consumer in list(stream.consumers.values()):
                    try:
                        self._tick(consumer, now)
                    except Exception:  # a bug in one consumer must not stop the others' timers
                        log.exception("JetStream consumer %s > %s: timer failed", stream.name, consumer.name)
            self.server.flush_touched()
            self.save_durables(now)

    def save_durables(self, now: int, force: bool = False) -> None:
        """Snapshot changed durables of file streams (at most every SNAPSHOT_INTERVAL); in a
        cluster the ephemerals too (consumer_store.kept_on_disk)."""
        clustered = self.js.cluster_block is not None
        for stream in self.js.streams.values():
            if not stream.file_backed:
                continue
            for consumer in stream.consumers.values():
                if consumer_store.kept_on_disk(consumer, clustered) and consumer.dirty and (
                        force or now - consumer.saved_at >= consumer_store.SNAPSHOT_INTERVAL):
                    consumer.save_queued = False
                    try:
                        consumer_store.save(consumer, self.js.stream_path(stream))
                    except OSError as exc:
                        log.error("JetStream: can not save consumer %s: %s", consumer.name, exc)
                    consumer.saved_at = now

    def resumed(self, consumer: Consumer, now: int) -> None:
        """A paused consumer goes on: what waited for it is delivered."""
        if consumer.cfg.deliver_subject:
            self.push(consumer, now)
        elif consumer.waiting:
            self.serve(consumer, now)

    def _tick(self, consumer: Consumer, now: int) -> None:
        cfg = consumer.cfg
        if consumer.unpause_at and consumer.unpause_at <= now:
            # consumer.go updatePauseState's timer: the pause is over (an advisory says so)
            consumer.unpause_at = 0
            advisories.consumer_pause(self.js, consumer.stream.name, consumer.name, False, cfg.pause_until)
            self.resumed(consumer, now)
        if consumer.pin_expires and consumer.pin_expires <= now:
            # consumer.go setPinnedTimer's timer: the pinned client asked for nothing for
            # priority_timeout; the next request without an id gets a new pin
            group = consumer.pin_group
            consumer.unassign_pin()
            advisories.consumer_unpinned(self.js, consumer.stream.name, consumer.name, group,
                                         advisories.UNPINNED_TIMEOUT)
            if consumer.waiting:
                self.serve(consumer, now)
        if cfg.inactive_threshold:  # consumer.go deleteNotActive: ephemerals and durables alike
            if cfg.deliver_subject:
                if self.js.client.has_interest(cfg.deliver_subject.encode()):
                    consumer.active_at = now
            elif consumer.waiting:
                consumer.active_at = now
            if now - consumer.active_at >= cfg.inactive_threshold:
                self.js.api.consumers.remove(consumer)
                return
        for seq in consumer.expire_acks(now):
            self._advisory(b"MAX_DELIVERIES", consumer, {
                "type": "io.nats.jetstream.advisory.v1.max_deliver",
                "stream_seq": seq, "deliveries": consumer.cfg.max_deliver})
        if consumer.cfg.deliver_subject:
            if consumer.retry_at and consumer.retry_at <= now or consumer.rdq:
                self.push(consumer, now)
            beat = consumer.cfg.idle_heartbeat
            if beat and consumer.last_push + beat <= now:
                consumer.last_push = now
                self.js.send(consumer.cfg.deliver_subject.encode(), b"", _heartbeat_header(consumer))
            return
        # consumer.go loopAndGatherMsgs: a waiting request's own timer (its heartbeat or its
        # expiry) runs processWaiting as at the end of the stream, so a no_wait request that has
        # had messages and is only held back now (max_ack_pending) ends with 404 No Messages
        # instead of another heartbeat (nats-py's fetch relies on it).
        timer_due = any((req.heartbeat and req.last_beat + req.heartbeat <= now) or (req.expires and req.expires <= now)
                        for req in consumer.waiting)
        self.process_waiting(consumer, now, timer_due)
        if consumer.waiting or consumer.rdq:
            self.serve(consumer, now)
        for req in consumer.waiting:
            if req.heartbeat and req.last_beat + req.heartbeat <= now:
                req.last_beat = now
                self.js.send(req.reply, b"", _heartbeat_header(consumer))
