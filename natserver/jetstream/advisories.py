"""JetStream advisories on ``$JS.EVENT.ADVISORY.>``, as nats-server 2.15.1 publishes them
(jetstream_events.go): stream and consumer actions (created, updated, deleted), a consumer
paused or resumed, a priority group's client pinned or unpinned, snapshots and restores
started and completed, and the API audit of every API response. Each is published in the JetStream account, and only built when
someone listens (nats-server's publishAdvisory). In a cluster, a replicated stream's or
consumer's new leader announces itself (``leader_elected``) in its account and, naming the
account, in the system account.

Layer (README "Layers"): a state-tier helper, called by the API and by deliveries; what it
needs of the engine (the package's ``JetStream``) is ``AdvisoryHost``.
"""

from __future__ import annotations

import secrets
import string
from typing import Any, Protocol

from .. import clock
from .util import dumps, rfc3339nano

ADVISORY_PREFIX = "$JS.EVENT.ADVISORY."
STREAM_ACTION_TYPE = "io.nats.jetstream.advisory.v1.stream_action"  # JSStreamActionAdvisoryType
CONSUMER_ACTION_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"  # JSConsumerActionAdvisoryType
API_AUDIT_TYPE = "io.nats.jetstream.advisory.v1.api_audit"  # JSAPIAuditType
CONSUMER_PAUSE_TYPE = "io.nats.jetstream.advisory.v1.consumer_pause"  # JSConsumerPauseAdvisoryType
CONSUMER_PINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_pinned"  # JSConsumerGroupPinnedAdvisoryType
CONSUMER_UNPINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"  # ...UnpinnedAdvisoryType
SNAPSHOT_CREATE_TYPE = "io.nats.jetstream.advisory.v1.snapshot_create"  # JSSnapshotCreatedAdvisoryType
SNAPSHOT_COMPLETE_TYPE = "io.nats.jetstream.advisory.v1.snapshot_complete"  # JSSnapshotCompleteAdvisoryType
RESTORE_CREATE_TYPE = "io.nats.jetstream.advisory.v1.restore_create"  # JSRestoreCreateAdvisoryType
RESTORE_COMPLETE_TYPE = "io.nats.jetstream.advisory.v1.restore_complete"  # JSRestoreCompleteAdvisoryType
STREAM_LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.stream_leader_elected"  # JSStreamLeaderElected...
CONSUMER_LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.consumer_leader_elected"  # JSConsumerLeaderElected...
STREAM_QUORUM_LOST_TYPE = "io.nats.jetstream.advisory.v1.stream_quorum_lost"  # JSStreamQuorumLostAdvisoryType
CONSUMER_QUORUM_LOST_TYPE = "io.nats.jetstream.advisory.v1.consumer_quorum_lost"  # JSConsumerQuorumLostAdvisoryType
# jetstream_cluster.go: a leader stepping down without a quorum says so once its group is this old
# (seconds), at most once every QUORUM_LOST_INTERVAL (lostQuorumAdvInterval).
QUORUM_LOST_AFTER = 5.0
QUORUM_LOST_INTERVAL = 10.0
DOMAIN_LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.domain_leader_elected"  # JSDomainLeaderElected...
UNPINNED_ADMIN, UNPINNED_TIMEOUT = "admin", "timeout"  # the unpinned advisory's reasons
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's time.Time{}
# The subject's word and the "action" value of each action (JSAdvisoryStreamCreatedPre etc.).
CREATE, MODIFY, DELETE = ("CREATED", "create"), ("UPDATED", "modify"), ("DELETED", "delete")
EVENT_ID_LEN = 22  # a NUID's length (nuid.Next())
_ID_ALPHABET = string.ascii_letters + string.digits


class AdvisoryHost(Protocol):
    """What advisories need of the engine (``JetStream``): where and how to publish."""

    @property
    def server(self) -> Any: ...
    @property
    def client(self) -> Any: ...  # the JetStream account's internal client
    @property
    def domain(self) -> str: ...
    @property
    def account_name(self) -> str | None: ...
    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None,
             reply: bytes | None = None) -> None: ...


def event_id() -> str:
    """An event id as long as nats-server's NUIDs (random: ids only need to differ)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(EVENT_ID_LEN))


def publish(js: AdvisoryHost, subject: str, make_fields) -> None:
    """``{"type", "id", "timestamp", **make_fields()}`` on ``subject``, when someone listens."""
    encoded = subject.encode()
    if not js.client.has_interest(encoded):
        return
    fields = make_fields()
    doc = {"type": fields.pop("type"), "id": event_id(), "timestamp": rfc3339nano(clock.now_ns()), **fields}
    if js.domain:
        doc["domain"] = js.domain
    js.send(encoded, dumps(doc))


def quorum_lost_due(node: Any, last: float, now: float) -> bool:
    """A leader stepping down (``node``, its RAFT node) says it lost its quorum: without one,
    its group past its first QUORUM_LOST_AFTER seconds, the last such advisory (``last``, on
    the clock of ``now``) QUORUM_LOST_INTERVAL ago (shouldSendLostQuorum)."""
    return (not node.has_quorum() and node.now() - node.created > QUORUM_LOST_AFTER
            and now - last >= QUORUM_LOST_INTERVAL)


def quorum_lost(js: AdvisoryHost, system: Any, stream: str, consumer: str | None, replicas: list[dict]) -> None:
    """sendStreamLostQuorumAdvisory / sendConsumerLostQuorumAdvisory: a leader that stepped down
    for want of a quorum, ``$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.<stream>``
    (``CONSUMER.QUORUM_LOST.<stream>.<consumer>``), in the account and the system account as
    leader_elected's."""
    if consumer is None:
        subject = f"{ADVISORY_PREFIX}STREAM.QUORUM_LOST.{stream}"
        kind, names = STREAM_QUORUM_LOST_TYPE, {"stream": stream}
    else:
        subject = f"{ADVISORY_PREFIX}CONSUMER.QUORUM_LOST.{stream}.{consumer}"
        kind, names = CONSUMER_QUORUM_LOST_TYPE, {"stream": stream, "consumer": consumer}
    _to_both(js, system, subject, kind, {**names, "replicas": replicas})


def leader_elected(js: AdvisoryHost, system: Any, stream: str, consumer: str | None, leader: str,
                   replicas: list[dict]) -> None:
    """jetstream_cluster.go sendStreamLeaderElectAdvisory / sendConsumerLeaderElectAdvisory:
    ``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>`` (``CONSUMER.LEADER_ELECTED.<stream>.
    <consumer>``) in the stream's account unless that is the system account, and the same
    event (id, time) with the account's name in ``system``, the system account. ``replicas``:
    every peer of the group (peer_infos)."""
    if consumer is None:
        subject = f"{ADVISORY_PREFIX}STREAM.LEADER_ELECTED.{stream}"
        kind, names = STREAM_LEADER_ELECTED_TYPE, {"stream": stream}
    else:
        subject = f"{ADVISORY_PREFIX}CONSUMER.LEADER_ELECTED.{stream}.{consumer}"
        kind, names = CONSUMER_LEADER_ELECTED_TYPE, {"stream": stream, "consumer": consumer}
    _to_both(js, system, subject, kind, {**names, "leader": leader, "replicas": replicas})


def _to_both(js: AdvisoryHost, system: Any, subject: str, kind: str, tail: dict) -> None:
    """One event in the stream's account (unless it is the system account) and, with the
    account's name after its time, in the system account (publishAdvisory twice)."""
    encoded = subject.encode()
    account = js.account_name or "$G"
    to_account = account != system.name and js.client.has_interest(encoded)
    to_system = system.has_interest(encoded)
    if not (to_account or to_system):
        return
    head = {"type": kind, "id": event_id(), "timestamp": rfc3339nano(clock.now_ns())}
    if js.domain:
        tail["domain"] = js.domain
    if to_account:
        js.send(encoded, dumps({**head, **tail}))
    if to_system:
        system.publish(encoded, None, None, dumps({**head, "account": account, **tail}))


def domain_leader_elected(system: Any, leader: str, replicas: list[dict], cluster: str, domain: str) -> None:
    """jetstream_cluster.go sendDomainLeaderElectAdvisory: the meta group's new leader (its
    peer id, as 2.15.1's GroupLeader) on ``$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED`` in the
    system account."""
    subject = f"{ADVISORY_PREFIX}DOMAIN.LEADER_ELECTED".encode()
    if not system.has_interest(subject):
        return
    doc = {"type": DOMAIN_LEADER_ELECTED_TYPE, "id": event_id(), "timestamp": rfc3339nano(clock.now_ns()),
           "leader": leader, "replicas": replicas, "cluster": cluster}
    if domain:
        doc["domain"] = domain
    system.publish(subject, None, None, dumps(doc))


def peer_infos(node: Any, names: dict[str, str], now: float) -> list[dict]:
    """jetstream_cluster.go replicas(node) for a group's leader: every peer, itself included,
    as PeerInfo (name, current, active in ns since last heard from, lag when behind, peer)."""
    out = []
    for peer in node.peers:
        if peer == node.id:
            entry: dict = {"name": names.get(peer, peer), "current": True, "active": 0}
        else:
            seen = node._seen.get(peer)
            lag = max(node.commit - node._match.get(peer, 0), 0)
            entry = {"name": names.get(peer, peer), "current": lag == 0,
                     "active": int((now - seen) * 1e9) if seen is not None else 0}
            if lag:
                entry["lag"] = lag
        entry["peer"] = peer
        out.append(entry)
    return out


def stream_action(js: AdvisoryHost, stream: str, action: tuple) -> None:
    publish(js, f"{ADVISORY_PREFIX}STREAM.{action[0]}.{stream}",
            lambda: {"type": STREAM_ACTION_TYPE, "stream": stream, "action": action[1]})


def consumer_action(js: AdvisoryHost, stream: str, consumer: str, action: tuple) -> None:
    publish(js, f"{ADVISORY_PREFIX}CONSUMER.{action[0]}.{stream}.{consumer}",
            lambda: {"type": CONSUMER_ACTION_TYPE, "stream": stream, "consumer": consumer, "action": action[1]})


def consumer_pause(js: AdvisoryHost, stream: str, consumer: str, paused: bool, pause_until: str | None) -> None:
    """sendPauseAdvisoryLocked: ``pause_until`` as the consumer's configuration has it (the
    zero time when it has none), ``paused`` whether that is still ahead."""
    publish(js, f"{ADVISORY_PREFIX}CONSUMER.PAUSE.{stream}.{consumer}",
            lambda: {"type": CONSUMER_PAUSE_TYPE, "stream": stream, "consumer": consumer, "paused": paused,
                     "pause_until": pause_until or _ZERO_TIME})


def _group_event(js: AdvisoryHost, subject: str, kind: str, stream: str, consumer: str, last: dict) -> None:
    """JSConsumerGroupPinnedAdvisory / ...UnpinnedAdvisory: the account, then the domain before
    the group (their field order)."""
    encoded = subject.encode()
    if not js.client.has_interest(encoded):
        return
    doc: dict = {"type": kind, "id": event_id(), "timestamp": rfc3339nano(clock.now_ns()),
                 "account": js.account_name or "$G", "stream": stream, "consumer": consumer}
    if js.domain:
        doc["domain"] = js.domain
    js.send(encoded, dumps({**doc, **last}))


def consumer_pinned(js: AdvisoryHost, stream: str, consumer: str, group: str, pin_id: str) -> None:
    """sendPinnedAdvisoryLocked: a client was pinned (a pull request got a new pin id)."""
    _group_event(js, f"{ADVISORY_PREFIX}CONSUMER.PINNED.{stream}.{consumer}", CONSUMER_PINNED_TYPE, stream,
                 consumer, {"group": group, "pinned_id": pin_id})


def consumer_unpinned(js: AdvisoryHost, stream: str, consumer: str, group: str, reason: str) -> None:
    """sendUnpinnedAdvisoryLocked: the pin went (``reason``: the UNPIN API, or the timeout)."""
    _group_event(js, f"{ADVISORY_PREFIX}CONSUMER.UNPINNED.{stream}.{consumer}", CONSUMER_UNPINNED_TYPE, stream,
                 consumer, {"group": group, "reason": reason})


def snapshot_create(js: AdvisoryHost, stream: str, state: dict, client: dict | None) -> None:
    publish(js, f"{ADVISORY_PREFIX}STREAM.SNAPSHOT_CREATE.{stream}",
            lambda: {"type": SNAPSHOT_CREATE_TYPE, "stream": stream, "state": state, "client": client})


def snapshot_complete(js: AdvisoryHost, stream: str, start: int, end: int, client: dict | None, error: str) -> None:
    def fields() -> dict:
        out = {"type": SNAPSHOT_COMPLETE_TYPE, "stream": stream, "start": rfc3339nano(start),
               "end": rfc3339nano(end), "client": client}
        if error:
            out["error"] = error
        return out

    publish(js, f"{ADVISORY_PREFIX}STREAM.SNAPSHOT_COMPLETE.{stream}", fields)


def restore_create(js: AdvisoryHost, stream: str, client: dict | None) -> None:
    publish(js, f"{ADVISORY_PREFIX}STREAM.RESTORE_CREATE.{stream}",
            lambda: {"type": RESTORE_CREATE_TYPE, "stream": stream, "client": client})


def restore_complete(js: AdvisoryHost, stream: str, start: int, end: int, nbytes: int, client: dict | None) -> None:
    publish(js, f"{ADVISORY_PREFIX}STREAM.RESTORE_COMPLETE.{stream}",
            lambda: {"type": RESTORE_COMPLETE_TYPE, "stream": stream, "start": rfc3339nano(start),
                     "end": rfc3339nano(end), "bytes": nbytes, "client": client})


def api_audit(js: AdvisoryHost, subject: bytes, request: bytes, response: bytes) -> None:
    """sendJetStreamAPIAuditAdvisory: the request (left out when empty) and the response as
    strings, and who asked (the client whose message the API is handling)."""

    def fields() -> dict:
        out: dict = {"type": API_AUDIT_TYPE, "server": js.server.server_name,
                     "client": client_info(js.server, js.server.callback_publisher),
                     "subject": subject.decode("utf-8", "replace")}
        if request:
            out["request"] = request.decode("utf-8", "replace")
        out["response"] = response.decode("utf-8", "replace")
        return out

    publish(js, ADVISORY_PREFIX + "API", fields)


def client_info(server, client) -> dict | None:
    """events.go ClientInfo (forAdvisory: no jwt, no alternates) of a connected client, in its
    field order with its omitempty rules; None (JSON null) for the server's own clients."""
    if client is None or not client.cid:
        return None
    account = client.account.name if client.account is not None else "$G"
    info: dict = {"start": _go_time(client.start), "host": client.ip, "id": client.cid, "acc": account}
    for key, value in (("user", client.user), ("name", client.name), ("lang", client.lang), ("ver", client.version)):
        if value:
            info[key] = value
    if client.rtt:
        info["rtt"] = int(client.rtt * 1e9)
    info["server"] = server.server_id
    info["kind"] = "Client"
    info["client_type"] = "nats"
    return info


def _go_time(seconds: float) -> str:
    return rfc3339nano(int(seconds * 1e9))
