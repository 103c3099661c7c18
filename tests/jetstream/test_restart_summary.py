"""A restart from the index files' summaries (issue #34: a 1 M-message stream ready in
<= 0.5 s): the server answers from the summaries while the arrays are read, and everything
that needs them (a read by sequence or subject, a consumer, a publish) is served as after a
full read. The store's own cases (files missing, stale, torn, damaged after the start; a
publish while loading) are in test_jetstream_store_index.py."""

from __future__ import annotations

import asyncio
import json
import os

import nats
import pytest

from natserver.jetstream import JetStream
from natserver.jetstream import store as store_module
from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig, check_stream_config

TIMEOUT = 30.0  # each client script, on a loaded machine
MSGS = 1500
SUBJECTS = 5


def fill_on_disk(store_dir: str) -> str:
    """The stream R's messages written by the store itself (several segments with index
    files, and records after the last checkpoint), then a crash; its directory."""
    path = os.path.join(store_dir, "jetstream", "$G", "streams", "R")
    cfg = check_stream_config(StreamConfig(name="R", subjects=["r.>"]), {})
    store = FileStore(path, cfg, segment_size=8000)
    for i in range(MSGS):
        store.store_msg(b"r.%d" % (i % SUBJECTS), b"", b"%06d" % i, 1_000 + i)
        if i % 40 == 39:
            store.flush()
    store.flush()
    for fd in store.fds.values():  # kill -9
        os.close(fd)
    store.fds.clear()
    store.closed = True
    return path


async def create(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.jetstream().add_stream(name="R", subjects=["r.>"])
    finally:
        await nc.close()


def check_message(msg, seq: int) -> None:
    assert (msg.seq, msg.subject, msg.data) == (seq, "r.%d" % ((seq - 1) % SUBJECTS), b"%06d" % (seq - 1))


@pytest.fixture
def small_checkpoints(monkeypatch):
    monkeypatch.setattr(store_module, "CHECKPOINT_BYTES", 2000)


def restarted(threaded_server, tmp_path):
    """A server on the store filled on disk, and R's store in it."""
    store_dir = str(tmp_path / "js")
    handle = threaded_server(jetstream=True, store_dir=store_dir)
    asyncio.run(asyncio.wait_for(create(handle.url), TIMEOUT))
    handle.stop()
    fill_on_disk(store_dir)
    handle = threaded_server(jetstream=True, store_dir=store_dir)
    return handle, handle.server.jetstream.streams["R"].store


def test_info_from_the_summaries_then_reads_load_the_arrays(threaded_server, tmp_path, small_checkpoints, monkeypatch):
    async def no_background_load(self) -> None:
        return None

    monkeypatch.setattr(JetStream, "_load_indexes", no_background_load)  # (on first need only)
    handle, store = restarted(threaded_server, tmp_path)
    assert store.loading

    async def script(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            reply = await nc.request("$JS.API.STREAM.INFO.R", b"", timeout=10)
            state = json.loads(reply.data)["state"]
            assert {k: state[k] for k in ("messages", "first_seq", "last_seq", "num_subjects", "first_ts")} == {
                "messages": MSGS, "first_seq": 1, "last_seq": MSGS, "num_subjects": SUBJECTS,
                "first_ts": "1970-01-01T00:00:00.000001Z"}
            assert state["bytes"] == MSGS * store_module._msg_size(3, 0, 6)
            assert store.loading  # (answered from the summaries)
            check_message(await js.get_msg("R", 777), 777)
            assert not store.loading
            check_message(await js.get_last_msg("R", "r.3"), MSGS - 1)
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(script(handle.url), TIMEOUT))


@pytest.mark.parametrize("first", ["publish", "consumer", "last-by-subject"])
def test_the_first_request_after_a_restart(threaded_server, tmp_path, small_checkpoints, first):
    """Whatever comes first, while the background load may still be on, is answered as
    after a full read; a publish goes after the recovered messages."""
    handle, store = restarted(threaded_server, tmp_path)

    async def script(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            if first == "publish":
                ack = await js.publish("r.new", b"new")
                assert ack.seq == MSGS + 1
                last = await js.get_last_msg("R", "r.new")
                assert (last.seq, last.data) == (MSGS + 1, b"new")
            elif first == "consumer":
                sub = await js.pull_subscribe("r.>", durable="d", stream="R")
                msgs = await sub.fetch(25, timeout=10)
                assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 26))
                assert [m.data for m in msgs] == [b"%06d" % i for i in range(25)]
            else:
                check_message(await js.get_last_msg("R", "r.0"), MSGS - SUBJECTS + 1)
            check_message(await js.get_msg("R", MSGS), MSGS)
            info = await js.stream_info("R")
            expected = MSGS + (first == "publish")
            assert (info.state.messages, info.state.last_seq) == (expected, expected)
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(script(handle.url), TIMEOUT))
    assert not store.loading
