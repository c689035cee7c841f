"""Apache Kafka's own TLS listener (Java's JSSE) recorded with the clients'
key logs: the captures in captures/tls/ named `apache_*`.

One Apache Kafka 4.4.0 node with an SSL and a SASL_SSL listener (PEM
keystore, a throwaway EC P-256 certificate made for the run, see
`tools.lab.tls`); kafka-python or aiokafka clients whose `ssl.SSLContext`
writes an NSS key log; tcpdump captures only the listener port of each
capture on `lo`.

    .venv/bin/python -m tools.lab.kafka_tls captures/tls [--only NAME ...]

`--only` records just the named captures and leaves the others untouched.

- `apache_tls13`: SSL listener, TLS 1.3 (JSSE's choice of suite);
- `apache_tls12_cbc`: SSL listener, the client capped at TLS 1.2 offering one
  CBC suite (JSSE has no encrypt-then-MAC: MAC-then-encrypt);
- `apache_sasl_ssl`: SASL_SSL listener, a producer logging in with
  SCRAM-SHA-512 and a fetcher logging in with PLAIN;
- `apache_tls_aiokafka`: SSL listener, TLS 1.3 with default suites, aiokafka's
  AIOKafkaProducer and AIOKafkaConsumer instead of kafka-python's.

Each client produces 3 records then fetches them back (assign + seek), so
each capture holds a few produce/fetch exchanges on 4 connections (producer
and fetcher, each with a bootstrap connection). The topic is made through
the broker's internal PLAINTEXT listener, which is not captured. The user
and password are lab-only values (`USER`, `PASSWORD`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.lab.apache_kafka import kafka_broker
from tools.lab.clients import kp_create_topics
from tools.lab.net import NETNS_ENV, bring_loopback_up, run_in_private_network
from tools.lab.tcpdump import tcpdump

USER, PASSWORD = "tls-lab-user", "tls-lab-Secret-6f1c"
RECORDS = 3
RECORD_SIZE = 1500


@dataclass(frozen=True)
class TlsCapture:
    name: str
    listener: str  # SSL or SASL_SSL
    tls12_ciphers: str = ""  # OpenSSL cipher string: caps the client at TLS 1.2 with these suites
    mechanisms: tuple[str, str] = ("", "")  # SASL mechanism of the producer, of the fetcher
    client: str = "kafka-python"  # or "aiokafka"


CAPTURES = [
    TlsCapture("apache_tls13", "SSL"),
    TlsCapture("apache_tls12_cbc", "SSL", tls12_ciphers="ECDHE-ECDSA-AES128-SHA256"),
    TlsCapture("apache_sasl_ssl", "SASL_SSL", mechanisms=("SCRAM-SHA-512", "PLAIN")),
    TlsCapture("apache_tls_aiokafka", "SSL", client="aiokafka"),
]


def record_value(i: int) -> bytes:
    return bytes([65 + i]) * RECORD_SIZE


def client_context(keylog: Path, tls12_ciphers: str, ca: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(ca))
    context.keylog_filename = str(keylog)
    if tls12_ciphers:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(tls12_ciphers)
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


def run_clients(broker: Any, capture: TlsCapture, topic: str, keylog: Path) -> dict[str, Any]:
    """A producer then a fetcher on the capture's listener, with the capture's client; what they did."""
    if capture.client == "aiokafka":
        return asyncio.run(run_aiokafka_clients(broker, capture, topic, keylog))
    return run_kafka_python_clients(broker, capture, topic, keylog)


async def run_aiokafka_clients(broker: Any, capture: TlsCapture, topic: str, keylog: Path) -> dict[str, Any]:
    """aiokafka's producer then consumer (assign + seek, no group) on the SSL
    listener; fails unless the consumer reads back every record, offset and
    value, that the producer sent."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    if capture.listener != "SSL" or capture.tls12_ciphers or any(capture.mechanisms):
        raise ValueError(f"{capture.name}: the aiokafka recorder does only SSL with default suites")
    common: dict[str, Any] = {"bootstrap_servers": broker.bootstrap_for(capture.listener),
                              "security_protocol": "SSL",
                              "ssl_context": client_context(keylog, "", broker.certificate.cert)}
    producer = AIOKafkaProducer(client_id=f"{capture.name}-producer", linger_ms=0, **common)
    await producer.start()
    try:
        sent = {}
        for i in range(RECORDS):
            metadata = await producer.send_and_wait(topic, key=b"k%d" % i, value=record_value(i), partition=0)
            sent[metadata.offset] = (b"k%d" % i, record_value(i))
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(client_id=f"{capture.name}-fetcher", group_id=None, enable_auto_commit=False,
                                **common)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        got = {}
        while len(got) < RECORDS:
            message = await asyncio.wait_for(consumer.getone(), timeout=10)
            got[message.offset] = (message.key, message.value)
    finally:
        await consumer.stop()
    if got != sent:
        raise RuntimeError(f"{capture.name}: produced offsets {sorted(sent)}, fetched {sorted(got)} "
                           f"(values equal: {list(got.values()) == list(sent.values())})")
    return {"produced_offsets": sorted(sent), "sasl": []}


def run_kafka_python_clients(broker: Any, capture: TlsCapture, topic: str, keylog: Path) -> dict[str, Any]:
    """kafka-python's producer then a fetcher on the capture's listener; what they did."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    def config(mechanism: str) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap_servers": broker.bootstrap_for(capture.listener),
                                "security_protocol": capture.listener,
                                "ssl_context": client_context(keylog, capture.tls12_ciphers, broker.certificate.cert)}
        if mechanism:
            conf.update(sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=PASSWORD)
        return conf

    producing, fetching = capture.mechanisms
    producer = KafkaProducer(client_id=f"{capture.name}-producer", linger_ms=0, **config(producing))
    offsets = [producer.send(topic, key=b"k%d" % i, value=record_value(i)).get(timeout=30).offset
               for i in range(RECORDS)]
    producer.close()
    consumer = KafkaConsumer(client_id=f"{capture.name}-fetcher", enable_auto_commit=False,
                             consumer_timeout_ms=10000, **config(fetching))
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    got = []
    for message in consumer:
        got.append(message.offset)
        if len(got) == RECORDS:
            break
    consumer.close()
    if got != offsets:
        raise RuntimeError(f"{capture.name}: produced offsets {offsets}, fetched {got}")
    return {"produced_offsets": offsets, "sasl": [m for m in capture.mechanisms if m]}


def record(out_dir: Path, captures: list[TlsCapture]) -> list[dict[str, Any]]:
    """Record the given captures (and only those) into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with kafka_broker("4", listeners=("SSL", "SASL_SSL"), users={USER: PASSWORD},
                      sasl_mechanisms=("PLAIN", "SCRAM-SHA-512")) as broker:
        topics = {capture.name.replace("_", "-"): 1 for capture in captures}
        kp_create_topics(broker.internal_bootstrap, topics)
        for capture in captures:
            pcap, keylog = out_dir / f"{capture.name}.pcap", out_dir / f"{capture.name}.keys"
            keylog.unlink(missing_ok=True)
            port = broker.ports[capture.listener]
            recorded = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            with tcpdump(pcap, port):
                done = run_clients(broker, capture, capture.name.replace("_", "-"), keylog)
            rows.append({"capture": pcap.name, "keys": keylog.name, "port": port, "listener": capture.listener,
                         "client": capture.client, "recorded_utc": recorded, "broker": broker.name, **done})
            time.sleep(0.2)
        if PASSWORD in broker.log():
            raise RuntimeError("the broker logged the lab password")
    return rows


def main(argv: list[str]) -> int:
    names = [capture.name for capture in CAPTURES]
    parser = argparse.ArgumentParser(prog="python -m tools.lab.kafka_tls", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default="captures/tls")
    parser.add_argument("--only", action="append", choices=names, metavar="NAME",
                        help=f"record just this capture (repeatable; one of {', '.join(names)})")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir).resolve()
    only = [arg for name in args.only or [] for arg in ("--only", name)]
    status = run_in_private_network(["-m", "tools.lab.kafka_tls", str(out_dir), *only])
    if status is not None:  # it ran in a network namespace of its own
        return status
    if os.environ.get(NETNS_ENV) == "1":
        bring_loopback_up()
    chosen = [capture for capture in CAPTURES if not args.only or capture.name in args.only]
    for row in record(out_dir, chosen):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
