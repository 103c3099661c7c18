"""Consumer configuration rules and pull request limits as nats-server 2.15.1 enforces them
(consumer.go checkConsumerCfg, addConsumer's workqueue rules, processNextMsgRequest's
MaxRequestBatch/Expires/MaxBytes statuses). One script of API requests runs against natserver
and must give the answers recorded from nats-server in data/consumer_rules_nats_server_2.15.1.json
(errors exactly; successes by their field names); a live nats-server, when installed, must still
give the recording (``python -m tests.jetstream.test_consumer_rules`` records it again)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.reference import needs_nats_server

TIMEOUT = 20
RECORDED = Path(__file__).with_name("data") / "consumer_rules_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'


def _consumer(stream: str, name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}", {"stream_name": stream, "config": {"durable_name": name, **config}}


SCRIPT: list[tuple[str, str, object]] = [
    ("stream S", "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]}),
    ("workqueue stream W", "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "retention": "workqueue"}),
    ("pull with request limits", *_consumer("S", "P", ack_policy="explicit", max_batch=2, max_expires=1_000_000_000, max_bytes=100)),
    ("negative max_batch", *_consumer("S", "N1", ack_policy="explicit", max_batch=-1)),
    ("max_expires under 1ms", *_consumer("S", "N2", ack_policy="explicit", max_expires=1000)),
    ("pull with rate limit", *_consumer("S", "N3", ack_policy="explicit", rate_limit_bps=1000)),
    ("pull ack none (limits stream: allowed)", *_consumer("S", "OK1", ack_policy="none")),
    ("push with max_waiting", *_consumer("S", "N4", deliver_subject="d.4", max_waiting=5)),
    ("push wildcard deliver subject", *_consumer("S", "N5", deliver_subject="d.*")),
    ("push deliver subject in the stream", *_consumer("S", "N6", deliver_subject="s.x")),
    ("push ack none with max_ack_pending", *_consumer("S", "N7", deliver_subject="d.7", ack_policy="none", max_ack_pending=5)),
    ("push heartbeat under 100ms", *_consumer("S", "N8", deliver_subject="d.8", idle_heartbeat=50_000_000)),
    ("push flow control without heartbeat", *_consumer("S", "N9", deliver_subject="d.9", flow_control=True)),
    ("deliver all with a start sequence", *_consumer("S", "N10", ack_policy="explicit", opt_start_seq=3)),
    ("deliver new with a start time", *_consumer("S", "N11", ack_policy="explicit", deliver_policy="new",
                                                 opt_start_time="2024-01-01T00:00:00Z")),
    ("by start time with a sequence", *_consumer("S", "N12", ack_policy="explicit", deliver_policy="by_start_time",
                                                 opt_start_time="2024-01-01T00:00:00Z", opt_start_seq=2)),
    ("bad sampling", *_consumer("S", "N13", deliver_subject="d.13", sample_freq="abc%")),
    ("direct pull", "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"direct": True, "ack_policy": "none"}}),
    ("direct durable push", *_consumer("S", "N14", deliver_subject="d.14", direct=True, ack_policy="none")),
    ("direct ephemeral push", "$JS.API.CONSUMER.CREATE.S",
     {"stream_name": "S", "config": {"direct": True, "ack_policy": "none", "deliver_subject": "d.15"}}),
    ("next: batch over MaxRequestBatch", "$JS.API.CONSUMER.MSG.NEXT.S.P", {"batch": 5}),
    ("next: expires over MaxRequestExpires", "$JS.API.CONSUMER.MSG.NEXT.S.P", {"batch": 1, "expires": 5_000_000_000}),
    ("next: max_bytes over MaxRequestMaxBytes", "$JS.API.CONSUMER.MSG.NEXT.S.P", {"batch": 1, "max_bytes": 500}),
    ("next: within the limits", "$JS.API.CONSUMER.MSG.NEXT.S.P", {"batch": 2, "no_wait": True}),
    ("workqueue: ack none", *_consumer("W", "A", ack_policy="none")),
    ("workqueue: ack all", *_consumer("W", "A2", ack_policy="all")),
    ("workqueue: first, filtered", *_consumer("W", "B", ack_policy="explicit", filter_subject="w.a.>")),
    ("workqueue: a second without filter", *_consumer("W", "C", ack_policy="explicit")),
    ("workqueue: overlapping filter", *_consumer("W", "D", ack_policy="explicit", filter_subject="w.a.b")),
    ("workqueue: wider overlapping filter", *_consumer("W", "D2", ack_policy="explicit", filter_subject="w.>")),
    ("workqueue: deliver last", *_consumer("W", "F", ack_policy="explicit", filter_subject="w.c", deliver_policy="last")),
    ("workqueue: a second, distinct filter", *_consumer("W", "G", ack_policy="explicit", filter_subject="w.d")),
]


class RawClient:
    """A connection subscribed to ``_R.>`` that sends API requests and returns the payloads
    of what answers each (a shared helper of the JetStream API differential tests)."""

    def __init__(self, port: int, **connect) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self._until(b"\r\n")
        options = {"verbose": False, "headers": True, **connect}
        self.sock.sendall(b"CONNECT " + json.dumps(options).encode() + b"\r\nSUB _R.> 1\r\nPING\r\n")
        self._until(b"PONG\r\n")

    def _until(self, marker: bytes) -> bytes:
        deadline = time.monotonic() + TIMEOUT
        while marker not in self.buf:
            assert time.monotonic() < deadline, self.buf[-200:]
            chunk = self.sock.recv(65536)
            assert chunk
            self.buf += chunk
        data, _, self.buf = self.buf.partition(marker)
        return data

    def request(self, subject: str, body) -> list[str]:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sock.sendall(b"PUB %s _R.x %d\r\n%s\r\nPING\r\n" % (subject.encode(), len(payload), payload))
        time.sleep(0.1)  # (nats-server answers some from another goroutine, after a PONG)
        self.sock.sendall(b"PING\r\n")
        data = self._until(b"PONG\r\n") + self._until(b"PONG\r\n")
        answers = []
        while data:
            line, _, data = data.partition(b"\r\n")
            if line.startswith((b"MSG ", b"HMSG ")):
                size = int(line.split()[-1])
                answers.append(data[:size].decode())
                data = data[size + 2 :]
        return answers


def _normal(answer: str):
    """An API error as it is; any other JSON answer by its field names; a status as it is.
    (2.15.1 answers a direct consumer's create with a Nats-Stream-Identity header, for the
    stream that sources from it; natserver does not: the body is compared.)"""
    if answer.startswith("NATS/1.0\r\n") and "\r\n\r\n{" in answer:
        answer = answer.split("\r\n\r\n", 1)[1]
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    return {"error": document["error"]} if "error" in document else sorted(document)


def run_script(port: int) -> dict:
    client = RawClient(port)
    return {name: [_normal(a) for a in client.request(subject, body)] for name, subject, body in SCRIPT}


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED)
