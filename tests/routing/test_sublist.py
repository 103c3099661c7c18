"""natserver.routing.sublist: the subject trie, its result cache and the subject validity checks.

Every routing test runs with the result cache on and off (nats-server's sublist_test.go pairs
each test with a NoCache twin the same way).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from natserver import Sublist, is_valid_literal_subject, is_valid_subject
from natserver.protocol.const import SUBLIST_CACHE_MAX
from natserver.routing import sublist as sublist_mod
from natserver.routing.sublist import SublistResult


class FakeSub:
    """What the sublist needs of a subscription: ``subject`` and ``queue``."""

    def __init__(self, subject, queue=None, name=""):
        self.subject = subject.encode() if isinstance(subject, str) else subject
        self.queue = queue.encode() if isinstance(queue, str) else queue
        self.name = name

    def __repr__(self) -> str:
        return f"FakeSub({self.subject!r}, {self.queue!r}, {self.name!r})"


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def sl(request) -> Sublist:
    return Sublist(cache=request.param)


def match(sl: Sublist, subject: str):
    """(plain subs as a set, {queue name: set of members})."""
    result = sl.match(subject.encode())
    groups = {}
    for group in result.qsubs:
        assert group, "empty queue group in a result"
        names = {sub.queue for sub in group}
        assert len(names) == 1, f"one group mixes queues {names}"
        name = names.pop()
        assert name not in groups, f"queue {name!r} split over several groups"
        groups[name] = set(group)
    assert len(result.psubs) == len(set(result.psubs)), "a plain sub appears twice"
    return set(result.psubs), groups


def plain(sl: Sublist, subject: str) -> set:
    return match(sl, subject)[0]


# -- nats-server sublist_test.go TestSublistMatchLiterals -----------------------------------

# (literal subject, subscription subject, matches)
MATCH_LITERALS = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo", "*", True),
    ("foo", ">", True),
    ("foo.bar", ">", True),
    ("foo.bar", "foo.>", True),
    ("foo.bar", "bar.>", False),
    ("stats.test.22", "stats.>", True),
    ("stats.test.22", "stats.*.*", True),
    ("foo.bar", "foo", False),
    ("stats.test.foos", "stats.test.foos", True),
    ("stats.test.foos", "stats.test.foo", False),
    ("stats.test", "stats.test.*", False),
    ("stats.test.foos", "stats.*", False),
    ("stats.test.foos", "stats.*.*.foos", False),
    # Wildcard characters that are not whole tokens are literals.
    ("*bar", "*bar", True),
    ("foo*", "foo*", True),
    ("foo*bar", "foo*bar", True),
    ("foo.***.bar", "foo.***.bar", True),
    (">bar", ">bar", True),
    ("foo>", "foo>", True),
    ("foo>bar", "foo>bar", True),
    ("foo.>>>.bar", "foo.>>>.bar", True),
]


@pytest.mark.parametrize(("literal", "subject", "expected"), MATCH_LITERALS)
def test_match_literals(sl, literal, subject, expected):
    sub = FakeSub(subject)
    sl.insert(sub)
    assert (plain(sl, literal) == {sub}) is expected
    # Twice: the second answer may come from the cache.
    assert (plain(sl, literal) == {sub}) is expected


# -- wildcard semantics ---------------------------------------------------------------------


def test_full_wildcard_needs_at_least_one_token(sl):
    sub = FakeSub("foo.>")
    sl.insert(sub)
    assert plain(sl, "foo") == set()
    assert plain(sl, "foo.bar") == {sub}
    assert plain(sl, "foo.bar.baz") == {sub}
    assert plain(sl, "bar.foo") == set()


def test_lone_full_wildcard_matches_everything(sl):
    sub = FakeSub(">")
    sl.insert(sub)
    for subject in ("a", "a.b", "a.b.c.d.e.f"):
        assert plain(sl, subject) == {sub}


def test_partial_wildcard_is_exactly_one_token(sl):
    sub = FakeSub("foo.*")
    sl.insert(sub)
    assert plain(sl, "foo") == set()
    assert plain(sl, "foo.bar") == {sub}
    assert plain(sl, "foo.bar.baz") == set()
    middle = FakeSub("a.*.c")
    sl.insert(middle)
    assert plain(sl, "a.b.c") == {middle}
    assert plain(sl, "a.c") == set()
    assert plain(sl, "a.b.b.c") == set()


def test_wildcard_characters_inside_tokens_are_literal(sl):
    star = FakeSub("foo*")
    gt = FakeSub("foo.>-")
    sl.insert(star)
    sl.insert(gt)
    assert plain(sl, "foo") == set()
    assert plain(sl, "foobar") == set()
    assert plain(sl, "foo*") == {star}
    assert plain(sl, "foo.bar") == set()
    assert plain(sl, "foo.>-") == {gt}


def test_all_matching_subscriptions_are_returned(sl):
    subs = [FakeSub(s) for s in ("a.b.c.d", "a.b.*.d", "a.b.>", "a.*.*.*", "*.b.c.d", ">", "a.b.c", "a.b.c.d.e")]
    for sub in subs:
        sl.insert(sub)
    assert plain(sl, "a.b.c.d") == set(subs[:6])
    assert sl.count == len(subs)


def test_two_token_publish_does_not_match_single_token_sub(sl):
    # nats-server bug report #18 (TestSublistTwoTokenPubMatchSingleTokenSub).
    sub = FakeSub("foo")
    sl.insert(sub)
    assert plain(sl, "foo") == {sub}
    assert plain(sl, "foo.bar") == set()


def test_same_subject_many_subscriptions(sl):
    subs = [FakeSub("foo", name=str(i)) for i in range(300)]  # past nats-server's plistMin (256)
    for sub in subs:
        sl.insert(sub)
    assert plain(sl, "foo") == set(subs)
    for sub in subs[:150]:
        assert sl.remove(sub)
    assert plain(sl, "foo") == set(subs[150:])


@pytest.mark.parametrize("subject", ["foo..bar", ".foo", "foo.", "."])
def test_publish_subject_with_empty_token_matches_nothing(sl, subject):
    sl.insert(FakeSub(">"))
    sl.insert(FakeSub("*.*"))
    assert plain(sl, subject) == set()
    assert len(sl.match(subject.encode())) == 0


# -- queue groups ---------------------------------------------------------------------------


def test_queue_groups_grouped_by_name_across_nodes(sl):
    # Members of one queue on different (wildcard) subjects end up in one group.
    bar1 = FakeSub("foo.bar", "bar")
    bar2 = FakeSub("foo.*", "bar")
    bar3 = FakeSub("foo.>", "bar")
    baz1 = FakeSub("foo.bar", "baz")
    baz2 = FakeSub(">", "baz")
    p = FakeSub("foo.bar")
    for sub in (bar1, bar2, bar3, baz1, baz2, p):
        sl.insert(sub)
    psubs, groups = match(sl, "foo.bar")
    assert psubs == {p}
    assert groups == {b"bar": {bar1, bar2, bar3}, b"baz": {baz1, baz2}}
    # Removing the last member of a group removes the group.
    sl.remove(baz1)
    sl.remove(baz2)
    assert match(sl, "foo.bar")[1] == {b"bar": {bar1, bar2, bar3}}
    sl.remove(bar2)
    assert match(sl, "foo.bar")[1] == {b"bar": {bar1, bar3}}
    assert match(sl, "foo.baz")[1] == {b"bar": {bar3}}


def test_queue_and_plain_on_same_subject(sl):
    q1 = FakeSub("foo", "q")
    q2 = FakeSub("foo", "q")
    p = FakeSub("foo")
    for sub in (q1, q2, p):
        sl.insert(sub)
    assert match(sl, "foo") == ({p}, {b"q": {q1, q2}})
    sl.remove(p)
    assert match(sl, "foo") == (set(), {b"q": {q1, q2}})


# -- remove ---------------------------------------------------------------------------------


def test_remove_returns_whether_it_was_there(sl):
    sub = FakeSub("foo.bar")
    sl.insert(sub)
    assert sl.remove(sub) is True
    assert sl.remove(sub) is False
    assert sl.remove(FakeSub("not.there")) is False
    assert sl.remove(FakeSub("foo.bar")) is False  # another object, same subject
    assert sl.count == 0


def test_remove_wildcards_as_literals(sl):
    # nats-server TestSublistRemoveWithWildcardsAsLiterals.
    for subject in ("foo.*-", "foo.>-"):
        sub = FakeSub(subject)
        sl.insert(sub)
        sl.remove(FakeSub("foo.bar"))
        assert sl.count == 1
        sl.remove(sub)
        assert sl.count == 0


def test_remove_prunes_empty_nodes(sl):
    subs = [FakeSub(f"a{i}.b.c.{i}") for i in range(50)] + [FakeSub("x.*.>"), FakeSub("x.y", "q")]
    for sub in subs:
        sl.insert(sub)
    for sub in subs:
        sl.match(sub.subject)
        assert sl.remove(sub)
    assert sl.count == 0
    root = sl._root
    assert not root.nodes and root.pwc is None and root.fwc is None
    assert sl.subscriptions() == []
    assert sl._shapes == {}  # the shape index is emptied too


# The order nats-server's trie walk (sublist.go matchLevel) finds subscriptions in: at each
# level the ">" node first, then the "*" branch, then the literal branch; at the last token the
# literal node before the "*" node. Subscribers on one connection see MSGs in this order.
WALK_ORDER = ["*.>", "*.b", "*.*", "a.>", "a.b", "a.*"]


@pytest.mark.parametrize("walk", [False, True], ids=["shape-index", "trie-walk"])
def test_results_come_in_trie_walk_order(sl, walk):
    if walk:
        sl._shapes_for = lambda n: None
    subs = {name: FakeSub(name, name=name) for name in ["a.*", "a.b", "*.*", "a.>", "*.b", "*.>", "c.d"]}
    for sub in reversed(list(subs.values())):
        sl.insert(sub)
    assert [sub.name for sub in sl.match(b"a.b").psubs] == WALK_ORDER
    for name in ["x", "*.*"]:  # one shape gone, one added: the order is recomputed
        sub = FakeSub(name, name=name)
        sl.insert(sub)
        sl.remove(sub)
    assert [sub.name for sub in sl.match(b"a.b").psubs] == WALK_ORDER


def test_many_shapes_fall_back_to_the_trie_walk():
    sl = Sublist(cache=False)
    names = ["a.b", "a.*", "*.b", "*.*", ">", "a.>", "*.>"]  # every shape two tokens fit
    for name in names:
        sl.insert(FakeSub(name, name=name))
    assert len(sl.match(b"a.b")) == len(names)
    assert sl._by_length[2] is None  # 7 shapes: walking 2 levels is cheaper
    assert [sub.name for sub in sl.match(b"a.b.c").psubs] == [">", "*.>", "a.>"]
    assert sl._by_length[3] is not None  # 3 shapes fit three tokens: looked up


def test_remove_keeps_siblings(sl):
    a = FakeSub("a.b.c")
    b = FakeSub("a.b")
    c = FakeSub("a.b.>")
    for sub in (a, b, c):
        sl.insert(sub)
    sl.remove(a)
    assert plain(sl, "a.b") == {b}
    assert plain(sl, "a.b.c") == {c}
    sl.remove(b)
    assert plain(sl, "a.b.c") == {c}
    assert plain(sl, "a.b") == set()


def test_counters(sl):
    subs = [FakeSub("foo"), FakeSub("bar.*"), FakeSub("baz", "q")]
    for sub in subs:
        sl.insert(sub)
    sl.remove(subs[0])
    sl.match(b"bar.x")
    sl.match(b"bar.x")
    assert (sl.count, sl.inserts, sl.removes, sl.matches) == (2, 3, 1, 2)
    assert set(sl.subscriptions()) == set(subs[1:])


def test_genid_changes_on_every_insert_and_remove(sl):
    sub = FakeSub("foo")
    seen = {sl.genid}
    sl.insert(sub)
    seen.add(sl.genid)
    sl.insert(FakeSub("foo.*"))
    seen.add(sl.genid)
    sl.remove(sub)
    seen.add(sl.genid)
    assert len(seen) == 4


# -- cache ----------------------------------------------------------------------------------


def test_cache_is_bounded():
    sl = Sublist(cache=True)
    sl.insert(FakeSub(">"))
    for i in range(2 * SUBLIST_CACHE_MAX + 10):
        assert len(sl.match(f"foo.{i}".encode())) == 1
        assert sl.cache_size <= SUBLIST_CACHE_MAX
    # Also with no match at all (empty results are cached too).
    empty = Sublist(cache=True)
    for i in range(2 * SUBLIST_CACHE_MAX + 10):
        empty.match(f"bar.{i}".encode())
        assert empty.cache_size <= SUBLIST_CACHE_MAX
    assert SUBLIST_CACHE_MAX == 1024


def test_cache_bounded_with_inserts():
    sl = Sublist(cache=True)
    for i in range(SUBLIST_CACHE_MAX + 300):
        sl.insert(FakeSub(f"s.{i}"))
        assert plain(sl, f"s.{i}") != set()
        assert sl.cache_size <= SUBLIST_CACHE_MAX
    assert sl.count == SUBLIST_CACHE_MAX + 300


def test_no_cache_keeps_nothing():
    sl = Sublist(cache=False)
    sl.insert(FakeSub("foo"))
    for i in range(100):
        sl.match(b"foo")
        sl.match(f"x.{i}".encode())
    assert sl.cache_size == 0
    assert sl.cache_hits == 0


def test_cache_hits_are_counted():
    sl = Sublist(cache=True)
    sl.insert(FakeSub("foo"))
    sl.match(b"foo")
    sl.match(b"foo")
    sl.match(b"foo")
    assert sl.cache_hits == 2


@pytest.mark.parametrize(
    ("new_subject", "affected", "unaffected"),
    [
        ("foo.bar", "foo.bar", "foo.baz"),  # literal
        ("foo.*", "foo.bar", "bar.foo"),  # partial wildcard
        ("foo.>", "foo.bar", "bar.foo"),  # full wildcard
        (">", "foo.bar", None),
    ],
)
def test_cache_invalidated_on_insert_and_remove(sl, new_subject, affected, unaffected):
    existing = FakeSub("foo.bar")
    sl.insert(existing)
    other = FakeSub("bar.foo")
    sl.insert(other)
    # Prime the cache.
    assert plain(sl, "foo.bar") == {existing}
    assert plain(sl, "bar.foo") == {other}
    assert plain(sl, "foo.baz") == set()
    new = FakeSub(new_subject)
    sl.insert(new)
    assert new in plain(sl, affected)
    if unaffected is not None:
        assert new not in plain(sl, unaffected)
    sl.remove(new)
    assert plain(sl, "foo.bar") == {existing}
    assert plain(sl, "bar.foo") == {other}
    assert plain(sl, "foo.baz") == set()


@pytest.mark.parametrize("queue", [None, "q"])
def test_cache_invalidated_for_a_previously_empty_result(sl, queue):
    # An empty result is cached; a later subscription must still be found.
    assert plain(sl, "a.b") == set()
    assert plain(sl, "a.c") == set()
    literal = FakeSub("a.b", queue)
    sl.insert(literal)
    assert len(sl.match(b"a.b")) == 1
    wildcard = FakeSub("a.*", queue)
    sl.insert(wildcard)
    assert len(sl.match(b"a.c")) == 1
    assert len(sl.match(b"a.b")) == 2
    sl.remove(literal)
    sl.remove(wildcard)
    assert len(sl.match(b"a.b")) == 0
    assert len(sl.match(b"a.c")) == 0


# -- subject validity (nats-server TestSublistValidLiteralSubjects / TestSublistValidlSubjects) --

VALID_SUBJECTS = [
    (".", False),
    (".foo", False),
    ("foo.", False),
    ("foo..bar", False),
    (">.bar", False),
    ("foo.>.bar", False),
    ("foo", True),
    ("foo.bar.*", True),
    ("foo.bar.>", True),
    ("*", True),
    (">", True),
    ("foo*", True),
    ("foo**", True),
    ("foo.**", True),
    ("foo*bar", True),
    ("foo.*bar", True),
    ("foo*.bar", True),
    ("*bar", True),
    ("foo>", True),
    ("foo.>>", True),
    ("foo>bar", True),
    ("foo.>bar", True),
    ("foo>.bar", True),
    (">bar", True),
    ("", False),
    ("*.*.>", True),
    # nats-server 2.9.10 (Sublist.Insert) does not look for whitespace in tokens (later
    # versions do): a form feed, the only one that can reach a subject through the protocol's
    # argument splitting, is accepted (conformance/expected/sub_subject_formfeed_token.json).
    ("a\x0cb", True),
    ("\x0c", True),
    ("a.\x0c.b", True),
]

VALID_LITERAL_SUBJECTS = [
    ("foo", True),
    (".foo", False),
    ("foo.", False),
    ("foo..bar", False),
    ("foo.bar.*", False),
    ("foo.bar.>", False),
    ("*", False),
    (">", False),
    ("foo*", True),
    ("foo**", True),
    ("foo.**", True),
    ("foo*bar", True),
    ("foo.*bar", True),
    ("foo*.bar", True),
    ("*bar", True),
    ("foo>", True),
    ("foo>>", True),
    ("foo.>>", True),
    ("foo>bar", True),
    ("foo.>bar", True),
    ("foo>.bar", True),
    (">bar", True),
    ("", False),
    ("foo.*.bar", False),
    ("a\x0cb", True),  # 2.9.10: see VALID_SUBJECTS
]


@pytest.mark.parametrize(("subject", "valid"), VALID_SUBJECTS)
def test_is_valid_subject(subject, valid):
    assert is_valid_subject(subject.encode()) is valid


@pytest.mark.parametrize(("subject", "valid"), VALID_LITERAL_SUBJECTS)
def test_is_valid_literal_subject(subject, valid):
    assert is_valid_literal_subject(subject.encode()) is valid


# -- model-based: the trie against a naive matcher ------------------------------------------


def naive_match(pattern: bytes, subject: bytes) -> bool:
    """Token by token: ``*`` is exactly one token, a last ``>`` is one or more tokens."""
    pattern_tokens = pattern.split(b".")
    tokens = subject.split(b".")
    if b"" in tokens:
        return False
    for i, p in enumerate(pattern_tokens):
        if p == b">" and i == len(pattern_tokens) - 1:
            return len(tokens) > i
        if i >= len(tokens):
            return False
        if p != b"*" and p != tokens[i]:
            return False
    return len(tokens) == len(pattern_tokens)


TOKENS = st.sampled_from([b"a", b"b", b"c", b"foo*", b">x"])
LITERAL = st.lists(TOKENS, min_size=1, max_size=4).map(b".".join)
PATTERN = st.lists(st.one_of(TOKENS, st.just(b"*")), min_size=1, max_size=4).flatmap(
    lambda tokens: st.sampled_from([b".".join(tokens), b".".join([*tokens[:-1], b">"])])
)


class SublistAgainstNaive(RuleBasedStateMachine):
    """Random subscribe / unsubscribe / publish; the cached and the uncached trie must both
    agree with the naive matcher over the list of live subscriptions."""

    subs = Bundle("subs")

    def __init__(self) -> None:
        super().__init__()
        # The third one always walks the trie (no shape index): the others must give exactly
        # its result, in its order (nats-server's walk order).
        walker = Sublist(cache=False)
        walker._shapes_for = lambda n: None
        self.lists = [Sublist(cache=True), Sublist(cache=False), walker]
        self.live: list[FakeSub] = []
        self.serial = 0

    @rule(target=subs, subject=PATTERN, queue=st.none() | st.sampled_from([b"q1", b"q2"]))
    def subscribe(self, subject, queue):
        self.serial += 1
        sub = FakeSub(subject, queue, name=str(self.serial))
        for sl in self.lists:
            sl.insert(sub)
        self.live.append(sub)
        return sub

    @rule(sub=consumes(subs))
    def unsubscribe(self, sub):
        for sl in self.lists:
            assert sl.remove(sub) is True
        self.live.remove(sub)

    @rule(subject=st.one_of(LITERAL, PATTERN))
    def publish(self, subject):
        # A published "*" or ">" token is an ordinary token to match (nats-server does not
        # reject it in the sublist; pedantic checks happen in the client).
        expected = [sub for sub in self.live if naive_match(sub.subject, subject)]
        expected_plain = {sub for sub in expected if sub.queue is None}
        expected_groups: dict = {}
        for sub in expected:
            if sub.queue is not None:
                expected_groups.setdefault(sub.queue, set()).add(sub)
        for sl in self.lists:
            assert match(sl, subject.decode()) == (expected_plain, expected_groups)
        walked = self.lists[-1].match(subject)
        for sl in self.lists[:-1]:
            result = sl.match(subject)
            assert list(result.psubs) == list(walked.psubs)
            assert [list(group) for group in result.qsubs] == [list(group) for group in walked.qsubs]

    @invariant()
    def counts_agree(self):
        for sl in self.lists:
            assert sl.count == len(self.live)
            assert sl.cache_size <= SUBLIST_CACHE_MAX


SublistAgainstNaive.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_sublist_against_naive_matcher = SublistAgainstNaive.TestCase


def test_too_many_shapes_walk_the_trie(monkeypatch):
    from natserver.routing import sublist as _sublist

    monkeypatch.setattr(_sublist, "_MAX_INDEXED_SHAPES", 3)
    sl = Sublist(cache=False)
    for name in ["a", "a.*", "*.b", "a.>"]:  # four shapes, over the limit of three
        sl.insert(FakeSub(name, name=name))
    assert [sub.name for sub in sl.match(b"a.b").psubs] == ["*.b", "a.>", "a.*"]
    assert sl._by_length[2] is None


# A cache miss (match_uncached) makes its result the cheapest way it can (issue 33): no list or
# dict for the shape index's lookups unless a node has queue groups, a _PlainResult without
# queue groups, the one-shot test by first byte first. Whatever it makes must read as the trie
# walk's own SublistResult does, in every field the publish paths (and _croute.c) read.
@settings(max_examples=200, deadline=None)
@given(
    subs=st.lists(st.tuples(PATTERN, st.none() | st.sampled_from([b"q1", b"q2"])), max_size=8),
    subjects=st.lists(st.one_of(LITERAL, PATTERN, st.sampled_from([b"", b".a", b"a.", b"a..b", b"$JS.ACK.a", b"$a"])),
                      min_size=1, max_size=8),
)
def test_miss_results_read_as_the_walks(subs, subjects):
    indexed, walker = Sublist(cache=True), Sublist(cache=False)
    walker._shapes_for = lambda n: None
    for n, (subject, queue) in enumerate(subs):
        sub = FakeSub(subject, queue, name=str(n))
        indexed.insert(sub)
        walker.insert(sub)
    for subject in subjects:
        assert indexed.cache is not None
        indexed.cache.pop(subject, None)  # a miss every time
        got, walked = indexed.match_uncached(subject), walker.match_uncached(subject)
        assert isinstance(got, SublistResult)
        assert list(got.psubs) == list(walked.psubs)
        assert [list(group) for group in got.qsubs] == [list(group) for group in walked.qsubs]
        assert len(got.queue_state) == len(got.qsubs)
        assert got.plan is None and indexed.cache[subject] is got
        if got.qsubs:
            assert got.qplan is None
        if subject.startswith(sublist_mod.ONESHOT_PREFIXES):  # tracked: the next one drops it
            assert indexed._oneshot == subject


def test_oneshot_heads_are_the_prefixes_first_bytes():
    assert sublist_mod._ONESHOT_HEADS == {prefix[0] for prefix in sublist_mod.ONESHOT_PREFIXES}


def test_inbox_shape_keys_by_the_subject_head():
    # Literals then one "*": the key is the subject before its last dot (_KEY_HEAD), the same
    # bytes as the literal tokens joined, so insert, remove and match agree.
    sl = Sublist(cache=False)
    inbox, other = FakeSub("_INBOX.abc.*", name="inbox"), FakeSub("_INBOX.abd.*", name="other")
    sl.insert(inbox)
    sl.insert(other)
    (shape,) = sl._shapes.values()
    assert shape.join == sublist_mod._KEY_HEAD
    assert [sub.name for sub in sl.match(b"_INBOX.abc.7").psubs] == ["inbox"]
    assert [sub.name for sub in sl.match(b"_INBOX.abd.*").psubs] == ["other"]
    assert not sl.match(b"_INBOX.abc.7.8").psubs and not sl.match(b"_INBOX.abc").psubs
    assert sl.remove(inbox) and not sl.match(b"_INBOX.abc.7").psubs


# A miss whose head (all but its last token) matches the last head-keyed miss's, at the same
# genid, reuses that miss's subscriptions (Sublist._head_memo: nats.go's replies to one inbox).
# Any insert or remove in between, any shape reading the last token, must leave it to the walk.
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("sub"), st.sampled_from([b"_I.x.*", b"_I.x.*", b"_I.y.*", b"_I.x.7", b"_I.x.7", b"_I.>",
                                                b"*.x.*", b"_I.x.*.>", b">", b"_I.*.7", b"a.b"]),
              st.none() | st.just(b"q")),
    st.tuples(st.just("unsub"), st.integers(0, 20), st.none()),
    st.tuples(st.just("match"), st.sampled_from([b"_I.x.1", b"_I.x.7", b"_I.x.7", b"_I.x.2", b"_I.y.1", b"_I.x.",
                                                  b"_I.x", b"_I.x.1.2", b"_I..1", b".x.1"]), st.none()),
    st.tuples(st.just("match"), st.sampled_from([b"_I.x.1", b"_I.x.7"]), st.none()),
), min_size=1, max_size=30))
def test_misses_of_one_head_read_as_the_walks(steps):
    indexed, walker = Sublist(cache=True), Sublist(cache=False)
    walker._shapes_for = lambda n: None
    live: list = []
    for n, (kind, arg, queue) in enumerate(steps):
        if kind == "sub":
            sub = FakeSub(arg, queue, name=str(n))
            indexed.insert(sub)
            walker.insert(sub)
            live.append(sub)
        elif kind == "unsub" and live:
            sub = live.pop(arg % len(live))
            assert indexed.remove(sub) and walker.remove(sub)
        elif kind == "match":
            assert indexed.cache is not None
            indexed.cache.pop(arg, None)  # a miss every time
            got, walked = indexed.match_uncached(arg), walker.match_uncached(arg)
            assert [s.name for s in got.psubs] == [s.name for s in walked.psubs]
            assert [[s.name for s in g] for g in got.qsubs] == [[s.name for s in g] for g in walked.qsubs]
            assert len(got.queue_state) == len(got.qsubs) and got.plan is None


def test_a_reply_to_the_same_inbox_takes_the_head_memo():
    sl = Sublist()
    inbox = FakeSub("_INBOX.abc.*", name="inbox")
    sl.insert(inbox)
    sl.insert(FakeSub("orders.>", name="orders"))
    assert [s.name for s in sl.match_uncached(b"_INBOX.abc.1").psubs] == ["inbox"]
    assert sl._head_memo == (b"_INBOX.abc", sl.genid, (inbox,), 10)
    assert [s.name for s in sl.match_uncached(b"_INBOX.abc.2").psubs] == ["inbox"]
    sl.insert(FakeSub("_INBOX.abc.3", name="literal"))  # a shape reading the last token: no memo
    assert [s.name for s in sl.match_uncached(b"_INBOX.abc.3").psubs] == ["literal", "inbox"]
    assert [s.name for s in sl.match_uncached(b"_INBOX.abc.4").psubs] == ["inbox"]
    assert sl._head_memo[1] != sl.genid
