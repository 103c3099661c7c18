"""Streams: configuration (decoded, defaulted and validated as nats-server v2.9.10 does) and
the publish path (expected-* headers, deduplication, limits, acks).

Layer (README "Layers"): the middle of the state tier: consumers sit above it, the store below;
what a stream needs of the engine (the package's ``JetStream``) is ``StreamHost``.
"""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Iterable
from typing import Any, Protocol

import orjson

from .. import clock
from ..routing.transform import MappingError, SubjectTransform, validate_mapping
from . import batch, counter, errors, fastbatch, schedule
from .counter import check_counter_config
from .errors import ApiError
from .external import LinkEngine, check_external, source_key
from .gojson import (
    INT32,
    INT64,
    UINT64,
    DecodeError,
    GoDecodeError,
    decode_bool,
    decode_enum,
    decode_int,
    decode_metadata,
    decode_object,
    decode_str,
    decode_strlist,
    decode_struct,
    json_kind,
)
from .store import StoreError, StoreWriteError
from .ttl import MIN_MARKER_TTL_NS, MSG_TTL, InvalidTTL, header_ttl, marker_header, parse_ttl
from .util import (
    dumps,
    gen_header,
    get_header,
    go_quote,
    is_subset_match,
    is_valid_subject,
    parse_uint,
    remove_header,
    rfc3339nano,
    subjects_collide,
)
from .versioning import metadata_json

log = logging.getLogger("natserver")

# What a message of a run counts in the account's usage beyond its subject and payload, at most
# (inbound_run asks engine.room for the run's bytes): a file store's record frame (store.py
# _OVERHEAD, 35 bytes) and a memory store's 16 (memStoreMsgSize), with room to spare.
RUN_MSG_OVERHEAD = 64


class StreamWatcher(Protocol):
    """delivery.Delivery as a stream uses it: its consumers have something new."""

    def stream_changed(self, stream: Stream) -> None: ...


class StreamHost(LinkEngine, Protocol):
    """What a stream needs of the engine (``JetStream``): answers, expiry timers, the account's
    limits, and the tasks above it (deliveries, mirrors and sources) to wake."""

    @property
    def streams(self) -> dict[str, Stream]: ...
    @property
    def delivery(self) -> StreamWatcher: ...
    def respond(self, reply: bytes, payload: bytes, stream: Stream) -> None: ...
    def schedule_expiry(self, deadline_ns: int) -> None: ...
    def schedule_fire(self, deadline_ns: int) -> None: ...
    def over_limit(self, kind: str) -> bool: ...
    def room(self, kind: str, nbytes: int) -> bool: ...  # nbytes more surely within the limits
    def ack_queue(self, stream: Stream) -> list | None: ...  # where respond would queue acks now
    def acks_queued(self) -> None: ...  # acks were added to ack_queue's list: send them soon
    @property
    def domain(self) -> Any: ...  # the JetStream domain, for stream info (None or "": none)
    @property
    def server(self) -> Any: ...  # the server, for its name (stream info's cluster leader)
    @property
    def cluster_block(self) -> dict | None: ...  # stream info's "cluster" in a cluster (name, leader)
    @property
    def origins_by_messages(self) -> bool: ...  # mirrors and sources go by messages (a cluster)


class StreamGroup(Protocol):
    """A replicated stream's group (replica.py) as the stream uses it: in a cluster, a stream
    with num_replicas > 1 stores what its RAFT group commits; its leader proposes the
    publishes the stream checked (``propose``) and its purges and deletes."""

    @property
    def leading(self) -> bool: ...  # this server leads the group, ready to propose
    def propose(self, subject: bytes, reply: bytes | None, hdr: bytes, msg: bytes, now: int) -> bool: ...
    def propose_batch(self, batch_id: bytes, msgs: list, now: int) -> bool: ...  # an atomic batch, together
    # (a mirror's or source's message: sourcing.py; mirror_seq: the origin's sequence, a mirror's)
    def propose_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int, mirror_seq: int = 0) -> bool: ...
    def proposed_last(self) -> int: ...  # the last sequence, proposals in flight included
    def cluster_json(self) -> dict: ...  # stream info's "cluster" (name, raft group, leader, replicas)
    def purge(self, request: dict | None, reply) -> None: ...
    def delete_msg(self, seq: int, no_erase: bool, reply) -> None: ...
    def step_down(self, preferred: str = "") -> None: ...  # (a peer id, or "")
    @property
    def raft_node(self) -> Any: ...  # the group's natserver.raft.Node (its peers, its id)
    def has_consumers(self) -> bool: ...  # replicated consumers of the stream on this server
    def consumer_count(self) -> int: ...  # the stream's consumers in the meta group's assignments


DEFAULT_DUPLICATE_WINDOW = 120 * 1_000_000_000  # nats-server StreamDefaultDuplicatesWindow
MIN_WINDOW = 100 * 1_000_000  # 100ms: the least max_age and duplicate_window
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024  # jetstream_api.go JSMaxMetadataLen: keys and values, bytes (2.10+)
MAX_REPLICAS = 5
MAX_HEADER_SIZE = 65535
DEFAULT_MAX_PAYLOAD = 1024 * 1024  # nats-server's MAX_PAYLOAD_SIZE (max_payload's default)
_API_SPACES = ("$JS.>", "$JSC.>", "$NRG.>")  # what a stream's subjects may take only with no_ack
DEFAULT_COMPRESSION = "none"  # nats-server 2.10+ NoCompression's JSON ("none")
# StreamConfig fields of 2.12+ that 2.15.1 writes after allow_msg_counter when set (omitempty),
# in its order; added to StreamConfig by their own modules (batches, schedules, persist mode).
_LATER_FIELDS = ("allow_atomic", "allow_msg_schedules", "persist_mode", "allow_batched")


def _placement(value):
    """A placement as Go holds it: empty values dropped, but tags given as a list, even an
    empty one (a non-nil slice: such a placement is not the empty one checkStreamCfg removes,
    and is written as {})."""
    out = decode_struct(decode_object(value), {"cluster": decode_str, "tags": decode_strlist,
                                               "preferred": decode_str}, {})
    return {k: v for k, v in out.items() if v or (k == "tags" and isinstance(v, list))}


# 2.12's persist_mode (stream.go PersistModeType): "default" (or "") is Go's zero value,
# kept here as "" and omitted from the JSON; "async" acknowledges before the write.
PERSIST_DEFAULT = ""
PERSIST_ASYNC = "async"


def _persist_mode(value):
    """stream.go PersistModeType.UnmarshalJSON: "default", "" or "async"; anything else (another
    case, a number, null) is refused with its error (shown after "invalid JSON: ")."""
    if value in ("default", ""):
        return PERSIST_DEFAULT
    if value == PERSIST_ASYNC:
        return PERSIST_ASYNC
    raise GoDecodeError(f"can not unmarshal {go_quote(dumps(value).decode())}")


_persist_mode.null_error = 'can not unmarshal "null"'  # type: ignore[attr-defined]


def _sources(value):
    if not isinstance(value, list):
        raise DecodeError("sources: not a list")
    return [decode_source(v, f"sources.{i}") for i, v in enumerate(value)]


def _go_kind(value) -> str:
    """What Go's json error calls a JSON value ("number -1", "string", ...)."""
    return json_kind(value, "int64")


# compression (2.10+): nats-server's StoreCompression names (filestore.go); "none" is also what
# a stream without the field gets.
COMPRESSIONS = ("none", "s2")


def _compression(value):
    """compression (2.10+): "none" or "s2", refused with the text of nats-server's Unmarshal
    (StoreCompression.UnmarshalJSON: any other string, "" and "S2" too)."""
    if value is not None and not isinstance(value, str):
        raise GoDecodeError(f"json: cannot unmarshal {_go_kind(value).split()[0]} into Go value of type string")
    if value not in COMPRESSIONS:  # (null too: it unmarshals to "")
        raise GoDecodeError("unknown compression algorithm")
    return value


_compression.takes_null = True  # type: ignore[attr-defined]


def _first_seq(value):
    """first_seq (2.10+): a uint64, refused with the text of Go's Unmarshal error."""
    try:
        return decode_int(value, UINT64)
    except DecodeError:
        raise GoDecodeError(f"json: cannot unmarshal {_go_kind(value)} into Go struct field "
                            f"StreamConfigRequest.first_seq of type uint64") from None


def _subject_transform(value, where: str = "subject_transform"):
    """subject_transform (2.10+): {"src", "dest"}, both always written."""
    if not isinstance(value, dict):
        raise GoDecodeError(f"json: cannot unmarshal {_go_kind(value)} into Go struct field "
                            f"StreamConfigRequest.{where} of type server.SubjectTransformConfig")
    raw = decode_struct(value, {"src": decode_str, "dest": decode_str}, {})
    return {"src": raw.get("src", ""), "dest": raw.get("dest", "")}


_LIMIT_TYPES = {"inactive_threshold": "time.Duration", "max_ack_pending": "int"}
_LIMIT_FIELDS = {k: (lambda v: v) for k in _LIMIT_TYPES}  # (checked by _consumer_limits)


def _consumer_limits(value):
    """consumer_limits (2.10+): the defaults and caps of the stream's consumers
    ({"inactive_threshold" ns, "max_ack_pending"}, each written only when set; Go's checks
    take any value, negative too)."""
    if not isinstance(value, dict):
        kind = "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else _go_kind(value)
        raise GoDecodeError(f"json: cannot unmarshal {kind} into Go struct field "
                            "StreamConfigRequest.consumer_limits of type server.StreamConsumerLimits")
    out = {}
    for key, item in decode_struct(value, _LIMIT_FIELDS, {}).items():
        if isinstance(item, bool) or not isinstance(item, int) or not INT64[0] <= item <= INT64[1]:
            raise GoDecodeError(f"json: cannot unmarshal {_go_kind(item)} into Go struct field "
                                f"StreamConfigRequest.consumer_limits.{key} of type {_LIMIT_TYPES[key]}")
        out[key] = item
    return {k: out[k] for k in _LIMIT_TYPES if out.get(k)}


class _WrongTransforms(GoDecodeError):
    """A source's subject_transforms that is not a list of objects (decode_source names where)."""


def _subject_transforms(value):
    """A mirror's or source's subject_transforms (2.10+): a list of subject_transform."""
    if not isinstance(value, list):
        raise _WrongTransforms(f"json: cannot unmarshal {_go_kind(value)} into Go struct field "
                               "StreamConfigRequest.{where}.subject_transforms of type []server.SubjectTransformConfig")
    for i, item in enumerate(value):
        if not isinstance(item, dict):  # (Go names an element so, without "Go struct field")
            raise _WrongTransforms(f"json: cannot unmarshal {_go_kind(item)} into "
                                   f"StreamConfigRequest.{{where}}.subject_transforms.{i} of type "
                                   "server.SubjectTransformConfig")
    return [_subject_transform(item) for item in value]


def _republish(value):
    raw = decode_struct(decode_object(value), {"src": decode_str, "dest": decode_str, "headers_only": decode_bool}, {})
    out = {"src": raw.get("src", ""), "dest": raw.get("dest", "")}
    if raw.get("headers_only"):
        out["headers_only"] = True
    return out


_CONFIG_FIELDS = {
    "name": decode_str,
    "description": decode_str,
    "subjects": decode_strlist,
    "retention": decode_enum("limits", "interest", "workqueue"),
    "max_consumers": lambda v: decode_int(v, INT64),
    "max_msgs": lambda v: decode_int(v, INT64),
    "max_bytes": lambda v: decode_int(v, INT64),
    "max_age": lambda v: decode_int(v, INT64),
    "max_msgs_per_subject": lambda v: decode_int(v, INT64),
    "max_msg_size": lambda v: decode_int(v, INT32),
    "discard": decode_enum("old", "new", fold=True),
    "storage": decode_enum("file", "memory", "any"),
    "num_replicas": lambda v: decode_int(v, INT64),
    "no_ack": decode_bool,
    "template_owner": decode_str,
    "duplicate_window": lambda v: decode_int(v, INT64),
    "placement": _placement,
    "mirror": lambda v: decode_source(v, "mirror"),
    "sources": _sources,
    "compression": _compression,
    "first_seq": _first_seq,
    "subject_transform": _subject_transform,
    "republish": _republish,
    "allow_direct": decode_bool,
    "mirror_direct": decode_bool,
    "discard_new_per_subject": decode_bool,
    "sealed": decode_bool,
    "deny_delete": decode_bool,
    "deny_purge": decode_bool,
    "allow_rollup_hdrs": decode_bool,
    "consumer_limits": _consumer_limits,
    "allow_msg_ttl": decode_bool,
    "subject_delete_marker_ttl": lambda v: decode_int(v, INT64),
    "allow_msg_counter": decode_bool,
    "allow_msg_schedules": decode_bool,
    "allow_atomic": decode_bool,
    "persist_mode": _persist_mode,
    "allow_batched": decode_bool,
    "metadata": decode_metadata,
}

# The Go types of StreamConfig's fields (stream.go), named in Go's decoding errors; the
# fields with decoders of their own (compression, first_seq, consumer_limits...) name theirs.
_GO_TYPES = {
    "name": "string", "description": "string", "subjects": "[]string", "max_consumers": "int",
    "max_msgs": "int64", "max_bytes": "int64", "max_age": "time.Duration", "max_msgs_per_subject": "int64",
    "max_msg_size": "int32", "num_replicas": "int", "duplicate_window": "time.Duration",
    "placement": "server.Placement", "mirror": "server.StreamSource", "sources": "[]*server.StreamSource",
    "republish": "server.RePublish", "subject_delete_marker_ttl": "time.Duration", "metadata": "map[string]string",
    **{flag: "bool" for flag in ("no_ack", "allow_direct", "mirror_direct", "discard_new_per_subject", "sealed",
                                 "deny_delete", "deny_purge", "allow_rollup_hdrs", "allow_msg_ttl",
                                 "allow_msg_counter", "allow_msg_schedules", "allow_atomic", "allow_batched")},
}
_SOURCE_SHAPE = {"name": None, "opt_start_seq": None, "opt_start_time": None, "filter_subject": None,
                 "subject_transforms": [{"src": None, "dest": None}], "external": {"api": None, "deliver": None},
                 "consumer": None}
# jetstream_api.go StreamConfigRequest: the fields a create or update may name (2.15.1, strict);
# template_owner is gone from 2.10's StreamConfig.
REQUEST_SHAPE: dict = {
    **{key: None for key in _CONFIG_FIELDS if key != "template_owner"}, "pedantic": None,
    "placement": {"cluster": None, "tags": None, "preferred": None},
    "mirror": _SOURCE_SHAPE, "sources": [_SOURCE_SHAPE],
    "subject_transform": {"src": None, "dest": None},
    "republish": {"src": None, "dest": None, "headers_only": None},
    "consumer_limits": {"inactive_threshold": None, "max_ack_pending": None},
}

_DEFAULTS = {
    "name": "", "description": "", "subjects": None, "retention": "limits", "max_consumers": 0,
    "max_msgs": 0, "max_bytes": 0, "max_age": 0, "max_msgs_per_subject": 0, "max_msg_size": 0,
    "discard": "old", "storage": "", "num_replicas": 0, "no_ack": False, "template_owner": "",
    "duplicate_window": 0, "placement": None, "mirror": None, "sources": None, "compression": "none", "first_seq": 0, "subject_transform": None, "republish": None,
    "allow_direct": False, "mirror_direct": False, "discard_new_per_subject": False,
    "sealed": False, "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": False,
    "consumer_limits": None, "allow_msg_ttl": False, "subject_delete_marker_ttl": 0, "allow_msg_counter": False,
    "allow_msg_schedules": False, "allow_atomic": False,
    "persist_mode": PERSIST_DEFAULT, "allow_batched": False, "metadata": None,
}


# errors.go ErrMaxPayload: what a traced message's event says of one over a size limit.
MAX_PAYLOAD_EXCEEDED = "maximum payload exceeded"


def _go_quote(value: bytes) -> str:
    """Go's %q of a header value (a message id), as a trace event's error quotes it."""
    return orjson.dumps(value.decode("utf-8", "replace")).decode()


class StreamConfig:
    """A stream's configuration; attribute names are nats-server's JSON names."""

    __slots__ = tuple(_DEFAULTS)

    # One per _DEFAULTS key (tests/jetstream/test_config_types.py keeps them in step).
    name: str
    description: str
    subjects: list[str] | None
    retention: str  # limits, interest, workqueue
    max_consumers: int
    max_msgs: int
    max_bytes: int
    max_age: int  # ns
    max_msgs_per_subject: int
    max_msg_size: int
    discard: str  # old, new
    storage: str  # file, memory ("": file)
    num_replicas: int
    no_ack: bool
    template_owner: str
    duplicate_window: int  # ns
    placement: dict | None
    mirror: dict | None  # a StreamSource (decode_source)
    sources: list[dict] | None
    compression: str  # 2.10+: "none" or "s2" (file streams compress sealed segments: compressed.py)
    first_seq: int  # 2.10+: the sequence of the stream's first message (0: 1)
    subject_transform: dict | None  # 2.10+: {"src", "dest"} applied to what the stream stores
    republish: dict | None
    allow_direct: bool
    mirror_direct: bool
    discard_new_per_subject: bool
    sealed: bool
    deny_delete: bool
    deny_purge: bool
    allow_rollup_hdrs: bool
    consumer_limits: dict | None  # 2.10+: {"inactive_threshold" ns, "max_ack_pending"}, the set ones
    allow_msg_ttl: bool
    subject_delete_marker_ttl: int  # ns
    allow_msg_counter: bool  # 2.12+: counters (counter.py)
    allow_msg_schedules: bool  # 2.12+: message schedules (schedule.py)
    allow_atomic: bool  # 2.12+: atomic batch publishing (batch.py)
    persist_mode: str  # 2.12+: PERSIST_DEFAULT ("") or PERSIST_ASYNC (ack before the write)
    allow_batched: bool  # 2.14+: fast batch publishing (fastbatch.py)
    metadata: dict[str, str] | None

    def __init__(self, **values) -> None:
        for key, default in _DEFAULTS.items():
            setattr(self, key, values.get(key, default))

    @classmethod
    def from_json(cls, obj) -> "StreamConfig":
        """Decode a request body (already parsed); raises DecodeError as Go's Unmarshal fails."""
        return cls(**decode_struct(obj, _CONFIG_FIELDS, {}, "StreamConfigRequest", _GO_TYPES))

    def copy(self, **changes) -> "StreamConfig":
        values = {k: getattr(self, k) for k in _DEFAULTS}
        values.update(changes)
        return StreamConfig(**values)

    def to_json(self, dynamic: bool = False) -> dict:
        """nats-server 2.15.1's StreamConfig: its field order and omitempty rules; ``dynamic``:
        the metadata with the server's version and level (versioning.py), as in the answers to
        create, update and info."""
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.subjects:
            out["subjects"] = self.subjects
        out["retention"] = self.retention
        out["max_consumers"] = self.max_consumers
        out["max_msgs"] = self.max_msgs
        out["max_bytes"] = self.max_bytes
        out["max_age"] = self.max_age
        out["max_msgs_per_subject"] = self.max_msgs_per_subject
        if self.max_msg_size:
            out["max_msg_size"] = self.max_msg_size
        out["discard"] = self.discard
        out["storage"] = self.storage or "file"
        out["num_replicas"] = self.num_replicas
        if self.no_ack:
            out["no_ack"] = True
        # (template_owner: gone from 2.10's StreamConfig; still decoded, never written)
        if self.duplicate_window:
            out["duplicate_window"] = self.duplicate_window
        if self.placement:
            out["placement"] = {k: v for k, v in self.placement.items() if v}
        if self.mirror is not None:
            out["mirror"] = self.mirror
        if self.sources:
            out["sources"] = self.sources
        out["compression"] = self.compression or DEFAULT_COMPRESSION  # (2.10+: always written)
        if self.first_seq:
            out["first_seq"] = self.first_seq
        if self.subject_transform is not None:
            out["subject_transform"] = self.subject_transform
        if self.republish is not None:
            out["republish"] = self.republish
        out["allow_direct"] = self.allow_direct
        out["mirror_direct"] = self.mirror_direct
        if self.discard_new_per_subject:
            out["discard_new_per_subject"] = True
        out["sealed"] = self.sealed
        out["deny_delete"] = self.deny_delete
        out["deny_purge"] = self.deny_purge
        out["allow_rollup_hdrs"] = self.allow_rollup_hdrs
        out["consumer_limits"] = self.consumer_limits or {}  # (a struct in Go: {} when unset)
        out["allow_msg_ttl"] = self.allow_msg_ttl
        if self.subject_delete_marker_ttl:
            out["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        if self.allow_msg_counter:
            out["allow_msg_counter"] = True
        # 2.12+ settings other modules add, in 2.15.1's place (omitted when unset).
        for key in _LATER_FIELDS:
            value = getattr(self, key, None)
            if value and value != "default":  # (persist_mode: Go's zero value is "default")
                out[key] = value
        metadata = metadata_json(self.metadata, dynamic)
        if metadata:
            out["metadata"] = metadata
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, StreamConfig) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"StreamConfig({self.to_json()!r})"


def check_stream_config(config: StreamConfig, streams: dict, limits: dict | None = None) -> StreamConfig:
    """nats-server's checkStreamCfg for a standalone server: defaults filled in, invalid
    configurations refused (ApiError). ``streams`` are the existing ones (for mirrors);
    ``limits`` the account's JetStream limits (max_bytes_required, the per-stream byte limits)."""
    invalid = errors.stream_invalid_config
    if not _valid_asset_name(config.name):
        raise invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(config.name) > MAX_NAME_LEN:
        raise invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(config.description) > MAX_DESCRIPTION_LEN:
        raise invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(len(k) + len(v) for k, v in (config.metadata or {}).items()) > MAX_METADATA_LEN:
        raise invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")
    cfg = config.copy()
    if not cfg.storage:
        cfg.storage = "file"
    if cfg.num_replicas == 0:
        cfg.num_replicas = 1
    if cfg.num_replicas > MAX_REPLICAS:
        raise invalid(f"maximum replicas is {MAX_REPLICAS}")
    if cfg.num_replicas < 0:
        raise errors.replicas_negative()
    for key in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        if getattr(cfg, key) == 0 or getattr(cfg, key) < -1:  # (any negative is "unlimited": -1)
            setattr(cfg, key, -1)
    if cfg.max_age < 0:
        raise invalid("max age can not be negative")
    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:  # (2.10+: nor with sources)
        if cfg.max_age != 0 and cfg.max_age < DEFAULT_DUPLICATE_WINDOW:
            cfg.duplicate_window = cfg.max_age
        else:
            cfg.duplicate_window = DEFAULT_DUPLICATE_WINDOW
    if 0 < cfg.max_age < MIN_WINDOW:
        raise invalid("max age needs to be >= 100ms")
    if cfg.duplicate_window < 0:
        raise invalid("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise invalid("duplicates window can not be larger then max age")
    if 0 < cfg.duplicate_window < MIN_WINDOW:
        raise invalid("duplicates window needs to be >= 100ms")
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise invalid("roll-ups require the purge permission")
    if cfg.allow_msg_counter:
        check_counter_config(cfg)
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise invalid("discard new per subject requires max msgs per subject > 0")
    if cfg.subject_delete_marker_ttl > 0:
        # 2.11+: markers need TTLs and roll-ups, which a (non-pedantic) request gets.
        if cfg.subject_delete_marker_ttl < MIN_MARKER_TTL_NS:
            raise invalid("subject delete marker TTL must be at least 1 second")
        cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise invalid("subject delete marker TTL must not be negative")
    if cfg.allow_msg_schedules:
        # 2.12+: a schedule replaces the one before it on its subject by a roll-up.
        if cfg.discard == "new":
            raise invalid("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    if cfg.persist_mode == PERSIST_ASYNC:  # (2.12+)
        if cfg.storage != "file":
            raise invalid("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise invalid("async persist mode is not supported with atomic batch publish")
    if cfg.mirror is not None:
        if cfg.first_seq:
            raise errors.mirror_with_first_seq()
        if cfg.subjects:
            raise errors.mirror_with_subjects()
        if cfg.sources:
            raise errors.mirror_with_sources()
        if cfg.allow_msg_counter:
            raise errors.mirror_with_counters()
        if cfg.allow_msg_schedules:
            raise errors.mirror_with_msg_schedules()
        if cfg.allow_atomic:
            raise errors.mirror_with_atomic_publish()
        if cfg.allow_batched:
            raise errors.mirror_with_batch_publish()
        if cfg.subject_delete_marker_ttl > 0:
            # A marker would use a sequence the origin does not have.
            raise invalid("subject delete markers forbidden on mirrors")
        cfg.mirror = decode_source(cfg.mirror)
        _check_source_transforms(cfg.mirror, True)
        if "external" not in cfg.mirror and not _valid_asset_name(cfg.mirror["name"]):
            raise errors.mirror_invalid_stream_name()
        if cfg.mirror["name"] == cfg.name and "external" not in cfg.mirror:
            raise invalid("detected cycle")
        # nats-server 2.10+ checks a stream of this account with the origin's name when the
        # origin is not external (2.9: external or not).
        origin = streams.get(cfg.mirror["name"]) if "external" not in cfg.mirror else None
        if origin is not None:
            if 0 < cfg.max_msg_size < origin.cfg.max_msg_size:
                raise errors.mirror_max_message_size_too_big()
            # nats-server: a mirror inherits direct gets from the stream it mirrors.
            cfg.mirror_direct = origin.cfg.allow_direct
    if cfg.sources and cfg.allow_msg_schedules:
        raise errors.source_with_msg_schedules()
    if cfg.sources:
        cfg.sources = [decode_source(src) for src in cfg.sources]
        for src in cfg.sources:
            if not _valid_asset_name(src["name"]):
                raise errors.source_invalid_stream_name()
            _check_source_transforms(src, False)
        _check_same_origin(cfg.sources)
        for src in cfg.sources:
            if src["name"] == cfg.name and "external" not in src:
                raise invalid("detected cycle")
            origin = streams.get(src["name"])
            if origin is not None:
                if 0 < cfg.max_msg_size < origin.cfg.max_msg_size:
                    raise errors.source_max_message_size_too_big()
    check_external(cfg, streams)
    if cfg.storage == "any":
        raise invalid("storage type 'any' can not be used for a stream")
    if not cfg.subjects and cfg.mirror is None and not cfg.sources:
        cfg.subjects = [cfg.name]
    elif not cfg.subjects:
        cfg.subjects = []
    else:
        # checkStreamCfg's loop (2.10+): form, duplicates, everything (no-ack only), the
        # JetStream and system API spaces, then the later subjects it overlaps.
        seen: set = set()
        for i, subj in enumerate(cfg.subjects):
            if not is_valid_subject(subj):
                raise invalid("invalid subject")
            if subj in seen:
                raise invalid("duplicate subjects detected")
            if subj == ">" and not cfg.no_ack:
                raise invalid("capturing all subjects requires no-ack to be true")
            if not cfg.no_ack:
                if any(subjects_collide(subj, space) for space in _API_SPACES) \
                        and not is_subset_match(subj, "$JS.EVENT.>"):
                    raise invalid("subjects that overlap with jetstream api require no-ack to be true")
                if subjects_collide(subj, "$SYS.>") and not is_subset_match(subj, "$SYS.ACCOUNT.>"):
                    raise invalid("subjects that overlap with system api require no-ack to be true")
            for other in cfg.subjects[i + 1:]:
                if subjects_collide(other, subj):
                    raise invalid(f"subject {go_quote(subj)} overlaps with {go_quote(other)}")
            seen.add(subj)
    if limits:  # jetstream.go maxBytesLimits: the account's rules for max_bytes
        limit = limits.get("memory_max_stream_bytes" if cfg.storage == "memory" else "storage_max_stream_bytes", -1)
        if limits.get("max_bytes_required") and cfg.max_bytes <= 0:
            raise errors.stream_max_bytes_required()
        if limit > 0 and cfg.max_bytes > limit:
            raise errors.stream_max_stream_bytes_exceeded()
    if cfg.subject_transform is not None:  # (2.10+: after the subjects, before republish)
        src, dest = cfg.subject_transform["src"], cfg.subject_transform["dest"]
        if src and not is_valid_subject(src):
            raise errors.stream_transform_invalid_source(f"{errors.BAD_SUBJECT} {src}")
        try:
            validate_mapping(src, dest)
        except MappingError as exc:
            raise errors.stream_transform_invalid_destination(str(exc)) from None
    if cfg.republish is not None:
        cfg.republish = check_republish(cfg.republish, cfg.subjects, cfg.subject_transform)
    _check_source_filters(cfg)
    if cfg.placement and cfg.placement.get("preferred"):  # (2.12+: not for a stream)
        raise invalid("preferred server not permitted in placement")
    return cfg


def _check_source_transforms(spec: dict, mirror: bool) -> None:
    """checkStreamCfg on a mirror's or source's subject_transforms (2.10+), in its order and
    with its errors: not with a filter_subject; each source a valid subject and each mapping
    valid (2.10's rules); no two sources overlapping (a mirror's: colliding)."""
    transforms = spec.get("subject_transforms") or ()
    if not transforms:
        return
    if spec.get("filter_subject"):
        raise errors.mirror_multiple_filters() if mirror else errors.source_multiple_filters()

    def check(tr: dict) -> None:
        src = tr["src"]
        if src and not is_valid_subject(src):
            text = f"{errors.BAD_SUBJECT} {src}"
            raise errors.mirror_invalid_filter(text) if mirror else errors.source_invalid_filter(text)
        try:
            validate_mapping(src, tr["dest"])
        except MappingError as exc:
            raise (errors.mirror_invalid_transform(str(exc)) if mirror
                   else errors.source_invalid_transform(str(exc))) from None

    if mirror:  # each one checked, then compared with the others
        for outer, tr in enumerate(transforms):
            check(tr)
            if any(inner != outer and subjects_collide(tr["src"], other["src"])
                   for inner, other in enumerate(transforms)):
                raise errors.mirror_overlapping_filters()
    else:  # all checked, then compared
        for tr in transforms:
            check(tr)
        for outer, tr in enumerate(transforms):
            if any(inner != outer and is_subset_match(tr["src"], other["src"])
                   for inner, other in enumerate(transforms)):
                raise errors.source_overlapping_filters()


def _check_same_origin(sources: list) -> None:
    """Sources of one origin: nats-server 2.10+ tells them apart by their filters and
    transforms (composeIName), refusing the same one twice (10140)."""
    seen: set = set()
    for src in sources:
        key = source_key(src)
        if key in seen:
            raise errors.source_duplicate()
        seen.add(key)


def _check_source_filters(cfg: StreamConfig) -> None:
    """nats-server 2.15.1's addStream: a mirror's or source's filter is checked for its form
    only (10049, its texts); one that overlaps none of the origin's subjects is taken."""
    if cfg.mirror is not None:
        filter = cfg.mirror.get("filter_subject", "")
        if filter and not is_valid_subject(filter):
            raise errors.stream_create(f"subject filter '{filter}' for the mirror {errors.BAD_SUBJECT}")
    for src in cfg.sources or ():
        filter = src.get("filter_subject", "")
        if filter and not is_valid_subject(filter):
            raise errors.stream_create(f"subject filter '{filter}' for the source: {errors.BAD_SUBJECT}")


def decode_source(value, where: str = "mirror") -> dict:
    """A StreamSource (mirror or one of the sources) in Go's field order and omitempty rules:
    name, opt_start_seq, opt_start_time, filter_subject, subject_transforms (2.10+), external
    {api, deliver}. ``where``: its place in the request, for Go's decoding errors."""
    if value is None:
        raise DecodeError("source: null")
    try:
        raw = decode_struct(value, _SOURCE_FIELDS, {})
    except _WrongTransforms as exc:
        raise GoDecodeError(str(exc).replace("{where}", where)) from None
    out: dict = {"name": raw.get("name", "")}
    if raw.get("opt_start_seq"):
        out["opt_start_seq"] = raw["opt_start_seq"]
    if raw.get("opt_start_time") is not None:
        out["opt_start_time"] = raw["opt_start_time"]
    if raw.get("filter_subject"):
        out["filter_subject"] = raw["filter_subject"]
    if raw.get("subject_transforms"):
        out["subject_transforms"] = raw["subject_transforms"]
    if raw.get("external") is not None:
        ext = decode_struct(raw["external"], {"api": decode_str, "deliver": decode_str}, {})
        out["external"] = {"api": ext.get("api", ""), "deliver": ext.get("deliver", "")}
    return out


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def _source_time(value):
    """Go's time.Time from JSON (RFC 3339) and back (RFC3339Nano: the fraction to at most 9
    digits without trailing zeros, the zone as given)."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise DecodeError(f"opt_start_time: not an RFC 3339 time: {value!r}")
    main, frac, zone = match.groups()
    frac = (frac or "")[:9].rstrip("0")
    return main + ("." + frac if frac else "") + zone


_SOURCE_FIELDS = {
    "name": decode_str,
    "opt_start_seq": lambda v: decode_int(v, UINT64),
    "opt_start_time": _source_time,
    "filter_subject": decode_str,
    "subject_transforms": _subject_transforms,
    "external": decode_object,
}


# jetstream.go isValidAssetName: what a mirror's or source's origin name and a consumer's name
# may not contain (2.10+)
ASSET_NAME_FORBIDDEN = " \t\r\n\f.*>\\/"


def _valid_asset_name(name: str) -> bool:
    return bool(name) and not any(c in name for c in ASSET_NAME_FORBIDDEN)


def check_pedantic(cfg: StreamConfig) -> None:
    """2.11+'s pedantic mode (a request's "pedantic": true): what checkStreamCfg refuses rather
    than change, in its order; natserver checks the request alone, when it is decoded (not a
    mirror's direct gets against its origin's, nor the server's duplicate window limit)."""
    invalid = errors.stream_invalid_config
    for key in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        if getattr(cfg, key) < -1:
            raise errors.pedantic(f"{key} must be set to -1")
    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources \
            and 0 < cfg.max_age < DEFAULT_DUPLICATE_WINDOW:
        raise errors.pedantic("duplicate window cannot be bigger than max age")
    if cfg.subject_delete_marker_ttl >= MIN_MARKER_TTL_NS:
        if not cfg.allow_msg_ttl:
            raise invalid("subject delete marker cannot be set if message TTLs are disabled")
        if not cfg.allow_rollup_hdrs:
            raise invalid("subject delete marker cannot be set if roll-ups are disabled")
    if cfg.allow_msg_schedules and cfg.discard != "new" and not cfg.allow_rollup_hdrs:
        raise invalid("message scheduling cannot be set if roll-ups are disabled")
    if cfg.republish is not None:
        republish = _republish(cfg.republish)
        if not republish["src"]:
            raise errors.pedantic("republish source can not be empty")
        transform = cfg.subject_transform
        if republish["src"] == republish["dest"] == ">" and transform is not None and len(cfg.subjects or ()) == 1 \
                and transform["src"] == (cfg.subjects or [""])[0]:
            raise errors.pedantic("implicit republish based on subject transform")


def check_republish(value: dict, subjects: list, transform: dict | None = None) -> dict:
    """nats-server 2.15.1's republish checks, its messages (all 10052): a destination that
    forms a cycle with the stream's subjects, a mapping that is not valid (an empty
    destination is none: nothing is republished); the source need not be one of the
    subjects (2.9 refused that). And 2.10's implicit republish: from ``>`` to ``>`` on a
    stream whose one subject is its subject transform's source republishes what the
    transform stores (its destination)."""
    invalid = errors.stream_invalid_config
    raw = _republish(value)
    src = raw["src"] or ">"
    dest = raw["dest"]
    implicit = (src == dest == ">" and transform is not None and len(subjects) == 1
                and transform["src"] == subjects[0])
    if implicit and transform is not None:
        src = dest = transform["dest"]
    if any(subjects_collide(dest, subj) for subj in subjects):
        raise invalid("stream configuration for republish destination forms a cycle")
    if dest:
        try:
            SubjectTransform(src, dest)
        except ValueError:
            raise invalid(f"stream configuration for republish with transform from '{src}' to '{dest}' not valid") from None
    out = {"src": src, "dest": dest}
    if raw.get("headers_only"):
        out["headers_only"] = True
    return out


def check_update(old: StreamConfig, new: StreamConfig, streams: dict, limits: dict | None = None) -> StreamConfig:
    """nats-server's configUpdateCheck: what an update may not change."""
    cfg = check_stream_config(new, streams, limits)
    invalid = errors.stream_invalid_config
    if cfg.name != old.name:
        raise invalid("stream configuration name must match original")
    # nats-server 2.12+: removing the mirror promotes the mirror to a normal stream; any
    # other change to it is refused.
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise errors.mirror_not_updatable()
    # (2.10+: max_consumers may change, and retention between limits and interest: 2.9's
    # "can not change MaxConsumers" and "can not change retention policy" are gone)
    if cfg.storage != old.storage:
        raise invalid("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
        raise invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.template_owner:
        raise invalid("stream configuration update not allowed on template owned stream")
    if cfg.template_owner:
        raise invalid("stream configuration update can not be owned by a template")
    if not cfg.sealed and old.sealed:
        raise invalid("stream configuration update can not unseal a sealed stream")
    if not cfg.deny_delete and old.deny_delete:
        raise invalid("stream configuration update can not cancel deny message deletes")
    if not cfg.deny_purge and old.deny_purge:
        raise invalid("stream configuration update can not cancel deny purge")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise invalid("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise invalid("message schedules can not be disabled")
    if cfg.persist_mode != old.persist_mode:
        raise invalid("stream configuration update can not change persist mode")
    if cfg.num_replicas != old.num_replicas and cfg.num_replicas > 1:
        raise errors.replicas_not_supported()
    if cfg.sealed:
        cfg.max_age = 0
        cfg.discard = "new"
        cfg.deny_delete = cfg.deny_purge = True
        cfg.allow_rollup_hdrs = False
    return cfg


# -- a stream --------------------------------------------------------------------------------

_NATS_MSG_ID = b"Nats-Msg-Id"
_EXPECTED = b"Nats-Expected-"  # the start of every Expected header's name
_EXPECTED_STREAM = b"Nats-Expected-Stream"
_EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
_EXPECTED_LAST_SUBJ_SEQ = b"Nats-Expected-Last-Subject-Sequence"
_EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
# 2.10+: the subject (or filter) whose last sequence Nats-Expected-Last-Subject-Sequence names,
# instead of the message's own subject.
_EXPECTED_LAST_SUBJ_SEQ_SUBJ = b"Nats-Expected-Last-Subject-Sequence-Subject"
_ROLLUP = b"Nats-Rollup"
_REQUEST_INFO = b"Nats-Request-Info"
_SCHEDULE_HEADERS = b"Nats-Schedule"  # in every schedule header's name (schedule.py)


def stored_bytes(streams: Iterable[Stream]) -> tuple[int, int]:
    """The bytes ``streams`` hold in memory and in files (an account's usage, as nats-server's
    jsAccount.storageTotals sums it)."""
    memory = storage = 0
    for stream in streams:
        if stream.store.kind == "memory":
            memory += stream.store.bytes
        else:
            storage += stream.store.bytes
    return memory, storage


class Stream:
    """One stream: its configuration, its store, its internal subscriptions and the state
    the publish path needs (last message id, the deduplication window)."""

    def _removed(self, seq: int, subject: bytes) -> None:
        """A message left the store on its own (deleted, over a limit, too old): a consumer
        that was waiting for its ack takes it as acknowledged (consumer.go decStreamPending)."""
        if not self.consumers:
            return
        now = clock.now_ns()
        for consumer in self.consumers.values():
            consumer.stream_removed(seq, subject)
            entry = consumer.pending.get(seq)
            if entry is not None:
                consumer.ack(seq, entry[0], now)

    def __init__(self, engine: StreamHost, cfg: StreamConfig, store, created: int) -> None:
        self.engine = engine
        self.cfg = cfg
        self.name = cfg.name
        self.store = store
        self.created = created
        # A traced message being processed (process_traced): its js event, whether trace-only.
        self._trace: tuple[dict, bool] | None = None
        self.file_backed = store.kind == "file"
        # Publish acks go out at once (memory, persist_mode async: nats-server's AsyncFlush)
        # rather than after the write (engine.respond); persist_mode can not be updated.
        self.ack_at_once = not self.file_backed or cfg.persist_mode == PERSIST_ASYNC
        self.subs: list = []
        self.consumers: dict = {}  # name -> consumer.Consumer
        # In a cluster with num_replicas > 1 (set by the engine): the group's leader alone
        # subscribes to the subjects, and ``replica`` (replica.py) stores what is committed.
        self.replicated = False
        self.replica: StreamGroup | None = None
        store.on_remove = self._removed
        store.removal_listeners = self.consumers  # (_removed tells only them)
        self.set_markers()
        self.lmsgid = b""  # Nats-Msg-Id of the last stored message
        self.ddmap: dict[bytes, tuple[int, int]] = {}  # msg id -> (seq, ts)
        self.ddq: collections.deque = collections.deque()  # (msg id, ts) in arrival order
        self.counter_totals = counter.Totals()  # allow_msg_counter's last totals
        self.batches = batch.Batches(self)  # allow_atomic's batches in flight
        self._batch_items: list | None = None  # a replicated stream's batch being collected (store_batch)
        self.fast_batches: dict = {}  # 2.14+: batch id -> fastbatch.FastBatch (allow_batched)
        self.answer_sink: list | None = None  # (_answer)
        prefix = dumps({"stream": self.name})
        domain = getattr(engine, "domain", "")
        if domain:  # nats-server 2.15.1's template with a domain: {"stream":%q,"domain":%q,"seq":
            prefix = prefix[:-1] + b',"domain":' + dumps(domain) + b"}"
        self._ack_prefix = prefix[:-1] + b',"seq":'  # nats-server's pubAck template (2.10+: no spaces)
        self._name_b = self.name.encode()
        self.followed = False  # a mirror or a source reads this stream (sourcing.py)
        self.links: list = []  # this stream's own mirror/sources (sourcing.SourceLink)
        self.transform: SubjectTransform | None = None  # republish's (set_transforms)
        self.input_transform: SubjectTransform | None = None  # subject_transform's (2.10+)
        self.set_transforms()
        self.scheduler: schedule.Scheduler | None = None  # allow_msg_schedules' (schedule.py)
        self.set_scheduler()
        recovered = getattr(store, "recovered_ids", None)
        if recovered:
            for msg_id, seq, ts in recovered:
                self._store_msg_id(msg_id, seq, ts)
            if recovered[-1][1] == store.last_seq:
                self.lmsgid = recovered[-1][0]

    def public_consumers(self) -> int:
        """Consumers but the direct ones (a mirror or source's, elsewhere): nats-server neither
        counts nor lists those (numPublicConsumers)."""
        return sum(1 for c in self.consumers.values() if not c.cfg.direct)

    def set_scheduler(self) -> None:
        """With allow_msg_schedules: the schedules, at start from the stored messages."""
        if not self.cfg.allow_msg_schedules or self.scheduler is not None:
            return
        scheduler = self.scheduler = schedule.Scheduler()
        store = self.store
        recovered = getattr(store, "recovered_schedules", None)
        if recovered:
            # Replayed in order as when they were stored (a schedule's first time counted from
            # its own timestamp, the last fired message's next time): what came due while the
            # server was down is due now, and fires once.
            for seq, ts, subject, hdr in recovered:
                scheduler.stored(seq, subject, hdr, ts, ts)  # (the floor: 250 ms after ts)
            for subject, (seq, *_) in list(scheduler.schedules.items()):
                if store.last_seq_for(subject) != seq:  # a later message without headers
                    scheduler.remove_subject(subject)
            store.recovered_schedules = None

    def fire_schedules(self, now: int) -> int | None:
        """Store what the schedules due at ``now`` fire (at most FIRE_BATCH of them): returns
        when to come back (ns; ``now``: more are due; None: no schedule)."""
        scheduler = self.scheduler
        if scheduler is None or self.store.closed:
            return None
        if self.replica is not None and not self.replica.leading:
            return None  # (a replicated stream's leader fires, through its group; see replica.py)
        fired, more = scheduler.due(now, self.store, schedule.FIRE_BATCH)
        for target, hdr, data in fired:
            self.process_msg(target, None, hdr, data, scheduled=True)
        return now if more else scheduler.next_due()

    def set_markers(self) -> None:
        """With subject_delete_marker_ttl, the store hands the last message of a subject
        that expires to :meth:`_delete_marker`."""
        self.store.on_last_expired = self._delete_marker if self.cfg.subject_delete_marker_ttl > 0 else None

    def _delete_marker(self, seq: int, subject: bytes) -> None:
        """max_age or a TTL removes the last message of ``subject``: as nats-server, the
        stream stores a marker in its place (Nats-Marker-Reason: MaxAge, the marker's TTL and
        a subject roll-up that removes the expired message), as a published message without
        a reply: limits, republish, consumers and followers see it."""
        self.process_msg(subject, None, marker_header(self.cfg.subject_delete_marker_ttl), b"")

    def set_transforms(self) -> None:
        """From the (checked) configuration: republish's and subject_transform's."""
        rp = self.cfg.republish
        # (an empty destination: no transform, nothing republished, as nats-server's)
        self.transform = SubjectTransform(rp["src"], rp["dest"]) if rp and rp["dest"] else None
        st = self.cfg.subject_transform
        self.input_transform = validate_mapping(st["src"], st["dest"]) if st else None

    # -- subscriptions ------------------------------------------------------------------------

    def subscribe(self) -> None:
        if self.replicated and (self.replica is None or not self.replica.leading):
            return  # (a replicated stream's follower: the leader takes the publishes)
        for subject in self.cfg.subjects or ():  # (a checked config has a list: maybe empty)
            sub = self.engine.subscribe(subject, self.inbound)
            sub.callback_run = self.inbound_run
            self.subs.append(sub)

    def inbound(self, subject: bytes, reply: bytes | None, hdr: bytes | None, msg: bytes) -> None:
        """A message published on one of the stream's subjects: a fast batch's (its reply
        ends in ``.$FI``, fastbatch.py) or a plain one (process_msg)."""
        if reply and reply.endswith(fastbatch.SUFFIX):
            fastbatch.publish(self, subject, reply, hdr, msg)
            return
        cfg = self.cfg
        if not hdr and self.input_transform is None and not cfg.sealed and not cfg.allow_msg_counter \
                and not 0 <= cfg.max_msg_size < len(msg) and not self.engine.over_limit(self.store.kind):
            # A message without headers on a plain stream: of process_msg's checks only the
            # size and the account's limits apply (a refusal: process_msg answers it). Here,
            # not in process_msg: one call less a publish.
            self.store_checked(subject, reply, b"", msg, clock.now_ns(), None, b"", b"", None)
        else:
            self.process_msg(subject, reply, hdr, msg)

    def inbound_run(self, pubs: list, size: int) -> None:
        """A run of messages without headers on the stream's subjects (``(subject, reply,
        payload)`` in order; ``size``: their subjects' and payloads' bytes), a publisher's
        window (Client._callback_pubs): each stored and acknowledged as inbound and
        store_checked would, with their checks made once a run (the clock read once, the
        account's limits asked once for the whole run: engine.room). Anything those checks
        do not cover (a transform, a sealed or counter stream, interest retention without
        consumers, republish, schedules, a replicated stream, limits near) and, from the
        first message on, a fast batch's or one over max_msg_size: inbound, one by one."""
        cfg = self.cfg
        store = self.store
        engine = self.engine
        n = len(pubs)
        if self.input_transform is not None or cfg.sealed or cfg.allow_msg_counter or self.replica is not None \
                or self._trace is not None or self.answer_sink is not None or self.transform is not None \
                or self.scheduler is not None or (cfg.retention == "interest" and not self.consumers) \
                or not engine.room(store.kind, size + n * RUN_MSG_OVERHEAD):
            return self._inbound_each(pubs, 0)
        now = clock.now_ns()
        max_size = cfg.max_msg_size
        max_age = cfg.max_age
        store_msg = store.store_msg
        prefix = self._ack_prefix
        acked = not cfg.no_ack
        acks = engine.ack_queue(self)  # (None: each answered at once, by respond)
        i = 0
        for subject, reply, msg in pubs:
            if reply and reply.endswith(fastbatch.SUFFIX) or 0 <= max_size < len(msg):
                return self._inbound_each(pubs, i)  # (inbound answers, or hands it on)
            i += 1
            try:
                empty = max_age > 0 and not store.msgs
                try:
                    seq = store_msg(subject, b"", msg, now)
                except StoreWriteError:
                    continue  # (logged by the store; no answer: see store_checked)
                except StoreError as exc:
                    self.reject(reply, errors.stream_store_failed(str(exc)))
                    continue
                if empty:
                    engine.schedule_expiry(now + max_age)
                self.lmsgid = b""
                if reply and acked:
                    if acks is None:
                        engine.respond(reply, b"%s%d}" % (prefix, seq), self)
                    else:
                        acks.append((reply, b"%s%d}" % (prefix, seq), None, self))
                if self.consumers:
                    self._stored(seq, subject)
                if self.followed:
                    engine.sourcing.wake()
            except Exception:  # (as the core's per-message call: logged, the next one goes on)
                log.exception("JetStream: a publish on %r failed", subject)
        if acks is not None:
            engine.acks_queued()  # (wakes the flusher if anything is queued)

    def _inbound_each(self, pubs: list, i: int) -> None:
        """inbound_run's messages from ``pubs[i]`` on, one by one."""
        for subject, reply, msg in pubs[i:] if i else pubs:
            try:
                self.inbound(subject, reply, None, msg)
            except Exception:
                log.exception("JetStream: a publish on %r failed", subject)

    def unsubscribe(self) -> None:
        for pair in self.subs:
            self.engine.unsubscribe(pair)
        self.subs = []

    # -- deduplication ------------------------------------------------------------------------

    def _store_msg_id(self, msg_id: bytes, seq: int, ts: int) -> None:
        self.ddmap[msg_id] = (seq, ts)
        self.ddq.append((msg_id, ts))

    def _check_msg_id(self, msg_id: bytes, now: int) -> tuple[int, int] | None:
        window = self.cfg.duplicate_window
        ddq = self.ddq
        if ddq:
            horizon = now - window
            ddmap = self.ddmap
            while ddq and ddq[0][1] <= horizon:
                old_id, ts = ddq.popleft()
                entry = ddmap.get(old_id)
                if entry is not None and entry[1] == ts:
                    del ddmap[old_id]
        return self.ddmap.get(msg_id)

    # -- publishing ---------------------------------------------------------------------------

    def _answer(self, reply: bytes, payload: bytes) -> None:
        """A publish's response: to the publisher (after the write, engine.respond), or to
        ``answer_sink`` while fastbatch.py stores a batch's message through process_msg (also
        with no_ack: a batch reports refusals then too)."""
        sink = self.answer_sink
        if sink is not None:
            sink.append(payload)
        else:
            self.engine.respond(reply, payload, self)

    def reject(self, reply, error: ApiError, trace_error: str | None = None) -> None:
        """Answer a publish with ``error`` (nats-server's PubAck with "error", seq 0). A traced
        message's event gets the error processJetStreamMsg returns: an API error's
        ``<description> (<err_code>)`` (Go's ApiError.Error), or ``trace_error``, its own words
        where it has them."""
        if self._trace is not None:
            self._trace[0]["error"] = trace_error or f"{error.description} ({error.err_code})"
        if reply and (not self.cfg.no_ack or self.answer_sink is not None):
            self._answer(reply, dumps({"error": error.to_json(), "stream": self.name, "seq": 0}))

    def process_traced(self, subject: bytes, reply: bytes | None, hdr: bytes | None, msg: bytes, event: dict,
                       trace_only: bool) -> None:
        """A traced message (server/msgtrace.py): processed as any, its ``js`` event told the
        subject it is stored under, whether nobody is interested (interest retention), why it
        was refused (stream.go processJetStreamMsg's error); ``trace_only``: checked, answered
        if refused, not stored."""
        self._trace = (event, trace_only)
        try:
            self.process_msg(subject, reply, hdr, msg)
        finally:
            self._trace = None

    def _traced_store(self, subject: bytes) -> bool:
        """A traced message passed every check: its event completed; True when it is only
        traced (not stored, not acknowledged)."""
        assert self._trace is not None
        event, trace_only = self._trace
        event["ts"] = rfc3339nano(clock.now_ns())  # (stream.go updateJetStreamEvent: a better time)
        event["subject"] = subject.decode(errors="replace")
        if self.cfg.retention == "interest" and not self.consumers:
            event["nointerest"] = True
        return trace_only

    def process_msg(self, subject: bytes, reply: bytes | None, hdr: bytes | None, msg: bytes,
                    scheduled: bool = False) -> None:
        """A message on one of the stream's subjects (called synchronously by the server);
        ``scheduled``: one a schedule fired (schedule.py), its headers the server's own."""
        cfg = self.cfg
        if hdr and not scheduled and batch.BATCH_ID in hdr:
            batch_id = get_header(batch.BATCH_ID, hdr)
            if batch_id:  # an atomic batch's message (batch.py): staged, or the commit
                self.batches.process(batch_id, subject, reply, hdr, msg)
                return
        if cfg.allow_msg_counter and hdr and not scheduled and self.input_transform is None \
                and self._trace is None and not cfg.sealed and self.replica is None:
            # The usual increment (counter.simple_increment: a header of Nats-Incr alone, no
            # payload): none of the checks below can refuse it but the limits'.
            counted = counter.simple_increment(self.store, self.counter_totals, subject, hdr, msg)
            if counted is not None:
                body, digits = counted
                # (refused by a limit: the general path below answers; the total Totals kept for
                # the sequence the message did not get is stale, and not used)
                if not (0 <= cfg.max_msg_size < len(hdr) + len(body) or len(hdr) + len(body) > self.max_payload()
                        or self.engine.over_limit(self.store.kind)):
                    self.store_checked(subject, reply, hdr, body, clock.now_ns(), None, b"", b"", digits)
                    return
        if self.input_transform is not None:  # (stream.go: before anything else)
            subject = self.input_transform.apply_bytes(subject) or subject
        if cfg.sealed:
            if reply:
                self._answer(reply, dumps({"error": errors.stream_sealed().to_json(), "stream": self.name, "seq": 0}))
            return
        now = clock.now_ns()
        store = self.store
        msg_id = b""
        rollup = b""
        incr = None  # a counter's increment (Nats-Incr)
        if hdr:
            if _REQUEST_INFO in hdr:
                hdr = remove_header(hdr, _REQUEST_INFO) or None
        if hdr:
            if counter.INCR in hdr:
                try:
                    incr = counter.check_publish(cfg.allow_msg_counter, hdr, msg)
                except ApiError as exc:
                    self.reject(reply, exc)
                    return
            # Each check looks for its header's name first (a C search of the header block):
            # most messages have none of them, and get_header is a Python call.
            any_expected = _EXPECTED in hdr
            expected = get_header(_EXPECTED_STREAM, hdr) if any_expected else b""
            if expected and expected != self._name_b:
                self.reject(reply, errors.stream_not_match(), "expected stream does not match")
                return
            if MSG_TTL in hdr and not cfg.allow_msg_ttl and header_ttl(hdr):
                # stream.go processJetStreamMsg: a TTL (a valid one: an invalid one is
                # answered as such below) on a stream that does not allow them.
                self.reject(reply, errors.message_ttl_disabled(), "message TTL disabled")
                return
            if _SCHEDULE_HEADERS in hdr and not scheduled:
                try:
                    hdr = schedule.check_publish(cfg.allow_msg_schedules, cfg.allow_msg_ttl, cfg.subjects or [],
                                                 subject, hdr, self._last_msg, now)
                except ApiError as exc:
                    self.reject(reply, exc)
                    return
            if counter.SOURCE_HEADER in hdr and get_header(counter.SOURCE_HEADER, hdr):
                # 2.15+: a published message may not pose as a sourced one (stream.go).
                self.reject(reply, errors.message_source_hdr_not_allowed())
                return
            value = get_header(_EXPECTED_LAST_SUBJ_SEQ, hdr) if any_expected else b""
            if value:
                last = store.last_seq_for(get_header(_EXPECTED_LAST_SUBJ_SEQ_SUBJ, hdr) or subject)
                if parse_uint(value) != last:
                    self.reject(reply, errors.stream_wrong_last_sequence(last),
                                 f"last sequence by subject mismatch: {parse_uint(value)} vs {last}")
                    return
            elif any_expected and get_header(_EXPECTED_LAST_SUBJ_SEQ_SUBJ, hdr):
                self.reject(reply, errors.expected_last_seq_per_subject_invalid())
                return
            value = get_header(_EXPECTED_LAST_SEQ, hdr) if any_expected else b""
            # (a replicated stream's leader: the proposals in flight count, as clseq does)
            last_seq = store.last_seq if self.replica is None else self.replica.proposed_last()
            if value and parse_uint(value) != last_seq:
                self.reject(reply, errors.stream_wrong_last_sequence(last_seq),
                             f"last sequence mismatch: {parse_uint(value)} vs {last_seq}")
                return
            # (2.10+: after the expected sequences, before the expected last id)
            msg_id = get_header(_NATS_MSG_ID, hdr) if _NATS_MSG_ID in hdr else b""
            if msg_id:
                dup = self._check_msg_id(msg_id, now)
                if dup is not None:
                    if self._trace is not None:
                        self._trace[0]["error"] = "msgid is duplicate"  # stream.go errMsgIdDuplicate
                    if reply and (not cfg.no_ack or self.answer_sink is not None):
                        self._answer(reply, b"%s%d,\"duplicate\": true}" % (self._ack_prefix, dup[0]))
                    return
            value = get_header(_EXPECTED_LAST_MSG_ID, hdr) if any_expected else b""
            if value and value != self.lmsgid:
                self.reject(reply, errors.stream_wrong_last_msg_id(self.lmsgid.decode("utf-8", "replace")),
                             f"last msgid mismatch: {_go_quote(value)} vs {_go_quote(self.lmsgid)}")
                return
            rollup = get_header(_ROLLUP, hdr).lower() if _ROLLUP in hdr else b""
            if rollup:
                if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                    self.reject(reply, errors.stream_rollup_failed("rollup not permitted"))
                    return
                if rollup not in (b"sub", b"all"):  # (2.9 dropped it without a response)
                    shown = go_quote(rollup.decode("utf-8", "replace"))
                    self.reject(reply, errors.stream_rollup_failed(f"rollup value invalid: {shown}"))
                    return
        else:
            hdr = b""
        total = None
        if cfg.allow_msg_counter:
            try:
                hdr, msg, total = self._count(subject, hdr, msg, incr)
            except ApiError as exc:
                self.reject(reply, exc)
                return
        if cfg.max_msg_size >= 0 and len(hdr) + len(msg) > cfg.max_msg_size:
            self.reject(reply, errors.message_exceeds_maximum(), MAX_PAYLOAD_EXCEEDED)
            return
        if len(hdr) > MAX_HEADER_SIZE:
            self.reject(reply, errors.header_exceeds_maximum(), MAX_PAYLOAD_EXCEEDED)
            return
        if self.engine.over_limit(store.kind):
            self.reject(reply, errors.insufficient_resources())
            return
        self.store_checked(subject, reply, hdr, msg, now, None, msg_id, rollup, total)

    def store_checked(self, subject: bytes, reply: bytes | None, hdr: bytes, msg: bytes, now: int,
                      batch_ack: tuple[bytes, int] | None = None, msg_id: bytes | None = None,
                      rollup: bytes | None = None, total: bytes | None = None) -> bool:
        """Store a published message whose checks are done (process_msg's, or an atomic
        batch's: ``msg_id`` and ``rollup`` None are read from ``hdr``, the subject is the
        published one), apply its roll-up and acknowledge it (``batch_ack``: the batch id and
        count of a batch's commit). False: the store refused it."""
        cfg, store = self.cfg, self.store
        if msg_id is None:  # (an atomic batch's message)
            if self.input_transform is not None:
                subject = self.input_transform.apply_bytes(subject) or subject
            if hdr and _REQUEST_INFO in hdr:
                hdr = remove_header(hdr, _REQUEST_INFO) or b""
            msg_id = get_header(_NATS_MSG_ID, hdr)
            rollup = get_header(_ROLLUP, hdr).lower()
        ttl = 0
        if hdr and MSG_TTL in hdr:
            try:
                ttl = parse_ttl(get_header(MSG_TTL, hdr))
            except InvalidTTL:
                self.reject(reply, errors.message_ttl_invalid())
                return False
            marker_ttl = cfg.subject_delete_marker_ttl // 1_000_000_000
            if 0 < ttl < marker_ttl and cfg.max_msgs_per_subject != 1:
                # stream.go: a message lives at least as long as the markers, or a marker
                # already there for its subject could be missed.
                ttl = marker_ttl
                hdr = gen_header(remove_header(hdr, MSG_TTL), MSG_TTL, b"%d" % ttl)
        if self._trace is not None and self._traced_store(subject):
            return True  # (only traced: checked, neither stored nor refused)
        if self.replica is not None:  # a replicated stream: stored once its group commits it
            if self._batch_items is not None:  # (an atomic batch's: proposed together, store_batch)
                self._batch_items.append((subject, (reply if not cfg.no_ack else None) or b"", hdr, msg))
                return True
            return self.replica.propose(subject, reply if not cfg.no_ack else None, hdr, msg, now)
        if cfg.retention == "interest" and not self.consumers:
            # No consumers, so no interest: the sequence is used, nothing is stored.
            seq = store.skip_msg(now)
        else:
            was_empty = not store.msgs
            tlseq = store.last_seq_for(subject) if self.transform is not None else 0
            try:
                seq = store.store_msg(subject, hdr, msg, now, ttl)
            except StoreWriteError:
                # The disk refused the write (logged by the store): nats-server 2.15.1 does
                # not answer (processJetStreamMsg: "We don't want to respond back to the
                # user ... This was likely an IO issue"); the publisher times out and retries.
                return False
            except StoreError as exc:
                self.reject(reply, errors.stream_store_failed(str(exc)))
                return False
            if was_empty and cfg.max_age > 0:
                self.engine.schedule_expiry(now + cfg.max_age)
            if ttl > 0 and cfg.allow_msg_ttl:
                self.engine.schedule_expiry(store.ttls.next_expiry() or now)
            if self.transform is not None:
                self.republish(subject, hdr, msg, seq, tlseq, now)
        self.lmsgid = msg_id
        if msg_id:
            self._store_msg_id(msg_id, seq, now)
        if rollup:  # (most messages have none: no comparisons)
            if rollup == b"sub":
                self.purge_consumers(subject, store.purge_ex(subject, 0, 1))
            elif rollup == b"all":
                self.purge_consumers(b"", store.purge_ex(b"", 0, 1))
        if hdr and _SCHEDULE_HEADERS in hdr:
            self._scheduled(seq, subject, hdr, now)
        elif self.scheduler is not None and subject in self.scheduler.schedules:
            self.scheduler.remove_subject(subject)  # (a message without headers ends it)
        if reply and (not cfg.no_ack or self.answer_sink is not None):
            if batch_ack is not None:  # an atomic batch's commit (2.12+ PubAck.BatchId, BatchSize)
                self._answer(reply, b'%s%d,"batch":%s,"count":%d}' % (
                    self._ack_prefix, seq, dumps(batch_ack[0].decode("utf-8", "replace")), batch_ack[1]))
            elif total is None:
                ack = b"%s%d}" % (self._ack_prefix, seq)
                if self.answer_sink is None:  # (_answer's usual way, without its call)
                    self.engine.respond(reply, ack, self)
                else:
                    self._answer(reply, ack)
            else:  # 2.12+: a counter's total (PubAck.Value)
                self._answer(reply, b'%s%d,"val":"%s"}' % (self._ack_prefix, seq, total))
        if self.consumers:
            self._stored(seq, subject)
        if self.followed:
            self.engine.sourcing.wake()
        return True

    def store_batch(self, batch_id: bytes, items: list, now: int) -> bool:
        """An atomic batch, checked (batch.py): each message through store_checked, the last
        acknowledged with the batch's id and size; on a replicated stream all of them proposed
        together, in one append entry (jetstream_cluster.go's batchMsgOp entries, the last one
        the commit), stored by every replica at the commit or not at all. False: the store
        (or the group) refused."""
        if self.replica is None:
            for subject, reply, hdr, msg, ack in items:
                if not self.store_checked(subject, reply, hdr, msg, now, ack):
                    return False  # the store failed (a full disk): the rest would too
            return True
        collected: list = []
        self._batch_items = collected
        try:
            for subject, reply, hdr, msg, ack in items:
                if not self.store_checked(subject, reply, hdr, msg, now, ack):
                    return False
        finally:
            self._batch_items = None
        return self.replica.propose_batch(batch_id, collected, now)

    def apply_replicated(self, subject: bytes, hdr: bytes, msg: bytes, ts: int) -> int:
        """A message the stream's group committed (replica.py, on every replica, the leader's
        included): stored as store_checked stores a checked publish (TTL, roll-up, the
        deduplication window, consumers), without answering (the leader acknowledges it once
        applied); its sequence. StoreError: refused (the group counts a failed proposal)."""
        cfg, store = self.cfg, self.store
        ttl = 0
        if hdr and MSG_TTL in hdr:
            try:
                ttl = parse_ttl(get_header(MSG_TTL, hdr))
            except InvalidTTL:
                ttl = 0
        if cfg.retention == "interest" and not self.consumers and not (self.replica and self.replica.has_consumers()):
            return store.skip_msg(ts)  # (a follower's copy: the consumers' groups here are its interest)
        was_empty = not store.msgs
        tlseq = store.last_seq_for(subject) if self.transform is not None else 0
        seq = store.store_msg(subject, hdr, msg, ts, ttl)
        if was_empty and cfg.max_age > 0:
            self.engine.schedule_expiry(ts + cfg.max_age)
        if ttl > 0 and cfg.allow_msg_ttl:
            self.engine.schedule_expiry(store.ttls.next_expiry() or ts)
        if self.transform is not None and self.replica is not None and self.replica.leading:
            self.republish(subject, hdr, msg, seq, tlseq, ts)  # (the leader republishes)
        msg_id = get_header(_NATS_MSG_ID, hdr) if hdr and _NATS_MSG_ID in hdr else b""
        self.lmsgid = msg_id
        if msg_id:
            self._store_msg_id(msg_id, seq, ts)
        rollup = get_header(_ROLLUP, hdr).lower() if hdr and _ROLLUP in hdr else b""
        if rollup == b"sub":
            self.purge_consumers(subject, store.purge_ex(subject, 0, 1))
        elif rollup == b"all":
            self.purge_consumers(b"", store.purge_ex(b"", 0, 1))
        if hdr and _SCHEDULE_HEADERS in hdr:  # (every replica keeps the schedules: the proposal's time)
            self._scheduled(seq, subject, hdr, ts)
        elif self.scheduler is not None and subject in self.scheduler.schedules:
            self.scheduler.remove_subject(subject)
        if self.consumers:
            self._stored(seq, subject)
        if self.followed:
            self.engine.sourcing.wake()
        return seq

    # -- what atomic batches use of the stream (batch.BatchStream) ------------------------------

    def transformed(self, subject: bytes) -> bytes:
        """The subject the stream stores a message published on ``subject`` under."""
        if self.input_transform is not None:
            return self.input_transform.apply_bytes(subject) or subject
        return subject

    def is_duplicate(self, msg_id: bytes, now: int) -> bool:
        return self._check_msg_id(msg_id, now) is not None

    def max_payload(self) -> int:
        server = getattr(self.engine, "server", None)
        return server.options.max_payload if server is not None else DEFAULT_MAX_PAYLOAD

    def _last_msg(self, subject: bytes) -> tuple[bytes, bytes] | None:
        sm = self.store.load_last_msg(subject)
        return None if sm is None else (sm.hdr or b"", sm.data)

    def _scheduled(self, seq: int, subject: bytes, hdr: bytes, now: int) -> None:
        """A stored message with schedule headers: the scheduler learns of it, and one saying
        ``Nats-Schedule-Next: purge`` (a schedule's last message, or a client ending one)
        purges the schedule's subject (stream.go processJetStreamMsgWithRollup)."""
        cfg = self.cfg
        scheduler = self.scheduler
        if scheduler is not None and seq in self.store.idx:
            scheduler.stored(seq, subject, hdr, now, now)
            nxt = scheduler.next_due()
            if nxt is not None:
                self.engine.schedule_fire(nxt)
        if cfg.allow_rollup_hdrs and not cfg.deny_purge and \
                schedule.slice_header(schedule.NEXT, hdr) == schedule.NEXT_PURGE:
            scheduler_subject = schedule.slice_header(schedule.SCHEDULER, hdr)
            if scheduler_subject:
                self.purge_consumers(scheduler_subject, self.store.purge_ex(scheduler_subject, 0, 0))
                if scheduler is not None:
                    scheduler.remove_subject(scheduler_subject)

    def _count(self, subject: bytes, hdr: bytes, msg: bytes, incr: counter.Number | None) -> tuple[bytes, bytes, bytes]:
        """A counter stream's message for an increment (counter.py): (header, body, total).
        Raises ApiError: no increment (10169), a broken counter, over max_payload."""
        if incr is None:
            raise errors.message_incr_missing()
        return counter.apply(self.store, self.counter_totals, subject, hdr, msg, incr, self.max_payload())

    def republish(self, subject: bytes, hdr: bytes, msg: bytes, seq: int, tlseq: int, ts: int) -> None:
        """nats-server's republish of a stored message: the mapped subject, the headers
        Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp (2.10+: the stored time),
        Nats-Last-Sequence (the subject's previous sequence) after the message's own, and
        Nats-Msg-Size instead of the data."""
        transform, republish = self.transform, self.cfg.republish
        if transform is None or republish is None:  # (callers checked: set_transforms sets both)
            return
        dest = transform.apply_bytes(subject)
        if dest is None:
            return
        hdr = gen_header(hdr or None, b"Nats-Stream", self._name_b)
        hdr = gen_header(hdr, b"Nats-Subject", subject)
        hdr = gen_header(hdr, b"Nats-Sequence", b"%d" % seq)
        hdr = gen_header(hdr, b"Nats-Time-Stamp", rfc3339nano(ts).encode())
        hdr = gen_header(hdr, b"Nats-Last-Sequence", b"%d" % tlseq)
        if republish.get("headers_only"):
            hdr = gen_header(hdr, b"Nats-Msg-Size", b"%d" % len(msg))
            msg = b""
        self.engine.send(dest, msg, hdr)

    @property
    def runs_links(self) -> bool:
        """Whether this server runs the stream's mirror and sources: a replicated stream's
        leader only (stream.go setLeader starts them, a follower has none running)."""
        return not self.replicated or (self.replica is not None and self.replica.leading)

    def propose_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int, mirror_seq: int = 0) -> bool | None:
        """A replicated stream's leader proposes what its mirror or sources brought in
        (``StreamGroup.propose_sourced``: True proposed, False not the leader any more); None
        for a stream that is not replicated (the caller stores it: store_sourced)."""
        replica = self.replica
        if replica is None:
            return None
        if self.input_transform is not None:
            subject = self.input_transform.apply_bytes(subject) or subject
        if hdr and batch.BATCH_PREFIX in hdr:
            hdr = batch.strip_batch_headers(hdr)
        return replica.propose_sourced(subject, hdr, msg, ts, mirror_seq)

    def store_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int) -> int:
        """Store a message a mirror or source brought in (sourcing.py): no publish checks and
        no ack; limits, republish, consumers and followers as for a published message.
        Raises StoreError when the store refuses it (discard new)."""
        if self.input_transform is not None:  # (nats-server: mirrored and sourced messages too)
            subject = self.input_transform.apply_bytes(subject) or subject
        if hdr and batch.BATCH_PREFIX in hdr:  # (stream.go: batching is the origin's, not ours)
            hdr = batch.strip_batch_headers(hdr)
        store = self.store
        if self.cfg.allow_msg_counter:
            # A counter stream counts what its sources bring (counter.py); one that can not be
            # counted stops the source there, as nats-server's retries at the same message.
            try:
                incr = counter.parse_incr(hdr)
                hdr, msg, _ = self._count(subject, hdr, msg, incr)
            except ApiError as exc:
                raise StoreError(exc.description) from None
        if self.cfg.retention == "interest" and not self.consumers:
            return store.skip_msg(ts)  # no interest: the sequence is used, nothing is kept
        was_empty = not store.msgs
        tlseq = store.last_seq_for(subject) if self.transform is not None else 0
        # A sourced message keeps its TTL (an invalid one counts as none: nats-server would
        # drop the message, leaving a mirror's sequences behind the origin's).
        ttl = header_ttl(hdr)
        seq = store.store_msg(subject, hdr, msg, ts, ttl)
        if was_empty and self.cfg.max_age > 0:
            self.engine.schedule_expiry(store.first_ts + self.cfg.max_age)
        if ttl > 0 and self.cfg.allow_msg_ttl:
            self.engine.schedule_expiry(store.ttls.next_expiry() or ts)
        if hdr and self.cfg.mirror is None:
            msg_id = get_header(_NATS_MSG_ID, hdr)
            self.lmsgid = msg_id
            if msg_id:
                self._store_msg_id(msg_id, seq, ts)
        if self.transform is not None:
            self.republish(subject, hdr, msg, seq, tlseq, ts)
        if self.consumers:
            self._stored(seq, subject)
        if self.followed:
            self.engine.sourcing.wake()
        return seq

    def purge_consumers(self, subject: bytes | None, purged: int) -> None:
        """After a purge that took ``purged`` messages (stream.go purgeLocked): every consumer
        counts its pending messages again (storeUpdates: a batch of removals; not when the
        store reported the one message it took as a removal, store.purge_ex), then those it
        concerns skip what went, forget the pending acks below it and move their ack floor.
        ``subject``: the purge request's filter (None or b"": none, every consumer); with one,
        a consumer whose filters lie within it skips to the subject's first message left,
        one that takes more (no filter, a wider one) only past what the purge took."""
        if not self.consumers:
            return
        store = self.store
        if purged > 1 or purged == 1 and not store.purge_reported:
            for consumer in self.consumers.values():
                consumer.num_pending()
        first, last = store.first_seq, store.last_seq
        if not subject:
            for consumer in self.consumers.values():
                consumer.purged(first, last)
            return
        start = store.filtered_state(first, subject)[1]
        text = subject.decode()
        for consumer in self.consumers.values():
            if consumer.equal_or_subset_match(text):
                consumer.purged(start, last)
            elif consumer.filtered_match(text):
                consumer.purged(first, last, wider=True)

    def _stored(self, seq: int, subject: bytes) -> None:
        """A new message: its consumers count it and deliver what they can."""
        for consumer in self.consumers.values():
            consumer.stream_stored(seq, subject)
        self.engine.delivery.stream_changed(self)

    # -- reports ------------------------------------------------------------------------------

    def state_json(self, details: bool = False, subjects: dict | None = None) -> dict:
        """StreamState in Go's field order (FastState, or State with details)."""
        store = self.store
        out: dict = {
            "messages": store.msgs,
            "bytes": store.bytes,
            "first_seq": store.first_seq,
            "first_ts": rfc3339nano(store.first_ts),
            "last_seq": store.last_seq,
            "last_ts": rfc3339nano(store.last_ts),
        }
        if store.fss:
            out["num_subjects"] = len(store.fss)
        if subjects:
            out["subjects"] = subjects
        if details:
            deleted = store.deleted()
            if deleted:
                out["num_deleted"] = len(deleted)
                out["deleted"] = deleted
        else:
            n = store.num_deleted()
            if n:
                out["num_deleted"] = n
        # (a replicated stream: the cluster's count, its consumers run on several servers)
        out["consumer_count"] = (self.replica.consumer_count() if self.replica is not None else 0) \
            or self.public_consumers()
        return out

    def sourcing_json(self, created: bool = False) -> dict:
        """The stream info's ``mirror`` / ``sources`` (SourceLink.info_json); ``created``:
        for the create answer, which nats-server sends before a link has had an answer from
        its origin (no ``error`` yet, and a mirror without its ``filter_subject``)."""
        if not self.links:
            return {}
        now = clock.now_ns()
        links = [link.info_json(now) for link in self.links]
        if created:
            for info in links:
                info.pop("error", None)
                if self.cfg.mirror is not None:  # (nor a mirror's filter: 2.15.1 sets it up later)
                    info.pop("filter_subject", None)
        if self.cfg.mirror is not None:
            return {"mirror": links[0]}
        return {"sources": links}

    def info_json(self, *, dynamic: bool = True, domain: bool = True, cluster: bool = False,
                  details: bool = False, subjects: dict | None = None, created: bool = False) -> dict:
        """StreamInfo as nats-server 2.15.1 writes it: config (``dynamic``: with the server's
        version and level in its metadata), created, state, domain (when the engine has one),
        cluster (a standalone server: its name as the leader), mirror / sources, ts. Create
        answers without domain and cluster, update and the list without cluster, the list
        without the dynamic metadata (jetstream_api.go); ``created``: see sourcing_json."""
        out = {"config": self.cfg.to_json(dynamic), "created": rfc3339nano(self.created),
               "state": self.state_json(details, subjects)}
        if domain and self.engine.domain:
            out["domain"] = self.engine.domain
        if cluster:
            if self.replica is not None:
                out["cluster"] = self.replica.cluster_json()
            else:
                out["cluster"] = self.engine.cluster_block or {"leader": self.engine.server.server_name}
        out.update(self.sourcing_json(created))
        out["ts"] = rfc3339nano(clock.now_ns())
        return out
