"""The committed TLS captures (captures/tls/, made by `python -m
tests.test_tls_lab captures/tls`) decrypted with their key logs: every
connection equals tshark's decryption with the same key log."""

from __future__ import annotations

import subprocess
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
