"""Cases from nats-py's own test suite (nats/tests/test_js.py, 2.15/2.16) that natserver failed
(issue 30), run as nats-py runs them, against natserver and against the reference
nats-server 2.15.1 (skipped when its binary is missing): the same test passing on both is the
compatibility check.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import nats
import pytest
from nats.js.api import Header

from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.test_jetstream import GoServer, Target, connect, run

REFERENCE = reference.NATS_SERVER  # nats-server 2.15.1 (None: not installed)


class _Target(Target):
    def start(self) -> _Target:
        if self.kind == "natserver":
            return super().start()  # type: ignore[return-value]
        self._handle = GoServer(self.store_dir, REFERENCE).start()
        self.url = self._handle.url
        return self


@pytest.fixture(params=["natserver", pytest.param("nats-server-2.15.1", marks=pytest.mark.needs_nats_server)])
def target(request, threaded_server, tmp_path):
    if request.param != "natserver" and REFERENCE is None:
        pytest.skip("nats-server 2.15.1 not installed")
    t = _Target(request.param, threaded_server, tmp_path / request.param).start()
    yield t
    t.stop()


# -- item 1: a consumer's filter is not checked against the stream's subjects -----------------


def test_kv_purge_stream_wider_filter(target):
    """KVTest::test_purge_stream: a filter (foo.*) wider than each stream subject."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="foo", subjects=["foo.A", "foo.B", "foo.C"])
        for subject, data in (("foo.A", b"1"), ("foo.C", b"1"), ("foo.B", b"1"), ("foo.C", b"2")):
            await js.publish(subject, data)
        await js.purge_stream(name="foo", seq=3)
        sub = await js.pull_subscribe("foo.*", "durable")
        info = await js.stream_info("foo")
        assert info.state.messages == 2
        msgs = await sub.fetch(5, timeout=1)
        assert [m.subject for m in msgs] == ["foo.B", "foo.C"]
        ack = await js.publish("foo.C", b"3", headers={Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "4"})
        assert ack.seq == 5
        await nc.close()

    run(main())


def test_consumer_with_name_and_filters(target):
    """JSMTest::test_consumer_with_name: named consumers, one filtered on a stream subject and
    one on '>', with a subscriber on $JS.API.CONSUMER.> seeing each request's subject."""

    async def main():
        nc = await connect(target.url)
        js, jsm = nc.jetstream(), nc.jsm()
        tsub = await nc.subscribe("$JS.API.CONSUMER.>")
        await jsm.add_stream(name="ctests", subjects=["a", "b", "c.>"])
        for subject, data in (("a", b"1"), ("b", b"2"), ("c.d", b"3"), ("c.d.e", b"4")):
            await js.publish(subject, data)
        for name, durable, filter, first, create in (
            ("ephemeral", None, None, b"1", "$JS.API.CONSUMER.CREATE.ctests.ephemeral"),
            ("durable", "durable", None, b"1", "$JS.API.CONSUMER.CREATE.ctests.durable"),
            ("durable2", "durable2", "b", b"2", "$JS.API.CONSUMER.CREATE.ctests.durable2.b"),
            ("durable3", "durable3", ">", b"1", "$JS.API.CONSUMER.CREATE.ctests.durable3"),
        ):
            cinfo = await jsm.add_consumer("ctests", name=name, durable_name=durable,
                                           filter_subject=filter, ack_policy="explicit")
            assert cinfo.config.name == name
            assert (await tsub.next_msg(timeout=2)).subject == create
            sub = await js.pull_subscribe_bind(name, "ctests")
            msgs = await sub.fetch(1, timeout=2)
            assert msgs[0].data == first
            assert await msgs[0].ack_sync()
            assert (await tsub.next_msg(timeout=2)).subject == f"$JS.API.CONSUMER.MSG.NEXT.ctests.{name}"
        await nc.close()

    run(main())


def test_filter_checks_on_the_wire(target):
    """Only a filter's form is checked (500/10052 "invalid subject"); a filter disjoint from the
    stream's subjects is taken and matches nothing; the deliver-subject cycle check looks at
    the stream's own subjects, not a mirror's origin's."""

    async def main():
        nc = await connect(target.url)

        async def api(subject: str, body: dict) -> dict:
            return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=2)).data)

        await api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.a", "o.b"]})
        await nc.request("o.a", b"1", timeout=2)
        await api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
        for bad in ("o..a", "o.>.a", " x"):
            answer = await api("$JS.API.CONSUMER.CREATE.O", {"stream_name": "O", "config": {"filter_subject": bad}})
            assert answer["error"] == {"code": 500, "err_code": 10052, "description": "invalid subject"}
        for wide in ("zz", "*.a", ">", "o.*"):
            answer = await api(f"$JS.API.CONSUMER.CREATE.O.c{len(wide)}{wide[0] != 'o'}",
                               {"stream_name": "O", "config": {"name": f"c{len(wide)}{wide[0] != 'o'}",
                                                               "filter_subject": wide}})
            assert answer["config"]["filter_subject"] == wide
            assert answer["num_pending"] == (0 if wide == "zz" else 1)
        answer = await api("$JS.API.CONSUMER.CREATE.O", {"stream_name": "O", "config": {"deliver_subject": "o.b"}})
        assert answer["error"] == {"code": 400, "err_code": 10081, "description": "consumer deliver subject forms a cycle"}
        answer = await api("$JS.API.CONSUMER.CREATE.M", {"stream_name": "M", "config": {"deliver_subject": "o.b"}})
        assert "error" not in answer and answer["config"]["deliver_subject"] == "o.b"
        # The same for mirrors' and sources' filters: their form only (10049, nats-server's texts).
        for spec, text in (({"mirror": {"name": "O", "filter_subject": "a..b"}}, "for the mirror invalid subject"),
                           ({"mirror": {"name": "NOPE", "filter_subject": "a..b"}}, "for the mirror invalid subject"),
                           ({"sources": [{"name": "O", "filter_subject": "a..b"}]}, "for the source: invalid subject")):
            answer = await api("$JS.API.STREAM.CREATE.F", {"name": "F", **spec})
            assert answer["error"] == {"code": 500, "err_code": 10049, "description": f"subject filter 'a..b' {text}"}
        answer = await api("$JS.API.STREAM.CREATE.F1", {"name": "F1", "mirror": {"name": "O", "filter_subject": "zz"}})
        assert answer["config"]["mirror"] == {"name": "O", "filter_subject": "zz"}
        answer = await api("$JS.API.STREAM.CREATE.F2", {"name": "F2", "sources": [{"name": "O", "filter_subject": "zz"}]})
        assert answer["config"]["sources"] == [{"name": "O", "filter_subject": "zz"}]
        await nc.close()

    run(main())


# -- item 4: a pull request leaves the waiting list (expiry, no_wait, interest gone) -----------


def test_fetch_no_orphan_on_timeout(target):
    """PullSubscribeTest::test_fetch_no_orphan_on_timeout: after a fetch() times out, the next
    fetch() returns the message published during it at once (nats-py's no_wait probe carries
    expires: it waits for the first messages and ends after them)."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="TEST_ORPHAN", subjects=["orphan.>"])
        sub = await js.pull_subscribe("orphan.>", "durable-orphan")
        with pytest.raises((nats.errors.TimeoutError, asyncio.TimeoutError)):
            await sub.fetch(100, timeout=0.1)
        fetch_task = asyncio.create_task(sub.fetch(100, timeout=3.0))
        await asyncio.sleep(0.05)
        await js.publish("orphan.test", b"hello")
        t0 = time.monotonic()
        msgs = await fetch_task
        elapsed = time.monotonic() - t0
        assert [m.data for m in msgs] == [b"hello"]
        assert elapsed < 1.0, f"fetch() returned {elapsed:.3f}s after the publish"
        await nc.close()

    run(main())


async def _statuses(sub, seconds: float) -> list:
    """What arrives on ``sub`` within ``seconds``: data, or (status, description, pending)."""
    out: list = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            msg = await sub.next_msg(timeout=left)
        except nats.errors.TimeoutError:
            break
        headers = msg.headers or {}
        if "Status" in headers:
            out.append((headers["Status"], headers.get("Description"), headers.get("Nats-Pending-Messages")))
        else:
            out.append(msg.data)
    return out


def test_pull_request_statuses_and_interest(target):
    """Raw MSG.NEXT requests: no_wait with and without expires, what ends them, and requests
    whose reply nobody listens to any more (never subscribed, unsubscribed, connection
    closed) leave the waiting list without taking messages."""

    async def main():
        nc = await connect(target.url)

        async def api(subject: str, body: dict) -> dict:
            return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=2)).data)

        await api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
        await api("$JS.API.CONSUMER.CREATE.P.c", {"stream_name": "P", "config": {
            "name": "c", "durable_name": "c", "ack_policy": "explicit"}})
        await api("$JS.API.CONSUMER.CREATE.P.push", {"stream_name": "P", "config": {
            "name": "push", "durable_name": "push", "deliver_subject": "pushed", "ack_policy": "explicit"}})
        nxt = "$JS.API.CONSUMER.MSG.NEXT.P.c"
        sub = await nc.subscribe("r.1")
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.push", b"1", reply="r.1")
        assert await _statuses(sub, 0.3) == [("409", "Consumer is push based", None)]
        await nc.publish(nxt, b'{"batch":5,"no_wait":true}', reply="r.1")
        assert await _statuses(sub, 0.3) == [("404", "No Messages", None)]
        # no_wait with expires: waits for the first messages, then ends (404).
        await nc.publish(nxt, b'{"batch":5,"no_wait":true,"expires":2000000000}', reply="r.1")
        await asyncio.sleep(0.2)
        await nc.publish("p.x", b"m1")
        assert await _statuses(sub, 0.5) == [b"m1", ("404", "No Messages", None)]
        # no_wait with fewer messages than asked: what there is, then 404.
        await nc.request("p.x", b"m2", timeout=2)  # (stored before the request: the ack)
        await nc.request("p.x", b"m3", timeout=2)
        await nc.publish(nxt, b'{"batch":5,"no_wait":true}', reply="r.1")
        assert await _statuses(sub, 0.3) == [b"m2", b"m3", ("404", "No Messages", None)]
        # no_wait with expires and nothing coming: the timeout.
        await nc.publish(nxt, b'{"batch":5,"no_wait":true,"expires":300000000}', reply="r.1")
        assert await _statuses(sub, 0.8) == [("408", "Request Timeout", "5")]
        # Requests nobody listens to: never subscribed, unsubscribed, connection closed.
        await nc.publish(nxt, b'{"batch":5,"expires":5000000000}', reply="nobody.here")
        gone = await nc.subscribe("r.2")
        await nc.publish(nxt, b'{"batch":5,"expires":5000000000}', reply="r.2")
        await nc.flush()
        await gone.unsubscribe()
        other = await connect(target.url)
        await other.subscribe("r.3")
        await other.publish(nxt, b'{"batch":5,"expires":5000000000}', reply="r.3")
        await other.flush()
        await other.close()
        await nc.publish(nxt, b'{"batch":3,"expires":2000000000}', reply="r.1")
        await nc.flush()
        await asyncio.sleep(0.1)
        for i in (4, 5, 6):
            await nc.publish("p.x", b"m%d" % i)
        assert await _statuses(sub, 0.5) == [b"m4", b"m5", b"m6"]
        info = await api("$JS.API.CONSUMER.INFO.P.c", {})
        assert (info["num_waiting"], info["num_pending"], info["num_ack_pending"]) == (0, 0, 6)
        # Deleting the stream tells its consumers' waiting requests.
        await nc.publish(nxt, b'{"batch":5,"expires":3000000000}', reply="r.1")
        await nc.flush()
        await asyncio.sleep(0.1)
        await api("$JS.API.STREAM.DELETE.P", {})
        assert await _statuses(sub, 0.5) == [("409", "Consumer Deleted", None)]
        await nc.close()

    run(main())


# -- items 2 and 12: push_bound, the refusals nats-py builds on it, max_bytes counts -----------


def test_subscribe_push_bound(target):
    """SubscribeTest::test_subscribe_push_bound: consumer info says push_bound while a
    subscriber listens, so nats-py refuses a second subscriber (and a queue subscriber)."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="pbound", subjects=["pbound"])
        got: list = []

        async def cb(msg):
            got.append(msg)

        for i in range(10):
            await js.publish("pbound", f"Hello World {i}".encode())
        async def bound(name: str, expected: bool) -> bool:
            """push_bound once it is ``expected`` (nats-server notes interest changes a moment later)."""
            for _ in range(40):
                if bool((await js.consumer_info("pbound", name)).push_bound) == expected:
                    break
                await asyncio.sleep(0.05)
            return bool((await js.consumer_info("pbound", name)).push_bound)

        await js.add_consumer("pbound", durable_name="idle", deliver_subject="nobody.listens")
        assert not (await js.consumer_info("pbound", "idle")).push_bound
        first = await js.subscribe("pbound", cb=cb, durable="singleton")
        assert await bound("singleton", True)
        with pytest.raises(nats.js.errors.Error) as err:
            await js.subscribe("pbound", cb=cb, durable="singleton")
        assert err.value.description == "consumer is already bound to a subscription"
        with pytest.raises(nats.js.errors.Error) as err:
            await js.subscribe("pbound", queue="foo", cb=cb, durable="singleton")
        assert err.value.description == "cannot create queue subscription 'foo' to consumer 'singleton'"
        for _ in range(25):
            if len(got) == 10:
                break
            await asyncio.sleep(0.2)
        assert len(got) == 10
        await first.unsubscribe()
        await nc.flush()
        assert not await bound("singleton", False)
        sub2 = await js.subscribe("pbound", durable="two")
        for i in range(10):
            msg = await sub2.next_msg(timeout=2)
            assert msg.data == f"Hello World {i}".encode()
            assert (msg.metadata.sequence.stream, msg.metadata.sequence.consumer) == (i + 1, i + 1)
        await nc.close()

    run(main())


def test_deliver_group_members_are_picked_from_random_starts(target):
    """Item 12: a push consumer's deliver group (a core queue group on the deliver subject)
    gets each message to one member, picked as nats-server picks it: from a random start
    (client.go processMsgResults), so one member often gets two in a row. Round robin, what
    natserver did, never gives one member two in a row and spreads exactly evenly."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="dgroup", subjects=["dgroup"])
        order: list[int] = []

        def member(index: int):
            async def cb(msg):
                order.append(index)
            return cb

        for index in range(3):
            await js.subscribe("dgroup", "workers", cb=member(index), durable="workers")
        for i in range(300):
            await js.publish("dgroup", b"%d" % i)
        for _ in range(50):
            if len(order) == 300:
                break
            await asyncio.sleep(0.1)
        assert len(order) == 300
        repeats = sum(a == b for a, b in zip(order, order[1:]))
        # A third of the 299 pairs on average (random picks); 0 for round robin.
        assert repeats > 30, (repeats, [order.count(i) for i in range(3)])
        assert all(order.count(i) > 30 for i in range(3))
        await nc.close()

    run(main())


def test_a_mirror_is_promoted_by_removing_its_mirror(target):
    """V210FeaturesTest::test_stream_mirror_removal (nats-server 2.12+): an update without the
    mirror makes the mirror a normal stream (its messages kept, the origin no longer followed,
    subjects of its own allowed); changing the mirror is still refused."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="SOURCE", subjects=["source.>"])
        for i in range(5):
            await js.publish(f"source.{i}", b"m%d" % i)
        await js.add_stream(name="MIRROR", mirror=nats.js.api.StreamSource(name="SOURCE"))
        for _ in range(50):
            if (await js.stream_info("MIRROR")).state.messages == 5:
                break
            await asyncio.sleep(0.1)
        config = (await js.stream_info("MIRROR")).config
        with pytest.raises(nats.js.errors.BadRequestError) as err:
            await js.update_stream(config=config.evolve(
                mirror=nats.js.api.StreamSource(name="SOURCE", filter_subject="source.1")))
        assert (err.value.err_code, err.value.description) == (10055, "stream mirror configuration can not be updated")
        info = await js.update_stream(config=config.evolve(mirror=None, subjects=["promoted.>"]))
        assert (info.config.mirror, info.config.subjects, info.state.messages, info.mirror) == (
            None, ["promoted.>"], 5, None)
        await js.publish("source.9", b"after")  # no longer copied
        ack = await js.publish("promoted.x", b"own")
        assert (ack.stream, ack.seq) == ("MIRROR", 6)
        await asyncio.sleep(0.3)
        info = await js.stream_info("MIRROR")
        assert (info.state.messages, info.state.last_seq) == (6, 6)
        await nc.close()

    run(main())


def test_no_wait_request_held_back_by_max_ack_pending_ends_at_its_heartbeat(target):
    """PullSubscribeTest::test_fetch_heartbeats: with max_ack_pending 5 and 15 messages, a
    no_wait pull of 20 with expires and idle heartbeats gets 5 messages, then, when its first
    heartbeat is due, 404 No Messages (consumer.go's wait timer runs processWaiting as at the
    end of the stream); natserver kept it waiting with heartbeats, so nats-py's next fetch found
    leftovers and asked without expires (400 heartbeat value too large)."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="events", subjects=["events.>"])
        await js.add_consumer("events", durable_name="a", max_waiting=5, ack_wait=30, max_ack_pending=5,
                              filter_subject="events.>")
        for i in range(15):
            await js.publish(f"events.{i}", b"i:%d" % i)
        got: list = []

        async def cb(msg):
            got.append((msg.headers or {}).get("Status") or msg.data.decode())

        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=cb)
        request = {"batch": 20, "idle_heartbeat": 100_000_000, "no_wait": True, "expires": 2_000_000_000}
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.events.a", json.dumps(request).encode(), reply=inbox)
        for _ in range(40):
            if len(got) >= 6:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # (and nothing after the 404: no heartbeats)
        assert got == [f"i:{i}" for i in range(5)] + ["404"]
        await nc.close()

    run(main())


def test_pull_max_bytes_counts(target):
    """A pull request's max_bytes counts subject, ack reply, headers and data of each message
    (consumer.go): what fits, then 409 with the pending counts; or the timeout."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="B", subjects=["b.>"])
        for _ in range(10):
            await js.publish("b.x", b"x" * 100)
        await js.add_consumer("B", durable_name="pb", ack_policy="explicit")
        sub = await nc.subscribe("r.b")
        got = []
        for max_bytes in (150, 250, 400, 1000):
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.B.pb", json.dumps(
                {"batch": 10, "max_bytes": max_bytes, "expires": 300_000_000}).encode(), reply="r.b")
            got.append(await _statuses(sub, 0.6))
        msg = [b"x" * 100]
        assert got == [
            msg + [("409", "Message Size Exceeds MaxBytes", "9")],
            msg + [("409", "Message Size Exceeds MaxBytes", "9")],
            msg * 2 + [("409", "Message Size Exceeds MaxBytes", "8")],
            msg * 6 + [("408", "Request Timeout", "4")],
        ]
        await nc.close()

    run(main())


# -- item 3: num_pending after fetches, acks and an unsubscribe ---------------------------------


def test_pull_subscribe_limits(target):
    """PullSubscribeTest::test_pull_subscribe_limits: consumer two has one message pending
    after a publish, and still after its subscriber leaves and a fetch fails."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="TEST2", subjects=["a1", "a2", "a3", "a4"])
        for i in range(1, 10):
            await js.publish("a1", f"a1:{i}".encode())
        sub = await js.pull_subscribe("a3", "auto", pending_msgs_limit=50, pending_bytes_limit=-1)
        for _ in range(100):
            await js.publish("a3", b"test")
        msgs = await sub.fetch(100, timeout=1)
        for msg in msgs:
            await asyncio.sleep(0)
            await msg.ack()
        assert 50 <= len(msgs) <= 53
        assert sub.pending_msgs == 0 and sub.pending_bytes == 0
        sub = await js.pull_subscribe("a3", "two", pending_msgs_limit=-1, pending_bytes_limit=-1)
        msgs = await sub.fetch(100, timeout=1)
        for msg in msgs:
            await msg.ack()
        assert len(msgs) <= 100
        assert sub.pending_msgs == 0 and sub.pending_bytes == 0
        await js.publish("a3", b"last message")
        info = await sub.consumer_info()
        assert info.num_pending == 1
        assert sub.pending_msgs == 0
        await sub.unsubscribe()
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=1)
        info = await sub.consumer_info()
        assert info.num_pending == 1
        await nc.close()

    run(main())


# -- item 11: consumer replicas on a server that is not clustered --------------------------------


def test_consumer_replicas_refused(target):
    async def main():
        nc = await connect(target.url)
        jsm = nc.jsm()
        await jsm.add_stream(name="S", subjects=["s"])
        for replicas, durable in ((3, None), (2, "d"), (3, "push")):
            with pytest.raises(nats.js.errors.ServerError) as err:
                await jsm.add_consumer("S", durable_name=durable, num_replicas=replicas,
                                       deliver_subject="x" if durable == "push" else None)
            assert (err.value.err_code, err.value.description) == (
                10074, "replicas > 1 not supported in non-clustered mode")
        with pytest.raises(nats.js.errors.BadRequestError) as err:
            await jsm.add_consumer("S", durable_name="neg", num_replicas=-1)
        assert (err.value.err_code, err.value.description) == (10133, "replicas count cannot be negative")
        info = await jsm.add_consumer("S", durable_name="one", num_replicas=1)
        assert info.config.num_replicas == 1
        assert [c.name for c in await jsm.consumers_info("S")] == ["one"]
        await nc.close()

    run(main())


# -- item 13: a KV wildcard delete ---------------------------------------------------------------


def test_kv_wildcard_delete(target):
    """Keys a, a.a, a.b, a.b.c; a.* deleted as clients do it: the keys read through a
    last-per-subject consumer filtered on $KV.<bucket>.a.*, then a delete marker for each.
    Left: 2 keys and 2 tombstones."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="WILD", history=5)
        for key in ("a", "a.a", "a.b", "a.b.c"):
            await kv.put(key, key.encode())
        watcher = await kv.watch("a.*", ignore_deletes=True)
        matched = []
        while (entry := await watcher.updates(timeout=2)) is not None:
            matched.append(entry.key)
        await watcher.stop()
        assert sorted(matched) == ["a.a", "a.b"]
        for key in matched:
            await kv.delete(key)
        assert sorted(await kv.keys()) == ["a", "a.b.c"]
        tombstones = []
        for key in ("a", "a.a", "a.b", "a.b.c"):
            last = (await kv.history(key))[-1]
            if last.operation is not None:
                tombstones.append((key, last.operation))
        assert tombstones == [("a.a", "DEL"), ("a.b", "DEL")]
        assert (await js.stream_info("KV_WILD")).state.messages == 6
        # The root: deliver last_per_subject gives each subject's last message, in stream
        # order, with the pending count falling to 0 on the last (consumer.go lastSeqSkipList).
        watcher = await kv.watchall()
        seen = []
        while (entry := await watcher.updates(timeout=2)) is not None:
            seen.append((entry.key, entry.revision, entry.operation, entry.delta))
        await watcher.stop()
        assert seen == [("a", 1, None, 3), ("a.b.c", 4, None, 2), ("a.a", 5, "DEL", 1), ("a.b", 6, "DEL", 0)]
        await nc.close()

    run(main())


# -- item 10: advisories ---------------------------------------------------------------------------


def _advisory_shape(subject: str, doc: dict) -> tuple:
    """An advisory with what differs between runs replaced by its form."""
    assert re.fullmatch(r"[A-Za-z0-9]{22}", doc.pop("id")), doc
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", doc.pop("timestamp")), doc
    if doc["type"].endswith("api_audit"):
        client, server = doc.pop("client"), doc.pop("server")
        assert client.pop("server") == server and isinstance(client.pop("id"), int)
        assert client.pop("rtt") > 0 and client.pop("start") and client.pop("ver")
        doc["client"] = client
        doc["response"] = json.loads(doc["response"]).get("error") or json.loads(doc["response"])["type"]
    return subject, doc


def test_advisories(target):
    """Stream and consumer created, updated, deleted, and the API audit, as nats-server 2.15.1
    publishes them on $JS.EVENT.ADVISORY.> (field for field, ids and times by form)."""

    async def main():
        nc = await nats.connect(target.url, name="auditor", allow_reconnect=False)
        sub = await nc.subscribe("$JS.EVENT.ADVISORY.>")

        async def api(subject: str, body: dict | None) -> None:
            await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=2)

        await api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        await api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})  # the same: no advisory
        await api("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s", "t"]})
        await api("$JS.API.CONSUMER.CREATE.S.c", {"stream_name": "S", "config": {"name": "c", "durable_name": "c"}})
        await api("$JS.API.CONSUMER.CREATE.S.c", {"stream_name": "S", "config": {
            "name": "c", "durable_name": "c", "description": "x"}})  # an update: no advisory
        await api("$JS.API.CONSUMER.CREATE.S.d", {"stream_name": "S", "config": {"name": "d", "durable_name": "d"}})
        await api("$JS.API.CONSUMER.DELETE.S.c", None)
        await api("$JS.API.STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["s"]})
        await api("$JS.API.STREAM.DELETE.S", None)
        await nc.flush()
        got = []
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except nats.errors.TimeoutError:
                break
            got.append(_advisory_shape(msg.subject, json.loads(msg.data)))
        await nc.close()
        return got

    got = asyncio.run(asyncio.wait_for(main(), 20))
    adv = "$JS.EVENT.ADVISORY."
    client = {"host": "127.0.0.1", "acc": "$G", "name": "auditor", "lang": "python3", "kind": "Client",
              "client_type": "nats"}

    def audit(subject: str, request: dict | None, response) -> tuple:
        doc = {"type": "io.nats.jetstream.advisory.v1.api_audit", "subject": subject}
        if request is not None:
            doc["request"] = json.dumps(request)
        return adv + "API", {**doc, "response": response, "client": client}

    def action(kind: str, what: str, names: str, verb: str) -> tuple:
        doc = {"type": f"io.nats.jetstream.advisory.v1.{kind}_action", "stream": names.split(".")[0]}
        if kind == "consumer":
            doc["consumer"] = names.split(".")[1]
        return f"{adv}{kind.upper()}.{what}.{names}", {**doc, "action": verb}

    create = {"name": "S", "subjects": ["s"]}
    consumer_c = {"stream_name": "S", "config": {"name": "c", "durable_name": "c"}}
    consumer_d = {"stream_name": "S", "config": {"name": "d", "durable_name": "d"}}
    t = "io.nats.jetstream.api.v1."
    # (nats-server sends the action advisories and the audits from two queues: their order
    # against each other varies there, so the lists are compared sorted)
    assert sorted(got, key=json.dumps) == sorted([
        action("stream", "CREATED", "S", "create"),
        audit("$JS.API.STREAM.CREATE.S", create, t + "stream_create_response"),
        audit("$JS.API.STREAM.CREATE.S", create, t + "stream_create_response"),
        action("stream", "UPDATED", "S", "modify"),
        audit("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s", "t"]}, t + "stream_update_response"),
        action("consumer", "CREATED", "S.c", "create"),
        audit("$JS.API.CONSUMER.CREATE.S.c", consumer_c, t + "consumer_create_response"),
        audit("$JS.API.CONSUMER.CREATE.S.c", {"stream_name": "S", "config": {
            "name": "c", "durable_name": "c", "description": "x"}}, t + "consumer_create_response"),
        action("consumer", "CREATED", "S.d", "create"),
        audit("$JS.API.CONSUMER.CREATE.S.d", consumer_d, t + "consumer_create_response"),
        action("consumer", "DELETED", "S.c", "delete"),
        audit("$JS.API.CONSUMER.DELETE.S.c", None, t + "consumer_delete_response"),
        audit("$JS.API.STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["s"]},
              {"code": 400, "err_code": 10065, "description": "subjects overlap with an existing stream"}),
        action("consumer", "DELETED", "S.d", "delete"),
        action("stream", "DELETED", "S", "delete"),
        audit("$JS.API.STREAM.DELETE.S", None, t + "stream_delete_response"),
    ], key=json.dumps)


# -- items 8 and 9: JetStream through account imports ----------------------------------------------

_IMPORTS_CONFIG = """
jetstream { store_dir: "%s" }
accounts {
  JS: { jetstream: enabled, users: [{user: js, password: js}],
        exports: [{service: "$JS.API.>", response_type: stream}, {stream: "deliver.>"},
                  {service: "$JS.ACK.>"}, {service: "$JS.FC.>"}] }
  U: { users: [{user: u, password: u}],
       imports: [{service: {account: JS, subject: "$JS.API.>"}, to: "jsapi.>"},
                 {stream: {account: JS, subject: "deliver.>"}},
                 {service: {account: JS, subject: "$JS.ACK.>"}}, {service: {account: JS, subject: "$JS.FC.>"}}] }
}
"""


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_jetstream_through_imports(kind, tmp_path):
    """An account that reaches JetStream through imports (API as jsapi.>, deliveries under
    deliver.>): KV history (an ordered push consumer created before its subscription: the
    consumer waits for the importer's subscriber), and a pull consumer's messages, acks and
    idle heartbeats (its replies come back through the service import's responses)."""
    if kind != "natserver" and REFERENCE is None:
        pytest.skip("nats-server 2.15.1 not installed")

    async def main(port: int) -> None:
        owner = await nats.connect(f"nats://js:js@127.0.0.1:{port}", allow_reconnect=False)
        user = await nats.connect(f"nats://u:u@127.0.0.1:{port}", inbox_prefix="deliver", allow_reconnect=False)
        kv_owner = await owner.jetstream().create_key_value(bucket="H", history=5)
        for i in range(3):
            await kv_owner.put("k", b"%d" % i)
        js = user.jetstream(prefix="jsapi")
        kv = await js.key_value("H")
        assert [e.value for e in await kv.history("k")] == [b"0", b"1", b"2"]
        await owner.jetstream().add_stream(name="P", subjects=["p"])
        await owner.jetstream().publish("p", b"x")
        sub = await js.pull_subscribe("p", "pd", stream="P")
        msgs = await sub.fetch(1, timeout=2)
        assert [m.data for m in msgs] == [b"x"]
        await msgs[0].ack_sync()
        info = await owner.jetstream().consumer_info("P", "pd")
        assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 1)
        # Idle heartbeats of a waiting pull request reach the importer.
        beats = await user.subscribe("deliver.beats")
        await user.publish("jsapi.CONSUMER.MSG.NEXT.P.pd", b'{"batch":1,"expires":1300000000,"idle_heartbeat":400000000}',
                           reply="deliver.beats")
        statuses = await _statuses(beats, 1.6)
        assert statuses == [("100", "Idle Heartbeat", None)] * 3 + [("408", "Request Timeout", "1")]
        await user.close()
        await owner.close()

    binary = REFERENCE if kind != "natserver" else None
    with running(kind, _IMPORTS_CONFIG % (tmp_path / "store"), tmp_path, binary=binary or "nats-server") as port:
        asyncio.run(asyncio.wait_for(main(port), 20))


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_ordered_consumer_after_restart(kind, tmp_path):
    """Issue 30 item 8: a watcher (nats-py's ordered consumer, as KV watch uses) comes back after
    the server restarts on the same store: its memory consumer is gone, the client misses two
    heartbeats and creates it again from the next sequence, and sees what was put meanwhile."""
    if kind != "natserver" and REFERENCE is None:
        pytest.skip("nats-server 2.15.1 not installed")
    config = 'jetstream { store_dir: "%s" }\n' % (tmp_path / "store")
    binary = REFERENCE or "nats-server"

    async def main() -> None:
        got: list = []
        reconnected = asyncio.Event()

        async def on_reconnect():
            reconnected.set()

        with running(kind, config, tmp_path, binary=binary) as port:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                                    reconnected_cb=on_reconnect)
            js = nc.jetstream()
            await js.add_stream(name="W", subjects=["w.>"])
            await js.publish("w.k", b"1")

            async def seen(msg):
                got.append(msg.data)

            await js.subscribe("w.>", cb=seen, ordered_consumer=True, idle_heartbeat=0.3)
            for _ in range(50):
                if got:
                    break
                await asyncio.sleep(0.05)
            assert got == [b"1"]
        with running(kind, config, tmp_path, binary=binary, port=port):
            await asyncio.wait_for(reconnected.wait(), 10)
            await js.publish("w.k", b"2")
            for _ in range(100):
                if len(got) == 2:
                    break
                await asyncio.sleep(0.05)
            assert got == [b"1", b"2"]
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), 20))


# -- issue #27 item 2: V210FeaturesTest (first_seq, subject transforms, consumer_limits) --------


def test_v210_subject_transforms(target):
    """V210FeaturesTest::test_subject_transforms: a stream's subject_transform from '>', a
    filtered consumer on the transformed subject, a source with two subject_transforms, and
    overlapping ones refused (10147)."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="TRANSFORMS", subjects=["test", "foo"],
                            subject_transform=nats.js.api.SubjectTransform(src=">", dest="transformed.>"))
        for i in range(10):
            await js.publish("test", f"{i}".encode())
        psub = await js.pull_subscribe("test")
        assert (await psub.consumer_info()).num_pending == 0
        with pytest.raises(asyncio.TimeoutError):
            await psub.fetch(1, timeout=0.5)
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.pull_subscribe("transformed.>")
        psub = await js.pull_subscribe("transformed.test", stream="TRANSFORMS")
        assert (await psub.consumer_info()).num_pending == 10
        msgs = await psub.fetch(10, timeout=1)
        assert [(m.subject, m.data) for m in msgs[::5]] == [("transformed.test", b"0"), ("transformed.test", b"5")]
        source = nats.js.api.StreamSource(name="TRANSFORMS", subject_transforms=[
            nats.js.api.SubjectTransform(src="transformed.>", dest="fromtest.transformed.>"),
            nats.js.api.SubjectTransform(src="foo.>", dest="fromtest.foo.>")])
        await js.add_stream(name="SOURCING", sources=[source])
        await js.add_consumer(stream="SOURCING", config=nats.js.api.ConsumerConfig(durable_name="b"))
        psub = await js.pull_subscribe_bind(consumer="b", stream="SOURCING")
        deadline = time.monotonic() + 5
        while (await psub.consumer_info()).num_pending < 10:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        msgs = await psub.fetch(10, timeout=1)
        assert [(m.subject, m.data) for m in msgs[::5]] == [
            ("fromtest.transformed.test", b"0"), ("fromtest.transformed.test", b"5")]
        overlapping = nats.js.api.StreamSource(name="TRANSFORMS2", subject_transforms=[
            nats.js.api.SubjectTransform(src=">", dest="fromtest.transformed.>"),
            nats.js.api.SubjectTransform(src=">", dest="fromtest.foo.>")])
        with pytest.raises(nats.js.errors.BadRequestError) as err:
            await js.add_stream(name="SOURCING", sources=[overlapping])
        assert err.value.err_code == 10147
        await nc.close()

    run(main())


def test_v210_stream_consumer_limits(target):
    """V210FeaturesTest::test_stream_consumer_limits: the limits in stream info (each alone
    too), and a consumer that sets no max_ack_pending takes the stream's."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="CONSUMERLIMITS", subjects=["consumerlimits.test"],
                            consumer_limits=nats.js.api.StreamConsumerLimits(inactive_threshold=3600.0,
                                                                             max_ack_pending=1000))
        limits = (await js.stream_info("CONSUMERLIMITS")).config.consumer_limits
        assert (limits.inactive_threshold, limits.max_ack_pending) == (3600.0, 1000)
        await js.add_consumer("CONSUMERLIMITS", config=nats.js.api.ConsumerConfig(durable_name="consumer1"))
        assert (await js.consumer_info("CONSUMERLIMITS", "consumer1")).config.max_ack_pending == 1000
        await js.add_stream(name="MAXACKONLY", subjects=["consumerlimits.maxack"],
                            consumer_limits=nats.js.api.StreamConsumerLimits(max_ack_pending=500))
        limits = (await js.stream_info("MAXACKONLY")).config.consumer_limits
        assert (limits.inactive_threshold, limits.max_ack_pending) == (None, 500)
        await js.add_stream(name="INACTIVETHRESHOLDONLY", subjects=["consumerlimits.inactive"],
                            consumer_limits=nats.js.api.StreamConsumerLimits(inactive_threshold=7200.0))
        limits = (await js.stream_info("INACTIVETHRESHOLDONLY")).config.consumer_limits
        assert (limits.inactive_threshold, limits.max_ack_pending) == (7200.0, None)
        await nc.close()

    run(main())


def test_v210_stream_first_seq(target):
    """V210FeaturesTest::test_stream_first_seq."""

    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="FIRSTSEQ", subjects=["test"], first_seq=1000)
        assert [(await js.publish("test", b"message %d" % i)).seq for i in (1, 2, 3)] == [1000, 1001, 1002]
        info = await js.stream_info("FIRSTSEQ")
        assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (1000, 1002, 3)
        assert info.config.first_seq == 1000
        msg = await js.get_msg("FIRSTSEQ", seq=1001)
        assert (msg.seq, msg.data) == (1001, b"message 2")
        msg = await js.get_msg("FIRSTSEQ", seq=1000)
        assert (msg.seq, msg.data) == (1000, b"message 1")
        await nc.close()

    run(main())


def test_waiting_pull_requests_take_turns(target):
    """nats-server 2.10+ (consumer.go waitQueue.pop): a waiting pull request that got a message
    goes behind the others, so two requests waiting share what comes one message each in
    turn; natserver used to fill the first request's batch before the second got any."""

    async def main():
        nc = await connect(target.url)

        async def api(subject: str, body: dict) -> dict:
            return json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=2)).data)

        await api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"]})
        await api("$JS.API.CONSUMER.CREATE.T.c", {"stream_name": "T", "config": {
            "name": "c", "durable_name": "c", "ack_policy": "none"}})
        first, second = await nc.subscribe("r.1"), await nc.subscribe("r.2")
        for reply in ("r.1", "r.2"):
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.T.c", b'{"batch":3,"expires":5000000000}', reply=reply)
        await nc.flush()
        await asyncio.sleep(0.2)
        for i in range(1, 5):
            await nc.publish("t.x", b"m%d" % i)
        await nc.flush()
        assert await _statuses(first, 0.5) == [b"m1", b"m3"]
        assert await _statuses(second, 0.2) == [b"m2", b"m4"]
        await nc.close()

    run(main())
