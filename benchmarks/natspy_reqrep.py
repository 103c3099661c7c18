"""Request/reply driven by nats-py, a client nobody on this project wrote (issue #33).

    python -m benchmarks.natspy_reqrep --url nats://127.0.0.1:4222 --duration 2 --warmup 200

The requester (this process) calls nats-py's ``nc.request()`` one request at a time (its muxed
``_INBOX.<id>.*`` subscription, a PUB with a reply: what a Python service's caller does); the
responder is another process (``--role responder``) whose subscription callback calls
``msg.respond()``. Prints one JSON object: requests timed, warm-up, answered (by the responder),
errors, bad replies, p50/p90/p99 in µs and round trips per second, as natsgo_bench does, so
scenarios.py reads both the same way. The latency is taken around each ``request()`` call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

SUBJECT = "bench.natspy.svc"
REQUEST_TIMEOUT = 5.0  # seconds, per request (nats-py's default is 0.5: a loaded machine)
READY = "ready"


def missing() -> str | None:
    """Why the nats-py scenarios cannot run (a message for the user), or None."""
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py is not installed (pip install nats-py)"
    return None


async def _responder(url: str) -> None:
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    answered = bad = 0

    async def respond(msg) -> None:
        nonlocal answered, bad
        answered += 1
        if not msg.data.startswith(b"req"):
            bad += 1
        await msg.respond(b"rep" + msg.data[3:])

    await nc.subscribe(SUBJECT, cb=respond)
    await nc.flush()
    print(READY, flush=True)
    # Serve until the requester closes our stdin.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await nc.flush()
    await nc.close()
    print(json.dumps({"answered": answered, "bad": bad}), flush=True)


async def _requester(url: str, size: int, warmup: int, duration: float) -> dict:
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    payload = b"req" + b"x" * max(size - 3, 0)
    expected = b"rep" + payload[3:]
    latencies: list[int] = []
    errors: list[str] = []
    bad = 0
    try:
        for _ in range(warmup):
            reply = await nc.request(SUBJECT, payload, timeout=REQUEST_TIMEOUT)
            bad += reply.data != expected
        start = time.perf_counter()
        deadline = start + duration
        clock = time.perf_counter_ns
        while True:
            t0 = clock()
            reply = await nc.request(SUBJECT, payload, timeout=REQUEST_TIMEOUT)
            latencies.append(clock() - t0)
            bad += reply.data != expected
            if time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, the round fails its check
        errors.append(f"{type(exc).__name__}: {exc}")
        elapsed = 0.0
    finally:
        await nc.close()
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))] / 1000 if ordered else 0.0

    return {"requests": len(latencies), "warmup": warmup, "errors": errors, "bad": bad,
            "p50_us": pct(0.5), "p90_us": pct(0.9), "p99_us": pct(0.99),
            "rate": len(latencies) / elapsed if elapsed else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--role", choices=("requester", "responder"), default="requester")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--duration", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.role == "responder":
        asyncio.run(_responder(args.url))
        return 0
    responder = subprocess.Popen([sys.executable, "-m", "benchmarks.natspy_reqrep", "--url", args.url,
                                  "--role", "responder"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert responder.stdout is not None and responder.stdin is not None
        if responder.stdout.readline().strip() != READY:
            raise RuntimeError("the nats-py responder did not start")
        out = asyncio.run(_requester(args.url, args.size, args.warmup, args.duration))
        responder.stdin.close()
        line = responder.stdout.readline()
        responder.wait(30)
        served = json.loads(line) if line.strip() else {"answered": 0, "bad": 0}
    finally:
        if responder.poll() is None:
            responder.kill()
            responder.wait()
    out["answered"] = served["answered"]
    out["bad"] += served["bad"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
