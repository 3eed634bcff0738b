"""Per-instruction cycle models of the Cortex-M4 and Cortex-M0+.

An estimate, not a measurement: real cores add flash wait states, bus contention and
data-dependent pipeline effects. The tables follow the processors' Technical Reference
Manuals (Cortex-M4 TRM r0p1 §3.3.1 "Cortex-M4 instruction set summary"; Cortex-M0+ TRM
r0p1 §3.3 "Instruction set summary"), with these choices, which docs/device-costs.md states
next to the calibration against p256-cm4's published hardware cycles:

Cortex-M4: data processing, multiply and multiply-accumulate (incl. UMULL/UMLAL/UMAAL) 1;
divide 7 (TRM: 2-12, data dependent); single load/store 2, or 1 when it directly follows
another single load/store (the TRM's address/data pipelining); LDRD/STRD 3; LDM/STM/PUSH/POP
1+N; a taken branch or any write to PC adds P = PIPELINE_REFILL_M4 (TRM: 1-3); TBB/TBH 2+P.

Cortex-M0+: data processing 1; MULS 1 (the single-cycle multiplier option, which the common
parts ship; the small multiplier takes 32); load/store 2; LDM/STM/PUSH/POP 1+N, POP with PC
3+N; B/Bcc taken 2 (not taken 1); BL 3; BX/BLX 2.
"""
import capstone
from capstone import arm_const as A

PIPELINE_REFILL_M4 = 2

LOADSTORE_SINGLE = {
    A.ARM_INS_LDR, A.ARM_INS_LDRB, A.ARM_INS_LDRH, A.ARM_INS_LDRSB, A.ARM_INS_LDRSH,
    A.ARM_INS_STR, A.ARM_INS_STRB, A.ARM_INS_STRH, A.ARM_INS_LDREX, A.ARM_INS_STREX,
    A.ARM_INS_LDRT, A.ARM_INS_STRT, A.ARM_INS_LDRBT, A.ARM_INS_STRBT, A.ARM_INS_LDRHT,
    A.ARM_INS_STRHT, A.ARM_INS_VLDR, A.ARM_INS_VSTR,
}
MULTI = {
    A.ARM_INS_LDM, A.ARM_INS_LDMDB, A.ARM_INS_STM, A.ARM_INS_STMDB, A.ARM_INS_PUSH,
    A.ARM_INS_POP, A.ARM_INS_VPUSH, A.ARM_INS_VPOP, A.ARM_INS_VLDMIA, A.ARM_INS_VLDMDB,
    A.ARM_INS_VSTMIA, A.ARM_INS_VSTMDB,
}
DOUBLE = {A.ARM_INS_LDRD, A.ARM_INS_STRD}
DIVIDE = {A.ARM_INS_SDIV, A.ARM_INS_UDIV}
BRANCH = {A.ARM_INS_B, A.ARM_INS_CBZ, A.ARM_INS_CBNZ}
CALL = {A.ARM_INS_BL, A.ARM_INS_BLX}
TABLE = {A.ARM_INS_TBB, A.ARM_INS_TBH}


class Block:
    """A translation block: instruction count and its cycles with the final branch taken or not."""
    __slots__ = ("count", "cycles_fallthrough", "cycles_taken", "end")

    def __init__(self, count, fallthrough, taken, end):
        self.count = count
        self.cycles_fallthrough = fallthrough
        self.cycles_taken = taken
        self.end = end


def _register_count(insn):
    regs = [op for op in insn.operands if op.type == capstone.CS_OP_REG]
    if insn.id in (A.ARM_INS_LDM, A.ARM_INS_LDMDB, A.ARM_INS_STM, A.ARM_INS_STMDB,
                   A.ARM_INS_VLDMIA, A.ARM_INS_VLDMDB, A.ARM_INS_VSTMIA, A.ARM_INS_VSTMDB):
        regs = regs[1:]  # the base register
    return max(1, len(regs))


def _writes_pc(insn):
    try:
        _, written = insn.regs_access()
    except capstone.CsError:
        return False
    return A.ARM_REG_PC in written


class CycleModel:
    def __init__(self, core):
        if core not in ("cortex-m4", "cortex-m0plus"):
            raise ValueError(core)
        self.core = core

    def block(self, insns):
        if not insns:
            return Block(0, 0, 0, 0)
        total = 0
        prev_single = False
        for insn in insns[:-1]:
            c, prev_single = self._cost(insn, prev_single)
            total += c
        last = insns[-1]
        c, _ = self._cost(last, prev_single)
        fall = total + c
        taken = fall + self._taken_penalty(last)
        return Block(len(insns), fall, taken, last.address + last.size)

    def _cost(self, insn, prev_single):
        i = insn.id
        if self.core == "cortex-m4":
            if i in LOADSTORE_SINGLE:
                c = 1 if prev_single else 2
                return c, True
            if i in DOUBLE:
                return 3, False
            if i in MULTI:
                return 1 + _register_count(insn), False
            if i in DIVIDE:
                return 7, False
            if i in TABLE:
                return 2, False
            return 1, False
        # Cortex-M0+
        if i in LOADSTORE_SINGLE:
            return 2, False
        if i in MULTI:
            n = _register_count(insn)
            return (3 + n if _writes_pc(insn) else 1 + n), False
        if i == A.ARM_INS_BL:
            return 3, False
        if i in (A.ARM_INS_BX, A.ARM_INS_BLX):
            return 2, False
        return 1, False

    def _taken_penalty(self, insn):
        """Extra cycles when the block's final instruction transfers control."""
        i = insn.id
        if self.core == "cortex-m4":
            if i in BRANCH or i in CALL or i in TABLE or i == A.ARM_INS_BX or _writes_pc(insn):
                return PIPELINE_REFILL_M4
            return 0
        if i in BRANCH:
            return 1  # 2 taken vs 1 not taken
        if i in MULTI:
            return 0  # POP {pc} already counted 3+N
        if i in CALL or i == A.ARM_INS_BX:
            return 0  # fixed costs above
        if _writes_pc(insn):
            return 1
        return 0
