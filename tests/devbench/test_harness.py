"""The device-cost harness itself: instruction counting, the cycle model, the painted stack,
the LDM rewrite, crate attribution and the known-answer check. Runs after
`scripts/bench-device --quick`, which builds the images under firmware/target/variants/."""
import os
import struct
import sys

import capstone
import pytest
import unicorn
from unicorn import arm_const as A

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import run  # noqa: E402
from cycles import CycleModel  # noqa: E402
from emulator import Image, Machine  # noqa: E402
from sizes import crate_of  # noqa: E402

M4 = os.path.join(ROOT, "firmware", "target", "variants", "m4-rustcrypto", "bench")
M0 = os.path.join(ROOT, "firmware", "target", "variants", "m0plus-rustcrypto", "bench")

pytestmark = pytest.mark.skipif(not os.path.exists(M4), reason="run scripts/bench-device --quick first")


def thumb(hexcode):
    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
    md.detail = True
    return list(md.disasm(bytes.fromhex(hexcode), 0x1000))


LOOP = bytes.fromhex("0a20" "0138" "fdd1" "7047")  # movs r0,#10; 1: subs r0,#1; bne 1b; bx lr


def test_a_counted_loop_gives_the_exact_instructions_and_model_cycles():
    for core, cycles in (("cortex-m4", 1 + 10 + 9 * 3 + 1 + 3), ("cortex-m0plus", 1 + 10 + 9 * 2 + 1 + 2)):
        m = Machine(Image(M4), core)
        m.uc.mem_write(0x7F000, LOOP)
        r0, insns, got, _ = m.call(0x7F000)
        assert (r0, insns, got) == (0, 1 + 10 * 2 + 1, cycles), core


def test_block_counting_agrees_with_counting_every_instruction():
    """Unicorn's per-instruction hook skips instructions whose IT condition fails; the core
    still issues them (one cycle each), and the block count includes them."""
    img = Image(M4)
    m = Machine(img, "cortex-m4", count_cycles=True)
    _, insns, cycles, _ = m.call("sigil_op_sha256_256")
    per_insn = [0]
    m2 = Machine(img, "cortex-m4", count_cycles=False)
    h = m2.uc.hook_add(unicorn.UC_HOOK_CODE, lambda *a: per_insn.__setitem__(0, per_insn[0] + 1))
    m2.call("sigil_op_sha256_256")
    m2.uc.hook_del(h)
    assert per_insn[0] > 10_000
    assert 0 <= insns - per_insn[0] <= insns // 1000
    assert insns <= cycles <= 3 * insns


def test_same_run_same_counts_and_stack():
    img = Image(M0)
    a = Machine(img, "cortex-m0plus").call("sigil_op_identity")
    b = Machine(img, "cortex-m0plus").call("sigil_op_identity")
    assert a == b
    assert 0 < a[3] < 4096  # a real, bounded stack depth


def test_cortex_m4_costs_follow_the_trm():
    m = CycleModel("cortex-m4")
    # push {r4, r5, r6, r7, lr}: 1 + 5
    assert m.block(thumb("f0b5")).cycles_fallthrough == 6
    # ldr r0, [r1]; ldr r2, [r1, #4]: 2 then 1 (pipelined)
    assert m.block(thumb("08684a68")).cycles_fallthrough == 3
    # umull r0, r1, r2, r3: 1
    assert m.block(thumb("a2fb0301")).cycles_fallthrough == 1
    # bne: 1 not taken, 1 + P taken
    b = m.block(thumb("00d1"))
    assert (b.cycles_fallthrough, b.cycles_taken) == (1, 3)


def test_cortex_m0plus_costs_follow_the_trm():
    m = CycleModel("cortex-m0plus")
    assert m.block(thumb("08684a68")).cycles_fallthrough == 4  # no load pipelining
    b = m.block(thumb("00d1"))
    assert (b.cycles_fallthrough, b.cycles_taken) == (1, 2)
    assert m.block(thumb("f0bd")).cycles_fallthrough == 3 + 5  # pop {r4-r7, pc}


def test_single_register_ldm_is_rewritten_to_the_same_load():
    img = Image(M4)
    m = Machine(img, "cortex-m4")
    code = 0x7F000
    # ldm.w r4, {r6}; ldm.w r4!, {r7}; bx lr
    m.uc.mem_write(code, bytes.fromhex("94e84000b4e880007047"))
    data = img.symbols["SIGIL_OUT"]  # static RAM, below the painted stack
    m.uc.mem_write(data, struct.pack("<I", 0xCAFEF00D))
    m.uc.reg_write(A.UC_ARM_REG_R4, data)
    m.call(code)
    assert m.uc.reg_read(A.UC_ARM_REG_R6) == 0xCAFEF00D
    assert m.uc.reg_read(A.UC_ARM_REG_R7) == 0xCAFEF00D
    assert m.uc.reg_read(A.UC_ARM_REG_R4) == data + 4  # writeback
    assert len(m.patched) == 2


def test_symbols_are_attributed_to_their_crate():
    assert crate_of("_ZN4sha26sha2564soft8compress17h0123456789abcdefE") == "sha2"
    assert crate_of("_ZN109_$LT$curve25519_dalek..field..FieldElement$u20$as$u20$core..ops..Mul$GT$3mul17habcE") == "curve25519_dalek"
    assert crate_of("_RNvNtNtCs7ldSeZOOJos_4core3fmt5float5write") == "core"
    assert crate_of("__aeabi_lmul") == "compiler_builtins"


def test_a_wrong_answer_is_reported(monkeypatch):
    bad = dict(run.KAT)
    bad["sha256_256"] = {"output": "00" * 32}
    monkeypatch.setattr(run, "KAT", bad)
    _, failures, _ = run.run_bench(M4, "cortex-m4", False)
    assert any("sha256_256" in f for f in failures)
    assert len(failures) == 1


# The C sensor image (examples/c/m4), built by `scripts/bench-device --quick` where
# arm-none-eabi-gcc exists.
C_IMAGE = os.path.join(ROOT, "target", "c-m4-images", "c-m4", "sensor_m4.elf")
RUST_SENSOR = os.path.join(ROOT, "firmware", "target", "variants", "m4-rustcrypto", "sensor")
needs_c_image = pytest.mark.skipif(not os.path.exists(C_IMAGE), reason="no C sensor image (arm-none-eabi-gcc)")


@needs_c_image
def test_the_c_sensor_sends_what_the_rust_sensor_sends():
    """Same generator, same records, same clock: the C image through libsigil.a and the Rust
    image through sigil-device directly put the same bytes on the radio, at nearly the same
    cost per reading."""
    c = run.run_sensor(C_IMAGE, "cortex-m4")
    r = run.run_sensor(RUST_SENSOR, "cortex-m4")
    assert (c["halt_code"], c["acked"]) == (0, 3)
    assert len(c["sent"]) == 4 and c["sent"] == r["sent"]
    assert bytes.fromhex(c["sent"][0])[1] == 0x02  # the registration is a POST
    per_c, per_r = c["per_reading"]["cycles"], r["per_reading"]["cycles"]
    assert abs(per_c - per_r) / per_r < 0.01
    assert 0 < c["boot"]["cycles"] < c["cycles"]


@needs_c_image
def test_the_c_image_is_counted_whole():
    """Every allocated section of the C image is one the harness counts, and the linker map's
    breakdown by input file adds up to the image."""
    import linkmap
    from elftools.elf.elffile import ELFFile
    with open(C_IMAGE, "rb") as f:
        alloc = {s.name for s in ELFFile(f).iter_sections() if s["sh_flags"] & 2}
    assert alloc == {".vector_table", ".text", ".rodata", ".data", ".bss"}
    img = Image(C_IMAGE)
    inputs = linkmap.by_input(C_IMAGE.replace(".elf", ".map"))
    assert sum(v["flash"] for v in inputs.values()) == img.flash_bytes()
    assert sum(v["ram"] for v in inputs.values()) == img.static_ram_bytes()
    assert inputs["libsigil.a: sigil"]["flash"] > 30_000
    assert inputs["sensor_m4.o"]["ram"] >= 4096  # the device state, static


@needs_c_image
def test_refused_readings_fail_the_c_sensor_run(monkeypatch):
    """A broker that refuses every reading (4.03): the image halts normally with no reading
    acknowledged, and the harness reports the run as a failure."""
    answer = run.coap_answer

    def refuse(datagram):
        a = bytearray(answer(datagram))
        if a[1] == 0x44:  # 2.04 for a reading becomes 4.03
            a[1] = 0x83
        return bytes(a)

    monkeypatch.setattr(run, "coap_answer", refuse)
    monkeypatch.setattr(run, "C_SENSOR_VARIANTS", run.C_SENSOR_VARIANTS[:1])
    failures = []
    out = run.c_sensors(failures)
    assert out["c-m4"]["acked"] == 0 and out["c-m4"]["halt_code"] == 0
    assert failures == ["C sensor c-m4: halted with 0, 0/3 readings acknowledged"]


def test_without_the_cross_compiler_the_c_sensor_is_skipped_unless_ci(monkeypatch):
    monkeypatch.setattr(run.shutil, "which", lambda _: None)
    monkeypatch.delenv("CI", raising=False)
    failures = []
    assert "arm-none-eabi-gcc not found" in run.c_sensors(failures)["skipped"]
    assert failures == []
    monkeypatch.setenv("CI", "true")
    run.c_sensors(failures)
    assert len(failures) == 1 and "arm-none-eabi-gcc" in failures[0]


@needs_c_image
def test_the_deepest_stack_run_leaves_the_measured_run_alone():
    """run_sensor(chain=True) runs the image a second time for the stack chain; what that run
    sends must not be counted into the first run's datagrams and per-reading cost."""
    plain = run.run_sensor(C_IMAGE, "cortex-m4")
    chained = run.run_sensor(C_IMAGE, "cortex-m4", chain=True)
    assert chained["sent"] == plain["sent"] and len(plain["sent"]) == 4
    assert chained["per_reading"] == plain["per_reading"]
    assert chained["deepest"] and chained["deepest"][0][0] == "main"
