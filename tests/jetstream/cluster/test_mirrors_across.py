"""Mirrors and sources across the nodes of a JetStream cluster of three in-process natservers
(issue #32, "everything on top keeps working in a cluster"): an R1 stream on one server, its
mirror and a stream sourcing it placed on other servers by the meta leader; what is published
to the origin reaches both, in order, with the source header. In a cluster every link reaches
its origin by messages (a direct consumer that the origin's server makes without the meta
group, as 2.15.1's jsConsumerCreateRequest does). Real clocks, bounded polls, a hard timeout
(test_cluster's helpers)."""

from __future__ import annotations

import base64

import pytest

from natserver.jetstream.external import get_hash
from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.clients import clients
from tests.jetstream.cluster.test_cluster import api, cluster_options, publish, run, until

PLACEMENT_TRIES = 12  # creates until the meta leader places a stream off the origin's server
COUNT = 20
# The same file store limit on every server: placement puts a stream on the server with the most
# room first (selectPeerGroup), and servers sharing one disk would each report what was free when
# it started, the first one started always winning. Equal, the server with fewer streams wins.
MAX_FILE_STORE = 1 << 30


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, max_file_store=MAX_FILE_STORE, **cluster_options()) as c:
        yield c


async def _placed_elsewhere(nc, config: dict, avoid: set[str]) -> str:
    """Create ``config``'s stream until it lands on a server not in ``avoid`` (placement of an
    R1 stream is random among the peers); its server's name."""
    name = config["name"]
    for _ in range(PLACEMENT_TRIES):
        created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", config)
        assert "error" not in created, created
        leader = created["cluster"]["leader"]
        if leader not in avoid:
            return leader
        deleted = await api(nc, f"$JS.API.STREAM.DELETE.{name}")
        assert deleted.get("success") is True, deleted
    raise AssertionError(f"{name} never placed off {sorted(avoid)}")


def test_a_mirror_and_a_source_on_other_servers_follow_the_origin(cluster):
    async def main():
        async with clients(cluster) as (ncs, _, _):
            origin = await api(ncs[0], "$JS.API.STREAM.CREATE.ORIG",
                               {"name": "ORIG", "subjects": ["orig.>"], "storage": "file"})
            assert "error" not in origin, origin
            origin_server = origin["cluster"]["leader"]
            mirror_server = await _placed_elsewhere(
                ncs[1], {"name": "MIR", "storage": "file", "mirror": {"name": "ORIG"}}, {origin_server})
            source_server = await _placed_elsewhere(
                ncs[2], {"name": "SRC", "subjects": ["src.>"], "storage": "file",
                         "sources": [{"name": "ORIG", "filter_subject": "orig.b.>"}]}, {origin_server})
            publisher = ncs[0]
            acks = []
            for i in range(COUNT):
                kind = "a" if i % 2 else "b"
                acks.append(await publish(publisher, f"orig.{kind}.{i}", b"m%d" % i))
            assert [ack.seq for ack in acks] == list(range(1, COUNT + 1))

            async def mirrored():
                info = await api(ncs[0], "$JS.API.STREAM.INFO.MIR")
                return info if info.get("state", {}).get("messages") == COUNT else None

            info = await until(mirrored, "the mirror caught up")
            assert info["cluster"]["leader"] == mirror_server != origin_server
            assert info["mirror"]["name"] == "ORIG" and info["mirror"]["lag"] == 0

            async def sourced():
                info = await api(ncs[1], "$JS.API.STREAM.INFO.SRC")
                return info if info.get("state", {}).get("messages") == COUNT // 2 else None

            info = await until(sourced, "the sourcing stream caught up")
            assert info["cluster"]["leader"] == source_server != origin_server
            for seq in range(1, COUNT + 1):
                got = await api(ncs[2], "$JS.API.STREAM.MSG.GET.MIR", {"seq": seq})
                assert got["message"]["subject"] == f"orig.{'a' if (seq - 1) % 2 else 'b'}.{seq - 1}", got
            src = await api(ncs[0], "$JS.API.STREAM.MSG.GET.SRC", {"seq": 1})
            assert src["message"]["subject"] == "orig.b.0"
            # with the origin's identity (stream.go identity(): a hash of its creation time), which
            # the source read from its consumer create's Nats-Stream-Identity, as 2.15.1's does
            identity = get_hash(origin["created"])
            assert base64.b64decode(src["message"]["hdrs"]) == (
                b"NATS/1.0\r\nNats-Stream-Source: ORIG 1 orig.b.> > orig.b.0 %s\r\n\r\n" % identity.encode())
            # A message published after the catch-up still flows (the sourcing consumers live).
            await publish(ncs[2], "orig.b.last", b"last")

            async def one_more():
                mir = await api(ncs[0], "$JS.API.STREAM.INFO.MIR")
                src = await api(ncs[0], "$JS.API.STREAM.INFO.SRC")
                return mir["state"]["messages"] == COUNT + 1 and src["state"]["messages"] == COUNT // 2 + 1

            await until(one_more, "the last message mirrored and sourced")

    run(main)


def test_a_source_starts_over_when_its_origin_is_recreated(cluster):
    # stream.go: the source's next consumer create names the origin it followed; the recreated
    # origin answers 10225, and the source takes the new one from its first message (without
    # the identity it would ask for the old incarnation's next sequence and miss those).
    async def main():
        async with clients(cluster) as (ncs, _, _):
            config = {"name": "ORIG", "subjects": ["orig.>"], "storage": "file"}
            origin = await api(ncs[0], "$JS.API.STREAM.CREATE.ORIG", config)
            await _placed_elsewhere(ncs[1], {"name": "SRC", "subjects": ["src.>"], "storage": "file",
                                             "sources": [{"name": "ORIG"}]}, {origin["cluster"]["leader"]})
            for i in range(3):
                await publish(ncs[0], f"orig.old.{i}", b"old")

            async def sourced(count):
                info = await api(ncs[2], "$JS.API.STREAM.INFO.SRC")
                return info if info.get("state", {}).get("messages") == count else None

            await until(lambda: sourced(3), "the first incarnation sourced")
            assert (await api(ncs[0], "$JS.API.STREAM.DELETE.ORIG")).get("success") is True
            again = await api(ncs[0], "$JS.API.STREAM.CREATE.ORIG", config)
            assert "error" not in again and again["created"] != origin["created"]
            for i in range(2):
                await publish(ncs[0], f"orig.new.{i}", b"new")
            await until(lambda: sourced(5), "the recreated origin sourced from its start")
            identity = get_hash(again["created"]).encode()
            for seq, origin_seq in ((4, 1), (5, 2)):
                got = await api(ncs[2], "$JS.API.STREAM.MSG.GET.SRC", {"seq": seq})
                assert got["message"]["subject"] == f"orig.new.{origin_seq - 1}"
                assert base64.b64decode(got["message"]["hdrs"]) == (
                    b"NATS/1.0\r\nNats-Stream-Source: ORIG %d > > orig.new.%d %s\r\n\r\n" % (
                        origin_seq, origin_seq - 1, identity))

    run(main)
