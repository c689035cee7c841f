"""Hints after a run that found less than the user expected: nothing decoded
(which ports carried TCP payload, try --port) and TLS without keys (where
keys come from). One line each, for stderr; no captured text in them."""

from __future__ import annotations

from typing import Any


def run_hints(analysis: Any) -> list[str]:
    """The hint lines for a finished Analysis (or a Selected one)."""
    accounting = analysis.accounting
    dissector = analysis.dissector
    hints: list[str] = []
    if accounting.encrypted_connections:
        count = accounting.encrypted_connections
        hints.append(f"hint: {count} TLS connection{'s' if count != 1 else ''} could not be decrypted: give the "
                     "session keys with --tls-keylog FILE (an SSLKEYLOGFILE, Java/Go/Python key log) or embed "
                     "them in the pcapng (editcap --inject-secrets tls,FILE)")
    if accounting.exchanges == 0:
        ports = sorted(getattr(dissector, "other_ports", {}).items(), key=lambda item: (-item[1], item[0]))
        if ports:
            named = ", ".join(f"{port} ({n} connection{'s' if n != 1 else ''})" for port, n in ports[:5])
            more = f" and {len(ports) - 5} more" if len(ports) > 5 else ""
            plural = "s" if len(ports) != 1 else ""
            hints.append(f"decoded nothing: no Kafka exchange found; TCP payload was carried on port{plural} "
                         f"{named}{more}: if Kafka listens there, add --port {ports[0][0]}")
        elif accounting.kafka_connections == 0 and not accounting.encrypted_connections:
            hints.append("decoded nothing: the captures hold no TCP payload")
        elif accounting.encrypted_connections and not accounting.kafka_connections:
            hints.append("decoded nothing: the connections found are TLS without keys (hint above)")
        else:
            hints.append("decoded nothing: no complete Kafka exchange was found")
    return hints
