"""Flash and RAM of a linked image, broken down by the crate each symbol comes from."""
import re
from collections import defaultdict

FLASH_SECTIONS = (".vector_table", ".text", ".rodata")
RAM_SECTIONS = (".data", ".bss", ".uninit")


def _legacy_path(name):
    """The path segments of a legacy-mangled Rust symbol (`_ZN<len><ident>...E`)."""
    if not name.startswith("_ZN"):
        return None
    i, segs = 3, []
    while i < len(name) and name[i] != "E":
        m = re.match(r"\d+", name[i:])
        if not m:
            return None
        n = int(m.group())
        i += len(m.group())
        segs.append(name[i:i + n])
        i += n
    return segs


def crate_of(name):
    segs = _legacy_path(name)
    if segs is None:
        if name.startswith("_R"):  # v0 mangling: crate name follows `C<disambiguator>?<len>`
            m = re.search(r"C(?:s[0-9a-zA-Z]*_)?(\d+)([a-zA-Z_][a-zA-Z0-9_]*)", name)
            if m:
                return m.group(2)[: int(m.group(1))]
        if name.startswith(("__aeabi", "__udiv", "__div", "__mul", "__ashl", "__lshr", "__clz",
                            "memcpy", "memset", "memmove", "memcmp", "__a", "__u", "__g", "__l",
                            "__e", "__f", "__t", "__n", "__s", "__c")):
            return "compiler_builtins"
        if name.startswith("P256_") or name in ("mul288x288",):
            return "p256_cm4"
        if name.startswith(("fe25519_",)):
            return "salty"
        if name.startswith("sigil_"):
            return "sigil_firmware"
        return "other"
    first = segs[0]
    if first.startswith("_$LT$"):
        # `<T as Trait>::f`: take the crate of T.
        inner = first[5:]
        m = re.match(r"[a-zA-Z_][a-zA-Z0-9_]*", inner)
        return m.group() if m else "other"
    return first


def breakdown(image):
    """{crate: {"flash": bytes, "ram": bytes}} from the image's sized symbols."""
    out = defaultdict(lambda: {"flash": 0, "ram": 0})
    for name, size, section in image.sized_symbols:
        kind = "flash" if section.startswith(FLASH_SECTIONS) else (
            "ram" if section.startswith(RAM_SECTIONS) else None)
        if kind:
            out[crate_of(name)][kind] += size
    return dict(out)
