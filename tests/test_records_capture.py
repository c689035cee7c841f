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
    from kdissect.pipeline import analyze
    from kdissect.records import iter_records
    start = time.perf_counter()
    exchanges, accounting = analyze([{pcap!r}], keep_messages=True)
    rows = []
    for ex in exchanges:
        rows.append({{"cid": ex.correlation_id, "status": ex.status, "problems": ex.problems,
                      "records": ex.records, "keys": [r.record.key.decode() for r in iter_records(ex)],
                      "over": [r.batch.over_limit for r in iter_records(ex)]}})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
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
