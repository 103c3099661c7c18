"""What nats-server 2.15.1's StreamConfig and ConsumerConfig have that natserver does not act on
yet. A 2.9 server ignores fields it does not know, so a client cannot tell that its
batches were dropped; natserver refuses a request that sets one of these
(a non-zero value) instead, naming the field, with the error nats-server gives for a
configuration it cannot take (10052 for streams, 10012 for consumers). Fields leave this table
as natserver implements them (issue #27 items 2-4, issue #28): per-message TTLs
(``allow_msg_ttl``, ``subject_delete_marker_ttl``: ttl.py), ``first_seq``,
``subject_transform``, ``consumer_limits`` and sources' ``subject_transforms`` (stream.py),
``compression`` (store.py, compressed.py),
priority groups (``priority_groups``,
``priority_timeout``, ``priority_policy``: consumer.py, delivery.py), counters
(``allow_msg_counter``: counter.py), message schedules (``allow_msg_schedules``: schedule.py),
atomic batch publishing (``allow_atomic``: batch.py), fast batch publishing (``allow_batched``:
fastbatch.py) and ``persist_mode`` (stream.py, the engine's acks) have left it; durable
sourcing (a source's ``consumer``, a consumer's ``sourcing``) is still refused here.
"""

from __future__ import annotations

from . import errors

# field (as nats-server's JSON names it) -> the nats-server release that added it. A value is
# "set" when it is not Go's zero value (and not the default a client may send explicitly).
STREAM_FIELDS: dict[str, str] = {  # (all of 2.10-2.14 acted on now)
}
SOURCE_FIELDS = {"consumer": "2.14"}  # in mirror and in each of sources (durable sourcing)
CONSUMER_FIELDS = {
    "sourcing": "2.14",
}
# Values a client sends for "not used" besides Go's zero values.
_UNUSED: dict[str, tuple] = {}


def _set(name: str, value) -> bool:
    if value in (None, False, 0, "", [], {}):
        return False
    if isinstance(value, dict) and not any(_set("", v) for v in value.values()):
        return False  # e.g. consumer_limits with every limit at zero
    return value not in _UNUSED.get(name, ())


def _found(obj, table: dict) -> str | None:
    """The first field of ``table`` that the JSON object ``obj`` sets (keys matched
    case-insensitively, as Go's json matches struct tags)."""
    if not isinstance(obj, dict):
        return None
    for key, value in obj.items():
        name = key.lower()
        if name in table and _set(name, value):
            return name
    return None


def _message(name: str, release: str) -> str:
    return f"natserver does not support {name} (added in nats-server {release}) yet"


def refuse_stream(obj) -> None:
    """Raise ApiError when a stream configuration (a create or update request) sets a field
    natserver would otherwise ignore."""
    name = _found(obj, STREAM_FIELDS)
    if name is not None:
        raise errors.stream_invalid_config(_message(name, STREAM_FIELDS[name]))
    if not isinstance(obj, dict):
        return
    origins = [v for k, v in obj.items() if k.lower() == "mirror"]
    for k, v in obj.items():
        if k.lower() == "sources" and isinstance(v, list):
            origins.extend(v)
    for origin in origins:
        name = _found(origin, SOURCE_FIELDS)
        if name is not None:
            raise errors.stream_invalid_config(_message(name, SOURCE_FIELDS[name]))


def refuse_consumer(obj) -> None:
    """Raise ApiError when a consumer configuration sets a field natserver would ignore."""
    name = _found(obj, CONSUMER_FIELDS)
    if name is not None:
        raise errors.consumer_create(_message(name, CONSUMER_FIELDS[name]))
