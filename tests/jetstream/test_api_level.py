"""A request's ``Nats-Required-Api-Level`` header (nats-server 2.11+, jetstream_versioning.go
errorOnRequiredApiLevel): a level above the server's JetStream API level (INFO ``api_lvl``,
natserver's ``JS_API_LEVEL``), or a value that is not a number, is refused before anything
else: each API answers its own response type with ``412 10185 JetStream minimum api level
required`` (the paging fields its response carries included), a pull request and a direct get
answer a ``412 Required Api Level`` status, and the leader step-downs and peer removal answer
what a single server always answers (10010, clustering required). A level natserver has is
served as usual. One script, recorded from nats-server 2.15.1 in
data/api_level_nats_server_2.15.1.json (``python -m tests.jetstream.test_api_level`` records it
again), replayed against natserver; a live 2.15.1, when installed, must still give it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from natserver.protocol.const import JS_API_LEVEL
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record

RECORDED = Path(__file__).with_name("data") / "api_level_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 0.5  # seconds a request waits for an answer (no answer is an outcome too)

SUBJECTS = [
    "$JS.API.INFO", "$JS.API.STREAM.CREATE.S", "$JS.API.STREAM.UPDATE.S", "$JS.API.STREAM.INFO.S",
    "$JS.API.STREAM.DELETE.S", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.PURGE.S",
    "$JS.API.STREAM.MSG.GET.S", "$JS.API.STREAM.MSG.DELETE.S", "$JS.API.CONSUMER.CREATE.S",
    "$JS.API.CONSUMER.CREATE.S.C", "$JS.API.CONSUMER.DURABLE.CREATE.S.C", "$JS.API.CONSUMER.INFO.S.C",
    "$JS.API.CONSUMER.DELETE.S.C", "$JS.API.CONSUMER.NAMES.S", "$JS.API.CONSUMER.LIST.S",
    "$JS.API.CONSUMER.PAUSE.S.C", "$JS.API.CONSUMER.UNPIN.S.C", "$JS.API.CONSUMER.MSG.NEXT.S.C",
    "$JS.API.DIRECT.GET.S", "$JS.API.DIRECT.GET.NODIRECT", "$JS.API.STREAM.SNAPSHOT.S",
    "$JS.API.STREAM.RESTORE.S", "$JS.API.STREAM.LEADER.STEPDOWN.S", "$JS.API.CONSUMER.LEADER.STEPDOWN.S.C",
    "$JS.API.STREAM.PEER.REMOVE.S",
]
# The header's values: above natserver's level (and 2.15.1's 5), not a number, a level both
# have; then no header, where the step-downs and peer removal still answer.
LEVELS = ["99", "x", "0", None]


async def _script(port: int) -> dict:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"], allow_direct=True)
        await js.add_stream(name="NODIRECT", subjects=["nd"])
        await js.add_consumer("S", durable_name="C")
        out: dict = {}
        for level in LEVELS:
            headers = None if level is None else {"Nats-Required-Api-Level": level}
            # (the level that is served: only what does not change the stream and consumer)
            subjects = SUBJECTS if level in ("99", "x") else [
                s for s in SUBJECTS if "LEADER" in s or "PEER" in s or s in ("$JS.API.STREAM.NAMES", "$JS.API.INFO")]
            for subject in subjects:
                key = f"{subject} level={level}"
                try:
                    msg = await nc.request(subject, b"{}", timeout=TIMEOUT, headers=headers)
                except nats.errors.NoRespondersError:
                    out[key] = "no responders"
                    continue
                except nats.errors.TimeoutError:
                    out[key] = "no answer"
                    continue
                if subject in ("$JS.API.INFO", "$JS.API.STREAM.NAMES") and level not in ("99", "x"):
                    out[key] = "answered"  # served (the account's figures differ between servers)
                    continue
                out[key] = [msg.headers, msg.data.decode()]
        return out
    finally:
        await nc.close()


def run_script(port: int) -> dict:
    return asyncio.run(_script(port))


def test_natserver_answers_as_nats_server(tmp_path):
    assert JS_API_LEVEL < 99
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
