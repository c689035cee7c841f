"""Handshake variants made with real OpenSSL on both ends (s_server, s_client),
decrypted and compared with tshark: TLS 1.2 resumption by session id and by
session ticket, TLS 1.3 PSK resumption, TLS 1.3 KeyUpdate (both ways), TLS 1.2
renegotiation.

The server is `openssl s_server -rev` (it answers each line reversed), so both
directions carry application data; the clients write their key logs.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kdissect.conn.tls import TlsStats, read_keylog_file
from tools.lab.net import free_port, wait_for_listener
from tools.lab.tcpdump import tcpdump
from tests.lab.test_tls import _process, decrypt_capture, make_certificate, tshark_follow

pytestmark = pytest.mark.broker


def s_client(port: int, keylog: Path, args: list[str], lines: list[str], pause: float = 0.4) -> str:
    """Run s_client, typing `lines` (s_client's commands: R renegotiate, K key update)."""
    proc = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-keylogfile", str(keylog),
                             *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(pause)
    for line in lines:
        proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        time.sleep(pause)
    proc.stdin.close()  # type: ignore[union-attr]
    out = proc.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
    proc.wait(timeout=30)
    return out


@pytest.fixture(scope="module")
def openssl_capture(tmp_path_factory):
    for tool in ("tshark", "tcpdump", "openssl"):
        assert shutil.which(tool), f"{tool} is needed"
    work = tmp_path_factory.mktemp("tls-openssl")
    pem = make_certificate(work)
    port = free_port()
    pcap, keylog = work / "openssl.pcap", work / "openssl.keys"
    server = ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pem), "-rev", "-client_renegotiation"]
    outputs = {}
    with _process(server, log=work / "s_server.log"):
        wait_for_listener("127.0.0.1", port)
        time.sleep(0.3)
        with tcpdump(pcap, port):
            s = [str(work / f"{name}.sess") for name in ("sid", "ticket", "psk")]
            outputs["sid1"] = s_client(port, keylog, ["-tls1_2", "-no_ticket", "-sess_out", s[0]], ["hello sid"])
            outputs["sid2"] = s_client(port, keylog, ["-tls1_2", "-no_ticket", "-sess_in", s[0]], ["again sid"])
            outputs["tk1"] = s_client(port, keylog, ["-tls1_2", "-sess_out", s[1]], ["hello ticket"])
            outputs["tk2"] = s_client(port, keylog, ["-tls1_2", "-sess_in", s[1]], ["again ticket"])
            outputs["psk1"] = s_client(port, keylog, ["-tls1_3", "-sess_out", s[2]], ["hello psk"])
            outputs["psk2"] = s_client(port, keylog, ["-tls1_3", "-sess_in", s[2]], ["again psk"])
            outputs["ku"] = s_client(port, keylog, ["-tls1_3"], ["before update", "K", "after update", "k",
                                                                 "after second update"])
            outputs["reneg"] = s_client(port, keylog, ["-tls1_2"], ["before reneg", "R", "after reneg"])
    return pcap, keylog, port, outputs


def test_handshake_variants_decrypt_like_tshark(openssl_capture) -> None:
    pcap, keylog, port, outputs = openssl_capture
    assert "Reused, TLSv1.2" in outputs["sid2"] and "Reused, TLSv1.2" in outputs["tk2"]
    assert "Reused, TLSv1.3" in outputs["psk2"]
    assert "KEYUPDATE" in outputs["ku"] and "RENEGOTIATING" in outputs["reneg"]
    ours = decrypt_capture(pcap, read_keylog_file(keylog), port)
    theirs = tshark_follow(pcap, keylog, port)
    assert set(ours) == set(theirs) and len(ours) == 8
    total = TlsStats()
    for key, (client, server) in theirs.items():
        mine = ours[key]
        total.add(mine.stats)
        assert bytes(mine.plaintext[0]) == client, str(key)
        assert bytes(mine.plaintext[1]) == server, str(key)
        assert client and server  # each connection carried data both ways
    assert total.decrypted == 8, total.summary_line()
    assert total.alerts == total.close_notifies  # no refusal: the renegotiation completed
    assert total.resumed == 3  # session id, ticket, PSK
    assert total.key_updates == 3  # K: the client's update and the server's answer; k: the client's
    assert total.renegotiations == 1
    assert total.tls12 == 5 and total.tls13 == 3
    # the reversed lines came back decrypted after each key change
    server_bytes = b"".join(bytes(r.plaintext[1]) for r in ours.values())
    for line in (b"after update", b"after second update"):
        assert line[::-1] in server_bytes
    # after the renegotiation the client's line went under the new keys
    client_bytes = b"".join(bytes(r.plaintext[0]) for r in ours.values())
    assert b"after reneg" in client_bytes, client_bytes


# -- what is counted, not decrypted: TLS 1.1, and TLS 1.3 0-RTT early data ------------

EARLY = b"early data: sent before the ServerHello\n"
LEGACY = "OPENSSL_CONF"  # set to /dev/null: no system MinProtocol, so TLS 1.1 can be offered


@pytest.fixture(scope="module")
def counted_capture(tmp_path_factory):
    """A TLS 1.1 connection, a TLS 1.3 one that leaves a session, and a resumed
    TLS 1.3 one whose client sends 0-RTT early data the server accepts."""
    import os

    for tool in ("tshark", "tcpdump", "openssl"):
        assert shutil.which(tool), f"{tool} is needed"
    work = tmp_path_factory.mktemp("tls-counted")
    pem = make_certificate(work)
    port = free_port()
    pcap, keylog, session = work / "counted.pcap", work / "counted.keys", work / "psk.sess"
    early = work / "early.txt"
    early.write_bytes(EARLY)
    env = dict(os.environ, **{LEGACY: os.devnull})
    legacy = ["-cipher", "DEFAULT:@SECLEVEL=0"]
    # no -rev: s_server refuses it with -early_data; the server's stdin stays open and silent
    server = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pem),
                               "-early_data", *legacy], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    outputs = {}
    try:
        wait_for_listener("127.0.0.1", port)
        with tcpdump(pcap, port):
            for name, args in (("tls11", ["-tls1_1", *legacy]), ("full", ["-tls1_3", "-sess_out", str(session)]),
                               ("early", ["-tls1_3", "-sess_in", str(session), "-early_data", str(early)])):
                proc = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-keylogfile",
                                         str(keylog), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env=env)
                time.sleep(0.4)
                proc.stdin.write(f"line after the handshake ({name})\n".encode())  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                time.sleep(0.4)
                proc.stdin.close()  # type: ignore[union-attr]
                outputs[name] = proc.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
                proc.wait(timeout=30)
    finally:
        server.kill()
        server.wait(timeout=10)
    return pcap, keylog, port, outputs


def _client_records_after_ccs(pcap: Path, port: int, client_port: int) -> int:
    """tshark's record bytes (headers included) that follow each direction's
    ChangeCipherSpec on one connection: what TLS 1.1 protects."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-d", f"tcp.port=={port},tls",
                          "-Y", f"tls && tcp.port == {client_port}", "-T", "fields", "-e", "tcp.srcport",
                          "-e", "tls.record.content_type", "-e", "tls.record.length"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    encrypting: set[str] = set()
    total = 0
    for line in out.splitlines():
        source, types, lengths = line.split("\t")
        for content_type, length in zip(types.split(","), lengths.split(",")):
            if source in encrypting:
                total += 5 + int(length)
            if content_type == "20":
                encrypting.add(source)
    return total


def test_tls11_and_early_data_are_counted_with_their_reasons(counted_capture) -> None:
    pcap, keylog, port, outputs = counted_capture
    assert "Protocol  : TLSv1.1" in outputs["tls11"]
    assert "Reused, TLSv1.3" in outputs["early"] and "Early data was accepted" in outputs["early"]
    ours = decrypt_capture(pcap, read_keylog_file(keylog), port)
    theirs = tshark_follow(pcap, keylog, port)  # tshark decrypts all three, early data included
    assert set(ours) == set(theirs) and len(ours) == 3
    by_name = {name: next(cp for cp, (client, _) in theirs.items() if f"({name})".encode() in client)
               for name in ("tls11", "full", "early")}

    tls11 = ours[by_name["tls11"]]
    assert tls11.plaintext == [bytearray(), bytearray()]
    assert dict(tls11.stats.reasons) == {"unsupported TLS version": 1} and tls11.stats.undecrypted == 1
    assert tls11.stats.undecrypted_bytes == _client_records_after_ccs(pcap, port, by_name["tls11"].client_port) > 0

    full = ours[by_name["full"]]
    assert (bytes(full.plaintext[0]), bytes(full.plaintext[1])) == theirs[by_name["full"]]
    assert full.stats.decrypted == 1

    early = ours[by_name["early"]]
    client, server = theirs[by_name["early"]]
    assert client.startswith(EARLY)
    # everything after the early data decrypted (its EndOfEarlyData included: no failed record)
    assert bytes(early.plaintext[0]) == client[len(EARLY):] and bytes(early.plaintext[1]) == server
    assert dict(early.stats.reasons) == {"0-RTT early data not decrypted": 1}
    assert early.stats.partly_decrypted == 1 and early.stats.failed_records == 0
    # one record: header, the data, its content type byte and the AEAD tag (RFC 8446 section 5.2)
    assert early.stats.undecrypted_bytes == 5 + len(EARLY) + 1 + 16
