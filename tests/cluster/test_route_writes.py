"""Route output written in place (Route.flush, from the server's flush_touched) rather than by
the route's writer task: most writes go that way, and what the socket does not take at once
goes to the writer, after which nothing is lost, reordered or (compressed) corrupted."""

from __future__ import annotations

import os
import types

import pytest
import trio

from natserver.cluster import routes as routes_module
from natserver.config.compression import CompressionOpts
from tests.cluster.helpers import STEP_TIMEOUT, connect, read_msgs, start_cluster, wait_interest

MESSAGES = 300


def _writes(monkeypatch, share: float) -> list[int]:
    """os.write as Route.flush sees it: the first ``share`` of every write goes out, the rest
    is left to the writer task (a socket that took part). Returns the sizes written."""
    written: list[int] = []

    def write(fd: int, data) -> int:
        n = max(1, int(len(data) * share)) if share < 1 else len(data)
        n = os.write(fd, bytes(data[:n]))
        written.append(n)
        return n

    monkeypatch.setattr(routes_module, "os", types.SimpleNamespace(write=write))
    return written


async def _publish_across(nursery, **changes) -> list[bytes]:
    a, b = await start_cluster(nursery, 2, **changes)
    sub = await connect(b.port)
    await sub.send(b"SUB m.* 1\r\n")
    await sub.ping()
    await wait_interest(a, b"m.x")
    pub = await connect(a.port)
    # sizes that change, several PUBs per chunk and one per chunk
    await pub.send(b"".join(b"PUB m.%d %d\r\n%s\r\n" % (i, i % 50, b"p" * (i % 50)) for i in range(MESSAGES // 2)))
    for i in range(MESSAGES // 2, MESSAGES):
        await pub.send(b"PUB m.%d %d\r\n%s\r\n" % (i, i % 50, b"p" * (i % 50)))
    with trio.fail_after(STEP_TIMEOUT):
        return await read_msgs(sub, MESSAGES)


def _expected() -> list[bytes]:
    return [b"MSG m.%d 1 %d\r\n%s\r\n" % (i, i % 50, b"p" * (i % 50)) for i in range(MESSAGES)]


async def test_route_messages_are_written_in_place(nursery, monkeypatch):
    written = _writes(monkeypatch, 1.0)
    assert await _publish_across(nursery) == _expected()
    assert sum(written) > MESSAGES * 10  # the messages went through Route.flush


@pytest.mark.parametrize("compression", ["off", "s2_fast"])
async def test_what_the_socket_does_not_take_goes_through_the_writer_in_order(nursery, monkeypatch, compression):
    written = _writes(monkeypatch, 0.5)
    got = await _publish_across(nursery, cluster_compression=CompressionOpts(compression))
    assert got == _expected()
    assert written  # (in place, partly)
