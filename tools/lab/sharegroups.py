"""The lab's share group with explicit acknowledgements (issue 28, section 2).

kafka-python writes SHARE_RECORDS records to `share-acks` (one partition);
then Java KafkaShareConsumers of kafka-clients 4.4.0 (LabClient
`share-acks`) in group `lab-share-acks`: `lab-share-acks-releaser` releases
every third record it gets and accepts the rest, then
`lab-share-acks-rejecter` gets the released records again (delivery count
2) and rejects the even offsets, accepting the rest. The manifest's
consumed rows carry each delivery's `delivery_count` and `acknowledged`
(accept, release, reject), the operations each consumer's totals.

`share_timeout_kafka` (LabClient `share-timeout`, 2 s acquisition locks):
`lab-share-timeout-holder` gets TIMEOUT_RECORDS records and sits on them
while `lab-share-timeout-taker` polls; their locks expire, the taker gets
them again (delivery count 2) and accepts them; then the holder accepts its
own, expired, deliveries.

`share_acks_franz_go_kafka`: the same acknowledgements from franz-go's share
consumer (tools/lab/go/share.go, `labgo share-acks`) in group
`lab-go-share-acks`.
"""

from __future__ import annotations

import json
from typing import Any

from tools.lab.clients import Manifest, kp_create_topics, kp_produce, payloads

SHARE_RECORDS = 12
TOPIC, GROUP = "share-acks", "lab-share-acks"


TIMEOUT_RECORDS, TIMEOUT_TOPIC, TIMEOUT_GROUP = 6, "share-timeout", "lab-share-timeout"
# acquisition locks of 2 s (the broker's floor lowered to 1 s) so the holder's expire within the capture
LOCK_CONFIG = {"group.share.record.lock.duration.ms": 2000, "group.share.min.record.lock.duration.ms": 1000}


def wl_share_acks(m: Manifest, broker: Any) -> None:
    kp_create_topics(broker.internal_bootstrap, {TOPIC: 1})
    kp_produce(m, broker.bootstrap, TOPIC, payloads("share", SHARE_RECORDS, with_headers=False), codec="none",
               acks=1, client_id="lab-share-producer")
    _java(m, ["share-acks", broker.bootstrap, GROUP, TOPIC, str(SHARE_RECORDS)])
    m.note(f"{SHARE_RECORDS} records in {TOPIC}[0]; share group {GROUP} with share.acknowledgement.mode=explicit: "
           f"{GROUP}-releaser releases every third record it gets (by arrival) and accepts the rest, then "
           f"{GROUP}-rejecter gets the released records again and rejects the even offsets, accepting the rest")


def wl_share_timeout(m: Manifest, broker: Any) -> None:
    """A holder sits on its records past their 2 s acquisition lock; a taker
    gets them again (delivery count 2) and accepts them; then the holder
    accepts its expired deliveries (the broker refuses)."""
    kp_create_topics(broker.internal_bootstrap, {TIMEOUT_TOPIC: 1})
    kp_produce(m, broker.bootstrap, TIMEOUT_TOPIC, payloads("timeout", TIMEOUT_RECORDS, with_headers=False),
               codec="none", acks=1, client_id="lab-share-producer")
    _java(m, ["share-timeout", broker.bootstrap, TIMEOUT_GROUP, TIMEOUT_TOPIC, str(TIMEOUT_RECORDS)])
    m.note(f"{TIMEOUT_RECORDS} records in {TIMEOUT_TOPIC}[0]; broker {LOCK_CONFIG}; share group {TIMEOUT_GROUP} "
           f"(explicit acknowledgement): {TIMEOUT_GROUP}-holder gets them and holds them unacknowledged while "
           f"{TIMEOUT_GROUP}-taker polls: the locks expire, the taker gets them again and accepts them; then the "
           "holder accepts its deliveries (its commitSync answer per partition is in its operation)")


GO_GROUP = "lab-go-share-acks"


def wl_share_acks_franz_go(m: Manifest, broker: Any) -> None:
    from tools.lab.go_client import franz_go_version, run_go_client

    kp_create_topics(broker.internal_bootstrap, {TOPIC: 1})
    kp_produce(m, broker.bootstrap, TOPIC, payloads("share", SHARE_RECORDS, with_headers=False), codec="none",
               acks=1, client_id="lab-share-producer")
    result = json.loads(run_go_client(["share-acks", broker.bootstrap, GO_GROUP, TOPIC, str(SHARE_RECORDS)]))
    m.data["clients"]["franz-go"] = franz_go_version()
    m.record_helper_output(result)
    m.note(f"{SHARE_RECORDS} records in {TOPIC}[0]; franz-go share group {GO_GROUP} (Record.Ack, FlushAcks): "
           f"{GO_GROUP}-releaser releases every third record it gets (by arrival) and accepts the rest, then "
           f"{GO_GROUP}-rejecter gets the released records again and rejects the even offsets, accepting the rest")


def _java(m: Manifest, args: list[str]) -> None:
    from tools.lab.java_client import run_java_helper
    from tools.lab.kafka_versions import VERSIONS

    result = json.loads(run_java_helper(args, version=VERSIONS["4"]))
    m.data["clients"]["kafka-clients (java)"] = VERSIONS["4"]
    m.record_helper_output(result)
