"""Issue 29 item 3: a whole cluster in one process (natserver.testing_cluster).

Written as a user writes them: nats-py on asyncio, each body under a hard timeout. The failover
test must take under a second (the issue).
"""

from __future__ import annotations

import asyncio
import os
import time

import nats
import pytest

from natserver.testing import NatsServer
from natserver.testing_cluster import NatsCluster, attach_leaf

TIMEOUT = 10  # hard limit on one test's I/O
FAST = 3.0  # "under a second", with room for a machine shared by many test runs


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


async def connect(url, **kwargs):
    return await nats.connect(url, allow_reconnect=False, **kwargs)


async def reaches(publisher, subscriber, subject: str, timeout: float = 0.3) -> bool:
    """Whether a message published by ``publisher`` reaches ``subscriber`` within ``timeout``
    (published again every 20 ms: the interest takes a moment to cross a route)."""
    sub = await subscriber.subscribe(subject)
    await subscriber.flush()
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while asyncio.get_running_loop().time() < deadline:
            await publisher.publish(subject, b"?")
            await publisher.flush()
            try:
                await sub.next_msg(timeout=0.02)
                return True
            except nats.errors.TimeoutError:
                continue
        return False
    finally:
        await sub.unsubscribe()


def test_the_nodes_form_a_full_mesh_and_route_messages(nats_cluster):
    assert len(nats_cluster.servers) == 3 and len(nats_cluster.urls) == 3
    names = [node.options.server_name for node in nats_cluster.servers]
    for i in range(3):
        assert nats_cluster.routes(i) == sorted(n for j, n in enumerate(names) if j != i)

    async def main():
        on_0, on_2 = await connect(nats_cluster.urls[0]), await connect(nats_cluster.urls[2])
        assert await reaches(on_0, on_2, "orders.new")
        await on_0.close()
        await on_2.close()

    run(main())
    # Each node is a NatsServer with its recorder: the publishes were seen by node 0.
    assert {m.data for m in nats_cluster.servers[0].messages("orders.new")} == {b"?"}


@pytest.mark.nats_cluster(size=2, max_payload=1024)
def test_the_marker_sets_size_and_options(nats_cluster):
    assert len(nats_cluster.servers) == 2
    assert all(node.options.max_payload == 1024 for node in nats_cluster.servers)


def test_failover_of_a_nats_py_client_across_stop(nats_cluster):
    started = time.monotonic()

    async def main():
        reconnected = asyncio.Event()

        async def on_reconnect():
            reconnected.set()

        nc = await nats.connect(servers=nats_cluster.urls, dont_randomize=True, reconnect_time_wait=0.05,
                                reconnected_cb=on_reconnect)
        assert nc.connected_url.port == nats_cluster.servers[0].port
        sub = await nc.subscribe("jobs")
        nats_cluster.stop(0)
        await asyncio.wait_for(reconnected.wait(), 2)
        (node,) = [s for s in nats_cluster.servers[1:] if s.port == nc.connected_url.port]
        await node.wait_for_subscription_async("jobs")  # the subscription came along
        other = await connect(node.url)
        await other.publish("jobs", b"after failover")
        await other.flush()
        assert (await sub.next_msg(timeout=2)).data == b"after failover"
        await other.close()
        await nc.close()

    run(main())
    assert time.monotonic() - started < FAST


def test_restart_comes_back_on_the_same_ports_and_rejoins(nats_cluster):
    ports = [node.port for node in nats_cluster.servers]
    nats_cluster.stop(1)
    assert not nats_cluster.servers[1].running
    nats_cluster.wait_for_routes()  # the others see it gone
    assert len(nats_cluster.routes(0)) == 1
    nats_cluster.restart(1)
    assert [node.port for node in nats_cluster.servers] == ports
    assert all(len(nats_cluster.routes(i)) == 2 for i in range(3))

    async def main():
        on_1, on_2 = await connect(nats_cluster.urls[1]), await connect(nats_cluster.urls[2])
        assert await reaches(on_2, on_1, "back")
        await on_1.close()
        await on_2.close()

    run(main())


def test_partition_cuts_the_route_until_healed(nats_cluster):
    nats_cluster.partition(1, 2)
    names = [node.options.server_name for node in nats_cluster.servers]
    assert nats_cluster.routes(1) == [names[0]] and nats_cluster.routes(2) == [names[0]]
    assert nats_cluster.routes(0) == [names[1], names[2]]

    async def main():
        on_0, on_1, on_2 = [await connect(url) for url in nats_cluster.urls]
        # A route carries only its own server's messages (no relaying): 1 and 2 are cut off.
        assert not await reaches(on_1, on_2, "split")
        assert await reaches(on_0, on_2, "split")
        nats_cluster.heal(1, 2)
        assert await reaches(on_1, on_2, "split", timeout=2)
        for nc in (on_0, on_1, on_2):
            await nc.close()

    run(main())
    assert nats_cluster.routes(1) == [names[0], names[2]]


def test_lame_duck_on_one_node_moves_its_clients(nats_cluster):
    async def main():
        entered, reconnected = asyncio.Event(), asyncio.Event()

        async def on_lame_duck():
            entered.set()

        async def on_reconnect():
            reconnected.set()

        nc = await nats.connect(servers=nats_cluster.urls, dont_randomize=True, reconnect_time_wait=0.05,
                                lame_duck_mode_cb=on_lame_duck, reconnected_cb=on_reconnect)
        nats_cluster.lame_duck(0, duration=0.3, grace_period=0.05)
        await asyncio.wait_for(entered.wait(), 2)
        await asyncio.wait_for(reconnected.wait(), 3)
        assert nc.connected_url.port != nats_cluster.servers[0].port
        await nc.close()

    run(main())
    deadline = time.monotonic() + TIMEOUT
    while nats_cluster.servers[0].running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not nats_cluster.servers[0].running


def test_a_leaf_node_of_the_cluster(nats_cluster):
    leaf = nats_cluster.add_leaf(node=1)

    async def main():
        on_leaf, on_2 = await connect(leaf.url), await connect(nats_cluster.urls[2])
        assert await reaches(on_leaf, on_2, "from.leaf", timeout=2)
        assert await reaches(on_2, on_leaf, "to.leaf", timeout=2)
        await on_leaf.close()
        await on_2.close()

    run(main())


def test_a_leaf_node_of_one_server():
    with NatsServer(leafnode_port=-1) as hub:
        leaf = attach_leaf(hub)
        try:
            async def main():
                on_leaf, on_hub = await connect(leaf.url), await connect(hub.url)
                assert await reaches(on_hub, on_leaf, "down", timeout=2)
                await on_leaf.close()
                await on_hub.close()

            run(main())
        finally:
            leaf.stop()
    with NatsServer() as plain, pytest.raises(ValueError, match="leafnode_port=-1"):
        attach_leaf(plain)


def test_jetstream_in_a_cluster_gives_each_node_its_own_store():
    """NatsCluster(jetstream=True) (issue #32, R1 so far: tests/jetstream/cluster): every node
    runs JetStream on a store directory of its own, removed when the cluster stops."""
    with NatsCluster(size=2, jetstream=True) as cluster:
        stores = [node.options.store_dir for node in cluster.servers]
        assert all(node.options.jetstream for node in cluster.servers)
        assert len(set(stores)) == 2 and all(os.path.isdir(path) for path in stores)
    assert not any(os.path.exists(path) for path in stores)


def test_advance_moves_every_node():
    with NatsCluster(size=2, clock="manual") as cluster:
        before = [node.now() for node in cluster.servers]
        cluster.advance(45)
        assert [node.now() for node in cluster.servers] == pytest.approx([t + 45 for t in before], abs=1e-6)


def test_a_partition_outlives_a_restart(nats_cluster):
    names = [node.options.server_name for node in nats_cluster.servers]
    nats_cluster.partition(0, 2)
    nats_cluster.restart(2)
    assert nats_cluster.routes(2) == [names[1]] and nats_cluster.routes(0) == [names[1]]
    nats_cluster.heal(0, 2)
    assert nats_cluster.routes(2) == [names[0], names[1]]


def test_stopping_the_cluster_leaves_nothing_behind():
    import threading

    from tests.testing.test_testing_api import port_is_free

    before = set(threading.enumerate())
    with NatsCluster(size=3) as cluster:
        cluster.add_leaf()
        ports = [p for node in [*cluster.servers, *cluster.leaves]
                 for p in (node.options.port, node.options.cluster_port, node.options.leafnode_port) if p > 0]
    assert [t.name for t in threading.enumerate() if t not in before and t.name.startswith("natserver")] == []
    assert all(port_is_free(port) for port in ports)
