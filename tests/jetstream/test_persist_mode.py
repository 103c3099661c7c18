"""``persist_mode`` (nats-server 2.12): the configuration as nats-server 2.15.1 answers it
(``async`` and ``default``, the values it refuses and their Go errors, file storage and one
replica only, an update may not change it, reported in stream info only when async), and what
it does: an async stream's publish is acknowledged at once, before its write (a write that
fails does not hold the ack back), and is never fsynced before an ack even with
``sync_interval: always``; a default stream's ack waits for the write (and fsync). One script
runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/persist_mode_nats_server_2.15.1.json (``python -m tests.jetstream.test_persist_mode``
records it again); a live 2.15.1, when installed, must still give it. nats-py's own test
(JetStreamManagerTest::test_stream_persist_mode) runs against natserver and 2.15.1."""

from __future__ import annotations

import asyncio
import errno
import json
import sys
from pathlib import Path

import nats
import nats.js.api
import pytest

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.jetstream.test_nats_py_suite import target  # noqa: F401  (the fixture)

RECORDED = Path(__file__).with_name("data") / "persist_mode_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20


def _create(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], **config}


def _update(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", {"name": name, "subjects": [name.lower()], **config}


SCRIPT: list[tuple[str, str, dict]] = [
    ("async", *_create("A1", persist_mode="async")),
    ("default", *_create("A2", persist_mode="default")),
    ("empty", *_create("A3", persist_mode="")),
    ("unknown value", *_create("A4", persist_mode="bogus")),
    ("a number", *_create("A5", persist_mode=1)),
    ("another case", *_create("A6", persist_mode="ASYNC")),
    ("null", *_create("A7", persist_mode=None)),
    ("async on memory", *_create("A8", persist_mode="async", storage="memory")),
    ("async with 3 replicas", *_create("A9", persist_mode="async", num_replicas=3)),
    ("async, memory and 3 replicas", *_create("A10", persist_mode="async", storage="memory", num_replicas=3)),
    ("default on memory", *_create("A11", persist_mode="default", storage="memory")),
    ("info async", "$JS.API.STREAM.INFO.A1", {}),
    ("info default", "$JS.API.STREAM.INFO.A2", {}),
    ("create default again", *_create("A2")),
    ("update async to default", *_update("A1")),
    ("update async to default by name", *_update("A1", persist_mode="default")),
    ("update default to async", *_update("A2", persist_mode="async")),
    ("update async, another description", *_update("A1", persist_mode="async", description="d")),
    ("publish to async", "a1", {}),
    ("info async after it", "$JS.API.STREAM.INFO.A1", {}),
    # placement.preferred (2.12+), another field 2.15.1 refuses for a stream.
    ("placement preferred", *_create("P1", placement={"preferred": "x"})),
    ("placement preferred empty", *_create("P2", placement={"preferred": ""})),
    ("placement cluster and preferred", *_create("P3", placement={"cluster": "c", "preferred": "x"})),
    ("placement tags", *_create("P4", placement={"tags": ["t"]})),
]


def _normal(answer: str):
    """An error as it is; a stream by what this file is about (persist mode, storage,
    placement, description, its message count); a publish ack by its fields."""
    document = json.loads(answer)
    if "error" in document:
        return {"error": document["error"]}
    if "config" in document:
        config = document["config"]
        return {k: config.get(k) for k in ("name", "description", "storage", "persist_mode", "placement")} | {
            "messages": document["state"]["messages"]}
    return document


def run_script(port: int) -> dict:
    client = RawClient(port)
    return {name: [_normal(a) for a in client.request(subject, body)] for name, subject, body in SCRIPT}


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_nats_py_stream_persist_mode(target):  # noqa: F811
    """nats-py's JetStreamManagerTest::test_stream_persist_mode, as it is."""

    async def main():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="ASYNC", subjects=["test"], num_replicas=1, persist_mode=nats.js.api.PersistMode.ASYNC)
        sinfo = await js.stream_info("ASYNC")
        assert sinfo.config.persist_mode == nats.js.api.PersistMode.ASYNC
        await js.add_stream(name="DEFAULT_CONSISTENCY", subjects=["foo"], num_replicas=1,
                            persist_mode=nats.js.api.PersistMode.DEFAULT)
        sinfo = await js.stream_info("DEFAULT_CONSISTENCY")
        assert sinfo.config.persist_mode in [None, nats.js.api.PersistMode.DEFAULT]
        await js.add_stream(name="UNSET_CONSISTENCY", subjects=["bar"], num_replicas=1)
        sinfo = await js.stream_info("UNSET_CONSISTENCY")
        assert sinfo.config.persist_mode in [None, nats.js.api.PersistMode.DEFAULT]
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_async_with_atomic_batches_is_refused(target):  # noqa: F811
    """stream.go checkStreamCfg: async persistence can not take atomic batches (2.15.1's
    10052 and text, on both servers)."""

    async def main():
        nc = await nats.connect(target.url)
        body = {"name": "S", "subjects": ["s"], "persist_mode": "async", "allow_atomic": True}
        answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.S", json.dumps(body).encode(), timeout=2)).data)
        assert answer["error"] == {"code": 500, "err_code": 10052,
                                   "description": "async persist mode is not supported with atomic batch publish"}
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def _failing_flush(store):
    """The store's writes fail from now on, as on a full disk (the engine then sends no ack
    for what it could not write)."""

    def flush() -> None:
        raise OSError(errno.ENOSPC, "No space left on device (test)")

    store.flush = flush


def test_async_acks_before_the_write(threaded_server, tmp_path):
    """A default stream's ack waits for its write: with the disk failing, none comes (the
    publisher times out, nats-server's behaviour too). An async stream's ack goes at once."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ASYNC", subjects=["a"], persist_mode=nats.js.api.PersistMode.ASYNC)
            await js.add_stream(name="DEFAULT", subjects=["d"])
            engine = handle.server.jetstream
            for name in ("ASYNC", "DEFAULT"):
                _failing_flush(engine.streams[name].store)
            ack = await js.publish("a", b"1", timeout=TIMEOUT)
            assert (ack.stream, ack.seq) == ("ASYNC", 1)
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish("d", b"1", timeout=1)
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_async_is_never_fsynced_before_an_ack(threaded_server, tmp_path):
    """With sync_interval always, a default stream is fsynced before its acks, an async one
    not (stream.go: async persist "opts in to async flushing, sync always would also be
    disabled"), also after a reload sets the policy again."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"),
                             extra={"jetstream": {"sync_interval": "always"}})
    synced: list = []

    def counting(name, store):
        original = store.sync_targets

        def sync_targets():
            synced.append(name)
            return original()

        store.sync_targets = sync_targets

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ASYNC", subjects=["a"], persist_mode=nats.js.api.PersistMode.ASYNC)
            await js.add_stream(name="DEFAULT", subjects=["d"])
            engine = handle.server.jetstream
            for name in ("ASYNC", "DEFAULT"):
                counting(name, engine.streams[name].store)
            for i in range(3):
                await js.publish("a", b"%d" % i, timeout=TIMEOUT)
                await js.publish("d", b"%d" % i, timeout=TIMEOUT)
            assert "DEFAULT" in synced and "ASYNC" not in synced
            engine.set_sync("always")
            assert (engine.streams["ASYNC"].store.sync_always, engine.streams["DEFAULT"].store.sync_always) == (
                False, True)
            assert (await js.stream_info("ASYNC")).state.messages == 3
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_an_async_stream_keeps_its_mode_across_a_restart(threaded_server, tmp_path):
    """The mode is in the stream's configuration on disk; the messages acknowledged and
    written before a clean stop are there after it. (nats-server 2.15.1 answers a create
    request repeating an async stream's configuration with 10058, "already in use with a
    different configuration"; natserver returns the stream, as for any other configuration.)"""
    store_dir = str(tmp_path / "js")

    async def session(url: str, first: bool):
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            info = await js.add_stream(name="ASYNC", subjects=["a"], persist_mode=nats.js.api.PersistMode.ASYNC)
            assert info.config.persist_mode == nats.js.api.PersistMode.ASYNC
            if first:
                for i in range(5):
                    await js.publish("a", b"%d" % i, timeout=TIMEOUT)
            assert (await js.stream_info("ASYNC")).state.messages == 5
        finally:
            await nc.close()

    handle = threaded_server(jetstream=True, store_dir=store_dir)
    asyncio.run(asyncio.wait_for(session(handle.url, True), TIMEOUT))
    handle.stop()
    handle = threaded_server(jetstream=True, store_dir=store_dir)
    assert handle.server.jetstream.streams["ASYNC"].ack_at_once
    asyncio.run(asyncio.wait_for(session(handle.url, False), TIMEOUT))


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
    sys.exit(0)
