"""Access tokens (crates/sigil-ace) against pycose and python-cwt.

pycose: CWTs that pycose signs (EdDSA, ES256) and encrypts (AES-CCM-16-64-128) are accepted by
Sigil, with their claims read back; the tokens Sigil makes are verified or decrypted by pycose and
their claims read with cbor2.

python-cwt: CWTs that python-cwt signs (EdDSA, ES256), encrypts (AES-CCM-16-64-128) and MACs
(HMAC 256/64), each with a cnf PoP key, are accepted by Sigil; the signed, encrypted and MACed
tokens Sigil makes are verified by python-cwt's own CWT decoder (which checks exp against the
wall clock) and their claims, the cnf key among them, read back through its Claims and COSEKey.

The Rust side is the `ace_token` example (hex on stdin and stdout)."""
import os
import subprocess
import time

import cbor2
import cwt
import pytest
from cwt import Claims, COSEKey
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pycose.algorithms import AESCCM1664128, EdDSA, Es256
from pycose.headers import IV, KID, Algorithm
from pycose.keys import EC2Key, OKPKey, SymmetricKey
from pycose.keys.curves import P256, Ed25519
from pycose.messages import Enc0Message, Sign1Message

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TOOL = os.environ.get("SIGIL_ACE_TOKEN") or os.path.join(ROOT, "target", "debug", "examples", "ace_token")

NOW = 1_800_000_000
AUD = "broker"
TOPIC = "temp-3f2a9c0b"
# CWT claim labels (RFC 8392 §4, RFC 8747 §3.1, RFC 9200 §5.9.2).
ISS, AUD_L, EXP, NBF, IAT, CTI, CNF, SCOPE = 1, 3, 4, 5, 6, 7, 8, 9


@pytest.fixture(scope="module", autouse=True)
def tool():
    if "SIGIL_ACE_TOKEN" not in os.environ:
        subprocess.run(["cargo", "build", "-q", "-p", "sigil-ace", "--example", "ace_token"], cwd=ROOT, check=True)


def run(*args, stdin=None):
    return subprocess.run([TOOL, *map(str, args)], input=stdin, capture_output=True, text=True)


def claims(exp=NOW + 600, aud=AUD, scope=None, cnf=None):
    c = {AUD_L: aud, EXP: exp, IAT: NOW, CTI: b"\x0b\x71", SCOPE: scope or [[TOPIC, 1]]}
    if cnf is not None:
        c[CNF] = cnf
    return cbor2.dumps(c)


def ed25519():
    sk = Ed25519PrivateKey.generate()
    d = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    x = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return d, x


def p256():
    sk = ec.generate_private_key(ec.SECP256R1())
    d = sk.private_numbers().private_value.to_bytes(32, "big")
    point = sk.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return d, point


def parse(out: str) -> dict:
    lines = out.strip().splitlines()
    assert lines[0] == "ok", out
    res = {"scope": []}
    for line in lines[1:]:
        k, _, v = line.partition(" ")
        if k == "scope":
            obj, bits = v.split(" ")
            res["scope"].append((obj, int(bits)))
        else:
            res[k] = v
    return res


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_sigil_accepts_cwts_signed_by_pycose(alg):
    d, pub = ed25519() if alg == "ed25519" else p256()
    _, client = p256()
    cnf = {1: {1: 2, -1: 1, -2: client[1:33], -3: client[33:]}}
    m = Sign1Message(phdr={Algorithm: EdDSA if alg == "ed25519" else Es256}, uhdr={KID: b"ac1"},
                     payload=claims(cnf=cnf, scope=[[TOPIC, 1], ["rd", 1]]))
    m.key = OKPKey(crv=Ed25519, d=d, x=pub) if alg == "ed25519" else EC2Key(crv=P256, d=d, x=pub[1:33], y=pub[33:])
    token = m.encode().hex()

    r = run("check-signed", alg, pub.hex(), NOW, AUD, stdin=token)
    assert r.returncode == 0, r.stdout + r.stderr
    got = parse(r.stdout)
    assert got["aud"] == AUD and got["exp"] == str(NOW + 600)
    assert got["scope"] == [(TOPIC, 1), ("rd", 1)]
    assert got["cnf"] == f"public {client.hex()}"

    # Refusals with their reasons: expired, another audience, tampered.
    assert run("check-signed", alg, pub.hex(), NOW + 600, AUD, stdin=token).stdout.startswith("refused Expired")
    assert run("check-signed", alg, pub.hex(), NOW, "rd", stdin=token).stdout.strip() == "refused WrongAudience"
    raw = bytearray(bytes.fromhex(token))
    raw[-1] ^= 1
    assert run("check-signed", alg, pub.hex(), NOW, AUD, stdin=raw.hex()).stdout.strip() == "refused BadSignature"


def test_sigil_accepts_cwts_encrypted_by_pycose():
    key = os.urandom(16)
    psk = os.urandom(16)
    cnf = {1: {1: 4, 2: b"c1", -1: psk}}
    m = Enc0Message(phdr={Algorithm: AESCCM1664128}, uhdr={KID: b"ac1", IV: os.urandom(13)},
                    payload=claims(cnf=cnf))
    m.key = SymmetricKey(k=key)
    token = m.encode().hex()

    r = run("check-encrypted", key.hex(), NOW, AUD, stdin=token)
    assert r.returncode == 0, r.stdout + r.stderr
    got = parse(r.stdout)
    assert got["form"] == "Encrypted"
    assert got["scope"] == [(TOPIC, 1)]
    assert got["cnf"] == f"symmetric {b'c1'.hex()} {psk.hex()}"
    assert run("check-encrypted", os.urandom(16).hex(), NOW, AUD, stdin=token).stdout.strip() == "refused BadTag"


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_pycose_verifies_cwts_signed_by_sigil(alg):
    d, pub = ed25519() if alg == "ed25519" else p256()
    _, client = p256()
    r = run("sign", alg, d.hex(), NOW, AUD, TOPIC, client.hex())
    assert r.returncode == 0, r.stderr
    m = Sign1Message.decode(bytes.fromhex(r.stdout.strip()))
    assert m.phdr[Algorithm] == (EdDSA if alg == "ed25519" else Es256)
    assert m.uhdr[KID] == b"ac1"
    m.key = OKPKey(crv=Ed25519, x=pub) if alg == "ed25519" else EC2Key(crv=P256, x=pub[1:33], y=pub[33:])
    assert m.verify_signature()
    c = cbor2.loads(m.payload)
    assert c[AUD_L] == AUD and c[EXP] == NOW + 3600 and c[IAT] == NOW
    assert c[CTI] == b"\x01\x02\x03\x04"
    assert c[SCOPE] == [[TOPIC, 1]]
    assert c[CNF] == {1: {1: 2, -1: 1, -2: client[1:33], -3: client[33:]}}


def test_pycose_decrypts_cwts_encrypted_by_sigil():
    key = os.urandom(16)
    psk = os.urandom(16)
    r = run("encrypt", key.hex(), NOW, AUD, TOPIC, psk.hex())
    assert r.returncode == 0, r.stderr
    m = Enc0Message.decode(bytes.fromhex(r.stdout.strip()))
    assert m.phdr[Algorithm] == AESCCM1664128
    assert len(m.uhdr[IV]) == 13
    m.key = SymmetricKey(k=key)
    c = cbor2.loads(m.decrypt())
    assert c[AUD_L] == AUD and c[SCOPE] == [[TOPIC, 1]]
    assert c[CNF] == {1: {1: 4, 2: b"c1", -1: psk}}


# python-cwt. Its encoder fills in nbf and iat from the wall clock when they are absent and its
# decoder refuses a token whose exp has passed, so these tests run at the real time.


def cwt_now() -> int:
    return int(time.time())


def cwt_claims(now, cnf, scope=None):
    return {AUD_L: AUD, EXP: now + 600, NBF: now - 60, IAT: now, CTI: b"\x0b\x71",
            SCOPE: scope or [[TOPIC, 1]], CNF: cnf}


def p256_cnf(point: bytes) -> dict:
    return {1: {1: 2, -1: 1, -2: point[1:33], -3: point[33:]}}


def cwt_signing_key(alg, d, pub, private=True):
    if alg == "ed25519":
        k = {1: 1, 2: b"ac1", 3: -8, -1: 6, -2: pub}
    else:
        k = {1: 2, 2: b"ac1", 3: -7, -1: 1, -2: pub[1:33], -3: pub[33:]}
    if private:
        k[-4] = d
    return COSEKey.new(k)


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_sigil_accepts_cwts_signed_by_python_cwt(alg):
    now = cwt_now()
    d, pub = ed25519() if alg == "ed25519" else p256()
    _, client = p256()
    token = cwt.encode(cwt_claims(now, p256_cnf(client), scope=[[TOPIC, 1], ["rd", 1]]),
                       cwt_signing_key(alg, d, pub))
    assert cbor2.loads(token).tag == 18

    r = run("check-signed", alg, pub.hex(), now, AUD, stdin=token.hex())
    assert r.returncode == 0, r.stdout + r.stderr
    got = parse(r.stdout)
    assert got["form"].startswith("Signed")
    assert got["aud"] == AUD and got["exp"] == str(now + 600)
    assert got["scope"] == [(TOPIC, 1), ("rd", 1)]
    assert got["cnf"] == f"public {client.hex()}"

    def check_at(at):
        return run("check-signed", alg, pub.hex(), at, AUD, stdin=token.hex()).stdout

    assert check_at(now + 600).startswith("refused Expired")
    assert check_at(now - 61).startswith("refused NotYetValid")
    raw = bytearray(token)
    raw[-1] ^= 1
    assert run("check-signed", alg, pub.hex(), now, AUD, stdin=raw.hex()).stdout.strip() == "refused BadSignature"


def test_sigil_accepts_cwts_encrypted_by_python_cwt():
    now = cwt_now()
    key = os.urandom(16)
    psk = os.urandom(16)
    cnf = {1: {1: 4, 2: b"c1", -1: psk}}
    token = cwt.encode(cwt_claims(now, cnf), COSEKey.from_symmetric_key(key, alg="AES-CCM-16-64-128", kid="ac1"))
    assert cbor2.loads(token).tag == 16

    r = run("check-encrypted", key.hex(), now, AUD, stdin=token.hex())
    assert r.returncode == 0, r.stdout + r.stderr
    got = parse(r.stdout)
    assert got["form"] == "Encrypted"
    assert got["scope"] == [(TOPIC, 1)]
    assert got["cnf"] == f"symmetric {b'c1'.hex()} {psk.hex()}"
    assert run("check-encrypted", os.urandom(16).hex(), now, AUD, stdin=token.hex()).stdout.strip() == "refused BadTag"


@pytest.mark.parametrize("tagged", [False, True], ids=["cose", "cwt-tag"])
@pytest.mark.parametrize("pop", ["public", "kid"])
def test_sigil_accepts_cwts_maced_by_python_cwt(pop, tagged):
    now = cwt_now()
    key = os.urandom(32)
    _, client = p256()
    cnf = p256_cnf(client) if pop == "public" else {3: b"c1"}
    token = cwt.encode(cwt_claims(now, cnf), COSEKey.from_symmetric_key(key, alg="HMAC 256/64", kid="ac1"),
                       tagged=tagged)
    outer = cbor2.loads(token)
    if tagged:
        assert outer.tag == 61
        outer = outer.value
    assert outer.tag == 17
    assert outer.value[0] == b"\xa1\x01\x04" and len(outer.value[3]) == 8

    r = run("check-maced", key.hex(), now, AUD, stdin=token.hex())
    assert r.returncode == 0, r.stdout + r.stderr
    got = parse(r.stdout)
    assert got["form"] == "Maced"
    assert got["aud"] == AUD and got["exp"] == str(now + 600)
    assert got["scope"] == [(TOPIC, 1)]
    assert got["cnf"] == (f"public {client.hex()}" if pop == "public" else f"kid {b'c1'.hex()}")

    assert run("check-maced", key.hex(), now + 600, AUD, stdin=token.hex()).stdout.startswith("refused Expired")
    assert run("check-maced", key.hex(), now, "rd", stdin=token.hex()).stdout.strip() == "refused WrongAudience"
    assert run("check-maced", os.urandom(32).hex(), now, AUD, stdin=token.hex()).stdout.strip() == "refused BadTag"
    raw = bytearray(token)
    raw[-1] ^= 1
    assert run("check-maced", key.hex(), now, AUD, stdin=raw.hex()).stdout.strip() == "refused BadTag"


def test_sigil_refuses_a_symmetric_pop_key_in_a_cwt_maced_by_python_cwt():
    now = cwt_now()
    key = os.urandom(32)
    cnf = {1: {1: 4, 2: b"c1", -1: os.urandom(16)}}
    token = cwt.encode(cwt_claims(now, cnf), COSEKey.from_symmetric_key(key, alg="HMAC 256/64", kid="ac1"))
    assert run("check-maced", key.hex(), now, AUD, stdin=token.hex()).stdout.strip() == "refused ExposedPopKey"


def assert_sigil_claims(decoded, now):
    c = Claims.new(decoded)
    assert c.aud == AUD and c.exp == now + 3600 and c.iat == now
    assert decoded[CTI] == b"\x01\x02\x03\x04"
    assert decoded[SCOPE] == [[TOPIC, 1]]
    return c


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_python_cwt_verifies_cwts_signed_by_sigil(alg):
    now = cwt_now()
    d, pub = ed25519() if alg == "ed25519" else p256()
    _, client = p256()
    r = run("sign", alg, d.hex(), now, AUD, TOPIC, client.hex())
    assert r.returncode == 0, r.stderr
    token = bytes.fromhex(r.stdout.strip())
    verifier = cwt_signing_key(alg, d, pub, private=False)
    c = assert_sigil_claims(cwt.decode(token, verifier), now)
    pop = COSEKey.new(c.cnf)
    assert pop.kty == 2 and pop.crv == 1
    assert pop.to_dict()[-2] + pop.to_dict()[-3] == client[1:]

    raw = bytearray(token)
    raw[-1] ^= 1
    with pytest.raises(cwt.VerifyError):
        cwt.decode(bytes(raw), verifier)


def test_python_cwt_decrypts_cwts_encrypted_by_sigil():
    now = cwt_now()
    key = os.urandom(16)
    psk = os.urandom(16)
    r = run("encrypt", key.hex(), now, AUD, TOPIC, psk.hex())
    assert r.returncode == 0, r.stderr
    token = bytes.fromhex(r.stdout.strip())
    decoded = cwt.decode(token, COSEKey.from_symmetric_key(key, alg="AES-CCM-16-64-128", kid="ac1"))
    c = assert_sigil_claims(decoded, now)
    assert c.cnf == {1: 4, 2: b"c1", -1: psk}


def test_python_cwt_verifies_cwts_maced_by_sigil():
    now = cwt_now()
    key = os.urandom(32)
    _, client = p256()
    r = run("mac", key.hex(), now, AUD, TOPIC, client.hex())
    assert r.returncode == 0, r.stderr
    token = bytes.fromhex(r.stdout.strip())
    mac0 = cbor2.loads(token)
    assert mac0.tag == 17 and mac0.value[0] == b"\xa1\x01\x04" and mac0.value[1] == {4: b"ac1"}
    verifier = COSEKey.from_symmetric_key(key, alg="HMAC 256/64", kid="ac1")
    c = assert_sigil_claims(cwt.decode(token, verifier), now)
    pop = COSEKey.new(c.cnf)
    assert pop.to_dict()[-2] + pop.to_dict()[-3] == client[1:]

    for tampered in (bytes(token[:-1]) + bytes([token[-1] ^ 1]),
                     token.replace(TOPIC.encode(), TOPIC.upper().encode())):
        with pytest.raises(cwt.VerifyError):
            cwt.decode(tampered, verifier)
    with pytest.raises(cwt.VerifyError):
        cwt.decode(token, COSEKey.from_symmetric_key(os.urandom(32), alg="HMAC 256/64", kid="ac1"))
