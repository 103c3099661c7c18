"""Go's unsigned varints (encoding/binary PutUvarint), as nats-server writes them in JetStream
snapshots (archive headers) and RAFT frames. Readers stay with their formats: each has the
limits and errors of the Go code it follows."""

from __future__ import annotations

_SMALL = [bytes((i,)) for i in range(0x80)]  # one-byte uvarints, the common case of lengths


def uvarint(value: int) -> bytes:
    """binary.PutUvarint's bytes for ``value`` (0 <= value < 2**64)."""
    if value < 0x80:
        return _SMALL[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
