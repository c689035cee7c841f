"""Captures with the broker's own request log beside them: captures/brokerlog/.

One Apache Kafka 4.4.0 node per run, logging through log4j2 with
`kafka.request.logger` in a file of its own (`start_kafka(request_log=...)`),
rolled over at a small size so each run leaves real rotated files
(request.log, request.log.1, ...). tcpdump captures the client listener's
port on `lo`; the lab's internal listener (topic set-up, quotas) and the
controller are logged but not captured.

    .venv/bin/python -m tools.lab.broker_log captures/brokerlog [--only NAME ...]

- `plain_quota`: PLAINTEXT, request log at DEBUG. kafka-python produces with
  a client id under a 1 KiB/s producer quota (so the broker throttles it),
  confluent-kafka (librdkafka) produces, a kafka-python group consumer reads
  everything back, and the Java client (kafka-clients) long-polls one
  partition without a group (fetch.max.wait.ms=300, for 8 s).
- `sasl_ssl_trace`: SASL_SSL (TLS 1.3, SCRAM-SHA-512), request log at TRACE
  (request and response bodies, SaslAuthenticate's included); kafka-python
  producer and fetcher writing an NSS key log (`keys`).

Each run directory holds `capture.pcap`, the request log files, `keys` (TLS
run), and `manifest.json` (what the clients did, from their APIs; the
broker's settings; never derived from the capture or the log).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tools.lab.apache_kafka import kafka_broker
from tools.lab.clients import Manifest, ck_produce, client_versions, kp_consume, kp_create_topics, kp_produce, payloads
from tools.lab.net import NETNS_ENV, bring_loopback_up, run_in_private_network
from tools.lab.tcpdump import tcpdump

RUNS = ("plain_quota", "sasl_ssl_trace")
ROLL_BYTES = 96 * 1024
THROTTLED_CLIENT = "bl-throttled"
QUOTA_BYTES_PER_S = 1024
USER, PASSWORD = "bl-lab-user", "bl-lab-Secret-93ad"


def _copy_logs(broker: Any, target: Path) -> list[str]:
    time.sleep(0.5)  # the last lines (immediateFlush, but the response may still be in flight)
    names = []
    for path in broker.request_log_files():
        shutil.copy(path, target / path.name)
        names.append(path.name)
    return names


def record_plain_quota(target: Path) -> dict[str, Any]:
    m = Manifest("capture", 0, "PLAINTEXT; kafka-python under a producer quota, librdkafka, a kafka-python group")
    with kafka_broker("4", request_log="DEBUG", request_log_roll_bytes=ROLL_BYTES) as broker:
        m.data["port"] = broker.port
        kp_create_topics(broker.internal_bootstrap, {"bl-quota": 1, "bl-plain": 1})
        broker.set_client_quota(THROTTLED_CLIENT, producer_byte_rate=QUOTA_BYTES_PER_S)
        m.data["recorded_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        m.data["broker"] = broker.name
        m.data["clients"] = client_versions()
        with tcpdump(target / "capture.pcap", broker.port):
            kp_produce(m, broker.bootstrap, "bl-quota", payloads("quota", 240, with_headers=False, seed=26),
                       codec="none", acks=1, client_id=THROTTLED_CLIENT, extra={"linger_ms": 0, "batch_size": 1024})
            ck_produce(m, broker.bootstrap, "bl-plain", payloads("rdk", 30, with_headers=True, seed=27),
                       codec="none", acks="all", client_id="bl-librdkafka")
            kp_consume(m, broker.bootstrap, ["bl-quota", "bl-plain"], "bl-group", 270, client_id="bl-consumer")
            # the Java client (kafka-clients 4.4.0): a consumer assigned bl-plain's partition 0, long polls
            from tools.lab.java_client import HELPER_CLIENT_VERSION, run_java_helper

            polled = json.loads(run_java_helper(["longpoll", broker.bootstrap, "bl-plain", "bl-java", "300", "8000"]))
            m.operation("bl-java", "longpoll", polled)
            m.data["clients"]["kafka-clients (java)"] = HELPER_CLIENT_VERSION
        m.note(f"client id {THROTTLED_CLIENT} has producer_byte_rate={QUOTA_BYTES_PER_S} (set through the "
               "internal listener before the capture): its Produce requests are throttled")
        m.data["request_log"] = {"level": "DEBUG", "roll_bytes": ROLL_BYTES, "files": _copy_logs(broker, target),
                                 "timestamps": "UTC, milliseconds (log4j2 %d{yyyy-MM-dd HH:mm:ss,SSS}{UTC})"}
    return m.data


def record_sasl_ssl_trace(target: Path) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tools.lab.kafka_tls import client_context

    m = Manifest("capture", 0, "SASL_SSL (SCRAM-SHA-512, TLS 1.3), request log at TRACE, kafka-python + key log")
    keylog = target / "keys"
    with kafka_broker("4", listeners=("SASL_SSL",), users={USER: PASSWORD}, sasl_mechanisms=("SCRAM-SHA-512",),
                      request_log="TRACE", request_log_roll_bytes=ROLL_BYTES) as broker:
        port = broker.ports["SASL_SSL"]
        m.data["port"] = port
        kp_create_topics(broker.internal_bootstrap, {"bl-tls": 1})
        m.data["recorded_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        m.data["broker"] = broker.name
        m.data["clients"] = client_versions()
        conf = {"bootstrap_servers": broker.bootstrap_for("SASL_SSL"), "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}
        with tcpdump(target / "capture.pcap", port):
            producer = KafkaProducer(client_id="bl-tls-producer", linger_ms=0,
                                     ssl_context=client_context(keylog, "", broker.certificate.cert), **conf)
            offsets = [producer.send("bl-tls", key=b"k%d" % i, value=b"v" * 200).get(timeout=30).offset
                       for i in range(10)]
            producer.close()
            consumer = KafkaConsumer(client_id="bl-tls-fetcher", enable_auto_commit=False, consumer_timeout_ms=10000,
                                     ssl_context=client_context(keylog, "", broker.certificate.cert), **conf)
            partition = TopicPartition("bl-tls", 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            got = []
            for message in consumer:
                got.append(message.offset)
                if len(got) == len(offsets):
                    break
            consumer.close()
        if got != offsets:
            raise RuntimeError(f"produced offsets {offsets}, fetched {got}")
        m.operation("bl-tls-producer", "produce", {"offsets": offsets})
        m.operation("bl-tls-fetcher", "fetch", {"offsets": got})
        m.data["sasl"] = {"mechanism": "SCRAM-SHA-512", "user": USER}
        m.note("the lab password is a throwaway value; tests check it is absent from every kdissect output")
        m.data["request_log"] = {"level": "TRACE", "roll_bytes": ROLL_BYTES, "files": _copy_logs(broker, target),
                                 "timestamps": "UTC, milliseconds (log4j2 %d{yyyy-MM-dd HH:mm:ss,SSS}{UTC})"}
        m.data["password"] = PASSWORD  # needed by the secrets test; lab-only
    return m.data


def record(out_dir: Path, runs: list[str]) -> None:
    for name in runs:
        target = out_dir / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        data = {"plain_quota": record_plain_quota, "sasl_ssl_trace": record_sasl_ssl_trace}[name](target)
        data["capture"] = "capture.pcap"
        data["command"] = f"python3 -m tools.lab.broker_log captures/brokerlog --only {name}"
        (target / "manifest.json").write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps({"run": name, "files": sorted(p.name for p in target.iterdir())}))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lab.broker_log", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default="captures/brokerlog")
    parser.add_argument("--only", action="append", choices=RUNS, metavar="NAME")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir).resolve()
    only = [arg for name in args.only or [] for arg in ("--only", name)]
    status = run_in_private_network(["-m", "tools.lab.broker_log", str(out_dir), *only])
    if status is not None:
        return status
    if os.environ.get(NETNS_ENV) == "1":
        bring_loopback_up()
    record(out_dir, list(args.only or RUNS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
