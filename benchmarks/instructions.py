"""Instructions per message on natserver's 1 -> 1 path, counted by callgrind (deterministic
where seconds are not: see the README's note on this machine's noise).

    python -m benchmarks.instructions             # 1 -> 1, 16 B; 1 -> 1 sizes 16-512 B; 1 -> 4 wildcards, 64 subjects; 1 -> 1 1 KiB
    python -m benchmarks.instructions --n 50000 --only traffic,queue  # scenarios (n) and (o)
    python -m benchmarks.instructions --only inbox,reqrep   # request/reply round trips (issue 33)
    python -m benchmarks.instructions --only goinbox,goreqrep  # the same as nats.go CONNECTs, the server alone
    python -m benchmarks.instructions --only counter,jspub  # acked JetStream publishes (issue 28)
    python -m benchmarks.instructions --only jsserver  # acked publishes, the server alone (issue 33)
    python -m benchmarks.instructions --only kvput,kvget    # KV puts and direct gets (issue 33)
    python -m benchmarks.instructions --only jstail,jspull,jspush,jsmixed  # JetStream consumers (issue 33)
    python -m benchmarks.instructions --only connect  # a connect storm, the server's side (issue 33, scenario h)

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

N, KIND = int(sys.argv[1]), sys.argv[2]
BATCH = 2000
SUBS = ["bench.s"] if KIND not in ("traffic", "queue") else ["bench.*", "bench.>", "bench.*", "bench.>"]
QUEUE = b"grp " if KIND == "queue" else b""  # scenario (o): the four in one queue group
# "queue" publishes as the scenarios' wire driver does (benchmarks/wire.py), pedantic off, which
# lets the compiled delivery loop take the messages; the older workloads keep CONNECT's default
# (pedantic on: each PUB's subject checked in Python), so their counts compare with earlier ones.
PUB_CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\n' if QUEUE else b'CONNECT {"verbose":false}\r\n'

async def main():
    # One batch, sent N // BATCH times: building it costs the same in both runs, so it cancels.
    rng = random.Random(7)
    if KIND in ("traffic", "queue"):  # benchmarks scenario (n): 64 subjects, 32-256 B, 4 wildcard subscribers
        msgs = [(b"bench.%d" % rng.randrange(64), rng.randint(32, 256)) for _ in range(BATCH)]
    else:
        size = {"uniform": 16, "kib": 1024}.get(KIND)
        msgs = [(b"bench.s", size or rng.randint(16, 512)) for _ in range(BATCH)]
    batch = b"".join(b"PUB %s %d\r\n%s\r\n" % (s, n, b"x" * n) for s, n in msgs)
    expected = sum(len(b"MSG %s 1 %d\r\n" % (s, n)) + n + 2 for s, n in msgs) * (N // BATCH)
    data = batch * (N // BATCH)
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
        subs = []
        for subject in SUBS:
            sub = await trio.open_tcp_stream("127.0.0.1", server.port)
            await sub.send_all(b'CONNECT {"verbose":false}\r\nSUB %s %s1\r\nPING\r\n' % (subject.encode(), QUEUE))
            got = b""
            while b"PONG\r\n" not in got:
                got += await sub.receive_some(65536)
            subs.append(sub)
        pub = await trio.open_tcp_stream("127.0.0.1", server.port)
        await pub.send_all(PUB_CONNECT)

        async def send():
            for i in range(0, len(data), 65536):
                await pub.send_all(data[i:i + 65536])

        async def receive(sub):
            received = 0
            while received < expected:
                received += len(await sub.receive_some(1 << 20))
            assert received >= expected, (received, expected)  # (+ the server's PINGs under valgrind)

        queued = [0]  # a queue group's members share the messages: counted together

        async def receive_shared(sub):
            while queued[0] < expected:
                got = len(await sub.receive_some(1 << 20))  # (before the +=, which reads first)
                queued[0] += got
            receivers.cancel_scope.cancel()

        async with trio.open_nursery() as receivers:
            for sub in subs:
                receivers.start_soon(receive_shared if QUEUE else receive, sub)
            nursery.start_soon(send)
        await server.shutdown()
        nursery.cancel_scope.cancel()

trio.run(main)
"""

# Request/reply round trips through the in-process server (two hops each), the requester and
# the responder being trio clients in the same process. "inbox": as nats.go's Request() does it,
# a new reply subject every request under one wildcard subscription (_INBOX.<id>.*), so every
# reply is a subject cache miss; "reqrep": one fixed reply subject, as scenario (g) sends.
_REQREP_WORKLOAD = r"""
import sys, trio, natserver

N, KIND = int(sys.argv[1]), sys.argv[2]
INBOX = b"_INBOX.abcdefghijklmnopqrstuv"

async def main():
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))

        async def connect(sub):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n%sPING\r\n' % sub)
            got = b""
            while b"PONG\r\n" not in got:
                got += await stream.receive_some(65536)
            return stream

        responder = await connect(b"SUB bench.req 1\r\n")
        requester = await connect(b"SUB %s%s 1\r\n" % (INBOX, b".*" if KIND == "inbox" else b""))
        for i in range(N):
            reply = b"%s.%d" % (INBOX, i) if KIND == "inbox" else INBOX
            await requester.send_all(b"PUB bench.req %s 16\r\nxxxxxxxxxxxxxxxx\r\n" % reply)
            await responder.receive_some(4096)
            await responder.send_all(b"PUB %s 16\r\nxxxxxxxxxxxxxxxx\r\n" % reply)
            await requester.receive_some(4096)
        nursery.cancel_scope.cancel()

trio.run(main)
"""
_REQREP_KINDS = ("inbox", "reqrep")

# The same round trips with the server alone traced: the requester and the responder are
# blocking sockets in a child process (valgrind follows no exec), CONNECTing as nats.go does
# ("pedantic":false, so the server takes its compiled path; the workloads above are pedantic),
# and the server collects garbage as the binary does (cli._tune_gc). "goinbox": a new
# _INBOX.<id>.<n> reply subject each request, as nats.go's Request(); "goreqrep": one.
_GO_REQREP_WORKLOAD = r"""
import subprocess, sys, trio, natserver
from natserver.cli import _tune_gc

N, KIND = int(sys.argv[1]), sys.argv[2]
CLIENTS = '''
import socket, sys
port, n, inbox = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "goinbox"
def connect(sub):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\\r\\n' + sub + b"PING\\r\\n")
    got = b""
    while b"PONG\\r\\n" not in got:
        got += s.recv(65536)
    return s
INBOX = b"_INBOX.abcdefghijklmnopqrstuv"
responder = connect(b"SUB bench.req 1\\r\\n")
requester = connect(b"SUB " + INBOX + (b".*" if inbox else b"") + b" 1\\r\\n")
for i in range(n):
    reply = b"%s.%d" % (INBOX, i) if inbox else INBOX
    requester.sendall(b"PUB bench.req %s 16\\r\\nxxxxxxxxxxxxxxxx\\r\\n" % reply)
    responder.recv(4096)
    responder.sendall(b"PUB %s 16\\r\\nxxxxxxxxxxxxxxxx\\r\\n" % reply)
    requester.recv(4096)
'''

async def main():
    _tune_gc()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
        await trio.run_process([sys.executable, "-c", CLIENTS, str(server.port), str(N), KIND])
        nursery.cancel_scope.cancel()

trio.run(main)
"""
_GO_REQREP_KINDS = ("goinbox", "goreqrep")

# Acknowledged JetStream publishes into a file stream, a window of 512 in flight as
# bench_jetstream's workloads send them: "counter" increments a counter stream (Nats-Incr, 100
# subjects; issue 28), "jspub" publishes 16 B without headers (the same path without the
# counter), "jstail" the same with a push consumer delivering each message as it is stored (no
# acks: a consumer keeping up, issue 33). The server's acks come back to the same raw client.
_JS_WORKLOAD = r"""
import sys, tempfile, trio, natserver

N, KIND = int(sys.argv[1]), sys.argv[2]
WINDOW = 512

async def main():
    with tempfile.TemporaryDirectory() as store_dir:
        async with trio.open_nursery() as nursery:
            options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True, store_dir=store_dir)
            server = await nursery.start(natserver.serve, options)
            conn = await trio.open_tcp_stream("127.0.0.1", server.port)
            if KIND in ("kvput", "kvget"):  # as bench_jetstream's KV bucket (nats-py's create_key_value)
                config = (b'{"name":"KV_B","subjects":["$KV.B.>"],"storage":"file","max_msgs_per_subject":1,'
                          b'"discard":"new","allow_rollup_hdrs":true,"deny_delete":true,"allow_direct":true}')
            else:
                config = b'{"name":"B","subjects":["b.>"],"storage":"file"%s}' % (
                    b',"allow_msg_counter":true' if KIND == "counter" else b"")
            await conn.send_all(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _R.> 1\r\n'
                                b"PUB $JS.API.STREAM.CREATE.%s _R.c %d\r\n%s\r\n" % (
                                    b"KV_B" if KIND.startswith("kv") else b"B", len(config), config))
            got = b""
            while b"io.nats.jetstream.api.v1.stream_create_response" not in got:
                got += await conn.receive_some(65536)
            tailing = KIND == "jstail"
            if tailing:  # a push consumer (no acks) on _P.x delivers each message as it is stored
                c = b'{"stream_name":"B","config":{"durable_name":"T","ack_policy":"none","deliver_subject":"_P.x"}}'
                await conn.send_all(b"SUB _P.x 2\r\nPUB $JS.API.CONSUMER.CREATE.B.T _R.c %d\r\n%s\r\n" % (len(c), c))
                while b"consumer_create_response" not in got:
                    got += await conn.receive_some(65536)
            hdr = b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n"
            if KIND == "kvget":  # 100 keys stored, then their last values read back
                await conn.send_all(b"".join(b"PUB $KV.B.k%d _R.p 16\r\n%016d\r\n" % (i, i) for i in range(100)))
                got = b""
                while got.count(b'"seq":') < 100:
                    got += await conn.receive_some(65536)
                window = b"".join(b"PUB $JS.API.DIRECT.GET.KV_B.$KV.B.k%d _R.g 0\r\n\r\n" % (i % 100)
                                  for i in range(WINDOW))
            elif KIND == "kvput":
                window = b"".join(b"PUB $KV.B.k%d _R.a 16\r\n%016d\r\n" % (i % 100, i) for i in range(WINDOW))
            elif KIND == "counter":
                window = b"".join(b"HPUB b.%d _R.a %d %d\r\n%s\r\n" % (i % 100, len(hdr), len(hdr), hdr)
                                  for i in range(WINDOW))
            else:
                window = b"".join(b"PUB b.%d _R.a 16\r\nxxxxxxxxxxxxxxxx\r\n" % (i % 100) for i in range(WINDOW))
            for _ in range(N // WINDOW):
                await conn.send_all(window)
                acks = msgs = 0
                tail = b""
                while acks < WINDOW or (tailing and msgs < WINDOW):
                    data = tail + await conn.receive_some(1 << 20)
                    cut = data.rfind(b"\r\n")
                    acks += data.count(b"HMSG " if KIND == "kvget" else b'"seq":', 0, cut)
                    msgs += data.count(b"MSG b.", 0, cut)
                    tail = data[cut:]
            nursery.cancel_scope.cancel()

trio.run(main)
"""
_JS_KINDS = ("counter", "jspub", "jstail", "kvput", "kvget", "jsserver")

# "jsserver": jspub's publishes with the server alone in the traced process and the publisher in
# a child process (not traced: valgrind follows no exec), which sends each window of 512 at
# once and reads its acks. jspub's count moves with where valgrind's timing cuts the in-process
# client's reads; the server's alone does not (issue 33).
_JS_SERVER_WORKLOAD = r"""
import subprocess, sys, tempfile, trio, natserver
from natserver.cli import _tune_gc

N = int(sys.argv[1])
PUBLISHER = '''
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(600)
def until(token, buf=b""):
    while token not in buf:
        buf += s.recv(1 << 20)
until(b"\\r\\n")
config = b'{"name":"B","subjects":["b.>"],"storage":"file"}'
s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\\r\\nSUB _R.> 1\\r\\n'
          b"PUB $JS.API.STREAM.CREATE.B _R.c %d\\r\\n%s\\r\\n" % (len(config), config))
until(b"stream_create_response")
window = b"".join(b"PUB b.%d _R.a 16\\r\\nxxxxxxxxxxxxxxxx\\r\\n" % (i % 100) for i in range(512))
for _ in range(n // 512):
    s.sendall(window)
    acks, tail = 0, b""
    while acks < 512:
        data = tail + s.recv(1 << 20)
        cut = data.rfind(b"\\r\\n")
        acks += data.count(b'"seq":', 0, cut)
        tail = data[cut:]
s.close()
'''

async def main():
    _tune_gc()
    with tempfile.TemporaryDirectory() as store_dir:
        async with trio.open_nursery() as nursery:
            options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True, store_dir=store_dir)
            server = await nursery.start(natserver.serve, options)
            publisher = [sys.executable, "-c", PUBLISHER, str(server.port), str(N)]
            await trio.to_thread.run_sync(lambda: subprocess.run(publisher, check=True, timeout=1200))
            nursery.cancel_scope.cancel()

trio.run(main)
"""

# JetStream consumption (issue 33), as bench_jetstream's pull and push workloads read: a file
# stream of STORED messages of 128 B over 16 subjects is filled once (the same in both runs, so
# it cancels), then read N // STORED times through a new durable consumer with explicit acks,
# the client acking each message: "jspull" fetches batches of 256, each batch's acks going out
# with the next request; "jspush" a push consumer (default max_ack_pending), acked per chunk
# read; "jsmixed" a pull consumer on a wildcard filter over 64 subjects, sizes 32 B-4 KiB.
# Each consumer is deleted when done.
_JSC_WORKLOAD = r"""
import random, re, sys, tempfile, trio, natserver

N, KIND = int(sys.argv[1]), sys.argv[2]
STORED, BATCH, WINDOW = 2000, 256, 512
MSG = re.compile(rb"MSG \S+ \S+ (\$JS\.ACK\.\S+) (\d+)\r\n")

async def main():
    with tempfile.TemporaryDirectory() as store_dir:
        async with trio.open_nursery() as nursery:
            options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True, store_dir=store_dir)
            server = await nursery.start(natserver.serve, options)
            conn = await trio.open_tcp_stream("127.0.0.1", server.port)
            buf = b""

            async def until(token):
                nonlocal buf
                while token not in buf:
                    buf += await conn.receive_some(1 << 20)
                buf = buf[buf.index(token) + len(token):]

            async def request(subject, body):
                await conn.send_all(b"PUB %s _R.r %d\r\n%s\r\n" % (subject, len(body), body))
                await until(b"_response")

            async def messages(n):
                # the reply subjects of the next n MSGs with one (and their payloads read)
                nonlocal buf
                replies, pos = [], 0
                while len(replies) < n:
                    m = MSG.search(buf, pos)
                    if m is None or m.end() + int(m.group(2)) + 2 > len(buf):
                        buf = buf[pos:]
                        pos = 0
                        buf += await conn.receive_some(1 << 20)
                        continue
                    replies.append(m.group(1))
                    pos = m.end() + int(m.group(2)) + 2
                buf = buf[pos:]
                return replies

            await conn.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nSUB _R.> 1\r\n')
            mixed = KIND == "jsmixed"
            await request(b"$JS.API.STREAM.CREATE.C", b'{"name":"C","subjects":["c.>"],"storage":"file"}')
            rng = random.Random(33)
            pubs = []
            for i in range(STORED):
                size = rng.randint(32, 4096) if mixed else 128
                subject = b"c.%d.x" % rng.randrange(64) if mixed else b"c.%d" % (i % 16)
                pubs.append(b"PUB %s _R.a %d\r\n%s\r\n" % (subject, size, b"y" * size))
            for i in range(0, STORED, WINDOW):
                await conn.send_all(b"".join(pubs[i:i + WINDOW]))
                acks = 0
                while acks < len(pubs[i:i + WINDOW]):
                    data = await conn.receive_some(1 << 20)
                    buf += data
                    acks = buf.count(b'"seq":')
                buf = b""
            for round in range(N // STORED):
                name = b"D%d" % round
                if KIND == "jspush":
                    deliver = b"_P.%d" % round
                    await conn.send_all(b"SUB %s 2\r\n" % deliver)
                    config = b'{"durable_name":"%s","ack_policy":"explicit","deliver_subject":"%s"}' % (name, deliver)
                else:
                    config = b'{"durable_name":"%s","ack_policy":"explicit"%s}' % (
                        name, b',"filter_subject":"c.>"' if mixed else b"")
                await request(b"$JS.API.CONSUMER.CREATE.C.%s" % name,
                              b'{"stream_name":"C","config":%s}' % config)
                got = 0
                if KIND == "jspush":
                    while got < STORED:
                        replies = await messages(min(64, STORED - got))
                        got += len(replies)
                        await conn.send_all(b"".join(b"PUB %s 0\r\n\r\n" % r for r in replies))
                    await conn.send_all(b"UNSUB 2\r\n")
                else:
                    pull = b'{"batch":%d,"expires":5000000000}' % BATCH
                    pull = b"PUB $JS.API.CONSUMER.MSG.NEXT.C.%s _R.n %d\r\n%s\r\n" % (name, len(pull), pull)
                    acks = b""
                    while got < STORED:
                        await conn.send_all(acks + pull)
                        replies = await messages(min(BATCH, STORED - got))
                        got += len(replies)
                        acks = b"".join(b"PUB %s 0\r\n\r\n" % r for r in replies)
                    await conn.send_all(acks)
                await request(b"$JS.API.CONSUMER.DELETE.C.%s" % name, b"")
            nursery.cancel_scope.cancel()

trio.run(main)
"""
_JSC_KINDS = ("jspull", "jspush", "jsmixed")

# A connect storm (scenario h, issue 33), the server's side only: the server runs in the traced
# process, collecting garbage as the command line does (cli._tune_gc), and a connector in a
# child process (not traced: valgrind follows no exec) opens N connections with 128 handshakes in
# flight as benchmarks/wire.py idle_worker does (INFO, CONNECT + PING, PONG), answers each one's
# first keep-alive PING (so that every connection gets exactly one, however slow the traced run),
# PINGs each once and closes them all; the server stops once every one is gone.
_CONNECT_WORKLOAD = r"""
import subprocess, sys, trio, natserver
from natserver.cli import _tune_gc

N = int(sys.argv[1])
CONNECTOR = '''
import selectors, socket, sys
port, count, sel, held, opened, busy = int(sys.argv[1]), int(sys.argv[2]), selectors.DefaultSelector(), [], 0, 0
while len(held) < count:
    while busy < 128 and opened < count:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_READ, [b"", False])
        opened, busy = opened + 1, busy + 1
    for key, _ in sel.select(60):
        s, st = key.fileobj, key.data
        data = s.recv(65536)
        assert data, "closed by the server"
        st[0] += data
        if not st[1] and st[0].endswith(b"\\r\\n"):
            assert st[0].startswith(b"INFO "), st[0]
            st[:] = [b"", True]
            s.send(b'CONNECT {"verbose":false,"pedantic":false}\\r\\nPING\\r\\n')
        elif st[1] and b"PONG\\r\\n" in st[0]:
            sel.unregister(s)
            busy -= 1
            held.append(s)
for s in held:  # the server's first keep-alive PING (2-2.4 s after CONNECT), answered; ours
    s.settimeout(60)
    got = b""
    while b"PING\\r\\n" not in got:
        got += s.recv(64)
    s.sendall(b"PONG\\r\\nPING\\r\\n")
    while not got.endswith(b"PONG\\r\\n"):
        got += s.recv(64)
for s in held:
    s.close()
'''

async def main():
    _tune_gc()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
        connector = [sys.executable, "-c", CONNECTOR, str(server.port), str(N)]
        await trio.to_thread.run_sync(lambda: subprocess.run(connector, check=True, timeout=1200))
        while server.clients:
            await trio.sleep(0.01)
        await server.shutdown()
        nursery.cancel_scope.cancel()

trio.run(main)
"""
CONNECT_SCALE = 50  # a connect storm opens --n / 50 connections (each costs as much as ~500 messages)


REQREP_SCALE = 20  # request/reply workloads run --n / 20 round trips
JS_SCALE = 4  # JetStream workloads run --n / 4 publishes (each costs as much as ~5 messages)
JSC_SCALE = 5  # JetStream consumers read --n / 5 messages (in rounds of 2000, a new consumer each)


def count(n: int, kind: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(_REQREP_WORKLOAD if kind in _REQREP_KINDS else _GO_REQREP_WORKLOAD if kind in _GO_REQREP_KINDS
                    else _JS_SERVER_WORKLOAD if kind == "jsserver" else _JS_WORKLOAD if kind in _JS_KINDS
                    else _JSC_WORKLOAD if kind in _JSC_KINDS else _CONNECT_WORKLOAD if kind == "connect"
                    else _WORKLOAD)
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
    parser.add_argument("--n", type=int, default=100_000, help="messages in the long run (default 100000, a multiple of 10000)")
    parser.add_argument("--only", help="comma-separated workloads: uniform, mixed, traffic, queue, kib, inbox, reqrep, goinbox, goreqrep, counter, jspub, jsserver, kvput, kvget, jstail, jspull, jspush, jsmixed, connect (default: all)")
    parser.add_argument("--workload", help=argparse.SUPPRESS)  # write the workload script here and stop
    args = parser.parse_args(argv)
    if args.workload:
        with open(args.workload, "w") as f:
            f.write(_WORKLOAD)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    random.seed(0)
    kinds = (("uniform", "1 -> 1, 16 B"), ("mixed", "1 -> 1, 16-512 B"),
             ("traffic", "1 -> 4 wildcard subscribers, 64 subjects, 32-256 B"),
             ("queue", "1 -> wildcard queue group of 4, 64 subjects, 32-256 B"), ("kib", "1 -> 1, 1 KiB"),
             ("inbox", "request/reply, nats.go-style reply subjects (_INBOX.<id>.<n>, one wildcard sub)"),
             ("reqrep", "request/reply, one fixed reply subject"),
             ("goinbox", "request/reply as nats.go CONNECTs, the server alone, _INBOX.<id>.<n> replies"),
             ("goreqrep", "request/reply as nats.go CONNECTs, the server alone, one reply subject"),
             ("counter", "JetStream counter increments, acked, 512 in flight, 100 subjects"),
             ("jspub", "JetStream publishes of 16 B, acked, 512 in flight, 100 subjects"),
             ("jsserver", "JetStream publishes of 16 B, acked, 512 in flight, 100 subjects, the server alone"),
             ("kvput", "KV puts of 16 B, acked, 512 in flight, 100 keys"),
             ("kvget", "KV gets (DIRECT.GET of a key's last value), 512 in flight, 100 keys"),
             ("jstail", "JetStream publishes of 16 B, acked, with a push consumer delivering each (no acks)"),
             ("jspull", "JetStream pull consumer, batches of 256, explicit acks, 128 B, 16 subjects"),
             ("jspush", "JetStream push consumer, explicit acks, 128 B, 16 subjects"),
             ("jsmixed", "JetStream pull consumer on c.>, batches of 256, 64 subjects, 32 B-4 KiB"),
             ("connect", "connect storm, the server alone: accept, INFO, CONNECT + PING, PONG, a keep-alive, a PING, the close"))
    for kind, label in kinds:
        if args.only and kind not in args.only.split(","):
            continue
        # A round trip costs as much as ~40 pub/sub messages: fewer of them, same run time.
        n = (args.n // REQREP_SCALE if kind in (*_REQREP_KINDS, *_GO_REQREP_KINDS) else args.n // JS_SCALE if kind in _JS_KINDS
             else args.n // JSC_SCALE if kind in _JSC_KINDS else args.n // CONNECT_SCALE if kind == "connect"
             else args.n)
        long, short = count(n, kind), count(n // 5, kind)
        # (a JetStream run sends whole windows of 512, a consumer run reads whole rounds of 2000)
        done = ((lambda m: m // 512 * 512) if kind in _JS_KINDS else (lambda m: m // 2000 * 2000)
                if kind in _JSC_KINDS else (lambda m: m))
        per = (long - short) / (done(n) - done(n // 5))
        unit = ("round trip (server and both clients)" if kind in _REQREP_KINDS
                else "round trip (the server alone)" if kind in _GO_REQREP_KINDS
                else "publish (the server alone)" if kind == "jsserver"
                else "publish (server and client)" if kind in _JS_KINDS
                else "message consumed and acked (server and client)" if kind in _JSC_KINDS
                else "connection (the server alone)" if kind == "connect" else "message")
        print(f"{label}: {per:,.0f} instructions a {unit} ({long:,} and {short:,} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
