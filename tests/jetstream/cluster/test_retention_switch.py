"""An R3 limits stream with two R3 durables switched to interest retention by STREAM.UPDATE
(2.10+ allows limits <-> interest): what both consumers acked goes from every replica (the
leader proposes the removals, as a new leader's checkInterestState does), the rest stays; an
ack then removes. Three in-process natservers, real clocks, bounded polls, a hard timeout."""

from __future__ import annotations

from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api
from tests.jetstream.cluster.test_r3_consumers_more import (  # noqa: F401 (cluster: a fixture)
    cluster,
    durable,
    r3_stream,
    run,
    same_everywhere,
)


def test_an_r3_stream_switched_to_interest_drops_what_every_consumer_acked(cluster):  # noqa: F811
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            nc = ncs[0]
            await r3_stream(nc, {"name": "L", "subjects": ["l.>"]}, 5)
            for name in ("A", "B"):
                await durable(nc, "L", {"durable_name": name, "ack_policy": "explicit"})
            js = nc.jetstream()
            for name, count in (("A", 3), ("B", 2)):
                sub = await js.pull_subscribe_bind(name, stream="L")
                for m in await sub.fetch(count, timeout=REQUEST_TIMEOUT):
                    await m.ack_sync(timeout=REQUEST_TIMEOUT)
            await same_everywhere(cluster, "L", range(3), (1, 2, 3, 4, 5))  # (limits)

            config = (await api(nc, "$JS.API.STREAM.INFO.L"))["config"]
            updated = await api(nc, "$JS.API.STREAM.UPDATE.L", {**config, "retention": "interest"})
            assert updated["config"]["retention"] == "interest", updated
            await same_everywhere(cluster, "L", range(3), (3, 4, 5))
            b = await js.pull_subscribe_bind("B", stream="L")
            for m in await b.fetch(1, timeout=REQUEST_TIMEOUT):
                await m.ack_sync(timeout=REQUEST_TIMEOUT)
            await same_everywhere(cluster, "L", range(3), (4, 5))

    run(main)
