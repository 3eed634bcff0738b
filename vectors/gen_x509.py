#!/usr/bin/env python3
"""Test PKI for the DTLS X.509 tests, made with pyca/cryptography (not with Sigil's code):
a root CA, an intermediate CA, server and client leaves (P-256, ecdsa-with-SHA256), and the
bad cases (expired leaf, leaf of an unknown CA, leaf issued by a non-CA). Writes DER and PEM
certificates and keys (PEM for OpenSSL/GnuTLS, the raw 32-byte scalar in hex for Sigil) into
crates/sigil-dtls/tests/data/x509/. Validity 2025-2125, so the files stay usable.

    python3 vectors/gen_x509.py
"""
import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "sigil-dtls", "tests", "data", "x509")
LONG = (datetime.datetime(2025, 1, 1), datetime.datetime(2125, 1, 1))
EXPIRED = (datetime.datetime(2020, 1, 1), datetime.datetime(2021, 1, 1))


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sigil test PKI"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def cert(subject, key, issuer, issuer_key, ca, validity=LONG, serial=None):
    b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
         .public_key(key.public_key()).serial_number(serial or x509.random_serial_number())
         .not_valid_before(validity[0]).not_valid_after(validity[1])
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                                      encipher_only=False, decipher_only=False), critical=True))
    return b.sign(issuer_key, hashes.SHA256())


def write(stem, c, key=None):
    with open(os.path.join(OUT, stem + ".der"), "wb") as f:
        f.write(c.public_bytes(serialization.Encoding.DER))
    with open(os.path.join(OUT, stem + ".pem"), "wb") as f:
        f.write(c.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        with open(os.path.join(OUT, stem + ".key.pem"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        with open(os.path.join(OUT, stem + ".key"), "w") as f:
            f.write(key.private_numbers().private_value.to_bytes(32, "big").hex() + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    k = lambda: ec.generate_private_key(ec.SECP256R1())
    root_k, int_k, srv_k, cli_k, other_k, rogue_k, exp_k, leaf2_k = (k() for _ in range(8))
    root = cert("Sigil test root", root_k, "Sigil test root", root_k, True)
    inter = cert("Sigil test intermediate", int_k, "Sigil test root", root_k, True)
    write("root", root)
    write("intermediate", inter)
    write("server", cert("sigil-server", srv_k, "Sigil test intermediate", int_k, False), srv_k)
    write("client", cert("sigil-client", cli_k, "Sigil test intermediate", int_k, False), cli_k)
    write("expired", cert("sigil-expired", exp_k, "Sigil test intermediate", int_k, False, EXPIRED), exp_k)
    other_root = cert("Other root", other_k, "Other root", other_k, True)
    write("other-root", other_root)
    write("stranger", cert("sigil-stranger", rogue_k, "Other root", other_k, False), rogue_k)
    # A leaf (not a CA) used as an issuer.
    leaf = cert("sigil-client", cli_k, "Sigil test intermediate", int_k, False)
    write("leaf-as-issuer", cert("sigil-second", leaf2_k, "sigil-client", cli_k, False), leaf2_k)
    with open(os.path.join(OUT, "server-chain.pem"), "wb") as f:
        for stem in ("server", "intermediate"):
            f.write(open(os.path.join(OUT, stem + ".pem"), "rb").read())
    with open(os.path.join(OUT, "client-chain.pem"), "wb") as f:
        for stem in ("client", "intermediate"):
            f.write(open(os.path.join(OUT, stem + ".pem"), "rb").read())
    print("wrote", OUT)


if __name__ == "__main__":
    main()
