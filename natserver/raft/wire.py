"""nats-server's RAFT on the wire (server/raft.go): the frames, the subjects, the names.

Every frame is the payload of a NATS message in the system account, little-endian throughout:

- append entry (``$NRG.AE.<group>``, catch-up ones to a ``$NRG.CR.<inbox>``): leader id (8
  bytes), term, commit, pterm, pindex (u64 each), the entry count (u16), per entry its size
  (u32, the type byte included), its type (u8) and its data; then, optionally, the leader's
  term as a uvarint (``lterm``: older servers ignore trailing bytes, catch-up frames carry it).
- append entry response (to the append entry's reply): term, index (u64), peer id (8), success
  (1 byte, 1 or 0): 25 bytes.
- vote request (``$NRG.V.<group>``, reply the candidate's ``$NRG.R.<inbox>``): term, last
  term, last index (u64), candidate id (8): 32 bytes.
- vote response: term (u64), peer id (8), flags (bit 0 granted, bit 1 the voter's log is
  empty): 17 bytes.
- peer state (an ``EntryPeerState`` entry's data, and the ``peers.idx`` file): cluster size,
  peer count (u32), the peer ids (8 each), the domain extension state (u16).

A node id is 8 characters: the server name's SHA-256, each of the first 8 bytes mapped to one
of 62 digits (events.go getHash). Stream and consumer groups are named
``S-R<replicas><F|M>-<hash>`` / ``C-R...`` (jetstream_cluster.go groupName); the meta group is
``_meta_``. Inboxes are ``$NRG.R.`` (and ``$NRG.CR.`` for a catch-up, ``$NRG.CP.`` for the
leader's catch-up progress in 2.15.1) followed by 8 random base-62 digits.
"""

from __future__ import annotations

import hashlib
import random
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from natserver.protocol.varint import uvarint

__all__ = [
    "APPEND_ENTRY_BASE_LEN", "APPEND_ENTRY_RESPONSE_LEN", "DIGITS", "ID_LEN", "META_GROUP",
    "VOTE_REQUEST_LEN", "VOTE_RESPONSE_LEN", "AppendEntry", "AppendEntryResponse", "Entry",
    "EntryType", "PeerState", "VoteRequest", "VoteResponse", "WireError", "append_subject",
    "catchup_inbox", "classify", "group_name", "inbox", "node_id", "progress_inbox",
    "proposal_subject", "remove_peer_subject", "vote_subject",
]

ID_LEN = 8  # raft.go idLen: a node id, the leader/peer/candidate field of every frame
APPEND_ENTRY_BASE_LEN = ID_LEN + 4 * 8 + 2  # raft.go appendEntryBaseLen
APPEND_ENTRY_RESPONSE_LEN = 24 + 1  # raft.go appendEntryResponseLen
VOTE_REQUEST_LEN = 24 + ID_LEN  # raft.go voteRequestLen
VOTE_RESPONSE_LEN = 8 + 8 + 1  # raft.go voteResponseLen
MAX_ENTRIES = 0xFFFF  # the entry count is a u16 (raft.go errTooManyEntries)
MAX_ENTRY_SIZE = 0x7FFFFFFF  # raft.go: MaxInt32 per entry (errBadAppendEntry)
DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # accounts.go digits
INBOX_SUFFIX_LEN = 8  # events.go replySuffixLen ("Gives us 62^8")
META_GROUP = "_meta_"  # jetstream_cluster.go defaultMetaGroupName

VOTE_PREFIX = "$NRG.V."  # raft.go raftVoteSubj
APPEND_PREFIX = "$NRG.AE."  # raft.go raftAppendSubj
PROPOSAL_PREFIX = "$NRG.P."  # raft.go raftPropSubj: a follower forwards a proposal's data
REMOVE_PEER_PREFIX = "$NRG.RP."  # raft.go raftRemovePeerSubj: a forwarded peer removal (an id)
REPLY_PREFIX = "$NRG.R."  # raft.go raftReply: vote and append entry responses
CATCHUP_PREFIX = "$NRG.CR."  # raft.go raftCatchupReply: a follower's catch-up inbox
PROGRESS_PREFIX = "$NRG.CP."  # 2.15.1 (recorded): the leader's inbox for catch-up acks

_U64 = struct.Struct("<Q")
_HEAD = struct.Struct("<8sQQQQH")
_RESPONSE = struct.Struct("<QQ8sB")
_VOTE_REQUEST = struct.Struct("<QQQ8s")
_VOTE_RESPONSE = struct.Struct("<Q8sB")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


class WireError(ValueError):
    """A frame raft.go would refuse (its errBadAppendEntry, errCorruptPeers, a wrong length)."""


class EntryType(IntEnum):
    """raft.go EntryType, in its order (the byte on the wire)."""

    NORMAL = 0
    OLD_SNAPSHOT = 1
    PEER_STATE = 2
    ADD_PEER = 3
    REMOVE_PEER = 4
    LEADER_TRANSFER = 5
    SNAPSHOT = 6
    CATCHUP = 7  # internal to a server (never sent nor stored): a catch-up started


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: its type (an :class:`EntryType` value; unknown bytes are kept) and data."""

    type: int
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class AppendEntry:
    """raft.go appendEntry: ``leader`` is an 8-byte id or empty (encoded as 8 zero bytes)."""

    leader: str
    term: int
    commit: int
    pterm: int
    pindex: int
    entries: tuple[Entry, ...] = ()
    lterm: int = 0  # the leader's term (2.15.1 sends it always, 0 but on catch-up frames)
    has_lterm: bool = True  # the uvarint is on the wire (not from servers older than lterm)

    def encode(self) -> bytes:
        leader = self.leader.encode()
        if len(leader) not in (0, ID_LEN):
            raise WireError(f"raft: leader should be exactly {ID_LEN} bytes")
        if len(self.entries) > MAX_ENTRIES:
            raise WireError("raft: too many entries")
        parts = [_HEAD.pack(leader.ljust(ID_LEN, b"\0"), self.term, self.commit, self.pterm, self.pindex,
                            len(self.entries))]
        for entry in self.entries:
            if len(entry.data) > MAX_ENTRY_SIZE:
                raise WireError("raft: append entry corrupt")
            parts.append(_U32.pack(1 + len(entry.data)) + bytes((entry.type,)) + entry.data)
        if self.has_lterm:
            parts.append(uvarint(self.lterm))
        return b"".join(parts)

    @classmethod
    def decode(cls, msg: bytes) -> AppendEntry:
        if len(msg) < APPEND_ENTRY_BASE_LEN:
            raise WireError("raft: append entry corrupt")
        leader, term, commit, pterm, pindex, count = _HEAD.unpack_from(msg)
        entries = []
        at, end = APPEND_ENTRY_BASE_LEN, len(msg)
        for _ in range(count):
            if end - at < 4:
                raise WireError("raft: append entry corrupt")
            size = _U32.unpack_from(msg, at)[0]
            at += 4
            if size == 0 or at + size > end:
                raise WireError("raft: append entry corrupt")
            entries.append(Entry(msg[at], bytes(msg[at + 1:at + size])))
            at += size
        lterm = 0
        if at < end:
            lterm, used = read_uvarint(msg, at)
            if used <= 0 or at + used != end:  # raft.go ignores these; a re-encoding would differ
                raise WireError("raft: bytes after the entries are not one uvarint")
        name = "" if leader == b"\0" * ID_LEN else leader.decode()
        return cls(name, term, commit, pterm, pindex, tuple(entries), lterm, at < end)


@dataclass(frozen=True, slots=True)
class AppendEntryResponse:
    term: int
    index: int
    peer: str
    success: bool

    def encode(self) -> bytes:
        return _RESPONSE.pack(self.term, self.index, self.peer.encode().ljust(ID_LEN, b"\0")[:ID_LEN],
                              1 if self.success else 0)

    @classmethod
    def decode(cls, msg: bytes) -> AppendEntryResponse:
        if len(msg) != APPEND_ENTRY_RESPONSE_LEN:
            raise WireError("raft: append entry response of the wrong length")
        term, index, peer, success = _RESPONSE.unpack(msg)
        if success > 1:  # raft.go reads success as ==1; a byte re-encoding would differ
            raise WireError("raft: append entry response's success byte is not 0 or 1")
        return cls(term, index, peer.decode(), success == 1)


@dataclass(frozen=True, slots=True)
class VoteRequest:
    term: int
    last_term: int
    last_index: int
    candidate: str

    def encode(self) -> bytes:
        return _VOTE_REQUEST.pack(self.term, self.last_term, self.last_index,
                                  self.candidate.encode().ljust(ID_LEN, b"\0")[:ID_LEN])

    @classmethod
    def decode(cls, msg: bytes) -> VoteRequest:
        if len(msg) != VOTE_REQUEST_LEN:
            raise WireError("raft: vote request of the wrong length")
        term, last_term, last_index, candidate = _VOTE_REQUEST.unpack(msg)
        return cls(term, last_term, last_index, candidate.decode())


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    peer: str
    granted: bool
    empty: bool = False  # the voter's log is empty (raft.go "empty vote")

    def encode(self) -> bytes:
        return _VOTE_RESPONSE.pack(self.term, self.peer.encode().ljust(ID_LEN, b"\0")[:ID_LEN],
                                   (1 if self.granted else 0) | (2 if self.empty else 0))

    @classmethod
    def decode(cls, msg: bytes) -> VoteResponse:
        if len(msg) != VOTE_RESPONSE_LEN:
            raise WireError("raft: vote response of the wrong length")
        term, peer, flags = _VOTE_RESPONSE.unpack(msg)
        if flags & ~3:
            raise WireError("raft: vote response flags beyond granted|empty")
        return cls(term, peer.decode(), bool(flags & 1), bool(flags & 2))


@dataclass(frozen=True, slots=True)
class PeerState:
    """raft.go peerState: the known peers, the cluster size, the domain extension state."""

    known_peers: tuple[str, ...]
    cluster_size: int
    domain_ext: int = 0
    has_ext: bool = field(default=True, compare=False)  # the u16 was there (always, since 2.10)

    def encode(self) -> bytes:
        parts = [_U32.pack(self.cluster_size), _U32.pack(len(self.known_peers))]
        parts += [peer.encode().ljust(ID_LEN, b"\0")[:ID_LEN] for peer in self.known_peers]
        if self.has_ext:
            parts.append(_U16.pack(self.domain_ext))
        return b"".join(parts)

    @classmethod
    def decode(cls, buf: bytes) -> PeerState:
        if len(buf) < 8:
            raise WireError("raft: corrupt peer state")
        size, count = _U32.unpack_from(buf)[0], _U32.unpack_from(buf, 4)[0]
        if 8 + count * ID_LEN > len(buf):
            raise WireError("raft: corrupt peer state")
        peers = tuple(buf[8 + i * ID_LEN:8 + (i + 1) * ID_LEN].decode() for i in range(count))
        rest = buf[8 + count * ID_LEN:]
        if len(rest) not in (0, 2):
            raise WireError("raft: bytes after the peer state")
        ext = _U16.unpack(rest)[0] if rest else 0
        return cls(peers, size, ext, bool(rest))


def read_uvarint(buf: bytes, at: int) -> tuple[int, int]:
    """Go's binary.Uvarint at ``at``: (value, bytes used); used <= 0 when incomplete or too long."""
    value = shift = 0
    for i in range(at, min(len(buf), at + 10)):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i - at + 1
        shift += 7
    return 0, 0


def classify(subject: str, payload: bytes) -> object:
    """The frame a ``$NRG.>`` message carries, by its subject (replies: by their length)."""
    if subject.startswith((APPEND_PREFIX, CATCHUP_PREFIX)):
        return AppendEntry.decode(payload)
    if subject.startswith(VOTE_PREFIX):
        return VoteRequest.decode(payload)
    if subject.startswith((REPLY_PREFIX, PROGRESS_PREFIX)):
        if len(payload) == VOTE_RESPONSE_LEN:
            return VoteResponse.decode(payload)
        return AppendEntryResponse.decode(payload)
    if subject.startswith(REMOVE_PEER_PREFIX):
        if len(payload) != ID_LEN:
            raise WireError("raft: invalid peer name for remove proposal")
        return payload.decode()
    if subject.startswith(PROPOSAL_PREFIX):
        return Entry(EntryType.NORMAL, bytes(payload))
    raise WireError(f"not a RAFT subject: {subject}")


def _hash_digits(data: bytes, size: int) -> str:
    return bytes(DIGITS[b % len(DIGITS)] for b in data[:size]).decode()


def node_id(server_name: str) -> str:
    """A server's RAFT node id: events.go getHash(server name) (the system account's shash)."""
    return _hash_digits(hashlib.sha256(server_name.encode()).digest(), ID_LEN)


def group_name(prefix: str, replicas: int, storage: str, unique: str) -> str:
    """jetstream_cluster.go groupName: ``S``/``C``, the replica count, ``F``ile or ``M``emory,
    and the hash of a unique name (nats-server hashes a fresh NUID)."""
    return f"{prefix}-R{replicas}{storage[:1].upper()}-{_hash_digits(hashlib.sha256(unique.encode()).digest(), ID_LEN)}"


def _suffix(rng: random.Random) -> str:
    value = rng.getrandbits(64)
    out = []
    for _ in range(INBOX_SUFFIX_LEN):
        out.append(DIGITS[value % len(DIGITS)])
        value //= len(DIGITS)
    return bytes(out).decode()


def inbox(rng: random.Random) -> str:
    return REPLY_PREFIX + _suffix(rng)


def catchup_inbox(rng: random.Random) -> str:
    return CATCHUP_PREFIX + _suffix(rng)


def progress_inbox(rng: random.Random) -> str:
    return PROGRESS_PREFIX + _suffix(rng)


def vote_subject(group: str) -> str:
    return VOTE_PREFIX + group


def append_subject(group: str) -> str:
    return APPEND_PREFIX + group


def proposal_subject(group: str) -> str:
    return PROPOSAL_PREFIX + group


def remove_peer_subject(group: str) -> str:
    return REMOVE_PEER_PREFIX + group
