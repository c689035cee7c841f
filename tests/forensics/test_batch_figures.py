"""The forensic tallies' quick walk of record sets (forensics.batches
`_plain_figures`) gives exactly the figures of the records decoder's walk
(`_decoded_figures`, the path `kdissect records` lists from), and leaves to
the decoder every set it cannot answer for: control batches, damage, cut or
over-limit batches. Record sets from real captures, every codec."""

from __future__ import annotations

import random
from pathlib import Path

from kdissect.conn.kept_fetch import FetchResponseFrame
from kdissect.conn.kept_produce import produce_parts
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS
from kdissect.forensics.batches import _decoded_figures, _plain_figures, set_figures
from kdissect.records.codecs import DEFAULT_LIMIT

CAPTURES = ("forensics_kafka.pcap", "java_clients_kafka.pcap", "java_transactions_kafka.pcap",
            "consume_group_kafka.pcap", "transactions_kafka.pcap", "large_records_kafka.pcap")


def _record_sets(path: Path) -> list[tuple[bytes, bool]]:
    """(records field, produced) of every Produce request and Fetch response partition."""
    sets = []
    for ex in Analysis([path], keep_apis=FORENSIC_APIS):
        if ex.api_key == 0 and ex.request is not None:  # (kept as its frame: kdissect.conn.kept_produce)
            sets += [(bytes(raw), True) for _label, _partition, raw in produce_parts(ex)[1] if raw]
        elif ex.api_key == 1 and isinstance(ex.response, FetchResponseFrame):  # (kdissect.conn.kept_fetch)
            sets += [(bytes(entry.records), False) for _label, partitions in ex.response.topics()
                     for entry in partitions if entry.records]
        elif ex.api_key == 1 and ex.response is not None:
            sets += [(bytes(entry.records), False) for topic in ex.response.body.responses or ()
                     for entry in topic.partitions or () if entry.records]
    return sets


# every field of a span (named here: the compiled class has no __slots__ to read them from)
_SPAN_FIELDS = ("first", "last", "count", "offsets", "producer_id", "producer_epoch", "base_sequence",
                "transactional", "wire_bytes", "record_bytes", "first_stamp", "newest_stamp")


def _figures(figures) -> tuple:
    return (figures.records, figures.control_records, figures.record_bytes, figures.batch_bytes, figures.batches,
            figures.codecs, figures.next_offset, figures.problems,
            [tuple(getattr(span, name) for name in _SPAN_FIELDS) for span in figures.spans])


def test_quick_walk_equals_the_decoders(captures_dir):
    sets = [item for name in CAPTURES for item in _record_sets(captures_dir / name)]
    rng = random.Random(29)
    damaged = []
    for raw, produced in sets:
        flipped = bytearray(raw)
        flipped[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        damaged += [(bytes(flipped), produced), (raw[:rng.randrange(len(raw))], produced)]
    answered = declined = 0
    codecs = set()
    for raw, produced in sets + damaged:
        for limit in (DEFAULT_LIMIT, 100):  # 100 bytes: most compressed batches go over the limit
            decoded = _decoded_figures(raw, limit, produced)
            quick = _plain_figures(raw, limit, produced)
            assert _figures(set_figures(raw, limit, produced)) == _figures(decoded)
            if quick is None:
                declined += 1
                continue
            answered += 1
            codecs.update(quick.codecs)
            assert _figures(quick) == _figures(decoded)
    assert answered > len(sets) and declined > 100  # both paths ran
    assert codecs >= {"none", "gzip", "snappy", "lz4", "zstd"}


def test_control_and_damaged_sets_go_to_the_decoder(captures_dir):
    sets = _record_sets(captures_dir / "java_transactions_kafka.pcap")
    with_markers = [(raw, produced) for raw, produced in sets
                    if _decoded_figures(raw, DEFAULT_LIMIT, produced).control_records]
    assert with_markers  # the transactions' commit markers, as fetched
    for raw, produced in with_markers:
        assert _plain_figures(raw, DEFAULT_LIMIT, produced) is None
    raw, produced = sets[0]
    bad_crc = bytearray(raw)
    bad_crc[-1] ^= 0xFF  # the last record's last byte: the CRC no longer matches
    assert _plain_figures(bytes(bad_crc), DEFAULT_LIMIT, produced) is None
    assert set_figures(bytes(bad_crc), DEFAULT_LIMIT, produced).problems == 1


def test_quick_walk_equals_the_decoders_on_long_varints():
    """Records whose sizes, lengths and deltas take one, two and three varint
    bytes (batches built by kafka-python, an independent encoder), every codec."""
    import pytest

    from kdissect.records.model import Record
    from tests.support.records import CODECS, kafka_python_batch

    pytest.importorskip("kafka")
    records = [Record(offset=0, timestamp=1_700_000_000_000 + 7919 * i, key=b"k" * (i * 37 % 300),
                      value=None if i == 5 else bytes(range(256)) * (size // 256) + b"v" * (size % 256),
                      headers=[("h" * (i * 29 % 200), b"x" * (i * 53 % 9000))] if i % 3 else [])
               for i, size in enumerate((0, 1, 63, 64, 65, 200, 8191, 8192, 9000, 20000, 127, 128))]
    for codec in CODECS:
        raw = kafka_python_batch(records, 2, codec, base_offset=41)
        raw = raw + kafka_python_batch(records[:3], 2, codec, base_offset=41 + len(records))
        for produced in (True, False):
            quick = _plain_figures(raw, DEFAULT_LIMIT, produced)
            assert quick is not None, codec
            assert _figures(quick) == _figures(_decoded_figures(raw, DEFAULT_LIMIT, produced))
            assert quick.records == len(records) + 3


def test_the_one_snappy_path_stops_where_decompress_reports_a_problem():
    """records.unsnappy.inflate_snappy, which the quick walk calls for snappy
    batches (raw blocks and Java's xerial framing), gives decompress's bytes,
    and stops (raises) exactly where decompress reports a problem: damaged
    preambles, blocks over the limit, cut or overrunning chunks; with no
    snappy library the quick walk declines the set."""
    import struct

    import pytest

    from kdissect.records import codecs
    from kdissect.records.quick_spans import quick_spans
    from kdissect.records.unsnappy import SnappyStop, inflate_snappy
    from tests.support.records import kafka_python_batch, sample_records

    snappy = pytest.importorskip("snappy")
    rng = random.Random(29)
    payloads = [b"", b"x", bytes(rng.randrange(256) for _ in range(3000)), b"kafka " * 4000]
    blocks = [snappy.compress(payload) for payload in payloads]

    def xerial(*chunks: bytes) -> bytes:
        return codecs.XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(
            struct.pack(">i", len(chunk)) + chunk for chunk in chunks)

    bodies = [*blocks, xerial(*blocks), xerial(blocks[2]), xerial(), codecs.XERIAL_MAGIC + b"\0\0\0\1",
              xerial(blocks[3])[:-5], xerial(blocks[2]) + b"\0\0", codecs.XERIAL_MAGIC + struct.pack(">iii", 1, 1, -3),
              b"\xff\xff\xff\xff\xff\x01", b"\x80", b"\xff\xff\xff\xff\x0f" + blocks[1][1:], blocks[2][:40],
              b"\x05" + blocks[1][1:]]
    bodies += [bytes(b ^ (1 << rng.randrange(8)) if i == at else b for i, b in enumerate(body))
               for body in bodies if body for at in [rng.randrange(len(body))]]
    agreed = declined = 0
    for body in bodies:
        for limit in (DEFAULT_LIMIT, 24000, 100):
            expected = codecs.decompress(codecs.SNAPPY, body, limit)
            if expected.problems or expected.over_limit:
                with pytest.raises(SnappyStop):
                    inflate_snappy(snappy, body, limit)
                declined += 1
            else:
                assert inflate_snappy(snappy, body, limit) == expected.data
                agreed += 1
    assert agreed > 10 and declined > 10
    batch = kafka_python_batch(sample_records(5), 2, "snappy")
    assert quick_spans(batch, DEFAULT_LIMIT, False) is not None
    saved = codecs._snappy
    try:
        codecs._snappy = None  # no library: decompress reports it, the quick walk declines
        assert codecs.decompress(codecs.SNAPPY, blocks[2], DEFAULT_LIMIT).problems
        # (as in a process without the library: no batch it walked before is held)
        from kdissect.records import quick_spans as walk

        walk._recent.clear()
        assert quick_spans(batch, DEFAULT_LIMIT, False) is None
    finally:
        codecs._snappy = saved


def test_the_quick_walk_leaves_a_damaged_snappy_batch_to_the_decoder():
    """A snappy batch whose body no longer inflates (its CRC made to match):
    the quick walk declines the set; the decoder's walk reports the problem."""
    import struct

    import pytest

    from kdissect.records.batch import CRC_START, HEADER_SIZE
    from kdissect.records.codecs import XERIAL_MAGIC
    from kdissect.records.crc import crc32c
    from kdissect.records.quick_spans import quick_spans
    from tests.support.records import kafka_python_batch, sample_records

    pytest.importorskip("snappy")
    raw = kafka_python_batch(sample_records(5), 2, "snappy", base_offset=7)
    assert quick_spans(raw, DEFAULT_LIMIT, False) is not None
    chunk = HEADER_SIZE + len(XERIAL_MAGIC) + 8  # kafka-python frames snappy as Java does (xerial)
    assert raw[HEADER_SIZE:].startswith(XERIAL_MAGIC)
    for at, damage in ((chunk, b"\x7f\xff\xff\xff"),  # a chunk running past the batch
                       (chunk + 4, b"\xff" * 5)):  # its block's length preamble over-long
        damaged = bytearray(raw)
        damaged[at:at + len(damage)] = damage
        struct.pack_into(">I", damaged, 17, crc32c(bytes(damaged[CRC_START:])))
        assert quick_spans(bytes(damaged), DEFAULT_LIMIT, False) is None
        assert _decoded_figures(bytes(damaged), DEFAULT_LIMIT, False).problems
