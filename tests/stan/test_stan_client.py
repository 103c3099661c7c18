"""natserver.stan.client, natserver's STAN client on nats-py (issue 30 item 19): the README's
example run as the README says, and the client's features against natserver --stan."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from natserver.stan import StanOptions
from natserver.stan.client import StanError, connect

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 20.0


def _readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("### STAN clients on today's Pythons", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_as_written(threaded_server, tmp_path):
    handle = threaded_server(stan=StanOptions())
    code = _readme_example()
    assert 'nats.connect("nats://127.0.0.1:4222")' in code
    script = tmp_path / "example.py"
    script.write_text(code.replace("nats://127.0.0.1:4222", handle.url))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=DEADLINE, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, b'order 1')"
    # the durable the example closed is still there
    channel = handle.server.stan.channels["orders"]
    assert [s.durable_name for s in channel.durables.values()] == ["audit"]


def test_the_readme_install_words_match_the_package():
    readme = (REPO / "README.md").read_text()
    assert "`pip install -e '.[stan]'`" in readme
    stan_extra = re.search(r"^stan = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.M)
    assert stan_extra is not None and '"nats-py' in stan_extra.group(1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


def test_queue_groups_manual_acks_redelivery_and_errors(threaded_server):
    handle = threaded_server(stan=StanOptions())

    async def main():
        nc = await nats.connect(handle.url)
        sc = await connect(nc, "test-cluster", "c1")
        for i in range(4):
            await sc.publish("jobs", b"j%d" % i)
        pending = [sc.publish_async("jobs", b"async") for _ in range(3)]
        assert len(set(await asyncio.gather(*pending))) == 3  # three guids

        # a queue group of two members shares the messages
        seen: list = []

        async def member(msg):
            seen.append(msg.seq)

        a = await sc.subscribe("jobs", member, queue="workers", start="first")
        b = await sc.subscribe("jobs", member, queue="workers", start="first")
        while len(seen) < 7:
            await asyncio.sleep(0.01)
        assert sorted(seen) == list(range(1, 8))
        await a.unsubscribe()
        await b.unsubscribe()

        # manual acks: an unacknowledged message comes again, flagged, after ackWait (1 s)
        got: asyncio.Queue = asyncio.Queue()

        async def slow(msg):
            await got.put(msg)

        sub = await sc.subscribe("jobs", slow, start="sequence", start_sequence=7, manual_acks=True, ack_wait=1,
                                 max_inflight=1)
        first = await got.get()
        assert (first.seq, first.data, first.redelivered) == (7, b"async", False)
        again = await got.get()
        assert (again.seq, again.redelivered) == (7, True)
        await sc.ack(again)
        await sub.unsubscribe()

        # the server's refusals carry its texts
        await sc.subscribe("d", slow, durable_name="dur")
        with pytest.raises(StanError, match="stan: duplicate durable registration"):
            await sc.subscribe("d", slow, durable_name="dur")
        with pytest.raises(StanError, match="stan: invalid subject"):
            await sc.subscribe("bad.*", slow)
        with pytest.raises(StanError, match="stan: clientID already registered"):
            await connect(nc, "test-cluster", "c1")
        with pytest.raises(StanError, match="stan: connect request timeout"):
            await connect(nc, "no-such-cluster", "c2", connect_wait=0.2)
        await sc.close()
        with pytest.raises(StanError, match="stan: connection closed"):
            await sc.publish("jobs", b"late")
        await nc.close()

    run(main())


def test_subscribe_times_out_once_the_server_stops_taking_work(threaded_server):
    """stan.go's timeout text, as node-nats-streaming's 'subscribe emits timeout' expects."""
    handle = threaded_server(stan=StanOptions())

    async def main():
        nc = await nats.connect(handle.url)
        sc = await connect(nc, "test-cluster", "c1", connect_wait=0.3)
        handle.server.stan.stop_taking_work()
        with pytest.raises(StanError, match="stan: subscribe request timeout"):
            await sc.subscribe("x", lambda msg: asyncio.sleep(0))
        await nc.close()

    run(main())
