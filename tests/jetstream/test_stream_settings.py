"""Stream settings of nats-server 2.10+ (issue #27 item 2): ``first_seq`` (the sequence of the
stream's first message; refused for mirrors, 10143; an update only changes the configuration)
and ``subject_transform`` (the subject a message is stored under, for published and sourced
messages; its errors 10155/10156; 2.10's implicit republish) and a mirror's or source's
``subject_transforms`` (filters each with a transform; errors 10140, 10144-10147, 10150-10154;
a source whose transforms change starts over) and ``consumer_limits`` (the defaults and caps of
the stream's consumers, 10121/10153; an update below what a consumer has, 10069; durables
deleted after their inactive threshold), as nats-server 2.15.1 answers them. One script runs against natserver and must give what was
recorded from nats-server 2.15.1 in data/stream_settings_nats_server_2.15.1.json
(``python -m tests.jetstream.test_stream_settings`` records it again); a live 2.15.1, when
installed, must still give it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import nats
import pytest
from nats.js.api import ConsumerConfig

from natserver.jetstream.sourcing import recover_source_positions
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_external_sources import ACCOUNTS, EXT, _messages, _request, _wait
from tests.jetstream.test_filter_subjects import _Client

RECORDED = Path(__file__).with_name("data") / "stream_settings_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20


def _stream(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, **config}


def _update(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", {"name": name, **config}


def _info(name: str) -> tuple[str, bytes]:
    return f"$JS.API.STREAM.INFO.{name}", b""


def _get(name: str, seq: int) -> tuple[str, dict]:
    return f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq}


def _consumer(stream: str, name: str, **config) -> tuple[str, dict]:
    """A consumer create (ephemeral without a name), acks explicit unless said."""
    if name:
        config["durable_name"] = name
    return (f"$JS.API.CONSUMER.CREATE.{stream}" + (f".{name}" if name else ""),
            {"stream_name": stream, "config": {"ack_policy": "explicit", **config}})


SCRIPT: list[tuple[str, str, object]] = [
    # first_seq (2.10+)
    ("first_seq 100", *_stream("A", subjects=["a.>"], first_seq=100)),
    ("publish on A", "a.x", b"a1"),
    ("A after a message", *_info("A")),
    ("get A's first", *_get("A", 100)),
    ("update first_seq", *_update("A", subjects=["a.>"], first_seq=200)),
    ("publish on A again", "a.y", b"a2"),
    ("update without first_seq", *_update("A", subjects=["a.>"])),
    ("create again with first_seq", *_stream("A", subjects=["a.>"], first_seq=100)),
    ("purge A", "$JS.API.STREAM.PURGE.A", b""),
    ("A purged", *_info("A")),
    ("mirror with first_seq", *_stream("M", mirror={"name": "A"}, first_seq=5)),
    ("source with first_seq", *_stream("S", sources=[{"name": "A"}], first_seq=5)),
    ("publish on A for S", "a.z", b"a3"),
    ("memory stream first_seq 7", *_stream("MEM", subjects=["mem"], storage="memory", first_seq=7)),
    ("publish on MEM", "mem", b"m1"),
    ("first_seq negative", *_stream("B", subjects=["b"], first_seq=-1)),
    ("first_seq a string", *_stream("B", subjects=["b"], first_seq="5")),
    ("first_seq 0", *_stream("Z", subjects=["z"], first_seq=0)),
    # subject_transform (2.10+): what the stream stores, under which subject
    ("transform", *_stream("T", subjects=["t.>"], subject_transform={"src": "t.*.*", "dest": "x.$2.$1"})),
    ("a source into a transforming stream", *_stream("ST", sources=[{"name": "T"}],
                                                      subject_transform={"src": "t.>", "dest": "s.>"})),
    # A source's and a mirror's subject_transforms (2.10+): filters, each with a transform.
    ("source with transforms", *_stream("SX", sources=[{"name": "T", "subject_transforms": [
        {"src": "t.*.*", "dest": "from-t.$2"}, {"src": "x.>", "dest": ""}]}])),
    ("mirror with transforms", *_stream("MX", mirror={"name": "T", "subject_transforms": [
        {"src": "t.c", "dest": "mc"}, {"src": "x.*.*", "dest": "mx.$1.$2"}]})),
    ("mirror with one transform", *_stream("M1", mirror={"name": "T", "subject_transforms": [
        {"src": "", "dest": "all.>"}]})),
    ("source with an empty transform source", *_stream("SE", sources=[{"name": "T", "subject_transforms": [
        {"src": "", "dest": "all.>"}]}])),
    ("publish t.a.b", "t.a.b", b"t1"),
    ("publish t.c (not the transform's)", "t.c", b"t2"),
    ("stored transformed", *_get("T", 1)),
    ("stored as published", *_get("T", 2)),
    ("last of the transformed subject is 1", "t.a.b", (b"Nats-Expected-Last-Subject-Sequence: 1\r\n", b"t3")),
    ("last of the transformed subject is 1 again", "t.a.b", (b"Nats-Expected-Last-Subject-Sequence: 1\r\n", b"t4")),
    ("a consumer on the transformed subjects", "$JS.API.CONSUMER.CREATE.T.C",
     {"stream_name": "T", "config": {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "x.>"}}),
    ("update the transform", *_update("T", subjects=["t.>"], subject_transform={"src": "t.>", "dest": "y.>"})),
    ("publish after the update", "t.a.b", b"t5"),
    ("stored with the new transform", *_get("T", 4)),
    ("remove the transform", *_update("T", subjects=["t.>"])),
    ("publish without a transform", "t.a.b", b"t6"),
    ("stored untransformed", *_get("T", 5)),
    ("partition of a literal source", *_stream("P", subjects=["p.a"],
                                                subject_transform={"src": "p.a", "dest": "q.{{partition(3)}}"})),
    ("publish p.a", "p.a", b"p1"),
    ("stored in its partition", *_get("P", 1)),
    ("left and wildcards left out", *_stream("L", subjects=["l.*.*"],
                                             subject_transform={"src": "l.*.*", "dest": "m.{{left(1,2)}}"})),
    ("publish l.abcd.e", "l.abcd.e", b"l1"),
    ("stored by left", *_get("L", 1)),
    ("from everything", *_stream("E", subjects=["e.>"], subject_transform={"dest": "f.>"})),
    ("publish e.1", "e.1", b"e1"),
    ("stored under f", *_get("E", 1)),
    ("implicit republish", *_stream("R", subjects=["r.>"], subject_transform={"src": "r.>", "dest": "rr.>"},
                                    republish={"src": ">", "dest": ">"})),
    ("republish forming a cycle", *_stream("R2", subjects=["r2.>", "r3"], subject_transform={"src": "r2.>", "dest": "rr2.>"},
                                           republish={"src": ">", "dest": ">"})),
    ("transform: source invalid", *_stream("N1", subjects=["n1"], subject_transform={"src": "n1..a", "dest": "x"})),
    ("transform: a wildcard in dest", *_stream("N2", subjects=["n2.*"], subject_transform={"src": "n2.*", "dest": "x.*"})),
    ("transform: unknown function", *_stream("N3", subjects=["n3.*"], subject_transform={"src": "n3.*", "dest": "x.{{foo(1)}}"})),
    ("transform: index out of range", *_stream("N4", subjects=["n4.*"], subject_transform={"src": "n4.*", "dest": "x.$3"})),
    ("transform: a wildcard from a literal", *_stream("N5", subjects=["n5"], subject_transform={"src": "n5", "dest": "x.{{wildcard(1)}}"})),
    ("transform: an empty token", *_stream("N6", subjects=["n6.*"], subject_transform={"src": "n6.*", "dest": "x..$1"})),
    ("transform: not enough arguments", *_stream("N7", subjects=["n7.*"], subject_transform={"src": "n7.*", "dest": "x.{{split(1)}}"})),
    ("transform: > to *", *_stream("N8", subjects=["n8.>"], subject_transform={"src": "n8.>", "dest": "x.*"})),
    ("transform: a space in dest", *_stream("N9", subjects=["n9.*"], subject_transform={"src": "n9.*", "dest": "x y.$1"})),
    ("transform: not an object", *_stream("N10", subjects=["n10"], subject_transform="n10")),
    ("transform: without dest", *_stream("N11", subjects=["n11.*"], subject_transform={"src": "n11.*"})),
    ("publish n11.a", "n11.a", b"n1"),
    ("stored as published without dest", *_get("N11", 1)),
    ("source: a filter and a transform", *_stream("B1", sources=[{"name": "T", "filter_subject": "t.>",
                                                                   "subject_transforms": [{"src": "t.>", "dest": "u.>"}]}])),
    ("mirror: a filter and a transform", *_stream("B2", mirror={"name": "T", "filter_subject": "t.>",
                                                                "subject_transforms": [{"src": "t.>", "dest": "u.>"}]})),
    ("source: transform source invalid", *_stream("B3", sources=[{"name": "T", "subject_transforms": [
        {"src": "t..a", "dest": "u"}]}])),
    ("source: transform invalid", *_stream("B4", sources=[{"name": "T", "subject_transforms": [
        {"src": "t.*", "dest": "u.*"}]}])),
    ("source: transforms overlapping", *_stream("B5", sources=[{"name": "T", "subject_transforms": [
        {"src": "t.a.*", "dest": "u.$1"}, {"src": "t.>", "dest": "v.>"}]}])),
    ("mirror: transform source invalid", *_stream("B6", mirror={"name": "T", "subject_transforms": [
        {"src": "t..a", "dest": "u"}]})),
    ("mirror: transform invalid", *_stream("B7", mirror={"name": "T", "subject_transforms": [
        {"src": "t.*", "dest": "u.*"}]})),
    ("mirror: transforms overlapping", *_stream("B8", mirror={"name": "T", "subject_transforms": [
        {"src": "t.a.*", "dest": "u.$1"}, {"src": "t.*.b", "dest": "v.$1"}]})),
    ("source: transforms not a list", *_stream("B9", sources=[{"name": "T"}, {"name": "A", "subject_transforms": {
        "src": "a.>", "dest": "b.>"}}])),
    ("mirror: a transform not an object", *_stream("B10", mirror={"name": "T", "subject_transforms": ["t.>"]})),
    ("source: the same one twice", *_stream("B11", sources=[{"name": "T", "subject_transforms": [
        {"src": "t.>", "dest": "u.>"}]}, {"name": "T", "subject_transforms": [{"src": "t.>", "dest": "u.>"}]}])),
    ("mirror: update the transforms", *_update("MX", mirror={"name": "T", "subject_transforms": [
        {"src": "t.c", "dest": "md"}]})),
    # consumer_limits (2.10+): the defaults and caps of the stream's consumers
    ("consumer limits", *_stream("CL", subjects=["cl.>"], consumer_limits={
        "inactive_threshold": 60_000_000_000, "max_ack_pending": 50})),
    ("consumer limits empty", *_stream("CL0", subjects=["cl0"], consumer_limits={})),
    ("consumer limits negative", *_stream("CLN", subjects=["cln"], consumer_limits={
        "inactive_threshold": -5, "max_ack_pending": -2})),
    ("consumer limits: a string", *_stream("CLB", subjects=["clb"], consumer_limits={"max_ack_pending": "5"})),
    ("consumer limits: a duration string", *_stream("CLB", subjects=["clb"], consumer_limits={"inactive_threshold": "5s"})),
    ("consumer limits: a number", *_stream("CLB", subjects=["clb"], consumer_limits=5)),
    ("a durable takes the limits", *_consumer("CL", "D1")),
    ("consumer limits for ephemerals", *_stream("CLE", subjects=["cle"], consumer_limits={"max_ack_pending": 7})),
    ("an ephemeral takes them", *_consumer("CLE", "")),
    ("max_ack_pending over the limit", *_consumer("CL", "D2", max_ack_pending=51)),
    ("max_ack_pending at the limit", *_consumer("CL", "D3", max_ack_pending=50)),
    ("inactive_threshold over the limit", *_consumer("CL", "D4", inactive_threshold=60_500_000_000)),
    ("inactive_threshold under the limit", *_consumer("CL", "D5", inactive_threshold=30_000_000_000)),
    ("max_ack_pending -1", *_consumer("CL", "D6", max_ack_pending=-1)),
    ("ack none, pull", *_consumer("CL", "D7", ack_policy="none")),
    ("ack none, push", *_consumer("CL", "D8", ack_policy="none", deliver_subject="deliver.d8")),
    ("a stream without limits", *_consumer("CL0", "D9")),
    ("update: lower inactive_threshold", *_update("CL", subjects=["cl.>"], consumer_limits={
        "inactive_threshold": 40_000_000_000, "max_ack_pending": 50})),
    ("update: lower max_ack_pending", *_update("CL", subjects=["cl.>"], consumer_limits={
        "inactive_threshold": 60_000_000_000, "max_ack_pending": 10})),
    ("update: raise them", *_update("CL", subjects=["cl.>"], consumer_limits={
        "inactive_threshold": 90_000_000_000, "max_ack_pending": 500})),
    ("update: remove them", *_update("CL", subjects=["cl.>"])),
    ("a durable after the limits went", *_consumer("CL", "D10")),
    ("let the sources catch up", "", 1.5),
    ("S sourced", *_info("S")),
    ("the sourced message transformed", *_get("ST", 2)),
    ("the sourced message kept", *_get("ST", 1)),
    ("source with transforms: info", *_info("SX")),
    ("source with transforms: 1", *_get("SX", 1)),
    ("source with transforms: 2", *_get("SX", 2)),
    ("source with transforms: 3", *_get("SX", 3)),
    ("mirror with transforms: info", *_info("MX")),
    ("mirror with transforms: 2", *_get("MX", 2)),
    ("mirror with transforms: 1", *_get("MX", 1)),
    ("mirror with one transform: 4", *_get("M1", 4)),
    ("source with an empty transform source: info", *_info("SE")),
    ("change a source's transforms", *_update("SX", sources=[{"name": "T", "subject_transforms": [
        {"src": "t.c", "dest": "again"}]}])),
    ("let the source start over", "", 1.5),
    ("the changed source starts over", *_get("SX", 4)),
    ("and nothing after", *_get("SX", 5)),
]


def _normal(answer: str):
    """An API error as it is; a stream's answer by what this file is about (its settings,
    where its messages start and end); a message by its subject, sequence and data; a
    publish ack by its sequence."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    if "error" in document:
        error = dict(document["error"])
        prefix = "change to limits violates consumers: "
        if error.get("description", "").startswith(prefix):  # (nats-server lists them from a map)
            names = error["description"][len(prefix):].split(", ")
            error["description"] = prefix + ", ".join(sorted(names))
        return {"error": error}
    if "config" in document and "state" in document:
        config, state = document["config"], document["state"]
        out = {"first_seq": config.get("first_seq"), "subject_transform": config.get("subject_transform"),
               "consumer_limits": config.get("consumer_limits") or None,
               "republish": config.get("republish"), "mirror": config.get("mirror"), "sources": config.get("sources"),
               "state": {k: state[k] for k in ("messages", "first_seq", "last_seq")}}
        if document.get("type", "").endswith("_info_response"):
            # The links' reports by name and transforms (nats-server 2.15.1 also answers a
            # create with them, natserver as 2.9.10 did not: outside this file's settings).
            for key in ("mirror", "sources"):
                links = document.get(key)
                links = [links] if isinstance(links, dict) else links or []
                out[f"{key} info"] = [{k: link.get(k) for k in ("name", "subject_transforms", "error")}
                                      for link in links] or None
        return out
    if "config" in document and "delivered" in document:
        config = document["config"]
        return {k: config.get(k) for k in ("filter_subject", "max_ack_pending", "inactive_threshold", "ack_policy")} | {
            "durable": bool(config.get("durable_name")), "num_pending": document["num_pending"]}
    if "message" in document:
        message = document["message"]
        return {"subject": message["subject"], "seq": message["seq"], "data": message.get("data")}
    if "seq" in document:
        return {"seq": document["seq"]}
    return document


def run_script(port: int) -> dict:
    client = _Client(port)
    answers = {}
    for name, subject, body in SCRIPT:
        if isinstance(body, float):  # nats-server's sources copy in the background
            time.sleep(body)
            answers[name] = []
            continue
        answers[name] = [_normal(a) for a in client.request(subject, body)]
    return answers


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_first_seq_on_restart(threaded_server, tmp_path):
    """nats-server's file store purges up to first_seq each time it opens the stream
    (filestore.go newFileStore): a stream whose first_seq was raised by an update above its
    first message is emptied at the next start and goes on from there (the sequences it
    used are not given again); one whose messages are past it keeps them."""
    store_dir = str(tmp_path / "js")

    async def fill(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="UP", subjects=["up"], first_seq=10)
            await js.add_stream(name="KEEP", subjects=["keep"], first_seq=10)
            for subject in ("up", "up", "keep", "keep"):
                await js.publish(subject, b"x")
            info = await js.update_stream(name="UP", subjects=["up"], first_seq=50)
            assert info.config.first_seq == 50
            assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (10, 11, 2)
            info = await js.update_stream(name="KEEP", subjects=["keep"], first_seq=5)
        finally:
            await nc.close()

    async def check(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            info = await js.stream_info("UP")
            assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (50, 49, 0)
            assert (await js.publish("up", b"y")).seq == 50
            info = await js.stream_info("KEEP")
            assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (10, 11, 2)
        finally:
            await nc.close()

    handle = threaded_server(jetstream=True, store_dir=store_dir)
    asyncio.run(asyncio.wait_for(fill(handle.url), TIMEOUT))
    handle.stop()
    handle = threaded_server(jetstream=True, store_dir=store_dir)
    asyncio.run(asyncio.wait_for(check(handle.url), TIMEOUT))


def test_first_seq_sources_restarted_before_anything_came():
    """A stream with sources and first_seq that has stored nothing yet looks emptied (its
    last sequence is first_seq - 1) but is not: after a restart its sources start from the
    origin's first message, not from its end (nats-server looks at the last message's time);
    one that was emptied by a purge takes only what comes next."""
    def recovered(last_ts: int) -> bool:
        store = SimpleNamespace(msgs=0, first_seq=10, last_seq=9, last_ts=last_ts)
        link = SimpleNamespace(mirror=False, next=0, spec={"name": "O"}, _iname=b"O", from_new=False)
        recover_source_positions(SimpleNamespace(store=store), [link])
        return link.from_new

    assert recovered(0) is False  # a new stream with first_seq 10
    assert recovered(1_700_000_000_000_000_000) is True  # emptied after messages


def test_nats_py_stream_with_subject_transform(threaded_server, tmp_path):
    """What a client does with it: nats-py's StreamConfig.subject_transform; a message
    published on the stream's subject is stored, acknowledged and read back under the
    transformed one."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            info = await js.add_stream(nats.js.api.StreamConfig(
                name="ORDERS", subjects=["orders.*.*"],
                subject_transform=nats.js.api.SubjectTransform(src="orders.*.*", dest="by-region.$2.$1")))
            assert info.config.subject_transform.dest == "by-region.$2.$1"
            ack = await js.publish("orders.o1.eu", b"order")
            assert ack.seq == 1
            msg = await js.get_last_msg("ORDERS", "by-region.eu.o1")
            assert (msg.subject, msg.data) == ("by-region.eu.o1", b"order")
            sub = await js.pull_subscribe("by-region.eu.*", durable="eu", stream="ORDERS")
            fetched = await sub.fetch(1, timeout=2)
            assert [m.subject for m in fetched] == ["by-region.eu.o1"]
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


EXTERNAL_SERVERS = ["natserver", pytest.param("nats-server", marks=[
    pytest.mark.skipif(not reference.HAVE_NATS_SERVER, reason="nats-server 2.15.1 is not installed"),
    pytest.mark.needs_nats_server])]


async def _external_transforms(port: int) -> dict:
    """Account B mirrors and sources account A's stream through its exported API, with
    subject_transforms: the internal consumer gets the transforms' sources as its filters,
    and what it delivers is stored under the transformed subjects."""
    a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    out: dict = {}
    try:
        await a.jetstream().add_stream(name="O", subjects=["o.>"])
        for i in range(3):
            await a.jetstream().publish(f"o.{i}", b"x%d" % i)
        await _request(b, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": EXT, "subject_transforms": [
            {"src": "o.1", "dest": "one"}, {"src": "o.2", "dest": "two"}]}})
        await _request(b, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "O", "external": EXT, "subject_transforms": [
            {"src": "o.*", "dest": "src.$1"}]}]})
        await _wait(b, "M", 2)
        await _wait(b, "S", 3)
        await a.jetstream().publish("o.1", b"later")
        await _wait(b, "M", 3)
        await _wait(b, "S", 4)
        for name in ("M", "S"):
            info = await _request(b, f"$JS.API.STREAM.INFO.{name}", None)
            out[name] = [(seq, subject, data) for seq, subject, data, _ in await _messages(b, name)]
            out[f"{name} state"] = {k: info["state"][k] for k in ("messages", "first_seq", "last_seq")}
    finally:
        await a.close()
        await b.close()
    return out


@pytest.mark.parametrize("kind", EXTERNAL_SERVERS)
def test_external_mirror_and_source_with_subject_transforms(kind, tmp_path):
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER or "") as port:
        got = asyncio.run(asyncio.wait_for(_external_transforms(port), 30))
    assert got == {
        "M": [(2, "one", "x1"), (3, "two", "x2"), (4, "one", "later")],
        "M state": {"messages": 3, "first_seq": 2, "last_seq": 4},
        "S": [(1, "src.0", "x0"), (2, "src.1", "x1"), (3, "src.2", "x2"), (4, "src.1", "later")],
        "S state": {"messages": 4, "first_seq": 1, "last_seq": 4},
    }


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_consumer_limits_inactive_threshold_removes_durables(nats_server):
    """A stream's consumer_limits give its consumers their inactive threshold, durables
    included: nats-server 2.10+ deletes a durable nobody pulls from for that long (checked
    against 2.15.1 by the script's own probe); one that a request waits on stays. On the
    server's clock."""

    async def main():
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(nats.js.api.StreamConfig(
                name="ORDERS", subjects=["orders.*"],
                consumer_limits=nats.js.api.StreamConsumerLimits(inactive_threshold=30, max_ack_pending=20)))
            info = await js.add_consumer("ORDERS", ConsumerConfig(durable_name="idle", ack_policy="explicit"))
            assert (info.config.inactive_threshold, info.config.max_ack_pending) == (30, 20)
            await js.add_consumer("ORDERS", ConsumerConfig(durable_name="busy", ack_policy="explicit"))
            busy = await js.pull_subscribe_bind("busy", stream="ORDERS")
            waiting = asyncio.ensure_future(busy.fetch(1, timeout=5))  # 60 s of the server's time
            await nats_server.advance_async(29)
            assert {c.name for c in await js.consumers_info("ORDERS")} == {"idle", "busy"}
            await nats_server.advance_async(2)
            assert [c.name for c in await js.consumers_info("ORDERS")] == ["busy"]
            waiting.cancel()
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
