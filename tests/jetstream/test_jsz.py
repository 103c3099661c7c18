"""/jsz, /varz's "jetstream" and /healthz with JetStream (issue #18 item 5): the same traffic
against natserver and nats-server 2.15.1 (when installed) gives the same documents, after
masking ids, times, the store directory and the machine-dependent default limits, and apart
from the JetStream 2.10/2.11 fields natserver does not have yet (_PENDING_FIELDS)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest

from natserver.protocol.const import JS_API_LEVEL
from tests.reference import NATS_SERVER, needs_nats_server

TIMEOUT = 20
QUERIES = ["/jsz", "/jsz?accounts=true", "/jsz?streams=true", "/jsz?streams=true&config=true",
           "/jsz?consumers=true&accounts=true", "/jsz?consumers=true&config=true", "/jsz?acc=NOPE&accounts=true"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    def __init__(self, cmd: list[str], store: Path, jetstream: bool = True) -> None:
        self.port, self.http = _free_port(), _free_port()
        js = ["-js", "-sd", str(store)] if jetstream else []
        self.proc = subprocess.Popen([*cmd, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http), *js],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                self.get("/healthz")
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{cmd} did not start") from None
                time.sleep(0.05)

    def get(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=TIMEOUT) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(TIMEOUT)


def _traffic(port: int) -> None:
    async def main() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5)
        js = nc.jetstream()
        await js.add_stream(name="S1", subjects=["s1.>"])
        await js.add_stream(name="S2", subjects=["s2"], storage="memory")
        for i in range(3):
            await js.publish(f"s1.{i % 2}", b"hello")
        await js.publish("s2", b"x")
        # A durable that got two messages and acknowledged one; one message deleted in the middle.
        puller = await js.pull_subscribe("s1.>", durable="D")
        got = await puller.fetch(2)
        await got[0].ack_sync()
        await js.delete_msg("S1", 2)
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


_MASKED_KEYS = {"server_id", "now", "created", "first_ts", "last_ts", "leader", "store_dir", "max_memory",
                "max_storage", "last_active", "ts"}


def _mask(value):
    if isinstance(value, dict):
        if "stream_detail" in value:  # nats-server lists streams in Go map order
            value = {**value, "stream_detail": sorted(value["stream_detail"], key=lambda s: s["name"])}
        return {k: ("<masked>" if k in _MASKED_KEYS else _mask(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v) for v in value]
    return value


# What 2.15.1's /jsz has and natserver's not: its "limits" (default_max_consumers, a limit
# natserver does not have), left out of nats-server's documents.
_PENDING_FIELDS = {"limits"}


def _without_pending(theirs, ours):
    """nats-server's document without the _PENDING_FIELDS natserver's lacks at the same place."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return {k: _without_pending(v, ours.get(k)) for k, v in theirs.items() if k in ours or k not in _PENDING_FIELDS}
    if isinstance(theirs, list) and isinstance(ours, list):
        return [_without_pending(t, o) for t, o in zip(theirs, ours)] + theirs[len(ours):]
    return theirs


def _api_levels(doc, level: int):
    """The document with each "api" level set to ``level`` (the server's own JetStream level),
    but an account detail's (which nats-server leaves at 0)."""
    if isinstance(doc, dict):
        return {k: ({**v, "level": level} if k == "api" and isinstance(v, dict) and "level" in v and "id" not in doc
                    else _api_levels(v, level)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_api_levels(v, level) for v in doc]
    return doc


def _documents(server: Running) -> dict:
    docs = {q: server.get(q) for q in QUERIES}
    docs["/varz jetstream"] = (200, server.get("/varz")[1]["jetstream"])
    for q in ("/healthz", "/healthz?js-enabled-only=true"):
        docs[q] = server.get(q)
    return docs


@pytest.fixture
def natserver_js(tmp_path):
    server = Running([sys.executable, "-m", "natserver"], tmp_path / "ours")
    yield server
    server.stop()


def test_jsz_reports_the_real_state(natserver_js):
    _traffic(natserver_js.port)
    status, doc = natserver_js.get("/jsz?streams=true&config=true")
    assert status == 200
    # monitor.go JSInfo: the JetStream stats first, then the server's id and time (2.15.1's order)
    assert list(doc)[:10] == ["memory", "storage", "reserved_memory", "reserved_storage", "accounts", "ha_assets",
                              "api", "server_id", "now", "config"]
    assert list(doc)[-1] == "total" and doc["total"] == 1  # the JetStream accounts
    assert (doc["streams"], doc["consumers"], doc["messages"], doc["accounts"]) == (2, 1, 3, 1)
    assert doc["api"]["level"] == JS_API_LEVEL and doc["account_details"][0]["api"]["level"] == 0
    assert doc["memory"] == 19 and doc["storage"] == doc["bytes"] - 19
    assert doc["api"]["total"] >= 2 and doc["api"]["errors"] <= 1  # (nats-py looks the durable up first)
    assert doc["config"]["store_dir"].endswith("/ours/jetstream")
    assert doc["config"]["max_memory"] > 0 and doc["config"]["max_storage"] > 0
    (account,) = doc["account_details"]
    assert (account["name"], account["reserved_memory"]) == ("$G", 2**64 - 1)
    streams = {s["name"]: s for s in account["stream_detail"]}
    assert list(streams) == ["S1", "S2"]
    assert streams["S1"]["state"]["messages"] == 2 and streams["S1"]["state"]["num_subjects"] == 1
    assert streams["S2"]["config"]["storage"] == "memory"
    assert streams["S1"]["cluster"]["leader"] == doc["server_id"]
    varz = natserver_js.get("/varz")[1]["jetstream"]
    assert varz["config"] == doc["config"] and varz["stats"]["memory"] == 19
    # Without details asked for, none are given; an unknown account has none.
    assert "account_details" not in natserver_js.get("/jsz")[1]
    assert natserver_js.get("/jsz?acc=NOPE&accounts=true")[1]["account_details"][0]["name"] == "$G"  # as 2.9.10
    assert "stream_detail" not in natserver_js.get("/jsz?accounts=true")[1]["account_details"][0]
    assert natserver_js.get("/healthz?js-enabled-only=true") == (200, {"status": "ok"})
    # consumers=true: each stream's consumers, as consumer info; config only when asked for.
    detail = natserver_js.get("/jsz?consumers=true")[1]["account_details"][0]["stream_detail"][0]["consumer_detail"]
    (consumer,) = detail
    assert "config" not in consumer and consumer["name"] == "D"
    # Message 2 was delivered, not acknowledged, then deleted: nats-server takes it as acknowledged.
    assert (consumer["delivered"]["stream_seq"], consumer["ack_floor"]["stream_seq"]) == (2, 2)
    assert (consumer["num_ack_pending"], consumer["num_pending"]) == (0, 1)
    with_config = natserver_js.get("/jsz?consumers=true&config=true")[1]
    assert with_config["account_details"][0]["stream_detail"][0]["consumer_detail"][0]["config"]["durable_name"] == "D"


def test_jsz_without_jetstream(tmp_path):
    server = Running([sys.executable, "-m", "natserver"], tmp_path, jetstream=False)
    try:
        status, doc = server.get("/jsz?accounts=true")
        assert status == 200 and doc["disabled"] is True and doc["streams"] == 0
        assert doc["api"] == {"level": 0, "total": 0, "errors": 0} and doc["total"] == 0
        assert server.get("/varz")[1]["jetstream"] == {}
        assert server.get("/healthz?js-enabled-only=true") == (200, {"status": "ok"})
    finally:
        server.stop()


@needs_nats_server
def test_jsz_matches_nats_server(natserver_js, tmp_path):
    theirs = Running([NATS_SERVER], tmp_path / "theirs")
    try:
        _traffic(theirs.port)
        _traffic(natserver_js.port)
        ours_docs, their_docs = _documents(natserver_js), _documents(theirs)
    finally:
        theirs.stop()
    for query in their_docs:
        ours = _mask(ours_docs[query])
        # natserver reports the API level it implements (INFO's api_lvl), nats-server its own
        expected = _api_levels(_without_pending(_mask(their_docs[query]), ours), JS_API_LEVEL)
        assert json.dumps(ours) == json.dumps(expected), query  # values and key order


def test_store_directory_logged_as_nats_server_does(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(port), "-js",
                             "-sd", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + TIMEOUT
    for line in proc.stderr:
        lines.append(line)
        if "Server is ready" in line or time.monotonic() > deadline:
            break
    proc.terminate()
    proc.wait(TIMEOUT)
    text = "".join(lines)
    assert f'  Store Directory: "{tmp_path}/jetstream"' in text
    assert re.search(r"  Max Memory:      \d+\.\d\d [KMGT]B\n", text)


def _evicted_pending(port: int) -> tuple:
    async def main():
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5)
        js = nc.jetstream()
        await js.add_stream(name="L", subjects=["l"], max_msgs=2)
        await js.publish("l", b"1")
        puller = await js.pull_subscribe("l", durable="C")
        await puller.fetch(1)  # message 1 pending
        await js.publish("l", b"2")
        await js.publish("l", b"3")  # message 1 leaves the stream (max_msgs)
        info = await js.consumer_info("L", "C")
        await nc.close()
        return info.num_ack_pending, info.ack_floor.stream_seq, info.num_pending, info.delivered.stream_seq

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_pending_message_removed_by_a_limit_counts_as_acknowledged(natserver_js, tmp_path):
    ours = _evicted_pending(natserver_js.port)
    assert ours == (0, 1, 2, 1)
    if NATS_SERVER is not None:
        theirs = Running([NATS_SERVER], tmp_path / "theirs")
        try:
            assert _evicted_pending(theirs.port) == ours
        finally:
            theirs.stop()


HEALTH_QUERIES = [
    "/healthz", "/healthz?details=true", "/healthz?js-enabled-only=true", "/healthz?js-server-only=true",
    "/healthz?stream=S1", "/healthz?stream=S1&details=true", "/healthz?account=$G&consumer=D",
    "/healthz?account=NOPE", "/healthz?account=NOPE&details=true", "/healthz?account=$G",
    "/healthz?account=$G&stream=S1", "/healthz?account=$G&stream=NOPE", "/healthz?account=$G&stream=NOPE&details=true",
    "/healthz?account=$G&stream=S1&consumer=D", "/healthz?account=$G&stream=S1&consumer=NOPE&details=true",
    "/healthz?account=$G&stream=S2&consumer=D",
]


def test_healthz_checks_accounts_streams_and_consumers(natserver_js, tmp_path):
    """monitor.go healthz (2.15.1): account, stream and consumer are looked for in the store,
    a missing one is a 404 (with details, an error object), a stream without its account or a
    consumer without its stream a 400; the same answers from natserver and nats-server."""
    _traffic(natserver_js.port)
    ours = {query: natserver_js.get(query) for query in HEALTH_QUERIES}
    assert ours["/healthz?account=$G&stream=S1&consumer=D"] == (200, {"status": "ok"})
    assert ours["/healthz?account=$G&stream=NOPE&details=true"] == (404, {"status": "error", "errors": [
        {"type": "STREAM", "account": "$G", "stream": "NOPE", "error": 'JetStream stream "NOPE" not found on account "$G"'}]})
    assert ours["/healthz?stream=S1"] == (400, {
        "status": "error", "error": '"account" must not be empty when checking stream health'})
    if NATS_SERVER is not None:
        theirs = Running([NATS_SERVER], tmp_path / "theirs")
        try:
            _traffic(theirs.port)
            for query in HEALTH_QUERIES:
                assert ours[query] == theirs.get(query), query
        finally:
            theirs.stop()
