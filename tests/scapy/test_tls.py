"""`kdissect.scapy.kafka_packets`: Scapy packets from captures through the
core pipeline, Kafka inside TLS included.

On the committed TLS captures (captures/tls/, with their key logs): every
Kafka PDU tshark finds after decrypting with the same key log is one packet
here (same packet, time, endpoints, correlation id, api key and version);
the bodies the Scapy layers decode equal the core decoder's; without the key
log there are no packets and the core counts the connections as encrypted.
On a plaintext capture the packets are those `sniff(session=TCPSession)`
delivers (Scapy's own reassembly), frame for frame.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("scapy")

from scapy.layers.inet import IP, TCP  # noqa: E402
from scapy.sendrecv import sniff  # noqa: E402
from scapy.sessions import TCPSession  # noqa: E402

from kdissect.conn.pipeline import analyze  # noqa: E402
from kdissect.scapy import KafkaBody, KafkaRequest, KafkaResponse, KafkaSaslToken, bind_kafka, kafka_packets  # noqa: E402
from tests.support.scapy import CAPTURES, core_plain, scapy_plain, uncache  # noqa: E402
from tests.support.tshark import kafka_pdus  # noqa: E402

TLS = CAPTURES / "tls"
# name -> broker (TLS) port, as captures/README.md lists them
TLS_CAPTURES = {"kafka_tls13": 48395, "kafka_tls12_gcm": 44877, "kafka_tls12_cbc": 51721}
PLAINTEXT = CAPTURES / "sasl.pcap"  # raw SASL tokens after SaslHandshake v0, and Kafka frames

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")


def _files(name: str) -> tuple[Path, Path, int]:
    return TLS / f"{name}.pcap", TLS / f"{name}.keys", TLS_CAPTURES[name]


def _ns(packet) -> int:
    return int(packet.time * 1_000_000_000)


@needs_tshark
@pytest.mark.parametrize("name", sorted(TLS_CAPTURES))
def test_tls_packets_are_tsharks_decrypted_pdus(name: str):
    pcap, keys, port = _files(name)
    packets = list(kafka_packets([pcap], ports=[port], tls_keylogs=[keys]))
    pdus = kafka_pdus(TSHARK, pcap, (port,), tls_keylog=keys)
    assert len(pdus) >= 20
    assert len(packets) == len(pdus)
    ours = []
    for packet in packets:
        origin = packet.kafka_origin
        assert origin.tls and origin.complete and origin.capture == pcap.name
        header = packet[KafkaRequest] if origin.from_client else packet[KafkaResponse]
        src, dst = (origin.client, origin.broker) if origin.from_client else (origin.broker, origin.client)
        ours.append((origin.frame_number, _ns(packet), src, dst, origin.from_client, header.correlation_id,
                     header.kafka_api_key(), header.kafka_api_version(), header.length))
    # a response takes the api key and version of the request tshark read with
    # the same correlation id on the same connection (tshark 4.0 does not
    # pair every response: it stops at Metadata v12 requests it cannot read)
    requests = {(p.tcp_stream, p.correlation_id): (p.api_key, p.api_version) for p in pdus if p.is_request}
    theirs = [(p.frame, p.ts, p.src, p.dst, p.is_request, p.correlation_id,
               *((p.api_key, p.api_version) if p.is_request else requests[(p.tcp_stream, p.correlation_id)]),
               p.length) for p in pdus]
    assert ours == theirs


@pytest.mark.parametrize("name", sorted(TLS_CAPTURES))
def test_tls_bodies_equal_core_bodies(name: str):
    """Field by field, the Scapy bodies hold what the core decodes for the
    same frames (the core's kept messages), and re-encode to the frame."""
    pcap, keys, port = _files(name)
    exchanges, _ = analyze([pcap], ports=[port], keep_messages=True, tls_keylogs=[keys])
    core = {}
    for ex in exchanges:
        assert ex.status == "ok", ex.problems
        core[(ex.client, True, ex.correlation_id)] = (ex.request, ex.request_ts)
        core[(ex.client, False, ex.correlation_id)] = (ex.response, ex.response_ts)
    seen = set()
    for packet in kafka_packets([pcap], ports=[port], tls_keylogs=[keys]):
        origin = packet.kafka_origin
        key = (origin.client, origin.from_client, packet.correlation_id)
        message, ts = core[key]
        assert isinstance(packet.payload, KafkaBody), packet.summary()
        assert scapy_plain(packet.payload) == core_plain(message.body), packet.summary()
        assert _ns(packet) == ts
        wire = bytes(packet)
        copy = packet.copy()
        uncache(copy)
        assert bytes(copy) == wire
        seen.add(key)
    assert seen == set(core)


@needs_tshark
@pytest.mark.parametrize("name", sorted(TLS_CAPTURES))
def test_without_the_key_log_nothing_and_counted_encrypted(name: str):
    pcap, keys, port = _files(name)
    hellos = subprocess.run([TSHARK, "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls", "-Y",
                             "tls.handshake.type == 1", "-T", "fields", "-e", "tcp.stream"],
                            capture_output=True, text=True, timeout=120, check=True).stdout.split()
    packets = kafka_packets([pcap], ports=[port])
    assert list(packets) == []
    assert len(set(hellos)) >= 3
    assert packets.accounting.tls_connections == len(set(hellos))
    assert packets.accounting.encrypted_connections == len(set(hellos))
    assert packets.accounting.kafka_connections == 0


@pytest.mark.parametrize("name", ["kafka_tls13"])
def test_secrets_in_a_pcapng_need_no_option(name: str, tmp_path: Path):
    """editcap --inject-secrets: the packets come out with no key log given."""
    if shutil.which("editcap") is None:
        pytest.skip("editcap is not installed")
    pcap, keys, port = _files(name)
    pcapng = tmp_path / f"{name}.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{keys}", str(pcap), str(pcapng)], check=True, timeout=120)
    with_file = [bytes(p) for p in kafka_packets([pcap], ports=[port], tls_keylogs=[keys])]
    inside = [bytes(p) for p in kafka_packets([pcapng], ports=[port])]
    assert inside and inside == with_file


def test_no_secret_in_what_is_shown():
    """No key log secret reaches the summary lines, a packet's repr or show()."""
    pcap, keys, port = _files("kafka_tls12_gcm")
    secrets = [line.split()[-1].lower() for line in keys.read_text().splitlines() if line and line[0] != "#"]
    assert secrets
    packets = kafka_packets([pcap], ports=[port], tls_keylogs=[keys])
    shown = [repr(p) + p.show(dump=True) + repr(p.kafka_origin) for p in packets]
    text = ("\n".join(shown) + "\n".join(packets.summary_lines())).lower()
    assert "6 decrypted" in text
    assert not any(secret in text for secret in secrets)
    assert not re.search(r"[0-9a-f]{64}", "\n".join(packets.summary_lines()))


def _sniffed(path: Path, port: int) -> list:
    """(client, broker, layer) of every Kafka layer Scapy's TCPSession delivers."""
    bind_kafka(port)
    out = []
    for packet in sniff(offline=str(path), session=TCPSession, quiet=True):
        if TCP not in packet:
            continue
        src = f"{packet[IP].src}:{packet[TCP].sport}"
        dst = f"{packet[IP].dst}:{packet[TCP].dport}"
        layer = packet[TCP].payload
        while layer:
            if isinstance(layer, (KafkaRequest, KafkaResponse, KafkaSaslToken)):
                from_client = packet[TCP].dport == port
                out.append((src if from_client else dst, dst if from_client else src, from_client, packet.time,
                            layer))
            layer = layer.payload
    return out


def _frame(layer) -> bytes:
    return bytes(layer)[:4 + layer.length]


def test_plaintext_packets_equal_tcpsession():
    port = 9092
    sniffed = _sniffed(PLAINTEXT, port)
    packets = kafka_packets([PLAINTEXT], ports=[port])
    ours = list(packets)
    assert len(ours) == len(sniffed) >= 20
    kinds = Counter()
    for packet, (client, broker, from_client, time, layer) in zip(ours, sniffed):
        origin = packet.kafka_origin
        assert (origin.client, origin.broker, origin.from_client) == (client, broker, from_client)
        assert not origin.tls and origin.complete
        assert type(packet) is type(layer)
        assert bytes(packet) == _frame(layer)
        assert packet.time == time
        assert packet.summary() == layer.__class__(_frame(layer)).summary() or isinstance(layer, KafkaResponse)
        if isinstance(layer, KafkaResponse):
            assert (packet.api_key, packet.api_version) == (layer.api_key, layer.api_version)
        if not isinstance(layer, KafkaSaslToken):
            assert type(packet.payload) is type(layer.payload)
            if isinstance(layer.payload, KafkaBody):
                assert scapy_plain(packet.payload) == scapy_plain(layer.payload)
        kinds[type(packet).__name__] += 1
    assert kinds["KafkaSaslToken"] >= 2 and kinds["KafkaRequest"] and kinds["KafkaResponse"]
    assert packets.accounting.raw_sasl_frames == kinds["KafkaSaslToken"]
