"""A replica's files as ``kill -9`` can leave them (issue #32 item 5), in three in-process
natservers (real clocks, bounded polls, a hard timeout): an R3 stream's follower stopped, its
files then cut as a crash mid-write leaves them, restarted: it recovers and catches up, every
replica equal.

- the RAFT log (``log.wal``) with a torn last record (a crash during an append: raft.go's WAL
  drops it) and the stream's last segment cut inside its last message (the store's buffer not
  yet written): the log's committed entries are applied again;
- the same store cut with the group's log compacted by a snapshot (taken before the stop): the
  snapshot says more than the store has, the missing messages come from the leader over
  ``$JSC.SYNC`` (jetstream_cluster.go processSnapshot).

The real ``kill -9`` of real processes is test_durability.py (slow); this one is the files'.
"""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest

from natserver.raft.storage import LOG_FILE
from tests.jetstream.cluster.test_cluster import api, connect, meta_leader, until
from tests.jetstream.cluster.test_r3_streams import create_r3, publish, same_everywhere, stream_on, wait_leader

TEST_TIMEOUT = 120.0  # seconds of real time for a whole test
STREAM = {"name": "T", "subjects": ["t.>"], "num_replicas": 3}
_FRAME = struct.Struct("<IB")  # store.py: a record's length (type + body) and type
_MSG = 1  # store.py: a MSG record


async def every_server_placeable(cluster) -> None:
    """Once every server agrees on a meta leader and the group has all three (a create before
    that may find no suitable peers: 10005)."""
    sys_nc = await connect(cluster.urls[0], "sys")
    try:
        await until(lambda: meta_leader(sys_nc), "a meta leader every server agrees on")
    finally:
        await sys_nc.close()


def last_msg_offset(segment: Path) -> int:
    """Where the segment's last MSG record starts (store.py's framing)."""
    buf = segment.read_bytes()
    at, last = 0, -1
    while at + _FRAME.size <= len(buf):
        length, kind = _FRAME.unpack_from(buf, at)
        if kind == _MSG:
            last = at
        at += 4 + length + 4
    assert last >= 0, segment
    return last


def cut_store(stream) -> None:
    """The last segment cut in the middle of its last message (its index files left as they
    are: stale, as after a crash)."""
    msgs = Path(stream.store.path) / "msgs"
    segment = max(msgs.glob("*.seg"), key=lambda p: int(p.stem))
    offset = last_msg_offset(segment)
    with open(segment, "r+b") as f:
        f.truncate(offset + 9)


def tear_log(folder: str) -> None:
    """A torn record after the log's last good one."""
    with open(os.path.join(folder, LOG_FILE), "ab") as f:
        f.write(b"\x11\x22\x33\x44\x05\x00\x00")


@pytest.mark.parametrize("snapshot_at_stop", [False, True], ids=["log-replayed", "snapshot-and-sync"])
def test_a_follower_with_torn_files_recovers_and_catches_up(cluster, snapshot_at_stop, monkeypatch):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        await every_server_placeable(cluster)
        await create_r3(ncs[0], STREAM)
        for n in range(30):
            ack = await publish(ncs[n % 3], "t.a", b"before %d" % n)
            assert ack.seq == n + 1
        lead = await wait_leader(cluster, "T")
        follower = (lead + 1) % 3
        await same_everywhere(cluster, [0, 1, 2], "T")
        stream = stream_on(cluster, follower, "T")
        replica = stream.replica
        if snapshot_at_stop:  # (the log compacted up to what was applied)
            assert cluster.servers[follower]._call(replica.snapshot)
            assert replica.group.node.base_index == 31  # (the peer state, then the 30 messages)
        monkeypatch.setattr(replica, "snapshot", lambda: False)  # (kill -9: none at the stop)
        folder = replica.group.folder
        await ncs[follower].close()
        cluster.stop(follower)
        cut_store(stream)
        tear_log(folder)
        survivors = [i for i in range(3) if i != follower]
        for n in range(30, 40):
            ack = await publish(ncs[survivors[n % 2]], "t.a", b"while down %d" % n)
            assert ack.seq == n + 1
        cluster.restart(follower)
        stored = await same_everywhere(cluster, [0, 1, 2], "T")
        assert [seq for seq, _, _ in stored] == list(range(1, 41))
        assert stored[29][2] == b"before 29" and stored[-1][2] == b"while down 39"
        restarted = stream_on(cluster, follower, "T").replica
        if snapshot_at_stop:
            assert restarted.catchups >= 1  # (the cut message came over $JSC.SYNC)
        ncs[follower] = await connect(cluster.urls[follower])
        ack = await publish(ncs[follower], "t.a", b"after")
        assert ack.seq == 41
        await same_everywhere(cluster, [0, 1, 2], "T")
        for i, nc in enumerate(ncs):
            if i != follower or not nc.is_closed:
                await nc.close()

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


def test_a_purge_replayed_by_a_restarted_follower_keeps_the_later_messages(cluster, monkeypatch):
    """A follower stopped as a kill -9 stops it (no snapshot: its log holds a purge and the
    messages after it) replays them at the restart on a store that has them: it keeps the
    messages stored after the purge (applyStreamEntries: a purge below the leader's last
    sequence when it was proposed)."""
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        await every_server_placeable(cluster)
        await create_r3(ncs[0], STREAM)
        for n in range(5):
            await publish(ncs[n % 3], "t.a", b"before %d" % n)
        answer = await api(ncs[1], "$JS.API.STREAM.PURGE.T")
        assert answer["success"] is True and answer["purged"] == 5, answer
        for n in range(3):
            await publish(ncs[n % 3], "t.b", b"after %d" % n)
        expected = [(6, b"t.b", b"after 0"), (7, b"t.b", b"after 1"), (8, b"t.b", b"after 2")]
        assert await same_everywhere(cluster, [0, 1, 2], "T") == expected
        lead = await wait_leader(cluster, "T")
        follower = (lead + 2) % 3
        monkeypatch.setattr(stream_on(cluster, follower, "T").replica, "snapshot", lambda: False)
        await ncs[follower].close()
        cluster.stop(follower)
        cluster.restart(follower)

        async def replayed():  # (the log's committed entries, its purge included)
            stream = stream_on(cluster, follower, "T")
            replica = stream.replica if stream is not None else None
            return replica is not None and replica.applied >= 7 and not replica.recovering
        await until(replayed, "the follower's log replayed")
        assert await same_everywhere(cluster, [0, 1, 2], "T") == expected
        for i, nc in enumerate(ncs):
            if i != follower:
                await nc.close()

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
