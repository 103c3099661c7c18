"""Code a user of natserver's public API writes: mypy must accept it (tests/test_typing.py).
Not a test module: it is type-checked, never collected or run."""

from __future__ import annotations

import trio

import natserver
from natserver import NEED_DATA, Connect, NatsServer, Options, Parser, Pub, Sub, Sublist
from natserver.testing import Message


def subjects_in(data: bytes) -> list[bytes]:
    parser = Parser()
    parser.feed(data)
    subjects: list[bytes] = []
    while True:
        op = parser.next_op()
        if op is NEED_DATA:
            return subjects
        if isinstance(op, Pub):
            subjects.append(op.subject)
            size: int = len(op.payload)
            assert size >= 0
        elif isinstance(op, Sub):
            queue: bytes | None = op.queue
            subjects.append(op.sid if queue is None else queue)
        elif isinstance(op, Connect):
            assert isinstance(op.options, dict)


def options() -> Options:
    base = Options(port=-1, max_payload=1 << 20, ping_interval=120.0, jetstream=False)
    changed: Options = base.copy(port=4333)
    port: int = changed.port
    host: str = changed.host
    assert port and host
    return changed


async def run_in_trio() -> int:
    async with trio.open_nursery() as nursery:
        server: natserver.Server = await nursery.start(natserver.serve, options())
        port = server.port  # int | None: None until the server listens
        assert port is not None
        url: str = server.url
        assert url
        await server.shutdown()
        return port


def test_double() -> list[Message]:
    with NatsServer(max_payload=1024) as double:
        url: str = double.url
        assert url
        double.publish("greet", b"hi")
        return double.messages("greet")


def trie() -> int:
    sublist = Sublist()
    result = sublist.match(b"foo.bar")
    assert result is not None
    size: int = sublist.cache_size
    return size
