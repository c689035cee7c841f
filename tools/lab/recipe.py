#!/usr/bin/env python3
"""The capture lab's recipe: re-records the Kafka captures in captures/.

Every workload runs real clients (kafka-python, confluent-kafka/librdkafka,
the Java client) against a fresh broker on loopback (Tansu, or Apache Kafka
4.x / 3.9) while tcpdump records `tcp port PORT` into
`captures/<name>.pcap`. Each workload also writes
`captures/<name>.manifest.json`: what the clients produced and what the
consumers received, taken from the clients' own APIs (never from the
capture), so tests can check a decoder against an independent source.

    python3 -m tools.lab record [--only NAME ...]   # re-record (root: tcpdump)
    python3 -m tools.lab list                       # workload names, brokers and ports
    python3 -m tools.lab table                      # APIs per capture, via tshark
    python3 -m tools.lab readme                     # refresh the tables in captures/README.md
    python3 -m tools.lab bulk OUT.pcap [--mb 60]    # benchmark capture, big batches
    python3 -m tools.lab chatty OUT.pcap [--exchanges 30300]
    python3 -m tools.lab records OUT.pcap [--exchanges 20000]  # mid-size batches produced, then fetched
    python3 -m tools.lab kafka start|status|stop    # an Apache Kafka node for a person to use

Run from the repository root with the project's Python (.venv/bin/python).
record/bulk/chatty/records re-run themselves in a private network namespace when
`unshare --net` works, so nobody else's loopback traffic reaches a capture.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from tools.lab import kafka_cli
from tools.lab.apache_kafka import kafka_broker
from tools.lab.clients import STANDARD_PORT, Manifest, client_versions, kp_create_topics
from tools.lab.net import NETNS_ENV, bring_loopback_up, run_in_private_network
from tools.lab.tansu import tansu_broker
from tools.lab.tcpdump import tcpdump
from tools.lab.workloads import WORKLOADS, Workload

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "captures"

log = logging.getLogger("lab")


@contextlib.contextmanager
def workload_broker(workload: Workload) -> Iterator[Any]:
    """A fresh broker of the workload's kind on its host and port."""
    if workload.broker == "tansu":
        with tansu_broker(workload.port, host=workload.host, extra_args=workload.broker_args) as broker:
            yield broker
    else:
        generation = workload.broker.removeprefix("kafka")
        with kafka_broker(generation, workload.port, host=workload.host, **workload.kafka_options) as broker:
            yield broker


# ------------------------------------------------------------------ record --

def record(workload: Workload, out_dir: Path) -> Path:
    out_dir = out_dir / workload.directory
    out_dir.mkdir(parents=True, exist_ok=True)
    pcap = out_dir / f"{workload.name}.pcap"
    manifest = Manifest(workload.name, workload.port, workload.description)
    manifest.data["recorded_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest.data["clients"] = client_versions()
    manifest.data["command"] = f"python3 -m tools.lab record --only {workload.name}"
    started = time.monotonic()
    manifest.data["broker_address"] = workload.host
    if workload.broker == "tansu":
        manifest.data["broker_args"] = list(workload.broker_args)
    else:
        manifest.data["broker_options"] = {key: list(value) if isinstance(value, tuple) else value
                                           for key, value in workload.kafka_options.items()}
    with workload_broker(workload) as broker:
        manifest.data["broker"] = broker.name
        with tcpdump(pcap, workload.port):
            workload.run(manifest, broker)
    odd = oversized_api_versions_requests(pcap, workload.port)
    if odd:
        manifest.note("ApiVersions requests longer than their fields (per tshark: header, client software name "
                      "and version): " + ", ".join(f"frame {frame} v{version} (+{extra} bytes)"
                                                   for frame, version, extra in odd))
    manifest.write(out_dir / f"{workload.name}.manifest.json")
    log.info("%s: %d bytes, %d produced, %d consumed, %.1fs", pcap.name, pcap.stat().st_size,
             len(manifest.data["produced"]), len(manifest.data["consumed"]), time.monotonic() - started)
    return pcap


def prepare(workloads: list[Workload]) -> None:
    """Fetch the jars and compile the Java client the workloads need, while
    the network is there (recording runs in a namespace without it)."""
    from tools.lab.apache_kafka import kafka_jars
    from tools.lab.java_client import compiled_classes

    from tools.lab.workloads import JAVA_CLIENT_VERSION, KAFKA4

    generations = {wl.broker.removeprefix("kafka") for wl in workloads if wl.broker != "tansu"}
    for generation in sorted(generations):
        kafka_jars(generation)
    if generations:  # the Java client workloads and the quota helper
        for version in sorted({JAVA_CLIENT_VERSION, KAFKA4}):
            compiled_classes(version)


def oversized_api_versions_requests(pcap: Path, port: int) -> list[tuple[int, int, int]]:
    """(frame, version, extra bytes) of each ApiVersions request whose size
    field exceeds what tshark's decoded fields account for (v0-v2: header
    only; v3+: flexible header, two compact strings, tagged fields)."""
    def uvarint_size(n: int) -> int:
        size = 1
        while n >= 0x80:
            n >>= 7
            size += 1
        return size

    cmd = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", f"kafka.api_key == 18 && tcp.dstport == {port}",
           "-T", "fields", "-e", "frame.number", "-e", "kafka.api_version", "-e", "kafka.len", "-e", "kafka.client_id",
           "-e", "kafka.client_software_name", "-e", "kafka.client_software_version", "-e", "tcp.payload"]
    # JSON, not tab-separated fields: a client id may hold tabs and newlines
    cmd[cmd.index("fields")] = "json"
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    found = []
    for packet in json.loads(out or "[]"):
        layers = packet["_source"]["layers"]
        frame, version, length, client_id, name, software, payload = (
            (layers.get(field) or [""])[0] for field in cmd[cmd.index("-e") + 1::2])
        # the client id's length from the header itself when the segment
        # starts with the request (tshark cuts a client id at a NUL)
        head = bytes.fromhex(payload.replace(":", ""))
        id_length = int.from_bytes(head[12:14], "big", signed=True) if len(head) >= 14 else -1
        expected = 2 + 2 + 4 + 2 + (id_length if id_length >= 0 else len(client_id.encode()))
        if int(version) >= 3:
            name_b, software_b = name.encode(), software.encode()
            expected += (1 + uvarint_size(len(name_b) + 1) + len(name_b)
                         + uvarint_size(len(software_b) + 1) + len(software_b) + 1)
        if int(length) > expected:
            found.append((int(frame), int(version), int(length) - expected))
    return found


# -------------------------------------------------------------- benchmarks --

def consume(consumer: Any, topic: str, count: int, seconds: float) -> int:
    """Poll `count` records of `topic` (or until `seconds` pass), commit and
    close; how many records arrived."""
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + seconds
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


def bench_bulk(out: Path, megabytes: int, port: int) -> None:
    """Large produce batches then fetches of them: about `megabytes` on the wire."""
    topic = "bulk"
    half = megabytes * (1 << 20) // 2
    value_size = 64 * 1024
    count = max(1, half // value_size)
    rng = random.Random(2024)
    with tansu_broker(port) as broker:
        kp_create_topics(broker.bootstrap, {topic: 2})
        with tcpdump(out, port):
            from confluent_kafka import Consumer, Producer

            producer = Producer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-bulk", "acks": "1",
                "linger.ms": 20, "batch.size": 1_000_000, "message.max.bytes": 2_000_000,
                "enable.idempotence": False, "log.connection.close": False,
            })
            for i in range(count):
                while True:
                    try:
                        producer.produce(topic, key=b"bulk-%06d" % i, value=rng.randbytes(value_size),
                                         partition=i % 2)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            producer.flush(60)
            consumer = Consumer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-bulk-consumer",
                "group.id": "bench-bulk", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 4_000_000,
                "session.timeout.ms": 6000, "max.poll.interval.ms": 6000,
            })
            got = consume(consumer, topic, count, seconds=120)
    print(f"{out}: {out.stat().st_size} bytes, {count} records of {value_size} B produced, {got} fetched")


def bench_chatty(out: Path, exchanges: int, port: int) -> None:
    """Many small pipelined Produce requests: one record each, many in flight."""
    topic = "chatty"
    with tansu_broker(port) as broker:
        kp_create_topics(broker.bootstrap, {topic: 1})
        with tcpdump(out, port):
            from confluent_kafka import Producer

            producer = Producer({
                "bootstrap.servers": broker.bootstrap, "client.id": "bench-chatty", "acks": "1",
                "linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 8,
                "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                "log.connection.close": False,
            })
            for i in range(exchanges):
                while True:
                    try:
                        producer.produce(topic, key=b"c%07d" % i, value=b"tick %d" % i, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            producer.flush(120)
    print(f"{out}: {out.stat().st_size} bytes, {exchanges} records produced one per request")


RECORD_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def bench_records(out: Path, exchanges: int, port: int) -> None:
    """Record-heavy traffic: about `exchanges` mid-size Produce and Fetch
    exchanges whose batches carry records (half produce, each a batch of 10
    records of about 250 bytes; half fetch, each bringing about one batch
    back), about 2.8 KB per exchange on the wire. One producer and one
    consumer per codec (none, gzip, snappy, lz4, zstd), each on its own topic
    and its own connection to the broker, so every codec's batches are
    counted and decompressed as users' traffic makes them."""
    batches = max(len(RECORD_CODECS), exchanges // 2)
    per_batch = 10
    rng = random.Random(2025)
    topics = {codec: f"records-{codec}" for codec in RECORD_CODECS}
    total_produced = total_got = 0
    with tansu_broker(port) as broker:
        kp_create_topics(broker.bootstrap, {topic: 1 for topic in topics.values()})
        with tcpdump(out, port):
            from confluent_kafka import Consumer, Producer

            for n, codec in enumerate(RECORD_CODECS):
                topic = topics[codec]
                producer = Producer({
                    "bootstrap.servers": broker.bootstrap, "client.id": f"bench-records-{codec}", "acks": "1",
                    "linger.ms": 5, "batch.num.messages": per_batch, "max.in.flight.requests.per.connection": 1,
                    "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                    "compression.type": codec, "log.connection.close": False,
                })
                count = (batches // len(RECORD_CODECS) + (n < batches % len(RECORD_CODECS))) * per_batch
                for i in range(count):
                    # half random bytes, half words from a small vocabulary: compression has
                    # work to do and the capture keeps about the size of the uncompressed one
                    value = rng.randbytes(120 + rng.randrange(60)) + b" ".join(
                        b"w%d" % rng.randrange(400) for _ in range(25 + rng.randrange(10)))
                    while True:
                        try:
                            producer.produce(topic, key=b"r%07d" % i, value=value, partition=0)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    producer.poll(0)
                producer.flush(300)
                consumer = Consumer({
                    "bootstrap.servers": broker.bootstrap, "client.id": f"bench-records-consumer-{codec}",
                    "group.id": f"bench-records-{codec}", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    # about one batch per fetch: mid-size fetches, many of them
                    "fetch.max.bytes": 1000, "max.partition.fetch.bytes": 1000, "message.max.bytes": 1000,
                    "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 64, "session.timeout.ms": 6000,
                    "max.poll.interval.ms": 600000, "log.connection.close": False,
                })
                got = consume(consumer, topic, count, seconds=600)
                total_produced += count
                total_got += got
    print(f"{out}: {out.stat().st_size} bytes, {total_produced} records produced in batches of {per_batch} "
          f"over {len(RECORD_CODECS)} codecs, {total_got} fetched")


# ------------------------------------------------------------- tshark table --

def tshark_pdus(pcap: Path, port: int) -> list[tuple[int, int | None, int | None, int, bool]]:
    """(frame, api_key, api_version, correlation_id, is_request) per Kafka PDU, per tshark.

    tshark leaves api_version empty on responses (and api_key when it could not
    pair them); a frame holds PDUs of one direction only, so a frame with
    versions holds requests and one without holds responses."""
    cmd = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", "kafka",
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
           "-e", "frame.number", "-e", "kafka.api_key", "-e", "kafka.api_version",
           "-e", "kafka.correlation_id"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows: list[tuple[int, int | None, int | None, int, bool]] = []
    for line in out.splitlines():
        frame, keys, versions, corrs = (line.split("\t") + [""] * 4)[:4]
        corr_l = [int(c) for c in corrs.split(";") if c]
        if versions:
            for key, version, corr in zip(keys.split(";"), versions.split(";"), corr_l):
                rows.append((int(frame), int(key), int(version), corr, True))
        else:
            keys_l = [int(k) for k in keys.split(";") if k]
            for i, corr in enumerate(corr_l):
                key = keys_l[i] if len(keys_l) == len(corr_l) else None
                rows.append((int(frame), key, None, corr, False))
    return rows


def api_table(out_dir: Path) -> str:
    from collections import Counter

    # Kafka's API names, as kdissect generates them from the spec (an api key
    # the spec does not have, such as raw SASL bytes read as a frame: "api")
    from kdissect.protocol._generated.index import APIS

    names = {key: entry[0] for key, entry in APIS.items()}
    lines = ["| capture | port | APIs (version: requests) | requests | responses |", "| --- | --- | --- | --- | --- |"]
    for wl in WORKLOADS:
        pcap = out_dir / wl.directory / f"{wl.name}.pcap"
        if not pcap.exists():
            continue
        rows = tshark_pdus(pcap, wl.port)
        reqs = Counter((k, v) for _, k, v, _, is_req in rows if is_req)
        resps = sum(1 for *_, is_req in rows if not is_req)
        apis = ", ".join(f"{names.get(k, 'api')}({k}) v{v}: {n}" for (k, v), n in sorted(reqs.items()))
        lines.append(f"| `{pcap.relative_to(out_dir)}` | {wl.port} | {apis} | {sum(reqs.values())} | {resps} |")
    return "\n".join(lines)


def provenance_table(out_dir: Path) -> str:
    lines = ["| capture | broker address | recorded (UTC) | broker | clients | workload | produced | consumed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for wl in WORKLOADS:
        path = out_dir / wl.directory / f"{wl.name}.manifest.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        used = sorted({r["client"] for r in data["produced"] + data["consumed"]}
                      | {o["client"] for o in data["operations"]})
        versions = data["clients"]
        names = []
        for client in used:
            if client == "confluent-kafka":
                names.append(f"confluent-kafka {versions['confluent-kafka']} (librdkafka {versions['librdkafka']})")
            elif client in versions:
                names.append(f"{client} {versions[client]}")
            else:
                names.append(client)
        address = f"[{wl.host}]:{wl.port}" if ":" in wl.host else f"{wl.host}:{wl.port}"
        name = f"{wl.directory}/{wl.name}.pcap" if wl.directory else f"{wl.name}.pcap"
        lines.append(f"| `{name}` | {address} | {data['recorded_utc']} | {data['broker']} | "
                     f"{'; '.join(names)} | {wl.description} | {len(data['produced'])} | {len(data['consumed'])} |")
    return "\n".join(lines)


TABLES_BEGIN = "<!-- lab:tables begin (python3 -m tools.lab readme) -->"
TABLES_END = "<!-- lab:tables end -->"


def update_readme(out_dir: Path) -> None:
    """Rewrite the generated tables between the markers in README.md."""
    readme = out_dir / "README.md"
    text = readme.read_text()
    start, end = text.index(TABLES_BEGIN) + len(TABLES_BEGIN), text.index(TABLES_END)
    body = ("\n\n### Provenance\n\n" + provenance_table(out_dir)
            + "\n\n### Kafka APIs per capture (computed with tshark 4.0: `Name(key) vVERSION: requests`)\n\n"
            + api_table(out_dir) + "\n\n")
    from kdissect.shared.atomic import write_atomically

    write_atomically(readme, text[:start] + body + text[end:])  # a tracked file: never half written


# --------------------------------------------------------------------- cli --

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_rec = sub.add_parser("record", help="re-record the committed captures and manifests")
    p_rec.add_argument("--only", nargs="+", metavar="NAME", help="only these workloads")
    p_rec.add_argument("--out", type=Path, default=CAPTURES, help="output directory (default: captures/)")
    sub.add_parser("list", help="workload names, ports, descriptions")
    sub.add_parser("readme", help="regenerate the tables in captures/README.md (needs tshark)")
    p_tab = sub.add_parser("table", help="markdown table of APIs per capture, computed with tshark")
    p_tab.add_argument("--out", type=Path, default=CAPTURES)
    p_bulk = sub.add_parser("bulk", help="benchmark capture: large produce batches and fetches")
    p_bulk.add_argument("output", type=Path)
    p_bulk.add_argument("--mb", type=int, default=60)
    p_bulk.add_argument("--port", type=int, default=STANDARD_PORT)
    p_chat = sub.add_parser("chatty", help="benchmark capture: many small pipelined produce exchanges")
    p_chat.add_argument("output", type=Path)
    p_chat.add_argument("--exchanges", type=int, default=30300)
    p_chat.add_argument("--port", type=int, default=STANDARD_PORT)
    p_records = sub.add_parser("records", help="benchmark capture: mid-size produce and fetch exchanges "
                                               "carrying record batches")
    p_records.add_argument("output", type=Path)
    p_records.add_argument("--exchanges", type=int, default=20000)
    p_records.add_argument("--port", type=int, default=STANDARD_PORT)
    kafka_cli.add_parser(sub)
    for p in (p_rec, p_bulk, p_chat, p_records):
        p.add_argument("--shared-network", action="store_true",
                       help="do not isolate in a private network namespace (default: isolate when possible)")
    args = parser.parse_args(argv)
    if args.cmd == "record" and os.environ.get(NETNS_ENV) != "1":
        # the private network namespace has no route to Maven Central
        prepare([wl for wl in WORKLOADS if not args.only or wl.name in args.only])
    if args.cmd in ("record", "bulk", "chatty", "records") and not args.shared_network:
        # Own loopback: nobody else's broker on 9092 can leak into a capture.
        status = run_in_private_network(["-m", "tools.lab", *(sys.argv[1:] if argv is None else argv)], cwd=REPO)
        if status is not None:
            return status
        if os.environ.get(NETNS_ENV) == "1":
            bring_loopback_up()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("kafka", "confluent_kafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)

    if args.cmd == "kafka":
        return kafka_cli.run(args)
    if args.cmd == "list":
        for wl in WORKLOADS:
            print(f"{wl.name:24} {wl.broker:6} {wl.host:>9} port {wl.port:5}  {wl.description}")
    elif args.cmd == "record":
        wanted = set(args.only or [wl.name for wl in WORKLOADS])
        unknown = wanted - {wl.name for wl in WORKLOADS}
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        chosen = [wl for wl in WORKLOADS if wl.name in wanted]
        if len(chosen) == 1:
            record(chosen[0], args.out)
        else:
            # One process per workload: a client that failed and kept retrying
            # in a background thread cannot reach the next workload's broker.
            for wl in chosen:
                cmd = [sys.executable, "-m", "tools.lab", "record", "--only", wl.name,
                       "--out", str(args.out.resolve()), "--shared-network"]
                if subprocess.run(cmd, cwd=REPO).returncode != 0:
                    log.error("%s failed", wl.name)
                    return 1
    elif args.cmd == "readme":
        update_readme(CAPTURES)
    elif args.cmd == "table":
        print(api_table(args.out))
    elif args.cmd == "bulk":
        bench_bulk(args.output, args.mb, args.port)
    elif args.cmd == "chatty":
        bench_chatty(args.output, args.exchanges, args.port)
    elif args.cmd == "records":
        bench_records(args.output, args.exchanges, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
