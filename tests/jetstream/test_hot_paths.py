"""The shortcuts of JetStream's hot paths (issue 33) answer as the long ways they skip: the ack
floor found by looking up from the last one (consumer.py, FLOOR_SCAN), next_seq's answer
when the start sequence matches (store.py), and the file store's read-ahead block
(FileStore._read_ahead) after erases, removals and new segments, a KV get's answer without
decoding a request (api.Api.handle, direct.DirectGets.last), a subject's first and last
sequence when a replaced message leaves one (Store._remove), a publish without headers
stored without the header checks (Stream.inbound), a message read in place from the
read-ahead block (FileStore._load), a direct get's answer written straight into the
requester's buffer (DirectGets._answer, Client.deliver_replies), a KV get answered again
from the answers kept (direct.Answers), the expired acks found without a copy of all of
pending (Consumer.expire_acks), the file store's removal in one frame (FileStore._remove), and a
run of publishes stored with its checks made once (Stream.inbound_run)."""

from __future__ import annotations

import random
import tempfile
from types import SimpleNamespace
from unittest import mock

import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import natserver
from natserver.jetstream import api as api_mod
from natserver.jetstream import consumer as consumer_mod
from natserver.jetstream import direct as direct_mod
from natserver.jetstream import fastbatch as fastbatch_mod
from natserver.jetstream import msgindex as msgindex_mod
from natserver.jetstream import store as store_mod
from natserver.jetstream.api import Api
from natserver.jetstream.consumer import Consumer, ConsumerConfig, set_defaults
from natserver.jetstream.errors import ApiError
from natserver.jetstream.store import READ_AHEAD, FileStore, MemoryStore, Store
from natserver.jetstream.stream import Stream, StreamConfig, check_stream_config


def _cfg() -> StreamConfig:
    return check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {})


class _Stream:
    def __init__(self) -> None:
        self.name = "S"
        self.cfg = _cfg()
        self.store = MemoryStore(self.cfg)


def _floor(c: Consumer) -> tuple[int, int]:
    """The ack floor as min() over every pending sequence says it."""
    if not c.pending:  # (the stored state's delivered, which a look past the end leaves)
        return c.delivered_cseq, c.state_sseq
    first = min(c.pending)
    return c.pending[first][0] - 1, first - 1


def test_ack_floor_with_gaps_out_of_order_acks_and_a_replaced_pending():
    """A filtered consumer (gaps of more than FLOOR_SCAN between its messages), acks in a
    random order, a redelivery and a purge between: after every ack the floor is min()'s."""
    stream = _Stream()
    rng = random.Random(33)
    for i in range(3000):
        wanted = rng.random() < 0.3 or i % 200 == 0
        stream.store.store_msg(b"s.a" if wanted else b"s.b", b"", b"x", 1)
        if not wanted and i % 500 == 7:  # runs of other subjects past FLOOR_SCAN
            for _ in range(consumer_mod.FLOOR_SCAN + 5):
                stream.store.store_msg(b"s.b", b"", b"x", 1)
    cfg = ConsumerConfig(durable_name="d", ack_policy="explicit", filter_subject="s.a", max_ack_pending=100)
    set_defaults(cfg)
    c = Consumer(stream, "d", cfg, 1)
    acks = 0
    while True:
        got = c.next_msg(2)
        if got is None:
            if not c.pending:
                break
        pending = list(c.pending)
        if got is None or rng.random() < 0.4:
            seq = rng.choice(pending) if rng.random() < 0.7 else min(pending)
            assert c.ack(seq, 0, 3) == [seq]
            assert (c.ack_floor_cseq, c.ack_floor_sseq) == _floor(c)
            acks += 1
        if acks == 200:  # a purge past everything delivered halfway: every pending ack goes
            c.purged(c.delivered_sseq + 1, stream.store.last_seq)
            assert c.pending == {}
            acks += 1
    assert acks > 500 and c.ack_floor_sseq == c.state_sseq


def _expire_acks_copying(c: Consumer, now: int) -> list[int]:
    """Consumer.expire_acks as it was: a copy of all of pending each call, looked at up to its
    first entry not expired (without backoff), every entry with one."""
    snapshot = list(c.pending.items())
    if not c.cfg.backoff:
        young = [i for i, (seq, (_, at)) in enumerate(snapshot) if at + c.ack_wait_for(seq) > now]
        snapshot = snapshot[: young[0]] if young else snapshot
    expired = [seq for seq, (_, at) in snapshot if at + c.ack_wait_for(seq) <= now and seq not in c.rdq]
    exhausted = [seq for seq in expired if 0 < c.cfg.max_deliver <= c.rdc.get(seq, 1)]
    for seq in exhausted:
        c._forget(seq)
    c.rdq.extend(seq for seq in expired if seq not in exhausted)
    if exhausted:
        c._update_floor()
    c.rdq.sort()
    return exhausted


@settings(max_examples=200, deadline=None)
@given(pending=st.lists(st.tuples(st.integers(1, 60), st.integers(0, 12)), max_size=40, unique_by=lambda t: t[0]),
       redelivered=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 4)), max_size=10),
       queued=st.lists(st.integers(1, 60), max_size=5), max_deliver=st.sampled_from([-1, 2, 3]),
       backoff=st.sampled_from([None, [10, 30]]), now=st.integers(8, 45))
def test_expiring_acks_looks_at_what_a_copy_of_pending_gave(pending, redelivered, queued, max_deliver, backoff, now):
    """Consumer.expire_acks takes only pending's expired head (no backoff) where it copied all
    of pending every tick: the same redeliveries queued, the same exhausted dropped, the same
    floor, for any pending (any order of delivery times), redelivery counts and queue."""
    outcomes = []
    for expire in (Consumer.expire_acks, _expire_acks_copying):
        cfg = ConsumerConfig(durable_name="d", ack_policy="explicit", ack_wait=20, max_deliver=max_deliver,
                             backoff=backoff)
        c = Consumer(_Stream(), "d", cfg, 1)
        for seq, at in pending:
            c.pending[seq] = [seq, at]
        c.rdc.update((seq, n) for seq, n in redelivered if seq in c.pending)
        c.rdq.extend(seq for seq in queued if seq in c.pending and seq not in c.rdq)
        got = expire(c, now)
        outcomes.append((got, list(c.pending.items()), c.rdq, dict(c.rdc), c.ack_floor_sseq, c.ack_floor_cseq))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_next_seq_is_the_first_match_at_or_after_start(kind, tmp_path):
    store = MemoryStore(_cfg()) if kind == "memory" else FileStore(str(tmp_path), _cfg(), segment_size=4096)
    try:
        rng = random.Random(7)
        subjects = [b"s.%d.x" % rng.randrange(8) for _ in range(400)]
        for subj in subjects:
            store.store_msg(subj, b"", b"y" * rng.randrange(40), 1)
        for seq in rng.sample(range(1, 401), 60):
            store.remove_msg(seq)
        live = {seq: subjects[seq - 1] for seq in range(1, 401) if store.load_msg(seq) is not None}
        for filt, match in ((b"s.3.x", lambda s: s == b"s.3.x"), (b"s.*.x", lambda s: True),
                            (b"s.>", lambda s: True), (b"s.5.*", lambda s: s == b"s.5.x"), (b"t.>", lambda s: False)):
            for start in range(1, 402):
                want = next((seq for seq in range(start, 401) if seq in live and match(live[seq])), 0)
                assert store.next_seq(filt, start) == want, (filt, start)
    finally:
        store.stop()


def test_read_ahead_never_serves_what_changed(tmp_path):
    """Messages read through the read-ahead block are those stored; after an erase in place
    the erased one is gone and the others still read right; across segments and after the
    oldest segments went."""
    store = FileStore(str(tmp_path), _cfg(), segment_size=READ_AHEAD // 2)
    try:
        bodies = {}
        for i in range(1, 1201):
            bodies[i] = b"%d-" % i + b"z" * (i % 97)
            assert store.store_msg(b"s.%d" % (i % 5), b"", bodies[i], i) == i
        store.flush()
        for i in range(1, 1201):
            assert store.load_msg(i).data == bodies[i]
        assert store.load_msg(600).data == bodies[600]  # (its block is the one read last)
        assert store.remove_msg(601, erase=True)
        assert store.load_msg(601) is None
        for i in (598, 599, 600, 602, 603):
            assert store.load_msg(i).data == bodies[i]
        for i in range(1, 500):  # the oldest segments go; reads go on from the newer ones
            store.remove_msg(i)
        store.flush()
        for i in range(500, 1201):
            msg = store.load_msg(i)
            assert (msg is None) if i == 601 else (msg.data == bodies[i]), i
        for i in range(1201, 1301):  # more, read back before and after the flush
            bodies[i] = b"%d" % i
            store.store_msg(b"s.x", b"", bodies[i], i)
            assert store.load_msg(i).data == bodies[i]
        store.flush()
        assert [store.load_msg(i).data for i in range(1190, 1301)] == [bodies[i] for i in range(1190, 1301)]
    finally:
        store.stop()


@settings(max_examples=60, deadline=None)
@given(msgs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3000), st.booleans()), min_size=1, max_size=80),
       removed=st.sets(st.integers(1, 80), max_size=20), flush=st.integers(0, 80),
       reads=st.lists(st.integers(1, 82), min_size=1, max_size=60), corrupt=st.one_of(st.none(), st.integers(1, 80)))
def test_load_msg_in_place_reads_what_the_copy_reads(msgs, removed, flush, reads, corrupt):
    """FileStore.load_msg cuts a message in place from the read-ahead block (FileStore._load):
    for any sizes (records across the block's end, in the unflushed buffer), headers,
    removals, a corrupt record and any order of reads, it answers what MemoryStore answers,
    and None (logged) where _record's checked copy says the record is corrupt."""
    with tempfile.TemporaryDirectory() as tmp:
        mem, store = MemoryStore(_cfg()), FileStore(tmp, _cfg(), segment_size=1 << 16)
        try:
            for i, (subj, size, with_hdr) in enumerate(msgs):
                hdr = b"NATS/1.0\r\nI: %d\r\n\r\n" % i if with_hdr else b""
                for s in (mem, store):
                    s.store_msg(b"s.%d" % subj, hdr, b"%d:" % i + b"d" * size, 10 + i)
                if i + 1 == flush:
                    store.flush()
            for seq in sorted(removed):
                if seq <= len(msgs):
                    mem.remove_msg(seq)
                    store.remove_msg(seq)
            bad = None
            if corrupt is not None and corrupt <= len(msgs) and corrupt not in removed:
                store.flush()
                idx, i = store.idx, corrupt - store.idx.base
                with open(store._seg_path(idx.seg[i]), "r+b") as f:  # a byte of its payload changed
                    f.seek(idx.off[i] + idx.size[i] - 2)
                    f.write(b"X")
                store._rblock, bad = None, corrupt
            for seq in reads:
                got, want = store.load_msg(seq), mem.load_msg(seq)
                if seq == bad:
                    assert got is None
                    continue
                assert (got is None) == (want is None), seq
                if got is not None:
                    assert (got.seq, got.subject, got.hdr, got.data, got.ts) == (
                        want.seq, want.subject, want.hdr, want.data, want.ts)
        finally:
            mem.stop()
            store.stop()


# -- a KV get without a decoded request (api.Api.handle's fast path) -----------------------------


class _Engine:
    """What the API asks of the engine for direct gets: its streams, and a record of what it
    sends."""

    def __init__(self, streams: dict) -> None:
        self.streams = streams
        self.server = SimpleNamespace(options=SimpleNamespace(max_pending=64 << 20), publish_slow=False)
        # (its client delivers nothing itself, so every answer goes through send: the direct
        # delivery into the requester's buffer is compared on the wire below)
        self.client = SimpleNamespace(
            deliver_replies=lambda replies, publish: [publish(s, p, h) for s, p, h, _ in replies])
        self.account = self.cluster = None
        self.sent: list = []

    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None, reply: bytes | None = None) -> None:
        self.sent.append((subject, payload, headers, reply))


def _kv_stream(name: str, store_dir: str | None, **cfg):
    config = check_stream_config(StreamConfig(name=name, subjects=[f"$KV.{name}.>"], **cfg), {})
    store = MemoryStore(config) if store_dir is None else FileStore(store_dir, config, segment_size=4096)
    return SimpleNamespace(name=name, cfg=config, store=store)


_KEYS = st.sampled_from([b"k1", b"k2", b"k.3", b"a.b.c", b"*", b">", b"k*", b"\xc3\xa9"])
_STREAMS = st.sampled_from([b"B", b"N", b"M", b"X", b""])  # N: no allow_direct; M: B's direct mirror; X: none


@settings(max_examples=100, deadline=None)
@given(file=st.booleans(),
       puts=st.lists(st.tuples(_KEYS.filter(lambda k: b"*" not in k and b">" not in k), st.binary(max_size=40),
                               st.sampled_from([b"", b"NATS/1.0\r\nA: b\r\n\r\n"])), max_size=30),
       removals=st.lists(st.integers(1, 30), max_size=5),
       gets=st.lists(st.tuples(_STREAMS, _KEYS, st.sampled_from([b"", b".", b".x"]),
                               st.sampled_from([b"_R.1", b""]), st.sampled_from([None, b"NATS/1.0\r\n\r\n"])),
                     min_size=1, max_size=12))
def test_a_kv_get_answers_as_the_decoded_request(file, puts, removals, gets):
    """``$JS.API.DIRECT.GET.<stream>.<subject>`` without a body: what the fast path sends is
    what the general path (request decoded, DirectGets.request) sends, for any stream
    contents (histories of several, removals, headers), streams that answer direct gets or
    not (a mirror with mirror_direct), subjects with wildcards, without a reply, with headers."""
    with tempfile.TemporaryDirectory() as tmp:
        streams = {
            "B": _kv_stream("B", tmp if file else None, allow_direct=True, max_msgs_per_subject=2),
            "N": _kv_stream("N", None),
        }
        mirror = check_stream_config(StreamConfig(name="M", mirror={"name": "B"}, mirror_direct=True), {})
        streams["M"] = SimpleNamespace(name="M", cfg=mirror, store=MemoryStore(mirror))
        try:
            for key, data, hdr in puts:
                for stream in (streams["B"], streams["N"], streams["M"]):
                    stream.store.store_msg(b"$KV.%s.%s" % (stream.name.encode(), key), hdr, data, 7)
            store = streams["B"].store
            for seq in removals:
                if store.first_seq <= seq <= store.last_seq:  # (the file store refuses others)
                    store.remove_msg(seq)
            answers = []
            for fast in (True, False):
                engine = _Engine(streams)
                api = Api(engine)
                with mock.patch.object(api_mod, "_DIRECT_GET", api_mod._DIRECT_GET if fast else b"-none-"):
                    for name, key, tail, reply, hdr in gets:
                        subject = b"$JS.API.DIRECT.GET.%s.$KV.%s.%s%s" % (name, name, key, tail)
                        handled = api.handle(subject, reply, hdr, b"")
                        engine.sent.append(handled)
                answers.append(engine.sent)
            assert answers[0] == answers[1]
        finally:
            for stream in streams.values():
                stream.store.stop()


_OPS = st.one_of(
    st.tuples(st.just("put"), st.sampled_from([b"k1", b"k2", b"a.b.c", b"k*"]), st.binary(max_size=60),
              st.sampled_from([b"", b"NATS/1.0\r\nA: b\r\n\r\n"])),
    st.tuples(st.sampled_from(["remove", "erase", "compact"]), st.integers(1, 40)),
    st.tuples(st.just("purge"), st.sampled_from([b"", b"$KV.B.k1", b"$KV.B.>"])),
)
_GETS = [b"k1", b"k2", b"a.b.c", b"k*", b"*", b">", b"nope"]


@settings(max_examples=150, deadline=None)
@given(file=st.booleans(), budget=st.sampled_from([400, 1000, direct_mod.ANSWERS_BYTES]),
       ops=st.lists(_OPS, min_size=1, max_size=40))
def test_a_kv_get_answered_again_is_the_read_of_it(file, budget, ops):
    """DirectGets.last answers a key read before from the store's Answers: whatever came
    between (new values, removals, erases, purges, compactions, answers dropped for room), it
    sends what the general path (the request decoded, the message read and its headers built)
    sends; an erased message's answer is not kept, the kept bytes are counted right. After
    each change every key is read twice each way (the second fast read: from Answers)."""
    with mock.patch.object(direct_mod, "ANSWERS_BYTES", budget), tempfile.TemporaryDirectory() as tmp:
        stream = _kv_stream("B", tmp if file else None, allow_direct=True, max_msgs_per_subject=3)
        store = stream.store
        fast, general = _Engine({"B": stream}), _Engine({"B": stream})
        fast_gets, general_gets = Api(fast).direct, Api(general).direct
        try:
            for n, op in enumerate(ops):
                if op[0] == "put":
                    store.store_msg(b"$KV.B.%s" % op[1], op[3], op[2], n + 1)
                elif op[0] == "purge":
                    store.purge_ex(op[1], 0, 0)
                elif op[0] == "compact":
                    store.compact(op[1])
                elif store.first_seq <= op[1] <= store.last_seq:  # (the file store refuses others)
                    store.remove_msg(op[1], erase=op[0] == "erase")
                    if op[0] == "erase" and store.direct_answers is not None:
                        assert op[1] not in store.direct_answers.msgs
                for key in _GETS * 2:
                    fast_gets.last(stream, b"$KV.B.%s" % key, b"_R.1")
                    general_gets.request(stream, b"$KV.B.%s" % key, b"_R.1", b"")
                assert fast.sent == general.sent
                answers = store.direct_answers
                if answers is not None:
                    assert answers.size == sum(len(h) + len(d) + direct_mod.ANSWER_OVERHEAD
                                               for h, d in answers.msgs.values()) <= budget
        finally:
            store.stop()


def test_a_kv_get_takes_the_fast_path():
    """The usual KV get (a plain key, a reply, no body) is answered without a decoded
    request: DirectGets.request is not called; the answer is the key's last value."""
    stream = _kv_stream("B", None, allow_direct=True, max_msgs_per_subject=1)
    stream.store.store_msg(b"$KV.B.k1", b"", b"one", 7)
    stream.store.store_msg(b"$KV.B.k1", b"", b"two", 8)
    engine = _Engine({"B": stream})
    api = Api(engine)
    with mock.patch.object(api.direct, "request", side_effect=AssertionError("the general path")):
        assert api.handle(b"$JS.API.DIRECT.GET.B.$KV.B.k1", b"_R.1", None, b"")
        assert api.handle(b"$JS.API.DIRECT.GET.B.$KV.B.k9", b"_R.2", None, b"")
    (subject, data, hdr, _), (subject2, data2, hdr2, _) = engine.sent
    assert (subject, data, subject2, data2, hdr2) == (b"_R.1", b"two", b"_R.2", b"", b"NATS/1.0 404 Message Not Found\r\n\r\n")
    assert hdr.startswith(b"NATS/1.0\r\nNats-Stream: B\r\nNats-Subject: $KV.B.k1\r\nNats-Sequence: 2\r\n")


# -- a replaced message leaves one (Store._remove's shortcut) --------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_first_and_last_per_subject_after_replacements(kind, tmp_path):
    """Histories of 1 and 2 per subject, removals from the middle, front and back: each
    subject's count, first and last sequence (fss) are what the live messages say."""
    rng = random.Random(11)
    for per_subject in (1, 2, 3):
        cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"], max_msgs_per_subject=per_subject), {})
        path = tmp_path / str(per_subject)
        store = MemoryStore(cfg) if kind == "memory" else FileStore(str(path), cfg, segment_size=4096)
        try:
            for i in range(600):
                store.store_msg(b"s.%d" % rng.randrange(6), b"", b"v", i)
                if rng.random() < 0.1:
                    store.remove_msg(rng.randrange(store.first_seq, store.last_seq + 1))
                live: dict = {}
                for seq in range(store.first_seq, store.last_seq + 1):
                    msg = store.load_msg(seq)
                    if msg is not None:
                        live.setdefault(msg.subject, []).append(seq)
                assert {s: (len(q), q[0], q[-1]) for s, q in live.items()} == \
                    {s: (ss[0], ss[1], ss[2]) for s, ss in store.fss.items()}
        finally:
            store.stop()


class _GeneralRemovals(FileStore):
    """A file store removing the general way (Store._remove: MsgIndex.pop, _advance_first,
    _dropped), which FileStore._remove does in one frame."""

    _remove = Store._remove


def _file_store_state(store: FileStore) -> tuple:
    idx = store.idx
    return (store.msgs, store.bytes, store.first_seq, store.first_ts, store.last_seq, store.last_ts,
            {s: list(ss) for s, ss in store.fss.items()}, dict(store.live), bytes(store.buf), store.size,
            list(store.active_dels), store.state_dirty, idx.base, idx.head, idx.live, list(idx.sid), list(idx.ts),
            list(idx.seg), list(idx.off), list(idx.size), list(idx.subjects), dict(idx.sid_of), list(idx.refs),
            list(idx.free))


@settings(max_examples=200, deadline=None)
@given(per_subject=st.sampled_from([-1, 1, 2, 3]), max_msgs=st.sampled_from([-1, 4, 9]),
       trim_at=st.sampled_from([2, 5, 4096]),
       ops=st.lists(st.tuples(st.sampled_from(["store", "store", "store", "remove", "erase", "flush"]),
                              st.integers(0, 4), st.integers(-2, 30)), min_size=1, max_size=70))
def test_a_file_store_removal_in_one_frame_is_the_general_one(per_subject, max_msgs, trim_at, ops):
    """KV replacements (histories of 1 to 3), a limit's oldest message, deletes and erases of
    any sequence (the first, the middle, gone or never stored), flushes between, the index's
    head trimmed early or late: FileStore._remove leaves the store, its index, its records and
    its notifications as the general way does, and reports the same removals."""
    cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"], max_msgs_per_subject=per_subject,
                                           max_msgs=max_msgs), {})
    results = []
    with mock.patch.object(msgindex_mod, "_TRIM_AT", trim_at), mock.patch.object(store_mod, "_TRIM_AT", trim_at), \
            mock.patch.object(store_mod.os, "urandom", bytes):  # (an erase's bytes: zeros in both)
        for cls in (FileStore, _GeneralRemovals):
            with tempfile.TemporaryDirectory() as tmp:
                store = cls(tmp, cfg, segment_size=4096)
                seen: list = []
                store.on_remove = lambda seq, subj, seen=seen: seen.append(("removed", seq, subj))
                store.removal_listeners = [store.on_remove]
                store.notify = lambda _store, seen=seen: seen.append("dirty")
                try:
                    for i, (op, key, at) in enumerate(ops):
                        if op == "store":
                            seen.append(store.store_msg(b"s.%d" % key, b"", b"v" * key, i))
                        elif op == "flush":
                            store.flush()
                        else:
                            seq = store.first_seq + at
                            try:
                                seen.append(store.remove_msg(seq, erase=op == "erase"))
                            except store_mod.StoreError as exc:
                                seen.append(str(exc))
                        seen.append(_file_store_state(store))
                    seen.append([store.load_msg(s) is not None for s in range(1, store.last_seq + 1)])
                finally:
                    store.stop()
                results.append(seen)
    assert results[0] == results[1]


# -- a publish without headers (Stream.inbound's short way) ------------------------------------


class _StreamEngine:
    """What a stream asks of the engine while it stores publishes: the answers it sends."""

    def __init__(self, full: list) -> None:
        self.answers: list = []
        self.full = full  # over_limit's answers, one a publish in turn
        self.turn = 0
        self.server = None
        self.domain = ""

    def respond(self, reply: bytes, payload: bytes, stream) -> None:
        self.answers.append((reply, payload))

    def schedule_expiry(self, deadline_ns: int) -> None:
        self.answers.append("expiry")

    def over_limit(self, kind: str) -> bool:
        return self.full[self.turn % len(self.full)]


class _Identity:
    """An input transform that changes nothing: process_msg takes its general path."""

    def apply_bytes(self, subject: bytes) -> bytes:
        return subject


@settings(max_examples=150, deadline=None)
@given(config=st.fixed_dictionaries({
           "max_msg_size": st.sampled_from([-1, 8]), "max_msgs_per_subject": st.sampled_from([-1, 1, 2]),
           "discard": st.sampled_from(["old", "new"]), "max_msgs": st.sampled_from([-1, 5]),
           "no_ack": st.booleans(), "retention": st.sampled_from(["limits", "interest"]),
           "max_age": st.sampled_from([0, 10**12]), "sealed": st.booleans(), "allow_msg_counter": st.booleans()}),
       full=st.lists(st.booleans(), min_size=1, max_size=3),
       publishes=st.lists(st.tuples(st.sampled_from([b"s.a", b"s.b", b"s.c.d"]), st.binary(max_size=12),
                                    st.sampled_from([b"_R.1", None, b""]), st.sampled_from([None, b""])),
                          min_size=1, max_size=25))
def test_a_publish_without_headers_is_stored_as_the_checks_store_it(config, full, publishes):
    """Whatever the stream's limits and settings (sealed, counters, no_ack, interest
    retention, an account over its limits now and then): a message without headers is
    stored and answered by the short way as by the general one."""
    sealed = config.pop("sealed")
    try:
        cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"], **config), {})
    except ApiError:
        assume(False)  # (settings nats-server refuses together)
    if sealed:  # (as an update seals it)
        cfg = cfg.copy(sealed=True)
    results = []
    for general in (False, True):
        engine = _StreamEngine(full)
        stream = Stream(engine, cfg, MemoryStore(cfg), 1)
        if general:
            stream.input_transform = _Identity()
        for turn, (subject, msg, reply, hdr) in enumerate(publishes):
            engine.turn = turn
            (stream.process_msg if general else stream.inbound)(subject, reply, hdr, msg)
        store = stream.store
        stored = [(m.subject, m.hdr, m.data) for m in (store.load_msg(s) for s in range(1, store.last_seq + 1)) if m]
        results.append((engine.answers, stored, store.last_seq, store.msgs, stream.lmsgid))
    assert results[0] == results[1]


# -- a run of publishes without headers (Stream.inbound_run) ------------------------------------


class _Answers(list):
    """_RunEngine's ack queue: what is queued is answered, in turn with respond's answers."""

    def __init__(self, answers: list) -> None:
        super().__init__()
        self.answers = answers

    def append(self, item) -> None:
        self.answers.append(item[:2])


class _RunEngine(_StreamEngine):
    """_StreamEngine with a run's questions: the account's usage (``usage``: "ok", "near" when a
    whole run would not surely fit though each message does, "full") and where acks queue
    (``deferred``: a file stream's queue, else respond's answers at once)."""

    def __init__(self, usage: str, deferred: bool) -> None:
        super().__init__([usage == "full"])
        self.usage = usage
        self.deferred = deferred
        self.woken = 0

    def room(self, kind: str, nbytes: int) -> bool:
        return self.usage == "ok"

    def ack_queue(self, stream):
        return _Answers(self.answers) if self.deferred else None

    def acks_queued(self) -> None:
        self.woken += 1


@settings(max_examples=300, deadline=None)
@given(config=st.fixed_dictionaries({
           "max_msg_size": st.sampled_from([-1, 8]), "max_msgs_per_subject": st.sampled_from([-1, 1, 2]),
           "discard": st.sampled_from(["old", "new"]), "max_msgs": st.sampled_from([-1, 5]),
           "max_bytes": st.sampled_from([-1, 60]), "discard_new_per_subject": st.booleans(),
           "no_ack": st.booleans(), "retention": st.sampled_from(["limits", "limits", "interest"]),
           "max_age": st.sampled_from([0, 10**12]), "sealed": st.sampled_from([False, False, True]),
           "allow_msg_counter": st.sampled_from([False, False, True])}),
       file=st.booleans(), usage=st.sampled_from(["ok", "ok", "near", "full"]), deferred=st.booleans(),
       runs=st.lists(st.lists(st.tuples(st.sampled_from([b"s.a", b"s.b", b"s.c.d"]),
                                        st.integers(0, 12).map(lambda n: b"y" * n),
                                        st.sampled_from([b"_R.1", None, b"", b"_R.x.$FI"])),
                              min_size=1, max_size=12), min_size=1, max_size=4))
def test_a_run_of_publishes_is_stored_as_each_alone(config, file, usage, deferred, runs):
    """Whatever the stream's limits and settings, the account's usage and the store: a run of
    messages without headers (Stream.inbound_run) is stored, refused and answered as each
    one given to inbound in turn (a fast batch's reply and a message over max_msg_size hand
    the rest of the run to inbound)."""
    sealed = config.pop("sealed")
    if not config["discard"] == "new":
        config["discard_new_per_subject"] = False
    try:
        cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"], **config), {})
    except ApiError:
        assume(False)  # (settings nats-server refuses together)
    if sealed:
        cfg = cfg.copy(sealed=True)
    _runs_compare(cfg, file, usage, deferred, runs)


@pytest.mark.parametrize("config", [
    {"discard": "new", "max_msgs": 5}, {"discard": "new", "max_bytes": 100},
    {"discard": "new", "max_msgs_per_subject": 1, "discard_new_per_subject": True},
    {"max_msg_size": 8}, {"max_age": 10**12}, {"no_ack": True}, {"max_msgs": 3, "max_msgs_per_subject": 2}, {}])
@pytest.mark.parametrize("file", [False, True])
@pytest.mark.parametrize("deferred", [False, True])
def test_runs_that_meet_the_limits_are_stored_as_each_alone(config, file, deferred):
    """The limits' refusals in the middle of runs (discard new), a message over max_msg_size
    in a run, max_age's first expiry, no_ack: as each message alone."""
    cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"], **config), {})
    rng = random.Random(33)
    runs = [[(rng.choice([b"s.a", b"s.b"]), b"y" * rng.randint(0, 12), rng.choice([b"_R.1", None]))
             for _ in range(rng.randint(1, 15))] for _ in range(6)]
    answers = [a for a in _runs_compare(cfg, file, "ok", deferred, runs) if a != "expiry"]
    assert any(b'"seq":1}' in payload for _, payload, *_ in answers) or cfg.no_ack
    if config.get("discard") == "new" or "max_msg_size" in config:
        assert any(b'"error"' in payload for _, payload, *_ in answers)


def _runs_compare(cfg, file: bool, usage: str, deferred: bool, runs: list) -> list:
    """Store ``runs`` through inbound_run and through inbound one by one: the same answers,
    messages and state; returns the answers."""
    results = []
    for each in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            engine = _RunEngine(usage, deferred)
            store = FileStore(tmp, cfg) if file else MemoryStore(cfg)
            stream = Stream(engine, cfg, store, 1)
            with mock.patch.object(fastbatch_mod, "publish", lambda stream, subject, reply, hdr, msg:
                                   engine.answers.append(("fast batch", subject, reply, msg))):
                for run in runs:
                    if each:
                        for subject, msg, reply in run:
                            stream.inbound(subject, reply, None, msg)
                    else:
                        stream.inbound_run([(subject, reply, msg) for subject, msg, reply in run],
                                           sum(len(subject) + len(msg) for subject, msg, _ in run))
            stored = [(m.subject, m.hdr, m.data) for m in (store.load_msg(s) for s in range(1, store.last_seq + 1)) if m]
            results.append((engine.answers, stored, store.first_seq, store.last_seq, store.msgs, store.bytes,
                            stream.lmsgid))
            store.stop()
    assert results[0] == results[1]
    if not deferred:
        assert engine.woken == 0
    return results[0][0]


# -- a KV get's answer written straight into the requester's buffer (DirectGets._answer) -------

WIRE_TIMEOUT = 20  # s, the wire test's bound


@pytest.mark.parametrize("account", [False, True])
def test_a_direct_get_answer_delivered_directly_is_the_publish_of_it(monkeypatch, account):
    """DirectGets._answer delivers a found message through Client.deliver_replies, not the
    server's publish: the same bytes reach every kind of requester (header-aware and not, a
    wildcard inbox, two subscribers on one inbox, one with auto-unsubscribe, a queue group:
    the last three refused there and published), for KV gets and JSON gets (no_hdr, a stored
    header, a missing key), with the same message and byte counts and the same number of
    subject lookups (a refused answer's lookup counted once, by its publish), as when
    deliver_replies refuses everything (every answer through js.send); in $G and in an account
    of its own (whose publish is its internal client's)."""
    from natserver.config.mapping import options_from_dict
    from natserver.server.client import Client

    creds = b',"user":"b","pass":"b"' if account else b""

    async def requesters(port: int) -> bytes:
        async def connect(headers: bool, subs: bytes):
            s = await trio.open_tcp_stream("127.0.0.1", port)
            flag = b"true" if headers else b"false"
            await s.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":%s%s}\r\n%sPING\r\n'
                             % (flag, creds, subs))
            buf = bytearray()
            while b"PONG\r\n" not in buf:
                buf += await s.receive_some(1 << 16)
            return s

        clients = [await connect(True, b"SUB _R.> 1\r\n"), await connect(False, b"SUB _P.x 1\r\n"),
                   await connect(True, b"SUB _Y.1 1\r\n"), await connect(True, b"SUB _Y.1 5\r\nSUB _U.1 6\r\nUNSUB 6 2\r\n"),
                   await connect(True, b"SUB _Q.1 q 1\r\n")]
        gets = [b"$JS.API.DIRECT.GET.KV_B.$KV.B.%s" % key for key in (b"k1", b"k2", b"h1", b"nope", b"k1")]
        jsons = [b'{"last_by_subj":"$KV.B.k2"}', b'{"last_by_subj":"$KV.B.h1","no_hdr":true}', b'{"seq":3}',
                 b'{"last_by_subj":"$KV.B.none"}']
        out = []
        for reply in (b"_R.1", b"_R.2.x", b"_P.x", b"_Y.1", b"_U.1", b"_Q.1"):
            pubs = b"".join(b"PUB %s %s 0\r\n\r\n" % (g, reply) for g in gets)
            pubs += b"".join(b"PUB $JS.API.DIRECT.GET.KV_B %s %d\r\n%s\r\n" % (reply, len(j), j) for j in jsons)
            await clients[0].send_all(pubs + b"PING\r\n")
        for c in clients:
            await c.send_all(b"PING\r\n")
            buf = bytearray()
            while buf.count(b"PONG\r\n") < (7 if c is clients[0] else 1):
                buf += await c.receive_some(1 << 16)
            out.append(bytes(buf))
            await c.aclose()
        return b"\n--\n".join(out)

    async def main():
        cfg = b'{"name":"KV_B","subjects":["$KV.B.>"],"storage":"file","max_msgs_per_subject":1,"allow_direct":true}'
        with trio.fail_after(WIRE_TIMEOUT), tempfile.TemporaryDirectory() as store_dir:
            async with trio.open_nursery() as nursery:
                if account:
                    options = options_from_dict({"host": "127.0.0.1", "port": -1, "jetstream": {"store_dir": store_dir},
                                                 "accounts": {"B": {"users": [{"user": "b", "password": "b"}],
                                                                    "jetstream": "enabled"}}},
                                                natserver.Options(quiet=True))
                else:
                    options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True,
                                                store_dir=store_dir)
                server = await nursery.start(natserver.serve, options)
                s = await trio.open_tcp_stream("127.0.0.1", server.port)
                await s.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":true%s}\r\nSUB _A.> 1\r\n'
                                 b"PUB $JS.API.STREAM.CREATE.KV_B _A.c %d\r\n%s\r\n" % (creds, len(cfg), cfg))
                hdr = b"NATS/1.0\r\nX-K: v\r\n\r\n"
                await s.send_all(b"PUB $KV.B.k1 _A.p 3\r\none\r\nPUB $KV.B.k2 _A.p 0\r\n\r\n"
                                 b"HPUB $KV.B.h1 _A.p %d %d\r\n%shdr\r\nPUB $KV.B.k1 _A.p 3\r\nuno\r\n"
                                 % (len(hdr), len(hdr) + 3, hdr))
                buf = bytearray()
                while buf.count(b'"seq":') < 4:
                    buf += await s.receive_some(1 << 16)
                sublist = next(iter(server.clients.values())).sublist  # (the account's)
                assert (sublist is server.sublist) is not account
                real, calls = Client.deliver_replies, []

                def refuse(self, replies, publish):
                    for subject, payload, hdr, _ in replies:
                        calls.append(False)
                        publish(subject, payload, hdr)

                def counted(self, replies, publish):
                    published: list = []
                    real(self, replies, lambda *msg: (published.append(msg), publish(*msg)))
                    calls.extend([True] * (len(replies) - len(published)) + [False] * len(published))

                answers, counts = [], []
                for patch in (refuse, counted):
                    monkeypatch.setattr(Client, "deliver_replies", patch)
                    before = (server.out_msgs, server.out_bytes, sublist.matches)
                    answers.append(await requesters(server.port))
                    counts.append((server.out_msgs - before[0], server.out_bytes - before[1],
                                   sublist.matches - before[2]))
                assert calls.count(True) == 3 * 7  # (found, to the 3 replies with one plain subscriber)
                assert answers[0] == answers[1] and counts[0] == counts[1]
                assert b"HMSG _R.1 1 " in answers[1] and b"\r\nuno\r\n" in answers[1]
                assert b"MSG _P.x 1 3\r\nuno\r\n" in answers[1] and b"HMSG _P.x" not in answers[1]
                await s.aclose()
                nursery.cancel_scope.cancel()

    trio.run(main)
