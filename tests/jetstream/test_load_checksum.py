"""FileStore._load checks a record read in place from the read-ahead block by its checksum,
taken over a copy of a small record (up to store._CRC_COPY_MAX bytes) and over a view of the
block for a larger one (issue 33): a changed byte in either is found, the message not returned
(None, as _record's checked copy answers), and its neighbours in the same block still read."""

from __future__ import annotations

import tempfile

import pytest

from natserver.jetstream import store as store_mod
from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig, check_stream_config


@pytest.mark.parametrize("size", [0, 100, store_mod._CRC_COPY_MAX - 60, store_mod._CRC_COPY_MAX, 2000])
@pytest.mark.parametrize("where", ["data", "subject", "checksum"])
def test_a_changed_byte_in_a_record_read_in_place_is_found(size, where):
    cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {})
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(tmp, cfg)
        try:
            bodies = [b"%d:" % i + b"d" * size for i in range(6)]
            for body in bodies:
                store.store_msg(b"s.x", b"", body, 1)
            store.flush()
            idx, i = store.idx, 4 - store.idx.base
            offset = {"data": idx.size[i] - 2, "subject": store_mod._MSG_FIXED, "checksum": idx.size[i] + 4}[where]
            with open(store._seg_path(idx.seg[i]), "r+b") as f:
                f.seek(idx.off[i] + offset)
                f.write(b"X")
            store._rblock = None
            assert store.load_msg(1).data == bodies[0]  # reads the block holding all six
            assert store._rblock is not None and store._rblock[1] <= idx.off[i]
            assert store.load_msg(4) is None
            assert [store.load_msg(seq).data for seq in (2, 3, 5, 6)] == [bodies[1], bodies[2], bodies[4], bodies[5]]
        finally:
            store.stop()
