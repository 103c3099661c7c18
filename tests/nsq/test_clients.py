"""gnsq (gevent) and ansq (asyncio) against natserver.nsq: publish, consume, REQ, and
gnsq's NsqdHTTPClient over nsqd's whole HTTP admin API."""

from __future__ import annotations

import asyncio

import pytest

from tests.nsq.helpers import ThreadedServer

TIMEOUT = 20


@pytest.fixture
def server(tmp_path):
    srv = ThreadedServer(tmp_path).start()
    yield srv
    srv.stop()


def test_ansq_publish_consume_requeue(server):
    ansq = pytest.importorskip("ansq")

    async def scenario():
        writer = await ansq.open_connection("127.0.0.1", server.tcp_port)
        for body in ("one", "two"):
            response = await writer.pub("ansq_topic", body)
            assert response.is_ok
        response = await writer.mpub("ansq_topic", ["three", "four"])
        assert response.is_ok
        reader = await ansq.create_reader(topic="ansq_topic", channel="consumers",
                                          nsqd_tcp_addresses=[f"127.0.0.1:{server.tcp_port}"])
        bodies, attempts = [], {}
        async for message in reader.messages():
            attempts.setdefault(message.body, []).append(message.attempts)
            if message.body == b"two" and message.attempts == 1:
                await message.req(timeout=0)
                continue
            await message.fin()
            bodies.append(message.body)
            if len(bodies) == 4:
                break
        assert sorted(bodies) == [b"four", b"one", b"three", b"two"]
        assert attempts[b"two"] == [1, 2]
        await reader.close()
        await writer.close()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))


def _gnsq_or_skip():
    gnsq = pytest.importorskip("gnsq")
    pytest.importorskip("gevent")
    return gnsq


def test_gnsq_producer_consumer(server):
    gnsq = _gnsq_or_skip()
    import gevent
    import gevent.event

    producer = gnsq.Producer(f"127.0.0.1:{server.tcp_port}")
    producer.start()
    producer.publish("gnsq_topic", b"hello")
    producer.multipublish("gnsq_topic", [b"a", b"b"])
    producer.publish("gnsq_topic", b"later", defer=50)
    producer.close()
    producer.join(TIMEOUT)

    got = []
    done = gevent.event.Event()
    consumer = gnsq.Consumer("gnsq_topic", "c", f"127.0.0.1:{server.tcp_port}", max_in_flight=5)

    @consumer.on_message.connect
    def handler(consumer, message):
        got.append(message.body)
        if len(got) == 4:
            done.set()

    consumer.start(block=False)
    assert done.wait(TIMEOUT)
    consumer.close()
    consumer.join(TIMEOUT)
    assert sorted(got) == [b"a", b"b", b"hello", b"later"]


def test_gnsq_http_client_admin_lifecycle(server):
    gnsq = _gnsq_or_skip()
    http = gnsq.NsqdHTTPClient("127.0.0.1", server.http_port)
    assert http.ping() in (b"OK", "OK")
    assert http.info()["tcp_port"] == server.tcp_port
    http.create_topic("admin")
    http.create_channel("admin", "ch")
    http.publish("admin", b"x")
    http.multipublish("admin", [b"y", b"z"])
    http.multipublish("admin", [b"bin1", b"bin\n2"], binary=True)
    stats = http.stats(topic="admin")
    topic = stats["topics"][0]
    assert topic["topic_name"] == "admin" and topic["message_count"] == 5
    assert topic["channels"][0]["depth"] == 5
    http.pause_channel("admin", "ch")
    http.unpause_channel("admin", "ch")
    http.pause_topic("admin")
    http.unpause_topic("admin")
    http.empty_channel("admin", "ch")
    http.empty_topic("admin")
    http.delete_channel("admin", "ch")
    http.delete_topic("admin")
    with pytest.raises(gnsq.errors.NSQHttpError):
        http.delete_topic("admin")
    assert http.stats()["topics"] in (None, [])


def test_gnsq_lookupd_client(server):
    gnsq = _gnsq_or_skip()
    http = gnsq.NsqdHTTPClient("127.0.0.1", server.http_port)
    http.create_topic("found")
    http.create_channel("found", "c1")
    lookupd = gnsq.LookupdClient("127.0.0.1", server.http_port)
    assert lookupd.ping() in (b"OK", "OK")
    answer = lookupd.lookup("found")
    assert answer["channels"] == ["c1"]
    assert answer["producers"][0]["tcp_port"] == server.tcp_port
    assert "found" in lookupd.topics()["topics"]
    assert lookupd.channels("found")["channels"] == ["c1"]
    assert lookupd.nodes()["producers"][0]["http_port"] == server.http_port
