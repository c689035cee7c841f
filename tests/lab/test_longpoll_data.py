"""Long polls that data ends (issue 28, section 4), on Apache Kafka 4.4.0.

`longpoll_data_kafka` (tools/lab/longpoll.py): per topic, a kafka-python
consumer waits up to 5 s on an empty partition and a producer sends one
record 1.5 s into the wait (lp-create: CreateTime; lp-append: LogAppendTime;
lp-ahead: the producer stamps its record an hour ahead).
`derived/longpoll_data_consumer_only_kafka` is the same capture without the
producers' TCP streams.

Expected values come from tshark (frame times, which frames are a stream's
Fetch and Produce requests and their answers, by correlation id) and from
the clients' manifest (the consumed record's timestamp and type), never
from kdissect:

* with the Produce in the capture, the wait ends at the Produce's answer:
  wait = produce answer - fetch request, service = fetch answer - produce
  answer (the CLI and the Spark job alike);
* without it, at the fetched record's timestamp (the broker's append time
  for lp-append, the create time for lp-create); lp-ahead's timestamp is
  after the answer, beyond any tolerance: a long poll of unknown length,
  with no wait and no service time, counted apart in `stats`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from tests.support.pcaps import epoch_ns
from tests.support.paths import REPO

CAPTURES = REPO / "captures"
# the consumer-only cut is derived from the workload's capture, not recorded: it lives apart
FULL, CONSUMER_ONLY = "longpoll_data_kafka", "derived/longpoll_data_consumer_only_kafka"
TOPICS = ("lp-create", "lp-append", "lp-ahead")


def _manifest() -> dict:
    return json.loads((CAPTURES / f"{FULL}.manifest.json").read_text())


def _tshark_pdus(name: str) -> list[dict]:
    """Every Kafka PDU tshark finds: frame, time, stream, api key (requests),
    correlation id, client id (requests)."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(CAPTURES / f"{name}.pcap"), "-d", "tcp.port==9092,kafka", "-Y", "kafka",
         "-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch", "-e", "tcp.stream", "-e", "kafka.api_key",
         "-e", "kafka.correlation_id", "-e", "kafka.client_id", "-e", "tcp.srcport"],
        capture_output=True, text=True, check=True).stdout
    pdus = []
    for line in out.splitlines():
        frame, ts, stream, api_key, cid, client_id, src_port = line.split("\t")
        pdus.append({"frame": int(frame), "ts": epoch_ns(ts), "stream": int(stream),
                     "api_key": int(api_key) if api_key else None, "cid": int(cid), "client_id": client_id,
                     "from_broker": src_port == "9092"})
    return pdus


def _tshark_exchanges(name: str) -> list[dict]:
    """(client id, api key, request frame/time, response frame/time) paired by
    stream and correlation id."""
    pdus = _tshark_pdus(name)
    answers = {(p["stream"], p["cid"]): p for p in pdus if p["from_broker"]}
    paired = []
    for p in pdus:
        if not p["from_broker"] and (p["stream"], p["cid"]) in answers:
            answer = answers[(p["stream"], p["cid"])]
            paired.append({"client_id": p["client_id"], "api_key": p["api_key"], "request_frame": p["frame"],
                           "request_ts": p["ts"], "response_frame": answer["frame"], "response_ts": answer["ts"]})
    return paired


def _held_fetch(tshark: list[dict], topic: str) -> dict:
    """The consumer's Fetch that the record answered: the one it had sent
    before the record was produced and that was answered last (later
    fetches come after the record)."""
    fetches = [ex for ex in tshark if ex["client_id"] == f"lab-lp-consumer-{topic}" and ex["api_key"] == 1]
    return max(fetches, key=lambda ex: ex["response_ts"] - ex["request_ts"])


def _rows(name: str) -> dict[int, object]:
    exchanges, accounting = analyze([str(CAPTURES / f"{name}.pcap")], (9092,))
    rows = {ex.request_frame: ex for ex in exchanges}
    assert accounting.balance() == []
    return rows


def test_the_lab_waited_as_the_manifest_says() -> None:
    manifest = _manifest()
    assert [op["result"]["received"] for op in manifest["operations"]] == [1, 1, 1]
    tshark = _tshark_exchanges(FULL)
    for topic in TOPICS:
        fetch = _held_fetch(tshark, topic)
        (produced,) = [p for p in manifest["produced"] if p["topic"] == topic]
        # the fetch was sent before the producer sent, and answered after the broker acknowledged it
        assert fetch["request_ts"] < produced["sent_ns"] < fetch["response_ts"]
        assert 1000 < (fetch["response_ts"] - fetch["request_ts"]) / 1e6 < 5000  # ended before its 5 s max wait


def test_a_captured_produce_ends_the_wait() -> None:
    tshark = _tshark_exchanges(FULL)
    rows = _rows(FULL)
    for topic in TOPICS:
        fetch = _held_fetch(tshark, topic)
        (produce,) = [ex for ex in tshark if ex["client_id"] == f"lab-lp-producer-{topic}" and ex["api_key"] == 0]
        ex = rows[fetch["request_frame"]]
        assert ex.api_name == "Fetch" and ex.response_frame == fetch["response_frame"] and ex.records == 1
        # (tshark's response frame is the one completing the response, as kdissect's response_ts)
        assert ex.wait_reason == "long_poll"
        assert ex.wait_ms == (produce["response_ts"] - fetch["request_ts"]) / 1e6
        assert ex.service_ms == (fetch["response_ts"] - produce["response_ts"]) / 1e6
        assert 0 < ex.service_ms < 50  # the broker was idle until the record came


def test_without_the_produce_the_batch_timestamp_ends_it() -> None:
    manifest = _manifest()
    tshark = _tshark_exchanges(CONSUMER_ONLY)
    assert not [ex for ex in tshark if ex["api_key"] == 0]  # no Produce in this capture
    rows = _rows(CONSUMER_ONLY)
    for topic, kind in (("lp-create", 0), ("lp-append", 1)):
        (consumed,) = [c for c in manifest["consumed"] if c["topic"] == topic]
        assert consumed["timestamp_type"] == kind
        fetch = _held_fetch(tshark, topic)
        ex = rows[fetch["request_frame"]]
        arrived = consumed["timestamp"] * 1_000_000  # what the client read: the batch's max timestamp
        assert ex.wait_reason == "long_poll"
        assert ex.wait_ms == (arrived - fetch["request_ts"]) / 1e6
        assert ex.service_ms == (fetch["response_ts"] - arrived) / 1e6
    # an hour ahead: after the answer, so it tells nothing
    ahead = rows[_held_fetch(tshark, "lp-ahead")["request_frame"]]
    (consumed,) = [c for c in manifest["consumed"] if c["topic"] == "lp-ahead"]
    assert consumed["timestamp"] * 1_000_000 > ahead.response_ts + 3_000_000_000_000
    assert (ahead.wait_reason, ahead.wait_ms, ahead.service_ms) == ("long_poll_unknown", None, None)
    assert ahead.to_row()["service_ms"] is None


def _stats(name: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", str(CAPTURES / f"{name}.pcap")],
                          capture_output=True, text=True, cwd=CAPTURES.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_stats_counts_unknown_long_polls_apart() -> None:
    stats = _stats(CONSUMER_ONLY)
    waits = {row["reason"]: row for row in stats["waits"] if row["api"] == "Fetch"}
    assert waits["long_poll_unknown"]["count"] == 1
    assert waits["long_poll_unknown"]["median_ms"] is None and waits["long_poll_unknown"]["max_ms"] is None
    (fetch,) = [row for row in stats["latency_by_api"] if row["api"] == "Fetch"]
    # three held fetches (the only Fetches with a max wait met by data); the unknown one has no service time
    assert fetch["count"] == 3 and fetch["waits"] == 3 and fetch["service_count"] == 2
    assert fetch["service_max"] < 100  # no broker slowness is invented from the waits
    full = _stats(FULL)
    (fetch,) = [row for row in full["latency_by_api"] if row["api"] == "Fetch"]
    assert fetch["service_count"] == 3 and fetch["service_max"] < 50


def test_every_fetch_of_the_captures_is_accounted_for() -> None:
    # the captures hold just the three held fetches: nothing else is called a long poll
    for name in (FULL, CONSUMER_ONLY):
        fetches = [ex for ex in _rows(name).values() if ex.api_name == "Fetch"]
        assert len(fetches) == 3 == len([ex for ex in _tshark_exchanges(name) if ex["api_key"] == 1])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_spark_ends_the_waits_as_the_cli_does(tmp_path) -> None:
    import pyarrow.parquet as pq

    from kdissect.spark.job import JobOptions, run_job
    from tests.support.spark import local_session

    columns = ("request_frame", "wait_reason", "wait_ms", "service_ms")
    with local_session(cores=2, shuffle_partitions=4) as spark:
        for name in (FULL, CONSUMER_ONLY):
            outdir = tmp_path / name
            run_job(JobOptions(inputs=[str(CAPTURES / f"{name}.pcap")], outdir=str(outdir), master=None), spark=spark)
            got = sorted(tuple(row[c] for c in columns) for row in pq.read_table(outdir / "exchanges").to_pylist())
            expected = sorted(tuple(getattr(ex, c) for c in columns) for ex in _rows(name).values())
            assert got == expected, name
            waits = sorted((row["reason"], row["api_name"], row["count"], row["median_ms"], row["max_ms"])
                           for row in pq.read_table(outdir / "waits").to_pylist())
            cli = sorted((row["reason"], row["api"], row["count"], row["median_ms"], row["max_ms"])
                         for row in _stats(name)["waits"])
            assert waits == cli, name
