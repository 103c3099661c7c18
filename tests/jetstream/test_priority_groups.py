"""Consumer priority groups (nats-server 2.11, issue #27 item 3), as nats-server 2.15.1 does
them for pull consumers: ``priority_groups``, ``priority_policy`` (``overflow``,
``pinned_client``, ``prioritized``) and ``priority_timeout``
with checkConsumerCfg's errors; pull requests' ``group``, ``min_pending``, ``min_ack_pending``,
``id`` and ``priority`` and the 400/423 statuses they can get; the overflow policy (a request
with thresholds waits until that many messages are pending or unacknowledged); the pinned
client (``Nats-Pin-Id`` on what it gets, 423 for another id, the pin moving after
``priority_timeout`` without a request, ``$JS.API.CONSUMER.UNPIN``, the PINNED/UNPINNED
advisories); prioritized requests served by priority, in turn within one; and consumer info's
``priority_groups``.

One script runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/priority_groups_nats_server_2.15.1.json (``python -m tests.jetstream.test_priority_groups``
records it again); a live 2.15.1, when installed, must still give it. Pin ids are random: they
are recorded by the order they appear in (``pin1``, ``pin2``). Below it, the pin's timeout on
natserver's manual clock, with nats-py as the client (nats-py 2.16 has no priority group API:
its requests are sent as JSON).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from natserver.testing import NatsServer
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.jetstream.test_nats_py_suite import REFERENCE, target  # noqa: F401 (target: a fixture)

RECORDED = Path(__file__).with_name("data") / "priority_groups_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20
SECOND = 1_000_000_000
ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.*.S.*"
PULL_SID = 1000  # the script's pull requests: sid PULL_SID + n listens on _P.<n>


def _create(name: str, **config):
    return f"$JS.API.CONSUMER.CREATE.S.{name}", {"stream_name": "S", "config": {"durable_name": name, **config}}


def _next(name: str, body):
    return f"$JS.API.CONSUMER.MSG.NEXT.S.{name}", body


def _unpin(name: str, body, stream: str = "S"):
    return f"$JS.API.CONSUMER.UNPIN.{stream}.{name}", body


OVERFLOW = {"priority_policy": "overflow", "priority_groups": ["g", "h"], "ack_policy": "explicit"}
PINNED = {"priority_policy": "pinned_client", "priority_groups": ["g"], "ack_policy": "explicit"}
LATER = 1.3  # seconds: a step that waits for a 1 s request to expire
PIN = lambda n: lambda pins: {"batch": 1, "group": "g", "id": pins[n], "expires": 5 * SECOND}  # noqa: E731

# (name, subject, body): a body that is a function gets the pin ids seen so far; subject
# "wait" waits LATER seconds and reads what came meanwhile; "publish" bodies are stored.
SCRIPT: list[tuple] = [
    ("stream S", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    # Configuration.
    ("an unknown policy", *_create("X", priority_policy="bogus", priority_groups=["g"])),
    ("a policy as a number", *_create("X", priority_policy=1, priority_groups=["g"])),
    ("a policy without groups", *_create("X", priority_policy="overflow")),
    ("an empty group list", *_create("X", priority_policy="pinned_client", priority_groups=[])),
    ("groups without a policy", *_create("X", priority_groups=["g"])),
    ("groups with policy none", *_create("X", priority_policy="none", priority_groups=["g"])),
    ("a timeout without a policy", *_create("X", priority_timeout=SECOND)),
    ("an empty group name", *_create("X", priority_policy="overflow", priority_groups=["g", ""])),
    ("a dot in a group name", *_create("X", priority_policy="overflow", priority_groups=["a.b"])),
    ("a group name of 17", *_create("X", priority_policy="overflow", priority_groups=["a" * 17])),
    ("a group name of 16, every kind of character",
     *_create("X", priority_policy="overflow", priority_groups=["aZ09/_=-aaaaaaaa"])),
    ("a push consumer", *_create("Y", priority_policy="overflow", priority_groups=["g"], deliver_subject="d.y")),
    ("policy none and no groups", *_create("Y", priority_policy="none", priority_groups=[])),
    ("pinned: the default timeout", *_create("Z", priority_policy="pinned_client", priority_groups=["g"])),
    ("pinned: a negative timeout", *_create("Z2", priority_policy="pinned_client", priority_groups=["g"],
                                            priority_timeout=-5)),
    ("the overflow consumer", *_create("O", **OVERFLOW)),
    ("updated: another group", *_create("O", **{**OVERFLOW, "priority_groups": ["g", "h", "i"]})),
    ("the pinned consumer", *_create("P", **PINNED, priority_timeout=60 * SECOND)),
    ("a plain pull consumer", *_create("N", ack_policy="explicit")),
    ("the prioritized consumer", *_create("R", priority_policy="prioritized", priority_groups=["g"], filter_subject="s.r",
                                          ack_policy="none")),
    # Pull requests the rules refuse.
    ("overflow: no group", *_next("O", {"batch": 1, "expires": SECOND})),
    ("overflow: an empty group", *_next("O", {"batch": 1, "group": ""})),
    ("overflow: an unknown group", *_next("O", {"batch": 1, "group": "x"})),
    ("overflow: an id", *_next("O", {"batch": 1, "group": "g", "id": "abc"})),
    ("overflow: priority 10", *_next("O", {"batch": 1, "group": "g", "priority": 10})),
    ("overflow: priority -1", *_next("O", {"batch": 1, "group": "g", "priority": -1})),
    ("plain: min_pending", *_next("N", {"batch": 1, "min_pending": 1})),
    ("plain: min_ack_pending", *_next("N", {"batch": 1, "min_ack_pending": 1})),
    ("plain: an id", *_next("N", {"batch": 1, "id": "abc"})),
    ("plain: a group is ignored", *_next("N", {"batch": 1, "group": "x", "no_wait": True})),
    ("plain: priority 10", *_next("N", {"batch": 1, "priority": 10, "no_wait": True})),
    ("pinned: min_pending", *_next("P", {"batch": 1, "group": "g", "min_pending": 1})),
    ("pinned: no group", *_next("P", {"batch": 1})),
    # Overflow.
    ("publish 1", "s.a", b"m1"),
    ("publish 2", "s.a", b"m2"),
    ("publish 3", "s.a", b"m3"),
    ("info O", "$JS.API.CONSUMER.INFO.S.O", b""),
    ("min_pending 5 waits", *_next("O", {"batch": 1, "group": "g", "min_pending": 5, "expires": SECOND})),
    ("min_pending 5 times out", "wait", b""),
    ("min_pending 3 is served", *_next("O", {"batch": 1, "group": "g", "min_pending": 3, "expires": SECOND})),
    ("min_pending 3 again waits (2 pending)",
     *_next("O", {"batch": 1, "group": "h", "min_pending": 3, "expires": 5 * SECOND})),
    ("a third message comes: served", "s.b", b"m4"),
    ("min_ack_pending 3 waits (2 unacked)",
     *_next("O", {"batch": 1, "group": "g", "min_ack_pending": 3, "expires": SECOND})),
    ("min_ack_pending 3 times out", "wait", b""),
    ("min_ack_pending 2 is served", *_next("O", {"batch": 1, "group": "g", "min_ack_pending": 2})),
    ("either threshold will do", *_next("O", {"batch": 1, "group": "g", "min_ack_pending": 3,
                                              "min_pending": 1, "no_wait": True})),
    ("publish 5", "s.b", b"m5"),
    ("a number is served as it is", *_next("O", b"1")),
    ("no thresholds, nothing left", *_next("O", {"batch": 1, "group": "i", "no_wait": True})),
    ("info O after", "$JS.API.CONSUMER.INFO.S.O", b""),
    # Pinned client.
    ("the first request is pinned", *_next("P", {"batch": 1, "group": "g", "expires": 5 * SECOND})),
    ("info P", "$JS.API.CONSUMER.INFO.S.P", b""),
    ("another id", *_next("P", {"batch": 1, "group": "g", "id": "other", "expires": SECOND})),
    ("the pinned id", *_next("P", PIN(0))),
    ("no id: waits while another is pinned", *_next("P", {"batch": 1, "group": "g", "expires": SECOND})),
    ("the request without an id times out", "wait", b""),
    ("no id, waiting longer", *_next("P", {"batch": 1, "group": "g", "expires": 5 * SECOND})),
    ("unpin: the waiting request is pinned", *_unpin("P", {"group": "g"})),
    ("info P pinned again", "$JS.API.CONSUMER.INFO.S.P", b""),
    ("the first pin's id", *_next("P", PIN(0))),
    ("unpin again", *_unpin("P", {"group": "g"})),
    ("info P unpinned", "$JS.API.CONSUMER.INFO.S.P", b""),
    ("the second pin's id, unpinned", *_next("P", PIN(1))),
    ("a new pin for two", *_next("P", {"batch": 2, "group": "g", "expires": 5 * SECOND})),
    ("another message, nobody waiting", "s.c", b"m6"),
    ("the new pin's id gets it", *_next("P", lambda pins: {"batch": 1, "group": "g", "id": pins[2],
                                                                   "no_wait": True})),
    # Prioritized: lower numbers first, first come first served within one; a request that is a
    # number names no group and comes last.
    ("a number, last", *_next("R", b"2")),
    ("priority 5 for two", *_next("R", {"batch": 2, "group": "g", "priority": 5, "expires": 5 * SECOND})),
    ("priority 1", *_next("R", {"batch": 1, "group": "g", "priority": 1, "expires": 5 * SECOND})),
    ("another priority 5", *_next("R", {"batch": 2, "group": "g", "priority": 5, "expires": 5 * SECOND})),
    ("no priority: 0", *_next("R", {"batch": 1, "group": "g", "expires": 5 * SECOND})),
    ("prioritized: min_pending", *_next("R", {"batch": 1, "group": "g", "min_pending": 1})),
    ("prioritized: an unknown group", *_next("R", {"batch": 1, "group": "x"})),
    ("info R", "$JS.API.CONSUMER.INFO.S.R", b""),
    ("r1", "s.r", b"r1"),
    ("r2", "s.r", b"r2"),
    ("r3", "s.r", b"r3"),
    ("r4", "s.r", b"r4"),
    ("r5", "s.r", b"r5"),
    ("r6", "s.r", b"r6"),
    ("r7", "s.r", b"r7"),
    ("r8", "s.r", b"r8"),
    ("unpin: no group", *_unpin("P", {})),
    ("unpin: an empty body", *_unpin("P", b"")),
    ("unpin: null", *_unpin("P", b"null")),
    ("unpin: an array", *_unpin("P", b"[1]")),
    ("unpin: a number", *_unpin("P", {"group": 5})),
    ("unpin: a bad name", *_unpin("P", {"group": "a.b"})),
    ("unpin: an unknown group", *_unpin("P", {"group": "zz"})),
    ("unpin: an unknown consumer", *_unpin("Q", {"group": "g"})),
    ("unpin: an unknown stream", *_unpin("P", {"group": "g"}, stream="T")),
    ("unpin: an unknown field", *_unpin("P", {"group": "g", "foo": 1})),
    ("unpin an overflow consumer", *_unpin("O", {"group": "h"})),
    ("unpin a plain consumer", *_unpin("N", {"group": "g"})),
    ("info P at the end", "$JS.API.CONSUMER.INFO.S.P", b""),
]


class _Client(RawClient):
    """RawClient whose requests each have their own reply subject (``_R.<n>``: pull requests
    are told apart), that also listens to the consumer advisories, and keeps each message's
    subject, reply and headers."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.sock.sendall(f"SUB {ADVISORIES} 2\r\nPING\r\n".encode())
        self._until(b"PONG\r\n")
        self.sent = 0

    def request(self, subject: str, body) -> list:  # type: ignore[override]
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sent += 1
        reply = b"_R.%d" % self.sent
        if ".MSG.NEXT." in subject:  # its own subscription: what it gets is told apart by the sid
            reply = b"_P.%d" % self.sent
            self.sock.sendall(b"SUB %s %d\r\n" % (reply, PULL_SID + self.sent))
        self.sock.sendall(b"PUB %s %s %d\r\n%s\r\nPING\r\n" % (subject.encode(), reply, len(payload), payload))
        time.sleep(0.1)  # (nats-server answers some from another goroutine, after a PONG)
        self.sock.sendall(b"PING\r\n")
        return self._messages()

    def read(self) -> list:
        self.sock.sendall(b"PING\r\n")
        return self._messages(1)

    def _messages(self, pongs: int = 2) -> list:
        """(subject, reply, headers, payload, the pull request's reply it answers or "")"""
        data = b"".join(self._until(b"PONG\r\n") for _ in range(pongs))
        messages = []
        while data:
            line, _, data = data.partition(b"\r\n")
            if line.startswith((b"MSG ", b"HMSG ")):
                parts = line.decode().split()
                size = int(parts[-1])
                hsize = int(parts[-2]) if parts[0] == "HMSG" else 0
                reply = parts[3] if len(parts) == (6 if parts[0] == "HMSG" else 5) else ""
                body = data[:size]
                sid = int(parts[2])
                request = f"_P.{sid - PULL_SID}" if sid > PULL_SID else ""
                messages.append((parts[1], reply, body[:hsize].decode(), body[hsize:].decode(), request))
                data = data[size + 2 :]
        return messages


def _header(head: str, name: str) -> str | None:
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def _normal(message: tuple, pins: list) -> object:
    subject, reply, head, payload, request = message

    def pin(value):
        if not value:
            return value
        if value not in pins:
            pins.append(value)
        return f"pin{pins.index(value) + 1}"

    if subject.startswith("$JS.EVENT.ADVISORY."):
        doc = json.loads(payload)
        if not doc["type"].endswith(("pinned", "unpinned")):
            return None  # (consumer created/updated: not this test's)
        for key in ("id", "timestamp"):
            doc.pop(key)
        if "pinned_id" in doc:
            doc["pinned_id"] = pin(doc["pinned_id"])
        return {"advisory": subject, **doc}
    if reply.startswith("$JS.ACK."):  # a delivery: to which request, the ack reply without its timestamp
        tokens = reply.split(".")
        return {"to": request, "subject": subject, "ack": ".".join(tokens[:7] + tokens[8:]), "data": payload,
                "pin": pin(_header(head, "Nats-Pin-Id"))}
    if head:  # a status
        return {"to": subject, "status": head.strip()}
    if not payload:
        return {"to": subject, "empty": True}
    doc = json.loads(payload)
    if "config" in doc and "delivered" in doc:
        return _consumer(doc, pin)
    if "config" in doc and "state" in doc:
        return "stream created"
    if "seq" in doc:
        return {"seq": doc["seq"]}
    return doc


def _consumer(doc: dict, pin) -> dict:
    """What a consumer create or info answer says of priority groups."""
    config = doc["config"]
    out = {"name": doc["name"], **{k: config[k] for k in ("priority_groups", "priority_policy", "priority_timeout")
                                   if k in config},
           "num_pending": doc["num_pending"], "num_ack_pending": doc["num_ack_pending"],
           "num_waiting": doc["num_waiting"]}
    if "priority_groups" in doc:
        out["state"] = [{**g, "pinned_client_id": pin(g.get("pinned_client_id")),
                         "pinned_ts": "zero" if g["pinned_ts"].startswith("0001-") else "set"}
                        for g in doc["priority_groups"]]
    return out


def run_script(port: int) -> dict:
    client = _Client(port)
    pins: list[str] = []
    out = {}
    for name, subject, body in SCRIPT:
        if subject == "wait":
            time.sleep(LATER)
            messages = client.read()
        else:
            messages = client.request(subject, body(pins) if callable(body) else body)
        answers = [a for a in (_normal(m, pins) for m in messages) if a is not None]
        # Advisories, deliveries and answers come in an order that differs between servers
        # (nats-server sends them from different goroutines): compared as sets.
        out[name] = sorted(answers, key=lambda a: json.dumps(a, sort_keys=True))
    return out


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)


# -- the pin's timeout, on the server's clock (nats-py as the client) ----------------------------


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


class _Puller:
    """A client's pull requests to a consumer, sent as JSON with nats-py (2.16 has no priority
    group API); what answers them arrives on the client's own inbox."""

    def __init__(self, nc, consumer: str) -> None:
        self.nc, self.consumer = nc, consumer
        self.inbox = nc.new_inbox()
        self.got: asyncio.Queue = asyncio.Queue()

    async def start(self) -> _Puller:
        await self.nc.subscribe(self.inbox, cb=self.got.put)
        return self

    async def ask(self, **request) -> None:
        await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{self.consumer}", json.dumps(request).encode(),
                              reply=self.inbox)
        await self.nc.flush()

    async def next(self):
        return await asyncio.wait_for(self.got.get(), 5)

    async def nothing(self) -> bool:
        await self.nc.flush()
        await asyncio.sleep(0.2)
        return self.got.empty()


async def _setup(url: str, **config):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    body = {"stream_name": "S", "config": {"durable_name": "C", "ack_policy": "explicit", **config}}
    answer = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.S.C", json.dumps(body).encode())).data)
    assert "error" not in answer, answer
    events: asyncio.Queue = asyncio.Queue()

    async def on_event(msg):
        await events.put(json.loads(msg.data))

    await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.S.C", cb=on_event)
    await nc.flush()
    return nc, js, events


async def _pinned(events) -> dict:
    while True:
        event = await asyncio.wait_for(events.get(), 5)
        if event["type"].endswith(("_pinned", "_unpinned")):
            return event


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_the_pin_moves_when_the_pinned_client_stops_asking(nats_server):
    """A's first request is pinned; B, asking without an id, waits. A asks again with its id
    before priority_timeout (10 s) runs out, which keeps the pin; then A stops asking, and 10 s
    later the pin goes (advisory "timeout") to B's waiting request. A's id is then refused."""

    async def main():
        nc, js, events = await _setup(nats_server.url, priority_policy="pinned_client", priority_groups=["g", "h"],
                                      priority_timeout=10 * SECOND)
        for n in range(4):
            await js.publish("s.a", b"m%d" % n)
        a, b = await _Puller(nc, "C").start(), await _Puller(nc, "C").start()
        await a.ask(batch=1, group="h", expires=60 * SECOND)  # (the advisories name A's group)
        first = await a.next()
        pin = first.headers["Nats-Pin-Id"]
        assert first.data == b"m0" and len(pin) == 22
        assert (await _pinned(events))["pinned_id"] == pin
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.C", b"")).data)
        assert info["priority_groups"][0]["pinned_client_id"] == pin
        await b.ask(batch=1, group="g", expires=60 * SECOND)
        assert await b.nothing()
        await nats_server.advance_async(8)
        await a.ask(batch=1, group="g", id=pin, expires=60 * SECOND)  # the pin for another 10 s
        second = await a.next()
        assert (second.data, second.headers["Nats-Pin-Id"]) == (b"m1", pin)
        await nats_server.advance_async(8)  # 16 s after the pin, 8 after A's last request
        assert await b.nothing() and events.empty()
        await nats_server.advance_async(3)
        unpinned = await _pinned(events)
        assert (unpinned["reason"], unpinned["group"]) == ("timeout", "h")
        third = await b.next()
        new_pin = third.headers["Nats-Pin-Id"]
        assert third.data == b"m2" and new_pin != pin
        assert (await _pinned(events))["pinned_id"] == new_pin
        await a.ask(batch=1, group="g", id=pin, expires=60 * SECOND)
        refused = await a.next()
        assert (refused.headers["Status"], refused.headers.get("Description")) == ("423", "Nats-Pin-Id mismatch")
        await nc.close()

    _run(main())


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_a_pin_nobody_renews_goes_and_the_next_request_gets_a_new_one(nats_server):
    """Nothing waits when the pin times out: info shows no pin; the old id's next request,
    with a message there, is told 423 Nats-Wrong-Pin-Id; a request without an id is pinned."""

    async def main():
        nc, js, events = await _setup(nats_server.url, priority_policy="pinned_client", priority_groups=["g"])
        await js.publish("s.a", b"one")
        a = await _Puller(nc, "C").start()
        await a.ask(batch=1, group="g", no_wait=True)
        first = await a.next()
        await first.ack()  # (or ack_wait would bring it again)
        pin = first.headers["Nats-Pin-Id"]
        await _pinned(events)
        await nats_server.advance_async(119)  # the default priority_timeout: 2 minutes
        assert events.empty()
        await nats_server.advance_async(2)
        assert (await _pinned(events))["reason"] == "timeout"
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.C", b"")).data)
        assert info["priority_groups"] == [{"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}]
        await js.publish("s.a", b"two")
        await a.ask(batch=1, group="g", id=pin, no_wait=True)
        refused = await a.next()
        assert refused.headers["Status"] == "423" and refused.headers["Nats-Pending-Messages"] == "1"
        await a.ask(batch=1, group="g", no_wait=True)
        got = await a.next()
        assert got.data == b"two" and got.headers["Nats-Pin-Id"] not in ("", pin)
        await nc.close()

    _run(main())


# -- with nats-py, against natserver and nats-server 2.15.1 alike ---------------------------------


# (the ``target`` fixture: tests/jetstream/test_nats_py_suite.py's, imported above)


def test_overflow_serves_the_standby_only_past_its_threshold(target):  # noqa: F811 (the imported fixture)
    """The usual overflow set-up: a primary asks without thresholds, a standby with
    min_pending 3. With the primary away, the standby gets nothing while fewer than 3 wait,
    and is served once the backlog reaches 3."""

    async def main():
        nc, js, _ = await _setup(target.url, priority_policy="overflow", priority_groups=["jobs"])
        standby = await _Puller(nc, "C").start()
        await standby.ask(batch=5, group="jobs", min_pending=3, expires=30 * SECOND)
        await js.publish("s.a", b"j1")
        await js.publish("s.a", b"j2")
        assert await standby.nothing()
        await js.publish("s.a", b"j3")
        assert (await standby.next()).data == b"j1"
        primary = await _Puller(nc, "C").start()
        await primary.ask(batch=5, group="jobs", expires=30 * SECOND)
        assert [(await primary.next()).data for _ in range(2)] == [b"j2", b"j3"]
        await nc.close()

    _run(main())


def test_unpin_hands_the_group_to_the_waiting_client(target):  # noqa: F811 (the imported fixture)
    """A is pinned; B's request waits. UNPIN: B's request gets the next message and a new pin;
    A's request with its old id is refused (423), B's id is served."""

    async def main():
        nc, js, events = await _setup(target.url, priority_policy="pinned_client", priority_groups=["g"])
        for n in range(3):
            await js.publish("s.a", b"m%d" % n)
        a, b = await _Puller(nc, "C").start(), await _Puller(nc, "C").start()
        await a.ask(batch=1, group="g", expires=10 * SECOND)
        pin_a = (await a.next()).headers["Nats-Pin-Id"]
        assert (await _pinned(events))["pinned_id"] == pin_a
        await b.ask(batch=1, group="g", expires=10 * SECOND)
        assert await b.nothing()
        answer = json.loads((await nc.request("$JS.API.CONSUMER.UNPIN.S.C", b'{"group":"g"}')).data)
        assert answer == {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}
        got = await b.next()
        pin_b = got.headers["Nats-Pin-Id"]
        assert got.data == b"m1" and pin_b != pin_a
        seen = [await _pinned(events), await _pinned(events)]
        assert sorted((e["type"].rsplit(".", 1)[1], e.get("reason"), e.get("pinned_id")) for e in seen) == [
            ("consumer_group_pinned", None, pin_b), ("consumer_group_unpinned", "admin", None)]
        await a.ask(batch=1, group="g", id=pin_a, expires=10 * SECOND)
        assert (await a.next()).headers["Status"] == "423"
        await b.ask(batch=1, group="g", id=pin_b, expires=10 * SECOND)
        got = await b.next()
        assert (got.data, got.headers["Nats-Pin-Id"]) == (b"m2", pin_b)
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.C", b"")).data)
        assert info["priority_groups"][0]["pinned_client_id"] == pin_b
        await nc.close()

    _run(main())


def test_a_durable_keeps_its_priority_settings_across_a_restart(tmp_path):
    """The settings are in the durable's configuration on disk (the pin is not: it is in
    memory, as in nats-server): after a restart the rules still apply."""
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js")) as server:

        async def before():
            nc, js, _ = await _setup(server.url, priority_policy="pinned_client", priority_groups=["g"],
                                     priority_timeout=30 * SECOND)
            await js.publish("s.a", b"one")
            a = await _Puller(nc, "C").start()
            await a.ask(batch=1, group="g", no_wait=True)
            assert "Nats-Pin-Id" in (await a.next()).headers
            await nc.close()

        _run(before())
        server.restart()

        async def after():
            nc = await nats.connect(server.url)
            info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.C", b"")).data)
            assert {k: info["config"][k] for k in ("priority_groups", "priority_policy", "priority_timeout")} == {
                "priority_groups": ["g"], "priority_policy": "pinned_client", "priority_timeout": 30 * SECOND}
            assert info["priority_groups"] == [{"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}]
            a = await _Puller(nc, "C").start()
            await a.ask(batch=1, no_wait=True)
            assert (await a.next()).headers.get("Description") == "Bad Request - Priority Group missing"
            await nc.close()

        _run(after())
