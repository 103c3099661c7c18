"""The consumer API ($JS.API.CONSUMER.*): a script of raw requests replayed against natserver
and nats-server -js, answers compared after masking times and ephemeral names; plus nats-py's
JetStream manager on both servers and natserver-only spot checks of the JSON."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, NotFoundError

from natserver.protocol.const import JS_API_LEVEL, SERVER_VERSION
from tests.jetstream.recording import claimed, go_json_error
from tests.jetstream.test_jetstream import NATS_SERVER, TIMEOUT, GoServer, connect, run, target  # noqa: F401 (fixture)

S = {"stream_name": "S"}


def create(config: dict, stream: str = "S") -> dict:
    return {"stream_name": stream, "config": config}


SCRIPT = [
    ("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    ("$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l"], "max_consumers": 1}),
    ("s.a", b"1"), ("s.b", b"2"), ("s.a", b"3"),
    ("$JS.API.CONSUMER.CREATE.S", create({})),
    ("$JS.API.CONSUMER.CREATE.S", create({"durable_name": "d"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d2", create({"durable_name": "d2", "deliver_subject": "x"})),
    ("$JS.API.CONSUMER.CREATE.S.n1", create({"name": "n1", "filter_subject": "s.a"})),
    ("$JS.API.CONSUMER.CREATE.S.n2.s.b", create({"name": "n2", "filter_subject": "s.b"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d3", create({"durable_name": "x"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d3", create({})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", create({"durable_name": "d", "ack_policy": "none"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", create({"durable_name": "d", "max_deliver": 5})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", create({"durable_name": "d", "max_deliver": 5})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.NOPE.d", create({"durable_name": "d"}, "NOPE")),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", b"xx"),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", create({"durable_name": "d"}, "T")),
    ("$JS.API.CONSUMER.CREATE.S", create({"deliver_subject": "s.own"})),
    ("$JS.API.CONSUMER.CREATE.S", create({"deliver_policy": "by_start_sequence"})),
    ("$JS.API.CONSUMER.CREATE.S", create({"deliver_policy": "by_start_time"})),
    ("$JS.API.CONSUMER.CREATE.S", create({"ack_policy": "none"})),
    ("$JS.API.CONSUMER.CREATE.S", create({"deliver_subject": "y", "ack_policy": "none"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.e", create({"durable_name": "e", "ack_policy": "explicit"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.e", create({"durable_name": "e", "ack_policy": "all"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.e", create({"durable_name": "e", "ack_policy": "explicit",
                                                    "deliver_policy": "new"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.e", create({"durable_name": "e", "ack_policy": "explicit",
                                                    "filter_subject": "s.x"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.e", create({"durable_name": "e", "ack_policy": "explicit",
                                                    "deliver_subject": "zz"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.f", create({
        "durable_name": "f", "ack_policy": "explicit", "deliver_policy": "by_start_time",
        "opt_start_time": "2020-01-01T00:00:00Z", "deliver_subject": "q", "deliver_group": "g",
        "flow_control": True, "idle_heartbeat": 5000000000})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.g", create({"durable_name": "g", "flow_control": True})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.g", create({"durable_name": "g", "idle_heartbeat": 1000000000})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.g", create({"durable_name": "g", "deliver_policy": "last_per_subject"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.g", create({"durable_name": "g", "backoff": [1000000000, 2000000000],
                                                    "ack_policy": "explicit"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.S.h", create({"durable_name": "h", "deliver_policy": "by_start_sequence",
                                                    "opt_start_seq": 2, "filter_subject": "s.*"})),
    ("$JS.API.CONSUMER.DURABLE.CREATE.L.a", create({"durable_name": "a"}, "L")),
    ("$JS.API.CONSUMER.DURABLE.CREATE.L.b", create({"durable_name": "b"}, "L")),
    ("$JS.API.CONSUMER.INFO.S.d", b""),
    ("$JS.API.CONSUMER.INFO.S.n1", b""),
    ("$JS.API.CONSUMER.INFO.S.h", b""),
    ("$JS.API.CONSUMER.INFO.S.zz", b""),
    ("$JS.API.CONSUMER.INFO.NOPE.zz", b""),
    ("$JS.API.CONSUMER.NAMES.NOPE", b""),
    ("$JS.API.CONSUMER.LIST.L", b""),
    ("$JS.API.CONSUMER.NAMES.L", {"offset": 5}),
    ("$JS.API.CONSUMER.LIST.L", b"xx"),  # (2.10+: a body that is not JSON is no request)
    ("$JS.API.CONSUMER.DELETE.S.d", b""),
    ("$JS.API.CONSUMER.DELETE.S.d", b""),
    ("$JS.API.CONSUMER.DELETE.NOPE.d", b""),
    ("$JS.API.STREAM.INFO.L", b""),
    ("$JS.API.INFO", b""),
]

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


async def transcript(url: str) -> list:
    """Answers with times masked and ephemeral names replaced by their order of appearance."""
    nc = await connect(url)
    out: list = []
    for subject, body in SCRIPT:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        msg = await nc.request(subject, data, timeout=2)
        out.append((subject, claimed(go_json_error(_TIME.sub("T", msg.data.decode())))))
    names = await nc.request("$JS.API.CONSUMER.NAMES.S", b"", timeout=2)
    listed = await nc.request("$JS.API.CONSUMER.LIST.S", b"", timeout=2)
    await nc.close()
    ephemerals = [n for n in json.loads(names.data)["consumers"] if len(n) == 8]
    # Names sort differently between runs: compare the list with ephemerals masked, as sets.
    docs = json.loads(_TIME.sub("T", listed.data.decode()))
    masked = sorted(json.dumps(c, sort_keys=True).replace(c["name"], "EPH") if c["name"] in ephemerals
                    else json.dumps(c, sort_keys=True) for c in docs["consumers"])
    out = [(s, _mask(body, ephemerals)) for s, body in out]
    out.append(("LIST", docs["total"], masked))
    return out


def _mask(body: str, names: list) -> str:
    for name in names:
        body = body.replace(f'"{name}"', '"EPH"')
    return body


@pytest.mark.needs_nats_server
def test_consumer_api_matches_nats_server(threaded_server, tmp_path):
    if NATS_SERVER is None:
        pytest.skip("nats-server not installed")
    ours = threaded_server(jetstream=True, store_dir=str(tmp_path / "ours"))
    ref = GoServer(tmp_path / "ref").start()
    try:
        expected = asyncio.run(asyncio.wait_for(transcript(ref.url), TIMEOUT))
        got = asyncio.run(asyncio.wait_for(transcript(ours.url), TIMEOUT))
    finally:
        ref.stop()
    assert len(got) == len(expected)
    mismatches = [(r, o) for r, o in zip(expected, got) if r != o and "account_info" not in str(r[1])]
    assert not mismatches, "\n".join(f"{r}\n{o}\n" for r, o in mismatches)
    for ref_item, our_item in zip(expected, got):
        if "account_info_response" in str(ref_item[1]):
            ref_doc, our_doc = json.loads(ref_item[1]), json.loads(our_item[1])
            ref_doc.pop("storage"), our_doc.pop("storage")
            assert our_doc == ref_doc
            continue
        assert our_item == ref_item


def test_consumer_api_natserver_answers(threaded_server, tmp_path):
    """Spot checks of the transcript on natserver alone (runs without nats-server)."""
    ours = threaded_server(jetstream=True, store_dir=str(tmp_path))
    got = asyncio.run(asyncio.wait_for(transcript(ours.url), TIMEOUT))
    by_index = [json.loads(body) if isinstance(body, str) else body for _, body, *_ in got]
    ephemeral = by_index[5]
    assert ephemeral["name"] == "EPH"
    assert ephemeral["config"] == {"deliver_policy": "all", "ack_policy": "none", "max_deliver": -1,
                                   "replay_policy": "instant", "max_waiting": 512,
                                   "inactive_threshold": 5000000000, "num_replicas": 0,
                                   "metadata": {"_nats.level": str(JS_API_LEVEL), "_nats.req.level": "0",
                                                "_nats.ver": SERVER_VERSION}}
    assert ephemeral["ts"] == "T"  # (2.10+: when the info was gathered)
    assert ephemeral["num_pending"] == 3
    assert by_index[6]["error"]["err_code"] == 10020
    assert by_index[8]["num_pending"] == 2  # filter s.a
    assert by_index[10]["error"]["err_code"] == 10017
    assert by_index[11]["error"]["err_code"] == 10018
    assert by_index[13]["config"]["max_deliver"] == 5
    assert by_index[15]["error"]["err_code"] == 10059
    assert by_index[16]["error"]["err_code"] == 10025
    assert by_index[17]["error"]["err_code"] == 10056
    assert by_index[18]["error"]["err_code"] == 10081  # delivering into the stream's own subjects
    assert by_index[19]["error"]["err_code"] == 10094
    explicit = by_index[23]["config"]
    assert (explicit["ack_wait"], explicit["max_ack_pending"]) == (30_000_000_000, 1000)
    assert by_index[24]["error"]["description"] == "ack policy can not be updated"
    assert by_index[25]["error"]["description"] == "deliver policy can not be updated"
    assert by_index[27]["error"]["description"] == "can not update pull consumer to push based"  # (2.10+'s order)
    assert by_index[29]["error"]["err_code"] == 10089
    assert by_index[30]["error"]["err_code"] == 10088
    # (2.10+: a backoff with max_deliver -1, unlimited, is taken; its first step is the ack wait)
    assert (by_index[32]["config"]["backoff"], by_index[32]["config"]["ack_wait"]) == ([10**9, 2 * 10**9], 10**9)
    assert by_index[33]["num_pending"] == 2  # from sequence 2 on s.*
    assert by_index[35]["error"]["err_code"] == 10026
    info = next(d for s, d in zip(SCRIPT, by_index) if s[0] == "$JS.API.INFO")
    assert info["consumers"] == 11
    total, masked = got[-1][1], got[-1][2]
    assert total == 10 and len(masked) == 10


def test_nats_py_consumer_management(target):  # noqa: F811 (the imported fixture)
    async def main():
        nc = await connect(target.url)
        jsm = nc.jsm()
        await jsm.add_stream(name="C", subjects=["c.>"])
        for i in range(3):
            await nc.request(f"c.{i}", b"x", timeout=2)
        info = await jsm.add_consumer("C", ConsumerConfig(durable_name="dur", ack_policy=AckPolicy.EXPLICIT,
                                                          filter_subject="c.1"))
        assert info.name == "dur" and info.num_pending == 1 and info.config.max_ack_pending == 1000
        info = await jsm.add_consumer("C", ConsumerConfig(durable_name="dur", ack_policy=AckPolicy.EXPLICIT,
                                                          filter_subject="c.>", description="all"))
        assert info.num_pending == 3 and info.config.description == "all"
        with pytest.raises(APIError) as exc:
            await jsm.add_consumer("C", ConsumerConfig(durable_name="dur", ack_policy=AckPolicy.NONE))
        assert exc.value.err_code == 10012
        eph = await jsm.add_consumer("C", ConsumerConfig(deliver_policy=DeliverPolicy.LAST))
        assert len(eph.name) == 8 and eph.config.durable_name is None
        assert sorted(c.name for c in await jsm.consumers_info("C")) == sorted(["dur", eph.name])
        assert (await jsm.stream_info("C")).state.consumer_count == 2
        assert (await jsm.account_info()).consumers == 2
        assert (await jsm.consumer_info("C", "dur")).config.filter_subject == "c.>"
        assert await jsm.delete_consumer("C", "dur") is True
        with pytest.raises(NotFoundError) as exc:
            await jsm.consumer_info("C", "dur")
        assert exc.value.err_code == 10014
        await nc.close()

    run(main())
