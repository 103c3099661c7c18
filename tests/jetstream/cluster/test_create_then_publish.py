"""A client that publishes as soon as an R3 stream's create is answered finds the stream, from
any server (issue #32; client test suites do exactly this). The answer travels on the system
account's route and the new leader's interest on the stream account's: the leader answers a
moment after subscribing (replica.CREATE_ANSWER_DELAY); without that, about 1 publish in 15
got no responders. Three in-process natservers, real clocks, a hard timeout."""

from __future__ import annotations

from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, until
from tests.jetstream.cluster.test_r3_consumers_more import cluster, run  # noqa: F401 (cluster: a fixture)

STREAMS = 30


def test_a_publish_right_after_an_r3_streams_create_finds_it_from_every_server(cluster):  # noqa: F811
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            async def first():
                answer = await api(ncs[0], "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "num_replicas": 3})
                return "error" not in answer

            await until(first, "a first R3 stream created")
            missed = []
            for i in range(STREAMS):
                nc = ncs[i % 3]
                created = await api(nc, f"$JS.API.STREAM.CREATE.S{i}",
                                    {"name": f"S{i}", "subjects": [f"s{i}.>"], "num_replicas": 3})
                assert "error" not in created, created
                try:
                    await nc.jetstream().publish(f"s{i}.x", b"x", timeout=REQUEST_TIMEOUT)
                except Exception as exc:  # noqa: BLE001 - counted: the test's point
                    missed.append((i, repr(exc)))
            assert not missed, missed

    run(main)
