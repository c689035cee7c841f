"""Capture reading checked frame by frame against tshark, on a real loopback
recording rewritten into every supported format and link layer, and on the
capture lab's recordings. Plus damaged and hostile files."""

from __future__ import annotations

import gzip
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kdissect.wire import capture
from tests.support import impair
from kdissect.wire.capture import (
    CaptureSet,
    ReadStats,
    capture_set_order,
    iter_frames,
    parse_pcap_header,
    read_segments,
    segment_from_frame,
)
from kdissect.failures import InputError
from kdissect.wire.linklayers import decode_frame_general
from kdissect.model.packet import TcpSegment
from kdissect.wire.reassembly import Reassembler
from tests.support.pcaps import compare_with_tshark, lab_captures, packet_count
from tests.support.paths import REPO
from tests.support.recording import RecordingListener


def _write_variant(trace: impair.Trace, name: str, directory: Path) -> Path:
    t = trace
    match name:
        case "pcap-us":
            return impair.write_pcap(t, directory / "v.pcap")
        case "pcap-us-bigendian":
            return impair.write_pcap(t, directory / "v.pcap", big_endian=True)
        case "pcap-ns":
            return impair.write_pcap(t, directory / "v.pcap", nanosecond=True)
        case "pcap-ns-bigendian":
            return impair.write_pcap(t, directory / "v.pcap", nanosecond=True, big_endian=True)
        case "pcap-modified-kuznetzov":
            return impair.write_pcap(t, directory / "v.pcap", modified=True)
        case "pcap-gzip":
            return impair.write_pcap(t, directory / "v.pcap", compress=True)  # detected by magic, not name
        case "pcapng":
            return impair.write_pcapng(t, directory / "v.pcapng")
        case "pcapng-obsolete-packet-blocks":
            return impair.write_pcapng(t, directory / "v.pcapng", packet_block="obsolete")
        case "pcapng-simple-packet-blocks":  # no timestamps: read as 0.0
            return impair.write_pcapng(t, directory / "v.pcapng", packet_block="simple")
        case "pcapng-gzip":
            return impair.write_pcapng(t, directory / "v.bin", tsresol=9, compress=True)
        case "pcapng-bigendian-mixed-interfaces":
            # three interfaces: Ethernet/us, Linux cooked v2/ns, raw IP/2^-20 s
            mixed = impair.mixed_links(t, ("ethernet", "sll2", "raw"))
            return impair.write_pcapng(mixed, directory / "v.pcapng", tsresol=[6, 9, 0x80 | 20], big_endian=True)
        case "vlan":
            return impair.write_pcap(impair.with_vlan(t, (100,)), directory / "v.pcap")
        case "qinq":
            return impair.write_pcap(impair.with_vlan(t, (10, 20)), directory / "v.pcap")
        case "snaplen96":
            return impair.write_pcap(impair.with_snaplen(t, 96), directory / "v.pcap")
        case "ipv6-extension-headers":
            return impair.write_pcap(impair.with_ipv6_extensions(t), directory / "v.pcap")
        case _:
            link = name.removeprefix("link-")
            relinked = impair.relink(t, link)
            if link == "ipv4":  # LINKTYPE_IPV4 holds only IPv4
                relinked = impair.Trace(tuple(p for p in relinked.packets if p.data[0] >> 4 == 4), relinked.snaplen)
            return impair.write_pcap(relinked, directory / "v.pcap")


VARIANTS = [
    "pcap-us",
    "pcap-us-bigendian",
    "pcap-ns",
    "pcap-ns-bigendian",
    "pcap-modified-kuznetzov",
    "pcap-gzip",
    "pcapng",
    "pcapng-obsolete-packet-blocks",
    "pcapng-simple-packet-blocks",
    "pcapng-gzip",
    "pcapng-bigendian-mixed-interfaces",
    "vlan",
    "qinq",
    "snaplen96",
    "ipv6-extension-headers",
    "link-sll",
    "link-sll2",
    "link-raw",
    "link-raw12",
    "link-ipv4",
    "link-null",
    "link-null-be",
    "link-loop",
]


def test_recording_is_tcp_over_ipv4_and_ipv6(clean: Path) -> None:
    segs = list(read_segments([clean]))
    assert any(":" in s.src for s in segs) and any("." in s.src for s in segs)
    assert sum(1 for s in segs if s.payload_len) > 50


@pytest.mark.parametrize("variant", VARIANTS)
def test_frames_match_tshark(trace: impair.Trace, tmp_path: Path, variant: str) -> None:
    path = _write_variant(trace, variant, tmp_path)
    compared, problems = compare_with_tshark(path)
    assert compared > 100
    assert problems == []


@pytest.mark.parametrize("path", lab_captures(), ids=lambda p: p.name)
def test_lab_capture_frames_match_tshark(path: Path) -> None:
    stats = ReadStats()
    list(read_segments([path], stats))
    _, problems = compare_with_tshark(path)
    assert problems == []
    assert stats.packets == packet_count(path)


def test_snaplen_cut_segments_are_marked_truncated(trace: impair.Trace, tmp_path: Path) -> None:
    path = impair.write_pcap(impair.with_snaplen(trace, 96), tmp_path / "s.pcap")
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields", "-e", "frame.number", "-e", "frame.cap_len", "-e", "frame.len"],
        check=True, capture_output=True, text=True,
    ).stdout
    cut_frames = {int(f) for f, cap, wire in (line.split("\t") for line in out.splitlines()) if int(cap) < int(wire)}
    segs = list(read_segments([path]))
    assert cut_frames and {s.frame_number for s in segs if s.truncated} == cut_frames
    for s in segs:
        assert len(s.payload) <= s.payload_len


def test_snaplen_inside_tcp_header_is_counted_undecodable(trace: impair.Trace, tmp_path: Path) -> None:
    path = impair.write_pcap(impair.with_snaplen(trace, 60), tmp_path / "s.pcap")
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    # 60 bytes cut every IPv6 frame (14 + 40 + 20 > 60): those cannot be decoded
    v6 = sum(1 for p in trace.packets if impair.ip_packet(p)[0] >> 4 == 6)
    assert stats.undecodable == v6 and len(segs) == stats.packets - v6
    assert stats.packets == len(trace.packets)


def test_non_tcp_and_fragments_are_counted(trace: impair.Trace, tmp_path: Path) -> None:
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.l2 import ARP, Ether

    extra = [
        Ether() / ARP(),
        Ether() / IP(dst="127.0.0.1") / UDP(dport=53) / b"q",
        Ether() / IP(dst="127.0.0.1") / ICMP(),
        Ether() / IP(dst="127.0.0.1", flags="MF", frag=0) / TCP(dport=9092) / (b"x" * 40),
        Ether() / IP(dst="127.0.0.1", frag=8, proto=6) / (b"y" * 40),
    ]
    base = trace.packets[-1].ts_ns
    added = tuple(impair.Packet(base + i + 1, bytes(p), len(bytes(p)), 1) for i, p in enumerate(extra))
    path = impair.write_pcap(impair.Trace(trace.packets + added, trace.snaplen), tmp_path / "x.pcap")
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    assert stats.non_tcp == 3
    assert stats.ip_fragments == 2
    assert stats.tcp_segments == len(segs) == len(trace.packets)
    assert stats.packets == packet_count(path)
    assert stats.bytes == sum(len(p.data) for p in trace.packets + added)


def test_capture_set_is_ordered_by_first_packet(trace: impair.Trace, tmp_path: Path) -> None:
    parts = impair.split(trace, 100)
    assert len(parts) >= 3
    # names sort the opposite way from time
    paths = [impair.write_pcap(part, tmp_path / f"{9 - i}.pcap") for i, part in enumerate(parts)]
    shuffled = paths[:]
    random.Random(1).shuffle(shuffled)
    assert capture_set_order(shuffled) == paths
    segs = list(read_segments(shuffled))
    for index, path in enumerate(paths):
        mine = [s for s in segs if s.capture_index == index]
        assert [s.frame_number for s in mine] == list(range(1, len(mine) + 1))
        _, problems = compare_with_tshark(path)
        assert problems == []
    assert len(segs) == len(trace.packets)


def test_files_without_packets_sort_last(trace: impair.Trace, tmp_path: Path) -> None:
    empty = impair.write_pcap(impair.Trace((), 65535), tmp_path / "a.pcap")
    full = impair.write_pcap(trace, tmp_path / "b.pcap")
    assert capture_set_order([empty, full]) == [full, empty]


def test_frames_decoded_one_by_one_give_the_same_segments(clean: Path) -> None:
    """The record loop's in-place decoding against undecoded frames decoded
    one at a time, by decode_frame and by its general path (no short cut)."""
    data = clean.read_bytes()
    header = parse_pcap_header(data[:24])
    assert header.linktype == 1 and header.ticks_per_second == 1_000_000 and header.snaplen == 262144
    by_hand, general = [], []
    latest = 0  # a segment's order_ts: the latest time so far in its file (a loopback recording's clock
    for frame in iter_frames([clean]):  # can step back a few microseconds between CPUs)
        latest = max(latest, frame.ts)
        seg = segment_from_frame(frame.linktype, frame.ts, frame.data, frame.wire_len, 0, frame.frame_number)
        if seg is not None:
            seg.order_ts = latest  # (segment_from_frame sees one frame: its own time)
            by_hand.append(seg)
        result = decode_frame_general(frame.linktype, frame.data, 0, len(frame.data), frame.wire_len, frame.ts, 0,
                                      frame.frame_number, latest)
        if type(result) is TcpSegment:
            general.append(result)
    assert by_hand == list(read_segments([clean])) == general
    assert len(by_hand) > 100


def test_frames_carry_link_types_of_each_pcapng_interface(trace: impair.Trace, tmp_path: Path) -> None:
    mixed = impair.mixed_links(trace, ("ethernet", "sll", "null"))
    path = impair.write_pcapng(mixed, tmp_path / "m.pcapng", tsresol=[6, 9])
    frames = list(iter_frames([path]))
    assert {f.linktype for f in frames} == {1, 113, 0}
    assert len({f.interface for f in frames}) == 6  # 3 link types x 2 resolutions
    _, problems = compare_with_tshark(path)
    assert problems == []


# -- damaged files -----------------------------------------------------------------


def test_cut_mid_record_keeps_every_whole_packet(trace: impair.Trace, tmp_path: Path) -> None:
    path = impair.write_pcap(trace, tmp_path / "c.pcap")
    offsets = impair.record_offsets(trace)
    cut_at = offsets[200] + 16 + 10  # 10 bytes into packet 201
    impair.cut_file(path, cut_at)
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    assert [s.frame_number for s in segs] == list(range(1, 201))
    assert stats.cut_records == 1 and stats.unread_bytes == 26
    assert packet_count(path) == 200  # Wireshark's reader agrees on what is intact
    assert any("ends inside packet 201" in p for p in stats.problems)


def test_cut_inside_record_header(trace: impair.Trace, tmp_path: Path) -> None:
    path = impair.write_pcap(trace, tmp_path / "c.pcap")
    impair.cut_file(path, impair.record_offsets(trace)[50] + 7)
    stats = ReadStats()
    assert len(list(read_segments([path], stats))) == 50
    assert stats.cut_records == 1 and stats.unread_bytes == 7


def test_gzip_members_and_padding(trace: impair.Trace, tmp_path: Path) -> None:
    raw = impair.pcap_bytes(trace)
    half = impair.record_offsets(trace)[100]
    path = tmp_path / "m.gz"
    path.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]) + b"\0" * 700)
    stats = ReadStats()
    assert len(list(read_segments([path], stats))) == len(trace.packets)
    assert stats.problems == [] and stats.damaged_files == 0


def test_gzip_bomb_is_streamed(tmp_path: Path) -> None:
    """76 MB of zero-filled records in a 75 kB file: read in bounded memory
    (checked in a fresh process, whose peak size is its own)."""
    import zlib

    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack("<IIII", 1, 0, 60, 60) + bytes(60)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = record * 10_000
    parts = [packer.compress(header)] + [packer.compress(chunk) for _ in range(100)] + [packer.flush()]
    path = tmp_path / "bomb.gz"
    path.write_bytes(b"".join(parts))
    code = (
        "import sys\n"
        "from kdissect.wire.capture import ReadStats, iter_frames\n"
        "stats = ReadStats()\n"
        "for _ in iter_frames([sys.argv[1]], stats): pass\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the
        # forked copy of the (large) test process.
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print(stats.packets, hwm)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.split()
    assert int(out[0]) == 1_000_000, out
    assert int(out[1]) < 100_000, out  # KiB: far below the 76 MB the file inflates to


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_cut_gzip_keeps_what_was_decompressed(trace: impair.Trace, tmp_path: Path, fmt: str) -> None:
    raw = impair.pcap_bytes(trace) if fmt == "pcap" else impair.pcapng_bytes(trace)
    packed = gzip.compress(raw)
    path = tmp_path / "g"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    assert 0 < len(segs) < len(trace.packets)
    assert [s.frame_number for s in segs] == list(range(1, len(segs) + 1))
    assert stats.problems


def test_damaged_record_header_stops_and_counts(trace: impair.Trace, tmp_path: Path) -> None:
    data = bytearray(impair.pcap_bytes(trace))
    at = impair.record_offsets(trace)[120]
    struct.pack_into("<I", data, at + 8, 0x7FFFFFF0)  # absurd captured length
    path = tmp_path / "d.pcap"
    path.write_bytes(bytes(data))
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    assert len(segs) == 120
    assert stats.damaged_files == 1 and stats.unread_bytes == len(data) - at


def test_pcapng_damaged_block_stops_and_counts(trace: impair.Trace, tmp_path: Path) -> None:
    data = bytearray(impair.pcapng_bytes(trace))
    # find the 31st enhanced packet block and break its trailing length
    pos, seen = 0, 0
    while True:
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            seen += 1
            if seen == 31:
                break
        pos += blen
    struct.pack_into("<I", data, pos + blen - 4, blen + 4)
    path = tmp_path / "d.pcapng"
    path.write_bytes(bytes(data))
    stats = ReadStats()
    assert len(list(read_segments([path], stats))) == 30
    assert stats.damaged_files == 1 and stats.unread_bytes == len(data) - pos


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "empty"),
        (b"hello world, not a capture\n", "not a pcap"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "too short"),
        # mtime=0: the gzip header must not hold the clock, or pytest-xdist's
        # workers collect different test ids when a second turns between them
        (gzip.compress(b"just text inside gzip, long enough", mtime=0), "not a pcap"),
        (b"\x1f\x8b\x08\x00garbage-garbage-garbage", "corrupt"),
        (b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x00\x00\x00\x00" + b"\0" * 16, "pcapng"),
    ],
    ids=["empty", "text", "short-pcap-header", "text-in-gzip", "corrupt-gzip", "short-pcapng"],
)
def test_not_a_capture_is_a_one_line_input_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        list(read_segments([path]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_and_directory_paths_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        list(read_segments([tmp_path / "nope.pcap"]))
    with pytest.raises(InputError, match="directory"):
        list(read_segments([tmp_path]))


@pytest.mark.parametrize("where", ["pcap", "inside-gzip", "after-gzip"])
def test_garbage_appended_is_counted(trace: impair.Trace, tmp_path: Path, where: str) -> None:
    path = tmp_path / "g.pcap"
    garbage = bytes(range(256)) * 40
    if where == "pcap":
        path.write_bytes(impair.pcap_bytes(trace) + garbage)
    elif where == "inside-gzip":
        path.write_bytes(gzip.compress(impair.pcap_bytes(trace) + garbage))
    else:
        path.write_bytes(gzip.compress(impair.pcap_bytes(trace)) + garbage)
    stats = ReadStats()
    segs = list(read_segments([path], stats))
    assert len(segs) >= len(trace.packets)  # every real packet is still there
    assert stats.problems and (stats.damaged_files or stats.cut_records or stats.undecodable)


def _read_or_input_error(path: Path) -> ReadStats:
    """Read and reassemble a damaged file: only InputError may come out."""
    stats = ReadStats()
    reassembler = Reassembler(RecordingListener())
    try:
        for seg in read_segments([path], stats):
            assert len(seg.payload) <= seg.payload_len
            reassembler.feed(seg)
        reassembler.finish()
    except InputError as err:
        assert "\n" not in str(err)
    return stats


@pytest.mark.parametrize("fmt", ["pcap", "pcapng", "pcap.gz", "pcapng.gz", "sll2", "ipv4"])
def test_fuzz_flipped_bytes_never_raise(trace: impair.Trace, tmp_path: Path, fmt: str) -> None:
    small = impair.Trace(trace.packets[:60], trace.snaplen)
    if fmt == "sll2":
        clean = impair.pcap_bytes(impair.relink(small, "sll2"))
    elif fmt == "ipv4":
        clean = impair.pcap_bytes(impair.relink(small, "raw"))
    elif fmt.startswith("pcapng"):
        clean = impair.pcapng_bytes(small)
    else:
        clean = impair.pcap_bytes(small)
    rng = random.Random(fmt)
    path = tmp_path / "f"
    for _ in range(60):
        data = bytearray(clean)
        for _ in range(rng.choice([1, 3, 20])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        if rng.random() < 0.2:
            data += rng.randbytes(rng.randrange(1, 300))
        if fmt.endswith(".gz"):
            data = bytearray(gzip.compress(bytes(data)))
            if rng.random() < 0.3:
                data[rng.randrange(10, len(data))] ^= 0xFF
        path.write_bytes(bytes(data))
        _read_or_input_error(path)


@pytest.mark.parametrize("block_type", [1, 2, 3, 5, 6])
def test_fuzz_short_pcapng_blocks(trace: impair.Trace, tmp_path: Path, block_type: int) -> None:
    """Blocks too short for their fields, placed where a packet would be."""
    good = impair.pcapng_bytes(impair.Trace(trace.packets[:3], trace.snaplen))
    path = tmp_path / "s.pcapng"
    for length in range(12, 40, 4):
        body = bytes(range(length - 12))
        block = struct.pack("<II", block_type, length) + body + struct.pack("<I", length)
        for data in (good + block, good + block + good[28:], good[:60] + block):
            path.write_bytes(data)
            _read_or_input_error(path)


def test_fuzz_broken_headers(trace: impair.Trace, tmp_path: Path) -> None:
    clean = impair.pcap_bytes(impair.Trace(trace.packets[:20], trace.snaplen))
    path = tmp_path / "h.pcap"
    for pos in range(24):
        for value in (0x00, 0xFF, 0x80):
            data = bytearray(clean)
            data[pos] = value
            path.write_bytes(bytes(data))
            _read_or_input_error(path)


def test_unreadable_file_is_input_error(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) missing")
    # root can read anything: check as an unprivileged user. That user needs an
    # interpreter it may execute (the system one: a venv's or pyenv's may live
    # under /root) and a copy of the package it may read (the checkout may
    # not be readable to it); kdissect.wire.capture needs only the standard library.
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        pytest.fail("/usr/bin/python3 missing: needed to run as an unprivileged user")
    public = Path(tempfile.mkdtemp(prefix="kdissect-unprivileged-"))
    try:
        shutil.copytree(REPO / "kdissect", public / "kdissect",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for item in [public, *public.rglob("*")]:
            item.chmod(0o755 if item.is_dir() else 0o644)
        path = public / "locked.pcap"
        path.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 20)
        path.chmod(0)
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(system_python), "-c",
             "import sys; from kdissect.wire.capture import read_segments\n"
             "from kdissect.failures import InputError\n"
             "try:\n list(read_segments([sys.argv[1]]))\n"
             "except InputError as e: print('InputError:', e)",
             str(path)],
            capture_output=True, text=True, cwd=public, env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        )
    finally:
        shutil.rmtree(public, ignore_errors=True)
    assert "InputError:" in out.stdout and "cannot open" in out.stdout and "Permission" in out.stdout, out


def test_impair_command_line(clean: Path, trace: impair.Trace, tmp_path: Path) -> None:
    out = tmp_path / "o.pcapng"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.impair", str(clean), str(out), "vlan:7", "link:sll2", "snaplen:96", "pcapng-ns", "gzip"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    frames = list(iter_frames([out]))
    assert len(frames) == len(trace.packets) and {f.linktype for f in frames} == {276}
    assert max(len(f.data) for f in frames) == 96
    _, problems = compare_with_tshark(out)
    assert problems == []


# -- chunks, times, resolutions, secrets ------------------------------------------------


@pytest.mark.parametrize("chunk", [4096, 1000, 100, 13])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng", "pcapng-mixed-bigendian", "pcapng-gzip"])
def test_chunk_boundaries_inside_records_and_blocks(trace: impair.Trace, tmp_path: Path, monkeypatch, chunk: int,
                                                    fmt: str) -> None:
    """Chunks ending inside records, blocks and their headers give the same
    segments and counts as the default chunk size, for whole and cut files."""
    if fmt == "pcap":
        path = impair.write_pcap(trace, tmp_path / "c")
    elif fmt == "pcapng":
        path = impair.write_pcapng(trace, tmp_path / "c")
    elif fmt == "pcapng-gzip":
        path = impair.write_pcapng(trace, tmp_path / "c", tsresol=9, compress=True)
    else:
        path = impair.write_pcapng(impair.mixed_links(trace, ("ethernet", "sll2", "raw")), tmp_path / "c",
                                   tsresol=[6, 9, 0x80 | 20], big_endian=True)
    cut = impair.cut_file(shutil.copy(path, tmp_path / "cut"), path.stat().st_size * 2 // 3)

    def read(target: Path) -> tuple[list[tuple], ReadStats]:
        stats = ReadStats()
        return [(s.frame_number, s.ts, s.order_ts, s.src, s.seq, bytes(s.payload)) for s in read_segments([target], stats)], stats

    expected = {target: read(target) for target in (path, cut)}
    monkeypatch.setattr(capture, "_CHUNK", chunk)
    for target in (path, cut):
        assert read(target) == expected[target]
    assert len(expected[path][0]) == len(trace.packets)
    assert expected[cut][1].problems and 0 < len(expected[cut][0]) < len(trace.packets)


def test_times_are_exact_integer_nanoseconds(trace: impair.Trace, tmp_path: Path) -> None:
    """Every format gives the packets' times exactly (impair keeps them as
    integer ns): microsecond pcap to the microsecond, nanosecond pcap and
    pcapng to the nanosecond, 2^-20 s ticks rounded to the nearest ns."""
    from dataclasses import replace

    # the recording is in microseconds: give the packets nanosecond parts
    trace = impair.Trace(tuple(replace(p, ts_ns=p.ts_ns + (i * 7919) % 1000) for i, p in enumerate(trace.packets)),
                         trace.snaplen)
    times = [p.ts_ns for p in trace.packets]
    assert any(t % 1000 for t in times)
    micro = [t // 1000 * 1000 for t in times]
    cases = {
        impair.write_pcap(trace, tmp_path / "us.pcap"): micro,
        impair.write_pcap(trace, tmp_path / "ns.pcap", nanosecond=True): times,
        impair.write_pcapng(trace, tmp_path / "us.pcapng"): micro,
        impair.write_pcapng(trace, tmp_path / "ns.pcapng", tsresol=9): times,
        impair.write_pcapng(trace, tmp_path / "bin.pcapng", tsresol=0x80 | 20):
            [((t << 20) // 10**9 * 10**9 + (1 << 19)) >> 20 for t in times],
    }
    for path, expected in cases.items():
        frames = list(iter_frames([path]))
        assert [f.ts for f in frames] == expected, path.name
        assert all(type(f.ts) is int for f in frames)


@pytest.mark.parametrize("tsresol,resolution,unit", [(6, 10**6, "us"), (9, 10**9, "ns"), (3, 1000, "us"),
                                                      (0x80 | 20, 1 << 20, "ns")])
def test_capture_set_resolutions(trace: impair.Trace, tmp_path: Path, tsresol: int, resolution: int, unit: str) -> None:
    pcap_us = impair.write_pcap(trace, tmp_path / "a.pcap")
    other = impair.write_pcapng(trace, tmp_path / "b.pcapng", tsresol=tsresol)
    both = CaptureSet([other, pcap_us])
    assert dict(zip(both.paths, both.resolutions)) == {pcap_us: 10**6, other: resolution}
    assert both.finest_resolution == max(10**6, resolution)
    assert both.timestamp_unit == unit
    ns = CaptureSet([impair.write_pcap(trace, tmp_path / "n.pcap", nanosecond=True)])
    assert (ns.resolutions, ns.timestamp_unit) == ([10**9], "ns")


def test_decryption_secrets_are_collected_and_never_shown(clean: Path, tmp_path: Path) -> None:
    """A Decryption Secrets Block made by editcap --inject-secrets (a made-up
    key log line): collected in CaptureSet.secrets before the packets after
    it, its bytes never in a repr, a problem text or the accounting."""
    line = b"CLIENT_RANDOM " + b"ab" * 32 + b" " + b"cd" * 48 + b"\n"
    keylog = tmp_path / "keys.txt"
    keylog.write_bytes(line)
    out = tmp_path / "with-secrets.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{keylog}", str(clean), str(out)], check=True,
                   capture_output=True)
    captures = CaptureSet([out])
    segments = captures.segments()
    first = next(segments)
    assert first.frame_number == 1
    assert captures.secrets == [(0x544C534B, line)]  # "TLSK", the key log's bytes
    rest = list(segments)
    assert len(rest) + 1 == len(list(read_segments([clean])))
    secret_text = line.strip().decode()
    shown = repr(captures.secrets) + str(captures.secrets[0]) + repr(captures.stats)
    assert "ab" * 32 not in shown and "cd" * 48 not in shown and secret_text not in shown
    assert "0x544c534b" in repr(captures.secrets[0]) and f"{len(line)} bytes" in repr(captures.secrets[0])
    # a file without secrets has none; a damaged secrets block is a counted problem, not a crash
    assert CaptureSet([clean]).secrets == []
    data = bytearray(out.read_bytes())
    pos = 0
    while struct.unpack_from("<I", data, pos)[0] != 0x0A:
        pos += struct.unpack_from("<I", data, pos + 4)[0]
    struct.pack_into("<I", data, pos + 12, 1 << 20)  # secrets length beyond the block
    broken = tmp_path / "broken.pcapng"
    broken.write_bytes(bytes(data))
    damaged = CaptureSet([broken])
    assert len(list(damaged.segments())) == len(rest) + 1 and damaged.secrets == []
    assert any("damaged decryption secrets block" in p for p in damaged.stats.problems)
    assert not any(secret_text in p for p in damaged.stats.problems)
