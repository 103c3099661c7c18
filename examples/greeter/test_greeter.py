"""Tests of the greeter service, written against natserver's pytest plugin only.

``pip install ../.. nats-py pytest`` (from a checkout; natserver is not on PyPI) is all they
need: the ``nats_server`` fixture is a real NATS server (in-process, on a random port), so
there is no binary to download and no Docker. The tests are plain functions that run their asyncio code with ``asyncio.run``, so
they need no async pytest plugin either.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from greeter import ANNOUNCEMENTS, Greeter, GreeterUnavailable, connect, greet


def run(coro, timeout: float = 10.0):
    """Run one test's asyncio code, never longer than ``timeout``."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def fast_connect(url: str, name: str, **options):
    # Reconnect quickly: the fault tests make the server drop connections.
    options.setdefault("reconnect_time_wait", 0.05)
    return await connect(url, name, **options)


def test_greets(nats_url):
    async def main():
        service = await fast_connect(nats_url, "greeter")
        client = await fast_connect(nats_url, "client")
        try:
            await Greeter(service).start()
            assert await greet(client, "joe") == "Hello, joe!"
        finally:
            await client.close()
            await service.close()

    run(main())


def test_announces_each_greeting(nats_server):
    async def main():
        service = await fast_connect(nats_server.url, "greeter")
        client = await fast_connect(nats_server.url, "client")
        try:
            await Greeter(service, greeting="Hi").start()
            await greet(client, "ann")
            # The server recorded what the service published (nobody had to subscribe).
            announcement = await nats_server.wait_for_message_async(ANNOUNCEMENTS, timeout=2)
            assert json.loads(announcement.data) == {"name": "ann"}
            assert announcement.headers == {"Greeter": "Hi"}
            assert announcement.client == "greeter"
        finally:
            await client.close()
            await service.close()

    run(main())


def test_no_greeter_running(nats_url):
    async def main():
        client = await fast_connect(nats_url, "client")
        try:
            with pytest.raises(GreeterUnavailable, match="no greeter"):
                await greet(client, "joe")
        finally:
            await client.close()

    run(main())


def test_greeter_answers_no_responders(nats_server):
    async def main():
        service = await fast_connect(nats_server.url, "greeter")
        client = await fast_connect(nats_server.url, "client")
        try:
            await Greeter(service).start()
            nats_server.no_responders("greet.*", count=1)  # as if the service were down
            with pytest.raises(GreeterUnavailable, match="no greeter"):
                await greet(client, "joe")
            assert await greet(client, "joe") == "Hello, joe!"  # the fault was for one request
        finally:
            await client.close()
            await service.close()

    run(main())


def test_slow_greeter_times_out(nats_server):
    async def main():
        service = await fast_connect(nats_server.url, "greeter")
        client = await fast_connect(nats_server.url, "client")
        try:
            await Greeter(service).start()
            nats_server.delay("greet.*", 0.5)
            with pytest.raises(GreeterUnavailable, match="no answer"):
                await greet(client, "joe", timeout=0.1)
        finally:
            await client.close()
            await service.close()

    run(main())


def test_greeter_survives_being_disconnected(nats_server):
    async def main():
        service = await fast_connect(nats_server.url, "greeter")
        client = await fast_connect(nats_server.url, "client")
        try:
            greeter = Greeter(service)
            await greeter.start()
            nats_server.close_client("greeter")
            # nats-py reconnects and subscribes again; wait until the server has it back.
            await nats_server.wait_for_subscription_async("greet.joe", timeout=5)
            assert await greet(client, "joe") == "Hello, joe!"
            assert service.stats["reconnects"] == 1
        finally:
            await client.close()
            await service.close()

    run(main())


def test_greeter_survives_a_server_restart(nats_server):
    async def main():
        service = await fast_connect(nats_server.url, "greeter")
        client = await fast_connect(nats_server.url, "client")
        try:
            await Greeter(service).start()
            await nats_server.restart_async(down_for=0.1)  # same port, new server
            await nats_server.wait_for_subscription_async("greet.joe", timeout=5)
            assert await greet(client, "joe") == "Hello, joe!"
        finally:
            await client.close()
            await service.close()

    run(main())


@pytest.mark.nats_server(user="greeter", password="s3cret")
def test_greeter_with_credentials(nats_server):
    async def main():
        url = nats_server.url.replace("nats://", "nats://greeter:s3cret@")
        service = await fast_connect(url, "greeter")
        client = await fast_connect(url, "client")
        try:
            await Greeter(service).start()
            assert await greet(client, "joe") == "Hello, joe!"
        finally:
            await client.close()
            await service.close()

    run(main())
