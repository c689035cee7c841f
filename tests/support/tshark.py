"""Run tshark on a capture and read back every Kafka PDU it dissects.

tshark is the independent reference for the pipeline tests. Its PDML output is
used (not `-T fields`) because one packet can carry several Kafka PDUs and the
fields of each PDU must stay together.
"""

from __future__ import annotations

import copy
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.pcaps import epoch_ns, file_key


@dataclass
class TsharkPdu:
    frame: int  # packet number within the file (the packet that completed the PDU)
    ts: int  # frame.time_epoch of that packet, exact int nanoseconds
    tcp_stream: int
    src: str  # "ip:port" / "[v6]:port"
    dst: str
    length: int | None = None  # kafka.len
    api_key: int | None = None
    api_version: int | None = None
    correlation_id: int | None = None
    request_frame: int | None = None  # on responses: the request's packet
    response_frame: int | None = None  # on requests: the response's packet
    errors: list[int] = field(default_factory=list)  # every kafka.error in the PDU
    throttle_time: int | None = None
    malformed: bool = False  # tshark reported a malformed PDU (so its body decode is not trusted)
    unsupported_version: bool = False
    request_missing: bool = False
    unknown_api: bool = False
    is_request: bool = False

    @property
    def body_decoded(self) -> bool:
        """Whether tshark decoded this PDU's body (so its error/throttle fields count)."""
        return not (self.malformed or self.unsupported_version or self.request_missing)


def _endpoint(ip: str, port: str) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


# kafka_pdus' answers per (file state, key log state, command) for files in
# the repository (see pcaps.file_key): the same bundled capture is compared
# with tshark by several tests. Callers get copies.
_PDUS: dict[tuple, list[TsharkPdu]] = {}


def kafka_pdus(tshark: str, path: str | Path, ports: tuple[int, ...] = (9092,),
               tls_keylog: str | Path | None = None) -> list[TsharkPdu]:
    """Every Kafka PDU tshark dissects in `path`, in packet order (inside TLS
    on `ports`, decrypted with `tls_keylog`, when one is given). tshark runs
    once per file state and arguments in this process; each call returns a
    fresh copy."""
    command = _pdml_command(tshark, path, ports, tls_keylog)
    where = file_key(path)
    keylog = None if tls_keylog is None else file_key(tls_keylog)
    if where is None or (tls_keylog is not None and keylog is None):
        return _run_pdml(command, path, ports)  # a file written by a test: read once
    key = (where, keylog, tuple(command))
    if key not in _PDUS:
        _PDUS[key] = _run_pdml(command, path, ports)
    return copy.deepcopy(_PDUS[key])


def _pdml_command(tshark: str, path: str | Path, ports: tuple[int, ...],
                  tls_keylog: str | Path | None) -> list[str]:
    command = [tshark, "-r", str(path), "-n", "-2", "-o", "tcp.desegment_tcp_streams:TRUE"]
    if tls_keylog is not None:
        command += ["-o", f"tls.keylog_file:{tls_keylog}"]
        for port in ports:
            command += ["-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},kafka"]
    else:
        for port in ports:
            command += ["-d", f"tcp.port=={port},kafka"]
    command += ["-Y", "kafka", "-T", "pdml", "-J", "kafka tcp ip ipv6 frame _ws.malformed"]
    return command


def _run_pdml(command: list[str], path: str | Path, ports: tuple[int, ...]) -> list[TsharkPdu]:
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    pdus: list[TsharkPdu] = []
    for _, packet in ET.iterparse(proc.stdout, events=("end",)):
        if packet.tag != "packet":
            continue
        pdus.extend(_packet_pdus(packet, ports))
        packet.clear()
    if proc.wait() != 0:
        raise RuntimeError(f"tshark failed on {path}")
    return pdus


def _packet_pdus(packet: ET.Element, ports: tuple[int, ...]) -> list[TsharkPdu]:
    frame = ts = stream = None
    src_ip = dst_ip = src_port = dst_port = ""
    out: list[TsharkPdu] = []
    for proto in packet.findall("proto"):
        name = proto.get("name")
        if name == "geninfo":
            for f in proto.iter("field"):
                if f.get("name") == "num":
                    frame = int(f.get("show"))
                elif f.get("name") == "timestamp":
                    ts = epoch_ns(f.get("value"))
        elif name in ("ip", "ipv6"):
            for f in proto.iter("field"):
                n = f.get("name")
                if n in ("ip.src", "ipv6.src"):
                    src_ip = f.get("show")
                elif n in ("ip.dst", "ipv6.dst"):
                    dst_ip = f.get("show")
        elif name == "tcp":
            for f in proto.iter("field"):
                n = f.get("name")
                if n == "tcp.srcport":
                    src_port = f.get("show")
                elif n == "tcp.dstport":
                    dst_port = f.get("show")
                elif n == "tcp.stream":
                    stream = int(f.get("show"))
        elif name == "kafka":
            pdu = TsharkPdu(frame, ts, stream, _endpoint(src_ip, src_port), _endpoint(dst_ip, dst_port))
            pdu.is_request = int(dst_port) in ports
            _read_kafka(proto, pdu)
            out.append(pdu)
        elif name == "_ws.malformed" and out:
            out[-1].malformed = True
    return out


# expert notes meaning tshark did not decode (all of) the body
_UNDECODED_NOTES = {
    "kafka.unknown_api_key", "kafka.pdu_length_mismatch", "kafka.bad_string_length",
    "kafka.bad_bytes_length", "kafka.bad_array_length", "kafka.bad_record_length",
    "kafka.ei_kafka_bad_message_set_length", "kafka.bad_varint",
}


def _read_kafka(proto: ET.Element, pdu: TsharkPdu) -> None:
    for f in proto.iter("field"):
        n = f.get("name")
        show = f.get("show")
        if n == "kafka.len" and pdu.length is None:
            pdu.length = int(show)
        elif n == "kafka.api_key" and pdu.api_key is None:
            pdu.api_key = int(show)
        elif n in ("kafka.api_version", "kafka.request.version", "kafka.response.version") and pdu.api_version is None:
            pdu.api_version = int(show)
        elif n == "kafka.correlation_id" and pdu.correlation_id is None:
            pdu.correlation_id = int(show)
        elif n == "kafka.request_frame":
            pdu.request_frame = int(show)
        elif n == "kafka.response_frame":
            pdu.response_frame = int(show)
        elif n == "kafka.error":
            pdu.errors.append(int(show))
        elif n == "kafka.throttle_time" and pdu.throttle_time is None:
            pdu.throttle_time = int(show)
        elif n == "_ws.malformed":
            pdu.malformed = True
        elif n in _UNDECODED_NOTES:
            pdu.malformed = True
            if n == "kafka.unknown_api_key":
                pdu.unknown_api = True
    # expert notes about the PDU itself (not those inside an ApiVersions listing)
    for child in proto.findall("field"):
        if child.get("name") != "_ws.expert":
            continue
        for note in child.findall("field"):
            if note.get("name") == "kafka.unsupported_api_version":
                pdu.unsupported_version = True
            elif note.get("name") == "kafka.request_missing":
                pdu.request_missing = True



def _malformed(exchange, side: str) -> bool:
    return any(problem.startswith(f"{side} malformed") for problem in exchange.problems)


def _only_trailing_bytes(exchange, side: str) -> bool:
    """The message decoded fully but bytes were left after its last field."""
    return any(p.startswith(f"{side}: ") and p.endswith("trailing bytes ignored") for p in exchange.problems)


def compare_with_tshark(tshark: str, path: str | Path, ports: tuple[int, ...], exchanges: list,
                        raw_sasl_frames: int = 0, tls_keylog: str | Path | None = None) -> dict:
    """Check kdissect's exchanges against tshark PDU for PDU; returns counts.

    Every request and response PDU tshark finds must be in the table: same
    endpoints, packet, correlation id, size, api key and version, time; a
    response tshark pairs must be paired with the same request; error codes
    and throttle time must agree wherever tshark decoded the body. Raises
    AssertionError with the first difference.

    Raw SASL tokens (after a SaslHandshake v0) are not Kafka messages; tshark
    dissects them anyway, as requests of unknown APIs and responses without a
    request. PDUs of that kind missing from the table are counted, and their
    number must equal kdissect's count of raw SASL frames (`raw_sasl_frames`).
    """
    pdus = kafka_pdus(tshark, path, ports, tls_keylog)
    by_request = {}
    by_response = {}
    for ex in exchanges:
        if ex.request_frame is not None:
            by_request[(ex.client, ex.broker, ex.request_frame, ex.correlation_id)] = ex
        if ex.response_frame is not None:
            by_response[(ex.client, ex.broker, ex.response_frame, ex.correlation_id)] = ex
    counts = {"requests": 0, "responses": 0, "paired_by_tshark": 0, "bodies_compared": 0,
              "undecoded_by_tshark": 0, "raw_sasl": 0, "raw_sasl_requests": 0, "raw_sasl_responses": 0}
    requests_by_frame = {(p.frame, p.correlation_id): p for p in pdus if p.is_request}
    for pdu in pdus:
        where = f"{Path(path).name} frame {pdu.frame} ({'request' if pdu.is_request else 'response'} " \
                f"correlation id {pdu.correlation_id})"
        if pdu.is_request:
            counts["requests"] += 1
            ex = by_request.get((pdu.src, pdu.dst, pdu.frame, pdu.correlation_id))
            if ex is None and pdu.unknown_api and raw_sasl_frames:
                counts["raw_sasl"] += 1
                counts["raw_sasl_requests"] += 1
                continue
            assert ex is not None, f"{where}: not in the exchange table"
            assert (ex.api_key, ex.api_version) == (pdu.api_key, pdu.api_version), where
            assert ex.request_bytes == pdu.length, where
            assert ex.request_ts == pdu.ts, f"{where}: {ex.request_ts} != {pdu.ts}"
            if pdu.response_frame is not None:
                assert ex.response_frame == pdu.response_frame, where
            if not pdu.body_decoded:
                counts["undecoded_by_tshark"] += 1
            if pdu.body_decoded or pdu.unsupported_version or pdu.unknown_api:
                # tshark decoded it, or could not for want of the version: kdissect must decode it
                # (a request with bytes after its last field is reported, not hidden:
                # see captures/README.md on admin.pcap frame 61)
                assert not _malformed(ex, "request") or _only_trailing_bytes(ex, "request"), \
                    f"{where}: {ex.problems}"
        else:
            counts["responses"] += 1
            ex = by_response.get((pdu.dst, pdu.src, pdu.frame, pdu.correlation_id))
            if ex is None and (pdu.request_missing or pdu.length == 0) and raw_sasl_frames:
                counts["raw_sasl"] += 1
                counts["raw_sasl_responses"] += 1
                continue
            assert ex is not None, f"{where}: not in the exchange table"
            assert ex.response_bytes == pdu.length, where
            assert ex.response_ts == pdu.ts, f"{where}: {ex.response_ts} != {pdu.ts}"
            request = None
            if pdu.request_frame is not None:
                counts["paired_by_tshark"] += 1
                assert ex.request_frame == pdu.request_frame, f"{where}: paired differently"
                assert ex.api_key == pdu.api_key, where
                request = requests_by_frame.get((pdu.request_frame, pdu.correlation_id))
            if pdu.body_decoded and pdu.request_frame is not None:
                counts["bodies_compared"] += 1
                assert not _malformed(ex, "response"), f"{where}: {ex.problems}"
                tshark_codes = sorted({code for code in pdu.errors if code != 0})
                assert ex.error_codes == tshark_codes, f"{where}: errors {ex.error_codes} != {tshark_codes}"
                if ex.error_code:
                    assert ex.error_code in tshark_codes, where
                assert ex.throttle_time_ms == pdu.throttle_time, \
                    f"{where}: throttle {ex.throttle_time_ms} != {pdu.throttle_time}"
            else:
                counts["undecoded_by_tshark"] += 1
                version_unknown_to_tshark = (
                    request is None or request.unsupported_version or request.unknown_api or pdu.unknown_api
                )
                if version_unknown_to_tshark and ex.request_frame is not None:
                    # tshark could not decode this version: kdissect must
                    # (a body tshark can read and calls malformed may really be bad)
                    assert not _malformed(ex, "response"), f"{where}: {ex.problems}"
    # whatever kdissect finds malformed, tshark finds malformed too
    bad = {(p.frame, p.correlation_id, p.is_request) for p in pdus if p.malformed}
    for ex in exchanges:
        if _malformed(ex, "request") and not _only_trailing_bytes(ex, "request"):
            assert (ex.request_frame, ex.correlation_id, True) in bad, \
                f"{Path(path).name} frame {ex.request_frame}: only kdissect finds the request malformed: {ex.problems}"
        if _malformed(ex, "response"):
            assert (ex.response_frame, ex.correlation_id, False) in bad, \
                f"{Path(path).name} frame {ex.response_frame}: only kdissect finds the response malformed: {ex.problems}"
    assert counts["raw_sasl"] == raw_sasl_frames, \
        f"tshark shows {counts['raw_sasl']} raw SASL tokens, kdissect counted {raw_sasl_frames}"
    ours_requests = sum(1 for ex in exchanges if ex.request_frame is not None)
    ours_responses = sum(1 for ex in exchanges if ex.response_frame is not None)
    tshark_requests = counts["requests"] - counts["raw_sasl_requests"]
    tshark_responses = counts["responses"] - counts["raw_sasl_responses"]
    assert ours_requests == tshark_requests, f"{ours_requests} requests in the table, tshark has {tshark_requests}"
    assert ours_responses == tshark_responses, \
        f"{ours_responses} responses in the table, tshark has {tshark_responses}"
    return counts
