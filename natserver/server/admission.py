"""How much of the server's time goes to connections that have not sent a CONNECT yet.

Every client is served by one thread, in trio's passes: a pass runs every task that is ready,
so a client whose request just arrived waits for everything else that is ready in the same
pass. Under a reconnect storm (issue 34: 50 connections sending malformed protocol and
reconnecting as fast as they are cut) each pass carried every fuzzing connection's accept,
INFO, error, log line and close, and a healthy client's request waited for all of them: p50
8-12 ms where nats-server, which spreads the same work over its threads, answers in 1-2 ms.

So such work is admitted in units: one accepted connection (its INFO), or one read of a
connection that has not sent a valid CONNECT yet (Client._read_loop). While nobody waits, a
unit goes at once from a budget of ``per_pass``. The unit that finds the budget spent waits,
and wakes the admitter task, which then lets the waiting units go in arrival order,
``per_pass`` a turn: the pass they run in is measured, and the admitter rests after it so
that turns and rests keep those passes to ``share`` of the time. Established clients are
never held: in a pass they wait for at most ``per_pass`` units of the others, and a storm
cannot keep the one thread busy all the time. That last part matters as much as the first on
a shared machine: a process that is always ready to run loses the CPU to the others for
whole time slices, and the healthy client's request waits for its next one. bench_hostile's
fuzz scenario on this 2-core machine, the servers interleaved, medians of 3 rounds, p50/p99:
at load 7-15, 27/96 ms before, 27/113 ms with units a pass alone, 16/81 ms with rests (then
measured on the wall clock; nats-server 2/117); at load 8-11, 24/69 ms before, 12/44 ms now
(nats-server 3/30). Nothing is refused or answered differently, only later: the
connections in the storm get exactly nats-server's answers.

Admission is engaged only under a storm of connections that end without a valid CONNECT
(HOSTILE_CLOSES of them within HOSTILE_WINDOW; it stays engaged ENGAGED_FOR after the last such
window): a storm of legitimate connects (clients coming back after a restart) sends CONNECTs and
is served at full speed, as before admission existed (issue 33's connects/s).

When nothing waits, admission costs a counter decrement (no checkpoint); the admitter sleeps
once the queue is empty, so an idle server has no task to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

__all__ = ["Admission", "ENGAGED_FOR", "HOSTILE_CLOSES", "HOSTILE_WINDOW", "MAX_REST_PER_TURN", "UNVERIFIED_SHARE",
           "UNVERIFIED_WORK_PER_PASS"]

# Units (accepts, reads before CONNECT) admitted a pass. natserver's own figure: such a unit
# costs 50-150 us of CPU (accept and INFO; read, -ERR, parser ERROR line and close), so 4 of
# them keep a pass within ~0.5 ms of the storm's work for the established clients. nats-server
# has no such limit (a goroutine per connection, on every core, scheduled preemptively).
UNVERIFIED_WORK_PER_PASS = 4
# The part of the time the passes that run waiting units may take while units wait (the rest
# the admitter sleeps). natserver's own figure: half leaves the thread idle half the time under
# a storm, so that it is not always ready to run (see above). Only while admission is engaged
# (a storm of connections closed before CONNECT): legitimate connects never engage it.
UNVERIFIED_SHARE = 0.5
# The shortest rest: epoll waits in milliseconds (Python rounds a shorter timeout up), so the
# rests owed are summed until they come to this, and what a rest oversleeps is paid back.
MIN_REST = 0.001
# What engages admission: this many connections closed before a valid CONNECT (protocol
# errors, authorization failures, sockets that leave) within HOSTILE_WINDOW seconds.
# natserver's own figures: the fuzz scenario closes 150-500 such connections a second; a
# health check probing the port every second, or a few clients failing to log in, stay far
# below; a connect storm of well-behaved clients closes none.
HOSTILE_CLOSES = 64
HOSTILE_WINDOW = 1.0
# Seconds admission stays engaged after the last window that engaged it (a fuzzer's pauses
# between bursts do not let it through at full speed each time).
ENGAGED_FOR = 2.0
# The most one turn can add to the rest owed. A turn is measured over whole passes, which
# also carry the established clients' work (a 1 MiB payload parsed in pure Python, tens of
# ms): uncapped, such a pass made the admitter rest as long, and connections waited in the
# backlog for seconds (CI's pure-Python conformance run). A storm's turn costs ~0.5 ms.
MAX_REST_PER_TURN = 0.010


class Admission:
    """The server's admission of unverified work. ``await wait()`` before a unit; ``run`` is
    the admitter task (Server.run starts it)."""

    def __init__(self, per_pass: int = UNVERIFIED_WORK_PER_PASS, share: float = UNVERIFIED_SHARE,
                 cpu_time: Callable[[], float] = time.thread_time, engaged: bool = False) -> None:
        if per_pass < 1:
            raise ValueError("per_pass must be at least 1")
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.per_pass = per_pass
        self.share = share
        # The thread's CPU time: what the turns are measured in (not the wall clock, which on a
        # loaded machine counts the time slices other processes took as the storm's work).
        self._cpu_time = cpu_time
        self.budget = per_pass  # units that may go at once (0 while the admitter is busy)
        self._queue = trio.lowlevel.ParkingLot()  # units waiting, in arrival order
        self._idle = trio.lowlevel.ParkingLot()  # the admitter, while nobody waits
        # Counters (monitoring, tests): units that went at once, units that waited, and the
        # seconds the admitter rested.
        self.direct = 0
        self.queued = 0
        self.rested = 0.0
        # Until when admission holds units (trio's clock); always with ``engaged`` (tests).
        self.engaged_until = float("inf") if engaged else float("-inf")
        self._window_start = float("-inf")
        self._window_closes = 0
        self.engagements = 0  # times a window of closes engaged it (monitoring, tests)

    @property
    def engaged(self) -> bool:
        return trio.current_time() < self.engaged_until

    def note_unverified_close(self) -> None:
        """A connection closed before a valid CONNECT (Client.close): HOSTILE_CLOSES of them
        within HOSTILE_WINDOW engage admission for ENGAGED_FOR."""
        now = trio.current_time()
        if now - self._window_start >= HOSTILE_WINDOW:
            self._window_start = now
            self._window_closes = 0
        self._window_closes += 1
        if self._window_closes >= HOSTILE_CLOSES:
            if now >= self.engaged_until:
                self.engagements += 1
            self.engaged_until = max(self.engaged_until, now + ENGAGED_FOR)

    @property
    def waiting(self) -> int:
        """Units waiting for their turn."""
        return len(self._queue)

    async def wait(self) -> None:
        """Return when this unit may run: at once while the budget lasts and nobody waits
        (not a checkpoint then), else in a later pass, in arrival order."""
        if not self._queue:
            if self.budget > 0:
                self.budget -= 1
                self.direct += 1
                return
            if trio.current_time() >= self.engaged_until:  # no storm: nothing is held
                self.direct += 1
                return
        self.queued += 1
        self._idle.unpark()
        await self._queue.park()

    async def run(self) -> None:
        """While units wait: let ``per_pass`` go, wait for the pass they run in to end, and
        rest (once the rests owed come to MIN_REST) so that such passes take ``share`` of the
        time (their CPU time against the wall clock's rests). Once none waits, the budget is full again and the admitter sleeps until a unit
        finds it spent."""
        queue = self._queue
        checkpoint = trio.lowlevel.cancel_shielded_checkpoint
        cpu_time = self._cpu_time
        while True:
            if not queue:
                await self._idle.park()  # resumes in the pass after the one a unit queued in
            self.budget = 0
            owed = 0.0  # rest owed for the turns since the last rest (less what it overslept)
            while queue:
                started = cpu_time()
                queue.unpark(count=self.per_pass)
                await checkpoint()  # the pass they run in (this task anywhere in it)
                await checkpoint()  # so the next: that pass is over
                owed += min((cpu_time() - started) * (1 - self.share) / self.share, MAX_REST_PER_TURN)
                if owed >= MIN_REST:
                    slept = trio.current_time()
                    await trio.sleep(owed)
                    slept = trio.current_time() - slept
                    self.rested += slept
                    owed -= slept
            self.budget = self.per_pass
