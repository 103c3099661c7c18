"""PINGs in a row come out of a coalescing parser as one PingRun (the server answers a flood
with one write of PONGs); other parsers, and other spellings, still get one Ping each."""

from __future__ import annotations

from natserver.protocol.ops import PING, PingRun, Pub
from natserver.protocol.parser import Parser


def parse_all(parser: Parser, *chunks: bytes) -> list:
    ops = []
    for chunk in chunks:
        parser.feed(chunk)
        ops.extend(parser.parse())
    return ops


def pings(ops) -> int:
    return sum(op.count if op.__class__ is PingRun else op is PING for op in ops)


def coalescing() -> Parser:
    parser = Parser()
    parser.coalesce = True
    return parser


def test_a_flood_is_one_op():
    assert parse_all(coalescing(), b"PING\r\n" * 10_922) == [PingRun(10_922)]


def test_runs_end_at_other_ops_and_single_pings_stay_pings():
    ops = parse_all(coalescing(), b"PING\r\nPUB a 1\r\nx\r\n" + b"PING\r\n" * 3 + b"ping\r\nPING\r\n")
    assert ops[0] is PING and ops[1].__class__ is Pub and ops[2] == PingRun(3)
    assert ops[3:] == [PING, PING]  # lower case goes the ordinary way, and one alone is a Ping


def test_every_ping_is_counted_across_chunk_boundaries():
    data = b"PING\r\n" * 5000
    for cut in (1, 5, 6, 7, 4099, 29_999):
        parser = coalescing()
        ops = parse_all(parser, data[:cut], data[cut:], b"PING\r")
        assert pings(ops) == 5000, cut
        assert parse_all(parser, b"\n") == [PING]


def test_a_parser_that_does_not_coalesce_gets_one_ping_each():
    assert parse_all(Parser(), b"PING\r\n" * 100) == [PING] * 100
