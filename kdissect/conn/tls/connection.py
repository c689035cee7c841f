"""One TLS connection: a stream sink that drives stream sinks.

    tls = TlsConnection(keylog, plaintext, client_direction)
    conn.sinks = tls.ciphertext_sinks()  # ciphertext in, as any DirectionSink hears it
    ...
    tls.finish()  # the last plaintext goes on; tls.stats is final then

Both sides speak `kdissect.wire.reassembly.DirectionSink`: the ciphertext
sinks hear the reassembler's calls (`data`, `gap`, `truncated`, with stream
offsets and a stamp); the decrypted application data goes on as `data` and
`gap` calls to `plaintext.sinks[direction]` (the direction's FrameReader
once it is Kafka), offsets counted from 0 per direction, contiguous. A
plaintext call's stamp is that of the ciphertext call that completed its
records (delivered their last byte), passed on, never computed.

Lost ciphertext (a `gap`, the cut part of a `truncated`):
  * inside one record whose header was captured: that record is lost, the
    next record boundary is known, the sequence number is one more;
  * across record boundaries: record boundaries are hunted for (a header of
    type 20-24, version 3.x and a sane length), and a candidate is accepted
    when it decrypts, trying the sequence numbers the lost byte count allows
    (at most MAX_SEQ_TRIALS; in TLS 1.3 also the next traffic secret, in
    case a Finished or KeyUpdate was among the lost records). Without keys
    the next header must follow where the candidate's length says.
When decryption resumes, one `gap` call stands for the application bytes
lost: the ciphertext bytes lost minus the per-record overhead of the records
the sequence numbers say were lost. That is exact for AEAD suites when the
lost records held application data without padding (what OpenSSL, Go, Java
and Python send), an estimate for CBC (padding) and when a TLS 1.3 key
change or a handshake message (NewSessionTicket) fell in the loss. The
framing layer resynchronises by itself when the length is off.

Memory: per direction at most one incomplete record (or, while hunting, one
candidate record): below 2^14 + 2048 + 5 bytes plus the piece being read.
"""

from __future__ import annotations

import re
from typing import Any

from kdissect.conn.tls import stats as reasons
from kdissect.conn.tls.handshake import (
    CLIENT_HELLO,
    END_OF_EARLY_DATA,
    EXT_EARLY_DATA,
    EXT_ENCRYPT_THEN_MAC,
    EXT_PRE_SHARED_KEY,
    FINISHED,
    KEY_UPDATE,
    SERVER_HELLO,
    ClientHello,
    HandshakeReader,
    ServerHello,
    parse_client_hello,
    parse_server_hello,
)
from kdissect.conn.tls.keylog import (
    CLIENT_EARLY_TRAFFIC_SECRET,
    CLIENT_HANDSHAKE_TRAFFIC_SECRET,
    CLIENT_TRAFFIC_SECRET_0,
    SERVER_HANDSHAKE_TRAFFIC_SECRET,
    SERVER_TRAFFIC_SECRET_0,
    KeyLog,
)
from kdissect.conn.tls.record import (
    HEADER,
    MAX_CIPHERTEXT_12,
    RecordCipher,
    Tls12AeadCipher,
    Tls12CbcCipher,
    Tls13Cipher,
)
from kdissect.conn.tls.schedule import HASH_LENGTHS, key_block12
from kdissect.conn.tls.stats import TlsStats
from kdissect.conn.tls.suites import AES_CBC, CHACHA20_POLY1305, SUITES

TLS12 = 0x0303
TLS13 = 0x0304

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA, HEARTBEAT = 20, 21, 22, 23, 24

# sequence numbers tried per candidate record after lost record boundaries
MAX_SEQ_TRIALS = 1024
# consecutive records that fail to authenticate before a direction is given up
MAX_FAILURES = 16
# hunted candidates that fail to decrypt before a direction is given up
MAX_HUNT_FAILURES = 16

_HEADER_CANDIDATE = re.compile(rb"[\x14-\x18]\x03[\x00-\x04]")

# cipher roles in TLS 1.3
_EARLY, _HANDSHAKE, _APPLICATION = "early", "handshake", "application"


class _Direction:
    """The state of one direction's record stream."""

    __slots__ = ("index", "end", "buf", "buf_start", "synced", "skip_to", "encrypted", "cipher", "role",
                 "ahead", "pending", "seq", "hs", "plain_end", "loss_start", "loss_seq", "loss_role",
                 "failures", "hunt_failures", "dead", "closed", "stamp", "pieces", "records_before_keys",
                 "wire_bytes", "wire_records")

    def __init__(self, index: int) -> None:
        self.index = index
        self.end = 0  # ciphertext stream offset of the next byte expected
        self.buf = b""  # held bytes: an incomplete record, or bytes being hunted through
        self.buf_start = 0  # stream offset of buf[0]
        self.synced = True  # buf[0] is a record boundary
        self.skip_to: int | None = None  # bytes before this offset belong to a damaged record
        self.encrypted = False  # records are protected (with or without keys to open them)
        self.cipher: RecordCipher | None = None
        self.role = ""  # TLS 1.3: the cipher's role
        self.ahead: list[tuple[str, RecordCipher | None]] = []  # TLS 1.3: the next ciphers, in order
        self.pending: RecordCipher | None = None  # TLS 1.2: activated by this direction's ChangeCipherSpec
        self.seq = 0  # sequence number of the next record
        self.hs = HandshakeReader()
        self.plain_end = 0  # plaintext stream offset of the next application byte
        self.loss_start: int | None = None  # ciphertext offset where undelivered records begin
        self.loss_seq = 0  # sequence number of the first of them
        self.loss_role = ""  # the cipher role when the loss began
        self.failures = 0
        self.hunt_failures = 0
        self.dead = False  # given up: the rest of this direction is counted, not tried
        self.closed = False  # close_notify seen
        self.stamp: Any = None  # the stamp of the piece being read (or read last)
        self.pieces: list[bytes] = []  # plaintext collected during this push
        self.records_before_keys = 0  # TLS 1.3 0-RTT records before the ServerHello
        self.wire_bytes = 0  # size of the records decrypted in step, to guess how many a loss held
        self.wire_records = 0


class TlsConnection:
    """Decrypts one TLS connection with the secrets of a key log.

    `plaintext`: where the decrypted streams go, an object whose `sinks` are
    the two directions' `DirectionSink`s (read at every call: a sink may
    replace itself). `client_direction`: the side taken for the client until
    a ClientHello says (its stream is finished first)."""

    def __init__(self, keylog: KeyLog, plaintext: Any, client_direction: int = 0) -> None:
        self._keylog = keylog
        self.plaintext = plaintext
        self.stats = TlsStats(connections=1)  # this connection's counts; final after finish()
        self._dirs = (_Direction(0), _Direction(1))
        self.client_direction = client_direction  # the ClientHello's sender
        self._finish_order = (client_direction, 1 - client_direction)
        self.version: int | None = None  # negotiated: 0x0303, 0x0304
        self.suite_name: str | None = None
        self._client_hello: ClientHello | None = None
        self._reasons: set[str] = set()
        self._lossy = False  # encrypted records were lost or failed
        self._finished = False
        # captured ciphertext bytes heard, with the snaplen-cut ones (not gaps):
        # Accounting.tls_bytes, added at close
        self.ciphertext_bytes = 0

    def __repr__(self) -> str:
        version = {TLS12: "TLS 1.2", TLS13: "TLS 1.3"}.get(self.version or 0, "TLS")
        return f"TlsConnection({version}, {self.suite_name or 'no suite yet'}, {self.stats.records} records decrypted)"

    # -- public ----------------------------------------------------------------

    def ciphertext_sinks(self) -> tuple[CiphertextSink, CiphertextSink]:
        """The two directions' ciphertext sinks (the TCP connection's sinks)."""
        return CiphertextSink(self, 0), CiphertextSink(self, 1)

    def push(self, direction: int, offset: int, length: int, data: bytes, stamp: Any) -> None:
        """Hear one piece of `direction`'s ciphertext: `length` stream bytes at
        `offset` of which `data` (all, a prefix or none) were captured; the
        plaintext it completes goes on to that direction's plaintext sink."""
        d = self._dirs[direction]
        d.stamp = stamp
        if offset > d.end:  # bytes skipped without a gap: the same as one
            self._lose(d, offset - d.end)
        elif offset < d.end:  # overlap with bytes already read: trim
            cut = d.end - offset
            if cut >= length:
                return
            length -= cut
            data = data[cut:]
        if data:
            self._take(d, data)
        if length > len(data):
            self._lose(d, length - len(data))
        self._flush(d)

    def finish(self) -> None:
        """End of both streams: the last plaintext goes on (the client's
        stream first), and `stats` is made final (the connection's outcome
        and reasons)."""
        if self._finished:
            return
        self._finished = True
        for index in self._finish_order:
            d = self._dirs[index]
            if d.buf and d.encrypted:
                self._count_undecrypted(len(d.buf))  # an incomplete last record, or hunted bytes
            d.buf = b""
            if d.loss_start is not None and d.cipher is not None and self._loss_may_hold_data(d, d.role):
                lost = d.end - d.loss_start
                records = max(1, -(-lost // (HEADER + d.cipher.max_ciphertext)))
                self._emit_gap(d, lost - records * d.cipher.overhead)
            d.loss_start = None
            self._flush(d)
        self._settle()

    # -- reading records ---------------------------------------------------------

    def _take(self, d: _Direction, data: bytes) -> None:
        start = d.end
        d.end += len(data)
        if d.dead:
            self._count_undecrypted(len(data))
            return
        if d.skip_to is not None:
            drop = min(len(data), d.skip_to - start)
            self._count_undecrypted(drop)
            if drop == len(data):
                if d.end == d.skip_to:
                    d.skip_to = None
                    d.buf, d.buf_start = b"", d.end
                return
            data = data[drop:]
            d.skip_to = None
            d.buf, d.buf_start = b"", start + drop
        buf = d.buf + data if d.buf else data
        pos, n = 0, len(buf)
        while not d.dead:
            if not d.synced:
                pos = self._hunt(d, buf, pos)
                if not d.synced:
                    break
                continue
            if n - pos < HEADER:
                break
            ctype, length = buf[pos], (buf[pos + 3] << 8) | buf[pos + 4]
            if not (20 <= ctype <= 24 and buf[pos + 1] == 3) or length > MAX_CIPHERTEXT_12:
                self._lose_step(d, d.buf_start + pos)  # not a record header: hunt from here
                continue
            end = pos + HEADER + length
            if end > n:
                break
            self._record(d, buf[pos:pos + HEADER], buf[pos + HEADER:end], d.buf_start + pos)
            pos = end
        if d.dead:
            self._count_undecrypted(n - pos)
            pos = n
        d.buf = buf[pos:]
        d.buf_start += pos

    def _is_protected(self, d: _Direction, ctype: int) -> bool:
        # in TLS 1.3 only application_data records are protected; CCS and
        # (rare) plaintext alerts pass in the clear
        return d.encrypted and (self.version != TLS13 or ctype == APPLICATION_DATA)

    def _record(self, d: _Direction, header: bytes, payload: bytes, start: int) -> None:
        ctype = header[0]
        if not self._is_protected(d, ctype):
            if ctype == APPLICATION_DATA:
                self._unreadable_before_keys(d, HEADER + len(payload))
                return
            self._content(d, ctype, payload)
            return
        cipher = d.cipher
        seq = d.seq
        opened = cipher.open(header, payload, seq) if cipher is not None else None
        switched = False
        if opened is None and d.ahead and d.ahead[0][1] is not None:
            # the next cipher in order, from its first record: a handshake
            # secret missing from the key log, or early data the server refused
            role, ahead = d.ahead[0]
            alternative = ahead.open(header, payload, 0)  # type: ignore[union-attr]
            if alternative is not None:
                self._advance(d)
                opened, seq, switched = alternative, 0, True
        if opened is None:
            d.seq += 1
            self._count_undecrypted(HEADER + len(payload))
            if cipher is None:
                return  # no keys: counted, with its reason given when keys were looked for
            self.stats.failed_records += 1
            self._begin_loss(d, start, seq)
            d.failures += 1
            if d.failures >= MAX_FAILURES:
                self._give_up(d, reasons.DECRYPTION_FAILED)
            else:
                self._reasons.add(reasons.DECRYPTION_FAILED)
            return
        d.seq = seq + 1
        d.wire_bytes += HEADER + len(payload)
        d.wire_records += 1
        self._opened(d, start, seq, opened[0], opened[1], switched)

    def _opened(self, d: _Direction, start: int, seq: int, ctype: int, plaintext: bytes,
                switched: bool = False) -> None:
        """A record decrypted: report a pending loss, then its content."""
        d.failures = 0
        d.hunt_failures = 0
        self.stats.records += 1
        if d.loss_start is not None:
            lost = start - d.loss_start
            cipher = d.cipher
            assert cipher is not None
            if self._loss_may_hold_data(d, d.role):
                if switched:  # a key change among the lost records: count unknown
                    records = max(seq + 1, -(-lost // (HEADER + cipher.max_ciphertext)))
                else:
                    records = seq - d.loss_seq
                estimate = lost - records * cipher.overhead
                if self.version == TLS12 and d.loss_seq == 0 and not switched:
                    estimate -= 16  # the lost records began with the Finished (4 + 12 bytes)
                self._emit_gap(d, estimate)
            d.loss_start = None
        self._content(d, ctype, plaintext)

    def _content(self, d: _Direction, ctype: int, data: bytes) -> None:
        if ctype == APPLICATION_DATA:
            if data:
                d.pieces.append(data)
        elif ctype == HANDSHAKE:
            for msg_type, body in d.hs.feed(data):
                self._handshake(d, msg_type, body)
        elif ctype == ALERT:
            for i in range(0, len(data) - 1, 2):
                self.stats.alerts += 1
                if data[i + 1] == 0:  # close_notify
                    self.stats.close_notifies += 1
                    d.closed = True
        elif ctype == CHANGE_CIPHER_SPEC:
            self.stats.change_cipher_specs += 1
            if self.version != TLS13 and not self._compat_ccs_before_server_hello(d):
                self._change_cipher_spec(d)
        # heartbeat (24): nothing to hand on

    def _flush(self, d: _Direction) -> None:
        if not d.pieces:
            return
        data = d.pieces[0] if len(d.pieces) == 1 else b"".join(d.pieces)
        d.pieces = []
        self.plaintext.sinks[d.index].data(d.plain_end, data, d.stamp)
        d.plain_end += len(data)
        self.stats.plaintext_bytes += len(data)

    def _emit_gap(self, d: _Direction, length: int) -> None:
        if length <= 0:
            return
        self._flush(d)
        self.plaintext.sinks[d.index].gap(d.plain_end, length, d.stamp)
        d.plain_end += length
        self.stats.plaintext_gap_bytes += length

    # -- handshake -----------------------------------------------------------

    def _handshake(self, d: _Direction, msg_type: int, body: bytes) -> None:
        if msg_type == CLIENT_HELLO:
            hello = parse_client_hello(body)
            if hello is None:
                return
            if self.version == TLS12 and d.encrypted:
                self.stats.renegotiations += 1
            self._client_hello = hello
            self.client_direction = d.index
        elif msg_type == SERVER_HELLO:
            server_hello = parse_server_hello(body)
            if server_hello is not None:
                self._server_hello(d, server_hello)
        elif msg_type == FINISHED:
            if self.version == TLS13 and d.role == _HANDSHAKE:
                self._advance(d)
        elif msg_type == END_OF_EARLY_DATA:
            if self.version == TLS13 and d.role == _EARLY:
                self._advance(d)
        elif msg_type == KEY_UPDATE:
            if self.version == TLS13 and isinstance(d.cipher, Tls13Cipher) and d.role == _APPLICATION:
                d.cipher = d.cipher.updated()
                d.seq = 0
                self.stats.key_updates += 1

    def _advance(self, d: _Direction) -> None:
        """TLS 1.3: switch to the next cipher in order (sequence numbers restart)."""
        d.role, d.cipher = d.ahead.pop(0)
        d.seq = 0

    def _server_hello(self, server: _Direction, hello: ServerHello) -> None:
        if hello.is_hello_retry:
            # TLS 1.3 (its middlebox-compat CCS may follow); a second
            # ClientHello, with the same random, and the ServerHello follow
            self.stats.hello_retry_requests += 1
            self.version = TLS13
            return
        client = self._dirs[1 - server.index]
        client_hello = self._client_hello
        first = self.suite_name is None
        suite = SUITES.get(hello.cipher_suite)
        if first:
            self.suite_name = suite.name if suite is not None else f"0x{hello.cipher_suite:04X}"
            self.stats.suites[self.suite_name] += 1
        if hello.version == TLS13:
            self.version = TLS13
            self.stats.tls13 = 1
            self.stats.resumed = int(EXT_PRE_SHARED_KEY in hello.extensions)
            server.encrypted = client.encrypted = True
            if client_hello is None:
                return self._no_keys(reasons.HANDSHAKE_NOT_CAPTURED)
            if suite is None or not suite.tls13:
                return self._no_keys(reasons.UNSUPPORTED_SUITE)
            random = client_hello.random

            def cipher(label: str) -> Tls13Cipher | None:
                secret = self._keylog.secret(label, random)
                return Tls13Cipher(suite, secret) if secret is not None else None

            server_ciphers: list[tuple[str, RecordCipher | None]] = [(_HANDSHAKE, cipher(SERVER_HANDSHAKE_TRAFFIC_SECRET)),
                              (_APPLICATION, cipher(SERVER_TRAFFIC_SECRET_0))]
            client_ciphers: list[tuple[str, RecordCipher | None]] = [(_HANDSHAKE, cipher(CLIENT_HANDSHAKE_TRAFFIC_SECRET)),
                              (_APPLICATION, cipher(CLIENT_TRAFFIC_SECRET_0))]
            if all(c is None for _, c in server_ciphers + client_ciphers):
                return self._no_keys(reasons.NO_KEY)
            early = EXT_EARLY_DATA in client_hello.extensions and EXT_PRE_SHARED_KEY in hello.extensions
            if early:
                client_ciphers.insert(0, (_EARLY, cipher(CLIENT_EARLY_TRAFFIC_SECRET)))
            server.ahead, client.ahead = server_ciphers, client_ciphers
            self._advance(server)
            self._advance(client)
            if early:
                client.seq = client.records_before_keys  # 0-RTT records already read (not decrypted)
        elif hello.version == TLS12:
            self.version = TLS12
            self.stats.tls12 = 1
            if client_hello is None:
                return self._no_keys(reasons.HANDSHAKE_NOT_CAPTURED)
            if first:
                self.stats.resumed = int(bool(hello.session_id) and hello.session_id == client_hello.session_id)
            if suite is None or suite.tls13:
                return self._no_keys(reasons.UNSUPPORTED_SUITE)
            master = self._keylog.master_secret(client_hello.random, hello.session_id)
            if master is None:
                return self._no_keys(reasons.NO_KEY)
            mac_length = HASH_LENGTHS[suite.mac_hash] if suite.mac_hash else 0
            iv_length = 0 if suite.cipher == AES_CBC else 12 if suite.cipher == CHACHA20_POLY1305 else 4
            keys = key_block12(suite.prf_hash, master, client_hello.random, hello.random,
                               mac_length, suite.key_length, iv_length)
            if suite.cipher == AES_CBC:
                etm = EXT_ENCRYPT_THEN_MAC in hello.extensions
                client.pending = Tls12CbcCipher(suite, keys.client_mac, keys.client_key, etm)
                server.pending = Tls12CbcCipher(suite, keys.server_mac, keys.server_key, etm)
            else:
                client.pending = Tls12AeadCipher(suite, keys.client_key, keys.client_iv)
                server.pending = Tls12AeadCipher(suite, keys.server_key, keys.server_iv)
        else:
            self.version = self.version or hello.version
            self._no_keys(reasons.UNSUPPORTED_VERSION)

    def _no_keys(self, reason: str) -> None:
        self._reasons.add(reason)
        for d in self._dirs:
            d.pending = None
            if self.version == TLS13:
                d.cipher, d.ahead = None, []

    def _compat_ccs_before_server_hello(self, d: _Direction) -> bool:
        """TLS 1.3's middlebox-compatibility CCS that a client sending 0-RTT
        early data puts right after its ClientHello (RFC 8446 appendix D.4):
        no ServerHello yet, so it must not switch the direction to TLS 1.2 keys."""
        hello = self._client_hello
        return (self.version is None and hello is not None and d.index == self.client_direction
                and EXT_EARLY_DATA in hello.extensions)

    def _change_cipher_spec(self, d: _Direction) -> None:
        """TLS 1.2: this direction's next records use the negotiated keys."""
        if d.pending is None and self.version is None:
            self._reasons.add(reasons.HANDSHAKE_NOT_CAPTURED)
        d.cipher, d.pending = d.pending, None
        d.encrypted = True
        d.seq = 0

    def _unreadable_before_keys(self, d: _Direction, size: int) -> None:
        """Application data before any ServerHello: 0-RTT early data, or a
        connection whose handshake the capture lacks."""
        self._count_undecrypted(size)
        hello = self._client_hello
        if hello is not None and EXT_EARLY_DATA in hello.extensions and self.version is None:
            d.records_before_keys += 1
            self._reasons.add(reasons.EARLY_DATA)
        else:
            self._reasons.add(reasons.HANDSHAKE_NOT_CAPTURED)

    # -- losses and resynchronisation --------------------------------------------

    def _lose(self, d: _Direction, length: int) -> None:
        """`length` stream bytes the capture lacks."""
        d.end += length
        self.stats.lost_bytes += length
        d.hs.reset()
        if d.dead:
            return
        if d.skip_to is not None:
            if d.end <= d.skip_to:
                return  # still inside the damaged record
            d.skip_to = None
            d.buf, d.buf_start = b"", d.end
            self._unsync(d)
            return
        if d.synced and len(d.buf) >= HEADER:
            ctype = d.buf[0]
            record_end = d.buf_start + HEADER + ((d.buf[3] << 8) | d.buf[4])
            if d.end <= record_end:
                # the loss is inside this record: it is lost, the next boundary is known
                protected = self._is_protected(d, ctype)
                if protected:
                    self._begin_loss(d, d.buf_start, d.seq)
                    self._count_undecrypted(len(d.buf))
                    d.seq += 1
                d.buf = b""
                if d.end == record_end:
                    d.buf_start = d.end
                else:
                    d.skip_to = record_end
                return
        if d.synced:
            self._begin_loss(d, d.buf_start, d.seq)
        if d.encrypted:
            self._count_undecrypted(len(d.buf))
        d.buf, d.buf_start = b"", d.end
        self._unsync(d)

    def _unsync(self, d: _Direction) -> None:
        d.synced = False

    def _lose_step(self, d: _Direction, offset: int) -> None:
        """Bytes that cannot be a record header where one should be."""
        self._begin_loss(d, offset, d.seq)
        d.synced = False

    def _begin_loss(self, d: _Direction, offset: int, seq: int) -> None:
        if d.encrypted:
            self._lossy = True
        if d.loss_start is None and d.encrypted:
            d.loss_start = offset
            d.loss_seq = seq
            d.loss_role = d.role

    def _loss_may_hold_data(self, d: _Direction, role_now: str) -> bool:
        """Whether lost records may have carried application data."""
        if self.version == TLS13:
            return role_now == _APPLICATION or d.loss_role == _APPLICATION
        return True

    def _hunt(self, d: _Direction, buf: bytes, pos: int) -> int:
        """Look for a record boundary in buf from pos. Returns where to go on:
        with d.synced set, the boundary (or the end of a record it already
        decrypted); otherwise the first byte to keep for later."""
        n = len(buf)
        while True:
            match = _HEADER_CANDIDATE.search(buf, pos)
            if match is None:
                keep = max(pos, n - (HEADER - 1))  # a header may begin in the last bytes
                self._skip(d, keep - pos)
                return keep
            p = match.start()
            self._skip(d, p - pos)
            pos = p
            length = (buf[p + 3] << 8) | buf[p + 4] if p + HEADER <= n else -1
            if length < 0:
                return p  # the header is not all here yet
            cipher = d.cipher
            limit = cipher.max_ciphertext if cipher is not None else MAX_CIPHERTEXT_12
            if not 1 <= length <= limit:
                pos = p + 1
                continue
            end = p + HEADER + length
            if end > n:
                return p  # wait for the rest of the candidate
            header = buf[p:p + HEADER]
            if cipher is not None and self._is_protected(d, header[0]):
                if self._resync(d, header, buf[p + HEADER:end], d.buf_start + p):
                    return end
                self._skip(d, 1)
                pos = p + 1
                d.hunt_failures += 1
                if d.hunt_failures >= MAX_HUNT_FAILURES:
                    self._give_up(d, reasons.LOST_SYNC)
                    self._count_undecrypted(n - pos)
                    return n
                continue
            # no keys (or plaintext): believe the header if the next one follows it
            if end == n or (end + 3 <= n and 20 <= buf[end] <= 24 and buf[end + 1] == 3 and buf[end + 2] <= 4):
                d.synced = True
                self.stats.resyncs += 1
                return p
            self._skip(d, 1)
            pos = p + 1

    def _skip(self, d: _Direction, count: int) -> None:
        if count > 0 and d.encrypted:
            self._count_undecrypted(count)

    def _resync(self, d: _Direction, header: bytes, payload: bytes, start: int) -> bool:
        """Try to open a hunted candidate record with the sequence numbers the
        loss allows (and in TLS 1.3 the next traffic secret too)."""
        cipher = d.cipher
        assert cipher is not None
        lost = start - (d.loss_start if d.loss_start is not None else start)
        least = max(1, -(-lost // (HEADER + cipher.max_ciphertext))) if lost else 0
        most = max(least, lost // (HEADER + cipher.suite.tag_length) if lost else 0)
        base = d.loss_seq if d.loss_start is not None else d.seq
        # the likeliest count of lost records first: by the mean record size so far
        guess = lost // (d.wire_bytes // d.wire_records) if d.wire_records and d.wire_bytes else least
        seqs = [base + count for count in _outward(min(max(guess, least), most), least, most)]
        hint = cipher.seq_hint(payload)
        if hint is not None and base + least <= hint <= base + most:
            seqs.insert(0, hint)
        found = cipher.find(header, payload, seqs)
        switched = False
        if found is None and self.version == TLS13:
            # a key change may be among the lost records
            later: list[tuple[str, RecordCipher]] = []
            if d.ahead and d.ahead[0][1] is not None:
                later.append((d.ahead[0][0], d.ahead[0][1]))  # type: ignore[arg-type]
            elif isinstance(cipher, Tls13Cipher) and d.role == _APPLICATION:
                later.append((_APPLICATION, cipher.updated()))
            for role, candidate in later:
                found = candidate.find(header, payload, range(0, min(most, MAX_SEQ_TRIALS) + 1))
                if found is not None:
                    if d.ahead and d.ahead[0][1] is candidate:
                        self._advance(d)
                    else:
                        d.cipher, d.role = candidate, role
                        self.stats.key_updates += 1
                    switched = True
                    break
        if found is None:
            return False
        seq, ctype, plaintext = found
        d.synced = True
        d.seq = seq + 1
        self.stats.resyncs += 1
        self._opened(d, start, seq, ctype, plaintext, switched)
        return True

    def _give_up(self, d: _Direction, reason: str) -> None:
        d.dead = True
        self._reasons.add(reason)

    def _count_undecrypted(self, count: int) -> None:
        self.stats.undecrypted_bytes += count

    # -- outcome -----------------------------------------------------------------

    def _settle(self) -> None:
        s = self.stats
        left = s.undecrypted_bytes > 0 or s.failed_records > 0 or self._lossy
        if not left:
            if s.records:
                s.decrypted = 1
            else:
                s.no_encrypted_data = 1
            return
        if s.records:
            s.partly_decrypted = 1
        else:
            s.undecrypted = 1
        found = set(self._reasons)
        if not found:
            found.add(reasons.CAPTURE_GAP if self._lossy else reasons.NOT_TLS)
        for reason in found:
            s.reasons[reason] += 1


def _outward(center: int, low: int, high: int) -> list[int]:
    """center, center+1, center-1, center+2, ... within [low, high], at most MAX_SEQ_TRIALS."""
    out = [center]
    step = 1
    while len(out) < MAX_SEQ_TRIALS and (center - step >= low or center + step <= high):
        if center + step <= high:
            out.append(center + step)
        if center - step >= low:
            out.append(center - step)
        step += 1
    return out[:MAX_SEQ_TRIALS]


class CiphertextSink:
    """One direction of a TLS connection as a `DirectionSink`: its calls are
    the TCP stream's, ciphertext; the TLS connection turns them into the
    same calls, plaintext, on its plaintext sinks."""

    __slots__ = ("tls", "direction")

    def __init__(self, tls: TlsConnection, direction: int) -> None:
        self.tls = tls
        self.direction = direction

    def data(self, offset: int, payload: bytes, stamp: Any) -> None:
        self.tls.ciphertext_bytes += len(payload)
        self.tls.push(self.direction, offset, len(payload), payload, stamp)

    def gap(self, offset: int, length: int, stamp: Any) -> None:
        self.tls.push(self.direction, offset, length, b"", stamp)

    def truncated(self, offset: int, length: int, prefix: bytes, stamp: Any) -> None:
        self.tls.ciphertext_bytes += length
        self.tls.push(self.direction, offset, length, prefix, stamp)
