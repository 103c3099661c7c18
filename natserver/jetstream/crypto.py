"""Encryption at rest: ``jetstream { cipher: aes|chacha, key: "..." }``, in the spirit of
nats-server 2.9.10 (its file formats are not ours, so neither are its key files).

The keys, as nats-server arranges them:

* The configured key is never used directly: a key-encryption key is derived from it per
  stream (HKDF-SHA256 with a random salt kept in the stream's key file; nats-server derives
  it with HMAC-SHA256 of the stream name).
* Each stream has its own random 256-bit key, stored in ``<stream>/key.enc`` sealed with the
  key-encryption key by the configured AEAD (ChaCha20-Poly1305 or AES-256-GCM). A wrong key
  fails that authentication: :class:`EncryptionKeyError`, and the store is not loaded.
* From the stream key: an AEAD key for the stream metadata (``meta.json``: configuration,
  creation time; sealed whole with a random nonce), and a key for the message segments.
* Segments are encrypted with the cipher's stream form (ChaCha20, or AES-256-CTR), a separate
  keystream per segment (its number is the nonce), addressed by file offset. That is what
  nats-server does with its message blocks, and for the same reason: records are appended and
  erased in place and read one at a time at any offset, so the store's record layout,
  offsets and CRC-32 checks stay exactly as they are unencrypted; the CRC of each decrypted
  record still catches torn and corrupt records. Every offset of a segment is written once
  (appends; an erased message is overwritten with random bytes; after a torn tail is cut,
  writing goes on in a new segment), so no keystream byte covers two plaintexts. Subjects,
  headers, payloads, sequences and timestamps are all inside the encrypted bytes; what stays visible is the directory layout
  (stream names, as in nats-server), file sizes and the number of segments.

A stream keeps the cipher it was created with (recorded in its key file); streams created
after a cipher change use the new one.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..config.mapping import JETSTREAM_CIPHERS
from .util import KEY_FILE, EncryptionKeyError

__all__ = ["CHACHA", "AES", "EncryptionKeyError", "ServerKey", "StreamCipher", "cipher_name", "cipher_label",
           "KEY_FILE"]

CHACHA = "chacha"
AES = "aes"
# nats-server's names (StoreCipher.String), printed as "  Encryption:      AES-GCM".
_LABELS = {CHACHA: "ChaCha20-Poly1305", AES: "AES-GCM"}
# nats-server's accepted spellings of `cipher` (opts.go parseJetStream); ChaCha is its default.
_SPELLINGS = JETSTREAM_CIPHERS  # the config layer reads the key; the names are one table
DEFAULT_CIPHER = CHACHA

_KEY_MAGIC = b"NSJK\x01"  # natserver JetStream key file, version 1
_META_MAGIC = b"NSJM\x01"  # an encrypted meta.json, version 1
_CIPHER_IDS = {CHACHA: 1, AES: 2}
_CIPHERS_BY_ID = {v: k for k, v in _CIPHER_IDS.items()}
_SALT = 16
_NONCE = 12  # both AEADs
_KEY = 32  # 256-bit keys for both ciphers
_KEK_INFO = b"natserver jetstream key-encryption key"
_META_INFO = b"natserver jetstream metadata"
_SEGMENT_INFO = b"natserver jetstream segments"


def cipher_name(value: str) -> str:
    """``chacha``/``chachapoly``/``aes`` (any case) -> CHACHA or AES; nats-server's error
    otherwise."""
    name = _SPELLINGS.get(str(value).lower())
    if name is None:
        raise ValueError(f'Unknown cipher type: "{value}"')
    return name


def cipher_label(cipher: str) -> str:
    return _LABELS[cipher]


def _aead(cipher: str, key: bytes):
    return ChaCha20Poly1305(key) if cipher == CHACHA else AESGCM(key)


def _hkdf(secret: bytes, salt: bytes | None, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=_KEY, salt=salt, info=info).derive(secret)


class StreamCipher:
    """One stream's keys: seals its metadata, en/decrypts its segments."""

    __slots__ = ("cipher", "_meta", "_segment_key", "_aes")

    def __init__(self, cipher: str, stream_key: bytes) -> None:
        self.cipher = cipher
        self._meta = _aead(cipher, _hkdf(stream_key, None, _META_INFO))
        self._segment_key = _hkdf(stream_key, None, _SEGMENT_INFO)
        # The key schedule once (a quarter of the cost of a small read); ChaCha20's algorithm
        # object carries the nonce, so it is made per call.
        self._aes = algorithms.AES(self._segment_key) if cipher == AES else None

    # -- metadata -------------------------------------------------------------------------------

    def seal_meta(self, plaintext: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return _META_MAGIC + nonce + self._meta.encrypt(nonce, plaintext, _META_MAGIC)

    def open_meta(self, data: bytes) -> bytes:
        if not data.startswith(_META_MAGIC):
            raise EncryptionKeyError("the stream metadata is not encrypted")
        head = len(_META_MAGIC)
        try:
            return self._meta.decrypt(data[head : head + _NONCE], data[head + _NONCE :], _META_MAGIC)
        except InvalidTag:
            raise EncryptionKeyError("the stream metadata does not authenticate (corrupt)") from None

    # -- segments -------------------------------------------------------------------------------

    def xor(self, segment: int, offset: int, data) -> bytes:
        """``data`` at ``offset`` of ``segment`` XORed with that segment's keystream: encrypts
        plain bytes and decrypts encrypted ones (the same operation)."""
        if self.cipher == CHACHA:
            block = 64
            # cryptography's ChaCha20 nonce: a 32-bit little-endian block counter, then the
            # 96-bit nonce (the segment number).
            nonce = struct.pack("<IQI", offset // block, segment, 0)
            context = Cipher(algorithms.ChaCha20(self._segment_key, nonce), mode=None).encryptor()
        else:
            block = 16
            counter = ((segment & 0xFFFFFFFFFFFFFFFF) << 64) | (offset // block)
            aes = self._aes
            assert aes is not None  # (made for the AES cipher)
            context = Cipher(aes, modes.CTR(counter.to_bytes(16, "big"))).encryptor()
        skip = offset % block
        if skip:
            context.update(bytes(skip))
        return context.update(data)


class ServerKey:
    """The configured key and cipher: creates and opens streams' key files."""

    def __init__(self, cipher: str, key: str) -> None:
        if not key:
            raise ValueError("an encryption key must not be empty")
        self.cipher = cipher
        self._secret = key.encode()

    @property
    def label(self) -> str:
        return cipher_label(self.cipher)

    def _kek(self, cipher: str, salt: bytes):
        return _aead(cipher, _hkdf(self._secret, salt, _KEK_INFO))

    def key_file_bytes(self) -> tuple[bytes, StreamCipher]:
        """A new stream key: the key file's content and the stream's cipher."""
        stream_key = os.urandom(_KEY)
        salt = os.urandom(_SALT)
        nonce = os.urandom(_NONCE)
        header = _KEY_MAGIC + bytes([_CIPHER_IDS[self.cipher]]) + salt
        sealed = self._kek(self.cipher, salt).encrypt(nonce, stream_key, header)
        return header + nonce + sealed, StreamCipher(self.cipher, stream_key)

    def open_key_file(self, data: bytes, where: str) -> StreamCipher:
        head = len(_KEY_MAGIC)
        if not data.startswith(_KEY_MAGIC) or len(data) < head + 1 + _SALT + _NONCE + _KEY + 16:
            raise EncryptionKeyError(f"{where}: {KEY_FILE} is not a natserver key file")
        cipher = _CIPHERS_BY_ID.get(data[head])
        if cipher is None:
            raise EncryptionKeyError(f"{where}: {KEY_FILE} names an unknown cipher")
        salt = data[head + 1 : head + 1 + _SALT]
        header = data[: head + 1 + _SALT]
        nonce = data[len(header) : len(header) + _NONCE]
        try:
            stream_key = self._kek(cipher, salt).decrypt(nonce, data[len(header) + _NONCE :], header)
        except InvalidTag:
            raise EncryptionKeyError(
                f"{where}: can not decrypt the stream's key with the configured jetstream key "
                f"({cipher_label(cipher)}): wrong key"
            ) from None
        return StreamCipher(cipher, stream_key)
