"""The short cuts taken for chatty captures (issue #3) against the general code.

Pairing handles the common skimmed request and response in one go, and
`Dissector.feed_many` binds each started Kafka direction's reader and pair
handler once. Crafted conversations walk every way out of those short cuts
(correlation id reuse, early responses, acks=0, SASL, truncation, errors, a
TLS client after the broker already spoke); the rows and the accounting must
equal those of the full decoders (keep_messages=True, which never takes the
pairing short cut) and of `feed` (which never takes feed_many's binding).
"""

from __future__ import annotations

import struct

from kdissect.model.exchange import NO_RESPONSE, OK, ORPHAN_RESPONSE, TRUNCATED
from kdissect.conn.pipeline import Dissector
from tests.support.pipeline import (
    Conversation,
    heartbeat_request,
    heartbeat_response,
    kstring,
    metadata_request,
    metadata_response,
    produce_v0_request,
    produce_v0_response,
    sasl_handshake_request,
    sasl_handshake_response,
    sized,
)


def _outcome(segments: list, keep: bool, many: bool) -> tuple[list[dict], dict]:
    dissector = Dissector((9092,), True, ["crafted.pcap"], keep_messages=keep)
    exchanges = []
    if many:
        exchanges += dissector.feed_many(segments)
    else:
        for segment in segments:
            exchanges += dissector.feed(segment)
    exchanges += dissector.finish()
    return [ex.to_row() for ex in exchanges], dissector.accounting.to_dict()


def _all_ways(segments: list) -> tuple[list[dict], dict]:
    """The one outcome of the four ways to dissect `segments` (asserts they agree)."""
    reference = _outcome(segments, keep=True, many=False)
    for keep, many in ((False, False), (False, True), (True, True)):
        assert _outcome(segments, keep, many) == reference, (keep, many)
    return reference


def _busy_conversation() -> Conversation:
    c = Conversation().handshake()
    for cid in range(1, 4):  # plain pipelined exchanges
        c.send(heartbeat_request(cid))
    for cid in range(1, 4):
        c.reply(heartbeat_response(cid))
    c.send(heartbeat_request(5))  # correlation id reused before the answer
    c.send(heartbeat_request(5))
    c.reply(heartbeat_response(5))
    c.reply(heartbeat_response(9, error_code=27))  # answer before its request
    c.send(heartbeat_request(9))
    c.send(produce_v0_request(10, acks=0))  # expects no response ...
    c.send(produce_v0_request(11, acks=0))
    c.reply(produce_v0_response(11))  # ... but one is answered anyway
    c.send(metadata_request(12, ["a", "b"]))
    c.reply(metadata_response(12, [("a", 0), ("b", 3)]))
    c.send(produce_v0_request(13, acks=1))
    c.truncated(False, produce_v0_response(13), 10)  # response cut by the snaplen (cid kept)
    c.send(heartbeat_request(14))
    c.reply(heartbeat_response(14))
    c.send(sasl_handshake_request(15))
    c.reply(sasl_handshake_response(15))
    c.send(sized(b"\x00user\x00secret"))  # raw SASL token and its answer
    c.reply(sized(b""))
    c.send(heartbeat_request(16))  # Kafka again
    c.reply(heartbeat_response(16))
    c.send(heartbeat_request(17))  # never answered
    c.close()
    return c


def test_every_way_out_of_the_short_cuts_agrees_with_the_general_code() -> None:
    rows, accounting = _all_ways(_busy_conversation().segments)
    by_cid: dict[int | None, list[dict]] = {}
    for row in rows:
        by_cid.setdefault(row["correlation_id"], []).append(row)
    # hand-checked expectations, independent of both code paths
    assert [r["status"] for r in by_cid[1] + by_cid[2] + by_cid[3]] == [OK] * 3
    assert sorted(r["status"] for r in by_cid[5]) == [NO_RESPONSE, OK]
    reused = next(r for r in by_cid[5] if r["status"] == NO_RESPONSE)
    assert reused["problems"] == ["correlation id reused by a later request before any response"]
    assert [(r["status"], r["error_code"], r["api_name"]) for r in by_cid[9]] == [(OK, 27, "Heartbeat")]
    assert by_cid[10][0]["status"] == OK and by_cid[10][0]["response_frame"] is None
    assert by_cid[11][0]["problems"] == ["response to a request that asked for none (acks=0)"]
    assert by_cid[12][0]["error_codes"] == [3]
    assert by_cid[13][0]["status"] == TRUNCATED and by_cid[13][0]["response_bytes"] == 8
    assert by_cid[16][0]["status"] == OK and by_cid[17][0]["status"] == NO_RESPONSE
    assert not any(r["status"] == ORPHAN_RESPONSE for r in rows)
    assert accounting["raw_sasl_frames"] == 2 and accounting["truncated_frames"] == 1
    assert accounting["exchanges"] == len(rows) == 14  # cids 1-3, 5 twice, 9-17


def test_a_connection_whose_client_opens_with_tls_after_the_broker_spoke_is_not_kafka() -> None:
    # The broker speaks first (its bytes wait for the client's first ones),
    # then the client opens with a TLS record: the connection is TLS (without
    # keys, not decrypted), and all its bytes, the broker's first ones too,
    # count as TLS bytes.
    c = Conversation().handshake()
    c.reply(heartbeat_response(1))
    c.reply(heartbeat_response(2))
    c.reply(heartbeat_response(3))
    c.send(b"\x16\x03\x01\x00\x30" + bytes(0x30))
    c.reply(b"\x16\x03\x03" + bytes(40))
    c.reply(heartbeat_response(4))
    c.close()
    rows, accounting = _all_ways(c.segments)
    assert accounting["tls_connections"] == 1 and accounting["kafka_connections"] == 0
    assert accounting["tls_bytes"] == 3 * 10 + 5 + 0x30 + 43 + 10 and accounting["encrypted_connections"] == 1
    assert accounting["response_frames"] == accounting["malformed_frames"] == 0


def test_many_connections_keep_their_own_bindings() -> None:
    numbering = [0]
    conversations = [Conversation(client=("10.0.0.1", 40000 + i), numbering=numbering,
                                  start_ts=1_700_000_000.0 + i / 7).handshake() for i in range(3)]
    segments = [s for c in conversations for s in c.segments]
    for cid in range(20):
        for i, c in enumerate(conversations):
            # each connection its own client id and correlation ids
            frame = struct.pack(">hhi", 12, 0, 100 * i + cid) + kstring(f"client-{i}")
            frame += kstring("group") + struct.pack(">i", 1) + kstring("m1")
            segments.append(c.send(sized(frame)))
            segments.append(c.reply(heartbeat_response(100 * i + cid, error_code=i)))
    for c in conversations:
        before = len(c.segments)
        c.close()
        segments += c.segments[before:]
    rows, accounting = _all_ways(segments)
    assert len(rows) == 60 and accounting["ok"] == 60
    for row in rows:
        i = row["correlation_id"] // 100
        assert row["client_id"] == f"client-{i}" and row["client"] == f"10.0.0.1:{40000 + i}"
        assert row["error_code"] == i and row["error_codes"] == ([i] if i else [])
