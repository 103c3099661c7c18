"""Fault injection of natserver.testing, checked from nats-py's side: for each fault the client
must see what it would see from a real server in that situation (a disconnect and reconnect,
a failed connect attempt, a slow-consumer disconnect, no responders, a timeout...).

asyncio code runs in plain test functions through ``run()``; every test has a hard timeout.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time

import nats
import nats.errors
import pytest

from natserver.testing import NatsServer

TIMEOUT = 10.0


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Events(list):
    """What nats-py reports through its callbacks, in order: "disconnected", "reconnected",
    "lame_duck", "closed" and the class names of the errors."""

    def callbacks(self) -> dict:
        async def error(e):
            self.append(type(e).__name__)

        async def disconnected():
            self.append("disconnected")

        async def reconnected():
            self.append("reconnected")

        async def closed():
            self.append("closed")

        return {"error_cb": error, "disconnected_cb": disconnected, "reconnected_cb": reconnected, "closed_cb": closed}

    def errors(self) -> list:
        return [e for e in self if e not in ("disconnected", "reconnected", "closed")]

    async def wait_for(self, what: str, timeout: float = 5.0, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while self.count(what) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what!r} within {timeout}s: {list(self)}")
            await asyncio.sleep(0.005)


async def connect(url: str, events: Events | None = None, **options):
    options.setdefault("reconnect_time_wait", 0.05)
    if events is not None:
        options.update(events.callbacks())
    return await nats.connect(url, **options)


async def settle(nc) -> None:
    # nats-py 2.16 writes flush()'s PING ahead of commands still in its buffer.
    await nc.flush()
    await nc.flush()


@pytest.fixture
def server():
    with NatsServer() as server:
        yield server


# -- closing connections --------------------------------------------------------------------------


def test_close_client_is_a_disconnect_then_a_reconnect(server):
    async def main():
        events = Events()
        nc = await connect(server.url, events, name="victim")
        other = await connect(server.url, name="bystander")
        try:
            sub = await nc.subscribe("still.here")
            await settle(nc)
            assert server.close_client("victim") == 1
            await events.wait_for("reconnected")
            # The server closed the socket without a word, as a kicked client sees it.
            assert events == ["UnexpectedEOF", "disconnected", "reconnected"]
            assert other.is_connected and other.stats["reconnects"] == 0
            await server.wait_for_subscription_async("still.here")  # nats-py replayed its SUB
            await other.publish("still.here", b"after")
            assert (await sub.next_msg(timeout=2)).data == b"after"
            with pytest.raises(LookupError, match="no open connection with name='nobody'"):
                server.close_client("nobody")
            with pytest.raises(TypeError):
                server.close_client()
            cid = server.connections("victim")[0].cid
            assert server.close_client(cid=cid) == 1
            await events.wait_for("reconnected", count=2)
            assert server.close_all_clients() == 2
            await events.wait_for("reconnected", count=3)
            await asyncio.sleep(0.05)
            assert other.stats["reconnects"] == 1
        finally:
            await nc.close()
            await other.close()

    run(main())
    assert [c["reason"] for c in server.server.closed_clients][:2] == ["Kicked", "Kicked"]


# The first connect attempt of nats-py fails at the stage, the next one succeeds (nats-py
# retries a failed first connect when allow_reconnect is on, its default).
STAGE_ERRORS = {
    # The socket closes before INFO: nats-py's "empty response" error (from readline).
    "before_info": {"Error"},
    # INFO, then the socket closes while nats-py sends CONNECT/PING or reads PONG.
    "after_info": {"ConnectionResetError", "BrokenPipeError", "UnexpectedEOF", "Error"},
}


@pytest.mark.parametrize("stage", ["before_info", "after_info", "after_connect", "after_ping"])
def test_close_during_the_handshake(server, stage):
    async def main():
        events = Events()
        fault = server.close_connections(stage)
        nc = await connect(server.url, events, name="app")
        try:
            if stage in STAGE_ERRORS:
                # connect() itself saw the failed attempt and retried.
                assert set(events.errors()) <= STAGE_ERRORS[stage] and events.errors()
                assert "disconnected" not in events
            else:
                # The handshake PONG never came; nats-py's connect() returns anyway and finds
                # the closed socket right after: a disconnect and reconnect.
                await events.wait_for("reconnected")
                assert events[:2] == ["UnexpectedEOF", "disconnected"]
            assert (fault.hits, fault.active) == (1, False)
            await server.wait_for_client_async("app")
            assert server.counters().total_connections == 2
            await nc.publish("works", b"yes")
            assert (await server.wait_for_message_async("works")).data == b"yes"
        finally:
            await nc.close()

    run(main())


def test_a_closed_connection_answers_late_bytes_with_eof_not_a_reset(server):
    """A client whose PING is still unread when the fault closes the connection (a second
    segment, as happens on a loaded machine) reads EOF, not a reset: a reset made nats-py
    give up instead of reconnecting. Here many PINGs follow the CONNECT at once, so some are
    unread when the fault closes: a plain close() would answer them with RST (the close
    lingers, reading, see Client.linger_on_close)."""
    server.close_connections("after_connect")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        assert sock.recv(4096).startswith(b"INFO ")
        sock.sendall(b"CONNECT {}\r\n" + b"PING\r\n" * 200_000)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        assert data == b""  # EOF: no PONG, and no ConnectionResetError on the way


def test_close_before_info_without_reconnect_fails_the_connect(server):
    async def main():
        server.close_connections("before_info")
        with pytest.raises(nats.errors.Error, match="empty response from server when expecting INFO"):
            await connect(server.url, allow_reconnect=False)
        server.close_connections("after_info")
        with pytest.raises(OSError):
            await connect(server.url, allow_reconnect=False)

    run(main())


def test_close_at_the_next_ping_of_a_connected_client(server):
    async def main():
        events = Events()
        nc = await connect(server.url, events, name="pinger")
        try:
            fault = server.close_connections("after_ping", name="pinger")
            with pytest.raises(nats.errors.FlushTimeoutError):  # its PING got no PONG
                await nc.flush(timeout=0.3)
            await events.wait_for("reconnected")
            assert events[:2] == ["UnexpectedEOF", "disconnected"]
            assert fault.hits == 1
            await nc.flush(timeout=2)
        finally:
            await nc.close()

    run(main())
    with pytest.raises(ValueError, match="name is not known"):
        server.close_connections("before_info", name="x")
    with pytest.raises(ValueError, match="stage must be one of"):
        server.close_connections("after_pong")


def test_refuse_connections_for_a_while(server):
    async def main():
        events = Events()
        nc = await connect(server.url, events, name="app")
        try:
            server.refuse_connections(0.3)
            t0 = time.monotonic()
            server.close_client("app")
            await events.wait_for("reconnected")
            assert time.monotonic() - t0 >= 0.25
            # Each attempt in the window: accepted and closed before INFO.
            assert events[:2] == ["UnexpectedEOF", "disconnected"]
            assert set(events.errors()[1:]) == {"Error"} and len(events.errors()) >= 3
            server.refuse_connections()  # until accept_connections()
            with pytest.raises(nats.errors.Error, match="empty response"):
                await connect(server.url, allow_reconnect=False)
            server.accept_connections()
            late = await connect(server.url, allow_reconnect=False)
            await late.close()
            assert server.server.connection_hook is None
        finally:
            await nc.close()

    run(main())


# -- messages -------------------------------------------------------------------------------------


def test_drop_the_next_n_messages(server):
    async def main():
        nc = await connect(server.url, name="pub")
        try:
            sub = await nc.subscribe("orders.*")
            await settle(nc)
            fault = server.drop("orders.*", count=2)
            for i in range(5):
                await nc.publish(f"orders.{i}", str(i).encode())
            got = [(await sub.next_msg(timeout=2)).data for _ in range(3)]
            assert got == [b"2", b"3", b"4"]
            assert [m.action for m in server.messages("orders.*")] == ["drop", "drop", "deliver", "deliver", "deliver"]
            assert (fault.hits, fault.active) == (2, False)

            async def respond(msg):
                await msg.respond(b"pong")

            await nc.subscribe("svc", cb=respond)
            await settle(nc)
            server.drop("svc")  # a lost request: the requester times out
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("svc", b"", timeout=0.2)
            assert (await nc.request("svc", b"", timeout=2)).data == b"pong"
            forever = server.drop("svc", count=None)
            for _ in range(2):
                with pytest.raises(nats.errors.TimeoutError):
                    await nc.request("svc", b"", timeout=0.05)
            forever.cancel()
            assert (await nc.request("svc", b"", timeout=2)).data == b"pong"
        finally:
            await nc.close()

    run(main())


def test_delay_deliveries(server):
    async def main():
        nc = await connect(server.url)
        try:
            async def respond(msg):
                await msg.respond(b"late answer")

            await nc.subscribe("slow.svc", cb=respond)
            sub = await nc.subscribe("feed")
            await settle(nc)
            server.delay("slow.svc", 0.3, count=2)
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("slow.svc", b"", timeout=0.1)
            t0 = time.monotonic()
            assert (await nc.request("slow.svc", b"", timeout=3)).data == b"late answer"
            assert time.monotonic() - t0 >= 0.25
            server.delay("feed", 0.2, count=3)
            t0 = time.monotonic()
            for i in range(4):
                await nc.publish("feed", str(i).encode(), headers={"N": str(i)})
            first = await sub.next_msg(timeout=2)
            assert first.data == b"3" and time.monotonic() - t0 < 0.15  # not delayed (count=3)
            later = [await sub.next_msg(timeout=2) for _ in range(3)]
            assert [m.data for m in later] == [b"0", b"1", b"2"]  # order kept
            assert [m.headers for m in later] == [{"N": "0"}, {"N": "1"}, {"N": "2"}]
            assert time.monotonic() - t0 >= 0.15
            assert [m.action for m in server.messages("feed")] == ["delay", "delay", "delay", "deliver"]
        finally:
            await nc.close()

    run(main())


def test_no_responders_even_with_a_responder(server):
    async def main():
        nc = await connect(server.url, name="requester")
        try:
            async def respond(msg):
                await msg.respond(b"here")

            await nc.subscribe("svc.>", cb=respond)
            await settle(nc)
            fault = server.no_responders("svc.*", count=1)
            await nc.publish("svc.plain", b"not a request")  # plain publishes pass
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request("svc.a", b"", timeout=2)
            assert (await nc.request("svc.a", b"", timeout=2)).data == b"here"
            assert fault.hits == 1
            assert [m.action for m in server.messages("svc.>")][:2] == ["deliver", "no_responders"]
        finally:
            await nc.close()

    run(main())


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not installed")
def test_no_responders_is_what_nats_server_sends():
    """Differential: the fault's answer is the real server's answer when nobody listens."""

    async def request_error(url: str, subscribe: bool) -> tuple:
        nc = await connect(url)
        try:
            if subscribe:
                async def respond(msg):
                    await msg.respond(b"")

                await nc.subscribe("q", cb=respond)
                await settle(nc)
            with pytest.raises(Exception) as info:
                await nc.request("q", b"", timeout=2)
            return type(info.value), str(info.value)
        finally:
            await nc.close()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([shutil.which("nats-server"), "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        real = run(request_error(f"nats://127.0.0.1:{port}", subscribe=False))
    finally:
        proc.terminate()
        proc.wait(5)
    with NatsServer() as server:
        server.no_responders("q")
        ours = run(request_error(server.url, subscribe=True))
    assert ours == real and real[0] is nats.errors.NoRespondersError


# -- slow consumers and stalled connections -------------------------------------------------------


def test_stop_writing_makes_a_slow_consumer(server):
    async def main():
        events = Events()
        slow = await connect(server.url, events, name="slow")
        producer_events = Events()
        producer = await connect(server.url, producer_events, name="producer")
        try:
            sub = await slow.subscribe("firehose")
            await settle(slow)
            assert server.stop_writing("slow", max_pending=64 * 1024) == 1
            assert server.connections("slow")[0].writing_stopped
            for _ in range(10):
                await producer.publish("firehose", b"x" * 8192)
            await settle(producer)
            # The server closed it as nats-server closes a slow consumer: without a word.
            await events.wait_for("reconnected")
            assert events == ["UnexpectedEOF", "disconnected", "reconnected"]
            assert server.counters().slow_consumers == 1
            assert server.server.closed_clients[-1]["reason"] == "Slow Consumer (Pending Bytes)"
            assert producer_events == [] and producer.is_connected  # the others carry on
            await server.wait_for_subscription_async("firehose")
            await producer.publish("firehose", b"fresh")
            assert (await sub.next_msg(timeout=2)).data == b"fresh"
            assert not server.connections("slow")[0].writing_stopped  # a new connection
        finally:
            await slow.close()
            await producer.close()

    run(main())


def test_a_held_back_burst_makes_a_client_side_slow_consumer(server):
    async def main():
        events = Events()
        nc = await connect(server.url, events, name="consumer")
        producer = await connect(server.url, name="producer")
        try:
            async def slow_handler(msg):
                await asyncio.sleep(0.05)

            await nc.subscribe("burst", cb=slow_handler, pending_msgs_limit=5)
            await settle(nc)
            server.stop_writing("consumer")
            for i in range(30):
                await producer.publish("burst", str(i).encode())
            await settle(producer)
            assert server.connections("consumer")[0].pending_bytes > 0
            server.resume("consumer")  # 30 messages at once, faster than the handler
            await events.wait_for("SlowConsumerError")
            assert "disconnected" not in events  # client-side: nats-py drops, stays connected
        finally:
            await nc.close()
            await producer.close()

    run(main())


def test_stop_reading_stalls_the_client(server):
    async def main():
        events = Events()
        nc = await connect(server.url, events, name="stalled")
        other = await connect(server.url, name="other")
        try:
            async def respond(msg):
                await msg.respond(b"ok")

            await other.subscribe("svc", cb=respond)
            sub = await other.subscribe("from.stalled")
            await settle(other)
            await settle(nc)
            server.stop_reading("stalled")
            assert server.connections("stalled")[0].reading_stopped
            # What the server's reader was already waiting for may still be read: one chunk.
            await nc.publish("from.stalled", b"first")
            await asyncio.sleep(0.05)
            await nc.publish("from.stalled", b"queued")
            with pytest.raises(nats.errors.TimeoutError):  # the request is never read
                await nc.request("svc", b"", timeout=0.2)
            early = []
            with pytest.raises(nats.errors.TimeoutError):
                while True:
                    early.append((await sub.next_msg(timeout=0.05)).data)
            assert b"queued" not in early
            assert server.resume("stalled") == 1
            late = [(await sub.next_msg(timeout=2)).data for _ in range(2 - len(early))]
            assert early + late == [b"first", b"queued"]
            assert (await nc.request("svc", b"", timeout=2)).data == b"ok"
            assert "disconnected" not in events
        finally:
            await nc.close()
            await other.close()

    run(main())


def test_reset_cancels_everything(server):
    async def main():
        nc = await connect(server.url, name="c")
        try:
            await settle(nc)
            faults = [server.drop("a"), server.delay("b", 1), server.no_responders("c"),
                      server.close_connections("after_connect")]
            server.refuse_connections()
            server.stop_reading("c")
            server.publish("recorded", "x")
            server.reset()
            assert not any(f.active for f in faults)
            assert server.messages() == []
            assert not server.connections("c")[0].reading_stopped
            await nc.flush(timeout=2)
            other = await connect(server.url, allow_reconnect=False)
            await other.close()
        finally:
            await nc.close()

    run(main())
