"""The emulator's core on small hand-written PTX kernels: control flow, warp instructions, barriers, the
two timing modes, and every diagnosis it promises (hang report, bounds, mbarrier misuse, unimplemented
instructions). No driver and no DSL: launches are built here."""

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from emulator import EmulatorError, HangError
from emulator.launch import execute
from emulator.memory import GlobalMemory

HEADER = """.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 __dynamic_shmem__0[];
.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1
)
.reqntid {threads}, 1, 1
{{
	.reg .pred %p<16>;
	.reg .b32 %r<64>;
	.reg .b64 %rd<16>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u32 %r1, [k_param_1];
	mov.u32 %r2, %tid.x;
	mov.u32 %r20, __dynamic_shmem__0;
"""


def run(body: str, out: np.ndarray, arg: int = 0, *, threads: int = 64, mode: str = "eager", seed: int = 0,
        grid=(1, 1, 1), cluster=(1, 1, 1), roles=None):
    ptx = HEADER.format(threads=threads) + body + "\n}\n"
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=grid, block=(threads, 1, 1), cluster=cluster,
                             shared_bytes=1024, attributes={},
                             params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", arg)))
    return execute(launch, ptx, memory, mode=mode, seed=seed, warp_roles=roles, step_budget=200_000)


STORE_R3 = """
	mul.wide.u32 %rd2, %r2, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r3;
	ret;
"""


@pytest.mark.parametrize("mode", ["eager", "adversarial"])
def test_loop_divergence_and_reconvergence(mode):
    body = """
	mov.u32 %r3, 0;
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r3, %r3, %r2;
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_loop;
	and.b32 %r5, %r2, 1;
	setp.eq.s32 %p2, %r5, 1;
	@%p2 bra $L_odd;
	mul.lo.s32 %r3, %r3, 2;
	bra.uni $L_join;
$L_odd:
	neg.s32 %r3, %r3;
$L_join:
	shfl.sync.bfly.b32 %r6, %r3, 1, 31, -1;
	add.s32 %r3, %r3, %r6;
""" + STORE_R3
    out = np.full(64, -7, np.int32)
    run(body, out, 5, mode=mode, seed=4)
    t = np.arange(64)
    v = np.where(t % 2 == 1, -5 * t, 10 * t)
    assert (out == v + v[t ^ 1]).all()


def test_bar_sync_orders_shared_memory_across_warps():
    body = """
	shl.b32 %r9, %r2, 2;
	add.s32 %r10, %r20, %r9;
	st.shared.u32 [%r10], %r2;
	bar.sync 0;
	xor.b32 %r11, %r2, 63;
	shl.b32 %r12, %r11, 2;
	add.s32 %r13, %r20, %r12;
	ld.shared.u32 %r3, [%r13];
""" + STORE_R3
    for seed in range(3):
        out = np.zeros(64, np.int32)
        run(body, out, mode="adversarial", seed=seed)
        assert (out == np.arange(64) ^ 63).all()


def test_mbarrier_phases_between_producer_and_consumer_warps():
    """Warp 1 produces 3 values through a one-slot buffer guarded by full/empty mbarriers (lane 0 of each
    warp arrives); warp 0 sums."""
    body = """
	setp.ne.s32 %p1, %r2, 0;
	@%p1 bra $L_skip_init;
	mbarrier.init.shared.b64 [%r20], 1;
	add.s32 %r21, %r20, 8;
	mbarrier.init.shared.b64 [%r21], 1;
$L_skip_init:
	bar.sync 0;
	add.s32 %r21, %r20, 8;
	add.s32 %r22, %r20, 16;
	mov.u32 %r4, 0;
	mov.u32 %r3, 0;
	shr.u32 %r7, %r2, 5;
	and.b32 %r10, %r2, 31;
	setp.eq.s32 %p6, %r10, 0;
	setp.eq.s32 %p2, %r7, 1;
	@%p2 bra $L_producer;
$L_consume:
	and.b32 %r8, %r4, 1;
$L_wait_full:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r20], %r8;
	@!%p3 bra $L_wait_full;
	ld.shared.u32 %r9, [%r22];
	add.s32 %r3, %r3, %r9;
	@%p6 mbarrier.arrive.shared::cta.b64 _, [%r21];
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p4, %r4, 3;
	@%p4 bra $L_consume;
	bra.uni $L_done;
$L_producer:
	and.b32 %r8, %r4, 1;
	xor.b32 %r8, %r8, 1;
$L_wait_empty:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r21], %r8;
	@!%p3 bra $L_wait_empty;
	add.s32 %r9, %r4, 10;
	st.shared.u32 [%r22], %r9;
	@%p6 mbarrier.arrive.shared::cta.b64 _, [%r20];
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p4, %r4, 3;
	@%p4 bra $L_producer;
$L_done:
""" + STORE_R3
    for mode, seed in (("eager", 0), ("adversarial", 1), ("adversarial", 2)):
        out = np.zeros(64, np.int32)
        run(body, out, mode=mode, seed=seed)
        assert (out[:32] == 10 + 11 + 12).all()


def test_hang_is_reported_with_role_line_and_barrier_state():
    """Lane 0 of each of the two warps arrives on a barrier that expects `count` arrivals, then all wait."""
    body = """
	and.b32 %r10, %r2, 31;
	setp.eq.s32 %p6, %r10, 0;
	setp.ne.s32 %p1, %r2, 0;
	@%p1 bra $L_skip;
	mbarrier.init.shared.b64 [%r20], COUNT;
$L_skip:
	bar.sync 0;
	@%p6 mbarrier.arrive.shared::cta.b64 _, [%r20];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r20], 0;
	@!%p3 bra $L_wait;
	ret;
"""
    out = np.zeros(64, np.int32)
    roles = {0: "producer", 1: "consumer"}
    with pytest.raises(HangError) as e:
        run(body.replace("COUNT", "3"), out, roles=roles)
    report = e.value.report
    assert "warp 0 (producer)" in report and "warp 1 (consumer)" in report
    assert "mbarrier at shared 0x400" in report and "1/3 arrivals pending" in report
    assert "PTX line 28 `mbarrier.try_wait" in report
    run(body.replace("COUNT", "2"), out, roles=roles)  # the right count completes


@pytest.mark.parametrize("defect, kind, text", [
    ("st.global.u32 [%rd3+256], %r3;", "global-bounds", "past the end of out"),
    ("st.global.u32 [%rd3+2], %r3;", "misaligned", "4 B"),
])
def test_global_access_errors_name_the_line(defect, kind, text):
    body = "mov.u32 %r3, 1;\n" + STORE_R3.replace("st.global.u32 [%rd3], %r3;", defect)
    with pytest.raises(EmulatorError) as e:
        run(body, np.zeros(64, np.int32))
    assert e.value.kind == kind and text in str(e.value)
    assert "PTX line" in e.value.where and defect.split()[0] in e.value.where


def test_mbarrier_misuse_is_reported():
    with pytest.raises(EmulatorError, match="used before mbarrier.init"):
        run("mbarrier.arrive.shared::cta.b64 _, [%r20];\nret;", np.zeros(64, np.int32))
    too_many = """
	setp.ne.s32 %p1, %r2, 0;
	@%p1 bra $L_end;
	mbarrier.init.shared.b64 [%r20], 2;
	mbarrier.arrive.shared::cta.b64 _, [%r20], 3;
$L_end:
	ret;
"""
    with pytest.raises(EmulatorError, match="3 arrival.s. on mbarrier 0x400 whose phase 0 has 2 pending"):
        run(too_many, np.zeros(64, np.int32))


def test_unimplemented_instruction_is_an_error_naming_it():
    with pytest.raises(EmulatorError, match="instruction brev.b32 is not implemented"):
        run("brev.b32 %r3, %r2;\nret;", np.zeros(64, np.int32))


def test_shared_out_of_bounds():
    with pytest.raises(EmulatorError, match="shared offset"):
        run("st.shared.u32 [%r20+4096], %r2;\nret;", np.zeros(64, np.int32))


def test_aligned_instruction_in_divergent_code_is_reported():
    body = """
	setp.lt.u32 %p1, %r2, 16;
	@%p1 bra $L_half;
	bra.uni $L_end;
$L_half:
	bar.sync 0;
$L_end:
	ret;
"""
    with pytest.raises(EmulatorError, match="aligned"):
        run(body, np.zeros(64, np.int32))


def test_integer_semantics():
    body = """
	mov.u32 %r30, -3;
	shr.s32 %r31, %r30, 1;
	shr.u32 %r32, %r30, 28;
	mul.hi.u32 %r33, %r30, 16;
	mul.hi.s32 %r34, %r30, 16;
	prmt.b32 %r35, %r30, 0x11223344, 0x0415;
	setp.eq.s32 %p5, %r2, 0;
	@!%p5 bra $L_end;
	st.global.u32 [%rd1], %r31;
	st.global.u32 [%rd1+4], %r32;
	st.global.u32 [%rd1+8], %r33;
	st.global.u32 [%rd1+12], %r34;
	st.global.u32 [%rd1+16], %r35;
$L_end:
	ret;
"""
    out = np.zeros(64, np.uint32)
    run(body, out)
    assert out[0] == np.uint32(-2 & 0xFFFFFFFF)  # arithmetic shift of -3
    assert out[1] == 0xF
    assert out[2] == 0xF  # (2^32 - 3) * 16 >> 32
    assert out[3] == 0xFFFFFFFF  # -3 * 16 >> 32, signed
    assert out[4] == 0xFD44FF33  # bytes 5, 1, 4, 0 of {b, a}


def test_an_address_with_a_negative_offset_as_llvm_writes_it():
    """`[reg+-imm]` (PTX ISA 6.4.1: [reg+imm], imm signed), as LLVM's NVPTX backend writes a negative offset
    (the self_warm kernel at G = 1 has `[%rd148+-24]`), addresses below the register; `[reg-imm]` too."""
    body = """
	setp.eq.s32 %p5, %r2, 0;
	@!%p5 bra $L_end;
	add.s64 %rd3, %rd1, 32;
	mov.u32 %r30, 7;
	st.global.u32 [%rd3+-24], %r30;
	mov.u32 %r31, 9;
	st.global.u32 [%rd3-16], %r31;
	ld.global.u32 %r32, [%rd3+-24];
	st.global.u32 [%rd3+0], %r32;
$L_end:
	ret;
"""
    out = np.zeros(16, np.uint32)
    run(body, out)
    assert list(out[:9]) == [0, 0, 7, 0, 9, 0, 0, 0, 7]
