"""Stream backup and restore (snapshot.py): ``$JS.API.STREAM.SNAPSHOT`` / ``RESTORE``.

``Driver`` drives them as the ``nats`` CLI does (jsm.go snapshots.go): a snapshot request with
an inbox as ``deliver_subject``, every chunk with a reply acknowledged at once, the data
ended by an empty message (its status, when it has one, must be 204); a restore request with
the snapshot response's ``config`` and ``state``, the data sent in 64 KiB requests (each
waits for its ack), then an empty request answered with the stream info.

* round trips natserver -> natserver (file and memory streams, interior and trailing
  deletes, headers, consumers with pending and redelivered messages): every message byte
  for byte, the state and the consumers' state;
* the same driver against a live nats-server 2.15.1 (the protocol), and a natserver
  snapshot restored into 2.15.1 and a 2.15.1 snapshot restored into natserver;
* the errors, replayed from a script recorded from 2.15.1
  (``data/snapshot_nats_server_2.15.1.json``; ``python -m tests.jetstream.test_snapshot``
  records it again);
* flow control (the window, no acks: ``408 No Flow Response``) and an abandoned restore on
  the server's clock (trio's MockClock through natserver.testing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from pathlib import Path

import cramjam
import nats
import pytest

from natserver.jetstream import snapshot
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig
from natserver.protocol.varint import uvarint
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import assert_recorded, record

RECORDED = Path(__file__).with_name("data") / "snapshot_nats_server_2.15.1.json"
# A snapshot 2.15.1 took (S2 framing, with repeat copies), with what its stream held.
RECORDED_SNAPSHOT = Path(__file__).with_name("data") / "snapshot_from_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 30  # s, every test's bound
CLI_RESTORE_CHUNK = 64 * 1024  # jsm.go restoreSnapshot's chunk


class Driver:
    """The nats CLI's snapshot and restore (jsm.go createSnapshot / restoreSnapshot)."""

    def __init__(self, nc) -> None:
        self.nc = nc
        self.acked = 0

    async def request(self, subject: str, body: dict | bytes, timeout: float = 5) -> dict:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        msg = await self.nc.request(subject, data, timeout=timeout)
        return json.loads(msg.data)

    async def snapshot(self, stream: str, *, consumers: bool = True, chunk_size: int = 128 * 1024,
                       ack: bool = True, **extra) -> tuple[dict, bytes, str | None, list]:
        """(the response, the data, the final status or None, the chunks' replies)."""
        inbox = self.nc.new_inbox()
        chunks: list[bytes] = []
        replies: list[str] = []
        done: asyncio.Future = asyncio.get_running_loop().create_future()

        async def on_chunk(msg) -> None:
            if not msg.data:
                status = (msg.headers or {}).get("Status")
                if not done.done():
                    done.set_result(status)
                return
            replies.append(msg.reply)
            if msg.reply and ack:
                await msg.respond(b"")
            chunks.append(msg.data)

        sub = await self.nc.subscribe(inbox, cb=on_chunk)
        try:
            response = await self.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", {
                "deliver_subject": inbox, "no_consumers": not consumers, "chunk_size": chunk_size, **extra})
            if "error" in response:
                return response, b"", None, []
            status = await asyncio.wait_for(done, TIMEOUT)
        finally:
            await sub.unsubscribe()
        if status is not None and "204" not in status:
            return response, b"".join(chunks), status, replies
        return response, b"".join(chunks), status, replies

    async def restore(self, stream: str, meta: dict, data: bytes, chunk: int = CLI_RESTORE_CHUNK) -> dict:
        """The final answer (a stream_create_response), or the first error on the way."""
        response = await self.request(f"$JS.API.STREAM.RESTORE.{stream}",
                                      {"config": meta["config"], "state": meta["state"]})
        if "error" in response:
            return response
        deliver = response["deliver_subject"]
        for at in range(0, len(data), chunk):
            ack = await self.nc.request(deliver, data[at : at + chunk], timeout=5)
            if ack.data:
                return json.loads(ack.data)
        final = await self.nc.request(deliver, b"", timeout=TIMEOUT)
        return json.loads(final.data)


async def _connect(port: int):
    return await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0)


async def _fill(nc, name: str, storage: str) -> None:
    """A stream with headers, an interior and a trailing delete, two consumers (one with
    pending and redelivered messages)."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage)
    for i in range(30):
        await js.publish(f"{name}.{i % 4}", random.Random(i).randbytes(300 * (i % 5)) + b"%d" % i,
                         headers={"H": f"v{i}", "Nats-Msg-Id": f"id{i}"} if i % 3 == 0 else None)
    for seq in (5, 6, 30):
        await nc.request(f"$JS.API.STREAM.MSG.DELETE.{name}", json.dumps({"seq": seq}).encode())
    await js.add_consumer(name, durable_name="D", ack_policy="explicit", ack_wait=3600, max_deliver=5)
    await js.add_consumer(name, durable_name="F", filter_subject=f"{name}.1", ack_policy="explicit")
    sub = await js.pull_subscribe(f"{name}.>", durable="D", stream=name)
    msgs = await sub.fetch(4)
    await msgs[0].ack()
    await msgs[2].ack()
    await msgs[1].nak()
    for _ in range(6):  # (nats-server may deliver new messages before the nak'ed one)
        again = await sub.fetch(1)
        if again[0].metadata.num_delivered == 2:
            break
    else:
        raise AssertionError("the nak'ed message did not come again")


async def _contents(nc, name: str) -> dict:
    """Every message (seq -> subject, headers, data, time), the state and the consumers."""
    info = await Driver(nc).request(f"$JS.API.STREAM.INFO.{name}", {"deleted_details": True})
    state = info["state"]
    msgs = {}
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await Driver(nc).request(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
        msgs[seq] = got.get("message") or got["error"]["code"]
    consumers = {}
    for durable in ("D", "F"):
        ci = await Driver(nc).request(f"$JS.API.CONSUMER.INFO.{name}.{durable}", b"")
        consumers[durable] = {k: ci.get(k) for k in ("delivered", "ack_floor", "num_ack_pending",
                                                      "num_redelivered", "num_pending")}
        for part in ("delivered", "ack_floor"):
            consumers[durable][part].pop("last_active", None)
    state = {k: v for k, v in state.items() if k not in ("consumer_count",)}
    return {"state": state, "messages": msgs, "consumers": consumers, "config": info["config"]}


def _without_last_ts(before: dict, after: dict) -> None:
    """nats-server 2.15.1 does not restore the time of trailing deleted sequences (its
    SkipMsgs), so its last_ts after a restore is not the snapshot's; natserver keeps it."""
    before["state"].pop("last_ts")
    after["state"].pop("last_ts")


def _serve(kind: str, tmp_path: Path, config: str = JS_CONFIG):
    tmp_path.mkdir(exist_ok=True)
    if kind == "natserver":
        return running("natserver", config % (tmp_path / "store"), tmp_path)
    return running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER)


def _round_trip(kind: str, storage: str, tmp_path: Path, config: str = JS_CONFIG) -> None:
    """Fill, snapshot, delete, restore: everything is back, on ``kind`` of server."""
    async def main(port: int) -> None:
        nc = await _connect(port)
        try:
            await _fill(nc, "S", storage)
            before = await _contents(nc, "S")
            driver = Driver(nc)
            response, data, status, replies = await driver.snapshot("S", chunk_size=1024)
            assert response["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
            assert response["state"]["consumer_count"] == 2
            assert status == "204" and len(replies) > 2
            assert all(r.startswith("$JS.SNAPSHOT.ACK.S.") and r.endswith(f".1024.{i + 1}")
                       for i, r in enumerate(replies[:-1]))
            assert replies[-1] == ""  # the short last chunk
            magic = b"sNaPpY" if kind == "natserver" else b"S2sTwO"
            assert data.startswith(b"\xff\x06\x00\x00" + magic)
            await nc.request("$JS.API.STREAM.DELETE.S", b"")
            final = await driver.restore("S", response, data, chunk=700)
            assert final["type"] == "io.nats.jetstream.api.v1.stream_create_response"
            assert "error" not in final, final
            after = await _contents(nc, "S")
            if kind == "nats-server":
                _without_last_ts(before, after)
            for part in before:
                assert after[part] == before[part], part
            # Deduplication goes on (id27 is message 28's) on natserver, as after a restart;
            # 2.15.1 forgets the ids until it restarts.
            ack = await nc.jetstream().publish("S.3", b"again", headers={"Nats-Msg-Id": "id27"})
            if kind == "natserver":
                assert (ack.seq, ack.duplicate) == (28, True)
            else:
                assert (ack.seq, ack.duplicate) == (31, None)
            # The restored consumer goes on after what it had delivered.
            js = nc.jetstream()
            sub = await js.pull_subscribe("S.>", durable="D", stream="S")
            got = await sub.fetch(1)
            delivered = before["consumers"]["D"]["delivered"]["stream_seq"]
            assert got[0].metadata.sequence.stream == (7 if delivered < 7 else delivered + 1)  # (5, 6 deleted)
            assert got[0].metadata.num_delivered == 1
        finally:
            await nc.close()

    with _serve(kind, tmp_path, config) as port:
        asyncio.run(asyncio.wait_for(main(port), TIMEOUT))


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_round_trip_natserver(tmp_path, storage):
    _round_trip("natserver", storage, tmp_path)


def test_round_trip_natserver_encrypted(tmp_path):
    """An encrypted store: the snapshot holds the messages in the clear (as 2.15.1's), the
    restored stream is encrypted again."""
    _round_trip("natserver", "file", tmp_path, 'jetstream { store_dir: "%s", key: "s3cr3t" }\n')
    segments = list((tmp_path / "store").rglob("*.seg"))
    assert segments and not any(b"id27" in path.read_bytes() for path in segments)


@reference.needs_nats_server
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_the_driver_against_nats_server(tmp_path, storage):
    """The same driver and checks against 2.15.1: the protocol is its."""
    _round_trip("nats-server", storage, tmp_path)


def _across(source: str, target: str, storage: str, tmp_path: Path) -> None:
    """A snapshot taken on ``source`` restored into ``target``: the same messages, state
    and consumers (configurations differ by 2.9-vs-2.15 shape only, so are left out)."""
    async def take(port: int):
        nc = await _connect(port)
        try:
            await _fill(nc, "S", storage)
            response, data, status, _ = await Driver(nc).snapshot("S", chunk_size=4096)
            assert status == "204"
            return response, data, await _contents(nc, "S")
        finally:
            await nc.close()

    async def give(port: int, response: dict, data: bytes):
        nc = await _connect(port)
        try:
            final = await Driver(nc).restore("S", response, data)
            assert "error" not in final, final
            return await _contents(nc, "S")
        finally:
            await nc.close()

    with _serve(source, tmp_path / "a") as port:
        response, data, before = asyncio.run(asyncio.wait_for(take(port), TIMEOUT))
    with _serve(target, tmp_path / "b") as port:
        after = asyncio.run(asyncio.wait_for(give(port, response, data), TIMEOUT))
    if target == "nats-server":
        _without_last_ts(before, after)
    for part in ("state", "messages", "consumers"):
        assert after[part] == before[part], part


@reference.needs_nats_server
def test_natserver_snapshot_restores_into_nats_server(tmp_path):
    _across("natserver", "nats-server", "file", tmp_path)


@reference.needs_nats_server
def test_nats_server_snapshot_restores_into_natserver(tmp_path):
    _across("nats-server", "natserver", "file", tmp_path)


# -- the errors, recorded from 2.15.1 ------------------------------------------------------------

STALL = 6.0  # s: past 2.15.1's 5 s ack timeout and restore activity interval


def _error_or_kind(doc: dict):
    """An error as it is (Go's unmarshal text cut: natserver says "invalid JSON" alone);
    anything else by its type and keys."""
    if "error" in doc:
        error = dict(doc["error"])
        if error.get("err_code") == 10025:
            error["description"] = error["description"].split(":")[0]
        return {"error": error, "keys": sorted(doc)}
    return {"type": doc.get("type"), "keys": sorted(doc)}


async def _answer(nc, subject: str, body: bytes, timeout: float = 2) -> object:
    try:
        msg = await nc.request(subject, body, timeout=timeout)
    except nats.errors.NoRespondersError:
        return "no responders"
    except nats.errors.TimeoutError:
        return "timeout"
    if not msg.data:
        return "ack"
    return _error_or_kind(json.loads(msg.data))


async def _script(port: int, wait) -> dict:
    nc = await _connect(port)
    out: dict = {}
    events: list = []

    async def advisory(msg) -> None:
        kind = msg.subject.split(".")[4]
        if kind.startswith(("SNAPSHOT_", "RESTORE_")):
            doc = json.loads(msg.data)
            events.append([kind, doc["stream"], doc["type"], sorted(doc), doc.get("error"),
                           doc["client"] is not None and doc["client"]["acc"], doc.get("bytes", 0) > 0])

    await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.>", cb=advisory)
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(20):
            await js.publish(f"s.{i % 3}", random.Random(i).randbytes(400), headers={"I": str(i)})
        await js.add_consumer("S", durable_name="D", ack_policy="explicit")
        driver = Driver(nc)
        snap = "$JS.API.STREAM.SNAPSHOT."
        out["snapshot of a missing stream"] = await _answer(nc, snap + "NONE", b'{"deliver_subject":"x"}')
        out["snapshot, empty request"] = await _answer(nc, snap + "S", b"")
        out["snapshot, invalid JSON"] = await _answer(nc, snap + "S", b'{"deliver_subject":')
        out["snapshot without a deliver subject"] = await _answer(nc, snap + "S", b'{"no_consumers":true}')
        out["snapshot to a wildcard"] = await _answer(nc, snap + "S", b'{"deliver_subject":"a.>"}')
        response, data, status, replies = await driver.snapshot("S", consumers=False, chunk_size=10)
        out["snapshot without consumers, chunk size clamped"] = {
            "response": _error_or_kind(response), "consumer_count": response["state"]["consumer_count"],
            "first reply": replies[0].rsplit(".", 2)[1:], "last reply": replies[-1], "status": status}
        response, data, status, replies = await driver.snapshot("S")
        out["snapshot in one chunk"] = {"consumer_count": response["state"]["consumer_count"],
                                        "replies": replies, "status": status}

        # No acks: one chunk in flight (a window of one chunk), then 408 after the ack timeout.
        got: list = []
        inbox = nc.new_inbox()

        async def keep(msg) -> None:
            got.append([msg.reply != "", len(msg.data) > 0, (msg.headers or {}).get("Status"),
                        (msg.headers or {}).get("Description")])

        sub = await nc.subscribe(inbox, cb=keep)
        await nc.request(snap + "S", json.dumps({"deliver_subject": inbox, "chunk_size": 1024,
                                                 "window_size": 1024}).encode())
        await nc.flush()
        await wait(STALL)
        await nc.flush()
        await sub.unsubscribe()
        out["snapshot never acked"] = got

        # The receiver goes away: 408 No Interest (told by the advisory: nobody gets the end).
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        inbox = nc.new_inbox()

        async def once(msg) -> None:
            if not first.done():
                first.set_result(msg)

        sub = await nc.subscribe(inbox, cb=once)
        await nc.request(snap + "S", json.dumps({"deliver_subject": inbox, "chunk_size": 1024,
                                                 "window_size": 1024}).encode())
        chunk = await asyncio.wait_for(first, TIMEOUT)
        await sub.unsubscribe()
        await nc.flush()
        await chunk.respond(b"")
        await nc.flush()

        restore = "$JS.API.STREAM.RESTORE."
        meta = {"config": {"name": "C", "subjects": ["c.>"], "storage": "file"}, "state": response["state"]}
        out["restore, empty request"] = await _answer(nc, restore + "C", b"")
        out["restore, invalid JSON"] = await _answer(nc, restore + "C", b'{"config":')
        out["restore, another name"] = await _answer(nc, restore + "X", json.dumps(meta).encode())
        out["restore of an existing stream"] = await _answer(nc, restore + "S", json.dumps(
            {"config": {"name": "S", "subjects": ["s2.>"]}}).encode())
        out["restore, invalid configuration"] = await _answer(nc, restore + "N", json.dumps(
            {"config": {"name": "N", "subjects": ["n..x"]}}).encode())
        out["restore, subjects overlapping"] = await _answer(nc, restore + "N", json.dumps(
            {"config": {"name": "N", "subjects": ["s.>"]}}).encode())

        async def session(name: str) -> str:
            answer = await driver.request(restore + name, {"config": {"name": name, "subjects": [f"{name}.>"]}})
            assert answer["deliver_subject"].startswith(f"$JS.SNAPSHOT.RESTORE.{name}.")
            return answer["deliver_subject"]

        async def exists(name: str) -> bool:
            return "error" not in await driver.request(f"$JS.API.STREAM.INFO.{name}", b"")

        deliver = await session("G")
        out["restore, garbage"] = [await _answer(nc, deliver, b"garbage, not a snapshot"),
                                   await _answer(nc, deliver, b""), await exists("G")]
        answer = await driver.request(restore + "R", {"config": {"name": "R", "subjects": ["r.>"], "num_replicas": 3}})
        deliver = answer["deliver_subject"]
        out["restore of three replicas"] = [_error_or_kind(answer), await _answer(nc, deliver, data),
                                            await _answer(nc, deliver, b""), await exists("R")]
        deliver = await session("E")
        out["restore, nothing"] = [await _answer(nc, deliver, b""), await exists("E")]
        deliver = await session("T")
        out["restore, truncated"] = [await _answer(nc, deliver, data[: len(data) // 2]),
                                     await _answer(nc, deliver, b""), await exists("T")]
        deliver = await session("W")
        await js.add_stream(name="W", subjects=["w.>"])
        out["restore of a stream created meanwhile"] = [await _answer(nc, deliver, data), await exists("W")]
        deliver = await session("A")
        first = await _answer(nc, deliver, data[:1024])
        await wait(STALL)
        out["restore abandoned"] = [first, await _answer(nc, deliver, data[1024:]), await exists("A")]

        final = await driver.restore("C", meta, data)
        info = await driver.request("$JS.API.CONSUMER.INFO.C.D", b"")
        out["restore"] = {"answer": _error_or_kind(final),
                          "state": {k: final["state"][k] for k in ("messages", "first_seq", "last_seq",
                                                                   "consumer_count")},
                          "consumer": {k: info[k] for k in ("num_pending", "num_ack_pending")}}
        out["restore of a stream now existing"] = await _answer(nc, restore + "C", json.dumps(meta).encode())
        await nc.flush()
        out["advisories"] = sorted(events)
    finally:
        await nc.close()
    return out


def _natserver_run(tmp_path: Path) -> dict:
    from natserver.testing import NatsServer

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        async def wait(seconds: float) -> None:
            await asyncio.get_running_loop().run_in_executor(None, server.advance, seconds)

        return asyncio.run(asyncio.wait_for(_script(server.port, wait), TIMEOUT))


def _nats_server_run(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_script(port, asyncio.sleep), TIMEOUT))


def test_errors_as_nats_server(tmp_path):
    assert_recorded(_natserver_run(tmp_path), RECORDED)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER) as port:
        assert_recorded(_nats_server_run(port), RECORDED)


# -- account and server limits, recorded from 2.15.1 ------------------------------------------------

LIMITS_RECORDED = Path(__file__).with_name("data") / "snapshot_limits_nats_server_2.15.1.json"
LIMITS_CONFIG = """jetstream { store_dir: "%s" }
accounts {
  A: { jetstream: { max_file: 20000, max_mem: 20000 }, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
}
"""


async def _limits_script(port: int) -> dict:
    """A 31 KB stream of account B restored into account A, whose limits are 20 KB."""
    nb = await nats.connect(f"nats://b:b@127.0.0.1:{port}", allow_reconnect=False)
    na = await nats.connect(f"nats://a:a@127.0.0.1:{port}", allow_reconnect=False)
    out: dict = {}
    try:
        js = nb.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(30):
            await js.publish("s.x", random.Random(i).randbytes(1000))
        response, data, _, _ = await Driver(nb).snapshot("S")
        driver = Driver(na)
        out["file, over the account's limit"] = [_error_or_kind(await driver.restore("S", response, data)),
                                                 _error_or_kind(await driver.request("$JS.API.STREAM.INFO.S", b""))]
        config = {**response["config"], "max_bytes": 50000}
        out["max_bytes over the account's limit"] = _error_or_kind(await driver.request(
            "$JS.API.STREAM.RESTORE.S", {"config": config, "state": response["state"]}))
        config = {**response["config"], "storage": "memory"}
        out["memory, over the account's limit"] = _error_or_kind(await driver.restore(
            "S", {"config": config, "state": response["state"]}, data))
        # A snapshot whose state.json understates its bytes: the limits stop it as it grows.
        entries = snapshot.ArchiveReader().feed(snapshot.FrameReader().feed(data))
        state = json.loads(entries[0][4])
        liar = [(b"state.json", entries[0][1], 0, b"", json.dumps({**state, "bytes": 0}).encode())]
        liar += [(name, ts, seq, body[:hs], body[hs:]) for name, ts, seq, hs, body in entries[1:]]
        liar_data = bytes(cramjam.snappy.compress(_archive(liar)))
        out["understated bytes over the account's limit"] = _error_or_kind(await driver.restore(
            "S", {"config": response["config"], "state": response["state"]}, liar_data))
        out["into the account that has it"] = _error_or_kind(await Driver(nb).request(
            "$JS.API.STREAM.RESTORE.S", {"config": response["config"], "state": response["state"]}))
    finally:
        await na.close()
        await nb.close()
    return out


def _limits_run(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_limits_script(port), TIMEOUT))


def test_limits_as_nats_server(tmp_path):
    with running("natserver", LIMITS_CONFIG % (tmp_path / "store"), tmp_path) as port:
        assert_recorded(_limits_run(port), LIMITS_RECORDED)


@reference.needs_nats_server
def test_the_limits_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", LIMITS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER) as port:
        assert_recorded(_limits_run(port), LIMITS_RECORDED)


# -- a 2.15.1 snapshot, replayed ------------------------------------------------------------------


async def _take(port: int) -> dict:
    """A snapshot of a stream with repetitive payloads (S2 encodes repeats), deletes and
    consumers, with the stream's contents."""
    nc = await _connect(port)
    try:
        await _fill(nc, "S", "file")
        js = nc.jetstream()
        for i in range(40):
            await js.publish(f"S.{i % 2}", b"abcdefgh" * (50 + i) + b"%d" % i)
        response, data, status, _ = await Driver(nc).snapshot("S")
        assert status is None or status == "204"
        return {"response": response, "data": base64.b64encode(data).decode(),
                "contents": await _contents(nc, "S")}
    finally:
        await nc.close()


def _record_snapshot() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", JS_CONFIG % folder, Path(folder), binary=reference.NATS_SERVER) as port:
        RECORDED_SNAPSHOT.write_text(json.dumps(asyncio.run(_take(port)), indent=1) + "\n")
    print(f"wrote {RECORDED_SNAPSHOT}")


def test_a_recorded_nats_server_snapshot_restores(tmp_path):
    """2.15.1's snapshot (S2 blocks with repeat copies, decoded by s2_decode_block) restored
    into natserver: every message, the state and the consumers as 2.15.1 had them."""
    recorded = json.loads(RECORDED_SNAPSHOT.read_text())
    data = base64.b64decode(recorded["data"])
    assert data.startswith(b"\xff\x06\x00\x00S2sTwO")

    async def main(port: int) -> dict:
        nc = await _connect(port)
        try:
            final = await Driver(nc).restore("S", recorded["response"], data)
            assert "error" not in final, final
            return await _contents(nc, "S")
        finally:
            await nc.close()

    with _serve("natserver", tmp_path) as port:
        after = asyncio.run(asyncio.wait_for(main(port), TIMEOUT))
    before = recorded["contents"]
    after["messages"] = {str(seq): msg for seq, msg in after["messages"].items()}  # (as JSON keeps them)
    for part in ("state", "messages", "consumers"):
        assert after[part] == before[part], part


if __name__ == "__main__":
    record(_nats_server_run, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
    record(_limits_run, LIMITS_CONFIG, LIMITS_RECORDED, binary=reference.NATS_SERVER)
    _record_snapshot()


def test_a_v1_snapshot_is_refused(tmp_path):
    """Snapshots before 2.15 were a tar of the store directory (nats-server's own files):
    natserver refuses them at the end, as any archive it can not read, and keeps nothing."""
    import io
    import tarfile

    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        meta = json.dumps({"name": "V", "subjects": ["v.>"]}).encode()
        info = tarfile.TarInfo("meta.inf")
        info.size = len(meta)
        archive.addfile(info, io.BytesIO(meta))
    data = bytes(cramjam.snappy.compress(tar.getvalue()))

    async def main(port: int) -> None:
        nc = await _connect(port)
        try:
            meta = {"config": {"name": "V", "subjects": ["v.>"]}, "state": {}}
            final = await Driver(nc).restore("V", meta, data)
            assert final["error"] == {"code": 500, "err_code": 10062,
                                      "description": "restore failed: archive: invalid archive stream"}
            info = await Driver(nc).request("$JS.API.STREAM.INFO.V", b"")
            assert info["error"]["err_code"] == 10059
        finally:
            await nc.close()

    with _serve("natserver", tmp_path) as port:
        asyncio.run(asyncio.wait_for(main(port), TIMEOUT))


# -- the pieces ----------------------------------------------------------------------------------


def _archive(entries) -> bytes:
    parts = [snapshot.MAGIC]
    for name, ts, seq, hdr, data in entries:
        parts.append(snapshot.entry_header(name, ts, seq, len(hdr), len(data)) + hdr + data)
    return b"".join(parts)


def test_archive_reader_whole_and_byte_by_byte():
    """archive.Reader's entries, however the bytes arrive (h11's three ways)."""
    entries = [(b"state.json", 5, 0, b"", b"{}"), (b"a.b", -7, 3, b"NATS/1.0\r\n\r\n", b"x" * 300),
               (b"c", 1 << 62, 1 << 40, b"", b""), (b"", 0, 0, b"", b"")]
    raw = _archive(entries)
    expected = [(name, ts, seq, len(hdr), hdr + data) for name, ts, seq, hdr, data in entries]
    assert snapshot.ArchiveReader().feed(raw) == expected
    reader = snapshot.ArchiveReader()
    got = []
    for i in range(len(raw)):
        got += reader.feed(raw[i : i + 1])
    assert got == expected
    reader = snapshot.ArchiveReader()
    assert reader.feed(raw + b"\x05") == expected and reader.buf == bytearray(b"\x05")
    with pytest.raises(snapshot.ArchiveError, match="invalid archive stream"):
        snapshot.ArchiveReader().feed(b"NATSARC2" + raw[8:])


def test_frame_reader_snappy_and_s2_in_pieces():
    """natserver's snappy framing and 2.15.1's S2 framing (a recorded snapshot whose block
    uses S2's repeat copies, which snappy decoders refuse), whole or in 1000-byte pieces."""
    raw = _archive([(b"state.json", 1, 0, b"", b"{}")] * 50)
    ours = bytes(cramjam.snappy.compress(raw))
    theirs = base64.b64decode(json.loads(RECORDED_SNAPSHOT.read_text())["data"])
    for data in (ours, theirs):
        whole = snapshot.FrameReader().feed(data)
        assert whole.startswith(snapshot.MAGIC)
        reader = snapshot.FrameReader()
        assert b"".join(reader.feed(data[i : i + 1000]) for i in range(0, len(data), 1000)) == whole
    assert snapshot.FrameReader().feed(ours) == raw
    # A block declaring more than S2's 4 MiB is refused before anything is allocated.
    bomb = b"\x00\x00\x00\x00" + uvarint(1 << 30) + b"\x00a"
    with pytest.raises(snapshot.ArchiveError, match="s2: corrupt input"):
        snapshot.FrameReader().feed(b"\xff\x06\x00\x00S2sTwO\x00" + len(bomb).to_bytes(3, "little") + bomb)
    broken = bytearray(theirs)
    broken[-1] ^= 1  # (the block's last byte: the checksum no longer matches, or it no longer decodes)
    with pytest.raises(snapshot.ArchiveError, match="s2: corrupt input"):
        snapshot.FrameReader().feed(bytes(broken))


class _Stream:
    """What SnapshotSender reads of a stream."""

    def __init__(self, store) -> None:
        self.store = store
        self.name = "S"
        self.consumers: dict = {}

    def state_json(self) -> dict:
        return {"messages": self.store.msgs, "first_seq": self.store.first_seq, "last_seq": self.store.last_seq}


def test_a_snapshot_turn_produces_a_bounded_amount():
    """A big stream is archived TURN_BYTES (plus one message) a turn, so that its snapshot
    goes out between other clients' turns; what comes out is the whole stream."""
    store = MemoryStore(StreamConfig.from_json({"name": "S", "subjects": ["s"]}))
    size = 10_000
    for i in range(200):
        store.store_msg(b"s", b"", bytes([i]) * size, i + 1)
    sender = snapshot.SnapshotSender(None, _Stream(store), "x", False, 0, 0)  # type: ignore[arg-type]
    turns = 0
    while not sender.done:
        before = sender.next_seq
        sender._produce()
        turns += 1
        assert (sender.next_seq - before) * size <= snapshot.TURN_BYTES + size
    assert turns >= 200 * size // (snapshot.TURN_BYTES + size)
    entries = snapshot.ArchiveReader().feed(snapshot.FrameReader().feed(bytes(sender.out)))
    assert [e[2] for e in entries[1:-1]] == list(range(1, 201))
    assert all(e[4] == bytes([e[2] - 1]) * size for e in entries[1:-1])


def test_the_window_and_the_ack_timeout(tmp_path):
    """window_size / chunk_size chunks go unacked; each ack lets one more go; no ack for the
    ack timeout (the server's clock moved) ends the snapshot with 408 No Flow Response."""
    from natserver.testing import NatsServer

    async def main(server) -> None:
        nc = await _connect(server.port)
        try:
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s"])
            for i in range(40):
                await js.publish("s", random.Random(i).randbytes(1000))
            got: list = []
            inbox = nc.new_inbox()

            async def keep(msg) -> None:
                got.append(msg)

            await nc.subscribe(inbox, cb=keep)
            await nc.request("$JS.API.STREAM.SNAPSHOT.S", json.dumps(
                {"deliver_subject": inbox, "chunk_size": 2048, "window_size": 8192}).encode())
            for _ in range(50):
                await nc.flush()
                if len(got) >= 4:
                    break
            await nc.flush()
            assert [m.reply.rsplit(".", 2)[1:] for m in got] == [["2048", str(i)] for i in (1, 2, 3, 4)]
            await got[0].respond(b"")
            await got[1].respond(b"")
            for _ in range(50):
                await nc.flush()
                if len(got) >= 6:
                    break
            assert len(got) == 6
            await asyncio.get_running_loop().run_in_executor(None, server.advance, snapshot.ACK_TIMEOUT + 1)
            for _ in range(50):
                await nc.flush()
                if len(got) >= 7:
                    break
            assert len(got) == 7 and got[6].data == b""
            assert got[6].headers == {"Status": "408", "Description": "No Flow Response"}
        finally:
            await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))


async def test_a_big_chunk_is_applied_a_turn_at_a_time(start_server, raw_connect, tmp_path, monkeypatch):
    """A chunk that decompresses to 4 MB of messages is applied TURN_BYTES a turn: at each of
    the restore's checkpoints (where other clients get their turn) at most a turn's worth
    more is written; the chunk is acked once all of it is."""
    import trio

    count, size = 1000, 4096
    state = {"messages": count, "bytes": 0, "first_seq": 1, "last_seq": count, "consumer_count": 0}
    entries = [(b"state.json", 1, 0, b"", json.dumps(state).encode())]
    entries += [(b"r.x", i + 1, i + 1, b"", bytes(size)) for i in range(count)]
    entries.append((b"", 0, 0, b"", b""))
    data = bytes(cramjam.snappy.compress(_archive(entries)))
    assert len(data) < 1024 * 1024 and count * size // snapshot.TURN_BYTES >= 8

    written: list[int] = []  # messages written at each checkpoint of snapshot.py's tasks

    class Checkpoints:
        def __getattr__(self, name):
            return getattr(trio, name)

        async def sleep(self, seconds: float) -> None:
            streams = server.jetstream.streams
            written.append(streams["R"].store.msgs if "R" in streams else 0)
            await trio.sleep(seconds)

    monkeypatch.setattr(snapshot, "trio", Checkpoints())
    with trio.fail_after(TIMEOUT):
        server = await start_server(jetstream=True, store_dir=str(tmp_path / "js"))
        client = await raw_connect(server)
        await client.read_info()
        await client.send(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R 1\r\n')
        body = json.dumps({"config": {"name": "R", "subjects": ["r.>"]}}).encode()
        await client.send(b"PUB $JS.API.STREAM.RESTORE.R _R %d\r\n%s\r\n" % (len(body), body))
        line = await client.read_until(b"\r\n")
        answer = json.loads((await client.read_exactly(int(line.split()[-1]) + 2))[:-2])
        deliver = answer["deliver_subject"].encode()
        await client.send(b"PUB %s _R %d\r\n%s\r\n" % (deliver, len(data), data))
        line = await client.read_until(b"\r\n")
        assert line.startswith(b"MSG _R 1 0")  # the ack: empty
    assert server.jetstream.streams["R"].store.msgs == count
    per_turn = snapshot.TURN_BYTES // size + 1
    assert len(written) >= count // per_turn
    assert all(0 <= b - a <= per_turn for a, b in zip(written, written[1:]))
