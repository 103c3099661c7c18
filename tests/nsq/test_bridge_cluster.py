"""The NSQ <-> NATS bridge on two natservers of a NATS cluster, each its own nsqd (as nsqd
instances are): a message published to one nsqd stays in that nsqd's topic (its NATS copy is
not taken into the other's), and a NATS message enters one nsqd only, the publisher's server's."""

from __future__ import annotations

import trio

from tests.cluster.helpers import connect, route_url, start_node, wait_routes
from tests.nsq.helpers import http_request, nsq_options

STEP = 10


def _depth(server, topic: str) -> int:
    found = server.nsq.engine.topics.get(topic)
    return found.depth if found is not None else 0


async def _until(predicate, what: str) -> None:
    with trio.fail_after(STEP):
        while not predicate():
            await trio.sleep(0.02)


async def test_two_clustered_nsqds_bridge_without_copies(nursery, tmp_path):
    a = await start_node(nursery, nsq=nsq_options(tmp_path / "a", bridge=True))
    b = await start_node(nursery, routes=[route_url(a)], nsq=nsq_options(tmp_path / "b", bridge=True))
    await wait_routes([a, b], 1)
    watcher = await connect(b.port)  # a plain NATS subscriber on the other server
    await watcher.send(b"SUB nsq.t 1\r\n")
    await watcher.ping()
    with trio.fail_after(STEP):
        while not a.cluster.has_interest(a.internal_client, b"nsq.t"):
            await trio.sleep(0.02)

    status, _, _ = await http_request(a.nsq.http_port, "POST", "/pub?topic=t", b"from nsq on a")
    assert status == 200
    assert await watcher.read_line() == b"MSG nsq.t 1 13\r\n"  # NATS subscribers anywhere get it
    await trio.sleep(0.3)  # (what would have crossed to b's bridge has crossed)
    assert (_depth(a, "t"), _depth(b, "t")) == (1, 0)

    publisher = await connect(b.port)
    for i in range(5):
        await publisher.send(b"PUB nsq.t 4\r\nnats\r\n")
    await publisher.ping()
    await _until(lambda: _depth(a, "t") + _depth(b, "t") >= 6, "the NATS messages bridged")
    await trio.sleep(0.3)
    assert (_depth(a, "t"), _depth(b, "t")) == (1, 5)  # once each, into the publisher's server's nsqd
