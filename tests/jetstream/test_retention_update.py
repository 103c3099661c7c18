"""What a stream update may change, as 2.15.1 has it (stream.go configUpdateCheckLocked): since
2.10 ``max_consumers`` may change, and the retention between limits and interest (not to or
from workqueue, with 2.15.1's text); a limits stream switched to interest retention drops what
every consumer is done with (its consumers' checkStateForInterestStream), and keeps the rest.
The same test against natserver and against nats-server 2.15.1 (skipped when its binary is
missing)."""

from __future__ import annotations

import json

from tests.jetstream.test_nats_py_suite import connect, run, target  # noqa: F401 (target: a fixture)


def test_retention_switches_between_limits_and_interest_and_max_consumers_changes(target):  # noqa: F811
    async def main():
        nc = await connect(target.url)

        async def api(subject: str, body=None) -> dict:
            answer = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=5)
            return json.loads(answer.data)

        created = await api("$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l.>"]})
        config = created["config"]
        for name in ("A", "B"):
            await api(f"$JS.API.CONSUMER.DURABLE.CREATE.L.{name}", {
                "stream_name": "L", "config": {"durable_name": name, "ack_policy": "explicit"}})
        js = nc.jetstream()
        for n in range(5):
            await js.publish(f"l.{n}", b"x")
        for name, count in (("A", 3), ("B", 2)):
            sub = await js.pull_subscribe_bind(name, stream="L")
            for m in await sub.fetch(count, timeout=5):
                await m.ack_sync()
        state = (await api("$JS.API.STREAM.INFO.L"))["state"]
        assert state["messages"] == 5, state  # (limits: acks remove nothing)

        # To interest: 1 and 2 (acked by both) go; 3 waits for B, 4 and 5 for both.
        updated = await api("$JS.API.STREAM.UPDATE.L", {**config, "retention": "interest"})
        assert updated["config"]["retention"] == "interest", updated
        state = (await api("$JS.API.STREAM.INFO.L"))["state"]
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (3, 3, 5), state
        b = await js.pull_subscribe_bind("B", stream="L")
        for m in await b.fetch(1, timeout=5):
            await m.ack_sync()
        state = (await api("$JS.API.STREAM.INFO.L"))["state"]
        assert (state["messages"], state["first_seq"]) == (2, 4), state  # (an ack removes now)

        # Back to limits, max_consumers changed; never to or from workqueue.
        config = updated["config"]
        back = await api("$JS.API.STREAM.UPDATE.L", {**config, "retention": "limits", "max_consumers": 5})
        assert (back["config"]["retention"], back["config"]["max_consumers"]) == ("limits", 5), back
        refused = await api("$JS.API.STREAM.UPDATE.L", {**back["config"], "retention": "workqueue"})
        assert refused["error"] == {"code": 500, "err_code": 10052, "description":
                                    "stream configuration update can not change retention policy to/from workqueue"}
        await nc.close()

    run(main())
