"""The host-side checks of the ECC comparison (tools/devbench/run.py, `ecc_check`): what the
device computes with precomputed pairs or a joint verification pass is accepted only if an
independent implementation (pyca/cryptography) agrees. Needs no firmware image."""
import os
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import run  # noqa: E402

CURVE = ec.SECP256R1()
# RFC 6979 A.2.5: the key whose public value is keygen_p256's known answer.
RFC6979_X = 0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721


def point(key):
    return key.public_key().public_bytes(serialization.Encoding.X962,
                                         serialization.PublicFormat.UncompressedPoint)


def flip(b, i):
    return b[:i] + bytes([b[i] ^ 1]) + b[i + 1:]


def test_a_pair_must_be_a_scalar_and_its_multiple_of_g():
    k = 0x1234567890ABCDEF1234567890ABCDEF1234567890ABCDEF1234567890ABCDEF
    good = k.to_bytes(32, "big") + point(ec.derive_private_key(k, CURVE))
    assert run.ecc_check("ibpv_pair32", good, 256) is None
    assert run.ecc_check("ibpv_pair32", flip(good, 5), 256) == "r·G is not R"
    assert run.ecc_check("ibpv_pair32", good[:96], 256) == "r·G is not R"


def test_a_signature_must_verify_under_the_rfc6979_key():
    key = ec.derive_private_key(RFC6979_X, CURVE)
    assert point(key).hex() == run.KAT["keygen_p256"]["output"]
    r, s = decode_dss_signature(key.sign(b"sample", ec.ECDSA(hashes.SHA256())))
    good = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    assert run.ecc_check("ibpv_sign", good, 256) is None
    assert run.ecc_check("ibpv_sign", flip(good, 40), 256) == "the signature does not verify"


def test_an_ecdh_output_must_agree_with_the_rfc5903_responder():
    responder = ec.derive_private_key(int(run.RFC5903_R, 16), CURVE)
    # The responder's public value is the one the device's operations use (RFC 5903 §8.1).
    assert point(responder)[1:33].hex() == "d12dfb5289c8d4f81208b70270398c342296970a0bccb74c736fc7554494bf63"
    mine = ec.derive_private_key(0xABCDEF, CURVE)
    shared = mine.exchange(ec.ECDH(), responder.public_key())
    good = point(mine) + shared
    for op in ("ecdh_ephemeral", "ibpv_ecdh"):
        assert run.ecc_check(op, good, 256) is None
        assert run.ecc_check(op, flip(good, 80), 256) == "the two sides do not agree"


def test_verification_and_setup_outputs():
    assert run.ecc_check("verify_joint", b"\x01", 256) is None
    assert run.ecc_check("verify_separate", b"", 256) is not None
    assert run.ecc_check("ibpv_setup", (256).to_bytes(4, "little"), 256) is None
    assert run.ecc_check("ibpv_setup", (255).to_bytes(4, "little"), 256) is not None
    assert run.ecc_check("something_new", b"", 256) == "no check for something_new"
