"""natserver.auth.x25519 (the xkey's public key without importing ``cryptography``) against
RFC 7748's test vectors and against ``cryptography``'s X25519."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.auth import x25519

# RFC 7748 section 5.2: (scalar, u, X25519(scalar, u)).
VECTORS = [
    ("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
     "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
     "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"),
    ("4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
     "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
     "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957"),
]
# RFC 7748 section 6.1: Alice's and Bob's private keys, their public keys.
ALICE = ("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
         "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
BOB = ("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
       "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")


@pytest.mark.parametrize(("scalar", "u", "out"), VECTORS)
def test_rfc7748_vectors(scalar, u, out):
    assert x25519.scalar_mult(bytes.fromhex(scalar), bytes.fromhex(u)).hex() == out


@pytest.mark.parametrize(("private", "public"), [ALICE, BOB])
def test_rfc7748_key_pairs(private, public):
    assert x25519.public_key(bytes.fromhex(private)).hex() == public


def test_shared_secret_agrees_with_rfc7748():
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert x25519.scalar_mult(bytes.fromhex(ALICE[0]), bytes.fromhex(BOB[1])).hex() == shared
    assert x25519.scalar_mult(bytes.fromhex(BOB[0]), bytes.fromhex(ALICE[1])).hex() == shared


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_public_key_is_cryptographys(private):
    expected = X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()
    assert x25519.public_key(private) == expected


@pytest.mark.parametrize(("scalar", "u"), [(b"", bytes(32)), (bytes(32), b"\x09"), (bytes(33), bytes(32))])
def test_wrong_lengths_are_refused(scalar, u):
    with pytest.raises(ValueError):
        x25519.scalar_mult(scalar, u)
