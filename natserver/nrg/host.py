"""NrgHost: nats-server's RAFT groups run inside a server, over its system account.

Each group is a sans-IO :class:`natserver.raft.Node` with its :class:`natserver.raft.FileStorage`
under ``<store_dir>/jetstream/<system account>/_js_/<group>/`` (jetstream_cluster.go's
createRaftGroup layout). The host keeps the node's subscriptions (internal subscriptions of the
system account, so their interest reaches every route with RS+ as nats-server's do) in step
with ``node.subscriptions``, publishes what the node sends in the system account (to local
subscribers and over the routes), and hands committed entries to the group's apply callback.

One task serves every group: it takes the received messages in batches (a burst of ``$NRG``
traffic yields to the other tasks between batches), ticks the nodes whose deadline passed
(``natserver.clock.monotonic``, which tests move with trio's MockClock), and sleeps until the
next message or deadline.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from collections import deque
from collections.abc import Callable
from functools import partial

import trio

from .. import clock
from ..protocol import const
from ..raft import Committed, FileStorage, Node, NotLeader, Role, Storage, StorageError, Timeouts, node_id
from ..routing.accounts import system_account_name

# Everything in __all__ is the package's public API.
__all__ = ["MAX_BATCH", "MAX_PENDING_BYTES", "Apply", "Group", "NrgHost", "run_nrg"]

log = logging.getLogger("natserver")

# Received messages handled before the task yields to the others (nats-server's raft goroutines
# pop their whole ipQueue; one thread serves every client here, so a pass is bounded).
MAX_BATCH = 256
# Payload bytes received and not yet handled before more is dropped (a client connection's
# max_pending, const.go MAX_PENDING_SIZE): RAFT recovers a lost message by its retries,
# heartbeats and catch-up, as it does a message lost on a route.
MAX_PENDING_BYTES = const.MAX_PENDING_SIZE
# jetstream_cluster.go defaultStoreDirName: the groups' folder under the system account's.
GROUPS_DIR = "_js_"
# The JetStream store's folder under store_dir (as natserver.jetstream and nats-server name it),
# and store_dir's default (nats-server: the system temp dir's "nats").
JETSTREAM_DIR = "jetstream"
DEFAULT_STORE_PARENT = "nats"

# raft.go runAsLeader: an append entry carries the proposals queued meanwhile, up to these.
MAX_APPEND_BYTES = 256 * 1024  # maxBatch
MAX_APPEND_ENTRIES = 4096  # maxEntries
Apply = Callable[[list[Committed]], None]
# raft.go's timeouts (election 4-9 s, heartbeat 1 s...): natserver.raft's.
DEFAULT_TIMEOUTS = Timeouts()


class Group:
    """One RAFT group this server is a peer of: its node, subscriptions and apply callback."""

    def __init__(self, host: NrgHost, name: str, node: Node, apply: Apply, folder: str) -> None:
        self.host = host
        self.name = name
        self.node = node
        self.apply = apply
        self.folder = folder
        self.subs: dict[str, object] = {}  # subject -> internal subscription
        self.stopped = False
        self.queued: list[bytes] = []  # propose_soon's proposals, for the end of the pass
        self.error: BaseException | None = None  # why it stopped by itself (a write, the apply)
        # Called with True or False when this server's node becomes or stops being the leader
        # (after the pass that changed it: its entries applied first).
        self.on_leader_change: Callable[[bool], None] | None = None
        self._was_leader = False

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else self.node.role.name
        return f"<Group {self.name} {state} term {self.node.term} commit {self.node.commit}>"

    @property
    def leader(self) -> bool:
        return not self.stopped and self.node.role is Role.LEADER

    def propose(self, data: bytes) -> None:
        """Propose from any peer (raft.go Propose as leader, ForwardProposal otherwise):
        committed entries reach every peer's apply callback, in the same order."""
        if self.stopped:
            raise NotLeader("the group is stopped")
        try:
            self.node.forward(data)  # (a failed write raises StorageError, and stops the group)
        finally:
            self.host._changed(self)

    def propose_soon(self, data: bytes) -> None:
        """As leader (NotLeader otherwise): proposed at the end of this pass together with the
        others made in it, as one append entry (raft.go runAsLeader drains its proposal queue
        into append entries of up to MAX_APPEND_BYTES or MAX_APPEND_ENTRIES)."""
        if self.stopped or self.node.role is not Role.LEADER:
            raise NotLeader(self.node.leader)
        self.queued.append(data)
        self.host._changed(self)

    def propose_many(self, items: list[bytes]) -> None:
        """As leader (NotLeader otherwise), several entries as one append entry (raft.go
        ProposeMulti: one index, committed together)."""
        if self.stopped:
            raise NotLeader("the group is stopped")
        try:
            self.node.propose_many(items)
        finally:
            self.host._changed(self)

    def step_down(self, preferred: str = "") -> str:
        """raft.go StepDown: hand the leadership over (see Node.step_down)."""
        try:
            return self.node.step_down(preferred)
        finally:
            self.host._changed(self)

    def campaign(self) -> None:
        self.node.campaign()
        self.host._changed(self)

    def add_peer(self, peer: str) -> None:
        """raft.go ProposeAddPeer as leader (NotLeader otherwise, or while another membership
        change is in flight): an EntryAddPeer."""
        if self.stopped:
            raise NotLeader("the group is stopped")
        try:
            self.node.add_peer(peer)
        finally:
            self.host._changed(self)

    def remove_peer(self, peer: str) -> None:
        """raft.go ProposeRemovePeer as leader (NotLeader otherwise, or while another
        membership change is in flight): an EntryRemovePeer."""
        if self.stopped:
            raise NotLeader("the group is stopped")
        try:
            self.node.remove_peer(peer)
        finally:
            self.host._changed(self)


class NrgHost:
    """The RAFT groups of one server. Start it with ``await nursery.start(run_nrg, server)``."""

    def __init__(self, server, store_dir: str = "", *, rng: random.Random | None = None,
                 timeouts: Timeouts = DEFAULT_TIMEOUTS, sync_always: bool = True, sync_interval: float = 0.0) -> None:
        self.server = server
        # The logs' fsync (jetstream_cluster.go createRaftGroup: the server's SyncAlways and
        # SyncInterval, as its streams'): every pass before anything it sends leaves, or every
        # ``sync_interval`` seconds (0: at a group's stop only). A write is in the kernel's
        # hands either way before it is answered: a killed process loses nothing.
        self.sync_always = sync_always
        self.sync_interval = sync_interval
        self._synced_at = clock.monotonic()
        name = system_account_name(server.options, server)
        account = server.accounts.get(name) if server.accounts is not None else None
        if account is None and server.accounts is not None and not server.options.no_system_account:
            # $SYS with no configured users exists all the same (as natserver.system makes it,
            # which may start after the host: JetStream starts first)
            account = server.accounts.add_empty(name)
        if account is None:
            raise RuntimeError("RAFT groups need the system account (no_system_account is set)")
        self.account = account
        base = store_dir or server.options.store_dir or os.path.join(tempfile.gettempdir(), DEFAULT_STORE_PARENT)
        self.groups_dir = os.path.join(base, JETSTREAM_DIR, account.name, GROUPS_DIR)
        self.node_id = node_id(server.server_name)
        self.rng = rng or random.Random()
        self.timeouts = timeouts
        self.groups: dict[str, Group] = {}
        self._inbox: deque[tuple[Group, str, str, bytes]] = deque()
        self._pending_bytes = 0
        self._dirty: set[Group] = set()  # groups changed from outside the loop (proposals)
        self._wake = trio.Event()
        self.received = 0  # messages handed to nodes
        self.dropped = 0  # messages dropped (MAX_PENDING_BYTES)
        self.passes = 0  # loop passes (each handles at most MAX_BATCH messages)

    # -- groups -----------------------------------------------------------------------------

    def create_group(self, name: str, peers: list[str], apply: Apply, *, observer: bool = False,
                     storage: Storage | None = None, managed: bool = True, cluster_size: int = 0,
                     marks: bool = False) -> Group:
        """Start this server's node of group ``name`` (its peers: node ids, ours included),
        from its files if it ran before. ``storage`` replaces the group's FileStorage (tests).
        ``managed=False`` (the meta group): its leader adds the peers it hears from;
        ``cluster_size``: the size expected when more peers than ``peers`` will come (raft.go
        bootstrapRaftNode); ``marks``: replay and catch-up markers in the committed stream."""
        if name in self.groups:
            raise ValueError(f"RAFT group {name} already exists")
        folder = os.path.join(self.groups_dir, name)
        if storage is None:  # appends synced once per pass (_service), not once each
            storage = FileStorage(folder, deferred_sync=True)
        node = Node(self.node_id, name, peers, storage, observer=observer, rng=self.rng,
                    timeouts=self.timeouts, managed=managed, cluster_size=cluster_size, marks=marks)
        group = Group(self, name, node, apply, folder)
        self.groups[name] = group
        self._changed(group)
        return group

    def stop_group(self, name: str) -> None:
        """Stop the node of group ``name`` (its files stay: create_group resumes from them)."""
        group = self.groups.pop(name, None)
        if group is not None:
            group.node.sync()
            self._stop(group)

    def transfer_leaders(self) -> bool:
        """raft.go transferRaftLeaders (lame duck mode): every group this server leads hands
        over, and every node becomes an observer, so that none leads here again before the
        server stops. Whether any group handed over."""
        transferred = False
        for group in list(self.groups.values()):
            if group.leader:
                try:
                    group.step_down()
                    transferred = True
                except (NotLeader, StorageError):
                    pass
            group.node.observer = True
            self._changed(group)
        return transferred

    def _stop(self, group: Group) -> None:
        group.stopped = True
        self._dirty.discard(group)
        for sub in group.subs.values():
            self.account.unsubscribe(sub)
        group.subs.clear()

    def _fail(self, group: Group, error: BaseException, what: str) -> None:
        """A group that cannot go on: logged (raft.go's "Critical write error") and stopped."""
        log.error("RAFT [%s - %s] %s: %s", self.node_id, group.name, what, error)
        group.error = error
        if self.groups.get(group.name) is group:
            del self.groups[group.name]
        self._stop(group)

    def _changed(self, group: Group) -> None:
        """The node has something to send, or new subscriptions or deadlines: served on the
        loop's next pass (proposals made meanwhile share its one sync)."""
        self._dirty.add(group)
        self._wake.set()

    # -- messages in --------------------------------------------------------------------------

    def _received(self, group: Group, subject, reply, headers, body) -> None:
        """An internal subscription's callback (inside the publisher's read pass): queued."""
        if self._pending_bytes + len(body) > MAX_PENDING_BYTES:
            self.dropped += 1
            return
        payload = bytes(body)
        self._pending_bytes += len(payload)
        self._inbox.append((group, subject.decode(), reply.decode() if reply else "", payload))
        self._wake.set()

    def _propose_queued(self, group: Group) -> None:
        """propose_soon's proposals of this pass, in order, as few append entries as the
        limits allow (dropped if the leadership went meanwhile: unanswered, as a lost one)."""
        queued, group.queued = group.queued, []
        start = size = 0
        try:
            for i, data in enumerate(queued):
                size += len(data) + 1
                if size >= MAX_APPEND_BYTES or i + 1 - start >= MAX_APPEND_ENTRIES:
                    group.node.propose_many(queued[start:i + 1])
                    start, size = i + 1, 0
            if start < len(queued):
                group.node.propose_many(queued[start:])
        except (NotLeader, StorageError):
            pass  # (a write error stops the group in _service)

    def _sync_subscriptions(self, group: Group) -> None:
        wanted = group.node.subscriptions
        for subject in [s for s in group.subs if s not in wanted]:
            self.account.unsubscribe(group.subs.pop(subject))
        for subject in wanted:
            if subject not in group.subs:
                group.subs[subject] = self.account.subscribe(subject, partial(self._received, group))

    def _service(self, group: Group) -> None:
        """Subscriptions first (an inbox must exist before it is asked for), then what the
        node sends, then what it committed."""
        if group.stopped:
            return
        node = group.node
        if group.queued:
            self._propose_queued(group)
        if self.sync_always:
            node.sync()  # the pass's appends on disk (one fsync) before any answer leaves
        if node.write_error is not None:
            self._fail(group, node.write_error, "Critical write error")
            return
        self._sync_subscriptions(group)
        for message in node.take_outgoing():
            self.account.publish(message.subject.encode(), message.reply.encode() if message.reply else None,
                                 None, message.payload)
        committed = node.take_committed()
        if committed:
            try:
                group.apply(committed)
            except Exception as exc:  # noqa: BLE001 - the upper layer's failure stops its group only
                self._fail(group, exc, "Apply failed")
                return
        leader = node.role is Role.LEADER
        if leader != group._was_leader:
            group._was_leader = leader
            if group.on_leader_change is not None:
                try:
                    group.on_leader_change(leader)
                except Exception as exc:  # noqa: BLE001 - as an apply callback's
                    self._fail(group, exc, "Leader change failed")

    # -- the loop ------------------------------------------------------------------------------

    def _next_deadline(self) -> float:
        return min([self._sync_due(), *(g.node.next_deadline() for g in self.groups.values())])

    def _sync_due(self) -> float:
        """When the periodic fsync is due (never: every pass syncs, or sync_interval 0)."""
        if self.sync_always or not self.sync_interval:
            return float("inf")
        return self._synced_at + self.sync_interval

    def _sync_all(self, now: float) -> None:
        """The periodic fsync of every group's log (sync_interval)."""
        self._synced_at = now
        for group in list(self.groups.values()):
            group.node.sync()
            if group.node.write_error is not None:
                self._fail(group, group.node.write_error, "Critical write error")

    def _pass(self) -> None:
        """One bounded pass: at most MAX_BATCH received messages, the due timers, and what
        the touched nodes send and committed."""
        self.passes += 1
        touched: dict[Group, None] = {}
        inbox = self._inbox
        for _ in range(min(MAX_BATCH, len(inbox))):
            group, subject, reply, payload = inbox.popleft()
            self._pending_bytes -= len(payload)
            if group.stopped:
                continue
            self.received += 1
            group.node.receive(subject, reply, payload)
            touched[group] = None
        now = clock.monotonic()
        if now >= self._sync_due():
            self._sync_all(now)
        for group in list(self.groups.values()):
            if now >= group.node.next_deadline():
                group.node.tick()
                touched[group] = None
        for group in self._dirty:
            touched[group] = None
        self._dirty.clear()
        for group in touched:
            self._service(group)
        self.server.flush_touched()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve every group until cancelled; then their subscriptions go (files stay)."""
        task_status.started(self)
        try:
            while True:
                if not self._inbox and not self._dirty:
                    wait = self._next_deadline() - clock.monotonic()
                    if wait > 0:
                        with trio.move_on_after(wait):
                            await self._wake.wait()
                self._wake = trio.Event()
                self._pass()
                await trio.lowlevel.checkpoint()
        finally:
            for group in list(self.groups.values()):
                group.node.sync()  # (what the sync interval had not made durable yet)
                self._stop(group)
            self.groups.clear()


async def run_nrg(server, store_dir: str = "", *, rng: random.Random | None = None, timeouts: Timeouts = DEFAULT_TIMEOUTS,
                  sync_always: bool = True, sync_interval: float = 0.0,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The server's RAFT host, run until cancelled: ``host = await nursery.start(run_nrg, server)``."""
    host = NrgHost(server, store_dir, rng=rng, timeouts=timeouts, sync_always=sync_always, sync_interval=sync_interval)
    await host.run(task_status=task_status)
