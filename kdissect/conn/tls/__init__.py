"""TLS decryption with key logs: the layer between TCP reassembly and Kafka framing.

    keylog = read_keylog_files(["client.keys"])        # or parse_decryption_secrets(dsb_data)
    tls = TlsConnection(keylog, plaintext, client_direction)  # one per TLS connection
    tcp.sinks = tls.ciphertext_sinks()    # DirectionSinks: ciphertext in, plaintext.sinks hear the plaintext
    tls.finish()                          # the last plaintext goes on
    totals.add(tls.stats)                 # TlsStats; totals.summary_line()

`looks_like_client_hello(first_client_bytes)` (or the three-way
`client_hello_verdict`) detects TLS by shape on any port.
"""

from kdissect.conn.tls.connection import CiphertextSink, TlsConnection
from kdissect.conn.tls.handshake import client_hello_verdict, looks_like_client_hello
from kdissect.conn.tls.keylog import (
    DSB_TLS_KEY_LOG,
    EMPTY_KEYLOG,
    KeyLog,
    parse_decryption_secrets,
    parse_keylog_bytes,
    parse_keylog_text,
    read_keylog_file,
    read_keylog_files,
)
from kdissect.conn.tls.stats import TlsStats

__all__ = [
    "CiphertextSink",
    "DSB_TLS_KEY_LOG",
    "EMPTY_KEYLOG",
    "KeyLog",
    "TlsConnection",
    "TlsStats",
    "client_hello_verdict",
    "looks_like_client_hello",
    "parse_decryption_secrets",
    "parse_keylog_bytes",
    "parse_keylog_text",
    "read_keylog_file",
    "read_keylog_files",
]
