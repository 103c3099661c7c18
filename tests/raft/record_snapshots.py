"""Record the snapshot files nats-server 2.15.1 writes into data/snapshots_nats_server_2.15.1/.

``python -m tests.raft.record_snapshots``: a 3-node 2.15.1 JetStream cluster, an R3 stream
created and published to, every server stopped cleanly (SIGTERM: the meta and stream groups
snapshot on the way out); the first server's ``snapshots/snap.<term>.<index>`` of each group is
kept, under the group's name (the checksum's key).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import trio

from tests.raft.nrg_cluster import APP_USER, Client, Cluster, app_request, tempdir, wait_meta_leader, wait_stream_leader
from tests.reference import NATS_SERVER

DATA = Path(__file__).parent / "data" / "snapshots_nats_server_2.15.1"


async def record() -> None:
    with tempdir() as folder:
        cluster = Cluster.create(NATS_SERVER, Path(folder))
        cluster.start_all()
        try:
            await wait_meta_leader(cluster.nodes)
            config = {"name": "S", "subjects": ["s.>"], "num_replicas": 3, "storage": "file"}
            await app_request(cluster.nodes[0].port, "$JS.API.STREAM.CREATE.S", json.dumps(config).encode())
            await wait_stream_leader(cluster.nodes, "S")
            client = await Client.open(cluster.nodes[0].port, APP_USER)
            for i in range(5):
                await client.request("s.x", b"hello %d" % i)
            for node in cluster.nodes:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
                node.process.wait()
                node.process = None
        finally:
            cluster.stop_all()
        shutil.rmtree(DATA, ignore_errors=True)
        for snaps in Path(folder, "n1").rglob("snapshots"):
            shutil.copytree(snaps, DATA / snaps.parent.name / "snapshots")


if __name__ == "__main__":
    trio.run(record)
