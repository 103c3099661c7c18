"""The subject trie that routes messages to subscriptions, in nats-server's shape (sublist.go).

A level maps literal tokens to nodes and has two extra slots, ``pwc`` for ``*`` (exactly one
token) and ``fwc`` for ``>`` (one or more trailing tokens). A node holds the plain
subscriptions and the queue subscriptions (grouped by queue name) that end there, and the next
level. Subjects are ``bytes`` throughout: they come off the wire and go back onto it unchanged.

Matching a subject gives the trie walk's result, cached per subject and bounded like
nats-server's cache (SUBLIST_CACHE_MAX, swept down to SUBLIST_CACHE_SWEEP_TO). Inserting or
removing a subscription drops the cached results it could change: the one subject for a
literal subscription, everything for a wildcard one, and bumps ``genid``.

A cache miss does not walk the trie token by token when it can help it: walking costs a dozen
bytecodes per level plus a call per ``*`` branch, while a dict lookup is one C call. So the
subscribed subjects are also indexed by *shape*, which token positions are literal, ``*`` or
``>`` (``bench.1.*.7`` has shape L L * L). A subject of n tokens can only match the shapes
that fit n tokens; for each, picking the subject's tokens at the literal positions gives the
one key to look up. The shapes that fit n are kept sorted in the trie walk's order, so results
come out exactly as the walk gives them (nats-server's order). When many shapes fit, the walk
is cheaper and is used instead. Measured on misses with 10k wildcard subscriptions of two
shapes (with the node tuples below): a match without the cache went from 1.58 to 1.01 us.
"""

from __future__ import annotations

import random
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from ..protocol.const import SUBLIST_CACHE_MAX, SUBLIST_CACHE_SWEEP_TO

if TYPE_CHECKING:
    from .transform import SubjectMappings

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Sublist", "SublistResult", "is_valid_subject", "is_valid_literal_subject"]

_PWC = b"*"
_FWC = b">"

# Subjects published once each and never again: a JetStream ack's reply subject
# (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, one per delivery).
# Their match results stay in the cache only until the next such subject is matched (the
# compiled publish loop matches a subject and leaves it to Python, which finds it cached), so
# a consumer's acks do not fill the cache and evict the subjects that are published again
# (issue 33: before, every ack inserted an entry that was never hit).
ONESHOT_PREFIXES = (b"$JS.ACK.",)
# Their first bytes (as ints): testing a subject's first byte against them costs a fraction of
# startswith with a tuple, which parses its arguments the slow way (~600 instructions a miss).
# Tests that empty ONESHOT_PREFIXES leave this as it is: startswith(()) is False anyway.
_ONESHOT_HEADS = frozenset(prefix[0] for prefix in ONESHOT_PREFIXES)

# JetStream's ack subjects (``$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<cseq>.<ts>.<pending>``, each
# new, so each a cache miss): while the one subscription that can match any of them is
# JetStream's own ``$JS.ACK.>``, a miss on one needs no split and no trie or shape lookup, only
# the empty-token check (Sublist._ack_node; issue 33). None turns this off (tests).
ACK_PREFIX: bytes | None = b"$JS.ACK."
# Its length, and a bound every subject beginning with it is below: any other miss pays one
# comparison of bytes, which stops at the first byte of a subject that begins with a letter,
# a digit or "_" (~300 instructions less than testing its first byte as an int, callgrind).
_ACK_LEN = len(b"$JS.ACK.")
_ACK_BELOW = b"%"  # (the byte after "$")
_DOT = ord(".")


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


def queue_seed() -> int:
    """A queue group's first random state for queue_pick (never 0: xorshift stays at 0)."""
    return random.getrandbits(32) | 1


def queue_pick(state: int, members: int) -> tuple[int, int]:
    """The next of a queue group's random states (xorshift32) and the member it starts at:
    nats-server starts each message's search for a member at a random index (client.go
    processMsgResults, fastrand). The compiled delivery loop (server/_croute.c) steps the same
    generator, so both pick the same members."""
    state ^= (state << 13) & 0xFFFFFFFF
    state ^= state >> 17
    state ^= (state << 5) & 0xFFFFFFFF
    return state, state % members


class SublistResult:
    """What one subject matches: plain subscriptions and one list per queue group.

    ``queue_state`` keeps each group's random state (queue_pick): each message goes to a member
    picked from a random start, as nats-server picks one (client.go processMsgResults), and a
    member that cannot take it passes it on to the next.
    """

    __slots__ = ("psubs", "qsubs", "queue_state", "plan", "qplan")

    psubs: Sequence  # a list, or a node's own tuple when one node matched (never written)
    qsubs: Sequence[list]  # one list of members per queue group
    queue_state: list[int]  # one random state per queue group (queue_pick)
    plan: tuple | None
    qplan: tuple | None

    def __init__(self, psubs: Sequence, qsubs: Sequence[list]) -> None:
        self.psubs = psubs
        self.qsubs = qsubs
        self.queue_state = [queue_seed() for _ in qsubs]
        # Free for the router to keep per-result precomputed data (the MSG line heads):
        # a cached result is for one subject and is replaced whenever its matches change.
        self.plan = None
        self.qplan = None  # (only results with queue groups are made here and have one)

    def __len__(self) -> int:
        return len(self.psubs) + sum(len(group) for group in self.qsubs)


class _PlainResult(SublistResult):
    """A result without queue groups, as a cache miss makes most: its type's call runs no
    Python ``__init__`` (object's own, in C), which costs less than ``object.__new__`` called
    as a function (~200 instructions of a miss, issue 33). The caller fills the slots."""

    __slots__ = ()
    __init__ = object.__init__


EMPTY_RESULT = SublistResult([], [])


class _Node:
    __slots__ = ("next", "psubs", "qsubs", "plain", "queued")

    def __init__(self) -> None:
        self.next: _Level | None = None
        self.psubs: dict = {}  # subscription -> None: an insertion-ordered set
        self.qsubs: dict[bytes, dict] = {}  # queue name -> ordered set of subscriptions
        # What a match reads: a tuple of psubs (None: rebuild it) and whether qsubs has any.
        # On a cache miss with thousands of subscriptions, nodes are cold in the CPU cache and
        # every object touched is a memory stall: one tuple beats the dict's table and entries.
        self.plain: tuple | None = ()
        self.queued = False

    def changed(self) -> None:
        self.plain = None
        self.queued = bool(self.qsubs)

    def is_empty(self) -> bool:
        return not self.psubs and not self.qsubs and (self.next is None or self.next.is_empty())


def _plain_of(node: _Node) -> tuple:
    plain = node.plain = tuple(node.psubs)
    return plain


# Beyond this many distinct shapes the index is not used (see Sublist._shapes_for).
_MAX_INDEXED_SHAPES = 256

# Token kinds in a shape (see _Shape and _walk_order).
_LITERAL = 0
_ONE = 1  # *
_REST = 2  # >

# How a match makes a shape's key from a subject (_Shape.join): the one token ``pick`` gives,
# the tokens ``pick`` gives joined by dots, or, for a shape of literals then one ``*`` (the
# inboxes nats clients subscribe to: ``_INBOX.<id>.*``), the subject before its last dot: the
# same bytes from one C call, where itemgetter and join are two and a tuple (~500 instructions
# of each miss on such a subscription, issue 33).
_KEY_TOKEN = 0
_KEY_JOINED = 1
_KEY_HEAD = 2


class _Shape:
    """The subscribed subjects of one shape: key -> node. The key is the subject's tokens at
    the shape's literal positions, joined by dots (bytes: one object to compare, where a tuple
    is one plus one per token); ``pick`` takes them from a token list, None means all of them
    (the subject itself), and ``join`` says how a match makes the key: _KEY_TOKEN, _KEY_JOINED
    or _KEY_HEAD."""

    __slots__ = ("kinds", "pick", "join", "nodes")

    pick: Callable[[list], Any] | None

    def __init__(self, kinds: tuple) -> None:
        self.kinds = kinds
        literal = [i for i, kind in enumerate(kinds) if kind == _LITERAL]
        self.join = _KEY_TOKEN if len(literal) < 2 else _KEY_JOINED
        if len(literal) > 1 and kinds == (_LITERAL,) * len(literal) + (_ONE,):
            self.join = _KEY_HEAD
        if len(literal) == len(kinds):
            self.pick = None
        elif literal:
            self.pick = itemgetter(*literal)
        else:
            self.pick = _no_literals
        self.nodes: dict[bytes, _Node] = {}

    def key(self, subject: bytes, tokens: list) -> bytes:
        if self.pick is None:
            return subject
        return b".".join(self.pick(tokens)) if self.join else self.pick(tokens)

    def fits(self, n: int) -> bool:
        """Can a subject of ``n`` tokens match this shape? (``>`` needs at least one token.)"""
        if self.kinds[-1] == _REST:
            return n >= len(self.kinds)
        return n == len(self.kinds)


def _no_literals(tokens: list) -> bytes:
    return b""


def _walk_order(kinds: tuple, n: int) -> tuple:
    """Sort key putting the shapes a subject of ``n`` tokens fits in the order the trie walk
    finds them (_match_level). Before the last token a level gives its ``>`` node, then the
    ``*`` branch, then the literal branch; at the last token, ``>``, literal, then ``*``."""
    last = n - 1
    return tuple((1, 2, 0)[kind] if i == last else (2, 1, 0)[kind] for i, kind in enumerate(kinds))


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self) -> None:
        self.nodes: dict[bytes, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def is_empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


def _holds(node: _Node | None, below: bool) -> bool:
    """Whether ``node`` has subscriptions (``below``: or has any in the levels under it)."""
    if node is None:
        return False
    return bool(node.psubs or node.qsubs) or (below and node.next is not None and _holds_any(node.next))


def _holds_any(level: _Level) -> bool:
    """Whether any subscription is at or under ``level``."""
    return any(_holds(node, True) for node in (*level.nodes.values(), level.pwc, level.fwc))


def _add_node(node: _Node, psubs: list, qsubs: dict) -> None:
    plain = node.plain
    if plain is None:
        plain = _plain_of(node)
    if plain:
        psubs += plain
    if node.queued:
        _add_queues(node, qsubs)


def _add_queues(node: _Node, qsubs: dict) -> None:
    for queue, members in node.qsubs.items():
        group = qsubs.get(queue)
        if group is None:
            qsubs[queue] = list(members)
        else:
            group.extend(members)


def _match_level(level: _Level | None, tokens: list, i: int, psubs: list, qsubs: dict) -> None:
    """The trie walk, in nats-server's order (sublist.go matchLevel)."""
    last = len(tokens) - 1
    while level is not None:
        node = level.fwc
        if node is not None:
            _add_node(node, psubs, qsubs)
        pwc = level.pwc
        node = level.nodes.get(tokens[i])
        if i == last:
            if node is not None:
                _add_node(node, psubs, qsubs)
            if pwc is not None:
                _add_node(pwc, psubs, qsubs)
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
        self._shapes: dict[tuple, _Shape] = {}  # kinds -> shape, for shapes with subscriptions
        # Subject length -> the shapes that length fits, in walk order; None: walk the trie
        # instead. Filled on demand, emptied whenever a shape comes or goes.
        self._by_length: dict[int, tuple | None] = {}
        # Length -> its _by_length tuple when none of those shapes reads a subject's last token
        # (no literal there): subjects with one head then match alike. The last such miss's
        # (head, genid, psubs, len(head)) answers the next one of that head (_head_memo,
        # match_uncached).
        self._head_keyed: dict[int, tuple] = {}
        self._head_memo: tuple | None = None
        # subject -> result. Public so the publish hot path can look it up without a call;
        # only this class writes it. None when the cache is off.
        self.cache: dict[bytes, SublistResult] | None = {} if cache else None
        self.genid = 0  # bumped on every change, so holders of results can tell they are stale
        self.count = 0
        self.inserts = 0
        self.removes = 0
        self.matches = 0
        self.misses = 0
        # Interest hook for what is built on the core (clustering): ``watcher(sub, added)`` is
        # called after every insert and every remove that found the subscription. None: no one
        # watches (the default; inserts and removes then cost one attribute test more).
        self.watcher: Callable[[Any, bool], None] | None = None
        # The subject space's account's subject mappings (routing/transform.SubjectMappings),
        # applied by clients to what they publish; None: no mappings (one test per batch).
        self.mappings: SubjectMappings | None = None
        # The one-shot subject (ONESHOT_PREFIXES) last entered into the cache, if any.
        self._oneshot: bytes | None = None
        # The node of the one subscription every ACK_PREFIX subject matches and no other
        # subscription can, as found at genid _ack_genid (-1: not looked for yet).
        self._ack_node: _Node | None = None
        self._ack_genid = -1

    # -- changes ------------------------------------------------------------------------------

    def insert(self, sub) -> None:
        """Add ``sub``; its subject must satisfy :func:`is_valid_subject`."""
        subject = sub.subject
        tokens = subject.split(b".")
        level = self._root
        node = None
        kind_list = []
        for token in tokens:
            if token == _PWC:
                kind_list.append(_ONE)
                if level.pwc is None:
                    level.pwc = _Node()
                node = level.pwc
            elif token == _FWC:
                kind_list.append(_REST)
                if level.fwc is None:
                    level.fwc = _Node()
                node = level.fwc
            else:
                kind_list.append(_LITERAL)
                node = level.nodes.get(token)
                if node is None:
                    node = level.nodes[token] = _Node()
            if node.next is None:
                node.next = _Level()
            level = node.next
        assert node is not None  # split() gives at least one token
        if sub.queue is None:
            node.psubs[sub] = None
        else:
            node.qsubs.setdefault(sub.queue, {})[sub] = None
        node.changed()
        kinds = tuple(kind_list)
        shape = self._shapes.get(kinds)
        if shape is None:
            shape = self._shapes[kinds] = _Shape(kinds)
            self._by_length.clear()
        shape.nodes[shape.key(subject, tokens)] = node
        wildcard = kinds.count(_LITERAL) != len(kinds)
        self.count += 1
        self.inserts += 1
        self._changed(subject, wildcard)
        if self.watcher is not None:
            self.watcher(sub, True)

    def remove(self, sub) -> bool:
        """Remove ``sub``; returns False when it was not there."""
        subject = sub.subject
        tokens = subject.split(b".")
        path: list[tuple[_Level, bytes, _Node]] = []
        level: _Level | None = self._root
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
        assert node is not None  # split() gives at least one token
        if sub.queue is None:
            if node.psubs.pop(sub, False) is not None:
                return False
        else:
            members = node.qsubs.get(sub.queue)
            if members is None or members.pop(sub, False) is not None:
                return False
            if not members:
                del node.qsubs[sub.queue]
        node.changed()
        if not node.psubs and not node.qsubs:
            self._unindex(subject, tokens)
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
        if self.watcher is not None:
            self.watcher(sub, False)
        return True

    def _unindex(self, subject: bytes, tokens: list) -> None:
        """The subject's node has no subscriptions left: take it out of its shape."""
        kinds = tuple(_ONE if t == _PWC else _REST if t == _FWC else _LITERAL for t in tokens)
        shape = self._shapes[kinds]
        del shape.nodes[shape.key(subject, tokens)]
        if not shape.nodes:
            del self._shapes[kinds]
            self._by_length.clear()

    def _shapes_for(self, n: int) -> tuple | None:
        """The shapes a subject of ``n`` tokens fits, in walk order, as (pick, join, nodes);
        None when there are so many that walking the trie is cheaper. A lookup costs about
        half a trie level, and a walk visits at least n levels. Past _MAX_INDEXED_SHAPES
        shapes in all, the trie is walked without looking: a client churning through
        subscriptions of new shapes could otherwise make every publish rescan them all."""
        if len(self._shapes) > _MAX_INDEXED_SHAPES:
            self._by_length[n] = None
            return None
        fitting = [shape for shape in self._shapes.values() if shape.fits(n)]
        if len(fitting) > 2 * n + 2:
            order = None
        else:
            fitting.sort(key=lambda shape: _walk_order(shape.kinds, n))
            order = tuple((shape.pick, shape.join, shape.nodes) for shape in fitting)
            if not any(len(shape.kinds) == n and shape.kinds[-1] == _LITERAL for shape in fitting):
                self._head_keyed[n] = order
        self._by_length[n] = order
        return order

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
        """Everything ``subject`` (a literal subject) is delivered to."""
        self.matches += 1
        cache = self.cache
        if cache is not None:
            result = cache.get(subject)
            if result is not None:
                return result
        self.misses += 1
        return self.match_uncached(subject)

    def match_uncached(self, subject: bytes) -> SublistResult:
        """``match`` for a subject known not to be in the cache, which it then enters, without
        touching the counters. The publish hot path looks ``cache`` up itself and counts its
        lookups and misses in bulk (``matches``, ``misses``), a chunk at a time.

        Every nats.go request's reply subject (``_INBOX.<id>.<n>``) comes here once, so each
        step counts (issue 33): nothing is made that the result does not keep (no list or
        dict for the shapes' lookups unless a node has queue groups) and the checks are the
        cheapest calls that give the same answer (see _ONESHOT_HEADS)."""
        ack_node = None
        if subject < _ACK_BELOW and subject[:_ACK_LEN] == ACK_PREFIX:  # (None: never equal)
            # The short way (ACK_PREFIX) unless another subscription could match the subject or
            # it has an empty token (the walk's rule: the prefix's tokens are not empty, the
            # others are not when there is no ".." and no trailing dot).
            node = self._ack_node if self._ack_genid == self.genid else self._find_ack_node(subject[:_ACK_LEN])
            if node is not None and subject.find(b"..") < 0 and subject[-1] != _DOT:
                ack_node = node
        # The last head-keyed miss's head: a reply to the same inbox (nats.go's _INBOX.<id>.<n>,
        # every JetStream ack to a PublishAsync), no split and no shape lookups (issue 33). Its
        # last dot where the head ends, the head the same: calls that make no object (an ack,
        # its subject new and long, is a miss too). (Its head came from a subject without
        # empty tokens, so only the last one is checked; 46: a dot.)
        psubs: list | tuple
        qsubs: dict | None = None
        memo = self._head_memo
        if ack_node is not None:
            plain = ack_node.plain
            psubs = plain if plain is not None else _plain_of(ack_node)
        elif memo is not None and memo[1] == self.genid and subject.rfind(b".") == memo[3] \
                and subject.startswith(memo[0]) and subject[-1] != 46:
            psubs = memo[2]
        elif b"" in (tokens := subject.split(b".")):  # nats-server: an empty token matches nothing
            psubs = ()
        else:
            n = len(tokens)
            shapes: tuple | None | Literal[False] = self._by_length.get(n, False)
            if shapes is False:
                shapes = self._shapes_for(n)
            memo_head = None
            if shapes is None:
                psubs = []
                qsubs = {}
                _match_level(self._root, tokens, 0, psubs, qsubs)
            else:
                psubs = ()
                qsubs = None
                for pick, join, nodes in shapes:
                    if pick is None:
                        node = nodes.get(subject)
                    elif join == _KEY_HEAD:
                        memo_head = subject.rpartition(b".")[0]
                        node = nodes.get(memo_head)
                    elif join:
                        node = nodes.get(b".".join(pick(tokens)))
                    else:
                        node = nodes.get(pick(tokens))
                    if node is not None:
                        plain = node.plain
                        if plain is None:
                            plain = _plain_of(node)
                        # The result shares the node's tuple when it is the only one: no list
                        # to make now and free at the next cache sweep (results are read-only).
                        psubs = plain if not psubs else (*psubs, *plain)
                        if node.queued:
                            if qsubs is None:
                                qsubs = {}
                            _add_queues(node, qsubs)
            # (kept when an inbox's shape was looked up: its head is at hand, and other misses,
            # whose heads seldom repeat, pay nothing for it)
            if memo_head is not None and qsubs is None and self._head_keyed.get(n) is shapes:
                self._head_memo = (memo_head, self.genid, psubs, len(memo_head))
        if qsubs:
            result = SublistResult(psubs, list(qsubs.values()))
        elif psubs:
            # No queue groups: made without SublistResult.__init__ (a Python frame, a tenth
            # of a miss) and with shared empty tuples, not two more lists to allocate and free.
            result = _PlainResult()
            result.psubs = psubs
            result.qsubs = result.queue_state = ()  # shared, never indexed: no queue groups
            result.plan = None
        else:
            result = EMPTY_RESULT
        cache = self.cache
        if cache is not None:
            # (an ack's subject taken the short way begins with ACK_PREFIX: one-shot when that
            # is one of ONESHOT_PREFIXES, the tuple's membership says so, where startswith
            # with a tuple parses its arguments the slow way)
            if (ack_node is not None and ACK_PREFIX in ONESHOT_PREFIXES) or (ack_node is None and subject
                    and subject[0] in _ONESHOT_HEADS and subject.startswith(ONESHOT_PREFIXES)):
                # Kept until the next one-shot subject's match: the cache holds one at most.
                if self._oneshot is not None:
                    cache.pop(self._oneshot, None)
                self._oneshot = subject
            cache[subject] = result
            if len(cache) > SUBLIST_CACHE_MAX:
                self._sweep_cache(cache)
        return result

    def _find_ack_node(self, prefix: bytes) -> _Node | None:
        """The node of the only subscription that can match a subject beginning with
        ``prefix`` (two literal tokens and a dot) when it is one plain subscription on
        ``<prefix>>``, else None: any other subscription that could match such a subject (``>``,
        a wildcard in the first two tokens, anything else under the prefix) or a queue group.
        Kept until genid changes."""
        first, second = prefix.split(b".")[:2]
        root = self._root
        found = None
        ok = not _holds(root.fwc, False)
        for head in (root.nodes.get(first), root.pwc):
            level = head.next if head is not None and ok else None
            if level is None:
                continue
            if _holds(level.fwc, False):  # "$JS.>", "*.>"
                ok = False
            for node in (level.nodes.get(second), level.pwc):
                below = node.next if node is not None else None
                if below is None:
                    continue
                if head is root.pwc or node is level.pwc:  # "*.ACK.…", "$JS.*.…": nothing allowed
                    ok = ok and not _holds_any(below)
                    continue
                fwc = below.fwc
                if fwc is None or fwc.qsubs or len(fwc.psubs) != 1 or _holds(below.pwc, True) \
                        or any(_holds(n, True) for n in below.nodes.values()):
                    ok = False
                else:
                    found = fwc
        found = found if ok else None
        self._ack_node, self._ack_genid = found, self.genid
        return found

    def _sweep_cache(self, cache: dict[bytes, SublistResult]) -> None:
        # nats-server deletes random entries; dropping the oldest is as cheap and as fair.
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
            # One tuple per level (an atomic copy: /subsz builds its page in a thread), no
            # generator: 20 000 one-subscription levels took 470 ms, most of it per-level set-up.
            for node in (*level.nodes.values(), level.pwc, level.fwc):
                if node is None:
                    continue
                if node.psubs:
                    out.extend(node.psubs)
                if node.qsubs:
                    for members in node.qsubs.values():
                        out.extend(members)
                if node.next is not None:
                    stack.append(node.next)
        return out
