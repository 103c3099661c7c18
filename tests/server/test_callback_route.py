"""A message to one server callback on a subject whose match has no delivery plan yet (each
JetStream ack: Client._route's shortcut, issue 33) reaches the callback as through the plan's
loops: the same arguments (headers split off, big payloads, replies, a publisher with echo
off), the same counts, the same no-responders answer when the callback does not take a
request; checked against the same publishes once every cached match has its plan."""

from __future__ import annotations

import pytest
import trio

import natserver
from natserver.server import client as client_module
from natserver.server.client import BIG_PAYLOAD, _make_plan

TIMEOUT = 20  # s, the exchange's bound


def _publishes() -> bytes:
    out = []
    for i in range(12):
        subject = b"t.%d.x" % i
        reply = b" _I.%d" % i if i % 3 == 0 else b""
        body = (b"z" * (BIG_PAYLOAD + 5)) if i == 4 else b"body-%d" % i if i % 2 else b""
        if i % 4 == 1:
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i
            out.append(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(body), hdr, body))
        else:
            out.append(b"PUB %s%s %d\r\n%s\r\n" % (subject, reply, len(body), body))
    return b"".join(out) + b"PING\r\n"


async def _run(planned: bool) -> tuple:
    calls: list = []

    def callback(subject, reply, headers, payload):
        calls.append((subject, reply, headers, payload))
        return not subject.endswith(b"3.x") and not subject.endswith(b"6.x")  # (not taken: 503 if a request)

    options = natserver.Options(host="127.0.0.1", port=-1, quiet=True)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            sub = server.subscribe_internal(b"t.>", callback)
            conn = await trio.open_tcp_stream("127.0.0.1", server.port)
            await conn.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
                                b"SUB _I.> 1\r\n" + _publishes())
            buf = b""
            while b"PONG\r\n" not in buf:
                buf += await conn.receive_some(1 << 16)
            if planned:  # the same publishes again, every cached match with its plan now
                cache = server.sublist.cache
                for subject, result in cache.items():
                    if result.psubs and result.plan is None:
                        _make_plan(result, subject)
                assert any(key.startswith(b"t.") for key in cache)
            first = (len(calls), server.out_msgs, server.internal_out_msgs, sub.delivered)
            await conn.send_all(_publishes())
            buf = b""
            while b"PONG\r\n" not in buf:
                buf += await conn.receive_some(1 << 16)
            counts = (server.out_msgs - first[1], server.internal_out_msgs - first[2], sub.delivered - first[3])
            unplanned = sum(1 for key, result in server.sublist.cache.items() if key.startswith(b"t.") and result.plan is None)
            await conn.aclose()
            nursery.cancel_scope.cancel()
    return (calls[first[0]:], counts, buf), unplanned


@pytest.mark.parametrize("compiled", [False, True])
def test_a_callback_on_a_new_subject_gets_what_the_plan_gives_it(compiled, monkeypatch):
    """(compiled: the compiled loop takes the first of a run of such publishes and builds its
    plan, the Python loop the others.)"""
    if not compiled:
        monkeypatch.setattr(client_module, "_route_pubs", None)
    elif client_module._route_pubs is None:
        pytest.skip("the compiled delivery loop is not built")
    shortcut, unplanned = trio.run(_run, False)
    planned, unplanned_after = trio.run(_run, True)
    assert shortcut == planned
    assert unplanned_after == 0 and (unplanned == 12 if not compiled else unplanned > 0)  # (the shortcut was taken)
    calls, counts, wire = shortcut
    assert len(calls) == 12 and counts == (12, 12, 12)
    assert calls[1] == (b"t.1.x", None, b"NATS/1.0\r\nK: 1\r\n\r\n", b"body-1") and len(calls[4][3]) == BIG_PAYLOAD + 5
    assert wire.count(b"503") == 2 and b"t.3.x" in wire and b"t.6.x" in wire  # (the two requests not taken)
