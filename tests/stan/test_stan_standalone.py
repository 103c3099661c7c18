"""nats-streaming-server's start-up check (server.go ensureRunningStandAlone): a streaming server
that finds another one answering its cluster ID's discover subject does not start, so two
natservers of one NATS cluster never serve the same channels apart. Nobody answering costs no
time: natserver's router knows at once that nobody took the request (no responders)."""

from __future__ import annotations

import pytest
import trio

import natserver
from natserver.stan import StanEngine, StanOptions
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
        while not b.cluster.route_for(a.server_id, b"$G").interest:  # a's discover subscription
            await trio.sleep(0.02)
    with pytest.raises(BaseException) as excinfo:  # noqa: PT011 - trio wraps it in a group
        await nursery.start(StanEngine(b, StanOptions()).run)
    assert _raised(excinfo) == DISCOVERED
