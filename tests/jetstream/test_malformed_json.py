"""Malformed JSON in $JS.API requests as nats-server 2.15.1 answers it: truncated objects,
trailing garbage, a JSON value of the wrong kind at the top level, invalid UTF-8, bytes no JSON
value starts with, an empty or all-whitespace body, on the API subjects that decode a body.
2.15.1 adds Go's encoding/json error to "invalid JSON" ("invalid character 'x' looking for
beginning of value", "unexpected end of JSON input", "json: cannot unmarshal array into Go value
of type server.StreamConfig"...): one script runs against natserver and must give, byte for byte,
what was recorded from 2.15.1 in data/malformed_json_nats_server_2.15.1.json
(``python -m tests.jetstream.test_malformed_json`` records it again); a live 2.15.1, when
installed, must still give it. Also: gojson.go_syntax_error against Python's own parser."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.jetstream import gojson
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "malformed_json_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'

BODIES = [
    ("truncated", b'{"name":'),
    ("truncated_array", b'{"a":[1,'),
    ("truncated_string", b'{"a":"x'),
    ("truncated_literal", b'nul'),
    ("trailing_garbage", b'{} x'),
    ("trailing_brace", b'{}}'),
    ("array", b"[]"),
    ("string", b'"x"'),
    ("number", b"1"),
    ("float", b"-1.5e3"),
    ("bool", b"true"),
    ("invalid_utf8", b"\xff"),
    ("invalid_utf8_in_string", b'{"name":"\xc3\x28"}'),
    ("utf8_nbsp", b"\xc2\xa0{}"),
    ("c1_control", b"\x80"),
    ("control", b"\x01"),
    ("single_quotes", b"'x'"),
    ("backslash", b"\\"),
    ("empty", b""),
    ("whitespace", b"  \t "),
    ("control_in_string", b'{"a":"\x01"}'),
    ("bad_escape", b'{"a":"\\q"}'),
    ("bad_unicode_escape", b'{"a":"\\u12x4"}'),
    ("number_key", b"{1:2}"),
    ("no_colon", b'{"a" 1}'),
    ("no_comma", b'{"a":1 "b":2}'),
    ("bad_literal", b'{"a":tru}'),
    ("bad_number", b'{"a":-}'),
    ("bad_fraction", b'{"a":1.}'),
    ("bad_exponent", b'{"a":1e+}'),
    ("leading_zero", b'{"a":01}'),
    ("array_no_comma", b'{"a":[1 2]}'),
]

SUBJECTS = [
    "$JS.API.STREAM.CREATE.N",
    "$JS.API.STREAM.UPDATE.S",
    "$JS.API.STREAM.INFO.S",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    "$JS.API.STREAM.MSG.GET.S",
    "$JS.API.STREAM.MSG.DELETE.S",
    "$JS.API.DIRECT.GET.S",
    "$JS.API.CONSUMER.CREATE.E",
    "$JS.API.CONSUMER.CREATE.E.X",
    "$JS.API.CONSUMER.DURABLE.CREATE.E.D",
    "$JS.API.CONSUMER.NAMES.E",
    "$JS.API.CONSUMER.MSG.NEXT.E.C",
    "$JS.API.CONSUMER.PAUSE.E.C",
    "$JS.API.CONSUMER.UNPIN.E.C",
    "$JS.API.INFO",
    "$JS.API.STREAM.PURGE.S",
    "$JS.API.STREAM.SNAPSHOT.S",
    "$JS.API.STREAM.RESTORE.R",
    "$JS.API.CONSUMER.INFO.E.C",  # (no body expected: 10038 for any)
    "$JS.API.CONSUMER.DELETE.E.X",
]


def _normal(answer: str):
    """An error (JSON or a status) as it is, byte for byte; any other answer by the names of its
    fields (headers), which is what holds times and sequences."""
    if answer.startswith("NATS/1.0"):
        head, _, body = answer.partition("\r\n\r\n")
        lines = head.split("\r\n")
        if lines[0] != "NATS/1.0":
            return answer
        return [lines[0], *sorted(line.split(":")[0] for line in lines[1:]), body]
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    return answer if "error" in document else sorted(document)


def run_script(port: int) -> dict:
    client = RawClient(port)
    got = {}
    for name, subject, body in [
        ("stream S", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_direct": True}),
        ("message", "s.1", b"one"),
        ("stream E", "$JS.API.STREAM.CREATE.E", {"name": "E", "subjects": ["e.>"]}),
        ("consumer C", "$JS.API.CONSUMER.CREATE.E.C",
         {"stream_name": "E", "config": {"durable_name": "C", "ack_policy": "explicit"}}),
    ]:
        got[name] = [_normal(a) for a in client.request(subject, body)]
    for subject in SUBJECTS:
        for name, body in BODIES:
            got[f"{subject[8:]} {name}"] = [_normal(a) for a in client.request(subject, body)]
    return got


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)


# -- the scanner against Python's parser ----------------------------------------------------------

_JSONISH = st.text(alphabet='{}[]",: \t\n0123456789-+.eEtrufalsn\\/bux\x01é', max_size=24)


@settings(max_examples=3000, deadline=None)
@given(_JSONISH)
def test_go_s_scanner_accepts_what_json_accepts(text):
    """go_syntax_error finds an error exactly when the text is not one JSON value (Python's
    strict parser: no NaN, Infinity; Go's scanner and RFC 8259 agree on the rest)."""
    def no_constant(name):
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=no_constant)
        valid = True
    except ValueError:
        valid = False
    assert (gojson.go_syntax_error(text.encode()) is None) == valid


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


class _NoOrjson:
    """orjson refusing everything: go_decode_request's scan, not its one-value fast path."""

    JSONDecodeError = orjson.JSONDecodeError

    @staticmethod
    def loads(data):
        raise orjson.JSONDecodeError("refused", "", 0)


def _outcome(decode, data):
    try:
        return "ok", decode(data, "server.X")
    except gojson.GoDecodeError as exc:
        return "error", str(exc)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _VALUES, max_size=4) | _VALUES, st.sampled_from(["", " ", "\n\t"]))
def test_the_fast_path_gives_what_the_scan_gives(value, space):
    """A body orjson parses decodes as the scan decodes it (the value, or Go's type error)."""
    data = (space + json.dumps(value) + space).encode()
    for decode in (gojson.go_decode_request, gojson.go_unmarshal):
        fast = _outcome(decode, data)
        saved, gojson.orjson = gojson.orjson, _NoOrjson
        try:
            slow = _outcome(decode, data)
        finally:
            gojson.orjson = saved
        assert fast == slow


@pytest.mark.parametrize(("body", "error"), [
    (b'{"a":1', "unexpected end of JSON input"),
    (b"{} x", "invalid character 'x' after top-level value"),
    (b"\xc3\xa9", "invalid character 'é' looking for beginning of value"),
    (b"\xe2\x80\xa8", "invalid character '\\u2028' looking for beginning of value"),
    (b'{"a":"\xff"}', None),
    (b'[1,]', "invalid character ']' looking for beginning of value"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    (b'"\\u00e9"', None),
])
def test_go_s_texts(body, error):
    assert gojson.go_syntax_error(body) == error


def test_a_decoder_reads_one_value_after_another():
    """unmarshalRequest's json.Decoder: objects merged, a later value's error after the first's."""
    assert gojson.go_decode_request(b'{"a":1} {"b":2}', "server.X") == {"a": 1, "b": 2}
    assert gojson.go_decode_request(b"  ", "server.X") is None
    with pytest.raises(gojson.GoDecodeError, match="cannot unmarshal array into Go value of type server.X"):
        gojson.go_decode_request(b"[] x", "server.X")
    with pytest.raises(gojson.GoDecodeError, match="^unexpected EOF$"):
        gojson.go_decode_request(b'{} {"a"', "server.X")
