"""Stream settings of nats-server 2.10+ (issue #27 item 2): ``first_seq`` (the sequence of the
stream's first message; refused for mirrors, 10143; an update only changes the configuration),
as nats-server 2.15.1 answers them. One script runs against natserver and must give what was
recorded from nats-server 2.15.1 in data/stream_settings_nats_server_2.15.1.json
(``python -m tests.jetstream.test_stream_settings`` records it again); a live 2.15.1, when
installed, must still give it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
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
    ("S sourced", *_info("S")),
    ("memory stream first_seq 7", *_stream("MEM", subjects=["mem"], storage="memory", first_seq=7)),
    ("publish on MEM", "mem", b"m1"),
    ("first_seq negative", *_stream("B", subjects=["b"], first_seq=-1)),
    ("first_seq a string", *_stream("B", subjects=["b"], first_seq="5")),
    ("first_seq 0", *_stream("Z", subjects=["z"], first_seq=0)),
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
        return {"error": document["error"]}
    if "config" in document and "state" in document:
        config, state = document["config"], document["state"]
        return {"first_seq": config.get("first_seq"),
                "state": {k: state[k] for k in ("messages", "first_seq", "last_seq")}}
    if "message" in document:
        message = document["message"]
        return {"subject": message["subject"], "seq": message["seq"], "data": message.get("data")}
    if "seq" in document:
        return {"seq": document["seq"]}
    return document


def run_script(port: int) -> dict:
    client = _Client(port)
    return {name: [_normal(a) for a in client.request(subject, body)] for name, subject, body in SCRIPT}


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


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
