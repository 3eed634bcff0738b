"""Interop with implementations written elsewhere: aiocoap as the CoAP client (discovery,
Resource Directory registration and lookup, fetching readings), pycose verifying Sigil's
COSE_Sign1 readings, and Sigil verifying readings that pycose signed."""
import asyncio
import base64

import cbor2
import pytest
from aiocoap import GET, POST, PUT, Context, Message
from aiocoap.numbers.codes import Code
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pycose.algorithms import EdDSA, Es256
from pycose.headers import KID, Algorithm
from pycose.keys import EC2Key, OKPKey
from pycose.keys.curves import P256, Ed25519
from pycose.messages import Sign1Message

from conftest import identity_of, request_with_echo, sigil

SEQ = -65537  # Sigil's private-use sequence-number header (docs/wire-formats.md)


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def run(coro):
    return asyncio.run(coro)


async def request(code, uri, payload=b"", content_format=None, accept=None):
    ctx = await Context.create_client_context()
    try:
        msg = Message(code=code, uri=uri, payload=payload)
        if content_format is not None:
            msg.opt.content_format = content_format
        if accept is not None:
            msg.opt.accept = accept
        return await request_with_echo(ctx, msg)
    finally:
        await ctx.shutdown()


def parse_links(text: str):
    """A deliberately simple link-format reader for the tests (no commas inside values)."""
    out = []
    for part in text.split(","):
        if not part:
            continue
        target, *attrs = part.split(";")
        d = {"href": target.strip("<>")}
        for a in attrs:
            k, _, v = a.partition("=")
            d[k] = v.strip('"')
        out.append(d)
    return out


class Ed25519Device:
    alg = "ed25519"

    def __init__(self):
        self.sk = Ed25519PrivateKey.generate()
        self.pub = self.sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        d = self.sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
        self.cose_key = OKPKey(crv=Ed25519, d=d, x=self.pub)
        self.cose_alg, self.cose_alg_id = EdDSA, -8

    @property
    def identity(self):
        return identity_of(self.alg, self.pub)

    def sign(self, seq: int, payload: bytes) -> bytes:
        m = Sign1Message(phdr={Algorithm: self.cose_alg, KID: bytes.fromhex(self.identity), SEQ: seq}, payload=payload)
        m.key = self.cose_key
        return m.encode()


def senml(temp: float) -> bytes:
    return cbor2.dumps([{0: "t", 1: "Cel", 2: temp}])


def register(server, dev) -> str:
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg={dev.cose_alg_id}'
    resp = run(request(POST, f"{server.uri}/rd?ep={dev.identity}&lt=300", links.encode(), content_format=40))
    assert resp.code == Code.CREATED, resp
    location = "/".join(resp.opt.location_path)
    assert location.startswith("rd/")
    return "ps/" + location.split("/")[1] + "/m"


def test_discovery_registration_lookup_and_publication_with_aiocoap_and_pycose(server):
    # /.well-known/core through aiocoap, filtered by rt as RFC 6690 allows.
    wk = run(request(GET, f"{server.uri}/.well-known/core?rt=core.rd*"))
    assert wk.code == Code.CONTENT
    assert wk.opt.content_format == 40
    hrefs = [l["href"] for l in parse_links(wk.payload.decode())]
    assert "/rd" in hrefs and "/rd-lookup/res" in hrefs and "/ps" not in hrefs

    dev = Ed25519Device()
    # Not provisioned: refused.
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
    resp = run(request(POST, f"{server.uri}/rd?ep={dev.identity}&lt=300", links.encode(), content_format=40))
    assert resp.code == Code.FORBIDDEN
    server.provision(dev.identity)
    topic = register(server, dev)

    lookup = run(request(GET, f"{server.uri}/rd-lookup/ep?ep={dev.identity}"))
    assert lookup.code == Code.CONTENT and dev.identity in lookup.payload.decode()
    res = parse_links(run(request(GET, f"{server.uri}/rd-lookup/res?ep={dev.identity}")).payload.decode())
    # RFC 9176 §6: lookup targets are resolved against the address the request was sent to.
    assert len(res) == 1 and res[0]["href"] == f"{server.uri}/{topic}" and res[0]["key"] == b64(dev.pub)

    # Readings signed by pycose are accepted by the broker, tampered ones are not.
    for seq in (1, 2, 3):
        resp = run(request(PUT, f"{server.uri}/{topic}", dev.sign(seq, senml(20.0 + seq)), content_format=18))
        assert resp.code == Code.CHANGED, resp.payload
    signed = bytearray(dev.sign(4, senml(30.0)))
    signed[-70] ^= 1  # inside the payload
    resp = run(request(PUT, f"{server.uri}/{topic}", bytes(signed), content_format=18))
    assert resp.code in (Code.UNAUTHORIZED, Code.BAD_REQUEST)

    # Fetch through aiocoap and verify with pycose: exactly the bytes pycose produced.
    latest = run(request(GET, f"{server.uri}/{topic}"))
    assert latest.code == Code.CONTENT and latest.opt.content_format == 18
    m = Sign1Message.decode(latest.payload)
    m.key = OKPKey(crv=Ed25519, x=dev.pub)
    assert m.verify_signature()
    assert m.phdr[SEQ] == 3
    hist = run(request(GET, f"{server.uri}/{topic}?n=10", accept=60))
    items = cbor2.loads(hist.payload)
    assert [Sign1Message.decode(i).phdr[SEQ] for i in items] == [1, 2, 3]


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
def test_pycose_verifies_readings_from_a_sigil_sensor(server, tmp_path, alg):
    state = tmp_path / "sensor"
    ident = sigil("sensor", "--state", str(state), "--alg", alg, "--print-identity").stdout.split()[0]
    server.provision(ident)
    out = sigil("sensor", "--server", server.uri, "--state", str(state), "--interval", "50ms", "--count", "5")
    assert '"rejected": []' in out.stdout
    res = parse_links(run(request(GET, f"{server.uri}/rd-lookup/res?ep={ident}")).payload.decode())
    key = base64.urlsafe_b64decode(res[0]["key"] + "==")
    assert identity_of(alg, key) == ident, "the registered key hashes to the identity"
    assert res[0]["href"].startswith(server.uri + "/ps/")
    hist = cbor2.loads(run(request(GET, f"{res[0]['href']}?n=10", accept=60)).payload)
    assert len(hist) == 5
    for raw in hist:
        m = Sign1Message.decode(raw)
        if alg == "ed25519":
            m.key = OKPKey(crv=Ed25519, x=key)
        else:
            m.key = EC2Key(crv=P256, x=key[1:33], y=key[33:])
        assert m.verify_signature()
        assert m.phdr[KID] == bytes.fromhex(ident)
        senml_pack = cbor2.loads(m.payload)
        assert {r[0] for r in senml_pack} == {"t", "h"}


def test_sigil_verify_accepts_pycose_signatures_and_rejects_tampering(tmp_path):
    for curve in ("ed25519", "p256"):
        if curve == "ed25519":
            dev = Ed25519Device()
            key_arg = f"ed25519:{dev.pub.hex()}"
            signed = dev.sign(7, senml(21.5))
        else:
            sk = ec.generate_private_key(ec.SECP256R1())
            nums = sk.public_key().public_numbers()
            x, y = nums.x.to_bytes(32, "big"), nums.y.to_bytes(32, "big")
            pub = b"\x04" + x + y
            ident = identity_of("p256", pub)
            m = Sign1Message(phdr={Algorithm: Es256, KID: bytes.fromhex(ident), SEQ: 7}, payload=senml(21.5))
            m.key = EC2Key(crv=P256, x=x, y=y, d=sk.private_numbers().private_value.to_bytes(32, "big"))
            signed = m.encode()
            key_arg = f"p256:{pub.hex()}"
        good = tmp_path / f"good-{curve}.cose"
        good.write_bytes(signed)
        r = sigil("verify", str(good), "--key", key_arg, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "seq 7" in r.stdout
        bad = tmp_path / f"bad-{curve}.cose"
        t = bytearray(signed)
        t[-67] ^= 0x40  # last payload byte, before the signature header (58 40) and 64 bytes
        bad.write_bytes(bytes(t))
        r = sigil("verify", str(bad), "--key", key_arg, check=False)
        assert r.returncode != 0 and "REJECTED" in r.stdout
