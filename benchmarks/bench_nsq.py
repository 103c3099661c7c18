"""NSQ front-end benchmark: natserver's nsqd-compatible TCP protocol (and nsqd beside it
when an ``nsqd`` binary is on PATH), same workloads, same run.

Workloads (raw V2 protocol, pipelined, so the load generator stays cheap):

* ``pub``      PUB of 16 B messages, a window of 256 in flight, every OK counted;
* ``mpub``     MPUB of 100 x 16 B, a window of 16 in flight (messages per second);
* ``consume``  one consumer with RDY 2500 draining 200 000 queued 16 B messages, FIN for
  each (FINs sent in batches): messages per second;
* ``memory``   server RSS growth for 1 000 000 queued 16 B messages (mem_queue_size raised
  so they stay in memory), in bytes per message.

Usage (from the repository root)::

    python benchmarks/bench_nsq.py            # 3 rounds x 2 s
    python benchmarks/bench_nsq.py --quick    # 1 round x 1 s, memory with 200 000 messages
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.servers import free_port, proc_rss_kib  # noqa: E402

BODY = b"x" * 16
PUB_WINDOW = 256
MPUB_BATCH = 100
MPUB_WINDOW = 16
CONSUME_MSGS = 200_000
RDY = 2500


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(b"  V2")
        self.buf = bytearray()

    def frames(self):
        """Yield (type, data) for every frame in what one recv brings."""
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed")
        self.buf += data
        pos = 0
        buf = self.buf
        while len(buf) - pos >= 8:
            size, kind = struct.unpack_from(">ii", buf, pos)
            if len(buf) - pos < 4 + size:
                break
            yield kind, bytes(buf[pos + 8 : pos + 4 + size])
            pos += 4 + size
        del buf[:pos]


def pub_command(topic: bytes) -> bytes:
    return b"PUB " + topic + b"\n" + struct.pack(">i", len(BODY)) + BODY


def mpub_command(topic: bytes, count: int) -> bytes:
    inner = struct.pack(">i", count) + (struct.pack(">i", len(BODY)) + BODY) * count
    return b"MPUB " + topic + b"\n" + struct.pack(">i", len(inner)) + inner


def bench_pub(port: int, duration: float) -> float:
    conn = Conn(port)
    command = pub_command(b"bench_pub")
    conn.sock.sendall(command * PUB_WINDOW)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration:
        n = sum(1 for kind, data in conn.frames() if data == b"OK")
        done += n
        if n:
            conn.sock.sendall(command * n)
    elapsed = time.perf_counter() - start
    conn.sock.close()
    return done / elapsed


def bench_mpub(port: int, duration: float) -> float:
    conn = Conn(port)
    command = mpub_command(b"bench_mpub", MPUB_BATCH)
    conn.sock.sendall(command * MPUB_WINDOW)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration:
        n = sum(1 for kind, data in conn.frames() if data == b"OK")
        done += n
        if n:
            conn.sock.sendall(command * n)
    elapsed = time.perf_counter() - start
    conn.sock.close()
    return done * MPUB_BATCH / elapsed


def fill(port: int, topic: bytes, count: int) -> None:
    conn = Conn(port)
    batch = 1000
    command = mpub_command(topic, batch)
    sent = acked = 0
    while acked < count // batch:
        while sent < count // batch and sent - acked < 8:
            conn.sock.sendall(command)
            sent += 1
        acked += sum(1 for kind, data in conn.frames() if data == b"OK")
    conn.sock.close()


def bench_consume(port: int) -> float:
    fill(port, b"bench_consume", CONSUME_MSGS)
    conn = Conn(port)
    conn.sock.sendall(b"SUB bench_consume ch\nRDY %d\n" % RDY)
    got, start = 0, time.perf_counter()
    while got < CONSUME_MSGS:
        fins = []
        for kind, data in conn.frames():
            if kind == 2:
                fins.append(b"FIN " + data[10:26] + b"\n")
        got += len(fins)
        if fins:
            conn.sock.sendall(b"".join(fins))
    elapsed = time.perf_counter() - start
    conn.sock.close()
    return got / elapsed


def start_natserver(data: str, mem_queue_size: int):
    tcp, http, nats = free_port(), free_port(), free_port()
    conf = os.path.join(data, "nsq.conf")
    with open(conf, "w") as f:
        f.write(f'nsq {{\n  port: {tcp}\n  http_port: {http}\n  data_path: "{data}"\n'
                f'  mem_queue_size: {mem_queue_size}\n}}\n')
    cmd = [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(nats), "-c", conf]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    _wait(tcp)
    return proc, tcp


def start_nsqd(data: str, mem_queue_size: int):
    tcp, http = free_port(), free_port()
    cmd = ["nsqd", f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}", f"--data-path={data}",
           f"--mem-queue-size={mem_queue_size}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(tcp)
    return proc, tcp


def _wait(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}")


def bench_memory(start, count: int) -> float:
    data = tempfile.mkdtemp(prefix="nsqbench")
    proc, port = start(data, count * 2)
    try:
        time.sleep(0.3)
        before = proc_rss_kib(proc.pid)
        fill(port, b"bench_memory", count)
        time.sleep(0.3)
        after = proc_rss_kib(proc.pid)
        return (after - before) * 1024 / count
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def run_round(start, duration: float) -> dict:
    data = tempfile.mkdtemp(prefix="nsqbench")
    proc, port = start(data, 10_000_000)
    try:
        return {"pub": bench_pub(port, duration), "mpub": bench_mpub(port, duration), "consume": bench_consume(port)}
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float)
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    duration = args.duration or (1.0 if args.quick else 2.0)
    memory_count = 200_000 if args.quick else 1_000_000
    servers = [("natserver", start_natserver)]
    if shutil.which("nsqd"):
        servers.append(("nsqd", start_nsqd))
    results = {}
    for label, start in servers:
        rows = [run_round(start, duration) for _ in range(rounds)]
        results[label] = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        results[label]["memory"] = bench_memory(start, memory_count)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {rounds} round(s) x {duration} s")
    print(f"{'workload':<34}" + "".join(f"{label:>14}" for label in results))
    names = {"pub": "PUB 16 B (msgs/s)", "mpub": "MPUB 100 x 16 B (msgs/s)",
             "consume": f"consume RDY {RDY} + FIN (msgs/s)", "memory": f"RSS per queued msg ({memory_count:,}) B"}
    for key, name in names.items():
        print(f"{name:<34}" + "".join(f"{results[label][key]:>14,.0f}" for label in results))
    if "nsqd" in results:
        for key in ("pub", "mpub", "consume"):
            print(f"ratio natserver/nsqd {key}: {results['natserver'][key] / results['nsqd'][key]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
