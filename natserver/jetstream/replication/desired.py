"""A stream group's desired state, sans-IO: how nats-server 2.15.1 changes a replicated stream's
peers (jetstream_cluster.go: raftGroup.withDesired, populateOrigin, reconcileDesiredState,
and the group leader's runStreamMigration).

A replica count changed by STREAM.UPDATE does not change the group's ``peers`` at once: the
meta leader records the target as the group's ``desired`` object (2.15.1's JSON, kept in
``RaftGroup.extra``: ``created``, ``id``, ``term``, ``peers``, ``cluster``, ``preferred``,
``scale_down``, ``removed``, ``members``, ``origin``), and the stream group's leader drives it
there, one step at a time, each reported to the meta leader on ``$SYS.JSC.STREAM.ASSIGNMENT.
RECONCILE`` (``{"account", "stream", "id", "term", "scale_down_peers" | "meta_peers",
"members", "match"}``): its term recorded first; a scale down's kept peers chosen (the leader,
then the least lagging); new peers put into the assignment (``meta_peers``: they create the
stream) and added to the RAFT group one by one (EntryAddPeer), old ones removed one by one
(EntryRemovePeer: the leader last, after handing over), each step's actual peer set reported;
once the assignment's, the RAFT group's and the desired peers agree (``match``) the meta
leader drops ``desired``. The functions here are the meta leader's side (``with_desired``,
``reconcile``) and the group leader's choices (``next_step``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ...raft.wire import group_name
from .entries import RaftGroup

__all__ = [
    "DESIRED", "MigrationStep", "copy_group", "desired_info", "desired_of", "next_step", "peer_view",
    "take_step", "reconcile", "rename_single",
    "set_desired", "with_desired",
]

DESIRED = "desired"  # raftGroup.Desired's JSON key
SCALE_UP = "scale_up"  # raftGroup.ScaleUp's
_EXTRA_ORDER = (SCALE_UP, "excluded", DESIRED)  # (raftGroup's field order after preferred)
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ID_LEN = 22  # (a NUID's length)


def _nuid(rng: random.Random) -> str:
    return "".join(rng.choice(_DIGITS) for _ in range(_ID_LEN))


def desired_of(group: RaftGroup | None) -> dict | None:
    if group is None:
        return None
    desired = group.extra.get(DESIRED)
    return desired if isinstance(desired, dict) else None


def copy_group(group: RaftGroup) -> RaftGroup:
    """raftGroup.copyGroup: peers and desired state copied (mutable without touching ``group``)."""
    extra = dict(group.extra)
    desired = desired_of(group)
    if desired is not None:
        copied = dict(desired)
        for key in ("peers", "removed", "members"):
            if isinstance(copied.get(key), list):
                copied[key] = list(copied[key])
        if isinstance(copied.get("origin"), dict):
            copied["origin"] = dict(copied["origin"])
        extra[DESIRED] = copied
    return RaftGroup(group.name, list(group.peers or ()), group.storage, group.cluster, group.preferred, extra)


def _set_extra(group: RaftGroup, key: str, value) -> None:
    """Set (or with None drop) one of raftGroup's later fields, in Go's field order."""
    extra = {k: v for k, v in group.extra.items() if k != key}
    if value is not None:
        extra[key] = value
    ordered = {k: extra[k] for k in _EXTRA_ORDER if k in extra}
    ordered.update({k: v for k, v in extra.items() if k not in ordered})
    group.extra = ordered


def set_desired(group: RaftGroup, desired: dict | None) -> None:
    """The group's desired state replaced (in 2.15.1's field order), or dropped with None."""
    _set_extra(group, DESIRED, None if desired is None else _rebuild(desired))


def _desired(created: str, id_: str, term: int, peers: list[str], cluster: str, preferred: str, *,
             scale_down: bool = False, move: bool = False, removed: list[str] | None = None,
             members: list[str] | None = None, origin: dict | None = None) -> dict:
    """2.15.1's desiredRaftGroup JSON, in its field order (omitempty fields left out)."""
    out: dict = {"created": created, "id": id_}
    if term:
        out["term"] = term
    out["peers"] = list(peers)
    if cluster:
        out["cluster"] = cluster
    if preferred:
        out["preferred"] = preferred
    if scale_down:
        out["scale_down"] = True
    if move:
        out["move"] = True
    if removed:
        out["removed"] = list(removed)
    if members is not None:
        out["members"] = list(members)
    if origin is not None:
        out["origin"] = origin
    return out


def _rebuild(desired: dict, **changes) -> dict:
    merged = {**desired, **changes}
    return _desired(merged["created"], merged["id"], int(merged.get("term") or 0), list(merged.get("peers") or ()),
                    merged.get("cluster") or "", merged.get("preferred") or "",
                    scale_down=bool(merged.get("scale_down")), move=bool(merged.get("move")),
                    removed=merged.get("removed"), members=merged.get("members"), origin=merged.get("origin"))


def with_desired(old: RaftGroup, name: str, peers: list[str], cluster: str, preferred: str, rng: random.Random,
                 now: str, *, scale_down: bool = False) -> RaftGroup:
    """raftGroup.withDesired: a copy of ``old`` (its actual peers kept) with the target as its
    desired state; a scale from one replica prefers that one (it has the data); an earlier
    desired state's creation time, term, move flag, origin and removed peers carried on."""
    current = desired_of(old)
    if len(old.peers or ()) == 1:
        preferred = (old.peers or [""])[0]
    elif preferred and preferred not in peers:
        preferred = ""
    group = copy_group(old)
    group.name = name
    removed = [p for p in (current or {}).get("removed") or () if p not in peers]
    members = list((current or {}).get("members") or old.peers or ())
    desired = _desired((current or {}).get("created") or now, _nuid(rng), int((current or {}).get("term") or 0),
                       peers, cluster, preferred, scale_down=scale_down, move=bool((current or {}).get("move")),
                       removed=removed, members=members, origin=(current or {}).get("origin"))
    _set_extra(group, DESIRED, desired)
    return group


def populate_origin(group: RaftGroup, old: RaftGroup, old_replicas: int, old_placement: dict | None) -> None:
    """raftGroup.populateOrigin: what the group was before its first desired state (kept by later ones)."""
    desired = desired_of(group)
    if desired is None or desired.get("origin") is not None:
        return
    before = desired_of(old)
    peers = list((before or {}).get("peers") or ()) if before else list(old.peers or ())
    cluster = (before or {}).get("cluster", "") if before else old.cluster
    origin: dict = {"peers": peers}
    if cluster:
        origin["cluster"] = cluster
    origin["replicas"] = old_replicas
    if old_placement:
        origin["placement"] = old_placement
    _set_extra(group, DESIRED, _rebuild(desired, origin=origin))


def rename_single(group: RaftGroup, rng: random.Random, replicas: int = 1, prefix: str = "S") -> None:
    """groupNameForStream (``prefix`` "C": groupNameForConsumer): a new name for a group of
    one, which has no RAFT group to keep (2.15.1 renames it when it is scaled up, and when a
    scale down ends with one peer)."""
    group.name = group_name(prefix, replicas, group.storage, _nuid(rng))


def reconcile(group: RaftGroup, update: dict, replicas: int, done: bool, rng: random.Random) -> RaftGroup | None:
    """raftGroup.reconcileDesiredState on the meta leader: the group after a group leader's
    reconcile request (``update``), or None when it changes nothing (stale, not about the latest
    desired state, or the same peers)."""
    scale_down_peers, meta_peers = update.get("scale_down_peers"), update.get("meta_peers")
    if scale_down_peers is not None and meta_peers is not None:
        return None
    term, id_ = int(update.get("term") or 0), str(update.get("id") or "")
    desired = desired_of(group)
    if desired is None:
        return None  # (natserver records desired state with the update itself)
    if term < int(desired.get("term") or 0) or not desired.get("id") or desired["id"] != id_:
        return None
    ng = copy_group(group)
    if not desired.get("term") or term > int(desired.get("term") or 0):
        _set_extra(ng, DESIRED, _rebuild(desired, id=_nuid(rng), term=term))
        return ng
    if desired.get("scale_down"):
        if scale_down_peers is None or any(p not in (desired.get("peers") or ()) for p in scale_down_peers):
            return None
        _set_extra(ng, DESIRED, _rebuild(desired, id=_nuid(rng), scale_down=False, peers=list(scale_down_peers)))
        return ng
    if meta_peers is None:
        return None
    previous = list(ng.peers or ())
    ng.peers = list(meta_peers)
    members = update.get("members")
    changed = _rebuild(desired, members=list(members) if members is not None else desired.get("members"))
    if sorted(desired.get("peers") or ()) == sorted(meta_peers) and update.get("match") and done:
        ng.peers = list(desired.get("peers") or ())
        ng.cluster = desired.get("cluster") or ""
        ng.preferred = ""
        _set_extra(ng, DESIRED, None)
        if len(ng.peers) >= replicas:
            _set_extra(ng, "excluded", None)
        return ng
    if sorted(meta_peers) == sorted(previous) and (
            members is None or sorted(members) == sorted(desired.get("members") or ())):
        return None  # (2.15.1 records a change of the RAFT group's members alone too)
    if any(p not in previous for p in meta_peers):
        _set_extra(ng, SCALE_UP, True)
    _set_extra(ng, DESIRED, _rebuild(changed, id=_nuid(rng)))
    return ng


@dataclass(frozen=True, slots=True)
class MigrationStep:
    """What the group leader does next (runStreamMigration): ``action`` one of "report"
    (send ``update`` to the meta leader), "snapshot", "add", "remove", "step_down", "wait";
    ``peer`` the peer added, removed or handed over to; ``status`` 2.15.1's status line and type."""

    action: str
    status: tuple[str, str]
    peer: str = ""
    update: dict | None = None


def take_step(step: MigrationStep, group, report: Callable[[dict], None], snapshot: Callable[[], object]) -> None:
    """A migration step taken on the leader's ``group`` (a natserver.nrg Group): a report
    sent with ``report``, a snapshot with ``snapshot``, a peer added or removed, a hand-over."""
    if step.action == "report" and step.update is not None:
        report(step.update)
    elif step.action == "snapshot":
        snapshot()
    elif step.action == "add":
        group.add_peer(step.peer)
    elif step.action == "remove":
        group.remove_peer(step.peer)
    elif step.action == "step_down":
        group.step_down(step.peer)


def _sort_keep(leader: str, lags: dict[str, int], offline: set[str], candidates: list[str]) -> list[str]:
    """sortScaleDownPeers: the leader, then online peers of the group by lag, then offline ones,
    then peers not in the group."""
    def rank(peer: str) -> tuple[int, int]:
        if peer == leader:
            return (0, 0)
        if peer not in lags:
            return (3, 0)
        return (2 if peer in offline else 1, lags[peer])

    return sorted(candidates, key=rank)


def desired_info(desired: dict, names: dict[str, str], status: tuple[str, str] | None) -> dict:
    """2.15.1's DesiredClusterInfo (a stream's or consumer's info, ``cluster.desired``): the
    target's cluster and peers (not while a scale down's are still to be chosen), what it
    changes from, and the group leader's last step (``status``, on the leader)."""
    out: dict = {}
    if desired.get("created"):
        out["created"] = desired["created"]
    if desired.get("cluster"):
        out["name"] = desired["cluster"]
    if desired and not desired.get("scale_down"):
        out["replicas"] = [{"name": names.get(p, p), "peer": p} for p in desired.get("peers") or ()]
    origin = desired.get("origin")
    if isinstance(origin, dict):
        out["origin"] = {"replicas": origin.get("replicas", 0),
                         **({"placement": origin["placement"]} if origin.get("placement") else {})}
    if status is not None:
        out["status"] = {"description": status[0], "type": status[1]}
    return out


def peer_view(node, actual: list[str], now: float,
              heard_within: float) -> tuple[dict[str, int], set[str], set[str], set[str]]:
    """A group leader's view of its peers for a migration step (desired.next_step): each one's
    lag, those caught up, those not heard from within ``heard_within`` seconds of ``now``
    (offline), those heard from (``node``: a natserver.raft Node)."""
    lags = {p: max(node.commit - node._match.get(p, 0), 0) for p in actual if p != node.id}
    lags[node.id] = 0
    heard = {p for p, seen in node._seen.items() if now - seen < heard_within}
    current = {p for p, lag in lags.items() if lag == 0 and (p == node.id or p in heard)}
    offline = {p for p in actual if p != node.id and p not in heard}
    return lags, current, offline, heard


def next_step(me: str, term: int, desired: dict | None, assigned: list[str], actual: list[str],
              lags: dict[str, int], current: set[str], offline: set[str], heard: set[str], replicas: int, *,
              membership_pending: bool, needs_snapshot: bool, blocked_by: str = "",
              stream_peers: list[str] | None = None) -> MigrationStep:
    """runStreamMigration's next step for the group leader ``me`` (RAFT term ``term``):
    ``desired`` the assignment's desired state, ``assigned`` its peers, ``actual`` the RAFT
    group's, ``lags`` each actual peer's lag, ``current`` the peers caught up, ``offline`` those
    not heard from (placement's view), ``heard`` the peers this leader heard from lately;
    ``blocked_by`` a consumer of the stream still on a peer the stream leaves (no peer removed
    before it moved). A consumer group's leader (runConsumerMigration) passes its stream's
    assigned peers as ``stream_peers``: it expands only onto peers hosting the stream, and
    removes peers without waiting for catch-ups (a consumer's state is one snapshot)."""
    base: dict = {"id": (desired or {}).get("id", ""), "term": term}
    if desired is None or not desired.get("id") or int(desired.get("term") or 0) != term:
        return MigrationStep("report", ("requesting desired state from meta leader", "meta"), update=base)
    if needs_snapshot:
        return MigrationStep("snapshot", ("installing snapshot", "snapshot"))
    if membership_pending:
        return MigrationStep("wait", ("waiting for membership change to commit", "membership"))
    wanted = list(desired.get("peers") or ())
    for peer in actual:  # removeEvictedPeers: a RAFT member the assignment no longer has
        if peer not in assigned:
            if peer == me:
                return MigrationStep("step_down", ("stepping down, evicted from group", "membership"))
            return MigrationStep("remove", ("removing evicted peer", "membership"), peer=peer)
    candidates = [p for p in assigned if p not in actual and p in wanted]
    if candidates:  # extendPeerSet, selectPeerToAdd: one heard from, or a quorum left live if not
        chosen = next((p for p in candidates if p in heard and p not in offline), "")
        live = sum(1 for p in actual if p == me or (p in heard and p not in offline))
        if not chosen and live >= (len(actual) + 1) // 2 + 1:
            chosen = candidates[0]
        if not chosen:
            return MigrationStep("wait", ("waiting for quorum to add peer", "quorum"))
        return MigrationStep("add", ("adding peer", "membership"), peer=chosen)
    if desired.get("scale_down"):
        keep = _sort_keep(me, lags, offline, wanted)[:replicas]
        return MigrationStep("report", ("selecting peers to scale down to", "meta"),
                             update={**base, "scale_down_peers": keep})
    if any(p not in assigned for p in wanted):
        combined = assigned + [p for p in wanted if p not in assigned and (stream_peers is None or p in stream_peers)]
        if len(combined) == len(assigned):
            return MigrationStep("wait", ("waiting for stream to migrate first", "blocked"))
        return MigrationStep("report", ("expanding assignment with desired peers", "meta"),
                             update={**base, "meta_peers": combined, "members": list(actual)})
    exact = sorted(assigned) == sorted(actual)
    remaining = [p for p in actual if p not in wanted]
    if remaining and exact and stream_peers is not None:  # (a consumer: selectPeerToRemove, no catch-up)
        remove = _sort_keep(me, lags, offline, remaining)[-1]
        if remove == me:
            return MigrationStep("step_down", ("stepping down before removing ourselves", "membership"))
        return MigrationStep("remove", ("removing peer", "membership"), peer=remove)
    if remaining and exact and blocked_by:  # (the meta leader nudged: it remaps the consumers)
        return MigrationStep("report", (f"waiting for consumer '{blocked_by}' to migrate", "blocked"), update=base)
    if remaining and exact:
        remove = _sort_keep(me, lags, offline, remaining)[-1]
        still = sum(1 for p in actual if p in current and p != remove)
        if still < (len(actual) - 1) // 2 + 1:
            return MigrationStep("wait", ("waiting for peers to catch up", "catchup"))
        if me not in wanted:
            ready = [p for p in actual if p in current and p in wanted and p != me]
            if len(ready) < len(wanted) // 2 + 1:
                return MigrationStep("wait", ("waiting for desired peers to catch up", "catchup"))
            return MigrationStep("step_down", ("stepping down", "membership"),
                                 peer=_sort_keep("", lags, offline, ready)[0])
        if remove == me:
            return MigrationStep("step_down", ("stepping down before removing ourselves", "membership"))
        return MigrationStep("remove", ("removing peer", "membership"), peer=remove)
    update = {**base, "meta_peers": list(actual), "members": list(actual)}
    if exact:
        update["match"] = True
    return MigrationStep("report", ("waiting for peer set to settle", "meta"), update=update)
