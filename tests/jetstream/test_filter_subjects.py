"""Consumers with several filter subjects (nats-server 2.10+ ``filter_subjects``), consumer and
stream ``metadata`` and the consumer create request's ``action``, as nats-server 2.15.1 answers
them: the rules of checkConsumerCfg (both filter
forms, an empty filter, overlapping filters, the metadata size), the create subject's filter
token (jsConsumerCreateRequest), workqueue uniqueness across filters, what such a consumer
counts and delivers, and an update that changes the filters. One script runs against natserver
and must give what was recorded from nats-server 2.15.1 in data/filter_subjects_nats_server_2.15.1.json
(``python -m tests.jetstream.test_filter_subjects`` records it again); a live 2.15.1, when
installed, must still give it. A newer Python client sends the list form even for one subject,
so Key-Value reads depend on this."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import trio

from natserver.jetstream import unsupported
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "filter_subjects_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20


def _create(stream: str, name: str, subject_filter: str = "", **config) -> tuple[str, dict]:
    subject = f"$JS.API.CONSUMER.CREATE.{stream}.{name}" + (f".{subject_filter}" if subject_filter else "")
    return subject, {"stream_name": stream, "config": {"durable_name": name, "ack_policy": "explicit", **config}}


def _act(action: str, stream: str, name: str, **config) -> tuple[str, dict]:
    subject, body = _create(stream, name, **config)
    return subject, {**body, "action": action}


def _next(stream: str, name: str, batch: int) -> tuple[str, dict]:
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", {"batch": batch, "no_wait": True}


SCRIPT: list[tuple[str, str, object]] = [
    ("stream S", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    ("publish a1", "s.a", b"a1"),
    ("publish b1", "s.b", b"b1"),
    ("publish c1", "s.c", b"c1"),
    ("publish a2", "s.a", b"a2"),
    ("two filters", *_create("S", "F", filter_subjects=["s.a", "s.b"])),
    ("one filter in the list form", *_create("S", "ONE", filter_subjects=["s.c"])),
    ("both forms", *_create("S", "N1", filter_subject="s.a", filter_subjects=["s.b"])),
    ("an empty filter", *_create("S", "N2", filter_subjects=["s.a", ""])),
    ("overlapping filters", *_create("S", "N3", filter_subjects=["s.a", "s.*"])),
    ("an invalid filter", *_create("S", "N4", filter_subjects=["s.a", "s..b"])),
    ("the subject's filter with the list", *_create("S", "N5", "s.a", filter_subjects=["s.a"])),
    ("the subject's filter differs", *_create("S", "N6", "s.a", filter_subject="s.b")),
    ("the subject's filter matches", *_create("S", "OK", "s.a", filter_subject="s.a")),
    ("fetch from two filters", *_next("S", "F", 3)),
    ("fetch from the list form", *_next("S", "ONE", 3)),
    ("last per subject over two filters", *_create("S", "L", filter_subjects=["s.a", "s.c"],
                                                   deliver_policy="last_per_subject")),
    ("fetch last per subject", *_next("S", "L", 3)),
    ("deliver last over two filters", *_create("S", "LAST", filter_subjects=["s.b", "s.c"], deliver_policy="last")),
    ("fetch deliver last", *_next("S", "LAST", 3)),
    ("update the filters", *_create("S", "F", filter_subjects=["s.c", "s.d"])),
    ("publish d1", "s.d", b"d1"),
    ("fetch after the update", *_next("S", "F", 3)),
    ("metadata", *_create("S", "M", filter_subjects=["s.a"], metadata={"team": "a", "tier": "1"})),
    ("metadata too large", *_create("S", "N7", metadata={"k": "x" * (128 * 1024)})),
    ("workqueue stream W", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "retention": "workqueue"}),
    ("workqueue: two filters", *_create("W", "A", filter_subjects=["w.a", "w.b"])),
    ("workqueue: one of them again", *_create("W", "B", filter_subject="w.b")),
    ("workqueue: overlapping a filter", *_create("W", "C", filter_subjects=["w.c", "w.*"])),
    ("workqueue: disjoint filters", *_create("W", "D", filter_subjects=["w.c", "w.d"])),
    # The create request's action (2.10+).
    ("action create, new", *_act("create", "S", "ACT", filter_subject="s.a")),
    ("action create, the same again", *_act("create", "S", "ACT", filter_subject="s.a")),
    ("action create, different", *_act("create", "S", "ACT", filter_subject="s.b")),
    ("action update, missing", *_act("update", "S", "NOPE", filter_subject="s.a")),
    ("action update, existing", *_act("update", "S", "ACT", filter_subject="s.b")),
    ("action unknown", *_act("upsert", "S", "ACT2")),
    # Nats-Expected-Last-Subject-Sequence-Subject (2.10+): the check names another subject.
    ("expected last of s.b is 2", "s.z", (b"Nats-Expected-Last-Subject-Sequence: 2\r\n"
                                          b"Nats-Expected-Last-Subject-Sequence-Subject: s.b\r\n", b"z1")),
    ("expected last of s.b is 1", "s.z", (b"Nats-Expected-Last-Subject-Sequence: 1\r\n"
                                          b"Nats-Expected-Last-Subject-Sequence-Subject: s.b\r\n", b"z2")),
    ("expected last of s.* is 6", "s.z", (b"Nats-Expected-Last-Subject-Sequence: 6\r\n"
                                          b"Nats-Expected-Last-Subject-Sequence-Subject: s.*\r\n", b"z3")),
    ("the subject without the sequence", "s.z", (b"Nats-Expected-Last-Subject-Sequence-Subject: s.b\r\n", b"z4")),
    ("a TTL on a stream without allow_msg_ttl", "s.z", (b"Nats-TTL: 5s\r\n", b"z5")),
    # Stream metadata (2.10+).
    ("stream with metadata", "$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "metadata": {"owner": "x"}}),
    ("stream metadata too large", "$JS.API.STREAM.CREATE.M2",
     {"name": "M2", "subjects": ["m2.>"], "metadata": {"k": "x" * (128 * 1024)}}),
]


def _normal(answer: str):
    """An API error as it is; consumer info by what this file is about (the filters, user
    metadata without the server's own ``_nats.`` keys, what is pending); a message's payload
    as it is; a publish ack by its sequence; a created stream by its name and user metadata."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    if "error" in document:
        return {"error": document["error"]}
    if "config" in document and "delivered" in document:
        config = document["config"]
        metadata = {k: v for k, v in (config.get("metadata") or {}).items() if not k.startswith("_nats.")}
        return {"filter_subject": config.get("filter_subject"), "filter_subjects": config.get("filter_subjects"),
                "metadata": metadata or None, "num_pending": document["num_pending"]}
    if "seq" in document:
        return {"seq": document["seq"]}
    if "config" in document and "state" in document:  # a stream created: its name and metadata
        metadata = {k: v for k, v in (document["config"].get("metadata") or {}).items() if not k.startswith("_nats.")}
        return {"stream": document["config"]["name"], "metadata": metadata or None}
    return sorted(document)


class _Client(RawClient):
    """RawClient that also publishes with headers: a body (headers, payload) goes as HPUB."""

    def request(self, subject: str, body) -> list[str]:
        if not isinstance(body, tuple):
            return super().request(subject, body)
        headers, payload = body
        block = b"NATS/1.0\r\n" + headers + b"\r\n"
        self.sock.sendall(b"HPUB %s _R.x %d %d\r\n%s%s\r\n" % (
            subject.encode(), len(block), len(block) + len(payload), block, payload))
        # The answer to the HPUB comes before the answers to a request nobody takes.
        return super().request("_nothing", b"")


def run_script(port: int) -> dict:
    client = _Client(port)
    return {name: [_normal(a) for a in client.request(subject, body)] for name, subject, body in SCRIPT}


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_nats_py_pull_consumer_with_filter_subjects(threaded_server, tmp_path):
    """What a client does with it: a pull consumer over two of a stream's subjects fetches
    only theirs, in stream order, and consumer info says what the server keeps."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.*"])
            for subject in ("orders.new", "orders.paid", "orders.shipped", "orders.new"):
                await js.publish(subject, subject.encode())
            config = nats.js.api.ConsumerConfig(durable_name="work", filter_subjects=["orders.new", "orders.shipped"],
                                                ack_policy="explicit")
            info = await js.add_consumer("ORDERS", config)
            assert info.config.filter_subjects == ["orders.new", "orders.shipped"]
            assert info.num_pending == 3
            sub = await js.pull_subscribe_bind("work", stream="ORDERS")
            msgs = await sub.fetch(10, timeout=2)
            assert [m.subject for m in msgs] == ["orders.new", "orders.shipped", "orders.new"]
            for m in msgs:
                await m.ack()
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def test_settings_natserver_does_not_honour_are_refused(start_server, raw_connect):
    """A 2.9 server ignores fields it does not know; natserver refuses the 2.10+ settings it
    does not act on yet, naming them (natserver/jetstream/unsupported.py), and takes their
    zero values as nats-server's clients send them."""

    async def main():
        server = await start_server(jetstream=True, store_dir=str(Path(server_dir) / "js"))
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R 1\r\n')

        async def ask(subject: str, body: dict) -> dict:
            payload = json.dumps(body).encode()
            await client.send(b"PUB %s _R %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
            line = await client.read_line()
            size = int(line.split()[-1])
            data = await client.read_exactly(size + 2)
            return json.loads(data[:-2])

        stream = {"name": "S", "subjects": ["s.>"]}
        # Every stream setting of 2.10-2.14 is acted on now; a source's durable consumer (2.14)
        # is the one refused, below.
        assert unsupported.STREAM_FIELDS == {}
        answer = await ask("$JS.API.STREAM.CREATE.S", {**stream, "sources": [{"name": "X", "consumer": {
            "name": "c", "deliver_subject": "d"}}]})
        assert answer["error"]["err_code"] == 10052 and "consumer" in answer["error"]["description"]
        zeros = {"compression": "none", "first_seq": 0, "allow_msg_ttl": True, "consumer_limits": {}}
        assert "error" not in await ask("$JS.API.STREAM.CREATE.S", {**stream, **zeros})
        answer = await ask("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {
            "durable_name": "C", "ack_policy": "explicit", "sourcing": True}})
        assert answer["error"] == {"code": 500, "err_code": 10012, "description": "natserver does not support "
                                   "sourcing (added in nats-server 2.14) yet"}
        assert "error" not in await ask("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {
            "durable_name": "C", "ack_policy": "explicit", "priority_policy": "none"}})

    import tempfile

    with tempfile.TemporaryDirectory() as server_dir, trio.fail_after(TIMEOUT):
        await main()


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
