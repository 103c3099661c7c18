"""Account imports in a cluster deliver once, as nats-server's do: two routed servers with
accounts A and B, B importing a stream and a service of A's. nats-server makes shadow
subscriptions in A only where B's subscribers are, and never tells routes of a service
import's subscription; natserver's import on every server republishes into B, so the
republished copy stays on its server (routes carry the original, in A) and a service import's
subscription is not route interest. Checked all-natserver and beside nats-server 2.15.1 (each
way); the all-2.15.1 cluster must give the same counts."""

from __future__ import annotations

import asyncio
import contextlib

import nats
import pytest

from tests import reference
from tests.auth.test_auth_helpers import free_port, running

TIMEOUT = 30
MESSAGES = 20
CONFIG = """
server_name: S%(name)s
accounts {
  A { users [{user: a, password: a}], exports [ {stream: "feed.>"}, {service: "svc.>"} ] }
  B { users [{user: b, password: b}],
      imports [ {stream: {account: A, subject: "feed.>"}}, {service: {account: A, subject: "svc.>"}} ] }
}
cluster { name: c1, listen: "127.0.0.1:%(cluster)d", routes: ["nats-route://127.0.0.1:%(peer)d"] }
"""

KINDS = [("natserver", "natserver")]
if reference.NATS_SERVER:
    KINDS += [("natserver", "nats-server"), ("nats-server", "natserver"), ("nats-server", "nats-server")]


async def _script(ports: dict) -> dict:
    pub_a = await nats.connect(f"nats://a:a@127.0.0.1:{ports['1']}", allow_reconnect=False)
    responder = await nats.connect(f"nats://a:a@127.0.0.1:{ports['1']}", allow_reconnect=False)
    sub_b1 = await nats.connect(f"nats://b:b@127.0.0.1:{ports['1']}", allow_reconnect=False)
    sub_b2 = await nats.connect(f"nats://b:b@127.0.0.1:{ports['2']}", allow_reconnect=False)
    try:
        got = {"B on 1": [], "B on 2": [], "requests": []}

        async def on_request(msg):
            got["requests"].append(msg.data)
            await msg.respond(b"re " + msg.data)

        await responder.subscribe("svc.x", cb=on_request)
        def collect(key: str):
            async def on_msg(msg):
                got[key].append(msg.data)
            return on_msg

        await sub_b1.subscribe("feed.x", cb=collect("B on 1"))
        await sub_b2.subscribe("feed.x", cb=collect("B on 2"))
        # Until B's subscriber on server 2 gets what A publishes on server 1 (interest came through).
        for _ in range(400):
            await pub_a.publish("feed.x", b"ping")
            await pub_a.flush()
            await asyncio.sleep(0.02)
            if got["B on 2"]:
                break
        else:
            raise AssertionError("the import's messages never reached server 2")
        for _ in range(40):  # a requester in B on server 2 reaches A's responder on server 1
            with contextlib.suppress(nats.errors.NoRespondersError, nats.errors.TimeoutError):
                await sub_b2.request("svc.x", b"warm", timeout=0.25)
                break
        await asyncio.sleep(0.5)  # (late duplicates of the warm-up land now, not below)
        for key in got:
            got[key].clear()
        for i in range(MESSAGES):
            await pub_a.publish("feed.x", b"%d" % i)
        answers = [(await sub_b2.request("svc.x", b"%d" % i, timeout=5)).data for i in range(MESSAGES)]
        await pub_a.flush()
        await asyncio.sleep(1.0)  # any duplicate arrives well within this
        return {"B on 1": len(got["B on 1"]), "B on 2": len(got["B on 2"]), "requests": len(got["requests"]),
                "answers": sorted(answers) == sorted(b"re %d" % i for i in range(MESSAGES))}
    finally:
        for nc in (pub_a, responder, sub_b1, sub_b2):
            await nc.close()


@pytest.mark.parametrize("kinds", KINDS, ids=["-".join(k) for k in KINDS])
def test_imports_deliver_once_across_a_route(kinds, tmp_path):
    clusters = {"1": free_port(), "2": free_port()}
    with contextlib.ExitStack() as stack:
        ports = {}
        for name, kind, peer in (("1", kinds[0], "2"), ("2", kinds[1], "1")):
            folder = tmp_path / name
            folder.mkdir()
            config = CONFIG % {"name": name, "cluster": clusters[name], "peer": clusters[peer]}
            ports[name] = stack.enter_context(running(kind, config, folder, binary=reference.NATS_SERVER or "nats-server"))
        counts = asyncio.run(asyncio.wait_for(_script(ports), TIMEOUT))
    assert counts == {"B on 1": MESSAGES, "B on 2": MESSAGES, "requests": MESSAGES, "answers": True}
