"""nats-server's RAFT frames: every frame recorded from a 2.15.1 cluster (record_traffic.py)
decodes and re-encodes to its bytes, and what it says agrees with the cluster it came from."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from natserver.raft import wire
from natserver.raft.wire import (
    AppendEntry,
    AppendEntryResponse,
    Entry,
    EntryType,
    PeerState,
    VoteRequest,
    VoteResponse,
    WireError,
)

RECORDING = json.loads((Path(__file__).parent / "data" / "nrg_traffic_nats_server_2.15.1.json").read_text())
FRAMES = RECORDING["frames"]
NODE_IDS = {wire.node_id(name): name for name in RECORDING["servers"]}


@pytest.mark.parametrize("frame", FRAMES, ids=[f"{i}-{f['subject']}" for i, f in enumerate(FRAMES)])
def test_recorded_frame_round_trips(frame):
    data = bytes.fromhex(frame["data"])
    decoded = wire.classify(frame["subject"], data)
    assert decoded.encode() == data
    # Each frame names one of the cluster's nodes by the id its server name hashes to.
    named = {AppendEntry: "leader", AppendEntryResponse: "peer", VoteRequest: "candidate", VoteResponse: "peer"}
    assert getattr(decoded, named[type(decoded)]) in NODE_IDS


def _decoded(kind):
    return [(f, wire.classify(f["subject"], bytes.fromhex(f["data"]))) for f in FRAMES
            if isinstance(wire.classify(f["subject"], bytes.fromhex(f["data"])), kind)]


def test_the_recording_has_every_kind_of_frame():
    kinds = {type(wire.classify(f["subject"], bytes.fromhex(f["data"]))) for f in FRAMES}
    assert kinds == {AppendEntry, AppendEntryResponse, VoteRequest, VoteResponse}
    subjects = {f["subject"].split(".")[1] for f in FRAMES}
    assert {"AE", "V", "R", "CR", "CP"} <= subjects


def test_group_names_and_the_meta_group():
    groups = {f["subject"].split(".", 2)[2] for f in FRAMES if f["subject"].startswith(("$NRG.AE.", "$NRG.V."))}
    assert wire.META_GROUP in groups
    streams = groups - {wire.META_GROUP}
    assert len(streams) == 1
    (stream,) = streams
    assert re.fullmatch(r"S-R3F-[0-9A-Za-z]{8}", stream)
    assert re.fullmatch(r"S-R3F-[0-9A-Za-z]{8}", wire.group_name("S", 3, "file", "any unique name"))
    assert wire.group_name("C", 1, "memory", "x").startswith("C-R1M-")


def test_inboxes_have_the_recorded_shape():
    replies = {f["reply"] for f in FRAMES if f["reply"]} | {f["subject"] for f in FRAMES}
    for reply in replies:
        assert re.fullmatch(r"\$NRG\.(AE|V)\.\S+|\$NRG\.(R|CR|CP)\.[0-9A-Za-z]{8}", reply), reply
    rng = random.Random(1)
    for make in (wire.inbox, wire.catchup_inbox, wire.progress_inbox):
        assert re.fullmatch(r"\$NRG\.(R|CR|CP)\.[0-9A-Za-z]{8}", make(rng))


def test_peer_states_list_the_three_servers():
    states = [PeerState.decode(e.data) for _, ae in _decoded(AppendEntry) for e in ae.entries
              if e.type == EntryType.PEER_STATE]
    assert states
    for state in states:
        assert sorted(state.known_peers) == sorted(NODE_IDS)
        assert state.cluster_size == 3


def test_appends_and_votes_follow_the_recorded_run():
    """The stream group's first leader is the first leader 2.15.1 reported, elected by a vote
    request of term 1; the second leader's vote request is of a later term; catch-up frames
    (to a $NRG.CR. inbox) carry the leader's term and a $NRG.CP. reply."""
    first, second = wire.node_id(RECORDING["first_leader"]), wire.node_id(RECORDING["second_leader"])
    votes = [vr for _, vr in _decoded(VoteRequest)]
    assert votes[0].candidate == first and votes[0].term == 1
    assert votes[-1].candidate == second and votes[-1].term > 1
    stream_appends = [ae for f, ae in _decoded(AppendEntry) if f["subject"].startswith("$NRG.AE.S-")]
    assert {ae.leader for ae in stream_appends} == {first, second}
    catchups = [(f, ae) for f, ae in _decoded(AppendEntry) if f["subject"].startswith("$NRG.CR.")]
    assert catchups
    for f, ae in catchups:
        assert ae.leader == second
        assert f["reply"].startswith("$NRG.CP.") or f["reply"].startswith("$NRG.R.")
    assert any(ae.lterm for _, ae in catchups)
    # A heartbeat: no entries, the leader's last entry as pterm/pindex, no leader's term.
    heartbeats = [ae for ae in stream_appends if not ae.entries]
    assert heartbeats and all(ae.lterm == 0 and ae.has_lterm for ae in heartbeats)
    # Normal entries carry the published messages.
    payloads = b"".join(e.data for ae in stream_appends for e in ae.entries if e.type == EntryType.NORMAL)
    for i in range(8):
        assert f"order {i}".encode() in payloads


def test_node_id_is_nats_servers_hash():
    # events.go getHash: sha256, each of the first 8 bytes mod 62 into the digits
    assert wire.node_id("n1") == "fjFyEjc1"
    assert {wire.node_id(n) for n in ("n1", "n2", "n3")} == set(NODE_IDS)


@pytest.mark.parametrize("frame", [b"", b"x" * 41, b"\0" * 40 + b"\1\0"])
def test_short_append_entries_are_refused(frame):
    with pytest.raises(WireError):
        AppendEntry.decode(frame)


def test_bad_frames_are_refused():
    ae = AppendEntry("abcdefgh", 1, 0, 0, 0, (Entry(0, b"data"),)).encode()
    with pytest.raises(WireError):
        AppendEntry.decode(ae[:-3])  # an entry cut short
    with pytest.raises(WireError):
        AppendEntry("abc", 1, 0, 0, 0).encode()  # a leader id is 8 characters
    with pytest.raises(WireError):
        AppendEntryResponse.decode(b"\0" * 24)
    with pytest.raises(WireError):
        VoteRequest.decode(b"\0" * 31)
    with pytest.raises(WireError):
        VoteResponse.decode(b"\0" * 18)
    with pytest.raises(WireError):
        PeerState.decode(b"\3\0\0\0\3\0\0\0abcdefgh")  # 3 peers announced, 1 there
    with pytest.raises(WireError):
        wire.classify("$NRG.RP.G", b"short")
    with pytest.raises(WireError):
        wire.classify("$JS.API.INFO", b"")


ids = st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=8, max_size=8)
u64 = st.integers(0, 2**64 - 1)
entries = st.lists(st.builds(Entry, st.integers(0, 6), st.binary(max_size=64)), max_size=5).map(tuple)


@given(st.builds(AppendEntry, ids | st.just(""), u64, u64, u64, u64, entries, u64, st.booleans()))
def test_append_entries_round_trip(ae):
    if not ae.has_lterm:
        ae = AppendEntry(ae.leader, ae.term, ae.commit, ae.pterm, ae.pindex, ae.entries, 0, False)
    assert AppendEntry.decode(ae.encode()) == ae


@given(st.one_of(st.builds(AppendEntryResponse, u64, u64, ids, st.booleans()),
                 st.builds(VoteRequest, u64, u64, u64, ids),
                 st.builds(VoteResponse, u64, ids, st.booleans(), st.booleans()),
                 st.builds(PeerState, st.lists(ids, max_size=7).map(tuple), st.integers(0, 2**32 - 1),
                           st.integers(0, 2**16 - 1))))
def test_fixed_frames_round_trip(frame):
    assert type(frame).decode(frame.encode()) == frame


@given(u64)
def test_uvarint_is_gos(value):
    encoded = wire.uvarint(value)
    assert wire.read_uvarint(encoded, 0) == (value, len(encoded))
    assert len(encoded) <= 10
