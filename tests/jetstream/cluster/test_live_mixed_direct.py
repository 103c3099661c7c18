"""Direct gets of a replicated stream in a mixed cluster: one natserver (``n3``) and two
nats-server 2.15.1 (runs when the 2.15.1 binary is found, as the other live tests). An R3
stream with allow_direct on all three, led by a 2.15.1 server: the natserver follower joins the
direct gets' ``_sys_`` queue group beside the 2.15.1 replicas once current (stream.go
subscribeToDirect), answers its own clients' gets (a local member first), and goes on answering
them with both 2.15.1 servers down (no leader, as a 2.15.1 follower does: recorded in
data/offline_nats_server_2.15.1.json, ``$JS.API.DIRECT.GET.R3``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import trio

from tests.jetstream.cluster.test_live_mixed import POLL, STEP, bounded, running, until_created
from tests.jetstream.cluster.test_live_mixed_r3 import lead_stream_with, publish
from tests.raft.nrg_cluster import APP_USER, PASSWORD, tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 120  # seconds for the whole test (2.15.1 elections take 4-9 s)
GET_TIMEOUT = 5.0
STREAM = {"name": "M3", "subjects": ["m3.>"], "num_replicas": 3, "allow_direct": True}


def direct_get(port: int, subject: str) -> tuple[dict, bytes]:
    """A direct get through a nats-py client of the server at ``port`` (in a thread of its own:
    the natserver runs in the test's trio loop)."""
    async def get():
        nc = await nats.connect(f"nats://127.0.0.1:{port}", user=APP_USER, password=PASSWORD,
                                allow_reconnect=False)
        try:
            msg = await nc.request(subject, b"", timeout=GET_TIMEOUT)
            return dict(msg.headers or {}), msg.data
        finally:
            await nc.close()
    return asyncio.run(get())


async def scenario(binary: str, folder: Path) -> dict:
    report: dict = {}
    async with running(binary, folder) as (cluster, server):
        go1, go2, py = cluster.nodes
        await until_created(go1.port, "$JS.API.STREAM.CREATE.M3", STREAM)
        report["leader"] = await lead_stream_with(go1.port, {"n1", "n2"})
        for n in range(3):
            await publish(py.port, f"m3.{n}", n)
        direct = server.jetstream.cluster.direct
        with trio.fail_after(STEP):
            while direct.serving("APP", "M3") != ("M3",):
                await trio.sleep(POLL)

        # The natserver's clients: answered by the natserver's replica (2.15.1's headers).
        for n in range(3):
            before = direct.answered("APP", "M3")
            headers, data = await trio.to_thread.run_sync(direct_get, py.port, f"$JS.API.DIRECT.GET.M3.m3.{n}")
            assert data == b'{"n": %d}' % n and headers["Nats-Sequence"] == str(n + 1), (headers, data)
            assert headers["Nats-Stream"] == "M3" and headers["Nats-Subject"] == f"m3.{n}", headers
            assert direct.answered("APP", "M3") == before + 1
        # A 2.15.1 server's clients: answered (by a 2.15.1 replica, its own first).
        _, data = await trio.to_thread.run_sync(direct_get, go1.port, "$JS.API.DIRECT.GET.M3.m3.2")
        assert data == b'{"n": 2}'

        # Both 2.15.1 servers down: no leader, the natserver follower still answers.
        cluster.kill(go1)
        cluster.kill(go2)
        headers, data = await trio.to_thread.run_sync(direct_get, py.port, "$JS.API.DIRECT.GET.M3.m3.1")
        assert data == b'{"n": 1}' and headers["Nats-Sequence"] == "2", (headers, data)
        report["answered"] = direct.answered("APP", "M3")
    return report


@needs_nats_server
def test_direct_gets_of_an_r3_stream_answered_by_a_natserver_follower_beside_2_15_1_replicas():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    # (4 gets from its own clients; the 2.15.1 client's may come to it too, when n1 was not yet current)
    assert report["leader"] in ("n1", "n2") and report["answered"] >= 4
