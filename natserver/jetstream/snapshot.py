"""Stream backup and restore: ``$JS.API.STREAM.SNAPSHOT.<stream>`` and
``$JS.API.STREAM.RESTORE.<stream>``, in nats-server 2.15.1's chunked, flow-controlled form.

The snapshot is what 2.15.1 sends (stream_backup.go, its "v2" snapshots): an archive of
logical entries (server/archive: the magic ``NATSARC1``, then per entry the name length
(uvarint), a timestamp (zig-zag varint), a sequence, a header size and a payload size
(uvarints), the name and the payload), compressed in the snappy/S2 framing format:

* ``state.json``: the stream's state (StreamState JSON) when the snapshot started, its
  ``consumer_count`` the number of consumer entries that follow;
* ``consumers/<name>``: ``{"config": <ConsumerConfig>, "state": <ConsumerState>}``;
* one entry per message: the subject as the name, its timestamp and sequence, headers and
  data as the payload (the header size splits them);
* an empty entry (everything zero): the end of the backup.

Deleted messages are the gaps between sequences, and ``state.json``'s first and last
sequences keep the gaps at either end. natserver writes the framing with cramjam's snappy
(readable by S2 readers: nats-server's restore and the ``nats`` CLI) and reads both snappy
and S2 framing (natserver.protocol.s2, the reader of compressed routes too: S2's blocks with
repeat offsets are decoded there).

Snapshot: the request is answered with the stream's configuration and state, then the
archive goes to ``deliver_subject`` in chunks of ``chunk_size`` bytes, each with the reply
``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>``; at most ``window_size / chunk_size``
chunks go unacknowledged. The last, short chunk has no reply; then an empty message ends
the snapshot: ``NATS/1.0 204`` when chunks went with replies (none otherwise, as 2.15.1),
``408 No Flow Response`` when no ack came for ACK_TIMEOUT, ``408 No Interest`` when the
receiver went away, ``500 <error>`` when reading the stream failed. Each turn of the
sending task produces at most TURN_BYTES of archive before it lets other clients run.

Restore: the request (``config``, ``state``) is checked as a create is, and answered with
the subject chunks go to (``$JS.SNAPSHOT.RESTORE.<stream>.<id>``). Each chunk (with a reply)
is queued for the restore's task, which decodes and applies it TURN_BYTES of archive a turn
(messages are written then, not at the end) and acks it with an empty message; an empty
chunk ends the restore and is answered with the stream info (a stream_create_response). A
failure removes what was restored at once and, as 2.15.1, answers the final chunk with
``restore failed: <error>`` (10062) or the limit's own error, the chunks before it being
acked. No chunk for RESTORE_STALL: the restore is abandoned (nothing is sent, as 2.15.1)
and what was restored is removed.
"""

from __future__ import annotations

import collections
import logging
import secrets
from typing import TYPE_CHECKING, Any, Protocol

import cramjam
import trio

from .. import clock
from ..protocol import s2
from ..protocol.varint import uvarint
from . import advisories, errors, gotime, unsupported
from .apijson import decode_request
from .consumer import ConsumerConfig, check_config, parse_time, set_defaults
from .errors import ApiError
from .gojson import (
    INT64,
    UINT64,
    GoDecodeError,
    check_known_fields,
    decode_bool,
    decode_int,
    decode_object,
    decode_str,
    decode_struct,
    go_decode_request,
    go_quote_text,
    go_type_error,
    json_kind,
    with_literals,
)
from .store import StoreError
from .stream import REQUEST_SHAPE as STREAM_REQUEST_SHAPE
from .stream import StreamConfig, check_stream_config
from .ttl import header_ttl
from .util import dumps, get_header, is_empty_request, loads, rfc3339nano

if TYPE_CHECKING:
    from .stream import Stream


class SnapshotHost(Protocol):
    """What snapshots and restores need of the engine (``JetStream``): its streams and their
    tasks, the account's limits, and sending, subscribing and answering as the API does.
    Loosely typed: the members are the engine's own (layers: README "Layers")."""

    @property
    def account_name(self) -> Any: ...
    @property
    def domain(self) -> Any: ...
    @property
    def api(self) -> Any: ...
    @property
    def client(self) -> Any: ...
    @property
    def delivery(self) -> Any: ...
    @property
    def limits(self) -> Any: ...
    @property
    def server(self) -> Any: ...
    @property
    def sourcing(self) -> Any: ...
    @property
    def streams(self) -> dict[str, Stream]: ...
    @property
    def add_stream(self) -> Any: ...
    @property
    def check_reservation(self) -> Any: ...
    @property
    def delete_stream(self) -> Any: ...
    @property
    def persist(self) -> Any: ...
    @property
    def schedule_expiry(self) -> Any: ...
    @property
    def send(self) -> Any: ...
    @property
    def subscribe(self) -> Any: ...
    @property
    def unsubscribe(self) -> Any: ...

log = logging.getLogger("natserver")

_T = "io.nats.jetstream.api.v1."

# jetstream_api.go streamSnapshot: chunk and window sizes and their clamps.
DEFAULT_CHUNK_SIZE = 128 * 1024  # defaultSnapshotChunkSize
DEFAULT_WINDOW_SIZE = 8 * 1024 * 1024  # defaultSnapshotWindowSize
MIN_CHUNK_SIZE, MAX_CHUNK_SIZE = 1024, 1024 * 1024  # "Clamp within 1KiB to 1MiB"
MIN_WINDOW_SIZE, MAX_WINDOW_SIZE = 1024, 32 * 1024 * 1024  # "Clamp within 1KiB to 32MiB"
ACK_TIMEOUT = 5.0  # s; defaultSnapshotAckTimeout: no ack for this long ends the snapshot
INTEREST_WAIT = 2.0  # s; streamSnapshot waits this long for a subscriber to the deliver subject
INTEREST_POLL = 0.01  # s; how often natserver looks meanwhile (nats-server is notified)
RESTORE_STALL = 5.0  # s; processStreamRestore's activityInterval: no chunk for this long abandons it
# natserver's own bound: archive bytes produced per turn of the sending task (one thread
# serves every client; nats-server streams from a goroutine of its own).
TURN_BYTES = 256 * 1024

SNAPSHOT_ACK_PREFIX = "$JS.SNAPSHOT.ACK."  # jsSnapshotAckT
RESTORE_PREFIX = "$JS.SNAPSHOT.RESTORE."  # jsRestoreDeliverT

MAGIC = b"NATSARC1"  # archive.MagicBytes
MAX_S2_BLOCK = 4 << 20  # s2's maxBlockSize: what one frame may decode to
# natserver's bound on chunks received and not yet applied (nats-server's restore blocks the
# sender's connection instead, writing into a pipe).
MAX_QUEUED = 64 * 1024 * 1024
MAX_NAME_LEN = 1 << 20  # archive.maxNameLen
# natserver's bound on a state.json or consumer entry held whole while restoring.
MAX_META_ENTRY = 64 * 1024 * 1024
STATE_ENTRY = b"state.json"
MSG_ID = b"Nats-Msg-Id"  # (stream.py's deduplication header)
CONSUMER_PREFIX = b"consumers/"

_STATUS_DONE = b"NATS/1.0 204\r\n\r\n"
_STATUS_NO_FLOW = b"NATS/1.0 408 No Flow Response\r\n\r\n"
_STATUS_NO_INTEREST = b"NATS/1.0 408 No Interest\r\n\r\n"


class ArchiveError(ValueError):
    """The restore's input is not a valid archive (the text is 2.15.1's where it has one)."""


# -- the archive ------------------------------------------------------------------------------


def entry_header(name: bytes, ts: int, seq: int, hdr_size: int, payload_size: int) -> bytes:
    """archive.Writer.WriteHeader (without the magic)."""
    zigzag = (ts << 1) ^ (ts >> 63)
    return b"".join((uvarint(len(name)), uvarint(zigzag & 0xFFFFFFFFFFFFFFFF), uvarint(seq),
                     uvarint(hdr_size), uvarint(payload_size), name))


def _read_uvarint(buf, pos: int) -> tuple[int, int] | None:
    """(value, next position), None when ``buf`` ends first."""
    shift = value = 0
    n = len(buf)
    while pos < n:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if shift >= 63 and value >> 64:
                raise ArchiveError("archive: invalid archive stream")
            return value, pos
        shift += 7
        if shift > 63:
            raise ArchiveError("archive: invalid archive stream")
    return None


class ArchiveReader:
    """archive.Reader, incremental: ``feed`` bytes, take whole entries from ``entries``."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.seen_magic = False
        # the entry whose payload is being waited for: (name, ts, seq, hdr_size, size)
        self._head: tuple[bytes, int, int, int, int] | None = None
        self.limit_for = lambda name, seq, hdr_size, size: None  # raises ArchiveError for a too large entry

    def feed(self, data: bytes) -> list[tuple[bytes, int, int, int, bytes]]:
        """Every entry complete with ``data``: (name, ts, seq, hdr_size, payload)."""
        buf = self.buf
        buf += data
        out: list[tuple[bytes, int, int, int, bytes]] = []
        pos = 0
        if not self.seen_magic:
            if len(buf) < len(MAGIC):
                return out
            if buf[: len(MAGIC)] != MAGIC:
                raise ArchiveError("archive: invalid archive stream")
            self.seen_magic = True
            pos = len(MAGIC)
        while True:
            if self._head is None:
                fields = []
                p = pos
                end = len(buf)
                for _ in range(5):
                    if p < end and buf[p] < 0x80:  # (one byte: the common case)
                        fields.append(buf[p])
                        p += 1
                        continue
                    got = _read_uvarint(buf, p)
                    if got is None:
                        break
                    fields.append(got[0])
                    p = got[1]
                if len(fields) < 5:
                    break
                name_len, zz, seq, hdr_size, payload_size = fields
                if name_len > MAX_NAME_LEN or hdr_size >= 1 << 63 or payload_size >= 1 << 63:
                    raise ArchiveError("archive: invalid archive stream")
                if len(buf) < p + name_len:
                    break
                name = bytes(buf[p : p + name_len])
                ts = (zz >> 1) ^ -(zz & 1)
                self.limit_for(name, seq, hdr_size, payload_size)
                self._head = (name, ts, seq, hdr_size, hdr_size + payload_size)
                pos = p + name_len
            name, ts, seq, hdr_size, size = self._head
            if len(buf) - pos < size:
                break
            out.append((name, ts, seq, hdr_size, bytes(buf[pos : pos + size])))
            pos += size
            self._head = None
        del buf[:pos]
        return out

    @property
    def pending_entry(self) -> bool:
        """An entry's header was read, its payload is not complete."""
        return self._head is not None


# -- the framing (snappy's framing format, S2's extension of it: natserver.protocol.s2) ---------

crc32c = s2.crc32c
crc32c_python = s2.crc32c_python


def s2_decode_block(src: bytes) -> bytes:
    """An S2 block (klauspost/compress s2 decode.go), ArchiveError when broken."""
    try:
        return s2.decode_block(src, MAX_S2_BLOCK)
    except s2.S2Error as exc:
        raise ArchiveError(str(exc)) from None


class FrameReader:
    """The snappy framing format (and S2's, whose stream identifier is ``S2sTwO``),
    incremental: ``feed`` compressed bytes, get what they decompress to (s2.StreamDecoder,
    its errors as ArchiveError)."""

    def __init__(self) -> None:
        self._decoder = s2.StreamDecoder(MAX_S2_BLOCK)

    @property
    def buffered(self) -> int:
        """Bytes of a frame not complete yet."""
        return self._decoder.buffered

    def feed(self, data: bytes) -> bytes:
        return b"".join(self.frames(data))

    def frames(self, data: bytes):
        """What each whole frame ``data`` completes decodes to, one frame at a time."""
        decoder = self._decoder
        try:
            decoder.feed(data)
            while (chunk := decoder.next_chunk()) is not None:
                yield chunk
        except s2.S2Error as exc:
            raise ArchiveError(str(exc)) from None


# -- JSON of the archive's entries ---------------------------------------------------------------


def _time_ns(text) -> int:
    if not isinstance(text, str) or text.startswith("0001-01-01"):
        return 0
    return parse_time(text)


def consumer_entry(consumer, last_seq: int) -> bytes:
    """SnapshotConsumerState: the configuration and ConsumerState (stream sequences bounded
    by the snapshot's last one, as writeConsumerMsg)."""
    cfg = consumer.cfg.to_json()
    cfg.setdefault("name", consumer.name)
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": consumer.delivered_cseq, "stream_seq": min(consumer.state_sseq, last_seq)},
        "ack_floor": {"consumer_seq": consumer.ack_floor_cseq, "stream_seq": min(consumer.ack_floor_sseq, last_seq)},
    }
    pending = {str(seq): {"Sequence": cseq, "Timestamp": ts}
               for seq, (cseq, ts) in consumer.pending.items() if seq <= last_seq}
    if pending:
        state["pending"] = pending
    redelivered = {str(seq): n - 1 for seq, n in consumer.rdc.items() if n > 1 and seq <= last_seq}
    if redelivered:
        state["redelivered"] = redelivered
    return dumps({"config": cfg, "state": state})


def _uint(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArchiveError(f"invalid {what}")
    return value


def _apply_consumer_state(consumer, state: dict) -> None:
    delivered = state.get("delivered") or {}
    floor = state.get("ack_floor") or {}
    consumer.delivered_cseq = _uint(delivered.get("consumer_seq", 0), "delivered")
    consumer.delivered_sseq = consumer.state_sseq = _uint(delivered.get("stream_seq", 0), "delivered")
    consumer.ack_floor_cseq = _uint(floor.get("consumer_seq", 0), "ack floor")
    consumer.ack_floor_sseq = _uint(floor.get("stream_seq", 0), "ack floor")
    pending = {}
    for key, p in sorted((state.get("pending") or {}).items(), key=lambda kv: int(kv[0])):
        pending[int(key)] = [_uint(p.get("Sequence", 0), "pending"), int(p.get("Timestamp", 0))]
    consumer.pending = pending
    consumer.rdc = {int(k): _uint(v, "redelivered") + 1 for k, v in (state.get("redelivered") or {}).items()}


# -- snapshots ----------------------------------------------------------------------------------


_SNAPSHOT_REQUEST = {"deliver_subject": decode_str, "no_consumers": decode_bool,  # JSApiStreamSnapshotRequest
                     "chunk_size": lambda v: decode_int(v, INT64), "window_size": lambda v: decode_int(v, INT64),
                     "jsck": decode_bool}
_RESTORE_REQUEST = {"config": decode_object, "state": decode_object}  # JSApiStreamRestoreRequest
# The config's fields as 2.15.1's strict decoding takes them: a create's (no pedantic: a
# StreamConfig, not a StreamConfigRequest).
_RESTORE_CONFIG_SHAPE = {k: v for k, v in STREAM_REQUEST_SHAPE.items() if k != "pedantic"}
_RESTORE_PATH = "JSApiStreamRestoreRequest"
# The state's fields (store.go StreamState, LostStreamData) and their Go types: natserver reads
# none of them, but 2.15.1's decoding refuses a wrong type or an unknown field in them.
_STATE_TYPES = {"messages": "uint64", "bytes": "uint64", "first_seq": "uint64", "first_ts": "time.Time",
                "last_seq": "uint64", "last_ts": "time.Time", "num_subjects": "int", "subjects": "map[string]uint64",
                "num_deleted": "int", "deleted": "[]uint64", "lost": "server.LostStreamData", "consumer_count": "int"}
_LOST_TYPES = {"msgs": "[]uint64", "bytes": "uint64"}


def _check_go_value(value, go_type: str, path: str) -> None:
    """Go's Unmarshal of ``value`` into a field of ``go_type`` at ``path`` (the JSON path in
    Go's words): its first error, raised (null leaves any field alone)."""
    if value is None:
        return
    if go_type in ("uint64", "int"):
        if _int_ok(value, UINT64 if go_type == "uint64" else INT64):
            return
    elif go_type == "time.Time":
        gotime.decoder(path)(value)  # (raises Go's errors: not a string, or its parse error)
        return
    elif go_type == "[]uint64" and isinstance(value, list):
        for i, item in enumerate(value):
            if item is not None and not _int_ok(item, UINT64):
                # (a slice's element is named without "Go struct field", as Go does)
                raise GoDecodeError(f"json: cannot unmarshal {json_kind(item, 'uint64')} into {path}.{i} of type uint64")
        return
    elif go_type == "map[string]uint64" and isinstance(value, dict):
        for key, item in value.items():
            if item is not None and not _int_ok(item, UINT64):
                raise GoDecodeError(f"json: cannot unmarshal {json_kind(item, 'uint64')} into Go struct field "
                                    f"{path}.{key} of type uint64")
        return
    elif go_type in ("server.StreamState", "server.LostStreamData") and isinstance(value, dict):
        _check_go_struct(value, _STATE_TYPES if go_type == "server.StreamState" else _LOST_TYPES, path)
        return
    raise go_type_error(value, path, go_type)


def _int_ok(value, bounds) -> bool:
    try:
        decode_int(value, bounds)
    except ValueError:
        return False
    return True


def _check_go_struct(obj: dict, types: dict, path: str) -> None:
    """The strict decoding of a struct's object: its keys in order (matched as Go matches,
    exactly, else case-insensitively), the first unknown key or wrong value refused."""
    folded = {k.lower(): k for k in types}
    for key, value in obj.items():
        name = key if key in types else folded.get(key.lower())
        if name is None:
            raise GoDecodeError(f"json: unknown field {go_quote_text(key)}")
        _check_go_value(value, types[name], f"{path}.{key}")


def _check_restore_request(request) -> None:
    """JSApiStreamRestoreRequest's strict decoding, its fields in the order sent: the config's
    unknown fields (its types are checked when it is read), the state's unknown fields and
    types (2.15.1 refuses them; session 20 took any state)."""
    if not isinstance(request, dict):
        return
    for key, value in request.items():
        name = key.lower()
        if name == "config":
            check_known_fields(value, _RESTORE_CONFIG_SHAPE)
        elif name == "state":
            _check_go_value(value, "server.StreamState", f"{_RESTORE_PATH}.{key}")
        else:
            raise GoDecodeError(f"json: unknown field {go_quote_text(key)}")


def _clamp(value: int, lo: int, hi: int) -> int:
    return min(max(lo, value), hi)


class Snapshots:
    """Snapshot senders and restore sessions of one engine (its tasks run in ``run``)."""

    def __init__(self, js: SnapshotHost) -> None:
        self.js = js
        self._nursery: trio.Nursery | None = None
        self.restores: dict[str, Restore] = {}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    def close(self) -> None:
        for restore in list(self.restores.values()):
            restore.abandon()

    # -- the snapshot request ---------------------------------------------------------------

    def snapshot_request(self, name: str, reply, payload: bytes) -> None:

        api = self.js.api
        rtype = _T + "stream_snapshot_response"
        try:
            if is_empty_request(payload):
                raise errors.bad_request()
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            req = decode_request(payload, _SNAPSHOT_REQUEST, "server.JSApiStreamSnapshotRequest")
            deliver = req.get("deliver_subject", "")
            no_consumers = req.get("no_consumers", False)
            chunk_size = req.get("chunk_size", 0)
            window_size = req.get("window_size", 0)
            if not _valid_publish_subject(deliver):
                raise errors.snapshot_deliver_subject_invalid()
        except ApiError as exc:
            api._fail(reply, rtype, exc)
            return
        sender = SnapshotSender(self.js, stream, deliver, not no_consumers, chunk_size or 0, window_size or 0)
        sender.client = advisories.client_info(self.js.server, self.js.server.callback_publisher)
        api._send(reply, {"type": rtype, "config": stream.cfg.to_json(), "state": sender.state})
        advisories.snapshot_create(self.js, name, sender.state, sender.client)
        self.js.server.flush_touched()
        assert self._nursery is not None
        self._nursery.start_soon(sender.run)

    # -- the restore request ----------------------------------------------------------------

    def restore_request(self, name: str, reply, payload: bytes) -> None:
        api = self.js.api
        rtype = _T + "stream_restore_response"
        js = self.js
        try:
            if is_empty_request(payload):
                raise errors.bad_request()
            try:
                req = decode_struct(go_decode_request(payload, "server.JSApiStreamRestoreRequest", _check_restore_request),
                                    _RESTORE_REQUEST, {})
                config = req.get("config") or {}
                if not config.get("name"):
                    config = {**config, "name": name}
                cfg = StreamConfig.from_json(config)
            except GoDecodeError as exc:  # (Go's Unmarshal error, as stream_create says it)
                # (a number named as it was written: read again keeping the literals)
                raise errors.invalid_json(str(with_literals(_check_restore_request, payload, exc))) from None
            except ValueError:
                raise errors.invalid_json() from None
            if cfg.name != name:
                raise errors.stream_mismatch()
            if "/" in name or "\\" in name:
                raise errors.name_contains_path_separators()
            unsupported.refuse_stream(config)
            cfg = check_stream_config(cfg, js.streams, js.limits)  # (replicas: refused when the stream is made)
            max_streams = js.limits.get("max_streams", -1)
            if max_streams > 0 and len(js.streams) >= max_streams:
                raise errors.max_streams_reached()
            js.check_reservation(cfg.storage, cfg.max_bytes, 0, exclude=None)
            if name in js.streams or name in self.restores:
                raise errors.stream_name_exist_restore_failed()
        except ApiError as exc:
            api._fail(reply, rtype, exc, deliver_subject="")  # (not omitted when empty)
            return
        restore = Restore(self, cfg)
        self.restores[name] = restore
        restore.client = advisories.client_info(js.server, js.server.callback_publisher)
        advisories.restore_create(js, name, restore.client)  # (before the answer, as 2.15.1)
        api._send(reply, {"type": rtype, "deliver_subject": restore.subject})
        assert self._nursery is not None
        self._nursery.start_soon(restore.run)


def _valid_publish_subject(subject: str) -> bool:
    """nats-server's IsValidPublishSubject: tokens not empty, no wildcards, no whitespace."""
    if not subject:
        return False
    for token in subject.split("."):
        if not token or token in ("*", ">"):
            return False
        if any(c in token for c in " \t\r\n\f"):
            return False
    return True


class SnapshotSender:
    """One snapshot going out (streamSnapshot): archive produced a turn at a time, sent in
    chunks as acks come back."""

    def __init__(self, js: SnapshotHost, stream: Stream, deliver: str, consumers: bool, chunk_size: int,
                 window_size: int) -> None:
        self.js = js
        self.stream = stream
        self.deliver = deliver.encode()
        self.chunk_size = _clamp(chunk_size or DEFAULT_CHUNK_SIZE, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
        window = _clamp(window_size or DEFAULT_WINDOW_SIZE, MIN_WINDOW_SIZE, MAX_WINDOW_SIZE)
        self.max_inflight = max(window, self.chunk_size) // self.chunk_size
        store = stream.store
        # What the snapshot holds is fixed now (FastState): messages stored later are left out,
        # ones removed meanwhile are skipped.
        self.first_seq, self.last_seq = store.first_seq, store.last_seq
        self.consumers = [c for c in stream.consumers.values() if not c.cfg.direct] if consumers else []
        # The response has the stream's state as it is; state.json counts the consumers that
        # follow (none without them), as streamSnapshotV2.
        self.state = stream.state_json()
        archived = {**self.state, "consumer_count": len(self.consumers)}
        entries = [MAGIC, self._entry(STATE_ENTRY, clock.now_ns(), 0, b"", dumps(archived))]
        now = clock.now_ns()
        for consumer in self.consumers:  # (taken now, as the state)
            entries.append(self._entry(CONSUMER_PREFIX + consumer.name.encode(), now, 0, b"",
                                       consumer_entry(consumer, self.last_seq)))
        self.pending_raw = b"".join(entries)
        self.next_seq = self.first_seq
        self.done = False  # the end entry is produced
        self.compressor = cramjam.snappy.Compressor()
        self.out = bytearray()
        self.slots = self.max_inflight
        self.slot_freed = trio.Event()
        self.ack_subject = f"{SNAPSHOT_ACK_PREFIX}{stream.name}.{secrets.token_hex(11)}"
        self.client: dict | None = None  # who asked (the advisories')
        self.started = clock.now_ns()

    @staticmethod
    def _entry(name: bytes, ts: int, seq: int, hdr: bytes, data: bytes) -> bytes:
        return entry_header(name, ts, seq, len(hdr), len(data)) + hdr + data

    def _produce(self) -> None:
        """At most TURN_BYTES more of the archive, compressed into ``out``."""
        parts = [self.pending_raw]
        size = len(self.pending_raw)
        self.pending_raw = b""
        store = self.stream.store
        if store.closed:
            raise ArchiveError("stream closed")
        last = self.last_seq
        while size < TURN_BYTES and not self.done:
            seq = self.next_seq
            msg = store.load_msg(seq) if seq <= last else None
            if msg is None:  # removed: on to the next live one (a gap is skipped in one step)
                seq = store.next_seq(b"", seq) if seq <= last else 0
                if not seq or seq > last:
                    parts.append(entry_header(b"", 0, 0, 0, 0))
                    self.done = True
                    break
                msg = store.load_msg(seq)
                if msg is None:
                    self.next_seq = seq + 1
                    continue
            self.next_seq = seq + 1
            hdr = msg.hdr or b""
            data = msg.data
            head = entry_header(msg.subject, msg.ts, seq, len(hdr), len(data))
            parts += (head, hdr, data)
            size += len(head) + len(hdr) + len(data)
        self.compressor.compress(b"".join(parts))
        self.out += self.compressor.flush()

    def _on_ack(self, subject, reply, hdr, payload) -> None:
        self.slots += 1
        self.slot_freed.set()

    async def run(self) -> None:
        js = self.js
        client = js.client
        status = _STATUS_DONE
        error = ""
        sent_with_reply = False
        sub = js.subscribe(self.ack_subject + ".>", self._on_ack)
        try:
            had_interest = client.has_interest(self.deliver)
            if not had_interest:
                with trio.move_on_after(INTEREST_WAIT):
                    while not client.has_interest(self.deliver):
                        await trio.sleep(INTEREST_POLL)
                    had_interest = True
            index = 1
            last_send = trio.current_time()
            while True:
                # A slot (an ack) first, as nats-server's loop waits before each read.
                while self.slots <= 0:
                    self.slot_freed = trio.Event()
                    with trio.move_on_at(last_send + ACK_TIMEOUT):
                        await self.slot_freed.wait()
                    if self.slots <= 0:
                        status = _STATUS_NO_FLOW
                        raise _Stop
                if had_interest and not client.has_interest(self.deliver):
                    status = _STATUS_NO_INTEREST
                    raise _Stop
                while len(self.out) < self.chunk_size and not self.done:
                    self._produce()
                    await trio.sleep(0)  # other clients' turn
                if len(self.out) < self.chunk_size:
                    if not self.done:
                        continue
                    if self.out:
                        js.send(self.deliver, bytes(self.out))
                    break
                chunk = bytes(self.out[: self.chunk_size])
                del self.out[: self.chunk_size]
                self.slots -= 1
                js.send(self.deliver, chunk, None, f"{self.ack_subject}.{len(chunk)}.{index}".encode())
                js.server.flush_touched()
                sent_with_reply = True
                last_send = trio.current_time()
                index += 1
        except _Stop:
            pass
        except (ArchiveError, OSError, StoreError) as exc:  # (the stream deleted or unreadable meanwhile)
            log.warning("Snapshot of stream '%s' failed: %s", self.stream.name, exc)
            status = b"NATS/1.0 500 %s\r\n\r\n" % str(exc).encode()
            error = str(exc)
        finally:
            js.unsubscribe(sub)
        if status is _STATUS_DONE and not sent_with_reply:
            js.send(self.deliver, b"")
        else:
            js.send(self.deliver, b"", status)
        if status is _STATUS_NO_FLOW:
            error = "no flow response"
        elif status is _STATUS_NO_INTEREST:
            error = "no interest"
        advisories.snapshot_complete(js, self.stream.name, self.started, clock.now_ns(), self.client, error)
        js.server.flush_touched()


class _Stop(Exception):
    """The snapshot ends early (the final status says why)."""


# -- restores ------------------------------------------------------------------------------------


_DROPPED = b"-"  # a chunk queued after the restore failed, in place of its data


class Restore:
    """One restore session: chunks decoded and applied as they arrive."""

    def __init__(self, owner: Snapshots, cfg) -> None:
        self.owner = owner
        self.js = owner.js
        self.cfg = cfg
        self.name = cfg.name
        self.subject = f"{RESTORE_PREFIX}{cfg.name}.{secrets.token_hex(11)}"
        self.frames = FrameReader()
        self.archive = ArchiveReader()
        self.archive.limit_for = self._limit_for
        self.sub = self.js.subscribe(self.subject, self.on_chunk)
        self.stream: Stream | None = None
        self.state: dict | None = None
        self.consumers_left = 0
        self.restored_consumers: list = []
        self.lseq = 0
        self.eob = False
        self.total = 0
        self.finished = False
        self.error: ApiError | None = None  # why it failed (told when the last chunk comes)
        self.client: dict | None = None  # who asked (the advisories')
        self.started = clock.now_ns()
        self.last_activity = trio.current_time()
        self.activity = trio.Event()  # a chunk queued, or the session ended
        self.queue: collections.deque[tuple[bytes, bytes]] = collections.deque()  # (reply, chunk)
        self.queued = 0  # bytes in it
        self.reserved = 0  # bytes checked against the limits (state.json's, then what was written)

    # -- the chunks -------------------------------------------------------------------------

    def on_chunk(self, subject, reply, hdr, payload: bytes) -> None:
        """A chunk arrived: queued for the session's task (``run``), which applies it a piece
        at a time between other clients' turns and acks it when done."""
        if self.finished:
            return
        self.last_activity = trio.current_time()
        if not reply:
            log.warning("restore for stream '%s' requires reply subject for each chunk", self.name)
            self._end(error=True)
            advisories.restore_complete(self.js, self.name, self.started, clock.now_ns(), self.total, self.client)
            return
        if self.error is not None and payload:
            payload = _DROPPED  # (only acked: not kept)
        self.queued += len(payload)
        if self.queued > MAX_QUEUED and self.error is None:
            # (a client that does not wait for acks; the CLI sends one chunk at a time)
            self._failed(errors.stream_restore("too many chunks sent ahead of their acks"))
        self.queue.append((reply, payload))
        self.activity.set()

    async def run(self) -> None:
        """Apply the chunks in order; abandon the restore after RESTORE_STALL without one."""
        while not self.finished:
            if not self.queue:
                self.activity = trio.Event()
                with trio.move_on_at(self.last_activity + RESTORE_STALL):
                    await self.activity.wait()
                if self.finished:
                    return
                if not self.queue:
                    if trio.current_time() >= self.last_activity + RESTORE_STALL:
                        log.warning("restore for stream '%s' is stalled", self.name)
                        self.abandon()
                        return
                    continue
            reply, payload = self.queue.popleft()
            self.queued -= len(payload)
            if not payload:
                if self.error is not None:
                    self._fail(reply, self.error)
                else:
                    self._complete(reply)
                return
            self.total += len(payload)
            if self.error is None:
                try:
                    for plain in self.frames.frames(payload):
                        for at in range(0, len(plain), TURN_BYTES):
                            for entry in self.archive.feed(plain[at : at + TURN_BYTES]):
                                self._apply(*entry)
                            await trio.sleep(0)  # other clients' turn
                            if self.finished or self.error is not None:
                                break
                        if self.finished or self.error is not None:
                            break
                except ApiError as exc:
                    self._failed(exc)
                except (ArchiveError, OSError) as exc:
                    self._failed(errors.stream_restore(str(exc)))
                except Exception as exc:  # a store refusing a message (StoreError) and the like
                    self._failed(errors.stream_restore(str(exc) or type(exc).__name__))
            if self.finished:
                return
            # Acked even when it failed: as 2.15.1, the error answers the final (empty) chunk,
            # and the chunks until then are taken and dropped.
            self.js.send(reply, b"")
            self.js.server.flush_touched()
            self.last_activity = trio.current_time()

    def _failed(self, exc: ApiError) -> None:
        """The restore can not succeed: what it restored goes now, the error is told at the
        end (processStreamRestore: chunks after the restore finished are acked)."""
        log.warning("Restore failed for stream '%s': %s", self.name, exc.description)
        self.error = exc
        self._drop()

    def _limit_for(self, name: bytes, seq: int, hdr_size: int, size: int) -> None:
        """Refuse an entry before its payload is buffered: a message above the server's
        max_payload or the stream's max_msg_size (RestoreStreamV2), metadata above
        MAX_META_ENTRY."""
        if self.state is None or self.consumers_left:
            if hdr_size + size > MAX_META_ENTRY:
                raise ArchiveError("archive entry too large")
            return
        if not name:
            return
        mp = self.js.server.options.max_payload
        if hdr_size > mp or size > mp - hdr_size:
            raise ArchiveError(f"message sequence {seq} exceeds maximum payload size")
        mms = self.cfg.max_msg_size
        if mms >= 0 and (hdr_size > mms or size > mms - hdr_size):
            raise ArchiveError(f"message sequence {seq} exceeds maximum message size")

    def _apply(self, name: bytes, ts: int, seq: int, hdr_size: int, payload: bytes) -> None:
        if self.eob:
            return
        if self.state is None:
            if name != STATE_ENTRY:
                raise ArchiveError("expected state.json first")
            try:
                state = loads(payload)
                if not isinstance(state, dict):
                    raise ValueError
            except ValueError as exc:
                raise ArchiveError(f"error in state.json: {exc}") from None
            self._start(state)
            return
        if self.consumers_left:
            if not name.startswith(CONSUMER_PREFIX):
                raise ArchiveError(f"expected consumer, found {name.decode('utf-8', 'replace')!r}")
            self._consumer(name[len(CONSUMER_PREFIX):].decode("utf-8", "replace"), payload)
            self.consumers_left -= 1
            return
        if seq == 0:
            if ts == 0 and not payload and not name:
                self._finish_messages()
                return
            raise ArchiveError("expected message sequence")
        assert self.stream is not None
        store = self.stream.store
        if seq <= self.lseq:
            raise ArchiveError(f"message sequence {seq} out of order")
        if seq - 1 > store.last_seq:
            store.skip_to(seq - 1, ts)
        self.lseq = seq
        hdr = payload[:hdr_size]
        data = payload[hdr_size:]
        store.store_msg(name, hdr, data, ts, header_ttl(hdr) if hdr else 0)
        if store.bytes > self.reserved:  # (more than state.json said: the limits again)
            self.reserved = store.bytes
            self.js.check_reservation(self.cfg.storage, store.bytes, 0, exclude=self.name)
        if hdr and MSG_ID in hdr:
            # Deduplication goes on: the ids within the window, as a restart rebuilds them.
            msg_id = get_header(MSG_ID, hdr)
            stream = self.stream
            if msg_id and ts > clock.now_ns() - stream.cfg.duplicate_window:
                stream._store_msg_id(msg_id, seq, ts)
            stream.lmsgid = msg_id or b""
        else:
            self.stream.lmsgid = b""

    def _start(self, state: dict) -> None:
        js = self.js
        cfg = self.cfg
        self.state = state
        try:
            first_seq = _uint(state.get("first_seq", 0), "state")
            _uint(state.get("last_seq", 0), "state")
            nbytes = _uint(state.get("bytes", 0), "state")
            self.consumers_left = _uint(state.get("consumer_count", 0), "state")
        except ArchiveError as exc:
            raise ArchiveError(f"error in state.json: {exc}") from None
        if self.name in js.streams:
            raise errors.stream_name_exist_restore_failed()
        # The whole restore's bytes are reserved against the account's and server's limits
        # before anything is written (RestoreStreamV2's reservation).
        self.reserved = max(cfg.max_bytes, nbytes)
        js.check_reservation(cfg.storage, self.reserved, 0, exclude=None)
        try:
            stream = js.add_stream(cfg)
        except ApiError as exc:  # (Go's ApiError text: "<description> (<err_code>)")
            raise errors.stream_restore(f"error adding stream: {exc.description} ({exc.err_code})") from None
        # Not reachable by publishers, not followed by sourcing, until complete.
        stream.unsubscribe()
        js.sourcing.detach(stream)
        self.stream = stream
        stream.store.compact(max(first_seq, 1))
        self.lseq = stream.store.last_seq

    def _consumer(self, name: str, payload: bytes) -> None:
        try:
            doc = loads(payload)
            config, state = doc.get("config"), doc.get("state")
        except (ValueError, AttributeError) as exc:
            raise ArchiveError(f"failed to decode consumer {name!r} state: {exc}") from None
        if not isinstance(config, dict):
            raise ArchiveError(f"consumer {name!r} is missing config")
        if not isinstance(state, dict):
            raise ArchiveError(f"consumer {name!r} is missing state")
        stream = self.stream
        assert stream is not None
        try:
            cfg = ConsumerConfig.from_json(config)
        except ValueError as exc:
            raise ArchiveError(f"failed to add consumer {name!r}: {exc}") from None
        ack_limit = self.js.limits.get("max_ack_pending", -1)
        set_defaults(cfg, ack_limit, stream.cfg.consumer_limits)
        check_config(cfg, stream.cfg.subjects or [], stream.cfg.retention, ack_limit, stream.cfg.consumer_limits)
        consumer = self.js.api.consumers.add(stream, cfg, name)
        try:
            _apply_consumer_state(consumer, state)
        except (ValueError, AttributeError, TypeError) as exc:
            raise ArchiveError(f"failed to set consumer {name!r} state: {exc}") from None
        self.restored_consumers.append(consumer)

    def _finish_messages(self) -> None:
        assert self.stream is not None and self.state is not None
        store = self.stream.store
        last_seq = self.state.get("last_seq", 0)
        if isinstance(last_seq, int) and last_seq > store.last_seq:
            store.skip_to(last_seq, _time_ns(self.state.get("last_ts")))
        self.eob = True

    def _complete(self, reply) -> None:
        """The empty chunk: the restore is over; answered with the stream's info."""
        js = self.js
        rtype = _T + "stream_create_response"
        if not self.eob:
            # What 2.15.1's readers say at the end of their input: S2's in a frame, the
            # archive's in an entry or its magic, "EOF" between entries (or with nothing).
            archive = self.archive
            if self.frames.buffered:
                err = "s2: corrupt input"
            elif not archive.seen_magic and archive.buf:
                err = "unexpected EOF"
            elif archive.buf or archive.pending_entry:
                err = "archive: invalid archive stream"
            else:
                err = "EOF"
            self._fail(reply, errors.stream_restore(err))
            return
        stream = self.stream
        assert stream is not None
        stream.subscribe()
        js.sourcing.attach(stream)
        now = clock.now_ns()
        for consumer in self.restored_consumers:
            consumer.num_pending()
            consumer.active_at = now
            consumer.dirty = True
            js.api.consumers._save(consumer)
        js.persist(stream)
        if stream.cfg.max_age > 0 or stream.cfg.allow_msg_ttl:
            nxt = stream.store.expire(now)
            if nxt is not None:
                js.schedule_expiry(nxt)
        js.delivery.poke()
        for consumer in self.restored_consumers:
            if consumer.cfg.deliver_subject:
                js.delivery.push(consumer, now)
        log.info("Completed restore of %d bytes for stream '%s'", self.total, self.name)
        self._end(error=False)
        advisories.restore_complete(js, self.name, self.started, now, self.total, self.client)
        # jsStreamRestoreRequest's StreamInfo: config, created, state and ts only.
        js.api._send(reply, {"type": rtype, "config": stream.cfg.to_json(False), "created": rfc3339nano(stream.created),
                             "state": stream.state_json(), "ts": rfc3339nano(clock.now_ns())})
        js.server.flush_touched()

    def _fail(self, reply, exc: ApiError) -> None:
        if self.error is None:
            log.warning("Restore failed for stream '%s': %s", self.name, exc.description)
        self._end(error=True)
        advisories.restore_complete(self.js, self.name, self.started, clock.now_ns(), self.total, self.client)
        self.js.api._send(reply, {"type": _T + "stream_create_response", "error": exc.to_json()}, error=True)
        self.js.server.flush_touched()

    def _end(self, *, error: bool) -> None:
        if self.finished:
            return
        self.finished = True
        self.js.unsubscribe(self.sub)
        self.owner.restores.pop(self.name, None)
        self.activity.set()
        if error:
            self._drop()

    def _drop(self) -> None:
        """Remove what the restore made (the stream and its consumers)."""
        if self.stream is not None:
            stream, self.stream = self.stream, None
            for consumer in list(stream.consumers.values()):
                self.js.api.consumers.remove(consumer)
            if self.js.streams.get(stream.name) is stream:
                self.js.delete_stream(stream)

    def abandon(self) -> None:
        self._end(error=True)


__all__ = ["ArchiveReader", "FrameReader", "Snapshots", "crc32c", "entry_header", "s2_decode_block"]
