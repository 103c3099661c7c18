"""Push consumers through nats-py's js.subscribe (plain, durable, queue, ordered) and
Key-Value buckets built on them, on natserver and, when installed, nats-server -js."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError

from tests.jetstream.test_jetstream import connect, run, target  # noqa: F401 (fixture)


async def _collect(sub, n: int, timeout: float = 3.0) -> list:
    out = []
    for _ in range(n):
        out.append(await sub.next_msg(timeout=timeout))
    return out


def test_push_subscribe_ack_and_policies(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="Q", subjects=["q.>"])
        for i in range(4):
            await js.publish(f"q.{i % 2}", b"m%d" % i)
        sub = await js.subscribe("q.>", durable="pushd")
        msgs = await _collect(sub, 4)
        assert [m.data for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
        assert [m.subject for m in msgs] == ["q.0", "q.1", "q.0", "q.1"]
        for m in msgs:
            await m.ack()
        await js.publish("q.1", b"later")
        assert (await sub.next_msg(timeout=3)).data == b"later"
        last = await js.subscribe("q.0", config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST))
        assert (await last.next_msg(timeout=3)).data == b"m2"
        new = await js.subscribe("q.>", deliver_policy=DeliverPolicy.NEW)
        await js.publish("q.0", b"fresh")
        assert (await new.next_msg(timeout=3)).data == b"fresh"
        info = await js.consumer_info("Q", "pushd")
        assert info.delivered.stream_seq == 6  # "fresh" too
        await nc.close()

    run(main())


def test_queue_and_ordered_consumers(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="W", subjects=["w"])
        got: list = []

        async def handler(msg):
            got.append(msg.data)
            await msg.ack()

        await js.subscribe("w", queue="workers", cb=handler)
        await js.subscribe("w", queue="workers", cb=handler)
        for i in range(10):
            await js.publish("w", b"%d" % i)
        ordered = await js.subscribe("w", ordered_consumer=True)
        seen = [m.data for m in await _collect(ordered, 10)]
        assert seen == [b"%d" % i for i in range(10)]
        for _ in range(100):
            if len(got) == 10:
                break
            await asyncio.sleep(0.05)
        assert sorted(got) == sorted(b"%d" % i for i in range(10))  # each once
        await nc.close()

    run(main())


def test_key_value(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="cfg", history=3)
        rev = await kv.put("a", b"1")
        assert rev == 1
        assert (await kv.get("a")).value == b"1"
        rev = await kv.update("a", b"2", last=rev)
        assert rev == 2
        await kv.put("b", b"x")
        assert sorted(await kv.keys()) == ["a", "b"]
        history = await kv.history("a")
        assert [e.value for e in history] == [b"1", b"2"]
        await kv.delete("b")
        with pytest.raises(KeyNotFoundError):
            await kv.get("b")
        watcher = await kv.watchall()
        first = await watcher.updates(timeout=3)
        assert first.key == "a" and first.value == b"2"
        await kv.put("c", b"3")
        seen = None
        for _ in range(5):
            entry = await watcher.updates(timeout=3)
            if entry is not None and entry.key == "c":
                seen = entry
                break
        assert seen is not None and seen.value == b"3"
        await watcher.stop()
        await nc.close()

    run(main())


def test_object_store(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        obs = await js.create_object_store("files")
        blob = bytes(range(256)) * (3 * 4096 + 7)  # 3 MiB and a bit
        info = await obs.put("big", blob)
        assert info.size == len(blob)
        got = await obs.get("big")
        assert got.data == blob
        await obs.put("small", b"hello")
        assert sorted(i.name for i in await obs.list()) == ["big", "small"]  # nats-py has no links API
        await obs.delete("small")
        assert sorted(i.name for i in await obs.list() if not i.deleted) == ["big"]
        await nc.close()

    run(main())


def test_flow_control_requests_answered(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f"])
        chunk = b"z" * 100_000
        for _ in range(30):  # 3 MB: several flow control rounds
            await js.publish("f", chunk)
        sub = await js.subscribe("f", ordered_consumer=True)
        total = 0
        for _ in range(30):
            total += len((await sub.next_msg(timeout=5)).data)
        assert total == 30 * len(chunk)
        await nc.close()

    run(main())


def test_key_value_purge_ttl_and_update_conflict(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="ttl", history=5, ttl=0.5)
        await kv.put("k", b"1")
        await kv.put("k", b"2")
        with pytest.raises(Exception) as exc:  # nats-py raises KeyWrongLastSequenceError
            await kv.update("k", b"3", last=1)
        assert "wrong last sequence" in str(exc.value)
        await kv.purge("k")
        with pytest.raises(KeyNotFoundError):
            await kv.get("k")
        assert len(await kv.history("k")) == 1  # the purge marker alone
        await kv.put("gone", b"soon")
        await asyncio.sleep(1.0)
        with pytest.raises(KeyNotFoundError):
            await kv.get("gone")
        await nc.close()

    run(main())
