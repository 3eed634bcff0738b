"""The PSK sensor image's checks (tools/devbench/psk_section.py): they pass on the image
`scripts/bench-device --quick` built, and they fail where they must: a signing image's
public-key symbols, a reading whose tag was altered."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import psk_section  # noqa: E402
import run  # noqa: E402

VARIANTS = os.path.join(ROOT, "firmware", "target", "variants")
PSK_M4 = os.path.join(VARIANTS, "m4-psk", "psk_sensor")
SIGNING_M4 = os.path.join(VARIANTS, "m4-rustcrypto", "sensor")

pytestmark = pytest.mark.skipif(not os.path.exists(PSK_M4), reason="run scripts/bench-device --quick first")


def test_the_psk_image_links_no_public_key_code_and_its_readings_verify():
    r = run.run_sensor(PSK_M4, "cortex-m4")
    assert (r["halt_code"], r["acked"]) == (0, 3)
    assert psk_section.public_key_symbols(PSK_M4) == []
    assert psk_section.check_psk(r, "mac") == []
    w = psk_section.wire(bytes.fromhex(r["sent"][1]), "mac")
    assert w["cf"] == 17 and w["payload"] > w["senml"] > 0


def test_an_altered_tag_or_number_fails_the_check():
    r = run.run_sensor(PSK_M4, "cortex-m4")
    sent = list(r["sent"])
    d = bytearray(bytes.fromhex(sent[2]))
    d[-1] ^= 1  # the last byte of the tag
    sent[2] = d.hex()
    assert psk_section.check_psk(dict(r, sent=sent), "mac") == [
        "reading 2: tag does not verify under the derived reading key"]
    swapped = [r["sent"][0], r["sent"][2], r["sent"][1], r["sent"][3]]
    assert len(psk_section.check_psk(dict(r, sent=swapped), "mac")) == 2


@pytest.mark.skipif(not os.path.exists(SIGNING_M4), reason="no signing sensor image")
def test_the_symbol_check_sees_a_signing_image_public_key_code():
    assert len(psk_section.public_key_symbols(SIGNING_M4)) > 10
