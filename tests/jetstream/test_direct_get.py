"""JetStream direct get as nats-server 2.15.1 answers it: ``$JS.API.DIRECT.GET.<stream>`` with a
JSON request (``seq``, ``last_by_subj``, ``next_by_subj``, ``start_time``, batches with
``batch``/``max_bytes``, ``multi_last`` with ``up_to_seq``/``up_to_time``, ``no_hdr``) and
``$JS.API.DIRECT.GET.<stream>.<subject>``; the headers on each message and on the ``204 EOB``
status, the 404/408/413 statuses and the limit of 1024 subjects a multi_last may cover. One
script runs against natserver and must give, byte for byte (timestamps checked for their form and
consistency, then replaced), what was recorded from nats-server 2.15.1 in
data/direct_get_nats_server_2.15.1.json (``python -m tests.jetstream.test_direct_get`` records it
again); a live 2.15.1, when installed, must still give it. Also: long batches and multi_lasts
go a chunk at a time with other requests answered meanwhile (a fake engine, trio); Go's reading
of times; nats-py's direct reads (Key-Value get, ``get_msg(direct=True)``); a cross-account
mirror with ``mirror_direct`` answering for its origin, on natserver and on 2.15.1."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import nats
import pytest
import trio

from natserver.jetstream import direct
from natserver.jetstream.direct import DirectGets
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig, check_stream_config
from natserver.jetstream.util import get_header
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.jetstream.test_external_sources import ACCOUNTS, EXT

RECORDED = Path(__file__).with_name("data") / "direct_get_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20
MULTI_LIMIT = 1024  # getDirectMulti's maxAllowedResponses in nats-server 2.15.1
NO_ANSWER = 0.5  # seconds without an answer that mean none comes (no stream, no allow_direct)

_DG = "$JS.API.DIRECT.GET."


class _Later:
    """A request body made when its turn comes, from the timestamps seen so far."""

    def __init__(self, make) -> None:
        self.make = make


class _Bulk:
    """Publishes without replies (pipelined), then a PING: the answers are []."""

    def __init__(self, messages: list[tuple[str, bytes]]) -> None:
        self.messages = messages


class _Summary:
    """A request whose answers are recorded as their count, the first two and the last."""

    def __init__(self, body) -> None:
        self.body = body


def _go_time(ns: int) -> str:
    """An RFC 3339 time with nanoseconds (as a client would send it)."""
    seconds, frac = divmod(ns, 1_000_000_000)
    when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def _ns(text: str) -> int:
    main, _, frac = text.rstrip("Z").partition(".")
    when = datetime.datetime.fromisoformat(main + "+00:00")
    return int(when.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9])


def _at(stream: str, seq: int, delta: int = 0, field: str = "start_time", **extra) -> _Later:
    return _Later(lambda times: {field: _go_time(times[stream, seq] + delta), **extra})


def _stream_cases(s: str, prefix: str) -> list[tuple[str, str, object]]:
    """The requests every stream form (file, memory) must answer alike. The stream ``s`` holds
    (with ``prefix`` p): 1 p.a, 2 p.b (with a header), 3 p.c, 4 p.a, 5 p.b.x (deleted),
    6 p.d, 7 p.a, 8 p.b; about 20 ms apart."""
    g = _DG + s
    p = prefix
    return [
        (f"{s}: seq 1", g, {"seq": 1}),
        (f"{s}: seq 2, a message with headers", g, {"seq": 2}),
        (f"{s}: a deleted seq", g, {"seq": 5}),
        (f"{s}: seq past the end", g, {"seq": 99}),
        (f"{s}: seq 2 without headers", g, {"seq": 2, "no_hdr": True}),
        (f"{s}: last by subject", g, {"last_by_subj": f"{p}.a"}),
        (f"{s}: last by wildcard subject", g, {"last_by_subj": f"{p}.*"}),
        (f"{s}: last by a subject without messages", g, {"last_by_subj": f"{p}.zz"}),
        (f"{s}: next by subject", g, {"next_by_subj": f"{p}.a"}),
        (f"{s}: next by subject from seq 2", g, {"next_by_subj": f"{p}.a", "seq": 2}),
        (f"{s}: next by wildcard from seq 5", g, {"next_by_subj": f"{p}.>", "seq": 5}),
        (f"{s}: next by subject past the last", g, {"next_by_subj": f"{p}.c", "seq": 4}),
        (f"{s}: subject form", f"{g}.{p}.a", b""),
        (f"{s}: subject form, several tokens", f"{g}.{p}.b.x", b""),
        (f"{s}: subject form, wildcard", f"{g}.{p}.*", b""),
        (f"{s}: subject form, missing", f"{g}.{p}.nope", b""),
        (f"{s}: subject form with {{}}", f"{g}.{p}.a", {}),
        (f"{s}: subject form with no_hdr", f"{g}.{p}.b", {"no_hdr": True}),
        (f"{s}: subject form with seq", f"{g}.{p}.a", {"seq": 1}),
        (f"{s}: subject form with batch", f"{g}.{p}.a", {"batch": 2}),
        (f"{s}: subject form with up_to_seq", f"{g}.{p}.a", {"up_to_seq": 2}),
        (f"{s}: subject form with max_bytes", f"{g}.{p}.a", {"max_bytes": 2}),
        (f"{s}: subject form, malformed", f"{g}.{p}.a", b"{"),
        (f"{s}: subject form, empty key", f"{g}.", b""),
        (f"{s}: empty request", g, b""),
        (f"{s}: {{}}", g, {}),
        (f"{s}: malformed", g, b"{nope"),
        (f"{s}: batch alone", g, {"batch": 2}),
        (f"{s}: seq as a string", g, {"seq": "1"}),
        (f"{s}: a negative seq", g, {"seq": -1}),
        (f"{s}: a malformed start_time", g, {"start_time": "yesterday"}),
        (f"{s}: seq and last_by_subj", g, {"seq": 1, "last_by_subj": f"{p}.a"}),
        (f"{s}: seq and start_time", g, {"seq": 1, "start_time": "2024-01-01T00:00:00Z"}),
        (f"{s}: start_time and last_by_subj", g, {"start_time": "2024-01-01T00:00:00Z", "last_by_subj": f"{p}.a"}),
        (f"{s}: last_by_subj and next_by_subj", g, {"last_by_subj": f"{p}.a", "next_by_subj": f"{p}.a"}),
        (f"{s}: last_by_subj and batch", g, {"last_by_subj": f"{p}.a", "batch": 2}),
        (f"{s}: last_by_subj and a negative batch", g, {"last_by_subj": f"{p}.a", "batch": -1}),
        (f"{s}: last_by_subj and multi_last", g, {"last_by_subj": f"{p}.a", "multi_last": [f"{p}.b"]}),
        (f"{s}: next_by_subj and multi_last", g, {"next_by_subj": f"{p}.a", "multi_last": [f"{p}.b"]}),
        (f"{s}: up_to_seq and up_to_time", g, {"multi_last": [f"{p}.a"], "up_to_seq": 3,
                                               "up_to_time": "2024-01-01T00:00:00Z"}),
        # Batches.
        (f"{s}: batch of 3 from seq 1", g, {"seq": 1, "batch": 3}),
        (f"{s}: batch over a deleted seq", g, {"seq": 4, "batch": 3}),
        (f"{s}: batch from a deleted seq", g, {"seq": 5, "batch": 2}),
        (f"{s}: batch past the end", g, {"seq": 6, "batch": 10}),
        (f"{s}: batch from past the end", g, {"seq": 99, "batch": 10}),
        (f"{s}: batch of 1", g, {"seq": 1, "batch": 1}),
        (f"{s}: a negative batch", g, {"seq": 1, "batch": -3}),
        (f"{s}: batch by subject", g, {"next_by_subj": f"{p}.a", "batch": 5}),
        (f"{s}: batch by subject from seq 2", g, {"next_by_subj": f"{p}.a", "seq": 2, "batch": 1}),
        (f"{s}: batch by wildcard", g, {"next_by_subj": f"{p}.b.>", "batch": 5}),
        (f"{s}: batch by a subject without messages", g, {"next_by_subj": f"{p}.zz", "batch": 5}),
        (f"{s}: batch with max_bytes 1", g, {"seq": 1, "batch": 5, "max_bytes": 1}),
        (f"{s}: batch with max_bytes 20", g, {"seq": 1, "batch": 5, "max_bytes": 20}),
        (f"{s}: batch with a negative max_bytes", g, {"seq": 1, "batch": 5, "max_bytes": -1}),
        (f"{s}: max_bytes without batch", g, {"seq": 1, "max_bytes": 1}),
        (f"{s}: batch without headers", g, {"seq": 1, "batch": 3, "no_hdr": True}),
        (f"{s}: up_to_seq on a batch", g, {"seq": 1, "batch": 3, "up_to_seq": 1}),
        # start_time.
        (f"{s}: start_time at seq 3", g, _at(s, 3)),
        (f"{s}: start_time just before seq 3", g, _at(s, 3, -1)),
        (f"{s}: start_time just after seq 3", g, _at(s, 3, 1)),
        (f"{s}: start_time long before", g, {"start_time": "2001-01-01T00:00:00Z"}),
        (f"{s}: start_time in the future", g, {"start_time": "2200-01-01T00:00:00Z"}),
        (f"{s}: start_time past 2262 (Go's UnixNano wraps)", g, {"start_time": "2999-01-01T00:00:00Z"}),
        (f"{s}: start_time with a batch", g, _at(s, 6, 0, batch=5)),
        (f"{s}: start_time with next_by_subj", g, _at(s, 2, 0, next_by_subj=f"{p}.a", batch=5)),
        (f"{s}: start_time in the future with a batch", g, {"start_time": "2200-01-01T00:00:00Z", "batch": 3}),
        # multi_last.
        (f"{s}: multi_last of two subjects", g, {"multi_last": [f"{p}.a", f"{p}.b"]}),
        (f"{s}: multi_last by wildcard", g, {"multi_last": [f"{p}.*"]}),
        (f"{s}: multi_last of everything", g, {"multi_last": [">"]}),
        (f"{s}: multi_last overlapping", g, {"multi_last": [f"{p}.a", f"{p}.*", f"{p}.a"]}),
        (f"{s}: multi_last of nothing stored", g, {"multi_last": [f"{p}.zz"]}),
        (f"{s}: multi_last with an empty list", g, {"multi_last": [], "seq": 1}),
        (f"{s}: multi_last up_to_seq 4", g, {"multi_last": [f"{p}.>"], "up_to_seq": 4}),
        (f"{s}: multi_last up_to_seq past the end", g, {"multi_last": [f"{p}.a"], "up_to_seq": 99}),
        (f"{s}: multi_last up_to_seq 1", g, {"multi_last": [f"{p}.b", f"{p}.c"], "up_to_seq": 1}),
        (f"{s}: multi_last with seq", g, {"multi_last": [f"{p}.*"], "seq": 7}),
        (f"{s}: multi_last with seq past them", g, {"multi_last": [f"{p}.*"], "seq": 50}),
        (f"{s}: multi_last with batch", g, {"multi_last": [f"{p}.*"], "batch": 2}),
        (f"{s}: multi_last with max_bytes", g, {"multi_last": [f"{p}.*"], "max_bytes": 1}),
        (f"{s}: multi_last without headers", g, {"multi_last": [f"{p}.b"], "no_hdr": True}),
        (f"{s}: multi_last up_to_time at seq 4", g, _at(s, 4, 0, "up_to_time", multi_last=[f"{p}.>"])),
        (f"{s}: multi_last up_to_time just after seq 4", g, _at(s, 4, 1, "up_to_time", multi_last=[f"{p}.>"])),
        (f"{s}: multi_last up_to_time at seq 1", g, _at(s, 1, 0, "up_to_time", multi_last=[f"{p}.>"])),
        (f"{s}: multi_last up_to_time at seq 2", g, _at(s, 2, 0, "up_to_time", multi_last=[f"{p}.>"])),
        (f"{s}: multi_last up_to_time long before", g, {"multi_last": [f"{p}.>"], "up_to_time": "2001-01-01T00:00:00Z"}),
        (f"{s}: multi_last up_to_time in the future", g, {"multi_last": [f"{p}.a"], "up_to_time": "2200-01-01T00:00:00Z"}),
        (f"{s}: multi_last up_to_time past 2262", g, {"multi_last": [f"{p}.a"], "up_to_time": "2999-01-01T00:00:00Z"}),
        (f"{s}: multi_last with start_time", g, {"multi_last": [f"{p}.a"], "start_time": "2001-01-01T00:00:00Z"}),
    ]


def _fill(s: str, p: str) -> list[tuple[str, str, object]]:
    header = (b"X-Test: yes\r\n", b"b1")
    return [
        (f"{s}: publish 1", f"{p}.a", b"a1"),
        (f"{s}: publish 2", f"{p}.b", header),
        (f"{s}: publish 3", f"{p}.c", b"c1"),
        (f"{s}: publish 4", f"{p}.a", b"a2"),
        (f"{s}: publish 5", f"{p}.b.x", b"bx1"),
        (f"{s}: publish 6", f"{p}.d", b""),
        (f"{s}: publish 7", f"{p}.a", b"a3"),
        (f"{s}: publish 8", f"{p}.b", b"b2"),
        (f"{s}: delete 5", f"$JS.API.STREAM.MSG.DELETE.{s}", {"seq": 5}),
    ]


_MANY = [(f"m.{i}", b"x") for i in range(MULTI_LIMIT + 1)]

SCRIPT: list[tuple[str, str, object]] = [
    ("stream F", "$JS.API.STREAM.CREATE.F", {"name": "F", "subjects": ["f.>"], "allow_direct": True}),
    ("stream M", "$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "allow_direct": True,
                                             "storage": "memory"}),
    ("stream N, no allow_direct", "$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]}),
    ("F: empty stream, seq 1", _DG + "F", {"seq": 1}),
    ("F: empty stream, batch", _DG + "F", {"seq": 1, "batch": 3}),
    ("F: empty stream, multi_last", _DG + "F", {"multi_last": [">"]}),
    ("F: empty stream, multi_last up_to_time", _DG + "F", {"multi_last": [">"], "up_to_time": "2999-01-01T00:00:00Z"}),
    ("F: empty stream, start_time", _DG + "F", {"start_time": "2001-01-01T00:00:00Z", "batch": 2}),
    *_fill("F", "f"),
    *_fill("M", "m"),
    ("N: publish", "n.a", b"n1"),
    ("N: direct get without allow_direct", _DG + "N", {"seq": 1}),
    ("a stream that does not exist", _DG + "NOPE", {"seq": 1}),
    *_stream_cases("F", "f"),
    *_stream_cases("M", "m"),
    # How Go's encoding/json reads the request.
    ("F: multi_last as a string", _DG + "F", {"multi_last": "f.a"}),
    ("F: batch as 2.0", _DG + "F", b'{"seq":1,"batch":2.0}'),
    ("F: no_hdr as a string", _DG + "F", {"seq": 1, "no_hdr": "true"}),
    ("F: a JSON array", _DG + "F", b"[1]"),
    ("F: JSON null", _DG + "F", b"null"),
    ("F: subject form with JSON null", _DG + "F.f.a", b"null"),
    ("F: start_time null", _DG + "F", {"seq": 1, "start_time": None}),
    ("F: multi_last null", _DG + "F", {"seq": 1, "multi_last": None}),
    ("F: SEQ in capitals", _DG + "F", b'{"SEQ":2}'),
    ("F: an unknown field", _DG + "F", {"seq": 2, "nope": 1}),
    ("F: start_time with an offset", _DG + "F", {"start_time": "2001-01-01T02:00:00+02:00", "batch": 1}),
    ("F: start_time with a lower-case z", _DG + "F", {"start_time": "2001-01-01T00:00:00z"}),
    ("F: next_by_subj empty", _DG + "F", {"seq": 1, "next_by_subj": ""}),
    ("F: up_to_seq without multi_last", _DG + "F", {"seq": 1, "up_to_seq": 3}),
    ("F: up_to_time without multi_last", _DG + "F", {"seq": 1, "up_to_time": "2001-01-01T00:00:00Z"}),
    ("F: multi_last with an empty filter", _DG + "F", {"multi_last": [""]}),
    ("F: multi_last with an invalid subject", _DG + "F", {"multi_last": ["f..a"]}),
    ("F: last_by_subj an invalid subject", _DG + "F", {"last_by_subj": "f..a"}),
    ("F: next_by_subj an invalid subject", _DG + "F", {"next_by_subj": "f.>.a", "batch": 2}),
    # The limit on how many subjects a multi_last may cover (1024): 1025 subjects in a
    # memory stream, 1024 in a file stream.
    ("M: 1025 more subjects", "", _Bulk(_MANY)),
    ("M: multi_last over 1025+ subjects", _DG + "M", {"multi_last": ["m.>"]}),
    ("M: multi_last over 1025+ subjects, batch 2", _DG + "M", {"multi_last": ["m.>"], "batch": 2}),
    ("M: multi_last over 1025+ subjects up to seq 100", _DG + "M", _Summary({"multi_last": ["m.>"], "up_to_seq": 100})),
    ("M: multi_last over all but a few, by name", _DG + "M",
     _Summary({"multi_last": [f"m.{i}" for i in range(20, MULTI_LIMIT + 1)]})),
    ("M: multi_last over 1025 names", _DG + "M", {"multi_last": [f"m.{i}" for i in range(MULTI_LIMIT + 1)]}),
    ("F: 1020 more subjects", "", _Bulk([(f"f.n.{i}", b"y") for i in range(MULTI_LIMIT - 4)])),
    ("F: multi_last over exactly 1024 subjects", _DG + "F", _Summary({"multi_last": ["f.>"]})),
    ("F: one more subject", "f.n.last", b"z"),
    ("F: multi_last over 1025 subjects", _DG + "F", {"multi_last": ["f.>"]}),
    ("F: multi_last over 1025 subjects up to seq 9", _DG + "F", {"multi_last": ["f.>"], "up_to_seq": 9}),
    ("F: a batch of 2000", _DG + "F", _Summary({"seq": 1, "batch": 2000})),
    ("F: a batch of 2000 from 1000", _DG + "F", _Summary({"seq": 1000, "batch": 2000, "max_bytes": 5000})),
]

_TS = re.compile(r"Nats-Time-Stamp: ([^\r]*)\r\n")
_SEQ = re.compile(r"\r\nNats-Sequence: (\d+)\r\n")
_STREAM = re.compile(r"\r\nNats-Stream: ([^\r]*)\r\n")
_STATUS = re.compile(r"NATS/1.0 \d")
_GO_RFC3339NANO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z")


class _Run:
    def __init__(self, port: int) -> None:
        self.client = _Client(port)
        self.times: dict[tuple[str, int], int] = {}  # (stream, seq) -> timestamp (ns) seen in an answer

    def normal(self, answer: str) -> str:
        """A message's timestamp, checked for Go's RFC3339Nano form and for being the same
        every time its sequence is seen, becomes ``<ts>``; a publish ack or an API response
        becomes its field names (what this test is about is direct get's answers)."""
        if answer.startswith("{"):
            if '"error"' in answer:
                return answer
            if '"config"' in answer:  # (stream info: 2.9's shape in natserver)
                return "json: stream info"
            return "json: " + ",".join(sorted(re.findall(r'"(\w+)":', answer)))
        stamp = _TS.search(answer)
        if stamp is None:
            return answer
        assert _GO_RFC3339NANO.fullmatch(stamp.group(1)), answer
        seq, stream = _SEQ.search(answer), _STREAM.search(answer)
        assert seq is not None and stream is not None, answer
        ns = _ns(stamp.group(1))
        assert self.times.setdefault((stream.group(1), int(seq.group(1))), ns) == ns, answer
        return _TS.sub("Nats-Time-Stamp: <ts>\r\n", answer)

    def step(self, subject: str, body) -> object:
        if isinstance(body, _Bulk):
            self.client.bulk(body.messages)
            return []
        summary = isinstance(body, _Summary)
        if summary:
            body = body.body
        if isinstance(body, _Later):
            body = body.make(self.times)
        batchy = isinstance(body, dict) and (body.get("batch") or body.get("multi_last"))
        answers = [self.normal(a) for a in self.client.request(subject, body, until_status=bool(batchy))]
        if summary:
            return {"count": len(answers), "first": answers[:2], "last": answers[-1:]}
        return answers


class _Client(RawClient):
    """RawClient reading each request's answers as they come (no fixed wait), publishing with
    headers (a body (headers, payload) goes as HPUB) and in bulk."""

    def request(self, subject: str, body, until_status: bool = False) -> list[str]:
        """The answers: the first (none within NO_ANSWER seconds: nobody takes the request)
        and, ``until_status``, the rest up to a status (a batch's end, an error). Publishes are
        spaced apart so that their times tell the messages apart."""
        if not subject.startswith("$JS."):
            time.sleep(0.02)
        if isinstance(body, tuple):
            headers, payload = body
            block = b"NATS/1.0\r\n" + headers + b"\r\n"
            self.sock.sendall(b"HPUB %s _R.x %d %d\r\n%s%s\r\n" % (
                subject.encode(), len(block), len(block) + len(payload), block, payload))
        else:
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.sock.sendall(b"PUB %s _R.x %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        first = self._next_msg(NO_ANSWER)
        if first is None:
            return []
        answers = [first]
        while until_status and not _STATUS.match(answers[-1]):
            answer = self._next_msg(TIMEOUT)
            assert answer is not None, answers[-1]
            answers.append(answer)
        return answers

    def _next_msg(self, wait: float) -> str | None:
        """The next message's payload (other protocol lines skipped); None after ``wait``."""
        deadline = time.monotonic() + wait
        while True:
            eol = self.buf.find(b"\r\n")
            if eol >= 0:
                line = self.buf[:eol]
                if not line.startswith((b"MSG ", b"HMSG ")):
                    self.buf = self.buf[eol + 2 :]
                    continue
                end = eol + 2 + int(line.split()[-1])
                if len(self.buf) >= end + 2:
                    data, self.buf = self.buf[eol + 2 : end], self.buf[end + 2 :]
                    return data.decode()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            finally:
                self.sock.settimeout(TIMEOUT)
            assert chunk
            self.buf += chunk

    def bulk(self, messages: list[tuple[str, bytes]]) -> None:
        """Publishes all but the last without a reply, the last with one, and waits for its
        ack: the stream has stored them all then (its ingest is in order)."""
        *first, (subject, payload) = messages
        self.sock.sendall(b"".join(b"PUB %s %d\r\n%s\r\n" % (s.encode(), len(m), m) for s, m in first)
                          + b"PUB %s _R.x %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        assert '"seq"' in (self._next_msg(TIMEOUT) or "")


def run_script(port: int) -> dict:
    run = _Run(port)
    return {name: run.step(subject, body) for name, subject, body in SCRIPT}


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)


# -- bounded work: long batches a chunk at a time ------------------------------------------------


class _FakeEngine:
    """What DirectGets uses of an engine: send (recorded) and the server's flush and
    max_pending (a client that delivers nothing itself: every answer is sent)."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, bytes | None]] = []
        self.flushes = 0
        self.server = SimpleNamespace(options=SimpleNamespace(max_pending=64 * 1024 * 1024),
                                      flush_touched=self._flush, publish_slow=False)
        self.client = SimpleNamespace(
            deliver_replies=lambda replies, publish: [publish(s, p, h) for s, p, h, _ in replies])
        self.account = self.cluster = None

    def _flush(self) -> None:
        self.flushes += 1

    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None) -> None:
        self.sent.append((subject, payload, headers))


def _stream(n: int) -> SimpleNamespace:
    store = MemoryStore(check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {}))
    for i in range(n):
        store.store_msg(b"s.%d" % (i % 3), b"", b"%d" % i, 1_000_000_000 * (i + 1))
    return SimpleNamespace(name="S", store=store)


async def test_a_long_batch_goes_on_a_chunk_at_a_time_and_others_are_answered_meanwhile():
    """A batch of 1000 sends CHUNK_MSGS messages at once and the rest from DirectGets' task,
    a chunk per turn with a checkpoint between (another task runs in between); a request
    arriving meanwhile is answered at once, a second batch after the first; the messages,
    their pending counts and the EOB are those of one batch sent whole."""
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    stream = _stream(1000)
    gets.request(stream, None, b"A", b'{"seq":1,"batch":1000}')
    assert len(engine.sent) == direct.CHUNK_MSGS and gets.queue
    gets.request(stream, None, b"B", b'{"seq":5}')  # a single message: at once
    assert engine.sent[-1][0] == b"B" and engine.sent[-1][1] == b"4"
    gets.request(stream, None, b"C", b'{"seq":990,"batch":5}')  # behind the first batch
    assert engine.sent[-1][0] == b"B"
    turns = []

    async def other_client():
        while gets.queue:
            turns.append(len(engine.sent))
            await trio.lowlevel.checkpoint()

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gets.run)
            nursery.start_soon(other_client)
            while gets.queue:
                await trio.sleep(0)
            nursery.cancel_scope.cancel()
    a = [(payload, headers) for reply, payload, headers in engine.sent if reply == b"A"]
    assert [payload for payload, _ in a[:-1]] == [b"%d" % i for i in range(1000)]
    assert a[500][1] == (b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.2\r\nNats-Sequence: 501\r\n"
                         b"Nats-Time-Stamp: 1970-01-01T00:08:21Z\r\nNats-Num-Pending: 499\r\n"
                         b"Nats-Last-Sequence: 500\r\n\r\n")
    assert a[-1] == (b"", b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 1000\r\n\r\n")
    c = [payload for reply, payload, _ in engine.sent if reply == b"C"]
    assert c == [b"989", b"990", b"991", b"992", b"993", b""]
    assert [reply for reply, _, _ in engine.sent].index(b"C") > len(a)  # after A's EOB
    # The rest of A came in chunks, another task running between them (trio runs each ready
    # task once a round, in a random order: the other task saw a chunk count once or twice
    # per chunk, and at least half of the counts in all).
    chunks = (1000 - direct.CHUNK_MSGS) // direct.CHUNK_MSGS
    assert len(turns) >= chunks and len(set(turns)) >= chunks // 2, turns
    assert engine.flushes >= 3


async def test_a_long_multi_last_goes_on_a_chunk_at_a_time():
    """multi_last over 700 subjects: CHUNK_MSGS at once, the rest from the task; a subject's
    last message deleted before its chunk goes is skipped; the EOB counts as one sent whole."""
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    store = MemoryStore(check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {}))
    for i in range(700):
        store.store_msg(b"s.%d" % i, b"", b"%d" % i, 1_000_000_000 * (i + 1))
    gets.request(SimpleNamespace(name="S", store=store), None, b"A", b'{"multi_last":["s.*"]}')
    assert len(engine.sent) == direct.CHUNK_MSGS and gets.queue
    store.remove_msg(600)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gets.run)
            while gets.queue:
                await trio.sleep(0)
            nursery.cancel_scope.cancel()
    assert [payload for _, payload, _ in engine.sent[:-1]] == [b"%d" % i for i in range(700) if i != 599]
    assert engine.sent[300][2] == (b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.300\r\nNats-Sequence: 301\r\n"
                                   b"Nats-Time-Stamp: 1970-01-01T00:05:01Z\r\nNats-Num-Pending: 399\r\n"
                                   b"Nats-Last-Sequence: 300\r\n\r\n")
    assert engine.sent[-1][2] == (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 700\r\n"
                                  b"Nats-UpTo-Sequence: 700\r\n\r\n")


async def test_a_multi_last_over_many_subjects_chooses_them_over_several_turns():
    """A wildcard over 40 000 subjects: SELECT_SUBJECTS tested a turn (a single get answered
    in between), then the messages; too many matches end with 413 as soon as they are found."""
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    store = MemoryStore(check_stream_config(StreamConfig(name="S", subjects=[">"], no_ack=True), {}))
    for i in range(40_000):
        store.store_msg(b"k.%d.v" % i, b"", b"%d" % i, 1_000_000_000 * (i + 1))
    stream = SimpleNamespace(name="S", store=store)
    gets.request(stream, None, b"A", b'{"multi_last":["k.1.*","k.39999.>"]}')
    gets.request(stream, None, b"T", b'{"multi_last":["k.*.v"]}')
    assert engine.sent == [] and len(gets.queue) == 2
    gets.request(stream, None, b"B", b'{"seq":5}')
    assert engine.sent == [(b"B", b"4", engine.sent[0][2])]
    turns = 0
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gets.run)
            while gets.queue:
                turns += 1
                await trio.sleep(0)
            nursery.cancel_scope.cancel()
    assert turns >= 40_000 // direct.SELECT_SUBJECTS
    assert [(reply, payload) for reply, payload, _ in engine.sent[1:]] == [
        (b"A", b"1"), (b"A", b"39999"), (b"A", b""), (b"T", b"")]
    assert engine.sent[3][2] == (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 40000\r\n"
                                 b"Nats-UpTo-Sequence: 40000\r\n\r\n")
    assert engine.sent[4][2] == direct.HDR_TOO_MANY


async def _drain(gets: DirectGets) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gets.run)
            while gets.queue:
                await trio.sleep(0)
            nursery.cancel_scope.cancel()


async def test_a_batch_counts_what_is_pending_over_several_turns():
    """From the middle of 200 000 messages, the pending count is COUNT_SEQS sequences a
    turn before the first message goes; the numbers are those of one count."""
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    stream = _stream(200_000)  # seq k: subject s.((k - 1) % 3)
    gets.request(stream, None, b"A", b'{"seq":2,"next_by_subj":"s.1","batch":3}')
    assert engine.sent == [] and gets.queue
    await _drain(gets)
    pending = (200_000 - 2) // 3 + 1  # s.1 from seq 2: 2, 5, 8, ...
    assert [(payload, get_header(b"Nats-Num-Pending", headers)) for _, payload, headers in engine.sent] == [
        (b"1", b"%d" % (pending - 1)), (b"4", b"%d" % (pending - 2)), (b"7", b"%d" % (pending - 3)),
        (b"", b"%d" % (pending - 3))]


async def test_the_eob_counts_again_when_messages_came_meanwhile():
    """As nats-server past its count's validThrough: the EOB's pending count is counted again
    from after the last message sent when the stream grew during the batch."""
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    stream = _stream(1000)
    gets.request(stream, None, b"A", b'{"seq":1,"batch":1000}')
    for i in range(5):
        stream.store.store_msg(b"s.new", b"", b"n%d" % i, 2_000_000_000_000)
    await _drain(gets)
    assert len(engine.sent) == 1001
    assert engine.sent[-1][2] == b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 5\r\nNats-Last-Sequence: 1000\r\n\r\n"


async def test_a_batch_whose_stream_goes_away_ends_with_its_eob():
    engine = _FakeEngine()
    gets = DirectGets(engine)  # type: ignore[arg-type]
    stream = _stream(600)
    gets.request(stream, None, b"A", b'{"seq":1,"batch":600}')
    stream.store.stop()
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gets.run)
            while gets.queue:
                await trio.sleep(0)
            nursery.cancel_scope.cancel()
    assert len(engine.sent) == direct.CHUNK_MSGS + 1
    assert engine.sent[-1][2] == (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
                                  % (600 - direct.CHUNK_MSGS, direct.CHUNK_MSGS))


@pytest.mark.parametrize("text, ns", [
    ("1970-01-01T00:00:00Z", 0),
    ("1970-01-01T00:00:01.5Z", 1_500_000_000),
    ("1970-01-01T01:00:00+01:00", 0),
    ("1969-12-31T23:00:00.000000001-01:00", 1),
    ("2024-02-29T12:00:00.1234567891Z", 1709208000_123456789),  # (digits past 9 dropped)
    ("2262-04-11T23:47:16.854775807Z", (1 << 63) - 1),
    ("2262-04-11T23:47:16.854775808Z", -(1 << 63)),  # Go's UnixNano wraps
    ("0000-01-01T00:00:00Z", ((-62167219200 * 10**9 + (1 << 63)) % (1 << 64)) - (1 << 63)),
])
def test_times_as_go_reads_them(text, ns):
    assert direct.go_time_ns(text) == ns


@pytest.mark.parametrize("text", ["yesterday", "2024-01-01", "2024-01-01 00:00:00Z", "2024-02-30T00:00:00Z",
                                  "2024-01-01T24:00:00Z", "2024-01-01T00:00:00", "2024-01-01T00:00:00+25:00", 5])
def test_times_go_refuses(text):
    with pytest.raises(ValueError):
        direct.go_time_ns(text)


# -- nats-py ---------------------------------------------------------------------------------


def test_nats_py_reads_directly(threaded_server, tmp_path):
    """nats-py's direct reads against natserver: a Key-Value bucket (``direct=True``: its get
    is DIRECT.GET.<stream>.<subject>, with a revision {"seq"}), get_msg/get_last_msg with
    direct=True, a missing key; and a multi_last request as a client sends it by hand (nats-py
    has no call for batches)."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            kv = await js.create_key_value(nats.js.api.KeyValueConfig(bucket="CFG", history=5, direct=True))
            assert (await js.stream_info("KV_CFG")).config.allow_direct
            await kv.put("a", b"1")
            await kv.put("b", b"2")
            await kv.put("a", b"3")
            entry = await kv.get("a")
            assert (entry.value, entry.revision) == (b"3", 3)
            assert (await kv.get("a", revision=1)).value == b"1"
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await kv.get("missing")
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await kv.get("a", revision=2)  # that revision is b's
            msg = await js.get_last_msg("KV_CFG", "$KV.CFG.b", direct=True)
            assert (msg.seq, msg.data, msg.headers["Nats-Stream"]) == (2, b"2", "KV_CFG")
            nxt = await js.get_msg("KV_CFG", seq=2, subject="$KV.CFG.a", next=True, direct=True)
            assert nxt.seq == 3
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.DIRECT.GET.KV_CFG", json.dumps({"multi_last": ["$KV.CFG.*"]}).encode(),
                             reply=inbox)
            got = [await sub.next_msg(timeout=2) for _ in range(3)]
            assert [(m.headers["Nats-Subject"], m.data) for m in got[:2]] == [("$KV.CFG.b", b"2"), ("$KV.CFG.a", b"3")]
            assert got[2].headers["Status"] == "204" and got[2].headers["Nats-UpTo-Sequence"] == "3"
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- a mirror with mirror_direct answers for its origin ----------------------------------------


async def _answers(nc, subject: str, body: bytes, until_status: bool) -> list:
    """The answers to a direct get: (headers but the time stamp, payload) each."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    out: list = []
    while True:
        msg = await sub.next_msg(timeout=5)
        headers = {getattr(k, "value", k): v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"}
        out.append([sorted(headers.items()), msg.data.decode()])
        if not until_status or "Status" in headers:
            break
    await sub.unsubscribe()
    return out


async def _mirror_direct(port: int) -> dict:
    """Account B mirrors account A's stream O (external) with mirror_direct: B's
    ``$JS.API.DIRECT.GET.O`` is answered by the mirror, named in Nats-Stream."""
    a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    try:
        await a.jetstream().add_stream(name="O", subjects=["o.>"], allow_direct=True)
        for subject, data in (("o.a", b"1"), ("o.b", b"2"), ("o.a", b"3")):
            await a.jetstream().publish(subject, data)
        created = await _request(b, "$JS.API.STREAM.CREATE.M", {
            "name": "M", "mirror": {"name": "O", "external": EXT}, "mirror_direct": True})
        assert "error" not in created, created
        while (await _request(b, "$JS.API.STREAM.INFO.M", None)).get("state", {}).get("messages") != 3:
            await asyncio.sleep(0.05)
        while True:  # (nats-server's mirror joins the origin's direct gets once caught up)
            try:
                await b.request("$JS.API.DIRECT.GET.O", b'{"seq":1}', timeout=0.2)
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                await asyncio.sleep(0.05)
        return {
            "seq 1": await _answers(b, "$JS.API.DIRECT.GET.O", b'{"seq":1}', False),
            "last of o.a": await _answers(b, "$JS.API.DIRECT.GET.O.o.a", b"", False),
            "multi_last": await _answers(b, "$JS.API.DIRECT.GET.O", b'{"multi_last":["o.*"]}', True),
            "batch": await _answers(b, "$JS.API.DIRECT.GET.O", b'{"seq":1,"batch":5}', True),
        }
    finally:
        await a.close()
        await b.close()


async def _request(nc, subject: str, body) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, data, timeout=5)).data)


def _scenario(kind: str, tmp_path, binary: str | None = None) -> dict:
    kwargs = {"binary": binary} if binary else {}
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path, **kwargs) as port:
        return asyncio.run(asyncio.wait_for(_mirror_direct(port), 30))


def _check_mirror_direct(got: dict) -> None:
    assert got["seq 1"] == [[[("Nats-Sequence", "1"), ("Nats-Stream", "M"), ("Nats-Subject", "o.a")], "1"]]
    assert got["last of o.a"] == [[[("Nats-Sequence", "3"), ("Nats-Stream", "M"), ("Nats-Subject", "o.a")], "3"]]
    assert got["multi_last"][1] == [[("Nats-Last-Sequence", "2"), ("Nats-Num-Pending", "0"), ("Nats-Sequence", "3"),
                                     ("Nats-Stream", "M"), ("Nats-Subject", "o.a")], "3"]
    assert got["multi_last"][2] == [[("Description", "EOB"), ("Nats-Last-Sequence", "3"), ("Nats-Num-Pending", "0"),
                                     ("Nats-UpTo-Sequence", "3"), ("Status", "204")], ""]
    assert [answer[1] for answer in got["batch"]] == ["1", "2", "3", ""]


def test_a_mirror_with_mirror_direct_answers_for_its_origin(tmp_path):
    _check_mirror_direct(_scenario("natserver", tmp_path))


@reference.needs_nats_server
def test_nats_server_s_mirror_answers_so_too(tmp_path):
    _check_mirror_direct(_scenario("nats-server", tmp_path, reference.NATS_SERVER))


# -- nobody to answer: no responders --------------------------------------------------------------


async def _no_responders(url: str) -> list[str]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="NODIRECT", subjects=["nd"])
        await js.publish("nd", b"x")
        outcomes = []
        for subject in ("$JS.API.DIRECT.GET.NONE", "$JS.API.DIRECT.GET.NODIRECT", "$JS.API.DIRECT.GET.NODIRECT.nd"):
            try:
                await nc.request(subject, b'{"seq":1}', timeout=2)
                outcomes.append("answered")
            except nats.errors.NoRespondersError:
                outcomes.append("no responders")
        with pytest.raises(nats.errors.NoRespondersError):
            await js.get_msg("NONEXISTENT_STREAM", seq=1, direct=True)  # (nats-py's JSMTest)
        return outcomes
    finally:
        await nc.close()


_LIVE_215 = [pytest.mark.needs_nats_server,
             pytest.mark.skipif(not reference.HAVE_NATS_SERVER, reason="nats-server 2.15.1 is not installed")]


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server-2.15.1", marks=_LIVE_215)])
def test_a_direct_get_nobody_answers_gets_no_responders(kind, threaded_server, tmp_path):
    """nats-server subscribes to DIRECT.GET.<stream> only for streams with allow_direct: a
    request for a missing stream, or one without direct gets, finds no subscriber and gets the
    503 no-responders status at once (natserver answered nothing: the client waited out its
    timeout)."""
    if kind == "natserver":
        handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))
        assert asyncio.run(_no_responders(handle.url)) == ["no responders"] * 3
        return
    from tests.jetstream.test_jetstream import GoServer

    server = GoServer(tmp_path / "go", reference.NATS_SERVER).start()
    try:
        assert asyncio.run(_no_responders(server.url)) == ["no responders"] * 3
    finally:
        server.stop()
