"""The pairing message (crates/sigil-ace/src/pairing.rs, RFC 8387 §4.1) against pycose.

Both ways: pycose decrypts a message Sigil made (COSE_Encrypt, one ECDH-ES + HKDF-256 recipient
with the ephemeral P-256 key, AES-CCM-16-64-128, the device identity as external AAD) and
verifies the server's COSE_Sign1 inside it; Sigil's device side accepts a message pycose built
the same way, and refuses it when pycose bound it to another device's identity. For an Ed25519
device the same, over X25519 (an OKP ephemeral key), with the device's X25519 key computed
here from its Ed25519 seed as RFC 7748 §4.1 / libsodium do (SHA-512 of the seed, first half).

The Rust side is the `pairing_message` example (hex on stdin and stdout)."""
import hashlib
import os
import subprocess

import cbor2
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESCCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pycose.algorithms import AESCCM1664128, EcdhEsHKDF256, EdDSA
from pycose.headers import IV, KID, Algorithm, EphemeralKey, StaticKey
from pycose.keys import EC2Key, OKPKey
from pycose.keys.curves import P256, Ed25519
from pycose.messages import EncMessage, Sign1Message
from pycose.messages.recipient import DirectKeyAgreement

from conftest import identity_of

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TOOL = os.environ.get("SIGIL_PAIRING_MESSAGE") or os.path.join(
    ROOT, "target", "debug", "examples", "pairing_message"
)
GROUP, SUBSCRIBER = b"\x33" * 16, b"\x44" * 16


@pytest.fixture(scope="module", autouse=True)
def tool():
    if "SIGIL_PAIRING_MESSAGE" not in os.environ:
        subprocess.run(["cargo", "build", "-q", "-p", "sigil-ace", "--example", "pairing_message"], cwd=ROOT, check=True)


def run(*args, stdin=None):
    return subprocess.run([TOOL, *map(str, args)], input=stdin, capture_output=True, text=True)


def device():
    sk = ec.generate_private_key(ec.SECP256R1())
    d = sk.private_numbers().private_value.to_bytes(32, "big")
    point = sk.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return d, point, bytes.fromhex(identity_of("p256", point))


def server():
    sk = Ed25519PrivateKey.generate()
    d = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    x = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return d, x, bytes.fromhex(identity_of("ed25519", x))


def test_pycose_opens_sigils_pairing_message():
    d, point, dev_id = device()
    sd, sx, server_id = server()
    out = run("seal", point.hex(), "ed25519", sd.hex(), 42)
    assert out.returncode == 0, out.stderr
    msg = EncMessage.decode(bytes.fromhex(out.stdout.strip()))
    assert msg.get_attr(Algorithm) == AESCCM1664128
    (rcpt,) = msg.recipients
    assert rcpt.get_attr(Algorithm) == EcdhEsHKDF256
    assert rcpt.get_attr(KID) == dev_id
    rcpt.key = EC2Key(crv=P256, d=d, x=point[1:33], y=point[33:])
    msg.external_aad = dev_id
    inner = msg.decrypt(rcpt)
    sign1 = Sign1Message.decode(inner)
    sign1.key = OKPKey(crv=Ed25519, x=sx)
    assert sign1.verify_signature()
    content = cbor2.loads(sign1.payload)
    assert content[1] == dev_id
    assert content[2] == 42
    assert content[3] == server_id
    assert content[4] == sx
    assert content[6] == "coap://[::1]"
    assert content[7] == GROUP and content[8] == SUBSCRIBER


def pycose_message(point, dev_id, aad_id, sd, sx, server_id, serial=5):
    content = cbor2.dumps({1: dev_id, 2: serial, 3: server_id, 4: sx, 7: GROUP, 8: SUBSCRIBER})
    sign1 = Sign1Message(phdr={Algorithm: EdDSA}, payload=content)
    sign1.key = OKPKey(crv=Ed25519, d=sd, x=sx)
    inner = sign1.encode()
    ephemeral = EC2Key.generate_key(crv=P256)
    rcpt = DirectKeyAgreement(
        phdr={Algorithm: EcdhEsHKDF256},
        uhdr={EphemeralKey: EC2Key(crv=P256, x=ephemeral.x, y=ephemeral.y), KID: dev_id},
    )
    rcpt.key = ephemeral
    rcpt.local_attrs = {StaticKey: EC2Key(crv=P256, x=point[1:33], y=point[33:])}
    msg = EncMessage(
        phdr={Algorithm: AESCCM1664128}, uhdr={IV: os.urandom(13)}, payload=inner, recipients=[rcpt]
    )
    msg.external_aad = aad_id
    return msg.encode()


def test_sigil_opens_pycoses_pairing_message():
    d, point, dev_id = device()
    sd, sx, server_id = server()
    out = run("open", d.hex(), stdin=pycose_message(point, dev_id, dev_id, sd, sx, server_id).hex())
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines()[1:])
    assert lines["serial"] == "5"
    assert bytes.fromhex(lines["server"].replace("-", "").replace(":", "")) == server_id
    assert lines["uri"] == "-"


def test_sigil_refuses_pycoses_message_bound_to_another_device():
    d, point, dev_id = device()
    sd, sx, server_id = server()
    other = b"\x01" * 16
    out = run("open", d.hex(), stdin=pycose_message(point, dev_id, other, sd, sx, server_id).hex())
    assert out.returncode == 1
    assert "does not decrypt" in out.stdout


def ed25519_device():
    """An Ed25519 device: its seed, public key, identity, and the X25519 secret and public value
    of its key (RFC 7748 §4.1 map, computed with hashlib and pyca, not with Sigil)."""
    sk = Ed25519PrivateKey.generate()
    seed = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    x = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    xd = bytearray(hashlib.sha512(seed).digest()[:32])
    xd[0] &= 248
    xd[31] &= 127
    xd[31] |= 64
    xpub = X25519PrivateKey.from_private_bytes(bytes(xd)).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return seed, x, bytes.fromhex(identity_of("ed25519", x)), bytes(xd), xpub



# pycose's ECDH-ES takes EC2 keys only: for X25519 the recipient layer is done here from RFC
# 9053 (§6.3.1 ECDH-ES + HKDF-256, §5.2 COSE_KDF_Context) with pyca, and pycose keeps the
# COSE_Sign1 inside.
def content_key(shared, recipient_protected):
    info = cbor2.dumps([10, [None, None, None], [None, None, None], [128, recipient_protected]])
    return HKDF(algorithm=hashes.SHA256(), length=16, salt=None, info=info).derive(shared)


def enc_structure(protected, dev_id):
    return cbor2.dumps(["Encrypt", protected, dev_id])


def test_sigil_seals_to_an_ed25519_devices_x25519_key():
    seed, x, dev_id, xd, xpub = ed25519_device()
    sd, sx, server_id = server()
    out = run("seal", "ed25519:" + x.hex(), "ed25519", sd.hex(), 43)
    assert out.returncode == 0, out.stderr
    tag = cbor2.loads(bytes.fromhex(out.stdout.strip()))
    assert tag.tag == 96
    protected, unprotected, ciphertext, recipients = tag.value
    (r_protected, r_unprotected, r_ciphertext), = recipients
    assert cbor2.loads(protected) == {1: 10} and cbor2.loads(r_protected) == {1: -25}
    assert r_unprotected[4] == dev_id and r_ciphertext == b""
    # The ephemeral key as COSE_Key: {1: 1 (OKP), -1: 4 (X25519), -2: x}, no y.
    eph = r_unprotected[-1]
    assert eph == {1: 1, -1: 4, -2: eph[-2]} and len(eph[-2]) == 32
    shared = X25519PrivateKey.from_private_bytes(xd).exchange(X25519PublicKey.from_public_bytes(eph[-2]))
    key = content_key(shared, r_protected)
    inner = AESCCM(key, tag_length=8).decrypt(unprotected[5], ciphertext, enc_structure(protected, dev_id))
    sign1 = Sign1Message.decode(inner)
    sign1.key = OKPKey(crv=Ed25519, x=sx)
    assert sign1.verify_signature()
    content = cbor2.loads(sign1.payload)
    assert content[1] == dev_id and content[2] == 43 and content[3] == server_id
    # Bound to the device: another identity as external AAD does not decrypt.
    with pytest.raises(Exception):
        AESCCM(key, tag_length=8).decrypt(unprotected[5], ciphertext, enc_structure(protected, b"\x01" * 16))


def test_sigil_opens_a_message_sealed_here_to_an_ed25519_device():
    seed, x, dev_id, xd, xpub = ed25519_device()
    sd, sx, server_id = server()
    content = cbor2.dumps({1: dev_id, 2: 6, 3: server_id, 4: sx, 7: GROUP, 8: SUBSCRIBER})
    sign1 = Sign1Message(phdr={Algorithm: EdDSA}, payload=content)
    sign1.key = OKPKey(crv=Ed25519, d=sd, x=sx)
    ephemeral = X25519PrivateKey.generate()
    eph_x = ephemeral.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(xpub))
    protected, r_protected = cbor2.dumps({1: 10}), cbor2.dumps({1: -25})
    iv = os.urandom(13)
    ciphertext = AESCCM(content_key(shared, r_protected), tag_length=8).encrypt(
        iv, sign1.encode(), enc_structure(protected, dev_id)
    )
    recipient = [r_protected, {-1: {1: 1, -1: 4, -2: eph_x}, 4: dev_id}, b""]
    message = cbor2.dumps(cbor2.CBORTag(96, [protected, {5: iv}, ciphertext, [recipient]]))
    out = run("open", "ed25519:" + seed.hex(), stdin=message.hex())
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines()[1:])
    assert lines["serial"] == "6"
    # Another (P-256) device's key does not open it.
    d, point, p256_id = device()
    out = run("open", d.hex(), stdin=message.hex())
    assert out.returncode == 1, out.stdout
