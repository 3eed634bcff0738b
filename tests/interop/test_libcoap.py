"""libcoap's coap-client (Debian libcoap3-bin) against the Sigil server."""
import shutil
import subprocess

import pytest

CLIENT = shutil.which("coap-client-notls") or shutil.which("coap-client") or shutil.which("coap-client-gnutls")


@pytest.mark.skipif(CLIENT is None, reason="libcoap3-bin is installed by scripts/install-test-deps")
def test_coap_client_fetches_well_known_core(server):
    out = subprocess.run([CLIENT, "-m", "get", "-B", "10", f"{server.uri}/.well-known/core"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '</rd>;rt="core.rd";ct=40' in out.stdout
    assert '</ps>;rt="core.ps";ct=40' in out.stdout


def test_coap_client_is_installed():
    # The interop suite must not silently skip libcoap.
    assert CLIENT is not None, "coap-client not found: run scripts/install-test-deps"
