"""What the test double shows of JetStream, NSQ and STAN: frozen snapshots, and JetStream faults.

Every function here runs in the server's trio thread (``NatsServer`` calls them through its
``_call``) and copies what it reads into frozen dataclasses, so a test holds a consistent picture
that the server cannot change under it. Nothing here is used by the server itself: the faults
wrap methods of one running engine's objects and unwrap them when spent or cancelled.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Callable

__all__ = [
    "ConsumerState",
    "NsqChannelState",
    "NsqTopicState",
    "StanChannelState",
    "StanSubscriptionState",
    "StoredMessage",
    "StreamState",
]

# The most messages one messages() or kv() snapshot copies: a test asking for a whole large
# stream gets the first ones, not a copy of gigabytes made inside the server's loop.
DEFAULT_MAX_SNAPSHOT_MESSAGES = 10_000
# The text a publisher gets (err_code 10077, "{err}") when an injected store fault fails its message.
INJECTED_STORE_ERROR = "store failed: injected by natserver.testing"
_KV_STREAM_PREFIX = "KV_"  # nats.go/nats-py: a bucket's stream is KV_<bucket>
_KV_OPERATION = b"KV-Operation"  # DEL or PURGE marks a removed key
NS_PER_SECOND = 1e9


# -- JetStream ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as a stream stores it."""

    stream: str
    seq: int
    subject: str
    data: bytes
    raw_headers: bytes | None
    time: float  # when stored, on the server's clock (seconds since the epoch)

    @property
    def headers(self) -> dict[str, str] | None:
        return parse_headers(self.raw_headers) if self.raw_headers else None


def parse_headers(raw: bytes) -> dict[str, str]:
    """A NATS/1.0 header block as a dict (the last value of a repeated key; the status line
    as "Status" and "Description")."""
    headers: dict[str, str] = {}
    lines = raw.decode("utf-8", "replace").split("\r\n")
    status = lines[0][len("NATS/1.0"):].strip() if lines and lines[0].startswith("NATS/1.0") else ""
    if status:
        code, _, description = status.partition(" ")
        headers["Status"] = code
        if description:
            headers["Description"] = description
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip()] = value.strip()
    return headers


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerState:
    """A consumer as it was when the snapshot was taken (stream sequences unless named)."""

    stream: str
    name: str
    config: dict  # as in CONSUMER.INFO
    delivered_consumer_seq: int
    delivered_stream_seq: int
    ack_floor_consumer_seq: int
    ack_floor_stream_seq: int
    pending_acks: tuple[int, ...]  # delivered, not acked yet, oldest delivery first
    redelivery_counts: dict[int, int]  # stream seq -> deliveries so far, for those delivered more than once
    redelivery_queue: tuple[int, ...]  # due for redelivery, in order
    num_pending: int  # not delivered yet (CONSUMER.INFO num_pending)
    waiting_pulls: int  # pull requests waiting for messages

    @property
    def num_ack_pending(self) -> int:
        return len(self.pending_acks)

    def acked(self, seq: int) -> bool:
        """Whether stream sequence ``seq`` was delivered and is acknowledged."""
        return seq <= self.delivered_stream_seq and seq not in self.pending_acks


@dataclasses.dataclass(frozen=True, slots=True)
class StreamState:
    """A stream as it was when the snapshot was taken; ``messages()`` reads the messages."""

    name: str
    config: dict  # as in STREAM.INFO
    messages_count: int
    bytes: int
    first_seq: int
    last_seq: int
    consumer_names: tuple[str, ...]
    _owner: Any = dataclasses.field(repr=False, compare=False)

    def messages(self, subject: str | None = None, start_seq: int = 1,
                 limit: int = DEFAULT_MAX_SNAPSHOT_MESSAGES) -> list[StoredMessage]:
        """The stream's messages now (from ``start_seq``, matching ``subject``, at most
        ``limit``), read in the server's thread."""
        return self._owner.stream_messages(self.name, subject=subject, start_seq=start_seq, limit=limit)

    def consumer(self, name: str) -> ConsumerState:
        return self._owner.consumer(self.name, name)


def jetstream_engine(server, account: str):
    """The JetStream engine serving ``account`` on ``server`` (None: JetStream is off)."""
    first = getattr(server, "jetstream", None)
    if first is None:
        return None
    for engine in getattr(first, "engines", [first]):
        if engine.account_name == account:
            return engine
    return None


def find_stream(server, account: str, name: str):
    engine = jetstream_engine(server, account)
    if engine is None:
        raise LookupError("JetStream is not enabled (NatsServer(jetstream=True))")
    stream = engine.streams.get(name)
    if stream is None:
        raise LookupError(f"no stream {name!r}; streams: {sorted(engine.streams)}")
    return stream


def find_consumer(server, account: str, stream_name: str, name: str):
    stream = find_stream(server, account, stream_name)
    consumer = stream.consumers.get(name)
    if consumer is None:
        raise LookupError(f"no consumer {name!r} on stream {stream_name!r}; consumers: {sorted(stream.consumers)}")
    return consumer


def stream_state(stream, owner) -> StreamState:
    store = stream.store
    return StreamState(stream.name, stream.cfg.to_json(), store.msgs, store.bytes,
                       store.first_seq if store.msgs else store.last_seq + 1, store.last_seq,
                       tuple(sorted(stream.consumers)), owner)


def streams(server, account: str, owner) -> list[StreamState]:
    engine = jetstream_engine(server, account)
    if engine is None:
        return []
    return [stream_state(engine.streams[name], owner) for name in sorted(engine.streams)]


def stream_messages(stream, match: Callable[[str], bool] | None, start_seq: int, limit: int) -> list[StoredMessage]:
    """``match``: whether a subject is wanted (None: every message)."""
    store = stream.store
    out: list[StoredMessage] = []
    seq = max(start_seq, store.first_seq)
    while seq <= store.last_seq and len(out) < limit:
        msg = store.load_msg(seq)
        seq += 1
        if msg is None:
            continue  # deleted
        text = msg.subject.decode("utf-8", "replace")
        if match is not None and not match(text):
            continue
        out.append(StoredMessage(stream.name, msg.seq, text, bytes(msg.data), bytes(msg.hdr) or None,
                                 msg.ts / NS_PER_SECOND))
    return out


def consumer_state(consumer) -> ConsumerState:
    pending = tuple(consumer.pending)
    return ConsumerState(
        consumer.stream.name, consumer.name, consumer.cfg.to_json(),
        consumer.delivered_cseq, consumer.delivered_sseq, consumer.ack_floor_cseq, consumer.ack_floor_sseq,
        pending, {seq: n for seq, n in consumer.rdc.items() if n > 1}, tuple(consumer.rdq),
        consumer.num_pending(), len(consumer.waiting))


def kv_bucket(server, account: str, bucket: str, limit: int) -> dict[str, bytes]:
    """A KV bucket's live keys and their latest values (deleted and purged keys left out)."""
    stream = find_stream(server, account, _KV_STREAM_PREFIX + bucket)
    prefix = f"$KV.{bucket}."
    values: dict[str, bytes] = {}
    for msg in stream_messages(stream, None, 1, limit):
        key = msg.subject[len(prefix):] if msg.subject.startswith(prefix) else msg.subject
        if msg.raw_headers and _KV_OPERATION in msg.raw_headers:
            values.pop(key, None)
        else:
            values[key] = msg.data
    return values


# -- JetStream faults -------------------------------------------------------------------------


class MethodFault:
    """Replaces ``target.<method>`` (an instance attribute shadowing the class's method) by
    ``wrapper`` until ``fire`` is told it is spent or ``remove`` is called."""

    def __init__(self, target: Any, method: str, make_wrapper: Callable[[Callable, MethodFault], Callable]) -> None:
        self.target = target
        self.method = method
        self.original = getattr(target, method)
        self.on_spent: Callable[[], None] | None = None
        setattr(target, method, make_wrapper(self.original, self))

    def remove(self) -> None:
        if self.target.__dict__.get(self.method) is not None:
            try:
                delattr(self.target, self.method)
            except AttributeError:
                pass


def _running_jetstream(module: str):
    """A module of the JetStream engine that runs (so it is loaded): the test double does not
    load JetStream (a few hundred milliseconds of imports) for servers without it."""
    return sys.modules[f"natserver.jetstream.{module}"]


def fail_stores(stream, fault) -> MethodFault:
    """The next ``fault.count`` messages stored in ``stream`` fail with a store error (the
    publisher gets 503/10077, as when nats-server's store refuses a write)."""
    store_error = _running_jetstream("store").StoreError

    def make(original, method_fault):
        def store_msg(*args, **kwargs):
            if fault.active:
                fault._fire()
                raise store_error(INJECTED_STORE_ERROR)
            return original(*args, **kwargs)

        return store_msg

    return MethodFault(stream.store, "store_msg", make)


def expire_pulls(server, account: str, stream_name: str, consumer_name: str, fault) -> MethodFault:
    """The next ``fault.count`` pull requests to the consumer end at once with ``408 Request
    Timeout``, as if their ``expires`` had passed before any message came."""
    engine = jetstream_engine(server, account)
    if engine is None:
        raise LookupError("JetStream is not enabled (NatsServer(jetstream=True))")
    find_consumer(server, account, stream_name, consumer_name)  # a typo fails now, not silently
    timeout_header = _running_jetstream("delivery")._timeout_header

    def make(original, method_fault):
        def pull(consumer, reply, payload):
            if (fault.active and reply and consumer.stream.name == stream_name
                    and consumer.name == consumer_name):
                fault._fire()
                batch, max_bytes = _pull_size(payload)
                engine.send(reply, b"", timeout_header(batch, max_bytes))
                return None
            return original(consumer, reply, payload)

        return pull

    return MethodFault(engine.delivery, "pull", make)


def _pull_size(payload: bytes) -> tuple[int, int]:
    body = bytes(payload).strip()
    try:
        if body[:1] == b"{":
            request = json.loads(body)
            return max(int(request.get("batch", 1)), 1), max(int(request.get("max_bytes", 0)), 0)
        if body:
            return max(int(body), 1), 0
    except (ValueError, TypeError, AttributeError):
        pass
    return 1, 0


# -- NSQ ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class NsqChannelState:
    topic: str
    name: str
    depth: int  # queued, not in flight
    in_flight: int
    deferred: int
    clients: int
    message_count: int
    requeue_count: int
    timeout_count: int
    paused: bool


@dataclasses.dataclass(frozen=True, slots=True)
class NsqTopicState:
    name: str
    depth: int  # waiting for a channel
    message_count: int
    paused: bool
    channels: dict[str, NsqChannelState]


def nsq_topics(server) -> list[NsqTopicState]:
    front = getattr(server, "nsq", None)
    if front is None:
        raise LookupError("NSQ is not enabled (NatsServer(nsq={...}))")
    out = []
    for name in sorted(front.engine.topics):
        topic = front.engine.topics[name]
        channels = {
            cname: NsqChannelState(name, cname, channel.queue.depth, len(channel.in_flight), len(channel.deferred),
                                   len(channel.clients), channel.message_count, channel.requeue_count,
                                   channel.timeout_count, channel.paused)
            for cname, channel in sorted(topic.channels.items())
        }
        out.append(NsqTopicState(name, topic.depth, topic.message_count, topic.paused, channels))
    return out


# -- STAN -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class StanSubscriptionState:
    channel: str
    client_id: str  # "" for an offline durable
    inbox: str
    durable_name: str
    queue: str  # the queue group's name ("" for none)
    last_sent: int
    pending_acks: tuple[int, ...]  # sent, not acked
    redeliveries: dict[int, int]  # seq -> redeliveries so far
    max_in_flight: int
    ack_wait: float  # seconds


@dataclasses.dataclass(frozen=True, slots=True)
class StanChannelState:
    name: str
    first_seq: int
    last_seq: int
    messages_count: int
    subscriptions: tuple[StanSubscriptionState, ...]


def stan_channels(server) -> list[StanChannelState]:
    engine = getattr(server, "stan", None)
    if engine is None:
        raise LookupError("NATS Streaming is not enabled (NatsServer(stan=StanOptions()))")
    out = []
    for name in sorted(engine.channels):
        channel = engine.channels[name]
        subs = list(channel.plain) + [m for q in channel.queues.values() for m in q.members]
        subs += [s for s in channel.durables.values() if not s.client_id and s not in subs]
        states = tuple(
            StanSubscriptionState(name, sub.client_id, sub.inbox, sub.durable_name,
                                  sub.queue.name if sub.queue is not None else "", sub.last_sent,
                                  tuple(sub.pending), dict(sub.rdlv), sub.max_in_flight, sub.ack_wait)
            for sub in subs)
        store = channel.store
        out.append(StanChannelState(name, store.first_seq, store.last_seq, store.msgs.msgs, states))
    return out
