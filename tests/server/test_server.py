"""The server on the wire: raw TCP clients against an in-process natserver.

Expected bytes are nats-server v2.9.10's (see conformance/expected for the recordings).
``client.ping()`` sends PING and returns everything that arrived before the PONG: since the
server answers in order, that is everything the server had queued for the client so far.
"""

from __future__ import annotations

import json

import trio

TIMEOUT = 10  # hard limit for each test (seconds)

# CONNECT lines used below (the conformance suite's Q, QH, QNOH, QNR, QP).
Q = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
QH = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
QNOH = b'CONNECT {"verbose":false,"pedantic":false,"headers":false}\r\n'
QNR = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
QP = b'CONNECT {"verbose":false,"pedantic":true}\r\n'

H1 = b"NATS/1.0\r\nFoo: bar\r\n\r\n"


def hpub(subject: bytes, header: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    args = subject if reply is None else subject + b" " + reply
    return b"HPUB %s %d %d\r\n" % (args, len(header), len(header) + len(payload)) + header + payload + b"\r\n"


async def connected(raw_connect, server, connect: bytes = Q):
    """A client that has read INFO and sent ``connect`` (and had it processed)."""
    client = await raw_connect(server)
    await client.read_info()
    await client.send(connect)
    assert await client.ping() == (b"+OK\r\n" if b'"verbose":false' not in connect else b"")
    return client


# -- INFO -------------------------------------------------------------------------------------


async def test_info_is_sent_first(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        line = await client.read_line()
        assert line.startswith(b"INFO {")
        assert line.endswith(b"} \r\n")  # a space before CRLF, as nats-server writes it
        info = json.loads(line[5:-3])
        assert len(info["server_id"]) == 56
        assert info["server_id"].startswith("N")
        assert info["server_id"].isalnum() and info["server_id"].isupper()
        assert info["server_name"] == info["server_id"]
        assert info["version"] == "2.15.1"  # the reference release (natserver.protocol.const)
        assert info["proto"] == 1
        assert info["headers"] is True
        assert info["max_payload"] == 1048576
        assert info["port"] == server.port
        assert isinstance(info["host"], str)
        assert isinstance(info["go"], str)
        assert isinstance(info["client_id"], int) and info["client_id"] > 0
        assert info["client_ip"] == "127.0.0.1"
        assert "auth_required" not in info
        # Nothing else is sent before the client speaks.
        assert await client.nothing_within(0.1) == b""


async def test_info_client_ids_differ(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        ids = set()
        for _ in range(3):
            client = await raw_connect(server)
            ids.add((await client.read_info())["client_id"])
        assert len(ids) == 3


async def test_info_reflects_options(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_payload=4096, server_name="srv-a")
        client = await raw_connect(server)
        info = await client.read_info()
        assert info["max_payload"] == 4096
        assert info["server_name"] == "srv-a"


# -- the telnet demo and connection options ---------------------------------------------------


async def test_telnet_demo(server, raw_connect):
    # docs.nats.io protocol demo: no CONNECT, so verbose and pedantic are on.
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"sub foo.* 90\r\n")
        await client.expect(b"+OK\r\n")
        await client.send(b"pub foo.bar 5\r\n")
        await client.send(b"hello\r\n")
        await client.expect(b"+OK\r\nMSG foo.bar 90 5\r\nhello\r\n")
        assert await client.ping() == b""


async def test_ping_before_connect(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"PING\r\n")
        await client.expect(b"PONG\r\n")


async def test_verbose_on(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":true}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\n')
        assert await client.ping() == b"+OK\r\n+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n+OK\r\n"


async def test_verbose_off(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\nPUB foo 1\r\nx\r\n')
        assert await client.ping() == b"MSG foo 1 2\r\nhi\r\n"


async def test_pedantic_invalid_publish_subject(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QP)
        await client.send(b"SUB > 1\r\nPUB foo.* 1\r\nx\r\nPUB foo..bar 1\r\ny\r\nPUB foo 1\r\nz\r\n")
        # The connection stays; nats-server 2.9.10 still delivers the wildcard publish.
        assert await client.ping() == (
            b"-ERR 'Invalid Publish Subject'\r\nMSG foo.* 1 1\r\nx\r\n"
            b"-ERR 'Invalid Publish Subject'\r\n"
            b"MSG foo 1 1\r\nz\r\n"
        )


async def test_not_pedantic_no_error_for_wildcard_publish(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB > 1\r\nPUB foo.* 1\r\nx\r\n")
        assert await client.ping() == b"MSG foo.* 1 1\r\nx\r\n"


async def test_invalid_subject_keeps_connection(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo. 1\r\nSUB .foo 2\r\nSUB foo..bar 3\r\nSUB foo.>.bar 4\r\nSUB > 5\r\n")
        assert await client.ping() == b"-ERR 'Invalid Subject'\r\n" * 4
        await client.send(b"PUB x 1\r\nx\r\n")
        assert await client.ping() == b"MSG x 5 1\r\nx\r\n"


async def test_echo_false(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        sub = await connected(raw_connect, server, b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\n')
        await sub.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
        assert await sub.ping() == b""
        # Another client's messages are still delivered.
        pub = await connected(raw_connect, server, Q)
        await pub.send(b"PUB foo 2\r\nyo\r\n")
        assert await pub.ping() == b""
        assert await sub.ping() == b"MSG foo 1 2\r\nyo\r\n"


async def test_echo_default_true(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
        assert await client.ping() == b"MSG foo 1 2\r\nhi\r\n"


async def test_size_digits_echoed_as_sent(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nPUB foo 05\r\nhello\r\nPUB foo r 0\r\n\r\n")
        assert await client.ping() == b"MSG foo 1 05\r\nhello\r\nMSG foo 1 r 0\r\n\r\n"


async def test_request_reply_between_connections(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        responder = await connected(raw_connect, server, Q)
        requester = await connected(raw_connect, server, Q)
        await responder.send(b"SUB svc 1\r\n")
        await responder.ping()
        await requester.send(b"SUB _INBOX.x 9\r\nPUB svc _INBOX.x 4\r\nping\r\n")
        await requester.ping()
        assert await responder.ping() == b"MSG svc 1 _INBOX.x 4\r\nping\r\n"
        await responder.send(b"PUB _INBOX.x 4\r\npong\r\n")
        await responder.ping()
        assert await requester.ping() == b"MSG _INBOX.x 9 4\r\npong\r\n"


# -- headers ----------------------------------------------------------------------------------


async def test_hmsg_for_header_subscriber(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QH)
        await client.send(b"SUB foo 1\r\n" + hpub(b"foo", H1, b"hello") + hpub(b"foo", H1, b"", reply=b"rep.ly"))
        assert await client.ping() == (
            b"HMSG foo 1 22 27\r\nNATS/1.0\r\nFoo: bar\r\n\r\nhello\r\n"
            b"HMSG foo 1 rep.ly 22 22\r\nNATS/1.0\r\nFoo: bar\r\n\r\n\r\n"
        )


async def test_headers_stripped_for_subscriber_without_headers(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        sub = await connected(raw_connect, server, QNOH)
        await sub.send(b"SUB foo 1\r\n")
        await sub.ping()
        pub = await connected(raw_connect, server, QH)
        await pub.send(hpub(b"foo", H1, b"hello") + hpub(b"foo", H1, b"", reply=b"r"))
        assert await pub.ping() == b""
        # MSG with the size minus the header size, and only the body.
        assert await sub.ping() == b"MSG foo 1 5\r\nhello\r\nMSG foo 1 r 0\r\n\r\n"


async def test_header_and_plain_subscribers_mixed(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        h = await connected(raw_connect, server, QH)
        await h.send(b"SUB foo 1\r\n")
        await h.ping()
        n = await connected(raw_connect, server, QNOH)
        await n.send(b"SUB foo 2\r\n")
        await n.ping()
        p = await connected(raw_connect, server, QH)
        header = b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n"
        await p.send(hpub(b"foo", header, b"body", reply=b"rr"))
        await p.ping()
        assert await h.ping() == b"HMSG foo 1 rr 24 28\r\n" + header + b"body\r\n"
        assert await n.ping() == b"MSG foo 2 rr 4\r\nbody\r\n"


async def test_plain_pub_to_header_subscriber_is_msg(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QH)
        await client.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
        assert await client.ping() == b"MSG foo 1 2\r\nhi\r\n"


async def test_hpub_without_headers_in_connect_closes_silently(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QNOH)
        await client.send(hpub(b"foo", H1, b"x"))
        await client.expect_eof(b"")


async def test_no_responders(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QNR)
        await client.send(b"SUB r 1\r\nPUB foo r 0\r\n\r\n")
        # nats-server 2.10+: a 503 status naming the subject nobody answered on.
        assert await client.ping() == b"HMSG r 1 35 35\r\nNATS/1.0 503\r\nNats-Subject: foo\r\n\r\n\r\n"


async def test_no_responders_wildcard_reply_sub(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QNR)
        await client.send(b"SUB r.* 7\r\nPUB foo.bar r.x 5\r\nhello\r\n")
        assert await client.ping() == b"HMSG r.x 7 39 39\r\nNATS/1.0 503\r\nNats-Subject: foo.bar\r\n\r\n\r\n"


async def test_no_responders_only_when_asked_for(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, QH)
        await client.send(b"SUB r 1\r\nPUB foo r 0\r\n\r\n")
        assert await client.ping() == b""
        # And not without a reply subject, nor with a responder.
        nr = await connected(raw_connect, server, QNR)
        await nr.send(b"SUB r 1\r\nPUB foo 0\r\n\r\n")
        assert await nr.ping() == b""
        responder = await connected(raw_connect, server, Q)
        await responder.send(b"SUB svc 1\r\n")
        await responder.ping()
        await nr.send(b"PUB svc r 0\r\n\r\n")
        assert await nr.ping() == b""
        assert await responder.ping() == b"MSG svc 1 r 0\r\n\r\n"


async def test_no_responders_requires_headers(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false,"no_responders":true}\r\n')
        await client.expect_eof(b"-ERR 'no responders requires headers support'\r\n")


# -- subscriptions ----------------------------------------------------------------------------


async def test_unsub(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nPUB foo 1\r\na\r\nUNSUB 1\r\nPUB foo 1\r\nb\r\nUNSUB 1\r\nUNSUB 99\r\n")
        assert await client.ping() == b"MSG foo 1 1\r\na\r\n"


async def test_unsub_max_auto_unsubscribes(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\nx\r\n" * 4)
        assert await client.ping() == b"MSG foo 1 1\r\nx\r\n" * 2
        await client.send(b"PUB foo 1\r\nx\r\n")
        assert await client.ping() == b""
        # The sid is free again.
        await client.send(b"SUB foo 1\r\nPUB foo 1\r\ny\r\n")
        assert await client.ping() == b"MSG foo 1 1\r\ny\r\n"


async def test_unsub_max_across_connections(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        sub = await connected(raw_connect, server, Q)
        await sub.send(b"SUB foo 1\r\nUNSUB 1 3\r\n")
        await sub.ping()
        pub = await connected(raw_connect, server, Q)
        await pub.send(b"PUB foo 1\r\nx\r\n" * 5)
        await pub.ping()
        assert await sub.ping() == b"MSG foo 1 1\r\nx\r\n" * 3


async def test_unsub_max_already_reached_unsubscribes_now(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nUNSUB 1 2\r\nPUB foo 1\r\nc\r\n")
        assert await client.ping() == b"MSG foo 1 1\r\na\r\nMSG foo 1 1\r\nb\r\n"


async def test_reused_sid_keeps_first_subscription(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"SUB foo 1\r\nSUB bar 1\r\nPUB bar 1\r\nx\r\nPUB foo 1\r\ny\r\n")
        assert await client.ping() == b"MSG foo 1 1\r\ny\r\n"


async def test_subscriptions_removed_when_client_closes(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        sub = await connected(raw_connect, server, Q)
        await sub.send(b"SUB foo 1\r\nSUB bar q 2\r\n")
        await sub.ping()
        assert server.sublist.count == 2
        await sub.aclose()
        pub = await connected(raw_connect, server, Q)
        while server.sublist.count:
            await trio.sleep(0.01)
        await pub.send(b"PUB foo 1\r\nx\r\nPUB bar 1\r\nx\r\n")
        assert await pub.ping() == b""


async def test_queue_group_each_message_to_exactly_one_member(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        members = []
        for i in range(3):
            member = await connected(raw_connect, server, Q)
            await member.send(b"SUB work.* workers %d\r\n" % i)
            await member.ping()
            members.append(member)
        watcher = await connected(raw_connect, server, Q)
        await watcher.send(b"SUB work.> 7\r\n")
        await watcher.ping()
        pub = await connected(raw_connect, server, Q)
        n = 60
        await pub.send(b"".join(b"PUB work.item %d\r\n%s\r\n" % (len(b"%03d" % i), b"%03d" % i) for i in range(n)))
        await pub.ping()
        got = []
        for i, member in enumerate(members):
            data = await member.ping()
            payloads = data.split(b"\r\n")[1::2]
            assert data == b"".join(b"MSG work.item %d 3\r\n%s\r\n" % (i, p) for p in payloads)
            assert payloads, "every member is reachable"
            got += payloads
        assert sorted(got) == [b"%03d" % i for i in range(n)]  # each message exactly once
        # A plain subscriber on the same subjects gets every message.
        watched = await watcher.ping()
        assert watched == b"".join(b"MSG work.item 7 3\r\n%03d\r\n" % i for i in range(n))


async def test_two_queue_groups_each_get_every_message(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        a = await connected(raw_connect, server, Q)
        b = await connected(raw_connect, server, Q)
        await a.send(b"SUB foo g1 1\r\nSUB foo g2 2\r\n")
        await a.ping()
        await b.send(b"SUB foo g1 1\r\n")
        await b.ping()
        await a.send(b"PUB foo 1\r\nx\r\n" * 10)
        got_a = await a.ping()
        got_b = await b.ping()
        assert got_a.count(b"MSG foo 2 1\r\n") == 10  # only member of g2
        assert got_a.count(b"MSG foo 1 1\r\n") + got_b.count(b"MSG foo 1 1\r\n") == 10


# -- limits -----------------------------------------------------------------------------------


async def test_max_connections(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_connections=1)
        first = await raw_connect(server)
        await first.read_info()
        await first.send(b"PING\r\n")
        await first.expect(b"PONG\r\n")
        second = await raw_connect(server)
        await second.read_info()  # INFO first, then the error, then EOF
        await second.expect_eof(b"-ERR 'maximum connections exceeded'\r\n")
        assert await first.ping() == b""
        # Once the first is gone there is room again.
        await first.aclose()
        while server.clients:
            await trio.sleep(0.01)
        third = await raw_connect(server)
        await third.read_info()
        assert await third.ping() == b""


async def test_max_subscriptions(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_subscriptions=3)
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\nPUB d 1\r\nx\r\nPUB a 1\r\ny\r\n")
        assert await client.ping() == (
            b"+OK\r\n+OK\r\n+OK\r\n-ERR 'maximum subscriptions exceeded'\r\n+OK\r\n+OK\r\nMSG a 1 1\r\ny\r\n"
        )
        # Unsubscribing makes room.
        await client.send(b"UNSUB 2\r\nSUB d 4\r\nPUB d 1\r\nz\r\n")
        assert await client.ping() == b"+OK\r\n+OK\r\n+OK\r\nMSG d 4 1\r\nz\r\n"


async def test_max_payload_violation_closes(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_payload=64)
        ok = await raw_connect(server)
        await ok.read_info()
        await ok.send(Q + b"SUB foo 1\r\nPUB foo 64\r\n" + b"x" * 64 + b"\r\n")
        assert await ok.ping() == b"MSG foo 1 64\r\n" + b"x" * 64 + b"\r\n"
        client = await raw_connect(server)
        await client.read_info()
        # Only the control line: the violation is detected before the payload arrives.
        await client.send(b"PUB foo 65\r\n")
        await client.expect_eof(b"-ERR 'Maximum Payload Violation'\r\n")


async def test_max_payload_counts_hpub_headers(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_payload=64)
        client = await raw_connect(server)
        await client.read_info()
        await client.send(QH + b"HPUB foo 22 65\r\n")
        await client.expect_eof(b"-ERR 'Maximum Payload Violation'\r\n")


async def test_max_control_line(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(max_control_line=64, max_payload=64)
        ok = await raw_connect(server)
        await ok.read_info()
        await ok.send(b"SUB " + b"s" * 62 + b" 1\r\n")
        assert await ok.ping() == b"+OK\r\n"
        over = await raw_connect(server)
        await over.read_info()
        await over.send(b"SUB " + b"s" * 63 + b" 1\r\n")
        await over.expect_eof(b"-ERR 'maximum control line exceeded'\r\n")
        unfinished = await raw_connect(server)
        await unfinished.read_info()
        await unfinished.send(b"SUB " + b"s" * 200)  # no newline: checked at the end of the read
        await unfinished.expect_eof(b"-ERR 'maximum control line exceeded'\r\n")


# -- errors that close the connection ---------------------------------------------------------


async def test_unknown_op_closes_after_err(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"SUB foo 1\r\nFOO bar\r\nPING\r\n")
        await client.expect_eof(b"+OK\r\n-ERR 'Unknown Protocol Operation'\r\n")


async def test_payload_without_crlf_closes(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"PUB foo 2\r\nokXX")
        await client.expect_eof(b"-ERR 'Unknown Protocol Operation'\r\n")


async def test_payload_followed_by_lf_only_closes_at_once(server, raw_connect):
    # nats-server fails on the byte after the payload as soon as it reads it; nothing more is
    # needed from the client (checked against nats-server 2.9.10: "PUB foo 2\r\nok", "\n").
    with trio.fail_after(TIMEOUT):
        client = await connected(raw_connect, server, Q)
        await client.send(b"PUB foo 2\r\nok")
        assert await client.nothing_within(0.05) == b""
        await client.send(b"\n")
        with trio.fail_after(1):
            await client.expect_eof(b"-ERR 'Unknown Protocol Operation'\r\n")


async def test_silent_close_bad_connect_json(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"CONNECT {bad json\r\n")
        await client.expect_eof(b"")


async def test_silent_close_connect_wrong_type(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":1}\r\n')
        await client.expect_eof(b"")


async def test_silent_close_pub_bad_arity(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"PUB foo bar baz 1\r\n")
        await client.expect_eof(b"")
        other = await raw_connect(server)
        await other.read_info()
        await other.send(b"PUB foo\r\n")
        await other.expect_eof(b"")


async def test_silent_close_pub_bad_size(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b"PUB foo -1\r\n")
        await client.expect_eof(b"")


async def test_invalid_protocol_version(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"protocol":2}\r\n')
        await client.expect_eof(b"-ERR 'invalid client protocol'\r\n")


async def test_client_closing_does_not_disturb_others(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        sub = await connected(raw_connect, server, Q)
        await sub.send(b"SUB foo 1\r\n")
        await sub.ping()
        bad = await connected(raw_connect, server, Q)
        await bad.send(b"SUB foo 1\r\nXXX\r\n")
        await bad.expect_eof(b"-ERR 'Unknown Protocol Operation'\r\n")
        pub = await connected(raw_connect, server, Q)
        await pub.send(b"PUB foo 1\r\nx\r\n")
        await pub.ping()
        assert await sub.ping() == b"MSG foo 1 1\r\nx\r\n"


async def test_shutdown_closes_clients(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        client = await connected(raw_connect, server, Q)
        await server.shutdown()
        await client.expect_eof(b"")


async def test_publish_path_counts_matches_and_cache_misses(server, raw_connect):
    # The hot loop counts its cache lookups in bulk (/subsz num_matches, cache_hit_rate):
    # every PUB is one lookup, and each new subject is one miss.
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_line()
        await client.send(b"CONNECT {}\r\nSUB a.* 1\r\n")
        await client.ping()
        sublist = server.sublist
        before = (sublist.matches, sublist.misses)
        # Subjects change every message, then repeat (single PUBs, no runs).
        pubs = [b"a.x", b"a.y", b"b.z", b"a.x", b"a.y", b"b.z", b"a.x"]
        await client.send(b"".join(b"PUB %s 1\r\nm\r\n" % subject for subject in pubs))
        await client.ping()
        assert (sublist.matches - before[0], sublist.misses - before[1]) == (7, 3)
        assert sublist.cache_hits == sublist.matches - sublist.misses
