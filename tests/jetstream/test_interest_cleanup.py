"""A consumer of an interest stream deleted (consumer.go cleanupNoInterestMessages): what no
other consumer needs goes; the last one's deletion empties the stream. The same test against
natserver and against nats-server 2.15.1 (skipped when its binary is missing); 2.9.10 does the
same."""

from __future__ import annotations

import json

from tests.jetstream.test_nats_py_suite import connect, run, target  # noqa: F401 (target: a fixture)


def test_deleting_a_consumer_of_an_interest_stream_removes_what_nobody_needs(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)

        async def api(subject: str, body=None) -> dict:
            answer = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
            return json.loads(answer.data)

        await api("$JS.API.STREAM.CREATE.I", {"name": "I", "subjects": ["i.>"], "retention": "interest"})
        for name in ("A", "B", "C"):
            await api(f"$JS.API.CONSUMER.DURABLE.CREATE.I.{name}", {
                "stream_name": "I", "config": {"durable_name": name, "ack_policy": "explicit"}})
        js = nc.jetstream()
        for n in range(4):
            await js.publish(f"i.{n}", b"x")
        a = await js.pull_subscribe_bind("A", stream="I")
        for m in await a.fetch(4, timeout=5):
            await m.ack_sync()
        c = await js.pull_subscribe_bind("C", stream="I")
        for m in await c.fetch(2, timeout=5):
            await m.ack_sync()
        assert (await api("$JS.API.STREAM.INFO.I"))["state"]["messages"] == 4  # (B acked none)
        # B goes: 1 and 2 were acked by A and C, 3 and 4 still wait for C.
        assert (await api("$JS.API.CONSUMER.DELETE.I.B"))["success"] is True
        state = (await api("$JS.API.STREAM.INFO.I"))["state"]
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (2, 3, 4), state
        # The others go: nothing left.
        for name in ("A", "C"):
            assert (await api(f"$JS.API.CONSUMER.DELETE.I.{name}"))["success"] is True
        state = (await api("$JS.API.STREAM.INFO.I"))["state"]
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 5, 4), state
        await nc.close()

    run(main())
