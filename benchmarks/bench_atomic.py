"""Atomic batch publishing benchmark (``allow_atomic``, nats-server 2.12+): natserver beside
nats-server 2.15.1, same workload, same run.

Workload: atomic batches of ``--batch`` messages (default 100, 16 B each) committed per second
into a file stream, ``--inflight`` batches (default 8, under the 50 a stream allows) pipelined
over one raw connection. A batch's messages go without a reply subject but its commit
(``Nats-Batch-Commit: 1``), whose PubAck is checked: the batch id, ``"count"`` and the last
sequence (batches are stored whole, in the order their commits arrive). At the end the stream
must hold every committed message.

Usage (from the repository root)::

    python benchmarks/bench_atomic.py                  # 3 rounds x 2 s
    python benchmarks/bench_atomic.py --quick          # 2 rounds x 1 s
    python benchmarks/bench_atomic.py --batch 1000 --inflight 4

Rounds alternate natserver / nats-server; each starts a fresh server on a fresh store
directory. Prints a table (batches/s, messages/s, the ratio) and writes JSON to
benchmarks/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_jetstream import Conn, create_stream, start  # noqa: E402
from benchmarks.servers import ServerSpec, default_nats_server_cmd, default_natserver_cmd  # noqa: E402

BATCH = 100  # messages in a batch
INFLIGHT = 8  # batches pipelined (nats-server allows 50 in flight a stream)
PAYLOAD = b"x" * 16


def _batch_bytes(batch_id: bytes, size: int) -> bytes:
    """One batch on the wire: size - 1 staged messages without a reply, then the commit."""
    out = bytearray()
    for seq in range(1, size + 1):
        hdr = b"NATS/1.0\r\nNats-Batch-Id: %s\r\nNats-Batch-Sequence: %d\r\n" % (batch_id, seq)
        if seq == size:
            hdr += b"Nats-Batch-Commit: 1\r\n\r\n"
            out += b"HPUB atomic.data _R.c %d %d\r\n%s%s\r\n" % (len(hdr), len(hdr) + len(PAYLOAD), hdr, PAYLOAD)
        else:
            hdr += b"\r\n"
            out += b"HPUB atomic.data %d %d\r\n%s%s\r\n" % (len(hdr), len(hdr) + len(PAYLOAD), hdr, PAYLOAD)
    return bytes(out)


def bench_atomic(port: int, duration: float, size: int, inflight: int) -> tuple[float, bool]:
    """Committed batches/s; and whether every commit's PubAck and the stream were right."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "ATOMIC", "subjects": ["atomic.>"], "storage": "file", "allow_atomic": True})
        ids = [b"b%d" % i for i in range(inflight)]
        wire = b"".join(_batch_bytes(batch_id, size) for batch_id in ids)
        ok = True
        committed = 0
        start_t = time.perf_counter()
        deadline = start_t + duration
        while time.perf_counter() < deadline:
            conn.sock.sendall(wire)
            for i, (_, ack) in enumerate(conn.replies(inflight)):
                doc = json.loads(ack)
                want = {"stream": "ATOMIC", "seq": (committed + i + 1) * size, "batch": ids[i].decode(), "count": size}
                if doc != want:
                    ok = False
            committed += inflight
        elapsed = time.perf_counter() - start_t
        info = conn.request(b"$JS.API.STREAM.INFO.ATOMIC", b"")
        ok = ok and info["state"]["messages"] == committed * size
        return committed / elapsed, ok
    finally:
        conn.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch", type=int, default=BATCH, help="messages a batch (at most 1000)")
    parser.add_argument("--inflight", type=int, default=INFLIGHT, help="batches pipelined (at most 50)")
    parser.add_argument("--nats-server-cmd", default=None, help="'none' to skip nats-server")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration = min(args.rounds, 2), 1.0

    specs = [ServerSpec("natserver", default_natserver_cmd())]
    go = default_nats_server_cmd() if args.nats_server_cmd is None else (
        None if args.nats_server_cmd == "none" else args.nats_server_cmd.split())
    if go:
        specs.append(ServerSpec("nats-server", go))

    rates: dict[str, list[float]] = {spec.label: [] for spec in specs}
    failures = 0
    for _ in range(args.rounds):
        for spec in specs:
            store = tempfile.mkdtemp(prefix="atomicbench-")
            server = start(spec, store, False)
            try:
                rate, ok = bench_atomic(server.port, args.duration, args.batch, args.inflight)
            finally:
                server.stop()
                shutil.rmtree(store, ignore_errors=True)
            rates[spec.label].append(rate)
            failures += not ok
            print(f"  batches of {args.batch:<5d} {spec.label:12s} {rate:10,.0f} batches/s "
                  f"{rate * args.batch:12,.0f} msgs/s {'ok' if ok else 'WRONG'}", flush=True)

    nat = statistics.median(rates["natserver"])
    ref = statistics.median(rates["nats-server"]) if rates.get("nats-server") else None
    ratio = nat / ref if ref else None
    print()
    print(f"{'workload':26s} {'natserver':>14s} {'nats-server':>14s} {'ratio':>7s}")
    print(f"{f'atomic batches of {args.batch}':26s} {nat:14,.0f} {(f'{ref:14,.0f}' if ref else '             -')} "
          f"{(f'{ratio:7.2f}' if ratio else '      -')}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, time.strftime("atomic-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump({"batch": args.batch, "inflight": args.inflight, "duration": args.duration, "rounds": args.rounds,
                   "natserver": nat, "nats-server": ref, "ratio": ratio, "per_round": rates}, f, indent=2)
    print(f"\nwrote {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
