"""Capture lab: the hostile-strings workload (`hostile_strings_kafka`), for
kdissect's escaping of captured text (terminal, CSV, invalid UTF-8).

Against Apache Kafka 4.4:

- one kafka-python producer per hostile client id, each sending one record
  to topic `hostile` whose key, value and header value are that same string
  (terminal escapes: OSC title, screen clear, OSC 8 hyperlink; a bare CR, a
  newline, NUL, U+202E and the other bidi controls, U+2028/U+2029; CSV
  formulas; HTML that opens a comment and a script; a literal backslash);
- a kafka-python consumer group whose group id is hostile, reading them back;
- a plain socket sending Metadata v1 requests whose client ids and topic
  names are not valid UTF-8 (two distinct invalid byte strings that a
  lossy decoder would merge, and a valid string spelling the escape of one
  of them), which no client library can send.

The manifest's `hostile` list names every hostile string the clients sent:
where (`client_id`, `group`, `topic`, `key`), the client, and the exact
bytes as hex (and as text when they are valid UTF-8).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from tools.lab.clients import Manifest, Payload, kp_consume, kp_create_topics, kp_produce
from tools.lab.net import send_frame

TOPIC = "hostile"

# client ids (and record key/value/header) sent by kafka-python producers
CLIENT_IDS = (
    "title\x1b]0;owned\x07",
    "clear\x1b[2J\x1b[H",
    "link\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "12:00:00.000000\rforged",
    "rtl\u202eexe.txt",
    "bidi\u2066\u2067\u2068\u2069\u200e\u200f",
    "nul\x00byte",
    "two\nlines  127.0.0.1:1 -> 127.0.0.1:2  Produce v9",
    "seps\u2028line\u2029para",
    "=HYPERLINK(\"http://evil.example\",\"x\")",
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    "\tTAB-lead",
    "<!--<script>alert(1)</script>",
    "back\\slash\\x41",
    "bell\x07del\x7fc1\x9b31m",
)
GROUP = "grp\x1b[31m=1+1\r\n<!--"
# raw Metadata v1 requests: (client id bytes, topic name bytes)
RAW_METADATA = (
    (b"bad-\xff-id", b"topic-\xff"),
    (b"bad-\xfe-id", b"topic-\xfe"),
    (b"bad-\\xff-id", b"=cmd|' /C calc'!A0"),
    (b"esc-\xc3\x28-\x1b[2J", b"t\x1b]0;owned\x07"),
)


def _entry(where: str, client: str, data: bytes) -> dict[str, Any]:
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"where": where, "client": client, "hex": data.hex(), "text": text}


def _raw_metadata(m: Manifest, bootstrap: str) -> None:
    """Metadata v1 (non-flexible: STRING client id, ARRAY of STRING topics),
    one connection per request; the broker's answer is logged."""
    host, port = bootstrap.rsplit(":", 1)
    for i, (client_id, topic) in enumerate(RAW_METADATA):
        header = struct.pack(">hhih", 3, 1, 7000 + i, len(client_id)) + client_id
        body = struct.pack(">ih", 1, len(topic)) + topic
        frame = header + body
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            response = send_frame(sock, frame)
        m.operation("raw-socket", f"Metadata v1 correlation_id={7000 + i}",
                    {"client_id_hex": client_id.hex(), "topic_hex": topic.hex(), "response_bytes": len(response)})
        m.data["hostile"].append(_entry("client_id", "raw-socket", client_id))
        m.data["hostile"].append(_entry("topic", "raw-socket", topic))



def wl_hostile(m: Manifest, broker: Any) -> None:
    bootstrap = broker.bootstrap
    m.data["hostile"] = []
    kp_create_topics(bootstrap, {TOPIC: 1})
    for client_id in CLIENT_IDS:
        data = client_id.encode("utf-8")
        record = Payload(key=data, value=data, headers=[("h", data)])
        kp_produce(m, bootstrap, TOPIC, [record], codec="none", acks=1, client_id=client_id,
                   extra={"enable_idempotence": False})
        m.data["hostile"].append(_entry("client_id", "kafka-python", data))
        m.data["hostile"].append(_entry("key", "kafka-python", data))
    kp_consume(m, bootstrap, [TOPIC], GROUP, len(CLIENT_IDS), client_id="hostile-consumer")
    m.data["hostile"].append(_entry("group", "kafka-python", GROUP.encode("utf-8")))
    _raw_metadata(m, bootstrap)
    m.note("hostile: every string under `hostile` was sent by the named client exactly as its hex; "
           "Metadata v1 requests from the raw socket carry client ids and topic names that are not valid UTF-8")
