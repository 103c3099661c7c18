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
import json
import random
from pathlib import Path

import nats
import pytest

from natserver.jetstream import snapshot
from tests import reference
from tests.jetstream.legacy_reference import running
from tests.jetstream.recording import assert_recorded, record

RECORDED = Path(__file__).with_name("data") / "snapshot_nats_server_2.15.1.json"
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


def _serve(kind: str, tmp_path: Path):
    tmp_path.mkdir(exist_ok=True)
    if kind == "natserver":
        return running("natserver", JS_CONFIG % (tmp_path / "store"), tmp_path)
    return running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER)


def _round_trip(kind: str, storage: str, tmp_path: Path) -> None:
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
            # The restored consumer goes on after what it had delivered.
            js = nc.jetstream()
            sub = await js.pull_subscribe("S.>", durable="D", stream="S")
            got = await sub.fetch(1)
            delivered = before["consumers"]["D"]["delivered"]["stream_seq"]
            assert got[0].metadata.sequence.stream == (7 if delivered < 7 else delivered + 1)  # (5, 6 deleted)
            assert got[0].metadata.num_delivered == 1
        finally:
            await nc.close()

    with _serve(kind, tmp_path) as port:
        asyncio.run(asyncio.wait_for(main(port), TIMEOUT))


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_round_trip_natserver(tmp_path, storage):
    _round_trip("natserver", storage, tmp_path)


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
