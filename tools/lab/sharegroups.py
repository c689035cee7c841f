"""The lab's share group with explicit acknowledgements (issue 28, section 2).

kafka-python writes SHARE_RECORDS records to `share-acks` (one partition);
then Java KafkaShareConsumers of kafka-clients 4.4.0 (LabClient
`share-acks`) in group `lab-share-acks`: `lab-share-acks-releaser` releases
every third record it gets and accepts the rest, then
`lab-share-acks-rejecter` gets the released records again (delivery count
2) and rejects the even offsets, accepting the rest. The manifest's
consumed rows carry each delivery's `delivery_count` and `acknowledged`
(accept, release, reject), the operations each consumer's totals.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tools.lab.clients import Manifest, encode_bytes, kp_create_topics, kp_produce, payloads

SHARE_RECORDS = 12
TOPIC, GROUP = "share-acks", "lab-share-acks"


def wl_share_acks(m: Manifest, broker: Any) -> None:
    from tools.lab.java_client import run_java_helper
    from tools.lab.workloads import KAFKA4

    kp_create_topics(broker.internal_bootstrap, {TOPIC: 1})
    kp_produce(m, broker.bootstrap, TOPIC, payloads("share", SHARE_RECORDS, with_headers=False), codec="none",
               acks=1, client_id="lab-share-producer")
    result = json.loads(run_java_helper(["share-acks", broker.bootstrap, GROUP, TOPIC, str(SHARE_RECORDS)],
                                        version=KAFKA4))
    m.data["clients"]["kafka-clients (java)"] = KAFKA4

    def text(value: str | None) -> str | None:
        return None if value is None else encode_bytes(base64.b64decode(value))

    for row in result["consumed"]:
        row.update(key=text(row["key"]), value=text(row["value"]),
                   headers=[[k, text(v)] for k, v in row["headers"]])
        m.consumed(**row)
    for op in result["operations"]:
        m.operation(op["client"], op["operation"], op["result"])
    m.note(f"{SHARE_RECORDS} records in {TOPIC}[0]; share group {GROUP} with share.acknowledgement.mode=explicit: "
           f"{GROUP}-releaser releases every third record it gets (by arrival) and accepts the rest, then "
           f"{GROUP}-rejecter gets the released records again and rejects the even offsets, accepting the rest")
