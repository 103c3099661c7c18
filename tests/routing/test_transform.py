"""Subject transforms and mappings (natserver/routing/transform.py) against nats-server 2.9.10's
own cases (accounts_test.go TestSubjectTransforms, restated here) and properties."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from natserver.routing.transform import (
    MAPPED_CACHE_SIZE,
    MapDest,
    MappingError,
    SubjectMappings,
    SubjectTransform,
    fnv32a,
    validate_mapping,
)

REFUSED = [
    ("foo.*.*", "bar.$2", "invalid mapping destination: not using all of the token wildcard(s) in bar.$2"),
    ("foo", "", "invalid subject"),
    ("foo..", "bar", "invalid subject"),
    ("foo.*", "bar.*", "invalid subject"),
    ("foo.*", "bar.$2", "invalid mapping destination: wildcard index out of range in $2: [2]"),
    ("foo.*", "bar.$1.>", "invalid subject"),
    ("foo.>", "bar.baz", "invalid subject"),
    ("foo.*", "foo.$foo", "invalid mapping destination: not using all of the token wildcard(s) in foo.$foo"),
    ("foo.*", "foo.{{wildcard(2)}}", "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"),
    ("foo.*", "foo.{{unimplemented(1)}}", "invalid mapping destination: unknown function in {{unimplemented(1)}}"),
    ("foo.*", "foo.{{partition(10)}}", "invalid mapping destination: not enough arguments passed to the function in {{partition(10)}}"),
    ("foo.*", "foo.{{wildcard(foo)}}", "invalid mapping destination: function argument is invalid or in the wrong format in {{wildcard(foo)}}"),
    ("foo.*", "foo.{{wildcard()}}", "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}"),
    ("foo.*", "foo.{{wildcard(1,2)}}", "invalid mapping destination: too many arguments passed to the function in {{wildcard(1,2)}}"),
    ("foo.*", "foo.{{ wildcard5) }}", "invalid mapping destination: unknown function in {{ wildcard5) }}"),
    ("foo.*", "foo.{{splitLeft(2,2}}", "invalid mapping destination: unknown function in {{splitLeft(2,2}}"),
    ("foo.*", "foo.{{split(1,a,b)}}", "invalid mapping destination: too many arguments passed to the function in {{split(1,a,b)}}"),
]

MATCHES = [
    ("foo", "bar", "foo", "bar"),
    ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
    ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
    ("baz.>", "foo.bar.>", "baz.1.2.3", "foo.bar.1.2.3"),
    ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
    ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
    ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
    ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
    ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
    ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
    ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
    ("*", "{{split(1,-)}}", "--abc", ".abc"),  # accounts.go's dot rule, kept
    ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-", "abc.def.ghij.fo.o"),
    ("*", "{{splitfromleft(1,9)}}", "12345", "12345"),  # too short: unchanged
    ("*.*", "p.{{ Wildcard( 2 ) }}.{{wildcard(1)}}", "a.b", "p.b.a"),
    ("foo", "{{wildcard(1)}}", "foo", "{{wildcard(1)}}"),  # a literal source copies dest as is
]


@pytest.mark.parametrize(("source", "dest", "error"), REFUSED)
def test_refused_transforms_with_nats_server_texts(source, dest, error):
    with pytest.raises(MappingError) as caught:
        SubjectTransform(source, dest)
    assert str(caught.value) == error


@pytest.mark.parametrize(("source", "dest", "subject", "expected"), MATCHES)
def test_transforms(source, dest, subject, expected):
    assert SubjectTransform(source, dest).apply(subject) == expected


def test_a_subject_outside_the_source_is_not_transformed():
    assert SubjectTransform("foo.*", "bar.$1").apply("baz.x") is None
    assert SubjectTransform("foo.*", "bar.$1").apply("foo.x.y") is None


def test_partition_is_fnv1a_modulo():
    # FNV-1a 32 of "" and "a" (the published constants), then partition() uses it.
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    transform = SubjectTransform("orders.*.*", "p.{{partition(5,1,2)}}.$1.$2")
    assert transform.apply("orders.ab.cd") == f"p.{fnv32a(b'abcd') % 5}.ab.cd"


token = st.text(alphabet="abcXYZ019-_", min_size=1, max_size=6)


@given(st.lists(st.one_of(st.just("*"), token), min_size=1, max_size=6), st.data())
def test_wildcard_references_pick_the_published_tokens(source_tokens, data):
    """A destination made of a permutation of $n references gives the published subject's
    wildcard tokens in that order."""
    stars = source_tokens.count("*")
    order = data.draw(st.permutations(list(range(1, stars + 1))))
    dest = ".".join(["out", *(f"${n}" for n in order)])
    subject_tokens = [data.draw(token) if t == "*" else t for t in source_tokens]
    values = [v for v, t in zip(subject_tokens, source_tokens) if t == "*"]
    result = SubjectTransform(".".join(source_tokens), dest).apply(".".join(subject_tokens))
    assert result == ".".join(["out", *(values[n - 1] for n in order)])


@given(st.lists(token, min_size=1, max_size=5), st.lists(token, min_size=0, max_size=4))
def test_full_wildcard_carries_the_rest(prefix, rest):
    transform = SubjectTransform(".".join([*prefix, ">"]), "new.>")
    subject = ".".join([*prefix, *rest, "last"])
    assert transform.apply(subject) == ".".join(["new", *rest, "last"])


def test_first_matching_mapping_wins_and_weights_split_traffic():
    mappings = SubjectMappings([("a.*", [MapDest("first.$1")]), ("a.b", [MapDest("second")])])
    assert mappings.select(b"a.b") == b"first.b"
    assert mappings.select(b"other") is None
    weighted = SubjectMappings([("foo", [MapDest("x", 60), MapDest("y", 30)])], rng=random.Random(7))
    counts = Counter(weighted.select(b"foo") for _ in range(10_000))
    assert set(counts) == {b"x", b"y", b"foo"}  # the missing 10% stays on foo
    assert 5_700 < counts[b"x"] < 6_300 and 2_700 < counts[b"y"] < 3_300
    lossy = SubjectMappings([("foo", [MapDest("x", 50), MapDest("foo", 20)])], rng=random.Random(7))
    counts = Counter(lossy.select(b"foo") for _ in range(10_000))
    assert set(counts) == {b"x", b"foo", b""}  # foo listed itself: the rest is dropped
    assert 2_700 < counts[b""] < 3_300


def test_cluster_scoped_destinations():
    # The weights of all destinations, cluster-scoped or not, add up to at most 100.
    entries = [("foo", [MapDest("here", 40, "east"), MapDest("default", 60)])]
    east = Counter(SubjectMappings(entries, cluster="east").select(b"foo") for _ in range(1000))
    west = Counter(SubjectMappings(entries, cluster="west").select(b"foo") for _ in range(1000))
    assert set(east) == {b"here", b"foo"} and set(west) == {b"default", b"foo"}


@pytest.mark.parametrize(("dests", "error"), [
    ([MapDest("x", 60), MapDest("y", 50)], "total weight needs to be <= 100"),
    ([MapDest("x", 50), MapDest("x", 20)], 'duplicate entry for "x"'),
    ([MapDest("x", 101)], "individual weights need to be <= 100"),
])
def test_weighted_mapping_errors(dests, error):
    with pytest.raises(MappingError, match=error):
        SubjectMappings([("foo", dests)])


def test_mapped_results_are_remembered_boundedly():
    mappings = SubjectMappings([("k.*", [MapDest("v.$1")])])
    for i in range(10_000):
        assert mappings.select(b"k.%d" % i) == b"v.%d" % i
    cache = mappings.mappings[0].cache
    assert cache is not None and 0 < len(cache) <= 4096


# nats-server 2.10+'s rules, as a JetStream stream's subject_transform applies them
# (subject_transform.go; answers checked against 2.15.1 in tests/jetstream/test_stream_settings.py).
MATCHES_2_10 = [
    ("l.*.*", "m.{{left(1,2)}}", "l.abcd.e", "m.ab"),  # a wildcard left out
    ("l.*", "m.{{right(1,2)}}", "l.abcd", "m.cd"),
    ("l.*", "m.{{left(1,9)}}", "l.abcd", "m.abcd"),  # too short: unchanged
    ("p.a", "q.{{partition(3)}}", "p.a", "q.1"),  # the whole subject hashed
    ("*", "{{partition(3)}}", "p.a.b", None),
    (">", ">", "any.thing", "any.thing"),
]


@pytest.mark.parametrize(("source", "dest", "subject", "expected"), MATCHES_2_10)
def test_transforms_of_nats_server_2_10(source, dest, subject, expected):
    transform = SubjectTransform(source, dest, v2_10=True)
    if expected is None:
        assert transform.apply(subject) is None
    else:
        assert transform.apply_bytes(subject.encode()) == expected.encode()


def test_random_of_nats_server_2_10():
    transform = SubjectTransform("r.*", "s.$1.{{random(3)}}", v2_10=True)
    seen = {transform.apply(f"r.{i}").split(".")[2] for i in range(200)}
    assert seen == {"0", "1", "2"}


@pytest.mark.parametrize(("source", "dest", "error"), [
    ("a.*", "x..$1", "invalid mapping destination: invalid transform"),
    ("a.*", "x.>.y", "invalid mapping destination: invalid transform in y"),
    ("a", "x.{{wildcard(1)}}", "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}"),
    ("a.*", "x.{{random()}}", "invalid mapping destination: function argument is invalid or in the wrong format in {{random()}}"),
])
def test_validate_mapping_of_nats_server_2_10(source, dest, error):
    with pytest.raises(MappingError) as caught:
        validate_mapping(source, dest)
    assert str(caught.value) == error


def test_the_2_9_rules_stay_for_mappings():
    with pytest.raises(MappingError):
        SubjectTransform("foo.*", "bar.{{left(1,2)}}")
    assert validate_mapping("foo", "") is None


def test_2_10_transforms_remember_their_answers_within_a_bound():
    transform = SubjectTransform("o.*", "x.$1", v2_10=True)
    assert transform.apply_bytes(b"o.a") == b"x.a"
    assert transform.cache == {b"o.a": b"x.a"}
    assert transform.apply_bytes(b"p") is None and transform.cache[b"p"] is None
    for i in range(MAPPED_CACHE_SIZE + 10):
        assert transform.apply_bytes(b"o.%d" % i) == b"x.%d" % i
    assert len(transform.cache) <= MAPPED_CACHE_SIZE
    assert SubjectTransform("o.*", "x.{{random(3)}}", v2_10=True).cache is None  # a new answer each time
    assert SubjectTransform("o.*", "x.$1").cache is None  # (core mappings cache in SubjectMappings)
