"""Record a 3-node nats-server 2.15.1 JetStream cluster (no accounts: ``$G``) answering for an R3
stream: its create (answered by the group's leader once elected), the PubAcks (a duplicate's
too, raw), STREAM.INFO with its cluster block, a message delete, a purge and the leader's
step-down. Into data/r3_nats_server_2.15.1.json; test_r3_streams.py compares natserver's
answers in a natserver cluster with these (shapes, and the values that do not depend on time,
names or randomness).

    python -m tests.jetstream.cluster.record_r3
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

DATA = Path(__file__).parent / "data" / "r3_nats_server_2.15.1.json"


async def record(binary: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="r3rec-"))
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
    out: dict = {}
    try:
        await asyncio.sleep(0.5)
        nc = await nats.connect(f"nats://127.0.0.1:{ports['n1'][0]}")
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                out["create"] = await request(nc, "$JS.API.STREAM.CREATE.R3", {
                    "name": "R3", "subjects": ["r3.>"], "num_replicas": 3})
                if "error" not in out["create"]:
                    break
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            await asyncio.sleep(0.5)
        out["acks"] = [(await nc.request("r3.a", b"x%d" % i, timeout=5)).data.decode() for i in range(3)]
        dup = [(await nc.request("r3.d", b"d", headers={"Nats-Msg-Id": "id-1"}, timeout=5)).data.decode()
               for _ in range(2)]
        out["dup_acks"] = dup
        await asyncio.sleep(1.5)
        out["info"] = await request(nc, "$JS.API.STREAM.INFO.R3", None)
        out["delete"] = await request(nc, "$JS.API.STREAM.MSG.DELETE.R3", {"seq": 2})
        out["delete_again"] = await request(nc, "$JS.API.STREAM.MSG.DELETE.R3", {"seq": 2})
        out["purge"] = await request(nc, "$JS.API.STREAM.PURGE.R3", {"filter": "r3.d"})
        out["stepdown"] = await request(nc, "$JS.API.STREAM.LEADER.STEPDOWN.R3", None)
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
