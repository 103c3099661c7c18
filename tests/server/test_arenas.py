"""natserver/server/_arenas.c: the pages of CPython's empty small-object pools given back after
a storm (issue 34, "memory given back"), without harm to what the allocator does next.

The allocations here are this test process's own: many small objects are made (new arenas, which
the module lists) and freed but a few (each pins its arena, as a storm's survivors do), then
the empty pools are released and the process's RSS read from /proc.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading

import pytest

from natserver.server import reclaim

arenas = None if reclaim.release_empty_pools is None else importlib.import_module("natserver.server._arenas")
pytestmark = [
    pytest.mark.skipif(arenas is None, reason="natserver/server/_arenas.c is not built"),
    pytest.mark.skipif(sys.platform != "linux", reason="madvise, /proc/self/statm"),
]

OBJECTS = 300_000  # small dicts and strs: ~80 arenas of 1 MiB
SURVIVOR_EVERY = 3_000  # one object in so many lives on: most arenas stay pinned


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _storm() -> list:
    """Make OBJECTS small objects and free them but a few survivors, spread over their arenas."""
    made = [{"cid": i, "name": f"client-{i}"} for i in range(OBJECTS)]
    survivors = made[::SURVIVOR_EVERY]
    del made
    gc.collect()
    return survivors


def test_empty_pools_are_given_back_and_reused():
    installed, enabled, _, _ = arenas.state()
    assert installed and enabled
    arenas.release_empty_pools()  # (what the tests before this one left)
    survivors = _storm()
    listed = arenas.state()[2]
    assert listed >= 20  # the storm's arenas are listed, and pinned by the survivors
    before = _rss_mb()
    pools, released = arenas.release_empty_pools()
    after = _rss_mb()
    assert pools > 1000 and released == pools * (16384 - 4096)
    assert before - after >= 0.5 * released / 2**20, (before, after, released)
    assert arenas.release_empty_pools() == (0, 0)  # released ones are not counted again
    # The allocator takes the released pools again, set up afresh: the same storm needs no
    # more arenas than the first did (a pool reused with a free list whose links were in the
    # dropped pages would give out a block or two, and many more arenas would be needed).
    again = _storm()
    assert arenas.state()[2] <= listed + 2
    assert [d["name"] for d in survivors] == [f"client-{i}" for i in range(0, OBJECTS, SURVIVOR_EVERY)]
    assert [d["cid"] for d in again] == list(range(0, OBJECTS, SURVIVOR_EVERY))
    del survivors, again
    gc.collect()


def test_objects_made_in_released_pools_are_intact():
    """Round after round of storms and releases, with every object checked: the zeroed pages a
    pool gets back hold nothing the allocator relies on."""
    kept: list = []
    for round_ in range(6):
        made = [(round_, i, str(i) * (i % 7), [i] * (i % 5)) for i in range(50_000)]
        kept.extend(made[::97])
        del made
        gc.collect()
        arenas.release_empty_pools()
        for r, i, text, items in kept:
            assert text == str(i) * (i % 7) and items == [i] * (i % 5) and 0 <= r <= round_
    kept.clear()
    gc.collect()
    assert arenas.state()[1]  # (the release was never turned off by a pool of an unknown shape)


def test_threads_frame_stacks_are_not_taken_for_arenas():
    """CPython gives each thread's frame stack chunks (16 KiB and up) from the arena allocator
    too: they are not listed, and a release after threads have run still works (the server's
    heap trim runs in a worker thread: before, the first thread turned the release off)."""
    done = threading.Event()

    def deep(n: int) -> int:
        if n == 0:
            done.wait(30)  # (alive, with its frame stack's chunks, while the release runs)
            return 0
        return deep(n - 1) + 1

    threads = [threading.Thread(target=deep, args=(400,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        survivors = _storm()
        pools, _ = arenas.release_empty_pools()
        assert pools > 1000 and arenas.state()[1]
        assert arenas.state()[3] == 0  # (nothing arena-sized that was not an arena)
        assert len(survivors) == OBJECTS // SURVIVOR_EVERY
    finally:
        done.set()
        for thread in threads:
            thread.join()


def test_the_allocators_own_walk_accepts_released_pools(capfd):
    """CPython's debug statistics walk every pool of every arena and assert their shape in a
    debug build; here they must at least run and count the released pools as free."""
    survivors = _storm()
    arenas.release_empty_pools()
    sys._debugmallocstats()
    stats = capfd.readouterr().err
    assert "# arenas allocated current" in stats and "unused pools" in stats
    assert len(survivors) == OBJECTS // SURVIVOR_EVERY
