"""natserver.protocol.s2, the S2 stream of compressed routes and leaf connections.

data/s2/*.s2 are what klauspost/compress's s2.Writer (the version nats-server 2.15.1 vendors,
built with Go from its source: ``s2.NewWriter(w, s2.WriterConcurrency(1), <level>)``, then
``Flush``) wrote for the levels nats-server uses (fast, better, best, uncompressed);
decoded.json has the length and SHA-256 of what each decodes to. Their blocks have S2's
repeat copies, which cramjam's snappy cannot decode. ours_go_decoded.json records the
SHA-256 of what our encoder wrote for route.fast.s2's data, which s2.NewReader decoded back to
that data when the vectors were made."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.protocol import s2

DATA = Path(__file__).parent / "data" / "s2"
DECODED = json.loads((DATA / "decoded.json").read_text())


def _decode_all(stream: bytes, step: int | None = None) -> bytes:
    decoder = s2.StreamDecoder()
    out = []
    pieces = [stream] if step is None else [stream[at : at + step] for at in range(0, len(stream), step)]
    for piece in pieces:
        decoder.feed(piece)
        while (chunk := decoder.next_chunk()) is not None:
            out.append(chunk)
    return b"".join(out)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name", sorted(DECODED))
def test_go_s2_writer_output_decodes(name):
    out = _decode_all((DATA / name).read_bytes())
    assert (len(out), _sha(out)) == (DECODED[name]["length"], DECODED[name]["sha256"])


def test_go_vectors_use_s2_repeats_that_snappy_cannot_decode():
    """The vectors exercise the S2 part of the block format (else the test above proves
    only snappy)."""
    stream = (DATA / "route.best.s2").read_bytes()
    assert stream.startswith(s2.STREAM_IDENTIFIER)
    body = stream[len(s2.STREAM_IDENTIFIER) + 8 : len(s2.STREAM_IDENTIFIER) + 4
                  + int.from_bytes(stream[11:14], "little")]
    assert stream[10] == 0x00  # a compressed chunk
    with pytest.raises(cramjam.DecompressionError):
        cramjam.snappy.decompress_raw(body)
    assert len(s2.decode_block(body)) == s2.decoded_len(body)


@pytest.mark.parametrize("step", [1, 7, 4096])
def test_go_vectors_decode_fed_in_pieces(step):
    name = "route.fast.s2" if step != 1 else "ping.fast.s2"
    assert _sha(_decode_all((DATA / name).read_bytes(), step)) == DECODED[name]["sha256"]


def test_our_encoding_is_what_gos_reader_decoded():
    recorded = json.loads((DATA / "ours_go_decoded.json").read_text())
    data = _decode_all((DATA / recorded["input"]).read_bytes())
    encoder = s2.StreamEncoder()
    for key, uncompressed in (("compressed", False), ("uncompressed", True)):
        ours = encoder.encode(data, uncompressed=uncompressed)
        assert (len(ours), _sha(ours)) == (recorded["go_decoded"][key]["length"], recorded["go_decoded"][key]["sha256"])
        assert _decode_all(ours) == data


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=3000) | st.sampled_from([b"RMSG $G a.b 5\r\nhello\r\n" * 40, b"\0" * 70000]),
                min_size=1, max_size=6),
       st.booleans(), st.integers(min_value=1, max_value=5000))
def test_round_trip_of_flushes(flushes, uncompressed, step):
    """Each flush is a stream of its own (nats-server's writer is reset per flush); the
    reader takes them back to back, however the socket cut them."""
    encoder = s2.StreamEncoder()
    wire = b"".join(encoder.encode(data, uncompressed=uncompressed) for data in flushes if data)
    assert _decode_all(wire, step) == b"".join(flushes)


def test_crc32c_by_cramjam_is_the_checksum():
    """crc32c (cramjam's checker, 64 KiB pieces combined) is CRC-32C: the check value of
    "123456789", and the byte-by-byte loop's on pieces' edges."""
    assert s2.crc32c(b"123456789") == 0xE3069283
    assert s2._crc_piece(b"123456789") == 0xE3069283  # (cramjam still names it)
    rng = random.Random(7)
    for n in (0, 1, 65535, 65536, 65537, 3 * 65536 + 11):
        data = rng.randbytes(n)
        assert s2.crc32c(data) == s2.crc32c_python(data), n


def _chunk(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + len(body).to_bytes(3, "little") + body


def _err(stream: bytes) -> str:
    with pytest.raises(s2.S2Error) as caught:
        _decode_all(stream)
    return str(caught.value)


def test_malformed_streams_raise_s2s_errors():
    good = (DATA / "route.fast.s2").read_bytes()
    assert _err(b"PING\r\n") == "s2: corrupt input"  # no stream identifier first
    assert _err(_chunk(0xFF, b"S2sTwX")) == "s2: corrupt input"
    assert _err(s2.STREAM_IDENTIFIER + _chunk(0x05, b"abcd")) == "s2: unsupported input"
    flipped = bytearray(good)
    flipped[-3] ^= 0x40
    assert _err(bytes(flipped)).startswith("s2: corrupt input")
    crc = bytearray(s2.StreamEncoder().encode(b"hello world", uncompressed=True))
    crc[-1] ^= 1
    assert _err(bytes(crc)) == "s2: corrupt input, crc mismatch"
    # a copy before any literal (offset beyond what was decoded)
    assert _err(s2.STREAM_IDENTIFIER + _chunk(0x00, b"\0\0\0\0" + b"\x08\x01\x01")) == "s2: corrupt input"
    # a repeat before any offset was set
    assert _err(s2.STREAM_IDENTIFIER + _chunk(0x00, b"\0\0\0\0" + b"\x08\x00a\x01\x00")) == "s2: corrupt input"
    # a chunk cut short in the middle of an element
    assert _err(s2.STREAM_IDENTIFIER + _chunk(0x00, b"\0\0\0\0" + b"\x10\x02")) == "s2: corrupt input"


def test_bounded_decoding():
    """A chunk decodes to at most 4 MiB (the declared length is checked before the body is
    waited for); a data chunk's body is at most MaxEncodedLen(4 MiB) + 4; skippable chunks
    are dropped as they come, never buffered."""
    declares_too_much = s2.STREAM_IDENTIFIER + b"\x00" + (20).to_bytes(3, "little") + b"\0\0\0\0" + b"\x81\x80\x80\x02"
    decoder = s2.StreamDecoder()
    decoder.feed(declares_too_much)
    with pytest.raises(s2.S2Error, match="corrupt input"):
        decoder.next_chunk()
    huge = s2.STREAM_IDENTIFIER + b"\x01" + (s2.MAX_BLOCK_SIZE + 5).to_bytes(3, "little")
    decoder = s2.StreamDecoder()
    decoder.feed(huge)
    with pytest.raises(s2.S2Error):
        decoder.next_chunk()
    # the largest block there may be: 4 MiB of "a" from 12 bytes (a literal, a copy, a repeat)
    rest = (4 << 20) - 5 - 65540  # the repeat's 3-byte length, beyond its 65540 minimum
    bomb = b"\x80\x80\x80\x02" + b"\x00a" + b"\x01\x01" + b"\x1d\x00" + rest.to_bytes(3, "little")
    assert s2.decode_block(bomb) == b"a" * (4 << 20)
    with pytest.raises(s2.S2Error):  # one byte more is refused before anything is decoded
        s2.decode_block(b"\x81\x80\x80\x02" + bomb[4:])
    decoder = s2.StreamDecoder()
    decoder.feed(s2.STREAM_IDENTIFIER + b"\xfe" + (1 << 20).to_bytes(3, "little") + b"\0" * 100)
    assert decoder.next_chunk() is None and decoder.buffered == 0
    decoder.feed(b"\0" * ((1 << 20) - 100) + s2.StreamEncoder().encode(b"after padding"))
    assert decoder.next_chunk() == b"after padding"


_GO_STREAM = (DATA / "route.fast.s2").read_bytes()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(_GO_STREAM) - 1), st.integers(0, 255)),
                min_size=1, max_size=8),
       st.integers(min_value=0, max_value=len(_GO_STREAM)))
def test_a_damaged_stream_raises_s2error_only(damage, cut):
    """Whatever the damage (bytes changed, the stream cut short), the decoder returns data or
    raises S2Error (which closes that one connection), never anything else."""
    broken = bytearray(_GO_STREAM)
    for at, value in damage:
        broken[at] = value
    decoder = s2.StreamDecoder()
    decoder.feed(bytes(broken[:cut]))
    try:
        while decoder.next_chunk() is not None:
            pass
    except s2.S2Error:
        pass
