"""CoAP over DTLS between Sigil and implementations nobody here wrote: libcoap's
coap-client/coap-server (Debian libcoap3-bin, GnuTLS build) with pre-shared keys and raw
public keys, in both directions."""
import os
import shutil
import subprocess
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import SIGIL, free_port, identity_of, sigil

CLIENT = shutil.which("coap-client-gnutls")
SERVER = shutil.which("coap-server-gnutls")
PSK_TEXT = "sigil-interop-k1"  # 16 bytes; libcoap's -k takes the key as text


def test_libcoap_gnutls_is_installed():
    assert CLIENT and SERVER, "coap-client-gnutls/coap-server-gnutls missing: run scripts/install-test-deps"


def ec_key_pem(tmp_path, name):
    """A P-256 key as PEM for libcoap's -M, and its Sigil identity h(P) over the uncompressed point (computed in Python)."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / name
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return str(path), identity_of("p256", point), key


def coap_client(*args):
    return subprocess.run([CLIENT, "-B", "10", *args], capture_output=True, text=True, timeout=30)


def test_libcoap_client_psk_against_sigil_server(server):
    ident = "0123456789abcdef0123456789abcdef"
    server.provision(ident)
    sigil("provision", "--db", server.db, "psk", ident, "--key", PSK_TEXT.encode().hex())
    out = coap_client("-u", ident, "-k", PSK_TEXT, "-m", "get", f"{server.coaps}/.well-known/core")
    assert out.returncode == 0, out.stderr
    assert '</rd>;rt="core.rd";ct=40' in out.stdout
    # A wrong key gets no answer (the handshake fails).
    bad = coap_client("-u", ident, "-k", "not-the-right-k1", "-m", "get", f"{server.coaps}/.well-known/core")
    assert "core.rd" not in bad.stdout


def test_libcoap_client_rpk_against_sigil_server(server, tmp_path):
    pem, ident, _ = ec_key_pem(tmp_path, "client.pem")
    # Not provisioned: the server refuses the key.
    out = coap_client("-M", pem, "-m", "get", f"{server.coaps}/.well-known/core")
    assert "core.rd" not in out.stdout
    server.provision(ident)
    time.sleep(0.3)
    out = coap_client("-M", pem, "-m", "get", f"{server.coaps}/.well-known/core")
    assert out.returncode == 0, out.stderr
    assert '</ps>;rt="core.ps";ct=40' in out.stdout


def test_libcoap_client_reads_a_sensor_topic_over_psk(server, tmp_path):
    """A sensor publishes over coaps:// with PSK; libcoap reads the stored, signed reading."""
    state = str(tmp_path / "s")
    ident = sigil("sensor", "--state", state, "--print-identity").stdout.split()[0]
    server.provision(ident)
    psk = sigil("provision", "--db", server.db, "psk", ident, "--key", PSK_TEXT.encode().hex()).stdout.strip()
    assert psk == PSK_TEXT.encode().hex()
    r = sigil("sensor", "--state", state, "--server", server.coaps, "--dtls", "psk", "--psk", psk,
              "--count", "2", "--interval", "100ms")
    assert '"acknowledged": [' in r.stdout and '"rejected": []' in r.stdout, r.stdout
    out = subprocess.run([CLIENT, "-B", "10", "-u", ident, "-k", PSK_TEXT, "-m", "get", f"{server.coaps}/ps/1/m"],
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    # The latest reading as stored: a tagged COSE_Sign1 (CBOR tag 18, array of 4).
    assert out.stdout[:2] == b"\xd2\x84", out.stdout[:16]


@pytest.fixture
def libcoap_server(tmp_path):
    procs = []

    def start(*args):
        port = free_port()
        p = subprocess.Popen([SERVER, "-A", "127.0.0.1", "-p", str(port), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        time.sleep(0.5)
        # coap-server listens for coaps:// on port+1 when -p is given.
        return port
    yield start
    for p in procs:
        p.kill()
        p.wait()


def sigil_get(uri, *args):
    return subprocess.run([SIGIL, "get", uri, *args], capture_output=True, text=True, timeout=60)


def test_sigil_client_psk_against_libcoap_server(libcoap_server):
    port = libcoap_server("-k", PSK_TEXT)
    out = sigil_get(f"coaps://127.0.0.1:{port + 1}/", "--dtls", "psk", "--psk", PSK_TEXT.encode().hex(),
                    "--psk-identity", "sigil-client")
    assert out.returncode == 0, out.stderr
    assert "libcoap" in out.stdout.lower() or "coap" in out.stdout.lower(), out.stdout


def test_sigil_client_rpk_against_libcoap_server(libcoap_server, tmp_path):
    pem, server_ident, _ = ec_key_pem(tmp_path, "server.pem")
    port = libcoap_server("-M", pem)
    key_file = tmp_path / "client.key"
    out = sigil_get(f"coaps://127.0.0.1:{port + 1}/", "--dtls", "rpk", "--server-identity", server_ident,
                    "--key-file", str(key_file))
    assert out.returncode == 0, out.stderr
    assert "coap" in out.stdout.lower(), out.stdout
    # Pinned to another identity: refused.
    out = sigil_get(f"coaps://127.0.0.1:{port + 1}/", "--dtls", "rpk", "--server-identity", "0" * 32,
                    "--key-file", str(key_file), "--dtls-timeout", "200ms")
    assert out.returncode != 0


# ---- X.509 (--dtls cert): a CA certifies each device's own key; provisioning still decides ----

import datetime
import json

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from conftest import Server


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(public_key, cn, ca_key, ca_name, is_ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_name).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))


def pem(path, *items):
    with open(path, "wb") as f:
        for it in items:
            if isinstance(it, x509.Certificate):
                f.write(it.public_bytes(serialization.Encoding.PEM))
            else:
                f.write(it.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
    return str(path)


def assert_refused_and_retrying(args, seconds=4.0):
    """The server refuses the sensor's handshake (a fatal alert) and the sensor keeps retrying."""
    p = subprocess.Popen([SIGIL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(seconds)
        assert p.poll() is None, "the sensor stopped instead of retrying: " + p.stderr.read()
    finally:
        p.kill()
        out, err = p.communicate(timeout=10)
    assert "DTLS handshake" in err and "alert" in err and "retrying" in err, err
    assert '"acknowledged": [' not in out or '"acknowledged": []' in out, out


def test_sensor_and_app_with_certificates(tmp_path):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue(ca_key.public_key(), "Sigil operator CA", ca_key, _name("Sigil operator CA"), is_ca=True)
    ca_pem = pem(tmp_path / "ca.pem", ca)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_chain = pem(tmp_path / "server.pem", issue(srv_key.public_key(), "sigil-server", ca_key, ca.subject))
    srv_key_pem = pem(tmp_path / "server.key.pem", srv_key)
    server = Server(tmp_path, "--dtls-cert", srv_chain, "--dtls-cert-key", srv_key_pem, "--dtls-client-ca", ca_pem)
    try:
        # The device makes its own key; the operator's CA certifies that key.
        state = str(tmp_path / "dev")
        lines = sigil("sensor", "--state", state, "--alg", "p256", "--print-identity").stdout.split()
        ident, alg_hex = lines[0], lines[3]
        assert alg_hex.startswith("p256:")
        dev_pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), bytes.fromhex(alg_hex[5:]))
        dev_cert = pem(tmp_path / "dev.pem", issue(dev_pub, "sensor", ca_key, ca.subject))
        args = ["sensor", "--state", state, "--server", server.coaps, "--dtls", "cert", "--cert", dev_cert,
                "--ca", ca_pem, "--count", "2", "--interval", "100ms", "--dtls-timeout", "300ms"]
        run = lambda: sigil(*args, check=False)
        # Certified but not provisioned: no session. A DTLS sensor retries its handshake with
        # back-off instead of exiting, so the refusal shows as a sensor still knocking.
        assert_refused_and_retrying(args)
        server.provision(ident)
        time.sleep(0.3)
        r = run()
        assert r.returncode == 0, r.stdout + r.stderr
        assert '"rejected": []' in r.stdout and '"acknowledged": [' in r.stdout
        # The application with its own certified key verifies the readings end to end.
        app_key = ec.generate_private_key(ec.SECP256R1())
        app_cert = pem(tmp_path / "app.pem", issue(app_key.public_key(), "app", ca_key, ca.subject))
        app_key_pem = pem(tmp_path / "app.key.pem", app_key)
        point = app_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        server.provision(identity_of("p256", point))
        time.sleep(0.3)
        out = sigil("app", "--server", server.coaps, "--dtls", "cert", "--cert", app_cert, "--cert-key", app_key_pem,
                    "--ca", ca_pem, "--json")
        report = json.loads(out.stdout)
        assert [(x["verified"], x["failed"]) for x in report["sensors"]] == [(2, 0)], out.stdout
        # A device certified by another CA is refused even though its identity is provisioned.
        rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
        rogue = pem(tmp_path / "rogue.pem", issue(dev_pub, "sensor", rogue_ca_key, _name("Rogue CA")))
        assert_refused_and_retrying(["sensor", "--state", state, "--server", server.coaps, "--dtls", "cert",
                                     "--cert", rogue, "--ca", ca_pem, "--count", "1", "--dtls-timeout", "300ms"])
        # The server's chain must lead to the client's anchor: a client trusting only the rogue CA refuses it.
        rogue_ca = issue(rogue_ca_key.public_key(), "Rogue CA", rogue_ca_key, _name("Rogue CA"), is_ca=True)
        r = sigil("get", f"{server.coaps}/.well-known/core", "--dtls", "cert", "--ca", pem(tmp_path / "rca.pem", rogue_ca),
                  "--dtls-timeout", "300ms", check=False)
        assert r.returncode != 0
    finally:
        server.stop()
