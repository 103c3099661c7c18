"""Admission of the work of connections that have not sent a CONNECT yet (server/admission.py):
a few units a scheduler pass, in arrival order, established clients never held; and a
storm of malformed connections still gets nats-server's answers.

Passes are counted with a trio instrument (``after_io_wait`` runs once a pass), never timed.
"""

from __future__ import annotations

import socket

import pytest
import trio

from natserver.server import admission as admission_module
from natserver.server.admission import (
    ENGAGED_FOR,
    HOSTILE_CLOSES,
    HOSTILE_WINDOW,
    MAX_REST_PER_TURN,
    UNVERIFIED_SHARE,
    UNVERIFIED_WORK_PER_PASS,
    Admission,
)

TIMEOUT = 20.0


class PassCounter(trio.abc.Instrument):
    """Counts trio's scheduler passes (each starts after an I/O wait)."""

    def __init__(self) -> None:
        self.passes = 0

    def after_io_wait(self, timeout: float) -> None:
        self.passes += 1


@pytest.fixture
async def passes():
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    yield counter
    trio.lowlevel.remove_instrument(counter)


def _per_pass(record: list[tuple[int, int]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for seen, _ in record:
        counts[seen] = counts.get(seen, 0) + 1
    return counts


async def test_units_past_the_budget_go_a_few_a_pass_in_arrival_order(passes):
    admission = Admission(per_pass=3, engaged=True)
    arrived: list[int] = []
    admitted: list[tuple[int, int]] = []  # (pass, unit)

    async def unit(i: int) -> None:
        arrived.append(i)
        await admission.wait()
        admitted.append((passes.passes, i))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admission.run)
            async with trio.open_nursery() as units:
                for i in range(20):
                    units.start_soon(unit, i)
            assert admission.waiting == 0
            nursery.cancel_scope.cancel()
    assert sorted(i for _, i in admitted) == list(range(20))
    # The budget's units went at once, in the pass they arrived in; the others in arrival
    # order, pass after pass (trio may run one pass's tasks in either order).
    pass_of = {i: seen for seen, i in admitted}
    order = [pass_of[i] for i in arrived]
    assert order == sorted(order)
    assert order[:3] == [order[0]] * 3 and order[3] > order[0]
    assert admission.direct == 3 and admission.queued == 17
    per_pass = _per_pass(admitted)
    assert max(per_pass.values()) == 3
    # The budget's pass, then 3 a pass (2 left at the end): 7 passes at least (trio's order
    # within a pass can put a turn's units into two).
    assert len(per_pass) >= 1 + 17 // 3 + 1


async def test_the_budget_starts_again_once_the_queue_is_empty(passes):
    admission = Admission(per_pass=2, engaged=True)
    admitted: list[tuple[int, int]] = []

    async def unit(i: int) -> None:
        await admission.wait()
        admitted.append((passes.passes, i))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admission.run)
            for wave in range(3):
                async with trio.open_nursery() as units:
                    for i in range(5):
                        units.start_soon(unit, wave * 5 + i)
                while admission.budget != 2:  # the admitter's last rest, then it sleeps
                    await trio.sleep(0)
                assert admission.waiting == 0
            nursery.cancel_scope.cancel()
    assert len(admitted) == 15
    assert admission.direct == 3 * 2 and admission.queued == 3 * 3
    # At most per_pass a pass, but in the pass where the queue empties and the budget starts
    # again (the admitter's own figure: 2 * per_pass).
    assert max(_per_pass(admitted).values()) <= 2 * 2


async def test_a_cancelled_unit_leaves_the_queue(passes):
    admission = Admission(per_pass=1, engaged=True)
    admitted: list[int] = []

    async def unit(i: int, scope_out: list) -> None:
        with trio.CancelScope() as scope:
            scope_out.append(scope)
            await admission.wait()
            admitted.append(i)

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as waiting:
                scopes: list = []
                for i in range(4):
                    waiting.start_soon(unit, i, scopes)
                    await trio.testing.wait_all_tasks_blocked()  # (arriving in this order)
                # No admitter yet: 0 went, 1-3 wait.
                assert admitted == [0] and admission.waiting == 3
                scopes[2].cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert admission.waiting == 2
                nursery.start_soon(admission.run)
            nursery.cancel_scope.cancel()
    assert admitted == [0, 1, 3]


async def test_the_passes_of_waiting_units_take_their_share_of_the_time(autojump_clock, passes):
    """Each unit "works" 1 ms (the mock clock jumps): with a share of 1/4 the admitter rests
    3 ms for every turn's 2 units, once the rest owed comes to MIN_REST, and the units that
    waited are served 2 per 8 ms, while the budget's first 2 went at once."""
    admission = Admission(per_pass=2, share=0.25, cpu_time=trio.current_time, engaged=True)  # (work: the jumps)
    admitted_at: list[float] = []

    async def unit() -> None:
        await admission.wait()
        admitted_at.append(trio.current_time())
        autojump_clock.jump(0.001)  # its work

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admission.run)
            async with trio.open_nursery() as units:
                for _ in range(12):
                    units.start_soon(unit)
            await trio.sleep(1)  # (mock time) past its last rest
            assert admission.budget == 2  # it sleeps: the rests are over
            nursery.cancel_scope.cancel()
    assert admission.direct == 2 and admission.queued == 10
    start = admitted_at[0]
    ms = [round((t - start) * 1000, 6) for t in admitted_at]
    # The budget's pair at 0 and 1 ms (each unit works 1 ms); the first queued unit at once
    # (nothing owed yet); after each turn's 2 ms of work, 6 ms of rest: 2 of every 8 ms, as
    # [0, 1, 2, 3, 10, 11, 18, 19, 26, 27, 34, 35] (trio's order within a pass can move a
    # turn's second unit into the next turn: [..., 2, 6, 7, 14, 15, ...], the same rests).
    assert ms[:3] == [0.0, 1.0, 2.0]
    assert admission.rested == pytest.approx(5 * 0.006)
    assert ms[-1] >= 35.0  # 12 ms of work and 30 ms of rests, less the budget's 2 and a turn
    assert all(ms[i + 2] - ms[i] >= 2.0 for i in range(len(ms) - 2))  # never 3 a turn


def test_per_pass_and_share_must_make_sense():
    with pytest.raises(ValueError):
        Admission(per_pass=0)
    for share in (0, -0.5, 1.5):
        with pytest.raises(ValueError):
            Admission(share=share)
    assert UNVERIFIED_WORK_PER_PASS >= 1 and 0 < UNVERIFIED_SHARE <= 1


async def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            return data + b"<reset>"
        if not chunk:
            return data
        data += chunk


async def test_a_storm_of_malformed_connections_waits_while_an_established_client_is_served(server, passes):
    """50 connections send an unknown op before any CONNECT: their accepts and reads are
    admitted one a pass (per_pass 1 here; the accepts wait in the listen backlog), an
    established client's PING is answered while most of them still wait, and each of them
    gets nats-server's -ERR and close."""
    admission = server.admission
    admission.per_pass = 1
    admission.engaged_until = float("inf")  # (the storm below is too short to engage it alone)
    units: list[tuple[int, int]] = []
    wait = admission.wait

    async def counted() -> None:
        await wait()
        units.append((passes.passes, 0))

    admission.wait = counted  # type: ignore[method-assign]
    n = 50
    with trio.fail_after(TIMEOUT):
        healthy = await trio.open_tcp_stream("127.0.0.1", server.port)
        await healthy.send_all(b'CONNECT {"verbose":false}\r\nPING\r\n')
        got = b""
        while b"PONG\r\n" not in got:
            got += await healthy.receive_some(4096)
        admission.budget = 0  # (the healthy client's accept and CONNECT took the budget's units)
        socks = []
        for _ in range(n):  # (loopback: connected in the listen backlog at once, no pass)
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
            sock.sendall(b"FOO BAR\r\n")
            sock.setblocking(False)
            socks.append(sock)
        while len(units) < 10:  # the storm is under way: its units go one a pass
            await trio.sleep(0)
        await healthy.send_all(b"PING\r\n")
        got = b""
        while b"PONG\r\n" not in got:
            got += await healthy.receive_some(4096)
        # The established client's reads are no units, and did not wait for the storm's.
        assert len(units) < n, "the established client waited for the storm"
        answers = []
        async with trio.open_nursery() as nursery:
            async def collect(sock: socket.socket) -> None:
                answers.append(await _read_all(sock))

            for sock in socks:
                nursery.start_soon(collect, sock)
        for sock in socks:
            sock.close()
        await healthy.aclose()
    assert len(answers) == n
    for answer in answers:
        assert answer.startswith(b"INFO ")
        assert answer.endswith(b"\r\n-ERR 'Unknown Protocol Operation'\r\n")
    # Every connection's accept and its read were units (the healthy client's too), one a pass
    # (two in the pass the queue emptied in).
    assert len(units) >= 2 * n + 2
    assert max(_per_pass(units).values()) <= 2


async def test_not_engaged_nothing_waits(passes):
    """Without a storm of connections closed before CONNECT, units past the budget go at once
    (a connect storm of well-behaved clients is served at full speed)."""
    admission = Admission(per_pass=2)
    with trio.fail_after(TIMEOUT):
        for _ in range(50):
            await admission.wait()
    assert admission.queued == 0 and admission.direct == 50 and not admission.engaged


async def test_a_window_of_unverified_closes_engages_it_for_a_while(autojump_clock):
    admission = Admission(per_pass=1)
    for _ in range(HOSTILE_CLOSES - 1):
        admission.note_unverified_close()
    assert not admission.engaged
    await trio.sleep(HOSTILE_WINDOW)  # a new window: the count starts again
    for _ in range(HOSTILE_CLOSES - 1):
        admission.note_unverified_close()
    assert not admission.engaged
    admission.note_unverified_close()
    assert admission.engaged and admission.engagements == 1
    await admission.wait()  # the budget's unit
    async with trio.open_nursery() as nursery:
        nursery.start_soon(admission.run)
        with trio.fail_after(TIMEOUT):
            await admission.wait()  # engaged: this one queued for the admitter
        assert admission.queued == 1
        await trio.sleep(ENGAGED_FOR)
        assert not admission.engaged
        nursery.cancel_scope.cancel()


async def test_malformed_connections_engage_it_and_well_behaved_ones_do_not(server, monkeypatch):
    """On a server: a storm of clients that CONNECT and leave does not engage admission; as
    many connections cut for an unknown op before CONNECT do."""
    monkeypatch.setattr(admission_module, "HOSTILE_WINDOW", 3600.0)  # a loaded machine's pace
    admission = server.admission
    with trio.fail_after(TIMEOUT):
        for _ in range(2 * HOSTILE_CLOSES):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(b'CONNECT {"verbose":false}\r\nPING\r\n')
            got = b""
            while b"PONG\r\n" not in got:
                got += await stream.receive_some(4096)
            await stream.aclose()
        assert not admission.engaged and admission.queued == 0
        for _ in range(HOSTILE_CLOSES):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
            sock.sendall(b"FOO BAR\r\n")
            sock.setblocking(False)
            assert (await _read_all(sock)).endswith(b"-ERR 'Unknown Protocol Operation'\r\n")
            sock.close()
        while not admission.engaged:  # the last close is counted after its -ERR was written
            await trio.sleep(0.01)
    assert admission.engagements == 1


async def test_a_long_pass_adds_at_most_max_rest_per_turn(autojump_clock):
    """A turn's passes also carry other clients' work: a long one (50 ms here) owes at most
    MAX_REST_PER_TURN of rest, not three times its length (share 1/4)."""
    admission = Admission(per_pass=1, share=0.25, cpu_time=trio.current_time, engaged=True)

    async def unit() -> None:
        await admission.wait()
        autojump_clock.jump(0.050)  # (the pass's work)

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admission.run)
            async with trio.open_nursery() as units:
                for _ in range(4):
                    units.start_soon(unit)
            nursery.cancel_scope.cancel()
    assert admission.queued == 3
    assert 0 < admission.rested <= 3 * MAX_REST_PER_TURN + 1e-6
