"""JetStream API errors: the codes, error codes and descriptions of nats-server v2.9.10
(server/errors.json), for the subset of the API natserver implements.

An error is sent inside a response as ``"error": {"code": 404, "err_code": 10059,
"description": "stream not found"}``; clients key on ``err_code``.
"""

from __future__ import annotations


class ApiError(Exception):
    """One JetStream API error. ``code`` is the HTTP-like status, ``err_code`` JetStream's."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def to_json(self) -> dict:
        out: dict = {"code": self.code}
        if self.err_code:
            out["err_code"] = self.err_code
        if self.description:
            out["description"] = self.description
        return out

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.err_code}, {self.description!r})"


def _fixed(code: int, err_code: int, description: str):
    def make() -> ApiError:
        return ApiError(code, err_code, description)

    make.err_code = err_code  # type: ignore[attr-defined]
    return make


# Fixed descriptions.
account_resources_exceeded = _fixed(400, 10002, "resource limits exceeded for account")
bad_request = _fixed(400, 10003, "bad request")
insufficient_resources = _fixed(503, 10023, "insufficient resources")
def invalid_json(detail: str = "") -> ApiError:
    """10025. nats-server 2.10+ appends Go's Unmarshal error ("invalid JSON: <err>"); natserver
    knows that text only where a decoder names it (GoDecodeError), and says "invalid JSON" alone
    elsewhere, as 2.9 did."""
    return ApiError(400, 10025, f"invalid JSON: {detail}" if detail else "invalid JSON")
memory_resources_exceeded = _fixed(500, 10028, "insufficient memory resources available")
mirror_with_subjects = _fixed(400, 10034, "stream mirrors can not contain subjects")
no_message_found = _fixed(404, 10037, "no message found")
not_empty_request = _fixed(400, 10038, "expected an empty request payload")
storage_resources_exceeded = _fixed(500, 10047, "insufficient storage resources available")
message_exceeds_maximum = _fixed(400, 10054, "message size exceeds maximum allowed")
stream_mismatch = _fixed(400, 10056, "stream name in subject does not match request")
stream_name_exist = _fixed(400, 10058, "stream name already in use with a different configuration")
stream_not_found = _fixed(404, 10059, "stream not found")
stream_not_match = _fixed(400, 10060, "expected stream does not match")
stream_subject_overlap = _fixed(400, 10065, "subjects overlap with an existing stream")
replicas_not_supported = _fixed(500, 10074, "replicas > 1 not supported in non-clustered mode")
# consumer.go checkConsumerCfg: a consumer's num_replicas above its stream's.
consumer_replicas_exceeds_stream = _fixed(400, 10126, "consumer config replica count exceeds parent stream")
consumer_replicas_should_match = _fixed(400, 10134, "consumer config replicas must match interest retention stream's replicas")
# jsStreamInfoRequest: every server of the stream's group is offline (allPeersOffline).
stream_offline = _fixed(500, 10118, "stream is offline")
# jsConsumerInfoRequest (the meta leader): every server of the consumer's group is offline.
consumer_offline = _fixed(500, 10119, "consumer is offline")
# jetstream_cluster.go isLeaderless: the meta group has had no leader for a while.
cluster_not_available = _fixed(503, 10008, "JetStream system temporarily unavailable")
# 2.15.1 JSClusterPeerNotMemberErr (STREAM.PEER.REMOVE: the peer is not in the stream's group),
# JSClusterServerNotMemberErr (SERVER.REMOVE: no such peer of the meta group) and
# JSClusterServerMemberChangeInflightErr (SERVER.REMOVE while another one is in flight).
cluster_peer_not_member = _fixed(400, 10040, "peer not a member")
cluster_server_not_member = _fixed(400, 10044, "server is not a member of the cluster")
cluster_member_change_inflight = _fixed(400, 10202, "cluster member change is in progress")
# 2.15.1 JSPeerRemapErr: STREAM.PEER.REMOVE finds no replacement that keeps the replicas.
peer_remap = _fixed(503, 10075, "peer remap failed")
# 2.15.1 JSStreamMoveAndScaleErr: an update changing both the placement and the replicas.
stream_move_and_scale = _fixed(400, 10123, "can not move and scale a stream in a single update")


def raft_general(err: str) -> ApiError:
    """10041 (JSRaftGeneralErrF): a RAFT call's error, its text."""
    return ApiError(500, 10041, err)
header_exceeds_maximum = _fixed(400, 10097, "header size exceeds maximum allowed of 64k")
stream_sealed = _fixed(400, 10109, "invalid operation on sealed stream")
name_contains_path_separators = _fixed(400, 10128, "Stream name can not contain path separators")
replicas_negative = _fixed(400, 10133, "replicas count cannot be negative")
consumer_not_found = _fixed(404, 10014, "consumer not found")
snapshot_deliver_subject_invalid = _fixed(400, 10015, "deliver subject not valid")
stream_name_exist_restore_failed = _fixed(400, 10130, "stream name already in use, cannot restore")


# Formatted descriptions ("{err}" and friends).
BAD_SUBJECT = "invalid subject"  # nats-server's ErrBadSubject (server/errors.go), as an {err}


def sequence_not_found(seq: int) -> ApiError:
    return ApiError(400, 10043, f"sequence {seq} not found")


def cluster_no_peers(err: str) -> ApiError:
    """10005 (2.15.1 JSClusterNoPeersErrF): no placement fits; ``err`` is selectPeerError's
    text (natserver/jetstream/replication/placement.py)."""
    return ApiError(400, 10005, err)


def stream_create(err: str) -> ApiError:
    return ApiError(500, 10049, err)


def stream_delete(err: str) -> ApiError:
    return ApiError(500, 10050, err)


def stream_general(err: str) -> ApiError:
    return ApiError(500, 10051, err)


def stream_invalid_config(err: str) -> ApiError:
    return ApiError(500, 10052, err)


def stream_msg_delete_failed(err: str) -> ApiError:
    return ApiError(500, 10057, err)


def stream_update(err: str) -> ApiError:
    return ApiError(500, 10069, err)


def stream_wrong_last_msg_id(msg_id: str) -> ApiError:
    return ApiError(400, 10070, f"wrong last msg ID: {msg_id}")


def stream_wrong_last_sequence(seq: int) -> ApiError:
    return ApiError(400, 10071, f"wrong last sequence: {seq}")


def consumer_stream_identity_mismatch(identity: str) -> ApiError:
    """JSConsumerStreamIdentityMismatchF (2.15): a direct consumer's create named another
    incarnation of the stream (a recreated origin) in Nats-Stream-Identity."""
    return ApiError(400, 10225, f"consumer's stream identity does not match: {identity}")


def stream_restore(err: str) -> ApiError:
    return ApiError(500, 10062, f"restore failed: {err}")


def stream_snapshot(err: str) -> ApiError:
    return ApiError(500, 10064, f"snapshot failed: {err}")


def stream_store_failed(err: str) -> ApiError:
    return ApiError(503, 10077, err)


def stream_purge_failed(err: str) -> ApiError:
    return ApiError(500, 10110, err)


def stream_rollup_failed(err: str) -> ApiError:
    return ApiError(500, 10111, err)


def consumer_create(err: str) -> ApiError:
    return ApiError(500, 10012, err)


# Consumers (nats-server v2.9.10 server/errors.json).
consumer_name_exist = _fixed(400, 10013, "consumer name already in use")
consumer_name_mismatch = _fixed(400, 10017, "consumer name in subject does not match durable name in request")
consumer_durable_required = _fixed(400, 10018, "consumer expected to be durable but a durable name was not set")
consumer_ephemeral_with_durable = _fixed(
    400, 10020, "consumer expected to be ephemeral but a durable name was set in request")
consumer_fc_requires_push = _fixed(400, 10089, "consumer flow control requires a push based consumer")
consumer_hb_requires_push = _fixed(400, 10088, "consumer idle heartbeat requires a push based consumer")
consumer_invalid_deliver_subject = _fixed(400, 10112, "invalid push consumer deliver subject")
consumer_max_waiting_negative = _fixed(400, 10087, "consumer max waiting needs to be positive")
consumer_durable_name_mismatch = _fixed(
    400, 10132, "Consumer Durable and Name have to be equal if both are provided")
consumer_deliver_to_wildcards = _fixed(400, 10079, "consumer deliver subject has wildcards")
consumer_push_max_waiting = _fixed(400, 10080, "consumer in push mode can not set max waiting")
consumer_deliver_cycle = _fixed(400, 10081, "consumer deliver subject forms a cycle")
consumer_max_pending_requires_ack = _fixed(400, 10082, "consumer requires ack policy for max ack pending")
consumer_small_heartbeat = _fixed(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
consumer_pull_with_rate_limit = _fixed(400, 10086, "consumer in pull mode can not have rate limit set")
consumer_direct_requires_push = _fixed(400, 10090, "consumer direct requires a push based consumer")
consumer_direct_requires_ephemeral = _fixed(400, 10091, "consumer direct requires an ephemeral consumer")
stream_max_bytes_required = _fixed(400, 10113, "account requires a stream config to have max bytes set")
stream_max_stream_bytes_exceeded = _fixed(400, 10122, "stream max bytes exceeds account limit max stream bytes")


def consumer_max_pending_ack_excess(limit: int) -> ApiError:
    return ApiError(400, 10121, f"consumer max ack pending exceeds system limit of {limit}")


def consumer_inactive_threshold_excess(limit: str) -> ApiError:  # 2.10+ (a Go duration: "5s")
    return ApiError(400, 10153, f"consumer inactive threshold exceeds system limit of {limit}")
consumer_flow_control_needs_heartbeats = _fixed(400, 10108, "consumer with flow control also needs heartbeats")
consumer_pull_requires_ack = _fixed(400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream")  # 2.10+
consumer_wq_requires_explicit_ack = _fixed(400, 10098, "workqueue stream requires explicit ack")
consumer_wq_multiple_unfiltered = _fixed(400, 10099, "multiple non-filtered consumers not allowed on workqueue stream")
consumer_wq_not_unique = _fixed(400, 10100, "filtered consumer not unique on workqueue stream")
# 2.10+: several filter subjects (server/errors.json).
consumer_duplicate_filter_subjects = _fixed(
    400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified")
consumer_multiple_filters_not_allowed = _fixed(
    400, 10137, "consumer with multiple subject filters cannot use subject based API")
consumer_overlapping_filters = _fixed(400, 10138, "consumer subject filters cannot overlap")
consumer_empty_filter = _fixed(400, 10139, "consumer filter in FilterSubjects cannot be empty")
expected_last_seq_per_subject_invalid = _fixed(  # 2.12+: a -Subject header without the sequence
    400, 10193, "missing sequence for expected last sequence per subject")
message_ttl_invalid = _fixed(400, 10165, "invalid per-message TTL")  # 2.11+
message_ttl_disabled = _fixed(400, 10166, "per-message TTL is disabled")  # 2.11+
# 2.12+: counters (counter.py; server/errors.json).
message_incr_disabled = _fixed(400, 10168, "message counters is disabled")
message_incr_missing = _fixed(400, 10169, "message counter increment is missing")
message_incr_payload = _fixed(400, 10170, "message counter has payload")
message_incr_invalid = _fixed(400, 10171, "message counter increment is invalid")
message_counter_broken = _fixed(400, 10172, "message counter is broken")
mirror_with_counters = _fixed(400, 10173, "stream mirrors can not also calculate counters")
# 2.12+: message schedules (schedule.py; server/errors.json).
mirror_with_msg_schedules = _fixed(400, 10186, "stream mirrors can not also schedule messages")
source_with_msg_schedules = _fixed(400, 10187, "stream source can not also schedule messages")
message_schedules_disabled = _fixed(400, 10188, "message schedules is disabled")
message_schedules_pattern_invalid = _fixed(400, 10189, "message schedules pattern is invalid")
message_schedules_target_invalid = _fixed(400, 10190, "message schedules target is invalid")
message_schedules_ttl_invalid = _fixed(400, 10191, "message schedules invalid per-message TTL")
message_schedules_rollup_invalid = _fixed(400, 10192, "message schedules invalid rollup")
message_schedules_source_invalid = _fixed(400, 10203, "message schedules source is invalid")
message_schedules_scheduler_invalid = _fixed(400, 10212, "message schedules invalid scheduler")
message_schedules_time_zone_invalid = _fixed(400, 10223, "message schedules time zone is invalid")
# 2.12+: atomic batch publishing (batch.py; server/errors.json of 2.15.1).
atomic_publish_disabled = _fixed(400, 10174, "atomic publish is disabled")
atomic_publish_missing_seq = _fixed(400, 10175, "atomic publish sequence is missing")
atomic_publish_incomplete_batch = _fixed(400, 10176, "atomic publish batch is incomplete")
atomic_publish_invalid_batch_id = _fixed(400, 10179, "atomic publish batch ID is invalid")
mirror_with_atomic_publish = _fixed(400, 10198, "stream mirrors can not also use atomic publishing")
atomic_publish_invalid_batch_commit = _fixed(400, 10200, "atomic publish batch commit is invalid")
atomic_publish_duplicate_message = _fixed(400, 10201, "atomic publish batch contains duplicate message id")
atomic_publish_too_many_inflight = _fixed(429, 10210, "atomic publish too many inflight")
stream_wrong_last_sequence_constant = _fixed(400, 10164, "wrong last sequence")


def atomic_publish_unsupported_header(header: str) -> ApiError:
    return ApiError(400, 10177, f"atomic publish unsupported header used: {header}")


def atomic_publish_too_large_batch(size: int) -> ApiError:
    return ApiError(400, 10199, f"atomic publish batch is too large: {size}")


# 2.15+: only a stream's own sourcing writes Nats-Stream-Source (a counter stream counts by it).
message_source_hdr_not_allowed = _fixed(400, 10227, "message stream source header is not allowed")
consumer_already_exists = _fixed(400, 10148, "consumer already exists")  # 2.10+ action "create"
consumer_does_not_exist = _fixed(400, 10149, "consumer does not exist")  # 2.10+ action "update"
consumer_create_filter_mismatch = _fixed(
    400, 10131, "Consumer create request did not match filtered subject from create subject")


def consumer_metadata_length(limit: str) -> ApiError:
    return ApiError(400, 10135, f"consumer metadata exceeds maximum size of {limit}")
consumer_wq_not_deliver_all = _fixed(400, 10101, "consumer must be deliver all on workqueue stream")
consumer_max_request_batch_negative = _fixed(400, 10114, "consumer max request batch needs to be > 0")
consumer_max_request_expires_too_small = _fixed(400, 10115, "consumer max request expires needs to be >= 1ms")
consumer_max_deliver_backoff = _fixed(400, 10116, "max deliver is required to be > length of backoff values")
max_consumers_reached = _fixed(400, 10026, "maximum consumers limit reached")
max_streams_reached = _fixed(400, 10027, "maximum number of streams reached")
no_limits = _fixed(400, 10120, "no JetStream default or applicable tiered limit present")


def consumer_invalid_sampling(err: str) -> ApiError:
    return ApiError(400, 10095, f"failed to parse consumer sampling configuration: {err}")


def consumer_invalid_policy(err: str) -> ApiError:
    return ApiError(400, 10094, err)


def pedantic(err: str) -> ApiError:  # 2.11+: a pedantic request that a default would change
    return ApiError(400, 10157, f"pedantic mode: {err}")


consumer_ack_wait_negative = _fixed(400, 10183, "consumer ack wait needs to be positive")
consumer_backoff_negative = _fixed(400, 10184, "consumer backoff needs to be positive")


def consumer_description_too_long(limit: int) -> ApiError:
    return ApiError(400, 10107, f"consumer description is too long, maximum allowed is {limit}")


# Mirrors and sources (nats-server v2.9.10 server/errors.json).
mirror_with_sources = _fixed(400, 10031, "stream mirrors can not also contain other sources")
def stream_transform_invalid_source(err: str) -> ApiError:  # 2.10+
    return ApiError(400, 10155, f"stream transform source: {err}")


def stream_transform_invalid_destination(err: str) -> ApiError:  # 2.10+
    return ApiError(400, 10156, f"stream transform: {err}")


# 2.10+: a mirror's or source's subject_transforms.
mirror_multiple_filters = _fixed(
    400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter")
mirror_overlapping_filters = _fixed(400, 10152, "mirror subject filters can not overlap")
source_multiple_filters = _fixed(
    400, 10144, "source with multiple subject transforms cannot also have a single subject filter")
source_overlapping_filters = _fixed(400, 10147, "source filters can not overlap")
source_duplicate = _fixed(400, 10140, "duplicate source configuration detected")


def mirror_invalid_filter(err: str) -> ApiError:
    return ApiError(400, 10151, f"mirror transform source: {err}")


def mirror_invalid_transform(err: str) -> ApiError:
    return ApiError(400, 10154, f"mirror transform: {err}")


def source_invalid_filter(err: str) -> ApiError:
    return ApiError(400, 10145, f"source transform source: {err}")


def source_invalid_transform(err: str) -> ApiError:
    return ApiError(400, 10146, f"source transform: {err}")


mirror_with_first_seq = _fixed(400, 10143, "stream mirrors can not have first sequence configured")  # 2.10+
source_invalid_stream_name = _fixed(400, 10141, "sourced stream name is invalid")  # 2.10+
mirror_invalid_stream_name = _fixed(400, 10142, "mirrored stream name is invalid")  # 2.10+
mirror_not_updatable = _fixed(400, 10055, "stream mirror configuration can not be updated")
# A single server (nats-server errors.json JSClusterRequiredErr): leader step-downs and peer
# removals need a JetStream cluster, which natserver does not run.
cluster_required = _fixed(503, 10010, "JetStream clustering support required")
# nats-server 2.11+ (jetstream_versioning.go errorOnRequiredApiLevel): a request whose
# Nats-Required-Api-Level header names a level above JS_API_LEVEL (or is not a number).
required_api_level = _fixed(412, 10185, "JetStream minimum api level required")
mirror_max_message_size_too_big = _fixed(400, 10030, "stream mirror must have max message size >= source")
source_max_message_size_too_big = _fixed(400, 10046, "stream source must have max message size >= target")


def stream_external_api_overlap(prefix: str, subject: str) -> ApiError:
    return ApiError(400, 10021, f"stream external api prefix {prefix} must not overlap with {subject}")


def stream_external_deliver_overlap(prefix: str, subject: str) -> ApiError:
    return ApiError(400, 10022, f"stream external delivery prefix {prefix} overlaps with stream subject {subject}")


def stream_external_deliver_wildcards(prefix: str) -> ApiError:
    return ApiError(400, 10024, f"stream external delivery prefix {prefix} must not contain wildcards")


# Priority groups (nats-server 2.11+, server/errors.json of 2.15.1).
consumer_priority_policy_without_group = _fixed(
    400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set")
consumer_invalid_priority_group = _fixed(400, 10160, "Provided priority group does not exist for this consumer")
consumer_empty_group_name = _fixed(400, 10161, "Group name cannot be an empty string")
consumer_invalid_group_name = _fixed(
    400, 10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters")
consumer_push_with_priority_group = _fixed(400, 10178, "priority groups can not be used with push consumers")
consumer_priority_group_with_policy_none = _fixed(400, 10196, "consumer can not have priority groups when policy is none")
consumer_pinned_ttl_without_priority_policy = _fixed(400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none")
# 2.14+: fast batch publishing (fastbatch.py; server/errors.json of 2.15.1).
batch_publish_disabled = _fixed(400, 10205, "batch publish is disabled")
batch_publish_invalid_pattern = _fixed(400, 10206, "batch publish pattern is invalid")
batch_publish_invalid_id = _fixed(400, 10207, "batch publish ID is invalid")
batch_publish_unknown_id = _fixed(400, 10208, "batch publish ID unknown")
mirror_with_batch_publish = _fixed(400, 10209, "stream mirrors can not also use batch publishing")
batch_publish_too_many_inflight = _fixed(429, 10211, "batch publish too many inflight")
