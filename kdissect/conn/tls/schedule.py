"""The key schedules: from the secrets a key log gives to record keys.

TLS 1.2 (RFC 5246 section 5 and 6.3): the master secret (the key log's
CLIENT_RANDOM line) expands with P_hash into the key block
    client MAC key | server MAC key | client key | server key | client IV | server IV.
TLS 1.3 (RFC 8446 section 7): each traffic secret (the key log's
*_TRAFFIC_SECRET lines) gives its record key and IV with HKDF-Expand-Label,
and a KeyUpdate replaces it with HKDF-Expand-Label(secret, "traffic upd").

Nothing here keeps or prints a secret; the callers hold the results.
"""

from __future__ import annotations

import hmac
from typing import NamedTuple

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

_HASHES = {"sha256": hashes.SHA256, "sha384": hashes.SHA384}
HASH_LENGTHS = {"sha1": 20, "sha256": 32, "sha384": 48}


def p_hash(hash_name: str, secret: bytes, seed: bytes, length: int) -> bytes:
    """P_hash of RFC 5246 section 5: HMAC chained over A(i) until `length` bytes."""
    out = bytearray()
    a = seed
    while len(out) < length:
        a = hmac.digest(secret, a, hash_name)
        out += hmac.digest(secret, a + seed, hash_name)
    return bytes(out[:length])


def prf12(hash_name: str, secret: bytes, label: bytes, seed: bytes, length: int) -> bytes:
    """The TLS 1.2 PRF: P_<hash>(secret, label + seed)."""
    return p_hash(hash_name, secret, label + seed, length)


class KeyBlock12(NamedTuple):
    client_mac: bytes
    server_mac: bytes
    client_key: bytes
    server_key: bytes
    client_iv: bytes
    server_iv: bytes

    def __repr__(self) -> str:  # key material never printed
        return "KeyBlock12(<keys>)"


def key_block12(hash_name: str, master_secret: bytes, client_random: bytes, server_random: bytes,
                mac_length: int, key_length: int, iv_length: int) -> KeyBlock12:
    """Split the TLS 1.2 key block (note: server_random first in the seed)."""
    sizes = (mac_length, mac_length, key_length, key_length, iv_length, iv_length)
    block = prf12(hash_name, master_secret, b"key expansion", server_random + client_random, sum(sizes))
    parts = []
    pos = 0
    for size in sizes:
        parts.append(block[pos:pos + size])
        pos += size
    return KeyBlock12(*parts)


def hkdf_expand_label(hash_name: str, secret: bytes, label: bytes, context: bytes, length: int) -> bytes:
    """HKDF-Expand-Label of RFC 8446 section 7.1 ("tls13 " prefixed label)."""
    full_label = b"tls13 " + label
    info = length.to_bytes(2, "big") + bytes([len(full_label)]) + full_label + bytes([len(context)]) + context
    return HKDFExpand(_HASHES[hash_name](), length, info).derive(secret)


def traffic_keys13(hash_name: str, secret: bytes, key_length: int, iv_length: int = 12) -> tuple[bytes, bytes]:
    """(key, iv) of a TLS 1.3 traffic secret."""
    return (hkdf_expand_label(hash_name, secret, b"key", b"", key_length),
            hkdf_expand_label(hash_name, secret, b"iv", b"", iv_length))


def next_traffic_secret13(hash_name: str, secret: bytes) -> bytes:
    """The traffic secret after a KeyUpdate (RFC 8446 section 7.2)."""
    return hkdf_expand_label(hash_name, secret, b"traffic upd", b"", len(secret))
