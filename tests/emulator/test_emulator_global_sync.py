"""Synchronization through global memory (split-K's flag): atom and red (emulator/isa/atomics.py), strong
loads and stores, thread fences, nanosleep, polls that are never answered, and the race detector's release
and acquire patterns (emulator/happens_before.py), in the three schedulers.

- Hand-written PTX (milliseconds): the atomics' arithmetic and lane order; a writer CTA and a reader CTA in
  another cluster handing over a block of data through a flag, in every release and acquire form the PTX
  memory model gives (ISA 8.8) and with each planted defect; release sequences through read-modify-writes;
  scopes; the hang report of a poll never answered; nanosleep in the schedulers and in simulated time.
- CuTe DSL kernels compiled for sm_100a (tests/emulator/global_sync_kernels.py, one process, a few seconds): the
  split-K protocol as our kernels will emit it, with its planted defects, and NVIDIA's grid barrier (CUTLASS's
  CuTe DSL example `cooperative_launch.py`) as the known-good ground truth.
"""

import json
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import missing
from emulator import EmulatorError, HangError, RaceError
from emulator.launch import execute
from emulator.machines import load
from emulator.memory import GlobalMemory
from test_emulator_clock import LOADS, STORE_R3, timed_cycles
from test_emulator_core import HEADER

ROOT = Path(__file__).resolve().parents[2]
B200 = load("b200")
MODES = [("eager", 0), ("adversarial", 1), ("adversarial", 2), ("adversarial", 3), ("timed", 0)]


def launch(body: str, out: np.ndarray, *, grid=(2, 1, 1), cluster=(1, 1, 1), threads: int = 64, mode="eager",
           seed: int = 0, races: bool = True, step_budget: int = 200_000):
    """`body` (test_emulator_core's header: %rd1 = out, %r2 = tid) on `grid` CTAs of `threads`."""
    memory = GlobalMemory()
    memory.register(out.ctypes.data, out.nbytes, "out")
    config = SimpleNamespace(kernel_name="k", grid=grid, block=(threads, 1, 1), cluster=cluster, shared_bytes=1024,
                             attributes={}, params=(struct.pack("<Q", out.ctypes.data), struct.pack("<I", 0)))
    return execute(config, HEADER.format(threads=threads) + body + "\n}\n", memory, mode=mode, seed=seed,
                   races=races, step_budget=step_budget)


# --------------------------------------------------------------------------------------------------
# atom and red
# --------------------------------------------------------------------------------------------------

# lane 0 applies OP to out[0] (its type's width) with b = %BITS-register B and c = C; the old value lands at
# out[8] (byte 64)
ONE_ATOM = """
	setp.ne.u32 %p1, %r2, 0;
	@%p1 bra $L_end;
	mov.b{bits} {b_reg}, {b};
	mov.b{bits} {c_reg}, {c};
	{op} {d_reg}, [%rd1], {b_reg}{c_operand};
	st.global.b{bits} [%rd1+64], {d_reg};
$L_end:
	ret;
"""


def one_atom(op: str, typ: str, initial: int, b: int, c: int = 0) -> tuple[int, int]:
    """(the value `op` returned, the value it left) for one lane, on raw bits."""
    bits = 64 if typ.endswith("64") else 32
    regs = ("%rd5", "%rd6", "%rd7") if bits == 64 else ("%r5", "%r6", "%r7")
    out = np.zeros(16 if bits == 64 else 32, np.uint64 if bits == 64 else np.uint32)
    out[0] = initial
    body = ONE_ATOM.format(bits=bits, b_reg=regs[0], c_reg=regs[1], d_reg=regs[2], b=b, c=c, op=op,
                           c_operand=f", {regs[1]}" if ".cas" in op else "")
    launch(body, out, grid=(1, 1, 1), threads=32)
    index = 8 if bits == 64 else 16
    return int(out[index]), int(out[0])


def f32(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def f64(x: float) -> int:
    return int(np.array([x], np.float64).view(np.uint64)[0])


@pytest.mark.parametrize("op, typ, initial, b, c, returned, left", [
    ("atom.global.add.u32", "u32", 0xFFFFFFFF, 2, 0, 0xFFFFFFFF, 1),  # wraps
    ("atom.global.add.s32", "s32", 5, 0xFFFFFFFD, 0, 5, 2),  # + (-3)
    ("atom.global.add.u64", "u64", 1 << 40, 7, 0, 1 << 40, (1 << 40) + 7),
    ("atom.global.add.f32", "f32", f32(1.5), f32(2.25), 0, f32(1.5), f32(3.75)),
    ("atom.global.add.f32", "f32", f32(2.0 ** -126), f32(-2.0 ** -127), 0, f32(2.0 ** -126), f32(2.0 ** -126)),
    ("atom.global.add.f32", "f32", f32(1.5 * 2.0 ** -126), f32(-2.0 ** -126), 0, f32(1.5 * 2.0 ** -126), 0),
    ("atom.global.add.f64", "f64", f64(2.0 ** -1030), f64(2.0 ** -1030), 0, f64(2.0 ** -1030), f64(2.0 ** -1029)),
    ("atom.global.exch.b32", "b32", 11, 22, 0, 11, 22),
    ("atom.global.exch.b64", "b64", 1 << 50, 3, 0, 1 << 50, 3),
    ("atom.global.cas.b32", "b32", 4, 4, 9, 4, 9),  # compares equal: swaps
    ("atom.global.cas.b32", "b32", 4, 5, 9, 4, 4),  # does not
    ("atom.global.cas.b64", "b64", 1 << 33, 1 << 33, 1, 1 << 33, 1),
    ("atom.global.min.s32", "s32", 3, 0xFFFFFFFF, 0, 3, 0xFFFFFFFF),  # -1 < 3 signed
    ("atom.global.min.u32", "u32", 3, 0xFFFFFFFF, 0, 3, 3),  # unsigned
    ("atom.global.max.s32", "s32", 3, 0xFFFFFFFF, 0, 3, 3),
    ("atom.global.max.u32", "u32", 3, 0xFFFFFFFF, 0, 3, 0xFFFFFFFF),
    ("atom.global.inc.u32", "u32", 7, 7, 0, 7, 0),  # (r >= b) ? 0 : r + 1
    ("atom.global.inc.u32", "u32", 6, 7, 0, 6, 7),
    ("atom.global.dec.u32", "u32", 0, 7, 0, 0, 7),  # (r == 0 || r > b) ? b : r - 1
    ("atom.global.dec.u32", "u32", 9, 7, 0, 9, 7),
    ("atom.global.dec.u32", "u32", 5, 7, 0, 5, 4),
    ("atom.global.and.b32", "b32", 0b1100, 0b1010, 0, 0b1100, 0b1000),
    ("atom.global.or.b32", "b32", 0b1100, 0b1010, 0, 0b1100, 0b1110),
    ("atom.global.xor.b32", "b32", 0b1100, 0b1010, 0, 0b1100, 0b0110),
    ("atom.acq_rel.gpu.global.add.u32", "u32", 1, 1, 0, 1, 2),
    ("atom.add.u32", "u32", 1, 1, 0, 1, 2),  # a generic address in the global window
])
def test_atom_returns_the_old_value_and_leaves_the_operation(op, typ, initial, b, c, returned, left):
    """ISA 9.7.13.5's semantics per operation, on raw bits; `add.f32` on global memory flushes subnormal
    inputs (-2^-127 adds nothing to 2^-126) and results (1.5 x 2^-126 - 2^-126 leaves +0.0); add.f64 keeps
    its subnormals."""
    assert one_atom(op, typ, initial, b, c) == (returned, left)


def test_lanes_to_one_location_apply_in_lane_order():
    """32 lanes add 1 to one counter: each gets the count before its own update, in lane order; red and a
    shared-memory atom take the same path."""
    body = """
	mov.u32 %r5, 1;
	atom.global.add.u32 %r3, [%rd1+256], %r5;
	red.global.add.u32 [%rd1+260], %r2;
	atom.shared::cta.add.u32 %r6, [%r20], %r5;
	add.u32 %r3, %r3, %r6;
""" + STORE_R3
    out = np.zeros(66, np.uint32)
    launch(body, out, grid=(1, 1, 1), threads=32)
    assert (out[:32] == 2 * np.arange(32)).all()
    assert out[64] == 32 and out[65] == sum(range(32))


@pytest.mark.parametrize("form", ["atom.global.v4.f32.add {%f1, %f2, %f3, %f4}, [%rd1], {%f1, %f2, %f3, %f4};",
                                  "red.async.release.gpu.global.add.u32 [%rd1], %r2;",
                                  "atom.global.inc.u64 %rd5, [%rd1], %rd6;"])
def test_unmodelled_atomic_forms_are_errors_naming_them(form):
    with pytest.raises(EmulatorError, match="unimplemented") as caught:
        launch(".reg .f32 %f<8>;\n\t" + form + "\n\tret;", np.zeros(16, np.uint32), grid=(1, 1, 1), threads=32)
    assert form.split()[0] in str(caught.value)


def test_a_strong_access_names_its_scope():
    with pytest.raises(EmulatorError, match="names its scope"):
        launch("ld.relaxed.global.u32 %r3, [%rd1];\n\tret;", np.zeros(16, np.uint32), grid=(1, 1, 1), threads=32)


# --------------------------------------------------------------------------------------------------
# a flag between two CTAs of different clusters
# --------------------------------------------------------------------------------------------------

# out: data [0, 64) written by the writer CTA, the reader's copy at [64, 128), the flag at word 128.
# CTA 1 (the writer): each thread stores its value, bar.sync, thread 0 RELEASEs the flag. CTA 0 (the
# reader): thread 0 polls (ACQUIRE, then the value in %r7 must be 1; nanosleep between polls), bar.sync, every
# thread copies its value, thread 0 resets the flag. Other CTAs exit.
PROTOCOL = """
	mov.u32 %r5, %ctaid.x;
	add.s64 %rd4, %rd1, 512;
	mul.wide.u32 %rd2, %r2, 4;
	add.s64 %rd3, %rd1, %rd2;
	setp.eq.u32 %p1, %r5, 0;
	@%p1 bra $L_reader;
	setp.ne.u32 %p5, %r5, WRITER;
	@%p5 bra $L_end;
	add.u32 %r6, %r2, 100;
	st.global.u32 [%rd3], %r6;
	bar.sync 1, 64;
	setp.eq.u32 %p2, %r2, 0;
	@!%p2 bra $L_end;
	RELEASE
	bra.uni $L_end;
$L_reader:
	setp.ne.u32 %p3, %r2, 0;
	@%p3 bra $L_synced;
$L_poll:
	ACQUIRE
	setp.ne.u32 %p4, %r7, 1;
	@%p4 nanosleep.u32 100;
	@%p4 bra $L_poll;
$L_synced:
	bar.sync 1, 64;
	ld.global.u32 %r8, [%rd3];
	st.global.u32 [%rd3+256], %r8;
	@%p3 bra $L_end;
	st.relaxed.gpu.global.b32 [%rd4], 0;
$L_end:
	ret;
"""
RED_RELEASE = "red.release.gpu.global.add.s32 [%rd4], 1;"
LD_ACQUIRE = "ld.acquire.gpu.global.b32 %r7, [%rd4];"
RELEASES = {
    "red.release": RED_RELEASE,
    "fence.acq_rel + red.relaxed (CUTLASS)": "fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%rd4], 1;",
    "atom.acq_rel": "atom.acq_rel.gpu.global.add.s32 %r9, [%rd4], 1;",
    "st.release": "st.release.gpu.global.b32 [%rd4], 1;",
    "fence.sc + st.relaxed": "fence.sc.gpu;\n\tst.relaxed.gpu.global.b32 [%rd4], 1;",
    "membar.gl + atom.exch": "membar.gl;\n\tatom.global.exch.b32 %r9, [%rd4], 1;",
    "fence.release + st.volatile": "fence.release.gpu;\n\tst.volatile.global.b32 [%rd4], 1;",
    "generic red.release.sys": "red.release.sys.add.s32 [%rd4], 1;",
}
ACQUIRES = {
    "ld.acquire": LD_ACQUIRE,
    "ld.relaxed + fence.acq_rel": "ld.relaxed.gpu.global.b32 %r7, [%rd4];\n\tfence.acq_rel.gpu;",
    "atom.acquire": "atom.acquire.gpu.global.or.b32 %r7, [%rd4], 0;",
    "ld.volatile + fence.acquire": "ld.volatile.global.b32 %r7, [%rd4];\n\tfence.acquire.gpu;",
    "generic ld.acquire": "ld.acquire.gpu.b32 %r7, [%rd4];",
    # CUTLASS's wait_eq_reset (a cas that takes the flag back to 0) with an acquire
    "atom.acquire.cas": "atom.acquire.gpu.global.cas.b32 %r7, [%rd4], 1, 0;",
}


def protocol(release=RED_RELEASE, acquire=LD_ACQUIRE, writer: int = 2) -> str:
    return PROTOCOL.replace("RELEASE", release).replace("ACQUIRE", acquire).replace("WRITER", str(writer))


def handover(body: str, mode: str = "eager", seed: int = 0, **kwargs) -> np.ndarray:
    """Two clusters of two CTAs run `body`: `out` (the reader's copy at [64, 128), the flag at 128)."""
    out = np.zeros(129, np.uint32)
    launch(body, out, grid=(4, 1, 1), cluster=(2, 1, 1), mode=mode, seed=seed, **kwargs)
    return out


def handed_over(out: np.ndarray) -> bool:
    """The reader copied the writer's data and reset the flag for the next grid."""
    return bool((out[64:128] == np.arange(64) + 100).all()) and out[128] == 0


@pytest.mark.parametrize("mode, seed", MODES)
@pytest.mark.parametrize("release", list(RELEASES))
def test_every_release_form_hands_the_data_over(release, mode, seed):
    assert handed_over(handover(protocol(release=RELEASES[release]), mode, seed))


@pytest.mark.parametrize("mode, seed", MODES)
@pytest.mark.parametrize("acquire", list(ACQUIRES))
def test_every_acquire_form_hands_the_data_over(acquire, mode, seed):
    assert handed_over(handover(protocol(acquire=ACQUIRES[acquire]), mode, seed))


DEFECTS = {
    # the release replaced by a relaxed reduction, no fence: the data is not released
    "red.relaxed": (dict(release="red.relaxed.gpu.global.add.s32 [%rd4], 1;"), ("st.global.u32", "ld.global.u32")),
    # a fence after the relaxed reduction releases nothing the reduction wrote (ISA 8.8: fence, then write)
    "fence after the red": (dict(release="red.relaxed.gpu.global.add.s32 [%rd4], 1;\n\tfence.acq_rel.gpu;"),
                            ("st.global.u32", "ld.global.u32")),
    # the acquire replaced by a relaxed load, no fence: the data is not acquired
    "ld.relaxed": (dict(acquire="ld.relaxed.gpu.global.b32 %r7, [%rd4];"), ("st.global.u32", "ld.global.u32")),
    # an acquire fence before the poll orders nothing the poll observes (ISA 8.8: read, then fence)
    "fence before the poll": (dict(acquire="fence.acq_rel.gpu;\n\tld.relaxed.gpu.global.b32 %r7, [%rd4];"),
                              ("st.global.u32", "ld.global.u32")),
    # CUTLASS's wait_eq_reset as written (atomicCAS: a relaxed atom, no fence): ISA 8.8 makes it no acquire
    "relaxed cas": (dict(acquire="atom.global.cas.b32 %r7, [%rd4], 1, 0;"), ("st.global.u32", "ld.global.u32")),
    # the reader does not poll at all
    "no poll": (dict(acquire="mov.u32 %r7, 1;"), ("st.global.u32", "ld.global.u32")),
    # a .cta release cannot synchronize with another CTA: both flag accesses are strong but not morally strong
    "cta scope": (dict(release="red.release.cta.global.add.s32 [%rd4], 1;"), ("red.release.cta", "morally strong")),
    # .cluster reaches the writer's own cluster only: the reader is in the other one
    "cluster scope": (dict(acquire="ld.acquire.cluster.global.b32 %r7, [%rd4];"), ("morally strong",)),
}


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("timed", 0)])
@pytest.mark.parametrize("defect", list(DEFECTS))
def test_a_planted_defect_is_a_race_naming_both_lines(defect, mode, seed):
    edits, texts = DEFECTS[defect]
    with pytest.raises(RaceError) as caught:
        handover(protocol(**edits), mode, seed)
    for text in texts:
        assert text in str(caught.value), str(caught.value)


def test_without_race_detection_a_missing_poll_reads_stale_data():
    """The functional side of the same defect: the adversarial order runs the reader before the writer."""
    stale = [not (handover(protocol(acquire="mov.u32 %r7, 1;"), "adversarial", seed, races=False)[64:128]
                  == np.arange(64) + 100).all() for seed in range(4)]
    assert any(stale)


def test_cluster_scope_synchronizes_within_a_cluster():
    """The writer in the reader's own cluster (CTA 1): `.cluster` includes it."""
    body = protocol(release="red.release.cluster.global.add.s32 [%rd4], 1;",
                    acquire="ld.acquire.cluster.global.b32 %r7, [%rd4];", writer=1)
    assert handed_over(handover(body, "adversarial", 1))


def test_strong_accesses_to_one_location_do_not_race_and_a_weak_one_does():
    """Morally strong accesses (ISA 8.7) never race: every CTA adds to one counter with no other order. A
    weak store to that counter races with them."""
    count = "mov.u32 %r5, 1;\n\tatom.global.add.u32 %r3, [%rd1], %r5;\n\tred.relaxed.gpu.global.add.u32 [%rd1+4], 1;\n"
    out = np.zeros(16, np.uint32)
    launch(count + "\tret;", out, grid=(4, 1, 1))
    assert out[0] == 4 * 64 and out[1] == 4 * 64
    weak = count + "\tsetp.eq.u32 %p1, %r2, 0;\n\t@%p1 st.global.u32 [%rd1+4], %r5;\n\tret;"
    with pytest.raises(RaceError, match="st.global.u32"):
        launch(weak, np.zeros(16, np.uint32), grid=(4, 1, 1))


# two writers (CTAs 1 and 2) each store their half of the data (words 64 (c - 1) + tid = tid + c) and add 1
# to the flag (word 256), CTA 1 with FIRST, CTA 2 with SECOND; the reader (CTA 0) waits for 2 and stores the
# sums at words 192 + tid
TWO_WRITERS = """
	mov.u32 %r5, %ctaid.x;
	add.s64 %rd4, %rd1, 1024;
	mul.wide.u32 %rd2, %r5, 256;
	add.s64 %rd3, %rd1, %rd2;
	mul.wide.u32 %rd2, %r2, 4;
	add.s64 %rd3, %rd3, %rd2;
	setp.eq.u32 %p1, %r5, 0;
	@%p1 bra $L_reader;
	add.u32 %r6, %r2, %r5;
	st.global.u32 [%rd3-256], %r6;
	bar.sync 1, 64;
	setp.eq.u32 %p2, %r2, 0;
	setp.eq.u32 %p6, %r5, 1;
	@%p2 bra $L_signal;
	bra.uni $L_end;
$L_signal:
	@%p6 FIRST
	@!%p6 SECOND
	bra.uni $L_end;
$L_reader:
	setp.ne.u32 %p3, %r2, 0;
	@%p3 bra $L_synced;
$L_poll:
	ld.acquire.gpu.global.b32 %r7, [%rd4];
	setp.ne.u32 %p4, %r7, 2;
	@%p4 nanosleep.u32 50;
	@%p4 bra $L_poll;
$L_synced:
	bar.sync 1, 64;
	ld.global.u32 %r8, [%rd3];
	ld.global.u32 %r9, [%rd3+256];
	add.u32 %r8, %r8, %r9;
	st.global.u32 [%rd3+768], %r8;
$L_end:
	ret;
"""


@pytest.mark.parametrize("mode, seed", MODES)
def test_a_read_modify_write_continues_the_release_sequence(mode, seed):
    """ISA 8.9.2: a write precedes a read in observation order through atomic operations. Both writers'
    `red.release` reach the reader that reads the second one's value: no race, and the sum arrives."""
    body = TWO_WRITERS.replace("FIRST", RED_RELEASE).replace("SECOND", RED_RELEASE)
    out = np.zeros(257, np.uint32)
    launch(body, out, grid=(3, 1, 1), mode=mode, seed=seed)
    assert (out[192:256] == 2 * np.arange(64) + 3).all() and out[256] == 2


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 2)])
@pytest.mark.parametrize("relaxed", [1, 2])
def test_a_relaxed_read_modify_write_passes_the_sequence_on_but_releases_nothing_of_its_own(relaxed, mode, seed):
    """One writer signals with a relaxed `red`, before (CTA 1: eager runs it first) or after the other's
    `red.release`: the release stays on the flag (that writer's data is ordered), the relaxed one releases
    nothing of its own, so the race named is on the relaxed writer's store only."""
    relaxed_red = "red.relaxed.gpu.global.add.s32 [%rd4], 1;"
    body = (TWO_WRITERS.replace("FIRST", relaxed_red if relaxed == 1 else RED_RELEASE)
            .replace("SECOND", relaxed_red if relaxed == 2 else RED_RELEASE))
    with pytest.raises(RaceError) as caught:
        launch(body, np.zeros(257, np.uint32), grid=(3, 1, 1), mode=mode, seed=seed)
    text = str(caught.value)
    assert f"by CTA ({relaxed}, 0, 0)" in text and f"CTA ({3 - relaxed}, 0, 0)" not in text, text


# --------------------------------------------------------------------------------------------------
# polls that are never answered, nanosleep
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "adversarial", "timed"])
@pytest.mark.parametrize("sleep", [True, False])
def test_a_poll_never_answered_is_a_hang_naming_the_poll(mode, sleep):
    """The writer never signals: the reader's poll comes back to the same load with nothing changed, so the
    run ends at once with the hang report (not a step budget spent spinning), naming the polling warp's line
    and the reader's other warps at their bar.sync."""
    body = protocol(release="// no signal")
    if not sleep:
        body = body.replace("@%p4 nanosleep.u32 100;", "")
    with pytest.raises(HangError) as caught:
        handover(body, mode, 1, step_budget=5_000)
    error = caught.value
    assert error.kind == "hang", str(error)
    assert "`ld.acquire.gpu.global.b32 %r7, [%rd4]`: polling memory" in error.report, error.report
    assert "bar.sync 1: 32 of 64 threads arrived" in error.report


@pytest.mark.parametrize("mode", ["eager", "adversarial", "timed"])
def test_a_poll_whose_registers_change_is_not_parked(mode):
    """A poll that counts its passes is not at a fixed point (its registers differ each time): unanswered,
    it runs until the step budget (in the timed mode too), whose report names it."""
    body = protocol(release="// no signal").replace("@%p4 nanosleep.u32 100;", "add.u32 %r9, %r9, 1;")
    with pytest.raises(HangError) as caught:
        handover(body, mode, 1, step_budget=5_000)
    assert caught.value.kind == "budget"
    assert "`ld.acquire.gpu.global.b32 %r7, [%rd4]`: polling memory: nothing new" in caught.value.report


@pytest.mark.parametrize("sleep", [True, False])
def test_a_poll_that_counts_its_passes_still_lets_the_writer_run(sleep):
    """Not at a fixed point, the poll yields after a pass that found nothing new (or sleeps), so that the
    writer's warp, blocked on its bar.sync, runs: the hand-over completes in a few hundred instructions."""
    count = "add.u32 %r9, %r9, 1;"
    counting = protocol().replace("@%p4 nanosleep.u32 100;", count + "\n\t@%p4 nanosleep.u32 100;" if sleep else count)
    for mode, seed in MODES:
        out = np.zeros(129, np.uint32)
        stats = launch(counting, out, grid=(4, 1, 1), cluster=(2, 1, 1), mode=mode, seed=seed)
        assert handed_over(out) and stats.instructions < 2000, (mode, seed, stats.instructions)


def test_nanosleep_ends_the_warps_time_slice():
    """Eager mode: %clock reads the grid's instruction count before the current slice; stamps around a
    nanosleep differ by the instructions the other warp ran in between, stamps around nothing by 0."""
    stamps = """
	shr.u32 %r5, %r2, 5;
	setp.ne.u32 %p1, %r5, 0;
	@%p1 bra $L_other;
	mov.u32 %r8, %clock;
	SLEEP
	mov.u32 %r9, %clock;
	sub.u32 %r3, %r9, %r8;
	bra.uni $L_store;
$L_other:
	mov.u32 %r3, 0;
""" + "\tadd.u32 %r3, %r3, 1;\n" * 40 + "$L_store:\n" + STORE_R3
    for sleep, ran in (("nanosleep.u32 1000;", 40), ("", 0)):
        out = np.zeros(64, np.uint32)
        launch(stamps.replace("SLEEP", sleep), out, grid=(1, 1, 1))
        assert out[0] >= ran and (out[0] == 0) == (ran == 0), (sleep, out[0])


# the writer first spins DELAY passes of a dependent loop, then signals
DELAYED = protocol().replace("\tadd.u32 %r6, %r2, 100;", """	mov.u32 %r10, 0;
$L_delay:
	add.u32 %r10, %r10, 1;
	setp.lt.u32 %p6, %r10, 200;
	@%p6 bra $L_delay;
	add.u32 %r6, %r2, 100;""")


def test_nanosleep_advances_simulated_time_by_its_nanoseconds():
    """Timed mode: the reader's first poll fails (the writer is busy); its next poll comes `t` ns later, so
    the span grows by about t (the ISA allows [0, 2t]; the clock takes t)."""
    spans = {}
    for ns in (100, 20_000):
        out = np.zeros(129, np.uint32)
        stats = launch(DELAYED.replace("nanosleep.u32 100", f"nanosleep.u32 {ns}"), out, grid=(4, 1, 1),
                       cluster=(2, 1, 1), mode="timed")
        assert (out[64:128] == np.arange(64) + 100).all()
        spans[ns] = stats.timing["kernel_us"]
    assert spans[100] < 5 and 20 <= spans[20_000] < 20 + spans[100] + 1


@pytest.mark.parametrize("mode, seed", MODES)
def test_a_poll_outlasts_another_warps_try_wait_time_limit(mode, seed):
    """The writer first peeks at an mbarrier that never completes (one try_wait, no loop): in timed mode it
    is suspended for the ISA's time limit (`try_wait_limit`), while the reader's poll, at a fixed point, is
    all that runs. Not a hang: the writer goes on after the limit and signals."""
    peek = """	setp.eq.u32 %p7, %r2, 0;
	@%p7 mbarrier.init.shared.b64 [%r20], 1;
	bar.sync 0;
	mbarrier.try_wait.parity.shared::cta.b64 %p8, [%r20], 0;
	add.u32 %r6, %r2, 100;"""
    out = handover(protocol().replace("\tadd.u32 %r6, %r2, 100;", peek), mode, seed)
    assert handed_over(out)


def test_strong_loads_and_atomics_read_l2():
    """Timed mode: a strong load (`.acquire`, `.relaxed`, `.volatile`) bypasses L1 (ISA 9.7.9.8: it must
    observe other SMs' writes), so reading a line L1 holds costs the L2 latency; an atom is performed at
    L2 and its result is ready after the same latency."""
    same_line = "add.s32 %r7, %r5, 0;\n\tLOAD\n\tadd.s32 %r6, %r6, %r7;"

    def span(load: str) -> float:
        out = np.zeros(64, np.int32)
        return timed_cycles(LOADS.replace("VARIANT", same_line.replace("LOAD", load)), out)

    weak = span("ld.global.u32 %r6, [%rd1+4];")
    for strong in ("ld.acquire.gpu.global.u32 %r6, [%rd1+4];", "ld.relaxed.gpu.global.u32 %r6, [%rd1+4];",
                   "ld.volatile.global.u32 %r6, [%rd1+4];", "atom.global.add.u32 %r6, [%rd1+4], 0;"):
        assert span(strong) - weak == pytest.approx(B200.latency_global_load - B200.latency_l1_hit), strong


# --------------------------------------------------------------------------------------------------
# CuTe DSL kernels (tests/emulator/global_sync_kernels.py)
# --------------------------------------------------------------------------------------------------

DSL_CASES = ([f"splitk:{mode}:{seed}" for mode, seed in MODES]
             + [f"splitk:{mode}:{seed}:{defect}" for mode, seed in (("eager", 0), ("adversarial", 1), ("timed", 0))
                for defect in ("relaxed-red", "relaxed-poll", "no-poll", "no-signal", "cta-scope", "cutlass-fence",
                               "no-nanosleep")]
             + [f"barrier:{mode}:{seed}" for mode, seed in MODES])


@pytest.fixture(scope="module")
def dsl_results():
    """Every DSL case, run in one process: {case: its record}."""
    if sys.version_info < (3, 10):
        pytest.skip("the DSL needs Python 3.10+")
    import importlib.util

    if importlib.util.find_spec("flashinfer") is None:
        missing("flashinfer-python (its wheel carries NVIDIA's cooperative_launch.py example)")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "emulator" / "global_sync_kernels.py"), *DSL_CASES],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in records}


@pytest.mark.parametrize("mode, seed", MODES)
def test_dsl_split_k_hands_its_partial_over(dsl_results, mode, seed):
    record = dsl_results[f"splitk:{mode}:{seed}"]
    assert record["result"] == "ok" and record["match"] and record["flag"] == 0, record


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("timed", 0)])
@pytest.mark.parametrize("form", ["cutlass-fence", "no-nanosleep"])
def test_dsl_split_k_other_forms_pass(dsl_results, form, mode, seed):
    record = dsl_results[f"splitk:{mode}:{seed}:{form}"]
    assert record["result"] == "ok" and record["match"] and record["flag"] == 0, record


DSL_DEFECTS = {
    "relaxed-red": ("race", ("st.global.v4.f32 [", "ld.global.v4.f32 {")),
    "relaxed-poll": ("race", ("st.global.v4.f32 [", "ld.global.v4.f32 {")),
    "no-poll": ("race", ("st.global.v4.f32 [", "ld.global.v4.f32 {")),
    "cta-scope": ("race", ("red.release.cta.global.add.s32", "morally strong")),
    "no-signal": ("hang", ("`ld.acquire.gpu.global.b32", "polling memory")),
}


@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 1), ("timed", 0)])
@pytest.mark.parametrize("defect", list(DSL_DEFECTS))
def test_dsl_split_k_planted_defect_is_caught(dsl_results, defect, mode, seed):
    record = dsl_results[f"splitk:{mode}:{seed}:{defect}"]
    kind, texts = DSL_DEFECTS[defect]
    assert record["result"] == kind, record
    for text in texts:
        assert text in record["text"], record["text"]


@pytest.mark.parametrize("mode, seed", MODES)
def test_nvidia_grid_barrier_passes_with_no_race(dsl_results, mode, seed):
    """The ground truth: NVIDIA's GlobalBarrier (atom.add.release arrivals, ld.acquire spin, bar.sync), three
    rounds of exchanges between 4 CTAs; the barrier word ends where it began (phase flipped 6 times)."""
    record = dsl_results[f"barrier:{mode}:{seed}"]
    assert record["result"] == "ok" and record["match"] and record["flag"] == 0, record
