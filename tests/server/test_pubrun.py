"""PubRun: runs of same-subject PUBs delivered with one bytes.replace per subscriber.

The rewrite is only allowed when it is exact, so every test here compares against the plain
per-message path: the parser's coalesced output, expanded, must equal its ops without
coalescing, and a server must put the same bytes on the wire either way.
"""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import natserver
from natserver import Parser, Pub
from natserver.protocol.ops import PubRun


def parse_all(chunks, coalesce: bool) -> list:
    parser = Parser()
    parser.coalesce = coalesce
    ops = []
    for chunk in chunks:
        parser.feed(chunk)
        ops.extend(parser.parse())
    return ops


def expanded(ops) -> list:
    out = []
    for op in ops:
        if isinstance(op, PubRun):
            out.extend(Parser().expand(op.data))
        else:
            out.append(op)
    return [tuple(bytes(x) if isinstance(x, memoryview) else x for x in op) for op in out]


subjects = st.sampled_from([b"foo", b"foo.bar", b"x", b"PUB", b"a.b.c"])
payloads = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"PUB foo ", b"xxPUB foo 1\r\n", b"\r\nPUB foo 3\r\n", b"PUB x ", b""]),
)


@st.composite
def pub_streams(draw):
    parts = []
    for _ in range(draw(st.integers(1, 30))):
        subject = draw(subjects)
        payload = draw(payloads)
        reply = draw(st.sampled_from([None, None, b"_INBOX.1", b"r"]))
        spaces = draw(st.sampled_from([b" ", b" ", b" ", b"  ", b"\t"]))
        after_subject = draw(st.sampled_from([spaces, spaces, b"  ", b" \t"]))  # nats-py: 2 spaces
        line = b"PUB" + b" " + subject
        if reply:
            line += after_subject + reply + spaces
        else:
            line += after_subject
        line += str(len(payload)).encode() + b"\r\n"
        parts.append(line + payload + b"\r\n")
    data = b"".join(parts)
    points = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    chunks, last = [], 0
    for p in points:
        chunks.append(data[last:p])
        last = p
    chunks.append(data[last:])
    return chunks


@settings(max_examples=300, deadline=None)
@given(pub_streams())
def test_coalesced_ops_expand_to_the_plain_ops(chunks):
    plain = expanded(parse_all(chunks, coalesce=False))
    assert all(isinstance(op, tuple) for op in plain)
    assert expanded(parse_all(chunks, coalesce=True)) == plain


@settings(max_examples=300, deadline=None)
@given(pub_streams())
def test_replace_rewrite_is_exact(chunks):
    """What the router does with a run equals formatting each of its messages as a MSG
    whenever the prefix occurs once per message (the router's check; else it goes message by
    message)."""
    for op in parse_all(chunks, coalesce=True):
        if isinstance(op, PubRun):
            assert op.count == len(Parser().expand(op.data))
            data = bytes(op.data)  # (a long run is a memoryview of the read, as the router knows)
            if data.count(op.prefix) != op.count:
                continue  # a payload holds the prefix: the router refuses the rewrite
            head = b"MSG " + op.subject + b" 7 "
            by_replace = data.replace(op.prefix, head)
            one_by_one = b"".join(
                b"MSG %s 7 %s%s\r\n%s\r\n" % (p.subject, p.reply + b" " if p.reply else b"", p.sizes, bytes(p.payload))
                for p in Parser().expand(op.data)
            )
            assert by_replace == one_by_one
            assert op.count == len(Parser().expand(op.data))


def parse_until_error(chunks, coalesce: bool) -> tuple[list, str | None]:
    """The ops (expanded) a parser gives before its first error, and that error."""
    parser = Parser()
    parser.coalesce = coalesce
    ops: list = []
    try:
        for chunk in chunks:
            parser.feed(chunk)
            ops.extend(parser.parse())
    except natserver.ProtocolError as exc:
        return expanded(ops), repr(exc)
    return expanded(ops), None


@st.composite
def long_runs(draw):
    """Runs of one subject and one size long enough for the regex skip (_UNIFORM_RUN_SKIP),
    with payloads that hold the run's own header, and something that ends each run: another
    size, a reply, a tab, another subject, a payload that overruns its size, a bad trailer, a
    bare LF, or a cut."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        subject = draw(subjects)
        size = draw(st.sampled_from([0, 1, 2, 16, 40]))
        filler = b"PUB " + subject + b" %d\r\n" % size + b"\r\n" * 8
        for _ in range(draw(st.integers(30, 120))):
            start = draw(st.integers(0, 8))
            parts.append(b"PUB %s %d\r\n%s\r\n" % (subject, size, (filler[start:] + bytes(size))[:size]))
        end = draw(st.sampled_from(["size", "reply", "tab", "other", "overrun", "cr", "lf", "cr_arg", "none"]))
        if end == "size":
            parts.append(b"PUB %s %d\r\n%s\r\n" % (subject, size + 1, b"s" * (size + 1)))
        elif end == "reply":
            parts.append(b"PUB %s r %d\r\n%s\r\n" % (subject, size, b"r" * size))
        elif end == "tab":
            parts.append(b"PUB %s\t%d\r\n%s\r\n" % (subject, size, b"t" * size))
        elif end == "other":
            parts.append(b"PUB other %d\r\n%s\r\n" % (size, b"o" * size))
        elif end == "overrun":
            parts.append(b"PUB %s %d\r\n%sX\r\n" % (subject, size, b"v" * size))
        elif end == "cr":  # a trailer of CR and something else
            parts.append(b"PUB %s %d\r\n%s\rPUB %s %d\r\n" % (subject, size, b"c" * size, subject, size))
        elif end == "lf":  # a control line ended by LF alone
            parts.append(b"PUB %s %d\n%s\r\n" % (subject, size, b"l" * size))
        elif end == "cr_arg":  # a CR inside the arguments (nats-server drops the last byte)
            parts.append(b"PUB %s %d\rZ\r\n%s\r\n" % (subject, size, b"z" * size))
    data = b"".join(parts)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    points = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@settings(max_examples=200, deadline=None)
@given(long_runs())
def test_long_runs_parse_as_single_messages(chunks):
    """The regex that skips to a long run's end gives exactly the per-message parse, errors
    included (a payload that overruns its size is nats-server's parser error there too)."""
    assert parse_until_error(chunks, coalesce=True) == parse_until_error(chunks, coalesce=False)


def test_a_run_then_a_control_line_cut_after_a_cr():
    # The chunk ends inside "PUB foo 9\rZ...": no newline yet. The run's fast path once took
    # the missing newline (-1) for a position and matched the start of the buffer.
    chunks = [b"PUB foo 1\r\nx\r\n" * 3 + b"PUB foo 9\rZ", b"\r\n123456789\r\n"]
    assert parse_until_error(chunks, coalesce=True) == parse_until_error(chunks, coalesce=False)
    assert parse_until_error(chunks, coalesce=True)[1] is not None


def test_a_run_stops_at_a_control_line_over_the_limit():
    data = b"PUB foo 1\r\nx\r\n" * 3 + b"PUB foo 10\r\n0123456789\r\n"  # "foo 10": 6 > 5

    def ops_and_error(coalesce: bool):
        parser = Parser(max_control_line=5)
        parser.coalesce = coalesce
        parser.feed(data)
        ops = expanded(parser.parse())
        try:
            parser.parse()
        except natserver.ProtocolError as exc:
            return ops, repr(exc)
        return ops, None

    assert ops_and_error(True) == ops_and_error(False)
    assert len(ops_and_error(True)[0]) == 3 and ops_and_error(True)[1] is not None


def test_a_long_run_is_one_pubrun():
    data = b"PUB foo.bar 16\r\n0123456789abcdef\r\n" * 1000
    ops = parse_all([data], coalesce=True)
    assert [(type(op), op.count, op.size) for op in ops] == [(PubRun, 1000, 16000)]
    assert ops[0].data == data
    # A long run is a view of the read, not a copy of it (a short one is bytes: cheaper to slice).
    assert isinstance(ops[0].data, memoryview) and ops[0].data.obj is data
    short = parse_all([b"PUB foo 1\r\na\r\n" * 3], coalesce=True)
    assert [(type(op), type(op.data)) for op in short] == [(PubRun, bytes)]


def test_nats_py_publishes_form_runs():
    # nats-py writes "PUB <subject> <reply> <size>" with an empty reply: two spaces.
    data = b"PUB foo  2\r\nhi\r\n" * 40 + b"PUB foo _INBOX.1 2\r\nhi\r\n" + b"PUB foo 2\r\nhi\r\n" * 3
    ops = parse_all([data], coalesce=True)
    assert [(type(op), op.count, op.prefix) for op in ops] == [
        (PubRun, 40, b"PUB foo  "),
        (PubRun, 4, b"PUB foo "),
    ]
    assert bytes(ops[0].data).replace(ops[0].prefix, b"MSG foo 1 ") == b"MSG foo 1 2\r\nhi\r\n" * 40


def test_runs_are_formed_and_broken():
    data = b"PUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB bar 1\r\nc\r\nPUB foo 8\r\nPUB foo \r\nPUB foo 1\r\nd\r\n"
    ops = parse_all([data], coalesce=True)
    assert isinstance(ops[0], PubRun) and ops[0].count == 2 and ops[0].size == 2
    assert isinstance(ops[1], Pub) and ops[1].subject == b"bar"
    # a payload holding the prefix: still a run, which the router will refuse to rewrite
    assert [type(op) for op in ops[2:]] == [PubRun] and bytes(ops[2].data).count(ops[2].prefix) == 3


async def wire_bytes(script: bytes, subscriber_connect: bytes, expect_bytes: int) -> bytes:
    """Run ``script`` from a publisher and return what one subscriber receives."""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
            sub = await trio.open_tcp_stream("127.0.0.1", server.port)
            pub = await trio.open_tcp_stream("127.0.0.1", server.port)
            await sub.send_all(subscriber_connect + b"PING\r\n")
            got = b""
            while b"PONG\r\n" not in got:
                got += await sub.receive_some()
            await pub.send_all(b'CONNECT {"verbose":false,"pedantic":false}\r\n' + script)
            got = b""
            while len(got) < expect_bytes:
                got += await sub.receive_some()
            await server.shutdown()
            return got


async def test_a_run_on_the_wire_equals_per_message_delivery():
    payloads = [b"a", b"PUB foo 9\r\n", b"", b"PUB foo ", b"zz"] * 40
    script = b"".join(b"PUB foo %d\r\n%s\r\n" % (len(p), p) for p in payloads)
    expected = b"".join(b"MSG foo 1 %d\r\n%s\r\n" % (len(p), p) for p in payloads)
    connect = b'CONNECT {"verbose":false}\r\nSUB foo 1\r\n'
    got = await wire_bytes(script, connect, len(expected))
    assert got == expected


async def test_a_run_with_replies_on_the_wire():
    script = b"".join(b"PUB foo _INBOX.%d 2\r\nhi\r\n" % i for i in range(300))
    expected = b"".join(b"MSG foo 5 _INBOX.%d 2\r\nhi\r\n" % i for i in range(300))
    got = await wire_bytes(script, b'CONNECT {"verbose":false}\r\nSUB foo 5\r\n', len(expected))
    assert got == expected


async def test_auto_unsubscribe_inside_a_run_stops_at_max():
    script = b"".join(b"PUB foo 1\r\n%d\r\n" % (i % 10) for i in range(50)) + b"PUB end 1\r\nx\r\n"
    expected = b"".join(b"MSG foo 1 1\r\n%d\r\n" % i for i in range(7)) + b"MSG end 2 1\r\nx\r\n"
    connect = b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nUNSUB 1 7\r\nSUB end 2\r\n'
    got = await wire_bytes(script, connect, len(expected))
    assert got == expected


async def test_echo_off_publisher_gets_no_requests_back_but_no_responders_still_work():
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
            c = await trio.open_tcp_stream("127.0.0.1", server.port)
            await c.send_all(
                b'CONNECT {"verbose":false,"echo":false,"headers":true,"no_responders":true}\r\n'
                b"SUB svc 1\r\nSUB _INBOX.> 2\r\n"
                + b"".join(b"PUB svc _INBOX.%d 1\r\nx\r\n" % i for i in range(5))
                + b"PING\r\n"
            )
            got = b""
            while not got.endswith(b"PONG\r\n"):
                got += await c.receive_some()
            body = got.split(b"\r\n", 1)[1]
            status = b"NATS/1.0 503\r\nNats-Subject: svc\r\n\r\n"
            assert body == b"".join(
                b"HMSG _INBOX.%d 2 %d %d\r\n%s\r\n" % (i, len(status), len(status), status) for i in range(5)
            ) + b"PONG\r\n"
            await server.shutdown()


def parse_msgs(data: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(subject, sid, payload) of every MSG in ``data``, checking the framing strictly."""
    msgs, pos = [], 0
    while pos < len(data):
        nl = data.index(b"\r\n", pos)
        verb, subject, sid, size = data[pos:nl].split(b" ")
        assert verb == b"MSG"
        start = nl + 2
        end = start + int(size)
        assert data[end : end + 2] == b"\r\n"
        msgs.append((subject, sid, data[start:end]))
        pos = end + 2
    return msgs


async def queue_group_delivery(payloads: list[bytes]):
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
            members = []
            for i in range(3):
                m = await trio.open_tcp_stream("127.0.0.1", server.port)
                await m.send_all(b'CONNECT {"verbose":false}\r\nSUB q.x workers %d\r\nPING\r\n' % i)
                got = b""
                while b"PONG\r\n" not in got:
                    got += await m.receive_some()
                members.append(m)
            pub = await trio.open_tcp_stream("127.0.0.1", server.port)
            await pub.send_all(
                b'CONNECT {"verbose":false,"pedantic":false}\r\n'
                + b"".join(b"PUB q.x %d\r\n%s\r\n" % (len(p), p) for p in payloads)
                + b"PING\r\n"
            )
            got = b""
            while b"PONG\r\n" not in got:
                got += await pub.receive_some()
            received = []
            for m in members:
                await m.send_all(b"PING\r\n")
                data = b""
                while not data.endswith(b"PONG\r\n"):
                    data += await m.receive_some()
                received.append(parse_msgs(data[: -len(b"PONG\r\n")]))
            counters = (server.in_msgs, server.out_msgs, server.in_bytes, server.out_bytes)
            await server.shutdown()
            return received, counters


async def test_a_run_to_a_queue_group_is_dealt_round_robin_one_member_each():
    payloads = [b"%05d" % i for i in range(300)]
    received, counters = await queue_group_delivery(payloads)
    # A run is dealt round robin from a random member (sublist.queue_pick): 100 each when the
    # 300 arrive in one read, one more or less a member for each further read they span.
    assert all(97 <= len(r) <= 103 for r in received) and sum(len(r) for r in received) == 300
    assert sorted(p for r in received for _, _, p in r) == payloads  # each exactly once
    for i, r in enumerate(received):
        assert {sid for _, sid, _ in r} == {b"%d" % i}
    assert counters == (300, 300, 1500, 1500)


async def test_a_non_uniform_run_to_a_queue_group_keeps_exact_counters():
    payloads = [b"x" * (i % 7) for i in range(200)]
    received, counters = await queue_group_delivery(payloads)
    assert sum(len(r) for r in received) == 200
    assert sorted(p for r in received for _, _, p in r) == sorted(payloads)
    total = sum(len(p) for p in payloads)
    assert counters == (200, 200, total, total)


async def test_nats_py_style_runs_on_the_wire():
    # "PUB foo  2" (nats-py, no reply) arrives as nats-server's "MSG foo <sid> 2": one space.
    script = b"PUB foo  2\r\nhi\r\n" * 100 + b"PUB foo \t2\r\nho\r\n" * 50
    expected = b"MSG foo 1 2\r\nhi\r\n" * 100 + b"MSG foo 1 2\r\nho\r\n" * 50
    got = await wire_bytes(script, b'CONNECT {"verbose":false}\r\nSUB foo 1\r\n', len(expected))
    assert got == expected
    # and in a queue group of one, the same bytes per message
    got = await wire_bytes(script, b'CONNECT {"verbose":false}\r\nSUB foo q 1\r\n', len(expected))
    assert got == expected


async def test_two_subscriptions_on_one_connection_get_each_message_in_turn():
    # nats-server delivers a message to all of a client's matching subscriptions before the
    # next message: a run must not become one block per subscription.
    script = b"".join(b"PUB foo 3\r\na%02d\r\n" % i for i in range(60))
    expected = b"".join(b"MSG foo 1 3\r\na%02d\r\nMSG foo 2 3\r\na%02d\r\n" % (i, i) for i in range(60))
    connect = b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nSUB foo 2\r\n'
    assert await wire_bytes(script, connect, len(expected)) == expected
    # a plain subscription and a queue group member on one connection: the same
    connect = b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nSUB foo q 2\r\n'
    assert await wire_bytes(script, connect, len(expected)) == expected
    # two members of one queue group on one connection: each message once, in order
    connect = b'CONNECT {"verbose":false}\r\nSUB foo q 1\r\nSUB foo q 2\r\n'
    got = await wire_bytes(script, connect, len(expected) // 2)
    assert [line[-3:] for line in got.split(b"\r\n")[1::2]] == [b"a%02d" % i for i in range(60)]


async def test_a_payload_holding_the_prefix_is_delivered_message_by_message():
    # The router checks the rewrite from its replace's length (or, when the MSG head is as
    # long as the prefix, by counting), and from the split for queue groups.
    for prefix_blanks, payload in [(b" ", b"PUB foo 2"), (b"   ", b"PUB foo   1")]:
        msgs = [b"y" * len(payload), payload, b"x" * len(payload)] * 20  # one size: queue groups too
        script = b"".join(b"PUB foo%s%d\r\n%s\r\n" % (prefix_blanks, len(p), p) for p in msgs)
        expected = b"".join(b"MSG foo 1 %d\r\n%s\r\n" % (len(p), p) for p in msgs)
        for sub in (b"SUB foo 1\r\n", b"SUB foo q 1\r\n"):
            got = await wire_bytes(script, b'CONNECT {"verbose":false}\r\n' + sub, len(expected))
            assert got == expected, (prefix_blanks, sub)
