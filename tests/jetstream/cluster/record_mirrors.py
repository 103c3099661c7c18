"""Record a 3-node nats-server 2.15.1 JetStream cluster (no accounts: ``$G``) answering for
mirrors (the nats.js test "jetstream - mirror alternates"): ``src`` (subjects A, B) and an R3
``mirror`` of it, STREAM.NAMES with subject "A", STREAM.INFO of both (``alternates``: the stream
and its mirrors, stream info only, in a cluster only), and an R3 ``sourced`` stream's info (its
``sources`` block); and a single 2.15.1 server's STREAM.INFO of the same pair (no alternates).
Into data/mirrors_nats_server_2.15.1.json; test_r3_mirrors.py compares natserver's answers with
these (shapes, and the values that do not depend on time, names or randomness).

    python -m tests.jetstream.cluster.record_mirrors
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import nats

from tests.jetstream.cluster.record_r1 import CONFIG, STEP_TIMEOUT, request
from tests.raft.nrg_cluster import free_port
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "mirrors_nats_server_2.15.1.json"
SINGLE = """
server_name: single
listen: 127.0.0.1:%(port)d
jetstream { store_dir: "%(store)s" }
"""
SRC = {"name": "src", "subjects": ["A", "B"], "num_replicas": 3}
MIRROR = {"name": "mirror", "mirror": {"name": "src"}, "num_replicas": 3}
SOURCED = {"name": "sourced", "subjects": ["C"], "num_replicas": 3, "sources": [{"name": "src", "filter_subject": "A"}]}
SETTLE = 2.0  # seconds for the links to catch up before the infos are asked for


async def until_created(nc, config: dict) -> dict:
    deadline = time.monotonic() + STEP_TIMEOUT
    last: dict = {}
    while time.monotonic() < deadline:
        try:
            last = await request(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config)
            if "error" not in last:
                return last
        except Exception:  # noqa: BLE001 - not ready yet
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"{config['name']} not created: {last}")


async def exchange(nc, replicas: int) -> dict:
    out: dict = {}
    for config in (SRC, MIRROR, SOURCED):
        out[f"create_{config['name']}"] = await until_created(nc, {**config, "num_replicas": replicas})
    for subject in ("A", "B", "A"):
        await nc.request(subject, b"x", timeout=5)
    await asyncio.sleep(SETTLE)
    out["names_A"] = await request(nc, "$JS.API.STREAM.NAMES", {"subject": "A"})
    for name in ("src", "mirror", "sourced"):
        out[f"info_{name}"] = await request(nc, f"$JS.API.STREAM.INFO.{name}", None)
    out["list"] = await request(nc, "$JS.API.STREAM.LIST", None)
    return out


def start(binary: str, conf: Path, text: str) -> subprocess.Popen:
    conf.write_text(text)
    return subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def record(binary: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="mirrec-"))
    names = ["n1", "n2", "n3"]
    ports = {n: (free_port(), free_port()) for n in names}
    procs = []
    for n in names:
        routes = ", ".join(f"nats-route://127.0.0.1:{ports[o][1]}" for o in names if o != n)
        procs.append(start(binary, folder / f"{n}.conf", CONFIG % {
            "name": n, "port": ports[n][0], "store": folder / n, "cport": ports[n][1], "routes": routes}))
    single_port = free_port()
    procs.append(start(binary, folder / "single.conf", SINGLE % {"port": single_port, "store": folder / "single"}))
    out: dict = {}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://127.0.0.1:{ports['n1'][0]}")
        out["cluster"] = await exchange(nc, 3)
        await nc.close()
        nc = await nats.connect(f"nats://127.0.0.1:{single_port}")
        out["single"] = await exchange(nc, 1)
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
    print(f"recorded in {time.monotonic() - started:.1f} s into {DATA}")


if __name__ == "__main__":
    main()
