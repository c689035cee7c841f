"""Key log parsing, detection by shape, stats, and secrecy: no secret or key
material in any repr, str or error message."""

from __future__ import annotations

import pickle

import pytest

from kdissect.failures import InputError
from kdissect.conn.tls import (
    KeyLog,
    TlsStats,
    client_hello_verdict,
    looks_like_client_hello,
    parse_decryption_secrets,
    parse_keylog_bytes,
    parse_keylog_text,
    read_keylog_file,
    read_keylog_files,
)
from kdissect.conn.tls.record import Tls12AeadCipher, Tls12CbcCipher, Tls13Cipher
from kdissect.conn.tls.schedule import key_block12
from kdissect.conn.tls.suites import SUITES
from tests.support.tls_sinks import CollectedTls
from tests.conn.tls.test_vectors import V, rfc8448_keylog, rfc8448_streams

RANDOM = "ab" * 32
MASTER = "5e" * 48
TRAFFIC = "7c" * 32


def test_parse_all_labels_and_lookups() -> None:
    text = "\n".join([
        "# comment", "",
        f"CLIENT_RANDOM {RANDOM} {MASTER}",
        f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {RANDOM} {TRAFFIC}",
        f"SERVER_TRAFFIC_SECRET_0 {RANDOM.upper()} {'9a' * 48}",  # SHA-384 suites: 48 bytes
        f"EXPORTER_SECRET {RANDOM} {TRAFFIC}",  # of the shape: kept, unused
        f"RSA Session-ID:{'01' * 32} Master-Key:{'02' * 48}",  # older OpenSSL s_client lines
        f"CLIENT_RANDOM {RANDOM} {MASTER}\r",
    ])
    log = parse_keylog_text(text, "k.log")
    random = bytes.fromhex(RANDOM)
    assert log.master_secret(random) == bytes.fromhex(MASTER)
    assert log.secret("CLIENT_HANDSHAKE_TRAFFIC_SECRET", random) == bytes.fromhex(TRAFFIC)
    assert log.secret("SERVER_TRAFFIC_SECRET_0", random) == bytes.fromhex("9a" * 48)
    assert log.master_secret(b"\0" * 32, bytes.fromhex("01" * 32)) == bytes.fromhex("02" * 48)
    assert log.master_secret(b"\0" * 32) is None
    assert log.bad_lines == 0


def test_bad_lines_inside_a_key_log_are_counted() -> None:
    text = f"CLIENT_RANDOM {RANDOM} {MASTER}\nCLIENT_RANDOM {RANDOM[:20]}"  # cut while writing
    log = parse_keylog_text(text)
    assert log.bad_lines == 1 and len(log) == 1


def test_merge_and_empty() -> None:
    a = parse_keylog_text(f"CLIENT_RANDOM {RANDOM} {MASTER}\n", "a")
    b = parse_keylog_text(f"CLIENT_RANDOM {'cd' * 32} {MASTER}\n", "b")
    merged = a.merged(b)
    assert len(merged) == 2 and merged.sources == ("a", "b")
    assert parse_keylog_text("") == KeyLog() and parse_keylog_text("# only a comment\n") == KeyLog()
    assert pickle.loads(pickle.dumps(merged)) == merged


def test_files(tmp_path) -> None:
    one, two = tmp_path / "1.keys", tmp_path / "2.keys"
    one.write_text(f"CLIENT_RANDOM {RANDOM} {MASTER}\n")
    two.write_text(f"CLIENT_TRAFFIC_SECRET_0 {RANDOM} {TRAFFIC}\n")
    assert len(read_keylog_files([one, two])) == 2
    with pytest.raises(InputError) as err:
        read_keylog_file(tmp_path / "missing.keys")
    assert "missing.keys" in str(err.value) and "\n" not in str(err.value)


SECRET_HEX = "f00dfeed" * 12  # 48 bytes, in a line of the wrong shape


@pytest.mark.parametrize("content", [
    b"hello world\nthis is not a key log\n",
    f"CLIENT_RANDOM {RANDOM} {SECRET_HEX[:-2]}\n".encode(),  # 47-byte master secret
    f"CLIENT_RANDOM {RANDOM[:-2]} {SECRET_HEX}\n".encode(),  # short client random
    f"{SECRET_HEX} {SECRET_HEX}\n".encode(),
    b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes.fromhex(SECRET_HEX),  # a pcap, say
])
def test_not_a_key_log_is_one_line_without_secrets(tmp_path, content: bytes) -> None:
    path = tmp_path / "not.keys"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        read_keylog_file(path)
    message = str(err.value)
    assert message.startswith(str(path)) and "not a TLS key log" in message
    assert "\n" not in message
    for piece in (SECRET_HEX[:16], SECRET_HEX[8:24], RANDOM[:16]):
        assert piece not in message.lower()
    # no chained exception (a decode error would quote the bytes)
    assert err.value.__cause__ is None and (err.value.__context__ is None or err.value.__suppress_context__)


def test_dsb_payload() -> None:
    data = f"CLIENT_RANDOM {RANDOM} {MASTER}\n".encode() + b"\0\0"  # block padding
    assert parse_decryption_secrets(data) == parse_keylog_bytes(data)
    assert len(parse_decryption_secrets(data)) == 1
    with pytest.raises(InputError):
        parse_decryption_secrets(b"garbage that is no key log\n")


def _secret_pieces() -> list[str]:
    """Hex renderings of every secret and derived key a repr might leak."""
    from kdissect.conn.tls.schedule import traffic_keys13

    pieces = [RANDOM, MASTER, TRAFFIC, V.client_ap_secret.hex(), V.server_ap_secret.hex(),
              V.client_hs_secret.hex(), V.server_hs_secret.hex()]
    for secret in (V.client_ap_secret, V.server_ap_secret, V.client_hs_secret, V.server_hs_secret):
        key, iv = traffic_keys13("sha256", secret, 16)
        pieces += [key.hex(), iv.hex()]
    return [p[:16] for p in pieces]


def _texts(*objects) -> str:
    out = []
    for obj in objects:
        out += [repr(obj), str(obj), format(obj)]
        for value in getattr(obj, "__dict__", {}).values():
            out += [repr(value), str(value)]
    return "\n".join(out).lower()


def test_no_secret_in_repr_or_str() -> None:
    log = parse_keylog_text(rfc8448_keylog() + f"CLIENT_RANDOM {RANDOM} {MASTER}\nCLIENT_RANDOM {RANDOM} {TRAFFIC}\n")
    conn = CollectedTls(log)
    pos = [0, 0]

    class Chunk:
        def __init__(self, offset, data):
            self.kind, self.offset, self.length, self.data = "data", offset, len(data), data
            self.ts, self.capture_index, self.frame_number = 0, 0, 1

    for direction, record in rfc8448_streams()[:4]:
        conn.push(direction, Chunk(pos[direction], record))
        pos[direction] += len(record)
    suite = SUITES[0xC02F]
    keys = key_block12("sha256", bytes.fromhex(MASTER), bytes(32), bytes(32), 0, 16, 4)
    objects = [log, conn.tls, conn.stats, keys, Tls13Cipher(SUITES[0x1301], V.client_ap_secret),
               Tls12AeadCipher(suite, keys.client_key, keys.client_iv),
               Tls12CbcCipher(SUITES[0xC027], b"m" * 32, keys.client_key, True), conn.tls._dirs[0], conn.tls._dirs[1]]
    text = _texts(*objects)
    for piece in _secret_pieces() + [keys.client_key.hex()[:16], keys.server_key.hex()[:16]]:
        assert piece not in text
    assert repr(log) == "KeyLog(5 secrets for 2 client randoms, 1 bad lines)"


def test_wrong_secret_is_a_counted_failure() -> None:
    text = rfc8448_keylog().replace(V.server_ap_secret.hex(), "00" + V.server_ap_secret.hex()[2:])
    conn = CollectedTls(parse_keylog_text(text))
    pos = [0, 0]
    plain = [b"", b""]

    class Chunk:
        def __init__(self, offset, data):
            self.kind, self.offset, self.length, self.data = "data", offset, len(data), data
            self.ts, self.capture_index, self.frame_number = 0, 0, 1

    for direction, record in rfc8448_streams():
        for chunk in conn.push(direction, Chunk(pos[direction], record)):
            plain[direction] += chunk.data
        pos[direction] += len(record)
    conn.finish()
    assert plain == [V.application_data, b""]  # the client's side still decrypts
    s = conn.stats
    assert s.failed_records == 3 and s.partly_decrypted == 1
    assert s.reasons == {"decryption failed": 1}
    assert s.undecrypted_bytes == len(V.ticket_record) + len(V.server_data_record) + len(V.server_alert_record)


def test_client_hello_detection() -> None:
    hello = rfc8448_streams()[0][1]
    assert looks_like_client_hello(hello) and looks_like_client_hello(hello[:11])
    assert client_hello_verdict(hello[:4]) is None
    assert client_hello_verdict(b"") is None
    kafka_request = (40).to_bytes(4, "big") + b"\x00\x12\x00\x03" + bytes(32)  # ApiVersions
    assert client_hello_verdict(kafka_request) is False
    server_hello = rfc8448_streams()[1][1]
    assert client_hello_verdict(server_hello) is False
    assert client_hello_verdict(b"\x16\x03\x01\x00\x05\x01") is False  # record too short for a hello
    assert client_hello_verdict(b"GET / HTTP/1.1\r\n") is False


def test_stats_add_and_roundtrip() -> None:
    a = TlsStats(connections=2, decrypted=1, undecrypted=1, undecrypted_bytes=300)
    a.reasons["no key for this client random"] += 1
    a.suites["TLS_AES_128_GCM_SHA256"] += 2
    b = TlsStats(connections=1, decrypted=1)
    b.suites["TLS_AES_128_GCM_SHA256"] += 1
    total = a + b
    assert (total.connections, total.decrypted, total.suites["TLS_AES_128_GCM_SHA256"]) == (3, 2, 3)
    assert TlsStats.from_dict(total.to_dict()) == total
    assert total.summary_line() == ("tls: 3 connections, 2 decrypted, 1 not decrypted (300 bytes left encrypted): "
                                    "1 no key for this client random")
