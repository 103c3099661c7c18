"""A node's persisted state: the file storage keeps raft.go's tav.idx and peers.idx formats,
survives a reopen, and drops a torn last log record; memory storage is the same protocol."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from natserver.raft import Entry, EntryType, FileStorage, LogEntry, MemoryStorage, PeerState, StorageError
from natserver.raft.storage import _RECORD, Snapshot


@pytest.fixture(params=["file", "memory"])
def make_storage(request, tmp_path):
    if request.param == "file":
        return lambda: FileStorage(tmp_path / "group")
    memory = MemoryStorage()
    return lambda: memory


def entries(first: int, count: int, term: int = 1) -> list[LogEntry]:
    return [LogEntry(i, term, Entry(EntryType.NORMAL, b"data %d" % i)) for i in range(first, first + count)]


def test_what_was_saved_is_loaded_again(make_storage):
    storage = make_storage()
    assert storage.load().log == []
    storage.save_term_vote(7, "abcdefgh")
    storage.save_peer_state(PeerState(("abcdefgh", "12345678"), 2))
    storage.append(entries(1, 3))
    storage.append(entries(4, 2, term=2))
    storage.truncate(4)
    storage.append([LogEntry(5, 3, Entry(EntryType.PEER_STATE, b"x"))])
    again = make_storage().load()
    assert (again.term, again.vote) == (7, "abcdefgh")
    assert again.peer_state == PeerState(("abcdefgh", "12345678"), 2)
    assert [(e.index, e.term) for e in again.log] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 3)]
    assert again.log[4].entry == Entry(EntryType.PEER_STATE, b"x")
    assert again.log[0].entry.data == b"data 1"


def test_a_gap_in_the_log_is_refused(make_storage):
    storage = make_storage()
    storage.load()
    storage.append(entries(1, 2))
    with pytest.raises(StorageError):
        storage.append(entries(4, 1))


def test_files_are_raft_gos(tmp_path):
    storage = FileStorage(tmp_path)
    storage.load()
    storage.save_term_vote(3, "fjFyEjc1")
    # raft.go writeTermVote: the term (u64 little-endian) then the id voted for
    assert (tmp_path / "tav.idx").read_bytes() == struct.pack("<Q", 3) + b"fjFyEjc1"
    state = PeerState(("fjFyEjc1", "44jzkV9D", "BXScrY9i"), 3)
    storage.save_peer_state(state)
    # raft.go encodePeerState: size, count (u32), the ids, the domain extension (u16)
    assert (tmp_path / "peers.idx").read_bytes() == struct.pack("<II", 3, 3) + b"fjFyEjc144jzkV9DBXScrY9i\0\0"


def test_a_torn_last_record_is_dropped(tmp_path):
    storage = FileStorage(tmp_path)
    storage.load()
    storage.append(entries(1, 3))
    log = tmp_path / "log.wal"
    whole = log.read_bytes()
    log.write_bytes(whole[:-4])  # a crash in the middle of the third record
    reopened = FileStorage(tmp_path)
    assert [e.index for e in reopened.load().log] == [1, 2]
    reopened.append(entries(3, 1, term=2))
    assert [(e.index, e.term) for e in FileStorage(tmp_path).load().log] == [(1, 1), (2, 1), (3, 2)]


def test_a_corrupt_record_ends_the_log(tmp_path):
    storage = FileStorage(tmp_path)
    storage.load()
    storage.append(entries(1, 3))
    log = tmp_path / "log.wal"
    data = bytearray(log.read_bytes())
    data[-2] ^= 0xFF  # a flipped bit in the last record's data: its CRC no longer matches
    log.write_bytes(bytes(data))
    assert [e.index for e in FileStorage(tmp_path).load().log] == [1, 2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["append", "truncate", "snapshot", "compact", "vote", "reopen"]),
                          st.integers(0, 6), st.binary(max_size=12)), max_size=25))
def test_the_file_storage_keeps_what_memory_storage_keeps(tmp_path_factory, ops):
    """Any sequence of writes (and reopenings) leaves the file storage, read back, holding what
    the memory storage holds."""
    folder = tmp_path_factory.mktemp("storage")
    memory, files = MemoryStorage(), FileStorage(folder)
    files.load()
    term = 0
    for op, n, data in ops:
        last = memory.state.log[-1].index if memory.state.log else (
            memory.state.snapshot.index if memory.state.snapshot else 0)
        if op == "append":
            entries = [LogEntry(last + i + 1, term, Entry(EntryType.NORMAL, data)) for i in range(n % 3 + 1)]
            memory.append(entries, n)
            files.append(entries, n)
        elif op == "truncate":
            base = memory.state.snapshot.index if memory.state.snapshot else 0
            keep = max(base, last - n)
            memory.truncate(keep)
            files.truncate(keep)
        elif op == "snapshot":
            snap = Snapshot(term, last + n, data)
            memory.install_snapshot(snap)
            files.install_snapshot(snap)
        elif op == "compact":
            base = memory.state.snapshot.index if memory.state.snapshot else 0
            snap = Snapshot(term, min(last, base + n), data, PeerState(("abcdefgh", "ijklmnop")[:n % 2 + 1], 3))
            memory.compact(snap)
            files.compact(snap)
        elif op == "vote":
            term += 1
            memory.save_term_vote(term, "abcdefgh"[: n + 2].ljust(8, "x"))
            files.save_term_vote(term, "abcdefgh"[: n + 2].ljust(8, "x"))
        else:
            files = FileStorage(folder)
            files.load()
    assert FileStorage(folder).load() == memory.load()


def test_deferred_sync_fsyncs_the_appends_once(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path / "group", deferred_sync=True)
    storage.load()
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    for i in range(1, 4):
        storage.append(entries(i, 1))
    assert synced == []  # written, not yet synced
    storage.sync()
    assert len(synced) == 1
    storage.sync()  # nothing new: no fsync
    assert len(synced) == 1
    assert [e.index for e in FileStorage(tmp_path / "group").load().log] == [1, 2, 3]


def test_a_failed_write_or_sync_is_a_storage_error(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path / "group", deferred_sync=True)
    storage.load()
    storage.append(entries(1, 1))

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StorageError, match="No space left on device"):
        storage.sync()
    with pytest.raises(StorageError, match="No space left on device"):
        storage.save_term_vote(2, "abcdefgh")


def test_an_append_entry_torn_between_its_records_is_dropped_whole(tmp_path):
    """An append entry of several entries is one index of several records; a crash between
    them (a kill -9 during a short write) leaves the index incomplete: it goes whole, as
    raft.go's WAL holds an append entry as one message (a follower keeping part of it would
    match the leader's index and term, and never get the rest)."""
    storage = FileStorage(tmp_path)
    storage.load()
    storage.append(entries(1, 1))
    many = LogEntry(2, 1, Entry(EntryType.NORMAL, b"a"), (Entry(EntryType.NORMAL, b"b"), Entry(EntryType.NORMAL, b"c")))
    storage.append([many], 1)  # (committed up to 1 when written)
    log = tmp_path / "log.wal"
    whole = log.read_bytes()
    assert FileStorage(tmp_path).load().log[-1] == many
    last = len(whole) - (_RECORD.size + 1)  # (the last record: its header and 1 byte of data)
    log.write_bytes(whole[:last])  # the third record never written
    reopened = FileStorage(tmp_path)
    state = reopened.load()
    assert [e.index for e in state.log] == [1] and state.commit == 0
    reopened.append([many])  # (the leader sends it again: appended after index 1)
    assert FileStorage(tmp_path).load().log[-1] == many
