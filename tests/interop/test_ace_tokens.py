"""Access tokens (crates/sigil-ace) against pycose: CWTs that pycose signs (EdDSA, ES256) and
encrypts (AES-CCM-16-64-128) are accepted by Sigil, with their claims read back; the tokens Sigil
makes are verified or decrypted by pycose and their claims read with cbor2. The Rust side is the
`ace_token` example (hex on stdin and stdout)."""
import os
import subprocess

import cbor2
import pytest
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
