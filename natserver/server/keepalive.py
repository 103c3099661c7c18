"""Every client's ping timer (and, with authorization, its auth timer), run by one task for
the whole server.

nats-server gives each client a ``time.Timer`` (client.go setPingTimer/processPingTimer). A
trio task per client would do the same at a price: with it, an idle connection took 14.3 KiB
and 5000 were accepted at 4.9k/s; without it 11.7 KiB and 5.75k/s (benchmarks scenario h). So
the timers live in one heap of (due, sequence, client), served by a single task that sleeps
until the earliest is due and then lets each due client decide (``Client.ping_timer_fired``):
PING it, or close it as stale.

The authentication timeout (nats-server's authTimer) lives in the same heap: a task per
connection waiting auth_timeout would cost a spawn and a sleep's cancel scope at every connect.

Re-arming a timer (CONNECT brings the first PING forward) pushes a new entry and leaves the old
one behind; an entry whose due time is no longer the client's is skipped when it comes up. Those
leftovers and the entries of closed clients are dropped by rebuilding the heap from the live
clients whenever it holds three times as many entries as there are clients (plus some slack),
checked at every arming and at every close (``forget``), so connection churn cannot grow it, nor
keep closed clients in memory for a ping interval: an entry holds its client, and with it the
client's parser, socket and task (about 10 KiB). Before the check at close, 10 000 connections
that came and went left 2 244 such clients alive in the heap (their accept-time entries, due two
minutes later). Between rebuilds at least as many arming or closes happen as there are live
clients, so a rebuild costs O(1) a connection.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .client import Client
    from .server import Server

# Entries beyond 3 per live client that the heap may hold before it is rebuilt (a client has
# at most 2 of its own: ping and auth).
_HEAP_ENTRIES_PER_CLIENT = 3
_HEAP_SLACK = 64
# What an entry is for.
PING = 0
AUTH = 1


class PingTimers:
    """The server's ping timers. ``arm`` (re)starts a client's timer; ``run`` is the task."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._heap: list[tuple[float, int, Client, int]] = []  # (due, sequence, client, PING or AUTH)
        self._sequence = itertools.count()  # ties on the due time go in arming order
        self._sleep: trio.CancelScope | None = None  # the task's sleep, while it sleeps

    def arm(self, client: Client, delay: float) -> None:
        """Fire ``client``'s timer ``delay`` seconds from now (trio's clock), replacing any
        earlier arming."""
        due = trio.current_time() + delay
        client.ping_due = due
        self._push(due, client, PING)

    def arm_auth(self, client: Client, delay: float) -> None:
        """Call ``client.auth_timer_fired()`` ``delay`` seconds from now (trio's clock) unless
        ``client.auth_due`` has changed (set it to None once the client has authenticated)."""
        due = trio.current_time() + delay
        client.auth_due = due
        self._push(due, client, AUTH)

    def forget(self) -> None:
        """A client has closed (and left server.clients): rebuild the heap if the entries of
        closed clients and stale armings have come to outnumber the live ones."""
        if len(self._heap) > _HEAP_ENTRIES_PER_CLIENT * len(self._server.clients) + _HEAP_SLACK:
            self._rebuild()

    def compact(self) -> None:
        """Drop every entry of a closed client or a stale arming now (after a storm of closes:
        the slack can hold _HEAP_SLACK entries, and with them their closed clients, each ~10 KiB
        of objects spread over the storm's memory, for a whole ping interval)."""
        self._rebuild()

    def _push(self, due: float, client: Client, kind: int) -> None:
        heap = self._heap
        if len(heap) > _HEAP_ENTRIES_PER_CLIENT * len(self._server.clients) + _HEAP_SLACK:
            self._rebuild()
        heapq.heappush(heap, (due, next(self._sequence), client, kind))
        sleep = self._sleep
        if sleep is not None and due < sleep.deadline:
            sleep.deadline = due

    def _rebuild(self) -> None:
        heap = []
        for client in self._server.clients.values():
            if client.closed:
                continue
            if client.ping_due is not None:
                heap.append((client.ping_due, next(self._sequence), client, PING))
            if client.auth_due is not None:
                heap.append((client.auth_due, next(self._sequence), client, AUTH))
        heapq.heapify(heap)
        self._heap[:] = heap

    async def run(self) -> None:
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as sleep:
                self._sleep = sleep
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            fired = False
            while heap and heap[0][0] <= now:
                due, _, client, kind = heapq.heappop(heap)
                if client.closed:
                    continue
                if kind == PING:
                    if client.ping_due != due:
                        continue  # re-armed since: a later entry stands for it
                    client.ping_due = None
                    client.ping_timer_fired()
                else:
                    if client.auth_due != due:
                        continue  # authenticated (or re-armed) since
                    client.auth_due = None
                    client.auth_timer_fired()
                fired = True
            if fired:
                self._server.flush_touched()
