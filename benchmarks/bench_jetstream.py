"""JetStream benchmark: natserver beside nats-server -js, same workloads, same run.

Workloads (raw protocol over one connection, a window of requests in flight, so the load
generator stays cheap):

* ``pub``       acknowledged publishes per second into a file stream (16 B and 1 KiB
  payloads), every ack checked (sequence numbers consecutive);
* ``pub-sync``  the same with natserver's ``sync_interval: always`` (fsync before every ack,
  group commit); nats-server v2.9.10 has no such option, so natserver only;
* ``direct``    DIRECT.GET by sequence, per second, on a stream of 10 000 messages;
* ``counter``   acknowledged increments per second (``Nats-Incr: 1``) into a counter stream
  (``allow_msg_counter``, nats-server 2.12+: compare with 2.15.1), over 100 subjects, every
  ack's total checked;
* ``schedule``  message schedules (``allow_msg_schedules``, nats-server 2.12+: compare with
  2.15.1): ``--sched-rate`` schedules a second, each ``@at`` a distinct time (ms precision)
  1.5 s or more ahead, published up front; a push consumer on the targets reads each fired
  message's stored timestamp from its ack subject: fired per second, and the lateness (stored
  time minus the ``@at`` time) p50/p99. Every schedule must fire exactly once. nats-server's
  timer waits at least 250 ms after each run (scheduler.go resetTimer), so its lateness is that
  of its batches;
* ``pub-1``     acknowledged publishes per second from one publisher that waits for each ack
  (16 B): a round trip per message;
* ``pull``      messages per second through a durable pull consumer with explicit acks, in
  requests of 256 (each batch's acks go out with the next request), CONSUME_MSGS stored first;
* ``push``      the same through a durable push consumer (acks sent per chunk read);
* ``kv``        KV puts (acked, a window in flight) and gets (DIRECT.GET of a key's last value,
  as nats-py's ``kv.get`` on a bucket with ``allow_direct``) per second over 100 keys;
* ``mixed``     the realistic one: acked publishes to 64 subjects, sizes drawn from 32 B–4 KiB
  for every message, and then reading them through a pull consumer on ``events.>``;
* ``go``        the same scenarios driven by nats.go 1.22.1's own JetStream API (Debian's, as
  benchmarks/natsgo.py builds it): PublishAsync over 64 subjects with 512 acks pending, a
  durable pull consumer's Fetch(256) and m.Ack() of each, kv.Put and kv.Get one at a time;
* ``issue33``   all of issue 33's: pub-1, pub, pull, push, kv, mixed, counter. Every round also
  reports the server's CPU time per operation in the timed part (/proc), which a loaded
  machine moves much less than the rates; ``--baseline-cmd`` adds a third server (an older
  checkout, a wrapper script that cds into it: ``python -m natserver`` imports the package
  from the working directory) to the same interleaved rounds;
* ``store``     the file store's cost: one stream filled with 1 000 000 messages of 16 B
  (``--store-msgs``; ``--store-10m`` for 10 000 000), the server's RSS growth per stored
  message, then ``kill -9`` and the time until a restarted server answers STREAM.INFO with
  every message (beside the same for an empty store: the process's own start), and the
  RSS per message after that restart. Not in the default ``--only`` (it takes a while);
  compare with nats-server 2.15.1 through ``--nats-server-cmd``.
* ``compression`` a stream of 100 000 JSON-ish events (``--compress-msgs``) with
  ``compression`` none and s2: acknowledged publishes per second, the bytes of its message
  files after a clean stop, and STREAM.MSG.GET of every message by sequence per second after
  a restart (cold: what is on disk is read and decompressed). Not in the default ``--only``;
  compare with nats-server 2.15.1 through ``--nats-server-cmd``.

Usage (from the repository root)::

    python benchmarks/bench_jetstream.py               # 3 rounds x 2 s per workload
    python benchmarks/bench_jetstream.py --quick       # 2 rounds x 1 s
    python benchmarks/bench_jetstream.py --only pub --rounds 5
    python benchmarks/bench_jetstream.py --only issue33 --rounds 3 --duration 0.5
    python benchmarks/bench_jetstream.py --only store --rounds 1 \
        --nats-server-cmd /opt/nats-server-2.15.1/nats-server

Rounds alternate natserver / nats-server; each round starts a fresh server on a fresh
store directory. Prints a table and writes JSON to benchmarks/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.servers import ServerSpec, default_nats_server_cmd, default_natserver_cmd, parse_cmd  # noqa: E402

WINDOW = 512  # requests in flight
STREAM_MSGS = 10_000  # for the direct-get workload


_SERVER = None  # the server the running workload drives (for mark)
_MARKS: list[tuple[float, float]] = []


def mark() -> None:
    """The timed part of a workload starts: note the time and the server's CPU seconds
    (main notes them again when the workload returns: CPU per operation, which the load
    of a shared machine moves much less than the rates)."""
    if _SERVER is not None:
        _MARKS.append((time.perf_counter(), _SERVER.cpu_seconds()))


class Conn:
    """A raw NATS connection that pipelines requests and counts the replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(10)
        self.buf = bytearray()
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
                          b"SUB _R.* 1\r\nPING\r\n")
        while self._line() != b"PONG":
            pass

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            self._fill()

    def replies(self, n: int) -> list[tuple[bytes, bytes]]:
        """Read ``n`` MSG/HMSG replies: (header block, payload)."""
        out = []
        while len(out) < n:
            line = self._line()
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                parts = line.split()
                if parts[0] == b"HMSG":
                    hsize, total = int(parts[-2]), int(parts[-1])
                else:
                    hsize, total = 0, int(parts[-1])
                while len(self.buf) < total + 2:
                    self._fill()
                body = bytes(self.buf[:total])
                del self.buf[: total + 2]
                out.append((body[:hsize], body[hsize:]))
            elif line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
        return out

    def request(self, subject: bytes, payload: bytes) -> dict:
        self.sock.sendall(b"PUB %s _R.x %d\r\n%s\r\n" % (subject, len(payload), payload))
        return json.loads(self.replies(1)[0][1])

    def close(self) -> None:
        self.sock.close()


def create_stream(conn: Conn, cfg: dict) -> None:
    resp = conn.request(b"$JS.API.STREAM.CREATE." + cfg["name"].encode(), json.dumps(cfg).encode())
    if "error" in resp:
        raise RuntimeError(f"stream create failed: {resp['error']}")


def bench_publish(port: int, duration: float, size: int) -> tuple[float, bool]:
    """Acked publishes/s into a file stream; and whether every ack was right."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "BENCH", "subjects": ["bench.>"], "storage": "file"})
        payload = b"x" * size
        pub = b"PUB bench.data _R.a %d\r\n%s\r\n" % (size, payload)
        batch = pub * WINDOW
        expected = 1
        ok = True
        acked = 0
        start = time.perf_counter()
        mark()
        deadline = start + duration
        while time.perf_counter() < deadline:
            conn.sock.sendall(batch)
            for _, ack in conn.replies(WINDOW):
                # b'{"stream":"BENCH", "seq":N}': check the sequence cheaply
                seq = int(ack[ack.rindex(b":") + 1 : -1])
                if seq != expected:
                    ok = False
                expected += 1
            acked += WINDOW
        elapsed = time.perf_counter() - start
        info = conn.request(b"$JS.API.STREAM.INFO.BENCH", b"")
        ok = ok and info["state"]["messages"] == acked and info["state"]["last_seq"] == acked
        return acked / elapsed, ok
    finally:
        conn.close()


COUNTER_SUBJECTS = 100  # the counter workload's subjects (each increment reads its subject's total)


def bench_counter(port: int, duration: float) -> tuple[float, bool]:
    """Acked counter increments/s; and whether every ack's total was right."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "COUNT", "subjects": ["count.>"], "storage": "file", "allow_msg_counter": True})
        hdr = b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n"
        batch = b"".join(b"HPUB count.%d _R.a %d %d\r\n%s\r\n" % (i % COUNTER_SUBJECTS, len(hdr), len(hdr), hdr)
                         for i in range(WINDOW))
        totals = [0] * COUNTER_SUBJECTS
        ok = True
        acked = 0
        start = time.perf_counter()
        mark()
        deadline = start + duration
        while time.perf_counter() < deadline:
            conn.sock.sendall(batch)
            for i, (_, ack) in enumerate(conn.replies(WINDOW)):
                totals[i % COUNTER_SUBJECTS] += 1
                if json.loads(ack).get("val") != str(totals[i % COUNTER_SUBJECTS]):
                    ok = False
            acked += WINDOW
        elapsed = time.perf_counter() - start
        info = conn.request(b"$JS.API.STREAM.INFO.COUNT", b"")
        ok = ok and info["state"]["messages"] == acked
        return acked / elapsed, ok
    finally:
        conn.close()


SCHED_LEAD = 1.5  # s: the first @at is this far ahead (past nats-server's 250 ms floor)
SCHED_RATE = 200  # schedules a second (--sched-rate)


def bench_schedule(port: int, duration: float, rate: int = SCHED_RATE) -> tuple[float, bool, list[float]]:
    """Scheduled messages fired per second, whether each fired once, and each one's lateness
    (ms): its stored timestamp minus its @at time."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "SCHED", "subjects": ["sched.>"], "storage": "file", "allow_msg_schedules": True})
        conn.request(b"$JS.API.CONSUMER.CREATE.SCHED", json.dumps({"stream_name": "SCHED", "config": {
            "deliver_subject": "_F.fired", "ack_policy": "none", "filter_subject": "sched.fired.>",
            "deliver_policy": "all"}}).encode())
        conn.sock.sendall(b"SUB _F.fired 2\r\nPING\r\n")
        while conn._line() != b"PONG":
            pass
        n = max(1, int(rate * duration))
        first = time.time() + SCHED_LEAD
        due = {}
        out = bytearray()
        for i in range(n):
            at_ns = int((first + i / rate) * 1e3) * 1_000_000  # whole milliseconds
            due[b"sched.s.%d" % i] = at_ns
            secs, ns = divmod(at_ns, 1_000_000_000)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%03dZ" % (ns // 1_000_000)
            hdr = b"NATS/1.0\r\nNats-Schedule: @at %s\r\nNats-Schedule-Target: sched.fired.%d\r\n\r\n" % (
                stamp.encode(), i % 10)
            out += b"HPUB sched.s.%d _R.s %d %d\r\n%s%d\r\n" % (i, len(hdr), len(hdr) + len(b"%d" % i), hdr, i)
            if len(out) > 1 << 16 or i == n - 1:
                conn.sock.sendall(bytes(out))
                out.clear()
        conn.replies(n)  # the acks
        late: list[float] = []
        seen: set[bytes] = set()
        ok = True
        conn.sock.settimeout(SCHED_LEAD + duration + 5)
        while len(seen) < n:
            line = conn._line()
            if line == b"PING":
                conn.sock.sendall(b"PONG\r\n")
                continue
            parts = line.split()
            if parts[0] != b"HMSG" or parts[2] != b"2":  # (sid 2: the consumer's deliveries)
                continue
            total = int(parts[-1])
            while len(conn.buf) < total + 2:
                conn._fill()
            body = bytes(conn.buf[:total])
            del conn.buf[: total + 2]
            hdr = body[: int(parts[-2])]
            start = hdr.find(b"Nats-Scheduler: ") + len(b"Nats-Scheduler: ")
            scheduler = hdr[start : hdr.find(b"\r\n", start)]
            if scheduler in seen or scheduler not in due:
                ok = False
            seen.add(scheduler)
            stored_ns = int(parts[3].split(b".")[-2])  # $JS.ACK.<stream>.<consumer>.<n>.<sseq>.<cseq>.<ts>.<pending>
            late.append((stored_ns - due[scheduler]) / 1e6)
        info = conn.request(b"$JS.API.STREAM.INFO.SCHED", b"")
        ok = ok and info["state"]["messages"] == n  # the fired ones; every @at schedule purged
        span = max(due.values()) - min(due.values())
        return n / max(span / 1e9, 1e-9), ok, late
    finally:
        conn.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def bench_direct(port: int, duration: float) -> tuple[float, bool]:
    """DIRECT.GET by sequence per second on a stream of STREAM_MSGS messages."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "DG", "subjects": ["dg.>"], "storage": "file", "allow_direct": True})
        for start in range(0, STREAM_MSGS, WINDOW):
            n = min(WINDOW, STREAM_MSGS - start)
            conn.sock.sendall(b"".join(b"PUB dg.%d _R.p 16\r\n%016d\r\n" % (i % 100, i) for i in range(start, start + n)))
            conn.replies(n)
        ok = True
        done = 0
        seq = 0
        begin = time.perf_counter()
        mark()
        deadline = begin + duration
        while time.perf_counter() < deadline:
            reqs = []
            want = []
            for _ in range(WINDOW):
                seq = seq % STREAM_MSGS + 1
                body = b'{"seq":%d}' % seq
                reqs.append(b"PUB $JS.API.DIRECT.GET.DG _R.g %d\r\n%s\r\n" % (len(body), body))
                want.append(seq)
            conn.sock.sendall(b"".join(reqs))
            for (hdr, data), s in zip(conn.replies(WINDOW), want):
                if data != b"%016d" % (s - 1):
                    ok = False
            done += WINDOW
        return done / (time.perf_counter() - begin), ok
    finally:
        conn.close()


def bench_publish_sync(port: int, duration: float, size: int) -> tuple[float, bool]:
    """Acked publishes/s from one publisher that waits for every ack before the next publish
    (``await js.publish()`` in a loop): a round trip per message."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "BENCH", "subjects": ["bench.>"], "storage": "file"})
        pub = b"PUB bench.data _R.a %d\r\n%s\r\n" % (size, b"x" * size)
        ok = True
        acked = 0
        start = time.perf_counter()
        mark()
        deadline = start + duration
        while time.perf_counter() < deadline:
            for _ in range(64):
                conn.sock.sendall(pub)
                ack = conn.replies(1)[0][1]
                acked += 1
                if int(ack[ack.rindex(b":") + 1 : -1]) != acked:
                    ok = False
        elapsed = time.perf_counter() - start
        info = conn.request(b"$JS.API.STREAM.INFO.BENCH", b"")
        return acked / elapsed, ok and info["state"]["messages"] == acked
    finally:
        conn.close()


CONSUME_MSGS = 10_000  # messages a consume workload reads (stored before the clock starts)
CONSUME_SIZE = 128  # their payload
PULL_BATCH = 256  # a pull request's batch (issue 33)
MIXED_SUBJECTS = 64  # the mixed workload's subjects ...
MIXED_SIZES = (32, 4096)  # ... and its payload sizes, drawn for every message


def _fill(conn: Conn, msgs: list[bytes]) -> None:
    """Publish ``msgs`` (whole PUB commands), a window at a time, waiting for the acks."""
    for i in range(0, len(msgs), WINDOW):
        chunk = msgs[i : i + WINDOW]
        conn.sock.sendall(b"".join(chunk))
        conn.replies(len(chunk))


def _consume_stream(conn: Conn, n: int) -> None:
    create_stream(conn, {"name": "CONS", "subjects": ["cons.>"], "storage": "file"})
    payload = b"y" * CONSUME_SIZE
    _fill(conn, [b"PUB cons.%d _R.p %d\r\n%s\r\n" % (i % 16, CONSUME_SIZE, payload) for i in range(n)])


def _stream_seq(reply: bytes) -> int:
    """The stream sequence in an ack subject $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>...
    (2.9 shape) or $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>... (2.10+)."""
    tokens = reply.split(b".")
    return int(tokens[5] if len(tokens) == 9 else tokens[7])


class MsgConn(Conn):
    """A connection that also returns the reply subject of every MSG/HMSG it reads."""

    def messages(self, n: int) -> list[bytes]:
        """Read ``n`` MSG/HMSG that have a reply subject (status messages without one are
        skipped); return their reply subjects."""
        out = []
        while len(out) < n:
            line = self._line()
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                parts = line.split()
                total = int(parts[-1])
                while len(self.buf) < total + 2:
                    self._fill()
                del self.buf[: total + 2]
                if (parts[0] == b"MSG" and len(parts) == 5) or (parts[0] == b"HMSG" and len(parts) == 6):
                    out.append(parts[3])
            elif line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
        return out


def _pull_all(conn, stream: str, durable: str, config: dict) -> tuple[float, bool]:
    """Create the durable pull consumer (explicit acks, ``config`` added) and fetch the
    stream's CONSUME_MSGS in batches of PULL_BATCH, each batch's acks going out with the next
    request: the seconds it took, and whether the messages came in stream order."""
    cfg = {"stream_name": stream, "config": {"durable_name": durable, "ack_policy": "explicit", **config}}
    resp = conn.request(b"$JS.API.CONSUMER.CREATE.%s.%s" % (stream.encode(), durable.encode()), json.dumps(cfg).encode())
    if "error" in resp:
        raise RuntimeError(f"consumer create failed: {resp['error']}")
    req = b'{"batch":%d,"expires":5000000000}' % PULL_BATCH
    pull = b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s _R.n %d\r\n%s\r\n" % (stream.encode(), durable.encode(), len(req), req)
    ok = True
    got = 0
    acks = b""
    start = time.perf_counter()
    mark()
    while got < CONSUME_MSGS:
        conn.sock.sendall(acks + pull)
        replies = conn.messages(min(PULL_BATCH, CONSUME_MSGS - got))
        for r in replies:
            got += 1
            ok = ok and _stream_seq(r) == got
        acks = b"".join(b"PUB %s 0\r\n\r\n" % r for r in replies)
    conn.sock.sendall(acks)
    return time.perf_counter() - start, ok


def bench_pull(port: int, duration: float) -> tuple[float, bool]:
    """Messages/s through a durable pull consumer (explicit acks), fetched in batches of
    PULL_BATCH: each batch's acks go out with the next request."""
    conn = MsgConn(port)
    try:
        _consume_stream(conn, CONSUME_MSGS)
        elapsed, ok = _pull_all(conn, "CONS", "P", {})
        info = conn.request(b"$JS.API.CONSUMER.INFO.CONS.P", b"")
        ok = ok and info["delivered"]["stream_seq"] == CONSUME_MSGS
        return CONSUME_MSGS / elapsed, ok
    finally:
        conn.close()


def bench_push(port: int, duration: float) -> tuple[float, bool]:
    """Messages/s through a durable push consumer (explicit acks, the default max_ack_pending):
    every chunk of messages read is acked at once."""
    conn = MsgConn(port)
    try:
        _consume_stream(conn, CONSUME_MSGS)
        conn.sock.sendall(b"SUB _P.deliver 2\r\n")
        start = time.perf_counter()
        mark()
        cfg = {"stream_name": "CONS", "config": {"durable_name": "Q", "ack_policy": "explicit",
                                                 "deliver_subject": "_P.deliver"}}
        body = json.dumps(cfg).encode()
        conn.sock.sendall(b"PUB $JS.API.CONSUMER.CREATE.CONS.Q _R.c %d\r\n%s\r\n" % (len(body), body))
        ok = True
        got = 0
        while got < CONSUME_MSGS:
            # (the consumer's create response is an MSG without a reply subject: skipped)
            replies = conn.messages(min(64, CONSUME_MSGS - got))
            for r in replies:
                got += 1
                ok = ok and _stream_seq(r) == got
            conn.sock.sendall(b"".join(b"PUB %s 0\r\n\r\n" % r for r in replies))
        elapsed = time.perf_counter() - start
        return CONSUME_MSGS / elapsed, ok
    finally:
        conn.close()


KV_KEYS = 100  # the KV workload's keys


def bench_kv(port: int, duration: float, op: str) -> tuple[float, bool]:
    """KV puts/s (acked, as ``kv.put``) or gets/s (DIRECT.GET of the key's last value, as
    ``kv.get`` on a bucket with allow_direct), a window in flight, over KV_KEYS keys."""
    conn = Conn(port)
    try:
        create_stream(conn, {"name": "KV_B", "subjects": ["$KV.B.>"], "storage": "file", "max_msgs_per_subject": 1,
                             "discard": "new", "allow_rollup_hdrs": True, "deny_delete": True, "allow_direct": True})
        if op == "get":
            _fill(conn, [b"PUB $KV.B.k%d _R.p 16\r\n%016d\r\n" % (i, i) for i in range(KV_KEYS)])
            batch = b"".join(b"PUB $JS.API.DIRECT.GET.KV_B.$KV.B.k%d _R.g 0\r\n\r\n" % (i % KV_KEYS)
                             for i in range(WINDOW))
        else:
            batch = b"".join(b"PUB $KV.B.k%d _R.a 16\r\n%016d\r\n" % (i % KV_KEYS, i) for i in range(WINDOW))
        ok = True
        done = 0
        start = time.perf_counter()
        mark()
        deadline = start + duration
        while time.perf_counter() < deadline:
            conn.sock.sendall(batch)
            replies = conn.replies(WINDOW)
            if op == "get":
                ok = ok and sorted(p for _, p in replies) == sorted(b"%016d" % (i % KV_KEYS) for i in range(WINDOW))
            else:
                ok = ok and all(b'"seq"' in p and b"error" not in p for _, p in replies)
            done += WINDOW
        return done / (time.perf_counter() - start), ok
    finally:
        conn.close()


def bench_mixed(port: int, duration: float, phase: str) -> tuple[float, bool]:
    """The realistic workload: acked publishes to MIXED_SUBJECTS subjects, sizes drawn from
    MIXED_SIZES for every message, a window in flight ("pub"); or, after storing
    CONSUME_MSGS of them, reading them through a pull consumer on ``events.>`` ("pull")."""
    import random

    rng = random.Random(33)
    conn = MsgConn(port)
    try:
        create_stream(conn, {"name": "EV", "subjects": ["events.>"], "storage": "file"})
        msgs = []
        for i in range(4096):
            size = rng.randint(*MIXED_SIZES)
            msgs.append(b"PUB events.%d.x _R.a %d\r\n%s\r\n" % (rng.randrange(MIXED_SUBJECTS), size, b"e" * size))
        if phase == "pull":
            _fill(conn, [msgs[i % len(msgs)] for i in range(CONSUME_MSGS)])
            elapsed, ok = _pull_all(conn, "EV", "M", {"filter_subject": "events.>"})
            return CONSUME_MSGS / elapsed, ok
        ok = True
        acked = 0
        start = time.perf_counter()
        mark()
        deadline = start + duration
        while time.perf_counter() < deadline:
            i = acked % len(msgs)
            conn.sock.sendall(b"".join(msgs[i : i + WINDOW]))
            for _, ack in conn.replies(WINDOW):
                acked += 1
                if int(ack[ack.rindex(b":") + 1 : -1]) != acked:
                    ok = False
        elapsed = time.perf_counter() - start
        info = conn.request(b"$JS.API.STREAM.INFO.EV", b"")
        return acked / elapsed, ok and info["state"]["messages"] == acked
    finally:
        conn.close()


STORE_PAYLOAD = b"x" * 16


def _stream_msgs(port: int, name: str) -> int:
    """The stream's message count (-1: no such stream yet)."""
    conn = Conn(port)
    try:
        info = conn.request(b"$JS.API.STREAM.INFO." + name.encode(), b"")
    finally:
        conn.close()
    return info["state"]["messages"] if "state" in info else -1


def _time_to_ready(spec: ServerSpec, store: str, want: int) -> tuple[float, object]:
    """Seconds from starting the server on ``store`` until STREAM.INFO says ``want``
    messages (-1: until it answers at all); and the running server."""
    begin = time.perf_counter()
    server = start(spec, store, False)
    while True:
        got = _stream_msgs(server.port, "STORE")
        if got == want or (want < 0 and got < 0):
            return time.perf_counter() - begin, server
        if time.perf_counter() - begin > 600:
            server.stop()
            raise RuntimeError(f"{spec.label}: {got} of {want} messages after 600 s")
        time.sleep(0.005)


def _settled_rss(server) -> int:
    """The server's RSS (KiB) once it stopped moving: a restarted natserver answers from its
    index files' summaries and reads the arrays after (a 10 M-message stream: a second or
    more), so 0.5 s after the start would catch it half way."""
    time.sleep(0.5)
    rss = server.rss_kib()
    for _ in range(40):  # (at most 10 s more)
        time.sleep(0.25)
        again = server.rss_kib()
        if again == rss:
            break
        rss = again
    return rss


def bench_store(spec: ServerSpec, msgs: int) -> dict:
    """RSS growth per stored message and the restart after kill -9 (see the docstring)."""
    store = tempfile.mkdtemp(prefix="jsbench-store-")
    empty = tempfile.mkdtemp(prefix="jsbench-empty-")
    server = start(spec, store, False)
    try:
        conn = Conn(server.port)
        create_stream(conn, {"name": "STORE", "subjects": ["store.>"], "storage": "file"})
        time.sleep(0.5)
        rss_before = server.rss_kib()
        pub = b"PUB store.data _R.s %d\r\n%s\r\n" % (len(STORE_PAYLOAD), STORE_PAYLOAD)
        sent = 0
        fill_begin = time.perf_counter()
        while sent < msgs:
            n = min(WINDOW * 4, msgs - sent)
            conn.sock.sendall(pub * n)
            conn.replies(n)
            sent += n
        fill_s = time.perf_counter() - fill_begin
        conn.close()
        time.sleep(0.5)
        rss_after = server.rss_kib()
        ok = _stream_msgs(server.port, "STORE") == msgs
        os.kill(server.pid, 9)  # kill -9: no shutdown work
        server.proc.wait(10)
        server.stop()
        base_s, base = _time_to_ready(spec, empty, -1)  # the process alone
        base_rss = base.rss_kib()
        base.stop()
        restart_s, server = _time_to_ready(spec, store, msgs)
        restart_rss = _settled_rss(server)
        return {
            "msgs": msgs, "fill_msgs_per_s": msgs / fill_s,
            "rss_per_msg": (rss_after - rss_before) * 1024 / msgs,
            "restart_s": restart_s, "start_empty_s": base_s,
            "rss_per_msg_after_restart": (restart_rss - base_rss) * 1024 / msgs, "ok": ok,
        }
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)


def event(i: int) -> bytes:
    """A JSON-ish event (the compression workload): what most streams carry."""
    return (b'{"id":%d,"user":"user-%d","event":"page_view","path":"/products/%d","ts":"2026-11-28T10:%02d:%02d.%03dZ",'
            b'"agent":"Mozilla/5.0 (X11; Linux x86_64)","ok":true}' % (i, i % 997, i % 500, i // 3600 % 60, i // 60 % 60, i % 1000))


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            total += os.path.getsize(os.path.join(root, name))
    return total


def bench_compression(spec: ServerSpec, msgs: int, compression: str) -> dict:
    """Publish ``msgs`` events into a stream with ``compression``, stop, measure its message
    files, restart and read every message back by sequence."""
    store = tempfile.mkdtemp(prefix="jsbench-compress-")
    server = start(spec, store, False)
    try:
        conn = Conn(server.port)
        create_stream(conn, {"name": "EVENTS", "subjects": ["events.>"], "storage": "file", "compression": compression})
        sent = 0
        begin = time.perf_counter()
        while sent < msgs:
            n = min(WINDOW, msgs - sent)
            conn.sock.sendall(b"".join(b"PUB events.%d _R.p %d\r\n%s\r\n" % (i % 10, len(event(i)), event(i))
                                       for i in range(sent, sent + n)))
            conn.replies(n)
            sent += n
        pub_s = time.perf_counter() - begin
        conn.close()
        server.stop()  # (a clean stop: nats-server compresses a sealed block in the background)
        msgs_dir = os.path.join(store, "jetstream", "$G", "streams", "EVENTS", "msgs")
        disk = _dir_bytes(msgs_dir)
        server = start(spec, store, False)
        while _stream_msgs(server.port, "EVENTS") != msgs:
            time.sleep(0.01)
        conn = Conn(server.port)
        ok = True
        begin = time.perf_counter()
        for start_seq in range(1, msgs + 1, WINDOW):
            seqs = range(start_seq, min(start_seq + WINDOW, msgs + 1))
            conn.sock.sendall(b"".join(b'PUB $JS.API.STREAM.MSG.GET.EVENTS _R.g %d\r\n{"seq":%d}\r\n'
                                       % (len(b'{"seq":%d}' % s), s) for s in seqs))
            # (nats-server answers API requests from several goroutines: in any order)
            got = sorted(json.loads(data)["message"]["seq"] for _, data in conn.replies(len(seqs)))
            ok = ok and got == list(seqs)
        read_s = time.perf_counter() - begin
        conn.close()
        return {"msgs": msgs, "compression": compression, "pub_per_s": msgs / pub_s, "disk_bytes": disk,
                "plain_bytes": sum(len(event(i)) for i in range(msgs)), "read_per_s": msgs / read_s, "ok": ok}
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)


def run_compression(specs: list, msgs: int, rounds: int) -> dict:
    out: dict = {}
    for _ in range(rounds):
        for spec in specs:
            for compression in ("none", "s2"):
                r = bench_compression(spec, msgs, compression)
                out.setdefault(f"{spec.label} {compression}", []).append(r)
                print(f"  compression {compression:4s} {spec.label:12s} {msgs:,} events ({r['plain_bytes']:,} B): "
                      f"on disk {r['disk_bytes']:,} B, publish {r['pub_per_s']:,.0f}/s, "
                      f"read after restart {r['read_per_s']:,.0f}/s {'ok' if r['ok'] else 'WRONG'}", flush=True)
    summary = {}
    for label, runs in out.items():
        summary[label] = {k: statistics.median(r[k] for r in runs) for k in ("disk_bytes", "pub_per_s", "read_per_s")}
        summary[label]["rounds"] = runs
    return summary


def run_store(specs: list, msgs: int, rounds: int) -> dict:
    out: dict = {}
    for _ in range(rounds):
        for spec in specs:
            r = bench_store(spec, msgs)
            out.setdefault(spec.label, []).append(r)
            print(f"  store {msgs:,} x 16 B  {spec.label:12s} RSS {r['rss_per_msg']:6.1f} B/msg "
                  f"(after restart {r['rss_per_msg_after_restart']:6.1f}), restart after kill -9 "
                  f"{r['restart_s']:.3f} s (empty store {r['start_empty_s']:.3f} s), "
                  f"filled at {r['fill_msgs_per_s']:,.0f}/s {'ok' if r['ok'] else 'WRONG'}", flush=True)
    print()
    print(f"{'store, medians':26s} {'RSS B/msg':>10s} {'after restart':>14s} {'restart s':>10s} {'empty s':>8s}")
    summary = {}
    for label, runs in out.items():
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("rss_per_msg", "rss_per_msg_after_restart", "restart_s", "start_empty_s")}
        summary[label] = {**med, "rounds": runs}
        print(f"{label:26s} {med['rss_per_msg']:10.1f} {med['rss_per_msg_after_restart']:14.1f} "
              f"{med['restart_s']:10.3f} {med['start_empty_s']:8.3f}")
    return summary


def start(spec: ServerSpec, store: str, sync: bool):
    argv = list(spec.argv)
    if spec.label != "nats-server" and sync:
        conf = os.path.join(store, "js.conf")
        with open(conf, "w") as f:
            f.write(f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n')
        argv += ["-c", conf]
    else:
        argv += ["-js", "-sd", store]
    return ServerSpec(spec.label, argv).start()


WORKLOADS = {
    "pub": [("pub 16 B", 16, False), ("pub 1 KiB", 1024, False)],
    "pub-sync": [("pub 16 B, sync always", 16, True)],
    "direct": [("direct get", None, False)],
    "counter": [("counter increments", "counter", False)],
    "schedule": [("scheduled messages", "schedule", False)],
    "pub-1": [("pub 16 B, wait each ack", "pub-1", False)],
    "pull": [("pull consume, batch 256", "pull", False)],
    "push": [("push consume", "push", False)],
    "kv": [("kv put", "kv-put", False), ("kv get", "kv-get", False)],
    "mixed": [("mixed 64 subj pub", "mixed-pub", False), ("mixed 64 subj pull", "mixed-pull", False)],
    "go": [("nats.go: pub 16 B, 64 subj", "go-pub", False), ("nats.go: pull, Fetch(256)", "go-pull", False),
           ("nats.go: kv.Put", "go-kvput", False), ("nats.go: kv.Get", "go-kvget", False)],
}
# Issue 33's JetStream scenarios (and #28's counter): ``--only issue33``.
ISSUE33 = "pub-1,pub,pull,push,kv,mixed,counter"
RUNNERS = {
    "counter": bench_counter, "pub-1": lambda port, d: bench_publish_sync(port, d, 16),
    "pull": bench_pull, "push": bench_push,
    "kv-put": lambda port, d: bench_kv(port, d, "put"), "kv-get": lambda port, d: bench_kv(port, d, "get"),
    "mixed-pub": lambda port, d: bench_mixed(port, d, "pub"), "mixed-pull": lambda port, d: bench_mixed(port, d, "pull"),
    "go-pub": lambda port, d: bench_natsgo(port, d, ["-mode", "jspub", "-subjects", "64", "-size", "16"]),
    "go-pull": lambda port, d: bench_natsgo(port, d, ["-mode", "jspull", "-size", "16"]),
    "go-kvput": lambda port, d: bench_natsgo(port, d, ["-mode", "kvput", "-size", "16"]),
    "go-kvget": lambda port, d: bench_natsgo(port, d, ["-mode", "kvget", "-size", "16"]),
}


def bench_natsgo(port: int, duration: float, args: list[str]) -> tuple[float, bool]:
    """A workload driven by nats.go's own JetStream API (benchmarks/go/natsgo_bench.go's
    JetStream modes): what a user's Go service sees, beside the raw-wire workloads above, whose
    load generator costs less (nats.go's PublishAsync acks come on a new inbox subject each)."""
    from benchmarks import natsgo

    report = natsgo.run_marked(port, [*args, "-duration", f"{duration}s"], 120 + duration, mark)
    return report["rate"], bool(report["ok"])


def main(argv=None) -> int:
    global _SERVER
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="pub,pub-sync,direct",
                        help="also: store, counter, compression, schedule, pub-1, pull, push, kv, mixed; issue33 = " + ISSUE33)
    parser.add_argument("--sched-rate", type=int, default=SCHED_RATE, help="schedules a second (schedule)")
    parser.add_argument("--store-msgs", type=int, default=1_000_000, help="messages for the store workload")
    parser.add_argument("--store-10m", action="store_true", help="the store workload with 10 000 000 messages")
    parser.add_argument("--compress-msgs", type=int, default=100_000, help="events for the compression workload")
    parser.add_argument("--nats-server-cmd", default=None, help="'none' to skip nats-server")
    parser.add_argument("--baseline-cmd", default=None,
                        help="a third server in the same interleaved rounds, reported as 'before' (e.g. "
                             "'env PYTHONPATH=/tmp/old python -m natserver' for an older checkout)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration = min(args.rounds, 2), 1.0

    specs = [ServerSpec("natserver", default_natserver_cmd())]
    go = default_nats_server_cmd() if args.nats_server_cmd is None else (
        None if args.nats_server_cmd == "none" else args.nats_server_cmd.split())
    if go:
        specs.append(ServerSpec("nats-server", go))
    if args.baseline_cmd:
        specs.insert(1, ServerSpec("before", parse_cmd(args.baseline_cmd)))

    results: dict = {}
    failures = 0
    cpu: dict = {}  # workload -> server -> CPU microseconds per operation, each round
    load = [os.getloadavg()[0]]  # the machine's load (shared machines: numbers move with it)
    store_summary = None
    compression_summary = None
    lateness: dict = {}
    for key in args.only.replace("issue33", ISSUE33).split(","):
        if key == "compression":
            compression_summary = run_compression(specs, args.compress_msgs, args.rounds)
            failures += sum(not r["ok"] for by in compression_summary.values() for r in by["rounds"])
            continue
        if key == "store":
            store_summary = run_store(specs, 10_000_000 if args.store_10m else args.store_msgs, args.rounds)
            failures += sum(not r["ok"] for by in store_summary.values() for r in by["rounds"])
            continue
        for label, size, sync in WORKLOADS[key]:
            for spec in specs:
                if sync and spec.label == "nats-server":
                    continue
                results.setdefault(label, {})[spec.label] = []
            for _ in range(args.rounds):
                for spec in specs:
                    if sync and spec.label == "nats-server":
                        continue
                    store = tempfile.mkdtemp(prefix="jsbench-")
                    server = start(spec, store, sync)
                    _SERVER = server
                    _MARKS.clear()
                    try:
                        if size is None:
                            rate, ok = bench_direct(server.port, args.duration)
                        elif size == "counter":
                            rate, ok = bench_counter(server.port, args.duration)
                        elif size == "schedule":
                            rate, ok, late = bench_schedule(server.port, args.duration, args.sched_rate)
                            lateness.setdefault(spec.label, []).append(late)
                            print(f"  {'':24s} {spec.label:12s} lateness p50 {_pct(late, 0.5):.1f} ms, "
                                  f"p99 {_pct(late, 0.99):.1f} ms, max {max(late):.1f} ms", flush=True)
                        elif isinstance(size, str):
                            rate, ok = RUNNERS[size](server.port, args.duration)
                        else:
                            rate, ok = bench_publish(server.port, args.duration, size)
                        cpu_us = None
                        if _MARKS:
                            (t0, c0), t1, c1 = _MARKS[0], time.perf_counter(), server.cpu_seconds()
                            cpu_us = (c1 - c0) * 1e6 / max(rate * (t1 - t0), 1)
                    finally:
                        _SERVER = None
                        server.stop()
                        shutil.rmtree(store, ignore_errors=True)
                    results[label][spec.label].append(rate)
                    cpu.setdefault(label, {}).setdefault(spec.label, []).append(cpu_us)
                    failures += not ok
                    print(f"  {label:24s} {spec.label:12s} {rate:12,.0f}/s {'ok' if ok else 'WRONG'}"
                          f"{f'  server CPU {cpu_us:6.1f} us/op' if cpu_us else ''}", flush=True)

    load.append(os.getloadavg()[0])
    print(f"\nload average (1 min) at the start and the end: {load[0]:.1f}, {load[1]:.1f}")
    before_cols = f" {'before':>12s} {'ratio':>6s}" if args.baseline_cmd else ""
    print(f"{'workload':26s} {'natserver':>14s} {'nats-server':>14s} {'ratio':>7s}{before_cols}")
    summary = {}
    for label, by in results.items():
        nat = statistics.median(by["natserver"]) if by.get("natserver") else None
        ref = statistics.median(by["nats-server"]) if by.get("nats-server") else None
        ratio = nat / ref if nat and ref else None
        summary[label] = {"natserver": nat, "nats-server": ref, "ratio": ratio, "rounds": by}
        old = ""
        if by.get("before"):
            base = statistics.median(by["before"])
            summary[label]["before"] = base
            summary[label]["before_ratio"] = base / ref if ref else None
            old = f" {base:12,.0f} {(f'{base / ref:6.2f}' if ref else '     -')}"
        print(f"{label:26s} {nat or 0:14,.0f} {(f'{ref:14,.0f}' if ref else '             -')} "
              f"{(f'{ratio:7.2f}' if ratio else '      -')}{old}")
    if lateness:
        print(f"\n{'schedule lateness (ms)':26s} {'p50':>8s} {'p99':>8s} {'max':>8s}")
        for label, runs in lateness.items():
            merged = [v for run in runs for v in run]
            summary.setdefault("scheduled messages", {})[f"lateness {label}"] = {
                "p50": _pct(merged, 0.5), "p99": _pct(merged, 0.99), "max": max(merged)}
            print(f"{label:26s} {_pct(merged, 0.5):8.1f} {_pct(merged, 0.99):8.1f} {max(merged):8.1f}")
    if cpu:
        print(f"\n{'server CPU us/op, medians':26s} " + " ".join(f"{s.label:>12s}" for s in specs))
        for label, by in cpu.items():
            meds = {k: statistics.median(v) for k, v in by.items() if v and None not in v}
            summary[label]["cpu_us_per_op"] = meds
            print(f"{label:26s} " + " ".join(f"{meds[s.label]:12.1f}" if s.label in meds else f"{'-':>12s}"
                                             for s in specs))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, time.strftime("jetstream-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump({"load": load, "window": WINDOW, "duration": args.duration, "rounds": args.rounds, "results": summary,
                   "store": store_summary, "compression": compression_summary}, f, indent=2)
    print(f"\nwrote {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
