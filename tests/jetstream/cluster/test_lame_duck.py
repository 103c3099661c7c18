"""Lame duck mode in a JetStream cluster of three in-process natservers (issue #32; server.go
lameDuckMode, raft.go transferRaftLeaders): the meta leader's server entering lame duck hands
the meta group's leadership to another server while it still runs, and never leads again
(its node turns observer). Real clocks, bounded polls, a hard timeout."""

from __future__ import annotations

from tests.jetstream.cluster.test_cluster import api, connect, jsz_all, meta_leader, run, until

LAME_DUCK_DURATION = 30.0  # seconds: long enough that the server still runs when we look
GRACE = 20.0


def test_the_meta_leader_hands_over_when_its_server_enters_lame_duck(cluster):
    async def main():
        others = []
        sys_nc = None
        try:
            first = await connect(cluster.urls[0], "sys")
            leader = await until(lambda: meta_leader(first), "a meta leader every server agrees on")
            await first.close()
            index = [s.options.server_name for s in cluster.servers].index(leader)
            # Watch through another server (the lame duck's clients are closed in the end).
            watcher = (index + 1) % 3
            sys_nc = await connect(cluster.urls[watcher], "sys")
            app_nc = await connect(cluster.urls[watcher])
            others = [sys_nc, app_nc]
            cluster.lame_duck(index, duration=LAME_DUCK_DURATION, grace_period=GRACE)

            async def handed_over():
                views = await jsz_all(sys_nc)
                leaders = {data.get("meta_cluster", {}).get("leader") for data in views.values()}
                new = leaders.pop() if len(leaders) == 1 else None
                return new if new not in (None, leader) else None

            new_leader = await until(handed_over, "the meta leadership handed over")
            assert cluster.servers[index].running  # (still in lame duck, not stopped)
            assert new_leader != leader
            # The cluster goes on: a stream is created by the new meta leader.
            created = await api(app_nc, "$JS.API.STREAM.CREATE.AFTER", {"name": "AFTER", "subjects": ["after"]})
            assert "error" not in created and created["cluster"]["leader"] != leader, created
        finally:
            for nc in others:
                await nc.close()

    run(main)
