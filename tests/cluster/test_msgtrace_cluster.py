"""Message tracing across servers (``Nats-Trace-Dest`` through routes and leaf nodes), as
nats-server 2.15.1 does it, in clusters mixing natserver and 2.15.1.

Three servers: A and B are routed (cluster c1), C is a leaf node of B (C dials B's leaf
port). Every server a traced message reaches sends its own event to the destination (the
ingress from a route says ROUTER, kind 1, from a leaf LEAF, kind 4; the egress to a peer names
the hop, which the peer finds in the copy's ``Nats-Trace-Hop`` and extends: 1, then 1.1).
One script publishes from A towards C, from C towards A (through B both ways), trace-only
and not, to plain and queue subscribers on the far side; it must give, whichever servers are
natserver, what the all-2.15.1 cluster gave (``data/msgtrace_cluster_nats_server_2.15.1.json``;
``python -m tests.cluster.test_msgtrace_cluster`` records it again, and a live 2.15.1 is
checked when installed). Each event is normalised: the server block's values but its name
(the servers are named A, B, C whatever runs them), times and cids masked, the events after the
ingress sorted (nats-server's order comes from Go maps), a message's events sorted by server.
Last, a stream import across a route (``data/msgtrace_imports_nats_server_2.15.1.json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from pathlib import Path

import nats
import pytest

from tests import reference
from tests.auth.test_auth_helpers import free_port, running

RECORDED = Path(__file__).with_name("data") / "msgtrace_cluster_nats_server_2.15.1.json"
TIMEOUT = 60  # the whole script, three servers' start included
EVENT_TIMEOUT = 5
ROLES = ("A", "B", "C")
ROUTED = """
server_name: %(name)s
cluster { name: c1, listen: "127.0.0.1:%(cluster)d", routes: ["nats-route://127.0.0.1:%(peer)d"] }
"""
HUB = ROUTED + """
leafnodes { listen: "127.0.0.1:%(leaf)d" }
"""
LEAF = """
server_name: %(name)s
leafnodes { remotes: [ { url: "nats-leaf://127.0.0.1:%(leaf)d" } ] }
"""


def _normal_event(data: bytes) -> dict:
    event = json.loads(data)
    event["server"] = {key: value if key in ("name", "ver", "jetstream") else f"<{key}>"
                       for key, value in event["server"].items()}
    for item in event["events"]:
        item["ts"] = "<ts>"
        if "cid" in item:
            item["cid"] = "<cid>"
    ingress, *rest = event["events"]
    event["events"] = [ingress, *sorted(rest, key=json.dumps)]
    return event


async def _until_received(publisher, subject: str, sub, receiver) -> None:
    """Publish on ``subject`` until ``sub`` gets it (interest has come through), then drain."""
    for _ in range(400):
        await publisher.publish(subject, b"ping")
        try:
            await sub.next_msg(timeout=0.05)
            break
        except nats.errors.TimeoutError:
            continue
    else:
        raise AssertionError(f"no interest in {subject} came through")
    await publisher.flush()
    await receiver.flush()
    while sub.pending_msgs:
        await sub.next_msg(timeout=1)


async def _script(ports: dict) -> dict:
    a, b, c = [await nats.connect(f"nats://127.0.0.1:{ports[role]}", name=f"client-{role}", allow_reconnect=False)
               for role in ROLES]
    try:
        got: dict[str, list] = {}

        def collect(where: str):
            async def on_msg(msg):
                got.setdefault(where, []).append({"subject": msg.subject, "headers": dict(msg.headers or {}),
                                                  "data": msg.data.decode()})
            return on_msg

        # The far side of A: a subscriber on B, a plain one and a queue group's member on C.
        await b.subscribe("foo", cb=collect("B foo"))
        await c.subscribe("foo", cb=collect("C foo"))
        await c.subscribe("foo", queue="q", cb=collect("C foo q"))
        await c.subscribe("qonly", queue="q", cb=collect("C qonly q"))
        # The far side of C: a subscriber on A.
        await a.subscribe("up", cb=collect("A up"))
        a_traces = await a.subscribe("trace.a.>")
        c_traces = await c.subscribe("trace.c.>")
        for nc in (a, b, c):
            await nc.flush()
        for publisher, subject, sub, receiver in [
                (a, "foo", await c.subscribe("foo"), c), (c, "up", await a.subscribe("up"), a),
                (c, "trace.a.ping", a_traces, a), (a, "trace.c.ping", c_traces, c),
                (a, "qonly", await c.subscribe("qonly"), c)]:
            await _until_received(publisher, subject, sub, receiver)
            if subject in ("foo", "up", "qonly"):
                await sub.unsubscribe()
        for nc in (a, b, c):
            await nc.flush()
        got.clear()
        results: dict = {}
        scenarios = [
            # (name, publisher, subject, headers, the traces' subscription, how many servers send events)
            ("A to B and C", a, "foo", {"Nats-Trace-Dest": "trace.a.1"}, a_traces, 3),
            ("A to B and C, trace only", a, "foo", {"Nats-Trace-Dest": "trace.a.2", "Nats-Trace-Only": "true"},
             a_traces, 3),
            ("A to a queue group on C", a, "qonly", {"Nats-Trace-Dest": "trace.a.3", "X": "y"}, a_traces, 3),
            ("C to A", c, "up", {"Nats-Trace-Dest": "trace.c.1"}, c_traces, 3),
            ("C to A, trace only", c, "up", {"Nats-Trace-Dest": "trace.c.2", "Nats-Trace-Only": "on"}, c_traces, 3),
            ("C to nobody", c, "nobody", {"Nats-Trace-Dest": "trace.c.3"}, c_traces, 1),
            ("origin account header", a, "foo", {"Nats-Trace-Dest": "trace.a.4", "Nats-Trace-Origin-Account": "X"},
             a_traces, 0),
        ]
        for name, publisher, subject, headers, traces, servers in scenarios:
            got.clear()
            await publisher.publish(subject, name.encode(), headers=headers)
            events = [_normal_event((await traces.next_msg(timeout=EVENT_TIMEOUT)).data) for _ in range(servers)]
            events.sort(key=lambda event: event["server"]["name"])
            # A message after it on each path: what the traced one delivered has come by then.
            for nc, after in ((a, "foo"), (c, "up")):
                await nc.publish(after, b"after")
            await _wait_after(got)
            results[name] = {"events": events,
                             "delivered": {where: [m for m in got[where] if m["data"] != "after"] for where in sorted(got)}}
        strays = []
        for traces, receiver in ((a_traces, a), (c_traces, c)):
            await receiver.flush()
            with contextlib.suppress(nats.errors.TimeoutError):
                while True:
                    strays.append((await traces.next_msg(timeout=0.5)).subject)
        results["stray events"] = strays
        return results
    finally:
        for nc in (a, b, c):
            await nc.close()


async def _wait_after(got: dict, wanted: tuple = ("B foo", "C foo", "A up")) -> None:
    """Until each of the subscriptions (``wanted``) the "after" messages reach has one."""
    for _ in range(int(EVENT_TIMEOUT / 0.01)):
        if all(any(m["data"] == "after" for m in got.get(where, ())) for where in wanted):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the messages after did not all come: {got}")


def run_script(kinds: dict, tmp_path: Path, binary: str | None) -> dict:
    """The script on A, B and C, each run as ``kinds[role]`` ("natserver" or "nats-server",
    run from ``binary``)."""
    ports = {"A": free_port(), "B": free_port(), "leaf": free_port()}
    fields = {
        "A": ROUTED % {"name": "A", "cluster": ports["A"], "peer": ports["B"]},
        "B": HUB % {"name": "B", "cluster": ports["B"], "peer": ports["A"], "leaf": ports["leaf"]},
        "C": LEAF % {"name": "C", "leaf": ports["leaf"]},
    }
    with contextlib.ExitStack() as stack:
        client_ports = {}
        for role in ROLES:
            folder = tmp_path / role
            folder.mkdir(exist_ok=True)
            client_ports[role] = stack.enter_context(
                running(kinds[role], fields[role], folder, binary=binary or "nats-server"))
        return asyncio.run(asyncio.wait_for(_script(client_ports), TIMEOUT))


MIXES = {
    "all natserver": ("natserver", "natserver", "natserver"),
    "natserver origin A": ("natserver", "nats-server", "nats-server"),
    "natserver middle B": ("nats-server", "natserver", "nats-server"),
    "natserver leaf C": ("nats-server", "nats-server", "natserver"),
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_traces_across_servers_as_an_all_nats_server_cluster(mix, tmp_path):
    kinds = dict(zip(ROLES, MIXES[mix]))
    if "nats-server" in kinds.values() and not reference.HAVE_NATS_SERVER:
        pytest.skip("nats-server 2.15.1 is not installed")
    _assert_recorded(run_script(kinds, tmp_path, reference.NATS_SERVER))


@reference.needs_nats_server
def test_the_recording_is_what_an_all_nats_server_cluster_answers(tmp_path):
    _assert_recorded(run_script(dict.fromkeys(ROLES, "nats-server"), tmp_path, reference.NATS_SERVER))


def _assert_recorded(got: dict, recorded: Path = RECORDED) -> None:
    expected = json.loads(recorded.read_text())
    assert list(got) == list(expected)
    for name in expected:
        assert got[name] == expected[name], name


# -- a stream import across a route ----------------------------------------------------------
# Two routed servers with accounts A (exports a stream) and B (imports it); a 2.15.1 server 1
# publishes in A, B's subscriber is on server 2 (natserver when compared). Server 2's event
# has the route's ingress in account A and the stream export (``se``) into B; the delivery
# past the import is not traced (nats-server's allow_trace, which would trace it, is not
# supported). Only this mix is compared: natserver as server 1 has the import's subscription
# in A even with no subscriber of B's there (nats-server makes its shadow subscriptions only
# where they are), so its event has a stream export nats-server's has not. Deliveries are the
# same either way (tests/cluster/test_imports_across_routes.py).

RECORDED_IMPORTS = Path(__file__).with_name("data") / "msgtrace_imports_nats_server_2.15.1.json"
ACCOUNTS = """
server_name: S%(name)s
accounts {
  A { users [{user: a, password: a}], exports [ {stream: "feed.>"} ] }
  B { users [{user: b, password: b}], imports [ {stream: {account: A, subject: "feed.>"}} ] }
}
cluster { name: c1, listen: "127.0.0.1:%(cluster)d", routes: ["nats-route://127.0.0.1:%(peer)d"] }
"""


async def _imports_script(ports: dict) -> dict:
    pub_a = await nats.connect(f"nats://a:a@127.0.0.1:{ports['1']}", name="pub-a", allow_reconnect=False)
    sub_b = await nats.connect(f"nats://b:b@127.0.0.1:{ports['2']}", name="sub-b", allow_reconnect=False)
    clients = (pub_a, sub_b)
    try:
        got: dict[str, list] = {}

        async def on_msg(msg):
            got.setdefault("2 B feed.x", []).append({"subject": msg.subject, "headers": dict(msg.headers or {}),
                                                     "data": msg.data.decode()})

        await sub_b.subscribe("feed.x", cb=on_msg)
        traces = await pub_a.subscribe("trace.a.>")
        probe = await sub_b.subscribe("feed.x")
        await _until_received(pub_a, "feed.x", probe, sub_b)
        await probe.unsubscribe()  # (nats-server has an se event per subscription of B's: one)
        await sub_b.flush()
        await pub_a.flush()
        results: dict = {}
        for name, headers in [("stream export", {"Nats-Trace-Dest": "trace.a.1"}),
                              ("stream export, trace only", {"Nats-Trace-Dest": "trace.a.2", "Nats-Trace-Only": "true"})]:
            got.clear()
            await pub_a.publish("feed.x", name.encode(), headers=headers)
            events = [_normal_event((await traces.next_msg(timeout=EVENT_TIMEOUT)).data) for _ in range(2)]
            events.sort(key=lambda event: event["server"]["name"])
            await pub_a.publish("feed.x", b"after")
            await _wait_after(got, ("2 B feed.x",))
            results[name] = {"events": events, "delivered": [m for m in got["2 B feed.x"] if m["data"] != "after"]}
        await pub_a.flush()
        strays = []
        with contextlib.suppress(nats.errors.TimeoutError):
            while True:
                strays.append((await traces.next_msg(timeout=0.5)).subject)
        results["stray events"] = strays
        return results
    finally:
        for nc in clients:
            await nc.close()


def run_imports_script(kinds: tuple, tmp_path: Path, binary: str | None) -> dict:
    """The imports script on servers 1 and 2, run as ``kinds``."""
    clusters = {"1": free_port(), "2": free_port()}
    with contextlib.ExitStack() as stack:
        ports = {}
        for name, kind, peer in (("1", kinds[0], "2"), ("2", kinds[1], "1")):
            folder = tmp_path / name
            folder.mkdir(exist_ok=True)
            config = ACCOUNTS % {"name": name, "cluster": clusters[name], "peer": clusters[peer]}
            ports[name] = stack.enter_context(running(kind, config, folder, binary=binary or "nats-server"))
        return asyncio.run(asyncio.wait_for(_imports_script(ports), TIMEOUT))


@reference.needs_nats_server
def test_a_stream_import_across_a_route_as_an_all_nats_server_cluster(tmp_path):
    _assert_recorded(run_imports_script(("nats-server", "natserver"), tmp_path, reference.NATS_SERVER),
                     RECORDED_IMPORTS)


@reference.needs_nats_server
def test_the_imports_recording_is_what_an_all_nats_server_cluster_answers(tmp_path):
    _assert_recorded(run_imports_script(("nats-server", "nats-server"), tmp_path, reference.NATS_SERVER),
                     RECORDED_IMPORTS)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        recorded = run_script(dict.fromkeys(ROLES, "nats-server"), Path(folder), reference.NATS_SERVER)
        RECORDED.write_text(json.dumps(recorded, indent=1) + "\n")
        print(f"wrote {RECORDED}")
        recorded = run_imports_script(("nats-server", "nats-server"), Path(folder), reference.NATS_SERVER)
        RECORDED_IMPORTS.write_text(json.dumps(recorded, indent=1) + "\n")
        print(f"wrote {RECORDED_IMPORTS}")
