"""Message tracing (nats-server 2.11, ``Nats-Trace-Dest``) as nats-server 2.15.1 does it.

One script of nats-py clients runs against natserver and must give what was recorded from
nats-server 2.15.1 in ``data/msgtrace_nats_server_2.15.1.json`` (``python -m
tests.server.test_msgtrace`` records it again); a live 2.15.1, when installed, must still give
it. Each entry holds the trace events a publish produced (ids, times, cids and the server
block's values normalised, their field order kept; the events after the ingress in a fixed
order, as nats-server's order is random) and what the subscribers got.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record

RECORDED = Path(__file__).with_name("data") / "msgtrace_nats_server_2.15.1.json"
TIMEOUT = 20
CONFIG = """
jetstream { store_dir: "%s" }
accounts {
  A {
    jetstream: enabled
    users [
      {user: a, password: a}
      {user: p, password: p, permissions: {publish: {deny: "denied.>"}}}
    ]
    mappings { "map.in": "map.out" }
    msg_trace { dest: "acc.trace" }
    exports [ {service: "svc.>"}, {stream: "feed.>"} ]
  }
  B {
    users [ {user: b, password: b} ]
    imports [ {service: {account: A, subject: "svc.>"}, to: "bsvc.>"}, {stream: {account: A, subject: "feed.>"}} ]
  }
}
"""
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def _normal_event(data: bytes) -> dict:
    """A trace event with what differs by nature masked: the server block's values (its
    field names are kept, in order), timestamps, cids."""
    event = json.loads(data)
    event["server"] = {key: _server_value(key, value) for key, value in event["server"].items()}
    for item in event["events"]:
        item["ts"] = "<ts>"
        if "cid" in item:
            item["cid"] = "<cid>"
    # nats-server keeps a subject's subscriptions in a Go map: the order of the events after
    # the ingress is random there (sorted here, the ingress first)
    ingress, *rest = event["events"]
    event["events"] = [ingress, *sorted(rest, key=json.dumps)]
    return event


def _server_value(key: str, value):
    # (``flags``: natserver's capability flags say JetStream only, wherever it sends them)
    if key in ("ver", "jetstream"):
        return value
    if key == "feature_flags":
        return sorted(value)
    return f"<{key}>"


async def _script(port: int) -> dict:
    url = f"nats://127.0.0.1:{port}"
    pub = await nats.connect(url, user="a", password="a", name="pub", allow_reconnect=False)
    sub = await nats.connect(url, user="a", password="a", name="sub", allow_reconnect=False)
    quiet = await nats.connect(url, user="a", password="a", name="quiet", no_echo=True, allow_reconnect=False)
    denied = await nats.connect(url, user="p", password="p", name="denied", allow_reconnect=False)
    other = await nats.connect(url, user="b", password="b", name="other", allow_reconnect=False)
    errors: list = []

    async def on_error(exc):
        errors.append(str(exc))

    denied._error_cb = on_error
    traces = await pub.subscribe("trace.>")
    other_traces = await other.subscribe("trace.>")
    account_traces = await pub.subscribe("acc.trace")
    got: dict[str, list] = {}

    async def on_msg(msg):
        headers = dict(msg.headers or {})
        if "Nats-Request-Info" in headers:  # the requester's round trip time masked
            headers["Nats-Request-Info"] = sorted(json.loads(headers["Nats-Request-Info"]))
        got.setdefault(msg.subject, []).append({"sub": msg.sid, "headers": [list(item) for item in headers.items()],
                                                "data": msg.data.decode()})

    for subject, queue in [("foo", ""), ("foo", "q"), ("map.out", ""), ("map.in", ""), ("js.b", ""), ("svc.x", ""),
                           ("feed.x", "")]:
        await sub.subscribe(subject, queue=queue, cb=on_msg)
    await quiet.subscribe("foo", cb=on_msg)
    await other.subscribe("feed.x", cb=on_msg)
    await other.subscribe("bsvc.reply", cb=on_msg)
    for nc in (sub, quiet, other, pub):
        await nc.flush()
    js = pub.jetstream()
    await js.add_stream(name="S", subjects=["js.>"])
    await js.add_stream(name="I", subjects=["int.>"], retention="interest")

    results: dict = {}

    async def traced(name: str, client, subject: str, headers: dict, *, expect: int = 1, reply: str = "",
                     source=traces) -> None:
        got.clear()
        await client.publish(subject, name.encode(), reply=reply, headers=headers)
        await client.flush()
        events = [_normal_event((await source.next_msg(timeout=5)).data) for _ in range(expect)]
        await sub.flush()
        await quiet.flush()
        await other.flush()
        # (the order of deliveries to different subscriptions differs by nature)
        results[name] = {"events": events, "delivered": {k: sorted(got[k], key=str) for k in sorted(got)}}

    await traced("basic", pub, "foo", {"Nats-Trace-Dest": "trace.1", "X": "y"})
    await traced("trace only", pub, "foo", {"Nats-Trace-Dest": "trace.2", "Nats-Trace-Only": "true"})
    await traced("trace only: 1", pub, "foo", {"Nats-Trace-Dest": "trace.2", "Nats-Trace-Only": "1"})
    await traced("trace only: no", pub, "foo", {"Nats-Trace-Dest": "trace.2", "Nats-Trace-Only": "no"})
    await traced("nobody listens", pub, "nobody", {"Nats-Trace-Dest": "trace.3"})
    await traced("no echo", quiet, "foo", {"Nats-Trace-Dest": "trace.4"})
    await traced("mapping", pub, "map.in", {"Nats-Trace-Dest": "trace.5"})
    await traced("with a reply", pub, "foo", {"Nats-Trace-Dest": "trace.6"}, reply="r.1")
    await traced("jetstream", pub, "js.a", {"Nats-Trace-Dest": "trace.7"})
    await traced("jetstream and a subscriber", pub, "js.b", {"Nats-Trace-Dest": "trace.8"})
    await traced("jetstream, trace only", pub, "js.c", {"Nats-Trace-Dest": "trace.9", "Nats-Trace-Only": "true"})
    await traced("jetstream, a message id", pub, "js.d", {"Nats-Trace-Dest": "trace.15", "Nats-Msg-Id": "m1"})
    await traced("jetstream, a duplicate", pub, "js.d", {"Nats-Trace-Dest": "trace.15", "Nats-Msg-Id": "m1"})
    await traced("jetstream, wrong last sequence", pub, "js.e",
                 {"Nats-Trace-Dest": "trace.16", "Nats-Expected-Last-Sequence": "1"})
    await traced("jetstream, trace only, wrong last sequence", pub, "js.e",
                 {"Nats-Trace-Dest": "trace.16", "Nats-Expected-Last-Sequence": "1", "Nats-Trace-Only": "true"})
    await traced("jetstream, interest retention without consumers", pub, "int.a", {"Nats-Trace-Dest": "trace.17"})
    await traced("traceparent", pub, "foo", {"traceparent": TRACEPARENT}, source=account_traces)
    await traced("traceparent flags 03", pub, "foo", {"traceparent": TRACEPARENT[:-2] + "03"}, source=account_traces)
    await traced("TraceParent in another case", pub, "foo", {"TraceParent": TRACEPARENT}, source=account_traces)
    await traced("service import", other, "bsvc.x", {"Nats-Trace-Dest": "trace.10"}, source=other_traces)
    await traced("service import, trace only", other, "bsvc.x", {"Nats-Trace-Dest": "trace.10", "Nats-Trace-Only": "on"},
                 source=other_traces)
    await traced("publish denied", denied, "denied.x", {"Nats-Trace-Dest": "trace.14"})
    await traced("stream export", pub, "feed.x", {"Nats-Trace-Dest": "trace.11"})
    await traced("headers repeated", pub, "foo", {"Nats-Trace-Dest": "trace.12", "Nats-Trace-Hop": "x"})
    # What produces no trace: a traceparent not sampled, an invalid destination, the old
    # origin-account header, a destination the publisher may not publish to.
    for name, client, headers in [
        ("traceparent not sampled", pub, {"traceparent": UNSAMPLED}),
        ("traceparent flags past an int8", pub, {"traceparent": TRACEPARENT[:-2] + "ff"}),
        ("invalid destination", pub, {"Nats-Trace-Dest": "trace..x"}),
        ("invalid destination, trace only", pub, {"Nats-Trace-Dest": "trace..x", "Nats-Trace-Only": "true"}),
        ("origin account", pub, {"Nats-Trace-Dest": "trace.13", "Nats-Trace-Origin-Account": "A"}),
        ("origin account, trace only", pub, {"Nats-Trace-Dest": "trace.13", "Nats-Trace-Origin-Account": "A",
                                             "Nats-Trace-Only": "true"}),
        ("destination denied", denied, {"Nats-Trace-Dest": "denied.t"}),
        ("trace only without a destination", pub, {"Nats-Trace-Only": "true"}),
    ]:
        await traced(name, client, "foo", headers, expect=0)
    # A last traced message: every event before it has come in (the server sends them in order).
    await traced("last", pub, "foo", {"Nats-Trace-Dest": "trace.end"})
    strays = []
    await other.flush()
    for source in (traces, account_traces, other_traces):
        while source.pending_msgs:
            strays.append((await source.next_msg(timeout=1)).subject)
    results["stray events"] = strays
    results["publish errors"] = errors
    info = await js.stream_info("S")
    results["stored"] = info.state.messages
    stored = await js.get_msg("S", 1)
    results["stored headers"] = dict(stored.headers or {})
    for nc in (pub, sub, quiet, denied, other):
        await nc.close()
    return results


def run_script(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_script(port), TIMEOUT))


def test_natserver_traces_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


# -- the account's msg_trace ----------------------------------------------------------------

# nats-server 2.15.1's refusals of account msg_trace blocks, where it puts them (typo included).
CONFIG_ERRORS = {
    'msg_trace: "a.*"': ':1:15: Trace destination "a.*" is not valid',
    'msg_trace { dest: "t", sampling: 0 }': ":1:38: Ttrace destination sampling value 0 is invalid, needs to be [1..100]",
    'msg_trace { dest: "t", sampling: "x%" }': ':1:38: Invalid trace destination sampling value "x%"',
    'msg_trace { dest: "t", sampling: 1.5 }': ':1:38: Trace destination sampling field "sampling" should be an '
                                              "integer or a percentage, got float64",
    'msg_trace { dest: "t", foo: 1 }': ':1:38: Unknown field "foo" parsing account message trace map/struct '
                                       '"msg_trace"',
    "msg_trace: 5": ':1:15: Expected account message trace "msg_trace" to be a string or a map/struct, got int64',
    "msg_trace { dest: 5 }": ':1:27: Field "dest" should be a string, got int64',
}


def _config_errors(kind: str, tmp_path: Path) -> dict:
    from tests.auth.test_auth_helpers import start_error

    return {block: start_error(kind, "accounts { A { %s } }\n" % block, tmp_path).split(".conf")[-1]
            for block in CONFIG_ERRORS}


def test_natserver_refuses_msg_trace_blocks_as_nats_server(tmp_path):
    assert _config_errors("natserver", tmp_path) == CONFIG_ERRORS


@reference.needs_nats_server
def test_nats_server_refuses_msg_trace_blocks_so(tmp_path):
    assert _config_errors("nats-server", tmp_path) == CONFIG_ERRORS


def test_msg_trace_values():
    from natserver.config.mapping import options_from_dict
    from natserver.config.options import ConfigFileError

    def account(block) -> tuple:
        options = options_from_dict({"accounts": {"A": {"msg_trace": block}}})
        (config,) = options.accounts
        return config.trace_dest, config.trace_sampling

    assert account("t.x") == ("t.x", 100)  # no sampling: every message
    assert account({"dest": "t.x", "sampling": "25%"}) == ("t.x", 25)
    assert account({"DEST": "t.x", "Sampling": 100}) == ("t.x", 100)
    with pytest.raises(ConfigFileError) as caught:  # a warning, and no sampling without a destination
        options_from_dict({"accounts": {"A": {"msg_trace": {"sampling": 50}}}})
    assert caught.value.errors == []
    assert any("Trace destination sampling ignored since no destination was set" in w for w in caught.value.warnings)
    (config,) = caught.value.options.accounts
    assert (config.trace_dest, config.trace_sampling) == ("", 0)


@pytest.mark.parametrize(("draw", "traced"), [(40, True), (60, False)])
def test_traceparent_sampling(tmp_path, monkeypatch, draw, traced):
    """msgtrace.go sample: a draw of 0-99 at most the account's percentage traces; a message
    not drawn goes on with ``Nats-Trace-Dest: trace disabled`` (so a peer does not trace it)."""
    from natserver.config.mapping import options_from_file
    from natserver.server import msgtrace
    from tests.conftest import ThreadedServer

    monkeypatch.setattr(msgtrace.random, "randrange", lambda n: draw)
    path = tmp_path / "sampled.conf"
    path.write_text('port: -1\naccounts { A { users [{user: a, password: a}], '
                    'msg_trace { dest: "acc.trace", sampling: 50 } } }\n')
    handle = ThreadedServer(options_from_file(path).copy(host="127.0.0.1", quiet=True)).start()

    async def main():
        nc = await nats.connect(handle.url, user="a", password="a", allow_reconnect=False)
        try:
            traces = await nc.subscribe("acc.trace")
            sub = await nc.subscribe("foo")
            await nc.publish("foo", b"x", headers={"traceparent": TRACEPARENT})
            msg = await sub.next_msg(timeout=5)
            await nc.flush()
            if traced:
                event = json.loads((await traces.next_msg(timeout=5)).data)
                assert [e["type"] for e in event["events"]] == ["in", "eg"]
                assert msg.headers == {"traceparent": TRACEPARENT}
            else:
                assert traces.pending_msgs == 0
                assert msg.headers == {"traceparent": TRACEPARENT, "Nats-Trace-Dest": "trace disabled"}
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    finally:
        handle.stop()


def test_no_trace_event_without_a_system_account(threaded_server):
    """events.go sendInternalAccountSysMsg: the events go out through the system account, so
    a server without one sends none; the message is delivered all the same (and trace-only
    still is not)."""
    handle = threaded_server(no_system_account=True)

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            traces = await nc.subscribe("trace.>")
            sub = await nc.subscribe("foo")
            await nc.publish("foo", b"only", headers={"Nats-Trace-Dest": "trace.1", "Nats-Trace-Only": "true"})
            await nc.publish("foo", b"x", headers={"Nats-Trace-Dest": "trace.1"})
            msg = await sub.next_msg(timeout=5)
            await nc.flush()
            assert (msg.data, msg.headers) == (b"x", {"Nats-Trace-Dest": "trace.1"})
            assert traces.pending_msgs == 0 and sub.pending_msgs == 0
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- across a route, to a server that does not trace ----------------------------------------
# The origin server (nats-server 2.15.1 when recording, natserver when compared) routes to a
# nats-server 2.9.10 peer, which announces route protocol 1 (below MsgTraceProto): the origin
# reports it as a peer without message tracing (the egress names the hop and says no event
# comes from there) and does not send it a trace-only message. (Between servers that trace:
# tests/cluster/test_msgtrace_cluster.py.)

RECORDED_ROUTE = Path(__file__).with_name("data") / "msgtrace_route_nats_server_2.15.1.json"
ROUTE_CONFIG = """
server_name: %s
cluster { name: c1, listen: "127.0.0.1:%d", routes: ["nats-route://127.0.0.1:%d"] }
"""


async def _route_script(origin_port: int, peer_port: int) -> dict:
    origin = await nats.connect(f"nats://127.0.0.1:{origin_port}", name="pub", allow_reconnect=False)
    peer = await nats.connect(f"nats://127.0.0.1:{peer_port}", name="far", allow_reconnect=False)
    try:
        far = await peer.subscribe("foo")
        await peer.flush()
        traces = await origin.subscribe("trace.>")
        for _ in range(200):  # until the peer's interest has come over the route
            await origin.publish("foo", b"ping")
            try:
                await far.next_msg(timeout=0.05)
                break
            except nats.errors.TimeoutError:
                continue
        while far.pending_msgs:
            await far.next_msg(timeout=1)
        results: dict = {}
        for name, headers in [("routed", {"Nats-Trace-Dest": "trace.1"}),
                              ("routed, trace only", {"Nats-Trace-Dest": "trace.2", "Nats-Trace-Only": "true"})]:
            await origin.publish("foo", name.encode(), headers=headers)
            event = _normal_event((await traces.next_msg(timeout=5)).data)
            await origin.publish("foo", b"after")  # (delivered after the traced one, if that was)
            delivered = []
            while True:
                msg = await far.next_msg(timeout=5)
                if msg.data == b"after":
                    break
                delivered.append({"headers": dict(msg.headers or {}), "data": msg.data.decode()})
            results[name] = {"event": event, "delivered": delivered}
        return results
    finally:
        await origin.close()
        await peer.close()


def run_route_script(binary: str | None, tmp_path: Path) -> dict:
    """The script with the origin run from ``binary`` (None: natserver), the peer 2.9.10."""
    from tests.auth.test_auth_helpers import free_port, running

    origin_cluster, peer_cluster = free_port(), free_port()
    with running("nats-server", ROUTE_CONFIG % ("peer", peer_cluster, origin_cluster), tmp_path,
                 binary=reference.NATS_SERVER_2_9 or "") as peer_port, \
            running("nats-server" if binary else "natserver", ROUTE_CONFIG % ("origin", origin_cluster, peer_cluster),
                    tmp_path, binary=binary or "") as origin_port:
        return asyncio.run(asyncio.wait_for(_route_script(origin_port, peer_port), TIMEOUT))


@reference.needs_nats_server_2_9
def test_natserver_traces_a_route_as_nats_server(tmp_path):
    assert run_route_script(None, tmp_path) == json.loads(RECORDED_ROUTE.read_text())


@reference.needs_nats_server_2_9
@reference.needs_nats_server
def test_the_route_recording_is_what_nats_server_answers(tmp_path):
    assert run_route_script(reference.NATS_SERVER, tmp_path) == json.loads(RECORDED_ROUTE.read_text())


if __name__ == "__main__":
    import tempfile

    record(run_script, CONFIG, RECORDED, binary=reference.NATS_SERVER)
    with tempfile.TemporaryDirectory() as folder:
        RECORDED_ROUTE.write_text(json.dumps(run_route_script(reference.NATS_SERVER, Path(folder)), indent=1) + "\n")
