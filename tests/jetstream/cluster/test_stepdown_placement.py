"""A step-down request's ``placement`` (2.11+, jetstream_api.go getStepDownPreferredPlacement):
``preferred`` names the server to hand over to; the leader itself or a server outside the group
is refused with 10005 and 2.15.1's texts; ``cluster``/``tags`` choose among the other servers.
For a replicated stream and a replicated consumer."""

from __future__ import annotations

import asyncio

from natserver.testing_cluster import NatsCluster

from .test_cluster import api, cluster_options, connect, until

TEST_TIMEOUT = 120.0  # seconds of real time for the whole test (the hard timeout)
_T = "io.nats.jetstream.api.v1."


def test_step_downs_hand_over_to_the_preferred_server():
    with NatsCluster(3, jetstream=True, **cluster_options()) as cluster:
        asyncio.run(asyncio.wait_for(_preferred(cluster), TEST_TIMEOUT))


async def _preferred(cluster: NatsCluster) -> None:
    nc = await connect(cluster.urls[0])
    try:
        async def created():
            answer = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "num_replicas": 3})
            return answer if "error" not in answer else None

        await until(created, "the R3 stream created")
        consumer = await api(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
                             {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        assert "error" not in consumer, consumer
        names = [node.options.server_name for node in cluster.servers]
        for kind, suffix, info_subject in (("stream", "STREAM.LEADER.STEPDOWN.S", "$JS.API.STREAM.INFO.S"),
                                           ("consumer", "CONSUMER.LEADER.STEPDOWN.S.D", "$JS.API.CONSUMER.INFO.S.D")):
            rtype = _T + f"{kind}_leader_stepdown_response"
            leader = (await api(nc, info_subject))["cluster"]["leader"]
            refused = await api(nc, "$JS.API." + suffix, {"placement": {"preferred": leader}})
            assert refused == {"type": rtype, "error": {"code": 400, "err_code": 10005,
                                                         "description": f'preferred server "{leader}" is already leader'}}
            refused = await api(nc, "$JS.API." + suffix, {"placement": {"preferred": "nowhere"}})
            assert refused["error"]["description"] == 'preferred server "nowhere" not known'
            for _ in range(2):  # to each of the other two in turn
                target = next(name for name in names if name != leader)
                answer = await api(nc, "$JS.API." + suffix, {"placement": {"preferred": target}})
                assert answer == {"type": rtype, "success": True}

                async def moved(target=target):
                    info = await api(nc, info_subject)
                    return info.get("cluster", {}).get("leader") == target

                await until(moved, f"the {kind} led by {target}")
                names.remove(target)
                names.append(target)
                leader = target
    finally:
        await nc.close()
