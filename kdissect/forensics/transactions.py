"""Transactions (KIP-98, KIP-890) from the wire: one row per transaction and
one per topic-partition and producer whose fetched data held transaction
markers or aborted transactions.

A transaction belongs to its transactional id and producer (id and epoch):
it starts with the first request that adds to it (AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, or, with the transactions of KIP-890,
whose producers add partitions implicitly, a transactional Produce) after
the producer's previous EndTxn, and ends with the answer to its EndTxn.
Its result: `committed` / `aborted` (EndTxn answered without error),
`fenced` (a request of the transaction was refused with a fencing error: a
newer producer took the transactional id), `failed` (EndTxn refused
otherwise), `open` (no EndTxn answer in the capture). Events are kept per
transactional id and sorted at the end, so parts merge in any order.

Fetched data: per (topic, partition, producer id), the control records
(commit / abort markers) and the aborted-transactions list of read_committed
Fetch responses; a fetched transactional data batch is aborted when the
producer's next marker after it is an abort, committed when a commit,
undecided when the capture holds no later marker of that producer.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from kdissect.conn.kept_fetch import FetchPartition
from kdissect.forensics.common import add_count, error_list, order_key, when
from kdissect.protocol.apis import ApiKey
from kdissect.protocol.errors import error_name
from kdissect.records.decode import iter_batches
from kdissect.records.quick_spans import SetFigures

_INIT, _ADD_PARTITIONS = int(ApiKey.INIT_PRODUCER_ID), int(ApiKey.ADD_PARTITIONS_TO_TXN)
_ADD_OFFSETS, _END, _TXN_COMMIT = int(ApiKey.ADD_OFFSETS_TO_TXN), int(ApiKey.END_TXN), int(ApiKey.TXN_OFFSET_COMMIT)
TRANSACTION_APIS = frozenset({_INIT, _ADD_PARTITIONS, _ADD_OFFSETS, _END, _TXN_COMMIT})
# a newer producer (epoch) owns the transactional id
FENCING_ERRORS = frozenset(code for code, name in ((47, "INVALID_PRODUCER_EPOCH"), (90, "PRODUCER_FENCED"))
                           if error_name(code) == name)


def _partition_text(topic: str | None, partition: int) -> str:
    return f"{topic}-{partition}"


class TransactionTally:
    """Events per transactional id, and fetched markers per partition and producer."""

    def __init__(self) -> None:
        # transactional id -> [(order key, kind, producer id, epoch, details, client id, request ts, response ts)]
        self.events: dict[str, list[tuple[Any, ...]]] = {}
        # (topic label, partition, producer id) -> {marker offset: "commit" | "abort"}
        self.markers: dict[tuple[Any, ...], dict[int, str]] = {}
        # (topic label, partition, producer id) -> {first offset of a transactional data batch: records}
        self.batches: dict[tuple[Any, ...], dict[int, int]] = {}
        # (topic label, partition, producer id) -> first offsets listed as aborted in read_committed answers
        self.aborted_listed: dict[tuple[Any, ...], set[int]] = {}
        # (topic label, partition, producer id) -> client ids that fetched its data
        self.fetched_by: dict[tuple[Any, ...], set[str]] = {}

    # ------------------------------------------------------------ intake

    def _event(self, ex: Any, tid: str | None, kind: str, pid: Any, epoch: Any, details: Any) -> None:
        if not tid:
            return
        ts = when(ex)
        self.events.setdefault(tid, []).append(
            (order_key(ex, ts), kind, pid, epoch, details, ex.client_id, ex.request_ts, ex.response_ts))

    def add(self, ex: Any) -> None:
        """An exchange of one of TRANSACTION_APIS (decoded request needed)."""
        if ex.request is None:
            return
        body, key = ex.request.body, ex.api_key
        answer = ex.response.body if ex.response is not None else None
        top_error = getattr(answer, "error_code", None) if answer is not None else None
        if key == _INIT:
            if answer is not None and getattr(body, "transactional_id", None):
                self._event(ex, body.transactional_id, "init", answer.producer_id, answer.producer_epoch,
                            top_error or 0)
        elif key == _ADD_PARTITIONS:
            self._add_partitions(ex, body, answer)
        elif key == _ADD_OFFSETS:
            self._event(ex, body.transactional_id, "add_offsets", body.producer_id, body.producer_epoch,
                        (body.group_id, top_error or 0))
        elif key == _TXN_COMMIT:
            offsets = []
            for topic in getattr(body, "topics", None) or ():
                label = getattr(topic, "name", None) or (str(topic.topic_id) if getattr(topic, "topic_id", None)
                                                         else None)
                for entry in topic.partitions or ():
                    offsets.append((label, entry.partition_index, entry.committed_offset))
            errors = []
            for topic in getattr(answer, "topics", None) or ():
                errors += [entry.error_code for entry in topic.partitions or () if entry.error_code]
            self._event(ex, body.transactional_id, "offsets", body.producer_id, body.producer_epoch,
                        (body.group_id, offsets, errors))
        elif key == _END:
            self._event(ex, body.transactional_id, "end", body.producer_id, body.producer_epoch,
                        (bool(body.committed), top_error if answer is not None else None))

    def _add_partitions(self, ex: Any, body: Any, answer: Any) -> None:
        errors = []
        for result in getattr(answer, "results_by_topic_v3_and_below", None) or ():
            errors += [p.partition_error_code for p in result.results_by_partition or () if p.partition_error_code]
        for batch in getattr(answer, "results_by_transaction", None) or ():
            for result in batch.topic_results or ():
                errors += [p.partition_error_code for p in result.results_by_partition or ()
                           if p.partition_error_code]
        if getattr(answer, "error_code", 0):
            errors.append(answer.error_code)
        if getattr(body, "v3_and_below_transactional_id", None):
            parts = [(t.name, p) for t in body.v3_and_below_topics or () for p in t.partitions or ()]
            self._event(ex, body.v3_and_below_transactional_id, "add_partitions", body.v3_and_below_producer_id,
                        body.v3_and_below_producer_epoch, (parts, errors))
        for txn in getattr(body, "transactions", None) or ():  # v4+: sent by brokers, batched
            if not txn.verify_only:
                parts = [(t.name, p) for t in txn.topics or () for p in t.partitions or ()]
                self._event(ex, txn.transactional_id, "add_partitions", txn.producer_id, txn.producer_epoch,
                            (parts, errors))

    def add_produce(self, ex: Any, tid: str | None, label: str | None, partition: int, figures: Any,
                    error: int) -> None:
        """A transactional Produce's data for one partition (an implicit add, KIP-890)."""
        if not tid or figures is None:
            return
        for span in figures.spans:
            if span.transactional:
                self._event(ex, tid, "produce", span.producer_id, span.producer_epoch,
                            (label, partition, span.count, error or 0))
                error = 0  # the partition's error once

    def add_fetch(self, client_id: str | None, label: str | None, partition: int, entry: FetchPartition,
                  figures: SetFigures | None, limit: int) -> None:
        """One partition of a Fetch response (of `client_id`): markers, aborted list, transactional batches."""
        fetcher = client_id or ""
        for aborted in entry.aborted_transactions or ():
            self.aborted_listed.setdefault((label, partition, aborted.producer_id), set()).add(aborted.first_offset)
            self.fetched_by.setdefault((label, partition, aborted.producer_id), set()).add(fetcher)
        if figures is not None:
            for span in figures.spans:
                if span.transactional and span.producer_id is not None:
                    key = (label, partition, span.producer_id)
                    self.batches.setdefault(key, {})[span.first] = span.count
                    self.fetched_by.setdefault(key, set()).add(fetcher)
        raw = entry.records
        if raw and figures is not None and figures.control_records:
            for batch in iter_batches(raw, limit):
                if batch.partial or not batch.control or batch.producer_id is None:
                    continue
                key = (label, partition, batch.producer_id)
                for record in batch.records:
                    if record.control in ("commit", "abort"):
                        self.markers.setdefault(key, {})[record.offset] = record.control
                self.fetched_by.setdefault(key, set()).add(fetcher)

    def marker_offsets(self, names: Any) -> dict[tuple[Any, ...], set[int]]:
        """(topic, partition) -> the offsets of the commit and abort markers seen."""
        found: dict[tuple[Any, ...], set[int]] = {}
        for (label, partition, _producer_id), markers in self.markers.items():
            found.setdefault((names.name(label), partition), set()).update(markers)
        return found

    def merge(self, other: TransactionTally) -> None:
        for tid, events in other.events.items():
            self.events.setdefault(tid, []).extend(events)
        for key, markers in other.markers.items():
            self.markers.setdefault(key, {}).update(markers)
        for key, batches in other.batches.items():
            self.batches.setdefault(key, {}).update(batches)
        for key, aborted in other.aborted_listed.items():
            self.aborted_listed.setdefault(key, set()).update(aborted)
        for key, clients in other.fetched_by.items():
            self.fetched_by.setdefault(key, set()).update(clients)

    # -------------------------------------------------------------- rows

    def rows(self, names: Any) -> list[dict[str, Any]]:
        """One row per transaction, by transactional id then start."""
        out = []
        for tid in sorted(self.events):
            open_txns: dict[tuple[Any, ...], dict[str, Any]] = {}  # (producer id, epoch) -> the open transaction
            done: list[dict[str, Any]] = []
            for _key, kind, pid, epoch, details, client_id, request_ts, response_ts in sorted(
                    self.events[tid], key=lambda e: e[0]):
                if kind == "init":
                    continue
                txn = open_txns.get((pid, epoch))
                if txn is None:
                    txn = open_txns[(pid, epoch)] = _new_transaction(tid, pid, epoch, request_ts)
                txn["client_ids"].add(client_id or "")
                if kind == "produce":
                    label, partition, count, error = details
                    txn["partitions"].add((label, partition))
                    txn["produce_batches"] += 1
                    txn["records"] += count
                    if error:
                        add_count(txn["errors"], error)
                elif kind == "add_partitions":
                    parts, errors = details
                    txn["partitions"].update(parts)
                    txn["added"].update(parts)
                    for error in errors:
                        add_count(txn["errors"], error)
                elif kind == "add_offsets":
                    group, error = details
                    txn["group"] = group
                    if error:
                        add_count(txn["errors"], error)
                elif kind == "offsets":
                    group, offsets, errors = details
                    txn["group"] = group
                    for label, partition, offset in offsets:
                        txn["offsets"][(label, partition)] = offset
                    for error in errors:
                        add_count(txn["errors"], error)
                elif kind == "end":
                    committed, error = details
                    txn["end"] = "commit" if committed else "abort"
                    txn["end_ts"] = response_ts
                    if error:
                        add_count(txn["errors"], error)
                    txn["end_error"] = error
                    done.append(open_txns.pop((pid, epoch)))
            done += open_txns.values()
            done.sort(key=lambda t: (t["first_ts"] if t["first_ts"] is not None else -1))
            for index, txn in enumerate(done, 1):
                out.append(_transaction_row(txn, index, names))
        return out

    def marker_rows(self, names: Any) -> list[dict[str, Any]]:
        """One row per (topic, partition, producer id) with markers, aborted
        entries or transactional batches fetched."""
        keys = set(self.markers) | set(self.aborted_listed) | set(self.batches)
        rows = []
        for label, partition, pid in keys:
            key = (label, partition, pid)
            markers = self.markers.get(key, {})
            offsets = sorted(markers)
            counts = {"commit": [0, 0], "abort": [0, 0], None: [0, 0]}  # batches, records
            for first, records in self.batches.get(key, {}).items():
                at = bisect_right(offsets, first)
                kind = markers[offsets[at]] if at < len(offsets) else None
                counts[kind][0] += 1
                counts[kind][1] += records
            listed = sorted(self.aborted_listed.get(key, ()))
            rows.append({
                "topic": names.name(label), "partition": partition, "producer_id": pid,
                "commit_markers": sum(1 for kind in markers.values() if kind == "commit"),
                "abort_markers": sum(1 for kind in markers.values() if kind == "abort"),
                "aborted_listed": len(listed), "aborted_first_offsets": [str(o) for o in listed],
                "committed_batches": counts["commit"][0], "committed_records": counts["commit"][1],
                "aborted_batches": counts["abort"][0], "aborted_records": counts["abort"][1],
                "undecided_batches": counts[None][0],
                "client_ids": sorted(self.fetched_by.get(key, ())),
            })
        rows.sort(key=lambda r: (r["topic"] or "", r["partition"], r["producer_id"]))
        return rows


def _new_transaction(tid: str, pid: Any, epoch: Any, first_ts: int | None) -> dict[str, Any]:
    return {"tid": tid, "pid": pid, "epoch": epoch, "first_ts": first_ts, "client_ids": set(), "partitions": set(),
            "added": set(), "produce_batches": 0, "records": 0, "group": None, "offsets": {}, "end": None,
            "end_ts": None, "end_error": None, "errors": {}}


def _transaction_row(txn: dict[str, Any], index: int, names: Any) -> dict[str, Any]:
    fenced = any(code in FENCING_ERRORS for code in txn["errors"])
    if fenced:
        result = "fenced"
    elif txn["end"] is None:
        result = "open"
    elif txn["end_error"]:
        result = "failed"
    else:
        result = "committed" if txn["end"] == "commit" else "aborted"
    first, end = txn["first_ts"], txn["end_ts"]
    return {
        "transactional_id": txn["tid"], "transaction": index, "producer_id": txn["pid"],
        "producer_epoch": txn["epoch"], "client_ids": sorted(txn["client_ids"]),
        "partitions": sorted(_partition_text(names.name(t), p) for t, p in txn["partitions"]),
        "partitions_added": len(txn["added"]), "produce_batches": txn["produce_batches"], "records": txn["records"],
        "group_id": txn["group"],
        "offsets_committed": sorted(f"{_partition_text(names.name(t), p)}={o}" for (t, p), o in txn["offsets"].items()),
        "end": txn["end"], "result": result,
        "end_error": error_name(txn["end_error"]) if txn["end_error"] else None,
        "fenced": fenced, "errors": error_list(txn["errors"]),
        "first_ts": first, "end_ts": end,
        "duration_ms": (end - first) / 1e6 if first is not None and end is not None else None,
    }


__all__ = ["FENCING_ERRORS", "TRANSACTION_APIS", "TransactionTally"]
