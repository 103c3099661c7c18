"""Durable consumers on disk: ``<stream dir>/obs/<name>.json`` holds the configuration and
a snapshot of the state (delivered, ack floor, pending with delivery times, delivery counts),
rewritten atomically at most every SNAPSHOT_INTERVAL while it changes, and at shutdown.

Crash safety: a snapshot taken at time T lists every message delivered by T and not acked
by T; a message delivered after T has a sequence above the snapshot's delivered sequence.
So after ``kill -9`` every unacked message is either pending (redelivered after ack_wait)
or not yet delivered: none is skipped; one acked after T comes again (at-least-once).
"""

from __future__ import annotations

import logging
import os

from .. import clock
from .consumer import Consumer, ConsumerConfig
from .store import write_atomic
from .util import dumps, loads

log = logging.getLogger("natserver")

SNAPSHOT_INTERVAL = 1_000_000_000  # ns; how stale a durable's saved state may get while it changes
CONSUMERS_DIR = "obs"  # as nats-server names its consumer directory


def kept_on_disk(consumer: Consumer, clustered: bool) -> bool:
    """Whether the consumer's state is saved here: a durable's of a file stream; in a cluster
    also an ephemeral's (not a memory-stored one), which the meta group's assignment brings
    back at a restart: 2.15.1 recovers its delivered and acked state from its store (nats.go
    TestPullConsumerConsume_WithCluster "recover consume after server restart")."""
    if not consumer.stream.file_backed:
        return False
    return bool(consumer.cfg.durable_name) or (clustered and not consumer.cfg.mem_storage)


def _dir(stream_path: str) -> str:
    return os.path.join(stream_path, CONSUMERS_DIR)


def state_of(consumer: Consumer) -> dict:
    return {
        "delivered": [consumer.delivered_cseq, consumer.state_sseq],
        "ack_floor": [consumer.ack_floor_cseq, consumer.ack_floor_sseq],
        "pending": [[seq, cseq, ts] for seq, (cseq, ts) in consumer.pending.items()],
        "rdc": [[seq, n] for seq, n in consumer.rdc.items() if n > 1],
    }


def save(consumer: Consumer, stream_path: str) -> None:
    directory = _dir(stream_path)
    os.makedirs(directory, exist_ok=True)
    doc = {"name": consumer.name, "created": consumer.created, "config": consumer.cfg.to_json(),
           "state": state_of(consumer)}
    write_atomic(os.path.join(directory, consumer.name + ".json"), dumps(doc))
    consumer.dirty = False


def remove(stream_path: str, name: str) -> None:
    try:
        os.unlink(os.path.join(_dir(stream_path), name + ".json"))
    except FileNotFoundError:
        pass


def load_all(stream, stream_path: str) -> list[Consumer]:
    directory = _dir(stream_path)
    if not os.path.isdir(directory):
        return []
    out = []
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith(".json"):
            continue
        path = os.path.join(directory, entry)
        try:
            with open(path, "rb") as f:
                doc = loads(f.read())
            cfg = ConsumerConfig.from_json(doc["config"])
            consumer = Consumer(stream, doc["name"], cfg, int(doc["created"]))
            state = doc["state"]
            consumer.delivered_cseq, consumer.delivered_sseq = (int(v) for v in state["delivered"])
            consumer.state_sseq = consumer.delivered_sseq
            consumer.ack_floor_cseq, consumer.ack_floor_sseq = (int(v) for v in state["ack_floor"])
            consumer.pending = {int(s): [int(c), int(t)] for s, c, t in state["pending"]}
            consumer.rdc = {int(s): int(n) for s, n in state["rdc"]}
            consumer.num_pending()  # counted from the recovered position (consumer.go setLeader)
            consumer.arm_pause(clock.now_ns())  # still paused until pause_until (setLeader: updatePauseState)
            consumer.active_at = clock.now_ns()  # inactive_threshold counts from the restart
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("JetStream: can not load the consumer in %s: %s", path, exc)
            continue
        out.append(consumer)
    return out
