"""nats-py, the client our users use, against natserver.

nats-py is asyncio and natserver is trio: the server runs in a background thread with its own
``trio.run`` (the ``threaded_server`` fixture), and each test body runs under ``asyncio.run``
with ``asyncio.wait_for`` as its hard timeout.
"""

from __future__ import annotations

import asyncio
import socket
import time

import nats
import nats.errors
import pytest

TIMEOUT = 20  # hard limit for each test body (seconds)


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


class Errors(list):
    """nats-py error callback that keeps what it is given."""

    async def __call__(self, error: Exception) -> None:
        self.append(error)


async def connect(url: str, errors: Errors | None = None, **kwargs):
    kwargs.setdefault("allow_reconnect", False)
    kwargs.setdefault("connect_timeout", 5)
    return await nats.connect(url, error_cb=errors if errors is not None else Errors(), **kwargs)


def no_internal_errors(handle) -> None:
    reasons = [record["reason"] for record in handle.server.closed_clients]
    assert "Internal Server Error" not in reasons


async def raw_ping(port: int) -> None:
    """A fresh raw connection gets INFO and answers PING with PONG."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        line = await reader.readline()
        assert line.startswith(b"INFO ")
        writer.write(b"PING\r\n")
        await writer.drain()
        assert await reader.readline() == b"PONG\r\n"
    finally:
        writer.close()


def test_pub_sub(threaded_server):
    handle = threaded_server()

    async def main():
        errors = Errors()
        nc = await connect(handle.url, errors)
        assert nc.max_payload == 1048576
        sub = await nc.subscribe("greet.joe")
        await nc.publish("greet.joe", b"hello")
        await nc.publish("greet.sue", b"not for joe")
        await nc.publish("greet.joe", b"")
        msg = await sub.next_msg(timeout=2)
        assert (msg.subject, msg.data, msg.reply) == ("greet.joe", b"hello", "")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b""
        await nc.flush()
        assert sub.pending_msgs == 0
        await nc.close()
        assert errors == []

    run(main())
    no_internal_errors(handle)


def test_wildcards(threaded_server):
    handle = threaded_server()

    async def main():
        nc = await connect(handle.url)
        star = await nc.subscribe("foo.*")
        full = await nc.subscribe("foo.>")
        for subject in ("foo", "foo.bar", "foo.bar.baz", "bar.foo"):
            await nc.publish(subject, subject.encode())
        await nc.flush()
        assert (await star.next_msg(timeout=2)).subject == "foo.bar"
        assert [(await full.next_msg(timeout=2)).subject for _ in range(2)] == ["foo.bar", "foo.bar.baz"]
        await nc.flush()
        assert star.pending_msgs == 0
        assert full.pending_msgs == 0
        await nc.close()

    run(main())


def test_queue_groups(threaded_server):
    handle = threaded_server()

    async def main():
        members = [await connect(handle.url) for _ in range(3)]
        subs = [await nc.subscribe("jobs", queue="workers") for nc in members]
        for nc in members:
            await nc.flush()
        pub = await connect(handle.url)
        n = 60
        for i in range(n):
            await pub.publish("jobs", b"%d" % i)
        await pub.flush()
        for nc in members:
            await nc.flush()
        received = []
        for sub in subs:
            count = sub.pending_msgs
            assert count > 0, "every member is reachable"
            received += [(await sub.next_msg(timeout=2)).data for _ in range(count)]
        assert sorted(received, key=int) == [b"%d" % i for i in range(n)]  # exactly once each
        for nc in (*members, pub):
            await nc.close()

    run(main())


def test_request_reply(threaded_server):
    handle = threaded_server()

    async def main():
        responder = await connect(handle.url)

        async def respond(msg):
            await msg.respond(b"pong:" + msg.data)

        await responder.subscribe("svc.echo", cb=respond)
        await responder.flush()
        requester = await connect(handle.url)
        for i in range(5):
            reply = await requester.request("svc.echo", b"%d" % i, timeout=2)
            assert reply.data == b"pong:%d" % i
        await requester.close()
        await responder.close()

    run(main())


def test_headers(threaded_server):
    handle = threaded_server()

    async def main():
        nc = await connect(handle.url)
        sub = await nc.subscribe("h")
        await nc.publish("h", b"body", headers={"Foo": "bar", "X-Id": "42"})
        await nc.publish("h", b"", headers={"Only": "headers"})
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"body"
        assert msg.headers == {"Foo": "bar", "X-Id": "42"}
        msg = await sub.next_msg(timeout=2)
        assert (msg.data, msg.headers) == (b"", {"Only": "headers"})

        async def respond(msg):
            await nc.publish(msg.reply, b"ok", headers={"Status-Of": msg.headers["Q"]})

        await nc.subscribe("svc.h", cb=respond)
        reply = await nc.request("svc.h", b"", timeout=2, headers={"Q": "v"})
        assert (reply.data, reply.headers) == (b"ok", {"Status-Of": "v"})
        await nc.close()

    run(main())


def test_no_responders(threaded_server):
    handle = threaded_server()

    async def main():
        nc = await connect(handle.url)
        start = time.monotonic()
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("nobody.home", b"hi", timeout=5)
        assert time.monotonic() - start < 2, "a 503 status, not a timeout"
        # The connection is fine afterwards.
        await nc.flush()
        await nc.close()

    run(main())


def test_auto_unsubscribe(threaded_server):
    handle = threaded_server()

    async def main():
        nc = await connect(handle.url)
        sub = await nc.subscribe("limited")
        await sub.unsubscribe(limit=3)
        capped = await nc.subscribe("capped", max_msgs=2)
        for i in range(5):
            await nc.publish("limited", b"%d" % i)
            await nc.publish("capped", b"%d" % i)
        await nc.flush()
        await nc.flush()
        assert [(await sub.next_msg(timeout=2)).data for _ in range(3)] == [b"0", b"1", b"2"]
        assert [(await capped.next_msg(timeout=2)).data for _ in range(2)] == [b"0", b"1"]
        # The server dropped "limited" (UNSUB sid 3); nats-py enforces max_msgs=2 itself.
        assert handle.server.sublist.count == 1
        await nc.close()

    run(main())


def test_flush(threaded_server):
    handle = threaded_server()

    async def main():
        nc = await connect(handle.url)
        sub = await nc.subscribe("many")
        for i in range(2000):
            await nc.publish("many", b"x" * 100)
        await nc.flush(timeout=5)
        await nc.flush(timeout=5)
        assert sub.pending_msgs == 2000
        assert handle.server.in_msgs >= 2000
        await nc.close()

    run(main())


def test_drain(threaded_server):
    handle = threaded_server()

    async def main():
        sub_nc = await connect(handle.url)
        got = []

        async def handler(msg):
            await asyncio.sleep(0)
            got.append(msg.data)

        await sub_nc.subscribe("work", cb=handler)
        await sub_nc.flush()
        pub = await connect(handle.url)
        for i in range(200):
            await pub.publish("work", b"%d" % i)
        await pub.flush()
        await sub_nc.flush()
        await sub_nc.drain()
        assert sub_nc.is_closed
        assert got == [b"%d" % i for i in range(200)]
        await pub.drain()
        assert pub.is_closed

    run(main())


def test_max_payload_advertised_and_enforced(threaded_server):
    handle = threaded_server(max_payload=1024)

    async def main():
        nc = await connect(handle.url)
        assert nc.max_payload == 1024
        with pytest.raises(nats.errors.MaxPayloadError):
            await nc.publish("big", b"x" * 1025)
        await nc.publish("big", b"x" * 1024)
        await nc.flush()
        await nc.close()

    run(main())


def test_slow_consumer_is_cut_off_others_keep_receiving(threaded_server):
    handle = threaded_server(max_pending=256 * 1024, max_payload=64 * 1024)
    # A 4 MiB burst. While the stuck subscriber is above the stall mark the publisher is held
    # back per message (nats-server's fast-producer stall gate, 100 ms to 1 s each): big
    # messages get it past max_pending in a few of them.
    n_msgs, size = 128, 32 * 1024

    async def main():
        # A raw subscriber that never reads, with a tiny receive buffer so the kernel cannot
        # absorb the burst for it.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", handle.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        assert (await reader.readline()).startswith(b"INFO ")
        writer.write(b'CONNECT {"verbose":false}\r\nSUB big 1\r\nPING\r\n')
        await writer.drain()
        assert await reader.readline() == b"PONG\r\n"

        errors = Errors()
        good = await connect(handle.url, errors)
        received = []
        done = asyncio.Event()

        async def handler(msg):
            received.append(msg.data)
            if len(received) == n_msgs:
                done.set()

        await good.subscribe("big", cb=handler)
        await good.flush()
        pub = await connect(handle.url, errors)
        for i in range(n_msgs):
            await pub.publish("big", i.to_bytes(4, "big") + bytes(size - 4))
        await pub.flush(timeout=10)
        await asyncio.wait_for(done.wait(), 10)
        assert [int.from_bytes(m[:4], "big") for m in received] == list(range(n_msgs))
        assert all(len(m) == size for m in received)
        assert errors == []

        # The slow consumer was cut off: its socket ends (EOF or reset) once drained.
        async def read_to_end():
            try:
                while await reader.read(65536):
                    pass
            except ConnectionResetError:
                pass

        await asyncio.wait_for(read_to_end(), 10)
        writer.close()
        assert handle.server.slow_consumers == 1
        assert any(r["reason"] == "Slow Consumer (Pending Bytes)" for r in handle.server.closed_clients)

        # Nothing escaped: the server still answers, old and new connections alike.
        await pub.flush()
        await good.flush()
        await raw_ping(handle.port)
        await pub.close()
        await good.close()

    run(main())
    no_internal_errors(handle)
