"""MACed readings (crates/sigil-objects, `mac`) against pycose and cryptography.

The reading key Sigil derives from a PSK is recomputed with cryptography's HKDF from the label
in docs/wire-formats.md; a COSE_Mac0 reading Sigil makes is verified by pycose under that key and
its headers read back; a reading pycose MACs (HMAC 256/64) is accepted by Sigil, and one under
another key, or with its tag cut, is refused.

The Rust side is the `maced_reading` example (hex in arguments and on stdout)."""
import os
import subprocess

import cbor2
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pycose.algorithms import HMAC25664
from pycose.headers import KID, Algorithm
from pycose.keys import SymmetricKey
from pycose.messages import Mac0Message

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TOOL = os.environ.get("SIGIL_MACED_READING") or os.path.join(ROOT, "target", "debug", "examples", "maced_reading")

PSK = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
NODE = bytes.fromhex("3f0e6a1d5c8211904b27d608e473a955")
# Sigil's private-use header label of the full sequence number (docs/wire-formats.md).
SEQ = -65537
SENML = cbor2.dumps([{0: "t", 1: "Cel", 2: 21.5}])


@pytest.fixture(scope="module", autouse=True)
def tool():
    if "SIGIL_MACED_READING" not in os.environ:
        subprocess.run(["cargo", "build", "-q", "-p", "sigil-objects", "--example", "maced_reading"], cwd=ROOT, check=True)


def run(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)


def reading_key(psk: bytes, node: bytes) -> bytes:
    info = b"sigil-reading-mac-key-v1\x00" + node
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(psk)


def test_reading_key_is_hkdf_sha256_of_the_psk():
    out = run("key", PSK.hex(), NODE.hex())
    assert out.returncode == 0, out.stdout
    assert bytes.fromhex(out.stdout.strip()) == reading_key(PSK, NODE)


def test_pycose_verifies_a_reading_maced_by_sigil():
    out = run("mac", PSK.hex(), NODE.hex(), 1000, SENML.hex())
    assert out.returncode == 0, out.stdout
    raw = bytes.fromhex(out.stdout.strip())
    assert cbor2.loads(raw).tag == 17
    msg = Mac0Message.decode(raw)
    msg.key = SymmetricKey(k=reading_key(PSK, NODE))
    assert msg.verify_tag()
    assert msg.phdr[Algorithm] == HMAC25664
    assert msg.phdr[KID] == NODE
    assert msg.phdr[SEQ] == 1000
    assert msg.payload == SENML
    assert len(msg.auth_tag) == 8


def pycose_reading(key: bytes, seq: int) -> bytes:
    msg = Mac0Message(phdr={Algorithm: HMAC25664, KID: NODE, SEQ: seq}, payload=SENML)
    msg.key = SymmetricKey(k=key)
    return msg.encode()


def test_sigil_accepts_a_reading_maced_by_pycose():
    raw = pycose_reading(reading_key(PSK, NODE), 7)
    out = run("check", reading_key(PSK, NODE).hex(), 7, raw.hex())
    assert out.returncode == 0, out.stdout
    lines = out.stdout.split()
    assert lines[0] == "ok"
    assert bytes.fromhex(lines[1]) == NODE
    assert bytes.fromhex(lines[2]) == SENML


def test_sigil_refuses_pycose_readings_under_another_key_or_number_or_with_a_cut_tag():
    key = reading_key(PSK, NODE)
    other = reading_key(PSK, bytes(16))
    out = run("check", key.hex(), 7, pycose_reading(other, 7).hex())
    assert (out.returncode, out.stdout.strip()) == (1, "refused bad_tag")
    out = run("check", key.hex(), 8, pycose_reading(key, 7).hex())
    assert (out.returncode, out.stdout.strip()) == (1, "refused sequence_mismatch")
    msg = cbor2.loads(pycose_reading(key, 7))
    msg.value[3] = msg.value[3][:4]
    out = run("check", key.hex(), 7, cbor2.dumps(msg).hex())
    assert (out.returncode, out.stdout.strip()) == (1, "refused bad_tag")
