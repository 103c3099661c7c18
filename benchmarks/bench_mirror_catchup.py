"""A mirror catching up: an R1 origin holding N messages (10,000 by default), then an R1 mirror of
it and an R3 one created, each timed from its create until its STREAM.INFO says it has all N
with a lag of 0. A cluster of three natserver processes vs three nats-server 2.15.1 processes on
this machine (bench_r3's clusters), file streams, all clients on node 0. The R3 mirror's
messages go through its RAFT group (only its leader runs the link and proposes them).

    PYTHONPATH=$PWD python -m benchmarks.bench_mirror_catchup [--messages N] [--nats-server PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import nats

from benchmarks.bench_r3 import IN_FLIGHT, PAYLOAD, PUB_TIMEOUT, READY_TIMEOUT, REFERENCE, connect, on_each_cluster

DEFAULT_MESSAGES = 10_000
CATCHUP_TIMEOUT = 300.0  # seconds for a mirror to catch up (a failed run, not a slow one)
POLL = 0.05  # seconds between two STREAM.INFO requests while a mirror catches up


async def api(nc, subject: str, body=None) -> dict:
    msg = await nc.request(subject, b"" if body is None else json.dumps(body).encode(), timeout=PUB_TIMEOUT)
    return json.loads(msg.data)


async def catch_up(nc, name: str, replicas: int, messages: int) -> float:
    """Seconds from the mirror's create to all ``messages`` in it, lag 0."""
    deadline = time.monotonic() + READY_TIMEOUT
    config = {"name": name, "mirror": {"name": "ORIG"}, "num_replicas": replicas, "storage": "file"}
    started = time.perf_counter()
    while True:
        try:
            created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", config)
            if "error" not in created:
                break
        except nats.errors.TimeoutError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} not created: {created}")
        await asyncio.sleep(POLL)
    deadline = time.monotonic() + CATCHUP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
        except nats.errors.TimeoutError:
            continue
        if info.get("state", {}).get("messages") == messages and info.get("mirror", {}).get("lag") == 0:
            return time.perf_counter() - started
        await asyncio.sleep(POLL)
    raise AssertionError(f"{name} did not catch up: {info}")


async def measure(port: int, messages: int) -> tuple[float, float]:
    deadline = time.monotonic() + READY_TIMEOUT
    nc = await connect(port, deadline)
    js = nc.jetstream(timeout=PUB_TIMEOUT)
    while True:
        try:
            await js.add_stream(name="ORIG", subjects=["orig"], num_replicas=1)
            await js.publish("orig", PAYLOAD)  # (placed and subscribed)
            break
        except Exception:  # noqa: BLE001 - no meta leader yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    left = [messages - 1]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await js.publish("orig", PAYLOAD)

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    r1 = await catch_up(nc, "MIR1", 1, messages)
    r3 = await catch_up(nc, "MIR3", 3, messages)
    await nc.close()
    return r1, r3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--nats-server", default=os.environ.get("NATS_SERVER_REFERENCE") or REFERENCE)
    args = parser.parse_args()
    runs = on_each_cluster(args.nats_server, "bench-mirror-", lambda port: asyncio.run(measure(port, args.messages)))
    for kind, (r1, r3) in runs:
        print(f"{kind:12s} a mirror catching up {args.messages} messages: R1 {r1:6.2f} s "
              f"({args.messages / r1:8.0f} msgs/s), R3 {r3:6.2f} s ({args.messages / r3:8.0f} msgs/s)")

if __name__ == "__main__":
    main()
