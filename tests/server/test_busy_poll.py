"""Busy polling (natserver/server/busypoll.py): after client messages the server polls its
sockets for ``busy_poll`` before it sleeps, only while nothing else is runnable; a window that
catches messages goes on, one that catches none counts a miss, and after RESTING_AFTER_MISSES
of them the poller rests (one wake in PROBE_EVERY polls). The binary polls by default, an
in-process server does not, and neither does a process on one CPU.

The window's time is the poller's ``now`` (real time in a server); the tests give it their own,
so that how many polls a window makes does not depend on the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import natserver
from natserver.protocol import const
from natserver.server import busypoll, signals
from natserver.server.busypoll import PROBE_EVERY, RESTING_AFTER_MISSES, BusyPoller
from natserver.server.server import Server

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0


class FakeTime:
    """The poller's clock: ``step`` seconds pass at each reading; ``at`` is where it stands.
    (A test moves it by its step, never by ``at``: a message the poller has not seen yet would
    open a window at the new time that a standing clock never ends.)"""

    def __init__(self, step: float) -> None:
        self.at = 0.0
        self.step = step
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        # A poller that never saw its window end would spin the test forever: fail instead.
        assert self.readings < 1_000_000, ("the poller's window never ended", self.at, self.step)
        self.at += self.step
        return self.at


class FakeRoom:
    """The poller's CpuRoom: ``answer`` is whether the machine has a CPU to spare."""

    def __init__(self, cpus: int) -> None:
        self.answer = True
        self.at = 0.0
        self.checks = 0

    def check(self, now: float) -> bool:
        self.checks += 1
        self.at = now
        return self.answer


def options(**changes) -> natserver.Options:
    return natserver.Options(host="127.0.0.1", port=-1, quiet=True, **changes)


async def connect(server: Server) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB s 1\r\nPING\r\n')
    await receive_until(stream, b"PONG\r\n")
    return stream


async def receive_until(stream: trio.SocketStream, marker: bytes) -> bytes:
    got = b""
    while marker not in got:
        data = await stream.receive_some()
        assert data, f"closed after {got!r}"
        got += data
    return got


async def publish(stream: trio.SocketStream) -> None:
    """One chunk with a message, and its delivery back (the client subscribes to it)."""
    await stream.send_all(b"PUB s 2\r\nhi\r\nPING\r\n")
    assert await receive_until(stream, b"PONG\r\n") == b"MSG s 1 2\r\nhi\r\nPONG\r\n"


async def until_parked(server: Server) -> None:
    while not server.poller_parked:
        await trio.sleep(0.001)


@asynccontextmanager
async def polling(monkeypatch, time: FakeTime):
    """A server polling 1 ms windows on ``time``, and a client that subscribes to "s": yields
    (server, its poller, the client's stream) once the poller sleeps."""
    monkeypatch.setattr(BusyPoller, "now", staticmethod(time))
    monkeypatch.setattr(busypoll, "usable_cpus", lambda: 2)
    monkeypatch.setattr(busypoll, "CpuRoom", FakeRoom)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options(busy_poll=0.001))
            assert isinstance(server.poller, BusyPoller)
            stream = await connect(server)  # CONNECT, SUB and PING: no message, no window
            await until_parked(server)
            yield server, server.poller, stream
            await stream.aclose()
            await server.shutdown()


def test_the_binary_polls_and_an_in_process_server_does_not(monkeypatch):
    monkeypatch.setattr(busypoll, "usable_cpus", lambda: 2)
    assert Server(options()).busy_poll_window() == 0.0
    binary = Server(options())
    binary.default_busy_poll = const.DEFAULT_BUSY_POLL  # what cli.run_server sets
    assert binary.busy_poll_window() == const.DEFAULT_BUSY_POLL == 100e-6
    set_off = Server(options(busy_poll=0.0))
    set_off.default_busy_poll = const.DEFAULT_BUSY_POLL
    assert set_off.busy_poll_window() == 0.0
    assert Server(options(busy_poll=0.002)).busy_poll_window() == 0.002


def test_never_on_one_cpu(monkeypatch):
    monkeypatch.setattr(busypoll, "usable_cpus", lambda: 1)
    assert Server(options(busy_poll=0.002)).busy_poll_window() == 0.0


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match="invalid busy_poll of 20ms: from 0s to 10ms"):
        options(busy_poll=0.02).validate()
    with pytest.raises(ValueError, match="invalid busy_poll of -1ms"):
        options(busy_poll=-0.001).validate()


async def test_no_poller_unless_asked():
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options())
            stream = await connect(server)
            await publish(stream)
            assert server.poller is None and not server.poller_parked
            await stream.aclose()
            await server.shutdown()


async def test_a_window_polls_while_idle_then_sleeps(monkeypatch):
    async with polling(monkeypatch, FakeTime(step=1e-6)) as (server, poller, stream):
        assert (poller.wakes, poller.windows, poller.polls) == (0, 0, 0)
        await publish(stream)
        await until_parked(server)
        # One window of 1 ms at 1 us a reading: about a thousand polls, each one a pass
        # of the loop with nothing runnable, then the poller sleeps.
        assert (poller.wakes, poller.windows, poller.misses) == (1, 1, 1)
        assert 990 <= poller.polls <= 1010
        polls = poller.polls
        await trio.sleep(0.05)
        assert poller.polls == polls  # asleep: no traffic, no polling


async def test_messages_within_the_window_keep_it_open(monkeypatch):
    time = FakeTime(step=0.0)  # stands still until the test moves it
    async with polling(monkeypatch, time) as (server, poller, stream):
        await publish(stream)  # wakes the poller: a window opens and stays open
        for _ in range(5):
            await publish(stream)
            polls = poller.polls
            await trio.sleep(0.01)  # idle: polling all along
            assert poller.polls > polls and not server.poller_parked
        # Time moves again: the next poll sees the last message (if it has not yet), the
        # one after is past the window, which closes, having caught messages.
        time.step = 0.002
        await until_parked(server)
        assert (poller.wakes, poller.windows, poller.misses) == (1, 1, 0)


async def test_windows_that_catch_nothing_make_it_rest(monkeypatch):
    time = FakeTime(step=1.0)  # every window ends at its first poll
    async with polling(monkeypatch, time) as (server, poller, stream):
        for n in range(1, 2 * PROBE_EVERY + 1):
            await publish(stream)
            await until_parked(server)
            assert poller.wakes == n
        # RESTING_AFTER_MISSES windows, then one for each PROBE_EVERY-th wake
        probes = sum(1 for n in range(RESTING_AFTER_MISSES + 1, 2 * PROBE_EVERY + 1) if n % PROBE_EVERY == 0)
        assert poller.windows == RESTING_AFTER_MISSES + probes == 6
        assert poller.misses == poller.windows
        assert poller.polls == poller.windows  # one poll each: the clock jumped past the window

        # A probe that catches a message ends the rest: the next wakes poll again.
        time.step = 0.0
        for _ in range(PROBE_EVERY - 1):
            await publish(stream)  # resting
        assert poller.windows == 6 and server.poller_parked
        await publish(stream)  # the probe: a window that stays open
        await publish(stream)  # caught
        time.step = 1.0  # (as above)
        await until_parked(server)
        assert (poller.windows, poller.misses) == (7, 0)
        await publish(stream)
        await until_parked(server)
        assert (poller.windows, poller.misses) == (8, 1)


async def test_no_cpu_to_spare_no_polling(monkeypatch):
    time = FakeTime(step=0.0)
    async with polling(monkeypatch, time) as (server, poller, stream):
        poller.room.answer = False  # the other processes keep the CPUs busy
        await publish(stream)
        await publish(stream)
        assert (poller.wakes, poller.crowded, poller.windows, poller.polls) == (2, 2, 0, 0)
        assert server.poller_parked

        # A window open when the machine fills up is cut at its next sample of the machine.
        poller.room.answer = True
        await publish(stream)
        await trio.sleep(0.01)
        assert poller.windows == 1 and not server.poller_parked
        poller.room.answer = False
        time.at += busypoll.ROOM_SAMPLE
        await until_parked(server)
        assert (poller.windows, poller.crowded) == (1, 3)


class _Machine:
    """/proc/stat's busy seconds and this process's, as the test sets them."""

    def __init__(self) -> None:
        self.busy = 100.0
        self.ours = 10.0
        self.reads = 0

    def machine(self) -> float:
        self.reads += 1
        return self.busy

    def own(self) -> float:
        return self.ours


def test_cpu_room_is_what_the_others_leave():
    m = _Machine()
    room = busypoll.CpuRoom(2, machine=m.machine, own=m.own)
    assert room.check(0.0) and m.reads == 1  # the first sample: room until it is over
    m.busy += 0.5  # in 0.1 s: not read again before ROOM_SAMPLE
    assert room.check(0.1) and m.reads == 1
    # Over 0.5 s the machine was busy 0.8 s, 0.4 of it ours: the others used 0.8 of the other CPU.
    m.busy, m.ours = 100.8, 10.4
    assert room.check(0.5) and m.reads == 2
    # The next 0.5 s: busy 1.0 s, ours 0.05: the others took 0.95 of it, more than ROOM_LEFT.
    m.busy, m.ours = 101.8, 10.45
    assert not room.check(1.0)
    assert not room.check(1.1) and m.reads == 3  # (until the next sample)
    # Our own polling does not count against us: busy 1.0 s of which 0.9 ours.
    m.busy, m.ours = 102.8, 11.35
    assert room.check(1.5)
    # On 4 CPUs the others may use up to 0.9 of 3.
    four = busypoll.CpuRoom(4, machine=m.machine, own=m.own)
    four.check(0.0)
    m.busy += 2.5
    assert four.check(1.0)
    m.busy += 2.8
    assert not four.check(2.0)


def test_cpu_room_without_proc_stat_always_polls():
    reads = []
    room = busypoll.CpuRoom(2, machine=lambda: reads.append(1), own=lambda: 0.0)
    assert room.check(0.0) and room.check(10.0) and room.check(1e9)
    assert len(reads) == 1  # not looked for again


def test_machine_busy_seconds_reads_proc_stat():
    busy = busypoll.machine_busy_seconds()
    if not os.path.exists("/proc/stat"):
        assert busy is None
        return
    assert busy is not None and busy > 0
    assert busypoll.own_cpu_seconds() > 0


async def test_a_mock_clock_still_jumps(autojump_clock, monkeypatch):
    # The window is the poller's time, not trio's: under a MockClock that only jumps when the
    # run is idle (autojump), the poller still stops, and a long sleep ends at once.
    time = FakeTime(step=1e-5)
    monkeypatch.setattr(BusyPoller, "now", staticmethod(time))
    monkeypatch.setattr(busypoll, "usable_cpus", lambda: 2)
    monkeypatch.setattr(busypoll, "CpuRoom", FakeRoom)
    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, options(busy_poll=0.001))
        await until_parked(server)
        server.in_msgs += 1  # as a client's chunk of messages does
        server.wake_poller()
        await trio.sleep(3600)
        assert server.poller_parked and server.poller.windows == 1
        assert 95 <= server.poller.polls <= 105
        await server.shutdown()


def test_a_reload_cannot_change_it(tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text('listen: 127.0.0.1:-1\nbusy_poll: "50us"\n')

    async def main() -> None:
        server = natserver.Server(natserver.config.flags.build_options({"config_file": str(conf)}).copy(quiet=True))
        assert server.options.busy_poll == 50e-6
        conf.write_text('listen: 127.0.0.1:-1\nbusy_poll: "80us"\n')
        with pytest.raises(signals.ReloadError, match="config reload not supported for BusyPoll: old=50µs, new=80µs"):
            signals.reload_options(server)
        conf.write_text("listen: 127.0.0.1:-1\n")
        with pytest.raises(signals.ReloadError, match="config reload not supported for BusyPoll: old=50µs, new=default"):
            signals.reload_options(server)

    trio.run(main)


def _start_line(argv: list[str], cpus: set[int] | None = None) -> str:
    """The binary's "Busy poll:" line at start."""
    def pin() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    proc = subprocess.Popen([sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1", *argv], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pin)
    try:
        lines = []
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "Server is ready" in line:
                break
        found = [line for line in lines if "Busy poll:" in line]
        assert len(found) == 1, lines
        return re.sub(r"^.*\[INF\]\s+", "", found[0].rstrip("\n"))
    finally:
        proc.kill()
        proc.wait(TIMEOUT)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: the binary never polls")
def test_the_binary_says_how_it_polls():
    assert _start_line([]) == "Busy poll: 100µs"
    assert _start_line(["--busy_poll", "250us"]) == "Busy poll: 250µs"
    assert _start_line(["--busy_poll", "0s"]) == "Busy poll: off"
    assert _start_line([], cpus={min(os.sched_getaffinity(0))}) == "Busy poll: off"
