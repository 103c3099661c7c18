"""The subject trie that routes messages to subscriptions, in nats-server's shape (sublist.go).

A level maps literal tokens to nodes and has two extra slots, ``pwc`` for ``*`` (exactly one
token) and ``fwc`` for ``>`` (one or more trailing tokens). A node holds the plain
subscriptions and the queue subscriptions (grouped by queue name) that end there, and the next
level. Subjects are ``bytes`` throughout: they come off the wire and go back onto it unchanged.

Matching a subject walks the trie once and the result is cached per subject, bounded like
nats-server's cache (SUBLIST_CACHE_MAX, swept down to SUBLIST_CACHE_SWEEP_TO). Inserting or
removing a subscription drops the cached results it could change: the one subject for a
literal subscription, everything for a wildcard one, and bumps ``genid``.
"""

from __future__ import annotations

from ._const import SUBLIST_CACHE_MAX, SUBLIST_CACHE_SWEEP_TO

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Sublist", "SublistResult", "is_valid_subject", "is_valid_literal_subject"]

_PWC = b"*"
_FWC = b">"


def is_valid_subject(subject: bytes) -> bool:
    """A subject a subscription may use: no empty tokens, ``>`` only as the last token.

    This is nats-server v2.9.10's rule (Sublist.Insert); later versions also reject tokens
    with whitespace, which the protocol's own splitting makes nearly impossible anyway.
    """
    if not subject:
        return False
    tokens = subject.split(b".")
    if b"" in tokens:
        return False
    return _FWC not in tokens[:-1]


def is_valid_literal_subject(subject: bytes) -> bool:
    """A subject a pedantic publisher may use (isValidLiteralSubject): no empty tokens and no
    ``*`` or ``>`` token."""
    tokens = subject.split(b".")
    return b"" not in tokens and _PWC not in tokens and _FWC not in tokens


class SublistResult:
    """What one subject matches: plain subscriptions and one list per queue group.

    ``next_member`` keeps each group's round-robin position, so successive messages on the
    subject go to successive members.
    """

    __slots__ = ("psubs", "qsubs", "next_member", "plan")

    def __init__(self, psubs: list, qsubs: list[list]) -> None:
        self.psubs = psubs
        self.qsubs = qsubs
        self.next_member = [0] * len(qsubs)
        # Free for the router to keep per-result precomputed data (the MSG line heads):
        # a cached result is for one subject and is replaced whenever its matches change.
        self.plan = None

    def __len__(self) -> int:
        return len(self.psubs) + sum(len(group) for group in self.qsubs)


EMPTY_RESULT = SublistResult([], [])


class _Node:
    __slots__ = ("next", "psubs", "qsubs")

    def __init__(self) -> None:
        self.next: _Level | None = None
        self.psubs: dict = {}  # subscription -> None: an insertion-ordered set
        self.qsubs: dict[bytes, dict] = {}  # queue name -> ordered set of subscriptions

    def is_empty(self) -> bool:
        return not self.psubs and not self.qsubs and (self.next is None or self.next.is_empty())


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self) -> None:
        self.nodes: dict[bytes, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def is_empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


def _add_queues(node: _Node, qsubs: dict) -> None:
    for queue, members in node.qsubs.items():
        group = qsubs.get(queue)
        if group is None:
            qsubs[queue] = list(members)
        else:
            group.extend(members)


def _match_level(level: _Level | None, tokens: list, i: int, psubs: list, qsubs: dict) -> None:
    # Plain subscriptions are taken inline and queue groups through a call: a miss in the
    # match cache walks this for every publish (timed on 10k wildcard subs: 3.1 -> 1.8 us).
    last = len(tokens) - 1
    while level is not None:
        node = level.fwc
        if node is not None:
            if node.psubs:
                psubs.extend(node.psubs)
            if node.qsubs:
                _add_queues(node, qsubs)
        pwc = level.pwc
        node = level.nodes.get(tokens[i])
        if i == last:
            if node is not None:
                if node.psubs:
                    psubs.extend(node.psubs)
                if node.qsubs:
                    _add_queues(node, qsubs)
            if pwc is not None:
                if pwc.psubs:
                    psubs.extend(pwc.psubs)
                if pwc.qsubs:
                    _add_queues(pwc, qsubs)
            return
        if pwc is not None and pwc.next is not None:
            _match_level(pwc.next, tokens, i + 1, psubs, qsubs)
        if node is None:
            return
        level = node.next
        i += 1


class Sublist:
    """Subscriptions by subject. A subscription is any object with ``subject`` and ``queue``
    attributes (``queue`` is ``None`` for a plain subscription)."""

    def __init__(self, cache: bool = True) -> None:
        self._root = _Level()
        # subject -> result. Public so the publish hot path can look it up without a call;
        # only this class writes it. None when the cache is off.
        self.cache: dict[bytes, SublistResult] | None = {} if cache else None
        self.genid = 0  # bumped on every change, so holders of results can tell they are stale
        self.count = 0
        self.inserts = 0
        self.removes = 0
        self.matches = 0
        self.misses = 0

    # -- changes ------------------------------------------------------------------------------

    def insert(self, sub) -> None:
        """Add ``sub``; its subject must satisfy :func:`is_valid_subject`."""
        subject = sub.subject
        level = self._root
        node = None
        wildcard = False
        for token in subject.split(b"."):
            if token == _PWC:
                wildcard = True
                if level.pwc is None:
                    level.pwc = _Node()
                node = level.pwc
            elif token == _FWC:
                wildcard = True
                if level.fwc is None:
                    level.fwc = _Node()
                node = level.fwc
            else:
                node = level.nodes.get(token)
                if node is None:
                    node = level.nodes[token] = _Node()
            if node.next is None:
                node.next = _Level()
            level = node.next
        if sub.queue is None:
            node.psubs[sub] = None
        else:
            node.qsubs.setdefault(sub.queue, {})[sub] = None
        self.count += 1
        self.inserts += 1
        self._changed(subject, wildcard)

    def remove(self, sub) -> bool:
        """Remove ``sub``; returns False when it was not there."""
        subject = sub.subject
        tokens = subject.split(b".")
        path: list[tuple[_Level, bytes, _Node]] = []
        level = self._root
        node = None
        for token in tokens:
            if level is None:
                return False
            if token == _PWC:
                node = level.pwc
            elif token == _FWC:
                node = level.fwc
            else:
                node = level.nodes.get(token)
            if node is None:
                return False
            path.append((level, token, node))
            level = node.next
        if sub.queue is None:
            if node.psubs.pop(sub, False) is not None:
                return False
        else:
            members = node.qsubs.get(sub.queue)
            if members is None or members.pop(sub, False) is not None:
                return False
            if not members:
                del node.qsubs[sub.queue]
        # Prune nodes left empty, deepest first, so a churn of unique subjects cannot grow the trie.
        for level, token, node in reversed(path):
            if not node.is_empty():
                break
            if token == _PWC:
                level.pwc = None
            elif token == _FWC:
                level.fwc = None
            else:
                del level.nodes[token]
        self.count -= 1
        self.removes += 1
        self._changed(subject, _PWC in tokens or _FWC in tokens)
        return True

    def _changed(self, subject: bytes, wildcard: bool) -> None:
        self.genid += 1
        cache = self.cache
        if cache:
            if wildcard:
                cache.clear()
            else:
                cache.pop(subject, None)

    # -- lookups ------------------------------------------------------------------------------

    def match(self, subject: bytes) -> SublistResult:
        """Everything ``subject`` (a literal subject) is delivered to.

        Callers that look ``cache`` up themselves add their hits to ``matches``, so that
        ``matches`` counts every lookup and ``cache_hits`` is ``matches - misses``.
        """
        self.matches += 1
        cache = self.cache
        if cache is not None:
            result = cache.get(subject)
            if result is not None:
                return result
        self.misses += 1
        tokens = subject.split(b".")
        if b"" in tokens:  # nats-server: a subject with an empty token matches nothing
            result = EMPTY_RESULT
        else:
            psubs: list = []
            qsubs: dict = {}
            _match_level(self._root, tokens, 0, psubs, qsubs)
            result = SublistResult(psubs, list(qsubs.values())) if psubs or qsubs else EMPTY_RESULT
        if cache is not None:
            cache[subject] = result
            if len(cache) > SUBLIST_CACHE_MAX:
                self._sweep_cache()
        return result

    def _sweep_cache(self) -> None:
        # nats-server deletes random entries; dropping the oldest is as cheap and as fair.
        cache = self.cache
        for key in list(cache)[: len(cache) - SUBLIST_CACHE_SWEEP_TO]:
            del cache[key]

    @property
    def cache_hits(self) -> int:
        return max(self.matches - self.misses, 0)

    @property
    def cache_size(self) -> int:
        return len(self.cache) if self.cache is not None else 0

    def subscriptions(self) -> list:
        """Every subscription, for monitoring."""
        out: list = []
        stack = [self._root]
        while stack:
            level = stack.pop()
            nodes = list(level.nodes.values())
            nodes.extend(n for n in (level.pwc, level.fwc) if n is not None)
            for node in nodes:
                out.extend(node.psubs)
                for members in node.qsubs.values():
                    out.extend(members)
                if node.next is not None:
                    stack.append(node.next)
        return out
