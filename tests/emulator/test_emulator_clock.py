"""The timed mode's clock (emulator/clock.py) and machine descriptions (emulator/machines/): basic properties
of simulated time on hand-written PTX and on NVIDIA's kernel (quick), and the B200 kernel on the board's
benchmarks (long: the functional check still runs under the clock)."""

import json
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import require_matplotlib, require_nvidia_example
from emulator import HangError
from emulator.clock import cost_class
from emulator.machines import TAGS, load
from test_emulator_core import STORE_R3, run

ROOT = Path(__file__).resolve().parents[2]
B200 = load("b200")

LOOP = """
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_loop;
	mov.u32 %r3, %r4;
""" + STORE_R3


def cycles(stats) -> float:
    return B200.cycles(stats.timing["kernel_us"])


def test_every_constant_names_its_source_and_tag():
    for name in ("b200", "h200"):
        machine = load(name)
        for key, constant in machine.constants.items():
            assert constant.tag in TAGS and constant.source and constant.unit, (name, key)
    assert "clock_ghz" in B200.by_tag("E")  # the B200's clock under load is not known: an estimate


def timed_cycles(body: str, out: np.ndarray, arg: int = 0, machine=B200, threads: int = 32, cluster: int = 1) -> float:
    """One cluster of `cluster` CTAs of `threads` runs `body` under the clock of `machine`: its span in cycles."""
    from emulator.launch import execute
    from emulator.memory import GlobalMemory
    from test_emulator_core import HEADER

    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=(cluster, 1, 1), block=(threads, 1, 1), cluster=(cluster, 1, 1),
                             shared_bytes=1024, attributes={},
                             params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", arg)))
    stats = execute(launch, HEADER.format(threads=threads) + body + "\n}\n", memory, mode="timed",
                    machine=machine, step_budget=200_000)
    return machine.cycles(stats.timing["kernel_us"])


def test_a_dependence_chain_costs_its_latencies():
    """One warp, a loop of add -> setp -> bra, each reading the one before: with a dependent-issue latency
    of 4 and an issue cost of 2, each extra iteration costs exactly 4 + 4 + 2 cycles (the next add reads
    a register ready long before)."""
    machine = B200.replace("test", latency_alu=4, cost_alu=2)
    out = np.zeros(32, np.int32)
    short = timed_cycles(LOOP, out, 10, machine)
    assert (out == 10).all()
    long = timed_cycles(LOOP, out, 30, machine)
    assert (out == 30).all()
    assert long - short == pytest.approx(20 * (4 + 4 + 2))
    # the description as committed: a dependent instruction waits max(issue cost, latency)
    step = max(B200.cost_alu, B200.latency_alu)
    assert timed_cycles(LOOP, out, 30) - timed_cycles(LOOP, out, 10) == pytest.approx(20 * (2 * step + B200.cost_alu))



def _elected_loop(block: str) -> str:
    """LOOP with `block` issued by one elected lane per iteration, guarded as the DSL guards a copy or an MMA."""
    return LOOP.replace("$L_loop:\n", "$L_loop:\n\telect.sync %r9|%p2, -1;\n\tnot.pred %p3, %p2;\n"
                        "\t@%p3 bra $L_skip;\n" + block + "$L_skip:\n")


def test_an_elect_guard_costs_what_ptxas_leaves_of_it():
    """ptxas drops `elect.sync` / `not.pred` / `@p bra` around warp-uniform issues (SASS of this project's kernel:
    102 elect.sync in PTX, 22 ELECT left, none in the MMA warp's k-tile) and keeps ELECT before a per-thread
    mbarrier arrive: a loop of guarded scalar work costs what the unguarded work costs; the guard of an
    arrive still costs its issue slots and the elect's latency."""
    from emulator.clock import folded_elections
    from emulator.ptx import parse_module
    from test_emulator_core import HEADER

    scalar = "\tadd.s32 %r10, %r4, 7;\n\tmov.u32 %r11, %r10;\n"
    arrive = "\tmbarrier.arrive.shared.b64 %rd9, [%r12];\n"
    out = np.zeros(32, np.int32)
    plain = timed_cycles(LOOP.replace("$L_loop:\n", "$L_loop:\n" + scalar), out, 20)
    assert timed_cycles(_elected_loop(scalar), out, 20) == pytest.approx(plain)
    assert (out == 20).all()
    # the guard must branch on the elect's own negated predicate
    unrelated = _elected_loop(scalar).replace("not.pred %p3, %p2", "not.pred %p3, %p1")
    for text, folded in ((_elected_loop(scalar), 3), (_elected_loop(arrive), 0), (unrelated, 0)):
        kernel = next(iter(parse_module(HEADER.format(threads=32) + text + "\n}\n").values()))
        assert len(folded_elections(SimpleNamespace(kernel=kernel))) == folded


def test_a_kernel_reading_clock_sees_the_simulated_cycles():
    """%clock and %clock64 read the warp's simulated time (calibration/sm90_profile.py's stamps, run in the
    emulator, read the same clock the span is measured in): stamps around the loop of the chain test differ
    by exactly its cycles, 4 + 4 + 2 per iteration."""
    machine = B200.replace("test", latency_alu=4, cost_alu=2)
    stamped = ("mov.u32 %r8, %clock;\n\tmov.u64 %rd8, %clock64;\n" + LOOP.replace(STORE_R3, "")
               + "\tmov.u32 %r9, %clock;\n\tmov.u64 %rd9, %clock64;\n\tsub.s32 %r3, %r9, %r8;\n"
               "\tsub.s64 %rd9, %rd9, %rd8;\n\tcvt.u32.u64 %r10, %rd9;\n\tsub.s32 %r3, %r3, %r10;\n"
               "\tmul.lo.s32 %r3, %r3, 100000;\n\tadd.s32 %r3, %r3, %r9;\n\tsub.s32 %r3, %r3, %r8;\n" + STORE_R3)
    spans = []
    for trips in (10, 30):
        out = np.zeros(32, np.int32)
        timed_cycles(stamped, out, trips, machine)
        spans.append(int(out[0]))  # %clock's span; 0 * 100000 when %clock64 agrees
    assert spans[0] >= 10 * (4 + 4 + 2) and spans[1] - spans[0] == 20 * (4 + 4 + 2)

# one warp loads a word of `out` (line 0) into %r5 and one 128 bytes further (line 1) into %r6, then
# stores %r3 = %r5 + %r6 + 1 per lane: VARIANT says how the second load depends on the first
LOADS = """
	ld.global.u32 %r5, [%rd1];
	VARIANT
	add.s32 %r3, %r5, %r6;
	add.s32 %r3, %r3, 1;
""" + STORE_R3
INDEPENDENT = "ld.global.u32 %r6, [%rd1+128];"
ADDRESS_CHAIN = "cvt.u64.u32 %rd5, %r5;\n\tadd.s64 %rd6, %rd1, %rd5;\n\tld.global.u32 %r6, [%rd6+128];"
SAME_LINE_AFTER = "add.s32 %r7, %r5, 0;\n\tld.global.u32 %r6, [%rd1+4];\n\tadd.s32 %r6, %r6, %r7;"
SAME_LINE_BYPASS = SAME_LINE_AFTER.replace("ld.global.u32", "ld.global.cg.u32")


def loads_cycles(variant: str) -> float:
    out = np.zeros(64, np.int32)  # two 128-byte lines; the kernel stores into the first
    cycles_ = timed_cycles(LOADS.replace("VARIANT", variant), out)
    assert (out[:32] == 1).all()
    return cycles_


def test_loads_overlap_until_a_result_is_read_and_a_line_in_l1_costs_the_l1_latency():
    """The scoreboard: two independent global loads cost one L2 latency (plus an issue slot); a load whose
    address is the other's result costs two; reading a line the SM's L1 already holds costs the L1 hit
    latency, unless the load bypasses L1 (`.cg`)."""
    independent = loads_cycles(INDEPENDENT)
    chained = loads_cycles(ADDRESS_CHAIN)
    assert chained - independent >= B200.latency_global_load - 2 * B200.cost_alu
    l1_hit = loads_cycles(SAME_LINE_AFTER)
    bypass = loads_cycles(SAME_LINE_BYPASS)
    assert l1_hit - independent == pytest.approx(B200.latency_l1_hit + B200.cost_alu, abs=3 * B200.cost_alu)
    assert bypass - l1_hit == pytest.approx(B200.latency_global_load - B200.latency_l1_hit)


H200 = load("h200")

def sm90_run(body: str, arg: int, machine=H200) -> tuple:
    """One warpgroup (128 threads) runs `body` on an H200 description: `out` (a word per thread) and the
    kernel's span in cycles."""
    from emulator.launch import execute
    from emulator.memory import GlobalMemory
    from test_emulator_core import HEADER

    out = np.zeros(128, np.int32)
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=(1, 1, 1), block=(128, 1, 1), cluster=(1, 1, 1),
                             shared_bytes=16384, attributes={},
                             params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", arg)))
    ptx = HEADER.format(threads=128).replace("sm_100a", "sm_90a") + body + "\n}\n"
    stats = execute(launch, ptx, memory, mode="timed", machine=machine, step_budget=200_000)
    return out, machine.cycles(stats.timing["kernel_us"])


# One wgmma.mma_async m64n64k16 on a B operand at shared 0x400 (128-byte swizzle), A from %r40..43; it
# accumulates when %r1 is not 0.
WGMMA_N64 = ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" + ", ".join(f"%f{i}" for i in range(32))
             + "}, {%r40, %r41, %r42, %r43}, %rd5, %p9, 1, 1, 0;")
WGMMA_SETUP = """
	.reg .f32 %f<32>;
	mov.b64 %rd5, 4611686293305294912;
	mov.u32 %r40, 0;
	mov.u32 %r41, 0;
	mov.u32 %r42, 0;
	mov.u32 %r43, 0;
	setp.ne.s32 %p9, %r1, 0;
"""

# One warpgroup issues %r1 of those wgmma, each followed by `wgmma.wait_group WAIT` (0: every MMA waits for
# the previous one; 1: one group stays in flight).
WGMMA_LOOP = WGMMA_SETUP + """
	mov.u32 %r4, 0;
$L_loop:
	wgmma.fence.sync.aligned;
	""" + WGMMA_N64 + """
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned WAIT;
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_loop;
	wgmma.wait_group.sync.aligned 0;
	mov.u32 %r3, %r4;
""" + STORE_R3


def wgmma_cycles(count: int, wait: int) -> float:
    out, cycles = sm90_run(WGMMA_LOOP.replace("WAIT", str(wait)), count)
    assert (out == count).all()
    return cycles


def test_a_wgmma_chain_costs_its_latency_and_a_pipelined_one_its_initiation_interval():
    """`wgmma.wait_group 0` after each MMA: each extra MMA costs at least the wgmma latency (54 + N/2 = 86
    cycles at N = 64); with one group left in flight the MMAs overlap, and each costs less than that."""
    latency = H200.wgmma_latency_fixed + 64 / 2
    chained = wgmma_cycles(20, 0) - wgmma_cycles(10, 0)
    assert chained >= 10 * latency
    pipelined = wgmma_cycles(20, 1) - wgmma_cycles(10, 1)
    assert 10 * H200.wgmma_ii_per_n * 64 <= pipelined < chained


# Warp 3 of the warpgroup counts to %r1 before it issues the wgmma; every warp then waits for the wgmma and
# stores the cycles from its own issue to the wait's end (%clock).
LATE_WARP = WGMMA_SETUP + """
	shr.u32 %r7, %r2, 5;
	setp.ne.s32 %p2, %r7, 3;
	mov.u32 %r4, 0;
	@%p2 bra $L_issue;
$L_count:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p1, %r4, %r1;
	@%p1 bra $L_count;
$L_issue:
	wgmma.fence.sync.aligned;
	mov.u32 %r8, %clock;
	""" + WGMMA_N64 + """
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	mov.u32 %r9, %clock;
	sub.s32 %r3, %r9, %r8;
""" + STORE_R3


def test_a_wgmma_starts_when_the_last_warp_of_its_warpgroup_issues_it():
    """wgmma is a warpgroup's instruction: warp 0's wait for it ends a wgmma latency after warp 3, the late
    one, issued it (before: the tensor pipe took it at the first warp's issue, and warp 0's wait did not
    move with warp 3)."""
    early, late = sm90_run(LATE_WARP, 10)[0], sm90_run(LATE_WARP, 60)[0]
    assert late[0] - early[0] >= 50 * 2 * H200.cost_alu  # 50 more iterations of at least two issues
    assert late[0] - late[96] >= late[0] - early[0] - H200.wgmma_latency_fixed  # warp 3 waits the least


# A group of four wgmma (4 x 32 cycles of the tensor pipe at N = 64), then eight independent ALU instructions
# stamped with %clock while the pipe executes them, then the same eight after `wait_group 0` (pipe idle).
BUSY = WGMMA_SETUP + """
	wgmma.fence.sync.aligned;
	""" + "\n\t".join([WGMMA_N64] * 4) + """
	wgmma.commit_group.sync.aligned;
	mov.u32 %r8, %clock;
	""" + "\n\t".join(f"add.s32 %r{50 + i}, %r2, {i};" for i in range(8)) + """
	mov.u32 %r9, %clock;
	wgmma.wait_group.sync.aligned 0;
	mov.u32 %r10, %clock;
	""" + "\n\t".join(f"add.s32 %r{50 + i}, %r2, {i};" for i in range(8)) + """
	mov.u32 %r11, %clock;
	sub.s32 %r12, %r9, %r8;
	sub.s32 %r13, %r11, %r10;
	mul.lo.s32 %r3, %r12, 65536;
	add.s32 %r3, %r3, %r13;
""" + STORE_R3


def test_alu_instructions_cost_more_while_the_tensor_pipe_executes():
    """alu_cost_factor_tensor_busy: the eight instructions issued while the wgmma group executes cost the
    factor times their cost; the eight after it, their cost."""
    spans = {}
    for factor in (1.0, 3.0):
        word = int(sm90_run(BUSY, 0, H200.replace("test", alu_cost_factor_tensor_busy=factor))[0][0])
        spans[factor] = (word >> 16, word & 0xFFFF)
    assert spans[3.0][0] - spans[1.0][0] == 8 * 2 * H200.cost_alu  # busy: 3x against 1x
    assert spans[3.0][1] == spans[1.0][1]  # idle: the same


# One warp stores a word per lane eight times, the lanes 4 bytes apart (one 128-byte line) or 128 apart (32).
SCATTER = """
	mul.wide.u32 %rd2, %r2, STRIDE;
	add.s64 %rd3, %rd1, %rd2;
""" + "".join(f"\tst.global.u32 [%rd3+{4096 * i}], %r2;\n" for i in range(8)) + "\tret;\n"


def test_a_global_access_holds_the_load_store_unit_a_cycle_per_line():
    """Eight stores whose lanes touch 32 lines each take the SM's load/store unit 8 x 32 cycles; eight
    coalesced ones (one line each) issue at their issue cost."""
    out = np.zeros(8 * 1024, np.int32)
    coalesced = timed_cycles(SCATTER.replace("STRIDE", "4"), out)
    scattered = timed_cycles(SCATTER.replace("STRIDE", "128"), out)
    assert scattered - coalesced == pytest.approx(
        7 * (32 * B200.lsu_cycles_per_line - B200.cost_global_store), abs=2 * B200.cost_global_store)

HAND_OFF = """
	shr.u32 %r7, %r2, 5;
	and.b32 %r10, %r2, 31;
	setp.eq.s32 %p6, %r10, 0;
	setp.ne.s32 %p1, %r2, 0;
	@%p1 bra $L_skip_init;
	mbarrier.init.shared.b64 [%r20], 1;
$L_skip_init:
	bar.sync 0;
	setp.eq.s32 %p2, %r7, 1;
	@%p2 bra $L_producer;
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r20], 0;
	@!%p3 bra $L_wait;
	mov.u32 %r3, 7;
	bra.uni $L_done;
$L_producer:
	mov.u32 %r4, 0;
$L_loop:
	add.s32 %r4, %r4, 1;
	setp.lt.s32 %p4, %r4, %r1;
	@%p4 bra $L_loop;
	@%p6 mbarrier.arrive.shared::cta.b64 _, [%r20];
	mov.u32 %r3, %r4;
$L_done:
""" + STORE_R3


def test_a_chain_through_an_mbarrier_costs_the_producer_and_the_wake_latency():
    """Warp 1 counts to N, then arrives; warp 0 waits on the mbarrier. Warp 0 finishes after warp 1's
    arrival plus the wake latency: N moves the end by N loop iterations, exactly."""
    out = np.zeros(64, np.int32)
    short = run(HAND_OFF, out, 10, mode="timed")
    assert (out[:32] == 7).all() and (out[32:] == 10).all()
    long = run(HAND_OFF, out, 40, mode="timed")
    assert cycles(long) - cycles(short) == pytest.approx(30 * (2 * max(B200.cost_alu, B200.latency_alu)
                                                              + B200.cost_alu))
    assert cycles(short) > 10 * 3 * B200.cost_alu + B200.wake_latency


def test_a_cluster_sync_costs_the_measured_arrive_and_wait_pair_once():
    """Both CTAs of a cluster loop over barrier.cluster.arrive + wait (cute's cluster sync). The H200's 323
    cycles were measured per arrive + wait pair: each extra sync costs the pair once (the wait) plus the
    arrive's issue slot, not the pair twice (the clock charged both halves before)."""
    sync_loop = LOOP.replace("$L_loop:\n", "$L_loop:\n\tbarrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;\n")
    out = np.zeros(32, np.int32)
    with_syncs = timed_cycles(sync_loop, out, 30, cluster=2) - timed_cycles(sync_loop, out, 10, cluster=2)
    assert (out == 10).all()
    per_sync = (with_syncs - (timed_cycles(LOOP, out, 30) - timed_cycles(LOOP, out, 10))) / 20
    assert per_sync == pytest.approx(B200.cost_cluster_barrier + B200.cost_mbarrier)


def test_a_warp_sync_costs_the_measured_cycle_not_a_cta_barrier():
    """A loop with bar.warp.sync in it: each sync costs cost_warp_sync (1 cycle, measured on an H100 by
    calibration/hopper_warp_ops.cu), not the 128-thread bar.sync's 21 cycles that the clock charged it before,
    while a bar.sync in the same place still costs the named barrier's."""
    out = np.zeros(32, np.int32)
    plain = timed_cycles(LOOP, out, 30) - timed_cycles(LOOP, out, 10)
    per_sync = {}
    for barrier in ("bar.warp.sync -1", "bar.sync 1, 32"):
        loop = LOOP.replace("$L_loop:\n", f"$L_loop:\n\t{barrier};\n")
        per_sync[barrier] = (timed_cycles(loop, out, 30) - timed_cycles(loop, out, 10) - plain) / 20
        assert (out == 10).all()
    assert per_sync["bar.warp.sync -1"] == pytest.approx(B200.cost_warp_sync) == pytest.approx(1.0)
    assert per_sync["bar.sync 1, 32"] == pytest.approx(B200.cost_named_barrier)


def test_a_hang_is_still_reported_in_timed_mode():
    """Planted defect: a consumer waits on an mbarrier nobody arrives at. The try_wait time limit wakes it,
    it spins, and the clock reports the hang instead of looping."""
    body = """
	mbarrier.init.shared.b64 [%r20], 1;
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r20], 0;
	@!%p3 bra $L_wait;
""" + STORE_R3
    with pytest.raises(HangError) as e:
        run(body, np.zeros(32, np.int32), threads=32, mode="timed")
    assert "mbarrier.try_wait" in e.value.report


def test_a_dirty_l2_owes_the_write_backs_measured_on_the_h200():
    """The flush before timed calls leaves L2 dirty (clock.DirtyL2). Reading S bytes writes back
    fraction x L2 x (1 - exp(-S / L2)), and the board's 15 calls per flush are each charged a fifteenth of
    what 15 calls' reads write back; with the H200's constants that curve is the one measured on the H200
    (calibration/h200_dirty_l2.py: each read after a zero-fill flush against after a reading flush) within 1 us
    at every size from 4 MB to 1 GB."""
    import math

    from emulator.clock import DirtyL2

    capacity = H200.l2_bytes
    owed = H200.l2_dirty_writeback_fraction * capacity
    for calls in (1, 15):
        dirty = DirtyL2(H200, calls)
        read = written = 0
        for size in (capacity // 4, capacity, 3 * capacity):
            written += sum(dirty.evict(1 << 16) for _ in range((size - read) >> 16))
            read = size
            assert written == pytest.approx(owed / calls - dirty.owed, rel=1e-9)
            assert written == pytest.approx(owed / calls * (1 - math.exp(-size * calls / capacity)), rel=0.01)
    measured = json.loads((ROOT / "tools" / "data" / "h200_dirty_l2_2026-11-25.json").read_text())
    for row in (r for r in measured["rows"] if r["op"] == "read"):
        predicted = owed * (1 - math.exp(-row["bytes"] / capacity)) / H200.hbm_bytes_per_us
        assert abs(row["dirty_us"] - row["clean_us"] - predicted) < 1.0, row
    writes = [r["dirty_us"] - r["clean_us"] for r in measured["rows"] if r["op"] == "write"]
    assert max(abs(w) for w in writes) < 1.0  # a store's victim costs nothing extra: the clock charges none


# TMA throughput (TB/s) against KiB in flight per SM, one CTA per SM streaming from HBM: B200 [SA-repo],
# H200 measured for this project (calibration/h200_l2_tma.cu, 2026-11-26; where two splits of the bytes in flight were
# measured, e.g. 2 x 4 and 1 x 8 KiB, their mean)
TMA_STREAMS = {"b200": {4: 1.13, 8: 2.0, 16: 3.6, 32: 5.65, 64: 7.14},
               "h200": {4: 1.10, 8: 1.91, 16: 3.08, 32: 4.25, 64: 4.49}}


def test_a_miss_waits_longer_while_hbm_is_loaded_as_both_machines_measured_streams_show():
    """A stream keeping X bytes in flight on every SM runs at min(HBM rate, SMs x X / latency), where the
    latency is the clock's loaded_latency at the load that throughput puts on HBM (a fixed point). It must
    meet both machines' measured tables within 6% at every row; a fixed latency misses them by up to 29%."""
    from emulator.clock import Server, loaded_latency
    from emulator.machines import load

    for name, table in TMA_STREAMS.items():
        machine = load(name)
        rate = machine.hbm_bytes_per_us / 1e6
        for kib, measured in table.items():
            throughput = rate
            for _ in range(200):
                latency_us = machine.us(loaded_latency(machine, min(1.0, throughput / rate)))
                throughput = 0.5 * throughput + 0.5 * min(rate, machine.sm_count * kib * 1024 / latency_us / 1e6)
            assert throughput == pytest.approx(measured, rel=0.06), (name, kib)
        fixed = machine.replace("no load", hbm_latency_load_factor=0)
        worst = max(min(rate, machine.sm_count * kib * 1024 / fixed.us(loaded_latency(fixed, 1.0)) / 1e6) / measured
                    for kib, measured in table.items())
        assert worst > 1.12, name  # the rule is not a no-op where the tables are
    hbm = Server(rate=100.0, window=1000.0)
    hbm.serve(0.0, 50_000)
    assert hbm.load(500.0) == pytest.approx(0.5)
    assert hbm.load(1500.0) == 0.0  # the request left the window


def test_instruction_classes():
    from types import SimpleNamespace as I

    assert cost_class(I(opcode="ld.shared.u32")) == "cost_shared"
    assert cost_class(I(opcode="ld.global.nc.v4.u32")) == "cost_global_load"
    assert cost_class(I(opcode="st.global.v2.b32")) == "cost_global_store"
    assert cost_class(I(opcode="tcgen05.mma.cta_group::2.kind::mxf4nvf4")) == "cost_mma_issue"
    assert cost_class(I(opcode="add.s32")) == "cost_alu"
    assert cost_class(I(opcode="barrier.cluster.arrive.relaxed.aligned")) == "cost_mbarrier"
    assert cost_class(I(opcode="barrier.cluster.wait.aligned")) == "cost_cluster_barrier"
    assert cost_class(I(opcode="bar.warp.sync")) == "cost_warp_sync"
    assert cost_class(I(opcode="bar.sync")) == "cost_named_barrier"
    assert cost_class(I(opcode="tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned")) \
        == "cost_tensormap_release"
    assert cost_class(I(opcode="fence.proxy.tensormap::generic.acquire.gpu")) == "cost_tensormap_acquire"
    assert cost_class(I(opcode="fence.proxy.tensormap::generic.release.gpu")) == "cost_fence"  # orders, waits for nothing
    assert cost_class(I(opcode="fence.proxy.async.shared::cta")) == "cost_fence"


# a warp copies a 128-byte map from shared memory to out[0..31] and fences it for the TMA unit, as a kernel that
# patches its maps on the device does before its next copy through the map; then thread 0 stores 7 at out[32]
PATCHED_MAP = """
	COPY
	FENCE
	setp.ne.s32 %p2, %r2, 0;
	@%p2 bra $L_done;
	mov.u32 %r3, 7;
	st.global.u32 [%rd1+128], %r3;
$L_done:
	ret;
"""


def test_a_map_patched_on_the_device_costs_its_release_and_the_tma_units_reread():
    """tensormap.cp_fenceproxy's release waits for its 128-byte write to reach L2, and the acquire fence makes the
    TMA unit read the map again from L2: one L2 round trip each (cost_tensormap_release, _acquire), where the
    clock charged them an ALU slot and a fence's 8 cycles before (teelaitila's entry, NVIDIA's grouped example)."""
    raw = np.zeros(64 * 4 + 64, np.uint8)
    out = raw[-raw.ctypes.data % 64:][:64 * 4].view(np.int32)  # the map's place 64-byte aligned
    copy = ("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned "
            "[%rd1], [%r20], 128;")
    fence = "fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;"
    neither = timed_cycles(PATCHED_MAP.replace("COPY", "").replace("FENCE", ""), out)
    both = timed_cycles(PATCHED_MAP.replace("COPY", copy).replace("FENCE", fence), out)
    assert out[32] == 7
    assert both - neither == pytest.approx(B200.cost_tensormap_release + B200.cost_tensormap_acquire, abs=4)
    assert B200.cost_tensormap_release == B200.latency_global_load  # an L2 round trip, [MD]


# --------------------------------------------------------------------------------------------------
# NVIDIA's kernel (the DSL compiles it: a few seconds each)
# --------------------------------------------------------------------------------------------------


def timing_of(lines) -> dict:
    """The clock's figures: the JSON of tools/emulate.py's `timing:` line among its output lines."""
    return json.loads(next(line for line in lines if line.startswith("timing: "))[len("timing: "):])


def nvidia_timed(mnk, clusters, *extra):
    """tools/emulate.py nvidia, timed, in a fresh process (the stub driver loads before cutlass): the
    clock's figures from its `timing:` line. Here and below without race detection (--no-races): these
    tests time the kernel, test_emulator_nvidia.py and test_emulator_races.py check its order. Where NVIDIA's
    example is not installed, `missing` (a skip for a user, a failure under CI)."""
    require_nvidia_example()
    done = subprocess.run([sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", ",".join(map(str, mnk)),
                           "--clusters", str(clusters), *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    assert lines[-1].split()[0] == ("TIMED" if "--timing-only" in extra else "PASS"), lines[-1]
    return timing_of(lines)


def submission_timed(spec, *extra):
    """tools/emulate.py submission --time on one pair: the clock's figures (the output checked: PASS)."""
    done = subprocess.run([sys.executable, "tools/emulate.py", "submission", "--no-races", "--time", "--spec", spec,
                           "--workers", "1",
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines and lines[-1].startswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]
    return timing_of(lines)


def test_tma_stores_of_one_sm_pass_its_store_unit_one_box_after_another():
    """The B200 kernel's only tile is its last: each CTA's 4 epilogue warps store its 128 x 128 fp16 of C as 16
    TMA boxes of 2 KB, and the CTA exits when they are read. Through the SM's store unit at the H100's measured
    31 bytes per cycle (calibration/hopper_tma_store_rate.cu) the 32 KB take 1057 cycles, partly under the warps' issue:
    the call ends later than with an unbounded unit by a good part of that, and by no more."""
    spec = "m: [128]; n: [256]; k: [256]; g: 1; seed: 4"
    measured = submission_timed(spec)
    unbounded = submission_timed(spec, "--set", "tma_store_bytes_per_cycle=1e9")
    unit_cycles = 16 * 2048 / B200.tma_store_bytes_per_cycle
    later = B200.cycles(measured["kernel_us"] - unbounded["kernel_us"])
    assert 0.3 * unit_cycles < later <= unit_cycles, (later, unit_cycles)


def test_the_timeline_says_where_each_workers_time_goes(tmp_path, nvidia_example):
    """--timeline draws the picture and prints the phases of every CTA that ran MMAs: start-up, first load,
    mainloop, tail. They follow one another, so on a grid whose CTAs run alike (one tile each, all at once)
    their medians add up to the kernel's span, and each is a real part of it."""
    require_matplotlib()
    picture = tmp_path / "timeline.png"
    done = subprocess.run([sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", "256,256,1024",
                           "--clusters", "2", "--timeline", str(picture)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[-1].startswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]
    assert picture.stat().st_size > 10_000
    timing = timing_of(lines)
    phases = next(line for line in lines if line.startswith("phases "))
    assert "2 of 2 CTAs" in phases
    medians = {name: float(mid) for name, mid in
               (part.rsplit(" ", 3)[0:2] for part in phases.split("): ", 1)[1].split(", "))}
    assert list(medians) == ["start-up", "first load", "mainloop", "tail"]
    assert all(value > 0.05 for value in medians.values()), medians
    assert sum(medians.values()) == pytest.approx(timing["kernel_us"], abs=0.02)


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps test_the_timeline_says_where_each_workers_time_goes quick
def test_the_timeline_draws_the_call_and_the_ctas_asked_for(tmp_path, nvidia_example):
    """--timeline-call 2 draws the stream's second call and --timeline-ctas the CTAs named. NVIDIA's example
    launches without PDL, so call 2's first CTA starts the launch gap after call 1 completed and the drawn
    launch ends when call 2 does; its CTAs run alike, so the phases' medians add up to that launch's span. A call past
    the stream is a bad command line, refused in one line before the emulation; a CTA the grid lacks (it has
    CTAs 0 and 1) draws nothing and says so."""
    require_matplotlib()
    picture = tmp_path / "timeline.png"
    command = [sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", "256,256,1024", "--clusters", "2",
               "--calls", "2", "--timeline", str(picture)]
    done = subprocess.run(command + ["--timeline-call", "2", "--timeline-ctas", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[-1].startswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]
    assert picture.stat().st_size > 10_000
    call_ends = timing_of(lines)["call_end_us"]
    drawn = next(line for line in lines if line.startswith("timeline: "))
    first, last = (float(x) for x in drawn.split("ran ", 1)[1].rstrip(" us)").split(" to "))
    assert "(call 2, CTAs 1;" in drawn, drawn
    assert first == pytest.approx(call_ends[0] + B200.launch_gap_us, abs=0.01), (drawn, call_ends)
    assert last == pytest.approx(call_ends[1], abs=0.01), (drawn, call_ends)
    phases = next(line for line in lines if line.startswith("phases "))
    medians = [float(part.rsplit(" ", 3)[1]) for part in phases.split("): ", 1)[1].split(", ")]
    assert sum(medians) == pytest.approx(last - first, abs=0.04), (phases, drawn)  # 6 figures rounded to 0.01

    absent = tmp_path / "absent.png"
    one_call = command[:command.index("--calls")] + ["--timeline", str(absent), "--timeline-ctas", "2"]
    done = subprocess.run(one_call, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and not absent.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert "timeline: nothing drawn: call 1, CTAs 2: that call's launch has no such CTA" in done.stdout.splitlines()

    refused = subprocess.run(command + ["--timeline-call", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout[-2000:] + refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1].endswith("--timeline-call 3: the stream has 2 call(s) (--calls)")


def test_the_trace_lists_every_instruction_and_leaves_the_clock_as_it_was(tmp_path, nvidia_example):
    """--timeline-trace lists every instruction the drawn CTAs' warps issue: on a one-CTA grid as many as the
    run executed, each warp's in time order, each MMA from the MMA warp. The clock steps a traced warp one
    instruction at a time; that moves no time: the simulated figure is the one without the trace."""
    require_matplotlib()
    trace = tmp_path / "trace.txt"
    command = [sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", "256,256,1024", "--clusters", "1"]
    runs = [subprocess.run(command + extra, cwd=ROOT, capture_output=True, text=True, timeout=600)
            for extra in ([], ["--timeline", str(tmp_path / "t.png"), "--timeline-trace", str(trace)])]
    verdicts = [done.stdout.strip().splitlines()[-1] for done in runs]
    assert all(done.returncode == 0 for done in runs) and all(v.startswith("PASS") for v in verdicts), verdicts
    simulated = [v.split("simulated ", 1)[1] for v in verdicts]
    assert simulated[0] == simulated[1], simulated
    executed = int(verdicts[1].split("instructions=", 1)[1].split()[0])
    rows = [line.split(None, 6) for line in trace.read_text().splitlines()[1:]]
    assert len(rows) == executed, (len(rows), executed)
    cycles = {}
    for row in rows:
        warp = (row[row.index("CTA") + 1], row[row.index("CTA") + 2])  # (CTA, warp)
        assert float(row[1]) >= cycles.get(warp, 0.0), row
        cycles[warp] = float(row[1])
    mmas = [line for line in trace.read_text().splitlines() if "] tcgen05.mma" in line]
    assert mmas and all(" MMA " in line for line in mmas), mmas[:3]


def test_a_timeline_without_matplotlib_is_refused_in_one_line_before_the_emulation(tmp_path, without_matplotlib):
    """Without matplotlib, --timeline is a bad command line (exit 2) said at once in one line, not a traceback
    after the emulation has run."""
    done = subprocess.run([sys.executable, "tools/emulate.py", "nvidia", "--no-races", "--time", "--mnk", "256,256,1024",
                           "--clusters", "2", "--timeline", str(tmp_path / "t.png")], cwd=ROOT, capture_output=True,
                          text=True, env=without_matplotlib, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done.stdout[-2000:] + done.stderr[-2000:]
    refusal = "emulate.py: --timeline needs matplotlib, which is not installed (pip install matplotlib)"
    assert done.stderr.strip() == refusal
    assert not (tmp_path / "t.png").exists()


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_twice_the_k_takes_longer():
    short = nvidia_timed((128, 128, 512), 1)
    long = nvidia_timed((128, 128, 1024), 1)
    # at least the tensor pipe's time for the 2 extra k-tiles (4 MMAs of N = 128 each, II 64 cycles)
    assert B200.cycles(long["kernel_us"] - short["kernel_us"]) >= 2 * 4 * 64
    assert long["hbm_read_mb"] == pytest.approx(2 * short["hbm_read_mb"], rel=0.05)


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_hbm_bandwidth_is_shared_across_sms():
    """Two CTAs each streaming their own B tile take longer than one CTA streaming one when HBM is the
    bottleneck (1/1000 of the B200's bandwidth), and about the same time when it is not (1000x); the A
    tile both read is an L2 hit the second time."""
    slow = ("--set", f"hbm_bytes_per_us={B200.hbm_bytes_per_us / 1000}")
    one, two = nvidia_timed((128, 128, 1024), 1, *slow), nvidia_timed((128, 256, 1024), 2, *slow)
    assert two["kernel_us"] > 1.3 * one["kernel_us"]
    fast = ("--set", f"hbm_bytes_per_us={B200.hbm_bytes_per_us * 1000}")
    one, two = nvidia_timed((128, 128, 1024), 1, *fast), nvidia_timed((128, 256, 1024), 2, *fast)
    assert two["kernel_us"] == pytest.approx(one["kernel_us"], rel=0.1)
    assert two["l2_hits"] > 0


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_tensor_boxes_stream_from_hbm_at_the_tiled_efficiency():
    """A tensor box's 128-byte rows hold HBM longer than as many consecutive bytes (measured on the H200:
    calibration/h200_l2_tma.cu): with HBM the bottleneck, NVIDIA's kernel (every load a tensor box) at half the
    efficiency takes about twice as long (a clean L2: no write-backs share HBM)."""
    slow = ("--set", f"hbm_bytes_per_us={B200.hbm_bytes_per_us / 1000}", "--set", "l2_dirty_writeback_fraction=0")
    full = nvidia_timed((128, 256, 1024), 2, *slow, "--set", "hbm_tiled_efficiency=1")
    half = nvidia_timed((128, 256, 1024), 2, *slow, "--set", "hbm_tiled_efficiency=0.5")
    assert half["kernel_us"] == pytest.approx(2 * full["kernel_us"], rel=0.15)
    assert half["hbm_read_mb"] == full["hbm_read_mb"]  # the bytes read are the same


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_misses_into_the_flushed_l2_write_dirty_victims_back():
    """With HBM the bottleneck (1/1000 of the B200's bandwidth), the dirty victims the kernel's misses evict
    cost HBM time: the kernel takes longer than with a clean L2, and writes back the dirty share of what it
    read (the flush's lines are barely depleted by this small read)."""
    slow = ("--set", f"hbm_bytes_per_us={B200.hbm_bytes_per_us / 1000}")
    dirty = nvidia_timed((128, 256, 1024), 2, *slow)
    clean = nvidia_timed((128, 256, 1024), 2, *slow, "--set", "l2_dirty_writeback_fraction=0")
    assert dirty["hbm_written_mb"] - clean["hbm_written_mb"] == pytest.approx(
        B200.l2_dirty_writeback_fraction * dirty["hbm_read_mb"], rel=0.02)
    assert dirty["kernel_us"] > 1.3 * clean["kernel_us"]


@pytest.mark.long
def test_the_timing_only_fast_path_keeps_the_times():
    """Skipping TMA data and MMA arithmetic changes no time: the kernel's control flow reads neither."""
    full = nvidia_timed((256, 256, 512), 1)
    fast = nvidia_timed((256, 256, 512), 1, "--timing-only")
    assert fast["kernel_us"] == full["kernel_us"] and fast["board_us"] == full["board_us"]


# --------------------------------------------------------------------------------------------------
# the B200 kernel on the board's benchmarks, timed (the functional check runs too)
# --------------------------------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("number", [3, 4])
def test_benchmark_timed_at_the_real_worker_count(number):
    """The benchmark as a stream of two calls on the board's inputs, both checked against the reference."""
    done = subprocess.run([sys.executable, "tools/emulate.py", "benchmarks", "--only", str(number), "--calls", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"benchmark {number}" in done.stdout and "PASS" in done.stdout and "stream of 2 calls" in done.stdout


def test_validate_timing_reads_eval_output_and_holds_out_what_it_does_not_fit(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "tools"))
    import validate_timing as vt

    table = tmp_path / "task.txt"
    table.write_text("bench  mean us  median us\n  1   111.23   111.22  x\n  4    16.17    16.14  y\n")
    rows = vt.read_eval_output(f"{table}:task:shipped,jobs=weight_blocks")
    assert [(case, config, mean) for case, _, config, mean in rows] == [
        ("task 1", "shipped,jobs=weight_blocks", 111.23), ("task 4", "shipped,jobs=weight_blocks", 16.17)]
    assert rows[1][1] == vt.spec_of("task 4") and vt.spec_of("task 4").startswith("m: [128, 384]")
    # simulated 10 us short on both: fitted on row 1 alone, the gap shift (+10) makes row 2 exact
    vt.report([("task 1", "shipped", 111.0, 101.0), ("task 4", "shipped", 16.0, 6.0)], {1}, markdown=False)
    out = capsys.readouterr().out
    assert "fitted: launch gap +10.00 us" in out and "held out: 1 cases, RMS error 0.0%" in out


def test_flashinfer_anchors_replay_the_published_benchmarks_draw():
    """Every published point has masked_m drawn as PR #2503's script drew it: G values within 0.7 to 1.3 times
    the expected m, the same on every call (seed 42)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import validate_timing as vt

    masked = vt.flashinfer_masked_m()
    assert masked == vt.flashinfer_masked_m()
    for g, m, n, k, _, _ in vt.FLASHINFER_ANCHORS:
        values = masked[(g, m, n, k)]
        assert len(values) == g and all(int(0.7 * m) <= v <= 1.3 * m for v in values), (g, m, values)
    assert len({tuple(v) for v in masked.values()}) == len(masked)  # a fresh draw per case
