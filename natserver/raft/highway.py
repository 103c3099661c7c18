"""HighwayHash-64 (Google's keyed hash, as github.com/minio/highwayhash computes it): the
checksum raft.go appends to a snapshot file (encodeSnapshot), keyed by the SHA-256 of the
group's name. Pure Python over 64-bit lanes: about 1 MB/s on this shared machine, and a
snapshot is hashed when written and when read, on the caller's thread (a large one, a meta
snapshot of many streams, would want a C extension)."""

from __future__ import annotations

import struct

__all__ = ["highwayhash64"]

_M = (1 << 64) - 1
_LO = 0xFFFFFFFF
# The algorithm's initial constants (HighwayHash's init0 and init1).
_INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_LANES = struct.Struct("<4Q")
PACKET = 32  # bytes hashed per update


def _swap_halves(x: int) -> int:
    return ((x >> 32) | (x << 32)) & _M


def _zipper(a: int, b: int) -> tuple[int, int]:
    """ZipperMergeAndAdd(v1=a, v0=b): what is added to (add1, add0)."""
    add0 = ((((b & 0xFF000000) | (a & 0xFF00000000)) >> 24)
            | (((b & 0xFF0000000000) | (a & 0xFF000000000000)) >> 16)
            | (b & 0xFF0000) | ((b & 0xFF00) << 32)
            | ((a & 0xFF00000000000000) >> 8) | ((b << 56) & _M))
    add1 = ((((a & 0xFF000000) | (b & 0xFF00000000)) >> 24)
            | (a & 0xFF0000) | ((a & 0xFF0000000000) >> 16)
            | ((a & 0xFF00) << 24) | ((b & 0xFF000000000000) >> 8)
            | ((a & 0xFF) << 48) | (b & 0xFF00000000000000))
    return add1, add0


class _State:
    __slots__ = ("mul0", "mul1", "v0", "v1")

    def __init__(self, key: bytes) -> None:
        k = _LANES.unpack(key)
        self.mul0 = list(_INIT0)
        self.mul1 = list(_INIT1)
        self.v0 = [a ^ b for a, b in zip(_INIT0, k, strict=True)]
        self.v1 = [a ^ _swap_halves(b) for a, b in zip(_INIT1, k, strict=True)]

    def update(self, lanes: tuple[int, ...] | list[int]) -> None:
        v0, v1, mul0, mul1 = self.v0, self.v1, self.mul0, self.mul1
        for i in range(4):
            v1[i] = (v1[i] + mul0[i] + lanes[i]) & _M
            mul0[i] ^= (v1[i] & _LO) * (v0[i] >> 32)
            v0[i] = (v0[i] + mul1[i]) & _M
            mul1[i] ^= (v0[i] & _LO) * (v1[i] >> 32)
        for src, dst, hi, lo in ((v1, v0, 1, 0), (v1, v0, 3, 2), (v0, v1, 1, 0), (v0, v1, 3, 2)):
            add1, add0 = _zipper(src[hi], src[lo])
            dst[hi] = (dst[hi] + add1) & _M
            dst[lo] = (dst[lo] + add0) & _M

    def remainder(self, tail: bytes) -> None:
        size = len(tail)  # 1..31
        size4 = size & 3
        for i in range(4):
            self.v0[i] = (self.v0[i] + (size << 32) + size) & _M
            lo, hi = self.v1[i] & _LO, self.v1[i] >> 32
            lo = ((lo << size) | (lo >> (32 - size))) & _LO
            hi = ((hi << size) | (hi >> (32 - size))) & _LO
            self.v1[i] = lo | (hi << 32)
        packet = bytearray(PACKET)
        whole = size & ~3
        packet[:whole] = tail[:whole]
        rest = tail[whole:]
        if size & 16:
            packet[28:32] = tail[size - 4:size]
        elif size4:
            packet[16] = rest[0]
            packet[17] = rest[size4 >> 1]
            packet[18] = rest[size4 - 1]
        self.update(_LANES.unpack(packet))

    def finish(self) -> int:
        for _ in range(4):
            v0 = self.v0
            self.update([_swap_halves(v0[2]), _swap_halves(v0[3]), _swap_halves(v0[0]), _swap_halves(v0[1])])
        return (self.v0[0] + self.v1[0] + self.mul0[0] + self.mul1[0]) & _M


def highwayhash64(key: bytes, data: bytes) -> bytes:
    """The 8-byte HighwayHash-64 of ``data`` under the 32-byte ``key``, as Go's
    ``highwayhash.New64(key)``'s ``Sum`` gives it (the hash little-endian)."""
    if len(key) != 32:
        raise ValueError("a HighwayHash key is 32 bytes")
    state = _State(key)
    view = memoryview(data)
    whole = len(data) - len(data) % PACKET
    for at in range(0, whole, PACKET):
        state.update(_LANES.unpack_from(view, at))
    if whole != len(data):
        state.remainder(bytes(view[whole:]))
    return struct.pack("<Q", state.finish())
