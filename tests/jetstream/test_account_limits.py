"""An account's JetStream limits beyond sizes and counts, as nats-server 2.15.1 applies them
(opts.go parseJetStreamForAccount, stream.go checkStreamCfg via maxBytesLimits, consumer.go
setConsumerConfigDefaults and checkConsumerCfg): ``max_bytes_required`` (10113),
``mem_max_stream_bytes`` / ``disk_max_stream_bytes`` (10122) on create and update, and
``max_ack_pending`` (the default for acking consumers when lower than 1000; over it 10121);
all of them reported in $JS.API.INFO's limits. One script of API requests must give the answers
recorded from nats-server in data/account_limits_nats_server_2.15.1.json; a live nats-server,
when installed, must still give the recording (``python -m tests.jetstream.test_account_limits``
records it again)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.reference import needs_nats_server

RECORDED = Path(__file__).with_name("data") / "account_limits_nats_server_2.15.1.json"
CONFIG = """
jetstream { store_dir: "%s" }
accounts {
  L {
    users [{user: l, password: l}]
    jetstream { max_bytes_required: true, mem_max_stream_bytes: 1000, disk_max_stream_bytes: 2000, max_ack_pending: 5 }
  }
  M {
    users [{user: m, password: m}]
    jetstream { max_mem: 1M, max_file: 1M, max_ack_pending: 5000 }
  }
}
"""


def _stream(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], **config}


def _consumer(stream: str, name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}", {"stream_name": stream, "config": {"durable_name": name, **config}}


SCRIPT_L = [
    ("info", "$JS.API.INFO", b""),
    ("stream without max_bytes", *_stream("S1")),
    ("file stream over the stream limit", *_stream("S2", max_bytes=5000)),
    ("memory stream over the stream limit", *_stream("S3", storage="memory", max_bytes=1500)),
    ("memory stream within", *_stream("S4", storage="memory", max_bytes=500)),
    ("file stream at the limit", *_stream("S5", max_bytes=2000)),
    ("update over the limit", "$JS.API.STREAM.UPDATE.S5", {"name": "S5", "subjects": ["s5"], "max_bytes": 3000}),
    ("update dropping max_bytes", "$JS.API.STREAM.UPDATE.S5", {"name": "S5", "subjects": ["s5"]}),
    ("consumer over max_ack_pending", *_consumer("S5", "C1", ack_policy="explicit", max_ack_pending=10)),
    ("consumer within max_ack_pending", *_consumer("S5", "C2", ack_policy="explicit", max_ack_pending=3)),
    ("consumer with the default", *_consumer("S5", "C3", ack_policy="explicit")),
    ("consumer ack all with the default", *_consumer("S5", "C4", ack_policy="all")),
    ("consumer ack none", *_consumer("S5", "C5", ack_policy="none")),
]
SCRIPT_M = [
    ("info", "$JS.API.INFO", b""),
    ("stream without max_bytes", *_stream("T1")),
    ("consumer with the default (the account's is higher)", *_consumer("T1", "D1", ack_policy="explicit")),
    ("consumer over 1000, within the account's", *_consumer("T1", "D2", ack_policy="explicit", max_ack_pending=4000)),
    ("consumer over the account's", *_consumer("T1", "D3", ack_policy="explicit", max_ack_pending=6000)),
]


def _normal(answer: str):
    """Errors as they are; a stream by its max_bytes, a consumer by its max_ack_pending, the
    account info by its limits."""
    document = json.loads(answer)
    if "error" in document:
        return {"error": document["error"]}
    if "limits" in document:
        return {"limits": document["limits"]}
    config = document.get("config", {})
    if "durable_name" in config:
        return {"max_ack_pending": config.get("max_ack_pending")}
    return {"max_bytes": config.get("max_bytes")}


def run_script(port: int) -> dict:
    out = {}
    for user, script in (("l", SCRIPT_L), ("m", SCRIPT_M)):
        client = RawClient(port, user=user, **{"pass": user})
        for name, subject, body in script:
            out[f"{user}: {name}"] = [_normal(a) for a in client.request(subject, body)]
        client.sock.close()
    return out


def test_natserver_applies_account_limits_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, CONFIG, RECORDED, tmp_path)


@needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, CONFIG, RECORDED, tmp_path)


if __name__ == "__main__":
    record(run_script, CONFIG, RECORDED)
