"""Giving memory back after a large drop: many connections closed, or big buffers released.

CPython frees a closed connection's objects (its Client, parser, socket, task) when the last
reference goes, but a Client and its Subscriptions refer to each other, so many wait for a
full garbage collection, which comes rarely; and what is freed stays with the allocator:
glibc keeps freed heap pages (a partial 1 MiB payload is 16 chunks of 64 KiB) until
``malloc_trim`` returns them. After 10 000 connections opened and closed, natserver's RSS stayed
at 148 MB (43 MB before); after 200 connections that each left a partial 1 MiB payload, at
339 MB. nats-server (Go's scavenger) gives the memory back by itself.

So the server counts what closes release (``note_closed``) and, once that is a lot, waits for
the churn to quiet down, collects garbage and trims the heap (in a worker thread: the trim
walks every arena). Nothing happens on a server whose connections come and go a few at a time.
Before collecting, the owner lets go of what it still holds of the closed connections
(``compact``: the server's ping timers' leftover entries, its client tables' grown room).

What stays is CPython's own: a 1 MiB arena of small objects is given back only once every
object in it is freed, and a storm spreads its objects over ~100 of them, so a few objects
made during the storm that live on (a waiting task's coroutine and its cancel scope, a float
deadline, a counter's int, a small dict's keys) each keep an arena. Scanning the arenas'
pool headers 20 s after 10 000 connections closed found 20 to 35 arenas held by fewer than
50 live blocks each, a third of them by a single one: 45 arenas where 14 were before, 32 MB of
empty pools. bench_hostile's memory round (38 MB before): 10 000 closed 65-68 MB, 200 partial
payloads left 61-62 MB (154 and 92 MB, 42 before, without the compaction, the follow-up and
the late reclaim, the same day). So the reclaim also drops the empty pools' pages
(``_arenas.c``, where it was built: the arena allocator, with a list of the arenas, and
``release_empty_pools``): 64-80 MB -> 47-52 MB 30 s after the storm, 38-41 before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import math
import sys
from typing import Callable

import trio

from ..protocol.parser import compiled

log = logging.getLogger("natserver")

# What closes must have released before a reclaim: this many connections, or this many bytes
# of buffers (partial payloads read, output not sent). An idle connection takes ~10 KiB.
RECLAIM_AFTER_CLOSES = 1000
RECLAIM_AFTER_BYTES = 32 * 1024 * 1024
# How long no close may have happened before the reclaim runs: never in the middle of a storm
# (or of steady churn, which Python's own collections keep up with), where a full collection
# (~100 ms with 10 000 connections' objects) would hold every client up.
RECLAIM_QUIET = 1.0
# For this long after a reclaim that followed a large drop, any close is followed by one
# more reclaim (once quiet again): a stall of the event loop longer than RECLAIM_QUIET in the
# middle of a storm (a full collection of its objects, a busy machine) looked like the quiet,
# and the connections that closed after it, fewer than RECLAIM_AFTER_CLOSES, stayed in their
# reference cycles until the next full collection, which an idle server may never make
# (bench_hostile's memory round: 500 to 2 200 closed Clients still held 30 s later). The
# issue's window: memory given back within 30 s of the load leaving.
RECLAIM_FOLLOW_UP = 30.0
# A large drop's reclaim is repeated this long after it, closes or not: some of what the closed
# connections left is let go of only later (trio keeps a stale entry, and with it its cancel
# scope, for every deadline it was given until that deadline passes: 10 s for the INFO an
# accept sends, nats-server's default write deadline), and without a collection after that
# its cycles stay (bench_hostile's memory round: 129 MB 23 s after 10 000 closes, 73 MB after
# one more collection and trim).
RECLAIM_LATE = 12.0

# _arenas.c's release_empty_pools, or None (not built, NATSERVER_NO_EXTENSIONS, not CPython's
# pymalloc layout). Importing the module makes it the arena allocator, so it is done here, at
# the server's start, before any storm: arenas made before it are not listed.
release_empty_pools = compiled("release_empty_pools", module="natserver.server._arenas")


@functools.cache
def load_malloc_trim():
    """glibc's malloc_trim, or None (another libc, or none found). Looked up once a process,
    on first use: ctypes.util.find_library runs ldconfig (4-13 ms), which every server start
    paid before its first INFO (issue #33)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Reclaimer:
    """Collects garbage and trims the C heap after a large drop; ``run`` is its task."""

    def __init__(self, compact: Callable[[], None] = lambda: None) -> None:
        # The owner's structures sized by the load, shrunk to what is left first: what they
        # still hold of the closed connections goes with the collection.
        self._compact = compact
        self._closes = 0
        self._bytes = 0
        self._last_close = 0.0
        self._due = trio.Event()
        self._follow_up_until = float("-inf")  # see RECLAIM_FOLLOW_UP
        self._late_at = math.inf  # see RECLAIM_LATE
        self.reclaims = 0  # how many times it ran (tests, monitoring)

    def note_closed(self, released_bytes: int) -> None:
        """A connection closed, releasing ``released_bytes`` of buffers besides itself."""
        self._closes += 1
        self._bytes += released_bytes
        self._last_close = trio.current_time()
        if self._large() or self._last_close < self._follow_up_until:
            self._due.set()

    def _large(self) -> bool:
        return self._closes >= RECLAIM_AFTER_CLOSES or self._bytes >= RECLAIM_AFTER_BYTES

    async def run(self) -> None:
        while True:
            with trio.move_on_at(self._late_at):
                await self._due.wait()
            if self._due.is_set():
                while True:  # until RECLAIM_QUIET without a close
                    quiet_at = self._last_close + RECLAIM_QUIET
                    now = trio.current_time()
                    if now >= quiet_at:
                        break
                    await trio.sleep(quiet_at - now)
            else:  # RECLAIM_LATE after a large drop's
                self._late_at = math.inf
            self._due = trio.Event()
            if self._large():  # (a follow-up or a late one opens no window of its own)
                self._follow_up_until = trio.current_time() + RECLAIM_FOLLOW_UP
                self._late_at = trio.current_time() + RECLAIM_LATE
            closes, released = self._closes, self._bytes
            self._closes = self._bytes = 0
            await self.reclaim()
            log.debug("Gave memory back after %d closes (%d bytes of buffers)", closes, released)

    async def reclaim(self) -> None:
        self._compact()
        gc.collect()  # the closed Clients' cycles (Client <-> Subscription, tasks)
        if release_empty_pools is not None:  # (here, not in the trim's thread: it reads pymalloc's pools)
            pools, released = release_empty_pools()
            log.debug("Dropped the pages of %d empty pools (%d KiB)", pools, released // 1024)
        self.reclaims += 1
        await trim_heap()


async def trim_heap() -> None:
    """malloc_trim, in a thread (it may take a while on a large heap). A test on trio's
    autojump clock replaces it: while a thread runs, that clock jumps to the next deadline."""
    await trio.to_thread.run_sync(_trim_heap)


def _trim_heap() -> None:
    """``malloc_trim(0)`` where glibc has it (in a worker thread: it walks every arena, and the
    first call looks the function up)."""
    trim = load_malloc_trim()
    if trim is not None:
        trim(0)


# A table is rebuilt once it takes SHRINK_BELOW times the room its entries need: a dict or a
# set never gives back the room it grew to (10 000 connections: ~0.3-0.5 MiB each).
SHRINK_BELOW = 8


def shrink_dict(table: dict) -> None:
    """Rebuild ``table`` in place (others hold it) at its present size, if that has dropped far
    below what it grew to."""
    if sys.getsizeof(table) > SHRINK_BELOW * sys.getsizeof(dict(table)):
        entries = list(table.items())
        table.clear()  # (frees the old table)
        table.update(entries)


def shrink_set(table: set) -> None:
    """Like shrink_dict, for a set."""
    if sys.getsizeof(table) > SHRINK_BELOW * sys.getsizeof(set(table)):
        entries = list(table)
        table.clear()
        table.update(entries)
