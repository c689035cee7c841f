#!/usr/bin/env python3
"""Write a many-connections benchmark capture: N client connections to a
broker's port 9092, none of them closed: the shape of a busy broker, a
reconnect storm or a scan. Two shapes:

* `handshake` (the default): each connection a SYN, SYN-ACK, ACK and the
  first 20 bytes of a Metadata request (a 44-byte frame): four packets;
* `syn-data`: each connection a single SYN, then one data segment with the
  same first 20 bytes of a request whose size prefix promises more; no
  handshake reply is seen (as where only one direction is captured, or a
  flood the broker never answers): two packets.

    python3 benchmarks/manyconn.py OUT.pcap N [--shape handshake|syn-data]

Generated on demand (benchmarks/bench_pipeline.py does it into
benchmarks/out/), never committed. Clients are 10.x.y.z (N up to 2**24),
ports 40000-59999, 3 microseconds between packets.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by file from the tests
    sys.path.append(str(Path(__file__).resolve().parent))
from bench_files import open_result  # noqa: E402

BROKER = bytes([10, 0, 0, 1])
# size 40, Metadata (3) v12, correlation id 1, client id "client": only its
# first 20 bytes are sent
REQUEST_START = struct.pack(">ihhih", 40, 3, 12, 1, 6) + b"client"
_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)  # microseconds, Ethernet


def _packet(ts_us: int, src: bytes, sport: int, dst: bytes, dport: int, seq: int, ack: int, flags: int,
            payload: bytes = b"") -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0, 64, 6, 0, src, dst)
    frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload
    return struct.pack("<IIII", ts_us // 10**6, ts_us % 10**6, len(frame), len(frame)) + frame


SHAPES = ("handshake", "syn-data")


def write_capture(path: Path, connections: int, shape: str = "handshake") -> None:
    ts = 1_700_000_000 * 10**6
    with open_result(path) as out:
        out.write(_PCAP_HEADER)
        for i in range(connections):
            client = bytes([10, 1 + (i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF])
            port = 40000 + i % 20000
            isn, peer_isn = 1000 + i, 5000 + i
            if shape == "syn-data":
                packets = ((client, port, BROKER, 9092, isn, 0, 0x02, b""),  # SYN
                           (client, port, BROKER, 9092, isn + 1, peer_isn + 1, 0x18, REQUEST_START[:20]))
            else:
                packets = ((client, port, BROKER, 9092, isn, 0, 0x02, b""),  # SYN
                           (BROKER, 9092, client, port, peer_isn, isn + 1, 0x12, b""),  # SYN-ACK
                           (client, port, BROKER, 9092, isn + 1, peer_isn + 1, 0x10, b""),  # ACK
                           (client, port, BROKER, 9092, isn + 1, peer_isn + 1, 0x18, REQUEST_START[:20]))  # PSH-ACK
            for packet in packets:
                out.write(_packet(ts, *packet))
                ts += 3


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("connections", type=int)
    parser.add_argument("--shape", choices=SHAPES, default="handshake")
    args = parser.parse_args()
    write_capture(args.output, args.connections, args.shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
