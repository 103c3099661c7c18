"""Instructions per message on natserver's 1 -> 1 path, counted by callgrind (deterministic
where seconds are not: see the README's note on this machine's noise).

    python -m benchmarks.instructions             # 1 -> 1, 16 B, and 1 -> 1 sizes 16-512 B
    python -m benchmarks.instructions --n 50000

Runs an in-process server, a raw publisher and a raw subscriber on loopback under
``valgrind --tool=callgrind`` twice (N and N/5 messages) and reports the difference divided by
the difference in messages, so start-up cost cancels out. Needs valgrind (apt).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

_WORKLOAD = r"""
import sys, random, trio, natserver

N, MIXED = int(sys.argv[1]), sys.argv[2] == "mixed"

async def main():
    rng = random.Random(7)
    sizes = [rng.randint(16, 512) if MIXED else 16 for _ in range(N)]
    data = b"".join(b"PUB bench.s %d\r\n%s\r\n" % (n, b"x" * n) for n in sizes)
    expected = sum(len(b"MSG bench.s 1 %d\r\n" % n) + n + 2 for n in sizes)
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
        sub = await trio.open_tcp_stream("127.0.0.1", server.port)
        await sub.send_all(b'CONNECT {"verbose":false}\r\nSUB bench.s 1\r\nPING\r\n')
        got = b""
        while b"PONG\r\n" not in got:
            got += await sub.receive_some(65536)
        pub = await trio.open_tcp_stream("127.0.0.1", server.port)
        await pub.send_all(b'CONNECT {"verbose":false}\r\n')

        async def send():
            for i in range(0, len(data), 65536):
                await pub.send_all(data[i:i + 65536])

        nursery.start_soon(send)
        received = 0
        while received < expected:
            received += len(await sub.receive_some(1 << 20))
        assert received >= expected, (received, expected)  # (+ the server's PINGs under valgrind)
        await server.shutdown()
        nursery.cancel_scope.cancel()

trio.run(main)
"""


def count(n: int, kind: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(_WORKLOAD)
        out = os.path.join(tmp, "callgrind.out")
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, script, str(n), kind],
            capture_output=True, text=True, timeout=1800,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        match = re.search(r"Collected : (\d+)", proc.stderr)
        return int(match.group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages in the long run (default 100000)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    random.seed(0)
    for kind, label in (("uniform", "1 -> 1, 16 B"), ("mixed", "1 -> 1, 16-512 B")):
        long, short = count(args.n, kind), count(args.n // 5, kind)
        per = (long - short) / (args.n - args.n // 5)
        print(f"{label}: {per:,.0f} instructions a message ({long:,} and {short:,} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
