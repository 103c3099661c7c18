"""JetStream consumers beside nats-server -js, in one run, through nats-py (the client most
applications use; its own cost is in both columns, so ratios understate server gaps):

* ``pull``  fetch in batches of 100 with explicit acks, on a stream of N messages;
* ``push``  an ordered push consumer (flow control, heartbeats) reading N messages;
* ``kv``    KV put then get, one at a time.

Usage: ``python benchmarks/bench_consumers.py [--messages 20000]`` (about 10-20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import nats  # noqa: E402 (after the sys.path set-up above, as a script)

from benchmarks.servers import (  # noqa: E402
    ServerSpec,
    default_nats_server_cmd,
    default_natserver_cmd,
)


async def _fill(js, nc, n: int) -> None:
    await js.add_stream(name="B", subjects=["b"])
    for i in range(n):
        await nc.publish("b", b"%016d" % i)
    await nc.flush()
    while (await js.stream_info("B")).state.messages < n:
        await asyncio.sleep(0.01)


async def bench(port: int, n: int) -> dict:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    js = nc.jetstream()
    await _fill(js, nc, n)
    out = {}
    sub = await js.pull_subscribe("b", "pull")
    begin, got = time.perf_counter(), 0
    while got < n:
        msgs = await sub.fetch(100, timeout=5)
        for m in msgs:
            await m.ack()
        got += len(msgs)
    out["pull fetch 100 + ack"] = n / (time.perf_counter() - begin)
    begin = time.perf_counter()
    ordered = await js.subscribe("b", ordered_consumer=True)
    for _ in range(n):
        await ordered.next_msg(timeout=5)
    out["push ordered"] = n / (time.perf_counter() - begin)
    kv = await js.create_key_value(bucket="bench")
    kn = max(1, n // 10)
    begin = time.perf_counter()
    for i in range(kn):
        await kv.put(f"k{i % 100}", b"v")
        await kv.get(f"k{i % 100}")
    out["kv put+get"] = kn / (time.perf_counter() - begin)
    await nc.close()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args(argv)
    specs = [ServerSpec("natserver", default_natserver_cmd())]
    go = default_nats_server_cmd()
    if go:
        specs.append(ServerSpec("nats-server", go))
    results = {}
    for spec in specs:
        store = tempfile.mkdtemp(prefix="consbench-")
        server = ServerSpec(spec.label, [*spec.argv, "-js", "-sd", store]).start()
        try:
            results[spec.label] = asyncio.run(asyncio.wait_for(bench(server.port, args.messages), 120))
        finally:
            server.stop()
            shutil.rmtree(store, ignore_errors=True)
    print(f"{'workload':24s} {'natserver':>12s} {'nats-server':>12s} {'ratio':>6s}")
    for label, rate in results["natserver"].items():
        ref = results.get("nats-server", {}).get(label)
        ratio = f"{rate / ref:6.2f}" if ref else "     -"
        print(f"{label:24s} {rate:12,.0f} {ref or 0:12,.0f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
