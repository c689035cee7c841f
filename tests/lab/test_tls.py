"""TLS decryption of real Kafka traffic, checked against tshark.

A Tansu broker behind socat's OpenSSL listener (the broker advertises the TLS
port), kafka-python clients with `SSLContext.keylog_filename`, tcpdump on the
TLS port only. Each client runs in its own process so that an OPENSSL_CONF
can pick its TLS 1.3 suite (Python cannot choose those) or turn off
encrypt-then-MAC. The oracle is tshark with the same key log: `-z
follow,tls,raw` gives each connection's decrypted bytes per direction, and
kdissect's plaintext must equal them byte for byte; tshark also names each
connection's suite, which must be every suite listed here.

Run as a script to (re)write the small committed captures:
    .venv/bin/python -m tests.lab.test_tls captures/tls
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from kdissect.wire.capture import read_segments
from kdissect.wire.reassembly import Reassembler
from kdissect.conn.tls import KeyLog, TlsStats, read_keylog_file
from tests.support.recording import Call, Delivered, Opened, RecordingListener
from tests.support.tls_sinks import CollectedTls
from tools.lab.net import free_port, wait_for_listener
from tools.lab.tansu import tansu_binary
from tools.lab.tcpdump import tcpdump

pytestmark = [pytest.mark.broker, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TLS13_SUITES = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"]


@dataclass(frozen=True)
class Scenario:
    name: str
    tls12_ciphers: str = ""  # OpenSSL cipher string: forces TLS 1.2 with these suites
    tls13_suite: str = ""  # forces TLS 1.3 with this suite
    encrypt_then_mac: bool = True
    size: int = 3000  # bytes per produced record (over 16 KiB: records span segments)
    expect_suite: str = ""  # IANA name tshark must show


SCENARIOS = [
    *(Scenario(f"tls13-{s.lower()}", tls13_suite=s, expect_suite=s, size=40000 if "GCM" in s else 3000)
      for s in TLS13_SUITES),
    Scenario("tls12-ecdhe-aes128-gcm", "ECDHE-RSA-AES128-GCM-SHA256",
             expect_suite="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", size=40000),
    Scenario("tls12-ecdhe-aes256-gcm", "ECDHE-RSA-AES256-GCM-SHA384",
             expect_suite="TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    Scenario("tls12-chacha20", "ECDHE-RSA-CHACHA20-POLY1305",
             expect_suite="TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    Scenario("tls12-aes128-ccm", "AES128-CCM", expect_suite="TLS_RSA_WITH_AES_128_CCM"),
    Scenario("tls12-aes128-ccm8", "AES128-CCM8", expect_suite="TLS_RSA_WITH_AES_128_CCM_8"),
    Scenario("tls12-cbc-sha256-etm", "ECDHE-RSA-AES128-SHA256",
             expect_suite="TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", size=40000),
    Scenario("tls12-cbc-sha384-mte", "ECDHE-RSA-AES256-SHA384", encrypt_then_mac=False,
             expect_suite="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", size=40000),
    Scenario("tls12-cbc-sha1-mte", "ECDHE-RSA-AES128-SHA", encrypt_then_mac=False,
             expect_suite="TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
]

# The client: admin (create topic), producer (3 records), fetcher (assign + seek).
CLIENT = r'''
import json, ssl, sys
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
bootstrap, keylog, ciphers, tls13, topic, size = sys.argv[1:7]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.keylog_filename = keylog
if ciphers:
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
if tls13:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
common = dict(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=ctx)
admin = KafkaAdminClient(client_id="tls-admin", **common)
admin.create_topics([NewTopic(topic, 1, 1)])
admin.close()
producer = KafkaProducer(client_id="tls-producer", linger_ms=0, **common)
for i in range(3):
    producer.send(topic, key=b"k%d" % i, value=bytes([65 + i]) * int(size)).get(timeout=30)
producer.close()
consumer = KafkaConsumer(client_id="tls-fetcher", enable_auto_commit=False, consumer_timeout_ms=5000, **common)
tp = TopicPartition(topic, 0)
consumer.assign([tp])
consumer.seek(tp, 0)
got = 0
for message in consumer:
    got += 1
    if got == 3:
        break
consumer.close()
print(json.dumps({"consumed": got}))
'''


def openssl_conf(path: Path, ciphersuites: str = "", encrypt_then_mac: bool = True) -> Path:
    """An OpenSSL config whose system defaults pick TLS 1.3 suites and options."""
    lines = ["openssl_conf = openssl_init", "[openssl_init]", "ssl_conf = ssl_sect", "[ssl_sect]",
             "system_default = system_default_sect", "[system_default_sect]"]
    if ciphersuites:
        lines.append(f"Ciphersuites = {ciphersuites}")
    if not encrypt_then_mac:
        lines.append("Options = -EncryptThenMac")
    path.write_text("\n".join(lines) + "\n")
    return path


def make_certificate(directory: Path) -> Path:
    """A throwaway self-signed RSA certificate and key in one PEM file."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True, timeout=60)
    pem = directory / "server.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    return pem


@contextlib.contextmanager
def _process(cmd: list[str], env: dict | None = None, log: Path | None = None) -> Iterator[subprocess.Popen]:
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if log:
            out.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def tls_kafka(workdir: Path) -> Iterator[int]:
    """Tansu on a free port behind socat's TLS listener; yields the TLS port."""
    tansu_port, tls_port = free_port(), free_port()
    pem = make_certificate(workdir)
    server_conf = openssl_conf(workdir / "server.cnf", ":".join(TLS13_SUITES))
    tansu = [str(tansu_binary()), "broker", "--listener-url", f"tcp://127.0.0.1:{tansu_port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{tls_port}", "--storage-engine", "memory://tansu/"]
    socat = ["socat", f"OPENSSL-LISTEN:{tls_port},bind=127.0.0.1,reuseaddr,fork,cert={pem},verify=0,cipher=ALL",
             f"TCP:127.0.0.1:{tansu_port}"]
    with _process(tansu, log=workdir / "tansu.log"):
        wait_for_listener("127.0.0.1", tansu_port)
        with _process(socat, env=dict(os.environ, OPENSSL_CONF=str(server_conf)), log=workdir / "socat.log"):
            wait_for_listener("127.0.0.1", tls_port)
            yield tls_port


def run_client(scenario: Scenario, tls_port: int, keylog: Path, workdir: Path) -> None:
    env = dict(os.environ)
    if scenario.tls13_suite or not scenario.encrypt_then_mac:
        conf = openssl_conf(workdir / f"{scenario.name}.cnf", scenario.tls13_suite, scenario.encrypt_then_mac)
        env["OPENSSL_CONF"] = str(conf)
    topic = scenario.name.replace("_", "-")
    done = subprocess.run([sys.executable, "-c", CLIENT, f"127.0.0.1:{tls_port}", str(keylog),
                           scenario.tls12_ciphers, "1" if scenario.tls13_suite else "", topic, str(scenario.size)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, f"{scenario.name}: {done.stderr[-3000:]}"
    assert '"consumed": 3' in done.stdout, done.stdout


def record_scenarios(scenarios: list[Scenario], pcap: Path, keylog: Path, workdir: Path) -> int:
    """Run the scenarios' clients while capturing the TLS port; returns it."""
    with tls_kafka(workdir) as tls_port:
        with tcpdump(pcap, tls_port):
            for scenario in scenarios:
                run_client(scenario, tls_port, keylog, workdir)
    return tls_port


class ConnKey(NamedTuple):
    """One connection to the TLS port: its client port, and how many earlier
    connections in the capture came from that port (a long lab run reuses
    ephemeral ports, so the port alone may name two connections)."""
    client_port: int
    reuse: int = 0

    def __str__(self) -> str:
        return f":{self.client_port}" + (f" (connection {self.reuse + 1} from it)" if self.reuse else "")


class _KeyMaker:
    """ConnKeys handed out in the capture order of the connections."""

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def __call__(self, client_port: int) -> ConnKey:
        reuse = self._seen.get(client_port, 0)
        self._seen[client_port] = reuse + 1
        return ConnKey(client_port, reuse)


# -- kdissect's side --------------------------------------------------------------

@dataclass
class Decrypted:
    client_port: int
    plaintext: list[bytearray]  # per direction (0 = client)
    gaps: list[int]
    stats: TlsStats
    gap_at: list[int] = None  # type: ignore[assignment]  # plaintext length when the first gap came


def connection_calls(pcap: Path, port: int) -> dict[ConnKey, list[tuple[int, Call]]]:
    """The calls the reassembler makes on the sinks of every TCP connection
    to `port`, in capture order: connection -> [(direction, call)]."""
    listener = RecordingListener()
    reassembler = Reassembler(listener)
    for segment in read_segments([pcap]):
        reassembler.feed(segment)
    reassembler.finish()
    by_id: dict[int, list[tuple[int, Call]]] = {}
    out: dict[ConnKey, list[tuple[int, Call]]] = {}
    key_of = _KeyMaker()
    for event in listener.take():
        if isinstance(event, Opened):
            assert event.conn.responder[1] == port
            by_id[event.conn.id] = out.setdefault(key_of(event.conn.initiator[1]), [])
        elif isinstance(event, Delivered):
            by_id[event.conn.id].append((event.direction, event.call))
    return out


def replay(keylog: KeyLog, calls: list[tuple[int, Call]], client_port: int = 0) -> Decrypted:
    """One connection's calls made again on a TlsConnection's ciphertext sinks."""
    tls = CollectedTls(keylog)
    result = Decrypted(client_port, [bytearray(), bytearray()], [0, 0], TlsStats())

    def take(direction: int, call: Call) -> None:
        assert call.offset == len(result.plaintext[direction]) + result.gaps[direction]
        if call.kind == "gap":
            if not result.gaps[direction]:
                result.gap_at[direction] = len(result.plaintext[direction])
            result.gaps[direction] += call.length
        else:
            result.plaintext[direction] += call.data

    result.gap_at = [0, 0]
    for direction, call in calls:
        call.replay(tls.ciphertext[direction])
        for plain in tls.plaintext(direction):
            take(direction, plain)
    for direction, plain in tls.finish():
        take(direction, plain)
    result.stats = tls.stats
    return result


def decrypt_capture(pcap: Path, keylog: KeyLog, port: int) -> dict[ConnKey, Decrypted]:
    """Every TCP connection to `port` decrypted."""
    return {key: replay(keylog, calls, key.client_port) for key, calls in connection_calls(pcap, port).items()}


# -- tshark's side ----------------------------------------------------------------

def tshark_follow(pcap: Path, keylog: Path, port: int) -> dict[ConnKey, tuple[bytes, bytes]]:
    """tshark's decrypted bytes per connection: connection -> (client's, server's)."""
    common = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-d", f"tcp.port=={port},tls"]
    # each stream's client port, from its SYN
    syns = subprocess.run(common + ["-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields",
                                    "-e", "tcp.stream", "-e", "tcp.srcport"],
                          capture_output=True, text=True, timeout=300, check=True).stdout
    client_ports = {int(stream): int(sport) for stream, sport in (line.split("\t") for line in syns.splitlines())}
    # tshark numbers streams in the order they first appear, as the reassembler opens them
    key_of = _KeyMaker()
    keys = {stream: key_of(client_ports[stream]) for stream in sorted(client_ports)}
    follow = []
    for stream in sorted(client_ports):
        follow += ["-z", f"follow,tls,raw,{stream}"]
    text = subprocess.run(common + ["-q", *follow], capture_output=True, text=True, timeout=300, check=True).stdout
    out: dict[ConnKey, tuple[bytes, bytes]] = {}
    for block in text.split("Follow: tls,raw")[1:]:
        stream = int(re.search(r"tcp\.stream eq (\d+)", block).group(1))
        node0 = re.search(r"Node 0: \S*:(\d+)", block)
        # tshark 4.0 names node 0 the first data sender and may leave node 1 as ":0"
        client_is_node0 = node0 is not None and int(node0.group(1)) != port
        sides = [bytearray(), bytearray()]
        for line in block.splitlines():
            if re.fullmatch(r"\t?[0-9a-f]+", line):
                sides[1 if line.startswith("\t") else 0] += bytes.fromhex(line.strip())
        client, server = (sides[0], sides[1]) if client_is_node0 else (sides[1], sides[0])
        out[keys[stream]] = (bytes(client), bytes(server))
    return out


def assert_same_as_tshark(pcap: Path, keylog_path: Path, port: int) -> dict[ConnKey, Decrypted]:
    ours = decrypt_capture(pcap, read_keylog_file(keylog_path), port)
    theirs = tshark_follow(pcap, keylog_path, port)
    assert set(ours) == set(theirs)
    for key, (client, server) in theirs.items():
        mine = ours[key]
        assert bytes(mine.plaintext[0]) == client, f"client bytes of {key}"
        assert bytes(mine.plaintext[1]) == server, f"server bytes of {key}"
        assert mine.gaps == [0, 0], f"gaps in {key}"
    return ours


def tshark_suite_names(pcap: Path, port: int) -> set[str]:
    """The IANA names of the suites tshark saw chosen (ServerHello)."""
    text = subprocess.run(["tshark", "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls", "-Y",
                           "tls.handshake.type == 2", "-V"], capture_output=True, text=True, timeout=300,
                          check=True).stdout
    return {m.group(1) for m in re.finditer(r"Cipher Suite: (TLS_\w+) \(0x", text)}


# -- tests --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka_tls_capture(tmp_path_factory) -> tuple[Path, Path, int]:
    for tool in ("socat", "tshark", "tcpdump", "openssl"):
        assert shutil.which(tool), f"{tool} is needed (bash tools/setup.sh installs it)"
    workdir = tmp_path_factory.mktemp("tls-lab")
    pcap, keylog = workdir / "tls.pcap", workdir / "tls.keys"
    port = record_scenarios(SCENARIOS, pcap, keylog, workdir)
    return pcap, keylog, port


def test_every_suite_decrypts_like_tshark(kafka_tls_capture) -> None:
    pcap, keylog, port = kafka_tls_capture
    assert tshark_suite_names(pcap, port) == {s.expect_suite for s in SCENARIOS}
    ours = assert_same_as_tshark(pcap, keylog, port)
    total = TlsStats()
    for result in ours.values():
        total.add(result.stats)
    assert set(total.suites) == {s.expect_suite for s in SCENARIOS}
    assert total.connections == len(ours) >= 3 * len(SCENARIOS)
    assert total.decrypted == total.connections, total.summary_line()
    assert total.undecrypted_bytes == 0 and total.failed_records == 0
    assert total.tls13 == sum(1 for r in ours.values() if r.stats.tls13)
    assert total.plaintext_bytes == sum(len(r.plaintext[0]) + len(r.plaintext[1]) for r in ours.values())
    # the 40 kB records: Kafka requests over several TLS records, records over several segments
    assert total.plaintext_bytes > 3 * 3 * 40000


def test_wrong_key_is_counted_not_raised(kafka_tls_capture, tmp_path) -> None:
    pcap, keylog, port = kafka_tls_capture
    broken = []
    for line in keylog.read_text().splitlines():
        if line.startswith("#"):  # Python's header line
            continue
        label, random, secret = line.split()
        flipped = format(int(secret[:2], 16) ^ 0x01, "02x") + secret[2:]
        broken.append(f"{label} {random} {flipped}")
    bad = tmp_path / "bad.keys"
    bad.write_text("\n".join(broken) + "\n")
    ours = decrypt_capture(pcap, read_keylog_file(bad), port)
    total = TlsStats()
    for result in ours.values():
        total.add(result.stats)
        assert not result.plaintext[0] and not result.plaintext[1]
    assert total.undecrypted == total.connections and total.records == 0
    assert total.failed_records >= total.connections
    assert total.reasons["decryption failed"] == total.connections


def test_missing_keys_are_counted(kafka_tls_capture) -> None:
    pcap, keylog, port = kafka_tls_capture
    ours = decrypt_capture(pcap, KeyLog(), port)
    total = TlsStats()
    for result in ours.values():
        total.add(result.stats)
    assert total.undecrypted == total.connections
    assert total.reasons == {"no key for this client random": total.connections}
    assert total.undecrypted_bytes > 3 * 3 * 40000
    line = total.summary_line()
    assert line.startswith(f"tls: {total.connections} connections, 0 decrypted, {total.connections} not decrypted")
    assert f"{total.connections} no key for this client random" in line


def _pcapng_blocks(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(block type, body) of a little-endian pcapng file, walked here independently."""
    pos = 0
    assert data[8:12] == bytes.fromhex("4d3c2b1a"), "little-endian section expected"
    while pos + 12 <= len(data):
        kind = int.from_bytes(data[pos:pos + 4], "little")
        total = int.from_bytes(data[pos + 4:pos + 8], "little")
        yield kind, data[pos + 8:pos + total - 4]
        pos += total


def test_secrets_injected_in_pcapng(kafka_tls_capture, tmp_path) -> None:
    from kdissect.conn.tls import DSB_TLS_KEY_LOG, parse_decryption_secrets

    pcap, keylog, port = kafka_tls_capture
    injected = tmp_path / "injected.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{keylog}", str(pcap), str(injected)], check=True,
                   capture_output=True, timeout=120)
    blocks = [body for kind, body in _pcapng_blocks(injected.read_bytes()) if kind == 0x0000000A]
    assert len(blocks) == 1
    body = blocks[0]
    secrets_type = int.from_bytes(body[0:4], "little")
    length = int.from_bytes(body[4:8], "little")
    assert secrets_type == DSB_TLS_KEY_LOG
    from_block = parse_decryption_secrets(body[8:8 + ((length + 3) & ~3)], secrets_type)  # padding included
    assert from_block == read_keylog_file(keylog)
    assert parse_decryption_secrets(body[8:8 + length], 0x57474b4c) == KeyLog()  # WireGuard: not ours
    # the pcapng (secrets and all) through the capture reader decrypts the same
    ours = decrypt_capture(injected, from_block, port)
    theirs = tshark_follow(injected, keylog, port)
    for key, (client, server) in theirs.items():
        assert (bytes(ours[key].plaintext[0]), bytes(ours[key].plaintext[1])) == (client, server)


def _record_starts(stream: bytes) -> list[int]:
    """Record boundaries of a TLS byte stream, walked here from its first byte."""
    starts, pos = [], 0
    while pos + 5 <= len(stream):
        starts.append(pos)
        pos += 5 + int.from_bytes(stream[pos + 3:pos + 5], "big")
    return starts


def _with_loss(calls: list[tuple[int, Call]], direction: int, low: int, high: int) -> list[tuple[int, Call]]:
    """The calls with stream bytes [low, high) of `direction` turned into a gap."""
    out = []
    for d, c in calls:
        end = c.offset + c.length
        if d != direction or end <= low or c.offset >= high:
            out.append((d, c))
            continue
        if c.offset < low:
            out.append((d, Call("data", c.offset, low - c.offset, c.data[:low - c.offset], c.stamp)))
        start, stop = max(low, c.offset), min(high, end)
        out.append((d, Call("gap", start, stop - start, b"", c.stamp)))
        if end > high:
            out.append((d, Call("data", high, end - high, c.data[high - c.offset:], c.stamp)))
    return out


@pytest.mark.parametrize("suite,exact", [
    ("TLS_AES_128_GCM_SHA256", True),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", True),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", False),  # padding: the gap length is an estimate
])
@pytest.mark.parametrize("span", ["inside-one-record", "across-records"])
def test_lost_bytes_resynchronise(kafka_tls_capture, suite: str, exact: bool, span: str) -> None:
    """Bytes lost in the middle of a 40 kB produce: the plaintext before and
    after the loss equal tshark's (from the full capture) and, for AEAD
    suites, the gap call has exactly the length of the lost plaintext."""
    pcap, keylog_path, port = kafka_tls_capture
    keylog = read_keylog_file(keylog_path)
    theirs = tshark_follow(pcap, keylog_path, port)
    all_calls = connection_calls(pcap, port)
    # the connection of this suite whose client sent the most: the producer
    candidates = [key for key, calls in all_calls.items()
                  if suite in replay(keylog, calls).stats.suites]
    key = max(candidates, key=lambda k: len(theirs[k][0]))
    calls = all_calls[key]
    stream = b"".join(c.data for d, c in calls if d == 0)
    starts = _record_starts(stream)
    middle = len(starts) // 2
    if span == "inside-one-record":
        low, high = starts[middle] + 40, starts[middle] + 140
    else:  # from inside one record to inside the next but one: boundaries lost
        low, high = starts[middle] + 40, starts[middle + 2] + 40
    result = replay(keylog, _with_loss(calls, 0, low, high), key.client_port)
    full = theirs[key][0]
    ours = bytes(result.plaintext[0])
    gap = result.gaps[0]
    assert gap > 0 and result.stats.resyncs >= (1 if span == "across-records" else 0)
    # ours is: the bytes before the loss, the gap, the bytes after
    before = _plaintext_before_gap(result)
    after = ours[len(before):]
    assert full.startswith(before) and full.endswith(after) and len(after) > 1000
    if exact:
        assert len(before) + gap + len(after) == len(full)
    else:
        assert abs(len(before) + gap + len(after) - len(full)) <= 16 * (2 if span == "inside-one-record" else 3)
    assert bytes(result.plaintext[1]) == theirs[key][1]  # the other side untouched
    assert result.stats.partly_decrypted == 1 and result.stats.lost_bytes == high - low


def _plaintext_before_gap(result: Decrypted) -> bytes:
    return bytes(result.plaintext[0][:result.gap_at[0]])


def write_committed_captures(directory: Path) -> None:
    """The small captures kept in captures/tls/ (see captures/README.md)."""
    directory.mkdir(parents=True, exist_ok=True)
    chosen = {
        "kafka_tls13": Scenario("tls13-aes128-gcm", tls13_suite="TLS_AES_128_GCM_SHA256", size=2000),
        "kafka_tls12_gcm": Scenario("tls12-gcm", "ECDHE-RSA-AES128-GCM-SHA256", size=2000),
        "kafka_tls12_cbc": Scenario("tls12-cbc", "ECDHE-RSA-AES256-SHA384", encrypt_then_mac=False, size=2000),
    }
    for name, scenario in chosen.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            pcap, keylog = directory / f"{name}.pcap", directory / f"{name}.keys"
            keylog.unlink(missing_ok=True)
            record_scenarios([scenario], pcap, keylog, work)
            time.sleep(0.2)


if __name__ == "__main__":
    write_committed_captures(Path(sys.argv[1] if len(sys.argv) > 1 else "captures/tls"))
