"""A replicated stream (num_replicas > 1) in a cluster, as jetstream_cluster.go runs one (issue #32).

Every server of the stream's group holds the stream (the single-server ``Stream`` and its store,
without its subject subscriptions) and a node of the group's RAFT group (natserver.nrg, its
folder ``_js_/<group>`` as 2.15.1's). :class:`StreamReplica` drives both:

- the committed entries are applied on every replica (applyStreamEntries): messages through
  ``StreamApplier`` into ``Stream.apply_replicated`` (TTLs, roll-ups, deduplication, consumers),
  purges and deletes (their JSON ops) through the store, answered by the leader;
- the leader (setLeader, once it applied what earlier terms committed) subscribes to the
  stream's subjects: ``Stream.process_msg`` checks a publish as on a single server and hands it
  here (``propose``: ``StreamLeader``'s proposal, processClusteredInboundMsg); the PubAck goes
  once the entry is committed and applied, after the write like a single server's;
- snapshots (monitorStream's doSnapshot): the stream's state (``StreamApplier.snapshot``) given
  to the node, which compacts its log, after COMPACT_ENTRIES entries or COMPACT_BYTES bytes, or
  COMPACT_INTERVAL after the last one when entries were applied since;
- catch-up (processSnapshot / runCatchup): a follower that installs a leader's snapshot asks
  the leader for the messages it lacks on the assignment's ``$JSC.SYNC`` subject, applies the
  answers (``$JSC.R`` inbox, acknowledged on their ``$JSC.ACK`` replies) and holds the entries
  committed meanwhile; the leader serves such requests, CATCHUP_WINDOW messages unacknowledged
  at most, and ends with an empty message.
"""

from __future__ import annotations

import logging
import random
import shutil
from typing import Any, Protocol

import trio

from .. import clock
from ..raft import Committed, EntryType, Mark, MemoryStorage, NotLeader, SnapshotError, StorageError
from . import advisories, errors
from .advisories import AdvisoryHost
from .counter import InflightTotals, Totals
from .direct_subs import DIRECT_SYNC_THRESHOLD
from .errors import ApiError
from .replication.desired import desired_info, next_step, peer_view, take_step
from .replication.group_codec import CodecError, JsonOp, Op, StreamMsg, StreamState, decode_stream_op
from .replication.stream_group import SequenceMismatch, StreamApplier, StreamLeader, SyncRequest
from .store import StoreError
from .stream import Stream
from .util import dumps, loads, rfc3339nano

__all__ = ["StreamReplica"]

log = logging.getLogger("natserver")

_T = "io.nats.jetstream.api.v1."
# jetstream_cluster.go monitorStream: a snapshot after compactNumMin entries or compactSizeMin
# bytes applied, else every compactInterval (2 min) if anything was applied since.
COMPACT_ENTRIES = 65536
COMPACT_BYTES = 8 * 1024 * 1024
COMPACT_INTERVAL = 120.0
# jetstream_cluster.go defaultStreamCatchupStartInterval / ActivityInterval: how long a
# follower waits for the first answer of a catch-up, and for each next one, before asking
# again; a catch-up that ended short asks again no sooner than CATCHUP_MIN_RETRY_WAIT after
# its request (processSnapshot's minRetryWait). processSnapshot gives up after maxRetries
# (CATCHUP_RETRIES) tries, and monitorStream replays the snapshot, which starts it again: it
# never stops before the store has the snapshot's messages (natserver logs each round).
CATCHUP_START = 5.0
CATCHUP_ACTIVITY = 30.0
CATCHUP_RETRIES = 3
CATCHUP_MIN_RETRY_WAIT = 2.0
# natserver: how long a new stream's leader waits after subscribing before it answers the create
# (its interest and the answer travel on different routes: _answer_create).
CREATE_ANSWER_DELAY = 0.005
# runCatchup sends up to 256k messages (64 MiB) before waiting for acknowledgements; natserver
# serves every client on one thread, so a catch-up has at most this many unacknowledged.
CATCHUP_WINDOW = 1024
SYNC_REPLY = "$JSC.R"  # jetstream_cluster.go syncReplySubject: a follower's catch-up inbox
SYNC_ACK = "$JSC.ACK"  # syncAckSubject: the leader's flow-control replies
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_TOKEN_LEN = 22  # (nuid-sized random tokens of the sync subjects)
# jetstream_cluster.go streamAssignmentReconcileSubj: a group leader's step of a replica change,
# to the meta leader (desired.py).
RECONCILE_SUBJECT = "$SYS.JSC.STREAM.ASSIGNMENT.RECONCILE"
# raft.go hbInterval * 3: a peer heard from this recently is live (selectPeerToAdd).
HEARD_WITHIN = 3.0
# jetstream_cluster.go migrateFastCheckInterval: a replica change's next step after one of its
# membership changes committed (the others wait for the cluster's MIGRATE_INTERVAL).
MIGRATE_FAST_INTERVAL = 0.05


class ReplicaHost(Protocol):
    """What a replica needs of the cluster (cluster.JetStreamCluster)."""

    name: str  # the cluster's name
    node_id: str
    names: dict[str, str]  # node id -> server name
    nrg: Any  # natserver.nrg.NrgHost
    rng: random.Random

    @property
    def system(self) -> Any: ...  # the system account
    def spawn(self, fn, *args) -> None: ...
    def flush(self) -> None: ...
    def has_group_consumers(self, account: str, stream: str) -> bool: ...  # replicated consumers here
    def assigned_consumers(self, account: str, stream: str) -> int: ...  # the meta group's count
    def check_interest(self, engine: Any, stream: Stream) -> None: ...  # a new leader's acked removals
    def serve_direct(self, engine: Any, stream: Stream) -> None: ...  # direct gets here or not (direct_subs.py)
    def reset_replica(self, replica: StreamReplica) -> None: ...  # resetClusteredState (a task of the host's)
    def peer_offline(self, peer: str) -> bool: ...  # the peer's server is offline (nodeInfo.offline)
    def moving_consumer(self, account: str, stream: str, wanted: list[str]) -> str: ...  # one still on other peers


class ReplicaEngine(AdvisoryHost, Protocol):
    """What a replica needs of its engine (``JetStream``): its advisories' host too."""

    account_name: str | None
    api: Any
    sourcing: Any  # sourcing.Sourcing: the links run on the leader only

    def respond(self, reply: bytes, payload: bytes, stream: Stream) -> None: ...
    def persist(self, stream: Stream) -> None: ...
    def schedule_fire(self, deadline_ns: int) -> None: ...  # a message schedule comes due


class StreamReplica:
    """This server's replica of one replicated stream: its group's node and what it applies."""

    def __init__(self, host: ReplicaHost, engine: ReplicaEngine, stream: Stream, group: str, peers: list[str],
                 sync_subject: str, *, scale_up: bool = False) -> None:
        self.host = host
        self.engine = engine
        self.stream = stream
        self.group_name = group
        self.sync_subject = sync_subject
        self.applier = StreamApplier(stream.store, stream.cfg.duplicate_window)
        self.applier.store_fn = stream.apply_replicated
        self.leader: StreamLeader | None = None
        self.leader_since = 0  # ns, when this server took the lead
        self.applied = 0  # the last index applied
        self._ready_at = 0  # the index a new leader applies before it takes publishes
        self._since_snapshot = (0, 0)  # entries and bytes applied since the last snapshot
        self._snapshot_at = clock.monotonic()
        self._snapshot_clfs = 0  # the failed proposals counted at the last snapshot
        self.snapshots = 0
        self.mismatches = 0  # proposals out of line with the store (each resets the replica)
        self.resetting = False  # a mismatch: the host replaces this replica, which applies nothing more
        # A create (or update) to answer once this server leads: (reply, response builder).
        self.pending_answer: tuple[str, Any] | None = None
        self._sync_sub: Any = None  # the leader's $JSC.SYNC subscription
        self._catching_up = False
        self._held: list[Committed] = []  # entries committed during a catch-up
        self._removing: set[int] = set()  # acked messages whose removal the leader proposed
        self.catchups_served = 0  # $JSC.SYNC requests served (as the leader)
        self.catchups = 0  # catch-ups completed (as a follower)
        self.catchup_retries = 0  # catch-up requests asked again (none answered, or ended short)
        self._quorum_lost_at = float("-inf")  # the last quorum-lost advisory (shouldSendLostQuorum)
        self.stopped = False
        # A replica change in progress (desired.py): the assignment's desired state and peers
        # (set by the cluster with each assignment), what this leader did last (2.15.1's status).
        self.desired: dict | None = None
        self.assigned: list[str] = list(peers)
        self.replicas = stream.cfg.num_replicas
        self.migration: tuple[str, str] | None = None
        # raft.go's scale-up observer: a new member with an empty log does not campaign before
        # the leader's data reaches it.
        self._scale_up = scale_up
        self.recovering = False  # replaying the log's committed entries at the start
        stream.replica = self
        # jetstream_cluster.go createRaftGroup: a memory stream's group keeps its log in memory
        # (a memory store for its WAL), so a restarted server's replica starts empty and is
        # caught up; with every server restarted the stream starts again from sequence 1.
        storage = {"storage": MemoryStorage()} if stream.cfg.storage == "memory" else {}
        self.group = host.nrg.create_group(group, peers, self._apply, marks=True, **storage)
        if scale_up:
            self.group.node.observer = True
        self.group.on_leader_change = self._leader_changed

    def __repr__(self) -> str:
        return f"<StreamReplica {self.stream.name} {self.group_name} leading={self.leading}>"

    # -- the stream's side (stream.StreamReplica) -----------------------------------------------

    @property
    def leading(self) -> bool:
        return self.leader is not None and not self.stopped

    def proposed_last(self) -> int:
        store, leader = self.stream.store, self.leader
        if leader is None:
            return store.last_seq
        return leader.proposed_clseq() - self.applier.clfs

    def propose(self, subject: bytes, reply: bytes | None, hdr: bytes, msg: bytes, now: int) -> bool:
        """A publish the leader's stream checked: proposed (processClusteredInboundMsg); a
        duplicate of one in flight answered at once. False: not the leader (no answer, the
        publisher retries)."""
        leader = self.leader
        if leader is None or self.stopped:
            return False
        data = leader.propose(subject, reply or b"", hdr, msg, now)
        if data is None:
            self._send_acks()
            return True
        try:
            self.group.propose_soon(data)  # (with this pass's others: one append entry)
        except (NotLeader, StorageError):
            return False
        return True

    def propose_batch(self, batch_id: bytes, msgs: list[tuple[bytes, bytes, bytes, bytes]], now: int) -> bool:
        """An atomic batch the leader's stream checked: its messages proposed together (one
        append entry; the applier stores them at the commit, StreamApplier._apply_batch)."""
        leader = self.leader
        if leader is None or self.stopped or not msgs:
            return False
        try:
            for data in leader.propose_batch(batch_id, msgs, now):
                self.group.propose_soon(data)
        except (NotLeader, StorageError):
            return False
        return True

    def propose_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int, mirror_seq: int = 0) -> bool:
        """What the stream's mirror or sources brought in, proposed by the leader (only the
        leader runs the links): a mirror's with its origin's sequence and time, the origin's
        gaps before it as skips (processInboundMirrorMsg, skipMsgs; an empty ``subject``: only
        the skips up to ``mirror_seq``); a source's as a publish (processInboundSourceMsg:
        processClusteredInboundMsg, sourced). False: not the leader (any more)."""
        leader = self.leader
        if leader is None or self.stopped:
            return False
        try:
            if mirror_seq:
                for data in leader.propose_mirrored(mirror_seq, subject, hdr, msg, ts):
                    self.group.propose_soon(data)
                return True
            proposal = leader.propose(subject, b"", hdr, msg, clock.now_ns(), sourced=True)
            if proposal is not None:
                self.group.propose_soon(proposal)
        except (NotLeader, StorageError):
            return False
        return True

    def purge(self, request: dict | None, reply) -> None:
        """jsStreamPurgeRequest on the leader: proposed (purgeStreamOp), answered once applied."""
        if not self.leading:
            return
        body: dict = {"client": self._client(), "stream": self.stream.name, "last_seq": self.stream.store.last_seq,
                      "subject": f"$JS.API.STREAM.PURGE.{self.stream.name}", "reply": _text(reply)}
        if request:
            body["request"] = {k: request[k] for k in ("filter", "seq", "keep") if request.get(k)}
        self._propose_op(JsonOp(Op.PURGE_STREAM, body), reply, "stream_purge_response", purged=0)

    def delete_msg(self, seq: int, no_erase: bool, reply) -> None:
        """jsMsgDeleteRequest on the leader: proposed (deleteMsgOp), answered once applied."""
        if not self.leading:
            return
        body: dict = {"client": self._client(), "stream": self.stream.name, "seq": seq}
        if no_erase:
            body["no_erase"] = True
        body["subject"] = f"$JS.API.STREAM.MSG.DELETE.{self.stream.name}"
        body["reply"] = _text(reply)
        self._propose_op(JsonOp(Op.DELETE_MSG, body), reply, "stream_msg_delete_response")

    def remove_acked(self, seqs: list[int]) -> None:
        """Interest and workqueue retention on the leader (stream.go ackMsg): messages every
        consumer acked, proposed for removal as 2.15.1's streamMsgDelete (``no_erase``, no
        reply), each once."""
        if not self.leading:
            return
        for seq in seqs:
            if seq in self._removing:
                continue
            body = {"stream": self.stream.name, "seq": seq, "no_erase": True, "subject": "", "reply": ""}
            try:
                self.group.propose_soon(JsonOp(Op.DELETE_MSG, body).encode())
            except (NotLeader, StorageError):
                return
            self._removing.add(seq)

    def has_consumers(self) -> bool:
        """Replicated consumers of the stream on this server (its interest when none runs here)."""
        return self.host.has_group_consumers(self.engine.account_name or "", self.stream.name)

    def consumer_count(self) -> int:
        """jsStreamInfoRequest's clusterWideConsCount: the assignments' (0: none known)."""
        return self.host.assigned_consumers(self.engine.account_name or "", self.stream.name)

    def _propose_op(self, op: JsonOp, reply, rtype: str, **extra) -> None:
        try:
            self.group.propose(op.encode())
        except (NotLeader, StorageError) as exc:
            self.engine.api._fail(reply, _T + rtype, errors.raft_general(str(exc)), **extra)

    def _client(self) -> dict:
        return {"acc": self.engine.account_name, "server": self.host.names.get(self.host.node_id, ""),
                "cluster": self.host.name}

    def cluster_json(self) -> dict:
        """ClusterInfo (jetstream_cluster.go clusterInfo): name, raft group, leader (since
        when, on the leader), the group's system account, and the other replicas: current,
        offline (its server), active (ns since last heard from, on the leader), lag (entries
        behind), peer id."""
        host, node = self.host, self.group.node
        out: dict = {"name": host.name, "raft_group": self.group_name}
        if node.leader:
            out["leader"] = host.names.get(node.leader, node.leader)
            if self.leading:
                out["leader_since"] = rfc3339nano(self.leader_since)
        out["system_account"] = True
        out["traffic_account"] = host.system.name
        replicas = []
        now = clock.monotonic()
        me = host.node_id if node.leader else ""
        for peer in node.peers:
            if peer == me:
                continue
            entry: dict = {"name": host.names.get(peer, peer)}
            lag = 0
            active = 0
            if self.group.leader:
                seen = node._seen.get(peer)
                active = int((now - seen) * 1e9) if seen is not None else 0
                # (raft.go Peers: the entries the leader has a quorum on and the replica not)
                lag = max(node.commit - node._match.get(peer, 0), 0)
                entry["current"] = lag == 0
            else:
                entry["current"] = peer == node.leader
            if host.peer_offline(peer):
                entry["offline"] = True
            entry["active"] = active
            if lag:
                entry["lag"] = lag
            entry["peer"] = peer
            replicas.append(entry)
        if replicas:
            out["replicas"] = replicas
        desired = self.desired
        if desired is not None or (self.migration is not None and self.leading):
            out["desired"] = self._desired_json(desired or {})
        return out

    def _desired_json(self, desired: dict) -> dict:
        return desired_info(desired, self.host.names, self.migration if self.leading else None)

    # -- a replica change (desired.py) ------------------------------------------------------------

    async def _migrate_soon(self) -> None:
        await trio.sleep(MIGRATE_FAST_INTERVAL)
        self.migrate()

    def migrate(self) -> None:
        """runStreamMigration, on the group's leader while the assignment has desired state (or
        more RAFT peers than assigned): the next step taken, reported to the meta leader when it
        is the meta leader's to take."""
        node = self.group.node
        if not self.leading or self.stopped:
            return
        actual = list(node.peers)
        if self.desired is None and sorted(actual) == sorted(self.assigned):
            self.migration = None
            return
        lags, current, offline, heard = peer_view(node, actual, clock.monotonic(), HEARD_WITHIN)
        blocked_by = self.host.moving_consumer(self.engine.account_name or "", self.stream.name,
                                               list((self.desired or {}).get("peers") or ()))
        step = next_step(node.id, node.term, self.desired, self.assigned, actual, lags, current, offline, heard,
                         self.replicas, membership_pending=node._membership_index > node.commit,
                         needs_snapshot=node.snapshot is None, blocked_by=blocked_by)
        self.migration = step.status
        def report(update: dict) -> None:
            body = {"account": self.engine.account_name or "", "stream": self.stream.name, **update}
            self.host.system.publish(RECONCILE_SUBJECT.encode(), None, None, dumps(body))

        try:
            take_step(step, self.group, report, self.snapshot)
        except (NotLeader, StorageError) as exc:
            log.debug("JetStream cluster: stream %s: migration step %s: %s", self.stream.name, step.action, exc)
        self.host.flush()

    # -- the group's committed entries ------------------------------------------------------------

    def _apply(self, committed: list[Committed]) -> None:
        """applyStreamEntries, on every replica (the host's pass: synchronous)."""
        if self.stopped or self.resetting:
            return
        for c in committed:
            if self.resetting:
                return
            if self._catching_up:
                self._held.append(c)  # (processSnapshot pauses the apply queue)
                continue
            self._apply_one(c)
        self._after_apply()

    def _apply_one(self, c: Committed) -> None:
        if c.mark is not None:  # (monitorStream's isRecovering: until the nil entry after the replay)
            if c.mark is Mark.REPLAY_START:
                self.recovering = True
            elif c.mark is Mark.REPLAY_END:
                self.recovering = False
            return
        if self._scale_up:  # (raft.go resetInitializing: the log has data, the observer goes)
            self._scale_up = False
            self.group.node.observer = False
        self.applied = c.index
        entry = c.entry
        entries, size = self._since_snapshot
        self._since_snapshot = (entries + 1, size + len(entry.data))
        if entry.type == EntryType.SNAPSHOT:
            try:
                state = StreamState.decode(entry.data)
            except CodecError as exc:
                log.error("JetStream cluster: stream %s: a snapshot did not decode: %s", self.stream.name, exc)
                return
            request = self.applier.install_snapshot(state, self.host.node_id, c.index)
            if request is not None:
                self._start_catchup(request)
            return
        if entry.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER):
            if self.leading and self.desired is not None:  # (monitorStream: the next step soon)
                self.host.spawn(self._migrate_soon)
            return
        if entry.type != EntryType.NORMAL:
            return
        try:
            op = decode_stream_op(entry.data)
        except CodecError as exc:
            log.error("JetStream cluster: stream %s: an entry did not decode: %s", self.stream.name, exc)
            return
        if isinstance(op, JsonOp) and op.op in (Op.PURGE_STREAM, Op.DELETE_MSG):
            self._apply_json(op)
            return
        try:
            try:
                self.applier.apply_op(op)
            except SequenceMismatch:
                store = self.stream.store
                if store.msgs or not isinstance(op, StreamMsg):
                    raise
                # applyStreamMsgOp: an empty store behind the proposal (the leader's snapshot
                # was older than its messages' removal) takes the proposal's position; again.
                store.compact(op.lseq - self.applier.clfs + 1)
                self.applier.apply_op(op)
        except SequenceMismatch as exc:
            # applyStreamEntries: errLastSeqMismatch is a cluster reset error (resetClusteredState):
            # the group's state goes and the stream, its messages kept, catches up from the leader.
            self.mismatches += 1
            log.error("JetStream cluster: error applying stream entries to '%s > %s': %s",
                      self.engine.account_name or "$G", self.stream.name, exc)
            if self.leader is not None and self.stream.cfg.mirror and self.stream.links:
                # (a mirror's leader asks its origin again from where its store is: monitorStream's
                # retryMirrorConsumer, no reset)
                self.leader.clseq = 0
                self.engine.sourcing.lead_changed(self.stream, True)
                return
            self.resetting = True
            self.host.reset_replica(self)

    def _apply_json(self, op: JsonOp) -> None:
        stream, store, api = self.stream, self.stream.store, self.engine.api
        body = op.body
        reply = str(body.get("reply") or "").encode()
        answer = reply and self.leading
        if op.op == Op.PURGE_STREAM:
            request = dict(body.get("request") or {})
            if not int(request.get("seq") or 0):
                # applyStreamEntries: without a sequence, below the leader's last sequence
                # when it was proposed, so that a restart replaying it (a kill -9 leaves no
                # snapshot) keeps what was stored after it; one keeping messages is skipped then.
                purge_seq = int(body.get("last_seq") or 0) + 1
                if not int(request.get("keep") or 0):
                    request["seq"] = purge_seq
                elif self.recovering:
                    return
            subject = str(request.get("filter") or "").encode()
            rtype = _T + "stream_purge_response"
            try:
                purged = store.purge_ex(subject, int(request.get("seq") or 0), int(request.get("keep") or 0))
                stream.purge_consumers(subject, purged)
                self.engine.persist(stream)
            except (StoreError, OSError) as exc:
                if answer:
                    api._send(reply, {"type": rtype, "error": errors.stream_general(str(exc)).to_json(), "purged": 0})
                return
            if answer:
                api._send(reply, {"type": rtype, "success": True, "purged": purged})
            return
        rtype = _T + "stream_msg_delete_response"
        seq = int(body.get("seq") or 0)
        self._removing.discard(seq)
        try:
            removed = store.remove_msg(seq, erase=not body.get("no_erase", False))
            self.engine.persist(stream)
        except (StoreError, OSError) as exc:
            if answer:
                api._send(reply, {"type": rtype, "error": errors.stream_msg_delete_failed(str(exc)).to_json()})
            return
        if answer:
            if removed:
                api._send(reply, {"type": rtype, "success": True})
            else:
                api._send(reply, {"type": rtype, "error": errors.sequence_not_found(seq).to_json()})

    def _after_apply(self) -> None:
        if self.pending_answer is not None and self.group.node.leader and not self.group.leader:
            self.pending_answer = None  # (another server leads: it answers the create)
        if self.leader is not None:
            self._send_acks()
        elif self.group.leader:
            self._take_lead()
        self._maybe_snapshot()

    def _send_acks(self) -> None:
        """The leader's PubAcks of what it applied (stream.go's pubAck, after the write) and
        its answers to duplicates in flight."""
        leader, stream = self.leader, self.stream
        if leader is None:
            return
        applier = self.applier
        if applier.stored:
            values = applier.values
            for reply, seq, batch_id, size in applier.stored:
                body = values.pop(seq, None) if values else None
                total = _counter_total(body) if body is not None else None
                if batch_id:  # an atomic batch's commit (2.12+ PubAck BatchId, BatchSize)
                    self.engine.respond(reply, b'%s%d,"batch":%s,"count":%d}' % (
                        stream._ack_prefix, seq, dumps(batch_id.decode("utf-8", "replace")), size), stream)
                elif total is None:
                    self.engine.respond(reply, b"%s%d}" % (stream._ack_prefix, seq), stream)
                else:  # (2.12+ PubAck.Value: a counter's total)
                    self.engine.respond(reply, b'%s%d,"val":%s}' % (stream._ack_prefix, seq, total), stream)
            applier.stored.clear()
            values.clear()
        for reply, payload in leader.take_acks():  # (duplicates: stream.go's "duplicate": true)
            self.engine.respond(reply, payload.replace(b'"duplicate":true', b'"duplicate": true'), stream)

    # -- leadership -------------------------------------------------------------------------------

    def _leader_changed(self, leader: bool) -> None:
        if leader:
            self._ready_at = self.group.node.last_index
            self._take_lead()
        else:
            self._follow()
            node = self.group.node
            now = clock.monotonic()
            if advisories.quorum_lost_due(node, self._quorum_lost_at, now):  # (monitorStream)
                self._quorum_lost_at = now
                log.warning("JetStream cluster stream '%s > %s' has NO quorum, stalled",
                            self.engine.account_name or "$G", self.stream.name)
                advisories.quorum_lost(self.engine, self.host.system, self.stream.name, None,
                                       advisories.peer_infos(node, self.host.names, now))

    def _take_lead(self) -> None:
        """setLeader(true), once the entries of earlier terms are applied (a proposal's last
        sequence must follow them) and no catch-up runs."""
        if self.leader is not None or self.stopped or not self.group.leader or self._catching_up:
            return
        if self.applied < self._ready_at:
            return
        self.leader = leader = StreamLeader(self.stream.name, self.applier)
        self.leader_since = clock.now_ns()
        applier = self.applier
        applier.counter = self.stream.cfg.allow_msg_counter
        if applier.counter:  # (its increments in flight count: counter.InflightTotals)
            self.stream.counter_totals = InflightTotals(
                lambda: leader.proposed_clseq() + 1,
                lambda: applier.store.last_seq + applier.clfs)
        self.stream.subscribe()
        self.host.serve_direct(self.engine, self.stream)
        if self.sync_subject and self._sync_sub is None:
            self._sync_sub = self.host.system.subscribe(self.sync_subject, self._sync_request)
        log.info("JetStream cluster new stream leader for '%s > %s'", self.engine.account_name or "$G",
                 self.stream.name)
        host = self.host
        advisories.leader_elected(self.engine, host.system, self.stream.name, None,
                                  host.names.get(host.node_id, host.node_id),
                                  advisories.peer_infos(self.group.node, host.names, clock.monotonic()))
        pending, self.pending_answer = self.pending_answer, None
        if pending is not None:
            self.host.spawn(self._answer_create, *pending)
        self._removing.clear()
        if self.stream.cfg.retention != "limits":
            self.host.check_interest(self.engine, self.stream)
        scheduler = self.stream.scheduler
        if scheduler is not None:  # (followers keep the schedules; the leader fires them)
            scheduler.rearm()
            nxt = scheduler.next_due()
            if nxt is not None:
                self.engine.schedule_fire(nxt)
        if self.stream.links:  # (setLeader: the leader runs the mirror and sources, from here)
            self.engine.sourcing.lead_changed(self.stream, True)

    async def _answer_create(self, reply: str, build) -> None:
        """The create's answer, a moment after this leader subscribed to the stream's subjects:
        the answer goes over the system account's route and the interest over the stream
        account's, two connections, and a client publishing as soon as it has the answer
        must find the interest there before it (nats-server's answer usually loses that race
        by a Go server's speed alone)."""
        await trio.sleep(CREATE_ANSWER_DELAY)
        if self.stopped:
            return
        try:
            self.host.system.publish(reply.encode(), None, None, dumps(build()))
        except ApiError:
            return
        self.host.flush()

    def _follow(self) -> None:
        """setLeader(false): the subscriptions go, the publishes in flight are not answered."""
        self.pending_answer = None  # (another leader answers)
        if self.leader is None:
            return
        self.leader = None
        self.applier.respond = False
        self.applier.stored.clear()
        if isinstance(self.stream.counter_totals, InflightTotals):
            self.stream.counter_totals = Totals()
        if self.stream.scheduler is not None:
            self.stream.scheduler.rearm()  # (what it fired and was not applied: the next leader's)
        self.stream.unsubscribe()
        if self._sync_sub is not None:
            self.host.system.unsubscribe(self._sync_sub)
            self._sync_sub = None
        if self.stream.links:  # (a follower's links stop: the new leader's take over)
            self.engine.sourcing.lead_changed(self.stream, False)

    def direct_ready(self, serving: bool) -> bool:
        """Whether this replica answers direct gets (monitorStream): the leader does; a follower
        once current, or within DIRECT_SYNC_THRESHOLD percent of the commit (mset.isCurrent,
        raft.go isCurrent: a leader known, no catch-up running), and from then on."""
        if self.stopped:
            return False
        if self.leading or serving:
            return True
        node = self.group.node
        if self._catching_up or self.recovering or node.catchup_inbox or not node.leader or not node.commit:
            return False
        return self.applied * 100.0 >= node.commit * DIRECT_SYNC_THRESHOLD

    @property
    def raft_node(self) -> Any:
        return self.group.node

    def step_down(self, preferred: str = "") -> None:
        """STREAM.LEADER.STEPDOWN: hand the lead over (raft.go StepDown), to ``preferred`` (a
        peer id) when given."""
        self.group.step_down(preferred)

    # -- snapshots ----------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        entries, size = self._since_snapshot
        if not entries or self._catching_up:
            return
        # monitorStream also snapshots once a proposal failed (clfs grew): a restart replays
        # only what follows, as the failures are counted nowhere else (a replay that skipped
        # the failed entry would store the next message twice).
        if entries < COMPACT_ENTRIES and size < COMPACT_BYTES and self.applier.clfs <= self._snapshot_clfs and \
                clock.monotonic() - self._snapshot_at < COMPACT_INTERVAL:
            return
        self.snapshot()

    def snapshot(self) -> bool:
        """The stream's state to the node (its log compacted up to what was applied)."""
        if self.stopped or self._catching_up or not self.applied:
            return False
        try:
            # monitorStream's flushPending: what the store buffered reaches the OS before the
            # log entries that hold it go (else a kill -9 right after loses them here).
            self.stream.store.flush()
        except OSError as exc:
            log.error("JetStream cluster: stream %s: no snapshot, the store could not be written: %s",
                      self.stream.name, exc)
            return False
        try:
            self.group.node.install_snapshot(self.applier.snapshot().encode(), self.applied)
        except SnapshotError:
            return False
        except StorageError as exc:
            log.error("JetStream cluster: stream %s: the snapshot failed: %s", self.stream.name, exc)
            return False
        self._since_snapshot = (0, 0)
        self._snapshot_at = clock.monotonic()
        self._snapshot_clfs = self.applier.clfs
        self.snapshots += 1
        return True

    # -- catch-up: a follower's side ----------------------------------------------------------

    def _start_catchup(self, request: SyncRequest) -> None:
        if not self.sync_subject:
            log.error("JetStream cluster: stream %s: no sync subject to catch up on", self.stream.name)
            return
        self._catching_up = True
        self.host.spawn(self._catch_up, request)

    async def _catch_up(self, request: SyncRequest) -> None:
        """processSnapshot's loop: ask, apply what comes (each acknowledged), until an empty
        message; asked again from where the store is when it ends short or stalls."""
        system = self.host.system
        name = self.stream.name
        tries = 0
        try:
            while True:
                if self.stopped:
                    return
                if tries and tries % CATCHUP_RETRIES == 0:
                    log.warning("JetStream cluster: catch-up for stream %s: %d tries, at %d of %d, trying again",
                                name, tries, self.stream.store.last_seq, request.last_seq)
                tries += 1
                if self.group.leader:  # (processSnapshot: a leader cannot pause its apply, it steps down)
                    try:
                        self.group.step_down()
                    except NotLeader:
                        pass
                last = request.last_seq
                if self.stream.store.last_seq >= last:
                    break
                inbox = f"{SYNC_REPLY}.{_token(self.host.rng)}"
                done = trio.Event()
                activity = [clock.monotonic()]

                def received(subject, reply, headers, body, done=done, activity=activity) -> None:
                    activity[0] = clock.monotonic()
                    if not body:
                        done.set()
                        return
                    try:
                        self.applier.apply_catchup(bytes(body))
                    except (CodecError, StoreError) as exc:
                        log.warning("JetStream cluster: catch-up of stream %s: %s", name, exc)
                        if reply:
                            system.publish(reply, None, None, str(exc).encode())
                        done.set()
                        return
                    if reply:
                        system.publish(reply, None, None, b"")

                sub = system.subscribe(inbox, received)
                asked = clock.monotonic()
                try:
                    ask = SyncRequest(request.peer, self.stream.store.last_seq + 1, last, request.min_applied,
                                      request.delete_ranges)
                    system.publish(self.sync_subject.encode(), inbox.encode(), None, ask.encode())
                    self.host.flush()
                    wait = CATCHUP_START
                    while not done.is_set():
                        with trio.move_on_after(wait):
                            await done.wait()
                        if done.is_set() or clock.monotonic() - activity[0] >= wait:
                            break
                        wait = CATCHUP_ACTIVITY
                finally:
                    system.unsubscribe(sub)
                if self.stream.store.last_seq >= last:
                    log.info("JetStream cluster: catch-up for stream %s complete", name)
                    self.catchups += 1
                    break
                self.catchup_retries += 1
                await trio.sleep(max(0.0, CATCHUP_MIN_RETRY_WAIT - (clock.monotonic() - asked)))
        finally:
            self._catching_up = False
            held, self._held = self._held, []
            if not self.stopped:
                for c in held:
                    if self._catching_up:
                        self._held.append(c)
                    else:
                        self._apply_one(c)
                self._after_apply()
                self.host.flush()

    # -- catch-up: the leader's side ----------------------------------------------------------

    def _sync_request(self, subject, reply, headers, body) -> None:
        """A follower's streamSyncRequest on $JSC.SYNC: served by a task (runCatchup)."""
        if not reply or not self.leading:
            return
        try:
            request = loads(bytes(body))
            first, last = int(request["first_seq"]), int(request["last_seq"])
            ranges = bool(request.get("delete_ranges", False))
        except (ValueError, KeyError, TypeError):
            return
        if self.stream.store.last_seq < last:
            # runCatchup: a leader without the messages asked for steps down (another replica
            # may have them) and serves nothing: the follower asks again.
            log.warning("JetStream cluster: catch-up for stream %s skipped, requested sequence %d is past "
                        "the last one here (%d)", self.stream.name, last, self.stream.store.last_seq)
            try:
                self.group.step_down()
            except (NotLeader, StorageError):
                pass
            return
        self.host.spawn(self._serve_catchup, bytes(reply), first, last, ranges)

    async def _serve_catchup(self, inbox: bytes, first: int, last: int, ranges: bool) -> None:
        """runCatchup: the messages first..last to ``inbox`` (a missing one as a skip, or runs
        of them as a deleteRangeOp when the follower takes them), each with a $JSC.ACK reply,
        at most CATCHUP_WINDOW unacknowledged; an empty message at the end."""
        system, store = self.host.system, self.stream.store
        ack_prefix = f"{SYNC_ACK}.{_token(self.host.rng)}"
        outstanding = [0]
        moved = trio.Event()
        aborted = [False]
        state = {"moved": moved}

        def acked(subject, reply, headers, body) -> None:
            if body:
                aborted[0] = True
            outstanding[0] -= 1
            state["moved"].set()

        sub = system.subscribe(ack_prefix + ".*", acked)
        self.catchups_served += 1
        try:
            last = min(last, store.last_seq)  # (a purge or a removal since the request)
            seq = first
            gap = 0  # the first of a run of missing sequences (0: none)

            def send(data: bytes, ack: bool = True) -> None:
                if ack:
                    outstanding[0] += 1
                    system.publish(inbox, f"{ack_prefix}.{len(data)}".encode(), None, data)
                else:
                    system.publish(inbox, None, None, data)

            def flush_gap(upto: int) -> None:
                nonlocal gap
                if gap:
                    if upto - gap == 1 or not ranges:
                        for s in range(gap, upto):
                            send(_skip(s))
                    else:
                        send(JsonOp(Op.DELETE_RANGE, {"First": gap, "Num": upto - gap}).encode(), ack=False)
                    gap = 0

            while seq <= last and not aborted[0] and not self.stopped:
                if outstanding[0] >= CATCHUP_WINDOW:  # (until an acknowledgement, or it stalled)
                    state["moved"] = trio.Event()
                    with trio.move_on_after(CATCHUP_ACTIVITY) as waited:
                        await state["moved"].wait()
                    if waited.cancelled_caught:
                        log.warning("JetStream cluster: catch-up from stream %s stalled", self.stream.name)
                        return
                    continue
                for _ in range(CATCHUP_WINDOW - outstanding[0]):
                    if seq > last:
                        break
                    sm = store.load_msg(seq) if seq >= store.first_seq else None
                    if sm is None:
                        if not gap:
                            gap = seq
                    else:
                        flush_gap(seq)
                        send(_msg(sm.subject, sm.hdr or b"", sm.data, seq, sm.ts))
                    seq += 1
                if seq > last:
                    flush_gap(seq)
                self.host.flush()
                await trio.lowlevel.checkpoint()
            if not aborted[0]:
                send(b"", ack=False)
                self.host.flush()
        finally:
            system.unsubscribe(sub)

    # -- life cycle -----------------------------------------------------------------------------

    def stop(self, remove: bool = False) -> None:
        """The group's node stops (its files stay, or go with ``remove``: the stream deleted)."""
        if self.stopped:
            return
        if not remove and not self.group.stopped and not self.stream.store.closed and self._since_snapshot[0]:
            self.snapshot()  # (monitorStream: a snapshot at shutdown, a shorter replay at the restart)
        self._follow()
        self.stopped = True
        self.stream.replica = None if remove else self.stream.replica
        folder = self.group.folder
        self.host.nrg.stop_group(self.group_name)
        if remove:
            shutil.rmtree(folder, ignore_errors=True)


def _counter_total(body: bytes) -> bytes | None:
    """A counter message's total, as JSON text (its body is {"val":"<total>"})."""
    try:
        total = loads(body)["val"]
    except (ValueError, KeyError, TypeError):
        return None
    return dumps(total) if isinstance(total, str) else None


def _text(reply) -> str:
    return bytes(reply).decode("utf-8", "replace") if reply else ""


def _token(rng: random.Random) -> str:
    return "".join(rng.choice(_DIGITS) for _ in range(_TOKEN_LEN))


def _skip(seq: int) -> bytes:
    """A catch-up's missing sequence: a message with no subject and no time (encodeStreamMsg)."""
    return _msg(b"", b"", b"", seq, 0)


def _msg(subject: bytes, hdr: bytes, msg: bytes, seq: int, ts: int) -> bytes:
    """A catch-up message: a streamMsgOp whose last sequence is the message's own."""
    return StreamMsg.proposal(subject, b"", hdr, msg, seq, ts).encode()
