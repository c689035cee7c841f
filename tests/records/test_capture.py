"""Record data through the whole pipeline, on captures crafted here (tshark-checked)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from kdissect.cli import main
from kdissect.records.encode import encode_message_set, encode_record_batch
from tests.support.records import (
    gzip_bomb_batch,
    produce_request,
    produce_response,
    sample_records,
    write_tcp_pcap,
)

BOMB_SIZE = 512 * 1024 * 1024


def _bomb_capture(path) -> None:
    write_tcp_pcap(path, [
        (produce_request(1, "t", 0, encode_record_batch(sample_records(3), "gzip")), produce_response(1, "t", 0, 0)),
        (produce_request(2, "t", 0, gzip_bomb_batch(BOMB_SIZE)), produce_response(2, "t", 0, 3)),
        (produce_request(3, "t", 0, encode_record_batch(sample_records(2), "lz4")), produce_response(3, "t", 0, 4)),
        (produce_request(4, "t", 1, encode_message_set(sample_records(2), 0, "lz4")), produce_response(4, "t", 1, 0)),
    ])


def test_magic2_batches_agree_with_tshark(tmp_path, tshark):
    """tshark's own Kafka dissector (an independent decoder) sees the same keys,
    values and header keys in Produce requests, for every codec."""
    pcap = tmp_path / "codecs.pcap"
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")
    write_tcp_pcap(pcap, [
        (produce_request(i + 1, "t", 0, encode_record_batch(sample_records(5), codec)), produce_response(i + 1, "t", 0, 0))
        for i, codec in enumerate(codecs)])
    out = subprocess.run([tshark, "-r", str(pcap), "-d", "tcp.port==9092,kafka", "-Y", "kafka.request_key == 0",
                          "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", "-e", "kafka.correlation_id",
                          "-e", "kafka.message_key", "-e", "kafka.message_value", "-e", "kafka.header_key"],
                         capture_output=True, text=True, check=True)
    theirs = {}
    for line in out.stdout.splitlines():
        cid, keys, values, header_keys = line.split("\t")
        def nulls(text: str) -> list[str]:  # tshark writes <MISSING> for a null key/value
            return ["" if item == "<MISSING>" else item for item in text.split("|")]

        theirs[int(cid)] = (nulls(keys), nulls(values), [k for k in header_keys.split("|") if k])
    assert sorted(theirs) == [1, 2, 3, 4, 5]
    assert main(["records", str(pcap), "-o", str(tmp_path / "r.jsonl"), "-q"]) == 0
    ours: dict[int, tuple[list, list, list]] = {}
    for line in (tmp_path / "r.jsonl").read_text().splitlines():
        row = json.loads(line)
        keys, values, header_keys = ours.setdefault(row["correlation_id"], ([], [], []))
        keys.append(row["key"].encode().hex() if row["key"] is not None else "")
        values.append(row["value"].encode().hex() if row["value"] is not None else "")
        header_keys.extend(k for k, _v in row["headers"])
        assert row["codec"] == codecs[row["correlation_id"] - 1] and row["crc_ok"] is True
    for cid, (keys, values, header_keys) in ours.items():
        their_keys, their_values, their_header_keys = theirs[cid]
        assert keys == their_keys and values == their_values
        assert header_keys == their_header_keys and len(keys) == 5


SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, {root!r})
    from kdissect.conn.pipeline import analyze
    from kdissect.records import iter_records
    start = time.perf_counter()
    exchanges, accounting = analyze([{pcap!r}], keep_messages=True)
    rows = []
    for ex in exchanges:
        rows.append({{"cid": ex.correlation_id, "status": ex.status, "problems": ex.problems,
                      "records": ex.records, "keys": [r.record.key.decode() for r in iter_records(ex)],
                      "over": [r.batch.over_limit for r in iter_records(ex)]}})
    rss = int([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]) * 1024  # own peak; ru_maxrss would carry the forked test process's size over exec
    print(json.dumps({{"rows": rows, "seconds": time.perf_counter() - start, "rss": rss}}))
    """
)


def test_gzip_bomb_in_capture_is_bounded_flagged_and_followed(tmp_path, repo_root):
    pcap = tmp_path / "bomb.pcap"
    _bomb_capture(pcap)
    script = SCRIPT.format(root=str(repo_root), pcap=str(pcap))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(out.stdout)
    rows = {row["cid"]: row for row in result["rows"]}
    assert sorted(rows) == [1, 2, 3, 4]
    assert all(row["status"] == "ok" for row in rows.values())
    assert any("decompression limit" in p for p in rows[2]["problems"])  # flagged on its exchange
    assert rows[2]["over"] == [] and rows[2]["records"] == 1
    # the exchanges after it on the same connection still decode
    assert rows[1]["keys"] == ["key-0", "key-1", "key-2"] and rows[1]["problems"] == []
    assert rows[3]["keys"] == ["key-0", "key-1"] and rows[3]["problems"] == []
    assert rows[4]["keys"] == ["key-0", "key-1"] and rows[4]["problems"] == []
    assert result["seconds"] < 30
    assert result["rss"] < 1024 * 1024 * 1024


def test_records_command_formats(tmp_path, capsys):
    pcap = tmp_path / "small.pcap"
    records = sample_records(4)
    records[1].value = b"\xff\xfe binary"
    write_tcp_pcap(pcap, [
        (produce_request(7, "orders", 2, encode_record_batch(records, "snappy", base_offset=0)),
         produce_response(7, "orders", 2, 40)),
        (produce_request(8, "other", 0, encode_message_set(sample_records(1), 1, "gzip")),
         produce_response(8, "other", 0, 3)),
    ])
    jsonl = tmp_path / "r.jsonl"
    assert main(["records", str(pcap), "--topic", "orders", "-o", str(jsonl), "-q"]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["key"] for r in rows] == ["key-0", "key-1", "key-2", None]
    assert rows[1]["value"] == "base64://4gYmluYXJ5"
    assert rows[1]["headers"] == [["trace", "t1"], ["empty", ""], ["null", None]]
    assert {(r["direction"], r["topic"], r["partition"], r["codec"], r["magic"], r["crc_ok"], r["correlation_id"])
            for r in rows} == {("produce", "orders", 2, "snappy", 2, True, 7)}
    csv_path = tmp_path / "r.csv"
    assert main(["records", str(pcap), "-o", str(csv_path), "-q"]) == 0
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("direction,capture,stream,correlation_id,topic,partition,offset")
    assert len(lines) == 1 + 5
    import pyarrow.parquet as pq

    parquet = tmp_path / "r.parquet"
    assert main(["records", str(pcap), "-o", str(parquet), "-q"]) == 0
    table = pq.read_table(parquet)
    assert table.num_rows == 5 and table.column("topic").to_pylist().count("other") == 1
    assert main(["records", str(pcap), "-o", str(tmp_path / "r.txt")]) == 2
    assert main(["records", str(tmp_path / "missing.pcap")]) == 2


def _fetch_v4_exchange(correlation_id: int, topic: str, partition: int, records: bytes) -> tuple[bytes, bytes]:
    from kdissect import encode_request, encode_response
    from kdissect.protocol.codec import frame_with_size

    request = encode_request(1, 4, correlation_id, "crafted-consumer", {
        "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                     "partition_max_bytes": 1 << 20}]}]})
    response = encode_response(1, 4, correlation_id, {
        "throttle_time_ms": 0,
        "responses": [{"topic": topic, "partitions": [{"partition_index": partition, "error_code": 0,
                                                        "high_watermark": 100, "last_stable_offset": 100,
                                                        "aborted_transactions": [], "records": records}]}]})
    return frame_with_size(request), frame_with_size(response)


def test_crc_mismatch_and_partial_fetch_through_the_pipeline(tmp_path):
    good = encode_record_batch(sample_records(3), "zstd", base_offset=0)
    corrupt = bytearray(encode_record_batch(sample_records(2), "gzip", base_offset=3))
    corrupt[-5] ^= 0x10  # in the gzip trailer's CRC: the batch CRC32C no longer matches either
    cut = encode_record_batch(sample_records(4), "snappy", base_offset=5)[:-30]
    pcap = tmp_path / "fetch.pcap"
    write_tcp_pcap(pcap, [
        _fetch_v4_exchange(21, "orders", 0, good + bytes(corrupt) + cut),
        (produce_request(22, "orders", 1, bytes(corrupt)), produce_response(22, "orders", 1, 0)),
    ])
    exchanges = tmp_path / "x.jsonl"
    assert main(["export", str(pcap), "-o", str(exchanges), "-q"]) == 0
    rows = {r["correlation_id"]: r for r in map(json.loads, exchanges.read_text().splitlines())}
    assert rows[21]["api_name"] == "Fetch" and rows[21]["records"] == 5  # the cut batch is not counted
    assert rows[21]["codecs"] == ["zstd", "gzip"]
    assert rows[21]["problems"] == ["orders-0: record batch at offset 3: CRC32C mismatch"]
    assert rows[22]["problems"] == ["orders-1: record batch at offset 3: CRC32C mismatch"]
    out = tmp_path / "r.jsonl"
    assert main(["records", str(pcap), "-o", str(out), "-q"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    fetched = [(r["offset"], r["crc_ok"]) for r in records if r["direction"] == "fetch"]
    assert fetched == [(0, True), (1, True), (2, True), (3, False), (4, False)]
    for row in records:
        if not row["crc_ok"]:  # the records before the damage are still shown, flagged
            assert row["problems"][0] == "CRC32C mismatch" and "gzip data corrupt" in row["problems"][1]
