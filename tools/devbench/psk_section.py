"""The sensor with only a pre-shared key beside the signing sensor (a section of
docs/device-costs.md).

`firmware/src/bin/psk_sensor.rs` publishes three Confirmable readings through sigil-device's
`PskNode`, built with the firmware's `psk-only` feature and without its default features: the
backend then has SHA-256, HMAC and AES-CCM and no curve at all. Every PSK image is checked:
it must halt normally with 3/3 readings acknowledged, its symbol table (arm-none-eabi-nm) must
name nothing of P-256, ECDSA, Ed25519 or Curve25519, and each MACed reading must verify on the
host under the reading key derived from the image's PSK, with sequence numbers 1, 2, 3. The
signing sensor images it is compared with are built and run in the same run, the same way
(`run_sensor`: the emulated server, cycles from one reading leaving the radio to the next).

    scripts/bench-device --section psk   # measures these alone, rewrites this section
    scripts/bench-device --quick         # builds the PSK images, runs and checks them
"""
import hashlib
import hmac
import os
import re
import shutil
import subprocess

import cbor2

from emulator import EmulationError, Image
from sizes import breakdown

HEADING = "## A sensor with only a pre-shared key: no public-key code"

# (variant, target, features, core, mode). `-default`: without the default features.
VARIANTS = [
    ("m4-psk", "thumbv7em-none-eabihf", ["-default", "psk-only"], "cortex-m4", "mac"),
    ("m4-psk-session", "thumbv7em-none-eabihf", ["-default", "psk-session"], "cortex-m4", "session"),
    ("m0plus-psk", "thumbv6m-none-eabi", ["-default", "psk-only"], "cortex-m0plus", "mac"),
]
# The signing sensor images compared with (run.SENSOR_VARIANTS names), per core.
SIGNING = ["m4-rustcrypto", "m4-ed25519-only", "m0plus-rustcrypto"]
READINGS = 3
# What the image is provisioned with (firmware/src/bin/psk_sensor.rs).
IDENTITY = b"sigil-psk-node01"
PSK = b"sigil-psk-secret"
READING_KEY_INFO = b"sigil-reading-mac-key-v1\0"
# Symbol names (mangled or not) that only public-key code has.
PUBLIC_KEY_SYMBOLS = re.compile(
    r"p256|ecdsa|ed25519|curve25519|x25519|salty|elliptic_?curve|primeorder|rfc6979|scalar_?mul",
    re.IGNORECASE)
# A DTLS 1.2 record around a datagram in a PSK-CCM8 session: 13-byte header, 8-byte explicit
# nonce, 8-byte tag (RFC 6347 §4.1, RFC 6655).
DTLS_CCM8_OVERHEAD = 13 + 8 + 8


def nm_symbols(path):
    """The image's symbol names, from arm-none-eabi-nm (llvm-nm where that is missing)."""
    tool = shutil.which("arm-none-eabi-nm") or shutil.which("llvm-nm")
    if tool is None:
        return sorted(Image(path).symbols)
    out = subprocess.run([tool, path], check=True, capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def public_key_symbols(path):
    return [s for s in nm_symbols(path) if PUBLIC_KEY_SYMBOLS.search(s)]


def coap(datagram):
    """(code, options as [(number, value)], payload) of a CoAP datagram (RFC 7252 §3)."""
    tkl = datagram[0] & 0x0F
    i, number, options = 4 + tkl, 0, []
    while i < len(datagram) and datagram[i] != 0xFF:
        delta, length = datagram[i] >> 4, datagram[i] & 0x0F
        i += 1
        ext = []
        for v in (delta, length):
            if v == 13:
                ext.append(datagram[i] + 13)
                i += 1
            elif v == 14:
                ext.append(int.from_bytes(datagram[i:i + 2], "big") + 269)
                i += 2
            else:
                ext.append(v)
        number += ext[0]
        options.append((number, datagram[i:i + ext[1]]))
        i += ext[1]
    payload = datagram[i + 1:] if i < len(datagram) else b""
    return datagram[1], options, payload


def content_format(options):
    v = [val for n, val in options if n == 12]
    return int.from_bytes(v[0], "big") if v else None


def reading_key():
    prk = hmac.new(b"", PSK, hashlib.sha256).digest()
    return hmac.new(prk, READING_KEY_INFO + IDENTITY + b"\x01", hashlib.sha256).digest()


def cose_parts(payload):
    obj = cbor2.loads(payload)
    return obj.value if isinstance(obj, cbor2.CBORTag) else obj


def check_mac(payload, seq):
    """Verifies a MACed reading (COSE_Mac0, HMAC 256/64) on the host; returns the SenML pack."""
    protected, _unprotected, senml, tag = cose_parts(payload)
    headers = cbor2.loads(protected)
    if headers.get(1) != 4 or headers.get(4) != IDENTITY:
        raise ValueError(f"protected header {headers!r}")
    if headers.get(-65537) != seq:  # Sigil's `seq` header (docs/wire-formats.md)
        raise ValueError(f"sequence number {headers.get(-65537)}, expected {seq}")
    mac_structure = cbor2.dumps(["MAC0", protected, b"", senml])
    want = hmac.new(reading_key(), mac_structure, hashlib.sha256).digest()[:8]
    if not hmac.compare_digest(want, tag):
        raise ValueError("tag does not verify under the derived reading key")
    return senml


def wire(datagram, kind):
    """The bytes of one reading on the wire: datagram, CoAP part, payload, SenML inside it."""
    _, options, payload = coap(datagram)
    senml = payload if kind == "session" else cose_parts(payload)[2]
    return {"datagram": len(datagram), "coap": len(datagram) - len(payload),
            "payload": len(payload), "senml": len(senml), "cf": content_format(options)}


def check_psk(r, mode):
    """The PSK image's readings: path, content-format, MAC under the derived key, numbers."""
    fails = []
    readings = [bytes.fromhex(d) for d in r["sent"][1:]]
    code, options, payload = coap(bytes.fromhex(r["sent"][0]))
    want = f'</m>;rt="sigil.env";ct={17 if mode == "mac" else 112}'.encode()
    if code != 0x02 or payload != want:
        fails.append(f"registration: code {code:#x}, payload {payload!r}")
    if len(readings) != READINGS:
        fails.append(f"{len(readings)} readings sent")
    for seq, d in enumerate(readings, 1):
        code, options, payload = coap(d)
        path = [v for n, v in options if n == 11]
        cf = content_format(options)
        if code != 0x03 or path != [b"ps", b"7", b"m"]:
            fails.append(f"reading {seq}: code {code:#x}, path {path}")
        try:
            if mode == "mac":
                if cf != 17:
                    raise ValueError(f"content-format {cf}")
                check_mac(payload, seq)
            else:
                if cf != 112 or not isinstance(cbor2.loads(payload), list):
                    raise ValueError(f"content-format {cf}, not a SenML pack")
        except (ValueError, cbor2.CBORDecodeError) as e:
            fails.append(f"reading {seq}: {e}")
    return fails


def measure(build, run_sensor, sensor_variants, log, quick, signing=None):
    """Builds and runs the PSK images (and, unless `signing` holds the signing sensor's results
    of this run already, the signing images compared with). Returns (results, failures)."""
    res, failures = {"psk": {}, "signing": {}}, []
    for variant, target, features, core, mode in VARIANTS:
        try:
            path = build(variant, target, features, "", "psk_sensor", "size")
            r = run_sensor(path, core, chain=not quick and variant == "m4-psk")
        except (subprocess.CalledProcessError, EmulationError) as e:
            failures.append(f"psk sensor {variant}: {e}")
            continue
        r.update(mode=mode, core=core, features=features)
        r["public_key_symbols"] = public_key_symbols(path)
        r["wire"] = wire(bytes.fromhex(r["sent"][1]), mode) if len(r["sent"]) > 1 else None
        fails = check_psk(r, mode)
        if r["halt_code"] != 0 or r["acked"] != READINGS:
            fails.append(f"halted with {r['halt_code']}, {r['acked']}/{READINGS} readings acknowledged")
        if r["public_key_symbols"]:
            fails.append(f"public-key code linked: {', '.join(r['public_key_symbols'][:5])}")
        failures += [f"psk sensor {variant}: {f}" for f in fails]
        res["psk"][variant] = r
        log(f"  {variant:18} flash {r['flash']:6} B, RAM {r['static_ram']} B static + {r['stack']} B stack,"
            f" {r['acked']}/{READINGS} readings acknowledged, {len(r['public_key_symbols'])} public-key symbols,"
            f" {(r['per_reading'] or {}).get('cycles', 0):,} cycles per reading"
            + ("" if fails else ", readings checked on the host"))
    if quick:
        return res, failures
    for variant in SIGNING:
        if signing and variant in signing:
            r = dict(signing[variant])
        else:
            v = next(v for v in sensor_variants if v[0] == variant)
            _, target, features, core, rustflags = v
            try:
                path = build(variant, target, features, rustflags, "sensor", "size")
                r = run_sensor(path, core)
            except (subprocess.CalledProcessError, EmulationError) as e:
                failures.append(f"sensor {variant}: {e}")
                continue
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "firmware",
                            "target", "variants", variant, "sensor")
        r["public_key_symbols_count"] = len(public_key_symbols(path))
        r["wire"] = wire(bytes.fromhex(r["sent"][1]), "sign")
        r["core"] = next(v[3] for v in sensor_variants if v[0] == variant)
        res["signing"][variant] = r
        log(f"  {variant:18} (signing) flash {r['flash']:6} B, RAM {r['static_ram']} B static + {r['stack']} B stack,"
            f" {r['per_reading']['cycles']:,} cycles per reading")
    return res, failures


def _n(v):
    return f"{v:,}"


def write(res, w):
    psk, sig = res["psk"], res["signing"]
    mac4, ses4, mac0 = psk["m4-psk"], psk["m4-psk-session"], psk["m0plus-psk"]
    w(HEADING)
    w("")
    w("`firmware/src/bin/psk_sensor.rs`: a node provisioned with a random identity and a "
      "pre-shared key, no key pair. Through sigil-device's `PskNode` it registers with the "
      "Resource Directory (no key in the link, no signed statement) and publishes three "
      "Confirmable readings, the same SenML records as the signing sensor's, against the same "
      "emulated server. Built with `--no-default-features --features psk-only` (`psk-session` "
      "for session mode) and `opt-level = \"z\"`: the backend then has SHA-256, HMAC and AES-CCM "
      "and no curve, so no public-key code can be linked. The run checks that: it fails if "
      "`arm-none-eabi-nm` lists any symbol of P-256, ECDSA, Ed25519 or Curve25519 in a PSK "
      "image, and it verifies every MACed reading on the host under the reading key derived "
      "from the image's PSK (HKDF-SHA-256), with the sequence numbers 1, 2, 3. The signing "
      "sensor images beside them are built and run in the same run, the same way.")
    w("")
    w("| image | core | flash | static RAM | max stack | RAM incl. stack | cycles per reading "
      "| reading on the wire | public-key symbols | readings acknowledged |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [
        ("`psk_sensor`, MAC (COSE_Mac0)", mac4, len(mac4["public_key_symbols"])),
        ("`psk_sensor`, session (plain SenML)", ses4, len(ses4["public_key_symbols"])),
        ("`sensor` m4-rustcrypto (Ed25519 + P-256 linked, signs Ed25519)", sig.get("m4-rustcrypto"), None),
        ("`sensor` m4-ed25519-only", sig.get("m4-ed25519-only"), None),
        ("`psk_sensor`, MAC (COSE_Mac0)", mac0, len(mac0["public_key_symbols"])),
        ("`sensor` m0plus-rustcrypto", sig.get("m0plus-rustcrypto"), None),
    ]
    for name, r, pk in rows:
        if not r:
            continue
        core = "Cortex-M4" if r["core"] == "cortex-m4" else "Cortex-M0+"
        pk = pk if pk is not None else r.get("public_key_symbols_count", "–")
        w(f"| {name} | {core} | {_n(r['flash'])} B | {_n(r['static_ram'])} B | {_n(r['stack'])} B "
          f"| {_n(r['ram_with_stack'])} B | {_n(r['per_reading']['cycles'])} | {r['wire']['datagram']} B "
          f"| {_n(pk) if isinstance(pk, int) else pk} | {r['acked']}/{READINGS} |")
    w("")
    w("Flash is the vector table, code, read-only data and `.data`'s initial values; RAM is "
      "static data plus the deepest painted stack of the run. A reading's cycles (Cortex-M4 and "
      "Cortex-M0+ models, zero wait states) run from one reading leaving the radio to the next: "
      "the previous reading's acknowledgement, then encoding, MAC or signature, and the CoAP "
      "message. In session mode that is CoAP alone: the DTLS record protection around the "
      "datagram (AES-CCM-8 in the session the board runs) is not part of the image.")
    w("")
    w("Bytes of one reading on the wire (the same records, the same CoAP request: "
      "`PUT /ps/7/m`, a 4-byte token):")
    w("")
    w("| reading | content-format | CoAP datagram | CoAP header and options | payload | of it SenML-CBOR "
      "| around the SenML |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    sign = (sig.get("m4-rustcrypto") or {}).get("wire")
    for name, x in (("COSE_Mac0, HMAC 256/64 (MAC mode)", mac4["wire"]),
                    ("COSE_Sign1, Ed25519 (signing sensor)", sign),
                    ("plain SenML-CBOR (session mode)", ses4["wire"])):
        if x:
            w(f"| {name} | {x['cf']} | {x['datagram']} B | {x['coap']} B | {x['payload']} B "
              f"| {x['senml']} B | {x['payload'] - x['senml']} B |")
    w("")
    w(f"In session mode each datagram also travels in a DTLS record: {DTLS_CCM8_OVERHEAD} B more "
      "with PSK-CCM8 (13-byte record header, 8-byte explicit nonce, 8-byte tag), so "
      f"{ses4['wire']['datagram'] + DTLS_CCM8_OVERHEAD} B in all, and the session's handshake "
      "before the first reading (the PSK handshake in the DTLS sections above).")
    w("")
    rust = sig.get("m4-rustcrypto")
    ed = sig.get("m4-ed25519-only")
    m0 = sig.get("m0plus-rustcrypto")
    if rust and ed and m0:
        w(f"What leaving public-key code out saves: on the Cortex-M4 the MACing image is "
          f"{_n(mac4['flash'])} B of flash against {_n(ed['flash'])} B for the signing image with "
          f"Ed25519 only ({_n(rust['flash'])} B with P-256 as well), "
          f"{_n(mac4['ram_with_stack'])} B of RAM with its stack against {_n(ed['ram_with_stack'])} B, "
          f"and a reading costs {_n(mac4['per_reading']['cycles'])} cycles against "
          f"{_n(ed['per_reading']['cycles'])}, about {ed['per_reading']['cycles'] / mac4['per_reading']['cycles']:,.0f} "
          f"times less; on the Cortex-M0+ {_n(mac0['per_reading']['cycles'])} against "
          f"{_n(m0['per_reading']['cycles'])} cycles, about "
          f"{m0['per_reading']['cycles'] / mac0['per_reading']['cycles']:,.0f} times less. The MAC "
          f"itself is the difference between the two PSK images, "
          f"{_n(mac4['per_reading']['cycles'] - ses4['per_reading']['cycles'])} cycles per reading "
          f"(four SHA-256 compressions and the COSE header), and it puts "
          f"{mac4['wire']['payload'] - mac4['wire']['senml']} B around the SenML where a signature "
          f"puts {sign['payload'] - sign['senml']} B. What remains of the image is CoAP, the state "
          "machine, SHA-256, formatting and the compiler's runtime; with its fixed buffers "
          "(the node's state is about 1.3 kB, moved in `main`) it is still above the 20 kB flash "
          "and 4 kB RAM goal of the signing sensor's section. What the node gives up: a MACed "
          "reading can be checked only by holders of its reading key (the server, and the "
          "subscribers it discloses the key to), and any of them could have made it, so it proves "
          "nothing to anyone else and does not tell which holder made it; a signed reading is "
          "verifiable by anyone with the device's public key and could only have been made by the "
          "device. In session mode nothing is verifiable end to end: the reading is authenticated "
          "hop by hop by the DTLS session, and a subscriber has to trust the broker that "
          "terminated it. In both modes the server holds the PSK, so, unlike with a signed "
          "reading, the broker could alter or make a reading undetected.")
        w("")
    w("Where the MAC image's flash goes (Cortex-M4):")
    w("")
    w("| crate | flash | RAM |")
    w("|---|---:|---:|")
    crates = sorted(mac4["crates"].items(), key=lambda kv: -kv[1]["flash"])
    for name, v in crates:
        if v["flash"] or v["ram"]:
            w(f"| {name} | {_n(v['flash'])} B | {_n(v['ram'])} B |")
    w("")
    if mac4.get("deepest"):
        w("Its deepest stack point, function by function (frames of 100 B or more):")
        w("")
        w("| function | frame |")
        w("|---|---:|")
        for fn, frame in mac4["deepest"]:
            if frame >= 100:
                w(f"| `{fn[:90]}` | {_n(frame)} B |")
        w("")
    w("Generated by `scripts/bench-device --section psk`, which measures this section alone "
      "and rewrites it (it builds the three PSK images and the three signing images); "
      "`scripts/bench-device --quick` builds and runs the PSK images with every check, "
      "without the comparison.")
    w("")


def splice(report_path, res):
    """Rewrites this section in place; places it after the signing sensor's section (before
    the C sensor's, or at the end) when it is not there yet."""
    L = []
    write(res, L.append)
    new = "\n".join(L).rstrip("\n") + "\n\n"
    with open(report_path) as f:
        text = f.read()
    start = text.find(HEADING)
    if start < 0:
        start = text.find("## The C sensor image")
        start = len(text) if start < 0 else start
        end = start
    else:
        end = text.find("\n## ", start + 1)
        end = len(text) if end < 0 else end + 1
    text = text[:start] + new + text[end:]
    line = "scripts/bench-device --section psk  # the sensor with only a pre-shared key beside the signing sensor; rewrites that section"
    if not re.search(r"--section psk +#", text):
        anchor = text.find("\nscripts/bench-device --section rsa ")
        if anchor >= 0:
            eol = text.find("\n", anchor)
            text = text[:eol + 1] + line + "\n" + text[eol + 1:]
    with open(report_path, "w") as f:
        f.write(text)
