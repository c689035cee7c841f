"""The join a chunk of exchanges at a time (kdissect.conn.brokerlog.join:
`BrokerLogJoin._joined`): a chunk is joined by a few calls over it only when
nothing in it depends on the order within it, else exchange by exchange.

Both ways must give the same rows and the same accounting, on the bundled
runs of Apache Kafka 4.4.0 and on their logs damaged so that chunks fall back
(lines lost: exchanges without a line; lines repeated later: identities with
several lines, chosen by time). The exchange-by-exchange path is the one the
tshark-checked tests of test_brokerlog_join.py measure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.conn.brokerlog import join as join_module
from kdissect.conn.brokerlog import parse
from kdissect.conn.brokerlog.join import BrokerLogJoin
from kdissect.conn.pipeline import Analysis
from tests.conn.test_brokerlog_join import PLAIN, TLS, manifest


def joined(run: Path, log: Path) -> tuple[list[dict], dict]:
    keylogs = [run / "keys"] if (run / "keys").exists() else []
    analysis = Analysis([run / "capture.pcap"], ports=(manifest(run)["port"],), tls_keylogs=keylogs)
    join = BrokerLogJoin([str(log)])
    rows = [exchange.to_row() for exchange in join.join(analysis)]
    assert join.accounting.balance() == []
    return rows, join.accounting.to_dict()


def damaged_log(tmp_path: Path) -> Path:
    """The plain run's log with every 7th line lost and every 5th repeated
    at the end with its time moved 3 s later (within the tolerance)."""
    lines = [line for name in ("request.log.2", "request.log.1", "request.log")
             for line in (PLAIN / name).read_text().splitlines(keepends=True)]
    kept = [line for n, line in enumerate(lines) if n % 7 != 3]
    later = []
    for line in lines[::5]:
        seconds = int(line[18:20]) + 3
        minute = int(line[15:17]) + seconds // 60
        later.append(f"{line[:15]}{minute:02d}:{seconds % 60:02d}{line[20:]}")
    log = tmp_path / "request.log"
    log.write_text("".join(kept + later))
    return log


@pytest.mark.parametrize("chunk", [1, 3, 16, 256])
@pytest.mark.parametrize("case", ["plain", "tls", "damaged"])
def test_chunks_join_as_exchange_by_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
                                             case: str) -> None:
    run = TLS if case == "tls" else PLAIN
    log = damaged_log(tmp_path) if case == "damaged" else run
    monkeypatch.setattr(join_module, "_CHUNK", chunk)
    tried = []  # the chunks whose every identity found one entry (then checked for the tolerance)
    monkeypatch.setattr(join_module, "sub", lambda a, b: tried.append(1) or a - b)
    by_chunks = joined(run, log)
    monkeypatch.setattr(join_module, "_CHUNK_TYPES", frozenset())  # no chunk joined at once
    one_by_one = joined(run, log)
    assert by_chunks == one_by_one
    rows, accounting = by_chunks
    assert accounting["joined"] == sum(row["broker_log"] == "joined" for row in rows) > 0
    if case == "plain" or (case == "damaged" and chunk <= 3):  # (larger chunks of the damaged log all hold
        assert tried                                           # a lost or a repeated line)
    if case == "damaged":
        assert accounting["capture_only"]["not_logged"] > 0 and accounting["ambiguous"] > 0


@pytest.mark.parametrize("case", ["plain", "damaged"])
def test_small_window_reads_ahead_and_evicts_as_entry_by_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               case: str) -> None:
    """A window of 2 s and a tolerance of 1 s: the log is read ahead and
    evicted all along the run (not read whole at the start). Batches indexed
    at once and chunks joined at once give the rows and the accounting of
    the entry-by-entry and exchange-by-exchange paths."""
    log = damaged_log(tmp_path) if case == "damaged" else PLAIN

    def run() -> tuple[list[dict], dict, int]:
        analysis = Analysis([PLAIN / "capture.pcap"], ports=(manifest(PLAIN)["port"],))
        join = BrokerLogJoin([str(log)], tolerance_s=1.0, window_s=2.0)
        rows = [exchange.to_row() for exchange in join.join(analysis)]
        assert join.accounting.balance() == []
        return rows, join.accounting.to_dict(), join.peak_pending

    monkeypatch.setattr(join_module, "_CHUNK", 8)
    monkeypatch.setattr(parse, "_BLOCK_BYTES", 4096)  # batches of a few lines: many wholly within the read-ahead
    in_bulk = run()
    original = BrokerLogJoin._load_batch

    def never_whole(self: BrokerLogJoin) -> None:
        original(self)
        self._batch_last = float("inf")  # type: ignore[assignment]  # no batch is ever within the read-ahead

    monkeypatch.setattr(BrokerLogJoin, "_load_batch", never_whole)
    monkeypatch.setattr(join_module, "_CHUNK_TYPES", frozenset())
    one_by_one = run()
    assert in_bulk == one_by_one
    rows, accounting, peak = in_bulk
    assert accounting["joined"] > 0 and peak < accounting["request_lines"]  # (read ahead, not whole)


@pytest.mark.parametrize("pending", [3, 40, 4096])
def test_offsets_counted_per_chunk_flush_where_exchange_by_exchange_does(monkeypatch: pytest.MonkeyPatch,
                                                                         pending: int) -> None:
    """A chunk joined at once counts its offsets in one call when no flush
    into the sketch can fall within it, else one by one: the sketch gets the
    counts at the same points as on the exchange-by-exchange path, so the
    clock offset figures are the same."""
    updates = []

    class Counts(join_module.Counter):  # type: ignore[name-defined]
        def update(self, *args: object, **kwargs: object) -> None:
            updates.append(1)
            super().update(*args, **kwargs)

    flushes = []
    original_flush = join_module.BrokerLogAccounting.flush_offsets

    def flush(self: join_module.BrokerLogAccounting) -> None:
        flushes.append(dict(self.offset_counts))
        original_flush(self)

    monkeypatch.setattr(join_module, "Counter", Counts)
    monkeypatch.setattr(join_module.BrokerLogAccounting, "flush_offsets", flush)
    monkeypatch.setattr(join_module, "_OFFSET_PENDING", pending)
    monkeypatch.setattr(join_module, "_CHUNK", 16)
    by_chunks, by_chunks_flushes = joined(PLAIN, PLAIN), flushes[:]
    chunk_updates = len(updates)
    flushes.clear()
    monkeypatch.setattr(join_module, "_CHUNK_TYPES", frozenset())
    one_by_one = joined(PLAIN, PLAIN)
    assert by_chunks == one_by_one
    assert by_chunks_flushes == flushes  # (the same counts at each flush)
    assert by_chunks[1]["clock_offset"]["pairs"] > 0
    if pending == 3:  # (a chunk of 16 never fits: full chunks counted one by one, flushing in between)
        assert len(flushes) > 10
    else:
        assert chunk_updates > 0


def test_nothing_is_read_before_the_first_exchange_is_asked_for() -> None:
    """`join` hands the exchanges on through chains, not a generator of its
    own: still, neither the capture's exchanges nor the log are read until
    the first joined exchange is asked for; once all are through, the
    accounting is complete."""
    analysis = Analysis([PLAIN / "capture.pcap"], ports=(manifest(PLAIN)["port"],))
    pulled = []

    def exchanges():  # type: ignore[no-untyped-def]
        for exchange in analysis:
            pulled.append(exchange)
            yield exchange

    join = BrokerLogJoin([str(PLAIN)])
    joined_exchanges = join.join(exchanges())
    assert pulled == [] and join.read_stats.lines == 0 and not hasattr(join, "_index")
    first = next(joined_exchanges)
    assert pulled[0] is first and join.accounting.exchanges == 0  # (counted as chunks finish)
    rest = list(joined_exchanges)
    assert [first, *rest] == pulled
    assert join.accounting.exchanges == len(pulled) and join.accounting.balance() == []
    assert join.read_stats.request_lines == join.accounting.joined + sum(join.accounting.log_only.values()) > 0


@pytest.mark.parametrize("case", ["plain", "tls", "damaged", "small window"])
def test_joined_entries_leave_the_queue_without_changing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  case: str) -> None:
    """The joined entries are dropped from the eviction queue as the join
    goes (`_drop_joined`, once they are half of it): the rows and the
    accounting (the logged-only entries' reasons, counted at eviction or at
    the end) are those of a join that keeps them until the window passes,
    and the queue then holds few joined entries at any time."""
    run = TLS if case == "tls" else PLAIN
    log = damaged_log(tmp_path) if case == "damaged" else run
    tolerance, window = (1.0, 2.0) if case == "small window" else (5.0, 60.0)
    monkeypatch.setattr(join_module, "_CHUNK", 8)

    def joined_with(drop_from: float) -> tuple[list[dict], dict, int, int]:
        monkeypatch.setattr(join_module, "_DROP_FROM", drop_from)
        keylogs = [run / "keys"] if (run / "keys").exists() else []
        analysis = Analysis([run / "capture.pcap"], ports=(manifest(run)["port"],), tls_keylogs=keylogs)
        join = BrokerLogJoin([str(log)], tolerance_s=tolerance, window_s=window)
        drops = []
        original = join._drop_joined
        join._drop_joined = lambda: drops.append(1) or original()  # type: ignore[method-assign]
        rows, most_joined_held = [], 0
        for exchange in join.join(analysis):
            rows.append(exchange.to_row())
            most_joined_held = max(most_joined_held, sum(entry.matched for entry in join._queue))
        assert join.accounting.balance() == []
        return rows, join.accounting.to_dict(), len(drops), most_joined_held

    kept_rows, kept_accounting, kept_drops, kept_held = joined_with(float("inf"))
    rows, accounting, drops, held = joined_with(0)
    assert (rows, accounting) == (kept_rows, kept_accounting)
    assert kept_drops == 0 and drops > 0
    assert accounting["joined"] > 0 and sum(accounting["log_only"].values()) > 0
    assert held < kept_held
