"""The file store's compact index (msgindex.MsgIndex) and its per-segment index files.

* A restart that reads the index files ends in exactly the state of one that reads every
  record (the files deleted), after random stores, deletes (erased or not), subject purges,
  compactions and skipped sequences, with crashes (kill -9: the buffer lost) in between.
* A stale, torn or corrupt index file is not used: the segment is read record by record.
* A restart reads records only after the last checkpoint of the active segment (not timed:
  the records checked are counted).
* The index costs at most 32 bytes of memory a message (tracemalloc, 200 000 messages).
"""

from __future__ import annotations

import os
import random
import struct
import tracemalloc
import zlib

import pytest

from natserver.jetstream import store as store_module
from natserver.jetstream.msgindex import DEAD, DictIndex, MsgIndex
from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig, check_stream_config


def config(**changes) -> StreamConfig:
    changes.setdefault("name", "S")
    return check_stream_config(StreamConfig(**changes), {})


def crash(store: FileStore) -> None:
    """kill -9: what reached the OS stays, the buffer is lost."""
    store.closed = True
    for fd in store.fds.values():
        os.close(fd)
    store.fds.clear()


def state(store: FileStore) -> dict:
    return {
        "msgs": store.msgs, "bytes": store.bytes, "first": (store.first_seq, store.first_ts),
        "last": (store.last_seq, store.last_ts), "fss": {k: v[:3] for k, v in store.fss.items()},
        "live": {seg: n for seg, n in store.live.items() if n},
        "entries": list(store.idx.items()),
        "data": {seq: (m.subject, m.hdr, m.data, m.ts) for seq in store.idx
                 if (m := store.load_msg(seq)) is not None},
        "deleted": store.deleted(),
    }


def drop_index_files(path) -> int:
    msgs = os.path.join(path, "msgs")
    names = [n for n in os.listdir(msgs) if n.endswith(store_module.INDEX_SUFFIX)]
    for name in names:
        os.unlink(os.path.join(msgs, name))
    return len(names)


@pytest.fixture
def small_checkpoints(monkeypatch):
    monkeypatch.setattr(store_module, "CHECKPOINT_BYTES", 700)


@pytest.mark.parametrize("seed", range(12))
def test_index_files_give_the_state_a_full_read_gives(tmp_path, small_checkpoints, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "s")
    cfg = config(max_msgs_per_subject=rng.choice([-1, 3]), max_msgs=rng.choice([-1, 150]))
    store = FileStore(path, cfg, segment_size=1500)
    ts = 1_000
    for step in range(400):
        ts += rng.randrange(3)
        op = rng.random()
        if op < 0.70:
            subj = b"s.%d" % rng.randrange(8)
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % step if rng.random() < 0.2 else b""
            store.store_msg(subj, hdr, os.urandom(rng.randrange(60)), ts)
        elif op < 0.80 and store.msgs:
            seq = rng.randrange(store.first_seq, store.last_seq + 1)
            if seq in store.idx:
                store.remove_msg(seq, erase=rng.random() < 0.5)
        elif op < 0.83:
            store.skip_msg(ts)
        elif op < 0.85 and store.msgs:
            store.purge_ex(b"s.%d" % rng.randrange(8), 0, rng.choice([0, 1]))
        elif op < 0.86 and store.msgs:
            store.compact(rng.randrange(store.first_seq, store.last_seq + 2))
        if rng.random() < 0.3:
            store.flush()
        if rng.random() < 0.02:
            crash(store) if rng.random() < 0.5 else store.stop()
            store = FileStore(path, cfg, segment_size=1500)
    store.flush()
    crash(store)
    with_files = FileStore(path, cfg, segment_size=1500)
    expected = state(with_files)
    with_files.stop()
    assert drop_index_files(path) > 0
    read_all = FileStore(path, cfg, segment_size=1500)
    assert state(read_all) == expected
    read_all.stop()
    # ... and the index files written by that full read give it again.
    assert state(again := FileStore(path, cfg, segment_size=1500)) == expected
    again.stop()


def fill(path, n: int, **kwargs) -> FileStore:
    store = FileStore(str(path), config(), **kwargs)
    for i in range(n):
        store.store_msg(b"s.%d" % (i % 5), b"", b"%06d" % i, 1_000 + i)
        if i % 50 == 49:
            store.flush()
    store.flush()
    return store


@pytest.mark.parametrize("damage", ["flip", "truncate-index", "segment-cut", "garbage"])
def test_a_bad_index_file_is_not_used(tmp_path, small_checkpoints, damage, caplog):
    path = tmp_path / "s"
    store = fill(path, 600, segment_size=4000)
    expected = state(store)
    crash(store)
    msgs = path / "msgs"
    target = msgs / "2.idx"
    raw = bytearray(target.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "truncate-index":
        target.write_bytes(bytes(raw[:-10]))
    elif damage == "garbage":
        target.write_bytes(os.urandom(len(raw)))
    else:  # the segment lost its end (the index covers more than there is)
        seg = msgs / "2.seg"
        os.truncate(seg, seg.stat().st_size - 30)
    (msgs / "3.idx.tmp").write_bytes(b"half written")  # (a crash during a write)
    reopened = FileStore(str(path), config(), segment_size=4000)
    assert not (msgs / "3.idx.tmp").exists()
    assert "index file not used" in caplog.text
    got = state(reopened)
    if damage == "segment-cut":
        assert got["msgs"] < expected["msgs"]  # the cut messages are gone, nothing else
        assert all(expected["data"][seq] == data for seq, data in got["data"].items())
    else:
        assert got == expected
    reopened.stop()
    assert target.exists()  # written again from the records


def test_restart_reads_only_the_records_after_the_last_checkpoint(tmp_path, small_checkpoints, monkeypatch):
    path = tmp_path / "s"
    store = fill(path, 3000, segment_size=16000)
    # A torn record at the end, as kill -9 in the middle of a write leaves it.
    store.store_msg(b"s.x", b"", b"torn", 9_999)
    rec = bytes(store.buf)
    os.pwrite(store.fds[store.active], rec[: len(rec) // 2], store.flushed)
    expected = {k: v for k, v in state(store).items() if k not in ("entries", "data", "fss", "bytes", "msgs",
                                                                  "last", "live")}
    crash(store)
    checked = []
    real = store_module._check_record
    monkeypatch.setattr(store_module, "_check_record", lambda *a: checked.append(1) or real(*a))
    reopened = FileStore(str(path), config(), segment_size=16000)
    # 3000 records of 41 bytes in segments of 16000, checkpoints every 700: at most the
    # records written after the active segment's last checkpoint are read.
    assert 0 < len(checked) <= 700 // 41 + 2
    assert reopened.msgs == 3000 and reopened.last_seq == 3000 and reopened.lost == 1
    assert reopened.load_msg(3000).data == b"%06d" % 2999
    assert {k: v for k, v in state(reopened).items() if k in expected} == expected
    reopened.stop()


def test_duplicate_ids_recovered_through_index_files(tmp_path, small_checkpoints):
    """The Nats-Msg-Ids within the duplicate window are recovered as from a full read."""
    path = str(tmp_path / "s")
    now = 10**18
    store = FileStore(path, config(), segment_size=1500, dedup_window=60 * 10**9, now=now)
    for i in range(300):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\n\r\n" % i if i % 3 else b""
        store.store_msg(b"s.%d" % (i % 4), hdr, b"%06d" % i, now - 120 * 10**9 + i * 10**9 // 2)
        if i % 7 == 0:
            store.flush()
        if i % 50 == 10:
            store.remove_msg(i - 5)
    store.flush()
    crash(store)
    with_files = FileStore(path, config(), segment_size=1500, dedup_window=60 * 10**9, now=now)
    got = with_files.recovered_ids
    with_files.stop()
    assert drop_index_files(path) > 2
    read_all = FileStore(path, config(), segment_size=1500, dedup_window=60 * 10**9, now=now)
    assert got == read_all.recovered_ids and len(got) > 50
    read_all.stop()


def test_index_memory_per_message(tmp_path):
    n = 200_000
    store = FileStore(str(tmp_path / "s"), config())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        store.store_msg(b"s.a", b"", b"x" * 16, 1_700_000_000_000_000_000 + i)
        if i % 1000 == 999:
            store.flush()
    store.flush()
    per_message = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
    store.stop()
    assert per_message <= 32, per_message


@pytest.mark.parametrize("subjects", [6, 300], ids=["few-subjects", "many-subjects"])
def test_msgindex_matches_a_dict(subjects):
    """MsgIndex's scans answer as DictIndex's (the memory store's) over random contents
    (few subjects: sets of ids and C searches; many: subjects tested as they are met)."""
    rng = random.Random(7)
    compact, plain = MsgIndex(), DictIndex()
    seq = 0
    for _ in range(3000):
        if rng.random() < 0.7:
            seq += rng.choice([1, 1, 1, 2, 5])
            subj = b"s.%d" % rng.randrange(subjects)
            entry = (subj, seq * 10, rng.randrange(100), 1 + seq // 100, seq * 7)
            compact[seq] = entry
            plain[seq] = entry
        elif plain:
            victim = rng.choice(list(plain)) if rng.random() < 0.5 else min(plain)
            assert compact.pop(victim) == plain.pop(victim)
    assert list(compact.items()) == list(plain.items()) and len(compact) == len(plain)
    lo, hi = 1, seq
    for _ in range(200):
        a, b = sorted(rng.randrange(lo, hi + 1) for _ in range(2))
        subj = b"s.%d" % rng.randrange(subjects + 1)
        wanted = {b"s.1", b"s.3", b"s.200"}
        match = wanted.__contains__
        assert compact.find(subj, a, b) == plain.find(subj, a, b)
        assert compact.rfind(subj, b, a) == plain.rfind(subj, b, a)
        assert compact.next_live(a, b) == plain.next_live(a, b)
        assert compact.prev_live(b, a) == plain.prev_live(b, a)
        assert compact.find_match(match, a, b) == plain.find_match(match, a, b)
        assert compact.matching(match, a, b, 5) == plain.matching(match, a, b, 5)
        assert compact.matching(None, a, b) == plain.matching(None, a, b)
        assert compact.count_match(match, a, b) == plain.count_match(match, a, b)
        assert compact.count_match(None, a, b) == plain.count_match(None, a, b)
        assert compact.missing(a, b) == plain.missing(a, b)
        assert compact.first_at_time(a * 10) == plain.first_at_time(a * 10)
        assert plain.first_at_time(a * 10) == next((s for s, e in plain.items() if e[1] >= a * 10), 0)  # (a scan)
    for touched in ({b"s.0", b"s.2", b"s.9"}, {b"s.%d" % k for k in range(0, subjects, 3)}):
        assert compact.bounds(touched) == plain.bounds(touched)
    # Subject ids of subjects no message has any more are reused.
    for s in list(plain):
        compact.pop(s)
    assert not compact and compact.sid_of == {} and DEAD not in compact.refs


def test_index_files_that_can_not_be_written(tmp_path, small_checkpoints, monkeypatch):
    """A full disk for the index files only: the store works on, leaves no half-written
    file, and the next start reads the records."""
    real_open = open

    def failing_open(path, mode="r", *args, **kwargs):
        if "w" in mode and str(path).endswith(".idx.tmp"):
            handle = real_open(path, mode, *args, **kwargs)
            handle.close()
            raise OSError(28, "No space left on device", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(store_module, "open", failing_open, raising=False)
    path = tmp_path / "s"
    store = fill(path, 600, segment_size=4000)
    expected = state(store)
    crash(store)
    assert not [n for n in os.listdir(path / "msgs") if ".idx" in n]
    monkeypatch.undo()
    reopened = FileStore(str(path), config(), segment_size=4000)
    assert state(reopened) == expected
    reopened.stop()


# -- restarts from the index files' summaries (FileStore._recover_summary, load_step) ----------


def full_read(path, **kwargs) -> FileStore:
    """The store as the record-by-record recovery with every index file read builds it."""
    real = FileStore._recover_summary
    FileStore._recover_summary = lambda self, dedup_window, now: False
    try:
        return FileStore(str(path), config(), **kwargs)
    finally:
        FileStore._recover_summary = real


def summary_state(store: FileStore) -> dict:
    """What a summary restart answers before the arrays are read (STREAM.INFO's state)."""
    return {"msgs": store.msgs, "bytes": store.bytes, "first": (store.first_seq, store.first_ts),
            "last": (store.last_seq, store.last_ts), "fss": {k: v[:3] for k, v in store.fss.items()},
            "live": {seg: n for seg, n in store.live.items() if n}, "segs": list(store.segs),
            "active": (store.active, store.size, store.flushed, store.active_first, store.checkpointed)}


@pytest.mark.parametrize("seed", range(6))
def test_a_summary_restart_gives_the_state_a_full_read_gives(tmp_path, small_checkpoints, seed):
    rng = random.Random(seed)
    path = tmp_path / "s"
    store = FileStore(str(path), config(), segment_size=rng.choice([1500, 4000]))
    for i in range(rng.randrange(300, 900)):
        store.store_msg(b"s.%d" % rng.randrange(rng.choice([1, 3, 9])), b"", os.urandom(rng.randrange(40)), 1_000 + i)
        if rng.random() < 0.2:
            store.flush()
        if rng.random() < 0.1:
            store.skip_msg(1_000 + i)
    store.flush()
    crash(store)
    lazy = FileStore(str(path), config(), segment_size=4000)
    assert lazy.loading  # (nothing removed, no headers: the summaries say it all)
    before = summary_state(lazy)
    eager = full_read(path, segment_size=4000)
    assert not eager.loading
    assert before == summary_state(eager)
    steps = 0
    while lazy.load_step():
        steps += 1
    assert steps == len(lazy.segs) - 1 and not lazy.loading
    assert state(lazy) == state(eager) and summary_state(lazy) == before
    # ... the state the arrays give (msgindex's own passes), not only the other recovery's
    assert {k: v[:3] for k, v in lazy.fss.items()} == {k: v[:3] for k, v in lazy.idx.subject_state().items()}
    assert lazy.bytes == lazy.idx.total_size() and lazy.msgs == len(lazy.idx)
    lazy.stop()
    eager.stop()


@pytest.mark.parametrize("damage", ["missing", "stale", "torn", "garbage", "deleted", "headers"])
def test_no_summary_restart_when_the_files_do_not_say_it_all(tmp_path, small_checkpoints, damage):
    path = tmp_path / "s"
    store = fill(path, 600, segment_size=4000)
    if damage == "deleted":
        store.remove_msg(10)
    elif damage == "headers":
        store.store_msg(b"s.h", b"NATS/1.0\r\nK: v\r\n\r\n", b"h", 5_000)
    store.flush()
    if damage in ("deleted", "headers"):
        store._roll()  # (into a sealed segment's index file)
        store.flush()
    expected = state(store)
    crash(store)
    msgs = path / "msgs"
    target = msgs / "2.idx"
    if damage == "missing":
        target.unlink()
    elif damage == "stale":  # the segment lost its end
        seg = msgs / "2.seg"
        os.truncate(seg, seg.stat().st_size - 30)
    elif damage == "torn":
        target.write_bytes(target.read_bytes()[:-10])
    elif damage == "garbage":
        raw = bytearray(target.read_bytes())
        raw[8] ^= 0xFF  # (in the header: its own checksum fails)
        target.write_bytes(bytes(raw))
    reopened = FileStore(str(path), config(), segment_size=4000)
    assert not reopened.loading
    got = state(reopened)
    if damage == "stale":
        assert got["msgs"] < expected["msgs"]
        assert all(expected["data"][seq] == data for seq, data in got["data"].items())
    else:
        assert got == expected
    reopened.stop()


def test_an_index_file_damaged_after_a_summary_restart(tmp_path, small_checkpoints, caplog):
    """Its arrays no longer pass the checksum when load_step reads them: the segment's
    records are indexed instead, and the file written again."""
    path = tmp_path / "s"
    expected = state(store := fill(path, 600, segment_size=4000))
    crash(store)
    lazy = FileStore(str(path), config(), segment_size=4000)
    assert lazy.loading
    target = path / "msgs" / "2.idx"
    raw = bytearray(target.read_bytes())
    raw[200] ^= 0xFF  # (in the arrays)
    target.write_bytes(bytes(raw))
    assert state(lazy) == expected
    assert "reading its records" in caplog.text
    assert target.exists()
    lazy.stop()
    assert not (again := FileStore(str(path), config(), segment_size=4000)).loading or state(again) == expected
    again.stop()


def test_reads_and_a_publish_right_after_a_summary_restart(tmp_path, small_checkpoints):
    path = tmp_path / "s"
    store = fill(path, 600, segment_size=4000)
    store.store_msg(b"s.x", b"", b"tail", 9_000)  # (in the records after the last checkpoint)
    store.flush()
    crash(store)
    cfg = config()
    # By sequence and by subject, before anything else reads the arrays.
    lazy = FileStore(str(path), cfg, segment_size=4000)
    assert lazy.loading and lazy.msgs == 601 and lazy.last_seq == 601
    msg = lazy.load_msg(377)
    assert not lazy.loading
    assert (msg.seq, msg.subject, msg.data, msg.ts) == (377, b"s.1", b"%06d" % 376, 1_376)
    lazy.stop()
    lazy = FileStore(str(path), cfg, segment_size=4000)
    assert lazy.loading and lazy.fss[b"s.3"][2] == 599
    last = lazy.load_last_msg(b"s.3")
    assert (last.seq, last.data) == (599, b"%06d" % 598)
    assert lazy.load_last_msg(b"s.x").data == b"tail"
    lazy.stop()
    # A publish while the arrays are half read: it waits for the rest, then goes after them.
    lazy = FileStore(str(path), cfg, segment_size=4000)
    assert lazy.load_step() and lazy.loading
    assert lazy.store_msg(b"s.new", b"", b"new", 10_000) == 602
    assert not lazy.loading and lazy.msgs == 602 and lazy.fss[b"s.new"][:3] == [1, 602, 602]
    lazy.flush()
    expected = state(lazy)
    crash(lazy)
    again = FileStore(str(path), cfg, segment_size=4000)
    assert state(again) == expected
    again.stop()


def as_version_2(raw: bytes) -> bytes:
    """A version 3 index file written as the version before the summaries wrote it."""
    head = store_module._IDX_HEAD.unpack_from(raw, 0)
    count, n_subj = head[5], head[6]
    pos = store_module._IDX_HEAD.size
    parts = [store_module._IDX_HEAD_V2.pack(head[0], 2, *head[2:13]), raw[pos : pos + 20 * count]]
    pos += 20 * count
    for _ in range(n_subj):
        sid, sl, *_ = store_module._IDX_SUBJ.unpack_from(raw, pos)
        pos += store_module._IDX_SUBJ.size
        parts += [store_module._IDX_SUBJ_V2.pack(sid, sl), raw[pos : pos + sl]]
        pos += sl
    parts.append(raw[pos:-4])
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body))


def test_version_2_index_files_are_still_read(tmp_path, small_checkpoints, monkeypatch):
    path = tmp_path / "s"
    store = fill(path, 600, segment_size=4000)
    store.remove_msg(300)  # (a DEL in a summary: not the summary restart)
    store.flush()
    expected = state(store)
    crash(store)
    msgs = path / "msgs"
    for name in os.listdir(msgs):
        if name.endswith(".idx"):
            (msgs / name).write_bytes(as_version_2((msgs / name).read_bytes()))
    checked = []
    real = store_module._check_record
    monkeypatch.setattr(store_module, "_check_record", lambda *a: checked.append(1) or real(*a))
    reopened = FileStore(str(path), config(), segment_size=4000)
    assert state(reopened) == expected
    assert len(checked) < 100  # (the files were used: 600 records are not read one by one)
    reopened.stop()
