"""natserver.jetstream's Go-compatibility helpers: JSON escapes, RFC 3339 times, header and
subject rules, request decoding and stream configuration defaults."""

from __future__ import annotations

import pytest

from natserver.jetstream import errors
from natserver.jetstream.stream import DecodeError, StreamConfig, check_stream_config, check_update
from natserver.jetstream.util import (
    compile_filter,
    dumps,
    gen_header,
    get_header,
    is_subset_match,
    parse_uint,
    rfc3339nano,
    subjects_collide,
)


def test_dumps_escapes_like_go():
    assert dumps({"s": "a.>", "t": "<b&c>"}) == b'{"s":"a.\\u003e","t":"\\u003cb\\u0026c\\u003e"}'
    assert dumps({"u": "\u2028"}) == b'{"u":"\\u2028"}'


@pytest.mark.parametrize("ns,text", [
    (0, "0001-01-01T00:00:00Z"),
    (1_700_000_000_000_000_000, "2023-11-14T22:13:20Z"),
    (1_700_000_000_120_000_000, "2023-11-14T22:13:20.12Z"),
    (1_700_000_000_000_000_001, "2023-11-14T22:13:20.000000001Z"),
])
def test_rfc3339nano(ns, text):
    assert rfc3339nano(ns) == text


def test_get_header_follows_nats_server():
    hdr = b"NATS/1.0\r\nNats-Msg-Id:   abc \r\nX-Nats-Expected-Stream: no\r\n\r\n"
    assert get_header(b"Nats-Msg-Id", hdr) == b"abc "  # leading spaces skipped, trailing kept
    # The first occurrence must start a line: nats-server then gives up (no second look).
    assert get_header(b"Nats-Expected-Stream", hdr) == b""
    assert get_header(b"Missing", hdr) == b""
    assert get_header(b"Nats-Msg-Id", None) == b""
    assert parse_uint(b"12") == 12 and parse_uint(b"-1") == -1 and parse_uint(b"x") == -1


def test_gen_header():
    assert gen_header(None, b"A", b"1") == b"NATS/1.0\r\nA: 1\r\n\r\n"
    assert gen_header(b"NATS/1.0\r\nX: y\r\n\r\n", b"A", b"1") == b"NATS/1.0\r\nX: y\r\nA: 1\r\n\r\n"


@pytest.mark.parametrize("a,b,collide", [
    ("a.b", "a.b", True), ("a.b", "a.c", False), ("a.*", "a.b", True), ("a.>", "a.b.c", True),
    ("a.*", "a.b.c", False), ("*.b", "a.*", True), ("a.>", "b.>", False), (">", "x", True),
    ("a.*.c", "a.>", True), ("a.*", "*.*.*", False),
])
def test_subjects_collide(a, b, collide):
    assert subjects_collide(a, b) is collide
    assert subjects_collide(b, a) is collide


def test_subset_and_filters():
    assert is_subset_match("a.b", "a.*") and is_subset_match("a.b.c", "a.>")
    assert not is_subset_match("a.*", "a.b") and is_subset_match("$JS.API.INFO", "$JS.API.>")
    assert compile_filter(b">") is None and compile_filter(b"") is None
    match = compile_filter(b"a.*.c")
    assert match(b"a.b.c") and not match(b"a.b") and not match(b"a.b.c.d")
    full = compile_filter(b"a.>")
    assert full(b"a.b") and full(b"a.b.c") and not full(b"a")


def test_config_decoding_is_gos():
    cfg = StreamConfig.from_json({"Name": "S", "MAX_MSGS": 5, "unknown": [1], "discard": "NEW", "subjects": None})
    assert (cfg.name, cfg.max_msgs, cfg.discard, cfg.subjects) == ("S", 5, "new", None)
    for bad in ({"max_msgs": "5"}, {"max_msgs": 1.5}, {"max_msg_size": 1 << 40}, {"retention": "Limits"},
                {"retention": None}, {"subjects": "a"}, {"no_ack": 1}, [1]):
        with pytest.raises(DecodeError):
            StreamConfig.from_json(bad)


def test_config_defaults_and_checks():
    cfg = check_stream_config(StreamConfig(name="S"), {})
    assert cfg.to_json() == {
        "name": "S", "subjects": ["S"], "retention": "limits", "max_consumers": -1, "max_msgs": -1,
        "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": -1, "max_msg_size": -1, "discard": "old",
        "storage": "file", "num_replicas": 1, "duplicate_window": 120_000_000_000, "compression": "none",
        "allow_direct": False, "mirror_direct": False, "sealed": False, "deny_delete": False, "deny_purge": False,
        "allow_rollup_hdrs": False, "consumer_limits": {}, "allow_msg_ttl": False,
    }
    assert check_stream_config(StreamConfig(name="S", max_age=10**9), {}).duplicate_window == 10**9
    cases = [
        (dict(name="a.b"), "stream name is required and can not contain '.', '*', '>', '\\', '/'"),
        (dict(name="S", subjects=["$JS.API.FOO"]), "subjects that overlap with jetstream api require no-ack to be true"),
        (dict(name="S", subjects=["a b"]), "invalid subject"),
        (dict(name="S", duplicate_window=5), "duplicates window needs to be >= 100ms"),
        (dict(name="S", max_age=10**9, duplicate_window=2 * 10**9), "duplicates window can not be larger then max age"),
        (dict(name="S", deny_purge=True, allow_rollup_hdrs=True), "roll-ups require the purge permission"),
        (dict(name="S", mirror={"name": "S"}), "detected cycle"),
        (dict(name="S", subjects=["r.>"], republish={"src": "r.>", "dest": "r.x.>"}),
         "stream configuration for republish destination forms a cycle"),
    ]
    for fields, message in cases:
        with pytest.raises(errors.ApiError) as exc:
            check_stream_config(StreamConfig(**fields), {})
        assert (exc.value.err_code, exc.value.description) == (10052, message)
    with pytest.raises(errors.ApiError) as exc:
        check_stream_config(StreamConfig(name="S", num_replicas=-1), {})
    assert exc.value.err_code == 10133


def test_update_rules():
    old = check_stream_config(StreamConfig(name="S", deny_delete=True), {})
    with pytest.raises(errors.ApiError, match="can not cancel deny message deletes"):
        check_update(old, StreamConfig(name="S"), {})
    with pytest.raises(errors.ApiError, match="can not change storage type"):
        check_update(old, StreamConfig(name="S", deny_delete=True, storage="memory"), {})
    sealed = check_update(old, StreamConfig(name="S", deny_delete=True, sealed=True, max_age=10**9), {})
    assert (sealed.max_age, sealed.discard, sealed.deny_purge) == (0, "new", True)
