"""Crash safety: ``kill -9`` the server during a flood of acknowledged publishes into a file
stream, restart it on the same store directory, and check that every acknowledged message is
there, in order, with no gap and no garbage.

One raw-protocol publisher keeps a window of publishes in flight, each with its own reply
subject, payloads of random sizes (some with headers), so the kill lands in the middle of
writes. Message i carries i in its payload and its payload is a function of i, so every
stored message can be checked; since one publisher publishes in order, the message with
sequence s must be message s - 1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

NATS_SERVER = shutil.which("nats-server")
WINDOW = 200
FLOOD_SECONDS = 0.6
DEADLINE = 20.0  # hard limit for each phase


def payload(i: int) -> tuple[bytes, bytes]:
    """(headers or b"", body) of message i."""
    rng = random.Random(i)
    size = rng.choice([0, 1, 10, 100, 1000, rng.randrange(4000)])
    digest = hashlib.sha256(b"%d" % i).digest()
    body = b"%08d:" % i + (digest * (size // 32 + 1))[:size]
    hdr = b"NATS/1.0\r\nIdx: %d\r\n\r\n" % i if i % 7 == 0 else b""
    return hdr, body


class Proc:
    def __init__(self, kind: str, store, conf=None, launcher: tuple = ("-m", "natserver")) -> None:
        self.ports_dir = store.parent / f"ports-{kind}"
        self.ports_dir.mkdir(exist_ok=True)
        for old in self.ports_dir.iterdir():
            old.unlink()
        common = ["-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", str(self.ports_dir)]
        if kind == "natserver":
            argv = [sys.executable, *launcher, *common]
        else:
            argv = [NATS_SERVER, *common]
        argv += ["-c", str(conf)] if conf else ["-js", "-sd", str(store)]
        self.log = open(store.parent / f"{kind}.log", "ab")  # a file: nobody reads a pipe
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            # Only the finished file: natserver writes "<name>.ports.<pid>.tmp", then renames it.
            files = list(self.ports_dir.glob("*.ports"))
            try:
                if files and files[0].stat().st_size:
                    self.port = int(json.loads(files[0].read_text())["nats"][0].rsplit(":", 1)[1])
                    return
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError("server exited: " + (store.parent / f"{kind}.log").read_text(errors="replace"))
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Raw:
    """A blocking raw NATS connection with a parser for MSG/HMSG."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        self.buf = bytearray()
        self.eof = False
        self.read_line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB _A.* 1\r\nPING\r\n')
        while self.read_line() != b"PONG":
            pass

    def fill(self, block: bool = True) -> bool:
        if not block and not select.select([self.sock], [], [], 0)[0]:
            return False
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            if not self.fill():
                raise EOFError

    def messages(self):
        """Complete MSG/HMSG in the buffer: (subject, headers, body); stops at a partial one."""
        while True:
            i = self.buf.find(b"\r\n")
            if i < 0:
                return
            parts = bytes(self.buf[:i]).split()
            if not parts or parts[0] not in (b"MSG", b"HMSG"):
                del self.buf[: i + 2]
                if parts and parts[0] == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                continue
            hsize = int(parts[-2]) if parts[0] == b"HMSG" else 0
            total = int(parts[-1])
            if len(self.buf) < i + 2 + total + 2:
                return
            body = bytes(self.buf[i + 2 : i + 2 + total])
            del self.buf[: i + 2 + total + 2]
            yield parts[1], body[:hsize], body[hsize:]

    def request(self, subject: bytes, body: bytes) -> bytes:
        self.sock.sendall(b"PUB %s _A.req %d\r\n%s\r\n" % (subject, len(body), body))
        while True:
            for _, _, data in self.messages():
                return data
            if not self.fill():
                raise EOFError

    def close(self) -> None:
        self.sock.close()


def flood_and_kill(server: Proc, first: int = 0, stream: dict | None = None) -> dict[int, int]:
    """Publish messages first, first + 1, ... until the kill; returns {acknowledged seq:
    message index}. ``stream``: more of the stream's configuration."""
    conn = Raw(server.port)
    created = json.loads(conn.request(b"$JS.API.STREAM.CREATE.CRASH",
                                      json.dumps({"name": "CRASH", "subjects": ["crash.>"], **(stream or {})}).encode()))
    assert "error" not in created, created
    acked: dict[int, int] = {}
    answered = 0
    sent = first
    killed = False
    kill_at = time.monotonic() + FLOOD_SECONDS
    deadline = time.monotonic() + DEADLINE
    while not conn.eof and time.monotonic() < deadline:
        if not killed:
            batch = []
            while sent - first - answered < WINDOW:
                hdr, body = payload(sent)
                if hdr:
                    batch.append(b"HPUB crash.%d _A.%d %d %d\r\n%s%s\r\n" % (sent % 5, sent, len(hdr), len(hdr) + len(body), hdr, body))
                else:
                    batch.append(b"PUB crash.%d _A.%d %d\r\n%s\r\n" % (sent % 5, sent, len(body), body))
                sent += 1
            if batch:
                try:
                    conn.sock.sendall(b"".join(batch))
                except OSError:
                    break
            # Mid-flood, and only once an ack is in (acks come in order, so the first message
            # is acknowledged): on a loaded machine the first fsync can outlast FLOOD_SECONDS.
            if time.monotonic() >= kill_at and answered:
                server.kill()
                killed = True
        # After the kill, acks already on the wire still count: the server sent them.
        conn.fill(block=killed)
        for subject, _, data in conn.messages():
            index = int(subject.split(b".")[1])
            ack = json.loads(data)
            assert "error" not in ack, ack
            acked[ack["seq"]] = index
            answered += 1
    conn.close()
    assert killed
    return acked


def check_restarted(server: Proc, acked: dict[int, int]) -> int:
    conn = Raw(server.port)
    info = json.loads(conn.request(b"$JS.API.STREAM.INFO.CRASH", b""))
    state = info["state"]
    last = state["last_seq"]
    assert acked, "nothing was acknowledged before the kill"
    assert last >= max(acked), (state, max(acked))
    assert state["first_seq"] == 1 and state["messages"] == last, state  # no gap
    # Every message, pipelined: message s must be the publisher's message s - 1.
    for start in range(1, last + 1, 500):
        seqs = range(start, min(start + 500, last + 1))
        conn.sock.sendall(b"".join(b'PUB $JS.API.STREAM.MSG.GET.CRASH _A.%d %d\r\n{"seq":%d}\r\n'
                                   % (s, len(b'{"seq":%d}' % s), s) for s in seqs))
        got: dict[int, dict] = {}
        while len(got) < len(seqs):
            for subject, _, data in conn.messages():
                got[int(subject.split(b".")[1])] = json.loads(data)
            if len(got) < len(seqs) and not conn.fill():
                raise EOFError
        for s in seqs:
            message = got[s]["message"]
            hdr, body = payload(s - 1)
            assert message["seq"] == s
            assert base64.b64decode(message.get("data", "")) == body, s
            assert base64.b64decode(message.get("hdrs", "")) == hdr, s
            assert message["subject"] == "crash.%d" % ((s - 1) % 5)
    for seq, index in acked.items():
        assert index == seq - 1
    conn.close()
    return last


@pytest.mark.parametrize("kind,sync,cycles", [
    ("natserver", None, 2),
    ("natserver", "always", 2),
    pytest.param("nats-server", None, 1, marks=pytest.mark.needs_nats_server),
])
def test_kill_9_during_publish_flood(tmp_path, kind, sync, cycles):
    if kind == "nats-server" and NATS_SERVER is None:
        pytest.skip("nats-server not installed")
    store = tmp_path / "store"
    conf = None
    if sync:
        conf = tmp_path / "js.conf"
        conf.write_text(f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: {sync}\n}}\n')
    last = 0
    for _ in range(cycles):  # the second flood goes on from the recovered stream
        server = Proc(kind, store, conf)
        try:
            acked = flood_and_kill(server, first=last)
        finally:
            server.stop()
        assert acked and min(acked) == last + 1
        server = Proc(kind, store, conf)
        try:
            last = check_restarted(server, acked)
        finally:
            server.stop()
