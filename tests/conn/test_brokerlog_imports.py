"""What importing the broker-log join costs: msgspec without typing_extensions.

msgspec's type helper imports typing_extensions when it can (and with it
inspect, ast, dis, tokenize: 5-6 ms of every `--broker-log` run's start);
kdissect.conn.brokerlog.parse hides it for msgspec's import alone (from
Python 3.11), so that msgspec falls back to the typing module's equivalents. Checked in a fresh
interpreter: the modules stay out, typing_extensions can still be imported
by anything else afterwards, and the log's lines decode into their fields."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
import kdissect.conn.brokerlog.join
from kdissect.conn.brokerlog.parse import parse_line
left_out = [name for name in ("typing_extensions", "inspect", "ast", "dis", "tokenize") if name in sys.modules]
line = ('[2026-11-26 09:49:23,335] DEBUG Completed request:{"isForwarded":false,"requestHeader":'
        '{"requestApiKey":18,"requestApiVersion":5,"correlationId":1,"clientId":null},"request":{},'
        '"connection":"127.0.0.1:9092-127.0.0.1:42858-0-0","totalTimeMs":43.853,"throttleTimeMs":0,'
        '"principal":"User:ANONYMOUS","clientInformation":{"softwareName":"x","softwareVersion":"1"}}'
        ' (kafka.request.logger)')
entry = parse_line(line)
import typing_extensions
print(json.dumps({"loaded": left_out, "client": entry.client, "key": list(entry.key), "total": entry.total_ms,
                  "throttle": entry.throttle_ms, "client_id": entry.client_id, "software": entry.software,
                  "typing_extensions": typing_extensions.__name__}))
"""


def test_join_imports_msgspec_without_typing_extensions() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    # (before 3.11 the typing module lacks what msgspec takes from typing_extensions: not hidden there)
    assert found["loaded"] == [] if sys.version_info >= (3, 11) else "typing_extensions" in found["loaded"]
    assert found["typing_extensions"] == "typing_extensions"  # (importable again once msgspec is in)
    assert (found["client"], found["key"]) == ("127.0.0.1:42858", ["127.0.0.1:42858", 1, 18])
    assert (found["total"], found["throttle"], found["client_id"], found["software"]) == (43.853, 0.0, None, "x/1")
