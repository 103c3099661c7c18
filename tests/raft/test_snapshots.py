"""Snapshots taken by the upper layer (raft.go InstallSnapshot): the file raft.go writes under
``snapshots/`` (its name, layout and HighwayHash-64 checksum, checked against the Go library's
own output), the log compacted up to the snapshot, a restart starting from it, and a follower
that lags behind the compaction sent it by the leader."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from natserver.raft import (
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    FileStorage,
    LogEntry,
    Node,
    PeerState,
    Snapshot,
    SnapshotError,
    StorageError,
)
from natserver.raft.highway import highwayhash64
from natserver.raft.node import ERR_CATCHUPS_RUNNING, ERR_NO_SNAPSHOT, MAX_ELECTION_TIMEOUT
from natserver.raft.storage import LOG_FILE
from tests.raft.sim import GROUP, Clock, Network, restore, snapshot_of
from tests.raft.test_node import A, B, C

VECTORS = Path(__file__).parent / "data" / "highwayhash64_vectors.json"
LEADER_INBOX = "$NRG.R.leaderB1"


def test_highwayhash64_gives_what_the_go_library_gives():
    """Vectors from github.com/minio/highwayhash (the library raft.go uses), every length class
    (empty, under 4, the 16-byte branch, whole packets and remainders)."""
    recorded = json.loads(VECTORS.read_text())
    key = hashlib.sha256(GROUP.encode()).digest()
    for n, expected in recorded["vectors"]:
        assert highwayhash64(key, bytes((i * 7 + 3) & 255 for i in range(n))).hex() == expected, n
    with pytest.raises(ValueError):
        highwayhash64(b"short", b"")


def follower_with_entries(folder, count: int, commit: int) -> Node:
    node = Node(A, GROUP, [A, B, C], FileStorage(folder / GROUP), rng=random.Random(1), now=Clock())
    for i in range(1, count + 1):
        ae = AppendEntry(B, 2, min(commit, i), 2 if i > 1 else 0, i - 1, (Entry(0, b"e%d" % i),))
        node.receive(node.append_subject, LEADER_INBOX, ae.encode())
    return node


def test_a_snapshot_is_written_as_raft_go_writes_it_and_the_log_compacted(tmp_path):
    node = follower_with_entries(tmp_path, 8, commit=6)
    assert [c.index for c in node.take_committed()] == list(range(1, 7))
    snap = node.install_snapshot(b"state at 5", 5)
    assert (snap.term, snap.index) == (2, 5) and node.base_index == 5
    assert [e.index for e in node.log] == [6, 7, 8]
    folder = tmp_path / GROUP
    [path] = (folder / "snapshots").iterdir()
    assert path.name == "snap.2.5"
    buf = path.read_bytes()
    term, index, size = struct.unpack_from("<QQI", buf)
    peers = PeerState((A, B, C), 3).encode()
    assert (term, index, buf[20:20 + size]) == (2, 5, peers)
    assert buf[20 + size:-8] == b"state at 5"
    assert buf[-8:] == highwayhash64(hashlib.sha256(GROUP.encode()).digest(), buf[:-8])
    # The log file keeps only the entries after the snapshot.
    assert [e.index for e in FileStorage(folder).load().log] == [6, 7, 8]
    # A later one replaces it (raft.go removes the previous file).
    node.install_snapshot(b"state at 6")
    assert [p.name for p in (folder / "snapshots").iterdir()] == ["snap.2.6"]


def test_a_restart_starts_from_the_snapshot(tmp_path):
    node = follower_with_entries(tmp_path, 8, commit=7)
    node.install_snapshot(b"state at 5", 5)
    again = Node(A, GROUP, [], FileStorage(tmp_path / GROUP), rng=random.Random(2), now=Clock())
    assert (again.snapshot.term, again.snapshot.index, again.snapshot.data) == (2, 5, b"state at 5")
    assert again.peers == [A, B, C]  # from the snapshot's peer state
    got = [(c.index, c.entry.type, c.entry.data) for c in again.take_committed()]
    # The snapshot first (raft.go setupLastSnapshot), then the log's committed entries after it.
    assert got == [(5, EntryType.SNAPSHOT, b"state at 5"), (6, 0, b"e6"), (7, 0, b"e7")]


def test_a_compaction_cut_short_is_finished_at_load(tmp_path):
    follower_with_entries(tmp_path, 6, commit=6)
    storage = FileStorage(tmp_path / GROUP)
    storage.load()
    storage._write_snapshot(Snapshot(2, 4, b"s", PeerState((A, B, C), 3)))  # the crash: WAL not yet compacted
    loaded = FileStorage(tmp_path / GROUP).load()
    assert loaded.snapshot is not None and loaded.snapshot.index == 4
    assert [e.index for e in loaded.log] == [5, 6]
    again = FileStorage(tmp_path / GROUP)
    assert [e.index for e in again.load().log] == [5, 6]  # the stale records are gone from the file
    again.append([LogEntry(7, 2, Entry(0, b"e7"))])
    assert [e.index for e in FileStorage(tmp_path / GROUP).load().log] == [5, 6, 7]
    assert (tmp_path / GROUP / LOG_FILE).stat().st_size < 3 * 60


def test_a_corrupt_snapshot_is_refused_and_stray_files_removed(tmp_path):
    node = follower_with_entries(tmp_path, 4, commit=4)
    node.install_snapshot(b"state")
    snaps = tmp_path / GROUP / "snapshots"
    (snaps / "junk").write_bytes(b"x")
    (snaps / "snap.1.2").write_bytes(b"older")  # an older snapshot: removed once the latest checks
    assert FileStorage(tmp_path / GROUP).load().snapshot.data == b"state"
    assert sorted(p.name for p in snaps.iterdir()) == ["snap.2.4"]
    path = snaps / "snap.2.4"
    data = bytearray(path.read_bytes())
    data[-9] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="snapshot corrupt"):
        FileStorage(tmp_path / GROUP).load()
    # The checksum is keyed by the group: another group's key does not verify it.
    path.write_bytes(FileStorage(tmp_path / "other", group=GROUP).encode_snapshot(Snapshot(2, 4, b"s")))
    assert FileStorage(tmp_path / GROUP).load().snapshot.data == b"s"
    with pytest.raises(StorageError, match="snapshot corrupt"):
        FileStorage(tmp_path / GROUP, group="S-R3F-another0").load()


def test_snapshots_are_refused_as_raft_go_refuses_them():
    net = Network(3, seed=4)
    net.advance(2 * MAX_ELECTION_TIMEOUT)
    leader = net.leader()
    assert leader is not None
    with pytest.raises(SnapshotError, match=ERR_NO_SNAPSHOT):
        leader.install_snapshot(b"x", leader.applied + 1)  # not applied yet
    leader.install_snapshot(b"x")
    with pytest.raises(SnapshotError, match=ERR_NO_SNAPSHOT):
        leader.install_snapshot(b"x")  # nothing new since
    lagging = next(i for i in net.ids if i != leader.id)
    net.down.add(lagging)
    for i in range(200):
        leader.propose(b"m%d" % i)
    net.collect(leader.id)
    net.advance(2)
    # The lagging follower's catch-up request (its frames to an inbox nobody reads yet).
    leader.receive(leader.append_inbox, "$NRG.CR.lagging1", AppendEntryResponse(1, 1, lagging, False).encode())
    net.collect(leader.id)
    assert leader._catchups
    with pytest.raises(SnapshotError, match=ERR_CATCHUPS_RUNNING):
        leader.install_snapshot(b"y")
    # Forced, the catch-up goes on from the snapshot (its entries are gone from the log).
    leader.install_snapshot(snapshot_of(net.applied[leader.id]), force=True)
    assert leader.base_index == leader.applied
    net.down.discard(lagging)
    net.restart(lagging)
    net.advance(5)
    assert net.leader() is leader and net.nodes[lagging].commit == leader.commit == leader.last_index
    assert net.nodes[lagging].snapshot == leader.snapshot
    net.check_logs()


def test_a_follower_behind_the_compaction_is_sent_the_snapshot_then_the_entries():
    net = Network(3, seed=6)
    net.advance(2 * MAX_ELECTION_TIMEOUT)
    leader = net.leader()
    assert leader is not None
    lagging = next(i for i in net.ids if i != leader.id)
    net.down.add(lagging)
    for i in range(20):
        leader.propose(b"m%d" % i)
        net.collect(leader.id)
        net.advance(0.05)
    net.advance(2)
    at = leader.applied
    leader.install_snapshot(snapshot_of(net.applied[leader.id]))
    for i in range(3):
        leader.propose(b"after%d" % i)
    net.collect(leader.id)
    net.advance(1)
    assert leader.base_index == at and leader.log[0].index == at + 1
    net.down.discard(lagging)
    net.restart(lagging)
    net.advance(5)
    node = net.nodes[lagging]
    assert node.snapshot is not None and node.snapshot.index == at
    assert node.commit == leader.commit and node.last_index == leader.last_index
    # Its upper layer restored the snapshot's state, then applied what followed.
    assert [c.entry.data for c in net.applied[lagging]][-3:] == [b"after0", b"after1", b"after2"]
    assert [c.index for c in restore(node.snapshot.data)] == list(range(1, at + 1))
    net.check_logs()


def test_the_snapshot_holds_the_peer_state_at_its_index():
    net = Network(3, seed=2)
    net.advance(2 * MAX_ELECTION_TIMEOUT)
    leader = net.leader()
    assert leader is not None
    leader.propose(b"x")
    net.collect(leader.id)
    net.advance(1)
    at = leader.applied
    newcomer = "newpeer1"
    leader.add_peer(newcomer)
    net.collect(leader.id)
    net.advance(1)
    assert newcomer in leader.peers and leader.commit > at
    snap = leader.install_snapshot(b"before the add", at)
    assert snap.peers is not None and newcomer not in snap.peers.known_peers
    assert newcomer in leader.peers  # the AddPeer entry after the snapshot is still in the log
    leader.install_snapshot(b"after the add")
    assert leader.snapshot.peers is not None and newcomer in leader.snapshot.peers.known_peers
    assert newcomer in leader.peers


RECORDED = Path(__file__).parent / "data" / "snapshots_nats_server_2.15.1"


@pytest.mark.parametrize("group", sorted(p.name for p in RECORDED.iterdir()))
def test_2_15_1s_snapshot_files_are_read_and_written_byte_for_byte(tmp_path, group):
    """Written by 2.15.1 (record_snapshots.py): the checksum verifies under the group's key, the
    peer state decodes, a node starts from it, and natserver encodes it to the same bytes."""
    shutil.copytree(RECORDED / group, tmp_path / group)
    [path] = (tmp_path / group / "snapshots").iterdir()
    storage = FileStorage(tmp_path / group)
    snapshot = storage.load().snapshot
    assert snapshot is not None and path.name == f"snap.{snapshot.term}.{snapshot.index}"
    assert snapshot.peers is not None and len(snapshot.peers.known_peers) == 3
    assert storage.encode_snapshot(snapshot) == path.read_bytes()
    node = Node(snapshot.peers.known_peers[0], group, [], FileStorage(tmp_path / group), rng=random.Random(1),
                now=Clock())
    assert node.peers == list(snapshot.peers.known_peers) and node.commit == snapshot.index
    [first] = node.take_committed()
    assert (first.index, first.entry.type, first.entry.data) == (snapshot.index, EntryType.SNAPSHOT, snapshot.data)
