"""A stream group's committed entries, recorded from 2.15.1, applied to natserver's stores:
at every point of the recording the store holds what 2.15.1's STREAM.INFO and
STREAM.MSG.GET answered then. And the follower's rules: the last-sequence check (clfs,
skipped proposals, a gap), a snapshot installed on a lagging follower and its catch-up."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from natserver.jetstream.replication.group_codec import (
    DeleteBlock,
    JsonOp,
    Op,
    StreamMsg,
    StreamState,
    decode_snapshot_file,
    decode_stream_op,
)
from natserver.jetstream.replication.stream_group import SequenceMismatch, StreamApplier
from natserver.jetstream.store import FileStore, MemoryStore, Store
from natserver.jetstream.stream import StreamConfig
from natserver.jetstream.util import rfc3339nano
from natserver.raft.wire import AppendEntry, Entry, EntryType
from tests.jetstream.replication.recorded import load, point

NODE_N2 = "44jzkV9D"  # raft.go's id of server n2 (the follower killed and caught up)
FIRST_RESTART = "restarted the other two"  # the recording's point after the graceful restarts


def _store(name: str, folder: Path) -> Store:
    cfg = load().raw["streams"][name]
    config = StreamConfig.from_json(cfg)
    if cfg["storage"] == "memory":
        return MemoryStore(config)
    return FileStore(str(folder / name), config)


def _replay(name: str, upto: int, folder: Path) -> StreamApplier:
    rec = load()
    applier = StreamApplier(_store(name, folder))
    for entry in rec.groups[rec.names[name]].committed(upto):
        applier.apply(entry)
    return applier


def _assert_same(store: Store, answers: dict) -> None:
    state = answers["info"]["state"]
    assert (store.msgs, store.bytes, store.first_seq, store.last_seq) == (
        state["messages"], state["bytes"], state["first_seq"], state["last_seq"])
    assert len(store.deleted()) == state.get("num_deleted", 0)
    assert len(store.subjects_state(b">")) == state.get("num_subjects", 0)
    assert rfc3339nano(store.last_ts) == state["last_ts"] or not store.last_ts
    for seq, answer in answers["msgs"].items():
        got = store.load_msg(int(seq))
        if "error" in answer:
            assert got is None  # (404, or 400 for sequence 0 of an empty stream)
            continue
        msg = answer["message"]
        assert got is not None
        assert (got.seq, got.subject.decode(), got.hdr, got.data, rfc3339nano(got.ts)) == (
            msg["seq"], msg["subject"], base64.b64decode(msg.get("hdrs", "")),
            base64.b64decode(msg.get("data", "")), msg["time"])


def _points() -> list[tuple[str, str]]:
    out = []
    for p in load().raw["points"]:
        for name in load().raw["streams"]:
            out.append((p["step"], name))
    return out


@pytest.mark.parametrize(("step", "name"), _points())
def test_a_replay_holds_what_2_15_1_answered(step: str, name: str, tmp_path: Path) -> None:
    at = point(step)
    applier = _replay(name, at["frames"], tmp_path)
    answers = at["streams"][name]
    restarted = step.startswith(FIRST_RESTART) or step.startswith("restarted n")
    if restarted and load().raw["streams"][name]["storage"] == "memory":
        # every server of a memory stream restarted: 2.15.1 starts it empty (its log and
        # snapshot are on disk, the messages were not); the replica keeps what it applied
        assert answers["info"]["state"]["messages"] == 0 and applier.store.msgs > 0
        return
    _assert_same(applier.store, answers)
    assert applier.skipped == 0 and applier.clfs == 0


def test_the_snapshot_of_a_replayed_store_is_2_15_1s_bytes(tmp_path: Path) -> None:
    """S1's snapshot as 2.15.1's servers wrote it at their graceful stop, and as natserver's
    applied store gives it."""
    rec = load()
    written = [v for k, v in rec.raw["snapshots"].items() if f"/{rec.names['S1']}/" in k]
    assert written
    data = decode_snapshot_file(bytes.fromhex(written[0])).data
    applier = _replay("S1", point("killed")["frames"], tmp_path)
    assert applier.snapshot().encode() == data


def test_a_lagging_follower_installs_the_snapshot_and_catches_up(tmp_path: Path) -> None:
    """n2 was killed after 'published after purge' (S1 at 11), three more were published, the
    others restarted (their logs compacted into snapshots); restarted, n2 got S1's snapshot on
    its catch-up inbox and asked for 12..14 on $JSC.SYNC, which came on $JSC.R."""
    rec = load()
    applier = _replay("S1", point("published after purge")["frames"], tmp_path)
    assert applier.store.last_seq == 11
    frames = rec.raw["frames"]
    sync_at = next(i for i, s, _ in rec.catchup if s.startswith("$JSC.SYNC."))
    snap_frame = max(i for i, f in enumerate(frames[:sync_at]) if f["subject"].startswith("$NRG.CR.")
                     and any(e.type == EntryType.SNAPSHOT and e.data[:1] == b"*"
                             for e in AppendEntry.decode(bytes.fromhex(f["data"])).entries))
    ae = AppendEntry.decode(bytes.fromhex(frames[snap_frame]["data"]))
    snap = next(e for e in ae.entries if e.type == EntryType.SNAPSHOT)
    request = applier.install_snapshot(StreamState.decode(snap.data), NODE_N2, ae.pindex)
    assert request is not None
    assert request.encode() == bytes.fromhex(frames[sync_at]["data"])
    reply = frames[sync_at]["reply"]
    for _, subject, data in rec.catchup:
        if subject == reply and data:
            applier.apply_catchup(data)
    _assert_same(applier.store, point("restarted n")["streams"]["S1"])


def _msg(lseq: int, payload: bytes, hdr: bytes = b"", ts: int = 1_000) -> StreamMsg:
    return StreamMsg(b"a", b"", hdr, payload, lseq, ts + lseq)


def test_a_proposal_behind_the_store_is_skipped_and_counted() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    for lseq in range(3):
        applier.apply_msg(_msg(lseq, b"%d" % lseq))
    assert applier.store.last_seq == 3
    assert not applier.apply_msg(_msg(1, b"again"))  # a re-delivery of an applied entry
    assert applier.skipped == 1 and applier.store.msgs == 3


def test_a_failed_proposal_bumps_clfs_and_the_next_lines_up() -> None:
    """A duplicate message id found on apply is not stored (every peer finds it): clfs counts
    it, and the leader's next proposal (made with last = 2 + 1 failed) lines up."""
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    dup = b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"
    assert applier.apply_msg(_msg(0, b"one", dup))
    assert applier.apply_msg(_msg(1, b"two"))
    assert not applier.apply_msg(_msg(2, b"one again", dup))
    assert applier.clfs == 1 and applier.store.last_seq == 2
    assert applier.apply_msg(_msg(3, b"three"))  # lseq 3 = last 2 + clfs 1
    assert applier.store.load_msg(3).data == b"three"
    assert applier.snapshot().failed == 1


def test_a_proposal_after_a_gap_is_a_mismatch() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    applier.apply_msg(_msg(0, b"one"))
    with pytest.raises(SequenceMismatch):
        applier.apply_msg(_msg(5, b"after a gap"))
    assert applier.store.last_seq == 1


def test_an_empty_store_takes_the_leaders_position() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    assert applier.apply_msg(_msg(41, b"late joiner"))
    assert (applier.store.first_seq, applier.store.last_seq) == (42, 42)


def test_a_batch_broken_before_its_commit_is_dropped() -> None:
    rec = load()
    batch = [decode_stream_op(e.data) for e in rec.groups[rec.names["S1"]].committed(point("atomic")["frames"])
             if e.type == EntryType.NORMAL and e.data[0] in (16, 17)]
    assert len(batch) == 3
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["s1.>"]})))
    applier.store.compact(7)  # the batch was proposed after 6
    applier.apply_op(batch[0])
    applier.apply_op(batch[2])  # sequence 3 after 1: rejected
    assert applier.store.msgs == 0
    for op in batch:
        applier.apply_op(op)
    assert [applier.store.load_msg(s).data for s in (7, 8, 9)] == [b"batch 1", b"batch 2", b"batch 3"]


def test_a_snapshot_with_deletes_removes_them_and_asks_for_the_rest() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    for lseq in range(6):
        applier.apply_msg(_msg(lseq, b"m"))
    leader = StreamState(4, 0, 3, 9, 2, 2, (DeleteBlock(4, 1), DeleteBlock(8, 1)))
    request = applier.install_snapshot(leader, "peer", 77)
    assert applier.store.first_seq == 3 and applier.store.deleted() == [4]
    assert applier.clfs == 2
    assert request is not None and (request.first_seq, request.last_seq, request.min_applied) == (7, 9, 77)
    assert StreamApplier(applier.store).install_snapshot(StreamState(3, 0, 3, 6, 0, 0), "", 1) is None


def test_deletes_of_what_is_not_there_are_ignored(tmp_path: Path) -> None:
    """A delete of a sequence the store does not hold (the leader answered the requester) and
    a snapshot whose deleted run is far larger than the store: nothing breaks, the work is the
    store's size."""
    applier = StreamApplier(_store("S1", tmp_path))
    for lseq in range(3):
        applier.apply_msg(_msg(lseq, b"m"))
    applier.apply(Entry(EntryType.NORMAL, JsonOp(Op.DELETE_MSG, {"stream": "S1", "seq": 99}).encode()))
    applier.apply(Entry(EntryType.NORMAL, JsonOp(Op.DELETE_MSG, {"stream": "S1", "seq": 2}).encode()))
    assert applier.store.deleted() == [2]
    huge = StreamState(1, 0, 1, 1 << 40, 0, (1 << 40) - 1, (DeleteBlock(2, (1 << 40) - 2),))
    request = applier.install_snapshot(huge, "", 5)
    assert applier.store.msgs == 1 and request is not None and request.first_seq == 4


def test_the_dedup_window_forgets_old_ids() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})), duplicate_window=100)
    for lseq in range(50):
        applier.apply_msg(StreamMsg(b"a", b"", b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % lseq, b"", lseq, 10 * lseq))
    assert len(applier.msg_ids) == 10  # ids of the last 100 ns
    again = StreamMsg(b"a", b"", b"NATS/1.0\r\nNats-Msg-Id: m0\r\n\r\n", b"", 50, 500)
    assert applier.apply_msg(again)  # m0 is outside the window: stored
    assert not applier.apply_msg(StreamMsg(b"a", b"", again.hdr, b"", 51, 501))
    assert applier.clfs == 1


def test_a_snapshot_entry_leaves_its_sync_request() -> None:
    applier = StreamApplier(MemoryStore(StreamConfig.from_json({"name": "X", "subjects": ["a"]})))
    applier.apply(Entry(EntryType.SNAPSHOT, StreamState(2, 0, 1, 2, 0, 0).encode()))
    assert applier.sync_request is not None and (applier.sync_request.first_seq, applier.sync_request.last_seq) == (1, 2)
