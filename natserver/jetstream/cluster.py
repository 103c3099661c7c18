"""JetStream in a cluster (issue #32): the meta group wired into the server.

With JetStream on in a ``cluster {}``, every server runs a node of nats-server's meta group
(``_meta_``, natserver.nrg over the system account and routes), as jetstream_cluster.go's
setupMetaGroup starts it: bootstrapped with the servers known at start and an expected size
of at least two (the configured routes), its leader adding the peers it hears from. The
committed entries are applied on every server by ``MetaState`` (replication/state.py); a server
that is a member of a stream's or consumer's group runs it with the single-server JetStream of
this package (``JetStream.add_stream``, the consumer API's ``add``) and answers the client.

The API in a cluster is nats-server's (jetstream_api.go): every server receives each request
(every server subscribes to ``$JS.API.>``, its interest crosses the routes), and

- account info, stream names and lists, stream and consumer creates, updates and deletes are
  the meta leader's (``MetaLeader`` turns them into 2.15.1's proposals); the others stay
  silent, or answer 10008 when the meta group has had no leader for ``LEADERLESS_AFTER``;
- a stream's own requests (info, messages, purge, its consumers' info and pulls) are answered
  by the server running it; by the meta leader only when the stream does not exist.
- ``$JS.API.META.LEADER.STEPDOWN`` (system account): the meta leader hands over.
- ``$JSC.SI.<account>.<stream>`` (system account): the server running a stream answers its
  info, as 2.15.1's stream leaders do, for the meta leader's stream list.

A stream with num_replicas > 1 runs its own RAFT group on each of its servers (replica.py:
the group's leader takes the publishes and answers the stream's requests, the followers apply
what it commits and catch up). A consumer with more than one replica runs its own group
(consumer_group_runner.py: its leader runs it, the followers apply its entries); an R1
consumer of a replicated stream is run by the server it is placed on. Users turn it on as with
nats-server: ``server_name``, a ``cluster {}`` and ``jetstream {}`` (see the package README,
"In a cluster", for what is left: fast batches on replicated streams and moves are refused by
name).
"""

from __future__ import annotations

import logging
import os
import random
import struct
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .. import clock
from ..nrg import Group, NrgHost
from ..raft import Committed, EntryType, Mark, NotLeader, SnapshotError, StorageError, node_id
from . import advisories, errors, gotime
from .api import LIST_LIMIT, NAMES_LIMIT, STREAM_LIST_GO_TYPE, STREAM_NAMES_GO_TYPE, Api, decode_names_request
from .apijson import decode_request
from .consumer import ConsumerConfig
from .consumer_api import decode_page_request, pause_request, pause_response
from .consumer_group_runner import ConsumerGroups
from .direct_subs import DIRECT_ACCESS_CHECK, DirectSubscriptions
from .errors import ApiError
from .gojson import decode_str
from .replica import RECONCILE_SUBJECT, StreamReplica
from .replication.consumer_desired import CONSUMER_RECONCILE_SUBJECT, moving_consumer
from .replication.desired import SCALE_UP, desired_of
from .replication.entries import ConsumerAssignment, EntryError, MetaOp, encode_entry
from .replication.leader import MetaLeader, Proposal, delete_response
from .replication.placement import PeerInfo
from .replication.state import ConsumerEvent, Event, MetaState, StreamEvent
from .stream import StreamConfig, check_stream_config, stored_bytes
from .util import dumps, go_quote, is_empty_request, is_json_object_or_array, loads, rfc3339nano, subjects_collide

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["META_GROUP", "JetStreamCluster"]

log = logging.getLogger("natserver")

# jetstream_api.go JSApiStreamRemovePeerRequest and JSApiMetaServerRemoveRequest, decoded
# strictly (unknown fields refused) as 2.15.1's unmarshalRequest decodes them.
_PEER_REMOVE_REQUEST = {"peer": decode_str}
_SERVER_REMOVE_REQUEST = {"peer": decode_str, "peer_id": decode_str}
_T = "io.nats.jetstream.api.v1."
# jetstream_cluster.go defaultMetaGroupName
META_GROUP = "_meta_"
# raft.go lostQuorumInterval: a meta group without a leader this long after its start answers
# 10008 (jetstream_cluster.go isLeaderless).
LEADERLESS_AFTER = 10.0
# raft.go bootstrapRaftNode: the meta group expects at least two peers.
MIN_EXPECTED_PEERS = 2
# jetstream_cluster.go jsClusteredStreamListRequest: how long the meta leader waits for the
# streams' infos ($JSC.SI) before answering with what it has (js.config.RequestTimeout... 2.15.1
# waits 4 s: defaultRequestTimeout in jetstream.go).
LIST_TIMEOUT = 4.0
# jetstream_cluster.go monitorCluster: the meta state is snapshotted (and the log compacted)
# after peer entries, after this many bytes of entries when the last snapshot is older than
# META_MIN_SNAP_DELTA, and every META_COMPACT_INTERVAL when anything was applied since.
META_COMPACT_INTERVAL = 60.0  # compactInterval
META_COMPACT_SIZE = 8 * 1024 * 1024  # compactSizeMin
META_MIN_SNAP_DELTA = 30.0  # minSnapDelta
# jetstream.go: each server sends its accounts' usage to the others every usageTick (1.5 s) on
# $JSC.ARU.<account>.<node id> (jetstream_cluster.go jsaUpdatesPubT), little-endian: memory,
# storage (u64), API requests, errors (u64), further tiers (u32), the tier name's length (u64)
# and name, then per further tier memory, storage, name length (u64) and name.
USAGE_TICK = 1.5
USAGE_SUBJECT = "$JSC.ARU.{account}.{node}"
USAGE_HEAD = struct.Struct("<QQQQIQ")
USAGE_RECORD = struct.Struct("<QQQ")
# stream.go tierName: an R1 stream's usage tier.
R1_TIER = "R1"
# A STATSZ ping when this server becomes the meta leader (events.go: servers answer at once),
# so that placement knows every peer without waiting for their next heartbeat.
STATSZ_PING = "$SYS.REQ.SERVER.PING.STATSZ"
STATSZ_SUBJECT = "$SYS.SERVER.*.STATSZ"
# events.go lameDuckEventSubj: a server in lame duck mode is offline for placement (remoteServerShutdown).
LAME_DUCK_SUBJECT = "$SYS.SERVER.*.LAMEDUCK"
STREAM_INFO_SUBJECT = "$JSC.SI.{account}.{stream}"  # jetstream_cluster.go clusterStreamInfoT
CONSUMER_INFO_SUBJECT = "$JSC.CI.{account}.{stream}.{consumer}"  # clusterConsumerInfoT
META_STEPDOWN = "$JS.API.META.LEADER.STEPDOWN"
# jetstream_api.go JSApiRemoveServer (system account): the meta leader removes a server.
SERVER_REMOVE = "$JS.API.SERVER.REMOVE"
# accounts.go: the replies of requests crossing a service import ("_R_.<prefix>.<n>"), and how
# long such a mapping waits for its answer (DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD, 2 min).
REPLY_PREFIX = b"_R_."
# server.go ClientInfoHdr: the request's client (its account) on an API request in the system account.
CLIENT_INFO_HEADER = b"Nats-Request-Info"
API_PREFIX = b"$JS.API."
# jetstream_cluster.go jsClusteredStreamListRequest / jsClusteredConsumerListRequest: a stream's
# or consumer's info made from its assignment when its servers are all offline has Go's zero state.
_ZERO_TIME = "0001-01-01T00:00:00Z"
OFFLINE_STREAM_STATE = {"messages": 0, "bytes": 0, "first_seq": 0, "first_ts": _ZERO_TIME, "last_seq": 0,
                        "last_ts": _ZERO_TIME, "consumer_count": 0}
OFFLINE_CONSUMER_STATE = {"delivered": {"consumer_seq": 0, "stream_seq": 0}, "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
                          "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0, "num_pending": 0}
# processClusterStreamInfoRequest: a member of a group without a leader answers $JSC.SI this much
# later (a leader, if there is one, first).
LEADERLESS_INFO_DELAY = 0.5
# What stays in the account: the servers running a consumer or a stream listen there.
_IN_ACCOUNT = (b"$JS.API.CONSUMER.MSG.NEXT.", b"$JS.API.DIRECT.GET.")
_DIRECT_GET = b"$JS.API.DIRECT.GET."
REPLY_PREFIX_LEN = 6
RESPONSE_THRESHOLD = 120.0
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# events.go ServerCapability JetStreamEnabled: a peer without it is not placed on.
CAPABILITY_JETSTREAM = 1
# jetstream_cluster.go migrateFallbackCheckInterval: how often a stream group's leader takes the
# next step of a replica change (also at once, when its assignment changes).
MIGRATE_INTERVAL = 0.5


class ClusterEngine(Protocol):
    """What the cluster needs of an engine (``JetStream``, one per JetStream account)."""

    account_name: str | None
    api: Api
    limits: dict
    server: Any
    api_total: int
    api_errors: int
    sourcing: Any  # sourcing.Sourcing (a replicated stream's leader runs its links)

    @property
    def streams(self) -> dict[str, Stream]: ...
    def add_stream(self, config: StreamConfig, created: int | None = None) -> Stream: ...
    def update_stream(self, stream: Stream, new: StreamConfig) -> None: ...
    def delete_stream(self, stream: Stream) -> None: ...
    def respond(self, reply: bytes, payload: bytes, stream: Stream) -> None: ...
    def persist(self, stream: Stream) -> None: ...
    def schedule_fire(self, deadline_ns: int) -> None: ...
    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None, reply: bytes | None = None) -> None: ...
    @property
    def client(self) -> Any: ...  # the account's internal client (advisories)
    @property
    def domain(self) -> str: ...


def _stream_of(tokens: list[bytes]) -> str | None:
    """The stream a stream-scoped API request names (None: not such a request)."""
    n = len(tokens)
    kind = tokens[2]
    op = tokens[3] if n > 3 else b""
    name = b""
    if kind == b"STREAM":
        if op == b"MSG" and n == 6:
            name = tokens[5]
        elif op in (b"LEADER", b"PEER") and n == 6:
            name = tokens[5]
        elif n == 5:
            name = tokens[4]
    elif kind == b"DIRECT" and n >= 5:
        name = tokens[4]
    elif kind == b"CONSUMER" and n >= 5:
        if op in (b"MSG", b"LEADER", b"DURABLE") and n >= 6:
            name = tokens[5]
        else:
            name = tokens[4]
    return name.decode("utf-8", "replace") if name else None


class JetStreamCluster:
    """The meta group of one server and the API's clustered side, for every engine."""

    def __init__(self, server, engines: list[ClusterEngine], nrg: NrgHost, *, rng: random.Random | None = None) -> None:
        self.server = server
        self.options = server.options
        self.engines = {engine.account_name: engine for engine in engines if engine.account_name is not None}
        for engine in self.engines.values():
            engine.api.consumers.on_removed = partial(self._consumer_removed, engine)
        self.nrg = nrg
        self.name = self.options.cluster_name
        self.node_id = nrg.node_id
        self.rng = rng or random.Random()
        self.state = MetaState(self.node_id)
        self.meta = MetaLeader(self.state, self.name, self.rng, clock.now_ns,
                               unique_tag=self.options.jetstream_unique_tag)
        self.group: Group | None = None
        self.started = 0.0
        self.names: dict[str, str] = {self.node_id: server.server_name}  # node id -> server name
        self.peers: dict[str, PeerInfo] = {}  # node id -> what its STATSZ said
        self._lame_ducks: set[str] = set()  # node ids in lame duck mode (offline until a STATSZ with JetStream)
        self._subs: list = []  # (account, subscription) of the system account
        self._stream_subs: dict[tuple[str, str], object] = {}  # ($JSC.SI) by account, stream
        self._consumer_subs: dict[tuple[str, str, str], object] = {}  # ($JSC.CI) by account, stream, consumer
        self.replicas: dict[tuple[str, str], StreamReplica] = {}  # replicated streams by account, stream
        self._removing = False  # removing consumers on the meta group's word (not to propose it back)
        self._nursery: trio.Nursery | None = None
        self._applied_index = 0  # the last meta entry applied (any type)
        self._unsnapshotted = 0  # bytes of entries applied since the last snapshot
        self._snapshot_at = 0.0  # when the last snapshot was taken (clock.monotonic)
        self.snapshots = 0  # snapshots taken
        # The other servers' usage by account and node: (memory, storage, API requests, errors).
        self.usage: dict[str, dict[str, tuple[int, int, int, int]]] = {}
        self._usage_sent: set[str] = set()  # accounts whose usage this server has announced
        # The proposals' replies (_map_reply): subject -> subscription, and their expiries.
        self._reply_prefix = "".join(self.rng.choice(_DIGITS) for _ in range(REPLY_PREFIX_LEN))
        self._reply_seq = 0
        self._pending_replies: dict[str, tuple[ClusterEngine, bytes]] = {}
        self._replies: deque[tuple[float, str]] = deque()
        self.consumer_groups = ConsumerGroups(self)  # replicated consumers (consumer_group_runner.py)
        self.direct = DirectSubscriptions()  # the direct gets this server answers (direct_subs.py)
        self.replicas_reset = 0  # stream replicas reset after a sequence mismatch (resetClusteredState)
        # SERVER.REMOVE's requesters, answered once the peer's removal is applied (peerRemoveReply).
        self._peer_remove_replies: dict[str, bytes] = {}
        self.disabled = False  # removed from the meta group (SERVER.REMOVE): JetStream serves nothing

    # -- life cycle ----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.start()
            nursery.start_soon(self._compactor)
            nursery.start_soon(self._usage_sender)
            nursery.start_soon(self.consumer_groups.run)
            nursery.start_soon(self._migrator)
            nursery.start_soon(self._direct_checker)
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                self.stop()

    def start(self) -> None:
        """setupMetaGroup: bootstrap (the servers known through the routes, at least two
        expected) or recover from the group's files; subscribe to what the cluster serves."""
        folder = os.path.join(self.nrg.groups_dir, META_GROUP)
        bootstrap = not os.path.exists(os.path.join(folder, "peers.idx"))
        known = self._route_peers()
        peers = [self.node_id] + [node_id(name) for name in known]
        expected = max(MIN_EXPECTED_PEERS, len(peers), len(self.options.routes or ()))
        if bootstrap:
            log.info("JetStream cluster bootstrapping")
        else:
            log.info("JetStream cluster recovering state")
        self.started = clock.monotonic()
        group = self.nrg.create_group(META_GROUP, peers, self._apply, managed=False, cluster_size=expected, marks=True)
        group.on_leader_change = self._leader_changed
        self.group = group
        if bootstrap:
            group.campaign()  # (setupMetaGroup: "start campaign early")
        account = self.nrg.account
        self._subs.append((account, account.subscribe("$JS.API.>", self._from_system)))
        reply_space = f"{REPLY_PREFIX.decode()}{self._reply_prefix}.>"
        self._subs.append((account, account.subscribe(reply_space, self._reply_in)))
        self._subs.append((account, account.subscribe(STATSZ_SUBJECT, self._statsz)))
        self._subs.append((account, account.subscribe(USAGE_SUBJECT.format(account="*", node="*"), self._usage)))
        self._subs.append((account, account.subscribe(META_STEPDOWN, self._stepdown)))
        self._subs.append((account, account.subscribe(SERVER_REMOVE, self._server_remove)))
        self._subs.append((account, account.subscribe(RECONCILE_SUBJECT, self._reconcile)))
        self._subs.append((account, account.subscribe(CONSUMER_RECONCILE_SUBJECT, self._reconcile)))
        self._subs.append((account, account.subscribe(LAME_DUCK_SUBJECT, self._lame_duck)))

    def stop(self) -> None:
        self.consumer_groups.stop()
        for replica in list(self.replicas.values()):
            replica.stop()
        self.replicas.clear()
        self.direct.clear()
        for account, sub in self._subs:
            account.unsubscribe(sub)
        self._subs.clear()
        account = self.nrg.account
        for sub in [*self._stream_subs.values(), *self._consumer_subs.values()]:
            account.unsubscribe(sub)
        self._stream_subs.clear()
        self._consumer_subs.clear()
        self._pending_replies.clear()
        self._replies.clear()
        if self.group is not None:
            self.nrg.stop_group(META_GROUP)
            self.group = None

    def spawn(self, fn, *args) -> None:
        """A task of the cluster's (a replica's catch-up)."""
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    def flush(self) -> None:
        self.server.flush_touched()

    def _route_peers(self) -> list[str]:
        cluster = self.server.cluster
        if cluster is None:
            return []
        return sorted({route.remote_name for route in cluster.routes.values() if route.remote_name})

    # -- the meta group's state ----------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.group is not None and self.group.leader

    def leaderless(self) -> bool:
        """isLeaderless: no leader known, for longer than LEADERLESS_AFTER since the start."""
        group = self.group
        if group is None:
            return True
        return not group.node.leader and clock.monotonic() - self.started > LEADERLESS_AFTER

    def stream_alternates(self, account: str, name: str, domain: str) -> list[dict]:
        """jetstream_cluster.go streamAlternates: the stream and the mirrors of it in the meta
        group's assignments (name, domain when there is one, the group's cluster); none when
        the stream has no mirror. (2.15.1 orders them by the requester's cluster and its
        gateways' ones, the assignments of equal weight in map order: here in the table's.)"""
        out = []
        for sa in self.state.streams.get(account, {}).values():
            mirror = sa.config.get("mirror")
            if sa.name == name or (isinstance(mirror, dict) and mirror.get("name") == name):
                alternate = {"name": sa.name}
                if domain:
                    alternate["domain"] = domain
                alternate["cluster"] = sa.group.cluster if sa.group is not None else ""
                out.append(alternate)
        return out if len(out) > 1 else []

    def _leader_changed(self, leader: bool) -> None:
        self.meta.leader_changed()
        self._peer_remove_replies.clear()  # (processLeaderChange: peerRemoveReply cleared)
        if leader:
            log.info("Self is new JetStream cluster metadata leader")
            self._ping_statsz()
            assert self.group is not None  # (its callback)
            advisories.domain_leader_elected(self.system, self.node_id,
                                             advisories.peer_infos(self.group.node, self.names, clock.monotonic()),
                                             self.name, self.server.options.jetstream_domain)

    def _apply(self, committed: list[Committed]) -> None:
        """The meta group's committed entries, in order, on every server (applyMetaEntries);
        then a snapshot if one is due (monitorCluster's rules)."""
        peer_entries = False
        for c in committed:
            if c.mark is not None:
                if c.mark in (Mark.REPLAY_START, Mark.CATCHUP_START):
                    self.state.begin_recovery()
                else:
                    self._act(self.state.end_recovery(), recovering=True)
                continue
            entry = c.entry
            self._applied_index = c.index
            self._unsnapshotted += len(entry.data)
            if entry.type in (EntryType.ADD_PEER, EntryType.REMOVE_PEER):
                peer_entries = True
            if entry.type == EntryType.REMOVE_PEER and not self.state.recovering:
                self._peer_removed(entry.data.decode("utf-8", "replace"))
            if entry.type not in (EntryType.NORMAL, EntryType.SNAPSHOT):
                continue
            recovering = self.state.recovering
            try:
                events = self.state.apply(c.index, entry)
            except EntryError as exc:
                log.error("JetStream cluster: a meta entry did not decode (%s): the meta layer stops", exc)
                raise
            self.meta.applied(entry)
            self._act(events, recovering=recovering)
        if self.state.recovering:
            return
        if peer_entries or (self._unsnapshotted > META_COMPACT_SIZE
                            and clock.monotonic() - self._snapshot_at > META_MIN_SNAP_DELTA):
            self._snapshot()

    def _snapshot(self) -> None:
        """The meta state as 2.15.1 snapshots it (encodeMetaSnapshot), the log compacted."""
        group = self.group
        if group is None or group.stopped or self.state.recovering or not self._applied_index:
            return
        try:
            group.node.install_snapshot(self.state.snapshot(), self._applied_index)
        except SnapshotError:
            return  # (nothing new since the last one, or a catch-up reads the log)
        except StorageError as exc:
            log.error("JetStream cluster: the meta snapshot failed: %s", exc)
            return
        self._unsnapshotted = 0
        self._snapshot_at = clock.monotonic()
        self.snapshots += 1

    async def _compactor(self) -> None:
        while True:
            await trio.sleep(META_COMPACT_INTERVAL)
            if self._unsnapshotted:
                self._snapshot()

    def _act(self, events: list[Event], *, recovering: bool) -> None:
        for event in events:
            engine = self.engines.get(event.account)
            if engine is None:
                continue  # (an account without JetStream on this server)
            try:
                if isinstance(event, StreamEvent):
                    self._stream_event(engine, event, recovering)
                else:
                    self._consumer_event(engine, event, recovering)
            except Exception:  # one asset's failure must not stop the meta layer
                log.exception("JetStream cluster: applying %s of %s failed", event.kind, event.assignment.name)

    def _answer(self, engine: ClusterEngine, reply: str, response: dict | bytes, *, error: bool = False) -> None:
        """A member's answer to a proposal's client: published in the system account, as
        nats-server sends its API responses (sendInternalAccountMsg with no account): the
        reply is the ``_R_`` subject the proposing server mapped the client's reply to."""
        engine.api_total += 1
        if error:
            engine.api_errors += 1
        body = response if isinstance(response, bytes) else dumps(response)
        self.nrg.account.publish(reply.encode(), None, None, body)

    def _answer_removal(self, engine: ClusterEngine, event: Event) -> None:
        """A member answers a delete's requester (replication.leader.delete_response)."""
        answer = delete_response(event)
        if answer is not None:
            self._answer(engine, answer[0], answer[1])

    # -- streams -------------------------------------------------------------------------------

    def _stream_event(self, engine: ClusterEngine, event: StreamEvent, recovering: bool) -> None:
        sa = event.assignment
        local = engine.streams.get(sa.name)
        reply = "" if recovering else sa.reply
        if event.kind == "removed":
            if local is not None:
                self._remove_stream(engine, local)
            if event.member and reply:
                self._answer_removal(engine, event)
            return
        if not event.member:
            if local is not None:  # (re-assigned elsewhere: this copy goes)
                self._remove_stream(engine, local)
            return
        rtype = _T + ("stream_update_response" if event.kind == "updated" else "stream_create_response")
        try:
            cfg = StreamConfig.from_json(sa.config)
            created = local is None
            if local is None:
                local = engine.add_stream(cfg, created=sa.created_ns)
            elif local.cfg != cfg:
                if local.cfg.num_replicas != cfg.num_replicas:  # (a single server's check refuses replicas)
                    local.cfg = local.cfg.copy(num_replicas=cfg.num_replicas)
                was = local.cfg.retention
                engine.update_stream(local, cfg)
                if was != cfg.retention and local.replicated:
                    # (to interest: what the replicated consumers acked already goes, proposed
                    # by the leader, as a new leader's checkInterestState proposes it)
                    self.check_interest(engine, local)
            self._serve_info(engine, local)  # (also a stream recovered from disk at startup)
            replica = self._group_of(engine, local, sa, new=created)
            self.serve_direct(engine, local)
        except ApiError as exc:
            if reply:
                self._answer(engine, reply, {"type": rtype, "error": exc.to_json()}, error=True)
            return
        if not reply:
            return
        stream = local
        if event.kind == "updated":
            def build() -> dict:
                return {"type": rtype, **stream.info_json(cluster=True)}
        else:
            def build() -> dict:
                response = {"type": rtype, **stream.info_json(domain=False, cluster=True, created=True)}
                if created:
                    response["did_create"] = True
                return response
        if replica is not None and not replica.leading:
            # (jetstream_cluster.go: a replicated stream's leader answers; a new group's, once
            # elected: whoever that is keeps the answer until then)
            if not replica.group.node.leader:
                replica.pending_answer = (reply, build)
            return
        self._answer(engine, reply, build())

    def _group_of(self, engine: ClusterEngine, stream: Stream, sa, *, new: bool = False) -> StreamReplica | None:
        """The stream's RAFT group on this server, as its assignment has it (processClusterUpdateStream):
        one when it has several peers or desired state (a replica change: desired.py), none for a
        group of one; a renamed group (a scale from or to one replica) replaces the old one. The
        group's leader takes the change's next step at once. ``new``: the stream was just created
        here (a member added by a scale up waits for the leader's data as an observer)."""
        key = (engine.account_name or "", stream.name)
        group = sa.group
        desired = desired_of(group)
        old = self.replicas.get(key)
        if old is not None and (group is None or old.group_name != group.name):
            self.replicas.pop(key, None)
            old.stop(remove=True)
        if group is None or (len(group.peers or ()) <= 1 and desired is None):
            if stream.replicated:  # (scaled down to one: the stream's own again, stream.go's R1)
                stream.replicated = False
                stream.replica = None
                stream.unsubscribe()
                stream.subscribe()
                if stream.links:  # (its links run here now, from where its store is)
                    engine.sourcing.lead_changed(stream, True)
            return None
        if not stream.replicated:  # (an R1 stream being scaled up: its group's leader subscribes)
            stream.unsubscribe()
            stream.replicated = True
        replica = self._replicate(engine, stream, sa, new=new)
        replica.desired = desired
        replica.assigned = list(group.peers or ())
        replica.replicas = stream.cfg.num_replicas
        replica.migrate()
        return replica

    def _replicate(self, engine: ClusterEngine, stream: Stream, sa, *, new: bool = False,
                   campaign: bool = True) -> StreamReplica:
        """A replicated stream's group on this server (processClusterCreateStream): started, or
        resumed from its files; the preferred peer campaigns at once (a group of one: its peer)."""
        key = (engine.account_name or "", stream.name)
        replica = self.replicas.get(key)
        if replica is not None and not replica.stopped:
            return replica
        group = sa.group
        if group is None or not group.peers:
            raise errors.stream_create("a replicated stream's assignment has no group")
        scale_up = (new and bool(group.extra.get(SCALE_UP))
                    and not os.path.exists(os.path.join(self.nrg.groups_dir, group.name)))
        replica = StreamReplica(self, engine, stream, group.name, list(group.peers), sa.sync, scale_up=scale_up)
        self.replicas[key] = replica
        preferred = group.preferred or (group.peers[0] if len(group.peers) == 1 else "")
        if campaign and preferred == self.node_id and replica.group.node.term == 0 and not scale_up:
            replica.group.campaign()
        return replica

    def reset_replica(self, replica: StreamReplica) -> None:
        self.spawn(self._reset_replica, replica)

    async def _reset_replica(self, replica: StreamReplica) -> None:
        """resetClusteredState (a stream's replica out of line with its group's entries): it
        steps down, its group's files go, and it starts again as a new member, the stream's
        messages kept, caught up by the leader (its log, or its snapshot and $JSC.SYNC)."""
        stream = replica.stream
        engine = next((e for e in self.engines.values() if e is replica.engine), None)
        if engine is None:
            return
        account = engine.account_name or ""
        key = (account, stream.name)
        if self.replicas.get(key) is not replica or replica.stopped:
            return
        if replica.leading:
            try:
                replica.group.step_down()
            except (NotLeader, StorageError):
                pass
        self.replicas.pop(key, None)
        self.direct.drop(account, stream.name)  # (mset.stop: a follower joins again once current)
        replica.stop(remove=True)
        sa = self.state.stream(account, stream.name)
        if sa is None or sa.group is None or not sa.group.is_member(self.node_id) or \
                engine.streams.get(stream.name) is not stream:
            return
        log.warning("Resetting stream cluster state for '%s > %s'", account or "$G", stream.name)
        again = self._replicate(engine, stream, sa, campaign=False)
        again.desired = desired_of(sa.group)
        again.assigned = list(sa.group.peers or ())
        again.mismatches = replica.mismatches
        self.replicas_reset += 1
        self.serve_direct(engine, stream)

    async def _migrator(self) -> None:
        """monitorStream's migration timer: each led group with a replica change in progress
        takes its next step (desired.py)."""
        while True:
            await trio.sleep(MIGRATE_INTERVAL)
            for replica in list(self.replicas.values()):
                if replica.leading and (replica.desired is not None or replica.migration is not None):
                    replica.migrate()
            self.consumer_groups.migrate_all()  # (monitorConsumer's migration timer)

    def _reconcile(self, subject, reply, headers, body) -> None:
        """reconcileDesiredStreamAssignment and reconcileDesiredConsumerAssignment (the meta
        leader): a stream or consumer group leader's step."""
        if not self.is_leader:
            return
        try:
            update = loads(bytes(body))
            account, stream = str(update["account"]), str(update["stream"])
            consumer = str(update["consumer"]) if "consumer" in update else None
        except (ValueError, KeyError, TypeError):
            return
        if not isinstance(update, dict):
            return
        if consumer is None:
            for proposal in self.meta.stream_reconcile(account, stream, update):
                self._propose(proposal)
            return
        one = self.meta.consumer_reconcile(account, stream, consumer, update)
        if one is not None:
            self._propose(one)

    def moving_consumer(self, account: str, stream: str, wanted: list[str]) -> str:
        sa = self.state.stream(account, stream)
        return moving_consumer(sa, wanted) if sa is not None else ""

    def serve_direct(self, engine: ClusterEngine, stream: Stream) -> None:
        """Whether this server answers ``stream``'s direct gets (direct_subs.py): an R1 stream's
        server does, a replica once it leads or is current enough (and from then on)."""
        if self.disabled:
            return
        account = engine.account_name or ""
        replica = self.replicas.get((account, stream.name))
        if stream.replicated:
            serving = bool(self.direct.serving(account, stream.name))
            serve = replica is not None and replica.direct_ready(serving)
        else:
            serve = True
        self.direct.sync(engine, stream, serve)

    async def _direct_checker(self) -> None:
        """monitorStream's direct access ticker: followers join the direct gets once current."""
        while True:
            await trio.sleep(DIRECT_ACCESS_CHECK)
            for (account, _), replica in list(self.replicas.items()):
                engine = self.engines.get(account)
                if engine is not None and not replica.stopped:
                    self.serve_direct(engine, replica.stream)

    def has_group_consumers(self, account: str, stream: str) -> bool:
        return self.consumer_groups.has_consumers(account, stream)

    def assigned_consumers(self, account: str, stream: str) -> int:
        sa = self.state.stream(account, stream)
        return len(sa.consumers) if sa is not None else 0

    def check_interest(self, engine: ClusterEngine, stream: Stream) -> None:
        self.consumer_groups.check_interest(engine, stream)

    def _remove_stream(self, engine: ClusterEngine, stream: Stream) -> None:
        self.direct.drop(engine.account_name or "", stream.name)
        self.consumer_groups.stream_removed(engine.account_name or "", stream.name)
        replica = self.replicas.pop((engine.account_name or "", stream.name), None)
        if replica is not None:
            if replica.leading:  # (removeStream: hand over first, the others need not wait for an election)
                try:
                    replica.group.step_down()
                except (NotLeader, StorageError):
                    pass
            replica.stop(remove=True)
        for consumer in list(stream.consumers.values()):
            self._drop_consumer(engine, consumer)
        sub = self._stream_subs.pop((engine.account_name or "", stream.name), None)
        if sub is not None:
            self.nrg.account.unsubscribe(sub)
        engine.delete_stream(stream)

    def _serve_info(self, engine: ClusterEngine, stream: Stream) -> None:
        """$JSC.SI.<account>.<stream>: this server runs the stream, it answers its info."""
        account = engine.account_name or ""
        subject = STREAM_INFO_SUBJECT.format(account=account, stream=stream.name)

        def answer(subject, reply, headers, body, engine=engine, name=stream.name) -> None:
            local = engine.streams.get(name)
            if not reply or local is None:
                return
            replica = self.replicas.get((account, name)) if local.replica is not None else None
            if replica is None or replica.leading:
                self.nrg.account.publish(reply, None, None, dumps(local.info_json(dynamic=False, cluster=True)))
            elif self._group_leaderless(replica):
                # (processClusterStreamInfoRequest: a group without a leader for a while, every
                # member answers, a while later, so that a leader would come first)
                self.spawn(self._late_info, engine, name, bytes(reply))

        key = (account, stream.name)
        if key not in self._stream_subs:
            self._stream_subs[key] = self.nrg.account.subscribe(subject, answer)

    def _group_leaderless(self, replica: StreamReplica) -> bool:
        """isGroupLeaderless: a group of this server's without a leader, JetStream running for
        longer than LEADERLESS_AFTER (its members answer what the leader would)."""
        return not replica.group.node.leader and clock.monotonic() - self.started > LEADERLESS_AFTER

    async def _late_info(self, engine: ClusterEngine, name: str, reply: bytes) -> None:
        await trio.sleep(LEADERLESS_INFO_DELAY)
        local = engine.streams.get(name)
        if local is not None and not self.disabled:
            self.nrg.account.publish(reply, None, None, dumps(local.info_json(dynamic=False, cluster=True)))
            self.server.flush_touched()

    # -- consumers -----------------------------------------------------------------------------

    def _consumer_event(self, engine: ClusterEngine, event: ConsumerEvent, recovering: bool) -> None:
        if self.consumer_groups.consumer_event(engine, event, recovering):
            return
        ca = event.assignment
        stream = engine.streams.get(ca.stream)
        reply = "" if recovering else ca.reply
        consumers = engine.api.consumers
        local = stream.consumers.get(ca.name) if stream is not None else None
        if event.kind == "removed":
            if local is not None and event.known:
                self._drop_consumer(engine, local)
            if event.member and reply:
                self._answer_removal(engine, event)
            return
        if not event.member or stream is None:
            if local is not None:
                self._drop_consumer(engine, local)
            return
        from_json = _consumer_config(ca)
        if local is not None and from_json.pause_until != local.cfg.pause_until:
            consumers.pause_applied(local, from_json.pause_until)  # (the meta leader's pause: answered)
        try:
            consumer = consumers.add(stream, from_json, ca.name)
            consumer.created = ca.created_ns or consumer.created
        except ApiError as exc:
            if reply:
                self._answer(engine, reply, {"type": _T + "consumer_create_response", "error": exc.to_json()},
                             error=True)
            return
        if reply:
            self._answer(engine, reply, {"type": _T + "consumer_create_response", **consumers.info_of(consumer)})
        consumers.created(consumer, None)
        self._serve_consumer_info(engine, ca.stream, ca.name)

    def _drop_consumer(self, engine: ClusterEngine, consumer) -> None:
        """Remove a consumer on the meta group's word (its removal is not proposed back)."""
        self._removing = True
        try:
            engine.api.consumers.remove(consumer)
        finally:
            self._removing = False

    def _serve_consumer_info(self, engine: ClusterEngine, stream: str, name: str) -> None:
        """$JSC.CI.<account>.<stream>.<consumer>: this server runs the consumer, it answers its info."""
        account = engine.account_name or ""
        key = (account, stream, name)
        if key in self._consumer_subs:
            return

        def answer(subject, reply, headers, body) -> None:
            local = engine.streams.get(stream)
            consumer = local.consumers.get(name) if local is not None else None
            if reply and consumer is not None:
                self.system.publish(reply, None, None, dumps(engine.api.consumers.info_of(consumer)))

        subject = CONSUMER_INFO_SUBJECT.format(account=account, stream=stream, consumer=name)
        self._consumer_subs[key] = self.system.subscribe(subject, answer)

    def _consumer_removed(self, engine: ClusterEngine, consumer) -> None:
        """A consumer this server ran is gone: its $JSC.CI goes; gone by itself (inactive),
        its removal is proposed, as consumer.go deleteNotActive forwards it to the meta leader."""
        account = engine.account_name or ""
        sub = self._consumer_subs.pop((account, consumer.stream.name, consumer.name), None)
        if sub is not None:
            self.system.unsubscribe(sub)
        if self._removing:
            return
        ca = self.state.consumer(account, consumer.stream.name, consumer.name)
        if ca is not None and self.group is not None:
            try:
                self.group.propose(encode_entry(MetaOp.REMOVE_CONSUMER, ConsumerAssignment(
                    ca.client, ca.created, ca.name, ca.stream, ca.config, ca.group)))
            except NotLeader:
                pass

    # -- the API -------------------------------------------------------------------------------

    @property
    def system(self):
        """The system account, where the API's requests and answers cross the cluster."""
        return self.nrg.account

    def from_account(self, engine: ClusterEngine, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """A request on ``$JS.API.>`` in ``engine``'s account, from a client of this server
        (the subscription's interest is local): into the system account, as nats-server's
        accounts import the API from it (a ``Nats-Request-Info`` header naming the account,
        the reply mapped to a ``_R_`` subject of the system account)."""
        if subject.startswith(_DIRECT_GET):
            # (a stream's servers answer in their queue group, direct_subs.py: when none took
            # it here or across a route, the requester gets no responders, as from 2.15.1)
            return False
        if subject.startswith(_IN_ACCOUNT):
            return True  # (in_account's)
        mapped = None
        if reply:
            mapped = self._next_reply()
            self._map_reply(engine, mapped, reply)
        info = dumps({"acc": engine.account_name, "server": self.server.server_name, "cluster": self.name})
        head = bytes(hdr)[:-2] if hdr else b"NATS/1.0\r\n"
        headers = head + CLIENT_INFO_HEADER + b": " + info + b"\r\n\r\n"
        self.system.publish(bytes(subject), mapped.encode() if mapped else None, headers, bytes(payload))
        return True

    def in_account(self, engine: ClusterEngine, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """A pull request or a direct get, in the account (these subscriptions' interest
        crosses the routes): the server running the stream answers."""
        tokens = subject.split(b".")
        if self.consumer_groups.route(engine, tokens, subject, reply, hdr, payload):
            return True
        name = _stream_of(tokens)
        stream = engine.streams.get(name) if name is not None else None
        here = self._r1_consumer(engine, tokens, stream) if stream is not None and stream.replicated else None
        if here is not None:  # (an R1 consumer of a replicated stream: its server answers)
            return engine.api.handle(subject, reply, hdr, payload) if here else True
        if stream is not None and (stream.replica is None or stream.replica.leading):
            return engine.api.handle(subject, reply, hdr, payload)
        return True

    def _from_system(self, subject, reply, hdr, payload) -> None:
        """An API request in the system account (from this or any server, natserver or
        nats-server): the account is the one its Nats-Request-Info header names."""
        subject = bytes(subject)
        if subject.startswith(_IN_ACCOUNT):
            return
        account = _request_account(hdr)
        engine = self.engines.get(account) if account else None
        if engine is None:
            return
        self.handle(engine, subject, reply, hdr, payload)
        self.server.flush_touched()

    def handle(self, engine: ClusterEngine, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """A request on ``$JS.API.>`` in ``engine``'s account, as a clustered nats-server
        takes it; the local API answers what this server answers as a single server would."""
        if self.disabled:
            return True
        tokens = subject.split(b".")
        n = len(tokens)
        if n < 3 or tokens[0] != b"$JS" or tokens[1] != b"API":
            return True
        kind, op = tokens[2], tokens[3] if n > 3 else b""
        meta_request = (
            (kind == b"INFO" and n == 3)
            or (kind == b"STREAM" and ((n == 4 and op in (b"NAMES", b"LIST"))
                                       or (n == 5 and op in (b"CREATE", b"UPDATE", b"DELETE", b"RESTORE"))
                                       or (n == 6 and op == b"PEER" and tokens[4] == b"REMOVE")))
            or (kind == b"CONSUMER" and ((op == b"CREATE" and n >= 5) or (op == b"DURABLE" and n == 7)
                                         or (op in (b"DELETE", b"PAUSE") and n == 6)
                                         or (op in (b"NAMES", b"LIST") and n == 5)))
        )
        if meta_request and kind == b"CONSUMER" and op == b"CREATE" and _direct_consumer(payload):
            # jsConsumerCreateRequest: a direct consumer (a mirror's or a source's, ack none)
            # is not the meta group's: the server running the stream makes it, unreplicated.
            meta_request = False
        if meta_request:
            if self.leaderless():
                if reply:
                    rtype = _response_type(tokens)
                    engine.api._fail(reply, rtype, errors.cluster_not_available())
                return True
            if not self.is_leader:
                return True
            try:
                self._meta_request(engine, tokens, subject, reply, payload)
            except Exception:  # a bug must not take the publisher's connection down
                log.exception("JetStream API request on %r failed", subject)
            return True
        name = _stream_of(tokens)
        if kind == b"CONSUMER" and op == b"INFO" and n == 6 and name and self.is_leader:
            ca = self.state.consumer(engine.account_name or "", name, tokens[5].decode("utf-8", "replace"))
            if ca is not None and self._all_offline(ca.group):  # (jsConsumerInfoRequest: the meta leader says so)
                engine.api._fail(reply, _T + "consumer_info_response", errors.consumer_offline())
                return True
        if self.consumer_groups.route(engine, tokens, subject, reply, hdr, payload):
            return True
        local_stream = engine.streams.get(name) if name is not None else None
        if kind == b"CONSUMER" and local_stream is not None and local_stream.replicated:
            here = self._r1_consumer(engine, tokens, local_stream)
            if here is None and op == b"INFO" and n == 6:
                self._unknown_consumer_info(engine, local_stream.name, tokens[5], reply)
                return True
            if here is not None:
                if here and op == b"LEADER":  # (a group of one: nothing to hand over)
                    engine.api._send(reply, {"type": _T + "consumer_leader_stepdown_response", "success": True})
                elif here:
                    engine.api.handle(subject, reply, hdr, payload)
                return True
        if op == b"LEADER" and ((kind == b"STREAM" and n == 6) or (kind == b"CONSUMER" and n == 7)) and name:
            self._leader_stepdown(engine, tokens, name, reply, payload)
            return True
        if name is None:
            return engine.api.handle(subject, reply, hdr, payload)
        local = engine.streams.get(name)
        if local is not None:
            if local.replicated and (local.replica is None or not local.replica.leading):
                replica = self.replicas.get((engine.account_name or "", local.name))
                if kind == b"STREAM" and op == b"INFO" and n == 5 and replica is not None and \
                        self._group_leaderless(replica):
                    return engine.api.handle(subject, reply, hdr, payload)  # (jsStreamInfoRequest: any member)
                return True  # (a replicated stream's leader answers)
            return engine.api.handle(subject, reply, hdr, payload)
        if self.is_leader:
            sa = self.meta.stream(engine.account_name or "", name)
            if sa is None:
                return engine.api.handle(subject, reply, hdr, payload)  # (its "not found")
            if kind == b"STREAM" and op == b"INFO" and n == 5 and self._all_offline(sa.group):
                engine.api._fail(reply, _T + "stream_info_response", errors.stream_offline(),
                                 total=0, offset=0, limit=0)
        return True

    def _r1_consumer(self, engine: ClusterEngine, tokens: list[bytes], stream: Stream) -> bool | None:
        """A consumer's own request (info, pull, step-down, pause, unpin) on a replicated
        stream, for a consumer without a group of its own (R1, placed on one of the stream's
        servers, which runs it over its replica): True when it runs here (this server
        answers), False when it runs elsewhere (silent), None when it is not such a consumer
        (the stream's leader answers, "not found")."""
        n = len(tokens)
        op = tokens[3] if n > 3 else b""
        if op in (b"MSG", b"LEADER") and n == 7:
            name = tokens[6]
        elif op in (b"INFO", b"PAUSE", b"UNPIN") and n == 6:
            name = tokens[5]
        else:
            return None
        consumer = name.decode("utf-8", "replace")
        if consumer in stream.consumers:
            return True
        if self.state.consumer(engine.account_name or "", stream.name, consumer) is not None:
            return False
        return None

    def _offline_cluster_info(self, group) -> dict:
        """offlineClusterInfo: the group's servers this one knows, all offline."""
        replicas = [{"name": self.names[peer], "current": False, "offline": True, "active": 0, "peer": peer}
                    for peer in group.peers if peer in self.names]
        return {"name": self.name, "raft_group": group.name, **({"replicas": replicas} if replicas else {})}

    def peer_offline(self, peer: str) -> bool:
        """nodeInfo.offline as this server knows it: in lame duck mode, or no route to its
        server (natserver sends no shutdown event, so a route lost is a server gone)."""
        if peer == self.node_id:
            return False
        return peer in self._lame_ducks or peer not in {node_id(name) for name in self._route_peers()}

    def _unknown_consumer_info(self, engine: ClusterEngine, stream: str, name: bytes, reply) -> None:
        """CONSUMER.INFO of a consumer this server neither runs nor has applied (2.15.1
        jsConsumerInfoRequest, ``ca == nil``): only the meta leader answers, "not found" unless
        it has the consumer's assignment applied or in flight; the others stay silent. (The
        stream's leader answering from its own meta state raced a new consumer's create: the
        create is answered by the server running the consumer once it applied the assignment,
        before a follower of the meta group heard of the commit.)"""
        if not self.is_leader or not reply:
            return
        if self.meta.consumer(engine.account_name or "", stream, name.decode("utf-8", "replace")) is None:
            engine.api._fail(reply, _T + "consumer_info_response", errors.consumer_not_found())

    def _all_offline(self, group) -> bool:
        """allPeersOffline: no server of the group reachable (no route to it, not this one)."""
        if group is None or not group.peers:
            return False
        reachable = {node_id(name) for name in self._route_peers()} | {self.node_id}
        return not any(peer in reachable for peer in group.peers)

    def _next_reply(self) -> str:
        """The reply a proposal carries: a ``_R_.<prefix>.<n>`` subject of the system account
        (nats-server's response service import for its JS API: a member answers through it)."""
        self._reply_seq += 1
        return f"{REPLY_PREFIX.decode()}{self._reply_prefix}.{self._reply_seq}"

    def _map_reply(self, engine: ClusterEngine, subject: str, reply: bytes) -> None:
        """Forward the one answer on ``subject`` (system account) to the client's ``reply``
        in its account; the mapping goes after the answer or RESPONSE_THRESHOLD. One
        subscription (``_R_.<prefix>.>``) serves them all, as nats-server's reply prefix does:
        no interest changes per request."""
        now = clock.monotonic()
        while self._replies and self._replies[0][0] <= now:
            _, old = self._replies.popleft()
            self._pending_replies.pop(old, None)
        self._pending_replies[subject] = (engine, bytes(reply))
        self._replies.append((now + RESPONSE_THRESHOLD, subject))

    def _reply_in(self, subject, reply, headers, body) -> None:
        pending = self._pending_replies.pop(bytes(subject).decode("utf-8", "replace"), None)
        if pending is not None:
            engine, client_reply = pending
            engine.send(client_reply, bytes(body), bytes(headers) if headers else None)

    def stepdown_preferred(self, node: Any, payload: bytes) -> str:
        """jetstream_api.go getStepDownPreferredPlacement: the peer a step-down request's
        ``placement`` names (``preferred``: a server of the group, not the leader), or one chosen
        at random among the group's other online servers in its ``cluster`` with all its
        ``tags``; "" without a placement (raft.go picks any healthy peer). Raises ApiError
        (10005, 2.15.1's texts; bad JSON: 10025)."""
        if not is_json_object_or_array(payload) or is_empty_request(payload):
            return ""
        try:
            request = loads(payload)
        except ValueError:
            raise errors.invalid_json() from None
        placement = request.get("placement") if isinstance(request, dict) else None
        if not isinstance(placement, dict):
            return ""
        preferred = placement.get("preferred") or ""
        if preferred:
            peer = next((p for p in node.peers if self.names.get(p) == preferred), "")
            if peer and peer == node.id:
                raise errors.cluster_no_peers(f"preferred server {go_quote(preferred)} is already leader")
            if not peer:
                raise errors.cluster_no_peers(f"preferred server {go_quote(preferred)} not known")
            return peer
        cluster, tags = placement.get("cluster") or "", placement.get("tags") or []
        candidates = []
        for peer in node.peers:
            info = self.peers.get(peer)
            if peer == node.id or info is None or info.offline:
                continue
            if (cluster and info.cluster != cluster) or not all(tag in info.tags for tag in tags):
                continue
            candidates.append(peer)
        if not candidates:
            raise errors.cluster_no_peers("no replacement peer connected")
        return self.rng.choice(sorted(candidates))

    def _leader_stepdown(self, engine: ClusterEngine, tokens: list[bytes], name: str, reply, payload: bytes) -> None:
        """jsStreamLeaderStepDownRequest / jsConsumerLeaderStepDownRequest: a replicated
        stream's leader hands over (raft.go StepDown) and answers success, its followers stay
        silent; for R1 assets the server running the stream answers success (a group of one
        has no node to step down); the meta leader answers "not found" for a stream it does
        not have."""
        consumer = tokens[6].decode("utf-8", "replace") if tokens[2] == b"CONSUMER" else None
        rtype = _T + ("consumer_leader_stepdown_response" if consumer is not None else "stream_leader_stepdown_response")
        stream = engine.streams.get(name)
        if stream is None:
            if self.is_leader and self.meta.stream(engine.account_name or "", name) is None:
                engine.api._fail(reply, rtype, errors.stream_not_found())
            return
        if stream.replicated:
            replica = stream.replica
            if replica is None or not replica.leading:
                return  # (its leader answers)
            if consumer is not None:
                engine.api._fail(reply, rtype, errors.consumer_not_found())
                return
            try:
                replica.step_down(self.stepdown_preferred(replica.raft_node, payload))
            except ApiError as exc:
                engine.api._fail(reply, rtype, exc)
                return
            except NotLeader as exc:
                engine.api._fail(reply, rtype, errors.raft_general(str(exc)))
                return
            engine.api._send(reply, {"type": rtype, "success": True})
            return
        if consumer is not None and consumer not in stream.consumers:
            engine.api._fail(reply, rtype, errors.consumer_not_found())
            return
        engine.api._send(reply, {"type": rtype, "success": True})

    def _client(self, engine: ClusterEngine) -> dict:
        """The ClientInfo a proposal carries (the request's account and this cluster)."""
        return {"acc": engine.account_name, "server": self.server.server_name, "cluster": self.name}

    def _meta_request(self, engine: ClusterEngine, tokens: list[bytes], subject: bytes, reply, payload: bytes) -> None:
        api = engine.api
        n = len(tokens)
        kind, op = tokens[2], tokens[3] if n > 3 else b""
        account = engine.account_name or ""
        if kind == b"INFO":
            self._account_info(engine, reply)
            return
        if kind == b"STREAM" and op == b"NAMES":
            self._stream_names(engine, reply, payload)
            return
        if kind == b"STREAM" and op == b"LIST":
            self._stream_list(engine, reply, payload)
            return
        if kind == b"CONSUMER" and op in (b"NAMES", b"LIST"):
            self._consumer_names(engine, tokens[4].decode("utf-8", "replace"), reply, payload, full=op == b"LIST")
            return
        if kind == b"STREAM" and op == b"PEER":
            self._stream_peer_remove(engine, tokens[5].decode("utf-8", "replace"), reply, payload)
            return
        rtype = _response_type(tokens)
        text = [t.decode("utf-8", "replace") for t in tokens]
        self._refresh_peers()
        client = self._client(engine)
        subj = subject.decode("utf-8", "replace")
        reply_text = bytes(reply).decode("utf-8", "replace") if reply else ""
        try:
            proposal: Proposal
            if kind == b"STREAM":
                name = text[4]
                if op == b"CREATE":
                    cfg = api.decode_stream_create(name, payload)
                    _check_replicated(cfg)
                    proposal = self.meta.stream_create(client, account, subj, reply_text, cfg, engine.limits)
                elif op == b"UPDATE":
                    cfg = api.decode_stream_update(payload)
                    check_stream_config(cfg, {}, engine.limits)  # (its refusals come first, as 2.15.1's)
                    if cfg.name != name:
                        raise errors.stream_mismatch()
                    _check_replicated(cfg)
                    proposal = self.meta.stream_update(client, account, subj, reply_text, cfg, engine.limits)
                elif op == b"DELETE":
                    if not is_empty_request(payload):
                        raise errors.not_empty_request()
                    proposal = self.meta.stream_delete(client, account, subj, reply_text, name)
                else:  # RESTORE
                    raise errors.stream_restore("natserver does not restore streams in a cluster yet")
            else:
                stream = text[4] if op != b"DURABLE" else text[5]
                if op == b"PAUSE":
                    until = pause_request(payload)
                    proposal = self.meta.consumer_pause(client, account, subj, stream, text[5], until)
                    self._propose(proposal)
                    api._send(reply, pause_response(until, clock.now_ns()))
                    return
                if op == b"DELETE":
                    if not is_empty_request(payload):
                        raise errors.not_empty_request()
                    proposal = self.meta.consumer_delete(client, account, subj, reply_text, stream, text[5])
                else:
                    if op == b"DURABLE":
                        cfg_c, action = api.consumers.decode_create(stream, payload, name=text[6], durable=True)
                        cname = text[6]
                    elif n == 5:
                        cfg_c, action = api.consumers.decode_create(stream, payload)
                        cname = ""
                    else:
                        cname = text[5]
                        cfg_c, action = api.consumers.decode_create(stream, payload, name=cname,
                                                                    filter=".".join(text[6:]))
                    sa_c = self.meta.stream(account, stream)
                    if sa_c is not None:
                        stream_replicas = int(sa_c.config.get("num_replicas") or 1)
                        if cfg_c.num_replicas > stream_replicas:
                            raise errors.consumer_replicas_exceeds_stream()
                        if sa_c.config.get("retention", "limits") != "limits" and \
                                cfg_c.num_replicas not in (0, stream_replicas):
                            raise errors.consumer_replicas_should_match()  # (consumer.go checkConsumerCfg)
                    proposal = self.meta.consumer_create(
                        client, account, subj, reply_text, stream, cfg_c, cname or cfg_c.durable_name or cfg_c.name,
                        action, engine.limits.get("max_ack_pending", -1))
        except ApiError as exc:
            if op == b"PAUSE":
                api._fail(reply, rtype, exc, paused=False, pause_until=gotime.ZERO)
            else:
                api._fail(reply, rtype, exc)
            return
        self._propose(proposal)

    def _propose(self, proposal: Proposal) -> None:
        group = self.group
        if group is None:
            return
        try:
            group.propose(proposal.data)
        except NotLeader:
            self.meta.leader_changed()  # (lost it meanwhile: the client retries)

    # -- account info, names and lists ----------------------------------------------------------

    def _account_info(self, engine: ClusterEngine, reply) -> None:
        """jsAccountInfoRequest on the meta leader: the account's streams and consumers from
        the assignments; memory, storage and API counts this server's plus the others' (their
        $JSC.ARU usage updates)."""
        api = engine.api
        account = engine.account_name or ""
        streams = self.state.streams.get(account, {})
        remote = [sum(values) for values in zip((0, 0, 0, 0), *self.usage.get(account, {}).values())]
        reserved_memory = reserved_storage = 0
        for sa in streams.values():  # (jetstream.go reservedStorage)
            max_bytes = int(sa.config.get("max_bytes") or 0)
            if max_bytes > 0:
                if sa.config.get("storage") == "memory":
                    reserved_memory += max_bytes
                else:
                    reserved_storage += max_bytes
        api.account_info(reply, streams=len(streams), consumers=sum(len(sa.consumers) for sa in streams.values()),
                         remote=(remote[0], remote[1], remote[2], remote[3]),
                         reservations=(reserved_memory, reserved_storage))

    # -- usage ---------------------------------------------------------------------------------

    async def _usage_sender(self) -> None:
        """jsAccount.sendClusterUsageUpdate, every USAGE_TICK: each account's usage here."""
        while True:
            await trio.sleep(USAGE_TICK)
            if self.disabled:
                continue  # (removed from the cluster: 2.15.1's JetStream is off, it sends nothing)
            for account, engine in self.engines.items():
                if not engine.streams and account not in self._usage_sent:
                    continue  # (nats-server: nothing to send before the account's first stream)
                self._usage_sent.add(account)
                memory, storage = stored_bytes(engine.streams.values())
                tier = R1_TIER.encode()
                body = USAGE_HEAD.pack(memory, storage, engine.api_total, engine.api_errors, 0, len(tier)) + tier
                self.system.publish(USAGE_SUBJECT.format(account=account, node=self.node_id).encode(), None, None, body)
            self.server.flush_touched()

    def _usage(self, subject, reply, headers, body) -> None:
        """jsAccount.remoteUpdateUsage: another server's usage of an account (its tiers summed)."""
        tokens = bytes(subject).decode("utf-8", "replace").split(".")
        if len(tokens) != 4 or tokens[3] == self.node_id:
            return
        account, node = tokens[2], tokens[3]
        group = self.group
        if group is not None and node in group.node.removed_peers and node not in group.node.peers:
            return  # (a server removed from the meta group: not counted)
        data = bytes(body)
        if len(data) < USAGE_HEAD.size:
            return
        memory, storage, api_total, api_errors, more, length = USAGE_HEAD.unpack_from(data)
        offset = USAGE_HEAD.size + length
        for _ in range(more):
            if len(data) < offset + USAGE_RECORD.size:
                break
            tier_memory, tier_storage, length = USAGE_RECORD.unpack_from(data, offset)
            memory, storage = memory + tier_memory, storage + tier_storage
            offset += USAGE_RECORD.size + length
        self.usage.setdefault(account, {})[node] = (memory, storage, api_total, api_errors)

    def _names(self, engine: ClusterEngine, payload: bytes, rtype: str, reply, go_type: str,
               no_streams: list | None) -> tuple[list[str], int] | None:
        try:
            offset, filter = decode_names_request(payload, go_type)
        except ApiError as exc:
            engine.api._fail(reply, rtype, exc, total=0, offset=0, limit=0, streams=no_streams)
            return None
        names = []
        for name, sa in self.state.streams.get(engine.account_name or "", {}).items():
            if not filter or any(subjects_collide(filter, s) for s in sa.config.get("subjects") or ()):
                names.append(name)
        names.sort()
        return names, min(max(offset, 0), len(names))

    def _stream_names(self, engine: ClusterEngine, reply, payload: bytes) -> None:
        rtype = _T + "stream_names_response"
        found = self._names(engine, payload, rtype, reply, STREAM_NAMES_GO_TYPE, None)
        if found is None:
            return
        names, offset = found
        page = names[offset:offset + NAMES_LIMIT]
        engine.api._send(reply, {"type": rtype, "total": len(names), "offset": offset, "limit": NAMES_LIMIT,
                                 "streams": page or None})

    def _stream_list(self, engine: ClusterEngine, reply, payload: bytes) -> None:
        """jsClusteredStreamListRequest: each stream's info asked of the server running it
        ($JSC.SI), gathered for up to LIST_TIMEOUT; the streams that did not answer are
        listed as ``missing``."""
        rtype = _T + "stream_list_response"
        found = self._names(engine, payload, rtype, reply, STREAM_LIST_GO_TYPE, [])
        if found is None:
            return
        names, offset = found
        page = names[offset:offset + LIST_LIMIT]
        account = engine.account_name or ""
        offline = {}
        for name in page:
            sa = self.state.stream(account, name)
            if sa is not None and self._all_offline(sa.group):
                offline[name] = {"config": sa.config, "created": sa.created, "state": dict(OFFLINE_STREAM_STATE),
                                 "cluster": self._offline_cluster_info(sa.group), "ts": rfc3339nano(clock.now_ns())}
        subjects = {name: STREAM_INFO_SUBJECT.format(account=account, stream=name) for name in page
                    if name not in offline}
        self._gather(engine, reply, rtype, "streams", page, subjects, len(names), offset,
                     lambda info: info["config"]["name"], offline)

    def _consumer_names(self, engine: ClusterEngine, stream: str, reply, payload: bytes, *, full: bool) -> None:
        """jsConsumerNamesRequest / jsClusteredConsumerListRequest on the meta leader: the
        stream's consumers from the assignments; their infos asked of the servers running
        them ($JSC.CI), the silent ones listed as ``missing``."""
        rtype = _T + ("consumer_list_response" if full else "consumer_names_response")
        try:
            offset = decode_page_request(payload)
            sa = self.state.stream(engine.account_name or "", stream)
            if sa is None:
                raise errors.stream_not_found()
        except ApiError as exc:
            engine.api._fail(reply, rtype, exc, total=0, offset=0, limit=0, consumers=[])
            return
        account = engine.account_name or ""
        names = sorted(sa.consumers)
        offset = min(max(offset, 0), len(names))
        if not full:
            page = names[offset:offset + NAMES_LIMIT]
            engine.api._send(reply, {"type": rtype, "total": len(names), "offset": offset, "limit": NAMES_LIMIT,
                                     "consumers": page or None})
            return
        page = names[offset:offset + LIST_LIMIT]
        offline = {}
        for name in page:
            ca = sa.consumers[name]
            if self._all_offline(ca.group):
                offline[name] = {"stream_name": "", "name": "", "created": ca.created, "config": ca.config,
                                 **OFFLINE_CONSUMER_STATE, "cluster": self._offline_cluster_info(ca.group),
                                 "ts": rfc3339nano(clock.now_ns())}
        subjects = {name: CONSUMER_INFO_SUBJECT.format(account=account, stream=stream, consumer=name)
                    for name in page if name not in offline}
        self._gather(engine, reply, rtype, "consumers", page, subjects, len(names), offset, lambda info: info["name"],
                     offline)

    def _gather(self, engine: ClusterEngine, reply, rtype: str, key: str, page: list[str], subjects: dict[str, str],
                total: int, offset: int, name_of, offline: dict[str, dict]) -> None:
        """The infos of ``page`` asked on ``subjects`` (by name); ``offline``: the infos made
        from the assignments of those whose servers are all offline (listed as missing)."""
        if self._nursery is not None:
            self._nursery.start_soon(self._gather_task, engine, reply, rtype, key, page, subjects, total, offset,
                                     name_of, offline)

    async def _gather_task(self, engine: ClusterEngine, reply, rtype: str, key: str, page: list[str],
                           subjects: dict[str, str], total: int, offset: int, name_of,
                           offline: dict[str, dict]) -> None:
        account = self.system
        inbox = "_INBOX.jsc." + "".join(self.rng.choice(_DIGITS) for _ in range(16))
        infos: dict[str, dict] = dict(offline)
        done = trio.Event()
        awaited = set(subjects)

        def collect(subject, reply_, headers, body) -> None:
            try:
                info = loads(bytes(body))
                name = name_of(info)
            except (ValueError, KeyError, TypeError):
                return
            if name in awaited:
                infos[name] = info
                if awaited <= infos.keys():
                    done.set()

        sub = account.subscribe(inbox + ".*", collect)
        try:
            for i, subject in enumerate(subjects.values()):
                account.publish(subject.encode(), f"{inbox}.{i}".encode(), None, b"")
            self.server.flush_touched()
            if subjects:
                with trio.move_on_after(LIST_TIMEOUT):
                    await done.wait()
        finally:
            account.unsubscribe(sub)
        limit = LIST_LIMIT
        response: dict = {"type": rtype, "total": total, "offset": offset, "limit": limit,
                          key: [infos[name] for name in page if name in infos]}
        missing = [name for name in page if name in offline] + [name for name in page if name not in infos]
        if missing:
            response["missing"] = missing
        engine.api._send(reply, response)
        self.server.flush_touched()

    # -- step-down, peers ----------------------------------------------------------------------

    def _stepdown(self, subject, reply, headers, body) -> None:
        """jsLeaderStepDownRequest (system account only): the meta leader hands over."""
        group = self.group
        if group is None or not group.leader:
            return
        response: dict = {"type": _T + "meta_leader_stepdown_response"}
        try:
            group.step_down()
            response["success"] = True
        except NotLeader as exc:
            response["error"] = errors.raft_general(str(exc)).to_json()
        if reply:
            self.nrg.account.publish(reply, None, None, dumps(response))

    def _stream_peer_remove(self, engine: ClusterEngine, name: str, reply, payload: bytes) -> None:
        """jsStreamRemovePeerRequest on the meta leader: ``{"peer": <server name or peer id>}``;
        2.15.1's errors (bad request, invalid JSON, stream not found, peer not a member); a
        member replaced through the group's desired state (MetaLeader.stream_peer_remove),
        answered once proposed, as 2.15.1 answers it."""
        rtype = _T + "stream_remove_peer_response"
        api = engine.api
        if is_empty_request(payload):
            api._fail(reply, rtype, errors.bad_request())
            return
        try:
            peer = decode_request(payload, _PEER_REMOVE_REQUEST, "server.JSApiStreamRemovePeerRequest").get("peer", "")
        except ApiError as exc:
            api._fail(reply, rtype, exc)
            return
        if not peer:
            api._fail(reply, rtype, errors.bad_request())
            return
        sa = self.meta.stream(engine.account_name or "", name)
        if sa is None:
            api._fail(reply, rtype, errors.stream_not_found())
            return
        members = set(sa.group.peers or ()) if sa.group is not None else set()
        desired = sa.group.extra.get("desired") if sa.group is not None else None
        if isinstance(desired, dict):
            members.update(str(p) for p in desired.get("peers") or ())
        if node_id(peer) not in members and peer not in members:  # (a server name, else a peer id)
            api._fail(reply, rtype, errors.cluster_peer_not_member())
            return
        member = node_id(peer) if node_id(peer) in members else peer
        try:
            proposal = self.meta.stream_peer_remove(engine.account_name or "", name, member)
        except ApiError as exc:
            api._fail(reply, rtype, exc)
            return
        self._propose(proposal)
        api._send(reply, {"type": rtype, "success": True})

    def _server_remove(self, subject, reply, headers, body) -> None:
        """jsLeaderServerRemoveRequest (system account, the meta leader): ``{"peer": <server
        name>}`` or ``{"peer_id": <id>}``; the meta group's EntryRemovePeer proposed, answered
        once applied (_peer_removed: its streams are then moved, their consumers with them, as
        STREAM.PEER.REMOVE moves them)."""
        group = self.group
        if group is None or not group.leader:
            return
        account = _request_account(headers)
        if account and account != self.system.name:
            return  # (only the system account's)
        rtype = _T + "meta_server_remove_response"

        def fail(error: ApiError) -> None:
            if reply:
                self.system.publish(reply, None, None, dumps({"type": rtype, "error": error.to_json()}))

        payload = bytes(body)
        if is_empty_request(payload):
            fail(errors.bad_request())
            return
        try:
            request = decode_request(payload, _SERVER_REMOVE_REQUEST, "server.JSApiMetaServerRemoveRequest")
        except ApiError as exc:
            fail(exc)
            return
        name, wanted = request.get("peer", ""), request.get("peer_id", "")
        if self._peer_remove_replies:
            fail(errors.cluster_member_change_inflight())
            return
        found = ""
        for peer in group.node.peers:
            if (wanted and peer == wanted) or (not wanted and self.names.get(peer) == name):
                found = peer
                break
        if not found:
            fail(errors.cluster_server_not_member())
            return
        try:
            group.remove_peer(found)
        except NotLeader as exc:
            if "membership change" in str(exc):
                fail(errors.cluster_member_change_inflight())
            else:
                fail(errors.raft_general(str(exc)))
            return
        except StorageError as exc:
            fail(errors.raft_general(str(exc)))
            return
        self._peer_remove_replies[found] = bytes(reply) if reply else b""

    def _peer_removed(self, peer: str) -> None:
        """A meta EntryRemovePeer applied (processRemovePeer): this server's own removal is
        logged as 2.15.1's (which disables its JetStream); the meta leader answers the
        SERVER.REMOVE that asked for it."""
        if peer == self.node_id:
            log.error("JetStream being DISABLED, our server was removed from the cluster")
            self._disable()
            return
        for usage in self.usage.values():  # (its usage is no longer the account's)
            usage.pop(peer, None)
        reply = self._peer_remove_replies.pop(peer, None)
        if reply and self.is_leader:
            body = dumps({"type": _T + "meta_server_remove_response", "success": True})
            self.system.publish(reply, None, None, body)
        self._refresh_peers()
        if not self.is_leader:
            return
        for sa in self.state.all_streams():  # (removePeerFromStreamLocked, remove: true)
            desired = desired_of(sa.group)
            if sa.group is None or not (sa.group.is_member(peer) or (desired and peer in (desired.get("peers") or ()))):
                continue
            try:
                self._propose(self.meta.stream_peer_remove(sa.account, sa.name, peer, require_replicas=False))
            except ApiError as exc:
                log.warning("JetStream cluster: stream %s not moved off a removed server: %s", sa.name,
                            exc.description)

    def _disable(self) -> None:
        """This server was removed from the meta group (2.15.1 disables its JetStream): its
        replicated streams' groups stop and no stream takes publishes here any more; the meta
        leader moves them elsewhere."""
        self.disabled = True
        for replica in list(self.replicas.values()):
            replica.stop()
        self.replicas.clear()
        self.direct.clear()
        for engine in self.engines.values():
            for stream in engine.streams.values():
                stream.unsubscribe()

    def _ping_statsz(self) -> None:
        account = self.nrg.account
        inbox = "_INBOX.jsc.statsz." + "".join(self.rng.choice("0123456789abcdef") for _ in range(12))
        sub = account.subscribe(inbox, self._statsz)
        self._subs.append((account, sub))
        account.publish(STATSZ_PING.encode(), inbox.encode(), None, b"")

    def _statsz(self, subject, reply, headers, body) -> None:
        """A server's STATSZ (events.go remoteServerUpdate): its name, cluster, tags and
        JetStream limits and usage, for placement (nodeToInfo)."""
        try:
            message = loads(bytes(body))
            server = message["server"]
            name = server["name"]
        except (ValueError, KeyError, TypeError):
            return
        peer = node_id(name)
        self.names[peer] = name
        if peer not in self.peers and peer != self.node_id:
            self._campaign_if_never_led()
            system = getattr(self.server, "system", None)
            if system is not None:
                system.announce()  # (the new peer learns of this one now)
        statsz = message.get("statsz") or {}
        jetstream = statsz.get("jetstream") or {}
        config, stats = jetstream.get("config"), jetstream.get("stats")
        enabled = bool(int(server.get("flags") or 0) & CAPABILITY_JETSTREAM)
        if enabled:
            self._lame_ducks.discard(peer)
        self.peers[peer] = PeerInfo(
            peer, name, server.get("cluster", ""), list(server.get("tags") or ()), offline=False,
            reported=enabled and isinstance(config, dict) and isinstance(stats, dict),
            max_memory=int((config or {}).get("max_memory") or 0), max_store=int((config or {}).get("max_storage") or 0),
            memory=int((stats or {}).get("memory") or 0), store=int((stats or {}).get("storage") or 0),
            reserved_memory=int((stats or {}).get("reserved_memory") or 0),
            reserved_store=int((stats or {}).get("reserved_storage") or 0))
        self._refresh_peers()

    def _campaign_if_never_led(self) -> None:
        """A server heard of for the first time while the meta group, bootstrapped empty, has
        never had a leader: stand for election within the campaign timeout (100-800 ms). The
        bootstrap campaign (setupMetaGroup's) went to nobody when this server started before
        its peers; nats-server's servers start within milliseconds of each other, a Python
        server's start takes most of a second, and without this the first election waited for
        the election timeout (4-9 s). Raft's safety does not depend on when a node campaigns."""
        group = self.group
        if group is None:
            return
        node = group.node
        if not node.leader and node.last_index == 0 and not node.removed:
            group.campaign()

    def _lame_duck(self, subject, reply, headers, body) -> None:
        """events.go remoteServerShutdown for a LAMEDUCK event: that server is offline for
        placement (its ServerInfo names it)."""
        try:
            name = loads(bytes(body))["name"]
        except (ValueError, KeyError, TypeError):
            return
        self._lame_ducks.add(node_id(str(name)))
        self._refresh_peers()

    def _refresh_peers(self) -> None:
        """The meta leader's peers for placement: the meta group's members it heard of, those
        this server has no route to offline (placed on last: natserver sends no shutdown event,
        a route's loss is what it sees of a server going)."""
        group = self.group
        members = set(group.node.peers) if group is not None else set()
        reachable = {node_id(name) for name in self._route_peers()} | {self.node_id}
        for peer, info in self.peers.items():
            info.offline = peer not in reachable or peer in self._lame_ducks
        self.meta.peers = [info for peer, info in self.peers.items() if peer in members]

    # -- monitoring ----------------------------------------------------------------------------

    def meta_json(self) -> dict:
        """/jsz's meta_cluster (jsz.go MetaClusterInfo)."""
        group = self.group
        out: dict = {"name": self.name}
        if group is None:
            return out
        node = group.node
        for name in self._route_peers():  # (the servers' names: their STATSZ, or the routes')
            self.names.setdefault(node_id(name), name)
        if node.leader:
            out["leader"] = self.names.get(node.leader, node.leader)
            out["peer"] = node.leader
        replicas = []
        now = clock.monotonic()
        for peer in node.peers:
            if peer == self.node_id:
                continue
            entry: dict = {"name": self.names.get(peer, peer)}
            if group.leader:
                seen = node._seen.get(peer)
                active = now - seen if seen is not None else None
                entry["current"] = active is not None and active < LEADERLESS_AFTER
                entry["active"] = int(active * 1e9) if active is not None else 0
            else:
                entry["current"] = peer == node.leader
                entry["active"] = 0
            entry["peer"] = peer
            replicas.append(entry)
        if replicas:
            out["replicas"] = replicas
        out["cluster_size"] = node.cluster_size
        out["quorum_needed"] = node.quorum
        out["pending"] = self.meta.pending if group.leader else 0
        return out


def _check_replicated(cfg: StreamConfig) -> None:
    """What a replicated stream does not do yet in natserver (refused by name)."""
    if cfg.num_replicas <= 1:
        return
    if cfg.allow_batched:
        raise errors.stream_create("natserver does not support allow_batched on replicated streams yet")


def _consumer_config(ca: ConsumerAssignment) -> ConsumerConfig:
    return ConsumerConfig.from_json(ca.config)


def _direct_consumer(payload: bytes) -> bool:
    """Whether a CONSUMER.CREATE request asks for a direct consumer (``config.direct``)."""
    if b'"direct"' not in payload:
        return False
    try:
        request = loads(payload)
    except ValueError:
        return False
    config = request.get("config") if isinstance(request, dict) else None
    return isinstance(config, dict) and config.get("direct") is True


def _request_account(hdr) -> str:
    """The account a Nats-Request-Info header names (its ``svc``, else its ``acc``)."""
    if not hdr:
        return ""
    for line in bytes(hdr).split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == CLIENT_INFO_HEADER.lower():
            try:
                info = loads(value.strip())
            except ValueError:
                return ""
            if isinstance(info, dict):
                return str(info.get("svc") or info.get("acc") or "")
    return ""


def _response_type(tokens: list[bytes]) -> str:
    """The response type of a meta request (for its errors)."""
    kind = tokens[2]
    op = tokens[3] if len(tokens) > 3 else b""
    if kind == b"INFO":
        return _T + "account_info_response"
    if kind == b"STREAM":
        return _T + {b"NAMES": "stream_names_response", b"LIST": "stream_list_response",
                     b"CREATE": "stream_create_response", b"UPDATE": "stream_update_response",
                     b"DELETE": "stream_delete_response", b"RESTORE": "stream_restore_response",
                     b"PEER": "stream_remove_peer_response"}.get(op, "")
    if op == b"DELETE":
        return _T + "consumer_delete_response"
    if op == b"PAUSE":
        return _T + "consumer_pause_response"
    if op in (b"NAMES", b"LIST"):
        return _T + ("consumer_names_response" if op == b"NAMES" else "consumer_list_response")
    return _T + "consumer_create_response"
