"""Record real Kafka frames for the protocol golden tests.

    python3 -m tests.support.protocol_record [OUT_DIR] [--only WORKLOAD ...]

Starts an in-memory Tansu broker on loopback, captures it with tcpdump while
kafka-python and confluent-kafka produce, consume in a group and commit,
then splits each TCP direction into Kafka frames and writes them to
OUT_DIR/<workload>.jsonl (default tests/fixtures/frames). Each line holds one
frame as hex plus the api key / version / correlation id that tshark's own
Kafka dissector reports for it (the independent expectation the tests use).
The pcap files are kept beside the JSONL for provenance.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import dpkt

from tools.lab.tansu import tansu_broker, tansu_version
from tools.lab.tcpdump import tcpdump

TOPIC = "golden"


def kafka_python_workload(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kdissect-admin")
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])
    except Exception as problem:  # topic may exist
        print("create_topics:", problem, file=sys.stderr)
    admin.list_topics()
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kdissect-producer", acks=1, linger_ms=5)
    for index in range(20):
        producer.send(TOPIC, key=f"k{index}".encode(), value=f"value {index}".encode() * 3,
                      headers=[("h", b"x")], partition=index % 2)
    producer.flush()
    producer.close()
    quiet = KafkaProducer(bootstrap_servers=bootstrap, client_id="kdissect-acks0", acks=0)
    quiet.send(TOPIC, value=b"fire and forget", partition=0)
    quiet.flush()
    time.sleep(0.3)
    quiet.close()
    from kafka import TopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kdissect-reader",
                           auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    reader.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    seen = sum(1 for _message in reader)
    reader.close()
    print(f"kafka-python read {seen} without a group", file=sys.stderr)
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="golden-group",
                             client_id="kdissect-consumer", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=8000)
    seen = 0
    for _message in consumer:
        seen += 1
        if seen >= 21:
            break
    if seen:
        consumer.commit()
    consumer.close()
    print(f"kafka-python consumed {seen} in a group", file=sys.stderr)


def kafka_python_extended_workload(bootstrap: str) -> None:
    """More APIs: idempotent gzip bulk produce, admin calls, offset commit/fetch."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kdissect-admin")
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])
    for step in (lambda: admin.describe_cluster(),
                 lambda: admin.create_topics([NewTopic("scratch", num_partitions=1, replication_factor=1)]),
                 lambda: admin.delete_topics(["scratch"])):
        try:
            step()
        except Exception as problem:  # keep recording what the broker supports
            print("admin step:", type(problem).__name__, problem, file=sys.stderr)
    admin.close()
    bulk = KafkaProducer(bootstrap_servers=bootstrap, client_id="kdissect-bulk", acks="all",
                         linger_ms=50, batch_size=256 * 1024, compression_type="gzip")
    for index in range(2000):
        bulk.send(TOPIC, key=f"b{index}".encode(), value=(f"bulk record {index} ".encode() * 4), partition=index % 2)
    bulk.flush()
    bulk.close()
    committer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kdissect-committer", group_id="golden-offsets",
                              auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=2000)
    committer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    seen = sum(1 for _message in committer)
    try:
        committer.commit()
        committer.committed(TopicPartition(TOPIC, 0))
    except Exception as problem:
        print("commit step:", type(problem).__name__, problem, file=sys.stderr)
    committer.close()
    print(f"kafka-python extended read {seen}", file=sys.stderr)


WORKLOADS = {
    "kafka-python": lambda bootstrap: kafka_python_workload(bootstrap),
    "kafka-python-extended": lambda bootstrap: kafka_python_extended_workload(bootstrap),
    "confluent-kafka": lambda bootstrap: confluent_workload(bootstrap),
}


def confluent_workload(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kdissect-confluent",
                         "linger.ms": 5})
    for index in range(20):
        producer.produce(TOPIC, key=f"c{index}".encode(), value=f"confluent {index}".encode(), partition=index % 2)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "golden-confluent",
                         "client.id": "kdissect-confluent-consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.time() + 20
    while seen < 20 and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            seen += 1
    if seen:
        consumer.commit(asynchronous=False)
    consumer.close()
    print(f"confluent-kafka consumed {seen}", file=sys.stderr)


def _packets(path: Path):
    """(ip packet) for each captured packet of a pcap / pcapng, optionally gzipped."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        magic = handle.read(4)
        handle.seek(0)
        reader = dpkt.pcapng.Reader(handle) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(handle)
        link = reader.datalink()
        for _ts, raw in reader:
            if link == dpkt.pcap.DLT_EN10MB:
                ip = dpkt.ethernet.Ethernet(raw).data
            elif link == dpkt.pcap.DLT_LINUX_SLL:
                ip = dpkt.sll.SLL(raw).data
            elif link == 276:  # Linux cooked v2: 20-byte header
                ip = raw[20:]
                ip = dpkt.ip.IP(ip) if ip[:1] and ip[0] >> 4 == 4 else dpkt.ip6.IP6(ip)
            elif link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
                ip = dpkt.loopback.Loopback(raw).data
            elif link in (dpkt.pcap.DLT_RAW, 101, 228, 229):
                ip = dpkt.ip.IP(raw) if raw[:1] and raw[0] >> 4 == 4 else dpkt.ip6.IP6(raw)
            else:
                continue
            yield ip


def server_ports(pcap: Path) -> set[int]:
    """Ports that received a connection-opening SYN (the broker side)."""
    ports = set()
    for ip in _packets(pcap):
        tcp = getattr(ip, "data", None)
        if isinstance(tcp, dpkt.tcp.TCP) and tcp.flags & dpkt.tcp.TH_SYN and not tcp.flags & dpkt.tcp.TH_ACK:
            ports.add(tcp.dport)
    return ports


def split_frames(pcap: Path) -> list[dict]:
    """Per TCP connection and direction, concatenate payloads in sequence
    order and cut them at the int32 size prefixes (stops a direction at its
    first gap)."""
    streams: dict[tuple, dict[int, bytes]] = {}
    first_seen: dict[tuple, int] = {}
    for ip in _packets(pcap):
        if not isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) or not isinstance(ip.data, dpkt.tcp.TCP):
            continue
        tcp = ip.data
        key = (bytes(ip.src), tcp.sport, bytes(ip.dst), tcp.dport)
        if tcp.flags & dpkt.tcp.TH_SYN:
            first_seen.setdefault(key, (tcp.seq + 1) & 0xFFFFFFFF)
        if tcp.data:
            streams.setdefault(key, {}).setdefault(tcp.seq, bytes(tcp.data))
    frames = []
    for key, pieces in streams.items():
        start = first_seen.get(key, min(pieces))
        data = bytearray()
        expected = start
        for seq in sorted(pieces):
            if seq < expected:
                continue  # retransmission
            if seq != expected:
                break  # gap (or sequence wrap): stop this direction
            data += pieces[seq]
            expected += len(pieces[seq])
        pos = 0
        while pos + 4 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 0 or pos + 4 + size > len(data):
                break
            frames.append({"conn": f"{key[1]}->{key[3]}", "frame": bytes(data[pos + 4:pos + 4 + size])})
            pos += 4 + size
    return frames


def tshark_headers(pcap: Path, port: int) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(connection, correlation id, request|response) -> (api key, version) as tshark reports."""
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "fields", "-E", "separator=\t",
         "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "kafka.request_frame", "-e", "kafka.response_frame",
         "-e", "kafka.api_key", "-e", "kafka.api_version", "-e", "kafka.correlation_id"],
        capture_output=True, text=True, check=True,
    ).stdout
    table = {}
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) < 7 or not cols[4] or not cols[6]:
            continue
        kind = "response" if cols[2] else "request"
        for key, version, corr in zip(cols[4].split(","), cols[5].split(","), cols[6].split(",")):
            if key and version and corr:
                table[(f"{cols[0]}->{cols[1]}", int(corr), kind)] = (int(key), int(version))
    return table


def label_frames(pcap: Path, client: str, port: int) -> list[dict]:
    frames = split_frames(pcap)
    tshark = tshark_headers(pcap, port)
    versions: dict[tuple[str, int], tuple[int, int]] = {}
    rows = []
    for entry in frames:
        frame = entry["frame"]
        conn = entry["conn"]
        src, dst = conn.split("->")
        if len(frame) >= 8 and (conn, struct.unpack_from(">i", frame, 4)[0], "request") in tshark:
            corr = struct.unpack_from(">i", frame, 4)[0]
            api_key, api_version = tshark[(conn, corr, "request")]
            versions[(f"{dst}->{src}", corr)] = (api_key, api_version)
            rows.append({"client": client, "conn": conn, "direction": "request", "api_key": api_key,
                         "api_version": api_version, "correlation_id": corr, "hex": frame.hex()})
    for entry in frames:
        frame = entry["frame"]
        conn = entry["conn"]
        corr = struct.unpack_from(">i", frame, 0)[0] if len(frame) >= 4 else None
        if (conn, corr) in versions:
            api_key, api_version = versions[(conn, corr)]
            rows.append({"client": client, "conn": conn, "direction": "response", "api_key": api_key,
                         "api_version": api_version, "correlation_id": corr, "hex": frame.hex()})
    return rows


def record(out_dir: Path, names: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for client in names:
        workload = WORKLOADS[client]
        pcap = out_dir / f"{client}.pcap"
        with tansu_broker() as broker:
            with tcpdump(pcap, broker.port, settle=0.5):
                workload(broker.bootstrap)
        rows = label_frames(pcap, client, broker.port)
        with open(out_dir / f"{client}.jsonl", "w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
        print(f"{client}: {len(rows)} frames from {pcap} ({tansu_version()})", file=sys.stderr)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="record real Kafka frames for the protocol tests")
    parser.add_argument("out", nargs="?", type=Path,
                        default=Path(__file__).resolve().parents[1] / "fixtures" / "frames")
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="workload(s) to record")
    args = parser.parse_args()
    record(args.out, args.only or list(WORKLOADS))
