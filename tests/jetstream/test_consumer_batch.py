"""The consumer delivery's batch path (issue 33) delivers what the one-by-one path delivers:
Consumer.peek_batch and record_batch (with delivery.batch_items' ack replies) against
next_msg and ack_reply repeated, on memory and file stores with gaps, filters, headers and
every ack policy (hypothesis); Store.load_next_msgs against load_next_msg; and on the wire,
Client.deliver_batch's bytes against deliver_as's for pull and push consumers, to
subscribers with and without header support."""

from __future__ import annotations

import os
import tempfile

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import natserver
from natserver.jetstream.consumer import Consumer, ConsumerConfig, set_defaults
from natserver.jetstream.delivery import ack_reply, batch_items
from natserver.jetstream.store import FileStore, MemoryStore
from natserver.jetstream.stream import StreamConfig, check_stream_config
from natserver.server.client import Client

SUBJECTS = [b"a.1", b"a.2", b"b.1", b"a.1.x"]
FILTERS = ["", "a.1", "a.*", "a.>", "b.1", ">", "c.>"]
_STATE = ("delivered_cseq", "delivered_sseq", "state_sseq", "state_undo", "ack_floor_cseq", "ack_floor_sseq",
          "npc", "last_delivered", "dirty", "lss_undo")


class _Stream:
    def __init__(self, store) -> None:
        self.name = "S"
        self.store = store


def _cfg() -> StreamConfig:
    return check_stream_config(StreamConfig(name="S", subjects=["a.>", "b.>"]), {})


def _dir(tmp: str, i: int) -> str:
    os.makedirs(f"{tmp}/{i}")
    return f"{tmp}/{i}"


def _state(c: Consumer) -> tuple:
    return tuple(getattr(c, key) for key in _STATE) + (list(c.pending.items()), c._pmin if c.pending else None)


def _msg(m) -> tuple:
    return m.seq, m.subject, m.hdr, m.data, m.ts


stored_msgs = st.lists(st.tuples(st.sampled_from(SUBJECTS), st.integers(0, 300), st.booleans()), min_size=0, max_size=60)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=stored_msgs, removed=st.sets(st.integers(1, 60), max_size=20), kind=st.sampled_from(["memory", "file"]),
       filt=st.sampled_from(FILTERS), ack_policy=st.sampled_from(["explicit", "all", "none"]),
       max_ack_pending=st.integers(0, 12), before=st.integers(0, 8), acked=st.sets(st.integers(0, 7), max_size=4),
       nak=st.booleans(), limit=st.integers(1, 40), data=st.data())
def test_batch_delivers_what_next_msg_delivers(msgs, removed, kind, filt, ack_policy, max_ack_pending, before, acked,
                                               nak, limit, data):
    with tempfile.TemporaryDirectory() as tmp:
        stores = [MemoryStore(_cfg()) if kind == "memory" else FileStore(_dir(tmp, i), _cfg(), segment_size=2048)
                  for i in range(2)]
        try:
            consumers = []
            for store in stores:
                for i, (subject, size, with_hdr) in enumerate(msgs):
                    hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if with_hdr else b""
                    store.store_msg(subject, hdr, b"%d-" % i + b"p" * size, 1000 + i)
                for seq in sorted(removed):
                    if seq <= store.last_seq:
                        store.remove_msg(seq)
                cfg = ConsumerConfig(durable_name="D", ack_policy=ack_policy, filter_subject=filt,
                                     max_ack_pending=max_ack_pending if ack_policy != "none" else 0)
                set_defaults(cfg)
                c = Consumer(_Stream(store), "D", cfg, 1)
                # The same history for both: some deliveries, some acks, perhaps a nak.
                got = [c.next_msg(2) for _ in range(before)]
                seqs = [g[0].seq for g in got if g is not None]
                for i in sorted(acked):
                    if i < len(seqs):
                        c.ack(seqs[i], 0, 3)
                if nak and seqs:
                    c.nak(seqs[-1], 0, 3)
                consumers.append(c)
            general, batch = consumers
            assert _state(general) == _state(batch)
            now = 5
            had_rdq = bool(batch.rdq)
            peeked = batch.peek_batch(now, limit)
            items = batch_items(batch, peeked) if peeked else []
            headers_only = batch_items(batch, peeked, headers_only=True) if peeked else []
            expected = []
            for msg in peeked:
                got = general.next_msg(now)
                assert got is not None and got[1] == 1 and _msg(got[0]) == _msg(msg)
                hdr, body = msg.hdr or None, msg.data
                expected.append((msg.subject, ack_reply(general, msg, 1), hdr, body))
            assert items == expected
            for (_, reply, hdr, body), (_, reply2, hdr2, body2) in zip(items, headers_only):
                assert reply2 == reply and body2 == b""
                assert hdr2 == (hdr or b"NATS/1.0\r\n\r\n")[:-2] + b"Nats-Msg-Size: %d\r\n\r\n" % len(body)
            if peeked:
                batch.record_batch(peeked, now)
            assert _state(general) == _state(batch)
            if len(peeked) < limit:
                # It stopped where next_msg has a rule of its own: a redelivery first, else
                # nothing more (the end of the stream, max_ack_pending).
                nxt = general.next_msg(now)
                if had_rdq:
                    assert not peeked and nxt is not None and nxt[1] > 1
                else:
                    assert nxt is None
                nxt2 = batch.next_msg(now)
                assert (nxt is None) == (nxt2 is None)
                if nxt is not None:
                    assert _msg(nxt[0]) == _msg(nxt2[0]) and nxt[1] == nxt2[1]
            # Both go on the same way, undo included.
            if data.draw(st.booleans()) and peeked:
                general.undo(peeked[-1].seq, 1)
                batch.undo(peeked[-1].seq, 1)
            for _ in range(5):
                a, b = general.next_msg(now + 1), batch.next_msg(now + 1)
                assert (a is None) == (b is None)
                if a is not None:
                    assert _msg(a[0]) == _msg(b[0]) and a[1] == b[1]
            assert _state(general) == _state(batch)
        finally:
            for store in stores:
                store.stop()


@settings(max_examples=60, deadline=None)
@given(msgs=stored_msgs, removed=st.sets(st.integers(1, 60), max_size=25), kind=st.sampled_from(["memory", "file"]),
       filt=st.sampled_from([f.encode() for f in FILTERS]), start=st.integers(0, 65), limit=st.integers(1, 70))
def test_load_next_msgs_is_load_next_msg_repeated(msgs, removed, kind, filt, start, limit):
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(_cfg()) if kind == "memory" else FileStore(tmp, _cfg(), segment_size=2048)
        try:
            for i, (subject, size, with_hdr) in enumerate(msgs):
                store.store_msg(subject, b"NATS/1.0\r\nK: v\r\n\r\n" if with_hdr else b"", b"q" * size, 7 + i)
            for seq in removed:
                if seq <= store.last_seq:
                    store.remove_msg(seq)
            if kind == "file" and start % 2:
                store.flush()  # (read from the segment files, not the write buffer)
            want, at = [], start
            while len(want) < limit:
                msg = store.load_next_msg(filt, at)
                if msg is None:
                    break
                want.append(_msg(msg))
                at = msg.seq + 1
            assert [_msg(m) for m in store.load_next_msgs(filt, start, limit)] == want
        finally:
            store.stop()


# -- on the wire ----------------------------------------------------------------------------

TIMEOUT = 20  # s, each wire test's bound


async def _read_until(stream, buf: bytearray, token: bytes) -> None:
    while token not in buf:
        buf += await stream.receive_some(1 << 16)


def _acked_msgs(buf: bytearray) -> int:
    """The complete MSG/HMSG with an ack reply in ``buf``."""
    n, pos = 0, 0
    while True:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return n
        line = bytes(buf[pos:end])
        size = int(line.rsplit(b" ", 1)[1]) if line.startswith((b"MSG ", b"HMSG ")) else -2
        if end + 2 + size + 2 > len(buf):
            return n
        n += b"$JS.ACK." in line
        pos = end + 2 + size + 2


async def _consume_all(port: int, kind: str, n: int) -> tuple[bytes, bytes]:
    """Create durable consumer D on S (pull: one request for everything; push: to _D.x),
    read the n messages as a header-aware and (push) a header-unaware subscriber get them,
    delete D. The raw bytes of both."""
    async def connect(headers: bool):
        s = await trio.open_tcp_stream("127.0.0.1", port)
        await s.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":%s,"no_responders":%s}\r\n'
                         % (b"true" if headers else b"false", b"true" if headers else b"false"))
        return s

    ctl = await connect(True)
    plain = await connect(False)
    await ctl.send_all(b"SUB _R.> 1\r\nSUB _D.x 2\r\nPING\r\n")
    await plain.send_all(b"SUB _D.x 7\r\nPING\r\n")
    buf, pbuf = bytearray(), bytearray()
    await _read_until(ctl, buf, b"PONG\r\n")
    await _read_until(plain, pbuf, b"PONG\r\n")
    del buf[:], pbuf[:]
    deliver = b',"deliver_subject":"_D.x"' if kind == "push" else b""
    body = b'{"stream_name":"S","config":{"durable_name":"D","ack_policy":"explicit","max_ack_pending":5000%s}}' % deliver
    await ctl.send_all(b"PUB $JS.API.CONSUMER.CREATE.S.D _R.c %d\r\n%s\r\n" % (len(body), body))
    if kind == "pull":
        req = b'{"batch":%d,"expires":5000000000}' % n
        await ctl.send_all(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.D _R.n %d\r\n%s\r\n" % (len(req), req))
    while _acked_msgs(buf) < n:
        buf += await ctl.receive_some(1 << 16)
    if kind == "push":
        while _acked_msgs(pbuf) < n:
            pbuf += await plain.receive_some(1 << 16)
    await ctl.send_all(b"UNSUB 2\r\nPUB $JS.API.CONSUMER.DELETE.S.D _R.d 0\r\n\r\n")
    more = bytearray()
    await _read_until(ctl, more, b"consumer_delete_response")
    await ctl.aclose()
    await plain.aclose()
    # (the create response carries the creation time: only what comes after it is compared)
    return bytes(buf[buf.rindex(b"\r\n", 0, buf.index(b"$JS.ACK.")) + 2:]), bytes(pbuf)


@pytest.mark.parametrize("kind", ["pull", "push"])
def test_deliver_batch_sends_the_bytes_deliver_as_sends(kind, monkeypatch):
    """The same consumer read twice, once with Client.deliver_batch refusing (every message
    through deliver_as) and once with it: the same bytes to both subscribers."""
    async def main():
        with trio.fail_after(TIMEOUT), tempfile.TemporaryDirectory() as store_dir:
            async with trio.open_nursery() as nursery:
                options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True, store_dir=store_dir)
                server = await nursery.start(natserver.serve, options)
                s = await trio.open_tcp_stream("127.0.0.1", server.port)
                await s.send_all(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB _R.> 1\r\n')
                cfg = b'{"name":"S","subjects":["s.>"],"storage":"file"}'
                await s.send_all(b"PUB $JS.API.STREAM.CREATE.S _R.c %d\r\n%s\r\n" % (len(cfg), cfg))
                buf = bytearray()
                await _read_until(s, buf, b"stream_create_response")
                n = 300
                for i in range(n):
                    size = (i * 37) % 700
                    if i % 3 == 0:
                        hdr = b"NATS/1.0\r\nX-I: %d\r\n\r\n" % i
                        await s.send_all(b"HPUB s.%d _R.a %d %d\r\n%s%s\r\n" % (i % 7, len(hdr), len(hdr) + size, hdr,
                                                                              b"m" * size))
                    else:
                        await s.send_all(b"PUB s.%d.x _R.a %d\r\n%s\r\n" % (i % 5, size, b"m" * size))
                while buf.count(b'"seq":') < n:
                    buf += await s.receive_some(1 << 16)
                calls = []
                real = Client.deliver_batch

                def refuse(self, match_subject, msgs):
                    calls.append(len(msgs))
                    return False

                monkeypatch.setattr(Client, "deliver_batch", refuse)
                general = await _consume_all(server.port, kind, n)
                assert calls  # (the batch path was asked, and refused)

                def counted(self, match_subject, msgs):
                    done = real(self, match_subject, msgs)
                    calls.append(done)
                    return done

                calls.clear()
                monkeypatch.setattr(Client, "deliver_batch", counted)
                batched = await _consume_all(server.port, kind, n)
                assert True in calls  # (it delivered)
                assert batched == general
                assert b"HMSG s.0 %d $JS.ACK.S.D.1.1.1." % (1 if kind == "pull" else 2) in batched[0]
                if kind == "push":  # without header support: MSG, the payload alone
                    assert b"MSG s.0 7 $JS.ACK.S.D.1.1.1." in batched[1] and b"HMSG" not in batched[1]
                nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.parametrize("corrupt", [1, 20, 50])
def test_load_next_msgs_stops_at_a_corrupt_record(corrupt, tmp_path):
    """A record whose checksum fails ends the batch where load_next_msg answers None (the
    general path then meets it: logged, not served), wherever it is in the block."""
    store = FileStore(str(tmp_path), _cfg(), segment_size=1 << 20)
    try:
        for i in range(60):
            store.store_msg(b"a.%d" % (i % 3), b"", b"body-%d" % i, 5 + i)
        store.flush()
        i = corrupt - store.idx.base
        fd = os.open(store._seg_path(store.idx.seg[i]), os.O_RDWR)
        try:
            os.pwrite(fd, b"X", store.idx.off[i] + store.idx.size[i] - 2)  # (in its payload)
        finally:
            os.close(fd)
        for first in (1, corrupt):
            store._rblock = None  # (read from the file again)
            got = store.load_next_msgs(b"a.>", first, 100)
            assert [m.seq for m in got] == list(range(first, corrupt))
            assert store.load_msg(corrupt) is None
            assert [m.data for m in store.load_next_msgs(b"", corrupt + 1, 5)] == [b"body-%d" % s for s in range(corrupt, corrupt + 5)][:max(0, 60 - corrupt)]
    finally:
        store.stop()
