"""The meta group's entries as nats-server 2.15.1 writes them (server/jetstream_cluster.go).

An entry of the ``_meta_`` group is a RAFT Normal entry whose first byte is the op
(``entryOp``) and whose rest is the JSON of a stream or consumer assignment, as Go's
``json.NewEncoder(..).Encode`` writes it: compact, ``<``, ``>`` and ``&`` escaped inside
strings, a trailing newline. ``assignCompressedConsumerOp`` carries the same JSON in an S2
stream (``s2.NewWriter``). The meta snapshot (a RAFT Snapshot entry's data, and the snapshot
file) is ``s2.Encode`` (an S2 block) of ``json.Marshal`` of the list of streams with their
consumers (``writeableStreamAssignment``).

An assignment keeps its JSON objects' fields in the order they came (the stream's or consumer's
configuration is Go's ``json.RawMessage``: kept as its parsed object, which Go's encoder and
``util.dumps`` write back the same), so that a decoded entry re-encodes to its bytes. Times are kept as Go wrote them (RFC 3339 with nanoseconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

import cramjam
import orjson

from ...protocol import s2
from .. import gotime
from ..util import dumps

__all__ = [
    "ConsumerAssignment", "EntryError", "MetaOp", "RaftGroup", "StreamAssignment",
    "decode_entry", "decode_snapshot", "encode_entry", "encode_snapshot", "service_account",
]


class MetaOp(IntEnum):
    """jetstream_cluster.go's entryOp values the meta group uses (the others are the stream
    and consumer groups' own: streamMsgOp 4, purgeStreamOp 5, ..., resetSeqOp 18)."""

    ASSIGN_STREAM = 0
    ASSIGN_CONSUMER = 1
    REMOVE_STREAM = 2
    REMOVE_CONSUMER = 3
    ASSIGN_COMPRESSED_CONSUMER = 9
    UPDATE_STREAM = 11


STREAM_OPS = (MetaOp.ASSIGN_STREAM, MetaOp.REMOVE_STREAM, MetaOp.UPDATE_STREAM)
CONSUMER_OPS = (MetaOp.ASSIGN_CONSUMER, MetaOp.REMOVE_CONSUMER, MetaOp.ASSIGN_COMPRESSED_CONSUMER)


class EntryError(ValueError):
    """A meta entry or snapshot that does not decode (jetstream_cluster.go: errBadEntryOp, a
    JSON error, "unknown meta entry op type")."""


def service_account(client: dict | None) -> str:
    """ClientInfo.serviceAccount(): the service import's account if any, else the client's."""
    if not client:
        return ""
    return client.get("svc") or client.get("acc") or ""


def _check_types(obj: dict, what: str, fields: Mapping[str, type]) -> None:
    """Go's Unmarshal refuses a field of the wrong JSON type: so does decoding here."""
    for key, kind in fields.items():
        value = obj.get(key)
        if value is not None and not isinstance(value, kind):
            raise EntryError(f"json: cannot unmarshal {key} of {what}")
    if isinstance(obj.get("client"), dict):
        _check_types(obj["client"], "ClientInfo", _CLIENT_FIELDS)


# ClientInfo's fields the meta layer reads (the rest is kept as it came).
_CLIENT_FIELDS: dict[str, type] = {"acc": str, "svc": str, "cluster": str, "alts": list}
_ASSIGNMENT_FIELDS: dict[str, type] = {"client": dict, "created": str, "group": dict, "sync": str, "subject": str, "reply": str,
                      "name": str, "restore_state": dict, "state": dict}
_GROUP_FIELDS: dict[str, type] = {"name": str, "peers": list, "store": str, "cluster": str, "preferred": str}


def _created_ns(text: str) -> int:
    try:
        return gotime.nanos(text)
    except ValueError:
        return 0  # (Go refuses the entry; a table keeps what it has)


# -- raftGroup -----------------------------------------------------------------------------------

# raftGroup's JSON fields in Go's order; "name", "peers" and "store" are always written.
_GROUP_ALWAYS = ("name", "peers", "store")


@dataclass(slots=True)
class RaftGroup:
    """jetstream_cluster.go raftGroup: a stream's or consumer's RAFT group. ``extra`` keeps
    what 2.15.1 may add and natserver does not act on yet (scale_up, excluded, desired), in
    place, so that it re-encodes."""

    name: str
    peers: list[str] | None
    storage: str  # "file" or "memory" (Go's StorageType JSON)
    cluster: str = ""
    preferred: str = ""
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj) -> RaftGroup:
        if not isinstance(obj, dict):
            raise EntryError("raft group is not an object")
        _check_types(obj, "raftGroup", _GROUP_FIELDS)
        if not all(isinstance(p, str) for p in obj.get("peers") or ()):
            raise EntryError("json: cannot unmarshal peers of raftGroup")
        extra = {k: v for k, v in obj.items() if k not in ("name", "peers", "store", "cluster", "preferred")}
        return cls(obj.get("name", ""), obj.get("peers"), obj.get("store", "file"),
                   obj.get("cluster", ""), obj.get("preferred", ""), extra)

    def to_json(self) -> dict:
        out: dict = {"name": self.name, "peers": self.peers, "store": self.storage}
        if self.cluster:
            out["cluster"] = self.cluster
        if self.preferred:
            out["preferred"] = self.preferred
        out.update(self.extra)
        return out

    def is_member(self, peer_id: str) -> bool:
        return bool(self.peers) and peer_id in self.peers  # type: ignore[operator]


# -- assignments ---------------------------------------------------------------------------------


@dataclass(slots=True)
class StreamAssignment:
    """jetstream_cluster.go streamAssignment (``client`` a ClientInfo object, ``config`` the
    stream's configuration as JSON) and, in the meta state, its consumers by name."""

    client: dict | None
    created: str
    config: dict
    group: RaftGroup | None
    sync: str = ""
    subject: str = ""
    reply: str = ""
    restore: dict | None = None
    consumers: dict[str, ConsumerAssignment] = field(default_factory=dict)

    @property
    def account(self) -> str:
        return service_account(self.client)

    @property
    def name(self) -> str:
        return str(self.config.get("name", ""))

    @property
    def created_ns(self) -> int:
        return _created_ns(self.created)

    @classmethod
    def from_json(cls, obj) -> StreamAssignment:
        if not isinstance(obj, dict) or not isinstance(obj.get("stream"), dict):
            raise EntryError("stream assignment without a stream configuration")
        _check_types(obj, "streamAssignment", _ASSIGNMENT_FIELDS)
        if not isinstance(obj["stream"].get("name", ""), str):
            raise EntryError("json: cannot unmarshal name of StreamConfig")
        group = obj.get("group")
        return cls(obj.get("client"), obj.get("created", gotime.format(0)), obj["stream"],
                   None if group is None else RaftGroup.from_json(group), obj.get("sync", ""),
                   obj.get("subject", ""), obj.get("reply", ""), obj.get("restore_state"))

    def to_json(self) -> dict:
        """streamAssignment's JSON, in Go's field order (the config as its raw JSON)."""
        out: dict = {}
        if self.client is not None:
            out["client"] = self.client
        out["created"] = self.created
        out["stream"] = self.config
        out["group"] = None if self.group is None else self.group.to_json()
        out["sync"] = self.sync
        if self.subject:
            out["subject"] = self.subject
        if self.reply:
            out["reply"] = self.reply
        if self.restore is not None:
            out["restore_state"] = self.restore
        return out

    def snapshot_json(self) -> dict:
        """writeableStreamAssignment: the client reduced to account, service and cluster
        (ClientInfo.forAssignmentSnap), no subject or reply, the consumers under "Consumers"
        (a Go field without a JSON tag)."""
        return {
            "client": _client_for_snapshot(self.client), "created": self.created,
            "stream": self.config,
            "group": None if self.group is None else self.group.to_json(), "sync": self.sync,
            "Consumers": [ca.snapshot_json() for ca in self.consumers.values()],
        }


@dataclass(slots=True)
class ConsumerAssignment:
    """jetstream_cluster.go consumerAssignment; ``state`` the ConsumerState a compressed
    assignment may carry (a restored stream's consumers)."""

    client: dict | None
    created: str
    name: str
    stream: str
    config: dict
    group: RaftGroup | None
    subject: str = ""
    reply: str = ""
    state: dict | None = None

    @property
    def account(self) -> str:
        return service_account(self.client)

    @property
    def created_ns(self) -> int:
        return _created_ns(self.created)

    @classmethod
    def from_json(cls, obj) -> ConsumerAssignment:
        if not isinstance(obj, dict) or not isinstance(obj.get("consumer"), dict):
            raise EntryError("consumer assignment without a consumer configuration")
        _check_types(obj, "consumerAssignment", {**_ASSIGNMENT_FIELDS, "stream": str})
        group = obj.get("group")
        return cls(obj.get("client"), obj.get("created", gotime.format(0)), obj.get("name", ""),
                   obj.get("stream", ""), obj["consumer"],
                   None if group is None else RaftGroup.from_json(group), obj.get("subject", ""),
                   obj.get("reply", ""), obj.get("state"))

    def to_json(self) -> dict:
        out: dict = {}
        if self.client is not None:
            out["client"] = self.client
        out["created"] = self.created
        out["name"] = self.name
        out["stream"] = self.stream
        out["consumer"] = self.config
        out["group"] = None if self.group is None else self.group.to_json()
        if self.subject:
            out["subject"] = self.subject
        if self.reply:
            out["reply"] = self.reply
        if self.state is not None:
            out["state"] = self.state
        return out

    def snapshot_json(self) -> dict:
        return {
            "client": _client_for_snapshot(self.client), "created": self.created, "name": self.name,
            "stream": self.stream, "consumer": self.config,
            "group": None if self.group is None else self.group.to_json(),
        }


def _client_for_snapshot(client: dict | None) -> dict:
    """ClientInfo.forAssignmentSnap: account, service and cluster (omitted when empty)."""
    client = client or {}
    return {k: client[k] for k in ("acc", "svc", "cluster") if client.get(k)}


# -- entries -------------------------------------------------------------------------------------

Assignment = StreamAssignment | ConsumerAssignment


def _go_encode(obj) -> bytes:
    """json.NewEncoder(w).Encode: Marshal's bytes and a newline."""
    return dumps(obj) + b"\n"


def encode_entry(op: MetaOp, assignment: Assignment) -> bytes:
    """The op byte and the assignment (encodeAddStreamAssignment and its siblings; the
    compressed consumer op in an S2 stream, encodeAddConsumerAssignmentCompressed)."""
    if op in STREAM_OPS and not isinstance(assignment, StreamAssignment):
        raise EntryError(f"op {op.name} needs a stream assignment")
    if op in CONSUMER_OPS and not isinstance(assignment, ConsumerAssignment):
        raise EntryError(f"op {op.name} needs a consumer assignment")
    body = _go_encode(assignment.to_json())
    if op == MetaOp.ASSIGN_COMPRESSED_CONSUMER:
        body = s2.StreamEncoder().encode(body)
    return bytes([op]) + body


def decode_entry(data: bytes) -> tuple[MetaOp, Assignment]:
    """A meta Normal entry's op and assignment; EntryError as applyMetaEntries fails."""
    if not data:
        raise EntryError("bad entry op")  # errBadEntryOp
    try:
        op = MetaOp(data[0])
    except ValueError:
        raise EntryError(f"unknown meta entry op type: {data[0]}") from None
    body = data[1:]
    if op == MetaOp.ASSIGN_COMPRESSED_CONSUMER:
        body = _decode_stream(body)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise EntryError(f"invalid JSON: {e}") from None
    if op in STREAM_OPS:
        return op, StreamAssignment.from_json(obj)
    return op, ConsumerAssignment.from_json(obj)


def _decode_stream(body: bytes) -> bytes:
    decoder = s2.StreamDecoder()
    decoder.feed(body)
    out = bytearray()
    try:
        while (chunk := decoder.next_chunk()) is not None:
            out += chunk
    except s2.S2Error as e:
        raise EntryError(str(e)) from None
    if decoder.buffered:
        raise EntryError("s2: corrupt input")
    return bytes(out)


# -- the snapshot --------------------------------------------------------------------------------


def snapshot_json(streams: list[StreamAssignment]) -> bytes:
    """json.Marshal of the writeableStreamAssignment list (no trailing newline)."""
    return dumps([sa.snapshot_json() for sa in streams])


def encode_snapshot(streams: list[StreamAssignment]) -> bytes:
    """encodeMetaSnapshot: empty when there are no streams, else an S2 block of the JSON.
    natserver compresses with snappy's block format, which S2's decoder reads (S2 extends it);
    2.15.1's own encoder finds other matches, so the bytes differ, the JSON does not."""
    if not streams:
        return b""
    return bytes(cramjam.snappy.compress_raw(snapshot_json(streams)))


def decode_snapshot(data: bytes) -> list[StreamAssignment]:
    """decodeMetaSnapshot: the streams, each with its consumers (a consumer without a stream
    name takes its stream's, as 2.15.1 rehydrates it)."""
    if not data:
        return []
    try:
        obj = orjson.loads(s2.decode_block(data))
    except s2.S2Error as e:
        raise EntryError(str(e)) from None
    except orjson.JSONDecodeError as e:
        raise EntryError(f"invalid JSON: {e}") from None
    if not isinstance(obj, list):
        raise EntryError("meta snapshot is not a list")
    streams = []
    for item in obj:
        sa = StreamAssignment.from_json(item)
        if not isinstance(item.get("Consumers") or [], list):
            raise EntryError("json: cannot unmarshal Consumers of writeableStreamAssignment")
        for citem in item.get("Consumers") or ():
            ca = ConsumerAssignment.from_json(citem)
            if not ca.stream:
                ca.stream = sa.name
            sa.consumers[ca.name] = ca
        streams.append(sa)
    return streams
