"""JWS readings (RFC 7515 compact serialization, RFC 8387 §7 step 2) against joserfc, a JOSE
implementation Sigil does not contain: joserfc verifies what a `sigil sensor --format jws`
signed and stored, and `sigil verify --format jws` accepts what joserfc signed. Both refuse a
changed payload. Header layout: docs/wire-formats.md."""
import base64
import json

import cbor2
import pytest
from joserfc import jws
from joserfc.errors import BadSignatureError
from joserfc.jwk import ECKey, OKPKey
from joserfc.registry import HeaderParameter

from conftest import identity_of, sigil
from test_aiocoap_pycose import GET, parse_links, request, run

# RFC 9864 deprecates the polymorphic "EdDSA" in favour of "Ed25519"; Sigil's header says
# "EdDSA" (RFC 8037 §3.1, docs/wire-formats.md), so joserfc's warning about it is expected.
pytestmark = pytest.mark.filterwarnings("ignore:EdDSA is deprecated")

# Sigil's private header members: joserfc refuses members it does not know unless registered.
REGISTRY = jws.JWSRegistry(
    header_registry={
        "seq": HeaderParameter("Sigil sequence number (RFC 8387 §8.2)", "int", True),
        "iat": HeaderParameter("Sigil reading time, seconds", "int"),
    },
    algorithms=["EdDSA", "ES256"],
)


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jwk_of(alg: str, key: bytes):
    if alg == "ed25519":
        return OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": b64(key)})
    assert key[0] == 4 and len(key) == 65
    return ECKey.import_key({"kty": "EC", "crv": "P-256", "x": b64(key[1:33]), "y": b64(key[33:])})


def tamper_payload(compact: str) -> str:
    h, p, s = compact.split(".")
    i = len(p) // 2
    p = p[:i] + ("A" if p[i] != "A" else "B") + p[i + 1:]
    return ".".join((h, p, s))


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_joserfc_verifies_jws_readings_from_a_sigil_sensor(server, tmp_path, alg):
    state = tmp_path / "sensor"
    ident = sigil("sensor", "--state", str(state), "--alg", alg, "--print-identity").stdout.split()[0]
    server.provision(ident)
    out = sigil("sensor", "--server", server.uri, "--state", str(state), "--format", "jws",
                "--interval", "50ms", "--count", "4")
    assert '"rejected": []' in out.stdout, out.stdout
    res = parse_links(run(request(GET, f"{server.uri}/rd-lookup/res?ep={ident}")).payload.decode())
    assert len(res) == 1 and res[0]["ct"] == "65100"
    key = unb64(res[0]["key"])
    assert identity_of(alg, key) == ident, "the registered key hashes to the identity"
    jwk = jwk_of(alg, key)
    # RFC 9176 §6: the lookup answers the topic as a resolved URI on this server.
    href = res[0]["href"]
    assert href.startswith(server.uri + "/ps/"), href
    stored = cbor2.loads(run(request(GET, f"{href}?n=10", accept=60)).payload)
    assert len(stored) == 4
    seqs = []
    for raw in stored:
        compact = raw.decode("ascii")
        obj = jws.deserialize_compact(compact, jwk, registry=REGISTRY)
        h = obj.headers()
        assert h["alg"] == {"ed25519": "EdDSA", "p256": "ES256"}[alg]
        assert h["kid"] == ident
        seqs.append(h["seq"])
        pack = json.loads(obj.payload)
        assert {r["n"] for r in pack} == {"t", "h"}, pack
        with pytest.raises(BadSignatureError):
            jws.deserialize_compact(tamper_payload(compact), jwk, registry=REGISTRY)
    assert seqs == sorted(seqs) and len(set(seqs)) == 4


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_sigil_verify_accepts_joserfc_signatures_and_rejects_tampering(tmp_path, alg):
    if alg == "ed25519":
        sk = OKPKey.generate_key("Ed25519")
        pub = unb64(sk.as_dict(private=False)["x"])
        jose_alg = "EdDSA"
    else:
        sk = ECKey.generate_key("P-256")
        d = sk.as_dict(private=False)
        pub = b"\x04" + unb64(d["x"]) + unb64(d["y"])
        jose_alg = "ES256"
    ident = identity_of(alg, pub)
    payload = json.dumps([{"bn": "urn:dev:sigil:", "n": "t", "u": "Cel", "v": 21.5}],
                         separators=(",", ":")).encode()
    compact = jws.serialize_compact({"alg": jose_alg, "kid": ident, "seq": 7}, payload, sk,
                                    registry=REGISTRY)
    good = tmp_path / f"good-{alg}.jws"
    good.write_text(compact)
    r = sigil("verify", str(good), "--format", "jws", "--key", f"{alg}:{pub.hex()}", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "seq 7" in r.stdout
    bad = tmp_path / f"bad-{alg}.jws"
    bad.write_text(tamper_payload(compact))
    r = sigil("verify", str(bad), "--format", "jws", "--key", f"{alg}:{pub.hex()}", check=False)
    assert r.returncode != 0 and "REJECTED" in r.stdout, r.stdout + r.stderr
    # Another identity in kid: the key does not speak for it.
    other = jws.serialize_compact({"alg": jose_alg, "kid": "00" * 16, "seq": 7}, payload, sk,
                                  registry=REGISTRY)
    wrong = tmp_path / f"kid-{alg}.jws"
    wrong.write_text(other)
    r = sigil("verify", str(wrong), "--format", "jws", "--key", f"{alg}:{pub.hex()}", check=False)
    assert r.returncode != 0 and "REJECTED" in r.stdout, r.stdout + r.stderr


def test_joserfc_and_sigil_agree_on_the_rfc8037_example():
    """vectors/rfc8037-ed25519-jws.json, as joserfc reads it (the Rust side is
    crates/sigil-objects/tests/rfc8037.rs)."""
    import os
    v = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "vectors",
                                    "rfc8037-ed25519-jws.json")))
    key = OKPKey.import_key(v["jwk"])
    obj = jws.deserialize_compact(v["jws"], key, algorithms=["EdDSA"])
    assert obj.payload == v["payload"].encode()
    assert jws.serialize_compact({"alg": "EdDSA"}, v["payload"].encode(), key,
                                 algorithms=["EdDSA"]) == v["jws"]
