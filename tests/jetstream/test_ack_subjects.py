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


# -- a run of acks (Delivery.on_ack_run) ------------------------------------------------------


class _RunConsumer:
    """A consumer that records what its acks do to it (and says a +ACK acknowledged its
    message when the sequence is odd: the retention's turn)."""

    def __init__(self, stream, name: str, calls: list, durable: str) -> None:
        self.where = (stream.name, name)
        self.stream = stream
        self.calls = calls
        self.dirty = False
        self.save_queued = False
        self.held_ack_replies = None
        self.cfg = SimpleNamespace(durable_name=durable, is_push=False)

    def ack(self, sseq: int, cseq: int, now: int) -> list[int]:
        self.calls.append(("ack", *self.where, sseq, cseq))
        self.dirty = True
        return [sseq] if sseq % 2 else []

    def nak(self, sseq: int, delay: int, now: int) -> None:
        self.calls.append(("nak", *self.where, sseq, delay))

    def progress(self, sseq: int, now: int) -> None:
        self.calls.append(("progress", *self.where, sseq))

    def term(self, sseq: int, now: int) -> bool:
        self.calls.append(("term", *self.where, sseq))
        return True


def _run_delivery(calls: list) -> Delivery:
    streams = {}
    for name, retention, file_backed in (("S", "limits", True), ("T", "interest", True), ("U", "limits", False)):
        stream = SimpleNamespace(name=name, cfg=SimpleNamespace(retention=retention), file_backed=file_backed,
                                 replicated=False)
        stream.consumers = {c: _RunConsumer(stream, c, calls, durable) for c, durable in (("C", "C"), ("D", ""))}
        streams[name] = stream
    js = SimpleNamespace(streams=streams, server=SimpleNamespace(before_flush=[]),
                         send=lambda subject, payload, hdr=None: calls.append(("send", subject, payload)))
    delivery = Delivery(js)
    delivery._retain = lambda consumer, acked: calls.append(("retain", consumer.where, list(acked)))
    delivery.pull = lambda consumer, reply, payload: calls.append(("pull", consumer.where, reply, payload))
    delivery._advisory = lambda kind, consumer, body: calls.append(("advisory", kind, consumer.where))
    delivery.poke = lambda: calls.append("poke")
    return delivery


_ACK_SUBJECTS = st.one_of(
    st.builds(lambda s, c, count, n: b"$JS.ACK.%s.%s.%s.%d.%d.0.0" % (s, c, count, n, n),
              st.sampled_from([b"S", b"T", b"U", b"V"]), st.sampled_from([b"C", b"D", b"E"]),
              st.sampled_from([b"1", b"1", b"x"]), st.integers(1, 9)),
    _SUBJECTS)
_ACKS = st.tuples(_ACK_SUBJECTS, st.sampled_from([None, None, b"_R.1"]),
                  st.sampled_from([b"", b"", b"+ACK", b"+ACKx", b"-NAK", b'-NAK {"delay":5}', b"+WPI", b"+NXT 1",
                                   b"+TERM", b"bogus"]))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(_ACKS, min_size=1, max_size=10), min_size=1, max_size=4))
def test_a_run_of_acks_does_what_each_ack_does(runs):
    """Runs of acks of any kind, to any consumer (known or not, durable or not, file or memory,
    interest retention or not), any subject: on_ack_run does what on_ack does for each in
    turn: the consumers' calls, answers, retention, deliveries due, saves planned."""
    outcomes = []
    for each in (True, False):
        calls: list = []
        delivery = _run_delivery(calls)
        for run in runs:
            if each:
                for subject, reply, payload in run:
                    delivery.on_ack(subject, reply, None, payload)
            else:
                delivery.on_ack_run(list(run), sum(len(s) + len(p) for s, _, p in run))
            calls.append(("due", [c.where for c in delivery._due], len(delivery.js.server.before_flush)))
        saves = [(c.where, c.save_queued) for s in delivery.js.streams.values() for c in s.consumers.values()]
        outcomes.append((calls, saves))
    assert outcomes[0] == outcomes[1]
