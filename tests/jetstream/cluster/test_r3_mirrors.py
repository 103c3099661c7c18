"""Replicated mirrors and sources (issue #32 item 4) in a cluster of three in-process natservers:
an R3 mirror and an R3 stream sourcing an R3 origin, as nats-server 2.15.1 runs them (stream.go
processInboundMirrorMsg / processInboundSourceMsg): only the stream's leader runs the links and
proposes what they bring through the stream's RAFT group, so every replica ends with the
origin's messages in order (a mirror: the origin's sequences; a source: the
``Nats-Stream-Source`` header); the links survive the leader's step-down and its node stopping,
nothing lost and nothing twice (a new leader resumes a mirror after its last sequence, a source
after the last origin sequence its headers name). STREAM.INFO's ``mirror`` / ``sources`` blocks
come from the leader. Real clocks, bounded polls, a hard timeout on each test."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from natserver.jetstream.external import SOURCE_HEADER
from natserver.jetstream.util import get_header
from natserver.testing import NatsServer
from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, cluster_options, same_shape, until
from tests.jetstream.cluster.test_r3_streams import (
    create_r3,
    publish,
    run,
    stream_on,
    wait_leader,
)

ORIGIN = {"name": "ORIG", "subjects": ["orig.>"], "num_replicas": 3}
MIRROR = {"name": "MIR", "mirror": {"name": "ORIG"}, "num_replicas": 3}
# A filtered mirror: the origin's other messages are gaps, proposed as skips (stream.go skipMsgs).
FILTERED = {"name": "MIRB", "mirror": {"name": "ORIG", "filter_subject": "orig.b.>"}, "num_replicas": 3}
SOURCE = {"name": "SRC", "subjects": ["src.>"], "num_replicas": 3, "sources": [{"name": "ORIG", "filter_subject": "orig.b.>"}]}
BATCH = 30  # messages published between the leadership changes
# 2.15.1's answers (python -m tests.jetstream.cluster.record_mirrors): a 3-node cluster's, a single server's
RECORDED = Path(__file__).parent / "data" / "mirrors_nats_server_2.15.1.json"


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def stored(cluster: NatsCluster, i: int, name: str) -> list | None:
    """Node i's messages of ``name``: (seq, subject, payload, the source header)."""
    stream = stream_on(cluster, i, name)
    if stream is None:
        return None
    store = stream.store
    out = []
    for seq in range(store.first_seq, store.last_seq + 1):
        sm = store.load_msg(seq)
        if sm is not None:
            source = get_header(SOURCE_HEADER, sm.hdr) if sm.hdr else b""
            out.append((seq, bytes(sm.subject), bytes(sm.data), bytes(source)))
    return out


async def everywhere(cluster: NatsCluster, nodes: list[int], name: str, count: int) -> list:
    """The same ``count`` messages of ``name`` on every node of ``nodes``."""
    async def check():
        views = [stored(cluster, i, name) for i in nodes]
        if all(v is not None and len(v) == count for v in views) and all(v == views[0] for v in views):
            return views[0]
        return None
    return await until(check, f"{count} messages of {name} alike on nodes {nodes}")


def expect_mirror(origin: list, mirror: list) -> None:
    assert [(seq, subject, data) for seq, subject, data, _ in mirror] == \
        [(seq, subject, data) for seq, subject, data, _ in origin]


def expect_filtered(origin: list, mirror: list) -> None:
    assert [(seq, subject, data) for seq, subject, data, _ in mirror] == \
        [(seq, subject, data) for seq, subject, data, _ in origin if subject.startswith(b"orig.b.")]


def expect_source(origin: list, source: list) -> None:
    wanted = [(seq, subject, data) for seq, subject, data, _ in origin if subject.startswith(b"orig.b.")]
    assert [(subject, data) for _, subject, data, _ in source] == [(s, d) for _, s, d in wanted]
    assert [seq for seq, *_ in source] == list(range(1, len(wanted) + 1))  # new sequences, none twice
    for (_, _, _, header), (oseq, osubject, _) in zip(source, wanted):
        parts = header.split(b" ")
        assert parts[:5] == [b"ORIG", b"%d" % oseq, b"orig.b.>", b">", osubject], header


async def publish_batch(ncs, start: int, count: int) -> None:
    for n in range(start, start + count):
        kind = "b" if n % 2 else "a"
        ack = await publish(ncs[n % 3], f"orig.{kind}.{n}", b"m%d" % n)
        assert ack.seq == n + 1 and ack.stream == "ORIG"


def test_r3_mirror_and_source_follow_an_r3_origin_through_leader_changes(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            await create_r3(ncs[0], ORIGIN)
            mirror_created = await create_r3(ncs[1], MIRROR)
            assert mirror_created["config"]["mirror"] == {"name": "ORIG"}
            assert mirror_created["mirror"]["name"] == "ORIG"
            await create_r3(ncs[2], SOURCE)
            await create_r3(ncs[0], FILTERED)
            await publish_batch(ncs, 0, BATCH)
            origin = await everywhere(cluster, [0, 1, 2], "ORIG", BATCH)
            expect_mirror(origin, await everywhere(cluster, [0, 1, 2], "MIR", BATCH))
            expect_source(origin, await everywhere(cluster, [0, 1, 2], "SRC", BATCH // 2))
            expect_filtered(origin, await everywhere(cluster, [0, 1, 2], "MIRB", BATCH // 2))
            for i in range(3):  # the links run on the leaders only
                for name in ("MIR", "SRC"):
                    stream = stream_on(cluster, i, name)
                    assert bool(stream.links[0].cname) == stream.replica.leading, (i, name)

            # STREAM.INFO from the leader: the mirror's and the source's blocks, caught up.
            async def caught_up(name: str, key: str):
                info = await api(ncs[0], f"$JS.API.STREAM.INFO.{name}")
                block = info.get(key)
                block = block[0] if isinstance(block, list) else block
                return info if block and block["lag"] == 0 and 0 <= block["active"] and \
                    "error" not in block else None
            info = await until(lambda: caught_up("MIR", "mirror"), "the mirror's info caught up")
            assert list(info["mirror"]) == ["name", "lag", "active"] and info["cluster"]["leader"]
            info = await until(lambda: caught_up("SRC", "sources"), "the source's info caught up")
            assert list(info["sources"][0]) == ["name", "lag", "seq", "active", "filter_subject"]
            assert info["sources"][0]["seq"] == BATCH  # (the last orig.b. one's origin sequence)

            # The leaders step down: the new ones go on, nothing lost, nothing twice.
            for name in ("MIR", "SRC"):
                old = await wait_leader(cluster, name)
                answer = await api(ncs[0], f"$JS.API.STREAM.LEADER.STEPDOWN.{name}")
                assert answer.get("success") is True, answer
                await wait_leader(cluster, name, other_than=old)
            await publish_batch(ncs, BATCH, BATCH)
            origin = await everywhere(cluster, [0, 1, 2], "ORIG", 2 * BATCH)
            expect_mirror(origin, await everywhere(cluster, [0, 1, 2], "MIR", 2 * BATCH))
            expect_source(origin, await everywhere(cluster, [0, 1, 2], "SRC", BATCH))

            # The mirror's leader's node stops (published meanwhile), then comes back.
            down = await wait_leader(cluster, "MIR")
            survivors = [i for i in range(3) if i != down]
            cluster.stop(down)
            await wait_leader(cluster, "MIR", other_than=down)
            await wait_leader(cluster, "ORIG", other_than=down)
            up = [nc for i, nc in enumerate(ncs) if i != down]
            for n in range(2 * BATCH, 3 * BATCH):
                kind = "b" if n % 2 else "a"
                ack = await publish(up[n % 2], f"orig.{kind}.{n}", b"m%d" % n)
                assert ack.seq == n + 1
            origin = await everywhere(cluster, survivors, "ORIG", 3 * BATCH)
            expect_mirror(origin, await everywhere(cluster, survivors, "MIR", 3 * BATCH))
            expect_source(origin, await everywhere(cluster, survivors, "SRC", 3 * BATCH // 2))
            cluster.restart(down)
            expect_mirror(origin, await everywhere(cluster, [0, 1, 2], "MIR", 3 * BATCH))
            expect_source(origin, await everywhere(cluster, [0, 1, 2], "SRC", 3 * BATCH // 2))
            expect_filtered(origin, await everywhere(cluster, [0, 1, 2], "MIRB", 3 * BATCH // 2))

    run(main)


def recorded(where: str) -> dict:
    return json.loads(RECORDED.read_text())[where]


async def mirror_alternates(nc, replicas: int) -> dict:
    """The nats.js test "jetstream - mirror alternates": ``src`` (subjects A, B), a ``mirror`` of
    it and a ``sourced`` stream, the stream found by subject A, and each one's STREAM.INFO."""
    out: dict = {}
    theirs = recorded("cluster")
    for name in ("src", "mirror", "sourced"):
        config = {k: v for k, v in theirs[f"create_{name}"]["config"].items()
                  if k in ("name", "subjects", "mirror", "sources")}
        config["num_replicas"] = replicas
        out[f"create_{name}"] = await create_r3(nc, config)
    for subject in ("A", "B", "A"):
        ack = await publish(nc, subject, b"x")
        assert ack.stream == "src"
    out["names_A"] = await api(nc, "$JS.API.STREAM.NAMES", {"subject": "A"})

    async def caught_up():
        infos = {name: await api(nc, f"$JS.API.STREAM.INFO.{name}") for name in ("src", "mirror", "sourced")}
        return infos if infos["mirror"]["state"]["messages"] == 3 and infos["sourced"]["state"]["messages"] == 2 \
            else None
    for name, info in (await until(caught_up, "the mirror and the source caught up")).items():
        out[f"info_{name}"] = info
    return out


def same_infos(ours: dict, theirs: dict) -> None:
    """The shapes of 2.15.1's infos, the values that do not depend on time or names equal."""
    assert ours["names_A"] == theirs["names_A"] == {**theirs["names_A"], "streams": ["src"]}
    for name in ("src", "mirror", "sourced"):
        mine, recorded_info = json.loads(json.dumps(ours[f"info_{name}"])), theirs[f"info_{name}"]
        assert list(mine) == list(recorded_info), name
        for block in ("mirror", "sources"):
            if block in recorded_info:
                same_shape(mine[block], recorded_info[block], block)
                first = (lambda b: b[0] if isinstance(b, list) else b)
                for key in ("name", "lag", "seq", "filter_subject"):
                    assert first(mine[block]).get(key) == first(recorded_info[block]).get(key), (name, key)
    assert "alternates" not in ours["info_mirror"] and "alternates" not in ours["info_sourced"]


def test_stream_info_alternates_in_a_cluster_and_none_on_a_single_server(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            ours = await mirror_alternates(ncs[0], 3)
        theirs = recorded("cluster")
        same_infos(ours, theirs)
        # jsStreamInfoRequest: the stream and its mirror, each with its group's cluster.
        alternates = ours["info_src"]["alternates"]
        assert sorted(alternates, key=lambda a: a["name"]) == \
            [{"name": "mirror", "cluster": cluster.name}, {"name": "src", "cluster": cluster.name}]
        assert sorted(theirs["info_src"]["alternates"], key=lambda a: a["name"]) == \
            [{"name": "mirror", "cluster": "C"}, {"name": "src", "cluster": "C"}]
        assert all(list(a) == ["name", "cluster"] for a in alternates)

        # A single server gives none (streamAlternates: no cluster), as 2.15.1's.
        with NatsServer(jetstream=True) as single:
            nc = await nats.connect(single.url)
            try:
                ours = await mirror_alternates(nc, 1)
            finally:
                await nc.close()
        same_infos(ours, recorded("single"))
        assert "alternates" not in ours["info_src"]

    run(main)


def kv_config(origin: dict, name: str, **changes) -> dict:
    """A bucket's stream made as nats.go's CreateKeyValue makes a mirrored or sourced one: the
    origin bucket's settings, its own name, and ``changes`` (mirror + mirror_direct, or sources
    with a subject transform into its own ``$KV.<bucket>.>``)."""
    config = {k: v for k, v in origin.items() if k not in ("name", "subjects", "metadata")}
    return {**config, "name": name, **changes}


def test_kv_buckets_with_replicas_mirrored_and_sourced(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            async def bucket():
                try:
                    return await ncs[0].jetstream(timeout=15).create_key_value(bucket="TEST", history=5, replicas=3,
                                                                                direct=True)  # (as nats.go)
                except nats.errors.TimeoutError:
                    return None
            kv = await until(bucket, "the bucket created")
            origin = (await api(ncs[0], "$JS.API.STREAM.INFO.KV_TEST"))["config"]
            await create_r3(ncs[1], kv_config(origin, "KV_MTEST", mirror={"name": "KV_TEST"}, mirror_direct=True))
            await create_r3(ncs[2], kv_config(origin, "KV_AGG", subjects=["$KV.AGG.>"], sources=[{
                "name": "KV_TEST", "subject_transforms": [{"src": "$KV.TEST.>", "dest": "$KV.AGG.>"}]}]))

            async def put(key: str, value: bytes) -> int:
                async def attempt():
                    try:
                        return await kv.put(key, value)
                    except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                        return None
                return await until(attempt, f"{key} put")
            assert await put("a", b"1") == 1
            await put("b", b"2")
            await put("a", b"3")
            await kv.delete("b")
            await everywhere(cluster, [0, 1, 2], "KV_MTEST", 4)
            await everywhere(cluster, [0, 1, 2], "KV_AGG", 4)

            # The sourced bucket through nats-py's KV API: its own keys, history and deletes.
            agg = await ncs[1].jetstream().key_value("AGG")
            assert (await agg.get("a")).value == b"3"
            with pytest.raises(nats.js.errors.KeyNotFoundError):  # (nats-py: a deleted key)
                await agg.get("b")
            assert await agg.keys() == ["a"]
            assert [e.value for e in await agg.history("a")] == [b"1", b"3"]
            # The mirror as nats.go reads a mirrored bucket: direct gets of the origin's keys
            # from the mirror's stream.
            got = await ncs[2].request("$JS.API.DIRECT.GET.KV_MTEST.$KV.TEST.a", b"", timeout=5)
            assert got.data == b"3" and got.headers["Nats-Stream"] == "KV_MTEST", got.headers

            # The sourced bucket's leader steps down: the new one goes on from where it was.
            old = await wait_leader(cluster, "KV_AGG")
            assert (await api(ncs[0], "$JS.API.STREAM.LEADER.STEPDOWN.KV_AGG")).get("success") is True
            await wait_leader(cluster, "KV_AGG", other_than=old)
            await put("c", b"4")
            await everywhere(cluster, [0, 1, 2], "KV_AGG", 5)

            async def latest():
                try:
                    entry = await agg.get("c")
                except nats.js.errors.KeyNotFoundError:
                    return None
                return entry
            assert (await until(latest, "c in the sourced bucket")).value == b"4"
            assert [e.value for e in await agg.history("a")] == [b"1", b"3"]  # (nothing twice)
            mirrored = await everywhere(cluster, [0, 1, 2], "KV_MTEST", 5)
            assert [(seq, subject) for seq, subject, _, _ in mirrored][-1] == (5, b"$KV.TEST.c")

    run(main)


SCALE_SETTLE = 60.0  # seconds for a replica change to settle (desired.py: several steps, elections)


def holding(cluster: NatsCluster, name: str) -> list[int]:
    """The servers that hold ``name``."""
    return [i for i in range(len(cluster.servers)) if stream_on(cluster, i, name) is not None]


async def scaled(nc, cluster: NatsCluster, name: str, config: dict, replicas: int) -> None:
    """``name`` updated to ``replicas`` and settled: held by that many servers, a leader
    without desired state."""
    answer = await api(nc, f"$JS.API.STREAM.UPDATE.{name}", {**config, "num_replicas": replicas})
    assert "error" not in answer, answer

    async def check():
        info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
        block = info.get("cluster") or {}
        return block.get("leader") and "desired" not in block and \
            len(block.get("replicas") or []) == replicas - 1 and len(holding(cluster, name)) == replicas
    await until(check, f"{name} settled at R{replicas}", SCALE_SETTLE)


def test_a_replicated_mirror_and_source_scaled_down_and_up(cluster):
    """A scale down leaves the links on the one server left, which goes on from its store
    (not from the origin's start); a scale up hands them to the new group's leader."""
    async def main():
        async with clients(cluster) as (ncs, _, _):
            await create_r3(ncs[0], ORIGIN)
            await create_r3(ncs[1], MIRROR)
            await create_r3(ncs[2], SOURCE)
            await publish_batch(ncs, 0, BATCH)
            for replicas, start in ((1, BATCH), (3, 2 * BATCH)):
                for config in (MIRROR, SOURCE):
                    await scaled(ncs[0], cluster, config["name"], config, replicas)
                await publish_batch(ncs, start, BATCH)
                origin = await everywhere(cluster, [0, 1, 2], "ORIG", start + BATCH)
                expect_mirror(origin, await everywhere(cluster, holding(cluster, "MIR"), "MIR", start + BATCH))
                expect_source(origin, await everywhere(cluster, holding(cluster, "SRC"), "SRC", (start + BATCH) // 2))

    run(main)


def test_r5_mirror_and_source_on_five_servers():
    async def main():
        with NatsCluster(5, jetstream=True, **cluster_options()) as five:
            ncs = [await nats.connect(url, user="app", password="pw") for url in five.urls]
            try:
                await create_r3(ncs[0], {**ORIGIN, "num_replicas": 1})
                await create_r3(ncs[1], {**MIRROR, "num_replicas": 5})
                await create_r3(ncs[2], {**SOURCE, "num_replicas": 5})
                nodes = list(range(5))
                await publish_batch(ncs, 0, BATCH)
                origin = await everywhere(five, holding(five, "ORIG"), "ORIG", BATCH)
                expect_mirror(origin, await everywhere(five, nodes, "MIR", BATCH))
                expect_source(origin, await everywhere(five, nodes, "SRC", BATCH // 2))
                for name in ("MIR", "SRC"):
                    answer = await api(ncs[3], f"$JS.API.STREAM.LEADER.STEPDOWN.{name}")
                    assert answer.get("success") is True, answer
                await publish_batch(ncs, BATCH, BATCH)
                origin = await everywhere(five, holding(five, "ORIG"), "ORIG", 2 * BATCH)
                expect_mirror(origin, await everywhere(five, nodes, "MIR", 2 * BATCH))
                expect_source(origin, await everywhere(five, nodes, "SRC", BATCH))
            finally:
                for nc in ncs:
                    await nc.close()

    run(main)

