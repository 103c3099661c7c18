"""The meta group's entries and snapshot: every entry 2.15.1's meta leader appended (recorded
by record_meta.py) decodes and re-encodes to its bytes; the meta snapshot it sent a restarted
follower decodes, its JSON re-encodes to the same bytes, and natserver's S2 block of it
decodes to that JSON (2.15.1's S2 encoder chooses other matches: the compressed bytes differ)."""

from __future__ import annotations

import cramjam
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from natserver.jetstream.replication import entries
from natserver.jetstream.replication.entries import (
    ConsumerAssignment,
    EntryError,
    MetaOp,
    RaftGroup,
    StreamAssignment,
    decode_entry,
    decode_snapshot,
    encode_entry,
    encode_snapshot,
)
from natserver.jetstream.replication.state import MetaState
from natserver.protocol import s2
from tests.jetstream.replication.recording import meta_entries, meta_snapshot, peer_ids, recording

ENTRIES = meta_entries()


@pytest.mark.parametrize(("index", "entry"), ENTRIES, ids=[str(i) for i, _ in ENTRIES])
def test_recorded_entry_round_trips(index, entry):
    op, assignment = decode_entry(entry.data)
    assert encode_entry(op, assignment) == entry.data
    assert assignment.group is not None and set(assignment.group.peers) <= set(peer_ids().values())
    assert assignment.account == "APP"


def test_recorded_ops_are_the_scenarios():
    """The recorded scenario, op by op: creates, the update, consumer adds, a consumer and a
    stream removed; the ephemeral consumer's name is the one 2.15.1 generated."""
    ops = [decode_entry(e.data) for _, e in ENTRIES]
    names = [(op.name, a.name if isinstance(a, StreamAssignment) else f"{a.stream}>{a.name}") for op, a in ops]
    assert names[:6] == [("ASSIGN_STREAM", n) for n in ("R1A", "R3B", "TAGS2", "HDD", "INC", "BIG2")]
    assert names[6] == ("UPDATE_STREAM", "R3B")
    assert ("REMOVE_CONSUMER", "INC>GONE") in names and ("REMOVE_STREAM", "TAGS2") in names
    ephemeral = [a for op, a in ops if op == MetaOp.ASSIGN_CONSUMER and "durable_name" not in a.config]
    assert len(ephemeral) == 1 and len(ephemeral[0].name) == 8
    # Group names: S-R<n><F|M>-<8 base-62 digits>, the peer count and storage agreeing.
    for _op, a in ops:
        g = a.group
        assert g.name.startswith(("S-R", "C-R")) and g.name[3] == str(len(g.peers))
        assert g.name[4] == {"file": "F", "memory": "M"}[g.storage] and len(g.name.split("-")[2]) == 8


def test_recorded_snapshot_decodes_and_its_json_re_encodes():
    _, data = meta_snapshot()
    raw = s2.decode_block(data)
    streams = decode_snapshot(data)
    assert entries.snapshot_json(streams) == raw
    # What was left: TAGS2 and HDD removed, INC's consumer and R3B's D1 removed.
    durables = {sa.name: sorted(c for c in sa.consumers if sa.consumers[c].config.get("durable_name"))
                for sa in streams}
    assert durables == {"R1A": ["DA"], "R3B": ["D2", "R1C"], "LATE": [], "INC": [], "BIG2": [], "LATE3": []}
    again = encode_snapshot(streams)
    assert s2.decode_block(again) == raw
    assert decode_snapshot(again) == streams
    # The snapshot keeps only account and cluster of the client (forAssignmentSnap).
    assert all(sa.client == {"acc": "APP", "cluster": "C"} for sa in streams)


def test_snapshot_of_nothing_is_empty():
    assert encode_snapshot([]) == b""
    assert decode_snapshot(b"") == []


def test_compressed_consumer_assignment_round_trips():
    """assignCompressedConsumerOp (2.15.1 proposes it for a restored stream's consumers, not in
    the recording): an S2 stream of the same JSON, with a consumer state."""
    op, ca = next(decode_entry(e.data) for _, e in ENTRIES if e.data[0] == MetaOp.ASSIGN_CONSUMER)
    ca.state = {"delivered": {"consumer_seq": 5, "stream_seq": 9}, "ack_floor": {"consumer_seq": 3, "stream_seq": 7}}
    data = encode_entry(MetaOp.ASSIGN_COMPRESSED_CONSUMER, ca)
    assert data[0] == 9 and data[1:11] == s2.STREAM_IDENTIFIER
    op2, ca2 = decode_entry(data)
    assert op2 == MetaOp.ASSIGN_COMPRESSED_CONSUMER and ca2 == ca
    assert encode_entry(MetaOp.ASSIGN_CONSUMER, ca2)[1:] == encode_entry(MetaOp.ASSIGN_CONSUMER, ca)[1:]


@pytest.mark.parametrize(("data", "text"), [
    (b"", "bad entry op"),
    (b"\x04{}", "unknown meta entry op type: 4"),
    (b"\x00{", "invalid JSON"),
    (b"\x00{}", "stream assignment without a stream configuration"),
    (b"\x01{\"stream\":\"S\"}", "consumer assignment without a consumer configuration"),
    (b"\x09not s2", "s2: corrupt input"),
])
def test_bad_entries_are_refused(data, text):
    with pytest.raises(EntryError, match=text):
        decode_entry(data)


def test_op_must_match_the_assignment():
    _, sa = decode_entry(ENTRIES[0][1].data)
    with pytest.raises(EntryError):
        encode_entry(MetaOp.ASSIGN_CONSUMER, sa)


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(name=_text, peers=st.lists(st.text("abcXYZ0189", min_size=8, max_size=8), max_size=5),
       subject=_text, reply=_text, desc=_text, extra=st.booleans())
def test_stream_assignment_round_trips(name, peers, subject, reply, desc, extra):
    group = RaftGroup("S-R1F-abcdefgh", peers, "memory", "C", peers[0] if peers else "",
                      {"scale_up": True} if extra else {})
    sa = StreamAssignment({"acc": "A", "svc": "B"}, "2026-11-28T17:20:49.619063796Z",
                          {"name": name, "description": desc, "subjects": [">"]}, group,
                          "$JSC.SYNC.x", subject, reply)
    for op in (MetaOp.ASSIGN_STREAM, MetaOp.UPDATE_STREAM, MetaOp.REMOVE_STREAM):
        data = encode_entry(op, sa)
        assert data.endswith(b"\n") and b">" not in data and b"<" not in data  # Go's HTML escapes
        assert decode_entry(data) == (op, sa)
    assert sa.account == "B"  # a service import's account is the stream's
    ca = ConsumerAssignment(None, "2026-11-28T17:20:49Z", name, "S", {"ack_policy": "none"}, group)
    assert decode_entry(encode_entry(MetaOp.REMOVE_CONSUMER, ca)) == (MetaOp.REMOVE_CONSUMER, ca)
    assert recording()["cluster"] == "C"


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["client", "created", "stream", "group", "name", "peers", "store",
                                          "sync", "consumer", "acc", "svc", "Consumers", "state"]),
                         inner, max_size=5), max_leaves=12)


@given(op=st.sampled_from([0, 1, 2, 3, 9, 11, 4, 200]), body=_json)
def test_any_entry_decodes_or_is_refused(op, body):
    """Whatever a peer sends: an assignment, or EntryError (never another exception), and an
    assignment decoded is one MetaState can apply."""
    data = bytes([op]) + orjson.dumps(body)
    try:
        decoded = decode_entry(data)
    except EntryError:
        return
    MetaState("x").apply_op(*decoded)


@given(data=st.binary(max_size=64))
def test_any_snapshot_decodes_or_is_refused(data):
    try:
        streams = decode_snapshot(data)
    except EntryError:
        return
    MetaState("x").apply_snapshot(encode_snapshot(streams))


@given(items=st.lists(_json, max_size=3))
def test_any_snapshot_json_decodes_or_is_refused(items):
    data = bytes(cramjam.snappy.compress_raw(orjson.dumps(items)))
    try:
        streams = decode_snapshot(data)
    except EntryError:
        return
    MetaState("x").apply_snapshot(encode_snapshot(streams))
