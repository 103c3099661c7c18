"""Message schedules (nats-server 2.12's ``allow_msg_schedules``, issue #28 item 4), as
nats-server 2.15.1 answers and fires them.

One script runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/message_schedules_nats_server_2.15.1.json (``python -m tests.jetstream.test_message_schedules``
records it again; a live 2.15.1, when installed, must still give it): the configuration rules,
the answer to every form of pattern, time zone, target, source, TTL, roll-up and scheduler
header, the stored schedule, and then, as time passes, what the schedules fired: ``@at`` once
(its schedule purged), ``@every`` and cron with their ``Nats-Scheduler`` and
``Nats-Schedule-Next``, a source's message copied, a TTL and a roll-up passed on, a schedule a
client purged or replaced that does not fire. On nats-server the ``at`` steps sleep; on
natserver they move the server's clock (NatsServer.advance). Firing counts on a moved clock,
restarts (what came due while the server was down fires once), the cron parser and the bound
on the work per turn are tested against natserver alone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nats
import pytest

from natserver.jetstream import schedule
from natserver.jetstream.schedule import FIRE_BATCH, Scheduler, parse_cron_pattern, parse_schedule
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig as ServerStreamConfig
from natserver.testing import NatsServer
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import PipelinedClient, assert_recorded
from tests.jetstream.test_nats_py_suite import target  # noqa: F401 (a fixture: natserver and 2.15.1)

RECORDED = Path(__file__).with_name("data") / "message_schedules_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 30  # hard limit on one test's I/O (the live recording sleeps 5 s of it)
S = 1_000_000_000
AT = "<at>"  # in a header of the script: the @at time of the timed part (whole seconds ahead)


def _pub(subject: str, headers: bytes = b"", payload: bytes = b"x") -> tuple:
    return ("pub", subject, headers, payload)


def _api(subject: str, body: dict | None = None) -> tuple:
    return ("pub", subject, b"", json.dumps(body).encode() if body is not None else b"")


def _sched(pattern: str, to: str = "s.t", extra: bytes = b"") -> bytes:
    return b"Nats-Schedule: " + pattern.encode() + b"\r\nNats-Schedule-Target: " + to.encode() + b"\r\n" + extra


PATTERNS = [
    "@at 2030-01-01T00:00:00Z", "@at 2030-01-01T00:00:00.5+01:00", "@at 2020-01-01T00:00:00Z",
    "@at 2030-13-01T00:00:00Z", "@at tomorrow", "@at 2030-01-01 00:00:00Z", "@at ", "@at",
    "@every 1s", "@every 1h30m", "@every 1.5s", "@every 999ms", "@every 0s", "@every -5s", "@every 5",
    "@every abc", "@every",
    "0 0 * * * *", "*/15 * * * * *", "0 30 9 * * MON-FRI", "0 0 0 1 JAN-MAR/2 *", "0 0 0 ? * sun",
    "0 0 0 15 * 1", "0,30 5-10/2 * * * *", "0 0 12 29 2 *", "0 0 0 30 2 *", "* * * * *",
    "* * * * * * *", "60 * * * * *", "*/0 * * * * *", "5-1 * * * * *", "1-2-3 * * * * *",
    "1/2/3 * * * * *", "-1 * * * * *", "a * * * * *", "0 0 0 0 * *", "0 0 0 * 13 *", "0 0 0 * * 7",
    "0 0 0 * * SUNDAY", "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly",
    "@annually", "@reboot", "@HOURLY", " @hourly", "",
]
ZONES = [
    ("0 0 9 * * *", "America/New_York"), ("0 0 9 * * *", "UTC"), ("0 0 9 * * *", "Europe/Amsterdam"),
    ("0 0 9 * * *", ""), ("0 0 9 * * *", "Nowhere/Land"), ("0 0 9 * * *", "../etc/passwd"),
    ("0 0 9 * * *", "america/new_york"), ("@every 1s", "UTC"), ("@at 2030-01-01T00:00:00Z", "Europe/Paris"),
    ("@hourly", "Asia/Kolkata"), ("", "Europe/Paris"), ("bad", "Nowhere/Land"),
]

SCRIPT: list[tuple[str, tuple]] = [
    # Configuration.
    ("S: schedules (deny_purge: roll-ups switched on)", _api("$JS.API.STREAM.CREATE.S", {
        "name": "S", "subjects": ["s.>"], "allow_msg_schedules": True, "deny_purge": True})),
    ("discard new", _api("$JS.API.STREAM.CREATE.D", {"name": "D", "subjects": ["d.>"], "allow_msg_schedules": True,
                                                     "discard": "new"})),
    ("counters", _api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "allow_msg_schedules": True,
                                                  "allow_msg_counter": True})),
    ("mirror", _api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "S"}, "allow_msg_schedules": True})),
    ("sources", _api("$JS.API.STREAM.CREATE.M", {"name": "M", "sources": [{"name": "S"}], "allow_msg_schedules": True})),
    ("P: plain", _api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})),
    ("update: disable schedules", _api("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"]})),
    ("update: enable schedules", _api("$JS.API.STREAM.UPDATE.P", {"name": "P", "subjects": ["p.>"],
                                                                   "allow_msg_schedules": True})),
    ("N: no schedules", _api("$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]})),
    # Patterns and time zones.
    *[(f"pattern {p!r}", _pub("s.p", _sched(p))) for p in PATTERNS],
    *[(f"zone {z!r} for {p!r}", _pub("s.z", _sched(p, extra=b"Nats-Schedule-Time-Zone: " + z.encode() + b"\r\n")))
      for p, z in ZONES],
    ("the target line first", _pub("s.o", b"Nats-Schedule-Target: s.t\r\nNats-Schedule: @hourly\r\n")),
    # Targets, sources, TTLs, roll-ups.
    ("no target", _pub("s.x", b"Nats-Schedule: @hourly\r\n")),
    ("empty target", _pub("s.x", _sched("@hourly", ""))),
    ("target outside the stream", _pub("s.x", _sched("@hourly", "q.t"))),
    ("target with a wildcard", _pub("s.x", _sched("@hourly", "s.*"))),
    ("target is the schedule's subject", _pub("s.x", _sched("@hourly", "s.x"))),
    ("source", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Source: s.src\r\n"))),
    ("source is the target", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Source: s.t\r\n"))),
    ("source is the subject", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Source: s.x\r\n"))),
    ("source outside the stream", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Source: q.src\r\n"))),
    ("source with a wildcard", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Source: s.>\r\n"))),
    ("schedule TTL without TTLs", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-TTL: 5s\r\n"))),
    ("invalid schedule TTL", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-TTL: 5x\r\n"))),
    ("schedule roll-up sub", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Rollup: sub\r\n"))),
    ("schedule roll-up all", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Rollup: all\r\n"))),
    ("schedule roll-up SUB", _pub("s.x", _sched("@hourly", extra=b"Nats-Schedule-Rollup: SUB\r\n"))),
    ("roll-up all", _pub("s.x", _sched("@hourly", extra=b"Nats-Rollup: all\r\n"))),
    ("roll-up SUB", _pub("s.x", _sched("@hourly", extra=b"Nats-Rollup: SUB\r\n"))),
    ("a message id and expected headers", _pub("s.y", _sched("@hourly", extra=b"Nats-Msg-Id: m1\r\nKeep: me\r\n"))),
    ("the stored schedule", ("last", "S", "s.y")),
    ("a second schedule on the subject", _pub("s.y", _sched("@daily"))),
    ("s.y keeps one", ("count", "S", "s.y")),
    # Clients and the scheduler headers.
    ("Nats-Scheduler alone", _pub("s.c", b"Nats-Scheduler: s.y\r\n")),
    ("Next not purge", _pub("s.c", b"Nats-Schedule-Next: 2030-01-01T00:00:00Z\r\nNats-Scheduler: s.y\r\n")),
    ("purge without a scheduler", _pub("s.c", b"Nats-Schedule-Next: purge\r\n")),
    ("purge: scheduler is the subject", _pub("s.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: s.c\r\n")),
    ("purge: scheduler with a wildcard", _pub("s.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: s.*\r\n")),
    ("plain message on s.plain", _pub("s.plain")),
    ("purge: not a schedule", _pub("s.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: s.plain\r\n")),
    ("purge: nothing there", _pub("s.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: s.none\r\n")),
    ("purge: the schedule s.y", _pub("s.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: s.y\r\n")),
    ("s.y purged", ("count", "S", "s.y")),
    # A stream without schedules.
    ("N: a schedule", _pub("n.x", _sched("@hourly", "n.t"))),
    ("N: an invalid pattern", _pub("n.x", _sched("bad", "n.t"))),
    ("N: an invalid zone", _pub("n.x", b"Nats-Schedule-Time-Zone: Nowhere/Land\r\n")),
    ("N: purge", _pub("n.x", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: n.y\r\n")),
    ("N: Nats-Scheduler alone", _pub("n.x", b"Nats-Scheduler: n.y\r\n")),
    ("N: an empty pattern", _pub("n.x", b"Nats-Schedule: \r\n")),
    # Time passes: T allows TTLs.
    ("T", _api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_schedules": True,
                                           "allow_msg_ttl": True})),
    ("the source's message", _pub("t.src", b"X-Src: 1\r\n", b"from source")),
    ("publish at 0", ("batch", [
        _pub("t.s.at", _sched(f"@at {AT}", "t.at", b"Keep: me\r\nNats-Expected-Last-Sequence: 1\r\n"), b"once"),
        _pub("t.s.every", _sched("@every 1s", "t.every", b"Nats-Schedule-Source: t.src\r\n"), b"own"),
        _pub("t.s.cron", _sched("* * * * * *", "t.cron", b"Nats-Schedule-TTL: 1m\r\nNats-Schedule-Rollup: sub\r\n"),
             b"tick"),
        _pub("t.s.nosrc", _sched("@every 1s", "t.nosrc", b"Nats-Schedule-Source: t.empty\r\n"), b"fallback"),
        _pub("t.s.cancel", _sched(f"@at {AT}", "t.cancel")),
        _pub("t.c", b"Nats-Schedule-Next: purge\r\nNats-Scheduler: t.s.cancel\r\n"),
        _pub("t.s.replace", _sched(f"@at {AT}", "t.replace")),
        _pub("t.s.replace", b"", b"plain"),
    ])),
    ("at 4: @at fired once", ("at", 4.0, "T", "t.at")),
    ("at 4: its schedule purged", ("count", "T", "t.s.at")),
    ("at 4: the @at message", ("last", "T", "t.at")),
    ("at 4: @every copies the source", ("last", "T", "t.every")),
    ("at 4: the cron's roll-up keeps one", ("count", "T", "t.cron")),
    ("at 4: the cron's TTL", ("last", "T", "t.cron")),
    ("at 4: no source message", ("last", "T", "t.nosrc")),
    ("at 4: @every goes on", ("count", "T", "t.s.every")),
    ("at 4: purged by a client", ("count", "T", "t.cancel")),
    ("at 4: replaced by a plain message", ("count", "T", "t.replace")),
    ("at 4: the replaced schedule stays", ("count", "T", "t.s.replace")),
]


def _normal(answer: bytes):
    """An error as it is; a stream's configuration by what schedules concern; an ack by its
    sequence; a stored message by its subject, headers (a time in Nats-Schedule-Next as
    <time>: it depends on when the script ran) and data."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer.decode()
    if "error" in document:
        return {"error": document["error"]}
    if "config" in document:
        config = document["config"]
        return {"config": {"allow_msg_schedules": config.get("allow_msg_schedules", False),
                           "allow_rollup_hdrs": config["allow_rollup_hdrs"], "deny_purge": config["deny_purge"]}}
    if "message" in document:
        message = document["message"]
        return {"subject": message["subject"], "hdrs": _headers(base64.b64decode(message.get("hdrs", ""))),
                "data": base64.b64decode(message.get("data", "")).decode()}
    if "seq" in document:
        return {"seq": document["seq"]}
    return sorted(document)


def _headers(block: bytes) -> str:
    lines = block.decode().split("\r\n")
    for i, line in enumerate(lines):
        if line.startswith("Nats-Schedule-Next: ") and line != "Nats-Schedule-Next: purge":
            lines[i] = "Nats-Schedule-Next: <time>"
    return "\r\n".join(lines)


class _Client(PipelinedClient):
    """The shared pipelined client, and what the schedule script reads back."""

    def last(self, stream: str, subject: str):
        (answer,) = self.batch([_api(f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject})])
        return _normal(answer)

    def count(self, stream: str, subject: str) -> int:
        (answer,) = self.batch([_api(f"$JS.API.STREAM.INFO.{stream}", {"subjects_filter": subject})])
        return json.loads(answer)["state"].get("subjects", {}).get(subject, 0)


def run_script(port: int, now, wait_until) -> dict:
    """The script against the server on ``port``; ``now()``: the server's time (s);
    ``wait_until(t)``: the server's time is t seconds after the timed publishes."""
    client = _Client(port)
    out: dict = {}
    for name, step in SCRIPT:
        kind = step[0]
        if kind == "pub":
            out[name] = [_normal(a) for a in client.batch([step])]
        elif kind == "batch":
            at = datetime.fromtimestamp(int(now()) + 3, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ").encode()
            requests = [(k, s, h.replace(AT.encode(), at), p) for k, s, h, p in step[1]]
            out[name] = [_normal(a) for a in client.batch(requests)]
            wait_until(0.0)
        elif kind == "last":
            out[name] = client.last(step[1], step[2])
        elif kind == "count":
            out[name] = client.count(step[1], step[2])
        else:  # at
            wait_until(step[1])
            out[name] = client.count(step[2], step[3])
    return out


def _sleeper():
    start: list[float] = []

    def wait_until(t: float) -> None:
        if not start:
            start.append(time.monotonic())
        time.sleep(max(0.0, start[0] + t - time.monotonic()))

    return wait_until


def _recorded_run(tmp_path: Path) -> dict:
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        moved = [0.0]

        def wait_until(t: float) -> None:
            server.advance(t - moved[0])
            moved[0] = t

        return run_script(server.port, server.now, wait_until)


def test_natserver_answers_as_nats_server(tmp_path):
    started = time.monotonic()
    assert_recorded(_recorded_run(tmp_path), RECORDED)
    assert time.monotonic() - started < 15  # the script's seconds were jumped


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER) as port:
        assert_recorded(run_script(port, time.time, _sleeper()), RECORDED)


# -- nats-py's own test (nats/tests/test_js.py JetStreamManagerTest) ---------------------------


def test_nats_py_stream_allow_msg_schedules(target):  # noqa: F811 (the imported fixture)
    """test_stream_allow_msg_schedules, against natserver and nats-server 2.15.1."""

    async def main():
        nc = await nats.connect(target.url)
        js = nc.jetstream()
        await js.add_stream(name="SCHEDULES", subjects=["test"], allow_msg_schedules=True)
        sinfo = await js.stream_info("SCHEDULES")
        assert sinfo.config.allow_msg_schedules is True
        await js.add_stream(name="NOSCHEDULES", subjects=["foo"], allow_msg_schedules=False)
        sinfo = await js.stream_info("NOSCHEDULES")
        assert sinfo.config.allow_msg_schedules is not True
        await js.add_stream(name="DEFAULT", subjects=["bar"])
        sinfo = await js.stream_info("DEFAULT")
        assert sinfo.config.allow_msg_schedules is not True
        await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- natserver alone: firing on a moved clock ---------------------------------------------------


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * S


async def _fired(js, subject: str) -> int:
    info = await js.stream_info("F", subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


def _to_minute(now: float) -> float:
    """How far to move the clock to be 0.2 s past the next whole minute."""
    return 60 - now % 60 + 0.2


def test_every_and_cron_fire_on_the_moved_clock(tmp_path):
    """@every 10s fires 6 times in a minute, a cron at second 0 once a minute, @at once and its
    schedule goes; each fired message says when its schedule fires next."""

    async def main(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f.>"], allow_msg_schedules=True)
        await server.advance_async(_to_minute(server.now()))  # at hh:mm:00.2
        at = datetime.fromtimestamp(int(server.now()) + 30, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        await js.publish("f.s.every", b"e", headers={"Nats-Schedule": "@every 10s", "Nats-Schedule-Target": "f.every"})
        await js.publish("f.s.cron", b"c", headers={"Nats-Schedule": "0 * * * * *", "Nats-Schedule-Target": "f.cron"})
        await js.publish("f.s.at", b"a", headers={"Nats-Schedule": f"@at {at}", "Nats-Schedule-Target": "f.at"})
        await server.advance_async(61)
        assert await _fired(js, "f.every") == 6
        assert await _fired(js, "f.cron") == 1
        assert await _fired(js, "f.at") == 1 and await _fired(js, "f.s.at") == 0
        last = await js.get_last_msg("F", "f.cron")
        assert last.headers["Nats-Scheduler"] == "f.s.cron"
        nxt = _utc(last.headers["Nats-Schedule-Next"])
        assert nxt % (60 * S) == 0 and 0 < nxt - server.now() * S <= 60 * S
        await server.advance_async(120)
        assert await _fired(js, "f.every") == 18 and await _fired(js, "f.cron") == 3
        assert await _fired(js, "f.at") == 1
        # A plain message on the schedule's subject ends it (its message stays).
        await js.publish("f.s.every", b"plain")
        await server.advance_async(60)
        assert await _fired(js, "f.every") == 18 and await _fired(js, "f.cron") == 4
        await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))


def test_schedules_survive_a_restart_and_fire_once_for_what_came_due(tmp_path):
    """File store: schedules come back after a restart. Down for 10 minutes, an @every 60s and
    a cron each minute fire once at start (not ten times), an @at that came due fires once, and
    then they go on; a one-shot that fired before the stop does not fire again."""

    async def setup(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f.>"], allow_msg_schedules=True)
        await server.advance_async(_to_minute(server.now()))  # at hh:mm:00.2
        now = int(server.now())
        soon = datetime.fromtimestamp(now + 20, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        later = datetime.fromtimestamp(now + 300, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        await js.publish("f.s.every", b"e", headers={"Nats-Schedule": "@every 60s", "Nats-Schedule-Target": "f.every"})
        await js.publish("f.s.cron", b"c", headers={"Nats-Schedule": "30 * * * * *", "Nats-Schedule-Target": "f.cron"})
        await js.publish("f.s.soon", b"s", headers={"Nats-Schedule": f"@at {soon}", "Nats-Schedule-Target": "f.soon"})
        await js.publish("f.s.later", b"l", headers={"Nats-Schedule": f"@at {later}", "Nats-Schedule-Target": "f.later"})
        await server.advance_async(61)
        counts = [await _fired(js, s) for s in ("f.every", "f.cron", "f.soon", "f.later")]
        await nc.close()
        return counts

    async def after(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await server.advance_async(0.5)  # what is due fires at the first turn
        first = [await _fired(js, s) for s in ("f.every", "f.cron", "f.soon", "f.later")]
        assert await _fired(js, "f.s.later") == 0 and await _fired(js, "f.s.soon") == 0
        await server.advance_async(60)
        second = [await _fired(js, s) for s in ("f.every", "f.cron", "f.soon", "f.later")]
        await nc.close()
        return first, second

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        before = asyncio.run(asyncio.wait_for(setup(server), TIMEOUT))
        assert before == [1, 1, 1, 0]
        server.restart(skip=600)
        first, second = asyncio.run(asyncio.wait_for(after(server), TIMEOUT))
    assert first == [2, 2, 1, 1]
    assert second == [3, 3, 1, 1]


def test_a_restart_keeps_the_next_time_of_a_repeating_schedule(tmp_path):
    """A restart within the interval: the schedule fires at its time, not again at start."""

    async def publish(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f.>"], allow_msg_schedules=True)
        await js.publish("f.s", b"e", headers={"Nats-Schedule": "@every 100s", "Nats-Schedule-Target": "f.t"})
        await server.advance_async(150)  # fired at 100; next at 200
        assert await _fired(js, "f.t") == 1
        await nc.close()

    async def check(server):
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        await server.advance_async(1)
        assert await _fired(js, "f.t") == 1  # 171 s: not yet
        await server.advance_async(30)
        assert await _fired(js, "f.t") == 2  # 201 s
        await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        asyncio.run(asyncio.wait_for(publish(server), TIMEOUT))
        server.restart(skip=20)
        asyncio.run(asyncio.wait_for(check(server), TIMEOUT))


def test_a_mass_of_due_schedules_fires_over_several_turns():
    """3000 schedules due at once: each turn fires at most FIRE_BATCH, in sequence order, and
    says more are due."""
    store = MemoryStore(ServerStreamConfig(name="S", subjects=["s.>"], max_msgs=-1, max_bytes=-1,
                                           max_msgs_per_subject=-1, allow_msg_schedules=True))
    scheduler = Scheduler()
    total = 3000
    for i in range(total):
        hdr = b"NATS/1.0\r\nNats-Schedule: @at 2030-01-01T00:00:00Z\r\nNats-Schedule-Target: s.t\r\n\r\n"
        seq = store.store_msg(b"s.s.%d" % i, hdr, b"x", 1_000 * S)
        scheduler.stored(seq, b"s.s.%d" % i, hdr, 1_000 * S, 1_000 * S)
    now = _utc("2030-01-01T00:00:00Z")
    assert scheduler.due(now - 1, store, FIRE_BATCH) == ([], False)
    turns, fired = 0, []
    while True:
        msgs, more = scheduler.due(now, store, FIRE_BATCH)
        turns += 1
        assert len(msgs) <= FIRE_BATCH
        fired += msgs
        if not more:
            break
    assert turns == -(-total // FIRE_BATCH) and len(fired) == total
    assert fired[0] == (b"s.t", b"NATS/1.0\r\nNats-Scheduler: s.s.0\r\nNats-Schedule-Next: purge\r\n\r\n", b"x")
    assert [f[1].split(b"\r\n")[1] for f in fired[:3]] == [b"Nats-Scheduler: s.s.0", b"Nats-Scheduler: s.s.1",
                                                           b"Nats-Scheduler: s.s.2"]
    assert scheduler.due(now + S, store, FIRE_BATCH) == ([], False)  # in flight: fired once


# -- the patterns (scheduler.go parseMsgSchedule, cron.go) ---------------------------------------


def _next(pattern: str, at: str, zone: str | None = None) -> str:
    loc = schedule._zone(zone) if zone else None
    ts = _utc(at)
    nxt, _ = parse_schedule(pattern.encode(), loc, ts, ts)
    return schedule.gotime.format(nxt, schedule.offset_at(nxt, loc))


def test_cron_next_times():
    assert _next("0 0 * * * *", "2025-03-01T10:20:30Z") == "2025-03-01T11:00:00Z"
    assert _next("*/15 * * * * *", "2025-03-01T10:20:30Z") == "2025-03-01T10:20:45Z"
    assert _next("0 30 9 * * MON-FRI", "2025-03-01T10:20:30Z") == "2025-03-03T09:30:00Z"  # a Saturday
    assert _next("0 0 12 29 2 *", "2025-03-01T00:00:00Z") == "2028-02-29T12:00:00Z"
    assert _next("0 0 0 15 * 1", "2025-03-01T00:00:00Z") == "2025-03-03T00:00:00Z"  # day 15 or a Monday
    assert _next("0 0 0 ? * sun", "2025-03-01T00:00:00Z") == "2025-03-02T00:00:00Z"
    assert _next("@weekly", "2025-03-01T00:00:00Z") == "2025-03-02T00:00:00Z"
    assert _next("@monthly", "2025-12-15T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert _next("@yearly", "2025-03-01T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert _next("0 0 9 * * *", "2025-03-01T12:00:00Z", "America/New_York") == "2025-03-01T09:00:00-05:00"
    # Across the change to summer time: the next 9:00 in New York is 13:00 UTC, not 14:00.
    assert _next("0 0 9 * * *", "2025-03-08T15:00:00Z", "America/New_York") == "2025-03-09T09:00:00-04:00"
    assert _next("0 0 9 * * *", "2025-03-01T12:00:00Z", "Asia/Kolkata") == "2025-03-02T09:00:00+05:30"
    assert _next("@every 90s", "2025-03-01T00:00:00Z") == "2025-03-01T00:01:30Z"
    for bad in ("0 0 0 30 2 *", "* * * * *", "60 * * * * *", "*/0 * * * * *", "5-1 * * * * *", "@reboot",
                "@every 999ms", "@at 2030-13-01T00:00:00Z"):
        with pytest.raises(schedule._Invalid):
            _next(bad, "2025-03-01T00:00:00Z")
    assert parse_cron_pattern("0 0 0 * * *") is parse_cron_pattern("0 0 0 * * *")  # parsed once


def test_a_repeating_schedule_skips_ahead_to_fire_once():
    ts, now = _utc("2025-03-01T00:00:00Z"), _utc("2025-03-01T01:00:00Z")
    assert parse_schedule(b"@every 1m", None, ts, now) == (now + 60 * S, True)
    assert parse_schedule(b"0 * * * * *", None, ts, now) == (now + 60 * S, True)
    assert parse_schedule(b"@at 2025-03-01T00:00:00Z", None, ts, now) == (ts, False)  # fires (late) once


if __name__ == "__main__":
    assert reference.NATS_SERVER, "nats-server 2.15.1 is not installed"
    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", JS_CONFIG % folder, Path(folder), binary=reference.NATS_SERVER) as port:
        RECORDED.write_text(json.dumps(run_script(port, time.time, _sleeper()), indent=1) + "\n")
    print(f"wrote {RECORDED}")
