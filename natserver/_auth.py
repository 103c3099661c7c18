"""Users, password checks and publish/subscribe permissions, as nats-server does them.

Permission lists are matched with a :class:`Sublist`, exactly as nats-server matches them with
its own sublist (client.go setPermissions/canSubscribe/pubAllowed): the subject a client asks
for is looked up *as a literal* in the allow list and the deny list. So with ``subscribe:
["bar.*"]`` a ``SUB bar.>`` is allowed (``>`` is one token that ``*`` matches) while ``SUB >`` is
not. A wildcard subscription that overlaps a deny entry is allowed, and a per-client filter
then keeps the denied subjects from being delivered to it.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from ._sublist import Sublist

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Permissions", "User", "check_password"]

# client.go maxPermCacheSize / pruneSize: the per-client cache of publish decisions.
MAX_PERM_CACHE_SIZE = 128
PERM_CACHE_PRUNE_TO = 96


class _Entry:
    """A permission entry stored in a Sublist (which wants ``subject`` and ``queue``)."""

    __slots__ = ("subject", "queue")

    def __init__(self, subject: bytes, queue: bytes | None = None) -> None:
        self.subject = subject
        self.queue = queue


def _sublist_of(subjects: list[str], with_queues: bool) -> Sublist:
    sublist = Sublist()
    for text in subjects:
        parts = text.split()
        subject = parts[0].encode() if parts else b""
        queue = parts[1].encode() if with_queues and len(parts) == 2 else None
        sublist.insert(_Entry(subject, queue))
    return sublist


def _allow_deny(spec) -> tuple[list[str] | None, list[str]]:
    """``publish: ["a", "b"]`` means allow; ``publish: {allow: [...], deny: [...]}``."""
    if spec is None:
        return None, []
    if isinstance(spec, str):
        return [spec], []
    if isinstance(spec, list):
        return [str(s) for s in spec], []
    if isinstance(spec, dict):
        lowered = {str(k).lower(): v for k, v in spec.items()}
        allow = lowered.get("allow")
        deny = lowered.get("deny") or []
        if isinstance(allow, str):
            allow = [allow]
        if isinstance(deny, str):
            deny = [deny]
        return (None if allow is None else [str(s) for s in allow]), [str(s) for s in deny]
    raise ValueError(f"permissions must be a list or a map with allow/deny, not {type(spec).__name__}")


def _is_subset_match(tokens: list[bytes], test: list[bytes]) -> bool:
    """nats-server isSubsetMatchTokenized: is every subject ``tokens`` matches also matched by
    ``test``? Both may hold wildcards."""
    for i, t2 in enumerate(test):
        if i >= len(tokens) or not t2:
            return False
        if t2 == b">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == b">":
            return False
        if t1 == b"*":
            if t2 != b"*":
                return False
            continue
        if t2 != b"*" and t1 != t2:
            return False
    return len(tokens) == len(test)


def _queue_matches(queue: bytes, groups: list[list]) -> bool:
    for group in groups:
        pattern = group[0].queue
        if b"*" not in pattern.split(b".") and b">" not in pattern.split(b"."):
            if queue == pattern:
                return True
        elif _is_subset_match(queue.split(b"."), pattern.split(b".")):
            return True
    return False


class Permissions:
    """One user's publish and subscribe permissions."""

    def __init__(self, spec: dict | None = None) -> None:
        spec = {str(k).lower(): v for k, v in (spec or {}).items()}
        self.spec = spec
        pub_allow, pub_deny = _allow_deny(spec.get("publish"))
        sub_allow, sub_deny = _allow_deny(spec.get("subscribe"))
        # nats-server: an empty publish allow list still exists (and allows nothing); an empty
        # subscribe allow list is no list at all.
        self.pub_allow = _sublist_of(pub_allow, False) if pub_allow is not None else None
        self.pub_deny = _sublist_of(pub_deny, False) if pub_deny else None
        self.sub_allow = _sublist_of(sub_allow, True) if sub_allow else None
        self.sub_deny = _sublist_of(sub_deny, True) if sub_deny else None
        self.sub_deny_subjects = [s.split()[0].encode() for s in sub_deny if s.split()]

    def can_publish(self, subject: bytes, cache: dict) -> bool:
        """pubAllowed, with the per-client decision cache nats-server keeps."""
        allowed = cache.get(subject)
        if allowed is not None:
            return allowed
        allowed = True
        if self.pub_allow is not None:
            allowed = bool(self.pub_allow.match(subject).psubs)
        if allowed and self.pub_deny is not None:
            allowed = not self.pub_deny.match(subject).psubs
        if len(cache) >= MAX_PERM_CACHE_SIZE:
            for key in list(cache)[: MAX_PERM_CACHE_SIZE - PERM_CACHE_PRUNE_TO]:
                del cache[key]
        cache[subject] = allowed
        return allowed

    def can_subscribe(self, subject: bytes, queue: bytes | None) -> bool:
        """canSubscribe: allow list (with queue entries), then deny list."""
        allowed = True
        if self.sub_allow is not None:
            result = self.sub_allow.match(subject)
            allowed = bool(result.psubs)
            if queue is not None and result.qsubs:
                allowed = _queue_matches(queue, result.qsubs)
        if allowed and self.sub_deny is not None:
            result = self.sub_deny.match(subject)
            allowed = not result.psubs
            if queue is not None and result.qsubs:
                allowed = not _queue_matches(queue, result.qsubs)
        return allowed

    def needs_delivery_filter(self, subject: bytes) -> bool:
        """A wildcard subscription overlapping a deny entry: filter what is delivered to it."""
        tokens = subject.split(b".")
        if b"*" not in tokens and b">" not in tokens:
            return False
        return any(_is_subset_match(deny.split(b"."), tokens) for deny in self.sub_deny_subjects)

    def delivery_denied(self, subject: bytes) -> bool:
        return self.sub_deny is not None and bool(self.sub_deny.match(subject).psubs)


@dataclass
class User:
    """A user from ``authorization { users: [...] }`` (or --user/--pass)."""

    username: str
    password: str = ""
    permissions: Permissions | None = None
    extra: dict = field(default_factory=dict)


def check_password(given: str, stored: str) -> bool:
    """Constant-time comparison; ``$2a$``-style stored passwords are bcrypt hashes."""
    if stored.startswith("$2"):
        import bcrypt  # only needed when a config uses hashes

        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:
            return False
    return hmac.compare_digest(given.encode(), stored.encode())
