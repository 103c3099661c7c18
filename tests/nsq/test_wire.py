"""NSQ TCP protocol V2 on the wire, byte for byte: nsqd's own protocol tests
(nsqd/protocol_v2_test.go) re-expressed against natserver.nsq, plus every error text.

Timed behaviour (heartbeats, client timeout, msg_timeout, DPUB) runs over in-memory
connections under trio's MockClock, so no test sleeps for real."""

from __future__ import annotations

import struct

import orjson
import pytest
import trio
import trio.testing

from tests.nsq.helpers import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, RawClient, parse_message, start_nsq

TIMEOUT = 10  # seconds of wall time per I/O test


@pytest.fixture
async def front(nursery, tmp_path):
    return await start_nsq(nursery, tmp_path)


async def connect(front) -> RawClient:
    return await RawClient.connect(front.tcp_port)


def memory_client(front) -> RawClient:
    return RawClient(front.connect_memory())


async def test_identify_feature_negotiation_answer(front):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        kind, data = await c.identify(feature_negotiation=True, client_id="x", hostname="h", short_id="s",
                                      long_id="l", msg_timeout=5000, output_buffer_size=1024,
                                      output_buffer_timeout=100, sample_rate=10, unknown_key={"a": 1})
        assert kind == FRAME_RESPONSE
        assert data == (
            b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":5000,'
            b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
            b'"sample_rate":10,"auth_required":false,"output_buffer_size":1024,"output_buffer_timeout":100,'
            b'"topology_region":"","topology_zone":""}'
        )
        # IDENTIFY may be repeated before SUB; without negotiation the answer is OK
        assert await c.identify(client_id="again") == (FRAME_RESPONSE, b"OK")


async def test_basic_v2(front):
    """TestBasicV2: a message published before SUB arrives with attempts 1."""
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"PUB test_v2", b"test body")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"SUB test_v2 ch")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"RDY 1")
        kind, data = await c.frame()
        assert kind == FRAME_MESSAGE
        ts, attempts, msg_id, body = parse_message(data)
        assert (attempts, body) == (1, b"test body")
        assert len(msg_id) == 16 and int(msg_id, 16) > 0
        assert abs(ts - trio.current_time()) > 0  # a wall-clock ns timestamp
        await c.cmd(b"FIN " + msg_id)
        await c.cmd(b"FIN " + msg_id)
        assert await c.frame() == (FRAME_ERROR, b"E_FIN_FAILED FIN " + msg_id + b" failed ID not in flight")
        await c.cmd(b"NOP")  # the non-fatal error kept the connection
        await c.cmd(b"RDY 0")
        await c.cmd(b"PUB test_v2", b"x")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")


async def test_multiple_consumers_each_channel_gets_it(front):
    """TestMultipleConsumerV2."""
    with trio.fail_after(TIMEOUT):
        clients = []
        for channel in (b"ch1", b"ch2"):
            c = await connect(front)
            await c.cmd(b"SUB multi " + channel)
            assert await c.frame() == (FRAME_RESPONSE, b"OK")
            await c.cmd(b"RDY 1")
            clients.append(c)
        p = await connect(front)
        await p.cmd(b"PUB multi", b"both")
        assert await p.frame() == (FRAME_RESPONSE, b"OK")
        ids = set()
        for c in clients:
            kind, data = await c.frame()
            assert kind == FRAME_MESSAGE
            ids.add(parse_message(data)[2])
            assert parse_message(data)[3] == b"both"
        assert len(ids) == 1


async def test_bad_magic(front):
    with trio.fail_after(TIMEOUT):
        c = await RawClient.connect(front.tcp_port, magic=False)
        await c.send(b"  V1")
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_PROTOCOL")
        assert await c.closed()


@pytest.mark.parametrize("commands, error", [
    (b"ASDF\n", b"E_INVALID invalid command ASDF"),  # TestFatalError
    (b"\n", b"E_INVALID invalid command "),
    (b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
    (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
    (b"REQ 0123456789abcdef 0\n", b"E_INVALID cannot REQ in current state"),
    (b"TOUCH 0123456789abcdef\n", b"E_INVALID cannot TOUCH in current state"),
    (b"CLS\n", b"E_INVALID cannot CLS in current state"),
    (b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
    (b"SUB t! c\n", b'E_BAD_TOPIC SUB topic name "t!" is not valid'),
    (b"SUB t c!\n", b'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
    (b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
    (b"PUB t\n\x00\x00\x00\x00", b"E_BAD_MESSAGE PUB invalid message body size 0"),
    (b"PUB t\n\x00\x10\x00\x01", b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    (b"DPUB t 3600100\n", b"E_INVALID DPUB timeout 3600100 out of range 0-3600000"),
    (b"MPUB t\n\x00\x50\x00\x01", b"E_BAD_BODY MPUB body too big 5242881 > 5242880"),
    (b"AUTH\n\x00\x00\x00\x03abc", b"E_AUTH_DISABLED AUTH disabled"),
    (b"IDENTIFY\n\x00\x00\x00\x03{x}", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"IDENTIFY\n\x00\x00\x00\x02[]", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'IDENTIFY\n\x00\x00\x00\x18{"heartbeat_interval":"1"}', b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
])
async def test_fatal_errors_close(front, commands, error):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.send(commands)
        assert await c.frame() == (FRAME_ERROR, error)
        assert await c.closed()


async def test_raw_bytes_in_an_error_are_answered_raw_and_logged_escaped(front, caplog):
    # The frame quotes the client's bytes as they were (nsqd's); the log line escapes them, since
    # a log line must be valid text (a surrogate in it breaks UTF-8 handlers and pytest-xdist).
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.send(b"\xc4\xff\n")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID invalid command \xc4\xff")
        assert await c.closed()
    lines = [r.getMessage() for r in caplog.records if "invalid command" in r.getMessage()]
    assert lines and all("\\xc4\\xff" in line for line in lines), lines
    for line in lines:
        line.encode("utf-8")  # strict: raises on a surrogate


@pytest.mark.parametrize("fields, error", [
    ({"heartbeat_interval": 60001}, b"E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid"),
    ({"heartbeat_interval": 999}, b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"),
    ({"output_buffer_size": 64 * 1024 + 1}, b"E_BAD_BODY IDENTIFY output buffer size (65537) is invalid"),
    ({"output_buffer_size": 63}, b"E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
    ({"output_buffer_timeout": 30001}, b"E_BAD_BODY IDENTIFY output buffer timeout (30001) is invalid"),
    ({"output_buffer_timeout": 24}, b"E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid"),
    ({"msg_timeout": 999}, b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
    ({"msg_timeout": 900001}, b"E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"),
    ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
    ({"sample_rate": -1}, b"E_BAD_BODY IDENTIFY sample rate (-1) is invalid"),
    ({"feature_negotiation": True, "deflate": True, "snappy": True},
     b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"),
])
async def test_identify_validation(front, fields, error):
    """TestMaxHeartbeatIntervalInvalid, TestOutputBufferingValidity and the others."""
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        assert await c.identify(**fields) == (FRAME_ERROR, error)
        assert await c.closed()


@pytest.mark.parametrize("fields", [
    {"heartbeat_interval": 60000}, {"heartbeat_interval": 1000}, {"heartbeat_interval": -1},
    {"output_buffer_size": -1}, {"output_buffer_size": 64}, {"output_buffer_size": 65536},
    {"output_buffer_timeout": -1}, {"output_buffer_timeout": 25}, {"output_buffer_timeout": 30000},
    {"msg_timeout": 1000}, {"msg_timeout": 900000}, {"sample_rate": 99},
])
async def test_identify_valid_values(front, fields):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        assert await c.identify(**fields) == (FRAME_RESPONSE, b"OK")


async def test_output_buffer_size_minus_one_is_reported_as_one(front):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        kind, data = await c.identify(feature_negotiation=True, output_buffer_size=-1)
        answer = orjson.loads(data)
        assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (1, 0)


async def test_sub_with_heartbeats_disabled(front):
    """TestClientHeartbeatDisableSUB."""
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        assert await c.identify(heartbeat_interval=-1) == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"SUB t ch")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID cannot SUB with heartbeats disabled")
        assert await c.closed()


async def test_state_errors_after_sub(front):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"SUB t ch")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"IDENTIFY")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID cannot IDENTIFY in current state")
        assert await c.closed()
        c = await connect(front)
        await c.cmd(b"SUB t ch")
        await c.frame()
        await c.cmd(b"SUB t ch")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID cannot SUB in current state")


async def test_max_rdy_count(nursery, tmp_path):
    """TestMaxRdyCount (max_rdy_count 50)."""
    front = await start_nsq(nursery, tmp_path, max_rdy_count=50)
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        kind, data = await c.identify(feature_negotiation=True)
        assert orjson.loads(data)["max_rdy_count"] == 50
        await c.cmd(b"PUB rdy", b"x")
        await c.frame()
        await c.cmd(b"SUB rdy ch")
        await c.frame()
        await c.cmd(b"RDY 50")
        kind, data = await c.frame()
        assert kind == FRAME_MESSAGE
        await c.cmd(b"RDY 51")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID RDY count 51 out of range 0-50")
        assert await c.closed()


async def test_size_limits(nursery, tmp_path):
    """TestSizeLimits: max_msg_size 100, max_body_size 1000."""
    front = await start_nsq(nursery, tmp_path, max_msg_size=100, max_body_size=1000)
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"PUB size", b"x" * 105)
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_MESSAGE PUB message too big 105 > 100")
        assert await c.closed()
        c = await connect(front)
        await c.cmd(b"PUB size", b"x" * 100)
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"PUB size", b"")
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_MESSAGE PUB invalid message body size 0")
        c = await connect(front)
        messages = [b"x" * 100] * 11
        inner = struct.pack(">i", 11) + b"".join(struct.pack(">i", len(m)) + m for m in messages)
        await c.send(b"MPUB size\n" + struct.pack(">i", len(inner)) + inner)
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_BODY MPUB body too big 1148 > 1000")
        c = await connect(front)
        messages = [b"x" * 10] * 5 + [b""]
        inner = struct.pack(">i", 6) + b"".join(struct.pack(">i", len(m)) + m for m in messages)
        await c.send(b"MPUB size\n" + struct.pack(">i", len(inner)) + inner)
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_MESSAGE MPUB invalid message(5) body size 0")
        c = await connect(front)
        inner = struct.pack(">ii", 1, 101) + b"x" * 101
        await c.send(b"MPUB size\n" + struct.pack(">i", len(inner)) + inner)
        assert await c.frame() == (FRAME_ERROR, b"E_BAD_MESSAGE MPUB message too big 101 > 100")


async def test_bad_fin_and_req_timeout_range(front):
    """TestBadFin, TestReqTimeoutRange (REQ 0 redelivers at once; a huge delay is clamped)."""
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"SUB req ch")
        await c.frame()
        await c.cmd(b"FIN ")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID invalid message ID")
        assert await c.closed()
        c = await connect(front)
        await c.cmd(b"SUB req ch")
        await c.frame()
        await c.cmd(b"PUB req", b"test body")
        await c.frame()
        await c.cmd(b"RDY 1")
        _, data = await c.frame()
        msg_id = parse_message(data)[2]
        await c.cmd(b"REQ " + msg_id + b" 0")
        _, data = await c.frame()
        assert parse_message(data)[1:3] == (2, msg_id)
        await c.cmd(b"REQ " + msg_id + b" 7200000")
        await c.cmd(b"NOP")
        await c.cmd(b"PUB other", b"sync")  # the OK proves the REQ was handled
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        channel = front.engine.topics["req"].channels["ch"]
        message = channel.deferred[msg_id]
        assert message.due - trio.current_time() <= 3600.0 + 1
        assert message.due - trio.current_time() >= 3600.0 - 5
        await c.cmd(b"REQ " + msg_id + b" 0")
        assert await c.frame() == (FRAME_ERROR, b"E_REQ_FAILED REQ " + msg_id + b" failed ID not in flight")
        await c.cmd(b"TOUCH " + msg_id)
        assert await c.frame() == (FRAME_ERROR, b"E_TOUCH_FAILED TOUCH " + msg_id + b" failed ID not in flight")
        await c.cmd(b"REQ " + msg_id + b" -1")
        assert await c.frame() == (FRAME_ERROR, b"E_INVALID REQ could not parse timeout -1")


async def test_cls(front):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"SUB cls ch")
        await c.frame()
        await c.cmd(b"CLS")
        assert await c.frame() == (FRAME_RESPONSE, b"CLOSE_WAIT")
        await c.cmd(b"RDY 5")  # ignored after CLS
        await c.cmd(b"PUB cls", b"x")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")  # and no message


async def test_pausing(front):
    """TestPausing: a paused channel delivers nothing until unpaused."""
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"SUB pause ch")
        await c.frame()
        await c.cmd(b"RDY 10")
        front.engine.topics["pause"].channels["ch"].pause()
        await c.cmd(b"PUB pause", b"held")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        front.engine.topics["pause"].channels["ch"].unpause(trio.current_time())
        kind, data = await c.frame()
        assert kind == FRAME_MESSAGE and parse_message(data)[3] == b"held"


async def test_messages_never_exceed_rdy(front):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"SUB flow ch")
        await c.frame()
        body = struct.pack(">i", 10) + b"".join(struct.pack(">i", 1) + b"m" for _ in range(10))
        await c.send(b"MPUB flow\n" + struct.pack(">i", len(body)) + body)
        assert await c.frame() == (FRAME_RESPONSE, b"OK")
        await c.cmd(b"RDY 3")
        ids = [parse_message((await c.frame())[1])[2] for _ in range(3)]
        await c.cmd(b"PUB flow", b"x")
        assert await c.frame() == (FRAME_RESPONSE, b"OK")  # nothing else arrived first
        await c.cmd(b"FIN " + ids[0])
        kind, _ = await c.frame()
        assert kind == FRAME_MESSAGE


# -- timed behaviour under MockClock ------------------------------------------------------


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_client_heartbeat_and_timeout(nursery, tmp_path, autojump_clock):
    """TestClientHeartbeat / TestClientTimeout: _heartbeat_ every interval; a client that
    stays silent for two intervals is closed."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    with trio.fail_after(60):
        await c.send(b"  V2")
        assert await c.identify(heartbeat_interval=1000) == (FRAME_RESPONSE, b"OK")
        start = trio.current_time()
        assert await c.frame() == (FRAME_RESPONSE, b"_heartbeat_")
        assert 0.9 <= trio.current_time() - start <= 1.1
        await c.cmd(b"NOP")
        assert await c.frame() == (FRAME_RESPONSE, b"_heartbeat_")
        await c.cmd(b"NOP")
        assert await c.frame() == (FRAME_RESPONSE, b"_heartbeat_")
        assert await c.closed()  # silent: closed after 2 intervals
        assert trio.current_time() - start < 6


async def test_heartbeat_disabled(nursery, tmp_path, autojump_clock):
    """TestClientHeartbeatDisable: no heartbeats, no read timeout."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    await c.send(b"  V2")
    assert await c.identify(heartbeat_interval=-1) == (FRAME_RESPONSE, b"OK")
    with trio.move_on_after(500):
        await c.frame()
        pytest.fail("a frame arrived with heartbeats disabled")
    await c.cmd(b"PUB t", b"still here")
    assert await c.frame() == (FRAME_RESPONSE, b"OK")


async def test_client_msg_timeout(nursery, tmp_path, autojump_clock):
    """TestClientMsgTimeout: msg_timeout 1000 ms requeues; FIN afterwards fails."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    await c.send(b"  V2")
    await c.identify(msg_timeout=1000)
    await c.cmd(b"PUB cmt", b"x" * 100)
    await c.frame_skip_heartbeats()
    await c.cmd(b"SUB cmt ch")
    await c.frame_skip_heartbeats()
    await c.cmd(b"RDY 1")
    kind, data = await c.frame_skip_heartbeats()
    msg_id = parse_message(data)[2]
    await c.cmd(b"RDY 0")
    await trio.sleep(1.15)
    channel = front.engine.topics["cmt"].channels["ch"]
    assert (channel.timeout_count, channel.requeue_count) == (1, 0)
    await c.cmd(b"FIN " + msg_id)
    assert await c.frame_skip_heartbeats() == (FRAME_ERROR, b"E_FIN_FAILED FIN " + msg_id + b" failed ID not in flight")


async def test_touch(nursery, tmp_path, autojump_clock):
    """TestTouch: TOUCH keeps a message in flight past msg_timeout."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    await c.send(b"  V2")
    await c.identify(msg_timeout=1000)
    await c.cmd(b"SUB touch ch")
    await c.frame_skip_heartbeats()
    await c.cmd(b"PUB touch", b"x")
    await c.frame_skip_heartbeats()
    await c.cmd(b"RDY 1")
    _, data = await c.frame_skip_heartbeats()
    msg_id = parse_message(data)[2]
    for _ in range(3):
        await trio.sleep(0.7)
        await c.cmd(b"TOUCH " + msg_id)
    await trio.sleep(0.5)
    channel = front.engine.topics["touch"].channels["ch"]
    assert channel.timeout_count == 0
    await c.cmd(b"FIN " + msg_id)
    await c.cmd(b"PUB other", b"sync")
    assert await c.frame_skip_heartbeats() == (FRAME_RESPONSE, b"OK")
    assert channel.timeout_count == 0 and not channel.in_flight


async def test_dpub(nursery, tmp_path, autojump_clock):
    """TestDPUB: deferred, then delivered once due."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    await c.send(b"  V2")
    await c.cmd(b"SUB dpub ch")
    await c.frame_skip_heartbeats()
    await c.cmd(b"RDY 1")
    start = trio.current_time()
    await c.cmd(b"DPUB dpub 1000", b"later")
    assert await c.frame_skip_heartbeats() == (FRAME_RESPONSE, b"OK")
    assert len(front.engine.topics["dpub"].channels["ch"].deferred) == 1
    kind, data = await c.frame_skip_heartbeats()
    assert kind == FRAME_MESSAGE and parse_message(data)[3] == b"later"
    assert 1.0 <= trio.current_time() - start <= 1.0 + 2 * front.options.queue_scan_interval


async def test_output_buffer_timeout_batches_messages(nursery, tmp_path, autojump_clock):
    """TestOutputBuffering: with RDY room left, messages wait for output_buffer_timeout."""
    front = await start_nsq(nursery, tmp_path)
    c = memory_client(front)
    await c.send(b"  V2")
    await c.identify(output_buffer_size=65536, output_buffer_timeout=1000)
    await c.cmd(b"SUB buf ch")
    await c.frame_skip_heartbeats()
    await c.cmd(b"RDY 10")
    producer = memory_client(front)
    await producer.send(b"  V2")
    start = trio.current_time()
    await producer.cmd(b"PUB buf", b"x" * 100)
    await producer.frame()
    kind, _ = await c.frame_skip_heartbeats()
    assert kind == FRAME_MESSAGE
    assert trio.current_time() - start >= 0.99


@pytest.mark.parametrize("body, expected", [
    (b'{"Heartbeat_Interval": 2000}', (FRAME_RESPONSE, b"OK")),  # Go matches keys case-insensitively
    (b'{"heartbeat_interval": 2000.0}', (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")),
    (b'{"heartbeat_interval": 2e3}', (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")),
    (b'{"tls_v1": 1}', (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")),
    (b'{"client_id": 5}', (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")),
    (b'{"sample_rate": 4294967296}', (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")),
    (b'{"client_id": null, "unknown": [1, {"x": 2}]}', (FRAME_RESPONSE, b"OK")),
])
async def test_identify_json_types_as_go_decodes_them(front, body, expected):
    with trio.fail_after(TIMEOUT):
        c = await connect(front)
        await c.cmd(b"IDENTIFY", body)
        assert await c.frame() == expected
