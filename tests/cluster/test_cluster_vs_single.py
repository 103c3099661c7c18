"""Hypothesis: random subscribe/unsubscribe/publish on random nodes of a three-node natserver
cluster deliver what one server delivers (plain subscriptions exactly; each queue group's
messages exactly once)."""

from __future__ import annotations

import collections

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import natserver
from tests.cluster.helpers import STEP_TIMEOUT, connect, start_cluster
from tests.conftest import make_options

CLIENTS_PER_NODE = 2
NODES = 3
SUBJECTS = [b"a", b"b", b"a.b", b"a.*", b"*.b", b">", b"a.>"]
PUBLISH_SUBJECTS = [b"a", b"b", b"a.b", b"a.c", b"c.b"]
QUEUES = [None, None, b"q1", b"q2"]

n_clients = NODES * CLIENTS_PER_NODE
ops = st.lists(
    st.one_of(
        st.tuples(st.just("sub"), st.integers(0, n_clients - 1), st.sampled_from(SUBJECTS), st.sampled_from(QUEUES)),
        st.tuples(st.just("unsub"), st.integers(0, n_clients - 1), st.integers(0, 20)),
        st.tuples(st.just("pub"), st.integers(0, n_clients - 1), st.sampled_from(PUBLISH_SUBJECTS)),
    ),
    min_size=1,
    max_size=25,
)


def local_interest(server) -> dict:
    return {key: count for key, count in server.cluster.local.get(b"$G", {}).items()}


async def settle(servers) -> None:
    """Until every route holds exactly the interest its peer has (weights included)."""
    by_id = {s.server_id: s for s in servers}
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            done = True
            for server in servers:
                for remote_id in server.cluster.routes:
                    route = server.cluster.route_for(remote_id, b"$G")
                    if route is None:  # (that pool connection is not up yet)
                        done = False
                        continue
                    want = local_interest(by_id[remote_id])
                    have = {(s, q): e.weight for (acc, s, q), e in route.entries.items() if acc == b"$G"}
                    if set(have) != set(want) or any(q is not None and have[(s, q)] != n for (s, q), n in want.items()):
                        done = False
            if done:
                return
            await trio.sleep(0.005)


async def ping_keeping(client) -> None:
    """A PING round trip that leaves what arrived before the PONG to be read."""
    data = await client.ping()
    client.buf[:0] = data


async def play(ports: list[int], script, settle_fn) -> tuple:
    clients = [await connect(port) for port in ports]
    plain = collections.Counter()
    queued = collections.Counter()
    queue_of: dict = {}
    barriers = 0

    async def barrier(publisher: int) -> None:
        """Every client has all messages published so far: the publisher's sync message
        comes after them on every path (a route is FIFO)."""
        nonlocal barriers
        barriers += 1
        token = b"%d" % barriers
        await clients[publisher].send(b"PUB sync %d\r\n%s\r\n" % (len(token), token))
        with trio.fail_after(STEP_TIMEOUT):
            for who, client in enumerate(clients):
                while True:
                    line = await client.read_line()
                    if not line.startswith(b"MSG "):
                        continue
                    _, subject, sid, size = line.split()
                    payload = (await client.read_exactly(int(size) + 2))[:-2]
                    if sid == b"0":
                        if payload == token:
                            break
                        continue
                    queue = queue_of[(who, sid)]
                    if queue is None:
                        plain[(who, sid, subject, payload)] += 1
                    else:
                        queued[(queue, subject, payload)] += 1

    for client in clients:
        await client.send(b"SUB sync 0\r\n")
        await client.ping()
    await settle_fn()
    sids: list[list] = [[] for _ in clients]  # per client: [sid, queue] of live subscriptions
    next_sid = 1
    published = 0
    for op in script:
        if op[0] == "sub":
            _, who, subject, queue = op
            sid = b"%d" % next_sid
            next_sid += 1
            line = b"SUB %s %s %s\r\n" % (subject, queue, sid) if queue else b"SUB %s %s\r\n" % (subject, sid)
            await clients[who].send(line)
            await ping_keeping(clients[who])
            sids[who].append(sid)
            queue_of[(who, sid)] = queue
            await settle_fn()
        elif op[0] == "unsub":
            _, who, index = op
            if sids[who]:
                sid = sids[who].pop(index % len(sids[who]))
                await clients[who].send(b"UNSUB %s\r\n" % sid)
                await ping_keeping(clients[who])
                await settle_fn()
        else:
            _, who, subject = op
            published += 1
            await clients[who].send(b"PUB %s %d\r\nm%d\r\n" % (subject, len(b"m%d" % published), published))
            await barrier(who)
    for client in clients:
        await client.stream.aclose()
    return plain, queued


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=ops)
def test_a_cluster_delivers_what_one_server_delivers(script):
    async def main():
        async with trio.open_nursery() as nursery:
            servers = await start_cluster(nursery, NODES)
            single = await nursery.start(natserver.serve, make_options())
            cluster_ports = [s.port for s in servers for _ in range(CLIENTS_PER_NODE)]

            async def settle_cluster():
                await settle(servers)

            async def nothing():
                pass

            got_cluster = await play(cluster_ports, script, settle_cluster)
            got_single = await play([single.port] * n_clients, script, nothing)
            for server in (*servers, single):
                await server.shutdown()
        assert got_cluster == got_single

    trio.run(main)
