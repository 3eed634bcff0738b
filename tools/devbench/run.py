#!/usr/bin/env python3
"""Measures what Sigil's security costs on microcontrollers, in emulated cores on this machine.

    scripts/bench-device            # everything; writes docs/device-costs.md and docs/img/
    scripts/bench-device --quick    # builds, known answers on every backend and target, sizes
                                    # (not the ECC comparison: its table setup takes minutes)
    scripts/bench-device --section table-one
                                    # only the DTLS client images (record layer against the
                                    # handshake as a CoAP resource): rewrites that section of
                                    # docs/device-costs.md in place
    scripts/bench-device --section psk
                                    # only the sensor with a pre-shared key (no public-key
                                    # code) beside the signing sensor: rewrites that section
    scripts/bench-device --section handshakes
                                    # only the whole DTLS handshakes per suite and optimisation
                                    # (the `ecc` bench images): rewrites that part of the
                                    # Tables II/III section in place

Steps: build the firmware images (firmware/) for each target and backend; run every operation
of the bench image inside unicorn (Cortex-M4 and Cortex-M0+ models) and check its output
against vectors/device-kat.json; count instructions, estimate cycles and measure the painted
stack; calibrate the cycle model against p256-cm4's published hardware cycles; run the
complete signing sensor image against an emulated server, and the same sensor in C
(examples/c/m4, libsigil.a linked with arm-none-eabi-gcc); run the DTLS client image with each
handshake carrier against the real sigil-dtls server on the host (tools/devbench/dtls_carriers.py)
and check the CoAP-carrier image links no record-layer flight code; take flash and RAM from the linked
images; build and run the AVR image under simavr where the toolchain allows; convert cycles to
time and energy on the seeds' boards; write the report.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from emulator import EmulationError, Image, Machine  # noqa: E402
from sizes import breakdown  # noqa: E402

FIRMWARE = os.path.join(ROOT, "firmware")
KAT = {
    **json.load(open(os.path.join(ROOT, "vectors", "device-kat.json")))["operations"],
    **json.load(open(os.path.join(ROOT, "vectors", "device-kat-dtls.json")))["operations"],
}

# (variant, rust target, cargo features, emulated core, extra RUSTFLAGS)
BENCH_VARIANTS = [
    ("m4-rustcrypto", "thumbv7em-none-eabihf", [], "cortex-m4", ""),
    ("m4-fast", "thumbv7em-none-eabihf", ["fast"], "cortex-m4", ""),
    ("m4-salty-ed25519", "thumbv7em-none-eabihf", ["salty-ed25519"], "cortex-m4", ""),
    ("m4-compact", "thumbv7em-none-eabihf", ["compact"], "cortex-m4", "--cfg aes_compact"),
    ("m0plus-rustcrypto", "thumbv6m-none-eabi", [], "cortex-m0plus", ""),
]
SENSOR_VARIANTS = [
    ("m4-rustcrypto", "thumbv7em-none-eabihf", [], "cortex-m4", ""),
    ("m4-ed25519-only", "thumbv7em-none-eabihf", ["-p256", "ed25519"], "cortex-m4", ""),
    ("m4-ed25519-compact", "thumbv7em-none-eabihf", ["-p256", "ed25519", "compact"], "cortex-m4", "--cfg aes_compact"),
    ("m4-fast", "thumbv7em-none-eabihf", ["fast"], "cortex-m4", ""),
    ("m4-compact", "thumbv7em-none-eabihf", ["compact"], "cortex-m4", "--cfg aes_compact"),
    ("m0plus-rustcrypto", "thumbv6m-none-eabi", [], "cortex-m0plus", ""),
]
# The ECC comparison (the `ecc` feature: IBPV and Shamir's trick, report section beside the
# DTLS-as-CoAP-resource paper's Tables II/III): (variant, target, features, core). Built and run
# in the full run only: filling the table takes n scalar multiplications, minutes in the emulator.
ECC_VARIANTS = [
    ("m4-rustcrypto-ecc", "thumbv7em-none-eabihf", ["ecc"], "cortex-m4"),
    ("m4-fast-ecc", "thumbv7em-none-eabihf", ["fast", "ecc"], "cortex-m4"),
    ("m0plus-rustcrypto-ecc", "thumbv6m-none-eabi", ["ecc"], "cortex-m0plus"),
]
# The variant whose table setup is measured; the others get a copy of its table (same p256
# build, same in-memory layout on both cores; every output below is checked on the host, so a
# table that did not carry over would fail).
ECC_SETUP_VARIANT = "m4-rustcrypto-ecc"
# RFC 5903 §8.1: the responder's private r, whose public value the device's ECDH uses.
RFC5903_R = "c6ef9c5d78ae012a011164acb397ce2088685d8f06bf9be0b283ab46476bee53"

# The C sensor (examples/c/m4): (variant, libsigil.a features, LTO, the Rust sensor variant
# with the same curves it is compared with). Cortex-M4F only.
C_SENSOR_VARIANTS = [
    ("c-m4", "ed25519,p256,panic-hook", True, "m4-rustcrypto"),
    ("c-m4-no-lto", "ed25519,p256,panic-hook", False, "m4-rustcrypto"),
]
C_COMPILER = "arm-none-eabi-gcc"


def log(msg):
    print(msg, flush=True)


def build(variant, target, features, rustflags, binary, profile):
    """Builds one image into the shared target directory (artifacts of different feature sets
    coexist there, so common dependencies compile once) and copies it to its variant's path."""
    target_dir = os.path.join(FIRMWARE, "target", "flags-" + (rustflags.replace(" ", "").replace("-", "") or "none"))
    cmd = ["cargo", "build", "--quiet", "--profile", profile, "--target", target,
           "--bin", binary, "--target-dir", target_dir]
    if any(f.startswith("-") for f in features):  # "-p256", "-default": no default features
        cmd.append("--no-default-features")
    features = [f for f in features if not f.startswith("-")]
    if features:
        cmd += ["--features", ",".join(features)]
    env = dict(os.environ)
    base = "-C link-arg=-Tlink.x"
    env["RUSTFLAGS"] = (base + " " + rustflags).strip()
    t = time.time()
    subprocess.run(cmd, cwd=FIRMWARE, env=env, check=True)
    log(f"  built {binary:6} {variant:18} ({profile}) in {time.time() - t:5.1f}s")
    dest = os.path.join(FIRMWARE, "target", "variants", variant)
    os.makedirs(dest, exist_ok=True)
    shutil.copy2(os.path.join(target_dir, target, profile, binary), os.path.join(dest, binary))
    return os.path.join(dest, binary)


def build_c_sensor(variant, features, lto):
    """Builds libsigil.a and the C sensor image with arm-none-eabi-gcc (examples/c/m4/Makefile);
    returns the image and its linker map."""
    out = os.path.join(ROOT, "target", "c-m4-images", variant)
    t = time.time()
    subprocess.run(["make", "--quiet", "-C", os.path.join(ROOT, "examples", "c", "m4"),
                    f"FEATURES={features}", f"LTO={1 if lto else 0}", f"OUT={out}"],
                   check=True, stdout=subprocess.DEVNULL)
    log(f"  built C sensor {variant:14} (libsigil.a {features}{'' if lto else ', no LTO'}) in {time.time() - t:5.1f}s")
    return os.path.join(out, "sensor_m4.elf"), os.path.join(out, "sensor_m4.map")


def run_bench(path, core, count):
    img = Image(path)
    m = Machine(img, core, count_cycles=count)
    results = {}
    failures = []
    for name, addr in img.ops():
        try:
            n, insns, cycles, stack = m.call(addr)
        except EmulationError as e:
            failures.append(f"{name}: {e}")
            continue
        got = m.read("SIGIL_OUT", n).hex()
        want = KAT[name]["output"]
        if got != want:
            failures.append(f"{name}: output {got[:32]}... != known answer {want[:32]}...")
        results[name] = {"instructions": insns, "cycles": cycles, "stack": stack, "kat": got == want}
    return results, failures, m.patched


def calibrate(path):
    """p256-cm4's entry points in the emulator vs. its published hardware cycle counts."""
    img = Image(path)
    m = Machine(img, "cortex-m4", count_cycles=True)
    out = {}
    _, i, c, s = m.call("sigil_cal_keygen")
    out["keygen"] = (i, c, s)
    m.write("SIGIL_CAL_KEY", m.read("SIGIL_CAL", 64))
    for op in ("sign", "verify", "ecdh"):
        ok, i, c, s = m.call(f"sigil_cal_{op}")
        if ok != 1:
            raise SystemExit(f"calibration: p256-cm4 {op} failed in the emulator")
        out[op] = (i, c, s)
    return out


def ecc_check(name, out, n):
    """Checks an ECC comparison output on the host with pyca/cryptography; returns None or why
    it is wrong."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
    curve = ec.SECP256R1()

    def public_of(k):
        return ec.derive_private_key(int.from_bytes(k, "big"), curve).public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    if name.startswith("verify_"):
        return None if out == b"\x01" else f"verification output {out.hex()}"
    if name == "ibpv_setup":
        return None if out == n.to_bytes(4, "little") else f"setup output {out.hex()}"
    if name.startswith("ibpv_pair"):
        return None if len(out) == 97 and public_of(out[:32]) == out[32:] else "r·G is not R"
    if name == "ibpv_sign":
        pk = ec.EllipticCurvePublicKey.from_encoded_point(curve, bytes.fromhex(KAT["keygen_p256"]["output"]))
        sig = encode_dss_signature(int.from_bytes(out[:32], "big"), int.from_bytes(out[32:64], "big"))
        try:
            pk.verify(sig, b"sample", ec.ECDSA(hashes.SHA256()))
        except Exception:
            return "the signature does not verify"
        return None
    if name in ("ecdh_ephemeral", "ibpv_ecdh"):
        r = ec.derive_private_key(int(RFC5903_R, 16), curve)
        ours = ec.EllipticCurvePublicKey.from_encoded_point(curve, out[:65])
        return None if r.exchange(ec.ECDH(), ours) == out[65:97] else "the two sides do not agree"
    return f"no check for {name}"


def run_ecc(path, core, table=None):
    """Runs the ECC comparison operations with cycle counting. The table setup is measured when
    `table` is None, else `table` (bytes of another run's filled table) is copied in."""
    img = Image(path)
    m = Machine(img, core, count_cycles=True)
    sym = img.symbols["SIGIL_IBPV_TABLE"]
    n, l, table_bytes, in_memory = struct.unpack("<4I", m.read("SIGIL_IBPV_PARAMS", 16))
    results, failures = {}, []
    if table is None:
        names = ["ibpv_setup"]
    else:
        m.uc.mem_write(sym, table)
        names = []
    names += [name for name, _ in img.ops("sigil_ecc_") if name != "ibpv_setup"]
    for name in names:
        try:
            k, insns, cycles, stack = m.call("sigil_ecc_" + name, limit=10_000_000_000)
        except EmulationError as e:
            failures.append(f"ecc {name}: {e}")
            continue
        why = ecc_check(name, m.read("SIGIL_OUT", k), n)
        if why:
            failures.append(f"ecc {name}: {why}")
        results[name] = {"instructions": insns, "cycles": cycles, "stack": stack, "checked": why is None}
    params = {"n": n, "l": l, "table_bytes": table_bytes, "in_memory": in_memory,
              "static_ram": img.static_ram_bytes(), "flash": img.flash_bytes()}
    return results, failures, params, bytes(m.uc.mem_read(sym, in_memory))


def run_handshakes(path, core, table=None):
    """Whole DTLS client handshakes per suite (tools/devbench/handshakes.py) in an `ecc` bench
    image, with cycle counting, and what the IBPV composition needs: P-256 key generation and
    one table pair. The table is `table` (another run's, copied in) or filled here first
    without counting; every output is checked (known answers, or on the host). Returns the
    results, the failures and the table (for the next image: same `p256`, same layout)."""
    import handshakes
    img = Image(path)
    sym = img.symbols["SIGIL_IBPV_TABLE"]
    failures, results = [], {}
    if table is None:
        # Filled in a machine of its own: blocks translated while no hook counted would stay
        # uncounted in the measuring machine's translation cache.
        fill = Machine(img, core, count_cycles=False)
        n, _, _, in_memory = struct.unpack("<4I", fill.read("SIGIL_IBPV_PARAMS", 16))
        k = fill.call("sigil_ecc_ibpv_setup", limit=10_000_000_000)[0]
        why = ecc_check("ibpv_setup", fill.read("SIGIL_OUT", k), n)
        if why:
            return {}, [f"handshakes ibpv_setup: {why}"], None
        table = bytes(fill.uc.mem_read(sym, in_memory))
    m = Machine(img, core, count_cycles=True)
    n = struct.unpack("<4I", m.read("SIGIL_IBPV_PARAMS", 16))[0]
    m.uc.mem_write(sym, table)
    names = [(op, "sigil_op_" + op) for op, _, _ in handshakes.SUITES]
    names += [(op, "sigil_op_" + op) for op in handshakes.EXTRA_OPS]
    names.append((handshakes.IBPV_PAIR, "sigil_ecc_" + handshakes.IBPV_PAIR))
    for name, sym in names:
        try:
            k, insns, cycles, stack = m.call(sym)
        except EmulationError as e:
            failures.append(f"{name}: {e}")
            continue
        out = m.read("SIGIL_OUT", k)
        if sym.startswith("sigil_op_"):
            why = None if out.hex() == KAT[name]["output"] else f"output {out.hex()[:32]}... is not the known answer"
        else:
            why = ecc_check(name, out, n)
        if why:
            failures.append(f"{name}: {why}")
        results[name] = {"instructions": insns, "cycles": cycles, "stack": stack, "checked": why is None}
    return results, failures, table


def section_handshakes(args):
    """`--section handshakes`: builds the `ecc` bench images, measures the handshakes and
    rewrites their part of the report."""
    import handshakes
    log("== whole DTLS handshakes per suite and optimisation (the `ecc` bench images)")
    hs, failures, table = {}, [], None
    for variant, target, features, core in ECC_VARIANTS:
        path = build(variant, target, features, "", "bench", "release")
        t = time.time()
        res, fails, table = run_handshakes(path, core, table)
        failures += [f"{variant}: {f}" for f in fails]
        hs[variant] = {"ops": res, "core": core}
        log(f"  {variant:22} {sum(r['checked'] for r in res.values())}/{len(res)} checked in {time.time() - t:5.1f}s: "
            + ", ".join(f"{op} {r['cycles']:,}" for op, r in res.items()))
    out = os.path.join(os.path.dirname(args.json), "handshakes.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(hs, open(out, "w"), indent=1)
    log(f"== results in {os.path.relpath(out, ROOT)}")
    if failures:
        log("FAILED:")
        for f in failures:
            log("  " + f)
        sys.exit(1)
    previous = os.path.join(os.path.dirname(args.report), "device-cycles.json")
    ops_table = json.load(open(previous))["cycles"] if os.path.exists(previous) else {}
    handshakes.splice(args.report, hs, ops_table)
    log(f"== part rewritten in {os.path.relpath(args.report, ROOT)}")


def section_rsa(args):
    """`--section rsa`: builds the `rsa` bench images, measures them and rewrites their section
    of the report (with --quick: the Cortex-M4 image's known answers only, no report)."""
    import rsa_section
    log("== RSA-2048 beside P-256 (the `rsa` bench images)")
    res, failures = rsa_section.measure(build, log, args.quick)
    out = os.path.join(os.path.dirname(args.json), "rsa.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(res, open(out, "w"), indent=1, default=list)
    log(f"== results in {os.path.relpath(out, ROOT)}")
    if failures:
        log("FAILED:")
        for f in failures:
            log("  " + f)
        sys.exit(1)
    if not args.quick:
        rsa_section.splice(args.report, res)
        log(f"== section rewritten in {os.path.relpath(args.report, ROOT)}")


def section_psk(args):
    """`--section psk`: builds the PSK sensor images and the signing sensor images they are
    compared with, runs and checks them, and rewrites their section of the report (with
    --quick: the PSK images and their checks only, no report)."""
    import psk_section
    log("== the sensor with only a pre-shared key (psk_sensor) beside the signing sensor")
    res, failures = psk_section.measure(build, run_sensor, SENSOR_VARIANTS, log, args.quick)
    out = os.path.join(os.path.dirname(args.json), "psk.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(res, open(out, "w"), indent=1, default=list)
    log(f"== results in {os.path.relpath(out, ROOT)}")
    if failures:
        log("FAILED:")
        for f in failures:
            log("  " + f)
        sys.exit(1)
    if not args.quick:
        psk_section.splice(args.report, res)
        log(f"== section rewritten in {os.path.relpath(args.report, ROOT)}")


def coap_answer(datagram):
    """The emulated server: 2.01 with Location-Path rd/7 for the registration, 2.04 for a
    reading, piggybacked in an ACK (RFC 7252 §5.2.1)."""
    tkl = datagram[0] & 0x0F
    mid = datagram[2:4]
    token = datagram[4:4 + tkl]
    code = datagram[1]
    if code == 0x02:  # POST /rd
        return bytes([0x60 | tkl, 0x41]) + mid + token + b"\x82rd\x017"
    return bytes([0x60 | tkl, 0x44]) + mid + token


def run_sensor(path, core, chain=False):
    img = Image(path)
    m = Machine(img, core, count_cycles=True)
    sent = []
    at = []  # (instructions, cycles) when each datagram reaches the radio

    def on_transmit(machine):
        from unicorn import arm_const as A
        ptr = machine.uc.reg_read(A.UC_ARM_REG_R0)
        n = machine.uc.reg_read(A.UC_ARM_REG_R1)
        d = bytes(machine.uc.mem_read(ptr, n))
        sent.append(d)
        at.append((machine.progress["insns"], machine.progress["cycles"]))
        answer = coap_answer(d)
        machine.write("SIGIL_RX", answer)
        machine.write("SIGIL_RX_LEN", struct.pack("<I", len(answer)))

    def on_halt(machine):
        machine.halt()

    m.intercepts[img.symbols["sigil_radio_transmit"] & ~1] = on_transmit
    m.intercepts[img.symbols["sigil_halt"] & ~1] = on_halt
    from unicorn import arm_const as A
    code, insns, cycles, stack = m.call("main")
    code = m.uc.reg_read(A.UC_ARM_REG_R0)
    acked = m.read_u32("SIGIL_ACKED")
    deepest = None
    if chain:
        # A second run for the deepest stack point: what it sends is not this run's.
        n = len(sent)
        fresh = Machine(img, core, count_cycles=False)
        fresh.intercepts = {a: f for a, f in m.intercepts.items()}
        deepest = fresh.deepest_chain("main")
        del sent[n:], at[n:]
    # The first datagram is the registration (boot, key generation and identity before it);
    # each later one a reading. A reading's cost: from one reading leaving to the next (the
    # previous one's acknowledgement, then build, sign and send), averaged.
    boot = per_reading = None
    if at:
        boot = {"instructions": at[0][0], "cycles": at[0][1]}
    if len(at) >= 3:
        k = len(at) - 2
        per_reading = {"instructions": (at[-1][0] - at[1][0]) // k, "cycles": (at[-1][1] - at[1][1]) // k}
    return {
        "deepest": deepest,
        "halt_code": code, "acked": acked, "datagrams": [len(d) for d in sent],
        "sent": [d.hex() for d in sent], "boot": boot, "per_reading": per_reading,
        "instructions": insns, "cycles": cycles, "stack": stack,
        "flash": img.flash_bytes(), "static_ram": img.static_ram_bytes(),
        "ram_with_stack": img.static_ram_bytes() + stack,
        "crates": breakdown(img),
    }


def c_sensors(failures):
    """Builds and runs the C sensor images. Without arm-none-eabi-gcc they are skipped with the
    reason (a failure under SIGIL_REQUIRE_ALL, which scripts/test-all sets after
    scripts/install-test-deps has installed it)."""
    import linkmap
    if shutil.which(C_COMPILER) is None:
        why = (f"{C_COMPILER} not found (scripts/install-test-deps installs gcc-arm-none-eabi "
               "and libnewlib-arm-none-eabi)")
        log(f"  skipped: {why}")
        if os.environ.get("SIGIL_REQUIRE_ALL") or os.environ.get("CI"):
            failures.append(f"C sensor: {why}")
        return {"skipped": why}
    out = {}
    for variant, features, lto, rust in C_SENSOR_VARIANTS:
        try:
            path, map_path = build_c_sensor(variant, features, lto)
            r = run_sensor(path, "cortex-m4")
        except (subprocess.CalledProcessError, EmulationError) as e:
            failures.append(f"C sensor {variant}: {e}")
            continue
        r.update(features=features, lto=lto, compare=rust, inputs=linkmap.by_input(map_path))
        out[variant] = r
        if r["halt_code"] != 0 or r["acked"] != 3:
            failures.append(f"C sensor {variant}: halted with {r['halt_code']}, {r['acked']}/3 readings acknowledged")
        log(f"  {variant:18} flash {r['flash']:6} B, RAM {r['static_ram']} B static + {r['stack']} B stack,"
            f" {r['acked']}/3 readings acknowledged, {r['instructions']:,} instructions")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="known answers and sizes only (no cycle model, no report)")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "devbench", "results.json"))
    ap.add_argument("--report", default=os.path.join(ROOT, "docs", "device-costs.md"))
    ap.add_argument("--section", choices=["table-one", "handshakes", "rsa", "psk"],
                    help="measure one section only and rewrite it in the existing report")
    args = ap.parse_args()
    count = not args.quick
    results = {"bench": {}, "sensor": {}, "c_sensor": {}, "calibration": None, "avr": None, "ecc": {},
               "dtls_carriers": {}, "handshakes": {}, "rsa": {}, "psk": {}}
    failures = []

    if args.section == "handshakes":
        return section_handshakes(args)
    if args.section == "rsa":
        return section_rsa(args)
    if args.section == "psk":
        return section_psk(args)

    import dtls_carriers
    if args.section == "table-one":
        log("== DTLS client images: record layer against the handshake as a CoAP resource")
        peer = dtls_carriers.peer_executable(ROOT, log)
        results["dtls_carriers"], failures = dtls_carriers.measure(build, peer, count, log)
        out = os.path.join(os.path.dirname(args.json), "dtls-carriers.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        json.dump(results["dtls_carriers"], open(out, "w"), indent=1, default=list)
        log(f"== results in {os.path.relpath(out, ROOT)}")
        if failures:
            log("FAILED:")
            for f in failures:
                log("  " + f)
            sys.exit(1)
        if not args.quick:
            dtls_carriers.splice(args.report, results)
            log(f"== section rewritten in {os.path.relpath(args.report, ROOT)}")
        return

    log("== building firmware images")
    bench_paths = {v: build(v, t, f, r, "bench", "release") for v, t, f, _, r in BENCH_VARIANTS}
    sensor_paths = {v: build(v, t, f, r, "sensor", "size") for v, t, f, _, r in SENSOR_VARIANTS}

    log("== operations in the emulated cores" + (" (known answers only)" if args.quick else ""))
    for variant, _, _, core, _ in BENCH_VARIANTS:
        t = time.time()
        res, fails, patched = run_bench(bench_paths[variant], core, count)
        results["bench"][variant] = res
        failures += [f"{variant}: {f}" for f in fails]
        log(f"  {variant:18} {core:14} {sum(r['kat'] for r in res.values())}/{len(KAT)} known answers"
            f" in {time.time() - t:5.1f}s" + (f" ({len(patched)} single-register LDM rewritten)" if patched else ""))

    log("== complete signing sensor images")
    for variant, _, _, core, _ in SENSOR_VARIANTS:
        try:
            r = run_sensor(sensor_paths[variant], core, chain=count and variant == "m4-ed25519-compact")
        except EmulationError as e:
            failures.append(f"sensor {variant}: {e}")
            continue
        results["sensor"][variant] = r
        if r["halt_code"] != 0 or r["acked"] != 3:
            failures.append(f"sensor {variant}: halted with {r['halt_code']}, {r['acked']}/3 readings acknowledged")
        log(f"  {variant:18} flash {r['flash']:6} B, RAM {r['static_ram']} B static + {r['stack']} B stack,"
            f" {r['acked']}/3 readings acknowledged, {r['instructions']:,} instructions")

    import psk_section
    log("== the sensor with only a pre-shared key (psk_sensor): no public-key code")
    results["psk"], fails = psk_section.measure(build, run_sensor, SENSOR_VARIANTS, log, args.quick,
                                                signing=results["sensor"])
    failures += fails

    log("== the C sensor image (libsigil.a, arm-none-eabi-gcc)")
    results["c_sensor"] = c_sensors(failures)

    log("== DTLS client images: record layer against the handshake as a CoAP resource")
    peer = dtls_carriers.peer_executable(ROOT, log)
    results["dtls_carriers"], fails = dtls_carriers.measure(build, peer, count, log)
    failures += fails

    if count:
        log("== calibrating the Cortex-M4 model against p256-cm4")
        results["calibration"] = calibrate(bench_paths["m4-fast"])
        for op, (i, c, s) in results["calibration"].items():
            log(f"  {op:7} {i:9,} instructions  {c:9,} cycles (model)  stack {s} B")

        log("== ECC comparison: IBPV and Shamir's trick (P-256)")
        table = None
        for variant, target, features, core in sorted(ECC_VARIANTS, key=lambda v: v[0] != ECC_SETUP_VARIANT):
            path = build(variant, target, features, "", "bench", "release")
            t = time.time()
            res, fails, params, filled = run_ecc(path, core, table)
            table = table or filled
            failures += [f"{variant}: {f}" for f in fails]
            results["ecc"][variant] = {"ops": res, "params": params, "core": core}
            log(f"  {variant:22} {sum(r['checked'] for r in res.values())}/{len(res)} checked on the host"
                f" in {time.time() - t:5.1f}s (n={params['n']}, l={params['l']}, table {params['in_memory']} B in RAM)")
            res, fails, _ = run_handshakes(path, core, table)
            failures += [f"{variant}: handshakes: {f}" for f in fails]
            results["handshakes"][variant] = {"ops": res, "core": core}

    import rsa_section
    log("== RSA-2048 beside P-256 (the `rsa` bench images)" + ("; Cortex-M4 known answers only" if args.quick else ""))
    results["rsa"], fails = rsa_section.measure(build, log, args.quick)
    failures += fails

    import avr
    log("== AVR (ATmega2560) under simavr")
    results["avr"] = avr.run(ROOT, quick=args.quick, log=log)
    failures += results["avr"].get("failures", [])

    if args.quick:
        # The page is written only by a full run: its sensor sizes must still be the build's.
        import page_check
        failures += page_check.check(args.report, results)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    json.dump(results, open(args.json, "w"), indent=1, default=list)
    log(f"== results in {os.path.relpath(args.json, ROOT)}")
    if failures:
        log("FAILED:")
        for f in failures:
            log("  " + f)
        sys.exit(1)
    if not args.quick:
        import report
        report.write(results, args.report)
        rsa_section.splice(args.report, results["rsa"])
        psk_section.splice(args.report, results["psk"])
        log(f"== report in {os.path.relpath(args.report, ROOT)}")
    log("all known answers match on every target and backend")


if __name__ == "__main__":
    main()
