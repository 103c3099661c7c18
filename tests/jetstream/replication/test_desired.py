"""The desired state of a stream group (replication/desired.py), sans-IO: the meta leader's
side of a replica change (with_desired, populate_origin, reconcile) through the reconcile
requests a 2.15.1 group leader sent in an R1 -> R3 -> R1 scale (their shapes as sniffed on
$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE), and the group leader's next steps (next_step)."""

from __future__ import annotations

import random

from natserver.jetstream.replication.desired import desired_of, next_step, populate_origin, reconcile, with_desired
from natserver.jetstream.replication.entries import RaftGroup

A, B, C = "AAAAAAAA", "BBBBBBBB", "CCCCCCCC"
NOW = "2026-11-29T03:28:42.083961056Z"


def scaled_up() -> RaftGroup:
    old = RaftGroup("S-R1F-abcdefgh", [A], "file", "C", A)
    group = with_desired(old, "S-R3F-ijklmnop", [A, B, C], "C", A, random.Random(1), NOW)
    populate_origin(group, old, 1, None)
    return group


def test_a_scale_up_recorded_as_2_15_1_writes_it():
    group = scaled_up()
    assert group.peers == [A] and group.name == "S-R3F-ijklmnop"
    desired = desired_of(group)
    assert desired is not None
    assert list(desired) == ["created", "id", "peers", "cluster", "preferred", "members", "origin"]
    assert desired["peers"] == [A, B, C] and desired["members"] == [A] and desired["preferred"] == A
    assert desired["origin"] == {"peers": [A], "cluster": "C", "replicas": 1}


def test_reconcile_follows_a_group_leaders_requests_to_the_end():
    rng = random.Random(2)
    group = scaled_up()
    first = desired_of(group)["id"]
    assert reconcile(group, {"id": "other", "term": 1}, 3, True, rng) is None  # (not the latest)
    group = reconcile(group, {"id": first, "term": 1}, 3, True, rng)  # the leader's term recorded
    assert desired_of(group)["term"] == 1 and desired_of(group)["id"] != first
    step = {"id": desired_of(group)["id"], "term": 1, "meta_peers": [A, B, C], "members": [A]}
    group = reconcile(group, step, 3, True, rng)  # the new peers into the assignment
    assert group.peers == [A, B, C] and group.extra["scale_up"] is True
    assert list(group.extra) == ["scale_up", "desired"]
    again = {"id": desired_of(group)["id"], "term": 1, "meta_peers": [A, C, B], "members": [A, B]}
    group = reconcile(group, again, 3, True, rng)  # (a change of the members alone: recorded)
    assert group.peers == [A, C, B] and desired_of(group)["members"] == [A, B]
    assert reconcile(group, dict(again, id=desired_of(group)["id"]), 3, True, rng) is None  # (no change)
    done = {"id": desired_of(group)["id"], "term": 1, "meta_peers": [A, C, B], "members": [A, B, C], "match": True}
    assert reconcile(group, done, 3, False, rng) is not None and desired_of(
        reconcile(group, done, 3, False, rng)) is not None  # (consumers still to move: not done)
    final = reconcile(group, done, 3, True, rng)
    assert final is not None and desired_of(final) is None
    assert final.peers == [A, B, C] and final.preferred == "" and final.extra == {"scale_up": True}
    assert reconcile(final, done, 3, True, rng) is None


def test_the_group_leaders_steps_of_a_scale_down():
    desired = {"created": NOW, "id": "x", "term": 2, "peers": [A, B, C], "scale_down": True}
    step = next_step(B, 2, desired, [A, B, C], [A, B, C], {A: 3, B: 0, C: 0}, {B, C}, set(), {A, C}, 1,
                     membership_pending=False, needs_snapshot=False)
    assert step.action == "report" and step.update == {"id": "x", "term": 2, "scale_down_peers": [B]}
    stale = next_step(B, 3, desired, [A, B, C], [A, B, C], {}, set(), set(), set(), 1, membership_pending=False,
                      needs_snapshot=False)
    assert stale.update == {"id": "x", "term": 3} and stale.status[1] == "meta"  # (a new term first)
    chosen = dict(desired, scale_down=False, peers=[B])
    remove = next_step(B, 2, chosen, [A, B, C], [A, B, C], {A: 3, B: 0, C: 0}, {A, B, C}, set(), {A, C}, 1,
                       membership_pending=False, needs_snapshot=False)
    assert remove.action == "remove" and remove.peer == A  # (the most lagging first, the leader last)
    wait = next_step(B, 2, chosen, [A, B, C], [B, C], {B: 0, C: 0}, {B, C}, set(), {C}, 1,
                     membership_pending=True, needs_snapshot=False)
    assert wait.action == "wait"
    report = next_step(B, 2, chosen, [A, B, C], [B, C], {B: 0, C: 0}, {B, C}, set(), {C}, 1,
                       membership_pending=False, needs_snapshot=False)
    assert report.update == {"id": "x", "term": 2, "meta_peers": [B, C], "members": [B, C]}
    last = next_step(B, 2, chosen, [B], [B], {B: 0}, {B}, set(), set(), 1, membership_pending=False,
                     needs_snapshot=False)
    assert last.update == {"id": "x", "term": 2, "meta_peers": [B], "members": [B], "match": True}


def test_a_scale_up_adds_a_peer_heard_from_after_a_snapshot():
    desired = {"created": NOW, "id": "x", "term": 1, "peers": [A, B, C]}
    snap = next_step(A, 1, desired, [A, B, C], [A], {A: 0}, {A}, set(), {B}, 3, membership_pending=False,
                     needs_snapshot=True)
    assert snap.action == "snapshot"
    add = next_step(A, 1, desired, [A, B, C], [A], {A: 0}, {A}, set(), {C}, 3, membership_pending=False,
                    needs_snapshot=False)
    assert add.action == "add" and add.peer == C  # (the one heard from)
    unheard = next_step(A, 1, desired, [A, B, C], [A], {A: 0}, {A}, set(), set(), 3, membership_pending=False,
                        needs_snapshot=False)
    assert unheard.action == "wait" and unheard.status == ("waiting for quorum to add peer", "quorum")
    expand = next_step(A, 1, desired, [A], [A], {A: 0}, {A}, set(), set(), 3, membership_pending=False,
                       needs_snapshot=False)
    assert expand.update == {"id": "x", "term": 1, "meta_peers": [A, B, C], "members": [A]}
