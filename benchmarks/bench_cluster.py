"""Messages across a route: a natserver pair vs a nats-server pair, and one natserver vs two
clustered natserver processes for the same fan-out (does a second process add throughput on
this machine?). Ratios come from one run; each measurement is a few seconds at most.

    PYTHONPATH=$PWD python -m benchmarks.bench_cluster [--messages N]

The publisher is on node A, the subscribers on node B (or split over A and B for the
one-vs-two comparison); a rate is messages delivered per second, measured from the first
PUB to the last byte at the last subscriber.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import threading
import time

PAYLOAD = b"x" * 16
BATCH = 500  # PUBs per send
READY_TIMEOUT = 10.0
RUN_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(kind: str, routes: list[str]) -> tuple[subprocess.Popen, int, int]:
    port, cport = free_port(), free_port()
    if kind == "natserver":
        cmd = [sys.executable, "-m", "natserver"]
    else:
        cmd = [shutil.which("nats-server") or "nats-server"]
    cmd += ["-a", "127.0.0.1", "-p", str(port), "--cluster", f"nats://127.0.0.1:{cport}", "--cluster_name", "bench"]
    if routes:
        cmd += ["--routes", ",".join(routes)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port, cport
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{kind} did not start")


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(RUN_TIMEOUT)
    buf = b""
    while b"\r\n" not in buf:
        buf += sock.recv(4096)
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += sock.recv(4096)
    return sock


def subscribe(sock: socket.socket, subject: bytes) -> None:
    sock.sendall(b"SUB %s 1\r\nPING\r\n" % subject)
    buf = b""
    while b"PONG\r\n" not in buf:
        buf += sock.recv(4096)


def wait_interest(pub: socket.socket, subject: bytes, subs: list[socket.socket]) -> None:
    """Until a probe message published on A reaches every subscriber (interest crossed)."""
    deadline = time.monotonic() + READY_TIMEOUT
    for sub in subs:
        sub.settimeout(0.2)
    pending = set(range(len(subs)))
    while pending and time.monotonic() < deadline:
        pub.sendall(b"PUB %s.probe 1\r\np\r\n" % subject.rstrip(b">").rstrip(b"."))
        for i in list(pending):
            try:
                if subs[i].recv(65536):
                    pending.discard(i)
            except TimeoutError:
                pass
    for sub in subs:
        sub.settimeout(0.3)
        try:  # drain probes
            while sub.recv(65536):
                pass
        except TimeoutError:
            pass
        sub.settimeout(RUN_TIMEOUT)
    if pending:
        raise RuntimeError("interest did not cross the route")


def run(pub_port: int, sub_ports: list[int], messages: int) -> float:
    subject = b"bench.x"
    subs = []
    for port in sub_ports:
        sock = connect(port)
        subscribe(sock, b"bench.>")
        subs.append(sock)
    pub = connect(pub_port)
    wait_interest(pub, b"bench.>", subs)
    msg_len = len(b"MSG bench.x 1 16\r\n") + len(PAYLOAD) + 2
    done = []

    def reader(sock: socket.socket) -> None:
        want = messages * msg_len
        got = 0
        while got < want:
            data = sock.recv(1 << 20)
            if not data:
                break
            got += len(data)
        done.append(time.perf_counter())

    threads = [threading.Thread(target=reader, args=(s,)) for s in subs]
    for thread in threads:
        thread.start()
    chunk = (b"PUB %s %d\r\n%s\r\n" % (subject, len(PAYLOAD), PAYLOAD)) * BATCH
    start_time = time.perf_counter()
    for _ in range(messages // BATCH):
        pub.sendall(chunk)
    for thread in threads:
        thread.join(RUN_TIMEOUT)
    elapsed = max(done) - start_time
    for sock in (*subs, pub):
        sock.close()
    return messages * len(subs) / elapsed


def pair(kind: str):
    a, a_port, a_cport = start(kind, [])
    b, b_port, _ = start(kind, [f"nats://127.0.0.1:{a_cport}"])
    return [a, b], a_port, b_port


def stop(procs) -> None:
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    n = args.messages - args.messages % BATCH
    results = {}
    kinds = ["natserver"] + (["nats-server"] if shutil.which("nats-server") else [])
    for kind in kinds:
        procs, a_port, b_port = pair(kind)
        try:
            results[(kind, "1->1 across a route")] = run(a_port, [b_port], n)
            results[(kind, "fan-out 1->4 across a route")] = run(a_port, [b_port] * 4, n // 2)
        finally:
            stop(procs)
    # One natserver process vs two clustered ones, same fan-out (subscribers split over both).
    single, port, _ = start("natserver", [])
    try:
        results[("natserver", "fan-out 1->4, one process")] = run(port, [port] * 4, n // 2)
    finally:
        stop([single])
    procs, a_port, b_port = pair("natserver")
    try:
        results[("natserver", "fan-out 1->4, two processes")] = run(a_port, [a_port, a_port, b_port, b_port], n // 2)
    finally:
        stop(procs)
    for (kind, name), rate in results.items():
        print(f"{kind:12s} {name:32s} {rate:12,.0f} msgs/s")
    for name in ("1->1 across a route", "fan-out 1->4 across a route"):
        if ("nats-server", name) in results:
            ratio = results[("natserver", name)] / results[("nats-server", name)]
            print(f"ratio natserver/nats-server, {name}: {ratio:.3f}")
    two = results[("natserver", "fan-out 1->4, two processes")] / results[("natserver", "fan-out 1->4, one process")]
    print(f"ratio two clustered processes / one process, fan-out 1->4: {two:.3f}")


if __name__ == "__main__":
    main()
