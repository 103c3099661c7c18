"""natserver.nsq inside the whole server: the command line and config block, log lines,
the ports file, restart with messages on disk, and bad input from many clients never
disturbing healthy NSQ and NATS clients."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
import urllib.request

import pytest
import trio

import natserver
from natserver import Options
from natserver.config.flags import build_options, parse_args
from natserver.config.mapping import options_from_dict
from natserver.nsq.config import parse_nsq_options
from natserver.testing import NatsServer
from tests.nsq.helpers import FRAME_MESSAGE, FRAME_RESPONSE, RawClient, nsq_options, parse_message

TIMEOUT = 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_flags_and_config_block(tmp_path):
    given = parse_args(["--nsq_port", "-1", "--nsq_http_port", "4999"])
    options = build_options(given)
    assert options.nsq == {"port": -1, "http_port": 4999}
    conf = tmp_path / "s.conf"
    conf.write_text("nsq {\n  port: 5150\n  max_rdy_count: 100\n  msg_timeout: \"30s\"\n  bridge: true\n}\n")
    options = build_options(parse_args(["-c", str(conf), "--nsq_http_port", "-1"]))
    assert options.nsq == {"port": 5150, "max_rdy_count": 100, "msg_timeout": "30s", "bridge": True, "http_port": -1}
    parsed = parse_nsq_options(options.nsq)
    assert (parsed.port, parsed.http_port, parsed.max_rdy_count, parsed.msg_timeout, parsed.bridge) == (
        5150, -1, 100, 30.0, True)
    assert parse_nsq_options({"msg_timeout": 1500}).msg_timeout == 1.5
    with pytest.raises(ValueError, match='unknown field "max_rdy"'):
        parse_nsq_options({"max_rdy": 1})
    with pytest.raises(ValueError):
        parse_nsq_options({"port": 70000})
    assert options_from_dict({"port": 4222}).nsq is None  # off unless configured


def test_command_line_logs_and_ports_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1", "--nsq_port", "-1",
           "--nsq_http_port", "-1", "--ports_file_dir", str(tmp_path)]
    with subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                          cwd=tmp_path) as proc:
        try:
            deadline = time.monotonic() + TIMEOUT
            lines = []
            while time.monotonic() < deadline:
                line = proc.stderr.readline()
                lines.append(line)
                if "Server is ready" in line:
                    break
            text = "".join(lines)
            assert "TCP: listening on 127.0.0.1:" in text and "HTTP: listening on 127.0.0.1:" in text
            ports_files = []
            while time.monotonic() < deadline and not ports_files:
                ports_files = [p for p in os.listdir(tmp_path) if p.endswith(".ports")]
                time.sleep(0.05)
            ports = json.loads((tmp_path / ports_files[0]).read_text())
            tcp_port = int(ports["nsq"][0].rsplit(":", 1)[1])
            assert f"TCP: listening on 127.0.0.1:{tcp_port}" in text
            assert ports["nsq_http"][0].startswith("http://127.0.0.1:")
        finally:
            proc.terminate()
            proc.wait(TIMEOUT)


async def test_restart_keeps_queued_messages(tmp_path):
    """Messages in memory, on disk (beyond mem_queue_size), in flight and deferred at
    shutdown are all there after a restart, with topics, channels and paused states."""
    block = nsq_options(tmp_path, mem_queue_size=3)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, Options(port=-1, quiet=True, nsq=block))
            front = server.nsq
            c = await RawClient.connect(front.tcp_port)
            await c.cmd(b"SUB durable ch")
            await c.frame()
            await c.cmd(b"RDY 1")
            for i in range(10):
                await c.cmd(b"PUB durable", b"m%d" % i)
            frames = [await c.frame() for _ in range(11)]
            assert sum(kind == FRAME_MESSAGE for kind, _ in frames) == 1
            await c.cmd(b"DPUB durable 3600000", b"deferred")
            await c.cmd(b"PUB ghost#ephemeral", b"gone")
            assert await c.frame() == (FRAME_RESPONSE, b"OK")
            assert await c.frame() == (FRAME_RESPONSE, b"OK")
            front.engine.topics["durable"].channels["ch"].pause()
            channel = front.engine.topics["durable"].channels["ch"]
            assert channel.queue.backend_depth > 0
            await server.shutdown()
        assert os.path.exists(os.path.join(block["data_path"], "nsqd.dat"))
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, Options(port=-1, quiet=True, nsq=block))
            front = server.nsq
            assert set(front.engine.topics) == {"durable"}
            channel = front.engine.topics["durable"].channels["ch"]
            assert channel.paused and channel.depth == 11
            channel.unpause(trio.current_time())
            c = await RawClient.connect(front.tcp_port)
            await c.cmd(b"SUB durable ch")
            await c.frame()
            await c.cmd(b"RDY 100")
            bodies = []
            for _ in range(11):
                kind, data = await c.frame()
                assert kind == FRAME_MESSAGE
                bodies.append(parse_message(data)[3])
            assert sorted(bodies) == sorted([b"m%d" % i for i in range(10)] + [b"deferred"])
            await server.shutdown()


async def test_bad_input_from_many_clients_never_disturbs_healthy_ones(tmp_path):
    """Random and mutated frames from 30 connections while an NSQ consumer, an NSQ
    producer and a NATS subscriber keep working."""
    rng = random.Random(14)
    good = [b"PUB t\n" + struct.pack(">i", 3) + b"abc", b"SUB t c\n", b"RDY 5\n", b"NOP\n",
            b"MPUB t\n" + struct.pack(">iii", 9, 1, 1) + b"z", b"IDENTIFY\n" + struct.pack(">i", 2) + b"{}",
            b"FIN 0123456789abcdef\n", b"DPUB t 10\n" + struct.pack(">i", 1) + b"d"]

    def mutated() -> bytes:
        data = bytearray(b"  V2" + b"".join(rng.choice(good) for _ in range(rng.randint(1, 6))))
        for _ in range(rng.randint(0, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data += struct.pack(">I", rng.choice([0x7FFFFFFF, 0xFFFFFFFF, 1 << 30]))
        if rng.random() < 0.2:
            data = bytearray(rng.randbytes(rng.randint(1, 300)))
        return bytes(data)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, Options(port=-1, quiet=True, nsq=nsq_options(tmp_path)))
            front = server.nsq
            consumer = await RawClient.connect(front.tcp_port)
            await consumer.cmd(b"SUB healthy ch")
            assert await consumer.frame() == (FRAME_RESPONSE, b"OK")
            await consumer.cmd(b"RDY 1000")
            nats_stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await nats_stream.receive_some(4096)  # INFO
            await nats_stream.send_all(b"CONNECT {}\r\nSUB healthy.nats 1\r\nPING\r\n")
            got = b""
            while b"PONG" not in got:
                got += await nats_stream.receive_some(4096)

            async def attacker(i):
                for _ in range(5):
                    try:
                        stream = await trio.open_tcp_stream("127.0.0.1", front.tcp_port)
                        await stream.send_all(mutated())
                        with trio.move_on_after(0.2):
                            while await stream.receive_some(65536):
                                pass
                        await stream.aclose()
                    except (trio.BrokenResourceError, OSError):
                        pass

            async with trio.open_nursery() as attackers:
                for i in range(30):
                    attackers.start_soon(attacker, i)
                producer = await RawClient.connect(front.tcp_port)
                for i in range(50):
                    await producer.cmd(b"PUB healthy", b"msg%d" % i)
                    assert await producer.frame() == (FRAME_RESPONSE, b"OK")
                    await trio.sleep(0.005)
            received = []
            while len(received) < 50:
                kind, data = await consumer.frame()
                assert kind == FRAME_MESSAGE
                received.append(parse_message(data)[3])
            assert received == [b"msg%d" % i for i in range(50)]
            await nats_stream.send_all(b"PUB healthy.nats 2\r\nok\r\nPING\r\n")
            got = b""
            while b"PONG" not in got:
                got += await nats_stream.receive_some(4096)
            assert b"MSG healthy.nats 1 2\r\nok\r\n" in got
            await server.shutdown()


async def test_nsqz_on_the_monitoring_port(tmp_path):
    """NSQ clients, topics and channels appear in natserver's monitoring /nsqz; without the
    front-end /nsqz says it is disabled."""
    from tests.nsq.helpers import http_request

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            options = Options(port=-1, http_port=-1, quiet=True, nsq=nsq_options(tmp_path))
            server = await nursery.start(natserver.serve, options)
            c = await RawClient.connect(server.nsq.tcp_port)
            await c.cmd(b"SUB watched ch")
            assert await c.frame() == (FRAME_RESPONSE, b"OK")
            status, _, body = await http_request(server.monitor.port, "GET", "/nsqz")
            nsqz = json.loads(body)
            assert status == 200 and nsqz["server_id"] == server.server_id
            assert (nsqz["clients"], nsqz["topic_count"], nsqz["channel_count"]) == (1, 1, 1)
            assert nsqz["topics"][0]["channels"][0]["client_count"] == 1
            await server.shutdown()
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, Options(port=-1, http_port=-1, quiet=True))
            status, _, body = await http_request(server.monitor.port, "GET", "/nsqz")
            assert json.loads(body)["disabled"] is True
            await server.shutdown()


async def test_reload_refuses_a_changed_nsq_block(tmp_path):
    from natserver.server.signals import ReloadError, reload_options

    conf = tmp_path / "nsq.conf"
    block = f'nsq {{\n  port: -1\n  http_port: -1\n  data_path: "{tmp_path / "data"}"\n  max_rdy_count: 100\n}}\n'
    conf.write_text("port: -1\n" + block)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            options = build_options(parse_args(["-c", str(conf)])).copy(quiet=True)  # as the command line
            server = await nursery.start(natserver.serve, options)
            assert reload_options(server).nsq == server.options.nsq  # unchanged: fine
            conf.write_text("port: -1\n" + block.replace("max_rdy_count: 100", "max_rdy_count: 200"))
            with pytest.raises(ReloadError, match="config reload not supported for Nsq"):
                reload_options(server)
            await server.shutdown()


def test_two_in_process_servers_keep_their_own_nsq_data(tmp_path, monkeypatch):
    """Issue 30 item 18: with no data_path, two servers running at once share nothing (each
    test server gets a private data path, as its JetStream store) and a topic made on one is
    not listed by the other; the private paths go when the servers stop."""
    monkeypatch.chdir(tmp_path)  # nsqd's own default, the working directory, must stay untouched
    first = NatsServer(nsq={"port": -1, "http_port": -1}).start()
    second = NatsServer(nsq={"port": -1, "http_port": -1}).start()
    paths = []
    try:
        for server in (first, second):
            paths.append(server.server.options.nsq["data_path"])
        assert paths[0] != paths[1] and all(os.path.isdir(p) for p in paths)
        request = urllib.request.Request(f"http://127.0.0.1:{first.server.nsq.http_port}/topic/create?topic=only_one",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
            assert resp.status == 200

        def topics(server) -> list:
            url = f"http://127.0.0.1:{server.server.nsq.http_port}/stats?format=json"
            with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
                return [t["topic_name"] for t in json.loads(resp.read())["topics"]]

        assert topics(first) == ["only_one"]
        assert topics(second) == []
    finally:
        first.stop()
        second.stop()
    assert not any(os.path.exists(p) for p in paths)
    assert os.listdir(tmp_path) == []


def test_second_server_on_one_data_path_is_refused(tmp_path):
    """nsqd locks its data path (internal/dirlock): a second server given the same directory, or
    started in the same working directory with the default, fails instead of sharing nsqd.dat."""
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1", "--nsq_port", "-1",
           "--nsq_http_port", "-1"]
    with subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                          cwd=tmp_path) as first:
        try:
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and "Server is ready" not in first.stderr.readline():
                pass
            second = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT)
            assert second.returncode != 0
            assert f"failed to lock data-path: cannot lock directory {tmp_path} - resource temporarily unavailable" \
                in second.stderr
            assert first.poll() is None
        finally:
            first.terminate()
            first.wait(TIMEOUT)
    assert os.path.exists(tmp_path / "nsqd.dat")  # nsqd's default data path: the working directory
