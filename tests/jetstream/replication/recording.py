"""The 2.15.1 meta group recording (record_meta.py), decoded for the tests."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from natserver.jetstream.replication.entries import EntryError, decode_snapshot
from natserver.raft.wire import CATCHUP_PREFIX, AppendEntry, Entry, EntryType, node_id

DATA = Path(__file__).parent / "data" / "meta_nats_server_2.15.1.json"


@cache
def recording() -> dict:
    return json.loads(DATA.read_text())


def meta_appends() -> list[AppendEntry]:
    """The leader's appends to the meta group, in order (heartbeats included)."""
    return [AppendEntry.decode(bytes.fromhex(f["data"])) for f in recording()["frames"]
            if f["subject"] == "$NRG.AE._meta_"]


def meta_entries() -> list[tuple[int, Entry]]:
    """Each Normal entry the meta leader appended, by index, once."""
    out: dict[int, Entry] = {}
    for ae in meta_appends():
        for i, entry in enumerate(ae.entries):
            if entry.type == EntryType.NORMAL:
                out[ae.pindex + 1 + i] = entry
    return sorted(out.items())


def meta_snapshot() -> tuple[int, bytes]:
    """The meta snapshot the new leader sent the restarted follower: (its index, its data).
    Catch-ups of the stream groups go to $NRG.CR. inboxes too: the meta group's is the one
    whose snapshot is the JSON list of stream assignments."""
    for f in recording()["frames"]:
        if f["subject"].startswith(CATCHUP_PREFIX):
            ae = AppendEntry.decode(bytes.fromhex(f["data"]))
            if ae.entries and ae.entries[0].type == EntryType.SNAPSHOT:
                try:
                    if decode_snapshot(ae.entries[0].data):
                        return ae.pindex, ae.entries[0].data
                except EntryError:
                    continue
    raise AssertionError("no meta snapshot recorded")


def peer_ids() -> dict[str, str]:
    """Server name -> RAFT node id."""
    return {name: node_id(name) for name in recording()["servers"]}
