#!/usr/bin/env python3
"""Write the many-client-ids benchmark capture: CLIENTS distinct client ids,
each sending EACH ApiVersions v0 requests that the broker answers, over
`--connections` TCP connections to port 9092 (each opened with a handshake;
requests pipelined, `--batch` requests per segment, then their responses in
one segment 0.2-20 ms later, the latency drawn per segment from a seeded
log-normal).

    python3 benchmarks/manyclients.py OUT.pcap CLIENTS [--each 1] [--connections 1000]

Client ids are `client-<n>`: 300,000 ids with `--each 1` make about 11 MB.
Few ids with a large `--each` give many exchanges for few ids (memory must
not grow with the number of exchanges). Generated on demand
(bench_summary_memory.py does it into benchmarks/out/), never committed.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by file from the tests
    sys.path.append(str(Path(__file__).resolve().parent))
from bench_files import open_result  # noqa: E402

BROKER = bytes([10, 0, 0, 1])
_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)  # microseconds, Ethernet
# an ApiVersions v0 response: error 0, two entries (ApiVersions 0-3, Metadata 0-12)
_RESPONSE_BODY = struct.pack(">hi", 0, 2) + struct.pack(">hhh", 18, 0, 3) + struct.pack(">hhh", 3, 0, 12)


def request(correlation_id: int, client_id: bytes) -> bytes:
    """ApiVersions (18) v0: size, api key, version, correlation id, client id."""
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def response(correlation_id: int) -> bytes:
    body = struct.pack(">i", correlation_id) + _RESPONSE_BODY
    return struct.pack(">i", len(body)) + body


def _packet(ts_us: int, src: bytes, sport: int, dst: bytes, dport: int, seq: int, ack: int, flags: int,
            payload: bytes = b"") -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0, 64, 6, 0, src, dst)
    frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload
    return struct.pack("<IIII", ts_us // 10**6, ts_us % 10**6, len(frame), len(frame)) + frame


def write_capture(path: Path, clients: int, each: int = 1, connections: int = 1000, batch: int = 50,
                  seed: int = 23) -> int:
    """The capture; returns the number of exchanges written."""
    rng = random.Random(seed)
    connections = max(1, min(connections, clients))
    ts = 1_700_000_000 * 10**6
    exchanges = 0
    with open_result(path) as out:
        for c in range(connections):
            if c == 0:
                out.write(_PCAP_HEADER)
            host = bytes([10, 1 + (c >> 16) & 0xFF, (c >> 8) & 0xFF, c & 0xFF])
            port = 40000 + c % 20000
            seq, peer = 1000 + c, 500_000 + c
            out.write(_packet(ts, host, port, BROKER, 9092, seq, 0, 0x02))
            out.write(_packet(ts + 1, BROKER, 9092, host, port, peer, seq + 1, 0x12))
            out.write(_packet(ts + 2, host, port, BROKER, 9092, seq + 1, peer + 1, 0x10))
            seq, peer, ts = seq + 1, peer + 1, ts + 3
            # this connection's ids: every connections-th id, each sent `each` times
            ids = [f"client-{n}".encode() for n in range(c, clients, connections)]
            calls = [cid for _ in range(each) for cid in ids]
            correlation = 0
            for start in range(0, len(calls), batch):
                chunk = calls[start:start + batch]
                requests = b"".join(request(correlation + i, cid) for i, cid in enumerate(chunk))
                answers = b"".join(response(correlation + i) for i in range(len(chunk)))
                correlation += len(chunk)
                latency_us = max(200, min(20_000, int(rng.lognormvariate(7.5, 0.8))))
                out.write(_packet(ts, host, port, BROKER, 9092, seq, peer, 0x18, requests))
                out.write(_packet(ts + latency_us, BROKER, 9092, host, port, peer, seq + len(requests), 0x18, answers))
                seq, peer = seq + len(requests), peer + len(answers)
                ts += latency_us + 7
                exchanges += len(chunk)
    return exchanges


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("clients", type=int)
    parser.add_argument("--each", type=int, default=1, help="requests per client id (default 1)")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50, help="requests per TCP segment (default 50)")
    args = parser.parse_args()
    exchanges = write_capture(args.out, args.clients, args.each, args.connections, args.batch)
    print(f"{args.out}: {args.clients} client ids, {exchanges} exchanges, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
