"""Client._read_loop's own read of a plain socket (no trio stream): after a small read it waits
for the socket before reading again, after a big one it reads at once and, finding the socket
empty, waits then. The bytes delivered are compared exactly; the reads are counted through the
client module's ``os``, as test_big_reads does."""

from __future__ import annotations

import os

import trio

import natserver
from natserver.server import client as client_module


class _CountingOs:
    """The client module's ``os``, counting the reads that found the socket empty."""

    def __init__(self) -> None:
        self.reads = 0
        self.empty = 0

    def read(self, fd: int, n: int) -> bytes:
        self.reads += 1
        try:
            return os.read(fd, n)
        except BlockingIOError:
            self.empty += 1
            raise

    def __getattr__(self, name: str):
        return getattr(os, name)


async def _connect(port: int, subscribe: bytes) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b'CONNECT {"verbose":false,"pedantic":false}\r\n%sPING\r\n' % subscribe)
    got = b""
    while b"PONG\r\n" not in got:
        got += await stream.receive_some()
    return stream


async def _receive_exactly(stream: trio.SocketStream, expected: bytes) -> bytes:
    got = b""
    while len(got) < len(expected):
        got += await stream.receive_some()
    return got


async def test_request_reply_reads_wait_for_the_socket_first(monkeypatch):
    # Each hop's read is small: the next one waits for the socket and never finds it empty.
    counter = _CountingOs()
    monkeypatch.setattr(client_module, "os", counter)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
            responder = await _connect(server.port, b"SUB svc 1\r\n")
            requester = await _connect(server.port, b"SUB _INBOX.x.* 7\r\n")
            reads_before = counter.reads
            for i in range(50):
                payload = b"r" * (i % 17)  # sizes and reply subjects change
                reply = b"_INBOX.x.%d" % i
                await requester.send_all(b"PUB svc %s %d\r\n%s\r\n" % (reply, len(payload), payload))
                got = await _receive_exactly(responder, b"MSG svc 1 %s %d\r\n%s\r\n" % (reply, len(payload), payload))
                assert got == b"MSG svc 1 %s %d\r\n%s\r\n" % (reply, len(payload), payload)
                await responder.send_all(b"PUB %s %d\r\n%s\r\n" % (reply, len(payload) + 1, payload + b"!"))
                expected = b"MSG %s 7 %d\r\n%s!\r\n" % (reply, len(payload) + 1, payload)
                assert await _receive_exactly(requester, expected) == expected
            assert counter.reads - reads_before >= 100
            assert counter.empty == 0
            await server.shutdown()
            nursery.cancel_scope.cancel()


async def test_after_a_big_read_an_empty_socket_is_waited_for(monkeypatch):
    # A read of SMALL_READ bytes or more is followed by one that does not wait first: it finds
    # the socket empty (EAGAIN), waits, and reads what comes later.
    counter = _CountingOs()
    monkeypatch.setattr(client_module, "os", counter)
    payload = b"b" * (2 * client_module.SMALL_READ)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, natserver.Options(host="127.0.0.1", port=-1, quiet=True))
            sub = await _connect(server.port, b"SUB big 1\r\n")
            pub = await _connect(server.port, b"")
            for _ in range(3):
                await pub.send_all(b"PUB big %d\r\n%s\r\n" % (len(payload), payload))
                expected = b"MSG big 1 %d\r\n%s\r\n" % (len(payload), payload)
                assert await _receive_exactly(sub, expected) == expected
                await pub.send_all(b"PING\r\n")
                assert await _receive_exactly(pub, b"PONG\r\n") == b"PONG\r\n"
            assert counter.empty >= 1
            await server.shutdown()
            nursery.cancel_scope.cancel()
