"""Replicated consumers (issue #32): a consumer group per consumer of more than one peer, run as
nats-server 2.15.1 runs them (jetstream_cluster.go processClusterCreateConsumer,
monitorConsumer, applyConsumerEntries, processConsumerLeaderChange; consumer.go setLeader).

Every member server of the consumer's group runs a node of it (natserver.nrg, managed, its
folder ``_js_/<group>`` as createRaftGroup's). Every member applies the committed entries to a
:class:`ConsumerApplier` (the consumer store's state). Only the group's leader runs natserver's
:class:`Consumer` (it delivers, takes acks, serves pulls and CONSUMER.INFO, ``$JSC.CI``); what
its deliveries, acks and pull requests changed is proposed as 2.15.1's entries
(updateDeliveredOp, updateAcksOp, updateSkipOp, add/removePendingRequest). A server that
becomes leader loads the replicated state into a new Consumer once it has applied everything
of the earlier terms (``load_into``): what was acked is not delivered again, what was delivered
and not acked comes again after ack_wait; the pull requests the old leader had are told
``409 Leadership Change`` (consumer.go checkPendingRequests). A leader that loses the
leadership stops delivering (its Consumer leaves the stream).

natserver's Consumer is the single server's (consumer.py): the leader compares it with what it
proposed (``shadow``, a ConsumerApplier of its proposals) every REPLICATE_INTERVAL and proposes
the difference, instead of proposing at each delivery and ack as consumer.go does.
A nak with a delay and a ``+WPI`` are proposed as 2.15.1's processNak and progressUpdate do:
the message's delivery time moved (to ``now - ack_wait + delay`` for a nak: a new leader
redelivers it when the delay is over). Not replicated: a nak without a delay (nor in 2.15.1:
its redelivery queue is the leader's), pauses and pins (the leader's own).

Interest and workqueue streams (consumer.go processReplicatedAck, stream.go ackMsg): every
member applies the group's acks to its state; on the stream's leader, a message acked by every
consumer whose filter takes it is proposed for deletion through the stream's group (2.15.1's
streamMsgDelete, ``no_erase``), so that every replica removes it. A server that becomes the
stream's leader looks for what was acked before (``check_interest``, at most SCAN_LIMIT messages).
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import trio

from .. import clock
from ..nrg import Group, NrgHost
from ..raft import Committed, EntryType, NotLeader, SnapshotError, StorageError, node_id
from . import advisories, errors, gotime
from .consumer import Consumer, ConsumerConfig
from .replication.consumer_desired import CONSUMER_RECONCILE_SUBJECT
from .replication.consumer_group import ConsumerApplier
from .replication.desired import SCALE_UP, desired_info, desired_of, next_step, peer_view, take_step
from .replication.entries import ConsumerAssignment
from .replication.group_codec import Acked, CodecError, Delivered, PendingRequest, Skipped, decode_consumer_op
from .replication.placement import consumer_replicas
from .replication.state import ConsumerEvent
from .util import dumps, is_empty_request

__all__ = ["ConsumerGroups"]

log = logging.getLogger("natserver")

_T = "io.nats.jetstream.api.v1."
# How often a leader proposes what its consumers' deliveries and acks changed (natserver's own:
# consumer.go proposes at each one; this batches what one interval changed).
REPLICATE_INTERVAL = 0.01
# jetstream_cluster.go monitorConsumer: a snapshot (and the log compacted) after this many
# entries (compactNumMin), not more often than MIN_SNAP_DELTA (minSnapDelta).
COMPACT_NUM_MIN = 1024
MIN_SNAP_DELTA = 10.0
# consumer.go checkPendingRequests: what a new leader tells the old leader's pull requests.
LEADERSHIP_CHANGE = b"NATS/1.0 409 Leadership Change\r\n\r\n"
# raft.go lostQuorumInterval: a peer not heard from this long is not current (clusterInfo).
CURRENT_WITHIN = 10.0
CONSUMER_INFO_SUBJECT = "$JSC.CI.{account}.{stream}.{consumer}"  # jetstream_cluster.go clusterConsumerInfoT
# jetstream_cluster.go migrateFastCheckInterval: a replica change's next step after one of its
# membership changes committed (the others wait for the cluster's MIGRATE_INTERVAL).
MIGRATE_FAST_INTERVAL = 0.05
# natserver's own bound (one thread serves every client): the messages a new stream leader of
# an interest or workqueue stream checks for acks it did not propose the removal of (2.15.1's
# checkInterestState goes through them all).
SCAN_LIMIT = 10_000


class GroupsHost(Protocol):
    """What the consumer groups need of the meta layer (cluster.JetStreamCluster)."""

    nrg: NrgHost
    state: Any  # the meta group's MetaState (a moving consumer's stream peers)
    name: str  # the cluster's name
    node_id: str
    names: dict[str, str]  # node id -> server name

    @property
    def system(self) -> Any: ...
    def _route_peers(self) -> list[str]: ...
    def spawn(self, fn, *args) -> None: ...
    def _answer(self, engine: Any, reply: str, response: dict | bytes, *, error: bool = False) -> None: ...
    def stepdown_preferred(self, node: Any, payload: bytes) -> str: ...


@dataclass(eq=False)
class Replicated:
    """One replicated consumer on this server (a member of its group)."""

    engine: Any
    account: str
    ca: ConsumerAssignment
    group: Group
    applier: ConsumerApplier
    reply: str = ""  # a create's reply: answered by the first leader (processConsumerLeaderChange)
    consumer: Consumer | None = None  # the leader's
    shadow: ConsumerApplier | None = None  # the leader's proposals applied
    fingerprint: tuple = ()
    starting: bool = False  # leader, waiting to have applied up to start_at
    start_at: int = 0
    applied: int = 0
    leader_since: int = 0  # ns
    unsnapshotted: int = 0
    snapshot_at: float = 0.0
    info_sub: Any = None
    outbox: list = field(default_factory=list)  # encoded ops of the round (the leader's)
    no_stream_logged: bool = False
    quorum_lost_at: float = float("-inf")  # the last quorum-lost advisory (monotonic)
    # The leader's held ack replies: (the log index whose commit answers them, replies).
    ack_replies: list = field(default_factory=list)
    match: Any = None  # its filters' predicate on subjects (bytes), None: every subject
    migration: tuple[str, str] | None = None  # the leader's last migration step (2.15.1's status)
    scale_up: bool = False  # a member added by a replica change, an observer until data comes

    @property
    def stream_name(self) -> str:
        return self.ca.stream

    @property
    def name(self) -> str:
        return self.ca.name


def _matcher(config: dict):
    return ConsumerConfig.from_json(config).matcher()


def _no_longer_needed(applier: ConsumerApplier, op: Acked | Delivered, floor: int, delivered: int) -> list[int]:
    """The stream sequences an applied op acknowledged (processReplicatedAck's ack and an
    AckAll's ackAllSeqs; an ack none consumer's delivery): the op's ack, those its floor moved
    over, and those its delivered sequence moved over without their being pending (natserver's
    leader proposes what one interval delivered and acked as the floor's, or the delivered
    sequence's, move), at most SCAN_LIMIT of each."""
    out = [op.sseq] if isinstance(op, Acked) else []
    new_floor, new_delivered = applier.ack_floor[1], applier.delivered[1]
    out.extend(range(max(floor + 1, new_floor - SCAN_LIMIT + 1), new_floor + 1))
    pending = applier.pending
    out.extend(seq for seq in range(max(delivered + 1, new_delivered - SCAN_LIMIT + 1, new_floor + 1),
                                    new_delivered + 1) if seq not in pending)
    return out


def _applier(config: dict) -> ConsumerApplier:
    cfg = ConsumerConfig.from_json(config)
    return ConsumerApplier(cfg.ack_policy, cfg.max_deliver)


def replicated(ca: ConsumerAssignment) -> bool:
    """A consumer of a group of more than one peer, or one moving (desired state: 2.15.1 runs
    a group of one while an R1 consumer scales up); a settled R1 consumer runs without one."""
    return ca.group is not None and (len(ca.group.peers or ()) > 1 or desired_of(ca.group) is not None)


class ConsumerGroups:
    """The consumer groups this server is a member of."""

    def __init__(self, host: GroupsHost) -> None:
        self.host = host
        self.consumers: dict[tuple[str, str, str], Replicated] = {}  # (account, stream, consumer)
        # Set when a consumer's group makes this server its leader: run() sleeps on it while no
        # consumer leads here (no timer every REPLICATE_INTERVAL on a server leading none).
        self._leading = trio.Event()
        self.rounds = 0  # replication rounds run (tests)
        self.by_stream: dict[tuple[str, str], dict[str, Replicated]] = {}  # (account, stream) -> by name

    # -- the meta layer's events ------------------------------------------------------------

    def consumer_event(self, engine: Any, event: ConsumerEvent, recovering: bool) -> bool:
        """A consumer assignment applied (cluster._consumer_event): True when it is a
        replicated consumer's and handled here. A removal tears the group down and returns
        False: the meta layer drops the leader's Consumer and answers as for any other."""
        ca = event.assignment
        key = (event.account, ca.stream, ca.name)
        rc = self.consumers.get(key)
        if event.kind == "removed" or not event.member or not replicated(ca):
            if rc is not None and event.kind != "removed" and event.member:
                self._hand_over(rc, ca)  # (scaled down to one: it runs here alone, its state kept)
            elif rc is not None:
                self._remove(rc, files=event.kind == "removed")
                if event.kind == "removed":
                    self._cleanup_no_interest(rc)
            return False
        reply = "" if recovering else ca.reply
        if rc is None:
            self._start(engine, event.account, ca, reply)
            return True
        old = rc.ca
        rc.ca = ca
        consumer = rc.consumer
        if consumer is not None and rc.group.leader:  # an update: the leader applies and answers
            cfg = ConsumerConfig.from_json(ca.config)
            if cfg.pause_until != consumer.cfg.pause_until:  # (the meta leader's pause: answered)
                engine.api.consumers.pause_applied(consumer, cfg.pause_until)
            if cfg != consumer.cfg:
                consumer.reconfigure(cfg)
            if reply:
                self.host._answer(engine, reply, {"type": _T + "consumer_create_response", **self.info(rc)})
        if old.config != ca.config:  # (what the store records depends on them)
            cfg = ConsumerConfig.from_json(ca.config)
            rc.applier.ack_policy, rc.applier.max_deliver = cfg.ack_policy, cfg.max_deliver
            rc.match = cfg.matcher()
        if rc.group.leader and (desired_of(ca.group) is not None or rc.migration is not None):
            self.migrate(rc)  # (the assignment changed: the next step at once)
        return True

    def _start(self, engine: Any, account: str, ca: ConsumerAssignment, reply: str) -> None:
        """processClusterCreateConsumer: this server's node of the group (from its files if
        it ran before); the preferred peer campaigns at once."""
        assert ca.group is not None
        nrg = self.host.nrg
        existing = nrg.groups.get(ca.group.name)
        if existing is not None:  # (a previous run of this consumer left it: start afresh)
            nrg.stop_group(ca.group.name)
        rc = Replicated(engine, account, ca, None, _applier(ca.config), reply)  # type: ignore[arg-type]
        rc.match = _matcher(ca.config)
        fresh = not os.path.exists(os.path.join(nrg.groups_dir, ca.group.name))
        # (raft.go's scale-up observer: a member added with an empty log waits for the leader's data)
        rc.scale_up = fresh and bool(ca.group.extra.get(SCALE_UP)) and ca.group.peers != [self.host.node_id]
        group = nrg.create_group(ca.group.name, list(ca.group.peers or ()), partial(self._apply, rc), managed=True,
                                 observer=rc.scale_up)
        rc.group = group
        rc.snapshot_at = clock.monotonic()
        group.on_leader_change = partial(self._leader_changed, rc)
        self.consumers[(account, ca.stream, ca.name)] = rc
        self.by_stream.setdefault((account, ca.stream), {})[ca.name] = rc
        stream = engine.streams.get(ca.stream)
        if stream is not None:  # a copy recovered from the stream's folder: only a leader runs one
            local = stream.consumers.get(ca.name)
            if local is not None:
                del stream.consumers[ca.name]
                if fresh and ca.group.peers == [self.host.node_id]:  # (an R1 consumer scaling up)
                    rc.applier.seed_from(local)
        subject = CONSUMER_INFO_SUBJECT.format(account=account, stream=ca.stream, consumer=ca.name)
        rc.info_sub = self.host.system.subscribe(subject, partial(self._info_request, rc))
        if ca.group.preferred == self.host.node_id and group.node.last_index == 0:
            group.campaign()

    def _remove(self, rc: Replicated, *, files: bool) -> None:
        """The group stops (and its folder goes when the consumer is deleted); the leader's
        Consumer stays in its stream for the meta layer to drop (its advisory, its waiting
        requests told)."""
        self.consumers.pop((rc.account, rc.stream_name, rc.name), None)
        of_stream = self.by_stream.get((rc.account, rc.stream_name))
        if of_stream is not None and of_stream.get(rc.name) is rc:
            del of_stream[rc.name]
            if not of_stream:
                del self.by_stream[(rc.account, rc.stream_name)]
        if rc.info_sub is not None:
            self.host.system.unsubscribe(rc.info_sub)
            rc.info_sub = None
        if not files:
            self._stop_leading(rc)
        rc.consumer = rc.shadow = None
        self.host.nrg.stop_group(rc.group.name)
        if files:
            shutil.rmtree(rc.group.folder, ignore_errors=True)

    def _hand_over(self, rc: Replicated, ca: ConsumerAssignment) -> None:
        """A group scaled down to this server alone (its assignment now R1, renamed): the
        group goes and the consumer runs here as an R1 one, from the leader's Consumer or the
        replicated state (the meta layer then finds it in its stream)."""
        consumer, rc.consumer, rc.shadow = rc.consumer, None, None
        stream = rc.engine.streams.get(rc.stream_name)
        rc.starting = False
        if consumer is None and stream is not None:
            cfg = ConsumerConfig.from_json(ca.config)
            consumer = Consumer(stream, rc.name, cfg, rc.ca.created_ns or clock.now_ns())
            rc.applier.load_into(consumer)
            consumer.num_pending()
            stream.consumers[rc.name] = consumer
        if consumer is not None:
            consumer.held_ack_replies = None
            consumer.dirty = True  # (an R1 durable's state is its own file's from now on)
        for _, replies in rc.ack_replies:
            for reply in replies:
                rc.engine.send(reply, b"")
        rc.ack_replies.clear()
        self._remove(rc, files=True)

    def stream_removed(self, account: str, stream: str) -> None:
        """A stream gone (deleted, or no longer here): its consumers' groups and folders go
        (the meta layer drops the leaders' Consumers with the stream)."""
        for rc in [rc for key, rc in self.consumers.items() if key[:2] == (account, stream)]:
            self._remove(rc, files=True)

    def stop(self) -> None:
        """The server stops: each group's state snapshotted (monitorConsumer at shutdown), its
        node stopped (its files stay)."""
        for rc in list(self.consumers.values()):
            if rc.unsnapshotted:
                self._snapshot(rc)
            self._remove(rc, files=False)

    # -- the group's entries ----------------------------------------------------------------

    def _apply(self, rc: Replicated, committed: list[Committed]) -> None:
        """applyConsumerEntries on every member; a leader that waited for them starts."""
        if rc.scale_up and committed:  # (raft.go resetInitializing: the log has data, the observer goes)
            rc.scale_up = False
            rc.group.node.observer = False
        acked: list[int] = []
        applier = rc.applier
        stream = rc.engine.streams.get(rc.stream_name)
        retained = stream is not None and stream.cfg.retention != "limits"
        for c in committed:
            entry = c.entry
            rc.applied = c.index
            if entry.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER) and rc.group.leader and \
                    desired_of(rc.ca.group) is not None:  # (monitorConsumer: the next step soon)
                self.host.spawn(self._migrate_soon, rc)
            if entry.type in (EntryType.NORMAL, EntryType.SNAPSHOT):
                try:
                    if entry.type == EntryType.NORMAL and retained:
                        op = decode_consumer_op(entry.data)
                        floor, delivered = applier.ack_floor[1], applier.delivered[1]
                        applier.apply_op(op)
                        if isinstance(op, (Acked, Delivered)):
                            acked.extend(_no_longer_needed(applier, op, floor, delivered))
                    else:
                        applier.apply(entry)
                except CodecError as exc:
                    log.warning("JetStream cluster: consumer '%s > %s' entry %d did not decode: %s",
                                rc.stream_name, rc.name, c.index, exc)
                rc.unsnapshotted += 1
        if acked:
            self._retain(rc, acked)
        if rc.ack_replies:
            self._answer_acks(rc)
        if rc.starting and rc.applied >= rc.start_at:
            self._start_leading(rc)
        if rc.unsnapshotted >= COMPACT_NUM_MIN and clock.monotonic() - rc.snapshot_at >= MIN_SNAP_DELTA:
            self._snapshot(rc)

    # -- interest and workqueue retention ----------------------------------------------------

    def has_consumers(self, account: str, stream: str) -> bool:
        """Does this server hold a replicated consumer of the stream (a follower's copy of an
        interest stream stores messages then, as 2.15.1's, whose followers run the consumer)?"""
        return (account, stream) in self.by_stream

    def _retain(self, rc: Replicated, acked: list[int]) -> None:
        """stream.go ackMsg on every member: the stream's leader proposes the removal of what
        no consumer needs any more; the followers leave it to that."""
        stream = rc.engine.streams.get(rc.stream_name)
        if stream is None or stream.cfg.retention == "limits":
            return
        replica = stream.replica
        if replica is None or not replica.leading:
            return
        groups = list(self.by_stream.get((rc.account, rc.stream_name), {}).values())
        gone = [seq for seq in sorted(set(acked)) if self._no_interest(stream, groups, seq)]
        if gone:
            replica.remove_acked(gone)

    def check_interest(self, engine: Any, stream: Any) -> None:
        """A new leader of an interest or workqueue stream (checkInterestState): the messages
        the consumers' replicated acks leave to nobody (acked before it led), at most
        SCAN_LIMIT of them from the first, proposed for removal."""
        if stream.cfg.retention == "limits" or stream.replica is None or not stream.replica.leading:
            return
        account = engine.account_name or ""
        groups = list(self.by_stream.get((account, stream.name), {}).values())
        if not groups:
            return
        store = stream.store
        first = store.first_seq
        last = min(store.last_seq, max(rc.applier.delivered[1] for rc in groups), first + SCAN_LIMIT - 1)
        gone = [seq for seq in range(first, last + 1) if self._no_interest(stream, groups, seq)]
        if gone:
            stream.replica.remove_acked(gone)

    def _cleanup_no_interest(self, rc: Replicated) -> None:
        """A replicated consumer of an interest stream deleted (consumer.go
        cleanupNoInterestMessages): on the stream's leader, with no consumer left the stream's
        purge, else the removal of what no other consumer needs from its ack floor on (at most
        SCAN_LIMIT messages), proposed through the stream's group."""
        stream = rc.engine.streams.get(rc.stream_name)
        if stream is None or stream.cfg.retention != "interest" or stream.replica is None or \
                not stream.replica.leading:
            return
        groups = list(self.by_stream.get((rc.account, rc.stream_name), {}).values())
        store = stream.store
        if not groups and not any(name != rc.name for name in stream.consumers):
            if store.msgs:
                stream.replica.purge(None, None)
            return
        start = max(rc.applier.ack_floor[1], store.first_seq)
        if store.last_seq - start > SCAN_LIMIT:
            return
        gone = [seq for seq in range(start, store.last_seq + 1) if self._no_interest(stream, groups, seq, rc.name)]
        if gone:
            stream.replica.remove_acked(gone)

    @staticmethod
    def _no_interest(stream: Any, groups: list[Replicated], seq: int, skip: str = "") -> bool:
        """stream.go noInterest: every consumer whose filters take message ``seq`` acked it
        (the replicated ones by their applied state); a workqueue's message needs one."""
        msg = stream.store.load_msg(seq)
        if msg is None:
            return False
        subject = msg.subject
        taken = False
        names = set()
        for rc in groups:
            names.add(rc.name)
            if rc.match is not None and not rc.match(subject):
                continue
            if rc.applier.needs(seq):
                return False
            taken = True
        for name, consumer in stream.consumers.items():  # (unreplicated ones: direct, R1)
            if name in names or name == skip:
                continue
            if not consumer.is_done_with(seq, subject):
                return False
            taken = taken or consumer.match is None or consumer.match(subject)
        return taken or stream.cfg.retention == "interest"

    def _snapshot(self, rc: Replicated) -> None:
        """monitorConsumer's doSnapshot: the store's state (encodeConsumerState), the log compacted."""
        state = rc.applier.snapshot(clock.now_ns() // 1_000_000_000)
        try:
            rc.group.node.install_snapshot(state.encode(), rc.applied)
        except (SnapshotError, StorageError) as exc:
            log.debug("JetStream cluster: consumer '%s > %s' snapshot: %s", rc.stream_name, rc.name, exc)
            return
        rc.unsnapshotted = 0
        rc.snapshot_at = clock.monotonic()

    # -- leadership -------------------------------------------------------------------------

    def _leader_changed(self, rc: Replicated, leader: bool) -> None:
        if not leader:
            self._stop_leading(rc)
            node = rc.group.node
            now = clock.monotonic()
            if advisories.quorum_lost_due(node, rc.quorum_lost_at, now):  # (consumer.go setLeader(false))
                rc.quorum_lost_at = now
                log.warning("JetStream cluster consumer '%s > %s > %s' has NO quorum, stalled",
                            rc.account, rc.stream_name, rc.name)
                advisories.quorum_lost(rc.engine, self.host.nrg.account, rc.stream_name, rc.name,
                                       advisories.peer_infos(node, self.host.names, now))
            return
        rc.leader_since = clock.now_ns()
        rc.start_at = rc.group.node.last_index  # (its first entry: the earlier terms' are committed with it)
        rc.starting = True
        self._leading.set()
        if rc.applied >= rc.start_at:
            self._start_leading(rc)

    def _start_leading(self, rc: Replicated) -> None:
        """consumer.go setLeader(true): a Consumer from the replicated state; the old
        leader's pull requests told; the create answered if nobody did."""
        engine = rc.engine
        stream = engine.streams.get(rc.stream_name)
        if stream is None:
            if not rc.no_stream_logged:
                rc.no_stream_logged = True
                log.warning("JetStream cluster: consumer '%s > %s' leader without its stream here (yet)",
                            rc.stream_name, rc.name)
            return
        rc.starting = False
        log.info("JetStream cluster new consumer leader for '%s > %s > %s'", rc.account, rc.stream_name, rc.name)
        host = self.host
        advisories.leader_elected(engine, host.nrg.account, rc.stream_name, rc.name,
                                  host.names.get(host.node_id, host.node_id),
                                  advisories.peer_infos(rc.group.node, host.names, clock.monotonic()))
        now = clock.now_ns()
        cfg = ConsumerConfig.from_json(rc.ca.config)
        consumer = Consumer(stream, rc.name, cfg, rc.ca.created_ns or now)
        applier = rc.applier
        if applier.delivered[1] or applier.delivered[0] or applier.ack_floor[1]:
            applier.load_into(consumer)
        consumer.num_pending()
        consumer.arm_pause(now)
        consumer.held_ack_replies = []  # (answered once committed: _hold_ack_replies)
        consumer.active_at = now
        stream.consumers[rc.name] = consumer
        rc.consumer = consumer
        rc.shadow = copy.deepcopy(applier)
        rc.fingerprint = ()
        for reply in sorted(applier.pending_requests):  # (told, and forgotten by every member)
            engine.send(reply, b"", LEADERSHIP_CHANGE)
            self._propose(rc, PendingRequest(reply, False))
        self._flush(rc)
        consumers = engine.api.consumers
        if rc.reply:
            self.host._answer(engine, rc.reply, {"type": _T + "consumer_create_response", **self.info(rc)})
            rc.reply = ""
        consumers.created(consumer, None)  # (push delivery starts)
        engine.delivery.poke()  # (its deadlines: redeliveries after ack_wait)
        engine.server.flush_touched()

    def _stop_leading(self, rc: Replicated) -> None:
        """setLeader(false): the Consumer leaves the stream (nothing more is delivered); the
        ack replies it held go unanswered (the acker's timeout: the ack may be lost)."""
        rc.starting = False
        rc.ack_replies.clear()
        consumer, rc.consumer, rc.shadow = rc.consumer, None, None
        if consumer is None:
            return
        consumer.held_ack_replies = None
        stream = consumer.stream
        if stream.consumers.get(rc.name) is consumer:
            del stream.consumers[rc.name]
        consumer.waiting.clear()

    # -- a replica change (desired.py, consumer_desired.py) -----------------------------------

    def migrate_all(self) -> None:
        """monitorConsumer's migration timer: each led group with a replica change in progress."""
        for rc in list(self.consumers.values()):
            if rc.group.leader and (desired_of(rc.ca.group) is not None or rc.migration is not None):
                self.migrate(rc)

    async def _migrate_soon(self, rc: Replicated) -> None:
        await trio.sleep(MIGRATE_FAST_INTERVAL)
        if self.consumers.get((rc.account, rc.stream_name, rc.name)) is rc:
            self.migrate(rc)

    def migrate(self, rc: Replicated) -> None:
        """runConsumerMigration on the group's leader: the next step taken (desired.next_step,
        onto peers that host the stream only), reported to the meta leader when it is its."""
        node = rc.group.node
        group = rc.ca.group
        if group is None or not rc.group.leader:
            return
        desired = desired_of(group)
        actual, assigned = list(node.peers), list(group.peers or ())
        if desired is None and sorted(actual) == sorted(assigned):
            rc.migration = None
            return
        sa = self.host.state.stream(rc.account, rc.stream_name)
        if sa is None or sa.group is None:
            return
        lags, current, offline, heard = peer_view(node, actual, clock.monotonic(), CURRENT_WITHIN)
        step = next_step(node.id, node.term, desired, assigned, actual, lags, current, offline, heard,
                         consumer_replicas(rc.ca.config, sa.config),
                         membership_pending=node._membership_index > node.commit,
                         needs_snapshot=node.snapshot is None, stream_peers=list(sa.group.peers or ()))
        rc.migration = step.status
        def report(update: dict) -> None:
            body = {"account": rc.account, "stream": rc.stream_name, "consumer": rc.name, **update}
            self.host.system.publish(CONSUMER_RECONCILE_SUBJECT.encode(), None, None, dumps(body))

        try:
            take_step(step, rc.group, report, partial(self._snapshot, rc))
        except (NotLeader, StorageError) as exc:
            log.debug("JetStream cluster: consumer '%s > %s': migration step %s: %s", rc.stream_name, rc.name,
                      step.action, exc)

    # -- the leader's proposals -------------------------------------------------------------

    async def run(self) -> None:
        """Every REPLICATE_INTERVAL, each leader's changes proposed (and a leader that found
        no stream to run its consumer on tries again)."""
        while True:
            if not any(rc.group.leader for rc in self.consumers.values()):
                await self._leading.wait()
                self._leading = trio.Event()  # (the loop looks at the leaders again before waiting)
            await trio.sleep(REPLICATE_INTERVAL)
            self.rounds += 1
            for rc in list(self.consumers.values()):
                if not rc.group.leader:
                    continue
                try:
                    if rc.starting and rc.applied >= rc.start_at:
                        self._start_leading(rc)
                    if rc.consumer is not None:
                        self.replicate(rc)
                        self._hold_ack_replies(rc)
                except Exception:  # one consumer's failure must not stop the others'
                    log.exception("JetStream cluster: replicating consumer '%s > %s' failed",
                                  rc.stream_name, rc.name)

    def _propose(self, rc: Replicated, op: Delivered | Acked | Skipped | PendingRequest) -> None:
        """An op for the group, applied to the shadow at once, proposed by _flush."""
        if rc.shadow is not None:
            rc.shadow.apply_op(op)
        rc.outbox.append(op.encode())

    def _flush(self, rc: Replicated) -> None:
        """The ops of a round as one append entry (consumer.go loopAndForwardProposals:
        ProposeMulti, one index for them all)."""
        if not rc.outbox:
            return
        items, rc.outbox = rc.outbox, []
        try:
            rc.group.propose_many(items)
        except NotLeader:
            pass  # (the leader change stops this Consumer)

    def _hold_ack_replies(self, rc: Replicated) -> None:
        """The replies of the acks this round took wait for the round's proposal (or the last
        one, when the acks changed nothing) to commit: consumer.go addAckReply."""
        consumer = rc.consumer
        if consumer is None or not consumer.held_ack_replies:
            return
        replies, consumer.held_ack_replies = consumer.held_ack_replies, []
        rc.ack_replies.append((rc.group.node.last_index, replies))
        if rc.applied >= rc.group.node.last_index:  # (nothing proposed is left uncommitted)
            self._answer_acks(rc)
            rc.engine.server.flush_touched()

    def _answer_acks(self, rc: Replicated) -> None:
        """The held ack replies whose proposal this member (the leader) applied."""
        held = rc.ack_replies
        while held and held[0][0] <= rc.applied:
            _, replies = held.pop(0)
            for reply in replies:
                rc.engine.send(reply, b"")

    def replicate(self, rc: Replicated) -> None:
        """What the leader's Consumer changed since the last proposals, proposed: deliveries
        (new and redelivered), those delivered and acked in between, skips, acks, pull requests."""
        c, shadow = rc.consumer, rc.shadow
        if c is None or shadow is None:
            return
        if c.stream.consumers.get(rc.name) is not c:
            return  # (deleted meanwhile)
        fingerprint = (c.delivered_cseq, c.state_sseq, c.ack_floor_cseq, c.ack_floor_sseq, len(c.pending),
                       c.last_acked, c.last_delivered, len(c.waiting), c.waiting[0].reply if c.waiting else b"",
                       c.retimed)
        if fingerprint == rc.fingerprint:
            return
        rc.fingerprint = fingerprint
        # Acks: what the shadow has pending and the Consumer no longer (acked, terminated).
        gone = sorted(s for s in shadow.pending if s not in c.pending)
        if gone and not c.pending and c.delivered_cseq > shadow.delivered[0] and c.state_sseq <= shadow.delivered[1]:
            # a redelivery since acked: its consumer sequence first (the floor is the delivered
            # one once nothing is pending)
            seq = gone[-1]
            self._propose(rc, Delivered(c.delivered_cseq, seq, shadow.redelivered.get(seq, 0) + 1,
                                        shadow.pending[seq][1]))
        for seq in gone:
            had = shadow.pending.get(seq)
            if had is not None:  # (the floor's: the ack's own consumer sequence, AckAll's floor)
                self._propose(rc, Acked(c.ack_floor_cseq if seq == c.ack_floor_sseq else had[0], seq))
        explicit = c.cfg.ack_policy != "none"
        if explicit and c.ack_floor_sseq > shadow.delivered[1] and c.ack_floor_cseq > shadow.ack_floor[0]:
            # delivered and acked within one interval, up to the floor (nothing of the
            # shadow's is pending now: the floor moves with this ack)
            self._propose(rc, Delivered(c.ack_floor_cseq, c.ack_floor_sseq, 1, c.last_delivered))
            self._propose(rc, Acked(c.ack_floor_cseq, c.ack_floor_sseq))
        fresh = []  # (known to the shadow, the delivery)
        nak_until = c.nak_until
        for seq, (dseq, ts) in c.pending.items():
            dc = c.rdc.get(seq, 1)
            if nak_until and seq in nak_until:  # (processNak: the time that redelivers it after the delay)
                ts = nak_until[seq] - c.ack_wait_for(seq)
            had = shadow.pending.get(seq)
            if had is None or had[1] != ts or shadow.redelivered.get(seq, 0) + 1 != dc:
                fresh.append((had is not None, Delivered(dseq, seq, dc, ts)))
        # the new ones in stream order (each above the last: the store adds only those), then
        # the redeliveries of those it has
        fresh.sort(key=lambda item: (item[0], item[1].sseq))
        for _, op in fresh:
            self._propose(rc, op)
        if not explicit:
            if c.delivered_cseq > shadow.delivered[0]:
                self._propose(rc, Delivered(c.delivered_cseq, c.state_sseq, 1, c.last_delivered))
        elif c.delivered_cseq > shadow.delivered[0]:
            last = c.pending.get(c.state_sseq)
            if last is not None:  # (a redelivery since acked: the consumer sequence moves on)
                self._propose(rc, Delivered(c.delivered_cseq, c.state_sseq, c.rdc.get(c.state_sseq, 1), last[1]))
            else:  # the last ones delivered and acked within one interval, above what is pending
                self._propose(rc, Delivered(c.delivered_cseq, c.state_sseq, 1, c.last_delivered))
                self._propose(rc, Acked(c.delivered_cseq, c.state_sseq))
        if c.state_sseq > shadow.delivered[1]:
            self._propose(rc, Skipped(c.state_sseq + 1))
        replies = {bytes(req.reply) for req in c.waiting}
        for reply in sorted(replies - shadow.pending_requests):
            self._propose(rc, PendingRequest(reply, True))
        for reply in sorted(shadow.pending_requests - replies):
            self._propose(rc, PendingRequest(reply, False))
        self._flush(rc)

    # -- the API ----------------------------------------------------------------------------

    def find(self, account: str, stream: str, name: str) -> Replicated | None:
        return self.consumers.get((account, stream, name))

    def route(self, engine: Any, tokens: list[bytes], subject: bytes, reply, hdr, payload: bytes) -> bool:
        """A consumer's own request (info, pull, step-down, pause, unpin) for a replicated
        consumer of this server: its leader answers, the others stay silent (True). False:
        not such a consumer, the caller goes on."""
        n = len(tokens)
        if n < 6 or tokens[0] != b"$JS" or tokens[1] != b"API" or tokens[2] != b"CONSUMER":
            return False
        op = tokens[3]
        if op in (b"MSG", b"LEADER") and n == 7:
            stream, name = tokens[5], tokens[6]
        elif op in (b"INFO", b"PAUSE", b"UNPIN") and n == 6:
            stream, name = tokens[4], tokens[5]
        else:
            return False
        rc = self.find(engine.account_name or "", stream.decode("utf-8", "replace"), name.decode("utf-8", "replace"))
        if rc is None:
            return False
        if rc.consumer is None or not rc.group.leader:
            return True
        if op == b"INFO" and not is_empty_request(payload):  # (jsConsumerInfoRequest's first check)
            engine.api._fail(reply, _T + "consumer_info_response", errors.not_empty_request())
        elif op == b"INFO":
            engine.api._send(reply, {"type": _T + "consumer_info_response", **self.info(rc)})
        elif op == b"LEADER":
            self._stepdown(rc, reply, payload)
        else:
            engine.api.handle(subject, reply, hdr, payload)
        return True

    def _stepdown(self, rc: Replicated, reply, payload: bytes) -> None:
        """jsConsumerLeaderStepDownRequest on the consumer's leader: to the peer the request's
        ``placement`` names (getStepDownPreferredPlacement), else any healthy peer."""
        rtype = _T + "consumer_leader_stepdown_response"
        api = rc.engine.api
        try:
            preferred = self.host.stepdown_preferred(rc.group.node, payload)
        except errors.ApiError as exc:
            api._fail(reply, rtype, exc)
            return
        response: dict = {"type": rtype}
        try:
            rc.group.step_down(preferred)
            response["success"] = True
        except NotLeader as exc:
            response["error"] = errors.raft_general(str(exc)).to_json()
        api._send(reply, response)

    def _info_request(self, rc: Replicated, subject, reply, headers, body) -> None:
        """$JSC.CI.<account>.<stream>.<consumer>: the leader answers (the meta leader's list)."""
        if reply and rc.consumer is not None and rc.group.leader:
            self.host.system.publish(reply, None, None, dumps(self.info(rc)))

    def info(self, rc: Replicated) -> dict:
        """The leader's CONSUMER.INFO, its ``cluster`` 2.15.1's (clusterInfo)."""
        assert rc.consumer is not None
        info = rc.engine.api.consumers.info_of(rc.consumer)
        info["cluster"] = self.cluster_block(rc)
        return info

    def cluster_block(self, rc: Replicated) -> dict:
        """jetstream_cluster.go clusterInfo for the group's leader: the other peers, each
        current when heard from within CURRENT_WITHIN."""
        host = self.host
        names = host.names
        for server in host._route_peers():
            names.setdefault(node_id(server), server)
        node = rc.group.node
        out: dict = {"name": host.name, "raft_group": rc.group.name}
        if node.leader:
            out["leader"] = names.get(node.leader, node.leader)
            out["leader_since"] = gotime.format(rc.leader_since)
        out["system_account"] = True
        out["traffic_account"] = host.nrg.account.name
        now = clock.monotonic()
        replicas = []
        for peer in (rc.ca.group.peers or ()) if rc.ca.group else ():
            if peer == host.node_id:
                continue
            seen = node._seen.get(peer)
            active = now - seen if seen is not None else None
            entry: dict = {"name": names.get(peer, f"Server name unknown at this time (peerID: {peer})"),
                           "current": active is not None and active < CURRENT_WITHIN}
            if active is None:
                entry["offline"] = True
            entry["active"] = int(active * 1e9) if active is not None else 0
            entry["peer"] = peer
            replicas.append(entry)
        if replicas:
            out["replicas"] = replicas
        desired = desired_of(rc.ca.group)
        if desired is not None or rc.migration is not None:
            out["desired"] = desired_info(desired or {}, names, rc.migration)
        return out

    # -- tests and monitoring ---------------------------------------------------------------

    def state(self, account: str, stream: str, name: str) -> dict | None:
        """A member's replicated state (delivered, ack floor, pending count), for tests."""
        rc = self.find(account, stream, name)
        if rc is None:
            return None
        a = rc.applier
        return {"delivered": list(a.delivered), "ack_floor": list(a.ack_floor), "num_ack_pending": len(a.pending),
                "pending_requests": len(a.pending_requests), "leader": rc.group.leader, "applied": rc.applied}

