"""NATS Streaming benchmark: natserver --stan, beside nats-streaming-server when it is on PATH.

Workloads (a raw-protocol STAN client over one connection, so the load generator stays cheap):

* ``pub``  async publishes with PubAcks: a window of 1024 PubMsgs in flight, acks counted;
* ``sub``  a subscriber with maxInFlight 1024 acking every message, on a channel pre-filled
  with the messages it reads (deliver all available).

Usage (from the repository root)::

    python benchmarks/bench_stan.py                 # 3 rounds x 2 s per workload
    python benchmarks/bench_stan.py --quick         # 2 rounds x 1 s
    python benchmarks/bench_stan.py --store file    # the file store

Each round starts a fresh server (memory store, or a fresh directory). When
``nats-streaming-server`` is on PATH, rounds alternate and the median ratio is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from natserver.stan import pb  # noqa: E402

WINDOW = 1024
PAYLOAD = b"x" * 128
CID = "test-cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Raw:
    """A NATS connection reading MSG frames; replies to heartbeats on the way."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(10)
        self.buf = bytearray()
        self.msgs: list[tuple[bytes, bytes, bytes]] = []  # (sid, reply, payload)
        self._line()
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        while self._line() != b"PONG":
            pass

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, rest = bytes(self.buf).partition(b"\r\n")
        self.buf = bytearray(rest)
        return line

    def read(self) -> None:
        """Parse whatever is buffered (reading once if nothing is) into self.msgs."""
        self._fill()
        buf = self.buf
        pos = 0
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            line = bytes(buf[pos:end])
            if line.startswith(b"MSG "):
                parts = line.split(b" ")
                size = int(parts[-1])
                if len(buf) < end + 2 + size + 2:
                    break
                payload = bytes(buf[end + 2 : end + 2 + size])
                reply = parts[3] if len(parts) == 5 else b""
                self.msgs.append((parts[2], reply, payload))
                pos = end + 2 + size + 2
            else:
                if line == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                pos = end + 2
        del buf[:pos]

    def request(self, subject: str, payload: bytes, sid: bytes) -> bytes:
        self.sock.sendall(b"PUB %s _BENCH.reply %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        while True:
            for i, (s, _, data) in enumerate(self.msgs):
                if s == sid:
                    del self.msgs[i]
                    return data
            self.read()


def stan_connect(port: int, client_id: str) -> tuple[Raw, pb.ConnectResponse]:
    c = Raw(port)
    c.sock.sendall(b"SUB _BENCH.reply 1\r\nSUB _BENCH.hb 2\r\nSUB _BENCH.acks 3\r\nSUB _BENCH.sub 4\r\n")
    req = pb.ConnectRequest(clientID=client_id, heartbeatInbox="_BENCH.hb", protocol=1, connID=b"bench-" +
                            client_id.encode(), pingInterval=5, pingMaxOut=3)
    resp = pb.ConnectResponse.decode(c.request(f"_STAN.discover.{CID}", req.encode(), b"1"))
    if resp.error:
        raise RuntimeError(resp.error)
    return c, resp


def bench_pub(port: int, seconds: float) -> float:
    c, resp = stan_connect(port, "pub")
    subject = (resp.pubPrefix + ".bench").encode()
    in_flight = 0
    acked = 0
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        now = time.perf_counter()
        if now >= deadline and in_flight == 0:
            break
        out = []
        while in_flight < WINDOW and now < deadline:
            n += 1
            msg = pb.PubMsg(clientID="pub", guid=str(n), subject="bench", data=PAYLOAD, connID=b"bench-pub").encode()
            out.append(b"PUB %s _BENCH.acks %d\r\n%s\r\n" % (subject, len(msg), msg))
            in_flight += 1
        if out:
            c.sock.sendall(b"".join(out))
        c.read()
        for sid, reply, data in c.msgs:
            if sid == b"3":
                in_flight -= 1
                acked += 1
            elif sid == b"2" and reply:
                c.sock.sendall(b"PUB %s 0\r\n\r\n" % reply)
        c.msgs.clear()
    elapsed = time.perf_counter() - start
    c.sock.close()
    return acked / elapsed


def bench_sub(port: int, seconds: float) -> float:
    # pre-fill: about what the subscriber can read in `seconds` (capped)
    total = int(min(200_000, 40_000 * seconds))
    c, resp = stan_connect(port, "filler")
    subject = (resp.pubPrefix + ".subbench").encode()
    sent = acked = 0
    while acked < total:
        out = []
        while sent < total and sent - acked < WINDOW:
            sent += 1
            msg = pb.PubMsg(clientID="filler", guid=str(sent), subject="subbench", data=PAYLOAD,
                            connID=b"bench-filler").encode()
            out.append(b"PUB %s _BENCH.acks %d\r\n%s\r\n" % (subject, len(msg), msg))
        if out:
            c.sock.sendall(b"".join(out))
        c.read()
        acked += sum(1 for sid, _, _ in c.msgs if sid == b"3")
        c.msgs.clear()
    c.sock.close()
    s, resp = stan_connect(port, "sub")
    req = pb.SubscriptionRequest(clientID="sub", subject="subbench", inbox="_BENCH.sub", maxInFlight=WINDOW,
                                 ackWaitInSecs=30, startPosition=pb.FIRST)
    sresp = pb.SubscriptionResponse.decode(s.request(resp.subRequests, req.encode(), b"1"))
    ack_inbox = sresp.ackInbox.encode()
    got = 0
    start = time.perf_counter()
    while got < total:
        s.read()
        out = []
        for sid, reply, data in s.msgs:
            if sid == b"4":
                m = pb.MsgProto.decode(data)
                ack = pb.Ack(subject="subbench", sequence=m.sequence).encode()
                out.append(b"PUB %s %d\r\n%s\r\n" % (ack_inbox, len(ack), ack))
                got += 1
        s.msgs.clear()
        if out:
            s.sock.sendall(b"".join(out))
    elapsed = time.perf_counter() - start
    s.sock.close()
    return got / elapsed


def start(kind: str, port: int, store: str, tmp: str) -> subprocess.Popen:
    if kind == "natserver":
        argv = [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(port), "--stan"]
    else:
        argv = [shutil.which("nats-streaming-server"), "-a", "127.0.0.1", "-p", str(port)]
    if store == "file":
        argv += ["--store", "file", "--dir", tmp]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            stan_connect(port, "probe")[0].sock.close()
            return proc
        except (OSError, EOFError, RuntimeError):
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{kind} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--store", choices=("memory", "file"), default="memory")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    duration = args.duration or (1.0 if args.quick else 2.0)
    kinds = ["natserver"] + (["nats-streaming-server"] if shutil.which("nats-streaming-server") else [])
    results: dict = {(k, w): [] for k in kinds for w in ("pub", "sub")}
    for _ in range(rounds):
        for kind in kinds:
            for workload, fn in (("pub", bench_pub), ("sub", bench_sub)):
                with tempfile.TemporaryDirectory() as tmp:
                    port = free_port()
                    proc = start(kind, port, args.store, tmp)
                    try:
                        results[(kind, workload)].append(fn(port, duration))
                    finally:
                        proc.kill()
                        proc.wait(10)
    print(f"store: {args.store}, {rounds} rounds x {duration:g} s, payload {len(PAYLOAD)} B, window {WINDOW}")
    for workload in ("pub", "sub"):
        ours = statistics.median(results[("natserver", workload)])
        line = f"{workload:4s} natserver {ours:10,.0f} msgs/s"
        if len(kinds) > 1:
            theirs = statistics.median(results[("nats-streaming-server", workload)])
            line += f"   nats-streaming-server {theirs:10,.0f} msgs/s   ratio {ours / theirs:.2f}"
        print(line)


if __name__ == "__main__":
    main()
