"""group_lag's lag in time and group_lag_over_time against tshark, on a
capture of a group that falls behind (group_lag_kafka.pcap: kafka-python at
api_version 2.5, Fetch v11 / Produce v8 / OffsetCommit v8, which tshark
decodes; see its manifest).

Everything expected is read by tshark: the offsets the OffsetCommit requests
committed (with their frames' times), the high watermarks of the Fetch
responses, the records' offsets and timestamps in the Fetch responses, and
the Produce requests' records placed at the base offsets their responses
gave. The rules applied to them are the documented ones
(kdissect.forensics.lag_history)."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.pcaps import epoch_ns, tshark_output
from tests.support.paths import REPO

CAPTURE = REPO / "captures" / "group_lag_kafka.pcap"
MANIFEST = json.loads((REPO / "captures" / "group_lag_kafka.manifest.json").read_text())
SECOND_NS = 1_000_000_000

_PACKET = re.compile(r"<packet>(.*?)</packet>", re.S)
_FIELD = re.compile(r'<field name="([^"]+)"[^>]*?show="([^"]*)"')


def _pdus(path: Path) -> list[dict]:
    """Kafka PDUs as tshark decodes them: frame, time, api key, whether a
    request, the request's frame (responses), and the fields in order."""
    found = []
    pdml = tshark_output(path, ["-d", "tcp.port==9092,kafka", "-Y", "kafka", "-T", "pdml"])
    for packet in _PACKET.findall(pdml):
        fields = _FIELD.findall(packet)
        values = dict(fields)
        frame, ts = int(values["frame.number"]), epoch_ns(values["frame.time_epoch"])
        current = None
        for name, show in fields:
            if name == "kafka.len":
                current = {"frame": frame, "ts": ts, "fields": [], "request_frame": None, "api_key": None,
                           "bad": False}
                found.append(current)
            elif current is not None and name.startswith("kafka."):
                if name == "kafka.api_key" and current["api_key"] is None:
                    current["api_key"] = int(show)
                elif name == "kafka.request_frame":
                    current["request_frame"] = int(show)
                elif name in ("kafka.unsupported_api_version", "kafka.truncated_content"):
                    current["bad"] = current["bad"] or name == "kafka.unsupported_api_version"
                current["fields"].append((name, show))
            elif name == "_ws.malformed" and current is not None:
                current["bad"] = True
    return found


def _stamp(show: str) -> int:
    """Epoch ms of tshark's absolute-time text ("Nov 26, 2026 09:56:11.099000000 UTC")."""
    text = " ".join(show.replace(" UTC", "").split())
    day, _, fraction = text.partition(".")
    when = dt.datetime.strptime(day, "%b %d, %Y %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp()) * 1000 + int(fraction[:3])


def _partitions(fields: list[tuple[str, str]]) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """(topic, partition, the partition's fields) in order."""
    out: list = []
    topic = None
    for name, show in fields:
        if name == "kafka.topic_name":
            topic = show
        elif name == "kafka.partition_id":
            out.append((topic, int(show), []))
        elif out:
            out[-1][2].append((name, show))
    return out


def _records(fields: list[tuple[str, str]]) -> list[list[tuple[int, int]]]:
    """The batches' records, (offset, timestamp ms) each: a batch's fields
    start at its CRC; a record's timestamp comes before its offset."""
    batches: list[list[tuple[int, int]]] = []
    stamp = None
    for name, show in fields:
        if name == "kafka.batch_crc":
            batches.append([])
        elif name == "kafka.message_timestamp":
            stamp = _stamp(show)
        elif name == "kafka.offset" and stamp is not None and batches:
            batches[-1].append((int(show), stamp))
            stamp = None
    return [batch for batch in batches if batch]


@pytest.fixture(scope="module")
def oracle() -> dict:
    pdus = _pdus(CAPTURE)
    requests = {p["frame"]: p for p in pdus if p["request_frame"] is None}
    commits: dict[tuple, list[tuple[int, int]]] = {}  # (group, topic, partition) -> [(ts, offset)]
    watermarks: dict[tuple, list[tuple[int, int]]] = {}  # (topic, partition) -> [(ts, high watermark)]
    fetched: dict[tuple, dict[int, int]] = {}
    produced: dict[tuple, dict[int, int]] = {}
    for response in pdus:
        request = requests.get(response["request_frame"])
        if request is None or response["bad"] or request["bad"]:
            continue
        if response["api_key"] == 8:  # OffsetCommit: the request's offsets, where the answer says no error
            group = next(show for name, show in request["fields"] if name == "kafka.consumer_group")
            failed = {(t, p) for t, p, fs in _partitions(response["fields"]) if ("kafka.error", "0") not in fs[:1]}
            for topic, partition, fields in _partitions(request["fields"]):
                offset = next(int(show) for name, show in fields if name == "kafka.offset")
                if (topic, partition) not in failed:
                    commits.setdefault((group, topic, partition), []).append((request["ts"], offset))
        elif response["api_key"] == 1:  # Fetch: the high watermark follows the partition's error
            for topic, partition, fields in _partitions(response["fields"]):
                if fields[:1] == [("kafka.error", "0")] and fields[1][0] == "kafka.offset":
                    watermarks.setdefault((topic, partition), []).append((response["ts"], int(fields[1][1])))
                for batch in _records(fields[2:]):
                    fetched.setdefault((topic, partition), {})[batch[0][0]] = _batch(batch, 0)
        elif response["api_key"] == 0:  # Produce: records at the base offset the answer gave
            bases = {(t, p): int(fs[1][1]) for t, p, fs in _partitions(response["fields"])
                     if fs[:1] == [("kafka.error", "0")] and fs[1][0] == "kafka.offset"}
            for topic, partition, fields in _partitions(request["fields"]):
                if (topic, partition) in bases:
                    position = bases[(topic, partition)]  # the records' offsets are placeholders
                    for batch in _records(fields):
                        produced.setdefault((topic, partition), {})[position] = _batch(batch, position)
                        position += len(batch)
    times = {key: {**produced.get(key, {}), **fetched.get(key, {})} for key in set(produced) | set(fetched)}
    return {"commits": commits, "watermarks": watermarks, "times": times}


def _batch(records: list[tuple[int, int]], base: int) -> tuple[int, int, int]:
    """(last offset, first record's timestamp, newest timestamp) of a batch
    whose offsets start at `base` (0: the wire's own)."""
    shift = base - records[0][0] if base else 0
    return (records[-1][0] + shift, records[0][1], max(stamp for _, stamp in records))


def _kdissect(table: str, tmp_path: Path) -> list[dict]:
    out = tmp_path / f"{table}.jsonl"
    done = subprocess.run([sys.executable, "-m", "kdissect", "groups", str(CAPTURE), "--table", table, "-o", str(out),
                           "-q"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _lag_ms(batches: dict[int, tuple[int, int, int]], lag: int, committed: int, high_watermark: int) -> float | None:
    """The documented rule: newest timestamp of the last batch below the high
    watermark minus the first timestamp of the batch holding the committed
    offset (or the first batch after it)."""
    if lag == 0:
        return 0.0
    holding = [first for first, (last, _, _) in batches.items() if last >= committed]
    below = [first for first in batches if first < high_watermark]
    if not holding or not below or max(below) < min(holding):
        return None
    return float(max(0, batches[max(below)][2] - batches[min(holding)][1]))


def test_lag_in_records_and_time_at_the_end(oracle: dict, tmp_path: Path) -> None:
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in _kdissect("group_lag", tmp_path)}
    assert set(rows) == set(oracle["commits"]) and rows
    for key, commits in oracle["commits"].items():
        committed = max(commits)[1]
        high = max(oracle["watermarks"][key[1:]])[1]
        row = rows[key]
        assert (row["committed_offset"], row["high_watermark"], row["lag"]) == (committed, high, high - committed)
        assert row["lag"] > 0  # the group ends behind: a lag in time that is not 0
        assert row["lag_ms"] == _lag_ms(oracle["times"][key[1:]], high - committed, committed, high), key
        assert row["lag_ms"] > 0
    # the client's own view: what committed() returned at the end
    for label, offset in MANIFEST["groups"][0]["members"][0]["committed"].items():
        topic, partition = label.rsplit("-", 1)
        assert rows[("lag-slow", topic, int(partition))]["committed_offset"] == offset


def test_record_timestamps_are_the_producer_s(oracle: dict) -> None:
    """tshark's batch timestamps hold those the producer's delivery reports gave."""
    for record in MANIFEST["produced"]:
        batches = oracle["times"][(record["topic"], record["partition"])]
        first = max(f for f in batches if f <= record["offset"])
        assert batches[first][0] >= record["offset"]
        assert batches[first][1] <= record["timestamp"] <= batches[first][2]


def test_lag_over_time(oracle: dict, tmp_path: Path) -> None:
    rows = _kdissect("group_lag_over_time", tmp_path)  # (JSONL times: epoch seconds)
    moments = [ts for series in (*oracle["commits"].values(), *oracle["watermarks"].values()) for ts, _ in series]
    first, last = min(moments), max(moments)
    assert last // SECOND_NS - first // SECOND_NS + 1 <= 60  # one-second intervals (a short capture)
    expected = []
    for key in sorted(oracle["commits"]):
        commits = sorted(oracle["commits"][key])
        marks = sorted(oracle["watermarks"][key[1:]])
        for at in range(commits[0][0] // SECOND_NS, last // SECOND_NS + 1):
            end = (at + 1) * SECOND_NS
            committed = [offset for ts, offset in commits if ts < end][-1:]
            high = [value for ts, value in marks if ts < end][-1:]
            lag = high[0] - committed[0] if committed and high else None
            expected.append({"group_id": key[0], "topic": key[1], "partition": key[2], "window_start": at * SECOND_NS,
                             "window_end": end, "lag": lag,
                             "lag_ms": None if lag is None else _lag_ms(oracle["times"][key[1:]], lag, committed[0],
                                                                        high[0]),
                             "committed_offset": committed[0] if committed else None,
                             "high_watermark": high[0] if high else None})
    got = [{**r, "window_start": _ns(r["window_start"]), "window_end": _ns(r["window_end"])} for r in rows]
    assert got == expected
    lags = [r["lag"] for r in got if r["partition"] == 0 and r["lag"] is not None]
    assert lags[-1] > lags[0]  # the lag grows: the slow member falls behind


def _ns(value: object) -> int:
    """A JSONL timestamp (epoch seconds, as `export` writes them) as epoch ns."""
    from decimal import Decimal

    return int(Decimal(str(value)) * SECOND_NS)
