"""Mirrors and sources survive ``kill -9``: a flood of publishes into an origin stream while a
mirror and a sourcing stream copy it, the server killed in the middle, restarted on the same
store directory, more publishes; then the mirror holds exactly the origin's messages (same
sequences) and the sourcing stream each origin message exactly once (by its
``Nats-Stream-Source`` header), with no gap.
"""

from __future__ import annotations

import asyncio
import os

import nats
import pytest

from .test_jetstream_crash import DEADLINE, Proc

FLOOD_SECONDS = 0.5
WINDOW = 100  # publishes in flight


async def _setup(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    jsm = nc.jsm()
    await jsm.add_stream(name="O", subjects=["o.*"])
    await nc.request("$JS.API.STREAM.CREATE.M", b'{"name":"M","mirror":{"name":"O"}}', timeout=5)
    await nc.request("$JS.API.STREAM.CREATE.S", b'{"name":"S","sources":[{"name":"O","filter_subject":"o.a"}]}',
                     timeout=5)
    await nc.close()


async def _flood(port: int, seconds: float) -> None:
    """Publish (acked, WINDOW at a time) until the time is up or the server goes away."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    js = nc.jetstream()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    i = 0
    try:
        while loop.time() < end:
            batch = [js.publish("o.a" if (i + k) % 4 else "o.b", b"%d" % (i + k), timeout=5) for k in range(WINDOW)]
            i += WINDOW
            await asyncio.gather(*batch)
    except Exception:  # the kill: publishes in flight fail
        pass
    finally:
        try:
            await nc.close()
        except Exception:
            pass


async def _check(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    js, jsm = nc.jetstream(), nc.jsm()
    await js.publish("o.a", b"after")
    origin = await jsm.stream_info("O")
    n_a = 0
    for seq in range(1, origin.state.last_seq + 1):
        n_a += (await jsm.get_msg("O", seq)).subject == "o.a"
    while (await jsm.stream_info("M")).state.messages < origin.state.messages:
        await asyncio.sleep(0.02)
    while (await jsm.stream_info("S")).state.messages < n_a:
        await asyncio.sleep(0.02)
    mirror = await jsm.stream_info("M")
    assert (mirror.state.first_seq, mirror.state.last_seq, mirror.state.messages) == \
           (1, origin.state.last_seq, origin.state.messages)
    for seq in (1, origin.state.last_seq // 2 + 1, origin.state.last_seq):
        a, b = await jsm.get_msg("O", seq), await jsm.get_msg("M", seq)
        assert (a.subject, a.data, a.time) == (b.subject, b.data, b.time)
    sourced = await jsm.stream_info("S")
    assert sourced.state.messages == n_a  # none twice, none lost
    seen = []
    for seq in range(1, sourced.state.last_seq + 1):
        seen.append(int((await jsm.get_msg("S", seq)).headers["Nats-Stream-Source"].split()[1]))
    assert seen == sorted(set(seen)) and len(seen) == n_a
    await nc.close()


@pytest.mark.skipif(os.name != "posix", reason="kill -9")
def test_kill_9_while_mirroring_and_sourcing(tmp_path):
    store = tmp_path / "store"
    server = Proc("natserver", store)
    try:
        asyncio.run(asyncio.wait_for(_setup(server.port), DEADLINE))

        async def flood_then_kill():
            task = asyncio.ensure_future(_flood(server.port, FLOOD_SECONDS * 4))
            await asyncio.sleep(FLOOD_SECONDS)
            server.kill()
            await task

        asyncio.run(asyncio.wait_for(flood_then_kill(), DEADLINE))
    finally:
        server.stop()
    server = Proc("natserver", store)
    try:
        asyncio.run(asyncio.wait_for(_check(server.port), DEADLINE * 2))
    finally:
        server.stop()
