"""Delivery.on_ack reads an ack subject (``$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<cseq>.<ts>.
<pending>``) from its last five tokens and the head before them, split and decoded only when it is
not the last ack's (issue 33): it must find the stream, consumer and numbers the whole subject's
split finds (the 3rd and 4th tokens of 9 or more, the 5th to 3rd last), and take nothing where it
takes nothing, whatever subjects come in turn."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.jetstream.delivery import Delivery


class _Consumer:
    def __init__(self, stream: str, name: str, acked: list) -> None:
        self.where = (stream, name)
        self.acked = acked
        self.dirty = False
        self.save_queued = False
        self.cfg = SimpleNamespace(durable_name="")

    def ack(self, sseq: int, cseq: int, now: int) -> list[int]:
        self.acked.append((*self.where, sseq, cseq))
        return []


def _delivery(acked: list) -> Delivery:
    streams = {}
    for name in ("S", "T", "é"):
        consumers = {c: _Consumer(name, c, acked) for c in ("C", "D", "\ufffd")}
        streams[name] = SimpleNamespace(consumers=consumers, cfg=SimpleNamespace(retention="limits"))
    js = SimpleNamespace(streams=streams, server=SimpleNamespace(before_flush=[]))
    return Delivery(js)


def _reference(subject: bytes) -> tuple | None:
    """What the whole subject's split reads (the way before the head's reuse)."""
    tokens = subject.split(b".")
    if len(tokens) < 9:
        return None
    stream, consumer = tokens[2].decode("utf-8", "replace"), tokens[3].decode("utf-8", "replace")
    try:
        int(tokens[-5])
        sseq, cseq = int(tokens[-4]), int(tokens[-3])
    except ValueError:
        return None
    if stream not in ("S", "T", "é") or consumer not in ("C", "D", "\ufffd"):
        return None
    return (stream, consumer, sseq, cseq)


_TOKEN = st.sampled_from([b"S", b"T", b"C", b"D", b"X", b"\xc3\xa9", b"\xff", b"1", b"22", b"+3", b"-4", b" 5",
                          b"x", b"", b"1_0", b"ACK", b"$JS"])
_SUBJECTS = st.one_of(
    st.lists(_TOKEN, min_size=0, max_size=12).map(lambda t: b".".join([b"$JS", b"ACK", *t])),
    st.builds(lambda s, c, nums: b".".join([b"$JS", b"ACK", s, c, *nums]),
              st.sampled_from([b"S", b"T", b"\xc3\xa9", b"U"]), st.sampled_from([b"C", b"D", b"\xfe"]),
              st.lists(st.sampled_from([b"1", b"7", b"300", b"x", b""]), min_size=4, max_size=7)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_SUBJECTS, min_size=1, max_size=12))
def test_ack_subjects_read_as_the_whole_split(subjects):
    acked: list = []
    delivery = _delivery(acked)
    for subject in subjects:
        acked.clear()
        delivery.on_ack(subject, None, None, b"+ACK")
        want = _reference(subject)
        assert acked == ([want] if want is not None else []), subject
