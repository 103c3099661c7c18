"""``jetstream { unique_tag: "az:" }`` (opts.go JetStreamUniqueTag, jetstream_cluster.go
selectPeerGroup): a replicated stream's servers each carry a different value of the tag with
that prefix, and a server without such a tag gets no replica. Three in-process natservers,
two of them in one zone: an R2 stream goes to one server of each zone, an R3 one is refused with
2.15.1's "no suitable peers for placement, server tag not unique"; asking for the zone in the
placement's tags turns the rule off. Real clocks, bounded polls, a hard timeout."""

from __future__ import annotations

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, cluster_options, run, until

ZONES = ["az:1", "az:1", "az:2"]


def test_replicas_go_to_servers_of_different_zones():
    cluster = NatsCluster(3, jetstream=True, jetstream_unique_tag="az:", **cluster_options())
    for node, zone in zip(cluster.servers, ZONES):
        node.options = node.options.copy(server_tags=[zone])
    zone_of = {node.options.server_name: zone for node, zone in zip(cluster.servers, ZONES)}

    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            async def placed(name: str, replicas: int, tags: list | None = None):
                config: dict = {"name": name, "subjects": [name.lower()], "num_replicas": replicas}
                if tags:
                    config["placement"] = {"tags": tags}
                answer = await api(ncs[0], f"$JS.API.STREAM.CREATE.{name}", config)
                # (every server's STATSZ heard first: until then placement has fewer peers)
                if "error" in answer and "offline" in answer["error"]["description"]:
                    return None
                return answer

            r2 = await until(lambda: placed("R2", 2), "an R2 stream placed")
            assert "error" not in r2, r2
            members = [r2["cluster"]["leader"]] + [r["name"] for r in r2["cluster"]["replicas"]]
            assert sorted(zone_of[m] for m in members) == ["az:1", "az:2"], members
            r3 = await until(lambda: placed("R3", 3), "an R3 stream refused")
            assert r3["error"] == {"code": 400, "err_code": 10005,
                                   "description": "no suitable peers for placement, server tag not unique"}, r3
            one_zone = await until(lambda: placed("Z", 1, ["az:1"]), "a stream placed by its zone")
            assert "error" not in one_zone and zone_of[one_zone["cluster"]["leader"]] == "az:1", one_zone

    with cluster:
        run(main)
