"""The streaming engine in process, on trio's autojumping MockClock: STAN clients here are
internal subscriptions of the server (no sockets), so every exchange is synchronous and every
timer (ackWait, heartbeats, the duplicate-client check) costs no real time."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import natserver
from natserver.stan import StanOptions, pb
from tests.conftest import make_options


class FakeClient:
    """A STAN client made of internal subscriptions on ``server``."""

    def __init__(self, server, client_id: str, answer_heartbeats: bool = True, cluster: str = "test-cluster"):
        self.server = server
        self.client_id = client_id
        self.cluster = cluster
        self.answer_heartbeats = answer_heartbeats
        self.heartbeats = 0
        self.hb_inbox = f"_INBOX.hb-{client_id}-{id(self)}"
        self.conn_id = b"conn-%d" % id(self)
        self._hb_sub = server.subscribe_internal(self.hb_inbox, self._on_heartbeat)
        self._n = 0
        self.resp = None

    def _on_heartbeat(self, subject, reply, headers, payload):
        self.heartbeats += 1
        if self.answer_heartbeats and reply:
            self.server.publish(reply, b"", flush=False)

    def request(self, subject: str, message: pb.Message) -> bytes | None:
        return self.request_raw(subject, message.encode())

    def request_raw(self, subject: str, payload: bytes) -> bytes | None:
        self._n += 1
        reply = f"_INBOX.reply-{id(self)}-{self._n}"
        got = []
        sub = self.server.subscribe_internal(reply, lambda s, r, h, p: got.append(p))
        try:
            self.server.publish(subject, payload, reply=reply)
        finally:
            self.server.unsubscribe_internal(sub)
        return got[0] if got else None

    def connect(self) -> pb.ConnectResponse:
        req = pb.ConnectRequest(clientID=self.client_id, heartbeatInbox=self.hb_inbox, connID=self.conn_id,
                                protocol=1, pingInterval=5, pingMaxOut=3)
        self.resp = pb.ConnectResponse.decode(self.request(f"_STAN.discover.{self.cluster}", req))
        return self.resp

    def publish(self, channel: str, data: bytes, guid: str = "g") -> pb.PubAck | None:
        raw = self.request(f"_STAN.pub.{self.cluster}.{channel}",
                           pb.PubMsg(clientID=self.client_id, guid=guid, subject=channel, data=data,
                                     connID=self.conn_id))
        return pb.PubAck.decode(raw) if raw is not None else None

    def subscribe(self, channel: str, **fields) -> "FakeSub":
        sub = FakeSub(self, channel)
        fields.setdefault("maxInFlight", 1024)
        fields.setdefault("ackWaitInSecs", 30)
        req = pb.SubscriptionRequest(clientID=self.client_id, subject=channel, inbox=sub.inbox, **fields)
        resp = pb.SubscriptionResponse.decode(self.request(f"_STAN.sub.{self.cluster}", req))
        sub.error = resp.error
        sub.ack_inbox = resp.ackInbox
        return sub

    def close(self) -> pb.CloseResponse:
        return pb.CloseResponse.decode(self.request(f"_STAN.close.{self.cluster}",
                                                    pb.CloseRequest(clientID=self.client_id)))


class FakeSub:
    def __init__(self, client: FakeClient, channel: str):
        self.client = client
        self.channel = channel
        self.inbox = f"_INBOX.sub-{id(self)}"
        self.msgs: list[pb.MsgProto] = []
        self.error = ""
        self.ack_inbox = ""
        self._sub = client.server.subscribe_internal(self.inbox, self._on_msg)

    def _on_msg(self, subject, reply, headers, payload):
        self.msgs.append(pb.MsgProto.decode(payload))

    def ack(self, seq: int) -> None:
        self.client.server.publish(self.ack_inbox, pb.Ack(subject=self.channel, sequence=seq).encode())

    def seqs(self) -> list[tuple[int, bool]]:
        return [(m.sequence, m.redelivered) for m in self.msgs]

    def unsubscribe(self, close: bool = False) -> pb.SubscriptionResponse:
        subject = f"_STAN.{'subclose' if close else 'unsub'}.{self.client.cluster}"
        req = pb.UnsubscribeRequest(clientID=self.client.client_id, subject=self.channel, inbox=self.ack_inbox)
        return pb.SubscriptionResponse.decode(self.client.request(subject, req))


@pytest.fixture
async def stan(nursery):
    async def start(**changes):
        server = await nursery.start(natserver.serve, make_options(stan=StanOptions(**changes)))
        return server

    return start


async def test_redelivery_after_ack_wait(autojump_clock, stan):
    server = await stan()
    c = FakeClient(server, "a")
    assert c.connect().error == ""
    sub = c.subscribe("work", ackWaitInSecs=30)
    assert c.publish("work", b"job").error == ""
    assert sub.seqs() == [(1, False)]
    await trio.sleep(29.9)
    assert sub.seqs() == [(1, False)]
    await trio.sleep(0.2)
    assert sub.seqs() == [(1, False), (1, True)]
    await trio.sleep(30)
    assert sub.seqs() == [(1, False), (1, True), (1, True)]
    sub.ack(1)
    await trio.sleep(120)
    assert len(sub.msgs) == 3


async def test_max_in_flight_and_redelivery_keep_order(autojump_clock, stan):
    server = await stan()
    c = FakeClient(server, "a")
    c.connect()
    for i in range(5):
        c.publish("ch", b"%d" % i)
    sub = c.subscribe("ch", maxInFlight=2, ackWaitInSecs=10, startPosition=pb.FIRST)
    assert sub.seqs() == [(1, False), (2, False)]
    await trio.sleep(10.5)
    assert sub.seqs()[2:] == [(1, True), (2, True)]  # redelivery ignores maxInFlight, in order
    sub.ack(2)
    assert sub.seqs()[4:] == [(3, False)]
    sub.ack(1)
    sub.ack(3)
    assert sub.seqs()[5:] == [(4, False), (5, False)]


async def test_heartbeats_close_a_silent_client(autojump_clock, stan):
    server = await stan(hb_interval=30, hb_timeout=10, hb_fail_count=10)
    alive = FakeClient(server, "alive")
    silent = FakeClient(server, "silent", answer_heartbeats=False)
    alive.connect()
    silent.connect()
    engine = server.stan
    await trio.sleep(30 + 10 * 40)  # ten failures: not yet
    assert "silent" in engine.clients
    await trio.sleep(45)  # the eleventh
    assert "silent" not in engine.clients
    assert "alive" in engine.clients
    assert alive.heartbeats >= 11


async def test_duplicate_client_check(autojump_clock, stan):
    server = await stan()
    first = FakeClient(server, "twin")
    first.connect()
    first_sub = first.subscribe("ch")
    second = FakeClient(server, "twin")
    # the first answers its heartbeat inbox: a duplicate
    got = []
    sub = server.subscribe_internal("_INBOX.dup", lambda s, r, h, p: got.append(pb.ConnectResponse.decode(p)))
    req = pb.ConnectRequest(clientID="twin", heartbeatInbox=second.hb_inbox, protocol=1)
    server.publish("_STAN.discover.test-cluster", req.encode(), reply="_INBOX.dup")
    await trio.sleep(1)
    assert [r.error for r in got] == ["stan: clientID already registered"]
    # silent now: replaced after 500 ms, its plain subscription gone
    first.answer_heartbeats = False
    server.publish("_STAN.discover.test-cluster", req.encode(), reply="_INBOX.dup")
    await trio.sleep(0.4)
    assert len(got) == 1
    await trio.sleep(0.2)
    assert got[1].error == "" and got[1].pubPrefix == "_STAN.pub.test-cluster"
    assert server.stan.clients["twin"].hb_inbox == second.hb_inbox
    assert server.stan.channels["ch"].plain == []
    del first_sub
    server.unsubscribe_internal(sub)


async def test_queue_members_share_by_load(autojump_clock, stan):
    server = await stan()
    c = FakeClient(server, "q")
    c.connect()
    a = c.subscribe("jobs", qGroup="g", maxInFlight=2)
    b = c.subscribe("jobs", qGroup="g", maxInFlight=2)
    for i in range(6):
        c.publish("jobs", b"x")
    assert len(a.msgs) == 2 and len(b.msgs) == 2  # two each, then both full
    a.ack(a.msgs[0].sequence)
    assert len(a.msgs) == 3 and len(b.msgs) == 2
    assert sorted(m.sequence for m in a.msgs + b.msgs) == [1, 2, 3, 4, 5]


async def test_ping_close_and_unsubscribe_errors(autojump_clock, stan):
    server = await stan()
    c = FakeClient(server, "p")
    c.connect()
    assert c.request_raw("_STAN.discover.test-cluster.pings", pb.Ping(connID=c.conn_id).encode()) == b""
    sub = c.subscribe("ch")
    bad = FakeSub(c, "nochannel")
    bad.ack_inbox = "x"
    assert bad.unsubscribe().error == "stan: unknown channel"
    bad.channel = "ch"
    assert bad.unsubscribe().error == "stan: invalid subscription"
    assert sub.unsubscribe().error == ""
    assert c.close().error == ""
    assert c.close().error == "stan: unknown clientID"
    reply = c.request_raw("_STAN.close.test-cluster", b"\xff")
    assert pb.CloseResponse.decode(reply).error == "stan: invalid close request"


async def test_limits(autojump_clock, stan):
    server = await stan(max_channels=2, limits=__import__("natserver.stan").stan.ChannelLimits(max_msgs=3, max_subs=1))
    c = FakeClient(server, "l")
    c.connect()
    for i in range(5):
        c.publish("a", b"%d" % i)
    sub = c.subscribe("a", startPosition=pb.FIRST)
    assert [m.data for m in sub.msgs] == [b"2", b"3", b"4"]  # older messages dropped by the limit
    assert c.subscribe("a").error == "too many subscriptions per channel"
    c.publish("b", b"")
    assert c.publish("c", b"").error == "too many channels"


_SUBJECTS = ["_STAN.discover.test-cluster", "_STAN.discover.test-cluster.pings", "_STAN.pub.test-cluster.x",
             "_STAN.sub.test-cluster", "_STAN.unsub.test-cluster", "_STAN.subclose.test-cluster",
             "_STAN.close.test-cluster"]


async def test_malformed_input_on_every_subject_never_hurts(autojump_clock, stan):
    server = await stan()
    good = FakeClient(server, "good")
    good.connect()
    sub = good.subscribe("ch")
    errors = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(subject=st.sampled_from(_SUBJECTS), payload=st.one_of(
        st.binary(max_size=80),
        st.builds(lambda m, b: m + b, st.sampled_from([
            pb.ConnectRequest(clientID="x", heartbeatInbox="h").encode(),
            pb.SubscriptionRequest(clientID="good", subject="ch", inbox="i", maxInFlight=-5).encode(),
            pb.PubMsg(clientID="good", guid="g", subject="ch").encode(),
            pb.UnsubscribeRequest(clientID="good", subject="ch").encode()]), st.binary(max_size=12))),
        with_reply=st.booleans())
    def feed(subject, payload, with_reply):
        try:
            server.publish(subject, payload, reply="_INBOX.junk" if with_reply else None)
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    feed()
    assert errors == []
    # The engine still serves clients. (The junk may legitimately have closed "good": STAN
    # lets any connection close any client id, so a fresh client checks it.)
    fresh = FakeClient(server, "fresh")
    assert fresh.connect().error == ""
    fresh_sub = fresh.subscribe("ch")
    assert fresh.publish("ch", b"after", guid="after").error == ""
    assert fresh_sub.msgs[-1].data == b"after"
    del sub


async def test_max_inactivity_deletes_unused_channels(autojump_clock, stan):
    from natserver.stan import ChannelLimits

    server = await stan(limits=ChannelLimits(max_inactivity=60))
    c = FakeClient(server, "i")
    c.connect()
    c.publish("idle", b"1")
    sub = c.subscribe("busy")
    c.publish("busy", b"1")
    engine = server.stan
    await trio.sleep(59)
    c.publish("idle", b"2")  # activity pushes the deadline
    await trio.sleep(59)
    assert "idle" in engine.channels
    await trio.sleep(2)
    assert "idle" not in engine.channels
    assert "busy" in engine.channels  # it has a subscription
    assert sub.unsubscribe().error == ""
    await trio.sleep(61)
    assert "busy" not in engine.channels
    # a deleted channel starts over
    c.publish("idle", b"new")
    again = c.subscribe("idle", startPosition=pb.FIRST)
    assert [(m.sequence, m.data) for m in again.msgs] == [(1, b"new")]


async def test_ack_timer_heap_stays_small(autojump_clock, stan):
    """One live timer entry per subscription, however many messages go through."""
    server = await stan()
    c = FakeClient(server, "t")
    c.connect()
    sub = c.subscribe("ch", ackWaitInSecs=30)
    for i in range(500):
        c.publish("ch", b"x")
        sub.ack(i + 1)
        await trio.sleep(0.01)
    assert len(server.stan._timers) <= 2
    assert len(sub.msgs) == 500


async def test_stan_trace_logs_protocol(autojump_clock, nursery):
    import logging

    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    stan_log = logging.getLogger("natserver.stan")
    server = await nursery.start(natserver.serve, make_options(quiet=False, stan=StanOptions(trace=True)))
    c = FakeClient(server, "traced")
    c.connect()
    sub = c.subscribe("ch")
    stan_log.addHandler(handler)
    try:
        c.publish("ch", b"x", guid="G1")
        sub.ack(1)
    finally:
        stan_log.removeHandler(handler)
    text = "\n".join(lines)
    assert "Received message from publisher subj=ch guid=G1" in text
    assert "Delivering msg to subid=1, subject=ch, seq=1" in text
    assert "Processing ack for subid=1, subject=ch, seq=1" in text
    logging.getLogger("natserver.stan").setLevel(logging.NOTSET)


async def test_queue_redelivery_skips_a_member_failing_heartbeats(autojump_clock, stan):
    server = await stan(hb_interval=30, hb_timeout=10)
    a = FakeClient(server, "member-a", answer_heartbeats=False)
    b = FakeClient(server, "member-b")
    a.connect()
    b.connect()
    sub_a = a.subscribe("jobs", qGroup="g", ackWaitInSecs=60)
    sub_b = b.subscribe("jobs", qGroup="g", ackWaitInSecs=60)
    b.publish("jobs", b"x")
    holder, other = (sub_a, sub_b) if sub_a.msgs else (sub_b, sub_a)
    if holder is sub_b:  # make a hold it: b acks, the next one goes to a
        sub_b.ack(1)
        b.publish("jobs", b"y")
        holder, other = sub_a, sub_b
    seq = holder.msgs[-1].sequence
    await trio.sleep(61)  # a failed a heartbeat at 40 s: the redelivery goes to b
    assert (other.msgs[-1].sequence, other.msgs[-1].redelivered) == (seq, True)
    assert [m.sequence for m in holder.msgs].count(seq) == 1


async def test_ping_from_a_client_failing_heartbeats_triggers_one_now(autojump_clock, stan):
    server = await stan(hb_interval=30, hb_timeout=10)
    c = FakeClient(server, "flaky", answer_heartbeats=False)
    c.connect()
    await trio.sleep(41)  # one failed heartbeat
    client = server.stan.clients["flaky"]
    assert client.fhb == 1
    c.answer_heartbeats = True
    before = c.heartbeats
    assert c.request_raw("_STAN.discover.test-cluster.pings", pb.Ping(connID=c.conn_id).encode()) == b""
    await trio.sleep(0.1)
    assert c.heartbeats == before + 1 and client.fhb == 0


async def test_redelivery_count(autojump_clock, stan):
    server = await stan()
    c = FakeClient(server, "rc")
    c.connect()
    sub = c.subscribe("ch", ackWaitInSecs=5)
    c.publish("ch", b"x")
    await trio.sleep(5.1)
    await trio.sleep(5.1)
    assert [m.redeliveryCount for m in sub.msgs] == [0, 1, 2]
    sub.ack(1)
    c.publish("ch", b"y")
    await trio.sleep(5.1)
    assert [(m.sequence, m.redeliveryCount) for m in sub.msgs[3:]] == [(2, 0), (2, 1)]


async def test_no_redelivery_to_a_client_missing_heartbeats(autojump_clock, stan):
    server = await stan(hb_interval=30, hb_timeout=10)
    c = FakeClient(server, "gone", answer_heartbeats=False)
    c.connect()
    sub = c.subscribe("ch", ackWaitInSecs=60)
    c.publish("ch", b"x")
    await trio.sleep(61)  # a heartbeat failed at 40 s: the redelivery waits
    assert len(sub.msgs) == 1
    c.answer_heartbeats = True
    await trio.sleep(60)  # heartbeat answered at 80 s; redelivered at the next check
    assert [(m.sequence, m.redelivered) for m in sub.msgs] == [(1, False), (1, True)]


async def test_state_machine_invariants(autojump_clock, stan):
    """Random publishes, subscriptions (plain, durable, queue, durable queue), acks, sub-closes,
    unsubscribes, client closes and reconnects: no internal error, and first deliveries in
    order and never twice per plain subscription."""
    import logging

    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    server = await stan(max_channels=0)  # a channel per example
    engine = server.stan
    errors = []
    handler = logging.Handler(level=logging.ERROR)
    handler.emit = lambda record: errors.append(record) if record.exc_info else None
    logging.getLogger("natserver.stan").addHandler(handler)
    counter = [0]

    class Machine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            counter[0] += 1
            self.channel = f"ch{counter[0]}"
            self.clients = {}
            self.subs = []  # (FakeSub, kind)

        def client(self, n):
            c = self.clients.get(n)
            if c is None or c.client_id not in engine.clients:
                c = self.clients[n] = FakeClient(server, f"m{counter[0]}-{n}")
                assert c.connect().error == ""
            return c

        @rule(n=st.integers(0, 2), k=st.integers(1, 3))
        def publish(self, n, k):
            for _ in range(k):
                assert self.client(n).publish(self.channel, b"x").error == ""

        @rule(n=st.integers(0, 2), kind=st.sampled_from(["plain", "durable", "queue", "dqueue"]),
              mif=st.integers(1, 3), start=st.sampled_from([pb.NEW_ONLY, pb.FIRST, pb.LAST_RECEIVED]))
        def subscribe(self, n, kind, mif, start):
            fields = {"maxInFlight": mif, "startPosition": start}
            if kind in ("durable", "dqueue"):
                fields["durableName"] = "d"
            if kind in ("queue", "dqueue"):
                fields["qGroup"] = "q"
            sub = self.client(n).subscribe(self.channel, **fields)
            if not sub.error:
                self.subs.append((sub, kind))
            else:
                assert sub.error == "stan: duplicate durable registration"

        @rule(i=st.integers(0, 10))
        def ack_first(self, i):
            if self.subs:
                sub, _ = self.subs[i % len(self.subs)]
                if sub.msgs:
                    sub.ack(sub.msgs[(i * 7) % len(sub.msgs)].sequence)

        @rule(i=st.integers(0, 10), close=st.booleans())
        def remove(self, i, close):
            if self.subs:
                sub, _ = self.subs.pop(i % len(self.subs))
                resp = sub.unsubscribe(close=close)
                assert resp.error in ("", "stan: unknown clientID", "stan: invalid subscription")

        @rule(n=st.integers(0, 2))
        def close_client(self, n):
            c = self.clients.pop(n, None)
            if c is not None:
                assert c.close().error in ("", "stan: unknown clientID")
                self.subs = [(s, k) for s, k in self.subs if s.client is not c]

        @invariant()
        def checks(self):
            assert errors == []
            for sub, kind in self.subs:
                firsts = [m.sequence for m in sub.msgs if not m.redelivered]
                if kind == "plain":
                    assert firsts == sorted(set(firsts))
            # (maxInFlight may be exceeded on purpose, as by nats-streaming-server: a leaving queue
            # member's pending messages go to the others regardless, and a durable resumed with a
            # smaller maxInFlight gets all its pending messages again. test_max_in_flight_* check it.)

    try:
        run_state_machine_as_test(Machine, settings=settings(max_examples=60, stateful_step_count=30, deadline=None,
                                                             database=None))
    finally:
        logging.getLogger("natserver.stan").removeHandler(handler)


async def test_file_store_restart_keeps_queue_groups_and_pending(nursery, tmp_path):
    options = StanOptions(store="file", dir=str(tmp_path))
    with trio.fail_after(10):
        server = await nursery.start(natserver.serve, make_options(stan=options))
        c = FakeClient(server, "q")
        c.connect()
        member = c.subscribe("jobs", qGroup="g", durableName="dur", startPosition=pb.FIRST, maxInFlight=5)
        plain = c.subscribe("jobs", durableName="solo", startPosition=pb.FIRST)
        for i in range(3):
            c.publish("jobs", b"%d" % i)
        member.ack(1)
        plain.ack(1)
        plain.ack(2)
        assert c.close().error == ""  # the durable queue group and the durable stay, offline
        await server.shutdown()
        await trio.sleep(0.05)

        server = await nursery.start(natserver.serve, make_options(stan=options))
        engine = server.stan
        group = engine.channels["jobs"].queues["dur:g"]
        assert group.members == [] and sorted(group.shadow.pending) == [2, 3]
        other = FakeClient(server, "other")
        other.connect()
        joined = other.subscribe("jobs", qGroup="g", durableName="dur")
        assert [(m.sequence, m.redelivered) for m in joined.msgs] == [(2, True), (3, True)]
        again = FakeClient(server, "q")
        again.connect()
        solo = again.subscribe("jobs", durableName="solo")
        assert [(m.sequence, m.redelivered) for m in solo.msgs] == [(3, True)]
        await server.shutdown()


async def test_max_clients(autojump_clock, stan):
    server = await stan(max_clients=2)
    assert FakeClient(server, "one").connect().error == ""
    assert FakeClient(server, "two").connect().error == ""
    third = FakeClient(server, "three")
    assert third.connect().error == "stan: maximum clients exceeded"
    assert FakeClient(server, "one").close().error == ""
    assert third.connect().error == ""
