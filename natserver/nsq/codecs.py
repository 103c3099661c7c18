"""Stream compression for NSQ connections: raw DEFLATE with a sync flush per write (zlib),
and framed snappy (the codec is cramjam's; only the framing, which arrives split across
reads, is cut here into whole chunks)."""

from __future__ import annotations

import struct
import zlib

from .errors import NsqError

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["DeflateCodec", "SnappyCodec"]

# One decompression step yields at most this much, so a small compressed input cannot make
# us hold an unbounded expansion at once (the parser's limits apply to what comes out).
MAX_INFLATE_STEP = 256 * 1024
SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"  # framing_format.txt: the stream identifier chunk
SNAPPY_MAX_CHUNK = 65536 + 4 + 4  # framing_format.txt: compressed data never exceeds this
_CHUNK_HEADER = struct.Struct("<I")


class DeflateCodec:
    def __init__(self, level: int) -> None:
        self._compress = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompress = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._compress.compress(data) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes):
        """Yield the decompressed data in bounded steps."""
        try:
            out = self._decompress.decompress(data, MAX_INFLATE_STEP)
            yield out
            while self._decompress.unconsumed_tail:
                yield self._decompress.decompress(self._decompress.unconsumed_tail, MAX_INFLATE_STEP)
        except zlib.error as exc:
            raise NsqError(None, f"deflate: {exc}") from None


class SnappyCodec:
    def __init__(self) -> None:
        import cramjam

        self._snappy = cramjam.snappy
        self._buf = bytearray()
        self._sent_id = False

    def encode(self, data: bytes) -> bytes:
        framed = bytes(self._snappy.compress(data))
        if self._sent_id and framed.startswith(SNAPPY_STREAM_ID):
            framed = framed[len(SNAPPY_STREAM_ID):]  # one stream: the identifier once
        self._sent_id = True
        return framed

    def decode(self, data: bytes):
        """Yield the data of every whole chunk received so far (a repeated stream identifier
        is accepted, as pynsq starts a new stream for each write)."""
        buf = self._buf
        buf += data
        pos = 0
        chunks = []
        while len(buf) - pos >= 4:
            (header,) = _CHUNK_HEADER.unpack_from(buf, pos)
            kind, length = header & 0xFF, header >> 8
            if length > SNAPPY_MAX_CHUNK:
                raise NsqError(None, "snappy: chunk too large")
            if len(buf) - pos - 4 < length:
                break
            if kind == 0xFF:
                if bytes(buf[pos : pos + 4 + length]) != SNAPPY_STREAM_ID:
                    raise NsqError(None, "snappy: bad stream identifier")
            elif kind in (0x00, 0x01):
                chunks.append(bytes(buf[pos : pos + 4 + length]))
            elif kind < 0x80:
                raise NsqError(None, "snappy: reserved unskippable chunk")
            pos += 4 + length
        del buf[:pos]
        if chunks:
            try:
                yield bytes(self._snappy.decompress(SNAPPY_STREAM_ID + b"".join(chunks)))
            except Exception as exc:  # cramjam raises its own error types
                raise NsqError(None, f"snappy: {exc}") from None
