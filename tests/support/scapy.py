"""Helpers for the Scapy-layer tests: captures and their ports, the frames the
Scapy path sees, the frames `kdissect export` sees, plain values of decoded
messages, and a blocking Kafka request/response over a socket."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
CAPTURES = REPO / "captures"
FIXTURES = REPO / "tests" / "fixtures" / "frames"
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".pcap.gz", ".pcapng.gz")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(CAPTURE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def capture_port(path: Path) -> int:
    """Broker port of a capture: its manifest's "port", else its fixture
    JSONL's connection labels, else 9092."""
    manifest = path.with_name(_stem(path) + ".manifest.json")
    if manifest.exists():
        port = json.loads(manifest.read_text()).get("port")
        if isinstance(port, int):
            return port
    labels = path.with_name(_stem(path) + ".jsonl")
    if labels.exists():
        first = json.loads(labels.read_text().splitlines()[0])
        left, right = first["conn"].split("->")
        return int(right if first["direction"] == "request" else left)
    return 9092


def bundled_captures() -> list[Path]:
    """Every capture file in captures/ (whatever the lab has recorded so far)."""
    return sorted(p for p in CAPTURES.iterdir() if p.name.endswith(CAPTURE_SUFFIXES))


def fixture_captures() -> list[Path]:
    return sorted(FIXTURES.glob("*.pcap"))


def _endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def scapy_frames(path: Path, port: int) -> list[dict]:
    """Kafka frames Scapy's TCPSession delivers with the kdissect layers."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.sendrecv import sniff
    from scapy.sessions import TCPSession

    from kdissect.scapy import KafkaBody, KafkaRequest, KafkaResponse, bind_kafka

    bind_kafka(port)
    frames = []
    for packet in sniff(offline=str(path), session=TCPSession, quiet=True):
        if TCP not in packet:
            continue
        ip = packet[IP] if IP in packet else packet[IPv6]
        src = _endpoint(ip.src, packet[TCP].sport)
        dst = _endpoint(ip.dst, packet[TCP].dport)
        layer = packet[TCP].payload
        while layer:
            if isinstance(layer, (KafkaRequest, KafkaResponse)):
                request = isinstance(layer, KafkaRequest)
                frames.append({
                    "direction": "request" if request else "response",
                    "client": src if request else dst,
                    "broker": dst if request else src,
                    "correlation_id": layer.correlation_id,
                    "api_key": layer.kafka_api_key(),
                    "api_version": layer.kafka_api_version(),
                    "decoded": isinstance(layer.payload, KafkaBody),
                    "layer": layer,
                })
            layer = layer.payload
    return frames


def export_rows(path: Path, port: int) -> list[dict]:
    """Rows of `kdissect export` (the CLI, JSONL) for one capture."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.jsonl"
        subprocess.run(
            [sys.executable, "-m", "kdissect", "export", str(path), "-p", str(port), "-o", str(out), "-q"],
            cwd=REPO, check=True, capture_output=True, timeout=300,
        )
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def export_frames(rows: list[dict]) -> Counter:
    """(direction, client, broker, correlation id, api key, api version) per frame."""
    seen: Counter = Counter()
    for row in rows:
        key = (row["client"], row["broker"], row["correlation_id"], row["api_key"], row["api_version"])
        if row["request_frame"] is not None:
            seen[("request",) + key] += 1
        if row["response_frame"] is not None:
            seen[("response",) + key] += 1
    return seen


def frame_keys(frames: list[dict]) -> Counter:
    return Counter((f["direction"], f["client"], f["broker"], f["correlation_id"], f["api_key"],
                    f["api_version"]) for f in frames)


def uncache(packet: Any) -> None:
    """Drop Scapy's cached raw bytes everywhere so bytes() re-encodes every field."""
    layer = packet
    while layer:
        layer.raw_packet_cache = None
        layer.raw_packet_cache_fields = None
        for f in layer.packetfields:
            value = layer.getfieldval(f.name)
            for item in value if isinstance(value, list) else [value]:
                if item is not None:
                    uncache(item)
        layer = layer.payload


def core_plain(value: Any) -> Any:
    """A core-decoded body as plain dicts/lists (embedded protocols as bytes)."""
    from kdissect.protocol.consumer import encode_embedded
    from kdissect.protocol.model import ConsumerProtocolData, Struct

    if isinstance(value, Struct):
        return {name: core_plain(getattr(value, name)) for name in value._fields}
    if isinstance(value, ConsumerProtocolData):
        return value.raw if value.raw is not None else encode_embedded(value)
    if isinstance(value, list):
        return [core_plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return value
    return value


def scapy_plain(value: Any) -> Any:
    """A Scapy body as plain dicts/lists, without the unknown tagged fields."""
    from kdissect.scapy import KafkaStruct

    if isinstance(value, KafkaStruct):
        return {k: scapy_plain(v) for k, v in value.to_dict().items() if k != "unknown_tagged_fields"}
    if isinstance(value, dict):
        return {k: scapy_plain(v) for k, v in value.items() if k != "unknown_tagged_fields"}
    if isinstance(value, list):
        return [scapy_plain(v) for v in value]
    return value


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def exchange(sock: socket.socket, frame: bytes) -> bytes:
    """Send one request frame (size prefix included); return the response frame
    (size prefix included)."""
    sock.sendall(frame)
    head = recv_exact(sock, 4)
    (size,) = struct.unpack(">i", head)
    return head + recv_exact(sock, size)
