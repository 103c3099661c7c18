"""Message schedules (2.12+ ``allow_msg_schedules``) on a replicated stream (issue #32): every
replica keeps the schedules from the messages its group applies, only the leader fires them,
through the group, so each fire is stored once on every replica; a new leader goes on firing.
As 2.15.1 (checked side by side on a 3-node cluster of each): an ``@at`` schedule fires once
and its subject is purged, an ``@every 1s`` one fires each second with ``Nats-Schedule-Next``.
Three in-process natservers, real clocks, bounded polls, a hard timeout."""

from __future__ import annotations

import datetime

from tests.jetstream.cluster.clients import clients, retried
from tests.jetstream.cluster.test_cluster import REQUEST_TIMEOUT, api, until
from tests.jetstream.cluster.test_r3_consumers_more import cluster, on, run  # noqa: F401 (cluster: a fixture)

ACCOUNT = "APP"
STREAM = {"name": "S", "subjects": ["s.>"], "num_replicas": 3, "allow_msg_schedules": True}


def replica_messages(cluster, i: int) -> list[tuple[str, bytes]]:  # noqa: F811 (cluster: the fixture's value)
    """Node i's replica of S: (subject, headers) of each message, in order."""
    def look(c):
        store = c.engines[ACCOUNT].streams["S"].store
        out = []
        for seq in range(store.first_seq, store.last_seq + 1):
            sm = store.load_msg(seq)
            if sm is not None:
                out.append((sm.subject.decode(), bytes(sm.hdr or b"")))
        return out

    return on(cluster, i, look)


def fired_nexts(messages: list[tuple[str, bytes]]) -> list[bytes]:
    """The Nats-Schedule-Next of each message the @every schedule fired."""
    out = []
    for subject, hdr in messages:
        if subject == "s.out.every":
            out += [line.split(b":", 1)[1].strip() for line in hdr.split(b"\r\n")
                    if line.startswith(b"Nats-Schedule-Next:")]
    return out


def test_schedules_of_an_r3_stream_fire_once_each_through_the_leader_and_after_a_step_down(cluster):  # noqa: F811
    async def main():
        async with clients(cluster) as (ncs, _sys_nc, _leader):
            nc = ncs[0]

            async def created():
                answer = await api(nc, "$JS.API.STREAM.CREATE.S", STREAM)
                return answer if "error" not in answer else None

            await until(created, "the R3 stream with schedules created")
            for i, client in enumerate(ncs):  # (the leader's interest on its way to every server)
                js = client.jetstream()
                await retried(lambda js=js: js.publish("s.w", b"w", timeout=REQUEST_TIMEOUT), f"a publish through {i}")
            at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            for subject, target, pattern in (("s.sched.once", "s.out.once", f"@at {at}"),
                                             ("s.sched.every", "s.out.every", "@every 1s")):
                ack = await ncs[1].request(subject, b"x", timeout=REQUEST_TIMEOUT, headers={
                    "Nats-Schedule": pattern, "Nats-Schedule-Target": target})
                assert b'"error"' not in ack.data, ack.data

            async def fired(count: int):
                async def enough():
                    return len(fired_nexts(replica_messages(cluster, 0))) >= count
                return enough

            await until(await fired(2), "two fires of the @every schedule")
            old = (await api(nc, "$JS.API.STREAM.INFO.S"))["cluster"]["leader"]
            stepped = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.S")
            assert stepped.get("success") is True, stepped
            before = len(fired_nexts(replica_messages(cluster, 0)))
            await until(await fired(before + 3), "three more fires after the step-down")
            leader = (await api(nc, "$JS.API.STREAM.INFO.S"))["cluster"]["leader"]
            assert leader != old

            # Every replica the same: the @at schedule fired once and its subject purged; each
            # @every fire once (its next times strictly increasing: none fired twice).
            async def agreed():
                seen = [replica_messages(cluster, i) for i in range(3)]
                common = min(len(s) for s in seen)
                return seen if all(s[:common] == seen[0][:common] for s in seen) and common > 0 else None

            seen = await until(agreed, "the replicas agreeing")
            subjects = [subject for subject, _ in seen[0]]
            assert subjects.count("s.out.once") == 1 and "s.sched.once" not in subjects, subjects
            assert subjects.count("s.sched.every") == 1, subjects
            nexts = fired_nexts(seen[0])
            assert len(nexts) >= before + 3 and nexts == sorted(set(nexts)), nexts

    run(main)
