"""The problems an exchange can carry: a stable code beside the human text.

Rows carry `problems` (texts, which name the details: offsets, byte counts,
versions) and `problem_codes` (one code per text, from `CATALOG`), so tables
can group and users can search by code. Codes never change meaning; new ones
are added here, with the sentence the README's table shows.
"""

from __future__ import annotations

# code -> what it means (the README lists this table; every code is written by some
# `Exchange.add_problem` call: tests/model/test_problems.py)
CATALOG: dict[str, str] = {
    "request-truncated": "bytes of the request were lost or cut by the snaplen",
    "response-truncated": "bytes of the response were lost or cut by the snaplen",
    "request-malformed": "the request does not decode (offset and field path in the text)",
    "response-malformed": "the response does not decode (offset and field path in the text)",
    "decoder-failed": "the decoder itself failed on these bytes (a kdissect bug; the text names it)",
    "trailing-bytes": "bytes after a complete message body, ignored (brokers accept them)",
    "correlation-id-reused": "a later request reused the correlation id before any response",
    "no-response": "no response seen before the connection closed or the capture ended",
    "response-to-acks0": "the broker answered a Produce request sent with acks=0",
    "request-not-captured": "a response whose request is not in the capture",
    "api-assumed": "the response's API and version were inferred by trial decoding",
    "api-ambiguous": "several API versions decode the response exactly; none is applied (the text names them)",
    "api-unknown": "no API version decodes the response exactly (or it was not tried: the text says)",
    "response-lost-bytes": "bytes were lost in the response stream while the request waited",
    "assumed-version": "a body was decoded with an assumed version: one newer than known, or defined only for "
                       "the other direction (the text says which)",
    "assumed-version-leftover": "a body decoded with an assumed version left bytes over: its layout is not the "
                                "assumed one, so fields are missing and values may be wrong (status inexact)",
    "records": "a problem inside the records (CRC mismatch, decompression limit, bad framing)",
    "sent-while-muted": "the client sent on a connection the broker had muted for throttling (KIP-219)",
}


def code_of(code: str) -> str:
    """`code`, checked against the catalog (a typo is a bug, caught in tests)."""
    if code not in CATALOG:
        raise KeyError(f"unknown problem code {code!r}")
    return code
