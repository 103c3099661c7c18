"""The recording of record_groups.py, read back: each group's committed entries (by index, as
the append entries carried them) up to a point of the recording."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from natserver.raft.wire import AppendEntry, Entry, EntryType

DATA = Path(__file__).parent / "data" / "groups_nats_server_2.15.1.json"
ASSIGN_STREAM_OP = 0  # jetstream_cluster.go assignStreamOp
ASSIGN_CONSUMER_OP = 1  # jetstream_cluster.go assignConsumerOp


@dataclass
class Group:
    name: str
    # index -> (frame, entries): a raft.go log index holds one append entry's entries
    entries: dict[int, tuple[int, tuple[Entry, ...]]] = field(default_factory=dict)
    commits: list[tuple[int, int]] = field(default_factory=list)  # (frame, commit index)

    def committed(self, upto: int) -> list[Entry]:
        """The entries committed by frame ``upto`` (Normal and Snapshot), in index order."""
        commit = max((c for f, c in self.commits if f < upto), default=0)
        return [e for i, (f, es) in sorted(self.entries.items()) if i <= commit and f < upto for e in es]


@dataclass
class Recording:
    raw: dict
    groups: dict[str, Group]  # by group name
    names: dict[str, str]  # stream name or "stream/consumer" -> group name
    catchup: list[tuple[int, str, bytes]]  # $JSC frames: (frame, subject, data)


@cache
def load() -> Recording:
    raw = json.loads(DATA.read_text())
    groups: dict[str, Group] = {}
    names: dict[str, str] = {}
    catchup = []
    for i, frame in enumerate(raw["frames"]):
        subject = frame["subject"]
        if subject.startswith("$JSC."):
            catchup.append((i, subject, bytes.fromhex(frame["data"])))
            continue
        if not subject.startswith("$NRG.AE."):
            continue
        name = subject[len("$NRG.AE."):]
        ae = AppendEntry.decode(bytes.fromhex(frame["data"]))
        group = groups.setdefault(name, Group(name))
        group.commits.append((i, ae.commit))
        if ae.entries:
            group.entries[ae.pindex + 1] = (i, ae.entries)
        for entry in ae.entries:
            if name == "_meta_" and entry.type == EntryType.NORMAL and entry.data[0] in (ASSIGN_STREAM_OP, ASSIGN_CONSUMER_OP):
                body = json.loads(entry.data[1:])
                if entry.data[0] == ASSIGN_STREAM_OP:
                    names[body["stream"]["name"]] = body["group"]["name"]  # 2.15.1: the config as "stream"
                else:
                    names[f"{body['stream']}/{body['name']}"] = body["group"]["name"]
    return Recording(raw, groups, names, catchup)


UNCHANGED = "unchanged"  # record_groups.py: the same STREAM.MSG.GET answers as the point before


@cache
def _resolved() -> list[dict]:
    points, last = [], {}
    for p in load().raw["points"]:
        streams = {}
        for name, answers in p["streams"].items():
            msgs = last[name] if answers["msgs"] == UNCHANGED else answers["msgs"]
            last[name] = msgs
            streams[name] = {**answers, "msgs": msgs}
        points.append({**p, "streams": streams})
    return points


def point(step_prefix: str) -> dict:
    """The first recorded point whose step starts so (its answers resolved)."""
    return next(p for p in _resolved() if p["step"].startswith(step_prefix))
