"""Placement: which servers a new stream's or consumer's RAFT group gets, as nats-server
2.15.1's meta leader chooses them (jetstream_cluster.go selectPeerGroup, createGroupForStream,
createGroupForConsumer, setPreferred), deterministic given an injected ``random.Random``.

The meta leader knows each peer of the meta group (``PeerInfo``: name, cluster, server tags,
whether it is offline, its JetStream limits and usage as its statsz reported them). A stream is
placed in ``placement.cluster`` (else the requesting client's cluster, then its alternates) on
peers carrying every ``placement.tags`` tag (a ``!tag`` excludes), not tagged ``!jetstream``,
with room for ``max_bytes`` in the stream's storage, one per value of the ``unique_tag`` prefix
when the server sets one; the candidates, shuffled, are ordered online first, most available
storage first, fewest streams first (replicated streams: fewest replicated assets first).
When none fits: ``ApiError`` 10005 with selectPeerError's text, e.g. "no suitable peers for
placement, insufficient storage, tags not matched ['hdd']".
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ...raft.wire import group_name
from .. import errors
from .entries import RaftGroup, StreamAssignment

__all__ = [
    "PeerInfo", "PlacementError", "consumer_replicas", "create_group_for_consumer",
    "create_group_for_stream", "select_peer_group", "set_preferred",
]

# jetstream_cluster.go jsExcludePlacement: a server tagged so never gets assets.
EXCLUDE_PLACEMENT_TAG = "!jetstream"


@dataclass(slots=True)
class PeerInfo:
    """What the meta leader knows of one peer (server.go nodeInfo). ``reported``: its
    JetStream config and stats have been heard (nodeInfo.selectable); ``offline``: it said it
    shut down or stopped answering (still a candidate, after the online ones)."""

    id: str
    name: str
    cluster: str
    tags: list[str] = field(default_factory=list)
    offline: bool = False
    reported: bool = True
    max_memory: int = 0
    max_store: int = 0
    memory: int = 0  # used
    store: int = 0
    reserved_memory: int = 0
    reserved_store: int = 0
    ha_assets: int = 0

    def available(self, storage: str) -> int:
        if storage == "memory":
            used = max(self.reserved_memory, self.memory)
            return self.max_memory - used if self.max_memory > used else 0
        used = max(self.reserved_store, self.store)
        return self.max_store - used if self.max_store > used else 0

    def has_tag(self, tag: str) -> bool:
        """jwt.TagList.Contains: tags compare case-insensitively (the list is lower-cased)."""
        return tag.lower() in (t.lower() for t in self.tags)


@dataclass(slots=True)
class PlacementError:
    """selectPeerError: why no placement fitted, as flags and tag sets (in the order met;
    2.15.1 lists the tags from a Go map, so with several its order varies)."""

    offline: bool = False
    exclude_tag: bool = False
    no_storage: bool = False
    unique_tag: bool = False
    misc: bool = False
    no_js_cluster: bool = False
    no_match_tags: list[str] = field(default_factory=list)
    exclude_tags: list[str] = field(default_factory=list)

    def text(self) -> str:
        out = "no suitable peers for placement"
        for flag, reason in ((self.offline, "peer offline"), (self.exclude_tag, "exclude tag set"),
                             (self.no_storage, "insufficient storage"),
                             (self.unique_tag, "server tag not unique"),
                             (self.misc, "miscellaneous issue"),
                             (self.no_js_cluster, "jetstream not enabled in cluster")):
            if flag:
                out += ", " + reason
        if self.no_match_tags:
            out += ", tags not matched [" + ", ".join(f"'{t}'" for t in self.no_match_tags) + "]"
        if self.exclude_tags:
            out += ", tags excluded [" + ", ".join(f"'{t}'" for t in self.exclude_tags) + "]"
        return out

    def api_error(self) -> errors.ApiError:
        return errors.cluster_no_peers(self.text())

    def accumulate(self, other: PlacementError) -> None:
        self.offline |= other.offline
        self.exclude_tag |= other.exclude_tag
        self.no_storage |= other.no_storage
        self.unique_tag |= other.unique_tag
        self.misc |= other.misc
        self.no_js_cluster |= other.no_js_cluster
        self.no_match_tags += [t for t in other.no_match_tags if t not in self.no_match_tags]
        self.exclude_tags += [t for t in other.exclude_tags if t not in self.exclude_tags]

    def _missing(self, tag: str) -> None:
        if tag not in self.no_match_tags:
            self.no_match_tags.append(tag)

    def _excluded(self, tag: str) -> None:
        if tag not in self.exclude_tags:
            self.exclude_tags.append(tag)


def _asset_counts(streams: list[StreamAssignment]) -> tuple[dict[str, int], dict[str, int]]:
    """Each peer's streams, and its replicated (HA) ones, from the assignments."""
    count: dict[str, int] = {}
    ha: dict[str, int] = {}
    for sa in streams:
        if sa.group is None or not sa.group.peers:
            continue
        replicated = len(sa.group.peers) > 1
        for peer in sa.group.peers:
            count[peer] = count.get(peer, 0) + 1
            if replicated:
                ha[peer] = ha.get(peer, 0) + 1
    return count, ha


def select_peer_group(replicas: int, cluster: str, config: dict, peers: list[PeerInfo],
                      streams: list[StreamAssignment], rng: random.Random, *,
                      existing: list[str] | None = None, ignore: list[str] | None = None,
                      replace_first_existing: int = 0, unique_tag: str = "",
                      max_ha_assets: int = 0) -> list[str] | PlacementError:
    """selectPeerGroup: ``replicas`` peer ids in ``cluster`` for a stream ``config`` (its JSON:
    storage, max_bytes, placement), or why not. ``existing`` peers are kept first."""
    if not cluster:
        return PlacementError(misc=True)
    existing = existing or []
    max_bytes = max(0, int(config.get("max_bytes") or 0))
    storage = config.get("storage") or "file"
    tags = [(t.removeprefix("!"), t.startswith("!")) for t in (config.get("placement") or {}).get("tags") or ()]
    if unique_tag and any(t.startswith(unique_tag) for t, _ in tags):
        unique_tag = ""  # a tag of the prefix asked for explicitly turns the check off
    owners: dict[str, PeerInfo] = {}

    def unique(peer: PeerInfo) -> bool:
        for t in peer.tags:
            if t.startswith(unique_tag):
                if t in owners:
                    return False
                owners[t] = peer
                return True
        return False  # the prefix must be present

    by_id = {p.id: p for p in peers}
    if existing:
        if len(existing) >= replicas:
            return existing[:replicas]
        if unique_tag:
            for i, pid in enumerate(existing):
                if i >= replace_first_existing and pid in by_id:
                    unique(by_id[pid])
    skip = set(existing) | set(ignore or ())
    count, ha = _asset_counts(streams)
    err = PlacementError()
    candidates: list[tuple[PeerInfo, int]] = []
    online = 0
    shuffled = list(peers)
    rng.shuffle(shuffled)
    for p in shuffled:
        if p.cluster != cluster:
            continue
        if not p.reported:
            err.offline = True
            continue
        if p.id in skip:
            continue
        if p.has_tag(EXCLUDE_PLACEMENT_TAG):
            err.exclude_tag = True
            continue
        matched = True
        for tag, exclude in tags:
            has = p.has_tag(tag)
            if exclude and has:
                err._excluded(tag)
                matched = False
                break
            if not exclude and not has:
                err._missing(tag)
                matched = False
                break
        if not matched:
            continue
        available = p.available(storage)
        if max_bytes and max_bytes > available:
            err.no_storage = True
            continue
        if max_ha_assets and p.ha_assets > max_ha_assets:
            err.misc = True
            continue
        if unique_tag and not unique(p):
            err.unique_tag = True
            continue
        candidates.append((p, available))
        if not p.offline:
            online += 1
    quorum = replicas // 2 + 1
    missing_quorum = online + len(existing) < quorum
    missing_nodes = len(candidates) < replicas - len(existing)
    if missing_nodes or missing_quorum:
        if not peers:
            err.no_js_cluster = True
        elif not missing_nodes and missing_quorum:
            err.offline = True
        return err
    # Online first, then the most available storage, then the fewest streams (Go's SortFunc
    # is not stable: ties keep the shuffled order here, one of the orders Go may produce).
    candidates.sort(key=lambda c: (c[0].offline, -c[1], count.get(c[0].id, 0)))
    if int(config.get("num_replicas") or 0) > 1:
        candidates.sort(key=lambda c: (c[0].offline, ha.get(c[0].id, 0)))
    return existing + [p.id for p, _ in candidates[:replicas - len(existing)]]


def _unique_name(rng: random.Random) -> str:
    """What groupName hashes (a NUID in nats-server): 22 random base-62 digits here."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(rng.choice(digits) for _ in range(22))


def set_preferred(group: RaftGroup, peers: list[PeerInfo], rng: random.Random) -> None:
    """raftGroup.setPreferred: the only peer, else a random online one (any when none is)."""
    if not group.peers:
        return
    if len(group.peers) == 1:
        group.preferred = group.peers[0]
        return
    known = {p.id: p for p in peers}
    online = [pid for pid in group.peers if pid in known and not known[pid].offline]
    group.preferred = rng.choice(online or group.peers)


def create_group_for_stream(config: dict, client_cluster: str, alternates: list[str],
                            peers: list[PeerInfo], streams: list[StreamAssignment],
                            rng: random.Random, *, unique_tag: str = "",
                            max_ha_assets: int = 0) -> RaftGroup | PlacementError:
    """createGroupForStream: placement.cluster if set, else the client's cluster then its
    alternates (the errors of each accumulated); the group named, its preferred leader set."""
    replicas = int(config.get("num_replicas") or 0) or 1
    storage = config.get("storage") or "file"
    wanted = (config.get("placement") or {}).get("cluster") or ""
    clusters = [wanted] if wanted else [client_cluster, *alternates]
    errs = PlacementError()
    for cluster in clusters:
        chosen = select_peer_group(replicas, cluster, config, peers, streams, rng,
                                   unique_tag=unique_tag, max_ha_assets=max_ha_assets)
        if isinstance(chosen, PlacementError) or len(chosen) < replicas:
            if isinstance(chosen, PlacementError):
                errs.accumulate(chosen)
            continue
        group = RaftGroup(group_name("S", len(chosen), storage, _unique_name(rng)), chosen, storage, cluster)
        set_preferred(group, peers, rng)
        return group
    return errs


def consumer_replicas(config: dict, stream_config: dict) -> int:
    """ConsumerConfig.replicas: its own count, else the stream's; an ephemeral of a limits
    stream that asked for none is R1."""
    own = int(config.get("num_replicas") or 0)
    stream_replicas = int(stream_config.get("num_replicas") or 0) or 1
    if own == 0 or own > stream_replicas:
        durable = bool(config.get("durable_name"))
        if not durable and stream_config.get("retention", "limits") == "limits" and own == 0:
            return 1
        return stream_replicas
    return own


def create_group_for_consumer(config: dict, stream: StreamAssignment, peers: list[PeerInfo],
                              rng: random.Random) -> RaftGroup | PlacementError:
    """createGroupForConsumer: the stream's peers, or fewer of its online ones at random."""
    group_peers = list(stream.group.peers or ()) if stream.group else []
    if not group_peers or int(config.get("num_replicas") or 0) > len(group_peers):
        return PlacementError(misc=True)
    replicas = consumer_replicas(config, stream.config)
    known = {p.id: p for p in peers}
    active = [pid for pid in group_peers if pid in known and not known[pid].offline]
    if replicas // 2 + 1 > len(active):
        return PlacementError(offline=True)
    if 0 < replicas < len(group_peers):
        if len(active) < replicas:
            return PlacementError(offline=True)
        rng.shuffle(active)
        group_peers = active[:replicas]
    storage = "memory" if config.get("mem_storage") else (stream.config.get("storage") or "file")
    return RaftGroup(group_name("C", len(group_peers), storage, _unique_name(rng)), group_peers, storage)
