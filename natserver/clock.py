"""The server's one clock: every timestamp, age, TTL and duplicate window reads it.

nats-server reads ``time.Now()`` (wall time) for what it stores and reports, and Go timers for
what it waits on. natserver waits on trio's clock (``trio.sleep``, ``move_on_after``,
``trio.current_time()``) and reads wall time through :func:`now` / :func:`now_ns`, and a
monotonic time for measuring intervals outside trio's timers through :func:`monotonic`.

In production nothing is installed and these are ``time.time()``, ``time.time_ns()`` and
``time.monotonic()``. In tests (:mod:`natserver.testing`) the server's trio run gets a clock the
test can move, and :func:`install` derives this thread's wall and monotonic time from that
trio clock: when the test jumps trio's clock ahead, every timer *and* every timestamp moves
together, as if the time had passed. The installed time base is per thread, because each
in-process server runs its own trio loop in a thread of its own.

This module sits below every other layer (it imports nothing of natserver's and no trio), so
any module may read the clock. tests/testing/test_clock.py fails when server code reads
``time.time()`` or ``time.monotonic()`` directly.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["Timebase", "install", "installed", "monotonic", "now", "now_ns", "uninstall"]


class Timebase:
    """This thread's time while a test clock drives its trio run.

    A clock running at real speed (trio's ``MockClock(rate=1)``, natserver.testing's default)
    gives ``time.time()`` plus the seconds jumped through :meth:`jump`, so timestamps stay
    exactly the system's until a test moves time. Any other clock (one that stands still
    until jumped) gives the wall time when installed plus however far the clock has moved.
    """

    __slots__ = ("trio_clock", "_real_speed", "_jumped_ns", "_wall0_ns", "_clock0", "users")

    def __init__(self, trio_clock: Any, offset_ns: int = 0) -> None:
        self.trio_clock = trio_clock
        self._real_speed = getattr(trio_clock, "rate", None) == 1.0
        self._jumped_ns = offset_ns  # ahead of time.time() from the start (a restarted server's)
        self._wall0_ns = time.time_ns() + offset_ns
        self._clock0 = trio_clock.current_time()
        self.users = 0  # servers of this thread's trio run relying on it

    def now_ns(self) -> int:
        if self._real_speed:
            return time.time_ns() + self._jumped_ns
        return self._wall0_ns + int((self.trio_clock.current_time() - self._clock0) * 1e9)

    def now(self) -> float:
        return self.now_ns() / 1e9

    def jump(self, seconds: float) -> None:
        """Move the trio clock (a MockClock) and the wall time ``seconds`` ahead."""
        self.trio_clock.jump(seconds)
        self._jumped_ns += int(seconds * 1e9)


class _Installed(threading.local):
    timebase: Timebase | None = None


_installed = _Installed()
# Time bases installed in any thread of the process. While there are none (a server in
# production) the functions below read time directly: a thread-local lookup costs several
# times a time.time() call, and these are read for every published JetStream message.
_installed_anywhere = 0
_count_lock = threading.Lock()
_time = time.time
_time_ns = time.time_ns
_monotonic = time.monotonic


def now() -> float:
    """Wall time in seconds (``time.time()`` unless a test clock is installed)."""
    if _installed_anywhere:
        timebase = _installed.timebase
        if timebase is not None:
            return timebase.now()
    return _time()


def now_ns() -> int:
    """Wall time in nanoseconds (``time.time_ns()`` unless a test clock is installed)."""
    if _installed_anywhere:
        timebase = _installed.timebase
        if timebase is not None:
            return timebase.now_ns()
    return _time_ns()


def monotonic() -> float:
    """Seconds on a clock that never goes back (``time.monotonic()``; under a test clock, the
    trio clock itself, so that intervals measured with it follow the test's jumps)."""
    if _installed_anywhere:
        timebase = _installed.timebase
        if timebase is not None:
            return timebase.trio_clock.current_time()
    return _monotonic()


def install(trio_clock: Any, offset_ns: int = 0) -> Timebase:
    """Make this thread's time follow ``trio_clock`` (a trio clock; a test clock that jumps),
    starting ``offset_ns`` ahead of the system's wall time. Installing the clock already
    installed counts one more user; :func:`uninstall` each."""
    global _installed_anywhere
    timebase = _installed.timebase
    if timebase is None or timebase.trio_clock is not trio_clock:
        timebase = Timebase(trio_clock, offset_ns)
        _installed.timebase = timebase
        with _count_lock:
            _installed_anywhere += 1
    timebase.users += 1
    return timebase


def uninstall(timebase: Timebase) -> None:
    """Undo one :func:`install`; the last user's uninstall returns the thread to real time."""
    global _installed_anywhere
    timebase.users -= 1
    if timebase.users <= 0 and _installed.timebase is timebase:
        _installed.timebase = None
        with _count_lock:
            _installed_anywhere -= 1


def installed() -> Timebase | None:
    """This thread's installed time base (None: real time)."""
    return _installed.timebase
