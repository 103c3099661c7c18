"""Message stores: :class:`MemoryStore` and :class:`FileStore`, one per stream.

Both keep the same state and an index with the same interface, so every rule (sequences,
limits, purges, lookups) lives once, in :class:`Store`; the subclasses only say where the
bytes are and how the index is kept (a dict, or compact arrays for the file store).

State, as nats-server's StreamState: ``msgs``, ``bytes``, ``first_seq``/``first_ts``,
``last_seq``/``last_ts``. ``idx`` (msgindex.py) maps each live sequence to an entry tuple
whose first three fields are ``(subject, ts, size)`` (``size`` as nats-server counts bytes:
fileStoreMsgSize or memStoreMsgSize), in sequence order. ``fss`` maps each subject to ``[count, first, last,
subject]`` (the last item is the shared bytes object the entries point at).

The file format (FileStore)
---------------------------

``<stream dir>/meta.json`` holds the configuration and creation time (written atomically:
temporary file, fsync, rename, directory fsync). ``<stream dir>/msgs/<n>.seg`` are the
segments, an append-only log of records, oldest first; every record is framed as::

    u32 length | u8 type | body (length - 1 bytes) | u32 CRC-32 of everything before it

little-endian, with these types:

* ``MSG`` (1): ``u64 seq | i64 ts (ns) | u16 subject len | u32 header len | u32 data len |
  subject | header | data``
* ``DEL`` (2): ``u64 seq`` - a message removed from the middle of the stream
* ``STATE`` (3): ``u64 first_seq | u64 last_seq | i64 last_ts`` - every sequence below
  ``first_seq`` is gone, and the stream has reached at least ``last_seq``. Each segment starts
  with one, and one is appended whenever messages were removed from the front (limits, age,
  purge), so removals from the front cost no per-message record.
* ``ERASED`` (4): a MSG record whose subject, header and data were overwritten in place with
  random bytes (MSG.DELETE without ``no_erase``); its sequence is gone.

On start every segment is scanned and every checksum verified; the index is rebuilt from the
records in order. A torn or corrupt record at the end of the last segment (a crash during a
write) is cut off; a corrupt record followed by good ones is skipped (counted as lost, never
served). Segments whose messages are all gone are deleted once every older segment is.

With encryption at rest (``jetstream { key }``, crypto.py) the segments hold exactly these
records XORed with a keystream per segment, by offset (``FileStore._disk``), so everything
here (offsets, checksums of the plain records, recovery) is the same for both.

With ``compression: s2`` a sealed segment is kept as ``<n>.sz`` (compressed.py): the same
records, compressed in chunks cut at record boundaries; offsets stay the plain segment's, so
the index and its files are unchanged, and reads and recovery take the bytes from there.

Writes go to a buffer that the engine flushes (one ``write``) before it sends the acks of the
messages in it, so an acknowledged message has reached the operating system; with sync
"always" the engine also fsyncs before acking (group commit).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import sys
import zlib
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sized
from typing import Any

from ..server.reclaim import load_malloc_trim
from . import compressed
from .msgindex import _TRIM_AT, DEAD, DictIndex, MsgIndex, summarize
from .ttl import TtlSchedule, expires_at, header_ttl, is_marker
from .util import compile_filter, get_header, has_wildcard

log = logging.getLogger("natserver")

# nats-server's store error texts (store.go): they reach clients inside 10077 errors.
ERR_MAX_MSGS = "maximum messages exceeded"
ERR_MAX_BYTES = "maximum bytes exceeded"
ERR_MAX_MSGS_PER_SUBJECT = "maximum messages per subject exceeded"
ERR_PURGE_ARGS = "sequence > 1 && keep > 0 not allowed"
ERR_STORE_CLOSED = "store is closed"
ERR_NOT_FOUND = "no message found"
ERR_EOF = "stream store EOF"


class StoreError(Exception):
    pass


class StoreWriteError(StoreError):
    """The file store could not write (ENOSPC, EIO, ...): nats-server's write error (werr).
    The publish gets no response, as from nats-server 2.15.1 (stream.go: "We don't want to
    respond back to the user ... This was likely an IO issue")."""


class StoredMsg:
    __slots__ = ("subject", "seq", "hdr", "data", "ts")

    def __init__(self, subject: bytes, seq: int, hdr: bytes, data: bytes, ts: int) -> None:
        self.subject = subject
        self.seq = seq
        self.hdr = hdr
        self.data = data
        self.ts = ts

    def __repr__(self) -> str:
        return f"StoredMsg(seq={self.seq}, subject={self.subject!r}, data={self.data[:32]!r})"


# Bulk removals above this many messages rebuild the per-subject state in one pass.
_BULK = 64
# Store.expire removes at most this many messages a call (max_age and TTLs together): the
# engine's expirer comes back for the rest on its next turn, so that a mass expiry never holds
# the one thread that serves every client for long (natserver's own bound: nats-server
# expires in a goroutine of its own).
EXPIRE_BATCH = 4096


# Bytes every store of the process has added, by kind, ever (removals not counted): with the
# usage last summed, an upper bound of the usage now, so that the engine's check of its
# max_memory/max_file_store on every publish does not sum every stream's bytes each time
# (JetStream.over_limit: a loop over the streams a publish, hundreds with many KV buckets).
ADDED_BYTES = {"memory": 0, "file": 0}

# The stores whose last write failed (``werr`` set; kept after a stop): while there is none and
# no flush of a round failed, the flusher sends a round's acks without looking at each one's store
# (JetStream._flush_round).
WRITE_FAILING: set = set()


class Store:
    """The index, the state and every rule; subclasses implement the hooks at the end."""

    kind = "memory"
    # The error of the last failed write (the file store's; a memory store never has one): a
    # class attribute, so that the flusher reads it of any store without getattr.
    werr: OSError | None = None

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.msgs = 0
        self.bytes = 0
        self.first_seq = 0
        self.first_ts = 0
        self.last_seq = 0
        self.last_ts = 0
        self.idx = self._new_index()
        self.fss: dict[bytes, list] = {}
        self.closed = False
        # Messages with a Nats-TTL (ttl.py): kept whether or not the stream allows TTLs (a
        # sourced message may carry one), acted on only when it does (expire).
        self.ttls = TtlSchedule()
        # Everything live below this sequence that max_age has reached never expires
        # (Nats-TTL: never): expire goes on from here instead of the first message.
        self._age_cursor = 0
        # Called by expire, with subject_delete_marker_ttl, when the message it removes is the
        # last of its subject (and no marker itself): the stream stores a marker that rolls
        # the subject up (stream.py). None: the message is simply removed.
        self.on_last_expired: Callable[[int, bytes], None] | None = None
        # Called with the sequence of each message removed one by one (a delete, a limit, its
        # age): the stream's consumers treat a pending one as acknowledged (nats-server's
        # decStreamPending). Purges are not reported here, but for a purge with a subject that
        # took one message (as nats-server's stores do): purge_reported says whether the last
        # purge was so reported (its consumers need not count again).
        self.on_remove = None
        # on_remove is called only while this is not empty (the stream's consumers: with none,
        # a removal has nobody to tell, and a KV put's replaced value saves the call).
        self.removal_listeners: Sized = ()
        self.purge_reported = False
        # Direct gets' answers by sequence (direct.Answers), made by the first such get.
        self.direct_answers: Any = None

    # -- writing ------------------------------------------------------------------------------

    def store_msg(self, subj: bytes, hdr: bytes, msg: bytes, ts: int, ttl: int = 0) -> int:
        """Store a message with the next sequence; returns it. Raises StoreError when a
        discard-new limit refuses it; enforces the other limits afterwards (discard old).
        ``ttl``: the message's Nats-TTL in seconds (ttl.parse_ttl; 0 none, -1 never)."""
        if self.closed:
            raise StoreError(ERR_STORE_CLOSED)
        cfg = self.cfg
        fss = self.fss
        maxp = cfg.max_msgs_per_subject
        ss = fss.get(subj)
        psmc = ss[0] if ss is not None else 0
        at_subject_limit = maxp > 0 and psmc >= maxp
        if cfg.discard == "new":
            if at_subject_limit and cfg.discard_new_per_subject:
                raise StoreError(ERR_MAX_MSGS_PER_SUBJECT)
            if cfg.max_msgs > 0 and self.msgs >= cfg.max_msgs and not at_subject_limit:
                raise StoreError(ERR_MAX_MSGS)
            # (2.11+: the message's size as the store counts it, beyond the limit; 2.10 took
            # its header and data, at the limit)
            size_in = self.msg_size(subj, hdr, msg) if cfg.max_bytes > 0 else 0
            if cfg.max_bytes > 0 and self.bytes + size_in > cfg.max_bytes:
                if not at_subject_limit:
                    raise StoreError(ERR_MAX_BYTES)
                assert ss is not None  # (at the subject's limit: it has messages)
                replaced = self.idx[ss[1]][2]
                if replaced < size_in:  # (room only if the replaced one is at least as big)
                    raise StoreError(ERR_MAX_BYTES)
        seq = self.last_seq + 1
        if ss is not None:
            subj = ss[3]
        # First the bytes (a file store that can not write raises StoreWriteError here,
        # before anything changed), then the index (both in _append: one call), then the rest.
        size = self._append(seq, ts, subj, hdr, msg)
        if ss is None:
            ss = fss[subj] = [1, seq, seq, subj]
        else:
            ss[0] += 1
            ss[2] = seq
        if not self.msgs:
            self.first_seq = seq
            self.first_ts = ts
        self.msgs += 1
        self.bytes += size
        ADDED_BYTES[self.kind] += size
        self.last_seq = seq
        self.last_ts = ts
        if ttl:
            ttls = self.ttls
            ttls.add(seq, ts, ttl)
            if len(ttls.heap) + len(ttls.never) > 2 * self.msgs + 1024:
                ttls.compact(self.idx.__contains__, self.msgs)  # (what limits removed: amortised)
        if at_subject_limit:
            while ss[0] > maxp:
                self._remove(ss[1])
        if cfg.max_msgs > 0 and self.msgs > cfg.max_msgs:
            self._enforce_msgs()
        if cfg.max_bytes > 0 and self.bytes > cfg.max_bytes:
            self._enforce_bytes()
        return seq

    def skip_msg(self, ts: int) -> int:
        """Use the next sequence without storing anything (interest retention, no interest)."""
        seq = self.last_seq + 1
        self.skip_to(seq, ts)
        return seq

    def skip_to(self, seq: int, ts: int) -> None:
        """Use every sequence up to ``seq`` without storing anything (a mirror's gaps: the
        next message gets ``seq + 1``, the origin's sequence)."""
        if seq <= self.last_seq:
            return
        self.last_seq = seq
        self.last_ts = ts
        if not self.msgs:
            self.first_seq = seq + 1
            self.first_ts = 0
        self._skipped(seq)

    def _enforce_msgs(self) -> None:
        limit = self.cfg.max_msgs
        while self.msgs > limit:
            self._remove(self.first_seq)

    def _enforce_bytes(self) -> None:
        limit = self.cfg.max_bytes
        while self.bytes > limit and self.msgs:
            self._remove(self.first_seq)

    def update_config(self, cfg) -> None:
        """New limits: enforce them at once (lowered per-subject limits too)."""
        old_maxp = self.cfg.max_msgs_per_subject
        self.cfg = cfg
        if cfg.max_msgs > 0 and self.msgs > cfg.max_msgs:
            self._enforce_msgs()
        if cfg.max_bytes > 0 and self.bytes > cfg.max_bytes:
            self._enforce_bytes()
        maxp = cfg.max_msgs_per_subject
        if maxp > 0 and (old_maxp <= 0 or maxp < old_maxp):
            for ss in [ss for ss in self.fss.values() if ss[0] > maxp]:
                while ss[0] > maxp:
                    self._remove(ss[1])

    def expire(self, now: int) -> int | None:
        """Remove what max_age and the messages' own TTLs (with ``allow_msg_ttl``) say is
        gone at ``now``, at most EXPIRE_BATCH messages; returns when to come back (ns: ``now``
        when it stopped at the batch limit; None: nothing will expire). A message with
        ``Nats-TTL: never`` is spared by max_age. With ``subject_delete_marker_ttl`` the last
        message of a subject goes through ``on_last_expired`` (memstore.go expireMsgs)."""
        budget = EXPIRE_BATCH
        nxt = None
        max_age = self.cfg.max_age
        if max_age > 0 and self.msgs:
            horizon = now - max_age
            ts_of = self.idx.ts_of
            never = self.ttls.never
            if not never:
                while self.msgs and ts_of(self.first_seq) <= horizon and budget:
                    self._expire_one(self.first_seq)
                    budget -= 1
                if self.msgs:
                    nxt = now if not budget else self.first_ts + max_age
            else:
                seq = max(self.first_seq, self._age_cursor)
                while budget:
                    seq = self.idx.next_live(seq, self.last_seq) if seq <= self.last_seq else 0
                    if not seq:
                        break
                    ts = ts_of(seq)
                    if ts > horizon:
                        nxt = ts + max_age
                        break
                    if seq in never:
                        self._age_cursor = seq + 1
                    else:
                        self._expire_one(seq)
                    budget -= 1
                    seq += 1
                if not budget:
                    nxt = now
        ttls = self.ttls
        if ttls.heap and getattr(self.cfg, "allow_msg_ttl", False):
            while budget:
                seq = ttls.pop_due(now)
                if not seq:
                    break
                budget -= 1  # (an entry of a message already gone counts too)
                if seq in self.idx:
                    self._expire_one(seq)
            due = now if not budget else ttls.next_expiry()
            if due is not None and (nxt is None or due < nxt):
                nxt = due
            ttls.compact(self.idx.__contains__, self.msgs)
        return nxt

    def _expire_one(self, seq: int) -> None:
        """Remove an expired message, or let the stream replace it with a subject delete
        marker when it is the last of its subject (and no marker itself)."""
        callback = self.on_last_expired
        if callback is not None:
            subj = self.idx[seq][0]
            ss = self.fss.get(subj)
            if ss is not None and ss[0] == 1:
                stored = self.load_msg(seq)
                if stored is not None and not is_marker(stored.hdr):
                    callback(seq, subj)
                    if seq not in self.idx:
                        return
                    # The marker could not be stored (a limit, a full disk): nats-server would
                    # try again later; natserver removes the message as max_age says.
        self._remove(seq)

    # -- removing -----------------------------------------------------------------------------

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        if self.closed:
            raise StoreError(ERR_STORE_CLOSED)
        if erase and self.direct_answers is not None:
            self.direct_answers.drop(seq)  # (an erased message's bytes are not kept anywhere)
        return self._remove(seq, erase)

    def _remove(self, seq: int, erase: bool = False, report: bool = True) -> bool:
        entry = self.idx.pop(seq, None)
        if entry is None:
            return False
        subj = entry[0]
        self.msgs -= 1
        self.bytes -= entry[2]
        ss = self.fss[subj]
        if ss[0] == 1:
            del self.fss[subj]
        else:
            ss[0] -= 1
            if ss[0] == 1:  # one left: the other end (a KV key's history of 1 replaced)
                if seq == ss[1]:
                    ss[1] = ss[2]
                elif seq == ss[2]:
                    ss[2] = ss[1]
            elif seq == ss[1]:
                ss[1] = self._next_of(subj, seq + 1, ss[2])
            elif seq == ss[2]:
                ss[2] = self._prev_of(subj, seq - 1, ss[1])
        if seq == self.first_seq:
            self._advance_first(seq)
        self._dropped(seq, entry, erase)
        if report and self.removal_listeners and self.on_remove is not None:
            self.on_remove(seq, subj)
        return True

    def _next_of(self, subj: bytes, lo: int, hi: int) -> int:
        return self.idx.find(subj, lo, hi) or hi

    def _prev_of(self, subj: bytes, hi: int, lo: int) -> int:
        return self.idx.rfind(subj, hi, lo) or lo

    def _advance_first(self, removed: int) -> None:
        if not self.msgs:
            self.first_seq = self.last_seq + 1
            self.first_ts = 0
            return
        s = self.idx.next_live(removed + 1, self.last_seq)
        self.first_seq = s
        self.first_ts = self.idx.ts_of(s)

    def _remove_bulk(self, seqs: list) -> int:
        """Remove many messages, then fix the per-subject state in one pass."""
        if len(seqs) < _BULK:  # (a purge: not reported to on_remove, as in nats-server)
            return sum(1 for s in seqs if self._remove(s, report=False))
        idx = self.idx
        fss = self.fss
        touched: set = set()
        removed = 0
        for seq in seqs:
            entry = idx.pop(seq, None)
            if entry is None:
                continue
            removed += 1
            subj = entry[0]
            self.msgs -= 1
            self.bytes -= entry[2]
            ss = fss[subj]
            ss[0] -= 1
            if ss[0] == 0:
                del fss[subj]
                touched.discard(subj)
            else:
                touched.add(subj)
            if seq == self.first_seq:
                self._advance_first(seq)
            self._dropped(seq, entry, False)
        if touched:
            for subj, (first, last) in idx.bounds(touched).items():
                ss = fss[subj]
                ss[1] = first
                ss[2] = last
        return removed

    def purge(self) -> int:
        """Remove everything; the next message keeps the sequence going."""
        return self._remove_all(self.last_seq + 1)

    def _remove_all(self, first_seq: int) -> int:
        """Remove every message; the next one gets ``first_seq`` (at least last_seq + 1)."""
        if self.closed:
            raise StoreError(ERR_STORE_CLOSED)
        self.purge_reported = False
        purged = self.msgs
        self.idx = self._new_index()
        self.fss = {}
        self.msgs = 0
        self.bytes = 0
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.first_ts = 0
        self.ttls.clear()
        self._purged()
        return purged

    def start_at(self, first_seq: int) -> None:
        """A stream's ``first_seq`` (2.10+), when it is created and each time its store is
        opened: a store whose first sequence is below it is emptied and goes on from it (or
        from after its last sequence, if that is higher), as nats-server's newFileStore and
        newMemStore purge(cfg.FirstSeq)."""
        if first_seq > 0 and self.first_seq < first_seq:
            self._remove_all(max(first_seq, self.last_seq + 1))

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq`` (nats-server's Compact)."""
        if seq == 0 or seq > self.last_seq:
            return self._remove_all(max(seq, self.last_seq + 1))
        if seq <= self.first_seq:
            return 0
        return self._remove_bulk(self.idx.matching(None, self.first_seq, seq - 1))

    def purge_ex(self, subject: bytes, seq: int, keep: int) -> int:
        """STREAM.PURGE with a subject filter, an upper sequence or a number to keep."""
        if seq > 1 and keep > 0:
            raise StoreError(ERR_PURGE_ARGS)
        self.purge_reported = False
        if not subject or subject == b">":
            if keep == 0 and seq in (0, 1):
                return self.purge()
            if seq > 1:
                return self.compact(seq)
            if keep == 0:
                return 0
            # 2.10+: ``keep`` counts messages, as with a filter (2.9 kept the last ``keep``
            # sequences, deleted ones among them)
            subject = b">"
        total, first, last = self.filtered_state(1, subject)
        if not total:
            return 0
        limit = total
        if keep > 0:
            if keep >= total:
                return 0
            limit = total - keep
        if seq > 1:
            last = min(last, seq - 1)
        seqs = self.idx.matching(compile_filter(subject), first, last, limit)
        if len(seqs) == 1:
            # Both of nats-server's stores report a purge that took one message as that
            # message's removal (its consumers count one less: decStreamPending), a larger
            # one as a batch (its consumers count again).
            self.purge_reported = self._remove(seqs[0])
            return 1 if self.purge_reported else 0
        return self._remove_bulk(seqs)

    # -- reading ------------------------------------------------------------------------------

    def load_msg(self, seq: int) -> StoredMsg | None:
        entry = self.idx.get(seq)
        if entry is None:
            return None
        parts = self._read(seq, entry)
        if parts is None:
            return None
        return StoredMsg(entry[0], seq, parts[0], parts[1], entry[1])

    def first_seq_at_time(self, ts: int) -> int:
        """The first live sequence whose timestamp is at least ``ts`` (0: none)."""
        return self.idx.first_at_time(ts)

    def last_live_seq(self) -> int:
        return self.idx.prev_live(self.last_seq, self.first_seq)

    def last_seq_for(self, filter: bytes) -> int:
        """The sequence of the last message matching ``filter`` (0: none). For everything
        (b"" or b">") that is the message at last_seq, as in both of nats-server's stores:
        none when it was deleted."""
        if not filter or filter == b">":
            return self.last_seq if self.last_seq in self.idx else 0
        # Wildcards first: a filter such as b"a.*" may also be a literal stored subject (a
        # client may publish to it), and then it still matches every a.X (nats-server does).
        if not has_wildcard(filter):
            ss = self.fss.get(filter)
            return ss[2] if ss is not None else 0
        match = compile_filter(filter)
        best = 0
        for subj, ss in self.fss.items():
            if ss[2] > best and match(subj):
                best = ss[2]
        return best

    def load_last_msg(self, filter: bytes) -> StoredMsg | None:
        seq = self.last_seq_for(filter)
        return self.load_msg(seq) if seq else None

    def next_seq(self, filter: bytes, start: int) -> int:
        """The first sequence >= ``start`` matching ``filter`` (0: none)."""
        if start < self.first_seq:
            start = self.first_seq
        if start > self.last_seq or not self.msgs:
            return 0
        idx = self.idx
        match = compile_filter(filter)
        if match is None:
            return idx.next_live(start, self.last_seq)
        entry = idx.get(start)
        if entry is not None and match(entry[0]):
            return start  # (a consumer reading on: the next message is most often the one)
        if not has_wildcard(filter):  # (wildcards first: see last_seq_for)
            ss = self.fss.get(filter)
            if ss is None:
                return 0
            return idx.find(filter, max(start, ss[1]), ss[2])
        lo, hi = start, self.last_seq
        if len(self.fss) < 1024:
            matched = [k for k in self.fss if match(k)]
            if not matched:
                return 0
            fss = self.fss
            lo = max(start, min(fss[k][1] for k in matched))
            hi = max(fss[k][2] for k in matched)
            return idx.find_match(match, lo, hi, matched)
        return idx.find_match(match, lo, hi)

    def load_next_msg(self, filter: bytes, start: int) -> StoredMsg | None:
        seq = self.next_seq(filter, start)
        return self.load_msg(seq) if seq else None

    def load_next_msgs(self, filter: bytes, start: int, limit: int) -> list[StoredMsg]:
        """load_next_msg repeated: up to ``limit`` messages matching ``filter`` from ``start``
        on, in order, stopping at the end or at a message that can not be read (where
        load_next_msg answers None). A consumer's batch (Consumer.peek_batch)."""
        out: list[StoredMsg] = []
        while len(out) < limit:
            msg = self.load_next_msg(filter, start)
            if msg is None:
                break
            out.append(msg)
            start = msg.seq + 1
        return out

    def filtered_state(self, sseq: int, filter: bytes) -> tuple[int, int, int]:
        """(messages, first, last) matching ``filter`` from ``sseq`` on."""
        if sseq < self.first_seq:
            sseq = self.first_seq
        if sseq > self.last_seq or not self.msgs:
            return 0, 0, 0
        match = compile_filter(filter)
        if sseq == self.first_seq:
            if match is None:
                return self.msgs, self.first_seq, self.last_live_seq()
            if not has_wildcard(filter):  # (wildcards first: see last_seq_for)
                ss = self.fss.get(filter)
                return (ss[0], ss[1], ss[2]) if ss is not None else (0, 0, 0)
            n, first, last = 0, 0, 0
            for subj, ss in self.fss.items():
                if match(subj):
                    n += ss[0]
                    if not first or ss[1] < first:
                        first = ss[1]
                    if ss[2] > last:
                        last = ss[2]
            return n, first, last
        return self.idx.count_match(match, sseq, self.last_seq)

    def num_pending(self, start: int, filter: bytes) -> int:
        return self.filtered_state(start, filter)[0]

    def subjects_state(self, filter: bytes) -> dict[bytes, int]:
        match = compile_filter(filter)
        if match is None:
            return {subj: ss[0] for subj, ss in self.fss.items()}
        return {subj: ss[0] for subj, ss in self.fss.items() if match(subj)}

    def num_deleted(self) -> int:
        if self.last_seq > self.first_seq:
            return max(0, self.last_seq - self.first_seq + 1 - self.msgs)
        return 0

    def deleted(self) -> list[int]:
        if not self.num_deleted():
            return []
        return self.idx.missing(self.first_seq, self.last_seq)

    # -- life cycle ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Hand buffered writes to the operating system (file store)."""

    def stop(self) -> None:
        self.closed = True

    def delete(self) -> None:
        self.stop()

    # -- hooks --------------------------------------------------------------------------------

    def _new_index(self):
        return DictIndex()

    @staticmethod
    def msg_size(subj: bytes, hdr: bytes, msg: bytes) -> int:
        """What a message counts in ``bytes`` (each store's own rule)."""
        raise NotImplementedError

    def _append(self, seq: int, ts: int, subj: bytes, hdr: bytes, msg: bytes) -> int:
        """Write a message (or raise StoreWriteError, nothing changed) and index it under
        ``seq``; returns its size (what it counts in ``bytes``)."""
        raise NotImplementedError

    def _read(self, seq: int, entry: tuple) -> tuple[bytes, bytes] | None:
        raise NotImplementedError

    def _dropped(self, seq: int, entry: tuple, erase: bool) -> None:
        """A message left the index (first_seq is already updated)."""

    def _purged(self) -> None:
        """Everything was removed; first_seq/last_seq hold the new positions."""

    def _skipped(self, seq: int) -> None:
        """A sequence was used without a message."""


class MemoryStore(Store):
    """Messages in a dict; entries are ``(subject, ts, size, header, data)``."""

    kind = "memory"

    def _append(self, seq, ts, subj, hdr, msg):
        size = self.msg_size(subj, hdr, msg)
        self.idx[seq] = (subj, ts, size, hdr, msg)
        return size

    @staticmethod
    def msg_size(subj: bytes, hdr: bytes, msg: bytes) -> int:
        """What a message counts in ``bytes`` (nats-server's memStoreMsgSize)."""
        return len(subj) + len(hdr) + len(msg) + 16

    def _read(self, seq, entry):
        return entry[3], entry[4]


# -- the file store --------------------------------------------------------------------------

T_MSG = 1
T_DEL = 2
T_STATE = 3
T_ERASED = 4

_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_NO_ENTRY = (None,)  # (an index lookup's default: no subject)
_FRAME = struct.Struct("<IB")  # length (type + body), type
_MSG_HEAD = struct.Struct("<IBQqHII")  # frame + seq, ts, subject/header/data lengths
_MSG_FIXED = _MSG_HEAD.size  # 31: the record's bytes before the subject
_MSG_BODY = struct.Struct("<QqHII")
_DEL = struct.Struct("<IBQ")
_STATE = struct.Struct("<IBQQq")
_OVERHEAD = _MSG_FIXED + 4  # a MSG record is this plus subject, header and data

SEGMENT_SIZE = 8 * 1024 * 1024  # roll to a new segment past this (nats-server: 8 MB blocks)
SEGMENT_SUFFIX = ".seg"
# Decompressed chunks of compressed segments kept per stream (compressed.py: 16 KiB each, so
# 1 MiB): a consumer reading in order decompresses each chunk once. natserver's own bound
# (nats-server caches whole decompressed blocks for a while).
ZCACHE_CHUNKS = 64
# Bytes read at once from a plain segment for a message (FileStore._read_ahead): the messages
# after it come from the same block. natserver's own (nats-server reads and caches whole blocks).
READ_AHEAD = 32 * 1024
# Records up to this size are checksummed from a copy of their bytes, larger ones through a view
# of the read-ahead block: a memoryview slice costs more than copying a small record (callgrind,
# zlib.crc32 of a slice, issue 33: 160 B 2.9k instructions copied, 3.2k viewed; 1 KiB 6.7k, 6.6k).
_CRC_COPY_MAX = 512
_NO_CUT = 1 << 62  # (the active segment's cuts are not tracked)
# Chunks of the active segment compressed at most when a chunk fills up: the one just filled
# and one behind (natserver's own bound: the work per stored message stays small).
_CHUNKS_PER_CUT = 2


# Recovering TTLs: a segment with at least this many live messages with headers is read whole,
# one with fewer a header at a time.
_TTL_READ_WHOLE = 64
# The TTL schedule written when the store stops (FileStore._write_ttl_snapshot; nats-server's
# thw.db): magic, version, the sequence it covers up to (every message below it with a TTL is
# in it), the heap's entries, the never-expiring sequences, then a CRC-32 of all of it. A
# start reads it and the headers of the messages from that sequence on only. Encrypted
# stores keep none (as they keep no index files).
TTL_SNAPSHOT = "ttl.snap"
_TTL_MAGIC = b"NSTT"
_TTL_VERSION = 1
_TTL_HEAD = struct.Struct("<4sHHQQQ")  # magic, version, reserved, covered, heap entries, never

# Segment index files (FileStore._write_seg_index): header, then the arrays, the subjects
# (id, length, live messages, first and last sequence, bytes), the DEL sequences and the
# sequences of messages with headers (their Nats-Msg-Id is read at start when they are within
# the duplicate window), then a CRC-32. The header's live count and bytes and the subjects'
# counts are the block's summary: a restart takes the state from them, with no pass over the
# arrays (version 3; version 2 files, without them, are still read and summarized at load).
INDEX_SUFFIX = ".idx"
_IDX_MAGIC = b"NSIX"
_IDX_VERSION = 3
# magic, version, reserved, segment length, first sequence, positions, subjects, DELs,
# messages with headers, the stream's first_seq/last_seq/last_ts when it was written, the
# highest timestamp in it, then (version 3) the block's live messages and their bytes, its
# first live sequence and that message's timestamp, and a CRC-32 of the header before it and
# of what follows the arrays (subjects, DELs, headers): what a start reads without the arrays
# (FileStore._read_seg_meta; the arrays are loaded after, FileStore.load_step)
_IDX_HEAD = struct.Struct("<4sHHQQIIIIQQqqQQQqI")
_IDX_SUBJ = struct.Struct("<IHIQQ")
_IDX_HEAD_V2 = struct.Struct("<4sHHQQIIIIQQqq")
_IDX_SUBJ_V2 = struct.Struct("<IH")
# The active segment's index file is written again each time this much more of it was
# written, so that a restart after kill -9 reads at most this much record by record.
CHECKPOINT_BYTES = 1024 * 1024
# The heap is trimmed after a segment roll once the index grew by this many positions
# (~1.5 MiB of arrays) since the last trim (FileStore._trim_heap).
TRIM_AFTER_POSITIONS = 64 * 1024
_TRIM = load_malloc_trim()
# The arrays are written as the machine keeps them: little-endian machines only.
_INDEX_FILES = sys.byteorder == "little"


def _msg_size(sl: int, hl: int, ml: int) -> int:
    """nats-server's fileStoreMsgSize: 22 + subject + data + 8, and 4 + header with headers.
    A MSG record is _OVERHEAD (35) + subject + header + data: size + 1 bytes with headers,
    size + 5 without."""
    return 22 + sl + ml + 8 + (4 + hl if hl else 0)


def _frame_del(seq: int) -> bytes:
    rec = _DEL.pack(9, T_DEL, seq)
    return rec + _U32.pack(zlib.crc32(rec))


def _frame_state(first: int, last: int, last_ts: int) -> bytes:
    rec = _STATE.pack(25, T_STATE, first, last, last_ts)
    return rec + _U32.pack(zlib.crc32(rec))


def _write_all(fd: int, data, offset: int) -> None:
    # The views are released even when pwrite raises: a live view of a bytearray keeps it
    # from growing (the store appends to the buffer it failed to write, then writes again).
    with memoryview(data) as whole:
        done, total = 0, len(whole)
        while done < total:
            with whole[done:] as rest:
                done += os.pwrite(fd, rest, offset + done)


def _os_error_text(exc: OSError) -> str:
    """An OSError as nats-server's logs and errors word it: its strerror ("no space left on
    device"), with the file when there is one."""
    text = (exc.strerror or str(exc)).lower()
    return f"write {exc.filename}: {text}" if exc.filename else text


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Write a small file so that a crash leaves the old or the new content, never a mix."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


class FileStore(Store):
    """Segments of append-only records (see the module docstring). The index is a
    msgindex.MsgIndex (arrays, ~20 bytes a message); its entries are ``(subject, ts, size,
    segment, offset)``."""

    kind = "file"

    def _new_index(self):
        return MsgIndex()

    @staticmethod
    def msg_size(subj: bytes, hdr: bytes, msg: bytes) -> int:
        """What a message counts in ``bytes`` (nats-server's fileStoreMsgSize)."""
        return _msg_size(len(subj), len(hdr), len(msg))

    def __init__(self, path: str, cfg, *, sync_always: bool = False, segment_size: int = SEGMENT_SIZE,
                 dedup_window: int = 0, now: int = 0, cipher=None, chunk_size: int = compressed.CHUNK_SIZE) -> None:
        super().__init__(cfg)
        self.chunk_size = chunk_size  # compressed segments' chunks (compressed.py; smaller in tests)
        self.path = path
        self.cipher = cipher  # crypto.StreamCipher: encrypted segments (None: plain)
        self.msgs_dir = os.path.join(path, "msgs")
        os.makedirs(self.msgs_dir, exist_ok=True)
        self.sync_always = sync_always
        self.segment_size = segment_size
        self.segs: list[int] = []  # segment ids, oldest first
        self.fds: dict[int, int] = {}
        self.live: dict[int, int] = {}  # live messages per segment
        self.active = 0  # the segment written to
        self.size = 0  # its size, buffered bytes included
        self.flushed = 0  # its size on the OS side
        self.buf = bytearray()
        self.state_dirty = False
        self.unsynced: set[int] = set()  # segments written since the last fsync
        self.dir_unsynced = False
        self.notify: Callable[[FileStore], None] | None = None  # called when there is something to flush
        self.lost = 0  # records found corrupt on recovery
        # The error of the last failed write (nats-server's fs.werr), None while writes work.
        # While set, nothing new is stored: each publish first retries the pending writes.
        self.werr: OSError | None = None
        self.active_first = 0  # the first index position of the active segment's messages
        self.active_dels: list[int] = []  # the DEL records in the active segment
        self.active_hdrs: list[int] = []  # its messages with headers
        self.checkpointed = 0  # how much of the active segment its index file covers
        self._trimmed_at = 0  # the index's positions at the last heap trim
        self._syncing: list[int] = []  # the segments of the last sync_targets
        self.recovered_ids: list[tuple[bytes, int, int]] = []  # (Nats-Msg-Id, seq, ts)
        # Compressed segments (compression s2, compressed.py): their fds are in fds too.
        self.zsegs: dict[int, compressed.ZSegment] = {}
        self._zcache: OrderedDict[tuple[int, int], bytes] = OrderedDict()  # (segment, chunk) -> plain bytes
        # The last READ_AHEAD bytes read from a plain segment: (segment, offset, plain bytes),
        # so that a consumer reading on takes a read a block, not one per message.
        self._rblock: tuple[int, int, bytes, memoryview] | None = None
        # Where the active segment's chunks may be cut (its MSG records' offsets, one per
        # CHUNK_SIZE); None when not known (the segment written to at the start): found by
        # walking its records when it is compressed.
        self.active_cuts: list[int] | None = None
        self._next_cut = _NO_CUT
        # With compression: the active segment's chunks compressed as they filled up (from
        # its start, in order), so that sealing it compresses only its last one.
        self.active_zchunks: list[tuple[int, bytes]] = []
        # (seq, ts, subject, headers) of messages with schedule headers (schedule.py)
        self.recovered_schedules: list[tuple[int, int, bytes, bytes]] | None = None
        self._rbuf = bytearray()  # index files are read into this (recovery only)
        # A store recovered from its index files' summaries (_recover_summary): the index
        # built so far, the segments whose arrays are still to be read (segment, first
        # sequence, positions, per subject id counts, bytes covered) and the records after
        # the last index file, indexed last (load_step).
        self._partial: MsgIndex | None = None
        self._deferred: list[tuple] | None = None
        self._deferred_tail: list[tuple] = []
        self._reread: list[tuple[int, int, int, int]] = []  # index files load_step could not read
        self._recover(dedup_window, now)
        self._rbuf = bytearray()

    # -- recovery -----------------------------------------------------------------------------

    @property
    def loading(self) -> bool:
        """Whether the index's arrays are still to be read (see load_step)."""
        return bool(self.__dict__.get("_deferred"))

    def load_step(self) -> bool:
        """Read one more segment's arrays into the index of a store recovered from the
        summaries (at most one index file's worth of work); True while more remain. The
        last step puts the index in place."""
        deferred = self.__dict__.get("_deferred")
        if not deferred:
            return False
        partial = self._partial
        assert partial is not None
        seg, first, count, counts, size = deferred.pop(0)
        if count and not self.closed:
            loaded = self._load_seg_index(seg)
            if loaded is not None and loaded[1] == first and len(loaded[5]) == 4 * count \
                    and loaded[10][2] == counts:
                ts_a, off_a, size_a, sid_a, table = loaded[2:7]
                partial.extend_block(first, seg, ts_a, off_a, size_a, sid_a, table,
                                     {old: c for old, (c, _, _) in counts.items()})
            else:  # (the file changed or went bad since the start: its records instead)
                log.warning("JetStream: %s: index file of segment %d unreadable after the start; "
                            "reading its records", self.msgs_dir, seg)
                self._reread.append((seg, first, first + count - 1, size))
                try:
                    self._index_records(partial, seg, first, first + count - 1, size)
                except OSError as exc:
                    log.error("JetStream: %s: segment %d unreadable: %s; its messages are lost",
                              self.msgs_dir, seg, _os_error_text(exc))
                    self.lost += 1
            loaded = None
        if deferred:
            return True
        for seq, subj, ts, seg, off, size in self._deferred_tail:
            if seq >= partial.end or not partial:
                partial.add(seq, subj, ts, seg, off, size)
        self.idx = partial
        self.__class__ = FileStore  # (see _LoadingFileStore)
        if self._reread:  # (the state again from what the index holds now, and the files)
            reread, self._reread = self._reread, []
            for seg, lo, hi, size in reread:
                if seg in self.fds and lo < partial.end:
                    self._write_seg_index(seg, lo, min(hi, partial.end - 1), [], [], size)
            self.fss = partial.subject_state()
            self.msgs, self.bytes = len(partial), partial.total_size()
            for seg in self.segs:
                self.live[seg] = 0
            for seq in partial:
                self.live[partial.seg_of(seq)] += 1
            if partial:
                self.first_seq = partial.next_live(0, self.last_seq)
                self.first_ts = partial.ts_of(self.first_seq)
        self._deferred = None
        self._deferred_tail = []
        self._partial = None
        self._rbuf = bytearray()
        self._trim_heap()
        return False

    def _index_records(self, idx: MsgIndex, seg: int, lo: int, hi: int, size: int) -> None:
        """Index the MSG records of sequences [lo, hi] in the first ``size`` bytes of a plain
        segment (what its index file said, when that file can no longer be read)."""
        with open(self._seg_path(seg), "rb") as f:
            data = f.read(size)
        view = memoryview(data)
        pos, n = 0, len(data)
        while pos < n:
            ok, total = _check_record(view, pos, n)
            if not ok:
                break
            if view[pos + 4] == T_MSG:
                seq, ts, sl, hl, ml = _MSG_BODY.unpack_from(view, pos + 5)
                if lo <= seq <= hi and seq >= idx.end:
                    start = pos + _MSG_FIXED
                    idx.add(seq, bytes(view[start : start + sl]), ts, seg, pos, _msg_size(sl, hl, ml))
            pos += total
        view.release()

    def _read_seg_meta(self, seg: int):
        """A version 3 index file's summary without its arrays (its header and what follows
        them, under their own checksum), or None: (covered length, first, positions, live,
        bytes, first live sequence and its timestamp, (first_seq, last_seq, last_ts),
        per subject id (count, first, last), subjects, DELs, header sequences)."""
        if self.cipher is not None or not _INDEX_FILES:
            return None
        try:
            fd = os.open(self._idx_path(seg), os.O_RDONLY)
        except OSError:
            return None
        try:
            size = os.fstat(fd).st_size
            raw = os.pread(fd, _IDX_HEAD.size, 0)
            if len(raw) != _IDX_HEAD.size or raw[:4] != _IDX_MAGIC or _U16.unpack_from(raw, 4)[0] != _IDX_VERSION:
                return None
            (_, _, _, covered, first, count, n_subj, n_dels, n_hdrs, s_first, s_last, s_lts, _max_ts, live,
             live_bytes, first_live, first_live_ts, meta_crc) = _IDX_HEAD.unpack(raw)
            at = _IDX_HEAD.size + 20 * count
            if size < at + 4 or covered > self._seg_len(seg):
                return None
            tail = os.pread(fd, size - 4 - at, at)
            if len(tail) != size - 4 - at or zlib.crc32(tail, zlib.crc32(raw[:-4])) != meta_crc:
                return None
            pos = 0
            table, counts = {}, {}
            for _ in range(n_subj):
                sid, sl, *sums = _IDX_SUBJ.unpack_from(tail, pos)
                pos += _IDX_SUBJ.size
                table[sid] = tail[pos : pos + sl]
                counts[sid] = tuple(sums)
                pos += sl
            if pos + 8 * (n_dels + n_hdrs) != len(tail) or live != sum(c for c, _, _ in counts.values()) \
                    or live > count:
                return None
        except (OSError, struct.error):
            return None
        finally:
            os.close(fd)
        return (covered, first, count, live, live_bytes, first_live, first_live_ts, (s_first, s_last, s_lts),
                counts, table, n_dels, n_hdrs)

    def _recover_summary(self, dedup_window: int, now: int) -> bool:
        """Recover from the index files' summaries alone when they say everything the state
        needs, leaving the arrays to load_step (a task of the engine, or the first use of the
        index): every segment plain with a whole version 3 index file, nothing removed since
        the files were written (no DEL records in them nor in the records after them), no
        message with headers (their Nats-Msg-Ids, TTLs and schedules are read at start), no
        compression. Otherwise False, having changed nothing: _recover reads everything."""
        if self.cipher is not None or not _INDEX_FILES or getattr(self.cfg, "compression", "none") == "s2" \
                or getattr(self.cfg, "allow_msg_ttl", False) or getattr(self.cfg, "allow_msg_schedules", False):
            return False
        names = os.listdir(self.msgs_dir)
        if any(not name.endswith((SEGMENT_SUFFIX, INDEX_SUFFIX)) for name in names):
            return False  # (compressed segments, leftovers of a crash: the full recovery)
        ids = sorted(int(name[: -len(SEGMENT_SUFFIX)]) for name in names
                     if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit())
        if not ids:
            return False
        fds: dict[int, int] = {}
        taken = False
        try:
            for seg in ids:
                fds[seg] = os.open(self._seg_path(seg), os.O_RDWR)
            self.fds = fds  # (_seg_len)
            metas = []
            last = ids[-1]
            for seg in ids:
                meta = self._read_seg_meta(seg)
                if meta is None and seg == last and not os.path.exists(self._idx_path(seg)):
                    # (the newest segment before its first checkpoint: its records are read)
                    meta = (0, 0, 0, 0, 0, 0, 0, (0, 0, 0), {}, {}, 0, 0)
                if meta is None or meta[10] or meta[11]:  # (no file, or DELs or headers in it)
                    return False
                metas.append(meta)
            length = os.fstat(fds[last]).st_size
            if any(meta[0] != os.fstat(fds[seg]).st_size for seg, meta in zip(ids[:-1], metas)) or not length:
                return False
            end = 0  # the position after the last one indexed
            fss: dict[bytes, list] = {}
            live: dict[int, int] = {}
            msgs = total_bytes = first_seq = first_ts = last_seq = last_ts = floor = 0
            for seg, meta in zip(ids, metas):
                (covered, first, count, n_live, n_bytes, first_live, first_live_ts, (s_first, s_last, s_lts),
                 counts, table, _, _) = meta
                if count and first < end:
                    return False
                live[seg] = n_live
                msgs += n_live
                total_bytes += n_bytes
                if n_live and not first_seq:
                    first_seq, first_ts = first_live, first_live_ts
                for sid, (c, f, la) in counts.items():
                    subj = table[sid]
                    ss = fss.get(subj)
                    if ss is None:
                        fss[subj] = [c, f, la, subj]
                    else:
                        ss[0] += c
                        ss[2] = la
                if count:
                    end = first + count
                floor = max(floor, s_first)
                if s_last > last_seq or (s_last == last_seq and not last_ts):
                    last_seq, last_ts = s_last, s_lts
            # The records after the newest segment's index file: messages without headers
            # and STATE records only.
            covered = metas[-1][0]
            active_first = metas[-1][1] if metas[-1][2] else max(end, 1)
            tail: list[tuple] = []
            if covered < length:
                data = os.pread(fds[last], length - covered, covered)
                view = memoryview(data)
                pos, n = 0, len(data)
                while pos < n:
                    ok, total = _check_record(view, pos, n)
                    if not ok:
                        return False  # (a torn tail: cut by the full recovery)
                    length_, rtype = _FRAME.unpack_from(view, pos)
                    if rtype == T_MSG:
                        seq, ts, sl, hl, ml = _MSG_BODY.unpack_from(view, pos + 5)
                        if hl or seq < end:
                            return False
                        start = pos + _MSG_FIXED
                        subj = bytes(view[start : start + sl])
                        size = _msg_size(sl, hl, ml)
                        tail.append((seq, subj, ts, last, covered + pos, size))
                        end = seq + 1
                        live[last] += 1
                        msgs += 1
                        total_bytes += size
                        if not first_seq:
                            first_seq, first_ts = seq, ts
                        ss = fss.get(subj)
                        if ss is None:
                            fss[subj] = [1, seq, seq, subj]
                        else:
                            ss[0] += 1
                            ss[2] = seq
                        if seq >= last_seq:
                            last_seq, last_ts = seq, ts
                    elif rtype == T_STATE:
                        s_first, s_last, s_lts = struct.unpack_from("<QQq", view, pos + 5)
                        floor = max(floor, s_first)
                        if s_last > last_seq or (s_last == last_seq and not last_ts):
                            last_seq, last_ts = s_last, s_lts
                    else:
                        return False
                    pos += total
                view.release()
            if not msgs or floor > first_seq:
                return False
            taken = True
        except OSError:
            return False
        finally:
            if not taken:  # (the full recovery opens them again)
                for fd in fds.values():
                    os.close(fd)
                self.fds = {}
        self.segs = ids
        self.live = live
        self.msgs, self.bytes, self.fss = msgs, total_bytes, fss
        self.first_seq, self.first_ts = first_seq, first_ts
        self.last_seq, self.last_ts = last_seq, last_ts
        self.size = length
        if length < self.segment_size:  # (else a new segment, which loads the index first)
            self.active, self.flushed = last, length
        self.active_first, self.active_dels, self.active_hdrs = active_first, [], []
        self.checkpointed = covered
        self._partial = MsgIndex()
        self._deferred = [(seg, meta[1], meta[2], meta[8], meta[0]) for seg, meta in zip(ids, metas)]
        self._deferred_tail = tail
        del self.idx  # (built by load_step; _LoadingFileStore's __getattr__ until then)
        self.__class__ = _LoadingFileStore
        self._resume_writes(recovering=True)
        return True
    def _recover(self, dedup_window: int, now: int) -> None:
        if self._recover_summary(dedup_window, now):
            return
        names = os.listdir(self.msgs_dir)
        plain = {int(name[: -len(SEGMENT_SUFFIX)]) for name in names
                 if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit()}
        packed = {int(name[: -len(compressed.SUFFIX)]) for name in names
                  if name.endswith(compressed.SUFFIX) and name[: -len(compressed.SUFFIX)].isdigit()}
        for seg in sorted(packed):
            if self._open_compressed(seg):
                if seg in plain:  # a crash after the compressed file's rename: it is whole
                    os.unlink(self._seg_path(seg))
                    plain.discard(seg)
            elif seg in plain:  # (never the case: the plain one goes after the rename)
                os.unlink(self._zpath(seg))
            else:
                log.error("JetStream: %s: compressed segment %d is unreadable; its messages are lost",
                          self.msgs_dir, seg)
                os.rename(self._zpath(seg), self._zpath(seg) + ".corrupt")
                self.lost += 1
        ids = sorted(plain | set(self.zsegs))
        for name in names:  # an index or compressed file a crash left half written (never renamed)
            if name.endswith((INDEX_SUFFIX + ".tmp", compressed.SUFFIX + ".tmp")):
                try:
                    os.unlink(os.path.join(self.msgs_dir, name))
                except OSError:
                    pass
        idx = MsgIndex()
        subjects: dict[bytes, bytes] = {}
        last_seq = last_ts = floor = last_indexed = 0
        horizon = now - dedup_window if dedup_window > 0 else None
        candidates: list = []
        torn_tail = False
        unpack_frame = _FRAME.unpack_from
        unpack_body = _MSG_BODY.unpack_from
        hdr_lists: dict[int, list[int]] = {}  # each segment's messages with headers (their TTLs)
        unindexed: dict[int, tuple[list[int], list[int]]] = {}  # sealed segments scanned: their DELs, header seqs
        seg_start: dict[int, int] = {}  # each segment's first sequence (its first position)
        dels: list[int] = []
        hdrs: list[int] = []
        # The state as it is built, block summaries and scanned records added, removals taken
        # off (drop), so that nothing at the end passes over every message: the live messages
        # per segment, the bytes, and per subject [count, first, last, subject] (first and
        # last looked up again at the end for the subjects a removal touched).
        live = self.live
        fss: dict[bytes, list] = {}
        touched: set[bytes] = set()
        total_bytes = 0

        def drop(seq: int) -> None:
            nonlocal total_bytes
            entry = idx.pop(seq, None)
            if entry is not None:
                subj, _, size, in_seg, _ = entry
                live[in_seg] -= 1
                total_bytes -= size
                fss[subj][0] -= 1
                touched.add(subj)

        for k, seg in enumerate(ids):
            zipped = seg in self.zsegs
            seg_path = self._zpath(seg) if zipped else self._seg_path(seg)
            fd = self.fds[seg] if zipped else os.open(seg_path, os.O_RDWR)
            self.fds[seg] = fd
            self.segs.append(seg)
            self.live[seg] = 0
            seg_start[seg] = idx.end if idx else max(last_indexed + 1, 1)
            sealed = k < len(ids) - 1
            # Its index file (written when it was sealed, or a checkpoint of its first part
            # while it was written to): the records it covers are not read.
            loaded = self._load_seg_index(seg)
            covered = 0
            dels = []
            hdrs = []
            hdr_lists[seg] = hdrs
            if loaded is not None:
                (covered, first, ts_a, off_a, size_a, sid_a, table, seg_dels, seg_hdrs,
                 (s_first, s_last, s_lts), (b_live, b_bytes, b_counts)) = loaded
                count = len(sid_a) // 4
                if idx and first < idx.end and count:
                    covered = 0  # (overlapping an older segment: never written so) scanned below
                else:
                    trans = idx.extend_block(first, seg, ts_a, off_a, size_a, sid_a, table,
                                             {old: c for old, (c, _, _) in b_counts.items()})
                    del ts_a, off_a, size_a, sid_a, loaded  # (views of the read buffer)
                    live[seg] += b_live
                    total_bytes += b_bytes
                    for old, (c, f, last) in b_counts.items():
                        subj = idx.subjects[trans[old]]
                        ss = fss.get(subj)
                        if ss is None:
                            fss[subj] = [c, f, last, subj]
                        else:  # (blocks come in sequence order)
                            ss[0] += c
                            ss[2] = last
                    if count:
                        seg_start[seg] = first
                        last_indexed = first + count - 1
                    for seq in seg_dels:
                        drop(seq)
                    dels = seg_dels.tolist()
                    hdrs = seg_hdrs.tolist()
                    hdr_lists[seg] = hdrs
                    if horizon is not None:  # the Nats-Msg-Ids within the duplicate window
                        for seq in hdrs:
                            if seq in idx and idx.ts_of(seq) >= horizon:
                                entry = idx.get(seq)
                                parts = self._read(seq, entry)
                                msg_id = get_header(b"Nats-Msg-Id", parts[0]) if parts is not None else b""
                                if msg_id:
                                    candidates.append((msg_id, seq, entry[1]))
                    floor = max(floor, s_first)
                    if s_last > last_seq or (s_last == last_seq and not last_ts):
                        last_seq, last_ts = s_last, s_lts
                    if covered == self._seg_len(seg):
                        self.size = covered
                        continue
            if zipped:  # chunk by chunk (each holds whole records)
                pieces = self._seg_pieces(seg)
            else:
                with open(seg_path, "rb") as f:
                    pieces = [(0, self._disk(seg, f.read(), 0))]
            n = 0
            for base, data in pieces:
                if data is None:
                    log.warning("JetStream: %s: skipping a corrupt chunk at %d", seg_path, base)
                    self.lost += 1
                    continue
                n = len(data)
                if base + n <= covered:
                    continue
                view = memoryview(data)
                pos = max(covered - base, 0)
                bad_at = -1
                while pos < n:
                    ok, total = _check_record(view, pos, n)
                    if not ok:
                        if total and pos + total < n and _check_record(view, pos + total, n)[0]:
                            log.warning("JetStream: skipping a corrupt record in %s at %d", seg_path, base + pos)
                            self.lost += 1
                            pos += total
                            continue
                        bad_at = pos
                        break
                    length, rtype = unpack_frame(view, pos)
                    if rtype == T_MSG:
                        seq, ts, sl, hl, ml = unpack_body(view, pos + 5)
                        start = pos + _MSG_FIXED
                        subj = data[start : start + sl]
                        subj = subjects.setdefault(subj, subj)
                        if idx and seq <= last_indexed:  # out of order (never written so): not served
                            log.warning("JetStream: skipping message %d out of order in %s", seq, seg_path)
                            self.lost += 1
                            pos += total
                            continue
                        size = _msg_size(sl, hl, ml)
                        idx.add(seq, subj, ts, seg, base + pos, size)
                        live[seg] += 1
                        total_bytes += size
                        ss = fss.get(subj)
                        if ss is None:
                            subj = idx.subjects[idx.sid_of[subj]]  # (the index's copy)
                            fss[subj] = [1, seq, seq, subj]
                        else:
                            ss[0] += 1
                            ss[2] = seq
                        last_indexed = seq
                        if seq >= last_seq:
                            last_seq, last_ts = seq, ts
                        if hl:
                            hdrs.append(seq)
                        if hl and horizon is not None and ts >= horizon:
                            msg_id = get_header(b"Nats-Msg-Id", data[start + sl : start + sl + hl])
                            if msg_id:
                                candidates.append((msg_id, seq, ts))
                    elif rtype == T_DEL:
                        (seq,) = struct.unpack_from("<Q", view, pos + 5)
                        drop(seq)
                        dels.append(seq)
                    elif rtype == T_ERASED:
                        seq, ts = struct.unpack_from("<Qq", view, pos + 5)
                        drop(seq)
                        if seq > last_seq:
                            last_seq, last_ts = seq, ts
                    elif rtype == T_STATE:
                        first, last, lts = struct.unpack_from("<QQq", view, pos + 5)
                        floor = max(floor, first)
                        if last > last_seq or (last == last_seq and not last_ts):
                            last_seq, last_ts = last, lts
                    pos += total
                view.release()
                if bad_at >= 0:
                    if k == len(ids) - 1 and not zipped:
                        log.warning("JetStream: %s: dropping a torn or corrupt tail of %d bytes at offset %d",
                                    seg_path, n - bad_at, bad_at)
                        os.truncate(seg_path, bad_at)
                        self.lost += 1
                        n = bad_at
                        # Encrypted: never write a keystream's bytes twice (the cut tail may have
                        # been copied): the next writes go to a new segment.
                        torn_tail = True
                    else:
                        log.warning("JetStream: %s: ignoring a corrupt tail of %d bytes", seg_path, n - bad_at)
                        self.lost += 1
            self.size = self._seg_len(seg) if zipped else n
            if sealed:
                unindexed[seg] = (dels, hdrs)
        # Everything below the highest STATE first_seq is gone.
        if floor and idx:
            for seq in idx.matching(None, 0, floor - 1):
                drop(seq)
        self.idx = idx
        for subj in touched:  # (a removed message may have been a subject's first or last)
            ss = fss[subj]
            if ss[0] <= 0:
                del fss[subj]
                continue
            if idx.get(ss[1], _NO_ENTRY)[0] != subj:
                ss[1] = idx.find(subj, ss[1], ss[2])
            if idx.get(ss[2], _NO_ENTRY)[0] != subj:
                ss[2] = idx.rfind(subj, ss[2], ss[1])
        self.fss = fss
        self.msgs = len(idx)
        self.bytes = total_bytes
        self.last_seq = last_seq
        self.last_ts = last_ts
        if idx:
            first = idx.next_live(0, last_seq)
            self.first_seq = first
            self.first_ts = idx.ts_of(first)
        else:
            self.first_seq = max(floor, last_seq + 1) if (floor or last_seq) else 0
            self.first_ts = 0
        self.recovered_ids = [c for c in candidates if c[1] in idx]
        if getattr(self.cfg, "allow_msg_schedules", False):
            self._recover_schedules(hdr_lists)
        if getattr(self.cfg, "allow_msg_ttl", False):  # (NSQ's and STAN's stores have no TTLs)
            covered = self._load_ttl_snapshot()
            if covered:
                hdr_lists = {seg: [seq for seq in seqs if seq >= covered] for seg, seqs in hdr_lists.items()}
            self._recover_ttls(hdr_lists)
        # Write to the newest segment while it has room.
        if self.segs and self.size < self.segment_size and not (torn_tail and self.cipher is not None) \
                and self.segs[-1] not in self.zsegs:
            self.active = self.segs[-1]
            self.flushed = self.size
            if self.size == 0:
                self.buf += _frame_state(self.first_seq, self.last_seq, self.last_ts)
                self.size = len(self.buf)
                self.active_cuts, self._next_cut = [0], self.chunk_size
        last = self.segs[-1] if self.segs else 0
        if last:
            self.active_first, self.active_dels, self.active_hdrs = seg_start[last], dels, hdrs
            self.checkpointed = covered
        self._resume_writes(recovering=True)  # (a new segment when the newest has no room)
        if last and self.active != last:
            unindexed[last] = (dels, hdrs)
        # The segment sealed last before the stop may be plain (a crash before it was
        # compressed, or it filled up just before a stop): compressed now. Older plain ones
        # (written before an update to s2) stay as they are.
        if self.werr is None and getattr(self.cfg, "compression", "none") == "s2":
            for seg in self.segs[-2:]:
                if seg != self.active and seg not in self.zsegs and seg in self.fds:
                    self._compress(seg, None)
        # Index files for the sealed segments that had none (or a stale one), so the next
        # start reads them instead of the records.
        for k, seg in enumerate(ids):
            if seg in unindexed and seg in self.fds:
                end = seg_start[ids[k + 1]] if k + 1 < len(ids) else idx.end
                self._write_seg_index(seg, seg_start[seg], end - 1, *unindexed[seg], self._seg_len(seg))
        if self.werr is None:
            self._drop_dead_segments()
        self._trim_heap()  # (what reading the segments left behind)

    def _open_compressed(self, seg: int) -> bool:
        """Open ``<seg>.sz`` (recovery): False when its header or table does not check."""
        fd = os.open(self._zpath(seg), os.O_RDONLY)
        try:
            self.zsegs[seg] = compressed.ZSegment(fd, self._xor())
        except (compressed.CorruptSegment, OSError, struct.error) as exc:
            log.warning("JetStream: %s: compressed segment %d not used: %s", self.msgs_dir, seg, exc)
            os.close(fd)
            return False
        self.fds[seg] = fd
        return True

    def _ttl_snapshot_path(self) -> str:
        return os.path.join(self.msgs_dir, TTL_SNAPSHOT)

    def _write_ttl_snapshot(self) -> None:
        """At a clean stop: the TTL schedule of the live messages, so that the next start
        reads no headers but those of the messages stored after it."""
        path = self._ttl_snapshot_path()
        if self.cipher is not None or not getattr(self.cfg, "allow_msg_ttl", False):
            return
        live = self.idx.__contains__
        heap = [(expires, seq) for expires, seq in self.ttls.heap if live(seq)]
        never = [seq for seq in self.ttls.never if live(seq)]
        flat = array("q", [v for entry in heap for v in entry])
        body = _TTL_HEAD.pack(_TTL_MAGIC, _TTL_VERSION, 0, self.last_seq + 1, len(heap), len(never))
        body += flat.tobytes() + array("q", never).tobytes()
        try:
            write_atomic(path, body + _U32.pack(zlib.crc32(body)))
        except OSError as exc:  # the next start reads the headers instead
            log.warning("JetStream: can not write %s: %s", path, exc)

    def _load_ttl_snapshot(self) -> int:
        """The TTLs a clean stop wrote: returns the sequence from which headers must still be
        read (0: no usable snapshot, read them all)."""
        try:
            with open(self._ttl_snapshot_path(), "rb") as f:
                data = f.read()
        except OSError:
            return 0
        if len(data) < _TTL_HEAD.size + 4 or zlib.crc32(data[:-4]) != _U32.unpack_from(data, len(data) - 4)[0]:
            log.warning("JetStream: %s is torn or corrupt: reading the TTLs from the messages", self._ttl_snapshot_path())
            return 0
        magic, version, _, covered, n_heap, n_never = _TTL_HEAD.unpack_from(data, 0)
        if magic != _TTL_MAGIC or version != _TTL_VERSION or \
                len(data) != _TTL_HEAD.size + 8 * (2 * n_heap + n_never) + 4:
            return 0
        values = array("q")
        values.frombytes(data[_TTL_HEAD.size : -4])
        if sys.byteorder != "little":
            values.byteswap()
        idx = self.idx
        flat = values[: 2 * n_heap]
        entries = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2) if flat[i + 1] in idx]
        self.ttls.add_many(entries)
        self.ttls.never.update(seq for seq in values[2 * n_heap :] if seq in idx)
        return covered

    def _recover_ttls(self, hdr_lists: dict[int, list[int]]) -> None:
        """The TTLs of the live messages with headers (their Nats-TTL), each segment read
        once: expiry resumes where it was (what is already due goes at the first expiry).
        nats-server keeps a snapshot of its timer wheel (thw.db) and scans what came after
        it; natserver reads the headers of the messages that have some."""
        entries: list[tuple[int, int]] = []
        never = self.ttls.never
        seen: dict[bytes, int] = {}  # header block -> its TTL (messages mostly share a few)
        for seq, ts, hdr in self._headers_of(hdr_lists):
            ttl = seen.get(hdr)
            if ttl is None:
                ttl = header_ttl(hdr)
                if len(seen) < _TTL_READ_WHOLE:
                    seen[hdr] = ttl
            if ttl > 0:
                entries.append((expires_at(ts, ttl), seq))
            elif ttl < 0:
                never.add(seq)
        if entries:
            self.ttls.add_many(entries)

    def _headers_of(self, hdr_lists: dict[int, list[int]]):
        """(seq, timestamp, headers) of the live messages listed (by segment) as having
        headers, in sequence order within a segment, each segment read once (whole when many
        of its messages are wanted)."""
        idx = self.idx
        for seg, seqs in sorted(hdr_lists.items()):
            live = [seq for seq in seqs if seq in idx]
            if not live:
                continue
            whole = len(live) >= _TTL_READ_WHOLE
            data = self._seg_bytes(seg) if whole else b""
            for seq in live:
                offset = idx[seq][4]
                head = data[offset : offset + _MSG_FIXED] if whole else self._seg_read(seg, offset, _MSG_FIXED)
                if len(head) < _MSG_FIXED:
                    continue
                _, rtype, rseq, ts, sl, hl, _ = _MSG_HEAD.unpack_from(head, 0)
                if rtype != T_MSG or rseq != seq or not hl:
                    continue
                start = offset + _MSG_FIXED + sl
                yield seq, ts, bytes(data[start : start + hl] if whole else self._seg_read(seg, start, hl))

    def _recover_schedules(self, hdr_lists: dict[int, list[int]]) -> None:
        """The messages with schedule headers (schedule.py), in order, for the stream to
        replay into its scheduler: (seq, timestamp, subject, headers). nats-server keeps a
        snapshot (sched.db) and scans what came after it; natserver reads the headers."""
        idx = self.idx
        found = []
        for seq, ts, hdr in self._headers_of(hdr_lists):
            if b"Nats-Schedule" in hdr:
                found.append((seq, ts, idx[seq][0], hdr))
        found.sort(key=lambda f: f[0])
        self.recovered_schedules = found

    # -- segment index files ----------------------------------------------------------------------

    def _idx_path(self, seg: int) -> str:
        return os.path.join(self.msgs_dir, f"{seg}{INDEX_SUFFIX}")

    def _seal(self) -> None:
        """The active segment is flushed (full, or CHECKPOINT_BYTES more of it written):
        write its index file, covering what is written so far."""
        self.checkpointed = self.flushed
        self._write_seg_index(self.active, self.active_first, self.idx.end - 1, self.active_dels,
                              self.active_hdrs, self.flushed)

    def _write_seg_index(self, seg: int, lo: int, hi: int, dels: list[int], hdrs: list[int], covered: int) -> None:
        """Write ``<seg>.idx``: the index positions of sequences [lo, hi] (the segment's
        messages, dead ones marked), the DEL records the segment holds and the stream state
        it implies, as of its first ``covered`` bytes, with a checksum. Written to a
        temporary name and renamed, never fsynced: a missing, torn or stale file only means
        the segment is read record by record at the next start. Encrypted stores keep none
        (it would hold the subjects in the clear)."""
        if self.cipher is not None or not _INDEX_FILES:
            return
        idx = self.idx
        lo = max(lo, idx.base)
        if idx and lo <= hi:
            ts_a, off_a, size_a, sid_a, table = idx.block(lo, hi)
        else:
            lo = hi = 0
            ts_a, off_a, size_a, sid_a, table = array("q"), array("I"), array("I"), array("I"), {}
        try:
            live, live_bytes, counts = summarize(lo, size_a, sid_a, table.keys())
            first_live = min((f for _, f, _ in counts.values()), default=0)
            tail = []
            for sid, subj in table.items():
                tail.append(_IDX_SUBJ.pack(sid, len(subj), *counts[sid]))
                tail.append(subj)
            tail.append(array("Q", dels).tobytes())
            tail.append(array("Q", hdrs).tobytes())
            tail_bytes = b"".join(tail)
            head = _IDX_HEAD.pack(_IDX_MAGIC, _IDX_VERSION, 0, covered, lo, len(sid_a), len(table),
                                  len(dels), len(hdrs), self.first_seq, self.last_seq, self.last_ts,
                                  max(ts_a) if ts_a else 0, live, live_bytes, first_live,
                                  ts_a[first_live - lo] if first_live else 0, 0)[:-4]
            head += _U32.pack(zlib.crc32(tail_bytes, zlib.crc32(head)))
            body = b"".join([head, ts_a.tobytes(), off_a.tobytes(), size_a.tobytes(), sid_a.tobytes(), tail_bytes])
            path = self._idx_path(seg)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(body)
                f.write(_U32.pack(zlib.crc32(body)))
            os.replace(tmp, path)
        except (OSError, KeyError) as exc:  # (a full disk: the segment is scanned instead)
            log.debug("JetStream: no index file for segment %d of %s: %s", seg, self.path, exc)
            try:
                os.unlink(self._idx_path(seg) + ".tmp")
            except OSError:
                pass

    def _load_seg_index(self, seg: int):
        """``<seg>.idx`` if it is whole and the segment is at least as long as what it covers,
        else None (and removed): (covered length, first, ts, offsets, sizes, subject ids,
        subjects, DELs, sequences of messages with headers, (first_seq, last_seq, last_ts),
        summary); the summary (live messages, their bytes, per subject id (count, first, last))
        is None in a version 2 file."""
        if self.cipher is not None or not _INDEX_FILES:
            return None
        path = self._idx_path(seg)
        try:
            with open(path, "rb") as f:
                n = os.fstat(f.fileno()).st_size
                if len(self._rbuf) < n:  # (one buffer for every file: its pages touched once)
                    self._rbuf = bytearray(n)
                raw = memoryview(self._rbuf)[:n]
                if f.readinto(raw) != n:
                    raise OSError("short read")
        except OSError:
            return None
        try:
            body = raw[:-4]
            if len(raw) < _IDX_HEAD_V2.size + 4 or zlib.crc32(body) != _U32.unpack_from(raw, len(raw) - 4)[0]:
                raise ValueError("checksum")
            magic, version = raw[:4], _U16.unpack_from(raw, 4)[0]
            if magic != _IDX_MAGIC or version not in (2, _IDX_VERSION):
                raise ValueError("version")
            head, subj_struct = (_IDX_HEAD, _IDX_SUBJ) if version == _IDX_VERSION else (_IDX_HEAD_V2, _IDX_SUBJ_V2)
            if len(body) < head.size:
                raise ValueError("length")
            (_, _, _, seg_size, first, count, n_subj, n_dels, n_hdrs, s_first, s_last, s_lts, _max_ts,
             *totals) = head.unpack_from(raw, 0)
            if seg_size > self._seg_len(seg):
                raise ValueError("stale")  # (the segment was cut shorter)
            pos = head.size
            arrays = []  # (their bytes: extend_block copies them into the index's arrays)
            for width in (8, 4, 4, 4):
                arrays.append(body[pos : pos + width * count])
                pos += width * count
            table = {}
            counts = {}
            for _ in range(n_subj):
                sid, sl, *sums = subj_struct.unpack_from(raw, pos)
                pos += subj_struct.size
                table[sid] = bytes(body[pos : pos + sl])
                counts[sid] = tuple(sums)
                pos += sl
            seg_dels = array("Q")
            seg_dels.frombytes(body[pos : pos + 8 * n_dels])
            pos += 8 * n_dels
            seg_hdrs = array("Q")
            seg_hdrs.frombytes(body[pos : pos + 8 * n_hdrs])
            if pos + 8 * n_hdrs != len(body) or len(arrays[3]) != 4 * count:
                raise ValueError("length")
            summary: tuple
            if version == _IDX_VERSION:
                if totals[0] != sum(c for c, _, _ in counts.values()) or totals[0] > count:
                    raise ValueError("summary")
                summary = (totals[0], totals[1], counts)
            else:
                size_a, sid_a = array("I"), array("I")
                size_a.frombytes(arrays[2])
                sid_a.frombytes(arrays[3])
                summary = summarize(first, size_a, sid_a)
        except (ValueError, struct.error, OSError, KeyError) as exc:
            log.warning("JetStream: %s: index file not used (%s); reading the segment", path, exc)
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        return seg_size, first, *arrays, table, seg_dels, seg_hdrs, (s_first, s_last, s_lts), summary

    def _resume_writes(self, recovering: bool = False) -> None:
        """Make the store writable: a segment to write to (one could not be created on a full
        disk), the pending records written. A failure leaves the store readable, with werr
        set; the next publish tries again. Raises the OSError unless ``recovering`` (a full
        disk must not keep the stream's acknowledged messages from being served)."""
        try:
            if self.active not in self.fds:
                self._new_segment()
            self.flush()
        except OSError as exc:
            self._write_failed(exc)
            if not recovering:
                raise

    def _disk(self, seg: int, data, offset: int):
        """Bytes between memory and disk: XORed with the segment's keystream when the store is
        encrypted (crypto.py; the same operation both ways), unchanged otherwise."""
        cipher = self.cipher
        return data if cipher is None else cipher.xor(seg, offset, data)

    def _seg_path(self, seg: int) -> str:
        return os.path.join(self.msgs_dir, f"{seg}{SEGMENT_SUFFIX}")

    # -- writing ------------------------------------------------------------------------------

    def _new_segment(self) -> None:
        seg = (self.segs[-1] + 1) if self.segs else 1
        try:
            fd = os.open(self._seg_path(seg), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            self._write_failed(exc)
            raise
        self.segs.append(seg)
        self.fds[seg] = fd
        self._rblock = None  # (a number used before: after a purge of every segment)
        self.live[seg] = 0
        self.active = seg
        self.active_first = self.idx.end  # (its messages: from here on)
        self.active_dels = []
        self.active_hdrs = []
        self.active_cuts = [0]
        self._next_cut = self.chunk_size
        self.active_zchunks = []
        self.flushed = self.checkpointed = 0
        # After the STATE record: DEL records made while no segment could be created.
        self.buf[:0] = _frame_state(self.first_seq, self.last_seq, self.last_ts)
        self.size = len(self.buf)
        self.state_dirty = False
        self.dir_unsynced = True
        self._dirty()

    def _roll(self) -> None:
        self.flush()
        self._seal()
        sealed, cuts, ready = self.active, self.active_cuts, self.active_zchunks
        self._new_segment()
        if getattr(self.cfg, "compression", "none") == "s2":  # (NSQ's and STAN's stores: none)
            self._compress(sealed, cuts, ready)
        self._trim_heap()

    def _cut(self, offset: int) -> None:
        """A record starts at ``offset`` of the active segment, a chunk past the last cut:
        a chunk ends here. With compression on, the chunk just completed is compressed now
        (~16 KiB: tens of microseconds), so that sealing the segment is not one long pause.
        A chunk compressed ahead and then erased in is dropped (_erase) and done again."""
        cuts = self.active_cuts
        assert cuts is not None
        cuts.append(offset)
        self._next_cut = offset + self.chunk_size
        ready = self.active_zchunks
        if getattr(self.cfg, "compression", "none") != "s2":
            return
        # The chunk just completed, and one more behind when some are missing (an erase in
        # this segment, compression switched on while it was written): catching up.
        for _ in range(_CHUNKS_PER_CUT):
            k = len(ready)
            if k >= len(cuts) - 1:
                break
            try:
                ready.extend(compressed.compress_chunks(self._active_bytes(cuts[k], cuts[k + 1]), [0]))
            except OSError:  # (compressed when the segment is sealed)
                break

    def _active_bytes(self, lo: int, hi: int) -> bytes:
        """Plain bytes [lo, hi) of the active segment: on disk, in the buffer, or both."""
        flushed = self.flushed
        if lo >= flushed:
            return bytes(self.buf[lo - flushed : hi - flushed])
        head = self._disk(self.active, os.pread(self.fds[self.active], min(hi, flushed) - lo, lo), lo)
        return head if hi <= flushed else head + bytes(self.buf[: hi - flushed])

    # -- compressed segments (compression s2, compressed.py) --------------------------------------

    def _zpath(self, seg: int) -> str:
        return os.path.join(self.msgs_dir, f"{seg}{compressed.SUFFIX}")

    def _xor(self):
        return self.cipher.xor if self.cipher is not None else None

    def _compress(self, seg: int, cuts: list[int] | None, ready: list | None = None) -> None:
        """Replace the sealed plain segment ``seg`` by its compressed form (``ready``: its
        first chunks, compressed already). A failure (a full disk) leaves it plain, as it
        was (logged)."""
        fd = self.fds.get(seg)
        if fd is None or seg in self.zsegs:
            return
        try:
            length = os.fstat(fd).st_size
            if cuts is None:
                data = self._disk(seg, os.pread(fd, length, 0), 0)
                chunks = compressed.compress_chunks(data, compressed.record_starts(data, self.chunk_size))
            else:
                chunks = list(ready or ())
                lo = cuts[len(chunks)] if len(chunks) < len(cuts) else length
                rest = self._disk(seg, os.pread(fd, length - lo, lo), lo) if length > lo else b""
                chunks += compressed.compress_chunks(rest, [c - lo for c in cuts[len(chunks):]])
            self._write_compressed(seg, compressed.assemble(chunks, self._xor()))
            os.unlink(self._seg_path(seg))
            self.dir_unsynced = True
        except OSError as exc:
            log.warning("JetStream: %s: segment %d left uncompressed: %s", self.path, seg, _os_error_text(exc))

    def _write_compressed(self, seg: int, blob: bytes) -> None:
        """Write ``<seg>.sz`` (temporary name, fsync, rename, directory fsync) with ``blob``
        (compressed.assemble's) and make it the segment's file; raises OSError (nothing
        changed)."""
        path = self._zpath(seg)
        tmp = path + ".tmp"
        try:
            write_atomic(path, blob)
            new_fd = os.open(path, os.O_RDONLY)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:
            z = compressed.ZSegment(new_fd, self._xor())
        except compressed.CorruptSegment as exc:  # (just written: a failing disk)
            os.close(new_fd)
            raise OSError(errno.EIO, f"compressed segment does not check ({exc})", path) from None
        old = self.fds[seg]
        self.fds[seg] = new_fd
        self.zsegs[seg] = z
        self.unsynced.discard(seg)
        os.close(old)
        self._zdrop_cache(seg)

    def _zdrop_cache(self, seg: int) -> None:
        for key in [key for key in self._zcache if key[0] == seg]:
            del self._zcache[key]

    def _zread(self, seg: int, offset: int, n: int) -> bytes:
        """``n`` plain bytes at ``offset`` of a compressed segment, within one chunk (a record
        never spans two): b"" when its chunk is corrupt."""
        z = self.zsegs[seg]
        i = z.chunk_of(offset)
        if i < 0:
            return b""
        key = (seg, i)
        cache = self._zcache
        chunk = cache.get(key)
        if chunk is None:
            chunk = z.read_chunk(i, self._xor())
            if chunk is None:
                log.error("JetStream: %s: chunk %d of segment %d is corrupt", self.path, i, seg)
                return b""
            cache[key] = chunk
            if len(cache) > ZCACHE_CHUNKS:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        start = offset - z.starts[i]
        return chunk[start : start + n]

    def _zerase(self, seg: int, offset: int, rec: bytes) -> None:
        """Erase in a compressed segment: the segment is written again with the record
        replaced (nats-server rewrites a compressed block too)."""
        z = self.zsegs[seg]
        pieces = list(z.pieces(self._xor()))
        if any(data is None for _, data in pieces):
            log.error("JetStream: %s: segment %d has a corrupt chunk: not erased", self.path, seg)
            return
        data = bytearray(b"".join(data for _, data in pieces if data is not None))
        data[offset : offset + len(rec)] = rec
        try:
            self._write_compressed(seg, compressed.build(data, z.cuts(), self._xor()))
        except OSError as exc:  # the DEL record still removes it
            log.error("JetStream: %s: erasing in segment %d failed: %s", self.path, seg, _os_error_text(exc))

    def _seg_len(self, seg: int) -> int:
        """The segment's plain length."""
        z = self.zsegs.get(seg)
        return z.length if z is not None else os.fstat(self.fds[seg]).st_size

    def _seg_read(self, seg: int, offset: int, n: int) -> bytes:
        if seg in self.zsegs:
            return self._zread(seg, offset, n)
        return self._disk(seg, os.pread(self.fds[seg], n, offset), offset)

    def _seg_pieces(self, seg: int) -> list:
        """The whole segment as (plain offset, bytes or None for a corrupt chunk) pieces."""
        z = self.zsegs.get(seg)
        if z is not None:
            return list(z.pieces(self._xor()))
        fd = self.fds[seg]
        return [(0, self._disk(seg, os.pread(fd, os.fstat(fd).st_size, 0), 0))]

    def _seg_bytes(self, seg: int) -> bytes:
        """The whole plain segment (a corrupt chunk's bytes as zeros: its records do not check)."""
        pieces = self._seg_pieces(seg)
        if len(pieces) == 1 and pieces[0][1] is not None:
            return pieces[0][1]
        out = bytearray(self._seg_len(seg))
        for base, data in pieces:
            if data is not None:
                out[base : base + len(data)] = data
        return bytes(out)

    def _trim_heap(self) -> None:
        """Give the heap pages freed by the index arrays' growth back (glibc malloc_trim):
        growing arrays are moved by realloc, and the holes they leave stayed resident
        (1 M messages of 16 B: 37.6 B of RSS a message without, 29.5 with, the arrays
        holding ~24; ~1.3 ms a trim). Only after TRIM_AFTER_POSITIONS more positions."""
        grown = len(self.idx.sid) if isinstance(self.idx, MsgIndex) else 0
        if _TRIM is not None and abs(grown - self._trimmed_at) >= TRIM_AFTER_POSITIONS:
            self._trimmed_at = grown
            _TRIM(0)

    def _dirty(self) -> None:
        if self.notify is not None:
            self.notify(self)

    def _append(self, seq, ts, subj, hdr, msg):
        sl, hl, ml = len(subj), len(hdr), len(msg)
        total = _OVERHEAD + sl + hl + ml
        try:
            if self.werr is not None:
                self._resume_writes()
            if self.size + total > self.segment_size and self.size > 64:
                self._roll()
        except OSError as exc:
            raise StoreWriteError(_os_error_text(exc)) from None
        # One record, one checksum: a join and a crc32 cost less than one call per part.
        record = b"".join((_MSG_HEAD.pack(total - 8, T_MSG, seq, ts, sl, hl, ml), subj, hdr, msg))
        buf = self.buf
        if not buf:
            self._dirty()
        buf += record
        buf += _U32.pack(zlib.crc32(record))
        offset = self.size
        if offset >= self._next_cut:  # (a place where a compressed chunk may start)
            self._cut(offset)
        self.size += total
        seg = self.active
        self.live[seg] += 1
        if hl:
            self.active_hdrs.append(seq)
        size = total - 1 if hl else total - 5  # (_msg_size: see _record)
        # (the index's own method: its __setitem__ would cost a slot call and an entry tuple)
        self.idx.add(seq, subj, ts, seg, offset, size)
        return size

    def remove_msg(self, seq: int, erase: bool = False) -> bool:
        # nats-server's file store: errors outside [first, last] (false for a gap inside).
        if seq == 0 or (not self.closed and not self.first_seq <= seq <= self.last_seq):
            raise StoreError(ERR_NOT_FOUND if seq <= self.last_seq else ERR_EOF)
        if self.werr is not None:  # nothing changes while the disk refuses (fs.werr)
            try:
                self._resume_writes()
            except OSError as exc:
                raise StoreWriteError(_os_error_text(exc)) from None
        return super().remove_msg(seq, erase)

    def _record(self, seq: int, seg: int, offset: int, size: int) -> bytes | None:
        """The message's whole MSG record, checked (None: corrupt). The index keeps its
        size, not its length: the record is size + 1 bytes with headers, size + 5 without
        (see _msg_size), so size + 5 bytes are read and the record's own length cuts them."""
        want = size + 5
        if seg == self.active and offset >= self.flushed:
            start = offset - self.flushed
            rec = bytes(self.buf[start : start + want])
        elif seg in self.zsegs:
            rec = self._zread(seg, offset, want)
        else:
            rec = self._read_ahead(seg, offset, want)
        if len(rec) >= _OVERHEAD:
            total = _U32.unpack_from(rec, 0)[0] + 8
            if total <= len(rec) and zlib.crc32(memoryview(rec)[: total - 4]) == _U32.unpack_from(rec, total - 4)[0] \
                    and rec[4] == T_MSG and _MSG_BODY.unpack_from(rec, 5)[0] == seq:
                return rec if total == len(rec) else rec[:total]
        log.error("JetStream: message %d in %s is corrupt; not served", seq, self.path)
        return None

    def _read_ahead(self, seg: int, offset: int, want: int) -> bytes:
        """``want`` bytes at ``offset`` of a plain segment (what is written of the active one),
        from the block read last when it holds them, else from a new block of READ_AHEAD."""
        block = self._rblock
        if block is not None and block[0] == seg and block[1] <= offset \
                and offset + want <= block[1] + len(block[2]):
            start = offset - block[1]
            return block[2][start : start + want]
        try:
            data = os.pread(self.fds[seg], max(want, READ_AHEAD), offset)
        except (OSError, KeyError):
            return b""
        if seg == self.active and offset + len(data) > self.flushed:
            data = data[: max(self.flushed - offset, want)]  # (past it: a torn write, not kept)
        data = self._disk(seg, data, offset)
        self._rblock = (seg, offset, data, memoryview(data))  # (the view: _load's checksums)
        return data[:want]

    def _read(self, seq, entry):
        rec = self._record(seq, entry[3], entry[4], entry[2])
        if rec is None:
            return None
        _, _, sl, hl, ml = _MSG_BODY.unpack_from(rec, 5)
        start = _MSG_FIXED + sl
        return rec[start : start + hl], rec[start + hl : start + hl + ml]

    def load_msg(self, seq: int) -> StoredMsg | None:
        # Straight from the arrays (no entry tuple): the read by sequence is the hot one.
        idx = self.idx
        i = seq - idx.base
        if i < 0 or i >= len(idx.sid):
            return None
        sid = idx.sid[i]
        if sid == DEAD:
            return None
        return self._load(seq, idx.subjects[sid], idx.seg[i], idx.off[i], idx.size[i])

    def _load(self, seq: int, subject: bytes, seg: int, off: int, size: int) -> StoredMsg | None:
        """Message ``seq`` from its record, checked as _record checks it: cut in place from the
        block read last when the record is in it (a KV get's key, a consumer's batch), where
        _record copies it out first; else _record's (None: corrupt, logged there)."""
        want = size + 5
        block = self._rblock
        if block is not None and block[0] == seg and 0 <= off - block[1] <= len(block[2]) - want \
                and not (seg == self.active and off >= self.flushed) and seg not in self.zsegs:
            rec, p = block[2], off - block[1]
            # (the record's head in one unpack; its checksum over a copy of a small one, else
            # over the block's view: _CRC_COPY_MAX)
            n, kind, mseq, ts, sl, hl, ml = _MSG_HEAD.unpack_from(rec, p)
            total = n + 8
            if _OVERHEAD <= total <= want and kind == T_MSG and mseq == seq \
                    and zlib.crc32(rec[p : p + total - 4] if total <= _CRC_COPY_MAX else block[3][p : p + total - 4]) \
                    == _U32.unpack_from(rec, p + total - 4)[0]:
                at = p + _MSG_FIXED + sl
                return StoredMsg(subject, seq, rec[at : at + hl], rec[at + hl : at + hl + ml], ts)
            # (corrupt: _record reads the same bytes, logs it and answers None)
        read = self._record(seq, seg, off, size)
        if read is None:
            return None
        _, ts, sl, hl, ml = _MSG_BODY.unpack_from(read, 5)
        at = _MSG_FIXED + sl
        return StoredMsg(subject, seq, read[at : at + hl], read[at + hl : at + hl + ml], ts)

    def load_next_msgs(self, filter: bytes, start: int, limit: int) -> list[StoredMsg]:
        # Store.load_next_msgs straight from the arrays: a message that is live and matches
        # (most often the next one) is read at once, next_seq looks for the others.
        out: list[StoredMsg] = []
        if start < self.first_seq:
            start = self.first_seq
        last = self.last_seq
        match = compile_filter(filter)
        idx = self.idx
        sids, segs, offs, sizes, subjects = idx.sid, idx.seg, idx.off, idx.size, idx.subjects
        load = self._load
        seq = start
        while len(out) < limit and seq <= last:
            i = seq - idx.base
            sid = sids[i] if idx.head <= i < len(sids) else DEAD
            if sid == DEAD or (match is not None and not match(subjects[sid])):
                seq = self.next_seq(filter, seq)
                if not seq:
                    break
                i = seq - idx.base
                sid = sids[i]
            msg = load(seq, subjects[sid], segs[i], offs[i], sizes[i])
            if msg is None:
                break  # (a corrupt record: the general path meets it, load_msg answers None)
            out.append(msg)
            seq += 1
        return out

    def _remove(self, seq, erase=False, report=True):
        # Store._remove in one frame, on the index's arrays: a KV put's replaced value, a
        # limit's oldest message, a delete. The general way (an erase) builds an entry tuple and
        # takes four calls (MsgIndex.pop, _advance_first, _dropped, its log), ~8k instructions.
        idx = self.idx
        sids = idx.sid
        i = seq - idx.base
        if erase or not idx.head <= i < len(sids):
            return super()._remove(seq, erase, report)  # (out of range: pop answers None there)
        sid = sids[i]
        if sid == DEAD:
            return False
        subj = idx.subjects[sid]
        fss = self.fss
        ss = fss[subj]
        n = ss[0]
        if n == 1:
            del fss[subj]
            idx._release(sid)
        else:
            idx.refs[sid] -= 1  # (n >= 2: the subject keeps its id)
            ss[0] = n - 1
            if n == 2:  # one left, the other end (a KV key's history of 1 replaced)
                ss[1] = ss[2] = ss[2] if seq == ss[1] else ss[1]
            elif seq == ss[1]:
                ss[1] = self._next_of(subj, seq + 1, ss[2])
            elif seq == ss[2]:
                ss[2] = self._prev_of(subj, seq - 1, ss[1])
        sids[i] = DEAD
        sizes, segs = idx.size, idx.seg
        seg = segs[i]
        self.bytes -= sizes[i]
        sizes[i] = 0  # (MsgIndex.pop's: sum(size) the live bytes, segments only of live messages)
        segs[i] = 0
        idx.live -= 1
        self.msgs -= 1
        self.live[seg] -= 1
        if seq == self.first_seq:
            j = i + 1
            if i == idx.head and j < len(sids) and sids[j] != DEAD and j < _TRIM_AT:
                # (the next message is live: the new first, MsgIndex._advance_head's result)
                idx.head = j
                self.first_seq = seq + 1
                self.first_ts = idx.ts[j]
            else:
                if i == idx.head:
                    idx._advance_head()
                self._advance_first(seq)
            if not self.state_dirty:  # (else the state record to come already says it)
                self._log_removal(seq)
        else:
            if i == idx.head:
                idx._advance_head()
            self._log_removal(seq)
        if report and self.removal_listeners and self.on_remove is not None:
            self.on_remove(seq, subj)
        return True

    def _dropped(self, seq, entry, erase):
        seg = entry[3]
        self.live[seg] -= 1
        if erase:
            self._erase(seq, entry)
        self._log_removal(seq)

    def _log_removal(self, seq: int) -> None:
        """Message ``seq`` is gone (first_seq updated): a removal of the first one is kept by
        the next state record, any other by a DEL record."""
        if seq < self.first_seq:
            if not self.state_dirty:
                self.state_dirty = True
                if not self.buf:
                    self._dirty()
        else:
            if not self.buf:
                self._dirty()
            self.buf += _frame_del(seq)
            self.size += 17
            self.active_dels.append(seq)

    def _erase(self, seq, entry) -> None:
        """Overwrite the message's subject, header and data with random bytes in place."""
        ts, seg, offset = entry[1], entry[3], entry[4]
        old = self._record(seq, seg, offset, entry[2])
        self._rblock = None  # (its bytes change)
        if old is None:
            return  # (unreadable: nothing to erase)
        _, _, sl, hl, ml = _MSG_BODY.unpack_from(old, 5)
        total = len(old)
        head = _MSG_HEAD.pack(total - 8, T_ERASED, seq, ts, sl, hl, ml)
        body = head + os.urandom(sl + hl + ml)
        rec = body + _U32.pack(zlib.crc32(body))
        if seg == self.active and self.active_cuts is not None:  # (chunks compressed ahead: from here on stale)
            del self.active_zchunks[max(bisect_right(self.active_cuts, offset) - 1, 0):]
        if seg == self.active and offset >= self.flushed:
            start = offset - self.flushed
            self.buf[start : start + total] = rec
        else:
            # Its segment's index file would say the record is a message: gone (written
            # again at the next checkpoint or read record by record at the next start).
            try:
                os.unlink(self._idx_path(seg))
            except OSError:
                pass
            if seg == self.active:
                self.checkpointed = 0
            if seg in self.zsegs:
                self._zerase(seg, offset, rec)
                return
            fd = self.fds.get(seg)
            if fd is not None:
                try:
                    _write_all(fd, self._disk(seg, rec, offset), offset)
                except OSError as exc:  # the DEL record still removes it
                    log.error("JetStream: %s: erasing message %d failed: %s", self.path, seq, _os_error_text(exc))
                    return
                self.unsynced.add(seg)

    def _skipped(self, seq):
        self.state_dirty = True
        if not self.buf:
            self._dirty()

    def _purged(self) -> None:
        for seg in self.segs:
            self.live[seg] = 0
        # Every message is gone, those still waiting to be written too (never acknowledged).
        self.buf = bytearray()
        self.state_dirty = False
        self.size = self.flushed
        try:
            self._new_segment()
            self.flush()
        except OSError:
            # A full disk: free the old segments first (all their messages are gone), then
            # write the new segment's STATE record again.
            self._drop_dead_segments()
            self.state_dirty = True  # (in the old segment if no new one could be created)
            self._resume_writes()

    def flush(self) -> None:
        if self.closed:
            return
        if self.active not in self.fds and (self.buf or self.state_dirty):
            self._new_segment()  # none could be created before (a full disk)
        if self.state_dirty:
            self.state_dirty = False
            rec = _frame_state(self.first_seq, self.last_seq, self.last_ts)
            self.buf += rec
            self.size += len(rec)
        if self.buf:
            try:
                # A partial write is written again from the same offset by the next try; a
                # crash before then leaves a torn record that recovery cuts off.
                _write_all(self.fds[self.active], self._disk(self.active, self.buf, self.flushed), self.flushed)
            except OSError as exc:
                self._write_failed(exc)
                raise
            self.flushed += len(self.buf)
            self.buf = bytearray()
            self.unsynced.add(self.active)
            if self.flushed - self.checkpointed >= CHECKPOINT_BYTES:
                self._seal()
            if self.werr is not None:  # (only a write that worked says so)
                log.warning("JetStream: writing %s works again", self.path)
                self.werr = None
                WRITE_FAILING.discard(self)
        if len(self.segs) > 1 and self.live[self.segs[0]] == 0:
            self._drop_dead_segments()

    def _write_failed(self, exc: OSError) -> None:
        """Note a failed write: logged once per failure (nats-server's "Critical write
        error"), not for every retry."""
        if self.werr is None:
            log.error("JetStream: %s: critical write error: %s", self.path, _os_error_text(exc))
        self.werr = exc
        WRITE_FAILING.add(self)

    def _drop_dead_segments(self) -> None:
        """Delete the oldest segments while all their messages are gone. Only from the front:
        a DEL record in a segment may refer to a message in an older one."""
        while len(self.segs) > 1 and self.segs[0] != self.active and self.live[self.segs[0]] == 0:
            seg = self.segs.pop(0)
            os.close(self.fds.pop(seg))
            self._rblock = None
            self.live.pop(seg, None)
            self.unsynced.discard(seg)
            if self.zsegs.pop(seg, None) is not None:
                self._zdrop_cache(seg)
            for path in (self._idx_path(seg), self._zpath(seg), self._seg_path(seg)):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            self.dir_unsynced = True

    def sync_targets(self) -> tuple[list[int], str | None]:
        """Duplicates of the descriptors to fsync (the caller closes them) and the directory
        to fsync, for a sync in a worker thread; resets the unsynced marks (sync_failed sets
        them again)."""
        segs = [seg for seg in self.unsynced if seg in self.fds]
        fds = [os.dup(self.fds[seg]) for seg in segs]
        self.unsynced.clear()
        directory = self.msgs_dir if self.dir_unsynced else None
        self.dir_unsynced = False
        self._syncing = segs
        return fds, directory

    def sync_failed(self) -> None:
        """The fsync of the last sync_targets failed: what it covered is unsynced again (and
        the acks waiting for it are not sent)."""
        self.unsynced.update(seg for seg in self._syncing if seg in self.fds)
        self.dir_unsynced = True

    def sync_now(self) -> None:
        """fsync in the calling thread (API operations with sync always; shutdown); raises
        OSError when an fsync failed."""
        fds, directory = self.sync_targets()
        if not sync_all(fds, directory):
            self.sync_failed()
            raise OSError(errno.EIO, "fsync failed", self.msgs_dir)

    def stop(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
            self.sync_now()
        except OSError as exc:
            log.error("JetStream: closing %s: %s", self.path, exc)
        if self.werr is None:
            self._write_ttl_snapshot()
        self.closed = True
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def delete(self) -> None:
        """Stop and remove the stream's directory (renamed away first, so a crash midway
        never leaves a half-deleted stream that would be recovered)."""
        self.closed = True
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        parent = os.path.dirname(self.path)
        trash = os.path.join(parent, f".deleted-{os.path.basename(self.path)}-{os.urandom(4).hex()}")
        try:
            os.rename(self.path, trash)
        except OSError:
            trash = self.path
        shutil.rmtree(trash, ignore_errors=True)


class _LoadingFileStore(FileStore):
    """A FileStore recovered from its index files' summaries while its index is being read
    (FileStore._recover_summary, load_step): the index is built on first need, whatever uses it
    waiting for the rest of the arrays. A class of its own, swapped back once the index is
    there: a __getattr__ on FileStore itself would keep CPython from specializing every
    attribute access of the store (~30 % more time a stored message)."""

    def __getattr__(self, name: str):
        if name == "idx" and self.__dict__.get("_deferred"):
            while self.load_step():
                pass
            return self.__dict__["idx"]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def flush_for_sync(stores, label: str) -> list:
    """Write each open store's buffered records and return what to fsync (see sync_many),
    logging a store that fails (``label`` names the subsystem in that line)."""
    targets = []
    for store in stores:
        if store.closed:
            continue
        try:
            store.flush()
            targets.append(store.sync_targets())
        except OSError as exc:
            log.error("%s: syncing %s failed: %s", label, store.path, exc)
    return targets


def sync_many(targets: list) -> list[bool]:
    """fsync what flush_for_sync returned: runs in a worker thread (group commit). Returns,
    for each target, whether all of it was synced."""
    return [sync_all(fds, directory) for fds, directory in targets]


def sync_all(fds: list[int], directory: str | None) -> bool:
    """fsync (and close) descriptor duplicates, then the directory: runs in a worker thread.
    False when one of them failed (logged)."""
    ok = True
    try:
        for fd in fds:
            try:
                os.fsync(fd)
            except OSError as exc:
                log.error("JetStream: fsync failed: %s", exc)
                ok = False
        if directory is not None:
            try:
                _fsync_dir(directory)
            except OSError as exc:
                log.error("JetStream: fsync of %s failed: %s", directory, exc)
                ok = False
    finally:
        for fd in fds:
            os.close(fd)
    return ok


def _check_record(view: memoryview, pos: int, n: int) -> tuple[bool, int]:
    """(valid, total length or 0 if the length itself is impossible) of the record at pos."""
    if n - pos < 9:
        return False, 0
    length = _U32.unpack_from(view, pos)[0]
    total = length + 8
    if length < 1 or pos + total > n:
        return False, 0
    if zlib.crc32(view[pos : pos + 4 + length]) != _U32.unpack_from(view, pos + 4 + length)[0]:
        return False, total
    rtype = view[pos + 4]
    if rtype in (T_MSG, T_ERASED):
        if length < 27:
            return False, total
        sl, hl, ml = struct.unpack_from("<HII", view, pos + 21)
        if 27 + sl + hl + ml != length:
            return False, total
    elif rtype == T_DEL:
        if length != 9:
            return False, total
    elif rtype == T_STATE:
        if length != 25:
            return False, total
    else:
        return False, total
    return True, total
