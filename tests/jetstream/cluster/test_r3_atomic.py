"""Atomic batches (2.12+ ``allow_atomic``) on a replicated stream (issue #32): the leader checks
the whole batch at its commit, proposes its messages together (jetstream_cluster.go's
batchMsgOp entries in one append, the last the commit) and answers the commit with the batch's
id and size once applied; every replica stores the batch at its commit, all of it or nothing.
Answers as 2.15.1's (checked side by side on a 3-node cluster of each).

- natserver only: three in-process servers; batches through clients on each server, a refused
  batch (an expected last sequence that does not hold) stores nothing anywhere.
- mixed: one natserver and two nats-server 2.15.1 (when its binary is found); batches led in
  turn by the natserver and by 2.15.1, the same messages on the natserver's replica as in
  2.15.1's MSG.GET answers.

Real clocks, bounded polls, a hard timeout on each test."""

from __future__ import annotations

import base64
import json

from tests.jetstream.cluster.clients import clients, retried
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, until
from tests.jetstream.cluster.test_r3_consumers_more import cluster, on, run  # noqa: F401 (cluster: a fixture)
from tests.jetstream.cluster.test_r3_counters import in_a_mixed_cluster, lead_with
from tests.reference import needs_nats_server

ACCOUNT = "APP"
STREAM = {"name": "A", "subjects": ["a.>"], "num_replicas": 3, "allow_atomic": True}
MIXED_TIMEOUT = 180.0  # seconds for the mixed test (2.15.1's elections: 4-9 s, a few of them)


async def batch(nc, batch_id: str, subject: str, bodies: list[bytes], commit_headers: dict | None = None) -> dict:
    """Publish an atomic batch; the commit's answer."""
    for i, body in enumerate(bodies[:-1], 1):
        await nc.publish(subject, body, headers={"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)})
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(len(bodies)), "Nats-Batch-Commit": "1",
               **(commit_headers or {})}
    answer = await nc.request(subject, bodies[-1], headers=headers, timeout=REQUEST_TIMEOUT)
    return json.loads(answer.data)


async def created(nc) -> None:
    async def attempt():
        answer = await api(nc, "$JS.API.STREAM.CREATE.A", STREAM)
        return answer if "error" not in answer else None

    await until(attempt, "the R3 stream with atomic batches created")


def replica_messages(cluster, i: int) -> list[tuple[int, str, bytes]]:  # noqa: F811 (cluster: the fixture's value)
    def look(c):
        store = c.engines[ACCOUNT].streams["A"].store
        out = []
        for seq in range(store.first_seq, store.last_seq + 1):
            sm = store.load_msg(seq)
            if sm is not None:
                out.append((seq, sm.subject.decode(), bytes(sm.data)))
        return out

    return on(cluster, i, look)


def test_atomic_batches_of_an_r3_stream_are_stored_whole_on_every_replica(cluster):  # noqa: F811
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            await created(ncs[0])
            want: list[tuple[int, str, bytes]] = []
            for i, nc in enumerate(ncs):  # (the leader's interest on its way to every server)
                js = nc.jetstream()
                ack = await retried(lambda js=js, i=i: js.publish("a.w", b"w%d" % i, timeout=REQUEST_TIMEOUT),
                                    f"a plain publish through server {i}")
                want.append((ack.seq, "a.w", b"w%d" % i))
            for i, nc in enumerate(ncs):
                bodies = [b"b%d-%d" % (i, n) for n in range(1, 4)]
                ack = await batch(nc, f"batch{i}", f"a.{i}", bodies)
                assert ack == {"stream": "A", "seq": 3 + 3 * (i + 1), "batch": f"batch{i}", "count": 3}, ack
                want += [(3 + 3 * i + n, f"a.{i}", body) for n, body in enumerate(bodies, 1)]

            refused = await batch(ncs[1], "bad", "a.x", [b"x1", b"x2"], {"Nats-Expected-Last-Subject-Sequence": "9"})
            assert refused == {"error": {"code": 400, "err_code": 10164, "description": "wrong last sequence"},
                               "stream": "A", "seq": 0}, refused

            async def everywhere():
                return all(replica_messages(cluster, i) == want for i in range(3))

            await until(everywhere, "every batch whole on every replica, the refused one nowhere")

    run(main)


@needs_nats_server
def test_atomic_batches_of_an_r3_stream_of_one_natserver_and_two_2_15_1_servers():
    async def scenario(nc, node):
        await created(nc)
        seq = 0
        for n, wanted in enumerate(("n3", "n1")):
            await lead_with(nc, wanted, "A")
            ack = await batch(nc, f"m{n}", f"a.{wanted}", [b"%s-%d" % (wanted.encode(), k) for k in range(4)])
            seq += 4
            assert ack == {"stream": "A", "seq": seq, "batch": f"m{n}", "count": 4}, (wanted, ack)
        theirs = []
        for s in range(1, seq + 1):
            got = await api(nc, "$JS.API.STREAM.MSG.GET.A", {"seq": s})
            theirs.append((s, got["message"]["subject"], base64.b64decode(got["message"]["data"])))

        def natservers():
            store = node.server.jetstream.streams["A"].store
            return [(s, sm.subject.decode(), bytes(sm.data))
                    for s in range(1, store.last_seq + 1) if (sm := store.load_msg(s)) is not None]

        async def same():
            return node._call(natservers) == theirs

        await until(same, "the natserver's replica holding 2.15.1's messages")

    in_a_mixed_cluster(scenario)
