"""Record a 5-node nats-server 2.15.1 JetStream cluster (no accounts: ``$G``) answering requests
about streams whose servers are down (issue #32): an R1 stream ``S1`` and its durable ``C``
placed on n5, an R3 stream ``R3`` and its durable ``D`` on n3, n4, n5 (server tags: each server's name, "b" on those three), both with
allow_direct. First the account info and /jsz with every server up (tiers R1 and R3), then n4
and n5 stopped (the meta group keeps its quorum, S1 has no server, R3 no quorum): STREAM.INFO,
CONSUMER.INFO, MSG.GET, DIRECT.GET, publishes (an answer, no responders or a timeout), the
names and lists, the account info. Into data/offline_nats_server_2.15.1.json.

    python -m tests.jetstream.cluster.record_offline
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import nats

from tests.raft.nrg_cluster import free_port
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "offline_nats_server_2.15.1.json"
NAMES = ["n1", "n2", "n3", "n4", "n5"]
CONFIG = """
server_name: %(name)s
server_tags: [%(tags)s]
listen: 127.0.0.1:%(port)d
http: 127.0.0.1:%(http)d
jetstream { store_dir: "%(store)s" }
cluster { name: C, listen: 127.0.0.1:%(cport)d, routes [%(routes)s] }
"""
# Each server's name as a tag, and "b" on the three that hold R3.
TAGS = {n: ", ".join(f'"{t}"' for t in ([n, "b"] if n in ("n3", "n4", "n5") else [n])) for n in NAMES}
STEP_TIMEOUT = 30.0
REQUEST_TIMEOUT = 6.0  # (STREAM.LIST waits 4 s for the servers' infos)
S1 = {"name": "S1", "subjects": ["s1.>"], "num_replicas": 1, "allow_direct": True,
      "placement": {"tags": ["n5"]}}
R3 = {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3, "allow_direct": True,
      "placement": {"tags": ["b"]}}


async def answer(nc, subject: str, body, *, raw: bool = False) -> dict:
    payload = b"" if body is None else json.dumps(body).encode()
    try:
        msg = await nc.request(subject, payload, timeout=REQUEST_TIMEOUT)
    except nats.errors.NoRespondersError:
        return {"no_responders": True}
    except nats.errors.TimeoutError:
        return {"timeout": True}
    if raw or not msg.data:
        return {"headers": dict(msg.headers or {}), "data": msg.data.decode()}
    return json.loads(msg.data)


def launch(binary: str, folder: Path, ports: dict, name: str) -> subprocess.Popen:
    """Server ``name`` of the cluster (ports: client, route, monitoring), its routes to the others."""
    routes = ", ".join(f"nats-route://127.0.0.1:{ports[o][1]}" for o in NAMES if o != name)
    conf = folder / f"{name}.conf"
    conf.write_text(CONFIG % {"name": name, "port": ports[name][0], "store": folder / name, "cport": ports[name][1],
                              "http": ports[name][2], "routes": routes, "tags": TAGS[name]})
    return subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def record(binary: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="offrec-"))
    ports = {n: (free_port(), free_port(), free_port()) for n in NAMES}
    procs = {n: launch(binary, folder, ports, n) for n in NAMES}
    out: dict = {"requests": []}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://127.0.0.1:{ports['n1'][0]}")

        async def meta_ready() -> bool:  # (an account info answered: the meta group has a leader)
            return not {"error", "timeout", "no_responders"} & (await answer(nc, "$JS.API.INFO", None)).keys()
        deadline = time.monotonic() + STEP_TIMEOUT
        while not await meta_ready() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # (every server's STATSZ: placement by tags)

        async def step(label: str, subject: str, body=None, **options) -> dict:
            response = await answer(nc, subject, body, **options)
            out["requests"].append({"label": label, "subject": subject, "request": body, "response": response})
            return response

        await step("up", "$JS.API.STREAM.CREATE.S1", S1)
        await step("up", "$JS.API.STREAM.CREATE.R3", R3)
        await step("up", "$JS.API.CONSUMER.CREATE.S1.C", {"stream_name": "S1", "config": {
            "durable_name": "C", "ack_policy": "explicit"}})
        await step("up", "$JS.API.CONSUMER.CREATE.R3.D", {"stream_name": "R3", "config": {
            "durable_name": "D", "ack_policy": "explicit"}})
        for subject in ("s1.a", "r3.a"):
            await step("up", subject, {"x": 1})
        await asyncio.sleep(2)  # (usage: every 1.5 s)
        await step("up", "$JS.API.INFO")
        jsz = {}
        for n in NAMES:
            url = f"http://127.0.0.1:{ports[n][2]}/jsz?accounts=true"
            jsz[n] = json.loads(urllib.request.urlopen(url, timeout=5).read())
        out["jsz_up"] = jsz

        for n in ("n4", "n5"):
            procs[n].terminate()
            procs[n].wait(10)
        await asyncio.sleep(3)
        label = "down"
        await step(label, "$JS.API.STREAM.INFO.S1")
        await step(label, "$JS.API.STREAM.INFO.R3")
        await step(label, "$JS.API.CONSUMER.INFO.S1.C")
        await step(label, "$JS.API.CONSUMER.INFO.R3.D")
        await step(label, "$JS.API.STREAM.MSG.GET.S1", {"seq": 1})
        await step(label, "$JS.API.STREAM.MSG.GET.R3", {"seq": 1})
        await step(label, "$JS.API.DIRECT.GET.S1", {"seq": 1}, raw=True)
        await step(label, "$JS.API.DIRECT.GET.R3", {"seq": 1}, raw=True)
        await step(label, "s1.b", {"x": 2})
        await step(label, "r3.b", {"x": 2})
        await step(label, "$JS.API.STREAM.NAMES")
        await step(label, "$JS.API.STREAM.LIST")
        await step(label, "$JS.API.CONSUMER.NAMES.S1")
        await step(label, "$JS.API.CONSUMER.LIST.S1")
        await step(label, "$JS.API.CONSUMER.NAMES.R3")
        await step(label, "$JS.API.CONSUMER.LIST.R3")
        await step(label, "$JS.API.INFO")
        await nc.close()
    finally:
        running = [p for p in procs.values() if p.poll() is None]
        for p in running:
            p.terminate()
            p.wait(10)
    return out


if __name__ == "__main__":
    recording = asyncio.run(record(NATS_SERVER))
    DATA.write_text(json.dumps(recording, indent=1) + "\n")
    print(f"{len(recording['requests'])} answers recorded into {DATA}")

