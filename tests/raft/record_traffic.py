"""Record nats-server 2.15.1's RAFT traffic into data/nrg_traffic_nats_server_2.15.1.json.

``python -m tests.raft.record_traffic``: a 3-node 2.15.1 JetStream cluster (server names, a
system account, routes); raw clients subscribed to ``$NRG.>`` in the system account on two of
the nodes; an R3 stream created and published to; its leader killed (kill -9), a new leader
elected, more published; the killed node restarted and caught up. Every frame one surviving
sniffer saw is written, in order, with its subject, reply and bytes (hex).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import trio

from tests.raft.nrg_cluster import (
    SYS_USER,
    Client,
    Cluster,
    app_request,
    tempdir,
    wait_meta_leader,
    wait_stream_leader,
)
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "nrg_traffic_nats_server_2.15.1.json"
STREAM = "ORDERS"
SETTLE = 3.0  # seconds of traffic after each step (heartbeats, commits, responses)


async def sniff(port: int, frames: list, start: float) -> None:
    client = await Client.open(port, SYS_USER)
    await client.sub("$NRG.>")
    await client.flush()
    try:
        while True:
            subject, reply, data = await client.next_msg()
            frames.append({"t": round(time.monotonic() - start, 3), "subject": subject,
                           "reply": reply, "data": data.hex()})
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def record(binary: str) -> dict:
    with tempdir() as folder:
        cluster = Cluster.create(binary, Path(folder))
        cluster.start_all()
        start = time.monotonic()
        frames: dict[str, list] = {"n1": [], "n2": []}
        steps = []
        try:
            async with trio.open_nursery() as nursery:
                await trio.sleep(1.0)  # the servers listening
                for name in frames:
                    nursery.start_soon(sniff, cluster.by_name(name).port, frames[name], start)
                await wait_meta_leader(cluster.nodes)
                steps.append(("meta leader", time.monotonic() - start))
                port = cluster.nodes[0].port
                config = {"name": STREAM, "subjects": ["orders.>"], "num_replicas": 3, "storage": "file"}
                created = await app_request(port, f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(config).encode())
                assert "error" not in created, created
                leader = await wait_stream_leader(cluster.nodes, STREAM)
                steps.append((f"stream created, leader {leader}", time.monotonic() - start))
                for i in range(5):
                    ack = await app_request(port, f"orders.{i}", f"order {i}".encode())
                    assert ack.get("seq") == i + 1, ack
                await trio.sleep(SETTLE)
                killed = cluster.by_name(leader)
                cluster.kill(killed)
                steps.append((f"killed {leader}", time.monotonic() - start))
                alive = [n for n in cluster.nodes if n.process is not None]
                new_leader = await wait_stream_leader(alive, STREAM, exclude=leader)
                steps.append((f"new leader {new_leader}", time.monotonic() - start))
                for i in range(5, 8):
                    ack = await app_request(alive[0].port, f"orders.{i}", f"order {i}".encode())
                    assert ack.get("seq") == i + 1, ack
                await trio.sleep(SETTLE)
                cluster.start(killed)
                steps.append((f"restarted {leader}", time.monotonic() - start))
                await trio.sleep(3 * SETTLE)
                nursery.cancel_scope.cancel()
        finally:
            cluster.stop_all()
        sniffer = "n2" if leader == "n1" else "n1"
        return {
            "servers": {n.name: n.name for n in cluster.nodes},
            "stream": STREAM, "first_leader": leader, "second_leader": new_leader,
            "steps": [f"{t:.3f} {what}" for what, t in steps],
            "sniffer": sniffer, "frames": frames[sniffer],
        }


def main() -> None:
    assert NATS_SERVER, "nats-server 2.15.1 is not installed"
    recording = trio.run(record, NATS_SERVER)
    DATA.write_text(json.dumps(recording, indent=0) + "\n")
    print(f"wrote {DATA}: {len(recording['frames'])} frames; {recording['steps']}")


if __name__ == "__main__":
    main()
