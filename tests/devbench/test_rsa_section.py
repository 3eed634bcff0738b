"""The RSA section of docs/device-costs.md (tools/devbench/rsa_section.py): the composed
handshakes add up the measured operations the client performs, the battery estimate follows
the seed's method, and the section is rewritten in place without touching the rest of the page.
Needs no image."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import rsa_section  # noqa: E402

OPS = {"dtls_psk_client": 500, "rsa2048_verify": 7_000, "rsa2048_encrypt": 7_100, "rsa2048_sign": 70_000,
       "rsa2048_public_key": 1_000, "rsa2048_decrypt": 70_100, "keygen_p256": 6_000, "ecdh_p256": 6_100,
       "sign_p256": 14_000, "verify_p256": 13_000, "dtls_rpk_client": 27_000, "dtls_rpk_mutual_client": 49_000}


def results(ops=OPS):
    r = {op: {"cycles": c, "stack": 100, "kat": True} for op, c in ops.items()}
    for op in r:
        if op.startswith("rsa"):
            r[op]["heap_peak"] = 4_000
    return {"m4-rustcrypto-rsa": {"core": "cortex-m4", "ops": r},
            "m0plus-rustcrypto-rsa": {"core": "cortex-m0plus", "ops": r}}


def test_the_seeds_handshake_is_one_private_and_two_public_operations():
    parts = {key: dict(p) for key, _, p in rsa_section.compositions()}
    full = parts["rsa-kx-full"]
    assert full == {"dtls_psk_client": 1, "rsa2048_verify": 1, "rsa2048_encrypt": 1, "rsa2048_sign": 1}
    assert rsa_section.composed(results(), "m4-rustcrypto-rsa", parts["rsa-kx-full"].items()) == 500 + 7_000 + 7_100 + 70_000
    ecdhe = parts["ecdhe-rsa-server"]
    assert rsa_section.composed(results(), "m4-rustcrypto-rsa", ecdhe.items()) == 500 + 2 * 7_000 + 6_000 + 6_100


def test_a_missing_operation_leaves_the_composition_empty():
    ops = dict(OPS)
    del ops["rsa2048_encrypt"]
    parts = dict((k, p) for k, _, p in rsa_section.compositions())
    assert rsa_section.composed(results(ops), "m4-rustcrypto-rsa", parts["rsa-kx-server"]) is None


def test_the_battery_estimate_reproduces_the_seeds_years():
    # 30,240 J, 5 %, one handshake a day: 487.8 mJ -> about 8.5 years, 286.4 mJ -> about 14.5.
    assert round(rsa_section.years(487.8), 1) == 8.5
    assert round(rsa_section.years(286.4), 1) == 14.5


def test_the_section_is_placed_once_and_rewritten_in_place(tmp_path):
    page = tmp_path / "device-costs.md"
    page.write_text("# Page\n\n## Before\n\ntext\n\n## The complete signing sensor\n\nsensor\n")
    rsa_section.splice(str(page), results())
    first = page.read_text()
    assert first.count(rsa_section.HEADING) == 1
    assert first.index("## Before") < first.index(rsa_section.HEADING) < first.index("## The complete signing sensor")
    assert "sensor\n" in first and "(composed)" in first
    rsa_section.splice(str(page), results())
    assert page.read_text() == first


def test_an_image_that_did_not_build_is_reported_with_its_reason():
    r = results()
    r["m0plus-rustcrypto-rsa"] = {"core": "cortex-m0plus", "build_error": "spin needs compare_exchange"}
    lines = []
    rsa_section.write(r, lines.append)
    assert any("m0plus-rustcrypto-rsa: not built" in line and "compare_exchange" in line for line in lines)
