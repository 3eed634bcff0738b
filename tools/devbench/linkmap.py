"""Flash and RAM of an image linked by GNU ld, by the input file each section came from, read
from the linker's map file (`-Wl,-Map=...`). For the C sensor image: the C objects, the
members of libsigil.a by crate (with LTO: `sigil`, all the Rust code in one object, and
compiler_builtins), and
newlib and libgcc, which supply whatever the others leave undefined."""
import os
import re
from collections import defaultdict

FLASH = (".vector_table", ".text", ".rodata")
RAM = (".bss",)
BOTH = (".data",)  # initial values in flash, the variables in RAM

_ENTRY = re.compile(r"^ (\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(\S.*))?$")


def group_of(path):
    """A readable name for an input file of the link."""
    m = re.match(r"(.*\.a)\((.*)\)$", path)
    if not m:
        return os.path.basename(path)
    lib, member = os.path.basename(m.group(1)), m.group(2)
    if lib == "libsigil.a":
        # Members are <crate>-<hash>.<crate>.<hash>-cgu.<n>.rcgu.o: name them by crate. With LTO
        # `sigil` (sigil-c's object) holds all the Rust code but compiler_builtins.
        return f"libsigil.a: {member.split('-')[0]}"
    return lib


def by_input(map_path):
    """{input: {"flash": bytes, "ram": bytes}}; alignment fill is "(alignment fill)".

    An input section's size in the map is its size before the linker merged duplicate
    constants and strings (SHF_MERGE sections such as .rodata.str1.1), so each entry counts up
    to the next entry's address at most: the sums add up to the output sections' sizes."""
    out = defaultdict(lambda: {"flash": 0, "ram": 0})
    sections = {}  # output section -> (start, size, [(address, size, input)])
    section = None
    with open(map_path) as f:
        lines = f.read().split("Linker script and memory map", 1)[1].splitlines()
    for line in lines:
        if line and not line.startswith(" "):
            parts = line.split()
            section = parts[0]
            if len(parts) >= 3 and parts[1].startswith("0x"):
                sections[section] = (int(parts[1], 16), int(parts[2], 16), [])
            continue
        if section not in sections:
            continue
        if line.startswith(" *fill*"):
            parts = line.split()
            sections[section][2].append((int(parts[1], 16), int(parts[2], 16), "(alignment fill)"))
            continue
        m = _ENTRY.match(line)
        if m and m.group(4) and not m.group(4).startswith("="):
            sections[section][2].append((int(m.group(2), 16), int(m.group(3), 16), group_of(m.group(4).strip())))
    for name, (start, size, entries) in sections.items():
        kind = "flash" if name in FLASH else "ram" if name in RAM else "both" if name in BOTH else None
        if kind is None:
            continue
        entries.sort(key=lambda e: e[0])
        for i, (addr, n, who) in enumerate(entries):
            end = entries[i + 1][0] if i + 1 < len(entries) else start + size
            n = max(0, min(n, end - addr))
            if kind in ("flash", "both"):
                out[who]["flash"] += n
            if kind in ("ram", "both"):
                out[who]["ram"] += n
    return {k: v for k, v in out.items() if v["flash"] or v["ram"]}
