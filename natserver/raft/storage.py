"""A RAFT node's persisted state: its term and vote, its peer state, its snapshot, its log.

raft.go keeps them in a group's store directory: ``tav.idx`` (term, u64 little-endian, then the
8-byte id voted for), ``peers.idx`` (the peer state, wire.PeerState) and the WAL (a message
store). :class:`FileStorage` keeps the first two byte for byte as raft.go writes them and the
log in a file of its own records; every write is fsynced before it returns, so a node answers
a vote or an append only once what it promised is on disk (raft.go writeTermVote and storeToWAL
do the same). A snapshot replaces the log up to its index: ``snapshot`` holds its term, index,
peer state and data, and the log goes on after it; one installed from a leader's catch-up
replaces the whole log (:meth:`Storage.install_snapshot`), one the node takes of its own state
drops the entries up to its index and keeps those after (:meth:`Storage.compact`, raft.go
InstallSnapshot and its WAL's Compact). FileStorage writes it as raft.go does:
``snapshots/snap.<term>.<index>``, holding the term and index (u64), the peer state's length
(u32) and the peer state, the data, and the HighwayHash-64 of all that keyed by the SHA-256 of
the group's name (raft.go encodeSnapshot); at load the latest one (by term, then index) is
checked and kept, the others removed (setupLastSnapshot).
``FileStorage(folder, deferred_sync=True)`` leaves the appends' fsync to :meth:`FileStorage.sync`
(a group commit: natserver.nrg syncs once per pass, before anything the node answered is sent).
:class:`MemoryStorage` is the same protocol in memory, for tests: what it holds
is what survives a node's restart.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from natserver.raft.highway import highwayhash64
from natserver.raft.wire import ID_LEN, Entry, PeerState, WireError

__all__ = ["FileStorage", "LogEntry", "MemoryStorage", "Persisted", "Snapshot", "Storage", "StorageError"]

TERM_VOTE_FILE = "tav.idx"  # raft.go termVoteFile
PEER_STATE_FILE = "peers.idx"  # raft.go peerStateFile
LOG_FILE = "log.wal"  # natserver's own log (raft.go uses a filestore for its WAL)
SNAPSHOTS_DIR = "snapshots"  # raft.go snapshotsDir
SNAPSHOT_NAME = "snap.{term}.{index}"  # raft.go snapFileT ("snap.%d.%d")
_SNAPSHOT = struct.Struct("<QQI")  # raft.go encodeSnapshot: term, index, the peer state's length
_CHECKSUM_LEN = 8  # highwayhash.Size64
MIN_SNAPSHOT_LEN = _SNAPSHOT.size + _CHECKSUM_LEN  # raft.go minSnapshotLen (28)
# A log record: crc32 of the rest, index, term, the commit index known when it was written
# (raft.go stores each append entry with its commit, and replays a restart's log up to it), the
# entry's data length, its type; the data.
_RECORD = struct.Struct("<IQQQIB")
# Set in a record's type byte when another record of the same index (the same append entry)
# follows: an index whose last record a crash tore away is dropped whole at load, not kept
# with some of its entries (raft.go writes an append entry as one WAL message).
_MORE = 0x80
_TERM = struct.Struct("<Q")


class StorageError(OSError):
    """The state could not be made durable (raft.go setWriteErr: the node stops answering)."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """What the log holds at ``index``, written in ``term``: one append entry's entries
    (raft.go storeToWAL: an append entry is one index, however many entries it carries; a
    2.15.1 leader sends the proposals queued together as one), ``entry`` and ``more``."""

    index: int
    term: int
    entry: Entry
    more: tuple[Entry, ...] = ()

    @property
    def entries(self) -> tuple[Entry, ...]:
        return (self.entry, *self.more) if self.more else (self.entry,)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine up to ``index`` (of ``term``): the upper layer's opaque data, and the
    committed peer state at that index (the peer set a restart from it starts with)."""

    term: int
    index: int
    data: bytes
    peers: PeerState | None = None


@dataclass(slots=True)
class Persisted:
    term: int = 0
    vote: str = ""
    peer_state: PeerState | None = None
    log: list[LogEntry] = field(default_factory=list)  # the entries after the snapshot's index
    snapshot: Snapshot | None = None
    # The highest commit index recorded with the log's entries (at most the last entry's): a
    # restart replays the entries up to it, as raft.go replays its WAL's committed entries.
    commit: int = 0


class Storage(Protocol):
    """What a node persists; each call is durable when it returns."""

    def load(self) -> Persisted: ...

    def save_term_vote(self, term: int, vote: str) -> None: ...

    def save_peer_state(self, state: PeerState) -> None: ...

    def append(self, entries: list[LogEntry], commit: int = 0) -> None:
        """Add entries after the last one (their indexes follow it); ``commit`` is an index
        known committed when they were written (kept with them, see Persisted.commit)."""

    def truncate(self, last_index: int) -> None:
        """Drop every entry after ``last_index``."""

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` and drop the whole log (it goes on after the snapshot's index)."""

    def compact(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (of the log's own entries) and drop the entries up to its index."""

    def sync(self) -> None:
        """Make durable what was deferred (appends of a storage that defers their sync)."""


class MemoryStorage:
    """The protocol in memory: a restarted node given the same object finds what was saved."""

    def __init__(self) -> None:
        self.state = Persisted()
        self.writes = 0  # durable writes made (each would be an fsync)
        self._commits: dict[int, int] = {}  # the commit stored with each entry, by index

    def load(self) -> Persisted:
        state = self.state
        last = state.log[-1].index if state.log else (state.snapshot.index if state.snapshot else 0)
        commit = max((self._commits.get(e.index, 0) for e in state.log), default=0)
        return Persisted(state.term, state.vote, state.peer_state, list(state.log), state.snapshot,
                         min(commit, last))

    def save_term_vote(self, term: int, vote: str) -> None:
        self.state.term, self.state.vote = term, vote
        self.writes += 1

    def save_peer_state(self, state: PeerState) -> None:
        self.state.peer_state = state
        self.writes += 1

    def append(self, entries: list[LogEntry], commit: int = 0) -> None:
        log = self.state.log
        base = self.state.snapshot.index if self.state.snapshot else 0
        for entry in entries:
            last = log[-1].index if log else base
            if entry.index != last + 1:
                raise StorageError(f"log gap: {entry.index} after {last}")
            log.append(entry)
            self._commits[entry.index] = commit
        self.writes += 1

    def truncate(self, last_index: int) -> None:
        base = self.state.snapshot.index if self.state.snapshot else 0
        del self.state.log[max(0, last_index - base):]
        self.writes += 1

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self.state.snapshot = snapshot
        self.state.log = []
        self.writes += 1

    def compact(self, snapshot: Snapshot) -> None:
        self.state.snapshot = snapshot
        self.state.log = [e for e in self.state.log if e.index > snapshot.index]
        if snapshot.peers is not None:
            self.state.peer_state = snapshot.peers
        self.writes += 1

    def sync(self) -> None:
        pass  # every call was durable already


def _storage_errors(method: Callable[..., None]) -> Callable[..., None]:
    """A write's OSError (a full disk, an I/O error) as StorageError: what the node stops on."""
    @functools.wraps(method)
    def write(self, *args) -> None:
        try:
            method(self, *args)
        except StorageError:
            raise
        except OSError as e:
            raise StorageError(f"{self.folder}: {e}") from e
    return write


def _write_synced(path: Path, data: bytes) -> None:
    """Write a small file whole and durably: a temporary file, fsync, rename, fsync the folder."""
    temp = path.with_suffix(path.suffix + ".tmp")
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class FileStorage:
    """The protocol in a directory: tav.idx and peers.idx as raft.go writes them, and a log
    of CRC-checked records (a torn last record, from a crash mid-write, is dropped on load)."""

    def __init__(self, folder: str | os.PathLike[str], *, deferred_sync: bool = False, group: str = "") -> None:
        self.folder = Path(folder)
        # The snapshot checksum's key: the SHA-256 of the group's name (raft.go keys its
        # highwayhash so); the group's folder is named after it (natserver.nrg, raft.go).
        self._hash_key = hashlib.sha256((group or self.folder.name).encode()).digest()
        self._snapshot_file: Path | None = None
        # Appends written, their fsync left to sync() (the other writes, rare, sync at once).
        self.deferred_sync = deferred_sync
        self._unsynced = False
        self.folder.mkdir(parents=True, exist_ok=True)
        self._offsets: list[int] = []  # where each entry's record starts, by index - base - 1
        self._end = 0
        self._base = 0  # the snapshot's index: the log's first entry is the next
        self._commit = 0  # the highest commit read with the log's records

    def load(self) -> Persisted:
        state = Persisted()
        tav = self.folder / TERM_VOTE_FILE
        if tav.exists():
            buf = tav.read_bytes()
            if len(buf) < _TERM.size:
                raise StorageError(f"{tav}: corrupt term and vote")
            state.term = _TERM.unpack_from(buf)[0]
            state.vote = buf[_TERM.size:_TERM.size + ID_LEN].rstrip(b"\0").decode()
        peers = self.folder / PEER_STATE_FILE
        if peers.exists():
            try:
                state.peer_state = PeerState.decode(peers.read_bytes())
            except WireError as e:
                raise StorageError(f"{peers}: {e}") from e
        state.snapshot = self._load_snapshot()
        if state.snapshot is not None:
            self._base = state.snapshot.index
            state.peer_state = state.snapshot.peers or state.peer_state
        state.log = self._read_log()
        state.commit = min(self._commit, state.log[-1].index if state.log else self._base)
        return state

    def _load_snapshot(self) -> Snapshot | None:
        """raft.go setupLastSnapshot: the latest of ``snapshots/`` (by term, then index), checked;
        the others, and names that do not parse, removed."""
        folder = self.folder / SNAPSHOTS_DIR
        if not folder.is_dir():
            return None
        found: dict[Path, tuple[int, int]] = {}
        for path in folder.iterdir():
            parts = path.name.split(".")
            if (len(parts) == 3 and parts[0] == "snap" and parts[1].isdigit() and parts[2].isdigit()
                    and path.name == SNAPSHOT_NAME.format(term=int(parts[1]), index=int(parts[2]))):
                found[path] = (int(parts[1]), int(parts[2]))
            else:
                path.unlink()
        if not found:
            return None
        latest = max(found, key=found.__getitem__)
        snapshot = self._decode_snapshot(latest, latest.read_bytes())
        for path in found:
            if path != latest:
                path.unlink()
        self._snapshot_file = latest
        return snapshot

    def _decode_snapshot(self, path: Path, buf: bytes) -> Snapshot:
        at = len(buf) - _CHECKSUM_LEN
        if len(buf) < MIN_SNAPSHOT_LEN or highwayhash64(self._hash_key, buf[:at]) != buf[at:]:
            raise StorageError(f"{path}: raft: snapshot corrupt")  # raft.go errSnapshotCorrupt
        term, index, size = _SNAPSHOT.unpack_from(buf)
        if _SNAPSHOT.size + size > at:
            raise StorageError(f"{path}: raft: snapshot corrupt")
        try:
            peers = PeerState.decode(buf[_SNAPSHOT.size:_SNAPSHOT.size + size]) if size else None
        except WireError as e:
            raise StorageError(f"{path}: {e}") from e
        return Snapshot(term, index, buf[_SNAPSHOT.size + size:at], peers)

    def encode_snapshot(self, snapshot: Snapshot) -> bytes:
        """raft.go encodeSnapshot's bytes (what ``snapshots/snap.<term>.<index>`` holds)."""
        peers = snapshot.peers.encode() if snapshot.peers is not None else b""
        buf = _SNAPSHOT.pack(snapshot.term, snapshot.index, len(peers)) + peers + snapshot.data
        return buf + highwayhash64(self._hash_key, buf)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        """Write it durably, then remove the previous one (raft.go installSnapshot)."""
        folder = self.folder / SNAPSHOTS_DIR
        folder.mkdir(exist_ok=True)
        path = folder / SNAPSHOT_NAME.format(term=snapshot.term, index=snapshot.index)
        _write_synced(path, self.encode_snapshot(snapshot))
        if self._snapshot_file is not None and self._snapshot_file != path:
            self._snapshot_file.unlink(missing_ok=True)
        self._snapshot_file = path

    def _read_log(self) -> list[LogEntry]:
        path = self.folder / LOG_FILE
        self._offsets, self._end, self._commit = [], 0, 0
        if not path.exists():
            path.touch()
            return []
        buf = path.read_bytes()
        log: list[LogEntry] = []
        at = stale = 0
        whole = True  # the last index read has all its records
        commit_before = 0  # the commit read before the last index's records
        while at + _RECORD.size <= len(buf):
            crc, index, term, commit, size, kind = _RECORD.unpack_from(buf, at)
            end = at + _RECORD.size + size
            if end > len(buf) or zlib.crc32(buf[at + 4:end]) != crc:
                break
            more, kind = kind & _MORE, kind & ~_MORE
            if index <= self._base and not log:  # in the snapshot (a compaction cut short)
                stale = end
                at = end
                continue
            if log and index == log[-1].index:  # another entry of the same append entry
                prev = log[-1]
                log[-1] = LogEntry(prev.index, prev.term, prev.entry, (*prev.more, Entry(kind, buf[at + _RECORD.size:end])))
                self._commit = max(self._commit, commit)
                whole = not more
                at = end
                continue
            if index != self._base + len(log) + 1:
                break
            commit_before = self._commit
            log.append(LogEntry(index, term, Entry(kind, buf[at + _RECORD.size:end])))
            self._commit = max(self._commit, commit)
            self._offsets.append(at)
            whole = not more
            at = end
        if not whole:  # a torn append entry: the index goes whole (it was never acknowledged)
            at = self._offsets.pop()
            log.pop()
            self._commit = commit_before
        self._end = at
        if at != len(buf):  # a torn or corrupt tail: what follows the last good record goes
            self._truncate_file(at)
        if stale:  # records the snapshot holds, left by a compaction cut short: dropped now
            self._rewrite_log(buf[stale:at])
            self._offsets = [o - stale for o in self._offsets]
        return log

    def _rewrite_log(self, records: bytes) -> None:
        """Replace the log file with ``records`` (whole, durably: raft.go's WAL Compact)."""
        _write_synced(self.folder / LOG_FILE, records)
        self._end = len(records)
        self._unsynced = False

    def _truncate_file(self, size: int) -> None:
        with open(self.folder / LOG_FILE, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())
        self._end = size

    @_storage_errors
    def save_term_vote(self, term: int, vote: str) -> None:
        _write_synced(self.folder / TERM_VOTE_FILE, _TERM.pack(term) + vote.encode().ljust(ID_LEN, b"\0"))

    @_storage_errors
    def save_peer_state(self, state: PeerState) -> None:
        _write_synced(self.folder / PEER_STATE_FILE, state.encode())

    @_storage_errors
    def append(self, entries: list[LogEntry], commit: int = 0) -> None:
        if not entries:
            return
        records = []
        at = self._end
        offsets: list[int] = []
        for entry in entries:
            if entry.index != self._base + len(self._offsets) + len(offsets) + 1:
                raise StorageError(f"log gap at {entry.index}")
            offsets.append(at)
            last = len(entry.entries) - 1
            for i, item in enumerate(entry.entries):  # (one record each, the same index: read back as one)
                kind = item.type | (_MORE if i < last else 0)
                body = _RECORD.pack(0, entry.index, entry.term, commit, len(item.data), kind)[4:]
                body += item.data
                record = struct.pack("<I", zlib.crc32(body)) + body
                records.append(record)
                at += len(record)
        with open(self.folder / LOG_FILE, "r+b") as f:
            f.seek(self._end)
            f.write(b"".join(records))
            f.flush()
            if self.deferred_sync:
                self._unsynced = True
            else:
                os.fsync(f.fileno())
        self._offsets += offsets
        self._end = at

    @_storage_errors
    def sync(self) -> None:
        if not self._unsynced:
            return
        fd = os.open(self.folder / LOG_FILE, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False

    @_storage_errors
    def truncate(self, last_index: int) -> None:
        keep = max(0, last_index - self._base)
        if keep >= len(self._offsets):
            return
        self._truncate_file(self._offsets[keep])
        del self._offsets[keep:]

    @_storage_errors
    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._write_snapshot(snapshot)
        self._truncate_file(0)
        self._offsets = []
        self._base = snapshot.index

    @_storage_errors
    def compact(self, snapshot: Snapshot) -> None:
        self.sync()  # the entries kept were acknowledged: they stay durable in the new file
        self._write_snapshot(snapshot)
        drop = max(0, min(snapshot.index - self._base, len(self._offsets)))
        start = self._offsets[drop] if drop < len(self._offsets) else self._end
        with open(self.folder / LOG_FILE, "rb") as f:
            f.seek(start)
            kept = f.read(self._end - start)
        self._rewrite_log(kept)
        self._offsets = [o - start for o in self._offsets[drop:]]
        self._base = snapshot.index
        if snapshot.peers is not None:
            self.save_peer_state(snapshot.peers)
