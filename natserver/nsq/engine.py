"""Topics, channels and their queues: nsqd's message semantics, sans-IO.

Nothing here does network I/O or reads a clock: every operation that depends on time takes
``now`` (monotonic seconds), and the owner calls :meth:`Engine.process` regularly (nsqd's
queue scan, every ``queue_scan_interval``) to time out in-flight messages and release
deferred ones. Consumers are objects with the :class:`Consumer` attributes; the engine calls
their ``deliver(message)`` synchronously, so a TCP layer only needs to encode and flush.

nsqd semantics reproduced (nsqd/topic.go, channel.go):

* a topic copies each message to every channel; with no channel (or while paused) it keeps
  them, and the first channel created receives them;
* a channel gives each message to one of its clients, only while that client's in-flight
  count is below its RDY; ``attempts`` goes up at each delivery;
* an in-flight message not finished within the client's msg_timeout is requeued
  (timeout_count); TOUCH restarts the timer, capped at max_msg_timeout after delivery;
  REQ requeues at once or after a delay (deferred), requeue_count either way;
* beyond ``mem_queue_size`` messages go to a disk queue (``#ephemeral`` ones are dropped, as
  nsqd's dummy backend does); at shutdown memory, in-flight and deferred messages are
  written to disk and the topic/channel list to ``nsqd.dat``, so a restart finds them.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import heapq
import json
import logging
import os
import random
import struct
import threading

from .. import clock
from ..jetstream.store import FileStore
from .config import VERSION, NsqOptions
from .protocol import is_valid_name

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["Engine", "Topic", "Channel", "Message", "Consumer", "GuidFactory"]

log = logging.getLogger("natserver")

METADATA_FILE = "nsqd.dat"  # nsqd's metadata file name (nsqd.go)
EPHEMERAL = "#ephemeral"
_DISK_HEADER = struct.Struct(">16sHq")  # id, attempts, timestamp (ns) of a message on disk
DISK_READ_AHEAD = 256  # messages read from a disk queue at once


class GuidFactory:
    """nsqd's 64-bit ids (guid.go): milliseconds since nsqd's epoch << 22 | node << 12 |
    sequence, written as 16 lowercase hex characters."""

    TWEPOCH = 1288834974288  # ms, nsqd guid.go
    SEQUENCE_MASK = (1 << 12) - 1

    def __init__(self, node_id: int, clock_ns=clock.now_ns) -> None:
        self.node_id = node_id & 0x3FF
        self.clock_ns = clock_ns
        self.last_ts = -1
        self.sequence = 0

    def new_id(self) -> bytes:
        ts = self.clock_ns() >> 20  # nsqd uses UnixNano >> 20 (about a millisecond)
        if ts <= self.last_ts:
            self.sequence = (self.sequence + 1) & self.SEQUENCE_MASK
            if self.sequence == 0:  # nsqd would fail; we move to the next tick instead
                self.last_ts += 1
            ts = self.last_ts
        else:
            self.sequence = 0
            self.last_ts = ts
        guid = ((ts - self.TWEPOCH) << 22 | self.node_id << 12 | self.sequence) & 0xFFFFFFFFFFFFFFFF
        return b"%016x" % guid


class Message:
    """One message on one channel (each channel has its own copy: own attempts, timers)."""

    __slots__ = ("id", "body", "timestamp", "attempts", "defer", "consumer", "deadline", "delivered_at", "due")

    consumer: Consumer | None

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, attempts: int = 0, defer: float = 0.0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, set when published
        self.attempts = attempts
        self.defer = defer  # seconds to hold it back when it reaches a channel (DPUB)
        self.consumer = None  # the consumer it is in flight to
        self.deadline = 0.0  # in-flight timeout
        self.delivered_at = 0.0
        self.due = 0.0  # deferred until

    def copy(self) -> "Message":
        return Message(self.id, self.body, self.timestamp, 0, self.defer)


class Consumer:
    """A subscribed client as the engine sees it. Subclass or set ``deliver``."""

    def __init__(self, cid: int, *, msg_timeout: float, sample_rate: int = 0) -> None:
        self.cid = cid
        self.rdy = 0
        self.in_flight = 0
        self.msg_timeout = msg_timeout
        self.sample_rate = sample_rate
        self.closing = False
        self.channel: Channel | None = None
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0

    def deliver(self, message: Message) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close_by_server(self) -> None:
        """The channel or topic was deleted: nsqd closes its clients' connections."""

    def set_rdy(self, count: int, now: float) -> None:
        self.rdy = count
        if self.channel is not None:
            self.channel.pump(now)

    def start_close(self) -> None:
        """CLS: no more messages (nsqd sets RDY 0 and the closing state)."""
        self.closing = True
        self.rdy = 0


class _QueueConfig:
    """A stream configuration with no limits, for a FileStore used as a FIFO queue."""

    max_msgs = 0
    max_bytes = 0
    max_age = 0
    max_msgs_per_subject = 0
    discard = "old"
    discard_new_per_subject = False


class DiskQueue:
    """A FIFO of messages on disk: natserver's JetStream FileStore (segments, CRCs, crash
    recovery) with one subject, read from the front. nsqd's diskqueue plays this part.

    Reads go ahead in batches and the store's front moves (one compaction) at the next
    ``flush``, so a read costs no per-message removal record; what was read but not yet
    handed out stays on disk."""

    def __init__(self, path: str, segment_size: int) -> None:
        self.path = path
        self.store = FileStore(path, _QueueConfig(), segment_size=segment_size)
        self._ahead: collections.deque = collections.deque()  # (seq, Message) read, not popped
        self._next_seq = 0  # the next sequence to read ahead
        self._popped_seq = 0  # the last sequence popped (removed at the next flush)
        self._popped = 0  # popped since the last flush

    @property
    def depth(self) -> int:
        return self.store.msgs - self._popped

    def put(self, message: Message) -> None:
        header = _DISK_HEADER.pack(message.id, message.attempts & 0xFFFF, message.timestamp)
        self.store.store_msg(b"m", header, message.body, message.timestamp)

    def flush(self) -> None:
        if self._popped:
            self.store.compact(self._popped_seq + 1)
            self._popped = 0
        self.store.flush()

    def _read_ahead(self) -> None:
        store = self.store
        seq = max(self._next_seq, store.first_seq, self._popped_seq + 1)
        last = store.last_seq
        ahead = self._ahead
        while seq <= last and len(ahead) < DISK_READ_AHEAD:
            stored = store.load_msg(seq)
            if stored is not None and len(stored.hdr) == _DISK_HEADER.size:
                msg_id, attempts, timestamp = _DISK_HEADER.unpack(stored.hdr)
                ahead.append((seq, Message(msg_id, stored.data, timestamp, attempts)))
            seq += 1
        self._next_seq = seq

    def pop(self) -> Message | None:
        if not self._ahead:
            self._read_ahead()
            if not self._ahead:
                return None
        seq, message = self._ahead.popleft()
        self._popped_seq = seq
        self._popped += 1
        return message

    def empty(self) -> None:
        self._ahead.clear()
        self._popped = 0
        self.store.purge()
        self._next_seq = self._popped_seq = self.store.last_seq
        self.store.flush()

    def close(self) -> None:
        self.flush()
        self.store.stop()

    def delete(self) -> None:
        self.store.delete()


class _Queue:
    """Memory up to mem_queue_size, then disk (or nothing, for ephemeral queues)."""

    def __init__(self, engine: "Engine", disk_name: str, ephemeral: bool) -> None:
        self.engine = engine
        self.memory: collections.deque = collections.deque()
        self.disk_name = disk_name
        self.ephemeral = ephemeral
        self.backend: DiskQueue | None = None
        if not ephemeral and os.path.isdir(self._disk_path()):
            self.backend = DiskQueue(self._disk_path(), engine.options.max_bytes_per_file)

    def _disk_path(self) -> str:
        return os.path.join(self.engine.options.data_dir, self.disk_name + ".diskqueue")

    @property
    def depth(self) -> int:
        return len(self.memory) + (self.backend.depth if self.backend is not None else 0)

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def put(self, message: Message) -> bool:
        """False when the message was dropped (an ephemeral queue's overflow)."""
        if len(self.memory) < self.engine.options.mem_queue_size:
            self.memory.append(message)
            return True
        return self.to_disk(message)

    def to_disk(self, message: Message) -> bool:
        if self.ephemeral:
            return False
        if self.backend is None:
            os.makedirs(self.engine.options.data_dir, exist_ok=True)
            self.backend = DiskQueue(self._disk_path(), self.engine.options.max_bytes_per_file)
        self.backend.put(message)
        self.engine.dirty_backends.add(self.backend)
        return True

    def pop(self) -> Message | None:
        if self.memory:
            return self.memory.popleft()
        if self.backend is not None and self.backend.depth:
            self.engine.dirty_backends.add(self.backend)
            return self.backend.pop()
        return None

    def empty(self) -> None:
        self.memory.clear()
        if self.backend is not None:
            self.backend.empty()

    def close(self) -> None:
        if self.backend is not None:
            self.engine.dirty_backends.discard(self.backend)
            self.backend.close()

    def delete(self) -> None:
        self.memory.clear()
        if self.backend is not None:
            self.engine.dirty_backends.discard(self.backend)
            self.backend.delete()
            self.backend = None


class Channel:
    """One channel of a topic: its queue, in-flight and deferred messages, its clients."""

    def __init__(self, topic: "Topic", name: str) -> None:
        self.topic = topic
        self.name = name
        self.engine = topic.engine
        self.ephemeral = name.endswith(EPHEMERAL)
        self.queue = _Queue(self.engine, f"{topic.name}:{name}", self.ephemeral or topic.ephemeral)
        self.in_flight: dict[bytes, Message] = {}
        self._timeouts: list[tuple[float, int, Message]] = []  # stale entries skipped
        self.deferred: dict[bytes, Message] = {}
        self._deferred_heap: list[tuple[float, int, Message]] = []  # (due, seq, message)
        self._seq = 0
        self.clients: dict[int, Consumer] = {}
        self._rotation = 0
        self.paused = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.deleted = False

    # -- queue ----------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self.queue.depth

    def put(self, message: Message, now: float) -> None:
        if message.defer > 0:
            delay, message.defer = message.defer, 0.0
            self.message_count += 1
            self._defer(message, now + delay)
            return
        self.message_count += 1
        self.queue.put(message)
        self.pump(now)

    def _defer(self, message: Message, due: float) -> None:
        message.due = due
        self.deferred[message.id] = message
        self._seq += 1
        heapq.heappush(self._deferred_heap, (due, self._seq, message))

    def _requeue(self, message: Message, now: float) -> None:
        message.consumer = None
        self.queue.put(message)

    # -- delivery -------------------------------------------------------------------------

    def pump(self, now: float) -> None:
        """Give queued messages to ready clients, one each in turn (nsqd's clients compete
        for the channel's queue; turns spread them the same way)."""
        if self.paused or not self.clients:
            return
        queue = self.queue
        if not queue.memory and not queue.backend_depth:
            return
        clients = list(self.clients.values())
        if len(clients) > 1:
            self._rotation = (self._rotation + 1) % len(clients)
            clients = clients[self._rotation :] + clients[: self._rotation]
        ready = [c for c in clients if c.in_flight < c.rdy and not c.closing]
        rng = self.engine.rng
        in_flight = self.in_flight
        while ready:
            still = []
            for consumer in ready:
                message = queue.pop()
                if message is None:
                    return
                if consumer.sample_rate > 0 and int(rng() * 100) > consumer.sample_rate:
                    still.append(consumer)  # nsqd drops a message sampled out (protocol_v2.go)
                    continue
                message.attempts += 1
                message.consumer = consumer
                message.delivered_at = now
                message.deadline = deadline = now + consumer.msg_timeout
                in_flight[message.id] = message
                self._seq += 1
                heapq.heappush(self._timeouts, (deadline, self._seq, message))
                consumer.in_flight += 1
                consumer.message_count += 1
                consumer.deliver(message)
                if consumer.in_flight < consumer.rdy and not consumer.closing:
                    still.append(consumer)
            ready = still

    def _pop_in_flight(self, consumer: Consumer, msg_id: bytes) -> Message | str:
        message = self.in_flight.get(msg_id)
        if message is None:
            return "ID not in flight"
        if message.consumer is not consumer:
            return "client does not own message"
        del self.in_flight[msg_id]
        return message

    def finish(self, consumer: Consumer, msg_id: bytes, now: float) -> str | None:
        """FIN: None, or nsqd's reason for E_FIN_FAILED."""
        message = self._pop_in_flight(consumer, msg_id)
        if isinstance(message, str):
            return message
        message.consumer = None
        consumer.in_flight -= 1
        consumer.finish_count += 1
        self.pump(now)
        return None

    def requeue(self, consumer: Consumer, msg_id: bytes, delay: float, now: float) -> str | None:
        """REQ (delay already clamped to 0..max_req_timeout)."""
        message = self._pop_in_flight(consumer, msg_id)
        if isinstance(message, str):
            return message
        consumer.in_flight -= 1
        consumer.requeue_count += 1
        self.requeue_count += 1
        message.consumer = None
        if delay > 0:
            self._defer(message, now + delay)
        else:
            self._requeue(message, now)
        self.pump(now)
        return None

    def touch(self, consumer: Consumer, msg_id: bytes, now: float) -> str | None:
        message = self.in_flight.get(msg_id)
        if message is None:
            return "ID not in flight"
        if message.consumer is not consumer:
            return "client does not own message"
        deadline = now + consumer.msg_timeout
        deadline = min(deadline, message.delivered_at + self.engine.options.max_msg_timeout)
        message.deadline = deadline
        self._seq += 1
        heapq.heappush(self._timeouts, (deadline, self._seq, message))
        return None

    def process(self, now: float) -> None:
        """Time out in-flight messages and release due deferred ones (nsqd queueScanWorker)."""
        timeouts = self._timeouts
        moved = False
        while timeouts and timeouts[0][0] <= now:
            deadline, _, message = heapq.heappop(timeouts)
            if message.deadline != deadline or self.in_flight.get(message.id) is not message:
                continue  # touched, finished or requeued since
            del self.in_flight[message.id]
            consumer = message.consumer
            if consumer is not None:
                consumer.in_flight -= 1
            self.timeout_count += 1
            self._requeue(message, now)
            moved = True
        heap = self._deferred_heap
        while heap and heap[0][0] <= now:
            due, _, message = heapq.heappop(heap)
            if self.deferred.get(message.id) is not message or message.due != due:
                continue
            del self.deferred[message.id]
            self._requeue(message, now)
            moved = True
        if moved:
            self.pump(now)

    def next_deadline(self) -> float | None:
        times = []
        if self._timeouts:
            times.append(self._timeouts[0][0])
        if self._deferred_heap:
            times.append(self._deferred_heap[0][0])
        return min(times) if times else None

    # -- clients --------------------------------------------------------------------------

    def add_client(self, consumer: Consumer, now: float) -> None:
        self.clients[consumer.cid] = consumer
        consumer.channel = self
        self.pump(now)

    def remove_client(self, consumer: Consumer) -> None:
        """A client left. Its in-flight messages stay until they time out, as in nsqd."""
        if self.clients.pop(consumer.cid, None) is None:
            return
        if self.ephemeral and not self.clients and not self.deleted:
            self.topic.delete_channel(self.name)

    # -- admin ----------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        self.pump(now)

    def empty(self) -> None:
        """nsqd Channel.Empty: queue, in-flight and deferred messages all go."""
        self.queue.empty()
        for message in self.in_flight.values():
            if message.consumer is not None:
                message.consumer.in_flight -= 1
        self.in_flight.clear()
        self._timeouts.clear()
        self.deferred.clear()
        self._deferred_heap.clear()

    def close(self) -> None:
        """Shutdown: everything not finished goes to disk (nsqd Channel.flush)."""
        if not self.ephemeral and not self.topic.ephemeral:
            queue = self.queue
            while queue.memory:
                queue.to_disk(queue.memory.popleft())
            for message in list(self.in_flight.values()) + list(self.deferred.values()):
                queue.to_disk(message)
        self.in_flight.clear()
        self.deferred.clear()
        self.queue.close()


class Topic:
    """A topic: its channels and the messages kept while it has none (or is paused)."""

    def __init__(self, engine: "Engine", name: str) -> None:
        self.engine = engine
        self.name = name
        self.ephemeral = name.endswith(EPHEMERAL)
        self.channels: dict[str, Channel] = {}
        self.queue = _Queue(engine, name, self.ephemeral)
        self.paused = False
        self.message_count = 0
        self.message_bytes = 0
        self.deleted = False

    @property
    def depth(self) -> int:
        return self.queue.depth

    def put(self, messages: list, now: float) -> None:
        self.message_count += len(messages)
        for message in messages:
            self.message_bytes += len(message.body)
        if self.paused or not self.channels:
            for message in messages:
                self.queue.put(message)
            return
        for message in messages:
            self._fan_out(message, now)

    def _fan_out(self, message: Message, now: float) -> None:
        channels = list(self.channels.values())
        if len(channels) == 1:
            channels[0].put(message, now)
            return
        # copies first: a channel's put consumes the original's defer
        copies = [message] + [message.copy() for _ in channels[1:]]
        for channel, copy in zip(channels, copies):
            channel.put(copy, now)

    def _drain(self, now: float) -> None:
        """Move the topic's own queue into its channels (a channel appeared, or unpause)."""
        if self.paused or not self.channels:
            return
        while True:
            message = self.queue.pop()
            if message is None:
                break
            self._fan_out(message, now)

    def get_channel(self, name: str, now: float) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = self.channels[name] = Channel(self, name)
            self.engine.channel_created(self, channel)
            self._drain(now)
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        channel.deleted = True
        self.engine.announce("UNREGISTER", self.name, name)
        for consumer in list(channel.clients.values()):
            consumer.close_by_server()
        channel.empty()
        channel.queue.delete()
        if self.ephemeral and not self.channels and not self.deleted:
            self.engine.delete_topic(self.name)
        elif not self.deleted:
            self.engine.notify(self.ephemeral or channel.ephemeral)
        return True

    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        self._drain(now)
        for channel in self.channels.values():
            channel.pump(now)

    def empty(self) -> None:
        self.queue.empty()

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        if not self.ephemeral:
            queue = self.queue
            while queue.memory:
                queue.to_disk(queue.memory.popleft())
        self.queue.close()


class Engine:
    """Every topic of one nsqd. ``clock_ns`` gives message timestamps; ``rng`` sampling."""

    def __init__(self, options: NsqOptions, *, clock_ns=clock.now_ns, rng=random.random, node_id: int | None = None) -> None:
        self.options = options
        self.clock_ns = clock_ns
        self.rng = rng
        self.guids = GuidFactory(node_id if node_id is not None else os.getpid() % 1024, clock_ns)
        self.topics: dict[str, Topic] = {}
        self.dirty_backends: set = set()
        self.loading = False  # nsqd does not persist metadata while it loads it
        # Hooks (the bridge, lookupd): called after a topic/channel is created.
        self.on_topic_created = None
        self.on_channel_created = None
        # Called with ("REGISTER" | "UNREGISTER", topic, channel or "") as topics and channels
        # come and go (nsqd tells its nsqlookupd peers the same way, nsqd/lookup.go).
        self.watchers: list = []
        self._lock = threading.Lock()  # metadata writes only
        self._data_path_fd: int | None = None  # the data path's directory, flock()ed while we serve it

    # -- topics ---------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(self, name)
            if self.on_topic_created is not None:
                self.on_topic_created(topic)
            self.notify(topic.ephemeral)
            self.announce("REGISTER", name, "")
        return topic

    def announce(self, event: str, topic: str, channel: str) -> None:
        for watcher in self.watchers:
            watcher(event, topic, channel)

    def notify(self, ephemeral: bool) -> None:
        """A topic or channel came or went: rewrite nsqd.dat (nsqd NSQD.Notify), so that a
        crash does not orphan disk queues."""
        if ephemeral or self.loading:
            return
        try:
            self.save_metadata()
        except OSError as exc:
            log.error("NSQ: failed to persist metadata - %s", exc)

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        if self.on_channel_created is not None:
            self.on_channel_created(topic, channel)
        self.notify(topic.ephemeral or channel.ephemeral)
        self.announce("REGISTER", topic.name, channel.name)

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.deleted = True
        for channel_name in list(topic.channels):
            topic.delete_channel(channel_name)
        topic.queue.delete()
        self.notify(topic.ephemeral)
        self.announce("UNREGISTER", name, "")
        return True

    def new_message(self, body: bytes, defer: float = 0.0) -> Message:
        return Message(self.guids.new_id(), body, self.clock_ns(), 0, defer)

    def publish(self, topic_name: str, bodies, now: float, defer: float = 0.0) -> Topic:
        """PUB/MPUB/DPUB: the topic (created if need be) gets the messages."""
        topic = self.topics.get(topic_name) or self.get_topic(topic_name)
        new_id = self.guids.new_id
        ts = self.clock_ns()
        topic.put([Message(new_id(), body, ts, 0, defer) for body in bodies], now)
        return topic

    # -- time -----------------------------------------------------------------------------

    def process(self, now: float) -> None:
        for topic in list(self.topics.values()):
            for channel in list(topic.channels.values()):
                if channel._timeouts or channel._deferred_heap:
                    channel.process(now)

    def flush(self) -> None:
        """Hand disk-queue writes to the OS (after each batch of commands)."""
        if self.dirty_backends:
            for backend in self.dirty_backends:
                backend.flush()
            self.dirty_backends.clear()

    # -- persistence ----------------------------------------------------------------------

    def metadata(self) -> dict:
        """nsqd.dat's shape: every non-ephemeral topic and channel, with its paused state."""
        topics = []
        for topic in self.topics.values():
            if topic.ephemeral:
                continue
            channels = [{"name": c.name, "paused": c.paused} for c in topic.channels.values() if not c.ephemeral]
            topics.append({"channels": channels, "name": topic.name, "paused": topic.paused})
        return {"topics": topics, "version": VERSION}

    def save_metadata(self) -> None:
        directory = self.options.data_dir
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, METADATA_FILE)
        tmp = f"{path}.{os.getpid()}.tmp"
        with self._lock:
            with open(tmp, "w") as f:
                json.dump(self.metadata(), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

    def lock_data_path(self) -> None:
        """Take the data path for this server alone, as nsqd does (internal/dirlock: an
        exclusive, non-blocking flock on the directory): a second server on the same directory
        fails to start instead of sharing nsqd.dat and the disk queues. Raises ValueError with
        nsqd's message."""
        directory = self.options.data_dir
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            # Go's text for EWOULDBLOCK, as nsqd prints it
            reason = "resource temporarily unavailable" if exc.errno == errno.EWOULDBLOCK else exc.strerror
            raise ValueError(f"failed to lock data-path: cannot lock directory {directory} - {reason}") from None
        self._data_path_fd = fd

    def unlock_data_path(self) -> None:
        if self._data_path_fd is not None:
            os.close(self._data_path_fd)  # closing the descriptor releases the flock
            self._data_path_fd = None

    def load(self) -> None:
        """Recreate the topics and channels nsqd.dat lists (their disk queues reopen)."""
        path = os.path.join(self.options.data_dir, METADATA_FILE)
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ValueError(f"nsq: failed to read {path}: {exc}") from None
        self.loading = True
        try:
            self._load(data, path)
        finally:
            self.loading = False

    def _load(self, data: dict, path: str) -> None:
        for entry in data.get("topics") or []:
            name = entry.get("name", "")
            if not is_valid_name(name):
                log.warning("NSQ: skipping topic %r from %s: invalid name", name, path)
                continue
            topic = self.get_topic(name)
            topic.paused = bool(entry.get("paused"))
            for channel_entry in entry.get("channels") or []:
                channel_name = channel_entry.get("name", "")
                if not is_valid_name(channel_name):
                    continue
                channel = topic.get_channel(channel_name, 0.0)
                channel.paused = bool(channel_entry.get("paused"))

    def close(self) -> None:
        """Shutdown: write every queued message and the metadata to disk."""
        for topic in self.topics.values():
            topic.close()
        self.dirty_backends.clear()
        self.save_metadata()
