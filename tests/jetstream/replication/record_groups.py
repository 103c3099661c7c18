"""Record what nats-server 2.15.1's stream and consumer groups replicate, into
data/groups_nats_server_2.15.1.json.

``python -m tests.jetstream.replication.record_groups``: a 3-node 2.15.1 JetStream cluster
(tests/raft/nrg_cluster.py); a nats-py client in the system account subscribed to ``$NRG.>``
(one subscriber sees every group's frames: the routes send it all), and to ``$JSC.>`` (a
stream's catch-up of messages after a snapshot); R3 streams (file with atomic
batches, memory, file with s2 compression); publishes with and without headers, a duplicate
message id, a payload over the 8 KiB compression threshold; a durable pull and a push consumer
with deliveries, acks and a nak; a message delete, an atomic batch, purges (by subject, keep,
all); then a follower killed, more published, the other two stopped gracefully (each group
snapshots on shutdown) and restarted, and the follower restarted (caught up from a snapshot).
After every step the frame count, STREAM.INFO, every message's STREAM.MSG.GET and CONSUMER.INFO
are written, so that a replay of the frames up to that count can be compared with them. The
snapshot files each server left on disk are written too.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import nats

from tests.raft.nrg_cluster import APP_USER, PASSWORD, SYS_USER, Cluster, tempdir
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "groups_nats_server_2.15.1.json"
SETTLE = 1.5  # seconds after each step for the groups to commit and apply
STEP_TIMEOUT = 30.0
ACCOUNT_USAGE_PREFIX = "$JSC.ARU."  # jetstream_cluster.go jsaUpdatesSubj: account usage, not recorded
UNCHANGED = "unchanged"  # a point's STREAM.MSG.GET answers that are the point before's
BIG = 10_000  # over jetstream_cluster.go's compressThreshold (8 KiB)

STREAMS = {
    "S1": {"name": "S1", "subjects": ["s1.>"], "num_replicas": 3, "storage": "file", "allow_atomic": True},
    "S2": {"name": "S2", "subjects": ["s2.>"], "num_replicas": 3, "storage": "memory"},
    "S3": {"name": "S3", "subjects": ["s3.>"], "num_replicas": 3, "storage": "file", "compression": "s2"},
}
CONSUMERS = {
    "PULL": {"durable_name": "PULL", "ack_policy": "explicit", "ack_wait": 60_000_000_000},
    "PUSH": {"durable_name": "PUSH", "ack_policy": "explicit", "deliver_subject": "push.deliver",
             "ack_wait": 60_000_000_000},
}


class Recorder:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.frames: list[dict] = []
        self.points: list[dict] = []
        self.start = time.monotonic()
        self.nc: Any = None
        self.last_msgs: dict[str, dict] = {}

    async def connect_app(self) -> None:
        # The sniffer's server first: the killed follower is never the one the client is on.
        urls = [f"nats://127.0.0.1:{n.port}" for n in self.cluster.nodes]
        self.nc = await nats.connect(servers=urls, dont_randomize=True, user=APP_USER, password=PASSWORD, max_reconnect_attempts=-1,
                                     reconnect_time_wait=0.2)

    async def api(self, subject: str, body: Any = None) -> dict:
        data = b"" if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            try:
                msg = await self.nc.request(subject, data, timeout=5)
                answer = json.loads(msg.data)
                code = answer.get("error", {}).get("code")
                if code == 503 and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    continue
                return answer
            except nats.errors.TimeoutError:
                if time.monotonic() > deadline:
                    raise
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def publish(self, subject: str, payload: bytes, headers: dict | None = None) -> dict:
        """A publish acknowledged; again while no server answers (a stream electing a leader
        after a kill has no responder: nothing was stored)."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            try:
                msg = await self.nc.request(subject, payload, timeout=10, headers=headers)
                return json.loads(msg.data)
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def wait_leader(self, stream: str, consumer: str = "") -> str:
        deadline = time.monotonic() + STEP_TIMEOUT
        subject = f"$JS.API.CONSUMER.INFO.{stream}.{consumer}" if consumer else f"$JS.API.STREAM.INFO.{stream}"
        while time.monotonic() < deadline:
            info = await self.api(subject)
            cl = info.get("cluster", {})
            if cl.get("leader") and len([r for r in cl.get("replicas", []) if r.get("current")]) == 2:
                return cl["leader"]
            await asyncio.sleep(0.3)
        raise TimeoutError(f"no leader for {stream} {consumer}")

    async def point(self, step: str, consumers: bool = True) -> None:
        await asyncio.sleep(SETTLE)
        point: dict[str, Any] = {"step": step, "frames": len(self.frames), "streams": {}, "consumers": {}}
        for name in STREAMS:
            info = await self.api(f"$JS.API.STREAM.INFO.{name}")
            state = info.get("state", {})
            msgs = {}
            for seq in range(state.get("first_seq", 1), state.get("last_seq", 0) + 1):
                msgs[str(seq)] = await self.api(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
            last = self.last_msgs.get(name)
            self.last_msgs[name] = msgs
            # the same answers as at the point before: written once (recorded.point resolves it)
            point["streams"][name] = {"info": info, "msgs": UNCHANGED if msgs == last else msgs}
        if consumers:
            for name in CONSUMERS:
                point["consumers"][name] = await self.api(f"$JS.API.CONSUMER.INFO.S1.{name}")
        self.points.append(point)
        print(f"{time.monotonic() - self.start:7.2f} {step}: {len(self.frames)} frames", flush=True)


async def record(binary: str) -> dict:
    with tempdir() as folder:
        cluster = Cluster.create(binary, Path(folder))
        cluster.start_all()
        rec = Recorder(cluster)
        snapshots: dict[str, str] = {}
        try:
            await asyncio.sleep(1.0)
            sniffer_node = cluster.nodes[0]
            sys_nc = await nats.connect(f"nats://127.0.0.1:{sniffer_node.port}", user=SYS_USER, password=PASSWORD)

            async def on_frame(msg: Any) -> None:
                if msg.subject.startswith(ACCOUNT_USAGE_PREFIX):
                    return  # the servers' account usage updates: not the groups'
                rec.frames.append({"t": round(time.monotonic() - rec.start, 3), "subject": msg.subject,
                                   "reply": msg.reply, "data": msg.data.hex()})

            await sys_nc.subscribe("$NRG.>", cb=on_frame)
            await sys_nc.subscribe("$JSC.>", cb=on_frame)
            await sys_nc.flush()
            await rec.connect_app()
            info = await rec.api("$JS.API.INFO")
            assert "error" not in info, info
            for name, config in STREAMS.items():
                created = await rec.api(f"$JS.API.STREAM.CREATE.{name}", config)
                assert "error" not in created, created
            for name in STREAMS:
                await rec.wait_leader(name)
            await rec.point("streams created", consumers=False)

            # Publishes: plain, with headers, a duplicate id, a payload over the compression threshold.
            for stream, prefix in (("S1", "s1"), ("S2", "s2"), ("S3", "s3")):
                await rec.publish(f"{prefix}.a", b"one")
                await rec.publish(f"{prefix}.b", b"two")
                await rec.publish(f"{prefix}.a", b"three", headers={"X-Test": "yes", "X-Other": "1"})
                await rec.publish(f"{prefix}.c", b"", headers={"Nats-Msg-Id": "dedup-1"})
                dup = await rec.publish(f"{prefix}.c", b"", headers={"Nats-Msg-Id": "dedup-1"})
                assert dup.get("duplicate"), dup
                await rec.publish(f"{prefix}.big", bytes(range(256)) * (BIG // 256) + b"x" * (BIG % 256))
                await rec.publish(f"{prefix}.b", b"six")
            await rec.point("published")

            push_msgs: list[Any] = []

            async def on_push(msg: Any) -> None:
                push_msgs.append(msg)

            await rec.nc.subscribe("push.deliver", cb=on_push)
            for name, config in CONSUMERS.items():
                created = await rec.api(f"$JS.API.CONSUMER.CREATE.S1.{name}", {"stream_name": "S1", "config": config})
                assert "error" not in created, created
                await rec.wait_leader("S1", name)
            await rec.point("consumers created")

            # The pull consumer: fetch 3, ack the first, nak the second, leave the third.
            inbox = rec.nc.new_inbox()
            sub = await rec.nc.subscribe(inbox)
            await rec.nc.publish("$JS.API.CONSUMER.MSG.NEXT.S1.PULL", json.dumps({"batch": 3, "expires": 5_000_000_000}).encode(),
                                 reply=inbox)
            fetched = [await sub.next_msg(timeout=10) for _ in range(3)]
            await sub.unsubscribe()
            await rec.point("pull fetched 3")
            await rec.nc.publish(fetched[0].reply, b"+ACK")
            await rec.nc.publish(fetched[1].reply, b"-NAK")
            await rec.nc.flush()
            await rec.point("pull ack 1, nak 2")
            # The push consumer: everything delivered, all but the last acked.
            deadline = time.monotonic() + STEP_TIMEOUT
            while len(push_msgs) < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            for msg in push_msgs[:5]:
                await rec.nc.publish(msg.reply, b"+ACK")
            await rec.nc.flush()
            await rec.point("push delivered 6, acked 5")

            deleted = await rec.api("$JS.API.STREAM.MSG.DELETE.S1", {"seq": 2})
            assert deleted.get("success"), deleted
            await rec.point("deleted S1 seq 2")

            # An atomic batch of three.
            for i in range(1, 4):
                headers = {"Nats-Batch-Id": "batch-1", "Nats-Batch-Sequence": str(i)}
                if i == 3:
                    headers["Nats-Batch-Commit"] = "1"
                    ack = await rec.publish("s1.batch", f"batch {i}".encode(), headers=headers)
                    assert ack.get("batch") == "batch-1", ack
                else:
                    await rec.nc.publish("s1.batch", f"batch {i}".encode(), headers=headers)
            await rec.point("atomic batch of 3")

            # Pull again (a redelivery of the nak'd one and new ones), ack all.
            inbox = rec.nc.new_inbox()
            sub = await rec.nc.subscribe(inbox)
            await rec.nc.publish("$JS.API.CONSUMER.MSG.NEXT.S1.PULL", json.dumps({"batch": 2, "expires": 5_000_000_000}).encode(),
                                 reply=inbox)
            fetched = [await sub.next_msg(timeout=10) for _ in range(2)]
            await sub.unsubscribe()
            for msg in fetched:
                await rec.nc.publish(msg.reply, b"+ACK")
            await rec.nc.flush()
            await rec.point("pull fetched 2, acked")

            for body, step in (({"filter": "s1.a"}, "purged s1.a"), ({"keep": 2}, "purged keep 2"),
                               ({}, "purged all")):
                purged = await rec.api("$JS.API.STREAM.PURGE.S1", body)
                assert purged.get("success"), purged
                await rec.point(step)
            for i in range(2):
                await rec.publish("s1.after", f"after {i}".encode())
            await rec.point("published after purge")

            # A lagging follower caught up from a snapshot.
            leader = await rec.wait_leader("S1")
            follower = next(n for n in cluster.nodes if n.name != leader and n is not sniffer_node)
            cluster.kill(follower)
            for i in range(3):
                await rec.publish("s1.lag", f"lag {i}".encode())
                await rec.publish("s2.lag", f"lag {i}".encode())
            await rec.point(f"killed {follower.name}, published", consumers=False)
            others = [n for n in cluster.nodes if n is not follower]
            for node in others:
                if node is not sniffer_node:
                    assert node.process is not None
                    node.process.send_signal(signal.SIGTERM)
                    node.process.wait()
                    node.process = None
                    cluster.start(node)
                    await asyncio.sleep(2.0)
            # The sniffer's server last (the sniffer reconnects to it).
            await sys_nc.close()
            assert sniffer_node.process is not None
            sniffer_node.process.send_signal(signal.SIGTERM)
            sniffer_node.process.wait()
            sniffer_node.process = None
            for node in others:
                for path in sorted((node.folder / "store").rglob("snapshots/snap.*")):
                    snapshots[f"{node.name}:{path.relative_to(node.folder / 'store')}"] = path.read_bytes().hex()
            cluster.start(sniffer_node)
            await asyncio.sleep(1.0)
            sys_nc = await nats.connect(f"nats://127.0.0.1:{sniffer_node.port}", user=SYS_USER, password=PASSWORD)
            await sys_nc.subscribe("$NRG.>", cb=on_frame)
            await sys_nc.subscribe("$JSC.>", cb=on_frame)
            await sys_nc.flush()
            rec.frames.append({"t": round(time.monotonic() - rec.start, 3), "subject": "", "reply": "",
                               "data": "", "note": "graceful restarts (the sniffer missed frames)"})
            await rec.point("restarted the other two", consumers=False)
            cluster.start(follower)
            await asyncio.sleep(6.0)
            await rec.wait_leader("S1")
            await rec.point(f"restarted {follower.name}")
            await sys_nc.close()
            await rec.nc.close()
        finally:
            cluster.stop_all()
        return {"servers": [n.name for n in cluster.nodes], "streams": STREAMS, "consumers": CONSUMERS,
                "points": rec.points, "snapshots": snapshots, "frames": rec.frames}


def main() -> None:
    assert NATS_SERVER, "nats-server 2.15.1 is not installed"
    recording = asyncio.run(record(NATS_SERVER))
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(recording, indent=0) + "\n")
    print(f"wrote {DATA}: {len(recording['frames'])} frames, {len(recording['points'])} points")


if __name__ == "__main__":
    main()
