"""The ``_nats.*`` metadata of stream and consumer configurations (versioning.py, nats-server
2.11+'s jetstream_versioning.go): ``_nats.req.level`` stored on create, update and pause (the
API level the configuration needs; a client's own value replaced, a repeated create keeping the
stream's), ``_nats.ver`` and ``_nats.level`` added to the answers of create, update and info
only. One script against natserver and, when installed, nats-server 2.15.1: the metadata of each
answer must be the same (the server's level as each claims it, recording.claimed)."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from natserver.jetstream.consumer import ConsumerConfig
from natserver.jetstream.stream import StreamConfig
from natserver.jetstream.versioning import (
    copy_metadata,
    metadata_json,
    set_static_consumer_metadata,
    set_static_stream_metadata,
)
from natserver.protocol.const import JS_API_LEVEL, SERVER_VERSION
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import claimed
from tests.reference import NATS_SERVER, needs_nats_server

JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20
FUTURE = "2099-01-01T00:00:00Z"

SCRIPT = [
    ("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    # A client's own _nats.* keys: the level replaced, the dynamic ones dropped.
    ("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True,
                                 "metadata": {"_nats.req.level": "7", "_nats.ver": "x", "k": "v"}}),
    ("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True, "metadata": {"k": "v"}}),
    ("$JS.API.STREAM.UPDATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True, "metadata": {"k": "w"}}),
    ("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "allow_msg_counter": True}),
    ("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "subject_delete_marker_ttl": 1_000_000_000}),
    ("$JS.API.STREAM.INFO.T", {}),
    ("$JS.API.STREAM.LIST", {}),
    ("$JS.API.CONSUMER.CREATE.S.PA", {"stream_name": "S", "config": {
        "name": "PA", "ack_policy": "explicit", "pause_until": FUTURE}}),
    ("$JS.API.CONSUMER.CREATE.S.PG", {"stream_name": "S", "config": {
        "name": "PG", "ack_policy": "explicit", "priority_groups": ["g"], "priority_policy": "overflow"}}),
    ("$JS.API.CONSUMER.CREATE.S.PH", {"stream_name": "S", "config": {
        "name": "PH", "ack_policy": "explicit", "metadata": {"x": "y"}}}),
    ("$JS.API.CONSUMER.PAUSE.S.PH", {"pause_until": FUTURE}),
    ("$JS.API.CONSUMER.INFO.S.PH", {}),
    ("$JS.API.CONSUMER.PAUSE.S.PH", {}),
    ("$JS.API.CONSUMER.INFO.S.PH", {}),
    ("$JS.API.CONSUMER.LIST.S", {}),
]


def _metadata(answer: dict) -> object:
    """The answer's configuration metadata (every one of a list's), or its error."""
    if "error" in answer:
        return answer["error"]
    for key in ("streams", "consumers"):
        if key in answer:
            return [item["config"].get("metadata") for item in answer[key]]
    return answer["config"].get("metadata") if "config" in answer else "no config"


async def _play(port: int) -> list:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        out = []
        for subject, body in SCRIPT:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=2)
            out.append((subject, _metadata(json.loads(claimed(msg.data.decode())))))
        return out
    finally:
        await nc.close()


def _answers(kind: str, tmp_path, binary: str = "nats-server") -> list:
    with running(kind, JS_CONFIG % (tmp_path / kind), tmp_path, binary=binary) as port:
        return asyncio.run(asyncio.wait_for(_play(port), TIMEOUT))


def test_natserver_metadata(tmp_path):
    got = dict(_answers("natserver", tmp_path))
    dynamic = {"_nats.level": str(JS_API_LEVEL), "_nats.ver": SERVER_VERSION}
    assert got["$JS.API.STREAM.CREATE.S"] == {**dynamic, "_nats.req.level": "0"}
    assert got["$JS.API.STREAM.UPDATE.T"] == {**dynamic, "_nats.req.level": "1", "k": "w"}
    assert list(got["$JS.API.STREAM.UPDATE.T"]) == sorted(got["$JS.API.STREAM.UPDATE.T"])  # (Go sorts a map)
    assert got["$JS.API.STREAM.CREATE.C"]["_nats.req.level"] == "2"
    assert got["$JS.API.STREAM.CREATE.M"]["_nats.req.level"] == "1"
    assert got["$JS.API.STREAM.LIST"] == [{"_nats.req.level": "2"}, {"_nats.req.level": "1"},
                                          {"_nats.req.level": "0"}, {"_nats.req.level": "1", "k": "w"}]
    assert got["$JS.API.CONSUMER.CREATE.S.PA"]["_nats.req.level"] == "1"
    assert got["$JS.API.CONSUMER.CREATE.S.PG"]["_nats.req.level"] == "1"
    assert got["$JS.API.CONSUMER.CREATE.S.PH"] == {**dynamic, "_nats.req.level": "0", "x": "y"}
    assert got["$JS.API.CONSUMER.LIST.S"] == [{"_nats.req.level": "1"}, {"_nats.req.level": "1"},
                                              {"_nats.req.level": "0", "x": "y"}]


@needs_nats_server
def test_the_metadata_is_nats_servers(tmp_path):
    assert _answers("natserver", tmp_path) == _answers("nats-server", tmp_path, NATS_SERVER or "nats-server")


@pytest.mark.parametrize(("changes", "level"), [
    ({}, "0"), ({"allow_msg_ttl": True}, "1"), ({"subject_delete_marker_ttl": 10**9}, "1"),
    ({"allow_msg_counter": True}, "2"), ({"allow_msg_counter": True, "allow_msg_ttl": True}, "2"),
])
def test_stream_levels(changes, level):
    cfg = StreamConfig(name="S", metadata={"_nats.ver": "old", "_nats.level": "9", "a": "b"}, **changes)
    set_static_stream_metadata(cfg)
    assert cfg.metadata == {"a": "b", "_nats.req.level": level}


def test_consumer_levels_and_the_copy():
    cfg = ConsumerConfig(pause_until=FUTURE)
    set_static_consumer_metadata(cfg)
    assert cfg.metadata == {"_nats.req.level": "1"}
    cfg = ConsumerConfig(pause_until="0001-01-01T00:00:00Z")  # Go's zero time: not paused
    set_static_consumer_metadata(cfg)
    assert cfg.metadata == {"_nats.req.level": "0"}
    new = ConsumerConfig(metadata={"_nats.req.level": "0", "_nats.ver": "x"})
    copy_metadata(new, ConsumerConfig(metadata={"_nats.req.level": "1"}))
    assert new.metadata == {"_nats.req.level": "1"}
    copy_metadata(new, ConsumerConfig())  # (an old configuration without one: none)
    assert new.metadata is None
    assert metadata_json(None, False) is None
    assert metadata_json({"b": "1", "a": "2"}, True) == {
        "_nats.level": str(JS_API_LEVEL), "_nats.ver": SERVER_VERSION, "a": "2", "b": "1"}
