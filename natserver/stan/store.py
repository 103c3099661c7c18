"""Where STAN keeps channels and subscription state.

Every channel is a stream of natserver's JetStream stream engine (``natserver.jetstream``):

* With JetStream enabled (``-js``), the channel *is* a JetStream stream named
  :func:`stream_name` (``STAN_`` + the channel, ``.`` written ``_``), created through the
  JetStream engine with the channel limits as stream limits (``max_msgs``, ``max_bytes``,
  ``max_age``), ``allow_direct`` on, file or memory storage as the streaming store says. Its
  messages have the channel name as their subject, so JetStream clients see the channel with
  ``STREAM.INFO``, ``STREAM.MSG.GET`` and ``DIRECT.GET`` (the migration path, see README). The
  stream is read-only from the core's side: the streaming layer removes the stream's core
  subscription, so only STAN publishers add to it.
* Without JetStream, or with JetStream in a cluster (natserver's meta group places streams: a
  channel created here would bypass it), the same store classes (``MemoryStore``/``FileStore``) are used directly;
  file stores live in ``<dir>/channels/<escaped channel>/``.

Subscription state (clients, subscriptions, durables, queue groups, pending acks) is a JSON
snapshot, ``<dir>/stan.json``, written atomically (temporary file, fsync, rename) shortly
after each change (:data:`STATE_WRITE_DELAY`). A crash can lose at most the changes of that
window; because the last-sent position and the pending acks are only ever behind, the effect
is redelivery, never loss (at-least-once, as STAN promises). Message writes reach the
operating system before their PubAck is sent, and are fsynced in the same round (group
commit; nats-streaming-server's file store default ``do_sync: true``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import orjson
import trio

from .. import clock
from ..jetstream.errors import ApiError
from ..jetstream.store import FileStore, MemoryStore, StoredMsg, flush_for_sync, sync_many, write_atomic
from ..jetstream.stream import StreamConfig

log = logging.getLogger("natserver")

STREAM_PREFIX = "STAN_"  # JetStream stream name of a channel: STAN_ + escaped channel
STATE_FILE = "stan.json"
STATE_VERSION = 1
STATE_WRITE_DELAY = 0.05  # seconds a state change waits so that a burst is written once
CHANNELS_DIR = "channels"


def escape(channel: str) -> str:
    """A channel as a stream/directory name: letters and digits kept, ``.`` -> ``_``, every
    other byte -> ``-xx`` (hex). Injective and reversible (:func:`unescape`)."""
    out = []
    for byte in channel.encode("utf-8", "surrogateescape"):
        c = chr(byte)
        if c.isascii() and c.isalnum():
            out.append(c)
        elif c == ".":
            out.append("_")
        else:
            out.append("-%02x" % byte)
    return "".join(out)


def unescape(name: str) -> str:
    out = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "_":
            out += b"."
        elif c == "-":
            out.append(int(name[i + 1 : i + 3], 16))
            i += 2
        else:
            out += c.encode()
        i += 1
    return out.decode("utf-8", "surrogateescape")


def stream_name(channel: str) -> str:
    """The JetStream stream name of a channel (documented: the migration path)."""
    return STREAM_PREFIX + escape(channel)


class ChannelStore:
    """One channel's messages: a JetStream ``Store`` (and its ``Stream`` when JetStream runs)."""

    __slots__ = ("name", "msgs", "stream", "subject")

    def __init__(self, name: str, msgs, stream=None) -> None:
        self.name = name
        self.msgs = msgs
        self.stream = stream
        self.subject = name.encode("utf-8", "surrogateescape")

    @property
    def file_backed(self) -> bool:
        return self.msgs.kind == "file"

    def add(self, data: bytes, ts: int) -> int:
        return self.msgs.store_msg(self.subject, b"", data, ts)

    @property
    def first_seq(self) -> int:
        return self.msgs.first_seq if self.msgs.msgs else self.msgs.last_seq + 1

    @property
    def last_seq(self) -> int:
        return self.msgs.last_seq

    def load(self, seq: int) -> StoredMsg | None:
        return self.msgs.load_msg(seq)

    def next_seq(self, after: int) -> int:
        """The first live sequence above ``after`` (0 when none)."""
        msgs = self.msgs
        if not msgs.msgs or after >= msgs.last_seq:
            return 0
        seq = max(after + 1, msgs.first_seq)
        idx = msgs.idx
        while seq <= msgs.last_seq:
            if seq in idx:
                return seq
            seq += 1
        return 0

    def seq_from_timestamp(self, ts: int) -> int:
        """The first sequence whose timestamp is >= ts (last + 1 when none is)."""
        msgs = self.msgs
        return msgs.first_seq_at_time(ts) or msgs.last_seq + 1


def _stream_config(name: str, storage: str, limits) -> StreamConfig:
    return StreamConfig(
        name=stream_name(name), subjects=[name], storage=storage, max_msgs=limits.max_msgs or -1,
        max_bytes=limits.max_bytes or -1, max_age=int(limits.max_age * 1e9), allow_direct=True,
        description=f"NATS Streaming channel {name!r}",
    )


class StanStore:
    """Creates and recovers channel stores; writes and reads the subscription state."""

    def __init__(self, server, options) -> None:
        self.server = server
        self.options = options
        self.file = options.store == "file"
        self.dir = options.dir
        self.channels_dir = os.path.join(self.dir, CHANNELS_DIR) if self.file else ""
        # JetStream in a cluster places streams through its meta group, which channels made here
        # would bypass: they are kept in the streaming store's own files then (the engine warns).
        self.jetstream = None if server.options.clustered else server.jetstream
        self.jetstream_set_aside = server.jetstream is not None and self.jetstream is None
        self.dirty_stores: set = set()
        self.notify: Callable[[], None] | None = None  # engine callback: a store has writes to flush
        self.closed = False

    # -- channels -----------------------------------------------------------------------------

    def open(self) -> dict:
        """Recover what the directory holds: returns the saved state (or an empty one)."""
        state: dict = {"version": STATE_VERSION, "cluster_id": self.options.cluster_id, "clients": [],
                       "channels": {}}
        if not self.file:
            return state
        os.makedirs(self.channels_dir, exist_ok=True)
        path = os.path.join(self.dir, STATE_FILE)
        try:
            with open(path, "rb") as f:
                state = orjson.loads(f.read())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"streaming: can not read {path}: {exc}") from None
        stored = state.get("cluster_id")
        if stored and stored != self.options.cluster_id:
            # nats-streaming-server refuses to start a store under another cluster id
            raise RuntimeError(f"streaming: cluster ID {self.options.cluster_id!r} does not match stored cluster ID "
                               f"{stored!r}")
        return state

    def recovered_channel_names(self, state: dict) -> list[str]:
        names = set(state.get("channels", {}))
        if self.file and self.jetstream is None:
            for entry in os.listdir(self.channels_dir):
                if entry.startswith("."):  # ".deleted-...": a channel removal a crash interrupted
                    continue
                if os.path.isdir(os.path.join(self.channels_dir, entry)):
                    try:
                        names.add(unescape(entry))
                    except (ValueError, IndexError):
                        log.warning("streaming: ignoring %r in %s", entry, self.channels_dir)
        elif self.jetstream is not None:
            for name in self.jetstream.streams:
                if name.startswith(STREAM_PREFIX):
                    try:
                        names.add(unescape(name[len(STREAM_PREFIX):]))
                    except (ValueError, IndexError):
                        pass
        return sorted(names)

    def create(self, name: str, limits) -> ChannelStore:
        """The channel's store (created, or recovered when it exists). Raises StanStoreError."""
        js = self.jetstream
        storage = "file" if self.file else "memory"
        if js is not None:
            stream = js.streams.get(stream_name(name))
            if stream is None:
                try:
                    stream = js.add_stream(_stream_config(name, storage, limits))
                except ApiError as exc:
                    raise StanStoreError(f"unable to create stream {stream_name(name)!r}: {exc.description}") from None
            stream.unsubscribe()  # read-only from the core: only STAN publishers add messages
            store = stream.store
            if store.kind == "file":
                store.notify = self._dirty
            return ChannelStore(name, store, stream)
        cfg = _stream_config(name, storage, limits)
        cfg.max_msgs = limits.max_msgs
        cfg.max_bytes = limits.max_bytes
        if not self.file:
            return ChannelStore(name, MemoryStore(cfg))
        path = os.path.join(self.channels_dir, escape(name))
        try:
            store = FileStore(path, cfg, now=clock.now_ns())
        except (OSError, ValueError) as exc:
            raise StanStoreError(f"unable to create channel store {path!r}: {exc}") from None
        store.notify = self._dirty
        if store.lost:
            log.warning("streaming: channel %r: %d corrupt records dropped", name, store.lost)
        return ChannelStore(name, store)

    def _dirty(self, store) -> None:
        self.dirty_stores.add(store)
        if self.notify is not None:
            self.notify()

    async def flush(self) -> None:
        """Write every dirty file store and fsync it (in a worker thread: group commit)."""
        dirty, self.dirty_stores = self.dirty_stores, set()
        targets = flush_for_sync(dirty, "streaming")
        if targets:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(sync_many, targets)

    def delete(self, cs: ChannelStore) -> None:
        """Remove a channel's messages for good (its JetStream stream too)."""
        self.dirty_stores.discard(cs.msgs)
        if cs.stream is not None and self.jetstream is not None:
            self.jetstream.delete_stream(cs.stream)
        else:
            cs.msgs.delete()

    def close(self, channel_stores) -> None:
        if self.closed:
            return
        self.closed = True
        for cs in channel_stores:
            if cs.stream is None:
                cs.msgs.stop()
            else:
                try:
                    cs.msgs.flush()
                except OSError:
                    pass

    # -- subscription state -------------------------------------------------------------------

    async def write_state(self, state: dict) -> None:
        if not self.file:
            return
        data = orjson.dumps(state)
        path = os.path.join(self.dir, STATE_FILE)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(write_atomic, path, data)

    def write_state_now(self, state: dict) -> None:
        if self.file:
            write_atomic(os.path.join(self.dir, STATE_FILE), orjson.dumps(state))


class StanStoreError(Exception):
    pass
