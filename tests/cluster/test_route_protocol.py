"""The route protocol parser (sans-IO) and the lines natserver sends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from natserver.cluster.protocol import (
    Connect,
    Err,
    Info,
    Ping,
    Pong,
    RemoteSub,
    RemoteUnsub,
    RoutedMsg,
    RouteParser,
    RouteProtocolError,
    rmsg_head,
    rs_minus,
    rs_plus,
)


def parse_all(data: bytes, max_payload: int = 1 << 20) -> list:
    parser = RouteParser(max_payload)
    parser.feed(data)
    ops = []
    while (op := parser.next_op()) is not None:
        ops.append(op)
    return ops


def test_interest_lines():
    assert parse_all(b"RS+ $G foo.*\r\nRS+ $G bar q1 3\r\nRS- $G foo.*\r\nRS- $G bar q1\r\n") == [
        RemoteSub(b"$G", b"foo.*", None, 0),
        RemoteSub(b"$G", b"bar", b"q1", 3),
        RemoteUnsub(b"$G", b"foo.*", None),
        RemoteUnsub(b"$G", b"bar", b"q1"),
    ]


def test_rmsg_forms():
    data = (
        b"RMSG $G foo 2\r\nhi\r\n"
        b"RMSG $G foo _INBOX.1 2\r\nhi\r\n"
        b"RMSG $G foo + _INBOX.1 q1 q2 2\r\nhi\r\n"
        b"RMSG $G foo | q1 2\r\nhi\r\n"
        b"HMSG $G foo + r q1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )
    assert parse_all(data) == [
        RoutedMsg(b"$G", b"foo", None, (), -1, b"hi"),
        RoutedMsg(b"$G", b"foo", b"_INBOX.1", (), -1, b"hi"),
        RoutedMsg(b"$G", b"foo", b"_INBOX.1", (b"q1", b"q2"), -1, b"hi"),
        RoutedMsg(b"$G", b"foo", None, (b"q1",), -1, b"hi"),
        RoutedMsg(b"$G", b"foo", b"r", (b"q1",), 12, b"NATS/1.0\r\n\r\nhi"),
    ]


def test_leaf_origin_forms():
    """route.go, to a peer that announced "lnoc" (natserver does): what a 2.15.1 server has
    from a leaf node names the leaf's cluster first (an LS- does not, to a peer without
    "lnocu"), an LMSG always has a header size; read as the route forms, the origin dropped,
    on a dedicated route without the account too. A leaf connection refuses them as before."""
    data = (
        b"LS+ C $G foo\r\nLS+ C $G bar q1 3\r\nLS- $G foo\r\nLS- $G bar q1\r\n"
        b"LMSG C $G foo 0 2\r\nhi\r\n"
        b"LMSG C $G foo + r q1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
        b"LMSG C $G foo | q1 q2 0 2\r\nhi\r\n"
        b"LMSG C $G foo r 0 2\r\nhi\r\n"
    )
    assert parse_all(data) == [
        RemoteSub(b"$G", b"foo", None, 0),
        RemoteSub(b"$G", b"bar", b"q1", 3),
        RemoteUnsub(b"$G", b"foo", None),
        RemoteUnsub(b"$G", b"bar", b"q1"),
        RoutedMsg(b"$G", b"foo", None, (), 0, b"hi"),
        RoutedMsg(b"$G", b"foo", b"r", (b"q1",), 12, b"NATS/1.0\r\n\r\nhi"),
        RoutedMsg(b"$G", b"foo", None, (b"q1", b"q2"), 0, b"hi"),
        RoutedMsg(b"$G", b"foo", b"r", (), 0, b"hi"),
    ]
    dedicated = RouteParser(1024)
    dedicated.route_account = b"A"
    dedicated.feed(b"LS+ C foo\r\nLMSG C foo 0 2\r\nhi\r\n")
    assert [dedicated.next_op(), dedicated.next_op()] == [RemoteSub(b"A", b"foo", None, 0),
                                                          RoutedMsg(b"A", b"foo", None, (), 0, b"hi")]
    leaf = RouteParser(1024, leaf_account=b"A")
    leaf.feed(b"LMSG C foo 0 2\r\nhi\r\n")
    with pytest.raises(RouteProtocolError):
        leaf.next_op()


def test_control_ops_and_split_feeds():
    parser = RouteParser(1024)
    ops = []
    for byte in b'INFO {"server_id":"N1"}\r\nCONNECT {"name":"N1"}\r\nPING\r\nPONG\r\n-ERR \'x y\'\r\nRMSG $G a 3\r\nabc\r\n':
        parser.feed(bytes([byte]))
        while (op := parser.next_op()) is not None:
            ops.append(op)
    assert ops == [Info({"server_id": "N1"}), Connect({"name": "N1"}), Ping(), Pong(), Err("x y"),
                   RoutedMsg(b"$G", b"a", None, (), -1, b"abc")]


@pytest.mark.parametrize("data, text", [
    (b"GARBAGE\r\n", "Unknown Protocol Operation"),
    (b"RS+ $G\r\n", "processRemoteSub Parse Error"),
    (b"RS- $G a b c\r\n", "processRemoteUnsub Parse Error"),
    (b"RMSG $G foo x\r\n", "Unknown Protocol Operation"),
    (b"RMSG $G\r\n", "processRoutedMsgArgs Parse Error"),
    (b"RMSG $G foo 2000\r\n", "Maximum Payload Violation"),
    (b"RMSG $G foo 2\r\nhiXX", "Unknown Protocol Operation"),
    (b"INFO [1]\r\n", "Unknown Protocol Operation"),
    (b"X" * 5000, "Maximum Control Line Exceeded"),
])
def test_garbage_is_an_error(data, text):
    with pytest.raises(RouteProtocolError) as caught:
        parse_all(data, max_payload=1024)
    assert str(caught.value) == text
    assert caught.value.wire == b"-ERR '" + text.encode() + b"'\r\n"


def test_lines_sent():
    assert rs_plus(b"$G", b"foo", None, 1) == b"RS+ $G foo\r\n"
    assert rs_plus(b"$G", b"foo", b"g", 2) == b"RS+ $G foo g 2\r\n"
    assert rs_minus(b"$G", b"foo", b"g") == b"RS- $G foo g\r\n"
    assert rmsg_head(b"$G", b"foo", None, [], -1, 5) == b"RMSG $G foo 5\r\n"
    assert rmsg_head(b"$G", b"foo", b"r", [b"g"], -1, 5) == b"RMSG $G foo + r g 5\r\n"
    assert rmsg_head(b"$G", b"foo", None, [b"g", b"h"], 12, 14) == b"HMSG $G foo | g h 12 14\r\n"


tokens = st.text(alphabet="abcxyz019_$", min_size=1, max_size=6).map(str.encode)


@given(
    subject=st.lists(tokens, min_size=1, max_size=4).map(b".".join),
    reply=st.none() | tokens,
    queues=st.lists(tokens, max_size=3),
    headers=st.booleans(),
    body=st.binary(max_size=40),
    cut=st.integers(min_value=0, max_value=200),
)
def test_what_we_send_parses_back(subject, reply, queues, headers, body, cut):
    header = b"NATS/1.0\r\n\r\n" if headers else b""
    payload = header + body
    wire = rmsg_head(b"ACC", subject, reply, queues, len(header) if headers else -1, len(payload)) + payload + b"\r\n"
    parser = RouteParser(1 << 20)
    parser.feed(wire[:cut])
    ops = []
    while (op := parser.next_op()) is not None:
        ops.append(op)
    parser.feed(wire[cut:])
    while (op := parser.next_op()) is not None:
        ops.append(op)
    assert ops == [RoutedMsg(b"ACC", subject, reply, tuple(queues), len(header) if headers else -1, payload)]
