"""nats-py (asyncio) side of the mixed-cluster test, run in a thread with its own loop."""

from __future__ import annotations

import asyncio

import nats

STEP_TIMEOUT = 10.0


def discover_and_failover(natserver_port: int, nats_server_port: int, nats_server_process) -> dict:
    return asyncio.run(asyncio.wait_for(_run(natserver_port, nats_server_port, nats_server_process), 30))


async def _run(natserver_port: int, nats_server_port: int, nats_server_process) -> dict:
    received: list[bytes] = []
    got = asyncio.Event()
    reconnected = asyncio.Event()

    async def on_msg(msg) -> None:
        received.append(msg.data)
        got.set()

    async def on_reconnect() -> None:
        reconnected.set()

    publisher = await nats.connect(f"nats://127.0.0.1:{natserver_port}", allow_reconnect=False)
    discovered = [f"nats://{url.hostname}:{url.port}" for url in publisher.discovered_servers]
    subscriber = await nats.connect(f"nats://127.0.0.1:{nats_server_port}", reconnected_cb=on_reconnect,
                                    reconnect_time_wait=0.1, max_reconnect_attempts=50)
    await subscriber.subscribe("t", cb=on_msg)
    await subscriber.flush()
    # Until the natserver has the interest (no timing assumption: retry the publish).
    for _ in range(100):
        await publisher.publish("t", b"over-the-route")
        await publisher.flush()
        try:
            await asyncio.wait_for(got.wait(), 0.1)
            break
        except asyncio.TimeoutError:
            continue
    del received[1:]
    nats_server_process.stop()
    await asyncio.wait_for(reconnected.wait(), STEP_TIMEOUT)
    await subscriber.flush()
    got.clear()
    await publisher.publish("t", b"after-failover")
    await publisher.flush()
    await asyncio.wait_for(got.wait(), STEP_TIMEOUT)
    await subscriber.close()
    await publisher.close()
    return {"discovered": discovered[0] if discovered else "", "received": received}


def lame_duck_moves(port: int, other_port: int, enter_lame_duck) -> dict:
    """nats-py on one node (``port``) while it enters lame duck mode (``enter_lame_duck()``,
    called from this thread): it is told (lame_duck_mode_cb), then moves to the other node."""
    return asyncio.run(asyncio.wait_for(_lame_duck(port, other_port, enter_lame_duck), 30))


async def _lame_duck(port: int, other_port: int, enter_lame_duck) -> dict:
    told = asyncio.Event()
    reconnected = asyncio.Event()

    async def on_lame_duck() -> None:
        told.set()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(f"nats://127.0.0.1:{port}", lame_duck_mode_cb=on_lame_duck, reconnected_cb=on_reconnect,
                            reconnect_time_wait=0.05, max_reconnect_attempts=100, dont_randomize=True)
    try:
        discovered = sorted(url.port for url in nc.discovered_servers)
        enter_lame_duck()
        await asyncio.wait_for(told.wait(), STEP_TIMEOUT)
        await asyncio.wait_for(reconnected.wait(), STEP_TIMEOUT)
        sub = await nc.subscribe("after.move")
        await nc.publish("after.move", b"still here")
        msg = await sub.next_msg(timeout=STEP_TIMEOUT)
        return {"discovered": discovered, "connected_port": nc.connected_url.port, "got": msg.data}
    finally:
        await nc.close()
