"""FrameReader on hand-built streams: frames built with struct, chunks cut in
every way the reassembler can deliver them (data, gaps, snaplen truncation)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kdissect.conn.framing import FrameReader


@dataclass
class Chunk:
    kind: str
    offset: int
    length: int
    data: bytes
    ts: float
    capture_index: int = 0
    frame_number: int = 0


def request(api_key: int, version: int, cid: int, body: bytes = b"") -> bytes:
    client_id = b"test-client"
    payload = struct.pack(">hhih", api_key, version, cid, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def plausible(prefix: bytes, size: int) -> bool:
    """A test-only header check: small api key, small version, non-negative id."""
    if len(prefix) < 8:
        return False
    key, version, cid = struct.unpack_from(">hhi", prefix)
    return 0 <= key < 100 and 0 <= version < 20 and 0 <= cid < 1_000_000


def cid_of(frame) -> int:
    return struct.unpack_from(">i", frame.data, 4)[0]


def feed(reader: FrameReader, pieces: list[tuple[str, bytes | int]]):
    """pieces: ("data", bytes) | ("gap", n) | ("trunc", (captured, wire_len))."""
    frames = []
    offset = 0
    for number, (kind, value) in enumerate(pieces, start=1):
        if kind == "data":
            chunk = Chunk("data", offset, len(value), value, number, 0, number)
        elif kind == "gap":
            chunk = Chunk("gap", offset, value, b"", number, 0, number)
        else:
            captured, wire = value
            chunk = Chunk("truncated", offset, wire, captured, number, 0, number)
        offset += chunk.length
        frames += reader.push(chunk)
    frames += reader.finish()
    return frames


def test_frames_split_at_every_byte_boundary():
    stream = b"".join(request(3, 1, cid, b"x" * cid) for cid in range(6))
    for cut in range(1, len(stream)):
        reader = FrameReader(0, plausible)
        frames = feed(reader, [("data", stream[:cut]), ("data", stream[cut:])])
        assert [cid_of(f) for f in frames] == list(range(6))
        assert all(f.complete for f in frames)
        # a frame's time is the chunk that completed it
        ends = []
        pos = 0
        for cid in range(6):
            pos += len(request(3, 1, cid, b"x" * cid))
            ends.append(1.0 if pos <= cut else 2.0)
        assert [f.ts for f in frames] == ends
        assert reader.stats.framed_bytes == len(stream)


def test_byte_by_byte_delivery():
    stream = request(0, 9, 7, b"abc") + request(1, 12, 8, b"")
    reader = FrameReader(0, plausible)
    frames = feed(reader, [("data", stream[i : i + 1]) for i in range(len(stream))])
    assert [cid_of(f) for f in frames] == [7, 8]
    assert frames[-1].frame_number == len(stream)


def test_gap_inside_known_frame_keeps_header_and_step():
    first = request(0, 3, 1, b"p" * 100)
    second = request(1, 4, 2, b"")
    # lose 50 bytes in the middle of the first frame
    pieces = [("data", first[:30]), ("gap", 50), ("data", first[80:] + second)]
    frames = feed(FrameReader(0, plausible), pieces)
    assert len(frames) == 2
    assert not frames[0].complete and frames[0].missing == "gap"
    assert frames[0].data == first[4:30]
    assert frames[0].ts == 3.0  # completed by the third chunk
    assert frames[1].complete and cid_of(frames[1]) == 2


def test_gap_over_a_boundary_resynchronises():
    frames_in = [request(2, 1, cid, b"q" * 40) for cid in range(5)]
    stream = b"".join(frames_in)
    lost_from = len(frames_in[0]) + 2  # inside frame 1's size field
    lost_to = len(frames_in[0]) + len(frames_in[1]) + 10  # into frame 2
    reader = FrameReader(0, plausible)
    hunts = []
    reader.on_hunt = lambda: hunts.append(1)
    frames = feed(reader, [("data", stream[:lost_from]), ("gap", lost_to - lost_from),
                           ("data", stream[lost_to:])])
    assert [cid_of(f) for f in frames if f.complete] == [0, 3, 4]
    assert hunts == [1]
    assert reader.stats.gap_bytes == lost_to - lost_from
    assert reader.stats.resyncs == 1


def test_mid_stream_start_hunts_for_first_header():
    stream = request(1, 11, 5, b"z" * 30) + request(1, 11, 6, b"z" * 30)
    # starts 9 bytes into the first frame
    frames = feed(FrameReader(0, plausible, aligned=False), [("data", stream[9:])])
    assert [cid_of(f) for f in frames] == [6]


def test_snaplen_truncated_packets_give_headers():
    frames_in = [request(0, 7, cid, b"r" * 200) for cid in range(4)]
    # one frame per packet, 30 bytes captured of each
    pieces = [("trunc", (f[:30], len(f))) for f in frames_in]
    frames = feed(FrameReader(0, plausible), pieces)
    assert [cid_of(f) for f in frames] == [0, 1, 2, 3]
    assert all(not f.complete and f.missing == "snaplen" for f in frames)
    assert [f.ts for f in frames] == [1.0, 2.0, 3.0, 4.0]
    assert [f.size for f in frames] == [len(f) - 4 for f in frames_in]


def test_snaplen_with_two_frames_per_packet_recovers_at_next_packet():
    a, b, c = (request(0, 7, cid, b"s" * 60) for cid in (1, 2, 3))
    pieces = [("trunc", ((a + b)[:30], len(a + b))), ("trunc", (c[:30], len(c)))]
    frames = feed(FrameReader(0, plausible), pieces)
    assert [cid_of(f) for f in frames] == [1, 3]


def test_insane_size_loses_step_and_recovers():
    good = request(3, 0, 9)
    stream = b"\xff\xff\xff\xff" + good
    frames = feed(FrameReader(0, plausible), [("data", stream)])
    assert [cid_of(f) for f in frames] == [9]
    # the four garbage bytes were counted, not silently dropped
    assert frames[0].offset == 4


def test_incomplete_frame_at_end_of_stream():
    frame = request(0, 3, 1, b"p" * 100)
    frames = feed(FrameReader(0, plausible), [("data", frame[:50])])
    assert len(frames) == 1 and not frames[0].complete and frames[0].missing == "end"
    assert frames[0].data == frame[4:50]


def test_zero_length_frames_are_frames():
    stream = struct.pack(">i", 0) + struct.pack(">i", 3) + b"abc"
    frames = feed(FrameReader(0, plausible), [("data", stream)])
    assert [(f.size, f.data) for f in frames] == [(0, b""), (3, b"abc")]


def test_oversized_frame_is_skipped_not_buffered():
    big = request(0, 9, 1, b"B" * 5000)
    after = request(1, 11, 2)
    reader = FrameReader(0, plausible)
    reader.max_buffered = 1000
    pieces = [("data", big[i : i + 700]) for i in range(0, len(big), 700)] + [("data", after)]
    frames = []
    offset = 0
    for number, (_, value) in enumerate(pieces, start=1):
        frames += reader.push(Chunk("data", offset, len(value), value, number))
        offset += len(value)
        assert reader.pending_bytes <= 1000
    assert [(cid_of(f), f.complete, f.missing) for f in frames] == [(1, False, "oversized"), (2, True, None)]
    assert frames[0].size == len(big) - 4 and frames[0].data == big[4:700]


def test_empty_gap_changes_nothing():
    stream = request(3, 1, 1, b"abc") + request(3, 1, 2)
    frames = feed(FrameReader(0, plausible), [("data", stream[:10]), ("gap", 0), ("data", stream[10:])])
    assert [(cid_of(f), f.complete) for f in frames] == [(1, True), (2, True)]


def _random_pieces(rng):
    stream = b"".join(request(rng.randrange(3), 1, c, rng.randbytes(rng.randrange(0, 300))) for c in range(20))
    aligned = rng.random() < 0.5
    data = stream if aligned else stream[rng.randrange(0, len(stream) // 2):]
    pieces, off = [], 0
    while off < len(data):
        n = rng.randrange(1, 120)
        r = rng.random()
        if r < 0.05:
            pieces.append(("gap", n))
        elif r < 0.1:
            pieces.append(("trunc", (data[off : off + min(n, rng.randrange(0, 40))], n)))
        else:
            pieces.append(("data", data[off : off + n]))
        off += n
    return aligned, pieces


def test_large_frame_collection_agrees_with_plain_buffering(monkeypatch):
    """Frames from _BIG_FRAME bytes on are gathered as a chunk list; with any
    threshold the frames, times and counts must be the same."""
    import random

    import kdissect.conn.framing as framing

    rng = random.Random(11)
    for _ in range(400):
        aligned, pieces = _random_pieces(rng)
        results = []
        for threshold in (1 << 40, 40):
            monkeypatch.setattr(framing, "_BIG_FRAME", threshold)
            reader = FrameReader(0, plausible, aligned=aligned, min_size=8)
            frames = feed(reader, pieces)
            results.append(([(f.offset, f.size, f.complete, f.data, f.ts, f.missing) for f in frames],
                            reader.stats))
        assert results[0] == results[1]


# -- the pipeline's hunting rules on a hostile client's real requests ---------------------

def _hostile_requests() -> list[bytes]:
    """Whole request frames (size prefix included) of captures/hostile_strings_kafka.pcap,
    one per client packet, whose client id carries control bytes (read with dpkt)."""
    import dpkt

    from tests.support.paths import REPO

    frames = []
    with open(REPO / "captures" / "hostile_strings_kafka.pcap", "rb") as handle:
        for _ts, packet in dpkt.pcap.Reader(handle):
            tcp = dpkt.ethernet.Ethernet(packet).data.data
            payload = bytes(getattr(tcp, "data", b""))
            if not isinstance(tcp, dpkt.tcp.TCP) or tcp.dport != 9092 or len(payload) < 14:
                continue
            if struct.unpack_from(">i", payload)[0] + 4 != len(payload):
                continue
            length = struct.unpack_from(">h", payload, 12)[0]
            if any(byte < 0x20 or byte == 0x7F for byte in payload[14:14 + max(length, 0)]):
                frames.append(payload)
    return frames


def test_hunting_finds_a_request_whose_client_id_has_control_bytes():
    """After a loss, a hostile client's request (client id `title ESC]0;owned BEL`)
    that does not start a packet is found once its whole frame decodes; the same
    header over a body that does not decode, or with a byte after the body, is not
    taken (a client id with control bytes is weaker evidence than a printable one)."""
    from kdissect.conn.detect import MIN_REQUEST_SIZE, confirm_request, hunted_request, sure_request
    from kdissect.protocol.headers import looks_like_request

    frames = _hostile_requests()
    assert len(frames) >= 10
    for frame in frames[:10]:
        assert not looks_like_request(frame[4:68], len(frame) - 4)  # the printable-only rule passes it over
        lead = b"\x01\x02\x03\x04\x05"  # the end of a frame whose start was lost
        reader = FrameReader(0, hunted_request, False, MIN_REQUEST_SIZE, None, confirm_request, sure_request)
        found = feed(reader, [("data", lead + frame)])
        assert [bytes(f.data) for f in found] == [frame[4:]]
        assert reader.stats.mid_stream_starts == 1
        header_end = 14 + struct.unpack_from(">h", frame, 12)[0]
        junk = frame[:header_end] + b"\xff" * (len(frame) - header_end)  # a body that does not decode
        padded = struct.pack(">i", len(frame) - 3) + frame[4:] + b"\x00"  # a byte after the body
        for bad in (junk, padded):
            reader = FrameReader(0, hunted_request, False, MIN_REQUEST_SIZE, None, confirm_request, sure_request)
            assert all(found.offset != len(lead) for found in feed(reader, [("data", lead + bad)])), bad
