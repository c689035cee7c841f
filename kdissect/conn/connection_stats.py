"""The connection layer's counts (kdissect.conn.pipeline's Dissector writes
them). Apart from the pipeline, which is compiled (kdissect/native.py): a
Counts keeps the counters it changed in its __dict__, which a compiled
class has not."""

from __future__ import annotations

from kdissect.model.accounting import Counts


class ConnectionStats(Counts):
    """The connection layer's counts: the segments fed, the connections by
    kind, the bytes of the connections that are not Kafka, TLS. The dissector
    writes only here and folds them (and the pairing layer's PairingStats)
    into its Accounting (same field names) at the end of the run; the
    reassembler's and the framing readers' counts fold in beside them."""

    segments: int = 0
    payload_bytes: int = 0
    connections: int = 0
    empty_connections: int = 0
    kafka_connections: int = 0
    non_kafka_connections: int = 0
    non_kafka_bytes: int = 0
    tls_connections: int = 0
    encrypted_connections: int = 0
    tls_bytes: int = 0
    tls_plaintext_bytes: int = 0
    tls_other_bytes: int = 0
    evicted_connections: int = 0
    gaps: int = 0
