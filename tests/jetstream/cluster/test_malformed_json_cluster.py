"""Malformed JSON in the $JS.API requests a cluster's meta leader answers (stream create and
update, stream and consumer names and lists, consumer create and pause, account info): 2.15.1
decodes them before it looks at the cluster, so a cluster answers each as a standalone server
does, Go's error text included (test_malformed_json.py's recording). Run against three
in-process natservers, and against three nats-server 2.15.1 processes when the binary is
installed, the recording is what both must give. The requests go out in one burst, each with its
own reply subject, so a run takes seconds, not the standalone script's 0.1 s a request.
"""

from __future__ import annotations

import json
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.record_r1 import CONFIG
from tests.jetstream.cluster.record_scale import start_servers
from tests.jetstream.test_malformed_json import BODIES, RECORDED, _normal
from tests.reference import NATS_SERVER, needs_nats_server

# The subjects whose requests the meta leader answers in a cluster (a stream's or consumer's
# own requests go to its leader, which runs the standalone server's code).
META_SUBJECTS = [
    "$JS.API.STREAM.CREATE.N",
    "$JS.API.STREAM.UPDATE.S",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    "$JS.API.CONSUMER.CREATE.E",
    "$JS.API.CONSUMER.CREATE.E.X",
    "$JS.API.CONSUMER.DURABLE.CREATE.E.D",
    "$JS.API.CONSUMER.NAMES.E",
    "$JS.API.CONSUMER.PAUSE.E.C",
    "$JS.API.INFO",
]
# Requests only a cluster answers (a standalone server says "JetStream not in clustered mode"):
# recorded from a 2.15.1 cluster into data/malformed_json_cluster_nats_server_2.15.1.json
# (``python -m tests.jetstream.cluster.test_malformed_json_cluster`` records it again).
# (The setup's streams are R1: 2.15.1 answers an R1 stream's or consumer's step-down with
# success before it reads the body, whatever the body.)
CLUSTER_SUBJECTS = [
    "$JS.API.STREAM.PEER.REMOVE.S",
    "$JS.API.STREAM.LEADER.STEPDOWN.S",
    "$JS.API.CONSUMER.LEADER.STEPDOWN.E.C",
    "$JS.API.CONSUMER.INFO.E.C",
    "$JS.API.CONSUMER.INFO.R.RC",
    "$JS.API.CONSUMER.DELETE.E.X",
]
CLUSTER_RECORDED = Path(__file__).parent / "data" / "malformed_json_cluster_nats_server_2.15.1.json"
SETUP = [
    ("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_direct": True}),
    ("$JS.API.STREAM.CREATE.E", {"name": "E", "subjects": ["e.>"]}),
    ("$JS.API.CONSUMER.CREATE.E.C", {"stream_name": "E", "config": {"durable_name": "C", "ack_policy": "explicit"}}),
    # (an R3 consumer's requests are its group leader's)
    ("$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"], "num_replicas": 3}),
    ("$JS.API.CONSUMER.CREATE.R.RC", {"stream_name": "R", "config": {"durable_name": "RC", "ack_policy": "explicit"}}),
    # (and the consumers answer: their groups have leaders)
    ("$JS.API.CONSUMER.INFO.E.C", b""),
    ("$JS.API.CONSUMER.INFO.R.RC", b""),
]
RUN_TIMEOUT = 120.0  # seconds of real time for a run, the cluster's first election included
READY_POLL = 0.25  # seconds between two tries of the setup while the meta group elects
ANSWER_WAIT = 10.0  # seconds the burst's answers may take, all of them
SETUP_WAIT = 3.0  # seconds a setup request's answer may take before it is sent again
QUIET = 1.0  # seconds without a new answer after the last expected one: no second answers
START_WAIT = 30.0  # seconds 2.15.1's processes may take to listen


class BurstClient:
    """One connection subscribed to ``_R.>``: requests sent with reply ``_R.<n>``, answers
    gathered by reply subject."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT)
        self.buf = b""
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.> 1\r\nPING\r\n')
        while b"PONG\r\n" not in self.buf:
            self._read()
        self.buf = b""
        self.answers: dict[str, list[str]] = {}
        self.sent = 0

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "the server closed the connection"
        self.buf += chunk

    def send(self, subject: str, body) -> str:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        reply = f"_R.{self.sent}"
        self.sent += 1
        self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(payload), payload))
        return reply

    def gather(self, replies: list[str], wait: float = ANSWER_WAIT) -> bool:
        """Read until every reply has an answer and nothing more came for QUIET seconds (True),
        or ``wait`` seconds passed (False)."""
        deadline = time.monotonic() + wait
        last = time.monotonic()
        while time.monotonic() < deadline:
            if all(r in self.answers for r in replies) and time.monotonic() - last > QUIET:
                return True
            self.sock.settimeout(0.1)
            try:
                self._read()
            except TimeoutError:
                continue
            while True:
                line, sep, rest = self.buf.partition(b"\r\n")
                if not sep:
                    break
                if line.startswith((b"MSG ", b"HMSG ")):
                    size = int(line.split()[-1])
                    if len(rest) < size + 2:
                        break
                    self.answers.setdefault(line.split()[1].decode(), []).append(rest[:size].decode())
                    self.buf = rest[size + 2:]
                    last = time.monotonic()
                else:
                    self.buf = rest  # (PING, +OK)
        return False


def run_script(port: int) -> dict:
    client = BurstClient(port)
    deadline = time.monotonic() + RUN_TIMEOUT
    for subject, body in SETUP:  # (retried while the meta group has no leader: no answer, or 503)
        while True:
            reply = client.send(subject, body)
            answered = client.gather([reply], wait=SETUP_WAIT)
            if answered and "error" not in json.loads(client.answers[reply][0]):
                break
            assert time.monotonic() < deadline, f"{subject}: {client.answers.get(reply)}"
            time.sleep(READY_POLL)
    asked = {}
    for subject in META_SUBJECTS + CLUSTER_SUBJECTS:
        for name, body in BODIES:
            asked[f"{subject[8:]} {name}"] = client.send(subject, body)
    missing = [] if client.gather(list(asked.values())) else [k for k, r in asked.items() if r not in client.answers]
    assert not missing, f"no answer to {missing}"
    return {key: [_normal(a) for a in client.answers[reply]] for key, reply in asked.items()}


def _once(answers: list) -> list:
    """Each answer once (2.15.1 now and then gives one twice, from two servers)."""
    return [json.loads(a) for a in dict.fromkeys(json.dumps(a) for a in answers)]


def assert_as_recorded(got: dict, *, repeats: bool = False) -> None:
    """``got`` is the recordings' (the standalone one's, the cluster's); with ``repeats``, an
    answer given twice counts once."""
    recorded = {**json.loads(RECORDED.read_text()), **json.loads(CLUSTER_RECORDED.read_text())}
    assert len(got) == len(META_SUBJECTS + CLUSTER_SUBJECTS) * len(BODIES)
    for key, answers in got.items():
        if repeats:
            answers = _once(answers)
        assert answers == recorded[key], key


def test_a_natserver_cluster_answers_as_a_standalone_2_15_1():
    with NatsCluster(3, jetstream=True) as cluster:
        assert_as_recorded(run_script(cluster.servers[0].port))


@contextmanager
def reference_cluster(binary: str):
    ports, processes = start_servers(binary, 3, "malformed-cluster-", CONFIG)  # (no accounts: $G)
    try:
        deadline = time.monotonic() + START_WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", ports["n1"][0]), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "2.15.1 did not listen"
                time.sleep(READY_POLL)
        yield ports["n1"][0]
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            p.wait(10)


@needs_nats_server
def test_a_2_15_1_cluster_answers_as_a_standalone_2_15_1():
    assert NATS_SERVER
    with reference_cluster(NATS_SERVER) as port:
        # (2.15.1 now and then answers a consumer request's error from two servers, in one run
        # of four here: the same text twice; natserver answers once)
        assert_as_recorded(run_script(port), repeats=True)


def record() -> None:
    """Write the cluster-only requests' answers of a 2.15.1 cluster (CLUSTER_RECORDED)."""
    assert NATS_SERVER, "nats-server 2.15.1 is not installed"
    with reference_cluster(NATS_SERVER) as port:
        got = run_script(port)
    cluster_only = tuple(subject[8:] + " " for subject in CLUSTER_SUBJECTS)
    CLUSTER_RECORDED.write_text(json.dumps({k: _once(v) for k, v in got.items() if k.startswith(cluster_only)},
                                           indent=1) + "\n")
    print(f"wrote {CLUSTER_RECORDED}")


if __name__ == "__main__":
    record()
