"""One Dissector fed 4-tuple after 4-tuple, with `end_connections` and
`start_afresh` between them (what a Spark task does), gives what a fresh
Dissector per 4-tuple gives: the same exchanges (their stream keys
included), accounting, classification keys and TLS counts, on every
committed capture (lossy, reordered, TLS with its key log, port reuse
within a 4-tuple)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdissect.conn.pipeline import Dissector
from kdissect.conn.tls import read_keylog_file
from kdissect.model.accounting import Accounting
from kdissect.model.exchange import row_values
from kdissect.stats.tables import COLLECT_KEEPS
from kdissect.wire.capture import read_segments
from tests.conn.tls.test_captures import server_port

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
PLAIN = sorted(CAPTURES.glob("*.pcap")) + sorted((CAPTURES / "derived").glob("*.pcap"))
TLS = sorted((CAPTURES / "tls").glob("*.pcap"))


def _by_four_tuple(pcap: Path) -> list[list]:
    """The capture's segments grouped by 4-tuple (either direction), the
    groups in the order their first segment came, each in capture order."""
    groups: dict[tuple, list] = {}
    for segment in read_segments([pcap]):
        ends = sorted(((segment.src, segment.sport), (segment.dst, segment.dport)))
        groups.setdefault((*ends[0], *ends[1]), []).append(segment)
    return list(groups.values())


def _row(exchange) -> tuple:
    return (*row_values(exchange), exchange.stream_key)


def _dissector(ports: tuple[int, ...], keylog, keeps: dict) -> Dissector:
    return Dissector(ports=ports, detect=True, capture_names=["capture.pcap"], keep_messages=False,
                     accounting=Accounting(), keylog=keylog, **keeps)


def _fresh_each(groups: list[list], ports: tuple[int, ...], keylog, keeps: dict) -> tuple:
    rows, keys, accounting, tls = [], [], Accounting(), None
    for segments in groups:
        dissector = _dissector(ports, keylog, keeps)
        dissector.accounting = accounting
        rows += [_row(e) for e in dissector.feed_many(segments)]
        rows += [_row(e) for e in dissector.finish()]
        keys += list(dissector.classification_keys)
        if dissector.accounting.tls_connections:
            tls = dissector.tls_stats if tls is None else tls
            if dissector.tls_stats is not tls:
                tls.add(dissector.tls_stats)
        dissector.release()
    return rows, keys, accounting.to_dict(), tls.to_dict() if tls is not None else None


def _one_for_all(groups: list[list], ports: tuple[int, ...], keylog, keeps: dict) -> tuple:
    rows, keys = [], []
    dissector = _dissector(ports, keylog, keeps)
    for segments in groups:
        rows += [_row(e) for e in dissector.feed_many(segments)]
        rows += [_row(e) for e in dissector.end_connections()]
        keys += list(dissector.start_afresh())
    rows += [_row(e) for e in dissector.finish()]
    tls = dissector.tls_stats.to_dict() if dissector.accounting.tls_connections else None
    return rows, keys, dissector.accounting.to_dict(), tls


@pytest.mark.parametrize("keeps", [{**COLLECT_KEEPS, "keep_apis": ()}, COLLECT_KEEPS], ids=["skim", "forensic"])
@pytest.mark.parametrize("pcap", PLAIN + TLS, ids=lambda p: p.name)
def test_one_dissector_with_end_connections_equals_one_per_four_tuple(pcap: Path, keeps: dict) -> None:
    groups = _by_four_tuple(pcap)
    tls = pcap.parent.name == "tls"
    keylog = read_keylog_file(pcap.with_suffix(".keys")) if tls else None
    ports = (server_port(pcap),) if tls else (9092,)
    fresh = _fresh_each(groups, ports, keylog, keeps)
    assert fresh[0], "no exchanges: the comparison would prove nothing"
    assert _one_for_all(groups, ports, keylog, keeps) == fresh
    if tls:
        assert fresh[3] is not None and fresh[3]["decrypted"] > 0


def test_a_fresh_start_numbers_streams_from_0_and_keeps_their_keys_apart() -> None:
    """After `start_afresh` the next 4-tuple's Kafka connection is stream 0
    again, as in a new Dissector, and its exchanges carry its own
    classification key, which `start_afresh` hands out with it."""
    groups = _by_four_tuple(CAPTURES / "admin.pcap")
    assert len(groups) >= 2
    dissector = _dissector((9092,), None, {**COLLECT_KEEPS, "keep_apis": ()})
    streams, keys = [], set()
    for segments in groups:
        exchanges = [*dissector.feed_many(segments), *dissector.end_connections()]
        assert dissector.open_connections == 0
        handed = list(dissector.start_afresh())
        streams += [e.stream for e in exchanges]
        assert {e.stream_key for e in exchanges} <= {key[1:] for key in handed}
        keys.update(handed)
    assert set(streams) == {0} and len(keys) == len(groups)
