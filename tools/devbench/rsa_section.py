"""RSA-2048 beside P-256, for the two-way-authentication seed's Tables 2, 3 and 4 and its battery
estimate (a section of docs/device-costs.md).

Measured in bench images built with the firmware's `rsa` feature: sigil-devbench's RSA operations
(`sigil_rsa_<name>`: PKCS#1 v1.5 with SHA-256 from the `rsa` crate behind sigil-crypto's `rsa`
feature, on the fixed test key `vectors/rsa2048-bench.*`) with cycle counting, and in the same
images the P-256 operations and DTLS handshakes they are compared with. Every output is checked
against `vectors/device-kat.json`, `device-kat-dtls.json` and `device-kat-rsa.json`. Flash and
RAM are read from the linked RSA image and the plain bench image of the same target.

    scripts/bench-device --section rsa   # measures these alone, rewrites this section
    scripts/bench-device --quick         # the Cortex-M4 RSA image's known answers only
"""
import json
import os
import struct
import time

from boards import BOARDS
from emulator import EmulationError, Image, Machine
from sizes import breakdown

HEADING = "## RSA-2048 beside P-256: the two-way-authentication paper's Tables 2, 3 and 4"

# (variant, target, features, core, the plain bench variant it is compared with)
VARIANTS = [
    ("m4-rustcrypto-rsa", "thumbv7em-none-eabihf", ["rsa"], "cortex-m4", "m4-rustcrypto"),
    ("m0plus-rustcrypto-rsa", "thumbv6m-none-eabi", ["rsa"], "cortex-m0plus", "m0plus-rustcrypto"),
]
QUICK_VARIANTS = ["m4-rustcrypto-rsa"]

RSA_OPS = [
    ("rsa2048_public_key", "parse and check the private key (PKCS#1 DER, CRT values), public key out"),
    ("rsa2048_sign", "RSASSA-PKCS1-v1_5 SHA-256 sign (private key, blinded CRT; key parsing included)"),
    ("rsa2048_verify", "RSASSA-PKCS1-v1_5 SHA-256 verify (public key, e = 65537)"),
    ("rsa2048_encrypt", "RSAES-PKCS1-v1_5 encrypt a 48-byte premaster secret (public key)"),
    ("rsa2048_decrypt", "decrypt the premaster secret, RFC 5246 §7.4.7.1 (private key; key parsing included)"),
]
# Measured in the same images, for the comparison.
ECC_OPS = [
    ("keygen_p256", "P-256 key generation (an ephemeral ECDHE key pair)"),
    ("sign_p256", "ECDSA P-256 sign (RFC 6979)"),
    ("verify_p256", "ECDSA P-256 verify"),
    ("ecdh_p256", "P-256 ECDH shared secret"),
    ("dtls_psk_client", "DTLS client handshake, PSK-CCM8"),
    ("dtls_rpk_client", "DTLS client handshake, ECDHE-ECDSA, server authenticated"),
    ("dtls_rpk_mutual_client", "DTLS client handshake, ECDHE-ECDSA, both authenticated"),
]

# The seed (two-way-authentication paper), OPAL (SAM3U Cortex-M3), its own figures.
SEED_T3 = [  # Table 3: software RSA-2048 (CyaSSL port), (operation, ms @48, mJ @48, ms @96, mJ @96)
    ("RSA public key", 440, 52.8, 221, 42.4),
    ("RSA private key (high memory)", 4725, 566.7, 2362, 453.3),
    ("RSA private key (low memory)", 14895, 1786, 7447, 1429),
    ("handshake RSA total (1 private, 2 public)", 5165, 619.5, 2583, 495.7),
]
SEED_T4 = [  # Table 4: software ECC secp224r1
    ("EC-DH", 387, 46.4, 187, 35.8),
    ("ECDSA sign", 432, 51.8, 205, 39.3),
    ("ECDSA verify", 795, 95.4, 380, 72.9),
    ("handshake ECC total (one of each)", 1614, 193.6, 772, 92.6),
]
# Table 2: the TPM handshake, 'total minimum' (computation, radio TX and the TPM; idle excluded).
SEED_T2 = {"full": 487.8, "server": 286.4}
BATTERY_J = 30_240  # two AA cells, 2,800 mAh (the seed's figure)
SHARE = 0.05        # of it spent on handshakes
PER_DAY = 1


def board(name_start):
    return next(b for b in BOARDS if b["name"].startswith(name_start))


OPAL48 = board("OPAL (SAM3U) @ 48")
OPAL96 = board("OPAL (SAM3U) @ 96")
M0 = next(b for b in BOARDS if b["core"] == "cortex-m0plus")


def kat():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "vectors")
    out = {}
    for f in ("device-kat.json", "device-kat-dtls.json", "device-kat-rsa.json"):
        out.update(json.load(open(os.path.join(root, f)))["operations"])
    return out


def run(path, core, count, with_ecc):
    """Runs the RSA operations (and, with `with_ecc`, the comparison's P-256 operations) in one
    image; returns (results, failures)."""
    known = kat()
    img = Image(path)
    m = Machine(img, core, count_cycles=count)
    results, failures = {}, []
    calls = [(n, "sigil_rsa_" + n) for n, _ in RSA_OPS]
    if with_ecc:
        calls += [(n, "sigil_op_" + n) for n, _ in ECC_OPS]
    for name, sym in calls:
        try:
            n, insns, cycles, stack = m.call(sym, limit=20_000_000_000)
        except EmulationError as e:
            failures.append(f"{name}: {e}")
            continue
        got = m.read("SIGIL_OUT", n).hex()
        ok = got == known[name]["output"]
        if not ok:
            failures.append(f"{name}: output {got[:32]}... != known answer {known[name]['output'][:32]}...")
        r = {"instructions": insns, "cycles": cycles, "stack": stack, "kat": ok}
        if sym.startswith("sigil_rsa_"):
            r["heap_peak"] = m.read_u32("SIGIL_HEAP_PEAK")
        results[name] = r
    return results, failures, img


def sizes(rsa_img, plain_img):
    """Flash and RAM of the RSA image against the plain bench image, and which crates grew."""
    a, b = breakdown(rsa_img), breakdown(plain_img)
    grew = sorted(((c, a[c]["flash"] - b.get(c, {}).get("flash", 0)) for c in a),
                  key=lambda x: -x[1])
    return {
        "flash": rsa_img.flash_bytes(), "static_ram": rsa_img.static_ram_bytes(),
        "plain_flash": plain_img.flash_bytes(), "plain_static_ram": plain_img.static_ram_bytes(),
        "heap_size": struct.unpack("<I", bytes(Machine(rsa_img, "cortex-m4", count_cycles=False)
                                              .read("SIGIL_HEAP_SIZE", 4)))[0],
        "grew": [(c, d) for c, d in grew if d > 0][:8],
    }


def measure(build, log, quick):
    """Builds the RSA images (and the plain ones for sizes), runs them; returns (results,
    failures). Quick: the Cortex-M4 RSA image's known answers only, no cycle counting."""
    out, failures = {}, []
    for variant, target, features, core, plain in VARIANTS:
        if quick and variant not in QUICK_VARIANTS:
            continue
        try:
            path = build(variant, target, features, "", "bench", "release")
        except Exception as e:  # noqa: BLE001  (a build failure is reported, not hidden)
            failures.append(f"{variant}: build failed: {e}")
            out[variant] = {"core": core, "build_error": str(e)}
            continue
        t = time.time()
        res, fails, img = run(path, core, not quick, not quick)
        failures += [f"{variant}: {f}" for f in fails]
        entry = {"core": core, "ops": res}
        if not quick:
            plain_path = build(plain, target, [], "", "bench", "release")
            entry["sizes"] = sizes(img, Image(plain_path))
        out[variant] = entry
        log(f"  {variant:22} {sum(r['kat'] for r in res.values())}/{len(res)} known answers in {time.time() - t:5.1f}s"
            + ("" if quick else ": " + ", ".join(f"{op} {r['cycles']:,}" for op, r in res.items())))
    return out, failures


# ---- the report ----

def cyc(res, variant, op):
    return (((res.get(variant) or {}).get("ops") or {}).get(op) or {}).get("cycles")


def t_e(cycles, bd):
    t = cycles / bd["hz"] * 1e3
    return t, t * bd["watts"]


def cell(cycles, bd):
    if cycles is None:
        return "–"
    t, e = t_e(cycles, bd)
    return f"{t:,.0f} ms / {e:,.1f} mJ"


def compositions():
    """(key, label, [(operation, count)]) of the client's side of each handshake; the
    symmetric part (key schedule, Finished, record protection, cookie exchange) is the
    measured PSK handshake."""
    return [
        ("rsa-kx-server", "RSA key transport, server authenticated (the seed's 'server authenticated')",
         [("dtls_psk_client", 1), ("rsa2048_verify", 1), ("rsa2048_encrypt", 1)]),
        ("rsa-kx-full", "RSA key transport, both authenticated (the seed's 'fully authenticated')",
         [("dtls_psk_client", 1), ("rsa2048_verify", 1), ("rsa2048_encrypt", 1), ("rsa2048_sign", 1)]),
        ("ecdhe-rsa-server", "ECDHE-RSA, server authenticated",
         [("dtls_psk_client", 1), ("rsa2048_verify", 2), ("keygen_p256", 1), ("ecdh_p256", 1)]),
        ("ecdhe-rsa-full", "ECDHE-RSA, both authenticated",
         [("dtls_psk_client", 1), ("rsa2048_verify", 2), ("keygen_p256", 1), ("ecdh_p256", 1), ("rsa2048_sign", 1)]),
    ]


def composed(res, variant, parts):
    total = 0
    for op, n in parts:
        c = cyc(res, variant, op)
        if c is None:
            return None
        total += n * c
    return total


def years(mj):
    return BATTERY_J * SHARE / (mj / 1e3) / PER_DAY / 365


def write(res, w):
    m4, m0 = "m4-rustcrypto-rsa", "m0plus-rustcrypto-rsa"
    w(HEADING)
    w("")
    w("The seed's handshakes are RSA-2048: X.509 certificates and RSA key transport (its Table 2, "
      "with the private key in a TPM), and in its Table 3 RSA in software for comparison with "
      "ECC (Table 4). Sigil's RSA is the RustCrypto `rsa` crate (0.9, `u64_digit`) behind "
      "sigil-crypto's `rsa` feature, off by default and never in a device build otherwise; "
      "here it is built into the bench image with the firmware's `rsa` feature "
      "(`firmware/src/bin/bench.rs`, module `rsa`; the operations are `eval/sigil-devbench`'s "
      "`rsa` module) with a 32 KiB heap from `embedded-alloc`, because the crate allocates. "
      "The key is a fixed RSA-2048 test key (`vectors/rsa2048-bench.key.der`, e = 65537): no key "
      "generation is measured, as the seed's Table 3 measures none. Every output is checked: the "
      "signature against pyca/cryptography's, the decrypted premaster secret against what pyca "
      "encrypted, the device's ciphertext by pyca decrypting it (`vectors/gen_rsa_kat.py`). "
      "The P-256 rows and DTLS handshakes beside them are measured in the same images. "
      "Cycles are the Cortex-M4 and Cortex-M0+ models' (zero wait states, as above); time and "
      f"energy at the seed's own board, OPAL (SAM3U) at 48 MHz, {OPAL48['watts'] * 1e3:.1f} mW, "
      f"and at 96 MHz, {OPAL96['watts'] * 1e3:.1f} mW (the Cortex-M4 model's cycles: the SAM3U is "
      f"a Cortex-M3, so these are lower bounds), and the Cortex-M0+ at {M0['hz'] / 1e6:.0f} MHz, "
      f"{M0['watts'] * 1e3:.0f} mW. The Cortex-M0+ image builds once the `rsa` crate's "
      "num-bigint-dig, whose lazy_static uses a `spin` Once, gets its atomics from "
      "portable-atomic in a critical section (the firmware does so for ARMv6-M only): ARMv6-M "
      "has no compare-and-swap, and without that `spin` 0.9 does not compile for "
      "thumbv6m-none-eabi (`no method named compare_exchange found for struct AtomicU8`). "
      "`scripts/bench-device --section rsa` measures this section "
      "alone and rewrites it (a few minutes: the Cortex-M0+ private-key operations run for "
      "hundreds of millions of cycles in the emulator); `scripts/bench-device --quick` checks "
      "only the Cortex-M4 RSA image's known answers, without counting.")
    w("")
    failed = [v for v, _, _, _, _ in VARIANTS if (res.get(v) or {}).get("build_error")]
    for v in failed:
        w(f"**{v}: not built.** {res[v]['build_error']}")
        w("")
    w("**The operations** (cycles, then time / CPU energy; stack and heap peak in bytes):")
    w("")
    w("| operation | Cortex-M4 cycles | OPAL @ 48 MHz | OPAL @ 96 MHz | Cortex-M0+ cycles | Cortex-M0+ @ 48 MHz | stack / heap peak (M4) |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for op, label in RSA_OPS + ECC_OPS[:4]:
        c4, c0 = cyc(res, m4, op), cyc(res, m0, op)
        r4 = ((res.get(m4) or {}).get("ops") or {}).get(op) or {}
        mem = f"{r4.get('stack', 0):,} / {r4['heap_peak']:,}" if "heap_peak" in r4 else (
            f"{r4['stack']:,} / –" if r4 else "–")
        w(f"| {label} | {'–' if c4 is None else f'{c4:,}'} | {cell(c4, OPAL48)} | {cell(c4, OPAL96)} | "
          f"{'–' if c0 is None else f'{c0:,}'} | {cell(c0, M0)} | {mem} |")
    w("")
    sign, verify, kg, ecdh = (cyc(res, m4, o) for o in ("rsa2048_sign", "rsa2048_verify", "keygen_p256", "ecdh_p256"))
    parse = cyc(res, m4, "rsa2048_public_key")
    s256, v256 = cyc(res, m4, "sign_p256"), cyc(res, m4, "verify_p256")
    if None not in (sign, verify, s256, v256, parse):
        w(f"On the Cortex-M4 an RSA-2048 signature costs {sign / s256:.1f}× an ECDSA P-256 "
          f"signature, and an RSA verification takes {v256 / verify:.1f}× fewer cycles than an "
          "ECDSA P-256 one: the "
          "public exponent 65537 takes 17 modular multiplications, the private key a full "
          "2048-bit exponentiation (two 1024-bit ones with the CRT). Each private-key operation "
          f"here includes parsing and checking the PKCS#1 key and its CRT values "
          f"({parse:,} cycles, the first row), which a device could do once and keep; the "
          "provider interface takes the key as DER on every call. The heap peak is the most "
          "of the 32 KiB heap in use at once during the operation (allocator bookkeeping "
          "included). The `rsa` crate's big integers use 64-bit digits here (`u64_digit`, "
          "sigil-crypto's setting), which a 32-bit core multiplies as four 32-bit products; "
          "the crate has no assembly for Cortex-M.")
        w("")

    w("**Beside the seed's Tables 3 and 4** (its figures, on its OPAL hardware: SAM3U Cortex-M3, "
      "software RSA-2048 and secp224r1 ECC ported from CyaSSL, no assembly; ours: RSA-2048 and "
      "P-256 on the Cortex-M4 model, converted at the same clocks and the page's energy model, "
      "which is the seed's own current and voltage):")
    w("")
    w("| operation | seed @ 48 MHz | Sigil @ 48 MHz | seed @ 96 MHz | Sigil @ 96 MHz |")
    w("|---|---:|---:|---:|---:|")
    pairs = [
        (SEED_T3[0], "rsa2048_verify", "RSA public key (ours: verify)"),
        (SEED_T3[1], "rsa2048_sign", "RSA private key, seed: high memory (ours: sign)"),
        (SEED_T3[2], None, "RSA private key, seed: low memory"),
    ]
    for (label, t48, e48, t96, e96), op, ours_label in pairs:
        c = cyc(res, m4, op) if op else None
        w(f"| {ours_label} | {t48:,} ms / {e48:,} mJ | {cell(c, OPAL48)} | {t96:,} ms / {e96:,} mJ | {cell(c, OPAL96)} |")
    rsa_hs = None if None in (sign, verify) else sign + 2 * verify
    t = SEED_T3[3]
    w(f"| handshake RSA total: 1 private + 2 public (ours: sign + 2 × verify) | {t[1]:,} ms / {t[2]} mJ | "
      f"{cell(rsa_hs, OPAL48)} | {t[3]:,} ms / {t[4]} mJ | {cell(rsa_hs, OPAL96)} |")
    for (label, t48, e48, t96, e96), op in zip(SEED_T4[:3], ("ecdh_p256", "sign_p256", "verify_p256")):
        c = cyc(res, m4, op)
        w(f"| {label} (seed secp224r1, ours P-256) | {t48:,} ms / {e48} mJ | {cell(c, OPAL48)} | {t96:,} ms / {e96} mJ | {cell(c, OPAL96)} |")
    ecc_hs = None if None in (ecdh, s256, v256) else ecdh + s256 + v256
    t = SEED_T4[3]
    w(f"| handshake ECC total: one of each | {t[1]:,} ms / {t[2]} mJ | {cell(ecc_hs, OPAL48)} | "
      f"{t[3]:,} ms / {t[4]} mJ | {cell(ecc_hs, OPAL96)} |")
    w("")
    if rsa_hs and ecc_hs:
        w(f"The seed's software RSA handshake costs {SEED_T3[3][1] / SEED_T4[3][1]:.1f}× its ECC one "
          f"at 48 MHz; here the same operation counts give {rsa_hs / ecc_hs:.1f}×. Sigil's RSA private "
          f"key operation is {SEED_T3[1][1] / (sign / OPAL48['hz'] * 1e3):.1f}× faster than the seed's "
          "'high memory' one at the same clock (a Cortex-M4 model without wait states against a "
          "real Cortex-M3 with flash wait states, and a different big-integer implementation: "
          "the factor is not the libraries' alone).")
        w("")

    sz = (res.get(m4) or {}).get("sizes")
    sz0 = (res.get(m0) or {}).get("sizes")
    if sz:
        w("**Flash and RAM** (linked bench images; the plain image already holds P-256, Ed25519, "
          "AES-CCM and the DTLS client, so the difference is what RSA adds on top of P-256):")
        w("")
        w("| image | flash | static RAM | of it the RSA heap | heap peak | deepest stack (RSA ops) | RAM in use (static − unused heap + stack) |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for label, s, v in (("Cortex-M4", sz, m4), ("Cortex-M0+", sz0, m0)):
            if not s:
                continue
            ops = (res.get(v) or {}).get("ops") or {}
            peak = max((r.get("heap_peak", 0) for r in ops.values()), default=0)
            stack = max((ops[o]["stack"] for o, _ in RSA_OPS if o in ops), default=0)
            w(f"| {label}, bench image with P-256 (no RSA) | {s['plain_flash']:,} B | {s['plain_static_ram']:,} B | – | – | – | – |")
            w(f"| {label}, the same with RSA | {s['flash']:,} B (+{s['flash'] - s['plain_flash']:,}) | "
              f"{s['static_ram']:,} B | {s['heap_size']:,} B | {peak:,} B | {stack:,} B | "
              f"{s['static_ram'] - s['heap_size'] + peak + stack:,} B |")
        w("")
        w("Where the Cortex-M4 image's flash grew (bytes, by crate): "
          + ", ".join(f"`{c}` +{d:,}" for c, d in sz["grew"]) + ". The seed's whole DTLS "
          "client with TPM drivers took 67 kB ROM and 20 kB RAM on OPAL (its Table 1).")
        w("")

    w("**Whole handshakes beside the seed's Table 2** (the client's side). The RSA rows are "
      "**composed, not measured as one run**: the measured PSK handshake (cookie exchange, key "
      "schedule, Finished, record protection: the symmetric part every suite has) plus the "
      "measured RSA and P-256 operations the client adds, all in the same image. RSA key "
      "transport (the seed's suite): verify the server certificate's signature, encrypt the "
      "premaster secret, and when the client is authenticated sign the CertificateVerify: one "
      "private and two public operations, as the seed counts. ECDHE-RSA (TLS 1.2's "
      "TLS_ECDHE_RSA_*): verify the certificate and the ServerKeyExchange signature, an "
      "ephemeral P-256 key pair and ECDH, and the client's signature when it is authenticated. "
      "One certificate per chain is verified (the server's, signed by a CA the client holds); "
      "X.509 parsing is not counted. The ECDHE-ECDSA rows are measured whole handshakes "
      "(`dtls_rpk_client`, `dtls_rpk_mutual_client`): raw public keys pinned by identity, so no "
      "certificate signature, and the mutual one derives the client's public key (one more k·G). "
      "The seed's figures are its TPM handshake's 'total minimum' (computation, radio TX and "
      "the TPM, idle excluded); ours are computation only, the radio is not counted.")
    w("")
    w("| handshake (client side) | seed Table 2 (TPM) | Cortex-M4 cycles | OPAL @ 48 MHz | OPAL @ 96 MHz | Cortex-M0+ @ 48 MHz |")
    w("|---|---:|---:|---:|---:|---:|")
    rows = []
    for key, label, parts in compositions():
        c4, c0 = composed(res, m4, parts), composed(res, m0, parts)
        seed = {"rsa-kx-server": f"{SEED_T2['server']} mJ", "rsa-kx-full": f"{SEED_T2['full']} mJ"}.get(key, "–")
        rows.append((key, label + " (composed)", seed, c4, c0))
    for op, label in (("dtls_rpk_client", "ECDHE-ECDSA, server authenticated (measured)"),
                      ("dtls_rpk_mutual_client", "ECDHE-ECDSA, both authenticated (measured)")):
        rows.append((op, label, "–", cyc(res, m4, op), cyc(res, m0, op)))
    for key, label, seed, c4, c0 in rows:
        w(f"| {label} | {seed} | {'–' if c4 is None else f'{c4:,}'} | {cell(c4, OPAL48)} | "
          f"{cell(c4, OPAL96)} | {cell(c0, M0)} |")
    w("")

    w(f"**The battery estimate, the seed's way**: two AA cells hold {BATTERY_J:,} J; "
      f"{SHARE:.0%} of it ({BATTERY_J * SHARE:,.0f} J) goes to handshakes, one a day; years = "
      f"{BATTERY_J * SHARE:,.0f} J / energy per handshake / 365. The seed's own rows use its "
      "Table 2 totals (its text rounds them to 'more than 8.5' and 'more than 14.5' years); ours "
      "use the composed and measured client computation above at OPAL @ 48 MHz, so they count "
      "no radio, no idle current and no battery self-discharge, which over decades would "
      "dominate: they say how small the handshake's computation is, not how long a node lives.")
    w("")
    w("| handshake | energy per handshake | years on 5 % of two AA cells |")
    w("|---|---:|---:|")
    w(f"| seed, RSA key transport, fully authenticated (TPM; Table 2) | {SEED_T2['full']} mJ | {years(SEED_T2['full']):,.1f} |")
    w(f"| seed, RSA key transport, server authenticated (TPM; Table 2) | {SEED_T2['server']} mJ | {years(SEED_T2['server']):,.1f} |")
    w(f"| seed, software RSA, 1 private + 2 public (Table 3) | {SEED_T3[3][2]} mJ | {years(SEED_T3[3][2]):,.1f} |")
    w(f"| seed, software ECC, one of each (Table 4) | {SEED_T4[3][2]} mJ | {years(SEED_T4[3][2]):,.1f} |")
    for key, label, seed, c4, c0 in rows:
        if c4 is None:
            continue
        e = t_e(c4, OPAL48)[1]
        w(f"| Sigil, {label}, Cortex-M4 model @ OPAL 48 MHz | {e:,.1f} mJ | {years(e):,.0f} |")
    w("")


def splice(report_path, res):
    """Rewrites this section in place; places it before the signing sensor's section (or at
    the end) when it is not there yet."""
    L = []
    write(res, L.append)
    new = "\n".join(L).rstrip("\n") + "\n\n"
    with open(report_path) as f:
        text = f.read()
    start = text.find(HEADING)
    if start < 0:
        start = text.find("## The complete signing sensor")
        start = len(text) if start < 0 else start
        end = start
    else:
        end = text.find("\n## ", start + 1)
        end = len(text) if end < 0 else end + 1
    text = text[:start] + new + text[end:]
    with open(report_path, "w") as f:
        f.write(text)
