"""The DTLS client as a device image with each handshake carrier, beside the
DTLS-as-CoAP-resource paper's Table I (docs/device-costs.md).

`firmware/src/bin/dtls_client.rs` is built twice per core: with sigil-dtls's record layer
(`dtls-records`: `Connection`, its flight retransmission timer, fragmentation and reassembly)
and with the handshake carried as a CoAP resource (`dtls-coap`: `sigil_dtls_coap::Client` over
`WholeFlights`, sigil-dtls without `record-carrier`). Each image runs a PSK-CCM8 and an
ECDHE-ECDSA-CCM8 handshake against the real sigil-dtls server
(eval/sigil-devbench/examples/dtls-peer.rs, a host process the emulator forwards the image's
datagrams to), then one CoAP request in an application record after each. A run passes when
both handshakes completed and both requests were answered on both sides, and when the
CoAP-carrier image links none of the record carrier's code (checked on its symbols).
"""
import os
import re
import struct
import subprocess
import time
from collections import deque

from emulator import EmulationError, Image, Machine
from sizes import _legacy_path, breakdown

# (variant, rust target, cargo features, emulated core, carrier). `-default`: built without the
# firmware's default features, so no other image's sigil-dtls features join these.
VARIANTS = [
    ("m4-dtls-records", "thumbv7em-none-eabihf", ["-default", "dtls-records"], "cortex-m4", "records"),
    ("m4-dtls-coap", "thumbv7em-none-eabihf", ["-default", "dtls-coap"], "cortex-m4", "coap"),
    ("m0plus-dtls-records", "thumbv6m-none-eabi", ["-default", "dtls-records"], "cortex-m0plus", "records"),
    ("m0plus-dtls-coap", "thumbv6m-none-eabi", ["-default", "dtls-coap"], "cortex-m0plus", "coap"),
]
SESSIONS = 2  # PSK-CCM8, then ECDHE-ECDSA-CCM8 with the server's raw public key

# The code sigil-dtls compiles only with `record-carrier` (crates/sigil-dtls/src/conn/
# connection.rs and record_carrier.rs, flight.rs, handshake.rs): the record-layer connection and
# its handshake state, flights packed into records, the retransmission timer, fragments kept
# ahead, and the reassembler.
RECORD_CARRIER = re.compile(
    r"sigil_dtls::(conn::(connection|record_carrier)::"
    r"|conn::record_layer::RecordLayer::overhead\b|flight::(Ahead|Timer)\b|handshake::Reassembler\b)")

# DTLS-as-CoAP-resource (../shared/seeds/dtls-as-coap-resource.md), Table I, MagoNode
# (ATmega128RFA1, TinyOS): (ROM bytes, RAM bytes).
PAPER_TABLE_I = {
    "CoAP + Blip": (51410, 6653),
    "standard DTLS": (10983, 7380),
    "DTLS over CoAP": (8936, 7144),
}


def symbol_path(name):
    """A Rust symbol's path (`sigil_dtls::conn::Connection<C,T>::poll_transmit`), or the raw
    name for anything else."""
    segs = _legacy_path(name)
    if segs is None:
        return name
    if segs and re.fullmatch(r"h[0-9a-f]{16}", segs[-1]):
        segs = segs[:-1]
    path = "::".join(segs)
    for esc, ch in (("$LT$", "<"), ("$GT$", ">"), ("$C$", ","), ("$u20$", " "), ("$RF$", "&"),
                    ("$BP$", "*"), ("$u7b$", "{"), ("$u7d$", "}"), ("$u5b$", "["), ("$u5d$", "]")):
        path = path.replace(esc, ch)
    return path.replace("..", "::")


def record_carrier_symbols(image):
    """The record carrier's functions and data the linker kept: [(path, bytes)]."""
    found = {}
    for name, size, _ in image.sized_symbols:
        path = symbol_path(name)
        if RECORD_CARRIER.search(path):
            found[path] = found.get(path, 0) + size
    return sorted(found.items(), key=lambda kv: -kv[1])


WORD_MOVES = ("ldr", "ldr.w", "str", "str.w")
# Shorter runs are ordinary code; longer ones are a value moved word by word.
MIN_MOVE_RUN = 32


def unrolled_moves(image):
    """Code bytes in runs of at least MIN_MOVE_RUN consecutive single-word loads and stores
    (not from the literal pool): values the compiler moved word by word instead of calling
    memcpy. {function path: bytes}, largest first."""
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
    md.skipdata = True
    out = {}
    for name, size, section in image.sized_symbols:
        if not section.startswith(".text"):
            continue
        addr = image.symbols[name] & ~1
        code = next((data[addr - paddr:addr - paddr + size] for _, paddr, data in image.segments
                     if paddr <= addr < paddr + len(data)), b"")
        total = run_bytes = run_len = 0
        for ins in md.disasm(code, addr):
            if ins.mnemonic in WORD_MOVES and "pc" not in ins.op_str:
                run_len += 1
                run_bytes += ins.size
                continue
            if run_len >= MIN_MOVE_RUN:
                total += run_bytes
            run_bytes = run_len = 0
        if run_len >= MIN_MOVE_RUN:
            total += run_bytes
        if total:
            path = symbol_path(name)
            out[path] = out.get(path, 0) + total
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def peer_executable(root, log):
    """Builds the host's DTLS server (a debug build: the test suite's workspace build already
    made it) and returns its path."""
    t = time.time()
    subprocess.run(["cargo", "build", "--quiet", "-p", "sigil-devbench", "--example", "dtls-peer"],
                   cwd=root, check=True)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    log(f"  built the host's DTLS server (dtls-peer) in {time.time() - t:5.1f}s")
    return os.path.join(target, "debug", "examples", "dtls-peer")


def _read_exact(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EmulationError("the host's DTLS server stopped answering")
        data += chunk
    return data


def run(path, core, carrier, peer, count_cycles):
    """Runs one image against the host's server for its carrier and measures it."""
    from unicorn import arm_const as A
    img = Image(path)
    m = Machine(img, core, count_cycles=count_cycles)
    mailbox = next(size for name, size, _ in img.sized_symbols if name == "SIGIL_RX")
    server = subprocess.Popen([peer, carrier], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    arriving = deque()
    sent, received = [], []

    def on_transmit(machine):
        ptr = machine.uc.reg_read(A.UC_ARM_REG_R0)
        n = machine.uc.reg_read(A.UC_ARM_REG_R1)
        d = bytes(machine.uc.mem_read(ptr, n))
        sent.append(len(d))
        server.stdin.write(struct.pack(">H", len(d)) + d)
        server.stdin.flush()
        while True:
            (k,) = struct.unpack(">H", _read_exact(server.stdout, 2))
            if k == 0:
                break
            arriving.append(_read_exact(server.stdout, k))

    def on_poll(machine):
        if arriving and machine.read_u32("SIGIL_RX_LEN") == 0:
            d = arriving.popleft()
            if len(d) > mailbox:
                raise EmulationError(f"a {len(d)}-byte datagram for a {mailbox}-byte mailbox")
            received.append(len(d))
            machine.write("SIGIL_RX", d)
            machine.write("SIGIL_RX_LEN", struct.pack("<I", len(d)))

    m.intercepts[img.symbols["sigil_radio_transmit"] & ~1] = on_transmit
    m.intercepts[img.symbols["sigil_radio_poll"] & ~1] = on_poll
    m.intercepts[img.symbols["sigil_halt"] & ~1] = lambda machine: machine.halt()
    try:
        _, insns, cycles, stack = m.call("main", limit=20_000_000_000)
    finally:
        server.stdin.close()
        try:
            tally = server.stderr.read().decode(errors="replace").strip()
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            tally = "(the host's server did not exit)"
    sections = {s: img.sections.get(s, 0) for s in (".vector_table", ".text", ".rodata", ".data", ".bss", ".uninit")}
    return {
        "carrier": carrier, "core": core,
        "halt_code": m.uc.reg_read(A.UC_ARM_REG_R0),
        "handshakes": m.read_u32("SIGIL_HANDSHAKES"), "answers": m.read_u32("SIGIL_ANSWERS"),
        "server": tally.splitlines()[-1] if tally else "",
        "server_log": tally,
        "datagrams_sent": len(sent), "bytes_sent": sum(sent),
        "datagrams_received": len(received), "bytes_received": sum(received),
        "instructions": insns, "cycles": cycles, "stack": stack,
        "flash": img.flash_bytes(), "static_ram": img.static_ram_bytes(),
        "ram_with_stack": img.static_ram_bytes() + stack,
        "sections": sections,
        "crates": breakdown(img),
        "record_carrier": record_carrier_symbols(img),
        "unrolled_moves": unrolled_moves(img),
        "largest": sorted(((symbol_path(n), s) for n, s, sec in img.sized_symbols
                           if sec.startswith((".text", ".rodata"))), key=lambda kv: -kv[1])[:12],
    }


def check(variant, r):
    """Why a run failed, or []."""
    why = []
    want = f"handshakes {SESSIONS} requests {SESSIONS}"
    if r["halt_code"] != 0 or r["handshakes"] != SESSIONS or r["answers"] != SESSIONS:
        why.append(f"halted with {r['halt_code']}, {r['handshakes']}/{SESSIONS} handshakes, "
                   f"{r['answers']}/{SESSIONS} requests answered")
    if r["server"] != want:
        why.append(f"the server reports {r['server_log']!r}, not {want!r}")
    if r["carrier"] == "coap" and r["record_carrier"]:
        names = ", ".join(p for p, _ in r["record_carrier"][:5])
        why.append(f"links the record carrier's code ({len(r['record_carrier'])} symbols: {names})")
    if r["carrier"] == "records" and not r["record_carrier"]:
        why.append("no record-carrier symbol found in the record-layer image: the symbol check "
                   "no longer recognises that code")
    return [f"dtls client {variant}: {w}" for w in why]


def measure(build, peer, count_cycles, log):
    """Builds and runs every variant; returns (results, failures)."""
    results, failures = {}, []
    for variant, target, features, core, carrier in VARIANTS:
        try:
            path = build(variant, target, features, "", "dtls_client", "size")
            t = time.time()
            r = run(path, core, carrier, peer, count_cycles)
        except (subprocess.CalledProcessError, EmulationError) as e:
            failures.append(f"dtls client {variant}: {e}")
            continue
        results[variant] = r
        failures += check(variant, r)
        log(f"  {variant:20} flash {r['flash']:6} B, RAM {r['static_ram']} B static + {r['stack']} B stack,"
            f" {r['handshakes']}/{SESSIONS} handshakes, {r['answers']}/{SESSIONS} answers,"
            f" {len(r['record_carrier'])} record-carrier symbols, in {time.time() - t:5.1f}s")
    return results, failures


HEADING = "## Beside DTLS-as-CoAP-resource Table I: the handshake over records or as a CoAP resource"


def pct(new, old):
    return f"{(new - old) / old * 100:+.1f}%" if old else "–"


def write(results, w):
    d = results.get("dtls_carriers") or {}
    w(HEADING)
    w("")
    if not d:
        w("Not measured in this run.")
        w("")
        return
    w("`firmware/src/bin/dtls_client.rs` is one DTLS client, built with either carrier for its "
      "handshakes: sigil-dtls's record layer (feature `dtls-records`: `sigil_dtls::Connection`, "
      "flights cut into records, the flight retransmission timer, fragment reassembly; RFC 6347 "
      "§4.2) or the handshake as a CoAP resource (feature `dtls-coap`: "
      "`sigil_dtls_coap::Client` over `sigil_dtls::WholeFlights`, with CoAP's Confirmable "
      "retransmission and block-wise transfer instead; sigil-dtls built with "
      "`default-features = false` and without `record-carrier`). Same suites in both "
      "(TLS_PSK_WITH_AES_128_CCM_8 and TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with raw public keys, "
      "P-256), same crypto backend, same CoAP crate, same application. Each image runs two "
      "handshakes, PSK then ECDHE-ECDSA (the server's raw public key checked against its pinned "
      "identity), and after each sends one Confirmable CoAP `POST /r` in an application record "
      "and waits for the piggybacked 2.04 in one (CoAP over DTLS, RFC 7252 §9.1), retransmitted "
      "by `sigil_coap::Retransmission`. The emulator forwards every datagram to the real "
      "sigil-dtls server on the host (`eval/sigil-devbench/examples/dtls-peer.rs`: the stateless "
      "cookie exchange and `Connection::accept`, or `sigil_dtls_coap::Endpoint`), and the run "
      "passes only if both handshakes completed and both requests were answered, on the device "
      "and on the server. Built like the sensor image (profile `size`: opt-level `z`, LTO, one "
      "codegen unit, panic=abort) with `cargo build --profile size --no-default-features "
      "--features dtls-records|dtls-coap --bin dtls_client`. `scripts/bench-device --section "
      "table-one` measures these four images alone and rewrites this section.")
    w("")
    w("| image | core | flash (.text + .rodata + .data + vectors) | .text | .rodata | static RAM (.data + .bss) | peak stack | RAM incl. stack | datagrams sent / received | handshakes, answers |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v, r in d.items():
        s = r["sections"]
        w(f"| `{v}` | {r['core']} | {r['flash']:,} B | {s['.text']:,} B | {s['.rodata']:,} B | "
          f"{r['static_ram']:,} B | {r['stack']:,} B | {r['ram_with_stack']:,} B | "
          f"{r['datagrams_sent']} / {r['datagrams_received']} | {r['handshakes']}, {r['answers']} |")
    w("")
    w("The CoAP carrier against the record layer, and the paper's Table I (MagoNode, "
      "ATmega128RFA1, TinyOS; its DTLS alone, beside CoAP + Blip):")
    w("")
    w("| | flash / ROM | static RAM | peak stack | RAM incl. stack |")
    w("|---|---:|---:|---:|---:|")
    for core, label in (("m4", "Cortex-M4"), ("m0plus", "Cortex-M0+")):
        a, b = d.get(f"{core}-dtls-records"), d.get(f"{core}-dtls-coap")
        if not (a and b):
            continue
        cells = []
        for key in ("flash", "static_ram", "stack", "ram_with_stack"):
            cells.append(f"{b[key] - a[key]:+,} B ({pct(b[key], a[key])})")
        w(f"| Sigil, {label}: CoAP carrier − record layer | " + " | ".join(cells) + " |")
    (sr, sm), (cr, cm) = PAPER_TABLE_I["standard DTLS"], PAPER_TABLE_I["DTLS over CoAP"]
    w(f"| paper: DTLS over CoAP ({cr:,} B ROM, {cm:,} B RAM) − standard DTLS ({sr:,} B, {sm:,} B) | "
      f"{cr - sr:+,} B ({pct(cr, sr)}) | {cm - sm:+,} B ({pct(cm, sm)}) | – | – |")
    w("")
    w(f"The paper's \"almost 23%\" is the {sr - cr:,} B saved divided by the smaller figure "
      f"({(sr - cr) / cr * 100:.1f}% of {cr:,} B); against the standard DTLS it replaces, the "
      f"saving is {(sr - cr) / sr * 100:.1f}%. Its CoAP + Blip row ({PAPER_TABLE_I['CoAP + Blip'][0]:,} B "
      f"ROM, {PAPER_TABLE_I['CoAP + Blip'][1]:,} B RAM) has no counterpart here: these images carry "
      "no operating system and no radio stack.")
    w("")
    w("**Where the bytes go**, by crate (from the images' symbols, `tools/devbench/sizes.py`; "
      "crates that differ by more than 64 B):")
    w("")
    for core, label in (("m4", "Cortex-M4"), ("m0plus", "Cortex-M0+")):
        a, b = d.get(f"{core}-dtls-records"), d.get(f"{core}-dtls-coap")
        if not (a and b):
            continue
        ca, cb = a["crates"], b["crates"]
        names = sorted(set(ca) | set(cb), key=lambda n: -abs(cb.get(n, {"flash": 0})["flash"] - ca.get(n, {"flash": 0})["flash"]))
        rows = [(n, ca.get(n, {"flash": 0})["flash"], cb.get(n, {"flash": 0})["flash"]) for n in names]
        rows = [r for r in rows if abs(r[2] - r[1]) > 64]
        w(f"| {label}: crate | record layer | CoAP carrier | difference |")
        w("|---|---:|---:|---:|")
        for n, x, y in rows:
            label_n = "`dtls_client` (the application, with what the compiler inlined into it)" if n == "dtls_client" else f"`{n}`"
            w(f"| {label_n} | {x:,} B | {y:,} B | {y - x:+,} B |")
        w("")
    m4 = d.get("m4-dtls-records"), d.get("m4-dtls-coap")
    if all(m4):
        a, b = m4
        w("The largest functions of each Cortex-M4 image:")
        w("")
        w("| record layer | | CoAP carrier | |")
        w("|---|---:|---|---:|")
        for (pa, sa), (pb, sb) in zip(a["largest"][:8], b["largest"][:8]):
            w(f"| `{pa[:80]}` | {sa:,} B | `{pb[:80]}` | {sb:,} B |")
        w("")
        ua, ub = sum(a["unrolled_moves"].values()), sum(b["unrolled_moves"].values())
        la, lb = dict(a["largest"]), dict(b["largest"])
        core_a = la.get("sigil_dtls::conn::record_carrier::Handshaking::handle_fragment", 0)
        core_b = lb.get("sigil_dtls::whole::Handshaking::intake", 0)
        gap = b["flash"] - a["flash"]
        dropped = sum(s for _, s in a["record_carrier"])
        crate = lambda r, n: r["crates"].get(n, {"flash": 0})["flash"]
        added = sum(crate(b, n) - crate(a, n) for n in ("sigil_dtls_coap", "sigil_coap"))
        m0 = d.get("m0plus-dtls-records"), d.get("m0plus-dtls-coap")
        m0_gap = m0[1]["flash"] - m0[0]["flash"] if all(m0) else None
        m0_dtls = (crate(m0[1], "sigil_dtls") - crate(m0[0], "sigil_dtls")) if all(m0) else None
        w("**Sigil does not reproduce the paper's saving: the CoAP-carrier image is the larger "
          f"one** ({gap:+,} B on the Cortex-M4"
          + (f", {m0_gap:+,} B on the Cortex-M0+" if m0_gap is not None else "") + "). "
          f"The functions only the record carrier has come to {dropped:,} B in its image (next "
          "paragraph), but most of that is the handshake states themselves, which both carriers "
          "drive and LTO inlines into one function per carrier, "
          f"`conn::record_carrier::Handshaking::handle_fragment` ({core_a:,} B: the states, reassembly and the "
          f"messages ahead) against `whole::Handshaking::intake` ({core_b:,} B: the states, "
          "whole messages only, with the signing dispatch inlined that the record image keeps "
          "apart). The CoAP carrier then adds its client: "
          f"{added:+,} B in `sigil_dtls_coap` and `sigil_coap` (requests, Block1/Block2, "
          "Confirmable retransmission with its randomised timeout, whose 64-bit division "
          "brings `compiler_builtins` code the record image does not link). The paper's "
          "saving came from a standard DTLS that carried reliability and fragmentation code "
          "of its own beside a CoAP stack that already had both; Sigil's record carrier is a "
          "thin layer over the shared states, and the CoAP carrier's client is a second CoAP "
          "requester beside the application's, not code the two share."
          + (f" On the Cortex-M0+ the shared handshake code itself grows by {m0_dtls:+,} B in the "
             "CoAP image (`sigil_dtls` above): Thumb-1 reaches at most 1,020 B from the stack "
             "pointer and 124 B from any other register, so every access to the larger "
             "handshake frame of `intake` costs an address computation and a literal."
             if m0_dtls else "")
          + (f" Moves of whole values word by word (runs of {MIN_MOVE_RUN} or more single-word "
             f"loads and stores, `unrolled_moves`): {ub:,} B in the CoAP image, {ua:,} B in the "
             "record-layer image; `Client::into_traffic` drops the handshake instead of handing "
             "it back, so only the established state leaves the client."))
        w("")
    recs = [(v, r) for v, r in d.items() if r["carrier"] == "records"]
    coaps = [(v, r) for v, r in d.items() if r["carrier"] == "coap"]
    if recs:
        v, r = recs[0]
        total = sum(s for _, s in r["record_carrier"])
        w(f"**The CoAP-carrier images link none of the record carrier's code.** In `{v}` the "
          f"linker kept {len(r['record_carrier'])} symbols of the code sigil-dtls compiles only "
          f"with `record-carrier` ({total:,} B; what LTO did not inline into them is counted "
          "in their callers): " + ", ".join(f"`{p[:70]}` ({s:,} B)" for p, s in r["record_carrier"][:8])
          + ". In " + ", ".join(f"`{cv}`" for cv, _ in coaps) + ": "
          + ("none" if all(not cr["record_carrier"] for _, cr in coaps) else "SOME (see the run's failures)")
          + ". `tools/devbench/dtls_carriers.py` checks it on every run (`scripts/bench-device`, "
          "`--quick` included): a CoAP-carrier image with one of those symbols fails the run, and "
          "so does a record-layer image without any (the check would have gone blind).")
        w("")
    w("**Why the figures differ from the paper's:**")
    w("")
    w("- No operating system and no radio stack. The paper's DTLS runs on TinyOS beside Blip "
      "(802.15.4 MAC, 6LoWPAN, RPL, UDP) and its own CoAP; its DTLS rows count DTLS alone. These "
      "images are the whole device: startup, the crypto backend (P-256, SHA-2, AES-CCM, and "
      "the Ed25519 code the portable provider's signature dispatch keeps), DTLS, CoAP and the "
      "application, so their totals are not comparable with the paper's rows; their "
      "differences are, as the paper's claim is a difference.")
    w("- Different suites and curve: the paper's ECC is a 160-bit curve (p = 2^160 − 2^31 − 1) "
      "with fixed ECDH (TLS_ECDH_ECDSA_WITH_AES_128_CCM_8) and its own assembly; here "
      "PSK-CCM8 and ECDHE-ECDSA-CCM8 on P-256 from RustCrypto, identical in both images, so "
      "the crypto cancels out of the difference.")
    w("- Different machines: an 8-bit AVR in the paper, 32-bit Thumb-2 (M4) and Thumb (M0+) "
      "here, compiled by rustc/LLVM at opt-level `z` with LTO, which inlines across crates: "
      "much of each carrier's code is counted in its callers (the `dtls_client` row), not in "
      "`sigil_dtls` or `sigil_dtls_coap`.")
    same_static = len({r["static_ram"] for r in d.values()}) == 1
    w("- RAM: the paper's RAM is static. Sigil keeps the handshake state (the `Connection` or "
      "the `Client`, with their fixed buffers) on the stack, so "
      + ("the static RAM is the same in all four images (the radio mailbox and counters) and "
         if same_static else "the static RAM differs little and ")
      + "the carriers' difference shows in the peak stack, measured by painting the stack as "
      "for the sensor image. Both need far more stack than a Class 1 device has (the paper's "
      "MagoNode has 16 kB of RAM in all): the by-value construction and moves of the "
      "handshake state that the operations table notes for the record-layer client, here "
      "twice over for the CoAP client. `firmware/memory.x` gives the emulated core the "
      "nRF52840's 256 KiB of RAM so that these images run at all.")
    w("- The carrier code the paper leaves to CoAP is in CoAP here too, but the record layer "
      "still frames the application's records in both images: only the handshake's "
      "flights, timer and reassembly move to CoAP.")
    w("")
    w("**AVR (the paper's class of machine): not built.** `firmware/` is Cortex-M only, and the "
      "crates under both images do not all build for the 16-bit ATmega: `cargo +nightly build "
      "-Z build-std=core --target avr-none -p sigil-dtls --no-default-features --features "
      "record-carrier,psk` compiles (the record-layer PSK client's library), but "
      "`-p sigil-dtls-coap --no-default-features --features psk` stops in sigil-coap, which "
      "both images use: `error: this arithmetic operation will overflow` at "
      "`crates/sigil-coap/src/message.rs:516` (`65535 + 269` is past a 16-bit `usize`). The "
      "ECDHE-ECDSA suite needs P-256, whose crypto-bigint refuses 16-bit targets (the AVR "
      "section below).")
    w("")


def splice(report_path, results):
    """Rewrites this section of an existing report in place (`scripts/bench-device --section
    table-one`); the rest of the page stays as the last full run wrote it."""
    L = []
    write(results, L.append)
    new = "\n".join(L).rstrip("\n") + "\n\n"
    with open(report_path) as f:
        text = f.read()
    start = text.find(HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(HEADING))
        end = len(text) if end < 0 else end + 1
        text = text[:start] + new + text[end:]
    else:
        anchor = text.find("## Beside DTLS-as-CoAP-resource Tables II and III")
        if anchor < 0:
            raise SystemExit(f"{report_path}: no place for the Table I section (run the full scripts/bench-device)")
        text = text[:anchor] + new + text[anchor:]
    text = text.replace(OLD_POINTER, NEW_POINTER)
    with open(report_path, "w") as f:
        f.write(text)


OLD_POINTER = ("**DTLS-as-CoAP-resource Table I** (DTLS ROM/RAM) and the two-way-authentication "
               "paper's Table 1 (DTLS client memory) need the DTLS client measured as a device image, "
               "which this report does not do yet. Its Tables II and III: the next section.")
NEW_POINTER = ("**DTLS-as-CoAP-resource Table I** (DTLS ROM/RAM, record layer against the handshake "
               "as a CoAP resource) and its Tables II and III: the next two sections. The "
               "record-layer DTLS client image there is also the counterpart of the "
               "two-way-authentication paper's Table 1 (DTLS client memory).")
