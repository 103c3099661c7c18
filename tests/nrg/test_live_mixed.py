"""A natserver server routed into a live nats-server 2.15.1 cluster hosts a node of a stream group.

tests/raft/test_live_interop.py drove a natserver.raft.Node over a raw client connection; here
the node runs where it belongs, in a natserver server's NrgHost: its subscriptions are internal
subscriptions of the server's system account, its messages are published there, and every
$NRG frame crosses natserver's routes (RS+ interest, RMSG) to and from the 2.15.1 servers.

A 3-node 2.15.1 cluster has an R3 file stream; one follower is killed and a natserver takes
its place (its server name, hence its node id, and its ports), hosting the stream's group with
an empty store: the 2.15.1 leader catches it up; with the other 2.15.1 follower killed too,
publishes are acknowledged only with the natserver node's append responses (over the route);
the follower restarted and the leader killed, the natserver node campaigns, is voted for by
the 2.15.1 server and commits its first entry with that server's acknowledgement.

And the meta group: a natserver hosting a `_meta_` node is added to 2.15.1's meta group by its
leader, but is not yet a placement target (see natserver/nrg/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

import natserver
from natserver.config.flags import build_options, parse_args
from natserver.nrg import run_nrg
from natserver.raft import META_GROUP, EntryType, Role, node_id
from tests.raft.nrg_cluster import (
    APP_USER,
    PASSWORD,
    SYS_USER,
    Client,
    Cluster,
    app_request,
    free_port,
    tempdir,
    wait_meta_leader,
    wait_stream_leader,
)
from tests.raft.test_live_interop import STREAM, learn_group, wait_current
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 150  # seconds for the whole test (2.15.1 elections take 4-9 s)
STEP = 30  # seconds for one step

# The natserver's configuration: the 2.15.1 servers' accounts and cluster, without JetStream
# (refused in a cluster: the test drives the NrgHost itself).
NATSERVER_CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
accounts {
  SYS { users [{user: %(sys)s, password: %(pw)s}] }
  APP { users [{user: %(app)s, password: %(pw)s}] }
}
system_account: SYS
cluster {
  name: %(cluster)s
  listen: 127.0.0.1:%(cport)d
  routes [%(routes)s]
}
"""


async def until(predicate, what: str, describe=lambda: "") -> None:
    with trio.move_on_after(STEP):
        while not predicate():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not {what} in {STEP} s: {describe()}")


async def scenario(binary: str, folder: Path) -> dict:
    cluster = Cluster.create(binary, folder)
    cluster.start_all()
    report: dict = {}
    try:
        await trio.sleep(0.5)
        await wait_meta_leader(cluster.nodes)
        first = cluster.nodes[0].port
        config = {"name": STREAM, "subjects": ["live.>"], "num_replicas": 3, "storage": "file"}
        created = await app_request(first, f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(config).encode())
        assert "error" not in created, created
        leader = cluster.by_name(await wait_stream_leader(cluster.nodes, STREAM))
        follower, other = [n for n in cluster.nodes if n is not leader]
        for i in range(3):
            assert (await app_request(leader.port, f"live.{i}", b"before %d" % i))["seq"] == i + 1
        with trio.fail_after(STEP):
            group_name = await learn_group(leader.port)

        # A natserver takes the follower's place: its name (node id) and ports, an empty store.
        cluster.kill(follower)
        conf = folder / "natserver.conf"
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in cluster.nodes if n is not follower]
        conf.write_text(NATSERVER_CONFIG % {
            "name": follower.name, "port": follower.port, "sys": SYS_USER, "app": APP_USER, "pw": PASSWORD,
            "cluster": cluster.name, "cport": follower.cluster_port, "routes": ", ".join(routes)})
        options = build_options(parse_args(["-c", str(conf)])).copy(quiet=True)
        ids = [node_id(n.name) for n in cluster.nodes]
        applied: list = []
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            host = await nursery.start(run_nrg, server, str(folder / "natserver-store"))
            group = host.create_group(group_name, ids, applied.extend)
            node = group.node

            def describe() -> str:
                return (f"{node.role.name} term {node.term} leader {node.leader} log {node.last_index} commit "
                        f"{node.commit} received {host.received} routes {sorted(server.cluster.routes)}")

            await until(lambda: b"before 2" in b"".join(e.entry.data for e in node.log), "caught up", describe)
            assert node.leader == node_id(leader.name)
            report["caught_up_to"] = node.last_index
            report["routes"] = len(server.cluster.routes)
            assert Path(group.folder).is_dir() and any(Path(group.folder).iterdir())

            # The other 2.15.1 follower goes: the leader's quorum is the natserver node.
            cluster.kill(other)
            for i in range(3, 6):
                ack = await app_request(leader.port, f"live.{i}", b"quorum %d" % i)
                assert ack.get("seq") == i + 1, ack
            await until(lambda: b"quorum 5" in b"".join(c.entry.data for c in applied), "committed", describe)
            report["acked_with_natserver_quorum"] = 3

            # The follower comes back and is caught up; the leader goes; the natserver node
            # campaigns (100-800 ms, before 2.15.1's 4-9 s) and the 2.15.1 server elects it.
            cluster.start(other)
            await wait_current(leader.port, other.name)
            group.campaign()
            term_before = node.term
            cluster.kill(leader)
            await until(lambda: node.term > term_before and node.role is Role.LEADER, "elected", describe)

            def first_entry_committed() -> bool:
                return any(c.term == node.term and c.entry.type == EntryType.PEER_STATE for c in applied)

            await until(first_entry_committed, "the new leader's first entry committed", describe)
            report["leader"] = node.role.name
            report["received"] = host.received
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_a_natserver_server_hosts_a_node_of_a_2_15_1_stream_group():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: _bounded(scenario(NATS_SERVER, Path(folder))))
    assert report["routes"] == 2  # routed to the two 2.15.1 servers: $NRG crossed them
    assert report["caught_up_to"] >= 3
    assert report["acked_with_natserver_quorum"] == 3
    assert report["leader"] == "LEADER"


async def _bounded(coro):
    with trio.fail_after(TEST_TIMEOUT):
        return await coro


async def sys_request(port: int, subject: str, payload: bytes = b"") -> dict:
    client = await Client.open(port, SYS_USER)
    try:
        with trio.fail_after(STEP):
            return json.loads(await client.request(subject, payload))
    finally:
        await client.stream.aclose()


async def meta_scenario(binary: str, folder: Path) -> dict:
    """A natserver (n4) routed into a 2.15.1 cluster hosts a `_meta_` node: the 2.15.1 meta
    leader catches it up and, hearing its append responses, adds it to the meta group
    (raft.go trackPeer: ProposeAddPeer of an unknown responder)."""
    cluster = Cluster.create(binary, folder)
    cluster.start_all()
    report: dict = {}
    try:
        await trio.sleep(0.5)
        await wait_meta_leader(cluster.nodes)
        conf = folder / "natserver.conf"
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in cluster.nodes]
        conf.write_text(NATSERVER_CONFIG % {
            "name": "n4", "port": free_port(), "sys": SYS_USER, "app": APP_USER, "pw": PASSWORD,
            "cluster": cluster.name, "cport": free_port(), "routes": ", ".join(routes)})
        options = build_options(parse_args(["-c", str(conf)])).copy(quiet=True)
        ours = node_id("n4")
        applied: list = []
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            host = await nursery.start(run_nrg, server, str(folder / "natserver-store"))
            group = host.create_group(META_GROUP, [*(node_id(n.name) for n in cluster.nodes), ours], applied.extend)

            def added() -> bool:
                return any(c.entry.type == EntryType.ADD_PEER and c.entry.data == ours.encode() for c in applied)

            await until(added, "added to the meta group", lambda: repr(group))
            leader = next(n for n in cluster.nodes if node_id(n.name) == group.node.leader)
            jsz = await sys_request(leader.port, "$SYS.REQ.SERVER.PING.JSZ", b'{"server_name": "%s"}' % leader.name.encode())
            report["meta_cluster"] = jsz["data"]["meta_cluster"]
            # Not yet a placement target: its STATSZ carries no JetStream config and stats.
            config = {"name": "R4", "subjects": ["r4"], "num_replicas": 4}
            report["r4"] = await app_request(leader.port, "$JS.API.STREAM.CREATE.R4", json.dumps(config).encode())
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_a_natserver_meta_node_is_added_to_the_2_15_1_meta_group():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: _bounded(meta_scenario(NATS_SERVER, Path(folder))))
    meta = report["meta_cluster"]
    assert meta["cluster_size"] == 4 and meta["quorum_needed"] == 3
    n4 = next(r for r in meta["replicas"] if r["peer"] == node_id("n4"))
    assert n4["name"] == "n4" and n4["current"]  # named from its STATSZ, answering appends
    assert report["r4"]["error"] == {"code": 400, "err_code": 10005,
                                     "description": "no suitable peers for placement, peer offline"}
