"""The committed TLS captures (captures/tls/, made by `python -m
tests.test_tls_lab captures/tls`) decrypted with their key logs: every
connection equals tshark's decryption with the same key log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.tls import TlsStats, read_keylog_file
from tests.test_tls_lab import decrypt_capture, tshark_follow

CAPTURES = Path(__file__).resolve().parent.parent / "captures" / "tls"
NAMES = {"kafka_tls13": "TLS_AES_128_GCM_SHA256", "kafka_tls12_gcm": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
         "kafka_tls12_cbc": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"}


def server_port(pcap: Path) -> int:
    """The port the first SYN went to (tshark reads it)."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                          "-T", "fields", "-e", "tcp.dstport", "-c", "1"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return int(out.split()[0])


@pytest.mark.parametrize("name", sorted(NAMES))
def test_committed_capture_decrypts_like_tshark(name: str) -> None:
    pcap, keys = CAPTURES / f"{name}.pcap", CAPTURES / f"{name}.keys"
    port = server_port(pcap)
    ours = decrypt_capture(pcap, read_keylog_file(keys), port)
    theirs = tshark_follow(pcap, keys, port)
    assert set(ours) == set(theirs) and len(ours) >= 3
    total = TlsStats()
    for client_port, (client, server) in theirs.items():
        assert (bytes(ours[client_port].plaintext[0]), bytes(ours[client_port].plaintext[1])) == (client, server)
        total.add(ours[client_port].stats)
    assert total.decrypted == total.connections and dict(total.suites) == {NAMES[name]: total.connections}
    assert b"tls-producer" in b"".join(bytes(r.plaintext[0]) for r in ours.values())  # Kafka client ids inside


def _encrypted_record_bytes(pcap: Path, port: int) -> int:
    """tshark's TLS 1.2 records after each direction's ChangeCipherSpec
    (application data, the encrypted Finished, encrypted alerts), headers
    included: what stays encrypted without keys."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls", "-Y", "tls",
                          "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tls.record.content_type",
                          "-e", "tls.record.length"], capture_output=True, text=True, timeout=120, check=True).stdout
    encrypting: set[tuple[str, str]] = set()
    total = 0
    for line in out.splitlines():
        stream, source, types, lengths = line.split("\t")
        for content_type, length in zip(types.split(","), lengths.split(",")):
            if (stream, source) in encrypting:
                total += 5 + int(length)
            if content_type == "20":
                encrypting.add((stream, source))
    return total


@pytest.mark.parametrize("name", ["kafka_tls12_gcm", "kafka_tls12_cbc"])
def test_without_keys_stats_and_report_say_what_stayed_encrypted_and_why(name: str, tmp_path: Path) -> None:
    import json

    from kdissect import cli

    pcap = CAPTURES / f"{name}.pcap"
    expected = _encrypted_record_bytes(pcap, server_port(pcap))
    connections = len({line for line in subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-e", "tcp.stream"], capture_output=True, text=True,
        check=True).stdout.split()})
    out = subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", str(pcap)], capture_output=True,
                         text=True, check=True).stdout
    tls = json.loads(out)["tls"]
    assert (tls["connections"], tls["undecrypted"], tls["undecrypted_bytes"]) == (connections, connections, expected)
    assert tls["reasons"] == {"no key for this client random": connections}
    page = tmp_path / "report.html"
    assert cli.main(["report", str(pcap), "-o", str(page), "-q"]) == 0
    row = page.read_text().split("TLS connections not decrypted", 1)[1].split("</tr>", 1)[0]
    assert f'data-value="{expected}"' in row and f"{connections} no key for this client random" in row
