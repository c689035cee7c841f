"""The broker log's clock offset (log time minus capture time over the joined
pairs) is kept in a QuantileSketch, so its memory does not grow with the
pairs: the figures agree with the exact computation, exactly while the sketch
holds the values (the bundled run), within the sketch's stated error (1% of
the order statistics around each percentile) past that."""

from __future__ import annotations

import calendar
import json
import random
from decimal import Decimal
from pathlib import Path

import numpy
import pytest

from kdissect.conn.brokerlog import join as join_module
from kdissect.conn.brokerlog.join import BrokerLogAccounting
from kdissect.conn.brokerlog.parse import LogReadStats
from kdissect.sketch import EXACT_LIMIT, RELATIVE_ACCURACY
from tests.conn.test_brokerlog_join import PLAIN, kdissect, log_key, manifest


def line_time_ns(line: str) -> int:
    """The "[yyyy-MM-dd HH:mm:ss,SSS]" at a line's start (UTC), read here on its own."""
    stamp = line[1:24]
    seconds = calendar.timegm((int(stamp[:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13]),
                               int(stamp[14:16]), int(stamp[17:19])))
    return seconds * 1_000_000_000 + int(stamp[20:23]) * 1_000_000


def exact_figures(offsets_ms: list[float]) -> dict[str, float]:
    values = numpy.array(sorted(offsets_ms))
    p5, median, p95 = numpy.percentile(values, [5, 50, 95])
    return {"median_ms": median, "p5_ms": p5, "p95_ms": p95, "min_ms": values[0], "max_ms": values[-1],
            "spread_ms": p95 - p5}


def test_the_bundled_run_reports_the_exact_offsets(tmp_path: Path) -> None:
    """Under EXACT_LIMIT pairs the sketch holds every value: the figures are
    the exact ones, from the log lines' own times (read here) and the joined
    exchanges' response times (checked against tshark in test_brokerlog_join)."""
    times: dict[tuple, list[int]] = {}
    for path in PLAIN.glob("request.log*"):
        for line in path.read_text().splitlines():
            if "Completed request:" in line:
                body = line.split("Completed request:", 1)[1].rsplit(" (kafka.request.logger)", 1)[0]
                times.setdefault(log_key(json.loads(body)), []).append(line_time_ns(line))
    out = tmp_path / "rows.jsonl"
    port = str(manifest(PLAIN)["port"])
    kdissect("export", str(PLAIN / "capture.pcap"), "-p", port, "--broker-log", str(PLAIN), "-o", str(out))
    rows = [json.loads(line, parse_float=Decimal) for line in out.read_text().splitlines()]
    offsets = []
    for row in rows:
        if row["broker_log"] == "joined":
            (logged,) = times[(row["client"], row["correlation_id"], row["api_key"])]
            offsets.append((logged - int(row["response_ts"] * 1_000_000_000)) / 1e6)
    done = kdissect("stats", str(PLAIN / "capture.pcap"), "-p", port, "--broker-log", str(PLAIN), "--json")
    figures = json.loads(done.stdout)["broker_log"]["accounting"]["clock_offset"]
    assert figures["pairs"] == len(offsets) >= 80
    assert len(offsets) <= EXACT_LIMIT
    for name, value in exact_figures(offsets).items():
        assert figures[name] == pytest.approx(value, abs=1e-9), name


def test_many_pairs_stay_within_the_sketch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 offsets the way the join records them (counted per ns value,
    flushed into the sketch every few thousand distinct values): each
    percentile within RELATIVE_ACCURACY of the order statistics it lies
    between, the spread within the sum of its two ends' errors, min and max
    exact; the pending counts stay bounded."""
    monkeypatch.setattr(join_module, "_OFFSET_PENDING", 500)
    rng = random.Random(26)
    # as on one host: log times at ms resolution, capture times at us, a skewed spread
    differences = [rng.randrange(-1_000_000, 300_000, 1000) - rng.randrange(0, 1000) * 1000
                   + int(rng.expovariate(1 / 400_000)) // 1000 * 1000 for _ in range(20_000)]
    accounting = BrokerLogAccounting(LogReadStats())
    peak = 0
    for difference in differences:  # (join._joined's bookkeeping)
        accounting.offset_pairs += 1
        counts = accounting.offset_counts
        counts[difference] = counts.get(difference, 0) + 1
        if len(counts) >= join_module._OFFSET_PENDING:
            accounting.flush_offsets()
        peak = max(peak, len(accounting.offset_counts))
    assert peak < 500
    figures = accounting.offset_figures()
    assert not accounting.offset_sketch.exact  # past EXACT_LIMIT: the buckets answer
    offsets = sorted(d / 1e6 for d in differences)
    exact = exact_figures(offsets)
    assert figures["pairs"] == len(offsets)
    assert (figures["min_ms"], figures["max_ms"]) == (exact["min_ms"], exact["max_ms"])
    errors = {}
    for q, name in ((5, "p5_ms"), (50, "median_ms"), (95, "p95_ms")):
        position = (len(offsets) - 1) * q / 100
        around = max(abs(offsets[int(position)]), abs(offsets[min(int(position) + 1, len(offsets) - 1)]))
        errors[name] = RELATIVE_ACCURACY * around
        assert abs(figures[name] - exact[name]) <= errors[name] + 1e-12, name
    assert abs(figures["spread_ms"] - exact["spread_ms"]) <= errors["p5_ms"] + errors["p95_ms"] + 1e-12
