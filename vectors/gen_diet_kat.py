#!/usr/bin/env python3
"""Writes vectors/diet-kat.json: known answers for sigil-diet (the CryptoDiet scheme), computed
with pyca/cryptography, an implementation Sigil does not contain: the six operations on P-256
(key pair from a fixed scalar, ECDH + HKDF-SHA-256, AES-128-CCM-8, ECDSA with SHA-256) and a
node's hello and data messages as docs/wire-formats.md lays them out.

    python3 vectors/gen_diet_kat.py          # rewrite the file
    python3 vectors/gen_diet_kat.py --check  # exit 1 if the file differs or a value is wrong

crates/sigil-diet/tests/kat.rs checks sigil-diet against the file: its ECDSA signatures (RFC
6979) must equal the deterministic ones here, which this script verifies, and it must verify
the randomized signature made here.
"""
import json
import os
import struct
import sys

import cryptography
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature, encode_dss_signature)
from cryptography.hazmat.primitives.ciphers.aead import AESCCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "diet-kat.json")
H = bytes.fromhex
LABEL = b"sigil-diet v3"
NONCE_LABEL = b"sigil-diet v3 nonce"

# Fixed scalars: two nodes, each with an ECDH and a signing key.
P_ECDH = H("1c6a2bf2a1c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e")
P_SIGN = H("2d7b3c0f1e2d3c4b5a69788796a5b4c3d2e1f0ffeeddccbbaa99887766554433")
R_ECDH = H("3e8c4d1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70819293a4b5c6")
R_SIGN = H("4f9d5e2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7")
EPOCH_P, EPOCH_R = 7, 3


def priv(scalar):
    return ec.derive_private_key(int.from_bytes(scalar, "big"), ec.SECP256R1())


def pub(scalar):
    return priv(scalar).public_key().public_bytes(
        Encoding.X962, PublicFormat.UncompressedPoint)


def rs(der):
    r, s = decode_dss_signature(der)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def sign_det(scalar, msg):
    return rs(priv(scalar).sign(msg, ec.ECDSA(hashes.SHA256(), deterministic_signing=True)))


def verify(public, msg, sig):
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), public)
    key.verify(encode_dss_signature(int.from_bytes(sig[:32], "big"),
                                    int.from_bytes(sig[32:], "big")),
               msg, ec.ECDSA(hashes.SHA256()))


def ecdh(scalar, peer):
    peer_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), peer)
    return priv(scalar).exchange(ec.ECDH(), peer_key)


def hkdf(salt, ikm, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def node_keys(own_ecdh, own_epoch, peer_pub, peer_epoch):
    """docs/wire-formats.md: salt = both ECDH public keys, lower first; info = label and the
    epochs in the same order; the first 16 bytes key what the lower key's owner sends."""
    own_pub = pub(own_ecdh)
    own_low = own_pub < peer_pub
    lo, hi = (own_pub, peer_pub) if own_low else (peer_pub, own_pub)
    e_lo, e_hi = (own_epoch, peer_epoch) if own_low else (peer_epoch, own_epoch)
    okm = hkdf(lo + hi, ecdh(own_ecdh, peer_pub), LABEL + struct.pack(">II", e_lo, e_hi), 32)
    return (okm[:16], okm[16:]) if own_low else (okm[16:], okm[:16])  # (send, receive)


def mac(key, msg):
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(msg)
    return h.finalize()


def nonce(sign_scalar, epoch, i):
    """docs/wire-formats.md: the i-th nonce of a run, the first 8 bytes of HMAC-SHA-256 under
    HMAC-SHA-256(signing secret, NONCE_LABEL) over epoch(4) and i(4)."""
    return mac(mac(sign_scalar, NONCE_LABEL), struct.pack(">II", epoch, i))[:8]


NO_NONCE = bytes(8)


def hello(ecdh_scalar, sign_scalar, epoch, flags, own_nonce, echo):
    body = (bytes([1, flags]) + struct.pack(">I", epoch) + own_nonce + echo
            + pub(ecdh_scalar) + pub(sign_scalar))
    return body + sign_det(sign_scalar, body)


def data(send_key, sign_scalar, seq, plain):
    header = bytes([2]) + struct.pack(">I", seq)
    nonce = bytes(8) + struct.pack(">I", seq)
    sealed = AESCCM(send_key, tag_length=8).encrypt(nonce, plain, header)
    body = header + sealed
    return body + sign_det(sign_scalar, body)


def build(random_signature):
    ops_msg = b"IoT-CryptoDiet: the six operations"
    ccm_key, ccm_nonce = bytes(range(16)), bytes(range(0xA0, 0xAC))
    ccm_aad, ccm_plain = b"\x02\x00\x00\x00\x2a", b"21.5 Cel, from the seed's toy protocol"
    shared = ecdh(P_ECDH, pub(R_ECDH))
    p_send, _ = node_keys(P_ECDH, EPOCH_P, pub(R_ECDH), EPOCH_R)
    r_send, _ = node_keys(R_ECDH, EPOCH_R, pub(P_ECDH), EPOCH_P)
    p0, r0 = nonce(P_SIGN, EPOCH_P, 0), nonce(R_SIGN, EPOCH_R, 0)
    v = {
        "source": "pyca/cryptography " + cryptography.__version__
                  + ", vectors/gen_diet_kat.py",
        "key_pair": {"secret": P_SIGN.hex(), "public": pub(P_SIGN).hex()},
        "ecdh_hkdf": {
            "secret": P_ECDH.hex(), "peer_public": pub(R_ECDH).hex(),
            "peer_secret": R_ECDH.hex(), "public": pub(P_ECDH).hex(),
            "shared_x": shared.hex(), "salt": "73616c74", "info": LABEL.hex(),
            "okm_42": hkdf(b"salt", shared, LABEL, 42).hex(),
        },
        "aes_ccm8": {
            "key": ccm_key.hex(), "nonce": ccm_nonce.hex(), "aad": ccm_aad.hex(),
            "plaintext": ccm_plain.hex(),
            "ciphertext_and_tag": AESCCM(ccm_key, tag_length=8).encrypt(
                ccm_nonce, ccm_plain, ccm_aad).hex(),
        },
        "ecdsa": {
            "secret": P_SIGN.hex(), "public": pub(P_SIGN).hex(), "message": ops_msg.hex(),
            "rfc6979_signature": sign_det(P_SIGN, ops_msg).hex(),
            "random_signature": random_signature,
        },
        "node": {
            "python": {"ecdh": P_ECDH.hex(), "signing": P_SIGN.hex(), "epoch": EPOCH_P},
            "rust": {"ecdh": R_ECDH.hex(), "signing": R_SIGN.hex(), "epoch": EPOCH_R},
            # Each has the other as a neighbour: its first hello carries its first nonce.
            "python_hello": hello(P_ECDH, P_SIGN, EPOCH_P, 0, p0, NO_NONCE).hex(),
            "rust_hello": hello(R_ECDH, R_SIGN, EPOCH_R, 0, r0, NO_NONCE).hex(),
            # The Rust node answers the Python hello (no echo of its nonce) with a challenge:
            # its nonce again, echoing Python's.
            "rust_challenge": hello(R_ECDH, R_SIGN, EPOCH_R, 0, r0, p0).hex(),
            # Python, whose nonce came back, holds the keys: it acknowledges (ACK) with its
            # next nonce, echoing Rust's, which proves it to the Rust node.
            "python_answer": hello(P_ECDH, P_SIGN, EPOCH_P, 1, nonce(P_SIGN, EPOCH_P, 1),
                                   r0).hex(),
            "python_data_seq0": data(p_send, P_SIGN, 0, b"from python").hex(),
            "python_data_seq5": data(p_send, P_SIGN, 5, b"seq 5").hex(),
            "rust_data_seq0": data(r_send, R_SIGN, 0, b"from rust").hex(),
            "rust_data_plaintext": b"from rust".hex(),
        },
    }
    return v


def check_random(v):
    e = v["ecdsa"]
    verify(H(e["public"]), H(e["message"]), H(e["random_signature"]))


def main():
    old = None
    if os.path.exists(OUT):
        with open(OUT) as f:
            old = json.load(f)
    if "--check" in sys.argv:
        if old is None:
            print(f"{OUT} missing")
            return 1
        check_random(old)
        new = build(old["ecdsa"]["random_signature"])
        # The deterministic signatures (which sigil-diet must reproduce) verify here too.
        verify(pub(P_SIGN), H(new["ecdsa"]["message"]), H(new["ecdsa"]["rfc6979_signature"]))
        new["source"] = old["source"]
        if new != old:
            print(f"{OUT} differs from what pyca/cryptography computes now")
            return 1
        print(f"{os.path.basename(OUT)}: every value recomputed and the signatures verified")
        return 0
    random_sig = rs(priv(P_SIGN).sign(b"IoT-CryptoDiet: the six operations",
                                      ec.ECDSA(hashes.SHA256()))).hex()
    if old is not None:
        random_sig = old["ecdsa"]["random_signature"]
    v = build(random_sig)
    check_random(v)
    with open(OUT, "w") as f:
        json.dump(v, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
