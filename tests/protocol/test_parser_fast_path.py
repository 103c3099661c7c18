"""The parser's fast path for PUB (slice compares, partition at CR LF, runs) must read
exactly what the exact path reads: same ops, same error, for any bytes. The exact path is
forced with the parser's _exact flag. Vertical tabs and form feeds (blanks to bytes.split(), not
to nats-server) come in control lines and in payloads: the fast path checks each line it takes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.protocol.errors import ProtocolError
from natserver.protocol.parser import Parser

SUBJECTS = st.sampled_from([b"a", b"foo.bar", b"x" * 70, b"s.\xc3\xa9", b"_INBOX.abc.1"])
BLANKS = st.sampled_from([b" ", b"  ", b"\t", b" \t"])
NOISE = st.sampled_from([b"", b"", b"", b"\r", b"\n", b" ", b"PUB ", b"\r\n", b"x", b"\x0b", b"\x0c"])


@st.composite
def pub_frames(draw) -> bytes:
    subject = draw(SUBJECTS)
    size = draw(st.sampled_from([0, 1, 5, 16, 99, 512, 1024, 1025]))
    reply = draw(st.one_of(st.none(), SUBJECTS))
    blank = draw(BLANKS)
    digits = str(size).encode() if draw(st.booleans()) or size == 0 else b"0" + str(size).encode()
    line = b"PUB " + subject + blank + (reply + b" " if reply else b"") + digits
    # Now and then a stray byte where the protocol does not allow one.
    at = draw(st.integers(0, len(line)))
    line = line[:at] + draw(NOISE) + line[at:]
    payload = draw(st.sampled_from([b"x", b"\r\nPUB a 1\r\n", b"y", b"\x0b\x0c"])) * size
    payload = payload[:size]
    return line + b"\r\n" + payload + draw(st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\rx", b"xx"]))


HEADERS = st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"", b"NATS/1.0 503\r\n\r\n"])


@st.composite
def hpub_frames(draw) -> bytes:
    """HPUBs (Parser._hpubs), now and then with sizes that do not add up or a stray byte."""
    subject = draw(SUBJECTS)
    header = draw(HEADERS)
    body = draw(st.sampled_from([b"", b"x", b"\r\nHPUB a 0 1\r\n", b"y" * 600, b"z" * 1030]))
    header_size = len(header) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    size = len(header) + len(body) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    reply = draw(st.one_of(st.none(), SUBJECTS))
    blank = draw(BLANKS)
    digits = (str(header_size).encode() if draw(st.booleans()) else b"0" + str(header_size).encode())
    line = b"HPUB " + subject + blank + (reply + b" " if reply else b"") + digits + b" " + str(size).encode()
    at = draw(st.integers(0, len(line)))
    line = line[:at] + draw(NOISE) + line[at:]
    return line + b"\r\n" + header + body + draw(st.sampled_from([b"\r\n", b"\r\n", b"\rx"]))


class ExactParser(Parser):
    """Every buffer takes the exact path (what a vertical tab or form feed in it would do)."""

    def _set_buffer(self, data: bytes) -> None:
        super()._set_buffer(data)
        self._exact = True


def parse(data: bytes, exact: bool, coalesce: bool, cut: int):
    parser = (ExactParser if exact else Parser)(max_control_line=256)
    parser.coalesce = coalesce
    ops, error = [], None
    for chunk in (data[:cut], data[cut:]):
        if chunk:
            parser.feed(chunk)
        try:
            while True:
                batch = parser.parse()
                if not batch:
                    break
                for op in batch:
                    ops.extend(parser.expand(op.data) if op.__class__.__name__ == "PubRun" else [op])
        except ProtocolError as exc:
            error = exc.error
            break
    return [tuple(bytes(x) if isinstance(x, memoryview) else x for x in op) for op in ops], error


def _assert_fast_reads_as_exact(frames: list[bytes], coalesce: bool, data) -> None:
    """The frames joined, cut once anywhere, read alike by both paths."""
    stream = b"".join(frames)
    cut = data.draw(st.integers(0, len(stream)))
    assert parse(stream, False, coalesce, cut) == parse(stream, True, coalesce, cut)


@settings(max_examples=400, deadline=None)
@given(frames=st.lists(pub_frames(), min_size=1, max_size=12), coalesce=st.booleans(), data=st.data())
def test_fast_path_reads_what_the_exact_path_reads(frames, coalesce, data):
    _assert_fast_reads_as_exact(frames, coalesce, data)


@settings(max_examples=400, deadline=None)
@given(frames=st.lists(st.one_of(pub_frames(), hpub_frames()), min_size=1, max_size=12), coalesce=st.booleans(),
       data=st.data())
def test_fast_path_reads_hpubs_as_the_exact_path_does(frames, coalesce, data):
    _assert_fast_reads_as_exact(frames, coalesce, data)


def test_odd_spaces_in_payloads_keep_the_fast_path():
    """A vertical tab or form feed in a payload (binary payloads mostly hold one) leaves the
    PUBs to the fast path, runs and all; in a control line it is part of the token, as in
    nats-server, and only that line takes the exact path."""
    payload = bytes(range(256)) * 4
    frame = b"PUB bin.s 1024\r\n" + payload + b"\r\n"
    parser = Parser()
    parser.coalesce = True
    parser.feed(frame * 40 + b"PUB a\x0bb 1\r\nx\r\n" + frame * 2)
    ops = parser.parse()
    assert [(type(op).__name__, op.count if type(op).__name__ == "PubRun" else op.subject) for op in ops] == [
        ("PubRun", 40), ("Pub", b"a\x0bb"), ("PubRun", 2)]
    assert bytes(ops[0].data) == frame * 40


def test_hpubs_take_the_fast_path():
    """A series of HPUBs is read by Parser._hpubs, not op by op (the test above would pass
    with the fast path unused)."""
    frame = b"HPUB c.1 _R.a 26 26\r\nNATS/1.0\r\nNats-Incr: 1\r\n\r\n\r\n"
    calls = []

    class Counting(Parser):
        def _hpubs(self, *args):
            calls.append(1)
            return super()._hpubs(*args)

    parser = Counting()
    parser.feed(frame * 50 + b"PUB a 1\r\nx\r\n" + frame * 50)
    ops = parser.parse()
    assert len(ops) == 101 and len(calls) == 2
    assert tuple(ops[0]) == (b"c.1", b"_R.a", 26, b"26 26", frame[21:47])


REPLIES = st.sampled_from([b"_R.a", b"_R.a", b"_INBOX.x.1", b"r", b"a\x0bb", b"a\tb", b"a b", b"\x0c", b"r" * 140])


@st.composite
def request_frames(draw) -> bytes:
    """PUBs on one subject, most with a reply (a JetStream publisher's, a service's callers):
    the run loop's "<reply> <size>" lines, now and then with a reply it must leave to the exact
    path (a blank in it, a line past its window) or a stray byte."""
    reply = draw(st.one_of(st.none(), REPLIES, REPLIES, REPLIES))
    size = draw(st.sampled_from([0, 3, 16, 16, 1024, 1025, 99999, 100000]))
    digits = str(size).encode() if draw(st.integers(0, 5)) or size == 0 else b"0" + str(size).encode()
    line = b"PUB q.1 " + (reply + draw(st.sampled_from([b" ", b" ", b" ", b"  ", b"\t"])) if reply else b"") + digits
    if not draw(st.integers(0, 6)):
        at = draw(st.integers(0, len(line)))
        line = line[:at] + draw(NOISE) + line[at:]
    return line + b"\r\n" + b"p" * size + draw(st.sampled_from([b"\r\n"] * 6 + [b"\rx"]))


@settings(max_examples=400, deadline=None)
@given(frames=st.lists(request_frames(), min_size=1, max_size=12), coalesce=st.booleans(), data=st.data())
def test_runs_of_requests_read_as_the_exact_path_reads_them(frames, coalesce, data):
    _assert_fast_reads_as_exact(frames, coalesce, data)


def test_requests_on_one_subject_form_one_run():
    # A JetStream publisher's window: one PubRun (its Pubs for the stream by expand), not a
    # Pub each read by the general path at 2 us apiece.
    window = b"".join(b"PUB js.in _R.%d %d\r\n%s\r\n" % (i, 16 + i % 2, b"x" * (16 + i % 2)) for i in range(512))
    parser = Parser()
    parser.coalesce = True
    parser.feed(window)
    (run,) = parser.parse()
    assert run.__class__.__name__ == "PubRun" and run.count == 512 and run.replies and not run.uniform
    pubs = parser.expand(run.data)
    assert [(p.reply, len(p.payload)) for p in pubs] == [(b"_R.%d" % i, 16 + i % 2) for i in range(512)]
