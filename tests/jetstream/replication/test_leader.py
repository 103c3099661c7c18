"""The meta leader's proposals: the recorded 2.15.1 requests replayed through MetaLeader give
2.15.1's meta entries byte for byte once the random parts (group name, peers and preferred
leader, sync subject, ephemeral name) and the creation time are 2.15.1's; 2.15.1's placement
errors word for word; the checks against the table (idempotent creates, names in use, overlaps,
unknown streams and consumers) and what is in flight."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from natserver.jetstream import gotime
from natserver.jetstream.consumer import ConsumerConfig
from natserver.jetstream.errors import ApiError
from natserver.jetstream.replication.desired import desired_of
from natserver.jetstream.replication.entries import MetaOp, decode_entry, encode_entry
from natserver.jetstream.replication.leader import MetaLeader, delete_response
from natserver.jetstream.replication.placement import PeerInfo
from natserver.jetstream.replication.state import MetaState
from natserver.jetstream.stream import StreamConfig
from natserver.raft.wire import Entry, EntryType, node_id
from tests.jetstream.replication.recording import meta_entries
from tests.jetstream.replication.recording import recording as rec
from tests.jetstream.replication.test_placement import recorded_peers, reserved

CLIENT = {"acc": "APP", "user": "app", "server": "n1", "cluster": "C", "kind": "Client", "client_type": "nats",
          "jwt": "secret", "issuer_key": "key"}


def leader_for(state: MetaState, seed: int = 1) -> MetaLeader:
    leader = MetaLeader(state, "C", random.Random(seed), lambda: 1_800_000_000_000_000_000)
    leader.peers = recorded_peers()
    return leader


def call(leader: MetaLeader, req: dict, client: dict, reply: str):
    parts = req["subject"].split(".")
    kind, op, body = parts[2], parts[3], req["request"]
    if kind == "STREAM" and op == "CREATE":
        return leader.stream_create(client, "APP", req["subject"], reply, StreamConfig.from_json(body))
    if kind == "STREAM" and op == "UPDATE":
        return leader.stream_update(client, "APP", req["subject"], reply, StreamConfig.from_json(body))
    if kind == "STREAM" and op == "DELETE":
        return leader.stream_delete(client, "APP", req["subject"], reply, parts[4])
    if kind == "CONSUMER" and op == "CREATE":
        cfg = ConsumerConfig.from_json(body["config"])
        name = parts[5] if len(parts) > 5 else ""
        if name:
            cfg.name = name  # (the API layer's: the subject's name is the consumer's)
        return leader.consumer_create(client, "APP", req["subject"], reply, parts[4], cfg, name)
    if kind == "CONSUMER" and op == "DELETE":
        return leader.consumer_delete(client, "APP", req["subject"], reply, parts[4], parts[5])
    raise AssertionError(req["subject"])


def test_recorded_requests_give_2_15_1s_entries():
    state = MetaState("")
    leader = leader_for(state)
    entries = iter(meta_entries())
    proposed = 0
    for req in rec()["requests"]:
        for p in leader.peers:
            p.reserved_store = p.reserved_memory = 0
            reserved(state.all_streams(), p)
        if "error" in req["response"]:
            with pytest.raises(ApiError) as info:
                call(leader, req, CLIENT, "_R_.x")
            assert info.value.to_json() == req["response"]["error"]
            continue
        index, entry = next(entries)
        op, want = decode_entry(entry.data)
        leader.now_ns = lambda want=want: gotime.nanos(want.created)
        proposal = call(leader, req, dict(want.client, jwt="x"), want.reply)
        assert proposal.op == op
        got = copy.deepcopy(proposal.assignment)  # (compared with 2.15.1's random parts)
        assert got.client == want.client  # (jwt and issuer key left out, as forProposal)
        if op in (MetaOp.ASSIGN_STREAM, MetaOp.ASSIGN_CONSUMER):
            # What 2.15.1 drew at random: checked for shape, then taken from it.
            assert got.group.name[:6] == want.group.name[:6] and len(got.group.name) == len(want.group.name)
            assert len(got.group.peers) == len(want.group.peers) and got.group.preferred in got.group.peers
            got.group = copy.deepcopy(want.group)
            if op == MetaOp.ASSIGN_STREAM:
                assert got.sync.startswith("$JSC.SYNC.") and len(got.sync) == len(want.sync)
                got.sync = want.sync
            else:
                assert len(got.name) == len(want.name)
                got.name = want.name
        if op == MetaOp.REMOVE_STREAM and got.group.preferred and not want.group.preferred:
            # 2.15.1's table had the preferred leader cleared by then in one recording and not
            # in another (what clears it is not in the mirrored source): the rest must match.
            got.group.preferred = ""
        assert encode_entry(op, got) == entry.data, req["subject"]
        proposed += 1
        state.apply(index, entry)
        leader.applied(Entry(EntryType.NORMAL, proposal.data))  # (its own, as it proposed it)
        assert not leader.inflight_streams and not leader.inflight_consumers and leader.pending == 0
    assert proposed == len(meta_entries())


def applied_leader() -> MetaLeader:
    state = MetaState("")
    for index, entry in meta_entries():
        state.apply(index, entry)
    return leader_for(state)


def stream_cfg(**values) -> StreamConfig:
    return StreamConfig.from_json({"num_replicas": 1, "storage": "file", **values})


def test_stream_checks_against_the_table():
    leader = applied_leader()
    # An equal create: the same group, sync subject and creation time.
    r1a = leader.state.stream("APP", "R1A")
    again = leader.stream_create(CLIENT, "APP", "s", "r", StreamConfig.from_json(r1a.config))
    assert (again.assignment.group, again.assignment.sync, again.assignment.created) == (
        r1a.group, r1a.sync, r1a.created)
    assert "jwt" not in again.data.decode() and '"issuer_key"' not in again.data.decode()
    with pytest.raises(ApiError, match="stream name already in use"):
        leader.stream_create(CLIENT, "APP", "s", "r", stream_cfg(name="R1A", subjects=["other"]))
    with pytest.raises(ApiError, match="subjects overlap"):
        leader.stream_create(CLIENT, "APP", "s", "r", stream_cfg(name="NEW", subjects=["r1a.x"]))
    with pytest.raises(ApiError, match="stream not found"):
        leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="NOPE"))
    with pytest.raises(ApiError, match="stream not found"):
        leader.stream_delete(CLIENT, "APP", "s", "r", "NOPE")
    with pytest.raises(ApiError, match="can not change storage type"):
        leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="R1A", subjects=["r1a.>"], storage="memory",
                                                                   placement={"tags": ["ssd"]}))
    # A replica change of a stream with consumers is placed as any (three ssd servers wanted
    # here, two exist); a move, a move with a scale: refused.
    assert leader.state.stream("APP", "R1A").consumers
    with pytest.raises(ApiError, match="no suitable peers for placement, tags not matched") as info:
        leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="R1A", subjects=["r1a.>"], num_replicas=3,
                                                                   placement={"tags": ["ssd"]}))
    assert info.value.err_code == 10005
    with pytest.raises(ApiError, match="moving a clustered stream") as info:
        leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="R1A", subjects=["r1a.>"],
                                                                   placement={"tags": ["hdd"]}))
    assert info.value.err_code == 10069
    with pytest.raises(ApiError, match="can not move and scale") as info:
        leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="R1A", subjects=["r1a.>"], num_replicas=3,
                                                                   placement={"tags": ["hdd"]}))
    assert info.value.err_code == 10123


def test_in_flight_proposals_are_seen_until_applied():
    leader = applied_leader()
    new = leader.stream_create(CLIENT, "APP", "s", "r", stream_cfg(name="NEW", subjects=["new.>"]))
    with pytest.raises(ApiError, match="subjects overlap"):
        leader.stream_create(CLIENT, "APP", "s", "r", stream_cfg(name="NEW2", subjects=["new.x"]))
    consumer = leader.consumer_create(CLIENT, "APP", "s", "r", "NEW", ConsumerConfig.from_json({"durable_name": "C"}),
                                      "C")
    assert consumer.assignment.group.peers == new.assignment.group.peers
    gone = leader.stream_delete(CLIENT, "APP", "s", "r", "NEW")
    assert leader.stream("APP", "NEW") is None
    with pytest.raises(ApiError, match="stream not found"):
        leader.stream_delete(CLIENT, "APP", "s", "r", "NEW")
    for p in (new, consumer, gone):
        leader.state.apply_op(p.op, decode_entry(p.data)[1])
        leader.applied(Entry(EntryType.NORMAL, p.data))
    assert not leader.inflight_streams and not leader.inflight_consumers
    assert leader.state.stream("APP", "NEW") is None


def test_several_proposals_of_one_stream_in_flight():
    """A create then an update in flight: once the create is applied the update is still what
    requests see; once it is applied too, the table. A leader change forgets what is in flight."""
    leader = applied_leader()
    create = leader.stream_create(CLIENT, "APP", "s", "r", stream_cfg(name="TWO", subjects=["two.>"]))
    update = leader.stream_update(CLIENT, "APP", "s", "r", stream_cfg(name="TWO", subjects=["two.>"], max_msgs=5))
    leader.state.apply_op(create.op, decode_entry(create.data)[1])
    leader.applied(Entry(EntryType.NORMAL, create.data))
    assert leader.stream("APP", "TWO").config["max_msgs"] == 5 and leader.pending == 1
    assert leader.state.stream("APP", "TWO").config["max_msgs"] == -1
    leader.state.apply_op(update.op, decode_entry(update.data)[1])
    leader.applied(Entry(EntryType.NORMAL, update.data))
    assert not leader.inflight_streams and leader.stream("APP", "TWO").config["max_msgs"] == 5
    leader.stream_delete(CLIENT, "APP", "s", "r", "TWO")
    assert leader.stream("APP", "TWO") is None
    leader.leader_changed()
    assert leader.stream("APP", "TWO") is not None and not leader.inflight_streams
    leader.applied(Entry(EntryType.PEER_STATE, b""))  # (not a meta op: nothing)
    leader.applied(Entry(EntryType.NORMAL, b"\x04"))


def test_consumer_checks():
    leader = applied_leader()
    with pytest.raises(ApiError, match="stream not found"):
        leader.consumer_create(CLIENT, "APP", "s", "r", "NOPE", ConsumerConfig.from_json({}))
    d2 = leader.state.consumer("APP", "R3B", "D2")
    same = leader.consumer_create(CLIENT, "APP", "s", "r", "R3B", ConsumerConfig.from_json(d2.config), "D2")
    assert (same.assignment.group, same.assignment.created) == (d2.group, d2.created)
    with pytest.raises(ApiError, match="consumer already exists"):
        leader.consumer_create(CLIENT, "APP", "s", "r", "R3B",
                               ConsumerConfig.from_json(dict(d2.config, max_deliver=5)), "D2", "create")
    # An update: the group and creation time kept, the new config proposed.
    changed = ConsumerConfig.from_json(dict(d2.config, max_ack_pending=7))
    update = leader.consumer_create(CLIENT, "APP", "s2", "r2", "R3B", changed, "D2")
    assert (update.assignment.group, update.assignment.created) == (d2.group, d2.created)
    assert update.assignment.config["max_ack_pending"] == 7 and update.assignment.subject == "s2"
    assert decode_entry(update.data) == (MetaOp.ASSIGN_CONSUMER, update.assignment)
    with pytest.raises(ApiError, match="deliver policy can not be updated"):
        leader.consumer_create(CLIENT, "APP", "s", "r", "R3B",
                               ConsumerConfig.from_json(dict(d2.config, deliver_policy="new")), "D2")
    # A replica change: the group's desired state (a scale down: its leader chooses the peers
    # kept; jsClusteredConsumerRequest), the actual peers unchanged.
    down = leader.consumer_create(CLIENT, "APP", "s", "r", "R3B",
                                  ConsumerConfig.from_json(dict(d2.config, num_replicas=1)), "D2")
    desired = desired_of(down.assignment.group)
    assert desired is not None and desired["scale_down"] and desired["peers"] == d2.group.peers
    assert down.assignment.group.peers == d2.group.peers and down.assignment.group.name == d2.group.name
    with pytest.raises(ApiError, match="consumer does not exist"):
        leader.consumer_create(CLIENT, "APP", "s", "r", "R3B", ConsumerConfig.from_json({"durable_name": "X"}), "X",
                               "update")
    with pytest.raises(ApiError, match="consumer not found"):
        leader.consumer_delete(CLIENT, "APP", "s", "r", "R3B", "NOPE")
    eph = leader.consumer_create(CLIENT, "APP", "s", "r", "R3B", ConsumerConfig.from_json({"ack_policy": "none"}))
    assert len(eph.assignment.name) == 8 and len(eph.assignment.group.peers) == 1
    assert eph.assignment.group.cluster == "C"


def test_delete_responses():
    leader = applied_leader()
    p = leader.stream_delete(CLIENT, "APP", "$JS.API.STREAM.DELETE.R1A", "_INBOX.1", "R1A")
    [ev] = leader.state.apply_op(p.op, p.assignment)
    want = next(r["response"] for r in rec()["requests"] if r["subject"] == "$JS.API.STREAM.DELETE.TAGS2")
    reply, body = delete_response(ev)
    assert reply == "_INBOX.1" and json.loads(body) == want
    p = leader.consumer_delete(CLIENT, "APP", "s", "_INBOX.2", "R3B", "D2")
    [ev] = leader.state.apply_op(p.op, p.assignment)
    want = next(r["response"] for r in rec()["requests"] if r["subject"] == "$JS.API.CONSUMER.DELETE.INC.GONE")
    assert delete_response(ev) == ("_INBOX.2", json.dumps(want, separators=(",", ":")).encode())


LIMITS = json.loads((Path(__file__).parent / "data" / "placement_account_limits_nats_server_2.15.1.json").read_text())
MB = 1 << 20


def test_recorded_account_limits_as_2_15_1():
    """2.15.1 with APP's limits {max_mem: 10MB, max_file: 30MB, max_streams: 3, max_consumers:
    5} (un-tiered: an R3 stream reserves three times its max_bytes): the same errors, in the
    same order of checks, and proposals where it created."""
    assert LIMITS["account_limits"] == "{max_mem: 10MB, max_file: 30MB, max_streams: 3, max_consumers: 5}"
    limits = {"max_memory": 10 * MB, "max_storage": 30 * MB, "max_streams": 3, "max_consumers": 5}
    state = MetaState("")
    leader = leader_for(state)
    leader.peers = [PeerInfo(node_id(n), n, "C", max_memory=1 << 30, max_store=1 << 30) for n in ("n1", "n2", "n3")]
    for i, req in enumerate(LIMITS["requests"]):
        cfg = StreamConfig.from_json(req["request"])
        if "error" in req["response"]:
            with pytest.raises(ApiError) as info:
                leader.stream_create(CLIENT, "APP", req["subject"], "r", cfg, limits)
            assert info.value.to_json() == req["response"]["error"], req["subject"]
        else:
            proposal = leader.stream_create(CLIENT, "APP", req["subject"], "r", cfg, limits)
            state.apply(i + 1, Entry(EntryType.NORMAL, proposal.data))
            leader.applied(Entry(EntryType.NORMAL, proposal.data))
    assert sorted(sa.name for sa in state.all_streams()) == ["L1", "L2", "M1"]
    # A tier that is not the stream's: no limits for it.
    with pytest.raises(ApiError, match="no JetStream default or applicable tiered limit present"):
        leader.stream_create(CLIENT, "APP", "s", "r", StreamConfig.from_json({"name": "T", "num_replicas": 3}),
                             dict(limits, tier="R1"))
