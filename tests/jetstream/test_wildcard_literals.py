"""Subjects holding `*` or `>` as literal tokens (issue #19): a client may publish to
`hello.*`, and JetStream stores it under that literal subject. A filter equal to it must still
act as a wildcard everywhere the store uses a filter (purge, rollup, MSG.GET by subject), as
nats-server does. Compared with nats-server 2.9.10 -js when it is installed; the expected
answers below are its recorded ones."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import nats
import pytest

from tests.jetstream.test_jsz import TIMEOUT, Running

NATS_SERVER = shutil.which("nats-server")


async def _scenario(port: int) -> dict:
    """The answers that matter, as plain data."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5)
    out: dict = {}

    async def api(subject: str, body: dict | None = None) -> dict:
        reply = await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)
        return json.loads(reply.data)

    async def publish(subject: str, data: bytes = b"x", headers: dict | None = None) -> int:
        reply = await nc.request(subject, data, timeout=5, headers=headers)
        return json.loads(reply.data)["seq"]

    async def fill(stream: str) -> None:
        for subject in ("hello.a", "hello.a", "hello.b", "hello.*", "hello.c.d", "other"):
            await publish(subject)

    await api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["hello.>", "other"], "storage": "memory"})
    await fill("P")
    purged = await api("$JS.API.STREAM.PURGE.P", {"filter": "hello.*"})
    out["purge"] = purged.get("purged")
    info = await api("$JS.API.STREAM.INFO.P", {"subjects_filter": ">"})
    out["after_purge"] = sorted(info["state"].get("subjects", {}).items())

    await api("$JS.API.STREAM.CREATE.G", {"name": "G", "subjects": ["g.>"], "storage": "file"})
    for subject in ("g.a", "g.*", "g.b", "g.a"):
        await publish(subject)
    last = await api("$JS.API.STREAM.MSG.GET.G", {"last_by_subj": "g.*"})
    out["last_by_subj"] = last["message"]["seq"]
    nxt = await api("$JS.API.STREAM.MSG.GET.G", {"next_by_subj": "g.*", "seq": 2})
    out["next_by_subj"] = nxt["message"]["seq"]
    literal = await api("$JS.API.STREAM.MSG.GET.G", {"next_by_subj": "g.*", "seq": 1})
    out["next_by_subj_from_1"] = literal["message"]["seq"]

    await api("$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"], "allow_rollup_hdrs": True,
                                          "storage": "memory"})
    for i in range(5):
        await publish(f"r.k{i % 3}")
    await publish("r.*", b"rollup", headers={"Nats-Rollup": "sub"})
    info = await api("$JS.API.STREAM.INFO.R", {"subjects_filter": ">"})
    out["rollup_left"] = (info["state"]["messages"], sorted(info["state"].get("subjects", {}).items()))
    await nc.close()
    return out


def _run(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_scenario(port), TIMEOUT))


# nats-server 2.9.10 -js's answers (recorded from the binary; re-checked live below).
EXPECTED = {
    "purge": 4,
    "after_purge": [["hello.c.d", 1], ["other", 1]],
    "last_by_subj": 4,
    "next_by_subj": 2,
    "next_by_subj_from_1": 1,
    "rollup_left": [1, [["r.*", 1]]],
}


def _normal(doc: dict) -> dict:
    return json.loads(json.dumps(doc))  # tuples as lists


def test_wildcard_filters_equal_to_stored_subjects(tmp_path):
    server = Running([sys.executable, "-m", "natserver"], tmp_path)
    try:
        assert _normal(_run(server.port)) == EXPECTED
    finally:
        server.stop()


@pytest.mark.needs_nats_server
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")
def test_nats_server_gives_the_recorded_answers(tmp_path):
    server = Running([NATS_SERVER], tmp_path)
    try:
        assert _normal(_run(server.port)) == EXPECTED
    finally:
        server.stop()
