"""A sans-IO RAFT node speaking nats-server's RAFT (server/raft.go).

Like h11, the node does no I/O and reads no clock of its own: the caller feeds it the NATS
messages it received (:meth:`Node.receive`: subject, reply, payload) and calls :meth:`Node.tick`
when :meth:`Node.next_deadline` passes, then takes the messages to publish
(:meth:`Node.take_outgoing`) and the entries that became committed (:meth:`Node.take_committed`).
Time is read from ``now`` (natserver.clock.monotonic by default: the server clock, which tests
move) and randomness from ``rng`` (election timeouts, inbox names).

What it does as raft.go does (the wire frames are wire.py's):

- follower, candidate, leader; an observer never campaigns; a removed node stops campaigning.
- terms and votes persisted (storage.py) before a vote is granted or an append answered.
- election timeouts drawn uniformly in [minElectionTimeout, maxElectionTimeout) (4-9 s); a
  node asked to campaign (:meth:`Node.campaign`, a new group's preferred peer) and a voter that
  refused an out-of-date candidate draw from the campaign timeout (100-800 ms); heartbeats every hbInterval (1 s); a leader that has not
  heard from a quorum for lostQuorumInterval (10 s) steps down.
- vote rules: a higher term resets the vote; a vote goes to a candidate whose log is at least
  as up to date (last term, then last index); a leader or candidate seeing a higher term
  steps down.
- appends: the leader broadcasts each proposal on ``$NRG.AE.<group>`` with the previous entry's
  term and index; a follower whose log does not hold that entry asks to be caught up (a
  response with success false and a ``$NRG.CR.`` reply); the leader then streams the missing
  entries to that inbox in batches, each acknowledged on its ``$NRG.CP.`` inbox. Conflicting
  entries (same index, other term) are truncated, never committed ones.
- commit once a quorum (cluster size / 2 + 1) holds an entry of the leader's term; a new
  leader first appends a peer state entry (as raft.go's leader does), which commits what
  earlier terms left.
- membership by entries: ``EntryAddPeer`` / ``EntryRemovePeer`` (data: the 8-byte id) and
  ``EntryPeerState`` change the peer set when appended (undone if truncated), as raft.go's
  membChange does; one change at a time.

- snapshots: the upper layer hands the node its state at an applied index
  (:meth:`Node.install_snapshot`, raft.go InstallSnapshot); the node keeps it with the committed
  peer state at that index and drops its log up to it; a restart starts from it (its data is
  the first committed item), and a follower that lags behind it is sent it.

Left out (see README.md): the paused/applied back-pressure, scale-up observer mode.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from natserver import clock
from natserver.raft import wire
from natserver.raft.storage import LogEntry, Snapshot, Storage, StorageError
from natserver.raft.wire import (
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    WireError,
)

__all__ = ["Committed", "Mark", "Message", "Node", "NotLeader", "Role", "SnapshotError", "Timeouts"]

# raft.go's defaults (minElectionTimeoutDefault etc.), in seconds.
MIN_ELECTION_TIMEOUT = 4.0
MAX_ELECTION_TIMEOUT = 9.0
MIN_CAMPAIGN_TIMEOUT = 0.1
MAX_CAMPAIGN_TIMEOUT = 8 * MIN_CAMPAIGN_TIMEOUT
HEARTBEAT_INTERVAL = 1.0
LOST_QUORUM_INTERVAL = 10 * HEARTBEAT_INTERVAL
# Entries a leader sends a lagging follower before waiting for its acknowledgement: natserver's
# own bound (raft.go bounds a catch-up by bytes outstanding); keeps one call's work bounded.
CATCHUP_BATCH = 64
# A catch-up that has made no progress for this long is asked for again (raft.go catchupStalled).
CATCHUP_STALLED = 2.0
# The peer a leader hands over to campaigns this soon (raft.go xferCampaign: 10 ms).
TRANSFER_CAMPAIGN = 0.01
# A peer a leader may hand over to was heard from this recently (raft.go StepDown: hbInterval*3).
HEALTHY_WITHIN = 3 * HEARTBEAT_INTERVAL
# raft.go peerRemoveTimeoutDefault: a removed peer an unmanaged group's leader still hears from
# is not added back before this many seconds.
PEER_REMOVE_TIMEOUT = 5 * 60.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    min_election: float = MIN_ELECTION_TIMEOUT
    max_election: float = MAX_ELECTION_TIMEOUT
    min_campaign: float = MIN_CAMPAIGN_TIMEOUT
    max_campaign: float = MAX_CAMPAIGN_TIMEOUT
    heartbeat: float = HEARTBEAT_INTERVAL
    lost_quorum: float = LOST_QUORUM_INTERVAL


class Role(Enum):
    FOLLOWER = "Follower"
    CANDIDATE = "Candidate"
    LEADER = "Leader"


@dataclass(frozen=True, slots=True)
class Message:
    """A NATS message to publish in the system account."""

    subject: str
    reply: str
    payload: bytes


class Mark(Enum):
    """Where a replay or a catch-up starts and ends in the committed stream (``Node(marks=True)``):
    raft.go tells its upper layer with an ``EntryCatchup`` entry (sendCatchupSignal) and a nil
    entry (the end of a catch-up, cancelCatchupSignal, and of the startup's replay); the meta
    layer stages what is applied in between (jetstream_cluster.go's recovery and catch-up)."""

    REPLAY_START = "replay start"  # (raft.go: implicit, the node's first committed entries)
    REPLAY_END = "replay end"  # raft.go: the nil entry after the WAL's replay
    CATCHUP_START = "catchup start"  # raft.go: the EntryCatchup entry
    CATCHUP_END = "catchup end"  # raft.go: the nil entry once caught up


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed entry to apply, or (``mark`` set, index 0, an ``EntryCatchup`` entry) a marker."""

    index: int
    term: int
    entry: Entry
    mark: Mark | None = None

    @staticmethod
    def marker(mark: Mark) -> Committed:
        return Committed(0, 0, Entry(EntryType.CATCHUP, b""), mark)


class NotLeader(Exception):  # noqa: N818 (raft.go errNotLeader)
    """A proposal made to a node that is not the leader."""


class SnapshotError(Exception):
    """A snapshot that cannot be taken now (raft.go's errors, their texts)."""


ERR_NO_SNAPSHOT = "raft: no snapshot available"  # raft.go errNoSnapAvailable
ERR_CATCHUPS_RUNNING = "raft: snapshot can not be installed while catchups running"  # errCatchupsRunning


@dataclass(slots=True)
class _Catchup:
    inbox: str  # the follower's $NRG.CR. inbox
    next_index: int  # the next entry to send
    last_sent: int  # the last entry sent and not yet acknowledged


class Node:
    def __init__(self, node_id: str, group: str, peers: list[str], storage: Storage, *,
                 observer: bool = False, rng: random.Random | None = None,
                 now: Callable[[], float] = clock.monotonic, timeouts: Timeouts = Timeouts(),
                 marks: bool = False, managed: bool = True, cluster_size: int = 0) -> None:
        if len(node_id) != wire.ID_LEN:
            raise ValueError(f"a node id is {wire.ID_LEN} characters: {node_id!r}")
        self.id = node_id
        self.group = group
        self.storage = storage
        self.observer = observer
        self.rng = rng or random.Random()
        self.now = now
        self.timeouts = timeouts
        persisted = storage.load()
        self.term = persisted.term
        self.vote = persisted.vote
        self.log: list[LogEntry] = persisted.log  # the entries after the snapshot's
        self.snapshot = persisted.snapshot
        # raft.go bootstrapRaftNode: a group may start knowing fewer peers than its expected
        # cluster size (the meta group: the servers seen so far, at least 2 expected).
        self.base_peers = persisted.peer_state or PeerState(tuple(peers), max(cluster_size, len(peers)))
        if persisted.peer_state is None:
            storage.save_peer_state(self.base_peers)
        # raft.go Managed: the upper layer decides membership; an unmanaged group's leader
        # adds a peer it hears from that is not in its peer set (trackPeer: the meta group).
        self.managed = managed
        self.peers: list[str] = []
        self.cluster_size = 0  # raft.go csz: the quorum is cluster_size // 2 + 1
        self.removed = False  # not (or no longer) in the peer set: never campaigns
        self.removed_peers: dict[str, float] = {}  # peer -> when a membership change took it out
        self._membership_index = 0  # the log index of the last membership entry (0: none)
        self._recompute_peers()
        self.role = Role.FOLLOWER
        self.leader = ""
        self.commit = self.snapshot.index if self.snapshot else 0
        self.applied = self.commit
        self.write_error: StorageError | None = None
        self.marks = marks  # report replays and catch-ups in the committed stream (Mark)
        self._catchup_signalled = False  # CATCHUP_START sent, CATCHUP_END owed (raft.go catchup.signal)
        self._out: list[Message] = []
        self._committed: list[Committed] = []
        # raft.go's startup: the snapshot to the upper layer first, then the log's committed
        # entries (up to the commit stored with them), then the end of the replay.
        self._mark(Mark.REPLAY_START)
        if self.snapshot is not None:
            self._committed.append(Committed(self.snapshot.index, self.snapshot.term,
                                             Entry(EntryType.SNAPSHOT, self.snapshot.data)))
        self._advance_commit(persisted.commit)
        self._mark(Mark.REPLAY_END)
        self.vote_subject = wire.vote_subject(group)
        self.append_subject = wire.append_subject(group)
        self.vote_inbox = wire.inbox(self.rng)
        self.append_inbox = wire.inbox(self.rng)
        self.progress_inbox = wire.progress_inbox(self.rng)
        self.catchup_inbox = ""  # ours, while a leader catches us up
        self._leader_reply = ""  # the current leader's append inbox
        self._catchup_at = 0.0  # when we last asked to be caught up
        self._transfer = False  # a leader handed over to us: campaigning, not waiting (raft.go lxfer)
        self._votes: set[str] = set()
        self._match: dict[str, int] = {}
        self._seen: dict[str, float] = {}
        self._catchups: dict[str, _Catchup] = {}
        now_ = self.now()
        self.created = now_  # raft.go Created(): (quorum-lost advisories wait a while after it)
        self._election_at = now_ + self._election_timeout()
        self._heartbeat_at = now_ + timeouts.heartbeat
        # The commit moved on a response: the followers hear of it by the next append entry, or
        # by a heartbeat when take_outgoing finds none sent meanwhile (raft.go sends it only
        # when no proposal waits: "committed && n.prop.len() == 0").
        self._commit_heartbeat_due = False

    # -- the caller's side -------------------------------------------------------------

    @property
    def subscriptions(self) -> list[str]:
        """The subjects to receive (the group's two, our inboxes)."""
        subjects = [self.vote_subject, self.append_subject, self.vote_inbox, self.append_inbox,
                    self.progress_inbox]
        if self.catchup_inbox:
            subjects.append(self.catchup_inbox)
        if self.role is Role.LEADER:  # raft.go subscribes to forwarded proposals as leader
            subjects += [wire.proposal_subject(self.group), wire.remove_peer_subject(self.group)]
        return subjects

    @property
    def quorum(self) -> int:
        return self.cluster_size // 2 + 1

    def _counts(self, peer: str) -> bool:
        """raft.go shouldCountVoteFromPeer: a peer of the set, or any while the set is smaller
        than the cluster size (a bootstrap that does not know every peer yet)."""
        return peer in self.peers or len(self.peers) < self.cluster_size

    @property
    def base_index(self) -> int:
        """The snapshot's index (0: none): the log holds the entries after it."""
        return self.snapshot.index if self.snapshot else 0

    @property
    def last_index(self) -> int:
        return self.log[-1].index if self.log else self.base_index

    @property
    def last_term(self) -> int:
        if self.log:
            return self.log[-1].term
        return self.snapshot.term if self.snapshot else 0

    def term_at(self, index: int) -> int:
        base = self.base_index
        if index == base:
            return self.snapshot.term if self.snapshot else 0
        return self.log[index - base - 1].term if base < index <= self.last_index else 0

    def _entry(self, index: int) -> LogEntry:
        return self.log[index - self.base_index - 1]

    def take_outgoing(self) -> list[Message]:
        if self._commit_heartbeat_due:
            self._commit_heartbeat_due = False
            if self.role is Role.LEADER:
                self._broadcast(())
                self._heartbeat_at = self.now() + self.timeouts.heartbeat
        out, self._out = self._out, []
        return out

    def take_committed(self) -> list[Committed]:
        out, self._committed = self._committed, []
        return out

    def next_deadline(self) -> float:
        if self.role is Role.LEADER:
            return self._heartbeat_at
        return self._election_at

    def receive(self, subject: str, reply: str, payload: bytes) -> None:
        """A message on one of :attr:`subscriptions`; malformed frames are dropped (raft.go
        logs them). After a failed write the node answers nothing more (raft.go's werr)."""
        if self.write_error is not None:
            return
        try:
            if subject == self.append_subject or (self.catchup_inbox and subject == self.catchup_inbox):
                self._on_append(AppendEntry.decode(payload), reply, catchup=subject != self.append_subject)
            elif subject == self.vote_subject:
                self._on_vote_request(VoteRequest.decode(payload), reply)
            elif subject == self.vote_inbox:
                self._on_vote_response(VoteResponse.decode(payload))
            elif subject in (self.append_inbox, self.progress_inbox):
                self._on_append_response(AppendEntryResponse.decode(payload), reply,
                                         progress=subject == self.progress_inbox)
            elif self.role is Role.LEADER and subject == wire.proposal_subject(self.group):
                self._append_own([Entry(EntryType.NORMAL, bytes(payload))])
            elif self.role is Role.LEADER and subject == wire.remove_peer_subject(self.group):
                peer = wire.classify(subject, payload)
                if isinstance(peer, str) and peer in self.peers and self._membership_index <= self.commit:
                    self._append_own([Entry(EntryType.REMOVE_PEER, payload)])
        except WireError:
            return
        except StorageError as e:
            self._failed(e)

    def sync(self) -> None:
        """Make durable what the storage deferred (``FileStorage(deferred_sync=True)``): call it
        before publishing what :meth:`take_outgoing` gives, so that nothing is answered before
        it is on disk. A failure stops the node as a failed write does (what it was to send
        is dropped)."""
        if self.write_error is not None:
            return
        try:
            self.storage.sync()
        except StorageError as e:
            self._failed(e)

    def _failed(self, error: StorageError) -> None:
        """What was not made durable is not promised: the answer being built is dropped."""
        self.write_error = error
        self._out.clear()
        self.role = Role.FOLLOWER

    def tick(self) -> None:
        """Fire what is due at ``now()``."""
        if self.write_error is not None:
            return
        try:
            self._tick(self.now())
        except StorageError as e:
            self._failed(e)

    def _tick(self, now: float) -> None:
        if self.role is Role.LEADER:
            if now >= self._heartbeat_at:
                if self._lost_quorum(now):
                    self._step_down("")
                    return
                self._heartbeat_at = now + self.timeouts.heartbeat
                self._broadcast(())
        elif now >= self._election_at:
            self._campaign()

    def campaign(self) -> None:
        """Stand for election soon: within the campaign timeout (raft.go Campaign, which the
        meta layer calls on a new group's preferred peer)."""
        if self.role is not Role.LEADER:
            self._reset_election(self._campaign_timeout())

    def forward(self, data: bytes) -> None:
        """Propose from any node: the leader appends it, a follower sends it to the leader on
        ``$NRG.P.<group>`` (raft.go ForwardProposal); nothing says when (or if) it commits."""
        if self.role is Role.LEADER:
            self.propose(data)
        else:
            self._send(wire.proposal_subject(self.group), "", data)

    def forward_remove_peer(self, peer: str) -> None:
        """raft.go ProposeRemovePeer from any node: a follower sends it on ``$NRG.RP.<group>``."""
        if self.role is Role.LEADER:
            self.remove_peer(peer)
        else:
            self._send(wire.remove_peer_subject(self.group), "", peer.encode())

    def step_down(self, preferred: str = "") -> str:
        """Stop leading, handing over to ``preferred`` (or any peer heard from lately) by
        an ``EntryLeaderTransfer`` entry, as raft.go StepDown: the peer it names campaigns at
        once. Returns the peer handed over to ("" if none was healthy)."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader)
        now = self.now()

        def healthy(peer: str) -> bool:
            return peer != self.id and peer in self.peers and now - self._seen.get(peer, -1e18) < HEALTHY_WITHIN

        if healthy(preferred):
            chosen = preferred
        else:  # (raft.go: the first healthy peer of its peers map: any of them)
            candidates = [p for p in self.peers if healthy(p)]
            chosen = self.rng.choice(candidates) if candidates else ""
        if chosen:
            try:
                self._append_own([Entry(EntryType.LEADER_TRANSFER, chosen.encode())])
            except StorageError as e:
                self._failed(e)
                raise
        self._step_down("")
        return chosen

    def propose(self, data: bytes, kind: int = EntryType.NORMAL) -> int:
        """Append an entry as leader and send it; its index (committed later, maybe never)."""
        if self.role is not Role.LEADER or self.write_error is not None:
            raise NotLeader(self.leader)
        if kind in (EntryType.ADD_PEER, EntryType.REMOVE_PEER) and self._membership_index > self.commit:
            raise NotLeader("a membership change is already in progress")
        entry = Entry(kind, data)
        try:
            self._append_own([entry])
        except StorageError as e:
            self._failed(e)
            raise
        return self.last_index

    def propose_many(self, items: list[bytes]) -> int:
        """raft.go ProposeMulti: several normal entries appended and sent as one append entry
        (one index, committed together); its index."""
        if self.role is not Role.LEADER or self.write_error is not None:
            raise NotLeader(self.leader)
        if not items:
            return self.last_index
        try:
            self._append_own([Entry(EntryType.NORMAL, data) for data in items])
        except StorageError as e:
            self._failed(e)
            raise
        return self.last_index

    def install_snapshot(self, data: bytes, index: int | None = None, *, force: bool = False) -> Snapshot:
        """Keep ``data``, the upper layer's state once it applied the committed entries up to
        ``index`` (by default all it was given), and drop the log up to it (raft.go
        InstallSnapshot). Refused (:class:`SnapshotError`) with nothing new to snapshot, and
        while this leader catches a follower up unless ``force`` (raft.go: the catch-up reads
        the log being dropped; one that needs it is sent the snapshot instead)."""
        if self.write_error is not None:
            raise self.write_error
        index = self.applied if index is None else index
        if not self.base_index < index <= self.applied:
            raise SnapshotError(ERR_NO_SNAPSHOT)
        if self._catchups and not force:
            raise SnapshotError(ERR_CATCHUPS_RUNNING)
        peers = self._peers_through(index)
        snapshot = Snapshot(self.term_at(index), index, bytes(data), peers)
        try:
            self.storage.compact(snapshot)
        except StorageError as e:
            self._failed(e)
            raise
        del self.log[:index - self.base_index]
        self.snapshot, self.base_peers = snapshot, peers
        self._recompute_peers()
        return snapshot

    def add_peer(self, peer: str) -> int:
        return self.propose(peer.encode(), EntryType.ADD_PEER)

    def remove_peer(self, peer: str) -> int:
        return self.propose(peer.encode(), EntryType.REMOVE_PEER)

    # -- internals ---------------------------------------------------------------------

    def _election_timeout(self) -> float:
        # raft.go randElectionTimeout: min + rand.Int63n(max - min)
        return self.timeouts.min_election + self.rng.random() * (self.timeouts.max_election - self.timeouts.min_election)

    def _campaign_timeout(self) -> float:
        return self.timeouts.min_campaign + self.rng.random() * (self.timeouts.max_campaign - self.timeouts.min_campaign)

    def _reset_election(self, timeout: float | None = None) -> None:
        self._election_at = self.now() + (self._election_timeout() if timeout is None else timeout)

    def _send(self, subject: str, reply: str, payload: bytes) -> None:
        self._out.append(Message(subject, reply, payload))

    def _set_term(self, term: int, vote: str) -> None:
        self.term, self.vote = term, vote
        self.storage.save_term_vote(term, vote)

    def _peers_through(self, index: int) -> PeerState:
        """The peer state once the log's entries up to ``index`` are applied (raft.go
        committedPeerStateLocked, for a snapshot at ``index``)."""
        peers, _, size = self._membership(self.log[:index - self.base_index])
        return PeerState(tuple(peers), size, self.base_peers.domain_ext)

    def _recompute_peers(self) -> None:
        before = getattr(self, "peers", [])
        self.peers, self._membership_index, self.cluster_size = self._membership(self.log)
        self.removed = self.id not in self.peers
        # raft.go removePeer: a peer taken out is not added back by trackPeer (an unmanaged
        # group's leader hearing from it) for PEER_REMOVE_TIMEOUT.
        now = self.now()
        for peer in before:
            if peer not in self.peers:
                self.removed_peers[peer] = now

    def _membership(self, log: list[LogEntry]) -> tuple[list[str], int, int]:
        """The peer set after ``log`` (from the base peer state), its last membership entry
        and the cluster size (a peer state's, else, after a peer added or removed, the set's:
        raft.go adjustClusterSizeAndQuorum)."""
        peers = list(self.base_peers.known_peers)
        size = max(self.base_peers.cluster_size, len(peers))
        membership_index = 0
        for item in log:
            for entry in item.entries:
                kind = entry.type
                if kind == EntryType.PEER_STATE:
                    try:
                        state = PeerState.decode(entry.data)
                    except WireError:
                        continue
                    peers = list(state.known_peers)
                    size = max(state.cluster_size, len(peers))
                elif kind == EntryType.ADD_PEER:
                    peer = entry.data.decode(errors="replace")
                    if len(peer) == wire.ID_LEN and peer not in peers:
                        peers.append(peer)
                        size = max(size, len(peers))
                    membership_index = item.index
                elif kind == EntryType.REMOVE_PEER:
                    peer = entry.data.decode(errors="replace")
                    if peer in peers and len(peers) > 1:
                        peers.remove(peer)
                        size = len(peers)
                    membership_index = item.index
        return peers, membership_index, size

    def _peer_state(self) -> PeerState:
        return PeerState(tuple(self.peers), self.cluster_size, self.base_peers.domain_ext)

    def _mark(self, mark: Mark) -> None:
        if self.marks:
            self._committed.append(Committed.marker(mark))

    def _signal_catchup(self) -> None:
        """raft.go sendCatchupSignal: what commits from here until CATCHUP_END is a catch-up's."""
        if self.catchup_inbox and not self._catchup_signalled:
            self._catchup_signalled = True
            self._mark(Mark.CATCHUP_START)

    def _end_catchup(self) -> None:
        """raft.go cancelCatchup: the catch-up is over (or replaced); its end is signalled."""
        self.catchup_inbox = ""
        if self._catchup_signalled:
            self._catchup_signalled = False
            self._mark(Mark.CATCHUP_END)

    def _store(self, entries: list[LogEntry], commit: int) -> None:
        self.storage.append(entries, commit)
        self.log.extend(entries)
        if any(e.type in (EntryType.PEER_STATE, EntryType.ADD_PEER, EntryType.REMOVE_PEER)
               for item in entries for e in item.entries):
            self._recompute_peers()

    def _truncate(self, last_index: int) -> None:
        if last_index < self.commit:
            raise AssertionError(f"raft: truncating to {last_index} would lose commit {self.commit}")
        if last_index >= self.last_index:
            return
        self.storage.truncate(last_index)
        del self.log[last_index - self.base_index:]
        self._recompute_peers()

    def _advance_commit(self, commit: int) -> None:
        if commit <= self.commit:
            return
        self.commit = commit
        while self.applied < self.commit:
            self.applied += 1
            item = self._entry(self.applied)
            for entry in item.entries:  # (an append entry's: the same index)
                self._committed.append(Committed(item.index, item.term, entry))
        if self.role is Role.LEADER and self.removed:
            self._step_down("")  # raft.go: a leader removed by a committed entry steps down

    # follower side

    def _on_append(self, ae: AppendEntry, reply: str, *, catchup: bool) -> None:
        if ae.leader == self.id:
            return  # our own broadcast
        term = ae.lterm or ae.term
        if term < self.term:
            if not catchup:
                self._send(reply, "", AppendEntryResponse(self.term, self.last_index, self.id, False).encode())
            return
        if term > self.term:
            self._set_term(term, "")
        if self.role is not Role.FOLLOWER:
            self._become_follower()
        if not self._transfer:  # raft.go: not while we were asked to take over
            self._reset_election()
        if not catchup:
            if self.leader != ae.leader:
                self.leader = ae.leader
            self._leader_reply = reply
        # Entries up to our snapshot are committed, hence the same in every later leader's log.
        if ae.pindex > self.last_index or (ae.pindex > self.base_index and self.term_at(ae.pindex) != ae.pterm):
            if catchup and [e.type for e in ae.entries] == [EntryType.SNAPSHOT, EntryType.PEER_STATE]:
                self._install_snapshot(ae)
                return
            if ae.pindex <= self.last_index:
                # The entry at pindex conflicts: drop it and what follows (never a committed one).
                if ae.pindex <= self.commit:
                    return
                self._truncate(ae.pindex - 1)
                self._request_catchup()
            elif not catchup and (not self.catchup_inbox or self.now() - self._catchup_at > CATCHUP_STALLED):
                self._request_catchup()
            return
        # Our log holds the entry before this one: skip it if we have it, drop what conflicts.
        # (raft.go storeToWAL: an append entry's entries share one index, pindex + 1.)
        new: list[LogEntry] = []
        index = ae.pindex + 1
        if ae.entries and index > self.base_index:  # (not in our snapshot)
            have = self.term_at(index) if index <= self.last_index else 0
            if have != ae.term:
                if have:
                    if index <= self.commit:
                        return
                    self._truncate(index - 1)
                new.append(LogEntry(index, ae.term, ae.entries[0], tuple(ae.entries[1:])))
        matched = ae.pindex + 1 if ae.entries else ae.pindex
        commit = max(self.commit, min(ae.commit, matched))
        if new:
            self._store(new, commit)
        if not catchup and not self.observer and any(
                e.type == EntryType.LEADER_TRANSFER and e.data == self.id.encode() for e in ae.entries):
            self._transfer = True  # raft.go xferCampaign: the leader handed over to us
            self._reset_election(TRANSFER_CAMPAIGN)
        if catchup and commit > self.commit:
            self._signal_catchup()
        self._advance_commit(commit)
        # A success names the matched entry by its term and index (raft.go: n.pterm, n.pindex).
        ack = AppendEntryResponse(self.term_at(matched), matched, self.id, True).encode()
        if catchup:
            if reply:  # the catch-up's progress (2.15.1's $NRG.CP. reply)
                self._send(reply, "", ack)
        else:
            self._end_catchup()
            self._send(reply, "", ack)

    def _install_snapshot(self, ae: AppendEntry) -> None:
        """raft.go: a catch-up that starts with the leader's snapshot and peer state (the state
        up to pindex): it replaces our log and is applied as a committed entry."""
        if ae.pindex <= self.commit:
            return
        try:
            peers = PeerState.decode(ae.entries[1].data)
        except WireError:
            return
        snapshot = Snapshot(ae.pterm, ae.pindex, ae.entries[0].data, peers)
        self.storage.install_snapshot(snapshot)
        self.storage.save_peer_state(peers)
        had_snapshot = self.snapshot is not None
        self.snapshot, self.log, self.base_peers = snapshot, [], peers
        self._recompute_peers()
        self.commit = self.applied = ae.pindex
        # raft.go: a first snapshot starts the catch-up's signal; a later one goes before it.
        if not had_snapshot:
            self._signal_catchup()
        self._committed.append(Committed(ae.pindex, ae.pterm, ae.entries[0]))
        self._signal_catchup()

    def _request_catchup(self) -> None:
        if not self._leader_reply:
            return
        self._end_catchup()  # (raft.go createCatchup: a catch-up in progress is cancelled first)
        self.catchup_inbox = wire.catchup_inbox(self.rng)
        self._catchup_at = self.now()
        self._send(self._leader_reply, self.catchup_inbox,
                   AppendEntryResponse(self.last_term, self.last_index, self.id, False).encode())

    def _on_vote_request(self, vr: VoteRequest, reply: str) -> None:
        if vr.candidate == self.id:
            return
        response = VoteResponse(self.term, self.id, False, not self.log)
        if vr.term < self.term:
            self._send(reply, "", response.encode())
            return
        if vr.term > self.term:
            if self.role is not Role.FOLLOWER:
                self._become_follower()
            self._set_term(vr.term, "")
            self.leader = ""
        vote_ok = self.vote in ("", vr.candidate)
        up_to_date = vr.last_term > self.last_term or (vr.last_term == self.last_term and vr.last_index >= self.last_index)
        granted = False
        if vote_ok and up_to_date:
            self._set_term(vr.term, vr.candidate)
            granted = True
            self._reset_election()
        elif not self.vote and self.role is not Role.CANDIDATE and not self.observer:
            self._reset_election(self._campaign_timeout())  # raft.go: we may be the better candidate
        self._send(reply, "", VoteResponse(self.term, self.id, granted, not self.log).encode())

    # candidate side

    def _campaign(self) -> None:
        if self.observer or self.removed:
            self._reset_election()
            return
        self._set_term(self.term + 1, self.id)
        self._transfer = False
        self.role = Role.CANDIDATE
        self.leader = ""
        self._votes = {self.id}
        self._reset_election()
        self._send(self.vote_subject, self.vote_inbox,
                   VoteRequest(self.term, self.last_term, self.last_index, self.id).encode())
        if len(self._votes) >= self.quorum:
            self._become_leader()

    def _on_vote_response(self, vr: VoteResponse) -> None:
        if vr.term > self.term:
            self._set_term(vr.term, "")
            self._become_follower()
            return
        if self.role is not Role.CANDIDATE or vr.term != self.term or not vr.granted:
            return
        if self._counts(vr.peer):
            self._votes.add(vr.peer)
        if len(self._votes) >= self.quorum:
            self._become_leader()

    def _become_follower(self) -> None:
        self.role = Role.FOLLOWER
        self._catchups.clear()
        self._reset_election()

    def _step_down(self, leader: str) -> None:
        self.leader = leader
        self._become_follower()

    # leader side

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader = self.id
        self._end_catchup()
        now = self.now()
        self._match = {peer: 0 for peer in self.peers}
        self._seen = {peer: now for peer in self.peers}
        self._catchups = {}
        self._heartbeat_at = now + self.timeouts.heartbeat
        # raft.go switchToLeader: the peer state first, which commits earlier terms' entries.
        self._append_own([Entry(EntryType.PEER_STATE, self._peer_state().encode())])

    def _append_own(self, entries: list[Entry]) -> None:
        start = self.last_index
        pterm = self.last_term
        items = [LogEntry(start + 1, self.term, entries[0], tuple(entries[1:]))]  # (one index: raft.go's)
        self._store(items, self.commit)
        self._match[self.id] = self.last_index
        self._commit_heartbeat_due = False  # (this append entry carries the commit)
        self._send(self.append_subject, self.append_inbox,
                   AppendEntry(self.id, self.term, self.commit, pterm, start, tuple(entries)).encode())
        self._heartbeat_at = self.now() + self.timeouts.heartbeat
        self._leader_commit()

    def _broadcast(self, entries: tuple[Entry, ...]) -> None:
        self._commit_heartbeat_due = False  # (every append entry carries the commit)
        self._send(self.append_subject, self.append_inbox,
                   AppendEntry(self.id, self.term, self.commit, self.last_term, self.last_index, entries).encode())

    def has_quorum(self) -> bool:
        """raft.go Quorum(): a quorum of the voters heard from within lost_quorum."""
        return not self._lost_quorum(self.now())

    def _lost_quorum(self, now: float) -> bool:
        voters = set(self.peers) | set(self._seen) if len(self.peers) < self.cluster_size else self.peers
        seen = sum(1 for peer in voters
                   if peer == self.id or (self._counts(peer)
                                          and now - self._seen.get(peer, -1e18) < self.timeouts.lost_quorum))
        return seen < self.quorum

    def _leader_commit(self) -> None:
        voters = self._match if len(self.peers) < self.cluster_size else self.peers
        matches = sorted((self._match.get(peer, 0) for peer in voters if self._counts(peer)), reverse=True)
        if len(matches) < self.quorum:
            return
        candidate = matches[self.quorum - 1]
        if candidate > self.commit and self.term_at(candidate) == self.term:
            self._advance_commit(candidate)

    def _on_append_response(self, ar: AppendEntryResponse, reply: str, *, progress: bool) -> None:
        if not ar.success and ar.term > self.term:
            self._set_term(ar.term, "")
            self._step_down("")
            return
        if self.role is not Role.LEADER:
            return
        self._seen[ar.peer] = self.now()
        if not self.managed and ar.peer not in self.peers and self._membership_index <= self.commit:
            removed_at = self.removed_peers.get(ar.peer)
            if removed_at is None or self.now() - removed_at >= PEER_REMOVE_TIMEOUT:
                self.add_peer(ar.peer)  # raft.go trackPeer (an unmanaged group: the meta group)
        if ar.success:
            # The follower's log holds our entry (same term and index), hence all before it.
            if ar.index <= self.last_index and self.term_at(ar.index) == ar.term:
                if ar.index > self._match.get(ar.peer, 0):
                    self._match[ar.peer] = ar.index
                    before = self.commit
                    self._leader_commit()
                    if self.commit > before and self.role is Role.LEADER:
                        # raft.go processAppendEntryResponse: a heartbeat, so that the
                        # followers apply without waiting for the next message, unless an
                        # append entry goes before take_outgoing (the proposals waiting).
                        self._commit_heartbeat_due = True
            if progress:
                self._continue_catchup(ar.peer, ar.index)
            return
        if reply:
            self._start_catchup(ar.peer, reply, ar.index)

    def _start_catchup(self, peer: str, inbox: str, index: int) -> None:
        start = min(index, self.last_index) + 1
        self._catchups[peer] = _Catchup(inbox, start, start - 1)
        self._send_catchup_batch(peer)

    def _continue_catchup(self, peer: str, index: int) -> None:
        state = self._catchups.get(peer)
        if state is None or index < state.last_sent:
            return
        if state.next_index > self.last_index:
            del self._catchups[peer]  # caught up: our broadcasts carry on from here
            return
        self._send_catchup_batch(peer)

    def _send_catchup_batch(self, peer: str) -> None:
        state = self._catchups[peer]
        if state.next_index <= self.base_index and self.snapshot is not None:
            # The entries are in our snapshot: it goes first, with the peer state (raft.go
            # sendSnapshotToFollower), unacknowledged; the entries after it follow.
            snap = self.snapshot
            entries = (Entry(EntryType.SNAPSHOT, snap.data), Entry(EntryType.PEER_STATE, self.base_peers.encode()))
            self._send(state.inbox, self.append_inbox,
                       AppendEntry(self.id, snap.term, self.commit, snap.term, snap.index, entries, lterm=self.term).encode())
            state.next_index = snap.index + 1
        end = min(self.last_index, state.next_index + CATCHUP_BATCH - 1)
        if state.next_index > end:
            del self._catchups[peer]
            return
        for index in range(state.next_index, end + 1):
            item = self._entry(index)
            ae = AppendEntry(self.id, item.term, self.commit, self.term_at(index - 1), index - 1, item.entries,
                             lterm=self.term)
            self._send(state.inbox, self.progress_inbox, ae.encode())
        state.last_sent = end
        state.next_index = end + 1
