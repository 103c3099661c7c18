"""A stream's consumers through its replica change (replication/consumer_desired.py), sans-IO:
remapConsumerAssignments' choices (who follows the stream, who stays, the ephemerals that lose
every peer), the group leaders' steps that differ from a stream's (desired.next_step: a consumer
expands only onto the stream's peers, removes without waiting for catch-ups; a stream waits for
its consumers), and the meta leader's reconcile of both (MetaLeader.stream_reconcile,
consumer_reconcile)."""

from __future__ import annotations

import random

from natserver.jetstream.replication.consumer_desired import moving_consumer, remap_consumers, target_peers
from natserver.jetstream.replication.desired import desired_of, next_step, with_desired
from natserver.jetstream.replication.entries import ConsumerAssignment, MetaOp, RaftGroup, StreamAssignment
from natserver.jetstream.replication.leader import MetaLeader
from natserver.jetstream.replication.state import MetaState

A, B, C = "AAAAAAAA", "BBBBBBBB", "CCCCCCCC"
NOW = "2026-11-29T03:28:42.083961056Z"
CLIENT = {"acc": "APP"}


def stream(peers: list[str], desired_peers: list[str] | None, replicas: int, *, scale_down: bool = False,
           retention: str = "limits") -> StreamAssignment:
    group = RaftGroup("S-R3F-abcdefgh", list(peers), "file", "C")
    if desired_peers is not None:
        group = with_desired(group, group.name, desired_peers, "C", "", random.Random(1), NOW, scale_down=scale_down)
    config = {"name": "S", "subjects": ["s.>"], "num_replicas": replicas, "retention": retention}
    return StreamAssignment(CLIENT, NOW, config, group, "$JSC.SYNC.x")


def consumer(name: str, peers: list[str], config: dict | None = None) -> ConsumerAssignment:
    group = RaftGroup(f"C-R{len(peers)}F-{name:0<8}", list(peers), "file", "C")
    return ConsumerAssignment(CLIENT, NOW, name, "S", {"durable_name": name, **(config or {})}, group)


def test_a_scale_down_moves_the_following_consumers_and_leaves_an_explicit_one():
    sa = stream([A, B, C], [A], 1)  # (the scale down's peers chosen: A)
    follows, explicit_r1_elsewhere = consumer("F", [A, B, C]), consumer("E", [B], {"num_replicas": 1})
    kept = consumer("K", [A], {"num_replicas": 1})
    remapped, deleted, done = remap_consumers(sa, [follows, explicit_r1_elsewhere, kept], random.Random(3), NOW)
    assert not deleted and not done
    by_name = {ca.name: ca for ca in remapped}
    assert sorted(by_name) == ["E", "F"]  # (K is on the kept peer already)
    f = by_name["F"]
    assert f.group.peers == [A, B, C] and f.group.name == follows.group.name
    assert desired_of(f.group)["peers"] == [A] and desired_of(f.group)["scale_down"] is True
    e = by_name["E"]  # (moves to A: a group of one kept by name while it moves)
    assert e.group.peers == [B] and desired_of(e.group)["peers"] == [A] and "scale_down" not in desired_of(e.group)
    assert e.config["num_replicas"] == 1


def test_a_scale_up_renames_a_consumer_of_one_and_prefers_its_peer():
    sa = stream([A], [A, B, C], 3)
    remapped, _, done = remap_consumers(sa, [consumer("F", [A])], random.Random(4), NOW)
    assert not done
    (f,) = remapped
    assert f.group.name.startswith("C-R3F-") and f.group.name != consumer("F", [A]).group.name
    assert f.group.peers == [A] and sorted(desired_of(f.group)["peers"]) == [A, B, C]
    assert desired_of(f.group)["preferred"] == A


def test_an_ephemeral_that_loses_every_peer_is_deleted_a_durable_jumps():
    sa = stream([B], [B], 1)
    desired = desired_of(sa.group)
    desired["removed"] = [A]
    ephemeral = ConsumerAssignment(CLIENT, NOW, "EPH", "S", {}, RaftGroup("C-R1M-x", [A], "memory", "C"))
    durable = consumer("D", [A])
    remapped, deleted, done = remap_consumers(sa, [ephemeral, durable], random.Random(5), NOW)
    assert [ca.name for ca in deleted] == ["EPH"] and not done
    (d,) = remapped
    assert d.group.peers == [B] and desired_of(d.group)["removed"] == [A]


def test_a_settled_stream_with_settled_consumers_is_done():
    sa = stream([A, B, C], [A, B, C], 3)
    assert target_peers(sa) == [A, B, C]
    assert remap_consumers(sa, [consumer("F", [A, B, C])], random.Random(6), NOW) == ([], [], True)
    sa.consumers["F"] = consumer("F", [A, B, C])
    assert moving_consumer(sa, [A]) == "F" and moving_consumer(sa, [A, B, C]) == ""


def _step(desired: dict, assigned: list[str], actual: list[str], **kw):
    lags = {p: 0 for p in actual}
    return next_step(A, 1, desired, assigned, actual, lags, set(actual), set(), set(actual), 1,
                     membership_pending=False, needs_snapshot=False, **kw)


def test_the_leaders_steps_that_wait_for_the_other_asset():
    desired = {"id": "x", "term": 1, "peers": [A, B, C]}
    # A consumer does not expand onto peers its stream does not host yet.
    assert _step(desired, [A], [A], stream_peers=[A]).status == ("waiting for stream to migrate first", "blocked")
    step = _step(desired, [A], [A], stream_peers=[A, B])
    assert step.update is not None and step.update["meta_peers"] == [A, B]
    # A stream removes no peer while a consumer is still on it: it nudges the meta leader.
    down = {"id": "y", "term": 1, "peers": [A]}
    step = _step(down, [A, B, C], [A, B, C], blocked_by="F")
    assert step.action == "report" and step.status == ("waiting for consumer 'F' to migrate", "blocked")
    assert step.update == {"id": "y", "term": 1}
    # A consumer removes its peers without waiting for catch-ups.
    step = _step(down, [A, B, C], [A, B, C], stream_peers=[A, B, C])
    assert step.action == "remove" and step.peer in (B, C)


def test_the_meta_leaders_reconcile_of_a_stream_proposes_its_consumers_too():
    state = MetaState(A)
    leader = MetaLeader(state, "C", random.Random(7), lambda: 0)
    sa = stream([A, B, C], [A], 1)
    desired = desired_of(sa.group)
    desired["term"] = 1
    sa.consumers["F"] = consumer("F", [A, B, C])
    state.streams.setdefault("APP", {})["S"] = sa
    proposals = leader.stream_reconcile("APP", "S", {"id": desired["id"], "term": 1, "meta_peers": [A],
                                                      "members": [A], "match": True})
    assert [p.op for p in proposals] == [MetaOp.UPDATE_STREAM, MetaOp.ASSIGN_CONSUMER]
    stream_group = proposals[0].assignment.group
    assert stream_group.peers == [A] and desired_of(stream_group) is not None  # (not done: F moves)
    f = proposals[1].assignment
    assert desired_of(f.group)["peers"] == [A]
    # The consumer's leader reports a peer the stream does not host: ignored.
    assert leader.consumer_reconcile("APP", "S", "F", {"id": "z", "term": 1, "meta_peers": [A, "DDDDDDDD"]}) is None
