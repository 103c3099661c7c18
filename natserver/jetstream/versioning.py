"""The ``_nats.*`` metadata nats-server 2.11+ keeps in stream and consumer configurations
(jetstream_versioning.go).

* ``_nats.req.level`` (static): the JetStream API level the asset's features need. Set on
  every create and update (a client's own value is replaced), stored with the configuration,
  and taken from the existing asset when a create repeats its configuration.
* ``_nats.ver`` and ``_nats.level`` (dynamic): the server's version and API level, added to
  the configuration in the answers to create, update and info (not in the lists, not stored);
  natserver reports what it claims (``SERVER_VERSION``, ``JS_API_LEVEL``).
"""

from __future__ import annotations

from ..protocol.const import JS_API_LEVEL, SERVER_VERSION

REQUIRED_LEVEL_KEY = "_nats.req.level"  # JSRequiredLevelMetadataKey
SERVER_VERSION_KEY = "_nats.ver"  # JSServerVersionMetadataKey
SERVER_LEVEL_KEY = "_nats.level"  # JSServerLevelMetadataKey

# The API level each feature needs (setStaticStreamMetadata / setStaticConsumerMetadata).
LEVEL_TTL = 1  # 2.11: per-message TTLs, subject delete markers
LEVEL_PAUSE = 1  # 2.11: consumer pause
LEVEL_PRIORITY = 1  # 2.11: priority groups
LEVEL_2_12 = 2  # 2.12: counters, atomic batches, schedules, async persist mode
LEVEL_2_14 = 4  # 2.14: fast batches, flow-control acks


def _stream_level(cfg) -> int:
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, LEVEL_TTL)
    # (the settings other modules add read as absent until their StreamConfig has them)
    if (cfg.allow_msg_counter or getattr(cfg, "allow_atomic", False)
            or getattr(cfg, "allow_msg_schedules", False) or getattr(cfg, "persist_mode", "") == "async"):
        level = max(level, LEVEL_2_12)
    if getattr(cfg, "allow_batched", False):
        level = max(level, LEVEL_2_14)
    return level


def _consumer_level(cfg) -> int:
    level = 0
    if cfg.pause_until and not cfg.pause_until.startswith("0001-01-01T00:00:00"):  # (Go: not the zero time)
        level = max(level, LEVEL_PAUSE)
    if cfg.priority_policy not in ("", "none") or cfg.priority_timeout or cfg.priority_groups:
        level = max(level, LEVEL_PRIORITY)
    if cfg.ack_policy == "flow_control":  # (2.14's; refused by natserver until it has them)
        level = max(level, LEVEL_2_14)
    return level


def _set_static(cfg, level: int) -> None:
    metadata = dict(cfg.metadata or {})
    metadata.pop(SERVER_VERSION_KEY, None)
    metadata.pop(SERVER_LEVEL_KEY, None)
    metadata[REQUIRED_LEVEL_KEY] = str(level)
    cfg.metadata = metadata


def set_static_stream_metadata(cfg) -> None:
    """A create's or update's StreamConfig: the dynamic keys dropped, the required level set."""
    _set_static(cfg, _stream_level(cfg))


def set_static_consumer_metadata(cfg) -> None:
    """A create's (or a pause's) ConsumerConfig, as set_static_stream_metadata."""
    _set_static(cfg, _consumer_level(cfg))


def copy_metadata(cfg, old) -> None:
    """copyStreamMetadata / copyConsumerMetadata: ``cfg`` takes ``old``'s required level (or
    none), so that a create repeating a configuration compares equal."""
    metadata = dict(cfg.metadata or {})
    metadata.pop(SERVER_VERSION_KEY, None)
    metadata.pop(SERVER_LEVEL_KEY, None)
    if old.metadata and REQUIRED_LEVEL_KEY in old.metadata:
        metadata[REQUIRED_LEVEL_KEY] = old.metadata[REQUIRED_LEVEL_KEY]
    else:
        metadata.pop(REQUIRED_LEVEL_KEY, None)
    cfg.metadata = metadata or None


def metadata_json(metadata: dict | None, dynamic: bool) -> dict | None:
    """A configuration's ``metadata`` as Go writes it (a map: keys sorted; omitted when empty),
    with the server's version and level when ``dynamic`` (the answers to create, update, info)."""
    out = dict(metadata or {})
    if dynamic:
        out[SERVER_VERSION_KEY] = SERVER_VERSION
        out[SERVER_LEVEL_KEY] = str(JS_API_LEVEL)
    return dict(sorted(out.items())) if out else None
