"""Whole DTLS client handshakes per suite and per optimisation, beside the DTLS-as-CoAP-resource
paper's Tables II and III (a part of that section of docs/device-costs.md).

Measured in the bench images built with the `ecc` feature (the images of the Tables II/III
section): every handshake operation of sigil-devbench (server flights replayed from
`vectors/dtls-*-server.bin`) and the P-256 key generation with cycle counting, and a fresh IBPV
pair summed from the table. The table is filled first without counting (its cost is the
section's 'one-time setup'); every output is checked against the known answers or on the host.

    scripts/bench-device --section handshakes   # measures these alone, rewrites this part
"""
from boards import BOARDS

HEADING = "### Whole handshakes per suite and optimisation"

# (operation, suite label, whether the client draws an ephemeral P-256 key pair)
SUITES = [
    ("dtls_psk_client", "PSK-CCM8 (TLS_PSK_WITH_AES_128_CCM_8)", False),
    ("dtls_ecdhe_psk_client", "ECDHE-PSK (TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256)", True),
    ("dtls_rpk_client", "ECDHE-ECDSA-CCM8, server raw public key", True),
    ("dtls_rpk_mutual_client", "ECDHE-ECDSA-CCM8, raw public keys both ways (client signs)", True),
    ("dtls_static_ecdh_client", "static ECDH, server raw public key (the paper's ECDH_ECDSA)", True),
]
# Also measured in the same images: what the IBPV composition takes out and puts in.
EXTRA_OPS = ["keygen_p256"]
IBPV_PAIR = "ibpv_pair32"

# (variant, label); the `ecc` images of tools/devbench/run.py's ECC_VARIANTS.
COLUMNS = [
    ("m4-rustcrypto-ecc", "Cortex-M4 portable"),
    ("m4-fast-ecc", "Cortex-M4 fast backend"),
    ("m0plus-rustcrypto-ecc", "Cortex-M0+ portable"),
]

# DTLS-as-CoAP-resource, MagoNode (ms, mJ): Table II scalar multiplication and Table III
# ECDSA verify and ECDH, for base, all, all + IBPV.
PAPER_MULT = {"base": (13487, 190.17), "all": (976, 13.76), "all + IBPV": (135, 1.9)}
PAPER_VERIFY = {"base": (27476, 387.41), "all": (1076, 15.17), "all + IBPV": (1076, 15.17)}
PAPER_ECDH = {"base": (26974, 380.33), "all": (1952, 27.52), "all + IBPV": (1111, 15.67)}


def board(core):
    return next(b for b in BOARDS if b["core"] == core)


def core_of(variant):
    return "cortex-m0plus" if variant.startswith("m0plus") else "cortex-m4"


def energy(cycles, core):
    """(ms, mJ) of `cycles` on the section's board for `core`."""
    b = board(core)
    t = cycles / b["hz"] * 1e3
    return t, t * b["watts"]


def fmt(c, core):
    if c is None:
        return "–"
    t, e = energy(c, core)
    return f"{c:,} ({t:,.1f} ms / {e:,.2f} mJ)"


def composed_ibpv(ops, op, ephemeral):
    """The handshake with its ephemeral key pair from the IBPV table: measured handshake minus
    measured key generation plus a measured table pair. None where it does not apply."""
    if not ephemeral:
        return None
    hs, kg, pair = (ops.get(n, {}).get("cycles") for n in (op, "keygen_p256", IBPV_PAIR))
    if None in (hs, kg, pair):
        return None
    return hs - kg + pair


def table_rows(hs):
    """Rows of the main table: (suite label, [cells]) with one cell per column and, after each
    column, its composed IBPV figure."""
    rows = []
    for op, label, eph in SUITES:
        cells = []
        for variant, _ in COLUMNS:
            ops = (hs.get(variant) or {}).get("ops", {})
            core = core_of(variant)
            cells.append(fmt((ops.get(op) or {}).get("cycles"), core))
            ibpv = composed_ibpv(ops, op, eph)
            cells.append(fmt(ibpv, core) if eph else "no key pair to replace")
        rows.append((label, cells))
    return rows


def write(hs, w, ops_table=None):
    """`ops_table`: {variant: {operation: cycles}} of the operations table on the same page
    (the last full run), to say where its handshake rows differ from these."""
    if not hs:
        return
    m4b, m0b = board("cortex-m4"), board("cortex-m0plus")
    w(HEADING)
    w("")
    w("One full client handshake per suite, from the first ClientHello through the cookie "
      "exchange (HelloVerifyRequest, second ClientHello) to the server's Finished, on the "
      "record layer (`sigil_dtls::Connection`, `eval/sigil-devbench`: `dtls_<suite>_client`), "
      "the server's flights replayed from recordings of the real `sigil-dtls` server made with "
      "fixed seeds (`eval/sigil-devbench/tests/dtls.rs` writes and checks "
      "`vectors/dtls-*-server.bin` and the client's datagrams; `vectors/check_dtls_kat.py` "
      "recomputes each key schedule, both Finished messages and every signature with "
      "pyca/cryptography). Each run's answer is the hash of the client's datagrams and must "
      "equal the host's. What the client computes: PSK: key schedule, Finished, record "
      "protection only. ECDHE-PSK: plus an ephemeral P-256 key pair and one ECDH. "
      "ECDHE-ECDSA: plus the server key's pinned-identity check, one ECDSA verify "
      "(ServerKeyExchange) and the ephemeral key pair and ECDH; mutual adds the client's own "
      "Certificate (sigil-dtls derives its public key from the secret for it: one more k·G) "
      "and one ECDSA sign (CertificateVerify). The pinned server identity is computed from "
      "the server's public key (a hash), as a device holds it. Static ECDH (sigil-dtls feature "
      "`static-ecdh`, `Config::danger_static_ecdh` on both sides; "
      "PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8, a private-use code point): the server's pinned "
      "raw public key is its ECDH key, so there is no ServerKeyExchange and no signature to "
      "verify; the client still draws an ephemeral key pair for its ClientKeyExchange (it has "
      "no certified ECDH key of its own, RFC 4492 §2.1) and agrees with the server's key. "
      f"Cycles (model), then time and CPU energy on the Cortex-M4 board, {m4b['name'].split(' @')[0]} "
      f"({m4b['hz'] / 1e6:.0f} MHz, {m4b['watts'] * 1e3:.0f} mW), and the Cortex-M0+ at "
      f"{m0b['hz'] / 1e6:.0f} MHz, {m0b['watts'] * 1e3:.0f} mW, as above. Measured in the "
      "section's `ecc` bench images; `scripts/bench-device --section handshakes` measures "
      "this part alone and rewrites it.")
    w("")
    w("**IBPV columns are composed, not measured as one run**: measured handshake − measured "
      "P-256 key generation (`keygen_p256`) + a measured table pair (`ibpv_pair32`, l = 32), "
      "all three in the same image. The provider interface (`CryptoProvider::"
      "generate_agreement`, then `agreement_public_key`) has no way to hand the handshake a "
      "secret together with its precomputed public point, so the table cannot supply the "
      "handshake's ephemeral key without a provider that caches state between the two calls; "
      "the composition assumes the handshake's ephemeral key costs what `keygen_p256` does "
      "(the same scalar draw and multiplication by G in both backends). With the fast "
      "backend the table's portable point additions are slower than its k·G, so the "
      "composition is a loss there (\"Why the numbers differ\" above).")
    w("")
    heads = []
    for _, label in COLUMNS:
        heads += [label, label.replace(" fast backend", " fast") + " + IBPV (composed)"]
    w("| suite (client side) | " + " | ".join(heads) + " |")
    w("|---|" + "---:|" * len(heads))
    for label, cells in table_rows(hs):
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    keygen = {v: ((hs.get(v) or {}).get("ops", {}).get("keygen_p256") or {}).get("cycles") for v, _ in COLUMNS}
    pair = {v: ((hs.get(v) or {}).get("ops", {}).get(IBPV_PAIR) or {}).get("cycles") for v, _ in COLUMNS}
    w("In the same images: P-256 key generation "
      + ", ".join(f"{k(keygen[v])} ({lab})" for v, lab in COLUMNS)
      + "; one table pair (l = 32) "
      + ", ".join(f"{k(pair[v])} ({lab})" for v, lab in COLUMNS) + ".")
    w("")
    reading(hs, w)
    stale_rows_note(hs, ops_table or {}, w)
    paper_vs_ours(hs, w)
    fig4_note(hs, w)


def reading(hs, w):
    """What the measured rows say, from the Cortex-M4 portable column."""
    ops = (hs.get("m4-rustcrypto-ecc") or {}).get("ops", {})
    c = {op: (ops.get(op) or {}).get("cycles") for op, _, _ in SUITES}
    if None in c.values():
        return
    psk, epsk, rpk, mutual, st = (c[op] for op, _, _ in SUITES)
    w(f"On the Cortex-M4 with the portable backend, the ECC operations are nearly all of it: "
      f"PSK takes {psk:,} cycles, so the key schedule, Finished and record protection are "
      f"{psk / st:.1%} of the static-ECDH handshake. Static ECDH ({st:,}) costs what "
      f"ECDHE-PSK ({epsk:,}) does, a key pair and one ECDH each, and {rpk - st:,} cycles "
      f"({(rpk - st) / rpk:.0%}) less than server-only ECDHE-ECDSA, which also verifies the "
      f"ServerKeyExchange signature; authenticating the client as well adds {mutual - rpk:,} "
      "cycles (its public key and the CertificateVerify signature).")
    w("")


# The operations table's variants that these images extend with the `ecc` feature.
PLAIN = {"m4-rustcrypto-ecc": "m4-rustcrypto", "m4-fast-ecc": "m4-fast",
         "m0plus-rustcrypto-ecc": "m0plus-rustcrypto"}


def stale_rows_note(hs, ops_table, w):
    """Where the operations table's two handshake rows (a plain image, the last full run)
    differ from these by more than 2%: the differences, and the likely reason."""
    diffs = []
    for variant, label in COLUMNS:
        old_ops = ops_table.get(PLAIN[variant]) or {}
        ops = (hs.get(variant) or {}).get("ops", {})
        for op in ("dtls_psk_client", "dtls_rpk_client"):
            old, new = old_ops.get(op), (ops.get(op) or {}).get("cycles")
            if old and new and abs(old - new) > 0.02 * new:
                diffs.append((label, op, old, new))
    if not diffs:
        if any(ops_table.get(PLAIN[v]) for v, _ in COLUMNS):
            w("The PSK and server-only ECDHE-ECDSA figures here agree within 2% with the "
              "operations table's (same code in images without the IBPV table).")
            w("")
        return
    w("The operations table above is from the last full run, whose ECDHE-ECDSA operation still "
      "derived the pinned server key from the server's secret key inside the measured "
      "handshake (one k·G no client does; the operation now takes the public key): "
      + "; ".join(f"{label}, `{op}`: {old:,} there, {new:,} here ({new - old:+,})"
                  for label, op, old, new in diffs)
      + " (about one key generation each, above). The next full run measures both tables on "
      "the same code.")
    w("")


def paper_vs_ours(hs, w):
    """The paper's suite beside our static-ECDH handshake."""
    get = lambda v, op: ((hs.get(v) or {}).get("ops", {}).get(op) or {}).get("cycles")  # noqa: E731
    st4, st4f, st0 = (get(v, "dtls_static_ecdh_client") for v, _ in COLUMNS)
    ops4 = (hs.get("m4-rustcrypto-ecc") or {}).get("ops", {})
    ops4f = (hs.get("m4-fast-ecc") or {}).get("ops", {})
    ops0 = (hs.get("m0plus-rustcrypto-ecc") or {}).get("ops", {})
    ib4 = composed_ibpv(ops4, "dtls_static_ecdh_client", True)
    ib4f = composed_ibpv(ops4f, "dtls_static_ecdh_client", True)
    ib0 = composed_ibpv(ops0, "dtls_static_ecdh_client", True)
    w("**The paper's suite, TLS_ECDH_ECDSA_WITH_AES_128_CCM_8, beside Sigil's static-ECDH "
      "handshake.** The paper gives no per-handshake table. What is compared here is the sum "
      "of its ECC operations for one handshake of that suite: one scalar multiplication "
      "(Table II) and one ECDSA verify (Table III, the certificate's CA signature); the "
      "paper's own text names these as the suite's main operations. Its Table III ECDH row "
      "(key pair and shared secret: what Sigil's client does) would give base 26,974 + 27,476 "
      "= 54,450 ms, all 1,952 + 1,076 = 3,028 ms, all + IBPV 1,111 + 1,076 = 2,187 ms instead.")
    w("")
    w("| optimisation | MagoNode (paper): scalar multiplication + ECDSA verify | Sigil static ECDH, Cortex-M4 | Sigil static ECDH, Cortex-M0+ |")
    w("|---|---:|---:|---:|")
    for name, c4, c0 in (("base", st4, st0), ("all", st4f, None), ("all + IBPV", ib4f, None)):
        (tm, em), (tv, ev) = PAPER_MULT[name], PAPER_VERIFY[name]
        paper = f"{tm:,} + {tv:,} = {tm + tv:,} ms / {em + ev:,.2f} mJ"
        ours4 = fmt(c4, "cortex-m4") if c4 is not None else "–"
        ours0 = fmt(c0, "cortex-m0plus") if c0 is not None else "– (no fast backend for ARMv6-M)"
        label = {"base": "base (ours: portable backend)", "all": "all (ours: fast backend, p256-cm4)",
                 "all + IBPV": "all + IBPV (ours: fast backend, key pair from the table; composed)"}[name]
        w(f"| {label} | {paper} | {ours4} | {ours0} |")
    w(f"| IBPV with the portable backend (composed) | – | {fmt(ib4, 'cortex-m4')} | {fmt(ib0, 'cortex-m0plus')} |")
    w("")
    w("**What differs from the paper's handshake.** The curve: P-256 (128-bit security) here, "
      "a 160-bit curve (80-bit) there. The machine: 32-bit Cortex-M cores in a cycle model "
      "without flash wait states against the MagoNode's 8-bit ATmega128RFA1 at 16 MHz, whose "
      "energy the paper takes at 14.1 mW where the boards here draw 60 mW and 18 mW. The "
      "authentication: raw public keys (RFC 7250) pinned by identity, not certificates, so "
      "Sigil's static-ECDH client verifies no signature at all; its two scalar "
      "multiplications (ephemeral key pair, shared secret with the server's key) are the "
      "whole ECC cost, where the paper's sum counts one multiplication and a verify. What a "
      "handshake includes: Sigil's figures are the client's entire computation for the "
      "handshake (hashing the transcript, the PRF, Finished, record protection, parsing), "
      "with the cookie exchange, but not the radio; the paper's sums are its ECC operations "
      "only. The carrier: the record layer here; the paper runs the handshake as a CoAP "
      "resource (the Table I section above measures what that changes in memory; the "
      "computation is the same states). Neither side counts the server.")
    w("")


def fig4_note(hs, w):
    get = lambda v, op: ((hs.get(v) or {}).get("ops", {}).get(op) or {}).get("cycles")  # noqa: E731
    parts = []
    for op, label, _ in SUITES:
        c = get("m4-rustcrypto-ecc", op)
        if c is not None:
            parts.append(f"{label.split(' (')[0]} {energy(c, 'cortex-m4')[1]:,.2f} mJ")
    w("**Energy per handshake, and Fig. 4.** Per client handshake on the Cortex-M4 board, "
      "portable backend: " + "; ".join(parts) + " (CPU only; the radio is the link "
      "emulator's). These figures do not feed Fig. 4 (`eval/sigil-netsim`, "
      "`fig4_lifetime`): that model runs its handshakes on the paper's MagoNode, pricing "
      "each crypto call from the ATmega's per-operation cycle tables "
      "(`eval/sigil-netsim/src/energy.rs`, checked against `docs/device-cycles.json`), and "
      "P-256 does not build for the ATmega (the AVR section below), so its ECDH_ECDSA series "
      "stay the paper's Table III energies plus the radio of Sigil's closest handshake. A "
      "Cortex-M series of Fig. 4 from these handshake energies is not drawn yet.")
    w("")


def k(n):
    return "–" if n is None else f"{n:,}"


def splice(report_path, hs, ops_table=None):
    """Rewrites this part of the Tables II/III section in place (`scripts/bench-device
    --section handshakes`): from HEADING to the next section; placed at the end of the
    Tables II/III section when it is not there yet."""
    L = []
    write(hs, L.append, ops_table)
    new = "\n".join(L).rstrip("\n") + "\n\n"
    with open(report_path) as f:
        text = f.read()
    start = text.find(HEADING)
    if start < 0:
        anchor = text.find("## Beside DTLS-as-CoAP-resource Tables II and III")
        if anchor < 0:
            raise SystemExit(f"{report_path}: no Tables II/III section (run the full scripts/bench-device)")
        start = text.find("\n## ", anchor + 1)
        start = len(text) if start < 0 else start + 1
        end = start
    else:
        end = text.find("\n## ", start)
        end = len(text) if end < 0 else end + 1
    text = text[:start] + new + text[end:]
    with open(report_path, "w") as f:
        f.write(text)
