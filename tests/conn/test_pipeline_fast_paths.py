"""The export fast paths give exactly what the general paths give.

Each short cut is run beside the code it short-cuts, on the lab captures and
on impaired variants of them (reordered, duplicated, lost packets, late
start, snaplen cuts, port reuse, zero IP lengths, VLAN tags, another link
layer), and every value is compared:

* `decode_frame`'s in-place Ethernet/IPv4/TCP short cut, as the capture
  reader's loops use it, against frame-by-frame reading and the general path
  (`decode_frame_general`), whatever the reader's chunk size;
* `Reassembler.feed`'s common-segment short cut against its general code;
* `FrameReader.data`'s one-frame short cut against its general cut;
* the Dissector's `feed_many` against `feed` (exchanges, their offsets and
  stream keys, and the whole accounting, which must balance).

Some checks also assert that a short cut was taken at all, so a fast path
that silently stopped applying fails here rather than only in a benchmark.
"""

from __future__ import annotations

import functools
import gzip
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from kdissect.wire import capture
from kdissect.wire.capture import ReadStats, iter_frames, read_segments
from kdissect.conn.framing import FrameReader
from kdissect.wire.linklayers import decode_frame_general
from kdissect.model.packet import TcpSegment
from kdissect.conn.pipeline import Dissector
from kdissect.wire.reassembly import Reassembler
from tests.support import impair
from tests.support.variants import (
    REPEATED_COPIES,
    copies_past_the_run_wide_timer,
    event_values,
    exchange_values,
    frame_values,
    segment_values,
    split_randomly,
    write_variant,
)
from tests.support.pipeline import ports_of, reference_captures
from tests.support.pcaps import many_connections_capture
from tests.support.recording import Call, Delivered, RecordingListener

CAPTURES = reference_captures()


class Lab:
    """One lab capture and its impaired variants, each written once per module
    (every test of a capture reads the same variant files)."""

    def __init__(self, path: Path, directory: Path) -> None:
        self.path = path
        self.trace = impair.load_pcap(path)
        self.directory = directory
        self._written: dict[str, Path] = {}

    def variant(self, name: str) -> Path:
        if name not in self._written:
            self._written[name] = write_variant(self.trace, name, self.directory)
        return self._written[name]


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: p.name)
def lab(request, tmp_path_factory) -> Lab:
    return Lab(request.param, tmp_path_factory.mktemp(request.param.stem))


def _packet_count(path: Path) -> int:
    return sum(1 for _ in iter_frames([path]))


PACKETS = {path: _packet_count(path) for path in CAPTURES}


def _distinct(capture: Path, variants: list[str]) -> list[str]:
    """`variants` less "repeated-long" where it is the same file as "repeated"
    (a capture of 1024+ packets is past the run-wide timer in 3 copies)."""
    if copies_past_the_run_wide_timer(PACKETS[capture]) == REPEATED_COPIES:
        return [v for v in variants if v != "repeated-long"]
    return variants


def _per_capture(variants: list[str]) -> list:
    """(capture, variant) parameters for tests taking `lab` and `variant`."""
    return [pytest.param(c, v, id=f"{c.name}-{v}") for c in CAPTURES for v in _distinct(c, variants)]


# -- capture reader ----------------------------------------------------------


def _frame_by_frame(path: Path) -> list[tuple]:
    """Segments the slow way: undecoded frames, then decode_frame's general path
    (without its Ethernet/IPv4/TCP short cut) on each."""
    out = []
    for f in iter_frames([path]):
        result = decode_frame_general(f.linktype, f.data, 0, len(f.data), f.wire_len, f.ts, f.capture_index,
                                      f.frame_number, f.order_ts)
        if type(result) is TcpSegment:
            out.append(segment_values(result))
    return out


@pytest.mark.parametrize("variant", ["clean", "snaplen96", "snaplen60", "zero-ip-length", "vlan", "sll2"])
def test_reader_decodes_like_decode_frame(lab, tmp_path: Path, variant: str) -> None:
    path = lab.variant(variant)
    fast = [segment_values(s) for s in read_segments([path])]
    assert fast == _frame_by_frame(path)
    assert fast or variant == "snaplen60", "no TCP segments read"  # (60 bytes may cut the TCP header)


def test_reader_short_cut_handles_odd_ipv4_headers(tmp_path: Path) -> None:
    """IPv4 options, a non-TCP protocol, a fragment, a total length larger
    than the frame and smaller than the headers: the in-place decoding must
    defer to decode_frame for each, and agree with it."""
    source = CAPTURES[0]
    base = next(p for p in impair.load_pcap(source).packets if impair.has_payload(p))
    eth, ip = base.data[:14], bytearray(base.data[14:])
    assert eth[12:14] == b"\x08\x00" and ip[0] == 0x45, "expected an Ethernet/IPv4 lab capture"

    def frame(ip_bytes: bytes, wire_extra: int = 0) -> impair.Packet:
        data = eth + bytes(ip_bytes)
        return impair.Packet(base.ts_ns, data, len(data) + wire_extra, base.linktype)

    with_options = bytearray(ip)
    with_options[0] = 0x46
    with_options[2:4] = (int.from_bytes(ip[2:4], "big") + 4).to_bytes(2, "big")
    with_options[20:20] = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL
    udp = bytearray(ip)
    udp[9] = 17
    fragment = bytearray(ip)
    fragment[6] = 0x20  # more fragments
    too_long = bytearray(ip)
    too_long[2:4] = (len(ip) + 100).to_bytes(2, "big")
    too_short = bytearray(ip)
    too_short[2:4] = (30).to_bytes(2, "big")
    bad_offset = bytearray(ip)
    bad_offset[32] = 0x40  # TCP data offset 4 words: invalid
    packets = [frame(ip), frame(with_options), frame(udp), frame(fragment), frame(too_long),
               frame(too_long, wire_extra=40), frame(too_short), frame(bad_offset), frame(ip[:30])]
    path = impair.write_pcap(impair.Trace(tuple(packets)), tmp_path / "odd.pcap")
    stats = ReadStats()
    fast = [segment_values(s) for s in read_segments([path], stats)]
    assert fast == _frame_by_frame(path)
    assert len(fast) == 4  # plain, with options, too long (twice)
    assert (stats.non_tcp, stats.ip_fragments, stats.undecodable) == (1, 1, 3)


@pytest.mark.parametrize("variant", ["clean", "lossy", "snaplen96"])
def test_chunk_boundaries_inside_packets(lab, tmp_path: Path, monkeypatch, variant: str) -> None:
    """The reader's chunks end inside packets and record headers: small
    chunk sizes give the same segments and counts as the default one, also
    for a file cut inside a packet and for the same file gzip-compressed."""
    path = lab.variant(variant)
    cut = impair.cut_file(shutil.copy(path, tmp_path / "cut.pcap"), path.stat().st_size - 7)
    gz = tmp_path / "whole.pcap.gz"
    gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    expected = {}
    for target in (path, cut, gz):
        stats = ReadStats()
        expected[target] = ([segment_values(s) for s in read_segments([target], stats)], stats)
    assert expected[cut][1].cut_records == 1 and expected[cut][1].problems
    assert expected[gz][0] == expected[path][0]
    for chunk in (4096, 1000, 100):
        monkeypatch.setattr(capture, "_CHUNK", chunk)
        for target in (path, cut, gz):
            stats = ReadStats()
            got = [segment_values(s) for s in read_segments([target], stats)]
            assert (got, stats) == expected[target], f"chunk size {chunk}, {target.name}"


# -- reassembly ---------------------------------------------------------------

REASSEMBLY_VARIANTS = ["clean", "messy", "reordered-wide", "lossy", "late", "snaplen96", "repeated", "repeated-long"]


@functools.cache
def _plain_reassembly() -> Any:
    """kdissect/wire/reassembly.py loaded as plain Python under a name of its own:
    the test below counts calls by replacing a method on an instance, which
    the compiled build's classes do not allow (kdissect/native.py; its output
    is the plain module's: tests/package/test_native.py)."""
    import importlib.util

    import kdissect

    source = Path(kdissect.__file__).parent.parent / "kdissect/wire/reassembly.py"
    spec = importlib.util.spec_from_file_location("kdissect_plain_reassembly", source)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("lab,variant", _per_capture(REASSEMBLY_VARIANTS), indirect=["lab"])
def test_common_segment_short_cut_equals_the_general_feed(lab, tmp_path: Path, variant: str) -> None:
    """`Reassembler.feed` handles the common segment in one go; the general
    code (`_feed`) given the same segments makes the same events and stats."""
    segments = list(read_segments([lab.variant(variant)]))
    plain = _plain_reassembly()
    heard_general, heard_fused = RecordingListener(), RecordingListener()
    general, fused = plain.Reassembler(heard_general), plain.Reassembler(heard_fused)
    general_calls = 0
    fused_feed = fused._feed

    def counting(seg, conn):
        nonlocal general_calls
        general_calls += 1
        fused_feed(seg, conn)

    fused._feed = counting  # type: ignore[method-assign]
    for seg in segments:
        general._feed(seg, general._conns.get((seg.src, seg.sport, seg.dst, seg.dport)))
        general.stats.segments += 1
        fused.feed(seg)
        expected = [event_values(e) for e in heard_general.take()]
        got = [event_values(e) for e in heard_fused.take()]
        assert got == expected, f"frame {seg.frame_number}"
    fused.finish()
    general.finish()
    assert [event_values(e) for e in heard_fused.take()] == [event_values(e) for e in heard_general.take()]
    assert fused.stats == general.stats
    if variant == "clean":
        taken = len(segments) - general_calls
        assert taken >= len(segments) // 2, f"short cut taken for only {taken} of {len(segments)} segments"


# -- framing ------------------------------------------------------------------


def _direction_calls(path: Path) -> dict[tuple[int, int], list[Call]]:
    """The calls each direction's sink hears from the reassembler."""
    calls: dict[tuple[int, int], list[Call]] = {}
    listener = RecordingListener()
    r = Reassembler(listener)
    for seg in read_segments([path]):
        r.feed(seg)
    r.finish()
    for event in listener.take():
        if isinstance(event, Delivered):
            calls.setdefault((event.conn.id, event.direction), []).append(event.call)
    return calls


def _reader(direction: int, frames: list) -> FrameReader:
    return FrameReader(direction, lambda prefix, size: len(prefix) >= 4, True, 8, frames.append)


@pytest.mark.parametrize("variant", ["clean", "lossy", "late", "snaplen96"])
@pytest.mark.parametrize("pieces", ["whole", "split"])
def test_one_frame_short_cut_equals_the_general_cut(lab, tmp_path: Path, variant: str, pieces: str) -> None:
    """A piece holding exactly one frame takes a short cut in `data`; the same
    bytes heard as a 1-byte piece and the rest (same packet) go the general
    way and must give the same frames and stats. "split" first cuts the data
    chunks into random pieces, so frames span chunks and size fields are cut
    in two."""
    rng = random.Random(11)
    total = 0
    for (_, direction), calls in _direction_calls(lab.variant(variant)).items():
        if pieces == "split":
            calls = _split_calls(calls, rng)
        fast_frames: list = []
        plain_frames: list = []
        fast, plain = _reader(direction, fast_frames), _reader(direction, plain_frames)
        for call in calls:
            call.replay(fast)
            if call.kind == "data" and call.length > 1:
                plain.data(call.offset, call.data[:1], call.stamp)
                plain.data(call.offset + 1, call.data[1:], call.stamp)
            else:
                call.replay(plain)
            expected = [frame_values(f) for f in fast_frames]
            got = [frame_values(f) for f in plain_frames]
            assert got == expected
            total += len(got)
            fast_frames.clear()
            plain_frames.clear()
        fast.finish()
        plain.finish()
        assert [frame_values(f) for f in fast_frames] == [frame_values(f) for f in plain_frames]
        assert fast.stats == plain.stats
    assert total, "no frames at all"


def _split_calls(calls: list[Call], rng: random.Random) -> list[Call]:
    out = []
    for c in calls:
        if c.kind != "data":
            out.append(c)
            continue
        offset = c.offset
        for piece in split_randomly(c.data, rng):
            out.append(Call("data", offset, len(piece), piece, c.stamp))
            offset += len(piece)
    return out


# -- the whole dissector ------------------------------------------------------

DISSECTOR_VARIANTS = ["clean", "messy", "reordered-wide", "lossy", "late", "snaplen96", "snaplen60", "repeated",
                      "repeated-long"]


def _dissect(path: Path, ports: tuple[int, ...], segments=None, way: str = "feed_many", hold: bool = True,
             lone: bool = True, dissectors: list | None = None) -> tuple:
    """Exchanges (with what the table does not show), accounting and stream
    keys of one run; `way` "feed" hands the segments over one at a time;
    `hold`, `lone`: the Dissector's short cuts of a connection whose first
    piece only opens a frame (off: the general path); `dissectors` gets the
    Dissector."""
    d = Dissector(ports, True, [path.name], keep_messages=False)
    d.hold_first_pieces, d.close_lone_requests = hold, lone
    if dissectors is not None:
        dissectors.append(d)
    if segments is None:
        segments = read_segments([path])
    if way == "feed_many":
        exchanges = [exchange_values(e) for e in d.feed_many(iter(segments))]
    else:
        exchanges = [exchange_values(e) for seg in segments for e in d.feed(seg)]
    exchanges += [exchange_values(e) for e in d.finishing()]
    assert d.accounting.balance() == []
    return exchanges, d.accounting.to_dict(), d.classification_keys


# Which (capture, variant, by port) runs the Dissector test makes:
# * `impair.repeat` moves each copy's ports, so in a by-port run of a repeated
#   variant every copy but the first is already classified by its shape; a
#   by-shape run would add only the first copy, which is the clean capture's
#   by-shape run. Repeated variants are therefore run by port only.
# * The captures below hold thousands of exchanges (each run takes seconds);
#   their shapes (floods of acks=0 requests on Apache Kafka and Tansu, the
#   forensics mix) are checked by port on every variant and by shape on the
#   clean capture; shape classification on impaired variants is checked on
#   the other 33 captures.
BIG_CAPTURES = {"acks0_flood_kafka.pcap", "acks0_flood_tansu.pcap", "forensics_kafka.pcap"}
DISSECTOR_RUNS = [
    pytest.param(capture, variant, by_port, id=f"{capture.name}-{'by-port' if by_port else 'by-shape'}-{variant}")
    for capture in CAPTURES
    for variant in _distinct(capture, DISSECTOR_VARIANTS)
    for by_port in (True, False)
    if by_port or not (variant.startswith("repeated") or (capture.name in BIG_CAPTURES and variant != "clean"))
]


@pytest.mark.parametrize("lab,variant,by_port", DISSECTOR_RUNS, indirect=["lab"])
def test_dissector_short_cuts_equal_the_general_paths(lab, variant: str, by_port: bool) -> None:
    """Two short cuts of the Dissector, each against the general path on the
    same segments, with one reference run (feed_many, first pieces held):

    * `feed_many` against `feed` given one segment at a time;
    * a Kafka connection's first piece, when it only opens a frame, is held
      instead of making a FrameReader (`_Connection.kafka`); making the reader
      at once gives the same exchanges, accounting and stream keys."""
    path = lab.variant(variant)
    # port 1 is nobody's: every connection is then classified by its shape
    # (its first segments are held undecided)
    ports = ports_of(lab.path) if by_port else (1,)
    segments = list(read_segments([path]))
    reference = _dissect(path, ports, segments)
    assert _dissect(path, ports, segments, way="feed") == reference, "feed_many differs from feed"
    assert _dissect(path, ports, segments, hold=False) == reference, "holding the first piece changed the result"
    if by_port and variant != "snaplen60":  # (60 bytes leave no TCP payload at all)
        assert reference[0], "no exchanges"


# -- per-connection state made when needed --------------------------------------




def test_held_first_piece_on_many_connections(tmp_path: Path) -> None:
    """The many-connections shape: every connection's one piece is held until
    the end, where each makes its reader; the same as making them at once,
    and no reader exists before the end."""
    path = many_connections_capture(tmp_path / "many.pcap", 300)
    d = Dissector((9092,), True, [path.name], keep_messages=False)
    assert list(d.feed_many(read_segments([path]))) == []
    states = [conn.user for conn in d._reassembler.open_connections]
    # (each held piece is its segment's whole payload: the segment alone is kept)
    assert len(states) == 300 and all(type(s.held) is TcpSegment for s in states)
    assert not any(type(sink) is FrameReader for conn in d._reassembler.open_connections for sink in conn.sinks)
    held = _dissect(path, (9092,))
    assert len(held[0]) == 300 and held[1]["truncated"] == 300
    assert held == _dissect(path, (9092,), hold=False)


@pytest.mark.parametrize("seed", range(20))
def test_opens_partial_frame_means_the_reader_only_keeps_the_bytes(seed: int) -> None:
    """What `opens_partial_frame` promises: an in-step reader hearing those
    bytes makes no frame, does not lose step and keeps them all."""
    from kdissect.conn.framing import opens_partial_frame

    rng = random.Random(seed)
    for _ in range(300):
        size = rng.choice((0, 1, 3, 4, 5, 40, 300, 300_000, 200 << 20, -1, 1 << 31 - 1))
        body = rng.randbytes(rng.choice((0, 1, 2, 10, 100)))
        data = (size.to_bytes(4, "big", signed=True) + body)[: rng.choice((1, 2, 3, 4, 5, 50, 200))]
        frames: list = []
        reader = FrameReader(0, lambda prefix, n: True, True, 4, frames.append)
        lost = []
        reader.on_hunt = lambda: lost.append(1)
        reader.data(0, data, TcpSegment(0, 1, 5, "a", 1, "b", 2, 0, 0, 0x18, data, len(data)))
        if opens_partial_frame(data):
            assert frames == [] and not lost and reader.stats.seen_bytes == len(data)
            assert reader.pending_bytes == len(data) or reader._state != 0  # kept, or skipping an oversized one


def test_open_connections_come_in_the_order_they_opened(lab, tmp_path: Path) -> None:
    """`Reassembler.open_connections` reads the table in order (each
    connection's two keys side by side): the same as sorting by id."""
    for variant in ("messy", "repeated-long", "late"):
        r = Reassembler(RecordingListener())
        for seg in read_segments([lab.variant(variant)]):
            r.feed(seg)
            if seg.frame_number % 7 == 0:
                unique = {c.id: c for c in r._conns.values()}
                assert r.open_connections == [unique[i] for i in sorted(unique)]


# -- a connection closed with its one held piece -----------------------------------


def _first_pieces_capture(path: Path) -> Path:
    """Connections that each send one first piece and nothing else, of every
    kind the held-piece close must tell apart: partial requests (the
    many-connections shapes), a bare size field, fewer than 4 bytes, a
    frame too big for one buffer, a header cut inside the correlation id,
    a client id longer than the frame, and a broker that speaks first."""
    import importlib.util
    import struct

    from tests.support.pcaps import REPO

    spec = importlib.util.spec_from_file_location("manyconn", REPO / "benchmarks" / "manyconn.py")
    manyconn = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(manyconn)  # type: ignore[union-attr]
    header = struct.pack(">hhi", 3, 12, 7)
    pieces = [
        (0, struct.pack(">i", 40) + header + struct.pack(">h", 6) + b"client"),  # the benchmark's 20 bytes
        (0, struct.pack(">i", 40)),
        (0, struct.pack(">i", 40)[:3]),
        (0, struct.pack(">i", 300 << 10) + header),  # collected in pieces by a reader
        (0, struct.pack(">i", (256 << 10) - 1) + header),
        (0, struct.pack(">i", 40) + header[:6]),
        (0, struct.pack(">i", 40) + header + struct.pack(">h", 200) + b"cl"),
        (0, struct.pack(">i", 40) + header + struct.pack(">h", -1)),
        (1, struct.pack(">i", 40) + header),  # the broker's side
    ]
    ts = 1_700_000_000 * 10**6
    broker = bytes([10, 0, 0, 1])
    with open(path, "wb") as out:
        out.write(manyconn._PCAP_HEADER)
        for i, (direction, payload) in enumerate(pieces * 3):
            client = bytes([10, 1, 0, 1 + i])
            port, isn, peer_isn = 40000 + i, 1000 + i, 5000 + i
            packets = [(client, port, broker, 9092, isn, 0, 0x02, b"")]
            if i >= len(pieces):  # the second and third rounds: the handshake too
                packets += [(broker, 9092, client, port, peer_isn, isn + 1, 0x12, b""),
                            (client, port, broker, 9092, isn + 1, peer_isn + 1, 0x10, b"")]
            if direction == 0:
                packets.append((client, port, broker, 9092, isn + 1, peer_isn + 1, 0x18, payload))
            else:
                packets.append((broker, 9092, client, port, peer_isn + 1, isn + 1, 0x18, payload))
            if i >= 2 * len(pieces):  # the third round: each closed by a FIN from both sides
                end = len(payload) if direction == 0 else 0
                packets += [(client, port, broker, 9092, isn + 1 + end, peer_isn + 1, 0x11, b""),
                            (broker, 9092, client, port, peer_isn + 1 + (len(payload) - end), isn + 2 + end, 0x11,
                             b"")]
            for packet in packets:
                out.write(manyconn._packet(ts, *packet))
                ts += 3
    return path


@pytest.mark.parametrize("shape", ["handshake", "syn-data", "pieces"])
def test_lone_request_close_equals_the_reader_and_pairer(tmp_path: Path, shape: str) -> None:
    """`_Connection.close_lone_request`, which closes a connection whose one
    held piece opens a request it never finishes without making its reader
    and pairer, gives the same exchanges, accounting and stream keys as
    making them; and it is taken on the many-connections shapes."""
    if shape == "pieces":
        path = _first_pieces_capture(tmp_path / "pieces.pcap")
    else:
        path = many_connections_capture(tmp_path / f"{shape}.pcap", 200, shape)
    for ports in ((9092,), (1,)):
        dissectors: list = []
        fast = _dissect(path, ports, dissectors=dissectors)
        assert _dissect(path, ports, lone=False) == fast
        assert _dissect(path, ports, hold=False) == fast, "holding the first piece changed the result"
        taken, kafka = dissectors[0].lone_closes, fast[1]["kafka_connections"]
        # every connection of the benchmark's shapes; of the pieces, not those
        # whose piece is of another kind (a bare size field, a big frame, the broker's)
        assert (taken == kafka == 200) if shape != "pieces" else (0 < taken < kafka)
