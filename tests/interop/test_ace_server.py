"""The server's access-control endpoint (RFC 9200) and DTLS profile (RFC 9202) against pycose,
python-cwt and aiocoap.

Ours decoded by them: the encrypted token `sigil token` gets for a PSK reader is decrypted by
pycose with the AC-RS key, and the signed token bound to a raw public key is verified by
python-cwt with the server's public key; their claims (sub, aud, exp, cti, scope, cnf) are what
the grant allows. Theirs accepted by us: a token python-cwt signs with the server's key,
binding a key the client holds, is posted to /authz-info by aiocoap over plain CoAP (2.01; the
same token again: 4.01 replayed), after which `sigil get` reads the sensor over a raw-public-key
session with that key. A token python-cwt signs with another key is refused (4.01 tampered).

The AC's keys are read from the server's database, as only a party that holds the server's
secrets could."""
import asyncio
import sqlite3
import subprocess

import cbor2
import cwt
import pytest
from aiocoap import POST, Context, Message
from aiocoap.numbers.codes import Code
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cwt import COSEKey
from pycose.keys import SymmetricKey
from pycose.messages import Enc0Message

from conftest import SIGIL, Server, sigil

SUB, AUD, EXP, CTI, CNF, SCOPE = 2, 3, 4, 7, 8, 9


def server_keys(db):
    rows = dict(
        (name, (alg, secret))
        for name, alg, secret in sqlite3.connect(db).execute("SELECT name, alg, secret FROM server_key")
    )
    d = int.from_bytes(rows["dtls"][1], "big")
    sk = ec.derive_private_key(d, ec.SECP256R1())
    return sk, rows["ac-rs"][1]


def p256_point(pk):
    raw = pk.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return raw[1:33], raw[33:]


def key_file(path):
    sk = ec.generate_private_key(ec.SECP256R1())
    d = sk.private_numbers().private_value.to_bytes(32, "big")
    path.write_text("p256:" + d.hex())
    return sk


@pytest.fixture
def setup(tmp_path):
    srv = Server(tmp_path, "--authorize-reads")
    st = tmp_path / "sensor"
    sensor = sigil("sensor", "--state", str(st), "--alg", "p256", "--print-identity").stdout.splitlines()[0]
    reader_st = tmp_path / "reader"
    reader = sigil("sensor", "--state", str(reader_st), "--alg", "p256", "--print-identity").stdout.splitlines()[0]
    for i in (sensor, reader):
        srv.provision(i)
    psk = sigil("provision", "--db", srv.db, "psk", reader).stdout.splitlines()[0]
    sigil("provision", "--db", srv.db, "grant", reader, sensor)
    out = sigil("sensor", "--server", srv.uri, "--state", str(st), "--interval", "100ms", "--count", "2")
    assert out.returncode == 0, out.stderr
    row = sqlite3.connect(srv.db).execute("SELECT id, links FROM registrations").fetchone()
    topic = f"ps/{row[0]}" + row[1].split("<", 1)[1].split(">", 1)[0]
    yield srv, sensor, reader, psk, topic
    srv.stop()


def test_pycose_decrypts_the_token_sigil_issues_to_a_psk_reader(setup, tmp_path):
    srv, sensor, reader, psk, _ = setup
    out_file = tmp_path / "tok.cwt"
    out = sigil("token", "--server", srv.coaps, "--dtls", "psk", "--psk", psk, "--psk-identity", reader,
                "--scope", sensor, "--scope", "rd", "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    token = out_file.read_bytes()
    _, rs_key = server_keys(srv.db)
    msg = Enc0Message.decode(token)
    msg.key = SymmetricKey(k=rs_key)
    claims = cbor2.loads(msg.decrypt())
    assert claims[AUD] == srv.identity
    assert claims[SUB] == reader
    assert sorted(claims[SCOPE]) == sorted([[sensor, 1], ["rd", 1]])
    assert len(claims[CTI]) == 8
    cose_key = claims[CNF][1]
    assert cose_key[1] == 4 and len(cose_key[-1]) == 16
    # The kid: "~" and 16 hex digits, a printable C string (docs/wire-formats.md).
    assert cose_key[2][:1] == b"~" and len(cose_key[2]) == 17 and cose_key[2].isascii()


def test_python_cwt_verifies_the_signed_token_bound_to_a_raw_public_key(setup, tmp_path):
    srv, sensor, reader, psk, _ = setup
    kf = tmp_path / "bound.key"
    bound = key_file(kf)
    out_file = tmp_path / "tok.cwt"
    out = sigil("token", "--server", srv.coaps, "--dtls", "psk", "--psk", psk, "--psk-identity", reader,
                "--scope", sensor, "--bind-key", str(kf), "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    sk, _ = server_keys(srv.db)
    pem = sk.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    # The AC's key id: the first 4 bytes of the server's identity.
    verifier = COSEKey.from_pem(pem, alg="ES256", kid=bytes.fromhex(srv.identity)[:4])
    claims = cwt.decode(out_file.read_bytes(), verifier)
    assert claims[AUD] == srv.identity and claims[SUB] == reader
    assert claims[SCOPE] == [[sensor, 1]]
    x, y = p256_point(bound.public_key())
    assert claims[CNF][1][-2] == x and claims[CNF][1][-3] == y


def python_cwt_token(signing_key, aud, sub, scope, holder, cti):
    pem = signing_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    signer = COSEKey.from_pem(pem, alg="ES256")
    x, y = p256_point(holder.public_key())
    import time
    claims = {SUB: sub, AUD: aud, EXP: int(time.time()) + 600, CTI: cti, SCOPE: scope,
              CNF: {1: {1: 2, -1: 1, -2: x, -3: y}}}
    return cwt.encode(claims, signer, tagged=False)


async def post_authz_info(port, token):
    ctx = await Context.create_client_context()
    try:
        r = await ctx.request(Message(code=POST, uri=f"coap://127.0.0.1:{port}/authz-info",
                                      payload=token, content_format=61)).response
        return r.code, r.payload
    finally:
        await ctx.shutdown()


def test_sigil_accepts_a_python_cwt_token_and_reads_over_its_raw_public_key(setup, tmp_path):
    srv, sensor, reader, _, topic = setup
    sk, _ = server_keys(srv.db)
    kf = tmp_path / "holder.key"
    holder = key_file(kf)
    token = python_cwt_token(sk, srv.identity, reader, [[sensor, 1]], holder, b"interop1")
    get = ["get", f"{srv.coaps}/{topic}", "--dtls", "rpk", "--key-file", str(kf),
           "--server-identity", srv.identity, "--dtls-timeout", "300ms"]
    def run_get():
        # The payload is the signed reading (binary): keep stdout as bytes.
        return subprocess.run([SIGIL, *get], capture_output=True, timeout=120)

    # Before the token: the key is on no list, no session.
    assert run_get().returncode != 0
    code, _ = asyncio.run(post_authz_info(srv.port, token))
    assert code == Code.CREATED
    code, payload = asyncio.run(post_authz_info(srv.port, token))
    assert code == Code.UNAUTHORIZED
    assert cbor2.loads(payload)[31] == "replayed"
    out = run_get()
    assert out.returncode == 0, out.stderr
    assert b"2.05" in out.stderr
    assert out.stdout[:1] == b"\xd2", "a COSE_Sign1 reading"  
    # Signed by a key that is not the AC's: refused.
    other = ec.generate_private_key(ec.SECP256R1())
    forged = python_cwt_token(other, srv.identity, reader, [[sensor, 1]], holder, b"interop2")
    code, payload = asyncio.run(post_authz_info(srv.port, forged))
    assert code == Code.UNAUTHORIZED
    assert cbor2.loads(payload)[31] == "tampered"
