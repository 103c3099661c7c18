"""Busy polling: after client messages, keep polling the sockets a moment before sleeping.

A process asleep in ``epoll_wait`` is slow to wake (on the 2-vCPU benchmark machine, tens of
microseconds a hop); Go's scheduler avoids it by spinning before it parks, which is much of why
nats-server answers a request sooner than a server that sleeps at once. ``BusyPoller`` does the
same for the trio loop: while the window lasts, its task waits with ``wait_all_tasks_blocked``,
so the loop polls with a zero timeout whenever nothing else is runnable, and never takes a turn
from a task that has work. The window restarts with every chunk of messages (the server's
``in_msgs`` moved) and ends ``window`` seconds after the last one; then the task parks until
the next chunk wakes it (``Server.wake_poller``, from ``Client._process_ops``).

Polling takes a CPU that would otherwise idle, never one another process wants: like Go's
scheduler, which spins only while some processor is idle, the poller opens a window only when the
other processes on the machine left this one a CPU over the last ROOM_SAMPLE seconds
(``CpuRoom``: /proc/stat's busy time less this process's own). On a loaded machine (a CI runner
with its test workers busy) it sleeps at once, as it did before it polled.

Real time (``time.perf_counter``), not trio's clock: under a MockClock the poller still stops.
"""

from __future__ import annotations

import math
import time

import trio

from .cpus import machine_busy_seconds, own_cpu_seconds, usable_cpus

try:
    # trio.testing's own name for it imports pytest when installed (75 ms at start).
    from trio._core import wait_all_tasks_blocked
except ImportError:  # pragma: no cover - a trio that moved it
    from trio.testing import wait_all_tasks_blocked


# How long a sample of the machine's CPU use is (CpuRoom): /proc/stat counts in 10 ms ticks,
# so a quarter of a second reads others' use to about 4 % of a CPU.
ROOM_SAMPLE = 0.25
# The poller takes a CPU only when the other processes used less than this much of the CPUs it
# does not need (on 2 CPUs: 0.9 of one). nats.go's request/reply clients use about 0.6 there.
ROOM_LEFT = 0.9


class CpuRoom:
    """Whether the machine's other processes leave this one a CPU to poll on: their CPU use
    (the machine's busy time less ours) over the last ROOM_SAMPLE seconds, below ROOM_LEFT of
    the other CPUs. Sampled at most once a ROOM_SAMPLE; yes until the first sample is over,
    and always where /proc/stat cannot be read."""

    __slots__ = ("cpus", "machine", "own", "at", "busy", "ours", "room")

    def __init__(self, cpus: int, machine=machine_busy_seconds, own=own_cpu_seconds) -> None:
        self.cpus = cpus
        self.machine = machine
        self.own = own
        self.at = -math.inf  # when the last sample was taken (+inf: never again, no /proc/stat)
        self.busy = 0.0
        self.ours = 0.0
        self.room = True

    def check(self, now: float) -> bool:
        at = self.at
        if now - at < ROOM_SAMPLE:
            return self.room
        busy = self.machine()
        if busy is None:
            self.at, self.room = math.inf, True
            return True
        ours = self.own()
        if at != -math.inf:
            others = (busy - self.busy) - (ours - self.ours)
            self.room = others < ROOM_LEFT * (self.cpus - 1) * (now - at)
        self.at, self.busy, self.ours = now, busy, ours
        return self.room


# Polling pays only when the next message comes within the window (a fast client's request/reply:
# Go clients answer in well under 100 us here). When this many windows in a row caught nothing
# (Python clients, whose turn takes longer; sparse traffic), the poller rests: it sleeps at once,
# and polls after one wake in PROBE_EVERY to see whether the traffic came closer. nats-py
# request/reply p50 is the same polling or not, at twice the server's CPU a round trip.
RESTING_AFTER_MISSES = 4
PROBE_EVERY = 16


class BusyPoller:
    """The poller of one server: ``run`` is its task, ``wake`` starts a window. Counted: ``wakes``
    (chunks of messages that came while it slept), ``windows`` (the windows it polled),
    ``polls`` (the zero-timeout polls it caused), ``misses`` (windows in a row that caught
    no message) and ``crowded`` (wakes not polled, windows cut short: no CPU to spare)."""

    __slots__ = ("server", "window", "polls", "windows", "wakes", "misses", "crowded", "room", "_lot")

    now = staticmethod(time.perf_counter)  # the window's time (tests put their own)

    def __init__(self, server, window: float) -> None:
        self.server = server
        self.window = window
        self.polls = 0
        self.windows = 0
        self.wakes = 0
        self.misses = 0  # windows in a row that caught no message
        self.crowded = 0  # wakes (and windows cut short) because the other processes took the CPUs
        self.room = CpuRoom(usable_cpus())
        self._lot = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        """A chunk of client messages came while the poller slept: poll, unless resting."""
        self.wakes += 1
        if self.misses >= RESTING_AFTER_MISSES and self.wakes % PROBE_EVERY:
            return  # resting (see RESTING_AFTER_MISSES): no task switch either
        if not self.room.check(self.now()):
            self.crowded += 1
            return  # the machine is busy: sleep, as the loop did before it polled
        self.server.poller_parked = False
        self._lot.unpark()

    async def run(self) -> None:
        server = self.server
        perf = self.now
        window = self.window
        room = self.room
        while True:
            server.poller_parked = True
            await self._lot.park()
            self.windows += 1
            seen = start = server.in_msgs
            until = perf() + window
            while True:
                await wait_all_tasks_blocked()
                self.polls += 1
                now = perf()
                if now - room.at >= ROOM_SAMPLE and not room.check(now):  # (a long window)
                    self.crowded += 1
                    break
                if server.in_msgs != seen:
                    seen = server.in_msgs
                    until = now + window
                elif now >= until:
                    break
            self.misses = 0 if seen != start else self.misses + 1
