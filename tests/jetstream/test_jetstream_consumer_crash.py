"""Crash safety of durable consumers: a pull consumer acks a file stream while the server
is killed with -9; after a restart on the same store directory the durable is there and
every message that was not acked before the kill is delivered (some acked ones may come
again: at-least-once, as nats-server)."""

from __future__ import annotations

import asyncio

import nats
import pytest

from tests.jetstream.test_jetstream_crash import Proc

N = 300
DEADLINE = 30


async def _connect(port: int):
    return await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=5)


async def _before_kill(proc: Proc) -> set:
    nc = await _connect(proc.port)
    js = nc.jetstream()
    await js.add_stream(name="C", subjects=["c"])
    for i in range(N):
        await js.publish("c", b"%d" % i)
    sub = await js.pull_subscribe("c", "dur", config=nats.js.api.ConsumerConfig(ack_wait=1))
    acked: set = set()
    while len(acked) < N // 2:
        for m in await sub.fetch(10, timeout=5):
            await m.ack_sync()
            acked.add(int(m.data))
    await asyncio.sleep(1.2)  # a snapshot (at most 1 s apart) holds those acks
    # Delivered, not acked, when the kill comes.
    await sub.fetch(10, timeout=5)
    proc.kill()
    await nc.close()
    return acked


async def _after_restart(proc: Proc) -> tuple[set, int]:
    nc = await _connect(proc.port)
    js = nc.jetstream()
    info = await js.consumer_info("C", "dur")
    sub = await js.pull_subscribe("c", "dur")
    got: set = set()
    misses = 0
    while misses < 2:
        try:
            msgs = await sub.fetch(50, timeout=1.5)
        except nats.errors.TimeoutError:
            misses += 1
            continue
        for m in msgs:
            await m.ack_sync()
            got.add(int(m.data))
    await nc.close()
    return got, info.ack_floor.stream_seq


@pytest.mark.parametrize("round_", range(2))
def test_kill_9_skips_no_unacked_message(tmp_path, round_):
    store = tmp_path / "store"
    store.mkdir()
    proc = Proc("natserver", store)
    try:
        acked = asyncio.run(asyncio.wait_for(_before_kill(proc), DEADLINE))
    finally:
        proc.kill()
    proc = Proc("natserver", store)
    try:
        got, floor = asyncio.run(asyncio.wait_for(_after_restart(proc), DEADLINE))
    finally:
        proc.kill()
    assert acked | got == set(range(N))  # nothing unacked skipped
    assert floor > 0  # the durable's position came back (a snapshot is at most 1 s old)
