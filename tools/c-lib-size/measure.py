#!/usr/bin/env python3
"""Flash and RAM of libsigil.a per feature set, on Cortex-M4F.

Builds the C library for thumbv7em-none-eabihf with each feature set (the workspace's `size`
profile: opt-level z, LTO, one codegen unit, panic=abort; through `cargo rustc --crate-type
staticlib`, because cargo applies no LTO to a crate that also builds an rlib), links the
device calls a sensor uses into a minimal image with rust-lld and --gc-sections (so only what
those calls reach stays), and sums the sections: flash = .text + .rodata + .data, RAM = .data +
.bss (the caller's `sigil_device` state, SIGIL_DEVICE_SIZE bytes, and the stack come on top).
Feature sets with `dtls` link the DTLS client's calls too (its state, at most
SIGIL_DTLS_CLIENT_COMPACT_SIZE bytes in these builds, is the caller's as well); the `diet` rows
link the calls a CryptoDiet node makes (its `sigil_diet_node` state, SIGIL_DIET_NODE_SIZE bytes,
comes on top). No C code and no libc are linked: this is the library alone. examples/c/m4 links
the same archives into the C sensor image.

    python3 tools/c-lib-size/measure.py            # prints a Markdown table

The table and its prose are kept in tools/c-lib-size/section.md, which tools/devbench/report.py
puts into docs/device-costs.md; paste a new table there after a change that moves it.
"""
import glob
import os
import subprocess
import sys
import tempfile

from elftools.elf.elffile import ELFFile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TARGET = "thumbv7em-none-eabihf"
FEATURES = [
    ("ed25519", "ed25519,panic-hook"),
    ("p256", "p256,panic-hook"),
    ("ed25519 + p256", "ed25519,p256,panic-hook"),
    ("ed25519 + p256 + jws", "ed25519,p256,jws,panic-hook"),
    # A third element names the call sets linked (default: the device's).
    ("ed25519 + dtls (PSK-CCM8 only)", "ed25519,dtls,panic-hook", ["device", "dtls"]),
    ("ed25519 + p256 + dtls", "ed25519,p256,dtls,panic-hook", ["device", "dtls"]),
    ("diet (CryptoDiet node calls only)", "diet,panic-hook", ["diet"]),
    ("ed25519 + p256 + diet", "ed25519,p256,diet,panic-hook", ["device", "diet"]),
    ("default (ed25519 + p256 + dtls + diet; every call)", "ed25519,p256,dtls,diet,panic-hook",
     ["device", "dtls", "diet"]),
]
DEVICE_CALLS = [
    "sigil_device_config_default", "sigil_device_boot", "sigil_device_end",
    "sigil_device_identity", "sigil_device_handle_timeout", "sigil_device_handle_datagram",
    "sigil_device_poll_transmit", "sigil_device_poll_timeout", "sigil_device_poll_event",
    "sigil_device_publish", "sigil_device_get_info",
]
DTLS_CALLS = [
    "sigil_dtls_config_default", "sigil_dtls_connect", "sigil_dtls_end",
    "sigil_dtls_handle_datagram", "sigil_dtls_poll_transmit", "sigil_dtls_poll_timeout",
    "sigil_dtls_handle_timeout", "sigil_dtls_send", "sigil_dtls_recv", "sigil_dtls_close",
    "sigil_dtls_get_info",
]
# What a CryptoDiet node calls: its key pairs, the node and its three phases.
DIET_CALLS = [
    "sigil_diet_node_init", "sigil_diet_gen_key_pair", "sigil_diet_config_default",
    "sigil_diet_node_end", "sigil_diet_node_identity", "sigil_diet_node_add_neighbour",
    "sigil_diet_node_handle", "sigil_diet_node_poll_transmit", "sigil_diet_node_poll_timeout",
    "sigil_diet_node_send", "sigil_diet_node_phase", "sigil_diet_node_counters",
]
CALLS = {"device": DEVICE_CALLS, "dtls": DTLS_CALLS, "diet": DIET_CALLS}
LINKER_SCRIPT = """
MEMORY { FLASH : ORIGIN = 0x00000000, LENGTH = 1M
         RAM : ORIGIN = 0x20000000, LENGTH = 256K }
SECTIONS {
  .text : { *(.text .text.*) } > FLASH
  .rodata : { *(.rodata .rodata.*) } > FLASH
  .data : { *(.data .data.*) } > RAM AT > FLASH
  .bss (NOLOAD) : { *(.bss .bss.*) *(COMMON) } > RAM
  /DISCARD/ : { *(.ARM.exidx .ARM.exidx.* .ARM.extab.*) }
}
"""


def rust_lld():
    sysroot = subprocess.check_output(["rustc", "--print", "sysroot"], text=True).strip()
    found = glob.glob(os.path.join(sysroot, "lib/rustlib/*/bin/rust-lld"))
    if not found:
        sys.exit("rust-lld not found in the Rust sysroot")
    return found[0]


def build(features):
    """libsigil.a as examples/c/m4/Makefile builds it (the same target directories)."""
    target_dir = os.path.join(ROOT, "target", "c-m4-lib", features.replace(",", "-"))
    subprocess.check_call(
        ["cargo", "rustc", "--quiet", "--profile", "size", "-p", "sigil-c", "--target", TARGET,
         "--no-default-features", "--features", features, "--target-dir", target_dir,
         "--crate-type", "staticlib"],
        cwd=ROOT)
    return os.path.join(target_dir, TARGET, "size", "libsigil.a")


def measure(lib, work, calls):
    script = os.path.join(work, "link.ld")
    with open(script, "w") as f:
        f.write(LINKER_SCRIPT)
    elf = os.path.join(work, "image.elf")
    subprocess.check_call(
        [rust_lld(), "-flavor", "gnu", "-T", script, "--gc-sections", "-e", calls[0],
         "--defsym=sigil_panic_hook=0", *[f"--undefined={s}" for s in calls],
         "-o", elf, lib])
    sizes = {}
    with open(elf, "rb") as f:
        for s in ELFFile(f).iter_sections():
            sizes[s.name] = s["sh_size"]
    flash = sizes.get(".text", 0) + sizes.get(".rodata", 0) + sizes.get(".data", 0)
    ram = sizes.get(".data", 0) + sizes.get(".bss", 0)
    return flash, ram


def main():
    print("| features | flash | static RAM |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as work:
        for name, features, *sets in FEATURES:
            calls = [c for k in (sets[0] if sets else ["device"]) for c in CALLS[k]]
            flash, ram = measure(build(features), work, calls)
            print(f"| {name} | {flash:,} B | {ram:,} B |", flush=True)


if __name__ == "__main__":
    main()
