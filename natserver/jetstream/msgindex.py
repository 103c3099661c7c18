"""The stores' per-message index: sequence -> entry, with the scans the store's rules need.

:class:`DictIndex` (the memory store) is a dict of entry tuples ``(subject, ts, size, ...)``.
:class:`MsgIndex` (the file store) keeps the same information in flat arrays, about 20 bytes
a message instead of a dict slot and a tuple (~250 bytes), as nats-server keeps per-block
indexes rather than an object per message: position ``seq - base`` of each array holds the
message's timestamp, segment, offset, size (nats-server's fileStoreMsgSize, which also
bounds its record's length: see FileStore._read) and subject id (``DEAD`` for a sequence
with no live message). Subjects are interned once, with a reference count, and their ids
reused once no message has them. Its entries are built on demand: ``(subject, ts, size,
segment, offset)``.

Both offer the same scans (first or last sequence of a subject in a range, the next live
sequence, the messages matching a filter); MsgIndex runs the literal-subject ones in C
(``array.index``).
"""

from __future__ import annotations

from array import array
from collections import Counter

DEAD = 0xFFFFFFFF  # the subject id of a sequence with no live message
# Leading dead positions are dropped from the arrays once there are this many and at least
# as many as live ones (a memmove of the rest, amortized over the removals).
_TRIM_AT = 4096
# Up to this many subjects, the per-subject state is rebuilt with a C search per subject
# (array.count/index) rather than one pass that counts every message's subject.
_FEW_SUBJECTS = 64
# The same for a block's summary (summarize, written with every index file checkpoint): up to
# this many subjects, three C passes per subject; more, one Counter and two dict passes.
_FEW_BLOCK_SUBJECTS = 4


def _last_position(sid: array, s: int) -> int:
    """The last position of id ``s`` (there is one): a walk back from the end, where a block's
    few subjects are met at once."""
    j = len(sid) - 1
    while sid[j] != s:
        j -= 1
    return j


def summarize(first: int, size: array, sid: array, ids=None) -> tuple[int, int, dict[int, tuple[int, int, int]]]:
    """A block's live messages, their bytes, and per subject id its (count, first sequence,
    last sequence): what an index file holds so that a restart needs no pass over its arrays
    (``first``: the block's first sequence; dead positions have size 0 and id DEAD; ``ids``:
    the ids in it when known, as ``block``'s table has them)."""
    n = len(sid)
    if ids is None:
        ids = set(sid)
        ids.discard(DEAD)
    if len(ids) <= _FEW_BLOCK_SUBJECTS:  # (no copy of the block: its garbage would stay resident)
        out = {s: (sid.count(s), first + sid.index(s), first + _last_position(sid, s)) for s in ids}
    else:
        counts = Counter(sid)
        last = dict(zip(sid, range(first, first + n)))
        firsts = dict(zip(reversed(sid), range(first + n - 1, first - 1, -1)))
        out = {s: (c, firsts[s], last[s]) for s, c in counts.items() if s != DEAD}
    return sum(c for c, _, _ in out.values()), sum(size), out


def _first_at_time(index, ts: int, lo: int, hi: int) -> int:
    """The first live sequence in [lo, hi] whose timestamp is at least ``ts`` (0: none): a
    binary search, as nats-server's GetSeqFromTime (timestamps grow with sequences; a probe on
    a removed sequence moves to the next live one), so a time costs O(log n), not a scan."""
    found = 0
    while lo <= hi:
        mid = (lo + hi) // 2
        probe = index.next_live(mid, hi)
        if not probe:  # nothing live in [mid, hi]
            hi = mid - 1
        elif index.ts_of(probe) >= ts:
            found, hi = probe, mid - 1
        else:
            lo = probe + 1
    return found


class _LazyMatch(dict):
    """subject id -> whether its subject matches, tested when first asked (``in`` too)."""

    def __init__(self, match, subjects: list[bytes]) -> None:
        super().__init__()
        self.match = match
        self.subjects = subjects

    def __missing__(self, sid: int) -> bool:
        hit = self[sid] = sid != DEAD and bool(self.match(self.subjects[sid]))
        return hit

    def __contains__(self, sid) -> bool:
        return self[sid]

    def __bool__(self) -> bool:
        return True  # (unknown until asked)


class DictIndex(dict):
    """The memory store's index: entries are tuples whose first three fields are
    ``(subject, ts, size)``."""

    def ts_of(self, seq: int) -> int:
        return self[seq][1]

    def next_live(self, lo: int, hi: int) -> int:
        for s in range(lo, hi + 1):
            if s in self:
                return s
        return 0

    def prev_live(self, hi: int, lo: int) -> int:
        for s in range(hi, lo - 1, -1):
            if s in self:
                return s
        return 0

    def find(self, subj: bytes, lo: int, hi: int) -> int:
        get = self.get
        for s in range(lo, hi + 1):
            e = get(s)
            if e is not None and e[0] == subj:
                return s
        return 0

    def rfind(self, subj: bytes, hi: int, lo: int) -> int:
        get = self.get
        for s in range(hi, lo - 1, -1):
            e = get(s)
            if e is not None and e[0] == subj:
                return s
        return 0

    def find_match(self, match, lo: int, hi: int, subjects=None) -> int:
        """The first live sequence in [lo, hi] whose subject matches (``subjects``: every
        stored subject that does, when the caller knows them)."""
        get = self.get
        for s in range(lo, hi + 1):
            e = get(s)
            if e is not None and match(e[0]):
                return s
        return 0

    def matching(self, match, lo: int, hi: int, limit: int = -1) -> list[int]:
        """Live sequences in [lo, hi] whose subject matches (every one with match None), at
        most ``limit`` (-1: all)."""
        get = self.get
        out = []
        for s in range(lo, hi + 1):
            e = get(s)
            if e is not None and (match is None or match(e[0])):
                out.append(s)
                if len(out) == limit:
                    break
        return out

    def count_match(self, match, lo: int, hi: int) -> tuple[int, int, int]:
        n = first = last = 0
        get = self.get
        for s in range(lo, hi + 1):
            e = get(s)
            if e is not None and (match is None or match(e[0])):
                n += 1
                if not first:
                    first = s
                last = s
        return n, first, last

    def missing(self, lo: int, hi: int) -> list[int]:
        return [s for s in range(lo, hi + 1) if s not in self]

    def first_at_time(self, ts: int) -> int:
        if not self:
            return 0
        return _first_at_time(self, ts, next(iter(self)), next(reversed(self)))

    def bounds(self, subjects: set) -> dict[bytes, tuple[int, int]]:
        """(first, last) live sequence of each of ``subjects`` that has one."""
        out: dict[bytes, tuple[int, int]] = {}
        for seq, entry in self.items():
            subj = entry[0]
            if subj in subjects:
                first = out[subj][0] if subj in out else seq
                out[subj] = (first, seq)
        return out


class MsgIndex:
    """The file store's index in arrays (see the module docstring); the mapping methods the
    store and its readers use (``get``, ``in``, ``pop``, ``items``, ...) build entry tuples."""

    __slots__ = ("base", "ts", "seg", "off", "size", "sid", "live", "head", "subjects", "sid_of", "refs", "free")

    def __init__(self) -> None:
        self.base = 1  # the sequence at position 0
        self.ts = array("q")
        self.seg = array("I")
        self.off = array("I")
        self.size = array("I")
        self.sid = array("I")
        self.live = 0
        self.head = 0  # positions below this are all DEAD
        self.subjects: list[bytes] = []
        self.sid_of: dict[bytes, int] = {}
        self.refs: list[int] = []
        self.free: list[int] = []

    # -- subjects -----------------------------------------------------------------------------

    def intern(self, subj: bytes) -> int:
        sid = self.sid_of.get(subj)
        if sid is None:
            if self.free:
                sid = self.free.pop()
                self.subjects[sid] = subj
                self.refs[sid] = 0
            else:
                sid = len(self.subjects)
                self.subjects.append(subj)
                self.refs.append(0)
            self.sid_of[subj] = sid
        return sid

    def _release(self, sid: int) -> None:
        refs = self.refs
        refs[sid] -= 1
        if not refs[sid]:
            del self.sid_of[self.subjects[sid]]
            self.subjects[sid] = b""
            self.free.append(sid)

    # -- the mapping ----------------------------------------------------------------------------

    def add(self, seq: int, subj: bytes, ts: int, seg: int, off: int, size: int) -> None:
        """Index a message; sequences only grow (a gap is filled with DEAD positions)."""
        n = len(self.sid)
        if seq - self.base != n or not self.live:  # (most often: the next position, indexed)
            if not self.live:
                if n:
                    self._clear_arrays()
                    n = 0
                self.base = seq
            i = seq - self.base
            if i < n:
                raise ValueError(f"sequence {seq} is not after the last one indexed")
            if i > n:
                self._pad(i - n)
        sid = self.sid_of.get(subj)
        if sid is None:
            sid = self.intern(subj)
        self.refs[sid] += 1
        self.ts.append(ts)
        self.seg.append(seg)
        self.off.append(off)
        self.size.append(size)
        self.sid.append(sid)
        self.live += 1

    def __setitem__(self, seq: int, entry: tuple) -> None:
        self.add(seq, entry[0], entry[1], entry[3], entry[4], entry[2])

    def _pad(self, gap: int) -> None:
        zeros = array("I", bytes(4 * gap))
        self.ts.extend(array("q", bytes(8 * gap)))
        self.seg.extend(zeros)
        self.off.extend(zeros)
        self.size.extend(zeros)
        self.sid.extend(array("I", [DEAD]) * gap)

    def _clear_arrays(self) -> None:
        for arr in (self.ts, self.seg, self.off, self.size, self.sid):
            del arr[:]
        self.head = 0

    def get(self, seq: int, default=None):
        i = seq - self.base
        if i < 0 or i >= len(self.sid):
            return default
        sid = self.sid[i]
        if sid == DEAD:
            return default
        return (self.subjects[sid], self.ts[i], self.size[i], self.seg[i], self.off[i])

    def __getitem__(self, seq: int):
        entry = self.get(seq)
        if entry is None:
            raise KeyError(seq)
        return entry

    def __contains__(self, seq: int) -> bool:
        i = seq - self.base
        return 0 <= i < len(self.sid) and self.sid[i] != DEAD

    def __len__(self) -> int:
        return self.live

    def __bool__(self) -> bool:
        return self.live > 0

    def pop(self, seq: int, default=None):
        # (get and _release inline: a KV put removes the key's last value this way)
        i = seq - self.base
        sids = self.sid
        if i < 0 or i >= len(sids):
            return default
        sid = sids[i]
        if sid == DEAD:
            return default
        subj = self.subjects[sid]
        entry = (subj, self.ts[i], self.size[i], self.seg[i], self.off[i])
        refs = self.refs
        left = refs[sid] - 1
        refs[sid] = left
        if not left:
            del self.sid_of[subj]
            self.subjects[sid] = b""
            self.free.append(sid)
        sids[i] = DEAD
        self.size[i] = 0  # (so that sum(size) is the live bytes)
        self.seg[i] = 0  # (and the segments count only live messages; real ids start at 1)
        self.live -= 1
        if i == self.head:
            self._advance_head()
        return entry

    def __delitem__(self, seq: int) -> None:
        if self.pop(seq) is None:
            raise KeyError(seq)

    def _advance_head(self) -> None:
        sid = self.sid
        n = len(sid)
        if not self.live:
            self._clear_arrays()
            return
        h = self.head
        while h < n and sid[h] == DEAD:
            h += 1
        self.head = h
        if h >= _TRIM_AT and h >= self.live:
            for arr in (self.ts, self.seg, self.off, self.size, sid):
                del arr[:h]
            self.base += h
            self.head = 0

    def __iter__(self):
        base = self.base
        sid = self.sid
        for i in range(self.head, len(sid)):
            if sid[i] != DEAD:
                yield base + i

    def keys(self):
        return iter(self)

    def items(self):
        get = self.get
        for seq in self:
            yield seq, get(seq)

    def subject_state(self) -> dict[bytes, list]:
        """The store's fss (subject -> [count, first, last, subject]) from the arrays."""
        sid = self.sid
        base, n = self.base, len(sid)
        if len(self.sid_of) <= _FEW_SUBJECTS:  # a C pass or two per subject
            out = {}
            lo, hi = base + self.head, base + n - 1
            for subj, s in self.sid_of.items():
                found = self.find(subj, lo, hi)
                if found:
                    out[subj] = [sid.count(s), found, self.rfind(subj, hi, found), subj]
            return out
        counts = Counter(sid)
        last = dict(zip(sid, range(base, base + n)))
        first = dict(zip(reversed(sid), range(base + n - 1, base - 1, -1)))
        subjects = self.subjects
        return {subjects[s]: [c, first[s], last[s], subjects[s]] for s, c in counts.items() if s != DEAD}

    def live_in(self, lo: int, hi: int) -> int:
        """Live messages among sequences [lo, hi]."""
        i, j = self._range(lo, hi)
        if i >= j:
            return 0
        window = self.sid[i:j]
        return len(window) - window.count(DEAD)

    def total_size(self) -> int:
        return sum(self.size)

    def seg_of(self, seq: int) -> int:
        return self.seg[seq - self.base]

    def ts_of(self, seq: int) -> int:
        return self.ts[seq - self.base]

    def subject_of(self, seq: int) -> bytes:
        return self.subjects[self.sid[seq - self.base]]

    # -- scans ----------------------------------------------------------------------------------

    def _range(self, lo: int, hi: int) -> tuple[int, int]:
        """Positions [i, j) of sequences [lo, hi], clipped to the arrays."""
        base = self.base
        return max(lo - base, self.head, 0), min(hi - base + 1, len(self.sid))

    def next_live(self, lo: int, hi: int) -> int:
        # (_range inline, without max/min: the store's first sequence after every removal of it)
        base = self.base
        sid = self.sid
        i = lo - base
        if i < self.head:
            i = self.head
        j = hi - base + 1
        if j > len(sid):
            j = len(sid)
        while i < j:
            if sid[i] != DEAD:
                return self.base + i
            i += 1
        return 0

    def prev_live(self, hi: int, lo: int) -> int:
        i, j = self._range(lo, hi)
        sid = self.sid
        j -= 1
        while j >= i:
            if sid[j] != DEAD:
                return self.base + j
            j -= 1
        return 0

    def find(self, subj: bytes, lo: int, hi: int) -> int:
        """The first live sequence in [lo, hi] with this subject (0: none), in C."""
        s = self.sid_of.get(subj)
        if s is None:
            return 0
        i, j = self._range(lo, hi)
        if i >= j:
            return 0
        try:
            return self.base + self.sid.index(s, i, j)
        except ValueError:
            return 0

    def rfind(self, subj: bytes, hi: int, lo: int) -> int:
        s = self.sid_of.get(subj)
        if s is None:
            return 0
        i, j = self._range(lo, hi)
        sid = self.sid
        j -= 1
        while j >= i:
            if sid[j] == s:
                return self.base + j
            j -= 1
        return 0

    def _matching_ids(self, match):
        """What ``ids[sid]``/``sid in ids`` answers for the subject ids matching: a set when
        there are few subjects (every one tested once), else a dict that tests a subject
        the first time its id is seen (the work bounded by the range scanned, not by the
        number of subjects)."""
        if len(self.sid_of) <= _FEW_SUBJECTS:
            return {sid for subj, sid in self.sid_of.items() if match(subj)}
        return _LazyMatch(match, self.subjects)

    def find_match(self, match, lo: int, hi: int, subjects=None) -> int:
        sid_of = self.sid_of
        ids = self._matching_ids(match) if subjects is None else {sid_of[k] for k in subjects if k in sid_of}
        if not ids:
            return 0
        if isinstance(ids, set) and len(ids) == 1:
            return self.find(self.subjects[next(iter(ids))], lo, hi)
        i, j = self._range(lo, hi)
        sid = self.sid
        while i < j:
            if sid[i] in ids:
                return self.base + i
            i += 1
        return 0

    def matching(self, match, lo: int, hi: int, limit: int = -1) -> list[int]:
        i, j = self._range(lo, hi)
        sid = self.sid
        base = self.base
        out: list[int] = []
        if match is None:
            for k in range(i, j):
                if sid[k] != DEAD:
                    out.append(base + k)
                    if len(out) == limit:
                        break
            return out
        ids = self._matching_ids(match)
        if not ids:
            return out
        for k in range(i, j):
            if sid[k] in ids:
                out.append(base + k)
                if len(out) == limit:
                    break
        return out

    def count_match(self, match, lo: int, hi: int) -> tuple[int, int, int]:
        i, j = self._range(lo, hi)
        if i >= j:
            return 0, 0, 0
        window = self.sid[i:j]
        if match is None:
            n = len(window) - window.count(DEAD)
        else:
            ids = self._matching_ids(match)
            if not ids:
                return 0, 0, 0
            if not isinstance(ids, set):  # many subjects: one pass
                n = first = last = 0
                for k, s in enumerate(window):
                    if s in ids:
                        n += 1
                        last = k
                        if n == 1:
                            first = k
                return (n, self.base + i + first, self.base + i + last) if n else (0, 0, 0)
            n = sum(window.count(s) for s in ids)
            if not n:
                return 0, 0, 0
            if len(ids) == 1:
                s = next(iter(ids))
                first = self.base + i + window.index(s)
                last = self.rfind(self.subjects[s], self.base + j - 1, first)
                return n, first, last
            first = next(self.base + i + k for k, s in enumerate(window) if s in ids)
            last = next(self.base + i + k for k in range(len(window) - 1, -1, -1) if window[k] in ids)
            return n, first, last
        if not n:
            return 0, 0, 0
        return n, self.next_live(self.base + i, self.base + j - 1), self.prev_live(self.base + j - 1, self.base + i)

    def first_at_time(self, ts: int) -> int:
        """(no entry built on the way)"""
        return _first_at_time(self, ts, self.base + self.head, self.base + len(self.sid) - 1)

    def missing(self, lo: int, hi: int) -> list[int]:
        sid = self.sid
        base, n = self.base, len(sid)
        return [s for s in range(lo, hi + 1) if not 0 <= s - base < n or sid[s - base] == DEAD]

    def bounds(self, subjects: set) -> dict[bytes, tuple[int, int]]:
        if len(subjects) > _FEW_SUBJECTS:  # one C pass over everything
            state = self.subject_state()
            return {subj: (state[subj][1], state[subj][2]) for subj in subjects if subj in state}
        out: dict[bytes, tuple[int, int]] = {}
        lo, hi = self.base + self.head, self.base + len(self.sid) - 1
        for subj in subjects:
            first = self.find(subj, lo, hi)
            if first:
                out[subj] = (first, self.rfind(subj, hi, first))
        return out

    # -- per-segment blocks (the index files written when a segment is sealed) ----------------

    def block(self, lo: int, hi: int) -> tuple[array, array, array, array, dict[int, bytes]]:
        """The arrays of sequences [lo, hi] (ts, offset, size, subject id) and the subjects
        of the ids in them; dead positions included (their subject id is DEAD)."""
        i, j = lo - self.base, hi - self.base + 1
        if i < 0 or j > len(self.sid) or i > j:
            raise ValueError(f"sequences {lo}..{hi} are not all in the index")
        sid = self.sid[i:j]
        subjects = self.subjects
        table = {s: subjects[s] for s in set(sid) if s != DEAD}
        return self.ts[i:j], self.off[i:j], self.size[i:j], sid, table

    def extend_block(self, first: int, seg: int, ts, off, size, sid, table: dict[int, bytes],
                     counts: dict[int, int] | None = None) -> dict[int, int]:
        """Append a block written by ``block`` (its subject ids those of ``table``) as
        sequences ``first``.. in segment ``seg``: the arrays as arrays or as their bytes (an
        index file's, copied once, into these arrays); ``counts``: the live messages of each
        id when known (an index file's summary), else counted here. Returns the block's ids
        mapped to this index's."""
        n = memoryview(sid).nbytes // 4
        if not n:
            return {}
        trans = {old: self.intern(subj) for old, subj in table.items()}
        if not self.live:
            self._clear_arrays()
            self.base = first
        at = first - self.base
        if at < len(self.sid):
            raise ValueError(f"sequence {first} is not after the last one indexed")
        if at > len(self.sid):
            self._pad(at - len(self.sid))
        mine = self.sid
        mine.frombytes(sid)
        if counts is None:
            block = mine[at:]
            if len(table) == 1:
                counts = {old: n - block.count(DEAD) for old in table}
            else:
                counts = {s: c for s, c in Counter(block).items() if s != DEAD}
        live = sum(counts.values())
        dead = n - live
        if any(old != new for old, new in trans.items()):
            mapping = dict(trans)
            mapping[DEAD] = DEAD
            mine[at:] = array("I", map(mapping.__getitem__, mine[at:]))
        segs = array("I", [seg]) * n
        if dead:
            k = at - 1
            for _ in range(dead):
                k = mine.index(DEAD, k + 1)
                segs[k - at] = 0
        refs = self.refs
        for old, c in counts.items():
            refs[trans[old]] += c
        self.ts.frombytes(ts)
        self.seg.extend(segs)
        self.off.frombytes(off)
        self.size.frombytes(size)
        self.live += live
        if mine[self.head] == DEAD:  # (the block, or padding, starts the index)
            self._advance_head()
        return trans

    @property
    def end(self) -> int:
        """The sequence after the last position (base when empty)."""
        return self.base + len(self.sid)
