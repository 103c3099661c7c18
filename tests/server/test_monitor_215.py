"""The system account's server requests nats-server 2.15.1 answers that 2.9 did not:
``$SYS.REQ.SERVER.PING.<KIND>`` / ``$SYS.REQ.SERVER.<id>.<KIND>`` for ``RAFTZ``,
``IPQUEUESZ``, ``EXPVARZ``, ``PROFILEZ``, ``HEALTHZ`` with its options, and the requests to
one server: ``KICK`` (disconnect a client), ``LDM`` (tell one client the server goes away),
``RELOAD``; the fields of ``VARZ`` (and its JetStream configuration's).

One script of nats-py clients runs against natserver and must give what was recorded from
nats-server 2.15.1 in ``data/sys_requests_nats_server_2.15.1.json`` (``python -m
tests.server.test_monitor_215`` records it again); a live 2.15.1, when installed, must still
give it. The server block is compared by its field names; the answers that are Go's own by
nature (expvar's runtime memstats, the ipqueues between goroutines) are compared by their
shape there; Go's pprof profiles are not asked for. What natserver answers in their place is
checked below.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record

RECORDED = Path(__file__).with_name("data") / "sys_requests_nats_server_2.15.1.json"
TIMEOUT = 20
CONFIG = """
server_name: S1
jetstream { store_dir: "%s" }
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { jetstream: enabled, users [{user: a, password: a}] }
}
system_account: SYS
"""
# (kind, request body, whether to ask every server (PING) or this one by id)
REQUESTS = [
    ("RAFTZ", {}, True),
    ("RAFTZ", {}, False),
    ("PROFILEZ", {}, True),
    ("PROFILEZ", {"name": "nosuchprofile"}, False),
    ("HEALTHZ", {"js-enabled-only": True}, True),
    ("HEALTHZ", {"js-server-only": True}, False),
    ("HEALTHZ", {"details": True}, True),
    ("HEALTHZ", {"stream": "S"}, True),
    ("HEALTHZ", {"account": "A", "stream": "S"}, True),
    ("HEALTHZ", {"account": "A", "stream": "NOPE", "details": True}, True),
    ("HEALTHZ", {"account": "A", "stream": "S", "consumer": "NOPE"}, False),
    ("KICK", {"cid": 99999}, False),
    ("LDM", {"cid": 99999}, False),
    ("RELOAD", {}, False),
]


def _normal(kind: str, answer: dict) -> dict:
    answer["server"] = sorted(answer["server"])
    data = answer.get("data")
    if kind in ("EXPVARZ", "IPQUEUESZ") and isinstance(data, dict):
        answer["data"] = "<an object>"
    return answer


async def _script(port: int) -> dict:
    url = f"nats://127.0.0.1:{port}"
    system = await nats.connect(url, user="sys", password="sys", allow_reconnect=False)
    user = await nats.connect(url, user="a", password="a", allow_reconnect=False)
    told = asyncio.Event()
    closed = asyncio.Event()

    async def lame_duck():
        told.set()

    async def on_closed():
        closed.set()

    warned = await nats.connect(url, user="a", password="a", allow_reconnect=False, lame_duck_mode_cb=lame_duck)
    kicked = await nats.connect(url, user="a", password="a", allow_reconnect=False, closed_cb=on_closed)
    results: dict = {}
    try:
        await user.jetstream().add_stream(name="S", subjects=["s.>"])
        server_id = json.loads((await system.request("$SYS.REQ.SERVER.PING.IDZ", b"", timeout=5)).data)["id"]

        async def ask(kind: str, body: dict, ping: bool) -> dict:
            subject = f"$SYS.REQ.SERVER.{'PING' if ping else server_id}.{kind}"
            msg = await system.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
            return _normal(kind, json.loads(msg.data))

        for kind, body, ping in REQUESTS:
            results[f"{'PING' if ping else 'id'} {kind} {json.dumps(body)}"] = await ask(kind, body, ping)
        varz = (await ask("VARZ", {}, False))["data"]
        results["VARZ fields"] = list(varz)
        # (not "strict", 2.11's strict JSON parsing of the API, which natserver does not do,
        # nor 2.15's limits, which it does not enforce)
        results["VARZ jetstream config"] = [key for key in varz["jetstream"]["config"] if key != "strict"]
        results["VARZ jetstream sync_interval"] = varz["jetstream"]["config"]["sync_interval"]
        results["EXPVARZ"] = await ask("EXPVARZ", {}, True)
        results["IPQUEUESZ"] = await ask("IPQUEUESZ", {"all": True}, False)
        results["LDM a client"] = await ask("LDM", {"cid": warned.client_id}, False)
        await asyncio.wait_for(told.wait(), 5)
        results["KICK a client"] = await ask("KICK", {"cid": kicked.client_id}, False)
        await asyncio.wait_for(closed.wait(), 5)
        # A request that is not JSON is not answered: the answer to the next request comes, and
        # none before it.
        silent = await system.subscribe("_silent")
        await system.publish(f"$SYS.REQ.SERVER.{server_id}.KICK", b"", reply="_silent")
        await system.request("$SYS.REQ.SERVER.PING.IDZ", b"", timeout=5)
        await system.flush()
        results["KICK without a body: answers"] = silent.pending_msgs
    finally:
        for nc in (system, user, warned, kicked):
            await nc.close()
    return results


def run_script(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_script(port), TIMEOUT))


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_what_natserver_has_of_go_runtime_endpoints(threaded_server):
    """Where 2.15.1 answers from Go's runtime, natserver answers what it has: no Raft groups
    or goroutine queues (empty objects), the command line of expvar, no pprof profile."""
    handle = threaded_server()
    system = handle.server.system

    def answer(kind: str, body: bytes = b"") -> dict:
        sent = []
        system.send = lambda subject, message, reply=None: sent.append(message)  # type: ignore[method-assign]
        try:
            system._answer(b"_r", kind, body, None)
        finally:
            del system.send
        return sent[0]["data"]

    assert answer("RAFTZ") == {} and answer("IPQUEUESZ", b'{"all":true}') == {}
    cmdline = answer("EXPVARZ")["cmdline"]
    assert isinstance(cmdline, list) and all(isinstance(arg, str) for arg in cmdline)
    assert answer("PROFILEZ") == {"profile": None, "error": "Profile name not specified"}
    assert answer("PROFILEZ", b'{"name":"cpu","duration":1000000000}') == {
        "profile": None, "error": 'Profile "cpu" not found'}


if __name__ == "__main__":
    record(run_script, CONFIG, RECORDED, binary=reference.NATS_SERVER)
