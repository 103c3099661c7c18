"""One-shot subjects (JetStream acks, sublist.ONESHOT_PREFIXES) leave at most one entry in the
match cache (issue 33), and matching them must give exactly what the trie walk gives: the same
subscriptions in the same order, whatever wildcard, literal or queue subscriptions come and go
between matches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.routing import sublist as sublist_mod
from natserver.routing.sublist import Sublist


class _Sub:
    def __init__(self, subject: bytes, queue: bytes | None, n: int) -> None:
        self.subject = subject
        self.queue = queue
        self.n = n

    def __repr__(self) -> str:
        return f"_Sub({self.subject!r}, {self.queue!r}, {self.n})"


# Tokens drawn so that subscriptions and subjects collide often: ack shapes and others.
_STREAMS = [b"S", b"T"]
_TAIL = [b"1", b"2", b"7"]
_PATTERNS = st.one_of(
    st.sampled_from([b">", b"$JS.>", b"$JS.ACK.>", b"$JS.ACK.S.>", b"$JS.ACK.S.C.>", b"$JS.ACK.*.C.>",
                     b"$JS.*.S.C.*.*.*.*.*", b"*.ACK.*.*.>", b"$JS.ACK.S.C.1.>", b"$JS.ACK.S.C.*.*.7.>",
                     b"$JS.ACK.S.C.*.*.*.*.2", b"*.*.*.*.1.*.*.*.*", b"$JS.ACK.T.C.1.2.7.1.2", b"other.>",
                     b"$JS.API.>", b"$JS.ACK.S.C", b"$JS.ACK.S.C.*", b"$JS.ACK.*.*.*.*"]),
)
_SUBJECTS = st.one_of(
    st.builds(lambda s, c, tail: b".".join([b"$JS", b"ACK", s, c, *tail]),
              st.sampled_from(_STREAMS), st.sampled_from([b"C", b"D"]),
              st.lists(st.sampled_from(_TAIL), min_size=0, max_size=6)),
    st.sampled_from([b"$JS.ACK.S.C..1.2", b"other.x", b"$JS.API.INFO", b"$JS.ACK"]),
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("sub"), _PATTERNS, st.sampled_from([None, None, b"q"])),
        st.tuples(st.just("unsub"), st.integers(0, 50), st.none()),
        st.tuples(st.just("pub"), _SUBJECTS, st.none()),
    ),
    max_size=80,
)


def _view(result) -> tuple:
    return (tuple(s.n for s in result.psubs), tuple(tuple(s.n for s in g) for g in result.qsubs))


def _against_the_walk(ops) -> None:
    """Subscribes, unsubscribes and matches as ``ops`` say, on a cached sublist and on one
    without a cache whose matches walk the trie (ACK_PREFIX's short way off): the same results."""
    cached = Sublist(cache=True)
    walked = Sublist(cache=False)  # no cache: the trie walk every time
    live: list[_Sub] = []
    for n, (kind, arg, queue) in enumerate(ops):
        if kind == "sub":
            sub = _Sub(arg, queue, n)
            live.append(sub)
            cached.insert(sub)
            walked.insert(sub)
        elif kind == "unsub":
            if live:
                sub = live.pop(arg % len(live))
                assert cached.remove(sub) and walked.remove(sub)
        else:
            got = cached.match(arg)
            saved, sublist_mod.ACK_PREFIX = sublist_mod.ACK_PREFIX, None
            try:
                want = walked.match(arg)
            finally:
                sublist_mod.ACK_PREFIX = saved
            assert _view(got) == _view(want), arg
            assert got.plan is None or got is cached.cache.get(arg)  # a plan only on its own subject's result
            assert sum(key.startswith(b"$JS.ACK.") for key in cached.cache) <= 1


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_oneshot_matches_as_the_walk_does(ops):
    _against_the_walk(ops)


def test_acks_leave_one_cache_entry():
    sl = Sublist(cache=True)
    consumer = _Sub(b"$JS.ACK.S.C.>", None, 0)
    monitor = _Sub(b">", None, 1)
    sl.insert(consumer)
    sl.insert(monitor)
    sl.match(b"bench.s")  # a subject published again and again: it must stay cached
    for seq in range(1, 3 * sublist_mod.SUBLIST_CACHE_MAX):
        result = sl.match(b"$JS.ACK.S.C.1.%d.%d.1700000000.0" % (seq, seq))
        assert list(result.psubs) == [monitor, consumer]  # the walk's order
    assert sorted(sl.cache) == [b"$JS.ACK.S.C.1.3071.3071.1700000000.0", b"bench.s"]
    # A subscription on one ack's own subject: that ack (and only it) gets it, from now on.
    one = _Sub(b"$JS.ACK.S.C.1.5.5.1700000000.0", None, 2)
    sl.insert(one)
    assert set(sl.match(b"$JS.ACK.S.C.1.5.5.1700000000.0").psubs) == {consumer, monitor, one}
    assert list(sl.match(b"$JS.ACK.S.C.1.6.6.1700000000.0").psubs) == [monitor, consumer]
    sl.remove(one)
    assert list(sl.match(b"$JS.ACK.S.C.1.5.5.1700000000.0").psubs) == [monitor, consumer]


# Ack subjects' misses without a walk (sublist.ACK_PREFIX) while ``$JS.ACK.>`` alone can match
# them: subscriptions that leave it alone often, and every kind that can or cannot overlap it.
_ACK_PATTERNS = st.sampled_from([
    b"$JS.ACK.>", b"$JS.ACK.>", b"$JS.ACK.>", b">", b"$JS.>", b"*.ACK.>", b"$JS.*.>", b"$JS.*.S.>",
    b"*.*.*", b"*.*", b"$JS.ACK.S.>", b"$JS.ACK.*", b"$JS.ACK", b"$JS", b"*", b"$JS.*", b"*.ACK",
    b"$JS.ACK.*.C.1.>", b"$JS.API.>", b"other.>", b"$JS.ACKS.>", b"$JS.ACK.S.C.1.2.7.1.2",
])
_ACK_SUBJECTS = st.one_of(
    _SUBJECTS,
    st.sampled_from([b"$JS.ACK.", b"$JS.ACK..", b"$JS.ACK..S", b"$JS.ACK.S.", b"$JS.ACK.S", b"$JS.ACKS.S.C",
                     b"$JS.ACK.S.C.1.2.7.1.2", b"$JS.AC", b"$"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("sub"), _ACK_PATTERNS, st.sampled_from([None, None, None, b"q"])),
    st.tuples(st.just("unsub"), st.integers(0, 50), st.none()),
    st.tuples(st.just("pub"), _ACK_SUBJECTS, st.none()),
), max_size=40))
def test_ack_misses_match_as_the_walk_does(ops):
    _against_the_walk(ops)


def test_ack_misses_take_the_short_way_only_when_alone():
    sl = Sublist(cache=True)
    consumer = _Sub(b"$JS.ACK.>", None, 0)
    sl.insert(consumer)
    sl.insert(_Sub(b"$JS.API.>", None, 1))
    sl.insert(_Sub(b"other.*.x", None, 2))
    subject = b"$JS.ACK.S.C.1.5.5.1700000000.0"
    assert list(sl.match(subject).psubs) == [consumer]
    assert sl._ack_node is not None and sl._ack_genid == sl.genid  # looked for once, found
    for pattern in (b">", b"$JS.>", b"*.ACK.>", b"$JS.*.S.C.>", b"$JS.ACK.S.*.>", b"$JS.ACK.>"):
        other = _Sub(pattern, None, 3)
        sl.insert(other)
        assert set(sl.match(subject).psubs) == {consumer, other}, pattern
        assert sl._ack_node is None, pattern
        sl.remove(other)
        assert list(sl.match(subject).psubs) == [consumer]
        assert sl._ack_node is not None
    grouped = _Sub(b"$JS.ACK.>", b"q", 4)
    sl.insert(grouped)
    assert [list(g) for g in sl.match(subject).qsubs] == [[grouped]] and sl._ack_node is None
