"""A consumer group's committed entries, recorded from 2.15.1, applied to the replicated
consumer state and loaded into natserver's Consumer: at every recorded point its info
(delivered, ack floor, ack pending, redelivered, pending, counted on the stream replayed to the
same point) is what 2.15.1's CONSUMER.INFO answered then."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from natserver.jetstream.consumer import Consumer, ConsumerConfig
from natserver.jetstream.replication.consumer_group import ConsumerApplier
from natserver.jetstream.replication.group_codec import (
    Acked,
    ConsumerState,
    Delivered,
    decode_consumer_op,
    decode_snapshot_file,
)
from natserver.raft.wire import AppendEntry, Entry, EntryType
from tests.jetstream.replication.recorded import load, point
from tests.jetstream.replication.test_stream_group import _replay

INFO_KEYS = ("delivered", "ack_floor", "num_ack_pending", "num_redelivered", "num_pending")
PURGED_FROM = "purged keep"  # the first point at which a purge moved S1's first sequence


def _compared(info: dict) -> dict:
    return {k: {kk: vv for kk, vv in info[k].items() if kk != "last_active"} if isinstance(info[k], dict) else info[k]
            for k in INFO_KEYS}


def _applier(name: str, upto: int, config: dict) -> ConsumerApplier:
    rec = load()
    applier = ConsumerApplier(config["ack_policy"], config["max_deliver"])
    for entry in rec.groups[rec.names[f"S1/{name}"]].committed(upto):
        applier.apply(entry)
    return applier


def _points() -> list[tuple[str, str]]:
    return [(p["step"], name) for p in load().raw["points"] for name, info in p["consumers"].items()
            if "error" not in info]


@pytest.mark.parametrize(("step", "name"), _points())
def test_a_replay_answers_consumer_info_as_2_15_1(step: str, name: str, tmp_path: Path) -> None:
    at = point(step)
    info = at["consumers"][name]
    applier = _applier(name, at["frames"], info["config"])
    stream = _replay("S1", at["frames"], tmp_path)
    steps = [p["step"] for p in load().raw["points"]]
    purged_at = point(PURGED_FROM)
    if steps.index(step) >= steps.index(purged_at["step"]) and (
            info["cluster"]["leader"] == purged_at["consumers"][name]["cluster"]["leader"]):
        # the consumer's leader moves past a purge on its own (consumer.go purge, not
        # replicated): CONSUMER.INFO is the leader's; a leader elected later has not
        applier.stream_purged(stream.store.first_seq)
    consumer = Consumer(SimpleNamespace(name="S1", store=stream.store), name, ConsumerConfig.from_json(info["config"]), 0)
    applier.load_into(consumer)
    consumer.num_pending()
    assert _compared(consumer.info_json()) == _compared(info)


def test_a_follower_without_the_leaders_purge_keeps_its_replicated_floor() -> None:
    """After the purges the pull consumer had nothing pending: no ack was proposed, so a
    follower's state stays where the entries left it (the leader's moved on its own)."""
    at = point("purged all")
    info = at["consumers"]["PULL"]
    applier = _applier("PULL", at["frames"], info["config"])
    assert (applier.delivered, applier.ack_floor) == ([5, 5], [5, 5])
    assert (info["delivered"]["stream_seq"], info["ack_floor"]["stream_seq"]) == (9, 9)


def test_a_redelivery_counts_and_the_ack_clears_it() -> None:
    """(The recording's nak'd message was deleted before its redelivery: the leader acked it,
    Acked(2, 2) among the pull consumer's entries.)"""
    rec = load()
    ops = [decode_consumer_op(e.data) for _, (_, es) in sorted(rec.groups[rec.names["S1/PULL"]].entries.items())
           for e in es if e.type == EntryType.NORMAL]
    assert Acked(2, 2) in ops
    applier = ConsumerApplier(max_deliver=3)
    applier.apply_op(Delivered(1, 5, 1, 1))
    applier.apply_op(Delivered(2, 5, 2, 2))
    assert applier.redelivered == {5: 1} and applier.pending == {5: [1, 2]}
    applier.apply_op(Delivered(3, 5, 4, 3))  # over max_deliver: no longer pending
    assert applier.redelivered == {5: 3} and applier.pending == {}
    applier.apply_op(Acked(3, 5))
    assert applier.redelivered == {}


def test_the_snapshot_2_15_1_sent_the_lagging_follower_installs_as_its_state() -> None:
    """n2, restarted, got the push consumer's state as a snapshot on its catch-up inbox: it is
    what the recorded entries applied up to the snapshot's index give, and installed it is the
    follower's state."""
    rec = load()
    group = rec.groups[rec.names["S1/PUSH"]]
    sent = []
    for frame in rec.raw["frames"]:
        if frame["subject"].startswith("$NRG.CR."):
            ae = AppendEntry.decode(bytes.fromhex(frame["data"]))
            sent += [(ae.pindex, e.data) for e in ae.entries if e.type == EntryType.SNAPSHOT and e.data[:1] == b"\x16"]
    pushes = [(index, data) for index, data in sent
              if ConsumerState.decode(data).delivered[1] == point("killed")["streams"]["S1"]["info"]["state"]["last_seq"]]
    assert pushes
    index, data = pushes[0]
    state = ConsumerState.decode(data)
    follower = ConsumerApplier()
    follower.apply(Entry(EntryType.SNAPSHOT, data))
    assert follower.snapshot(state.base_ts) == ConsumerState(
        state.ack_floor, state.delivered, tuple(sorted(state.pending)), tuple(sorted(state.redelivered)), state.base_ts)
    replayed = ConsumerApplier()
    for i, (_, entries) in sorted(group.entries.items()):
        if i <= index:
            for entry in entries:
                replayed.apply(entry)
    assert (replayed.delivered, replayed.ack_floor, sorted(replayed.pending)) == (
        list(state.delivered), list(state.ack_floor), sorted(seq for seq, _, _ in state.pending))
    on_disk = [decode_snapshot_file(bytes.fromhex(v)).data for k, v in rec.raw["snapshots"].items()
               if f"/{rec.names['S1/PUSH']}/" in k]
    assert on_disk and all(ConsumerState.decode(d).delivered == state.delivered for d in on_disk)




def test_the_snapshot_encodes_as_encode_consumer_state() -> None:
    applier = ConsumerApplier()
    applier.apply_op(Delivered(1, 10, 1, 5_000_000_000))
    applier.apply_op(Delivered(2, 11, 1, 6_400_000_000))
    applier.apply_op(Delivered(3, 10, 2, 7_000_000_000))
    data = applier.snapshot(8).encode()
    # magic, version, ack floor (0, 0), delivered (3, 11), 2 pending from base 8 s (zig-zag 16):
    # 10 -> (1, 8-7), 11 -> (2, 8-6); 1 redelivered: 10 once
    assert data == bytes((22, 2, 0, 0, 3, 11, 2, 16, 10, 1, 2, 11, 2, 4, 1, 10, 1))
    again = ConsumerApplier()
    again.install_snapshot(ConsumerState.decode(data))
    assert again.pending == {10: [1, 7_000_000_000], 11: [2, 6_000_000_000]}
    assert again.redelivered == {10: 1} and again.delivered == [3, 11]


def test_ack_none_and_ack_all() -> None:
    none = ConsumerApplier("none")
    none.apply_op(Delivered(4, 9, 1, 0))
    assert none.ack_floor == [4, 9] and not none.pending
    every = ConsumerApplier("all")
    for d in range(1, 4):
        every.apply_op(Delivered(d, d + 10, 1, 0))
    every.apply_op(Acked(2, 12))
    assert every.ack_floor == [2, 12] and list(every.pending) == [13]
