"""The committed TLS captures (captures/tls/) decrypted with their key logs:
every connection equals tshark's decryption with the same key log. The
`kafka_*` ones are Tansu behind socat's OpenSSL (`python -m tests.lab.test_tls
captures/tls`); the `apache_*` ones are Apache Kafka's own JSSE listener, with
SASL_SSL logins and an aiokafka client (`python -m tools.lab.kafka_tls captures/tls`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.conn.tls import TlsStats, read_keylog_file
from tests.lab.test_tls import decrypt_capture, tshark_follow
from tests.support.paths import REPO

CAPTURES = REPO / "captures" / "tls"
NAMES = {"kafka_tls13": "TLS_AES_128_GCM_SHA256", "kafka_tls12_gcm": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
         "kafka_tls12_cbc": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"}


def server_port(pcap: Path) -> int:
    """The port the first SYN went to (tshark reads it)."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                          "-T", "fields", "-e", "tcp.dstport", "-c", "1"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return int(out.split()[0])


@pytest.mark.parametrize("name", sorted(NAMES))
def test_committed_capture_decrypts_like_tshark(name: str) -> None:
    pcap, keys = CAPTURES / f"{name}.pcap", CAPTURES / f"{name}.keys"
    port = server_port(pcap)
    ours = decrypt_capture(pcap, read_keylog_file(keys), port)
    theirs = tshark_follow(pcap, keys, port)
    assert set(ours) == set(theirs) and len(ours) >= 3
    total = TlsStats()
    for key, (client, server) in theirs.items():
        assert (bytes(ours[key].plaintext[0]), bytes(ours[key].plaintext[1])) == (client, server)
        total.add(ours[key].stats)
    assert total.decrypted == total.connections and dict(total.suites) == {NAMES[name]: total.connections}
    assert b"tls-producer" in b"".join(bytes(r.plaintext[0]) for r in ours.values())  # Kafka client ids inside


def _encrypted_record_bytes(pcap: Path, port: int) -> int:
    """tshark's TLS 1.2 records after each direction's ChangeCipherSpec
    (application data, the encrypted Finished, encrypted alerts), headers
    included: what stays encrypted without keys."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls", "-Y", "tls",
                          "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tls.record.content_type",
                          "-e", "tls.record.length"], capture_output=True, text=True, timeout=120, check=True).stdout
    encrypting: set[tuple[str, str]] = set()
    total = 0
    for line in out.splitlines():
        stream, source, types, lengths = line.split("\t")
        for content_type, length in zip(types.split(","), lengths.split(",")):
            if (stream, source) in encrypting:
                total += 5 + int(length)
            if content_type == "20":
                encrypting.add((stream, source))
    return total


@pytest.mark.parametrize("name", ["kafka_tls12_gcm", "kafka_tls12_cbc"])
def test_without_keys_stats_and_report_say_what_stayed_encrypted_and_why(name: str, tmp_path: Path) -> None:
    import json

    from kdissect import cli

    pcap = CAPTURES / f"{name}.pcap"
    expected = _encrypted_record_bytes(pcap, server_port(pcap))
    connections = len({line for line in subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-e", "tcp.stream"], capture_output=True, text=True,
        check=True).stdout.split()})
    out = subprocess.run([sys.executable, "-m", "kdissect", "stats", "--json", str(pcap)], capture_output=True,
                         text=True, check=True).stdout
    tls = json.loads(out)["tls"]
    assert (tls["connections"], tls["undecrypted"], tls["undecrypted_bytes"]) == (connections, connections, expected)
    assert tls["reasons"] == {"no key for this client random": connections}
    page = tmp_path / "report.html"
    assert cli.main(["report", str(pcap), "-o", str(page), "-q"]) == 0
    row = page.read_text().split("TLS connections not decrypted", 1)[1].split("</tr>", 1)[0]
    assert f'data-value="{expected}"' in row and f"{connections} no key for this client random" in row


# -- Apache Kafka's own TLS listener (JSSE), recorded by `python -m tools.lab.kafka_tls captures/tls` --

# the suite tshark must see chosen in every ServerHello, and the TLS version
APACHE = {"apache_tls13": ("TLS_AES_256_GCM_SHA384", "1.3"),
          "apache_tls12_cbc": ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "1.2"),
          "apache_sasl_ssl": ("TLS_AES_256_GCM_SHA384", "1.3"),
          "apache_tls_aiokafka": ("TLS_AES_256_GCM_SHA384", "1.3")}  # aiokafka's clients, not kafka-python's
PRODUCE, FETCH, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 1, 17, 36


def _tshark_streams(pcap: Path) -> int:
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-T", "fields", "-e", "tcp.stream"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return len(set(out.split()))


def _tshark_kafka_fields(pcap: Path, keys: Path, port: int, *fields: str) -> list[list[str]]:
    """Per decrypted Kafka packet, the given fields (tshark with the key log)."""
    command = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls",
               "-d", f"tls.port=={port},kafka", "-Y", "kafka", "-T", "fields", "-E", "occurrence=a"]
    for field in fields:
        command += ["-e", field]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.parametrize("name", sorted(APACHE))
def test_apache_kafka_tls_listener_decrypts_like_tshark(name: str) -> None:
    """JSSE's records, byte for byte: each connection's plaintext equals
    tshark's decryption with the same key log, in the suite tshark names."""
    from tests.lab.test_tls import tshark_suite_names

    pcap, keys = CAPTURES / f"{name}.pcap", CAPTURES / f"{name}.keys"
    suite, version = APACHE[name]
    port = server_port(pcap)
    assert tshark_suite_names(pcap, port) == {suite}
    ours = decrypt_capture(pcap, read_keylog_file(keys), port)
    theirs = tshark_follow(pcap, keys, port)
    assert set(ours) == set(theirs) and len(ours) == _tshark_streams(pcap) == 4
    total = TlsStats()
    for key, (client, server) in theirs.items():
        assert client and server, f"{key}: tshark decrypted nothing (key log?)"
        assert (bytes(ours[key].plaintext[0]), bytes(ours[key].plaintext[1])) == (client, server)
        total.add(ours[key].stats)
    assert total.decrypted == total.connections == 4 and dict(total.suites) == {suite: 4}
    assert total.tls13 == (4 if version == "1.3" else 0)
    assert total.undecrypted_bytes == 0 and total.failed_records == 0
    assert f"{name}-producer".encode() in b"".join(bytes(r.plaintext[0]) for r in ours.values())


@pytest.mark.parametrize("name", sorted(APACHE))
def test_apache_kafka_messages_inside_tls_equal_tsharks(name: str, tshark: str) -> None:
    """Every Kafka message tshark finds after decrypting is in kdissect's
    table with the same packets and times; requests and responses tshark
    sees on one connection with one correlation id are one exchange."""
    from kdissect.conn.pipeline import analyze
    from tests.support.tshark import compare_with_tshark, kafka_pdus

    pcap, keys = CAPTURES / f"{name}.pcap", CAPTURES / f"{name}.keys"
    port = server_port(pcap)
    exchanges, accounting = analyze([str(pcap)], (port,), tls_keylogs=[str(keys)])
    exchanges = list(exchanges)
    compare_with_tshark(tshark, pcap, (port,), exchanges, accounting.raw_sasl_frames, tls_keylog=keys)
    pdus = kafka_pdus(tshark, pcap, (port,), keys)
    requests = [p for p in pdus if p.is_request]
    # the clients produced 3 records one by one and fetched them back: tshark must see that much
    assert sum(p.api_key == PRODUCE for p in requests) >= 3 and sum(p.api_key == FETCH for p in requests) >= 1
    by_request = {(ex.client, ex.request_frame, ex.correlation_id): ex for ex in exchanges}
    responses = {(p.tcp_stream, p.correlation_id): p for p in pdus if not p.is_request}
    for request in requests:
        response = responses[(request.tcp_stream, request.correlation_id)]
        ex = by_request[(request.src, request.frame, request.correlation_id)]
        assert (ex.response_frame, ex.response_ts) == (response.frame, response.ts), f"frame {request.frame}"
    assert len(exchanges) == len(requests) == len(responses)
    assert all(ex.status == "ok" for ex in exchanges), [ex.problems for ex in exchanges if ex.status != "ok"]
    assert accounting.tls_connections == accounting.kafka_connections == 4 and accounting.encrypted_connections == 0
    assert accounting.tls_plaintext_bytes == accounting.stream_bytes > 0 and accounting.balance() == []


SASL_SSL = CAPTURES / "apache_sasl_ssl.pcap"
SASL_SSL_KEYS = CAPTURES / "apache_sasl_ssl.keys"


def _tshark_sasl(port: int) -> tuple[dict[int, str], dict[tuple[int, bool], bytes]]:
    """tshark's SaslHandshake mechanisms by request packet, and SaslAuthenticate
    tokens by (packet, is request)."""
    mechanisms, tokens = {}, {}
    for frame, dst, api_keys, mechanism, token in _tshark_kafka_fields(
            SASL_SSL, SASL_SSL_KEYS, port, "frame.number", "tcp.dstport", "kafka.api_key", "kafka.sasl_mechanism",
            "kafka.sasl_authentication"):
        # one Kafka message per packet in this capture (the client waits for each reply)
        assert "," not in api_keys, f"frame {frame}: several Kafka messages"
        if api_keys == str(SASL_HANDSHAKE) and int(dst) == port:
            mechanisms[int(frame)] = mechanism
        elif api_keys == str(SASL_AUTHENTICATE):
            empty = token == "<MISSING>"  # how tshark 4.0 shows zero-length bytes
            tokens[(int(frame), int(dst) == port)] = b"" if empty else bytes.fromhex(token.replace(":", ""))
    return mechanisms, tokens


def test_sasl_inside_tls_is_decoded() -> None:
    """SCRAM-SHA-512 and PLAIN logins inside TLS: the SaslHandshake mechanisms
    and every SaslAuthenticate token kdissect decodes equal tshark's; the
    PLAIN token holds the password the lab's client sent."""
    from kdissect.conn.pipeline import analyze
    from tools.lab.kafka_tls import PASSWORD, USER

    port = server_port(SASL_SSL)
    mechanisms, tokens = _tshark_sasl(port)
    assert sorted(mechanisms.values()) == ["PLAIN", "PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-512"]
    # SCRAM: two round trips per connection, PLAIN: one; requests and responses
    assert len(tokens) == 2 * (2 * 2 + 2 * 1)
    assert sum(token.endswith(f"\0{USER}\0{PASSWORD}".encode()) for token in tokens.values()) == 2
    exchanges, _ = analyze([str(SASL_SSL)], (port,), tls_keylogs=[str(SASL_SSL_KEYS)],
                           keep_apis=(SASL_HANDSHAKE, SASL_AUTHENTICATE))
    ours_mechanisms, ours_tokens = {}, {}
    for ex in exchanges:
        if ex.api_key == SASL_HANDSHAKE:
            ours_mechanisms[ex.request_frame] = ex.request.body.mechanism
            assert ex.response.body.error_code == 0
        elif ex.api_key == SASL_AUTHENTICATE:
            ours_tokens[(ex.request_frame, True)] = ex.request.body.auth_bytes
            ours_tokens[(ex.response_frame, False)] = ex.response.body.auth_bytes
            assert ex.response.body.error_code == 0 and ex.status == "ok"
    assert ours_mechanisms == mechanisms
    assert ours_tokens == tokens


def _cli(*args: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-m", "kdissect", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def test_sasl_inside_tls_stays_redacted_in_show_export_and_stats() -> None:
    """`show -v`, `export` and `stats` of the SASL_SSL capture: the logins are
    there, decrypted, but neither the password nor any SASL token (tshark's,
    in hex, as text or base64) reaches the output; every connection is
    decrypted. `--show-secrets` shows the PLAIN password: the check can fail."""
    import base64
    import json

    from tools.lab.kafka_tls import PASSWORD

    port = server_port(SASL_SSL)
    _, tokens = _tshark_sasl(port)
    secrets = [PASSWORD]
    for token in filter(None, tokens.values()):
        secrets += [token.hex(), token.decode("latin-1"), base64.b64encode(token).decode()]
        secrets += [part for part in token.decode("latin-1").replace("\0", ",").split(",") if len(part) > 8]
    secrets = sorted(set(secrets) - {"tls-lab-user", "apache_sasl_ssl"})  # the user name is not a secret
    common = [str(SASL_SSL), "-p", str(port), "--tls-keylog", str(SASL_SSL_KEYS)]
    show, show_err = _cli("show", "-v", *common)
    export, export_err = _cli("export", *common)
    stats_text, stats_err = _cli("stats", *common)
    stats = json.loads(_cli("stats", "--json", *common)[0])
    assert show.count("SaslAuthenticate v") == len(tokens) // 2 and show.count("<redacted") >= 6
    assert "mechanism: 'SCRAM-SHA-512'" in show and "mechanism: 'PLAIN'" in show
    assert sum(json.loads(row)["api_key"] == SASL_AUTHENTICATE for row in export.splitlines()) == len(tokens) // 2
    for text in (show, show_err, export, export_err, stats_text, stats_err, json.dumps(stats)):
        leaked = [secret for secret in secrets if secret in text]
        assert not leaked, f"{len(leaked)} secrets in the output"
    connections = _tshark_streams(SASL_SSL)
    assert f"tls: {connections} connections, {connections} decrypted, 0 not decrypted" in stats_text
    tls = stats["tls"]
    assert (tls["connections"], tls["decrypted"], tls["undecrypted"]) == (connections, connections, 0)
    revealed, _ = _cli("show", "-v", "--show-secrets", *common)
    assert PASSWORD in revealed


def test_aiokafka_records_inside_tls_equal_what_the_client_sent() -> None:
    """aiokafka's producer sent the lab's 3 records (keys k0..k2, values
    from `record_value`) and its consumer read them back at offsets 0..2
    (the recorder checked): `kdissect records` finds exactly those, produced
    and fetched, inside TLS."""
    import json

    from tools.lab.kafka_tls import RECORDS, record_value

    pcap, keys = CAPTURES / "apache_tls_aiokafka.pcap", CAPTURES / "apache_tls_aiokafka.keys"
    out, _ = _cli("records", str(pcap), "-p", str(server_port(pcap)), "--tls-keylog", str(keys), "-q")
    rows = [json.loads(line) for line in out.splitlines()]
    sent = [(i, f"k{i}", record_value(i)) for i in range(RECORDS)]
    for direction in ("produce", "fetch"):
        got = [(row["offset"], row["key"], row["value"]) for row in rows if row["direction"] == direction]
        assert [(offset, key, value.encode()) for offset, key, value in got] == sent, direction
    assert len(rows) == 2 * RECORDS and all(row["crc_ok"] and not row["problems"] for row in rows)
