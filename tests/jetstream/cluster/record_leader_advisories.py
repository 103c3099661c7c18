"""Record a 3-node nats-server 2.15.1 JetStream cluster's leader-elected advisories
(jetstream_cluster.go sendStreamLeaderElectAdvisory / sendConsumerLeaderElectAdvisory): accounts
APP (JetStream) and SYS, an R3 stream S and its R3 durable D created, then a stream and a
consumer step-down, then the meta leader's (DOMAIN.LEADER_ELECTED); every ``$JS.EVENT.ADVISORY.>`` message on a subscriber in each account.
Into data/leader_advisories_nats_server_2.15.1.json (the LEADER_ELECTED ones), which
test_leader_advisories.py compares natserver's with.

    python tests/jetstream/cluster/record_leader_advisories.py
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import nats

BINARY = os.path.expanduser("~/.cache/natserver-ci/nats-server-2.15.1/bin/nats-server")
OUT = Path(__file__).parent / "data" / "leader_advisories_nats_server_2.15.1.json"
RECORDED_WITH = ("nats-server 2.15.1, three servers s0-s2, accounts APP (JetStream) and SYS: an R3 stream S and "
                 "its R3 durable D created, then STREAM.LEADER.STEPDOWN, CONSUMER.LEADER.STEPDOWN and "
                 "META.LEADER.STEPDOWN; every "
                 "$JS.EVENT.ADVISORY.> message on a subscriber in each account")
CONFIG = """server_name: s%(i)d
listen: 127.0.0.1:%(port)d
jetstream { store_dir: "%(store)s" }
cluster { name: C, listen: 127.0.0.1:%(cport)d, routes [%(routes)s] }
accounts { SYS { users [{user: sys, password: pw}] }, APP { jetstream: enabled, users [{user: app, password: pw}] } }
system_account: SYS
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def main() -> None:
    folder = tempfile.mkdtemp()
    ports = [(free_port(), free_port()) for _ in range(3)]
    procs = []
    for i in range(3):
        conf = Path(folder) / f"s{i}.conf"
        routes = ", ".join(f"nats://127.0.0.1:{ports[j][1]}" for j in range(3) if j != i)
        conf.write_text(CONFIG % {"i": i, "port": ports[i][0], "cport": ports[i][1], "routes": routes,
                                  "store": f"{folder}/store{i}"})
        procs.append(subprocess.Popen([BINARY, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    try:
        await asyncio.sleep(1)
        nc = await nats.connect(f"nats://app:pw@127.0.0.1:{ports[0][0]}")
        sys_nc = await nats.connect(f"nats://sys:pw@127.0.0.1:{ports[1][0]}")
        got: list[dict] = []

        def keep(where: str):
            async def on(msg) -> None:
                got.append({"where": where, "subject": msg.subject, "data": json.loads(msg.data)})
            return on

        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=keep("APP"))
        await sys_nc.subscribe("$JS.EVENT.ADVISORY.>", cb=keep("SYS"))
        js = nc.jetstream()
        for _ in range(40):  # (until the meta group has a leader)
            try:
                await js.add_stream(name="S", subjects=["s.>"], num_replicas=3)
                break
            except Exception:  # noqa: BLE001 - no meta leader yet
                await asyncio.sleep(0.5)
        await js.add_consumer("S", durable_name="D", ack_policy="explicit")
        await asyncio.sleep(1)
        await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.S", b"", timeout=5)
        await asyncio.sleep(2)
        await nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.S.D", b"", timeout=5)
        await asyncio.sleep(2)
        await sys_nc.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=5)
        await asyncio.sleep(3)
        leaders = [g for g in got if "LEADER_ELECTED" in g["subject"]]
        OUT.write_text(json.dumps({"recorded_with": RECORDED_WITH, "advisories": leaders}, indent=1))
        await nc.close()
        await sys_nc.close()
    finally:
        for proc in procs:
            proc.terminate()


if __name__ == "__main__":
    asyncio.run(main())
