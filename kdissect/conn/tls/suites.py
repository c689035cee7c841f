"""The cipher suites kdissect decrypts, by their IANA code.

A suite not listed here is counted as an unsupported cipher suite (its
connection's bytes are left encrypted): export, NULL, RC4, 3DES, Camellia,
ARIA and the PSK key exchanges' variants not below.
"""

from __future__ import annotations

from dataclasses import dataclass

AES_GCM = "AES-GCM"
AES_CCM = "AES-CCM"
AES_CCM_8 = "AES-CCM-8"
CHACHA20_POLY1305 = "CHACHA20-POLY1305"
AES_CBC = "AES-CBC"


@dataclass(frozen=True, slots=True)
class CipherSuite:
    code: int
    name: str
    tls13: bool  # a TLS 1.3 suite (0x13xx)
    cipher: str  # one of the constants above
    key_length: int
    prf_hash: str  # "sha256" | "sha384": the PRF (1.2) or HKDF (1.3) hash
    mac_hash: str | None = None  # CBC suites: the record HMAC's hash ("sha1", "sha256", "sha384")

    @property
    def aead(self) -> bool:
        return self.cipher != AES_CBC

    @property
    def tag_length(self) -> int:
        return 8 if self.cipher == AES_CCM_8 else 16


def _suites() -> dict[int, CipherSuite]:
    table: list[tuple[int, str, str, int, str, str | None]] = [
        # TLS 1.3
        (0x1301, "TLS_AES_128_GCM_SHA256", AES_GCM, 16, "sha256", None),
        (0x1302, "TLS_AES_256_GCM_SHA384", AES_GCM, 32, "sha384", None),
        (0x1303, "TLS_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, 32, "sha256", None),
        (0x1304, "TLS_AES_128_CCM_SHA256", AES_CCM, 16, "sha256", None),
        (0x1305, "TLS_AES_128_CCM_8_SHA256", AES_CCM_8, 16, "sha256", None),
        # TLS 1.2 AES-GCM
        (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", AES_GCM, 16, "sha256", None),
        (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", AES_GCM, 32, "sha384", None),
        (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", AES_GCM, 16, "sha256", None),
        (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", AES_GCM, 32, "sha384", None),
        (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", AES_GCM, 16, "sha256", None),
        (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", AES_GCM, 32, "sha384", None),
        (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", AES_GCM, 16, "sha256", None),
        (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", AES_GCM, 32, "sha384", None),
        # TLS 1.2 ChaCha20-Poly1305 (RFC 7905)
        (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, 32, "sha256", None),
        (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, 32, "sha256", None),
        (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, 32, "sha256", None),
        # TLS 1.2 AES-CCM (RFC 6655, RFC 7251)
        (0xC09C, "TLS_RSA_WITH_AES_128_CCM", AES_CCM, 16, "sha256", None),
        (0xC09D, "TLS_RSA_WITH_AES_256_CCM", AES_CCM, 32, "sha256", None),
        (0xC09E, "TLS_DHE_RSA_WITH_AES_128_CCM", AES_CCM, 16, "sha256", None),
        (0xC09F, "TLS_DHE_RSA_WITH_AES_256_CCM", AES_CCM, 32, "sha256", None),
        (0xC0A0, "TLS_RSA_WITH_AES_128_CCM_8", AES_CCM_8, 16, "sha256", None),
        (0xC0A1, "TLS_RSA_WITH_AES_256_CCM_8", AES_CCM_8, 32, "sha256", None),
        (0xC0A2, "TLS_DHE_RSA_WITH_AES_128_CCM_8", AES_CCM_8, 16, "sha256", None),
        (0xC0A3, "TLS_DHE_RSA_WITH_AES_256_CCM_8", AES_CCM_8, 32, "sha256", None),
        (0xC0AC, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM", AES_CCM, 16, "sha256", None),
        (0xC0AD, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM", AES_CCM, 32, "sha256", None),
        (0xC0AE, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", AES_CCM_8, 16, "sha256", None),
        (0xC0AF, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8", AES_CCM_8, 32, "sha256", None),
        # TLS 1.2 AES-CBC with HMAC (what Java brokers still offer)
        (0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA", AES_CBC, 16, "sha256", "sha1"),
        (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA", AES_CBC, 32, "sha256", "sha1"),
        (0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256", AES_CBC, 16, "sha256", "sha256"),
        (0x003D, "TLS_RSA_WITH_AES_256_CBC_SHA256", AES_CBC, 32, "sha256", "sha256"),
        (0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA", AES_CBC, 16, "sha256", "sha1"),
        (0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA", AES_CBC, 32, "sha256", "sha1"),
        (0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", AES_CBC, 16, "sha256", "sha256"),
        (0x006B, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", AES_CBC, 32, "sha256", "sha256"),
        (0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", AES_CBC, 16, "sha256", "sha1"),
        (0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", AES_CBC, 32, "sha256", "sha1"),
        (0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", AES_CBC, 16, "sha256", "sha1"),
        (0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", AES_CBC, 32, "sha256", "sha1"),
        (0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", AES_CBC, 16, "sha256", "sha256"),
        (0xC024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", AES_CBC, 32, "sha384", "sha384"),
        (0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", AES_CBC, 16, "sha256", "sha256"),
        (0xC028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", AES_CBC, 32, "sha384", "sha384"),
    ]
    return {code: CipherSuite(code, name, code >> 8 == 0x13, cipher, key_length, prf, mac)
            for code, name, cipher, key_length, prf, mac in table}


SUITES: dict[int, CipherSuite] = _suites()


def suite_name(code: int) -> str:
    suite = SUITES.get(code)
    return suite.name if suite is not None else f"0x{code:04X}"
