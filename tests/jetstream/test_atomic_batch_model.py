"""Atomic batches (natserver/jetstream/batch.py) against a model of nats-server 2.15.1's rules
(stream.go processJetStreamAtomicBatchMsg, as recorded in test_atomic_batch.py): any
interleaving of the messages of several batches (in order, with a gap, a repeated sequence),
commits (``1``, ``eob``, an unknown value), message ids (stored or repeated in the batch),
plain publishes, time passing (the server's clock moved past or short of the 10 s batch
timeout) and restarts of a file stream gives the answer the model expects for every publish,
and leaves the stream holding exactly the committed batches' messages, in order.

The model: a batch exists from its sequence 1 until it is committed, abandoned (a gap, a
repeated sequence, eob at 1, an unknown commit, a duplicate message id at the commit), idle
for 10 s, or the server restarts; a staged message is answered with an empty message, a
commit with the PubAck ``{"stream","seq","batch","count"}`` (eob: its message not counted),
a message of an unknown batch after 1 with 10176. Message ids are kept for the duplicate
window (100.5 s here, so that no sum of the steps' 3 s and 11 s lands on its edge).

A few runs (without time passing or restarts) check the model against a live nats-server
2.15.1 too, when it is installed.
"""

from __future__ import annotations

import base64
import json
import socket
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from natserver.testing import NatsServer
from tests import reference
from tests.auth.test_auth_helpers import running

JS_CONFIG = 'jetstream { store_dir: "%s" }\n'

TIMEOUT = 20  # one request's answers (a hard limit on the I/O)
BATCH_TIMEOUT = 10.0  # nats-server's streamDefaultMaxBatchTimeout
WINDOW = 100.5  # the stream's duplicate window, seconds
IDS = ("a", "b")
SUBJECTS = ("s.x", "s.y")
MSG_IDS = (None, None, "m1", "m2")
INCOMPLETE = {"code": 400, "err_code": 10176, "description": "atomic publish batch is incomplete"}
INVALID_COMMIT = {"code": 400, "err_code": 10200, "description": "atomic publish batch commit is invalid"}
TOO_LARGE = {"code": 400, "err_code": 10199, "description": "atomic publish batch is too large: 1000"}
DUPLICATE = {"code": 400, "err_code": 10201, "description": "atomic publish batch contains duplicate message id"}


class _Conn:
    """One connection; each publish has its own reply subject and exactly one answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self.n = 0
        self._line()
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.> 1\r\nPING\r\n')
        while self._line() != b"PONG":
            pass

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "connection closed"
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def request(self, subject: str, headers: bytes, payload: bytes) -> bytes:
        self.n += 1
        reply = b"_R.%d" % self.n
        if headers:
            block = b"NATS/1.0\r\n" + headers + b"\r\n"
            self.sock.sendall(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject.encode(), reply, len(block), len(block) + len(payload), block, payload))
        else:
            self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply, len(payload), payload))
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert time.monotonic() < deadline
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if not line.startswith(b"MSG "):
                continue
            parts = line.split()
            size = int(parts[-1])
            while len(self.buf) < size + 2:
                self._fill()
            data, self.buf = self.buf[:size], self.buf[size + 2:]
            if parts[1] == reply:
                return data

    def api(self, subject: str, body: dict | None = None) -> dict:
        return json.loads(self.request(subject, b"", json.dumps(body).encode() if body is not None else b""))

    def close(self) -> None:
        self.sock.close()


class AtomicBatchMachine(RuleBasedStateMachine):
    CLOCK = True  # the server's clock can be moved, the server restarted (natserver in-process)

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.conn = _Conn(self.start())
        self.now = 0.0  # seconds the server's clock was moved
        self.batches: dict[str, tuple[list, float]] = {}  # id -> (staged (subject, data, msg id), last activity)
        self.stored: list[tuple[str, str]] = []  # (subject, data) of every stored message
        self.msg_ids: dict[str, float] = {}  # id -> when stored
        self.n = 0

    def start(self) -> int:
        """Start the server; its port."""
        self.server = NatsServer(jetstream=True, store_dir=self.folder.name + "/js", clock="manual").start()
        return self.server.port

    def stop(self) -> None:
        self.server.stop()

    @initialize()
    def stream(self) -> None:
        answer = self.conn.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_atomic": True,
                                                          "duplicate_window": int(WINDOW * 1e9)})
        assert "error" not in answer, answer

    def teardown(self) -> None:
        try:
            self.check_contents()
        finally:
            self.conn.close()
            self.stop()
            self.folder.cleanup()

    # -- the model ---------------------------------------------------------------------------------

    def _batch(self, batch_id: str):
        """The batch, unless its timer went off."""
        entry = self.batches.get(batch_id)
        if entry is not None and self.now - entry[1] >= BATCH_TIMEOUT:
            del self.batches[batch_id]
            return None
        return entry

    def _known_id(self, msg_id: str) -> bool:
        when = self.msg_ids.get(msg_id)
        return when is not None and self.now - when < WINDOW

    def _expect(self, batch_id: str, seq: int, commit: str | None, subject: str, data: str, msg_id: str | None):
        entry = self._batch(batch_id)
        eob = commit == "eob"
        if entry is None:
            if seq == 0 and eob:  # (a uint64 in nats-server: the size 0 - 1 is past the limit)
                return {"error": TOO_LARGE}
            if seq != 1:
                return {"error": INCOMPLETE}
            entry = self.batches[batch_id] = ([], self.now)
        staged = entry[0]
        if commit is not None and commit not in ("1", "eob"):
            del self.batches[batch_id]
            return {"error": INVALID_COMMIT}
        if len(staged) + 1 != seq or (seq == 1 and eob):
            del self.batches[batch_id]
            return {"error": INCOMPLETE}
        staged.append((subject, data, msg_id))
        self.batches[batch_id] = (staged, self.now)
        if commit is None:
            return ""
        del self.batches[batch_id]
        msgs = staged[:-1] if eob else staged
        seen: set[str] = set()
        for _, _, mid in msgs:
            if mid is not None:
                if mid in seen or self._known_id(mid):
                    return {"error": DUPLICATE}
                seen.add(mid)
        for subj, body, mid in msgs:
            self.stored.append((subj, body))
            if mid is not None:
                self.msg_ids[mid] = self.now
        return {"stream": "S", "seq": len(self.stored), "batch": batch_id, "count": len(msgs)}

    # -- rules -------------------------------------------------------------------------------------

    def _send(self, batch_id: str, seq: int, commit: str | None, subject: str, msg_id: str | None):
        self.n += 1
        data = "d%d" % self.n
        headers = b"Nats-Batch-Id: %s\r\nNats-Batch-Sequence: %d\r\n" % (batch_id.encode(), seq)
        if commit is not None:
            headers += b"Nats-Batch-Commit: %s\r\n" % commit.encode()
        if msg_id is not None:
            headers += b"Nats-Msg-Id: %s\r\n" % msg_id.encode()
        expected = self._expect(batch_id, seq, commit, subject, data, msg_id)
        raw = self.conn.request(subject, headers, data.encode())
        got = json.loads(raw) if raw else ""
        if isinstance(got, dict) and "error" in got:
            got = {"error": got["error"]}
        assert got == expected, (batch_id, seq, commit, msg_id)

    def _next_seq(self, batch_id: str) -> int:
        entry = self.batches.get(batch_id)
        return len(entry[0]) + 1 if entry is not None else 1

    @rule(batch_id=st.sampled_from(IDS), subject=st.sampled_from(SUBJECTS), msg_id=st.sampled_from(MSG_IDS),
          skip=st.sampled_from([0, 0, 0, 0, 0, 0, -1, 1, 2]),
          commit=st.sampled_from([None, None, None, None, "1", "1", "eob", "yes"]))
    def message(self, batch_id, subject, msg_id, skip, commit):
        """The batch's next message, mostly; now and then a repeated sequence (-1: the last
        one again), a gap, or an unknown commit value."""
        self._send(batch_id, max(self._next_seq(batch_id) + skip, 0), commit, subject, msg_id)

    @rule(msg_id=st.sampled_from(MSG_IDS))
    def plain_publish(self, msg_id):
        self.n += 1
        data = "p%d" % self.n
        headers = b"Nats-Msg-Id: %s\r\n" % msg_id.encode() if msg_id else b""
        got = json.loads(self.conn.request("s.p", headers, data.encode()))
        if msg_id is not None and self._known_id(msg_id):
            assert got.get("duplicate") is True
            return
        self.stored.append(("s.p", data))
        if msg_id is not None:
            self.msg_ids[msg_id] = self.now
        assert got == {"stream": "S", "seq": len(self.stored)}

    @precondition(lambda self: self.CLOCK)
    @rule(seconds=st.sampled_from([3.0, 11.0]))
    def time_passes(self, seconds):
        self.server.advance(seconds)
        self.now += seconds

    @precondition(lambda self: self.CLOCK and self.batches)
    @rule()
    def restart(self):
        self.conn.close()
        self.server.restart()
        self.conn = _Conn(self.server.port)
        self.batches.clear()  # nothing of an uncommitted batch survives

    @invariant()
    def the_stream_holds_the_committed_messages(self):
        info = self.conn.api("$JS.API.STREAM.INFO.S")
        state = info["state"]
        assert (state["messages"], state["last_seq"]) == (len(self.stored), len(self.stored))

    def check_contents(self) -> None:
        """Every stored message, in order (at the end of a run)."""
        for seq, (subject, data) in enumerate(self.stored, 1):
            got = self.conn.api("$JS.API.STREAM.MSG.GET.S", {"seq": seq})["message"]
            assert (got["subject"], base64.b64decode(got["data"]).decode()) == (subject, data)


AtomicBatchMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestAtomicBatches = AtomicBatchMachine.TestCase


class LiveReferenceMachine(AtomicBatchMachine):
    """The same model checked against a live nats-server 2.15.1 (a few runs, without time
    passing or restarts: its clock is the real one)."""

    CLOCK = False

    def start(self) -> int:
        self._running = running("nats-server", JS_CONFIG % (self.folder.name + "/store"), Path(self.folder.name),
                                binary=reference.NATS_SERVER)
        return self._running.__enter__()

    def stop(self) -> None:
        self._running.__exit__(None, None, None)


LiveReferenceMachine.TestCase.settings = settings(
    max_examples=5, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestAtomicBatchesOnNatsServer = reference.needs_nats_server(LiveReferenceMachine.TestCase)
