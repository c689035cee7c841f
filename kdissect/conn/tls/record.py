"""Record protection: one object per traffic key, opening TLS records.

`open(header, payload, seq)` returns `(content_type, plaintext)` or None
when the record does not authenticate (wrong key, wrong sequence number,
damaged bytes). `find(header, payload, seqs)` tries several sequence numbers
(after a capture gap the count of lost records is unknown) and returns
`(seq, content_type, plaintext)` or None.

The AEAD object is made once per key; the per-record nonce is an int xor.
No object here shows its key material in repr or in an exception.
"""

from __future__ import annotations

import hmac
from typing import Iterable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305

from kdissect.conn.tls.schedule import HASH_LENGTHS, next_traffic_secret13, traffic_keys13
from kdissect.conn.tls.suites import AES_CCM, AES_CCM_8, AES_GCM, CHACHA20_POLY1305, CipherSuite

HEADER = 5
# Largest ciphertext (the record header's length field) a peer may send.
MAX_CIPHERTEXT_12 = (1 << 14) + 2048
MAX_CIPHERTEXT_13 = (1 << 14) + 256


def _aead(suite: CipherSuite, key: bytes) -> AESGCM | AESCCM | ChaCha20Poly1305:
    if suite.cipher == AES_GCM:
        return AESGCM(key)
    if suite.cipher == AES_CCM:
        return AESCCM(key, tag_length=16)
    if suite.cipher == AES_CCM_8:
        return AESCCM(key, tag_length=8)
    if suite.cipher == CHACHA20_POLY1305:
        return ChaCha20Poly1305(key)
    raise ValueError(f"not an AEAD cipher: {suite.name}")


class RecordCipher:
    """Base: the shared `find` and a repr free of key material."""

    __slots__ = ("suite", "overhead", "exact_overhead", "max_ciphertext")

    suite: CipherSuite
    overhead: int  # wire bytes per record that are not plaintext (header included)
    exact_overhead: bool  # False where padding makes it an estimate (CBC)
    max_ciphertext: int

    def open(self, header: bytes, payload: bytes, seq: int) -> tuple[int, bytes] | None:
        raise NotImplementedError

    def find(self, header: bytes, payload: bytes, seqs: Iterable[int]) -> tuple[int, int, bytes] | None:
        opener = self.open
        for seq in seqs:
            opened = opener(header, payload, seq)
            if opened is not None:
                return seq, opened[0], opened[1]
        return None

    def seq_hint(self, payload: bytes) -> int | None:
        """A likely sequence number read from the record itself, if any."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.suite.name})"


class Tls13Cipher(RecordCipher):
    """A TLS 1.3 traffic secret's record protection (RFC 8446 section 5.2)."""

    __slots__ = ("_secret", "_aead", "_iv", "generation")

    def __init__(self, suite: CipherSuite, secret: bytes, generation: int = 0) -> None:
        self.suite = suite
        self._secret = secret
        key, iv = traffic_keys13(suite.prf_hash, secret, suite.key_length)
        self._aead = _aead(suite, key)
        self._iv = int.from_bytes(iv, "big")
        self.generation = generation  # KeyUpdates since traffic secret 0 (or the handshake secret)
        self.overhead = HEADER + suite.tag_length + 1  # plus padding, which senders rarely add
        self.exact_overhead = True
        self.max_ciphertext = MAX_CIPHERTEXT_13

    def open(self, header: bytes, payload: bytes, seq: int) -> tuple[int, bytes] | None:
        try:
            inner = self._aead.decrypt((self._iv ^ seq).to_bytes(12, "big"), payload, header)
        except InvalidTag:
            return None
        end = len(inner)
        while end and not inner[end - 1]:  # zero padding after the real content type
            end -= 1
        if not end:
            return None  # all padding: not a valid record
        return inner[end - 1], inner[:end - 1]

    def updated(self) -> Tls13Cipher:
        """The cipher after a KeyUpdate: the next traffic secret."""
        return Tls13Cipher(self.suite, next_traffic_secret13(self.suite.prf_hash, self._secret), self.generation + 1)


class Tls12AeadCipher(RecordCipher):
    """TLS 1.2 AEAD records: AES-GCM/CCM (RFC 5288, 6655: 4-byte salt from the
    key block + 8-byte explicit nonce in the record) and ChaCha20-Poly1305
    (RFC 7905: 12-byte IV xor the sequence number, no explicit nonce)."""

    __slots__ = ("_aead", "_salt", "_iv", "_explicit", "_tag")

    def __init__(self, suite: CipherSuite, key: bytes, fixed_iv: bytes) -> None:
        self.suite = suite
        self._aead = _aead(suite, key)
        self._explicit = suite.cipher != CHACHA20_POLY1305
        self._salt = fixed_iv if self._explicit else b""
        self._iv = 0 if self._explicit else int.from_bytes(fixed_iv, "big")
        self._tag = suite.tag_length
        self.overhead = HEADER + (8 if self._explicit else 0) + self._tag
        self.exact_overhead = True
        self.max_ciphertext = MAX_CIPHERTEXT_12

    def open(self, header: bytes, payload: bytes, seq: int) -> tuple[int, bytes] | None:
        if self._explicit:
            nonce = self._salt + payload[:8]
            body = payload[8:]
        else:
            nonce = (self._iv ^ seq).to_bytes(12, "big")
            body = payload
        plain_length = len(body) - self._tag
        if plain_length < 0:
            return None
        aad = seq.to_bytes(8, "big") + header[:3] + plain_length.to_bytes(2, "big")
        try:
            return header[0], self._aead.decrypt(nonce, body, aad)
        except InvalidTag:
            return None

    def seq_hint(self, payload: bytes) -> int | None:
        # OpenSSL, Go and others send the sequence number as the explicit nonce
        if self._explicit and len(payload) >= 8:
            return int.from_bytes(payload[:8], "big")
        return None


class Tls12CbcCipher(RecordCipher):
    """TLS 1.2 AES-CBC with HMAC: explicit per-record IV; MAC-then-encrypt, or
    encrypt-then-MAC when both sides agreed on RFC 7366's extension."""

    __slots__ = ("_mac_key", "_mac_hash", "_mac_length", "_algorithm", "_etm")

    def __init__(self, suite: CipherSuite, mac_key: bytes, key: bytes, encrypt_then_mac: bool) -> None:
        assert suite.mac_hash is not None
        self.suite = suite
        self._mac_key = mac_key
        self._mac_hash = suite.mac_hash
        self._mac_length = HASH_LENGTHS[suite.mac_hash]
        self._algorithm = algorithms.AES(key)
        self._etm = encrypt_then_mac
        # padding is 1 to 16 bytes with the usual minimal padding: 8 is the middle
        self.overhead = HEADER + 16 + self._mac_length + 8
        self.exact_overhead = False
        self.max_ciphertext = MAX_CIPHERTEXT_12

    def open(self, header: bytes, payload: bytes, seq: int) -> tuple[int, bytes] | None:
        found = self.find(header, payload, (seq,))
        return None if found is None else (found[1], found[2])

    def _decrypt(self, iv: bytes, ciphertext: bytes) -> bytes | None:
        """CBC-decrypt and strip the padding; None if the padding is wrong."""
        if not ciphertext or len(ciphertext) % 16:
            return None
        decryptor = Cipher(self._algorithm, modes.CBC(iv)).decryptor()
        plain = decryptor.update(ciphertext) + decryptor.finalize()
        pad = plain[-1]
        if pad + 1 > len(plain) or plain[-pad - 1:] != bytes([pad]) * (pad + 1):
            return None
        return plain[:-pad - 1]

    def find(self, header: bytes, payload: bytes, seqs: Iterable[int]) -> tuple[int, int, bytes] | None:
        mac_length = self._mac_length
        mac_key, mac_hash = self._mac_key, self._mac_hash
        prefix = header[:3]
        if self._etm:
            if len(payload) < 16 + 16 + mac_length:
                return None
            protected, tag = payload[:-mac_length], payload[-mac_length:]
            tail = prefix + len(protected).to_bytes(2, "big") + protected
            for seq in seqs:
                if hmac.compare_digest(hmac.digest(mac_key, seq.to_bytes(8, "big") + tail, mac_hash), tag):
                    content = self._decrypt(protected[:16], protected[16:])
                    return None if content is None else (seq, header[0], content)
            return None
        plain = self._decrypt(payload[:16], payload[16:])
        if plain is None or len(plain) < mac_length:
            return None
        content, tag = plain[:len(plain) - mac_length], plain[len(plain) - mac_length:]
        tail = prefix + len(content).to_bytes(2, "big") + content
        for seq in seqs:
            if hmac.compare_digest(hmac.digest(mac_key, seq.to_bytes(8, "big") + tail, mac_hash), tag):
                return seq, header[0], content
        return None
