"""Consumers with several filter subjects (nats-server 2.10+ ``filter_subjects``) and consumer
``metadata``, as nats-server 2.15.1 answers them: the rules of checkConsumerCfg (both filter
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

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "filter_subjects_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20


def _create(stream: str, name: str, subject_filter: str = "", **config) -> tuple[str, dict]:
    subject = f"$JS.API.CONSUMER.CREATE.{stream}.{name}" + (f".{subject_filter}" if subject_filter else "")
    return subject, {"stream_name": stream, "config": {"durable_name": name, "ack_policy": "explicit", **config}}


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
]


def _normal(answer: str):
    """An API error as it is; consumer info by what this file is about (the filters, user
    metadata without the server's own ``_nats.`` keys, what is pending); a message's payload
    as it is; a publish ack by its sequence; a created stream by its name."""
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
    if "config" in document and "state" in document:  # a stream created (its JSON is not this file's)
        return {"stream": document["config"]["name"]}
    return sorted(document)


def run_script(port: int) -> dict:
    client = RawClient(port)
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


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
