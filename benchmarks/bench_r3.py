"""R3 acknowledged publishes and an R3 consumer: a cluster of three natserver processes vs three
nats-server 2.15.1 processes on this machine, one file stream with num_replicas 3, all clients on
node 0. Three rates, one run each: one publisher waiting for each ack, 256 publishes in flight,
and then every stored message read through a durable pull consumer (replicated as its stream,
explicit acks) fetched FETCH_BATCH at a time, each message acked (nats-py's ``fetch`` and
``ack``, which waits for nothing: the acks are replicated by the consumer's leader).

    PYTHONPATH=$PWD python -m benchmarks.bench_r3 [--messages N] [--nats-server PATH]

Both kinds run from the same configuration file (server_name, jetstream {}, cluster {}):
``python -m natserver -c`` and ``nats-server -c``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

READY_TIMEOUT = 30.0  # seconds for the processes to listen and the stream to be created
PUB_TIMEOUT = 10.0  # seconds for one ack
IN_FLIGHT = 256
FETCH_BATCH = 100  # messages a consumer's fetch asks for
PAYLOAD = b"x" * 128
DEFAULT_MESSAGES = 2000
REFERENCE = os.path.expanduser("~/.cache/natserver-ci/nats-server-2.15.1/bin/nats-server")
GO_CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
jetstream { store_dir: "%(store)s" }
cluster { name: bench, listen: 127.0.0.1:%(cport)d, routes [%(routes)s] }
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_cluster(kind: str, folder: Path, binary: str) -> tuple[list[subprocess.Popen], list[int]]:
    names = ["b1", "b2", "b3"]
    ports = [(free_port(), free_port()) for _ in names]
    procs = []
    for i, name in enumerate(names):
        routes = [f"nats://127.0.0.1:{ports[j][1]}" for j in range(3) if j != i]
        store = str(folder / kind / name)
        conf = folder / f"{kind}-{name}.conf"
        conf.write_text(GO_CONFIG % {"name": name, "port": ports[i][0], "store": store, "cport": ports[i][1],
                                     "routes": ", ".join(routes)})
        cmd = [sys.executable, "-m", "natserver", "-c", str(conf)] if kind == "natserver" else [binary, "-c", str(conf)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs, [p for p, _ in ports]


async def connect(port: int, deadline: float):
    """A client of node 0, once it listens (before ``deadline``, time.monotonic())."""
    while True:
        try:
            return await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=2, allow_reconnect=False,
                                      error_cb=_quiet)
        except Exception:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def on_each_cluster(nats_server: str, prefix: str, run):
    """(kind, ``run(node 0's port)``) for a natserver cluster and, when the binary is there, a
    2.15.1 one; each cluster stopped and its stores removed after its run."""
    kinds = ["natserver"] + (["nats-server"] if os.path.exists(nats_server) else [])
    for kind in kinds:
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        procs, ports = start_cluster(kind, folder, nats_server)
        try:
            yield kind, run(ports[0])
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
            shutil.rmtree(folder, ignore_errors=True)


async def measure(port: int, messages: int) -> tuple[float, float, float]:
    deadline = time.monotonic() + READY_TIMEOUT
    nc = await connect(port, deadline)
    js = nc.jetstream(timeout=PUB_TIMEOUT)
    while True:
        try:
            await js.add_stream(name="R3", subjects=["r3"], num_replicas=3)
            await js.publish("r3", PAYLOAD)  # (the leader elected and subscribed)
            break
        except Exception:  # noqa: BLE001 - no meta leader or stream leader yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)

    started = time.perf_counter()
    for _ in range(messages):
        await js.publish("r3", PAYLOAD)
    one = messages / (time.perf_counter() - started)

    count = messages * 4
    left = [count]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await js.publish("r3", PAYLOAD)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    many = count / (time.perf_counter() - started)
    info = await js.stream_info("R3")
    stored = 1 + messages + count
    assert info.state.messages == stored, info.state

    sub = await js.pull_subscribe("r3", durable="C3", stream="R3")
    started = time.perf_counter()
    got = 0
    while got < stored:
        for msg in await sub.fetch(min(FETCH_BATCH, stored - got), timeout=PUB_TIMEOUT):
            await msg.ack()
            got += 1
    consumed = stored / (time.perf_counter() - started)
    info = await js.consumer_info("R3", "C3")
    assert info.delivered.stream_seq == stored and info.num_pending == 0, info
    await nc.close()
    return one, many, consumed


async def _quiet(error: Exception) -> None:
    """(nats-py prints every refused connection while the servers start)"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--nats-server", default=os.environ.get("NATS_SERVER_REFERENCE") or REFERENCE)
    args = parser.parse_args()
    runs = on_each_cluster(args.nats_server, "bench-r3-", lambda port: asyncio.run(measure(port, args.messages)))
    for kind, (one, many, consumed) in runs:
        print(f"{kind:12s} R3 file stream: {one:8.0f} acked msgs/s waiting for each, "
              f"{many:8.0f} msgs/s with {IN_FLIGHT} in flight, "
              f"{consumed:8.0f} msgs/s through an R3 pull consumer (fetch {FETCH_BATCH}, ack each)")


if __name__ == "__main__":
    main()
