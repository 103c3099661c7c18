"""Relations between subjects that may hold wildcards, as nats-server computes them
(``sublist.go`` isSubsetMatch, SubjectsCollide): used by permissions, account imports and
exports, and stream subject overlap checks."""

from __future__ import annotations

__all__ = ["has_wildcard", "is_subset_match", "is_subset_match_tokens", "subject_tokens", "subjects_collide", "subset_match"]


def is_subset_match_tokens(tokens: list[bytes], test: list[bytes]) -> bool:
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


def is_subset_match(subject: str, test: str) -> bool:
    return is_subset_match_tokens(subject.encode().split(b"."), test.encode().split(b"."))


def subject_tokens(subject: str) -> list[str]:
    return subject.split(".")


def has_wildcard(subject: str) -> bool:
    return any(t in ("*", ">") for t in subject_tokens(subject))


def subset_match(subject: str, test: str) -> bool:
    """Is everything ``subject`` matches also matched by ``test`` (isSubsetMatch)?"""
    return is_subset_match(subject, test)


def subjects_collide(a: str, b: str) -> bool:
    """Could one subject match both (SubjectsCollide)?"""
    ta, tb = subject_tokens(a), subject_tokens(b)
    la, lb = len(ta), len(tb)
    if ">" not in ta and ">" not in tb and la != lb:
        return False
    for i in range(min(la, lb)):
        x, y = ta[i], tb[i]
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return la == lb or (la > lb and ta[lb] == ">") or (lb > la and tb[la] == ">")
