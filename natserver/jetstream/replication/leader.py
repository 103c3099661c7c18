"""The meta leader's side of the JetStream API, sans-IO: a create, update or delete of a stream
or consumer turned into the meta entry nats-server 2.15.1's meta leader proposes
(jetstream_cluster.go jsClusteredStreamRequest, jsClusteredStreamUpdateRequest,
jsClusteredStreamDeleteRequest, jsClusteredConsumerRequest, jsClusteredConsumerDeleteRequest),
or the ApiError it answers at once.

The API layer decodes the request (its JSON, the refusals of unsupported.py, the subject's
name against the body's) and hands over a StreamConfig or ConsumerConfig; here it is validated
as a standalone server validates it (stream.check_stream_config, check_update;
consumer.set_defaults, check_config), checked against the table (idempotent creates, names in
use, overlapping subjects) and the account's limits (natserver's limits dict: max_streams,
max_consumers, max_memory, max_storage, one tier), placed (placement.py) and encoded. A proposal stays in flight until
its entry is applied (``applied``, counting each stream's or consumer's pending proposals),
so that requests in between see it, as 2.15.1's inflight tables make them.

Who answers the client once the entry is applied is 2.15.1's: a stream's or consumer's
create and update are answered by the new group's leader with the stream's or consumer's info
(the member's, not this layer's); a delete by the member that led the group, with
``delete_response``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ...raft.wire import Entry, EntryType
from .. import errors, gotime
from ..consumer import ConsumerConfig, check_config, check_update, set_defaults
from ..stream import StreamConfig, check_stream_config
from ..stream import check_update as check_stream_update
from ..util import subjects_collide
from ..versioning import set_static_consumer_metadata, set_static_stream_metadata
from .consumer_desired import remap_consumers
from .desired import (
    SCALE_UP,
    copy_group,
    desired_of,
    populate_origin,
    reconcile,
    rename_single,
    set_desired,
    with_desired,
)
from .entries import (
    ConsumerAssignment,
    EntryError,
    MetaOp,
    RaftGroup,
    StreamAssignment,
    decode_entry,
    encode_entry,
)
from .placement import (
    PeerInfo,
    PlacementError,
    consumer_replicas,
    create_group_for_consumer,
    create_group_for_stream,
    select_peer_group,
    set_preferred,
)
from .state import Event, MetaState, StreamEvent

__all__ = ["MetaLeader", "Proposal", "delete_response"]

# jetstream_cluster.go syncSubjForStream: "$JSC.SYNC." and 8 base-62 digits.
SYNC_PREFIX = "$JSC.SYNC."
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX_LEN = 8
# consumer.go createConsumerName: an ephemeral's name, 8 base-62 digits (of a NUID's hash).
EPHEMERAL_NAME_LEN = 8
# ClientInfo.forProposal: what a proposal leaves out of the client's info.
_NOT_PROPOSED = ("jwt", "issuer_key")
_API_TYPE = "io.nats.jetstream.api.v1."
MOVE_NOT_YET = "natserver does not support moving a clustered stream yet"


@dataclass(frozen=True, slots=True)
class Proposal:
    """The meta entry to propose (``data``) and the assignment it carries."""

    op: MetaOp
    assignment: StreamAssignment | ConsumerAssignment
    data: bytes


def _for_proposal(client: dict | None) -> dict | None:
    if client is None:
        return None
    return {k: v for k, v in client.items() if k not in _NOT_PROPOSED}


def delete_response(event: Event) -> tuple[str, bytes] | None:
    """A removal's answer (the reply subject and JSON) for the member that answers it, as
    processClusterDeleteStream / processClusterDeleteConsumer send it; None when the entry
    carried no reply (a removal not asked for by a client)."""
    if event.kind != "removed" or not event.assignment.reply:
        return None
    kind = "stream_delete_response" if isinstance(event, StreamEvent) else "consumer_delete_response"
    return event.assignment.reply, b'{"type":"' + (_API_TYPE + kind).encode() + b'","success":true}'


def _reservation(tier: str, replicas: int, max_bytes: int) -> int:
    """jetstream.go accountReservation: un-tiered limits count every replica's bytes."""
    if max_bytes <= 0:
        return 0
    return replicas * max_bytes if not tier and replicas > 1 else max_bytes


class MetaLeader:
    """One meta leader's proposals: ``state`` the applied table, ``peers`` what it knows of the
    meta group's servers (set by the caller as their statsz come), ``cluster`` its own cluster
    (a client's when the client info names none), ``now_ns`` the clock."""

    def __init__(self, state: MetaState, cluster: str, rng: random.Random, now_ns: Callable[[], int], *,
                 unique_tag: str = "", max_ha_assets: int = 0) -> None:
        self.state = state
        self.cluster = cluster
        self.rng = rng
        self.now_ns = now_ns
        self.unique_tag = unique_tag
        self.max_ha_assets = max_ha_assets
        self.peers: list[PeerInfo] = []
        # What is proposed and not yet applied, by account and name (None: a removal), with
        # how many of its proposals are pending (2.15.1's inflightStreamInfo.ops).
        self.inflight_streams: dict[tuple[str, str], StreamAssignment | None] = {}
        self.inflight_consumers: dict[tuple[str, str, str], ConsumerAssignment | None] = {}
        self._pending: dict[tuple[str, ...], int] = {}

    # -- the table with what is in flight ------------------------------------------------------

    def stream(self, account: str, name: str) -> StreamAssignment | None:
        """streamAssignmentOrInflight."""
        key = (account, name)
        if key in self.inflight_streams:
            return self.inflight_streams[key]
        return self.state.stream(account, name)

    def consumer(self, account: str, stream: str, name: str) -> ConsumerAssignment | None:
        key = (account, stream, name)
        if key in self.inflight_consumers:
            return self.inflight_consumers[key]
        return self.state.consumer(account, stream, name)

    def _streams_of(self, account: str) -> list[StreamAssignment]:
        seen = dict(self.state.streams.get(account, {}))
        for (acc, name), sa in self.inflight_streams.items():
            if acc == account:
                if sa is None:
                    seen.pop(name, None)
                else:
                    seen[name] = sa
        return list(seen.values())

    def applied(self, entry: Entry) -> None:
        """A committed meta entry was applied (any server's proposal): one pending proposal of
        its stream or consumer less (removeInflightStreamProposal); the last one gone, the
        table answers again."""
        if entry.type != EntryType.NORMAL:
            return
        try:
            _, assignment = decode_entry(entry.data)
        except EntryError:
            return
        key: tuple[str, ...]
        if isinstance(assignment, StreamAssignment):
            key = (assignment.account, assignment.name)
        else:
            key = (assignment.account, assignment.stream, assignment.name)
        pending = self._pending.get(key, 0) - 1
        if pending > 0:
            self._pending[key] = pending
            return
        self._pending.pop(key, None)
        if len(key) == 2:
            self.inflight_streams.pop((key[0], key[1]), None)
        else:
            self.inflight_consumers.pop((key[0], key[1], key[2]), None)

    @property
    def pending(self) -> int:
        """Proposals made and not yet applied."""
        return sum(self._pending.values())

    def leader_changed(self) -> None:
        """Leadership lost or won: nothing is in flight any more (processLeaderChange)."""
        self.inflight_streams.clear()
        self.inflight_consumers.clear()
        self._pending.clear()

    def _propose(self, op: MetaOp, assignment: StreamAssignment | ConsumerAssignment) -> Proposal:
        key: tuple[str, ...]
        if isinstance(assignment, StreamAssignment):
            key = (assignment.account, assignment.name)
            self.inflight_streams[(assignment.account, assignment.name)] = (
                None if op == MetaOp.REMOVE_STREAM else assignment)
        else:
            key = (assignment.account, assignment.stream, assignment.name)
            self.inflight_consumers[(assignment.account, assignment.stream, assignment.name)] = (
                None if op == MetaOp.REMOVE_CONSUMER else assignment)
        self._pending[key] = self._pending.get(key, 0) + 1
        return Proposal(op, assignment, encode_entry(op, assignment))

    def _suffix(self) -> str:
        return "".join(self.rng.choice(_DIGITS) for _ in range(_SUFFIX_LEN))

    def _created(self) -> str:
        return gotime.format(self.now_ns())

    # -- streams -------------------------------------------------------------------------------

    def stream_create(self, client: dict, account: str, subject: str, reply: str, config: StreamConfig,
                      limits: dict | None = None) -> Proposal:
        """jsClusteredStreamRequest: ApiError, or the assignStreamOp proposal."""
        set_static_stream_metadata(config)
        cfg = check_stream_config(config, {}, limits)
        old = self.stream(account, cfg.name)
        if old is not None:
            if StreamConfig.from_json(old.config) != cfg:
                raise errors.stream_name_exist()
        if cfg.sealed:
            raise errors.stream_invalid_config("stream configuration for create can not be sealed")
        self._check_overlap(account, cfg, old)
        self._check_account_limits(account, cfg, limits)
        if old is not None:  # an equal create: the same group, sync subject and creation time
            group, sync, created = old.group, old.sync, old.created
        else:
            placed = create_group_for_stream(cfg.to_json(), client.get("cluster") or self.cluster,
                                             list(client.get("alts") or ()), self.peers,
                                             self.state.all_streams(), self.rng, unique_tag=self.unique_tag,
                                             max_ha_assets=self.max_ha_assets)
            if isinstance(placed, PlacementError):
                raise placed.api_error()
            group, sync, created = placed, SYNC_PREFIX + self._suffix(), self._created()
        sa = StreamAssignment(_for_proposal(client), created, cfg.to_json(), group, sync, subject, reply)
        return self._propose(MetaOp.ASSIGN_STREAM, sa)

    def _check_account_limits(self, account: str, cfg: StreamConfig, limits: dict | None) -> None:
        """jsClusteredStreamLimitsCheck: the account's streams (and what is in flight) of the
        limits' tier counted against max_streams, their reserved bytes of the stream's storage
        (un-tiered: max_bytes times the replicas) with this one's against max_memory or
        max_storage, its max_consumers against the account's."""
        if not limits:
            return
        tier = limits.get("tier") or ""
        replicas = max(cfg.num_replicas, 1)
        if tier and tier != f"R{replicas}":
            raise errors.no_limits()
        count = reserved = 0
        for sa in self._streams_of(account):
            theirs = max(int(sa.config.get("num_replicas") or 0), 1)
            if sa.name == cfg.name or (tier and theirs != replicas):
                continue
            count += 1
            max_bytes = int(sa.config.get("max_bytes") or 0)
            if max_bytes > 0 and (sa.config.get("storage") or "file") == cfg.storage:
                reserved += _reservation(tier, theirs, max_bytes)
        max_streams = limits.get("max_streams", -1)
        if max_streams > 0 and count >= max_streams:
            raise errors.max_streams_reached()
        max_consumers = limits.get("max_consumers", -1)
        if cfg.max_consumers > 0 and max_consumers > 0 and cfg.max_consumers > max_consumers:
            raise errors.max_consumers_reached()
        wanted = _reservation(tier, replicas, cfg.max_bytes if cfg.max_bytes >= 0 else 1)
        if cfg.storage == "memory":
            limit, error = limits.get("max_memory", -1), errors.memory_resources_exceeded
        else:
            limit, error = limits.get("max_storage", -1), errors.storage_resources_exceeded
        if limit >= 0 and (reserved > limit or wanted > limit - reserved):
            raise error()

    def _check_overlap(self, account: str, cfg: StreamConfig, self_sa: StreamAssignment | None) -> None:
        """jetStream.subjectsOverlap: the account's other streams."""
        for sa in self._streams_of(account):
            if self_sa is not None and sa.name == self_sa.name:
                continue
            for theirs in sa.config.get("subjects") or ():
                if any(subjects_collide(mine, theirs) for mine in cfg.subjects or ()):
                    raise errors.stream_subject_overlap()

    def stream_update(self, client: dict, account: str, subject: str, reply: str, config: StreamConfig,
                      limits: dict | None = None) -> Proposal:
        """jsClusteredStreamUpdateRequest: the group kept, its preferred leader cleared; a
        change of the replica count recorded as the group's desired state (desired.py: the
        stream's leader drives it there, its consumers following: consumer_desired.py), the
        peers added chosen as placement chooses them. A change of placement (a move) is
        refused here: not built."""
        old = self.stream(account, config.name)
        if old is None:
            raise errors.stream_not_found()
        set_static_stream_metadata(config)
        old_cfg = StreamConfig.from_json(old.config)
        replicas = config.num_replicas or 1
        move = config.placement is not None and (config.placement or None) != (old_cfg.placement or None)
        scale = replicas != old_cfg.num_replicas
        if move and scale:
            raise errors.stream_move_and_scale()
        if move:
            raise errors.stream_update(MOVE_NOT_YET)
        if scale:  # (check_update is a single server's, which has no replicas to change)
            old_cfg.num_replicas = replicas
        cfg = check_stream_update(old_cfg, config, {}, limits)
        self._check_overlap(account, cfg, old)
        group = None
        if old.group is not None and scale:
            group = self._scaled_group(old, cfg, client, account, limits)
        elif old.group is not None:
            group = RaftGroup(old.group.name, list(old.group.peers or ()), old.group.storage, old.group.cluster,
                              "", dict(old.group.extra))
            if desired_of(group) is None:
                group.extra.pop(SCALE_UP, None)
        sa = StreamAssignment(_for_proposal(client), old.created, cfg.to_json(), group,
                              old.sync or SYNC_PREFIX + self._suffix(), subject, reply)
        return self._propose(MetaOp.UPDATE_STREAM, sa)

    def _scaled_group(self, old: StreamAssignment, cfg: StreamConfig, client: dict, account: str,
                      limits: dict | None) -> RaftGroup:
        """The group of a replica change (jsClusteredStreamUpdateRequestLocked's isReplicaChange):
        a scale up chooses the added peers (the current or desired ones kept first), a group of
        one renamed (it had no RAFT group); a scale down leaves the choice to the group's leader."""
        og = old.group
        assert og is not None
        current_desired = desired_of(og)
        current = list(current_desired.get("peers") or ()) if current_desired else list(og.peers or ())
        replicas = cfg.num_replicas
        now = self._created()
        if replicas > len(current):
            self._check_account_limits(account, cfg, limits)
            cluster = og.cluster or (cfg.placement or {}).get("cluster") or client.get("cluster") or self.cluster
            chosen = select_peer_group(replicas, cluster, cfg.to_json(), self.peers, self.state.all_streams(),
                                       self.rng, existing=current, unique_tag=self.unique_tag,
                                       max_ha_assets=self.max_ha_assets)
            if isinstance(chosen, PlacementError):
                raise chosen.api_error()
            group = RaftGroup(og.name, list(og.peers or ()), og.storage, cluster, og.preferred, dict(og.extra))
            if len(og.peers or ()) == 1 and current_desired is None:
                rename_single(group, self.rng, len(chosen))
            preferred = current[0] if len(current) == 1 else og.preferred
            ng = with_desired(og, group.name, chosen, cluster, preferred, self.rng, now)
            if current_desired is None:
                ng.extra.pop(SCALE_UP, None)  # (a scale up of a settled group starts afresh)
        else:
            ng = with_desired(og, og.name, current, og.cluster, og.preferred, self.rng, now, scale_down=True)
        old_cfg = StreamConfig.from_json(old.config)
        populate_origin(ng, og, old_cfg.num_replicas, old.config.get("placement"))
        return ng

    def stream_peer_remove(self, account: str, name: str, peer: str, *, require_replicas: bool = True) -> Proposal:
        """removePeerFromStreamLocked (STREAM.PEER.REMOVE of a member, checked by the caller):
        the peer out of the assignment at once (its server drops its copy), a replacement
        placed as placement chooses it (reassignStreamPeers: the largest group that fits) as the
        group's desired state, the peer listed as removed; the group's leader takes it out of
        the RAFT group and adds the replacement (desired.py). Refused (10075) when no
        replacement keeps the replica count (``require_replicas``: STREAM.PEER.REMOVE's; a server's
        removal shrinks the group instead); its consumers follow (remap_consumers: the
        stream's next reconcile)."""
        osa = self.stream(account, name)
        if osa is None or osa.group is None:
            raise errors.stream_not_found()
        og = osa.group
        current = desired_of(og)
        base = list(current.get("peers") or ()) if current else list(og.peers or ())
        cluster = (current.get("cluster") or "") if current else og.cluster
        retain = [p for p in base if p != peer]
        chosen: list[str] | PlacementError = retain
        for replicas in range(len(base), 0, -1):
            chosen = select_peer_group(replicas, cluster, osa.config, self.peers, self.state.all_streams(), self.rng,
                                       existing=retain, ignore=[peer], unique_tag=self.unique_tag,
                                       max_ha_assets=self.max_ha_assets)
            if not isinstance(chosen, PlacementError) or replicas <= len(retain) + 1:
                break
        target = retain if isinstance(chosen, PlacementError) else chosen
        if require_replicas and len(target) < int(osa.config.get("num_replicas") or 1):
            raise errors.peer_remap()
        preferred = og.preferred if og.preferred != peer else ""
        ng = with_desired(og, og.name, target, cluster, preferred, self.rng, self._created(),
                          scale_down=bool(current and current.get("scale_down")))
        ng.peers = [p for p in ng.peers or () if p != peer]
        desired = dict(desired_of(ng) or {})
        removed = [p for p in desired.get("removed") or () if p not in target]
        desired["removed"] = removed + ([peer] if peer not in removed else [])
        if desired.get("preferred") and desired["preferred"] not in target and desired["preferred"] not in ng.peers:
            desired.pop("preferred")  # (no stale preferred: the removed peer of a group of one)
        set_desired(ng, desired)
        if ng.preferred and ng.preferred not in ng.peers and ng.preferred not in target:
            ng.preferred = ""
        if not ng.peers:  # (no peer left: straight to the desired ones)
            ng.peers = list(target)
        sa = StreamAssignment(osa.client, osa.created, osa.config, ng, osa.sync, osa.subject, "")
        return self._propose(MetaOp.UPDATE_STREAM, sa)

    def stream_reconcile(self, account: str, name: str, update: dict) -> list[Proposal]:
        """reconcileDesiredStreamAssignment: a stream group leader's reconcile request, the
        assignment it changes proposed, then its consumers moved onto the stream's target
        peers (remap_consumers; not before a scale down chose its peers), the ephemerals that
        lost every peer removed. The stream's desired state stays until no consumer moves."""
        osa = self.stream(account, name)
        if osa is None or osa.group is None or not int(update.get("term") or 0):
            return []
        desired = desired_of(osa.group)
        consumers: list[ConsumerAssignment] = []
        deleted: list[ConsumerAssignment] = []
        done = False
        if desired is not None and not desired.get("scale_down"):
            consumers, deleted, done = remap_consumers(osa, self._consumers_of(account, name), self.rng,
                                                       self._created())
        out = []
        ng = reconcile(osa.group, update, int(osa.config.get("num_replicas") or 1), done, self.rng)
        if ng is not None:
            if desired_of(ng) is None and len(ng.peers or ()) == 1:
                rename_single(ng, self.rng)
            sa = StreamAssignment(osa.client, osa.created, osa.config, ng, osa.sync, osa.subject, "")
            out.append(self._propose(MetaOp.UPDATE_STREAM, sa))
        out.extend(self._propose(MetaOp.ASSIGN_CONSUMER, ca) for ca in consumers)
        out.extend(self._propose(MetaOp.REMOVE_CONSUMER, ca) for ca in deleted)
        return out

    def consumer_reconcile(self, account: str, stream: str, name: str, update: dict) -> Proposal | None:
        """reconcileDesiredConsumerAssignment: a consumer group leader's reconcile request (no
        peer taken that does not host the stream yet), the assignment it changes proposed."""
        osa = self.stream(account, stream)
        oca = self.consumer(account, stream, name)
        if osa is None or osa.group is None or oca is None or oca.group is None or not int(update.get("term") or 0):
            return None
        for peer in update.get("meta_peers") or ():
            if peer not in (oca.group.peers or ()) and peer not in (osa.group.peers or ()):
                return None
        ng = reconcile(oca.group, update, consumer_replicas(oca.config, osa.config), True, self.rng)
        if ng is None:
            return None
        if desired_of(ng) is None and len(ng.peers or ()) == 1:
            rename_single(ng, self.rng, 1, "C")
        ca = ConsumerAssignment(oca.client, oca.created, oca.name, oca.stream, oca.config, ng, oca.subject,
                                oca.reply)
        return self._propose(MetaOp.ASSIGN_CONSUMER, ca)

    def stream_delete(self, client: dict, account: str, subject: str, reply: str, name: str) -> Proposal:
        """jsClusteredStreamDeleteRequest: the stream's config, group and creation time with this
        request's client, subject and reply (and no sync subject, as 2.15.1 writes it)."""
        old = self.stream(account, name)
        if old is None:
            raise errors.stream_not_found()
        sa = StreamAssignment(_for_proposal(client), old.created, old.config, old.group, "", subject, reply)
        return self._propose(MetaOp.REMOVE_STREAM, sa)

    # -- consumers -----------------------------------------------------------------------------

    def consumer_create(self, client: dict, account: str, subject: str, reply: str, stream: str,
                        config: ConsumerConfig, name: str = "", action: str = "",
                        max_ack_pending_limit: int = -1) -> Proposal:
        """jsClusteredConsumerRequest: a new consumer placed on its stream's peers, or an
        existing one updated."""
        sa = self.stream(account, stream)
        if sa is None:
            raise errors.stream_not_found()
        scfg = StreamConfig.from_json(sa.config)
        set_static_consumer_metadata(config)
        set_defaults(config, max_ack_pending_limit, scfg.consumer_limits)
        check_config(config, scfg.subjects or [], scfg.retention, max_ack_pending_limit, scfg.consumer_limits)
        oname = name or config.durable_name or config.name
        existing = self.consumer(account, stream, oname) if oname else None
        if existing is not None:
            return self._consumer_update(client, subject, reply, sa, existing, config, action)
        if action == "update":
            raise errors.consumer_does_not_exist()
        if scfg.retention == "workqueue" and not config.direct:
            self._check_workqueue(account, stream, oname, config)
        placed = create_group_for_consumer(config.to_json(), sa, self.peers, self.rng)
        if isinstance(placed, PlacementError):
            raise errors.insufficient_resources()
        set_preferred(placed, self.peers, self.rng)
        placed.cluster = sa.group.cluster if sa.group else ""
        if not oname:
            while not oname or self.consumer(account, stream, oname) is not None:
                oname = "".join(self.rng.choice(_DIGITS) for _ in range(EPHEMERAL_NAME_LEN))
        ca = ConsumerAssignment(_for_proposal(client), self._created(), oname, stream, config.to_json(), placed,
                                subject, reply)
        return self._propose(MetaOp.ASSIGN_CONSUMER, ca)

    def _consumers_of(self, account: str, stream: str) -> list[ConsumerAssignment]:
        """consumerAssignmentsOrInflightSeq: the stream's consumers with those in flight."""
        sa = self.state.stream(account, stream)
        seen = dict(sa.consumers) if sa is not None else {}
        for (acc, sname, name), ca in self.inflight_consumers.items():
            if (acc, sname) == (account, stream):
                if ca is None:
                    seen.pop(name, None)
                else:
                    seen[name] = ca
        return list(seen.values())

    def _check_workqueue(self, account: str, stream: str, name: str, config: ConsumerConfig) -> None:
        """jsClusteredConsumerRequest's work queue pre-checks of a new consumer, in its order:
        explicit acks, deliver all, then one consumer per subject against the others."""
        if config.ack_policy not in ("explicit", "flow_control"):
            raise errors.consumer_wq_requires_explicit_ack()
        if config.deliver_policy != "all":
            raise errors.consumer_wq_not_deliver_all()
        mine = config.filters
        for other in self._consumers_of(account, stream):
            ocfg = other.config
            if other.name == name or ocfg.get("direct") or ocfg.get("sourcing"):
                continue
            if not mine:
                raise errors.consumer_wq_multiple_unfiltered()
            theirs = [ocfg["filter_subject"]] if ocfg.get("filter_subject") else list(ocfg.get("filter_subjects") or ())
            # (an unfiltered other: stream.go partitionUnique on the member refuses it as well)
            if not theirs or any(subjects_collide(a, b) for a in mine for b in theirs):
                raise errors.consumer_wq_not_unique()

    def _consumer_update(self, client: dict, subject: str, reply: str, sa: StreamAssignment,
                         existing: ConsumerAssignment, config: ConsumerConfig, action: str) -> Proposal:
        """An existing consumer (jsClusteredConsumerRequest's else branch): its group (scale_up
        reset) and creation time kept, its pause_until kept, the new config, client, subject
        and reply. A change of its replica count as the group's desired state: a scale up
        takes peers of the stream's (10126 when it has too few), a scale down leaves the
        choice to the group's leader."""
        old = ConsumerConfig.from_json(existing.config)
        config.pause_until = old.pause_until
        if action == "create" and old != config:
            raise errors.consumer_already_exists()
        check_update(old, config)
        group = None
        if existing.group is not None:
            group = self._consumer_group(sa, existing, config)
        ca = ConsumerAssignment(_for_proposal(client), existing.created, existing.name, existing.stream,
                                config.to_json(), group, subject, reply)
        return self._propose(MetaOp.ASSIGN_CONSUMER, ca)

    def _consumer_group(self, sa: StreamAssignment, existing: ConsumerAssignment,
                        config: ConsumerConfig) -> RaftGroup:
        """jsClusteredConsumerRequest's group of an updated consumer (scale_up reset unless it
        is moving), with desired state when its replica count changes."""
        og = existing.group
        assert og is not None
        group = copy_group(og)
        if desired_of(og) is None:
            group.extra.pop(SCALE_UP, None)
        before = consumer_replicas(existing.config, sa.config)
        after = consumer_replicas(config.to_json(), sa.config)
        if before < after:
            stream_peers = list(sa.group.peers or ()) if sa.group is not None else []
            if len(stream_peers) < after:
                raise errors.consumer_replicas_exceeds_stream()
            head = stream_peers[:after]  # (rand.Shuffle of the first ``after`` only)
            self.rng.shuffle(head)
            peers = list(group.peers or ())
            for peer in head + stream_peers[after:]:
                if len(peers) >= after:
                    break
                if peer not in peers:
                    peers.append(peer)
            name = group.name
            if len(og.peers or ()) == 1 and desired_of(og) is None:
                target = RaftGroup(name, peers, og.storage)
                rename_single(target, self.rng, len(peers), "C")
                name = target.name
            return with_desired(og, name, peers, group.cluster, group.preferred, self.rng, self._created())
        if before > after:
            return with_desired(og, og.name, list(og.peers or ()), og.cluster, og.preferred, self.rng,
                                self._created(), scale_down=True)
        return group

    def consumer_pause(self, client: dict, account: str, subject: str, stream: str, name: str,
                       until: str | None) -> Proposal:
        """jsConsumerPauseRequest in a cluster: the consumer's assignment with its new
        pause_until (and version metadata), proposed; the caller answers at once."""
        if self.stream(account, stream) is None:
            raise errors.stream_not_found()
        old = self.consumer(account, stream, name)
        if old is None:
            raise errors.consumer_not_found()
        config = ConsumerConfig.from_json(old.config)
        config.pause_until = until
        set_static_consumer_metadata(config)
        ca = ConsumerAssignment(_for_proposal(client), old.created, old.name, stream, config.to_json(), old.group,
                                subject, "")
        return self._propose(MetaOp.ASSIGN_CONSUMER, ca)

    def consumer_delete(self, client: dict, account: str, subject: str, reply: str, stream: str,
                        name: str) -> Proposal:
        """jsClusteredConsumerDeleteRequest."""
        if self.stream(account, stream) is None:
            raise errors.stream_not_found()
        old = self.consumer(account, stream, name)
        if old is None:
            raise errors.consumer_not_found()
        ca = ConsumerAssignment(_for_proposal(client), old.created, old.name, stream, old.config, old.group,
                                subject, reply)
        return self._propose(MetaOp.REMOVE_CONSUMER, ca)
