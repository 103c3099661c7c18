"""Consumer priority groups (nats-server 2.11, issue #27 item 3), as nats-server 2.15.1 does
them for pull consumers: ``priority_groups``, ``priority_policy`` (``overflow``,
``pinned_client``; ``prioritized`` is refused by name, unsupported.py) and ``priority_timeout``
with checkConsumerCfg's errors; pull requests' ``group``, ``min_pending``, ``min_ack_pending``,
``id`` and ``priority`` and the 400/423 statuses they can get; the overflow policy (a request
with thresholds waits until that many messages are pending or unacknowledged); the pinned
client (``Nats-Pin-Id`` on what it gets, 423 for another id, the pin moving after
``priority_timeout`` without a request, ``$JS.API.CONSUMER.UNPIN``, the PINNED/UNPINNED
advisories) and consumer info's ``priority_groups``.

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

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "priority_groups_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20
SECOND = 1_000_000_000
ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.*.S.*"


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
        self.sock.sendall(b"PUB %s _R.%d %d\r\n%s\r\nPING\r\n" % (subject.encode(), self.sent, len(payload), payload))
        time.sleep(0.1)  # (nats-server answers some from another goroutine, after a PONG)
        self.sock.sendall(b"PING\r\n")
        return self._messages()

    def read(self) -> list:
        self.sock.sendall(b"PING\r\n")
        return self._messages(1)

    def _messages(self, pongs: int = 2) -> list:
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
                messages.append((parts[1], reply, body[:hsize].decode(), body[hsize:].decode()))
                data = data[size + 2 :]
        return messages


def _header(head: str, name: str) -> str | None:
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def _normal(message: tuple, pins: list) -> object:
    subject, reply, head, payload = message

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
        return {"to": subject, "ack": ".".join(tokens[:7] + tokens[8:]), "data": payload,
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
