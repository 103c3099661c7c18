"""Record a 3-node nats-server 2.15.1 JetStream cluster changing replicas with consumers: an R3
stream S with a durable pull consumer P (10 of 20 fetched, 6 acked) and a durable push consumer
Q (no subscriber), scaled R3 -> R1 -> R3 (each update's answer, the stream's and consumers' info
once settled, how long it took); P's own replicas changed by update (R1, R3, above the stream's:
10126); STREAM.PEER.REMOVE of an R3 stream with consumers on three servers and of an R1 stream's
only server with an R1 consumer (the answers, the consumer's info after); and the time an R1
stream with a consumer holding 10,000 messages pending its ack takes to settle at R3 (the
stream and the consumer, no desired state left). Into
data/scale_consumers_nats_server_2.15.1.json; test_scale_consumers.py compares natserver's
answers with these (shapes, and the values that do not depend on time, names or randomness).

    python -m tests.jetstream.cluster.record_scale_consumers
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats

from tests.jetstream.cluster.record_r1 import request
from tests.jetstream.cluster.record_scale import create_when_ready, start_servers, stop_servers, write_recording

DATA = Path(__file__).parent / "data" / "scale_consumers_nats_server_2.15.1.json"
STEP_TIMEOUT = 120.0
SIZE = 3
ACK_WAIT = 300_000_000_000  # ns: nothing comes again while recording
PENDING = 10_000  # messages pending the consumer's ack in the timed scale up
PULL = {"durable_name": "P", "ack_policy": "explicit", "ack_wait": ACK_WAIT}
PUSH = {"durable_name": "Q", "ack_policy": "explicit", "ack_wait": ACK_WAIT, "deliver_subject": "q.deliver"}


async def settled_stream(nc, name: str, replicas: int) -> dict:
    deadline = time.monotonic() + STEP_TIMEOUT
    info: dict = {}
    while time.monotonic() < deadline:
        info = await request(nc, f"$JS.API.STREAM.INFO.{name}", None)
        cluster = info.get("cluster") or {}
        reps = cluster.get("replicas") or []
        if ("error" not in info and cluster.get("leader") and "desired" not in cluster
                and len(reps) == replicas - 1 and all(r.get("current") for r in reps)):
            return info
        await asyncio.sleep(0.1)
    return info


async def settled_consumer(nc, stream: str, name: str, replicas: int) -> dict:
    deadline = time.monotonic() + STEP_TIMEOUT
    info: dict = {}
    while time.monotonic() < deadline:
        try:
            info = await request(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}", None)
        except nats.errors.TimeoutError:
            info = {}
        cluster = info.get("cluster") or {}
        if ("error" not in info and cluster.get("leader") and "desired" not in cluster
                and len(cluster.get("replicas") or ()) == replicas - 1):
            return info
        await asyncio.sleep(0.1)
    return info


async def fetch_n(sub, count: int) -> list:
    """``count`` messages fetched (again while the consumer's leader is being elected)."""
    out: list = []
    deadline = time.monotonic() + STEP_TIMEOUT
    while len(out) < count and time.monotonic() < deadline:
        try:
            out += await sub.fetch(min(1000, count - len(out)), timeout=5)
        except (nats.errors.TimeoutError, nats.js.errors.APIError):
            await asyncio.sleep(0.2)
    return out


async def record(binary: str) -> dict:
    ports, procs = start_servers(binary, SIZE, "scalecrec-")
    out: dict = {}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://app:app@127.0.0.1:{ports['n1'][0]}")
        out["create"] = await create_when_ready(nc, "$JS.API.STREAM.CREATE.S", {
            "name": "S", "subjects": ["s.>"], "num_replicas": 3}, STEP_TIMEOUT)
        await settled_stream(nc, "S", 3)
        js = nc.jetstream()
        for n in range(1, 21):
            await js.publish(f"s.{n}", b"m%d" % n)
        out["pull_create"] = await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.P",
                                           {"stream_name": "S", "config": PULL})
        out["push_create"] = await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.Q",
                                           {"stream_name": "S", "config": PUSH})
        sub = await js.pull_subscribe_bind("P", "S")
        await settled_consumer(nc, "S", "P", 3)
        msgs = await fetch_n(sub, 10)
        for m in msgs[:6]:
            await m.ack_sync()
        cfg = dict(out["create"]["config"])
        steps = []
        for replicas in (1, 3):
            cfg["num_replicas"] = replicas
            started = time.monotonic()
            answer = await request(nc, "$JS.API.STREAM.UPDATE.S", cfg)
            info = await settled_stream(nc, "S", replicas)
            pull = await settled_consumer(nc, "S", "P", replicas)
            push = await settled_consumer(nc, "S", "Q", replicas)
            steps.append({"replicas": replicas, "update": answer, "info": info, "pull": pull, "push": push,
                          "seconds": round(time.monotonic() - started, 2)})
        out["steps"] = steps
        more = await fetch_n(sub, 10)
        out["fetched_after"] = [m.metadata.sequence.stream for m in more]

        consumer_steps = []
        for replicas in (1, 3, 5):
            answer = await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.P",
                                   {"stream_name": "S", "config": dict(PULL, num_replicas=replicas)})
            info = await settled_consumer(nc, "S", "P", replicas) if "error" not in answer else None
            consumer_steps.append({"replicas": replicas, "update": answer, "info": info})
        out["consumer_steps"] = consumer_steps

        out["peer_remove_r3"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", {"peer": "n2"})
        await request(nc, "$JS.API.STREAM.CREATE.ONE", {"name": "ONE", "subjects": ["one.>"]})
        await settled_stream(nc, "ONE", 1)
        for n in range(3):
            await js.publish("one.a", b"x%d" % n)
        await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.ONE.D", {"stream_name": "ONE", "config": PULL})
        one = await js.pull_subscribe_bind("D", "ONE")
        await settled_consumer(nc, "ONE", "D", 1)
        for m in await fetch_n(one, 2):
            await m.ack_sync()
        host = (await request(nc, "$JS.API.STREAM.INFO.ONE", None))["cluster"]["leader"]
        out["peer_remove_r1"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.ONE", {"peer": host})
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            info = await settled_stream(nc, "ONE", 1)
            if info.get("cluster", {}).get("leader") not in (None, host):
                break
            await asyncio.sleep(0.2)
        out["peer_remove_r1_info"] = info
        out["peer_remove_r1_consumer"] = await settled_consumer(nc, "ONE", "D", 1)

        # The timed scale up: an R1 stream, a consumer with PENDING messages pending its ack.
        await request(nc, "$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big.>"]})
        await settled_stream(nc, "BIG", 1)
        for n in range(PENDING):
            await nc.publish("big.a", b"x")
        await nc.flush()
        await js.publish("big.a", b"last")
        await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.BIG.D", {"stream_name": "BIG", "config": dict(
            PULL, durable_name="D", max_ack_pending=-1)})
        big = await js.pull_subscribe_bind("D", "BIG")
        await settled_consumer(nc, "BIG", "D", 1)
        await fetch_n(big, PENDING)
        before = await request(nc, "$JS.API.CONSUMER.INFO.BIG.D", None)
        big_cfg = (await request(nc, "$JS.API.STREAM.INFO.BIG", None))["config"]
        started = time.monotonic()
        await request(nc, "$JS.API.STREAM.UPDATE.BIG", dict(big_cfg, num_replicas=3))
        await settled_stream(nc, "BIG", 3)
        stream_seconds = time.monotonic() - started
        after = await settled_consumer(nc, "BIG", "D", 3)
        out["big"] = {"pending": PENDING, "before": before, "after": after,
                      "stream_seconds": round(stream_seconds, 2),
                      "seconds": round(time.monotonic() - started, 2)}
        await nc.close()
    finally:
        stop_servers(procs)
    return out


def main() -> None:
    write_recording(record, DATA)


if __name__ == "__main__":
    main()
