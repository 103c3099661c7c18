"""Issue 29 item 1: the server's one clock, moved by the test (NatsServer.advance).

Every test here waits out a server timeout of 30 s or more in a fraction of a second: the
redelivery after ack_wait, a KV TTL, max_age, NSQ's msg_timeout, STAN's ack wait. They are
written as a user writes them (nats-py on asyncio, stan.py, a raw NSQ client from trio) and each
has a hard timeout. ``test_no_direct_clock_reads`` walks the server's code: a timestamp or
interval read from ``time`` directly would not follow ``advance()``.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import nats
import pytest
import trio
from nats.js.api import ConsumerConfig, StreamConfig

import natserver
from natserver.stan import StanOptions
from natserver.testing import NatsServer
from tests.nsq.helpers import FRAME_MESSAGE, FRAME_RESPONSE, nsq_options, parse_message
from tests.nsq.helpers import RawClient as NsqRawClient
from tests.stan import stan_client as S

TIMEOUT = 10  # hard limit on one test's I/O
# "Takes under a second" (the issue), with room for a machine shared by many test runs.
FAST = 3.0

PACKAGE = Path(natserver.__file__).parent

# Reads of real time that stay real, each with why. Everything else goes through natserver.clock.
ALLOWED = {
    "clock.py": "the clock itself",
    "testing.py": "the test double's own waits and faults run in the test's thread, on real time",
    "testing_cluster.py": "waits for routes in the test's thread, on real time",
    "spark/": "a client (the Spark data source), not the server",
    "server/monitor.py:self._wall = time.monotonic()": "CPU percentage: CPU seconds over real seconds",
    "server/monitor.py:wall = time.monotonic()": "CPU percentage: CPU seconds over real seconds",
    "server/client.py:self.rtt = time.monotonic() - self._rtt_start": "a round trip is measured in real time",
    "server/client.py:_rtt_measured_at": "when the RTT was measured, on the RTT's own clock",
    "server/client.py:self._rtt_start = time.monotonic()": "a round trip is measured in real time",
    "server/log.py:line = formatter.line(levelno, fmt % args if args else fmt, time.time())":
        "a log line's stamp: the wall clock, as the logging module stamps every other line",
}
DIRECT_READ = re.compile(r"\btime\.(time|time_ns|monotonic|monotonic_ns|perf_counter)\(|datetime\.(datetime\.)?now\(")


def test_no_direct_clock_reads():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if any(rel == key or (key.endswith("/") and rel.startswith(key)) for key in ALLOWED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if not DIRECT_READ.search(code):
                continue
            if any(key.startswith(rel + ":") and key.split(":", 1)[1] in line for key in ALLOWED):
                continue
            offenders.append(f"natserver/{rel}:{number}: {line.strip()}")
    assert not offenders, "read natserver.clock (now/now_ns/monotonic) instead:\n" + "\n".join(offenders)


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# -- the clock itself --------------------------------------------------------------------------


def test_now_follows_advance_and_manual_stands_still():
    with NatsServer(clock="manual") as server:
        before = server.now()
        time.sleep(0.05)
        assert server.now() == before  # manual: nothing moves until the test says so
        server.advance(90)
        assert server.now() == pytest.approx(before + 90, abs=1e-6)
    with NatsServer() as server:  # real: real speed, plus the jumps
        skew = server.now() - time.time()
        server.advance(30)
        assert server.now() - time.time() == pytest.approx(skew + 30, abs=0.05)
        with pytest.raises(ValueError, match="back"):
            server.advance(-1)


def test_timers_fire_in_deadline_order():
    # Three delayed deliveries, armed out of order: one advance past all of them delivers them
    # in due order, each stamped (by the recorder) at its own due time.
    with NatsServer(clock="manual") as server:
        async def main():
            nc = await nats.connect(server.url)
            sub = await nc.subscribe("jobs")
            await nc.flush()
            for delay in (30, 10, 20):
                server.delay("jobs", delay)
                await nc.publish("jobs", str(delay).encode())
            await nc.flush()
            await server.wait_for_messages_async("jobs", 3)
            await server.advance_async(15)  # only the 10 s one is due
            assert (await sub.next_msg(timeout=2)).data == b"10"
            with pytest.raises(nats.errors.TimeoutError):
                await sub.next_msg(timeout=0.1)
            await server.advance_async(60)
            assert [(await sub.next_msg(timeout=2)).data for _ in range(2)] == [b"20", b"30"]
            await nc.close()

        run(main())


@pytest.mark.nats_server(clock="manual")
def test_manual_clock_from_the_marker(nats_server):
    assert nats_server.clock == "manual"
    t = nats_server.now()
    time.sleep(0.02)
    nats_server.advance(5)
    assert nats_server.now() == pytest.approx(t + 5, abs=1e-6)


def test_clients_survive_a_long_jump(nats_server):
    # An hour is 30 PINGs of nats-server's keepalive (every 2 min, 2 unanswered close the
    # client): nats-py answers them on the way, so its connection is still the same one.
    async def main():
        nc = await nats.connect(nats_server.url, name="long")
        (before,) = nats_server.connections("long")
        await nats_server.advance_async(3600)
        await nc.flush(timeout=2)
        (after,) = nats_server.connections("long")
        assert after.cid == before.cid and nc.is_connected
        await nc.close()

    run(main())


# -- JetStream ----------------------------------------------------------------------------------


@pytest.mark.nats_server(jetstream=True)
def test_jetstream_redelivery_after_ack_wait(nats_server):
    started = time.monotonic()

    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        await js.publish("orders.new", b"order 1")
        sub = await js.pull_subscribe("orders.*", "worker", config=ConsumerConfig(ack_wait=30))
        (first,) = await sub.fetch(1, timeout=2)
        assert first.metadata.num_delivered == 1  # not acked
        await nats_server.advance_async(29)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.2)  # not yet
        await nats_server.advance_async(2)
        (again,) = await sub.fetch(1, timeout=2)
        assert (again.data, again.metadata.num_delivered) == (b"order 1", 2)
        await again.ack()
        await nc.close()

    run(main())
    assert time.monotonic() - started < FAST


@pytest.mark.nats_server(jetstream=True)
def test_kv_ttl_expires(nats_server):
    started = time.monotonic()

    async def main():
        nc = await nats.connect(nats_server.url)
        kv = await nc.jetstream().create_key_value(bucket="sessions", ttl=60)
        await kv.put("alice", b"token")
        await nats_server.advance_async(59)
        assert (await kv.get("alice")).value == b"token"
        await nats_server.advance_async(2)
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await kv.get("alice")
        await nc.close()

    run(main())
    assert time.monotonic() - started < FAST


@pytest.mark.nats_server(jetstream=True, clock="manual")
def test_max_age_removes_old_messages_with_the_servers_timestamps(nats_server):
    started = time.monotonic()

    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="EVENTS", subjects=["events.>"], max_age=100))
        await js.publish("events.old", b"1")
        await nats_server.advance_async(60)
        await js.publish("events.new", b"2")
        msg = await js.get_msg("EVENTS", 2)
        # Timestamps are the server's clock: 60 s after the first message's.
        first = await js.get_msg("EVENTS", 1)
        assert _stamp(msg) - _stamp(first) == pytest.approx(60, abs=1e-3)
        await nats_server.advance_async(41)  # the first is 101 s old, the second 41 s
        info = await js.stream_info("EVENTS")
        assert (info.state.messages, info.state.first_seq) == (1, 2)
        await nc.close()

    run(main())
    assert time.monotonic() - started < FAST


def _stamp(raw_msg) -> float:
    import datetime

    text = raw_msg.time if isinstance(raw_msg.time, str) else raw_msg.time.isoformat()
    text = text.replace("Z", "+00:00")
    head, _, rest = text.partition(".")
    frac, _, zone = rest.partition("+")
    return datetime.datetime.fromisoformat(f"{head}+{zone}").timestamp() + float("0." + (frac or "0"))


# -- NSQ ----------------------------------------------------------------------------------------


async def test_nsq_requeue_after_msg_timeout_from_trio(tmp_path):
    started = time.monotonic()
    server = NatsServer(nsq=nsq_options(tmp_path))
    await server.start_async()
    try:
        with trio.fail_after(TIMEOUT):
            port = server.server.nsq.tcp_port
            consumer = await RawClient.connect(port)
            await consumer.cmd(b"SUB orders billing")
            assert await consumer.frame() == (0, b"OK")
            send, received = trio.open_memory_channel(10)

            async def read_messages():
                # What every NSQ client does: answer heartbeats (30 s apart) with NOP, or
                # nsqd closes the connection after client_timeout (60 s).
                while True:
                    kind, data = await consumer.frame_skip_heartbeats_answering()
                    await send.send((kind, data))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_messages)
                await consumer.cmd(b"RDY 1")
                producer = await RawClient.connect(port)
                await producer.cmd(b"PUB orders", b"order 1")
                assert await producer.frame() == (0, b"OK")
                kind, data = await received.receive()
                assert kind == FRAME_MESSAGE and parse_message(data)[1:4:2] == (1, b"order 1")
                # No FIN: after msg_timeout (60 s) the message is requeued and comes again.
                await server.advance_async(61)
                kind, data = await received.receive()
                assert kind == FRAME_MESSAGE and parse_message(data)[1:4:2] == (2, b"order 1")
                nursery.cancel_scope.cancel()
            await consumer.aclose()
            await producer.aclose()
    finally:
        await server.stop_async()
    assert time.monotonic() - started < FAST


class RawClient(NsqRawClient):
    async def frame_skip_heartbeats_answering(self) -> tuple[int, bytes]:
        while True:
            kind, data = await self.frame()
            if (kind, data) != (FRAME_RESPONSE, b"_heartbeat_"):
                return kind, data
            await self.cmd(b"NOP")


# -- STAN ---------------------------------------------------------------------------------------


def test_stan_redelivery_after_ack_wait():
    started = time.monotonic()
    with NatsServer(stan=StanOptions()) as server:

        async def main():
            sc = await S.connect(server.url, "worker")
            inbox: asyncio.Queue = asyncio.Queue()

            async def on_message(msg):
                await inbox.put(msg)

            await sc.subscribe("work", cb=on_message, manual_acks=True, ack_wait=30)
            await sc.publish("work", b"job")
            first = await asyncio.wait_for(inbox.get(), 2)
            assert not first.proto.redelivered
            await server.advance_async(31)
            again = await asyncio.wait_for(inbox.get(), 2)
            assert (again.seq, again.data, again.proto.redelivered) == (1, b"job", True)
            await sc.ack(again)
            await S.close(sc)

        run(main())
    assert time.monotonic() - started < FAST


# -- more JetStream timers --------------------------------------------------------------------


@pytest.mark.nats_server(jetstream=True)
def test_duplicate_window_and_inactive_threshold(nats_server):
    started = time.monotonic()

    async def main():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="PAY", subjects=["pay.*"], duplicate_window=120))
        assert (await js.publish("pay.in", b"1", headers={"Nats-Msg-Id": "a"})).seq == 1
        assert (await js.publish("pay.in", b"1", headers={"Nats-Msg-Id": "a"})).duplicate
        await nats_server.advance_async(121)  # the window has passed: the same id is new again
        again = await js.publish("pay.in", b"1", headers={"Nats-Msg-Id": "a"})
        assert (again.seq, again.duplicate) == (2, None)
        info = await js.add_consumer("PAY", ConsumerConfig(inactive_threshold=60))  # ephemeral
        assert nats_server.stream("PAY").consumer_names == (info.name,)
        await nats_server.advance_async(61)
        assert nats_server.stream("PAY").consumer_names == ()
        await nc.close()

    run(main())
    assert time.monotonic() - started < FAST


async def test_trio_native_server_on_the_tests_mock_clock(mock_clock, trio_nats_server):
    # trio-native: the server shares the test's run, hence pytest-trio's MockClock; at rate 1 it
    # runs at real speed plus the jumps, so the hard timeout is TIMEOUT real seconds plus them.
    mock_clock.rate = 1.0
    with trio.fail_after(TIMEOUT + 31):
        stream = await trio.open_tcp_stream("127.0.0.1", trio_nats_server.port)
        await stream.send_all(b'CONNECT {"verbose":false}\r\nSUB later 1\r\nPING\r\n')
        received = b""
        while b"PONG\r\n" not in received:
            received += await stream.receive_some(4096)
        trio_nats_server.delay("later", 30)
        await stream.send_all(b"PUB later 2\r\nhi\r\nPING\r\n")
        await trio_nats_server.wait_for_message_async("later")
        before = trio_nats_server.now()
        await trio_nats_server.advance_async(31)
        assert before + 31 <= trio_nats_server.now() < before + 31 + TIMEOUT
        received = b""
        while b"MSG later 1 2\r\nhi\r\n" not in received:
            received += await stream.receive_some(4096)
        await stream.aclose()


def test_a_restart_keeps_the_advanced_time():
    with NatsServer(jetstream=True) as server:
        server.advance(3600)
        server.restart()
        assert server.now() - time.time() == pytest.approx(3600, abs=0.5)
    with NatsServer(clock="manual") as server:
        server.advance(10)
        before = server.now()
        server.restart()
        assert server.now() == pytest.approx(before, abs=0.5)


async def test_nsq_deferred_message_after_advance(tmp_path):
    server = NatsServer(nsq=nsq_options(tmp_path))
    await server.start_async()
    try:
        with trio.fail_after(TIMEOUT):
            port = server.server.nsq.tcp_port
            consumer = await RawClient.connect(port)
            await consumer.cmd(b"SUB reminders mail")
            assert await consumer.frame() == (0, b"OK")
            await consumer.cmd(b"RDY 1")
            producer = await RawClient.connect(port)
            await producer.cmd(b"DPUB reminders 60000", b"call back")  # deferred 60 s
            assert await producer.frame() == (0, b"OK")
            assert server.nsq_topics()["reminders"].channels["mail"].deferred == 1
            async with trio.open_nursery() as nursery:
                send, received = trio.open_memory_channel(1)

                async def read():
                    await send.send(await consumer.frame_skip_heartbeats_answering())

                nursery.start_soon(read)
                await server.advance_async(59)
                assert server.nsq_topics()["reminders"].channels["mail"].deferred == 1
                await server.advance_async(2)
                kind, data = await received.receive()
                assert kind == FRAME_MESSAGE and parse_message(data)[3] == b"call back"
            await consumer.aclose()
            await producer.aclose()
    finally:
        await server.stop_async()


async def test_a_manual_clock_in_trio_native_mode_needs_a_mock_clock(nursery):
    with pytest.raises(ValueError, match="mock_clock"):
        await NatsServer(clock="manual").start_async(nursery)
