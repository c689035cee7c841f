"""Waits the protocol asks for, on real Apache Kafka captures (issue #13).

Expected values come from the clients' own settings and reports in the
manifests (fetch max waits, the throttle times the raw client read, what was
consumed), tshark's frame times and the broker's answers as tshark decodes
them, never from kdissect's output:

* `waits_kafka`: kafka-python (fetch_max_wait_ms 1000) and librdkafka
  (fetch.wait.max.ms 800) polling an empty partition: every Fetch waits out
  its max wait (long_poll, no service time); a Fetch waiting up to 4000 ms
  answered after ~1.5 s by a record produced then is service, not a wait;
  three group members joining 1.5 s apart: the JoinGroups the coordinator
  held (answered without error after 10 ms or more) are group barriers; a
  raw client sending Produce v7 back to back with a quota: each request sent
  before the previous answer's throttle time ran out waited for the mute.
* `throttle_old_kafka3`: kafka-python (0.10.1 protocol, Fetch v3) with a
  consumer quota on Kafka 3.9: the broker answers at once and mutes, and the
  old client sends its next Fetch at once, so that Fetch waits out the mute.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kdissect.pipeline import analyze
from tests.support.pcaps import epoch_ns

CAPTURES = Path(__file__).resolve().parent.parent / "captures"


def _exchanges(name: str) -> list:
    exchanges, accounting = analyze([str(CAPTURES / f"{name}.pcap")], (9092,))
    rows = list(exchanges)
    assert accounting.balance() == []
    return rows


def _manifest(name: str) -> dict:
    return json.loads((CAPTURES / f"{name}.manifest.json").read_text())


def _operation(manifest: dict, client_id: str) -> dict:
    return next(op["result"] for op in manifest["operations"]
                if isinstance(op["result"], dict) and op["result"].get("client_id") == client_id)


def _frame_times(name: str) -> dict[int, int]:
    out = subprocess.run(["tshark", "-n", "-r", str(CAPTURES / f"{name}.pcap"), "-T", "fields", "-e", "frame.number",
                          "-e", "frame.time_epoch"], capture_output=True, text=True, check=True).stdout
    return {int(n): epoch_ns(t) for n, t in (line.split("\t") for line in out.splitlines())}


def test_empty_fetches_wait_out_their_max_wait() -> None:
    manifest = _manifest("waits_kafka")
    times = _frame_times("waits_kafka")
    rows = _exchanges("waits_kafka")
    for client_id, setting in (("lab-longpoll-kp", "fetch_max_wait_ms"), ("lab-longpoll-ck", "fetch.wait.max.ms")):
        max_wait = _operation(manifest, client_id)[setting]
        fetches = [ex for ex in rows if ex.client_id == client_id and ex.api_name == "Fetch" and ex.response_ts]
        assert len(fetches) >= 3
        for ex in fetches:
            waited = (times[ex.response_frame] - times[ex.request_frame]) / 1e6
            assert waited >= max_wait  # (the broker kept it the whole max wait)
            assert (ex.wait_reason, ex.service_ms) == ("long_poll", None)
            assert ex.wait_ms == pytest.approx(waited)


def test_a_fetch_answered_early_by_data_is_service() -> None:
    manifest = _manifest("waits_kafka")
    assert _operation(manifest, "lab-early-kp")["received"] == 1
    (fetch,) = [ex for ex in _exchanges("waits_kafka") if ex.client_id == "lab-early-kp" and ex.api_name == "Fetch"
                and ex.records]
    assert 1000 < fetch.latency_ms < 4000  # answered by the record produced 1.5 s into a 4 s wait
    assert fetch.wait_reason is None and fetch.service_ms == fetch.latency_ms


def _tshark_join_errors(name: str) -> dict[int, int]:
    """JoinGroup response frame -> its error code, as tshark decodes it."""
    out = subprocess.run(["tshark", "-n", "-r", str(CAPTURES / f"{name}.pcap"), "-d", "tcp.port==9092,kafka",
                          "-Y", "kafka.api_key == 11 && kafka.response_frame == 0 || kafka.api_key == 11",
                          "-T", "fields", "-e", "frame.number", "-e", "kafka.request_frame", "-e", "kafka.error"],
                         capture_output=True, text=True, check=True).stdout
    errors = {}
    for line in out.splitlines():
        frame, request_frame, error = (line.split("\t") + ["", ""])[:3]
        if request_frame and error:
            errors[int(frame)] = int(error.split(",")[0])
    return errors


def test_held_joins_are_group_barriers() -> None:
    rows = _exchanges("waits_kafka")
    errors = _tshark_join_errors("waits_kafka")
    joins = [ex for ex in rows if ex.api_name == "JoinGroup" and ex.client_id.startswith("lab-barrier")]
    assert len(joins) >= 6 and errors
    barriers = 0
    for ex in joins:
        error = errors.get(ex.response_frame, ex.error_code)
        if error == 0 and ex.latency_ms >= 10:
            assert (ex.wait_reason, ex.service_ms) == ("group_barrier", None)
            barriers += 1
        else:
            assert ex.wait_reason is None  # MEMBER_ID_REQUIRED, or answered at once
    assert barriers >= 2  # the members already in waited for the next to join


def test_a_client_sending_while_muted_waits_for_the_mute() -> None:
    manifest = _manifest("waits_kafka")
    throttles = _operation(manifest, "lab-rude-producer")["throttle_time_ms"]  # what the client read, in order
    produce = sorted((ex for ex in _exchanges("waits_kafka") if ex.client_id == "lab-rude-producer"),
                     key=lambda ex: ex.correlation_id)
    assert [ex.throttle_time_ms for ex in produce] == throttles
    for previous, ex in zip(produce, produce[1:]):
        muted = previous.response_ts + previous.throttle_time_ms * 1_000_000 > ex.request_first_ts
        assert ("sent-while-muted" in ex.problem_codes) == muted
        if muted:
            expected = (previous.response_ts + previous.throttle_time_ms * 1_000_000 - ex.request_first_ts) / 1e6
            assert ex.wait_reason == "throttle" and ex.wait_ms == pytest.approx(min(expected, ex.latency_ms))
            assert ex.service_ms < 50  # the broker itself answered quickly once unmuted
    assert sum("sent-while-muted" in ex.problem_codes for ex in produce) >= 2


def test_an_old_client_that_does_not_back_off_waits_out_the_mute() -> None:
    rows = _exchanges("throttle_old_kafka3")
    fetches = sorted((ex for ex in rows if ex.client_id == "lab-old-throttled-consumer" and ex.api_name == "Fetch"),
                     key=lambda ex: ex.correlation_id)
    assert {ex.api_version for ex in fetches} == {3}
    muted = 0
    for previous, ex in zip(fetches, fetches[1:]):
        if previous.throttle_time_ms:
            # answered at once (not held: latency far below the throttle time) ...
            assert previous.latency_ms < previous.throttle_time_ms * 0.9 or previous.wait_reason == "throttle"
            # ... and the next Fetch, sent at once, waited out the mute
            assert "sent-while-muted" in ex.problem_codes and ex.wait_reason == "throttle"
            assert ex.wait_ms == pytest.approx(previous.throttle_time_ms, abs=10)
            muted += 1
    assert muted >= 10
