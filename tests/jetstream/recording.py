"""The differential tests' recordings: a script run against natserver must give what was
recorded from nats-server 2.15.1, the reference (tests/reference.py; kept under data/, so the
suite needs no nats-server), and a live nats-server, when installed, must still give the
recording."""

from __future__ import annotations

import json
import re
import socket
import tempfile
import time
from pathlib import Path

from natserver.protocol.const import JS_API_LEVEL
from tests.auth.test_auth_helpers import running
from tests.reference import HAVE_NATS_SERVER, NATS_SERVER


def assert_natserver_matches(run_script, config: str, recorded: Path, tmp_path: Path) -> None:
    """``run_script(port)`` against natserver with ``config`` (``%s``: a store directory)
    gives the recording, entry by entry (the first that differs is named)."""
    with running("natserver", config % (tmp_path / "store"), tmp_path) as port:
        assert_recorded(run_script(port), recorded)


def assert_nats_server_matches(run_script, config: str, recorded: Path, tmp_path: Path,
                               binary: str | None = NATS_SERVER) -> None:
    """The live nats-server (``binary``: the 2.15.1 reference) still gives the recording."""
    with running("nats-server", config % (tmp_path / "store"), tmp_path, binary=binary or "nats-server") as port:
        assert_recorded(run_script(port), recorded)


def assert_recorded(got: dict, recorded: Path) -> None:
    """``got`` is the recording, entry by entry (the first that differs is named): for a
    script that runs the server itself (test_message_ttl.py moves an in-process server's
    clock)."""
    expected = json.loads(recorded.read_text())
    assert list(got) == list(expected)
    for name in expected:
        assert got[name] == expected[name], name


def record(run_script, config: str, recorded: Path, binary: str | None = NATS_SERVER) -> None:
    """Write the recording again from the installed nats-server (``python -m tests...``)."""
    assert binary and (HAVE_NATS_SERVER or binary != NATS_SERVER), f"{binary or 'nats-server'} is not installed"
    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", config % folder, Path(folder), binary=binary) as port:
        recorded.write_text(json.dumps(run_script(port), indent=1) + "\n")
    print(f"wrote {recorded}")


REFERENCE_API_LEVEL = 5  # nats-server 2.15.1's JSApiLevel (jetstream_versioning.go)
_LEVELS = re.compile(r'("_nats\.level":"|"api":\{"level":)(\d+)')
_LEADER = re.compile(r'"cluster":\{"leader":"[^"]*"\}')


def claimed(answer: str) -> str:
    """A JetStream answer with the server's own JetStream API level (``_nats.level`` metadata,
    ``$JS.API.INFO``'s ``api.level``) as natserver claims it (JS_API_LEVEL, where 2.15.1 says
    REFERENCE_API_LEVEL) and a standalone server's name as the stream's leader masked: what
    two servers of the same JSON differ in."""
    answer = _LEVELS.sub(lambda m: m.group(1) + str(JS_API_LEVEL), answer)
    return _LEADER.sub('"cluster":{"leader":"<server>"}', answer)


_GO_JSON_ERROR = re.compile(r'"invalid JSON: [^"]*"')


def go_json_error(answer: str) -> str:
    """2.10+ adds Go's decoding error to "invalid JSON": natserver gives Go's text for a
    stream's or consumer's field (``json: cannot unmarshal ...``, ``json: unknown field ...``)
    and for syntax errors (gojson.go_decode_request: test_malformed_json.py), but for some other
    request shapes it says "invalid JSON" alone (left for later): an answer saying that much is
    compared with this of the reference's."""
    return _GO_JSON_ERROR.sub('"invalid JSON"', answer)


# A raw client's hard limit on one connection's I/O (the recorded scripts sleep up to 7 s).
CLIENT_TIMEOUT = 30


class PipelinedClient:
    """Requests on one raw connection, pipelined: each gets its own reply subject and exactly
    one answer, so a batch costs one round trip (the timed steps of the recorded scripts
    publish within milliseconds). A request is ``(kind, subject, headers, payload)``."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
        self.buf = b""
        self.n = 0
        self._line()
        self.sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.> 1\r\nPING\r\n')
        while self._line() != b"PONG":
            pass

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "connection closed"
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exactly(self, size: int) -> bytes:
        while len(self.buf) < size + 2:
            self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2 :]
        return data

    def batch(self, requests: list[tuple]) -> list[bytes]:
        out = bytearray()
        replies = []
        for _, subject, headers, payload in requests:
            self.n += 1
            reply = b"_R.%d" % self.n
            replies.append(reply)
            if headers:
                block = b"NATS/1.0\r\n" + headers + b"\r\n"
                out += b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject.encode(), reply, len(block), len(block) + len(payload),
                                                         block, payload)
            else:
                out += b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply, len(payload), payload)
        self.sock.sendall(bytes(out))
        answers: dict[bytes, bytes] = {}
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while len(answers) < len(replies):
            assert time.monotonic() < deadline, answers
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if not line.startswith((b"MSG ", b"HMSG ")):
                continue
            parts = line.split()
            data = self._exactly(int(parts[-1]))
            if parts[0] == b"HMSG":
                data = data[int(parts[-2]) :]  # (API answers have no headers; a status would)
            answers[parts[1]] = data
        return [answers[r] for r in replies]
