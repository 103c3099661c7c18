"""natserver "tried as a new user would": the ways wrappers and test harnesses start a
nats-server, each pointed at ``python -m natserver`` instead, each ending with a nats-py
publish/subscribe round trip.

(a) scrape stderr for "Listening for client connections on HOST:PORT" (``-p -1``);
(b) wait for the ``--ports_file_dir`` file, PING before CONNECT, poll ``/healthz``;
(c) ``-c`` with ``port: -1`` and ``http: "127.0.0.1:-1"``, both ports found in the log;
(d) nats.py's own test helper: fixed ``-p``/``-m`` ports, poll ``/varz`` until it answers.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nats
import pytest

REPO = Path(__file__).resolve().parents[2]
NATSERVER = [sys.executable, "-m", "natserver"]
TIMEOUT = 15.0
HAVE_MONITOR = importlib.util.find_spec("natserver.server.monitor") is not None
needs_monitor = pytest.mark.skipif(
    not HAVE_MONITOR, reason="natserver/_monitor.py (monitoring HTTP) does not exist yet"
)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(TIMEOUT)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(TIMEOUT)


def round_trip(url: str) -> None:
    """Connect with nats-py, subscribe, publish, receive, request/reply."""

    async def scenario():
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        sub = await nc.subscribe("launch.>")
        await nc.publish("launch.hello", b"world")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("launch.hello", b"world")

        async def echo(m):
            await m.respond(m.data.upper())

        await nc.subscribe("launch.svc", cb=echo)
        assert (await nc.request("launch.svc", b"ping", timeout=5)).data == b"PING"
        await nc.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def poll(check, what: str, timeout: float = TIMEOUT, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"natserver exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- (a) --------------------------------------------------------------------------------------


class LogScraper:
    """Reads the server's stderr line by line (on a thread, so the pipe never fills) and
    answers "which line matched this?", like launchers that wait for a log line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._pump, args=(proc.stderr,), daemon=True)
        self.thread.start()

    def _pump(self, stream) -> None:
        for raw in stream:
            with self.cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append("<EOF>")
            self.cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = TIMEOUT) -> re.Match:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if line == "<EOF>":
                        raise AssertionError("natserver exited:\n" + "\n".join(self.lines))
                    found = regex.search(line)
                    if found:
                        return found
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {pattern!r} in:\n" + "\n".join(self.lines))
                self.cond.wait(left)


def test_a_scrape_the_log_for_the_port(processes):
    proc = subprocess.Popen(NATSERVER + ["-p", "-1"], cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    processes.append(proc)
    log = LogScraper(proc)
    found = log.wait_for(r"\[INF\] Listening for client connections on (\S+):(\d+)$")
    host, port = found.group(1), int(found.group(2))
    assert host == "0.0.0.0"  # nats-server's default host, as it prints it
    log.wait_for(r"\[INF\] Server is ready$")
    # Every line has nats-server's shape: "[pid] yyyy/mm/dd hh:mm:ss.micros [LVL] text".
    line_shape = re.compile(rf"^\[{proc.pid}\] \d{{4}}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{{6}} \[(INF|WRN|ERR|DBG|TRC)\] ")
    assert all(line_shape.match(line) for line in log.lines), log.lines
    round_trip(f"nats://127.0.0.1:{port}")
    assert stop(proc) == 0


# -- (b) --------------------------------------------------------------------------------------


def test_b_ports_file_ping_before_connect_and_healthz(tmp_path, processes):
    args = ["-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", str(tmp_path)]
    if HAVE_MONITOR:
        args += ["-m", "-1"]
    proc = subprocess.Popen(NATSERVER + args, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    processes.append(proc)
    ports_file = tmp_path / f"natserver_{proc.pid}.ports"
    ports = poll(lambda: ports_file.exists() and json.loads(ports_file.read_text()), "the ports file", proc=proc)
    nats_url = ports["nats"][0]
    host, port = re.fullmatch(r"nats://(.+):(\d+)", nats_url).groups()

    # A raw PING before CONNECT is answered (readiness probes do this).
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        reader = sock.makefile("rb")
        assert reader.readline().startswith(b"INFO {")
        sock.sendall(b"PING\r\n")
        assert reader.readline() == b"PONG\r\n"

    if not HAVE_MONITOR:
        round_trip(nats_url)
        assert stop(proc) == 0
        pytest.skip("natserver/_monitor.py does not exist yet: /healthz not checked")
    monitor_url = ports["monitoring"][0]
    monitor_port = int(re.fullmatch(r"http://127\.0\.0\.1:(\d+)", monitor_url).group(1))
    status, body = poll(lambda: http_get(monitor_port, "/healthz"), "/healthz", proc=proc)
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    round_trip(nats_url)
    assert stop(proc) == 0
    assert not ports_file.exists()


# -- (c) --------------------------------------------------------------------------------------


@needs_monitor
def test_c_config_file_with_random_ports(tmp_path, processes):
    conf = tmp_path / "nats.conf"
    conf.write_text('port: -1\nhost: 127.0.0.1\nhttp: "127.0.0.1:-1"\n')
    proc = subprocess.Popen(NATSERVER + ["-c", str(conf)], cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    processes.append(proc)
    log = LogScraper(proc)
    monitor_port = int(log.wait_for(r"\[INF\] Starting http monitor on 127\.0\.0\.1:(\d+)$").group(1))
    port = int(log.wait_for(r"\[INF\] Listening for client connections on 127\.0\.0\.1:(\d+)$").group(1))
    log.wait_for(r"\[INF\] Server is ready$")
    assert port != monitor_port and 0 not in (port, monitor_port)
    status, body = http_get(monitor_port, "/varz")
    assert status == 200
    varz = json.loads(body)
    assert varz["port"] == port
    assert varz["http_port"] == -1  # as nats-server: the configured value, not the bound port
    round_trip(f"nats://127.0.0.1:{port}")
    assert stop(proc) == 0


# -- (d) --------------------------------------------------------------------------------------


@needs_monitor
def test_d_nats_py_test_helper_polls_varz(processes):
    # nats.py tests/utils.py: NATSD(...).start() then start_natsd() polls GET /varz.
    port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        NATSERVER + ["-p", str(port), "-m", str(http_port), "-a", "127.0.0.1"],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    processes.append(proc)
    status, body = poll(lambda: (r := http_get(http_port, "/varz"))[0] == 200 and r, "/varz", proc=proc)
    varz = json.loads(body)
    assert (varz["port"], varz["http_port"], varz["host"]) == (port, http_port, "127.0.0.1")
    round_trip(f"nats://127.0.0.1:{port}")
    # nats.py's helper stops the server with SIGKILL.
    proc.kill()
    assert proc.wait(TIMEOUT) == -signal.SIGKILL
