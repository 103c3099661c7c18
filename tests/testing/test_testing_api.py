"""natserver.testing.NatsServer: life cycle, recording, inspection (no faults: see
test_testing_faults.py; the pytest fixtures: test_plugin.py).

asyncio code runs in plain test functions through ``run()`` (the project runs async tests
under trio); every I/O test has a hard timeout.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import nats
import nats.errors
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver import Options, Sublist
from natserver.testing import Counters, Message, NatsServer, subject_matches

TIMEOUT = 10.0


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


_baseline: set = set()


@pytest.fixture(autouse=True)
def _threads_before():
    # Servers of other tests may be running (nats_server_session lives for the session).
    _baseline.clear()
    _baseline.update(threading.enumerate())


def natserver_threads() -> list[threading.Thread]:
    """natserver threads started since this test began."""
    return [t for t in threading.enumerate() if t.name.startswith("natserver") and t not in _baseline]


def port_is_free(port: int) -> bool:
    """Nothing listens on the port: connecting is refused and it can be bound again."""
    with socket.socket() as probe:
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            pass
        else:
            return False
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
    return True


def read_info(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


async def settle(nc) -> None:
    # nats-py 2.16 writes flush()'s PING ahead of commands still in its buffer: the second
    # flush is ordered after the SUBs of the first (see docs/testing.md).
    await nc.flush()
    await nc.flush()


# -- life cycle ---------------------------------------------------------------------------------


def test_start_stop_from_sync_code():
    server = NatsServer()
    assert not server.running
    assert server.start() is server
    try:
        assert server.running
        assert server.url == f"nats://127.0.0.1:{server.port}"
        info = read_info(server.port)
        assert info.startswith(b"INFO {") and b'"max_payload":1048576' in info
        assert [t.name for t in natserver_threads()] == [f"natserver:{server.port}"]
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
    finally:
        server.stop()
    assert not server.running
    assert natserver_threads() == []
    assert port_is_free(server.port)
    server.stop()  # idempotent


def test_start_is_fast():
    # The target is under 20 ms to ready (benchmarks/bench_startup.py measures it).
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        with NatsServer():
            times.append(time.perf_counter() - t0)
    assert sorted(times)[2] < 0.2  # generous: a loaded 2-core CI machine


def test_options_and_aliases():
    server = NatsServer(user="u", password="p", max_payload=1024)
    assert (server.options.username, server.options.password, server.options.max_payload) == ("u", "p", 1024)
    assert (server.options.host, server.options.port, server.options.quiet) == ("127.0.0.1", -1, True)
    assert NatsServer(token="t").options.authorization == "t"
    assert NatsServer(debug=True).options.quiet is False
    own = NatsServer(Options(host="127.0.0.1", port=-1, quiet=True, server_name="mine"))
    assert own.options.server_name == "mine"
    with pytest.raises(ValueError, match="max_payload"):
        NatsServer(max_payload=10, max_pending=5)
    with pytest.raises(TypeError):
        NatsServer(no_such_option=1)
    with pytest.raises(RuntimeError, match="not been started"):
        _ = NatsServer().port


def test_publish_and_lame_duck_before_start_say_the_server_is_not_running():
    # publish() read self.server.publish before _call could refuse: an AttributeError on None.
    server = NatsServer()
    with pytest.raises(RuntimeError, match="the server is not running"):
        server.publish("x", b"1")
    with pytest.raises(RuntimeError, match="the server is not running"):
        server.lame_duck()
    with pytest.raises(RuntimeError, match="not been started"):
        server.counters()


def test_start_failure_is_raised_and_leaves_nothing():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = NatsServer(port=port)
        with pytest.raises(OSError):
            server.start()
        assert not server.running
    assert natserver_threads() == []


def test_restart_on_the_same_port_nats_py_reconnects():
    async def main(server):
        events = []
        reconnected_called = asyncio.Event()

        async def disconnected():
            events.append("disconnected")

        async def reconnected():
            # nats-py resends the subscriptions before it calls this (and a slow callback
            # must not fail the test): wait for the callback itself, not the SUB.
            await asyncio.sleep(0)
            events.append("reconnected")
            reconnected_called.set()

        nc = await nats.connect(server.url, name="app", reconnect_time_wait=0.05,
                                disconnected_cb=disconnected, reconnected_cb=reconnected)
        try:
            sub = await nc.subscribe("after.restart")
            await settle(nc)
            port, old_id = server.port, server.server.server_id
            await server.restart_async(down_for=0.1)
            assert server.port == port and server.server.server_id != old_id
            await server.wait_for_subscription_async("after.restart", timeout=5)
            await asyncio.wait_for(reconnected_called.wait(), timeout=5)
            assert events == ["disconnected", "reconnected"]
            await nc.publish("after.restart", b"hello again")
            assert (await sub.next_msg(timeout=2)).data == b"hello again"
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))
        server.restart()  # the sync variant, with nobody connected
        assert read_info(server.port).startswith(b"INFO ")
    assert natserver_threads() == []


def test_async_with_from_asyncio_and_trio():
    async def with_asyncio():
        async with NatsServer() as server:
            nc = await nats.connect(server.url)
            await nc.publish("x", b"1")
            assert (await server.wait_for_message_async("x", timeout=2)).data == b"1"
            await nc.close()
        assert not server.running

    run(with_asyncio())

    async def with_trio():
        async with NatsServer() as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            assert (await stream.receive_some(4096)).startswith(b"INFO ")
            await stream.send_all(b"CONNECT {}\r\nPUB y 1\r\n2\r\n")
            assert (await server.wait_for_message_async("y", timeout=2)).data == b"2"
            await stream.aclose()
        assert not server.running

    trio.run(with_trio)
    assert natserver_threads() == []


async def test_trio_native_in_a_nursery():
    threads = set(threading.enumerate())
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await NatsServer(max_payload=2048).start_async(nursery)
            assert set(threading.enumerate()) == threads  # no thread: a task in our nursery
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            info = await stream.receive_some(4096)
            assert b'"max_payload":2048' in info
            await stream.send_all(b'CONNECT {"name":"native"}\r\nSUB z 1\r\nPUB z 2\r\nhi\r\n')
            message = await server.wait_for_message_async("z", timeout=2)
            assert (message.data, message.client) == (b"hi", "native")
            assert [c.name for c in server.connections()] == ["native"]  # direct call, same thread
            with pytest.raises(RuntimeError, match=r"wait_for_message\(\) would block the server's own trio loop: "
                                                   r"use `await wait_for_message_async\(\)`"):
                server.wait_for_message("z")
            with pytest.raises(RuntimeError, match="restart_async"):
                server.restart()
            port = server.port
            await server.restart_async()
            assert server.port == port
            while await stream.receive_some(4096):  # until the old server closed us
                pass
            await stream.aclose()
            await server.stop_async()
            assert not server.running
            assert port_is_free(port)


# -- recording ----------------------------------------------------------------------------------


def test_records_every_publish():
    async def main(server):
        nc = await nats.connect(server.url, name="pub")
        try:
            await nc.publish("orders.new", b"one")
            await nc.publish("orders.paid", b"two", reply="audit.inbox", headers={"Trace": "t1", "K": "v"})
            await nc.publish("other", b"three")
            await settle(nc)
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))
        messages = server.messages()
        assert [m.subject for m in messages] == ["orders.new", "orders.paid", "other"]
        first, second, _ = messages
        assert isinstance(first, Message)
        assert (first.data, first.reply, first.raw_headers, first.headers, first.client, first.action) == (
            b"one", None, None, None, "pub", "deliver")
        assert first.cid > 0 and abs(first.time - time.time()) < 60
        assert (second.data, second.reply, second.headers) == (b"two", "audit.inbox", {"Trace": "t1", "K": "v"})
        assert second.raw_headers.startswith(b"NATS/1.0\r\n")
        assert [m.data for m in server.messages("orders.*")] == [b"one", b"two"]
        assert [m.data for m in server.messages(">")] == [b"one", b"two", b"three"]
        assert server.messages("nothing.here") == []
        server.clear()
        assert server.messages() == []


def test_record_is_bounded():
    with NatsServer(max_messages=3) as server:
        for i in range(10):
            server.publish("n", str(i))
        assert [m.data for m in server.messages()] == [b"7", b"8", b"9"]
    with NatsServer(max_message_bytes=100) as server:
        for i in range(10):
            server.publish("big", bytes([i]) * 40)
        kept = server.messages()
        assert [m.data[0] for m in kept] == [8, 9]  # 2 x 40 bytes fit, a third would not


def test_recording_off_removes_the_hook():
    with NatsServer(record=False) as server:
        assert server.server.publish_hook is None  # the publish path is the normal one
        fault = server.drop("x")
        assert server.server.publish_hook is not None
        fault.cancel()
        assert server.server.publish_hook is None
        with pytest.raises(RuntimeError, match="recording is off"):
            server.wait_for_message("x", timeout=0.1)
        server.recording = True
        server.publish("x", "1")
        assert server.messages("x")[0].data == b"1"


def test_wait_for_message_blocking():
    with NatsServer() as server:
        server.publish("early", "0")
        assert server.wait_for_message("early", timeout=1).data == b"0"  # already recorded
        timer = threading.Timer(0.05, server.publish, ("later.a", "1"))
        timer.start()
        try:
            assert server.wait_for_message("later.*", timeout=5).data == b"1"
        finally:
            timer.join()
        for i in range(3):
            server.publish("many", str(i))
        assert [m.data for m in server.wait_for_messages("many", count=3, timeout=1)] == [b"0", b"1", b"2"]
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"0 of 1 message\(s\) on 'never' within 0.1s; recorded subjects: \['early'"):
            server.wait_for_message("never", timeout=0.1)
        assert time.monotonic() - t0 < 2
        with pytest.raises(TimeoutError, match="3 of 4"):
            server.wait_for_messages("many", count=4, timeout=0.05)
        assert server._waiters == []


def test_wait_for_message_async_asyncio_waits_without_blocking_the_loop():
    async def main(server):
        nc = await nats.connect(server.url)
        try:
            waiting = asyncio.ensure_future(server.wait_for_messages_async("ev.>", count=2, timeout=5))
            await asyncio.sleep(0.01)
            assert not waiting.done()
            await nc.publish("ev.a", b"1")  # the loop keeps running: nats-py can send
            await nc.publish("ev.b.c", b"2")
            assert [m.subject for m in await waiting] == ["ev.a", "ev.b.c"]
            with pytest.raises(TimeoutError):
                await server.wait_for_message_async("ev.none", timeout=0.05)
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))


def test_a_blocking_wait_inside_a_running_loop_fails_at_once():
    """It would stop the loop, and the client that was to publish with it: say what to call."""
    async def main(server):
        nc = await nats.connect(server.url, name="inside")
        try:
            await nc.publish("ev", b"1")  # sent later, once the loop runs again
            for call, method in ((lambda: server.wait_for_message("ev", timeout=5), "wait_for_message"),
                                 (lambda: server.wait_for_messages("ev", timeout=5), "wait_for_messages"),
                                 (lambda: server.wait_for_client("inside", timeout=5), "wait_for_client"),
                                 (lambda: server.wait_for_subscription("ev", timeout=5), "wait_for_subscription")):
                t0 = time.monotonic()
                with pytest.raises(RuntimeError, match=rf"{method}\(\) blocks, and it was called inside a running "
                                                       rf"asyncio event loop.*use `await {method}_async\(\)`"):
                    call()
                assert time.monotonic() - t0 < 1  # at once, not after the timeout
            assert (await server.wait_for_message_async("ev", timeout=5)).data == b"1"
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))


async def test_a_blocking_wait_inside_trio_fails_at_once(nats_server):
    with trio.fail_after(TIMEOUT):
        with pytest.raises(RuntimeError, match=r"inside a running trio event loop.*wait_for_message_async"):
            nats_server.wait_for_message("t.never", timeout=5)


async def test_wait_for_message_async_from_trio_with_a_threaded_server(nats_server):
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            got = []

            async def waiter():
                got.append(await nats_server.wait_for_message_async("t.*", timeout=5))

            nursery.start_soon(waiter)
            await trio.sleep(0.01)
            nats_server.publish("t.1", "x")
        assert got[0].subject == "t.1"
        with pytest.raises(TimeoutError):
            await nats_server.wait_for_message_async("t.never", timeout=0.05)


# -- inspection ---------------------------------------------------------------------------------


def test_connections_subscriptions_counters():
    async def main(server):
        a = await nats.connect(server.url, name="alpha")
        b = await nats.connect(server.url, name="beta")
        try:
            await a.subscribe("greet.*", queue="workers")
            await b.subscribe("greet.joe")
            await settle(a)
            await settle(b)
            await b.publish("greet.joe", b"hi")
            await settle(b)
            conns = {c.name: c for c in server.connections()}
            assert set(conns) == {"alpha", "beta"}
            assert conns["alpha"].subscriptions == ("greet.*",) and conns["alpha"].lang == "python3"
            assert [c.name for c in server.connections("beta")] == ["beta"]
            subs = server.subscriptions()
            assert {(s.client, s.subject, s.queue) for s in subs} == {("alpha", "greet.*", "workers"), ("beta", "greet.joe", None)}
            assert {s.client for s in server.subscriptions("greet.joe")} == {"alpha", "beta"}
            assert [s.client for s in server.subscriptions("greet.ann")] == ["alpha"]
            counters = server.counters()
            assert isinstance(counters, Counters)
            assert (counters.in_msgs, counters.out_msgs, counters.connections, counters.subscriptions) == (1, 2, 2, 2)
            assert (await server.wait_for_client_async("alpha", timeout=1))[0].name == "alpha"
            assert len(await server.wait_for_client_async(count=2, timeout=1)) == 2
            with pytest.raises(TimeoutError, match="connection"):
                await server.wait_for_client_async("gamma", timeout=0.05)
        finally:
            await a.close()
            await b.close()

    with NatsServer() as server:
        run(main(server))
        assert server.counters().total_connections == 2  # readable after stop too
        closed = {c.name: c for c in server.closed_connections()}
        assert set(closed) == {"alpha", "beta"} and closed["alpha"].close_reason == "Client Closed"
        assert closed["alpha"].subscriptions == ("greet.*",) and closed["beta"].in_msgs == 1
    assert server.connections() == [] and server.subscriptions() == []


def test_closed_connections_say_why():
    with NatsServer() as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
            sock.sendall(b'CONNECT {"name":"kicked"}\r\nSUB a 1\r\nPING\r\n')
            server.wait_for_client("kicked", timeout=TIMEOUT)
            server.close_client("kicked")
            sock.settimeout(TIMEOUT)
            while sock.recv(4096):  # until the server closed it
                pass
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
            sock.sendall(b'CONNECT {"name":"garbled"}\r\nNOPE\r\n')
            sock.settimeout(TIMEOUT)
            while sock.recv(4096):
                pass
        deadline = time.monotonic() + TIMEOUT
        while len(server.closed_connections()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(c.name, c.close_reason, c.subscriptions) for c in server.closed_connections()] == [
            ("kicked", "Kicked", ("a",)), ("garbled", "Protocol Violation", ())]
        assert [c.cid for c in server.closed_connections("garbled")] == [2]
        assert all(c.close_reason == "" for c in server.connections())


def test_server_side_publish_reaches_nats_py():
    async def main(server):
        nc = await nats.connect(server.url)
        try:
            sub = await nc.subscribe("from.server")
            await settle(nc)
            server.publish("from.server", b"payload", reply="re.ply", headers={"A": "1"})
            msg = await sub.next_msg(timeout=2)
            assert (msg.data, msg.reply, msg.headers) == (b"payload", "re.ply", {"A": "1"})
        finally:
            await nc.close()

    with NatsServer() as server:
        run(main(server))
        recorded = server.messages("from.server")[0]
        assert (recorded.cid, recorded.client, recorded.headers) == (0, "", {"A": "1"})


def test_lame_duck_mode_as_nats_py_sees_it():
    async def main(server):
        events = []

        async def lame_duck():
            events.append("lame_duck")

        async def disconnected():
            events.append("disconnected")

        async def error(e):
            events.append(type(e).__name__)

        nc = await nats.connect(server.url, reconnect_time_wait=0.05, max_reconnect_attempts=2,
                                lame_duck_mode_cb=lame_duck, disconnected_cb=disconnected, error_cb=error)
        try:
            server.lame_duck(duration=0.3, grace_period=0.1)
            with pytest.raises(ConnectionRefusedError):  # no longer listening, at once
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            deadline = time.monotonic() + 5
            while server.running and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not server.running  # lame duck ends with the server stopped
            await asyncio.sleep(0.1)
            assert events[:3] == ["lame_duck", "UnexpectedEOF", "disconnected"]
            assert "ConnectionRefusedError" in events[3:]  # its reconnects find nobody
        finally:
            await nc.close()

    server = NatsServer().start()
    try:
        run(main(server))
        assert server.server.closed_clients[-1]["reason"] == "Server Shutdown"
    finally:
        server.stop()
    assert natserver_threads() == []


# -- subjects -----------------------------------------------------------------------------------

tokens = st.sampled_from(["a", "b", "c", "foo"])


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(st.one_of(tokens, st.just("*")), min_size=1, max_size=4).flatmap(
        lambda ts: st.sampled_from([ts, ts + [">"]])),
    subject=st.lists(tokens, min_size=1, max_size=5),
)
def test_subject_matches_agrees_with_the_server_sublist(pattern, subject):
    pattern_text, subject_text = ".".join(pattern), ".".join(subject)

    class Sub:
        def __init__(self, subject):
            self.subject = subject
            self.queue = None

    sublist = Sublist()
    sublist.insert(Sub(pattern_text.encode()))
    expected = len(sublist.match(subject_text.encode())) == 1
    assert subject_matches(pattern_text, subject_text) == expected


def test_invalid_patterns_are_refused():
    with NatsServer(record=False) as server:
        for bad in ("", "a..b", "a.>.b"):
            with pytest.raises(ValueError):
                server.drop(bad)
