"""What a connection leaves behind once it has gone (issue 34, "memory given back").

A closed connection is kept for /connz?state=closed (max_closed_clients of them) with its
subscriptions packed into one string (client.pack_subs): a client that subscribed 50 000 times
and left retained 786 B a subscription when each was kept as a dict; nats-server keeps 286 B.
"""

from __future__ import annotations

import collections
import gc
import tracemalloc

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.server.client import CLOSED_CHUNK, ClosedRing
from natserver.server.monitor import Monitor

TIMEOUT = 30  # seconds, for the whole test's I/O
RETAINED_PER_SUB_MAX = 300  # bytes: the bound (nats-server 2.15.1 keeps 286)


async def test_closed_connection_keeps_its_subscriptions_compactly(start_server, raw_connect):
    n = 20_000
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false}\r\n')
        await client.send(b"".join(b"SUB orders.eu.%d.created %d\r\n" % (i, i) for i in range(n)))
        assert await client.ping() == b""
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await client.aclose()
            while server.clients:
                await trio.sleep(0.01)
            gc.collect()
            retained = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    record = server.closed_clients[-1]
    assert record["subscriptions"] == n
    # Allocations made since the client left and still alive: its record (and some noise).
    assert retained / n <= RETAINED_PER_SUB_MAX, f"{retained / n:.0f} B retained per subscription"
    # ...and /connz still shows every one of them.
    connz = Monitor(server, "127.0.0.1").connz(state="closed", subs=True, limit=1)
    subjects = connz["connections"][0]["subscriptions_list"]
    assert len(subjects) == n and subjects[0] == "orders.eu.0.created" and subjects[-1] == f"orders.eu.{n - 1}.created"


async def test_closed_connection_subscription_details_survive_packing(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false}\r\nSUB a.* 1\r\nSUB b q 2\r\nUNSUB 2 9\r\nSUB c\t3\r\n')
        await client.send(b"PUB a.x 2\r\nhi\r\nPUB a.y 0\r\n\r\n")
        assert await client.ping() == b"MSG a.x 1 2\r\nhi\r\nMSG a.y 1 0\r\n\r\n"
        cid = max(server.clients)
        await client.aclose()
        while server.clients:
            await trio.sleep(0.01)
    (info,) = Monitor(server, "127.0.0.1").connz(state="closed", subs_detail=True)["connections"]
    assert info["subscriptions_list_detail"] == [
        {"account": "$G", "subject": "a.*", "sid": "1", "msgs": 2, "cid": cid},
        {"account": "$G", "subject": "b", "qgroup": "q", "sid": "2", "msgs": 0, "max": 9, "cid": cid},
        {"account": "$G", "subject": "c", "sid": "3", "msgs": 0, "cid": cid},
    ]


async def test_many_closes_are_followed_by_a_reclaim(autojump_clock, start_server, raw_connect, monkeypatch):
    """After RECLAIM_AFTER_CLOSES closes the server collects garbage and trims the C heap,
    once no close has come for RECLAIM_QUIET (not in the middle of a storm); a few closes do
    nothing. (RSS itself is benchmarks/bench_hostile.py's figure: 10 000 connections.)"""
    from natserver.server import reclaim

    monkeypatch.setattr(reclaim, "RECLAIM_AFTER_CLOSES", 20)
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        for _ in range(19):
            client = await raw_connect(server)
            await client.read_info()
            await client.aclose()
        while server.clients:
            await trio.sleep(0.01)
        await trio.sleep(2 * reclaim.RECLAIM_QUIET)
        assert server.reclaimer.reclaims == 0
        client = await raw_connect(server)
        await client.read_info()
        await client.aclose()
        while server.clients:
            await trio.sleep(0.01)
        await trio.sleep(reclaim.RECLAIM_QUIET / 2)
        assert server.reclaimer.reclaims == 0  # (waits for the quiet)
        await trio.sleep(reclaim.RECLAIM_QUIET)
        assert server.reclaimer.reclaims == 1


async def test_a_partial_payload_left_behind_counts_its_bytes(autojump_clock, start_server, raw_connect, monkeypatch):
    from natserver.server import reclaim

    monkeypatch.setattr(reclaim, "RECLAIM_AFTER_BYTES", 512 * 1024)
    with trio.fail_after(TIMEOUT):
        server = await start_server()
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false}\r\nPUB x 1048576\r\n' + b"x" * 600_000)
        while not server.clients or next(iter(server.clients.values())).parser.buffered < 600_000:
            await trio.sleep(0.01)
        await client.aclose()  # one close, but it leaves 600 000 bytes of payload behind
        while server.clients:
            await trio.sleep(0.01)
        await trio.sleep(1.5 * reclaim.RECLAIM_QUIET)
        assert server.reclaimer.reclaims == 1


@given(maxlen=st.integers(0, 150), records=st.integers(0, 400), probes=st.lists(st.integers(-500, 500), max_size=8))
@settings(max_examples=60, deadline=None)
def test_the_closed_ring_keeps_what_a_deque_would(maxlen, records, probes):
    """ClosedRing (server.closed_clients) against collections.deque(maxlen=...): the same
    records, oldest first, whatever the maximum, across chunk boundaries and evictions."""
    ring, reference = ClosedRing(maxlen), collections.deque(maxlen=maxlen)
    for cid in range(records):
        record = {"cid": cid, "reason": "Client Closed", "subs_packed": "a  1 0 0" * (cid % 3)}
        if cid % 5 == 0:
            record["account"] = "A"  # a second shape of keys
        ring.append(record)
        reference.append(record)
    assert len(ring) == len(reference) and bool(ring) == bool(reference)
    assert [record.unpacked() for record in ring] == list(reference)
    for index in probes:
        if -len(reference) <= index < len(reference):
            assert ring[index].unpacked() == reference[index]
        else:
            with pytest.raises(IndexError):
                ring[index]


def test_closed_records_are_sealed_outside_the_small_object_arenas():
    """A full ring of 10 000 records is one bytes object per CLOSED_CHUNK of them (each over
    CPython's 512-byte small-object limit, so from malloc), plus the records not sealed yet."""
    ring = ClosedRing(10_000)
    for cid in range(12_345):
        ring.append({"cid": cid, "ip": "127.0.0.1", "port": 40_000 + cid, "reason": "Client Closed",
                     "name": f"client-{cid}", "lang": "python3", "version": "2.16.0"})
    assert len(ring) == 10_000 and ring[0]["cid"] == 2_345 and ring[-1]["cid"] == 12_344
    assert len(ring._chunks) <= 10_000 // CLOSED_CHUNK + 1 and len(ring._open) < CLOSED_CHUNK
    assert all(len(chunk) > 512 for _, chunk in ring._chunks)
