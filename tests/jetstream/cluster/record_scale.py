"""Record a 5-node nats-server 2.15.1 JetStream cluster (no accounts: ``$G``, and a system
account for SERVER.REMOVE) changing a stream's replicas by STREAM.UPDATE: R1 -> R3 (answered at
once with the new config, the group converging after), R3 -> R5, R5 -> R3, R3 -> R1, each
answer and the stream info once the group settled (the durable consumer's info too: its
replicas follow the stream's); and the error answers of STREAM.PEER.REMOVE and SERVER.REMOVE.
Into data/scale_nats_server_2.15.1.json; test_scale.py compares natserver's answers with these
(shapes, and the values that do not depend on time, names or randomness).

    python -m tests.jetstream.cluster.record_scale
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import nats

from tests.jetstream.cluster.record_r1 import request
from tests.raft.nrg_cluster import free_port
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "scale_nats_server_2.15.1.json"
CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
jetstream { store_dir: "%(store)s" }
cluster { name: C, listen: 127.0.0.1:%(cport)d, routes [%(routes)s] }
accounts { SYS { users [{user: sys, password: sys}] }, APP { jetstream: enabled, users [{user: app, password: app}] } }
system_account: SYS
"""
STEP_TIMEOUT = 30.0
SIZE = 5


def members_of(info: dict) -> list[str]:
    cluster = info.get("cluster") or {}
    return sorted([cluster.get("leader", "")] + [r["name"] for r in cluster.get("replicas") or ()])


async def settled(nc, replicas: int, gone: str = "") -> dict:
    """The stream info once its group has no desired state left and its cluster block lists
    replicas-1 current replicas (``gone`` not among them)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    info: dict = {}
    while time.monotonic() < deadline:
        info = await request(nc, "$JS.API.STREAM.INFO.S", None)
        cluster = info.get("cluster") or {}
        reps = cluster.get("replicas") or []
        if "error" not in info and cluster.get("leader") and "desired" not in cluster and len(
                reps) == replicas - 1 and all(r.get("current") for r in reps) and not (gone and gone in members_of(info)):
            return info
        await asyncio.sleep(0.25)
    return info


def start_servers(binary: str, size: int, prefix: str, config: str = CONFIG) -> tuple[dict[str, tuple[int, int]], list]:
    """``size`` 2.15.1 servers n1.. of one cluster (``config``: CONFIG's fields), in a new
    temporary folder: their (client, route) ports by name, and their processes."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    names = [f"n{i + 1}" for i in range(size)]
    ports = {n: (free_port(), free_port()) for n in names}
    procs = []
    for n in names:
        routes = ", ".join(f"nats-route://127.0.0.1:{ports[o][1]}" for o in names if o != n)
        conf = folder / f"{n}.conf"
        conf.write_text(config % {"name": n, "port": ports[n][0], "store": folder / n, "cport": ports[n][1],
                                  "routes": routes})
        procs.append(subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    return ports, procs


async def create_when_ready(nc, subject: str, body: dict, timeout: float = STEP_TIMEOUT) -> dict:
    """A create asked again while the cluster forms (no meta leader yet); its last answer."""
    answer: dict = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = await request(nc, subject, body)
            if "error" not in answer:
                break
        except Exception:  # noqa: BLE001 - not ready yet
            pass
        await asyncio.sleep(0.5)
    return answer


async def record(binary: str) -> dict:
    ports, procs = start_servers(binary, SIZE, "scalerec-")
    out: dict = {}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://app:app@127.0.0.1:{ports['n1'][0]}")
        sys_nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{ports['n1'][0]}")
        out["create"] = await create_when_ready(nc, "$JS.API.STREAM.CREATE.S", {
            "name": "S", "subjects": ["s.>"], "num_replicas": 1})
        for i in range(3):
            await nc.request("s.a", b"m%d" % i, timeout=5)
        out["consumer"] = await request(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S.D", {
            "stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        out["peer_remove_r1"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", {"peer": "n1"})
        cfg = dict(out["create"]["config"])
        steps = []
        for replicas in (3, 5, 3, 1):
            cfg["num_replicas"] = replicas
            started = time.monotonic()
            answer = await request(nc, "$JS.API.STREAM.UPDATE.S", cfg)
            info = await settled(nc, replicas)
            steps.append({"replicas": replicas, "update": answer, "info": info,
                          "consumer": await request(nc, "$JS.API.CONSUMER.INFO.S.D", None),
                          "seconds": round(time.monotonic() - started, 2)})
            await nc.request("s.a", b"after%d" % replicas, timeout=5)
        out["steps"] = steps
        cfg["num_replicas"] = 3
        await request(nc, "$JS.API.STREAM.UPDATE.S", cfg)
        info = await settled(nc, 3)
        out["peer_remove_unknown"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", {"peer": "nope"})
        out["peer_remove_empty"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", {})
        out["peer_remove_no_body"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", None)
        out["peer_remove_missing_stream"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.X", {"peer": "n1"})
        members = members_of(info)
        victim = info["cluster"]["replicas"][0]["name"]
        out["peer_remove"] = await request(nc, "$JS.API.STREAM.PEER.REMOVE.S", {"peer": victim})
        after = await settled(nc, 3, victim)
        out["peer_remove_info"] = after
        out["peer_remove_members"] = {"before": members, "victim": victim, "after": members_of(after)}
        out["server_remove_unknown"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": "nope"})
        out["server_remove_empty"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", {})
        info = await settled(nc, 3)
        victim = info["cluster"]["replicas"][0]["name"]
        out["server_remove"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": victim})
        out["server_remove_victim"] = victim
        after = await settled(nc, 3, victim)
        out["server_remove_info"] = after
        out["server_remove_again"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", {"peer": victim})
        await asyncio.sleep(2)
        out["server_remove_account_info"] = await request(nc, "$JS.API.INFO", None)
        out["server_remove_by_id_unknown"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", {"peer_id": "nope"})
        out["server_remove_bad_json"] = await request(sys_nc, "$JS.API.SERVER.REMOVE", "x")
        await nc.close()
        await sys_nc.close()
    finally:
        stop_servers(procs)
    return out


def stop_servers(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(10)


def write_recording(record_fn, data: Path) -> None:
    """``record_fn(binary)`` run against 2.15.1, its answers written into ``data``."""
    started = time.monotonic()
    out = asyncio.run(record_fn(NATS_SERVER))
    data.write_text(json.dumps(out, indent=1) + "\n")
    print(f"recorded in {time.monotonic() - started:.1f} s into {data}")


def main() -> None:
    write_recording(record, DATA)


if __name__ == "__main__":
    main()
