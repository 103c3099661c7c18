"""X25519's public key of a private key (RFC 7748 section 5), in Python's integers.

Why not ``cryptography``, which the rest of natserver.auth uses: the server's INFO carries an
x25519 public key (``xkey``, nats-server 2.10+), and the early greeting (server/early.py) sends
that INFO before the heavy imports. Importing ``cryptography``'s x25519 (with ``typing``, its
Rust bindings and cffi) took ~22 ms of the ~95 ms from exec to the first client's INFO (issue
#33's target: 100 ms); deriving the public key here takes ~1 ms. Only the public key is made
here; anything that uses the private key (decrypting) does it with ``cryptography``, and
tests/auth check this derivation against it and against RFC 7748's vectors.

Python's integers are not constant-time: this runs once per server start, on a key of its own,
before any peer can time it.
"""

from __future__ import annotations

__all__ = ["public_key"]

_P = 2**255 - 19  # the field's prime
_A24 = 121665  # (486662 - 2) / 4, RFC 7748 section 5
_BASE_U = 9  # the base point's u-coordinate


def _clamp(scalar: bytes) -> int:
    """decodeScalar25519: the low three bits and the top bit cleared, bit 254 set."""
    k = bytearray(scalar)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return int.from_bytes(k, "little")


def _ladder(k: int, u: int) -> int:
    """The Montgomery ladder of RFC 7748 section 5: the u-coordinate of k times the point u."""
    x1, x2, z2, x3, z3 = u, 1, 0, u, 1
    swap = 0
    p = _P
    for t in range(254, -1, -1):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a = x2 + z2
        aa = a * a % p
        b = x2 - z2
        bb = b * b % p
        e = aa - bb
        c = x3 + z3
        d = x3 - z3
        da = d * a % p
        cb = c * b % p
        x3 = (da + cb) ** 2 % p
        z3 = x1 * (da - cb) ** 2 % p
        x2 = aa * bb % p
        z2 = e * (aa + _A24 * e) % p
    if swap:
        x2, z2 = x3, z3
    return x2 * pow(z2, p - 2, p) % p


def scalar_mult(scalar: bytes, u: bytes) -> bytes:
    """X25519(scalar, u) of RFC 7748: 32 bytes little-endian each (u's top bit ignored)."""
    if len(scalar) != 32 or len(u) != 32:
        raise ValueError("X25519 takes 32-byte scalars and u-coordinates")
    u_int = int.from_bytes(u, "little") & ((1 << 255) - 1)
    return _ladder(_clamp(scalar), u_int % _P).to_bytes(32, "little")


def public_key(private: bytes) -> bytes:
    """The 32-byte public key of a 32-byte private key (X25519 of the base point)."""
    return scalar_mult(private, _BASE_U.to_bytes(32, "little"))
