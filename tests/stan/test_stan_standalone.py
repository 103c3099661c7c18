"""nats-streaming-server's start-up check (server.go ensureRunningStandAlone): a streaming server
that finds another one answering its cluster ID's discover subject does not start, so two
natservers of one NATS cluster never serve the same channels apart. Nobody answering costs no
time: natserver's router knows at once that nobody took the request (no responders)."""

from __future__ import annotations

import asyncio

import nats
import pytest
import trio

import natserver
from natserver.stan import StanEngine, StanOptions
from natserver.stan.client import StanError, connect
from natserver.testing_cluster import NatsCluster
from tests.cluster.helpers import route_url, start_node, wait_routes
from tests.conftest import make_options
from tests.stan.test_stan_engine import FakeClient

DISCOVERED = 'streaming: discovered another streaming server with cluster ID "test-cluster"'


def _raised(excinfo) -> str:
    error = excinfo.value
    while getattr(error, "exceptions", None):  # (an exception group, on 3.10 too)
        error = error.exceptions[0]
    return str(error)


async def test_a_lone_streaming_server_starts_without_waiting(autojump_clock, nursery):
    started = trio.current_time()
    server = await nursery.start(natserver.serve, make_options(stan=StanOptions()))
    assert trio.current_time() - started < 0.25  # (no 250 ms wait for an answer nobody gives)
    assert server.stan.running


async def test_a_second_engine_for_the_same_cluster_id_refuses_to_start(autojump_clock, nursery):
    server = await nursery.start(natserver.serve, make_options(stan=StanOptions()))
    client = FakeClient(server, "c1")
    client.connect()
    with pytest.raises(BaseException) as excinfo:  # noqa: PT011 - trio wraps it in a group
        await nursery.start(StanEngine(server, StanOptions()).run)
    assert _raised(excinfo) == DISCOVERED
    # the first one still serves, its clients as they were: the check's connect was closed
    await trio.sleep(1)
    assert set(server.stan.clients) == {"c1"}
    other = await nursery.start(StanEngine(server, StanOptions(cluster_id="other-cluster")).run)
    assert other.running  # another cluster ID is another streaming server


async def test_two_nodes_of_a_nats_cluster_do_not_both_serve_one_cluster_id(nursery):
    a = await start_node(nursery, stan=StanOptions())
    b = await start_node(nursery, routes=[route_url(a)])
    await wait_routes([a, b], 1)
    with trio.fail_after(10):
        # a's discover subscription; (no route yet while a duplicate route is replaced, or the
        # account's pooled connection is still being made)
        while (route := b.cluster.route_for(a.server_id, b"$G")) is None or not route.interest:
            await trio.sleep(0.02)
    with pytest.raises(BaseException) as excinfo:  # noqa: PT011 - trio wraps it in a group
        await nursery.start(StanEngine(b, StanOptions()).run)
    assert _raised(excinfo) == DISCOVERED


def test_on_a_jetstream_cluster_channels_stay_out_of_jetstream(tmp_path):
    """A JetStream cluster places streams through its meta group: channels made by one node's
    streaming server are kept in the streaming store instead, and served across the routes."""
    cluster = NatsCluster(3, jetstream=True)
    node = cluster.servers[0]
    node.options = node.options.copy(stan=StanOptions(store="file", dir=str(tmp_path / "stan")))
    with cluster:
        async def through_another_node() -> list[bytes]:
            nc = await nats.connect(cluster.servers[1].url)
            try:
                for _ in range(50):  # until node 0's subscriptions reached node 1 over the routes
                    try:
                        sc = await connect(nc, "test-cluster", "c1")
                        break
                    except StanError:
                        await asyncio.sleep(0.1)
                for i in range(3):
                    await sc.publish("orders", b"order %d" % i)
                got: list[bytes] = []
                done = asyncio.Event()

                async def handler(msg) -> None:
                    got.append(msg.data)
                    if len(got) == 3:
                        done.set()

                await sc.subscribe("orders", handler, start="first")
                await asyncio.wait_for(done.wait(), 10)
                await sc.close()
                return got
            finally:
                await nc.close()

        assert asyncio.run(asyncio.wait_for(through_another_node(), 30)) == [b"order 0", b"order 1", b"order 2"]
        engine = node.server.stan
        assert engine.store.jetstream is None and engine.store.jetstream_set_aside
        assert not any(name.startswith("STAN_") for name in node.server.jetstream.streams)
        assert (tmp_path / "stan" / "channels").is_dir()
