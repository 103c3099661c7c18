"""Compressed segments: a stream with ``compression: s2`` (nats-server 2.10+) keeps each
segment the file store has sealed (full, rolled over) as ``<n>.sz`` instead of ``<n>.seg``.

nats-server compresses each message block as it is sealed, whole, as one S2 block. natserver
compresses a sealed segment in chunks of at least CHUNK_SIZE plain bytes, each cut at a record
boundary, so that a read by sequence decompresses one chunk (FileStore keeps the last few
decompressed, ZCACHE_CHUNKS) and a corrupt chunk loses only its own records. Each chunk is a
snappy block (cramjam's codec): S2 is a superset of snappy's block format, so the same bytes
are valid S2 and the setting is named as nats-server names it. The records inside are exactly
the plain segment's, at the same (plain) offsets: the index, its files and recovery do not
change, only where the bytes come from.

The file::

    header  magic "NSZ1" | u16 version | u8 algorithm | u8 reserved | u64 keystream id |
            u64 plain length | u32 chunks | u32 CRC-32 of the header before it
    table   per chunk: u32 plain length | u32 compressed length | u32 CRC-32 of the compressed
            bytes; then a u32 CRC-32 of the table
    chunks  the compressed bytes, one after the other

little-endian. Encrypted stores (crypto.py) compress, then encrypt (as nats-server): the table
and the chunks are XORed by file offset with a keystream of their own, named by the random
keystream id in the header (its top bit set, so it is never a segment number): a segment
written again (an erased message) gets a new id, so no keystream byte ever covers two
plaintexts. The file is written to a temporary name, fsynced and renamed; only then is the
plain segment removed, so a crash leaves one or the other whole (recovery prefers the
compressed one when both are there).
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from bisect import bisect_right

SUFFIX = ".sz"
MAGIC = b"NSZ1"
VERSION = 1
ALG_S2 = 1  # snappy blocks (a subset of S2's block format)
# Plain bytes per chunk (at least; cut at the next record). A read by sequence decompresses
# one chunk: measured on JSON-ish events, 16 KiB chunks compress 7.9x (a whole segment's 64 KiB
# snappy blocks 8.6x) and decompress in ~5-20 us, 64 KiB ones in ~20-70 us.
CHUNK_SIZE = 16 * 1024
_HEAD = struct.Struct("<4sHBBQQI")
_HEAD_CRC = struct.Struct("<I")
_HEAD_SIZE = _HEAD.size + 4
_ENTRY = struct.Struct("<III")


class CorruptSegment(Exception):
    """The header or the table of a compressed segment does not check (the file is unusable)."""


def _snappy():
    import cramjam  # (imported when a stream compresses, not at the server's start)

    return cramjam.snappy


def new_keystream_id() -> int:
    """A random id for a compressed file's keystream, with the top bit set (segment numbers,
    which name the plain segments' keystreams, never have it)."""
    return int.from_bytes(os.urandom(8), "little") | (1 << 63)


def record_starts(data, step: int = CHUNK_SIZE) -> list[int]:
    """Chunk boundaries found by walking the records' length fields (a segment whose record
    offsets were not tracked: the one being written when the server started)."""
    unpack = struct.Struct("<I").unpack_from
    n = len(data)
    cuts = [0]
    pos = 0
    nxt = step
    while pos + 4 <= n:
        pos += unpack(data, pos)[0] + 8
        if pos >= nxt and pos < n:
            cuts.append(pos)
            nxt = pos + step
    return cuts


def compress_chunks(data, cuts: list[int]) -> list[tuple[int, bytes]]:
    """(plain length, snappy block) of each chunk of ``data`` cut at ``cuts`` (offsets into
    ``data``, 0 first)."""
    snappy = _snappy()
    bounds = [c for c in cuts if 0 <= c < len(data)] or [0]
    bounds.append(len(data))
    out = []
    with memoryview(data) as view:
        for lo, hi in zip(bounds, bounds[1:]):
            if hi > lo:
                out.append((hi - lo, bytes(snappy.compress_raw(bytes(view[lo:hi])))))
    return out


def assemble(chunks: list[tuple[int, bytes]], xor=None) -> bytes:
    """The compressed file of ``chunks`` (compress_chunks'); ``xor(keystream id, offset,
    bytes)`` encrypts (None: a plain store)."""
    table = bytearray()
    for plain, comp in chunks:
        table += _ENTRY.pack(plain, len(comp), zlib.crc32(comp))
    zid = new_keystream_id() if xor is not None else 0
    head = _HEAD.pack(MAGIC, VERSION, ALG_S2, 0, zid, sum(plain for plain, _ in chunks), len(chunks))
    head += _HEAD_CRC.pack(zlib.crc32(head))
    body = bytes(table) + _HEAD_CRC.pack(zlib.crc32(table)) + b"".join(comp for _, comp in chunks)
    if xor is not None:
        body = xor(zid, len(head), body)
    return head + body


def build(data, cuts: list[int], xor=None) -> bytes:
    """The compressed file for the plain segment ``data`` cut at ``cuts``."""
    return assemble(compress_chunks(data, cuts), xor)


class ZSegment:
    """An open compressed segment: where each chunk is (plain start, file offset, lengths)."""

    __slots__ = ("fd", "length", "zid", "starts", "offsets", "plain", "comp", "crcs")

    def __init__(self, fd: int, xor=None) -> None:
        """Read the header and the table of the file open as ``fd``; CorruptSegment when they
        do not check."""
        self.fd = fd
        head = os.pread(fd, _HEAD_SIZE, 0)
        if len(head) < _HEAD_SIZE or zlib.crc32(head[: _HEAD.size]) != _HEAD_CRC.unpack_from(head, _HEAD.size)[0]:
            raise CorruptSegment("header")
        magic, version, alg, _, zid, length, count = _HEAD.unpack_from(head, 0)
        if magic != MAGIC or version != VERSION or alg != ALG_S2:
            raise CorruptSegment("version")
        if (xor is None) != (zid == 0):
            raise CorruptSegment("encrypted" if zid else "not encrypted")
        size = count * _ENTRY.size + 4
        table = os.pread(fd, size, _HEAD_SIZE)
        if xor is not None:
            table = xor(zid, _HEAD_SIZE, table)
        if len(table) != size or zlib.crc32(table[:-4]) != _HEAD_CRC.unpack_from(table, size - 4)[0]:
            raise CorruptSegment("table")
        self.zid = zid
        self.length = length
        self.starts = array("Q")
        self.offsets = array("Q")
        self.plain = array("I")
        self.comp = array("I")
        self.crcs = array("I")
        start, offset = 0, _HEAD_SIZE + size
        for i in range(count):
            plain, comp, crc = _ENTRY.unpack_from(table, i * _ENTRY.size)
            self.starts.append(start)
            self.offsets.append(offset)
            self.plain.append(plain)
            self.comp.append(comp)
            self.crcs.append(crc)
            start += plain
            offset += comp
        if start != length:
            raise CorruptSegment("lengths")

    def chunk_of(self, offset: int) -> int:
        """The chunk holding plain ``offset`` (-1: past the end)."""
        if not 0 <= offset < self.length:
            return -1
        return bisect_right(self.starts, offset) - 1

    def read_chunk(self, i: int, xor=None) -> bytes | None:
        """Chunk ``i`` decompressed (None: its bytes do not check or do not decompress)."""
        offset, size = self.offsets[i], self.comp[i]
        try:
            comp = os.pread(self.fd, size, offset)
        except OSError:
            return None
        if xor is not None:
            comp = xor(self.zid, offset, comp)
        if len(comp) != size or zlib.crc32(comp) != self.crcs[i]:
            return None
        try:
            plain = bytes(_snappy().decompress_raw(comp))
        except Exception:  # cramjam raises its own error types
            return None
        return plain if len(plain) == self.plain[i] else None

    def pieces(self, xor=None):
        """(plain start, plain bytes or None when the chunk is corrupt) for every chunk."""
        for i in range(len(self.starts)):
            yield self.starts[i], self.read_chunk(i, xor)

    def cuts(self) -> list[int]:
        return list(self.starts)
