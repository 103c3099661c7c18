"""S2 compression (klauspost/compress s2), sans-IO: the framed stream nats-server 2.10+
writes on a route or leaf node connection that negotiated ``compression`` (client.go: an
``s2.Writer`` reset for every flush, an ``s2.Reader`` over the socket).

The stream (s2 reader.go, snappy's framing_format.txt): chunks of a type byte, a 3-byte
little-endian length and a body:

* ``0xff`` the stream identifier, ``S2sTwO`` (snappy's ``sNaPpY`` is read too, with snappy's
  64 KiB block limit); every flush of nats-server's writer starts with one;
* ``0x00`` a compressed block, ``0x01`` uncompressed data: a masked CRC-32C of the data,
  then the block (or the data); one decodes to at most MAX_BLOCK_SIZE bytes;
* ``0x02``-``0x7f`` reserved, unskippable (an error); ``0x80``-``0xfe`` skippable (padding,
  S2's index).

The S2 block is snappy's (literals, copies with 1, 2 or 4 byte offsets) plus a copy with
offset 0 (tag 1) that repeats the previous offset with an extended length: cramjam's snappy
decodes what has no repeat (at Rust speed), ``decode_block`` here the rest.

Writing: snappy's framing through cramjam with S2's identifier is a valid S2 stream (its
blocks are S2 blocks without repeats, its chunks at most 64 KiB), which is what StreamEncoder
sends; ``uncompressed`` (s2_uncompressed) sends uncompressed chunks.

Errors are s2's (decode.go): a broken stream raises S2Error with its text, and the caller
closes that one connection (nats-server: a read error).
"""

from __future__ import annotations

import re

import cramjam

__all__ = [
    "S2Error", "StreamDecoder", "StreamEncoder", "crc32c", "decode_block", "masked_crc",
    "MAX_BLOCK_SIZE", "STREAM_IDENTIFIER",
]

# s2.go: the stream identifier chunk (type 0xff, length 6) of S2 and of snappy.
STREAM_IDENTIFIER = b"\xff\x06\x00\x00S2sTwO"
SNAPPY_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_S2_MAGIC = b"S2sTwO"
_SNAPPY_MAGIC = b"sNaPpY"
# s2.go maxBlockSize: what one chunk may decode to (the reader's default ReaderMaxBlockSize).
MAX_BLOCK_SIZE = 4 << 20
# s2.go maxSnappyBlockSize: the limit in a stream that said it is snappy's.
MAX_SNAPPY_BLOCK_SIZE = 1 << 16
# s2.go checksumSize and chunkHeaderSize.
CHECKSUM_SIZE = 4
CHUNK_HEADER_SIZE = 4
# s2.go defaultBlockSize: the writer's block (our uncompressed chunks are no larger).
DEFAULT_BLOCK_SIZE = 1 << 20

# decode.go's errors (their texts are what a broken stream is reported with).
ERR_CORRUPT = "s2: corrupt input"
ERR_CRC = "s2: corrupt input, crc mismatch"
ERR_UNSUPPORTED = "s2: unsupported input"


class S2Error(ValueError):
    """A malformed S2 stream or block (the text is s2's error)."""


def _literal_extra_size(n: int) -> int:
    """s2.go literalExtraSize."""
    if n == 0:
        return 0
    if n < 60:
        return 1
    if n < 1 << 8:
        return 2
    if n < 1 << 16:
        return 3
    if n < 1 << 24:
        return 4
    return 5


def max_encoded_len(n: int) -> int:
    """encode.go MaxEncodedLen: the largest block ``n`` bytes encode to."""
    return n + (n.bit_length() + 7) // 7 + _literal_extra_size(n)


# reader.go NewReader maxBufSize: a data chunk's body is at most this long.
MAX_CHUNK_BODY = max_encoded_len(MAX_BLOCK_SIZE) + CHECKSUM_SIZE


# -- CRC-32C ------------------------------------------------------------------------------------

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c_python(data: bytes) -> int:
    """CRC-32C (Castagnoli), byte by byte (about 1-2 MB/s): crc32c's fallback."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(crc: int) -> int:
    """The framing format's masked checksum (s2.go crc)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def unmasked_crc(masked: int) -> int:
    x = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((x << 15) | (x >> 17)) & 0xFFFFFFFF


# CRC-32C at C speed without a crc32c package: cramjam checks the checksum of a snappy
# "uncompressed" chunk (at most 64 KiB) and names the one it computed when it differs
# ("bad checksum; expected: 0, got: <masked crc>"); a block's pieces are combined as zlib's
# crc32_combine does. Should the text ever change, crc32c falls back to the Python loop.
_CRC_PIECE = 65536
_GOT = re.compile(r"got: (\d+)")


def _crc_piece(piece: bytes) -> int | None:
    frame = SNAPPY_IDENTIFIER + b"\x01" + (len(piece) + 4).to_bytes(3, "little") + b"\0\0\0\0" + piece
    try:
        cramjam.snappy.decompress(frame)
    except cramjam.DecompressionError as exc:
        found = _GOT.search(str(exc))
        return unmasked_crc(int(found.group(1))) if found else None
    return unmasked_crc(0)  # (its masked checksum is 0, as the frame says)


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, row) for row in mat]


_SHIFTS: dict[int, list[int]] = {}  # bytes -> the operator appending that many zero bytes
_MAX_SHIFTS_CACHED = 64


def _shift(nbytes: int) -> list[int]:
    """The GF(2) operator that moves a CRC-32C over ``nbytes`` zero bytes (zlib's
    crc32_combine, as a matrix: cached, the pieces being mostly 64 KiB)."""
    cached = _SHIFTS.get(nbytes)
    if cached is not None:
        return cached
    result = [1 << i for i in range(32)]  # identity
    power = [0x82F63B78] + [1 << i for i in range(31)]  # one zero bit
    power = _gf2_square(_gf2_square(_gf2_square(power)))  # one zero byte
    n = nbytes
    while n:
        if n & 1:
            result = [_gf2_times(power, row) for row in result]
        n >>= 1
        if n:
            power = _gf2_square(power)
    if len(_SHIFTS) < _MAX_SHIFTS_CACHED:
        _SHIFTS[nbytes] = result
    return result


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the framing format's checksum: computed by cramjam 64 KiB at a
    time, the pieces combined."""
    crc = 0
    for at in range(0, len(data), _CRC_PIECE):
        piece = data[at : at + _CRC_PIECE]
        got = _crc_piece(piece)
        if got is None:
            return crc32c_python(data)
        crc = _gf2_times(_shift(len(piece)), crc) ^ got if at else got
    return crc


# -- the block ----------------------------------------------------------------------------------


def _uvarint(buf, pos: int) -> tuple[int, int]:
    """decode.go decodedLen: (value, next position) of the block's length (at most 5 bytes,
    at most 32 bits)."""
    value = shift = 0
    end = min(len(buf), pos + 5)
    while pos < end:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, pos
        shift += 7
    raise S2Error(ERR_CORRUPT)


def decoded_len(block) -> int:
    """The length an S2 block says it decodes to."""
    return _uvarint(block, 0)[0]


def decode_block(src: bytes, max_len: int = MAX_BLOCK_SIZE) -> bytes:
    """An S2 block (decode.go Decode): cramjam's snappy when it has no S2 repeat, else the
    loop below, one element at a time (a literal or a copy, as slices)."""
    dlen, s = _uvarint(src, 0)
    if dlen > max_len:
        raise S2Error(ERR_CORRUPT)
    try:
        out = bytes(cramjam.snappy.decompress_raw(src))
    except cramjam.DecompressionError:
        pass  # a repeat (or a broken block)
    else:
        if len(out) == dlen:
            return out
    try:
        return _decode_s2(src, s, dlen)
    except IndexError:  # an element cut short
        raise S2Error(ERR_CORRUPT) from None


def _decode_s2(src: bytes, s: int, dlen: int) -> bytes:
    """The block's elements from ``s`` on (decode_other.go s2Decode), each a slice copy:
    literals and copies (1, 2, 4-byte offsets; tag 1 with offset 0 repeats the last one, its
    length code 5-7 extended by 1-3 bytes)."""
    dst = bytearray()
    n = len(src)
    offset = 0
    d = 0
    while s < n:
        tag = src[s]
        kind = tag & 3
        if kind == 0:  # literal
            x = tag >> 2
            if x < 60:
                s += 1
            elif x == 60:
                x = src[s + 1]
                s += 2
            elif x == 61:
                x = src[s + 1] | src[s + 2] << 8
                s += 3
            else:
                nb = x - 59
                if s + 1 + nb > n:
                    raise S2Error(ERR_CORRUPT)
                x = int.from_bytes(src[s + 1 : s + 1 + nb], "little")
                s += 1 + nb
            length = x + 1
            end = s + length
            if end > n or d + length > dlen:
                raise S2Error(ERR_CORRUPT)
            dst += src[s:end]
            s = end
            d += length
            continue
        if kind == 2:
            length = (tag >> 2) + 1
            offset = src[s + 1] | src[s + 2] << 8
            s += 3
        elif kind == 1:
            length = ((tag >> 2) & 7) + 4
            toffset = ((tag & 0xE0) << 3) | src[s + 1]
            s += 2
            if toffset:
                offset = toffset
            elif length >= 9:  # a repeat with an extended length (codes 5-7)
                if length == 9:
                    length = src[s] + 8
                    s += 1
                elif length == 10:
                    length = (src[s] | src[s + 1] << 8) + 260
                    s += 2
                else:
                    length = (src[s] | src[s + 1] << 8 | src[s + 2] << 16) + 65540
                    s += 3
        else:
            length = (tag >> 2) + 1
            offset = int.from_bytes(src[s + 1 : s + 5], "little")
            s += 5
        if offset <= 0 or offset > d or s > n or d + length > dlen:
            raise S2Error(ERR_CORRUPT)
        start = d - offset
        if offset >= length:
            dst += dst[start : start + length]
        else:  # overlapping: the pattern repeats
            dst += (dst[start:] * (length // offset + 1))[:length]
        d += length
    if d != dlen:
        raise S2Error(ERR_CORRUPT)
    return bytes(dst)


# -- the stream ---------------------------------------------------------------------------------


class StreamDecoder:
    """s2.Reader, incremental: ``feed`` what the socket brought, then take the decoded data
    one chunk at a time from ``next_chunk`` (each at most MAX_BLOCK_SIZE bytes, so the work
    per call is bounded whatever the compressed input expands to)."""

    def __init__(self, max_block: int = MAX_BLOCK_SIZE) -> None:
        self.max_block = max_block
        self._buf = bytearray()
        self._started = False  # a stream identifier came (reader.go readHeader)
        self._snappy = False
        self._skip = 0  # bytes of a skippable chunk still to drop

    def feed(self, data) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_chunk(self) -> bytes | None:
        """The data of the next whole chunk, None until more bytes come."""
        buf = self._buf
        while not self._skip and len(buf) >= CHUNK_HEADER_SIZE:
            kind = buf[0]
            size = buf[1] | buf[2] << 8 | buf[3] << 16
            if not self._started and kind != 0xFF:
                raise S2Error(ERR_CORRUPT)
            if kind <= 0x01:
                if size < CHECKSUM_SIZE or size > MAX_CHUNK_BODY:
                    raise S2Error(ERR_CORRUPT)
                if kind == 0x00 and len(buf) > 8:  # the declared length, before the body comes
                    head = buf[8 : 8 + min(5, size - CHECKSUM_SIZE)]
                    complete = any(b < 0x80 for b in head) or len(head) == min(5, size - CHECKSUM_SIZE)
                    if complete and decoded_len(head) > self._limit():
                        raise S2Error(ERR_CORRUPT)
                elif kind == 0x01 and size - CHECKSUM_SIZE > self._limit():
                    raise S2Error(ERR_CORRUPT)
            if len(buf) < CHUNK_HEADER_SIZE + size and (kind < 0x80 or kind == 0xFF):
                return None
            if kind == 0xFF:
                body = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                if size != len(_S2_MAGIC) or body not in (_S2_MAGIC, _SNAPPY_MAGIC):
                    raise S2Error(ERR_CORRUPT)
                self._started = True
                self._snappy = body == _SNAPPY_MAGIC
                continue
            if kind >= 0x80:  # padding and the other skippable chunks, dropped as they come
                dropped = min(size, len(buf) - CHUNK_HEADER_SIZE)
                del buf[: CHUNK_HEADER_SIZE + dropped]
                self._skip = size - dropped
                continue
            if kind > 0x01:  # reserved, unskippable
                raise S2Error(ERR_UNSUPPORTED)
            body = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            checksum = int.from_bytes(body[:4], "little")
            if kind == 0x00:
                data = decode_block(body[4:], self._limit())
            else:
                data = body[4:]
            if masked_crc(crc32c(data)) != checksum:
                raise S2Error(ERR_CRC)
            return data
        return None

    def _limit(self) -> int:
        return min(self.max_block, MAX_SNAPPY_BLOCK_SIZE) if self._snappy else self.max_block


class StreamEncoder:
    """What nats-server's s2.Writer writes for one flush: the stream identifier, then the
    data in chunks (cramjam's snappy framing, which is S2's, with S2's identifier)."""

    def encode(self, data: bytes, uncompressed: bool = False) -> bytes:
        if uncompressed:
            return STREAM_IDENTIFIER + b"".join(_uncompressed_chunk(data[at : at + _CRC_PIECE])
                                                for at in range(0, len(data), _CRC_PIECE))
        framed = bytes(cramjam.snappy.compress(data))
        return STREAM_IDENTIFIER + framed[len(SNAPPY_IDENTIFIER):]


def _uncompressed_chunk(piece: bytes) -> bytes:
    return (b"\x01" + (len(piece) + CHECKSUM_SIZE).to_bytes(3, "little")
            + masked_crc(crc32c(piece)).to_bytes(4, "little") + piece)
