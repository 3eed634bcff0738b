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
