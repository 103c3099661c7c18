"""Instructions per message of parse + route alone (``Client._process_ops`` on pre-split 64 KiB
chunks, no sockets, no load generator), counted by callgrind: the per-message work of issue #17.

    python -m benchmarks.parse_route                  # every workload
    python -m benchmarks.parse_route --only queue     # one of: mixed, one, traffic, queue, uniform, hot, random

Each workload runs the same messages once and three times under ``valgrind --tool=callgrind``;
the difference over the extra messages is what one message costs, start-up and set-up cancel.
Needs valgrind (apt). The workloads:

* mixed: 1 -> 1 on one subject, sizes 16-512 B (a run whose sizes change);
* one: 64 subjects -> one ``bench.>`` subscriber, 32-256 B (no runs: the message-by-message path);
* traffic: 64 subjects -> 4 wildcard subscribers, 32-256 B (scenario (n));
* queue: the same to a queue group of 4 wildcard members (scenario (o));
* uniform: 1 -> 1, 16 B (runs of alike messages);
* hot: 10 000 wildcard subscriptions on 10 connections, 256 hot subjects, 16 B (scenario (j));
* random: the same subscriptions, a random subject every message (scenario (i): cache misses).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

_WORKLOAD = r"""
import sys, random, trio
from natserver.app import Server
from natserver.server.client import Client
from natserver.protocol.ops import Sub

KIND, N, REPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
WILDCARDS = [b"bench.*", b"bench.>", b"bench.*", b"bench.>"]
if KIND in ("traffic", "queue", "one"):
    msgs = [(b"bench.%d" % rng.randrange(64), rng.randint(32, 256)) for _ in range(N)]
    SUBS = list(enumerate(WILDCARDS if KIND != "one" else [b"bench.>"]))
elif KIND in ("hot", "random"):  # scenarios (j) and (i): 10 000 wildcard subs on 10 connections
    SUBS = [(i % 10, (b"bench.%d.*.%d" if i % 2 == 0 else b"bench.%d.%d.>") % (i % 100, i)) for i in range(10_000)]

    def wildcard_subject():  # one that a subscription above matches (benchmarks/scenarios.py)
        n = rng.randrange(10_000)
        return b"bench.%d.%d.%d" % (n % 100, n % 100 + 100 * rng.randrange(100), n)

    if KIND == "hot":  # 256 hot subjects
        hot = [wildcard_subject() for _ in range(256)]
        msgs = [(hot[j % 256], 16) for j in range(N)]
    else:  # a new random subject each message: cache misses
        msgs = [(wildcard_subject(), 16) for _ in range(N)]
else:
    msgs = [(b"bench.s", rng.randint(16, 512) if KIND == "mixed" else 16) for _ in range(N)]
    SUBS = [(0, b"bench.s")]
data = b"".join(b"PUB %s %d\r\n%s\r\n" % (s, n, b"x" * n) for s, n in msgs)
chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]

async def main():
    server = Server(quiet=True)
    clients = {}
    for sid, (i, subject) in enumerate(SUBS):
        client = clients.get(i)
        if client is None:
            client = clients[i] = Client(server, None, i + 1, "127.0.0.1", 1000 + i)
            client.verbose = client.pedantic = False
            client.max_pending = client._stall_at = 1 << 40
        client._process_sub(Sub(subject, b"grp" if KIND == "queue" else None, b"%d" % sid))
    pub = Client(server, None, 99, "127.0.0.1", 999)
    pub.verbose = pub.pedantic = False
    pub.parser.auth_pending = False
    for _ in range(REPS):
        for chunk in chunks:
            pub.parser.feed(chunk)
            pub._process_ops()
            for client in server.touched:  # what a flush would write, dropped
                client.out = []
                client.pending = 0
            server.touched.clear()

trio.run(main)
"""

KINDS = ("mixed", "one", "traffic", "queue", "uniform", "hot", "random")


def count(kind: str, n: int, reps: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(_WORKLOAD)
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, script, kind, str(n), str(reps)],
            capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        return int(re.search(r"Collected : (\d+)", proc.stderr).group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="messages per repetition (default 10000)")
    parser.add_argument("--only", help="comma-separated workloads (default: all)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    for kind in args.only.split(",") if args.only else KINDS:
        three, one = count(kind, args.n, 3), count(kind, args.n, 1)
        print(f"{kind}: {(three - one) / (2 * args.n):,.0f} instructions a message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
