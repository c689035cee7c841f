"""Test helpers for capture reading and reassembly: record a real loopback
capture of known application bytes, and ask tshark about capture files.

The recording runs a small framed request/response exchange (a 4-byte
big-endian length prefix, like Kafka) over real sockets while tcpdump captures
loopback. Every byte each side wrote is saved, so reassembled streams can be
checked against the application's own bytes, independently of kdissect.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RecordedConnection:
    family: str  # "ipv4" | "ipv6"
    client: tuple[str, int]
    server: tuple[str, int]
    client_bytes: bytes  # everything the client wrote, in order
    server_bytes: bytes  # everything the server wrote
    close: str  # "fin" | "rst"


def _frame(rng: random.Random, size: int) -> bytes:
    return size.to_bytes(4, "big") + rng.randbytes(size)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts = []
    while n:
        part = sock.recv(n)
        if not part:
            raise ConnectionError("peer closed")
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def _send_in_pieces(sock: socket.socket, data: bytes, rng: random.Random | None) -> None:
    """With TCP_NODELAY, each small write leaves as its own segment, which
    loopback (no segmentation offload split) would otherwise merge."""
    if rng is None:
        sock.sendall(data)
        return
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 1400)
        sock.sendall(data[pos : pos + step])
        pos += step


def _serve_one(listener: socket.socket, rng_seed: int, out: dict, small_writes: bool, reply_sizes: list[int]) -> None:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pieces = random.Random(rng_seed * 3) if small_writes else None
    rng = random.Random(rng_seed)
    written = bytearray()
    try:
        while True:
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                break
            size = int.from_bytes(head, "big")
            _recv_exact(conn, size)
            reply = _frame(rng, rng.choice(reply_sizes) if size else 0)
            _send_in_pieces(conn, reply, pieces)
            written += reply
    except (ConnectionError, OSError):
        pass
    finally:
        out["server_bytes"] = bytes(written)
        conn.close()


def _run_connection(
    family: int, host: str, port: int, sizes: list[int], seed: int, close: str, small_writes: bool,
    reply_sizes: tuple[int, ...] = (8, 40, 700, 3000, 20000),
) -> RecordedConnection:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1)
    result: dict = {}
    server = threading.Thread(target=_serve_one, args=(listener, seed + 1, result, small_writes, list(reply_sizes)))
    server.start()
    client = socket.socket(family, socket.SOCK_STREAM)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.connect(listener.getsockname()[:2])
    rng = random.Random(seed)
    pieces = random.Random(seed * 3) if small_writes else None
    written = bytearray()
    for size in sizes:
        frame = _frame(rng, size)
        _send_in_pieces(client, frame, pieces)
        written += frame
        head = _recv_exact(client, 4)
        _recv_exact(client, int.from_bytes(head, "big"))
    cname = client.getsockname()[:2]
    sname = listener.getsockname()[:2]
    if close == "rst":
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, (1).to_bytes(4, "little") + (0).to_bytes(4, "little"))
    client.close()
    server.join()
    listener.close()
    return RecordedConnection(
        "ipv6" if family == socket.AF_INET6 else "ipv4",
        (cname[0], cname[1]),
        (sname[0], sname[1]),
        bytes(written),
        result.get("server_bytes", b""),
        close,
    )


SERVER_PORTS = 7


def generate_traffic(ports: list[int], seed: int = 7, chatty: int = 0) -> list[RecordedConnection]:
    """The workload recorded by `record_loopback` (runs in the capturing
    process); `ports` are SERVER_PORTS free ports for the servers. With
    `chatty`, one connection making that many small exchanges instead."""
    v4, v6 = (socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")
    if chatty:
        return [_run_connection(*v4, ports[0], [60] * chatty, seed, "fin", False, (8, 40, 200))]
    conns = [
        # many small segments (Ethernet-like sizes), large and small frames
        _run_connection(*v4, ports[0], [10, 1000, 70000, 5, 150000, 0, 3], seed, "fin", True),
        # loopback's own segment sizes: few, large segments
        _run_connection(*v4, ports[1], [200000, 17, 64000], seed + 10, "fin", False),
        _run_connection(*v6, ports[2], [30, 9000, 45000, 2], seed + 20, "fin", True),
        _run_connection(*v4, ports[3], [100, 5000], seed + 30, "rst", True),
    ]
    for i in range(3):  # a few short connections
        conns.append(_run_connection(*v4, ports[4 + i], [20 + i, 300], seed + 40 + i, "fin", True))
    return conns


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def record_loopback(directory: Path, name: str = "loop", seed: int = 7, chatty: int = 0) -> Path:
    """Capture `generate_traffic` on loopback with tcpdump; returns the pcap path.
    A JSON manifest `<name>.json` next to it lists each connection's endpoints and
    the application bytes (hex) each side wrote."""
    if shutil.which("tcpdump") is None:
        raise RuntimeError("tcpdump is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    pcap = directory / f"{name}.pcap"
    manifest = directory / f"{name}.json"
    # Capture only the workload's servers: others may be using loopback too.
    ports = _free_ports(SERVER_PORTS)
    bpf = " or ".join(f"tcp port {p}" for p in ports)
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-B", "65536", "-U", "-s", "0", "-w", str(pcap), bpf],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # tcpdump reports "listening on lo" on stderr once it captures
        line = proc.stderr.readline()
        if b"listening" not in line:
            raise RuntimeError(f"tcpdump did not start: {line!r}")
        time.sleep(0.2)
        subprocess.run(
            [sys.executable, "-m", "tests.support.pcaps", str(manifest), str(seed), str(chatty), *map(str, ports)],
            check=True,
            cwd=REPO,
            timeout=120,
        )
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    # "N packets dropped by kernel": the capture must be complete to be a reference.
    for line in err.decode(errors="replace").splitlines():
        if "dropped by kernel" in line and not line.startswith("0 "):
            raise RuntimeError(f"tcpdump lost packets: {line}")
    # A loaded machine can make loopback itself drop and resend segments; the
    # reference recording must be clean, so ask tshark and record again if not.
    resent = _tshark_resent_frames(pcap)
    if resent:
        raise RuntimeError(f"the recording has {resent} retransmitted or reordered segments")
    return pcap


def _tshark_resent_frames(pcap: Path) -> int:
    flagged = "tcp.analysis.retransmission or tcp.analysis.out_of_order or tcp.analysis.lost_segment"
    out = subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-Y", flagged, "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, check=True,
    )
    return len(out.stdout.split())


def load_manifest(pcap: Path) -> list[RecordedConnection]:
    entries = json.loads(pcap.with_suffix(".json").read_text())
    return [
        RecordedConnection(
            e["family"],
            tuple(e["client"]),
            tuple(e["server"]),
            bytes.fromhex(e["client_bytes"]),
            bytes.fromhex(e["server_bytes"]),
            e["close"],
        )
        for e in entries
    ]


# -- tshark ----------------------------------------------------------------------

# tshark's output per (file, size, mtime, arguments): many tests ask tshark
# the same question about the same bundled capture, and each run costs at
# least a third of a second of startup. Outputs are str (immutable), and the
# key changes whenever the file is rewritten. Only files in the repository
# (captures/, tests/fixtures/) are cached: the files tests write under /tmp
# are read once, and keeping them would only grow memory.
_TSHARK_RUNS: dict[tuple, tuple[int, str]] = {}


def file_key(path: str | Path) -> tuple[str, int, int] | None:
    """(resolved path, size, mtime_ns), which identifies one state of a file
    in the repository; None for a file elsewhere (not to be cached)."""
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(REPO):
        return None
    stat = resolved.stat()
    return str(resolved), stat.st_size, stat.st_mtime_ns


def tshark_output(path: str | Path, args: list[str], check: bool = True) -> str:
    """stdout of `tshark -r PATH ARGS...` (text), run once per file state and
    argument list in this process. With `check`, a non-zero exit raises
    CalledProcessError (as subprocess.run(check=True) does)."""
    command = ["tshark", "-r", str(path), *args]
    where = file_key(path)
    key = (where, tuple(args))
    if where is None or key not in _TSHARK_RUNS:
        run = subprocess.run(command, capture_output=True, text=True)
        if where is None:
            return _checked(check, run.returncode, command, run.stdout)
        _TSHARK_RUNS[key] = (run.returncode, run.stdout)
    returncode, stdout = _TSHARK_RUNS[key]
    return _checked(check, returncode, command, stdout)


def _checked(check: bool, returncode: int, command: list[str], stdout: str) -> str:
    if check and returncode != 0:
        raise subprocess.CalledProcessError(returncode, command, stdout)
    return stdout


TSHARK_FIELDS = [
    "frame.number",
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "tcp.srcport",
    "ip.dst",
    "ipv6.dst",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.flags",
    "tcp.len",
    "tcp.stream",
]


def epoch_ns(text: str) -> int:
    """tshark's frame.time_epoch text ("1700000000.123456000") as exact integer nanoseconds."""
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def tshark_segments(path: Path, extra_fields: list[str] | None = None) -> list[dict]:
    """One dict per TCP frame as tshark decodes it; `extra_fields` are kept
    as text under their own names."""
    extra = list(extra_fields or [])
    args = ["-n", "-Y", "tcp", "-T", "fields", "-E", "separator=\t", "-E", "occurrence=l"]
    for f in TSHARK_FIELDS + extra:
        args += ["-e", f]
    out = tshark_output(path, args)
    rows = []
    for line in out.splitlines():
        v = line.split("\t")
        row = {
            "frame": int(v[0]),
            "ts": epoch_ns(v[1]) if v[1] else None,  # None: the packet has no time (pcapng simple block)
            "src": v[2] or v[3],
            "sport": int(v[4]),
            "dst": v[5] or v[6],
            "dport": int(v[7]),
            "seq": int(v[8]),
            "ack": int(v[9]),
            "flags": int(v[10], 16),
            "len": int(v[11]),
            "stream": int(v[12]),
        }
        for name, value in zip(extra, v[len(TSHARK_FIELDS) :]):
            row[name] = value
        rows.append(row)
    return rows


def tshark_follow(path: Path, streams: list[int]) -> dict[int, tuple[tuple[str, int], bytes, bytes]]:
    """tshark's reassembled bytes of TCP streams, from one tshark run:
    stream -> (node0, node0->node1 bytes, node1->node0 bytes)."""
    args = ["-n", "-q"]
    for n in streams:
        args += ["-z", f"follow,tcp,raw,{n}"]
    out = tshark_output(path, args)
    result: dict[int, tuple[tuple[str, int], bytes, bytes]] = {}
    stream = None
    node0: tuple[str, int] | None = None
    forward, backward = bytearray(), bytearray()

    def done() -> None:
        if stream is not None and node0 is not None:
            result[stream] = (node0, bytes(forward), bytes(backward))

    for line in out.splitlines():
        if line.startswith("Filter: tcp.stream eq "):
            done()
            stream, node0 = int(line.rsplit(" ", 1)[1]), None
            forward, backward = bytearray(), bytearray()
        elif line.startswith("Node 0:"):
            host, _, port = line.split(":", 1)[1].strip().rpartition(":")
            node0 = (host.strip("[]"), int(port))
        elif line.startswith(("Node 1:", "=", "Follow:")) or node0 is None:
            continue
        elif line.startswith("\t"):
            backward += bytes.fromhex(line.strip())
        elif line.strip():
            forward += bytes.fromhex(line.strip())
    done()
    return result


def _main(manifest: str, seed: str, chatty: str, *ports: str) -> None:
    conns = generate_traffic([int(p) for p in ports], int(seed), int(chatty))
    Path(manifest).write_text(
        json.dumps(
            [
                {
                    "family": c.family,
                    "client": list(c.client),
                    "server": list(c.server),
                    "client_bytes": c.client_bytes.hex(),
                    "server_bytes": c.server_bytes.hex(),
                    "close": c.close,
                }
                for c in conns
            ]
        )
    )


if __name__ == "__main__":
    _main(*sys.argv[1:])
    os._exit(0)


def compare_with_tshark(path: Path) -> tuple[int, list[str]]:
    """Read `path` with kdissect and with tshark; return (frames compared,
    descriptions of frames that differ)."""
    from kdissect.wire.capture import read_segments

    ours = {(s.capture_index, s.frame_number): s for s in read_segments([path])}
    theirs = tshark_segments(path)
    problems = []
    if len(ours) != len(theirs):
        problems.append(f"{len(ours)} TCP segments read, tshark has {len(theirs)}")
    for t in theirs:
        s = ours.get((0, t["frame"]))
        if s is None:
            problems.append(f"frame {t['frame']}: missing")
            continue
        mine = (s.src, s.sport, s.dst, s.dport, s.seq, s.ack, s.flags, s.payload_len)
        ref = (t["src"], t["sport"], t["dst"], t["dport"], t["seq"], t["ack"], t["flags"], t["len"])
        # exact nanoseconds; tshark truncates ticks finer than 1 ns or of 2^-k s
        # where kdissect rounds to the nearest, so those may be 1 ns later here
        if mine != ref or not 0 <= s.ts - (t["ts"] or 0) <= 1:
            problems.append(f"frame {t['frame']}: {mine} {s.ts!r} != tshark {ref} {t['ts']!r}")
    return len(theirs), problems


_RECORDING: dict[str, Path] = {}


def shared_recording() -> Path:
    """One loopback recording per test process (about a second to make)."""
    if "loop" not in _RECORDING:
        import tempfile

        import atexit

        directory = Path(tempfile.mkdtemp(prefix="kdissect-loop-"))
        atexit.register(shutil.rmtree, directory, True)
        for attempt in range(5):  # a loaded machine can make tcpdump or loopback drop packets
            try:
                _RECORDING["loop"] = record_loopback(directory)
                break
            except RuntimeError:
                if attempt == 4:
                    raise
    return _RECORDING["loop"]


def lab_captures() -> list[Path]:
    """The capture lab's recordings in captures/ (absent early in the project)."""
    return sorted((REPO / "captures").glob("*.pcap"))


def packet_count(path: Path) -> int:
    """Packets in a capture as Wireshark's file library (wiretap, what tshark
    reads with) counts them, whole records up to any damage: `capinfos -c`,
    which gives the count tshark prints frames for without starting tshark's
    dissectors (50 times faster on the bundled captures)."""
    out = subprocess.run(["capinfos", "-c", "-M", str(path)], capture_output=True, text=True).stdout
    counts = [line.split(":", 1)[1] for line in out.splitlines() if line.startswith("Number of packets:")]
    if len(counts) != 1:
        raise RuntimeError(f"capinfos gave no packet count for {path}")
    return int(counts[0])


def reassemble(paths, **options):
    """Run the Reassembler over a capture set: (the calls each direction's
    sink heard by (conn id, direction), connections by id, close reasons by
    id, stats, the recorded events: tests.support.recording)."""
    from kdissect.wire.capture import read_segments
    from kdissect.wire.reassembly import Reassembler
    from tests.support.recording import Closed, Delivered, Opened, RecordingListener

    listener = RecordingListener()
    r = Reassembler(listener, **options)
    for seg in read_segments(paths):
        r.feed(seg)
    r.finish()
    events = listener.take()
    calls: dict[tuple[int, int], list] = {}
    conns, reasons = {}, {}
    for e in events:
        if isinstance(e, Opened):
            conns[e.conn.id] = e.conn
        elif isinstance(e, Delivered):
            calls.setdefault((e.conn.id, e.direction), []).append(e.call)
        elif isinstance(e, Closed):
            reasons[e.conn.id] = e.reason
    return calls, conns, reasons, r.stats, events


def many_connections_capture(path: Path, count: int, shape: str = "handshake") -> Path:
    """A many-connections benchmark shape (benchmarks/manyconn.py: "handshake",
    four packets a connection, or "syn-data", two) with `count` connections."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("manyconn", REPO / "benchmarks" / "manyconn.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.write_capture(path, count, shape)
    return path
