"""The core's shortcuts for JetStream's acked publishes (issue 33) against the general path.

* ``Client.deliver_replies`` (a round of acks, or a direct get's answer with its headers, each
  written straight to its one subscriber when it can) puts the same bytes in every client's
  outbound list, with the same counters, stalls and auto-unsubscribes, as
  ``Server.publish(..., flush=False)`` of each, whatever subscribes to the subjects (clients
  with and without headers);
* a PUB whose one match is a server callback (``Client._process_ops``) reaches it, and gets
  its no-responders status, as through ``Client.publish`` (the general path a publish hook
  takes), whatever the callbacks answer and whoever else subscribes; a callback with a
  ``callback_run`` (a stream's) gets the same messages in the same order in runs.
"""

from __future__ import annotations

import random
import re
from unittest.mock import patch

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.app import Server
from natserver.protocol.ops import Sub, Unsub
from natserver.server.client import BIG_PAYLOAD, DELIVER, Client
from tests.protocol.test_parser import split_at

REPLIES = [b"_INBOX.a.1", b"_INBOX.a.2", b"_R.a", b"x"]
PATTERNS = [b"_INBOX.a.*", b"_INBOX.a.1", b"_INBOX.>", b"_R.a", b">", b"x"]


def _clients(server: Server, n: int, stall_at: int) -> list[Client]:
    clients = []
    for i in range(n):
        client = Client(server, None, i + 1, "127.0.0.1", 1000 + i)
        client.verbose = client.pedantic = False
        client.headers = i % 2 == 0
        client.max_pending = 1 << 40
        client._stall_at = stall_at
        clients.append(client)
    return clients


def _outcome(server: Server, clients: list[Client], received: dict, subs: list) -> dict:
    return {
        "received": received,
        "counts": [(c.out_msgs, c.out_bytes, c.pending) for c in clients],
        "delivered": [(owner.subs[sid].delivered if sid in owner.subs else None) for owner, sid in subs],
        "server": (server.out_msgs, server.out_bytes, server.internal_out_msgs),
        "matches": (server.sublist.matches, server.sublist.misses),
        "stalled": server.internal_client.stalled_on is not None and server.internal_client.stalled_on.cid,
        "touched": sorted(c.cid for c in server.touched),
    }


@st.composite
def reply_scenarios(draw):
    return {
        # (client index, pattern, queue, max): client 3 is the server's own (a callback)
        "subs": draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(PATTERNS),
                                        st.sampled_from([None, None, None, b"q"]), st.sampled_from([0, 0, 1, 2])),
                              max_size=4)),
        # (with headers or not: a direct get's answer has some; -30..0: a big one with them)
        "acks": draw(st.lists(st.tuples(st.sampled_from(REPLIES),
                                        st.one_of(st.binary(max_size=40),
                                                  st.integers(-30, 0).map(lambda d: b"p" * (BIG_PAYLOAD + d))),
                                        st.sampled_from([None, None, b"NATS/1.0\r\nA: b\r\n\r\n"])),
                              min_size=1, max_size=12)),
        "stall_at": draw(st.sampled_from([1 << 40, 120, BIG_PAYLOAD + 60])),
        "hooked": draw(st.sampled_from([False, False, False, True])),
        "rounds": draw(st.integers(1, 3)),  # (the acks in this many calls of deliver_replies)
    }


def _run_replies(scenario, direct: bool) -> dict:
    random.seed(20261129)  # (queue groups pick from random starts: the same for both runs)
    server = Server(quiet=True)
    clients = _clients(server, 3, scenario["stall_at"])
    if scenario["hooked"]:
        server.publish_hook = lambda *args: DELIVER
    internal = server.internal_client
    called: list = []
    subs = []
    for n, (index, pattern, queue, max_msgs) in enumerate(scenario["subs"]):
        if index == 3:
            sub = server.subscribe_internal(pattern, lambda *msg, n=n: called.append((n, *msg)), queue)
            subs.append((internal, sub.sid))
            continue
        sid = b"%d" % n
        clients[index]._process_sub(Sub(pattern, queue, sid))
        if max_msgs:
            clients[index]._process_unsub(Unsub(sid, max_msgs))
        subs.append((clients[index], sid))
    received: dict = {c.cid: [] for c in clients}
    acks = scenario["acks"]
    step = -(-len(acks) // scenario["rounds"])
    for start in range(0, len(acks), step):
        acks_round = acks[start:start + step]
        if direct:
            internal.deliver_replies([(reply, payload, hdr, None) for reply, payload, hdr in acks_round],
                                     lambda reply, payload, hdr: server.publish(reply, payload, flush=False,
                                                                                headers=hdr))
        else:
            for reply, payload, hdr in acks_round:
                server.publish(reply, payload, flush=False, headers=hdr)
        for client in clients:  # (the bytes on the wire: how they are cut into pieces may differ)
            received[client.cid].append(b"".join(bytes(x) for x in client.out))
        received.setdefault("called", []).append(list(called))
    return _outcome(server, clients, received, subs)


@settings(max_examples=400, deadline=None)
@given(reply_scenarios())
def test_deliver_replies_delivers_what_publish_delivers(scenario):
    assert _run_replies(scenario, True) == _run_replies(scenario, False)


def test_deliver_replies_takes_the_common_case():
    """It is used: an inbox with one plain subscriber, a wildcard one as nats.go's."""
    server = Server(quiet=True)
    (client,) = _clients(server, 1, 1 << 40)
    client._process_sub(Sub(b"_INBOX.a.*", None, b"7"))
    published: list = []
    acks = [(b"_INBOX.a.3", b'{"stream":"S","seq":1}', None, None),
            (b"_INBOX.a.4", b'{"stream":"S","seq":2}', None, None)]
    server.internal_client.deliver_replies(acks, lambda *msg: published.append(msg))
    assert client.out == [b'MSG _INBOX.a.3 7 22\r\n{"stream":"S","seq":1}\r\n'  # (one piece)
                          b'MSG _INBOX.a.4 7 22\r\n{"stream":"S","seq":2}\r\n'] and not published
    assert (client.out_msgs, client.out_bytes, client.pending) == (2, 44, len(client.out[0]))
    client._process_sub(Sub(b">", None, b"8"))  # two subscribers: left to publish
    server.internal_client.deliver_replies([(b"_INBOX.a.3", b"x", None, None)], lambda *msg: published.append(msg))
    assert published == [(b"_INBOX.a.3", b"x", None)]


@st.composite
def callback_scenarios(draw):
    """Callback subscriptions (pattern, queue, what the callback answers), plain ones (client,
    pattern, queue) and a publisher's byte stream."""
    callbacks = draw(st.lists(st.tuples(st.sampled_from([b"s.*", b"s.a", b"s.>", b"t"]),
                                        st.sampled_from([None, None, b"q"]),
                                        st.sampled_from([None, False, True, "raise"])), max_size=3))
    plain = draw(st.lists(st.tuples(st.integers(0, 1), st.sampled_from([b"s.a", b"t", b"s.>"]),
                                    st.sampled_from([None, b"q"])), max_size=2))
    parts = []
    for _ in range(draw(st.integers(1, 20))):
        subject = draw(st.sampled_from([b"s.a", b"s.b", b"t", b"u", b"s.*"]))  # (s.*: pedantic refuses it)
        payload = draw(st.binary(max_size=20))
        reply = draw(st.sampled_from([b"", b" _R.1", b" _R.2"]))
        if draw(st.booleans()):
            hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
            parts.append(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(payload), hdr,
                                                          payload))
        else:
            parts.append(b"PUB %s%s %d\r\n%s\r\n" % (subject, reply, len(payload), payload))
    data = b"".join(parts)
    return {"callbacks": callbacks, "plain": plain, "no_responders": draw(st.booleans()), "pedantic": draw(st.booleans()),
            "chunks": split_at(data, draw(st.lists(st.integers(0, len(data)), max_size=3)))}


def _run_callbacks(scenario, hooked: bool) -> dict:
    random.seed(20261129)
    server = Server(quiet=True)
    clients = _clients(server, 2, 1 << 40)
    if len(_queue_members(scenario)) > 1:
        # The member a message goes to differs by path (see the test): with headers or without,
        # its bytes and counts would too. Members alike, the group's deliveries compare.
        for client in clients:
            client.headers = True
    if hooked:  # the general path: every message through Client.publish (_route, _callback_took)
        server.publish_hook = lambda *args: DELIVER
    internal = server.internal_client
    called: list = []

    def callback_for(n: int, answer):
        def callback(subject, reply, hdr, payload):
            called.append((n, subject, reply, hdr, payload, server.callback_publisher.cid))
            if answer == "raise":
                raise ValueError("a failing callback")
            return answer
        return callback

    def run_for(callback):
        def run(pubs, size):  # (as a stream's inbound_run: each as the callback alone, all taken)
            assert size == sum(len(subject) + len(payload) for subject, _, payload in pubs)
            for subject, reply, payload in pubs:
                try:
                    callback(subject, reply, None, payload)
                except ValueError:
                    pass
        return run

    subs = []
    for n, (pattern, queue, answer) in enumerate(scenario["callbacks"]):
        sub = server.subscribe_internal(pattern, callback_for(n, answer), queue)
        if answer is not False and n % 2 == 0:  # (a callback that takes every message may take runs)
            sub.callback_run = run_for(sub.callback)
        subs.append((internal, sub.sid))
    for n, (index, pattern, queue) in enumerate(scenario["plain"]):
        clients[index]._process_sub(Sub(pattern, queue, b"p%d" % n))
        subs.append((clients[index], b"p%d" % n))
    pub = Client(server, None, 99, "127.0.0.1", 999)
    pub.verbose = pub.pedantic = False
    pub.max_pending = 1 << 40
    pub.parser.auth_pending = False
    pub.headers = pub.parser.headers = True
    pub.no_responders = scenario["no_responders"]
    pub.pedantic = scenario["pedantic"]
    pub._process_sub(Sub(b"_R.*", None, b"r"))
    clients.append(pub)
    received: dict = {c.cid: [] for c in clients}
    for chunk in scenario["chunks"]:
        pub.parser.feed(chunk)
        pub._process_ops()
        for client in clients:  # (as bytes: runs of PUBs are delivered as one piece unhooked)
            received[client.cid].append(b"".join(client.out))
            client.out = []
    received["called"] = called
    outcome = _outcome(server, clients, received, subs)
    if hooked:
        del outcome["matches"]  # (the hooked path matches each subject twice)
    outcome["publisher"] = (pub.in_msgs, pub.in_bytes, server.in_msgs, server.in_bytes)
    outcome["n_callbacks"] = len(scenario["callbacks"])
    return outcome


@settings(max_examples=400, deadline=None)
@given(callback_scenarios())
def test_a_publish_to_one_callback_reaches_it_as_publish_does(scenario):
    direct = trio.run(_run_callbacks_async, scenario, False)
    # The callback's own loop (Client._callback_pubs) off: the same, the cache's counts too.
    with patch.object(Client, "_callback_pubs", lambda self, ops, i, *_: (i, 0, 0, 0, False)):
        assert trio.run(_run_callbacks_async, scenario, False) == direct
    del direct["matches"]
    general = trio.run(_run_callbacks_async, scenario, True)
    members = _queue_members(scenario)
    if len(members) > 1:
        # Which member of the queue group takes a message is a random pick: per run of PUBs on
        # the direct path (dealt round robin), per message on the general one. Both are
        # nats-server's rule; what the group as a whole got must be the same.
        direct, general = _as_group(direct, members), _as_group(general, members)
    assert direct == general


def _queue_members(scenario) -> list[int]:
    """The queue group's members, numbered as the outcome's ``delivered`` (callbacks first)."""
    return [n for n, (_, queue, _) in enumerate(scenario["callbacks"]) if queue] + [
        len(scenario["callbacks"]) + n for n, (_, _, queue) in enumerate(scenario["plain"]) if queue]


_MSG_LINE = re.compile(rb"(H?MSG) (\S+) (\S+) (?:(\S+) )?(?:(\d+) )?(\d+)\r\n")


def _as_group(outcome: dict, members: list[int]) -> dict:
    """``outcome`` with queue group q's members made one: every message a member took (a
    plain one's MSG or HMSG, a callback's call) named by the group, in a multiset per chunk,
    and the counts of the group's members summed."""
    received = outcome["received"]
    cids = [cid for cid in received if cid != "called"]
    chunks: list = []
    for i in range(len(received[cids[0]])):
        got = []
        for cid in cids:
            data, pos = received[cid][i], 0
            while pos < len(data):
                m = _MSG_LINE.match(data, pos)
                if m is None:  # (a protocol line: -ERR for a subject pedantic refuses)
                    end = data.index(b"\r\n", pos) + 2
                    got.append((cid, data[pos:end]))
                    pos = end
                    continue
                verb, subject, sid, reply, _, size = m.groups()
                end = m.end() + int(size)
                sid = b"q" if sid.startswith(b"p") and int(sid[1:]) + outcome["n_callbacks"] in members else sid
                got.append((cid if sid != b"q" else "q", verb, subject, sid, reply, data[m.end():end]))
                pos = end + 2
        chunks.append(sorted(got, key=repr))
    called = sorted([("q" if c[0] in members else c[0], *c[1:-1]) for c in received["called"]], key=repr)
    delivered = [d for n, d in enumerate(outcome["delivered"]) if n not in members]
    return {**outcome, "received": chunks, "called": called, "delivered": delivered,
            "group_delivered": sum(outcome["delivered"][n] or 0 for n in members),
            "counts": [sum(c[0] for c in outcome["counts"]), sum(c[1] for c in outcome["counts"])],
            "touched": None}


async def _run_callbacks_async(scenario, hooked: bool) -> dict:
    return _run_callbacks(scenario, hooked)
