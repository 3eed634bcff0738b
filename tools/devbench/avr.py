"""The ATmega2560 (RFC 8387 §6's Arduino Mega) under simavr: build what Rust builds correctly,
run it cycle-exact, check every output against the known answers, and record plainly what
cannot be built and why."""
import json
import os
import re
import subprocess
import time

KAT = None
# The image's operations in the order firmware/avr/src/main.rs runs them, per feature.
BASE_OPS = ["sha256_256", "ccm8_16", "ccm8_64", "ccm8_256", "identity"]
FEATURE_OPS = {
    "ed25519": ["keygen_ed25519", "sign_ed25519", "verify_ed25519"],
    "x25519": ["x25519"],
    "p256": ["keygen_p256", "sign_p256", "verify_p256", "ecdh_p256"],
}
# What is measured, and at which optimisation levels (correctness is checked at each).
MEASURED = ["x25519"]
OPT_LEVELS = ["s", "z", "2", "3"]


def _build(avr_dir, features, opt):
    env = dict(os.environ)
    env["RUSTFLAGS"] = "-C target-cpu=atmega2560"
    env["CARGO_PROFILE_RELEASE_OPT_LEVEL"] = opt
    target_dir = os.path.join(avr_dir, "target", "opt-" + opt + "-" + "-".join(features or ["base"]))
    cmd = ["cargo", "+nightly", "build", "--quiet", "--release", "-Z", "build-std=core",
           "--target", "avr-none", "--target-dir", target_dir]
    if features:
        cmd += ["--features", ",".join(features)]
    p = subprocess.run(cmd, cwd=avr_dir, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
        return None, errors[0] if errors else p.stderr.strip().splitlines()[-1]
    return os.path.join(target_dir, "avr-none", "release", "sigil-firmware-avr.elf"), None


def _symbols(elf):
    out = subprocess.run(["avr-nm", elf], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms


def _size(elf):
    out = subprocess.run(["avr-size", elf], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
    return {"flash": text + data, "static_ram": data + bss}


def _explain(error):
    if "32-bit and 64-bit platforms only" in error:
        return ("crypto-bigint (under p256) refuses 16-bit targets: "
                "`compile_error!(\"this crate builds on 32-bit and 64-bit platforms only\")`")
    m = re.search(r"value evaluated as (\d+) is out of range", error)
    if m:
        return (f"the image outgrows 64 KiB of program memory (a fixup evaluated to {m.group(1)}): "
                "LLVM's AVR backend emits 16-bit program-memory addresses and no EIND "
                "trampolines, so code past 64 KiB cannot be reached")
    return error


def run(root, quick, log):
    global KAT
    KAT = json.load(open(os.path.join(root, "vectors", "device-kat.json")))["operations"]
    avr_dir = os.path.join(root, "firmware", "avr")
    out_dir = os.path.join(root, "target", "devbench")
    os.makedirs(out_dir, exist_ok=True)
    harness = os.path.join(out_dir, "avr_harness")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "avr_harness.c")
    result = {"failures": [], "levels": {}, "not_built": {}}
    try:
        subprocess.run(["gcc", "-O2", "-o", harness, src, "-lsimavr"], check=True,
                       capture_output=True, text=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        result["failures"].append(f"avr: cannot build the simavr harness: {getattr(e, 'stderr', e)}")
        return result
    for opt in OPT_LEVELS if not quick else OPT_LEVELS[:1]:
        t = time.time()
        elf, err = _build(avr_dir, MEASURED, opt)
        if elf is None:
            result["not_built"][f"x25519 at opt-level {opt}"] = _explain(err)
            log(f"  ATmega2560 opt-level {opt}: not built: {_explain(err)}")
            if opt == OPT_LEVELS[0]:
                result["failures"].append(f"avr opt-level {opt}: build failed: {err}")
            continue
        syms = _symbols(elf)
        p = subprocess.run(
            [harness, elf, hex(syms["sigil_mark"]), hex(syms["SIGIL_OUT"] & 0xFFFF),
             hex(syms["SIGIL_OUT_LEN"] & 0xFFFF), hex(syms["__bss_end"] & 0xFFFF)],
            capture_output=True, text=True)
        if p.returncode != 0:
            result["failures"].append(f"avr opt-level {opt}: simavr: {p.stderr.strip()}")
            continue
        names = BASE_OPS + [op for f in MEASURED for op in FEATURE_OPS[f]]
        ops = {}
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue  # simavr's own loading messages
            r = json.loads(line)
            name = names[r["op"]]
            r["kat"] = r.pop("output") == KAT[name]["output"]
            if not r["kat"]:
                result["failures"].append(f"avr opt-level {opt}: {name} gives a wrong answer")
            ops[name] = r
        if len(ops) != len(names):
            result["failures"].append(f"avr opt-level {opt}: {len(ops)}/{len(names)} operations ran")
        result["levels"][opt] = {"ops": ops, **_size(elf)}
        log(f"  ATmega2560 opt-level {opt}: {sum(r['kat'] for r in ops.values())}/{len(names)} "
            f"known answers, {_size(elf)['flash']} B flash, in {time.time() - t:.1f}s")
    if not quick:
        for feature in ("ed25519", "p256"):
            elf, err = _build(avr_dir, [feature], "s")
            if elf is not None:
                result["failures"].append(f"avr: {feature} now builds; measure it (avr.MEASURED)")
            else:
                result["not_built"][feature] = _explain(err)
                log(f"  {feature}: not built: {result['not_built'][feature]}")
    return result
