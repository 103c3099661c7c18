"""Record nats-server 2.15.1's meta group (``_meta_``) into data/meta_nats_server_2.15.1.json.

``python -m tests.jetstream.replication.record_meta``: first, a 3-node 2.15.1 JetStream cluster whose
servers carry tags (n1 ``az:1 ssd``, n2 ``az:2 ssd``, n3 ``az:3 hdd``, n3 with a small file
store), raw clients on ``$NRG.>`` in the system account of every node. Then, through the APP
account: streams created R1 and R3 with and without placement (and creates that no placement
fits, their errors recorded), one updated, durable and ephemeral consumers added, one updated,
some deleted;
a follower killed (kill -9), more changes made, the meta leader stepped down (the new leader
snapshots its log when it takes over), the killed follower restarted: caught up, by a snapshot.

Written: every request with its answer (``requests``; ``{"timeout": true}`` when none came:
2.15.1 has only the group's leader answer a delete, and that may be the killed server), the frames of the meta group as one
never-killed sniffer saw them (``$NRG.AE._meta_`` appends, ``$NRG.P._meta_`` forwarded
proposals, and ``$NRG.CR.`` catch-up frames, hex: the restarted follower's catch-up starts with
the new leader's meta snapshot), and the final state as 2.15.1 reports it
(``jsz``: ``$SYS.REQ.SERVER.PING.JSZ`` with streams, consumers and raft groups).

Then into data/placement_unique_tag_nats_server_2.15.1.json: a cluster whose ``unique_tag`` is
``az:`` (n1 and n2 in az:1, n3 in az:2), creates against that rule and excluded tags, with
2.15.1's answers. Last, into data/placement_account_limits_nats_server_2.15.1.json: creates
against an account's JetStream limits (streams, consumers, reserved file and memory bytes).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import trio

from tests.raft.nrg_cluster import (
    APP_USER,
    PASSWORD,
    SYS_USER,
    Client,
    Cluster,
    Node,
    app_request,
    tempdir,
    wait_meta_leader,
)
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "meta_nats_server_2.15.1.json"
SETTLE = 3.0  # seconds of traffic after a step (heartbeats, commits, responses)
STEP_TIMEOUT = 30.0
TAGS = {"n1": ["az:1", "ssd"], "n2": ["az:2", "ssd"], "n3": ["az:3", "hdd"]}
# n3's file store is small: a stream asking for more bytes cannot be placed there.
MAX_FILE = {"n1": "1GB", "n2": "1GB", "n3": "10MB"}
MAX_MEM = "256MB"
UNIQUE_DATA = Path(__file__).parent / "data" / "placement_unique_tag_nats_server_2.15.1.json"
UNIQUE_TAGS = {"n1": ["az:1", "ssd"], "n2": ["az:1", "hdd"], "n3": ["az:2", "ssd"]}
UNIQUE_PREFIX = "az:"
LIMITS_DATA = Path(__file__).parent / "data" / "placement_account_limits_nats_server_2.15.1.json"

CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
server_tags: %(tags)s
accounts {
  SYS { users [{user: %(sys)s, password: %(pw)s}] }
  APP { jetstream: %(app_js)s, users [{user: %(app)s, password: %(pw)s}] }
}
system_account: SYS
jetstream { store_dir: "%(store)s", max_file_store: %(max_file)s, max_memory_store: %(max_mem)s, unique_tag: %(unique)s }
cluster {
  name: %(cluster)s
  listen: 127.0.0.1:%(cport)d
  routes [%(routes)s]
}
"""


class TaggedCluster(Cluster):
    """nrg_cluster's cluster with server tags, JetStream limits and a unique tag prefix."""

    tags = TAGS
    max_file = MAX_FILE
    unique_tag = ""
    app_jetstream = "enabled"

    def start(self, node: Node) -> None:
        node.folder.mkdir(parents=True, exist_ok=True)
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in self.nodes if n is not node]
        conf = node.folder / "server.conf"
        conf.write_text(CONFIG % {
            "name": node.name, "port": node.port, "sys": SYS_USER, "app": APP_USER, "pw": PASSWORD,
            "tags": json.dumps(self.tags[node.name]), "max_file": self.max_file[node.name], "max_mem": MAX_MEM,
            "unique": json.dumps(self.unique_tag), "app_js": self.app_jetstream, "store": node.folder / "store", "cluster": self.name,
            "cport": node.cluster_port, "routes": ", ".join(routes)})
        log = open(node.folder / "server.log", "ab")  # noqa: SIM115 (the child writes it)
        node.process = subprocess.Popen([self.binary, "-c", str(conf)], stdout=log, stderr=log)
        log.close()


def keep(subject: str) -> bool:
    return subject in ("$NRG.AE._meta_", "$NRG.P._meta_") or subject.startswith("$NRG.CR.")


async def sniff(port: int, frames: list, start: float) -> None:
    client = await Client.open(port, SYS_USER)
    await client.sub("$NRG.>")
    await client.flush()
    try:
        while True:
            subject, reply, data = await client.next_msg()
            if keep(subject):
                frames.append({"t": round(time.monotonic() - start, 3), "subject": subject,
                               "reply": reply, "data": data.hex()})
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def sys_gather(port: int, subject: str, payload: bytes, wait: float = 2.0) -> list[dict]:
    """Every answer to a system account request within ``wait`` seconds."""
    client = await Client.open(port, SYS_USER)
    try:
        sid = await client.sub("_INBOX.gather")
        await client.pub(subject, payload, "_INBOX.gather")
        answers = []
        with trio.move_on_after(wait):
            while True:
                _, _, data = await client.next_msg()
                answers.append(json.loads(data))
        del sid
        return answers
    finally:
        await client.stream.aclose()


async def meta_leader(cluster: Cluster) -> str:
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            alive = [n for n in cluster.nodes if n.process is not None]
            answers = await sys_gather(alive[0].port, "$SYS.REQ.SERVER.PING.JSZ", b"{}", 1.0)
            for a in answers:
                leader = a.get("data", {}).get("meta_cluster", {}).get("leader", "")
                if leader:
                    return leader
            await trio.sleep(0.5)


class Recorder:
    def __init__(self, cluster: Cluster, start: float) -> None:
        self.cluster = cluster
        self.start = start
        self.requests: list[dict] = []
        self.steps: list[str] = []

    def step(self, what: str) -> None:
        self.steps.append(f"{time.monotonic() - self.start:.3f} {what}")

    async def api(self, subject: str, body: dict | None, expect_ok: bool | None = True) -> dict:
        port = next(n.port for n in self.cluster.nodes if n.process is not None)
        payload = json.dumps(body).encode() if body is not None else b""
        try:
            answer = await app_request(port, subject, payload)
        except trio.TooSlowError:
            answer = {"timeout": True}
        self.requests.append({"t": round(time.monotonic() - self.start, 3), "subject": subject,
                              "request": body, "response": answer})
        if expect_ok is True:
            assert "error" not in answer, (subject, answer)
        elif expect_ok is False:
            assert "error" in answer, (subject, answer)
        await trio.sleep(0.3)  # one meta entry each, in order
        return answer


def stream(name: str, replicas: int, storage: str = "file", **extra) -> dict:
    return {"name": name, "subjects": [f"{name.lower()}.>"], "num_replicas": replicas,
            "storage": storage, **extra}


async def scenario(rec: Recorder, cluster: Cluster) -> tuple[str, str, str]:
    api = rec.api
    await api("$JS.API.STREAM.CREATE.R1A", stream("R1A", 1, placement={"tags": ["ssd"]}))
    await api("$JS.API.STREAM.CREATE.R3B", stream("R3B", 3, "memory"))
    await api("$JS.API.STREAM.CREATE.TAGS2", stream("TAGS2", 2, placement={"tags": ["ssd"]}))
    await api("$JS.API.STREAM.CREATE.HDD", stream("HDD", 1, placement={"tags": ["hdd", "az:3"]}))
    await api("$JS.API.STREAM.CREATE.INC", stream("INC", 3, placement={"cluster": "C"}))
    # Creates no placement fits.
    await api("$JS.API.STREAM.CREATE.NOSSD3", stream("NOSSD3", 3, placement={"tags": ["ssd"]}), False)
    await api("$JS.API.STREAM.CREATE.NOGPU", stream("NOGPU", 1, placement={"tags": ["gpu"]}), False)
    await api("$JS.API.STREAM.CREATE.NOCL", stream("NOCL", 1, placement={"cluster": "ELSEWHERE"}), False)
    await api("$JS.API.STREAM.CREATE.R5", stream("R5", 5), False)
    await api("$JS.API.STREAM.CREATE.BIG3", stream("BIG3", 3, max_bytes=100 * 1024 * 1024), False)
    await api("$JS.API.STREAM.CREATE.BIGHDD", stream("BIGHDD", 1, max_bytes=100 * 1024 * 1024,
                                                         placement={"tags": ["hdd"]}), False)
    await api("$JS.API.STREAM.CREATE.BIG2", stream("BIG2", 2, max_bytes=100 * 1024 * 1024))
    await api("$JS.API.STREAM.CREATE.MEM3", stream("MEM3", 3, "memory", max_bytes=300 * 1024 * 1024), False)
    # An update, then consumers.
    await api("$JS.API.STREAM.UPDATE.R3B", stream("R3B", 3, "memory", max_msgs=1000,
                                                  subjects=["r3b.>", "extra.r3b"]))
    await api("$JS.API.CONSUMER.CREATE.R3B.D1", {"stream_name": "R3B", "config": {
        "durable_name": "D1", "ack_policy": "explicit", "filter_subject": "r3b.a"}})
    await api("$JS.API.CONSUMER.CREATE.R3B", {"stream_name": "R3B", "config": {
        "ack_policy": "none", "deliver_subject": "eph.deliver", "inactive_threshold": 3600_000_000_000}})
    await api("$JS.API.CONSUMER.CREATE.R3B.R1C", {"stream_name": "R3B", "config": {
        "durable_name": "R1C", "ack_policy": "explicit", "num_replicas": 1, "mem_storage": True}})
    await api("$JS.API.CONSUMER.CREATE.R1A.DA", {"stream_name": "R1A", "config": {
        "durable_name": "DA", "ack_policy": "all"}})
    await api("$JS.API.CONSUMER.CREATE.INC.GONE", {"stream_name": "INC", "config": {
        "durable_name": "GONE", "ack_policy": "explicit"}})
    await api("$JS.API.CONSUMER.DELETE.INC.GONE", None)
    await api("$JS.API.STREAM.DELETE.TAGS2", None)
    await api("$JS.API.CONSUMER.CREATE.R1A.DA", {"stream_name": "R1A", "config": {
        "durable_name": "DA", "ack_policy": "all", "description": "updated", "max_ack_pending": 20}})
    await trio.sleep(SETTLE)
    leader = await meta_leader(cluster)
    rec.step(f"meta leader {leader}")
    # A follower killed; changes it misses.
    follower = next(n for n in cluster.nodes if n.name != leader)
    cluster.kill(follower)
    rec.step(f"killed {follower.name}")
    await trio.sleep(SETTLE)
    live_tag = next(TAGS[n.name][0] for n in cluster.nodes if n.process is not None)
    await api("$JS.API.STREAM.CREATE.LATE", stream("LATE", 1, placement={"tags": [live_tag]}))
    await api("$JS.API.STREAM.CREATE.LATE3", stream("LATE3", 3), None)  # one peer down
    await api("$JS.API.STREAM.UPDATE.R1A", stream("R1A", 1, placement={"tags": ["ssd"]},
                                                  description="updated while n was down"))
    await api("$JS.API.CONSUMER.CREATE.R3B.D2", {"stream_name": "R3B", "config": {
        "durable_name": "D2", "ack_policy": "explicit"}})
    await api("$JS.API.CONSUMER.DELETE.R3B.D1", None)
    await api("$JS.API.STREAM.DELETE.HDD", None)
    await trio.sleep(SETTLE)
    # The meta leader steps down: the new one snapshots as it takes over.
    alive = next(n for n in cluster.nodes if n.process is not None)
    answers = await sys_gather(alive.port, "$JS.API.META.LEADER.STEPDOWN", b"", 3.0)
    rec.step(f"stepdown {answers}")
    await trio.sleep(SETTLE)
    new_leader = await meta_leader(cluster)
    rec.step(f"meta leader {new_leader}")
    await trio.sleep(SETTLE)
    cluster.start(follower)
    rec.step(f"restarted {follower.name}")
    await trio.sleep(4 * SETTLE)
    return leader, new_leader, follower.name


async def record(binary: str) -> dict:
    with tempdir() as folder:
        cluster = TaggedCluster.create(binary, Path(folder))
        cluster.start_all()
        start = time.monotonic()
        frames: dict[str, list] = {n.name: [] for n in cluster.nodes}
        rec = Recorder(cluster, start)
        try:
            async with trio.open_nursery() as nursery:
                await trio.sleep(1.0)  # the servers listening
                for node in cluster.nodes:
                    nursery.start_soon(sniff, node.port, frames[node.name], start)
                await wait_meta_leader(cluster.nodes)
                rec.step("meta leader elected")
                leader, new_leader, killed = await scenario(rec, cluster)
                jsz = await sys_gather(cluster.nodes[0].port, "$SYS.REQ.SERVER.PING.JSZ", json.dumps(
                    {"accounts": True, "streams": True, "consumer": True, "config": True,
                     "raft": True}).encode(), 3.0)
                nursery.cancel_scope.cancel()
        finally:
            cluster.stop_all()
        sniffer = next(n.name for n in cluster.nodes if n.name != killed)
        return {
            "servers": {n.name: {"tags": TAGS[n.name], "max_file_store": MAX_FILE[n.name]} for n in cluster.nodes},
            "cluster": cluster.name, "first_leader": leader, "second_leader": new_leader, "killed": killed,
            "steps": rec.steps, "requests": rec.requests, "jsz": jsz,
            "sniffer": sniffer, "frames": frames[sniffer],
        }


class UniqueTagCluster(TaggedCluster):
    """Two servers in az:1, one in az:2, the prefix "az:" unique: one replica per zone."""

    tags = UNIQUE_TAGS
    max_file = {"n1": "1GB", "n2": "1GB", "n3": "1GB"}
    unique_tag = UNIQUE_PREFIX


# Creates against the unique tag rule, excluded tags and tags of the prefix itself.
UNIQUE_CREATES = [
    ("U3", 3, None), ("U2", 2, None), ("USSD", 2, ["ssd"]), ("UHDD", 2, ["hdd"]), ("UNOSSD", 1, ["!ssd"]),
    ("UNOSSD2", 2, ["!ssd"]), ("UAZ1", 2, ["az:1"]), ("UR1", 1, None),
]


async def record_unique(binary: str) -> dict:
    with tempdir() as folder:
        cluster = UniqueTagCluster.create(binary, Path(folder))
        cluster.start_all()
        rec = Recorder(cluster, time.monotonic())
        try:
            await trio.sleep(1.0)
            await wait_meta_leader(cluster.nodes)
            for name, replicas, tags in UNIQUE_CREATES:
                extra = {"placement": {"tags": tags}} if tags else {}
                await rec.api(f"$JS.API.STREAM.CREATE.{name}", stream(name, replicas, **extra), None)
        finally:
            cluster.stop_all()
        return {"servers": {n.name: {"tags": UNIQUE_TAGS[n.name]} for n in cluster.nodes},
                "unique_tag": UNIQUE_PREFIX, "cluster": cluster.name, "requests": rec.requests}


class LimitsCluster(TaggedCluster):
    """APP with account limits (un-tiered): the meta leader checks them before placing."""

    tags = {"n1": [], "n2": [], "n3": []}
    max_file = {"n1": "1GB", "n2": "1GB", "n3": "1GB"}
    app_jetstream = "{max_mem: 10MB, max_file: 30MB, max_streams: 3, max_consumers: 5}"


# (name, replicas, storage, max_bytes, max_consumers): creates against the account's limits.
LIMITS_CREATES = [
    ("L1", 3, "file", 5 * 1024 * 1024, 0), ("C10", 1, "file", 0, 10), ("L2", 3, "file", 6 * 1024 * 1024, 0),
    ("L2", 1, "file", 10 * 1024 * 1024, 0), ("M1", 3, "memory", 4 * 1024 * 1024, 0),
    ("M1", 1, "memory", 1024 * 1024, 0), ("L4", 1, "file", 0, 0), ("L1", 3, "file", 5 * 1024 * 1024, 0),
]


async def record_limits(binary: str) -> dict:
    with tempdir() as folder:
        cluster = LimitsCluster.create(binary, Path(folder))
        cluster.start_all()
        rec = Recorder(cluster, time.monotonic())
        try:
            await trio.sleep(1.0)
            await wait_meta_leader(cluster.nodes)
            for name, replicas, storage, max_bytes, max_consumers in LIMITS_CREATES:
                extra = {"max_bytes": max_bytes} if max_bytes else {}
                if max_consumers:
                    extra["max_consumers"] = max_consumers
                await rec.api(f"$JS.API.STREAM.CREATE.{name}", stream(name, replicas, storage, **extra), None)
        finally:
            cluster.stop_all()
        return {"account_limits": LimitsCluster.app_jetstream, "cluster": cluster.name, "requests": rec.requests}


def main() -> None:
    assert NATS_SERVER, "nats-server 2.15.1 is not installed"
    recording = trio.run(record, NATS_SERVER)
    DATA.write_text(json.dumps(recording, indent=0) + "\n")
    print(f"wrote {DATA}: {len(recording['frames'])} frames, {len(recording['requests'])} requests;")
    print("\n".join(recording["steps"]))
    unique = trio.run(record_unique, NATS_SERVER)
    UNIQUE_DATA.write_text(json.dumps(unique, indent=0) + "\n")
    print(f"wrote {UNIQUE_DATA}: {[(r['subject'], r['response'].get('error')) for r in unique['requests']]}")
    limits = trio.run(record_limits, NATS_SERVER)
    LIMITS_DATA.write_text(json.dumps(limits, indent=0) + "\n")
    print(f"wrote {LIMITS_DATA}: {[(r['subject'], r['response'].get('error')) for r in limits['requests']]}")


if __name__ == "__main__":
    main()
