"""Pipeline behaviour on hand-built TCP conversations: pairing, orphans,
acks=0, losses, snaplen, raw SASL, detection, per-connection feeding."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kdissect.model.accounting import Accounting
from kdissect.model.exchange import COLUMN_NAMES
from tests.support.pipeline import (
    Conversation,
    dissect,
    heartbeat_request,
    heartbeat_response,
    metadata_request,
    metadata_response,
    produce_v0_request,
    produce_v0_response,
    sasl_handshake_request,
    sasl_handshake_response,
    sized,
)


def by_cid(exchanges):
    return {ex.correlation_id: ex for ex in exchanges}


def test_pipelined_requests_paired_by_correlation_id_not_order():
    conv = Conversation().handshake()
    sent = conv.send(heartbeat_request(1) + metadata_request(2, ["a"]) + heartbeat_request(3))
    r3 = conv.reply(heartbeat_response(3, error_code=27))
    r1 = conv.reply(heartbeat_response(1))
    r2 = conv.reply(metadata_response(2, [("a", 3)]))
    conv.close()
    exchanges, acc = dissect(conv.segments)
    assert len(exchanges) == 3
    got = by_cid(exchanges)
    assert [got[c].api_key for c in (1, 2, 3)] == [12, 3, 12]
    assert got[3].error_code == 27 and got[3].error_codes == [27]
    assert got[2].error_code is None and got[2].error_codes == [3]
    for cid, reply in ((1, r1), (2, r2), (3, r3)):
        ex = got[cid]
        assert ex.status == "ok"
        assert ex.request_ts == sent.ts and ex.response_ts == reply.ts
        assert ex.request_frame == sent.frame_number and ex.response_frame == reply.frame_number
        assert ex.latency_ms == (reply.ts - sent.ts) / 1_000_000  # exact: integer nanoseconds
        assert ex.client == "10.0.0.1:40000" and ex.broker == "10.0.0.2:9092"
        assert ex.client_id == "test-client" and ex.capture == "test.pcap"
    row = got[1].to_row()
    assert list(row) == COLUMN_NAMES
    assert acc.request_frames == 3 and acc.response_frames == 3 and acc.ok == 3


def test_acks0_orphan_and_no_response():
    conv = Conversation().handshake()
    conv.send(produce_v0_request(1, acks=0))
    conv.send(produce_v0_request(2, acks=1))
    conv.reply(produce_v0_response(2))
    conv.reply(heartbeat_response(77))  # its request is not in the capture
    conv.send(heartbeat_request(3))  # never answered
    exchanges, acc = dissect(conv.segments)
    got = by_cid(exchanges)
    assert got[1].status == "ok" and got[1].response_ts is None and not got[1].expects_response
    assert got[2].status == "ok" and got[2].response_ts is not None
    assert got[77].status == "orphan_response" and got[77].response_bytes == 6
    # trial decoding: an error code alone is the whole body of several APIs'
    # responses, so the API stays unknown; the candidates are named, the
    # version this connection used (Heartbeat v0) first
    assert (got[77].api_name, got[77].api_version) == (None, None)
    assert got[77].problem_codes == ["request-not-captured", "api-ambiguous"]
    assert "decode it: Heartbeat v0, " in got[77].problems[1]
    assert got[3].status == "no_response" and got[3].api_name == "Heartbeat"
    assert (acc.acks0_requests, acc.orphan_responses, acc.no_response) == (1, 1, 1)


def test_response_arriving_before_its_request_is_still_paired():
    # e.g. a capture merged from two interfaces
    conv = Conversation().handshake()
    request = heartbeat_request(5)
    response_seg = conv.reply(heartbeat_response(5, 0))
    request_seg = conv.send(request)
    exchanges, _ = dissect(conv.segments)
    assert len(exchanges) == 1 and exchanges[0].status == "ok"
    assert exchanges[0].request_frame == request_seg.frame_number
    assert exchanges[0].response_frame == response_seg.frame_number


def test_malformed_response_keeps_header_and_says_where():
    conv = Conversation().handshake()
    conv.send(metadata_request(1, ["a"]))
    good = metadata_response(1, [("a", 0)])
    # cut the body short but keep a consistent size prefix
    body = good[4:-6]
    conv.reply(sized(body))
    exchanges, acc = dissect(conv.segments)
    (ex,) = exchanges
    assert ex.status == "malformed" and ex.api_name == "Metadata" and ex.correlation_id == 1
    assert ex.response_ts is not None
    assert any("response malformed" in p and "offset" in p for p in ex.problems)
    assert acc.malformed_frames == 1


def test_lost_bytes_inside_a_request_keep_its_header():
    conv = Conversation().handshake()
    frame = metadata_request(1, ["topic-%d" % i for i in range(20)])
    conv.send(frame[:40])
    conv.lose(True, 60)
    last = conv.send(frame[100:])
    conv.send(heartbeat_request(2))
    conv.reply(metadata_response(1, [("x", 0)]))
    conv.reply(heartbeat_response(2))
    exchanges, acc = dissect(conv.segments)
    got = by_cid(exchanges)
    assert got[1].status == "truncated" and got[1].api_key == 3 and got[1].request_ts == last.ts
    assert got[1].response_ts is not None  # still paired, response decoded
    assert got[2].status == "ok"
    assert acc.gap_bytes == 60 and acc.truncated_frames == 1


def test_lost_request_makes_its_response_an_orphan_only():
    conv = Conversation().handshake()
    conv.send(heartbeat_request(1))
    conv.lose(True, len(heartbeat_request(2)))
    conv.send(heartbeat_request(3))
    conv.reply(heartbeat_response(1))
    conv.reply(heartbeat_response(2))
    conv.reply(heartbeat_response(3))
    conv.close()
    exchanges, acc = dissect(conv.segments)
    got = by_cid(exchanges)
    assert got[1].status == got[3].status == "ok"
    assert got[2].status == "orphan_response"
    assert acc.gap_bytes == len(heartbeat_request(2))


def test_snaplen_truncated_packets_keep_headers_and_timing():
    conv = Conversation().handshake()
    frame = metadata_request(1, ["t" * 50])
    seg = conv.truncated(True, frame, 30)
    response = metadata_response(1, [("t" * 50, 0)])
    reply = conv.truncated(False, response, 30)
    exchanges, acc = dissect(conv.segments)
    (ex,) = exchanges
    assert (ex.api_key, ex.api_version, ex.correlation_id, ex.client_id) == (3, 0, 1, "test-client")
    assert ex.request_ts == seg.ts and ex.response_ts == reply.ts
    assert ex.request_bytes == len(frame) - 4 and ex.response_bytes == len(response) - 4
    assert ex.status == "truncated"
    assert acc.snaplen_bytes == len(frame) - 30 + len(response) - 30


def test_raw_sasl_tokens_are_counted_not_decoded():
    conv = Conversation().handshake()
    conv.send(sasl_handshake_request(1))
    conv.reply(sasl_handshake_response(1))
    conv.send(sized(b"\x00alice\x00secret-password"))
    conv.reply(sized(b""))
    conv.send(metadata_request(2, []))
    conv.reply(metadata_response(2, []))
    exchanges, acc = dissect(conv.segments)
    assert [(ex.api_name, ex.status) for ex in exchanges] == [("SaslHandshake", "ok"), ("Metadata", "ok")]
    assert acc.raw_sasl_frames == 2 and acc.malformed_frames == 0


def _kafka_on(port: int):
    conv = Conversation(broker=("10.0.0.2", port)).handshake()
    conv.send(heartbeat_request(1))
    conv.reply(heartbeat_response(1))
    return conv.close()


def test_detection_by_shape_on_other_ports():
    conv = _kafka_on(5555)
    exchanges, acc = dissect(conv.segments, ports=(9092,), detect=True)
    assert len(exchanges) == 1 and exchanges[0].status == "ok" and exchanges[0].broker == "10.0.0.2:5555"
    exchanges, acc = dissect(conv.segments, ports=(9092,), detect=False)
    assert exchanges == [] and acc.non_kafka_connections == 1
    exchanges, acc = dissect(conv.segments, ports=(5555,), detect=False)
    assert len(exchanges) == 1


def test_non_kafka_connections_are_counted():
    conv = Conversation(broker=("10.0.0.2", 8080)).handshake()
    conv.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conv.reply(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    conv.close()
    exchanges, acc = dissect(conv.segments)
    assert exchanges == []
    assert acc.non_kafka_connections == 1 and acc.non_kafka_bytes > 0 and acc.kafka_connections == 0


def test_one_connection_fed_alone_gives_its_exchanges_and_sums_add_up():
    numbering = [0]
    a = Conversation(client=("10.0.0.1", 40001), numbering=numbering)
    b = Conversation(client=("10.0.0.3", 40002), numbering=numbering)
    segments = []
    a.handshake(); b.handshake()
    for cid in range(1, 4):
        segments_a = [a.send(heartbeat_request(cid)), a.reply(heartbeat_response(cid))]
        segments_b = [b.send(metadata_request(cid, [])), b.reply(metadata_response(cid, []))]
        del segments_a, segments_b
    a.close(); b.close()
    segments = sorted(a.segments + b.segments, key=lambda s: s.frame_number)
    together, acc_all = dissect(segments)
    alone_a, acc_a = dissect(a.segments)
    alone_b, acc_b = dissect(b.segments)

    def rows(exchanges):
        out = []
        for ex in exchanges:
            row = ex.to_row()
            row.pop("stream")
            out.append((ex.stream_key, tuple(map(str, row.values()))))
        return sorted(out)

    assert rows(together) == sorted(rows(alone_a) + rows(alone_b))
    # streams are numbered in the order the connections were classified
    assert {ex.stream for ex in together if ex.client.startswith("10.0.0.1")} == {0}
    assert {ex.stream for ex in together if ex.client.startswith("10.0.0.3")} == {1}
    total = acc_a + acc_b
    for name in Accounting.__slots__:
        assert getattr(total, name) == getattr(acc_all, name), name


def test_capture_starting_mid_stream_resynchronises():
    conv = Conversation().handshake()
    conv.send(heartbeat_request(1))
    conv.reply(heartbeat_response(1))
    conv.send(metadata_request(2, ["abc"]))
    conv.reply(metadata_response(2, [("abc", 0)]))
    conv.send(heartbeat_request(3))
    conv.reply(heartbeat_response(3))
    # drop the handshake and the first exchange, and start the next request mid-frame
    first_kept = conv.segments[5]
    partial = struct.pack(">i", 0)  # not used; keep the frame's tail only
    del partial
    cut = type(first_kept)(**{f: getattr(first_kept, f) for f in first_kept.__slots__})
    cut.payload = first_kept.payload[7:]
    cut.payload_len = len(cut.payload)
    cut.seq = first_kept.seq + 7
    segments = [cut] + conv.segments[6:]
    exchanges, acc = dissect(segments)
    got = by_cid(exchanges)
    assert got[3].status == "ok" and got[3].api_name == "Heartbeat"
    assert 2 not in got or got[2].status != "ok"


def test_capture_starting_mid_stream_keeps_responses_to_unseen_requests():
    conv = Conversation().handshake()
    conv.send(heartbeat_request(1) + metadata_request(2, ["t"]))
    conv.reply(heartbeat_response(1, error_code=27))  # requests sent before the capture started
    conv.reply(metadata_response(2, [("t", 3)]))
    conv.send(heartbeat_request(3))
    conv.reply(heartbeat_response(3))
    late = conv.segments[4:]  # no handshake, no requests 1 and 2
    exchanges, acc = dissect(late)
    got = by_cid(exchanges)
    assert got[1].status == got[2].status == "orphan_response"
    assert got[1].response_bytes == len(heartbeat_response(1)) - 4
    # trial decoding cannot tell an error code alone apart (several APIs' bodies)
    assert got[1].api_name is None and "api-ambiguous" in got[1].problem_codes
    assert got[2].api_name in (None, "Metadata")
    assert got[3].status == "ok"
    assert acc.skipped_bytes == 0


def test_state_stays_bounded_by_open_exchanges():
    """A long acks=0 producer and a long run of unanswered responses do not
    pile up state: held items are released by capture time (the requests'
    own timeout_ms, 1000 ms here; responses after a second), and nothing is
    dropped uncounted."""
    from kdissect.conn.pairing import EARLY_WINDOW_NS
    from kdissect.conn.pipeline import Dissector

    conv = Conversation().handshake()
    dissector = Dissector(capture_names=["t.pcap"])
    emitted = []
    for seg in list(conv.segments):
        emitted += dissector.feed(seg)
    (conn,) = dissector._reassembler.open_connections
    for cid in range(1, 2001):  # one every millisecond, each answered by an unrelated response
        emitted += dissector.feed(conv.send(produce_v0_request(cid, acks=0)))
        emitted += dissector.feed(conv.reply(heartbeat_response(5000 + cid)))
        # acks=0 requests wait until the broker's side is past their timeout;
        # responses until the client's side is a second past them
        assert len(conn.user.pairer.acks0.held) <= 501
        assert len(conn.user.pairer.early.held) <= EARLY_WINDOW_NS // 2_000_000 + 1
    pairer = conn.user.pairer
    assert len(pairer.pending) == 0
    emitted += dissector.finish()
    acc = dissector.accounting
    assert acc.acks0_requests == 2000 and acc.orphan_responses == 2000
    assert len(emitted) == acc.exchanges == 4000
    assert acc.balance() == []


def test_tls_on_a_kafka_port_is_counted_not_decoded():
    conv = Conversation().handshake()
    # a TLS ClientHello record header, then some of its body
    conv.send(bytes([0x16, 0x03, 0x01, 0x02, 0x00]) + bytes(200))
    conv.reply(bytes([0x16, 0x03, 0x03, 0x00, 0x40]) + bytes(64))
    conv.close()
    plain = Conversation(client=("10.0.0.9", 40009)).handshake()
    plain.send(heartbeat_request(1))
    plain.reply(heartbeat_response(1))
    plain.close()
    exchanges, acc = dissect(conv.segments + plain.segments)
    assert [(ex.client, ex.status) for ex in exchanges] == [("10.0.0.9:40009", "ok")]
    assert (acc.kafka_connections, acc.tls_connections, acc.non_kafka_connections) == (1, 1, 0)
    assert acc.encrypted_connections == 1  # TLS without keys: counted, its bytes left encrypted
    assert acc.tls_bytes == 205 + 69 and acc.non_kafka_bytes == 0 and acc.truncated_frames == 0
    assert acc.balance() == []


def test_detection_by_shape_with_a_request_split_over_segments():
    conv = Conversation(broker=("10.0.0.2", 6000)).handshake()
    frame = heartbeat_request(1)
    conv.send(frame[:5])
    conv.send(frame[5:])
    conv.reply(heartbeat_response(1))
    conv.close()
    exchanges, acc = dissect(conv.segments)
    assert [(ex.broker, ex.status) for ex in exchanges] == [("10.0.0.2:6000", "ok")]
    assert acc.kafka_connections == 1 and acc.non_kafka_connections == 0


def test_the_layers_write_their_own_counts_only() -> None:
    """The connection layer counts into its own stats (the dissector's
    ConnectionStats, the pairers' PairingStats, each FrameReader's
    FramingStats, each TLS connection's counts); the Accounting is only
    folded from them, never written field by field here."""
    import re

    package = Path(__file__).resolve().parents[2] / "kdissect" / "conn"
    writes = re.compile(r"accounting\.[a-z_]+\s*[-+]?=(?!=)|setattr\([^,]*accounting")
    found = [f"{path.name}:{n}" for path in sorted(package.rglob("*.py")) if "brokerlog" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if writes.search(line)]
    assert found == []


def _dissected_then_dropped(release: bool) -> int:
    """Cyclic garbage the cyclic collector finds once a dissector that
    dissected a whole conversation is dropped (released first or not)."""
    import gc

    from kdissect.conn.pipeline import Dissector

    conv = Conversation().handshake()
    for cid in range(1, 4):
        conv.send(metadata_request(cid, ["a"]))
        conv.reply(metadata_response(cid, [("a", 3)]))
    conv.close()
    gc.collect()
    gc.disable()
    try:
        dissector = Dissector((9092,), True, ["test.pcap"])
        exchanges = [ex for seg in conv.segments for ex in dissector.feed(seg)] + dissector.finish()
        assert len(exchanges) == 3 and dissector.accounting.ok == 3
        if release:
            dissector.release()
        del dissector, exchanges
        return gc.collect()
    finally:
        gc.enable()


def test_a_released_dissector_is_freed_without_the_cyclic_collector():
    # (a Spark task once made a dissector per 4-tuple: each left as cyclic
    # garbage made the worker's collection after the task walk them all)
    assert _dissected_then_dropped(release=False) > 0  # the dissector and its reassembler hold each other
    assert _dissected_then_dropped(release=True) == 0


def test_a_released_dissector_takes_no_more_connections():
    from kdissect.conn.pipeline import Dissector

    conv = Conversation().handshake()
    conv.send(metadata_request(1, ["a"]))
    dissector = Dissector((9092,), True, ["test.pcap"])
    dissector.finish()
    dissector.release()
    with pytest.raises(RuntimeError, match="released"):
        dissector.feed(conv.segments[0])
