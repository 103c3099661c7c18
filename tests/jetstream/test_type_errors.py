"""Values of the wrong type in JetStream requests as nats-server 2.15.1 answers them: Go's
UnmarshalTypeError text, which names the key as it was sent (``MAX_MSGS``, not ``max_msgs``)
and a number as it was written (``number 1e3``, ``number 1.5``). A pull request's errors come
back as a ``400 Bad Request - <Go's error>`` status (consumer.go nextReqFromMsg, whose anonymous
struct makes the path ``.batch``); a stream create's as 10025 "invalid JSON: <Go's error>", and a
stream restore's too, its ``state`` (a StreamState natserver does not read) decoded strictly,
its fields' errors and the config's unknown fields in the order sent.
One script runs against natserver and must give, byte for byte, what was recorded from 2.15.1 in
data/type_errors_nats_server_2.15.1.json (``python -m tests.jetstream.test_type_errors``
records it again); a live 2.15.1, when installed, must still give it."""

from __future__ import annotations

import json
from pathlib import Path

from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient

RECORDED = Path(__file__).with_name("data") / "type_errors_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'

PULL_BODIES = [
    b'{"batch":"x"}', b'{"batch":1.5}', b'{"batch":true}', b'{"batch":[1]}', b'{"batch":1e3}',
    b'{"batch":99999999999999999999}', b'{"BATCH":"x"}', b'{"expires":"1s"}', b'{"expires":1.5}',
    b'{"expires":{}}', b'{"no_wait":1}', b'{"no_wait":"true"}', b'{"max_bytes":"1"}', b'{"idle_heartbeat":true}',
    b'{"group":1}', b'{"min_pending":"x"}', b'{"min_ack_pending":[]}', b'{"priority":"x"}', b'{"id":1}',
    b'{"batch":null,"expires":null,"no_wait":true}', b'{"unknown":1,"no_wait":true}', b'{"batch":2.0e0}',
]
STREAM_BODIES = [
    b'{"name":"X","MAX_MSGS":"x"}', b'{"name":"X","max_msgs":1e3}', b'{"name":"X","max_msgs":1.50}',
    b'{"name":"X","Max_Bytes":-1.0}', b'{"name":"X","max_age":1E9}', b'{"name":"X","replicas":0.5}',
]


# Stream restores, each of its own stream (2.15.1 takes a second restore of a name in progress,
# natserver refuses it): wrong types, unknown fields, times, and state that is taken.
RESTORE_STATES = [
    {"messages": "x"}, {"bogus": 1}, {"first_ts": 5}, {"first_ts": "bad"}, {"first_ts": "2024-01-02T03:04:05Z"},
    {"deleted": ["x"]}, {"deleted": [1, -1]}, {"deleted": "x"}, {"lost": {"msgs": "x"}}, {"lost": {"bogus": 1}},
    {"lost": "x"}, {"lost": {"msgs": [1, "y"], "bytes": 2}}, "str", [], {"subjects": {"a": "x"}},
    {"subjects": {"a": 1, "b": -2}}, {"subjects": [1]}, {"messages": -1}, {"num_subjects": 1.5},
    {"consumer_count": "2"}, {"messages": "x", "bogus": 1}, {"bogus": 1, "messages": "x"}, {"Messages": 3, "FIRST_SEQ": 2},
    None, {"messages": None, "lost": None, "deleted": None, "subjects": {"a": None}},
    {"first_ts": "2024-01-02T03:04:05.123456789+01:00", "last_ts": "2024-13-02T03:04:05Z"}, {"bytes": True},
    {"num_deleted": -5, "consumer_count": -1}, {"messages": 18446744073709551615},
]
RESTORE_BODIES = [
    b'{"config":{"name":"R"},"state":{"bytes":1e3}}', b'{"config":{"name":"R"},"state":{"bytes":2.0}}',
    b'{"state":{"messages":"x"},"config":{"name":"R","bogus":1}}', b'{"config":{"name":"R","bogus":1},"state":{"messages":"x"}}',
    b'{"config":{"name":"R"},"bogus":1}', b'{"config":{"name":"R"},"State":{"Bogus":1}}',
]


def _restore_answer(answers: list[str]) -> list[str]:
    """An error as it is; a restore taken by the start of its answer (its deliver subject is random)."""
    return [a if '"error"' in a else a[:60] for a in answers]


def run_script(port: int) -> dict:
    client = RawClient(port)
    got = {
        "stream S": client.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})[0][:60],
        "consumer C": client.request("$JS.API.CONSUMER.CREATE.S.C",
                                     {"stream_name": "S", "config": {"durable_name": "C",
                                                                     "ack_policy": "explicit"}})[0][:60],
    }
    for body in PULL_BODIES:
        got["pull " + body.decode()] = client.request("$JS.API.CONSUMER.MSG.NEXT.S.C", body)
    for body in STREAM_BODIES:
        got["stream " + body.decode()] = client.request("$JS.API.STREAM.CREATE.X", body)
    bodies = [json.dumps({"config": {"name": "R"}, "state": state}).encode() for state in RESTORE_STATES] + RESTORE_BODIES
    for n, body in enumerate(bodies):
        named = body.replace(b'"name":"R"', b'"name":"R%d"' % n).replace(b'"name": "R"', b'"name": "R%d"' % n)
        got["restore " + body.decode()] = _restore_answer(client.request(f"$JS.API.STREAM.RESTORE.R{n}", named))
    return got


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
