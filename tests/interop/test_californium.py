"""Eclipse Californium/Scandium 3.x (Maven Central) requesting over coaps:// from the Sigil
server with a pre-shared key and with a raw public key. The small client is in
californium/; this module builds it with Maven and javac."""
import os
import shutil
import subprocess
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import identity_of, sigil

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "californium")
KEY = b"sigil-scandium-k".hex()


@pytest.fixture(scope="module")
def classpath():
    assert shutil.which("mvn") and shutil.which("javac"), "Maven/JDK missing: run scripts/install-test-deps"
    target = os.path.join(HERE, "target")
    cpfile = os.path.join(target, "classpath.txt")
    subprocess.run(["mvn", "-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={cpfile}"],
                   cwd=HERE, check=True, timeout=900)
    deps = open(cpfile).read().strip()
    classes = os.path.join(target, "classes")
    os.makedirs(classes, exist_ok=True)
    subprocess.run(["javac", "-d", classes, "-cp", deps, os.path.join(HERE, "src/main/java/SigilClient.java")],
                   check=True, timeout=300)
    return f"{classes}:{deps}"


def scandium(cp, *args):
    return subprocess.run(["java", "-cp", cp, "SigilClient", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("mode", ["psk", "ecdhe-psk"])
def test_scandium_client_psk(server, classpath, mode):
    ident = "00112233445566778899aabbccddeeff"
    server.provision(ident)
    sigil("provision", "--db", server.db, "psk", ident, "--key", KEY)
    out = scandium(classpath, mode, f"{server.coaps}/.well-known/core", ident, KEY)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "CODE 2.05" in lines
    body = bytes.fromhex(lines[lines.index("CODE 2.05") + 1]).decode()
    assert '</rd>;rt="core.rd";ct=40' in body
    # The wrong key: no session, no answer.
    bad = scandium(classpath, mode, f"{server.coaps}/.well-known/core", ident, b"0123456789abcdef".hex())
    assert bad.returncode != 0


@pytest.mark.parametrize("mode", ["rpk", "rpk-gcm"])
def test_scandium_client_raw_public_key(server, classpath, tmp_path, mode):
    key = ec.generate_private_key(ec.SECP256R1())
    priv = tmp_path / "k.der"
    pub = tmp_path / "p.der"
    priv.write_bytes(key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.DER,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    uri = f"{server.coaps}/.well-known/core"
    # Not on the authorized list: refused.
    out = scandium(classpath, mode, uri, str(priv), str(pub))
    assert out.returncode != 0, out.stdout
    server.provision(identity_of("p256", point))
    time.sleep(0.3)
    out = scandium(classpath, mode, uri, str(priv), str(pub))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CODE 2.05" in out.stdout


@pytest.mark.parametrize("cid_len", [0, 6])
def test_scandium_client_with_connection_ids(tmp_path, classpath, cid_len):
    """RFC 9146 with Scandium: with cid=0 the client puts the server's ID in its records, with
    cid=6 the server also puts the client's ID in its own. The server counts the sessions that
    negotiated an ID (printed on SIGINT), so a silent fallback to plain records fails."""
    import json
    import signal

    from conftest import free_port, wait_ready, SIGIL
    db = str(tmp_path / "s.db")
    port, dport = free_port(), free_port()
    proc = subprocess.Popen([SIGIL, "server", "--listen", f"127.0.0.1:{port}", "--dtls-listen", f"127.0.0.1:{dport}",
                             "--db", db], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(port)
        ident = "00112233445566778899aabbccddeeff"
        sigil("provision", "--db", db, "add", ident)
        sigil("provision", "--db", db, "psk", ident, "--key", KEY)
        time.sleep(0.3)
        for _ in range(2):
            out = scandium(classpath, "psk", f"coaps://127.0.0.1:{dport}/.well-known/core", ident, KEY, f"cid={cid_len}")
            assert out.returncode == 0, out.stdout + out.stderr
            assert "CODE 2.05" in out.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    stats = json.loads(err[err.index("{"):])
    assert stats.get("dtls.connection_id") == 2, stats
    assert stats.get("dtls.handshake_completed") == 2, stats
