"""The pairing layer's counts: frames by outcome, exchanges by status, the
held requests and responses. The Pairer (kdissect.conn.pairing) and its holds
(kdissect.conn.holds) write only here; the dissector folds them into its
Accounting (kdissect.model.accounting, same field names) at the end of the run."""

from __future__ import annotations

from kdissect.model.accounting import Counts


class PairingStats(Counts):
    request_frames: int = 0
    response_frames: int = 0
    decoded_frames: int = 0
    malformed_frames: int = 0
    truncated_frames: int = 0
    undecoded_frames: int = 0
    raw_sasl_frames: int = 0
    unreadable_responses: int = 0
    inexact_frames: int = 0
    exchanges: int = 0
    ok: int = 0
    ok_with_errors: int = 0
    ok_normal_flow_only: int = 0
    inexact: int = 0
    no_response: int = 0
    orphan_responses: int = 0
    malformed: int = 0
    truncated: int = 0
    sent_while_muted: int = 0
    acks0_requests: int = 0
    acks0_answered: int = 0
    acks0_released: int = 0
    early_responses: int = 0
    assumed_apis: int = 0
    ambiguous_apis: int = 0
    unknown_apis: int = 0
