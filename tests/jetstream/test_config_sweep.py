"""A differential sweep of the JetStream API's configuration rules (single server): every
StreamConfig and ConsumerConfig field of a STREAM.CREATE, STREAM.UPDATE, CONSUMER.CREATE,
DURABLE.CREATE and a consumer update set to representative values (valid, 0, negative, huge,
the wrong JSON type, conflicting combinations), and the ``action`` field's create/update rules.
Each case starts from no streams: its setup requests, then the request compared, then every
stream deleted. The answers, with times and server identities masked (``_masked``), were
recorded from nats-server 2.15.1 in data/config_sweep_nats_server_2.15.1.json
(``python -m tests.jetstream.test_config_sweep`` records them again); natserver must give them
(but for KNOWN_DIFFERENCES, named with their reasons), and a live 2.15.1, when installed
(NATS_SERVER_REFERENCE), must still give them."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import PipelinedClient, assert_nats_server_matches, claimed, record
from tests.reference import needs_nats_server

RECORDED = Path(__file__).with_name("data") / "config_sweep_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'

SECOND = 1_000_000_000  # ns
DELETE_POLLS, DELETE_POLL_INTERVAL = 100, 0.02  # up to 2 s for a deleted stream to go
STORE_RETRIES = 5  # a case is run again while 2.15.1 could not create a store (STORE_NOT_READY)
STORE_NOT_READY = b'"description":"error creating store for stream"'
HUGE = 2**63 - 1  # Go's max int64
TOO_BIG = 2**64  # past int64: Go's json refuses it
BASE = {"name": "S", "subjects": ["s.>"]}  # the stream most cases start from

# Values any numeric field is tried with; strings and booleans are the wrong JSON type.
NUMBERS = (0, 1, -1, -2, HUGE, TOO_BIG, "5", True, 1.5)
FLAGS = (True, False, 1, "true")

# What differs between two servers' answers to the same request, and is not configuration:
# times, the server's identity and name, a cluster's name.
_MASKED_KEYS = {"created", "ts", "first_ts", "last_ts", "last_active", "server_id", "server_name", "cluster",
                "time", "now", "pause_remaining", "active"}


def _masked(value):
    if isinstance(value, dict):
        return {k: ("<masked>" if k in _MASKED_KEYS else _masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _stream_create(config: dict, name: str = "S") -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", config


def _stream_update(config: dict, name: str = "S") -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", config


def _consumer_create(config: dict, stream: str = "S", action: str | None = None) -> tuple[str, dict]:
    """CONSUMER.CREATE.<stream>.<name> (the name in the subject when the config names one that
    can be a subject's token; a name with a space or a wildcard goes in the body only)."""
    name = config.get("name") or config.get("durable_name")
    body: dict = {"stream_name": stream, "config": config}
    if action is not None:
        body["action"] = action
    token = isinstance(name, str) and name and not any(c in name for c in " .*>")
    return f"$JS.API.CONSUMER.CREATE.{stream}" + (f".{name}" if token else ""), body


def _durable_create(config: dict, stream: str = "S") -> tuple[str, dict]:
    return f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{config['durable_name']}", {"stream_name": stream, "config": config}


def _stream_cases() -> list[tuple[str, list, tuple]]:
    """(name, setup requests, the request) for the stream fields."""
    cases: list[tuple[str, list, tuple]] = []

    def create(label: str, /, **fields) -> None:
        cases.append((f"stream create: {label}", [], _stream_create({**BASE, **fields})))

    def update(label: str, before: dict | None = None, /, **fields) -> None:
        start = {**BASE, **(before or {})}
        cases.append((f"stream update: {label}", [_stream_create(start)], _stream_update({**start, **fields})))

    for field in ("max_consumers", "max_msgs", "max_bytes", "max_age", "max_msgs_per_subject", "max_msg_size",
                  "duplicate_window", "num_replicas", "first_seq", "subject_delete_marker_ttl"):
        for value in NUMBERS:
            if field == "first_seq" and value == HUGE:
                continue  # (2.15.1 recreating S after such a stream sometimes starts at 2**62-1)
            create(f"{field}={value!r}", **{field: value})
        for value in (0, 5, -1, HUGE):
            update(f"{field} to {value!r}", **{field: value})
        update(f"{field} from 5 to 0", {field: 5}, **{field: 0})
    for field in ("no_ack", "allow_direct", "mirror_direct", "discard_new_per_subject", "sealed", "deny_delete",
                  "deny_purge", "allow_rollup_hdrs", "allow_msg_ttl", "allow_msg_counter", "allow_msg_schedules",
                  "allow_atomic", "allow_batched"):
        for value in FLAGS:
            create(f"{field}={value!r}", **{field: value})
        update(f"{field} on", **{field: True})
        update(f"{field} off", {field: True}, **{field: False})
    for field, values in {
        "retention": ("limits", "interest", "workqueue", "other", "", 1),
        "discard": ("old", "new", "other", "", 1),
        "storage": ("file", "memory", "other", "", 1),
        "compression": ("none", "s2", "other", "", 1),
        "persist_mode": ("default", "async", "other", ""),
        "name": ("S", "T", "", "a.b", "a b", "a*", 5),
        "description": ("d", "", 5, "x" * 5000),
        "subjects": ([], ["s.>", "s.a"], ["s.*", "s.>"], ["a b"], ["s..a"], [""], "s.>", [5], ["$JS.API.>"],
                     [">"], ["_INBOX.>"], ["s.>", "s.>"]),
        "metadata": ({}, {"a": "b"}, {"a": 5}, [], "x", {"_nats.level": "9"}),
        "placement": ({}, {"cluster": "C"}, {"tags": ["t"]}, {"cluster": "", "tags": []}, "C", {"preferred": "n"}),
        "consumer_limits": ({}, {"inactive_threshold": SECOND}, {"max_ack_pending": 5}, {"max_ack_pending": -1},
                            {"inactive_threshold": -1}, {"other": 1}),
        "republish": ({"src": "s.>", "dest": "r.>"}, {"src": ">", "dest": "s.>"}, {"dest": "r.>"}, {"src": "s.>"},
                      {"src": "s.>", "dest": "r.>", "headers_only": True}, {"src": "x.>", "dest": "r.>"},
                      {"src": "s.*", "dest": "r.*"}, "r", {}),
        "subject_transform": ({"src": "s.>", "dest": "t.>"}, {"src": "s.*", "dest": "t.$1"}, {"dest": "t.>"},
                              {"src": "s.>"}, {}, {"src": "s.>", "dest": "s.>"}, {"src": "x.>", "dest": "t.>"}),
        "template_owner": ("T", ""),
    }.items():
        for value in values:
            create(f"{field}={value!r}"[:120], **{field: value})
    for field, (before, after) in {
        "retention": ("limits", "interest"), "storage": ("file", "memory"), "discard": ("old", "new"),
        "compression": ("none", "s2"), "name": ("S", "T"), "description": ("a", "b"),
        "subjects": (["s.>"], ["s.a", "s.b"]), "metadata": ({"a": "b"}, {"c": "d"}),
        "placement": (None, {"cluster": "C"}), "template_owner": ("", "T"),
        "persist_mode": ("default", "async"), "republish": (None, {"src": "s.>", "dest": "r.>"}),
        "subject_transform": (None, {"src": "s.>", "dest": "t.>"}),
        "consumer_limits": (None, {"max_ack_pending": 5}),
    }.items():
        start = {field: before} if before is not None else {}
        update(f"{field} {before!r} to {after!r}", start, **{field: after})
        update(f"{field} {after!r} to {before!r}", {field: after}, **({field: before} if before is not None else {}))
    for (first, second) in (("retention", "workqueue"), ("retention", "interest")):
        update(f"{first} {second} to limits", {first: second}, **{first: "limits"})
    update("workqueue to interest", {"retention": "workqueue"}, retention="interest")
    update("mirror added", mirror={"name": "O"})
    update("sources added", sources=[{"name": "O"}])
    update("sealed then unsealed", {}, sealed=True)
    update("allow_msg_ttl off from on", {"allow_msg_ttl": True}, allow_msg_ttl=False)
    update("deny_delete off from on", {"deny_delete": True}, deny_delete=False)
    update("deny_purge off from on", {"deny_purge": True}, deny_purge=False)
    update("allow_msg_counter off from on", {"allow_msg_counter": True}, allow_msg_counter=False)
    update("allow_msg_schedules off from on", {"allow_msg_schedules": True}, allow_msg_schedules=False)
    update("allow_atomic off from on", {"allow_atomic": True}, allow_atomic=False)
    update("subject_delete_marker_ttl with ttl", {"allow_msg_ttl": True}, subject_delete_marker_ttl=SECOND)
    cases.append(("stream update: a name different from the subject", [_stream_create(BASE)],
                  _stream_update({**BASE, "name": "T"})))
    cases.append(("stream update: missing stream", [], _stream_update(BASE)))
    cases.append(("stream update: sealed stream changed", [_stream_create(BASE), _stream_update({**BASE, "sealed": True})],
                  _stream_update({**BASE, "sealed": True, "max_msgs": 5})))
    cases.append(("stream create: subject name mismatch", [], _stream_create(BASE, name="T")))
    cases.append(("stream create: no body", [], ("$JS.API.STREAM.CREATE.S", b"")))
    cases.append(("stream create: not JSON", [], ("$JS.API.STREAM.CREATE.S", b"nope")))
    cases.append(("stream create: twice the same", [_stream_create(BASE)], _stream_create(BASE)))
    cases.append(("stream create: twice, different", [_stream_create(BASE)], _stream_create({**BASE, "max_msgs": 5})))
    cases.append(("stream create: overlapping subjects", [_stream_create({"name": "O", "subjects": ["s.a"]}, "O")],
                  _stream_create(BASE)))
    # conflicting combinations
    for name, fields in {
        "discard_new_per_subject without discard new": {"discard_new_per_subject": True, "max_msgs_per_subject": 1},
        "discard_new_per_subject without max_msgs_per_subject": {"discard_new_per_subject": True, "discard": "new"},
        "discard_new_per_subject complete": {"discard_new_per_subject": True, "discard": "new", "max_msgs_per_subject": 1},
        "workqueue with max_msgs_per_subject": {"retention": "workqueue", "max_msgs_per_subject": 1},
        "mirror with subjects": {"mirror": {"name": "O"}},
        "mirror and sources": {"subjects": None, "mirror": {"name": "O"}, "sources": [{"name": "P"}]},
        "mirror with first_seq": {"subjects": None, "mirror": {"name": "O"}, "first_seq": 5},
        "mirror with subject_transform": {"subjects": None, "mirror": {"name": "O"},
                                          "subject_transform": {"src": ">", "dest": "m.>"}},
        "mirror with republish": {"subjects": None, "mirror": {"name": "O"}, "republish": {"src": ">", "dest": "m.>"}},
        "mirror with a filter": {"subjects": None, "mirror": {"name": "O", "filter_subject": "o.a"}},
        "mirror with opt_start_seq": {"subjects": None, "mirror": {"name": "O", "opt_start_seq": 3}},
        "mirror without name": {"subjects": None, "mirror": {}},
        "mirror of itself": {"subjects": None, "mirror": {"name": "S"}},
        "mirror with allow_msg_ttl": {"subjects": None, "mirror": {"name": "O"}, "allow_msg_ttl": True},
        "mirror with marker ttl": {"subjects": None, "mirror": {"name": "O"}, "subject_delete_marker_ttl": SECOND},
        "mirror with counters": {"subjects": None, "mirror": {"name": "O"}, "allow_msg_counter": True},
        "mirror with schedules": {"subjects": None, "mirror": {"name": "O"}, "allow_msg_schedules": True},
        "mirror with atomic": {"subjects": None, "mirror": {"name": "O"}, "allow_atomic": True},
        "mirror with mirror_direct": {"subjects": None, "mirror": {"name": "O"}, "mirror_direct": True},
        "mirror with sealed": {"subjects": None, "mirror": {"name": "O"}, "sealed": True},
        "sources with a filter": {"sources": [{"name": "O", "filter_subject": "o.a"}]},
        "sources with a filter and transforms": {"sources": [{"name": "O", "filter_subject": "o.a",
                                                              "subject_transforms": [{"src": "o.a", "dest": "x"}]}]},
        "sources with transforms": {"sources": [{"name": "O", "subject_transforms": [{"src": "o.>", "dest": "x.>"}]}]},
        "sources: the same twice": {"sources": [{"name": "O"}, {"name": "O"}]},
        "sources: the same twice, filters": {"sources": [{"name": "O", "filter_subject": "o.a"},
                                                         {"name": "O", "filter_subject": "o.b"}]},
        "sources: without name": {"sources": [{}]},
        "sources: itself": {"sources": [{"name": "S"}]},
        "sources: not a list": {"sources": {"name": "O"}},
        "sources with external": {"sources": [{"name": "O", "external": {"api": "$JS.x.API", "deliver": ""}}]},
        "sources with domain": {"sources": [{"name": "O", "domain": "D"}]},
        "sources with an opt_start_time": {"sources": [{"name": "O", "opt_start_time": "2024-01-01T00:00:00Z"}]},
        "sources with an invalid filter": {"sources": [{"name": "O", "filter_subject": "o..a"}]},
        "counters and ttl": {"allow_msg_counter": True, "allow_msg_ttl": True},
        "counters and discard new": {"allow_msg_counter": True, "discard": "new"},
        "counters with workqueue": {"allow_msg_counter": True, "retention": "workqueue"},
        "counters with interest": {"allow_msg_counter": True, "retention": "interest"},
        "marker ttl without allow_msg_ttl": {"subject_delete_marker_ttl": SECOND},
        "marker ttl under a second": {"subject_delete_marker_ttl": 1000, "allow_msg_ttl": True},
        "marker ttl with ttl": {"subject_delete_marker_ttl": SECOND, "allow_msg_ttl": True},
        "marker ttl negative": {"subject_delete_marker_ttl": -1, "allow_msg_ttl": True},
        "marker ttl with deny_purge": {"subject_delete_marker_ttl": SECOND, "allow_msg_ttl": True, "deny_purge": True},
        "marker ttl with rollups off": {"subject_delete_marker_ttl": SECOND, "allow_msg_ttl": True,
                                        "allow_rollup_hdrs": False},
        "sealed at create": {"sealed": True},
        "sealed with deny_delete": {"sealed": True, "deny_delete": True},
        "max_age under the duplicate window": {"max_age": SECOND, "duplicate_window": 2 * SECOND},
        "max_age 100ms": {"max_age": SECOND // 10},
        "max_age 999ms": {"max_age": SECOND - 1},
        "max_msg_size over max_bytes": {"max_msg_size": 100, "max_bytes": 50},
        "max_bytes over the account": {"max_bytes": HUGE},
        "memory with s2": {"storage": "memory", "compression": "s2"},
        "memory with async": {"storage": "memory", "persist_mode": "async"},
        "interest with discard new": {"retention": "interest", "discard": "new", "max_msgs": 1},
        "workqueue with discard new per subject": {"retention": "workqueue", "discard": "new",
                                                   "discard_new_per_subject": True, "max_msgs_per_subject": 1},
        "allow_direct with mirror_direct": {"allow_direct": True, "mirror_direct": True},
        "atomic and async": {"allow_atomic": True, "persist_mode": "async"},
        "batched and async": {"allow_batched": True, "persist_mode": "async"},
        "schedules and ttl": {"allow_msg_schedules": True, "allow_msg_ttl": True},
        "num_replicas 3": {"num_replicas": 3},
        "num_replicas 6": {"num_replicas": 6},
        "republish cycle": {"subjects": ["s.>", "r.>"], "republish": {"src": "s.>", "dest": "r.>"}},
        "transform and republish": {"subject_transform": {"src": "s.>", "dest": "t.>"},
                                    "republish": {"src": "t.>", "dest": "r.>"}},
        "unknown field": {"other_field": 5},
        "consumer_limits with max_ack_pending 0": {"consumer_limits": {"max_ack_pending": 0}},
    }.items():
        config = {**BASE, **fields}
        if config.get("subjects") is None:
            config.pop("subjects")
        source = [_stream_create({"name": "O", "subjects": ["o.>"]}, "O"), _stream_create({"name": "P", "subjects": ["p.>"]}, "P")]
        cases.append((f"stream create: {name}", source, _stream_create(config)))
    return cases


# Consumer fields tried on a fresh durable (CONSUMER.CREATE), and what each takes.
_CONSUMER_VALUES: dict[str, tuple] = {
    "deliver_policy": ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject", "other", "", 1),
    "opt_start_seq": (0, 1, -1, HUGE, "1"),
    "opt_start_time": ("2024-01-01T00:00:00Z", "yesterday", "", 5),
    "ack_policy": ("none", "all", "explicit", "other", "", 1),
    "ack_wait": (0, SECOND, -1, 1, HUGE, "1s"),
    "max_deliver": (0, 1, -1, -2, 5, HUGE),
    "backoff": ([], [SECOND], [SECOND, 2 * SECOND], [-1], [0], "1s", [SECOND, SECOND // 2]),
    "filter_subject": ("s.a", "s.*", ">", "x.a", "", "s..a", "s.a b", 5),
    "filter_subjects": ([], ["s.a"], ["s.a", "s.b"], ["s.a", "s.*"], ["s.a", "s.a"], ["x.a"], [""], ["s.>", "s.a.b"],
                        "s.a", [5]),
    "replay_policy": ("instant", "original", "other", ""),
    "rate_limit_bps": (0, 1, -1, HUGE),
    "sample_freq": ("50", "50%", "abc", "", "101%", "0", "-1"),
    "max_waiting": (0, 1, -1, HUGE, "5"),
    "max_ack_pending": (0, 1, -1, -2, HUGE),
    "flow_control": (True, False, "true"),
    "headers_only": (True, False, 1),
    "max_batch": (0, 1, -1, HUGE),
    "max_expires": (0, SECOND, 999_999, -1, HUGE),
    "max_bytes": (0, 1, -1, HUGE),
    "deliver_subject": ("d.x", "", "d.*", "s.a", "d x", 5),
    "deliver_group": ("g", "", "g.x"),
    "idle_heartbeat": (0, SECOND, 1, -1, HUGE),
    "inactive_threshold": (0, SECOND, -1, 1, HUGE),
    "num_replicas": (0, 1, 3, -1, 6),
    "mem_storage": (True, False, 1),
    "direct": (True, False),
    "metadata": ({}, {"a": "b"}, {"a": 5}, "x", {"_nats.level": "9"}),
    "pause_until": ("2030-01-01T00:00:00Z", "2020-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "soon", 5),
    "priority_groups": ([], ["g"], ["g", "h"], ["g", "g"], [""], ["g.h"], ["g" * 17], "g"),
    "priority_policy": ("none", "overflow", "pinned_client", "prioritized", "other", ""),
    "priority_timeout": (0, SECOND, -1),
    "description": ("d", "", "x" * 5000, 5),
    "name": ("C", "", "a.b", "a b", "a*", 5),
}

# Consumer field combinations: each a config on its own (durable C unless it names one).
_CONSUMER_COMBINATIONS: dict[str, dict] = {
    "push with max_waiting": {"deliver_subject": "d.x", "max_waiting": 5},
    "push with max_batch": {"deliver_subject": "d.x", "max_batch": 5},
    "push with max_expires": {"deliver_subject": "d.x", "max_expires": SECOND},
    "push with max_bytes": {"deliver_subject": "d.x", "max_bytes": 5},
    "push with heartbeat and flow control": {"deliver_subject": "d.x", "idle_heartbeat": SECOND, "flow_control": True},
    "push with priority groups": {"deliver_subject": "d.x", "priority_groups": ["g"], "priority_policy": "overflow"},
    "push with a group": {"deliver_subject": "d.x", "deliver_group": "g"},
    "push with rate limit": {"deliver_subject": "d.x", "rate_limit_bps": 1000},
    "push with ack none and max_ack_pending": {"deliver_subject": "d.x", "ack_policy": "none", "max_ack_pending": 5},
    "pull with a deliver group": {"deliver_group": "g"},
    "pull with heartbeat": {"idle_heartbeat": SECOND},
    "pull with flow control": {"flow_control": True},
    "pull ack none": {"ack_policy": "none"},
    "max_deliver with backoff longer": {"max_deliver": 2, "backoff": [SECOND, SECOND, SECOND]},
    "max_deliver with backoff equal": {"max_deliver": 3, "backoff": [SECOND, SECOND]},
    "max_deliver with backoff shorter": {"max_deliver": 5, "backoff": [SECOND]},
    "backoff with ack none": {"ack_policy": "none", "backoff": [SECOND]},
    "backoff and ack_wait": {"ack_wait": 5 * SECOND, "backoff": [SECOND]},
    "filter_subject and filter_subjects": {"filter_subject": "s.a", "filter_subjects": ["s.b"]},
    "filter_subject equal to filter_subjects": {"filter_subject": "s.a", "filter_subjects": ["s.a"]},
    "deliver by_start_sequence without one": {"deliver_policy": "by_start_sequence"},
    "deliver by_start_time without one": {"deliver_policy": "by_start_time"},
    "deliver all with a start sequence": {"opt_start_seq": 3},
    "deliver all with a start time": {"opt_start_time": "2024-01-01T00:00:00Z"},
    "deliver last with a start sequence": {"deliver_policy": "last", "opt_start_seq": 3},
    "by start sequence with a time": {"deliver_policy": "by_start_sequence", "opt_start_seq": 3,
                                      "opt_start_time": "2024-01-01T00:00:00Z"},
    "last_per_subject without a filter": {"deliver_policy": "last_per_subject"},
    "last_per_subject with a filter": {"deliver_policy": "last_per_subject", "filter_subject": "s.a"},
    "last_per_subject with filters": {"deliver_policy": "last_per_subject", "filter_subjects": ["s.a", "s.b"]},
    "replay original with a pull": {"replay_policy": "original"},
    "headers_only with max_bytes": {"headers_only": True, "max_bytes": 10},
    "priority groups without a policy": {"priority_groups": ["g"]},
    "priority policy without groups": {"priority_policy": "overflow"},
    "pinned with a timeout": {"priority_groups": ["g"], "priority_policy": "pinned_client",
                              "priority_timeout": SECOND},
    "overflow with a timeout": {"priority_groups": ["g"], "priority_policy": "overflow", "priority_timeout": SECOND},
    "prioritized groups": {"priority_groups": ["g"], "priority_policy": "prioritized"},
    "ack all with max_ack_pending": {"ack_policy": "all", "max_ack_pending": 3},
    "inactive threshold on a durable": {"inactive_threshold": SECOND},
    "durable and name differ": {"durable_name": "C", "name": "D"},
    "mem_storage and replicas": {"mem_storage": True, "num_replicas": 1},
    "max_ack_pending over the stream's limit": {"max_ack_pending": 50, "_stream": {"consumer_limits": {"max_ack_pending": 10}}},
    "inactive over the stream's limit": {"inactive_threshold": 10 * SECOND,
                                         "_stream": {"consumer_limits": {"inactive_threshold": SECOND}}},
    "replicas over the stream's": {"num_replicas": 3},
}

# A consumer update's start, and what changes (update rules: what may not change).
_CONSUMER_UPDATES: dict[str, tuple[dict, dict]] = {
    "description": ({}, {"description": "new"}),
    "deliver_policy": ({}, {"deliver_policy": "new"}),
    "opt_start_seq": ({"deliver_policy": "by_start_sequence", "opt_start_seq": 1}, {"opt_start_seq": 2}),
    "opt_start_time": ({"deliver_policy": "by_start_time", "opt_start_time": "2024-01-01T00:00:00Z"},
                       {"opt_start_time": "2024-01-02T00:00:00Z"}),
    "ack_policy": ({}, {"ack_policy": "all"}),
    "ack_wait": ({}, {"ack_wait": 5 * SECOND}),
    "max_deliver": ({}, {"max_deliver": 5}),
    "max_deliver lowered": ({"max_deliver": 5}, {"max_deliver": 2}),
    "backoff": ({"max_deliver": 5}, {"backoff": [SECOND]}),
    "backoff removed": ({"max_deliver": 5, "backoff": [SECOND]}, {"backoff": None}),
    "filter_subject": ({"filter_subject": "s.a"}, {"filter_subject": "s.b"}),
    "filter_subject to filter_subjects": ({"filter_subject": "s.a"}, {"filter_subject": "", "filter_subjects": ["s.a", "s.b"]}),
    "filter_subjects": ({"filter_subjects": ["s.a", "s.b"]}, {"filter_subjects": ["s.c"]}),
    "replay_policy": ({}, {"replay_policy": "original"}),
    "rate_limit_bps": ({"deliver_subject": "d.x"}, {"rate_limit_bps": 1000}),
    "sample_freq": ({}, {"sample_freq": "50%"}),
    "max_waiting": ({}, {"max_waiting": 5}),
    "max_ack_pending": ({}, {"max_ack_pending": 5}),
    "max_ack_pending -1": ({}, {"max_ack_pending": -1}),
    "flow_control": ({"deliver_subject": "d.x", "idle_heartbeat": SECOND}, {"flow_control": True}),
    "headers_only": ({}, {"headers_only": True}),
    "max_batch": ({}, {"max_batch": 5}),
    "max_expires": ({}, {"max_expires": SECOND}),
    "max_bytes": ({}, {"max_bytes": 5}),
    "deliver_subject on a pull": ({}, {"deliver_subject": "d.x"}),
    "deliver_subject changed": ({"deliver_subject": "d.x"}, {"deliver_subject": "d.y"}),
    "deliver_subject removed": ({"deliver_subject": "d.x"}, {"deliver_subject": ""}),
    "deliver_group": ({"deliver_subject": "d.x"}, {"deliver_group": "g"}),
    "idle_heartbeat": ({"deliver_subject": "d.x"}, {"idle_heartbeat": SECOND}),
    "inactive_threshold": ({}, {"inactive_threshold": 5 * SECOND}),
    "num_replicas": ({}, {"num_replicas": 1}),
    "num_replicas 3": ({}, {"num_replicas": 3}),
    "mem_storage": ({}, {"mem_storage": True}),
    "metadata": ({"metadata": {"a": "b"}}, {"metadata": {"c": "d"}}),
    "pause_until": ({}, {"pause_until": "2030-01-01T00:00:00Z"}),
    "priority_groups": ({"priority_groups": ["g"], "priority_policy": "overflow"}, {"priority_groups": ["h"]}),
    "priority_policy": ({"priority_groups": ["g"], "priority_policy": "overflow"}, {"priority_policy": "pinned_client"}),
    "priority_timeout": ({"priority_groups": ["g"], "priority_policy": "pinned_client"}, {"priority_timeout": SECOND}),
    "durable_name": ({}, {"durable_name": "D", "name": "D"}),
    "direct": ({}, {"direct": True}),
}


def _consumer_cases() -> list[tuple[str, list, tuple]]:
    cases: list[tuple[str, list, tuple]] = []
    stream = [_stream_create(BASE)]
    for field, values in _CONSUMER_VALUES.items():
        for value in values:
            config = {"durable_name": "C", "ack_policy": "explicit", field: value}
            if field == "deliver_policy" and value == "by_start_sequence":
                config["opt_start_seq"] = 1
            if field == "deliver_policy" and value == "by_start_time":
                config["opt_start_time"] = "2024-01-01T00:00:00Z"
            if field in ("name", "durable_name"):
                config.pop("durable_name")
            label = f"{field}={value!r}"[:120]
            cases.append((f"consumer create: {label}", stream, _consumer_create(config)))
    for field in ("ack_policy", "deliver_policy", "max_deliver", "filter_subject", "inactive_threshold", "ack_wait"):
        for value in _CONSUMER_VALUES[field][:4]:
            config = {"durable_name": "C", field: value}
            if field == "deliver_policy" and value == "by_start_sequence":
                config["opt_start_seq"] = 1
            cases.append((f"durable create: {field}={value!r}", stream, _durable_create(config)))
            ephemeral = {"ack_policy": "explicit", field: value}
            if field == "deliver_policy" and value == "by_start_sequence":
                ephemeral["opt_start_seq"] = 1
            cases.append((f"ephemeral create: {field}={value!r}", stream, _consumer_create(ephemeral)))
    for name, config in _CONSUMER_COMBINATIONS.items():
        config = dict(config)
        setup = [_stream_create({**BASE, **config.pop("_stream", {})})]
        if "durable_name" not in config and "name" not in config:
            config["durable_name"] = "C"
        config.setdefault("ack_policy", "explicit")
        cases.append((f"consumer create: {name}", setup, _consumer_create(config)))
    for name, (before, change) in _CONSUMER_UPDATES.items():
        start = {"durable_name": "C", "ack_policy": "explicit", **before}
        after = {k: v for k, v in {**start, **change}.items() if v is not None}
        cases.append((f"consumer update: {name}", [*stream, _consumer_create(start)], _consumer_create(after)))
        cases.append((f"consumer update by action: {name}", [*stream, _consumer_create(start)],
                      _consumer_create(after, action="update")))
        cases.append((f"durable update: {name}", [*stream, _durable_create(start)], _durable_create(after)))
    # action: create/update/"" semantics
    base = {"durable_name": "C", "ack_policy": "explicit"}
    for action in ("create", "update", "", "other", 5):
        cases.append((f"action {action!r}: no consumer", stream, _consumer_create(base, action=action)))  # type: ignore[arg-type]
        cases.append((f"action {action!r}: the same consumer", [*stream, _consumer_create(base)],
                      _consumer_create(base, action=action)))  # type: ignore[arg-type]
        cases.append((f"action {action!r}: a changed consumer", [*stream, _consumer_create(base)],
                      _consumer_create({**base, "max_deliver": 5}, action=action)))  # type: ignore[arg-type]
    cases.append(("action update: an ephemeral", stream, _consumer_create({"ack_policy": "explicit"}, action="update")))
    cases.append(("consumer create: name in the subject differs", stream,
                  ("$JS.API.CONSUMER.CREATE.S.X", {"stream_name": "S", "config": {"durable_name": "C"}})))
    cases.append(("consumer create: filter in the subject", stream,
                  ("$JS.API.CONSUMER.CREATE.S.C.s.a", {"stream_name": "S", "config": {"durable_name": "C"}})))
    cases.append(("consumer create: filter in the subject differs", stream,
                  ("$JS.API.CONSUMER.CREATE.S.C.s.a", {"stream_name": "S", "config": {"durable_name": "C",
                                                                                      "filter_subject": "s.b"}})))
    cases.append(("consumer create: stream_name differs", stream,
                  ("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "T", "config": {"durable_name": "C"}})))
    cases.append(("consumer create: no stream", [], _consumer_create(base)))
    cases.append(("consumer create: no config", stream, ("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S"})))
    cases.append(("consumer create: not JSON", stream, ("$JS.API.CONSUMER.CREATE.S.C", b"nope")))
    cases.append(("durable create: no durable_name", stream,
                  ("$JS.API.CONSUMER.DURABLE.CREATE.S.C", {"stream_name": "S", "config": {"ack_policy": "explicit"}})))
    cases.append(("durable create: durable_name differs", stream,
                  ("$JS.API.CONSUMER.DURABLE.CREATE.S.C", {"stream_name": "S", "config": {"durable_name": "D"}})))
    cases.append(("consumer create: max_consumers reached", [_stream_create({**BASE, "max_consumers": 1}),
                                                             _consumer_create(base)],
                  _consumer_create({**base, "durable_name": "D"})))
    cases.append(("consumer create: on a mirror", [_stream_create(BASE), _stream_create({"name": "M", "mirror": {"name": "S"}}, "M")],
                  _consumer_create({**base, "filter_subject": "s.a"}, stream="M")))
    cases.append(("consumer create: filter not in the stream", stream,
                  _consumer_create({**base, "filter_subject": "x.y"})))
    cases.append(("consumer create: workqueue, two overlapping",
                  [_stream_create({**BASE, "retention": "workqueue"}), _consumer_create({**base, "filter_subject": "s.a"})],
                  _consumer_create({**base, "durable_name": "D", "filter_subject": "s.*"})))
    cases.append(("consumer create: interest, deliver new", [_stream_create({**BASE, "retention": "interest"})],
                  _consumer_create({**base, "deliver_policy": "new"})))
    return cases


def _more_cases() -> list[tuple[str, list, tuple]]:
    """Pedantic requests (2.11+: a default that would change the request is refused), and
    updates and creates that depend on other streams or consumers."""
    cases: list[tuple[str, list, tuple]] = []
    stream = [_stream_create(BASE)]
    base = {"durable_name": "C", "ack_policy": "explicit"}
    for name, fields in {
        "max_msgs -2": {"max_msgs": -2}, "max_bytes -2": {"max_bytes": -2}, "max_consumers -2": {"max_consumers": -2},
        "max_msg_size -2": {"max_msg_size": -2}, "max_msgs_per_subject -2": {"max_msgs_per_subject": -2},
        "max_age under the duplicate window": {"max_age": SECOND},
        "republish without source": {"republish": {"dest": "r.>"}},
        "implicit republish": {"subject_transform": {"src": "s.>", "dest": "t.>"}, "republish": {"src": ">", "dest": ">"}},
        "marker ttl without allow_msg_ttl": {"subject_delete_marker_ttl": SECOND},
        "marker ttl without rollups": {"subject_delete_marker_ttl": SECOND, "allow_msg_ttl": True},
        "schedules without rollups": {"allow_msg_schedules": True},
        "defaults only": {},
        "pedantic false": {"pedantic": False},
    }.items():
        config = {**BASE, "pedantic": True, **fields}
        cases.append((f"pedantic stream create: {name}", [], _stream_create(config)))
        cases.append((f"pedantic stream update: {name}", stream, _stream_update(config)))
    for name, fields in {
        "max_deliver -2": {"max_deliver": -2}, "max_waiting -1": {"max_waiting": -1},
        "max_ack_pending -2": {"max_ack_pending": -2}, "max_batch -1": {"max_batch": -1},
        "max_expires -1": {"max_expires": -1}, "max_bytes -1": {"max_bytes": -1},
        "idle_heartbeat -1": {"idle_heartbeat": -1}, "inactive_threshold -1": {"inactive_threshold": -1},
        "priority_timeout -1": {"priority_timeout": -1, "priority_groups": ["g"], "priority_policy": "pinned_client"},
        "backoff without its ack_wait": {"backoff": [SECOND], "max_deliver": 5},
        "backoff with its ack_wait": {"backoff": [SECOND], "max_deliver": 5, "ack_wait": SECOND},
        "defaults only": {},
    }.items():
        body = {"stream_name": "S", "config": {**base, **fields}, "pedantic": True}
        cases.append((f"pedantic consumer create: {name}", stream, ("$JS.API.CONSUMER.CREATE.S.C", body)))
    limits = [_stream_create({**BASE, "consumer_limits": {"max_ack_pending": 10, "inactive_threshold": SECOND}})]
    cases.append(("pedantic consumer create: under stream limits, none set", limits,
                  ("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": base, "pedantic": True})))
    cases.append(("pedantic consumer create: stream limits set", limits,
                  ("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "pedantic": True, "config": {
                      **base, "max_ack_pending": 5, "inactive_threshold": SECOND // 2}})))
    other = _stream_create({"name": "O", "subjects": ["o.>"]}, "O")
    for name, (setup, request) in {
        "update: subjects overlapping another stream": ([*stream, other], _stream_update({**BASE, "subjects": ["s.>", "o.a"]})),
        "update: mirror removed": ([other, _stream_create({"name": "S", "mirror": {"name": "O"}})],
                                   _stream_update({"name": "S"})),
        "update: mirror changed": ([other, _stream_create({"name": "S", "mirror": {"name": "O"}})],
                                   _stream_update({"name": "S", "mirror": {"name": "O", "filter_subject": "o.a"}})),
        "update: mirror subjects added": ([other, _stream_create({"name": "S", "mirror": {"name": "O"}})],
                                          _stream_update({"name": "S", "mirror": {"name": "O"}, "subjects": ["m"]})),
        "update: sources changed": ([other, _stream_create({**BASE, "sources": [{"name": "O"}]})],
                                    _stream_update({**BASE, "sources": [{"name": "O", "filter_subject": "o.a"}]})),
        "update: sources removed": ([other, _stream_create({**BASE, "sources": [{"name": "O"}]})], _stream_update(BASE)),
        "update: max_msgs_per_subject on workqueue": ([_stream_create({**BASE, "retention": "workqueue"})],
                                                      _stream_update({**BASE, "retention": "workqueue",
                                                                      "max_msgs_per_subject": 1})),
        "update: discard_new_per_subject": ([*stream], _stream_update({**BASE, "discard": "new", "max_msgs_per_subject": 1,
                                                                       "discard_new_per_subject": True})),
        "update: max_age under the duplicate window": ([*stream], _stream_update({**BASE, "max_age": SECOND})),
        "update: duplicate_window over max_age": ([_stream_create({**BASE, "max_age": 10 * SECOND})],
                                                  _stream_update({**BASE, "max_age": 10 * SECOND,
                                                                  "duplicate_window": 20 * SECOND})),
        "update: no body": ([*stream], ("$JS.API.STREAM.UPDATE.S", b"")),
        "update: first_seq changed": ([*stream], _stream_update({**BASE, "first_seq": 10})),
        "update: consumer_limits under a consumer": ([*stream, _consumer_create({**base, "max_ack_pending": 50})],
                                                     _stream_update({**BASE, "consumer_limits": {"max_ack_pending": 10}})),
        "consumer on a sealed stream": ([*stream, _stream_update({**BASE, "sealed": True})], _consumer_create(base)),
        "consumer on a mirror, no filter": ([other, _stream_create({"name": "M", "mirror": {"name": "O"}}, "M")],
                                            _consumer_create(base, stream="M")),
        "consumer: sourcing field": ([*stream], _consumer_create({**base, "sourcing": {}})),
        "consumer: unknown field": ([*stream], _consumer_create({**base, "other": 1})),
        "consumer: unknown request field": ([*stream], ("$JS.API.CONSUMER.CREATE.S.C",
                                                         {"stream_name": "S", "config": base, "other": 1})),
        "consumer: metadata over the limit": ([*stream], _consumer_create({**base, "metadata": {"k": "v" * 140_000}})),
        "consumer: workqueue, update to overlap": (
            [_stream_create({**BASE, "retention": "workqueue"}), _consumer_create({**base, "filter_subject": "s.a"}),
             _consumer_create({**base, "durable_name": "D", "filter_subject": "s.b"})],
            _consumer_create({**base, "durable_name": "D", "filter_subject": "s.>"})),
        "consumer: interest stream, replicas 1": ([_stream_create({**BASE, "retention": "interest"})],
                                                  _consumer_create({**base, "num_replicas": 1})),
        "consumer: update a push to a group": ([*stream, _consumer_create({**base, "deliver_subject": "d.x"})],
                                               _consumer_create({**base, "deliver_subject": "d.x", "deliver_group": "g"})),
        "consumer: update the ack_wait under a backoff": (
            [*stream, _consumer_create({**base, "backoff": [SECOND, 2 * SECOND], "max_deliver": 5})],
            _consumer_create({**base, "backoff": [SECOND, 2 * SECOND], "max_deliver": 5, "ack_wait": 5 * SECOND})),
        "consumer: ephemeral with inactive threshold update": (
            [*stream], _consumer_create({"name": "E", "ack_policy": "explicit", "inactive_threshold": 10 * SECOND})),
        "consumer: durable create of an existing name with another config": (
            [*stream, _durable_create(base)], _durable_create({**base, "ack_policy": "all"})),
        "consumer: ack_policy flow_control": ([*stream], _consumer_create({**base, "ack_policy": "flow_control",
                                                                            "deliver_subject": "d.x"})),
    }.items():
        cases.append((name, setup, request))
    return cases


# Push consumer updates: a start, and what changes (the update rules of a push consumer).
_PUSH_UPDATES: dict[str, tuple[dict, dict]] = {
    "to pull": ({}, {"deliver_subject": ""}),
    "deliver_subject": ({}, {"deliver_subject": "d.y"}),
    "deliver_group added": ({}, {"deliver_group": "g"}),
    "deliver_group changed": ({"deliver_group": "g"}, {"deliver_group": "h"}),
    "deliver_group removed": ({"deliver_group": "g"}, {"deliver_group": ""}),
    "flow_control on": ({"idle_heartbeat": SECOND}, {"flow_control": True}),
    "flow_control off": ({"idle_heartbeat": SECOND, "flow_control": True}, {"flow_control": False}),
    "idle_heartbeat changed": ({"idle_heartbeat": SECOND}, {"idle_heartbeat": 2 * SECOND}),
    "idle_heartbeat removed": ({"idle_heartbeat": SECOND}, {"idle_heartbeat": 0}),
    "rate_limit_bps": ({}, {"rate_limit_bps": 1000}),
    "max_waiting": ({}, {"max_waiting": 5}),
    "headers_only": ({}, {"headers_only": True}),
    "replay_policy": ({}, {"replay_policy": "original"}),
    "ack_policy none to explicit": ({"ack_policy": "none"}, {"ack_policy": "explicit"}),
    "max_ack_pending with ack none": ({"ack_policy": "none"}, {"max_ack_pending": 5}),
    "inactive_threshold": ({}, {"inactive_threshold": 5 * SECOND}),
    "pause_until": ({}, {"pause_until": "2030-01-01T00:00:00Z"}),
    "sample_freq": ({}, {"sample_freq": "100%"}),
}


def _push_cases() -> list[tuple[str, list, tuple]]:
    cases: list[tuple[str, list, tuple]] = []
    stream = [_stream_create(BASE)]
    for name, (before, change) in _PUSH_UPDATES.items():
        start = {"durable_name": "C", "ack_policy": "explicit", "deliver_subject": "d.x", **before}
        cases.append((f"push update: {name}", [*stream, _consumer_create(start)], _consumer_create({**start, **change})))
    pull = {"durable_name": "C", "ack_policy": "explicit"}
    for name, change in {"to push": {"deliver_subject": "d.x"}, "max_waiting lowered": {"max_waiting": 1},
                         "max_waiting raised": {"max_waiting": 1000}, "max_batch": {"max_batch": 10},
                         "ack_policy explicit to none": {"ack_policy": "none"},
                         "ack_policy explicit to all": {"ack_policy": "all"},
                         "filter added": {"filter_subject": "s.a"},
                         "filters to one": {"filter_subjects": ["s.a"]},
                         "replicas 0 to 1": {"num_replicas": 1}, "mem_storage": {"mem_storage": True},
                         "priority groups added": {"priority_groups": ["g"], "priority_policy": "overflow"},
                         "backoff added": {"backoff": [SECOND], "max_deliver": 3},
                         "metadata removed": {"metadata": {}}}.items():
        cases.append((f"pull update: {name}", [*stream, _consumer_create({**pull, "metadata": {"a": "b"}})],
                      _consumer_create({**pull, "metadata": {"a": "b"}, **change})))
    # durable create on an existing durable (DURABLE.CREATE is create-or-update)
    cases.append(("durable create: the same again", [*stream, _durable_create(pull)], _durable_create(pull)))
    cases.append(("durable create: an ephemeral's name", [*stream, _consumer_create({"name": "E", "ack_policy": "explicit",
                                                                                       "inactive_threshold": SECOND})],
                  _durable_create({**pull, "durable_name": "E"})))
    cases.append(("consumer create: a durable's name as ephemeral", [*stream, _consumer_create(pull)],
                  ("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"name": "C", "ack_policy": "explicit"}})))
    cases.append(("consumer create: ephemeral with durable_name", stream,
                  ("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": pull})))
    cases.append(("consumer create: filter tokens in the subject", stream,
                  ("$JS.API.CONSUMER.CREATE.S.C.s.*", {"stream_name": "S", "config": {**pull, "filter_subject": "s.*"}})))
    cases.append(("consumer create: filter in the subject and filter_subjects", stream,
                  ("$JS.API.CONSUMER.CREATE.S.C.s.a", {"stream_name": "S", "config": {**pull, "filter_subjects": ["s.a"]}})))
    cases.append(("consumer create: stream info after two", [*stream, _consumer_create(pull),
                                                               _consumer_create({**pull, "durable_name": "D"})],
                  ("$JS.API.STREAM.INFO.S", b"")))
    cases.append(("consumer info after an update", [*stream, _consumer_create(pull),
                                                     _consumer_create({**pull, "description": "x", "max_deliver": 3})],
                  ("$JS.API.CONSUMER.INFO.S.C", b"")))
    cases.append(("stream info after an update", [*stream, _stream_update({**BASE, "max_msgs": 10, "description": "x"})],
                  ("$JS.API.STREAM.INFO.S", b"")))
    return cases


def cases() -> list[tuple[str, list, tuple]]:
    return _stream_cases() + _consumer_cases() + _more_cases() + _push_cases()


def _payload(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _answer(raw: bytes, body) -> object:
    """An answer as JSON with times and identities masked, an ephemeral consumer's random name
    masked, and a stream's sources in name order (2.15.1 lists them from a map)."""
    text = claimed(raw.decode(errors="replace"))
    try:
        answer = _masked(json.loads(text))
    except ValueError:
        return text
    if isinstance(answer, dict):
        config = body.get("config") if isinstance(body, dict) else None
        if isinstance(config, dict) and not (config.get("name") or config.get("durable_name")) and "name" in answer:
            answer["name"] = "<ephemeral>"
            if isinstance(answer.get("config"), dict) and "name" in answer["config"]:
                answer["config"]["name"] = "<ephemeral>"
        if isinstance(answer.get("sources"), list):
            answer["sources"].sort(key=lambda source: json.dumps(source, sort_keys=True))
    return answer


def run_script(port: int) -> dict:
    """Every case, one request at a time (nats-server answers JetStream requests from a pool of
    workers: a pipelined create and update could be answered out of order)."""
    client = PipelinedClient(port)

    def ask(subject: str, body) -> bytes:
        return client.batch([("req", subject, b"", _payload(body))])[0]

    def clear() -> None:
        for stream in json.loads(ask("$JS.API.STREAM.NAMES", b"")).get("streams") or []:
            ask(f"$JS.API.STREAM.DELETE.{stream}", b"")
        # (2.15.1 may answer a delete before the stream is gone: the next case's create of the
        # same name could then fail, so the next case waits until none is left)
        for _ in range(DELETE_POLLS):
            if not json.loads(ask("$JS.API.STREAM.NAMES", b"")).get("streams"):
                break
            time.sleep(DELETE_POLL_INTERVAL)

    answers: dict[str, object] = {}
    for name, setup, (subject, body) in cases():
        for _ in range(STORE_RETRIES):
            raw = [ask(setup_subject, setup_body) for setup_subject, setup_body in setup]
            raw.append(ask(subject, body))
            clear()
            # (2.15.1 on a loaded machine: a file store of the same name still being removed)
            if not any(STORE_NOT_READY in answer for answer in raw):
                break
            time.sleep(DELETE_POLL_INTERVAL)
        answers[name] = _answer(raw[-1], body)
    client.sock.close()
    return answers


# Where natserver still answers otherwise, and why (each left out of the comparison below, and
# checked to still differ, so a fix shows here).
KNOWN_DIFFERENCES = {
    "consumer: ack_policy flow_control": "2.15's flow-control acks (the ack policy of its sourcing consumers) "
                                         "are not implemented: refused as an unknown ack policy",
}


def test_natserver_answers_as_nats_server(tmp_path):
    expected = json.loads(RECORDED.read_text())
    with running("natserver", JS_CONFIG % (tmp_path / "store"), tmp_path) as port:
        got = run_script(port)
    assert list(got) == list(expected)
    for name in expected:
        if name in KNOWN_DIFFERENCES:
            assert got[name] != expected[name], f"{name} now answers as 2.15.1: drop it from KNOWN_DIFFERENCES"
        else:
            assert got[name] == expected[name], name


@needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED)
