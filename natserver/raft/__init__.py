"""nats-server's RAFT, for JetStream in a cluster (issue #32): the wire codec (wire.py), a
sans-IO node (node.py) and its persisted state (storage.py). See README.md.

A layer of its own: it imports natserver.clock and nothing above it (pyproject.toml's
import-linter contracts); the server and JetStream drive a node through its messages.
"""

from __future__ import annotations

from natserver.raft.node import (
    CATCHUP_BATCH,
    HEARTBEAT_INTERVAL,
    LOST_QUORUM_INTERVAL,
    MAX_ELECTION_TIMEOUT,
    MIN_ELECTION_TIMEOUT,
    Committed,
    Mark,
    Message,
    Node,
    NotLeader,
    Role,
    SnapshotError,
    Timeouts,
)
from natserver.raft.storage import FileStorage, LogEntry, MemoryStorage, Persisted, Snapshot, Storage, StorageError
from natserver.raft.wire import (
    META_GROUP,
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    WireError,
    classify,
    group_name,
    node_id,
)

# Everything in __all__ is the package's public API.
__all__ = [
    "CATCHUP_BATCH", "HEARTBEAT_INTERVAL", "LOST_QUORUM_INTERVAL", "MAX_ELECTION_TIMEOUT", "META_GROUP",
    "MIN_ELECTION_TIMEOUT", "AppendEntry", "AppendEntryResponse", "Committed", "Entry", "EntryType",
    "FileStorage", "LogEntry", "Mark", "MemoryStorage", "Message", "Node", "NotLeader", "Persisted", "PeerState",
    "Role", "Snapshot", "SnapshotError", "Storage", "StorageError", "Timeouts", "VoteRequest", "VoteResponse", "WireError", "classify",
    "group_name", "node_id",
]
