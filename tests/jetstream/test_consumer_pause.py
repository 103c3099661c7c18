"""Pausing consumers (nats-server 2.11, issue #27 item 3), as nats-server 2.15.1 does it:
``pause_until`` in a consumer's configuration on create (an update keeps the deadline the
consumer has, in UTC from then on), ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` and its
answers (errors included), ``paused`` / ``pause_remaining`` in consumer info, the
``$JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>`` advisories, and what a paused consumer
does: nothing delivered, push or pull (a ``no_wait`` request gets 404 at once, one with
``expires`` waits and times out), until the deadline passes, when it goes on by itself.

One script runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/consumer_pause_nats_server_2.15.1.json (``python -m tests.jetstream.test_consumer_pause``
records it again); a live 2.15.1, when installed, must still give it. The deadlines are taken
from the clock as the script runs (one a day ahead, one a few seconds ahead that the script
waits out) and recorded by name.

Below: Go's time texts (recorded from 2.15.1), natserver on a clock the test moves
(``clock="manual"``: delivery stopping and resuming at the deadline, heartbeats while paused,
resuming through the API, a restart), and nats-py against natserver and 2.15.1 alike (a restart,
and nats-py's own ConsumerPauseResumeTest cases).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig

from natserver.jetstream import gotime
from natserver.jetstream.gojson import GoDecodeError
from natserver.testing import NatsServer
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.jetstream.test_nats_py_suite import REFERENCE, target  # noqa: F401 (target: a fixture)

RECORDED = Path(__file__).with_name("data") / "consumer_pause_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 20
DAY = 86_400
SOON = 3.0  # seconds: the short pause the script waits out
PAST = "2020-01-01T00:00:00+02:00"
ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.>"


class Times:
    """The script's deadlines, from the wall clock when the script starts (``far``: a day
    ahead, written with an offset and nanoseconds) or when a step asks (``soon``)."""

    def __init__(self) -> None:
        now = time.time_ns()
        self.far = gotime.format(now + DAY * 1_000_000_000 + 123_456_789, 3600)
        self.far2 = gotime.format(now + 2 * DAY * 1_000_000_000, -1800)
        self.soon = ""
        self.soon_ns = 0

    def start_soon(self) -> str:
        self.soon_ns = time.time_ns() + int(SOON * 1e9)
        self.soon = gotime.format(self.soon_ns)
        return self.soon

    def labels(self) -> dict[str, str]:
        """Each deadline's text, as given and in UTC, by its name."""
        out = {}
        for name in ("far", "far2", "soon"):
            text = getattr(self, name)
            if text:
                out[text] = name
                out[gotime.utc(text)] = name + " (UTC)"
        return out


def _create(stream: str, name: str, *, action: str = "", **config):
    def body(times: Times) -> dict:
        cfg = {"durable_name": name, "ack_policy": "explicit",
               **{k: (v(times) if callable(v) else v) for k, v in config.items()}}
        out = {"stream_name": stream, "config": cfg}
        if action:
            out["action"] = action
        return out

    return f"$JS.API.CONSUMER.CREATE.{stream}.{name}", body


def _pause(stream: str, name: str, body):
    return f"$JS.API.CONSUMER.PAUSE.{stream}.{name}", body


def _next(name: str, **request):
    return f"$JS.API.CONSUMER.MSG.NEXT.S.{name}", request


FAR = lambda t: t.far  # noqa: E731
FAR2 = lambda t: t.far2  # noqa: E731
SOON_AHEAD = lambda t: t.start_soon()  # noqa: E731

# (name, subject, body): a body that is a function gets the Times; subject "sleep" waits until
# a second after the short deadline, then reads what came meanwhile.
SCRIPT: list[tuple] = [
    ("stream S", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    ("publish x0", "s.a", b"x0"),
    ("publish x1", "s.a", b"x1"),
    ("create paused a day", *_create("S", "P", pause_until=FAR)),
    ("info while paused", "$JS.API.CONSUMER.INFO.S.P", b""),
    ("no_wait fetch while paused", *_next("P", batch=2, no_wait=True)),
    ("fetch with expires while paused", *_next("P", batch=1, expires=1_000_000_000)),
    ("it expires", "wait 1.3", b""),
    ("create again, another pause_until", *_create("S", "P", pause_until=PAST)),
    ("update without pause_until", *_create("S", "P", action="update")),
    ("action create with another pause_until", *_create("S", "P", action="create", pause_until=FAR2)),
    ("pause until the past", *_pause("S", "P", {"pause_until": PAST})),
    ("info after", "$JS.API.CONSUMER.INFO.S.P", b""),
    ("fetch once resumed", *_next("P", batch=1, no_wait=True)),
    ("pause two days (an offset)", *_pause("S", "P", lambda t: {"pause_until": t.far2})),
    ("the same again", *_pause("S", "P", lambda t: {"pause_until": t.far2})),
    ("resume: no body", *_pause("S", "P", b"")),
    ("resume again", *_pause("S", "P", b"")),
    ("an empty object", *_pause("S", "P", {})),
    ("not JSON: no request", *_pause("S", "P", b"hello")),
    ("null", *_pause("S", "P", b"null")),
    ("an array", *_pause("S", "P", b"[1]")),
    ("a number", *_pause("S", "P", {"pause_until": 5})),
    ("not a time", *_pause("S", "P", {"pause_until": "tomorrow"})),
    ("no such day", *_pause("S", "P", {"pause_until": "2030-02-30T00:00:00Z"})),
    ("no zone", *_pause("S", "P", {"pause_until": "2030-01-01T00:00:00"})),
    ("extra text", *_pause("S", "P", {"pause_until": "2030-01-01T00:00:00Zjunk"})),
    ("an unknown field", *_pause("S", "P", {"pause_until": PAST, "foo": 1})),
    ("the field in capitals", *_pause("S", "P", lambda t: {"PAUSE_UNTIL": t.far})),
    ("two values, the last wins", *_pause("S", "P", lambda t: b'{} {"pause_until": "%s"}' % PAST.encode())),
    ("the zero time", *_pause("S", "P", {"pause_until": "0001-01-01T00:00:00Z"})),
    ("unknown stream", *_pause("X", "P", lambda t: {"pause_until": t.far})),
    ("unknown consumer", *_pause("S", "X", lambda t: {"pause_until": t.far})),
    ("a subject too short", "$JS.API.CONSUMER.PAUSE.S", {}),
    ("a subject too long", "$JS.API.CONSUMER.PAUSE.S.P.x", {}),
    ("create with a past pause_until", *_create("S", "Q", pause_until=PAST)),
    ("create with the zero time", *_create("S", "Z", pause_until="0001-01-01T00:00:00Z")),
    ("create with a bad time", *_create("S", "B", pause_until="2030-13-01T00:00:00Z")),
    ("create with a number", *_create("S", "B", pause_until=5)),
    ("a durable create with a bad time", "$JS.API.CONSUMER.DURABLE.CREATE.S.B",
     {"stream_name": "S", "config": {"durable_name": "B", "pause_until": "30-01-01T00:00:00Z"}}),
    # Deliveries stop while paused, and go on by themselves at the deadline.
    ("push consumer paused a few seconds", *_create("S", "PU", deliver_subject="dlv.push", pause_until=SOON_AHEAD)),
    ("pull consumer paused as long", *_create("S", "PL", pause_until=lambda t: t.soon)),
    ("a pull request waits", *_next("PL", batch=3, expires=10_000_000_000)),
    ("publish x2", "s.b", b"x2"),
    ("pull info", "$JS.API.CONSUMER.INFO.S.PL", b""),
    ("the deadline passes", "sleep", b""),
    ("push info after", "$JS.API.CONSUMER.INFO.S.PU", b""),
    ("list", "$JS.API.CONSUMER.LIST.S", b""),
]


class _Client(RawClient):
    """RawClient that also listens to the pause advisories and a push consumer's deliver
    subject (nats-server wants a literal subscription there), and keeps each message's
    subject, subscription (1: API answers and pull requests' messages, 2: advisories, 3: the
    push consumer's) and reply."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.sock.sendall(f"SUB {ADVISORIES} 2\r\nSUB dlv.push 3\r\nPING\r\n".encode())
        self._until(b"PONG\r\n")

    def request(self, subject: str, body) -> list:  # type: ignore[override]
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sock.sendall(b"PUB %s _R.x %d\r\n%s\r\nPING\r\n" % (subject.encode(), len(payload), payload))
        time.sleep(0.1)  # (nats-server answers some from another goroutine, after a PONG)
        self.sock.sendall(b"PING\r\n")
        data = self._until(b"PONG\r\n") + self._until(b"PONG\r\n")
        messages = []
        while data:
            line, _, data = data.partition(b"\r\n")
            if line.startswith((b"MSG ", b"HMSG ")):
                parts = line.decode().split()
                size = int(parts[-1])
                reply = parts[3] if len(parts) == (6 if parts[0] == "HMSG" else 5) else ""
                messages.append((parts[1], parts[2], reply, data[:size].decode()))
                data = data[size + 2 :]
        return messages


def _remaining(value, ahead: float):
    """pause_remaining: "ahead" when it is a duration within ``ahead`` seconds."""
    if value is None:
        return None
    return "ahead" if isinstance(value, int) and 0 < value <= ahead * 1e9 else value


def _normal(message: tuple, labels: dict) -> object:
    subject, sid, reply, payload = message
    label = lambda text: labels.get(text, text)  # noqa: E731
    if subject.startswith("$JS.EVENT.ADVISORY."):
        doc = json.loads(payload)
        return {"advisory": subject, "type": doc["type"], "stream": doc["stream"], "consumer": doc["consumer"],
                "paused": doc["paused"], "pause_until": label(doc["pause_until"])}
    if reply.startswith("$JS.ACK."):  # a delivery: the ack reply without its timestamp
        tokens = reply.split(".")
        return {"to": "dlv.push" if sid == "3" else "request", "subject": subject,
                "ack": ".".join(tokens[:7] + tokens[8:]), "data": payload}
    if payload.startswith("NATS/1.0"):  # a status
        return payload.strip()
    try:
        doc = json.loads(payload)
    except ValueError:
        return payload
    if "error" in doc or doc.get("type", "").endswith("consumer_pause_response"):
        doc.pop("created", None)
        if "pause_until" in doc:
            doc["pause_until"] = label(doc["pause_until"])
        if "pause_remaining" in doc:
            doc["pause_remaining"] = _remaining(doc["pause_remaining"], 3 * DAY)
        return doc
    if "config" in doc and "delivered" in doc:
        return _consumer(doc, label)
    if "consumers" in doc:
        return [_consumer(c, label) for c in doc["consumers"]]
    if "seq" in doc:
        return {"seq": doc["seq"]}
    if "config" in doc and "state" in doc:
        return "stream created"
    return sorted(doc)


def _consumer(doc: dict, label) -> dict:
    until = doc["config"].get("pause_until")
    delivered = {k: v for k, v in doc["delivered"].items() if k != "last_active"}
    return {"name": doc["name"], "pause_until": label(until) if until else None, "paused": doc.get("paused"),
            "pause_remaining": _remaining(doc.get("pause_remaining"), 3 * DAY), "delivered": delivered,
            "num_pending": doc["num_pending"], "num_waiting": doc["num_waiting"]}


def run_script(port: int) -> dict:
    client = _Client(port)
    times = Times()
    out = {}
    for name, subject, body in SCRIPT:
        if subject == "sleep":
            time.sleep(max(0.0, (times.soon_ns - time.time_ns()) / 1e9 + 1.0))
            messages = client.request("_nothing", b"")
        elif subject.startswith("wait "):
            time.sleep(float(subject.split()[1]))
            messages = client.request("_nothing", b"")
        else:
            messages = client.request(subject, body(times) if callable(body) else body)
        labels = times.labels()
        answers = [_normal(m, labels) for m in messages]
        # Advisories, deliveries and answers come in an order that differs between servers
        # (nats-server sends them from different goroutines): compared as sets.
        out[name] = sorted(answers, key=lambda a: json.dumps(a, sort_keys=True))
    return out


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


# -- Go's time texts ---------------------------------------------------------------------------

# What nats-server 2.15.1 answered for each pause_until (the pause API and consumer create
# both): the time it keeps, or the "invalid JSON: " error after it.
GO_TIMES = [
    ("", 'parsing time "" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "2006"'),
    ("2030-13-01T00:00:00Z", 'parsing time "2030-13-01T00:00:00Z": month out of range'),
    ("2030-00-01T00:00:00Z", 'parsing time "2030-00-01T00:00:00Z": month out of range'),
    ("2030-02-30T00:00:00Z", 'parsing time "2030-02-30T00:00:00Z": day out of range'),
    ("2030-01-00T00:00:00Z", 'parsing time "2030-01-00T00:00:00Z": day out of range'),
    ("2030-01-01 00:00:00Z",
     'parsing time "2030-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T"'),
    ("2030-01-01T00:00:00", 'parsing time "2030-01-01T00:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
    ("2030-01-01T00:00:00Zjunk", 'parsing time "2030-01-01T00:00:00Zjunk": extra text: "junk"'),
    ("2030-01-01T25:00:00Z", 'parsing time "2030-01-01T25:00:00Z": hour out of range'),
    ("2030-01-01T00:60:00Z", 'parsing time "2030-01-01T00:60:00Z": minute out of range'),
    ("2030-01-01T00:00:60Z", 'parsing time "2030-01-01T00:00:60Z": second out of range'),
    ("2030-01-01T00:00:00.123+0100",
     'parsing time "2030-01-01T00:00:00.123+0100" as "2006-01-02T15:04:05Z07:00": cannot parse "+0100" as "Z07:00"'),
    ("2030-01-01T00:00:00z",
     'parsing time "2030-01-01T00:00:00z" as "2006-01-02T15:04:05Z07:00": cannot parse "z" as "Z07:00"'),
    ("2030-01-01t00:00:00Z",
     'parsing time "2030-01-01t00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "t00:00:00Z" as "T"'),
    ("2030-01-01T00:00:00+25:00", 'parsing time "2030-01-01T00:00:00+25:00": time zone offset hour out of range'),
    ("2030-01-01T00:00:00+01:61", 'parsing time "2030-01-01T00:00:00+01:61": time zone offset minute out of range'),
    ("2030-01-01T00:00:00.Z",
     'parsing time "2030-01-01T00:00:00.Z" as "2006-01-02T15:04:05Z07:00": cannot parse ".Z" as "Z07:00"'),
    ("2030-1-01T00:00:00Z",
     'parsing time "2030-1-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "1-01T00:00:00Z" as "01"'),
    ("2030-01-1T00:00:00Z",
     'parsing time "2030-01-1T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "1T00:00:00Z" as "02"'),
    ("30-01-01T00:00:00Z",
     'parsing time "30-01-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "30-01-01T00:00:00Z" as "2006"'),
    ("2030-01-01T00:00:00 Z",
     'parsing time "2030-01-01T00:00:00 Z" as "2006-01-02T15:04:05Z07:00": cannot parse " Z" as "Z07:00"'),
    ("2030-01-01T00:00:00+01",
     'parsing time "2030-01-01T00:00:00+01" as "2006-01-02T15:04:05Z07:00": cannot parse "+01" as "Z07:00"'),
    ("2030-01-01T00:00:00+0a:00",
     'parsing time "2030-01-01T00:00:00+0a:00" as "2006-01-02T15:04:05Z07:00": cannot parse "+0a:00" as "Z07:00"'),
    ("2030-01-01T00:00:00.5",
     'parsing time "2030-01-01T00:00:00.5" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
    ("2030-01-01T1:00:00Z", "2030-01-01T01:00:00Z"),
    ("2030-01-01T00:00:00,5Z", "2030-01-01T00:00:00.5Z"),
    ("2030-01-01T00:00:00.1234567891Z", "2030-01-01T00:00:00.123456789Z"),
    ("2030-01-01T00:00:00+00:00", "2030-01-01T00:00:00Z"),
    ("2030-01-01T00:00:00-00:30", "2030-01-01T00:00:00-00:30"),
    ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"),
    ("2030-01-01T00:00:00.000000000Z", "2030-01-01T00:00:00Z"),
    ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"),
]


@pytest.mark.parametrize("given, answer", GO_TIMES)
def test_times_parse_and_fail_as_go_parses_them(given, answer):
    try:
        kept = gotime.canonical(given)
    except GoDecodeError as exc:
        kept = str(exc)
    assert kept == answer


def test_times_keep_their_instant_and_offset():
    text = "2030-01-01T01:00:00.5+01:00"
    assert gotime.canonical(text) == text
    assert gotime.utc(text) == "2030-01-01T00:00:00.5Z"
    assert gotime.nanos(text) == 1_893_456_000_500_000_000
    assert gotime.nanos(gotime.ZERO) == -62_135_596_800 * 10**9  # Go's zero time, year 1
    assert gotime.utc("0001-01-01T00:30:00+01:00") == "0000-12-31T23:30:00Z"


# -- on the server's clock ------------------------------------------------------------------------


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def _ahead(server: NatsServer, seconds: float) -> str:
    """A deadline ``seconds`` after the server's time."""
    return gotime.format(int(server.now() * 1e9) + int(seconds * 1e9))


def _seconds(ns) -> float:
    """A duration to the millisecond (the server's clock stands still: it is exact, but for
    what a float of the server's time keeps of the nanoseconds)."""
    return round(ns / 1e9, 3)


async def _advisories(nc):
    received: asyncio.Queue = asyncio.Queue()

    async def on_advisory(msg):
        await received.put(json.loads(msg.data))

    await nc.subscribe(ADVISORIES, cb=on_advisory)
    return received


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_a_paused_pull_consumer_delivers_when_the_deadline_passes(nats_server):
    """Nothing for a minute of the server's time, however long a request waits; then the
    waiting request gets the messages, and an advisory says the pause is over."""

    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        advisories = await _advisories(nc)
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        for n in range(3):
            await js.publish("orders.new", b"order %d" % n)
        until = _ahead(nats_server, 60)
        info = await js.add_consumer("ORDERS", ConsumerConfig(durable_name="work", ack_policy="explicit",
                                                              pause_until=until))
        assert (info.paused, info.config.pause_until) == (True, until)
        assert _seconds(info.pause_remaining) == 60
        assert (await asyncio.wait_for(advisories.get(), 2))["paused"] is True
        sub = await js.pull_subscribe_bind("work", stream="ORDERS")
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        await nats_server.advance_async(58)
        info = await js.consumer_info("ORDERS", "work")
        assert (info.paused, _seconds(info.pause_remaining), info.num_pending) == (True, 2, 3)
        # A request that waits (5 s of the server's time) is served once the pause is over.
        fetching = asyncio.ensure_future(sub.fetch(3, timeout=5))
        await asyncio.sleep(0.3)
        assert not fetching.done()
        assert advisories.empty()
        await nats_server.advance_async(3)
        msgs = await asyncio.wait_for(fetching, 5)
        assert [m.data for m in msgs] == [b"order 0", b"order 1", b"order 2"]
        advisory = await asyncio.wait_for(advisories.get(), 2)
        assert {k: advisory[k] for k in ("type", "stream", "consumer", "paused", "pause_until")} == {
            "type": "io.nats.jetstream.advisory.v1.consumer_pause", "stream": "ORDERS", "consumer": "work",
            "paused": False, "pause_until": until}
        info = await js.consumer_info("ORDERS", "work")
        assert (info.paused, info.pause_remaining, info.delivered.stream_seq) == (None, None, 3)
        await nc.close()

    _run(main())


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_a_paused_push_consumer_sends_heartbeats_and_nothing_else(nats_server):
    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        got: asyncio.Queue = asyncio.Queue()

        async def on_delivery(msg):
            await got.put(msg)

        await nc.subscribe("deliver.here", cb=on_delivery)
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        await js.publish("orders.new", b"before")
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="push", deliver_subject="deliver.here",
                                                       ack_policy="explicit", idle_heartbeat=5,
                                                       pause_until=_ahead(nats_server, 60)))
        await js.publish("orders.new", b"while paused")
        await nats_server.advance_async(12)
        await nc.flush()
        await asyncio.sleep(0.2)
        beats = []
        while not got.empty():
            beats.append(got.get_nowait())
        assert len(beats) == 2 and all(m.headers.get("Status") == "100" and not m.data for m in beats)
        assert "Nats-Last-Consumer" in beats[0].headers and beats[0].headers["Nats-Last-Consumer"] == "0"
        await nats_server.advance_async(50)
        data = []
        while len(data) < 2:
            msg = await asyncio.wait_for(got.get(), 2)
            if msg.data:
                data.append(msg.data)
        assert data == [b"before", b"while paused"]
        await nc.close()

    _run(main())


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_resuming_through_the_api_delivers_at_once(nats_server):
    """natserver delivers what waited as soon as the pause API resumes a consumer
    (nats-server 2.15.1 waits for something else to wake the consumer: a new message or pull
    request; a request already waiting times out)."""

    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        advisories = await _advisories(nc)
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        await js.publish("orders.new", b"one")
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="work", ack_policy="explicit",
                                                       pause_until=_ahead(nats_server, 3600)))
        await advisories.get()
        sub = await js.pull_subscribe_bind("work", stream="ORDERS")
        fetching = asyncio.ensure_future(sub.fetch(1, timeout=5))
        await asyncio.sleep(0.3)
        resumed = await js.resume_consumer("ORDERS", "work")
        assert (resumed.paused, resumed.pause_until) == (False, "1970-01-01T00:00:00Z")
        assert [m.data for m in await asyncio.wait_for(fetching, 5)] == [b"one"]
        advisory = await asyncio.wait_for(advisories.get(), 2)
        assert (advisory["paused"], advisory["pause_until"]) == (False, "1970-01-01T00:00:00Z")
        paused = await js.pause_consumer("ORDERS", "work", _ahead(nats_server, 30))
        assert (paused.paused, _seconds(paused.pause_remaining)) == (True, 30)
        await nc.close()

    _run(main())


def test_a_restart_keeps_a_consumer_paused_until_its_deadline(tmp_path):
    """The deadline is in the durable's configuration on disk: after a restart the consumer is
    still paused, and resumes by itself when the deadline passes (with the advisory)."""
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        until = _ahead(server, 120)  # (each second advanced gives the clients 2 ms: keep it short)

        async def before():
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.*"])
            await js.publish("orders.new", b"one")
            await js.add_consumer("ORDERS", ConsumerConfig(durable_name="work", ack_policy="explicit"))
            assert (await js.pause_consumer("ORDERS", "work", until)).paused
            await nc.close()

        _run(before())
        server.restart()

        async def after():
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            advisories = await _advisories(nc)
            info = await js.consumer_info("ORDERS", "work")
            assert (info.paused, info.config.pause_until) == (True, until)
            assert 119 < _seconds(info.pause_remaining) <= 120  # (a restart keeps the server's time, nearly)
            sub = await js.pull_subscribe_bind("work", stream="ORDERS")
            with pytest.raises(nats.errors.TimeoutError):
                await sub.fetch(1, timeout=0.5)
            await server.advance_async(121)
            assert (await asyncio.wait_for(advisories.get(), 2))["paused"] is False
            assert [m.data for m in await sub.fetch(1, timeout=2)] == [b"one"]
            await nc.close()

        _run(after())


# -- with nats-py, against natserver and nats-server 2.15.1 ---------------------------------------


# (the ``target`` fixture: tests/jetstream/test_nats_py_suite.py's, imported above)


def test_a_paused_durable_stays_paused_across_a_restart(target):  # noqa: F811 (the imported fixture)
    """One consumer paused for an hour is still paused after a restart (same deadline); one
    whose short pause ran out while the server was down delivers at once."""
    until = gotime.format(time.time_ns() + 3600 * 10**9)

    async def before():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        await js.publish("orders.new", b"one")
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="long", ack_policy="explicit",
                                                       pause_until=until))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="short", ack_policy="explicit"))
        assert (await js.pause_consumer("ORDERS", "short", gotime.format(short_until))).paused
        await nc.close()

    # (3 s: the pause must still be ahead when the request arrives on a loaded machine)
    short_until = time.time_ns() + 3 * 10**9
    _run(before())
    target.stop()
    time.sleep(max(0.0, (short_until - time.time_ns()) / 1e9) + 0.2)
    target.start()

    async def after():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        info = await js.consumer_info("ORDERS", "long")
        assert (info.paused, info.config.pause_until) == (True, until)
        assert 3500 < info.pause_remaining / 1e9 < 3600
        info = await js.consumer_info("ORDERS", "short")
        assert (info.paused, info.pause_remaining) == (None, None)
        sub = await js.pull_subscribe_bind("short", stream="ORDERS")
        assert [m.data for m in await sub.fetch(1, timeout=2)] == [b"one"]
        sub = await js.pull_subscribe_bind("long", stream="ORDERS")
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        await nc.close()

    _run(after())


# nats-py's own pause tests (tests/test_js.py ConsumerPauseResumeTest, nats.py 2.16), as it runs them.


def test_nats_py_consumer_pause_and_resume(target):  # noqa: F811 (the imported fixture)
    from datetime import datetime, timedelta, timezone

    async def main():
        nc = await nats.connect(target.url)
        version = nc.connected_server_version
        assert (version.major, version.minor) >= (2, 11)
        js = nc.jetstream()
        jsm = nc.jsm()
        await jsm.add_stream(name="PAUSETEST", subjects=["pause.test"])
        for i in range(5):
            await js.publish("pause.test", f"msg-{i}".encode())
        consumer_name = "pause-consumer"
        await jsm.add_consumer("PAUSETEST", name=consumer_name, durable_name=consumer_name, ack_policy="explicit")
        await jsm.consumer_info("PAUSETEST", consumer_name)
        pause_until = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        pause_resp = await jsm.pause_consumer("PAUSETEST", consumer_name, pause_until)
        assert pause_resp.paused is True
        assert pause_resp.pause_remaining is not None
        cinfo = await jsm.consumer_info("PAUSETEST", consumer_name)
        assert cinfo.paused is True
        resume_resp = await jsm.resume_consumer("PAUSETEST", consumer_name)
        assert resume_resp.paused is False
        sub = await js.pull_subscribe_bind(consumer_name, "PAUSETEST")
        msgs = await sub.fetch(1, timeout=2)
        assert len(msgs) == 1
        assert msgs[0].data in [b"msg-0", b"msg-1", b"msg-2", b"msg-3", b"msg-4"]
        await msgs[0].ack()
        await nc.close()

    _run(main())


def test_nats_py_consumer_pause_until_in_config(target):  # noqa: F811 (the imported fixture)
    from datetime import datetime, timedelta, timezone

    async def main():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        jsm = nc.jsm()
        await jsm.add_stream(name="PAUSECONFIG", subjects=["pause.config"])
        await js.publish("pause.config", b"test message")
        pause_until = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        consumer_config = nats.js.api.ConsumerConfig(name="paused-consumer", durable_name="paused-consumer",
                                                     ack_policy="explicit", pause_until=pause_until)
        cinfo = await jsm.add_consumer("PAUSECONFIG", config=consumer_config)
        assert cinfo.paused is True
        assert cinfo.config.pause_until is not None
        await nc.close()

    _run(main())


def test_nats_py_consumer_pause_with_immediate_expiry(target):  # noqa: F811 (the imported fixture)
    async def main():
        nc = await nats.connect(target.url)
        jsm = nc.jsm()
        await jsm.add_stream(name="PAUSEIMMEDIATE", subjects=["pause.immediate"])
        consumer_name = "immediate-consumer"
        await jsm.add_consumer("PAUSEIMMEDIATE", name=consumer_name, durable_name=consumer_name,
                               ack_policy="explicit")
        resume_resp = await jsm.pause_consumer("PAUSEIMMEDIATE", consumer_name, "1970-01-01T00:00:00Z")
        assert resume_resp.paused is False
        await nc.close()

    _run(main())


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
