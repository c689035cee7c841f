"""The unit that flows from the capture reader into reassembly.

One `TcpSegment` is one captured TCP packet, reduced to what stream
reassembly needs. The capture reader produces them; the single-process
pipeline and the Spark job both feed them, in capture order, to the same
per-connection code. Keep this type flat and free of protocol logic so it
maps one-to-one onto an Arrow/Spark row.
"""

from __future__ import annotations

from dataclasses import dataclass

# TCP flag bits, as in the TCP header's flags byte.
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10


@dataclass(slots=True)
class TcpSegment:
    capture_index: int  # position of the file within the capture set
    frame_number: int  # 1-based packet number within its file, as tshark counts
    ts: float  # epoch seconds of the packet
    src: str  # source IP address, text form ("10.0.0.1", "::1")
    sport: int
    dst: str
    dport: int
    seq: int  # TCP sequence number (32-bit, as on the wire)
    ack: int
    flags: int  # TCP flags byte (FIN/SYN/RST/PSH/ACK bits above)
    payload: bytes  # TCP payload bytes that were captured
    payload_len: int  # TCP payload length on the wire; > len(payload) when snaplen cut it

    @property
    def truncated(self) -> bool:
        return self.payload_len > len(self.payload)
