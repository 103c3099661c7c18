"""Key-Value and object store buckets (R1) in a JetStream cluster of three in-process
natservers, used through nats-py's own KV and object store APIs on different servers (issue
#32, "everything on top keeps working in a cluster"): a bucket created through one server,
written through another, read, watched and listed through the third. Real clocks, bounded
polls, a hard timeout (test_cluster's helpers)."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import KeyValueConfig, ObjectStoreConfig

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, cluster_options, connect, meta_leader, run, until

OBJECT_SIZE = 300_000  # bytes: a few of nats-py's 128 KiB chunks


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def test_a_kv_bucket_written_and_watched_through_different_servers(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            await until(lambda: meta_leader(sys_nc), "a meta leader every server agrees on")
            js = [nc.jetstream(timeout=REQUEST_TIMEOUT) for nc in ncs]
            await js[0].create_key_value(KeyValueConfig(bucket="CFG", history=5))
            kvs = [await j.key_value("CFG") for j in js]
            watcher = await kvs[2].watchall()
            initial = await watcher.updates(timeout=REQUEST_TIMEOUT)
            assert initial is None  # (nothing stored yet: the end of the initial values)

            async def put(kv, key, value):
                async def attempt():
                    try:
                        return await kv.put(key, value)
                    except nats.js.errors.NoStreamResponseError:
                        return None  # (the bucket's interest still on its way to this server)
                return await until(attempt, f"{key} put")

            revisions = [await put(kvs[1], "a", b"1"), await put(kvs[1], "a", b"2"), await put(kvs[0], "b", b"x")]
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
        finally:
            for nc in [*ncs, sys_nc]:
                await nc.close()

    run(main)


def test_an_object_put_through_one_server_is_read_through_another(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            await until(lambda: meta_leader(sys_nc), "a meta leader every server agrees on")
            js = [nc.jetstream(timeout=REQUEST_TIMEOUT) for nc in ncs]
            await js[1].create_object_store("FILES", ObjectStoreConfig(description="cluster"))
            stores = [await j.object_store("FILES") for j in js]
            data = bytes(i % 251 for i in range(OBJECT_SIZE))

            async def put():
                try:
                    return await stores[0].put("blob", data)
                except nats.js.errors.NoStreamResponseError:
                    return None
            info = await until(put, "the object put")
            assert info.size == OBJECT_SIZE and info.chunks > 1
            got = await stores[2].get("blob")
            assert got.data == data and got.info.digest == info.digest
            names = [o.name for o in await stores[1].list()]
            assert names == ["blob"]
            await stores[2].delete("blob")
            with pytest.raises(nats.js.errors.ObjectNotFoundError):
                await stores[0].get("blob")
        finally:
            for nc in [*ncs, sys_nc]:
                await nc.close()

    run(main)

