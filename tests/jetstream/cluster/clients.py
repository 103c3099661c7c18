"""nats-py clients of a test cluster, once its meta group has a leader every server agrees on."""

from __future__ import annotations

import contextlib

import nats

from tests.jetstream.cluster.test_cluster import connect, meta_leader, until


@contextlib.asynccontextmanager
async def clients(cluster, sys_at: int = 0):
    """(an APP user's client of each server, a SYS user's client of server ``sys_at``, the meta
    leader's name); every client closed at the end."""
    ncs = [await connect(url) for url in cluster.urls]
    sys_nc = await connect(cluster.urls[sys_at], "sys")
    try:
        leader = await until(lambda: meta_leader(sys_nc), "a meta leader every server agrees on")
        yield ncs, sys_nc, leader
    finally:
        for nc in [*ncs, sys_nc]:
            with contextlib.suppress(nats.errors.Error):
                await nc.close()


async def retried(call, what: str):
    """``await call()`` again while the stream's interest is on its way to this client's server
    (nats-py: NoStreamResponseError, no stream answered the publish); its result."""
    async def attempt():
        try:
            return await call()
        except nats.js.errors.NoStreamResponseError:
            return None

    return await until(attempt, what)
