"""The compiled delivery loop (natserver/server/_croute.c) against the pure-Python one.

Both must put the same bytes in every subscriber's outbound list, in the same order, with the
same counters (client, subscription, server, match cache) and the same stalls, whatever the
mix of subjects, replies, headers, queue groups, auto-unsubscribes, echo and stall marks.
"""

from __future__ import annotations

import random

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.app import Server
from natserver.protocol.ops import Sub, Unsub
from natserver.server import client as client_module
from natserver.server.client import BIG_PAYLOAD, Client
from tests.protocol.test_parser import split_at

COMPILED = client_module._route_pubs

pytestmark = pytest.mark.skipif(COMPILED is None, reason="the compiled delivery loop is not built")

SUBJECTS = [b"a", b"a.b", b"a.c", b"b.c.d", b"x.y"]
PATTERNS = [b"a", b"a.*", b"a.>", b">", b"*.c.d", b"x.y", b"a.b"]


@st.composite
def scenarios(draw):
    """Subscriptions (client index, pattern, queue, max) and a byte stream of PUB/HPUB/SUB."""
    subs = draw(
        st.lists(
            st.tuples(
                st.integers(0, 3),
                st.sampled_from(PATTERNS),
                st.sampled_from([None, None, None, b"q", b"q", b"r"]),
                st.sampled_from([0, 0, 0, 1, 3]),
            ),
            max_size=8,
        )
    )
    parts = []
    for _ in range(draw(st.integers(1, 40))):
        subject = draw(st.sampled_from(SUBJECTS))
        kind = draw(st.sampled_from(["pub"] * 6 + ["reply", "hpub", "big", "kib", "sub"]))
        payload = draw(st.binary(max_size=30))
        if kind == "kib":  # the parser's memoryview payloads (ZERO_COPY_MIN and up)
            payload = payload * 40 + b"k" * draw(st.sampled_from([511, 512, 1024, 1500]))
        if kind == "sub":
            parts.append(b"SUB %s 9%d\r\n" % (draw(st.sampled_from(PATTERNS)), len(parts)))
        elif kind == "hpub":
            hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
            parts.append(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject, len(hdr), len(hdr) + len(payload), hdr, payload))
        else:
            if kind == "big":
                payload = b"z" * (BIG_PAYLOAD + draw(st.integers(-1, 1)))
            reply = b" _INBOX.%d" % len(parts) if kind == "reply" else b""
            parts.append(b"PUB %s%s %d\r\n%s\r\n" % (subject, reply, len(payload), payload))
    data = b"".join(parts)
    return {
        "subs": subs,
        "chunks": split_at(data, draw(st.lists(st.integers(0, len(data)), max_size=3))),
        "echo": draw(st.booleans()),
        "publisher_subscribes": draw(st.booleans()),
        "stall_at": draw(st.sampled_from([1 << 40, 200, 60])),
    }


def run(scenario, route_pubs, client_class=Client) -> dict:
    """Feed the scenario to a publisher with the given delivery loop; what everyone got."""
    saved = client_module._route_pubs
    client_module._route_pubs = route_pubs
    # Queue groups pick members from random starts (sublist.queue_seed): the same seed for both
    # loops, so that they must pick the same members.
    random.seed(20261128)
    try:
        return trio.run(_run, scenario, client_class)
    finally:
        client_module._route_pubs = saved


async def _run(scenario, client_class) -> dict:
    server = Server(quiet=True)
    clients = []
    for i in range(4):
        client = client_class(server, None, i + 1, "127.0.0.1", 1000 + i)
        client.verbose = client.pedantic = False
        client.headers = i % 2 == 0  # HMSG for some, the MSG without headers for the others
        client.max_pending = 1 << 40
        client._stall_at = scenario["stall_at"]
        clients.append(client)
    pub = Client(server, None, 99, "127.0.0.1", 999)
    pub.verbose = pub.pedantic = False
    pub.echo = scenario["echo"]
    pub.max_pending = 1 << 40
    pub.parser.auth_pending = False
    pub.headers = pub.parser.headers = True
    all_subs = []
    for n, (index, pattern, queue, max_msgs) in enumerate(scenario["subs"]):
        owner = pub if scenario["publisher_subscribes"] and index == 0 else clients[index]
        sid = b"%d" % n
        owner._process_sub(Sub(pattern, queue, sid))
        if max_msgs:
            owner._process_unsub(Unsub(sid, max_msgs))
        all_subs.append((owner, sid))
    received = {c.cid: [] for c in [*clients, pub]}
    stalls = 0

    def drain():
        for client in [*clients, pub]:
            received[client.cid].extend(bytes(x) for x in client.out)
            client.out = []
            client.pending = 0
        server.touched.clear()

    for chunk in scenario["chunks"]:
        pub.parser.feed(chunk)
        while True:
            pub._process_ops()
            drain()
            if pub.stalled_on is None:
                break
            stalls += 1
            pub.stalled_on = None
    return {
        "received": received,
        "stalls": stalls,
        "counts": [(c.out_msgs, c.out_bytes) for c in [*clients, pub]],
        "delivered": [(owner.subs[sid].delivered if sid in owner.subs else None) for owner, sid in all_subs],
        "server": (server.in_msgs, server.in_bytes, server.out_msgs, server.out_bytes),
        "publisher": (pub.in_msgs, pub.in_bytes),
        "matches": (pub.sublist.matches, pub.sublist.misses),
    }


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_compiled_delivery_equals_python(scenario):
    assert run(scenario, COMPILED) == run(scenario, None)


def run_counting(subs, chunk: bytes = b"PUB a.b 2\r\nhi\r\nPUB a.c 1\r\nx\r\n" * 25, client_class=Client) -> tuple[dict, int]:
    """Alternating subjects a.b and a.c (no runs) to ``subs`` through the compiled loop: what
    everyone got (checked against Python) and how many messages the compiled loop took."""
    taken = []

    def counting(*args):
        result = COMPILED(*args)
        taken.append(result[1])
        return result

    scenario = {
        "subs": subs,
        "chunks": [chunk],
        "echo": True,
        "publisher_subscribes": False,
        "stall_at": 1 << 40,
    }
    got = run(scenario, counting, client_class)
    assert got == run(scenario, None)
    return got, sum(taken)


def test_compiled_loop_takes_the_common_case():
    """It is really used: cached small plain PUBs go through it (and the result is still right)."""
    got, taken = run_counting([(1, b"a.*", None, 0), (2, b">", None, 0)])
    assert taken > 40  # all but the first of each subject (a cache miss, in Python)
    assert got["received"][2] == [b"MSG a.b 0 2\r\nhi\r\n", b"MSG a.c 0 1\r\nx\r\n"] * 25


def test_compiled_loop_takes_queue_groups():
    """Queue groups too: one member each, from a random start, the same members Python picks."""
    got, taken = run_counting([(1, b"a.*", b"q", 0), (2, b"a.>", b"q", 0), (3, b">", b"w", 0), (0, b"a.b", None, 0)])
    assert taken > 40  # all but the first of each subject (Python builds the queue heads)
    # Both members of q get some of a.b's 25 (each pick from a random start), and nobody twice.
    shares = [got["received"][2].count(b"MSG a.b 0 2\r\nhi\r\n"), got["received"][3].count(b"MSG a.b 1 2\r\nhi\r\n")]
    assert sum(shares) == 25 and min(shares) > 0
    assert len(got["received"][4]) == 50  # the only member of "w" gets everything
    assert len(got["received"][1]) == 25  # and the plain subscriber of a.b


def test_compiled_loop_takes_payloads_the_parser_gives_as_memoryviews():
    """1 KiB messages whose subject changes: the parser's zero-copy slices go through it too."""
    chunk = b"".join(b"PUB a.%s %d\r\n%s\r\n" % (s, n, b"p" * n) for s, n in [(b"b", 1024), (b"c", 600)] * 25)
    got, taken = run_counting([(1, b"a.*", None, 0)], chunk)
    assert taken > 40
    assert got["received"][2] == [b"MSG a.b 0 1024\r\n" + b"p" * 1024 + b"\r\n", b"MSG a.c 0 600\r\n" + b"p" * 600 + b"\r\n"] * 25


class PropertyClient(Client):
    """out_msgs a property, pending in a slot of the subclass's own: not Client's slots."""

    __slots__ = ("counted", "pending")

    @property
    def out_msgs(self) -> int:
        return self.counted

    @out_msgs.setter
    def out_msgs(self, value: int) -> None:
        self.counted = value


def test_compiled_loop_reads_slots_in_place_and_everything_else_as_python_does():
    """The compiled loop reads and writes plain __slots__ attributes in place (route_pubs'
    slot_of); a subclass's property goes through Python's attribute access, and a slot a
    subclass declares again is found where the subclass keeps it: the same bytes and counts."""
    subs = [(1, b"a.*", b"q", 0), (2, b"a.>", b"q", 0), (3, b">", None, 0)]
    got, taken = run_counting(subs, client_class=PropertyClient)
    assert taken > 40
    assert got["counts"] == run_counting(subs)[0]["counts"]
