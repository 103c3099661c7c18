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
    await traced("traceparent", pub, "foo", {"traceparent": TRACEPARENT}, source=account_traces)
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


if __name__ == "__main__":
    record(run_script, CONFIG, RECORDED, binary=reference.NATS_SERVER)
