"""natserver.nsq.protocol: the sans-IO V2 parser and frame encoders (no I/O)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.nsq.errors import NsqError
from natserver.nsq.protocol import (
    NEED_DATA,
    Command,
    V2Parser,
    encode_message,
    go_quote,
    is_valid_name,
    parse_base10,
    response,
)

MAX_MSG = 1024 * 1024
MAX_BODY = 5 * 1024 * 1024


def parser(**changes) -> V2Parser:
    args = dict(max_msg_size=MAX_MSG, max_body_size=MAX_BODY, max_req_timeout_ms=3600000)
    args.update(changes)
    return V2Parser(**args)


def body(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def mpub(*messages: bytes) -> bytes:
    inner = struct.pack(">i", len(messages)) + b"".join(body(m) for m in messages)
    return struct.pack(">i", len(inner)) + inner


STREAM = (b"  V2" + b"IDENTIFY\n" + body(b'{"client_id":"c"}') + b"SUB t ch\n" + b"RDY 10\r\n"
          + b"PUB t\n" + body(b"hello") + b"MPUB t\n" + mpub(b"a", b"bc") + b"DPUB t 250\n" + body(b"later")
          + b"FIN 0123456789abcdef\n" + b"NOP\n")
EXPECTED = [
    Command(b"IDENTIFY", (), b'{"client_id":"c"}'),
    Command(b"SUB", (b"t", b"ch")),
    Command(b"RDY", (b"10",)),
    Command(b"PUB", (b"t",), b"hello"),
    Command(b"MPUB", (b"t",), None, (b"a", b"bc")),
    Command(b"DPUB", (b"t", b"250"), b"later"),
    Command(b"FIN", (b"0123456789abcdef",)),
    Command(b"NOP", ()),
]


def drain(p: V2Parser) -> list:
    out = []
    while (command := p.next_command()) is not NEED_DATA:
        out.append(command)
    return out


def test_whole_stream():
    p = parser()
    p.feed(STREAM)
    assert drain(p) == EXPECTED


def test_byte_by_byte():
    p = parser()
    out = []
    for i in range(len(STREAM)):
        p.feed(STREAM[i : i + 1])
        out += drain(p)
    assert out == EXPECTED


def test_trailing_partial_data_waits():
    p = parser()
    p.feed(STREAM + b"PUB t\n\x00\x00")
    assert drain(p) == EXPECTED
    assert p.next_command() is NEED_DATA
    p.feed(b"\x00\x01x")
    assert p.next_command() == Command(b"PUB", (b"t",), b"x")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_any_split_points(cuts):
    p = parser()
    out = []
    points = sorted(set(cuts)) + [len(STREAM)]
    start = 0
    for point in points:
        p.feed(STREAM[start:point])
        out += drain(p)
        start = point
    assert out == EXPECTED


def fails(data: bytes, **changes) -> NsqError:
    p = parser(**changes)
    p.feed(b"  V2" + data)
    with pytest.raises(NsqError) as info:
        drain(p)
    return info.value


@pytest.mark.parametrize("data, wire", [
    (b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
    (b"PUB bad!topic\n", b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
    (b"PUB t\n" + struct.pack(">i", 0), b"E_BAD_MESSAGE PUB invalid message body size 0"),
    (b"PUB t\n" + struct.pack(">i", MAX_MSG + 1), b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    (b"PUB t\n" + struct.pack(">I", 0xFFFFFFFF), b"E_BAD_MESSAGE PUB invalid message body size -1"),
    (b"MPUB t!\n", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "t!" is not valid'),
    (b"MPUB t\n" + struct.pack(">i", MAX_BODY + 1), b"E_BAD_BODY MPUB body too big 5242881 > 5242880"),
    (b"MPUB t\n" + struct.pack(">ii", 8, 0), b"E_BAD_BODY MPUB invalid message count 0"),
    (b"MPUB t\n" + struct.pack(">iii", 8, 1, 0), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters"),
    (b"DPUB t x\n", b"E_INVALID DPUB could not parse timeout x"),
    (b"DPUB t -1\n", b"E_INVALID DPUB could not parse timeout -1"),
    (b"DPUB t 3600001\n", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (b"IDENTIFY\n" + struct.pack(">i", 0), b"E_BAD_BODY IDENTIFY invalid body size 0"),
    (b"IDENTIFY\n" + struct.pack(">i", MAX_BODY + 1), b"E_BAD_BODY IDENTIFY body too big 5242881 > 5242880"),
    (b"AUTH x\n", b"E_INVALID AUTH invalid number of parameters"),
])
def test_refused_before_the_body(data, wire):
    error = fails(data)
    assert error.wire == wire
    assert error.fatal


def test_bad_magic():
    p = parser()
    p.feed(b"  V1")
    with pytest.raises(NsqError) as info:
        p.next_command()
    assert info.value.wire == b"E_BAD_PROTOCOL"  # nsqd tcp.go: the code alone


def test_huge_length_prefix_is_refused_without_waiting_for_the_body():
    p = parser()
    p.feed(b"  V2PUB t\n" + struct.pack(">i", 0x7FFFFFFF))
    with pytest.raises(NsqError):
        p.next_command()
    assert p.buffered == 0  # nothing more read, nothing allocated for the body


def test_identify_refused_after_sub():
    p = parser()
    p.subscribed = True
    p.feed(b"  V2IDENTIFY\n")
    with pytest.raises(NsqError) as info:
        p.next_command()
    assert info.value.wire == b"E_INVALID cannot IDENTIFY in current state"


def test_line_too_long_closes_without_error_frame():
    p = parser(max_line=64)
    p.feed(b"  V2" + b"N" * 100)
    with pytest.raises(NsqError) as info:
        p.next_command()
    assert info.value.code is None


def test_mpub_total_bounded_by_max_body_size():
    p = parser(max_body_size=100, max_msg_size=60)
    p.feed(b"  V2MPUB t\n" + struct.pack(">ii", 100, 2) + body(b"x" * 50) + struct.pack(">i", 50))
    with pytest.raises(NsqError) as info:
        drain(p)
    assert info.value.code == "E_BAD_BODY"


def test_after_a_fatal_error_the_parser_stays_dead():
    p = parser()
    p.feed(b"  V2PUB\n")
    with pytest.raises(NsqError):
        p.next_command()
    p.feed(b"NOP\n")
    with pytest.raises(NsqError):
        p.next_command()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data):
    p = parser(max_msg_size=64, max_body_size=256)
    p.feed(b"  V2" + data)
    try:
        drain(p)
    except NsqError as exc:
        assert exc.fatal


def test_names():
    assert is_valid_name("a.b_c-d")
    assert is_valid_name("t#ephemeral")
    assert is_valid_name("x" * 64)
    assert not is_valid_name("x" * 65)
    assert not is_valid_name("")
    assert not is_valid_name("a b")
    assert not is_valid_name("a\n")  # Go's $ does not match before a trailing newline
    assert not is_valid_name("#ephemeral#ephemeral")


def test_go_quote():
    assert go_quote(b"abc") == '"abc"'
    assert go_quote(b'a"b\\') == '"a\\"b\\\\"'
    assert go_quote(b"\x00\n\xff") == '"\\x00\\n\\xff"'
    assert go_quote("é".encode()) == '"é"'


def test_base10():
    assert parse_base10(b"") == 0
    assert parse_base10(b"123") == 123
    assert parse_base10(b"-1") is None
    assert parse_base10(b"1x") is None


def test_encoders():
    assert response(b"OK") == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    frame = encode_message(b"0123456789abcdef", 7, 2, b"hi")
    assert frame == struct.pack(">iiqH", 32, 2, 7, 2) + b"0123456789abcdef" + b"hi"
