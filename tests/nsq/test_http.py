"""nsqd's HTTP API and nsqlookupd's read API on natserver.nsq (nsqd/http_test.go's checks
re-expressed): status codes, bodies and headers as nsqd answers them."""

from __future__ import annotations

import struct

import orjson
import pytest
import trio

from tests.nsq.helpers import FRAME_MESSAGE, FRAME_RESPONSE, RawClient, http_request, parse_message, start_nsq

TIMEOUT = 10


@pytest.fixture
async def front(nursery, tmp_path):
    return await start_nsq(nursery, tmp_path)


async def call(front, method, target, body=b""):
    with trio.fail_after(TIMEOUT):
        return await http_request(front.http_port, method, target, body)


async def test_ping_and_info(front):
    status, headers, body = await call(front, "GET", "/ping")
    assert (status, body) == (200, b"OK")
    status, headers, body = await call(front, "GET", "/info")
    info = orjson.loads(body)
    assert status == 200 and headers["x-nsq-content-type"] == "nsq; version=1.0"
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert info["version"] == "1.3.0" and info["tcp_port"] == front.tcp_port and info["http_port"] == front.http_port
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert set(info) >= {"broadcast_address", "hostname", "start_time", "max_output_buffer_size",
                         "max_output_buffer_timeout", "max_deflate_level"}


async def test_pub_and_stats(front):
    """TestHTTPpub, TestHTTPpubEmpty, stats with filters."""
    assert await call(front, "POST", "/pub?topic=http_pub", b"test message") == (
        200, {"content-type": "text/plain; charset=utf-8", "x-nsq-content-type": "nsq; version=1.0",
              "content-length": "2"}, b"OK")
    status, _, body = await call(front, "POST", "/pub?topic=http_pub", b"")
    assert (status, orjson.loads(body)) == (400, {"message": "MSG_EMPTY"})
    status, _, body = await call(front, "GET", "/stats?format=json")
    stats = orjson.loads(body)
    assert stats["version"] == "1.3.0" and stats["health"] == "OK"
    topic = stats["topics"][0]
    assert (topic["topic_name"], topic["depth"], topic["message_count"], topic["message_bytes"]) == (
        "http_pub", 1, 1, len(b"test message"))
    status, _, body = await call(front, "GET", "/stats?format=json&topic=nothing")
    assert orjson.loads(body)["topics"] is None
    status, _, body = await call(front, "GET", "/stats")
    assert status == 200 and body.startswith(b"nsqd v1.3.0")


async def test_pub_errors(front):
    cases = [
        ("/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=t&defer=abc", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=3600001", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t", b"x" * (1024 * 1024 + 1), 413, "MSG_TOO_BIG"),
    ]
    for target, body, status, message in cases:
        got_status, headers, got = await call(front, "POST", target, body)
        assert (got_status, orjson.loads(got)) == (status, {"message": message}), target
    status, _, body = await call(front, "GET", "/pub?topic=t")
    assert (status, orjson.loads(body)) == (405, {"message": "METHOD_NOT_ALLOWED"})
    status, _, body = await call(front, "GET", "/nope")
    assert (status, orjson.loads(body)) == (404, {"message": "NOT_FOUND"})


async def test_mpub_text_and_binary(front):
    """TestHTTPmpub, TestHTTPmpubEmpty (empty lines dropped), TestHTTPmpubBinary."""
    assert (await call(front, "POST", "/mpub?topic=mp", b"a\nb\n\nc\n"))[2] == b"OK"
    assert front.engine.topics["mp"].depth == 3
    binary = struct.pack(">i", 2) + struct.pack(">i", 3) + b"one" + struct.pack(">i", 3) + b"two"
    assert (await call(front, "POST", "/mpub?topic=mpb&binary=true", binary))[2] == b"OK"
    assert front.engine.topics["mpb"].depth == 2
    status, _, body = await call(front, "POST", "/mpub?topic=mpb&binary=true", struct.pack(">i", 0))
    assert (status, orjson.loads(body)) == (413, {"message": "BAD_BODY"})
    status, _, body = await call(front, "POST", "/mpub?topic=mpb&binary=true", struct.pack(">ii", 1, 0))
    assert (status, orjson.loads(body)) == (413, {"message": "BAD_MESSAGE"})
    status, _, body = await call(front, "POST", "/mpub?topic=mp", b"x" * (1024 * 1024 + 1) + b"\n")
    assert (status, orjson.loads(body)) == (413, {"message": "MSG_TOO_BIG"})


async def test_pub_defer_reaches_the_consumer_later(front):
    with trio.fail_after(TIMEOUT):
        c = await RawClient.connect(front.tcp_port)
        await c.cmd(b"SUB deferred ch")
        await c.frame()
        await c.cmd(b"RDY 1")
        assert (await call(front, "POST", "/pub?topic=deferred&defer=200", b"later"))[2] == b"OK"
        assert len(front.engine.topics["deferred"].channels["ch"].deferred) == 1
        kind, data = await c.frame_skip_heartbeats()
        assert kind == FRAME_MESSAGE and parse_message(data)[3] == b"later"


async def test_topic_and_channel_lifecycle(front):
    """TestHTTPV1TopicChannel: create, pause, unpause, empty, delete, and their errors."""
    assert await call(front, "POST", "/topic/create?topic=life") == (
        200, {"x-nsq-content-type": "nsq; version=1.0", "content-length": "0"}, b"")
    assert (await call(front, "POST", "/channel/create?topic=life&channel=ch"))[0] == 200
    topic = front.engine.topics["life"]
    assert "ch" in topic.channels
    assert (await call(front, "POST", "/topic/pause?topic=life"))[0] == 200
    assert topic.paused
    assert (await call(front, "POST", "/topic/unpause?topic=life"))[0] == 200
    assert not topic.paused
    assert (await call(front, "POST", "/channel/pause?topic=life&channel=ch"))[0] == 200
    assert topic.channels["ch"].paused
    assert (await call(front, "POST", "/channel/unpause?topic=life&channel=ch"))[0] == 200
    await call(front, "POST", "/pub?topic=life", b"x")
    assert topic.channels["ch"].depth == 1
    assert (await call(front, "POST", "/channel/empty?topic=life&channel=ch"))[0] == 200
    assert topic.channels["ch"].depth == 0
    assert (await call(front, "POST", "/channel/delete?topic=life&channel=ch"))[0] == 200
    assert "ch" not in topic.channels
    await call(front, "POST", "/pub?topic=life", b"x")
    assert (await call(front, "POST", "/topic/empty?topic=life"))[0] == 200
    assert topic.depth == 0
    assert (await call(front, "POST", "/topic/delete?topic=life"))[0] == 200
    assert "life" not in front.engine.topics
    errors = [
        ("/topic/pause?topic=life", 404, "TOPIC_NOT_FOUND"),
        ("/topic/delete?topic=life", 404, "TOPIC_NOT_FOUND"),
        ("/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("/topic/create?topic=a!b", 400, "INVALID_TOPIC"),
        ("/channel/create?topic=life&channel=ch", 404, "TOPIC_NOT_FOUND"),
        ("/channel/create?channel=ch", 400, "MISSING_ARG_TOPIC"),
        ("/channel/create?topic=life", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/create?topic=life&channel=c!", 400, "INVALID_ARG_CHANNEL"),
    ]
    for target, status, message in errors:
        got_status, _, body = await call(front, "POST", target)
        assert (got_status, orjson.loads(body)) == (status, {"message": message}), target
    await call(front, "POST", "/topic/create?topic=life")
    for target in ("/channel/delete?topic=life&channel=nope", "/channel/pause?topic=life&channel=nope"):
        got_status, _, body = await call(front, "POST", target)
        assert (got_status, orjson.loads(body)) == (404, {"message": "CHANNEL_NOT_FOUND"})


async def test_stats_clients_and_filters(front):
    with trio.fail_after(TIMEOUT):
        c = await RawClient.connect(front.tcp_port)
        await c.identify(client_id="worker-1", hostname="box", user_agent="test/1.0")
        await c.cmd(b"SUB st ch")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"RDY 7")
        await c.cmd(b"PUB st", b"x")
        kind, _ = await c.frame()
        assert kind == FRAME_MESSAGE
        status, _, body = await call(front, "GET", "/stats?format=json&topic=st&channel=ch")
        channel = orjson.loads(body)["topics"][0]["channels"][0]
        assert (channel["client_count"], channel["in_flight_count"], channel["message_count"]) == (1, 1, 1)
        client = channel["clients"][0]
        assert (client["client_id"], client["hostname"], client["user_agent"], client["ready_count"],
                client["in_flight_count"], client["state"]) == ("worker-1", "box", "test/1.0", 7, 1, 3)
        status, _, body = await call(front, "GET", "/stats?format=json&include_clients=false")
        answer = orjson.loads(body)
        assert answer["topics"][0]["channels"][0]["clients"] is None and answer["producers"] is None
        status, _, body = await call(front, "GET", "/stats?format=json&topic=st&channel=nope")
        assert orjson.loads(body)["topics"] == []
        producers = orjson.loads((await call(front, "GET", "/stats?format=json"))[2])["producers"]
        assert producers[0]["pub_counts"] == [{"topic": "st", "count": 1}]


async def test_lookupd_api(front):
    await call(front, "POST", "/topic/create?topic=lk")
    await call(front, "POST", "/channel/create?topic=lk&channel=c1")
    status, _, body = await call(front, "GET", "/lookup?topic=lk")
    answer = orjson.loads(body)
    assert status == 200 and answer["channels"] == ["c1"]
    producer = answer["producers"][0]
    assert (producer["tcp_port"], producer["http_port"], producer["version"]) == (front.tcp_port, front.http_port, "1.3.0")
    status, _, body = await call(front, "GET", "/lookup?topic=missing")
    assert (status, orjson.loads(body)) == (404, {"message": "TOPIC_NOT_FOUND"})
    assert orjson.loads((await call(front, "GET", "/topics"))[2]) == {"topics": ["lk"]}
    assert orjson.loads((await call(front, "GET", "/channels?topic=lk"))[2]) == {"channels": ["c1"]}
    nodes = orjson.loads((await call(front, "GET", "/nodes"))[2])
    assert nodes["producers"][0]["topics"] == ["lk"]
    nsqz = orjson.loads((await call(front, "GET", "/nsqz"))[2])
    assert (nsqz["topic_count"], nsqz["channel_count"], nsqz["bridge"]) == (1, 1, None)
    assert nsqz["topics"][0]["topic_name"] == "lk"


async def test_keep_alive_and_malformed_requests(front):
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", front.http_port)
        await stream.send_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while data.count(b"OK") < 4:  # two status lines and two bodies
            data += await stream.receive_some(4096)
        assert data.count(b"HTTP/1.1 200") == 2
        await stream.aclose()
        stream = await trio.open_tcp_stream("127.0.0.1", front.http_port)
        await stream.send_all(b"\x00\x01garbage\r\n\r\n")
        reply = await stream.receive_some(4096)
        assert reply.startswith(b"HTTP/1.1 400")
        await stream.aclose()
    assert (await call(front, "GET", "/ping"))[2] == b"OK"


async def test_oversized_bodies_refused_from_content_length(front):
    """nsqd answers 413 from Content-Length alone; the body is never read."""
    with trio.fail_after(TIMEOUT):
        for target, message, size in (("/pub?topic=t", "MSG_TOO_BIG", 1024 * 1024 + 1),
                                      ("/mpub?topic=t", "BODY_TOO_BIG", 5 * 1024 * 1024 + 1)):
            stream = await trio.open_tcp_stream("127.0.0.1", front.http_port)
            await stream.send_all(f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 413")
            assert reply.endswith(orjson.dumps({"message": message}))
            await stream.aclose()
