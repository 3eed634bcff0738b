#!/usr/bin/env python3
"""Writes the RSA-2048 inputs and known answers of the device-cost harness (eval/sigil-devbench,
feature `rsa`; docs/device-costs.md, the RSA section). Everything is made or checked here with
pyca/cryptography, which Sigil does not contain:

- vectors/rsa2048-bench.key.der: a fixed RSA-2048 test key (PKCS#1 RSAPrivateKey DER, e = 65537),
  made once by pyca and kept: a device holds its key, so no key generation is measured.
- vectors/rsa2048-bench.modulus.bin: its modulus (256 bytes, big-endian), the public key a device
  holds for its peer.
- vectors/rsa2048-bench.signature.bin: the RSASSA-PKCS1-v1_5 SHA-256 signature of "sample"
  (deterministic, so also the known answer of the device's signing).
- vectors/rsa2048-bench.premaster.bin: a TLS premaster secret (03 03 and 46 fixed bytes)
  encrypted with RSAES-PKCS1-v1_5 under the key (pyca's random padding; the device decrypts it).
- vectors/device-kat-rsa.json: the known answers (`rsa2048_public_key`: the key parsed and
  checked, its modulus out). The device's encryption draws its padding from
  the harness's fixed RNG, so its answer is the host's run (`cargo run -p sigil-devbench
  --features rsa --example print-kat`); this script checks that that ciphertext decrypts to
  the premaster secret with pyca, and records it.

    python3 vectors/gen_rsa_kat.py           # (re)write the answers; the key is made only if missing
    python3 vectors/gen_rsa_kat.py --check   # exit 1 if a file differs or an answer is wrong
"""
import json
import os
import subprocess
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KEY = os.path.join(HERE, "rsa2048-bench.key.der")
MODULUS = os.path.join(HERE, "rsa2048-bench.modulus.bin")
SIGNATURE = os.path.join(HERE, "rsa2048-bench.signature.bin")
PREMASTER_CT = os.path.join(HERE, "rsa2048-bench.premaster.bin")
OUT = os.path.join(HERE, "device-kat-rsa.json")

MESSAGE = b"sample"
# The premaster secret (RFC 5246 §7.4.7.1): client_version 3,3 (TLS 1.2; DTLS 1.2 sends 254,253,
# the operation passes the version it expects) and 46 bytes i + 1.
PREMASTER = bytes([3, 3]) + bytes(range(1, 47))
# What the device encrypts (its `rsa2048_encrypt`): the same 48 bytes.


def host_encryption():
    """The host's run of `rsa2048_encrypt` (the same code and RNG as the device's)."""
    out = subprocess.run(
        ["cargo", "run", "--quiet", "-p", "sigil-devbench", "--features", "rsa", "--example", "print-kat"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        name, _, value = line.partition(" ")
        if name == "rsa2048_encrypt":
            return bytes.fromhex(value.strip())
    raise SystemExit("print-kat printed no rsa2048_encrypt")


def main():
    check = "--check" in sys.argv
    if not os.path.exists(KEY):
        if check:
            raise SystemExit(f"{KEY} is missing")
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with open(KEY, "wb") as f:
            f.write(k.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption()))
    key = serialization.load_der_private_key(open(KEY, "rb").read(), password=None)
    pub = key.public_key()
    n = pub.public_numbers().n.to_bytes(256, "big")
    sig = key.sign(MESSAGE, padding.PKCS1v15(), hashes.SHA256())
    pub.verify(sig, MESSAGE, padding.PKCS1v15(), hashes.SHA256())

    if os.path.exists(PREMASTER_CT):
        ct = open(PREMASTER_CT, "rb").read()
    else:
        if check:
            raise SystemExit(f"{PREMASTER_CT} is missing")
        ct = pub.encrypt(PREMASTER, padding.PKCS1v15())
    if key.decrypt(ct, padding.PKCS1v15()) != PREMASTER:
        raise SystemExit(f"{PREMASTER_CT} does not decrypt to the premaster secret")

    files = {MODULUS: n, SIGNATURE: sig, PREMASTER_CT: ct}
    if check:
        bad = [p for p, b in files.items() if open(p, "rb").read() != b]
        if bad:
            raise SystemExit("differs: " + ", ".join(os.path.relpath(p, ROOT) for p in bad))
    else:
        # The host's run below compiles these in.
        for p, b in files.items():
            with open(p, "wb") as f:
                f.write(b)
    device_ct = host_encryption()
    if key.decrypt(device_ct, padding.PKCS1v15()) != PREMASTER:
        raise SystemExit("the host's rsa2048_encrypt does not decrypt to the premaster secret (pyca)")

    kat = {
        "source": "vectors/gen_rsa_kat.py (pyca/cryptography); key and inputs in vectors/rsa2048-bench.*",
        "operations": {
            "rsa2048_public_key": {"output": n.hex(), "source": "pyca/cryptography: the key's modulus"},
            "rsa2048_sign": {"output": sig.hex(), "source": "pyca/cryptography RSASSA-PKCS1-v1_5 SHA-256"},
            "rsa2048_verify": {"output": "01", "source": "the pyca signature verifies"},
            "rsa2048_encrypt": {"output": device_ct.hex(),
                                "source": "host run; pyca/cryptography decrypts it to the premaster secret"},
            "rsa2048_decrypt": {"output": PREMASTER.hex(),
                                "source": "pyca/cryptography RSAES-PKCS1-v1_5 encryption of this premaster secret"},
        },
    }
    text = json.dumps(kat, indent=1, sort_keys=True) + "\n"
    if check:
        if open(OUT).read() != text:
            raise SystemExit(f"differs: {os.path.relpath(OUT, ROOT)}")
        print("RSA known answers match")
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
