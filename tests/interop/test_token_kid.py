"""An access token's PoP key used by a C stack: libcoap's coap-client (GnuTLS build) opens the
RFC 9202 PSK session with the kid and key of a token `sigil token` got, and reads a reading.

libcoap, OpenSSL and GnuTLS take the PSK identity as a C string: a kid with a zero byte in it
would be cut short there. The AC's kids are `~` and 16 hex digits (docs/wire-formats.md,
"Access tokens"), so the kid goes to `coap-client -u` as it is. The kid and key are read from
the token the way only the resource server could (pycose decrypts it with the AC-RS key from
the server's database): `sigil token` writes the token, not the key."""
import shutil
import sqlite3
import subprocess

import cbor2
import pytest
from pycose.keys import SymmetricKey
from pycose.messages import Enc0Message

from conftest import Server, sigil

CLIENT = shutil.which("coap-client-gnutls")
CNF, COSE_KEY, KID, K = 8, 1, 2, -1


@pytest.fixture
def setup(tmp_path):
    srv = Server(tmp_path, "--authorize-reads")
    st = tmp_path / "sensor"
    sensor = sigil("sensor", "--state", str(st), "--alg", "p256", "--print-identity").stdout.splitlines()[0]
    reader = sigil("sensor", "--state", str(tmp_path / "reader"), "--print-identity").stdout.splitlines()[0]
    for i in (sensor, reader):
        srv.provision(i)
    psk = sigil("provision", "--db", srv.db, "psk", reader).stdout.splitlines()[0]
    sigil("provision", "--db", srv.db, "grant", reader, sensor)
    out = sigil("sensor", "--server", srv.uri, "--state", str(st), "--interval", "100ms", "--count", "2")
    assert out.returncode == 0, out.stderr
    db = sqlite3.connect(srv.db)
    reg_id, links = db.execute("SELECT id, links FROM registrations").fetchone()
    topic = f"ps/{reg_id}" + links.split("<", 1)[1].split(">", 1)[0]
    latest = db.execute("SELECT raw FROM readings ORDER BY seq DESC LIMIT 1").fetchone()[0]
    yield srv, sensor, reader, psk, topic, latest
    srv.stop()


def token_pop(srv, sensor, reader, psk, out_file):
    """A token for reading `sensor`, and the kid and PSK its cnf carries."""
    out = sigil("token", "--server", srv.coaps, "--dtls", "psk", "--psk", psk, "--psk-identity", reader,
                "--scope", sensor, "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    token = out_file.read_bytes()
    rs_key = dict(
        (name, secret) for name, secret in sqlite3.connect(srv.db).execute("SELECT name, secret FROM server_key")
    )["ac-rs"]
    msg = Enc0Message.decode(token)
    msg.key = SymmetricKey(k=rs_key)
    key = cbor2.loads(msg.decrypt())[CNF][COSE_KEY]
    return token, key[KID], key[K]


def coap_client(*args):
    return subprocess.run([CLIENT, "-B", "10", *args], capture_output=True, timeout=30)


def test_libcoap_reads_a_reading_with_a_tokens_kid_and_psk(setup, tmp_path):
    assert CLIENT, "coap-client-gnutls missing: run scripts/install-test-deps"
    srv, sensor, reader, psk, topic, latest = setup
    # Every kid is a printable C string, token after token.
    for i in range(20):
        token, kid, key = token_pop(srv, sensor, reader, psk, tmp_path / f"tok{i}.cwt")
        assert len(kid) == 17 and kid[:1] == b"~", kid
        assert b"\x00" not in kid and kid.isascii() and kid.decode().isprintable(), kid
        # coap-client's -k also takes the key as argv text: a random key with a zero byte
        # (6 % of them) cannot be given there, so take the next token's.
        if b"\x00" not in key:
            break
    assert b"\x00" not in key
    token_file = tmp_path / "token.cwt"
    token_file.write_bytes(token)
    uri = f"{srv.coaps}/{topic}"
    # Before the token is posted, the kid opens no session.
    before = coap_client("-u", kid.decode(), "-k", key, "-m", "get", uri)
    assert before.stdout != latest
    # POST /authz-info over plain coap:// (RFC 9200 §5.10.1), then the PSK session.
    posted = coap_client("-m", "post", "-t", "61", "-f", str(token_file), f"{srv.uri}/authz-info")
    assert posted.returncode == 0, posted.stderr
    got = tmp_path / "reading.cose"
    out = coap_client("-u", kid.decode(), "-k", key, "-m", "get", "-o", str(got), uri)
    assert out.returncode == 0, out.stderr
    # The latest reading, byte for byte as the sensor signed it (tagged COSE_Sign1).
    reading = got.read_bytes()
    assert reading == latest, reading[:32]
    assert reading[:2] == b"\xd2\x84"
    # The same kid with another key: the handshake fails, nothing is read.
    wrong = bytes(b ^ 0x5A or 1 for b in key)
    bad = coap_client("-u", kid.decode(), "-k", wrong, "-m", "get", uri)
    assert bad.stdout != latest
