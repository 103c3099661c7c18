"""Followers of replicated streams in a cluster of three in-process natservers (issue #32,
nats-server 2.15.1's behaviour): direct gets answered by every current replica in the ``_sys_``
queue group (stream.go subscribeToDirect), so a KV get is answered by the client's own server's
follower and goes on with the leader's server down; a mirror with mirror_direct joins its
origin's group; a direct get no stream answers gets no responders. A follower whose store is
out of line with the group's entries (a last sequence mismatch) is reset and caught up
(jetstream_cluster.go resetClusteredState). A catch-up whose first requests are lost asks again
until it has every message (processSnapshot's retries, the snapshot replayed after each three).
"""

from __future__ import annotations

import nats
import pytest

from natserver.jetstream import replica as replica_module
from natserver.jetstream.replication.group_codec import StreamMsg
from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, cluster_options, until
from tests.jetstream.cluster.test_r3_streams import (
    CREATE_TIMEOUT,
    R3,
    create_r3,
    publish,
    run,
    same_everywhere,
    stream_on,
    wait_leader,
)


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def direct_of(cluster: NatsCluster, i: int):
    """Node i's direct-get subscriptions (direct_subs.DirectSubscriptions) and its account's name."""
    js = cluster.servers[i].server.jetstream
    return js.cluster.direct, js.account_name or ""


def serving(cluster: NatsCluster, i: int, stream: str) -> tuple:
    node = cluster.servers[i]
    if not node.running or node.server is None or node.server.jetstream is None:
        return ()
    direct, account = direct_of(cluster, i)
    return direct.serving(account, stream)


async def bucket(nc, name: str, **options):
    async def create():
        try:
            return await nc.jetstream(timeout=CREATE_TIMEOUT).create_key_value(bucket=name, **options)
        except nats.errors.TimeoutError:
            return None
    return await until(create, f"the bucket {name} created")


async def put(kv, key: str, value: bytes) -> int:
    async def attempt():
        try:
            return await kv.put(key, value)
        except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
            return None
    return await until(attempt, f"{key} put")


def test_every_current_replica_answers_direct_gets_and_the_leaders_loss_does_not_stop_them(cluster):
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            kv = await bucket(ncs[0], "B", history=2, replicas=3, direct=True)
            lead = await wait_leader(cluster, "KV_B")
            assert await put(kv, "k", b"v1") == 1
            await same_everywhere(cluster, [0, 1, 2], "KV_B")

            async def all_serving():
                return all(serving(cluster, i, "KV_B") == ("KV_B",) for i in range(3))
            await until(all_serving, "every replica in the direct gets' queue group")

            # Each client's get is taken by its own server's replica (a local queue member
            # first): the followers answer theirs.
            kvs = [await nc.jetstream().key_value("B") for nc in ncs]
            for i in range(3):
                direct, account = direct_of(cluster, i)
                before = direct.answered(account, "KV_B")
                entry = await kvs[i].get("k")
                assert entry.value == b"v1" and entry.revision == 1
                assert direct.answered(account, "KV_B") == before + 1, f"node {i} did not answer its client's get"

            # The leader's node down: the others answer at once, before and after an election.
            cluster.stop(lead)
            others = [i for i in range(3) if i != lead]
            for i in others:
                entry = await kvs[i].get("k")
                assert entry.value == b"v1"
            await wait_leader(cluster, "KV_B", other_than=lead)
            assert await put(kvs[others[0]], "k", b"v2") == 2

            async def latest():
                entry = await kvs[others[1]].get("k")
                return entry.revision == 2 and entry.value == b"v2"
            await until(latest, "the new value read through the other follower")

    run(main)


def test_a_mirror_with_mirror_direct_answers_its_origins_direct_gets_and_none_gives_no_responders(cluster):
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            origin = {"name": "O", "subjects": ["o.>"], "num_replicas": 1, "allow_direct": True}
            mirror = {"name": "M", "num_replicas": 1, "mirror": {"name": "O"}, "mirror_direct": True}
            for config in (origin, mirror):
                created = await api(ncs[0], f"$JS.API.STREAM.CREATE.{config['name']}", config, CREATE_TIMEOUT)
                assert "error" not in created, created
            await ncs[1].jetstream().publish("o.a", b"x", timeout=REQUEST_TIMEOUT)

            async def both():
                held = {serving(cluster, i, name): i for i in range(3) for name in ("O", "M")}
                return ("O",) in held and ("O",) in held and len([1 for i in range(3) for n in ("O", "M")
                                                                 if serving(cluster, i, n)]) == 2 and held
            held = await until(both, "the origin's and the mirror's direct subscriptions")
            assert any(serving(cluster, i, "M") == ("O",) for i in range(3)), held

            async def mirrored():
                return bool(stream_on(cluster, i_m, "M").store.msgs)
            i_m = next(i for i in range(3) if serving(cluster, i, "M"))
            await until(mirrored, "the mirror has the message")

            # Origin and mirror answer in one group: every get is answered, by one of them.
            for _ in range(6):
                msg = await ncs[2].request("$JS.API.DIRECT.GET.O.o.a", b"", timeout=REQUEST_TIMEOUT)
                assert msg.data == b"x" and msg.headers["Nats-Stream"] in ("O", "M"), msg.headers

            with pytest.raises(nats.errors.NoRespondersError):
                await ncs[2].request("$JS.API.DIRECT.GET.NONE.x", b"", timeout=REQUEST_TIMEOUT)

    run(main)


def test_a_follower_out_of_line_with_the_entries_is_reset_and_caught_up(cluster):
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            await create_r3(ncs[0], R3)
            lead = await wait_leader(cluster)
            for i in range(5):
                await publish(ncs[0], f"r3.{i}", b"m%d" % i)
            await same_everywhere(cluster, [0, 1, 2])
            follower = (lead + 1) % 3
            js_cluster = cluster.servers[follower].server.jetstream.cluster
            old = stream_on(cluster, follower).replica
            # The follower's store loses a message's write (as a torn write would): the next
            # entry's last sequence is past its store's.
            real, lost = old.applier.apply_op, []

            def lose_one(op):
                if not lost and isinstance(op, StreamMsg):
                    lost.append(op)
                    return
                real(op)
            old.applier.apply_op = lose_one
            for i in range(5, 10):
                await publish(ncs[0], f"r3.{i}", b"m%d" % i)

            async def reset():
                replica = stream_on(cluster, follower).replica
                return js_cluster.replicas_reset == 1 and replica is not None and replica is not old
            await until(reset, "the follower's replica reset")
            assert old.mismatches == 1 and old.stopped and len(lost) == 1
            found = await same_everywhere(cluster, [0, 1, 2])
            assert [data for _, _, data in found] == [b"m%d" % i for i in range(10)]
            await publish(ncs[0], "r3.x", b"after")
            found = await same_everywhere(cluster, [0, 1, 2])
            assert len(found) == 11 and js_cluster.replicas_reset == 1

    run(main)


CATCHUP_START = 0.5  # (replica.CATCHUP_START, 5 s, shortened: the lost requests' waits)
LOST_REQUESTS = 4  # more than processSnapshot's maxRetries (3): natserver used to skip then
# seconds for that catch-up: the lost requests' waits (at least CATCHUP_MIN_RETRY_WAIT, 2 s, apart)
# and a restart, on a loaded machine
CATCH_UP_STEP = 90.0


def test_a_catch_up_whose_requests_are_lost_asks_again_and_skips_nothing(cluster, monkeypatch):
    monkeypatch.setattr(replica_module, "COMPACT_ENTRIES", 8)  # (a snapshot every 8 entries)
    monkeypatch.setattr(replica_module, "CATCHUP_START", CATCHUP_START)

    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            await create_r3(ncs[0], R3)
            lead = await wait_leader(cluster)
            follower, client = (lead + 1) % 3, (lead + 2) % 3
            await publish(ncs[client], "r3.a", b"before")
            await same_everywhere(cluster, [0, 1, 2])
            cluster.stop(follower)
            lead = await wait_leader(cluster)
            for n in range(30):
                await publish(ncs[client], f"r3.{n % 3}", b"while down %d" % n)
            assert stream_on(cluster, lead).replica.group.node.base_index > 2  # (compacted past the follower)
            # The follower's first catch-up requests ($JSC.SYNC) are lost on its server.
            lost = cluster.servers[follower].drop("$JSC.SYNC.>", count=LOST_REQUESTS)
            cluster.restart(follower)
            found = await same_everywhere(cluster, [0, 1, 2], step=CATCH_UP_STEP)
            assert [data for _, _, data in found] == [b"before"] + [b"while down %d" % n for n in range(30)]
            replica = stream_on(cluster, follower).replica
            assert lost.hits == LOST_REQUESTS and replica.catchup_retries >= LOST_REQUESTS and replica.catchups == 1
            ack = await publish(ncs[client], "r3.z", b"after")
            assert ack.seq == 32
            await same_everywhere(cluster, [0, 1, 2])

    run(main)
