"""How much work of connections that have not sent a CONNECT yet one scheduler pass does.

Every client is served by one thread, in trio's passes: a pass runs every task that is ready,
so a client whose request just arrived waits for everything else that is ready in the same
pass. Under a reconnect storm (issue 34: 50 connections sending malformed protocol and
reconnecting as fast as they are cut) each pass carried every fuzzing connection's accept,
INFO, error, log line and close, and a healthy client's request waited for all of them: p50
8-12 ms where nats-server, which spreads the same work over its threads, answers in 1-2 ms.

So such work is admitted a few units a pass: a unit is one accepted connection (its INFO) or
one read of a connection that has not sent a valid CONNECT yet (Client._read_loop). The
admitter task refills a budget of ``per_pass`` units every pass while units come; a unit
that finds it spent waits, in arrival order, and goes in a later pass as part of a later
budget. Established clients are never held, so their work in a pass is queued behind at most
``per_pass`` units of the others (a pass may hold the end of one budget and the start of the
next: 2 * per_pass at worst). Nothing is refused or answered differently, only later: the
connections in the storm get exactly nats-server's answers.

When nothing waits, admission costs a counter decrement (no checkpoint); the admitter sleeps
after a pass without units, so an idle server has no task to run.
"""

from __future__ import annotations

import trio

__all__ = ["Admission", "UNVERIFIED_WORK_PER_PASS"]

# Units (accepts, reads before CONNECT) admitted a pass. natserver's own figure: such a unit
# costs 50-150 us of CPU (accept and INFO; read, -ERR, parser ERROR line and close), so 4 of
# them keep a pass within ~0.5 ms of the storm's work for the established clients. nats-server
# has no such limit (a goroutine per connection, on every core, scheduled preemptively).
UNVERIFIED_WORK_PER_PASS = 4


class Admission:
    """The server's admission of unverified work. ``await wait()`` before a unit; ``run`` is
    the admitter task (Server.run starts it)."""

    def __init__(self, per_pass: int = UNVERIFIED_WORK_PER_PASS) -> None:
        if per_pass < 1:
            raise ValueError("per_pass must be at least 1")
        self.per_pass = per_pass
        self.budget = per_pass  # units that may still go at once before the admitter's next turn
        self._queue = trio.lowlevel.ParkingLot()  # units waiting, in arrival order
        self._idle = trio.lowlevel.ParkingLot()  # the admitter, while nobody waits
        # Counters (monitoring, tests): units that went at once, and units that waited.
        self.direct = 0
        self.queued = 0

    @property
    def waiting(self) -> int:
        """Units waiting for their pass."""
        return len(self._queue)

    async def wait(self) -> None:
        """Return when this unit may run: at once while the budget lasts and nobody waits
        (not a checkpoint then), else in a later pass, in arrival order."""
        if self.budget > 0 and not self._queue:
            self.budget -= 1
            self.direct += 1
            return
        self.queued += 1
        self._idle.unpark()
        await self._queue.park()

    async def run(self) -> None:
        """Every pass while units come: let up to ``per_pass`` waiting units go (they run in
        the next pass) and leave the rest of ``per_pass`` to units that come before this task's
        next turn, so that between two of its turns at most ``per_pass`` units run. After a
        whole pass without units it sleeps, its budget full, until a unit has to wait."""
        queue = self._queue
        while True:
            if not queue and self.budget == self.per_pass:
                await self._idle.park()  # resumes in the pass after the one a unit queued in
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()  # the next pass
            per_pass = self.per_pass
            self.budget = per_pass - len(queue.unpark(count=per_pass))
