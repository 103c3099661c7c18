"""JetStream in a cluster at startup: nats-server's rules (jetstream.go validateJetStreamOptions:
a server name and a cluster name, its error texts, from a configuration file as users write it),
and a meta group without a leader: silent at
first, then 10008 once it has been leaderless for raft.go's lostQuorumInterval."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import natserver
from natserver.config.mapping import options_from_file
from natserver.jetstream.cluster import LEADERLESS_AFTER
from natserver.testing import NatsServer
from natserver.testing_cluster import NatsCluster

TEST_TIMEOUT = 60.0  # seconds of real time for the test (the hard timeout)
REQUEST_TIMEOUT = 2.0


def clustered(**changes) -> natserver.Options:
    base = {"jetstream": True, "cluster_port": -1, "cluster_name": "C", "server_name": "s1"}
    return natserver.Options(**{**base, **changes})


def test_jetstream_in_a_cluster_starts_from_nats_servers_config_file(tmp_path):
    """A user's three-node configuration (server_name, cluster {}, jetstream {}) is taken as
    nats-server takes it; without the server name, nats-server's text."""
    conf = tmp_path / "n1.conf"
    conf.write_text("server_name: n1\nlisten: 127.0.0.1:-1\njetstream { store_dir: %s }\n"
                    "cluster { name: C, listen: 127.0.0.1:6222, routes: [nats://127.0.0.1:6223] }\n"
                    % json.dumps(str(tmp_path / "store")))
    options = options_from_file(conf)
    options.validate()
    assert options.jetstream and options.clustered and options.server_name == "n1"
    conf.write_text(conf.read_text().replace("server_name: n1\n", ""))
    with pytest.raises(ValueError) as error:
        options_from_file(conf).validate()
    assert str(error.value) == "jetstream cluster requires `server_name` to be set"


def test_a_server_name_and_a_cluster_name_are_required_with_nats_servers_texts():
    with pytest.raises(ValueError) as error:
        clustered(server_name="").validate()
    assert str(error.value) == "jetstream cluster requires `server_name` to be set"
    with pytest.raises(ValueError) as error:
        clustered(cluster_name="").validate()
    assert str(error.value) == "jetstream cluster requires `cluster.name` to be set"
    clustered().validate()  # both given: accepted


def test_a_meta_group_without_a_leader_answers_10008_after_the_lost_quorum_interval(tmp_path):
    """One server of an expected cluster (nobody answers its votes): the meta group has no
    leader; the API is silent at first (a leader may come), then answers 10008."""
    server = NatsServer(clustered(store_dir=str(tmp_path), host="127.0.0.1", port=-1, cluster_host="127.0.0.1"))
    with server:
        async def main():
            nc = await nats.connect(server.url)
            try:
                with pytest.raises(nats.errors.TimeoutError):
                    await nc.request("$JS.API.INFO", b"", timeout=REQUEST_TIMEOUT)
                await server.advance_async(LEADERLESS_AFTER + 1)
                answer = json.loads((await nc.request("$JS.API.INFO", b"", timeout=REQUEST_TIMEOUT)).data)
                assert answer == {"type": "io.nats.jetstream.api.v1.account_info_response", "error": {
                    "code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}}
                created = json.loads((await nc.request("$JS.API.STREAM.CREATE.S", b'{"name": "S"}',
                                                       timeout=REQUEST_TIMEOUT)).data)
                assert created["error"]["err_code"] == 10008
            finally:
                await nc.close()

        asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


def test_a_meta_group_never_led_campaigns_when_a_new_peer_is_heard_of():
    """Three servers started one after the other, each later than the others' bootstrap
    campaigns (a Python server takes most of a second to start; a test harness such as nats.js's
    starts them in turn): every first campaign asks servers that are not there yet or that
    voted for themselves in the same term. The meta group, bootstrapped and never led, stands
    for election again as soon as it hears of a new peer (its STATSZ), not after the election
    timeout (4-9 s). Manual clocks: no server's clock reaches its election timeout here, so
    only that campaign can elect a leader."""
    cluster = NatsCluster(3, jetstream=True, clock="manual")  # (its nodes started by hand)
    first, second, third = cluster.servers
    try:
        first.start()
        cluster._pin_ports(first)
        first.advance(1.0)  # its bootstrap campaign (100-800 ms) asks nobody: term 1, its own vote
        for node in (second, third):
            node.options = node.options.copy(routes=[cluster.route_url(0)])
        second.start()
        cluster._pin_ports(second)
        cluster.wait_for_routes()
        for _ in range(10):  # the second's own campaign (term 1) is refused: the first voted
            second.advance(0.1)
            first.advance(0.1)
        third.start()
        cluster._pin_ports(third)
        cluster.wait_for_routes()
        leaders: set[str] = set()
        for _ in range(20):
            for node in cluster.servers:
                node.advance(0.1)
            leaders = {node._call(lambda n=node: n.server.jetstream.cluster.group.node.leader)
                       for node in cluster.servers}
            if len(leaders) == 1 and "" not in leaders:
                break
        assert len(leaders) == 1 and "" not in leaders, leaders
    finally:
        cluster.stop_all()


def test_servers_learn_of_each_other_when_their_route_comes_up_not_at_the_next_heartbeat():
    """events.go processNewServer ("Announce ourselves"): a server's STATSZ goes to a server it
    has just been routed to, and that one answers with its own, so that a meta leader can place
    on a new server at once. Manual clocks moved 0.1 s: before the first heartbeat (0.25 s), so
    only the announcements carry the STATSZ."""
    cluster = NatsCluster(2, jetstream=True, clock="manual")
    try:
        cluster.start()
        for node in cluster.servers:
            node.advance(0.1)

        def heard(i: int) -> set[str]:
            node = cluster.servers[i]
            return node._call(lambda: {info.name for info in node.server.jetstream.cluster.peers.values()})

        names = [node.options.server_name for node in cluster.servers]
        assert names[1] in heard(0) and names[0] in heard(1), (heard(0), heard(1))
    finally:
        cluster.stop_all()
