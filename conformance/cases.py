"""The conformance cases: named byte scripts.

Conventions
-----------
* Connections are named by short strings; ``c`` is a lone client, ``s`` a subscriber, ``p`` a
  publisher.  A connection opens on first use and the harness waits for the server's INFO.
* ``Flush(conn)`` sends ``PING`` and waits for the ``PONG``; it orders events across
  connections (the subscriber's SUB is registered before the publisher publishes).  The
  PING/PONG is part of the transcript.
* Without CONNECT a connection is verbose and pedantic (nats-server's defaults), so telnet-style
  cases see ``+OK`` after every PUB/SUB/UNSUB.  ``Q`` (quiet) turns both off.
* Nothing is asserted here: the expected bytes are whatever nats-server v2.15.1 answers
  (``python -m conformance record`` writes them to ``expected/``).
"""

from __future__ import annotations

from .harness import Case, Close, Flush, HalfClose, Open, Send, Sleep, WaitFor

# Common CONNECT lines ----------------------------------------------------------------------

Q = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
QH = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
QNOH = b'CONNECT {"verbose":false,"pedantic":false,"headers":false}\r\n'
QNR = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
QP = b'CONNECT {"verbose":false,"pedantic":true}\r\n'
V = b'CONNECT {"verbose":true,"pedantic":false}\r\n'
VH = b'CONNECT {"verbose":true,"pedantic":false,"headers":true}\r\n'

# Small server configs (written to a file passed with -c).
LIMITS = (("max_payload", 64), ("max_control_line", 64))
MAXSUBS = (("max_subscriptions", 3),)

CASES: list[Case] = []


def case(name: str, *steps, doc: str = "", config=(), quiet=None, mask_sids: bool = False) -> None:
    kwargs = {}
    if quiet is not None:
        kwargs["quiet"] = quiet
    CASES.append(Case(name=name, steps=tuple(steps), doc=doc, config=config, mask_sids=mask_sids, **kwargs))


def S(conn: str, data: bytes, splits=(), delay: float = 0.01) -> Send:
    return Send(conn, data, splits, delay)


def hdrs(*lines: str) -> bytes:
    """A header block: NATS/1.0 line, header lines, blank line."""
    return ("NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode()


def hpub(subject: str, header: bytes, payload: bytes, reply: str | None = None) -> bytes:
    args = subject if reply is None else f"{subject} {reply}"
    return f"HPUB {args} {len(header)} {len(header) + len(payload)}\r\n".encode() + header + payload + b"\r\n"


# ------------------------------------------------------------------------------------------
# INFO, PING/PONG
# ------------------------------------------------------------------------------------------

case("info_on_connect", Open("c"), doc="INFO is sent first, before the client says anything")
case("info_two_connections", Open("a"), Open("b"), doc="every connection gets its own INFO")
case("ping_upper", S("c", b"PING\r\n"))
case("ping_lower", S("c", b"ping\r\n"))
case("ping_mixed_case", S("c", b"pInG\r\n"))
case("ping_lf_only", S("c", b"PING\n"), doc="CR is optional before LF")
case("ping_with_argument", S("c", b"PING foo\r\n"), doc="everything after PING up to LF is ignored")
case("ping_spaces_cr_spaces", S("c", b"PING  \r  \n"), doc="parser_test TestParsePing tolerates this")
case("ping_trailing_garbage", S("c", b"PINGx\r\n"))
case("ping_long_garbage", S("c", b"PING " + b"x" * 5000 + b"\r\n"), doc="no control-line limit in the PING state")
case("ping_pipelined", S("c", b"PING\r\nPING\r\nping\r\n"))
case("ping_split_bytes", S("c", b"PING\r\nPING\r\n", splits="bytes"))
case("ping_split_cr_lf", S("c", b"PING\r\n", splits=(5,)))
case("pong_from_client", S("c", b"PONG\r\npong\r\nPING\r\n"), doc="client PONG is accepted silently")
case("ping_before_and_after_connect", S("c", b"PING\r\n" + Q + b"PING\r\n"))

# ------------------------------------------------------------------------------------------
# CONNECT
# ------------------------------------------------------------------------------------------

case("connect_empty_object", S("c", b"CONNECT {}\r\nPING\r\n"), doc="absent keys keep verbose=true: +OK")
case("connect_verbose_false", S("c", b'CONNECT {"verbose":false}\r\nPING\r\n'))
case("connect_verbose_true", S("c", b'CONNECT {"verbose":true}\r\nPING\r\n'))
case("connect_lower_case", S("c", b'connect {"verbose":false}\r\nping\r\n'))
case("connect_mixed_case_tab", S("c", b'CoNnEcT\t{"verbose":false}\r\nPING\r\n'))
case("connect_lf_only", S("c", b'CONNECT {"verbose":false}\nPING\n'))
case(
    "connect_full_options",
    S(
        "c",
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"name":"conf","lang":"python",'
        b'"version":"1.0","protocol":1,"echo":true,"headers":true,"no_responders":true}\r\nPING\r\n',
    ),
)
case("connect_unknown_keys", S("c", b'CONNECT {"verbose":false,"zzz":[1,2,{"a":null}]}\r\nPING\r\n'))
case("connect_protocol_0", S("c", b'CONNECT {"verbose":false,"protocol":0}\r\nPING\r\n'))
case("connect_protocol_1", S("c", b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n'))
case("connect_protocol_2", S("c", b'CONNECT {"verbose":false,"protocol":2}\r\nPING\r\n'))
case("connect_protocol_negative", S("c", b'CONNECT {"verbose":false,"protocol":-1}\r\nPING\r\n'))
case(
    "connect_no_responders_without_headers",
    S("c", b'CONNECT {"verbose":false,"no_responders":true}\r\nPING\r\n'),
)
case(
    "connect_no_responders_headers_false",
    S("c", b'CONNECT {"verbose":false,"headers":false,"no_responders":true}\r\nPING\r\n'),
)
case("connect_bad_json", S("c", b"CONNECT {bad json}\r\nPING\r\n"), doc="silent close")
case("connect_json_array", S("c", b"CONNECT [1,2]\r\nPING\r\n"))
case("connect_json_null", S("c", b"CONNECT null\r\nPING\r\n"))
case("connect_wrong_type", S("c", b'CONNECT {"verbose":"yes"}\r\nPING\r\n'))
case("connect_no_argument", S("c", b"CONNECT \r\nPING\r\n"), doc="parser_test TestShouldFail")
case("connect_no_space", S("c", b"CONNECT\r\nPING\r\n"))
case("connect_twice", S("c", b'CONNECT {"verbose":true}\r\n' + Q + b"PING\r\nSUB foo 1\r\n" + V + b"SUB bar 2\r\n"))
case("connect_split_bytes", S("c", Q + b"PING\r\n", splits="bytes", delay=0.002))
case("connect_split_in_json", S("c", Q + b"PING\r\n", splits=(12, 20, len(Q) - 1)))

# ------------------------------------------------------------------------------------------
# PUB / SUB basics (one connection)
# ------------------------------------------------------------------------------------------

case("telnet_demo", S("c", b"sub foo.* 90\r\n"), Flush("c"), S("c", b"pub foo.bar 5\r\nhello\r\n"), Flush("c"),
     doc="the docs' telnet demo: verbose and pedantic by default")
case("pub_sub_upper", S("c", Q + b"SUB foo 1\r\nPUB foo 5\r\nhello\r\n"), Flush("c"))
case("pub_sub_lower", S("c", Q + b"sub foo 1\r\npub foo 5\r\nhello\r\n"), Flush("c"))
case("pub_sub_mixed_case", S("c", Q + b"sUb foo 1\r\nPuB foo 5\r\nhello\r\n"), Flush("c"))
case("pub_with_reply", S("c", Q + b"SUB foo 1\r\nPUB foo bar.baz 5\r\nhello\r\n"), Flush("c"))
case("pub_zero_payload", S("c", Q + b"SUB foo 1\r\nPUB foo 0\r\n\r\nPUB foo r 0\r\n\r\n"), Flush("c"))
case("pub_payload_with_crlf_inside", S("c", Q + b"SUB foo 1\r\nPUB foo 6\r\na\r\nb\r\n\r\n"), Flush("c"))
case("pub_binary_payload", S("c", Q + b"SUB foo 1\r\nPUB foo 256\r\n" + bytes(range(256)) + b"\r\n"), Flush("c"))
case("pub_payload_looks_like_ops", S("c", Q + b"SUB foo 1\r\nPUB foo 12\r\nPING\r\nPONG\r\n\r\n"), Flush("c"))
case(
    "separators_tabs_and_spaces",
    S("c", Q + b"SUB\tfoo \t 1\r\nPUB \t foo\t\tbar \t5\r\nhello\r\nSUB  baz\t\tq  2 \r\nPUB baz 0 \t\r\n\r\n"),
    Flush("c"),
)
case("leading_and_trailing_blanks_in_args", S("c", Q + b"SUB   foo   1   \r\nPUB   foo   2   \r\nhi\r\n"), Flush("c"))
case("ops_lf_only", S("c", Q + b"SUB foo 1\nPUB foo 2\nhi\r\nPING\n"))
case("pub_payload_end_lf_only", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhi\nPING\r\n"), doc="payload must end in CRLF")
case("no_interest", S("c", Q + b"SUB foo 1\r\nPUB bar 2\r\nhi\r\nPUB foo.bar 2\r\nhi\r\nPUB fo 2\r\nhi\r\n"), Flush("c"))
case("subject_case_sensitive", S("c", Q + b"SUB foo 1\r\nPUB FOO 2\r\nhi\r\nPUB foo 2\r\nhi\r\n"), Flush("c"))
case("sid_alphanumeric", S("c", Q + b"SUB foo abc-DEF_1\r\nPUB foo 2\r\nhi\r\n"), Flush("c"))
case("subject_utf8", S("c", Q + "SUB caf\u00e9.\u2603 1\r\nPUB caf\u00e9.\u2603 2\r\nhi\r\n".encode()), Flush("c"))
case("pub_long_subject", S("c", Q + b"SUB " + b"a" * 1000 + b" 1\r\nPUB " + b"a" * 1000 + b" 1\r\nx\r\n"), Flush("c"))

# Runs of PUBs on one subject (natserver delivers them with one bytes.replace, and skips a long
# run of one size with one regex match): the bytes must still be nats-server's, message by message.
case("pub_run_nats_py_spacing",
     S("c", Q + b"SUB foo 1\r\n" + b"PUB foo  2\r\nhi\r\n" * 40 + b"PUB foo \t2\r\nho\r\n" * 40
       + b"PUB foo 2\r\nhe\r\n" * 3 + b"PUB foo  r 2\r\nhr\r\n" * 3), Flush("c"),
     doc="nats-py sends two spaces when there is no reply")
case("pub_run_long_uniform_then_mixed",
     S("c", Q + b"SUB foo 1\r\nSUB foo 2\r\n" + b"".join(b"PUB foo 3\r\na%02d\r\n" % i for i in range(60))
       + b"PUB foo 4\r\nabcd\r\n"
       + b"PUB foo 3\r\nPUB\r\n" * 40 + b"PUB foo 9\r\nPUB foo 1\r\n" * 5), Flush("c"), mask_sids=True,
     doc="two subscriptions on one connection get each message in turn (in 2.9.10 which one first is "
         "random: sids masked)")
case("pub_run_long_uniform_bad_trailer",
     S("c", Q + b"SUB foo 1\r\n" + b"PUB foo 3\r\nabc\r\n" * 50 + b"PUB foo 3\r\nabcX\r\n" + b"PING\r\n"),
     doc="a payload longer than its size inside a long run: the same -ERR after the same MSGs")
case("pub_run_long_uniform_split",
     S("c", Q + b"SUB foo 1\r\n" + b"PUB foo 5\r\nhello\r\n" * 80, splits=(700, 701, 1500)), Flush("c"))
_RUN_THEN_CR = b"PUB foo 1\r\nx\r\n" * 3 + b"PUB foo 9\rZ"
case("pub_run_then_cr_in_args_split",
     S("c", Q + b"SUB foo 1\r\n"), Flush("c"),
     S("c", _RUN_THEN_CR + b"\r\n123456789\r\nPING\r\n", splits=(len(_RUN_THEN_CR),)),
     doc="a read ends inside a control line with a CR in it, right after a run")
case("pub_run_queue_group_counts",
     S("q", Q + b"SUB foo g 1\r\nSUB foo g 2\r\n"), Flush("q"),
     S("p", Q + b"PUB foo 2\r\nhi\r\n" * 64), Flush("p"), Flush("q"), mask_sids=True,
     doc="a run split over a queue group (both members on one connection, since nats-server "
         "picks members at random): each message once")

case(
    "pub_sub_two_connections",
    S("s", Q + b"SUB foo 1\r\nSUB foo.bar 2\r\n"),
    Flush("s"),
    S("p", Q + b"PUB foo 5\r\nhello\r\nPUB foo.bar reply 3\r\nabc\r\n"),
    Flush("p"),
)
case(
    "fanout_three_subscribers",
    S("a", Q + b"SUB foo 1\r\n"),
    Flush("a"),
    S("b", Q + b"SUB foo 7\r\n"),
    Flush("b"),
    S("c", Q + b"SUB > 9\r\n"),
    Flush("c"),
    S("p", Q + b"PUB foo 2\r\nhi\r\n"),
    Flush("p"),
)
case(
    "message_order_preserved",
    S("s", Q + b"SUB foo 1\r\n"),
    Flush("s"),
    S("p", Q + b"".join(b"PUB foo %d\r\n%s\r\n" % (len(b"m%d" % i), b"m%d" % i) for i in range(50))),
    Flush("p"),
)

# ------------------------------------------------------------------------------------------
# Wildcards and subjects
# ------------------------------------------------------------------------------------------

_pubs = b"".join(
    b"PUB %s 1\r\nx\r\n" % s for s in (b"foo", b"foo.bar", b"foo.bar.baz", b"foo.baz.baz", b"bar.foo", b"foo.bar.qux")
)
case("wildcard_star", S("c", Q + b"SUB foo.* 1\r\n" + _pubs), Flush("c"))
case("wildcard_gt", S("c", Q + b"SUB foo.> 1\r\n" + _pubs), Flush("c"))
case("wildcard_star_middle", S("c", Q + b"SUB foo.*.baz 1\r\n" + _pubs), Flush("c"))
case("wildcard_gt_alone", S("c", Q + b"SUB > 1\r\n" + _pubs), Flush("c"))
case("wildcard_star_star", S("c", Q + b"SUB *.* 1\r\n" + _pubs), Flush("c"))
case("wildcard_literal_in_token", S("c", Q + b"SUB foo* 1\r\nSUB b>r 2\r\nPUB foox 1\r\nx\r\nPUB foo* 1\r\nx\r\nPUB b>r 1\r\nx\r\n"), Flush("c"),
     doc="'*' and '>' are wildcards only as whole tokens")
case(
    "wildcard_publish_non_pedantic",
    S("c", Q + b"SUB foo.* 1\r\nSUB foo.bar 2\r\nPUB foo.* 1\r\nx\r\nPUB foo.> 1\r\nx\r\n"),
    Flush("c"),
    doc="non-pedantic: a wildcard publish subject is matched as if literal",
)
case("sub_invalid_subjects", S("c", Q + b"SUB foo. 1\r\nSUB .foo 2\r\nSUB foo..bar 3\r\nSUB foo.>.bar 4\r\nSUB > 5\r\n"), Flush("c"),
     doc="-ERR 'Invalid Subject' keeps the connection")
case("sub_invalid_subject_verbose", S("c", b"SUB foo..bar 1\r\nSUB foo 2\r\n"), Flush("c"))
case("pub_invalid_subject_non_pedantic", S("c", Q + b"SUB > 1\r\nPUB foo..bar 1\r\nx\r\nPUB .foo 1\r\nx\r\n"), Flush("c"))
case("pub_wildcard_pedantic", S("c", QP + b"SUB > 1\r\nPUB foo.* 1\r\nx\r\nPUB foo.> 1\r\nx\r\nPUB foo 1\r\nx\r\n"), Flush("c"),
     doc="-ERR 'Invalid Publish Subject' keeps the connection and (2.9.10) still delivers")
case("pub_invalid_subject_pedantic", S("c", QP + b"SUB > 1\r\nPUB foo..bar 1\r\nx\r\nPUB foo. 1\r\nx\r\n"), Flush("c"))
case("pub_wildcard_telnet_defaults", S("c", b"PUB foo.* 1\r\nx\r\n"), Flush("c"), doc="pedantic is on before CONNECT")

# ------------------------------------------------------------------------------------------
# Queue groups (the Go server picks members at random: only one member, or sids masked)
# ------------------------------------------------------------------------------------------

case("queue_single_member", S("c", Q + b"SUB foo q 1\r\nPUB foo 2\r\nhi\r\n"), Flush("c"))
case(
    "queue_two_members_one_delivery",
    S("c", Q + b"SUB foo q 1\r\nSUB foo q 2\r\n" + b"PUB foo 2\r\nhi\r\n" * 10),
    Flush("c"),
    mask_sids=True,
    doc="exactly one member per message (sids masked: the pick is random)",
)
case(
    "queue_plus_plain",
    S("s", Q + b"SUB foo 5\r\nSUB foo q 6\r\n"),
    Flush("s"),
    S("p", Q + b"PUB foo 2\r\nhi\r\n"),
    Flush("p"),
    doc="plain subscriber and one queue member each get the message",
)
case(
    "queue_two_groups",
    S("s", Q + b"SUB foo g1 1\r\nSUB foo g2 2\r\n"),
    Flush("s"),
    S("p", Q + b"PUB foo 2\r\nhi\r\n"),
    Flush("p"),
    mask_sids=True,
    doc="one delivery per group",
)
case("queue_wildcard", S("c", Q + b"SUB foo.> q 1\r\nPUB foo.bar 1\r\nx\r\n"), Flush("c"))

# ------------------------------------------------------------------------------------------
# UNSUB / sids
# ------------------------------------------------------------------------------------------

case("unsub_basic", S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\na\r\nUNSUB 1\r\nPUB foo 1\r\nb\r\n"), Flush("c"))
case("unsub_lower_case", S("c", Q + b"sub foo 1\r\nunsub 1\r\npub foo 1\r\nb\r\n"), Flush("c"))
case("unsub_max", S("c", Q + b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\nx\r\n" * 4), Flush("c"))
case(
    "unsub_max_already_reached",
    S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nUNSUB 1 2\r\nPUB foo 1\r\nc\r\n"),
    Flush("c"),
    doc="max <= delivered unsubscribes at once",
)
case("unsub_max_zero", S("c", Q + b"SUB foo 1\r\nUNSUB 1 0\r\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("unsub_unknown_sid", S("c", b"UNSUB 99\r\nUNSUB 99 5\r\n"), Flush("c"), doc="not an error (verbose: +OK)")
case("unsub_twice", S("c", Q + b"SUB foo 1\r\nUNSUB 1\r\nUNSUB 1\r\n"), Flush("c"))
case(
    "unsub_max_across_connections",
    S("s", Q + b"SUB foo.* 1\r\nUNSUB 1 3\r\n"),
    Flush("s"),
    S("p", Q + b"".join(b"PUB foo.%d 1\r\nx\r\n" % i for i in range(6))),
    Flush("p"),
    Flush("s"),
)
case("unsub_then_resub_same_sid", S("c", Q + b"SUB foo 1\r\nUNSUB 1\r\nSUB bar 1\r\nPUB foo 1\r\nx\r\nPUB bar 1\r\ny\r\n"), Flush("c"))
case(
    "sub_reused_sid",
    S("c", Q + b"SUB foo 1\r\nSUB bar 1\r\nPUB bar 1\r\nx\r\nPUB foo 1\r\ny\r\n"),
    Flush("c"),
    doc="a re-used sid keeps the original subscription",
)
case("sub_reused_sid_verbose", S("c", b"SUB foo 1\r\nSUB bar 1\r\n"), Flush("c"))
case(
    "two_sids_same_subject_plus_wildcard",
    S("c", Q + b"SUB foo.bar 1\r\nSUB foo.* 2\r\nSUB foo.> 3\r\nPUB foo.bar 1\r\nx\r\n"),
    Flush("c"),
    mask_sids=True,
    doc="three deliveries to one connection (order between subs is not specified)",
)

# ------------------------------------------------------------------------------------------
# Verbose +OK
# ------------------------------------------------------------------------------------------

case(
    "verbose_ok_every_op",
    S("c", V + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\nPING\r\nPONG\r\n"),
    Flush("c"),
    doc="+OK after CONNECT, SUB, PUB, UNSUB; not after PING/PONG",
)
case(
    "verbose_hpub",
    S("c", VH + b"SUB foo 1\r\n" + hpub("foo", hdrs("A: b"), b"hi")),
    Flush("c"),
)
case("verbose_on_error_op", S("c", V + b"SUB foo. 1\r\nPUB foo.* 1\r\nx\r\n"), Flush("c"))
case("verbose_pedantic_error", S("c", b'CONNECT {"verbose":true,"pedantic":true}\r\nPUB foo.* 1\r\nx\r\n'), Flush("c"))

# ------------------------------------------------------------------------------------------
# Echo
# ------------------------------------------------------------------------------------------

case("echo_default_true", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n"), Flush("c"))
case(
    "echo_false",
    S("c", b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\n'),
    Flush("c"),
    doc="own messages are not delivered",
)
case(
    "echo_false_other_publisher",
    S("s", b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nSUB foo 1\r\n'),
    Flush("s"),
    S("p", Q + b"PUB foo 2\r\nhi\r\n"),
    Flush("p"),
    doc="echo:false does not affect messages from others",
)
case(
    "echo_false_queue",
    S("c", b'CONNECT {"verbose":false,"pedantic":false,"echo":false}\r\nSUB foo q 1\r\nPUB foo 2\r\nhi\r\n'),
    Flush("c"),
)

# ------------------------------------------------------------------------------------------
# Headers: HPUB / HMSG
# ------------------------------------------------------------------------------------------

H1 = hdrs("Foo: bar")
case("hpub_basic", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"hello")), Flush("c"))
case("hpub_with_reply", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"hello", reply="rep.ly")), Flush("c"))
case("hpub_empty_payload", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"")), Flush("c"))
case("hpub_lower_case", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"x").replace(b"HPUB", b"hpub")), Flush("c"))
case("hpub_minimal_header", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", b"NATS/1.0\r\n\r\n", b"x")), Flush("c"))
case("hpub_header_not_validated", S("c", QH + b"SUB foo 1\r\nHPUB foo 5 7\r\nXXXXXhi\r\n"), Flush("c"))
case(
    "hpub_to_non_header_subscriber",
    S("s", QNOH + b"SUB foo 1\r\n"),
    Flush("s"),
    S("p", QH + hpub("foo", H1, b"hello") + hpub("foo", H1, b"", reply="r")),
    Flush("p"),
    doc="headers stripped: MSG with size - hdr",
)
case(
    "hpub_to_telnet_subscriber",
    S("s", b"SUB foo 1\r\n"),
    Flush("s"),
    S("p", QH + hpub("foo", H1, b"hello")),
    Flush("p"),
    doc="no CONNECT at all: headers off",
)
case(
    "hpub_mixed_subscribers",
    S("h", QH + b"SUB foo 1\r\n"),
    Flush("h"),
    S("n", QNOH + b"SUB foo 2\r\n"),
    Flush("n"),
    S("p", QH + hpub("foo", hdrs("A: 1", "B: 2"), b"body", reply="rr")),
    Flush("p"),
)
case("pub_to_header_subscriber", S("s", QH + b"SUB foo 1\r\n"), Flush("s"), S("p", Q + b"PUB foo 2\r\nhi\r\n"), Flush("p"),
     doc="a plain PUB arrives as MSG even for header-capable subscribers")
case("hpub_without_headers_connect", S("c", Q + b"SUB foo 1\r\n" + hpub("foo", H1, b"x") + b"PING\r\n"), doc="silent close")
case("hpub_telnet_no_connect", S("c", hpub("foo", H1, b"x") + b"PING\r\n"))
case("hpub_hdr_greater_than_total", S("c", QH + b"HPUB foo 12 10\r\nNATS/1.0\r\n\r\n\r\nPING\r\n"))
case("hpub_bad_arity", S("c", QH + b"HPUB foo 12\r\nNATS/1.0\r\n\r\n\r\nPING\r\n"))
case("hpub_too_many_args", S("c", QH + b"HPUB foo a b 12 12\r\nNATS/1.0\r\n\r\n\r\nPING\r\n"))
case("hpub_non_numeric", S("c", QH + b"HPUB foo x 12\r\nNATS/1.0\r\n\r\n\r\nPING\r\n"))
case("hpub_split_in_header", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"hello"), splits=(len(QH) + 14, len(QH) + 30, len(QH) + 40)), Flush("c"))
case("hpub_pedantic_wildcard", S("c", b'CONNECT {"verbose":false,"pedantic":true,"headers":true}\r\n' + hpub("foo.*", H1, b"x")), Flush("c"))

# ------------------------------------------------------------------------------------------
# No responders
# ------------------------------------------------------------------------------------------

case("no_responders_basic", S("c", QNR + b"SUB r 1\r\nPUB foo r 0\r\n\r\n"), Flush("c"), doc="503 status HMSG")
case("no_responders_with_payload", S("c", QNR + b"SUB r.* 7\r\nPUB foo.bar r.x 5\r\nhello\r\n"), Flush("c"))
case("no_responders_hpub", S("c", QNR + b"SUB r 1\r\n" + hpub("foo", H1, b"x", reply="r")), Flush("c"))
case("no_responders_no_reply", S("c", QNR + b"SUB r 1\r\nPUB foo 0\r\n\r\n"), Flush("c"))
case("no_responders_no_reply_sub", S("c", QNR + b"PUB foo r 0\r\n\r\n"), Flush("c"), doc="no sub for the reply: nothing")
case("no_responders_not_requested", S("c", QH + b"SUB r 1\r\nPUB foo r 0\r\n\r\n"), Flush("c"))
case(
    "no_responders_with_responder",
    S("s", Q + b"SUB foo 1\r\n"),
    Flush("s"),
    S("p", QNR + b"SUB r 1\r\nPUB foo r 0\r\n\r\n"),
    Flush("p"),
)
case("no_responders_queue_reply_sub", S("c", QNR + b"SUB r q 1\r\nPUB foo r 0\r\n\r\n"), Flush("c"), doc="reply sub in a queue group")
case(
    "no_responders_echo_false",
    S("c", b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"echo":false}\r\n'
           b"SUB r 1\r\nSUB foo 2\r\nPUB foo r 0\r\n\r\n"),
    Flush("c"),
    doc="own subscription suppressed by echo:false: counts as no responder?",
)

# ------------------------------------------------------------------------------------------
# Protocol errors that close (port of parser_test.go TestShouldFail + friends)
# ------------------------------------------------------------------------------------------

_SHOULD_FAIL = [
    "xxx", "Px", "PIx", "PINx", " PING", "POx", "PONx", "+x", "+Ox", "-x", "-Ex", "-ERx", "-ERRx",
    "Cx", "COx", "CONx", "CONNx", "CONNEx", "CONNECx", "CONNECT \r\n",
    "PUx", "PUB foo\r\n", "PUB  \r\n", "PUB foo bar       \r\n", "PUB foo 2\r\nok \r\n", "PUB foo 2\r\nok\r \n",
    "Sx", "SUx", "SUB\r\n", "SUB  \r\n", "SUB foo\r\n", "SUB foo bar baz 22\r\n",
    "Ux", "UNx", "UNSx", "UNSUx", "UNSUBx", "UNSUBUNSUB 1\r\n", "UNSUB_2\r\n", "UNSUB_UNSUB_UNSUB 2\r\n",
    "UNSUB_\t2\r\n", "UNSUB\r\n", "UNSUB \r\n", "UNSUB          \t       \r\n",
    "Ix", "INx", "INFx", "INFO  \r\n",
    "Mx", "MSx", "MSGx", "MSG  \r\n",
]


def _fail_name(proto: str) -> str:
    out = []
    for ch in proto:
        if ch.isalnum():
            out.append(ch)
        else:
            out.append({" ": "_", "\r": "R", "\n": "N", "\t": "T", "+": "plus", "-": "minus"}.get(ch, "x"))
    return "shouldfail_" + "".join(out)


for _proto in _SHOULD_FAIL:
    case(_fail_name(_proto), S("c", _proto.encode()), doc=f"parser_test.go TestShouldFail: {_proto!r}")

case("unknown_verb", S("c", b"FOO bar\r\n"))
case("unknown_verb_after_valid_ops", S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nBAD\r\nPING\r\n"), doc="ops before the bad one are processed")
case("empty_line", S("c", b"\r\nPING\r\n"))
case("lone_lf", S("c", b"\nPING\r\n"))
case("msg_from_client", S("c", b"MSG foo 1 2\r\nhi\r\n"))
case("hmsg_from_client", S("c", b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"))
case("info_from_client", S("c", b'INFO {"server_id":"x"}\r\nPING\r\n'))
case("plus_ok_from_client", S("c", b"+OK\r\nPING\r\n"))
case("minus_err_from_client", S("c", b"-ERR 'foo'\r\nPING\r\n"))
case("route_verb_from_client", S("c", b"RS+ foo\r\nPING\r\n"))
case("leaf_verb_from_client", S("c", b"LS+ foo\r\nPING\r\n"))
case("account_verb_from_client", S("c", b"A+ foo\r\nPING\r\n"))
case("verb_with_nul", S("c", b"PI\x00NG\r\n"))
case("control_line_cr_without_lf", S("c", b"SUB foo 1\rPING\r\n"))

# Silent closes on bad arguments
case("pub_too_many_args", S("c", b"PUB a b c 1\r\nx\r\nPING\r\n"))
case("pub_negative_size", S("c", b"PUB foo -1\r\nPING\r\n"))
case("pub_non_numeric_size", S("c", b"PUB foo abc\r\nPING\r\n"))
case("pub_size_trailing_junk", S("c", b"PUB foo 1x\r\nx\r\nPING\r\n"))
case("pub_size_huge_digits", S("c", b"PUB foo 99999999999999999999\r\nPING\r\n"))
case("pub_payload_too_long", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhix\r\nPING\r\n"))
case("pub_payload_too_short_then_ping", S("c", Q + b"SUB foo 1\r\nPUB foo 5\r\nhi\r\nPING\r\n"), doc="PING is eaten as payload")
case("pub_payload_bad_terminator", S("c", Q + b"PUB foo 2\r\nhiXY\r\nPING\r\n"))
case("sub_too_many_args", S("c", b"SUB a b c d\r\nPING\r\n"))
case("unsub_too_many_args", S("c", b"UNSUB 1 2 3\r\nPING\r\n"))
case("unsub_non_numeric_max", S("c", b"UNSUB 1 x\r\nPING\r\n"))
case("unsub_negative_max", S("c", Q + b"SUB foo 1\r\nUNSUB 1 -1\r\nPUB foo 1\r\nx\r\nPING\r\n"))

# ------------------------------------------------------------------------------------------
# Limits
# ------------------------------------------------------------------------------------------

_MP = 1048576
case(
    "max_payload_exact_default",
    S("c", Q + b"SUB foo 1\r\nPUB foo %d\r\n" % _MP + b"a" * _MP + b"\r\n"),
    Flush("c"),
    quiet=0.3,
)
case("max_payload_over_default", S("c", Q + b"PUB foo %d\r\n" % (_MP + 1)), doc="checked at the control line")
case("max_payload_hpub_over_default", S("c", QH + b"HPUB foo 12 %d\r\n" % (_MP + 1)))
case("limits_info", Open("c"), config=LIMITS, doc="INFO advertises the configured max_payload")
case("limits_payload_exact", S("c", Q + b"SUB foo 1\r\nPUB foo 64\r\n" + b"p" * 64 + b"\r\n"), Flush("c"), config=LIMITS)
case("limits_payload_over", S("c", Q + b"SUB foo 1\r\nPUB foo 65\r\n" + b"p" * 65 + b"\r\n"), Flush("c"), config=LIMITS)
case("limits_payload_over_verbose", S("c", b"PUB foo 65\r\n"), config=LIMITS)
case("limits_hpub_total_exact", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"h" * (64 - len(H1)))), Flush("c"), config=LIMITS)
case("limits_hpub_total_over", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"h" * (65 - len(H1)))), Flush("c"), config=LIMITS)


def _sub_line(arg_len: int) -> bytes:
    """``SUB <subject> 1\\r\\n`` whose argument (after ``SUB ``) is ``arg_len`` bytes."""
    return b"SUB " + b"s" * (arg_len - 2) + b" 1\r\n"


def _pub_line(arg_len: int) -> bytes:
    return b"PUB " + b"s" * (arg_len - 2) + b" 0\r\n\r\n"


case("limits_control_line_sub_exact", S("c", _sub_line(64)), Flush("c"), config=LIMITS)
case("limits_control_line_sub_over", S("c", _sub_line(65)), Flush("c"), config=LIMITS)
case("limits_control_line_pub_exact", S("c", _pub_line(64)), Flush("c"), config=LIMITS)
case("limits_control_line_pub_over", S("c", _pub_line(65)), Flush("c"), config=LIMITS)
case("limits_control_line_connect_over", S("c", b'CONNECT {"verbose":false,"name":"' + b"n" * 60 + b'"}\r\nPING\r\n'), config=LIMITS)
case("limits_control_line_ping_long", S("c", b"PING " + b"x" * 200 + b"\r\n"), config=LIMITS)
case("control_line_4096_exact", S("c", _sub_line(4096)), Flush("c"))
case("control_line_4097", S("c", _sub_line(4097)), Flush("c"))
case("control_line_pub_4097", S("c", _pub_line(4097)), Flush("c"))
case("control_line_no_newline_over", S("c", b"SUB " + b"s" * 6000), doc="limit enforced before the line ends")
case("control_line_split_over", S("c", _sub_line(5000), splits=(1000, 2500, 4000)))

case(
    "max_subscriptions",
    S("c", b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\nPUB d 1\r\nx\r\nPUB a 1\r\ny\r\n"),
    Flush("c"),
    config=MAXSUBS,
    doc="-ERR 'maximum subscriptions exceeded' keeps the connection",
)
case(
    "max_subscriptions_after_unsub",
    S("c", Q + b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nUNSUB 2\r\nSUB d 4\r\nSUB e 5\r\nPUB d 1\r\nx\r\n"),
    Flush("c"),
    config=MAXSUBS,
)
case("max_subscriptions_info", Open("c"), config=MAXSUBS)

# ------------------------------------------------------------------------------------------
# Splits and pipelining
# ------------------------------------------------------------------------------------------

_OPS = Q + b"SUB foo 1\r\nPUB foo bar 5\r\nhello\r\nUNSUB 1\r\nPUB foo 1\r\nx\r\nPING\r\n"
case("split_everything_byte_by_byte", S("c", _OPS, splits="bytes", delay=0.002))
case("split_control_line_byte_by_byte", S("c", Q + b"SUB foo 1\r\n"), S("c", b"PUB foo.bar.baz reply.to 5\r\n", splits="bytes", delay=0.002),
     S("c", b"hello\r\nPING\r\n"), doc="the subscription does not match: only checks parsing")
case("split_payload", S("c", Q + b"SUB foo 1\r\nPUB foo 10\r\n0123456789\r\n", splits=(len(Q) + 21, len(Q) + 25)), Flush("c"))
case("split_payload_before_crlf", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", splits=(len(Q) + 22,)), Flush("c"))
case("split_payload_between_cr_lf", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", splits=(len(Q) + 23,)), Flush("c"))
case("split_control_line_between_cr_lf", S("c", Q + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", splits=(len(Q) + 10, len(Q) + 20)), Flush("c"))
case(
    "split_large_payload",
    S("c", Q + b"SUB foo 1\r\nPUB foo 100000\r\n" + b"z" * 100000 + b"\r\n", splits=(100, 5000, 70000, 100020)),
    Flush("c"),
)
case("split_verb", S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\nx\r\n", splits=(len(Q) + 1, len(Q) + 2, len(Q) + 11)), Flush("c"))
case("pipelined_100_pubs", S("c", Q + b"SUB foo 1\r\n" + b"PUB foo 3\r\nabc\r\n" * 100 + b"PING\r\n"))
case("pipelined_mixed_verbose", S("c", b"SUB foo 1\r\nPUB foo 1\r\na\r\nPING\r\nUNSUB 1\r\nPUB foo 1\r\nb\r\nPING\r\n"))
case(
    "pipelined_subscriber_and_publisher",
    S("s", Q + b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n"),
    Flush("s"),
    S("p", Q + b"PUB a 1\r\n1\r\nPUB b 1\r\n2\r\nPUB c 1\r\n3\r\nPUB d 1\r\n4\r\n" * 5, splits=(7, 33, 60)),
    Flush("p"),
)
case("error_after_split_payload", S("c", Q + b"PUB foo 3\r\nabcX\r\n", splits=(len(Q) + 12,)))

# ------------------------------------------------------------------------------------------
# Connection lifecycle
# ------------------------------------------------------------------------------------------

case(
    "subscriber_closes_then_publish",
    S("s", Q + b"SUB foo 1\r\n"),
    Flush("s"),
    Close("s"),
    Sleep(0.05),
    S("p", Q + b"PUB foo 1\r\nx\r\n"),
    Flush("p"),
)
case(
    "request_reply_between_connections",
    S("r", Q + b"SUB svc 1\r\n"),
    Flush("r"),
    S("q", Q + b"SUB inbox.1 9\r\nPUB svc inbox.1 4\r\nping\r\n"),
    WaitFor("r", b"ping\r\n"),
    S("r", b"PUB inbox.1 4\r\npong\r\n"),
    Flush("r"),
    Flush("q"),
)

# ------------------------------------------------------------------------------------------
# More parser quirks
# ------------------------------------------------------------------------------------------

case("pub_no_args", S("c", b"PUB\r\nPING\r\n"))
case("hpub_no_args", S("c", QH + b"HPUB\r\nPING\r\n"))
case("hpub_space_no_args", S("c", QH + b"HPUB \r\nPING\r\n"))
case("sub_no_space_sid", S("c", b"SUB foo\r\nPING\r\n"))
case("pong_with_argument", S("c", b"PONG foo\r\nPING\r\n"))
case("ping_cr_only_then_lf_later", S("c", b"PING\r"), Sleep(0.05), S("c", b"\n"))
case("ping_no_newline", S("c", b"PING"), doc="no PONG until the line ends")
case("sub_queue_name_wildcard", S("c", Q + b"SUB foo * 1\r\nSUB foo q.> 2\r\nPUB foo 1\r\nx\r\n"), Flush("c"), mask_sids=True)
case("sub_queue_name_invalid_chars", S("c", b"SUB foo q..q 1\r\n"), Flush("c"))
case("connect_verbose_number", S("c", b'CONNECT {"verbose":1}\r\nPING\r\n'))
case("connect_pedantic_then_pub", S("c", b'CONNECT {"verbose":false}\r\nPUB foo.* 1\r\nx\r\n'), Flush("c"),
     doc="absent pedantic stays true")
case("connect_headers_only_no_connect_sub", S("c", QH + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n"), Flush("c"))
case("pub_size_leading_plus", S("c", b"PUB foo +1\r\nx\r\nPING\r\n"))
case("pub_size_leading_zeros", S("c", Q + b"SUB foo 1\r\nPUB foo 002\r\nhi\r\n"), Flush("c"))
case("sub_sid_with_dot", S("c", Q + b"SUB foo a.b\r\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("unsub_max_leading_zeros", S("c", Q + b"SUB foo 1\r\nUNSUB 1 01\r\n" + b"PUB foo 1\r\nx\r\n" * 2), Flush("c"))
case("hpub_payload_bad_terminator", S("c", QH + b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhiXX\r\n"))
case("error_then_more_data", S("c", b"BAD\r\n" + b"PING\r\n" * 200))

# ------------------------------------------------------------------------------------------
# Server PINGs, stale connections, max connections (timing based; kept short)
# ------------------------------------------------------------------------------------------

PINGCFG = (("ping_interval", "100ms"), ("ping_max", 2))
case(
    "first_ping_after_connect",
    S("c", Q),
    WaitFor("c", b"PING\r\n", timeout=3.5),
    S("c", b"PONG\r\n"),
    Flush("c"),
    doc="the first PING comes ~2 s (up to +20%) after CONNECT",
)
case("stale_connection", S("c", Q), WaitFor("c", b"Stale", timeout=3.0), config=PINGCFG,
     doc="server PINGs every 100ms; no PONGs -> -ERR 'Stale Connection'")
case("stale_connection_telnet", Open("c"), WaitFor("c", b"Stale", timeout=3.0), config=PINGCFG,
     doc="no CONNECT: the ping timer still runs")
case(
    "max_connections",
    Sleep(0.1),
    Open("a"),
    Open("b"),
    Sleep(0.05),
    S("a", b"PING\r\n"),
    config=(("max_connections", 1),),
    doc="the extra connection gets INFO, then -ERR and EOF",
)

# ------------------------------------------------------------------------------------------
# Authorization (user/password in the config file)
# ------------------------------------------------------------------------------------------

AUTH = (("authorization", (("user", "u"), ("password", "p"), ("timeout", 0.5))),)
case("auth_info", Open("c"), config=AUTH, doc="INFO has auth_required")
case("auth_ok", S("c", b'CONNECT {"verbose":false,"user":"u","pass":"p"}\r\nPING\r\n'), config=AUTH)
case("auth_ok_verbose", S("c", b'CONNECT {"user":"u","pass":"p"}\r\nPING\r\n'), config=AUTH)
case("auth_bad_password", S("c", b'CONNECT {"verbose":false,"user":"u","pass":"x"}\r\nPING\r\n'), config=AUTH)
case("auth_no_credentials", S("c", b'CONNECT {"verbose":false}\r\nPING\r\n'), config=AUTH)
case("auth_ping_before_connect", S("c", b"PING\r\n"), config=AUTH, doc="first op must be CONNECT")
case("auth_sub_before_connect", S("c", b"SUB foo 1\r\n"), config=AUTH)
case("auth_timeout", Open("c"), WaitFor("c", b"Timeout", timeout=2.0), config=AUTH, doc="auth timeout 0.5 s")

# ------------------------------------------------------------------------------------------
# CONNECT JSON decoding (Go's encoding/json semantics)
# ------------------------------------------------------------------------------------------

case("connect_key_case_insensitive", S("c", b'CONNECT {"VERBOSE":false,"Pedantic":false}\r\nSUB foo 1\r\nPING\r\n'),
     doc="encoding/json matches keys case-insensitively")
case("connect_duplicate_keys_last_wins", S("c", b'CONNECT {"verbose":true,"verbose":false}\r\nSUB foo 1\r\nPING\r\n'))
case("connect_null_value_keeps_default", S("c", b'CONNECT {"verbose":null}\r\nSUB foo 1\r\nPING\r\n'))
case("connect_whitespace_in_json", S("c", b'CONNECT  { "verbose" : false ,\t"pedantic":false }  \r\nPING\r\n'))
case("connect_trailing_garbage", S("c", b'CONNECT {"verbose":false} xyz\r\nPING\r\n'))
case("connect_protocol_float", S("c", b'CONNECT {"verbose":false,"protocol":1.5}\r\nPING\r\n'))
case("connect_protocol_string", S("c", b'CONNECT {"verbose":false,"protocol":"1"}\r\nPING\r\n'))
case("connect_protocol_overflow", S("c", b'CONNECT {"verbose":false,"protocol":99999999999999999999}\r\nPING\r\n'))
case("connect_json_string", S("c", b'CONNECT "hello"\r\nPING\r\n'))
case("connect_json_number", S("c", b"CONNECT 1\r\nPING\r\n"))
case("connect_echo_string", S("c", b'CONNECT {"verbose":false,"echo":"false"}\r\nPING\r\n'))
case("connect_verbose_protocol_error", S("c", b'CONNECT {"verbose":true,"protocol":2}\r\nPING\r\n'))
case("connect_long_over_4096", S("c", b'CONNECT {"verbose":false,"name":"' + b"n" * 5000 + b'"}\r\nPING\r\n'))
case("connect_name_4000", S("c", b'CONNECT {"verbose":false,"name":"' + b"n" * 4000 + b'"}\r\nPING\r\n'))
case(
    "connect_twice_headers_off",
    S("c", QH + QNOH + hpub("foo", H1, b"x") + b"PING\r\n"),
    doc="the second CONNECT turns headers off: HPUB then closes",
)
case(
    "connect_twice_echo_off",
    S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\na\r\n" + b'CONNECT {"echo":false,"verbose":false}\r\nPUB foo 1\r\nb\r\n'),
    Flush("c"),
)

# ------------------------------------------------------------------------------------------
# Sizes and numbers
# ------------------------------------------------------------------------------------------

case("pub_size_9_digits_over_max", S("c", b"PUB foo 999999999\r\n"), doc="max payload violation")
case("pub_size_10_digits", S("c", b"PUB foo 1000000000\r\n"), doc="too many digits: bad size")
case("pub_bad_arity_and_oversize", S("c", b"PUB foo bar baz 2000000\r\n"))
case("pub_reply_wildcard_pedantic", S("c", QP + b"SUB foo 1\r\nPUB foo bar.* 1\r\nx\r\n"), Flush("c"))
case("pub_reply_invalid_pedantic", S("c", QP + b"SUB foo 1\r\nPUB foo bar..baz 1\r\nx\r\n"), Flush("c"))
case("hpub_hdr_zero", S("c", QH + b"SUB foo 1\r\nHPUB foo 0 2\r\nhi\r\n"), Flush("c"))
case("hpub_hdr_equals_total_non_header_sub", S("s", QNOH + b"SUB foo 1\r\n"), Flush("s"),
     S("p", QH + hpub("foo", H1, b"")), Flush("p"))
case("hpub_hdr_10_digits", S("c", QH + b"HPUB foo 1000000000 1000000001\r\n"))
case("unsub_max_huge", S("c", Q + b"SUB foo 1\r\nUNSUB 1 99999999999\r\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("unsub_sid_not_numeric_with_max", S("c", Q + b"SUB foo abc\r\nUNSUB abc 1\r\n" + b"PUB foo 1\r\nx\r\n" * 2), Flush("c"))

# ------------------------------------------------------------------------------------------
# Incomplete input, errors in the middle of a pipeline
# ------------------------------------------------------------------------------------------

case("pub_incomplete_payload", S("c", Q + b"SUB foo 1\r\nPUB foo 5\r\nhi"), doc="waits for the rest: nothing back")
case("pub_incomplete_payload_completed_later", S("c", Q + b"SUB foo 1\r\nPUB foo 5\r\nhi"), Sleep(0.1), S("c", b"!!!\r\n"), Flush("c"))
case("sub_no_newline", S("c", b"SUB foo 1"))
case("ping_then_error_same_send", S("c", b"PING\r\nPUB foo 2\r\nhiX\r\n"))
case("msg_then_max_payload", S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nPUB foo 2000000\r\n"))
case("verbose_then_unknown_op", S("c", b"SUB foo 1\r\nPUB foo 1\r\nx\r\nBOGUS\r\n"))
case("plus_ok_with_garbage", S("c", b"+OK foo\r\nPING\r\n"))
case("plus_okx", S("c", b"+OKx\r\nPING\r\n"))
case("info_from_client_bad_json", S("c", b"INFO {bad}\r\nPING\r\n"))
case("subject_control_chars", S("c", Q + b"SUB a\x01b 1\r\nPUB a\x01b 1\r\nx\r\n"), Flush("c"))
case("subject_non_utf8", S("c", Q + b"SUB a\xffb 1\r\nPUB a\xffb 1\r\nx\r\n"), Flush("c"))
case("long_sid_and_queue", S("c", Q + b"SUB foo " + b"q" * 500 + b" " + b"s" * 500 + b"\r\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("split_hpub_byte_by_byte", S("c", QH + b"SUB foo 1\r\n" + hpub("foo", H1, b"hey", reply="r")), S("c", b"PING\r\n"),
     Flush("c"))
case("split_hpub_bytes", S("c", QH + b"SUB foo 1\r\n"), S("c", hpub("foo", H1, b"hey", reply="r") + b"PING\r\n", splits="bytes", delay=0.002))

# ------------------------------------------------------------------------------------------
# No responders, more
# ------------------------------------------------------------------------------------------

case("no_responders_verbose", S("c", b'CONNECT {"verbose":true,"headers":true,"no_responders":true}\r\nSUB r 1\r\nPUB foo r 0\r\n\r\n'), Flush("c"))
case("no_responders_echo_true_self", S("c", QNR + b"SUB r 1\r\nSUB foo 2\r\nPUB foo r 0\r\n\r\n"), Flush("c"))
case(
    "no_responders_queue_responder",
    S("s", Q + b"SUB foo q 1\r\n"),
    Flush("s"),
    S("p", QNR + b"SUB r 1\r\nPUB foo r 0\r\n\r\n"),
    Flush("p"),
)
case(
    "no_responders_reply_sub_elsewhere",
    S("s", Q + b"SUB r 1\r\n"),
    Flush("s"),
    S("p", QNR + b"PUB foo r 0\r\n\r\n"),
    Flush("p"),
    doc="the publisher holds no sub for the reply: no 503",
)
case("no_responders_long_subject", S("c", QNR + b"SUB _INBOX.> 1\r\nPUB a.b.c.d.e.f _INBOX.abc.def 3\r\nxyz\r\n"), Flush("c"))
case("no_responders_unsubscribed_reply", S("c", QNR + b"SUB r 1\r\nUNSUB 1\r\nPUB foo r 0\r\n\r\n"), Flush("c"))
case("no_responders_auto_unsub_reply", S("c", QNR + b"SUB r 1\r\nUNSUB 1 1\r\nPUB foo r 0\r\n\r\nPUB foo r 0\r\n\r\n"), Flush("c"),
     doc="the 503 bypasses delivery accounting: UNSUB max 1 still gets two 503s")

# ------------------------------------------------------------------------------------------
# Go encoding/json corners in CONNECT
# ------------------------------------------------------------------------------------------

case("connect_invalid_utf8_in_string", S("c", b'CONNECT {"verbose":false,"name":"a\xffb"}\r\nPING\r\n'),
     doc="Go replaces invalid UTF-8 with U+FFFD, no error")
case("connect_lone_surrogate_escape", S("c", b'CONNECT {"verbose":false,"name":"\\ud800"}\r\nPING\r\n'))
case("connect_protocol_exponent", S("c", b'CONNECT {"verbose":false,"protocol":1e0}\r\nPING\r\n'))
case("connect_protocol_one_point_zero", S("c", b'CONNECT {"verbose":false,"protocol":1.0}\r\nPING\r\n'))
case("connect_trailing_comma", S("c", b'CONNECT {"verbose":false,}\r\nPING\r\n'))
case("connect_deep_nesting", S("c", b'CONNECT {"verbose":false,"x":' + b"[" * 2000 + b"]" * 2000 + b"}\r\nPING\r\n"),
     doc="Go allows 10000 levels")
case("connect_key_unicode_fold", S("c", 'CONNECT {"verbo\u017fe":false}\r\nSUB foo 1\r\nPING\r\n'.encode()),
     doc="Go's key folding maps U+017F (long s) to s")
case("connect_key_escaped", S("c", b'CONNECT {"verb\\u006fse":false}\r\nSUB foo 1\r\nPING\r\n'))
case("connect_dup_key_different_case", S("c", b'CONNECT {"verbose":false,"VERBOSE":true}\r\nSUB foo 1\r\nPING\r\n'))
case("connect_cr_inside_json", S("c", b'CONNECT {"verbose":\rfalse}\r\nSUB foo 1\r\nPING\r\n'))
case("connect_name_number", S("c", b'CONNECT {"verbose":false,"name":123}\r\nPING\r\n'))
case("connect_nan", S("c", b'CONNECT {"verbose":NaN}\r\nPING\r\n'))
case("connect_empty_key", S("c", b'CONNECT {"":1,"verbose":false}\r\nPING\r\n'))
case("connect_protocol_dup_invalid", S("c", b'CONNECT {"verbose":false,"protocol":1,"protocol":2}\r\nPING\r\n'))
case("connect_headers_string", S("c", b'CONNECT {"verbose":false,"headers":"true"}\r\nPING\r\n'))
case("connect_json_with_newline_escape", S("c", b'CONNECT {"verbose":false,"name":"a\\r\\nb"}\r\nPING\r\n'))

# ------------------------------------------------------------------------------------------
# CR inside control lines (Go's 'drop' flag stays set until LF)
# ------------------------------------------------------------------------------------------

case("cr_inside_sub_args", S("c", Q + b"SUB foo 12\r3\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("cr_then_space_sub_args", S("c", Q + b"SUB foo\r 1\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("cr_inside_pub_args", S("c", Q + b"SUB foo 1\r\nPUB foo\r 1\r\nx\r\n"), Flush("c"))
case("cr_inside_unsub_args", S("c", Q + b"SUB foo 1\r\nUNSUB 1\r 5\r\nPUB foo 1\r\nx\r\n"), Flush("c"))
case("double_cr", S("c", Q + b"SUB foo 1\r\r\nPUB foo 1\r\nx\r\n"), Flush("c"))

# ------------------------------------------------------------------------------------------
# Subject validity corners
# ------------------------------------------------------------------------------------------

case("sub_subject_formfeed_token", S("c", Q + b"SUB a\x0cb 1\r\nSUB \x0c 2\r\nSUB a.\x0c.b 3\r\n"), Flush("c"))
case("pub_subject_formfeed_pedantic", S("c", QP + b"SUB > 1\r\nPUB a\x0cb 1\r\nx\r\nPUB \x0c 1\r\ny\r\n"), Flush("c"))
case("sub_gt_not_last_and_star_gt", S("c", Q + b"SUB >.foo 1\r\nSUB *.> 2\r\nPUB a.b 1\r\nx\r\n"), Flush("c"))
case("sub_subject_only_dot", S("c", Q + b"SUB . 1\r\nSUB .. 2\r\n"), Flush("c"))

# ------------------------------------------------------------------------------------------
# Numbers in UNSUB / HPUB
# ------------------------------------------------------------------------------------------

case("unsub_max_plus_sign", S("c", Q + b"SUB foo 1\r\nUNSUB 1 +2\r\n" + b"PUB foo 1\r\nx\r\n" * 3), Flush("c"))
case("hpub_sizes_leading_zeros", S("c", QH + b"SUB foo 1\r\nHPUB foo 012 014\r\nNATS/1.0\r\n\r\nhi\r\n"), Flush("c"))
case("hpub_sizes_leading_zeros_non_header_sub", S("s", QNOH + b"SUB foo 1\r\n"), Flush("s"),
     S("p", QH + b"HPUB foo 012 014\r\nNATS/1.0\r\n\r\nhi\r\n"), Flush("p"))
case("pub_size_hex", S("c", b"PUB foo 0x1\r\nx\r\nPING\r\n"))
case("plus_ok_lower", S("c", b"+ok\r\nPING\r\n"))
case("minus_err_lower", S("c", b"-err 'x'\r\nPING\r\n"))

# ------------------------------------------------------------------------------------------
# Volume and half-close
# ------------------------------------------------------------------------------------------

case("ping_flood_1000", S("c", b"PING\r\n" * 1000))
_burst = b"".join(b"PUB b.%d %d\r\n%s\r\n" % (i % 7, i % 300, bytes([97 + i % 26]) * (i % 300)) for i in range(1500))
case("pipelined_large_burst", S("c", Q + b"SUB b.* 1\r\n" + _burst + b"PING\r\n"), quiet=0.3,
     doc="~225 KB of mixed-size PUBs in one send; payloads straddle read boundaries")
case("half_close_after_ops", S("c", Q + b"SUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n"), HalfClose("c"),
     doc="client FIN: replies already due are still written before the server closes")
case("half_close_mid_payload", S("c", Q + b"SUB foo 1\r\nPING\r\nPUB foo 5\r\nhi"), HalfClose("c"))
case("half_close_telnet", Open("c"), HalfClose("c"))

# ------------------------------------------------------------------------------------------
# Control line limit without a newline / token auth
# ------------------------------------------------------------------------------------------

case("control_line_no_newline_4096", S("c", b"SUB " + b"s" * 4096), doc="at the limit: still waiting")
case("control_line_no_newline_4097", S("c", b"SUB " + b"s" * 4097))
case("control_line_4096_then_newline_later", S("c", b"SUB " + b"s" * 4094 + b" 1"), Sleep(0.05), S("c", b"\r\n"), Flush("c"))
case("max_payload_split_control_line", S("c", Q + b"PUB foo 2000000\r\n", splits=(len(Q) + 5, len(Q) + 12)))

TOKEN = (("authorization", (("token", "s3cr3t"),)),)
case("token_ok", S("c", b'CONNECT {"verbose":false,"auth_token":"s3cr3t"}\r\nPING\r\n'), config=TOKEN)
case("token_bad", S("c", b'CONNECT {"verbose":false,"auth_token":"nope"}\r\nPING\r\n'), config=TOKEN)
case("token_user_pass_instead", S("c", b'CONNECT {"verbose":false,"user":"s3cr3t","pass":"s3cr3t"}\r\nPING\r\n'), config=TOKEN)

# ------------------------------------------------------------------------------------------
# Server without header support
# ------------------------------------------------------------------------------------------

NOHDRCFG = (("no_header_support", True),)
case("no_header_support_info", Open("c"), config=NOHDRCFG, doc="INFO headers:false")
case("no_header_support_hpub", S("c", QH + hpub("foo", H1, b"x") + b"PING\r\n"), config=NOHDRCFG,
     doc="client asks for headers, server has none: HPUB closes")
case("no_header_support_no_responders", S("c", QNR + b"PING\r\n"), config=NOHDRCFG)
case("no_header_support_pub", S("c", QH + b"SUB foo 1\r\nPUB foo 1\r\nx\r\n"), Flush("c"), config=NOHDRCFG)

# ------------------------------------------------------------------------------------------
# Permissions (users with publish/subscribe permissions)
# ------------------------------------------------------------------------------------------

PERMS = ((None, """authorization {
  users: [
    {user: "a", password: "a", permissions: {publish: ["foo", "_INBOX.>"], subscribe: ["foo", "bar.*"]}}
    {user: "d", password: "d", permissions: {publish: {deny: ["secret.>"]}, subscribe: {deny: ["secret.>"]}}}
  ]
}"""),)
CA = b'CONNECT {"verbose":false,"pedantic":false,"user":"a","pass":"a"}\r\n'
CD = b'CONNECT {"verbose":false,"pedantic":false,"user":"d","pass":"d"}\r\n'
case("perm_allowed", S("c", CA + b"SUB foo 1\r\nPUB foo 1\r\nx\r\n"), Flush("c"), config=PERMS)
case("perm_publish_denied", S("c", CA + b"SUB foo 1\r\nPUB baz 1\r\nx\r\nPUB foo 1\r\ny\r\n"), Flush("c"), config=PERMS,
     doc="-ERR 'Permissions Violation for Publish to \"baz\"', connection stays")
case("perm_subscribe_denied", S("c", CA + b"SUB baz 1\r\nSUB bar.x 2\r\nPUB foo 1\r\nx\r\n"), Flush("c"), config=PERMS)
case("perm_subscribe_denied_queue", S("c", CA + b"SUB baz q 1\r\n"), Flush("c"), config=PERMS)
case("perm_subscribe_wildcard_wider", S("c", CA + b"SUB bar.> 1\r\nSUB > 2\r\n"), Flush("c"), config=PERMS)
case("perm_deny_lists", S("c", CD + b"SUB secret.x 1\r\nSUB > 2\r\nPUB secret.y 1\r\nx\r\nPUB open 1\r\ny\r\n"), Flush("c"),
     config=PERMS, doc="SUB > is allowed but secret.* messages are not delivered to it")
case("perm_denied_verbose", S("c", b'CONNECT {"verbose":true,"user":"a","pass":"a"}\r\nPUB baz 1\r\nx\r\nSUB baz 1\r\n'), Flush("c"),
     config=PERMS)
case("perm_cross_user_delivery", S("s", CD + b"SUB > 1\r\n"), Flush("s"), S("p", CA + b"PUB foo 1\r\nx\r\n"), Flush("p"),
     config=PERMS)

# ------------------------------------------------------------------------------------------
# Security: nkeys, no_auth_user, allow_responses, queue permissions, accounts
# ------------------------------------------------------------------------------------------

NKEY_PUB = "UCWTGC2XTPR4UB5OC5H4IB63RXMVFDNRSCQBTCDWPQN3ITS4AIDOAMC5"  # a user nkey
NKEY_OTHER = "UA2WQSU7CYKZGSIGWEMR63OYBCHIFPNPNTGRBWZFSB3T5EBSA3CFAZIL"
# A valid 64-byte signature, by NKEY_OTHER's key over "x" (not the nonce).
NKEY_FOREIGN_SIG = "+EgDBuivUClitPGASq5nvgQogpsSdn2QO0JUjTRKrtSld4tNDtGYiFExAqiEZr66nyCb0M5iFp0c2lk+d45WBQ=="
NKEYS = ((None, 'authorization { users: [ {nkey: "%s"}, {user: bob, password: pw} ] }' % NKEY_PUB),)


def _nk(**fields) -> bytes:
    import json

    return b"CONNECT " + json.dumps({"verbose": False, "pedantic": False, **fields}).encode() + b"\r\nPING\r\n"


case("nkey_info_has_nonce", Open("c"), config=NKEYS, doc="nonce (masked) after client_ip")
case("nkey_missing_sig", S("c", _nk(nkey=NKEY_PUB)), config=NKEYS)
case("nkey_foreign_sig", S("c", _nk(nkey=NKEY_PUB, sig=NKEY_FOREIGN_SIG)), config=NKEYS)
case("nkey_sig_wrong_length", S("c", _nk(nkey=NKEY_PUB, sig=NKEY_FOREIGN_SIG[:40])), config=NKEYS)
case("nkey_sig_not_base64", S("c", _nk(nkey=NKEY_PUB, sig="***")), config=NKEYS)
case("nkey_unknown_key", S("c", _nk(nkey=NKEY_OTHER, sig=NKEY_FOREIGN_SIG)), config=NKEYS)
case("nkey_malformed_key", S("c", _nk(nkey="UABC", sig="AAAA")), config=NKEYS)
case("nkey_sig_wrong_type", S("c", _nk(nkey=NKEY_PUB, sig=12)), config=NKEYS, doc="json type error: silent close")
case("nkey_user_password_beside_nkeys", S("c", _nk(user="bob", **{"pass": "pw"})), config=NKEYS)
case("nkey_wrong_password_beside_nkeys", S("c", _nk(user="bob", **{"pass": "no"})), config=NKEYS)

NOAUTH = ((None, """authorization {
  timeout: 0.5
  users: [
    {user: a, password: a, permissions: {publish: ["a.>", "_INBOX.>"], subscribe: ["a.>", "_INBOX.>"]}}
    {user: b, password: b}
  ]
}
no_auth_user: a"""),)
case("no_auth_user_info", Open("c"), config=NOAUTH, doc="no auth_required in INFO")
case("no_auth_user_telnet", S("c", b"PING\r\nSUB a.x 1\r\nSUB b.x 2\r\nPUB a.x 1\r\nx\r\nPUB b 0\r\n\r\nPING\r\n"),
     config=NOAUTH, doc="first op not CONNECT: the client becomes the no_auth_user")
case("no_auth_user_connect_without_credentials", S("c", Q + b"SUB a.x 1\r\nSUB b.x 2\r\nPUB a.x 1\r\nx\r\n"), Flush("c"),
     config=NOAUTH)
case("no_auth_user_connect_as_other_user", S("c", _nk(user="b", **{"pass": "b"}) + b"SUB b.x 2\r\nPUB b.x 1\r\nx\r\n"),
     Flush("c"), config=NOAUTH)
case("no_auth_user_wrong_password", S("c", _nk(user="b", **{"pass": "x"})), config=NOAUTH)
case("no_auth_user_unknown_user", S("c", _nk(user="zz", **{"pass": "x"})), config=NOAUTH)
case("no_auth_user_token_is_a_credential", S("c", _nk(auth_token="t")), config=NOAUTH)
case("no_auth_user_idle_times_out", Open("c"), WaitFor("c", b"Timeout", timeout=2.0), config=NOAUTH)
case("no_auth_user_ops_then_connect", S("c", b"SUB b.x 1\r\n"), Flush("c"),
     S("c", _nk(user="b", **{"pass": "b"}) + b"SUB b.y 2\r\n"), Flush("c"), config=NOAUTH)

RESP = ((None, """authorization { users: [
  {user: req, password: req}
  {user: rsp, password: rsp, permissions: {subscribe: "svc", allow_responses: true}}
  {user: rsp2, password: rsp2, permissions: {subscribe: ["svc", "svc2"], publish: "log", allow_responses: {max: 2}}}
]}"""),)
CREQ = b'CONNECT {"verbose":false,"pedantic":false,"user":"req","pass":"req"}\r\n'
CRSP = b'CONNECT {"verbose":false,"pedantic":false,"user":"rsp","pass":"rsp"}\r\n'
CRSP2 = b'CONNECT {"verbose":false,"pedantic":false,"user":"rsp2","pass":"rsp2"}\r\n'
case("allow_responses_once", S("s", CRSP + b"SUB svc 1\r\n"), Flush("s"),
     S("p", CREQ + b"SUB inbox.1 1\r\nPUB svc inbox.1 3\r\nreq\r\n"), Flush("p"),
     S("s", b"PUB inbox.1 3\r\nrs1\r\nPUB inbox.1 3\r\nrs2\r\nPUB other 1\r\nx\r\n"), Flush("s"), Flush("p"),
     config=RESP, doc="one response to the reply subject, then Permissions Violation")
case("allow_responses_max_two", S("s", CRSP2 + b"SUB svc 1\r\n"), Flush("s"),
     S("p", CREQ + b"SUB inbox.2 1\r\nPUB svc inbox.2 3\r\nreq\r\n"), Flush("p"),
     S("s", b"PUB inbox.2 1\r\na\r\nPUB inbox.2 1\r\nb\r\nPUB inbox.2 1\r\nc\r\nPUB log 1\r\nl\r\n"), Flush("s"),
     Flush("p"), config=RESP)
case("allow_responses_without_request", S("s", CRSP + b"SUB svc 1\r\nPUB inbox.3 1\r\nx\r\n"), Flush("s"), config=RESP)
case("allow_responses_no_reply_subject", S("s", CRSP + b"SUB svc 1\r\n"), Flush("s"),
     S("p", CREQ + b"PUB svc 3\r\nreq\r\n"), Flush("p"), S("s", b"PUB svc 1\r\nx\r\n"), Flush("s"), config=RESP)
case("allow_responses_two_requests", S("s", CRSP + b"SUB svc 1\r\n"), Flush("s"),
     S("p", CREQ + b"SUB in.* 1\r\nPUB svc in.a 1\r\n1\r\nPUB svc in.b 1\r\n2\r\n"), Flush("p"),
     S("s", b"PUB in.b 1\r\nB\r\nPUB in.a 1\r\nA\r\nPUB in.a 1\r\nA\r\n"), Flush("s"), Flush("p"), config=RESP)

QPERMS = ((None, """authorization { users: [
  {user: q, password: q, permissions: {subscribe: {allow: ["foo q1", "bar", "baz.*"], deny: ["bar q2", "baz.x"]}}}
]}"""),)
CQ = b'CONNECT {"verbose":false,"pedantic":false,"user":"q","pass":"q"}\r\n'
case("perm_queue_allow_entries", S("c", CQ + b"SUB foo q1 1\r\nSUB foo q2 2\r\nSUB foo 3\r\nSUB bar 4\r\n"), Flush("c"),
     config=QPERMS)
case("perm_queue_deny_entries", S("c", CQ + b"SUB bar q2 1\r\nSUB bar q3 2\r\nSUB baz.x q 3\r\nSUB baz.y q 4\r\n"),
     Flush("c"), config=QPERMS)
case("perm_queue_wildcard_delivery", S("c", CQ + b"SUB baz.* 1\r\nPUB baz.x 1\r\nx\r\nPUB baz.y 1\r\ny\r\n"),
     Flush("c"), config=QPERMS, doc="baz.x is denied: not delivered to the baz.* subscription")

case("connect_account_field", S("c", b'CONNECT {"verbose":false,"account":"x"}\r\nPING\r\n'),
     doc="client.go processConnect: an account designation is an authorization violation")
case("connect_new_account_field", S("c", b'CONNECT {"verbose":false,"new_account":true}\r\nPING\r\n'))
case("connect_account_empty", S("c", b'CONNECT {"verbose":false,"account":""}\r\nPING\r\n'))

ACCOUNTS = ((None, """accounts {
  A: { users: [{user: a, password: a}]
       exports: [{stream: "news.>"}, {service: "help.>"}, {stream: "private", accounts: [C]}] }
  B: { users: [{user: b, password: b}]
       imports: [{stream: {account: A, subject: "news.>"}, prefix: "from_a"},
                 {service: {account: A, subject: "help.me"}, to: "help"}] }
  C: { users: [{user: c, password: c}]
       imports: [{stream: {account: A, subject: "private"}}, {stream: {account: A, subject: "news.sport"}, to: "sport"}] }
}"""),)
CAA = b'CONNECT {"verbose":false,"pedantic":false,"user":"a","pass":"a"}\r\n'
CAB = b'CONNECT {"verbose":false,"pedantic":false,"user":"b","pass":"b"}\r\n'
CAC = b'CONNECT {"verbose":false,"pedantic":false,"user":"c","pass":"c"}\r\n'
case("accounts_info", Open("c"), config=ACCOUNTS)
case("accounts_isolated", S("s", CAA + b"SUB foo 1\r\nSUB > 2\r\n"), Flush("s"), S("p", CAB + b"PUB foo 1\r\nx\r\n"),
     Flush("p"), S("p2", CAA + b"PUB foo 1\r\ny\r\n"), Flush("p2"), Flush("s"), config=ACCOUNTS,
     doc="b's message does not reach account A; a's does")
case("accounts_stream_import_prefix", S("s", CAB + b"SUB from_a.> 1\r\nSUB news.> 2\r\n"), Flush("s"),
     S("p", CAA + b"PUB news.x 2\r\nhi\r\nPUB other 1\r\nx\r\n"), Flush("p"), Flush("s"), config=ACCOUNTS)
case("accounts_stream_import_private_and_to", S("s", CAC + b"SUB private 1\r\nSUB sport 2\r\nSUB news.> 3\r\n"),
     Flush("s"), S("p", CAA + b"PUB private 1\r\np\r\nPUB news.sport 1\r\ns\r\nPUB news.tv 1\r\nt\r\n"), Flush("p"),
     Flush("s"), config=ACCOUNTS)
case("accounts_import_is_one_way", S("s", CAA + b"SUB from_a.> 1\r\nSUB news.> 2\r\n"), Flush("s"),
     S("p", CAB + b"PUB from_a.news.x 1\r\nx\r\nPUB news.y 1\r\ny\r\n"), Flush("p"), Flush("s"), config=ACCOUNTS)
case("accounts_wrong_password", S("c", _nk(user="a", **{"pass": "b"})), config=ACCOUNTS)
case("accounts_no_credentials", S("c", _nk()), config=ACCOUNTS)
case("accounts_service_import_no_responder", S("c", b'CONNECT {"verbose":false,"pedantic":false,"user":"b","pass":"b",'
     b'"headers":true,"no_responders":true}\r\nSUB inbox 1\r\nPUB help inbox 2\r\nhi\r\n'), Flush("c"), config=ACCOUNTS,
     doc="2.10+: a service import counts only if the exporting account delivers: nobody there, 503")
case("accounts_service_import_headerless_responder", S("s", CAA + b"SUB help.me 1\r\n"), Flush("s"),
     S("p", CAB + b"PUB help 2\r\nhi\r\n"), Flush("p"), Flush("s"), config=ACCOUNTS,
     doc="no reply subject: the request arrives as is (a client without headers gets no Nats-Request-Info)")

# ------------------------------------------------------------------------------------------
# Subjects holding `*` or `>` as literal tokens (issue #19): a publish to `foo.*` reaches the
# wildcard subscriptions that cover it, not `foo.bar`, before and after the match cache holds
# it; permissions check such subjects as nats-server does.
# ------------------------------------------------------------------------------------------

case("literal_wildcard_tokens_match_and_cache",
     S("s", Q + b"SUB foo.* 1\r\nSUB foo.bar 2\r\nSUB foo.> 3\r\nSUB > 4\r\n"), Flush("s"),
     S("p", Q + b"PUB foo.* 1\r\na\r\nPUB foo.> 1\r\nb\r\nPUB foo.bar 1\r\nc\r\n"), Flush("p"), Flush("s"),
     S("s", b"SUB foo.baz 5\r\nUNSUB 1\r\n"), Flush("s"),
     S("p", b"PUB foo.* 1\r\nd\r\nPUB foo.baz 1\r\ne\r\n"), Flush("p"), Flush("s"),
     mask_sids=True, doc="sids masked: nats-server orders one connection's matching subscriptions at random")
_PERMS = ((None, 'authorization { users = [ {user: u, password: p}, {user: v, password: p, permissions: '
                 '{publish: {allow: ["foo.bar", "bar.*"], deny: ["bar.x"]}, subscribe: {allow: ["bar.>"], '
                 'deny: ["bar.x"]}}} ] }'),)
case("literal_wildcard_tokens_permissions",
     S("a", b'CONNECT {"verbose":false,"pedantic":false,"user":"u","pass":"p"}\r\nSUB > 1\r\n'), Flush("a"),
     S("b", b'CONNECT {"verbose":false,"pedantic":false,"user":"v","pass":"p"}\r\nPUB foo.* 1\r\na\r\n'
            b"PUB foo.> 1\r\nb\r\nPUB foo.bar 1\r\nc\r\nPUB bar.* 1\r\nd\r\nPUB bar.x 1\r\ne\r\nSUB foo.* 9\r\n"
            b"SUB bar.* 8\r\nSUB bar.x 7\r\n"), Flush("b"), Flush("a"), config=_PERMS)
