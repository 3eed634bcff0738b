"""Nodes with only a pre-shared key (docs/security.md, "Nodes without public-key crypto"),
played by implementations nobody here wrote: libcoap's coap-client (Debian libcoap3-bin, GnuTLS
build) registers a node without a key over its DTLS-PSK session and publishes a COSE_Mac0
reading pycose made under the reading key (HKDF from the PSK, computed by cryptography), and
plain SenML over the session; a granted reader fetches the reading key as a COSE_Key and pycose
verifies the stored reading under it."""
import shutil
import sqlite3
import subprocess

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pycose.algorithms import HMAC25664
from pycose.headers import KID, Algorithm
from pycose.keys import SymmetricKey
from pycose.messages import Mac0Message

from conftest import sigil

CLIENT = shutil.which("coap-client-gnutls")
SEQ = -65537  # Sigil's private-use header label of the full sequence number
SENML = cbor2.dumps([{0: "t", 1: "Cel", 2: 21.5}])


def reading_key(psk: bytes, node: bytes) -> bytes:
    info = b"sigil-reading-mac-key-v1\x00" + node
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(psk)


def coap(*args):
    return subprocess.run([CLIENT, "-B", "10", *args], capture_output=True, timeout=30)


def psk_node(server, text_key: str):
    """`sigil provision psk-node` with a printable key (libcoap's -k takes the key as text)."""
    out = sigil("provision", "--db", server.db, "psk-node", "--key", text_key.encode().hex())
    ident, key = out.stdout.split()
    assert bytes.fromhex(key) == text_key.encode()
    return ident


def register(server, ident, key, ct):
    out = coap("-u", ident, "-k", key, "-m", "post", "-t", "40", "-e", f'</m>;rt="sigil.env";ct={ct}',
               f"{server.coaps}/rd?ep={ident}&lt=600")
    assert out.returncode == 0, out.stderr
    reg = sqlite3.connect(server.db).execute(
        "SELECT id, alg, public_key FROM registrations WHERE ep = ?", (ident,)).fetchone()
    assert reg is not None and reg[1] is None and reg[2] is None, reg
    return f"ps/{reg[0]}/m"


def stored(server, ident):
    return sqlite3.connect(server.db).execute(
        "SELECT seq, protection, raw FROM readings WHERE ep = ? ORDER BY seq", (ident,)).fetchall()


def test_libcoap_psk_node_publishes_a_pycose_maced_reading_a_granted_reader_verifies(server, tmp_path):
    key = "sigil-psk-node-1"
    ident = psk_node(server, key)
    topic = register(server, ident, key, 17)
    node = bytes.fromhex(ident)
    msg = Mac0Message(phdr={Algorithm: HMAC25664, KID: node, SEQ: 5}, payload=SENML)
    msg.key = SymmetricKey(k=reading_key(key.encode(), node))
    reading = tmp_path / "reading.cose"
    reading.write_bytes(msg.encode())
    out = coap("-u", ident, "-k", key, "-m", "put", "-t", "17", "-f", str(reading), f"{server.coaps}/{topic}")
    assert out.returncode == 0, out.stderr
    rows = stored(server, ident)
    assert [(r[0], r[1]) for r in rows] == [(5, "mac")]
    assert rows[0][2] == reading.read_bytes()
    # A tag under another key is refused, and nothing more is stored.
    forged = Mac0Message(phdr={Algorithm: HMAC25664, KID: node, SEQ: 6}, payload=SENML)
    forged.key = SymmetricKey(k=reading_key(b"another-psk-0001", node))
    reading.write_bytes(forged.encode())
    out = coap("-u", ident, "-k", key, "-m", "put", "-t", "17", "-f", str(reading), f"{server.coaps}/{topic}")
    assert b"4.01" in out.stdout + out.stderr
    assert len(stored(server, ident)) == 1

    # A reader: refused the key until granted the node, then handed it as a COSE_Key.
    rkey = "sigil-reader-k01"
    reader = psk_node(server, rkey)
    keyfile = tmp_path / "key.cbor"
    out = coap("-u", reader, "-k", rkey, "-m", "get", "-o", str(keyfile), f"{server.coaps}/keys/{ident}")
    assert b"4.03" in out.stdout + out.stderr
    sigil("provision", "--db", server.db, "grant", reader, ident)
    out = coap("-u", reader, "-k", rkey, "-m", "get", "-o", str(keyfile), f"{server.coaps}/keys/{ident}")
    assert out.returncode == 0, out.stderr
    cose_key = cbor2.loads(keyfile.read_bytes())
    assert cose_key[1] == 4 and cose_key[2] == node and cose_key[3] == 4
    assert cose_key[-1] == reading_key(key.encode(), node)
    # The stored reading, fetched by the reader, verifies under the disclosed key.
    got = tmp_path / "got.cose"
    out = coap("-u", reader, "-k", rkey, "-m", "get", "-o", str(got), f"{server.coaps}/{topic}")
    assert out.returncode == 0, out.stderr
    check = Mac0Message.decode(got.read_bytes())
    check.key = SymmetricKey(k=cose_key[-1])
    assert check.verify_tag()
    assert check.payload == SENML


def test_libcoap_psk_node_publishes_plain_senml_only_over_its_session(server, tmp_path):
    key = "sigil-psk-node-2"
    ident = psk_node(server, key)
    topic = register(server, ident, key, 112)
    pack = tmp_path / "pack.cbor"
    pack.write_bytes(SENML)
    for _ in range(2):
        out = coap("-u", ident, "-k", key, "-m", "put", "-t", "112", "-f", str(pack), f"{server.coaps}/{topic}")
        assert out.returncode == 0, out.stderr
    assert [(r[0], r[1]) for r in stored(server, ident)] == [(1, "session"), (2, "session")]
    # The same pack over plain CoAP: no session speaks for the node.
    out = coap("-m", "put", "-t", "112", "-f", str(pack), f"{server.uri}/{topic}")
    assert b"4.01" in out.stdout + out.stderr
    assert len(stored(server, ident)) == 2
    # And nobody registers a keyless entry without the node's session.
    out = coap("-m", "post", "-t", "40", "-e", "</m>;ct=112", f"{server.uri}/rd?ep={ident}")
    assert b"4.00" in out.stdout + out.stderr
