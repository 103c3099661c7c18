"""pynsq (tornado) against natserver's NSQ front-end: publish, consume, fan-out, shared
channels, REQ with attempts, msg_timeout redelivery, TOUCH, DPUB, lookupd discovery and
deflate/snappy negotiation. pynsq runs on its own tornado IOLoop in the test's thread; the
server runs in a background thread."""

from __future__ import annotations

import pytest

nsq = pytest.importorskip("nsq")
tornado_ioloop = pytest.importorskip("tornado.ioloop")

from tests.nsq.helpers import ThreadedServer  # noqa: E402

TEST_TIMEOUT = 30  # seconds for each scenario (IOLoop.run_sync's timeout)


@pytest.fixture
def server(tmp_path):
    srv = ThreadedServer(tmp_path).start()
    yield srv
    srv.stop()


def _run(coro_fn, timeout=TEST_TIMEOUT):
    loop = tornado_ioloop.IOLoop()
    try:
        return loop.run_sync(coro_fn, timeout=timeout)
    finally:
        loop.close(all_fds=True)


async def _publish(server, topic, bodies, **conn_kwargs):
    """Publish with nsq.Writer; returns the list of (conn, data) acks."""
    import tornado.gen

    writer = nsq.Writer([f"127.0.0.1:{server.tcp_port}"], **conn_kwargs)
    acks = []
    while not writer.conns:  # connecting
        await tornado.gen.sleep(0.01)
    for body in bodies:
        future = tornado.concurrent.Future()

        def done(conn, data, future=future):
            future.set_result(data)

        writer.pub(topic, body, callback=done)
        acks.append(await future)
    for conn in list(writer.conns.values()):
        conn.close()
    return acks


async def _consume(server, topic, channel, count, handler=None, readers=1, **reader_kwargs):
    """Run ``readers`` Readers until ``count`` messages were handled; returns
    [(reader index, body, attempts)]."""
    import tornado.concurrent

    got = []
    finished = tornado.concurrent.Future()

    def make_handler(index):
        def on_message(message):
            result = True if handler is None else handler(message)
            got.append((index, message.body, message.attempts))
            if len(got) >= count and not finished.done():
                finished.set_result(None)
            return result
        return on_message

    reader_kwargs.setdefault("nsqd_tcp_addresses", [f"127.0.0.1:{server.tcp_port}"])
    instances = [nsq.Reader(topic=topic, channel=channel, message_handler=make_handler(i), **reader_kwargs)
                 for i in range(readers)]
    try:
        await finished
    finally:
        for reader in instances:
            reader.close()
    return got


def test_publish_then_consume(server):
    import tornado.concurrent  # noqa: F401

    async def scenario():
        acks = await _publish(server, "orders", [b"one", b"two", b"three"])
        assert acks == [b"OK", b"OK", b"OK"]
        got = await _consume(server, "orders", "billing", 3, max_in_flight=10)
        assert sorted(body for _, body, _ in got) == [b"one", b"three", b"two"]
        assert {attempts for _, _, attempts in got} == {1}

    _run(scenario)


def test_mpub_and_fan_out_to_two_channels(server):
    import tornado.concurrent  # noqa: F401
    import tornado.gen

    async def scenario():
        # Create both channels first (a topic without channels buffers for the first one).
        reader_a = nsq.Reader(topic="events", channel="a", message_handler=lambda m: True,
                              nsqd_tcp_addresses=[f"127.0.0.1:{server.tcp_port}"])
        reader_b = nsq.Reader(topic="events", channel="b", message_handler=lambda m: True,
                              nsqd_tcp_addresses=[f"127.0.0.1:{server.tcp_port}"])
        while server.call(lambda: len(server.server.nsq.engine.topics.get("events").channels)
                          if "events" in server.server.nsq.engine.topics else 0) < 2:
            await tornado.gen.sleep(0.02)
        reader_a.close()
        reader_b.close()
        writer = nsq.Writer([f"127.0.0.1:{server.tcp_port}"])
        while not writer.conns:
            await tornado.gen.sleep(0.01)
        future = tornado.concurrent.Future()
        writer.mpub("events", [b"m1", b"m2"], callback=lambda conn, data: future.set_result(data))
        assert await future == b"OK"
        got_a = await _consume(server, "events", "a", 2, max_in_flight=5)
        got_b = await _consume(server, "events", "b", 2, max_in_flight=5)
        assert sorted(b for _, b, _ in got_a) == [b"m1", b"m2"]
        assert sorted(b for _, b, _ in got_b) == [b"m1", b"m2"]

    _run(scenario)


def test_two_consumers_share_a_channel(server):
    async def scenario():
        await _publish(server, "work", [b"job%d" % i for i in range(40)])
        got = await _consume(server, "work", "workers", 40, readers=2, max_in_flight=1)
        bodies = [body for _, body, _ in got]
        assert sorted(bodies) == sorted(b"job%d" % i for i in range(40))
        assert len(set(bodies)) == 40  # each message to one consumer only

    _run(scenario)


def test_requeue_increments_attempts(server):
    async def scenario():
        await _publish(server, "retry", [b"flaky"])
        seen = []

        def handler(message):
            seen.append(message.attempts)
            if message.attempts < 3:
                message.requeue(backoff=False, delay=0)
                return None
            return True

        got = await _consume(server, "retry", "c", 3, handler=handler, max_in_flight=1, max_tries=5)
        assert [attempts for _, _, attempts in got] == [1, 2, 3]

    _run(scenario)


def test_msg_timeout_redelivers(server):
    async def scenario():
        await _publish(server, "slow", [b"payload"])

        def handler(message):
            message.enable_async()  # neither FIN nor REQ: let the 1 s msg_timeout expire
            return None

        got = await _consume(server, "slow", "c", 2, handler=handler, max_in_flight=1, msg_timeout=1)
        assert [attempts for _, _, attempts in got] == [1, 2]
        timeouts = server.call(lambda: server.server.nsq.engine.topics["slow"].channels["c"].timeout_count)
        assert timeouts >= 1

    _run(scenario)


def test_lookupd_discovery(server):
    async def scenario():
        await _publish(server, "found", [b"via-lookupd"])
        got = await _consume(server, "found", "c", 1, nsqd_tcp_addresses=None,
                             lookupd_http_addresses=[f"http://127.0.0.1:{server.http_port}"],
                             lookupd_poll_interval=1, lookupd_poll_jitter=0.0)
        assert got[0][1] == b"via-lookupd"

    _run(scenario)


@pytest.mark.parametrize("compression", ["deflate", "snappy"])
def test_compressed_connections(server, compression):
    async def scenario():
        kwargs = {compression: True}
        acks = await _publish(server, "zipped", [b"x" * 5000, b"small"], **kwargs)
        assert acks == [b"OK", b"OK"]
        flags = []

        def handler(message):
            flags.extend(server.call(lambda: [(c.deflate, c.snappy) for c in server.server.nsq.clients.values()]))
            return True

        got = await _consume(server, "zipped", "c", 2, handler=handler, max_in_flight=5, **kwargs)
        assert sorted(body for _, body, _ in got) == [b"small", b"x" * 5000]
        assert flags and all(f == (compression == "deflate", compression == "snappy") for f in flags)

    _run(scenario)


def test_auth_secret(tmp_path):
    """pynsq's auth_secret: IDENTIFY says auth_required, pynsq sends AUTH, the grant lets it
    subscribe and receive."""
    import http.server
    import json
    import threading

    import tornado.concurrent

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = "secret=opensesame" in self.path
            body = json.dumps({"ttl": 60, "identity": "reader", "authorizations": [
                {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}]} if ok else {}).encode()
            self.send_response(200 if ok else 403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    auth = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=auth.serve_forever, daemon=True).start()
    srv = ThreadedServer(tmp_path, auth_http_addresses=[f"127.0.0.1:{auth.server_address[1]}"]).start()
    try:
        srv.call(lambda: srv.server.nsq.engine.publish("authtopic", [b"guarded"], 0.0))

        async def scenario():
            got = tornado.concurrent.Future()
            reader = nsq.Reader(topic="authtopic", channel="ch", nsqd_tcp_addresses=[f"127.0.0.1:{srv.tcp_port}"],
                                message_handler=lambda m: got.set_result(m.body) or True, auth_secret="opensesame")
            assert await got == b"guarded"
            reader.close()

        _run(scenario)
    finally:
        srv.stop()
        auth.shutdown()
