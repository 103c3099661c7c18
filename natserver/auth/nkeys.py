"""NATS nkeys: Ed25519 keys written as base32 text with a type prefix and a CRC16 check.

A public key is ``base32(prefix byte + 32-byte Ed25519 public key + CRC16 little endian)``
without padding (56 characters starting with ``U`` for users, ``A`` accounts, ``O``
operators, ``N`` servers); a seed is the same with two prefix bytes (``S`` then the key
type) around the 32-byte private seed (58 characters, ``SU...``, ``SA...``, ``SO...``).
This is the encoding of github.com/nats-io/nkeys, re-implemented on ``cryptography``, which
is imported on first use (signing, verifying, making a key pair): the plain ``natserver`` start
encodes keys but never signs, and importing ``cryptography`` costs more than the server's ids.

The module doubles as a stand-in for the ``nkeys`` Python package (``from_seed(seed)``
returning a key pair with ``public_key``, ``sign()``, ``verify()`` and ``wipe()``), so nats-py
can authenticate with nkeys and credentials files where that package is not installed::

    sys.modules.setdefault("nkeys", natserver.auth.nkeys)
"""

from __future__ import annotations

import base64
import binascii
import os

from . import x25519

__all__ = [
    "KeyPair",
    "NkeyError",
    "create_account",
    "create_curve_keys",
    "create_operator",
    "create_user",
    "decode_public_key",
    "from_public_key",
    "from_seed",
    "is_valid_public_key",
    "verify",
]

PREFIX_SEED = 18 << 3  # 'S'
PREFIX_PRIVATE = 15 << 3  # 'P'
PREFIX_SERVER = 13 << 3  # 'N'
PREFIX_CLUSTER = 2 << 3  # 'C'
PREFIX_OPERATOR = 14 << 3  # 'O'
PREFIX_ACCOUNT = 0  # 'A'
PREFIX_USER = 20 << 3  # 'U'
PREFIX_CURVE = 23 << 3  # 'X'

_PUBLIC_PREFIXES = {PREFIX_SERVER, PREFIX_CLUSTER, PREFIX_OPERATOR, PREFIX_ACCOUNT, PREFIX_USER, PREFIX_CURVE}
_PREFIX_OF_LETTER = {"U": PREFIX_USER, "A": PREFIX_ACCOUNT, "O": PREFIX_OPERATOR, "N": PREFIX_SERVER, "C": PREFIX_CLUSTER}


class NkeyError(ValueError):
    """An nkey that does not decode (bad base32, bad CRC, wrong type or length)."""


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, as nkeys' crc16.go."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _encode(raw: bytes) -> bytes:
    raw += _crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).rstrip(b"=")


def _decode(text) -> bytes:
    """base32 (no padding, upper case) + CRC check; returns the data without the CRC."""
    if isinstance(text, str):
        try:
            text = text.encode("ascii")
        except UnicodeEncodeError:
            raise NkeyError("invalid encoding") from None
    text = bytes(text)
    if len(text) < 4 or len(text) > 128 or b"=" in text:
        raise NkeyError("invalid encoding")
    try:
        raw = base64.b32decode(text + b"=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise NkeyError("invalid encoding") from None
    if len(raw) < 4:
        raise NkeyError("invalid encoding")
    data, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if _crc16(data) != crc:
        raise NkeyError("invalid checksum")
    return data


def encode_public_key(prefix: int, public: bytes) -> bytes:
    return _encode(bytes([prefix]) + public)


def encode_seed(prefix: int, seed: bytes) -> bytes:
    b1 = PREFIX_SEED | (prefix >> 5)
    b2 = (prefix & 31) << 3
    return _encode(bytes([b1, b2]) + seed)


def decode_public_key(key, expected_prefix: int | None = None) -> tuple[int, bytes]:
    """(prefix, 32-byte Ed25519 public key) of a public nkey. Raises NkeyError."""
    data = _decode(key)
    prefix = data[0]
    if prefix not in _PUBLIC_PREFIXES or len(data) != 33:
        raise NkeyError("invalid public key")
    if expected_prefix is not None and prefix != expected_prefix:
        raise NkeyError("invalid prefix byte")
    return prefix, data[1:]


def decode_seed(seed) -> tuple[int, bytes]:
    """(key type prefix, 32-byte Ed25519 seed) of an encoded seed. Raises NkeyError."""
    data = _decode(seed)
    if len(data) != 34:
        raise NkeyError("invalid seed")
    b1 = data[0] & 248
    prefix = ((data[0] & 7) << 5) | ((data[1] & 248) >> 3)
    if b1 != PREFIX_SEED or prefix not in _PUBLIC_PREFIXES:
        raise NkeyError("invalid seed")
    return prefix, data[2:]


def is_valid_public_key(key, kind: str | None = None) -> bool:
    """``kind``: "U", "A", "O", "N", "C" (the first letter of such keys) or None for any."""
    try:
        decode_public_key(key, _PREFIX_OF_LETTER[kind] if kind else None)
    except (NkeyError, KeyError):
        return False
    return True


def verify(public_key, data: bytes, signature: bytes) -> bool:
    """Ed25519 verification of ``signature`` over ``data`` by a public nkey; never raises."""
    try:
        _, raw = decode_public_key(public_key)
    except NkeyError:
        return False
    if len(signature) != 64:
        return False
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(bytes(signature), bytes(data))
    except (InvalidSignature, ValueError):
        return False
    return True


class KeyPair:
    """A public key, or a full key pair when made from a seed (nkeys package compatible)."""

    def __init__(self, prefix: int, public: bytes, seed: bytes | None = None) -> None:
        self._prefix = prefix
        self._public = public
        self._seed = seed

    @property
    def public_key(self) -> bytes:
        return encode_public_key(self._prefix, self._public)

    @property
    def seed(self) -> bytes:
        if self._seed is None:
            raise NkeyError("no seed: public key only")
        return encode_seed(self._prefix, self._seed)

    @property
    def private_key(self) -> bytes:
        if self._seed is None:
            raise NkeyError("no seed: public key only")
        return _encode(bytes([PREFIX_PRIVATE]) + self._seed + self._public)

    def sign(self, data: bytes) -> bytes:
        if self._seed is None:
            raise NkeyError("cannot sign: public key only")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self._seed).sign(bytes(data))

    def verify(self, data: bytes, signature: bytes) -> bool:
        return verify(self.public_key, data, signature)

    def wipe(self) -> None:
        self._seed = None

    def __repr__(self) -> str:
        return f"<nkey {self.public_key.decode()}>"


def from_seed(seed) -> KeyPair:
    prefix, raw = decode_seed(seed)
    return KeyPair(prefix, _ed25519_public(raw), raw)


def from_public_key(key) -> KeyPair:
    prefix, raw = decode_public_key(key)
    return KeyPair(prefix, raw)


def _create(prefix: int) -> KeyPair:
    raw = os.urandom(32)
    return KeyPair(prefix, _ed25519_public(raw), raw)


def _ed25519_public(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


def create_user() -> KeyPair:
    return _create(PREFIX_USER)


def create_account() -> KeyPair:
    return _create(PREFIX_ACCOUNT)


def create_operator() -> KeyPair:
    return _create(PREFIX_OPERATOR)


def create_server() -> KeyPair:
    return _create(PREFIX_SERVER)


def create_curve_keys() -> tuple[str, bytes]:
    """An x25519 key pair as nkeys.CreateCurveKeys makes it: the public key as nkey text
    (``X...``, 56 characters) and the 32-byte private key. nats-server 2.10+ announces the
    public one in INFO ``xkey`` (server.go NewServer) for messages encrypted to the server.
    The public key is derived by natserver.auth.x25519 (~2 ms), not ``cryptography`` (~22 ms
    to import), as the early greeting sends it before the heavy imports."""
    private = os.urandom(32)
    return encode_public_key(PREFIX_CURVE, x25519.public_key(private)).decode(), private


# nkeys package names nats-py and other tools use.
ErrInvalidSeed = NkeyError
