"""The compiled PUB loop (natserver/protocol/_cscan.c) must give exactly the ops the pure-Python
parser gives: same Pubs and PubRuns, same bytes, same errors, for any input and any split.

CI builds the extension (``.ci/run`` checks that it imports); on a machine without a compiler
it is absent and the parser runs in Python alone, which the rest of the suite covers."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.protocol import parser as parser_module
from natserver.protocol.errors import ProtocolError
from natserver.protocol.ops import Pub, PubRun
from natserver.protocol.parser import Parser

try:
    _cscan = importlib.import_module("natserver.protocol._cscan")
except ImportError:  # pragma: no cover - CI always builds it
    _cscan = None

needs_extension = pytest.mark.skipif(_cscan is None, reason="natserver.protocol._cscan is not built here")

# Subjects repeat often (runs open and close) and change often (the compiled loop's case).
SUBJECTS = st.sampled_from([b"a", b"a", b"foo.bar", b"x" * 70, b"s.\xc3\xa9", b"_INBOX.abc.1", b"b"])
BLANKS = st.sampled_from([b" ", b" ", b"  ", b"\t", b" \t"])
NOISE = st.sampled_from([b"", b"", b"", b"", b"\r", b"\n", b" ", b"PUB ", b"\r\n", b"x", b"\x0b", b"\x0c", b"0", b"-"])
SIZES = st.sampled_from([0, 1, 5, 5, 16, 16, 99, 511, 512, 1024, 1025, 2000, 9999, 10000, 99999, 100000])


@st.composite
def frames(draw) -> bytes:
    kind = draw(st.sampled_from(["pub"] * 12 + ["hpub", "sub", "ping", "lower"]))
    if kind == "sub":
        return b"SUB " + draw(SUBJECTS) + b" 1\r\n"
    if kind == "ping":
        return b"PING\r\n"
    subject = draw(SUBJECTS)
    size = draw(SIZES)
    reply = draw(st.one_of(st.none(), SUBJECTS))
    digits = str(size).encode() if draw(st.booleans()) or size == 0 else b"0" + str(size).encode()
    verb = {"pub": b"PUB ", "lower": b"pub ", "hpub": b"HPUB "}[kind]
    header = draw(st.sampled_from([0, 0, 1, 12, 600, 2000]))  # (an HPUB's; larger than the total: refused)
    sizes = digits if kind != "hpub" else str(header).encode() + b" " + digits
    line = verb + draw(BLANKS)[1:] + subject + draw(BLANKS) + (reply + draw(BLANKS) if reply else b"") + sizes
    payload = (draw(st.sampled_from([b"x", b"\r\nPUB a 1\r\n", b"y"])) * size)[:size]
    if draw(st.integers(0, 4)):  # mostly well-formed, so that runs and changing subjects meet
        return line + b"\r\n" + payload + b"\r\n"
    # Now and then a stray byte where the protocol does not allow one.
    at = draw(st.integers(0, len(line)))
    line = line[:at] + draw(NOISE) + line[at:]
    return line + draw(st.sampled_from([b"\r\n", b"\n"])) + payload + draw(st.sampled_from([b"\r\n", b"\rx", b"xx"]))


def _plain(op):
    return (op.__class__.__name__, *(bytes(x) if isinstance(x, memoryview) else x for x in op))


def parse(data: bytes, cuts: list[int], coalesce: bool, max_payload: int):
    parser = Parser(max_control_line=256, max_payload=max_payload)
    parser.coalesce = coalesce
    ops, error = [], None
    bounds = [0, *sorted(cuts), len(data)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi > lo:
            parser.feed(data[lo:hi])
        try:
            while batch := parser.parse():
                ops.extend(_plain(op) for op in batch)
        except ProtocolError as exc:
            error = exc.error
            break
    return ops, error


@needs_extension
@settings(max_examples=500, deadline=None)
@given(
    stream=st.lists(frames(), min_size=1, max_size=16).map(b"".join),
    coalesce=st.booleans(),
    max_payload=st.sampled_from([1 << 20, 600, 16]),
    data=st.data(),
)
def test_compiled_and_python_parsers_give_the_same_ops(stream, coalesce, max_payload, data):
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=3))
    assert_same_ops(stream, cuts, coalesce, max_payload)


def assert_same_ops(stream: bytes, cuts: list[int], coalesce: bool, max_payload: int) -> None:
    saved = parser_module._scan_pubs, parser_module._scan_run, parser_module._scan_hpubs
    try:
        parser_module._scan_pubs, parser_module._scan_run = _cscan.scan_pubs, _cscan.scan_run
        parser_module._scan_hpubs = _cscan.scan_hpubs
        compiled = parse(stream, cuts, coalesce, max_payload)
        parser_module._scan_pubs = parser_module._scan_run = parser_module._scan_hpubs = None
        python = parse(stream, cuts, coalesce, max_payload)
    finally:
        parser_module._scan_pubs, parser_module._scan_run, parser_module._scan_hpubs = saved
    assert compiled == python


@needs_extension
def test_a_run_may_open_after_a_repeat_that_could_not():
    # The second "a" differs in its blanks, so it is a Pub of its own; the third may then open a
    # run with it, so the compiled loop must stop there too (given the subject of the last Pub).
    stream = b"PUB a 1\r\nx\r\nPUB a  1\r\nx\r\nPUB a  1\r\nx\r\nPUB b 1\r\nx\r\n"
    assert_same_ops(stream, [], True, 1 << 20)
    assert [op[0] for op in parse(stream, [], True, 1 << 20)[0]] == ["Pub", "PubRun", "Pub"]


@needs_extension
def test_the_compiled_loop_reads_changing_subjects_and_stops_at_a_repeat():
    data = b"PUB a 1\r\nx\r\nPUB b r 600\r\n" + b"y" * 600 + b"\r\nPUB b 2\r\nzz\r\nPUB c 1\r\nw\r\n"
    ops: list = []
    pos, last = _cscan.scan_pubs(data, 0, memoryview(data), ops, Pub, 1 << 20, 4096, None, True)
    assert [op.subject for op in ops] == [b"a", b"b"]
    assert ops[0] == (b"a", None, -1, b"1", b"x")
    assert ops[1][:4] == (b"b", b"r", -1, b"600") and isinstance(ops[1].payload, memoryview)  # zero copy
    assert data[pos:].startswith(b"PUB b 2") and data[last:].startswith(b"PUB b r 600")
    # Without coalescing, nothing stops it but the end of the data.
    ops = []
    pos, last = _cscan.scan_pubs(data, 0, memoryview(data), ops, Pub, 1 << 20, 4096, None, False)
    assert len(ops) == 4 and pos == len(data) and data[last:].startswith(b"PUB c 1")


@needs_extension
def test_the_compiled_loop_reads_hpubs_and_stops_at_a_doubt():
    hdr = b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n"
    data = (b"HPUB c.1 _R.a 26 26\r\n" + hdr + b"\r\nHPUB c.2 0 2\r\nhi\r\nHPUB d r 12 600\r\n" + b"y" * 600
            + b"\r\nHPUB e 01 1\r\nx\r\n")
    ops: list = []
    pos = _cscan.scan_hpubs(data, 0, memoryview(data), ops, Pub, 1 << 20, 4096)
    assert ops[0] == (b"c.1", b"_R.a", 26, b"26 26", hdr)
    assert ops[1] == (b"c.2", None, 0, b"2", b"hi")  # (no header bytes: the total's digits alone)
    assert ops[2][:4] == (b"d", b"r", 12, b"12 600") and isinstance(ops[2].payload, memoryview)  # zero copy
    assert len(ops) == 3 and data[pos:].startswith(b"HPUB e 01 1")  # (not canonical: Python's)
    assert _cscan.scan_hpubs(data, 0, memoryview(data), [], Pub, 100, 4096) == data.index(b"HPUB d")


@needs_extension
def test_runs_still_form_with_the_compiled_loop(monkeypatch):
    monkeypatch.setattr(parser_module, "_scan_pubs", _cscan.scan_pubs)
    monkeypatch.setattr(parser_module, "_scan_run", _cscan.scan_run)
    data = b"PUB a 1\r\nx\r\n" + b"PUB b 1\r\ny\r\n" * 3 + b"PUB c 1\r\nz\r\n"
    parser = Parser()
    parser.coalesce = True
    parser.feed(data)
    ops = parser.parse()
    assert [op.__class__ for op in ops] == [Pub, PubRun, Pub]
    assert ops[1].count == 3


def test_the_implementation_in_use_is_reported():
    built = _cscan is not None
    running_compiled = built and not os.environ.get("NATSERVER_NO_EXTENSIONS")
    assert parser_module.PARSER_IMPLEMENTATION == ("compiled" if running_compiled else "python")
    assert (parser_module._scan_pubs is not None) == running_compiled
    assert (parser_module.restride is not None) == running_compiled
    assert parser_module.compiled("scan_pubs", {"NATSERVER_NO_EXTENSIONS": "1"}) is None
    assert (parser_module.compiled("scan_pubs", {}) is not None) == built


@needs_extension
@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 20),
    size=st.integers(0, 40),
    subject=st.sampled_from([b"a", b"foo.bar", b"x" * 30]),
    head=st.sampled_from([b"MSG a 1 ", b"MSG foo.bar 12345 ", b"M"]),
    fill=st.sampled_from([b"x", b"PUB a ", b"\r\n"]),
)
def test_restride_is_replace_where_replace_is_exact(count, size, subject, head, fill):
    prefix = b"PUB " + subject + b" "
    message = prefix + str(size).encode() + b"\r\n" + (fill * size)[:size] + b"\r\n"
    data = message * count
    out = _cscan.restride(data, count, len(prefix), head)
    expected = b"".join(head + message[len(prefix) :] for _ in range(count))
    assert out == expected
    # a long run comes as a memoryview of the parser's read: the same bytes out
    assert _cscan.restride(memoryview(b"~" + data)[1:], count, len(prefix), head) == expected
    if data.count(prefix) == count:  # the prefix is in no payload: what the router's replace gives
        assert out == data.replace(prefix, head)


@needs_extension
def test_restride_refuses_data_that_is_not_count_messages_of_one_length():
    with pytest.raises(ValueError):
        _cscan.restride(b"PUB a 1\r\nx\r\nPUB a 2\r\n", 2, 6, b"MSG a 1 ")
    with pytest.raises(ValueError):
        _cscan.restride(b"PUB a 1\r\nx\r\n", 1, 100, b"MSG a 1 ")


@st.composite
def clean_pubs(draw) -> bytes:
    """Well-formed PUBs on two subjects and two sizes: long runs, uniform or not."""
    subject = draw(st.sampled_from([b"a", b"a", b"a", b"b"]))
    size = draw(st.sampled_from([1, 1, 2, 600, 1500, 20000]))  # (past 1 KiB: the fast paths take up to 5 digits)
    reply = draw(st.sampled_from([None, None, None, b"r"]))
    return b"PUB " + subject + b" " + (reply + b" " if reply else b"") + b"%d\r\n" % size + b"p" * size + b"\r\n"


@needs_extension
@settings(max_examples=300, deadline=None)
@given(stream=st.lists(clean_pubs(), min_size=1, max_size=40).map(b"".join), data=st.data())
def test_compiled_and_python_runs_are_the_same(stream, data):
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=2))
    assert_same_ops(stream, cuts, True, 1 << 20)


@st.composite
def request_pubs(draw) -> bytes:
    """PUBs on one subject with replies: the compiled run loop's "<reply> <size>" lines, and
    replies it must refuse as the Python loop does (blanks, CR, \\x0b, \\x0c, past the window)."""
    reply = draw(st.sampled_from([None, b"_R.a", b"_R.a", b"_INBOX.1", b"a\x0bb", b"a\tb", b"a\rb", b"a b", b"r" * 130]))
    size = draw(st.sampled_from([0, 16, 16, 17, 1024, 1025, 99999, 100000]))
    sep = draw(st.sampled_from([b" ", b" ", b" ", b"  "]))
    return b"PUB q " + (reply + sep if reply else b"") + b"%d\r\n" % size + b"p" * size + b"\r\n"


@needs_extension
@settings(max_examples=300, deadline=None)
@given(stream=st.lists(request_pubs(), min_size=1, max_size=30).map(b"".join), data=st.data(),
       max_payload=st.sampled_from([1 << 20, 1024]))
def test_compiled_and_python_runs_of_requests_are_the_same(stream, data, max_payload):
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=2))
    assert_same_ops(stream, cuts, True, max_payload)


@needs_extension
def test_the_compiled_run_loop_takes_requests():
    # A run's "<reply> <size>" lines are read in C, not left to Python's general loop (2 us a
    # message in bytecode: a JetStream publisher's window of acked PUBs on one subject).
    data = b"PUB q _R.1 2\r\nab\r\nPUB q 3\r\nabc\r\nPUB q _R.2 2\r\nab\r\nPUB q a\tb 1\r\nx\r\n"
    pos, count, size, uniform, replies = _cscan.scan_run(data, 0, b"PUB q ", 2, 1 << 20, 4096)
    assert (count, size, uniform, replies) == (3, 7, False, True)
    assert data[pos:].startswith(b"PUB q a\tb")  # (a tab in the reply: the general path's)
    assert _cscan.scan_run(data, 0, b"PUB q ", 2, 2, 4096)[1:] == (1, 2, True, True)  # (3 > max_payload)
    assert _cscan.scan_run(b"PUB q 5\r\nab", 0, b"PUB q ", 5, 1 << 20, 4096)[1:] == (0, 0, True, False)
