#!/usr/bin/env python3
"""Writes vectors/device-kat.json: the known answers of the operations Sigil measures on
microcontrollers (eval/sigil-devbench). Every value is either copied from the RFC that
publishes it or computed here with implementations Sigil does not contain: pyca/cryptography
(AES-CCM, Ed25519, deterministic ECDSA), hashlib (SHA-256, identities) and cbor2 (COSE).

    python3 vectors/gen_device_kat.py          # rewrite the file
    python3 vectors/gen_device_kat.py --check  # exit 1 if the file differs

The host's own outputs, to compare by eye after a change to an operation's inputs:
`cargo run -p sigil-devbench --example print-kat` (eval/sigil-devbench/tests/kat.rs checks them).
"""
import hashlib
import json
import os
import sys

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESCCM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "device-kat.json")
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
from conftest import identity_of  # noqa: E402  (docs/identity.md layout, hashlib only)

H = bytes.fromhex
RFC8032_T1_SK = H("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_T1_PK = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
RFC8032_T2_SIG = ("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
                  "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00")
RFC6979_X = H("c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721")
RFC6979_U = ("04" "60fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6"
             "7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299")
RFC6979_SAMPLE_SHA256 = ("efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716"
                         "f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8")
RFC7748_SHARED = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
RFC5903_GIRX = "d6840f6b42f6edafd13116e0e12565202fef8e9ece7dce03812464d04b9442de"

CCM_KEY = bytes(range(16))
CCM_NONCE = bytes([0xA0, 0xA1, 0xA2, 0xA3, 0, 1, 0, 0, 0, 0, 0, 7])
CCM_AAD = bytes([0, 1, 0, 0, 0, 0, 0, 7, 23, 0xFE, 0xFD, 0, 0])


def ccm8(n):
    pt = bytes(i % 256 for i in range(n))
    return AESCCM(CCM_KEY, tag_length=8).encrypt(CCM_NONCE, pt, CCM_AAD).hex()


def signed_reading(alg, sign):
    """COSE_Sign1 (RFC 9052 §4.2) as docs/wire-formats.md lays it out: protected
    {1: alg, 4: kid, -65537: seq}, empty unprotected map, SenML-CBOR payload."""
    if alg == "ed25519":
        pk = H(RFC8032_T1_PK)
        cose_alg = -8
    else:
        pk = H(RFC6979_U)
        cose_alg = -7
    kid = H(identity_of(alg, pk, b""))
    protected = cbor2.dumps({1: cose_alg, 4: kid, -65537: 42})
    payload = cbor2.dumps([{0: "t", 1: "Cel", 2: 21.5}], canonical=True)
    tbs = cbor2.dumps(["Signature1", protected, b"", payload])
    return cbor2.dumps(cbor2.CBORTag(18, [protected, {}, payload, sign(tbs)])).hex()


def ed25519_sign(tbs):
    return ed25519.Ed25519PrivateKey.from_private_bytes(RFC8032_T1_SK).sign(tbs)


def p256_sign(tbs):
    key = ec.derive_private_key(int.from_bytes(RFC6979_X, "big"), ec.SECP256R1())
    der = key.sign(tbs, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    r, s = decode_dss_signature(der)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def build():
    ops = {
        "keygen_ed25519": (RFC8032_T1_PK, "RFC 8032 §7.1 TEST 1 public key"),
        "keygen_p256": (RFC6979_U, "RFC 6979 A.2.5 public key U"),
        "sign_ed25519": (RFC8032_T2_SIG, "RFC 8032 §7.1 TEST 2 signature"),
        "verify_ed25519": ("01", "RFC 8032 §7.1 TEST 2 verifies"),
        "sign_p256": (RFC6979_SAMPLE_SHA256, "RFC 6979 A.2.5, SHA-256, message 'sample'"),
        "verify_p256": ("01", "RFC 6979 A.2.5 signature verifies"),
        "x25519": (RFC7748_SHARED, "RFC 7748 §6.1 shared secret K"),
        "ecdh_p256": (RFC5903_GIRX, "RFC 5903 §8.1 girx"),
        "ccm8_16": (ccm8(16), "pyca/cryptography AESCCM(tag_length=8)"),
        "ccm8_64": (ccm8(64), "pyca/cryptography AESCCM(tag_length=8)"),
        "ccm8_256": (ccm8(256), "pyca/cryptography AESCCM(tag_length=8)"),
        "sha256_256": (hashlib.sha256(bytes(range(256))).hexdigest(), "hashlib"),
        "reading_sign_ed25519": (signed_reading("ed25519", ed25519_sign),
                                 "cbor2 + pyca/cryptography Ed25519"),
        "reading_sign_p256": (signed_reading("p256", p256_sign),
                              "cbor2 + pyca/cryptography ECDSA (RFC 6979 deterministic)"),
        "reading_verify_ed25519": ("01", "the reading above verifies end to end"),
        "identity": (identity_of("ed25519", H(RFC8032_T1_PK), b""),
                     "docs/identity.md layout with hashlib"),
    }
    return {
        "source": "vectors/gen_device_kat.py; inputs in eval/sigil-devbench/src/lib.rs",
        "operations": {k: {"output": v, "source": s} for k, (v, s) in ops.items()},
    }


if __name__ == "__main__":
    text = json.dumps(build(), indent=2, sort_keys=True) + "\n"
    if "--check" in sys.argv:
        same = os.path.exists(OUT) and open(OUT).read() == text
        print("device-kat.json is current" if same else "device-kat.json differs")
        sys.exit(0 if same else 1)
    open(OUT, "w").write(text)
    print("wrote", OUT)
