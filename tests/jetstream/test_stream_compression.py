"""Stream ``compression`` (nats-server 2.10+, as 2.15.1 answers it) and natserver's compressed
segments (store.py, compressed.py).

The API part is one script run against natserver that must give what was recorded from
nats-server 2.15.1 in data/stream_compression_nats_server_2.15.1.json (``python -m
tests.jetstream.test_stream_compression`` records it again); a live 2.15.1, when installed,
must still give it. The store part checks what is on disk: sealed segments compressed and
smaller, reads by sequence and subject, restarts with and without index files, encryption
(compress, then encrypt under a fresh keystream), erasing, corrupt chunks, a crash at each
step of compressing a segment, and kill -9 of a server whose stream compresses."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from natserver.jetstream import compressed
from natserver.jetstream.crypto import AES, CHACHA, ServerKey
from natserver.jetstream.store import FileStore, MemoryStore
from tests import reference
from tests.jetstream import test_jetstream_crash as crash
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_consumer_rules import RawClient
from tests.jetstream.test_jetstream_store import StoreMachine, config

RECORDED = Path(__file__).with_name("data") / "stream_compression_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 30


def _stream(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], **config}


def _update(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", {"name": name, "subjects": [name.lower()], **config}


SCRIPT: list[tuple[str, str, object]] = [
    ("file stream with s2", *_stream("A", compression="s2")),
    ("memory stream with s2", *_stream("M", compression="s2", storage="memory")),
    ("explicit none", *_stream("N", compression="none")),
    ("without the field", *_stream("O")),
    ("unknown algorithm", *_stream("B", compression="zstd")),
    ("empty string", *_stream("C", compression="")),
    ("upper case", *_stream("E", compression="S2")),
    ("a number", *_stream("D", compression=1)),
    ("a boolean", *_stream("F", compression=True)),
    ("an object", *_stream("G", compression={"alg": "s2"})),
    ("null", *_stream("H", compression=None)),
    ("update s2 to none", *_update("A", compression="none")),
    ("update none to s2", *_update("A", compression="s2")),
    ("update without the field", *_update("A")),
    ("update to s2 again", *_update("A", compression="s2")),
    ("update with an unknown algorithm", *_update("A", compression="lz4")),
    ("update memory to none", *_update("M", compression="none", storage="memory")),
    ("publish 1", "a", b'{"n":1}'),
    ("publish 2", "a", b'{"n":2}'),
    ("get 2", "$JS.API.STREAM.MSG.GET.A", {"seq": 2}),
    ("info", "$JS.API.STREAM.INFO.A", b""),
    ("list", "$JS.API.STREAM.LIST", {"subject": "a"}),
]


def _normal(answer: str):
    """An API error as it is; a stream by its name, storage and compression (natserver leaves
    ``"compression": "none"`` out, with the rest of 2.10+'s always-written fields: issue
    #27); a publish ack by its sequence; a message by its subject, sequence and data."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer
    if "error" in document:
        return {"error": document["error"]}
    if "streams" in document:
        return [_normal(json.dumps(s)) for s in document["streams"]]
    if "config" in document:
        cfg = document["config"]
        return {"name": cfg["name"], "storage": cfg["storage"], "compression": cfg.get("compression", "none"),
                "messages": document["state"]["messages"]}
    if "message" in document:
        message = document["message"]
        return {k: message[k] for k in ("subject", "seq", "data")}
    if "seq" in document:
        return {"seq": document["seq"]}
    return sorted(document)


def run_script(port: int) -> dict:
    client = RawClient(port)
    return {name: [_normal(a) for a in client.request(subject, body)] for name, subject, body in SCRIPT}


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)



def test_jsz_reports_the_compression(tmp_path):
    """/jsz's stream details carry the configuration as stream info does: ``"compression":
    "s2"`` (what 2.15.1 reports there too)."""
    from tests.jetstream.test_jsz import Running

    servers = [("natserver", [sys.executable, "-m", "natserver"])]
    if reference.NATS_SERVER:
        servers.append(("nats-server", [reference.NATS_SERVER]))
    for name, cmd in servers:
        server = Running(cmd, tmp_path / name)
        try:
            client = RawClient(server.port)
            assert "error" not in json.loads(client.request(*_stream("Z", compression="s2"))[0])
            _, doc = server.get("/jsz?streams=true&config=true")
            detail = doc["account_details"][0]["stream_detail"][0]
            assert (detail["name"], detail["config"]["compression"]) == ("Z", "s2"), name
        finally:
            server.stop()


# -- the store ------------------------------------------------------------------------------

NS = 1_000_000_000
SEGMENT = 32 * 1024
CHUNK = 2048


def event(i: int) -> bytes:
    """A JSON-ish event: compressible, as most streams' payloads are."""
    return json.dumps({"id": i, "user": f"user-{i % 97}", "event": "page_view", "path": f"/products/{i % 500}",
                       "ts": f"2026-11-28T10:{i % 60:02d}:00Z"}).encode()


def header(i: int) -> bytes:
    return b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i if i % 5 == 0 else b""


def open_store(path, compression="s2", cipher=None, **kwargs) -> FileStore:
    kwargs.setdefault("segment_size", SEGMENT)
    kwargs.setdefault("chunk_size", CHUNK)
    return FileStore(str(path), config(compression=compression), cipher=cipher, **kwargs)


def fill(store, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        assert store.store_msg(b"ev.%d" % (i % 7), header(i), event(i), (i + 1) * NS) == i + 1
    store.flush()


def check(store, n: int, gone=()) -> None:
    """Every message by sequence, and by subject (next and last), is what was stored."""
    for i in range(n):
        msg = store.load_msg(i + 1)
        if i + 1 in gone:
            assert msg is None
            continue
        assert (msg.subject, msg.hdr, msg.data, msg.ts) == (b"ev.%d" % (i % 7), header(i), event(i), (i + 1) * NS), i
    for k in range(7):
        live = [s for s in range(k + 1, n + 1, 7) if s not in gone]
        assert store.load_next_msg(b"ev.%d" % k, 1).seq == live[0]
        assert store.load_last_msg(b"ev.%d" % k).seq == live[-1]
        assert store.num_pending(1, b"ev.%d" % k) == len(live)


def files(path, suffix: str) -> list[str]:
    return sorted(name for name in os.listdir(Path(path) / "msgs") if name.endswith(suffix))


def disk(path) -> int:
    return sum(os.path.getsize(Path(path) / "msgs" / n) for n in os.listdir(Path(path) / "msgs")
               if n.endswith((".seg", compressed.SUFFIX)))


def test_sealed_segments_are_compressed_and_read_back(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for path, compression in ((plain, "none"), (packed, "s2")):
        store = open_store(path, compression)
        fill(store, 3000)
        check(store, 3000)
        store.stop()
    # Every segment but the one being written is compressed: no plain copy left behind.
    assert files(packed, ".seg") == [f"{files(packed, '.sz').__len__() + 1}.seg"]
    assert not files(plain, compressed.SUFFIX)
    assert disk(packed) < disk(plain) / 2.5
    # Reopened from the index files, then from the records (every chunk read and checked).
    for drop_index in (False, True):
        if drop_index:
            for name in files(packed, ".idx"):
                os.unlink(packed / "msgs" / name)
        store = open_store(packed, dedup_window=10**13, now=3000 * NS)
        assert (store.msgs, store.first_seq, store.last_seq, store.lost) == (3000, 1, 3000, 0)
        assert len(store.recovered_ids) == 600  # (Nats-Msg-Ids read back from the chunks)
        check(store, 3000)
        store.stop()
    # Appending after a restart, and reading all of it after another.
    store = open_store(packed)
    fill(store, 1000, first=3000)
    check(store, 4000)
    store.stop()
    store = open_store(packed)
    check(store, 4000)
    assert len(store.zsegs) == len(store.segs) - 1
    store.stop()


def test_reads_decompress_a_chunk_once(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    fill(store, 2000)
    store.stop()
    store = open_store(tmp_path)
    reads = []
    original = compressed.ZSegment.read_chunk
    monkeypatch.setattr(compressed.ZSegment, "read_chunk", lambda z, i, xor=None: reads.append(i) or original(z, i, xor))
    for seq in range(1, 2001):  # in order: each chunk decompressed once
        assert store.load_msg(seq).data == event(seq - 1)
    chunks = sum(len(z.starts) for z in store.zsegs.values())
    assert chunks > 10 and len(reads) == chunks
    store.stop()


def test_memory_store_takes_the_setting_and_keeps_messages_as_they_are():
    store = MemoryStore(config(compression="s2"))
    store.store_msg(b"a", b"", event(1), 1)
    assert store.load_msg(1).data == event(1) and store.bytes == 1 + 16 + len(event(1))


def test_switching_compression_on_and_off(tmp_path):
    """An update changes how segments sealed from then on are kept; segments already on disk
    stay as they are, and both kinds are read."""
    store = open_store(tmp_path, "none")
    fill(store, 1000)
    plain_before = files(tmp_path, ".seg")
    store.update_config(config(compression="s2"))
    fill(store, 1000, first=1000)
    assert files(tmp_path, compressed.SUFFIX) and set(plain_before[:-1]) <= set(files(tmp_path, ".seg"))
    store.update_config(config(compression="none"))
    fill(store, 1000, first=2000)
    check(store, 3000)
    store.stop()
    store = open_store(tmp_path, "none")
    check(store, 3000)
    store.stop()


@pytest.mark.parametrize("cipher", [CHACHA, AES])
def test_encrypted_compressed_segments(tmp_path, cipher):
    """Compressed, then encrypted: nothing of the messages in the clear, smaller than the
    encrypted plain store; an erase writes the segment again under a new keystream."""
    key = ServerKey(cipher, "k")
    key_file, stream_cipher = key.key_file_bytes()
    store = open_store(tmp_path, cipher=stream_cipher)
    fill(store, 2000)
    store.stop()
    segments = files(tmp_path, compressed.SUFFIX)
    assert segments and not files(tmp_path, ".idx")
    raw = b"".join((tmp_path / "msgs" / name).read_bytes() for name in segments)
    assert b"page_view" not in raw and b"user-" not in raw and b"ev.1" not in raw
    plain_length = sum(struct.unpack_from("<Q", (tmp_path / "msgs" / name).read_bytes(), 16)[0] for name in segments)
    assert len(raw) < plain_length / 2
    first = (tmp_path / "msgs" / segments[0]).read_bytes()
    zid = struct.unpack_from("<Q", first, 8)[0]
    assert zid >> 63 == 1
    store = open_store(tmp_path, cipher=key.open_key_file(key_file, "stream 'S'"))
    check(store, 2000)
    assert store.remove_msg(3, erase=True)
    again = (tmp_path / "msgs" / segments[0]).read_bytes()
    assert struct.unpack_from("<Q", again, 8)[0] not in (0, zid)
    store.stop()
    store = open_store(tmp_path, cipher=key.open_key_file(key_file, "stream 'S'"))
    assert store.lost == 0
    check(store, 2000, gone={3})
    store.stop()


def test_erase_in_a_compressed_segment(tmp_path):
    store = open_store(tmp_path)
    fill(store, 2000)
    assert store.remove_msg(7, erase=True) and store.remove_msg(700, erase=True)
    check(store, 2000, gone={7, 700})
    store.stop()
    raw = b"".join(bytes(compressed.ZSegment(os.open(tmp_path / "msgs" / n, os.O_RDONLY)).read_chunk(i))
                   for n in files(tmp_path, compressed.SUFFIX)[:2] for i in range(3))
    assert event(6) not in raw and event(5) in raw  # (overwritten in the compressed bytes too)
    store = open_store(tmp_path)
    assert (store.msgs, store.lost) == (1998, 0)
    check(store, 2000, gone={7, 700})
    store.stop()


def test_chunks_are_compressed_as_they_fill_up(tmp_path, monkeypatch):
    """Sealing a segment compresses only its last chunk (the others were compressed as they
    filled up): no long pause per segment. An erase in the segment being written makes its
    chunks from there on be compressed again: the erased bytes never reach the file."""
    sizes = []
    original = compressed.compress_chunks
    monkeypatch.setattr(compressed, "compress_chunks", lambda data, cuts: sizes.append(len(data)) or original(data, cuts))
    store = open_store(tmp_path)
    fill(store, 1000)
    assert store.remove_msg(store.last_seq - 50, erase=True)  # (in the segment being written)
    erased = event(store.last_seq - 51)
    fill(store, 1000, first=1000)
    assert len(store.zsegs) >= 3 and max(sizes) < 2 * CHUNK
    check(store, 2000, gone={950})
    store.stop()
    raw = b"".join(bytes(z.read_chunk(i)) for z in [compressed.ZSegment(os.open(tmp_path / "msgs" / n, os.O_RDONLY))
                                                   for n in files(tmp_path, compressed.SUFFIX)] for i in range(len(z.starts)))
    assert erased not in raw and event(948) in raw


def test_a_corrupt_chunk_loses_only_its_messages(tmp_path):
    store = open_store(tmp_path)
    fill(store, 2000)
    store.stop()
    for name in files(tmp_path, ".idx"):
        os.unlink(tmp_path / "msgs" / name)
    path = tmp_path / "msgs" / files(tmp_path, compressed.SUFFIX)[0]
    z = compressed.ZSegment(os.open(path, os.O_RDONLY))
    data = bytearray(path.read_bytes())
    data[z.offsets[1] + 10] ^= 0xFF  # the second chunk
    path.write_bytes(bytes(data))
    store = open_store(tmp_path)
    assert store.lost == 1
    lost = set(range(1, 2001)) - set(store.idx)
    assert 0 < len(lost) < 100 and min(lost) > 1 and store.last_seq == 2000
    check(store, 2000, gone=lost)
    store.stop()


def test_an_unreadable_compressed_segment_does_not_stop_the_store(tmp_path):
    store = open_store(tmp_path)
    fill(store, 2000)
    store.stop()
    name = files(tmp_path, compressed.SUFFIX)[1]
    path = tmp_path / "msgs" / name
    path.write_bytes(b"garbage" * 10)
    store = open_store(tmp_path)
    assert store.lost == 1 and store.last_seq == 2000 and store.msgs < 2000
    assert (tmp_path / "msgs" / (name + ".corrupt")).exists()
    assert store.load_msg(1).data == event(0) and store.load_msg(2000).data == event(1999)
    store.stop()


@pytest.mark.parametrize("step", ["write", "rename", "unlink"])
def test_a_crash_while_compressing_a_segment(tmp_path, monkeypatch, step):
    """A crash at each step of replacing a sealed segment by its compressed form (nothing
    after it happens: the store object is abandoned, as by kill -9): the restart serves every
    message, from one whole file or the other, and compresses what was left plain."""
    store = open_store(tmp_path)

    class Crash(Exception):
        pass

    def crash(*args, **kwargs):
        raise Crash

    real_assemble = compressed.assemble
    if step == "write":  # half of the temporary file written
        def torn(chunks, xor=None):
            out = real_assemble(chunks, xor)
            (tmp_path / "msgs" / f"{store.active - 1}.sz.tmp").write_bytes(out[: len(out) // 2])
            raise Crash
        monkeypatch.setattr(compressed, "assemble", torn)
    elif step == "rename":
        monkeypatch.setattr("natserver.jetstream.store.write_atomic", crash)
    else:  # renamed, the plain segment not removed yet
        real_unlink = os.unlink
        monkeypatch.setattr(os, "unlink", lambda p, *a, **k: crash() if str(p).endswith(".seg") else real_unlink(p, *a, **k))
    with pytest.raises(Crash):
        fill(store, 2000)
    done = store.last_seq
    monkeypatch.undo()
    store = open_store(tmp_path)
    assert (store.msgs, store.last_seq, store.lost) == (done, done, 0)
    check(store, done)
    assert not [n for n in os.listdir(tmp_path / "msgs") if n.endswith(".tmp")]
    sealed = [seg for seg in store.segs if seg != store.active]
    assert sealed and all(seg in store.zsegs for seg in sealed)
    assert all(not (tmp_path / "msgs" / f"{seg}.seg").exists() for seg in sealed)
    store.stop()


class CompressedStoreMachine(StoreMachine):
    """test_jetstream_store's state machine (a memory store, a file store reopened at random
    and a model, side by side) with a compressing file store: tiny segments and chunks, so
    that messages, deletions, erasures and purges land in compressed segments."""

    store_kwargs = {"segment_size": 200, "chunk_size": 64}
    compression = "s2"

    @invariant()
    def sealed_segments_are_compressed(self):
        store = getattr(self, "file", None)
        if store is not None:
            assert all(seg in store.zsegs for seg in store.segs if seg != store.active)


TestCompressedStoreMachine = CompressedStoreMachine.TestCase
TestCompressedStoreMachine.settings = settings(max_examples=30, stateful_step_count=30, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])

# kill -9 of a server whose stream compresses: test_jetstream_crash's flood, with segments of
# 64 KiB (and 4 KiB chunks) so that the flood seals and compresses several.
_SMALL_SEGMENTS = ("-c", "import runpy; from natserver.jetstream.store import FileStore; "
                   "FileStore.__init__.__kwdefaults__.update(segment_size=65536, chunk_size=4096); "
                   "runpy.run_module('natserver', run_name='__main__')")


def test_kill_9_during_publish_flood_with_compression(tmp_path):
    store = tmp_path / "store"
    last = 0
    for _ in range(2):
        server = crash.Proc("natserver", store, launcher=_SMALL_SEGMENTS)
        try:
            acked = crash.flood_and_kill(server, first=last, stream={"compression": "s2"})
        finally:
            server.stop()
        assert acked and min(acked) == last + 1
        server = crash.Proc("natserver", store, launcher=_SMALL_SEGMENTS)
        try:
            last = crash.check_restarted(server, acked)
        finally:
            server.stop()
    msgs = store / "jetstream" / "$G" / "streams" / "CRASH" / "msgs"
    assert len([n for n in os.listdir(msgs) if n.endswith(compressed.SUFFIX)]) >= 2


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)
