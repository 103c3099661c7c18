"""Key-Value and object store buckets (R1) in a JetStream cluster of three in-process
natservers, used through nats-py's own KV and object store APIs on different servers (issue
#32, "everything on top keeps working in a cluster"): a bucket created through one server,
written through another, read, watched and listed through the third. Real clocks, bounded
polls, a hard timeout (test_cluster's helpers)."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import KeyValueConfig, ObjectStoreConfig

from tests.jetstream.cluster.clients import clients, retried
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, run

OBJECT_SIZE = 300_000  # bytes: a few of nats-py's 128 KiB chunks


def test_a_kv_bucket_written_and_watched_through_different_servers(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            js = [nc.jetstream(timeout=REQUEST_TIMEOUT) for nc in ncs]
            await js[0].create_key_value(KeyValueConfig(bucket="CFG", history=5))
            kvs = [await j.key_value("CFG") for j in js]
            watcher = await kvs[2].watchall()
            initial = await watcher.updates(timeout=REQUEST_TIMEOUT)
            assert initial is None  # (nothing stored yet: the end of the initial values)

            revisions = [await retried(lambda: kvs[1].put("a", b"1"), "a put"),
                         await retried(lambda: kvs[1].put("a", b"2"), "a put"),
                         await retried(lambda: kvs[0].put("b", b"x"), "b put")]
            assert revisions == [1, 2, 3]
            entry = await kvs[2].get("a")
            assert (entry.value, entry.revision) == (b"2", 2)
            history = await kvs[2].history("a")
            assert [e.value for e in history] == [b"1", b"2"]
            assert sorted(await kvs[0].keys()) == ["a", "b"]
            seen = []
            while len(seen) < 3:
                update = await watcher.updates(timeout=REQUEST_TIMEOUT)
                if update is not None:
                    seen.append((update.key, update.value, update.revision))
            assert seen == [("a", b"1", 1), ("a", b"2", 2), ("b", b"x", 3)]
            await kvs[1].delete("b")
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await kvs[2].get("b")
            status = await kvs[0].status()
            assert status.values == 4  # (two values of a, b's value and its delete marker)
            await watcher.stop()

    run(main)


def test_an_object_put_through_one_server_is_read_through_another(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            js = [nc.jetstream(timeout=REQUEST_TIMEOUT) for nc in ncs]
            await js[1].create_object_store("FILES", ObjectStoreConfig(description="cluster"))
            stores = [await j.object_store("FILES") for j in js]
            data = bytes(i % 251 for i in range(OBJECT_SIZE))

            info = await retried(lambda: stores[0].put("blob", data), "the object put")
            assert info.size == OBJECT_SIZE and info.chunks > 1
            got = await stores[2].get("blob")
            assert got.data == data and got.info.digest == info.digest
            names = [o.name for o in await stores[1].list()]
            assert names == ["blob"]
            await stores[2].delete("blob")
            with pytest.raises(nats.js.errors.ObjectNotFoundError):
                await stores[0].get("blob")

    run(main)

