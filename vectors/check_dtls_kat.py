#!/usr/bin/env python3
"""Checks the recorded DTLS handshakes behind vectors/device-kat-dtls.json with code Sigil does
not contain: pyca/cryptography (HMAC-SHA256, AES-CCM, ECDSA) and the specifications.

The device operations dtls_<suite>_client replay the server's flights
(dtls-*-server.bin) and answer SHA-256 over every datagram the client sent, then 1. Their
client datagrams are dtls-*-client.bin (eval/sigil-devbench/tests/dtls.rs writes both). Here:

- both answers are the hash of those client datagrams;
- PSK (TLS_PSK_WITH_AES_128_CCM_8, RFC 6655): the master secret from the PSK (RFC 4279 §2,
  extended master secret RFC 7627 when negotiated), the key block (RFC 5246 §6.3), both
  encrypted Finished records decrypted (RFC 6347 §4.1.2.1, RFC 6655 §3) and their verify_data
  recomputed over the DTLS transcript (RFC 6347 §4.2.6, cookie exchange excluded);
- ECDHE-ECDSA with the server's raw public key (RFC 7250): the key the server sends is the
  RFC 6979 A.2.5 key the device pins, its ServerKeyExchange signature verifies over
  client_random || server_random || params (RFC 8422 §5.4), and with the client's ephemeral
  scalar (from the device's deterministic RNG, confirmed by its public point) the ECDH
  premaster secret (RFC 8422 §5.10) gives the same key schedule and both Finished as above;
- ECDHE-PSK (TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256, RFC 8442): the server's unsigned point
  and the client's ephemeral scalar give Z, and the premaster secret is Z and the PSK
  (RFC 5489 §2); both Finished as above;
- mutual ECDHE-ECDSA: as the server-only one, and the client's raw public key is the RFC 5903
  §8.1 initiator's key (sigil_devbench::dtls_client_key) and its CertificateVerify signature
  verifies over the handshake messages before it (RFC 5246 §7.4.8);
- static ECDH (PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8, the ECDH_ECDSA exchange of RFC 4492 §2.1
  with a raw public key): no ServerKeyExchange; the premaster secret is ECDH of the client's
  ephemeral scalar and the server's certified key, and both Finished check out as above.

    python3 vectors/check_dtls_kat.py   # exit 1 on the first mismatch
"""
import hashlib
import hmac
import json
import os
import struct
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESCCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

HERE = os.path.dirname(os.path.abspath(__file__))
PSK = bytes([7] * 16)  # sigil_devbench::DTLS_PSK
PSK_IDENTITY = b"sensor"
# RFC 6979 A.2.5 P-256 public key (sigil_devbench::dtls_server_key's public half).
RFC6979_P256 = bytes.fromhex(
    "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6"
    "7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299")
EXTENDED_MASTER_SECRET = 0x0017
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def read(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return f.read()


def datagrams(rec):
    i = 0
    while i < len(rec):
        (n,) = struct.unpack(">H", rec[i:i + 2])
        yield rec[i + 2:i + 2 + n]
        i += 2 + n


def records(dgram):
    """(type, epoch, 48-bit sequence number, header bytes, fragment) per record (RFC 6347 §4.1)."""
    i = 0
    while i < len(dgram):
        ctype, version, epoch, seq_hi, seq_lo, n = struct.unpack(">BHHHIH", dgram[i:i + 13])
        assert version == 0xFEFD, "DTLS 1.2"
        yield ctype, epoch, (seq_hi << 32) | seq_lo, dgram[i:i + 13], dgram[i + 13:i + 13 + n]
        i += 13 + n


def prf(secret, label, seed, n):
    """TLS 1.2 PRF with SHA-256 (RFC 5246 §5)."""
    seed = label + seed
    out, a = b"", seed
    while len(out) < n:
        a = hmac.new(secret, a, hashlib.sha256).digest()
        out += hmac.new(secret, a + seed, hashlib.sha256).digest()
    return out[:n]


def extensions(body, offset):
    if offset == len(body):
        return {}
    (total,) = struct.unpack(">H", body[offset:offset + 2])
    exts, i = {}, offset + 2
    while i < offset + 2 + total:
        t, n = struct.unpack(">HH", body[i:i + 4])
        exts[t] = body[i + 4:i + 4 + n]
        i += 4 + n
    return exts


def hello(body, client):
    """(random, extensions) of a ClientHello or ServerHello (RFC 6347 §4.2.1, RFC 5246 §7.4.1)."""
    random, i = body[2:34], 34
    i += 1 + body[i]  # session id
    if client:
        i += 1 + body[i]  # cookie
        (n,) = struct.unpack(">H", body[i:i + 2])
        i += 2 + n  # cipher suites
        i += 1 + body[i]  # compression methods
    else:
        i += 2 + 1  # cipher suite, compression method
    return random, extensions(body, i)


class Handshake:
    """The plaintext handshake messages in the order sent, with the client's and the server's
    epoch-1 records."""

    def __init__(self, client_rec, server_rec):
        self.messages, self.encrypted = [], {}
        # Flights alternate: client CH1, server HVR, client CH2, server flight, client flight,
        # server flight. Merge them in that order.
        c, s = list(datagrams(client_rec)), list(datagrams(server_rec))
        order = [c[0], s[0], c[1]] + s[1:-1] + c[2:] + s[-1:]
        assert len(order) == len(c) + len(s)
        for d in order:
            side = "client" if any(d is x for x in c) else "server"
            for ctype, epoch, seq, header, frag in records(d):
                if epoch == 1:
                    self.encrypted[side] = (ctype, seq, header, frag)
                elif ctype == 22:
                    mtype, length, mseq, off, flen = struct.unpack(">B3sH3s3s", frag[:12])
                    assert off == b"\0\0\0" and flen == length, "unfragmented"
                    self.messages.append((side, mtype, frag[:12 + int.from_bytes(length, "big")]))

    def find(self, side, mtype, nth=0):
        return [m for s, t, m in self.messages if s == side and t == mtype][nth]

    def transcript(self, until_side=None, until_type=None):
        """Messages hashed for Finished and the session hash: everything but the first
        ClientHello and the HelloVerifyRequest (RFC 6347 §4.2.6)."""
        out, skipped = b"", False
        for side, mtype, m in self.messages:
            if mtype == 3:
                continue
            if mtype == 1 and not skipped:
                skipped = True
                continue
            out += m
            if (side, mtype) == (until_side, until_type):
                break
        return out


def decrypt_finished(key, iv, ctype, seq, header, frag):
    """AES-128-CCM-8 record (RFC 6655 §3): nonce = salt || explicit nonce; additional data =
    epoch || seq || type || version || plaintext length (RFC 5246 §6.2.3.3)."""
    explicit, sealed = frag[:8], frag[8:]
    aad = header[3:11] + header[0:3] + struct.pack(">H", len(sealed) - 8)
    assert explicit == header[3:11], "explicit nonce is epoch || sequence number"
    return AESCCM(key, tag_length=8).decrypt(iv + explicit, sealed, aad)


def check_finished(hs, premaster, sh_ext, client_random, server_random):
    """Master secret (extended, RFC 7627 §4, when the ServerHello says so), key block, and
    both encrypted Finished records decrypted and recomputed."""
    if EXTENDED_MASTER_SECRET in sh_ext:
        session_hash = hashlib.sha256(hs.transcript("client", 16)).digest()
        master = prf(premaster, b"extended master secret", session_hash, 48)
    else:
        master = prf(premaster, b"master secret", client_random + server_random, 48)
    block = prf(master, b"key expansion", server_random + client_random, 40)
    keys = {"client": (block[0:16], block[32:36]), "server": (block[16:32], block[36:40])}
    for side, label in (("client", b"client finished"), ("server", b"server finished")):
        ctype, seq, header, frag = hs.encrypted[side]
        plain = decrypt_finished(*keys[side], ctype, seq, header, frag)
        assert plain[0] == 20 and int.from_bytes(plain[1:4], "big") == 12, plain.hex()
        want = prf(master, label, hashlib.sha256(hs.transcript()).digest(), 12)
        assert plain[12:] == want, f"{side} Finished: {plain[12:].hex()} != {want.hex()}"
        hs.messages.append((side, 20, plain))


def check_psk(answer):
    hs = Handshake(read("dtls-psk-client.bin"), read("dtls-psk-server.bin"))
    client_random, _ = hello(hs.find("client", 1, 1)[12:], client=True)
    server_random, sh_ext = hello(hs.find("server", 2)[12:], client=False)
    cke = hs.find("client", 16)[12:]
    (n,) = struct.unpack(">H", cke[:2])
    assert cke[2:2 + n] == PSK_IDENTITY, cke
    # RFC 4279 §2: other_secret is N zero bytes for plain PSK.
    premaster = struct.pack(">H", len(PSK)) + bytes(len(PSK)) + struct.pack(">H", len(PSK)) + PSK
    check_finished(hs, premaster, sh_ext, client_random, server_random)
    digest = hashlib.sha256(b"".join(datagrams(read("dtls-psk-client.bin")))).hexdigest()
    assert answer == digest + "01", "dtls_psk_client answer is the hash of the client datagrams"


def bench_rng(seed, n):
    """sigil_devbench::BenchRng: x <- 73x + 41 (mod 256), each new x one output byte."""
    out, x = bytearray(), seed
    for _ in range(n):
        x = (x * 73 + 41) % 256
        out.append(x)
    return bytes(out)


def client_ephemeral(point):
    """The client's ECDHE scalar: 32 bytes of BenchRng(1)'s output, found by deriving the
    public point the client sent (so the check does not depend on the order of draws)."""
    stream = bench_rng(1, 512)
    for off in range(len(stream) - 32):
        d = int.from_bytes(stream[off:off + 32], "big")
        if not 0 < d < P256_ORDER:
            continue
        key = ec.derive_private_key(d, ec.SECP256R1())
        if key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint) == point:
            return key
    raise AssertionError("the client's ECDHE point is not from BenchRng(1)")


def check_rpk(answer):
    hs = Handshake(read("dtls-rpk-client.bin"), read("dtls-rpk-server.bin"))
    client_random, _ = hello(hs.find("client", 1, 1)[12:], client=True)
    server_random, sh_ext = hello(hs.find("server", 2)[12:], client=False)
    assert sh_ext.get(20) == b"\x02", "server_certificate_type raw public key (RFC 7250 §4.2)"
    cert = hs.find("server", 11)[12:]
    spki = cert[3:]
    # SubjectPublicKeyInfo of a P-256 key: the uncompressed point is its last 65 bytes.
    assert spki[-65:] == RFC6979_P256, spki.hex()
    ske = hs.find("server", 12)[12:]
    assert ske[0] == 3 and ske[1:3] == b"\x00\x17", "named_curve secp256r1"
    plen = ske[3]
    params, rest = ske[:4 + plen], ske[4 + plen:]
    assert rest[:2] == b"\x04\x03", "ecdsa_secp256r1_sha256"
    (slen,) = struct.unpack(">H", rest[2:4])
    der = rest[4:4 + slen]
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), RFC6979_P256)
    key.verify(der, client_random + server_random + params, ec.ECDSA(hashes.SHA256()))
    server_point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), params[4:])
    cke = hs.find("client", 16)[12:]
    client = client_ephemeral(cke[1:1 + cke[0]])
    # RFC 8422 §5.10: the premaster secret is the x-coordinate of the shared point.
    premaster = client.exchange(ec.ECDH(), server_point)
    check_finished(hs, premaster, sh_ext, client_random, server_random)
    digest = hashlib.sha256(b"".join(datagrams(read("dtls-rpk-client.bin")))).hexdigest()
    assert answer == digest + "01", "dtls_rpk_client answer is the hash of the client datagrams"


# RFC 5903 §8.1 initiator's private key i: sigil_devbench::dtls_client_key, the mutual
# handshake's client key.
RFC5903_I = 0xC88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433


def server_raw_key(hs):
    """The server's Certificate is its raw public key (RFC 7250 §3): the RFC 6979 key."""
    cert = hs.find("server", 11)[12:]
    spki = cert[3:]
    assert spki[-65:] == RFC6979_P256, spki.hex()
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), RFC6979_P256)


def answer_is_hash(name, answer, client_file):
    digest = hashlib.sha256(b"".join(datagrams(read(client_file)))).hexdigest()
    assert answer == digest + "01", f"{name} answer is the hash of the client datagrams"


def check_ecdhe_psk(answer):
    hs = Handshake(read("dtls-ecdhe-psk-client.bin"), read("dtls-ecdhe-psk-server.bin"))
    client_random, _ = hello(hs.find("client", 1, 1)[12:], client=True)
    server_random, sh_ext = hello(hs.find("server", 2)[12:], client=False)
    # ServerKeyExchange: psk_identity_hint<0..2^16-1>, then ServerECDHParams, unsigned.
    ske = hs.find("server", 12)[12:]
    (hint,) = struct.unpack(">H", ske[:2])
    params = ske[2 + hint:]
    assert params[0] == 3 and params[1:3] == b"\x00\x17", "named_curve secp256r1"
    server_point = ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), params[4:4 + params[3]])
    # ClientKeyExchange: psk_identity<0..2^16-1>, then the client's ECPoint.
    cke = hs.find("client", 16)[12:]
    (n,) = struct.unpack(">H", cke[:2])
    assert cke[2:2 + n] == PSK_IDENTITY, cke
    point = cke[2 + n:]
    client = client_ephemeral(point[1:1 + point[0]])
    z = client.exchange(ec.ECDH(), server_point)
    premaster = struct.pack(">H", len(z)) + z + struct.pack(">H", len(PSK)) + PSK
    check_finished(hs, premaster, sh_ext, client_random, server_random)
    answer_is_hash("dtls_ecdhe_psk_client", answer, "dtls-ecdhe-psk-client.bin")


def check_rpk_mutual(answer):
    hs = Handshake(read("dtls-rpk-mutual-client.bin"), read("dtls-rpk-mutual-server.bin"))
    client_random, _ = hello(hs.find("client", 1, 1)[12:], client=True)
    server_random, sh_ext = hello(hs.find("server", 2)[12:], client=False)
    assert sh_ext.get(19) == b"\x02", "client_certificate_type raw public key (RFC 7250 §4.2)"
    key = server_raw_key(hs)
    hs.find("server", 13)  # CertificateRequest
    ske = hs.find("server", 12)[12:]
    params, rest = ske[:4 + ske[3]], ske[4 + ske[3]:]
    (slen,) = struct.unpack(">H", rest[2:4])
    key.verify(rest[4:4 + slen], client_random + server_random + params, ec.ECDSA(hashes.SHA256()))
    own = ec.derive_private_key(RFC5903_I, ec.SECP256R1()).public_key()
    own_point = own.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    assert hs.find("client", 11)[12:][-65:] == own_point, "the client's raw public key"
    cv = hs.find("client", 15)[12:]
    assert cv[:2] == b"\x04\x03", "ecdsa_secp256r1_sha256"
    (slen,) = struct.unpack(">H", cv[2:4])
    own.verify(cv[4:4 + slen], hs.transcript("client", 16), ec.ECDSA(hashes.SHA256()))
    server_point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), params[4:])
    cke = hs.find("client", 16)[12:]
    premaster = client_ephemeral(cke[1:1 + cke[0]]).exchange(ec.ECDH(), server_point)
    check_finished(hs, premaster, sh_ext, client_random, server_random)
    answer_is_hash("dtls_rpk_mutual_client", answer, "dtls-rpk-mutual-client.bin")


def check_static_ecdh(answer):
    hs = Handshake(read("dtls-static-ecdh-client.bin"), read("dtls-static-ecdh-server.bin"))
    client_random, _ = hello(hs.find("client", 1, 1)[12:], client=True)
    server_random, sh_ext = hello(hs.find("server", 2)[12:], client=False)
    assert not [m for s, t, m in hs.messages if s == "server" and t == 12], \
        "static ECDH sends no ServerKeyExchange"
    key = server_raw_key(hs)
    cke = hs.find("client", 16)[12:]
    premaster = client_ephemeral(cke[1:1 + cke[0]]).exchange(ec.ECDH(), key)
    check_finished(hs, premaster, sh_ext, client_random, server_random)
    answer_is_hash("dtls_static_ecdh_client", answer, "dtls-static-ecdh-client.bin")


def main():
    kat = json.loads(read("device-kat-dtls.json"))["operations"]
    check_psk(kat["dtls_psk_client"]["output"])
    check_rpk(kat["dtls_rpk_client"]["output"])
    check_ecdhe_psk(kat["dtls_ecdhe_psk_client"]["output"])
    check_rpk_mutual(kat["dtls_rpk_mutual_client"]["output"])
    check_static_ecdh(kat["dtls_static_ecdh_client"]["output"])
    print("device-kat-dtls.json: PSK, ECDHE-PSK, ECDHE-ECDSA (server-only and mutual) and static "
          "ECDH handshakes checked (keys, signatures, both Finished)")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # an assertion, a bad tag, a signature that does not verify
        print("device-kat-dtls.json does not check out:", type(e).__name__, e)
        sys.exit(1)
