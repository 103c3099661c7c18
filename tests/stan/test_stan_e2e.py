"""NATS Streaming end to end: stan.py (asyncio-nats-streaming 0.4.0, see stan_client.py) on
nats-py against natserver with ``Options.stan``.

The server runs in a thread (``threaded_server``); each test body runs under ``asyncio.run``
with ``asyncio.wait_for`` as its hard timeout. Waiting for deliveries uses queues with
timeouts, never sleeps for timing.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import trio

from natserver.stan import StanOptions, stream_name
from tests.stan import stan_client as S

TIMEOUT = 30
WAIT = 5.0  # the longest a test waits for one expected delivery


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def stan_server(threaded_server, **changes):
    options = changes.pop("stan", None) or StanOptions()
    return threaded_server(stan=options, **changes)


def in_server(handle, fn):
    """Run ``fn()`` in the server's trio thread (to read the engine's state safely)."""
    return trio.from_thread.run_sync(fn, trio_token=handle._token)


class Inbox:
    """A subscription callback that queues what it is given."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    async def __call__(self, msg) -> None:
        await self.queue.put(msg)

    async def get(self, timeout: float = WAIT):
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def take(self, n: int) -> list:
        return [await self.get() for _ in range(n)]

    async def nothing(self, seconds: float = 0.3) -> bool:
        try:
            await asyncio.wait_for(self.queue.get(), seconds)
        except asyncio.TimeoutError:
            return True
        return False


def test_connect_publish_subscribe_ack(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "client-1")
        assert sc._pub_prefix == "_STAN.pub.test-cluster"
        assert sc._sub_req_subject == "_STAN.sub.test-cluster"
        assert sc._close_req_subject == "_STAN.close.test-cluster"
        assert sc._sub_close_req_subject == "_STAN.subclose.test-cluster"
        assert sc._unsub_req_subject == "_STAN.unsub.test-cluster"
        assert sc._ping_requests == "_STAN.discover.test-cluster.pings"
        inbox = Inbox()
        await sc.subscribe("orders.eu", cb=inbox)
        before = time.time_ns()
        ack = await sc.publish("orders.eu", b"first")
        assert ack.guid and ack.error == ""
        msg = await inbox.get()
        assert (msg.seq, msg.data, msg.proto.subject, msg.proto.redelivered) == (1, b"first", "orders.eu", False)
        assert before <= msg.timestamp <= time.time_ns()
        await sc.publish("orders.eu", b"second")
        assert (await inbox.get()).seq == 2
        await S.close(sc)

    run(main())
    channel = in_server(handle, lambda: handle.server.stan.channels["orders.eu"])
    assert channel.store.last_seq == 2
    assert in_server(handle, lambda: list(handle.server.stan.clients)) == []


def test_async_publish_many(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "pub")
        acks = asyncio.Queue()

        async def on_ack(ack):
            await acks.put(ack)

        guids = []
        for i in range(200):
            await sc.publish("load", b"m%d" % i, ack_handler=on_ack)
        for _ in range(200):
            ack = await asyncio.wait_for(acks.get(), WAIT)
            assert ack.error == ""
            guids.append(ack.guid)
        assert len(set(guids)) == 200
        inbox = Inbox()
        await sc.subscribe("load", cb=inbox, deliver_all_available=True)
        msgs = await inbox.take(200)
        assert [m.seq for m in msgs] == list(range(1, 201))
        assert msgs[-1].data == b"m199"
        await S.close(sc)

    run(main())


def test_start_positions(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "starts")
        for i in range(1, 6):
            await sc.publish("pos", b"%d" % i)

        async def first_seq(**kwargs):
            inbox = Inbox()
            sub = await sc.subscribe("pos", cb=inbox, **kwargs)
            try:
                return (await inbox.get()).seq
            finally:
                await sub.unsubscribe()

        assert await first_seq(deliver_all_available=True) == 1
        assert await first_seq(start_at="first") == 1
        assert await first_seq(start_at="last_received") == 5
        assert await first_seq(start_at="sequence", sequence=3) == 3
        assert await first_seq(start_at="sequence", sequence=0) == 1  # clamped to the first
        assert await first_seq(start_at="time", time=time.time() - 60) == 1
        # new only: nothing until the next message
        inbox = Inbox()
        await sc.subscribe("pos", cb=inbox)
        assert await inbox.nothing()
        await sc.publish("pos", b"6")
        assert (await inbox.get()).seq == 6
        # a time after every message: only new ones
        inbox2 = Inbox()
        await sc.subscribe("pos", cb=inbox2, start_at="time", time=time.time() + 3600)
        await sc.publish("pos", b"7")
        assert (await inbox2.get()).seq == 7
        # a sequence past the end: the next message
        inbox3 = Inbox()
        await sc.subscribe("pos", cb=inbox3, start_at="sequence", sequence=1000)
        await sc.publish("pos", b"8")
        assert (await inbox3.get()).seq == 8
        await S.close(sc)

    run(main())


def test_max_in_flight_holds_back_until_acked(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "mif")
        for i in range(10):
            await sc.publish("mif", b"%d" % i)
        inbox = Inbox()
        await sc.subscribe("mif", cb=inbox, deliver_all_available=True, manual_acks=True, max_inflight=3)
        first = await inbox.take(3)
        assert [m.seq for m in first] == [1, 2, 3]
        assert await inbox.nothing()
        await sc.ack(first[0])
        assert (await inbox.get()).seq == 4
        assert await inbox.nothing()
        await sc.ack(first[1])
        await sc.ack(first[2])
        assert [m.seq for m in await inbox.take(2)] == [5, 6]
        await S.close(sc)

    run(main())


def test_ack_wait_redelivery(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "redeliver")
        inbox = Inbox()
        await sc.subscribe("work", cb=inbox, manual_acks=True, ack_wait=1)
        await sc.publish("work", b"job")
        msg = await inbox.get()
        assert not msg.proto.redelivered
        again = await inbox.get(timeout=WAIT)  # ackWait is 1 s
        assert (again.seq, again.data, again.proto.redelivered) == (1, b"job", True)
        await sc.ack(again)
        assert await inbox.nothing(1.5)
        await S.close(sc)

    run(main())


def test_durable_resumes_after_close(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "dur")
        inbox = Inbox()
        await sc.subscribe("events", cb=inbox, durable_name="audit", deliver_all_available=True, manual_acks=True)
        await sc.publish("events", b"1")
        await sc.publish("events", b"2")
        one, two = await inbox.take(2)
        await sc.ack(one)  # 2 stays unacknowledged
        await sc._nc.flush()
        await S.close(sc)  # the connection closes: the durable stays

        pub = await S.connect(handle.url, "publisher")
        await pub.publish("events", b"3")

        sc = await S.connect(handle.url, "dur")
        inbox = Inbox()
        # the start position is ignored on resume
        await sc.subscribe("events", cb=inbox, durable_name="audit", start_at="last_received")
        got = await inbox.take(2)
        assert [(m.seq, m.proto.redelivered) for m in got] == [(2, True), (3, False)]
        assert await inbox.nothing()
        await S.close(sc)
        await S.close(pub)

    run(main())


def test_durable_unsubscribe_forgets_and_duplicate_is_refused(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "dur2")
        inbox = Inbox()
        sub = await sc.subscribe("ch", cb=inbox, durable_name="d", deliver_all_available=True)
        with pytest.raises(S.StanError, match="stan: duplicate durable registration"):
            await sc.subscribe("ch", cb=Inbox(), durable_name="d")
        await sc.publish("ch", b"1")
        assert (await inbox.get()).seq == 1
        await sub.unsubscribe()  # unsubscribe: the durable is removed
        await sc.publish("ch", b"2")
        inbox = Inbox()
        await sc.subscribe("ch", cb=inbox, durable_name="d", deliver_all_available=True)
        assert [m.seq for m in await inbox.take(2)] == [1, 2]  # starts over
        await S.close(sc)

    run(main())


def test_durable_kept_on_sub_close(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "dur3")
        inbox = Inbox()
        sub = await sc.subscribe("ch", cb=inbox, durable_name="d", deliver_all_available=True)
        await sc.publish("ch", b"1")
        assert (await inbox.get()).seq == 1
        await sc._nc.flush()
        await sub.close()
        await sc.publish("ch", b"2")
        inbox = Inbox()
        await sc.subscribe("ch", cb=inbox, durable_name="d", deliver_all_available=True)
        assert (await inbox.get()).seq == 2
        assert await inbox.nothing()
        await S.close(sc)

    run(main())


def test_queue_group_shares_messages(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "q")
        a, b = Inbox(), Inbox()
        await sc.subscribe("jobs", cb=a, queue="workers")
        await sc.subscribe("jobs", cb=b, queue="workers")
        for i in range(20):
            await sc.publish("jobs", b"%d" % i)
        got = []
        deadline = asyncio.get_running_loop().time() + WAIT
        while len(got) < 20 and asyncio.get_running_loop().time() < deadline:
            for inbox in (a, b):
                while not inbox.queue.empty():
                    got.append((inbox, inbox.queue.get_nowait().seq))
            await asyncio.sleep(0.02)
        assert sorted(seq for _, seq in got) == list(range(1, 21))
        assert {inbox for inbox, _ in got} == {a, b}  # both members got some
        await S.close(sc)

    run(main())


def test_queue_member_leaving_hands_over_unacked(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "q2")
        a, b = Inbox(), Inbox()
        sub_a = await sc.subscribe("jobs", cb=a, queue="w", manual_acks=True, max_inflight=1)
        await sc.publish("jobs", b"x")
        assert (await a.get()).seq == 1  # a holds it unacknowledged
        await sc.subscribe("jobs", cb=b, queue="w", manual_acks=True)
        await sub_a.close()
        msg = await b.get()
        assert (msg.seq, msg.proto.redelivered) == (1, True)
        await S.close(sc)

    run(main())


def test_durable_queue_group_survives_without_members(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "dq")
        a = Inbox()
        await sc.subscribe("jobs", cb=a, queue="w", durable_name="dur", deliver_all_available=True)
        await sc.publish("jobs", b"1")
        assert (await a.get()).seq == 1
        await sc._nc.flush()
        await S.close(sc)  # last member gone: the durable group stays
        pub = await S.connect(handle.url, "pub")
        await pub.publish("jobs", b"2")
        sc = await S.connect(handle.url, "dq-other")  # any client may rejoin a queue group
        b = Inbox()
        await sc.subscribe("jobs", cb=b, queue="w", durable_name="dur", deliver_all_available=True)
        assert (await b.get()).seq == 2
        assert await b.nothing()
        with pytest.raises(S.StanError, match="can't contain the character ':'"):
            await sc.subscribe("jobs", cb=b, queue="w", durable_name="a:b")
        await S.close(sc)
        await S.close(pub)

    run(main())


def test_duplicate_client_id(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        first = await S.connect(handle.url, "twin")
        with pytest.raises(S.StanError, match="^stan: clientID already registered$"):
            await S.connect(handle.url, "twin")
        await first.publish("still", b"works")
        # The first client's connection dies without a close: its heartbeat inbox goes silent,
        # so the next connect with its id replaces it.
        await first._nc.close()
        second = await S.connect(handle.url, "twin")
        await second.publish("still", b"ok")
        await S.close(second)

    run(main())


def test_invalid_client_id_and_unknown_cluster(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        with pytest.raises(S.StanError, match="^stan: invalid clientID: only alphanumeric and `-` or `_` "
                                              "characters allowed$"):
            await S.connect(handle.url, "bad id!")
        with pytest.raises(S.ConnectTimeout, match="failed connecting to 'other-cluster'"):
            await S.connect(handle.url, "x", cluster_id="other-cluster", connect_timeout=0.5)

    run(main())


def test_subscription_errors(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "errs")
        with pytest.raises(S.StanError, match="^stan: invalid subject$"):
            await sc.subscribe("foo.*", cb=Inbox())
        with pytest.raises(S.StanError, match="^stan: invalid ack wait time, should be >= 1s$"):
            await sc.subscribe("foo", cb=Inbox(), ack_wait=0)
        with pytest.raises(S.StanError, match="^stan: invalid MaxInflight, should be >= 1$"):
            await sc.subscribe("foo", cb=Inbox(), max_inflight=0)
        nc = sc._nc
        for pub in (S.protocol.PubMsg(clientID="errs", guid="g1", subject="foo..bar"),  # empty token
                    S.protocol.PubMsg(clientID="errs", guid="g2", subject="foo.>"),  # wildcard
                    S.protocol.PubMsg(clientID="errs", subject="foo"),  # no guid
                    S.protocol.PubMsg(clientID="someone-else", guid="g3", subject="foo"),  # unknown client
                    S.protocol.PubMsg(clientID="errs", guid="g4", subject="foo", connID=b"wrong")):
            msg = await nc.request("_STAN.pub.test-cluster.foo", pub.SerializeToString(), timeout=WAIT)
            ack = S.protocol.PubAck()
            ack.ParseFromString(msg.data)
            assert (ack.guid, ack.error) == (pub.guid, "stan: invalid publish request")
        await S.close(sc)
        # the id is gone after close
        nc = await S.connect_nats(handle.url)
        req = S.protocol.SubscriptionRequest(clientID="errs", subject="foo", inbox="_INBOX.x", maxInFlight=1,
                                             ackWaitInSecs=30)
        msg = await nc.request("_STAN.sub.test-cluster", req.SerializeToString(), timeout=WAIT)
        resp = S.protocol.SubscriptionResponse()
        resp.ParseFromString(msg.data)
        assert resp.error == "stan: unknown clientID"
        msg = await nc.request("_STAN.close.test-cluster", S.protocol.CloseRequest(clientID="errs")
                               .SerializeToString(), timeout=WAIT)
        close = S.protocol.CloseResponse()
        close.ParseFromString(msg.data)
        assert close.error == "stan: unknown clientID"
        await nc.close()

    run(main())


def test_pings(threaded_server):
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "pinger")
        nc = sc._nc
        ok = await nc.request("_STAN.discover.test-cluster.pings",
                              S.protocol.Ping(connID=sc._conn_id).SerializeToString(), timeout=WAIT)
        assert ok.data == b""
        bad = await nc.request("_STAN.discover.test-cluster.pings",
                               S.protocol.Ping(connID=b"nobody").SerializeToString(), timeout=WAIT)
        resp = S.protocol.PingResponse()
        resp.ParseFromString(bad.data)
        assert resp.error == "client has been replaced or is no longer registered"
        await S.close(sc)

    run(main())


def test_other_cluster_id(threaded_server):
    handle = stan_server(threaded_server, stan=StanOptions(cluster_id="prod"))

    async def main():
        sc = await S.connect(handle.url, "c", cluster_id="prod")
        assert sc._pub_prefix == "_STAN.pub.prod"
        await sc.publish("x", b"y")
        await S.close(sc)

    run(main())


def test_file_store_restart_keeps_channels_clients_and_durables(threaded_server, tmp_path):
    options = StanOptions(store="file", dir=str(tmp_path / "stan"))
    handle = stan_server(threaded_server, stan=options)

    async def before():
        sc = await S.connect(handle.url, "keeper")
        inbox = Inbox()
        await sc.subscribe("log", cb=inbox, durable_name="d", deliver_all_available=True, manual_acks=True)
        for i in range(1, 4):
            await sc.publish("log", b"%d" % i)
        got = await inbox.take(3)
        await sc.ack(got[0])
        await sc._nc.flush()
        await sc.close()  # durable suspended: 2 and 3 unacknowledged
        await sc._nc.close()
        other = await S.connect(handle.url, "stays")  # a client still registered at the restart
        await other._nc.flush()

    run(before())
    handle.stop()
    handle = stan_server(threaded_server, stan=options)
    assert in_server(handle, lambda: sorted(handle.server.stan.clients)) == ["stays"]

    async def after():
        sc = await S.connect(handle.url, "keeper")
        inbox = Inbox()
        await sc.subscribe("log", cb=inbox, durable_name="d", manual_acks=True)
        got = await inbox.take(2)
        assert [(m.seq, m.data, m.proto.redelivered) for m in got] == [(2, b"2", True), (3, b"3", True)]
        await sc.publish("log", b"4")
        assert (await inbox.get()).seq == 4
        all_inbox = Inbox()
        await sc.subscribe("log", cb=all_inbox, deliver_all_available=True)
        assert [m.data for m in await all_inbox.take(4)] == [b"1", b"2", b"3", b"4"]
        await S.close(sc)

    run(after())


def test_jetstream_view_of_a_channel(threaded_server, tmp_path):
    handle = stan_server(threaded_server, jetstream=True, store_dir=str(tmp_path))

    async def main():
        sc = await S.connect(handle.url, "migrating")
        for i in range(3):
            await sc.publish("orders.eu", b"order-%d" % i)
        js = sc._nc.jetstream()
        name = stream_name("orders.eu")
        assert name == "STAN_orders_eu"
        info = await js.stream_info(name)
        assert info.state.messages == 3
        assert info.config.subjects == ["orders.eu"]
        msg = await js.get_msg(name, 2)
        assert (msg.subject, msg.data) == ("orders.eu", b"order-1")
        last = await js.get_msg(name, subject="orders.eu", direct=True, next=False)
        assert last.data == b"order-2"
        # JetStream consumers read the channel, and see what STAN publishers add afterwards
        puller = await js.pull_subscribe("orders.eu", "reader", stream=name)
        got = await puller.fetch(3, timeout=5)
        assert [m.data for m in got] == [b"order-0", b"order-1", b"order-2"]
        for m in got:
            await m.ack()
        pushed = await js.subscribe("orders.eu", stream=name, ordered_consumer=True)
        assert (await pushed.next_msg(timeout=5)).data == b"order-0"
        await sc.publish("orders.eu", b"order-3")
        (later,) = await puller.fetch(1, timeout=5)
        assert later.data == b"order-3"
        # a core publish on the channel's subject does not reach the channel
        await sc._nc.publish("orders.eu", b"not stan")
        await sc._nc.flush()
        assert (await js.stream_info(name)).state.messages == 4
        await S.close(sc)

    run(main())


def test_malformed_protobuf_from_many_clients(threaded_server):
    """Junk on every _STAN subject from many connections at once while a stan.py client works:
    the engine answers or ignores each junk message and the good client misses nothing."""
    handle = stan_server(threaded_server)
    subjects = ["_STAN.discover.test-cluster", "_STAN.discover.test-cluster.pings", "_STAN.pub.test-cluster.good",
                "_STAN.sub.test-cluster", "_STAN.unsub.test-cluster", "_STAN.subclose.test-cluster",
                "_STAN.close.test-cluster"]
    junk = [b"\xff", b"\x0a\x7f", b"\x08", b"\x0b\x0c", b"\x12\x02ab\x1a", bytes(range(40)), b"\x80" * 12]

    async def main():
        good = await S.connect(handle.url, "good-client")
        inbox = Inbox()
        await good.subscribe("good", cb=inbox)
        attackers = [await S.connect_nats(handle.url) for _ in range(12)]

        async def attack(nc, k):
            for i in range(40):
                subject = subjects[(i + k) % len(subjects)]
                await nc.publish(subject, junk[(i * 7 + k) % len(junk)], reply=f"_INBOX.junk{k}")
            await nc.flush()

        async def publish():
            for i in range(50):
                ack = await good.publish("good", b"%d" % i)
                assert ack.error == ""

        await asyncio.gather(publish(), *(attack(nc, k) for k, nc in enumerate(attackers)))
        msgs = await inbox.take(50)
        assert [m.data for m in msgs] == [b"%d" % i for i in range(50)]
        for nc in attackers:
            await nc.close()
        await S.close(good)

    run(main())


def _get(handle, path: str):
    import json
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{handle.server.monitor.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_monitoring_endpoints(threaded_server):
    handle = stan_server(threaded_server, http_port=-1)

    async def main():
        sc = await S.connect(handle.url, "watched")
        inbox = Inbox()
        await sc.subscribe("a.b", cb=inbox, durable_name="dur", manual_acks=True, deliver_all_available=True)
        await sc.subscribe("a.b", cb=Inbox(), queue="q")
        for i in range(3):
            await sc.publish("a.b", b"xyz")
        await inbox.take(3)
        await sc.publish("other", b"1")
        loop = asyncio.get_running_loop()

        status, serverz = await loop.run_in_executor(None, _get, handle, "/streaming/serverz")
        assert status == 200
        assert list(serverz)[:6] == ["cluster_id", "server_id", "version", "go", "state", "now"]
        assert (serverz["cluster_id"], serverz["state"], serverz["clients"], serverz["channels"],
                serverz["subscriptions"], serverz["total_msgs"], serverz["in_msgs"]) == (
            "test-cluster", "STANDALONE", 1, 2, 2, 4, 4)

        status, storez = await loop.run_in_executor(None, _get, handle, "/streaming/storez")
        assert storez["type"] == "MEMORY"
        assert storez["limits"] == {"max_channels": 100, "max_msgs": 1000000, "max_bytes": 1024000000, "max_age": 0,
                                    "max_subscriptions": 1000, "max_inactivity": 0}

        status, clientsz = await loop.run_in_executor(None, _get, handle, "/streaming/clientsz?subs=1")
        assert (clientsz["total"], clientsz["count"], clientsz["limit"]) == (1, 1, 1024)
        client = clientsz["clients"][0]
        assert (client["id"], client["subs_count"]) == ("watched", 2)
        durable = [s for s in client["subscriptions"]["a.b"] if s.get("durable_name")][0]
        assert (durable["is_durable"], durable["is_offline"], durable["last_sent"], durable["pending_count"]) == (
            True, False, 3, 3)

        status, channelsz = await loop.run_in_executor(None, _get, handle, "/streaming/channelsz")
        assert channelsz["names"] == ["a.b", "other"]
        status, one = await loop.run_in_executor(None, _get, handle, "/streaming/channelsz?channel=a.b&subs=1")
        assert (one["msgs"], one["bytes"] > 0, one["first_seq"], one["last_seq"], one["subs_count"]) == (
            3, True, 1, 3, 2)
        assert {s.get("queue_name", "") for s in one["subscriptions"]} == {"", "q"}
        status, missing = await loop.run_in_executor(None, _get, handle, "/streaming/channelsz?channel=nope")
        assert (status, missing) == (404, "Channel nope not found\n")
        await S.close(sc)

    run(main())


def test_jetstream_file_streams_survive_restart(threaded_server, tmp_path):
    options = StanOptions(store="file", dir=str(tmp_path / "stan"))
    js_dir = str(tmp_path / "js")
    handle = stan_server(threaded_server, stan=options, jetstream=True, store_dir=js_dir)

    async def before():
        sc = await S.connect(handle.url, "jsfile")
        for i in range(3):
            await sc.publish("logs.app", b"%d" % i)
        info = await sc._nc.jetstream().stream_info("STAN_logs_app")
        assert (str(getattr(info.config.storage, "value", info.config.storage)), info.state.messages) == ("file", 3)
        await S.close(sc)

    run(before())
    handle.stop()
    handle = stan_server(threaded_server, stan=options, jetstream=True, store_dir=js_dir)

    async def after():
        sc = await S.connect(handle.url, "jsfile")
        await sc.publish("logs.app", b"3")
        inbox = Inbox()
        await sc.subscribe("logs.app", cb=inbox, deliver_all_available=True)
        assert [(m.seq, m.data) for m in await inbox.take(4)] == [(1, b"0"), (2, b"1"), (3, b"2"), (4, b"3")]
        info = await sc._nc.jetstream().stream_info("STAN_logs_app")
        assert (info.state.messages, info.state.last_seq) == (4, 4)
        await S.close(sc)

    run(after())


def test_durable_resumes_after_a_crash(threaded_server):
    """The client's connection dies without a CloseRequest; the same client id reconnects
    (replacing the silent old registration) and resumes its durable."""
    handle = stan_server(threaded_server)

    async def main():
        sc = await S.connect(handle.url, "crashy")
        inbox = Inbox()
        await sc.subscribe("ch", cb=inbox, durable_name="d", manual_acks=True, deliver_all_available=True)
        await sc.publish("ch", b"1")
        await sc.publish("ch", b"2")
        first, _ = await inbox.take(2)
        await sc.ack(first)
        await sc._nc.flush()
        sc._ping_server_task.cancel()
        await sc._nc.close()  # crash: no CloseRequest

        sc = await S.connect(handle.url, "crashy")  # replaces the silent registration
        inbox = Inbox()
        await sc.subscribe("ch", cb=inbox, durable_name="d", manual_acks=True)
        msg = await inbox.get()
        assert (msg.seq, msg.proto.redelivered) == (2, True)
        await S.close(sc)

    run(main())
