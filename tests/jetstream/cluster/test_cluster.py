"""JetStream in a cluster of three in-process natservers (natserver.testing_cluster, real
clocks, bounded polls, a hard timeout on each test): the meta leader elected, R1 streams
created through each node and placed by the meta leader, published to from another node
with acks, read by a pull and a push consumer connected elsewhere, listed, deleted; the
meta leader's step-down; a node restarted (its streams and the meta state recovered from
its store). Answers compared with what 2.15.1 answered in a 3-node cluster
(data/r1_nats_server_2.15.1.json, ``python -m tests.jetstream.cluster.record_r1``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from natserver.auth.users import User
from natserver.routing.accounts import AccountConfig
from natserver.testing_cluster import NatsCluster

DATA = Path(__file__).parent / "data" / "r1_nats_server_2.15.1.json"
TEST_TIMEOUT = 120.0  # seconds of real time for a whole test (the hard timeout)
STEP = 30.0  # seconds for one step to settle (an election: 4-9 s, once or twice)
POLL = 0.05  # seconds between two looks (not a timing assertion)
REQUEST_TIMEOUT = 5.0
_T = "io.nats.jetstream.api.v1."
ACCOUNTS = [AccountConfig("SYS"), AccountConfig("APP", jetstream=True), AccountConfig("NOJS")]
USERS = [User("sys", "pw", account="SYS"), User("app", "pw", account="APP"), User("nojs", "pw", account="NOJS")]
QUIET = 0.5  # seconds without more answers to a request (counting them; not a timing assertion)


def recorded(subject: str, index: int = 0) -> dict:
    """2.15.1's answer to the index-th request on ``subject``."""
    answers = [r["response"] for r in json.loads(DATA.read_text())["requests"] if r["subject"] == subject]
    return answers[index]


def same_shape(ours, theirs, path: str = "") -> None:
    """The same keys in the same order, recursively (values may differ: times, names)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert list(ours) == list(theirs), f"{path}: {list(ours)} != {list(theirs)}"
        for key in theirs:
            if key != "metadata":  # (natserver's API level is its own: _nats.level)
                same_shape(ours[key], theirs[key], f"{path}.{key}")
    elif isinstance(theirs, list) and theirs and isinstance(theirs[0], dict):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for a, b in zip(ours, theirs):
            same_shape(a, b, path + "[]")


def cluster_options() -> dict:
    return {"accounts": ACCOUNTS, "users": USERS, "system_account": "SYS"}


async def connect(url: str, user: str = "app") -> nats.NATS:
    return await nats.connect(url, user=user, password="pw", allow_reconnect=False, connect_timeout=REQUEST_TIMEOUT)


async def api(nc, subject: str, body=None, timeout: float = REQUEST_TIMEOUT) -> dict:
    payload = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(subject, payload, timeout=timeout)
    return json.loads(msg.data)


async def until(predicate, what: str, step: float = STEP):
    """Poll an async ``predicate`` until it returns something true; its value."""
    deadline = time.monotonic() + step
    last = None
    while time.monotonic() < deadline:
        try:
            last = await predicate()
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(POLL)
    raise AssertionError(f"not {what} within {step} s (last: {last!r})")


async def publish(nc, subject: str, data: bytes):
    """A publish acknowledged by the stream: retried while the stream's interest is on its way
    to this client's server (a new stream's RS+ and the create's answer take different
    routes: the account's and the system account's, as with nats-server's route pooling)."""
    async def attempt():
        try:
            return await nc.jetstream().publish(subject, data, timeout=REQUEST_TIMEOUT)
        except nats.js.errors.NoStreamResponseError:
            return None

    return await until(attempt, f"{subject} acknowledged")


async def jsz_all(sys_nc) -> dict[str, dict]:
    """Every server's /jsz (server name -> its data), through the system account."""
    inbox = sys_nc.new_inbox()
    sub = await sys_nc.subscribe(inbox)
    await sys_nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
    out: dict[str, dict] = {}
    try:
        while len(out) < 3:
            msg = await sub.next_msg(timeout=1.0)
            answer = json.loads(msg.data)
            out[answer["server"]["name"]] = answer["data"]
    except nats.errors.TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    return out


async def meta_leader(sys_nc) -> str | None:
    """The meta leader every server agrees on, once every server is a peer of the meta
    group (the leader adds them as it hears from them): None until then."""
    views = await jsz_all(sys_nc)
    leaders = {data.get("meta_cluster", {}).get("leader") for data in views.values()}
    sizes = {data.get("meta_cluster", {}).get("cluster_size") for data in views.values()}
    if len(views) == 3 and len(leaders) == 1 and None not in leaders and sizes == {3}:
        return leaders.pop()
    return None


def meta_answers(nc):
    """A predicate for ``until``: the meta group has a leader (in a cluster only the meta leader
    answers ACCOUNT INFO). After a node's stop its election (4-9 s) is its own: a consumer's or
    a stream's group may be led again first, and until then a meta request (a create, a delete,
    a pause) goes unanswered, with 2.15.1 too; a client retries, the tests wait for this."""
    async def answered():
        return "error" not in await api(nc, "$JS.API.INFO", timeout=1.0)
    return answered


def run(main) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c


def test_r1_streams_placed_by_the_meta_leader_and_used_across_the_cluster(cluster):
    async def main():
        ncs = [await connect(url) for url in cluster.urls]
        sys_nc = await connect(cluster.urls[0], "sys")
        try:
            leader = await until(lambda: meta_leader(sys_nc), "a meta leader elected")
            views = await jsz_all(sys_nc)
            names = {node.options.server_name for node in cluster.servers}
            assert leader in names
            for name, data in views.items():
                meta = data["meta_cluster"]
                assert meta["name"] == cluster.name and meta["cluster_size"] == 3 and meta["quorum_needed"] == 2
                assert sorted(r["name"] for r in meta["replicas"]) == sorted(names - {name})

            info = await api(ncs[1], "$JS.API.INFO")
            same_shape(info, recorded("$JS.API.INFO"))
            assert info["streams"] == 0
            # An account without JetStream is answered once, by its client's server.
            nojs = await connect(cluster.urls[1], "nojs")
            inbox = nojs.new_inbox()
            answers = await nojs.subscribe(inbox)
            await nojs.publish("$JS.API.INFO", b"", reply=inbox)
            first = json.loads((await answers.next_msg(timeout=REQUEST_TIMEOUT)).data)
            assert first["error"]["err_code"] == 10039
            with pytest.raises(nats.errors.TimeoutError):
                await answers.next_msg(timeout=QUIET)
            await nojs.close()

            # One stream created through each node, placed by the meta leader.
            hosts = {}
            for i, nc in enumerate(ncs):
                created = await api(nc, f"$JS.API.STREAM.CREATE.S{i}", {"name": f"S{i}", "subjects": [f"s{i}.>"]})
                assert created["type"] == _T + "stream_create_response" and created["did_create"] is True, created
                same_shape(created, recorded("$JS.API.STREAM.CREATE.S1"))
                assert created["cluster"]["name"] == cluster.name and created["cluster"]["leader"] in names
                hosts[f"S{i}"] = created["cluster"]["leader"]
            again = await api(ncs[2], "$JS.API.STREAM.CREATE.S0", {"name": "S0", "subjects": ["s0.>"]})
            assert "did_create" not in again and again["created"] == (
                await api(ncs[0], "$JS.API.STREAM.INFO.S0"))["created"]
            same_shape(again, recorded("$JS.API.STREAM.CREATE.S1", 1))
            overlap = await api(ncs[0], "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["s1.a"]})
            assert overlap == recorded("$JS.API.STREAM.CREATE.S3")
            # (replicated streams: test_r3_streams.py; what they do not do yet is refused by name)
            r3 = await api(ncs[0], "$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3,
                                                                "allow_batched": True})
            assert "allow_batched on replicated streams" in r3["error"]["description"], r3

            # Published to from another node, acknowledged by the stream's server.
            for i in range(3):
                for n in range(5):
                    ack = await publish(ncs[(i + 1) % 3], f"s{i}.x", b"m%d" % n)
                    assert ack.stream == f"S{i}" and ack.seq == n + 1
            for i in range(3):
                info = await api(ncs[(i + 2) % 3], f"$JS.API.STREAM.INFO.S{i}")
                same_shape(info, recorded("$JS.API.STREAM.INFO.S1"))
                assert info["state"]["messages"] == 5 and info["cluster"]["leader"] == hosts[f"S{i}"]
            missing = await api(ncs[0], "$JS.API.STREAM.INFO.NOPE")
            assert missing == recorded("$JS.API.STREAM.INFO.NOPE")
            msg = await api(ncs[1], "$JS.API.STREAM.MSG.GET.S2", {"seq": 3})
            assert msg["message"]["subject"] == "s2.x"

            # An update through the meta leader, answered by the stream's server; a purge and
            # a direct get answered by it.
            updated = await api(ncs[(hosts_index(cluster, hosts["S2"]) + 1) % 3], "$JS.API.STREAM.UPDATE.S2",
                                {"name": "S2", "subjects": ["s2.>"], "max_msgs": 100, "allow_direct": True})
            same_shape(updated, recorded("$JS.API.STREAM.UPDATE.S1"))
            assert updated["config"]["max_msgs"] == 100 and updated["cluster"]["leader"] == hosts["S2"]
            direct = await ncs[0].request("$JS.API.DIRECT.GET.S2", b'{"seq": 2}', timeout=REQUEST_TIMEOUT)
            assert direct.data == b"m1" and direct.headers["Nats-Sequence"] == "2"
            purged = await api(ncs[1], "$JS.API.STREAM.PURGE.S1", {"keep": 2})
            assert purged == {"type": _T + "stream_purge_response", "success": True, "purged": 3}

            # An R1 stream's or consumer's leader step-down: nothing to hand over, success.
            stepdown = await api(ncs[1], "$JS.API.STREAM.LEADER.STEPDOWN.S2")
            assert stepdown == {"type": _T + "stream_leader_stepdown_response", "success": True}
            stepdown = await api(ncs[1], "$JS.API.STREAM.LEADER.STEPDOWN.NOPE")
            assert stepdown["error"]["err_code"] == 10059

            names_answer = await api(ncs[2], "$JS.API.STREAM.NAMES")
            assert names_answer["streams"] == ["S0", "S1", "S2"] and names_answer["total"] == 3
            listed = await api(ncs[0], "$JS.API.STREAM.LIST")
            assert [s["config"]["name"] for s in listed["streams"]] == ["S0", "S1", "S2"]
            assert [s["state"]["messages"] for s in listed["streams"]] == [5, 2, 5]
            theirs = recorded("$JS.API.STREAM.LIST")
            same_shape({k: v for k, v in listed.items() if k != "streams"}, {k: v for k, v in theirs.items() if k != "streams"})
            same_shape(listed["streams"][0], theirs["streams"][0])
            # The meta leader's account info counts every server's storage ($JSC.ARU updates).
            total = sum(s["state"]["bytes"] for s in listed["streams"])

            async def usage_summed():
                answer = await api(ncs[1], "$JS.API.INFO")
                return answer if answer["storage"] == total else None

            account = await until(usage_summed, f"the account's storage summed to {total}")
            assert account["streams"] == 3 and account["memory"] == 0
            # Reservations from the assignments (jetstream.go reservedStorage), wherever placed.
            reserving = await api(ncs[0], "$JS.API.STREAM.CREATE.M", {
                "name": "M", "subjects": ["m.>"], "storage": "memory", "max_bytes": 4096})
            assert reserving["did_create"] is True
            account = await api(ncs[2], "$JS.API.INFO")
            assert (account["reserved_memory"], account["reserved_storage"], account["streams"]) == (4096, 0, 4)
            assert (await api(ncs[1], "$JS.API.STREAM.DELETE.M"))["success"] is True

            # A pull consumer (durable) and a push consumer (ephemeral), each from another node.
            durable = await api(ncs[2], "$JS.API.CONSUMER.CREATE.S0.D1",
                                {"stream_name": "S0", "config": {"durable_name": "D1", "ack_policy": "explicit"}})
            same_shape(durable, recorded("$JS.API.CONSUMER.CREATE.S1.D1"))
            assert durable["cluster"] == {"name": cluster.name, "leader": hosts["S0"]} and durable["num_pending"] == 5
            pull = await ncs[2].jetstream().pull_subscribe_bind("D1", stream="S0")
            got = await pull.fetch(5, timeout=REQUEST_TIMEOUT)
            assert [m.data for m in got] == [b"m%d" % n for n in range(5)]
            for m in got:
                await m.ack_sync(timeout=REQUEST_TIMEOUT)
            info = await api(ncs[0], "$JS.API.CONSUMER.INFO.S0.D1")
            assert list(info) == list(recorded("$JS.API.CONSUMER.INFO.S1.D1"))  # (delivered: last_active now)
            assert info["ack_floor"]["stream_seq"] == 5 and info["num_ack_pending"] == 0

            received = []
            done = asyncio.Event()

            async def on_msg(m):
                received.append(m.data)
                if len(received) == 5:
                    done.set()

            push = await ncs[1].jetstream().subscribe("s2.>", cb=on_msg, ordered_consumer=True)
            await asyncio.wait_for(done.wait(), STEP)
            assert received == [b"m%d" % n for n in range(5)]
            await push.unsubscribe()
            consumers = await api(ncs[0], "$JS.API.CONSUMER.NAMES.S0")  # (the meta leader's)
            assert consumers["consumers"] == ["D1"]
            listed = await api(ncs[1], "$JS.API.CONSUMER.LIST.S0")  # (infos from $JSC.CI)
            assert [c["name"] for c in listed["consumers"]] == ["D1"] and "missing" not in listed
            assert listed["consumers"][0]["cluster"] == {"name": cluster.name, "leader": hosts["S0"]}
            # An ephemeral gone inactive on its server: its removal goes through the meta group.
            ephemeral = await api(ncs[2], "$JS.API.CONSUMER.CREATE.S0", {"stream_name": "S0", "config": {
                "ack_policy": "none", "inactive_threshold": 500_000_000}})
            assert ephemeral["name"] in (await api(ncs[0], "$JS.API.CONSUMER.NAMES.S0"))["consumers"]

            async def ephemeral_gone():
                names = (await api(ncs[0], "$JS.API.CONSUMER.NAMES.S0"))["consumers"]
                return names == ["D1"]

            await until(ephemeral_gone, "the inactive ephemeral removed from the meta state")
            account = await api(ncs[1], "$JS.API.INFO")
            assert account["streams"] == 3 and account["consumers"] >= 1

            # Deletes, through a node that does not run the stream.
            deleted = await api(ncs[1], "$JS.API.CONSUMER.DELETE.S0.D1")
            assert deleted == recorded("$JS.API.CONSUMER.DELETE.S1.D1")
            other = next(i for i, node in enumerate(cluster.servers) if node.options.server_name != hosts["S1"])
            deleted = await api(ncs[other], "$JS.API.STREAM.DELETE.S1")
            assert deleted == recorded("$JS.API.STREAM.DELETE.S2")
            assert await api(ncs[0], "$JS.API.STREAM.DELETE.NOPE") == recorded("$JS.API.STREAM.DELETE.NOPE")
            assert (await api(ncs[2], "$JS.API.STREAM.NAMES"))["streams"] == ["S0", "S2"]
            with pytest.raises(nats.errors.NoRespondersError):
                await ncs[0].request("s1.x", b"gone", timeout=REQUEST_TIMEOUT)

            # The meta leader steps down; another is elected and the streams are still served.
            stepped = await api(sys_nc, "$JS.API.META.LEADER.STEPDOWN")
            assert stepped == {"type": _T + "meta_leader_stepdown_response", "success": True}
            new_leader = await until(lambda: _other_leader(sys_nc, leader), "a new meta leader")
            assert new_leader != leader
            ack = await publish(ncs[0], "s2.y", b"after")
            assert ack.seq == 6
            created = await api(ncs[0], "$JS.API.STREAM.CREATE.S9", {"name": "S9", "subjects": ["s9.>"]})
            assert created["did_create"] is True
            assert (await api(ncs[1], "$JS.API.STREAM.NAMES"))["streams"] == ["S0", "S2", "S9"]
        finally:
            for nc in [*ncs, sys_nc]:
                await nc.close()

    run(main)


def hosts_index(cluster: NatsCluster, name: str) -> int:
    return next(i for i, node in enumerate(cluster.servers) if node.options.server_name == name)


async def _other_leader(sys_nc, old: str) -> str | None:
    leader = await meta_leader(sys_nc)
    return leader if leader not in (None, old) else None


def test_a_restarted_node_recovers_its_streams_and_the_meta_state(cluster):
    async def main():
        sys_nc = await connect(cluster.urls[0], "sys")
        nc = await connect(cluster.urls[0])
        try:
            await until(lambda: meta_leader(sys_nc), "a meta leader elected")
            hosts = {}
            for i in range(3):
                created = await api(nc, f"$JS.API.STREAM.CREATE.R{i}", {"name": f"R{i}", "subjects": [f"r{i}.>"]})
                hosts[f"R{i}"] = created["cluster"]["leader"]
                for n in range(3):
                    await publish(nc, f"r{i}.x", b"%d" % n)
            await api(nc, "$JS.API.CONSUMER.CREATE.R0.C", {"stream_name": "R0", "config": {"durable_name": "C"}})
            # The node running R1 restarts (not node 0, the clients' node).
            index = next(i for i, node in enumerate(cluster.servers) if node.options.server_name == hosts["R1"])
            if index == 0:
                index = next(i for i, node in enumerate(cluster.servers) if node.options.server_name == hosts["R2"])
            name = cluster.servers[index].options.server_name
            stream = next(s for s, host in hosts.items() if host == name)
            # Its meta state was snapshotted (after the peer entries) and the log compacted.
            snapshots = Path(cluster.servers[index].options.store_dir) / "jetstream" / "SYS" / "_js_" / "_meta_" / "snapshots"
            assert list(snapshots.glob("snap.*"))
            await nc.close()
            await sys_nc.close()
            # While it is down, new streams go to the servers that are up (no route to it:
            # offline for placement); the meta group (two of three) goes on.
            cluster.stop(index)
            nc = await connect(cluster.urls[(index + 1) % 3])

            async def create_while_down():
                answer = await api(nc, "$JS.API.STREAM.CREATE.DOWN", {"name": "DOWN", "subjects": ["down.>"]})
                return answer if "error" not in answer else None

            created = await until(create_while_down, "a stream created with a server down")
            assert created["cluster"]["leader"] != name
            offline = await api(nc, f"$JS.API.STREAM.INFO.{stream}")  # (the meta leader's answer)
            assert offline == {"type": _T + "stream_info_response", "error": {
                "code": 500, "err_code": 10118, "description": "stream is offline"}, "total": 0, "offset": 0, "limit": 0}
            await nc.close()
            cluster.restart(index)
            nc = await connect(cluster.urls[(index + 1) % 3])
            sys_nc = await connect(cluster.urls[(index + 1) % 3], "sys")

            async def served():
                info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
                return info if info.get("state", {}).get("messages") == 3 else None

            info = await until(served, f"{stream} served again by {name}")
            assert info["cluster"]["leader"] == name

            async def listed():  # (by the meta leader: maybe being elected again, if it was the node)
                names = await api(nc, "$JS.API.STREAM.NAMES")
                return names.get("streams")

            assert await until(listed, "the streams listed") == ["DOWN", "R0", "R1", "R2"]
            full = await api(nc, "$JS.API.STREAM.LIST")  # (the restarted node answers $JSC.SI again)
            assert [s["config"]["name"] for s in full["streams"]] == ["DOWN", "R0", "R1", "R2"] and "missing" not in full
            ack = await publish(nc, f"{stream.lower()}.y", b"after")
            assert ack.seq == 4
            # The restarted node's own meta state (it answers as the leader when it is one).
            views = await until(lambda: _all_agree(sys_nc), "every server back in the meta group")
            assert views[name]["meta_cluster"]["cluster_size"] == 3
            consumer = await api(nc, "$JS.API.CONSUMER.INFO.R0.C")
            assert consumer["name"] == "C"
            restarted = cluster.servers[index].server.jetstream.cluster

            async def caught_up():  # (what it missed while down: from the meta leader's catch-up)
                try:  # (read from this thread while the server's changes it)
                    return sorted(dict(restarted.state.streams).get("APP", {})) == ["DOWN", "R0", "R1", "R2"]
                except RuntimeError:
                    return False

            await until(caught_up, f"{name}'s meta state caught up")
            r0 = restarted.state.stream("APP", "R0")
            assert r0 is not None and list(r0.consumers) == ["C"], r0
        finally:
            await nc.close()
            await sys_nc.close()

    run(main)


async def _all_agree(sys_nc) -> dict | None:
    views = await jsz_all(sys_nc)
    leaders = {data.get("meta_cluster", {}).get("leader") for data in views.values()}
    return views if len(views) == 3 and len(leaders) == 1 and None not in leaders else None
