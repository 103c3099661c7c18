"""Record a 3-node nats-server 2.15.1 JetStream cluster (no accounts: ``$G``) answering the
API for R1 streams and consumers: creates, infos, updates, names, lists, account info, a
consumer's create and info, deletes, and an R3 create. Into data/r1_nats_server_2.15.1.json;
the tests compare natserver's answers in a natserver cluster with these (shapes and values
that do not depend on time or randomness).

    python -m tests.jetstream.cluster.record_r1
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import nats

from tests.raft.nrg_cluster import free_port
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "r1_nats_server_2.15.1.json"
CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
jetstream { store_dir: "%(store)s" }
cluster { name: C, listen: 127.0.0.1:%(cport)d, routes [%(routes)s] }
"""
STEP_TIMEOUT = 30.0


async def request(nc, subject: str, body) -> dict:
    payload = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(subject, payload, timeout=5)
    return json.loads(msg.data)


async def record(binary: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="r1rec-"))
    names = ["n1", "n2", "n3"]
    ports = {n: (free_port(), free_port()) for n in names}
    procs = []
    for n in names:
        routes = ", ".join(f"nats-route://127.0.0.1:{ports[o][1]}" for o in names if o != n)
        conf = folder / f"{n}.conf"
        conf.write_text(CONFIG % {"name": n, "port": ports[n][0], "store": folder / n, "cport": ports[n][1],
                                  "routes": routes})
        procs.append(subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    out: dict = {"requests": []}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://127.0.0.1:{ports['n1'][0]}")
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                info = await request(nc, "$JS.API.INFO", None)
                if "error" not in info:
                    break
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            await asyncio.sleep(0.2)

        async def step(subject: str, body) -> dict:
            try:
                answer = await request(nc, subject, body)
            except nats.errors.TimeoutError:
                answer = {"timeout": True}
            out["requests"].append({"subject": subject, "request": body, "response": answer})
            return answer

        await step("$JS.API.INFO", None)
        await step("$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["s1.>"], "storage": "file"})
        await step("$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["s1.>"], "storage": "file"})
        await step("$JS.API.STREAM.CREATE.S2", {"name": "S2", "subjects": ["s2.>"], "storage": "memory",
                                                "num_replicas": 1})
        await step("$JS.API.STREAM.CREATE.S3", {"name": "S3", "subjects": ["s1.a"]})
        await step("$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3})
        await step("$JS.API.STREAM.DELETE.R3", None)
        for i in range(3):
            await nc.publish("s1.x", b"hello %d" % i)
        await nc.flush()
        await asyncio.sleep(0.5)
        await step("$JS.API.STREAM.INFO.S1", None)
        await step("$JS.API.STREAM.INFO.NOPE", None)
        await step("$JS.API.STREAM.UPDATE.S1", {"name": "S1", "subjects": ["s1.>"], "max_msgs": 100})
        await step("$JS.API.STREAM.NAMES", None)
        await step("$JS.API.STREAM.LIST", None)
        await step("$JS.API.CONSUMER.CREATE.S1.D1", {"stream_name": "S1", "config": {
            "durable_name": "D1", "ack_policy": "explicit"}})
        await step("$JS.API.CONSUMER.CREATE.S1", {"stream_name": "S1", "config": {"ack_policy": "none",
                                                                                   "inactive_threshold": 60_000_000_000}})
        await step("$JS.API.CONSUMER.INFO.S1.D1", None)
        await step("$JS.API.CONSUMER.NAMES.S1", None)
        await step("$JS.API.CONSUMER.INFO.S1.NOPE", None)
        await step("$JS.API.INFO", None)
        await step("$JS.API.CONSUMER.DELETE.S1.D1", None)
        await step("$JS.API.STREAM.DELETE.S2", None)
        await step("$JS.API.STREAM.DELETE.NOPE", None)
        await step("$JS.API.META.LEADER.STEPDOWN", None)
        await nc.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    return out


def main() -> None:
    started = time.monotonic()
    data = asyncio.run(record(NATS_SERVER))
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print(f"recorded {len(data['requests'])} requests in {time.monotonic() - started:.1f} s into {DATA}")


if __name__ == "__main__":
    main()
