"""Fast batch publishing (``allow_batched``, natserver/jetstream/fastbatch.py) beside plain
acknowledged publishes, natserver and nats-server 2.15.1, same run.

* ``fast``   one fast batch of ``--messages`` messages of 16 B into a file stream, flow
  ``--flow`` (the publisher never has more than two ack intervals unacknowledged, and ends
  with a commit without a message: the time is until its PubAck);
* ``plain``  the same messages as plain publishes with a reply, 512 acks in flight.

Usage (from the repository root)::

    python benchmarks/bench_fast_batch.py --nats-server-cmd ~/.cache/natserver-ci/nats-server-2.15.1/bin/nats-server
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60.0
PAYLOAD = b"x" * 16


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self.line()
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.> 1\r\nPING\r\n')
        while self.line() != b"PONG":
            pass

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def msg(self) -> tuple[bytes, bytes]:
        while True:
            line = self.line()
            if line.startswith(b"MSG "):
                parts = line.split()
                size = int(parts[-1])
                while len(self.buf) < size + 2:
                    self.buf += self.sock.recv(1 << 20)
                data, self.buf = self.buf[:size], self.buf[size + 2:]
                return parts[1], data
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")

    def request(self, subject: str, body: dict) -> dict:
        payload = json.dumps(body).encode()
        self.sock.sendall(b"PUB %s _R.api %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        return json.loads(self.msg()[1])


def fast(conn: Conn, n: int, flow: int) -> float:
    start = time.perf_counter()
    acked, window, sent = 0, flow, 0
    out = []
    while sent < n:
        while sent < n and sent - acked < 2 * window:
            sent += 1
            op = 0 if sent == 1 else 1
            out.append(b"PUB s.a _R.b.%d.fail.%d.%d.$FI %d\r\n%s\r\n" % (flow, sent, op, len(PAYLOAD), PAYLOAD))
        conn.sock.sendall(b"".join(out))
        out.clear()
        if sent < n:
            ack = json.loads(conn.msg()[1])
            assert ack.get("type") == "ack", ack
            acked, window = max(acked, ack["seq"]), ack["msgs"]
    conn.sock.sendall(b"PUB s.a _R.b.%d.fail.%d.3.$FI 0\r\n\r\n" % (flow, n + 1))
    while True:
        ack = json.loads(conn.msg()[1])
        if "batch" in ack:
            assert ack["count"] == n, ack
            return n / (time.perf_counter() - start)


def plain(conn: Conn, n: int, inflight: int = 512) -> float:
    start = time.perf_counter()
    sent = got = 0
    while got < n:
        burst = []
        while sent < n and sent - got < inflight:
            sent += 1
            burst.append(b"PUB s.b _R.p %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD))
        if burst:
            conn.sock.sendall(b"".join(burst))
        conn.msg()
        got += 1
    return n / (time.perf_counter() - start)


def serve(cmd: list[str], port: int, store: str) -> subprocess.Popen:
    proc = subprocess.Popen(cmd + ["-js", "-sd", store, "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not start")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name: str, cmd: list[str], n: int, flow: int) -> dict:
    with tempfile.TemporaryDirectory() as store:
        port = free_port()
        proc = serve(cmd, port, store)
        try:
            conn = Conn(port)
            info = conn.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_batched": True})
            assert "error" not in info, info
            result = {"server": name, "fast": fast(conn, n, flow), "plain": plain(conn, n)}
        finally:
            proc.kill()
            proc.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--flow", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nats-server-cmd", default="")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    servers = [("natserver", [sys.executable, "-m", "natserver"])]
    if args.nats_server_cmd:
        servers.append(("nats-server", [os.path.expanduser(args.nats_server_cmd)]))
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    for _ in range(args.rounds):
        for name, cmd in servers:
            r = run(name, cmd, args.messages, args.flow)
            print(f"{r['server']:12} fast batch {r['fast']:9.0f} msg/s   plain publish {r['plain']:9.0f} msg/s")


if __name__ == "__main__":
    main()
