"""Fast batch publishing (nats-server 2.14's ``allow_batched``, natserver/jetstream/fastbatch.py)
as nats-server 2.15.1 answers it: the reply subject's pattern
(``<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI``) and what is refused in it, the first flow ack
and the ones every ``msgs`` messages, two batches at once (the interval starting at 1 and
doubling), gaps in both modes, a ping, a message sent again, the commit with a message and
the end-of-batch commit, refused messages (a first one, one in the middle in both modes),
duplicates, the Nats-Required-Api-Level header, the configuration rules (a mirror, an update
switching it off). One script runs against natserver and must give what was recorded from
nats-server 2.15.1 in data/fast_batch_nats_server_2.15.1.json (``python -m
tests.jetstream.test_fast_batch`` records it again); a live 2.15.1, when installed, must still
give it. Also: a batch forgotten after 10 s without a message (the server's clock moved), and
the limit of batches in flight per stream."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from natserver.jetstream import fastbatch
from natserver.testing import NatsServer
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "fast_batch_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
# A publish every step ends with: refused by every stream (no message has that sequence), its
# answer comes after all the step's answers (the stream answers in order).
_SYNC_HEADER = b"Nats-Expected-Last-Sequence: 999999999\r\n"


def _reply(batch_id: str, flow, gap: str, seq, op) -> str:
    return f"_FB.{batch_id}.{flow}.{gap}.{seq}.{op}.$FI"


def _batch(subject: str, batch_id: str, count: int, flow=10, gap: str = "fail", end: str = "") -> list:
    """Messages 1..count of a batch (start, appends), and ``end``: "commit" (the last message
    commits) or "eob" (a commit without a message after them)."""
    out = []
    for seq in range(1, count + 1):
        op = fastbatch.OP_START if seq == 1 else fastbatch.OP_APPEND
        if end == "commit" and seq == count:
            op = fastbatch.OP_COMMIT
        out.append((subject, _reply(batch_id, flow, gap, seq, op), b"", b"m%d" % seq))
    if end == "eob":
        out.append((subject, _reply(batch_id, flow, gap, count + 1, fastbatch.OP_COMMIT_EOB), b"", b""))
    return out


def _one(subject: str, batch_id: str, seq, op, flow=10, gap: str = "fail", hdr: bytes = b"", data: bytes = b"x"):
    return [(subject, _reply(batch_id, flow, gap, seq, op), hdr, data)]


def _api(subject: str, body: dict) -> tuple[str, dict]:
    return subject, body


def _stream(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, **config}


def _update(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", {"name": name, **config}


BATCHED = {"subjects": ["s.>"], "allow_batched": True}
_NZ_PING = _one("n.z", "nz", 1, fastbatch.OP_PING, data=b"")[0]  # (stream N's steps end with it)
_ID64 = "i" * 64
_ID65 = "i" * 65
SCRIPT: list = [
    # Configuration.
    ("stream S (allow_batched)", *_stream("S", **BATCHED)),
    ("memory stream M (allow_batched)", *_stream("M", subjects=["m.>"], storage="memory", allow_batched=True)),
    ("plain stream P", *_stream("P", subjects=["p.>"])),
    ("stream X (max_msg_size 8)", *_stream("X", subjects=["x.>"], max_msg_size=8)),
    ("mirror with allow_batched", *_stream("MI", mirror={"name": "S"}, allow_batched=True)),
    ("stream D (allow_batched, dedup)", *_stream("D", subjects=["d.>"], allow_batched=True)),
    # A batch: the first flow ack (seq 0), then one every 2 messages, the commit's PubAck.
    ("b1: five messages, flow 2", _batch("s.a", "b1", 5, flow=2)),
    ("b1: commit with the sixth", _one("s.a", "b1", 6, fastbatch.OP_COMMIT, flow=2)),
    ("b1: after its commit", _one("s.a", "b1", 7, fastbatch.OP_APPEND, flow=2)),
    ("b2: end of batch without a message", _batch("s.b", "b2", 3, end="eob")),
    ("b3: one message that commits", _one("s.a", "b3", 1, fastbatch.OP_COMMIT)),
    ("b4: the flow asked is 0", _batch("s.a", "b4", 2, flow=0, end="eob")),
    ("b5: the flow asked is over 65535", _batch("s.a", "b5", 2, flow=70000, end="eob")),
    ("b6: the flow is not a number", _batch("s.a", "b6", 2, flow="x", end="eob")),
    ("b7: flow 1", _batch("s.a", "b7", 3, flow=1, end="commit")),
    # Gaps.
    ("g1: gap fail", _batch("s.a", "g1", 2) + _one("s.a", "g1", 4, fastbatch.OP_APPEND)),
    ("g1: after it", _one("s.a", "g1", 5, fastbatch.OP_APPEND)),
    ("g2: gap ok", _batch("s.a", "g2", 2, gap="ok") + _one("s.a", "g2", 5, fastbatch.OP_APPEND, gap="ok")),
    ("g2: ping, no gap", _one("s.a", "g2", 5, fastbatch.OP_PING, gap="ok", data=b"")),
    ("g2: ping ahead", _one("s.a", "g2", 8, fastbatch.OP_PING, gap="ok", data=b"")),
    ("g2: commit", _one("s.a", "g2", 9, fastbatch.OP_COMMIT, gap="ok")),
    ("g3: a message again (gap fail)", _batch("s.a", "g3", 3) + _one("s.a", "g3", 2, fastbatch.OP_APPEND)),
    ("g4: a message again (gap ok)", _batch("s.a", "g4", 3, gap="ok") + _one("s.a", "g4", 3, fastbatch.OP_APPEND,
                                                                            gap="ok")),
    ("g5: ping ahead (gap fail)", _batch("s.a", "g5", 2) + _one("s.a", "g5", 6, fastbatch.OP_PING, data=b"")),
    ("g6: ping for a new batch", _one("s.a", "g6", 1, fastbatch.OP_PING, data=b"")),
    ("g7: ping for an unknown batch", _one("s.a", "g7", 3, fastbatch.OP_PING, data=b"")),
    # Two batches at once: the second starts at 1 message an ack, and doubles.
    ("t1 and t2 interleaved", [m for pair in zip(_batch("s.a", "t1", 12, flow=8), _batch("s.b", "t2", 12, flow=8))
                               for m in pair]),
    ("t1 commit", _one("s.a", "t1", 13, fastbatch.OP_COMMIT_EOB, flow=8, data=b"")),
    ("t2 more", [m for m in _batch("s.b", "t2", 20, flow=8)[12:]]),
    ("t2 commit", _one("s.b", "t2", 21, fastbatch.OP_COMMIT_EOB, flow=8, data=b"")),
    # The reply's pattern.
    ("pattern: no batch tokens", [("s.a", "_FB.$FI", b"", b"x")]),
    ("pattern: only the suffix", [("s.a", "$FI", b"", b"x")]),
    ("pattern: op 5", _one("s.a", "p1", 1, 5)),
    ("pattern: op x", _one("s.a", "p1", 1, "x")),
    ("pattern: start at 2", _one("s.a", "p1", 2, fastbatch.OP_START)),
    ("pattern: append at 1", _one("s.a", "p1", 1, fastbatch.OP_APPEND)),
    ("pattern: end of batch at 1", _one("s.a", "p1", 1, fastbatch.OP_COMMIT_EOB)),
    ("pattern: seq 0", _one("s.a", "p1", 0, fastbatch.OP_PING)),
    ("pattern: seq x", _one("s.a", "p1", "x", fastbatch.OP_APPEND)),
    ("pattern: seq 2^64-1", _one("s.a", "p1", 2**64 - 1, fastbatch.OP_APPEND)),
    ("pattern: seq 2^64", _one("s.a", "p1", 2**64, fastbatch.OP_APPEND)),
    ("pattern: gap maybe", _one("s.a", "p1", 1, fastbatch.OP_START, gap="maybe")),
    ("pattern: no prefix", [("s.a", "p1.10.fail.1.0.$FI", b"", b"x")]),
    ("pattern: a 64-byte id", _one("s.a", _ID64, 1, fastbatch.OP_COMMIT)),
    ("pattern: a 65-byte id", _one("s.a", _ID65, 1, fastbatch.OP_COMMIT)),
    ("pattern: unknown id", _one("s.a", "nobody", 2, fastbatch.OP_APPEND)),
    ("pattern: an ordinary publish", [("s.a", "_FB.plain", b"", b"x")]),
    # Refusals before the batch.
    ("a stream without allow_batched", _one("p.a", "r1", 1, fastbatch.OP_START)),
    ("a stream without it, a bad pattern", [("p.a", "_FB.$FI", b"", b"x")]),
    ("over max_msg_size first", _one("x.a", "r2", 1, fastbatch.OP_START, data=b"123456789")),
    # Refused messages (a plain publish's checks).
    ("e1: the first message refused", _one("s.a", "e1", 1, fastbatch.OP_START, hdr=_SYNC_HEADER)),
    ("e1: after it", _one("s.a", "e1", 2, fastbatch.OP_APPEND)),
    ("e2: refused in the middle (gap fail)", _batch("s.a", "e2", 2) + _one(
        "s.a", "e2", 3, fastbatch.OP_APPEND, hdr=b"Nats-Expected-Stream: other\r\n")),
    ("e3: refused in the middle (gap ok)", _batch("s.a", "e3", 2, gap="ok") + _one(
        "s.a", "e3", 3, fastbatch.OP_APPEND, gap="ok", hdr=b"Nats-Expected-Stream: other\r\n") + _one(
        "s.a", "e3", 4, fastbatch.OP_COMMIT, gap="ok")),
    ("e4: the first refused (gap ok)", _one("s.a", "e4", 1, fastbatch.OP_START, gap="ok",
                                            hdr=b"Nats-Expected-Stream: other\r\n") + _one(
        "s.a", "e4", 2, fastbatch.OP_COMMIT, gap="ok")),
    ("e5: the commit refused", _batch("s.a", "e5", 2) + _one("s.a", "e5", 3, fastbatch.OP_COMMIT,
                                                             hdr=b"Nats-Expected-Stream: other\r\n")),
    # Duplicates.
    ("d0: a message with an id", [("d.a", "_FB.plain", b"Nats-Msg-Id: one\r\n", b"x")]),
    ("d1: a duplicate in the middle", _batch("d.a", "d1", 2) + _one(
        "d.a", "d1", 3, fastbatch.OP_APPEND, hdr=b"Nats-Msg-Id: one\r\n") + _one("d.a", "d1", 4, fastbatch.OP_COMMIT)),
    ("d2: a duplicate that commits", _batch("d.a", "d2", 2) + _one(
        "d.a", "d2", 3, fastbatch.OP_COMMIT, hdr=b"Nats-Msg-Id: one\r\n")),
    ("d3: a duplicate alone that commits", _one("d.a", "d3", 1, fastbatch.OP_COMMIT, hdr=b"Nats-Msg-Id: one\r\n")),
    ("d4: a duplicate first", _one("d.a", "d4", 1, fastbatch.OP_START, hdr=b"Nats-Msg-Id: one\r\n") + _one(
        "d.a", "d4", 2, fastbatch.OP_COMMIT)),
    ("info D", *_api("$JS.API.STREAM.INFO.D", {})),
    # The required API level: a level natserver has is taken off the message; one it has not
    # (natserver claims 1, nats-server 2.15.1 5: neither has 99) ends the batch.
    ("l1: required level 1", _one("s.c", "l1", 1, fastbatch.OP_COMMIT, hdr=b"Nats-Required-Api-Level: 1\r\n")),
    ("l1: the message stored", *_api("$JS.API.STREAM.MSG.GET.S", {"last_by_subj": "s.c"})),
    ("l2: required level 99", _batch("s.a", "l2", 1) + _one(
        "s.a", "l2", 2, fastbatch.OP_APPEND, hdr=b"Nats-Required-Api-Level: 99\r\n")),
    ("l2: after it", _one("s.a", "l2", 3, fastbatch.OP_APPEND)),
    # A memory stream.
    ("m1: memory", _batch("m.a", "m1", 4, flow=2, end="eob")),
    # Other kinds of stream: a counter (the PubAck has no total), no_ack, interest retention
    # without consumers (nothing stored, the sequences used), roll-ups, a subject transform.
    ("counter stream C", *_stream("C", subjects=["c.>"], allow_msg_counter=True, allow_batched=True)),
    ("c1: increments", _one("c.a", "c1", 1, 0, hdr=b"Nats-Incr: 2\r\n", data=b"") + _one(
        "c.a", "c1", 2, 1, hdr=b"Nats-Incr: 3\r\n", data=b"") + _one("c.a", "c1", 3, 1, data=b"") + _one(
        "c.a", "c1", 4, fastbatch.OP_COMMIT, hdr=b"Nats-Incr: 5\r\n", data=b"")),
    ("c1: the total", *_api("$JS.API.STREAM.MSG.GET.C", {"last_by_subj": "c.a"})),
    ("no_ack stream N", *_stream("N", subjects=["n.>"], no_ack=True, allow_batched=True)),
    # (No answer to the usual end of a step here: a ping to a batch kept open ends them.)
    ("n0: the batch kept open", _one("n.z", "nz", 1, 0), _NZ_PING),
    ("n1: a batch", _batch("n.a", "n1", 3, flow=1, end="commit"), _NZ_PING),
    ("n2: an unknown batch", _one("n.a", "n2", 2, 1), _NZ_PING),
    ("n3: a duplicate", _one("n.a", "n3", 1, 0, hdr=b"Nats-Msg-Id: k\r\n") + _one(
        "n.a", "n3", 2, 1, hdr=b"Nats-Msg-Id: k\r\n") + _one("n.a", "n3", 3, fastbatch.OP_COMMIT_EOB, data=b""),
     _NZ_PING),
    ("n4: refused first, then in the middle", _one("n.a", "n4", 1, 0, hdr=b"Nats-Expected-Stream: other\r\n"),
     _NZ_PING),
    ("n5: refused in the middle", _batch("n.a", "n5", 2) + _one("n.a", "n5", 3, 1, hdr=b"Nats-Expected-Stream: o\r\n"),
     _NZ_PING),
    ("n6: a duplicate alone that commits", _one("n.a", "n6", 1, fastbatch.OP_COMMIT, hdr=b"Nats-Msg-Id: k\r\n"),
     _NZ_PING),
    ("info N", *_api("$JS.API.STREAM.INFO.N", {})),
    ("interest stream I", *_stream("I", subjects=["i.>"], retention="interest", allow_batched=True)),
    ("i1: a batch", _batch("i.a", "i1", 3, end="commit")),
    ("info I", *_api("$JS.API.STREAM.INFO.I", {})),
    ("roll-up stream R", *_stream("R", subjects=["r.>"], allow_rollup_hdrs=True, allow_batched=True,
                                  subject_transform={"src": "r.>", "dest": "rr.>"})),
    ("r1: a roll-up in a batch", _batch("r.a", "r1", 3) + _one("r.a", "r1", 4, 1, hdr=b"Nats-Rollup: sub\r\n") + _one(
        "r.a", "r1", 5, 1, hdr=b"Nats-Rollup: nonsense\r\n") + _one("r.b", "r1", 6, fastbatch.OP_COMMIT)),
    ("a plain publish with an invalid roll-up", [("r.a", "_FB.plain", b"Nats-Rollup: NonSense\r\n", b"x")]),
    ("info R", *_api("$JS.API.STREAM.INFO.R", {})),
    ("r1: the last", *_api("$JS.API.STREAM.MSG.GET.R", {"last_by_subj": "rr.a"})),
    # Switched off in the middle of a batch, and on again: the batch is gone.
    ("o1: a batch", _batch("s.a", "o1", 2)),
    ("update S: allow_batched off", *_update("S", subjects=["s.>"])),
    ("o1: with it off", _one("s.a", "o1", 3, fastbatch.OP_APPEND)),
    ("update S: allow_batched on", *_update("S", **BATCHED)),
    ("o1: on again", _one("s.a", "o1", 3, fastbatch.OP_APPEND)),
    ("sealed S", *_update("S", **BATCHED, sealed=True)),
    ("a sealed stream", _one("s.a", "z1", 1, fastbatch.OP_START)),
    ("info S", *_api("$JS.API.STREAM.INFO.S", {})),
]


class FastClient(RawClient):
    """RawClient that also sends a step's messages (subject, reply, header, payload) and
    returns every answer on their replies, up to a refused publish's (the step's end)."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.sock.sendall(b"SUB _FB.> 2\r\nSUB _SYNC.> 3\r\nSUB p1.> 4\r\nSUB $FI 5\r\nPING\r\n")
        self._until(b"PONG\r\n")
        self.steps = 0

    def _send(self, subject: str, reply: str, hdr: bytes, payload: bytes) -> None:
        if hdr:
            block = b"NATS/1.0\r\n" + hdr + b"\r\n"
            self.sock.sendall(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject.encode(), reply.encode(), len(block), len(block) + len(payload), block, payload))
        else:
            self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(payload), payload))

    def step(self, messages: list, end: tuple | None = None) -> list:
        """The answers to ``messages``, up to the answer to ``end`` (a message whose answer
        ends the step; by default one refused by the stream of the last message)."""
        self.steps += 1
        for message in messages:
            self._send(*message)
        if end is None:
            end = (messages[-1][0], f"_SYNC.{self.steps}", _SYNC_HEADER, b"")
        sync = end[1]
        self._send(*end)
        answers = []
        while True:
            line = self._until(b"\r\n")
            if not line.startswith((b"MSG ", b"HMSG ")):
                continue  # (PING, +OK)
            parts = line.split()
            size = int(parts[-1])
            data = self._until(b"\r\n")
            while len(data) < size:  # (a payload holding \r\n)
                data += b"\r\n" + self._until(b"\r\n")
            if parts[1].decode() == sync:
                return answers
            answers.append([_token(parts[1].decode()), _normal(data.decode())])


def _token(reply: str) -> str:
    """A reply by what identifies the message it answers: the batch id's last 8 bytes, its
    sequence and operation."""
    if not reply.endswith("$FI"):
        return reply
    parts = reply.split(".")
    return ".".join(parts[-6:-1]) if len(parts) >= 6 else reply


def _normal(answer: str):
    """A PubAck as its fields (natserver's JSON has 2.9's space after the stream name); a flow
    message, an error as they are; API answers by what this file is about."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    if "type" in document and not str(document["type"]).startswith("io.nats"):
        return answer  # a flow message, byte for byte
    if "error" in document and "config" not in document:
        return document
    if "message" in document:
        message = document["message"]
        return {"subject": message["subject"], "seq": message["seq"], "hdrs": message.get("hdrs")}
    if "config" in document:
        config = document["config"]
        return {"name": config["name"], "allow_batched": config.get("allow_batched", False),
                "sealed": config.get("sealed"), "state": {k: document["state"].get(k) for k in (
                    "messages", "first_seq", "last_seq")}}
    return document


def run_script(port: int) -> dict:
    client = FastClient(port)
    out: dict = {}
    for name, subject, *body in SCRIPT:
        if isinstance(subject, list):
            out[name] = client.step(subject, *body)
        else:
            out[name] = [_normal(a) for a in client.request(subject, body[0])]
    return out


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_a_batch_without_messages_for_10s_is_forgotten(tmp_path):
    """nats-server's cleanup timer (streamDefaultMaxBatchTimeout, reset by every message), on
    the server's clock: a batch quiet for less than 10 s goes on, one quiet for 10 s is
    unknown (10208) and its id may start a new batch."""
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        client = FastClient(server.port)
        client.request("$JS.API.STREAM.CREATE.S", {"name": "S", **BATCHED})
        assert client.step(_batch("s.a", "q", 2)) == [["q.10.fail.1.0", '{"type":"ack","seq":0,"msgs":10}']]
        server.advance(fastbatch.BATCH_TIMEOUT - 1)
        assert client.step(_one("s.a", "q", 3, fastbatch.OP_APPEND)) == []
        server.advance(fastbatch.BATCH_TIMEOUT - 1)
        assert client.step(_one("s.a", "q", 4, fastbatch.OP_APPEND)) == []  # (each message resets it)
        server.advance(fastbatch.BATCH_TIMEOUT)
        unknown = {"error": {"code": 400, "err_code": 10208, "description": "batch publish ID unknown"},
                   "stream": "S", "seq": 0}
        assert client.step(_one("s.a", "q", 5, fastbatch.OP_APPEND)) == [["q.10.fail.5.1", unknown]]
        assert client.step(_one("s.a", "q", 1, fastbatch.OP_COMMIT)) == [
            ["q.10.fail.1.2", {"stream": "S", "seq": 5, "batch": "q", "count": 1}]]


def test_at_most_1000_batches_in_flight_per_stream(tmp_path, monkeypatch):
    """streamDefaultMaxFastBatchInflightPerStream: the 1001st batch of a stream is refused
    (429, 10211) until one ends; another stream has its own (the server's total, 50 000, is
    the same count over every stream: checked with a lower one)."""
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js")) as server:
        client = FastClient(server.port)
        client.request("$JS.API.STREAM.CREATE.S", {"name": "S", **BATCHED})
        client.request("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_batched": True})
        starts = [m for i in range(fastbatch.MAX_INFLIGHT_PER_STREAM) for m in _one("s.a", f"n{i}", 1, 0)]
        answers = client.step(starts)
        # Each start's first flow ack; beside others a batch is acknowledged every message.
        assert len(answers) == 1 + 2 * (fastbatch.MAX_INFLIGHT_PER_STREAM - 1)
        too_many = {"error": {"code": 429, "err_code": 10211, "description": "batch publish too many inflight"},
                    "stream": "S", "seq": 0}
        assert client.step(_one("s.a", "late", 1, 0)) == [["late.10.fail.1.0", too_many]]
        client.step(_one("s.a", "n0", 2, fastbatch.OP_COMMIT_EOB))
        assert client.step(_one("s.a", "late", 1, 0))[0][1] == '{"type":"ack","seq":0,"msgs":1}'
        assert client.step(_one("t.a", "other", 1, 0))[0][1] == '{"type":"ack","seq":0,"msgs":10}'
        monkeypatch.setattr(fastbatch, "MAX_INFLIGHT_TOTAL", fastbatch.MAX_INFLIGHT_PER_STREAM + 1)
        assert client.step(_one("t.a", "third", 1, 0))[0][1]["error"]["err_code"] == 10211


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
    sys.exit(0)
