"""Runs functions of a bare-metal Cortex-M ELF image inside unicorn and measures them.

For each call it reports the exact number of executed instructions, an estimated cycle count
from `cycles.py`'s per-instruction model, and the exact maximum stack depth: the stack is
painted with a pattern before the call and scanned for the deepest changed word after it.
"""
import struct

import capstone
import unicorn
from elftools.elf.elffile import ELFFile
from unicorn import arm_const as A

from cycles import CycleModel

FLASH = (0x0000_0000, 512 * 1024)
RAM = (0x2000_0000, 256 * 1024)  # firmware/memory.x
# Where a measured function returns to: mapped, never part of the image.
RETURN = FLASH[0] + FLASH[1] - 0x100
PAINT = 0x5A5A5A5A

CORES = {
    "cortex-m4": A.UC_CPU_ARM_CORTEX_M4,
    "cortex-m0plus": A.UC_CPU_ARM_CORTEX_M0,
}


class EmulationError(Exception):
    pass


class Image:
    """An ELF image: its loadable bytes, symbols and section sizes."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            elf = ELFFile(f)
            self.segments = []
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_filesz"]:
                    self.segments.append((seg["p_vaddr"], seg["p_paddr"], seg.data()))
            self.symbols = {}
            self.sized_symbols = []
            for sym in elf.get_section_by_name(".symtab").iter_symbols():
                if sym.name:
                    self.symbols[sym.name] = sym["st_value"]
                    if sym["st_size"] and sym["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT"):
                        sec = sym["st_shndx"]
                        secname = elf.get_section(sec).name if isinstance(sec, int) else ""
                        self.sized_symbols.append((sym.name, sym["st_size"], secname))
            self.sections = {
                s.name: s["sh_size"] for s in elf.iter_sections() if s["sh_flags"] & 2
            }

    def flash_bytes(self):
        """What the image occupies in flash: code, read-only data, .data's initial values."""
        return sum(
            size for name, size in self.sections.items()
            if name in (".vector_table", ".text", ".rodata", ".data")
        )

    def static_ram_bytes(self):
        return sum(self.sections.get(n, 0) for n in (".data", ".bss", ".uninit"))

    def ops(self, prefix="sigil_op_"):
        return sorted(
            (name[len(prefix):], addr) for name, addr in self.symbols.items()
            if name.startswith(prefix)
        )


class Machine:
    def __init__(self, image, core, count_cycles=True):
        self.image = image
        self.core = core
        self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(CORES[core])
        self.uc.mem_map(*FLASH)
        self.uc.mem_map(*RAM)
        for vaddr, paddr, data in image.segments:
            self.uc.mem_write(paddr, data)
            if vaddr != paddr:
                self.uc.mem_write(vaddr, data)
        # Return trampoline: a Thumb `b .` that is never executed (emulation stops first).
        self.uc.mem_write(RETURN, b"\xfe\xe7")
        self.stack_top = image.symbols["_stack_start"]
        self.stack_bottom = (image.symbols.get("__euninit") or image.symbols["__ebss"] + 3) & ~3
        self.model = CycleModel(core)
        self.counting = count_cycles
        self.md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
        self.md.detail = True
        self.blocks = {}
        self._hooks = []
        self.intercepts = {}
        self.patched = []
        self.halted = False
        self.progress = None

    def paint(self):
        n = (self.stack_top - self.stack_bottom) // 4
        self.uc.mem_write(self.stack_bottom, struct.pack("<I", PAINT) * n)

    def stack_depth(self):
        n = (self.stack_top - self.stack_bottom) // 4
        words = struct.unpack("<%dI" % n, bytes(self.uc.mem_read(self.stack_bottom, n * 4)))
        for i, w in enumerate(words):
            if w != PAINT:
                return self.stack_top - (self.stack_bottom + 4 * i)
        return 0

    def _block(self, addr, size):
        b = self.blocks.get((addr, size))
        if b is None:
            code = bytes(self.uc.mem_read(addr, size))
            b = self.model.block(list(self.md.disasm(code, addr)))
            self.blocks[(addr, size)] = b
        return b

    def call(self, symbol_or_addr, args=(), limit=2_000_000_000):
        """Calls a function with up to four word arguments and measures it.
        Returns (r0, instructions, cycles or None, max stack depth in bytes)."""
        addr = symbol_or_addr if isinstance(symbol_or_addr, int) else self.image.symbols[symbol_or_addr]
        uc = self.uc
        self.paint()
        for i, a in enumerate(args):
            uc.reg_write(A.UC_ARM_REG_R0 + i, a)
        uc.reg_write(A.UC_ARM_REG_SP, self.stack_top)
        uc.reg_write(A.UC_ARM_REG_LR, RETURN | 1)
        state = {"insns": 0, "cycles": 0, "prev": None}
        # The counts so far, for intercepts: instructions up to the end of the current block,
        # cycles up to its start.
        self.progress = state

        def on_block(uc, addr, size, _):
            b = self._block(addr, size)
            prev = state["prev"]
            if prev is not None:
                # The previous block's final branch was taken iff this is not its fall-through.
                state["cycles"] += prev.cycles_taken if addr != prev.end else prev.cycles_fallthrough
            state["insns"] += b.count
            state["prev"] = b
            hook = self.intercepts.get(addr)
            if hook is not None:
                hook(self)

        hooks = []
        if self.counting or self.intercepts:
            hooks.append(uc.hook_add(unicorn.UC_HOOK_BLOCK, on_block))
        start = addr | 1
        try:
            while True:
                try:
                    uc.emu_start(start, RETURN, count=limit)
                    break
                except unicorn.UcError as e:
                    pc = uc.reg_read(A.UC_ARM_REG_PC)
                    if e.errno == unicorn.UC_ERR_INSN_INVALID and self._patch_single_ldm(pc):
                        start = pc | 1
                        state["prev"] = None
                        continue
                    raise EmulationError(
                        f"{self.core}: {e} at pc={pc:#x} in {self.symbol_at(pc)}"
                    ) from None
        finally:
            for h in hooks:
                uc.hook_del(h)
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        if pc & ~1 != RETURN and not self.halted:
            raise EmulationError(f"{self.core}: stopped at pc={pc:#x} ({self.symbol_at(pc)}): instruction limit")
        if state["prev"] is not None:
            state["cycles"] += state["prev"].cycles_taken  # the final return is a taken branch
        counted = self.counting or bool(self.intercepts)
        return (
            uc.reg_read(A.UC_ARM_REG_R0),
            state["insns"] if counted else None,
            state["cycles"] if counted else None,
            self.stack_depth(),
        )

    def _patch_single_ldm(self, pc):
        """`LDM.W Rn{!}, {Rt}` with one register is UNPREDICTABLE in ARMv7-M but executes as a
        load on real Cortex-M4 cores, and p256-cm4's assembly uses it; QEMU (so unicorn)
        refuses it. Rewrite it in place to the load it performs (same size, same cycle cost
        in the model: 1+N = 2 = LDR) and resume."""
        hw1, hw2 = struct.unpack("<HH", bytes(self.uc.mem_read(pc, 4)))
        if hw1 & 0xFFD0 != 0xE890:
            return False
        regs = [r for r in range(16) if hw2 >> r & 1]
        if len(regs) != 1 or regs[0] >= 13:
            return False
        n, t, wback = hw1 & 0xF, regs[0], hw1 >> 5 & 1
        if wback:  # LDR.W Rt, [Rn], #4 (T4, post-indexed)
            new = struct.pack("<HH", 0xF850 | n, t << 12 | 0xB04)
        else:  # LDR.W Rt, [Rn, #0] (T3)
            new = struct.pack("<HH", 0xF8D0 | n, t << 12)
        self.uc.mem_write(pc, new)
        self.uc.ctl_remove_cache(pc, pc + 4)
        self.blocks = {k: v for k, v in self.blocks.items() if not (k[0] <= pc < k[0] + k[1])}
        self.patched.append(pc)
        return True

    def deepest_chain(self, symbol, setup=None):
        """Runs `symbol` once more, following function entries, and returns the call chain at
        the deepest stack point: [(function, frame bytes)], outermost first. A function's frame
        is the distance from its entry SP to the next deeper function's entry SP."""
        starts = {self.image.symbols[n] & ~1: n for n, _, _ in self.image.sized_symbols}
        shadow, best = [], {"sp": 1 << 40, "chain": []}

        def on_block(uc, addr, size, _):
            sp = uc.reg_read(A.UC_ARM_REG_SP)
            while shadow and shadow[-1][1] < sp:
                shadow.pop()
            if addr in starts:
                # A function entered at the SP of an earlier entry replaces it: that one
                # returned (or tail-called).
                while shadow and shadow[-1][1] <= sp:
                    shadow.pop()
                shadow.append((starts[addr], sp))
            if sp < best["sp"]:
                best["sp"], best["chain"] = sp, list(shadow)

        h = self.uc.hook_add(unicorn.UC_HOOK_BLOCK, on_block)
        try:
            if setup:
                setup(self)
            self.call(symbol)
        finally:
            self.uc.hook_del(h)
        entries = best["chain"]
        return [
            [name, sp - (entries[i + 1][1] if i + 1 < len(entries) else best["sp"])]
            for i, (name, sp) in enumerate(entries)
        ]

    def halt(self):
        """Ends the running call from an intercept (for images that never return)."""
        self.halted = True
        self.uc.emu_stop()

    def read(self, symbol, n):
        return bytes(self.uc.mem_read(self.image.symbols[symbol], n))

    def read_u32(self, symbol):
        return struct.unpack("<I", self.read(symbol, 4))[0]

    def write(self, symbol, data):
        self.uc.mem_write(self.image.symbols[symbol], data)

    def symbol_at(self, pc):
        best = None
        for name, size, _ in self.image.sized_symbols:
            a = self.image.symbols[name] & ~1
            if a <= (pc & ~1) < a + size:
                best = name
        return best or "?"
