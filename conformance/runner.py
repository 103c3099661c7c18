"""Run many cases concurrently, each on its own server instance.

Cases must not share a server while they run (a ``SUB >`` in one case would see another
case's messages), so every config gets up to ``jobs`` *slots*; a slot is one target server
and (in live mode) one reference server, used by one case at a time.  Servers are started
lazily in threads and reused for the whole session.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import trio

from . import harness

DEFAULT_JOBS = int(os.environ.get("CONFORMANCE_JOBS", "4"))


@dataclasses.dataclass
class Outcome:
    case: harness.Case
    expected: dict | None = None  # transcript the target is compared with
    got: harness.RunResult | None = None  # target's run
    reference_runs: list = dataclasses.field(default_factory=list)  # live nats-server runs
    recorded: dict | None = None  # transcript from expected/, if present and current
    recording_stale: bool = False
    skip: str | None = None
    error: str | None = None

    @property
    def diff(self) -> str:
        if self.expected is None or self.got is None:
            return ""
        return harness.diff_transcripts(self.expected, self.got.transcript)


class _Servers:
    def __init__(self, pool: harness.ServerPool) -> None:
        self.pool = pool
        self._locks: dict[tuple, trio.Lock] = {}

    async def get(self, kind: str, config: tuple, role: str) -> harness.ServerProcess:
        key = (kind, config, role)
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            return await trio.to_thread.run_sync(self.pool.get, kind, config, role)


async def run_many(
    cases: list[harness.Case],
    *,
    target: str | None,
    reference: str,
    pool: harness.ServerPool,
    jobs: int = DEFAULT_JOBS,
    repeat: int = 1,
) -> dict[str, Outcome]:
    """Run ``cases``.

    ``target``: ``"natserver"``, ``"nats-server"`` or ``None`` (only the reference runs: record
    mode).  ``reference``: ``"live"`` (nats-server runs next to the target, ``repeat`` times)
    or ``"recorded"`` (compare with ``expected/``).
    """
    servers = _Servers(pool)
    outcomes: dict[str, Outcome] = {}
    limiter = trio.CapacityLimiter(max(1, jobs))
    per_config = Counter(c.config for c in cases)
    slots: dict[tuple, tuple[trio.MemorySendChannel, trio.MemoryReceiveChannel]] = {}
    for config, count in per_config.items():
        n = max(1, min(jobs, count))
        send, recv = trio.open_memory_channel(n)
        for i in range(n):
            send.send_nowait(i)
        slots[config] = (send, recv)

    async def one(case: harness.Case) -> None:
        out = Outcome(case)
        outcomes[case.name] = out
        if harness.expected_path(case).exists():
            recorded, meta = harness.load_expected(case)
            if meta.get("digest") == case.digest():
                out.recorded = recorded
            else:
                out.recording_stale = True
        if reference == "recorded" and target is not None and out.recorded is None:
            out.skip = (
                f"recording for {case.name} is stale (case changed)" if out.recording_stale else f"no recording for {case.name}"
            ) + ": run `python -m conformance record` where nats-server is installed"
            return
        async with limiter:
            send, recv = slots[case.config]
            slot = await recv.receive()
            try:
                await _run_in_slot(out, case, slot, servers, target, reference, repeat)
            finally:
                send.send_nowait(slot)

    async with trio.open_nursery() as nursery:
        for case in cases:
            nursery.start_soon(one, case)
    return outcomes


async def _run_in_slot(out, case, slot, servers, target, reference, repeat) -> None:
    try:
        target_server = await servers.get(target, case.config, f"target{slot}") if target else None
    except harness.ServerStartError as exc:
        if target == "natserver" and case.config and exc.exited:
            out.skip = (
                "natserver refused to start with this config file (-c); the case needs:\n"
                f"{harness.render_config(case.config)}{exc}"
            )
        else:
            out.error = str(exc)
        return
    ref_server = None
    if reference == "live":
        try:
            ref_server = await servers.get("nats-server", case.config, f"reference{slot}")
        except harness.ServerStartError as exc:
            out.error = f"reference nats-server: {exc}"
            return

    results: dict[str, harness.RunResult] = {}

    async def run(key: str, server: harness.ServerProcess) -> None:
        try:
            results[key] = await harness.run_case(case, server.host, server.port)
        except trio.TooSlowError:
            out.error = f"{key}: case exceeded {harness.CASE_TIMEOUT}s"

    # The target runs alongside the first reference run; further reference runs (record
    # mode determinism check) run alone.
    for i in range(max(1, repeat) if ref_server else 1):
        async with trio.open_nursery() as nursery:
            if ref_server is not None:
                nursery.start_soon(run, f"ref{i}", ref_server)
            if i == 0 and target_server is not None:
                nursery.start_soon(run, "got", target_server)
        if out.error:
            return
        if ref_server is not None:
            out.reference_runs.append(results[f"ref{i}"])

    if target_server is None:
        return
    out.got = results["got"]
    out.expected = out.reference_runs[0].transcript if ref_server is not None else out.recorded
