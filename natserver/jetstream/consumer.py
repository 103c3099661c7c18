"""JetStream consumers: configuration (nats-server v2.9.10's ConsumerConfig with its JSON
field order, defaults from setConsumerConfigDefaults and validation from checkConsumerCfg),
the update rules for an existing consumer, and the consumer's state as consumer info shows it.

Sans-IO: nothing here sends or sleeps; times are passed in as nanoseconds.
"""

from __future__ import annotations

import datetime
import logging
import re
import secrets
import string

from .. import clock
from ..protocol.gotext import go_duration
from . import errors, gotime
from .gojson import (
    INT64,
    UINT64,
    DecodeError,
    GoDecodeError,
    decode_bool,
    decode_enum,
    decode_int,
    decode_metadata,
    decode_str,
    decode_strlist,
    decode_struct,
)
from .stream import ASSET_NAME_FORBIDDEN, MAX_DESCRIPTION_LEN, MAX_METADATA_LEN
from .util import compile_filters, dumps, is_subset_match, is_valid_subject, rfc3339nano, subjects_collide
from .versioning import metadata_json, set_static_consumer_metadata

DEFAULT_ACK_WAIT = 30_000_000_000  # ns; nats-server's JsAckWaitDefault (30s)
DEFAULT_MAX_ACK_PENDING = 1000  # nats-server's JsDefaultMaxAckPending
# How many sequences above the last ack floor _update_floor tries, one by one, before it takes
# min() of every pending sequence (acks in order find the next floor in a step or two).
FLOOR_SCAN = 64
DEFAULT_MAX_WAITING = 512  # nats-server's JSWaitQueueDefaultMax (pull consumers)
DEFAULT_INACTIVE_THRESHOLD = 5_000_000_000  # ns; nats-server's JsDeleteWaitTimeDefault (5s), ephemerals
DEFAULT_PRIORITY_TIMEOUT = 120_000_000_000  # ns; nats-server's JsDefaultPinnedTTL (2m), pinned_client
# consumer.go validGroupName: a priority group's name
GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")
# consumer.go PriorityPolicy's JSON names ("prioritized": 2.12)
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")
EPHEMERAL_NAME_LEN = 8  # nats-server's createConsumerName: 8 characters of base62
NUID_LEN = 22  # a NUID's length (nuid.Next()): nats-server's pin ids
_NAME_ALPHABET = string.ascii_letters + string.digits

_DELIVER_POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
_goint = lambda v: decode_int(v, INT64)
_uint = lambda v: decode_int(v, UINT64)

log = logging.getLogger("natserver")
_ZERO_NS = gotime.nanos(gotime.ZERO)  # Go's zero time: no pause_until and the zero time are the same deadline


def _durations(value):
    if not isinstance(value, list):
        raise DecodeError("backoff: not a list")
    return [_goint(v) for v in value]


def _priority_policy(value):
    """consumer.go PriorityPolicy.UnmarshalJSON (its error follows "invalid JSON: ")."""
    if isinstance(value, str) and value in PRIORITY_POLICIES:
        return value
    raise GoDecodeError(f"unknown priority policy: {dumps(value).decode()}")


_start_time = gotime.decoder("CreateConsumerRequest.config.opt_start_time")


def _time(value):
    """opt_start_time: an RFC 3339 string, kept as given (refused with Go's time.Time errors)."""
    _start_time(value)
    return value


# The Go types of ConsumerConfig's fields (consumer.go), named in Go's decoding errors.
_GO_TYPES = {
    **{key: "string" for key in ("durable_name", "name", "description", "filter_subject", "sample_freq",
                                 "deliver_subject", "deliver_group")},
    **{key: "time.Duration" for key in ("ack_wait", "idle_heartbeat", "max_expires", "inactive_threshold",
                                        "priority_timeout")},
    **{key: "int" for key in ("max_deliver", "max_waiting", "max_ack_pending", "max_batch", "max_bytes",
                              "num_replicas")},
    **{key: "bool" for key in ("flow_control", "headers_only", "mem_storage", "direct")},
    "opt_start_seq": "uint64", "rate_limit_bps": "uint64", "backoff": "[]time.Duration",
    "filter_subjects": "[]string", "priority_groups": "[]string", "metadata": "map[string]string",
}

_FIELDS = {
    "durable_name": decode_str,
    "name": decode_str,
    "description": decode_str,
    "deliver_policy": decode_enum(*_DELIVER_POLICIES),
    "opt_start_seq": _uint,
    "opt_start_time": _time,
    "ack_policy": decode_enum("none", "all", "explicit"),
    "ack_wait": _goint,
    "max_deliver": _goint,
    "backoff": _durations,
    "filter_subject": decode_str,
    "filter_subjects": decode_strlist,
    "replay_policy": decode_enum("instant", "original"),
    "rate_limit_bps": _uint,
    "sample_freq": decode_str,
    "max_waiting": _goint,
    "max_ack_pending": _goint,
    "idle_heartbeat": _goint,
    "flow_control": decode_bool,
    "headers_only": decode_bool,
    "max_batch": _goint,
    "max_expires": _goint,
    "max_bytes": _goint,
    "deliver_subject": decode_str,
    "deliver_group": decode_str,
    "inactive_threshold": _goint,
    "num_replicas": _goint,
    "mem_storage": decode_bool,
    "direct": decode_bool,
    "metadata": decode_metadata,
    "pause_until": gotime.decoder("CreateConsumerRequest.config.pause_until"),  # 2.11
    "priority_groups": decode_strlist,  # 2.11
    "priority_policy": _priority_policy,
    "priority_timeout": _goint,  # ns (Go's PinnedTTL)
}

# jetstream_api.go CreateConsumerRequest: what a create may name (2.15.1, strict); sourcing is
# 2.15's consumer of a source (not modelled: taken, not kept).
REQUEST_SHAPE: dict = {"stream_name": None, "action": None, "pedantic": None,
                       "config": {**{key: None for key in _FIELDS}, "sourcing": None}}

# Go's zero values, in nats-server 2.15.1's field order (idle_heartbeat after deliver_group
# since 2.10); which of them are omitted (omitempty) is in to_json.
_DEFAULTS = {
    "durable_name": "", "name": "", "description": "", "deliver_policy": "all", "opt_start_seq": 0,
    "opt_start_time": None, "ack_policy": "none", "ack_wait": 0, "max_deliver": 0, "backoff": None,
    "filter_subject": "", "filter_subjects": None, "replay_policy": "instant", "rate_limit_bps": 0, "sample_freq": "",
    "max_waiting": 0, "max_ack_pending": 0, "flow_control": False,
    "headers_only": False, "max_batch": 0, "max_expires": 0, "max_bytes": 0, "deliver_subject": "",
    "deliver_group": "", "idle_heartbeat": 0, "inactive_threshold": 0, "num_replicas": 0, "mem_storage": False,
    "direct": False, "metadata": None, "pause_until": None, "priority_groups": None, "priority_policy": "none",
    "priority_timeout": 0,
}
# Written even when zero (no omitempty in nats-server's struct tags).
_ALWAYS = {"deliver_policy", "ack_policy", "replay_policy", "num_replicas"}


class ConsumerConfig:
    """A consumer's configuration; attribute names are nats-server's JSON names."""

    __slots__ = tuple(_DEFAULTS)

    # One per _DEFAULTS key (tests/jetstream/test_config_types.py keeps them in step).
    durable_name: str
    name: str
    description: str
    deliver_policy: str  # all, last, new, by_start_sequence, by_start_time, last_per_subject
    opt_start_seq: int
    opt_start_time: str | None  # RFC 3339, as given
    ack_policy: str  # none, all, explicit
    ack_wait: int  # ns
    max_deliver: int
    backoff: list[int] | None  # ns
    filter_subject: str
    filter_subjects: list[str] | None
    replay_policy: str  # instant, original
    rate_limit_bps: int
    sample_freq: str
    max_waiting: int
    max_ack_pending: int
    flow_control: bool
    headers_only: bool
    max_batch: int
    max_expires: int  # ns
    max_bytes: int
    deliver_subject: str
    deliver_group: str
    idle_heartbeat: int  # ns
    inactive_threshold: int  # ns
    num_replicas: int
    mem_storage: bool
    direct: bool
    metadata: dict[str, str] | None
    pause_until: str | None  # RFC 3339 as nats-server writes it back (gotime.canonical)
    priority_groups: list[str] | None
    priority_policy: str  # PRIORITY_POLICIES
    priority_timeout: int  # ns: how long a pinned client may stay away (pinned_client)

    def __init__(self, **values) -> None:
        for key, default in _DEFAULTS.items():
            setattr(self, key, values.get(key, default))

    @classmethod
    def from_json(cls, obj) -> ConsumerConfig:
        return cls(**decode_struct(obj, _FIELDS, {}, "CreateConsumerRequest.config", _GO_TYPES))

    def to_json(self, dynamic: bool = False) -> dict:
        """``dynamic``: the metadata with the server's version and level (versioning.py), as in
        the answers to create and info."""
        out: dict = {}
        for key, default in _DEFAULTS.items():
            value = getattr(self, key)
            if key == "metadata":
                value = metadata_json(value, dynamic)
            if key in _ALWAYS or (value != default and value is not None and value != [] and value != {}):
                out[key] = value
        return out

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def filters(self) -> list[str]:
        """consumer.go gatherSubjectFilters: filter_subject, else the filter_subjects (2.10+)."""
        if self.filter_subject:
            return [self.filter_subject]
        return list(self.filter_subjects or ())

    def matcher(self):
        """A predicate on stored subjects (bytes), None for "everything"."""
        return compile_filters([f.encode() for f in self.filters])

    def __eq__(self, other) -> bool:
        return isinstance(other, ConsumerConfig) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"ConsumerConfig({self.to_json()!r})"


def ephemeral_name() -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(EPHEMERAL_NAME_LEN))


def nuid() -> str:
    """A pin id as long as nats-server's NUIDs (random: ids only need to differ)."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(NUID_LEN))


def set_defaults(cfg: ConsumerConfig, max_ack_pending_limit: int = -1, stream_limits: dict | None = None,
                 durable: bool | None = None) -> None:
    """nats-server's setConsumerConfigDefaults (``max_ack_pending_limit``: the account's;
    ``stream_limits``: the stream's consumer_limits, 2.10+, whose values a consumer that
    sets none takes, whatever its ack policy). ``durable``: whether the consumer is durable
    for its inactive threshold's default (updateInactiveThreshold asks the consumer as it is:
    an update's existing one), by default whether ``cfg`` names a durable."""
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        cfg.max_deliver = -1
    # 2.10+ (not pedantic): negative limits are none, where 2.9 refused some of them.
    for key in ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat", "inactive_threshold"):
        if getattr(cfg, key) < 0:
            setattr(cfg, key, 0)
    if cfg.max_ack_pending < -1:
        cfg.max_ack_pending = -1
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = DEFAULT_MAX_WAITING
    if stream_limits:
        if cfg.max_ack_pending == 0:
            cfg.max_ack_pending = stream_limits.get("max_ack_pending", 0)
        if cfg.inactive_threshold == 0:
            cfg.inactive_threshold = stream_limits.get("inactive_threshold", 0)
    if cfg.ack_policy != "none":
        if cfg.ack_wait == 0:
            cfg.ack_wait = DEFAULT_ACK_WAIT
        if cfg.max_ack_pending == 0:
            cfg.max_ack_pending = DEFAULT_MAX_ACK_PENDING
            if 0 < max_ack_pending_limit < DEFAULT_MAX_ACK_PENDING:
                cfg.max_ack_pending = max_ack_pending_limit
    if cfg.backoff:  # (after the default, as setConsumerConfigDefaults: a backoff of [0] is no ack wait)
        cfg.ack_wait = cfg.backoff[0]
    if not (bool(cfg.durable_name) if durable is None else durable) and cfg.inactive_threshold == 0:
        cfg.inactive_threshold = DEFAULT_INACTIVE_THRESHOLD
    if cfg.priority_timeout < 0:  # (nats-server's non-pedantic mode: a negative duration is none)
        cfg.priority_timeout = 0
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        cfg.priority_timeout = DEFAULT_PRIORITY_TIMEOUT


def check_config(cfg: ConsumerConfig, stream_subjects: list, retention: str = "limits",
                 max_ack_pending_limit: int = -1, stream_limits: dict | None = None) -> None:
    """nats-server's checkConsumerCfg for a standalone server, in its order (the names first,
    as the API handler checks them); ``max_ack_pending_limit``: the account's;
    ``stream_limits``: the stream's consumer_limits (2.10+), caps."""
    for name, kind in ((cfg.name, "consumer name"), (cfg.durable_name, "consumer durable name")):
        if name and any(c in name for c in ASSET_NAME_FORBIDDEN):
            raise errors.stream_invalid_config(f"{kind} can not contain '.', '*', '>', '\\', '/'")
    if cfg.num_replicas < 0:
        raise errors.replicas_negative()
    if any(delay < 0 for delay in cfg.backoff or ()):
        raise errors.consumer_backoff_negative()
    if cfg.ack_wait < 0:
        raise errors.consumer_ack_wait_negative()
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:  # (2.10+: -1 allowed)
        raise errors.consumer_max_deliver_backoff()
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise errors.consumer_description_too_long(MAX_DESCRIPTION_LEN)
    if cfg.deliver_subject:
        if any(token in ("*", ">") for token in cfg.deliver_subject.split(".")):
            raise errors.consumer_deliver_to_wildcards()
        if not is_valid_subject(cfg.deliver_subject):
            raise errors.consumer_invalid_deliver_subject()
        if any(is_subset_match(cfg.deliver_subject, subject) for subject in stream_subjects):
            raise errors.consumer_deliver_cycle()  # the stream would store its own deliveries
        if cfg.max_waiting != 0:
            raise errors.consumer_push_max_waiting()
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise errors.consumer_max_pending_requires_ack()
        if 0 < cfg.idle_heartbeat < 100_000_000:  # nanoseconds
            raise errors.consumer_small_heartbeat()
    else:
        if cfg.ack_policy == "none" and retention == "workqueue":
            raise errors.consumer_pull_requires_ack()
        if cfg.rate_limit_bps > 0:
            raise errors.consumer_pull_with_rate_limit()
        if cfg.max_waiting < 0:
            raise errors.consumer_max_waiting_negative()
        if cfg.idle_heartbeat:
            raise errors.consumer_hb_requires_push()
        if cfg.flow_control:
            raise errors.consumer_fc_requires_push()
        if cfg.max_batch < 0:
            raise errors.consumer_max_request_batch_negative()
        if cfg.max_expires and cfg.max_expires < 1_000_000:  # nanoseconds: under 1 ms
            raise errors.consumer_max_request_expires_too_small()
    if 0 < max_ack_pending_limit < cfg.max_ack_pending:
        raise errors.consumer_max_pending_ack_excess(max_ack_pending_limit)
    if stream_limits:
        limit = stream_limits.get("max_ack_pending", 0)
        if 0 < limit < cfg.max_ack_pending:
            raise errors.consumer_max_pending_ack_excess(limit)
        limit = stream_limits.get("inactive_threshold", 0)
        if 0 < limit < cfg.inactive_threshold:
            raise errors.consumer_inactive_threshold_excess(go_duration(limit / 1e9))
    if cfg.direct:  # (what a mirror or source asks an origin for: push, ephemeral)
        if not cfg.deliver_subject:
            raise errors.consumer_direct_requires_push()
        if cfg.durable_name:
            raise errors.consumer_direct_requires_ephemeral()
    # (a pull consumer's deliver_group is taken and unused: 2.15.1 has no check, 2.9 refused it)
    # Only the filters' form is checked: nats-server (since 2.10) takes any filter, wider or
    # narrower than the stream's subjects or disjoint from them (it then matches nothing).
    if cfg.filter_subject and cfg.filter_subjects:
        raise errors.consumer_duplicate_filter_subjects()
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise errors.stream_invalid_config(errors.BAD_SUBJECT)
    if any(not f for f in cfg.filter_subjects or ()):
        raise errors.consumer_empty_filter()
    filters = cfg.filters
    for outer, subject in enumerate(filters):
        if not is_valid_subject(subject):
            raise errors.stream_invalid_config(errors.BAD_SUBJECT)
        if any(inner != outer and is_subset_match(subject, other) for inner, other in enumerate(filters)):
            raise errors.consumer_overlapping_filters()
    _check_deliver_policy(cfg)
    if cfg.sample_freq:
        text = cfg.sample_freq.removesuffix("%")
        if not text.lstrip("+-").isdigit() or not text.isascii() or text[1:].lstrip("0123456789"):
            raise errors.consumer_invalid_sampling(f'strconv.Atoi: parsing "{text}": invalid syntax')
        if int(text) < 0:
            raise errors.consumer_invalid_sampling("<nil>")  # (nats-server formats its nil error)
    if cfg.flow_control and not cfg.idle_heartbeat:
        raise errors.consumer_flow_control_needs_heartbeats()
    if cfg.durable_name and cfg.name and cfg.durable_name != cfg.name:
        raise errors.consumer_durable_name_mismatch()
    if sum(len(k) + len(v) for k, v in (cfg.metadata or {}).items()) > MAX_METADATA_LEN:
        raise errors.consumer_metadata_length(f"{MAX_METADATA_LEN // 1024}KB")
    _check_priority(cfg)


def _check_priority(cfg: ConsumerConfig) -> None:
    """checkConsumerCfg's priority group rules (2.11), last as there."""
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise errors.consumer_push_with_priority_group()
        if not cfg.priority_groups:
            raise errors.consumer_priority_policy_without_group()
        for group in cfg.priority_groups:
            if not group:
                raise errors.consumer_empty_group_name()
            if not GROUP_NAME.fullmatch(group):
                raise errors.consumer_invalid_group_name()
    else:
        if cfg.priority_groups:
            raise errors.consumer_priority_group_with_policy_none()
        if cfg.priority_timeout > 0:
            raise errors.consumer_pinned_ttl_without_priority_policy()


# checkConsumerCfg's start rules: per policy, which optional start must and must not be set.
_POLICY_WORDS = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new",
                 "by_start_sequence": "by start sequence", "by_start_time": "by start time"}


def _check_deliver_policy(cfg: ConsumerConfig) -> None:
    policy = cfg.deliver_policy
    words = _POLICY_WORDS.get(policy)
    if words is None:
        return

    def bad_start(start: str):
        raise errors.consumer_invalid_policy(f"consumer delivery policy is deliver {words}, but optional start {start} is also set")

    def not_set(what: str):
        raise errors.consumer_invalid_policy(f"consumer delivery policy is deliver {words}, but optional {what} is not set")

    if policy in ("all", "last", "last_per_subject", "new"):
        if cfg.opt_start_seq > 0:
            bad_start("sequence")
        if cfg.opt_start_time is not None:
            bad_start("time")
        if policy == "last_per_subject" and not cfg.filters:
            not_set("filter subject")
    elif policy == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            not_set("start sequence")
        if cfg.opt_start_time is not None:
            bad_start("time")
    elif policy == "by_start_time":
        if cfg.opt_start_time is None:
            not_set("start time")
        if cfg.opt_start_seq != 0:
            bad_start("start sequence")


def check_pedantic(cfg: ConsumerConfig) -> None:
    """2.11+'s pedantic mode: what setConsumerConfigDefaults refuses rather than change, in
    its order (10157); natserver checks the request alone, when it is decoded (not the
    defaults from the stream's consumer_limits or the server's limits)."""
    if cfg.max_deliver < -1:
        raise errors.pedantic("max_deliver must be set to -1")
    if cfg.max_waiting < 0:
        raise errors.pedantic("max_waiting must not be negative")
    if cfg.max_ack_pending < -1:
        raise errors.pedantic("max_ack_pending must be set to -1")
    for key in ("max_batch", "max_expires", "max_bytes", "idle_heartbeat", "inactive_threshold", "priority_timeout"):
        if getattr(cfg, key) < 0:
            raise errors.pedantic(f"{key} must not be negative")
    ack_wait = cfg.ack_wait or (DEFAULT_ACK_WAIT if cfg.ack_policy in ("explicit", "all") else 0)
    if cfg.backoff and ack_wait != cfg.backoff[0]:
        raise errors.pedantic("first backoff value has to equal batch AckWait")


def check_pedantic_limits(cfg: ConsumerConfig, stream_limits: dict | None) -> None:
    """Pedantic mode against the stream's consumer_limits (setConsumerConfigDefaults): a
    consumer that would take the stream's max_ack_pending or inactive_threshold must set it."""
    if cfg.max_ack_pending == 0 and (stream_limits or {}).get("max_ack_pending", 0) > 0:
        raise errors.pedantic("max_ack_pending must be set if it's configured in stream limits")
    if cfg.inactive_threshold == 0 and (stream_limits or {}).get("inactive_threshold", 0) > 0:
        raise errors.pedantic("inactive_threshold must be set if it's configured in stream limits")


def check_workqueue_update(cfg: ConsumerConfig, name: str, consumers: dict) -> None:
    """consumer.go addConsumerWithAction, an existing consumer of a workqueue stream
    (partitionUnique): its filters may not collide with another's (direct ones aside), nor
    may another be unfiltered."""
    for other_name, other in consumers.items():
        if other_name == name or other.cfg.direct:
            continue
        theirs = other.cfg.filters
        for mine in cfg.filters:
            if not theirs or any(subjects_collide(mine, filter) for filter in theirs):
                raise errors.consumer_wq_not_unique()


def check_workqueue(cfg: ConsumerConfig, others) -> None:
    """consumer.go addConsumer on a workqueue stream: explicit acks, one consumer per subject
    (stream.go partitionUnique), deliver all."""
    if cfg.ack_policy != "explicit":
        raise errors.consumer_wq_requires_explicit_ack()
    others = list(others)
    if others:
        mine = cfg.filters
        if not mine:
            raise errors.consumer_wq_multiple_unfiltered()
        for other in others:
            theirs = other.cfg.filters
            if not theirs or any(is_subset_match(a, b) or is_subset_match(b, a) for a in mine for b in theirs):
                raise errors.consumer_wq_not_unique()
    if cfg.deliver_policy != "all":
        raise errors.consumer_wq_not_deliver_all()


# nats-server's checkNewConsumerConfig: what an existing consumer can not change, in its order.
# What an update may not change, in 2.15.1's order (checkNewConsumerConfig; 2.10+ lets the
# rate limit and the sampling change, and checks flow control).
_FIXED = (
    ("deliver_policy", "deliver policy can not be updated"),
    ("mem_storage", "storage type can not be updated"),
    ("direct", "direct can not be updated"),
    ("opt_start_seq", "start sequence can not be updated"),
    ("opt_start_time", "start time can not be updated"),
    ("ack_policy", "ack policy can not be updated"),
    ("replay_policy", "replay policy can not be updated"),
    ("idle_heartbeat", "heart beats can not be updated"),
    ("flow_control", "flow control can not be updated"),
)


def check_update(old: ConsumerConfig, new: ConsumerConfig) -> None:
    for key, message in _FIXED:
        if getattr(old, key) != getattr(new, key):
            raise errors.consumer_create(message)
    if not old.is_push and new.is_push:
        raise errors.consumer_create("can not update pull consumer to push based")
    if old.is_push and not new.is_push:
        raise errors.consumer_create("can not update push consumer to pull based")
    if old.max_waiting != new.max_waiting:
        raise errors.consumer_create("max waiting can not be updated")


def parse_time(text: str) -> int:
    """RFC 3339 (with up to nanoseconds) to Unix nanoseconds; ValueError when malformed."""
    main, _, frac = text.partition(".")
    if frac:
        zone_at = next((i for i, c in enumerate(frac) if not c.isdigit()), len(frac))
        digits, zone = frac[:zone_at], frac[zone_at:]
    else:
        zone_at = next((i for i, c in enumerate(main) if c in "Zz" or (i > 18 and c in "+-")), len(main))
        main, zone, digits = main[:zone_at], main[zone_at:], ""
    when = datetime.datetime.fromisoformat(main + (zone if zone not in ("Z", "z") else "+00:00"))
    if when.tzinfo is None:
        raise ValueError("time without zone")
    return int(when.timestamp()) * 1_000_000_000 + int((digits + "000000000")[:9] or 0)


def start_sequence(cfg: ConsumerConfig, store) -> int:
    """nats-server's selectStartingSeqNo: the first stream sequence the consumer looks at."""
    policy = cfg.deliver_policy
    filters = [f.encode() for f in cfg.filters]
    if policy == "all":
        seq = store.first_seq
    elif policy == "last":
        seq = max(store.last_seq_for(f) for f in filters) if filters else store.last_seq
    elif policy == "new":
        seq = store.last_seq + 1
    elif policy == "by_start_sequence":
        seq = cfg.opt_start_seq
    elif policy == "by_start_time":
        try:
            at = parse_time(cfg.opt_start_time or "")
        except ValueError:
            at = 0
        seq = store.first_seq_at_time(at) or store.last_seq + 1
    else:  # last_per_subject: the earliest of the subjects' last messages
        match = cfg.matcher()
        lasts = [ss[2] for subj, ss in store.fss.items() if match is None or match(subj)]
        seq = min(lasts) if lasts else store.last_seq + 1
    return max(seq, 1)


class Consumer:
    """One consumer of a stream: its configuration and its delivery/ack state (sans-IO: the
    caller passes the time in and sends what ``next_msg`` returns)."""

    def __init__(self, stream, name: str, cfg: ConsumerConfig, created: int) -> None:
        self.stream = stream
        self.name = name
        self.cfg = cfg
        self.created = created
        self.delivered_cseq = 0  # last consumer sequence delivered
        # Where the consumer reads on from, less one (consumer.go o.sseq - 1): the stream
        # sequence of the last delivery, before any the one before the start position, and
        # past the stream's last message when a look for the next found none (getNextMsg).
        self.delivered_sseq = start_sequence(cfg, stream.store) - 1
        # The delivered stream sequence of the consumer's stored state (nats-server's
        # consumer store: SetStarting, then each first delivery, a purge): what consumer info
        # reports and a restart resumes from; not moved by a look that found nothing.
        self.state_sseq = self.delivered_sseq
        self.ack_floor_cseq = 0
        self.ack_floor_sseq = self.delivered_sseq  # (2.10+: the ack floor starts there too)
        self.last_delivered = 0  # ns, for info's last_active
        self.last_acked = 0
        # stream seq -> [consumer seq, delivery time ns], in delivery order (the first entry has
        # the earliest ack deadline, as every redelivery moves its entry to the end).
        self.pending: dict[int, list] = {}
        # A lower bound of pending's smallest key (none is below it), kept for this very dict
        # (a dict put in its place is looked at afresh): _update_floor looks upward from it
        # instead of taking min() of up to max_ack_pending keys at every ack.
        self._pmin = 0
        self._pmin_of: dict | None = None
        self.rdc: dict[int, int] = {}  # stream seq -> deliveries so far (only when > 1 matters)
        self.rdq: list[int] = []  # stream seqs due for redelivery, in order
        self.nak_until: dict[int, int] = {}  # stream seq -> ns before which it is not redelivered
        self.retimed = 0  # naks with a delay and +WPIs taken (a replicated consumer proposes them)
        self.waiting: list = []  # pull requests (PullRequest), oldest first
        # A replicated consumer's leader (consumer_group_runner) holds the replies of acks that
        # ask for one (AckSync) until its group committed them (consumer.go addAckReply);
        # None: answered at once.
        self.held_ack_replies: list | None = None
        self.retry_at = 0  # ns: push delivery to try again then (no interest yet, or more to send)
        self.last_push = created  # ns: last push delivery or heartbeat (idle_heartbeat)
        self.active_at = created  # ns: last sign of a client (ephemerals' inactive_threshold)
        self.fc_reply = b""  # push flow control: the request the client has yet to answer
        self.fc_bytes = 0  # bytes pushed since the last flow control answer
        self.fc_count = 0
        self.dirty = True  # state changed since it was last saved (durables, consumer_store.py)
        self.saved_at = 0  # ns
        self.save_queued = False  # the timer task knows a snapshot is due
        self.match = cfg.matcher()
        # deliver last_per_subject: each matching subject's last message, in stream order, then
        # on after the stream's last message at the start (consumer.go lastSeqSkipList; not
        # needed when a subject keeps one message). lss_undo: the state before the last one
        # taken from it, for undo().
        self.lss: list[int] = []
        self.lss_resume = 0
        self.lss_undo: tuple | None = None
        self.state_undo = 0  # state_sseq before the last first delivery (for undo())
        if cfg.deliver_policy == "last_per_subject" and stream.cfg.max_msgs_per_subject != 1:
            store = stream.store
            self.lss = sorted(ss[2] for subject, ss in store.fss.items() if self.match is None or self.match(subject))
            self.lss_resume = store.last_seq
        # nats-server 2.15.1's count of messages left to deliver (consumer.go o.npc): the
        # last token of every ack reply and, capped (checkNumPending), consumer info's
        # num_pending. Counted from the store (streamNumPending) when the consumer starts, is
        # updated or restored and after a purge, up to the stream's last sequence then (o.npf);
        # kept up to date in between: one less by each first delivery and by each removal of a
        # matching message not yet delivered (decStreamPending), one more by each new matching
        # message past npf (processStreamSignal). counted: whether it was counted yet.
        self.npc = 0
        self.npf = 0
        self.counted = False
        # Pacing (pace()): replay_policy original until caught up with the stream's last
        # message at start, and rate_limit_bps as a token bucket.
        self.replaying = cfg.replay_policy == "original"
        self.replay_until = stream.store.last_seq
        self.replay_ts = 0  # stored time of the last paced message
        self.replay_sent = 0  # when it went out
        self.rate_tokens = 0.0
        self.rate_time = 0
        # Pause (2.11, pause_until): nothing is delivered before pause_ns (Unix ns; None: not
        # paused); unpause_at is the timer that resumes it then (consumer.go uptmr: armed
        # by arm_pause while the deadline is ahead, 0 when not).
        self.pause_ns = gotime.nanos(cfg.pause_until) if cfg.pause_until is not None else None
        self.unpause_at = 0
        # Priority groups (2.11, priority_policy pinned_client): the pin id the client serving
        # the group has (consumer.go currentPinId; "" when none), when it got it (Unix ns) and
        # when it loses it unless it asks again with the id (pinnedTtl's timer; 0: none).
        self.pin_id = ""
        self.pinned_ts = 0
        self.pin_expires = 0
        self.pin_group = ""  # the group the pinned request named (the timeout's advisory names it)

    # -- priority groups ----------------------------------------------------------------------

    def assign_pin(self, group: str, now: int) -> str:
        """consumer.go assignNewPinId: a new pin id for a request of ``group`` (the caller
        tells)."""
        self.pin_id = nuid()
        self.pinned_ts = now
        self.pin_expires = now + self.cfg.priority_timeout
        self.pin_group = group
        return self.pin_id

    def unassign_pin(self) -> None:
        """consumer.go unassignPinId."""
        self.pin_id = ""
        self.pinned_ts = 0
        self.pin_expires = 0

    # -- pause --------------------------------------------------------------------------------

    def paused(self, now: int) -> bool:
        return self.pause_ns is not None and now < self.pause_ns

    def arm_pause(self, now: int) -> None:
        """consumer.go updatePauseState: a timer for a deadline still ahead, none otherwise."""
        pause_ns = self.pause_ns
        self.unpause_at = pause_ns if pause_ns is not None and now < pause_ns else 0

    def set_pause(self, until: str | None, now: int) -> bool:
        """The pause API: pause until ``until`` (Go's text, None: not paused). Whether the
        deadline changed (nats-server then tells, with an advisory)."""
        old = self.pause_ns
        self.cfg.pause_until = until
        set_static_consumer_metadata(self.cfg)  # (the required level follows the pause)
        self.pause_ns = gotime.nanos(until) if until is not None else None
        self.dirty = True
        changed = (old if old is not None else _ZERO_NS) != (self.pause_ns if self.pause_ns is not None else _ZERO_NS)
        if changed:
            self.arm_pause(now)
        return changed

    # -- delivery -----------------------------------------------------------------------------

    def num_pending(self) -> int:
        """Messages left to deliver, counted afresh from the store (consumer.go
        streamNumPending, the store's NumPending): with ``last_per_subject``, the subjects
        whose last message is still ahead, else the matching messages ahead. Bounded by the
        store's per-subject state, and called only when nats-server counts again (start,
        update, restore, purge), never per message."""
        store = self.stream.store
        sseq = self.delivered_sseq + 1
        if self.cfg.deliver_policy == "last_per_subject":
            npc = 0
            match = self.match
            for subject, ss in store.fss.items():
                if (match is None or match(subject)) and sseq <= ss[2]:
                    npc += 1
        else:
            filters = self.cfg.filters
            if len(filters) <= 1:
                npc = store.filtered_state(sseq, filters[0].encode() if filters else b"")[0]
            else:  # several filters, which do not overlap (check_config): their counts add up
                npc = sum(store.filtered_state(sseq, f.encode())[0] for f in filters)
        self.npc, self.npf, self.counted = npc, store.last_seq, True
        return npc

    def cached_num_pending(self) -> int:
        """The ack reply's pending count (consumer.go numPending): the running one."""
        if not self.counted:
            self.num_pending()
        return max(self.npc, 0)

    def checked_num_pending(self) -> int:
        """Consumer info's num_pending (consumer.go checkNumPending): the running count, no
        more than the stream holds or than its sequences ahead of the consumer, 0 past them."""
        if not self.counted:
            self.num_pending()
        store = self.stream.store
        sseq = self.delivered_sseq + 1
        if sseq > store.last_seq:
            self.npc = 0
        elif self.npc > 0:
            self.npc = min(self.npc, store.msgs, store.last_seq - sseq + 1)
        return max(self.npc, 0)

    def filtered_match(self, subject: str) -> bool:
        """consumer.go isFilteredMatch: does a purge of ``subject`` concern this consumer
        (its filters take some of the subject's messages)?"""
        filters = self.cfg.filters
        if not filters:
            return True
        return any(subject == f if "*" not in f and ">" not in f else is_subset_match(subject, f) for f in filters)

    def equal_or_subset_match(self, subject: str) -> bool:
        """consumer.go isEqualOrSubsetMatch: is one of its filters the purge's ``subject`` or
        within it (the purge takes all the filter's messages)? Never without filters."""
        return any(f == subject or is_subset_match(f, subject) for f in self.cfg.filters)

    def purged(self, sseq: int, slseq: int, wider: bool = False) -> None:
        """The stream was purged (consumer.go purge): skip ahead to ``sseq`` (0: past the
        stream's last sequence ``slseq``, nothing of the purge's filter is left), drop the
        pending acks below it and move the ack floor there; ``wider``: the consumer's filter
        takes more than the purge's subject, so also drop the pending acks whose messages
        the purge took. The stored state follows (writeStoreState)."""
        if sseq == 0 and not wider:
            sseq = slseq + 1
        if self.delivered_sseq + 1 < sseq:
            self.delivered_sseq = sseq - 1
        store = self.stream.store
        if self.ack_floor_sseq < sseq:
            self.ack_floor_sseq = sseq - 1
            gone = [seq for seq in self.pending if seq < sseq or (wider and seq not in store.idx)]
            for seq in gone:
                self.ack_floor_cseq = max(self.ack_floor_cseq, self.pending[seq][0])
                self._forget(seq)
        if not self.pending:
            self.ack_floor_cseq, self.ack_floor_sseq = self.delivered_cseq, self.delivered_sseq
        self.rdq = [seq for seq in self.rdq if seq > self.delivered_sseq]
        kept = set(self.rdq)
        self.nak_until = {seq: t for seq, t in self.nak_until.items() if seq in kept}
        self.state_sseq = self.delivered_sseq
        self.dirty = True

    def stream_stored(self, seq: int, subject: bytes) -> None:
        """A new message in the stream (consumer.go processStreamSignal)."""
        if seq > self.npf and (self.match is None or self.match(subject)):
            self.npc += 1

    def stream_removed(self, seq: int, subject: bytes) -> None:
        """A message left the stream (consumer.go decStreamPending, its count part): one
        less to deliver when it was still ahead."""
        if seq > self.delivered_sseq and (self.match is None or self.match(subject)):
            self.npc -= 1

    def blocked(self) -> bool:
        """max_ack_pending reached: nothing more until something is acked."""
        cfg = self.cfg
        return cfg.ack_policy != "none" and 0 < cfg.max_ack_pending <= len(self.pending)

    def next_msg(self, now: int):
        """The next message to deliver and its delivery count, or None (nothing while paused);
        records the delivery."""
        if self.pause_ns is not None and now < self.pause_ns:
            return None
        store = self.stream.store
        while self.rdq:
            seq = self.rdq[0]
            until = self.nak_until.get(seq)
            if until is not None and until > now:
                break
            self.rdq.pop(0)
            self.nak_until.pop(seq, None)
            if seq not in self.pending:
                continue
            msg = store.load_msg(seq)
            if msg is None:  # gone from the stream meanwhile
                self._forget(seq)
                continue
            count = self.rdc.get(seq, 1) + 1
            self.rdc[seq] = count
            self.delivered_cseq += 1
            del self.pending[seq]
            self.pending[seq] = [self.delivered_cseq, now]
            self.last_delivered = now
            self.dirty = True
            return msg, count
        if self.blocked():
            return None
        msg = None
        while self.lss and msg is None:
            if self.delivered_sseq >= self.lss_resume:  # (a restored or purged consumer is past it)
                self.lss = []
                break
            seq = self.lss.pop(0)
            self.lss_undo = (seq, self.delivered_sseq)
            self.delivered_sseq = seq if self.lss else self.lss_resume
            msg = store.load_msg(seq)  # (None: gone meanwhile)
        if msg is None:
            start = max(self.delivered_sseq + 1, store.first_seq)
            msg = self._load_next(store, start) if start <= store.last_seq else None
            if msg is None:
                # The end of the stream (getNextMsg: read on from after its last sequence;
                # checkNumPendingOnEOF: nothing is left then).
                self.delivered_sseq = max(self.delivered_sseq, store.last_seq)
                if self.npc != 0:
                    self.npc, self.npf = 0, store.last_seq
                return None
            self.lss_undo = None
        self.delivered_cseq += 1
        if self.lss_undo is None:
            self.delivered_sseq = msg.seq
        self.state_undo = self.state_sseq
        if msg.seq > self.state_sseq:
            self.state_sseq = msg.seq
        self.last_delivered = now
        self.dirty = True
        self.npc -= 1
        if self.cfg.ack_policy == "none":
            self.ack_floor_cseq, self.ack_floor_sseq = self.delivered_cseq, msg.seq
        else:
            self.pending[msg.seq] = [self.delivered_cseq, now]
            if msg.seq < self._pmin:
                self._pmin = msg.seq
        return msg, 1

    def peek_batch(self, now: int, limit: int) -> list:
        """The messages the next ``limit`` calls of next_msg would deliver, when they are all
        first deliveries read from the stream in order (nothing to redeliver, not paused, no
        last_per_subject list, at most one filter), recording nothing (record_batch does, once
        they are delivered): [] when that is not the case, and the caller goes the general
        way. It stops before max_ack_pending and at the end of the stream (next_msg's rules
        there apply as before). A pull request's batch, a push consumer's burst."""
        if self.rdq or self.lss or (self.pause_ns is not None and now < self.pause_ns):
            return []
        cfg = self.cfg
        if cfg.ack_policy != "none" and cfg.max_ack_pending > 0:
            limit = min(limit, cfg.max_ack_pending - len(self.pending))
        filters = cfg.filters
        if limit <= 0 or len(filters) > 1:
            return []
        store = self.stream.store
        start = max(self.delivered_sseq + 1, store.first_seq)
        if start > store.last_seq:
            return []
        return store.load_next_msgs(filters[0].encode() if filters else b"", start, limit)

    def record_batch(self, msgs: list, now: int) -> None:
        """Record the delivery of peek_batch's ``msgs`` (delivered as such: the ack reply of
        the i-th has consumer sequence delivered_cseq + 1 + i and pending count
        max(cached_num_pending() - 1 - i, 0)), as next_msg records them one by one."""
        cseq = self.delivered_cseq
        last = msgs[-1].seq
        if self.cfg.ack_policy == "none":
            cseq += len(msgs)
            self.ack_floor_cseq, self.ack_floor_sseq = cseq, last
        else:
            pending = self.pending
            for msg in msgs:
                cseq += 1
                pending[msg.seq] = [cseq, now]
            if msgs[0].seq < self._pmin:
                self._pmin = msgs[0].seq
        self.delivered_cseq = cseq
        self.delivered_sseq = last
        self.lss_undo = None
        state = self.state_sseq
        if len(msgs) > 1 and msgs[-2].seq > state:
            state = msgs[-2].seq
        self.state_undo = state  # (as next_msg leaves it: undo takes back the last one)
        if last > state:
            state = last
        self.state_sseq = state
        self.last_delivered = now
        self.dirty = True
        self.npc -= len(msgs)

    def _load_next(self, store, start: int):
        """The first message at or after ``start`` that a filter takes (the earliest of each
        filter's next, with several)."""
        filters = self.cfg.filters
        if len(filters) <= 1:
            return store.load_next_msg(filters[0].encode() if filters else b"", start)
        found = [m for m in (store.load_next_msg(f.encode(), start) for f in filters) if m is not None]
        return min(found, key=lambda m: m.seq) if found else None

    def reconfigure(self, cfg: ConsumerConfig) -> None:
        """An update took effect: the new filters apply to what comes next."""
        self.cfg = cfg
        self.match = cfg.matcher()
        self.num_pending()  # counted afresh under the new filters (updateConfig)
        self.dirty = True

    def pace(self, seq: int, ts: int, size: int, now: int, burst: int) -> int:
        """When message ``seq`` (stored at ``ts``, ``size`` bytes on the wire) may go out: 0 for
        now (and the pacing state moves on), else the time to try again (consumer.go
        loopAndGatherMsgs: ``replay_policy: original`` keeps the stored spacing between
        messages, more than 1 ms of it, until caught up; ``rate_limit_bps`` is a token bucket
        of ``burst`` bytes, the largest message)."""
        at = now
        if self.replaying and self.replay_ts and ts - self.replay_ts > 1_000_000:
            at = max(at, self.replay_sent + ts - self.replay_ts)
        rate = self.cfg.rate_limit_bps / 8  # bytes a second
        tokens = 0.0
        if rate > 0:
            if not self.rate_time:
                self.rate_tokens, self.rate_time = float(burst), now
            tokens = min(float(burst), self.rate_tokens + (now - self.rate_time) * rate / 1e9)
            if tokens < size:
                at = max(at, now + int((size - tokens) / rate * 1e9) + 1)
        if at > now:
            return at
        if self.replaying:
            self.replay_ts, self.replay_sent = ts, now
            if seq >= self.replay_until:
                self.replaying = False
        if rate > 0:
            self.rate_tokens, self.rate_time = tokens - size, now
        return 0

    def undo(self, seq: int, count: int) -> None:
        """Take back the delivery next_msg just recorded (the request could not take it)."""
        self.delivered_cseq -= 1
        if count == 1:
            self.state_sseq = self.state_undo
            self.npc += 1
        if count == 1 and self.lss_undo is not None and self.lss_undo[0] == seq:
            self.lss.insert(0, seq)
            self.delivered_sseq = self.lss_undo[1]
            self.lss_undo = None
            self.pending.pop(seq, None)
        elif count == 1:
            self.delivered_sseq = seq - 1
            self.pending.pop(seq, None)
        else:
            self.rdc[seq] = count - 1
            self.rdq.insert(0, seq)

    def _forget(self, seq: int) -> None:
        self.dirty = True
        self.pending.pop(seq, None)
        self.rdc.pop(seq, None)
        self.nak_until.pop(seq, None)

    # -- acks ---------------------------------------------------------------------------------

    def ack(self, sseq: int, cseq: int, now: int) -> list[int]:
        """+ACK (and +NXT). The stream sequences it acknowledged (for retention)."""
        if self.cfg.ack_policy != "all":  # (the usual one, in one step: _forget inlined)
            if self.pending.pop(sseq, None) is None:
                return []
            self.dirty = True
            if self.rdc:
                self.rdc.pop(sseq, None)
            if self.nak_until:
                self.nak_until.pop(sseq, None)
            self.last_acked = now
            # _update_floor's usual case inline (acks in order: the floor's message or the one
            # after it is pending; FLOOR_SCAN >= 2), a call less an ack
            pending = self.pending
            first = self._pmin
            if pending and self._pmin_of is pending and (first in pending or (first := first + 1) in pending):
                self._pmin = first
                self.ack_floor_sseq = first - 1
                self.ack_floor_cseq = pending[first][0] - 1
            else:
                self._update_floor()
            return [sseq]
        done = [s for s in self.pending if s <= sseq]
        for s in done:
            self._forget(s)
        if done:
            self.last_acked = now
            self._update_floor()
        return done

    def is_done_with(self, seq: int, subject: bytes) -> bool:
        """Interest retention: this consumer no longer needs message ``seq``."""
        if self.match is not None and not self.match(subject):
            return True
        return seq <= self.delivered_sseq and seq not in self.pending and seq not in self.rdq

    def _update_floor(self) -> None:
        if not self.pending:  # (the stored state's delivered: UpdateAcks)
            self.ack_floor_cseq, self.ack_floor_sseq = self.delivered_cseq, self.state_sseq
            return
        pending = self.pending
        first = self._pmin
        if self._pmin_of is pending:
            for _ in range(FLOOR_SCAN):
                if first in pending:
                    break
                first += 1
            else:
                first = min(pending)
        else:
            first = min(pending)
            self._pmin_of = pending
        self._pmin = first
        self.ack_floor_sseq = first - 1
        self.ack_floor_cseq = self.pending[first][0] - 1

    def nak(self, sseq: int, delay_ns: int, now: int) -> None:
        if sseq not in self.pending:
            return
        if delay_ns > 0:
            self.nak_until[sseq] = now + delay_ns
            self.retimed += 1
        if sseq not in self.rdq:
            self.rdq.append(sseq)
            self.rdq.sort()

    def progress(self, sseq: int, now: int) -> None:
        """+WPI: the ack_wait clock starts again."""
        entry = self.pending.pop(sseq, None)
        if entry is not None:
            entry[1] = now
            self.pending[sseq] = entry
            self.retimed += 1

    def term(self, sseq: int, now: int) -> bool:
        hit = sseq in self.pending
        self._forget(sseq)
        if hit:
            self.last_acked = now
            self._update_floor()
        return hit

    # -- time ---------------------------------------------------------------------------------

    def ack_wait_for(self, seq: int) -> int:
        backoff = self.cfg.backoff
        if backoff:
            n = self.rdc.get(seq, 1) - 1
            return backoff[min(n, len(backoff) - 1)]
        return self.cfg.ack_wait

    def expire_acks(self, now: int) -> list[int]:
        """Pending messages whose ack_wait passed: queued for redelivery, or, after
        max_deliver deliveries, dropped from pending and returned (for the advisory)."""
        exhausted = []
        max_deliver = self.cfg.max_deliver
        if self.cfg.backoff:
            due = list(self.pending.items())
        else:
            # In delivery order: those before the first whose ack_wait has not passed (the rest
            # are younger), taken before any changes; a copy of all of pending (max_ack_pending
            # entries: 1000 by default) was made every tick.
            due = []
            oldest = now - self.cfg.ack_wait
            for item in self.pending.items():
                if item[1][1] > oldest:
                    break
                due.append(item)
        for seq, (cseq, at) in due:
            if at + self.ack_wait_for(seq) > now:
                continue  # (a backoff's: not yet)
            if seq in self.rdq:
                continue
            if 0 < max_deliver <= self.rdc.get(seq, 1):
                self._forget(seq)
                exhausted.append(seq)
                continue
            self.rdq.append(seq)
        if exhausted:
            self._update_floor()
        self.rdq.sort()
        return exhausted

    def next_deadline(self) -> int | None:
        """When expire_acks next has something to do (ns), or None."""
        deadlines = []
        if self.pending:
            if self.cfg.backoff:
                deadlines.append(min(at + self.ack_wait_for(s) for s, (_, at) in self.pending.items()
                                     if s not in self.rdq) if len(self.rdq) < len(self.pending) else None)
            else:
                for s, (_, at) in self.pending.items():
                    if s not in self.rdq:
                        deadlines.append(at + self.cfg.ack_wait)
                        break
        if self.nak_until:
            deadlines.append(min(self.nak_until.values()))
        due = [d for d in deadlines if d is not None]
        return min(due) if due else None

    # -- info ---------------------------------------------------------------------------------

    def info_json(self, push_bound: bool = False, now: int = 0, dynamic: bool = True,
                  cluster: dict | None = None) -> dict:
        """Consumer info; ``push_bound``: a push consumer's deliver subject has a subscriber
        (nats-server's o.active, which its clients read to refuse a second subscriber);
        ``paused`` and ``pause_remaining`` (ns) while paused at ``now`` (2.11); ``dynamic``:
        the server's version and level in the config's metadata (not in the lists)."""
        delivered: dict = {"consumer_seq": self.delivered_cseq, "stream_seq": self.state_sseq}
        if self.last_delivered:
            delivered["last_active"] = rfc3339nano(self.last_delivered)
        floor: dict = {"consumer_seq": self.ack_floor_cseq, "stream_seq": self.ack_floor_sseq}
        if self.last_acked:
            floor["last_active"] = rfc3339nano(self.last_acked)
        info = {
            "stream_name": self.stream.name,
            "name": self.name,
            "created": rfc3339nano(self.created),
            "config": self.cfg.to_json(dynamic),
            "delivered": delivered,
            "ack_floor": floor,
            "num_ack_pending": len(self.pending),
            "num_redelivered": sum(1 for s, n in self.rdc.items() if n > 1 and s in self.pending),
            "num_waiting": len(self.waiting),
            "num_pending": self.checked_num_pending(),
        }
        if cluster is not None:  # (in a cluster: its name and the leader)
            info["cluster"] = cluster
        if push_bound and self.cfg.deliver_subject:
            info["push_bound"] = True
        pause_ns = self.pause_ns
        if pause_ns is not None and now < pause_ns:
            info["paused"] = True
            info["pause_remaining"] = pause_ns - now
        info["ts"] = rfc3339nano(clock.now_ns())
        if self.cfg.priority_groups:  # (nats-server reports the first group only)
            state: dict = {"group": self.cfg.priority_groups[0]}
            if self.pin_id:
                state["pinned_client_id"] = self.pin_id
            state["pinned_ts"] = rfc3339nano(self.pinned_ts) if self.pinned_ts else gotime.ZERO
            info["priority_groups"] = [state]
        return info
