"""What the TLS layer did: additive counters, like kdissect.model.accounting."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

# reasons a connection's bytes were left encrypted (TlsStats.reasons keys)
NO_KEY = "no key for this client random"
UNSUPPORTED_SUITE = "unsupported cipher suite"
UNSUPPORTED_VERSION = "unsupported TLS version"
HANDSHAKE_NOT_CAPTURED = "handshake not captured"
DECRYPTION_FAILED = "decryption failed"
LOST_SYNC = "record boundaries lost after a gap"
EARLY_DATA = "0-RTT early data not decrypted"
NOT_TLS = "not TLS records"
CAPTURE_GAP = "records lost in capture gaps"


@dataclass(slots=True)
class TlsStats:
    connections: int = 0  # TLS connections seen
    decrypted: int = 0  # every encrypted byte decrypted
    partly_decrypted: int = 0  # some decrypted, some left encrypted
    undecrypted: int = 0  # encrypted bytes, none decrypted (see reasons)
    no_encrypted_data: int = 0  # the connection never got past its plaintext handshake
    tls12: int = 0  # connections by negotiated version
    tls13: int = 0
    resumed: int = 0  # abbreviated 1.2 handshakes (session id or ticket), 1.3 PSK handshakes
    hello_retry_requests: int = 0
    renegotiations: int = 0
    key_updates: int = 0
    records: int = 0  # records decrypted
    failed_records: int = 0  # records that did not authenticate
    plaintext_bytes: int = 0  # application data bytes handed on
    undecrypted_bytes: int = 0  # captured encrypted bytes left encrypted
    lost_bytes: int = 0  # encrypted-stream bytes the capture lacks (gaps, snaplen)
    plaintext_gap_bytes: int = 0  # application bytes reported lost (gap chunks handed on)
    resyncs: int = 0  # record boundaries found again after lost bytes
    alerts: int = 0
    close_notifies: int = 0
    change_cipher_specs: int = 0
    reasons: Counter = field(default_factory=Counter)  # reason -> connections
    suites: Counter = field(default_factory=Counter)  # suite name -> connections

    def add(self, other: TlsStats) -> None:
        """In-place sum."""
        for f in fields(self):
            if f.name in ("reasons", "suites"):
                getattr(self, f.name).update(getattr(other, f.name))
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def __add__(self, other: TlsStats) -> TlsStats:
        total = TlsStats()
        total.add(self)
        total.add(other)
        return total

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if isinstance(value, Counter) else value
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TlsStats:
        stats = cls()
        for f in fields(cls):
            if f.name not in values:
                continue
            value = values[f.name]
            if f.name in ("reasons", "suites"):
                setattr(stats, f.name, Counter({str(k): int(v) for k, v in (value or {}).items()}))
            else:
                setattr(stats, f.name, int(value or 0))
        return stats

    def summary_line(self) -> str:
        """E.g. 'tls: 5 connections, 4 decrypted, 1 not decrypted (310 bytes
        left encrypted): 1 no key for this client random'."""
        parts = [f"{self.decrypted} decrypted"]
        if self.partly_decrypted:
            parts.append(f"{self.partly_decrypted} partly decrypted")
        parts.append(f"{self.undecrypted} not decrypted ({self.undecrypted_bytes} bytes left encrypted)")
        if self.no_encrypted_data:
            parts.append(f"{self.no_encrypted_data} without encrypted data")
        line = f"tls: {self.connections} connections, " + ", ".join(parts)
        if self.reasons:
            line += ": " + ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))
        return line
