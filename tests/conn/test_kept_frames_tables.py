"""The forensic tables are the same whether Produce, Fetch, Metadata and
OffsetCommit messages are kept decoded (as `kdissect stats` runs) or as
their frames, read by conn/kept_produce.py, kept_fetch.py, kept_metadata.py
and kept_offset_commit.py (as the forensic commands and the Spark job run): on bundled captures of every
client and on damaged copies. The decoded side is the full decoder's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdissect.conn.kept_fetch import FetchRequestFrame, FetchResponseFrame
from kdissect.conn.kept_metadata import MetadataResponseFrame
from kdissect.conn.kept_offset_commit import OffsetCommitRequestFrame, OffsetCommitResponseFrame
from kdissect.conn.kept_produce import ProduceRequestFrame, ProduceResponseFrame
from kdissect.conn.pipeline import Analysis
from kdissect.forensics import FORENSIC_APIS, Forensics
from tests.support import impair
from tests.support.paths import REPO
from tests.support.pipeline import ports_of

# each reader: its frame types, the captures that carry its messages, the one damaged
READERS: dict[str, tuple[tuple[type, ...], tuple[str, ...], str]] = {
    "produce": ((ProduceRequestFrame, ProduceResponseFrame),
                ("forensics_kafka", "java_transactions_kafka", "acks0_flood_kafka", "hostile_strings_kafka",
                 "produce_pipelined", "old_v0_10_1", "large_records_kafka", "java_clients_4_4_kafka",
                 "unknown_topic_kafka", "go_clients_kafka", "consume_group_kafka"),
                "forensics_kafka"),
    "fetch": ((FetchRequestFrame, FetchResponseFrame),
              ("forensics_kafka", "consume_group_kafka", "consume_group", "java_transactions_kafka",
               "transactions_kafka", "java_clients_4_4_kafka", "go_clients_kafka", "old_v0_10_1",
               "large_records_kafka", "hostile_strings_kafka", "group_lag_kafka"),
              "consume_group_kafka"),
    "metadata": ((MetadataResponseFrame,),
                 ("forensics_kafka", "consume_group_kafka", "java_clients_4_4_kafka", "go_clients_kafka", "admin_kafka",
                  "unknown_topic_kafka", "share_acks_kafka", "hostile_strings_kafka", "old_v0_10_1",
                  "group_lag_kafka"),
                 "forensics_kafka"),
    "offset_commit": ((OffsetCommitRequestFrame, OffsetCommitResponseFrame),
                      ("forensics_kafka", "group_lag_kafka", "consume_group_kafka", "java_clients_4_4_kafka",
                       "go_clients_kafka", "hostile_strings_kafka", "java_transactions_kafka", "transactions_kafka",
                       "old_v0_10_1", "old_v0_8_2_kafka3", "ipv6_kafka", "large_records_kafka"),
                      "forensics_kafka"),
}


def forensic_tables(path: str, ports: tuple[int, ...], keep_messages: bool,
                    frame_types: tuple[type, ...]) -> tuple[str, int]:
    """(the forensic tables and topic names as JSON, how many requests and
    answers were kept as one of `frame_types`)."""
    analysis = Analysis([path], ports, keep_messages=keep_messages, keep_apis=() if keep_messages else FORENSIC_APIS)
    forensics = Forensics()
    kept_frames = 0
    for ex in analysis:
        kept_frames += (type(ex.request) in frame_types) + (type(ex.response) in frame_types)
        forensics.add(ex)
        ex.request = ex.response = None
    forensics.finish()
    tables = forensics.tables()
    return json.dumps(tables.to_dict() | {"errors_by_client": tables.errors_by_client,
                                          "names": sorted(forensics.names.names.items()),
                                          "conflicts": forensics.names.conflicts}, sort_keys=True,
                      default=str), kept_frames


@pytest.mark.parametrize("reader,stem", [(reader, stem) for reader, (_, stems, _) in READERS.items() for stem in stems],
                         ids=lambda value: value)
def test_tables_equal_either_way(reader: str, stem: str) -> None:
    capture = REPO / "captures" / f"{stem}.pcap"
    frame_types = READERS[reader][0]
    decoded, _ = forensic_tables(str(capture), ports_of(capture), True, frame_types)
    framed, kept = forensic_tables(str(capture), ports_of(capture), False, frame_types)
    assert framed == decoded
    assert kept > 0


@pytest.mark.parametrize("reader", READERS)
def test_tables_equal_either_way_on_damaged_copies(reader: str, tmp_path: Path) -> None:
    frame_types, _, stem = READERS[reader]
    capture = REPO / "captures" / f"{stem}.pcap"
    trace = impair.load_pcap(capture)
    dropped, _lost = impair.drop_random(trace, seed=29, count=20)
    for path in (impair.write_pcap(dropped, tmp_path / "dropped.pcap"),
                 impair.write_pcap(impair.with_snaplen(trace, 200), tmp_path / "snap.pcap")):
        ports = ports_of(capture)
        assert forensic_tables(str(path), ports, False, frame_types)[0] == \
            forensic_tables(str(path), ports, True, frame_types)[0]
