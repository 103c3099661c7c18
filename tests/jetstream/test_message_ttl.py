"""Per-message TTLs (nats-server 2.11+, issue #27 item 4): ``allow_msg_ttl``, the ``Nats-TTL``
header and ``subject_delete_marker_ttl``, as nats-server 2.15.1 answers and acts.

One script runs against natserver and must give what was recorded from nats-server 2.15.1 in
data/message_ttl_nats_server_2.15.1.json (``python -m tests.jetstream.test_message_ttl``
records it again; a live 2.15.1, when installed, must still give it): the configuration rules
(the markers' minimum TTL, what they switch on, mirrors, an update that would disable TTLs),
the publish answers for every form of TTL (Go durations, seconds, ``never``, the invalid ones,
a TTL on a stream without ``allow_msg_ttl``), the TTL raised to the markers' TTL, and then,
as time passes, what is left: messages gone at their own time, ``never`` spared by max_age,
and the markers (their headers) that replace the last message of a subject. The script's
``at`` steps sleep on nats-server; on natserver they move the server's clock
(NatsServer.advance), so the replay takes no time. Restart recovery, the bound on the work per
expiry turn and nats-py's Key-Value TTLs are tested here against natserver alone."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from natserver.jetstream import crypto
from natserver.jetstream import store as store_module
from natserver.jetstream.store import EXPIRE_BATCH, FileStore, MemoryStore
from natserver.jetstream.stream import StreamConfig as ServerStreamConfig
from natserver.jetstream.stream import check_stream_config
from natserver.jetstream.ttl import TTL_NEVER, InvalidTTL, marker_header, parse_ttl
from natserver.testing import NatsServer
from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.recording import PipelinedClient, assert_recorded

RECORDED = Path(__file__).with_name("data") / "message_ttl_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 30  # hard limit on one test's I/O (the live recording sleeps 7 s of it)
S = 1_000_000_000


def _pub(subject: str, headers: bytes = b"", payload: bytes = b"x") -> tuple:
    return ("pub", subject, headers, payload)


def _api(subject: str, body: dict | None = None) -> tuple:
    return ("pub", subject, b"", json.dumps(body).encode() if body is not None else b"")


def _ttl(value: bytes) -> bytes:
    return b"Nats-TTL: " + value + b"\r\n"


TTL_FORMS = [b"5s", b"1", b"0", b"-1", b"never", b"NEVER", b"abc", b"500ms", b"1.5s", b"1m", b"", b"0s",
             b"10 ", b"1h30m", b"+5", b"5S", b"-5s", b"99999999999999999999"]

SCRIPT: list[tuple[str, tuple]] = [
    ("stream T allows TTLs", _api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True})),
    *[(f"TTL {form.decode()!r}", _pub("t.a", _ttl(form))) for form in TTL_FORMS],
    ("stream N without TTLs", _api("$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]})),
    *[(f"no TTLs: {form.decode()!r}", _pub("n.a", _ttl(form))) for form in (b"5s", b"abc", b"never", b"0")],
    ("no TTLs: wrong stream first", _pub("n.a", _ttl(b"5s") + b"Nats-Expected-Stream: X\r\n")),
    ("no TTLs: a plain message", _pub("n.a")),
    ("markers under 1s", _api("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "subject_delete_marker_ttl": S // 2})),
    ("markers negative", _api("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "subject_delete_marker_ttl": -1})),
    ("markers switch TTLs and roll-ups on", _api("$JS.API.STREAM.CREATE.M", {
        "name": "M", "subjects": ["m.>"], "subject_delete_marker_ttl": S, "deny_purge": True})),
    ("stream O", _api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})),
    ("markers on a mirror", _api("$JS.API.STREAM.CREATE.MI", {"name": "MI", "mirror": {"name": "O"},
                                                              "subject_delete_marker_ttl": 2 * S})),
    ("markers under 1s on a mirror", _api("$JS.API.STREAM.CREATE.MI", {"name": "MI", "mirror": {"name": "O"},
                                                                       "subject_delete_marker_ttl": S // 2})),
    ("a mirror with TTLs", _api("$JS.API.STREAM.CREATE.MI", {"name": "MI", "mirror": {"name": "O"}, "allow_msg_ttl": True})),
    ("update: disable TTLs", _api("$JS.API.STREAM.UPDATE.T", {"name": "T", "subjects": ["t.>"]})),
    ("update: enable TTLs", _api("$JS.API.STREAM.UPDATE.O", {"name": "O", "subjects": ["o.>"], "allow_msg_ttl": True})),
    ("update: add markers", _api("$JS.API.STREAM.UPDATE.O", {"name": "O", "subjects": ["o.>"], "allow_msg_ttl": True,
                                                            "subject_delete_marker_ttl": 3 * S})),
    ("update: markers 1.5s", _api("$JS.API.STREAM.UPDATE.O", {"name": "O", "subjects": ["o.>"],
                                                             "subject_delete_marker_ttl": 3 * S // 2})),
    # A TTL shorter than the markers' is raised to it (not with one message per subject).
    ("stream R with 5s markers", _api("$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"],
                                                                  "subject_delete_marker_ttl": 5 * S})),
    ("R: TTL 1s", _pub("r.a", _ttl(b"1s"))),
    ("R: TTL 10s", _pub("r.a", _ttl(b"10s") + b"Other: x\r\n")),
    ("R: never", _pub("r.a", _ttl(b"never"))),
    ("R: the 1s message", ("get", "R", 1)),
    ("R: the 10s message", ("get", "R", 2)),
    ("stream R1: markers, one message per subject", _api("$JS.API.STREAM.CREATE.R1", {
        "name": "R1", "subjects": ["r1.>"], "subject_delete_marker_ttl": 5 * S, "max_msgs_per_subject": 1})),
    ("R1: TTL 1s", _pub("r1.a", _ttl(b"1s"))),
    ("R1: the 1s message", ("get", "R1", 1)),
    # Time passes. X: max_age 4s, markers of 2s; Y: TTLs only.
    ("stream X", _api("$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x.>"], "max_age": 4 * S,
                                                  "subject_delete_marker_ttl": 2 * S})),
    ("stream Y", _api("$JS.API.STREAM.CREATE.Y", {"name": "Y", "subjects": ["y.>"], "allow_msg_ttl": True})),
    ("publish at 0", ("batch", [
        _pub("x.a", _ttl(b"1s"), b"a1"),  # raised to 2s: gone at 2, a marker until 4
        _pub("x.b", b"", b"b1"), _pub("x.b", b"", b"b2"),  # max_age at 4: a marker until 6
        _pub("x.c", _ttl(b"never"), b"c1"),  # never goes
        _pub("x.d", b"KV-Operation: PURGE\r\n", b""),  # a marker itself: no marker for it at 4
        _pub("x.e", _ttl(b"1"), b"e1"), _pub("x.e", b"", b"e2"),  # e1 at 2 (not the last), e2 at 4
        _pub("y.a", _ttl(b"1"), b"ya"), _pub("y.b", _ttl(b"4s"), b"yb"), _pub("y.c", b"", b"yc"),
    ])),
    ("X at 0", ("list", "X")),
    ("X at 3", ("at", 3.0, "X")),
    ("Y at 3", ("list", "Y")),
    ("X at 5", ("at", 5.0, "X")),
    ("Y at 5", ("list", "Y")),
    ("X at 7", ("at", 7.0, "X")),
]


def _normal(answer: bytes):
    """An error as it is; a stream's configuration by what TTLs concern; an ack by its
    sequence; a stored message by its subject, headers and data."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer.decode()
    if "error" in document:
        return {"error": document["error"]}
    if "config" in document:
        config = document["config"]
        return {"config": {"allow_msg_ttl": config.get("allow_msg_ttl", False),
                           "subject_delete_marker_ttl": config.get("subject_delete_marker_ttl", 0),
                           "allow_rollup_hdrs": config["allow_rollup_hdrs"], "deny_purge": config["deny_purge"]}}
    if "message" in document:
        message = document["message"]
        return {"seq": message["seq"], "subject": message["subject"],
                "hdrs": base64.b64decode(message.get("hdrs", "")).decode(),
                "data": base64.b64decode(message.get("data", "")).decode()}
    if "seq" in document:
        return {"seq": document["seq"]}
    return sorted(document)


class _Client(PipelinedClient):
    """The shared pipelined client, and a stream's whole contents."""

    def stream(self, name: str) -> dict:
        """The stream's state and every message in it."""
        (info,) = self.batch([_api(f"$JS.API.STREAM.INFO.{name}")])
        state = json.loads(info)["state"]
        seqs = range(state["first_seq"], state["last_seq"] + 1) if state["messages"] else []
        got = self.batch([_api(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq}) for seq in seqs])
        return {"state": {k: state.get(k, 0) for k in ("messages", "first_seq", "last_seq", "num_subjects", "num_deleted")},
                "messages": [m for m in map(_normal, got) if "error" not in m]}


def run_script(port: int, wait_until) -> dict:
    """The script against the server on ``port``; ``wait_until(t)``: the server's time is t
    seconds after the timed publishes."""
    client = _Client(port)
    out: dict = {}
    for name, step in SCRIPT:
        kind = step[0]
        if kind == "pub":
            out[name] = [_normal(a) for a in client.batch([step])]
        elif kind == "get":
            out[name] = [_normal(a) for a in client.batch([_api(f"$JS.API.STREAM.MSG.GET.{step[1]}", {"seq": step[2]})])]
        elif kind == "batch":
            out[name] = [_normal(a) for a in client.batch(step[1])]
            wait_until(0.0)  # t = 0
        elif kind == "list":
            out[name] = client.stream(step[1])
        else:  # at
            wait_until(step[1])
            out[name] = client.stream(step[2])
    return out


def _sleeper():
    """Real time: for nats-server (t = 0 is the first call, right after the timed publishes)."""
    start: list[float] = []

    def wait_until(t: float) -> None:
        if not start:
            start.append(time.monotonic())
        time.sleep(max(0.0, start[0] + t - time.monotonic()))

    return wait_until


def _recorded_run(tmp_path: Path) -> dict:
    """The script against natserver, its clock moved by the ``at`` steps."""
    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        moved = [0.0]

        def wait_until(t: float) -> None:
            server.advance(t - moved[0])
            moved[0] = t

        return run_script(server.port, wait_until)


def test_natserver_answers_as_nats_server(tmp_path):
    started = time.monotonic()
    assert_recorded(_recorded_run(tmp_path), RECORDED)
    assert time.monotonic() - started < 10  # the 7 s of the script were jumped


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", JS_CONFIG % (tmp_path / "store"), tmp_path, binary=reference.NATS_SERVER) as port:
        assert_recorded(run_script(port, _sleeper()), RECORDED)


# -- natserver alone ----------------------------------------------------------------------------


def test_parse_ttl_forms():
    assert [parse_ttl(v) for v in (b"1", b"5s", b"1.9s", b"1m", b"1h30m", b"never", b"Never", b"")] == [
        1, 5, 1, 60, 5400, TTL_NEVER, TTL_NEVER, 0]
    for bad in (b"0", b"0s", b"999ms", b"-1", b"-5s", b"+5", b"abc", b"5S", b"10 ", b"1e3"):
        with pytest.raises(InvalidTTL):
            parse_ttl(bad)
    assert marker_header(90 * S) == b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1m30s\r\nNats-Rollup: sub\r\n\r\n"


def _memory_store(**config) -> MemoryStore:
    limits = {"max_msgs": -1, "max_bytes": -1, "max_msgs_per_subject": -1, **config}
    return MemoryStore(ServerStreamConfig(name="S", subjects=["s.>"], **limits))


def test_a_mass_expiry_is_spread_over_turns():
    """50 000 messages due at once: each expire() call removes at most EXPIRE_BATCH and says
    to come back at once; the messages still to go are the oldest by expiry."""
    store = _memory_store(allow_msg_ttl=True)
    total = 50_000
    for i in range(total):
        store.store_msg(b"s.%d" % (i % 100), b"", b"x", 1_000 * S + i, 60 - i % 2)  # odd ones expire first
    assert store.expire(1_000 * S) == 1_059 * S + 1  # none due: message 2 (i = 1) is due first
    now = 1_061 * S
    turns = 0
    started = time.process_time()
    while True:
        before = store.msgs
        nxt = store.expire(now)
        turns += 1
        assert before - store.msgs <= EXPIRE_BATCH
        if nxt is None:
            break
        assert nxt == now
    elapsed = time.process_time() - started
    assert store.msgs == 0 and turns == total // EXPIRE_BATCH + 1
    assert not store.ttls.heap
    print(f"{total} TTL expiries: {elapsed:.3f}s CPU in {turns} turns")


def test_entries_of_purged_messages_count_against_the_batch():
    """A purge leaves its messages' entries in the heap: popping them is bounded per turn
    too, and the heap is then compacted to the live messages."""
    store = _memory_store(allow_msg_ttl=True)
    for i in range(10_000):
        store.store_msg(b"s.a", b"", b"x", i, 60)
    store.store_msg(b"s.b", b"", b"x", 10_000, 60)
    assert store.purge_ex(b"s.a", 0, 0) == 10_000
    assert store.expire(100 * S) == 100 * S and store.msgs == 1  # a batch of entries popped, come back
    assert len(store.ttls.heap) == 1  # compacted
    assert store.expire(100 * S) is None and store.msgs == 0


def test_max_age_spares_never_without_rescanning():
    """max_age walks past messages that never expire once: the next expiry starts after them."""
    store = _memory_store(max_age=10 * S, allow_msg_ttl=True)
    for i in range(1_000):
        store.store_msg(b"s.keep", b"", b"x", i, TTL_NEVER)
    store.store_msg(b"s.old", b"", b"x", 1_000, 0)
    store.store_msg(b"s.new", b"", b"x", 5 * S, 0)
    assert store.expire(11 * S) == 15 * S
    assert (store.msgs, store.fss.get(b"s.old")) == (1_001, None)
    assert store._age_cursor == 1_001  # the never messages are not looked at again
    assert store.expire(16 * S) is None and store.msgs == 1_000


def test_removed_messages_leave_no_heap_behind():
    """Messages that a limit removes leave their entries behind only until they outnumber the
    live messages (a stream without allow_msg_ttl keeps sourced TTLs the same way)."""
    for allow in (True, False):
        store = _memory_store(allow_msg_ttl=allow, max_msgs=10)
        for i in range(20_000):
            store.store_msg(b"s.a", b"", b"x", i, 3600 if i % 2 else TTL_NEVER)
        assert store.msgs == 10
        assert len(store.ttls.heap) <= 2 * 10 + 1024 and len(store.ttls.never) <= 2 * 10 + 1024


def test_ttls_survive_a_restart(tmp_path):
    """File store: the TTLs come back from the headers (200 messages with headers: the
    segment is read whole), and each message goes at its own time after the restart, its
    marker too."""
    store_dir = str(tmp_path / "js")

    async def main(server: NatsServer):
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="K", subjects=["k.>"], subject_delete_marker_ttl=5))
        for i in range(200):
            await js.publish(f"k.{i}", b"v", headers={"Nats-TTL": "60s" if i else "10s"})
        await js.publish("k.keep", b"v")
        await nc.close()

    async def after(server: NatsServer):
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        info = await js.stream_info("K")
        assert info.state.messages == 201 and info.state.last_seq == 201
        await server.advance_async(11)  # k.0 (10 s) goes: its marker is the newest message
        info = await js.stream_info("K")
        assert info.state.messages == 201 and info.state.last_seq == 202
        marker = await js.get_msg("K", 202)
        assert marker.subject == "k.0" and marker.headers["Nats-Marker-Reason"] == "MaxAge"
        await server.advance_async(48)  # 59 s: the marker (5 s) went, nothing else
        info = await js.stream_info("K")
        assert info.state.messages == 200 and info.state.last_seq == 202
        await server.advance_async(2)  # 61 s after the publishes: the others go, each for a marker
        info = await js.stream_info("K")
        assert info.state.messages == 200 and info.state.last_seq == 401
        await server.advance_async(6)  # the markers' own 5 s: k.keep stays
        info = await js.stream_info("K")
        assert info.state.messages == 1 and info.state.first_seq == 201
        await nc.close()

    with NatsServer(jetstream=True, store_dir=store_dir, clock="manual") as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))
        server.restart()
        asyncio.run(asyncio.wait_for(after(server), TIMEOUT))


def test_the_ttl_snapshot_spares_reading_headers(tmp_path, monkeypatch):
    """A clean stop writes the TTL schedule (msgs/ttl.snap); the next start reads only the
    headers of what was stored after it, also after a crash (no new snapshot), and a torn
    snapshot is read around (every header again)."""
    cfg = check_stream_config(ServerStreamConfig(name="F", subjects=["f.>"], allow_msg_ttl=True), {})
    path = str(tmp_path / "F")
    parsed: list[bytes] = []
    real = store_module.header_ttl
    monkeypatch.setattr(store_module, "header_ttl", lambda hdr: parsed.append(hdr) or real(hdr))

    def publish(store: FileStore, first: int, count: int) -> None:
        for i in range(first, first + count):
            ttl = TTL_NEVER if i % 10 == 0 else 100 + i
            hdr = b"NATS/1.0\r\nNats-TTL: %s\r\nN: %d\r\n\r\n" % (b"never" if ttl < 0 else b"%d" % ttl, i)
            store.store_msg(b"f.a", hdr, b"x", i * S, ttl)
        store.flush()

    store = FileStore(path, cfg)
    publish(store, 1, 100)
    store.remove_msg(5)
    schedule = (sorted(store.ttls.heap), store.ttls.never)
    store.stop()
    store = FileStore(path, cfg)
    assert parsed == [] and (sorted(store.ttls.heap), store.ttls.never) == (
        sorted(e for e in schedule[0] if e[1] != 5), schedule[1])
    publish(store, 101, 50)
    schedule = (sorted(store.ttls.heap), set(store.ttls.never))
    for fd in store.fds.values():  # a crash: no stop, no new snapshot
        os.close(fd)
    store.fds.clear()
    store = FileStore(path, cfg)
    assert len(parsed) == 50 and (sorted(store.ttls.heap), store.ttls.never) == schedule
    store.stop()
    with open(os.path.join(path, "msgs", "ttl.snap"), "r+b") as f:
        f.truncate(40)
    parsed.clear()
    store = FileStore(path, cfg)
    assert len(parsed) == 149 and (sorted(store.ttls.heap), store.ttls.never) == schedule
    store.stop()


@pytest.mark.parametrize("cipher", [crypto.CHACHA, crypto.AES])
def test_encrypted_stores_recover_ttls_from_the_headers(tmp_path, cipher):
    """An encrypted store keeps no snapshot: its TTLs come back from the decrypted headers,
    from small segments a header at a time and from a big one read whole."""
    cfg = check_stream_config(ServerStreamConfig(name="E", subjects=["e.>"], allow_msg_ttl=True), {})
    stream_cipher = crypto.StreamCipher(cipher, os.urandom(32))
    path = str(tmp_path / "E")
    store = FileStore(path, cfg, segment_size=400, cipher=stream_cipher)
    for i in range(1, 21):  # a few to a segment
        store.store_msg(b"e.small", b"NATS/1.0\r\nNats-TTL: %ds\r\n\r\n" % (10 + i), b"x", i * S, 10 + i)
    store.flush()
    store.segment_size = 1 << 20
    store._roll()
    for i in range(21, 121):  # 100 in one segment
        ttl = TTL_NEVER if i % 7 == 0 else 10 + i
        value = b"never" if ttl < 0 else b"%d" % ttl
        store.store_msg(b"e.big", b"NATS/1.0\r\nA: b\r\nNats-TTL: %s\r\n\r\n" % value, b"x", i * S, ttl)
    schedule = (sorted(store.ttls.heap), set(store.ttls.never))
    store.stop()
    assert len(store.segs) > 3 and not os.path.exists(os.path.join(path, "msgs", "ttl.snap"))
    store = FileStore(path, cfg, segment_size=1 << 20, cipher=stream_cipher)
    assert (sorted(store.ttls.heap), store.ttls.never) == schedule and (len(schedule[0]), len(schedule[1])) == (105, 15)
    store.stop()


def test_nats_py_key_value_with_per_key_ttl(tmp_path):
    """nats-py 2.16's Key-Value with per-key TTLs (``kv.create(..., msg_ttl=)``) and limit
    markers: the key goes at its time, a watcher sees the server's marker as a purge, and the
    marker goes after its own TTL. nats-py's ``limit_marker_ttl`` asks the server for JetStream
    API level 1 (INFO api_lvl: protocol/const.py JS_API_LEVEL)."""

    async def main(server: NatsServer):
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        kv = await js.create_key_value(nats.js.api.KeyValueConfig(bucket="sessions", limit_marker_ttl=5))
        config = (await js.stream_info("KV_sessions")).config
        assert config.allow_msg_ttl and config.subject_delete_marker_ttl == 5
        await kv.create("alice", b"token", msg_ttl=10)
        await kv.put("bob", b"forever")
        watcher = await kv.watchall()
        # (push deliveries look for the new subscriber every 50 ms of the server's time)
        await server.advance_async(0.1)
        first = await watcher.updates(timeout=2)
        second = await watcher.updates(timeout=2)
        assert {first.key, second.key} == {"alice", "bob"}
        assert await watcher.updates(timeout=2) is None  # (the end of the initial values)
        await server.advance_async(9)
        assert (await kv.get("alice")).value == b"token"
        await server.advance_async(2)
        update = await watcher.updates(timeout=2)
        assert (update.key, update.operation) == ("alice", "PURGE")
        marker = await js.get_last_msg("KV_sessions", "$KV.sessions.alice")
        assert (marker.seq, marker.headers) == (3, {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "5s", "Nats-Rollup": "sub"})
        assert (await js.stream_info("KV_sessions")).state.messages == 2
        await server.advance_async(6)  # the marker's own 5 s
        info = await js.stream_info("KV_sessions")
        assert info.state.messages == 1 and info.state.last_seq == 3
        # A purge marker with a TTL (kv.purge(msg_ttl=)) rolls the key up, then goes itself
        # (a marker: no server marker for it).
        await kv.purge("bob", msg_ttl=8)
        info = await js.stream_info("KV_sessions")
        assert info.state.messages == 1 and info.state.last_seq == 4
        await server.advance_async(9)
        info = await js.stream_info("KV_sessions")
        assert info.state.messages == 0 and info.state.last_seq == 4
        await watcher.stop()
        await nc.close()

    with NatsServer(jetstream=True, store_dir=str(tmp_path / "js"), clock="manual") as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT))


if __name__ == "__main__":
    assert reference.NATS_SERVER, "nats-server 2.15.1 is not installed"
    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", JS_CONFIG % folder, Path(folder), binary=reference.NATS_SERVER) as port:
        RECORDED.write_text(json.dumps(run_script(port, _sleeper()), indent=1) + "\n")
    print(f"wrote {RECORDED}")
