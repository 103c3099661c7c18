"""JetStream in a mixed cluster: one natserver and two nats-server 2.15.1 (runs when the 2.15.1
binary is found, as the other live tests). The natserver (``n3``, server tag ``kind:py``) is a
peer of the meta group as 2.15.1 finds it, announces its JetStream in its STATSZ, and

- an R1 stream placed on it (placement tag ``kind:py``) is created, published to and read
  through a 2.15.1 node's client: 2.15.1's meta leader (or natserver's, whichever leads)
  proposes it, natserver applies the assignment, runs the stream and answers over the routes;
- an R1 stream placed on a 2.15.1 node (``kind:go``) is created and used through natserver's
  client, and natserver's own meta state has both;
- 2.15.1's meta leader hands over to the natserver, whose proposals a 2.15.1 member then
  applies and answers (through natserver's ``_R_`` reply in the system account).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import trio

import natserver
from natserver.auth.users import User
from natserver.raft import node_id
from natserver.routing.accounts import AccountConfig
from tests.conftest import make_options
from tests.raft.nrg_cluster import APP_USER, PASSWORD, SYS_USER, Client, Cluster, Node, app_request, tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 120  # seconds for the whole test (2.15.1 elections take 4-9 s)
STEP = 30  # seconds for one step
POLL = 0.1  # seconds between two looks at another process (not a timing assertion)
STEPDOWNS = 8  # step-downs asked at most until the wanted server leads
TAGS = {"n1": ["kind:go"], "n2": ["kind:go"], "n3": ["kind:py"]}

CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
server_tags: %(tags)s
accounts {
  SYS { users [{user: %(sys)s, password: %(pw)s}] }
  APP { jetstream: enabled, users [{user: %(app)s, password: %(pw)s}] }
}
system_account: SYS
jetstream { store_dir: "%(store)s" }
cluster {
  name: %(cluster)s
  listen: 127.0.0.1:%(cport)d
  routes [%(routes)s]
}
"""


class MixedCluster(Cluster):
    """n1 and n2 are nats-server 2.15.1 processes; n3's slot is the natserver's."""

    def start(self, node: Node) -> None:
        node.folder.mkdir(parents=True, exist_ok=True)
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in self.nodes if n is not node]
        conf = node.folder / "server.conf"
        conf.write_text(CONFIG % {
            "name": node.name, "port": node.port, "sys": SYS_USER, "app": APP_USER, "pw": PASSWORD,
            "tags": json.dumps(TAGS[node.name]), "store": node.folder / "store", "cluster": self.name,
            "cport": node.cluster_port, "routes": ", ".join(routes)})
        log = open(node.folder / "server.log", "ab")  # noqa: SIM115 (the child writes it)
        node.process = subprocess.Popen([self.binary, "-c", str(conf)], stdout=log, stderr=log)
        log.close()


@contextlib.asynccontextmanager
async def running(binary: str, folder: Path):
    """A mixed cluster (n1, n2: 2.15.1 processes) with the natserver n3 serving: (the cluster,
    the natserver); all stopped at the end."""
    cluster = MixedCluster.create(binary, folder)
    for node in cluster.nodes[:2]:
        cluster.start(node)
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, cluster.nodes[2]))
            yield cluster, server
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()


def natserver_options(cluster: Cluster, node: Node) -> natserver.Options:
    return make_options(
        server_name=node.name, port=node.port, server_tags=TAGS[node.name],
        accounts=[AccountConfig("SYS"), AccountConfig("APP", jetstream=True)],
        users=[User(SYS_USER, PASSWORD, account="SYS"), User(APP_USER, PASSWORD, account="APP")],
        system_account="SYS", jetstream=True, store_dir=str(node.folder / "store"),
        cluster_name=cluster.name, cluster_host="127.0.0.1", cluster_port=node.cluster_port,
        routes=[f"nats://127.0.0.1:{n.cluster_port}" for n in cluster.nodes if n is not node])


async def request(port: int, subject: str, body=None) -> dict:
    return await app_request(port, subject, b"" if body is None else json.dumps(body).encode())


async def until_created(port: int, subject: str, body: dict) -> dict:
    """A create retried while the cluster forms (a 2.15.1 server still starting, no meta
    leader yet, or the natserver not yet a placement candidate: 10005 / 10008)."""
    last: dict | OSError = {}
    with trio.move_on_after(STEP):
        while True:
            with trio.move_on_after(3):
                try:
                    last = await request(port, subject, body)
                except OSError as exc:  # (not listening yet)
                    last = exc
                else:
                    if "error" not in last:
                        return last
            await trio.sleep(POLL)
    raise AssertionError(f"{subject} not created within {STEP} s: {last}")


async def leader_info(port: int, subject: str) -> dict:
    """An INFO request's answer (STREAM.INFO or CONSUMER.INFO) once it names a leader."""
    with trio.fail_after(STEP):
        while True:
            with trio.move_on_after(3):
                try:
                    info = await request(port, subject)
                except OSError:  # (a server restarting: not listening yet)
                    info = {}
                if info.get("cluster", {}).get("leader"):
                    return info
            await trio.sleep(POLL)


async def lead_with(port: int, info: str, stepdown: str, wanted: set[str]) -> dict:
    """Step-downs (``stepdown``, asking for a preferred one) until one of ``wanted`` leads:
    the answer to ``info`` that names it."""
    for _ in range(STEPDOWNS):
        answer = await leader_info(port, info)
        now = answer["cluster"]["leader"]
        if now in wanted:
            return answer
        with trio.move_on_after(5):
            await request(port, stepdown, {"placement": {"preferred": sorted(wanted)[0]}})
        with trio.move_on_after(STEP):
            while (await leader_info(port, info))["cluster"]["leader"] == now:
                await trio.sleep(POLL)
    raise AssertionError(f"none of {wanted} leads ({info})")


async def sys_request(port: int, subject: str, body=None) -> dict:
    client = await Client.open(port, SYS_USER)
    try:
        with trio.fail_after(STEP):
            return json.loads(await client.request(subject, b"" if body is None else json.dumps(body).encode()))
    finally:
        await client.stream.aclose()


async def next_message(port: int, stream: str, consumer: str) -> bytes:
    """One message pulled (CONSUMER.MSG.NEXT) through a client of the server at ``port`` (it
    comes on the stream's subject, to the inbox's subscription)."""
    client = await Client.open(port, APP_USER)
    try:
        with trio.fail_after(STEP):
            await client.sub("_INBOX.pull")
            await client.pub(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", b'{"batch": 1}', "_INBOX.pull")
            _, reply, payload = await client.next_msg()
            assert reply.startswith(f"$JS.ACK.{stream}.{consumer}."), reply
            return payload
    finally:
        await client.stream.aclose()


async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver_options(cluster, py))
            jetstream = server.jetstream
            assert jetstream is not None and jetstream.cluster is not None

            # Placed on the natserver, used through a 2.15.1 node's client.
            created = await until_created(go1.port, "$JS.API.STREAM.CREATE.PY", {
                "name": "PY", "subjects": ["py.>"], "placement": {"tags": ["kind:py"]}})
            assert created["cluster"] == {"name": cluster.name, "leader": "n3"}, created
            assert created["did_create"] is True
            assert "PY" in jetstream.streams or "PY" in jetstream.engines[0].streams
            for i in range(3):
                ack = await request(go2.port, f"py.{i}", {"n": i})
                assert ack == {"stream": "PY", "seq": i + 1}, ack
            info = await request(go1.port, "$JS.API.STREAM.INFO.PY")
            assert info["state"]["messages"] == 3 and info["cluster"]["leader"] == "n3", info
            # The meta leader's account info counts the natserver's storage ($JSC.ARU updates).
            with trio.fail_after(STEP):
                while (await request(go1.port, "$JS.API.INFO"))["storage"] != info["state"]["bytes"]:
                    await trio.sleep(POLL)
            consumer = await request(go1.port, "$JS.API.CONSUMER.CREATE.PY.D", {
                "stream_name": "PY", "config": {"durable_name": "D", "ack_policy": "none"}})
            assert consumer["cluster"]["leader"] == "n3" and consumer["num_pending"] == 3, consumer
            got = await next_message(go2.port, "PY", "D")
            assert json.loads(got) == {"n": 0}
            report["py_host"] = created["cluster"]["leader"]

            # Placed on a 2.15.1 node, used through natserver's client.
            created = await until_created(py.port, "$JS.API.STREAM.CREATE.GO", {
                "name": "GO", "subjects": ["go.>"], "placement": {"tags": ["kind:go"]}})
            assert created["cluster"]["leader"] in ("n1", "n2"), created
            for i in range(2):
                ack = await request(py.port, f"go.{i}", {"n": i})
                assert ack == {"stream": "GO", "seq": i + 1}, ack
            info = await request(py.port, "$JS.API.STREAM.INFO.GO")
            assert info["state"]["messages"] == 2, info
            consumer = await request(py.port, "$JS.API.CONSUMER.CREATE.GO.E", {
                "stream_name": "GO", "config": {"durable_name": "E", "ack_policy": "none"}})
            assert consumer["cluster"]["leader"] == created["cluster"]["leader"], consumer
            assert json.loads(await next_message(py.port, "GO", "E")) == {"n": 0}
            names = await request(py.port, "$JS.API.STREAM.NAMES")
            assert names["streams"] == ["GO", "PY"], names
            state = jetstream.cluster.state
            assert sorted(state.streams["APP"]) == ["GO", "PY"]
            assert state.stream("APP", "PY").group.peers == [node_id("n3")]
            assert list(state.stream("APP", "PY").consumers) == ["D"]
            meta = jetstream.cluster.meta_json()
            assert meta["cluster_size"] == 3 and meta["leader"] in ("n1", "n2", "n3"), meta
            report["go_host"] = created["cluster"]["leader"]
            report["meta_leader"] = meta["leader"]

            # The natserver leads the meta group (a 2.15.1 leader hands over to it): a stream
            # it places on a 2.15.1 server is answered by that server through natserver's _R_.
            if meta["leader"] != "n3":
                stepdown = await sys_request(go1.port, "$JS.API.META.LEADER.STEPDOWN",
                                             {"placement": {"preferred": "n3"}})
                assert stepdown.get("success") is True, stepdown
            with trio.fail_after(STEP):
                while not jetstream.cluster.is_leader:
                    await trio.sleep(POLL)
            created = await until_created(go1.port, "$JS.API.STREAM.CREATE.GO2", {
                "name": "GO2", "subjects": ["go2.>"], "placement": {"tags": ["kind:go"]}})
            assert created["cluster"]["leader"] in ("n1", "n2") and created["did_create"] is True, created
            info = await request(go2.port, "$JS.API.INFO")  # (natserver's answer, the meta leader's)
            assert info["streams"] == 3, info
            assert (await request(go2.port, "$JS.API.STREAM.DELETE.GO2")).get("success") is True
            report["natserver_led"] = True

            # Deleted through the other kind's client.
            assert (await request(py.port, "$JS.API.STREAM.DELETE.PY")).get("success") is True
            assert (await request(go1.port, "$JS.API.STREAM.DELETE.GO")).get("success") is True
            with trio.fail_after(STEP):
                while "PY" in jetstream.streams or state.streams.get("APP"):
                    await trio.sleep(POLL)
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_r1_streams_in_a_cluster_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder))))
    assert report["py_host"] == "n3" and report["go_host"] in ("n1", "n2") and report["natserver_led"]


async def bounded(coro, seconds: float = TEST_TIMEOUT):
    """A mixed-cluster scenario under a hard timeout (each test file's own)."""
    with trio.fail_after(seconds):
        return await coro
