"""Each byte of a capture cut into byte ranges is read once.

The driver only probes a small window at each split point; the tasks number
packets locally and the driver checks the chain after the job
(kdissect.spark.plan). Measured on the wire: the captures live in a real S3
server (SeaweedFS) behind a proxy that counts the bytes of every GET answer
per object, whichever process asked. Expected tables come from `kdissect
export` on local copies, packet counts from tshark, and the summary tables
from the same job over the local copies without any cut (each file one task).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kdissect.spark import plan
from kdissect.spark.frames import local_first_frame, renumber_frames, renumber_text
from kdissect.spark.job import JobOptions, run_job
from kdissect.wire import stores
from tests.support.counting_proxy import CountingProxy
from tests.support.spark import canonical, editcap_split, export_rows, table_rows, tshark_frame_count

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

BUCKET = "captures"
SPLIT_SIZE = 384 << 10
SUMMARY_TABLES = ("partition_errors", "latency", "waits", "errors", "errors_by_client", "throttle", "timeseries",
                  "topics", "groups", "clients", "producers")


@pytest.fixture(scope="module")
def archive(captures_dir, tmp_path_factory):
    """A pcap and a pcapng of about 2.5 MB each (a rotation of the lab
    captures merged by time), a gzip file and a rotated set of small files."""
    local = tmp_path_factory.mktemp("once")
    rotated_source = captures_dir / "consume_group_kafka.pcap"
    merged_sources = [p for p in sorted(captures_dir.glob("*.pcap"))
                      if p.name not in ("admin.pcap", rotated_source.name)]
    work = local.parent / "once-work"
    work.mkdir()
    merged = work / "merged.pcap"
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(merged), *map(str, merged_sources)], check=True)
    halves = editcap_split(merged, tshark_frame_count(merged) // 2 + 1, work / "halves")
    assert len(halves) == 2
    shutil.copy(halves[0], local / "first.pcap")
    subprocess.run(["editcap", "-F", "pcapng", str(halves[1]), str(local / "second.pcapng")], check=True)
    (local / "admin.pcap.gz").write_bytes(gzip.compress((captures_dir / "admin.pcap").read_bytes()))
    editcap_split(rotated_source, max(2, tshark_frame_count(rotated_source) // 4), local / "rotated")
    for name in ("first.pcap", "second.pcapng"):
        assert (local / name).stat().st_size > 3 * SPLIT_SIZE
    return local


@pytest.fixture(scope="module")
def counted_store(archive):
    """The archive in SeaweedFS, reached through a counting proxy (the AWS
    variables of this process point at it: the driver's and, through the
    tasks' closures, the local executors')."""
    from tools.lab.seaweedfs import s3_server

    with s3_server() as server:
        server.make_bucket(BUCKET)
        for path in sorted(archive.rglob("*")):
            if path.is_file():
                server.upload(path, f"{BUCKET}/once/{path.relative_to(archive)}")
        with CountingProxy(server.endpoint) as proxy:
            saved = dict(os.environ)
            os.environ.clear()
            os.environ.update(server.env("writer", saved), AWS_ENDPOINT_URL=proxy.endpoint)
            stores.configure(stores.StoreSettings.from_conf())
            try:
                yield proxy
            finally:
                os.environ.clear()
                os.environ.update(saved)
                stores.configure(stores.StoreSettings())


def _local_captures(archive: Path) -> list[Path]:
    return sorted(p for p in archive.rglob("*") if p.is_file())


def test_each_byte_of_a_cut_file_is_read_once_and_tables_equal_export(spark, archive, counted_store, tmp_path):
    proxy = counted_store
    proxy.reset()
    outdir = tmp_path / "out"
    # every connection shuffled: the lab captures merged reuse 4-tuples across
    # ranges, which would make the in-place dissection's check read everything
    # a second time (kdissect.spark.inrange), a rule of its own
    run_job(JobOptions(inputs=[f"s3://{BUCKET}/once"], outdir=str(outdir), master=None, split_size=SPLIT_SIZE,
                       in_place=False), spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["files_read_again_after_range_check"] == []
    assert manifest["files_read_whole_after_boundary_check"] == []
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    fetched = {name: proxy.bytes_for(f"/{BUCKET}/once/{name}") for name in ("first.pcap", "second.pcapng")}
    # the driver's probe alone, measured again (its kept blocks dropped first)
    proxy.reset()
    stores.configure(stores.StoreSettings.from_conf())
    uris = [(f"s3://{BUCKET}/once/{name}", name.rsplit(".", 1)[1]) for name in fetched]
    plan.probe_ranges(plan.plan_splits(uris, SPLIT_SIZE))
    for name, total in fetched.items():
        size = (archive / name).stat().st_size
        tasks = by_name[name]["read_tasks"]
        assert tasks >= 4
        probe = proxy.bytes_for(f"/{BUCKET}/once/{name}")
        # the probe reads 16 KiB blocks near each split point (the chain of
        # eight record headers it checks spans eight loopback packets of up to 64 KiB)
        assert 0 < probe <= tasks * (8 * plan.PROBE_BLOCK)
        # every byte once; beyond that and the probe only small windows: the
        # driver's first look (64 KiB), and per range the pcap header and the
        # last record's rest (16 KiB blocks). Reading twice would be 2x the size.
        print(f"{name}: {size} bytes, {tasks} ranges, {total} fetched ({total / size:.3f}x), probe {probe}")
        assert size <= total - probe <= size + (64 << 10) + tasks * (48 << 10)
    assert by_name["admin.pcap.gz"]["read_tasks"] == 1

    captures = _local_captures(archive)
    assert manifest["read"]["packets"] == sum(tshark_frame_count(p) for p in captures)
    expected = export_rows(captures, tmp_path / "export.parquet")
    got = table_rows(outdir, "exchanges")
    assert len(expected) > 1000
    assert canonical(got) == canonical(expected)
    assert manifest["counts"]["exchanges"] == len(expected)

    # the summary tables and counts equal those of the job reading each local file whole
    whole = tmp_path / "whole"
    run_job(JobOptions(inputs=[str(archive)], outdir=str(whole), master=None, split_size=1 << 40), spark=spark)
    whole_manifest = json.loads((whole / "manifest.json").read_text())
    assert whole_manifest["byte_range_tasks"] == len(captures) - 1  # (the gzip file aside)
    for name in SUMMARY_TABLES:
        assert canonical(table_rows(outdir, name)) == canonical(table_rows(whole, name)), name
    assert manifest["accounting"] == whole_manifest["accounting"]
    assert manifest["counts"] == whole_manifest["counts"]
    assert {key: value for key, value in manifest["read"].items() if key != "files"} == \
        {key: value for key, value in whole_manifest["read"].items() if key != "files"}


def _records(data: bytes) -> list[bytes]:
    records, position = [], 24
    while position + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, position + 8)[0]
        records.append(data[position:position + 16 + caplen])
        position += 16 + caplen
    return records


def _with_false_boundary(source: Path, target: Path, split_at: int) -> int:
    """`source` with one more packet (a frame of an experimental EtherType)
    around file offset `split_at`, whose payload ends with a chain of eight
    made-up but plausible record headers: a probe from `split_at` takes the
    first of them for a record start. Returns that offset."""
    data = source.read_bytes()
    records = _records(data)
    out = bytearray(data[:24])
    index = 0
    while len(out) + len(records[index]) < split_at - 64:
        out += records[index]
        index += 1
    sec, usec = struct.unpack_from("<II", records[index - 1])
    fake_chain = b"".join(struct.pack("<IIII", sec, usec, 20, 20) + bytes(range(20)) for _ in range(8))
    filler = bytes(split_at + 64 - len(out) - 16 - 14)  # zeros: no plausible header (wire length 0)
    frame = b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + filler + fake_chain
    out += struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame
    false_start = len(out) - len(fake_chain)
    for record in records[index:]:
        out += record
    target.write_bytes(bytes(out))
    return false_start


def test_a_false_boundary_is_caught_after_the_read_and_the_file_read_again(spark, captures_dir, tmp_path):
    source = captures_dir / "forensics_kafka.pcap"
    split_size = 200_000
    forged = tmp_path / "forged.pcap"
    false_start = _with_false_boundary(source, forged, split_size)
    # the probe is fooled: the second range's boundary is inside a packet
    ranges = plan.probe_ranges(plan.plan_splits([(str(forged), "pcap")], split_size))
    assert ranges[1].start == split_size and ranges[1].boundary == false_start
    outdir = tmp_path / "out"
    run_job(JobOptions(inputs=[str(forged)], outdir=str(outdir), master=None, split_size=split_size), spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["files_read_again_after_range_check"] == [str(forged)]
    # the whole-range pre-pass is fooled the same way, so the file is read by one task
    assert manifest["files_read_whole_after_boundary_check"] == [str(forged)]
    assert manifest["read"]["packets"] == tshark_frame_count(forged) == len(_records(source.read_bytes())) + 1
    assert canonical(table_rows(outdir, "exchanges")) == canonical(export_rows([forged], tmp_path / "e.parquet"))


def test_a_clock_going_back_across_a_cut_reads_the_file_again_in_ranges(spark, captures_dir, tmp_path):
    """Feed times counted from a range's start are the file's only if its
    first packet is not earlier than the packets before the range."""
    from kdissect.wire.capture import describe_captures

    pair = describe_captures([captures_dir / "forensics_kafka.pcap", captures_dir / "large_records_kafka.pcap"])
    later_first = tmp_path / "back.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(later_first), str(pair[1].path), str(pair[0].path)],
                   check=True)
    split_size = later_first.stat().st_size // 4
    outdir = tmp_path / "out"
    run_job(JobOptions(inputs=[str(later_first)], outdir=str(outdir), master=None, split_size=split_size),
            spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["files_read_again_after_range_check"] == [str(later_first)]
    assert manifest["files_read_whole_after_boundary_check"] == []  # the pre-pass hands over the feed times
    assert manifest["inputs"][0]["read_tasks"] >= 4
    assert manifest["read"]["packets"] == tshark_frame_count(later_first)
    assert canonical(table_rows(outdir, "exchanges")) == canonical(
        export_rows([later_first], tmp_path / "e.parquet"))


def test_local_frame_numbers_are_made_global():
    import pyarrow as pa

    offsets = [0, 0, 700, 1500]  # split 1 starts its file; splits 2 and 3 follow 700 and 1500 packets
    table = pa.table({"request_frame": pa.array([5, local_first_frame(2), local_first_frame(3) + 9, None],
                                                pa.int64()),
                      "response_frame": pa.array([None, 6, local_first_frame(2) + 1, 8], pa.int64())})
    renumbered = renumber_frames(table, offsets)
    assert renumbered.column("request_frame").to_pylist() == [5, 701, 1510, None]
    assert renumbered.column("response_frame").to_pylist() == [None, 6, 702, 8]
    assert renumber_text(f"a.pcap: packet {local_first_frame(3) + 1} is malformed", offsets) == \
        "a.pcap: packet 1502 is malformed"
    assert renumber_text("a.pcap: packet 12 is malformed", offsets) == "a.pcap: packet 12 is malformed"


def _pcapng_block(block_type: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", block_type, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _pcapng_with_a_late_interface(source: Path, target: Path) -> None:
    """`source`'s packets as pcapng: the first half on interface 0
    (microseconds), then a second interface description (nanoseconds) and
    the second half on it, so a range after that block that did not know the
    interface would read its packets as malformed."""
    records = _records(source.read_bytes())
    nanoseconds = struct.pack("<HH", 9, 1) + b"\x09\x00\x00\x00" + struct.pack("<HH", 0, 0)
    out = bytearray(_pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    out += _pcapng_block(1, struct.pack("<HHI", 1, 0, 262144))
    half = len(records) // 2
    for index, record in enumerate(records):
        if index == half:
            out += _pcapng_block(1, struct.pack("<HHI", 1, 0, 262144) + nanoseconds)
        sec, usec, caplen, wirelen = struct.unpack_from("<IIII", record)
        ticks = (sec * 10**6 + usec) * (1000 if index >= half else 1)
        out += _pcapng_block(6, struct.pack("<IIIII", int(index >= half), ticks >> 32, ticks & 0xFFFFFFFF, caplen,
                                            wirelen) + record[16:])
    target.write_bytes(bytes(out))


def test_a_pcapng_interface_described_mid_file_reads_the_file_again(spark, captures_dir, tmp_path):
    """The ranges know only the interfaces of the file's head: a range that
    meets another one (not the file's last range) sends the file to the
    whole-range pre-pass, which hands later ranges the interfaces in force."""
    late = tmp_path / "late.pcapng"
    _pcapng_with_a_late_interface(captures_dir / "forensics_kafka.pcap", late)
    split_size = late.stat().st_size // 5
    outdir = tmp_path / "out"
    run_job(JobOptions(inputs=[str(late)], outdir=str(outdir), master=None, split_size=split_size), spark=spark)
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["files_read_again_after_range_check"] == [str(late)]
    assert manifest["files_read_whole_after_boundary_check"] == []
    assert manifest["inputs"][0]["read_tasks"] >= 4
    assert manifest["read"]["packets"] == tshark_frame_count(late)
    assert manifest["read"]["undecodable"] == 0
    assert canonical(table_rows(outdir, "exchanges")) == canonical(export_rows([late], tmp_path / "e.parquet"))
