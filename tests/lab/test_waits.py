"""Waits the protocol asks for, on real Apache Kafka captures (issue #13).

Expected values come from the clients' own settings and reports in the
manifests (fetch max waits, the throttle times the raw client read, what was
consumed), tshark's frame times and the broker's answers as tshark decodes
them, never from kdissect's output:

* `waits_kafka`: kafka-python (fetch_max_wait_ms 1000) and librdkafka
  (fetch.wait.max.ms 800) polling an empty partition: every Fetch waits out
  its max wait (long_poll, no service time); a Fetch waiting up to 4000 ms
  answered after ~1.5 s by a record produced then waited until the Produce
  was answered (issue 28; tests/lab/test_longpoll_data.py checks the times);
  three group members joining 1.5 s apart: the JoinGroups the coordinator
  held (answered without error after 10 ms or more) are group barriers; a
  raw client sending Produce v7 back to back with a quota: each request sent
  before the previous answer's throttle time ran out waited for the mute.
* `throttle_old_kafka3`: kafka-python (0.10.1 protocol, Fetch v3) with a
  consumer quota on Kafka 3.9: the broker answers at once and mutes, and the
  old client sends its next Fetch at once, so that Fetch waits out the mute.
* `waits_more_kafka`: the Java client (kafka-clients 4.1.1): a consumer with
  fetch.max.wait.ms 700 on an empty partition (long polls); a KIP-848 group
  of three members joining 1.5 s apart (ConsumerGroupHeartbeat is never a
  wait, however long the broker took); an Admin client over a request quota
  (IncrementalAlterConfigs v1, whose throttle times tshark 4.0 decodes): the
  broker answers at once and mutes, the client waits out each throttle time,
  so nothing is a wait and nothing was sent while muted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kdissect.conn.pipeline import analyze
from tests.support.pcaps import epoch_ns
from tests.support.paths import REPO

CAPTURES = REPO / "captures"


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


def test_a_fetch_answered_early_by_data_waited_for_it() -> None:
    manifest = _manifest("waits_kafka")
    assert _operation(manifest, "lab-early-kp")["received"] == 1
    (fetch,) = [ex for ex in _exchanges("waits_kafka") if ex.client_id == "lab-early-kp" and ex.api_name == "Fetch"
                and ex.records]
    assert 1000 < fetch.latency_ms < 4000  # answered by the record produced 1.5 s into a 4 s wait
    # the broker was idle until the record came: the wait is most of the latency, the rest is service
    assert fetch.wait_reason == "long_poll" and fetch.wait_ms > 1000 and fetch.service_ms < 50


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


# ----------------------------------------------------------- waits_more_kafka --

MORE = "waits_more_kafka"


def _tshark_pdus(name: str) -> list[dict]:
    """One dict per Kafka PDU as tshark decodes it: frame, its time (ns),
    TCP stream, direction, correlation id, and, where tshark decodes them,
    api key, client id and throttle time. (Every frame of these captures
    holds at most one PDU: checked.)"""
    fields = ("frame.number", "frame.time_epoch", "tcp.stream", "tcp.dstport", "tcp.len", "kafka.len",
              "kafka.correlation_id", "kafka.api_key", "kafka.client_id", "kafka.throttle_time")
    cmd = ["tshark", "-n", "-r", str(CAPTURES / f"{name}.pcap"), "-d", "tcp.port==9092,kafka", "-Y", "kafka",
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;"]
    for field in fields:
        cmd += ["-e", field]
    pdus = []
    for line in subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines():
        frame, time, stream, dstport, tcp_len, kafka_len, corr, key, client_id, throttle = line.split("\t")
        assert ";" not in corr, f"frame {frame} holds several PDUs"
        pdus.append({"frame": int(frame), "ts": epoch_ns(time), "stream": int(stream),
                     "request": dstport == "9092", "one_segment": int(tcp_len) == int(kafka_len) + 4,
                     "corr": int(corr), "api_key": int(key) if key else None, "client_id": client_id,
                     "throttle": int(throttle) if throttle else None})
    return pdus


def _tshark_exchanges(name: str, client_ids: set[str]) -> list[tuple[dict, dict | None]]:
    """(request, response or None) of these clients, paired by stream and
    correlation id from tshark's PDUs (tshark 4.0 cannot pair the requests
    whose version it does not know), in capture order."""
    pdus = _tshark_pdus(name)
    responses = {(p["stream"], p["corr"]): p for p in pdus if not p["request"]}
    return [(p, responses.get((p["stream"], p["corr"]))) for p in pdus
            if p["request"] and p["client_id"] in client_ids]


def _queued_ns(name: str) -> dict[int, int]:
    """Request frame -> how long (ns) it waited for an earlier request's
    answer on its connection, from tshark's PDUs: the latest response on the
    stream to a request sent before it, where that came after it."""
    pdus = _tshark_pdus(name)
    responses = {(p["stream"], p["corr"]): p for p in pdus if not p["request"]}
    queued: dict[int, int] = {}
    latest_answer: dict[int, int] = {}  # stream -> latest answer to the requests before
    for p in pdus:  # capture order
        if not p["request"]:
            continue
        before = latest_answer.get(p["stream"], 0)
        if before > p["ts"]:
            queued[p["frame"]] = before - p["ts"]
        answer = responses.get((p["stream"], p["corr"]))
        if answer is not None:
            latest_answer[p["stream"]] = max(before, answer["ts"])
    return queued


def test_java_empty_fetches_wait_out_their_max_wait() -> None:
    client_id = "lab-longpoll-java"
    max_wait = _operation(_manifest(MORE), client_id)["fetch.max.wait.ms"]
    fetches = [(req, resp) for req, resp in _tshark_exchanges(MORE, {client_id}) if req["api_key"] == 1]
    assert all(resp is not None for _, resp in fetches)
    # The consumer's close ends its fetch session (KIP-227) with one more Fetch
    # sent while the last long poll is still waiting: the broker reads it only
    # once that one is answered, and answers it at once (its timing is the
    # subject of test_a_fetch_queued_behind_a_long_poll_is_not_broker_time).
    long_polls, closing = [], []
    for previous, current in zip([None, *fetches], fetches):
        sent_during_previous = previous is not None and current[0]["ts"] < previous[1]["ts"]
        (closing if sent_during_previous else long_polls).append(current)
    assert len(closing) == 1 and closing[0] == fetches[-1] and len(long_polls) >= 4
    assert closing[0][1]["ts"] - long_polls[-1][1]["ts"] < 20_000_000
    rows = {ex.request_frame: ex for ex in _exchanges(MORE) if ex.client_id == client_id and ex.api_name == "Fetch"}
    assert sorted(rows) == [req["frame"] for req, _ in fetches]
    for req, resp in long_polls:
        waited = (resp["ts"] - req["ts"]) / 1e6
        assert waited >= max_wait  # (the broker kept it the whole max wait)
        ex = rows[req["frame"]]
        assert ex.response_frame == resp["frame"] and not ex.records
        assert (ex.wait_reason, ex.service_ms) == ("long_poll", None)
        assert ex.wait_ms == pytest.approx(waited)


def test_kip848_heartbeats_are_never_waits() -> None:
    group = next(op["result"] for op in _manifest(MORE)["operations"]
                 if isinstance(op["result"], dict) and op["result"].get("group") == "lab-848")
    assert group["group.protocol"] == "consumer"
    members = {m["client_id"]: m for m in group["members"]}
    assert len(members) == 3
    pairs = _tshark_exchanges(MORE, set(members))
    keys = Counter(req["api_key"] for req, _ in pairs)
    assert keys[68] >= 3 * len(members)  # ConsumerGroupHeartbeat: the group really used KIP-848 ...
    assert not {11, 12, 13, 14} & set(keys)  # ... and none of the classic group APIs
    # the members joined about 1.5 s apart (their first heartbeats, per tshark)
    joined = sorted(min(req["ts"] for req, _ in pairs if req["client_id"] == c and req["api_key"] == 68)
                    for c in members)
    assert all(later - earlier > 1.2e9 for earlier, later in zip(joined, joined[1:]))
    # every member ended with partitions of its own: the group rebalanced as each joined
    final = [m["assignments"][-1] for m in members.values()]
    assert all(final) and sorted(sum(final, [])) == [f"grouped848-{i}" for i in range(3)]
    heartbeats = {req["frame"]: (resp["ts"] - req["ts"]) / 1e6 for req, resp in pairs
                  if req["api_key"] == 68 and resp is not None}
    assert max(heartbeats.values()) >= 10  # some the broker took long over (the barrier rule's threshold)
    rows = [ex for ex in _exchanges(MORE) if ex.api_name == "ConsumerGroupHeartbeat"]
    assert sorted(ex.request_frame for ex in rows) == sorted(heartbeats)
    # a heartbeat sent while an earlier request of its connection was unanswered
    # waited for that answer (the queue rule), never for a wait of its own
    queued = _queued_ns(MORE)
    assert sum(frame in queued for frame in heartbeats) < len(heartbeats) / 2
    for ex in rows:
        assert ex.latency_ms == pytest.approx(heartbeats[ex.request_frame])
        if ex.request_frame in queued:
            assert ex.wait_reason == "queued" and ex.wait_ms == pytest.approx(queued[ex.request_frame] / 1e6)
            assert ex.service_ms == pytest.approx(ex.latency_ms - ex.wait_ms)
        else:
            assert ex.wait_reason is None and ex.wait_ms is None and ex.service_ms == ex.latency_ms


def _muted_requests(pairs: list[tuple[dict, dict | None]]) -> set[int]:
    """Request frames sent before an earlier response of their connection
    plus its throttle time (KIP-219's mute), from tshark's times."""
    events = sorted([(req["ts"], 1, req) for req, _ in pairs]
                    + [(resp["ts"], 0, resp) for _, resp in pairs if resp is not None], key=lambda e: e[:2])
    muted_until: dict[int, int] = {}
    muted = set()
    for ts, is_request, pdu in events:
        if is_request:
            if ts < muted_until.get(pdu["stream"], 0):
                muted.add(pdu["frame"])
        elif pdu["throttle"]:
            muted_until[pdu["stream"]] = max(muted_until.get(pdu["stream"], 0), ts + pdu["throttle"] * 1_000_000)
    return muted


def test_a_client_that_respects_the_mute_has_no_throttle_waits() -> None:
    client_id = "lab-throttled-java-admin"
    assert "request_percentage" in _operation(_manifest(MORE), client_id)["quota"]
    pairs = _tshark_exchanges(MORE, {client_id})
    assert all(resp is not None and req["one_segment"] for req, resp in pairs)
    throttled = {resp["frame"]: resp["throttle"] for _, resp in pairs if resp["throttle"]}
    assert len(throttled) >= 5 and max(throttled.values()) >= 500
    # tshark decodes the throttle time of every response the quota applied to
    altered = [resp for req, resp in pairs if req["api_key"] == 44]
    assert all(resp["throttle"] is not None for resp in altered) and len(altered) >= 10
    muted = _muted_requests(pairs)
    rows = [ex for ex in _exchanges(MORE) if ex.client_id == client_id]
    assert sorted(ex.request_frame for ex in rows) == sorted(req["frame"] for req, _ in pairs)
    for ex in rows:
        if ex.throttle_time_ms:
            assert throttled[ex.response_frame] == ex.throttle_time_ms
            assert ex.latency_ms < 50  # answered at once (KIP-219), not held for up to a second
        sent_while_muted = ex.request_frame in muted
        assert ("sent-while-muted" in ex.problem_codes) == sent_while_muted
        assert (ex.wait_reason == "throttle") == sent_while_muted
        if not sent_while_muted:
            assert ex.wait_reason is None and ex.service_ms == ex.latency_ms
    assert sum(ex.throttle_time_ms > 0 for ex in rows if ex.throttle_time_ms) == len(throttled)
    # the stats table, as `kdissect stats --json` prints it
    out = subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", str(CAPTURES / f"{MORE}.pcap")],
                         capture_output=True, text=True, check=True).stdout
    (row,) = [r for r in json.loads(out)["throttle_by_client"] if r["client_id"] == client_id]
    assert row["throttled"] == len(throttled)
    assert row["max_ms"] == max(throttled.values()) and row["total_ms"] == sum(throttled.values())
    assert row["sent_while_muted"] == len(muted)



def test_a_fetch_queued_behind_a_long_poll_is_not_broker_time() -> None:
    """A Kafka broker reads a connection's next request only once it has
    answered the one before (it mutes the connection meanwhile). The Java
    consumers' session-closing Fetch, sent while their last long poll still
    waits, is answered right after it: its service time is from that answer
    to its own, not the long poll it queued behind."""
    clients = {"lab-longpoll-java", "lab-848-0", "lab-848-1", "lab-848-2"}
    fetches = [(req, resp) for req, resp in _tshark_exchanges(MORE, clients) if req["api_key"] == 1]
    queued = {}
    for stream in {req["stream"] for req, _ in fetches}:
        on_stream = [pair for pair in fetches if pair[0]["stream"] == stream]
        for (_, before), (req, resp) in zip(on_stream, on_stream[1:]):
            if req["ts"] < before["ts"]:
                queued[req["frame"]] = (resp["ts"] - before["ts"]) / 1e6
    assert len(queued) >= 2 and all(service < 20 for service in queued.values())
    rows = {ex.request_frame: ex for ex in _exchanges(MORE) if ex.request_frame in queued}
    for frame, service in queued.items():
        assert rows[frame].latency_ms > 100  # (most of it behind the long poll)
        assert rows[frame].service_ms == pytest.approx(service, abs=1)
