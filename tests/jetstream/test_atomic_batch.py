"""Atomic batch publishing (nats-server 2.12+, issue #28 item 2): ``allow_atomic`` and the
``Nats-Batch-Id`` / ``Nats-Batch-Sequence`` / ``Nats-Batch-Commit`` headers, as nats-server
2.15.1 answers and stores them (natserver/jetstream/batch.py).

One script runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/atomic_batch_nats_server_2.15.1.json (``python -m tests.jetstream.test_atomic_batch``
records it again; a live 2.15.1, when installed, must still give it): every header and commit
form, every error (disabled, the batch id, the sequence, gaps, a repeated sequence, an unknown
commit, too large, too many in flight, a timed-out batch, the unsupported header, the checks
of the whole batch at its commit: message ids, expected-* headers, roll-ups, TTLs, counters,
discard-new limits), the acks, and what each stream holds in the end. The ``wait`` step
sleeps on nats-server and moves natserver's clock. nats-py's own test of ``allow_atomic``
and the timeout's advisory run against both servers; restarts, the state machine and the
bound on in-flight batches across streams against natserver.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path

import nats

from natserver.jetstream import batch as batch_module
from natserver.testing import NatsServer
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import assert_recorded
from tests.jetstream.test_message_ttl import _Client
from tests.jetstream.test_nats_py_suite import target  # noqa: F401  (the fixture: natserver and 2.15.1)

RECORDED = Path(__file__).with_name("data") / "atomic_batch_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 60  # hard limit on one test's I/O (the live recording sleeps 11 s of it)
WAIT = 11  # past the batch timeout (10 s)
INCOMPLETE = {"code": 400, "err_code": 10176, "description": "atomic publish batch is incomplete"}


def _h(batch_id: str, seq, commit: str | None = None, extra: bytes = b"") -> bytes:
    out = b"Nats-Batch-Id: %s\r\nNats-Batch-Sequence: %s\r\n" % (batch_id.encode(), str(seq).encode())
    if commit is not None:
        out += b"Nats-Batch-Commit: %s\r\n" % commit.encode()
    return out + extra


def _pub(subject: str, headers: bytes = b"", payload: bytes = b"x") -> tuple:
    return ("pub", subject, headers, payload)


def _api(subject: str, body: dict | None = None) -> tuple:
    return ("pub", subject, b"", json.dumps(body).encode() if body is not None else b"")


def _stream(name: str, **config) -> tuple:
    return _api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"], **config})


def _batch(batch_id: str, subjects: list[str], extras: dict | None = None, commit: str = "1") -> tuple:
    """A whole batch in one step: the last message commits."""
    extras = extras or {}
    msgs = [_pub(s, _h(batch_id, i, commit if i == len(subjects) else None, extras.get(i, b"")), b"m%d" % i)
            for i, s in enumerate(subjects, 1)]
    return ("many", msgs)


def _msg_id(value: str) -> bytes:
    return b"Nats-Msg-Id: %s\r\n" % value.encode()


SCRIPT: list[tuple[str, tuple]] = [
    ("stream S", _stream("S", allow_atomic=True)),
    ("stream N without allow_atomic", _stream("N")),
    ("a mirror with allow_atomic", _api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "S"},
                                                                     "allow_atomic": True})),
    ("a batch on N", _pub("n.a", _h("b0", 1, "1"))),
    ("an id of 65 bytes", _pub("s.a", _h("x" * 65, 1, "1"))),
    ("an id of 64 bytes", _pub("s.a", _h("y" * 64, 1, "1"))),
    ("no sequence", _pub("s.a", b"Nats-Batch-Id: nos\r\n")),
    ("a sequence that is not a number", _pub("s.a", _h("nan", "one"))),
    ("an unknown batch at 2", _pub("s.a", _h("u", 2))),
    ("an unknown batch at 1001", _pub("s.a", _h("u", 1001))),
    ("an unknown batch at 1001 with eob", _pub("s.a", _h("u", 1001, "eob"))),
    ("batch A", _batch("A", ["s.a", "s.b", "s.a"])),
    ("batch E ended by eob", _batch("E", ["s.e", "s.e", "s.e"], commit="eob")),
    ("eob alone", _pub("s.a", _h("E1", 1, "eob"))),
    ("an unknown commit value", _pub("s.a", _h("C", 1, "yes"))),
    ("the unknown commit's batch is gone", _pub("s.a", _h("C", 2, "1"))),
    ("an unknown commit value later", ("many", [_pub("s.a", _h("C2", 1)), _pub("s.a", _h("C2", 2, "true"))])),
    ("a gap", ("many", [_pub("s.g", _h("G", 1)), _pub("s.g", _h("G", 3))])),
    ("after the gap", _pub("s.g", _h("G", 2, "1"))),
    ("a repeated sequence", ("many", [_pub("s.r", _h("R", 1)), _pub("s.r", _h("R", 1))])),
    ("a sequence 0", _pub("s.r", _h("Z", 0, "1"))),
    ("a sequence past 2^64", _pub("s.r", _h("Z", 2**64, "1"))),
    ("eob at 0", _pub("s.r", _h("Z", 0, "eob"))),
    ("an empty commit value", ("many", [_pub("s.a", _h("C3", 1)), _pub("s.a", _h("C3", 2, ""))])),
    ("interleaved batches", ("many", [_pub("s.x", _h("X", 1)), _pub("s.y", _h("Y", 1)), _pub("s.x", _h("X", 2)),
                                      _pub("s.y", _h("Y", 2)), _pub("s.y", _h("Y", 3, "1")),
                                      _pub("s.x", _h("X", 3, "1"))])),
    ("a plain publish between", _pub("s.p", b"", b"plain")),
    ("a batch without replies", ("quiet", [_pub("s.q", _h("Q", 1)), _pub("s.q", _h("Q", 2))])),
    ("its commit", _pub("s.q", _h("Q", 3, "1"))),
    ("a single-message batch", _pub("s.o", _h("O", 1, "1"))),
    ("a message id stored", _pub("s.m", _msg_id("m1"))),
    ("the id again in a batch", _batch("D", ["s.m", "s.m"], {1: _msg_id("m1")})),
    ("an id twice in a batch", _batch("D2", ["s.m", "s.m"], {1: _msg_id("m2"), 2: _msg_id("m2")})),
    ("an id in a committed batch", _batch("D3", ["s.m", "s.m"], {2: _msg_id("m3")})),
    ("that id published again", _pub("s.m", _msg_id("m3"))),
    ("Nats-Expected-Last-Msg-Id", _batch("L", ["s.l", "s.l"], {2: b"Nats-Expected-Last-Msg-Id: m3\r\n"})),
    ("Nats-Expected-Stream wrong", _batch("ES", ["s.s"], {1: b"Nats-Expected-Stream: N\r\n"})),
    ("Nats-Expected-Stream right", _batch("ES2", ["s.s"], {1: b"Nats-Expected-Stream: S\r\n"})),
    ("a roll-up without allow_rollup_hdrs", _batch("RU", ["s.u"], {1: b"Nats-Rollup: sub\r\n"})),
    ("a TTL without allow_msg_ttl", _batch("T", ["s.t"], {1: b"Nats-TTL: 5s\r\n"})),
    ("a too-high required API level", _batch("AL", ["s.v"], {1: b"Nats-Required-Api-Level: 99\r\n"})),
    # Expected sequences, on a stream of their own (its sequences known).
    ("stream X", _stream("X", allow_atomic=True)),
    ("expected last sequence on the first", _batch("X1", ["x.a", "x.b"], {1: b"Nats-Expected-Last-Sequence: 0\r\n"})),
    ("expected last sequence on the second", _batch("X2", ["x.a", "x.b"], {2: b"Nats-Expected-Last-Sequence: 3\r\n"})),
    ("a wrong expected last sequence on the second",
     _batch("X3", ["x.a", "x.b"], {2: b"Nats-Expected-Last-Sequence: 2\r\n"})),
    ("a wrong expected last sequence on the first", _batch("X4", ["x.a"], {1: b"Nats-Expected-Last-Sequence: 5\r\n"})),
    ("expected last subject sequence", _batch("X5", ["x.a", "x.c"], {1: b"Nats-Expected-Last-Subject-Sequence: 1\r\n"})),
    ("a wrong expected last subject sequence",
     _batch("X6", ["x.a", "x.c"], {2: b"Nats-Expected-Last-Subject-Sequence: 1\r\n"})),
    ("expected last subject sequence after the subject in the batch",
     _batch("X7", ["x.d", "x.d"], {2: b"Nats-Expected-Last-Subject-Sequence: 0\r\n"})),
    ("the same expectation twice", _batch("X8", ["x.e", "x.f"], {1: b"Nats-Expected-Last-Subject-Sequence: 0\r\n",
                                                                 2: b"Nats-Expected-Last-Subject-Sequence: 0\r\n"
                                                                    b"Nats-Expected-Last-Subject-Sequence-Subject: x.e\r\n"})),
    ("the -Subject form", _batch("X9", ["x.g"], {1: b"Nats-Expected-Last-Subject-Sequence: 3\r\n"
                                                    b"Nats-Expected-Last-Subject-Sequence-Subject: x.a\r\n"})),
    ("-Subject without the sequence", _batch("X10", ["x.g"], {1: b"Nats-Expected-Last-Subject-Sequence-Subject: x.a\r\n"})),
    # Roll-ups.
    ("stream R", _stream("R", allow_atomic=True, allow_rollup_hdrs=True)),
    ("some messages in R", _batch("R0", ["r.a", "r.b", "r.a"])),
    ("roll-up sub after the subject in the batch", _batch("R1", ["r.a", "r.a"], {2: b"Nats-Rollup: sub\r\n"})),
    ("roll-up all after the first", _batch("R2", ["r.a", "r.b"], {2: b"Nats-Rollup: all\r\n"})),
    ("roll-up sub first", _batch("R3", ["r.a", "r.b"], {1: b"Nats-Rollup: sub\r\n"})),
    ("roll-up all first", _batch("R4", ["r.c", "r.b"], {1: b"Nats-Rollup: ALL\r\n"})),
    ("roll-up value invalid", _batch("R5", ["r.a"], {1: b"Nats-Rollup: some\r\n"})),
    # TTLs.
    ("stream T", _stream("T", allow_atomic=True, allow_msg_ttl=True)),
    ("an invalid TTL", _batch("T1", ["t.a", "t.b"], {2: b"Nats-TTL: soon\r\n"})),
    ("a TTL", _batch("T2", ["t.a", "t.b"], {2: b"Nats-TTL: 1h\r\n"})),
    # Counters.
    ("stream C", _stream("C", allow_atomic=True, allow_msg_counter=True)),
    ("increments", ("many", [_pub("c.a", _h("C1", 1, None, b"Nats-Incr: 1\r\n"), b""),
                             _pub("c.a", _h("C1", 2, None, b"Nats-Incr: 2\r\n"), b""),
                             _pub("c.b", _h("C1", 3, "1", b"Nats-Incr: 5\r\n"), b"")])),
    ("an increment missing", ("many", [_pub("c.a", _h("C2", 1, None, b"Nats-Incr: 1\r\n"), b""),
                                       _pub("c.a", _h("C2", 2, "1"), b"")])),
    ("an increment with a payload", _pub("c.a", _h("C3", 1, "1", b"Nats-Incr: 1\r\n"), b"p")),
    # Discard new.
    ("stream DN", _stream("DN", allow_atomic=True, discard="new", max_msgs=3)),
    ("within max_msgs", _batch("DN1", ["dn.a", "dn.b"])),
    ("over max_msgs", _batch("DN2", ["dn.a", "dn.b"])),
    ("stream DB", _stream("DB", allow_atomic=True, discard="new", max_bytes=200)),
    ("over max_bytes", _batch("DB1", ["db.a", "db.b", "db.c", "db.d"])),
    ("stream DP", _stream("DP", allow_atomic=True, discard="new", max_msgs_per_subject=1,
                          discard_new_per_subject=True)),
    ("over the subject limit", _batch("DP1", ["dp.a", "dp.a"])),
    ("one a subject", _batch("DP2", ["dp.a", "dp.b"])),
    ("stream SZ", _stream("SZ", allow_atomic=True, max_msg_size=100)),
    ("a message over max_msg_size", _pub("sz.a", _h("SZ1", 1), b"z" * 200)),
    # An update without allow_atomic drops the batches in flight.
    ("stream U", _stream("U", allow_atomic=True)),
    ("a batch staged on U", _pub("u.a", _h("K", 1))),
    ("U without allow_atomic", _api("$JS.API.STREAM.UPDATE.U", {"name": "U", "subjects": ["u.>"]})),
    ("the commit on U", _pub("u.a", _h("K", 2, "1"))),
    ("U with allow_atomic again", _api("$JS.API.STREAM.UPDATE.U", {"name": "U", "subjects": ["u.>"],
                                                                   "allow_atomic": True})),
    ("the commit on U again", _pub("u.a", _h("K", 2, "1"))),
    # Limits: 50 batches in flight a stream, 1000 messages a batch.
    ("stream F", _stream("F", allow_atomic=True)),
    ("51 batches in flight", ("many", [_pub("f.a", _h(f"F{i}", 1)) for i in range(51)])),
    ("one of them goes on", _pub("f.a", _h("F7", 2, "1"))),
    ("stream L", _stream("L", allow_atomic=True)),
    ("1001 messages in a batch", ("many", [_pub("l.a", _h("BIG", i), b"") for i in range(1, 1002)])),
    ("the large batch is gone", _pub("l.a", _h("BIG", 1002, "1"), b"")),
    ("1000 messages and eob", ("many", [_pub("l.b", _h("EOB", i, "eob" if i == 1001 else None), b"")
                                        for i in range(1, 1002)])),
    # An abandoned batch times out (10 s without a message).
    ("a batch staged before the wait", ("many", [_pub("s.w", _h("W", 1)), _pub("s.w", _h("W2", 1))])),
    ("wait past the batch timeout", ("wait", WAIT)),
    ("the timed-out batch's commit", _pub("s.w", _h("W", 2, "1"))),
    ("its id starts a new batch", _pub("s.w", _h("W2", 1, "1"))),
    ("list S", ("list", "S")),
    ("list X", ("list", "X")),
    ("list R", ("list", "R")),
    ("list T", ("list", "T")),
    ("list C", ("list", "C")),
    ("list DN", ("list", "DN")),
    ("list DB", ("list", "DB")),
    ("list DP", ("list", "DP")),
    ("list U", ("list", "U")),
    ("list F", ("list", "F")),
    ("L's state", ("state", "L")),
]


def _normal(answer: bytes):
    """An empty answer (a staged message) as ""; an API error as it is; a stream created or
    updated by its name and allow_atomic; a stored message by its subject, sequence, headers
    and data; a publish ack as it is."""
    if not answer:
        return ""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer.decode()
    if "error" in document:
        return {"error": document["error"]}
    if "config" in document:
        return {"stream": document["config"]["name"], "allow_atomic": document["config"].get("allow_atomic")}
    if "message" in document:
        m = document["message"]
        return {"subject": m["subject"], "seq": m["seq"],
                "hdrs": base64.b64decode(m.get("hdrs") or "").decode(),
                "data": base64.b64decode(m.get("data") or "").decode()}
    return document


def _squeeze(answers: list) -> list:
    """Runs of the same answer as [answer, count] (the limits' steps have a thousand)."""
    out: list = []
    for a in answers:
        if out and out[-1][0] == a:
            out[-1][1] += 1
        else:
            out.append([a, 1])
    return out


class _ScriptClient(_Client):
    def quiet(self, requests: list[tuple]) -> None:
        """Publishes without a reply subject."""
        out = bytearray()
        for _, subject, headers, payload in requests:
            block = b"NATS/1.0\r\n" + headers + b"\r\n"
            out += b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(block), len(block) + len(payload),
                                                  block, payload)
        self.sock.sendall(bytes(out) + b"PING\r\n")
        while self._line() != b"PONG":
            pass


def run_script(port: int, wait) -> dict:
    """The script against the server on ``port``; ``wait(seconds)`` lets that much of the
    server's time pass."""
    client = _ScriptClient(port)
    out: dict = {}
    for name, step in SCRIPT:
        kind = step[0]
        if kind == "pub":
            out[name] = [_normal(a) for a in client.batch([step])]
        elif kind == "many":
            out[name] = _squeeze([_normal(a) for a in client.batch(step[1])])
        elif kind == "quiet":
            client.quiet(step[1])
            out[name] = []
        elif kind == "wait":
            wait(step[1])
            out[name] = []
        elif kind == "state":
            (info,) = client.batch([_api(f"$JS.API.STREAM.INFO.{step[1]}")])
            state = json.loads(info)["state"]
            out[name] = {k: state.get(k, 0) for k in ("messages", "first_seq", "last_seq", "num_subjects")}
        else:  # list
            out[name] = client.stream(step[1])
    return out


def _natserver_run(tmp_path: Path) -> dict:
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        return run_script(server.port, server.advance)


def test_natserver_answers_as_nats_server(tmp_path):
    started = time.monotonic()
    assert_recorded(_natserver_run(tmp_path), RECORDED)
    assert time.monotonic() - started < WAIT  # the wait was a jump of the server's clock


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER) as port:
        assert_recorded(run_script(port, time.sleep), RECORDED)


# -- nats-py, advisories, restarts and the server-wide bound ----------------------------------


def test_nats_py_stream_allow_atomic(target):  # noqa: F811
    """nats-py's V210FeaturesTest::test_stream_allow_atomic (nats/tests/test_js.py), as it is."""

    async def main():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="ATOMIC", subjects=["test"], allow_atomic=True)
        sinfo = await js.stream_info("ATOMIC")
        assert sinfo.config.allow_atomic is True
        await js.add_stream(name="NOATOMIC", subjects=["foo"], allow_atomic=False)
        sinfo = await js.stream_info("NOATOMIC")
        assert sinfo.config.allow_atomic is not True
        await js.add_stream(name="DEFAULT2", subjects=["baz"])
        sinfo = await js.stream_info("DEFAULT2")
        assert sinfo.config.allow_atomic is not True
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_batch_through_nats_py(target):  # noqa: F811
    """nats-py has no batch API: a client sends the headers itself (nc.request), reads the
    PubAck's batch and count, and sees the stored messages with their batch headers; an
    abandoned batch is announced with 2.15.1's advisory."""

    async def main():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"], allow_atomic=True)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>")
        for i in (1, 2):
            answer = await nc.request("orders.new", b"o%d" % i, timeout=5, headers={
                "Nats-Batch-Id": "b1", "Nats-Batch-Sequence": str(i)})
            assert answer.data == b""
        answer = await nc.request("orders.paid", b"o3", timeout=5, headers={
            "Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"})
        assert json.loads(answer.data) == {"stream": "ORDERS", "seq": 3, "batch": "b1", "count": 3}
        stored = await js.get_msg("ORDERS", 3)
        assert (stored.subject, stored.data) == ("orders.paid", b"o3")
        assert stored.headers == {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"}
        await nc.request("orders.new", b"x", timeout=5, headers={"Nats-Batch-Id": "gap", "Nats-Batch-Sequence": "1"})
        answer = await nc.request("orders.new", b"x", timeout=5, headers={
            "Nats-Batch-Id": "gap", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"})
        assert json.loads(answer.data)["error"]["err_code"] == 10176
        advisory = json.loads((await advisories.next_msg(timeout=5)).data)
        assert advisory.pop("id") and advisory.pop("timestamp")
        assert advisory == {"type": "io.nats.jetstream.advisory.v1.stream_batch_abandoned", "stream": "ORDERS",
                            "batch": "gap", "reason": "incomplete"}
        assert (await js.stream_info("ORDERS")).state.messages == 3
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_batch_times_out_on_the_server_clock(tmp_path):
    """An idle batch goes after 10 s of the server's clock (the expirer wakes for it, and
    announces it), not a moment earlier; each message gives it 10 s more."""

    async def main(server: NatsServer):
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"], allow_atomic=True)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.S")

        async def send(seq: int, commit: bool = False) -> bytes:
            headers = {"Nats-Batch-Id": "t", "Nats-Batch-Sequence": str(seq)}
            if commit:
                headers["Nats-Batch-Commit"] = "1"
            return (await nc.request("s.a", b"x", timeout=5, headers=headers)).data

        assert await send(1) == b""
        await server.advance_async(9.5)
        assert await send(2) == b""  # 9.5 s: still there, and now 10 s more
        await server.advance_async(9.5)
        assert await send(3) == b""
        await server.advance_async(10.5)
        advisory = json.loads((await advisories.next_msg(timeout=5)).data)
        assert (advisory["batch"], advisory["reason"]) == ("t", "timeout")
        assert json.loads(await send(4, commit=True))["error"]["err_code"] == 10176
        assert (await js.stream_info("S")).state.messages == 0
        await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))


def test_nothing_of_an_uncommitted_batch_survives_a_restart(tmp_path):
    """File stream: a batch staged before a restart is gone after it (its commit is an
    incomplete batch), the committed one before it stays whole, and the id starts afresh."""

    def run(server: NatsServer, steps: list[tuple]) -> list:
        client = _Client(server.port)
        answers = [_normal(a) for a in client.batch(steps)]
        client.sock.close()
        return answers

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        assert run(server, [_stream("S", allow_atomic=True)]) == [{"stream": "S", "allow_atomic": True}]
        answers = run(server, [_pub("s.a", _h("done", 1)), _pub("s.a", _h("done", 2, "1")),
                               _pub("s.b", _h("open", 1)), _pub("s.b", _h("open", 2))])
        assert answers == ["", {"stream": "S", "seq": 2, "batch": "done", "count": 2}, "", ""]
        server.restart()
        assert run(server, [_pub("s.b", _h("open", 3, "1"))]) == [{"error": INCOMPLETE}]
        assert run(server, [_pub("s.b", _h("open", 1, "1"))]) == [{"stream": "S", "seq": 3, "batch": "open", "count": 1}]
        client = _Client(server.port)
        assert client.stream("S")["state"]["messages"] == 3


def test_the_server_bounds_the_batches_in_flight(tmp_path):
    """1000 batches in flight in the whole server (50 a stream): the 1001st, on a stream
    with room, is refused (429, 10210) until one ends; deleting a stream ends its batches."""
    per_stream, streams = batch_module.MAX_INFLIGHT_PER_STREAM, batch_module.MAX_INFLIGHT_TOTAL // 50 + 1
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        client = _Client(server.port)
        created = client.batch([_stream(f"B{i}", allow_atomic=True) for i in range(streams)])
        assert all("error" not in json.loads(a) for a in created)
        opened = client.batch([_pub(f"b{i}.a", _h(f"x{j}", 1)) for i in range(streams - 1) for j in range(per_stream)])
        assert set(opened) == {b""} and len(opened) == batch_module.MAX_INFLIGHT_TOTAL
        (refused,) = client.batch([_pub(f"b{streams - 1}.a", _h("one-more", 1))])
        assert json.loads(refused)["error"] == {"code": 429, "err_code": 10210,
                                                "description": "atomic publish too many inflight"}
        (deleted,) = client.batch([_api("$JS.API.STREAM.DELETE.B0")])
        assert json.loads(deleted).get("success") is True
        (taken,) = client.batch([_pub(f"b{streams - 1}.a", _h("one-more", 1))])
        assert taken == b""


def test_mirrors_and_sources_drop_the_batch_headers(tmp_path):
    """A mirror (and a source) stores the origin's committed batch without its
    Nats-Batch-* headers (2.15.1's removeHeaderIfPrefixPresent): nothing to stage there."""

    async def main(server: NatsServer):
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="O", subjects=["o.>"], allow_atomic=True)
        await js.add_stream(name="M", mirror=nats.js.api.StreamSource(name="O"))
        await nc.request("o.a", b"1", timeout=5, headers={"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "1",
                                                          "Nats-Msg-Id": "k"})
        await nc.request("o.a", b"2", timeout=5, headers={"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2",
                                                          "Nats-Batch-Commit": "1"})
        for _ in range(100):
            if (await js.stream_info("M")).state.messages == 2:
                break
            await asyncio.sleep(0.05)
        first, second = await js.get_msg("M", 1), await js.get_msg("M", 2)
        assert (first.data, first.headers, second.data, second.headers) == (b"1", {"Nats-Msg-Id": "k"}, b"2", None)
        await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js")) as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))


if __name__ == "__main__":
    assert reference.NATS_SERVER, "nats-server 2.15.1 is not installed"
    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", JS_CONFIG % folder, Path(folder), binary=reference.NATS_SERVER) as port:
        RECORDED.write_text(json.dumps(run_script(port, time.sleep), indent=1) + "\n")
    print(f"wrote {RECORDED}")
