"""Where a request/reply round trip spends its time, hop by hop, from a packet capture.

    nats-server -a 127.0.0.1 -p 4222 &   # or: python -m natserver -a 127.0.0.1 -p 4222
    tcpdump -i lo -w rr.pcap "tcp port 4222" &
    ~/.cache/natserver-bench/go/*/natsgo_bench -url nats://127.0.0.1:4222 -duration 2s   # (built by scenario q)
    python -m benchmarks.hops rr.pcap 4222

Splits each round trip into the server's two hops (request in -> MSG to the responder; reply in
-> MSG to the requester) and the two clients' turns, from the loopback timestamps of the packets
(the kernel's, taken when each side's write hands the segment on). The server's hops are its own
time, whatever client drives it: this is how issue #33 told the server's share from nats.go's.
Needs the subjects the benchmark uses (``bench.req``, replies under ``_INBOX``); classic pcap only.
"""

from __future__ import annotations

import argparse
import statistics
import struct

STEPS = ("server: request in -> MSG out", "responder", "server: reply in -> MSG out", "requester")


def payloads(path: str):
    """(time, source port, destination port, TCP payload) of every IPv4 packet with data."""
    with open(path, "rb") as f:
        magic = f.read(24)[:4]
        endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        scale = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
        while len(head := f.read(16)) == 16:
            sec, frac, size, _ = struct.unpack(endian + "IIII", head)
            frame = f.read(size)
            ip = frame[14:]  # Ethernet header (tcpdump -i lo)
            tcp = ip[(ip[0] & 15) * 4:]
            sport, dport = struct.unpack(">HH", tcp[:4])
            data = tcp[(tcp[12] >> 4) * 4:]
            if data:
                yield sec + frac * scale, sport, dport, data


def hops(path: str, port: int) -> dict[str, list[float]]:
    marks = []  # (step index, time) in the order the packets went
    for t, sport, dport, data in payloads(path):
        if dport == port and data.startswith(b"PUB bench.req "):
            marks.append((0, t))
        elif sport == port and data.startswith(b"MSG bench.req "):
            marks.append((1, t))
        elif dport == port and data.startswith(b"PUB _INBOX"):
            marks.append((2, t))
        elif sport == port and data.startswith(b"MSG _INBOX"):
            marks.append((3, t))
    out: dict[str, list[float]] = {name: [] for name in STEPS}
    for (step, t0), (following, t1) in zip(marks, marks[1:]):
        if following == (step + 1) % 4:  # one request at a time: each step follows the last
            out[STEPS[step]].append((t1 - t0) * 1e6)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap")
    ap.add_argument("port", type=int, help="the server's port")
    args = ap.parse_args(argv)
    for name, times in hops(args.pcap, args.port).items():
        times = times[len(times) // 10:]  # leave out the warm-up
        if times:
            print(f"{name:32s} p50 {statistics.median(times):7.1f} µs  mean {statistics.fmean(times):7.1f} µs  (n={len(times)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
