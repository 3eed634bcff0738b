"""The whole-handshake part of the Tables II/III section (tools/devbench/handshakes.py): the
IBPV composition, the energy conversion and the splice into an existing report. No images
needed."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import handshakes  # noqa: E402


def fake():
    ops = {op: {"cycles": 1_000_000 * (i + 1)} for i, (op, _, _) in enumerate(handshakes.SUITES)}
    ops["keygen_p256"] = {"cycles": 300_000}
    ops["ibpv_pair32"] = {"cycles": 100_000}
    return {v: {"ops": dict(ops), "core": handshakes.core_of(v)} for v, _ in handshakes.COLUMNS}


def test_ibpv_is_the_handshake_minus_keygen_plus_a_pair_and_only_with_a_key_pair():
    ops = fake()["m4-rustcrypto-ecc"]["ops"]
    assert handshakes.composed_ibpv(ops, "dtls_rpk_client", True) == 3_000_000 - 300_000 + 100_000
    assert handshakes.composed_ibpv(ops, "dtls_psk_client", False) is None
    del ops["ibpv_pair32"]
    assert handshakes.composed_ibpv(ops, "dtls_rpk_client", True) is None


def test_cycles_become_time_and_energy_on_the_sections_boards():
    # Cortex-M4: CC2538 at 32 MHz and 60 mW; Cortex-M0+: 48 MHz, 18 mW.
    t, e = handshakes.energy(32_000_000, "cortex-m4")
    assert (round(t, 6), round(e, 6)) == (1000.0, 60.0)
    t, e = handshakes.energy(48_000, "cortex-m0plus")
    assert (round(t, 6), round(e, 6)) == (1.0, 0.018)
    assert handshakes.fmt(3_200_000, "cortex-m4") == "3,200,000 (100.0 ms / 6.00 mJ)"


def test_every_suite_has_a_row_with_two_cells_per_column():
    rows = handshakes.table_rows(fake())
    assert [r[0] for r in rows] == [label for _, label, _ in handshakes.SUITES]
    for label, cells in rows:
        assert len(cells) == 2 * len(handshakes.COLUMNS)
    psk = rows[0][1]
    assert psk[1] == "no key pair to replace"


def test_the_paper_sum_is_one_multiplication_and_one_verify():
    lines = []
    handshakes.paper_vs_ours(fake(), lines.append)
    text = "\n".join(lines)
    assert "13,487 + 27,476 = 40,963 ms / 577.58 mJ" in text
    assert "976 + 1,076 = 2,052 ms / 28.93 mJ" in text
    assert "135 + 1,076 = 1,211 ms / 17.07 mJ" in text


REPORT = """# Device costs

## Beside DTLS-as-CoAP-resource Tables II and III: IBPV and Shamir's trick

Tables.

## The complete signing sensor

Sensor.
"""


def test_splice_inserts_at_the_end_of_the_section_then_replaces_in_place(tmp_path):
    path = tmp_path / "device-costs.md"
    path.write_text(REPORT)
    handshakes.splice(str(path), fake())
    once = path.read_text()
    assert once.index("Tables.") < once.index(handshakes.HEADING) < once.index("## The complete signing sensor")
    assert once.endswith("Sensor.\n")
    handshakes.splice(str(path), fake())
    assert path.read_text() == once
    assert once.count(handshakes.HEADING) == 1


def test_the_operations_tables_handshake_rows_are_flagged_only_when_they_differ():
    hs = fake()
    same = {handshakes.PLAIN[v]: {op: r["cycles"] for op, r in hs[v]["ops"].items()} for v in hs}
    lines = []
    handshakes.stale_rows_note(hs, same, lines.append)
    assert lines[0].startswith("The PSK and server-only ECDHE-ECDSA figures here agree")
    older = {v: dict(ops) for v, ops in same.items()}
    older["m4-rustcrypto"]["dtls_rpk_client"] += 300_000
    lines = []
    handshakes.stale_rows_note(hs, older, lines.append)
    assert "Cortex-M4 portable, `dtls_rpk_client`: 3,300,000 there, 3,000,000 here (-300,000)" in lines[0]
    assert "fast backend, `dtls_rpk_client`" not in lines[0]
    lines = []
    handshakes.stale_rows_note(hs, {}, lines.append)
    assert lines == []
