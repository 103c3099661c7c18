"""The benchmark harness's own protocol handling (benchmarks/wire.py), which every scenario's
"exactly what it should" check rests on."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from benchmarks.wire import PING, PONG, RECV_BUF, FixedFrameCounter, ScanCounter, SubConn, _drain_to_pong, _SubState

FRAME = b"MSG bench 1 4\r\nxxxx\r\n"


@pytest.mark.parametrize("counter", [ScanCounter, lambda: FixedFrameCounter(len(FRAME))])
@pytest.mark.parametrize("after_pong", [b"", PING, PING + PING])
def test_drain_ends_at_the_pong_even_with_a_keepalive_ping_behind_it(counter, after_pong):
    """After the drain's PING the server sends what it still owed, the PONG and, when its first
    keep-alive falls then (about 2 s after connect, about when a round ends), a PING: the drain
    ends at the PONG, with the deliveries counted, instead of waiting for a stream ending in
    PONG (a 5 s timeout, then a failed round)."""
    ours, server = socket.socketpair()
    ours.settimeout(5)

    def serve():
        assert server.recv(len(PING)) == PING
        server.sendall(FRAME * 3 + PONG + after_pong)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        st = _SubState(SubConn(0, b"", len(FRAME)), ours, counter())
        st.feed(bytearray(FRAME * 2), len(FRAME) * 2)  # delivered during the round
        _drain_to_pong(st, bytearray(RECV_BUF))
        thread.join(5)
        assert st.error is None and not st.disconnected
        assert st.counter.count == 5
        assert st.counter.frames_ok()
    finally:
        ours.close()
        server.close()


def test_answering_a_keepalive_ping_keeps_the_drain_timeout():
    """A subscriber answers the server's PINGs; doing so must leave the socket's timeout (the
    drain's 5 s) as it was, or a drain whose PONG never comes waits for ever."""
    ours, server = socket.socketpair()
    try:
        for timeout in (5.0, 0.0):
            ours.settimeout(timeout)
            st = _SubState(SubConn(0, b""), ours, ScanCounter())
            st.feed(bytearray(PING), len(PING))
            assert server.recv(16) == PONG
            assert ours.gettimeout() == timeout
    finally:
        ours.close()
        server.close()


def test_natsgo_scenarios_are_skipped_with_the_reason_when_nats_go_is_missing(monkeypatch, tmp_path, capsys):
    """Without nats.go (or Go) the nats.go-driven scenarios say why and are skipped; the run
    still succeeds, and nothing is started."""
    from benchmarks import natsgo, run

    monkeypatch.setenv("NATSGO_GOPATH", str(tmp_path))  # no src/github.com/nats-io/nats.go here
    monkeypatch.setattr(natsgo, "_built", None)
    why = natsgo.missing()
    assert why is not None and ("nats.go not found" in why or "no Go toolchain" in why)
    assert run.main(["--only", "q,p", "--rounds", "1", "--nats-server-cmd", "none",
                     "--natserver-cmd", "false", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped: " + why) == 2


def test_hops_splits_round_trips_into_server_and_client_turns(tmp_path):
    """benchmarks.hops reads the times between the four packets of each round trip."""
    import struct

    from benchmarks import hops

    def packet(t_us: int, sport: int, dport: int, data: bytes) -> bytes:
        tcp = struct.pack(">HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x18, 65535, 0, 0) + data
        ip = bytes([0x45]) + bytes(19) + tcp
        frame = bytes(12) + b"\x08\x00" + ip
        return struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame)) + frame

    port = 4222
    steps = [(50, 5001, b"PUB bench.req _INBOX.a.1 2\r\nxx\r\n"), (10, port, b"MSG bench.req 1 _INBOX.a.1 2\r\nxx\r\n"),
             (40, 5000, b"PUB _INBOX.a.1 2\r\nxx\r\n"), (20, port, b"MSG _INBOX.a.1 1 2\r\nxx\r\n")]
    blob, t = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1), 0
    for _ in range(3):
        for gap, other, data in steps:
            t += gap
            blob += packet(t, port, 6000, data) if other == port else packet(t, other, port, data)
    path = tmp_path / "rr.pcap"
    path.write_bytes(blob)
    got = {name: [round(x, 6) for x in times] for name, times in hops.hops(str(path), port).items()}
    assert got == {hops.STEPS[0]: [10.0] * 3, hops.STEPS[1]: [40.0] * 3, hops.STEPS[2]: [20.0] * 3,
                   hops.STEPS[3]: [50.0] * 2}


def test_natspy_reqrep_driver_answers_every_request(capsys):
    # Scenario t's driver against an in-process server: every request (warm-up included) is
    # answered once by the responder process, intact, and the latencies are reported.
    from benchmarks import natspy_reqrep
    from natserver.testing import NatsServer

    with NatsServer() as server:
        assert natspy_reqrep.main(["--url", server.url, "--warmup", "10", "--duration", "0.2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [] and out["bad"] == 0
    assert out["requests"] > 0 and out["answered"] == out["requests"] + 10
    assert 0 < out["p50_us"] <= out["p90_us"] <= out["p99_us"]


def test_a_server_counts_as_started_once_it_serves_not_once_greeted():
    """natserver's early greeter sends the INFO while trio and the server are still imported
    (~0.45 s, ~18 MB more): a round measuring from the INFO charged that start-up to its load
    (scenario h's RSS per connection at 1000 read 24.8 KiB instead of ~7). The harness's start
    returns once the server proper answered a PING, after the log's "Server is ready"."""
    from benchmarks.servers import ServerSpec, default_natserver_cmd

    srv = ServerSpec("natserver", default_natserver_cmd()).start(timeout=60)
    try:
        assert srv.info_line.startswith(b"INFO {")
        assert "Server is ready" in srv.log_text()
    finally:
        srv.stop()


@pytest.mark.parametrize("answer", [PONG, b"-ERR 'Authorization Violation'\r\n", b""])
def test_the_start_check_ends_at_the_servers_answer(answer):
    """The start check's CONNECT + PING ends at PONG, at an -ERR (a server that wants
    credentials), or at the close after one."""
    from benchmarks.servers import _served

    ours, server = socket.socketpair()
    ours.settimeout(5)
    server.settimeout(5)
    try:
        def serve():
            got = b""
            while not got.endswith(PING):
                got += server.recv(4096)
            assert got.startswith(b"CONNECT {")
            server.sendall(answer)
            if not answer:
                server.shutdown(socket.SHUT_WR)

        thread = threading.Thread(target=serve)
        thread.start()
        _served(ours, b"")
        thread.join(5)
        assert not thread.is_alive()
    finally:
        ours.close()
        server.close()


def test_natsgo_run_marked_calls_the_mark_when_the_driver_prints_it(monkeypatch, tmp_path):
    """The JetStream modes print "MARK" where their timed part starts (after making the stream
    and storing messages): the caller's mark (the server's CPU then) runs at that line, and
    the rest of the output is the report."""
    from benchmarks import bench_jetstream, natsgo

    driver = tmp_path / "natsgo_bench"
    driver.write_text("#!/bin/sh\necho MARK\nsleep 0.2\necho '{\"rate\": 5.0, \"ok\": true, \"args\": \"'\"$*\"'\"}'\n")
    driver.chmod(0o755)
    monkeypatch.setattr(natsgo, "_built", (driver, ""))
    marks: list = []
    report = natsgo.run_marked(4222, ["-mode", "jspub"], 10, lambda: marks.append(time.perf_counter()))
    assert len(marks) == 1 and time.perf_counter() - marks[0] >= 0.2  # (at the MARK, before the rest)
    assert report == {"rate": 5.0, "ok": True, "args": "-url nats://127.0.0.1:4222 -mode jspub"}
    monkeypatch.setattr(bench_jetstream, "mark", lambda: marks.append(0))
    assert bench_jetstream.bench_natsgo(4222, 1.5, ["-mode", "kvput"]) == (5.0, True)
    assert marks[-1] == 0
    driver.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    with pytest.raises(RuntimeError, match="exited with 3: nope"):
        natsgo.run_marked(4222, [], 10, lambda: None)
