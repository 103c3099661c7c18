"""A stream group's follower side, sans-IO: its committed entries applied to natserver's own
store (store.py), as jetstream_cluster.go applyStreamEntries / applyStreamMsgOp and
stream.go processJetStreamMsg apply them; its snapshot taken and installed
(processSnapshot); the messages of a catch-up applied (processCatchupMsg).

:class:`StreamApplier` holds the store and the replicated counters nats-server keeps beside
it: ``clfs`` (the proposals the leader counted as failed, so that the next proposal's last
sequence still lines up) and ``skipped`` (proposals whose last sequence is behind the store's:
already applied). A proposal whose last sequence is ahead of the store plus clfs is a gap: the
follower has missed entries, :class:`SequenceMismatch` is raised (nats-server resets the stream
and catches up).

Not applied (kept for the stream layer when it is wired): message TTLs, counters, rollups,
expected-sequence headers, subject transforms, mirror/source positions, updateStreamOp (the
stream's configuration is the meta group's); see GROUPS.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...raft.wire import Entry, EntryType
from ..store import Store, StoreError
from ..util import dumps, get_header, remove_header
from .group_codec import (
    BatchMsg,
    CodecError,
    DeleteBlock,
    JsonOp,
    Op,
    StreamMsg,
    StreamState,
    decode_stream_op,
)

__all__ = ["SequenceMismatch", "StreamApplier", "StreamLeader", "SyncRequest"]

MSG_ID_HDR = b"Nats-Msg-Id"  # stream.go JSMsgId
CLIENT_INFO_HDR = b"Nats-Request-Info"  # client.go ClientInfoHdr: removed before storing
DEFAULT_DUPLICATE_WINDOW = 120_000_000_000  # stream.go StreamDefaultDuplicatesWindow (2 min, ns)
FLOW_CONTROL_PREFIX = b"NATS/1.0 100 "  # stream.go isControlHdr: flow control and heartbeats


class SequenceMismatch(Exception):
    """stream.go errLastSeqMismatch: a proposal made after entries this store has not seen."""


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """jetstream_cluster.go streamSyncRequest: what a follower asks the leader for after a
    snapshot (on the stream assignment's sync subject): the messages from first_seq to
    last_seq."""

    peer: str
    first_seq: int
    last_seq: int
    min_applied: int
    delete_ranges: bool = True

    def encode(self) -> bytes:
        body: dict[str, object] = {"first_seq": self.first_seq, "last_seq": self.last_seq, "delete_ranges": self.delete_ranges,
                "min_applied": self.min_applied}
        if self.peer:
            body = {"peer": self.peer, **body}
        return dumps(body)


class StreamApplier:
    """Applies a stream group's committed entries to ``store``."""

    def __init__(self, store: Store, duplicate_window: int = DEFAULT_DUPLICATE_WINDOW) -> None:
        self.store = store
        self.duplicate_window = duplicate_window
        # How a committed message is stored (subject, headers, payload, time -> its sequence;
        # StoreError: refused): the store's own, or the stream's (its TTLs, roll-ups, consumers).
        self.store_fn: Callable[[bytes, bytes, bytes, int], int] = store.store_msg
        self.clfs = 0  # stream.go clfs: proposals that failed on apply (counted by every peer)
        self.skipped = 0  # proposals already applied (their last sequence behind the store's)
        self.msg_ids: dict[bytes, tuple[int, int]] = {}  # Nats-Msg-Id -> (seq, ts): the dedup window
        self._batch_id = b""
        self._batch: list[StreamMsg] = []
        # The leader answers the publishes it applies (canRespond): (reply, sequence) of each
        # message stored with a reply while ``respond`` is set; StreamLeader takes them.
        self.respond = False
        self.stored: list[tuple[bytes, int, bytes, int]] = []  # reply, seq, batch id, batch size
        # A counter stream's leader answers each increment with its total (PubAck.Value): the
        # stored body, {"val":"<total>"}, of each answered sequence (taken by the caller).
        self.counter = False
        self.values: dict[int, bytes] = {}
        # What a snapshot entry applied asks of the leader (install_snapshot), for the caller.
        self.sync_request: SyncRequest | None = None

    # -- entries ------------------------------------------------------------------------------

    def apply(self, entry: Entry) -> None:
        """One committed entry: a Normal one is an op; a Snapshot is the leader's state (a
        follower that installs one catches the messages up separately: install_snapshot)."""
        if entry.type == EntryType.NORMAL:
            self.apply_op(decode_stream_op(entry.data))
        elif entry.type == EntryType.SNAPSHOT:
            self.sync_request = self.install_snapshot(StreamState.decode(entry.data), "", 0)
        else:
            self._reject_batch()  # applyStreamEntries: a non-Normal entry ends a batch

    def apply_op(self, op: StreamMsg | BatchMsg | JsonOp) -> None:
        if isinstance(op, BatchMsg):
            self._apply_batch(op)
            return
        if self._batch_id:
            self._reject_batch()
        if isinstance(op, StreamMsg):
            self.apply_msg(op)
        elif op.op == Op.PURGE_STREAM:
            self._purge(op.body)
        elif op.op == Op.DELETE_MSG:
            self._remove(int(op.body.get("seq", 0)), not op.body.get("no_erase", False))
        elif op.op == Op.DELETE_RANGE:
            self._delete_range(op.body)
        # updateStreamOp: the configuration is applied by the stream layer (not here)

    def apply_msg(self, msg: StreamMsg) -> bool:
        """applyStreamMsgOp: True when the message was stored."""
        if not msg.msg and msg.hdr and msg.reply and msg.hdr.startswith(FLOW_CONTROL_PREFIX):
            return False  # a flow control reply: answered by the leader, never stored
        last = self.store.last_seq
        if msg.lseq - self.clfs < last:
            self.skipped += 1
            return False
        if msg.lseq == 0 and last != 0:
            return False
        if not msg.subject and msg.ts == 0 and not msg.msg and not msg.hdr:
            self.store.skip_msg(0)
            return False
        return self._process(msg)

    def _process(self, msg: StreamMsg) -> bool:
        """processJetStreamMsg, the part a follower runs."""
        store = self.store
        if msg.lseq != store.last_seq + self.clfs:
            if store.last_seq == 0 and store.first_seq == 0:
                store.compact(msg.lseq + 1)  # an empty store takes the leader's position
            else:
                raise SequenceMismatch(f"last sequence mismatch: {msg.lseq} != {store.last_seq} + {self.clfs}")
        hdr = msg.hdr
        if hdr:
            hdr = remove_header(hdr, CLIENT_INFO_HDR) or b""
        msg_id = get_header(MSG_ID_HDR, hdr) if hdr else b""
        if msg_id:
            seen = self.msg_ids.get(msg_id)
            if seen is not None and msg.ts - seen[1] < self.duplicate_window:
                self.clfs += 1
                return False
        try:
            seq = self.store_fn(msg.subject, hdr, msg.msg, msg.ts)
        except StoreError:
            self.clfs += 1
            return False
        if msg_id:
            self._remember(msg_id, seq, msg.ts)
        if self.respond and msg.reply:
            self.stored.append((msg.reply, seq, b"", 0))
            if self.counter:
                self.values[seq] = msg.msg
        return True

    def _remember(self, msg_id: bytes, seq: int, ts: int) -> None:
        """The id in the dedup window; ids older than the window forgotten (the dict is in
        the order they came, so the oldest are first: amortized constant work)."""
        self.msg_ids.pop(msg_id, None)
        self.msg_ids[msg_id] = (seq, ts)
        ids = self.msg_ids
        while ids:
            oldest = next(iter(ids))
            if ts - ids[oldest][1] < self.duplicate_window:
                break
            del ids[oldest]

    def _apply_batch(self, op: BatchMsg) -> None:
        """applyStreamEntries' batch: messages held until the commit (sequence 1 starts a
        batch; a gap, another id or a non-batch entry drops it)."""
        if op.batch_seq == 1 or (self._batch_id and op.batch_id != self._batch_id):
            self._reject_batch()
        self._batch_id = op.batch_id
        if op.batch_seq != len(self._batch) + 1:
            self._reject_batch()
            return
        self._batch.append(op.msg)
        if op.commit:
            batch, self._batch, self._batch_id = self._batch, [], b""
            respond, self.respond = self.respond, False  # only the commit is answered
            try:
                for msg in batch[:-1]:
                    self.apply_msg(msg)
            finally:
                self.respond = respond
            if self.apply_msg(batch[-1]) and self.stored and self.stored[-1][1] == self.store.last_seq:
                reply, seq, _, _ = self.stored[-1]
                self.stored[-1] = (reply, seq, op.batch_id, len(batch))

    def _reject_batch(self) -> None:
        self._batch, self._batch_id = [], b""

    def _remove(self, seq: int, erase: bool) -> None:
        """removeMsg / eraseMsg: a sequence not there is the requester's error (answered by
        the leader), not the group's."""
        try:
            self.store.remove_msg(seq, erase=erase)
        except StoreError:
            pass

    def _purge(self, body: dict) -> None:
        """stream.go purge: no request (or an empty one) purges all."""
        request = body.get("request") or {}
        subject = str(request.get("filter", "")).encode()
        seq, keep = int(request.get("seq", 0)), int(request.get("keep", 0))
        try:
            if not subject and not seq and not keep:
                self.store.purge()
            else:
                self.store.purge_ex(subject, seq, keep)
        except StoreError:
            pass  # a request the leader should have refused (seq and keep): nothing purged

    def _delete_range(self, body: dict) -> None:
        """deleteRangeOp (a catch-up's gap): SkipMsgs(first, num)."""
        first, num = int(body.get("First", 0)), int(body.get("Num", 0))
        if num and first + num - 1 > self.store.last_seq:
            self.store.skip_to(first + num - 1, 0)

    # -- catch-up -----------------------------------------------------------------------------

    def apply_catchup(self, data: bytes) -> None:
        """A message of a catch-up ($JSC.R.<...>, the answer to a SyncRequest), as
        processCatchupMsg stores it: a streamMsgOp whose ``lseq`` is the message's own
        sequence (the sequences between skipped; an empty subject and time: a skipped
        sequence), or a deleteRangeOp."""
        op = decode_stream_op(data)
        if isinstance(op, JsonOp) and op.op == Op.DELETE_RANGE:
            self._delete_range(op.body)
            return
        if not isinstance(op, StreamMsg):
            raise CodecError("a catch-up message is a stream msg or a delete range")
        seq, store = op.lseq, self.store
        if seq <= store.last_seq:
            return  # already here (nats-server: errCatchupWrongSeqForSkip / a store error)
        if not op.subject and op.ts == 0:
            store.skip_to(seq, 0)
            return
        if seq > store.last_seq + 1:
            store.skip_to(seq - 1, 0)
        store.store_msg(op.subject, op.hdr, op.msg, op.ts)
        msg_id = get_header(MSG_ID_HDR, op.hdr) if op.hdr else b""
        if msg_id:
            self._remember(msg_id, seq, op.ts)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> StreamState:
        """stateSnapshot: the store's state as the binary snapshot (deleted sequences as one
        run each, as filestore's deleteBlocks writes the gaps between its blocks)."""
        store = self.store
        deleted = store.deleted()
        blocks: list[DeleteBlock] = []
        for seq in deleted:
            if blocks and blocks[-1].first + blocks[-1].count == seq:
                blocks[-1] = DeleteBlock(blocks[-1].first, blocks[-1].count + 1)
            else:
                blocks.append(DeleteBlock(seq, 1))
        return StreamState(store.msgs, store.bytes, store.first_seq, store.last_seq, self.clfs, len(deleted),
                           tuple(blocks))

    def install_snapshot(self, state: StreamState, peer: str, index: int) -> SyncRequest | None:
        """processSnapshot: drop what is below the snapshot's first sequence and what it says
        is deleted, take its clfs; the messages after the store's last sequence are to be
        fetched (the SyncRequest returned, None when there are none)."""
        store = self.store
        self._reject_batch()
        if state.first_seq > store.first_seq:
            store.compact(state.first_seq)
        for block in state.deleted:
            if block.nodes is None:  # a run: only what this store holds of it (bounded by the store)
                for seq in range(max(block.first, store.first_seq), min(block.first + block.count, store.last_seq + 1)):
                    self._remove(seq, False)
            else:  # a sequence set: bounded by its encoded size
                for seq in block.seqs():
                    if store.first_seq <= seq <= store.last_seq:
                        self._remove(seq, False)
        self.clfs = state.failed
        if store.last_seq >= state.last_seq:
            return None
        return SyncRequest(peer, store.last_seq + 1, state.last_seq, index)


class StreamLeader:
    """The stream leader's side of a publish, sans-IO (jetstream_cluster.go
    processClusteredInboundMsg): ``propose`` turns it into the entry to propose, with the last
    sequence the leader has proposed so far (``clseq``, never below the store's last plus
    clfs); a duplicate message id (applied or in flight) is answered at once and not
    proposed. The publish is acknowledged only once its entry is committed and applied by the
    leader's own ``applier``: ``take_acks`` then gives the PubAcks."""

    def __init__(self, name: str, applier: StreamApplier) -> None:
        self.name = name
        self.applier = applier
        applier.respond = True
        self.clseq = 0
        self.inflight_ids: dict[bytes, int] = {}  # msg id -> the sequence it was proposed for
        self._answers: list[tuple[bytes, bytes]] = []

    def propose(self, subject: bytes, reply: bytes, hdr: bytes, msg: bytes, ts: int,
                sourced: bool = False) -> bytes | None:
        """The entry's data to propose, or None (answered already: a duplicate). ``sourced``:
        a message a source brought in (processInboundSourceMsg's processClusteredInboundMsg)."""
        applier = self.applier
        self._floor()
        msg_id = get_header(MSG_ID_HDR, hdr) if hdr else b""
        if msg_id:
            seen = applier.msg_ids.get(msg_id)
            seq = seen[0] if seen is not None and ts - seen[1] < applier.duplicate_window else self.inflight_ids.get(msg_id)
            if seq is not None:
                if reply:
                    self._answers.append((reply, dumps({"stream": self.name, "seq": seq, "duplicate": True})))
                return None
            self.inflight_ids[msg_id] = self.clseq + 1
        entry = StreamMsg.proposal(subject, reply, hdr, msg, self.clseq, ts, sourced).encode()
        self.clseq += 1
        return entry

    def proposed_clseq(self) -> int:
        """The last sequence proposed so far: clseq, never below the store's last sequence plus
        clfs (what is applied already)."""
        applier = self.applier
        return max(self.clseq, applier.store.last_seq + applier.clfs)

    def _floor(self) -> None:
        self.clseq = self.proposed_clseq()

    def propose_mirrored(self, seq: int, subject: bytes, hdr: bytes, msg: bytes, ts: int) -> list[bytes]:
        """A mirror's copy of its origin's message ``seq`` (stream.go processInboundMirrorMsg):
        the entries to propose, first an empty message for each sequence before it not proposed
        yet (skipMsgs: the origin has none there), then the message itself with ``seq - 1`` as
        its last sequence and the origin's time; none when ``seq`` is proposed already. An
        empty ``subject``: only the skips, up to ``seq`` included (the origin has lost them).
        Into an empty mirror the first message goes without skips (an empty store takes the
        proposal's position, as processJetStreamMsg's mirror check: no entry per missing one)."""
        self._floor()
        last = seq if not subject else seq - 1
        start = last + 1 if subject and self.clseq == 0 else self.clseq + 1
        entries = [StreamMsg(b"", b"", b"", b"", s - 1, 0).encode() for s in range(start, last + 1)]
        self.clseq = max(self.clseq, last)
        if subject and seq > self.clseq:
            entries.append(StreamMsg.proposal(subject, b"", hdr, msg, seq - 1, ts, sourced=True).encode())
            self.clseq = seq
        return entries

    def propose_batch(self, batch_id: bytes, msgs: list[tuple[bytes, bytes, bytes, bytes]], ts: int) -> list[bytes]:
        """An atomic batch, checked and complete (batch.py's rules run before): its messages
        (subject, reply, headers, payload) as the entries to propose together, in one append
        (encodeStreamMsgAllowCompressAndBatch: batchMsgOp, the last batchCommitMsgOp, one time
        for all, the last sequences consecutive)."""
        self._floor()
        entries = []
        for i, (subject, reply, hdr, msg) in enumerate(msgs, 1):
            inner = StreamMsg.proposal(subject, reply, hdr, msg, self.clseq, ts)
            entries.append(BatchMsg(batch_id, i, i == len(msgs), inner).encode())
            self.clseq += 1
        return entries

    def take_acks(self) -> list[tuple[bytes, bytes]]:
        """(reply, PubAck) for each publish applied since (and each duplicate answered)."""
        applier = self.applier
        for reply, seq, batch_id, size in applier.stored:
            ack: dict[str, object] = {"stream": self.name, "seq": seq}
            if batch_id:  # an atomic batch's commit (stream.go PubAck BatchId, BatchSize)
                ack["batch"], ack["count"] = batch_id.decode("utf-8", "replace"), size
            self._answers.append((reply, dumps(ack)))
        applier.stored.clear()
        for msg_id in [m for m, seq in self.inflight_ids.items() if seq <= applier.store.last_seq]:
            del self.inflight_ids[msg_id]
        answers, self._answers = self._answers, []
        return answers
