"""A replicated stream in a mixed cluster: one natserver (``n3``) and two nats-server 2.15.1
(runs when the 2.15.1 binary is found, as the other live tests). An R3 stream on all three:

- with a 2.15.1 leader, publishes acknowledged through the natserver's client, the natserver
  a follower applying 2.15.1's entries;
- with the natserver as the leader (2.15.1's leader hands over to it), publishes through a
  2.15.1 client acknowledged by the natserver, stored by the 2.15.1 followers;
- every message equal on the natserver's store and in 2.15.1's MSG.GET answers (a 2.15.1
  leader again);
- the natserver stopped, publishes going on without it, restarted from its store and caught
  up by the 2.15.1 leader (its log, or its snapshot and $JSC.SYNC).
"""

from __future__ import annotations

import base64
from pathlib import Path

import trio

import natserver
from natserver.jetstream import replica as replica_module
from tests.jetstream.cluster.test_live_mixed import (
    POLL,
    STEP,
    MixedCluster,
    bounded,
    lead_with,
    leader_info,
    natserver_options,
    request,
    until_created,
)
from tests.raft.nrg_cluster import tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 180  # seconds for the whole test (2.15.1 elections take 4-9 s, a few of them)
STREAM = {"name": "M3", "subjects": ["m3.>"], "num_replicas": 3}


def stored(server) -> list[tuple[int, str, bytes]]:
    stream = server.jetstream.streams.get("M3")
    if stream is None:
        return []
    store = stream.store
    out = []
    for seq in range(store.first_seq, store.last_seq + 1):
        sm = store.load_msg(seq)
        if sm is not None:
            out.append((seq, sm.subject.decode(), bytes(sm.data)))
    return out


async def leader(port: int, name: str = "M3") -> str:
    return (await leader_info(port, f"$JS.API.STREAM.INFO.{name}"))["cluster"]["leader"]


async def lead_stream_with(port: int, wanted: set[str], name: str = "M3") -> str:
    """Step-downs until one of ``wanted`` leads the stream ``name``: its name."""
    answer = await lead_with(port, f"$JS.API.STREAM.INFO.{name}", f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", wanted)
    return answer["cluster"]["leader"]


async def publish(port: int, subject: str, n: int) -> dict:
    with trio.fail_after(STEP):
        while True:
            with trio.move_on_after(5):
                ack = await request(port, subject, {"n": n})
                if "error" not in ack:
                    return ack
            await trio.sleep(POLL)


async def msg_gets(port: int, seqs: list[int]) -> list[tuple[int, str, bytes]]:
    out = []
    for seq in seqs:
        answer = await request(port, "$JS.API.STREAM.MSG.GET.M3", {"seq": seq})
        message = answer["message"]
        out.append((message["seq"], message["subject"], base64.b64decode(message.get("data", ""))))
    return out


async def until_stored(server, count: int, last: int) -> list[tuple[int, str, bytes]]:
    with trio.fail_after(STEP):
        while True:
            mine = stored(server)
            if len(mine) == count and mine[-1][0] == last:
                return mine
            await trio.sleep(POLL)


async def scenario(binary: str, folder: Path) -> dict:
    replica_module.COMPACT_ENTRIES = 8  # (restored by the test)
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    options = natserver_options(cluster, py)
    try:
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as nursery:
                server = await nursery.start(natserver.serve, options)
                created = await until_created(go1.port, "$JS.API.STREAM.CREATE.M3", STREAM)
                assert created["config"]["num_replicas"] == 3 and created["did_create"] is True, created
                assert len(created["cluster"]["replicas"]) == 2, created

                # A 2.15.1 leader; published through the natserver's client.
                first = await lead_stream_with(go1.port, {"n1", "n2"})
                for n in range(10):
                    ack = await publish(py.port, f"m3.{n % 2}", n)
                    assert ack == {"stream": "M3", "seq": n + 1}, ack
                await until_stored(server, 10, 10)
                report["go_leader"] = first

                # The natserver leads; published through a 2.15.1 client while the other 2.15.1
                # server is down, the natserver snapshotting (its log compacted past it).
                assert await lead_stream_with(go1.port, {"n3"}) == "n3"
                info = await request(go2.port, "$JS.API.STREAM.INFO.M3")  # (the natserver answers)
                assert info["cluster"]["leader"] == "n3" and info["state"]["messages"] == 10, info
                assert sorted(r["name"] for r in info["cluster"]["replicas"]) == ["n1", "n2"], info
                cluster.kill(go2)
                for n in range(10, 20):
                    ack = await publish(go1.port, f"m3.{n % 2}", n)
                    assert ack == {"stream": "M3", "seq": n + 1}, ack
                deleted = await request(go1.port, "$JS.API.STREAM.MSG.DELETE.M3", {"seq": 3})
                assert deleted.get("success") is True, deleted
                replica = server.jetstream.cluster.replicas[("APP", "M3")]
                assert replica.snapshots >= 1 and replica.group.node.base_index > 10
                report["natserver_led"] = True

                # The 2.15.1 server restarted: caught up by the natserver (its snapshot, then the
                # messages over $JSC.SYNC); leading, its MSG.GET answers are the natserver's store.
                cluster.start(go2)
                with trio.fail_after(STEP):
                    while not replica.catchups_served:
                        await trio.sleep(POLL)
                await lead_stream_with(go1.port, {"n2"})
                mine = await until_stored(server, 19, 20)
                theirs = await msg_gets(go1.port, [seq for seq, _, _ in mine])
                assert theirs == mine
                missing = await request(go2.port, "$JS.API.STREAM.MSG.GET.M3", {"seq": 3})
                assert missing["error"]["err_code"] == 10037, missing
                nursery.cancel_scope.cancel()

            # The natserver stopped: publishes go on without it (the two 2.15.1 servers).
            for n in range(20, 30):
                ack = await publish(go1.port, f"m3.{n % 2}", n)
                assert ack == {"stream": "M3", "seq": n + 1}, ack

            # Both 2.15.1 servers restarted (each snapshots its stream at shutdown: their logs
            # no longer have what the natserver lacks).
            for node in (go1, go2):
                node.process.terminate()
                node.process.wait(STEP)
                cluster.start(node)
            await leader(go1.port)

            # Restarted from its store: caught up (the leader's snapshot, then $JSC.SYNC).
            async with trio.open_nursery() as nursery:
                server = await nursery.start(natserver.serve, options)
                mine = await until_stored(server, 29, 30)
                report["snapshot_catchups"] = server.jetstream.cluster.replicas[("APP", "M3")].catchups
                theirs = await msg_gets(go2.port, [seq for seq, _, _ in mine])
                assert theirs == mine
                ack = await publish(py.port, "m3.z", 30)
                assert ack == {"stream": "M3", "seq": 31}, ack
                await until_stored(server, 30, 31)
                report["caught_up"] = True
                nursery.cancel_scope.cancel()
            outer.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_an_r3_stream_of_one_natserver_and_two_2_15_1_servers(monkeypatch):
    assert NATS_SERVER
    monkeypatch.setattr(replica_module, "COMPACT_ENTRIES", replica_module.COMPACT_ENTRIES)
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report["go_leader"] in ("n1", "n2") and report["natserver_led"] and report["caught_up"]
    assert report["snapshot_catchups"] >= 1


