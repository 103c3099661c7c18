"""A stream's consumers through its replica change, sans-IO: how nats-server 2.15.1's meta leader
moves them onto the stream's new peers (jetstream_cluster.go remapConsumerAssignments, called by
reconcileDesiredStreamAssignment each time the stream's group leader reports a step).

A consumer whose replicas follow the stream's (config ``num_replicas`` 0, or any consumer of an
interest or workqueue stream) is scaled with it; an explicit replica count stays (up to the
stream's); an ephemeral of a limits stream asking for none stays at one. Its group gets desired
state of its own (desired.py's JSON) and its group's leader drives it there as a stream's does
(desired.next_step with the stream's peers), reporting on
``$SYS.JSC.CONSUMER.ASSIGNMENT.RECONCILE``; the stream's leader removes none of its own peers
while a consumer is still on them, and its desired state is dropped only once no consumer moves.
"""

from __future__ import annotations

import random

from .desired import copy_group, desired_of, rename_single, set_desired, with_desired
from .entries import ConsumerAssignment, RaftGroup, StreamAssignment
from .placement import consumer_replicas

__all__ = ["CONSUMER_RECONCILE_SUBJECT", "moving_consumer", "remap_consumers", "target_peers"]

# jetstream_cluster.go consumerAssignmentReconcileSubj.
CONSUMER_RECONCILE_SUBJECT = "$SYS.JSC.CONSUMER.ASSIGNMENT.RECONCILE"


def target_peers(sa: StreamAssignment) -> list[str]:
    """streamAssignment.targetPeers: where the stream is going (its desired peers unless a
    scale down has not chosen them yet), else its peers (the last ``replicas`` of an
    over-replicated group: a move without desired state)."""
    group = sa.group
    if group is None:
        return []
    desired = desired_of(group)
    replicas = int(sa.config.get("num_replicas") or 1)
    if desired is not None:
        return list(desired.get("peers") or ()) if not desired.get("scale_down") else list(group.peers or ())
    peers = list(group.peers or ())
    return peers[len(peers) - replicas:] if len(peers) > replicas else peers


def moving_consumer(sa: StreamAssignment, wanted: list[str]) -> str:
    """runStreamMigration's check before removing a peer: the first consumer still on a peer
    outside ``wanted`` (the stream's desired peers), "" when none."""
    for name, ca in sa.consumers.items():
        if ca.group is not None and any(p not in wanted for p in ca.group.peers or ()):
            return name
    return ""


def remap_consumers(sa: StreamAssignment, consumers: list[ConsumerAssignment], rng: random.Random,
                    now: str) -> tuple[list[ConsumerAssignment], list[ConsumerAssignment], bool]:
    """remapConsumerAssignments: the consumers to re-propose on the stream's target peers (each
    with desired state when the stream has it), the ephemerals that lost every peer (deleted),
    and whether every consumer has converged (none remapped, none still moving)."""
    targets = target_peers(sa)
    stream_desired = desired_of(sa.group)
    stream_peers = list(sa.group.peers or ()) if sa.group is not None else []
    removed_by_stream = list((stream_desired or {}).get("removed") or ())
    remapped: list[ConsumerAssignment] = []
    deleted: list[ConsumerAssignment] = []
    done = True
    for ca in consumers:
        if ca.group is None:
            continue
        own_desired = desired_of(ca.group)
        peers = list(ca.group.peers or ())
        if own_desired is not None:
            done = False
            peers = list(own_desired.get("peers") or ())
        wanted = consumer_replicas(ca.config, sa.config)
        if (sa.config.get("retention") or "limits") != "limits":  # (peer parity with the stream)
            wanted = int(sa.config.get("num_replicas") or 1)
        kept = sum(1 for p in peers if p in targets)
        size = kept
        if size < wanted:
            size = min(wanted, max(kept, len(targets)))
        elif size > wanted:
            size = wanted
        if kept == len(peers) and kept == size and not any(
                p in removed_by_stream and p not in ((own_desired or {}).get("removed") or ())
                for p in ca.group.peers or ()):
            continue
        new_peers = [p for p in peers if p in targets]
        if len(new_peers) < wanted:
            backfill = list(targets)
            rng.shuffle(backfill)
            for p in backfill:
                if len(new_peers) >= wanted:
                    break
                if p not in new_peers:
                    new_peers.append(p)
        elif len(new_peers) > wanted:
            new_peers = new_peers[:wanted]
        group = copy_group(ca.group)
        group.preferred = peers[0] if len(peers) == 1 and kept == 1 and len(new_peers) > 1 else ""
        group.peers = new_peers
        if len(ca.group.peers or ()) == 1 and own_desired is None:  # (no RAFT group to keep)
            rename_single(group, rng, len(new_peers), "C")
        config = dict(ca.config)
        if int(config.get("num_replicas") or 0):
            config["num_replicas"] = wanted
        if stream_desired is not None:
            group = _with_desired(ca.group, group, kept > 0 and kept != len(peers), stream_peers, rng, now)
        if not group.peers:
            if not config.get("durable_name"):
                deleted.append(ca)
                continue
            group.peers = list(new_peers)  # (a durable goes straight to its new peers)
        remapped.append(ConsumerAssignment(ca.client, ca.created, ca.name, ca.stream, config, group,
                                           ca.subject, ca.reply))
    return remapped, deleted, done and not remapped and not deleted


def _with_desired(old: RaftGroup, target: RaftGroup, scale_down: bool, stream_peers: list[str],
                  rng: random.Random, now: str) -> RaftGroup:
    """The consumer's target as its desired state, its actual peers those the stream still has
    (the others listed as removed)."""
    group = with_desired(old, target.name, list(target.peers or ()), target.cluster, target.preferred, rng, now,
                         scale_down=scale_down)
    dropped = [p for p in group.peers or () if p not in stream_peers]
    group.peers = [p for p in group.peers or () if p in stream_peers]
    desired = dict(desired_of(group) or {})
    removed = list(desired.get("removed") or ())
    removed += [p for p in dropped if p not in removed]
    if removed:
        desired["removed"] = removed
    set_desired(group, desired)
    return group
