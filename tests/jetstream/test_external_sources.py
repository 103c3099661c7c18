"""Mirrors and sources with ``external: {api, deliver}`` (issue #13): the origin is another
account's (reached through service and stream imports) or another JetStream domain's (over a
leaf node), and the stream's internal consumer is created by a CONSUMER.CREATE request sent to
``<api>.CONSUMER.CREATE.<origin>`` through the server, delivering under the ``deliver`` prefix.

Each scenario runs against natserver and, when it is installed, nats-server 2.15.1 with the same
configuration: what the two show (the copied messages, their headers, the stream info, the
validation errors) must be the same, but for the origin's identity that 2.15.1 adds to a
sourced message's ``Nats-Stream-Source`` from a header of the consumer create answer (natserver
leaves it out there: ``_without_identity``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re

import nats
import pytest

from natserver.jetstream.external import get_hash, index_name
from tests import reference
from tests.auth import test_auth_helpers as helpers

HAVE_NATS_SERVER = reference.HAVE_NATS_SERVER
free_port = helpers.free_port


def running(kind: str, config: str, tmp_path):
    """test_auth_helpers.running with the reference, nats-server 2.15.1, as "nats-server"."""
    return helpers.running(kind, config, tmp_path, binary=reference.NATS_SERVER or "nats-server")

TIMEOUT = 30  # seconds, for each scenario (consumers are retried every 2 s in both servers)
SERVERS = ["natserver", pytest.param("nats-server", marks=[
    pytest.mark.skipif(not HAVE_NATS_SERVER, reason="nats-server is not installed"), pytest.mark.needs_nats_server])]

# B mirrors and sources A's stream: A exports its API, the delivery subjects and flow control.
ACCOUNTS = """
jetstream { store_dir: "%s" }
accounts {
  A { users [{user: a, password: a}], jetstream: enabled,
      exports [{service: "$JS.API.>"}, {stream: "deliver.B.>"}, {service: "$JS.FC.>"}] }
  B { users [{user: b, password: b}], jetstream: enabled,
      imports [{service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"},
               {stream: {account: A, subject: "deliver.B.>"}},
               {service: {account: A, subject: "$JS.FC.>"}}] }
}
"""
EXT = {"api": "JS.A.API", "deliver": "deliver.B"}


async def _request(nc, subject: str, body) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def _wait(nc, stream: str, count: int) -> dict:
    """Stream info once the stream holds ``count`` messages (the scenario's timeout bounds it)."""
    while True:
        info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}", None)
        if info.get("state", {}).get("messages", 0) >= count:
            return info
        await asyncio.sleep(0.05)


async def _messages(nc, stream: str, prefix: str = "$JS.API") -> list:
    info = await _request(nc, f"{prefix}.STREAM.INFO.{stream}", None)
    out = []
    for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
        got = await _request(nc, f"{prefix}.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            msg = got["message"]
            hdrs = _without_identity(base64.b64decode(msg["hdrs"]).decode()) if "hdrs" in msg else ""
            out.append((msg["seq"], msg["subject"], base64.b64decode(msg["data"]).decode(), hdrs))
    return out


_IDENTITY = re.compile(r"(Nats-Stream-Source: \S+ \d+ \S+ \S+ \S+) \S+")


def _without_identity(hdrs: str) -> str:
    """A sourced message's headers without the origin identity ending Nats-Stream-Source."""
    return _IDENTITY.sub(r"\1", hdrs)


def _link(info: dict) -> dict:
    """A mirror's or source's info with ``active`` as seen or not (its value is a duration)."""
    link = dict(info)
    link["active"] = link["active"] >= 0
    return link


async def _cross_account(port: int) -> dict:
    a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    out: dict = {}
    try:
        await a.jetstream().add_stream(name="O", subjects=["o.>"])
        for i in range(3):
            await a.jetstream().publish(f"o.{i}", b"x%d" % i, headers={"Nats-Msg-Id": str(i)})
        created = await _request(b, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": EXT}})
        out["created mirror"] = created["config"]["mirror"]
        await _request(b, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "sources": [
            {"name": "O", "filter_subject": "o.1", "external": EXT}]})
        await _wait(b, "M", 3)
        await _wait(b, "S", 1)
        await a.jetstream().publish("o.1", b"later")
        await b.jetstream().publish("s", b"local")
        out["M info"] = _link((await _wait(b, "M", 4))["mirror"])
        out["S info"] = [_link(s) for s in (await _wait(b, "S", 3))["sources"]]
        out["M"] = await _messages(b, "M")
        out["S"] = await _messages(b, "S")
        # The internal consumers are direct: neither listed nor counted in the origin.
        names = await _request(a, "$JS.API.CONSUMER.NAMES.O", None)
        info = await _request(a, "$JS.API.STREAM.INFO.O", None)
        out["O consumers"] = (names["total"], info["state"]["consumer_count"])
    finally:
        await a.close()
        await b.close()
    return out


@pytest.mark.parametrize("kind", SERVERS)
def test_another_accounts_stream_is_mirrored_and_sourced(kind, tmp_path):
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_cross_account(port), TIMEOUT))
    source = f"Nats-Stream-Source: O:{get_hash('JS.A.API')}"
    assert got == {
        "created mirror": {"name": "O", "external": EXT},
        "M info": {"name": "O", "external": EXT, "lag": 0, "active": True},
        "S info": [{"name": "O", "external": EXT, "lag": 0, "seq": 4, "active": True, "filter_subject": "o.1"}],
        "M": [
            (1, "o.0", "x0", "NATS/1.0\r\nNats-Msg-Id: 0\r\n\r\n"),
            (2, "o.1", "x1", "NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"),
            (3, "o.2", "x2", "NATS/1.0\r\nNats-Msg-Id: 2\r\n\r\n"),
            (4, "o.1", "later", ""),
        ],
        "S": [
            (1, "o.1", "x1", f"NATS/1.0\r\nNats-Msg-Id: 1\r\n{source} 2 o.1 > o.1\r\n\r\n"),
            (2, "o.1", "later", f"NATS/1.0\r\n{source} 4 o.1 > o.1\r\n\r\n"),
            (3, "s", "local", ""),
        ],
        "O consumers": (0, 0),
    }


def test_the_index_name_hashes_the_api_prefix_as_nats_server():
    # nats-server wrote "Nats-Stream-Source: O:3V17LQ3b 2 ..." for this api prefix.
    assert get_hash("JS.A.API") == "3V17LQ3b"
    assert index_name({"name": "O", "external": {"api": "JS.A.API", "deliver": ""}}) == "O:3V17LQ3b"
    assert index_name({"name": "O"}) == "O"


BAD = [
    {"name": "X1", "mirror": {"name": "O", "external": {"api": "$JS.API", "deliver": "d"}}},
    {"name": "X2", "mirror": {"name": "O", "external": {"api": "JS.A.API", "deliver": "d.*"}}},
    {"name": "X3", "mirror": {"name": "O", "external": {"api": "JS.*.API", "deliver": "d"}}},
    {"name": "X4", "mirror": {"name": "NOPE", "external": EXT}},
    {"name": "X5", "mirror": {"name": "O", "external": {"api": "nobody.API", "deliver": "deliver.B"}}},
    # A stream of this account named as the external origin (2.9 checked its subjects under the prefix).
    {"name": "X6", "subjects": ["x6"], "sources": [{"name": "L", "external": {"api": "JS.A.API", "deliver": "l"}}]},
    # Sourcing "itself" is no cycle when the origin is external.
    {"name": "X7", "subjects": ["x7"], "sources": [{"name": "X7", "external": EXT}]},
]


async def _validation(port: int) -> dict:
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    out: dict = {}
    try:
        await _request(b, "$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l.>"]})
        for cfg in BAD:
            got = await _request(b, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
            out[cfg["name"]] = got.get("error", "created")
        await asyncio.sleep(2.5)  # the consumer create requests are answered, or time out
        for name in ("X4", "X5"):
            info = await _request(b, f"$JS.API.STREAM.INFO.{name}", None)
            out[name + " info"] = info["mirror"]
    finally:
        await b.close()
    return out


@pytest.mark.parametrize("kind", SERVERS)
def test_external_prefixes_are_checked_and_errors_reported(kind, tmp_path):
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_validation(port), TIMEOUT))
    assert got == {
        "X1": {"code": 400, "err_code": 10021, "description": "stream external api prefix $JS.API must not overlap with $JS.API"},
        "X2": {"code": 400, "err_code": 10024, "description": "stream external delivery prefix d.* must not contain wildcards"},
        "X3": {"code": 500, "err_code": 10052,
               "description": 'stream external api prefix "JS.*.API" must be a valid subject without wildcards'},
        "X4": "created",
        "X5": "created",
        "X6": "created",  # (2.10+: the subjects of the external origin's namesake are not looked at)
        "X7": "created",
        # The origin's API answered the consumer create request with its error.
        "X4 info": {"name": "NOPE", "external": EXT, "lag": 0, "active": -1,
                    "error": {"code": 404, "err_code": 10059, "description": "stream not found"}},
        # Nobody answers: never active, no error.
        "X5 info": {"name": "O", "external": {"api": "nobody.API", "deliver": "deliver.B"}, "lag": 0, "active": -1},
    }


async def _flow_controlled(port: int, count: int) -> tuple:
    a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    try:
        await a.jetstream().add_stream(name="O", subjects=["o"])
        payload = b"x" * 1024
        acks = [a.jetstream().publish("o", payload) for _ in range(count)]
        await asyncio.gather(*acks)
        await _request(b, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": EXT}})
        info = await _wait(b, "M", count)
        return info["state"]["messages"], info["state"]["last_seq"], info["mirror"]["lag"]
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("kind", SERVERS)
def test_a_mirror_answers_flow_control_across_the_accounts(kind, tmp_path):
    # 2 MiB: four times the bytes after which a consumer waits for its flow control answer,
    # which goes back to account A through the $JS.FC.> service import.
    count = 2000
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_flow_controlled(port, count), TIMEOUT))
    assert got == (count, count, 0)


async def _restart_phase(port: int, phase: int) -> list:
    a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
    b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
    try:
        if phase == 1:
            await a.jetstream().add_stream(name="O", subjects=["o.>"])
            await _request(b, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": EXT}})
            await _request(b, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"],
                                                          "sources": [{"name": "O", "external": EXT}]})
        for i in range(3):
            await a.jetstream().publish(f"o.{phase}", b"%d-%d" % (phase, i))
        await _wait(b, "M", 3 * phase)
        await _wait(b, "S", 3 * phase)
        return [(await _messages(b, "M")), (await _messages(b, "S"))]
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("kind", SERVERS)
def test_a_restart_resumes_without_gaps_or_duplicates(kind, tmp_path):
    config = ACCOUNTS % (tmp_path / "store")
    with running(kind, config, tmp_path) as port:
        asyncio.run(asyncio.wait_for(_restart_phase(port, 1), TIMEOUT))
    with running(kind, config, tmp_path) as port:
        mirror, sourced = asyncio.run(asyncio.wait_for(_restart_phase(port, 2), TIMEOUT))
    assert [(seq, data) for seq, _, data, _ in mirror] == [
        (1, "1-0"), (2, "1-1"), (3, "1-2"), (4, "2-0"), (5, "2-1"), (6, "2-2")]
    hash_ = get_hash("JS.A.API")
    assert [(seq, data, hdrs.split("\r\n")[1]) for seq, _, data, hdrs in sourced] == [
        (seq, data, f"Nats-Stream-Source: O:{hash_} {seq} > > o.{1 if seq <= 3 else 2}") for seq, data in
        [(1, "1-0"), (2, "1-1"), (3, "1-2"), (4, "2-0"), (5, "2-1"), (6, "2-2")]]


# -- another JetStream domain, over a leaf node ---------------------------------------------------

HUB = """
jetstream { store_dir: "%s", domain: hub }
leafnodes { listen: "127.0.0.1:%d" }
"""
LEAF = """
jetstream { store_dir: "%s", domain: leaf }
leafnodes { remotes [{url: "nats-leaf://127.0.0.1:%d"}] }
"""


async def _across_the_leaf(hub_port: int, leaf_port: int) -> dict:
    hub = await nats.connect(f"nats://127.0.0.1:{hub_port}")
    leaf = await nats.connect(f"nats://127.0.0.1:{leaf_port}")
    ext = {"api": "$JS.hub.API", "deliver": "deliver.leaf"}
    try:
        await hub.jetstream().add_stream(name="O", subjects=["o.>"])
        for i in range(3):
            await hub.jetstream().publish(f"o.{i}", b"x%d" % i)
        while True:  # until the leaf connection carries the hub's API
            try:
                await leaf.request("$JS.hub.API.INFO", b"", timeout=1)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                await asyncio.sleep(0.1)
        api = "$JS.leaf.API"
        await _request(leaf, f"{api}.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": ext}})
        await _request(leaf, f"{api}.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "sources": [
            {"name": "O", "filter_subject": "o.2", "external": ext}]})
        await hub.jetstream().publish("o.2", b"later")
        while True:
            m = await _request(leaf, f"{api}.STREAM.INFO.M", None)
            s = await _request(leaf, f"{api}.STREAM.INFO.S", None)
            if m["state"]["messages"] >= 4 and s["state"]["messages"] >= 2:
                break
            await asyncio.sleep(0.05)
        return {"M": await _messages(leaf, "M", api), "S": await _messages(leaf, "S", api),
                "M info": _link(m["mirror"])}
    finally:
        await hub.close()
        await leaf.close()


def _pair(hub: str, leaf: str):
    marks = []
    if "nats-server" in (hub, leaf):
        marks = [pytest.mark.skipif(not HAVE_NATS_SERVER, reason="nats-server is not installed"),
                 pytest.mark.needs_nats_server]
    return pytest.param(hub, leaf, marks=marks, id=f"{hub}-hub-{leaf}-leaf")


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), [
    _pair("natserver", "natserver"), _pair("nats-server", "natserver"), _pair("natserver", "nats-server"),
    _pair("nats-server", "nats-server")])
def test_a_stream_of_another_domain_is_mirrored_over_a_leaf_node(hub_kind, leaf_kind, tmp_path):
    # The hub's consumer delivers over the leaf connection as "<ack reply>@<subject>".
    leaf_listen = free_port()
    with running(hub_kind, HUB % (tmp_path / "hub", leaf_listen), tmp_path) as hub_port, \
            running(leaf_kind, LEAF % (tmp_path / "leaf", leaf_listen), tmp_path) as leaf_port:
        got = asyncio.run(asyncio.wait_for(_across_the_leaf(hub_port, leaf_port), TIMEOUT))
    source = f"Nats-Stream-Source: O:{get_hash('$JS.hub.API')}"
    assert got == {
        "M": [(1, "o.0", "x0", ""), (2, "o.1", "x1", ""), (3, "o.2", "x2", ""), (4, "o.2", "later", "")],
        "S": [(1, "o.2", "x2", f"NATS/1.0\r\n{source} 3 o.2 > o.2\r\n\r\n"),
              (2, "o.2", "later", f"NATS/1.0\r\n{source} 4 o.2 > o.2\r\n\r\n")],
        "M info": {"name": "O", "external": {"api": "$JS.hub.API", "deliver": "deliver.leaf"}, "lag": 0, "active": True},
    }
