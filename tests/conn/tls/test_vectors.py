"""The TLS key schedules and record protection against published vectors.

* TLS 1.2 PRF: the P_SHA256 and P_SHA384 vectors posted to the IETF TLS
  list (msg03416, "test label"), widely used by TLS libraries' tests.
* TLS 1.3: RFC 8448 section 3 (simple 1-RTT handshake,
  TLS_AES_128_GCM_SHA256): traffic secrets -> keys and IVs, and every
  protected record of the trace opened to the trace's plaintext; then the
  whole trace through TlsConnection with a key log of its four secrets.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kdissect.conn.tls import TlsConnection, parse_keylog_text
from kdissect.conn.tls.record import Tls12AeadCipher, Tls12CbcCipher, Tls13Cipher
from kdissect.conn.tls.schedule import key_block12, next_traffic_secret13, prf12, traffic_keys13
from kdissect.conn.tls.suites import SUITES
from tests.support.tls_sinks import CollectedTls

H = bytes.fromhex


def _hex(*parts: str) -> bytes:
    return H("".join(parts))


# -- TLS 1.2 PRF ------------------------------------------------------------------

PRF_VECTORS = [
    ("sha256", "9bbe436ba940f017b17652849a71db35", "a0ba9f936cda311827a6f796ffd5198c",
     "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b4e14baf9af"
     "0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff701"
     "87347b66"),
    ("sha384", "b80b733d6ceefcdc71566ea48e5567df", "cd665cf6a8447dd6ff8b27555edb7465",
     "7b0c18e9ced410ed1804f2cfa34a336a1c14dffb4900bb5fd7942107e81c83cde9ca0faa60be9fe34f82b1233c9146a0"
     "e534cb400fed2700884f9dc236f80edd8bfa961144c9e8d792eca722a7b32fc3d416d473ebc2c5fd4abfdad05d918425"
     "9b5bf8cd4d90fa0d31e2dec479e4f1a26066f2eea9a69236a3e52655c9e9aee691c8f3a26854308d5eaa3be85e099070"
     "3d73e56f"),
]


@pytest.mark.parametrize("hash_name,secret,seed,expected", PRF_VECTORS)
def test_tls12_prf_vectors(hash_name: str, secret: str, seed: str, expected: str) -> None:
    out = prf12(hash_name, H(secret), b"test label", H(seed), len(H(expected)))
    assert out == H(expected)


def test_tls12_key_block_order_and_records() -> None:
    """The key block is split client MAC, server MAC, client key, server key,
    client IV, server IV, with server_random first in the seed; cross-checked
    by sealing a record with `cryptography` from a PRF output derived
    independently here, then opening it with Tls12AeadCipher."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    master, client_random, server_random = bytes(range(48)), b"c" * 32, b"s" * 32
    suite = SUITES[0xC02F]  # ECDHE-RSA-AES128-GCM-SHA256
    keys = key_block12("sha256", master, client_random, server_random, 0, 16, 4)
    block = prf12("sha256", master, b"key expansion", server_random + client_random, 40)
    assert (keys.client_key, keys.server_key, keys.client_iv, keys.server_iv) == (
        block[0:16], block[16:32], block[32:36], block[36:40])
    # a record sealed as RFC 5288 says: nonce = salt | explicit, aad = seq | type | version | length
    explicit, seq, plaintext = (7).to_bytes(8, "big"), 7, b"kafka over tls"
    aad = seq.to_bytes(8, "big") + b"\x17\x03\x03" + len(plaintext).to_bytes(2, "big")
    sealed = AESGCM(block[0:16]).encrypt(block[32:36] + explicit, plaintext, aad)
    payload = explicit + sealed
    header = b"\x17\x03\x03" + len(payload).to_bytes(2, "big")
    cipher = Tls12AeadCipher(suite, keys.client_key, keys.client_iv)
    assert cipher.open(header, payload, seq) == (23, plaintext)
    assert cipher.open(header, payload, seq + 1) is None  # the sequence number is authenticated
    assert cipher.seq_hint(payload) == 7
    assert "key" not in repr(keys).replace("keys>", "")


def test_tls12_cbc_mac_then_encrypt_and_encrypt_then_mac() -> None:
    """CBC records built here from RFC 5246 6.2.3.2 / RFC 7366 with
    cryptography's AES-CBC and the stdlib HMAC, opened by Tls12CbcCipher."""
    import hmac

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    suite = SUITES[0xC027]  # ECDHE-RSA-AES128-CBC-SHA256
    mac_key, key, iv = b"m" * 32, b"k" * 16, b"i" * 16
    content, seq = b"hello kafka" * 5, 3

    def cbc(data: bytes) -> bytes:
        enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        return enc.update(data) + enc.finalize()

    def pad(data: bytes) -> bytes:
        n = 15 - len(data) % 16
        return data + bytes([n]) * (n + 1)

    mac = hmac.digest(mac_key, seq.to_bytes(8, "big") + b"\x17\x03\x03" + len(content).to_bytes(2, "big") + content,
                      "sha256")
    mte = iv + cbc(pad(content + mac))
    header = b"\x17\x03\x03" + len(mte).to_bytes(2, "big")
    assert Tls12CbcCipher(suite, mac_key, key, False).find(header, mte, range(10)) == (seq, 23, content)
    assert Tls12CbcCipher(suite, mac_key, key, False).open(header, mte, seq + 1) is None

    protected = iv + cbc(pad(content))
    etm_mac = hmac.digest(mac_key, seq.to_bytes(8, "big") + b"\x17\x03\x03" + len(protected).to_bytes(2, "big")
                          + protected, "sha256")
    etm = protected + etm_mac
    header = b"\x17\x03\x03" + len(etm).to_bytes(2, "big")
    assert Tls12CbcCipher(suite, mac_key, key, True).open(header, etm, seq) == (23, content)
    assert Tls12CbcCipher(suite, mac_key, key, False).open(header, etm, seq) is None


# -- TLS 1.3: RFC 8448 section 3 --------------------------------------------------

@dataclass(frozen=True)
class Rfc8448:
    client_random = H("cb34ecb1e78163ba1c38c6dacb196a6dffa21a8d9912ec18a2ef6283024dece7")
    client_hs_secret = H("b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21")
    server_hs_secret = H("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38")
    client_ap_secret = H("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5")
    server_ap_secret = H("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643")
    client_hello = _hex(
        "010000c00303cb34ecb1e78163ba1c38c6dacb196a6dffa21a8d9912ec18a2ef6283024dece7000006130113031302010000910000000b"
        "0009000006736572766572ff01000100000a00140012001d0017001800190100010101020103010400230000003300260024001d0020"
        "99381de560e4bd43d23d8e435a7dbafeb3c06e51c13cae4d5413691e529aaf2c002b0003020304000d0020001e040305030603020308"
        "040805080604010501060102010402050206020202002d00020101001c00024001")
    server_hello = _hex(
        "020000560303a6af06a4121860dc5e6e60249cd34c95930c8ac5cb1434dac155772ed3e2692800130100002e00330024001d0020c982"
        "8876112095fe66762bdbf7c672e156d6cc253b833df1dd69b1b04e751f0f002b00020304")
    encrypted_extensions = H("080000240022000a00140012001d00170018001901000101010201030104001c0002400100000000")
    certificate = _hex(
        "0b0001b9000001b50001b0308201ac30820115a003020102020102300d06092a864886f70d01010b0500300e310c300a060355040313"
        "03727361301e170d3136303733303031323335395a170d3236303733303031323335395a300e310c300a0603550403130372736130"
        "819f300d06092a864886f70d010101050003818d0030818902818100b4bb498f8279303d980836399b36c6988c0c68de55e1bdb826"
        "d3901a2461eafd2de49a91d015abbc9a95137ace6c1af19eaa6af98c7ced43120998e187a80ee0ccb0524b1b018c3e0b63264d449a6d"
        "38e22a5fda430846748030530ef0461c8ca9d9efbfae8ea6d1d03e2bd193eff0ab9a8002c47428a6d35a8d88d79f7f1e3f0203010001"
        "a31a301830090603551d1304023000300b0603551d0f0404030205a0300d06092a864886f70d01010b05000381810085aad2a0e5b927"
        "6b908c65f73a7267170618a54c5f8a7b337d2df7a594365417f2eae8f8a58c8f8172f9319cf36b7fd6c55b80f21a03015156726096fd"
        "335e5e67f2dbf102702e608ccae6bec1fc63a42a99be5c3eb7107c3c54e9b9eb2bd5203b1c3b84e0a8b2f759409ba3eac9d91d402dcc"
        "0cc8f8961229ac9187b42b4de10000")
    certificate_verify = _hex(
        "0f000084080400805a747c5d88fa9bd2e55ab085a61015b7211f824cd484145ab3ff52f1fda8477b0b7abc90db78e2d33a5c141a0786"
        "53fa6bef780c5ea248eeaaa785c4f394cab6d30bbe8d4859ee511f602957b15411ac027671459e46445c9ea58c181e818e95b8c3fb0b"
        "f3278409d3be152a3da5043e063dda65cdf5aea20d53dfacd42f74f3")
    server_finished = H("140000209b9b141d906337fbd2cbdce71df4deda4ab42c309572cb7fffee5454b78f0718")
    client_finished = H("14000020a8ec436d677634ae525ac1fcebe11a039ec17694fac6e98527b642f2edd5ce61")
    new_session_ticket = _hex(
        "040000c90000001efad6aac502000000b22c035d829359ee5ff7af4ec900000000262a6494dc486d2c8a34cb33fa90bf1b0070ad3c49"
        "8883c9367c09a2be785abc55cd226097a3a982117283f82a03a143efd3ff5dd36d64e861be7fd61d2827db279cce145077d454a3664d"
        "4e6da4d29ee03725a6a4dafcd0fc67d2aea70529513e3da2677fa5906c5b3f7d8f92f228bda40dda721470f9fbf297b5aea617646fac"
        "5c03272e970727c621a79141ef5f7de6505e5bfbc388e93343694093934ae4d3570008002a000400000400")
    server_flight_record = _hex(
        "17030302a2d1ff334a56f5bff6594a07cc87b580233f500f45e489e7f33af35edf7869fcf40aa40aa2b8ea73f848a7ca07612ef9f945"
        "cb960b4068905123ea78b111b429ba9191cd05d2a389280f526134aadc7fc78c4b729df828b5ecf7b13bd9aefb0e57f271585b8ea9bb"
        "355c7c79020716cfb9b1183ef3ab20e37d57a6b9d7477609aee6e122a4cf51427325250c7d0e509289444c9b3a648f1d71035d2ed65b"
        "0e3cdd0cbae8bf2d0b227812cbb360987255cc744110c453baa4fcd610928d809810e4b7ed1a8fd991f06aa6248204797e36a6a73b70"
        "a2559c09ead686945ba246ab66e5edd8044b4c6de3fcf2a89441ac66272fd8fb330ef8190579b3684596c960bd596eea520a56a8d650"
        "f563aad27409960dca63d3e688611ea5e22f4415cf9538d51a200c27034272968a264ed6540c84838d89f72c24461aad6d26f59ecaba"
        "9acbbb317b66d902f4f292a36ac1b639c637ce3431 17b659622245317b49eeda0c6258f100d7d961ffb138647e92ea330faeea6dfa31"
        "c7a84dc3bd7e1b7a6c7178af36879018e3f252107f243d243dc7339d5684c8b0378bf30244da8c87c843f5e56eb4c5e8280a2b48052c"
        "f93b16499a66db7cca71e4599426f7d461e66f99882bd89fc50800becca62d6c74116dbd2972fda1fa80f85df881edbe5a37668936b3"
        "35583b599186dc5c6918a396fa48a181d6b6fa4f9d62d513afbb992f2b992f67f8afe67f76913fa388cb5630c8ca01e0c65d11c66a1e"
        "2ac4c85977b7c7a6999bbf10dc35ae69f5515614636c0b9b68c19ed2e31c0b3b66763038ebba42f3b38edc0399f3a9f23faa63978c31"
        "7fc9fa66a73f60f0504de93b5b845e275592c12335ee340bbc4fddd502784016e4b3be7ef04dda49f4b440a30cb5d2af939828fd4ae3"
        "794e44f94df5a631ede42c1719bfdabf0253fe5175be898e750edc53370d2b".replace(" ", ""))
    client_finished_record = H(
        "170303003575ec4dc238cce60b298044a71e219c56cc77b0517fe9b93c7a4bfc44d87f38f80338ac98fc46deb384bd1caeacab6867d7"
        "26c40546")
    ticket_record = _hex(
        "17030300de3a6b8f90414a97d6959c3487680de5134a2b240e6cffac116e95d41d6af8f6b580dcf3d11d63c758db289a015940252f55"
        "713e061dc13e078891a38efbcf5753ad8ef170ad3c7353d16d9da773b9ca7f2b9fa1b6c0d4a3d03f75e09c30ba1e62972ac46f75f7b9"
        "81be63439b2999ce13064615139891d5e4c5b406f16e3fc181a77ca475840025db2f0a77f81b5ab05b94c01346755f69232c86519d86"
        "cbeeac87aac347d143f9605d64f650db4d023e70e952ca49fe5137121c74bc2697687e248746d6df353005f3bce18696129c8153556b"
        "3b6c6779b37bf15985684f")
    client_data_record = H(
        "1703030043a23f7054b62c94d0affafe8228ba55cbefacea42f914aa66bcab3f2b9819a8a5b46b395bd54a9a20441e2b62974e1f5a62"
        "92a2977014bd1e3deae63aeebb21694915e4")
    server_data_record = H(
        "17030300432e937e11ef4ac740e538ad36005fc4a46932fc3225d05f82aa1b36e30efaf97d90e6dffc602dcb501a59a8fcc49c4bf2e5"
        "f0a21c0047c2abf332540dd032e167c2955d")
    client_alert_record = H("1703030013c9872760655666b74d7ff1153efd6db6d0b0e3")
    server_alert_record = H("1703030013b58fd67166ebf599d24720cfbe7efa7a8864a9")
    application_data = bytes(range(0x32))


V = Rfc8448()
SUITE_1301 = SUITES[0x1301]


@pytest.mark.parametrize("secret,key,iv", [
    (V.server_hs_secret, "3fce516009c21727d0f2e4e86ee403bc", "5d313eb2671276ee13000b30"),
    (V.client_hs_secret, "dbfaa693d1762c5b666af5d950258d01", "5bd3c71b836e0b76bb73265f"),
    (V.server_ap_secret, "9f02283b6c9c07efc26bb9f2ac92e356", "cf782b88dd83549aadf1e984"),
    (V.client_ap_secret, "17422dda596ed5d9acd890e3c63f5051", "5b78923dee08579033e523d9"),
])
def test_rfc8448_traffic_keys(secret: bytes, key: str, iv: str) -> None:
    assert traffic_keys13("sha256", secret, 16) == (H(key), H(iv))


def _open13(secret: bytes, record: bytes, seq: int) -> tuple[int, bytes] | None:
    return Tls13Cipher(SUITE_1301, secret).open(record[:5], record[5:], seq)


def test_rfc8448_records() -> None:
    flight = V.encrypted_extensions + V.certificate + V.certificate_verify + V.server_finished
    assert _open13(V.server_hs_secret, V.server_flight_record, 0) == (22, flight)
    assert _open13(V.client_hs_secret, V.client_finished_record, 0) == (22, V.client_finished)
    assert _open13(V.server_ap_secret, V.ticket_record, 0) == (22, V.new_session_ticket)
    assert _open13(V.client_ap_secret, V.client_data_record, 0) == (23, V.application_data)
    assert _open13(V.server_ap_secret, V.server_data_record, 1) == (23, V.application_data)
    assert _open13(V.client_ap_secret, V.client_alert_record, 1) == (21, b"\x01\x00")
    assert _open13(V.server_ap_secret, V.server_alert_record, 2) == (21, b"\x01\x00")
    # the nonce carries the sequence number, and the key is the right one
    assert _open13(V.server_ap_secret, V.server_data_record, 0) is None
    assert _open13(V.client_ap_secret, V.server_data_record, 1) is None


def test_key_update_secret_chain() -> None:
    """A KeyUpdate's next secret is HKDF-Expand-Label(secret, "traffic upd",
    "", Hash.length) (RFC 8446 7.2): checked against the generic expansion."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    label = b"tls13 traffic upd"
    info = (32).to_bytes(2, "big") + bytes([len(label)]) + label + b"\x00"
    expected = HKDFExpand(hashes.SHA256(), 32, info).derive(V.client_ap_secret)
    assert next_traffic_secret13("sha256", V.client_ap_secret) == expected
    assert Tls13Cipher(SUITE_1301, V.client_ap_secret).updated().generation == 1


def rfc8448_keylog() -> str:
    r = V.client_random.hex()
    return "\n".join([
        "# RFC 8448 section 3",
        f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {r} {V.client_hs_secret.hex()}",
        f"SERVER_HANDSHAKE_TRAFFIC_SECRET {r} {V.server_hs_secret.hex()}",
        f"CLIENT_TRAFFIC_SECRET_0 {r} {V.client_ap_secret.hex()}",
        f"SERVER_TRAFFIC_SECRET_0 {r} {V.server_ap_secret.hex()}",
    ]) + "\n"


class _Stamp:
    def __init__(self, kind: str, offset: int, data: bytes, frame: int, length: int | None = None) -> None:
        self.kind, self.offset, self.data = kind, offset, data
        self.length = len(data) if length is None else length
        self.ts, self.capture_index, self.frame_number = frame * 1_000_000, 0, frame  # ns: the frame number in ms


def rfc8448_streams() -> list[tuple[int, bytes]]:
    """The trace's records in their order on the wire: (direction, record)."""
    client_hello = b"\x16\x03\x01" + len(V.client_hello).to_bytes(2, "big") + V.client_hello
    server_hello = b"\x16\x03\x03" + len(V.server_hello).to_bytes(2, "big") + V.server_hello
    return [
        (0, client_hello),
        (1, server_hello + V.server_flight_record),
        (0, V.client_finished_record),
        (1, V.ticket_record),
        (0, V.client_data_record),
        (1, V.server_data_record),
        (0, V.client_alert_record),
        (1, V.server_alert_record),
    ]


def test_rfc8448_connection() -> None:
    conn = CollectedTls(parse_keylog_text(rfc8448_keylog()))
    offsets = [0, 0]
    plain: list[list] = [[], []]
    for frame, (direction, record) in enumerate(rfc8448_streams(), 1):
        plain[direction] += conn.push(direction, _Stamp("data", offsets[direction], record, frame))
        offsets[direction] += len(record)
    assert conn.finish() == []
    for direction, frame in ((0, 5), (1, 6)):
        (chunk,) = plain[direction]
        assert (chunk.kind, chunk.offset, chunk.length, chunk.data) == ("data", 0, 50, V.application_data)
        assert (chunk.ts, chunk.frame_number) == (frame * 1_000_000, frame)  # the packet that completed the record
    s = conn.stats
    assert (s.connections, s.decrypted, s.tls13, s.records, s.alerts, s.close_notifies) == (1, 1, 1, 7, 2, 2)
    assert s.undecrypted_bytes == 0 and s.failed_records == 0
    assert dict(s.suites) == {"TLS_AES_128_GCM_SHA256": 1}


def test_rfc8448_connection_byte_by_byte() -> None:
    """Records split across segments at every byte, several records in one."""
    conn = CollectedTls(parse_keylog_text(rfc8448_keylog()))
    streams: list[bytes] = [b"", b""]
    for direction, record in rfc8448_streams():
        streams[direction] += record
    plain = [b"", b""]
    pos = [0, 0]
    frame = 0
    # 1-byte pushes: the ClientHello, the server's flight, then the rest by turns
    hello = len(rfc8448_streams()[0][1])
    flight = len(rfc8448_streams()[1][1])
    order = [0] * hello + [1] * flight + [0, 1] * max(len(streams[0]), len(streams[1]))
    for direction in order:
        if pos[direction] >= len(streams[direction]):
            continue
        frame += 1
        byte = streams[direction][pos[direction]:pos[direction] + 1]
        for chunk in conn.push(direction, _Stamp("data", pos[direction], byte, frame)):
            plain[direction] += chunk.data
        pos[direction] += 1
    for direction, chunk in conn.finish():
        plain[direction] += chunk.data
    assert plain == [V.application_data, V.application_data]
    assert conn.stats.records == 7


def test_rfc8448_lost_record_gives_exact_gap() -> None:
    """The client's Finished lost inside its record (header captured): the
    handshake epoch's loss is no application data, and the next records open."""
    conn = CollectedTls(parse_keylog_text(rfc8448_keylog()))
    streams = rfc8448_streams()
    offsets = [0, 0]
    out: list = [[], []]
    for frame, (direction, record) in enumerate(streams, 1):
        if record is V.server_data_record:
            # the server's data record: header and 10 bytes captured, the rest lost
            out[1] += conn.push(1, _Stamp("data", offsets[1], record[:15], frame))
            out[1] += conn.push(1, _Stamp("gap", offsets[1] + 15, b"", frame, len(record) - 15))
        else:
            out[direction] += conn.push(direction, _Stamp("data", offsets[direction], record, frame))
        offsets[direction] += len(record)
    conn.finish()
    assert [(c.kind, c.length) for c in out[1]] == [("gap", 50)]  # 72 - 5 - 16 - 1: exact
    assert [(c.kind, c.length) for c in out[0]] == [("data", 50)]
    assert conn.stats.close_notifies == 2  # the server's alert (seq 2) still opened
    assert conn.stats.partly_decrypted == 1


def test_tls_is_a_sink_that_drives_sinks() -> None:
    """The TLS layer speaks the reassembler's DirectionSink interface on both
    sides: ciphertext calls in, plaintext `data` calls out on the plaintext's
    sink of the same direction, read at every call (a sink may replace
    itself, as a Kafka direction's first bytes make its FrameReader), each
    with the stamp of the ciphertext call that completed its record."""
    calls: list[tuple] = []

    class Recording:
        def __init__(self, name: str) -> None:
            self.name = name

        def data(self, offset, payload, stamp) -> None:
            calls.append((self.name, "data", offset, payload, stamp))

        def gap(self, offset, length, stamp) -> None:
            calls.append((self.name, "gap", offset, length, stamp))

        def truncated(self, offset, length, prefix, stamp) -> None:
            raise AssertionError("the TLS layer hands on data and gaps only")

    class Plaintext:
        sinks = (Recording("side 0"), Recording("side 1"))

    plaintext = Plaintext()
    tls = TlsConnection(parse_keylog_text(rfc8448_keylog()), plaintext, client_direction=1)
    ciphertext = tls.ciphertext_sinks()
    offsets = [0, 0]
    stamps = {}
    for frame, (direction, record) in enumerate(rfc8448_streams(), 1):
        side = 1 - direction  # the client on side 1 of the TCP connection this time
        if record is V.server_data_record:  # the server's sink (side 0) replaced before its data
            plaintext.sinks = (Recording("side 0, replaced"), plaintext.sinks[1])
        stamps[frame] = stamp = _Stamp("data", offsets[side], record, frame)
        ciphertext[side].data(offsets[side], record, stamp)
        offsets[side] += len(record)
    tls.finish()
    # the client's data (record 5 on the wire) and the server's (record 6), each once, at offset 0
    assert calls == [("side 1", "data", 0, V.application_data, stamps[5]),
                     ("side 0, replaced", "data", 0, V.application_data, stamps[6])]
    assert calls[0][4] is stamps[5] and calls[1][4] is stamps[6]
