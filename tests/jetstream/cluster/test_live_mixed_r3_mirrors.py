"""Replicated mirrors and sources in a mixed cluster: one natserver (``n3``) and two nats-server
2.15.1 (runs when the 2.15.1 binary is found, as the other live tests). An R3 origin, an R3
mirror of it and an R3 stream sourcing part of it, all on the three servers:

- with a 2.15.1 server leading the mirror and the source, the natserver a follower storing what
  2.15.1's links propose (a mirror's messages with the origin's sequences, a source's with the
  ``Nats-Stream-Source`` header), and leading the origin (2.15.1's links consume from it);
- with the natserver leading both, its links proposing to the 2.15.1 followers, a 2.15.1 server
  leading the origin;
- in both cases every replica ends with the same messages: the natserver's store equal to
  2.15.1's MSG.GET answers (a 2.15.1 leader again), and the mirror equal to the origin;
- the natserver leading both and stopped: 2.15.1 takes the links over, nothing lost or twice,
  and the natserver restarted catches up to the same messages.
"""

from __future__ import annotations

import base64
from pathlib import Path

import trio

import natserver
from natserver.jetstream.external import SOURCE_HEADER
from natserver.jetstream.util import get_header
from tests.jetstream.cluster.test_live_mixed import (
    POLL,
    STEP,
    MixedCluster,
    bounded,
    natserver_options,
    request,
    until_created,
)
from tests.jetstream.cluster.test_live_mixed_r3 import lead_stream_with, publish
from tests.raft.nrg_cluster import tempdir
from tests.reference import NATS_SERVER, needs_nats_server

TEST_TIMEOUT = 240  # seconds for the whole test (2.15.1 elections take 4-9 s, several of them)
BATCH = 10  # messages published while one kind of server leads the mirror and the source
ORIGIN = {"name": "ORIG", "subjects": ["orig.>"], "num_replicas": 3}
MIRROR = {"name": "MIR", "mirror": {"name": "ORIG"}, "num_replicas": 3}
SOURCE = {"name": "SRC", "subjects": ["src.>"], "num_replicas": 3,
          "sources": [{"name": "ORIG", "filter_subject": "orig.b.>"}]}


def stored(server, name: str) -> list[tuple[int, str, bytes, bytes]]:
    """The natserver's messages of ``name``: (seq, subject, payload, the source header)."""
    stream = server.jetstream.streams.get(name)
    if stream is None:
        return []
    store = stream.store
    out = []
    for seq in range(store.first_seq, store.last_seq + 1):
        sm = store.load_msg(seq)
        if sm is not None:
            source = bytes(get_header(SOURCE_HEADER, sm.hdr)) if sm.hdr else b""
            out.append((seq, sm.subject.decode(), bytes(sm.data), source))
    return out


async def publish_batch(port: int, start: int) -> None:
    for n in range(start, start + BATCH):
        ack = await publish(port, f"orig.{'b' if n % 2 else 'a'}.{n}", n)
        assert ack == {"stream": "ORIG", "seq": n + 1}, ack


async def msg_gets(port: int, name: str, seqs: list[int]) -> list[tuple[int, str, bytes, bytes]]:
    """2.15.1's (or the leader's) MSG.GET answers, as ``stored`` gives the natserver's."""
    out = []
    for seq in seqs:
        message = (await request(port, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq}))["message"]
        hdrs = base64.b64decode(message["hdrs"]) if message.get("hdrs") else b""
        source = bytes(get_header(SOURCE_HEADER, hdrs)) if hdrs else b""
        out.append((message["seq"], message["subject"], base64.b64decode(message.get("data", "")), source))
    return out


async def until_stored(server, name: str, count: int) -> list[tuple[int, str, bytes, bytes]]:
    with trio.fail_after(STEP):
        while True:
            mine = stored(server, name)
            if len(mine) == count:
                return mine
            await trio.sleep(POLL)


def check_copies(origin: list, mirror: list, source: list) -> None:
    """The mirror has the origin's messages with their sequences; the source the orig.b. ones,
    once each, in order, with their origin sequences in the header."""
    assert [m[:3] for m in mirror] == [m[:3] for m in origin]
    wanted = [m for m in origin if m[1].startswith("orig.b.")]
    assert [(s[1], s[2]) for s in source] == [(w[1], w[2]) for w in wanted]
    assert [s[0] for s in source] == list(range(1, len(wanted) + 1))
    for s, w in zip(source, wanted):
        assert s[3].split(b" ")[:2] == [b"ORIG", b"%d" % w[0]], s


async def scenario(binary: str, folder: Path) -> dict:
    cluster = MixedCluster.create(binary, folder)
    go1, go2, py = cluster.nodes
    cluster.start(go1)
    cluster.start(go2)
    report: dict = {}
    options = natserver_options(cluster, py)
    try:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            for config in (ORIGIN, MIRROR, SOURCE):
                created = await until_created(go1.port, f"$JS.API.STREAM.CREATE.{config['name']}", config)
                assert created["config"]["num_replicas"] == 3 and len(created["cluster"]["replicas"]) == 2, created
                if config is ORIGIN:
                    # The natserver leads the origin from the start: its direct consumers serve
                    # 2.15.1's links (a 2.15.1 link whose origin's lead moves waits for its
                    # 10 s health check and backs off 10 s, 20 s... on a failed create).
                    assert await lead_stream_with(go1.port, {"n3"}, "ORIG") == "n3"

            # 2.15.1 leads the mirror and the source: the natserver follows their proposals.
            for name in ("MIR", "SRC"):
                report[f"go_{name}"] = await lead_stream_with(go1.port, {"n1", "n2"}, name)
            await publish_batch(py.port, 0)
            origin = await until_stored(server, "ORIG", BATCH)
            mirror = await until_stored(server, "MIR", BATCH)
            source = await until_stored(server, "SRC", BATCH // 2)
            check_copies(origin, mirror, source)
            assert not server.jetstream.streams["MIR"].links[0].cname  # (the follower runs no link)

            # The natserver leads both: its links propose, the 2.15.1 servers store (a 2.15.1
            # origin leader's direct consumers serving the natserver's links).
            for name in ("MIR", "SRC"):
                assert await lead_stream_with(go1.port, {"n3"}, name) == "n3"
            report["go_ORIG"] = await lead_stream_with(go1.port, {"n1", "n2"}, "ORIG")
            info = await request(go2.port, "$JS.API.STREAM.INFO.MIR")  # (the natserver answers)
            assert info["cluster"]["leader"] == "n3" and info["mirror"]["name"] == "ORIG", info
            await publish_batch(go2.port, BATCH)
            origin = await until_stored(server, "ORIG", 2 * BATCH)
            mirror = await until_stored(server, "MIR", 2 * BATCH)
            source = await until_stored(server, "SRC", BATCH)
            check_copies(origin, mirror, source)
            assert server.jetstream.streams["MIR"].links[0].cname  # (the leader's link runs)
            with trio.fail_after(STEP):
                while True:
                    info = await request(go1.port, "$JS.API.STREAM.INFO.SRC")
                    if info.get("sources", [{}])[0].get("lag") == 0 and info["state"]["messages"] == BATCH:
                        break
                    await trio.sleep(POLL)
            report["natserver_led"] = True

            # 2.15.1 leads again: its MSG.GET answers are the natserver's store, message for
            # message (what the natserver proposed reached the 2.15.1 replicas).
            for name, mine in (("MIR", mirror), ("SRC", source)):
                await lead_stream_with(go1.port, {"n1", "n2"}, name)
                assert await msg_gets(go1.port, name, [m[0] for m in mine]) == mine, name
            # ... and their links go on after the natserver's.
            await publish_batch(py.port, 2 * BATCH)
            origin = await until_stored(server, "ORIG", 3 * BATCH)
            check_copies(origin, await until_stored(server, "MIR", 3 * BATCH),
                         await until_stored(server, "SRC", 3 * BATCH // 2))
            report["same_everywhere"] = True

            # The natserver leads both again and its node stops: 2.15.1 takes the links over
            # (from the stream's last sequence, the source's last header), nothing lost or twice.
            for name in ("MIR", "SRC"):
                assert await lead_stream_with(go1.port, {"n3"}, name) == "n3"
            nursery.cancel_scope.cancel()
        await publish_batch(go1.port, 3 * BATCH)
        for name, count in (("MIR", 4 * BATCH), ("SRC", 2 * BATCH)):
            with trio.fail_after(STEP):
                while True:
                    with trio.move_on_after(3):
                        info = await request(go2.port, f"$JS.API.STREAM.INFO.{name}")
                        if info.get("state", {}).get("messages") == count:
                            break
                    await trio.sleep(POLL)
        # Restarted: the natserver's copies equal to what the 2.15.1 leaders made meanwhile.
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            origin = await until_stored(server, "ORIG", 4 * BATCH)
            mirror = await until_stored(server, "MIR", 4 * BATCH)
            source = await until_stored(server, "SRC", 2 * BATCH)
            check_copies(origin, mirror, source)
            for name, mine in (("MIR", mirror), ("SRC", source)):
                await lead_stream_with(go1.port, {"n1", "n2"}, name)
                assert await msg_gets(go1.port, name, [m[0] for m in mine]) == mine, name
            report["taken_over"] = True
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop_all()
    return report


@needs_nats_server
def test_r3_mirror_and_source_of_one_natserver_and_two_2_15_1_servers():
    assert NATS_SERVER
    with tempdir() as folder:
        report = trio.run(lambda: bounded(scenario(NATS_SERVER, Path(folder)), TEST_TIMEOUT))
    assert report["go_MIR"] in ("n1", "n2") and report["go_ORIG"] in ("n1", "n2")
    assert report["natserver_led"] and report["same_everywhere"] and report["taken_over"]
