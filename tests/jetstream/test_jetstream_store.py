"""natserver.jetstream's stores: limits, purges and lookups on both stores, and the file
store's recovery (reopen, torn tails, corrupt records, tombstones, segment deletion).

A Hypothesis state machine runs random operations on a MemoryStore, a FileStore (tiny
segments, reopened at random) and a plain Python model side by side."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from natserver.jetstream.store import FileStore, MemoryStore, StoreError
from natserver.jetstream.stream import StreamConfig, check_stream_config

NS = 1_000_000_000


def config(**changes) -> StreamConfig:
    changes.setdefault("name", "S")
    return check_stream_config(StreamConfig(**changes), {})


def open_file(path, cfg=None, **kwargs) -> FileStore:
    return FileStore(str(path), cfg or config(), **kwargs)


@pytest.fixture(params=["memory", "file"])
def make_store(request, tmp_path):
    stores = []

    def make(**changes):
        cfg = config(**changes)
        if request.param == "memory":
            store = MemoryStore(cfg)
        else:
            store = open_file(tmp_path / f"s{len(stores)}", cfg, segment_size=4096)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.stop()


def fill(store, n, subject=b"a", size=8, start_ts=1):
    return [store.store_msg(subject, b"", b"x" * size, start_ts + i) for i in range(n)]


# -- rules both stores share -----------------------------------------------------------------


def test_sequences_and_state(make_store):
    store = make_store()
    assert (store.first_seq, store.last_seq, store.msgs) == (0, 0, 0)
    assert fill(store, 3) == [1, 2, 3]
    assert (store.first_seq, store.last_seq, store.msgs) == (1, 3, 3)
    assert store.load_msg(2).data == b"x" * 8
    assert store.load_msg(4) is None
    assert store.remove_msg(2)
    assert not store.remove_msg(2)
    assert store.num_deleted() == 1 and store.deleted() == [2]
    assert store.remove_msg(1)
    assert (store.first_seq, store.msgs) == (3, 1)
    assert store.purge() == 1
    assert (store.first_seq, store.last_seq, store.msgs, store.bytes) == (4, 3, 0, 0)
    assert store.store_msg(b"a", b"", b"y", 10) == 4


def test_sizes_are_nats_servers(make_store):
    store = make_store()
    store.store_msg(b"a.1", b"", b"hello", 1)
    store.store_msg(b"a.2", b"NATS/1.0\r\nA: b\r\n\r\n", b"world", 2)
    if store.kind == "file":
        assert store.bytes == (22 + 3 + 5 + 8) + (22 + 3 + 4 + 18 + 5 + 8)
    else:
        assert store.bytes == (3 + 5 + 16) + (3 + 18 + 5 + 16)


def test_max_msgs_discard_old_and_new(make_store):
    old = make_store(max_msgs=3)
    fill(old, 5)
    assert (old.first_seq, old.last_seq, old.msgs) == (3, 5, 3)
    new = make_store(max_msgs=3, discard="new")
    fill(new, 3)
    with pytest.raises(StoreError, match="maximum messages exceeded"):
        new.store_msg(b"a", b"", b"x", 9)
    assert (new.last_seq, new.msgs) == (3, 3)


def test_max_bytes_discard_old_and_new(make_store):
    old = make_store(max_bytes=200)
    fill(old, 10, size=20)
    assert old.bytes <= 200 and old.last_seq == 10 and old.msgs < 10
    # nats-server refuses when the stored bytes plus the new message's size (as the store counts
    # it) would go over the limit: see DISCARD_NEW_BYTES.
    new = make_store(max_bytes=200, discard="new")
    fill(new, 2, size=60)
    with pytest.raises(StoreError, match="maximum bytes exceeded"):
        new.store_msg(b"a", b"", b"y" * 60, 9)
    assert (new.msgs, new.last_seq) == (2, 2)


# Discard new with max_bytes, as nats-server 2.15.1 answered over the wire (a stream per case,
# subjects "s<case><storage>.<key>", each publish's sequence or "E" for 10077, maximum bytes
# exceeded; then messages, bytes, first sequence): the message's size as the store counts it
# (fileStoreMsgSize, memStoreMsgSize) beyond the limit refuses it, and at a subject's limit the
# replaced message must be at least as big (2.10 took the header and data, at the limit).
DISCARD_NEW_BYTES = [
    ({"max_bytes": 100}, [("a", 4)] * 4,
     {"file": [1, 2, "E", "E", (2, 84, 1)], "memory": [1, 2, 3, "E", (3, 90, 1)]}),
    ({"max_bytes": 120}, [("a", 4)] * 4,
     {"file": [1, 2, "E", "E", (2, 84, 1)], "memory": [1, 2, 3, 4, (4, 120, 1)]}),
    ({"max_bytes": 80}, [("a", 4)] * 4,
     {"file": [1, "E", "E", "E", (1, 42, 1)], "memory": [1, 2, "E", "E", (2, 60, 1)]}),
    ({"max_bytes": 100, "max_msgs_per_subject": 1},
     [("a", 4), ("b", 4), ("a", 4), ("a", 5), ("a", 3), ("c", 1), ("a", 4), ("a", 40), ("b", 3)],
     {"file": [1, 2, 3, "E", 4, "E", "E", "E", 5, (2, 82, 4)], "memory": [1, 2, 3, 4, 5, 6, "E", "E", 7, (3, 85, 5)]}),
    ({"max_bytes": 90, "max_msgs_per_subject": 1},
     [("a", 10), ("b", 4), ("a", 10), ("a", 11), ("a", 9), ("b", 4), ("b", 5)],
     {"file": [1, 2, 3, "E", 4, 5, "E", (2, 89, 4)], "memory": [1, 2, 3, "E", 4, 5, "E", (2, 65, 4)]}),
    ({"max_bytes": 100, "max_msgs_per_subject": 2}, [("a", 4), ("a", 4), ("b", 4), ("a", 4), ("a", 5), ("a", 3)],
     {"file": [1, 2, "E", 3, "E", 4, (2, 83, 3)], "memory": [1, 2, 3, 4, "E", 5, (3, 89, 3)]}),
]


@pytest.mark.parametrize("case", range(len(DISCARD_NEW_BYTES)))
def test_discard_new_max_bytes_as_nats_server_2_15(make_store, case):
    limits, publishes, expected = DISCARD_NEW_BYTES[case]
    store = make_store(discard="new", **limits)
    kind = store.kind
    got: list = []
    for key, size in publishes:
        try:
            got.append(store.store_msg(b"s%d%s.%s" % (case, kind.encode(), key.encode()), b"", b"y" * size, 1))
        except StoreError as exc:
            assert str(exc) == "maximum bytes exceeded"
            got.append("E")
    got.append((store.msgs, store.bytes, store.first_seq))
    assert got == expected[kind]


def test_max_msgs_per_subject(make_store):
    store = make_store(max_msgs_per_subject=2)
    for i in range(5):
        store.store_msg(b"k.%d" % (i % 2), b"", b"%d" % i, i + 1)
    assert store.subjects_state(b">") == {b"k.0": 2, b"k.1": 2}
    assert [store.load_msg(s) is not None for s in range(1, 6)] == [False, True, True, True, True]
    assert store.load_last_msg(b"k.0").data == b"4"
    per = make_store(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    per.store_msg(b"k", b"", b"1", 1)
    with pytest.raises(StoreError, match="maximum messages per subject exceeded"):
        per.store_msg(b"k", b"", b"2", 2)
    per.store_msg(b"j", b"", b"3", 3)


def test_max_age(make_store):
    store = make_store(max_age=NS)
    now = time.time_ns()
    for i in range(4):
        store.store_msg(b"a", b"", b"x", now - (3 - i) * NS)
    nxt = store.expire(now)
    assert store.msgs == 1 and store.first_seq == 4
    assert nxt == now + NS


def test_purge_ex(make_store):
    store = make_store()
    for i in range(10):
        store.store_msg(b"s.%d" % (i % 3), b"", b"%d" % i, i + 1)
    assert store.purge_ex(b"s.0", 0, 0) == 4
    assert store.subjects_state(b"") == {b"s.1": 3, b"s.2": 3}
    assert store.purge_ex(b"s.*", 0, 2) == 4  # keep the last two of s.1 and s.2 together
    assert sorted(store.idx) == [8, 9]
    assert store.purge_ex(b"", 9, 0) == 1  # compact below 9
    assert sorted(store.idx) == [9] and store.first_seq == 9
    assert store.purge_ex(b"", 0, 0) == 1
    assert (store.first_seq, store.last_seq) == (11, 10)
    with pytest.raises(StoreError):
        store.purge_ex(b"", 5, 1)


def test_compact_past_the_end(make_store):
    store = make_store()
    fill(store, 3)
    assert store.compact(100) == 3
    assert (store.first_seq, store.last_seq) == (100, 99)
    assert store.store_msg(b"a", b"", b"x", 5) == 100


def test_lookups(make_store):
    store = make_store()
    for i, subject in enumerate([b"a.1", b"b.1", b"a.2", b"a.1", b"b.2"]):
        store.store_msg(subject, b"", b"%d" % i, i + 1)
    assert store.load_next_msg(b"a.*", 2).seq == 3
    assert store.load_next_msg(b"b.>", 3).seq == 5
    assert store.load_next_msg(b"a.1", 2).seq == 4
    assert store.load_next_msg(b"c", 1) is None
    assert store.load_last_msg(b"a.*").seq == 4
    assert store.load_last_msg(b"").seq == 5
    assert store.filtered_state(1, b"a.>") == (3, 1, 4)
    assert store.num_pending(3, b"") == 3
    store.remove_msg(5)
    assert store.load_last_msg(b">") is None  # nats-server: the message at last_seq, or none
    assert store.load_last_msg(b"b.*").seq == 2
    assert store.load_last_msg(b"b.2") is None


def test_lowering_limits_enforces_them(make_store):
    store = make_store()
    for i in range(6):
        store.store_msg(b"k.%d" % (i % 2), b"", b"x", i + 1)
    store.update_config(config(max_msgs_per_subject=1))
    assert sorted(store.idx) == [5, 6]
    store.update_config(config(max_msgs=1))
    assert sorted(store.idx) == [6]


# -- the file store on disk ------------------------------------------------------------------


def test_reopen_keeps_everything(tmp_path):
    store = open_file(tmp_path, segment_size=300)
    for i in range(20):
        store.store_msg(b"a.%d" % (i % 3), b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i if i % 2 else b"", b"p%d" % i, i + 1)
    store.remove_msg(5)
    store.remove_msg(7, erase=True)
    store.purge_ex(b"a.0", 10, 0)
    state = (store.first_seq, store.last_seq, store.msgs, store.bytes, sorted(store.idx), dict(store.subjects_state(b"")))
    store.stop()
    again = open_file(tmp_path, segment_size=300)
    assert (again.first_seq, again.last_seq, again.msgs, again.bytes, sorted(again.idx),
            dict(again.subjects_state(b""))) == state
    assert again.load_msg(8).data == b"p7" if False else again.load_msg(9).data == b"p8"
    assert again.load_msg(7) is None
    again.stop()


def test_purge_and_limits_survive_reopen(tmp_path):
    store = open_file(tmp_path, config(max_msgs=5), segment_size=256)
    fill(store, 30, size=30)
    store.flush()
    assert len(store.segs) < 10  # dead segments deleted
    store.stop()
    again = open_file(tmp_path, config(max_msgs=50), segment_size=256)  # a raised limit
    assert (again.first_seq, again.last_seq, again.msgs) == (26, 30, 5)
    again.purge()
    again.stop()
    third = open_file(tmp_path)
    assert (third.first_seq, third.last_seq, third.msgs) == (31, 30, 0)
    assert len(os.listdir(tmp_path / "msgs")) == 1
    assert third.store_msg(b"a", b"", b"z", 99) == 31
    third.stop()


def test_erase_overwrites_the_bytes(tmp_path):
    store = open_file(tmp_path)
    store.store_msg(b"secret", b"", b"TOP-SECRET-PAYLOAD", 1)
    store.store_msg(b"other", b"", b"fine", 2)
    store.flush()
    store.remove_msg(1, erase=True)
    store.stop()
    data = b"".join((tmp_path / "msgs" / name).read_bytes() for name in os.listdir(tmp_path / "msgs"))
    assert b"TOP-SECRET-PAYLOAD" not in data
    again = open_file(tmp_path)
    assert sorted(again.idx) == [2] and again.last_seq == 2
    again.stop()


def _segment(tmp_path) -> str:
    names = sorted(os.listdir(tmp_path / "msgs"), key=lambda n: int(n.split(".")[0]))
    return str(tmp_path / "msgs" / names[-1])


@pytest.mark.parametrize("cut", [1, 5, 17, 40])
def test_torn_tail_is_dropped(tmp_path, cut):
    store = open_file(tmp_path)
    fill(store, 10, size=50)
    store.stop()
    path = _segment(tmp_path)
    size = os.path.getsize(path)
    os.truncate(path, size - cut)  # the last record is torn
    again = open_file(tmp_path)
    assert (again.msgs, again.last_seq) == (9, 9)
    assert os.path.getsize(path) < size - cut + 1
    assert again.store_msg(b"a", b"", b"new", 99) == 10  # continues after the good prefix
    again.stop()
    third = open_file(tmp_path)
    assert third.load_msg(10).data == b"new" and third.msgs == 10
    third.stop()


def test_garbage_tail_and_corrupt_middle(tmp_path):
    store = open_file(tmp_path)
    fill(store, 10, size=50)
    store.stop()
    path = _segment(tmp_path)
    with open(path, "ab") as f:
        f.write(os.urandom(100))  # garbage after the last record
    with open(path, "r+b") as f:  # flip a payload byte of message 4
        data = f.read()
        i = data.index(b"x" * 50, 0)
        for _ in range(3):
            i = data.index(b"x" * 50, i + 50)
        f.seek(i + 10)
        f.write(b"Q")
    again = open_file(tmp_path)
    assert again.lost == 2
    assert sorted(again.idx) == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert all(again.load_msg(s).data == b"x" * 50 for s in again.idx)
    again.stop()


def test_corruption_after_write_is_not_served(tmp_path):
    store = open_file(tmp_path)
    fill(store, 3, size=50)
    store.flush()
    with open(_segment(tmp_path), "r+b") as f:
        data = f.read()
        f.seek(data.index(b"x" * 50) + 3)
        f.write(b"!")
    assert store.load_msg(1) is None
    assert store.load_msg(2).data == b"x" * 50
    store.stop()


def test_dedup_ids_recovered(tmp_path):
    store = open_file(tmp_path)
    now = time.time_ns()
    store.store_msg(b"a", b"NATS/1.0\r\nNats-Msg-Id: old\r\n\r\n", b"1", now - 10 * NS)
    store.store_msg(b"a", b"NATS/1.0\r\nNats-Msg-Id: new\r\n\r\n", b"2", now)
    store.store_msg(b"a", b"NATS/1.0\r\nNats-Msg-Id: gone\r\n\r\n", b"3", now)
    store.remove_msg(3)
    store.stop()
    again = FileStore(str(tmp_path), config(), dedup_window=5 * NS, now=now + 1)
    assert [(i, s) for i, s, _ in again.recovered_ids] == [(b"new", 2)]
    again.stop()


# -- the model-based comparison ---------------------------------------------------------------

# b"a.*" and b"b.>" are stored as literal subjects too (a client may publish to them): the
# filters equal to them must still act as wildcards (issue #19).
SUBJECTS = [b"a.1", b"a.2", b"b.1", b"b.2.x", b"a.*", b"b.>"]
FILTERS = [b"", b">", b"a.*", b"b.>", b"a.1", b"c"]


class Model:
    """The simplest correct store: a dict of seq -> (subject, data)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.msgs: dict[int, tuple] = {}
        self.first = 0
        self.last = 0

    def size(self, seq):
        subj, data = self.msgs[seq]
        return len(subj) + len(data) + 16

    def store(self, subj, data):
        cfg = self.cfg
        per = sum(1 for s, _ in self.msgs.values() if s == subj)
        at_limit = cfg.max_msgs_per_subject > 0 and per >= cfg.max_msgs_per_subject
        if cfg.discard == "new":
            if cfg.max_msgs > 0 and len(self.msgs) >= cfg.max_msgs and not at_limit:
                return None
        seq = self.last + 1
        self.last = seq
        if not self.msgs:
            self.first = seq
        self.msgs[seq] = (subj, data)
        if at_limit:
            while sum(1 for s, _ in self.msgs.values() if s == subj) > cfg.max_msgs_per_subject:
                self.remove(min(k for k, (s, _) in self.msgs.items() if s == subj))
        while cfg.max_msgs > 0 and len(self.msgs) > cfg.max_msgs:
            self.remove(min(self.msgs))
        return seq

    def remove(self, seq):
        if seq not in self.msgs:
            return False
        del self.msgs[seq]
        self.first = min(self.msgs) if self.msgs else self.last + 1
        return True

    def purge_subject(self, match, keep):
        victims = sorted(k for k, (s, _) in self.msgs.items() if match(s))
        if keep:
            victims = victims[: max(0, len(victims) - keep)]
        for k in victims:
            self.remove(k)
        return len(victims)


def _matcher(filter):
    """A naive filter match, independent of the store's: ``*`` is any one token, a last ``>``
    one or more; b"" and b">" match everything."""
    if filter in (b"", b">"):
        return lambda s: True
    want = filter.split(b".")

    def match(subject):
        got = subject.split(b".")
        for i, token in enumerate(want):
            if token == b">" and i == len(want) - 1:
                return len(got) > i
            if i >= len(got) or (token != b"*" and token != got[i]):
                return False
        return len(got) == len(want)

    return match


def m_has(model, seq) -> bool:
    return seq in model.msgs


class StoreMachine(RuleBasedStateMachine):
    # The file store's settings (test_stream_compression.py runs the machine compressed).
    store_kwargs: dict = {"segment_size": 200}
    compression = "none"

    def __init__(self):
        super().__init__()
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="jsstore-")

    @initialize(max_msgs=st.sampled_from([0, 5, 12]), per=st.sampled_from([0, 2]),
                discard=st.sampled_from(["old", "new"]))
    def setup(self, max_msgs, per, discard):
        self.cfg = config(max_msgs=max_msgs, max_msgs_per_subject=per, discard=discard, compression=self.compression)
        self.model = Model(self.cfg)
        self.mem = MemoryStore(self.cfg)
        self.file = FileStore(self.dir, self.cfg, **self.store_kwargs)
        self.ts = 0

    def teardown(self):
        import shutil

        if hasattr(self, "file"):
            self.file.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _both(self, call):
        a = call(self.mem)
        b = call(self.file)
        return a, b

    @rule(subj=st.sampled_from(SUBJECTS), data=st.binary(max_size=40))
    def store(self, subj, data):
        self.ts += 1
        expected = self.model.store(subj, data)

        def do(store):
            try:
                return store.store_msg(subj, b"", data, self.ts)
            except StoreError:
                return None

        assert self._both(do) == (expected, expected)

    @precondition(lambda self: self.model.last > 0)
    @rule(data=st.data(), erase=st.booleans())
    def remove(self, data, erase):
        seq = data.draw(st.integers(1, self.model.last))
        expected = self.model.remove(seq)

        def do(store):
            try:
                return store.remove_msg(seq, erase)
            except StoreError:  # the file store's answer outside [first, last]
                return False

        assert self._both(do) == (expected, expected)

    @rule(filter=st.sampled_from(FILTERS), keep=st.sampled_from([0, 1, 3]))
    def purge_subject(self, filter, keep):
        if not filter or filter == b">":
            if keep == 0:
                expected = len(self.model.msgs)
                for k in list(self.model.msgs):
                    self.model.remove(k)
                self.model.first = self.model.last + 1
            elif keep >= len(self.model.msgs):
                expected = 0
            else:  # 2.10+: ``keep`` counts messages, as with a filter (2.9 counted sequences)
                expected = self.model.purge_subject(_matcher(b">"), keep)
        else:
            expected = self.model.purge_subject(_matcher(filter), keep)
        assert self._both(lambda s: s.purge_ex(filter, 0, keep)) == (expected, expected)

    @rule()
    def reopen(self):
        self.file.stop()
        self.file = FileStore(self.dir, self.cfg, **self.store_kwargs)

    @rule(filter=st.sampled_from(FILTERS), start=st.integers(0, 40))
    def lookups(self, filter, start):
        m = self.model
        match = _matcher(filter)
        live = sorted(k for k, (s, _) in self.model.msgs.items() if match(s) and k >= start)
        expected_next = live[0] if live else None
        for store in (self.mem, self.file):
            msg = store.load_next_msg(filter, start)
            assert (msg.seq if msg else None) == expected_next
            if msg:
                assert msg.data == self.model.msgs[msg.seq][1]
            assert store.num_pending(start, filter) == len(live)
        every = sorted(k for k, (s, _) in self.model.msgs.items() if match(s))
        if filter in (b"", b">"):  # the message at last_seq or none (nats-server)
            every = [m.last] if m_has(self.model, m.last) else []
        for store in (self.mem, self.file):
            last = store.load_last_msg(filter)
            assert (last.seq if last else None) == (every[-1] if every else None)

    @invariant()
    def same_state(self):
        if not hasattr(self, "model"):
            return
        m = self.model
        for store in (self.mem, self.file):
            assert sorted(store.idx) == sorted(m.msgs)
            assert store.msgs == len(m.msgs)
            assert store.last_seq == m.last
            if m.msgs:
                assert store.first_seq == min(m.msgs)
            counts: dict = {}
            for s, _ in m.msgs.values():
                counts[s] = counts.get(s, 0) + 1
            assert store.subjects_state(b"") == counts
            for subj, ss in store.fss.items():
                seqs = sorted(k for k, (s, _) in m.msgs.items() if s == subj)
                assert (ss[0], ss[1], ss[2]) == (len(seqs), seqs[0], seqs[-1])
        assert self.mem.bytes == sum(m.size(k) for k in m.msgs)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
