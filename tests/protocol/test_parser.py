"""natserver.protocol.parser: the sans-IO client protocol parser.

Every op is checked three ways, like h11's ``tr`` helper: fed whole, fed byte by byte, and
fed with trailing data (the first bytes of the next op) that must stay buffered. Expected
behaviour is nats-server v2.9.10's (server/parser.go and the recordings in conformance/).
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver import NEED_DATA, Connect, Parser, ProtocolError, Pub, Sub, Unsub
from natserver.protocol import errors
from natserver.protocol.ops import PING, PONG
from natserver.protocol.parser import ZERO_COPY_MIN


def norm(op):
    """An op as (type name, fields), payloads as bytes: memoryview and bytes payloads compare
    equal, and so would Ping() and Pong() (both empty tuples) without the type name."""
    if isinstance(op, Pub):
        op = op._replace(payload=bytes(op.payload))
    return (type(op).__name__, tuple(op))


def ops_of(*ops) -> list:
    return [norm(op) for op in ops]


def drain(parser: Parser) -> list:
    ops = []
    while True:
        op = parser.next_op()
        if op is NEED_DATA:
            return ops
        ops.append(norm(op))


def feed_chunks(chunks, **kwargs) -> list:
    parser = Parser(**kwargs)
    ops = []
    for chunk in chunks:
        parser.feed(chunk)
        ops += drain(parser)
    return ops


def split_at(data: bytes, points) -> list[bytes]:
    points = sorted(set(points))
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def error_of(data: bytes, **kwargs) -> errors.ServerError:
    parser = Parser(**kwargs)
    parser.feed(data)
    with pytest.raises(ProtocolError) as info:
        drain(parser)
    return info.value.error


# The first bytes of an op: whatever follows a complete op must wait for more data.
TRAILING = [b"P", b"PUB fo", b"SUB foo 1\r", b"HPUB foo 2", b"CONNECT {\"verb", b"PI", b"UNSUB 1"]


def check_three_ways(data: bytes, expected: list, trailing_cases=TRAILING, **kwargs) -> None:
    """h11's tr(): whole, byte by byte, and with the next op's first bytes after it."""
    expected = [norm(op) for op in expected]
    # Whole.
    parser = Parser(**kwargs)
    parser.feed(data)
    assert drain(parser) == expected
    assert parser.buffered == 0
    # Byte by byte.
    assert feed_chunks([data[i : i + 1] for i in range(len(data))], **kwargs) == expected
    # With trailing data.
    for trailing in trailing_cases:
        parser = Parser(**kwargs)
        parser.feed(data + trailing)
        assert drain(parser) == expected
        assert parser.next_op() is NEED_DATA
        assert parser.buffered == len(trailing)


# -- every op, three ways -------------------------------------------------------------------

OPS = [
    pytest.param(b'CONNECT {"verbose":false,"pedantic":true}\r\n', [Connect({"verbose": False, "pedantic": True})], id="connect"),
    pytest.param(b"CONNECT {}\r\n", [Connect({})], id="connect-empty"),
    pytest.param(b"PUB foo 5\r\nhello\r\n", [Pub(b"foo", None, -1, b"5", b"hello")], id="pub"),
    pytest.param(b"PUB foo.bar INBOX.22 11\r\nhello world\r\n", [Pub(b"foo.bar", b"INBOX.22", -1, b"11", b"hello world")], id="pub-reply"),
    pytest.param(b"PUB foo 0\r\n\r\n", [Pub(b"foo", None, -1, b"0", b"")], id="pub-empty"),
    pytest.param(b"PUB foo 6\r\na\r\nb\r\n\r\n", [Pub(b"foo", None, -1, b"6", b"a\r\nb\r\n")], id="pub-crlf-inside"),
    pytest.param(
        b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        [Pub(b"foo", None, 12, b"12 14", b"NATS/1.0\r\n\r\nhi")],
        id="hpub",
    ),
    pytest.param(
        b"HPUB foo rep 22 27\r\nNATS/1.0\r\nFoo: bar\r\n\r\nhello\r\n",
        [Pub(b"foo", b"rep", 22, b"22 27", b"NATS/1.0\r\nFoo: bar\r\n\r\nhello")],
        id="hpub-reply",
    ),
    pytest.param(b"SUB foo 1\r\n", [Sub(b"foo", None, b"1")], id="sub"),
    pytest.param(b"SUB foo.* workers 22\r\n", [Sub(b"foo.*", b"workers", b"22")], id="sub-queue"),
    pytest.param(b"UNSUB 1\r\n", [Unsub(b"1", -1)], id="unsub"),
    pytest.param(b"UNSUB 1 5\r\n", [Unsub(b"1", 5)], id="unsub-max"),
    pytest.param(b"PING\r\n", [PING], id="ping"),
    pytest.param(b"PONG\r\n", [PONG], id="pong"),
    pytest.param(
        b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nPING\r\nUNSUB 1\r\n",
        [Sub(b"foo", None, b"1"), Pub(b"foo", None, -1, b"2", b"hi"), PING, Unsub(b"1", -1)],
        id="pipelined",
    ),
]


@pytest.mark.parametrize(("data", "expected"), OPS)
def test_op_three_ways(data, expected):
    check_three_ways(data, expected)


LF_OPS = [
    pytest.param(b'CONNECT {"verbose":false}\n', [Connect({"verbose": False})], id="connect"),
    pytest.param(b"PUB foo 5\nhello\r\n", [Pub(b"foo", None, -1, b"5", b"hello")], id="pub"),
    pytest.param(b"HPUB foo r 12 14\nNATS/1.0\r\n\r\nhi\r\n", [Pub(b"foo", b"r", 12, b"12 14", b"NATS/1.0\r\n\r\nhi")], id="hpub"),
    pytest.param(b"SUB foo q 1\n", [Sub(b"foo", b"q", b"1")], id="sub"),
    pytest.param(b"UNSUB 1 5\n", [Unsub(b"1", 5)], id="unsub"),
    pytest.param(b"PING\nPONG\n", [PING, PONG], id="ping-pong"),
]


@pytest.mark.parametrize(("data", "expected"), LF_OPS)
def test_op_lf_without_cr(data, expected):
    # nats-server: the CR before LF is optional on control lines (not after payloads).
    check_three_ways(data, expected)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"pub foo 2\r\nhi\r\n", Pub(b"foo", None, -1, b"2", b"hi")),
        (b"pUb foo 2\r\nhi\r\n", Pub(b"foo", None, -1, b"2", b"hi")),
        (b"hpub foo 12 12\r\nNATS/1.0\r\n\r\n\r\n", Pub(b"foo", None, 12, b"12 12", b"NATS/1.0\r\n\r\n")),
        (b"sub foo 1\r\n", Sub(b"foo", None, b"1")),
        (b"SuB foo q 1\r\n", Sub(b"foo", b"q", b"1")),
        (b"unsub 1\r\n", Unsub(b"1", -1)),
        (b"uNsUb 1 3\r\n", Unsub(b"1", 3)),
        (b"ping\r\n", PING),
        (b"PiNg\r\n", PING),
        (b"pong\r\n", PONG),
        (b"connect {}\r\n", Connect({})),
        (b"CoNnEcT {}\r\n", Connect({})),
    ],
)
def test_verbs_are_case_insensitive(data, expected):
    check_three_ways(data, [expected])


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"PUB\tfoo\t5\r\nhello\r\n", Pub(b"foo", None, -1, b"5", b"hello")),
        (b"PUB  foo   bar \t 5  \r\nhello\r\n", Pub(b"foo", b"bar", -1, b"5", b"hello")),
        (b"PUB \t foo\t\tbar\t\t2222\t\r\n" + b"x" * 2222 + b"\r\n", Pub(b"foo", b"bar", -1, b"2222", b"x" * 2222)),
        (b"SUB\tfoo\t1\r\n", Sub(b"foo", None, b"1")),
        (b"SUB   foo  \t q \t 1   \r\n", Sub(b"foo", b"q", b"1")),
        (b"UNSUB\t1\t\t2\r\n", Unsub(b"1", 2)),
        (b"UNSUB   1   \r\n", Unsub(b"1", -1)),
        (b"HPUB\tfoo  r\t12 12 \r\nNATS/1.0\r\n\r\n\r\n", Pub(b"foo", b"r", 12, b"12 12", b"NATS/1.0\r\n\r\n")),
        (b"CONNECT\t{}\r\n", Connect({})),
        (b'CONNECT{"name":"x"}\r\n', Connect({"name": "x"})),
    ],
)
def test_tabs_and_multiple_spaces(data, expected):
    check_three_ways(data, [expected])


# nats-server parser_test.go TestParsePubArg: (arg, subject, reply, szb).
PUB_ARGS = [
    ("a 2", "a", None, "2"),
    ("a 222", "a", None, "222"),
    ("foo 22", "foo", None, "22"),
    (" foo 22", "foo", None, "22"),
    ("foo 22 ", "foo", None, "22"),
    ("foo   22", "foo", None, "22"),
    (" foo 22 ", "foo", None, "22"),
    (" foo   22 ", "foo", None, "22"),
    ("foo bar 22", "foo", "bar", "22"),
    (" foo bar 22", "foo", "bar", "22"),
    ("foo bar 22 ", "foo", "bar", "22"),
    ("foo  bar  22", "foo", "bar", "22"),
    (" foo bar 22 ", "foo", "bar", "22"),
    ("  foo   bar  22  ", "foo", "bar", "22"),
    ("  foo   bar  2222  ", "foo", "bar", "2222"),
    ("  foo     2222  ", "foo", None, "2222"),
    ("a\t2", "a", None, "2"),
    ("a\t222", "a", None, "222"),
    ("foo\t22", "foo", None, "22"),
    ("\tfoo\t22", "foo", None, "22"),
    ("foo\t22\t", "foo", None, "22"),
    ("foo\t\t\t22", "foo", None, "22"),
    ("\tfoo\t22\t", "foo", None, "22"),
    ("\tfoo\t\t\t22\t", "foo", None, "22"),
    ("foo\tbar\t22", "foo", "bar", "22"),
    ("\tfoo\tbar\t22", "foo", "bar", "22"),
    ("foo\tbar\t22\t", "foo", "bar", "22"),
    ("foo\t\tbar\t\t22", "foo", "bar", "22"),
    ("\tfoo\tbar\t22\t", "foo", "bar", "22"),
    ("\t \tfoo\t \t \tbar\t \t22\t \t", "foo", "bar", "22"),
    ("\t\tfoo\t\t\tbar\t\t2222\t\t", "foo", "bar", "2222"),
    ("\t \tfoo\t \t \t\t\t2222\t \t", "foo", None, "2222"),
]


@pytest.mark.parametrize(("arg", "subject", "reply", "szb"), PUB_ARGS)
def test_pub_args_table(arg, subject, reply, szb):
    payload = b"x" * int(szb)
    data = b"PUB " + arg.encode() + b"\r\n" + payload + b"\r\n"
    reply_bytes = None if reply is None else reply.encode()
    expected = Pub(subject.encode(), reply_bytes, -1, szb.encode(), payload)
    assert feed_chunks([data]) == ops_of(expected)
    assert feed_chunks([data[i : i + 1] for i in range(len(data))]) == ops_of(expected)


def test_pub_size_digits_kept_as_written():
    # nats-server echoes the size bytes (szb) in MSG rather than re-formatting the number.
    check_three_ways(b"PUB foo 05\r\nhello\r\n", [Pub(b"foo", None, -1, b"05", b"hello")])
    ops = feed_chunks([b"PUB foo 05\r\nhello\r\n"])
    assert ops[0][1][3] == b"05"


def test_hpub_sizes_kept_as_written():
    ops = feed_chunks([b"HPUB foo 012 0014\r\nNATS/1.0\r\n\r\nhi\r\n"])
    assert ops == ops_of(Pub(b"foo", None, 12, b"012 0014", b"NATS/1.0\r\n\r\nhi"))


# -- ignored and tolerated lines ------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"PING foo\r\n", b"PING  \r  \n", b"PING\n", b"PING \r\n", b"ping whatever you like\r\n", b"PING " + b"x" * 10000 + b"\r\n"],
)
def test_ping_ignores_rest_of_line(data):
    check_three_ways(data, [PING])


@pytest.mark.parametrize("data", [b"PONG foo\r\n", b"PONG  \r  \n", b"PONG\n"])
def test_pong_ignores_rest_of_line(data):
    check_three_ways(data, [PONG])


@pytest.mark.parametrize(
    "data",
    [b"+OK\r\n", b"+ok\r\n", b"+OK\n", b"+OK whatever\r\n", b"INFO {}\r\n", b'INFO {"server_id":"x","port":1}\r\n', b"info {}\n"],
)
def test_plus_ok_and_info_are_ignored(data):
    check_three_ways(data, [])
    check_three_ways(data + b"PING\r\n", [PING])


# -- payloads -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 5, ZERO_COPY_MIN - 1, ZERO_COPY_MIN, ZERO_COPY_MIN + 1, 4096, 70000])
def test_payload_sizes(size):
    payload = bytes(i % 251 for i in range(size))
    data = b"PUB foo %d\r\n" % size + payload + b"\r\n"
    expected = Pub(b"foo", None, -1, str(size).encode(), payload)
    check_three_ways(data, [expected])


@pytest.mark.parametrize("size", [ZERO_COPY_MIN, 4096, 64 * 1024])
def test_large_payload_is_a_memoryview_of_the_chunk(size):
    payload = b"z" * size
    parser = Parser()
    parser.feed(b"PUB foo %d\r\n" % size + payload + b"\r\n")
    op = parser.next_op()
    assert isinstance(op.payload, memoryview)
    assert bytes(op.payload) == payload


def test_small_payload_is_bytes():
    parser = Parser()
    parser.feed(b"PUB foo 5\r\nhello\r\n")
    op = parser.next_op()
    assert isinstance(op.payload, bytes)
    assert op.payload == b"hello"


@pytest.mark.parametrize("size", [10, ZERO_COPY_MIN, 100_000])
@pytest.mark.parametrize("n_chunks", [2, 3, 7])
def test_payload_straddling_chunks(size, n_chunks):
    payload = bytes(i % 253 for i in range(size))
    data = b"SUB a 1\r\nPUB foo.bar r %d\r\n" % size + payload + b"\r\nPING\r\n"
    step = len(data) // n_chunks + 1
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    ops = feed_chunks(chunks)
    assert ops == ops_of(Sub(b"a", None, b"1"), Pub(b"foo.bar", b"r", -1, str(size).encode(), payload), PING)


def test_payload_split_between_cr_and_lf():
    assert feed_chunks([b"PUB foo 2\r\nhi\r", b"\nPING\r\n"]) == ops_of(Pub(b"foo", None, -1, b"2", b"hi"), PING)


def test_payload_kept_when_chunk_is_reused_later():
    # Payloads of earlier chunks stay valid after more data is fed.
    parser = Parser()
    payload = b"a" * 1000
    parser.feed(b"PUB foo 1000\r\n" + payload + b"\r\n")
    first = parser.next_op()
    parser.feed(b"PUB foo 1000\r\n" + b"b" * 1000 + b"\r\n")
    second = parser.next_op()
    assert bytes(first.payload) == payload
    assert bytes(second.payload) == b"b" * 1000


@pytest.mark.parametrize(
    "data",
    [
        b"PUB foo 2\r\nabc\r\n",  # payload too long
        b"PUB foo 2\r\nok \r\n",
        b"PUB foo 2\r\nok\r \n",
        b"PUB foo 2\r\nok\n",  # LF only after a payload
        b"PUB foo 2\r\nokXY",
        b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhiXX",
    ],
)
def test_payload_not_followed_by_crlf(data):
    assert error_of(data) is errors.UNKNOWN_OP
    # Same when the bytes arrive one at a time.
    parser = Parser()
    with pytest.raises(ProtocolError) as info:
        for i in range(len(data)):
            parser.feed(data[i : i + 1])
            drain(parser)
    assert info.value.error is errors.UNKNOWN_OP


# -- limits ---------------------------------------------------------------------------------


def test_max_payload_checked_at_the_control_line():
    # Only the control line is fed: the violation is reported before any payload arrives.
    assert error_of(b"PUB foo 1048577\r\n") is errors.MAX_PAYLOAD
    assert error_of(b"PUB foo 65\r\n", max_payload=64) is errors.MAX_PAYLOAD
    assert error_of(b"PUB foo reply 65\r\n", max_payload=64) is errors.MAX_PAYLOAD
    # HPUB: the total size (headers included) counts.
    assert error_of(b"HPUB foo 12 65\r\n", max_payload=64) is errors.MAX_PAYLOAD


def test_max_payload_exact_is_allowed():
    payload = b"x" * 64
    assert feed_chunks([b"PUB foo 64\r\n" + payload + b"\r\n"], max_payload=64) == ops_of(Pub(b"foo", None, -1, b"64", payload))
    parser = Parser(max_payload=64)
    parser.feed(b"PUB foo 64\r\n")
    assert parser.next_op() is NEED_DATA


def _sub_line(arg_len: int) -> bytes:
    """``SUB <subject> 1`` whose argument (after ``SUB ``) is ``arg_len`` bytes, no line end."""
    return b"SUB " + b"s" * (arg_len - 2) + b" 1"


def test_max_control_line_complete_line():
    assert feed_chunks([_sub_line(64) + b"\r\n"], max_control_line=64) == ops_of(Sub(b"s" * 62, None, b"1"))
    assert error_of(_sub_line(65) + b"\r\n", max_control_line=64) is errors.MAX_CONTROL_LINE
    assert error_of(_sub_line(4097) + b"\r\n") is errors.MAX_CONTROL_LINE
    assert error_of(b"PUB " + b"s" * 63 + b" 0\r\n\r\n", max_control_line=64) is errors.MAX_CONTROL_LINE


def test_max_control_line_partial_line():
    # nats-server checks an unfinished argument at the end of every read (memory exhaustion).
    assert error_of(b"SUB " + b"s" * 6000) is errors.MAX_CONTROL_LINE
    assert error_of(b"PUB " + b"s" * 200, max_control_line=64) is errors.MAX_CONTROL_LINE
    assert error_of(b'CONNECT {"name":"' + b"n" * 200, max_control_line=64) is errors.MAX_CONTROL_LINE
    # Within the limit, an unfinished line just waits.
    parser = Parser(max_control_line=64)
    parser.feed(b"SUB " + b"s" * 30)
    assert parser.next_op() is NEED_DATA


def test_max_control_line_does_not_count_the_cr():
    # nats-server drops the CR from a split argument (argBuf = buf[as:i-drop]) before checking
    # its length, so an argument of exactly max_control_line bytes whose LF arrives in the
    # next read is accepted (checked against nats-server 2.9.10 with max_control_line: 64).
    parser = Parser(max_control_line=64)
    parser.feed(_sub_line(64) + b"\r")
    assert parser.next_op() is NEED_DATA
    parser.feed(b"\nPING\r\n")
    assert drain(parser) == ops_of(Sub(b"s" * 62, None, b"1"), PING)


def test_ping_line_not_limited_by_max_control_line():
    check_three_ways(b"PING " + b"x" * 200 + b"\r\n", [PING], max_control_line=64)


# -- errors ---------------------------------------------------------------------------------

# nats-server server/parser_test.go TestShouldFail, verbatim (the MSG ones are the "special
# case" list, parse errors for a client as well). Expected kind from the v2.9.10 recordings.
UNKNOWN = errors.UNKNOWN_OP
SILENT = errors.SILENT_CLOSE
SHOULD_FAIL = [
    ("xxx", UNKNOWN),
    ("Px", UNKNOWN),
    ("PIx", UNKNOWN),
    ("PINx", UNKNOWN),
    (" PING", UNKNOWN),
    ("POx", UNKNOWN),
    ("PONx", UNKNOWN),
    ("+x", UNKNOWN),
    ("+Ox", UNKNOWN),
    ("-x", UNKNOWN),
    ("-Ex", UNKNOWN),
    ("-ERx", UNKNOWN),
    ("-ERRx", UNKNOWN),
    ("Cx", UNKNOWN),
    ("COx", UNKNOWN),
    ("CONx", UNKNOWN),
    ("CONNx", UNKNOWN),
    ("CONNEx", UNKNOWN),
    ("CONNECx", UNKNOWN),
    ("CONNECx", UNKNOWN),
    ("CONNECT \r\n", SILENT),
    ("PUx", UNKNOWN),
    ("PUB foo\r\n", SILENT),
    ("PUB  \r\n", SILENT),
    ("PUB foo bar       \r\n", SILENT),
    ("PUB foo 2\r\nok \r\n", UNKNOWN),
    ("PUB foo 2\r\nok\r \n", UNKNOWN),
    ("Sx", UNKNOWN),
    ("SUx", UNKNOWN),
    ("SUB\r\n", UNKNOWN),
    ("SUB  \r\n", SILENT),
    ("SUB foo\r\n", SILENT),
    ("SUB foo bar baz 22\r\n", SILENT),
    ("Ux", UNKNOWN),
    ("UNx", UNKNOWN),
    ("UNSx", UNKNOWN),
    ("UNSUx", UNKNOWN),
    ("UNSUBx", UNKNOWN),
    ("UNSUBUNSUB 1\r\n", UNKNOWN),
    ("UNSUB_2\r\n", UNKNOWN),
    ("UNSUB_UNSUB_UNSUB 2\r\n", UNKNOWN),
    ("UNSUB_\t2\r\n", UNKNOWN),
    ("UNSUB\r\n", UNKNOWN),
    ("UNSUB \r\n", SILENT),
    ("UNSUB          \t       \r\n", SILENT),
    ("Ix", UNKNOWN),
    ("INx", UNKNOWN),
    ("INFx", UNKNOWN),
    ("INFO  \r\n", SILENT),
    # Special case for MSG (a client may never send it).
    ("Mx", UNKNOWN),
    ("MSx", UNKNOWN),
    ("MSGx", UNKNOWN),
    ("MSG  \r\n", UNKNOWN),
]


@pytest.mark.parametrize(("proto", "kind"), SHOULD_FAIL, ids=[repr(p) for p, _ in SHOULD_FAIL])
def test_should_fail(proto, kind):
    data = proto.encode()
    assert error_of(data) is kind
    # Byte by byte the error is the same (raised at the latest at the last byte).
    parser = Parser()
    with pytest.raises(ProtocolError) as info:
        for i in range(len(data)):
            parser.feed(data[i : i + 1])
            drain(parser)
    assert info.value.error is kind


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"PUB foo -1\r\n", SILENT),
        (b"PUB foo +1\r\n", SILENT),
        (b"PUB foo 1x\r\n", SILENT),
        (b"PUB foo 1234567890\r\n", SILENT),  # parseSize: at most 9 digits
        (b"PUB a b c 1\r\n", SILENT),
        (b"HPUB foo 12\r\n", SILENT),
        (b"HPUB foo 14 12\r\n", SILENT),  # header larger than total
        (b"HPUB foo a 12\r\n", SILENT),
        (b"SUB a b c d\r\n", SILENT),
        (b"UNSUB 1 2 3\r\n", SILENT),
        (b"CONNECT {bad json\r\n", SILENT),
        (b"CONNECT [1,2]\r\n", SILENT),
        (b"MSG foo 1 2\r\nhi\r\n", UNKNOWN),
        (b"HMSG foo 1 2 2\r\nhi\r\n", UNKNOWN),
        (b"\r\n", UNKNOWN),
        (b"\x00PING\r\n", UNKNOWN),
    ],
)
def test_argument_and_verb_errors(data, kind):
    assert error_of(data) is kind


def test_hpub_without_header_support_closes_silently():
    assert error_of(b"HPUB foo 12 12\r\nNATS/1.0\r\n\r\n\r\n", headers=False) is SILENT


def test_unsub_non_numeric_max_unsubscribes_now():
    assert feed_chunks([b"UNSUB 1 x\r\n"]) == ops_of(Unsub(b"1", -1))


def test_client_err_closes_silently():
    error = error_of(b"-ERR 'oops'\r\n")
    assert error.wire == b""
    assert error.closes


def test_ops_before_the_error_are_returned():
    parser = Parser()
    parser.feed(b"SUB foo 1\r\nPING\r\nXXX\r\n")
    assert norm(parser.next_op()) == norm(Sub(b"foo", None, b"1"))
    assert parser.next_op() is PING
    with pytest.raises(ProtocolError) as info:
        parser.next_op()
    assert info.value.error is UNKNOWN


# -- auth_pending ---------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"PING\r\n", b"SUB foo 1\r\n", b"PUB foo 0\r\n\r\n", b"P", b"+OK\r\n", b"INFO {}\r\n"])
def test_auth_pending_first_op_must_be_connect(data):
    assert error_of(data, auth_pending=True) is errors.AUTH_VIOLATION


@pytest.mark.parametrize("data", [b"CONNECT {}\r\n", b"connect {}\r\n"])
def test_auth_pending_connect_is_accepted(data):
    check_three_ways(data, [Connect({})], trailing_cases=[b"C", b"CONNECT {"], auth_pending=True)


# -- hypothesis: arbitrary split points and random bytes -----------------------------------

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(lambda tokens: ".".join(tokens).encode())
SUB_SUBJECT = st.lists(st.one_of(TOKEN, st.just("*")), min_size=1, max_size=4).flatmap(
    lambda tokens: st.sampled_from([".".join(tokens), ".".join([*tokens, ">"])])
).map(str.encode)
SID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6).map(str.encode)
SEP = st.sampled_from([b" ", b"\t", b"  ", b" \t "])
EOL = st.sampled_from([b"\r\n", b"\n"])
PAYLOAD = st.one_of(st.binary(max_size=40), st.binary(min_size=ZERO_COPY_MIN, max_size=ZERO_COPY_MIN + 600))


def _verb(name: bytes):
    return st.sampled_from([name, name.lower(), name.capitalize()])


@st.composite
def pub_op(draw):
    verb, sep, eol = draw(_verb(b"PUB")), draw(SEP), draw(EOL)
    subject, payload = draw(SUBJECT), draw(PAYLOAD)
    reply = draw(st.none() | SUBJECT)
    size = str(len(payload)).encode()
    args = [subject, size] if reply is None else [subject, reply, size]
    wire = verb + sep + sep.join(args) + eol + payload + b"\r\n"
    return wire, Pub(subject, reply, -1, size, payload)


@st.composite
def hpub_op(draw):
    verb, sep, eol = draw(_verb(b"HPUB")), draw(SEP), draw(EOL)
    subject = draw(SUBJECT)
    reply = draw(st.none() | SUBJECT)
    headers = b"NATS/1.0\r\n" + b"".join(b"K%d: %s\r\n" % (i, v) for i, v in enumerate(draw(st.lists(SID, max_size=3)))) + b"\r\n"
    body = draw(PAYLOAD)
    payload = headers + body
    sizes = [str(len(headers)).encode(), str(len(payload)).encode()]
    args = [subject, *sizes] if reply is None else [subject, reply, *sizes]
    wire = verb + sep + sep.join(args) + eol + payload + b"\r\n"
    return wire, Pub(subject, reply, len(headers), b" ".join(sizes), payload)


@st.composite
def sub_op(draw):
    verb, sep, eol = draw(_verb(b"SUB")), draw(SEP), draw(EOL)
    subject, sid = draw(SUB_SUBJECT), draw(SID)
    queue = draw(st.none() | TOKEN.map(str.encode))
    args = [subject, sid] if queue is None else [subject, queue, sid]
    return verb + sep + sep.join(args) + eol, Sub(subject, queue, sid)


@st.composite
def unsub_op(draw):
    verb, sep, eol = draw(_verb(b"UNSUB")), draw(SEP), draw(EOL)
    sid = draw(SID)
    max_msgs = draw(st.none() | st.integers(min_value=0, max_value=999_999_999))
    if max_msgs is None:
        return verb + sep + sid + eol, Unsub(sid, -1)
    return verb + sep + sid + sep + str(max_msgs).encode() + eol, Unsub(sid, max_msgs)


@st.composite
def connect_op(draw):
    options = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "verbose": st.booleans(),
                "pedantic": st.booleans(),
                "echo": st.booleans(),
                "name": st.text(max_size=10),
                "protocol": st.integers(0, 1),
            },
        )
    )
    return draw(_verb(b"CONNECT")) + b" " + orjson.dumps(options) + draw(EOL), Connect(options)


@st.composite
def ping_pong_op(draw):
    op = draw(st.sampled_from([PING, PONG]))
    verb = draw(_verb(b"PING" if op is PING else b"PONG"))
    rest = draw(st.sampled_from([b"", b" ", b" foo", b"  \r  "]))
    return verb + rest + draw(EOL), op


ANY_OP = st.one_of(pub_op(), hpub_op(), sub_op(), unsub_op(), connect_op(), ping_pong_op())


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(ANY_OP, min_size=1, max_size=12), data=st.data())
def test_arbitrary_split_points_give_the_same_ops(ops, data):
    wire = b"".join(w for w, _ in ops)
    expected = [norm(op) for _, op in ops]
    assert feed_chunks([wire]) == expected
    points = data.draw(st.lists(st.integers(min_value=1, max_value=max(1, len(wire) - 1)), max_size=20))
    assert feed_chunks(split_at(wire, points)) == expected


# Fragments that steer random input into the parser's interesting states.
FRAGMENTS = [
    b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"PONG", b"CONNECT ", b"INFO ", b"+OK", b"-ERR ",
    b"MSG ", b"foo", b" 5", b" 0", b" 12 14", b"\r\n", b"\n", b"\r", b" ", b"\t", b"{}", b"NATS/1.0\r\n\r\n",
    b"999999999", b"1234567890", b'{"verbose":1}', b"*", b">", b".",
]
GARBAGE = st.lists(st.one_of(st.binary(max_size=20), st.sampled_from(FRAGMENTS)), max_size=30).map(b"".join)


def _parse_until_error(chunks, **kwargs):
    parser = Parser(**kwargs)
    ops = []
    for chunk in chunks:
        parser.feed(chunk)
        try:
            ops += drain(parser)
        except ProtocolError as exc:
            return ops, exc.error
    return ops, None


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=200), GARBAGE), points=st.lists(st.integers(min_value=1, max_value=200), max_size=10))
def test_random_bytes_only_raise_protocol_error(data, points):
    for kwargs in ({}, {"max_control_line": 16, "max_payload": 8}, {"headers": False}, {"auth_pending": True}):
        ops, error = _parse_until_error([data], **kwargs)  # anything else propagates and fails
        split_ops, split_error = _parse_until_error(split_at(data, [p for p in points if p < len(data)]), **kwargs)
        if error is None and split_error is None:
            assert split_ops == ops


# -- JSON that orjson refuses and Go accepts ------------------------------------------------------


def test_go_json_fallback_accepts_deep_nesting_like_go():
    # orjson stops at 1024 levels (newer releases refuse earlier than 3.8); Go allows 10000.
    from natserver.protocol.parser import _go_json_loads

    options = _go_json_loads(b'{"verbose":false,"x":' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert options["verbose"] is False


def test_go_json_fallback_refuses_what_go_refuses():
    from natserver.protocol.parser import _go_json_loads

    with pytest.raises(ProtocolError) as info:
        _go_json_loads(b"[" * 10001 + b"]" * 10001)
    assert info.value.error is errors.SILENT_CLOSE


def test_go_json_fallback_replaces_bad_utf8_and_lone_surrogates():
    from natserver.protocol.parser import _go_json_loads

    assert _go_json_loads(b'{"name":"a\xffb"}') == {"name": "a\ufffdb"}
    assert _go_json_loads(b'{"name":"\\ud800"}') == {"name": "\ufffd"}
