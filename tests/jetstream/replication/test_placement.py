"""Placement as 2.15.1's meta leader does it: the recorded creates replayed against the tagged
cluster record_meta.py ran (n1 az:1 ssd, n2 az:2 ssd, n3 az:3 hdd with a 10 MB file store):
the same errors, word for word, and peer sets 2.15.1 chose among those natserver may choose;
likewise a cluster with a unique tag prefix (record_meta.py's second recording); then the rules the recording does not reach (excluded tags, !jetstream, unique tags, offline
peers, existing peers, consumer groups, preferred leaders), and determinism by seed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from natserver.jetstream.replication.entries import MetaOp, RaftGroup, StreamAssignment, decode_entry
from natserver.jetstream.replication.placement import (
    PeerInfo,
    PlacementError,
    consumer_replicas,
    create_group_for_consumer,
    create_group_for_stream,
    select_peer_group,
    set_preferred,
)
from natserver.jetstream.replication.state import MetaState
from natserver.raft.wire import node_id
from tests.jetstream.replication.recording import meta_entries, peer_ids, recording

IDS = peer_ids()
MB = 1 << 20
SEEDS = range(40)


def recorded_peers() -> list[PeerInfo]:
    servers = recording()["servers"]
    return [PeerInfo(IDS[name], name, "C", list(info["tags"]), max_memory=256 * MB,
                     max_store=(10 * MB if info["max_file_store"] == "10MB" else 1 << 30))
            for name, info in servers.items()]


def creates() -> list[tuple[dict, dict, MetaState]]:
    """Each recorded STREAM.CREATE: its config, 2.15.1's answer, the meta state it met."""
    state = MetaState("")
    entries = iter(meta_entries())
    out = []
    for req in recording()["requests"]:
        if req["subject"].startswith("$JS.API.STREAM.CREATE."):
            out.append((req["request"], req["response"], state_copy(state)))
        if "error" not in req["response"] and not req["subject"].startswith("$JS.API.STREAM.INFO"):
            index, entry = next(entries)
            state.apply(index, entry)
    return out


def state_copy(state: MetaState) -> MetaState:
    copy = MetaState("")
    copy.apply_snapshot(state.snapshot())
    return copy


def reserved(streams: list[StreamAssignment], peer: PeerInfo) -> PeerInfo:
    """A peer's reserved storage as its statsz reports it: the max_bytes of its streams."""
    for sa in streams:
        if sa.group and peer.id in sa.group.peers and sa.config.get("max_bytes", -1) > 0:
            if sa.config.get("storage") == "memory":
                peer.reserved_memory += sa.config["max_bytes"]
            else:
                peer.reserved_store += sa.config["max_bytes"]
    return peer


CREATES = creates()


@pytest.mark.parametrize(("config", "answer", "state"), CREATES, ids=[c["name"] for c, _, _ in CREATES])
def test_recorded_creates_place_as_2_15_1(config, answer, state):
    recorded = {sa.name: sa for _, e in meta_entries() for op, sa in [decode_entry(e.data)]
                if op == MetaOp.ASSIGN_STREAM}
    outcomes = set()
    for seed in SEEDS:
        streams = state.all_streams()
        peers = [reserved(streams, p) for p in recorded_peers()]
        group = create_group_for_stream(config, "C", [], peers, streams, random.Random(seed))
        if "error" in answer:
            assert isinstance(group, PlacementError)
            assert group.api_error().to_json() == answer["error"]
            continue
        assert isinstance(group, RaftGroup)
        assert len(group.peers) == config["num_replicas"] and group.cluster == "C"
        assert group.storage == config["storage"] and group.preferred in group.peers
        assert group.name.startswith(f"S-R{config['num_replicas']}{config['storage'][0].upper()}-")
        outcomes.add(frozenset(group.peers))
    if "error" not in answer:
        assert frozenset(recorded[config["name"]].group.peers) in outcomes


def peer(name: str, tags=(), cluster="C", **kw) -> PeerInfo:
    return PeerInfo(f"id-{name}", name, cluster, list(tags), max_memory=kw.pop("max_memory", MB),
                    max_store=kw.pop("max_store", 100 * MB), **kw)


def place(config: dict, peers: list[PeerInfo], seed: int = 1, **kw):
    return select_peer_group(config.get("num_replicas", 1), kw.pop("cluster", "C"), config, peers, [],
                             random.Random(seed), **kw)


def test_excluded_tags_and_the_jetstream_exclusion():
    peers = [peer("a", ["ssd"]), peer("b", ["ssd", "slow"]), peer("c", ["!jetstream"])]
    assert place({"num_replicas": 1, "placement": {"tags": ["ssd", "!slow"]}}, peers) == ["id-a"]
    err = place({"num_replicas": 2, "placement": {"tags": ["ssd", "!slow"]}}, peers)
    assert err.text() == "no suitable peers for placement, exclude tag set, tags excluded ['slow']"
    assert place({"num_replicas": 1, "placement": {"tags": ["SSD"]}}, peers[:1]) == ["id-a"]


def test_unique_tag_prefix():
    peers = [peer("a", ["az:1"]), peer("b", ["az:1"]), peer("c", ["az:2"]), peer("d")]
    for seed in SEEDS:
        chosen = place({"num_replicas": 2}, peers, seed, unique_tag="az:")
        assert "id-c" in chosen and "id-d" not in chosen
    err = place({"num_replicas": 3}, peers, unique_tag="az:")
    assert err.text() == "no suitable peers for placement, server tag not unique"
    # Asking for a tag of the prefix turns the rule off.
    assert len(place({"num_replicas": 2, "placement": {"tags": ["az:1"]}}, peers, unique_tag="az:")) == 2


def test_offline_and_unreported_peers():
    peers = [peer("a", offline=True), peer("b"), peer("c", reported=False)]
    # Offline peers are candidates after the online ones (when a quorum is online).
    for seed in SEEDS:
        chosen = place({"num_replicas": 3}, peers[:2] + [peer("d")], seed)
        assert chosen[2] == "id-a" and set(chosen) == {"id-a", "id-b", "id-d"}
    assert place({"num_replicas": 2}, peers).offline
    # ... but not for a quorum: R3 of one online peer.
    err = place({"num_replicas": 3}, peers[:2] + [peer("d", offline=True)])
    assert err.text() == "no suitable peers for placement, peer offline"
    # Never heard from: not a candidate.
    assert place({"num_replicas": 3}, peers).text() == "no suitable peers for placement, peer offline"
    assert place({"num_replicas": 1}, [], cluster="C").text() == (
        "no suitable peers for placement, jetstream not enabled in cluster")
    assert place({"num_replicas": 1}, peers, cluster="").misc


def test_storage_available_and_ordering():
    peers = [peer("small", max_store=10 * MB), peer("big", max_store=1000 * MB), peer("mid", max_store=100 * MB)]
    for seed in SEEDS:
        assert place({"num_replicas": 1}, peers, seed) == ["id-big"]  # the most available first
    peers[1].reserved_store = 995 * MB  # 5 MB left: after the others
    assert place({"num_replicas": 2, "max_bytes": 8 * MB}, peers) in (["id-mid", "id-small"],)
    err = place({"num_replicas": 1, "max_bytes": 200 * MB}, peers)
    assert err.text() == "no suitable peers for placement, insufficient storage"
    mem = place({"num_replicas": 1, "storage": "memory", "max_bytes": 2 * MB}, peers)
    assert mem.no_storage


def test_replicated_streams_go_to_the_peers_with_fewest_replicated_assets():
    peers = [peer(n) for n in "abc"] + [peer("d")]
    streams = [StreamAssignment({"acc": "A"}, "2026-01-01T00:00:00Z", {"name": f"S{i}"},
                                RaftGroup(f"S-R2F-{i:08d}", ["id-a", "id-b"], "file")) for i in range(2)]
    for seed in SEEDS:
        chosen = select_peer_group(2, "C", {"num_replicas": 2}, peers, streams, random.Random(seed))
        assert set(chosen) == {"id-c", "id-d"}


def test_existing_peers_are_kept_first():
    peers = [peer(n) for n in "abcd"]
    assert place({"num_replicas": 1}, peers, existing=["id-x", "id-y"]) == ["id-x"]
    chosen = place({"num_replicas": 3}, peers, existing=["id-a"], ignore=["id-b"])
    assert chosen[0] == "id-a" and "id-b" not in chosen and len(chosen) == 3


def test_alternate_clusters_and_accumulated_errors():
    peers = [peer("a", ["x"], "C1"), peer("b", ["y"], "C2")]
    cfg = {"name": "S", "num_replicas": 1, "placement": {"tags": ["y"]}}
    group = create_group_for_stream(cfg, "C1", ["C2"], peers, [], random.Random(3))
    assert group.cluster == "C2" and group.peers == ["id-b"] and group.preferred == "id-b"
    err = create_group_for_stream(dict(cfg, placement={"tags": ["z"]}), "C1", ["C2"], peers, [], random.Random(3))
    assert err.no_match_tags == ["z"]
    # placement.cluster: that one only.
    err = create_group_for_stream(dict(cfg, placement={"cluster": "C1", "tags": ["y"]}), "C1", ["C2"], peers, [],
                                  random.Random(3))
    assert isinstance(err, PlacementError)


def test_same_seed_same_group():
    peers = [peer(n) for n in "abcde"]
    cfg = {"name": "S", "num_replicas": 3}
    one = create_group_for_stream(cfg, "C", [], peers, [], random.Random(7))
    two = create_group_for_stream(cfg, "C", [], peers, [], random.Random(7))
    assert one == two
    assert len({tuple(create_group_for_stream(cfg, "C", [], peers, [], random.Random(s)).peers) for s in SEEDS}) > 1


def test_consumer_groups():
    peers = [peer(n) for n in "abc"]
    stream = StreamAssignment({"acc": "A"}, "2026-01-01T00:00:00Z",
                              {"name": "S", "num_replicas": 3, "storage": "file", "retention": "limits"},
                              RaftGroup("S-R3F-abcdefgh", ["id-a", "id-b", "id-c"], "file", "C"))
    durable = create_group_for_consumer({"durable_name": "D"}, stream, peers, random.Random(1))
    assert durable.peers == ["id-a", "id-b", "id-c"] and durable.name.startswith("C-R3F-")
    ephemeral = create_group_for_consumer({}, stream, peers, random.Random(1))
    assert len(ephemeral.peers) == 1 and ephemeral.name.startswith("C-R1F-")
    mem = create_group_for_consumer({"durable_name": "M", "num_replicas": 1, "mem_storage": True}, stream, peers,
                                    random.Random(1))
    assert mem.storage == "memory" and mem.name.startswith("C-R1M-")
    assert create_group_for_consumer({"num_replicas": 5}, stream, peers, random.Random(1)).misc
    peers[0].offline = peers[1].offline = True
    assert create_group_for_consumer({"durable_name": "D"}, stream, peers, random.Random(1)).offline
    assert consumer_replicas({}, {"num_replicas": 3, "retention": "interest"}) == 3
    assert consumer_replicas({"num_replicas": 2}, {"num_replicas": 3}) == 2


def test_preferred_is_an_online_peer():
    peers = [peer("a", offline=True), peer("b"), peer("c")]
    for seed in SEEDS:
        group = RaftGroup("S-R3F-abcdefgh", ["id-a", "id-b", "id-c"], "file")
        set_preferred(group, peers, random.Random(seed))
        assert group.preferred in ("id-b", "id-c")
    group = RaftGroup("S-R2F-abcdefgh", ["id-a", "id-x"], "file")
    set_preferred(group, peers, random.Random(0))
    assert group.preferred in ("id-a", "id-x")


UNIQUE = json.loads((Path(__file__).parent / "data" / "placement_unique_tag_nats_server_2.15.1.json").read_text())


@pytest.mark.parametrize("index", range(len(UNIQUE["requests"])),
                         ids=[r["request"]["name"] for r in UNIQUE["requests"]])
def test_recorded_unique_tag_creates_place_as_2_15_1(index):
    """2.15.1 with ``unique_tag: "az:"`` (n1, n2 in az:1; n3 in az:2): its errors word for word,
    its peers among natserver's outcomes, the streams before counted as it counts them."""
    ids = {name: node_id(name) for name in UNIQUE["servers"]}
    streams = []
    for i, req in enumerate(UNIQUE["requests"][:index]):
        if "error" not in req["response"]:
            c = req["response"]["cluster"]
            names = [c["leader"]] + [r["name"] for r in c.get("replicas", [])]
            streams.append(StreamAssignment({"acc": "APP"}, "2026-01-01T00:00:00Z", req["request"],
                                            RaftGroup(f"S-R{len(names)}F-{i:08d}", [ids[n] for n in names], "file")))
    req = UNIQUE["requests"][index]
    outcomes = set()
    for seed in SEEDS:
        peers = [PeerInfo(ids[n], n, "C", info["tags"], max_memory=256 * MB, max_store=1 << 30)
                 for n, info in UNIQUE["servers"].items()]
        group = create_group_for_stream(req["request"], "C", [], peers, streams, random.Random(seed),
                                        unique_tag=UNIQUE["unique_tag"])
        if "error" in req["response"]:
            assert isinstance(group, PlacementError) and group.api_error().to_json() == req["response"]["error"]
        else:
            outcomes.add(frozenset(group.peers))
    if "error" not in req["response"]:
        c = req["response"]["cluster"]
        assert frozenset(ids[n] for n in [c["leader"]] + [r["name"] for r in c.get("replicas", [])]) in outcomes
