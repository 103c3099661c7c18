"""Busy polling: after client messages, keep polling the sockets a moment before sleeping.

A process asleep in ``epoll_wait`` is slow to wake (on the 2-vCPU benchmark machine, tens of
microseconds a hop); Go's scheduler avoids it by spinning before it parks, which is much of why
nats-server answers a request sooner than a server that sleeps at once. ``BusyPoller`` does the
same for the trio loop: while the window lasts, its task waits with ``wait_all_tasks_blocked``,
so the loop polls with a zero timeout whenever nothing else is runnable, and never takes a turn
from a task that has work. The window restarts with every chunk of messages (the server's
``in_msgs`` moved) and ends ``window`` seconds after the last one; then the task parks until
the next chunk wakes it (``Server.wake_poller``, from ``Client._process_ops``).

Real time (``time.perf_counter``), not trio's clock: under a MockClock the poller still stops.
"""

from __future__ import annotations

import os
import time

import trio

try:
    # trio.testing's own name for it imports pytest when installed (75 ms at start).
    from trio._core import wait_all_tasks_blocked
except ImportError:  # pragma: no cover - a trio that moved it
    from trio.testing import wait_all_tasks_blocked


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, as a container limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


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
    ``polls`` (the zero-timeout polls it caused) and ``misses`` (windows in a row that caught
    no message)."""

    __slots__ = ("server", "window", "polls", "windows", "wakes", "misses", "_lot")

    now = staticmethod(time.perf_counter)  # the window's time (tests put their own)

    def __init__(self, server, window: float) -> None:
        self.server = server
        self.window = window
        self.polls = 0
        self.windows = 0
        self.wakes = 0
        self.misses = 0  # windows in a row that caught no message
        self._lot = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        """A chunk of client messages came while the poller slept: poll, unless resting."""
        self.wakes += 1
        if self.misses >= RESTING_AFTER_MISSES and self.wakes % PROBE_EVERY:
            return  # resting (see RESTING_AFTER_MISSES): no task switch either
        self.server.poller_parked = False
        self._lot.unpark()

    async def run(self) -> None:
        server = self.server
        perf = self.now
        window = self.window
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
                if server.in_msgs != seen:
                    seen = server.in_msgs
                    until = now + window
                elif now >= until:
                    break
            self.misses = 0 if seen != start else self.misses + 1
