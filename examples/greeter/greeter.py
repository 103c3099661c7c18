"""greeter: a tiny NATS service written with nats-py, tested with natserver's pytest plugin.

The service answers requests on ``greet.<name>`` with ``Hello, <name>!`` (a queue group, so
several instances share the load) and announces every greeting on ``greeter.greeted`` (JSON,
with a header). ``greet()`` is the client side. Run it against any NATS server::

    python greeter.py nats://127.0.0.1:4222
"""

from __future__ import annotations

import asyncio
import json
import sys

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

REQUESTS = "greet.*"
ANNOUNCEMENTS = "greeter.greeted"
QUEUE = "greeters"


class GreeterUnavailable(Exception):
    """Nobody answered the greeting request (no responders, or too late)."""


class Greeter:
    """The service; ``await start()`` subscribes, ``await stop()`` unsubscribes."""

    def __init__(self, nc: Client, greeting: str = "Hello") -> None:
        self.nc = nc
        self.greeting = greeting
        self.greeted = 0
        self._sub = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(REQUESTS, queue=QUEUE, cb=self._handle)
        # Make sure the server has the subscription when start() returns. Twice: nats-py
        # (2.16) writes flush()'s PING straight to the socket, so the PONG of the first can
        # come back before the SUB (still in nats-py's buffer) was even sent; the second
        # PING is written after the buffer was flushed.
        await self.nc.flush()
        await self.nc.flush()

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _handle(self, msg: Msg) -> None:
        name = msg.subject.split(".", 1)[1]
        await msg.respond(f"{self.greeting}, {name}!".encode())
        self.greeted += 1
        await self.nc.publish(ANNOUNCEMENTS, json.dumps({"name": name}).encode(), headers={"Greeter": self.greeting})


async def greet(nc: Client, name: str, timeout: float = 1.0) -> str:
    """Ask the service to greet ``name``; raises GreeterUnavailable if it does not answer."""
    try:
        reply = await nc.request(f"greet.{name}", b"", timeout=timeout)
    except nats.errors.NoRespondersError:
        raise GreeterUnavailable("no greeter is running") from None
    except nats.errors.TimeoutError:
        raise GreeterUnavailable(f"no answer within {timeout}s") from None
    return reply.data.decode()


async def connect(url: str, name: str, **options) -> Client:
    """A connection that keeps reconnecting (the service must survive server restarts)."""
    options.setdefault("max_reconnect_attempts", -1)
    return await nats.connect(url, name=name, **options)


async def main(url: str) -> None:
    nc = await connect(url, "greeter")
    greeter = Greeter(nc)
    await greeter.start()
    print(f"greeter listening on {REQUESTS} at {url}")
    try:
        await asyncio.Event().wait()
    finally:
        await nc.drain()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "nats://127.0.0.1:4222"))
