"""Kafka over TLS through the one core path: the committed TLS captures
(captures/tls/, with their key logs) decrypted by kdissect give the Kafka
messages tshark finds after decrypting with the same key log, paired the
same way, with the same times (a message's time is the packet that
completed its last TLS record); without keys nothing is invented, and the
bytes are counted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kdissect.conn.pipeline import Analysis, analyze
from tests.support.tshark import compare_with_tshark
from tests.support.paths import REPO

TLS = REPO / "captures" / "tls"
NAMES = ["kafka_tls13", "kafka_tls12_gcm", "kafka_tls12_cbc"]


def _server_port(pcap: Path) -> int:
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                          "-T", "fields", "-e", "tcp.dstport", "-c", "1"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return int(out.split()[0])


@pytest.mark.parametrize("name", NAMES)
def test_kafka_inside_tls_equals_tsharks(name: str, tshark: str) -> None:
    pcap, keys = TLS / f"{name}.pcap", TLS / f"{name}.keys"
    port = _server_port(pcap)
    exchanges, accounting = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    exchanges = list(exchanges)
    counts = compare_with_tshark(tshark, pcap, (port,), exchanges, accounting.raw_sasl_frames, tls_keylog=keys)
    assert counts["requests"] > 5 and counts["responses"] > 5
    assert all(ex.status == "ok" for ex in exchanges), [ex.problems for ex in exchanges if ex.status != "ok"]
    assert accounting.encrypted_connections == 0 and accounting.kafka_connections == accounting.tls_connections
    assert accounting.tls_plaintext_bytes == accounting.stream_bytes > 0
    assert accounting.balance() == []


@pytest.mark.parametrize("name", NAMES)
def test_without_keys_tls_is_counted_not_decoded(name: str) -> None:
    pcap = TLS / f"{name}.pcap"
    port = _server_port(pcap)
    exchanges, accounting = analyze([str(pcap)], (port,))
    assert list(exchanges) == []
    assert accounting.tls_connections == accounting.encrypted_connections > 0
    assert accounting.kafka_connections == 0 and accounting.tls_bytes == accounting.payload_bytes
    assert accounting.balance() == []


@pytest.mark.parametrize("name", NAMES)
def test_tls_found_by_its_client_hello_on_any_port(name: str) -> None:
    """Not told the port: the ClientHello says TLS, the plaintext says Kafka."""
    pcap, keys = TLS / f"{name}.pcap", TLS / f"{name}.keys"
    port = _server_port(pcap)
    told, _ = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    found, accounting = analyze([str(pcap)], (1,), tls_keylogs=[str(keys)])
    rows = lambda exchanges: sorted((e.client, e.correlation_id, e.api_key, e.request_ts, e.response_ts)  # noqa: E731
                                    for e in exchanges)
    assert rows(found) == rows(told)
    assert accounting.tls_connections == accounting.kafka_connections > 0


def test_the_command_line_decrypts_with_tls_keylog(tmp_path: Path, capsys) -> None:
    from kdissect.cli import main

    pcap, keys = TLS / "kafka_tls13.pcap", TLS / "kafka_tls13.keys"
    port = _server_port(pcap)
    out = tmp_path / "rows.jsonl"
    assert main(["export", str(pcap), "-p", str(port), "--tls-keylog", str(keys), "-o", str(out)]) == 0
    _, err = capsys.readouterr()
    rows = out.read_text().splitlines()
    expected, _ = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    assert len(rows) == len(list(expected)) > 5
    assert "tls: " in err and " decrypted, 0 not decrypted" in err
    secrets = [line.split()[-1] for line in keys.read_text().splitlines() if line and not line.startswith("#")]
    assert not any(secret in err or secret in out.read_text() for secret in secrets)


def test_a_file_that_is_not_a_key_log_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    from kdissect.cli import main

    bogus = tmp_path / "keys.txt"
    bogus.write_text("this is not a key log\n")
    code = main(["export", str(TLS / "kafka_tls13.pcap"), "--tls-keylog", str(bogus)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("kdissect: error:")


def test_secrets_inside_a_pcapng_need_no_option(tmp_path: Path) -> None:
    """editcap --inject-secrets puts the key log into a Decryption Secrets
    Block: export decrypts with it, as with --tls-keylog."""
    pcap, keys = TLS / "kafka_tls12_gcm.pcap", TLS / "kafka_tls12_gcm.keys"
    port = _server_port(pcap)
    carried = tmp_path / "with-secrets.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{keys}", str(pcap), str(carried)], check=True,
                   capture_output=True)
    told, _ = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    inside, accounting = analyze([str(carried)], (port,))
    rows = lambda exchanges: sorted((e.client, e.correlation_id, e.api_key, e.request_ts, e.response_ts)  # noqa: E731
                                    for e in exchanges)
    expected = rows(told)
    assert rows(inside) == expected and len(expected) > 5
    assert accounting.encrypted_connections == 0


def test_a_connection_without_keys_never_stops_the_others(tmp_path: Path) -> None:
    """The key log without one client random's line: that connection is
    counted (no key), every other one decodes exactly as with the whole log."""
    pcap, keys = TLS / "kafka_tls12_gcm.pcap", TLS / "kafka_tls12_gcm.keys"
    port = _server_port(pcap)
    lines = [line for line in keys.read_text().splitlines() if line and not line.startswith("#")]
    dropped = lines[0].split()[1]
    partial = tmp_path / "partial.keys"
    partial.write_text("\n".join(line for line in lines if line.split()[1] != dropped) + "\n")
    # the client port whose ClientHello carries that random, as tshark reads it
    hellos = subprocess.run(["tshark", "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls", "-Y",
                             "tls.handshake.type == 1", "-T", "fields", "-e", "tcp.srcport", "-e",
                             "tls.handshake.random"], capture_output=True, text=True, timeout=120, check=True).stdout
    without = {f"127.0.0.1:{source}" for source, random in (line.split("\t") for line in hellos.splitlines())
               if random.replace(":", "") == dropped}
    assert len(without) == 1
    rows = lambda exchanges: sorted((e.client, e.correlation_id, e.api_key, e.request_ts, e.response_ts,  # noqa: E731
                                     e.status) for e in exchanges)
    whole, _ = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    whole_rows = rows(whole)
    run = Analysis([str(pcap)], (port,), tls_keylogs=[str(partial)])
    got = rows(run)
    assert got == [row for row in whole_rows if row[0] not in without] and len(got) > 5
    assert len(got) < len(whole_rows)
    tls = run.dissector.tls_stats
    assert (tls.connections, tls.decrypted, tls.undecrypted) == (6, 5, 1)
    assert dict(tls.reasons) == {"no key for this client random": 1} and tls.undecrypted_bytes > 0
    assert run.accounting.encrypted_connections == 1 and run.accounting.balance() == []


def test_malformed_lines_of_a_key_log_are_counted_not_shown(tmp_path: Path, capsys) -> None:
    """A key log with a cut last line (a client killed while writing) still
    decrypts; the skipped line is counted on stderr, its text never shown."""
    from kdissect.cli import main

    pcap, keys = TLS / "kafka_tls13.pcap", TLS / "kafka_tls13.keys"
    cut = "CLIENT_TRAFFIC_SECRET_0 " + "ab" * 32 + " 0123456789abcdef0123"  # a secret of no usable length
    damaged = tmp_path / "damaged.keys"
    damaged.write_text(keys.read_text() + "garbage line\n" + cut + "\n")
    port = _server_port(pcap)
    assert main(["export", str(pcap), "-p", str(port), "--tls-keylog", str(damaged), "-o",
                 str(tmp_path / "rows.jsonl")]) == 0
    _, err = capsys.readouterr()
    assert "tls key log: 2 malformed lines skipped" in err and " 0 not decrypted" in err
    assert "garbage" not in err and "0123456789abcdef0123" not in err
